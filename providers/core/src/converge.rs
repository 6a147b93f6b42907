//! The one driver of every provider flow: observe (reads only) → a pure plan of typed steps →
//! either execute the steps (`ensure`, `delete`) or render them (`kube-lb plan`).
//!
//! A provider writes each flow once, as a [`Flow`]: `plan` observes the cloud and returns the
//! steps from one observation, `run` performs one step. [`execute`] and [`render`] are the two
//! interpreters of the same steps, so what `plan` lists is, by construction, what `ensure` does
//! next — there is no second, hand-written description that could drift from the apply
//! (Terraform's plan/apply rests on the same idea: one graph, walked or printed).
//!
//! # Phases
//!
//! Some steps need the result of an earlier call: an id the cloud assigns on create, an
//! asynchronous task, a load balancer that must be ready again before the next change. A flow
//! has two ways to express that, and each provider says which it uses:
//!
//! * a **placeholder** ([`Slot`]) within one phase: the step is planned now and takes the value
//!   an earlier step of the same phase produced when it runs (an EIP created, then bound);
//! * a **later phase** ([`Phase`]): the steps are planned from the expected result of the first
//!   phase (shown by `plan`, marked as depending on it), and `execute` plans them again from a
//!   new observation once the first phase has run.
//!
//! `plan` therefore shows the first phase exactly and what follows as depending on it.
//!
//! # Failure
//!
//! A step that fails (or needs a placeholder nothing filled) stops the flow at that step; what
//! already ran stays as the cloud has it, owned and tagged by the step that made it, and the
//! next pass plans again from what it observes. The driver never skips ahead.

use async_trait::async_trait;

use crate::ProviderError;
use crate::plan::PlannedChange;

/// At most this many phases per `execute`: a flow that still has steps to run after them is
/// not converging (each phase re-plans from a new observation), which is a defect to report,
/// not a loop to spin in.
pub const MAX_PHASES: usize = 8;

/// One mutating cloud call a provider's plan contains.
pub trait Step: std::fmt::Debug + Send + Sync {
    /// The call as `kube-lb plan` shows it: action, resource, API operation, the fields it
    /// changes old → new.
    fn describe(&self) -> PlannedChange;
}

/// Steps planned after the first phase has run.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase<S> {
    /// What this phase waits for, in words `plan` prints (`the BLB's id and status available`).
    pub waits_for: String,
    /// Its steps, planned from the first phase's expected result.
    pub steps: Vec<S>,
}

/// What one observation plans: the steps to run now and the phases that depend on them.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan<S> {
    /// The first phase, exact: `execute` runs exactly these, in this order.
    pub steps: Vec<S>,
    /// Phases planned from the expected result of the ones before; re-planned by `execute`.
    pub then: Vec<Phase<S>>,
}

impl<S> Default for Plan<S> {
    fn default() -> Self {
        Plan {
            steps: Vec::new(),
            then: Vec::new(),
        }
    }
}

impl<S> Plan<S> {
    /// A plan of one phase.
    pub fn now(steps: Vec<S>) -> Self {
        Plan {
            steps,
            then: Vec::new(),
        }
    }

    /// Adds a phase that waits for everything planned before it. An empty phase is dropped.
    pub fn then(mut self, waits_for: impl Into<String>, steps: Vec<S>) -> Self {
        if !steps.is_empty() {
            self.then.push(Phase {
                waits_for: waits_for.into(),
                steps,
            });
        }
        self
    }

    /// True when nothing is to be done.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty() && self.then.iter().all(|p| p.steps.is_empty())
    }

    /// Every step, phase after phase.
    pub fn all_steps(&self) -> impl Iterator<Item = &S> {
        self.steps
            .iter()
            .chain(self.then.iter().flat_map(|p| p.steps.iter()))
    }

    /// Appends `other` after this plan: its first phase joins this one's last phase when this
    /// plan has no later phases, else its first phase joins the last of them.
    pub fn append(mut self, other: Plan<S>) -> Self {
        match self.then.last_mut() {
            Some(last) => last.steps.extend(other.steps),
            None => self.steps.extend(other.steps),
        }
        self.then.extend(other.then);
        self
    }
}

/// One flow of one provider (an `ensure` or a `delete` of one Service), written once.
#[async_trait]
pub trait Flow: Send {
    /// The flow's step type.
    type Step: Step;
    /// What the flow returns when done (`LoadBalancerStatus` for `ensure`, `()` for `delete`).
    type Done: Send;

    /// The provider label, for logs.
    fn provider(&self) -> &'static str;

    /// Observes the cloud with reads only and plans, as a pure function of what was read.
    /// Called once by [`render`], and by [`execute`] before every phase. Waiting for a
    /// resource to leave a transitional state is a read and belongs here.
    async fn plan(&mut self) -> Result<Plan<Self::Step>, ProviderError>;

    /// Performs one step of the first phase. A step may fill a [`Slot`] a later step of the
    /// same phase reads.
    async fn run(&mut self, step: &Self::Step) -> Result<(), ProviderError>;

    /// After the last phase: the result, from what was observed and run.
    async fn finish(&mut self) -> Result<Self::Done, ProviderError>;

    /// Asked after each step that ran: true when the step found the cloud changed under the
    /// plan (an ARM etag that no longer matches, a resource someone else modified) and did not
    /// write, so the rest of the phase rests on a stale observation. The driver then plans
    /// again from a new observation instead of running the remaining steps.
    fn observation_stale(&mut self) -> bool {
        false
    }
}

/// Runs `flow` to convergence: plan, run the first phase, and while the plan had later phases,
/// plan again from a new observation and run that. A no-op pass plans nothing and calls
/// nothing that mutates. The flow is borrowed so its shell can look at it after a failure.
pub async fn execute<F: Flow>(flow: &mut F) -> Result<F::Done, ProviderError> {
    for phase in 1..=MAX_PHASES {
        let plan = flow.plan().await?;
        let total = plan.steps.len();
        let mut stale = false;
        for (index, step) in plan.steps.iter().enumerate() {
            let change = step.describe();
            tracing::info!(
                provider = flow.provider(),
                phase,
                step = index + 1,
                of = total,
                call = %change.call,
                kind = %change.kind,
                resource = %change.name,
                "applying"
            );
            if let Err(error) = flow.run(step).await {
                tracing::warn!(
                    provider = flow.provider(),
                    phase,
                    step = index + 1,
                    call = %change.call,
                    resource = %change.name,
                    %error,
                    "step failed; the next pass plans again from what it observes"
                );
                return Err(error);
            }
            if flow.observation_stale() {
                stale = true;
                tracing::info!(
                    provider = flow.provider(),
                    phase,
                    call = %change.call,
                    resource = %change.name,
                    "the cloud changed since it was read; planning again"
                );
                break;
            }
        }
        if plan.then.is_empty() && !stale {
            return flow.finish().await;
        }
    }
    Err(ProviderError::Internal {
        message: format!(
            "{}: still planning steps after {MAX_PHASES} phases; the next pass plans again",
            flow.provider()
        ),
        source: None,
    })
}

/// Renders what [`execute`] would do now, with reads only: the first phase exactly, later
/// phases marked with the phase they belong to and what they wait for.
pub async fn render<F: Flow>(flow: &mut F) -> Result<Vec<PlannedChange>, ProviderError> {
    let plan = flow.plan().await?;
    Ok(describe(&plan))
}

/// The changes of `plan`, as [`render`] lists them.
pub fn describe<S: Step>(plan: &Plan<S>) -> Vec<PlannedChange> {
    let mut changes: Vec<PlannedChange> = plan.steps.iter().map(Step::describe).collect();
    for (index, phase) in plan.then.iter().enumerate() {
        let number = u32::try_from(index + 2).unwrap_or(u32::MAX);
        changes.extend(
            phase
                .steps
                .iter()
                .map(|step| step.describe().in_phase(number, &phase.waits_for)),
        );
    }
    changes
}

/// A value one step of a phase produces and a later step of the same phase reads: the id a
/// create returns, the address an allocation got. Reading an empty slot is an error naming
/// what was missing (the producing step did not run), never a guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot<T> {
    what: &'static str,
    value: Option<T>,
}

impl<T> Slot<T> {
    /// An empty slot for `what` (`the EIP created for the BLB`).
    pub fn new(what: &'static str) -> Self {
        Slot { what, value: None }
    }

    /// A slot already holding `value` (it was observed).
    pub fn known(what: &'static str, value: T) -> Self {
        Slot {
            what,
            value: Some(value),
        }
    }

    /// Stores the value a step produced.
    pub fn fill(&mut self, value: T) {
        self.value = Some(value);
    }

    /// The value, if a step produced it or it was observed.
    pub fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// The value, or the error that stops the flow at the step that needed it.
    pub fn require(&self) -> Result<&T, ProviderError> {
        self.value.as_ref().ok_or_else(|| ProviderError::Internal {
            message: format!(
                "a step needs {}, which no earlier step produced; the next pass plans again",
                self.what
            ),
            source: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ChangeAction;

    /// A toy cloud: a set of names, created one per step; `create` needs the previous one to
    /// exist (a dependency that forces a phase boundary).
    #[derive(Debug, Clone, PartialEq)]
    enum Toy {
        Create(String),
        Tag(String),
    }

    impl Step for Toy {
        fn describe(&self) -> PlannedChange {
            match self {
                Toy::Create(n) => PlannedChange::new(ChangeAction::Create, "Thing", n, "Create"),
                Toy::Tag(n) => PlannedChange::new(ChangeAction::Modify, "Thing", n, "Tag"),
            }
        }
    }

    struct ToyFlow {
        cloud: Vec<(String, bool)>,
        want: Vec<String>,
        calls: Vec<String>,
        fail_on: Option<String>,
        id: Slot<String>,
    }

    #[async_trait]
    impl Flow for ToyFlow {
        type Step = Toy;
        type Done = usize;

        fn provider(&self) -> &'static str {
            "toy"
        }

        async fn plan(&mut self) -> Result<Plan<Toy>, ProviderError> {
            // Pure over `self.cloud`: the first missing thing is created now, and tagged in
            // the same phase (its id comes through the slot); the rest wait for it.
            let missing: Vec<&String> = self
                .want
                .iter()
                .filter(|w| !self.cloud.iter().any(|(n, _)| n == *w))
                .collect();
            let untagged: Vec<Toy> = self
                .cloud
                .iter()
                .filter(|(_, tagged)| !tagged)
                .map(|(n, _)| Toy::Tag(n.clone()))
                .collect();
            let mut plan = Plan::now(untagged);
            if let Some((first, rest)) = missing.split_first() {
                plan.steps.push(Toy::Create((*first).clone()));
                plan.steps.push(Toy::Tag((*first).clone()));
                let later = rest
                    .iter()
                    .flat_map(|n| [Toy::Create((*n).clone()), Toy::Tag((*n).clone())])
                    .collect();
                plan = plan.then("the previous thing", later);
            }
            Ok(plan)
        }

        async fn run(&mut self, step: &Toy) -> Result<(), ProviderError> {
            let text = format!("{step:?}");
            if self.fail_on.as_deref() == Some(text.as_str()) {
                return Err(ProviderError::Retryable {
                    operation: "Tag",
                    message: "boom".into(),
                    source: None,
                });
            }
            self.calls.push(text);
            match step {
                Toy::Create(n) => {
                    self.cloud.push((n.clone(), false));
                    self.id.fill(n.clone());
                }
                Toy::Tag(n) => {
                    let id = if self.cloud.iter().any(|(c, _)| c == n) {
                        n.clone()
                    } else {
                        self.id.require()?.clone()
                    };
                    if let Some(entry) = self.cloud.iter_mut().find(|(c, _)| *c == id) {
                        entry.1 = true;
                    }
                }
            }
            Ok(())
        }

        async fn finish(&mut self) -> Result<usize, ProviderError> {
            Ok(self.cloud.len())
        }
    }

    fn toy(cloud: &[(&str, bool)], want: &[&str]) -> ToyFlow {
        ToyFlow {
            cloud: cloud.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            want: want.iter().map(ToString::to_string).collect(),
            calls: Vec::new(),
            fail_on: None,
            id: Slot::new("the created thing"),
        }
    }

    #[tokio::test]
    async fn render_shows_the_first_phase_exactly_and_marks_what_follows() {
        let changes = render(&mut toy(&[("a", false)], &["a", "b", "c"]))
            .await
            .expect("render");
        let shown: Vec<(String, u32, Option<String>)> = changes
            .iter()
            .map(|c| {
                (
                    format!("{} {}", c.call, c.name),
                    c.phase,
                    c.depends_on.clone(),
                )
            })
            .collect();
        let later = Some("the previous thing".to_string());
        assert_eq!(
            shown,
            vec![
                ("Tag a".into(), 1, None),
                ("Create b".into(), 1, None),
                ("Tag b".into(), 1, None),
                ("Create c".into(), 2, later.clone()),
                ("Tag c".into(), 2, later),
            ]
        );
    }

    #[tokio::test]
    async fn execute_runs_the_rendered_first_phase_then_replans() {
        let mut flow = toy(&[("a", false)], &["a", "b", "c"]);
        let first = flow.plan().await.expect("plan").steps;
        let flow = toy(&[("a", false)], &["a", "b", "c"]);
        // Keep the calls: run the flow through a wrapper that returns them.
        struct Recording(ToyFlow);
        #[async_trait]
        impl Flow for Recording {
            type Step = Toy;
            type Done = Vec<String>;
            fn provider(&self) -> &'static str {
                "toy"
            }
            async fn plan(&mut self) -> Result<Plan<Toy>, ProviderError> {
                self.0.plan().await
            }
            async fn run(&mut self, step: &Toy) -> Result<(), ProviderError> {
                self.0.run(step).await
            }
            async fn finish(&mut self) -> Result<Vec<String>, ProviderError> {
                Ok(self.0.calls.clone())
            }
        }
        let calls = execute(&mut Recording(flow)).await.expect("execute");
        let first: Vec<String> = first.iter().map(|s| format!("{s:?}")).collect();
        assert_eq!(calls[..first.len()], first[..], "phase 1 is the plan");
        assert_eq!(calls.len(), 5, "then c is created and tagged: {calls:?}");
    }

    #[tokio::test]
    async fn a_converged_flow_plans_nothing_and_runs_nothing() {
        assert!(
            render(&mut toy(&[("a", true)], &["a"]))
                .await
                .expect("render")
                .is_empty()
        );
        let mut flow = toy(&[("a", true)], &["a"]);
        assert!(flow.plan().await.expect("plan").is_empty());
        assert_eq!(execute(&mut flow).await.expect("execute"), 1);
    }

    #[tokio::test]
    async fn a_failing_step_stops_the_flow_there() {
        let mut flow = toy(&[], &["a", "b"]);
        flow.fail_on = Some(format!("{:?}", Toy::Tag("a".into())));
        let error = execute(&mut flow).await.expect_err("the tag fails");
        assert!(matches!(error, ProviderError::Retryable { .. }), "{error}");
        assert_eq!(
            flow.calls,
            vec![format!("{:?}", Toy::Create("a".into()))],
            "stopped at the tag"
        );
    }

    #[test]
    fn an_empty_slot_is_an_error_naming_what_is_missing() {
        let slot: Slot<String> = Slot::new("the BLB's id");
        let error = slot.require().expect_err("empty");
        assert!(error.to_string().contains("the BLB's id"), "{error}");
        let mut slot = slot;
        slot.fill("lb-1".into());
        assert_eq!(slot.require().expect("filled"), "lb-1");
    }

    #[test]
    fn append_joins_phases() {
        let a = Plan::now(vec![Toy::Tag("a".into())]).then("x", vec![Toy::Tag("b".into())]);
        let b = Plan::now(vec![Toy::Tag("c".into())]);
        let joined = a.append(b);
        assert_eq!(joined.steps.len(), 1);
        assert_eq!(joined.then[0].steps.len(), 2);
        assert!(Plan::<Toy>::default().is_empty());
        assert_eq!(joined.all_steps().count(), 3);
    }
}

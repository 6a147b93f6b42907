//! The reconcile's decisions, apart from its I/O: from what a Service shows, what was recorded
//! for it last time and what the provider answered, to an ordered list of [`Effect`]s and what
//! the reconcile returns. The shell in `reconcile` gathers the inputs, makes the provider call
//! between two decisions and performs the effects in the order given (the order of writes is
//! part of the behaviour: a status write made before its event, an outcome set after the
//! status it describes).

use std::time::Duration;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::runtime::controller::Action;
use kube_lb_annotations::ParseErrors;
use kube_lb_provider_core::{LoadBalancerStatus, ProviderError};
use tokio::time::Instant;

use super::conditions::Readiness;
use super::events::Reason;
use super::{Error, ObjectState, Outcome, backoff_delay, retry_delay, status};
use crate::metrics::EnsureCause;

/// Hashes of the spec and of the backends given to the provider.
pub(super) type Hashes = (u64, u64);

/// What the last successful ensure of a Service was given and what it wrote, so the next
/// reconcile can tell whether the provider needs calling at all.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Synced {
    /// Hashes of the spec and of the backends as given to the provider.
    pub(super) hashes: Hashes,
    /// The ingress written into the Service's status.
    pub(super) ingress: Vec<LoadBalancerIngress>,
    /// When the periodic resync is due (it repairs drift made outside Kubernetes).
    pub(super) fresh_until: Instant,
}

/// A refused change in force ([`ProviderError::Refused`]): what the Service shows until it
/// changes, so a status wiped meanwhile is written again without asking the provider.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Refusal {
    /// The ingress of the load balancer that keeps serving.
    pub(super) ingress: Vec<LoadBalancerIngress>,
    /// The condition naming the refusal.
    pub(super) readiness: Readiness,
}

/// A status write this controller made while a retry was pending, and when that retry is due.
/// The write comes back as a watch event that would run the reconcile at once; recognised by
/// its resourceVersion, it must not bring the retry forward (a throttled cloud would get one
/// extra call per change of the condition).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Echo {
    /// `metadata.resourceVersion` the write produced.
    pub(super) resource_version: String,
    /// Hashes of the spec and backends the failed ensure was given (`None` for a delete).
    pub(super) hashes: Option<Hashes>,
    /// When the retry is due.
    pub(super) retry_at: Instant,
}

/// The controller settings the decisions depend on.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// First backoff step (also the recheck of a load balancer without an address yet).
    pub(super) backoff_base: Duration,
    /// Backoff ceiling (also the recheck of an error that can clear outside the Service).
    pub(super) backoff_max: Duration,
    /// Period of the resync that repairs drift.
    pub(super) resync: Duration,
}

/// A change to the per-Service record. Times that the original flow took after a write are
/// durations here, turned into instants when the change is recorded.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Update {
    /// The load balancer's state is unknown until an ensure succeeds.
    Unsynced,
    /// The warnings of the Service with this fingerprint were published.
    Warned(u64),
    /// One more failure to retry, after this (jittered) delay.
    Failed { failures: u32, retry_in: Duration },
    /// A failure the user must fix; `recheck_at` when it can clear outside the Service.
    UserError {
        fingerprint: u64,
        recheck_at: Option<Instant>,
        refused: Option<Refusal>,
    },
    /// Another controller implements the load balancer.
    HandedOver { hashes: Hashes },
    /// The ensure succeeded: failures, user errors and echoes are history.
    Ensured { hashes: Hashes },
    /// The Service shows the address; the next ensure may be skipped for `fresh_for`.
    Synced {
        hashes: Hashes,
        ingress: Vec<LoadBalancerIngress>,
        fresh_for: Duration,
    },
}

impl Update {
    /// Records the change at `now`.
    pub(super) fn record(self, state: &mut ObjectState, now: Instant) {
        match self {
            Update::Unsynced => state.synced = None,
            Update::Warned(fingerprint) => state.warned = Some(fingerprint),
            Update::Failed { failures, retry_in } => {
                state.failures = failures;
                state.retry_in = Some(retry_in);
            }
            Update::UserError {
                fingerprint,
                recheck_at,
                refused,
            } => {
                state.user_error = Some(fingerprint);
                state.recheck_at = recheck_at;
                state.refused = refused;
            }
            Update::HandedOver { hashes } => {
                state.failures = 0;
                state.applied = Some(hashes);
            }
            Update::Ensured { hashes } => {
                state.failures = 0;
                state.user_error = None;
                state.recheck_at = None;
                state.refused = None;
                state.applied = Some(hashes);
                state.echo = None;
            }
            Update::Synced {
                hashes,
                ingress,
                fresh_for,
            } => {
                state.synced = Some(Synced {
                    hashes,
                    ingress,
                    fresh_until: now + fresh_for,
                });
            }
        }
    }
}

/// What to do when a status write fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OnError {
    /// The reconcile fails with the write's error.
    Fail,
    /// The failure being reported is what the reconcile returns; the write's error is logged.
    Log,
}

/// The condition a status write leaves.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Condition {
    /// Show this.
    Set(Readiness),
    /// Remove kube-lb's condition.
    Remove,
}

/// One step of a reconcile's output, performed in order.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Effect {
    /// Change the per-Service record.
    Record(Update),
    /// Publish an event.
    Publish(Reason, String),
    /// Set the Service's outcome.
    Outcome(Option<Outcome>),
    /// Drop everything recorded for the Service (its load balancer is gone).
    Forget,
    /// Patch the status (ingress when given, and the condition) unless it is shown already.
    WriteStatus {
        ingress: Option<Vec<LoadBalancerIngress>>,
        condition: Condition,
        on_error: OnError,
    },
    /// Remember the last status write of this reconcile (when there was one) as an [`Echo`]
    /// of a retry due after `delay`.
    Echo {
        hashes: Option<Hashes>,
        delay: Duration,
    },
    /// Log that a refused change leaves the existing load balancer serving these addresses.
    NoteRefusal(Vec<String>),
    /// Add (`true`) or remove (`false`) the finalizer.
    Finalizer(bool),
}

/// How a reconcile goes on after the effects.
#[derive(Debug)]
pub(super) enum Next {
    /// Make the provider call; a second decision follows its outcome.
    Call,
    /// Return this action.
    Return(Action),
    /// Fail with this error (the error policy picks the retry).
    Fail(Error),
}

/// A decision: effects to perform, in order, then how to go on.
#[derive(Debug)]
pub(super) struct Plan {
    pub(super) effects: Vec<Effect>,
    pub(super) next: Next,
}

impl Plan {
    fn new(effects: Vec<Effect>, next: Next) -> Self {
        Plan { effects, next }
    }
}

/// Adds the finalizer before any cloud call; its update triggers the next reconcile.
pub(super) fn add_finalizer() -> Plan {
    Plan::new(
        vec![Effect::Finalizer(true)],
        Next::Return(Action::await_change()),
    )
}

/// What a standing user error allows.
#[derive(Debug)]
pub(super) enum Gate {
    /// Already reported and unchanged: nothing can succeed now.
    Hold(Plan),
    /// Unchanged, but the error can clear outside the Service and its recheck is due.
    Recheck,
    /// No user error stands for this version of the Service.
    Proceed,
}

/// Whether a user error recorded for the Service still stands. A refused change left its load
/// balancer serving: when the Service stopped showing it (its status was wiped or rewritten
/// meanwhile), it shows it again, without a provider call. An error that can clear outside
/// the Service keeps its recheck: this pass (a resync, an unrelated event) must not cancel it.
pub(super) fn user_error_gate(state: &ObjectState, fingerprint: u64, now: Instant) -> Gate {
    if state.user_error != Some(fingerprint) {
        return Gate::Proceed;
    }
    let recheck_at = state.recheck_at;
    if recheck_at.is_some_and(|at| at <= now) {
        return Gate::Recheck;
    }
    let effects = state
        .refused
        .iter()
        .map(|refusal| Effect::WriteStatus {
            ingress: Some(refusal.ingress.clone()),
            condition: Condition::Set(refusal.readiness.clone()),
            on_error: OnError::Fail,
        })
        .collect();
    let action = recheck_at.map_or_else(Action::await_change, |at| {
        Action::requeue(at.saturating_duration_since(now))
    });
    Gate::Hold(Plan::new(effects, Next::Return(action)))
}

/// The annotation warnings, published once per version of what the user controls. One event
/// for all: several events with the same reason would be folded into one series by the
/// recorder, losing all but one text.
pub(super) fn annotation_warnings(
    state: &ObjectState,
    warnings: &[String],
    fingerprint: u64,
) -> Vec<Effect> {
    if warnings.is_empty() {
        return Vec::new();
    }
    let mut effects = vec![Effect::Record(Update::Warned(fingerprint))];
    if state.warned != Some(fingerprint) {
        effects.push(Effect::Publish(
            Reason::AnnotationWarning,
            warnings.join("; "),
        ));
    }
    effects
}

/// The Service does not parse: reported, and not retried until it changes.
pub(super) fn invalid(errors: ParseErrors, fingerprint: u64, warnings: &[String]) -> Plan {
    let text = errors.to_string();
    let readiness = Readiness::invalid(&errors).with_ignored(warnings);
    Plan::new(
        vec![
            Effect::Publish(Reason::SyncLoadBalancerFailed, text.clone()),
            Effect::Record(Update::UserError {
                fingerprint,
                recheck_at: None,
                refused: None,
            }),
            Effect::Outcome(Some(Outcome::UserError(text))),
            Effect::WriteStatus {
                ingress: None,
                condition: Condition::Set(readiness),
                on_error: OnError::Log,
            },
        ],
        Next::Fail(Error::InvalidService(errors)),
    )
}

/// Why an ensure is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Skip {
    /// Nothing the provider is given changed; the periodic resync comes after this.
    InSync(Duration),
    /// Woken by our own status write of a failure being backed off; the retry comes after this.
    Echo(Duration),
}

/// Whether the ensure can be skipped, and what to do instead. In sync: a Node, EndpointSlice
/// or status-only event that changed nothing the provider is given; the condition is still
/// brought up to date (an annotation edit that only adds a warning leaves the spec as it was,
/// and someone may have edited the condition). An echo: the retry stays where the backoff put
/// it.
pub(super) fn skip(
    state: &ObjectState,
    service: &Service,
    hashes: Hashes,
    warnings: &[String],
    now: Instant,
) -> Option<(Skip, Plan)> {
    if let Some(next_resync) = skip_ensure(state.synced.as_ref(), hashes, service, now) {
        let effects = state
            .synced
            .iter()
            .map(|synced| Effect::WriteStatus {
                ingress: None,
                condition: Condition::Set(
                    Readiness::provisioned(&status::addresses(&synced.ingress))
                        .with_ignored(warnings),
                ),
                on_error: OnError::Fail,
            })
            .collect();
        let plan = Plan::new(effects, Next::Return(Action::requeue(next_resync)));
        return Some((Skip::InSync(next_resync), plan));
    }
    let wait = echo_wait(state.echo.as_ref(), service, Some(hashes), now)?;
    Some((
        Skip::Echo(wait),
        Plan::new(Vec::new(), Next::Return(Action::requeue(wait))),
    ))
}

/// Before the ensure: the load balancer's state is unknown until it succeeds (never skip on
/// old news), and a changed spec is announced.
pub(super) fn before_ensure(state: &ObjectState, hashes: Hashes) -> Plan {
    let mut effects = vec![Effect::Record(Update::Unsynced)];
    if spec_changed(state, hashes) {
        effects.push(Effect::Publish(
            Reason::EnsuringLoadBalancer,
            "Ensuring load balancer".into(),
        ));
    }
    Plan::new(effects, Next::Call)
}

/// Why this ensure is made: a changed spec (or none applied yet), only changed backends (a host
/// update, as upstream's service controller tells them apart), or neither (a resync).
pub(super) fn ensure_cause(state: &ObjectState, hashes: Hashes) -> EnsureCause {
    if spec_changed(state, hashes) {
        EnsureCause::Spec
    } else if state.applied.map(|a| a.1) != Some(hashes.1) {
        EnsureCause::Hosts
    } else {
        EnsureCause::Resync
    }
}

fn spec_changed(state: &ObjectState, hashes: Hashes) -> bool {
    state.applied.map(|a| a.0) != Some(hashes.0)
}

/// What an ensure is decided from besides its outcome.
#[derive(Debug, Clone, Copy)]
pub(super) struct EnsureInput<'a> {
    /// Hashes of the spec and backends the provider was given.
    pub(super) hashes: Hashes,
    /// Fingerprint of what the user controls.
    pub(super) fingerprint: u64,
    /// The annotation warnings, named in the condition.
    pub(super) warnings: &'a [String],
    /// Settings.
    pub(super) timing: Timing,
    /// A uniform draw in [0, 1) for the jitter of a retry.
    pub(super) jitter: f64,
    /// When the provider answered.
    pub(super) now: Instant,
}

/// After the ensure, from its outcome. `state` is the record as it stands after
/// [`before_ensure`].
pub(super) fn after_ensure(
    state: &ObjectState,
    input: EnsureInput<'_>,
    outcome: Result<LoadBalancerStatus, ProviderError>,
) -> Plan {
    match outcome {
        Ok(lb_status) => ensured(state, input, &lb_status),
        // Another controller owns this load balancer (upstream's ImplementedElsewhere): no
        // Warning, no retry loop; the finalizer stays as upstream keeps it, so deletion still
        // passes through us and finds nothing of ours to remove. A condition from before the
        // Service was handed over would only mislead.
        Err(ProviderError::ImplementedElsewhere) => Plan::new(
            vec![
                Effect::Record(Update::HandedOver {
                    hashes: input.hashes,
                }),
                Effect::Outcome(Some(Outcome::ImplementedElsewhere)),
                Effect::WriteStatus {
                    ingress: None,
                    condition: Condition::Remove,
                    on_error: OnError::Fail,
                },
            ],
            Next::Return(Action::await_change()),
        ),
        Err(error) if error.is_retryable() => {
            let (mut effects, delay) = retry(
                state,
                input.timing,
                input.jitter,
                "Error syncing load balancer",
                &error,
            );
            if let Some(Effect::Publish(_, text)) = effects.last() {
                effects.push(Effect::Outcome(Some(Outcome::Retrying(text.clone()))));
            }
            if let Some(readiness) = Readiness::from_provider(&error) {
                effects.push(Effect::WriteStatus {
                    ingress: None,
                    condition: Condition::Set(readiness.with_ignored(input.warnings)),
                    on_error: OnError::Log,
                });
                effects.push(Effect::Echo {
                    hashes: Some(input.hashes),
                    delay,
                });
            }
            Plan::new(effects, Next::Fail(Error::Provider(error)))
        }
        Err(error) => refused(input, error),
    }
}

fn ensured(state: &ObjectState, input: EnsureInput<'_>, lb_status: &LoadBalancerStatus) -> Plan {
    let hashes = input.hashes;
    let ingress = status::ingress(lb_status);
    let shown = status::addresses(&ingress);
    let readiness = if shown.is_empty() {
        Readiness::awaiting_address()
    } else {
        Readiness::provisioned(&shown)
    }
    .with_ignored(input.warnings);
    // The address and the condition in one write.
    let mut effects = vec![Effect::WriteStatus {
        ingress: Some(ingress.clone()),
        condition: Condition::Set(readiness),
        on_error: OnError::Fail,
    }];
    if spec_changed(state, hashes) {
        effects.push(Effect::Publish(
            Reason::EnsuredLoadBalancer,
            "Ensured load balancer".into(),
        ));
    } else if state.applied.map(|a| a.1) != Some(hashes.1) {
        effects.push(Effect::Publish(
            Reason::UpdatedLoadBalancer,
            "Updated load balancer with new hosts".into(),
        ));
    }
    effects.push(Effect::Record(Update::Ensured { hashes }));
    if shown.is_empty() {
        // The provider is still provisioning (e.g. a DNS name not assigned yet).
        let recheck = input.timing.backoff_base;
        effects.push(Effect::Outcome(Some(Outcome::Retrying(
            "load balancer has no address yet".into(),
        ))));
        effects.push(Effect::Echo {
            hashes: Some(hashes),
            delay: recheck,
        });
        return Plan::new(effects, Next::Return(Action::requeue(recheck)));
    }
    effects.push(Effect::Record(Update::Synced {
        hashes,
        ingress,
        fresh_for: input.timing.resync,
    }));
    effects.push(Effect::Outcome(Some(Outcome::Ready(shown))));
    Plan::new(effects, Next::Return(Action::requeue(input.timing.resync)))
}

/// A failure the user must fix. A refusal leaves the load balancer that exists serving: the
/// Service shows its address along with the condition naming the refusal, in one write, as a
/// successful ensure writes them; a failed write fails the reconcile, and the retry finds the
/// refusal recorded and writes it again.
fn refused(input: EnsureInput<'_>, error: ProviderError) -> Plan {
    let readiness = Readiness::from_provider(&error).map(|r| r.with_ignored(input.warnings));
    let refusal = match (error.current_status(), &readiness) {
        (Some(current), Some(readiness)) => Some(Refusal {
            ingress: status::ingress(current),
            readiness: readiness.clone(),
        }),
        _ => None,
    };
    let recheck_at = error
        .may_clear_outside_the_service()
        .then(|| input.now + input.timing.backoff_max);
    let mut effects = vec![
        Effect::Publish(
            Reason::SyncLoadBalancerFailed,
            format!("Error syncing load balancer: {error}"),
        ),
        Effect::Record(Update::UserError {
            fingerprint: input.fingerprint,
            recheck_at,
            refused: refusal.clone(),
        }),
        Effect::Outcome(Some(Outcome::UserError(error.to_string()))),
    ];
    if let Some(refusal) = refusal {
        effects.push(Effect::WriteStatus {
            ingress: Some(refusal.ingress.clone()),
            condition: Condition::Set(refusal.readiness),
            on_error: OnError::Fail,
        });
        effects.push(Effect::NoteRefusal(status::addresses(&refusal.ingress)));
    } else if let Some(readiness) = readiness {
        effects.push(Effect::WriteStatus {
            ingress: None,
            condition: Condition::Set(readiness),
            on_error: OnError::Log,
        });
    }
    Plan::new(effects, Next::Fail(Error::Provider(error)))
}

/// Counts a failure that will be retried and draws the delay before the retry (the error
/// policy uses the same delay, so the Warning announcing it tells the truth); the Warning
/// names the upper bound of the jittered delay. The bound only changes while the backoff
/// grows, so a cause that persists yields a handful of events, then none until it changes.
fn retry(
    state: &ObjectState,
    timing: Timing,
    jitter: f64,
    what: &str,
    error: &ProviderError,
) -> (Vec<Effect>, Duration) {
    let (base, max) = (timing.backoff_base, timing.backoff_max);
    let failures = state.failures.saturating_add(1);
    let retry_in = retry_delay(base, max, failures, jitter);
    let within = backoff_delay(base, max, failures);
    let text = format!(
        "{what}: {error}; will retry within {}",
        humantime::format_duration(within)
    );
    let effects = vec![
        Effect::Record(Update::Failed { failures, retry_in }),
        Effect::Publish(Reason::SyncLoadBalancerFailed, text),
    ];
    (effects, retry_in)
}

/// Before the delete: wait when woken by the condition of a failed delete being backed off,
/// else announce it.
pub(super) fn before_delete(state: &ObjectState, service: &Service, now: Instant) -> Plan {
    if let Some(wait) = echo_wait(state.echo.as_ref(), service, None, now) {
        return Plan::new(Vec::new(), Next::Return(Action::requeue(wait)));
    }
    Plan::new(
        vec![Effect::Publish(
            Reason::DeletingLoadBalancer,
            "Deleting load balancer".into(),
        )],
        Next::Call,
    )
}

/// After the delete, from its outcome. Only a delete that removed the load balancer returns
/// [`Action::await_change`]; with `finalize` it also removes the finalizer (a release first
/// clears the status). Every delete failure is retried: the Service is going away or no longer
/// ours, so no edit by its author could help, and the finalizer must come off; the failure is
/// said on the Service too, so a deletion stuck on the cloud shows why.
pub(super) fn after_delete(
    state: &ObjectState,
    timing: Timing,
    jitter: f64,
    finalize: bool,
    outcome: Result<(), ProviderError>,
) -> Plan {
    match outcome {
        // Nothing of ours exists for a load balancer another controller implements.
        Ok(()) | Err(ProviderError::ImplementedElsewhere) => {
            let mut effects = vec![
                Effect::Publish(Reason::DeletedLoadBalancer, "Deleted load balancer".into()),
                Effect::Forget,
            ];
            if finalize {
                effects.push(Effect::Finalizer(false));
            }
            Plan::new(effects, Next::Return(Action::await_change()))
        }
        Err(error) => {
            let (mut effects, delay) = retry(
                state,
                timing,
                jitter,
                "Error deleting load balancer",
                &error,
            );
            effects.push(Effect::WriteStatus {
                ingress: None,
                condition: Condition::Set(Readiness::delete_failed(&error)),
                on_error: OnError::Log,
            });
            effects.push(Effect::Echo {
                hashes: None,
                delay,
            });
            Plan::new(effects, Next::Fail(Error::Delete(error)))
        }
    }
}

/// The last step of a release, once the load balancer is gone and the status cleared, from
/// the Service as stored now. Made a load balancer of ours again meanwhile: the finalizer
/// stays (dropping it now would let a delete that follows skip the cleanup of the load
/// balancer the next reconcile creates) and the Service is ensured again soon.
pub(super) fn finish_release(managed_again: bool, retry_soon: Duration) -> Plan {
    if managed_again {
        return Plan::new(Vec::new(), Next::Return(Action::requeue(retry_soon)));
    }
    Plan::new(
        vec![Effect::Finalizer(false)],
        Next::Return(Action::await_change()),
    )
}

/// `Some(time to the next periodic resync)` when the ensure can be skipped: the last ensure
/// succeeded with this very spec and backends, the Service still shows the address it
/// returned, and the periodic resync is not due; `None` when the provider must be called.
pub(super) fn skip_ensure(
    synced: Option<&Synced>,
    hashes: Hashes,
    service: &Service,
    now: Instant,
) -> Option<Duration> {
    let synced = synced?;
    let unchanged = synced.hashes == hashes;
    // Someone cleared or edited the status: write it again, through a fresh ensure.
    let status_intact = status::ingress_shown(service, &synced.ingress);
    (unchanged && status_intact && now < synced.fresh_until).then(|| synced.fresh_until - now)
}

/// `Some(time until the retry)` when `service` is exactly what our own write left (same
/// resourceVersion, same spec and backends) and the retry is not due yet; `None` when the
/// reconcile must go ahead.
pub(super) fn echo_wait(
    echo: Option<&Echo>,
    service: &Service,
    hashes: Option<Hashes>,
    now: Instant,
) -> Option<Duration> {
    let echo = echo?;
    let same = service.metadata.resource_version.as_deref() == Some(echo.resource_version.as_str())
        && echo.hashes == hashes;
    (same && now < echo.retry_at).then(|| echo.retry_at - now)
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;

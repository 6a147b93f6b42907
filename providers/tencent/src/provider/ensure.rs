//! `ensure` of one Service as a [`Flow`]: observe (reads only), plan, and either run the steps
//! ([`converge::execute`]) or render them ([`converge::render`], `kube-lb plan`).
//!
//! Phases: a CLB created for the Service gets its id (and its addresses) from the cloud, and
//! everything on it needs that id, so a missing CLB forces a phase boundary: phase 1 ends with
//! `CreateLoadBalancer` (whose `run` waits for the task and for the CLB's `Status 1`), and
//! phase 2 ("the CLB's id") — its security group, listeners and targets, shown by `plan` as
//! planned on an empty CLB — is planned again from a new observation of the CLB once it exists.
//! Within a phase two kinds of id are placeholders filled by an earlier step of the same
//! phase ([`Produced`]): the security group `CreateSecurityGroup` makes (then given policies
//! and bound), and the listeners `CreateListener` makes (then given targets). Every other
//! value a step needs is observed before the plan.
//!
//! Refusals are decided here, in `plan`, before any step: a network-kind switch the CLB
//! cannot take, source ranges on a user's CLB, a user CLB that may not be reused, a port held
//! by a listener kube-lb does not own. A refused Service makes no mutating call at all, and
//! `plan` shows the refusal as the error instead of steps.

use async_trait::async_trait;
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_provider_core::converge::{Flow, Plan};
use kube_lb_provider_core::{BackendNode, EnvironmentCause, LoadBalancerStatus, ProviderError};
use serde_json::Value;

use super::TencentProvider;
use super::steps::{Produced, TencentStep};
use crate::client::LoadBalancer;
use crate::plan::{self, Desired, Observed, Placement};
use crate::source_ranges;

/// What phase 2 waits for when phase 1 creates the CLB.
pub(crate) const WAITS_FOR_CLB: &str = "the CLB's id";

/// The name steps planned for a CLB not created yet carry.
const NEW_CLB: &str = "(new)";

/// `ensure` of one Service.
pub(crate) struct EnsureFlow<'a> {
    provider: &'a TencentProvider,
    spec: &'a LoadBalancerSpec,
    desired: Desired,
    produced: Produced,
    /// The Service's CLB as the last plan observed it (`None`: not created yet).
    load_balancer: Option<LoadBalancer>,
    /// True when the last plan found none of the Service's listeners on its CLB.
    fresh_listeners: bool,
}

impl<'a> EnsureFlow<'a> {
    /// The flow for `spec` with the backends the controller selected.
    pub(crate) fn new(
        provider: &'a TencentProvider,
        spec: &'a LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Self, ProviderError> {
        let desired = provider.desired(spec, backends)?;
        Ok(EnsureFlow {
            provider,
            spec,
            desired,
            produced: Produced::default(),
            load_balancer: None,
            fresh_listeners: true,
        })
    }

    /// What the Service wants.
    pub(crate) fn desired(&self) -> &Desired {
        &self.desired
    }
}

#[async_trait]
impl Flow for EnsureFlow<'_> {
    type Step = TencentStep;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        "tencent"
    }

    async fn plan(&mut self) -> Result<Plan<TencentStep>, ProviderError> {
        let provider = self.provider;
        let desired = &self.desired;
        TencentProvider::refuse_unenforceable(self.spec, desired)?;
        // Ids produced by an earlier phase were observed by now; a new phase starts empty.
        let created = self.produced.created_load_balancer.take();
        self.produced = Produced {
            created_load_balancer: created,
            ..Produced::default()
        };
        let owned = provider.owned(&desired.service).await?;
        let mut first: Vec<TencentStep> = Vec::new();
        let target: Option<LoadBalancer> = match &desired.placement {
            Placement::Existing(id) => {
                let lb = provider.existing(id).await?;
                // Moving to a user's CLB releases the ones kube-lb made.
                first.extend(owned.iter().map(|old| TencentStep::DeleteLoadBalancer {
                    id: old.load_balancer_id.clone(),
                }));
                Some(lb)
            }
            Placement::Owned(body) => {
                let mut owned_iter = owned.iter();
                match owned_iter.next() {
                    Some(lb) => {
                        // A kind the CLB cannot take is refused before anything is written:
                        // the CLB keeps serving as it is, and the Service keeps its address.
                        if let Some(refusal) = plan::network_kind_refusal(lb, body) {
                            return Err(ProviderError::refused(
                                refusal,
                                TencentProvider::status_of(lb),
                            ));
                        }
                        // A second CLB tagged for the Service (a create repeated elsewhere).
                        first.extend(owned_iter.map(|extra| TencentStep::DeleteLoadBalancer {
                            id: extra.load_balancer_id.clone(),
                        }));
                        // Waiting for a CLB to leave `creating` is a read.
                        if lb.status == 1 {
                            Some(lb.clone())
                        } else {
                            Some(provider.wait_ready(&lb.load_balancer_id).await?)
                        }
                    }
                    None => None,
                }
            }
        };
        // The Service's listeners leave the CLB recorded on it when that is not the target
        // (a CLB of kube-lb's being deleted whole needs no listener deletes first).
        let target_id = target.as_ref().map(|lb| lb.load_balancer_id.as_str());
        if let Some(old) = desired
            .recorded_load_balancer_id
            .as_deref()
            .filter(|recorded| Some(*recorded) != target_id)
            .filter(|recorded| !owned.iter().any(|lb| lb.load_balancer_id == *recorded))
        {
            let ours = provider
                .listeners_named(old, &desired.listener_name)
                .await?;
            if !ours.is_empty() {
                first.push(TencentStep::RemoveListeners {
                    lb: old.to_string(),
                    ids: ours.iter().map(|l| l.listener_id.clone()).collect(),
                    described: ours
                        .iter()
                        .map(|l| format!("{}:{}", l.protocol, l.port))
                        .collect(),
                });
            }
        }
        let (observed, lb_name) = match &target {
            Some(lb) => (
                provider.observe(lb, &desired.service).await?,
                lb.load_balancer_id.clone(),
            ),
            None => (Observed::default(), NEW_CLB.to_string()),
        };
        // Listener steps are pure over the observation; a foreign listener on a wanted
        // port is refused here, before any step.
        let listener_steps = plan::plan(&observed, desired)?;
        self.fresh_listeners = !observed.listeners.iter().any(|l| observed.owns(l, desired));
        let mut on_clb: Vec<TencentStep> = Vec::new();
        if let Placement::Owned(_) = desired.placement {
            // Before the listeners: a new port is never reachable from outside the ranges.
            let name = source_ranges::group_name(&desired.service);
            on_clb.extend(
                provider
                    .source_range_steps(target.as_ref(), self.spec, desired)
                    .await?
                    .into_iter()
                    .map(|step| TencentStep::Group {
                        lb: lb_name.clone(),
                        name: name.clone(),
                        step,
                    }),
            );
        }
        on_clb.extend(
            listener_steps
                .into_iter()
                .map(|step| TencentStep::Listener {
                    lb: lb_name.clone(),
                    step,
                }),
        );
        let create = match (&desired.placement, &target) {
            (Placement::Owned(body), None) => Some(TencentStep::CreateLoadBalancer {
                name: body
                    .get("LoadBalancerName")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                body: body.clone(),
            }),
            _ => None,
        };
        self.load_balancer = target;
        Ok(match create {
            // Everything on the CLB needs its id: planned again once it exists.
            Some(create) => {
                first.push(create);
                Plan::now(first).then(WAITS_FOR_CLB, on_clb)
            }
            None => {
                first.extend(on_clb);
                Plan::now(first)
            }
        })
    }

    async fn run(&mut self, step: &TencentStep) -> Result<(), ProviderError> {
        self.provider
            .run_step(step, Some(&self.desired), &mut self.produced)
            .await
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        let desired = &self.desired;
        // A CLB created with nothing planned on it yet is the one the create waited for.
        let lb = self
            .load_balancer
            .as_ref()
            .or(self.produced.created_load_balancer.as_ref())
            .ok_or_else(|| ProviderError::Internal {
                message: format!(
                    "{}: the CLB was not observed after it was created; the next pass plans again",
                    desired.service
                ),
                source: None,
            })?;
        if desired.selector_matched_nothing {
            // Converged (the CLB has no targets, as TKE does), but never silently.
            return Err(ProviderError::environment(
                "DescribeTargets",
                EnvironmentCause::MissingDependency,
                format!(
                    "service.kubernetes.io/qcloud-loadbalancer-backends-label matches no ready node: CLB {} has no targets",
                    lb.load_balancer_id
                ),
            ));
        }
        let mut status = TencentProvider::status_of(lb);
        status.annotations = plan::written_back(
            desired,
            &lb.load_balancer_id,
            self.produced.created_load_balancer.is_some(),
            self.fresh_listeners,
        );
        Ok(status)
    }
}

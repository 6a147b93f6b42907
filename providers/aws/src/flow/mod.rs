//! `ensure` as one [`Flow`] for the core driver: observe (reads only) → the pure planners
//! (`clb::plan`, `nlb::plan`, `sg::diff_rules`, `nodes`) → [`AwsStep`]s, which
//! [`converge::execute`](kube_lb_provider_core::converge::execute) runs (`ensure`) and
//! [`converge::render`](kube_lb_provider_core::converge::render) lists (`kube-lb plan`). The
//! two differ only in how they read ([`Mode`]): `ensure` may use the shared listings and the
//! verified cache, `plan` reads everything itself.
//!
//! Phases: what needs the result of an earlier call is planned as a later phase, re-planned
//! from a new observation once the earlier phase ran:
//! the other kind of load balancer is removed first (break-before-make, see `delete`). Within
//! a phase, the Classic ELB's own `k8s-elb-` group is created before its rules, the ELB that
//! uses it and the node rules that admit it; those take its ID from a [`Slot`] when they run
//! (`plan` names the group by its name).

use std::collections::BTreeSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use async_trait::async_trait;
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_provider_core::converge::{Flow, Plan};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{BackendNode, LoadBalancerIngress, LoadBalancerStatus, ProviderError};

use crate::clb::plan::ClbDesired;
use crate::desired::ServiceSpec;
use crate::error::AwsError;
use crate::nlb::plan::{NlbDesired, NlbObserved};
use crate::nodes;
use crate::provider::{AwsProvider, Verified};
use crate::sg::ObservedGroup;
use crate::steps::AwsStep;

mod classic;
mod fast_path;
mod network;
mod removal;
mod runner;

pub(crate) use removal::{clb_side_revokes, nlb_side_steps};
pub(crate) use runner::Runner;

/// How a flow reads the cloud.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `ensure`: the shared listings and the verified cache may answer.
    Execute,
    /// `kube-lb plan`: every read is the flow's own (a listing read would be marked as used,
    /// the cache would skip what changed behind kube-lb's back).
    Render,
}

/// Which kind of load balancer the Service wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Classic ELB.
    Classic,
    /// NLB.
    Nlb,
}

/// The status a load balancer's DNS name gives.
pub(crate) fn status(hostname: Option<String>) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: hostname
            .map(|h| LoadBalancerIngress {
                ip: None,
                hostname: Some(h),
                ip_mode: None,
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// What the verified cache compares: the spec and the node groups the instances are in.
fn fingerprint(spec: &LoadBalancerSpec, groups: &BTreeSet<String>) -> u64 {
    let mut hasher = DefaultHasher::new();
    format!("{spec:?}").hash(&mut hasher);
    groups.hash(&mut hasher);
    hasher.finish()
}

/// What `finish` reports and remembers, set by the last plan.
#[derive(Debug)]
enum Outcome {
    Clb {
        fingerprint: u64,
        at: Instant,
        desired: ClbDesired,
        dns: Option<String>,
    },
    Nlb {
        fingerprint: u64,
        at: Instant,
        desired: NlbDesired,
        /// The NLB as observed (or, on the fast path, as the cache knows it), unless this
        /// pass (re)creates it.
        base: Option<NlbObserved>,
    },
}

/// `ensure` of one Service, for either kind.
pub(crate) struct EnsureFlow<'a> {
    provider: &'a AwsProvider,
    /// The Service's spec and its AWS part, unpacked once by the provider's entry.
    svc: ServiceSpec<'a>,
    backends: &'a [BackendNode],
    mode: Mode,
    kind: Kind,
    /// The other kind may still exist (a kind change, or nothing verified by this process
    /// yet): it is looked for, and removed first, when this kind's load balancer is absent.
    retire_other: bool,
    name: String,
    runner: Runner,
    outcome: Option<Outcome>,
    /// The Classic ELB's description the fast path read before it fell back to the full
    /// plan (`Some(None)`: it is gone), so the full plan does not describe it again.
    described_clb: Option<Option<crate::clb::plan::ClbObserved>>,
}

impl<'a> EnsureFlow<'a> {
    /// A flow for `svc` of `kind`.
    pub(crate) fn new(
        provider: &'a AwsProvider,
        svc: ServiceSpec<'a>,
        backends: &'a [BackendNode],
        mode: Mode,
        kind: Kind,
        retire_other: bool,
    ) -> Self {
        EnsureFlow {
            provider,
            svc,
            backends,
            mode,
            kind,
            retire_other,
            name: load_balancer_name(&svc.spec.service.uid),
            runner: Runner::default(),
            outcome: None,
            described_clb: None,
        }
    }

    fn full_resync(&self) -> std::time::Duration {
        self.provider.config_ref().full_resync
    }

    /// The cluster's groups in `vpc` and the instances' node groups.
    async fn read_groups(
        &self,
        vpc: &str,
        candidates: &BTreeSet<String>,
    ) -> Result<Vec<ObservedGroup>, AwsError> {
        let provider = self.provider;
        let cluster_tag = provider.cluster_tag_key();
        match self.mode {
            Mode::Execute => {
                provider
                    .inventory_ref()
                    .groups(
                        provider.clients_ref(),
                        &self.name,
                        &cluster_tag,
                        vpc,
                        candidates,
                        self.full_resync(),
                    )
                    .await
            }
            Mode::Render => {
                nodes::observe_groups(provider.clients_ref(), &cluster_tag, Some(vpc), candidates)
                    .await
            }
        }
    }

    async fn plan_aws(&mut self) -> Result<Plan<AwsStep>, AwsError> {
        self.runner.new_phase();
        self.outcome = None;
        let instances = self
            .provider
            .backend_instances(self.svc.aws, self.backends)
            .await?;
        let fp = fingerprint(self.svc.spec, &instances.candidate_groups);
        match self.kind {
            Kind::Classic => {
                if self.mode == Mode::Execute
                    && let Some(plan) = self.clb_fast_path(&instances, fp).await?
                {
                    return Ok(plan);
                }
                self.plan_clb(instances, fp).await
            }
            Kind::Nlb => {
                if self.mode == Mode::Execute
                    && let Some(plan) = self.nlb_fast_path(&instances, fp).await?
                {
                    return Ok(plan);
                }
                self.plan_nlb(instances, fp).await
            }
        }
    }

    fn finish_aws(&mut self) -> Result<LoadBalancerStatus, AwsError> {
        let outcome = self
            .outcome
            .take()
            .ok_or_else(|| AwsError::Unexpected("ensure finished without a plan".into()))?;
        let (verified, dns) = match outcome {
            Outcome::Clb {
                fingerprint,
                at,
                desired,
                dns,
            } => {
                let dns = self.runner.created_dns.take().or(dns);
                // The cache keeps the group's ID, not the name the plan used for it.
                let mut desired = desired;
                desired.security_groups = self.runner.resolve_groups(&desired.security_groups)?;
                (
                    Verified::Clb {
                        fingerprint,
                        at,
                        desired,
                    },
                    dns,
                )
            }
            Outcome::Nlb {
                fingerprint,
                at,
                desired,
                base,
            } => {
                let applied = &self.runner.applied;
                let arn = applied
                    .arn
                    .clone()
                    .ok_or_else(|| AwsError::Unexpected("NLB has no ARN after apply".into()))?;
                // A target group this pass did not create is the one the load balancer it
                // started from forwards that listener's port to.
                let mut target_groups = Vec::new();
                for (index, listener) in desired.listeners.iter().enumerate() {
                    let existing = base.as_ref().and_then(|o| {
                        o.listeners
                            .iter()
                            .find(|l| l.port == listener.port)
                            .and_then(|l| l.target_group_arn.clone())
                    });
                    match applied.new_tgs.get(&index).cloned().or(existing) {
                        Some(tg) => target_groups.push(tg),
                        None => {
                            return Err(AwsError::Unexpected(format!(
                                "listener {} has no target group after apply",
                                listener.port
                            )));
                        }
                    }
                }
                let dns = applied
                    .dns_name
                    .clone()
                    .or_else(|| base.and_then(|o| o.dns_name));
                (
                    Verified::Nlb {
                        fingerprint,
                        at,
                        desired,
                        arn,
                        dns_name: dns.clone(),
                        target_groups,
                    },
                    dns,
                )
            }
        };
        self.provider.remember_verified(&self.name, verified);
        Ok(status(dns))
    }
}

/// `first` now and `rest` after it when `first` has steps (waiting for what `waits_for`
/// names), else `rest` now.
fn phased(first: Vec<AwsStep>, waits_for: &str, rest: Vec<AwsStep>) -> Plan<AwsStep> {
    if first.is_empty() {
        Plan::now(rest)
    } else {
        Plan::now(first).then(waits_for, rest)
    }
}

#[async_trait]
impl Flow for EnsureFlow<'_> {
    type Step = AwsStep;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        "aws"
    }

    async fn plan(&mut self) -> Result<Plan<AwsStep>, ProviderError> {
        Ok(self.plan_aws().await?)
    }

    async fn run(&mut self, step: &AwsStep) -> Result<(), ProviderError> {
        Ok(self.runner.run(self.provider, step).await?)
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        Ok(self.finish_aws()?)
    }

    fn observation_stale(&mut self) -> bool {
        std::mem::take(&mut self.runner.stale)
    }
}

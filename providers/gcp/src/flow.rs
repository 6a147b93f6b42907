//! GCP's `ensure` and `delete` as [`converge::Flow`]s: one observation (reads only), the pure
//! planner's [`Action`]s cut into one Compute call per step ([`GcpStep`]), each carrying the
//! change `kube-lb plan` shows, rendered when the plan is made ([`crate::preview::steps`]).
//! `converge::execute` runs the steps, `converge::render` lists them: the same list.
//!
//! # Phases
//!
//! * `ensure` has a **later phase** when GCE chooses the IP (an address insert without
//!   `loadBalancerIP`): everything after the address (forwarding rule, firewall with the IP as
//!   destination, …) needs the IP, which only GCE knows once the insert is done, and a
//!   forwarding rule cannot be changed to another IP in place. Phase 1 is the removal of
//!   unused shared leftovers and the address calls; phase 2, shown with a stand-in IP and
//!   marked as waiting for "the address GCE reserves", is planned again from a new
//!   observation once the address is read back. No placeholder ([`converge::Slot`]) is used:
//!   the IP appears in several fields of several resources, and a new observation is cheaper
//!   to reason about than threading it through each.
//! * Otherwise `ensure` and `delete` are a single phase.
//!
//! A health-check delete whose check turns out to be used elsewhere when the call is made
//! (another cluster member started using it after the plan was read) writes nothing and
//! marks the observation stale, so the driver plans again instead of deleting its firewall.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use kube_lb_provider_core::converge::{self, Plan};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{
    BackendNode, LoadBalancerIngress, LoadBalancerSpec, LoadBalancerStatus, PlannedChange,
    ProviderError, ServiceKey,
};

use crate::GcpProvider;
use crate::desired::{self, desired};
use crate::plan::{Action, IpSource, Observed, plan, plan_address, split};

/// What `plan` prints for the steps after the address when GCE picks the IP.
pub const WAITS_FOR_ADDRESS: &str = "the address GCE reserves";

/// One mutating Compute call of a GCP plan, with the change it makes.
#[derive(Debug, Clone, PartialEq)]
pub struct GcpStep {
    action: Action,
    change: PlannedChange,
}

impl GcpStep {
    /// A step: `action` makes exactly the one call `change` describes.
    pub fn new(action: Action, change: PlannedChange) -> GcpStep {
        GcpStep { action, change }
    }

    /// The planner's action this step performs.
    pub fn action(&self) -> &Action {
        &self.action
    }
}

impl converge::Step for GcpStep {
    fn describe(&self) -> PlannedChange {
        self.change.clone()
    }
}

/// Runs one step for either flow; true when the cloud had changed under the plan.
async fn run_step(provider: &GcpProvider, step: &GcpStep, lb: &str) -> Result<bool, ProviderError> {
    // Forgotten before the call: whether it succeeds, fails or its answer is lost, the object
    // is no longer what the cache holds.
    provider.cache.forget_touched(&step.action);
    if let Action::DeleteHealthCheck { kind, name, .. } = &step.action {
        let deleted = Box::pin(provider.delete_health_check(*kind, name, lb)).await?;
        return Ok(!deleted);
    }
    // Boxed: the SDK's request futures are large; inline they overflow a debug worker stack.
    Box::pin(provider.apply(&step.action, lb)).await?;
    Ok(false)
}

/// `ensure` of one Service.
#[derive(Debug)]
pub struct EnsureFlow<'a> {
    provider: &'a GcpProvider,
    spec: &'a LoadBalancerSpec,
    backends: &'a [BackendNode],
    lb: String,
    /// Shared leftovers are looked for by the first plan only.
    leftovers_looked_for: bool,
    /// The IP the last plan found (none while GCE has to choose it).
    ip: Option<IpAddr>,
    stale: bool,
}

impl<'a> EnsureFlow<'a> {
    /// The flow of `spec` over `backends`.
    pub fn new(
        provider: &'a GcpProvider,
        spec: &'a LoadBalancerSpec,
        backends: &'a [BackendNode],
    ) -> EnsureFlow<'a> {
        EnsureFlow {
            provider,
            spec,
            backends,
            lb: load_balancer_name(&spec.service.uid),
            leftovers_looked_for: false,
            ip: None,
            stale: false,
        }
    }
}

#[async_trait]
impl converge::Flow for EnsureFlow<'_> {
    type Step = GcpStep;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        "gcp"
    }

    async fn plan(&mut self) -> Result<Plan<GcpStep>, ProviderError> {
        let provider = self.provider;
        let (backends, target_tags) = provider.resolve_nodes(self.backends).await?;
        let desired = desired(self.spec, &backends, &provider.settings, &target_tags)?;
        // After a start or a failure, unused shared node health checks go first.
        let leftovers =
            if !self.leftovers_looked_for && provider.leftovers_due.load(Ordering::SeqCst) {
                let found = Box::pin(provider.shared_leftovers()).await?;
                let shared = desired::shared_health_check_name(&provider.settings.cluster_id);
                Box::pin(provider.effective(found, &shared)).await?
            } else {
                Vec::new()
            };
        self.leftovers_looked_for = true;
        let mut observed = Box::pin(provider.observe(&desired)).await?;
        forget_leftovers(&mut observed, &leftovers);
        crate::refuse_foreign(&desired, &observed)?;
        let (address_actions, ip_source) = plan_address(&desired, &observed)?;
        let (ip, unknown_ip) = match ip_source {
            IpSource::User(ip) | IpSource::Owned(Some(ip)) => (ip, None),
            IpSource::Owned(None) if address_actions.is_empty() => {
                return Err(ProviderError::Retryable {
                    operation: "addresses.get",
                    message: format!("address {} has no IP yet", desired.lb),
                    source: None,
                });
            }
            // GCE picks the IP when the address is reserved; plan the rest with a stand-in.
            IpSource::Owned(None) => {
                let stand_in = IpAddr::from(Ipv4Addr::UNSPECIFIED);
                (stand_in, Some(stand_in))
            }
        };
        self.ip = unknown_ip.is_none().then_some(ip);
        let rest = plan(&desired, &observed, ip, &ip_source);
        let rest = split(Box::pin(provider.effective(rest, &desired.lb)).await?);
        let mut first = leftovers;
        first.extend(address_actions);
        if unknown_ip.is_none() {
            first.extend(rest);
            return Ok(Plan::now(crate::preview::steps(
                split(first),
                &observed,
                None,
            )));
        }
        // One rendering keeps the running memberships of both phases consistent; every
        // split action is exactly one step, so the first phase is the first actions' steps.
        let mut all = split(first);
        let first_len = all.len();
        all.extend(rest);
        let mut steps = crate::preview::steps(all, &observed, unknown_ip);
        let later = steps.split_off(first_len.min(steps.len()));
        Ok(Plan::now(steps).then(WAITS_FOR_ADDRESS, later))
    }

    async fn run(&mut self, step: &GcpStep) -> Result<(), ProviderError> {
        self.stale = run_step(self.provider, step, &self.lb).await?;
        Ok(())
    }

    fn observation_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        // The leftovers the first plan found are gone (this flow ran them).
        self.provider.leftovers_due.store(false, Ordering::SeqCst);
        let ip = self.ip.ok_or_else(|| ProviderError::Retryable {
            operation: "addresses.get",
            message: format!("address {} has no IP yet", self.lb),
            source: None,
        })?;
        Ok(LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: Some(ip),
                hostname: None,
                ip_mode: None,
            }],
            ..Default::default()
        })
    }
}

/// What the leftover deletes planned before the Service's own steps remove is gone by the
/// time those run.
fn forget_leftovers(observed: &mut Observed, leftovers: &[Action]) {
    for leftover in leftovers {
        match leftover {
            Action::DeleteHealthCheck { kind, name, .. }
                if observed
                    .health_check
                    .as_ref()
                    .is_some_and(|h| h.kind == *kind && h.name == *name) =>
            {
                observed.health_check = None;
            }
            Action::DeleteFirewall(firewall)
                if observed
                    .health_check_firewall
                    .as_ref()
                    .is_some_and(|f| f.name == *firewall) =>
            {
                observed.health_check_firewall = None;
            }
            _ => {}
        }
    }
}

/// `delete` of one Service (or, with an empty UID, of the cluster's unused shared pieces).
#[derive(Debug)]
pub struct DeleteFlow<'a> {
    provider: &'a GcpProvider,
    service: &'a ServiceKey,
    lb: String,
    stale: bool,
}

impl<'a> DeleteFlow<'a> {
    /// The flow deleting `service`'s load balancer.
    pub fn new(provider: &'a GcpProvider, service: &'a ServiceKey) -> DeleteFlow<'a> {
        DeleteFlow {
            provider,
            service,
            lb: load_balancer_name(&service.uid),
            stale: false,
        }
    }
}

#[async_trait]
impl converge::Flow for DeleteFlow<'_> {
    type Step = GcpStep;
    type Done = ();

    fn provider(&self) -> &'static str {
        "gcp"
    }

    async fn plan(&mut self) -> Result<Plan<GcpStep>, ProviderError> {
        let actions = Box::pin(self.provider.delete_steps(self.service)).await?;
        Ok(Plan::now(crate::preview::steps(
            split(actions),
            &Observed::default(),
            None,
        )))
    }

    async fn run(&mut self, step: &GcpStep) -> Result<(), ProviderError> {
        self.stale = run_step(self.provider, step, &self.lb).await?;
        Ok(())
    }

    fn observation_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }

    async fn finish(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }
}

//! `delete` as one [`converge::Flow`]: observe what the Service owns with reads only (its
//! listeners on load balancers it adopted, its own load balancers and the floating IPs on
//! their VIP ports, floating IPs of its left detached, its security groups), plan the
//! teardown, and let the core driver run it (`delete`) or print it (`kube-lb plan`).
//!
//! # Phases and placeholders
//!
//! One phase, no placeholders: every step names a resource that was observed, by id. The
//! only waits are Octavia's (a change under an adopted load balancer waits for `ACTIVE`, a
//! cascade delete waits until the load balancer is gone), and each step's `run` makes its
//! own before it returns, so no later step needs anything an earlier one produced. A load
//! balancer found `PENDING_*` is waited on while observing (a read).
//!
//! Order, as `delete` has always run it: an adopted load balancer's listeners (its pool,
//! then the listener), then per owned load balancer its floating IPs before the load
//! balancer itself (the cascade delete would detach them and lose where they were), then
//! detached floating IPs of ours, then the security groups (always: the option may have
//! been on when the Service was made).

use async_trait::async_trait;
use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::converge::{self, Flow, Plan};
use kube_lb_provider_core::{ChangeAction, PlannedChange, ProviderError};
use serde_json::json;

use super::{OpenStackProvider, ignore_missing, is_detached, is_live, leftover_descriptions};
use crate::model::FloatingIp;
use crate::plan::{self, FloatingIpRecord, Ownership};
use crate::security_group::{self, SecurityGroupStep};

/// One mutating call of `delete`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum DeleteStep {
    /// Delete the pool of a listener of this Service on a load balancer it adopted.
    DeleteAdoptedPool {
        /// The adopted load balancer.
        lb_id: String,
        /// The pool's id.
        id: String,
        /// The listener's name, for plans.
        listener: String,
    },
    /// Delete a listener of this Service on a load balancer it adopted.
    DeleteAdoptedListener {
        /// The adopted load balancer.
        lb_id: String,
        /// Its id.
        id: String,
        /// Its name.
        name: String,
    },
    /// Release a floating IP kube-lb made.
    ReleaseFloatingIp {
        /// Its id.
        id: String,
        /// Its address.
        address: String,
    },
    /// Detach a floating IP made with `keep-floatingip` and hand it over to the user.
    HandOverFloatingIp {
        /// Its id.
        id: String,
        /// Its address.
        address: String,
        /// The port it is on, when attached.
        port_id: Option<String>,
        /// Its description now.
        description: String,
        /// The description it is handed over with.
        handed_over: String,
    },
    /// Cascade-delete a load balancer of ours and wait until it is gone.
    DeleteLoadBalancer {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
    },
    /// A step removing the Service's security groups.
    SecurityGroup(SecurityGroupStep),
}

impl converge::Step for DeleteStep {
    fn describe(&self) -> PlannedChange {
        match self {
            DeleteStep::DeleteAdoptedPool { listener, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "Pool",
                listener,
                "DELETE pools (of a listener on an adopted load balancer)",
            ),
            DeleteStep::DeleteAdoptedListener { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "Listener",
                name,
                "DELETE listeners (on an adopted load balancer)",
            ),
            DeleteStep::ReleaseFloatingIp { address, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "FloatingIp",
                address,
                "DELETE floatingips",
            ),
            DeleteStep::HandOverFloatingIp {
                address,
                port_id,
                description,
                handed_over,
                ..
            } => PlannedChange::new(
                ChangeAction::Modify,
                "FloatingIp",
                address,
                "PUT floatingips (keep-floatingip: kept, handed over)",
            )
            .field("port_id", port_id.clone(), None)
            .field(
                "description",
                Some(description.clone()),
                Some(handed_over.clone()),
            ),
            DeleteStep::DeleteLoadBalancer { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "LoadBalancer",
                name,
                "DELETE loadbalancers?cascade=true",
            ),
            DeleteStep::SecurityGroup(step) => step.planned(),
        }
    }
}

/// The `delete` of one Service.
pub(crate) struct DeleteFlow<'a> {
    provider: &'a OpenStackProvider,
    service: &'a ServiceKey,
}

impl<'a> DeleteFlow<'a> {
    /// The flow deleting what `service` owns.
    pub(crate) fn new(provider: &'a OpenStackProvider, service: &'a ServiceKey) -> Self {
        DeleteFlow { provider, service }
    }
}

/// What `delete` does to one floating IP of `marks`' Service (pure); `None` for a user's.
fn floating_ip_step(fip: &FloatingIp, marks: &plan::FloatingIpMarks) -> Option<DeleteStep> {
    match marks.record(&fip.description) {
        FloatingIpRecord::NotOurs => None,
        FloatingIpRecord::Release => Some(DeleteStep::ReleaseFloatingIp {
            id: fip.id.clone(),
            address: fip.floating_ip_address.clone(),
        }),
        FloatingIpRecord::Keep => Some(DeleteStep::HandOverFloatingIp {
            id: fip.id.clone(),
            address: fip.floating_ip_address.clone(),
            port_id: fip.port_id.clone().filter(|p| !p.is_empty()),
            description: fip.description.clone(),
            handed_over: marks.handed_over.clone(),
        }),
    }
}

#[async_trait]
impl converge::Flow for DeleteFlow<'_> {
    type Step = DeleteStep;
    type Done = ();

    fn provider(&self) -> &'static str {
        "openstack"
    }

    async fn plan(&mut self) -> Result<Plan<DeleteStep>, ProviderError> {
        let provider = self.provider;
        let service = self.service;
        let marks = plan::FloatingIpMarks::new(&provider.cluster, service);
        let owned = provider.owned_load_balancers(service).await?;
        let mut steps = Vec::new();
        // The load balancers it adopted are not ours to delete; only its listeners on them.
        for (lb_id, listener) in provider.adopted_listeners(service, &owned).await? {
            if let Some(pool) = &listener.default_pool_id {
                steps.push(DeleteStep::DeleteAdoptedPool {
                    lb_id: lb_id.clone(),
                    id: pool.clone(),
                    listener: listener.name.clone(),
                });
            }
            steps.push(DeleteStep::DeleteAdoptedListener {
                lb_id,
                id: listener.id,
                name: listener.name,
            });
        }
        let mut seen = Vec::new();
        for lb in &owned {
            if lb.provisioning_status.starts_with("PENDING_") {
                provider.wait_active(&lb.id).await?;
            }
            // keep-floatingip is read from the floating IP itself (ensure records it there):
            // a delete sees no annotations.
            for fip in provider
                .client
                .floating_ips(&[("port_id", &lb.vip_port_id)])
                .await?
            {
                steps.extend(floating_ip_step(&fip, &marks));
                seen.push(fip.id);
            }
            steps.push(DeleteStep::DeleteLoadBalancer {
                id: lb.id.clone(),
                name: lb.name.clone(),
            });
        }
        // Floating IPs of ours left behind (the load balancer was removed out of band, or a
        // crash between the two deletes): released, or handed over when kept, so nothing
        // leaks. Only detached ones: an attached one sits on another cluster's load balancer.
        for description in leftover_descriptions(&marks) {
            let found = provider
                .client
                .floating_ips(&[("description", description)])
                .await?;
            for fip in found.into_iter().filter(is_detached) {
                if !seen.contains(&fip.id) {
                    steps.extend(floating_ip_step(&fip, &marks));
                    seen.push(fip.id);
                }
            }
        }
        let (groups, ports) = provider.security_groups_to_remove(service).await?;
        steps.extend(
            security_group::teardown(&groups, &ports)
                .into_iter()
                .map(DeleteStep::SecurityGroup),
        );
        Ok(Plan::now(steps))
    }

    async fn run(&mut self, step: &DeleteStep) -> Result<(), ProviderError> {
        run_step(self.provider, step).await
    }

    async fn finish(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }
}

/// Performs one step of a delete (also run by `ensure` for an earlier Service's leftover).
pub(crate) async fn run_step(
    provider: &OpenStackProvider,
    step: &DeleteStep,
) -> Result<(), ProviderError> {
    let client = &provider.client;
    match step {
        DeleteStep::DeleteAdoptedPool { lb_id, id, .. } => {
            provider
                .change(lb_id, || ignore_missing(client.delete_pool(id)))
                .await
        }
        DeleteStep::DeleteAdoptedListener { lb_id, id, .. } => {
            provider
                .change(lb_id, || ignore_missing(client.delete_listener(id)))
                .await
        }
        DeleteStep::ReleaseFloatingIp { id, .. } => {
            client.delete_floating_ip(id).await?;
            Ok(())
        }
        DeleteStep::HandOverFloatingIp {
            id,
            address,
            handed_over,
            ..
        } => {
            let body = json!({"port_id": null, "description": handed_over});
            client.update_floating_ip(id, &body).await?;
            tracing::info!(%address, "kept the floating IP (keep-floatingip): detached and handed over to the user");
            Ok(())
        }
        DeleteStep::DeleteLoadBalancer { id, .. } => provider.delete_load_balancer(id).await,
        // A teardown creates no rule, so no group id or rule description is needed.
        DeleteStep::SecurityGroup(step) => {
            provider
                .apply_security_group_steps("", "", std::slice::from_ref(step))
                .await
        }
    }
}

impl OpenStackProvider {
    /// The steps removing the load balancers an earlier Service of `service`'s
    /// namespace/name left behind in this cluster ([`Ownership::Leftover`]) under its name,
    /// as that Service's delete plans them, its security groups first: the load balancer is
    /// what finds the leftover again, so it goes last, and a removal cut short is taken up
    /// by the next ensure instead of leaving the rest behind for good.
    pub(crate) async fn leftover_steps(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<DeleteStep>, ProviderError> {
        let name = plan::load_balancer_name(&self.cluster, service);
        let mut steps = Vec::new();
        for lb in self.client.load_balancers_named(&name).await? {
            let Ownership::Leftover(previous) = self.ownership(&lb, service) else {
                continue;
            };
            if !is_live(&lb) {
                continue;
            }
            tracing::info!(%service, lb = %lb.id, name = %lb.name, previous_uid = %previous.uid, "a deleted Service of the same namespace/name left this load balancer behind; planning its removal");
            let planned = DeleteFlow::new(self, &previous).plan().await?.steps;
            let (groups, rest): (Vec<_>, Vec<_>) = planned
                .into_iter()
                .partition(|step| matches!(step, DeleteStep::SecurityGroup(_)));
            steps.extend(groups);
            steps.extend(rest);
        }
        Ok(steps)
    }

    /// `delete` of `service`: the flow, executed.
    pub(crate) async fn run_delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        converge::execute(&mut DeleteFlow::new(self, service)).await
    }

    /// `plan_delete` of `service`: the flow, rendered.
    pub(crate) async fn render_delete(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut DeleteFlow::new(self, service)).await
    }
}

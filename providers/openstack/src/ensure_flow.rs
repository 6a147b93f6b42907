//! `ensure` as one [`converge::Flow`]: observe the Service's load balancer, its floating IP
//! and security group with reads only, plan the steps, and let the core driver run them
//! (`ensure`) or print them (`kube-lb plan`).
//!
//! # Phases and placeholders
//!
//! * **Octavia**: every mutating call puts the load balancer in `PENDING_UPDATE`; the step's
//!   `run` waits for `ACTIVE` again before it returns, so the next step only needs the load
//!   balancer `ACTIVE`, never an id — except under a new listener: its pool needs the
//!   listener's id, and the pool's members and monitor need the pool's id. Those are
//!   **slots** within the phase ([`plan::Ref::New`]), filled by the create that returns them.
//! * **A new load balancer** is one call (the whole graph inline) and is the only **phase
//!   boundary**: its floating IP goes on the VIP port Octavia assigns, so phase 2 waits for
//!   the load balancer's id and `ACTIVE`, and is planned again from a fresh observation.
//!   The security group does not depend on the load balancer and stays in phase 1.
//! * **A new security group**: its id, needed by its rules and the ports' group lists, is a
//!   slot filled by the create.
//!
//! * **A load balancer an earlier Service of the same namespace/name left behind** (this
//!   cluster's, another UID) is removed by phase-1 steps before the create: the delete flow's
//!   steps for that Service ([`super::delete`]), its security groups first. `plan` only reads.

use std::collections::BTreeMap;

use async_trait::async_trait;
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_provider_core::converge::{self, Plan, Slot};
use kube_lb_provider_core::{
    ChangeAction, EnvironmentCause, LoadBalancerStatus, PlannedChange, ProviderError,
};
use serde_json::{Value, json};

use super::delete::DeleteStep;
use super::{Located, OpenStackProvider, ignore_missing, is_detached, scope_to_service};
use crate::model::{FloatingIp, LoadBalancer, SecurityGroup};
use crate::plan::{self, AttachedFloatingIp, Desired, FloatingIpRecord, Observed, Ref};
use crate::security_group::{self, DesiredSecurityGroup, SecurityGroupStep};

/// The id a planned security group stands under until its create returns the real one.
const NEW_GROUP: &str = "(new)";

/// The VIP port a load balancer still to be created will have, as later phases show it.
const NEW_VIP_PORT: &str = "(the new load balancer's VIP port)";

/// One mutating call of `ensure`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum EnsureStep {
    /// Delete our load balancer found in `ERROR` (recreate, not failover); the pass then
    /// reports the error and the next one builds a new load balancer.
    DeleteErrored {
        /// Its id.
        id: String,
        /// Its name.
        name: String,
    },
    /// A step removing what an earlier Service of the same namespace/name left behind.
    Leftover(DeleteStep),
    /// Create the load balancer with its whole graph in one call.
    CreateLoadBalancer {
        /// Its name.
        name: String,
        /// The populated create body.
        body: Value,
    },
    /// A change under an existing load balancer.
    Octavia {
        /// The load balancer.
        lb_id: String,
        /// The change.
        step: plan::Step,
    },
    /// Change a floating IP in place (description, association).
    UpdateFloatingIp {
        /// The load balancer it concerns.
        lb_id: String,
        /// Its id.
        id: String,
        /// Its address, for plans.
        address: String,
        /// The changed fields: name, old, new.
        fields: Vec<(&'static str, Option<String>, Option<String>)>,
        /// The body sent.
        body: Value,
    },
    /// Release a floating IP.
    ReleaseFloatingIp {
        /// The load balancer it concerns.
        lb_id: String,
        /// Its id.
        id: String,
        /// Its address.
        address: String,
    },
    /// Allocate a floating IP onto the VIP port, from the first subnet with room.
    AllocateFloatingIp {
        /// The load balancer it concerns.
        lb_id: String,
        /// The create body (without the subnet).
        body: Value,
        /// The subnets to try in order (`None`: Neutron chooses).
        subnets: Vec<Option<String>>,
    },
    /// Create the Service's security group.
    CreateSecurityGroup(Box<DesiredSecurityGroup>),
    /// A change to a security group or the ports carrying it.
    SecurityGroup {
        /// The group's id when observed; `None` for the one created in this phase.
        group_id: Option<String>,
        /// The description rules are created with.
        rule_description: String,
        /// The change.
        step: SecurityGroupStep,
    },
}

impl converge::Step for EnsureStep {
    fn describe(&self) -> PlannedChange {
        match self {
            EnsureStep::DeleteErrored { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "LoadBalancer",
                name,
                "DELETE loadbalancers?cascade=true (in ERROR: recreated)",
            ),
            EnsureStep::Leftover(step) => converge::Step::describe(step),
            EnsureStep::CreateLoadBalancer { name, .. } => PlannedChange::new(
                ChangeAction::Create,
                "LoadBalancer",
                name,
                "POST loadbalancers",
            ),
            EnsureStep::Octavia { step, .. } => step.planned(),
            EnsureStep::UpdateFloatingIp {
                address, fields, ..
            } => fields.iter().fold(
                PlannedChange::new(
                    ChangeAction::Modify,
                    "FloatingIp",
                    address,
                    "PUT floatingips",
                ),
                |change, (field, old, new)| change.field(*field, old.clone(), new.clone()),
            ),
            EnsureStep::ReleaseFloatingIp { address, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "FloatingIp",
                address,
                "DELETE floatingips",
            ),
            EnsureStep::AllocateFloatingIp { body, .. } => PlannedChange::new(
                ChangeAction::Create,
                "FloatingIp",
                body["floating_ip_address"].as_str().unwrap_or_default(),
                "POST floatingips",
            )
            .field(
                "port_id",
                None,
                body["port_id"].as_str().map(str::to_string),
            ),
            EnsureStep::CreateSecurityGroup(want) => security_group::planned_create(want),
            EnsureStep::SecurityGroup { step, .. } => step.planned(),
        }
    }
}

/// The `ensure` of one Service.
pub(crate) struct EnsureFlow<'a> {
    provider: &'a OpenStackProvider,
    spec: &'a LoadBalancerSpec,
    desired: Desired,
    /// True for `ensure`: the wave's listing may answer the first observation.
    executing: bool,
    /// No observation made yet (only the first may come from the wave's listing).
    first: bool,
    /// Ids of listeners and pools created in this phase, by name.
    listeners: BTreeMap<String, Slot<String>>,
    pools: BTreeMap<String, Slot<String>>,
    /// The id of the security group created in this phase.
    group: Slot<String>,
    /// The load balancer as last observed, and whether it is adopted (`load-balancer-id`).
    lb: Option<LoadBalancer>,
    adopted: bool,
    /// The floating IP address the Service is reached at: observed, or set by the step that
    /// attaches or allocates it.
    address: Option<String>,
    /// The security group name to record, when managed.
    security_group: Option<String>,
}

impl<'a> EnsureFlow<'a> {
    /// The flow for `spec` with `desired` (its member subnet already discovered).
    pub(crate) fn new(
        provider: &'a OpenStackProvider,
        spec: &'a LoadBalancerSpec,
        desired: Desired,
        executing: bool,
    ) -> Self {
        EnsureFlow {
            provider,
            spec,
            desired,
            executing,
            first: true,
            listeners: BTreeMap::new(),
            pools: BTreeMap::new(),
            group: Slot::new("the id of the security group created earlier in this phase"),
            lb: None,
            adopted: false,
            address: None,
            security_group: None,
        }
    }
}

/// The id behind `reference`: observed, or from the slot a create of this phase filled.
fn resolve(
    slots: &BTreeMap<String, Slot<String>>,
    reference: &Ref,
    what: &'static str,
) -> Result<String, ProviderError> {
    match reference {
        Ref::Known(id) => Ok(id.clone()),
        Ref::New(name) => match slots.get(name) {
            Some(slot) => slot.require().cloned(),
            None => Slot::<String>::new(what).require().cloned(),
        },
    }
}

#[async_trait]
impl converge::Flow for EnsureFlow<'_> {
    type Step = EnsureStep;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        "openstack"
    }

    async fn plan(&mut self) -> Result<Plan<EnsureStep>, ProviderError> {
        let provider = self.provider;
        let listing = self.first && self.executing;
        self.first = false;
        self.listeners.clear();
        self.pools.clear();
        self.group = Slot::new("the id of the security group created earlier in this phase");
        self.address = None;
        let (located, listed) = if listing {
            provider.locate_listed(self.spec, &self.desired).await?
        } else {
            let located = provider
                .locate(&self.spec.service, &self.desired, true)
                .await?;
            (located, None)
        };
        let (security_steps, security_group) = provider
            .security_group_steps(self.spec, &self.desired)
            .await?;
        self.security_group = security_group;
        match located {
            Located::Absent => {
                self.lb = None;
                self.adopted = false;
                // A load balancer an earlier Service of this namespace/name left behind goes
                // first, as that Service's delete would have removed it.
                let mut steps: Vec<EnsureStep> = match self.desired.existing_id {
                    None => provider
                        .leftover_steps(&self.spec.service)
                        .await?
                        .into_iter()
                        .map(EnsureStep::Leftover)
                        .collect(),
                    Some(_) => Vec::new(),
                };
                steps.push(EnsureStep::CreateLoadBalancer {
                    name: self.desired.name.clone(),
                    body: self.desired.create_body(),
                });
                steps.extend(security_steps);
                let (later, _) = provider
                    .floating_ip_steps("", NEW_VIP_PORT, &[], &self.desired)
                    .await?;
                Ok(Plan::now(steps).then("the load balancer's id and ACTIVE", later))
            }
            Located::Adopted(lb) => {
                if lb.provisioning_status == "ERROR" {
                    return Err(ProviderError::environment(
                        "octavia:GetLoadBalancer",
                        EnvironmentCause::MissingDependency,
                        format!(
                            "load balancer {} ({}) named by the load-balancer-id annotation is in provisioning_status ERROR; kube-lb does not recreate a load balancer it did not create",
                            lb.name, lb.id
                        ),
                    ));
                }
                let lb = provider.wait_active(&lb.id).await?;
                let observed = provider.observe(&lb).await?;
                let (observed, desired) = scope_to_service(&lb, observed, &self.desired)?;
                let mut steps = octavia_steps(&lb, &observed, &desired);
                // Its floating IP (if any) is its owner's business: never changed.
                steps.extend(security_steps);
                self.lb = Some(lb);
                self.adopted = true;
                Ok(Plan::now(steps))
            }
            Located::Ours(lb) => {
                if lb.provisioning_status == "ERROR" {
                    let step = EnsureStep::DeleteErrored {
                        id: lb.id.clone(),
                        name: lb.name.clone(),
                    };
                    self.lb = Some(lb);
                    self.adopted = false;
                    return Ok(Plan::now(vec![step]));
                }
                // Answered from this wave's listing while it speaks for this load balancer
                // and it was ACTIVE then (a busy one is waited on and read afresh).
                let listed = listed.filter(|_| lb.provisioning_status == "ACTIVE");
                let lb = if lb.provisioning_status == "ACTIVE" {
                    lb
                } else {
                    provider.wait_active(&lb.id).await?
                };
                let (observed, attached) = match listed {
                    Some((mut observed, attached)) => {
                        provider.fill_members(&mut observed).await?;
                        (observed, attached)
                    }
                    None => {
                        let observed = provider.observe(&lb).await?;
                        let attached = provider
                            .client
                            .floating_ips(&[("port_id", &lb.vip_port_id)])
                            .await?;
                        (observed, attached)
                    }
                };
                let mut steps = octavia_steps(&lb, &observed, &self.desired);
                let (fip_steps, address) = provider
                    .floating_ip_steps(&lb.id, &lb.vip_port_id, &attached, &self.desired)
                    .await?;
                steps.extend(fip_steps);
                steps.extend(security_steps);
                self.address = address;
                self.lb = Some(lb);
                self.adopted = false;
                Ok(Plan::now(steps))
            }
        }
    }

    async fn run(&mut self, step: &EnsureStep) -> Result<(), ProviderError> {
        let provider = self.provider;
        let client = &provider.client;
        match step {
            EnsureStep::DeleteErrored { id, name } => {
                tracing::warn!(lb = %id, name = %name, "load balancer is in ERROR; deleting it to recreate it");
                provider.delete_load_balancer(id).await?;
                Err(ProviderError::pending(
                    "octavia:GetLoadBalancer",
                    format!(
                        "load balancer {name} ({id}) was in provisioning_status ERROR; deleted it, the next attempt recreates it and keeps its floating IP"
                    ),
                ))
            }
            EnsureStep::Leftover(step) => super::delete::run_step(provider, step).await,
            EnsureStep::CreateLoadBalancer { body, .. } => {
                let lb = provider.create(body).await?;
                self.lb = Some(lb);
                Ok(())
            }
            EnsureStep::Octavia { lb_id, step } => self.run_octavia(lb_id, step).await,
            EnsureStep::UpdateFloatingIp {
                lb_id, id, body, ..
            } => {
                provider.inventory.touch(lb_id);
                let fip = client.update_floating_ip(id, body).await?;
                if body["port_id"].as_str().is_some_and(|p| !p.is_empty()) {
                    self.address = Some(fip.floating_ip_address);
                }
                Ok(())
            }
            EnsureStep::ReleaseFloatingIp { lb_id, id, .. } => {
                provider.inventory.touch(lb_id);
                client.delete_floating_ip(id).await?;
                Ok(())
            }
            EnsureStep::AllocateFloatingIp {
                lb_id,
                body,
                subnets,
            } => {
                provider.inventory.touch(lb_id);
                let fip = provider.create_floating_ip_in(body, subnets).await?;
                tracing::info!(lb = %lb_id, address = %fip.floating_ip_address, "allocated floating IP");
                self.address = Some(fip.floating_ip_address);
                Ok(())
            }
            EnsureStep::CreateSecurityGroup(want) => {
                let group = client.create_security_group(&want.body()).await?;
                tracing::info!(service = %self.spec.service, group = %group.id, name = %group.name, "created security group");
                self.group.fill(group.id);
                Ok(())
            }
            EnsureStep::SecurityGroup {
                group_id,
                rule_description,
                step,
            } => {
                let id = match group_id {
                    Some(id) => id.clone(),
                    None => self.group.require()?.clone(),
                };
                let step = match step {
                    SecurityGroupStep::SetPortGroups {
                        port_id,
                        address,
                        before,
                        after,
                    } => SecurityGroupStep::SetPortGroups {
                        port_id: port_id.clone(),
                        address: address.clone(),
                        before: before.clone(),
                        after: after
                            .iter()
                            .map(|g| {
                                if g == NEW_GROUP {
                                    id.clone()
                                } else {
                                    g.clone()
                                }
                            })
                            .collect(),
                    },
                    other => other.clone(),
                };
                provider
                    .apply_security_group_steps(&id, rule_description, &[step])
                    .await
            }
        }
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        let provider = self.provider;
        let lb = self.lb.clone().ok_or_else(|| ProviderError::Internal {
            message: "ensure finished without a load balancer; the next pass plans again".into(),
            source: None,
        })?;
        if self.adopted {
            let address = provider.public_address(&lb).await?;
            let mut status = self.desired.status(&address);
            status
                .annotations
                .extend(plan::occm_written_back(&lb.id, &address));
            // Only the group is recorded: the load balancer's create-only fields are its
            // owner's, and recording them would make the annotation parser judge the
            // Service's VIP annotations against someone else's load balancer.
            if self.security_group.is_some() || self.desired.security_group_recorded {
                status.annotations.insert(
                    kube_lb_annotations::keys::openstack::CREATED_WITH.into(),
                    plan::recorded_security_group(self.security_group.as_deref()),
                );
            }
            return Ok(status);
        }
        let floating_ip = self.address.clone().filter(|_| !self.desired.internal);
        let address = floating_ip.as_deref().unwrap_or(&lb.vip_address);
        let mut status = self.desired.status(address);
        // From what this ensure read or made anyway: no extra call, and the controller
        // patches the Service only when a value differs from what it shows.
        status
            .annotations
            .extend(plan::occm_written_back(&lb.id, address));
        status.annotations.insert(
            kube_lb_annotations::keys::openstack::CREATED_WITH.into(),
            plan::created_with(&lb, floating_ip.as_deref(), self.security_group.as_deref()),
        );
        Ok(status)
    }
}

impl EnsureFlow<'_> {
    /// One change under `lb_id`, followed by the wait for `ACTIVE` ([`OpenStackProvider::change`]).
    async fn run_octavia(&mut self, lb_id: &str, step: &plan::Step) -> Result<(), ProviderError> {
        use plan::Step;
        let provider = self.provider;
        let client = &provider.client;
        match step {
            Step::TagLoadBalancer { tags } => {
                let body = json!({"tags": tags});
                provider
                    .change(lb_id, || client.update_load_balancer(lb_id, &body))
                    .await
                    .map(drop)
            }
            Step::DeletePool { id, .. } => {
                provider
                    .change(lb_id, || ignore_missing(client.delete_pool(id)))
                    .await
            }
            Step::DeleteListener { id, .. } => {
                provider
                    .change(lb_id, || ignore_missing(client.delete_listener(id)))
                    .await
            }
            Step::UpdateListener { id, body, .. } => provider
                .change(lb_id, || client.update_listener(id, body))
                .await
                .map(drop),
            Step::CreateListener(desired) => {
                let body = desired.listener_body(Some(lb_id));
                let listener = provider
                    .change(lb_id, || client.create_listener(&body))
                    .await?;
                self.listeners.insert(
                    desired.name.clone(),
                    Slot::known(
                        "the id of the listener created earlier in this phase",
                        listener.id,
                    ),
                );
                Ok(())
            }
            Step::CreatePool { listener, desired } => {
                let listener_id = resolve(
                    &self.listeners,
                    listener,
                    "the id of the listener created earlier in this phase",
                )?;
                let body = desired.pool_body(Some(&listener_id));
                let pool = provider.change(lb_id, || client.create_pool(&body)).await?;
                self.pools.insert(
                    desired.pool_name.clone(),
                    Slot::known("the id of the pool created earlier in this phase", pool.id),
                );
                Ok(())
            }
            Step::UpdatePool { id, body, .. } => provider
                .change(lb_id, || client.update_pool(id, body))
                .await
                .map(drop),
            Step::ReplaceMembers { pool, members, .. } => {
                let pool_id = resolve(
                    &self.pools,
                    pool,
                    "the id of the pool created earlier in this phase",
                )?;
                provider.inventory.forget_members(&pool_id);
                provider
                    .change(lb_id, || client.replace_members(&pool_id, members))
                    .await
            }
            Step::CreateMonitor { pool, body, .. } => {
                let pool_id = resolve(
                    &self.pools,
                    pool,
                    "the id of the pool created earlier in this phase",
                )?;
                let mut body = body.clone();
                body["pool_id"] = json!(pool_id);
                provider
                    .change(lb_id, || client.create_health_monitor(&body))
                    .await
                    .map(drop)
            }
            Step::UpdateMonitor { id, body, .. } => provider
                .change(lb_id, || client.update_health_monitor(id, body))
                .await
                .map(drop),
            Step::DeleteMonitor { id, .. } => {
                provider
                    .change(lb_id, || ignore_missing(client.delete_health_monitor(id)))
                    .await
            }
        }
    }
}

/// The Octavia steps under `lb` (pure).
fn octavia_steps(lb: &LoadBalancer, observed: &Observed, desired: &Desired) -> Vec<EnsureStep> {
    plan::plan(lb, observed, desired)
        .into_iter()
        .map(|step| EnsureStep::Octavia {
            lb_id: lb.id.clone(),
            step,
        })
        .collect()
}

impl OpenStackProvider {
    /// Locates the Service's load balancer for the first observation of an `ensure`,
    /// answering from this wave's project listing where it speaks for the load balancer,
    /// and returns what the listing shows under it (listeners etc., floating IPs).
    async fn locate_listed(
        &self,
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<(Located, Option<(Observed, Vec<FloatingIp>)>), ProviderError> {
        let snapshot = match desired.existing_id {
            None => {
                self.inventory
                    .snapshot_for(&desired.name, &self.client)
                    .await?
            }
            Some(_) => None,
        };
        // Listed: ours (or someone else's, refused), under its name or else its legacy name.
        // Absent from the listing is checked by name before anything is created, and then
        // nothing is answered from the listing.
        let mut listing_set_aside = false;
        let listed_lb = match snapshot.as_ref().map(|snap| {
            let found = snap.named(&desired.name);
            let found = match &desired.legacy_name {
                Some(legacy) if found.is_empty() => snap.named(legacy),
                _ => found,
            };
            let current = found
                .iter()
                .all(|lb| self.inventory.speaks_for(snap, &lb.id));
            (found, current)
        }) {
            // kube-lb changed a load balancer shown here since the listing was taken (deleted
            // it, for one: a Service released on a retype and made a load balancer again
            // would otherwise be converged onto the deleted one): read live.
            Some((found, false)) if !found.is_empty() => {
                tracing::debug!(service = %spec.service, "the wave's listing predates a change of this name's load balancer; reading it live");
                listing_set_aside = true;
                None
            }
            Some((found, _)) if !found.is_empty() => match self.ours_among(found, &spec.service) {
                Ok(lb) => lb,
                // A refusal waits for the Service to change, so it never rests on a listing
                // up to a refresh old (the name may have been freed since, and a Service
                // recreated under it): the live lookup below confirms it or finds it gone.
                Err(refusal) => {
                    tracing::debug!(service = %spec.service, %refusal, "the wave's listing refuses the name; confirming with a live lookup");
                    listing_set_aside = true;
                    None
                }
            },
            _ => None,
        };
        // The legacy name is looked up live unless the listing showed it absent (it is not
        // consulted when the listing's answer under the name is set aside).
        let legacy_unlisted = snapshot.is_none() || listing_set_aside;
        match listed_lb {
            Some(lb) => {
                let listed = snapshot
                    .as_ref()
                    .filter(|snap| self.inventory.speaks_for(snap, &lb.id))
                    .map(|snap| (snap.observed(&lb.id), snap.floating_ips_on(&lb.vip_port_id)));
                Ok((Located::Ours(lb), listed))
            }
            None => Ok((
                self.locate(&spec.service, desired, legacy_unlisted).await?,
                None,
            )),
        }
    }

    /// The floating-IP steps for a load balancer whose VIP port is `vip_port` carrying
    /// `attached` (reads only: a lost floating IP of ours, the external network, subnets),
    /// and the address the Service is reached at when it is already attached.
    async fn floating_ip_steps(
        &self,
        lb_id: &str,
        vip_port: &str,
        attached: &[FloatingIp],
        desired: &Desired,
    ) -> Result<(Vec<EnsureStep>, Option<String>), ProviderError> {
        let mut steps = Vec::new();
        for fip in attached {
            let description = |new: Option<String>| {
                new.map(|new| ("description", Some(fip.description.clone()), Some(new)))
            };
            match plan::attached_floating_ip(&fip.description, desired) {
                AttachedFloatingIp::Leave => {}
                AttachedFloatingIp::Describe(new) => steps.push(EnsureStep::UpdateFloatingIp {
                    lb_id: lb_id.into(),
                    id: fip.id.clone(),
                    address: fip.floating_ip_address.clone(),
                    body: json!({"description": new}),
                    fields: description(Some(new)).into_iter().collect(),
                }),
                AttachedFloatingIp::Release => steps.push(EnsureStep::ReleaseFloatingIp {
                    lb_id: lb_id.into(),
                    id: fip.id.clone(),
                    address: fip.floating_ip_address.clone(),
                }),
                AttachedFloatingIp::Detach(new) => {
                    let mut body = json!({"port_id": null});
                    if let Some(new) = &new {
                        body["description"] = json!(new);
                    }
                    let mut fields = vec![("port_id", fip.port_id.clone(), None)];
                    fields.extend(description(new));
                    steps.push(EnsureStep::UpdateFloatingIp {
                        lb_id: lb_id.into(),
                        id: fip.id.clone(),
                        address: fip.floating_ip_address.clone(),
                        body,
                        fields,
                    });
                }
            }
        }
        if desired.internal {
            return Ok((steps, None));
        }
        if let Some(fip) = attached.first() {
            return Ok((steps, Some(fip.floating_ip_address.clone())));
        }
        // A floating IP kube-lb made earlier and lost track of (detached by hand, its port
        // went away with an errored load balancer, or a crash): re-attached instead of a new
        // one allocated and the old one leaked.
        let requested = desired.floating_ip_address.as_deref();
        let candidates = match requested {
            Some(address) => {
                self.client
                    .floating_ips(&[("floating_ip_address", address)])
                    .await?
            }
            // Only a detached one: an attached floating IP with our phrase sits on another
            // cluster's load balancer (same --cluster-name) and is theirs. A kept one
            // (detached when the Service turned internal) comes back the same.
            None => {
                let marks = &desired.floating_ip_marks;
                let mut lost = Vec::new();
                for description in [&marks.keep, &marks.release] {
                    lost.extend(
                        self.client
                            .floating_ips(&[("description", description)])
                            .await?
                            .into_iter()
                            .filter(is_detached),
                    );
                }
                lost
            }
        };
        if let Some(fip) = candidates.into_iter().next() {
            if fip
                .port_id
                .as_deref()
                .is_some_and(|p| !p.is_empty() && p != vip_port)
            {
                return Err(ProviderError::environment(
                    "neutron:UpdateFloatingIp",
                    EnvironmentCause::AddressInUse,
                    format!(
                        "floating IP {} is associated with another port",
                        fip.floating_ip_address
                    ),
                ));
            }
            let mut body = json!({"port_id": vip_port});
            let mut fields = vec![("port_id", None, Some(vip_port.to_string()))];
            // Ours: recorded with the current keep-floatingip (a user's keeps its words).
            if desired.floating_ip_marks.record(&fip.description) != FloatingIpRecord::NotOurs
                && fip.description != desired.floating_ip_description()
            {
                body["description"] = json!(desired.floating_ip_description());
                fields.push((
                    "description",
                    Some(fip.description.clone()),
                    Some(desired.floating_ip_description().to_string()),
                ));
            }
            steps.push(EnsureStep::UpdateFloatingIp {
                lb_id: lb_id.into(),
                id: fip.id.clone(),
                address: fip.floating_ip_address.clone(),
                body,
                fields,
            });
            return Ok((steps, None));
        }
        let network = match &desired.floating.network_id {
            Some(network) => network.clone(),
            None => self
                .client
                .external_networks()
                .await?
                .into_iter()
                .next()
                .map(|n| n.id)
                .ok_or_else(|| ProviderError::environment(
                    "neutron:ListNetworks",
                    EnvironmentCause::MissingDependency,
                    "no external network for floating IPs: set [LoadBalancer] floating-network-id",
                ))?,
        };
        let mut body = json!({"floating_network_id": network, "port_id": vip_port,
            "description": desired.floating_ip_description()});
        if let Some(address) = requested {
            body["floating_ip_address"] = json!(address);
        }
        let subnets = self.floating_subnets(&network, desired).await?;
        steps.push(EnsureStep::AllocateFloatingIp {
            lb_id: lb_id.into(),
            body,
            subnets,
        });
        Ok((steps, None))
    }

    /// The security-group steps (reads only): with `manage-security-groups` the Service's
    /// group converged, and its name to record; without, the group kube-lb recorded making
    /// for the Service removed (a Service without that record costs no call).
    async fn security_group_steps(
        &self,
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<(Vec<EnsureStep>, Option<String>), ProviderError> {
        if !self.config.load_balancer.manage_security_groups {
            if !desired.security_group_recorded {
                return Ok((Vec::new(), None));
            }
            let (groups, ports) = self.security_groups_to_remove(&spec.service).await?;
            // A teardown creates no rule, so no group id or rule description is needed.
            let steps = security_group::teardown(&groups, &ports)
                .into_iter()
                .map(|step| EnsureStep::SecurityGroup {
                    group_id: Some(String::new()),
                    rule_description: String::new(),
                    step,
                })
                .collect();
            return Ok((steps, None));
        }
        let observed = self.observe_security_group(spec, desired).await?;
        let unattachable = security_group::addresses_without_port(&observed.want, &observed.ports);
        if !unattachable.is_empty() {
            tracing::warn!(service = %spec.service, subnet = %observed.want.subnet_id, addresses = ?unattachable, "backend nodes without a port on the member subnet: the Service's security group cannot be attached to them");
        }
        let mut steps = Vec::new();
        let (group, group_id) = match observed.group {
            Some(group) => {
                let id = group.id.clone();
                (group, Some(id))
            }
            None => {
                steps.push(EnsureStep::CreateSecurityGroup(Box::new(
                    observed.want.clone(),
                )));
                let group = SecurityGroup {
                    id: NEW_GROUP.into(),
                    name: observed.want.name.clone(),
                    description: observed.want.description.clone(),
                    tags: Vec::new(),
                    security_group_rules: Vec::new(),
                    created_at: None,
                };
                (group, None)
            }
        };
        steps.extend(
            security_group::plan(
                &group,
                &observed.duplicates,
                &observed.ports,
                &observed.want,
            )
            .into_iter()
            .map(|step| EnsureStep::SecurityGroup {
                group_id: group_id.clone(),
                rule_description: observed.want.rule_description.clone(),
                step,
            }),
        );
        Ok((
            steps,
            Some(security_group::security_group_name(&spec.service)),
        ))
    }

    /// `ensure` of `spec`: the flow, executed.
    pub(crate) async fn run_ensure(
        &self,
        spec: &LoadBalancerSpec,
        desired: Desired,
    ) -> Result<LoadBalancerStatus, ProviderError> {
        converge::execute(&mut EnsureFlow::new(self, spec, desired, true)).await
    }

    /// `plan_ensure` of `spec`: the flow, rendered.
    pub(crate) async fn render_ensure(
        &self,
        spec: &LoadBalancerSpec,
        desired: Desired,
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut EnsureFlow::new(self, spec, desired, false)).await
    }
}

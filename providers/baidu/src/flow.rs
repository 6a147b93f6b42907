//! Baidu's `ensure` and `delete`, each written once as a [`converge::Flow`]: observe with reads
//! only, plan a list of [`Change`]s, and let the core driver run them (`ensure`, `delete`) or
//! render them (`kube-lb plan`). What `plan` lists is what the next pass does.
//!
//! # Phases and placeholders
//!
//! * **Ensure, the Service's BLB does not exist:** two phases. Phase 1 removes a BLB an earlier
//!   Service of the same namespace/name left behind in this cluster (the delete flow's steps
//!   for that Service) and calls `CreateLoadBalancer`. Everything else — security group,
//!   listeners, backends, EIP — needs the id BCE assigns and a BLB that has left `creating`,
//!   so it is phase 2 ("the BLB's id and status available"): `plan` shows it as planned for a
//!   fresh BLB (no listeners, no backends, no address), and `ensure` plans it again from a new
//!   observation, reading the created BLB by the id phase 1 returned (never by name, which a
//!   list may not show yet, so a BLB is never created twice).
//! * **Ensure, the BLB exists:** one phase. Waiting for it to leave `creating` / `updating` is a
//!   read inside `plan`. Two steps need an id the cloud assigns within the phase, and take it
//!   from a [`Slot`]: binding the security group created just before, and binding the EIP
//!   created just before. Both are shown by `plan` under the name they will have. The
//!   description change that drops the EIP mark comes last: until the EIP calls are done the
//!   mark is what tells the next pass an EIP of ours may be left unbound.
//! * **Delete:** one phase, from one observation: per BLB the EIP unbind / release then the BLB
//!   (unless `reserve-lb`), then the Service's security groups (unbound first from a kept BLB),
//!   then the Service's EIPs left unbound (released unless prepaid).
//!
//! A step that fails stops the pass there; everything made so far carries the Service's marks
//! (the BLB's description, the EIP's and group's tags), so the next pass finds it and plans
//! again from what it observes.

use async_trait::async_trait;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::converge::{Flow, Plan, Slot, Step as ConvergeStep};
use kube_lb_provider_core::{ChangeAction, LoadBalancerStatus, PlannedChange, ProviderError};
use serde_json::{Value, json};

use crate::client::Blb;
use crate::plan::{self, Desired, EipStep, Observed, Step};
use crate::provider::{BaiduProvider, Lookup, drops_eip_mark, status_for};
use crate::source_ranges::{self, GroupRef};

/// What phase 2 of an ensure that creates the BLB waits for.
pub const WAITS_FOR_BLB: &str = "the BLB's id and status available";

/// One mutating call of a Baidu flow.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// `CreateLoadBalancer` with this body; its id fills the flow's BLB slot.
    CreateBlb {
        /// The BLB's name.
        name: String,
        /// The create body.
        body: Value,
    },
    /// `DeleteLoadBalancer`, after waiting for the BLB when it was not `available`.
    DeleteBlb {
        /// The BLB's id.
        id: String,
        /// The BLB's name.
        name: String,
        /// The BLB was seen in a transitional state: wait before deleting (BCE refuses).
        wait: bool,
    },
    /// A change under a BLB (description, listeners, backends).
    Blb {
        /// The BLB's id (empty for a BLB not created yet: never run, re-planned).
        id: String,
        /// The BLB's name.
        name: String,
        /// The call.
        step: Step,
    },
    /// A security-group call for the Service's BLB.
    Group {
        /// The BLB's id (empty for a BLB not created yet).
        blb_id: String,
        /// The BLB's name.
        blb: String,
        /// The Service the group is for (name, description and tags come from it).
        service: ServiceKey,
        /// The call.
        step: source_ranges::Step,
    },
    /// An EIP call for a BLB.
    Eip {
        /// The BLB's id (empty for a BLB not created yet).
        blb_id: String,
        /// The name an EIP not created yet is shown under.
        new_name: String,
        /// The call.
        step: EipStep,
    },
}

impl ConvergeStep for Change {
    fn describe(&self) -> PlannedChange {
        match self {
            Change::CreateBlb { name, body } => PlannedChange::new(
                ChangeAction::Create,
                "LoadBalancer",
                name,
                "blb:CreateLoadBalancer",
            )
            .field(
                "desc",
                None,
                body.get("desc").and_then(Value::as_str).map(str::to_string),
            ),
            Change::DeleteBlb { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "LoadBalancer",
                name,
                "blb:DeleteLoadBalancer",
            ),
            Change::Blb { name, step, .. } => step.planned(name),
            Change::Group {
                blb, service, step, ..
            } => step.planned(blb, &source_ranges::group_name(service)),
            Change::Eip { new_name, step, .. } => step.planned(new_name),
        }
    }
}

/// The ids steps of one phase hand to later steps of the same phase.
#[derive(Debug)]
struct Slots {
    blb: Slot<String>,
    group: Slot<String>,
    eip: Slot<String>,
}

impl Slots {
    fn new() -> Self {
        Slots {
            blb: Slot::new("the BLB's id from CreateLoadBalancer"),
            group: Slot::new("the security group's id from CreateSecurityGroup"),
            eip: Slot::new("the EIP's address from CreateEip"),
        }
    }
}

/// Ignores "not found" on a removal: already gone is what the step wanted.
fn gone_is_done(result: Result<(), crate::error::BceError>) -> Result<(), ProviderError> {
    match result {
        Err(error) if !error.is_not_found() => Err(error.into()),
        _ => Ok(()),
    }
}

/// Performs one [`Change`], filling and reading `slots`.
async fn run_change(
    p: &BaiduProvider,
    slots: &mut Slots,
    change: &Change,
) -> Result<(), ProviderError> {
    let c = p.client();
    match change {
        Change::CreateBlb { name, body } => {
            let id = c.create_blb(body).await?;
            tracing::info!(blb = %id, %name, "created BLB");
            slots.blb.fill(id);
            Ok(())
        }
        Change::DeleteBlb { id, wait, .. } => {
            if *wait {
                p.wait_available(id).await?;
            }
            p.change(id, || async {
                match c.delete_blb(id).await {
                    Err(error) if error.is_not_found() => Ok(()),
                    other => other,
                }
            })
            .await
        }
        Change::Blb { id, step, .. } => p.apply(id, step).await,
        Change::Group {
            blb_id,
            service,
            step,
            ..
        } => run_group(p, slots, blb_id, service, step).await,
        Change::Eip { blb_id, step, .. } => match step {
            EipStep::Unbind(ip) => gone_is_done(c.unbind_eip(ip).await),
            EipStep::Release(ip) => gone_is_done(c.release_eip(ip).await),
            EipStep::Create(want) => {
                let ip = c.create_eip(&want.body).await?;
                tracing::info!(blb = %blb_id, eip = %ip, "created EIP");
                slots.eip.fill(ip);
                Ok(())
            }
            EipStep::Bind(ip) => {
                let ip = match ip {
                    Some(ip) => ip.clone(),
                    None => slots.eip.require()?.clone(),
                };
                p.wait_eip(&ip).await?;
                p.change(blb_id, || c.bind_eip(&ip, blb_id)).await
            }
        },
    }
}

async fn run_group(
    p: &BaiduProvider,
    slots: &mut Slots,
    blb_id: &str,
    service: &ServiceKey,
    step: &source_ranges::Step,
) -> Result<(), ProviderError> {
    let c = p.client();
    let remark = format!("kube-lb {}/{}", service.namespace, service.name);
    match step {
        source_ranges::Step::Create(rules) => {
            let body = json!({
                "name": source_ranges::group_name(service),
                "desc": source_ranges::group_description(p.cluster(), service),
                "vpcId": p.vpc_id(),
                "rules": rules.iter().map(|r| r.to_json(&remark)).collect::<Vec<_>>(),
                "tags": source_ranges::group_tags(p.cluster(), service),
            });
            let id = c.create_security_group(&body).await?;
            tracing::info!(blb = %blb_id, group = %id, "created the Service's security group");
            slots.group.fill(id);
            Ok(())
        }
        source_ranges::Step::Authorize { group, rule } => {
            Ok(c.authorize_rule(group, &rule.to_json(&remark)).await?)
        }
        source_ranges::Step::DeleteRule { id, .. } => gone_is_done(c.delete_rule(id).await),
        source_ranges::Step::Bind(group) => {
            let id = match group {
                GroupRef::Id(id) => id.clone(),
                GroupRef::New => slots.group.require()?.clone(),
            };
            let ids = [id];
            p.change(blb_id, || c.bind_security_groups(blb_id, &ids, true))
                .await
        }
        source_ranges::Step::Unbind(groups) => {
            p.change(blb_id, || c.bind_security_groups(blb_id, groups, false))
                .await
        }
        source_ranges::Step::Delete(id) => gone_is_done(c.delete_security_group(id).await),
    }
}

/// What the last plan of an ensure found, for its result.
#[derive(Debug, Clone)]
struct Outcome {
    blb: Blb,
    owned: bool,
    /// The address, when known before the EIP calls (`None`: the EIP they create).
    known: Option<String>,
}

/// One Service's ensure.
pub(crate) struct EnsureFlow<'a> {
    provider: &'a BaiduProvider,
    spec: &'a LoadBalancerSpec,
    desired: Desired,
    slots: Slots,
    outcome: Option<Outcome>,
}

impl<'a> EnsureFlow<'a> {
    /// The ensure of `spec` towards `desired` (already parsed and checked).
    pub(crate) fn new(
        provider: &'a BaiduProvider,
        spec: &'a LoadBalancerSpec,
        desired: Desired,
    ) -> Self {
        EnsureFlow {
            provider,
            spec,
            desired,
            slots: Slots::new(),
            outcome: None,
        }
    }

    /// The steps that take the existing `blb` to the Service's wish; `fresh`: the BLB is one
    /// phase 1 creates (planned as BCE makes it: no listeners, backends, groups or address).
    async fn converge_blb(
        &mut self,
        blb: Blb,
        owned: bool,
        fresh: bool,
    ) -> Result<Vec<Change>, ProviderError> {
        let p = self.provider;
        let desired = &self.desired;
        let mut changes = Vec::new();
        if owned {
            // Before the listeners: a new port is never reachable from outside the ranges.
            let existing = (!fresh).then_some(&blb);
            for step in p.source_range_steps(existing, self.spec, desired).await? {
                changes.push(Change::Group {
                    blb_id: blb.blb_id.clone(),
                    blb: blb.name.clone(),
                    service: desired.service.clone(),
                    step,
                });
            }
        }
        let observed = if fresh {
            Observed::default()
        } else {
            p.observe(&blb.blb_id).await?
        };
        let (unmark, steps): (Vec<Step>, Vec<Step>) = plan::plan(&blb, &observed, desired, owned)
            .into_iter()
            .partition(drops_eip_mark);
        let under = |step: Step| Change::Blb {
            id: blb.blb_id.clone(),
            name: blb.name.clone(),
            step,
        };
        changes.extend(steps.into_iter().map(under));
        let (eip_steps, known) = p.address_plan(&blb, desired, owned).await?;
        let new_name = desired
            .eip
            .as_ref()
            .map_or_else(|| desired.name.clone(), |e| e.name.clone());
        changes.extend(eip_steps.into_iter().map(|step| Change::Eip {
            blb_id: blb.blb_id.clone(),
            new_name: new_name.clone(),
            step,
        }));
        changes.extend(unmark.into_iter().map(under));
        self.outcome = Some(Outcome { blb, owned, known });
        Ok(changes)
    }
}

#[async_trait]
impl Flow for EnsureFlow<'_> {
    type Step = Change;
    type Done = LoadBalancerStatus;

    fn provider(&self) -> &'static str {
        "baidu"
    }

    async fn plan(&mut self) -> Result<Plan<Change>, ProviderError> {
        let p = self.provider;
        // Phase 2 of a create: the BLB phase 1 made, by the id BCE returned.
        if let Some(id) = self.slots.blb.get().cloned() {
            let blb = p.wait_available(&id).await?;
            return Ok(Plan::now(self.converge_blb(blb, true, false).await?));
        }
        let lookup = p.find(&self.desired).await?;
        let found = match &lookup {
            Lookup::Found(blb, _) => Some(blb),
            Lookup::Absent(_) => None,
        };
        p.check_requested_eip(&self.desired, found).await?;
        match lookup {
            Lookup::Found(blb, owned) => {
                let blb = if blb.status == "available" {
                    blb
                } else {
                    p.wait_available(&blb.blb_id).await?
                };
                Ok(Plan::now(self.converge_blb(blb, owned, false).await?))
            }
            Lookup::Absent(leftover) => {
                let mut now = match leftover {
                    Some(previous) => {
                        tracing::warn!(service = %self.desired.service, previous_uid = %previous.uid, name = %self.desired.name, "planning the removal of the BLB a deleted Service of the same namespace/name left behind in this cluster");
                        p.delete_changes(&previous).await?
                    }
                    None => Vec::new(),
                };
                now.push(Change::CreateBlb {
                    name: self.desired.name.clone(),
                    body: self.desired.create_body(p.cluster()),
                });
                let expected = Blb {
                    blb_id: String::new(),
                    name: self.desired.name.clone(),
                    desc: self.desired.desc.clone(),
                    address: String::new(),
                    status: "available".into(),
                    public_ip: String::new(),
                    create_time: None,
                };
                let later = self.converge_blb(expected, true, true).await?;
                Ok(Plan::now(now).then(WAITS_FOR_BLB, later))
            }
        }
    }

    async fn run(&mut self, step: &Change) -> Result<(), ProviderError> {
        run_change(self.provider, &mut self.slots, step).await
    }

    async fn finish(&mut self) -> Result<LoadBalancerStatus, ProviderError> {
        let Some(outcome) = self.outcome.take() else {
            return Err(ProviderError::Internal {
                message: "the ensure finished without planning the BLB".into(),
                source: None,
            });
        };
        let address = outcome
            .known
            .or_else(|| self.slots.eip.get().cloned())
            .unwrap_or_default();
        let public = self.desired.eip.is_some() || self.desired.user_eip.is_some();
        Ok(status_for(&outcome.blb, outcome.owned, &address, public))
    }
}

/// One Service's delete.
pub(crate) struct DeleteFlow<'a> {
    provider: &'a BaiduProvider,
    service: &'a ServiceKey,
    slots: Slots,
}

impl<'a> DeleteFlow<'a> {
    /// The delete of `service`'s BLBs, groups and EIPs.
    pub(crate) fn new(provider: &'a BaiduProvider, service: &'a ServiceKey) -> Self {
        DeleteFlow {
            provider,
            service,
            slots: Slots::new(),
        }
    }
}

#[async_trait]
impl Flow for DeleteFlow<'_> {
    type Step = Change;
    type Done = ();

    fn provider(&self) -> &'static str {
        "baidu"
    }

    async fn plan(&mut self) -> Result<Plan<Change>, ProviderError> {
        Ok(Plan::now(self.provider.delete_changes(self.service).await?))
    }

    async fn run(&mut self, step: &Change) -> Result<(), ProviderError> {
        run_change(self.provider, &mut self.slots, step).await
    }

    async fn finish(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }
}

impl BaiduProvider {
    /// Everything deleting the Service does, from one observation: per BLB the EIP bound to it
    /// unbound (and released when ours), then the BLB unless `reserve-lb`; the Service's
    /// security groups, read when a BLB said one may exist ([`source_ranges::SG_MARK`]) or
    /// none was left to say (an earlier delete that stopped after the BLB), unbound first from
    /// a kept BLB (BCE refuses to delete a bound group); then our EIPs left unbound, released
    /// unless prepaid.
    pub(crate) async fn delete_changes(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<Change>, ProviderError> {
        let blbs = self.blbs_to_delete(service).await?;
        let mut changes = Vec::new();
        let reserved = |blb: &Blb| blb.desc.split_whitespace().any(|w| w == plan::RESERVE_MARK);
        for blb in &blbs {
            // Every EIP bound to the Service's BLB is unbound (a user's loadBalancerIP too, as
            // upstream did); ours are released.
            let mut steps = self.detach_steps(blb, service, false).await?;
            steps.extend(self.unbound_upstream_eips(blb).await?);
            changes.extend(steps.into_iter().map(|step| Change::Eip {
                blb_id: blb.blb_id.clone(),
                new_name: blb.name.clone(),
                step,
            }));
            if reserved(blb) {
                tracing::info!(blb = %blb.blb_id, "reserve-lb: keeping the BLB");
            } else {
                changes.push(Change::DeleteBlb {
                    id: blb.blb_id.clone(),
                    name: blb.name.clone(),
                    wait: blb.status != "available",
                });
            }
        }
        if blbs.is_empty() || blbs.iter().any(|b| source_ranges::has_sg_mark(&b.desc)) {
            let ours = self.our_groups(service).await?;
            if !ours.is_empty() {
                for blb in blbs.iter().filter(|b| reserved(b)) {
                    let bound: Vec<String> = self
                        .client()
                        .blb_security_groups(&blb.blb_id)
                        .await?
                        .into_iter()
                        .map(|g| g.security_group_id)
                        .filter(|id| ours.iter().any(|g| &g.id == id))
                        .collect();
                    if !bound.is_empty() {
                        changes.push(Change::Group {
                            blb_id: blb.blb_id.clone(),
                            blb: blb.name.clone(),
                            service: service.clone(),
                            step: source_ranges::Step::Unbind(bound),
                        });
                    }
                }
            }
            changes.extend(ours.into_iter().map(|group| Change::Group {
                blb_id: String::new(),
                blb: String::new(),
                service: service.clone(),
                step: source_ranges::Step::Delete(group.id),
            }));
        }
        for eip in self.loose_eips(service).await? {
            if eip.payment_timing == "Prepaid" {
                tracing::info!(eip = %eip.eip, "prepaid EIP kept (BCE releases prepaid EIPs only after they expire)");
                continue;
            }
            changes.push(Change::Eip {
                blb_id: String::new(),
                new_name: String::new(),
                step: EipStep::Release(eip.eip),
            });
        }
        Ok(changes)
    }
}

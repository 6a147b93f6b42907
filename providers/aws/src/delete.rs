//! Resumable, leak-free delete, and the removal of the other kind of load balancer when a
//! Service's `aws-load-balancer-type` changes. Nothing is remembered between attempts: every
//! attempt finds what is left by name and ownership tags and removes it, so an attempt
//! interrupted at any step (a kill, a lost response, an error) is finished by the next one.
//! Delete returns `Ok` only when nothing this Service owns remains; a load balancer with the
//! Service's name but someone else's tags is left alone.
//!
//! Each half removes its load balancer last where AWS allows it, so the load balancer stays
//! the anchor by which the next attempt finds the rest:
//! - NLB: listeners → target groups (the listeners' and tagged orphans) → node rules → NLB.
//! - Classic ELB: node rules that reference its groups → ELB → its owned `k8s-elb-` group.
//!   The group cannot go before the ELB that uses it; it is found by its deterministic name.
//!
//! ## Kind changes: break-before-make
//!
//! A change between Classic ELB and NLB removes the old load balancer completely before the
//! new one is created, and every `ensure` first looks for the other kind by name and removes
//! it, so a kill at any step converges to exactly one load balancer. Make-before-break (create
//! the new one, move the status, then remove the old) is not possible here: both kinds get the
//! same deterministic name (`a` + UID, which is how a restarted controller finds them) and
//! AWS refuses a second load balancer with that name while the first exists. It would also
//! need two load balancers for one Service for a while, which the chaos suite treats as a
//! defect. The Service is without a load balancer between the two, as with a scheme change,
//! which recreates under the same constraint; the new kind has a new DNS name anyway, so
//! clients must follow the Service's status in either design.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::ProviderError;
use kube_lb_provider_core::converge::{Flow, Plan};
use kube_lb_provider_core::naming::{SERVICE_NAME_TAG, load_balancer_name};

use aws_sdk_elasticloadbalancingv2::types as v2;

use crate::calls::ops;
use crate::clb;
use crate::clb::plan::ClbObserved;
use crate::desired::LB_NAME_TAG;
use crate::discovery::ec2_filter;
use crate::error::AwsError;
use crate::flow::{Runner, clb_side_revokes, nlb_side_steps};
use crate::naming::{clb_security_group_name, target_group_prefix};
use crate::nlb;
use crate::nlb::plan::NlbObserved;
use crate::nodes::{self, Ownership};
use crate::provider::AwsProvider;
use crate::sg::{ObservedGroup, RuleChanges};
use crate::steps::{self, AwsStep};

/// What to do with a load balancer of our name whose tags name another owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Foreign {
    /// Leave it (delete of a Service: it is not ours to remove).
    Skip,
    /// Fail with [`AwsError::NameTaken`] (ensure: the Service cannot get its load balancer).
    Error(crate::calls::Op),
}

/// A load balancer found under the Service's name, and whose it is by its tags.
enum Claim<T> {
    /// None of this kind has the name.
    Absent,
    /// Ours: this Service's, by the ownership tags.
    Ours(T),
    /// Someone else's (the owner its tags name).
    Theirs(String),
}

impl Foreign {
    /// The load balancer a removal takes on: ours; someone else's fails an ensure and is
    /// left alone (with a warning) by a delete.
    fn settle<T>(
        self,
        claim: Claim<T>,
        resource: &'static str,
        name: &str,
    ) -> Result<Option<T>, AwsError> {
        match (claim, self) {
            (Claim::Ours(found), _) => Ok(Some(found)),
            (Claim::Absent, _) => Ok(None),
            (Claim::Theirs(owner), Foreign::Error(op)) => Err(AwsError::NameTaken {
                operation: op.name,
                resource,
                name: name.to_string(),
                owner,
            }),
            (Claim::Theirs(owner), Foreign::Skip) => {
                tracing::warn!(lb = %name, owner, resource, "a load balancer with this Service's name belongs to someone else; left alone");
                Ok(None)
            }
        }
    }
}

/// `delete` of one Service as a [`Flow`]: the Classic ELB side's rule revocations and the
/// ELB, the NLB side (listeners → target groups → node rules → NLB), then, once the ELB is
/// gone, its owned `k8s-elb-` group. `finish` confirms nothing of ours is left by name.
pub(crate) struct DeleteFlow<'a> {
    provider: &'a AwsProvider,
    service: &'a ServiceKey,
    runner: Runner,
}

impl<'a> DeleteFlow<'a> {
    /// A delete of `service`'s load balancers.
    pub(crate) fn new(provider: &'a AwsProvider, service: &'a ServiceKey) -> Self {
        DeleteFlow {
            provider,
            service,
            runner: Runner::default(),
        }
    }

    async fn plan_aws(&mut self) -> Result<Plan<AwsStep>, AwsError> {
        let name = load_balancer_name(&self.service.uid);
        let clb = observe_clb_side(self.provider, self.service, Foreign::Skip, true).await?;
        let nlb = observe_nlb_side(self.provider, self.service, Foreign::Skip, true).await?;
        let mut now = Vec::new();
        let mut later = Vec::new();
        if let Some(side) = &clb {
            now.extend(clb_side_revokes(side));
            let group_deletes = side
                .owned_groups
                .iter()
                .map(|id| steps::delete_group_step(id));
            if side.present {
                now.push(steps::delete_clb_step(&name));
                // The group cannot go before the ELB that uses it.
                later.extend(group_deletes);
            } else {
                now.extend(group_deletes);
            }
        }
        if let Some(side) = &nlb {
            now.extend(nlb_side_steps(&name, side));
        }
        Ok(Plan::now(now).then("the Classic ELB removed", later))
    }
}

#[async_trait]
impl Flow for DeleteFlow<'_> {
    type Step = AwsStep;
    type Done = ();

    fn provider(&self) -> &'static str {
        "aws"
    }

    async fn plan(&mut self) -> Result<Plan<AwsStep>, ProviderError> {
        Ok(self.plan_aws().await?)
    }

    async fn run(&mut self, step: &AwsStep) -> Result<(), ProviderError> {
        Ok(self.runner.run(self.provider, step).await?)
    }

    /// `Ok` tells the controller to drop the finalizer, after which nothing would ever look
    /// for these resources again: confirm by name that no load balancer of ours is left (one
    /// a racing create made, or a second one a non-unique implementation allowed).
    async fn finish(&mut self) -> Result<(), ProviderError> {
        if let Some(kind) = remaining(self.provider, self.service).await? {
            let name = load_balancer_name(&self.service.uid);
            return Err(AwsError::Unexpected(format!(
                "{kind} {name} still exists after delete; deleting again"
            ))
            .into());
        }
        Ok(())
    }
}

/// The kind of a load balancer of this Service still found by name, if any.
async fn remaining(
    provider: &AwsProvider,
    service: &ServiceKey,
) -> Result<Option<&'static str>, AwsError> {
    if let Claim::Ours(_) = find_clb(provider, service).await? {
        return Ok(Some("Classic ELB"));
    }
    if let Claim::Ours(_) = find_nlb(provider, service).await? {
        return Ok(Some("NLB"));
    }
    Ok(None)
}

/// The Classic ELB under the Service's name and whose it is (describe, then its tags).
async fn find_clb(
    provider: &AwsProvider,
    service: &ServiceKey,
) -> Result<Claim<ClbObserved>, AwsError> {
    let clients = provider.clients_ref();
    let name = load_balancer_name(&service.uid);
    let Some(clb) = clb::io::describe(clients, &name).await? else {
        return Ok(Claim::Absent);
    };
    let tags = clb::io::read_tags(clients, &name).await?;
    Ok(claim(clb, &tags, &ownership(provider, service)))
}

/// The NLB under the Service's name and whose it is (describe, then its tags).
async fn find_nlb(
    provider: &AwsProvider,
    service: &ServiceKey,
) -> Result<Claim<NlbObserved>, AwsError> {
    let clients = provider.clients_ref();
    let name = load_balancer_name(&service.uid);
    let Some(nlb) = nlb::io::describe(clients, &name).await? else {
        return Ok(Claim::Absent);
    };
    let tags = nlb::io::read_tags(clients, std::slice::from_ref(&nlb.arn)).await?;
    let tags = tags.get(&nlb.arn).cloned().unwrap_or_default();
    Ok(claim(nlb, &tags, &ownership(provider, service)))
}

fn claim<T>(
    found: T,
    tags: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
) -> Claim<T> {
    match crate::owner::check_resource(tags, ours) {
        Ok(()) => Claim::Ours(found),
        Err(owner) => Claim::Theirs(owner),
    }
}

/// The ownership tags kube-lb writes on this Service's load balancers.
pub(crate) fn ownership(provider: &AwsProvider, service: &ServiceKey) -> BTreeMap<String, String> {
    crate::tags::resource_tags(
        provider.cluster_id(),
        provider.config_ref().legacy_cluster_tag,
        service,
        &BTreeMap::new(),
    )
}

/// What the Classic ELB half of a delete (or an ensure's retirement of it) removes, as read
/// before anything is removed: [`DeleteFlow`] and an ensure's
/// retirement turn it into steps.
#[derive(Debug, Clone)]
pub(crate) struct ClbSide {
    /// The ELB exists and is ours.
    pub present: bool,
    /// Its owned `k8s-elb-` groups (cluster-tagged, not the configured shared group), by ID.
    pub owned_groups: Vec<String>,
    /// The node-rule changes that stop admitting it, one plan per group whose references are
    /// removed, in the order they are applied.
    pub rule_plans: Vec<BTreeMap<String, RuleChanges>>,
}

/// Reads the Classic ELB side of `service`; `None` when there is nothing to remove. The owned
/// group is looked for only when the ELB exists or `look_for_group`.
pub(crate) async fn observe_clb_side(
    provider: &AwsProvider,
    service: &ServiceKey,
    foreign: Foreign,
    look_for_group: bool,
) -> Result<Option<ClbSide>, AwsError> {
    let clients = provider.clients_ref();
    let config = provider.config_ref();
    let name = load_balancer_name(&service.uid);
    let clb = foreign.settle(find_clb(provider, service).await?, "Classic ELB", &name)?;
    let present = clb.is_some();
    if !present && !look_for_group {
        return Ok(None);
    }
    // The owned LB group, found by name (any VPC) and ownership tag.
    let own_group_name = clb_security_group_name(&name);
    let owned_groups: Vec<String> = nodes::describe_groups(
        clients,
        Some(vec![ec2_filter("group-name", [own_group_name.as_str()])]),
        None,
    )
    .await?
    .into_iter()
    .filter(|g| g.tags.contains_key(&provider.cluster_tag_key()))
    .filter(|g| config.elb_security_group.as_deref() != Some(g.id.as_str()))
    .map(|g| g.id)
    .collect();
    if !present && owned_groups.is_empty() {
        return Ok(None);
    }
    let mut rule_plans = Vec::new();
    // CLB references to the group about to be deleted, on any group (tagged or not), or
    // the group can never be deleted (kubernetes#104383).
    for group in &owned_groups {
        let referencing = nodes::describe_groups(
            clients,
            Some(vec![ec2_filter("ip-permission.group-id", [group.as_str()])]),
            None,
        )
        .await?;
        rule_plans.push(revoke_sources(&referencing, std::slice::from_ref(group)));
    }
    if !config.disable_security_group_ingress && owned_groups.is_empty() {
        // BYO / shared groups: only revoke from cluster-tagged groups, never delete them.
        let sources: Vec<String> = clb
            .iter()
            .flat_map(|clb| clb.security_groups.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let still_used = sources
            .iter()
            .any(|s| config.elb_security_group.as_deref() == Some(s.as_str()));
        if !sources.is_empty() && !still_used {
            let groups =
                nodes::observe_groups(clients, &provider.cluster_tag_key(), None, &BTreeSet::new())
                    .await?;
            rule_plans.push(revoke_sources(&groups, &sources));
        }
    }
    Ok(Some(ClbSide {
        present,
        owned_groups,
        rule_plans,
    }))
}

/// The changes that remove, from `groups`, every rule admitting traffic from `sources`.
fn revoke_sources(groups: &[ObservedGroup], sources: &[String]) -> BTreeMap<String, RuleChanges> {
    nodes::plan_node_groups(groups, &BTreeSet::new(), &[], Ownership::ClbSource(sources))
}

/// What the NLB half of a delete (or an ensure's retirement of it) removes, as read before
/// anything is removed: [`DeleteFlow`] and an ensure's
/// retirement turn it into steps.
#[derive(Debug, Clone)]
pub(crate) struct NlbSide {
    /// The NLB's ARN, when it exists and is ours.
    pub arn: Option<String>,
    /// Its listeners.
    pub listeners: Vec<v2::Listener>,
    /// The target groups its listeners forward to and this Service's orphaned ones.
    pub target_groups: BTreeSet<String>,
    /// The node-rule changes that remove its rules (`None` when ingress is not managed).
    pub node_rules: Option<BTreeMap<String, RuleChanges>>,
}

/// Reads the NLB side of `service`; `None` when no NLB of ours exists and not `always` (which
/// also looks for orphaned target groups and node rules, as delete does).
pub(crate) async fn observe_nlb_side(
    provider: &AwsProvider,
    service: &ServiceKey,
    foreign: Foreign,
    always: bool,
) -> Result<Option<NlbSide>, AwsError> {
    let clients = provider.clients_ref();
    let name = load_balancer_name(&service.uid);
    let arn = foreign
        .settle(find_nlb(provider, service).await?, "NLB", &name)?
        .map(|nlb| nlb.arn);
    if arn.is_none() && !always {
        return Ok(None);
    }
    let mut listeners = Vec::new();
    if let Some(arn) = &arn {
        let described = clients
            .calls
            .run(ops::V2_DESCRIBE_LISTENERS, || {
                clients
                    .elbv2
                    .describe_listeners()
                    .load_balancer_arn(arn)
                    .send()
            })
            .await?;
        listeners = described.listeners().to_vec();
    }
    let mut target_groups: BTreeSet<String> = listeners
        .iter()
        .flat_map(|listener| listener.default_actions())
        .filter_map(|action| action.target_group_arn().map(str::to_string))
        .collect();
    target_groups.extend(orphan_target_groups(provider, service, &name).await?);
    let node_rules = if provider.config_ref().disable_security_group_ingress {
        None
    } else {
        // NLB rules by description on cluster-tagged and known node groups.
        let known = provider.discovery_ref().known_instance_groups();
        let groups =
            nodes::observe_groups(clients, &provider.cluster_tag_key(), None, &known).await?;
        Some(nodes::plan_node_groups(
            &groups,
            &BTreeSet::new(),
            &[],
            Ownership::Nlb(&name),
        ))
    };
    Ok(Some(NlbSide {
        arn,
        listeners,
        target_groups,
        node_rules,
    }))
}

/// Target groups of this Service left without a load balancer: name prefix
/// `k8s-<ns8>-<name8>-`, then confirmed by tags (the service-name tag, and our LB-name tag
/// when present, so a re-created Service with the same name keeps its own).
pub(crate) async fn orphan_target_groups(
    provider: &AwsProvider,
    service: &ServiceKey,
    lb_name: &str,
) -> Result<Vec<String>, AwsError> {
    let clients = provider.clients_ref();
    let prefix = target_group_prefix(service);
    let candidates: Vec<(String, bool)> = nlb::io::describe_all_target_groups(clients)
        .await?
        .iter()
        .filter(|tg| {
            tg.target_group_name()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter_map(|tg| {
            Some((
                tg.target_group_arn()?.to_string(),
                tg.load_balancer_arns().is_empty(),
            ))
        })
        .collect();
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let arns: Vec<String> = candidates.iter().map(|(arn, _)| arn.clone()).collect();
    let tags = nlb::io::read_tags(clients, &arns).await?;
    let cluster_tag = provider.cluster_tag_key();
    let service_name = service.to_string();
    // Ours carry the LB-name tag; upstream's (no such tag) are taken only once detached.
    Ok(candidates
        .into_iter()
        .filter(|(arn, detached)| {
            tags.get(arn).is_some_and(|t| {
                t.contains_key(&cluster_tag)
                    && t.get(SERVICE_NAME_TAG) == Some(&service_name)
                    && match t.get(LB_NAME_TAG) {
                        Some(owner) => owner == lb_name,
                        None => *detached,
                    }
            })
        })
        .map(|(arn, _)| arn)
        .collect())
}

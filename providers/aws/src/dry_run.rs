//! `kube-lb plan` for AWS: what `ensure` or `delete` would change, observed with reads only.
//!
//! The removals (`delete`, and `ensure`'s retirement of the other kind) are observed by the
//! very functions `delete` uses ([`crate::delete::observe_clb_side`],
//! [`crate::delete::observe_nlb_side`]). The `ensure` side shares its steps with `ensure`
//! (backend instances, the NLB's details and owner check, the Classic ELB's group choice, the
//! node-rule plans) but reads every load balancer itself (never the provider's shared listings,
//! which a read would mark as used, nor its verified cache, which would skip what changed
//! behind its back), then feeds the same pure planners (`clb::plan`, `nlb::plan`,
//! `sg::diff_rules`, `nodes::plan_node_groups`). Their actions are rendered here as
//! provider-neutral [`PlannedChange`]s with the fields that change.
//!
//! Where `ensure` creates something and then needs its ID (the Classic ELB's own security
//! group, before the ELB and the node rules that reference it), the plan names it by its
//! group name in place of the ID it does not have yet.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_annotations::{AwsLoadBalancerKind, LoadBalancerSpec, Scheme, ServiceKey};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{BackendNode, ChangeAction, PlannedChange};

use crate::audit::{
    KIND_CLB, KIND_NLB, KIND_SECURITY_GROUP, KIND_SECURITY_GROUP_RULE, KIND_TARGET_GROUP,
};
use crate::calls::ops;
use crate::clb;
use crate::clb::plan::{
    Attributes, ClbAction, ClbDesired, ClbObserved, HealthCheck, Listener as ClbListener,
};
use crate::config::NlbSecurityGroupMode;
use crate::delete::{Foreign, observe_clb_side, observe_nlb_side};
use crate::desired::{self, Placement};
use crate::discovery::ec2_filter;
use crate::error::AwsError;
use crate::naming::clb_security_group_name;
use crate::nlb;
use crate::nlb::plan::{NlbAction, NlbDesired, NlbObserved, TgRef};
use crate::nodes;
use crate::provider::{AwsProvider, BackendInstances};
use crate::sg::{ObservedGroup, RuleChanges, diff_rules};
use crate::tags::security_group_tags;

/// Kind of a Classic ELB policy.
const KIND_POLICY: &str = "LoadBalancerPolicy";
/// Kind of an NLB listener.
const KIND_LISTENER: &str = "Listener";

/// The changes `ensure(spec, backends)` would make now.
pub(crate) async fn plan_ensure(
    provider: &AwsProvider,
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
) -> Result<Vec<PlannedChange>, AwsError> {
    match desired::aws_spec(spec)?.kind {
        // The trait impl answers this before calling here, as `ensure` does.
        AwsLoadBalancerKind::ImplementedElsewhere => Ok(Vec::new()),
        AwsLoadBalancerKind::Classic => plan_clb(provider, spec, backends).await,
        AwsLoadBalancerKind::Nlb => plan_nlb(provider, spec, backends).await,
    }
}

/// The changes `delete(service)` would make now.
pub(crate) async fn plan_delete(
    provider: &AwsProvider,
    service: &ServiceKey,
) -> Result<Vec<PlannedChange>, AwsError> {
    let mut changes = plan_remove_clb(provider, service, Foreign::Skip, true).await?;
    changes.extend(plan_remove_nlb(provider, service, Foreign::Skip, true).await?);
    Ok(changes)
}

async fn plan_clb(
    provider: &AwsProvider,
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
) -> Result<Vec<PlannedChange>, AwsError> {
    let clients = provider.clients_ref();
    let config = provider.config_ref();
    let name = load_balancer_name(&spec.service.uid);
    let BackendInstances {
        instances,
        candidate_groups,
        ids: instance_ids,
    } = provider.backend_instances(spec, backends).await?;

    let mut changes = Vec::new();
    let mut observed = clb::io::describe(clients, &name).await?;
    if let Some(seen) = observed.as_mut() {
        let tags = clb::io::read_tags(clients, &name).await?;
        provider.check_owner(
            &spec.service,
            &tags,
            "Classic ELB",
            ops::ELB_CREATE_LOAD_BALANCER,
        )?;
        seen.tags = Some(tags);
        seen.attributes = Some(clb::io::read_attributes(clients, &name).await?);
    } else {
        // Break-before-make: an NLB of this Service goes first.
        changes.extend(
            plan_remove_nlb(
                provider,
                &spec.service,
                Foreign::Error(ops::ELB_CREATE_LOAD_BALANCER),
                false,
            )
            .await?,
        );
    }
    let vpc = provider.vpc(
        &instances,
        observed.as_ref().and_then(|o| o.vpc_id.as_deref()),
    )?;
    let internal = spec.scheme == Scheme::Internal;
    let subnets = provider.subnets(spec, &vpc, internal).await?;
    let aws = desired::aws_spec(spec)?;
    let observed_groups = if config.disable_security_group_ingress {
        None
    } else {
        Some(
            nodes::observe_groups(
                clients,
                &provider.cluster_tag_key(),
                Some(&vpc),
                &candidate_groups,
            )
            .await?,
        )
    };
    let primary =
        match desired::clb_given_groups(&aws.security_groups, config.elb_security_group.as_deref())
        {
            Some(given) => given,
            None => {
                let (id, group_changes) =
                    plan_clb_group(provider, spec, &name, &vpc, observed_groups.as_deref()).await?;
                changes.extend(group_changes);
                vec![id]
            }
        };
    let groups = desired::with_extra_groups(primary, &aws.extra_security_groups);
    let desired = desired::clb(
        &provider.context(&name),
        spec,
        &Placement {
            subnets,
            security_groups: groups.clone(),
            instances: instance_ids,
        },
    )?;
    let actions = clb::plan::plan(observed.as_ref(), &desired);
    changes.extend(render_clb(observed.as_ref(), &desired, &actions));

    if let Some(observed_groups) = &observed_groups
        && let Some(primary) = groups.first()
    {
        let plan = nodes::clb_node_rules_plan(
            &instances,
            observed_groups,
            &provider.cluster_tag_key(),
            primary,
        )?;
        changes.extend(render_rules(&plan));
    }
    Ok(changes)
}

/// The Classic ELB's own `k8s-elb-` group: its ID (or, when it would be created, its name)
/// and the changes to it.
async fn plan_clb_group(
    provider: &AwsProvider,
    spec: &LoadBalancerSpec,
    name: &str,
    vpc: &str,
    known: Option<&[ObservedGroup]>,
) -> Result<(String, Vec<PlannedChange>), AwsError> {
    let group_name = clb_security_group_name(name);
    let rules = desired::clb_security_group_rules(spec)?;
    let listed = known.and_then(|groups| {
        groups
            .iter()
            .find(|g| g.name == group_name && g.vpc_id.as_deref() == Some(vpc))
            .cloned()
    });
    // A group without the cluster tag (an upstream one whose tag was lost) is not among the
    // cluster's groups: `ensure` finds it by name after its create fails.
    let existing = match listed {
        Some(group) => Some(group),
        None => nodes::describe_groups(
            provider.clients_ref(),
            Some(vec![
                ec2_filter("group-name", [group_name.as_str()]),
                ec2_filter("vpc-id", [vpc]),
            ]),
            None,
        )
        .await?
        .into_iter()
        .next(),
    };
    let cluster_tag = provider.cluster_tag_key();
    let mut changes = Vec::new();
    let Some(group) = existing else {
        let aws = desired::aws_spec(spec)?;
        let mut create = PlannedChange::new(
            ChangeAction::Create,
            KIND_SECURITY_GROUP,
            group_name.as_str(),
            ops::CREATE_SECURITY_GROUP.name,
        )
        .field("VpcId", None, Some(vpc.to_string()));
        for (key, value) in security_group_tags(provider.cluster_id(), &aws.additional_tags) {
            create = create.field(format!("Tags[{key}]"), None, Some(value));
        }
        changes.push(create);
        let plan = BTreeMap::from([(group_name.clone(), diff_rules(&[], &rules, |_| true))]);
        changes.extend(render_rules(&plan));
        return Ok((group_name, changes));
    };
    crate::owner::check_group(&group.tags, &cluster_tag).map_err(|owner| AwsError::NameTaken {
        operation: ops::CREATE_SECURITY_GROUP.name,
        resource: "security group",
        name: group_name.clone(),
        owner,
    })?;
    if !group.tags.contains_key(&cluster_tag) {
        changes.push(
            PlannedChange::new(
                ChangeAction::Modify,
                KIND_SECURITY_GROUP,
                group.id.as_str(),
                ops::CREATE_TAGS.name,
            )
            .field(
                format!("Tags[{cluster_tag}]"),
                None,
                Some(kube_lb_provider_core::naming::CLUSTER_TAG_OWNED.to_string()),
            ),
        );
    }
    let plan = BTreeMap::from([(
        group.id.clone(),
        diff_rules(&group.ingress, &rules, |_| true),
    )]);
    changes.extend(render_rules(&plan));
    Ok((group.id, changes))
}

async fn plan_nlb(
    provider: &AwsProvider,
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
) -> Result<Vec<PlannedChange>, AwsError> {
    let clients = provider.clients_ref();
    let config = provider.config_ref();
    let name = load_balancer_name(&spec.service.uid);
    let BackendInstances {
        instances,
        candidate_groups,
        ids: instance_ids,
    } = provider.backend_instances(spec, backends).await?;

    let mut observed = nlb::io::describe(clients, &name).await?;
    if let Some(seen) = observed.as_mut() {
        provider.observe_own_nlb(spec, seen, None).await?;
    }
    let vpc = provider.vpc(&instances, None)?;
    let internal = spec.scheme == Scheme::Internal;
    let subnets = provider.subnets(spec, &vpc, internal).await?;
    let observed_groups = if config.disable_security_group_ingress {
        None
    } else {
        Some(
            nodes::observe_groups(
                clients,
                &provider.cluster_tag_key(),
                Some(&vpc),
                &candidate_groups,
            )
            .await?,
        )
    };
    // Break-before-make: the Classic ELB side goes first, including its group left by an
    // interrupted kind change.
    let clb_group = clb_security_group_name(&name);
    let clb_group_left = observed_groups
        .as_ref()
        .is_some_and(|groups| groups.iter().any(|g| g.name == clb_group));
    let mut changes = Vec::new();
    if observed.is_none() || clb_group_left {
        changes.extend(
            plan_remove_clb(
                provider,
                &spec.service,
                Foreign::Error(ops::V2_CREATE_LOAD_BALANCER),
                clb_group_left,
            )
            .await?,
        );
    }
    let aws = desired::aws_spec(spec)?;
    let groups = if config.nlb_security_group_mode == NlbSecurityGroupMode::Managed {
        aws.security_groups.clone()
    } else {
        Vec::new()
    };
    let desired = desired::nlb(
        &provider.context(&name),
        spec,
        &subnets,
        groups,
        instance_ids,
    )?;
    let actions = nlb::plan::plan(observed.as_ref(), &desired);
    changes.extend(render_nlb(observed.as_ref(), &desired, &actions));

    if let Some(observed_groups) = &observed_groups {
        let plan = provider
            .nlb_node_rules_plan(spec, &vpc, &instances, observed_groups)
            .await?;
        changes.extend(render_rules(&plan));
    }
    Ok(changes)
}

/// What `delete`'s Classic ELB half (or `ensure`'s retirement of it) would remove: the same
/// reads as the removal ([`crate::delete::observe_clb_side`]), listed instead of applied.
async fn plan_remove_clb(
    provider: &AwsProvider,
    service: &ServiceKey,
    foreign: Foreign,
    look_for_group: bool,
) -> Result<Vec<PlannedChange>, AwsError> {
    let Some(side) = observe_clb_side(provider, service, foreign, look_for_group).await? else {
        return Ok(Vec::new());
    };
    let name = load_balancer_name(&service.uid);
    let mut changes: Vec<PlannedChange> = side.rule_plans.iter().flat_map(render_rules).collect();
    if side.present {
        changes.push(PlannedChange::new(
            ChangeAction::Delete,
            KIND_CLB,
            name.as_str(),
            ops::ELB_DELETE_LOAD_BALANCER.name,
        ));
    }
    for group in &side.owned_groups {
        changes.push(PlannedChange::new(
            ChangeAction::Delete,
            KIND_SECURITY_GROUP,
            group.as_str(),
            ops::DELETE_SECURITY_GROUP.name,
        ));
    }
    Ok(changes)
}

/// What `delete`'s NLB half (or `ensure`'s retirement of it) would remove: the same reads as
/// the removal ([`crate::delete::observe_nlb_side`]), listed instead of applied; `always` also
/// looks for target groups and node rules when no NLB exists.
async fn plan_remove_nlb(
    provider: &AwsProvider,
    service: &ServiceKey,
    foreign: Foreign,
    always: bool,
) -> Result<Vec<PlannedChange>, AwsError> {
    let Some(side) = observe_nlb_side(provider, service, foreign, always).await? else {
        return Ok(Vec::new());
    };
    let name = load_balancer_name(&service.uid);
    let mut changes: Vec<PlannedChange> = side
        .listeners
        .iter()
        .map(|listener| {
            let port = listener
                .port()
                .map_or_else(|| "?".to_string(), |p| p.to_string());
            PlannedChange::new(
                ChangeAction::Delete,
                KIND_LISTENER,
                format!("{name}:{port}"),
                ops::V2_DELETE_LISTENER.name,
            )
        })
        .collect();
    for arn in &side.target_groups {
        changes.push(PlannedChange::new(
            ChangeAction::Delete,
            KIND_TARGET_GROUP,
            target_group_name_of(arn),
            ops::V2_DELETE_TARGET_GROUP.name,
        ));
    }
    if let Some(node_rules) = &side.node_rules {
        changes.extend(render_rules(node_rules));
    }
    if side.arn.is_some() {
        changes.push(PlannedChange::new(
            ChangeAction::Delete,
            KIND_NLB,
            name.as_str(),
            ops::V2_DELETE_LOAD_BALANCER.name,
        ));
    }
    Ok(changes)
}

/// The name inside a target-group ARN (`…:targetgroup/<name>/<id>`), else the ARN.
fn target_group_name_of(arn: &str) -> &str {
    arn.split_once(":targetgroup/")
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or(arn)
}

// ---- Rendering (pure) ----

fn opt<T: ToString>(value: Option<T>) -> Option<String> {
    value.map(|v| v.to_string())
}

fn joined<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    items
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `change` with a field added only when `old` and `new` differ.
fn diff_field(
    change: PlannedChange,
    field: &str,
    old: Option<String>,
    new: Option<String>,
) -> PlannedChange {
    if old == new {
        change
    } else {
        change.field(field, old, new)
    }
}

/// One change per security-group rule: revocations first, as they are applied.
pub(crate) fn render_rules(plan: &BTreeMap<String, RuleChanges>) -> Vec<PlannedChange> {
    let mut changes = Vec::new();
    for (group, rule_changes) in plan {
        for (rules, action, call) in [
            (
                &rule_changes.revoke,
                ChangeAction::Delete,
                ops::REVOKE_INGRESS.name,
            ),
            (
                &rule_changes.authorize,
                ChangeAction::Create,
                ops::AUTHORIZE_INGRESS.name,
            ),
        ] {
            for rule in rules {
                let mut change = PlannedChange::new(
                    action,
                    KIND_SECURITY_GROUP_RULE,
                    format!("{group} {rule}"),
                    call,
                );
                if let Some(description) = &rule.description {
                    change = match action {
                        ChangeAction::Delete => {
                            change.field("Description", Some(description.clone()), None)
                        }
                        _ => change.field("Description", None, Some(description.clone())),
                    };
                }
                changes.push(change);
            }
        }
    }
    changes
}

fn clb_listener_text(listener: &ClbListener) -> String {
    let mut text = format!(
        "{}:{} -> {}:{}",
        listener.protocol, listener.lb_port, listener.instance_protocol, listener.instance_port
    );
    if let Some(certificate) = &listener.certificate {
        text.push_str(&format!(" ({certificate})"));
    }
    text
}

fn health_fields(
    mut change: PlannedChange,
    old: Option<&HealthCheck>,
    new: &HealthCheck,
) -> PlannedChange {
    type Getter = fn(&HealthCheck) -> String;
    let fields: [(&str, Getter); 5] = [
        ("HealthCheck.Target", |h| h.target.clone()),
        ("HealthCheck.Interval", |h| h.interval.to_string()),
        ("HealthCheck.Timeout", |h| h.timeout.to_string()),
        ("HealthCheck.HealthyThreshold", |h| h.healthy.to_string()),
        ("HealthCheck.UnhealthyThreshold", |h| {
            h.unhealthy.to_string()
        }),
    ];
    for (field, value) in fields {
        change = diff_field(change, field, old.map(value), Some(value(new)));
    }
    change
}

fn attribute_fields(
    mut change: PlannedChange,
    old: &Attributes,
    new: &Attributes,
) -> PlannedChange {
    type Getter = fn(&Attributes) -> Option<String>;
    let fields: [(&str, Getter); 8] = [
        ("CrossZoneLoadBalancing.Enabled", |a| {
            Some(a.cross_zone.to_string())
        }),
        ("AccessLog.Enabled", |a| {
            Some(a.access_log.enabled.to_string())
        }),
        ("AccessLog.S3BucketName", |a| a.access_log.bucket.clone()),
        ("AccessLog.S3BucketPrefix", |a| a.access_log.prefix.clone()),
        ("AccessLog.EmitInterval", |a| {
            opt(a.access_log.emit_interval)
        }),
        ("ConnectionDraining.Enabled", |a| {
            Some(a.draining_enabled.to_string())
        }),
        ("ConnectionDraining.Timeout", |a| opt(a.draining_timeout)),
        ("ConnectionSettings.IdleTimeout", |a| {
            Some(a.idle_timeout.to_string())
        }),
    ];
    for (field, value) in fields {
        let wanted = value(new);
        // `None` in the desired state leaves AWS's value: not a change.
        if wanted.is_some() {
            change = diff_field(change, field, value(old), wanted);
        }
    }
    change
}

/// Renders the Classic ELB planner's actions against what was observed.
pub(crate) fn render_clb(
    observed: Option<&ClbObserved>,
    desired: &ClbDesired,
    actions: &[ClbAction],
) -> Vec<PlannedChange> {
    let fresh = ClbObserved::after_create(desired);
    let recreated = actions
        .iter()
        .any(|a| matches!(a, ClbAction::Create | ClbAction::Recreate));
    // What the load balancer looks like when the later actions run.
    let base = match observed {
        Some(seen) if !recreated => seen,
        _ => &fresh,
    };
    let name = desired.name.as_str();
    let lb = |action: ChangeAction, call: &str| PlannedChange::new(action, KIND_CLB, name, call);
    let scheme = |internal: bool| {
        if internal {
            "internal"
        } else {
            "internet-facing"
        }
    };
    let mut changes = Vec::new();
    for action in actions {
        match action {
            ClbAction::Create | ClbAction::Recreate => {
                if matches!(action, ClbAction::Recreate)
                    && let Some(seen) = observed
                {
                    changes.push(
                        lb(ChangeAction::Delete, ops::ELB_DELETE_LOAD_BALANCER.name).field(
                            "Scheme",
                            Some(scheme(seen.internal).to_string()),
                            Some(scheme(desired.internal).to_string()),
                        ),
                    );
                }
                let mut create = lb(ChangeAction::Create, ops::ELB_CREATE_LOAD_BALANCER.name)
                    .field("Scheme", None, Some(scheme(desired.internal).to_string()))
                    .field("Subnets", None, Some(joined(&desired.subnets)))
                    .field(
                        "SecurityGroups",
                        None,
                        Some(joined(&desired.security_groups)),
                    );
                for listener in &desired.listeners {
                    create = create.field(
                        format!("Listener[{}]", listener.lb_port),
                        None,
                        Some(clb_listener_text(listener)),
                    );
                }
                changes.push(create);
            }
            ClbAction::DeleteListeners(ports) => {
                let mut change = lb(ChangeAction::Modify, ops::ELB_DELETE_LISTENERS.name);
                for port in ports {
                    let old = base
                        .listeners
                        .iter()
                        .find(|l| l.listener.lb_port == *port)
                        .map(|l| clb_listener_text(&l.listener));
                    change = change.field(format!("Listener[{port}]"), old, None);
                }
                changes.push(change);
            }
            ClbAction::CreateListeners(listeners) => {
                let mut change = lb(ChangeAction::Modify, ops::ELB_CREATE_LISTENERS.name);
                for listener in listeners {
                    change = change.field(
                        format!("Listener[{}]", listener.lb_port),
                        None,
                        Some(clb_listener_text(listener)),
                    );
                }
                changes.push(change);
            }
            ClbAction::AttachSubnets(_) | ClbAction::DetachSubnets(_) => {
                let call = if matches!(action, ClbAction::AttachSubnets(_)) {
                    ops::ELB_ATTACH_SUBNETS.name
                } else {
                    ops::ELB_DETACH_SUBNETS.name
                };
                changes.push(lb(ChangeAction::Modify, call).field(
                    "Subnets",
                    Some(joined(&base.subnets)),
                    Some(joined(&desired.subnets)),
                ));
            }
            ClbAction::ApplySecurityGroups(groups) => {
                changes.push(
                    lb(ChangeAction::Modify, ops::ELB_APPLY_SECURITY_GROUPS.name).field(
                        "SecurityGroups",
                        Some(joined(&base.security_groups)),
                        Some(joined(groups)),
                    ),
                );
            }
            ClbAction::ConfigureHealthCheck(health) => {
                changes.push(health_fields(
                    lb(ChangeAction::Modify, ops::ELB_CONFIGURE_HEALTH_CHECK.name),
                    base.health_check.as_ref(),
                    health,
                ));
            }
            ClbAction::ModifyAttributes(attributes) => {
                let old = base
                    .attributes
                    .clone()
                    .unwrap_or_else(Attributes::aws_defaults);
                changes.push(attribute_fields(
                    lb(ChangeAction::Modify, ops::ELB_MODIFY_ATTRIBUTES.name),
                    &old,
                    attributes,
                ));
            }
            ClbAction::CreatePolicy(policy) => {
                changes.push(
                    PlannedChange::new(
                        ChangeAction::Create,
                        KIND_POLICY,
                        format!("{name}/{}", policy.name),
                        ops::ELB_CREATE_POLICY.name,
                    )
                    .field("PolicyTypeName", None, Some(policy.type_name.to_string()))
                    .field(
                        policy.attribute.0,
                        None,
                        Some(policy.attribute.1.clone()),
                    ),
                );
            }
            ClbAction::SetListenerPolicies { lb_port, policies } => {
                let old = base
                    .listeners
                    .iter()
                    .find(|l| l.listener.lb_port == *lb_port)
                    .map(|l| joined(&l.policies));
                changes.push(
                    lb(ChangeAction::Modify, ops::ELB_SET_LISTENER_POLICIES.name).field(
                        format!("Listener[{lb_port}].PolicyNames"),
                        old,
                        Some(joined(policies)),
                    ),
                );
            }
            ClbAction::SetBackendPolicies {
                instance_port,
                policies,
            } => {
                let old = base.backend_policies.get(instance_port).map(joined);
                changes.push(
                    lb(ChangeAction::Modify, ops::ELB_SET_BACKEND_POLICIES.name).field(
                        format!("BackendServer[{instance_port}].PolicyNames"),
                        old,
                        Some(joined(policies)),
                    ),
                );
            }
            ClbAction::DeletePolicy(policy) => {
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    KIND_POLICY,
                    format!("{name}/{policy}"),
                    ops::ELB_DELETE_POLICY.name,
                ));
            }
            ClbAction::AddTags(tags) => {
                let mut change = lb(ChangeAction::Modify, ops::ELB_ADD_TAGS.name);
                for (key, value) in tags {
                    let old = base.tags.as_ref().and_then(|t| t.get(key)).cloned();
                    change = change.field(format!("Tags[{key}]"), old, Some(value.clone()));
                }
                changes.push(change);
            }
            ClbAction::RemoveTags(keys) => {
                let mut change = lb(ChangeAction::Modify, ops::ELB_REMOVE_TAGS.name);
                for key in keys {
                    let old = base.tags.as_ref().and_then(|t| t.get(key)).cloned();
                    change = change.field(format!("Tags[{key}]"), old, None);
                }
                changes.push(change);
            }
            ClbAction::Deregister(instances) => {
                changes.push(lb(ChangeAction::Modify, ops::ELB_DEREGISTER.name).field(
                    "Instances",
                    Some(joined(instances)),
                    None,
                ));
            }
            ClbAction::Register(instances) => {
                changes.push(lb(ChangeAction::Modify, ops::ELB_REGISTER.name).field(
                    "Instances",
                    None,
                    Some(joined(instances)),
                ));
            }
        }
    }
    changes
}

fn targets_text(targets: &[(String, i32)]) -> String {
    targets
        .iter()
        .map(|(id, port)| format!("{id}:{port}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Renders the NLB planner's actions against what was observed.
pub(crate) fn render_nlb(
    observed: Option<&NlbObserved>,
    desired: &NlbDesired,
    actions: &[NlbAction],
) -> Vec<PlannedChange> {
    let name = desired.name.as_str();
    let recreated = actions
        .iter()
        .any(|a| matches!(a, NlbAction::Create | NlbAction::Recreate));
    let base = observed.filter(|_| !recreated);
    let observed_tg =
        |arn: &str| base.and_then(|o| o.target_groups.iter().find(|tg| tg.arn == arn));
    let tg_name = |target_group: &TgRef| -> String {
        match target_group {
            TgRef::New(index) => desired
                .listeners
                .get(*index)
                .map_or_else(|| format!("new #{index}"), |l| l.target_group.name.clone()),
            TgRef::Existing(arn) => observed_tg(arn).map_or_else(
                || target_group_name_of(arn).to_string(),
                |tg| tg.name.clone(),
            ),
        }
    };
    let listener_name = |port: i32| format!("{name}:{port}");
    let lb = |action: ChangeAction, call: &str| PlannedChange::new(action, KIND_NLB, name, call);
    let scheme = |internal: bool| {
        if internal {
            "internal"
        } else {
            "internet-facing"
        }
    };
    let subnets_of = |mappings: &[nlb::plan::SubnetMapping]| {
        mappings
            .iter()
            .map(|m| m.subnet_id.as_str())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut changes = Vec::new();
    for action in actions {
        match action {
            NlbAction::Create | NlbAction::Recreate => {
                if matches!(action, NlbAction::Recreate)
                    && let Some(seen) = observed
                {
                    changes.push(
                        lb(ChangeAction::Delete, ops::V2_DELETE_LOAD_BALANCER.name).field(
                            "Scheme",
                            Some(scheme(seen.internal).to_string()),
                            Some(scheme(desired.internal).to_string()),
                        ),
                    );
                }
                changes.push(
                    lb(ChangeAction::Create, ops::V2_CREATE_LOAD_BALANCER.name)
                        .field("Scheme", None, Some(scheme(desired.internal).to_string()))
                        .field("Subnets", None, Some(subnets_of(&desired.subnet_mappings))),
                );
            }
            NlbAction::SetSubnets(subnets) => {
                changes.push(lb(ChangeAction::Modify, ops::V2_SET_SUBNETS.name).field(
                    "Subnets",
                    base.map(|o| subnets_of(&o.subnet_mappings)),
                    Some(joined(subnets)),
                ));
            }
            NlbAction::CreateTargetGroup { listener } => {
                let Some(wanted) = desired.listeners.get(*listener) else {
                    continue;
                };
                let tg = &wanted.target_group;
                changes.push(
                    PlannedChange::new(
                        ChangeAction::Create,
                        KIND_TARGET_GROUP,
                        tg.name.as_str(),
                        ops::V2_CREATE_TARGET_GROUP.name,
                    )
                    .field("Protocol", None, Some(tg.protocol.clone()))
                    .field("Port", None, Some(tg.port.to_string()))
                    .field(
                        "HealthCheckProtocol",
                        None,
                        Some(tg.health.protocol.clone()),
                    )
                    .field(
                        "HealthCheckPort",
                        None,
                        Some(tg.health.port.clone()),
                    ),
                );
            }
            NlbAction::ModifyTargetGroup { arn, health } => {
                let old = observed_tg(arn).map(|tg| &tg.health);
                let mut change = PlannedChange::new(
                    ChangeAction::Modify,
                    KIND_TARGET_GROUP,
                    tg_name(&TgRef::Existing(arn.clone())),
                    ops::V2_MODIFY_TARGET_GROUP.name,
                );
                type Getter = fn(&nlb::plan::TgHealth) -> Option<String>;
                let fields: [(&str, Getter); 6] = [
                    ("HealthCheckPort", |h| Some(h.port.clone())),
                    ("HealthCheckPath", |h| h.path.clone()),
                    ("HealthCheckIntervalSeconds", |h| {
                        Some(h.interval.to_string())
                    }),
                    ("HealthCheckTimeoutSeconds", |h| Some(h.timeout.to_string())),
                    ("HealthyThresholdCount", |h| Some(h.healthy.to_string())),
                    ("UnhealthyThresholdCount", |h| Some(h.unhealthy.to_string())),
                ];
                for (field, value) in fields {
                    change = diff_field(change, field, old.and_then(value), value(health));
                }
                changes.push(change);
            }
            NlbAction::ModifyTargetGroupAttributes {
                target_group,
                attributes,
            } => {
                let old = match target_group {
                    TgRef::Existing(arn) => observed_tg(arn).and_then(|tg| tg.attributes.as_ref()),
                    TgRef::New(_) => None,
                };
                let mut change = PlannedChange::new(
                    ChangeAction::Modify,
                    KIND_TARGET_GROUP,
                    tg_name(target_group),
                    ops::V2_MODIFY_TG_ATTRIBUTES.name,
                );
                for (key, value) in attributes {
                    change = diff_field(
                        change,
                        key,
                        old.and_then(|a| a.get(key)).cloned(),
                        Some(value.clone()),
                    );
                }
                changes.push(change);
            }
            NlbAction::DeregisterTargets { arn, targets } => {
                changes.push(
                    PlannedChange::new(
                        ChangeAction::Modify,
                        KIND_TARGET_GROUP,
                        tg_name(&TgRef::Existing(arn.clone())),
                        ops::V2_DEREGISTER_TARGETS.name,
                    )
                    .field("Targets", Some(targets_text(targets)), None),
                );
            }
            NlbAction::RegisterTargets {
                target_group,
                targets,
            } => {
                changes.push(
                    PlannedChange::new(
                        ChangeAction::Modify,
                        KIND_TARGET_GROUP,
                        tg_name(target_group),
                        ops::V2_REGISTER_TARGETS.name,
                    )
                    .field("Targets", None, Some(targets_text(targets))),
                );
            }
            NlbAction::CreateListener {
                listener,
                target_group,
            } => {
                let Some(wanted) = desired.listeners.get(*listener) else {
                    continue;
                };
                let mut change = PlannedChange::new(
                    ChangeAction::Create,
                    KIND_LISTENER,
                    listener_name(wanted.port),
                    ops::V2_CREATE_LISTENER.name,
                )
                .field("Protocol", None, Some(wanted.protocol.clone()))
                .field("TargetGroup", None, Some(tg_name(target_group)));
                if let Some(certificate) = &wanted.certificate {
                    change = change.field("Certificate", None, Some(certificate.clone()));
                }
                if let Some(policy) = &wanted.ssl_policy {
                    change = change.field("SslPolicy", None, Some(policy.clone()));
                }
                changes.push(change);
            }
            NlbAction::ModifyListener {
                arn,
                listener,
                target_group,
            } => {
                let Some(wanted) = desired.listeners.get(*listener) else {
                    continue;
                };
                let seen = base.and_then(|o| o.listeners.iter().find(|l| &l.arn == arn));
                let mut change = PlannedChange::new(
                    ChangeAction::Modify,
                    KIND_LISTENER,
                    listener_name(wanted.port),
                    ops::V2_MODIFY_LISTENER.name,
                );
                change = diff_field(
                    change,
                    "Protocol",
                    seen.map(|l| l.protocol.clone()),
                    Some(wanted.protocol.clone()),
                );
                change = diff_field(
                    change,
                    "TargetGroup",
                    seen.and_then(|l| l.target_group_arn.as_deref())
                        .map(|arn| tg_name(&TgRef::Existing(arn.to_string()))),
                    Some(tg_name(target_group)),
                );
                change = diff_field(
                    change,
                    "Certificate",
                    seen.and_then(|l| l.certificate.clone()),
                    wanted.certificate.clone(),
                );
                if wanted.ssl_policy.is_some() {
                    change = diff_field(
                        change,
                        "SslPolicy",
                        seen.and_then(|l| l.ssl_policy.clone()),
                        wanted.ssl_policy.clone(),
                    );
                }
                changes.push(change);
            }
            NlbAction::DeleteListener { arn } => {
                let port = base
                    .and_then(|o| o.listeners.iter().find(|l| &l.arn == arn))
                    .map_or_else(|| arn.clone(), |l| listener_name(l.port));
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    KIND_LISTENER,
                    port,
                    ops::V2_DELETE_LISTENER.name,
                ));
            }
            NlbAction::DeleteTargetGroup { arn } => {
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    KIND_TARGET_GROUP,
                    tg_name(&TgRef::Existing(arn.clone())),
                    ops::V2_DELETE_TARGET_GROUP.name,
                ));
            }
            NlbAction::ModifyLoadBalancerAttributes(attributes) => {
                let old = base.and_then(|o| o.attributes.as_ref());
                let mut change = lb(ChangeAction::Modify, ops::V2_MODIFY_LB_ATTRIBUTES.name);
                for (key, value) in attributes {
                    // AWS omits some boolean attributes until set once: absent is false.
                    let seen = old
                        .and_then(|a| a.get(key).cloned())
                        .or_else(|| Some("false".to_string()));
                    change = diff_field(change, key, seen, Some(value.clone()));
                }
                changes.push(change);
            }
            NlbAction::AddTags { target_group, tags } => {
                let (mut change, old) = match target_group {
                    None => (
                        lb(ChangeAction::Modify, ops::V2_ADD_TAGS.name),
                        base.and_then(|o| o.tags.as_ref()),
                    ),
                    Some(tg) => (
                        PlannedChange::new(
                            ChangeAction::Modify,
                            KIND_TARGET_GROUP,
                            tg_name(tg),
                            ops::V2_ADD_TAGS.name,
                        ),
                        match tg {
                            TgRef::Existing(arn) => observed_tg(arn).and_then(|t| t.tags.as_ref()),
                            TgRef::New(_) => None,
                        },
                    ),
                };
                for (key, value) in tags {
                    change = change.field(
                        format!("Tags[{key}]"),
                        old.and_then(|t| t.get(key)).cloned(),
                        Some(value.clone()),
                    );
                }
                changes.push(change);
            }
            NlbAction::RemoveTags { target_group, keys } => {
                let (mut change, old) = match target_group {
                    None => (
                        lb(ChangeAction::Modify, ops::V2_REMOVE_TAGS.name),
                        base.and_then(|o| o.tags.as_ref()),
                    ),
                    Some(arn) => (
                        PlannedChange::new(
                            ChangeAction::Modify,
                            KIND_TARGET_GROUP,
                            tg_name(&TgRef::Existing(arn.clone())),
                            ops::V2_REMOVE_TAGS.name,
                        ),
                        observed_tg(arn).and_then(|t| t.tags.as_ref()),
                    ),
                };
                for key in keys {
                    change = change.field(
                        format!("Tags[{key}]"),
                        old.and_then(|t| t.get(key)).cloned(),
                        None,
                    );
                }
                changes.push(change);
            }
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nlb::plan::{
        ListenerDesired, ObservedListener, ObservedTg, SubnetMapping, TgDesired, TgHealth,
    };
    use crate::sg::IngressRule;

    /// `action kind name call field:old→new …`, one line per change.
    fn text(changes: &[PlannedChange]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                let mut line = format!("{} {} {} {}", c.action, c.kind, c.name, c.call);
                for f in &c.fields {
                    line.push_str(&format!(
                        " {}:{}→{}",
                        f.field,
                        f.old.as_deref().unwrap_or("-"),
                        f.new.as_deref().unwrap_or("-")
                    ));
                }
                line
            })
            .collect()
    }

    fn clb_desired() -> ClbDesired {
        ClbDesired {
            name: "a1".into(),
            internal: false,
            listeners: vec![ClbListener {
                lb_port: 80,
                protocol: "TCP".into(),
                instance_port: 30080,
                instance_protocol: "TCP".into(),
                certificate: None,
            }],
            health_check: HealthCheck {
                target: "TCP:30080".into(),
                interval: 10,
                timeout: 5,
                healthy: 2,
                unhealthy: 6,
            },
            attributes: Attributes::aws_defaults(),
            proxy_protocol: false,
            ssl_negotiation_policy: None,
            tags: BTreeMap::from([("kubernetes.io/cluster/c".into(), "owned".into())]),
            subnets: ["subnet-a".to_string()].into(),
            security_groups: vec!["sg-lb".into()],
            instances: ["i-1".to_string()].into(),
        }
    }

    fn clb_converged(d: &ClbDesired) -> ClbObserved {
        let mut seen = ClbObserved::after_create(d);
        seen.health_check = Some(d.health_check.clone());
        seen.instances = d.instances.clone();
        seen
    }

    #[test]
    fn classic_elb_changes_name_each_field_old_and_new() {
        let base = clb_desired();
        let seen = clb_converged(&base);
        let mut changed = base.clone();
        changed.health_check.interval = 30;
        changed.attributes.idle_timeout = 120;
        changed.instances = ["i-2".to_string()].into();
        changed.listeners[0].protocol = "SSL".into();
        changed.listeners[0].certificate = Some("arn:cert".into());
        let mut fresh_with_cross_zone = base.clone();
        fresh_with_cross_zone.attributes.cross_zone = true;
        let cases: Vec<(&str, Option<&ClbObserved>, ClbDesired, Vec<&str>)> = vec![
            ("in sync", Some(&seen), base.clone(), vec![]),
            (
                "changed",
                Some(&seen),
                changed,
                vec![
                    "modify ClassicLoadBalancer a1 DeleteLoadBalancerListeners Listener[80]:TCP:80 -> TCP:30080→-",
                    "modify ClassicLoadBalancer a1 CreateLoadBalancerListeners Listener[80]:-→SSL:80 -> TCP:30080 (arn:cert)",
                    "modify ClassicLoadBalancer a1 ConfigureHealthCheck HealthCheck.Interval:10→30",
                    "modify ClassicLoadBalancer a1 ModifyLoadBalancerAttributes ConnectionSettings.IdleTimeout:60→120",
                    "modify ClassicLoadBalancer a1 DeregisterInstancesFromLoadBalancer Instances:i-1→-",
                    "modify ClassicLoadBalancer a1 RegisterInstancesWithLoadBalancer Instances:-→i-2",
                ],
            ),
            (
                // Values a create sets are compared with AWS's defaults.
                "created",
                None,
                fresh_with_cross_zone,
                vec![
                    "create ClassicLoadBalancer a1 CreateLoadBalancer Scheme:-→internet-facing Subnets:-→subnet-a SecurityGroups:-→sg-lb Listener[80]:-→TCP:80 -> TCP:30080",
                    "modify ClassicLoadBalancer a1 ConfigureHealthCheck HealthCheck.Target:-→TCP:30080 HealthCheck.Interval:-→10 HealthCheck.Timeout:-→5 HealthCheck.HealthyThreshold:-→2 HealthCheck.UnhealthyThreshold:-→6",
                    "modify ClassicLoadBalancer a1 ModifyLoadBalancerAttributes CrossZoneLoadBalancing.Enabled:false→true",
                    "modify ClassicLoadBalancer a1 RegisterInstancesWithLoadBalancer Instances:-→i-1",
                ],
            ),
        ];
        for (case, observed, desired, want) in cases {
            let actions = clb::plan::plan(observed, &desired);
            assert_eq!(
                text(&render_clb(observed, &desired, &actions)),
                want,
                "{case}"
            );
        }
        let mut internal = base.clone();
        internal.internal = true;
        let actions = clb::plan::plan(Some(&seen), &internal);
        let lines = text(&render_clb(Some(&seen), &internal, &actions));
        assert_eq!(
            lines[..2],
            [
                "delete ClassicLoadBalancer a1 DeleteLoadBalancer Scheme:internet-facing→internal",
                "create ClassicLoadBalancer a1 CreateLoadBalancer Scheme:-→internal Subnets:-→subnet-a SecurityGroups:-→sg-lb Listener[80]:-→TCP:80 -> TCP:30080",
            ],
            "a scheme change recreates: {lines:#?}"
        );
    }

    fn nlb_desired() -> NlbDesired {
        let health = TgHealth {
            protocol: "TCP".into(),
            port: "traffic-port".into(),
            path: None,
            interval: 30,
            timeout: 10,
            healthy: 3,
            unhealthy: 3,
        };
        NlbDesired {
            name: "a1".into(),
            internal: false,
            subnet_mappings: vec![SubnetMapping {
                subnet_id: "subnet-a".into(),
                allocation_id: None,
                private_ipv4: None,
            }],
            security_groups: vec![],
            attributes: BTreeMap::from([(
                "load_balancing.cross_zone.enabled".into(),
                "false".into(),
            )]),
            tags: BTreeMap::new(),
            listeners: vec![ListenerDesired {
                port: 443,
                protocol: "TCP".into(),
                certificate: None,
                ssl_policy: None,
                target_group: TgDesired {
                    name: "k8s-ns-api-1".into(),
                    protocol: "TCP".into(),
                    port: 30443,
                    health,
                    attributes: BTreeMap::new(),
                    tags: BTreeMap::new(),
                },
            }],
            instances: ["i-1".to_string()].into(),
        }
    }

    fn nlb_converged(d: &NlbDesired) -> NlbObserved {
        let l = &d.listeners[0];
        NlbObserved {
            arn: "arn:lb".into(),
            dns_name: None,
            internal: false,
            subnet_mappings: d.subnet_mappings.clone(),
            addresses_reported: false,
            listeners: vec![ObservedListener {
                arn: "arn:listener".into(),
                port: l.port,
                protocol: l.protocol.clone(),
                certificate: None,
                ssl_policy: None,
                target_group_arn: Some(
                    "arn:aws:elasticloadbalancing:r:1:targetgroup/k8s-ns-api-1/abc".into(),
                ),
            }],
            target_groups: vec![ObservedTg {
                arn: "arn:aws:elasticloadbalancing:r:1:targetgroup/k8s-ns-api-1/abc".into(),
                name: l.target_group.name.clone(),
                protocol: l.target_group.protocol.clone(),
                port: l.target_group.port,
                health: l.target_group.health.clone(),
                targets: Some([("i-1".to_string(), 30443)].into()),
                attributes: Some(BTreeMap::new()),
                tags: Some(BTreeMap::new()),
            }],
            attributes: Some(BTreeMap::new()),
            tags: Some(BTreeMap::new()),
        }
    }

    #[test]
    fn nlb_changes_name_each_field_old_and_new() {
        let base = nlb_desired();
        let seen = nlb_converged(&base);
        let mut tls = base.clone();
        tls.listeners[0].protocol = "TLS".into();
        tls.listeners[0].certificate = Some("arn:cert".into());
        tls.listeners[0].target_group.health.healthy = 5;
        tls.instances = ["i-1".to_string(), "i-2".to_string()].into();
        tls.attributes
            .insert("load_balancing.cross_zone.enabled".into(), "true".into());
        let mut new_port = base.clone();
        new_port.listeners[0].target_group.port = 30444;
        new_port.listeners[0].target_group.name = "k8s-ns-api-2".into();
        let cases: Vec<(&str, NlbDesired, Vec<&str>)> = vec![
            ("in sync", base.clone(), vec![]),
            (
                "tls, threshold, node, cross-zone",
                tls,
                vec![
                    "modify Listener a1:443 ModifyListener Protocol:TCP→TLS Certificate:-→arn:cert",
                    "modify TargetGroup k8s-ns-api-1 ModifyTargetGroup HealthyThresholdCount:3→5",
                    "modify TargetGroup k8s-ns-api-1 RegisterTargets Targets:-→i-2:30443",
                    "modify NetworkLoadBalancer a1 ModifyLoadBalancerAttributes load_balancing.cross_zone.enabled:false→true",
                ],
            ),
            (
                "a new node port moves the listener to a new target group",
                new_port,
                vec![
                    "create TargetGroup k8s-ns-api-2 CreateTargetGroup Protocol:-→TCP Port:-→30444 HealthCheckProtocol:-→TCP HealthCheckPort:-→traffic-port",
                    "modify TargetGroup k8s-ns-api-2 RegisterTargets Targets:-→i-1:30444",
                    "modify Listener a1:443 ModifyListener TargetGroup:k8s-ns-api-1→k8s-ns-api-2",
                    "delete TargetGroup k8s-ns-api-1 DeleteTargetGroup",
                ],
            ),
        ];
        for (case, desired, want) in cases {
            let actions = nlb::plan::plan(Some(&seen), &desired);
            assert_eq!(
                text(&render_nlb(Some(&seen), &desired, &actions)),
                want,
                "{case}"
            );
        }
        let actions = nlb::plan::plan(None, &base);
        assert_eq!(
            text(&render_nlb(None, &base, &actions)),
            vec![
                "create NetworkLoadBalancer a1 CreateLoadBalancer Scheme:-→internet-facing Subnets:-→subnet-a",
                "create TargetGroup k8s-ns-api-1 CreateTargetGroup Protocol:-→TCP Port:-→30443 HealthCheckProtocol:-→TCP HealthCheckPort:-→traffic-port",
                "modify TargetGroup k8s-ns-api-1 RegisterTargets Targets:-→i-1:30443",
                "create Listener a1:443 CreateListener Protocol:-→TCP TargetGroup:-→k8s-ns-api-1",
            ]
        );
    }

    #[test]
    fn rules_are_revoked_before_authorized_with_their_descriptions() {
        let plan = BTreeMap::from([(
            "sg-1".to_string(),
            RuleChanges {
                authorize: vec![IngressRule::port("tcp", 80, "10.0.0.0/8", Some("d"))],
                revoke: vec![IngressRule::from_group("sg-lb")],
            },
        )]);
        assert_eq!(
            text(&render_rules(&plan)),
            vec![
                "delete SecurityGroupRule sg-1 all from sg-lb RevokeSecurityGroupIngress",
                "create SecurityGroupRule sg-1 tcp/80 from 10.0.0.0/8 AuthorizeSecurityGroupIngress Description:-→d",
            ]
        );
    }

    #[test]
    fn target_group_names_come_from_their_arns() {
        for (arn, name) in [
            (
                "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/k8s-ns-api-1/50dc6c495c0c9188",
                "k8s-ns-api-1",
            ),
            ("not-an-arn", "not-an-arn"),
        ] {
            assert_eq!(target_group_name_of(arn), name);
        }
    }
}

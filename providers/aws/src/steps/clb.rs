//! A Classic ELB's actions as steps, each with the fields it changes.

use kube_lb_provider_core::{ChangeAction, PlannedChange};

use super::{AwsStep, Call, KIND_POLICY, Steps, diff_field, joined, opt};
use crate::audit::KIND_CLB;
use crate::calls::ops;
use crate::clb::plan::{
    Attributes, ClbAction, ClbDesired, ClbObserved, HealthCheck, Listener as ClbListener,
};

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
/// The steps of a Classic ELB's actions, each with the fields it changes (compared with what
/// was observed, or with what a create leaves when the load balancer is (re)created).
pub(crate) fn clb_steps(
    observed: Option<&ClbObserved>,
    desired: &ClbDesired,
    actions: &[ClbAction],
) -> Vec<AwsStep> {
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
    let mut changes = Steps::new();
    for action in actions {
        changes.set(Call::Clb(action.clone()));
        match action {
            ClbAction::Create | ClbAction::Recreate => {
                if matches!(action, ClbAction::Recreate)
                    && let Some(seen) = observed
                {
                    changes.set(Call::DeleteClb {
                        name: name.to_string(),
                    });
                    changes.push(
                        lb(ChangeAction::Delete, ops::ELB_DELETE_LOAD_BALANCER.name).field(
                            "Scheme",
                            Some(scheme(seen.internal).to_string()),
                            Some(scheme(desired.internal).to_string()),
                        ),
                    );
                }
                changes.set(Call::Clb(ClbAction::Create));
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
    changes.steps
}
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_text::{describe, text};
    use super::*;
    use crate::clb;

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
                text(&describe(&clb_steps(observed, &desired, &actions))),
                want,
                "{case}"
            );
        }
        let mut internal = base.clone();
        internal.internal = true;
        let actions = clb::plan::plan(Some(&seen), &internal);
        let lines = text(&describe(&clb_steps(Some(&seen), &internal, &actions)));
        assert_eq!(
            lines[..2],
            [
                "delete ClassicLoadBalancer a1 DeleteLoadBalancer Scheme:internet-facing→internal",
                "create ClassicLoadBalancer a1 CreateLoadBalancer Scheme:-→internal Subnets:-→subnet-a SecurityGroups:-→sg-lb Listener[80]:-→TCP:80 -> TCP:30080",
            ],
            "a scheme change recreates: {lines:#?}"
        );
    }
}

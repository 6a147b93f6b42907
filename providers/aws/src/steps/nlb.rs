//! An NLB's actions as steps, each with the fields it changes.

use std::collections::BTreeSet;

use kube_lb_provider_core::{ChangeAction, PlannedChange};

use super::{
    AwsStep, Call, KIND_LISTENER, Steps, TARGET_BATCH, diff_field, joined, target_group_name_of,
};
use crate::audit::{KIND_NLB, KIND_TARGET_GROUP};
use crate::calls::ops;
use crate::nlb;
use crate::nlb::plan::{NlbAction, NlbDesired, NlbObserved, TgRef};

fn targets_text(targets: &[(String, i32)]) -> String {
    targets
        .iter()
        .map(|(id, port)| format!("{id}:{port}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Renders the NLB planner's actions against what was observed.
/// The steps of an NLB's actions, each with the fields it changes.
pub(crate) fn nlb_steps(
    observed: Option<&NlbObserved>,
    desired: &NlbDesired,
    actions: &[NlbAction],
) -> Vec<AwsStep> {
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
    let mut changes = Steps::new();
    for action in actions {
        changes.set(Call::Nlb(action.clone()));
        match action {
            NlbAction::Create | NlbAction::Recreate => {
                if matches!(action, NlbAction::Recreate)
                    && let Some(seen) = observed
                {
                    changes.set(Call::DeleteNlb {
                        arn: seen.arn.clone(),
                    });
                    changes.push(
                        lb(ChangeAction::Delete, ops::V2_DELETE_LOAD_BALANCER.name).field(
                            "Scheme",
                            Some(scheme(seen.internal).to_string()),
                            Some(scheme(desired.internal).to_string()),
                        ),
                    );
                }
                changes.set(Call::Nlb(NlbAction::Create));
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
                for batch in targets.chunks(TARGET_BATCH) {
                    changes.set(Call::Nlb(NlbAction::DeregisterTargets {
                        arn: arn.clone(),
                        targets: batch.to_vec(),
                    }));
                    changes.push(
                        PlannedChange::new(
                            ChangeAction::Modify,
                            KIND_TARGET_GROUP,
                            tg_name(&TgRef::Existing(arn.clone())),
                            ops::V2_DEREGISTER_TARGETS.name,
                        )
                        .field("Targets", Some(targets_text(batch)), None),
                    );
                }
            }
            NlbAction::RegisterTargets {
                target_group,
                targets,
            } => {
                for batch in targets.chunks(TARGET_BATCH) {
                    changes.set(Call::Nlb(NlbAction::RegisterTargets {
                        target_group: target_group.clone(),
                        targets: batch.to_vec(),
                    }));
                    changes.push(
                        PlannedChange::new(
                            ChangeAction::Modify,
                            KIND_TARGET_GROUP,
                            tg_name(target_group),
                            ops::V2_REGISTER_TARGETS.name,
                        )
                        .field("Targets", None, Some(targets_text(batch))),
                    );
                }
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
    changes.steps
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::test_text::{describe, text};
    use super::*;
    use crate::nlb::plan::{
        ListenerDesired, ObservedListener, ObservedTg, SubnetMapping, TgDesired, TgHealth,
    };

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
                text(&describe(&nlb_steps(Some(&seen), &desired, &actions))),
                want,
                "{case}"
            );
        }
        let actions = nlb::plan::plan(None, &base);
        assert_eq!(
            text(&describe(&nlb_steps(None, &base, &actions))),
            vec![
                "create NetworkLoadBalancer a1 CreateLoadBalancer Scheme:-→internet-facing Subnets:-→subnet-a",
                "create TargetGroup k8s-ns-api-1 CreateTargetGroup Protocol:-→TCP Port:-→30443 HealthCheckProtocol:-→TCP HealthCheckPort:-→traffic-port",
                "modify TargetGroup k8s-ns-api-1 RegisterTargets Targets:-→i-1:30443",
                "create Listener a1:443 CreateListener Protocol:-→TCP TargetGroup:-→k8s-ns-api-1",
            ]
        );
    }
}

//! Network Load Balancer: desired and observed state, and the pure diff between them.
//!
//! Listeners are matched by port only (not by (port, protocol) like upstream), so TCP→TLS is a
//! `ModifyListener` instead of upstream's failing second `CreateListener` (DuplicateListener).
//! Target groups are matched through the listener's forward action, and replaced only when an
//! immutable property (protocol, port, health-check protocol) changes; everything else is
//! modified in place, including the timeout upstream never sends.

use std::collections::{BTreeMap, BTreeSet};

use crate::tags::{TagChanges, diff_tags};

/// Target-group health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgHealth {
    /// `TCP`, `HTTP` or `HTTPS`.
    pub protocol: String,
    /// `traffic-port` or a number.
    pub port: String,
    /// Path for HTTP/HTTPS.
    pub path: Option<String>,
    /// Seconds between probes.
    pub interval: i32,
    /// Seconds to wait.
    pub timeout: i32,
    /// Successes before healthy.
    pub healthy: i32,
    /// Failures before unhealthy.
    pub unhealthy: i32,
}

impl TgHealth {
    fn is_http(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("HTTP") || self.protocol.eq_ignore_ascii_case("HTTPS")
    }

    /// True when `observed` needs no `ModifyTargetGroup` for this desired check.
    fn satisfied_by(&self, observed: &TgHealth) -> bool {
        self.port == observed.port
            && (!self.is_http() || self.path == observed.path)
            && self.interval == observed.interval
            && self.timeout == observed.timeout
            && self.healthy == observed.healthy
            && self.unhealthy == observed.unhealthy
    }
}

/// A desired target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgDesired {
    /// Deterministic name.
    pub name: String,
    /// `TCP`, `UDP` or `TLS`.
    pub protocol: String,
    /// Node port.
    pub port: i32,
    /// Health check.
    pub health: TgHealth,
    /// Managed attributes (`proxy_protocol_v2.enabled`, `preserve_client_ip.enabled`).
    pub attributes: BTreeMap<String, String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// A desired listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerDesired {
    /// Port.
    pub port: i32,
    /// `TCP`, `UDP` or `TLS`.
    pub protocol: String,
    /// Certificate (TLS).
    pub certificate: Option<String>,
    /// SSL policy (TLS); `None` lets AWS choose its default.
    pub ssl_policy: Option<String>,
    /// Its target group.
    pub target_group: TgDesired,
}

/// A subnet with an optional Elastic IP or private address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SubnetMapping {
    /// Subnet ID.
    pub subnet_id: String,
    /// `eipalloc-…`.
    pub allocation_id: Option<String>,
    /// Private IPv4 address.
    pub private_ipv4: Option<String>,
}

/// What the Service asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlbDesired {
    /// `a` + UID.
    pub name: String,
    /// Internal scheme.
    pub internal: bool,
    /// Subnets (with EIPs / private addresses when annotated).
    pub subnet_mappings: Vec<SubnetMapping>,
    /// Security groups to attach at creation (BYO, `NLBSecurityGroupMode=Managed`).
    pub security_groups: Vec<String>,
    /// Managed load-balancer attributes.
    pub attributes: BTreeMap<String, String>,
    /// Tags of the load balancer, its listeners and target groups.
    pub tags: BTreeMap<String, String>,
    /// Listeners, sorted by port.
    pub listeners: Vec<ListenerDesired>,
    /// Registered instances.
    pub instances: BTreeSet<String>,
}

/// An observed target group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedTg {
    /// ARN.
    pub arn: String,
    /// Name.
    pub name: String,
    /// Protocol.
    pub protocol: String,
    /// Port.
    pub port: i32,
    /// Health check.
    pub health: TgHealth,
    /// Registered (instance, port) targets, draining ones excluded; `None` when not read.
    pub targets: Option<BTreeSet<(String, i32)>>,
    /// Attributes, when read.
    pub attributes: Option<BTreeMap<String, String>>,
    /// Tags, when read.
    pub tags: Option<BTreeMap<String, String>>,
}

/// An observed listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedListener {
    /// ARN.
    pub arn: String,
    /// Port.
    pub port: i32,
    /// Protocol.
    pub protocol: String,
    /// Default certificate.
    pub certificate: Option<String>,
    /// SSL policy.
    pub ssl_policy: Option<String>,
    /// Target group of the forward action.
    pub target_group_arn: Option<String>,
}

/// What AWS has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlbObserved {
    /// ARN.
    pub arn: String,
    /// DNS name.
    pub dns_name: Option<String>,
    /// Internal scheme.
    pub internal: bool,
    /// Subnet mappings.
    pub subnet_mappings: Vec<SubnetMapping>,
    /// True when AWS reported the load balancer's addresses (EIP allocation, private IP). When
    /// it does not (moto never does), address pinning cannot be compared and is left alone.
    pub addresses_reported: bool,
    /// Listeners.
    pub listeners: Vec<ObservedListener>,
    /// Target groups attached to the load balancer.
    pub target_groups: Vec<ObservedTg>,
    /// Attributes, when read.
    pub attributes: Option<BTreeMap<String, String>>,
    /// Tags, when read.
    pub tags: Option<BTreeMap<String, String>>,
}

/// A target group that exists or that an earlier action creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TgRef {
    /// By ARN.
    Existing(String),
    /// Created by `CreateTargetGroup { listener }` for that desired listener index.
    New(usize),
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NlbAction {
    /// Create the load balancer.
    Create,
    /// Delete and create again: the scheme or the EIP/private-address mappings changed, which
    /// AWS cannot modify in place (upstream silently ignores such changes).
    Recreate,
    /// Point the load balancer at these subnets.
    SetSubnets(Vec<String>),
    /// Create the target group of desired listener `listener`.
    CreateTargetGroup {
        /// Desired listener index.
        listener: usize,
    },
    /// Change health-check settings.
    ModifyTargetGroup {
        /// Target group.
        arn: String,
        /// New health check.
        health: TgHealth,
    },
    /// Set target-group attributes.
    ModifyTargetGroupAttributes {
        /// Target group.
        target_group: TgRef,
        /// Attributes.
        attributes: BTreeMap<String, String>,
    },
    /// Deregister targets.
    DeregisterTargets {
        /// Target group.
        arn: String,
        /// (instance, port).
        targets: Vec<(String, i32)>,
    },
    /// Register targets.
    RegisterTargets {
        /// Target group.
        target_group: TgRef,
        /// (instance, port).
        targets: Vec<(String, i32)>,
    },
    /// Create the listener of desired listener `listener`.
    CreateListener {
        /// Desired listener index.
        listener: usize,
        /// Its target group.
        target_group: TgRef,
    },
    /// Change a listener in place.
    ModifyListener {
        /// Listener.
        arn: String,
        /// Desired listener index.
        listener: usize,
        /// Its target group.
        target_group: TgRef,
    },
    /// Delete a listener.
    DeleteListener {
        /// Listener.
        arn: String,
    },
    /// Delete a target group no listener uses.
    DeleteTargetGroup {
        /// Target group.
        arn: String,
    },
    /// Set load-balancer attributes.
    ModifyLoadBalancerAttributes(BTreeMap<String, String>),
    /// Add or overwrite tags on a resource.
    AddTags {
        /// The resource (`None` = the load balancer).
        target_group: Option<TgRef>,
        /// Tags.
        tags: BTreeMap<String, String>,
    },
    /// Remove tags from a resource.
    RemoveTags {
        /// The resource (`None` = the load balancer).
        target_group: Option<String>,
        /// Keys.
        keys: Vec<String>,
    },
}

fn attributes_satisfied(
    desired: &BTreeMap<String, String>,
    observed: &BTreeMap<String, String>,
) -> bool {
    desired.iter().all(|(key, value)| {
        let seen = observed.get(key).map(String::as_str);
        // AWS omits some boolean attributes until they are set once; absent means false.
        seen == Some(value.as_str()) || (seen.is_none() && value == "false")
    })
}

fn tg_reusable(desired: &TgDesired, observed: &ObservedTg) -> bool {
    desired.protocol.eq_ignore_ascii_case(&observed.protocol)
        && desired.port == observed.port
        && desired
            .health
            .protocol
            .eq_ignore_ascii_case(&observed.health.protocol)
}

fn mappings_need_recreate(desired: &[SubnetMapping], observed: &[SubnetMapping]) -> bool {
    let pinned = |m: &[SubnetMapping]| -> BTreeSet<(String, Option<String>, Option<String>)> {
        m.iter()
            .filter(|s| s.allocation_id.is_some() || s.private_ipv4.is_some())
            .map(|s| {
                (
                    s.subnet_id.clone(),
                    s.allocation_id.clone(),
                    s.private_ipv4.clone(),
                )
            })
            .collect()
    };
    pinned(desired) != pinned(observed)
}

/// Plans the calls that turn `observed` (or nothing) into `desired`.
pub fn plan(observed: Option<&NlbObserved>, desired: &NlbDesired) -> Vec<NlbAction> {
    let mut actions = Vec::new();
    let observed = match observed {
        None => None,
        Some(seen)
            if seen.internal != desired.internal
                || (seen.addresses_reported
                    && mappings_need_recreate(&desired.subnet_mappings, &seen.subnet_mappings)) =>
        {
            actions.push(NlbAction::Recreate);
            None
        }
        Some(seen) => Some(seen),
    };
    let Some(observed) = observed else {
        if actions.is_empty() {
            actions.push(NlbAction::Create);
        }
        plan_fresh(desired, &mut actions);
        return actions;
    };

    let desired_subnets: BTreeSet<&String> = desired
        .subnet_mappings
        .iter()
        .map(|m| &m.subnet_id)
        .collect();
    let observed_subnets: BTreeSet<&String> = observed
        .subnet_mappings
        .iter()
        .map(|m| &m.subnet_id)
        .collect();
    if desired_subnets != observed_subnets {
        actions.push(NlbAction::SetSubnets(
            desired_subnets.into_iter().cloned().collect(),
        ));
    }

    let mut used_tgs: BTreeSet<String> = BTreeSet::new();
    let mut post: Vec<NlbAction> = Vec::new();
    for (index, listener) in desired.listeners.iter().enumerate() {
        let existing = observed.listeners.iter().find(|l| l.port == listener.port);
        let current_tg = existing
            .and_then(|l| l.target_group_arn.as_ref())
            .and_then(|arn| observed.target_groups.iter().find(|tg| &tg.arn == arn));
        let tg_ref = match current_tg {
            Some(tg) if tg_reusable(&listener.target_group, tg) => {
                used_tgs.insert(tg.arn.clone());
                plan_existing_tg(listener, tg, &desired.instances, &mut post);
                TgRef::Existing(tg.arn.clone())
            }
            _ => {
                plan_new_tg(index, listener, &desired.instances, &mut actions);
                TgRef::New(index)
            }
        };
        match existing {
            None => actions.push(NlbAction::CreateListener {
                listener: index,
                target_group: tg_ref,
            }),
            Some(seen) => {
                let same_tg = matches!(&tg_ref, TgRef::Existing(arn) if seen.target_group_arn.as_ref() == Some(arn));
                let tls = listener.protocol.eq_ignore_ascii_case("TLS");
                let same = seen.protocol.eq_ignore_ascii_case(&listener.protocol)
                    && same_tg
                    && (!tls
                        || (seen.certificate == listener.certificate
                            && (listener.ssl_policy.is_none()
                                || seen.ssl_policy == listener.ssl_policy)));
                if !same {
                    actions.push(NlbAction::ModifyListener {
                        arn: seen.arn.clone(),
                        listener: index,
                        target_group: tg_ref,
                    });
                }
            }
        }
    }
    for seen in &observed.listeners {
        if !desired.listeners.iter().any(|l| l.port == seen.port) {
            actions.push(NlbAction::DeleteListener {
                arn: seen.arn.clone(),
            });
        }
    }
    for tg in &observed.target_groups {
        if !used_tgs.contains(&tg.arn) {
            actions.push(NlbAction::DeleteTargetGroup {
                arn: tg.arn.clone(),
            });
        }
    }
    actions.extend(post);

    if let Some(attributes) = &observed.attributes
        && !attributes_satisfied(&desired.attributes, attributes)
    {
        actions.push(NlbAction::ModifyLoadBalancerAttributes(
            desired.attributes.clone(),
        ));
    }
    if let Some(tags) = &observed.tags {
        let TagChanges { add, remove } = diff_tags(tags, &desired.tags);
        if !add.is_empty() {
            actions.push(NlbAction::AddTags {
                target_group: None,
                tags: add,
            });
        }
        if !remove.is_empty() {
            actions.push(NlbAction::RemoveTags {
                target_group: None,
                keys: remove,
            });
        }
    }
    actions
}

fn targets_for(instances: &BTreeSet<String>, port: i32) -> Vec<(String, i32)> {
    instances.iter().map(|i| (i.clone(), port)).collect()
}

fn plan_new_tg(
    index: usize,
    listener: &ListenerDesired,
    instances: &BTreeSet<String>,
    actions: &mut Vec<NlbAction>,
) {
    actions.push(NlbAction::CreateTargetGroup { listener: index });
    let targets = targets_for(instances, listener.target_group.port);
    if !targets.is_empty() {
        actions.push(NlbAction::RegisterTargets {
            target_group: TgRef::New(index),
            targets,
        });
    }
    // A new target group has AWS defaults: only attributes that differ need a call.
    let non_default: BTreeMap<String, String> = listener
        .target_group
        .attributes
        .iter()
        .filter(|(k, v)| !(k.as_str() == "proxy_protocol_v2.enabled" && v.as_str() == "false"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !non_default.is_empty() {
        actions.push(NlbAction::ModifyTargetGroupAttributes {
            target_group: TgRef::New(index),
            attributes: listener.target_group.attributes.clone(),
        });
    }
}

fn plan_fresh(desired: &NlbDesired, actions: &mut Vec<NlbAction>) {
    for (index, listener) in desired.listeners.iter().enumerate() {
        plan_new_tg(index, listener, &desired.instances, actions);
        actions.push(NlbAction::CreateListener {
            listener: index,
            target_group: TgRef::New(index),
        });
    }
    let defaults: BTreeMap<String, String> = BTreeMap::from([
        (
            "load_balancing.cross_zone.enabled".to_string(),
            "false".to_string(),
        ),
        ("access_logs.s3.enabled".to_string(), "false".to_string()),
    ]);
    if !attributes_satisfied(&desired.attributes, &defaults) {
        actions.push(NlbAction::ModifyLoadBalancerAttributes(
            desired.attributes.clone(),
        ));
    }
}

fn plan_existing_tg(
    listener: &ListenerDesired,
    tg: &ObservedTg,
    instances: &BTreeSet<String>,
    post: &mut Vec<NlbAction>,
) {
    let desired = &listener.target_group;
    if !desired.health.satisfied_by(&tg.health) {
        post.push(NlbAction::ModifyTargetGroup {
            arn: tg.arn.clone(),
            health: desired.health.clone(),
        });
    }
    if let Some(attributes) = &tg.attributes
        && !attributes_satisfied(&desired.attributes, attributes)
    {
        post.push(NlbAction::ModifyTargetGroupAttributes {
            target_group: TgRef::Existing(tg.arn.clone()),
            attributes: desired.attributes.clone(),
        });
    }
    if let Some(tags) = &tg.tags {
        let TagChanges { add, remove } = diff_tags(tags, &desired.tags);
        if !add.is_empty() {
            post.push(NlbAction::AddTags {
                target_group: Some(TgRef::Existing(tg.arn.clone())),
                tags: add,
            });
        }
        if !remove.is_empty() {
            post.push(NlbAction::RemoveTags {
                target_group: Some(tg.arn.clone()),
                keys: remove,
            });
        }
    }
    if let Some(registered) = &tg.targets {
        let wanted: BTreeSet<(String, i32)> =
            targets_for(instances, desired.port).into_iter().collect();
        let deregister: Vec<(String, i32)> = registered.difference(&wanted).cloned().collect();
        let register: Vec<(String, i32)> = wanted.difference(registered).cloned().collect();
        // Deregister first so a replaced node never receives traffic on a stale port.
        if !deregister.is_empty() {
            post.push(NlbAction::DeregisterTargets {
                arn: tg.arn.clone(),
                targets: deregister,
            });
        }
        if !register.is_empty() {
            post.push(NlbAction::RegisterTargets {
                target_group: TgRef::Existing(tg.arn.clone()),
                targets: register,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health() -> TgHealth {
        TgHealth {
            protocol: "TCP".into(),
            port: "traffic-port".into(),
            path: None,
            interval: 30,
            timeout: 10,
            healthy: 3,
            unhealthy: 3,
        }
    }

    fn listener(port: i32, protocol: &str, node_port: i32) -> ListenerDesired {
        ListenerDesired {
            port,
            protocol: protocol.into(),
            certificate: None,
            ssl_policy: None,
            target_group: TgDesired {
                name: format!("k8s-ns-web-{node_port}"),
                protocol: if protocol == "TLS" {
                    "TCP".into()
                } else {
                    protocol.into()
                },
                port: node_port,
                health: health(),
                attributes: BTreeMap::from([("proxy_protocol_v2.enabled".into(), "false".into())]),
                tags: BTreeMap::from([("k".into(), "v".into())]),
            },
        }
    }

    fn desired() -> NlbDesired {
        NlbDesired {
            name: "a1".into(),
            internal: false,
            subnet_mappings: vec![SubnetMapping {
                subnet_id: "subnet-a".into(),
                allocation_id: None,
                private_ipv4: None,
            }],
            security_groups: vec![],
            attributes: BTreeMap::from([
                ("load_balancing.cross_zone.enabled".into(), "false".into()),
                ("access_logs.s3.enabled".into(), "false".into()),
            ]),
            tags: BTreeMap::from([("k".into(), "v".into())]),
            listeners: vec![listener(80, "TCP", 30080)],
            instances: ["i-1".to_string()].into(),
        }
    }

    fn converged(d: &NlbDesired) -> NlbObserved {
        let mut listeners = Vec::new();
        let mut tgs = Vec::new();
        for l in &d.listeners {
            let tg_arn = format!("tg-{}", l.target_group.port);
            listeners.push(ObservedListener {
                arn: format!("l-{}", l.port),
                port: l.port,
                protocol: l.protocol.clone(),
                certificate: l.certificate.clone(),
                ssl_policy: l.ssl_policy.clone(),
                target_group_arn: Some(tg_arn.clone()),
            });
            tgs.push(ObservedTg {
                arn: tg_arn,
                name: l.target_group.name.clone(),
                protocol: l.target_group.protocol.clone(),
                port: l.target_group.port,
                health: l.target_group.health.clone(),
                targets: Some(
                    targets_for(&d.instances, l.target_group.port)
                        .into_iter()
                        .collect(),
                ),
                attributes: Some(BTreeMap::new()),
                tags: Some(l.target_group.tags.clone()),
            });
        }
        NlbObserved {
            arn: "lb".into(),
            dns_name: Some("dns".into()),
            internal: d.internal,
            subnet_mappings: d.subnet_mappings.clone(),
            addresses_reported: true,
            listeners,
            target_groups: tgs,
            attributes: Some(BTreeMap::new()),
            tags: Some(d.tags.clone()),
        }
    }

    #[test]
    fn create_builds_target_group_targets_then_listener() {
        assert_eq!(
            plan(None, &desired()),
            vec![
                NlbAction::Create,
                NlbAction::CreateTargetGroup { listener: 0 },
                NlbAction::RegisterTargets {
                    target_group: TgRef::New(0),
                    targets: vec![("i-1".into(), 30080)]
                },
                NlbAction::CreateListener {
                    listener: 0,
                    target_group: TgRef::New(0)
                },
            ]
        );
    }

    #[test]
    fn converged_plans_nothing() {
        let d = desired();
        assert_eq!(plan(Some(&converged(&d)), &d), vec![]);
        let mut fast = converged(&d);
        fast.attributes = None;
        fast.tags = None;
        for tg in &mut fast.target_groups {
            tg.attributes = None;
            tg.tags = None;
        }
        assert_eq!(plan(Some(&fast), &d), vec![]);
    }

    #[test]
    fn tcp_to_tls_modifies_the_listener_in_place() {
        let seen = converged(&desired());
        let mut d = desired();
        d.listeners[0].protocol = "TLS".into();
        d.listeners[0].certificate = Some("arn:cert".into());
        assert_eq!(
            plan(Some(&seen), &d),
            vec![NlbAction::ModifyListener {
                arn: "l-80".into(),
                listener: 0,
                target_group: TgRef::Existing("tg-30080".into())
            }]
        );
    }

    #[test]
    fn health_changes_modify_and_protocol_changes_replace_the_target_group() {
        let seen = converged(&desired());
        let mut d = desired();
        d.listeners[0].target_group.health.interval = 10;
        d.listeners[0].target_group.health.unhealthy = 5;
        d.listeners[0].target_group.health.timeout = 6;
        assert_eq!(
            plan(Some(&seen), &d),
            vec![NlbAction::ModifyTargetGroup {
                arn: "tg-30080".into(),
                health: d.listeners[0].target_group.health.clone()
            }]
        );
        let mut local = desired();
        local.listeners[0].target_group.health = TgHealth {
            protocol: "HTTP".into(),
            port: "31000".into(),
            path: Some("/healthz".into()),
            interval: 10,
            timeout: 6,
            healthy: 2,
            unhealthy: 2,
        };
        assert_eq!(
            plan(Some(&seen), &local),
            vec![
                NlbAction::CreateTargetGroup { listener: 0 },
                NlbAction::RegisterTargets {
                    target_group: TgRef::New(0),
                    targets: vec![("i-1".into(), 30080)]
                },
                NlbAction::ModifyListener {
                    arn: "l-80".into(),
                    listener: 0,
                    target_group: TgRef::New(0)
                },
                NlbAction::DeleteTargetGroup {
                    arn: "tg-30080".into()
                },
            ]
        );
    }

    #[test]
    fn node_changes_touch_only_targets() {
        let seen = converged(&desired());
        let mut d = desired();
        d.instances = ["i-2".to_string()].into();
        assert_eq!(
            plan(Some(&seen), &d),
            vec![
                NlbAction::DeregisterTargets {
                    arn: "tg-30080".into(),
                    targets: vec![("i-1".into(), 30080)]
                },
                NlbAction::RegisterTargets {
                    target_group: TgRef::Existing("tg-30080".into()),
                    targets: vec![("i-2".into(), 30080)]
                },
            ]
        );
    }

    #[test]
    fn scheme_and_eip_changes_recreate() {
        let seen = converged(&desired());
        let mut internal = desired();
        internal.internal = true;
        assert_eq!(plan(Some(&seen), &internal)[0], NlbAction::Recreate);
        let mut eip = desired();
        eip.subnet_mappings[0].allocation_id = Some("eipalloc-1".into());
        assert_eq!(plan(Some(&seen), &eip)[0], NlbAction::Recreate);
        let mut subnets = desired();
        subnets.subnet_mappings.push(SubnetMapping {
            subnet_id: "subnet-b".into(),
            allocation_id: None,
            private_ipv4: None,
        });
        assert_eq!(
            plan(Some(&seen), &subnets),
            vec![NlbAction::SetSubnets(vec![
                "subnet-a".into(),
                "subnet-b".into()
            ])]
        );
    }

    #[test]
    fn removed_port_deletes_listener_and_target_group_and_attributes_converge() {
        let mut two = desired();
        two.listeners.push(listener(443, "TCP", 30443));
        let seen = converged(&two);
        let mut d = desired();
        d.attributes
            .insert("load_balancing.cross_zone.enabled".into(), "true".into());
        d.listeners[0]
            .target_group
            .attributes
            .insert("proxy_protocol_v2.enabled".into(), "true".into());
        let actions = plan(Some(&seen), &d);
        assert_eq!(
            actions,
            vec![
                NlbAction::DeleteListener {
                    arn: "l-443".into()
                },
                NlbAction::DeleteTargetGroup {
                    arn: "tg-30443".into()
                },
                NlbAction::ModifyTargetGroupAttributes {
                    target_group: TgRef::Existing("tg-30080".into()),
                    attributes: d.listeners[0].target_group.attributes.clone()
                },
                NlbAction::ModifyLoadBalancerAttributes(d.attributes.clone()),
            ]
        );
    }
}

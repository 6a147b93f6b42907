//! The pure middle of the provider: what the Service wants ([`desired`]), and the calls that
//! turn what exists into it ([`plan`]). No I/O; table-driven tests below.
//!
//! Ownership follows TKE: a CLB kube-lb creates carries `tke-createdBy-flag=yes`,
//! `tke-clusterId=<cluster>` and `tke-lb-serviceuuid=<Service UID>`, and is found again by those
//! tags. Listeners are owned by name (`<listenerName>-<Service UID>`), so on a user's CLB
//! (`tke-existed-lbid`) only the Service's own listeners are ever changed or deleted, and a
//! listener the user renamed is left alone.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_annotations::{
    LoadBalancerSpec, Protocol, ProviderSpec, Scheme, ServiceKey, TencentSpec,
};
use kube_lb_provider_core::{BackendNode, ChangeAction, PlannedChange, ProviderError};
use serde_json::{Map, Value, json};

use crate::client::{Listener, ListenerTargets, LoadBalancer};

/// Tag marking a CLB as created (and deleted) by the controller.
pub const TAG_CREATED_BY: &str = "tke-createdBy-flag";
/// Tag naming the cluster.
pub const TAG_CLUSTER: &str = "tke-clusterId";
/// Tag naming the Service UID.
pub const TAG_SERVICE_UUID: &str = "tke-lb-serviceuuid";

/// The keys of `extensiveParameters` that would change who owns the CLB or where it lives;
/// refused there (the typed annotations and the cluster configuration decide them).
pub const OWNERSHIP_TAG_KEYS: &[&str] = &[TAG_CREATED_BY, TAG_CLUSTER, TAG_SERVICE_UUID];

/// The name of the Service's listeners.
pub fn listener_name(prefix: &str, service: &ServiceKey) -> String {
    format!("{prefix}-{}", service.uid)
}

/// The CLB name: `<cluster>_<namespace>_<name>`, cut to the API's 60 characters.
pub fn load_balancer_name(cluster: &str, service: &ServiceKey) -> String {
    format!("{cluster}_{}_{}", service.namespace, service.name)
        .chars()
        .take(60)
        .collect()
}

/// One Service port as a listener.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DesiredListener {
    /// `TCP` or `UDP`.
    pub protocol: String,
    /// Front-end port.
    pub port: u16,
    /// The NodePort targets listen on.
    pub node_port: u16,
}

/// Where the Service's listeners live.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// A CLB kube-lb creates with this `CreateLoadBalancer` body.
    Owned(Map<String, Value>),
    /// The user's CLB (`tke-existed-lbid`).
    Existing(String),
}

/// Everything `ensure` converges to.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The Service.
    pub service: ServiceKey,
    /// Owned or existing CLB.
    pub placement: Placement,
    /// Our listener name.
    pub listener_name: String,
    /// Listeners, in port order.
    pub listeners: Vec<DesiredListener>,
    /// `CreateListener` parameters beyond the typed ones (listenerParameters).
    pub listener_parameters: Map<String, Value>,
    /// Backend node addresses (InternalIP).
    pub node_ips: BTreeSet<String>,
    /// True when `backends-label` is set and no node matched it.
    pub selector_matched_nothing: bool,
}

/// Merges `overlay` into `base`: objects recursively, anything else replaced.
pub fn deep_merge(base: &mut Map<String, Value>, overlay: &Map<String, Value>) {
    for (key, value) in overlay {
        match (base.get_mut(key), value) {
            (Some(Value::Object(inner)), Value::Object(over)) => deep_merge(inner, over),
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

/// The `CreateLoadBalancer` body: typed defaults from the annotations, then
/// `extensiveParameters` merged over them; extra `Tags` are added to the ownership tags.
pub fn create_body(
    tencent: &TencentSpec,
    scheme: Scheme,
    cluster: &str,
    service: &ServiceKey,
    vpc_id: Option<&str>,
) -> Map<String, Value> {
    let mut body = Map::new();
    let internal = scheme == Scheme::Internal && tencent.internal_subnet_id.is_some();
    body.insert(
        "LoadBalancerType".into(),
        json!(if internal { "INTERNAL" } else { "OPEN" }),
    );
    body.insert("Forward".into(), json!(1));
    body.insert(
        "LoadBalancerName".into(),
        json!(load_balancer_name(cluster, service)),
    );
    if let Some(vpc) = vpc_id {
        body.insert("VpcId".into(), json!(vpc));
    }
    if let (true, Some(subnet)) = (internal, &tencent.internal_subnet_id) {
        body.insert("SubnetId".into(), json!(subnet));
    }
    if !internal {
        let mut access = Map::new();
        if let Some(charge) = tencent.internet_charge_type {
            access.insert("InternetChargeType".into(), json!(charge.as_str()));
        }
        if let Some(bandwidth) = tencent.internet_max_bandwidth_out {
            access.insert("InternetMaxBandwidthOut".into(), json!(bandwidth));
        }
        if !access.is_empty() {
            body.insert("InternetAccessible".into(), Value::Object(access));
        }
    }
    let mut tags = vec![
        json!({"TagKey": TAG_CREATED_BY, "TagValue": "yes"}),
        json!({"TagKey": TAG_CLUSTER, "TagValue": cluster}),
        json!({"TagKey": TAG_SERVICE_UUID, "TagValue": service.uid}),
    ];
    if let Some(extra) = &tencent.extensive_parameters {
        let mut overlay = extra.clone();
        // Tags are added, never replaced: the ownership tags must stay (the parser refuses
        // ownership keys in them).
        if let Some(Value::Array(more)) = overlay.remove("Tags") {
            tags.extend(more);
        }
        deep_merge(&mut body, &overlay);
    }
    body.insert("Tags".into(), Value::Array(tags));
    body
}

/// What the Service asks for, from its spec and the backends the controller selected.
pub fn desired(
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
    cluster: &str,
    vpc_id: Option<&str>,
    listener_prefix: &str,
) -> Result<Desired, ProviderError> {
    let ProviderSpec::Tencent(tencent) = &spec.provider else {
        return Err(ProviderError::Internal {
            message: format!("{}: not a Tencent spec", spec.service),
            source: None,
        });
    };
    let mut listeners = Vec::new();
    for port in &spec.ports {
        let protocol = match port.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => {
                return Err(ProviderError::user(format!(
                    "spec.ports[{}]: protocol SCTP is not supported by Tencent CLB (TCP or UDP)",
                    port.port
                )));
            }
        };
        let Some(node_port) = port.node_port else {
            return Err(ProviderError::user(format!(
                "spec.ports port {}: no nodePort; the Tencent provider binds NodePorts (set allocateLoadBalancerNodePorts: true)",
                port.port
            )));
        };
        listeners.push(DesiredListener {
            protocol: protocol.into(),
            port: port.port,
            node_port,
        });
    }
    listeners.sort();
    let placement = match &tencent.existed_lb_id {
        Some(id) => Placement::Existing(id.clone()),
        None => Placement::Owned(create_body(
            tencent,
            spec.scheme,
            cluster,
            &spec.service,
            vpc_id,
        )),
    };
    let node_ips: BTreeSet<String> = backends
        .iter()
        .filter_map(|n| n.internal_ip().map(|ip| ip.to_string()))
        .collect();
    Ok(Desired {
        service: spec.service.clone(),
        placement,
        listener_name: listener_name(listener_prefix, &spec.service),
        listeners,
        listener_parameters: tencent.listener_parameters.clone().unwrap_or_default(),
        selector_matched_nothing: !tencent.backends_label.is_empty() && backends.is_empty(),
        node_ips,
    })
}

/// Whether a node matches every requirement of a `backends-label` selector.
pub fn selector_matches(
    requirements: &[kube_lb_annotations::LabelRequirement],
    labels: &BTreeMap<String, String>,
) -> bool {
    use kube_lb_annotations::SelectorOperator as Op;
    requirements.iter().all(|r| {
        let value = labels.get(&r.key);
        match r.operator {
            Op::Equals | Op::In => value.is_some_and(|v| r.values.contains(v)),
            Op::NotEquals | Op::NotIn => value.is_none_or(|v| !r.values.contains(v)),
            Op::Exists => value.is_some(),
            Op::DoesNotExist => value.is_none(),
        }
    })
}

/// A listener by its identity on the CLB.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListenerKey {
    /// `TCP` / `UDP`.
    pub protocol: String,
    /// Port.
    pub port: u16,
}

/// One backend: `EniIp:Port` (or an `InstanceId` someone else bound).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Backend {
    /// `EniIp`, or the `InstanceId` of a target bound by instance.
    pub address: String,
    /// True when `address` is an `InstanceId`.
    pub by_instance: bool,
    /// Port.
    pub port: u16,
}

/// What exists on the CLB.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// Its listeners.
    pub listeners: Vec<Listener>,
    /// Targets per listener id.
    pub targets: BTreeMap<String, Vec<Backend>>,
}

impl Observed {
    /// Builds the target map from `DescribeTargets`.
    pub fn with_targets(listeners: Vec<Listener>, described: Vec<ListenerTargets>) -> Observed {
        let mut targets = BTreeMap::new();
        for listener in described {
            let backends = listener
                .targets
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    let instance = t.instance_id.filter(|id| !id.is_empty());
                    match (t.kind.as_str(), instance) {
                        ("CVM", Some(id)) => Backend {
                            address: id,
                            by_instance: true,
                            port: t.port,
                        },
                        _ => Backend {
                            address: t
                                .private_ip_addresses
                                .unwrap_or_default()
                                .into_iter()
                                .next()
                                .unwrap_or_default(),
                            by_instance: false,
                            port: t.port,
                        },
                    }
                })
                .collect();
            targets.insert(listener.listener_id, backends);
        }
        Observed { listeners, targets }
    }
}

/// A listener a step refers to: an existing one by id, or one an earlier step creates.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ListenerRef {
    /// Exists.
    Id(String),
    /// Created by a `CreateListeners` step of this plan.
    New(ListenerKey),
}

/// One mutating call.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `DeleteLoadBalancerListeners`: our listeners for ports no longer wanted.
    DeleteListeners {
        /// Their ids.
        ids: Vec<String>,
        /// `TCP:80`, for people.
        described: Vec<String>,
    },
    /// `CreateListener` for all new ports of one protocol.
    CreateListeners {
        /// `TCP` / `UDP`.
        protocol: String,
        /// Ports.
        ports: Vec<u16>,
    },
    /// `BatchDeregisterTargets`.
    Deregister(Vec<(ListenerRef, Backend)>),
    /// `BatchRegisterTargets`.
    Register(Vec<(ListenerRef, Backend)>),
}

impl Step {
    /// The provider-neutral description (`kube-lb plan`).
    pub fn planned(&self, lb: &str) -> PlannedChange {
        match self {
            Step::DeleteListeners { described, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "Listener",
                format!("{lb}/{}", described.join(",")),
                "DeleteLoadBalancerListeners",
            ),
            Step::CreateListeners { protocol, ports } => PlannedChange::new(
                ChangeAction::Create,
                "Listener",
                format!(
                    "{lb}/{}",
                    ports
                        .iter()
                        .map(|p| format!("{protocol}:{p}"))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                "CreateListener",
            ),
            Step::Deregister(targets) => PlannedChange::new(
                ChangeAction::Modify,
                "Targets",
                lb,
                "BatchDeregisterTargets",
            )
            .field("Targets", Some(describe_backends(targets)), None),
            Step::Register(targets) => {
                PlannedChange::new(ChangeAction::Modify, "Targets", lb, "BatchRegisterTargets")
                    .field("Targets", None, Some(describe_backends(targets)))
            }
        }
    }
}

fn describe_backends(targets: &[(ListenerRef, Backend)]) -> String {
    targets
        .iter()
        .map(|(_, b)| format!("{}:{}", b.address, b.port))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
        .join(",")
}

/// The calls that make `observed` match `desired`, in order: delete unwanted listeners,
/// create missing ones (one call per protocol), unbind stale targets, bind missing ones.
/// A port held by a listener that is not ours is an error (`AddressInUse`).
pub fn plan(observed: &Observed, desired: &Desired) -> Result<Vec<Step>, ProviderError> {
    let mut steps = Vec::new();
    let wanted: BTreeMap<ListenerKey, &DesiredListener> = desired
        .listeners
        .iter()
        .map(|l| {
            (
                ListenerKey {
                    protocol: l.protocol.clone(),
                    port: l.port,
                },
                l,
            )
        })
        .collect();
    let transport = |protocol: &str| if protocol == "UDP" { "UDP" } else { "TCP" };
    let mut kept: BTreeMap<ListenerKey, String> = BTreeMap::new();
    let mut delete_ids = Vec::new();
    let mut delete_described = Vec::new();
    for listener in &observed.listeners {
        let key = ListenerKey {
            protocol: listener.protocol.clone(),
            port: listener.port,
        };
        let ours = listener.listener_name == desired.listener_name;
        if ours && wanted.contains_key(&key) {
            kept.insert(key, listener.listener_id.clone());
        } else if ours {
            delete_ids.push(listener.listener_id.clone());
            delete_described.push(format!("{}:{}", key.protocol, key.port));
        } else if let Some(want) = wanted.keys().find(|w| {
            w.port == listener.port && transport(&w.protocol) == transport(&listener.protocol)
        }) {
            return Err(ProviderError::environment(
                "CreateListener",
                kube_lb_provider_core::EnvironmentCause::AddressInUse,
                format!(
                    "{}:{} is held by listener {} ({:?}) that kube-lb does not own; free the port or rename it to {}",
                    want.protocol,
                    want.port,
                    listener.listener_id,
                    listener.listener_name,
                    desired.listener_name
                ),
            ));
        }
    }
    if !delete_ids.is_empty() {
        steps.push(Step::DeleteListeners {
            ids: delete_ids,
            described: delete_described,
        });
    }
    let mut missing: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    for key in wanted.keys().filter(|k| !kept.contains_key(*k)) {
        missing
            .entry(key.protocol.as_str())
            .or_default()
            .push(key.port);
    }
    for (protocol, ports) in missing {
        // The API takes fewer than 50 ports per call.
        for chunk in ports.chunks(49) {
            steps.push(Step::CreateListeners {
                protocol: protocol.to_string(),
                ports: chunk.to_vec(),
            });
        }
    }
    let mut register = Vec::new();
    let mut deregister = Vec::new();
    for (key, want) in &wanted {
        let reference = match kept.get(key) {
            Some(id) => ListenerRef::Id(id.clone()),
            None => ListenerRef::New(key.clone()),
        };
        let target_set: BTreeSet<Backend> = desired
            .node_ips
            .iter()
            .map(|ip| Backend {
                address: ip.clone(),
                by_instance: false,
                port: want.node_port,
            })
            .collect();
        let bound: BTreeSet<Backend> = match kept.get(key) {
            Some(id) => observed
                .targets
                .get(id)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            None => BTreeSet::new(),
        };
        for stale in bound.difference(&target_set) {
            deregister.push((reference.clone(), stale.clone()));
        }
        for new in target_set.difference(&bound) {
            register.push((reference.clone(), new.clone()));
        }
    }
    if !deregister.is_empty() {
        steps.push(Step::Deregister(deregister));
    }
    if !register.is_empty() {
        steps.push(Step::Register(register));
    }
    Ok(steps)
}

/// The ingress addresses of a CLB: its VIPs, then its IPv6 address.
pub fn addresses(lb: &LoadBalancer) -> Vec<String> {
    let mut addresses: Vec<String> = lb.load_balancer_vips.clone().unwrap_or_default();
    if let Some(v6) = lb.address_ipv6.as_ref().filter(|a| !a.is_empty()) {
        addresses.push(v6.clone());
    }
    addresses
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kube_lb_annotations::{LabelRequirement, SelectorOperator};

    use super::*;

    const NAME: &str = "TKE-DEDICATED-LISTENER-uid";

    fn listener(id: &str, name: &str, protocol: &str, port: u16) -> Listener {
        Listener {
            listener_id: id.into(),
            listener_name: name.into(),
            protocol: protocol.into(),
            port,
        }
    }

    fn desired(ports: &[(&str, u16, u16)], ips: &[&str]) -> Desired {
        Desired {
            service: ServiceKey {
                namespace: "default".into(),
                name: "web".into(),
                uid: "uid".into(),
            },
            placement: Placement::Existing("lb-1".into()),
            listener_name: NAME.into(),
            listeners: ports
                .iter()
                .map(|(protocol, port, node_port)| DesiredListener {
                    protocol: (*protocol).into(),
                    port: *port,
                    node_port: *node_port,
                })
                .collect(),
            listener_parameters: Map::new(),
            node_ips: ips.iter().map(|s| s.to_string()).collect(),
            selector_matched_nothing: false,
        }
    }

    fn bound(ip: &str, port: u16) -> Backend {
        Backend {
            address: ip.into(),
            by_instance: false,
            port,
        }
    }

    /// The calls of a plan, as `Action protocol:port …` strings.
    fn calls(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::DeleteListeners { described, .. } => {
                    format!("Delete {}", described.join(","))
                }
                Step::CreateListeners { protocol, ports } => format!("Create {protocol}:{ports:?}"),
                Step::Deregister(t) => format!("Deregister {}", t.len()),
                Step::Register(t) => format!("Register {}", t.len()),
            })
            .collect()
    }

    #[test]
    fn plans_the_fewest_calls() {
        let in_sync = Observed {
            listeners: vec![listener("l1", NAME, "TCP", 80)],
            targets: BTreeMap::from([("l1".into(), vec![bound("10.0.0.1", 30080)])]),
        };
        let cases: Vec<(&str, Observed, Desired, Vec<&str>)> = vec![
            (
                "in sync",
                in_sync.clone(),
                desired(&[("TCP", 80, 30080)], &["10.0.0.1"]),
                vec![],
            ),
            (
                "nothing yet: one create per protocol, one bind for all",
                Observed::default(),
                desired(
                    &[("TCP", 80, 30080), ("TCP", 443, 30443), ("UDP", 53, 30053)],
                    &["10.0.0.1", "10.0.0.2"],
                ),
                vec!["Create TCP:[80, 443]", "Create UDP:[53]", "Register 6"],
            ),
            (
                "a node replaced",
                in_sync.clone(),
                desired(&[("TCP", 80, 30080)], &["10.0.0.2"]),
                vec!["Deregister 1", "Register 1"],
            ),
            (
                "nodePort changed: rebind",
                in_sync.clone(),
                desired(&[("TCP", 80, 31000)], &["10.0.0.1"]),
                vec!["Deregister 1", "Register 1"],
            ),
            (
                "port removed, another added",
                in_sync.clone(),
                desired(&[("TCP", 8080, 30080)], &["10.0.0.1"]),
                vec!["Delete TCP:80", "Create TCP:[8080]", "Register 1"],
            ),
            (
                "a renamed (foreign) listener on another port is left alone",
                Observed {
                    listeners: vec![
                        listener("l1", NAME, "TCP", 80),
                        listener("l2", "mine", "TCP", 22),
                    ],
                    targets: in_sync.targets.clone(),
                },
                desired(&[("TCP", 80, 30080)], &["10.0.0.1"]),
                vec![],
            ),
            (
                "UDP may share a port with someone's TCP listener",
                Observed {
                    listeners: vec![listener("l2", "mine", "TCP", 53)],
                    targets: BTreeMap::new(),
                },
                desired(&[("UDP", 53, 30053)], &["10.0.0.1"]),
                vec!["Create UDP:[53]", "Register 1"],
            ),
        ];
        for (what, observed, want, expected) in cases {
            let steps = plan(&observed, &want).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(calls(&steps), expected, "{what}");
        }
    }

    #[test]
    fn a_port_held_by_a_foreign_listener_is_refused() {
        let observed = Observed {
            listeners: vec![listener("l2", "console", "TCP", 80)],
            targets: BTreeMap::new(),
        };
        let error = plan(&observed, &desired(&[("TCP", 80, 30080)], &["10.0.0.1"])).unwrap_err();
        assert!(
            matches!(error, ProviderError::Environment { .. })
                && error.to_string().contains("TCP:80"),
            "{error}"
        );
    }

    #[test]
    fn deep_merge_keeps_sibling_keys_and_replaces_leaves() {
        let mut base = serde_json::json!({"LoadBalancerType": "OPEN",
            "InternetAccessible": {"InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR", "InternetMaxBandwidthOut": 10}});
        let overlay = serde_json::json!({"VipIsp": "CTCC", "InternetAccessible": {"InternetMaxBandwidthOut": 50}});
        let (Value::Object(base_map), Value::Object(over)) = (&mut base, &overlay) else {
            panic!("objects");
        };
        deep_merge(base_map, over);
        assert_eq!(
            base,
            serde_json::json!({"LoadBalancerType": "OPEN", "VipIsp": "CTCC",
                "InternetAccessible": {"InternetChargeType": "TRAFFIC_POSTPAID_BY_HOUR", "InternetMaxBandwidthOut": 50}})
        );
    }

    #[test]
    fn selectors_follow_kubectl_semantics() {
        let req = |key: &str, operator, values: &[&str]| LabelRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let labels = BTreeMap::from([("group".to_string(), "edge".to_string())]);
        let cases = [
            (req("group", SelectorOperator::Equals, &["edge"]), true),
            (req("group", SelectorOperator::In, &["core", "edge"]), true),
            (req("group", SelectorOperator::NotIn, &["edge"]), false),
            (req("zone", SelectorOperator::NotIn, &["a"]), true),
            (req("group", SelectorOperator::NotEquals, &["core"]), true),
            (req("group", SelectorOperator::Exists, &[]), true),
            (req("group", SelectorOperator::DoesNotExist, &[]), false),
            (req("zone", SelectorOperator::Equals, &["a"]), false),
        ];
        for (requirement, want) in cases {
            assert_eq!(
                selector_matches(std::slice::from_ref(&requirement), &labels),
                want,
                "{requirement:?}"
            );
        }
    }
}

//! The pure middle of the provider: what the Service wants ([`desired`]), and the calls that
//! turn what exists into it ([`plan`]). No I/O; table-driven tests below.
//!
//! Ownership follows TKE: a CLB kube-lb creates carries `tke-createdBy-flag=yes`,
//! `tke-clusterId=<cluster>` and `tke-lb-serviceuuid=<Service UID>`, and is found again by those
//! tags. Listeners are owned by name (`<listenerName>-<Service UID>`), so on a user's CLB
//! (`tke-existed-lbid`) only the Service's own listeners are ever changed or deleted, and a
//! listener the user renamed is left alone. On a CLB created for the Service (its tags say so)
//! TKE's own bare name (`TKE-DEDICATED-LISTENER`) is the Service's too: that is how TKE's
//! service controller leaves it, and adopting it must not mean replacing it.
//!
//! Health checks: a TCP listener of an `externalTrafficPolicy: Local` Service checks the
//! health-check node port over HTTP (`/healthz`, 2xx), so nodes without a ready endpoint get
//! no traffic; with `Cluster` it checks the target port over TCP (the CLB default). UDP
//! listeners keep the CLB's default check, and a `HealthCheck` in listenerParameters leaves
//! the check to the user.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_annotations::keys::tencent as keys;
use kube_lb_annotations::{
    Cloud, LoadBalancerSpec, Protocol, ProviderSpec, Scheme, ServiceKey, TencentSpec, TrafficPolicy,
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

/// The `ClientToken` of one CLB creation for Service `uid`: the UID (so a token names whose
/// create it was) and `nonce` (unique per creation, so a CLB deleted and created again is not
/// answered with the old id), within the API's 64 ASCII characters.
pub fn client_token(uid: &str, nonce: u128) -> String {
    let nonce = format!("{nonce:x}");
    let room = 64 - nonce.len() - 1;
    let uid: String = uid.chars().filter(char::is_ascii).take(room).collect();
    format!("{uid}-{nonce}")
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

/// The health check the Service's TCP listeners should have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthPolicy {
    /// TCP to the target port (the CLB default): any node can forward.
    Cluster,
    /// HTTP `GET /healthz` on the health-check node port: only nodes with a ready endpoint.
    Local {
        /// `spec.healthCheckNodePort`.
        port: u16,
    },
    /// listenerParameters sets `HealthCheck`: the user's choice at creation stands.
    Unmanaged,
}

/// One target to bind: a CVM by `InstanceId` (the node's `qcloud://…/ins-…` providerID, as TKE
/// binds) or an address by `EniIp` (the node's InternalIP).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeTarget {
    /// `ins-…` or an IP.
    pub address: String,
    /// True when `address` is an `InstanceId`.
    pub by_instance: bool,
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
    /// The configured listener name without the UID: TKE's own name, ours on a CLB created
    /// for the Service.
    pub listener_prefix: String,
    /// The health check of TCP listeners.
    pub health: HealthPolicy,
    /// The CLB the Service's listeners were last written back to (`loadbalance-id`).
    pub recorded_load_balancer_id: Option<String>,
    /// extensiveParameters now (`{}` when unset).
    pub extensive_parameters: Map<String, Value>,
    /// What kube-lb recorded the CLB was created with.
    pub created_with_extensive_parameters: Option<Map<String, Value>>,
    /// What kube-lb recorded the listeners were created with.
    pub created_with_listener_parameters: Option<Map<String, Value>>,
    /// Listeners, in port order.
    pub listeners: Vec<DesiredListener>,
    /// `CreateListener` parameters beyond the typed ones (listenerParameters).
    pub listener_parameters: Map<String, Value>,
    /// Backend nodes: CVM instances or InternalIPs.
    pub node_targets: BTreeSet<NodeTarget>,
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

/// A CLB's network kind for people: `OPEN (public)`, `INTERNAL in subnet-…`.
fn describe_network_kind(load_balancer_type: &str, subnet: &str) -> String {
    match (load_balancer_type, subnet) {
        ("OPEN", _) => "OPEN (public)".to_string(),
        (kind, "") => kind.to_string(),
        (kind, subnet) => format!("{kind} in {subnet}"),
    }
}

/// The refusal's message when the Service's CLB `lb` is not of the network kind `body` (the
/// `CreateLoadBalancer` request the Service would make now) asks for; `None` when it is, or
/// when the CLB does not report its kind.
///
/// A CLB's type (`OPEN` / `INTERNAL`) and an internal CLB's subnet are fixed at creation.
/// TKE's service controller refuses to switch an existing Service between public and internal
/// access, or to move an internal one to another subnet (its notice on the Service
/// component's lifecycle rules, doc 457/90598), and so does kube-lb: before any write, with
/// a message naming the annotation, both kinds and the ways out (the caller returns it as
/// [`ProviderError::Refused`] with the CLB's addresses). Without it the changed
/// annotation would silently have no effect.
pub fn network_kind_refusal(lb: &LoadBalancer, body: &Map<String, Value>) -> Option<String> {
    let field = |key: &str| body.get(key).and_then(Value::as_str).unwrap_or_default();
    let (wanted_type, wanted_subnet) = (field("LoadBalancerType"), field("SubnetId"));
    let (current_type, current_subnet) = (lb.load_balancer_type.as_str(), lb.subnet_id.as_str());
    if current_type.is_empty() || wanted_type.is_empty() {
        return None;
    }
    let same_type = current_type == wanted_type;
    let same_subnet =
        wanted_type != "INTERNAL" || current_subnet.is_empty() || current_subnet == wanted_subnet;
    if same_type && same_subnet {
        return None;
    }
    let current = describe_network_kind(current_type, current_subnet);
    let wanted = describe_network_kind(wanted_type, wanted_subnet);
    let restore = match (current_type, current_subnet) {
        ("OPEN", _) => "remove it".to_string(),
        (_, "") => "set it back".to_string(),
        (_, subnet) => format!("set it back to {subnet}"),
    };
    let id = &lb.load_balancer_id;
    Some(format!(
        "{key}: the Service's CLB {id} is {current} but the Service now asks for {wanted}; a CLB's network type and subnet are fixed when it is created and TKE refuses to switch them, so kube-lb changed nothing. To keep CLB {id} and its address, {restore}; to get a {wanted} CLB (with a new address), delete and recreate the Service, or set spec.type to ClusterIP and then back to LoadBalancer",
        key = keys::INTERNAL_SUBNET_ID,
    ))
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
    // The ports are final here: one judgement with `parse` (and so with `kube-lb lint`).
    if let Some(refused) = kube_lb_annotations::port_limits(Cloud::Tencent, &spec.ports, false)
        .into_iter()
        .next()
    {
        return Err(ProviderError::user(refused.to_string()));
    }
    let mut listeners = Vec::new();
    for port in &spec.ports {
        // port_limits refused SCTP and a port without a node port.
        let protocol = if port.protocol == Protocol::Udp {
            "UDP"
        } else {
            "TCP"
        };
        let Some(node_port) = port.node_port else {
            continue;
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
    let node_targets: BTreeSet<NodeTarget> = backends.iter().filter_map(node_target).collect();
    let listener_parameters = tencent.listener_parameters.clone().unwrap_or_default();
    let health = match spec.traffic_policy {
        _ if listener_parameters.contains_key("HealthCheck") => HealthPolicy::Unmanaged,
        TrafficPolicy::Local {
            health_check_node_port: Some(port),
        } => HealthPolicy::Local { port },
        _ => HealthPolicy::Cluster,
    };
    Ok(Desired {
        service: spec.service.clone(),
        placement,
        listener_name: listener_name(listener_prefix, &spec.service),
        listener_prefix: listener_prefix.to_string(),
        health,
        recorded_load_balancer_id: tencent.recorded_load_balancer_id.clone(),
        extensive_parameters: tencent.extensive_parameters.clone().unwrap_or_default(),
        created_with_extensive_parameters: tencent.created_with_extensive_parameters.clone(),
        created_with_listener_parameters: tencent.created_with_listener_parameters.clone(),
        listeners,
        listener_parameters,
        selector_matched_nothing: !tencent.backends_label.is_empty() && backends.is_empty(),
        node_targets,
    })
}

/// How a node is bound: by its CVM instance when its providerID is TKE's
/// `qcloud:///<zone>/ins-…`, else by its InternalIP; `None` when it has neither.
pub fn node_target(node: &BackendNode) -> Option<NodeTarget> {
    let instance = node
        .provider_id
        .as_deref()
        .and_then(|id| id.strip_prefix("qcloud://"))
        .and_then(|rest| rest.rsplit('/').next())
        .filter(|id| id.starts_with("ins-"));
    match instance {
        Some(id) => Some(NodeTarget {
            address: id.to_string(),
            by_instance: true,
        }),
        None => node.internal_ip().map(|ip| NodeTarget {
            address: ip.to_string(),
            by_instance: false,
        }),
    }
}

/// The `HealthCheck` a listener is created or modified with under `health`, for a listener
/// whose targets listen on `node_port`; `None` where the CLB default is wanted at creation.
pub fn health_check_body(health: HealthPolicy, node_port: u16) -> Option<Map<String, Value>> {
    let body = match health {
        HealthPolicy::Unmanaged => return None,
        HealthPolicy::Local { port } => json!({
            "HealthSwitch": 1, "CheckType": "HTTP", "CheckPort": port,
            "HttpCheckPath": "/healthz", "HttpCheckMethod": "GET",
            // A TCP listener's HTTP check needs a domain; kube-proxy ignores it.
            "HttpCheckDomain": "kube-lb.healthz", "HttpVersion": "HTTP/1.1",
            // 2xx only: kube-proxy answers 503 where the Service has no local endpoint.
            "HttpCode": 2,
        }),
        // Named explicitly when switching back: the API has no way to clear CheckPort.
        HealthPolicy::Cluster => {
            json!({"HealthSwitch": 1, "CheckType": "TCP", "CheckPort": node_port})
        }
    };
    match body {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// The check a listener has, for people and comparisons: `TCP` or `HTTP:<port>/healthz`.
fn describe_check(check_type: &str, port: Option<u16>) -> String {
    match (check_type, port) {
        ("HTTP", Some(port)) => format!("HTTP:{port}/healthz"),
        (kind, Some(port)) => format!("{kind}:{port}"),
        (kind, None) => kind.to_string(),
    }
}

/// The observed `(CheckType, CheckPort)` of a listener; an absent check is the CLB default.
fn observed_check(listener: &Listener) -> (String, Option<u16>) {
    let check = listener.health_check.as_ref();
    let kind = check
        .and_then(|c| c.get("CheckType"))
        .and_then(Value::as_str)
        .unwrap_or("TCP")
        .to_string();
    let port = check
        .and_then(|c| c.get("CheckPort"))
        .and_then(Value::as_i64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0);
    (kind, port)
}

/// The annotations the controller writes back after a successful ensure on CLB `lb_id`:
/// TKE's `loadbalance-id`, and what the CLB and the listeners were created with (kept as
/// recorded unless this pass created them, or nothing was recorded yet: then what kube-lb
/// finds is the baseline), so the parser can tell the user a later change is not applied.
pub fn written_back(
    desired: &Desired,
    lb_id: &str,
    created_load_balancer: bool,
    created_every_listener: bool,
) -> BTreeMap<String, String> {
    let render = |map: &Map<String, Value>| Value::Object(map.clone()).to_string();
    let mut annotations = BTreeMap::new();
    annotations.insert(keys::LOADBALANCE_ID.to_string(), lb_id.to_string());
    if matches!(desired.placement, Placement::Owned(_)) {
        let extensive = match &desired.created_with_extensive_parameters {
            Some(recorded) if !created_load_balancer => recorded,
            _ => &desired.extensive_parameters,
        };
        annotations.insert(
            keys::CREATED_WITH_EXTENSIVE_PARAMETERS.to_string(),
            render(extensive),
        );
    }
    let listener = match &desired.created_with_listener_parameters {
        Some(recorded) if !created_every_listener => recorded,
        _ => &desired.listener_parameters,
    };
    annotations.insert(
        keys::CREATED_WITH_LISTENER_PARAMETERS.to_string(),
        render(listener),
    );
    annotations
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
    /// True when the CLB was created for this Service (its ownership tags name it): TKE's
    /// bare listener name is then the Service's too.
    pub dedicated: bool,
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
        Observed {
            dedicated: false,
            listeners,
            targets,
        }
    }

    /// Marks the CLB as created for this Service.
    pub fn dedicated(mut self, dedicated: bool) -> Observed {
        self.dedicated = dedicated;
        self
    }

    /// True when `listener` is the Service's.
    pub fn owns(&self, listener: &Listener, desired: &Desired) -> bool {
        listener.listener_name == desired.listener_name
            || (self.dedicated && listener.listener_name == desired.listener_prefix)
    }
}

/// The ids of the listeners a `CreateListener` for `ports` of `protocol` named `name` would
/// make, when `listeners` already hold every one of them (by name, protocol and port): an
/// earlier attempt whose answer was lost made them. `None` when any is missing or held by a
/// listener of another name.
pub fn created_already(
    listeners: &[Listener],
    protocol: &str,
    ports: &[u16],
    name: &str,
) -> Option<Vec<String>> {
    ports
        .iter()
        .map(|port| {
            listeners
                .iter()
                .find(|l| l.listener_name == name && l.protocol == protocol && l.port == *port)
                .map(|l| l.listener_id.clone())
        })
        .collect()
}

/// Whether every `(listener id, backend)` of `requested` is bound (`register`) or unbound
/// (not `register`) in `described` (`DescribeTargets` of those listeners): the state a batch
/// call asked for is there even though the call reported those listeners as failed (a repeat
/// after a lost answer: the first call did the work).
pub fn targets_settled(
    described: Vec<ListenerTargets>,
    requested: &[(String, Backend)],
    register: bool,
) -> bool {
    let bound = Observed::with_targets(Vec::new(), described).targets;
    requested.iter().all(|(listener, backend)| {
        let is_bound = bound
            .get(listener)
            .is_some_and(|targets| targets.contains(backend));
        is_bound == register
    })
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
        /// The typed `HealthCheck` (listenerParameters still merge over it).
        health_check: Option<Map<String, Value>>,
    },
    /// `ModifyListener`: the health check of one listener.
    ModifyHealthCheck {
        /// The listener.
        id: String,
        /// `TCP:80`, for people.
        described: String,
        /// The check now, for people.
        old: String,
        /// The check wanted, for people.
        new: String,
        /// The `HealthCheck` to send.
        health_check: Map<String, Value>,
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
            Step::ModifyHealthCheck {
                described,
                old,
                new,
                ..
            } => PlannedChange::new(
                ChangeAction::Modify,
                "Listener",
                format!("{lb}/{described}"),
                "ModifyListener",
            )
            .field("HealthCheck", Some(old.clone()), Some(new.clone())),
            Step::CreateListeners {
                protocol, ports, ..
            } => PlannedChange::new(
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
    let mut modify = Vec::new();
    for listener in &observed.listeners {
        let key = ListenerKey {
            protocol: listener.protocol.clone(),
            port: listener.port,
        };
        let ours = observed.owns(listener, desired);
        if ours && let Some(want) = wanted.get(&key) {
            if let Some(step) = health_check_step(listener, want, desired.health) {
                modify.push(step);
            }
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
    // One CreateListener per protocol and health check (the check is per call, and a
    // Cluster check names each listener's own NodePort only when modifying).
    let mut missing: NewListeners<'_> = BTreeMap::new();
    for (key, want) in wanted.iter().filter(|(k, _)| !kept.contains_key(*k)) {
        let check = create_health_check(&key.protocol, desired.health, want.node_port);
        let rendered = check.as_ref().map(|c| Value::Object(c.clone()).to_string());
        missing
            .entry((key.protocol.as_str(), rendered))
            .or_insert_with(|| (check, Vec::new()))
            .1
            .push(key.port);
    }
    for ((protocol, _), (health_check, ports)) in missing {
        // The API takes fewer than 50 ports per call.
        for chunk in ports.chunks(49) {
            steps.push(Step::CreateListeners {
                protocol: protocol.to_string(),
                ports: chunk.to_vec(),
                health_check: health_check.clone(),
            });
        }
    }
    steps.extend(modify);
    let mut register = Vec::new();
    let mut deregister = Vec::new();
    for (key, want) in &wanted {
        let reference = match kept.get(key) {
            Some(id) => ListenerRef::Id(id.clone()),
            None => ListenerRef::New(key.clone()),
        };
        let target_set: BTreeSet<Backend> = desired
            .node_targets
            .iter()
            .map(|target| Backend {
                address: target.address.clone(),
                by_instance: target.by_instance,
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

/// Ports to create, grouped by protocol and health check (rendered, for the key), each group
/// with its check.
type NewListeners<'a> = BTreeMap<(&'a str, Option<String>), (Option<Map<String, Value>>, Vec<u16>)>;

/// The `HealthCheck` a new listener gets: only Local needs one (the default is Cluster's).
fn create_health_check(
    protocol: &str,
    health: HealthPolicy,
    node_port: u16,
) -> Option<Map<String, Value>> {
    match health {
        HealthPolicy::Local { .. } if protocol == "TCP" => health_check_body(health, node_port),
        _ => None,
    }
}

/// A `ModifyListener` when the listener's check is not what `health` wants (TCP only).
fn health_check_step(
    listener: &Listener,
    want: &DesiredListener,
    health: HealthPolicy,
) -> Option<Step> {
    if listener.protocol != "TCP" {
        return None;
    }
    let (kind, port) = observed_check(listener);
    let in_sync = match health {
        HealthPolicy::Unmanaged => true,
        HealthPolicy::Local { port: wanted } => kind == "HTTP" && port == Some(wanted),
        HealthPolicy::Cluster => kind == "TCP" && port.is_none_or(|p| p == want.node_port),
    };
    if in_sync {
        return None;
    }
    let health_check = health_check_body(health, want.node_port)?;
    let new = match health {
        HealthPolicy::Local { port } => describe_check("HTTP", Some(port)),
        _ => describe_check("TCP", Some(want.node_port)),
    };
    Some(Step::ModifyHealthCheck {
        id: listener.listener_id.clone(),
        described: format!("{}:{}", listener.protocol, listener.port),
        old: describe_check(&kind, port),
        new,
        health_check,
    })
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
            health_check: None,
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
            listener_prefix: "TKE-DEDICATED-LISTENER".into(),
            health: HealthPolicy::Cluster,
            recorded_load_balancer_id: None,
            extensive_parameters: Map::new(),
            created_with_extensive_parameters: None,
            created_with_listener_parameters: None,
            listeners: ports
                .iter()
                .map(|(protocol, port, node_port)| DesiredListener {
                    protocol: (*protocol).into(),
                    port: *port,
                    node_port: *node_port,
                })
                .collect(),
            listener_parameters: Map::new(),
            node_targets: ips
                .iter()
                .map(|s| NodeTarget {
                    address: s.to_string(),
                    by_instance: false,
                })
                .collect(),
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
                Step::CreateListeners {
                    protocol,
                    ports,
                    health_check,
                } => match health_check {
                    Some(check) => format!("Create {protocol}:{ports:?} {}", check["CheckType"]),
                    None => format!("Create {protocol}:{ports:?}"),
                },
                Step::ModifyHealthCheck {
                    described,
                    old,
                    new,
                    ..
                } => format!("Modify {described} {old} -> {new}"),
                Step::Deregister(t) => format!("Deregister {}", t.len()),
                Step::Register(t) => format!("Register {}", t.len()),
            })
            .collect()
    }

    #[test]
    fn plans_the_fewest_calls() {
        let in_sync = Observed {
            dedicated: false,
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
                    dedicated: false,
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
                    dedicated: false,
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

    fn checked(id: &str, name: &str, protocol: &str, check: Option<Value>) -> Listener {
        Listener {
            health_check: check,
            ..listener(id, name, protocol, 80)
        }
    }

    #[test]
    fn health_checks_follow_the_traffic_policy_on_tcp_listeners_only() {
        let http = json!({"CheckType": "HTTP", "CheckPort": 32100});
        let tcp_on_node_port = json!({"CheckType": "TCP", "CheckPort": 30080});
        let local = HealthPolicy::Local { port: 32100 };
        let cases: Vec<(&str, Listener, HealthPolicy, Vec<&str>)> = vec![
            (
                "Cluster, CLB default check",
                checked("l1", NAME, "TCP", None),
                HealthPolicy::Cluster,
                vec![],
            ),
            (
                "Cluster, check named on the NodePort",
                checked("l1", NAME, "TCP", Some(tcp_on_node_port.clone())),
                HealthPolicy::Cluster,
                vec![],
            ),
            (
                "Cluster → Local",
                checked("l1", NAME, "TCP", None),
                local,
                vec!["Modify TCP:80 TCP -> HTTP:32100/healthz"],
            ),
            (
                "Local in sync",
                checked("l1", NAME, "TCP", Some(http.clone())),
                local,
                vec![],
            ),
            (
                "Local → Cluster names the NodePort (CheckPort cannot be cleared)",
                checked("l1", NAME, "TCP", Some(http.clone())),
                HealthPolicy::Cluster,
                vec!["Modify TCP:80 HTTP:32100/healthz -> TCP:30080"],
            ),
            (
                "a check the user set in listenerParameters is left alone",
                checked("l1", NAME, "TCP", Some(http)),
                HealthPolicy::Unmanaged,
                vec![],
            ),
            (
                "UDP listeners keep the CLB's check",
                checked("l1", NAME, "UDP", None),
                local,
                vec![],
            ),
        ];
        for (what, observed_listener, health, expected) in cases {
            let protocol = observed_listener.protocol.clone();
            let observed = Observed {
                dedicated: false,
                listeners: vec![observed_listener],
                targets: BTreeMap::from([("l1".into(), vec![bound("10.0.0.1", 30080)])]),
            };
            let mut want = desired(&[(protocol.as_str(), 80, 30080)], &["10.0.0.1"]);
            want.health = health;
            let steps = plan(&observed, &want).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(calls(&steps), expected, "{what}");
        }
        // New listeners of a Local Service are created with the HTTP check.
        let mut want = desired(&[("TCP", 80, 30080)], &["10.0.0.1"]);
        want.health = local;
        let steps = plan(&Observed::default(), &want).unwrap();
        assert_eq!(calls(&steps)[0], r#"Create TCP:[80] "HTTP""#);
    }

    #[test]
    fn tkes_bare_listener_name_is_ours_only_on_a_clb_made_for_the_service() {
        let tke = Observed {
            dedicated: false,
            listeners: vec![listener("l1", "TKE-DEDICATED-LISTENER", "TCP", 80)],
            targets: BTreeMap::from([("l1".into(), vec![bound("10.0.0.1", 30080)])]),
        };
        let want = desired(&[("TCP", 80, 30080)], &["10.0.0.1"]);
        assert!(
            plan(&tke, &want).is_err(),
            "on a user's CLB TKE's name may be another Service's: the port is refused"
        );
        let steps = plan(&tke.clone().dedicated(true), &want).unwrap();
        assert_eq!(calls(&steps), Vec::<String>::new(), "adopted as it is");
    }

    #[test]
    fn nodes_are_bound_by_cvm_instance_when_tke_names_one() {
        let node = |provider_id: Option<&str>| BackendNode {
            name: "n".into(),
            provider_id: provider_id.map(str::to_string),
            addresses: vec![kube_lb_provider_core::NodeAddress {
                kind: kube_lb_provider_core::types::NodeAddressKind::InternalIp,
                ip: "10.0.0.7".parse().unwrap(),
            }],
            labels: BTreeMap::new(),
        };
        let cases = [
            (Some("qcloud:///800002/ins-3kd9x0a1"), "ins-3kd9x0a1", true),
            (Some("aws:///us-east-1a/i-0123"), "10.0.0.7", false),
            (Some("qcloud:///800002/eks-node"), "10.0.0.7", false),
            (None, "10.0.0.7", false),
        ];
        for (provider_id, address, by_instance) in cases {
            assert_eq!(
                node_target(&node(provider_id)),
                Some(NodeTarget {
                    address: address.into(),
                    by_instance
                }),
                "{provider_id:?}"
            );
        }
    }

    #[test]
    fn records_keep_what_the_clb_and_listeners_were_created_with() {
        let object = |text: &str| match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            other => panic!("{other:?}"),
        };
        let mut want = desired(&[("TCP", 80, 30080)], &[]);
        want.placement = Placement::Owned(Map::new());
        want.extensive_parameters = object(r#"{"VipIsp":"CMCC"}"#);
        want.listener_parameters = object(r#"{"Scheduler":"WRR"}"#);
        want.created_with_extensive_parameters = Some(object(r#"{"VipIsp":"CTCC"}"#));
        want.created_with_listener_parameters = Some(object(r#"{"Scheduler":"LEAST_CONN"}"#));
        let extensive = keys::CREATED_WITH_EXTENSIVE_PARAMETERS;
        let listener = keys::CREATED_WITH_LISTENER_PARAMETERS;
        let cases = [
            (
                "existing CLB and listeners: the records stay",
                false,
                false,
                r#"{"VipIsp":"CTCC"}"#,
                r#"{"Scheduler":"LEAST_CONN"}"#,
            ),
            (
                "CLB recreated: both records are now",
                true,
                true,
                r#"{"VipIsp":"CMCC"}"#,
                r#"{"Scheduler":"WRR"}"#,
            ),
            (
                "listeners recreated on the same CLB",
                false,
                true,
                r#"{"VipIsp":"CTCC"}"#,
                r#"{"Scheduler":"WRR"}"#,
            ),
        ];
        for (what, created_lb, created_listeners, want_extensive, want_listener) in cases {
            let written = written_back(&want, "lb-1", created_lb, created_listeners);
            assert_eq!(written[keys::LOADBALANCE_ID], "lb-1", "{what}");
            assert_eq!(written[extensive], want_extensive, "{what}");
            assert_eq!(written[listener], want_listener, "{what}");
        }
        // Nothing recorded yet (adopted from TKE): what exists now is the baseline.
        want.created_with_extensive_parameters = None;
        let written = written_back(&want, "lb-1", false, false);
        assert_eq!(written[extensive], r#"{"VipIsp":"CMCC"}"#);
        // On a user's CLB nothing was created from extensiveParameters.
        want.placement = Placement::Existing("lb-1".into());
        assert!(!written_back(&want, "lb-1", false, false).contains_key(extensive));
    }

    #[test]
    fn a_port_held_by_a_foreign_listener_is_refused() {
        let observed = Observed {
            dedicated: false,
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

    #[test]
    fn client_tokens_fit_the_api_and_differ_per_creation() {
        let uid = "9f0c7d7e-1b2a-4c3d-8e9f-0a1b2c3d4e5f";
        // (uid, nonce, token)
        let cases = [
            (uid, 0x1u128, format!("{uid}-1")),
            (
                uid,
                0x187a_b3c4_d5e6_f708,
                format!("{uid}-187ab3c4d5e6f708"),
            ),
            // The largest nonce leaves 31 characters of the UID: 64 in all.
            (uid, u128::MAX, format!("{}-{}", &uid[..31], "f".repeat(32))),
            // Only ASCII goes into a token.
            ("uid-é", 0x2, "uid--2".to_string()),
        ];
        for (uid, nonce, want) in cases {
            let token = client_token(uid, nonce);
            assert_eq!(token, want);
            assert!(token.len() <= 64 && token.is_ascii(), "{token}");
        }
        assert_ne!(client_token(uid, 1), client_token(uid, 2));
    }

    #[test]
    fn listeners_made_by_a_lost_create_are_recognised_by_name_protocol_and_port() {
        let listeners = [
            listener("lbl-80", NAME, "TCP", 80),
            listener("lbl-443", NAME, "TCP", 443),
            listener("lbl-u53", NAME, "UDP", 53),
            listener("lbl-8080", "someone-else", "TCP", 8080),
        ];
        // (protocol, ports, ids found)
        let cases = [
            ("TCP", &[80, 443][..], Some(&["lbl-80", "lbl-443"][..])),
            ("TCP", &[443], Some(&["lbl-443"])),
            ("UDP", &[53], Some(&["lbl-u53"])),
            ("TCP", &[80, 9090], None),
            ("TCP", &[53], None),
            ("TCP", &[8080], None),
        ];
        for (protocol, ports, want) in cases {
            let want = want.map(|ids| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>());
            assert_eq!(
                created_already(&listeners, protocol, ports, NAME),
                want,
                "{protocol} {ports:?}"
            );
        }
    }

    #[test]
    fn a_batch_reported_failed_is_settled_when_the_targets_are_as_asked() {
        let described = || {
            vec![ListenerTargets {
                listener_id: "lbl-1".into(),
                targets: Some(vec![
                    crate::client::Target {
                        kind: "CVM".into(),
                        instance_id: Some("ins-1".into()),
                        private_ip_addresses: Some(vec!["10.0.0.1".into()]),
                        port: 30080,
                        weight: Some(10),
                    },
                    crate::client::Target {
                        kind: "ENI".into(),
                        instance_id: None,
                        private_ip_addresses: Some(vec!["10.0.0.2".into()]),
                        port: 30080,
                        weight: Some(10),
                    },
                ]),
            }]
        };
        let instance = |id: &str| Backend {
            address: id.into(),
            by_instance: true,
            port: 30080,
        };
        let address = |ip: &str| Backend {
            address: ip.into(),
            by_instance: false,
            port: 30080,
        };
        let on = |listener: &str, backend: Backend| (listener.to_string(), backend);
        // (requested, register, settled)
        let cases = [
            (
                vec![
                    on("lbl-1", instance("ins-1")),
                    on("lbl-1", address("10.0.0.2")),
                ],
                true,
                true,
            ),
            (vec![on("lbl-1", instance("ins-2"))], true, false),
            (vec![on("lbl-2", instance("ins-1"))], true, false),
            (vec![on("lbl-1", instance("ins-2"))], false, true),
            (vec![on("lbl-2", address("10.0.0.2"))], false, true),
            (vec![on("lbl-1", address("10.0.0.2"))], false, false),
        ];
        for (requested, register, want) in cases {
            assert_eq!(
                targets_settled(described(), &requested, register),
                want,
                "{requested:?} register={register}"
            );
        }
    }

    #[test]
    fn a_clbs_network_kind_is_never_switched_silently() {
        let clb = |kind: &str, subnet: &str| -> LoadBalancer {
            serde_json::from_value(json!({"LoadBalancerId": "lb-1", "LoadBalancerType": kind,
                "SubnetId": subnet}))
            .unwrap()
        };
        let wants = |kind: &str, subnet: Option<&str>| {
            let mut body = Map::new();
            body.insert("LoadBalancerType".into(), json!(kind));
            if let Some(subnet) = subnet {
                body.insert("SubnetId".into(), json!(subnet));
            }
            body
        };
        // (what, observed CLB, wanted body, the refusal names these; empty = no refusal)
        type Case = (
            &'static str,
            LoadBalancer,
            Map<String, Value>,
            &'static [&'static str],
        );
        let cases: Vec<Case> = vec![
            (
                "public stays public",
                clb("OPEN", ""),
                wants("OPEN", None),
                &[],
            ),
            (
                "internal stays in its subnet",
                clb("INTERNAL", "subnet-a"),
                wants("INTERNAL", Some("subnet-a")),
                &[],
            ),
            (
                "a CLB that reports no subnet is not refused for it",
                clb("INTERNAL", ""),
                wants("INTERNAL", Some("subnet-a")),
                &[],
            ),
            (
                "a CLB that reports no type is left to the rest of the plan",
                clb("", ""),
                wants("INTERNAL", Some("subnet-a")),
                &[],
            ),
            (
                "public → internal",
                clb("OPEN", ""),
                wants("INTERNAL", Some("subnet-a")),
                &[
                    "is OPEN (public)",
                    "asks for INTERNAL in subnet-a",
                    "remove it",
                ],
            ),
            (
                "internal → public",
                clb("INTERNAL", "subnet-a"),
                wants("OPEN", None),
                &[
                    "is INTERNAL in subnet-a",
                    "asks for OPEN (public)",
                    "set it back to subnet-a",
                ],
            ),
            (
                "internal → another subnet",
                clb("INTERNAL", "subnet-a"),
                wants("INTERNAL", Some("subnet-b")),
                &[
                    "is INTERNAL in subnet-a",
                    "asks for INTERNAL in subnet-b",
                    "set it back to subnet-a",
                ],
            ),
        ];
        for (what, lb, body, named) in cases {
            let refusal = network_kind_refusal(&lb, &body);
            if named.is_empty() {
                assert!(refusal.is_none(), "{what}: {refusal:?}");
                continue;
            }
            let Some(text) = refusal else {
                panic!("{what}: a refusal wanted");
            };
            for part in named.iter().chain(&[
                keys::INTERNAL_SUBNET_ID,
                "CLB lb-1",
                "changed nothing",
                "delete and recreate the Service",
            ]) {
                assert!(text.contains(part), "{what}: {part:?} in {text}");
            }
        }
    }

    #[test]
    fn the_create_body_and_the_refusal_agree_on_the_annotation() {
        // What the annotation asks for reaches the check through the same create body
        // `ensure` would send: public by default, internal with the subnet.
        let service = ServiceKey {
            namespace: "default".into(),
            name: "web".into(),
            uid: "uid".into(),
        };
        let public: LoadBalancer =
            serde_json::from_value(json!({"LoadBalancerId": "lb-1", "LoadBalancerType": "OPEN"}))
                .unwrap();
        let spec = |subnet: Option<&str>| TencentSpec {
            internal_subnet_id: subnet.map(str::to_string),
            backends_label: Vec::new(),
            existed_lb_id: None,
            extensive_parameters: None,
            listener_parameters: None,
            load_balance_type: None,
            internet_charge_type: None,
            internet_max_bandwidth_out: None,
            local_svc_only_bind_node_with_pod: false,
            recorded_load_balancer_id: None,
            created_with_extensive_parameters: None,
            created_with_listener_parameters: None,
        };
        let open = create_body(&spec(None), Scheme::External, "c", &service, None);
        assert!(network_kind_refusal(&public, &open).is_none());
        let internal = create_body(
            &spec(Some("subnet-a")),
            Scheme::Internal,
            "c",
            &service,
            None,
        );
        assert!(network_kind_refusal(&public, &internal).is_some());
    }

    /// A spec that did not come through `parse` (which refuses these first) is refused by
    /// `desired` in the words of `kube_lb_annotations::port_limits`, the one rule for both.
    #[test]
    fn ports_the_load_balancer_cannot_carry_are_refused_in_the_parsers_words() {
        let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u"},
            "spec": {"type": "LoadBalancer",
                     "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let parsed = kube_lb_annotations::parse(Cloud::Tencent, &service)
            .unwrap_or_else(|e| panic!("{e}"))
            .spec;
        let mut sctp = parsed.clone();
        sctp.ports[0].protocol = Protocol::Sctp;
        let mut no_node_port = parsed;
        no_node_port.ports[0].node_port = None;
        for spec in [sctp, no_node_port] {
            let words =
                kube_lb_annotations::port_limits(Cloud::Tencent, &spec.ports, false)[0].to_string();
            match super::desired(&spec, &[], "cls", Some("vpc"), "kube-lb") {
                Err(ProviderError::User { message }) => assert_eq!(message, words),
                other => panic!("{:?}: {other:?}", spec.ports),
            }
        }
    }
}

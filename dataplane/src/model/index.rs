//! The watch-fed index: normalised Services, EndpointSlices, Endpoints and Nodes, each update
//! reporting whether anything the dataplane depends on changed (STYLE §8).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::topology::{self, TOPOLOGY_KEYS_ANNOTATION};
use super::types::{
    EndpointAddr, HealthCheckModel, PortKey, Protocol, ProxyProtocol, ServiceKey, ServicePortModel,
    Snapshot, TrafficPolicy,
};

/// Annotation choosing the PROXY protocol header the userspace backend sends to endpoints.
pub const PROXY_PROTOCOL_ANNOTATION: &str = "kube-lb.io/proxy-protocol";
/// Label naming the Service an EndpointSlice belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Services carrying this label are not proxied.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Services carrying this label belong to another proxy.
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// Default ClientIP affinity timeout (3 hours).
pub const DEFAULT_AFFINITY_TIMEOUT: Duration = Duration::from_secs(10_800);

/// Static settings of the node the index computes for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexConfig {
    /// This node's name (`--node-name`).
    pub node_name: String,
    /// `--nodeport-addresses`: node addresses inside these ranges accept NodePorts; empty = all.
    pub nodeport_cidrs: Vec<IpNet>,
    /// Accept loopback endpoint addresses. Only for a cluster that is this one machine
    /// (`kube-lb up`, where the demo backends listen on 127.0.0.0/8); on a real node the seeds
    /// forbid them and they are never programmed.
    pub allow_loopback_endpoints: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct PortSpec {
    name: String,
    protocol: Protocol,
    port: u16,
    node_port: Option<u16>,
}

/// The parts of a Service the dataplane uses.
#[derive(Debug, Clone, PartialEq)]
struct ServiceInfo {
    ports: Vec<PortSpec>,
    cluster_ips: Vec<IpAddr>,
    external_ips: Vec<IpAddr>,
    load_balancer_ips: Vec<IpAddr>,
    /// `type: LoadBalancer`: only these take addresses from [`Index::set_assigned_ingress`].
    is_load_balancer: bool,
    source_ranges: Vec<IpNet>,
    affinity_timeout: Option<Duration>,
    external_policy: TrafficPolicy,
    internal_policy: TrafficPolicy,
    health_check_node_port: Option<u16>,
    topology_keys: Vec<String>,
    proxy_protocol: Option<ProxyProtocol>,
    has_selector: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct EndpointInfo {
    ip: IpAddr,
    /// Interned: a node's name is shared by all its endpoints (a quarter million of them at
    /// scale, see [`Index::intern_node`]).
    node: Option<Arc<str>>,
    ready: bool,
    serving: bool,
    terminating: bool,
}

/// Endpoints of one Service as one slice (an EndpointSlice, or a selector-less Endpoints object).
#[derive(Debug, Clone, PartialEq)]
struct SliceInfo {
    service: ServiceKey,
    /// (port name, protocol) → port number.
    ports: Vec<(String, Protocol, u16)>,
    endpoints: Vec<EndpointInfo>,
    /// Addresses left out because no endpoint may have them (loopback, link-local, …).
    rejected: Vec<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct NodeInfo {
    labels: BTreeMap<String, String>,
    addresses: Vec<IpAddr>,
}

/// The dataplane's view of the cluster. Update methods return `true` only when something the
/// snapshot depends on changed, so callers can skip a sync on no-op relists.
#[derive(Debug, Default)]
pub struct Index {
    config: IndexConfig,
    services: HashMap<ServiceKey, ServiceInfo>,
    /// Keyed by (namespace, slice name).
    slices: HashMap<(String, String), SliceInfo>,
    /// Endpoints objects, keyed by Service, one slice per subset (each subset keeps its own
    /// ports); only used for Services without EndpointSlices.
    endpoints: HashMap<ServiceKey, Vec<SliceInfo>>,
    nodes: HashMap<String, NodeInfo>,
    /// Problems found while normalising objects, per Service (logged by callers).
    warnings: BTreeMap<ServiceKey, String>,
    /// Slice keys per Service, so a refresh finds one Service's slices without a scan.
    service_slices: HashMap<ServiceKey, BTreeSet<(String, String)>>,
    /// Node names endpoints refer to (see [`EndpointInfo::node`]).
    node_names: HashSet<Arc<str>>,
    /// The snapshot as of the last [`Index::refresh`].
    cache: Snapshot,
    /// Services changed since the last refresh.
    dirty: HashSet<ServiceKey>,
    /// Every Service must be recomputed by the next refresh (nothing refreshed yet, or a Node
    /// changed: node labels steer topology and the own node's addresses the NodePorts).
    all_dirty: bool,
    /// NodePort addresses set by the caller instead of the own Node's (see
    /// [`Index::set_nodeport_addresses`]).
    nodeport_override: Option<Vec<IpAddr>>,
    /// Load-balancer addresses assigned in-process, ahead of the Services' status (see
    /// [`Index::set_assigned_ingress`]).
    assigned_ingress: HashMap<ServiceKey, Vec<IpAddr>>,
}

/// What an [`Index::refresh`] changed in its snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotChanges {
    /// Ports added, removed or with a new model.
    pub ports: BTreeSet<PortKey>,
    /// The NodePort addresses changed.
    pub nodeport_addresses: bool,
    /// Health-check node ports changed.
    pub health_checks: bool,
}

impl SnapshotChanges {
    /// True when the snapshot is the same as before.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty() && !self.nodeport_addresses && !self.health_checks
    }

    /// Adds `other`'s changes (for changes accumulated over several refreshes).
    pub fn extend(&mut self, other: SnapshotChanges) {
        self.ports.extend(other.ports);
        self.nodeport_addresses |= other.nodeport_addresses;
        self.health_checks |= other.health_checks;
    }
}

fn replace<K: std::hash::Hash + Eq, V: PartialEq>(
    map: &mut HashMap<K, V>,
    key: K,
    value: Option<V>,
) -> bool {
    match value {
        Some(value) => {
            if map.get(&key) == Some(&value) {
                return false;
            }
            map.insert(key, value);
            true
        }
        None => map.remove(&key).is_some(),
    }
}

impl Index {
    /// An empty index for one node.
    pub fn new(config: IndexConfig) -> Self {
        Index {
            config,
            all_dirty: true,
            ..Index::default()
        }
    }

    fn touch(&mut self, service: &ServiceKey) {
        if !self.all_dirty && !self.dirty.contains(service) {
            self.dirty.insert(service.clone());
        }
    }

    /// The shared copy of a node name.
    fn intern_node(&mut self, name: &str) -> Arc<str> {
        if let Some(name) = self.node_names.get(name) {
            return Arc::clone(name);
        }
        let name: Arc<str> = Arc::from(name);
        self.node_names.insert(Arc::clone(&name));
        name
    }

    /// Stores (or removes) one slice, keeping the per-Service slice lists and marking the
    /// Services whose endpoints changed.
    fn set_slice(&mut self, key: (String, String), info: Option<SliceInfo>) -> bool {
        if self.slices.get(&key) == info.as_ref() {
            return false;
        }
        let old = match info {
            Some(info) => {
                let service = info.service.clone();
                self.service_slices
                    .entry(service.clone())
                    .or_default()
                    .insert(key.clone());
                self.touch(&service);
                self.slices.insert(key.clone(), info)
            }
            None => self.slices.remove(&key),
        };
        if let Some(old) = old {
            let still = self.slices.get(&key).map(|info| &info.service);
            if still != Some(&old.service)
                && let Some(keys) = self.service_slices.get_mut(&old.service)
            {
                keys.remove(&key);
                if keys.is_empty() {
                    self.service_slices.remove(&old.service);
                }
            }
            self.touch(&old.service);
        }
        true
    }

    /// The node this index computes for.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Adds or updates a Service. Headless, ExternalName and foreign-proxy Services are treated
    /// as absent.
    pub fn apply_service(&mut self, service: &Service) -> bool {
        let Some(key) = object_key(&service.metadata) else {
            return false;
        };
        let info = match normalise_service(service) {
            Ok(info) => {
                self.warnings.remove(&key);
                info
            }
            Err(warning) => {
                self.warnings.insert(key.clone(), warning);
                None
            }
        };
        let changed = replace(&mut self.services, key.clone(), info);
        if changed {
            self.touch(&key);
        }
        changed
    }

    /// Removes a Service.
    pub fn delete_service(&mut self, namespace: &str, name: &str) -> bool {
        let key = ServiceKey::new(namespace, name);
        self.warnings.remove(&key);
        let changed = replace(&mut self.services, key.clone(), None);
        if changed {
            self.touch(&key);
        }
        changed
    }

    /// Adds or updates an EndpointSlice.
    pub fn apply_endpoint_slice(&mut self, slice: &EndpointSlice) -> bool {
        let (Some(namespace), Some(name)) = (&slice.metadata.namespace, &slice.metadata.name)
        else {
            return false;
        };
        let info = normalise_slice(namespace, slice, |ip| self.rejects_endpoint(ip))
            .map(|info| self.intern_nodes(info));
        self.set_slice((namespace.clone(), name.clone()), info)
    }

    fn intern_nodes(&mut self, mut info: SliceInfo) -> SliceInfo {
        for endpoint in &mut info.endpoints {
            if let Some(node) = &endpoint.node {
                endpoint.node = Some(self.intern_node(node));
            }
        }
        info
    }

    /// Removes an EndpointSlice.
    pub fn delete_endpoint_slice(&mut self, namespace: &str, name: &str) -> bool {
        self.set_slice((namespace.to_owned(), name.to_owned()), None)
    }

    /// Adds or updates an Endpoints object (used only for Services without EndpointSlices).
    pub fn apply_endpoints(&mut self, endpoints: &Endpoints) -> bool {
        let Some(key) = object_key(&endpoints.metadata) else {
            return false;
        };
        let info: Vec<SliceInfo> =
            normalise_endpoints(&key, endpoints, |ip| self.rejects_endpoint(ip))
                .into_iter()
                .map(|info| self.intern_nodes(info))
                .collect();
        let changed = replace(&mut self.endpoints, key.clone(), Some(info));
        if changed {
            self.touch(&key);
        }
        changed
    }

    /// Removes an Endpoints object.
    pub fn delete_endpoints(&mut self, namespace: &str, name: &str) -> bool {
        let key = ServiceKey::new(namespace, name);
        let changed = replace(&mut self.endpoints, key.clone(), None);
        if changed {
            self.touch(&key);
        }
        changed
    }

    /// Adds or updates a Node (only labels and addresses matter).
    pub fn apply_node(&mut self, node: &Node) -> bool {
        let Some(name) = node.metadata.name.clone() else {
            return false;
        };
        let labels = node
            .metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let mut addresses: Vec<IpAddr> = node
            .status
            .iter()
            .flat_map(|status| status.addresses.iter().flatten())
            .filter(|address| address.type_ == "InternalIP" || address.type_ == "ExternalIP")
            .filter_map(|address| address.address.parse().ok())
            .collect();
        addresses.sort();
        addresses.dedup();
        let changed = replace(&mut self.nodes, name, Some(NodeInfo { labels, addresses }));
        self.all_dirty |= changed;
        changed
    }

    /// Removes a Node.
    pub fn delete_node(&mut self, name: &str) -> bool {
        let changed = replace(&mut self.nodes, name.to_owned(), None);
        self.all_dirty |= changed;
        changed
    }

    /// True when `ip` must never be programmed as an endpoint on this node.
    fn rejects_endpoint(&self, ip: IpAddr) -> bool {
        match forbidden_endpoint(ip) {
            Some("loopback") => !self.config.allow_loopback_endpoints,
            Some(_) => true,
            None => false,
        }
    }

    /// Endpoint addresses left out per Service because no endpoint may have them (see
    /// [`forbidden_endpoint`]), for logging and counting.
    pub fn rejected_endpoints(&self) -> BTreeMap<ServiceKey, BTreeSet<IpAddr>> {
        let mut out: BTreeMap<ServiceKey, BTreeSet<IpAddr>> = BTreeMap::new();
        for slice in self
            .slices
            .values()
            .chain(self.endpoints.values().flatten())
        {
            if !slice.rejected.is_empty() {
                out.entry(slice.service.clone())
                    .or_default()
                    .extend(slice.rejected.iter().copied());
            }
        }
        out
    }

    /// Normalisation problems per Service (e.g. invalid topology keys), for logging.
    pub fn warnings(&self) -> &BTreeMap<ServiceKey, String> {
        &self.warnings
    }

    /// Computes what this node must program, from scratch.
    pub fn snapshot(&self) -> Snapshot {
        let own_labels = self.own_labels();
        let mut snapshot = Snapshot {
            nodeport_addresses: self.nodeport_addresses(),
            ..Snapshot::default()
        };
        for (key, service) in &self.services {
            let (ports, health) = self.service_models(key, service, own_labels);
            for model in ports {
                snapshot.ports.insert(model.key.clone(), model);
            }
            if let Some(health) = health {
                snapshot.health_checks.insert(key.clone(), health);
            }
        }
        snapshot
    }

    /// Uses `addresses` as this node's NodePort addresses instead of its Node object's status
    /// addresses (`None`: the Node's again). Takes effect at the next [`Index::refresh`].
    pub fn set_nodeport_addresses(&mut self, addresses: Option<Vec<IpAddr>>) {
        self.nodeport_override = addresses;
    }

    /// Serves `assigned` load-balancer addresses of `type: LoadBalancer` Services beside those
    /// their status shows, from the next [`Index::refresh`] on. For `kube-lb up`, whose provider
    /// runs in the same process: the address is forwarded before the status reports it, so a
    /// client that waited for the status is never refused. Returns whether anything changed.
    pub fn set_assigned_ingress(&mut self, assigned: HashMap<ServiceKey, Vec<IpAddr>>) -> bool {
        let changed: Vec<ServiceKey> = self
            .assigned_ingress
            .keys()
            .chain(assigned.keys())
            .filter(|key| self.assigned_ingress.get(*key) != assigned.get(*key))
            .cloned()
            .collect();
        self.assigned_ingress = assigned;
        for key in &changed {
            self.touch(key);
        }
        !changed.is_empty()
    }

    /// A Service's load-balancer addresses: its status's, then any assigned in-process.
    fn load_balancer_ips(&self, key: &ServiceKey, service: &ServiceInfo) -> Vec<IpAddr> {
        let mut ips = service.load_balancer_ips.clone();
        if service.is_load_balancer {
            for ip in self.assigned_ingress.get(key).into_iter().flatten() {
                if !ips.contains(ip) {
                    ips.push(*ip);
                }
            }
        }
        ips
    }

    /// Brings the kept snapshot up to date and returns it with what changed: only Services
    /// touched since the last refresh are recomputed (all of them after a Node change), so one
    /// endpoint change costs one Service, not the cluster. Equal to [`Index::snapshot`] (with
    /// the NodePort addresses of [`Index::set_nodeport_addresses`]).
    pub fn refresh(&mut self) -> (&Snapshot, SnapshotChanges) {
        let mut changes = SnapshotChanges::default();
        let services: BTreeSet<ServiceKey> = if self.all_dirty {
            self.dirty.clear();
            self.services
                .keys()
                .cloned()
                .chain(self.cache.ports.keys().map(|key| key.service.clone()))
                .chain(self.cache.health_checks.keys().cloned())
                .collect()
        } else {
            self.dirty.drain().collect()
        };
        self.all_dirty = false;
        let addresses = self
            .nodeport_override
            .clone()
            .unwrap_or_else(|| self.nodeport_addresses());
        if addresses != self.cache.nodeport_addresses {
            changes.nodeport_addresses = true;
        }
        let own_labels = self.own_labels();
        let mut updates = Vec::new();
        for key in &services {
            let (ports, health) = match self.services.get(key) {
                Some(service) => self.service_models(key, service, own_labels),
                None => (Vec::new(), None),
            };
            updates.push((key, ports, health));
        }
        let cache = &mut self.cache;
        cache.nodeport_addresses = addresses;
        for (key, ports, health) in updates {
            let range = PortKey {
                service: key.clone(),
                protocol: Protocol::Tcp,
                port: 0,
            }..=PortKey {
                service: key.clone(),
                protocol: Protocol::Sctp,
                port: u16::MAX,
            };
            let gone: Vec<PortKey> = cache
                .ports
                .range(range)
                .map(|(port, _)| port.clone())
                .filter(|port| !ports.iter().any(|model| model.key == *port))
                .collect();
            for port in gone {
                cache.ports.remove(&port);
                changes.ports.insert(port);
            }
            for model in ports {
                if cache.ports.get(&model.key) != Some(&model) {
                    changes.ports.insert(model.key.clone());
                    cache.ports.insert(model.key.clone(), model);
                }
            }
            if cache.health_checks.get(key) != health.as_ref() {
                changes.health_checks = true;
                match health {
                    Some(health) => cache.health_checks.insert(key.clone(), health),
                    None => cache.health_checks.remove(key),
                };
            }
        }
        (&self.cache, changes)
    }

    fn own_labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.nodes
            .get(&self.config.node_name)
            .map_or(&EMPTY, |node| &node.labels)
    }

    fn nodeport_addresses(&self) -> Vec<IpAddr> {
        self.nodes
            .get(&self.config.node_name)
            .map(|node| {
                node.addresses
                    .iter()
                    .copied()
                    .filter(|ip| {
                        self.config.nodeport_cidrs.is_empty()
                            || self
                                .config
                                .nodeport_cidrs
                                .iter()
                                .any(|cidr| cidr.contains(ip))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One Service's port models and health check.
    fn service_models(
        &self,
        key: &ServiceKey,
        service: &ServiceInfo,
        own_labels: &BTreeMap<String, String>,
    ) -> (Vec<ServicePortModel>, Option<HealthCheckModel>) {
        // Slices in name order: which of two duplicate endpoints wins must not depend on
        // hash order.
        let mut slices: Vec<&SliceInfo> = self
            .service_slices
            .get(key)
            .into_iter()
            .flatten()
            .filter_map(|slice| self.slices.get(slice))
            .collect();
        if slices.is_empty() && !service.has_selector {
            slices.extend(self.endpoints.get(key).into_iter().flatten());
        }
        let mut local_ready_ips = BTreeSet::new();
        let mut ports = Vec::with_capacity(service.ports.len());
        for port in &service.ports {
            let endpoints = merge_endpoints(&slices, port);
            for (addr, info) in &endpoints {
                if info.ready && !info.terminating && self.is_local(info) {
                    local_ready_ips.insert(addr.ip);
                }
            }
            ports.push(self.port_model(key, service, port, &endpoints, own_labels));
        }
        let health = match (service.external_policy, service.health_check_node_port) {
            (TrafficPolicy::Local, Some(node_port)) => Some(HealthCheckModel {
                node_port,
                local_ready_endpoints: local_ready_ips.len(),
            }),
            _ => None,
        };
        (ports, health)
    }

    fn is_local(&self, endpoint: &EndpointInfo) -> bool {
        endpoint.node.as_deref() == Some(self.config.node_name.as_str())
    }

    fn port_model(
        &self,
        key: &ServiceKey,
        service: &ServiceInfo,
        port: &PortSpec,
        endpoints: &BTreeMap<EndpointAddr, EndpointInfo>,
        own_labels: &BTreeMap<String, String>,
    ) -> ServicePortModel {
        let all: Vec<(EndpointAddr, &EndpointInfo)> =
            endpoints.iter().map(|(a, i)| (*a, i)).collect();
        let usable = usable(&all);
        let local: Vec<(EndpointAddr, &EndpointInfo)> = all
            .iter()
            .copied()
            .filter(|(_, info)| self.is_local(info))
            .collect();
        let local_endpoints = usable_addrs(&local);
        let cluster_endpoints: Vec<EndpointAddr> =
            topology::filter(&service.topology_keys, own_labels, &usable, |(_, info)| {
                info.node
                    .as_deref()
                    .and_then(|node| self.nodes.get(node))
                    .map(|node| &node.labels)
            })
            .into_iter()
            .map(|(addr, _)| *addr)
            .collect();
        ServicePortModel {
            key: PortKey {
                service: key.clone(),
                protocol: port.protocol,
                port: port.port,
            },
            port_name: port.name.clone(),
            cluster_ips: service.cluster_ips.clone(),
            node_port: port.node_port,
            external_ips: service.external_ips.clone(),
            load_balancer_ips: self.load_balancer_ips(key, service),
            source_ranges: service.source_ranges.clone(),
            affinity_timeout: service.affinity_timeout,
            external_policy: service.external_policy,
            internal_policy: service.internal_policy,
            proxy_protocol: service.proxy_protocol,
            has_endpoints: !usable.is_empty(),
            cluster_endpoints,
            local_endpoints,
        }
    }
}

/// Ready endpoints; if there are none, serving-and-terminating ones (KEP-1669).
fn usable<'a>(
    endpoints: &[(EndpointAddr, &'a EndpointInfo)],
) -> Vec<(EndpointAddr, &'a EndpointInfo)> {
    let ready: Vec<_> = endpoints
        .iter()
        .copied()
        .filter(|(_, info)| info.ready)
        .collect();
    if !ready.is_empty() {
        return ready;
    }
    endpoints
        .iter()
        .copied()
        .filter(|(_, info)| info.serving && info.terminating)
        .collect()
}

fn usable_addrs(endpoints: &[(EndpointAddr, &EndpointInfo)]) -> Vec<EndpointAddr> {
    usable(endpoints)
        .into_iter()
        .map(|(addr, _)| addr)
        .collect()
}

/// Joins a Service port to slice ports by (name, protocol); a non-terminating endpoint wins over a
/// terminating duplicate. Sorted by address so selection indices are deterministic.
fn merge_endpoints(slices: &[&SliceInfo], port: &PortSpec) -> BTreeMap<EndpointAddr, EndpointInfo> {
    let mut merged: BTreeMap<EndpointAddr, EndpointInfo> = BTreeMap::new();
    for slice in slices {
        let Some(number) = slice
            .ports
            .iter()
            .find(|(name, protocol, _)| *name == port.name && *protocol == port.protocol)
            .map(|(_, _, number)| *number)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let addr = EndpointAddr {
                ip: endpoint.ip,
                port: number,
            };
            let keep_existing = merged
                .get(&addr)
                .is_some_and(|existing| !existing.terminating);
            if !keep_existing {
                merged.insert(addr, endpoint.clone());
            }
        }
    }
    merged
}

fn object_key(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<ServiceKey> {
    Some(ServiceKey::new(meta.namespace.clone()?, meta.name.clone()?))
}

fn parse_ips<'a>(values: impl IntoIterator<Item = &'a String>) -> Vec<IpAddr> {
    values
        .into_iter()
        .filter_map(|value| value.parse().ok())
        .collect()
}

/// `Ok(None)` for Services the dataplane skips; `Err` carries a warning and skips the Service.
fn normalise_service(service: &Service) -> Result<Option<ServiceInfo>, String> {
    let labels = service.metadata.labels.as_ref();
    if labels
        .is_some_and(|l| l.contains_key(HEADLESS_LABEL) || l.contains_key(SERVICE_PROXY_NAME_LABEL))
    {
        return Ok(None);
    }
    let Some(spec) = &service.spec else {
        return Ok(None);
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Ok(None);
    }
    let mut cluster_ips = parse_ips(spec.cluster_ips.iter().flatten());
    if cluster_ips.is_empty() {
        cluster_ips = parse_ips(spec.cluster_ip.iter());
    }
    // Headless ("None") or unallocated.
    if cluster_ips.is_empty() {
        return Ok(None);
    }
    let is_lb = spec.type_.as_deref() == Some("LoadBalancer");
    let node_ports_apply = matches!(
        spec.type_.as_deref(),
        Some("NodePort") | Some("LoadBalancer")
    );
    let mut ports = Vec::new();
    for port in spec.ports.iter().flatten() {
        let protocol: Protocol = port.protocol.as_deref().unwrap_or("TCP").parse()?;
        let number =
            u16::try_from(port.port).map_err(|_| format!("port {} out of range", port.port))?;
        let node_port = port
            .node_port
            .filter(|_| node_ports_apply)
            .and_then(|value| u16::try_from(value).ok())
            .filter(|value| *value != 0);
        ports.push(PortSpec {
            name: port.name.clone().unwrap_or_default(),
            protocol,
            port: number,
            node_port,
        });
    }
    let load_balancer_ips = if is_lb {
        service
            .status
            .iter()
            .flat_map(|status| status.load_balancer.iter())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter(|ingress| ingress.ip_mode.as_deref().is_none_or(|mode| mode == "VIP"))
            .filter_map(|ingress| ingress.ip.as_ref()?.parse().ok())
            .collect()
    } else {
        Vec::new()
    };
    let source_ranges = if is_lb {
        spec.load_balancer_source_ranges
            .iter()
            .flatten()
            .map(|range| {
                range
                    .trim()
                    .parse::<IpNet>()
                    .map_err(|_| format!("invalid loadBalancerSourceRange {range:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        Vec::new()
    };
    let external_policy = match spec.external_traffic_policy.as_deref() {
        Some("Local")
            if node_ports_apply || !spec.external_ips.as_deref().unwrap_or_default().is_empty() =>
        {
            TrafficPolicy::Local
        }
        _ => TrafficPolicy::Cluster,
    };
    let internal_policy = match spec.internal_traffic_policy.as_deref() {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    };
    let affinity_timeout = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|config| config.client_ip.as_ref())
            .and_then(|client_ip| client_ip.timeout_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .map_or(DEFAULT_AFFINITY_TIMEOUT, Duration::from_secs)
    });
    let annotations = service.metadata.annotations.as_ref();
    let topology_keys = match annotations.and_then(|a| a.get(TOPOLOGY_KEYS_ANNOTATION)) {
        Some(raw) => topology::parse_keys(raw, external_policy == TrafficPolicy::Local)
            .map_err(|error| format!("{TOPOLOGY_KEYS_ANNOTATION}: {error}"))?,
        None => Vec::new(),
    };
    let proxy_protocol = match annotations.and_then(|a| a.get(PROXY_PROTOCOL_ANNOTATION)) {
        Some(raw) => Some(
            raw.parse::<ProxyProtocol>()
                .map_err(|error| format!("{PROXY_PROTOCOL_ANNOTATION}: {error}"))?,
        ),
        None => None,
    };
    Ok(Some(ServiceInfo {
        ports,
        cluster_ips,
        external_ips: parse_ips(spec.external_ips.iter().flatten()),
        load_balancer_ips,
        is_load_balancer: is_lb,
        source_ranges,
        affinity_timeout,
        external_policy,
        internal_policy,
        health_check_node_port: spec
            .health_check_node_port
            .and_then(|port| u16::try_from(port).ok())
            .filter(|port| *port != 0),
        topology_keys,
        proxy_protocol,
        has_selector: spec
            .selector
            .as_ref()
            .is_some_and(|selector| !selector.is_empty()),
    }))
}

/// Why `ip` may not be an endpoint, or `None` when it may. The seeds: endpoint IPs must not be
/// loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10) or link-local multicast
/// (224.0.0.0/24, ff02::/16); kube-apiserver refuses them, and programming one would send
/// Service traffic to the node itself or off-link.
pub fn forbidden_endpoint(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            if a == 127 {
                Some("loopback")
            } else if a == 169 && b == 254 {
                Some("link-local")
            } else if a == 224 && b == 0 && c == 0 {
                Some("link-local multicast")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            if v6.is_loopback() {
                Some("loopback")
            } else if segments[0] & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if segments[0] == 0xff02 {
                Some("link-local multicast")
            } else if let Some(v4) = v6.to_ipv4_mapped() {
                forbidden_endpoint(IpAddr::V4(v4))
            } else {
                None
            }
        }
    }
}

fn normalise_slice(
    namespace: &str,
    slice: &EndpointSlice,
    rejects: impl Fn(IpAddr) -> bool,
) -> Option<SliceInfo> {
    if slice.address_type == "FQDN" {
        return None;
    }
    let service = slice.metadata.labels.as_ref()?.get(SERVICE_NAME_LABEL)?;
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|port| {
            let number = u16::try_from(port.port?).ok().filter(|n| *n != 0)?;
            let protocol = port.protocol.as_deref().unwrap_or("TCP").parse().ok()?;
            Some((port.name.clone().unwrap_or_default(), protocol, number))
        })
        .collect();
    let mut rejected = Vec::new();
    let endpoints = slice
        .endpoints
        .iter()
        .filter_map(|endpoint| {
            let ip: IpAddr = endpoint.addresses.first()?.parse().ok()?;
            if rejects(ip) {
                rejected.push(ip);
                return None;
            }
            let conditions = endpoint.conditions.as_ref();
            Some(EndpointInfo {
                ip,
                node: endpoint.node_name.as_deref().map(Arc::from),
                ready: conditions.and_then(|c| c.ready).unwrap_or(true),
                serving: conditions.and_then(|c| c.serving).unwrap_or(true),
                terminating: conditions.and_then(|c| c.terminating).unwrap_or(false),
            })
        })
        .collect();
    Some(SliceInfo {
        service: ServiceKey::new(namespace, service.clone()),
        ports,
        endpoints,
        rejected,
    })
}

fn normalise_endpoints(
    key: &ServiceKey,
    endpoints: &Endpoints,
    rejects: impl Fn(IpAddr) -> bool,
) -> Vec<SliceInfo> {
    // Each subset is its own port set: the addresses of a subset serve only that subset's
    // ports (a selector-less Service may map one port name to different numbers per subset).
    endpoints
        .subsets
        .iter()
        .flatten()
        .map(|subset| {
            let mut ports: Vec<(String, Protocol, u16)> = Vec::new();
            for port in subset.ports.iter().flatten() {
                let Ok(number) = u16::try_from(port.port) else {
                    continue;
                };
                let Ok(protocol) = port
                    .protocol
                    .as_deref()
                    .unwrap_or("TCP")
                    .parse::<Protocol>()
                else {
                    continue;
                };
                let name = port.name.clone().unwrap_or_default();
                if !ports.iter().any(|(n, p, _)| *n == name && *p == protocol) {
                    ports.push((name, protocol, number));
                }
            }
            let ready = subset.addresses.iter().flatten().map(|a| (a, true));
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false));
            let mut rejected = Vec::new();
            let endpoints = ready
                .chain(not_ready)
                .filter_map(|(address, ready)| {
                    let ip: IpAddr = address.ip.parse().ok()?;
                    if rejects(ip) {
                        rejected.push(ip);
                        return None;
                    }
                    Some(EndpointInfo {
                        ip,
                        node: address.node_name.as_deref().map(Arc::from),
                        ready,
                        serving: ready,
                        terminating: false,
                    })
                })
                .collect();
            SliceInfo {
                service: key.clone(),
                ports,
                endpoints,
                rejected,
            }
        })
        .collect()
}

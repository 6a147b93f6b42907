//! The watch-fed index: normalised Services, EndpointSlices, Endpoints and Nodes, each update
//! reporting whether anything the dataplane depends on changed (STYLE §8).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
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
    node: Option<String>,
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
            ..Index::default()
        }
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
        replace(&mut self.services, key, info)
    }

    /// Removes a Service.
    pub fn delete_service(&mut self, namespace: &str, name: &str) -> bool {
        let key = ServiceKey::new(namespace, name);
        self.warnings.remove(&key);
        replace(&mut self.services, key, None)
    }

    /// Adds or updates an EndpointSlice.
    pub fn apply_endpoint_slice(&mut self, slice: &EndpointSlice) -> bool {
        let (Some(namespace), Some(name)) = (&slice.metadata.namespace, &slice.metadata.name)
        else {
            return false;
        };
        let info = normalise_slice(namespace, slice, |ip| self.rejects_endpoint(ip));
        replace(&mut self.slices, (namespace.clone(), name.clone()), info)
    }

    /// Removes an EndpointSlice.
    pub fn delete_endpoint_slice(&mut self, namespace: &str, name: &str) -> bool {
        replace(
            &mut self.slices,
            (namespace.to_owned(), name.to_owned()),
            None,
        )
    }

    /// Adds or updates an Endpoints object (used only for Services without EndpointSlices).
    pub fn apply_endpoints(&mut self, endpoints: &Endpoints) -> bool {
        let Some(key) = object_key(&endpoints.metadata) else {
            return false;
        };
        let info = normalise_endpoints(&key, endpoints, |ip| self.rejects_endpoint(ip));
        replace(&mut self.endpoints, key, Some(info))
    }

    /// Removes an Endpoints object.
    pub fn delete_endpoints(&mut self, namespace: &str, name: &str) -> bool {
        replace(&mut self.endpoints, ServiceKey::new(namespace, name), None)
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
        replace(&mut self.nodes, name, Some(NodeInfo { labels, addresses }))
    }

    /// Removes a Node.
    pub fn delete_node(&mut self, name: &str) -> bool {
        replace(&mut self.nodes, name.to_owned(), None)
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

    /// Computes what this node must program.
    pub fn snapshot(&self) -> Snapshot {
        let own = self.nodes.get(&self.config.node_name);
        let empty = BTreeMap::new();
        let own_labels = own.map(|node| &node.labels).unwrap_or(&empty);
        let nodeport_addresses: Vec<IpAddr> = own
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
            .unwrap_or_default();

        let mut slices_by_service: HashMap<&ServiceKey, Vec<&SliceInfo>> = HashMap::new();
        for slice in self.slices.values() {
            slices_by_service
                .entry(&slice.service)
                .or_default()
                .push(slice);
        }

        let mut snapshot = Snapshot {
            nodeport_addresses,
            ..Snapshot::default()
        };
        for (key, service) in &self.services {
            let mut slices = slices_by_service.remove(key).unwrap_or_default();
            if slices.is_empty() && !service.has_selector {
                slices.extend(self.endpoints.get(key).into_iter().flatten());
            }
            let mut local_ready_ips = BTreeSet::new();
            for port in &service.ports {
                let endpoints = merge_endpoints(&slices, port);
                for (addr, info) in &endpoints {
                    if info.ready && !info.terminating && self.is_local(info) {
                        local_ready_ips.insert(addr.ip);
                    }
                }
                let model = self.port_model(key, service, port, &endpoints, own_labels);
                snapshot.ports.insert(model.key.clone(), model);
            }
            if let (TrafficPolicy::Local, Some(node_port)) =
                (service.external_policy, service.health_check_node_port)
            {
                snapshot.health_checks.insert(
                    key.clone(),
                    HealthCheckModel {
                        node_port,
                        local_ready_endpoints: local_ready_ips.len(),
                    },
                );
            }
        }
        snapshot
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
                    .as_ref()
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
            load_balancer_ips: service.load_balancer_ips.clone(),
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
                node: endpoint.node_name.clone(),
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
                        node: address.node_name.clone(),
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

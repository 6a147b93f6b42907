//! Service behaviour of kube-apiserver 1.33: defaulting, validation, and the allocation of
//! cluster IPs (one range per IP family, so dual-stack when two are configured) and node ports.
//! Everything here is pure over JSON values plus an [`Allocator`] value.
//!
//! The steps of [`admit`] follow kube-apiserver's order: on update `patchAllocatedValues`,
//! `NormalizeClusterIPs`, `dropTypeDependentFields` and `trimFieldsForDualStackDowngrade`
//! (pkg/registry/core/service/strategy.go), then `SetDefaults_Service`
//! (pkg/apis/core/v1/defaults.go), `ValidateService` / `ValidateServiceUpdate`
//! (pkg/apis/core/validation/validation.go), then `initIPFamilyFields` and the IP and node
//! port allocation (pkg/registry/core/service/storage/alloc.go). Field paths and messages are
//! upstream's, so kubectl prints what it prints against a real cluster. Writes of `/status`
//! go through [`admit_status`] instead (`ValidateServiceStatusUpdate`): a status is never
//! validated with the spec, and the spec never with the status.
//!
//! One addition: seed 002's `spec.topologyKeys` is accepted with the validation of the
//! 1.17–1.21 API (`ServiceTopology` gate on) and mirrored into the annotation
//! [`TOPOLOGY_KEYS_ANNOTATION`], the one input every kube-lb consumer reads (typed clients
//! built for 1.33 cannot see the removed field).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;

use ipnet::IpNet;
use serde_json::{Value, json};

use crate::meta;
use crate::status::Cause;

mod warnings;

pub use warnings::warnings;

/// Default service CIDR of kube-apiserver (`--service-cluster-ip-range`).
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";
/// [`DEFAULT_SERVICE_CIDR`] as a value.
pub fn default_service_cidr() -> IpNet {
    IpNet::V4(ipnet::Ipv4Net::new_assert(
        std::net::Ipv4Addr::new(10, 96, 0, 0),
        12,
    ))
}

/// Default node port range (`--service-node-port-range`).
pub const DEFAULT_NODE_PORT_RANGE: RangeInclusive<u16> = 30000..=32767;

/// The annotation kube-apiserver also validates as source ranges when the field is empty.
pub const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// kube-lb's carrier of seed 002 `topologyKeys` (comma-separated); the API server keeps it in
/// step with the field.
pub const TOPOLOGY_KEYS_ANNOTATION: &str = "service.kubernetes.io/topology-keys";

/// `core.MaxServiceTopologyKeys` of the 1.17–1.21 API.
pub const MAX_TOPOLOGY_KEYS: usize = 16;

const TOPOLOGY_MODE_ANNOTATION: &str = "service.kubernetes.io/topology-mode";
const TOPOLOGY_HINTS_ANNOTATION: &str = "service.kubernetes.io/topology-aware-hints";

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const AFFINITIES: &[&str] = &["ClientIP", "None"];
const TRAFFIC_POLICIES: &[&str] = &["Cluster", "Local"];
const FAMILIES: &[&str] = &["IPv4", "IPv6"];
const FAMILY_POLICIES: &[&str] = &["PreferDualStack", "RequireDualStack", "SingleStack"];
const TRAFFIC_DISTRIBUTIONS: &[&str] = &["PreferClose"];
const DEFAULT_AFFINITY_TIMEOUT: i64 = 10800;
/// `core.MaxClientIPServiceAffinitySeconds`.
const MAX_AFFINITY_TIMEOUT: i64 = 86400;

const PORT_RANGE_DETAIL: &str = "must be between 1 and 65535, inclusive";
const IANA_DETAIL: &str = "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)\
    , must contain at least one letter (a-z), must not contain consecutive hyphens (--), must not \
    begin or end with a hyphen (-) and must be no more than 15 characters";
const IP_DETAIL: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";

/// One service IP range and where the next search for a free address starts.
#[derive(Debug, Clone)]
struct IpRange {
    cidr: IpNet,
    cursor: u128,
}

/// Cluster IPs and node ports currently in use, the ranges they come from, and the one
/// admission rule that depends on how the server is run (loopback endpoints for `kube-lb up`).
#[derive(Debug, Clone)]
pub struct Allocator {
    /// The primary range first; at most one per IP family.
    ranges: Vec<IpRange>,
    ips: HashSet<IpAddr>,
    node_ports: RangeInclusive<u16>,
    ports: BTreeSet<u16>,
    port_cursor: u16,
    allow_loopback_endpoints: bool,
}

/// What one admission reserved, so a failed request can give it back.
#[derive(Debug, Default)]
struct Reserved {
    ips: Vec<IpAddr>,
    ports: Vec<u16>,
}

fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn u128_to_ip(value: u128, v4: bool) -> Option<IpAddr> {
    if v4 {
        u32::try_from(value)
            .ok()
            .map(|v| IpAddr::V4(std::net::Ipv4Addr::from(v)))
    } else {
        Some(IpAddr::V6(std::net::Ipv6Addr::from(value)))
    }
}

/// `IPv4` or `IPv6`.
fn family_of(ip: IpAddr) -> &'static str {
    match ip {
        IpAddr::V4(_) => "IPv4",
        IpAddr::V6(_) => "IPv6",
    }
}

fn net_family(net: IpNet) -> &'static str {
    family_of(net.network())
}

/// Usable host offsets inside a CIDR: the network address and (IPv4) broadcast are excluded, as
/// is the first host address, which kube-apiserver reserves for the `kubernetes` Service.
fn host_offsets(cidr: IpNet) -> RangeInclusive<u128> {
    let bits = u32::from(cidr.max_prefix_len() - cidr.prefix_len());
    let size: u128 = if bits >= 128 {
        u128::MAX
    } else {
        1u128 << bits
    };
    let last = match cidr {
        IpNet::V4(_) => size.saturating_sub(2),
        IpNet::V6(_) => size.saturating_sub(1),
    };
    2..=last.max(1)
}

impl Allocator {
    /// An empty single-stack allocator over a service CIDR and node port range.
    pub fn new(cidr: IpNet, node_ports: RangeInclusive<u16>) -> Self {
        let port_cursor = *node_ports.start();
        Self {
            ranges: vec![IpRange { cidr, cursor: 0 }],
            ips: HashSet::new(),
            node_ports,
            ports: BTreeSet::new(),
            port_cursor,
            allow_loopback_endpoints: false,
        }
    }

    /// Adds the range of the other IP family, making the server dual-stack (kube-apiserver's
    /// `--service-cluster-ip-range=<v4>,<v6>`). A second range of the primary's family is
    /// refused, as kube-apiserver refuses it at start.
    pub fn with_secondary_cidr(mut self, cidr: IpNet) -> Result<Self, String> {
        if self.ranges.len() > 1 || net_family(cidr) == self.ip_family() {
            return Err(format!(
                "secondary service CIDR {cidr} must be of the other IP family than {}",
                self.cidr()
            ));
        }
        self.ranges.push(IpRange { cidr, cursor: 0 });
        Ok(self)
    }

    /// Accepts loopback addresses (127.0.0.0/8, ::1) in Endpoints and EndpointSlices, which
    /// kube-apiserver refuses. Only for `kube-lb up`, whose demo backends listen on loopback.
    pub fn allow_loopback_endpoints(mut self, allow: bool) -> Self {
        self.allow_loopback_endpoints = allow;
        self
    }

    /// Whether [`Allocator::allow_loopback_endpoints`] is on.
    pub fn loopback_endpoints_allowed(&self) -> bool {
        self.allow_loopback_endpoints
    }

    /// The primary service CIDR.
    pub fn cidr(&self) -> IpNet {
        self.ranges
            .first()
            .map_or_else(default_service_cidr, |range| range.cidr)
    }

    /// Every service CIDR, the primary first.
    pub fn cidrs(&self) -> Vec<IpNet> {
        self.ranges.iter().map(|range| range.cidr).collect()
    }

    /// The node port range.
    pub fn node_port_range(&self) -> RangeInclusive<u16> {
        self.node_ports.clone()
    }

    /// `IPv4` or `IPv6`, the family of the primary service CIDR (the default family).
    pub fn ip_family(&self) -> &'static str {
        net_family(self.cidr())
    }

    /// Whether a range of each family is configured.
    pub fn is_dual_stack(&self) -> bool {
        self.ranges.len() > 1
    }

    fn has_family(&self, family: &str) -> bool {
        self.ranges.iter().any(|r| net_family(r.cidr) == family)
    }

    /// Whether `ip` is a cluster IP some Service holds.
    pub fn is_cluster_ip(&self, ip: IpAddr) -> bool {
        self.ips.contains(&ip)
    }

    /// Forgets every allocation (before rebuilding from stored Services).
    pub fn clear(&mut self) {
        self.ips.clear();
        self.ports.clear();
    }

    /// Number of allocated cluster IPs.
    pub fn allocated_ips(&self) -> usize {
        self.ips.len()
    }

    /// Number of allocated node ports.
    pub fn allocated_ports(&self) -> usize {
        self.ports.len()
    }

    fn range_of(&self, family: &str) -> Option<usize> {
        self.ranges
            .iter()
            .position(|r| net_family(r.cidr) == family)
    }

    fn reserve_ip(&mut self, ip: IpAddr) -> Result<(), String> {
        let Some(range) = self.range_of(family_of(ip)).map(|i| self.ranges[i].cidr) else {
            return Err(format!(
                "failed to allocate IP {ip}: {} is not configured on this cluster",
                family_of(ip)
            ));
        };
        if !range.contains(&ip) || ip == range.network() {
            return Err(format!(
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. \
                 The range of valid IPs is {range}"
            ));
        }
        if !self.ips.insert(ip) {
            return Err(format!(
                "failed to allocate IP {ip}: provided IP is already allocated"
            ));
        }
        Ok(())
    }

    fn allocate_ip(&mut self, family: &str) -> Result<IpAddr, String> {
        let Some(index) = self.range_of(family) else {
            return Err(format!("{family} is not configured on this cluster"));
        };
        let IpRange { cidr, cursor } = self.ranges[index].clone();
        let range = host_offsets(cidr);
        let span = range.end() - range.start() + 1;
        let base = ip_to_u128(cidr.network());
        let v4 = matches!(cidr, IpNet::V4(_));
        // Bounded search: a huge IPv6 range is never scanned to its end.
        let limit = span.min(1 << 24);
        for step in 0..limit {
            let offset = range.start() + (cursor + step) % span;
            if let Some(ip) = u128_to_ip(base + offset, v4)
                && !self.ips.contains(&ip)
            {
                self.ips.insert(ip);
                self.ranges[index].cursor = (cursor + step + 1) % span;
                return Ok(ip);
            }
        }
        Err(format!(
            "failed to allocate a serviceIP: range is full ({cidr})"
        ))
    }

    /// Gives a cluster IP back.
    pub fn release_ip(&mut self, ip: IpAddr) {
        self.ips.remove(&ip);
    }

    fn reserve_port(&mut self, port: u16) -> Result<(), String> {
        if !self.node_ports.contains(&port) {
            return Err(format!(
                "provided port is not in the valid range. The range of valid ports is {}-{}",
                self.node_ports.start(),
                self.node_ports.end()
            ));
        }
        if !self.ports.insert(port) {
            return Err("provided port is already allocated".to_string());
        }
        Ok(())
    }

    fn allocate_port(&mut self) -> Result<u16, String> {
        let start = *self.node_ports.start();
        let span = u32::from(*self.node_ports.end()) - u32::from(start) + 1;
        for step in 0..span {
            let offset = (u32::from(self.port_cursor - start) + step) % span;
            let Ok(port) = u16::try_from(u32::from(start) + offset) else {
                continue;
            };
            if !self.ports.contains(&port) {
                self.ports.insert(port);
                let next = (offset + 1) % span;
                self.port_cursor = u16::try_from(u32::from(start) + next).unwrap_or(start);
                return Ok(port);
            }
        }
        Err("range is full".to_string())
    }

    /// Gives a node port back.
    pub fn release_port(&mut self, port: u16) {
        self.ports.remove(&port);
    }

    fn undo(&mut self, reserved: Reserved) {
        for ip in reserved.ips {
            self.release_ip(ip);
        }
        for port in reserved.ports {
            self.release_port(port);
        }
    }

    /// Marks everything an existing (already admitted) Service holds as allocated; used when
    /// loading persisted state and seeding.
    pub fn restore(&mut self, service: &Value) {
        let held = Holdings::of(service);
        self.ips.extend(held.ips);
        self.ports.extend(held.ports);
    }

    /// Releases everything a Service holds (on delete).
    pub fn release(&mut self, service: &Value) {
        let held = Holdings::of(service);
        for ip in held.ips {
            self.release_ip(ip);
        }
        for port in held.ports {
            self.release_port(port);
        }
    }
}

/// The IPs and ports a Service object holds.
#[derive(Debug, Default, PartialEq, Eq)]
struct Holdings {
    ips: BTreeSet<IpAddr>,
    ports: BTreeSet<u16>,
}

impl Holdings {
    fn of(service: &Value) -> Self {
        let spec = &service["spec"];
        let mut held = Self::default();
        for ip in cluster_ips(spec) {
            if let Ok(ip) = ip.parse() {
                held.ips.insert(ip);
            }
        }
        for port in ports(spec) {
            if let Some(np) = port.get("nodePort").and_then(Value::as_u64)
                && let Ok(np) = u16::try_from(np)
                && np != 0
            {
                held.ports.insert(np);
            }
        }
        if let Some(hc) = spec.get("healthCheckNodePort").and_then(Value::as_u64)
            && let Ok(hc) = u16::try_from(hc)
            && hc != 0
        {
            held.ports.insert(hc);
        }
        held
    }
}

fn ports(spec: &Value) -> Vec<&Value> {
    spec.get("ports")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The strings of a list field (non-strings are the schema check's business).
fn str_list(value: &Value, field: &str) -> Vec<String> {
    value
        .get(field)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The allocated cluster IPs of a spec (not `None`).
fn cluster_ips(spec: &Value) -> Vec<String> {
    let mut out = str_list(spec, "clusterIPs");
    if let Some(ip) = str_field(spec, "clusterIP")
        && !out.iter().any(|o| o == ip)
    {
        out.insert(0, ip.to_string());
    }
    out.retain(|ip| ip != "None" && !ip.is_empty());
    out
}

fn str_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value
        .get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn is_set(value: &Value, field: &str) -> bool {
    value.get(field).is_some_and(|v| !v.is_null())
}

fn remove(value: &mut Value, field: &str) {
    if let Some(map) = value.as_object_mut() {
        map.remove(field);
    }
}

fn annotation<'a>(service: &'a Value, key: &str) -> Option<&'a str> {
    service
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn service_type(spec: &Value) -> &str {
    str_field(spec, "type").unwrap_or("ClusterIP")
}

/// `isHeadlessService`: `clusterIPs` is exactly `["None"]` (or, before normalisation, only
/// `clusterIP: None` was given).
fn is_headless(spec: &Value) -> bool {
    let list = str_list(spec, "clusterIPs");
    if list.is_empty() {
        str_field(spec, "clusterIP") == Some("None")
    } else {
        list.len() == 1 && list[0] == "None"
    }
}

/// `apiservice.ExternallyAccessible`.
fn externally_accessible(spec: &Value) -> bool {
    match service_type(spec) {
        "LoadBalancer" | "NodePort" => true,
        "ClusterIP" => !str_list(spec, "externalIPs").is_empty(),
        _ => false,
    }
}

/// `needsNodePort`: the type has node ports (whether or not new ones are allocated).
fn needs_node_port(spec: &Value) -> bool {
    matches!(service_type(spec), "NodePort" | "LoadBalancer")
}

/// `shouldAllocateNodePorts`.
fn allocates_node_ports(spec: &Value) -> bool {
    match service_type(spec) {
        "NodePort" => true,
        "LoadBalancer" => spec
            .get("allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

/// `apiservice.NeedsHealthCheck`.
fn needs_health_check(spec: &Value) -> bool {
    service_type(spec) == "LoadBalancer"
        && str_field(spec, "externalTrafficPolicy") == Some("Local")
}

fn port_number(value: Option<&Value>) -> Option<i64> {
    value.and_then(Value::as_i64)
}

fn node_port_of(port: &Value) -> Option<i64> {
    port_number(port.get("nodePort")).filter(|n| *n != 0)
}

/// Applies kube-apiserver's defaults (`SetDefaults_Service`) to a Service object in place. IP
/// families and the family policy are not defaults but part of allocation (see [`admit`]).
pub fn apply_defaults(service: &mut Value) {
    if !service["spec"].is_object() {
        service["spec"] = json!({});
    }
    let spec = &mut service["spec"];
    if str_field(spec, "sessionAffinity").is_none() {
        spec["sessionAffinity"] = json!("None");
    }
    match str_field(spec, "sessionAffinity") {
        Some("None") => remove(spec, "sessionAffinityConfig"),
        Some("ClientIP")
            if spec
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .is_none_or(Value::is_null) =>
        {
            spec["sessionAffinityConfig"] =
                json!({"clientIP": {"timeoutSeconds": DEFAULT_AFFINITY_TIMEOUT}});
        }
        _ => {}
    }
    if str_field(spec, "type").is_none() {
        spec["type"] = json!("ClusterIP");
    }
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for port in ports.iter_mut().filter(|p| p.is_object()) {
            if str_field(port, "protocol").is_none() {
                port["protocol"] = json!("TCP");
            }
            let missing_target = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => s.is_empty(),
                Some(Value::Number(n)) => n.as_u64() == Some(0),
                Some(_) => false,
            };
            if missing_target && let Some(p) = port.get("port").cloned() {
                port["targetPort"] = p;
            }
        }
    }
    if externally_accessible(spec) && str_field(spec, "externalTrafficPolicy").is_none() {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    if matches!(
        service_type(spec),
        "ClusterIP" | "NodePort" | "LoadBalancer"
    ) && !is_set(spec, "internalTrafficPolicy")
    {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    if service_type(spec) == "LoadBalancer" && !is_set(spec, "allocateLoadBalancerNodePorts") {
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
    default_ingress_ip_modes(service);
}

/// `SetDefaults_LoadBalancerIngress` (LoadBalancerIPMode, GA): an ingress IP without ipMode
/// is VIP.
fn default_ingress_ip_modes(service: &mut Value) {
    if let Some(Value::Array(ingress)) = service.pointer_mut("/status/loadBalancer/ingress") {
        for entry in ingress.iter_mut().filter(|e| e.is_object()) {
            if str_field(entry, "ip").is_some_and(|ip| !ip.is_empty()) && !is_set(entry, "ipMode") {
                entry["ipMode"] = json!("VIP");
            }
        }
    }
}

/// Whether Go's `netutils.ParseIPSloppy` reads `value` as an IP: what Rust parses, plus
/// dotted-quad IPv4 with leading zeros in its octets.
fn is_ip_sloppy(value: &str) -> bool {
    if value.parse::<IpAddr>().is_ok() {
        return true;
    }
    let octets: Vec<&str> = value.split('.').collect();
    octets.len() == 4
        && octets.iter().all(|o| {
            !o.is_empty()
                && o.len() <= 3
                && o.bytes().all(|b| b.is_ascii_digit())
                && o.parse::<u16>().is_ok_and(|n| n <= 255)
        })
}

/// Whether the load-balancer status of a Service that is not `type: LoadBalancer` may hold
/// ingress points: kube-apiserver's feature gate `AllowServiceLBStatusOnNonLB`, off and locked
/// off since 1.32 (pkg/features/kube_features.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbStatusOnNonLb {
    /// What every client write of `/status` gets, as from kube-apiserver 1.33.
    Forbidden,
    /// The gate's old behaviour (its default before 1.29), under which such objects were
    /// written and may still sit in storage; only for state loaded as given, never for a
    /// request.
    Allowed,
}

/// `ValidateLoadBalancerStatus` (pkg/apis/core/validation/validation.go), entry by entry in
/// upstream's order: `ip` (`IsValidIPForLegacyField`), `ipMode` (only `VIP` or `Proxy`, only
/// beside an IP), `hostname` (a DNS-1123 subdomain, not an IP). Ingress points on a Service
/// that is not a LoadBalancer are one Forbidden cause on the list, and then nothing else is
/// checked, as upstream does.
fn validate_load_balancer_status(causes: &mut Vec<Cause>, service: &Value, gate: LbStatusOnNonLb) {
    let Some(Value::Array(ingress)) = service.pointer("/status/loadBalancer/ingress") else {
        return;
    };
    if gate == LbStatusOnNonLb::Forbidden
        && service_type(&service["spec"]) != "LoadBalancer"
        && !ingress.is_empty()
    {
        causes.push(Cause::forbidden(
            "status.loadBalancer.ingress",
            "may only be used when `spec.type` is 'LoadBalancer'",
        ));
        return;
    }
    for (i, entry) in ingress.iter().enumerate() {
        let at = |field: &str| format!("status.loadBalancer.ingress[{i}].{field}");
        let ip = str_field(entry, "ip").filter(|ip| !ip.is_empty());
        if let Some(ip) = ip
            && !is_ip_sloppy(ip)
        {
            causes.push(Cause::invalid(at("ip"), ip, IP_DETAIL));
        }
        match (str_field(entry, "ipMode"), ip) {
            (None, Some(_)) => {
                causes.push(required(at("ipMode"), "must be specified when `ip` is set"))
            }
            (Some(_), None) => causes.push(Cause::forbidden(
                at("ipMode"),
                "may not be specified when `ip` is not set",
            )),
            (Some(mode), Some(_)) => check_enum(causes, at("ipMode"), mode, &["Proxy", "VIP"]),
            (None, None) => {}
        }
        if let Some(hostname) = str_field(entry, "hostname").filter(|h| !h.is_empty()) {
            for problem in meta::dns1123_subdomain_problems(hostname) {
                causes.push(Cause::invalid(at("hostname"), hostname, &problem));
            }
            if is_ip_sloppy(hostname) {
                causes.push(Cause::invalid(
                    at("hostname"),
                    hostname,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
}

/// Whether `name` is a valid IANA service name (`IsValidPortName`: named target ports and
/// container ports; not Service port names, which are DNS-1123 labels).
pub fn is_iana_svc_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
}

fn check_enum(causes: &mut Vec<Cause>, field: String, value: &str, allowed: &[&str]) {
    if !allowed.contains(&value) {
        causes.push(Cause::not_supported(field, value, allowed));
    }
}

fn required(field: impl Into<String>, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        message: if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        },
        field: field.into(),
    }
}

/// `field.TooMany`.
pub(crate) fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany",
        message: format!("Too many: {actual}: must have at most {max} items"),
        field: field.into(),
    }
}

/// Validates a defaulted Service (`ValidateService`); every problem is returned, not just the
/// first.
pub fn validate(service: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let (Some(mode), Some(hints)) = (
        annotation(service, TOPOLOGY_MODE_ANNOTATION),
        annotation(service, TOPOLOGY_HINTS_ANNOTATION),
    ) && mode != hints
    {
        causes.push(Cause::invalid(
            format!("metadata.annotations[{TOPOLOGY_MODE_ANNOTATION}]"),
            mode,
            &format!("must match annotations[{TOPOLOGY_HINTS_ANNOTATION}] when both are specified"),
        ));
    }
    let spec = &service["spec"];
    let ty = service_type(spec);
    let headless = is_headless(spec);
    let port_list = ports(spec);
    if port_list.is_empty() && !headless && ty != "ExternalName" {
        causes.push(Cause::required("spec.ports"));
    }
    let cluster_ip_list = str_list(spec, "clusterIPs");
    match ty {
        "LoadBalancer" | "NodePort" if headless => causes.push(Cause::invalid(
            "spec.clusterIPs[0]",
            "None",
            &format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !cluster_ip_list.is_empty() {
                causes.push(Cause::forbidden(
                    "spec.clusterIPs",
                    "may not be set for ExternalName services",
                ));
            }
            if !str_list(spec, "ipFamilies").is_empty() {
                causes.push(Cause::forbidden(
                    "spec.ipFamilies",
                    "may not be set for ExternalName services",
                ));
            }
            if is_set(spec, "ipFamilyPolicy") {
                causes.push(Cause::forbidden(
                    "spec.ipFamilyPolicy",
                    "may not be set for ExternalName services",
                ));
            }
            // A CNAME may end in a dot to mark it fully qualified.
            let cname = str_field(spec, "externalName")
                .unwrap_or_default()
                .trim_end_matches('.');
            if cname.is_empty() {
                causes.push(Cause::required("spec.externalName"));
            } else {
                for problem in meta::dns1123_subdomain_problems(cname) {
                    causes.push(Cause::invalid("spec.externalName", cname, &problem));
                }
            }
        }
        _ => {}
    }
    let mut names = BTreeSet::new();
    for (i, port) in port_list.iter().enumerate() {
        validate_port(&mut causes, port, port_list.len() > 1, &mut names, i);
    }
    causes.extend(crate::validation::validate_labels(
        "spec.selector",
        spec.get("selector"),
    ));
    match str_field(spec, "sessionAffinity") {
        None => causes.push(Cause::required("spec.sessionAffinity")),
        Some(affinity) => check_enum(
            &mut causes,
            "spec.sessionAffinity".into(),
            affinity,
            AFFINITIES,
        ),
    }
    match str_field(spec, "sessionAffinity") {
        Some("ClientIP") => validate_client_ip_affinity(&mut causes, spec),
        Some("None") if is_set(spec, "sessionAffinityConfig") => {
            causes.push(Cause::forbidden(
                "spec.sessionAffinityConfig",
                "must not be set when session affinity is None",
            ));
        }
        _ => {}
    }
    validate_cluster_ip_fields(&mut causes, spec);
    for (i, ip) in str_list(spec, "externalIPs").iter().enumerate() {
        let field = format!("spec.externalIPs[{i}]");
        match ip.parse::<IpAddr>() {
            Ok(addr) => causes.extend(crate::validation::non_special_ip(&field, ip, addr)),
            Err(_) => causes.push(Cause::invalid(field, ip, IP_DETAIL)),
        }
    }
    match str_field(spec, "type") {
        None => causes.push(Cause::required("spec.type")),
        Some(t) => check_enum(&mut causes, "spec.type".into(), t, TYPES),
    }
    if ty == "ClusterIP" {
        for (i, port) in port_list.iter().enumerate() {
            if node_port_of(port).is_some() {
                causes.push(Cause::forbidden(
                    format!("spec.ports[{i}].nodePort"),
                    "may not be used when `type` is 'ClusterIP'",
                ));
            }
        }
    }
    // The same node port twice is refused per protocol: TCP and UDP of one port may share it.
    let mut node_ports = BTreeSet::new();
    let mut port_keys = BTreeMap::new();
    for (i, port) in port_list.iter().enumerate() {
        let protocol = str_field(port, "protocol").unwrap_or_default();
        if let Some(np) = node_port_of(port)
            && !node_ports.insert((protocol, np))
        {
            causes.push(Cause::duplicate(
                format!("spec.ports[{i}].nodePort"),
                &np.to_string(),
            ));
        }
        let number = port_number(port.get("port")).unwrap_or_default();
        if let Some(first) = port_keys.insert((protocol, number), i) {
            causes.push(Cause::duplicate(
                format!("spec.ports[{i}]"),
                &format!("{{Port:{number}, Protocol:{protocol}}} (also spec.ports[{first}])"),
            ));
        }
    }
    validate_source_ranges(&mut causes, service, ty);
    if ty != "LoadBalancer" && is_set(spec, "allocateLoadBalancerNodePorts") {
        causes.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    validate_load_balancer_class(&mut causes, None, spec);
    validate_external_traffic_policy(&mut causes, spec);
    match spec.get("internalTrafficPolicy").and_then(Value::as_str) {
        None if matches!(ty, "ClusterIP" | "NodePort" | "LoadBalancer") => {
            causes.push(Cause::required("spec.internalTrafficPolicy"));
        }
        None => {}
        Some(policy) => check_enum(
            &mut causes,
            "spec.internalTrafficPolicy".into(),
            policy,
            TRAFFIC_POLICIES,
        ),
    }
    if let Some(distribution) = spec.get("trafficDistribution").and_then(Value::as_str) {
        check_enum(
            &mut causes,
            "spec.trafficDistribution".into(),
            distribution,
            TRAFFIC_DISTRIBUTIONS,
        );
    }
    validate_topology_keys(&mut causes, spec);
    causes
}

/// `validateServicePort`.
fn validate_port(
    causes: &mut Vec<Cause>,
    port: &Value,
    require_name: bool,
    names: &mut BTreeSet<String>,
    i: usize,
) {
    let field = format!("spec.ports[{i}]");
    match str_field(port, "name") {
        None if require_name => causes.push(Cause::required(format!("{field}.name"))),
        None => {}
        Some(name) => {
            for problem in meta::dns1123_label_problems(name) {
                causes.push(Cause::invalid(format!("{field}.name"), name, &problem));
            }
            if !names.insert(name.to_string()) {
                causes.push(Cause::duplicate(format!("{field}.name"), name));
            }
        }
    }
    let number = port_number(port.get("port")).unwrap_or_default();
    if !(1..=65535).contains(&number) {
        causes.push(Cause::invalid_literal(
            format!("{field}.port"),
            &number.to_string(),
            PORT_RANGE_DETAIL,
        ));
    }
    match str_field(port, "protocol") {
        None => causes.push(Cause::required(format!("{field}.protocol"))),
        Some(protocol) => check_enum(causes, format!("{field}.protocol"), protocol, PROTOCOLS),
    }
    match port.get("targetPort") {
        Some(Value::String(name)) if !is_iana_svc_name(name) => causes.push(Cause::invalid(
            format!("{field}.targetPort"),
            name,
            IANA_DETAIL,
        )),
        Some(Value::Number(n)) if !n.as_i64().is_some_and(|t| (1..=65535).contains(&t)) => {
            causes.push(Cause::invalid_literal(
                format!("{field}.targetPort"),
                &n.to_string(),
                PORT_RANGE_DETAIL,
            ));
        }
        _ => {}
    }
    if let Some(app) = port.get("appProtocol").and_then(Value::as_str)
        && !meta::is_qualified_name(app)
    {
        causes.push(Cause::invalid(
            format!("{field}.appProtocol"),
            app,
            meta::QUALIFIED_NAME_DETAIL,
        ));
    }
}

/// `validateClientIPAffinityConfig` and `validateAffinityTimeout`.
fn validate_client_ip_affinity(causes: &mut Vec<Cause>, spec: &Value) {
    let detail = "when session affinity type is ClientIP";
    let Some(config) = spec.get("sessionAffinityConfig").filter(|v| !v.is_null()) else {
        causes.push(required("spec.sessionAffinityConfig", detail));
        return;
    };
    let Some(client_ip) = config.get("clientIP").filter(|v| !v.is_null()) else {
        causes.push(required("spec.sessionAffinityConfig.clientIP", detail));
        return;
    };
    let field = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
    match client_ip.get("timeoutSeconds").and_then(Value::as_i64) {
        None => causes.push(required(field, detail)),
        Some(t) if t <= 0 || t > MAX_AFFINITY_TIMEOUT => causes.push(Cause::invalid_literal(
            field,
            &t.to_string(),
            &format!("must be greater than 0 and less than {MAX_AFFINITY_TIMEOUT}"),
        )),
        Some(_) => {}
    }
}

/// `ValidateServiceClusterIPsRelatedFields`.
fn validate_cluster_ip_fields(causes: &mut Vec<Cause>, spec: &Value) {
    if service_type(spec) == "ExternalName" {
        return;
    }
    let ips = str_list(spec, "clusterIPs");
    match str_field(spec, "clusterIP") {
        Some(ip) => {
            if ips.is_empty() {
                causes.push(Cause::required("spec.clusterIPs"));
            } else if ips[0] != ip {
                causes.push(Cause::invalid_literal(
                    "spec.clusterIPs",
                    &meta::go_strings(&ips),
                    "first value must match `clusterIP`",
                ));
            }
        }
        None if !ips.is_empty() => causes.push(Cause::invalid_literal(
            "spec.clusterIPs",
            &meta::go_strings(&ips),
            "must be empty when `clusterIP` is not specified",
        )),
        None => {}
    }
    let families = str_list(spec, "ipFamilies");
    let mut seen = BTreeSet::new();
    for (i, family) in families.iter().enumerate() {
        check_enum(causes, format!("spec.ipFamilies[{i}]"), family, FAMILIES);
        if !seen.insert(family) {
            causes.push(Cause::duplicate(format!("spec.ipFamilies[{i}]"), family));
        }
    }
    if let Some(policy) = spec.get("ipFamilyPolicy").and_then(Value::as_str) {
        check_enum(
            causes,
            "spec.ipFamilyPolicy".into(),
            policy,
            FAMILY_POLICIES,
        );
    }
    let mut invalid = false;
    let mut parsed = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                invalid = true;
                causes.push(Cause::invalid_literal(
                    "spec.clusterIPs",
                    &meta::go_strings(&ips),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        match ip.parse::<IpAddr>() {
            Ok(addr) => parsed.push(addr),
            Err(_) => {
                invalid = true;
                causes.push(Cause::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    ip,
                    IP_DETAIL,
                ));
            }
        }
    }
    if ips.len() > 2 {
        causes.push(Cause::invalid_literal(
            "spec.clusterIPs",
            &meta::go_strings(&ips),
            "may only hold up to 2 values",
        ));
    }
    // Bad addresses would skew the dual-stack messages below.
    if invalid {
        return;
    }
    if parsed.len() == 2 && family_of(parsed[0]) == family_of(parsed[1]) {
        causes.push(Cause::invalid_literal(
            "spec.clusterIPs",
            &meta::go_strings(&ips),
            "may specify no more than one IP for each IP family",
        ));
    }
    if !is_headless(spec) {
        for (i, (ip, family)) in parsed.iter().zip(&families).enumerate() {
            if family_of(*ip) != family && FAMILIES.contains(&family.as_str()) {
                causes.push(Cause::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    &ip.to_string(),
                    &format!("expected an {family} value as indicated by `ipFamilies[{i}]`"),
                ));
            }
        }
    }
}

/// The source-range part of `ValidateService`: the field, or the annotation when the field is
/// empty. The field path's capital `L` is kube-apiserver's own.
fn validate_source_ranges(causes: &mut Vec<Cause>, service: &Value, ty: &str) {
    let spec = &service["spec"];
    let ranges = str_list(spec, "loadBalancerSourceRanges");
    if !ranges.is_empty() {
        let field = "spec.LoadBalancerSourceRanges";
        if ty != "LoadBalancer" {
            causes.push(Cause::forbidden(
                field,
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        for (i, range) in ranges.iter().enumerate() {
            // Space padding is a historical allowance from the annotation days.
            let range = range.trim();
            if range.parse::<IpNet>().is_err() {
                causes.push(Cause::invalid(
                    format!("{field}[{i}]"),
                    range,
                    meta::CIDR_DETAIL,
                ));
            }
        }
    } else if let Some(value) = annotation(service, SOURCE_RANGES_ANNOTATION) {
        let field = format!("metadata.annotations[{SOURCE_RANGES_ANNOTATION}]");
        if ty != "LoadBalancer" {
            causes.push(Cause::forbidden(
                field.clone(),
                "may only be used when `type` is 'LoadBalancer'",
            ));
        }
        let value = value.trim();
        if !value.is_empty() {
            for range in value.split(',').map(str::trim) {
                if range.parse::<IpNet>().is_err() {
                    causes.push(Cause::invalid(field.clone(), range, meta::CIDR_DETAIL));
                }
            }
        }
    }
}

/// `validateLoadBalancerClassField`: only on LoadBalancer Services, a qualified name, and
/// immutable while the Service stays a LoadBalancer.
fn validate_load_balancer_class(causes: &mut Vec<Cause>, old: Option<&Value>, spec: &Value) {
    let class = spec.get("loadBalancerClass").and_then(Value::as_str);
    let is_lb = service_type(spec) == "LoadBalancer";
    if let Some(old) = old
        && service_type(old) == "LoadBalancer"
        && is_lb
        && old.get("loadBalancerClass").and_then(Value::as_str) != class
    {
        causes.push(Cause::invalid(
            "spec.loadBalancerClass",
            class.unwrap_or("null"),
            "may not change once set",
        ));
    }
    match class {
        Some(class) if is_lb && !meta::is_qualified_name(class) => causes.push(Cause::invalid(
            "spec.loadBalancerClass",
            class,
            meta::QUALIFIED_NAME_DETAIL,
        )),
        Some(_) if !is_lb => causes.push(Cause::forbidden(
            "spec.loadBalancerClass",
            "may only be used when `type` is 'LoadBalancer'",
        )),
        _ => {}
    }
}

/// `validateServiceExternalTrafficPolicy`.
fn validate_external_traffic_policy(causes: &mut Vec<Cause>, spec: &Value) {
    let policy = str_field(spec, "externalTrafficPolicy");
    if externally_accessible(spec) {
        match policy {
            None => causes.push(Cause::required("spec.externalTrafficPolicy")),
            Some(p) => check_enum(
                causes,
                "spec.externalTrafficPolicy".into(),
                p,
                TRAFFIC_POLICIES,
            ),
        }
    } else if let Some(p) = policy {
        causes.push(Cause::invalid(
            "spec.externalTrafficPolicy",
            p,
            "may only be set for externally-accessible services",
        ));
    }
    let hc = port_number(spec.get("healthCheckNodePort")).unwrap_or_default();
    if needs_health_check(spec) {
        // 0 means "allocate one"; allocation runs after validation here, so only a value
        // outside the port range is an error at this point.
        if hc != 0 && !(1..=65535).contains(&hc) {
            causes.push(Cause::invalid_literal(
                "spec.healthCheckNodePort",
                &hc.to_string(),
                PORT_RANGE_DETAIL,
            ));
        }
    } else if hc != 0 {
        causes.push(Cause::invalid_literal(
            "spec.healthCheckNodePort",
            &hc.to_string(),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
}

/// `spec.topologyKeys` as the 1.17–1.21 `ValidateService` checked it (ServiceTopology on):
/// not with `externalTrafficPolicy: Local`, at most 16, no duplicates, `*` only last, every
/// other key a qualified name.
fn validate_topology_keys(causes: &mut Vec<Cause>, spec: &Value) {
    let keys = str_list(spec, "topologyKeys");
    if keys.is_empty() {
        return;
    }
    let field = "spec.topologyKeys";
    if str_field(spec, "externalTrafficPolicy") == Some("Local") {
        causes.push(Cause::forbidden(
            field,
            "may not be specified when `externalTrafficPolicy=Local`",
        ));
    }
    if keys.len() > MAX_TOPOLOGY_KEYS {
        causes.push(too_many(field, keys.len(), MAX_TOPOLOGY_KEYS));
    }
    let mut seen = BTreeSet::new();
    for (i, key) in keys.iter().enumerate() {
        let key_field = format!("{field}[{i}]");
        if !seen.insert(key) {
            causes.push(Cause::duplicate(key_field.clone(), key));
        }
        if key == "*" {
            if i + 1 != keys.len() {
                causes.push(Cause::invalid(
                    key_field,
                    key,
                    "\"*\" must be the last value specified",
                ));
            }
        } else if !meta::is_qualified_name(key) {
            causes.push(Cause::invalid(key_field, key, meta::QUALIFIED_NAME_DETAIL));
        }
    }
}

/// `ValidateServiceUpdate`'s own checks (it also runs [`validate`]).
fn validate_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (old_spec, spec) = (&old["spec"], &new["spec"]);
    validate_upgrade_downgrade_cluster_ips(&mut causes, old_spec, spec);
    validate_upgrade_downgrade_families(&mut causes, old_spec, spec);
    validate_load_balancer_class(&mut causes, Some(old_spec), spec);
    if needs_health_check(old_spec)
        && needs_health_check(spec)
        && port_number(old_spec.get("healthCheckNodePort"))
            != port_number(spec.get("healthCheckNodePort"))
    {
        causes.push(Cause::forbidden(
            "spec.healthCheckNodePort",
            "field is immutable",
        ));
    }
    causes
}

fn policy_is_single_stack(spec: &Value) -> bool {
    spec.get("ipFamilyPolicy").and_then(Value::as_str) == Some("SingleStack")
}

/// `validateUpgradeDowngradeClusterIPs`: the primary cluster IP never changes; a secondary may
/// be added, or released together with `ipFamilyPolicy: SingleStack`.
fn validate_upgrade_downgrade_cluster_ips(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    if service_type(new) == "ExternalName" || service_type(old) == "ExternalName" {
        return;
    }
    if is_headless(old) && is_headless(new) {
        return;
    }
    let (before, after) = (str_list(old, "clusterIPs"), str_list(new, "clusterIPs"));
    let shown = meta::go_strings(&after);
    let changed = |i: usize| {
        Cause::invalid_literal(
            format!("spec.clusterIPs[{i}]"),
            &shown,
            "may not change once set",
        )
    };
    match before.len().cmp(&after.len()) {
        std::cmp::Ordering::Equal => {
            for (i, ip) in before.iter().enumerate() {
                if *ip != after[i] {
                    causes.push(changed(i));
                }
            }
        }
        std::cmp::Ordering::Greater => {
            if after.is_empty() {
                causes.push(Cause::invalid_literal(
                    "spec.clusterIPs[0]",
                    &shown,
                    "primary clusterIP can not be unset",
                ));
            } else if before[0] != after[0] {
                causes.push(changed(0));
            }
            if after.len() == 1 && !policy_is_single_stack(new) {
                causes.push(Cause::invalid(
                    "spec.ipFamilyPolicy",
                    new.get("ipFamilyPolicy")
                        .and_then(Value::as_str)
                        .unwrap_or("null"),
                    "must be set to 'SingleStack' when releasing the secondary clusterIP",
                ));
            }
        }
        std::cmp::Ordering::Less => {
            if !before.is_empty() && before[0] != after[0] {
                causes.push(changed(0));
            }
        }
    }
}

/// `validateUpgradeDowngradeIPFamilies`: the same rule for `ipFamilies`; headless Services may
/// change families.
fn validate_upgrade_downgrade_families(causes: &mut Vec<Cause>, old: &Value, new: &Value) {
    if service_type(new) == "ExternalName" || service_type(old) == "ExternalName" {
        return;
    }
    if is_headless(old) || is_headless(new) {
        return;
    }
    let (before, after) = (str_list(old, "ipFamilies"), str_list(new, "ipFamilies"));
    // The internal type's name, as Go's `%#v` prints it.
    let shown = meta::go_strings(&after).replacen("[]string", "[]core.IPFamily", 1);
    match before.len().cmp(&after.len()) {
        std::cmp::Ordering::Equal => {
            if before != after {
                causes.push(Cause::invalid_literal(
                    "spec.ipFamilies[0]",
                    &shown,
                    "may not change once set",
                ));
            }
        }
        // An update that leaves the families out has them inferred again from the cluster
        // IPs it keeps (`initIPFamilyFields`), so only a changed primary is an error.
        std::cmp::Ordering::Greater => {
            if !after.is_empty() && after[0] != before[0] {
                causes.push(Cause::invalid_literal(
                    "spec.ipFamilies[0]",
                    &shown,
                    "may not change once set",
                ));
            }
            if after.len() == 1 && !policy_is_single_stack(new) {
                causes.push(Cause::invalid(
                    "spec.ipFamilyPolicy",
                    new.get("ipFamilyPolicy")
                        .and_then(Value::as_str)
                        .unwrap_or("null"),
                    "must be set to 'SingleStack' when releasing the secondary ipFamily",
                ));
            }
        }
        std::cmp::Ordering::Less => {
            if !before.is_empty() && before[0] != after[0] {
                causes.push(Cause::invalid_literal(
                    "spec.ipFamilies[0]",
                    &shown,
                    "may not change once set",
                ));
            }
        }
    }
}

/// `patchAllocatedValues`: an update that leaves out what was allocated (a PUT of the original
/// manifest) keeps it. Node ports are matched by port name, as upstream does.
fn patch_allocated_values(old: &Value, new: &mut Value) {
    let old_spec = &old["spec"];
    let spec = &mut new["spec"];
    if service_type(old_spec) != "ExternalName" && service_type(spec) != "ExternalName" {
        if str_field(spec, "clusterIP").is_none()
            && let Some(ip) = str_field(old_spec, "clusterIP")
        {
            spec["clusterIP"] = json!(ip);
        }
        if str_list(spec, "clusterIPs").is_empty() && !str_list(old_spec, "clusterIPs").is_empty() {
            spec["clusterIPs"] = old_spec["clusterIPs"].clone();
        }
    }
    if needs_node_port(old_spec) && needs_node_port(spec) {
        let in_use = |s: &Value| -> BTreeSet<i64> {
            ports(s).iter().filter_map(|p| node_port_of(p)).collect()
        };
        let used: BTreeSet<i64> = in_use(old_spec)
            .intersection(&in_use(spec))
            .copied()
            .collect();
        let by_name: BTreeMap<String, i64> = ports(old_spec)
            .iter()
            .filter_map(|p| {
                node_port_of(p).map(|np| (str_field(p, "name").unwrap_or_default().to_string(), np))
            })
            .collect();
        if let Some(Value::Array(list)) = spec.get_mut("ports") {
            for port in list.iter_mut().filter(|p| p.is_object()) {
                if node_port_of(port).is_none()
                    && let Some(np) = by_name.get(str_field(port, "name").unwrap_or_default())
                    && !used.contains(np)
                {
                    port["nodePort"] = json!(np);
                }
            }
        }
    }
    if needs_health_check(old_spec)
        && needs_health_check(spec)
        && port_number(spec.get("healthCheckNodePort")).unwrap_or_default() == 0
        && let Some(hc) = port_number(old_spec.get("healthCheckNodePort"))
    {
        spec["healthCheckNodePort"] = json!(hc);
    }
}

/// `NormalizeClusterIPs`: keeps `clusterIP` and `clusterIPs` in step for clients that set only
/// one of them.
fn normalize_cluster_ips(old: Option<&Value>, new: &mut Value) {
    let spec = &mut new["spec"];
    let ip = str_field(spec, "clusterIP").map(str::to_string);
    let ips = str_list(spec, "clusterIPs");
    let Some(old) = old else {
        if let Some(ip) = ip
            && ips.is_empty()
        {
            spec["clusterIPs"] = json!([ip]);
        }
        return;
    };
    let old_spec = &old["spec"];
    let old_ips = str_list(old_spec, "clusterIPs");
    let old_ip = str_field(old_spec, "clusterIP").map(str::to_string);
    if !old_ips.is_empty() && ips.is_empty() && old_ip == ip {
        spec["clusterIPs"] = json!(old_ips);
    }
    if old_ip != ip {
        let same_list = str_list(spec, "clusterIPs") == old_ips;
        match ip {
            None if old_ip.is_some() && same_list => remove(spec, "clusterIPs"),
            Some(ip) if same_list => spec["clusterIPs"] = json!([ip]),
            _ => {}
        }
    }
}

/// `dropTypeDependentFields`: when the type no longer uses a field that was only carried along
/// (unchanged from the old object), it is dropped, so its allocation is released.
fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    let old_spec = old["spec"].clone();
    let spec = &mut new["spec"];
    let same = |spec: &Value, field: &str| spec.get(field) == old_spec.get(field);
    if service_type(&old_spec) != "ExternalName" && service_type(spec) == "ExternalName" {
        if same(spec, "clusterIPs") || same(spec, "clusterIP") {
            remove(spec, "clusterIP");
            remove(spec, "clusterIPs");
        }
        if same(spec, "ipFamilies") {
            remove(spec, "ipFamilies");
        }
        if same(spec, "ipFamilyPolicy") {
            remove(spec, "ipFamilyPolicy");
        }
    }
    let node_ports =
        |s: &Value| -> Vec<Option<i64>> { ports(s).iter().map(|p| node_port_of(p)).collect() };
    if needs_node_port(&old_spec)
        && !needs_node_port(spec)
        && node_ports(spec) == node_ports(&old_spec)
        && let Some(Value::Array(list)) = spec.get_mut("ports")
    {
        for port in list.iter_mut() {
            remove(port, "nodePort");
        }
    }
    let was_lb = service_type(&old_spec) == "LoadBalancer";
    let is_lb = service_type(spec) == "LoadBalancer";
    if was_lb && !is_lb {
        for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(spec, field) {
                remove(spec, field);
            }
        }
    }
    if needs_health_check(&old_spec)
        && !needs_health_check(spec)
        && same(spec, "healthCheckNodePort")
    {
        remove(spec, "healthCheckNodePort");
    }
    if externally_accessible(&old_spec)
        && !externally_accessible(spec)
        && same(spec, "externalTrafficPolicy")
    {
        remove(spec, "externalTrafficPolicy");
    }
    // "Clear the load-balancer status if it is no longer appropriate": every update of the
    // main resource of a Service that is not (or no longer) a LoadBalancer, whatever the old
    // type (dropTypeDependentFields, pkg/registry/core/service/strategy.go). Writes of
    // /status never come here (the status strategy's PrepareForUpdate only copies the spec).
    if !is_lb {
        new["status"]["loadBalancer"] = json!({});
    }
}

/// `trimFieldsForDualStackDowngrade`: `ipFamilyPolicy: SingleStack` on a dual-stack Service
/// drops the secondary cluster IP and family it kept unchanged.
fn trim_for_dual_stack_downgrade(old: &Value, new: &mut Value) {
    let old_spec = &old["spec"];
    if str_list(old_spec, "ipFamilies").len() < 2 && cluster_ips(old_spec).len() < 2 {
        return;
    }
    let spec = &mut new["spec"];
    if !policy_is_single_stack(spec) {
        return;
    }
    for field in ["clusterIPs", "ipFamilies"] {
        let list = str_list(spec, field);
        if list.len() > 1 && list == str_list(old_spec, field) {
            spec[field] = json!([list[0]]);
        }
    }
}

/// Keeps the annotation [`TOPOLOGY_KEYS_ANNOTATION`] in step with `spec.topologyKeys`: set from
/// the field when absent, re-derived when it was the mirror of the old field and the client did
/// not touch it, and refused when a client sets both to different lists.
fn mirror_topology_keys(old: Option<&Value>, new: &mut Value) -> Vec<Cause> {
    let keys = str_list(&new["spec"], "topologyKeys");
    let current = annotation(new, TOPOLOGY_KEYS_ANNOTATION).map(str::to_string);
    let stale_mirror = old.is_some_and(|old| {
        let old_keys = str_list(&old["spec"], "topologyKeys");
        let old_annotation = annotation(old, TOPOLOGY_KEYS_ANNOTATION);
        !old_keys.is_empty()
            && old_annotation == Some(old_keys.join(",").as_str())
            && current.as_deref() == old_annotation
    });
    let field = format!("metadata.annotations[{TOPOLOGY_KEYS_ANNOTATION}]");
    if keys.is_empty() {
        if stale_mirror
            && let Some(Value::Object(annotations)) = new.pointer_mut("/metadata/annotations")
        {
            annotations.remove(TOPOLOGY_KEYS_ANNOTATION);
        }
        return Vec::new();
    }
    let joined = keys.join(",");
    match current {
        Some(value) if !stale_mirror => {
            let listed: Vec<&str> = value.split(',').map(str::trim).collect();
            if listed != keys.iter().map(String::as_str).collect::<Vec<_>>() {
                return vec![Cause::invalid(
                    field,
                    &value,
                    &format!("must match spec.topologyKeys ({joined}) when both are set"),
                )];
            }
            Vec::new()
        }
        _ => {
            let metadata = meta::metadata_mut(new);
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            if !annotations.is_object() {
                *annotations = json!({});
            }
            annotations[TOPOLOGY_KEYS_ANNOTATION] = json!(joined);
            Vec::new()
        }
    }
}

/// `initIPFamilyFields`: the family policy and families of a Service, from what it asked for,
/// the cluster IPs it names and the ranges the server has. Headless Services get families too.
fn init_ip_families(old: Option<&Value>, spec: &mut Value, allocator: &Allocator) -> Vec<Cause> {
    let mut causes = Vec::new();
    if service_type(spec) == "ExternalName" {
        return causes;
    }
    // A PreferDualStack Service is not upgraded or downgraded behind its back when the
    // server's ranges change; only an explicit change of its fields does that.
    if let Some(old) = old {
        let old_spec = &old["spec"];
        let prefer =
            |s: &Value| s.get("ipFamilyPolicy").and_then(Value::as_str) == Some("PreferDualStack");
        if prefer(old_spec)
            && prefer(spec)
            && str_list(old_spec, "clusterIPs") == str_list(spec, "clusterIPs")
            && str_list(old_spec, "ipFamilies") == str_list(spec, "ipFamilies")
        {
            return causes;
        }
    }
    let ips = str_list(spec, "clusterIPs");
    let mut families = str_list(spec, "ipFamilies");
    let policy = match spec.get("ipFamilyPolicy").and_then(Value::as_str) {
        Some(policy) => policy.to_string(),
        None if families.len() == 2 || ips.len() == 2 => "RequireDualStack".to_string(),
        None => "SingleStack".to_string(),
    };
    spec["ipFamilyPolicy"] = json!(policy);
    if !is_headless(spec) {
        for (i, ip) in ips.iter().enumerate() {
            let Ok(addr) = ip.parse::<IpAddr>() else {
                continue;
            };
            let family = family_of(addr);
            match families.get(i) {
                Some(named) if named != family => causes.push(Cause::invalid(
                    format!("spec.ipFamilies[{i}]"),
                    named,
                    &format!("does not match IP family of `clusterIPs[{i}]`"),
                )),
                Some(_) => {}
                None => families.push(family.to_string()),
            }
        }
    }
    if policy == "SingleStack" && (ips.len() == 2 || families.len() == 2) {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy,
            "must be RequireDualStack or PreferDualStack when multiple IP families are specified",
        ));
    }
    if policy == "RequireDualStack" && !allocator.is_dual_stack() {
        causes.push(Cause::invalid(
            "spec.ipFamilyPolicy",
            &policy,
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, family) in families.iter().enumerate() {
        if !allocator.has_family(family) {
            causes.push(Cause::invalid(
                format!("spec.ipFamilies[{i}]"),
                family,
                "not configured on this cluster",
            ));
        }
    }
    if !causes.is_empty() {
        return causes;
    }
    if families.is_empty() {
        families.push(allocator.ip_family().to_string());
    }
    if policy != "SingleStack" && allocator.is_dual_stack() && families.len() == 1 {
        let other = if families[0] == "IPv4" {
            "IPv6"
        } else {
            "IPv4"
        };
        families.push(other.to_string());
    }
    spec["ipFamilies"] = json!(families);
    causes
}

/// Admits a Service create (`old == None`) or update: prepares, defaults, validates, carries
/// over and allocates cluster IPs and node ports, and frees what the old object held but the
/// new one does not. On error nothing changes in the allocator.
pub fn admit(
    old: Option<&Value>,
    new: &mut Value,
    allocator: &mut Allocator,
) -> Result<(), Vec<Cause>> {
    if let Some(old) = old {
        patch_allocated_values(old, new);
    }
    normalize_cluster_ips(old, new);
    if let Some(old) = old {
        drop_type_dependent_fields(old, new);
        trim_for_dual_stack_downgrade(old, new);
    }
    apply_defaults(new);
    let mut causes = validate(new);
    if let Some(old) = old {
        causes.extend(validate_update(old, new));
    }
    causes.extend(mirror_topology_keys(old, new));
    if !causes.is_empty() {
        return Err(causes);
    }
    let causes = init_ip_families(old, &mut new["spec"], allocator);
    if !causes.is_empty() {
        return Err(causes);
    }
    let held = old.map(Holdings::of).unwrap_or_default();
    let mut reserved = Reserved::default();
    if let Err(causes) = allocate(&held, new, allocator, &mut reserved) {
        allocator.undo(reserved);
        return Err(causes);
    }
    let now_held = Holdings::of(new);
    for ip in held.ips.difference(&now_held.ips) {
        allocator.release_ip(*ip);
    }
    for port in held.ports.difference(&now_held.ports) {
        allocator.release_port(*port);
    }
    Ok(())
}

/// Admits a write of a Service's `/status` (`serviceStatusStrategy`,
/// pkg/registry/core/service/strategy.go): the spec is the stored one (the caller carried it
/// over, as `PrepareForUpdate` does), ingress ipModes are defaulted, and the status is
/// validated as `ValidateServiceStatusUpdate` does, plus the conditions kube-lb writes. No
/// allocation changes: the spec did not.
pub fn admit_status(service: &mut Value, gate: LbStatusOnNonLb) -> Result<(), Vec<Cause>> {
    default_ingress_ip_modes(service);
    let mut causes = Vec::new();
    validate_load_balancer_status(&mut causes, service, gate);
    // Written through /status by load-balancer controllers (kube-lb.io/LoadBalancerReady).
    causes.extend(crate::validation::validate_conditions(
        service.pointer("/status/conditions"),
        "status.conditions",
    ));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// Takes one node port: kept when the object already held it, reserved when requested,
/// allocated otherwise.
fn take_port(
    requested: Option<i64>,
    held: &Holdings,
    allocator: &mut Allocator,
    reserved: &mut Reserved,
) -> Result<u16, (String, String)> {
    match requested {
        Some(np) => {
            let Ok(np16) = u16::try_from(np) else {
                return Err((np.to_string(), PORT_RANGE_DETAIL.to_string()));
            };
            if held.ports.contains(&np16) && !reserved.ports.contains(&np16) {
                return Ok(np16);
            }
            allocator
                .reserve_port(np16)
                .map_err(|msg| (np.to_string(), msg))?;
            reserved.ports.push(np16);
            Ok(np16)
        }
        None => {
            let np = allocator.allocate_port().map_err(|msg| {
                (
                    String::new(),
                    format!("failed to allocate a nodePort: {msg}"),
                )
            })?;
            reserved.ports.push(np);
            Ok(np)
        }
    }
}

fn allocate(
    held: &Holdings,
    new: &mut Value,
    allocator: &mut Allocator,
    reserved: &mut Reserved,
) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let spec = &mut new["spec"];
    if service_type(spec) != "ExternalName" && !is_headless(spec) {
        let families = str_list(spec, "ipFamilies");
        let mut ips = str_list(spec, "clusterIPs");
        for (i, family) in families.iter().enumerate() {
            match ips.get(i).map(|ip| ip.parse::<IpAddr>()) {
                Some(Ok(ip)) if held.ips.contains(&ip) => {}
                Some(Ok(ip)) => match allocator.reserve_ip(ip) {
                    Ok(()) => reserved.ips.push(ip),
                    Err(msg) => causes.push(Cause::invalid_literal(
                        "spec.clusterIPs",
                        &meta::go_strings(&ips),
                        &msg,
                    )),
                },
                Some(Err(_)) => {}
                None => match allocator.allocate_ip(family) {
                    Ok(ip) => {
                        reserved.ips.push(ip);
                        ips.push(ip.to_string());
                    }
                    Err(msg) => causes.push(Cause::invalid("spec.clusterIPs", "", &msg)),
                },
            }
        }
        if let Some(first) = ips.first() {
            spec["clusterIP"] = json!(first);
            spec["clusterIPs"] = json!(ips);
        }
    } else if is_headless(spec) {
        spec["clusterIP"] = json!("None");
        spec["clusterIPs"] = json!(["None"]);
    }
    // `initNodePorts`: ports with the same number (TCP and UDP of one port) share one node
    // port; a type that keeps node ports without allocating (LoadBalancer with
    // allocateLoadBalancerNodePorts: false) keeps only the ones it names.
    if needs_node_port(spec) {
        let allocate_new = allocates_node_ports(spec);
        let requested: Vec<(i64, Option<i64>)> = ports(spec)
            .iter()
            .map(|p| {
                (
                    port_number(p.get("port")).unwrap_or_default(),
                    node_port_of(p),
                )
            })
            .collect();
        let mut by_port: BTreeMap<i64, u16> = BTreeMap::new();
        let mut assigned = Vec::with_capacity(requested.len());
        for (i, (number, np)) in requested.iter().enumerate() {
            if np.is_none() && !allocate_new {
                assigned.push(None);
                continue;
            }
            let shared = by_port.get(number).copied();
            if let Some(port) = shared
                && np.is_none_or(|np| np == i64::from(port))
            {
                assigned.push(Some(port));
                continue;
            }
            let wanted = np.or_else(|| {
                requested[i + 1..]
                    .iter()
                    .find(|(n, np)| n == number && np.is_some())
                    .and_then(|(_, np)| *np)
            });
            match take_port(wanted, held, allocator, reserved) {
                Ok(port) => {
                    by_port.entry(*number).or_insert(port);
                    assigned.push(Some(port));
                }
                Err((value, msg)) => {
                    causes.push(Cause::invalid_literal(
                        format!("spec.ports[{i}].nodePort"),
                        &value,
                        &msg,
                    ));
                    assigned.push(None);
                }
            }
        }
        if let Some(Value::Array(list)) = spec.get_mut("ports") {
            for (port, np) in list.iter_mut().zip(assigned) {
                if let Some(np) = np {
                    port["nodePort"] = json!(np);
                }
            }
        }
    }
    if needs_health_check(spec) {
        let requested = port_number(spec.get("healthCheckNodePort")).filter(|n| *n != 0);
        match take_port(requested, held, allocator, reserved) {
            Ok(port) => spec["healthCheckNodePort"] = json!(port),
            Err((value, msg)) => causes.push(Cause::invalid_literal(
                "spec.healthCheckNodePort",
                &value,
                &msg,
            )),
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

#[cfg(test)]
mod tests;

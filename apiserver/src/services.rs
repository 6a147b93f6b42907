//! Service behaviour of kube-apiserver: defaulting, validation and the allocation of cluster IPs
//! and node ports. Everything here is pure over JSON values plus an [`Allocator`] value.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::net::IpAddr;
use std::ops::RangeInclusive;

use ipnet::IpNet;
use serde_json::{Value, json};

use crate::status::Cause;

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

const TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
const PROTOCOLS: &[&str] = &["TCP", "UDP", "SCTP"];
const AFFINITIES: &[&str] = &["None", "ClientIP"];
const TRAFFIC_POLICIES: &[&str] = &["Cluster", "Local"];
const DEFAULT_AFFINITY_TIMEOUT: i64 = 10800;

/// Cluster IPs and node ports currently in use.
#[derive(Debug, Clone)]
pub struct Allocator {
    cidr: IpNet,
    ips: HashSet<IpAddr>,
    ip_cursor: u128,
    node_ports: RangeInclusive<u16>,
    ports: BTreeSet<u16>,
    port_cursor: u16,
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

impl Allocator {
    /// An empty allocator over a service CIDR and node port range.
    pub fn new(cidr: IpNet, node_ports: RangeInclusive<u16>) -> Self {
        let port_cursor = *node_ports.start();
        Self {
            cidr,
            ips: HashSet::new(),
            ip_cursor: 0,
            node_ports,
            ports: BTreeSet::new(),
            port_cursor,
        }
    }

    /// The service CIDR.
    pub fn cidr(&self) -> IpNet {
        self.cidr
    }

    /// The node port range.
    pub fn node_port_range(&self) -> RangeInclusive<u16> {
        self.node_ports.clone()
    }

    /// `IPv4` or `IPv6`, the family of the service CIDR.
    pub fn ip_family(&self) -> &'static str {
        match self.cidr {
            IpNet::V4(_) => "IPv4",
            IpNet::V6(_) => "IPv6",
        }
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

    /// Usable host offsets inside the CIDR: the network address and (IPv4) broadcast are
    /// excluded, as is the first host address, which kube-apiserver reserves for the
    /// `kubernetes` Service.
    fn host_offsets(&self) -> RangeInclusive<u128> {
        let bits = u32::from(self.cidr.max_prefix_len() - self.cidr.prefix_len());
        let size: u128 = if bits >= 128 {
            u128::MAX
        } else {
            1u128 << bits
        };
        let last = match self.cidr {
            IpNet::V4(_) => size.saturating_sub(2),
            IpNet::V6(_) => size.saturating_sub(1),
        };
        2..=last.max(1)
    }

    fn reserve_ip(&mut self, ip: IpAddr) -> Result<(), String> {
        if !self.cidr.contains(&ip) || ip == self.cidr.network() {
            return Err(format!(
                "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. \
                 The range of valid IPs is {}",
                self.cidr
            ));
        }
        if !self.ips.insert(ip) {
            return Err(format!(
                "failed to allocate IP {ip}: provided IP is already allocated"
            ));
        }
        Ok(())
    }

    fn allocate_ip(&mut self) -> Result<IpAddr, String> {
        let range = self.host_offsets();
        let span = range.end() - range.start() + 1;
        let base = ip_to_u128(self.cidr.network());
        let v4 = matches!(self.cidr, IpNet::V4(_));
        let limit = span.min(1 << 24);
        for step in 0..limit {
            let offset = range.start() + (self.ip_cursor + step) % span;
            if let Some(ip) = u128_to_ip(base + offset, v4)
                && !self.ips.contains(&ip)
            {
                self.ips.insert(ip);
                self.ip_cursor = (self.ip_cursor + step + 1) % span;
                return Ok(ip);
            }
        }
        Err(format!(
            "failed to allocate a serviceIP: range is full ({})",
            self.cidr
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
        for ip in held.ips {
            self.ips.insert(ip);
        }
        for port in held.ports {
            self.ports.insert(port);
        }
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
            {
                held.ports.insert(np);
            }
        }
        if let Some(hc) = spec.get("healthCheckNodePort").and_then(Value::as_u64)
            && let Ok(hc) = u16::try_from(hc)
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

fn cluster_ips(spec: &Value) -> Vec<String> {
    let mut out: Vec<String> = spec
        .get("clusterIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if let Some(ip) = spec.get("clusterIP").and_then(Value::as_str)
        && !ip.is_empty()
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

fn service_type(spec: &Value) -> &str {
    str_field(spec, "type").unwrap_or("ClusterIP")
}

fn needs_node_ports(spec: &Value) -> bool {
    match service_type(spec) {
        "NodePort" => true,
        "LoadBalancer" => spec
            .get("allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

fn needs_health_check_port(spec: &Value) -> bool {
    service_type(spec) == "LoadBalancer"
        && str_field(spec, "externalTrafficPolicy") == Some("Local")
}

fn is_headless(spec: &Value) -> bool {
    str_field(spec, "clusterIP") == Some("None")
}

/// Applies kube-apiserver's defaults to a Service object in place.
pub fn apply_defaults(service: &mut Value, ip_family: &str) {
    if !service["spec"].is_object() {
        service["spec"] = json!({});
    }
    let spec = &mut service["spec"];
    if str_field(spec, "type").is_none() {
        spec["type"] = json!("ClusterIP");
    }
    let ty = service_type(spec).to_string();
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
    if ty == "ExternalName" {
        return;
    }
    if str_field(spec, "sessionAffinity").is_none() {
        spec["sessionAffinity"] = json!("None");
    }
    if str_field(spec, "sessionAffinity") == Some("ClientIP") {
        let timeout = spec.pointer("/sessionAffinityConfig/clientIP/timeoutSeconds");
        if timeout.and_then(Value::as_i64).is_none() {
            spec["sessionAffinityConfig"] =
                json!({"clientIP": {"timeoutSeconds": DEFAULT_AFFINITY_TIMEOUT}});
        }
    }
    if (ty == "LoadBalancer" || ty == "NodePort")
        && str_field(spec, "externalTrafficPolicy").is_none()
    {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    if str_field(spec, "internalTrafficPolicy").is_none() {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    if ty == "LoadBalancer"
        && spec
            .get("allocateLoadBalancerNodePorts")
            .is_none_or(Value::is_null)
    {
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
    if spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec["ipFamilies"] = json!([ip_family]);
    }
    if str_field(spec, "ipFamilyPolicy").is_none() {
        spec["ipFamilyPolicy"] = json!("SingleStack");
    }
}

/// Whether `name` is a valid IANA service name (port names, named target ports).
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

const IANA_DETAIL: &str = "must be no more than 15 characters, contain only lowercase \
    alphanumeric characters or '-', contain at least one letter, not begin or end with '-' \
    and not contain '--'";

fn check_enum(causes: &mut Vec<Cause>, spec: &Value, field: &str, allowed: &[&str]) {
    if let Some(v) = str_field(spec, field)
        && !allowed.contains(&v)
    {
        causes.push(Cause::not_supported(format!("spec.{field}"), v, allowed));
    }
}

fn port_number(value: Option<&Value>) -> Option<i64> {
    value.and_then(Value::as_i64)
}

/// Validates a defaulted Service; every problem is returned, not just the first.
pub fn validate(service: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(name) = str_field(&service["metadata"], "name")
        && !crate::meta::is_dns1035_label(name)
    {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
             start with an alphabetic character, and end with an alphanumeric character",
        ));
    }
    let spec = &service["spec"];
    check_enum(&mut causes, spec, "type", TYPES);
    check_enum(&mut causes, spec, "sessionAffinity", AFFINITIES);
    check_enum(&mut causes, spec, "externalTrafficPolicy", TRAFFIC_POLICIES);
    check_enum(&mut causes, spec, "internalTrafficPolicy", TRAFFIC_POLICIES);
    let ty = service_type(spec);
    let port_list = ports(spec);
    if ty == "ExternalName" {
        if str_field(spec, "externalName").is_none() {
            causes.push(Cause::required("spec.externalName"));
        }
    } else if port_list.is_empty() && !is_headless(spec) {
        causes.push(Cause::required("spec.ports"));
    }
    let multi = port_list.len() > 1;
    let mut names = BTreeSet::new();
    let mut port_protocols = BTreeMap::new();
    for (i, port) in port_list.iter().enumerate() {
        let field = format!("spec.ports[{i}]");
        match str_field(port, "name") {
            Some(name) => {
                if !is_iana_svc_name(name) {
                    causes.push(Cause::invalid(format!("{field}.name"), name, IANA_DETAIL));
                }
                if !names.insert(name.to_string()) {
                    causes.push(Cause::duplicate(format!("{field}.name"), name));
                }
            }
            None if multi => causes.push(Cause::required(format!("{field}.name"))),
            None => {}
        }
        let number = port_number(port.get("port"));
        match number {
            None => causes.push(Cause::required(format!("{field}.port"))),
            Some(p) if !(1..=65535).contains(&p) => causes.push(Cause::invalid(
                format!("{field}.port"),
                &p.to_string(),
                "must be between 1 and 65535, inclusive",
            )),
            Some(_) => {}
        }
        let protocol = str_field(port, "protocol").unwrap_or("TCP");
        if !PROTOCOLS.contains(&protocol) {
            causes.push(Cause::not_supported(
                format!("{field}.protocol"),
                protocol,
                PROTOCOLS,
            ));
        }
        if let Some(p) = number
            && let Some(first) = port_protocols.insert((p, protocol.to_string()), i)
        {
            causes.push(Cause::duplicate(
                field.clone(),
                &format!("{{Port:{p}, Protocol:{protocol}}} (also spec.ports[{first}])"),
            ));
        }
        match port.get("targetPort") {
            Some(Value::String(name)) if !is_iana_svc_name(name) => causes.push(Cause::invalid(
                format!("{field}.targetPort"),
                name,
                IANA_DETAIL,
            )),
            Some(Value::Number(n)) if !n.as_i64().is_some_and(|t| (1..=65535).contains(&t)) => {
                causes.push(Cause::invalid(
                    format!("{field}.targetPort"),
                    &n.to_string(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            _ => {}
        }
        if let Some(np) = port_number(port.get("nodePort"))
            && np != 0
            && !(ty == "NodePort" || ty == "LoadBalancer")
        {
            causes.push(Cause::forbidden(
                format!("{field}.nodePort"),
                &format!("may not be used when `type` is '{ty}'"),
            ));
        }
    }
    if ty != "LoadBalancer"
        && ty != "NodePort"
        && str_field(spec, "externalTrafficPolicy").is_some()
    {
        causes.push(Cause::invalid(
            "spec.externalTrafficPolicy",
            str_field(spec, "externalTrafficPolicy").unwrap_or_default(),
            "may only be set when `type` is 'NodePort' or 'LoadBalancer'",
        ));
    }
    if ty != "LoadBalancer"
        && spec
            .get("allocateLoadBalancerNodePorts")
            .is_some_and(|v| !v.is_null())
    {
        causes.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    if let Some(t) = spec
        .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
        .and_then(Value::as_i64)
        && !(1..=86400).contains(&t)
    {
        causes.push(Cause::invalid(
            "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
            &t.to_string(),
            "must be greater than 0 and less than 86400",
        ));
    }
    if let Some(ranges) = spec
        .get("loadBalancerSourceRanges")
        .and_then(Value::as_array)
    {
        for (i, r) in ranges.iter().enumerate() {
            let text = r.as_str().unwrap_or_default();
            if text.trim().parse::<IpNet>().is_err() {
                causes.push(Cause::invalid(
                    format!("spec.loadBalancerSourceRanges[{i}]"),
                    text,
                    "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24",
                ));
            }
        }
    }
    if let Some(hc) = port_number(spec.get("healthCheckNodePort"))
        && hc != 0
        && !needs_health_check_port(spec)
    {
        causes.push(Cause::invalid(
            "spec.healthCheckNodePort",
            &hc.to_string(),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    causes
}

/// Carries values an update left unset over from the old object, as kube-apiserver does, so a
/// client that PUTs a manifest without `clusterIP` or `nodePort` keeps its allocations; and drops
/// values the new type no longer uses when they were merely carried along.
fn patch_allocated_values(old: &Value, new: &mut Value) {
    let old_spec = &old["spec"];
    let old_ips = cluster_ips(old_spec);
    let old_headless = is_headless(old_spec);
    let spec = &mut new["spec"];
    let new_type = service_type(spec).to_string();
    if new_type != "ExternalName" {
        if str_field(spec, "clusterIP").is_none() {
            if old_headless {
                spec["clusterIP"] = json!("None");
            } else if let Some(first) = old_ips.first() {
                spec["clusterIP"] = json!(first);
            }
        }
        if spec
            .get("clusterIPs")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
            && str_field(spec, "clusterIP") == str_field(old_spec, "clusterIP")
            && let Some(old_list) = old_spec.get("clusterIPs")
        {
            spec["clusterIPs"] = old_list.clone();
        }
    } else if str_field(spec, "clusterIP") == str_field(old_spec, "clusterIP") {
        // Changing to ExternalName gives up the cluster IP.
        if let Some(map) = spec.as_object_mut() {
            map.remove("clusterIP");
            map.remove("clusterIPs");
        }
    }
    let old_ports = ports(old_spec);
    let keep_node_ports = needs_node_ports(spec);
    if let Some(Value::Array(new_ports)) = spec.get_mut("ports") {
        for port in new_ports.iter_mut() {
            let key = (
                port.get("port").and_then(Value::as_i64),
                str_field(port, "protocol").unwrap_or("TCP").to_string(),
            );
            let old_np = old_ports
                .iter()
                .find(|p| {
                    (
                        p.get("port").and_then(Value::as_i64),
                        str_field(p, "protocol").unwrap_or("TCP").to_string(),
                    ) == key
                })
                .and_then(|p| p.get("nodePort").and_then(Value::as_i64))
                .filter(|np| *np != 0);
            let current = port
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0);
            if keep_node_ports {
                if current.is_none()
                    && let Some(np) = old_np
                {
                    port["nodePort"] = json!(np);
                }
            } else if current.is_some()
                && current == old_np
                && let Some(map) = port.as_object_mut()
            {
                map.remove("nodePort");
            }
        }
    }
    // Fields the new type does not use are dropped when they were only carried along.
    let unused: &[&str] = match new_type.as_str() {
        "LoadBalancer" => &[],
        "NodePort" => &["allocateLoadBalancerNodePorts"],
        _ => &["externalTrafficPolicy", "allocateLoadBalancerNodePorts"],
    };
    for field in unused {
        if spec.get(*field).is_some()
            && spec.get(*field) == old_spec.get(*field)
            && let Some(map) = spec.as_object_mut()
        {
            map.remove(*field);
        }
    }
    let old_hc = old_spec.get("healthCheckNodePort").and_then(Value::as_i64);
    let new_hc = spec.get("healthCheckNodePort").and_then(Value::as_i64);
    if needs_health_check_port(spec) {
        if new_hc.is_none_or(|h| h == 0)
            && let Some(h) = old_hc
        {
            spec["healthCheckNodePort"] = json!(h);
        }
    } else if new_hc.is_some()
        && new_hc == old_hc
        && let Some(map) = spec.as_object_mut()
    {
        map.remove("healthCheckNodePort");
    }
}

/// Admits a Service create (`old == None`) or update: defaults, validates, carries over and
/// allocates cluster IPs and node ports, and frees what the old object held but the new one
/// does not. On error nothing changes in the allocator.
pub fn admit(
    old: Option<&Value>,
    new: &mut Value,
    allocator: &mut Allocator,
) -> Result<(), Vec<Cause>> {
    if let Some(old) = old {
        patch_allocated_values(old, new);
    }
    apply_defaults(new, allocator.ip_family());
    let mut causes = validate(new);
    if let Some(old) = old {
        let old_ip = str_field(&old["spec"], "clusterIP");
        let new_ip = str_field(&new["spec"], "clusterIP");
        let type_change_to_from_external = (service_type(&old["spec"]) == "ExternalName")
            != (service_type(&new["spec"]) == "ExternalName");
        if old_ip.is_some() && old_ip != new_ip && !type_change_to_from_external {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                new_ip.unwrap_or_default(),
                "may not change once set",
            ));
        }
    }
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

fn allocate(
    held: &Holdings,
    new: &mut Value,
    allocator: &mut Allocator,
    reserved: &mut Reserved,
) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let spec = &mut new["spec"];
    let ty = service_type(spec).to_string();
    if ty != "ExternalName" && !is_headless(spec) {
        match str_field(spec, "clusterIP").map(str::to_string) {
            Some(requested) => match requested.parse::<IpAddr>() {
                Ok(ip) if held.ips.contains(&ip) => {}
                Ok(ip) => match allocator.reserve_ip(ip) {
                    Ok(()) => reserved.ips.push(ip),
                    Err(msg) => causes.push(Cause::invalid(
                        "spec.clusterIPs",
                        &format!("[]string{{\"{requested}\"}}"),
                        &msg,
                    )),
                },
                Err(_) => causes.push(Cause::invalid(
                    "spec.clusterIPs[0]",
                    &requested,
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                )),
            },
            None => match allocator.allocate_ip() {
                Ok(ip) => {
                    reserved.ips.push(ip);
                    spec["clusterIP"] = json!(ip.to_string());
                }
                Err(msg) => causes.push(Cause::invalid("spec.clusterIPs", "", &msg)),
            },
        }
        if let Some(ip) = str_field(spec, "clusterIP").map(str::to_string) {
            spec["clusterIPs"] = json!([ip]);
        }
    } else if is_headless(spec) {
        spec["clusterIPs"] = json!(["None"]);
    }
    if needs_node_ports(spec)
        && let Some(Value::Array(port_list)) = spec.get_mut("ports")
    {
        for (i, port) in port_list.iter_mut().enumerate() {
            let requested = port
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0);
            match requested {
                Some(np) => {
                    let Ok(np16) = u16::try_from(np) else {
                        causes.push(Cause::invalid(
                            format!("spec.ports[{i}].nodePort"),
                            &np.to_string(),
                            "must be between 1 and 65535, inclusive",
                        ));
                        continue;
                    };
                    if held.ports.contains(&np16) || reserved.ports.contains(&np16) {
                        continue;
                    }
                    match allocator.reserve_port(np16) {
                        Ok(()) => reserved.ports.push(np16),
                        Err(msg) => causes.push(Cause::invalid(
                            format!("spec.ports[{i}].nodePort"),
                            &np.to_string(),
                            &msg,
                        )),
                    }
                }
                None => match allocator.allocate_port() {
                    Ok(np) => {
                        reserved.ports.push(np);
                        port["nodePort"] = json!(np);
                    }
                    Err(msg) => causes.push(Cause::invalid(
                        format!("spec.ports[{i}].nodePort"),
                        "",
                        &format!("failed to allocate a nodePort: {msg}"),
                    )),
                },
            }
        }
    }
    if needs_health_check_port(spec) {
        match spec
            .get("healthCheckNodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0)
        {
            Some(hc) => {
                if let Ok(hc16) = u16::try_from(hc) {
                    if !held.ports.contains(&hc16) {
                        match allocator.reserve_port(hc16) {
                            Ok(()) => reserved.ports.push(hc16),
                            Err(msg) => causes.push(Cause::invalid(
                                "spec.healthCheckNodePort",
                                &hc.to_string(),
                                &msg,
                            )),
                        }
                    }
                } else {
                    causes.push(Cause::invalid(
                        "spec.healthCheckNodePort",
                        &hc.to_string(),
                        "must be between 1 and 65535, inclusive",
                    ));
                }
            }
            None => match allocator.allocate_port() {
                Ok(np) => {
                    reserved.ports.push(np);
                    spec["healthCheckNodePort"] = json!(np);
                }
                Err(msg) => causes.push(Cause::invalid(
                    "spec.healthCheckNodePort",
                    "",
                    &format!("failed to allocate a nodePort: {msg}"),
                )),
            },
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocator() -> Allocator {
        Allocator::new(
            DEFAULT_SERVICE_CIDR.parse().unwrap(),
            DEFAULT_NODE_PORT_RANGE,
        )
    }

    fn svc(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn defaults_cluster_ip_service() {
        let mut s = svc(json!({"ports": [{"port": 80}]}));
        apply_defaults(&mut s, "IPv4");
        let spec = &s["spec"];
        assert_eq!(spec["type"], "ClusterIP");
        assert_eq!(spec["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["ports"][0]["targetPort"], 80);
        assert_eq!(spec["sessionAffinity"], "None");
        assert_eq!(spec["internalTrafficPolicy"], "Cluster");
        assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
        assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
        assert!(spec.get("externalTrafficPolicy").is_none());
    }

    #[test]
    fn defaults_load_balancer_with_client_ip_affinity() {
        let mut s = svc(
            json!({"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443, "targetPort": "https"}]}),
        );
        apply_defaults(&mut s, "IPv4");
        let spec = &s["spec"];
        assert_eq!(spec["externalTrafficPolicy"], "Cluster");
        assert_eq!(spec["allocateLoadBalancerNodePorts"], true);
        assert_eq!(
            spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
            10800
        );
        assert_eq!(spec["ports"][0]["targetPort"], "https");
    }

    #[test]
    fn iana_names() {
        let cases = [
            ("http", true),
            ("web-8080", true),
            ("a1", true),
            ("123", false),
            ("HTTP", false),
            ("-http", false),
            ("http-", false),
            ("ht--tp", false),
            ("a_b", false),
            ("sixteen-chars-xx", false),
            ("fifteen-chars-x", true),
            ("", false),
        ];
        for (name, ok) in cases {
            assert_eq!(is_iana_svc_name(name), ok, "{name}");
        }
    }

    #[test]
    fn validation_table() {
        let cases: Vec<(Value, Vec<&str>)> = vec![
            (
                json!({"ports": [{"port": 80, "name": "Bad_Name"}]}),
                vec!["spec.ports[0].name"],
            ),
            (
                json!({"ports": [{"port": 80}, {"port": 81}]}),
                vec!["spec.ports[0].name", "spec.ports[1].name"],
            ),
            (
                json!({"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]}),
                vec!["spec.ports[1].name"],
            ),
            (
                json!({"ports": [{"port": 0, "targetPort": 80}]}),
                vec!["spec.ports[0].port"],
            ),
            (
                json!({"ports": [{"port": 80, "protocol": "ICMP"}]}),
                vec!["spec.ports[0].protocol"],
            ),
            (
                json!({"type": "Magic", "ports": [{"port": 80}]}),
                vec!["spec.type"],
            ),
            (json!({}), vec!["spec.ports"]),
            (json!({"clusterIP": "None"}), vec![]),
            (json!({"type": "ExternalName"}), vec!["spec.externalName"]),
            (
                json!({"ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]}),
                vec!["spec.ports[1]"],
            ),
            (
                json!({"ports": [{"port": 80, "nodePort": 30001}]}),
                vec!["spec.ports[0].nodePort"],
            ),
            (
                json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["nope"], "ports": [{"port": 80}]}),
                vec!["spec.loadBalancerSourceRanges[0]"],
            ),
            (
                json!({"type": "NodePort", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
                vec!["spec.allocateLoadBalancerNodePorts"],
            ),
            (
                json!({"ports": [{"port": 80, "name": "ok", "targetPort": "Not-Valid"}]}),
                vec!["spec.ports[0].targetPort"],
            ),
        ];
        for (spec, want) in cases {
            let mut s = svc(spec.clone());
            apply_defaults(&mut s, "IPv4");
            let causes = validate(&s);
            assert_eq!(fields(&causes), want, "{spec}");
        }
    }

    #[test]
    fn allocates_ip_and_node_ports_for_load_balancer() {
        let mut a = allocator();
        let mut s = svc(
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}),
        );
        admit(None, &mut s, &mut a).unwrap();
        let spec = &s["spec"];
        let ip: IpAddr = spec["clusterIP"].as_str().unwrap().parse().unwrap();
        assert!(a.cidr().contains(&ip));
        assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
        let np0 = spec["ports"][0]["nodePort"].as_u64().unwrap();
        let np1 = spec["ports"][1]["nodePort"].as_u64().unwrap();
        let hc = spec["healthCheckNodePort"].as_u64().unwrap();
        assert_ne!(np0, np1);
        assert_ne!(hc, np0);
        assert!((30000..=32767).contains(&np0));
        assert_eq!(a.allocated_ports(), 3);
        assert_eq!(a.allocated_ips(), 1);
        a.release(&s);
        assert_eq!(a.allocated_ports(), 0);
        assert_eq!(a.allocated_ips(), 0);
    }

    #[test]
    fn no_node_ports_when_lb_allocation_disabled() {
        let mut a = allocator();
        let mut s = svc(
            json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
        );
        admit(None, &mut s, &mut a).unwrap();
        assert!(s["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(a.allocated_ports(), 0);
    }

    #[test]
    fn requested_values_honoured_or_rejected() {
        let mut a = allocator();
        let mut first = svc(
            json!({"type": "NodePort", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        admit(None, &mut first, &mut a).unwrap();
        assert_eq!(first["spec"]["clusterIP"], "10.96.0.50");
        assert_eq!(first["spec"]["ports"][0]["nodePort"], 30080);

        let mut dup = svc(
            json!({"type": "NodePort", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "nodePort": 30080}]}),
        );
        let causes = admit(None, &mut dup, &mut a).unwrap_err();
        assert_eq!(
            fields(&causes),
            vec!["spec.clusterIPs", "spec.ports[0].nodePort"]
        );
        assert!(causes[0].message.contains("already allocated"));

        let mut out = svc(json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}));
        let causes = admit(None, &mut out, &mut a).unwrap_err();
        assert!(
            causes[0].message.contains("not in the valid range"),
            "{causes:?}"
        );

        let mut bad_port =
            svc(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}));
        let causes = admit(None, &mut bad_port, &mut a).unwrap_err();
        assert!(causes[0].message.contains("30000-32767"));
        // Failed admissions leave nothing behind.
        assert_eq!(a.allocated_ips(), 1);
        assert_eq!(a.allocated_ports(), 1);
    }

    #[test]
    fn headless_gets_no_ip() {
        let mut a = allocator();
        let mut s = svc(json!({"clusterIP": "None", "ports": [{"port": 80}]}));
        admit(None, &mut s, &mut a).unwrap();
        assert_eq!(s["spec"]["clusterIPs"], json!(["None"]));
        assert_eq!(a.allocated_ips(), 0);
    }

    #[test]
    fn update_carries_allocations_and_type_change_releases_ports() {
        let mut a = allocator();
        let mut lb = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        admit(None, &mut lb, &mut a).unwrap();
        let ip = lb["spec"]["clusterIP"].clone();
        let np = lb["spec"]["ports"][0]["nodePort"].clone();

        // A PUT of the original manifest keeps what was allocated.
        let mut same = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        admit(Some(&lb), &mut same, &mut a).unwrap();
        assert_eq!(same["spec"]["clusterIP"], ip);
        assert_eq!(same["spec"]["ports"][0]["nodePort"], np);
        assert_eq!(a.allocated_ports(), 1);

        // LoadBalancer -> ClusterIP drops the node port.
        let mut cip = same.clone();
        cip["spec"]["type"] = json!("ClusterIP");
        admit(Some(&same), &mut cip, &mut a).unwrap();
        assert!(cip["spec"]["ports"][0].get("nodePort").is_none());
        assert_eq!(cip["spec"]["clusterIP"], ip);
        assert_eq!(a.allocated_ports(), 0);
        assert_eq!(a.allocated_ips(), 1);

        // The cluster IP is immutable.
        let mut moved = cip.clone();
        moved["spec"]["clusterIP"] = json!("10.96.1.1");
        moved["spec"]["clusterIPs"] = json!(["10.96.1.1"]);
        let causes = admit(Some(&cip), &mut moved, &mut a).unwrap_err();
        assert_eq!(fields(&causes), vec!["spec.clusterIPs[0]"]);
    }

    #[test]
    fn traffic_policy_change_releases_health_check_port() {
        let mut a = allocator();
        let mut local = svc(
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}),
        );
        admit(None, &mut local, &mut a).unwrap();
        let hc = local["spec"]["healthCheckNodePort"].as_u64().unwrap();
        assert_eq!(a.allocated_ports(), 2);
        let mut cluster = local.clone();
        cluster["spec"]["externalTrafficPolicy"] = json!("Cluster");
        admit(Some(&local), &mut cluster, &mut a).unwrap();
        assert!(cluster["spec"].get("healthCheckNodePort").is_none());
        assert_eq!(a.allocated_ports(), 1);
        // The freed port can be requested again.
        let mut other = svc(
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
            "healthCheckNodePort": hc, "ports": [{"port": 81}]}),
        );
        other["metadata"]["name"] = json!("other");
        admit(None, &mut other, &mut a).unwrap();
        assert_eq!(other["spec"]["healthCheckNodePort"].as_u64(), Some(hc));
    }

    #[test]
    fn load_balancer_to_node_port_keeps_node_ports() {
        let mut a = allocator();
        let mut lb = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        admit(None, &mut lb, &mut a).unwrap();
        let np = lb["spec"]["ports"][0]["nodePort"].clone();
        let mut node_port = lb.clone();
        node_port["spec"]["type"] = json!("NodePort");
        admit(Some(&lb), &mut node_port, &mut a).unwrap();
        assert_eq!(node_port["spec"]["ports"][0]["nodePort"], np);
        assert!(
            node_port["spec"]
                .get("allocateLoadBalancerNodePorts")
                .is_none()
        );
        assert_eq!(a.allocated_ports(), 1);
    }

    #[test]
    fn small_ranges_fill_up_without_collisions() {
        let mut a = Allocator::new("10.0.0.0/29".parse().unwrap(), 30000..=30002);
        let mut ips = BTreeSet::new();
        // /29: 8 addresses minus network, first host and broadcast.
        for _ in 0..5 {
            let mut s = svc(json!({"ports": [{"port": 80}]}));
            admit(None, &mut s, &mut a).unwrap();
            assert!(ips.insert(s["spec"]["clusterIP"].as_str().unwrap().to_string()));
        }
        let mut full = svc(json!({"ports": [{"port": 80}]}));
        let causes = admit(None, &mut full, &mut a).unwrap_err();
        assert!(causes[0].message.contains("range is full"));
        let mut ports = BTreeSet::new();
        let mut b = Allocator::new("10.0.0.0/24".parse().unwrap(), 30000..=30002);
        for _ in 0..3 {
            let mut s = svc(json!({"type": "NodePort", "ports": [{"port": 80}]}));
            admit(None, &mut s, &mut b).unwrap();
            assert!(ports.insert(s["spec"]["ports"][0]["nodePort"].as_u64().unwrap()));
        }
        let mut s = svc(json!({"type": "NodePort", "ports": [{"port": 80}]}));
        assert!(admit(None, &mut s, &mut b).is_err());
        assert_eq!(b.allocated_ips(), 3);
    }
}

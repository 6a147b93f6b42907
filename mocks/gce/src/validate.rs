//! Request-body rules of the Compute API (v1 REST reference) for the resources the mock serves:
//! required fields, enum values, the resource-name pattern, port and port-range syntax, IP and
//! CIDR formats, and the mutually exclusive field combinations. The rules come from the public
//! API reference, not from our client, so a request the real API refuses fails here too.
//! Cross-resource checks (references, conflicts, in-use) live in the store.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use crate::error::ApiError;

/// The resource kinds the mock stores, with their collection names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `regions/{r}/addresses`.
    Address,
    /// `regions/{r}/forwardingRules`.
    ForwardingRule,
    /// `regions/{r}/targetPools`.
    TargetPool,
    /// `regions/{r}/backendServices`.
    BackendService,
    /// `global/httpHealthChecks` (legacy).
    HttpHealthCheck,
    /// `global/healthChecks`.
    HealthCheck,
    /// `global/firewalls`.
    Firewall,
    /// `global/networks` (fixture).
    Network,
    /// `regions/{r}/subnetworks` (fixture).
    Subnetwork,
    /// `zones/{z}/instanceGroups`.
    InstanceGroup,
    /// `zones/{z}/instances` (fixture).
    Instance,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 11] = [
        Kind::Address,
        Kind::ForwardingRule,
        Kind::TargetPool,
        Kind::BackendService,
        Kind::HttpHealthCheck,
        Kind::HealthCheck,
        Kind::Firewall,
        Kind::Network,
        Kind::Subnetwork,
        Kind::InstanceGroup,
        Kind::Instance,
    ];

    /// The URL collection segment.
    pub fn collection(self) -> &'static str {
        match self {
            Kind::Address => "addresses",
            Kind::ForwardingRule => "forwardingRules",
            Kind::TargetPool => "targetPools",
            Kind::BackendService => "backendServices",
            Kind::HttpHealthCheck => "httpHealthChecks",
            Kind::HealthCheck => "healthChecks",
            Kind::Firewall => "firewalls",
            Kind::Network => "networks",
            Kind::Subnetwork => "subnetworks",
            Kind::InstanceGroup => "instanceGroups",
            Kind::Instance => "instances",
        }
    }

    /// The `kind` field value (`compute#address`, …).
    pub fn kind_name(self) -> &'static str {
        match self {
            Kind::Address => "compute#address",
            Kind::ForwardingRule => "compute#forwardingRule",
            Kind::TargetPool => "compute#targetPool",
            Kind::BackendService => "compute#backendService",
            Kind::HttpHealthCheck => "compute#httpHealthCheck",
            Kind::HealthCheck => "compute#healthCheck",
            Kind::Firewall => "compute#firewall",
            Kind::Network => "compute#network",
            Kind::Subnetwork => "compute#subnetwork",
            Kind::InstanceGroup => "compute#instanceGroup",
            Kind::Instance => "compute#instance",
        }
    }

    /// The kind for a collection segment under a scope type (`regions`, `zones`, `global`).
    pub fn from_collection(scope_type: &str, collection: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.collection() == collection && k.scope_type() == scope_type)
    }

    /// `regions`, `zones` or `global`.
    pub fn scope_type(self) -> &'static str {
        match self {
            Kind::Address | Kind::ForwardingRule | Kind::TargetPool | Kind::BackendService => {
                "regions"
            }
            Kind::Subnetwork => "regions",
            Kind::HttpHealthCheck | Kind::HealthCheck | Kind::Firewall | Kind::Network => "global",
            Kind::InstanceGroup | Kind::Instance => "zones",
        }
    }

    /// Fields a client may send on insert/update (output-only fields are accepted and
    /// ignored, as the real API does). Anything else is an unknown field: 400.
    fn input_fields(self) -> &'static [&'static str] {
        match self {
            Kind::Address => &[
                "name",
                "description",
                "address",
                "addressType",
                "networkTier",
                "purpose",
                "subnetwork",
                "network",
                "ipVersion",
                "prefixLength",
                "labels",
            ],
            Kind::ForwardingRule => &[
                "name",
                "description",
                "IPAddress",
                "IPProtocol",
                "portRange",
                "ports",
                "allPorts",
                "target",
                "backendService",
                "loadBalancingScheme",
                "network",
                "subnetwork",
                "networkTier",
                "allowGlobalAccess",
                "ipVersion",
                "labels",
                "fingerprint",
                "serviceLabel",
                "isMirroringCollector",
            ],
            Kind::TargetPool => &[
                "name",
                "description",
                "instances",
                "healthChecks",
                "sessionAffinity",
                "backupPool",
                "failoverRatio",
            ],
            Kind::BackendService => &[
                "name",
                "description",
                "protocol",
                "loadBalancingScheme",
                "healthChecks",
                "backends",
                "sessionAffinity",
                "fingerprint",
                "network",
                "timeoutSec",
                "connectionDraining",
                "failoverPolicy",
            ],
            Kind::HttpHealthCheck => &[
                "name",
                "description",
                "port",
                "requestPath",
                "host",
                "checkIntervalSec",
                "timeoutSec",
                "healthyThreshold",
                "unhealthyThreshold",
            ],
            Kind::HealthCheck => &[
                "name",
                "description",
                "type",
                "httpHealthCheck",
                "tcpHealthCheck",
                "checkIntervalSec",
                "timeoutSec",
                "healthyThreshold",
                "unhealthyThreshold",
                "logConfig",
            ],
            Kind::Firewall => &[
                "name",
                "description",
                "network",
                "priority",
                "direction",
                "sourceRanges",
                "destinationRanges",
                "sourceTags",
                "targetTags",
                "allowed",
                "denied",
                "disabled",
                "logConfig",
            ],
            Kind::InstanceGroup => &["name", "description", "network", "subnetwork", "namedPorts"],
            Kind::Network | Kind::Subnetwork | Kind::Instance => &[],
        }
    }
}

/// Fields the server sets; clients may echo them back (e.g. a PUT of a GET result).
const OUTPUT_ONLY: &[&str] = &[
    "kind",
    "id",
    "selfLink",
    "creationTimestamp",
    "region",
    "zone",
    "status",
    "users",
    "size",
    "selfLinkWithId",
    "labelFingerprint",
    "pscConnectionStatus",
];

/// The name pattern shared by Compute resources (RFC 1035 label, ≤ 63 characters).
pub fn check_name(name: &str) -> Result<(), ApiError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.last().is_some_and(|b| *b != b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.name': '{name}'. Must be a match of regex \
             '(?:[a-z](?:[-a-z0-9]{{0,61}}[a-z0-9])?)'"
        )))
    }
}

fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

/// A string field, or an error naming it when it has another JSON type.
pub fn opt_str<'a>(body: &'a Value, name: &str) -> Result<Option<&'a str>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': expected a string"
        ))),
    }
}

/// A required, non-empty string field.
pub fn req_str<'a>(body: &'a Value, name: &str) -> Result<&'a str, ApiError> {
    match opt_str(body, name)? {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err(ApiError::invalid(format!(
            "Required field 'resource.{name}' not specified"
        ))),
    }
}

/// An integer field (the API accepts numbers, and strings for int64).
pub fn opt_int(body: &Value, name: &str) -> Result<Option<i64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| bad_int(name)),
        Some(Value::String(s)) => s.parse().map(Some).map_err(|_| bad_int(name)),
        Some(_) => Err(bad_int(name)),
    }
}

fn bad_int(name: &str) -> ApiError {
    ApiError::invalid(format!(
        "Invalid value for field 'resource.{name}': expected an integer"
    ))
}

/// A list-of-strings field (missing means empty).
pub fn str_list(body: &Value, name: &str) -> Result<Vec<String>, ApiError> {
    match field(body, name) {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str().map(str::to_string).ok_or_else(|| {
                    ApiError::invalid(format!(
                        "Invalid value for field 'resource.{name}': expected strings"
                    ))
                })
            })
            .collect(),
        Some(_) => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': expected a list"
        ))),
    }
}

/// A boolean field (missing means false).
pub fn opt_bool(body: &Value, name: &str) -> Result<bool, ApiError> {
    match field(body, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': expected a boolean"
        ))),
    }
}

fn check_enum(name: &str, value: Option<&str>, allowed: &[&str]) -> Result<(), ApiError> {
    match value {
        Some(v) if !allowed.contains(&v) => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': '{v}'. Allowed values: {}",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

fn check_range(name: &str, value: Option<i64>, min: i64, max: i64) -> Result<(), ApiError> {
    match value {
        Some(v) if v < min || v > max => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': '{v}'. Must be between {min} and {max}"
        ))),
        _ => Ok(()),
    }
}

/// A port (`"80"`) or port range (`"80-443"`), each 1..=65535 with low ≤ high.
pub fn parse_port_range(name: &str, value: &str) -> Result<(u16, u16), ApiError> {
    let bad = || {
        ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': '{value}'. Must be a port or a port \
             range 'low-high' between 1 and 65535"
        ))
    };
    let (low, high) = match value.split_once('-') {
        Some((l, h)) => (l, h),
        None => (value, value),
    };
    let low: u16 = low.parse().map_err(|_| bad())?;
    let high: u16 = high.parse().map_err(|_| bad())?;
    if low == 0 || low > high {
        return Err(bad());
    }
    Ok((low, high))
}

/// An IP address or CIDR (`sourceRanges`, `destinationRanges`).
pub fn check_cidr(name: &str, value: &str) -> Result<(), ApiError> {
    if value.parse::<IpNet>().is_ok() || value.parse::<IpAddr>().is_ok() {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': '{value}'. Must be a valid IPV4 or \
             IPV6 CIDR range"
        )))
    }
}

const NETWORK_TIERS: &[&str] = &[
    "PREMIUM",
    "STANDARD",
    "FIXED_STANDARD",
    "STANDARD_OVERRIDES_FIXED_STANDARD",
];
const SCHEMES: &[&str] = &[
    "EXTERNAL",
    "EXTERNAL_MANAGED",
    "INTERNAL",
    "INTERNAL_MANAGED",
    "INTERNAL_SELF_MANAGED",
];
const SESSION_AFFINITIES: &[&str] = &[
    "NONE",
    "CLIENT_IP",
    "CLIENT_IP_PROTO",
    "CLIENT_IP_PORT_PROTO",
    "CLIENT_IP_NO_DESTINATION",
    "GENERATED_COOKIE",
    "HEADER_FIELD",
    "HTTP_COOKIE",
    "STRONG_COOKIE_AFFINITY",
];

/// Validates a body for insert or full update of `kind` (shape rules only).
pub fn check_body(kind: Kind, body: &Value) -> Result<(), ApiError> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::invalid(
            "Invalid JSON payload received: expected an object",
        ));
    };
    for key in object.keys() {
        if !kind.input_fields().contains(&key.as_str()) && !OUTPUT_ONLY.contains(&key.as_str()) {
            return Err(ApiError::invalid(format!(
                "Invalid JSON payload received. Unknown name \"{key}\" at 'resource'"
            )));
        }
    }
    check_name(req_str(body, "name")?)?;
    match kind {
        Kind::Address => check_address(body),
        Kind::ForwardingRule => check_forwarding_rule(body),
        Kind::TargetPool => check_target_pool(body),
        Kind::BackendService => check_backend_service(body),
        Kind::HttpHealthCheck => check_http_health_check(body),
        Kind::HealthCheck => check_health_check(body),
        Kind::Firewall => check_firewall(body),
        Kind::InstanceGroup => Ok(()),
        Kind::Network | Kind::Subnetwork | Kind::Instance => Err(ApiError::new(
            405,
            "methodNotAllowed",
            "This mock serves these resources read-only",
        )),
    }
}

fn check_address(body: &Value) -> Result<(), ApiError> {
    check_enum(
        "addressType",
        opt_str(body, "addressType")?,
        &["EXTERNAL", "INTERNAL"],
    )?;
    check_enum("networkTier", opt_str(body, "networkTier")?, NETWORK_TIERS)?;
    check_enum(
        "purpose",
        opt_str(body, "purpose")?,
        &[
            "GCE_ENDPOINT",
            "SHARED_LOADBALANCER_VIP",
            "VPC_PEERING",
            "PRIVATE_SERVICE_CONNECT",
            "NAT_AUTO",
            "IPSEC_INTERCONNECT",
            "DNS_RESOLVER",
            "IPV6_ONLY_VM",
        ],
    )?;
    if let Some(address) = opt_str(body, "address")?
        && address.parse::<IpAddr>().is_err()
    {
        return Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.address': '{address}'. Must be a valid IP address"
        )));
    }
    let internal = opt_str(body, "addressType")? == Some("INTERNAL");
    if !internal && opt_str(body, "subnetwork")?.is_some() {
        return Err(ApiError::invalid(
            "Invalid value for field 'resource.subnetwork': only allowed for INTERNAL addresses",
        ));
    }
    if internal && opt_str(body, "networkTier")?.is_some_and(|t| t != "PREMIUM") {
        return Err(ApiError::invalid(
            "Invalid value for field 'resource.networkTier': INTERNAL addresses are PREMIUM",
        ));
    }
    Ok(())
}

fn check_forwarding_rule(body: &Value) -> Result<(), ApiError> {
    check_enum(
        "IPProtocol",
        opt_str(body, "IPProtocol")?,
        &["TCP", "UDP", "ESP", "AH", "SCTP", "ICMP", "L3_DEFAULT"],
    )?;
    check_enum(
        "loadBalancingScheme",
        opt_str(body, "loadBalancingScheme")?,
        SCHEMES,
    )?;
    check_enum("networkTier", opt_str(body, "networkTier")?, NETWORK_TIERS)?;
    if let Some(ip) = opt_str(body, "IPAddress")?
        && ip.parse::<IpAddr>().is_err()
        && !ip.contains("/addresses/")
    {
        return Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.IPAddress': '{ip}'. Must be an IP address or an \
             address resource URL"
        )));
    }
    let port_range = opt_str(body, "portRange")?;
    if let Some(range) = port_range {
        parse_port_range("portRange", range)?;
    }
    let ports = str_list(body, "ports")?;
    for port in &ports {
        parse_port_range("ports", port)?;
    }
    let all_ports = opt_bool(body, "allPorts")?;
    let set = [port_range.is_some(), !ports.is_empty(), all_ports]
        .iter()
        .filter(|b| **b)
        .count();
    if set > 1 {
        return Err(ApiError::invalid(
            "Only one of portRange, ports and allPorts may be specified",
        ));
    }
    if ports.len() > 5 {
        return Err(ApiError::invalid(
            "Invalid value for field 'resource.ports': at most 5 ports may be specified; use \
             allPorts",
        ));
    }
    let target = opt_str(body, "target")?;
    let backend = opt_str(body, "backendService")?;
    match (target, backend) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "Only one of target and backendService may be specified",
            ));
        }
        (None, None) => {
            return Err(ApiError::invalid(
                "Required field 'resource.target' or 'resource.backendService' not specified",
            ));
        }
        _ => {}
    }
    let scheme = opt_str(body, "loadBalancingScheme")?.unwrap_or("EXTERNAL");
    let protocol = opt_str(body, "IPProtocol")?.unwrap_or("TCP");
    if scheme == "INTERNAL" {
        if target.is_some() {
            return Err(ApiError::invalid(
                "INTERNAL forwarding rules must reference a backendService, not a target",
            ));
        }
        if port_range.is_some() {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.portRange': INTERNAL forwarding rules use \
                 ports or allPorts",
            ));
        }
        if !all_ports && ports.is_empty() && matches!(protocol, "TCP" | "UDP" | "SCTP") {
            return Err(ApiError::invalid(
                "Required field 'resource.ports' not specified for an INTERNAL TCP/UDP rule",
            ));
        }
        if opt_str(body, "networkTier")?.is_some_and(|t| t != "PREMIUM") {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.networkTier': INTERNAL rules are PREMIUM",
            ));
        }
    } else {
        if opt_bool(body, "allowGlobalAccess")? {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.allowGlobalAccess': only INTERNAL rules",
            ));
        }
        if opt_str(body, "subnetwork")?.is_some() {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.subnetwork': only INTERNAL rules",
            ));
        }
        if target.is_some() && !ports.is_empty() {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.ports': target-pool rules use portRange",
            ));
        }
    }
    Ok(())
}

fn check_target_pool(body: &Value) -> Result<(), ApiError> {
    check_enum(
        "sessionAffinity",
        opt_str(body, "sessionAffinity")?,
        &["NONE", "CLIENT_IP", "CLIENT_IP_PROTO"],
    )?;
    if str_list(body, "healthChecks")?.len() > 1 {
        return Err(ApiError::invalid(
            "Invalid value for field 'resource.healthChecks': at most one health check",
        ));
    }
    str_list(body, "instances")?;
    Ok(())
}

fn check_backend_service(body: &Value) -> Result<(), ApiError> {
    let protocol = opt_str(body, "protocol")?;
    check_enum(
        "protocol",
        protocol,
        &[
            "HTTP",
            "HTTPS",
            "HTTP2",
            "TCP",
            "SSL",
            "UDP",
            "GRPC",
            "H2C",
            "UNSPECIFIED",
        ],
    )?;
    let scheme = opt_str(body, "loadBalancingScheme")?;
    check_enum("loadBalancingScheme", scheme, SCHEMES)?;
    check_enum(
        "sessionAffinity",
        opt_str(body, "sessionAffinity")?,
        SESSION_AFFINITIES,
    )?;
    if scheme == Some("INTERNAL") {
        if !matches!(protocol, Some("TCP" | "UDP" | "UNSPECIFIED")) {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.protocol': INTERNAL backend services use \
                 TCP, UDP or UNSPECIFIED",
            ));
        }
        if str_list(body, "healthChecks")?.len() != 1 {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.healthChecks': INTERNAL backend services \
                 need exactly one health check",
            ));
        }
    }
    if let Some(backends) = field(body, "backends") {
        let Some(list) = backends.as_array() else {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.backends'",
            ));
        };
        for backend in list {
            req_str(backend, "group").map_err(|_| {
                ApiError::invalid("Required field 'resource.backends[].group' not specified")
            })?;
            check_enum(
                "backends[].balancingMode",
                opt_str(backend, "balancingMode")?,
                &["UTILIZATION", "RATE", "CONNECTION", "CUSTOM_METRICS"],
            )?;
            if scheme == Some("INTERNAL")
                && opt_str(backend, "balancingMode")?.is_some_and(|m| m != "CONNECTION")
            {
                return Err(ApiError::invalid(
                    "Invalid value for field 'resource.backends[].balancingMode': INTERNAL \
                     backend services use CONNECTION",
                ));
            }
        }
    }
    Ok(())
}

fn check_probe_timing(body: &Value) -> Result<(), ApiError> {
    let interval = opt_int(body, "checkIntervalSec")?;
    let timeout = opt_int(body, "timeoutSec")?;
    check_range("checkIntervalSec", interval, 1, 300)?;
    check_range("timeoutSec", timeout, 1, 300)?;
    check_range(
        "healthyThreshold",
        opt_int(body, "healthyThreshold")?,
        1,
        10,
    )?;
    check_range(
        "unhealthyThreshold",
        opt_int(body, "unhealthyThreshold")?,
        1,
        10,
    )?;
    if timeout.unwrap_or(5) > interval.unwrap_or(5) {
        return Err(ApiError::invalid(
            "Invalid value for field 'resource.timeoutSec': must be less than or equal to \
             checkIntervalSec",
        ));
    }
    Ok(())
}

fn check_request_path(name: &str, path: Option<&str>) -> Result<(), ApiError> {
    match path {
        Some(p) if !p.starts_with('/') => Err(ApiError::invalid(format!(
            "Invalid value for field 'resource.{name}': '{p}'. Must start with '/'"
        ))),
        _ => Ok(()),
    }
}

fn check_http_health_check(body: &Value) -> Result<(), ApiError> {
    check_range("port", opt_int(body, "port")?, 1, 65535)?;
    check_request_path("requestPath", opt_str(body, "requestPath")?)?;
    check_probe_timing(body)
}

fn check_health_check(body: &Value) -> Result<(), ApiError> {
    let kind = req_str(body, "type")?;
    check_enum(
        "type",
        Some(kind),
        &[
            "TCP",
            "SSL",
            "HTTP",
            "HTTPS",
            "HTTP2",
            "GRPC",
            "GRPC_WITH_TLS",
        ],
    )?;
    if kind == "HTTP" {
        let Some(http) = field(body, "httpHealthCheck") else {
            return Err(ApiError::invalid(
                "Required field 'resource.httpHealthCheck' not specified for type HTTP",
            ));
        };
        check_range("httpHealthCheck.port", opt_int(http, "port")?, 1, 65535)?;
        check_request_path("httpHealthCheck.requestPath", opt_str(http, "requestPath")?)?;
    }
    check_probe_timing(body)
}

fn check_firewall(body: &Value) -> Result<(), ApiError> {
    let direction = opt_str(body, "direction")?;
    check_enum("direction", direction, &["INGRESS", "EGRESS"])?;
    check_range("priority", opt_int(body, "priority")?, 0, 65535)?;
    for name in ["sourceRanges", "destinationRanges"] {
        for cidr in str_list(body, name)? {
            check_cidr(name, &cidr)?;
        }
    }
    for tag in str_list(body, "targetTags")?
        .into_iter()
        .chain(str_list(body, "sourceTags")?)
    {
        check_name(&tag).map_err(|_| {
            ApiError::invalid(format!(
                "Invalid value for field 'resource.targetTags': '{tag}'"
            ))
        })?;
    }
    let rules = |name: &str| -> Result<Vec<Value>, ApiError> {
        match field(body, name) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items.clone()),
            Some(_) => Err(ApiError::invalid(format!(
                "Invalid value for field 'resource.{name}'"
            ))),
        }
    };
    let allowed = rules("allowed")?;
    let denied = rules("denied")?;
    if allowed.is_empty() == denied.is_empty() {
        return Err(ApiError::invalid(
            "Exactly one of 'resource.allowed' and 'resource.denied' must be specified",
        ));
    }
    for rule in allowed.iter().chain(&denied) {
        let protocol = req_str(rule, "IPProtocol").map_err(|_| {
            ApiError::invalid("Required field 'resource.allowed[].IPProtocol' not specified")
        })?;
        let named = ["tcp", "udp", "icmp", "esp", "ah", "sctp", "ipip", "all"];
        if !named.contains(&protocol) && protocol.parse::<u8>().is_err() {
            return Err(ApiError::invalid(format!(
                "Invalid value for field 'resource.allowed[].IPProtocol': '{protocol}'"
            )));
        }
        let ports = str_list(rule, "ports")?;
        if !ports.is_empty() && !matches!(protocol, "tcp" | "udp" | "sctp" | "all") {
            return Err(ApiError::invalid(format!(
                "Invalid value for field 'resource.allowed[].ports': ports are only allowed for \
                 tcp, udp, sctp and all, not '{protocol}'"
            )));
        }
        for port in ports {
            parse_port_range("allowed[].ports", &port)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_rfc1035_pattern() {
        let long = "a".repeat(63);
        let too_long = "a".repeat(64);
        let cases = [
            ("a", true),
            ("k8s-fw-a123", true),
            (long.as_str(), true),
            (too_long.as_str(), false),
            ("", false),
            ("1abc", false),
            ("abc-", false),
            ("Abc", false),
            ("a_b", false),
        ];
        for (name, ok) in cases {
            assert_eq!(check_name(name).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn port_ranges() {
        let cases = [
            ("80", Some((80, 80))),
            ("80-443", Some((80, 443))),
            ("443-80", None),
            ("0", None),
            ("65536", None),
            ("a-b", None),
            ("", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_port_range("p", input).ok(), want, "{input}");
        }
    }

    #[test]
    fn forwarding_rule_rules() {
        let base = json!({"name": "a1", "IPProtocol": "TCP", "portRange": "80-443", "target": "t"});
        assert!(check_body(Kind::ForwardingRule, &base).is_ok());
        let cases = [
            json!({"name": "a1", "IPProtocol": "tcp", "portRange": "80", "target": "t"}),
            json!({"name": "a1", "IPProtocol": "TCP", "portRange": "80"}),
            json!({"name": "a1", "portRange": "80", "ports": ["80"], "target": "t"}),
            json!({"name": "a1", "loadBalancingScheme": "INTERNAL", "ports": ["1","2","3","4","5","6"], "backendService": "b"}),
            json!({"name": "a1", "loadBalancingScheme": "INTERNAL", "backendService": "b"}),
            json!({"name": "a1", "loadBalancingScheme": "BOGUS", "allPorts": true, "backendService": "b"}),
            json!({"name": "a1", "portRange": "80", "target": "t", "allowGlobalAccess": true}),
            json!({"name": "a1", "portRange": "80", "target": "t", "IPAddress": "not-an-ip"}),
            json!({"name": "a1", "portRange": "80", "target": "t", "bogusField": 1}),
        ];
        for body in cases {
            assert!(check_body(Kind::ForwardingRule, &body).is_err(), "{body}");
        }
    }

    #[test]
    fn firewall_rules() {
        let ok = json!({"name": "k8s-fw-a", "allowed": [{"IPProtocol": "tcp", "ports": ["80", "8000-8080"]}], "sourceRanges": ["0.0.0.0/0"]});
        assert!(check_body(Kind::Firewall, &ok).is_ok());
        let cases = [
            json!({"name": "f", "sourceRanges": ["0.0.0.0/0"]}),
            json!({"name": "f", "allowed": [{"IPProtocol": "tcp"}], "denied": [{"IPProtocol": "tcp"}]}),
            json!({"name": "f", "allowed": [{"IPProtocol": "tcp"}], "sourceRanges": ["10.0.0.0/33"]}),
            json!({"name": "f", "allowed": [{"IPProtocol": "icmp", "ports": ["80"]}]}),
            json!({"name": "f", "allowed": [{"IPProtocol": "tcp", "ports": ["0"]}]}),
            json!({"name": "f", "allowed": [{"IPProtocol": "tcp"}], "direction": "IN"}),
            json!({"name": "f", "allowed": [{"IPProtocol": "tcp"}], "priority": 70000}),
        ];
        for body in cases {
            assert!(check_body(Kind::Firewall, &body).is_err(), "{body}");
        }
    }

    #[test]
    fn health_check_rules() {
        let ok = json!({"name": "hc", "type": "HTTP", "httpHealthCheck": {"port": 10256, "requestPath": "/healthz"}, "checkIntervalSec": 8, "timeoutSec": 1});
        assert!(check_body(Kind::HealthCheck, &ok).is_ok());
        let cases = [
            json!({"name": "hc", "type": "HTTP"}),
            json!({"name": "hc", "type": "HTTP", "httpHealthCheck": {"port": 0}}),
            json!({"name": "hc", "type": "HTTP", "httpHealthCheck": {"requestPath": "healthz"}}),
            json!({"name": "hc", "type": "HTTP", "httpHealthCheck": {}, "checkIntervalSec": 1, "timeoutSec": 5}),
        ];
        for body in cases {
            assert!(check_body(Kind::HealthCheck, &body).is_err(), "{body}");
        }
    }

    #[test]
    fn backend_service_rules() {
        let ok = json!({"name": "bs", "protocol": "TCP", "loadBalancingScheme": "INTERNAL", "healthChecks": ["h"], "backends": [{"group": "g", "balancingMode": "CONNECTION"}]});
        assert!(check_body(Kind::BackendService, &ok).is_ok());
        let cases = [
            json!({"name": "bs", "protocol": "HTTP", "loadBalancingScheme": "INTERNAL", "healthChecks": ["h"]}),
            json!({"name": "bs", "protocol": "TCP", "loadBalancingScheme": "INTERNAL", "healthChecks": []}),
            json!({"name": "bs", "protocol": "TCP", "loadBalancingScheme": "INTERNAL", "healthChecks": ["h"], "backends": [{"balancingMode": "CONNECTION"}]}),
            json!({"name": "bs", "protocol": "TCP", "loadBalancingScheme": "INTERNAL", "healthChecks": ["h"], "backends": [{"group": "g", "balancingMode": "RATE"}]}),
        ];
        for body in cases {
            assert!(check_body(Kind::BackendService, &body).is_err(), "{body}");
        }
    }
}

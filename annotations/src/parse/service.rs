//! The provider-neutral part: Service fields every cloud reads (ANNOTATIONS.md "Service spec
//! fields").

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::Reader;
use super::topology;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::common;
use crate::spec::{
    PortSpec, Protocol, ServiceKey, SessionAffinity, SourceRangeOrigin, SourceRanges, TargetPort,
    TopologyKey, TrafficPolicy,
};

/// Default `sessionAffinityConfig.clientIP.timeoutSeconds` (3 hours, seed 001).
pub(crate) const DEFAULT_AFFINITY_TIMEOUT: u32 = 10_800;
/// Largest affinity timeout the API server accepts (one day).
const MAX_AFFINITY_TIMEOUT: i32 = 86_400;
/// Longest Service port name: a DNS-1123 label, which is what the API server validates
/// Service port names against (the seeds give the character rules, not a length).
const MAX_PORT_NAME: usize = 63;

/// The core fields, before the provider decides scheme and extension.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) service: ServiceKey,
    pub(crate) ports: Vec<PortSpec>,
    pub(crate) requested_ip: Option<IpAddr>,
    pub(crate) source_ranges: SourceRanges,
    pub(crate) traffic_policy: TrafficPolicy,
    pub(crate) session_affinity: SessionAffinity,
    pub(crate) load_balancer_class: Option<String>,
    pub(crate) allocate_node_ports: bool,
    pub(crate) external_ips: Vec<IpAddr>,
    pub(crate) topology_keys: Vec<TopologyKey>,
    pub(crate) extra_tags: BTreeMap<String, String>,
}

impl Core {
    /// True when `externalTrafficPolicy: Local`.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self.traffic_policy, TrafficPolicy::Local { .. })
    }
}

pub(crate) fn parse_core(reader: &mut Reader<'_>, service: &Service) -> Core {
    let meta = &service.metadata;
    let default_spec = Default::default();
    let spec = service.spec.as_ref().unwrap_or(&default_spec);

    let service_key = ServiceKey {
        namespace: meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned()),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
    };
    if service_key.name.is_empty() {
        reader.diag.error(
            Location::field("metadata.name"),
            None,
            ErrorKind::Missing,
            "a Service needs a name",
        );
    }

    refuse_headless(reader, spec);
    let ports = parse_ports(reader, spec.ports.as_deref().unwrap_or_default());
    let requested_ip = spec
        .load_balancer_ip
        .as_deref()
        .filter(|ip| !ip.is_empty())
        .and_then(|raw| parse_ip(reader, "spec.loadBalancerIP", raw));
    let source_ranges = parse_source_ranges(reader, spec.load_balancer_source_ranges.as_deref());
    let traffic_policy = parse_traffic_policy(
        reader,
        spec.external_traffic_policy.as_deref(),
        spec.health_check_node_port,
    );
    let session_affinity = parse_session_affinity(reader, spec);
    let external_ips = spec
        .external_ips
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, raw)| parse_ip(reader, &format!("spec.externalIPs[{i}]"), raw))
        .collect();
    let topology_keys = topology::parse(
        reader,
        matches!(traffic_policy, TrafficPolicy::Local { .. }),
    );

    Core {
        service: service_key,
        ports,
        requested_ip,
        source_ranges,
        traffic_policy,
        session_affinity,
        load_balancer_class: spec.load_balancer_class.clone().filter(|c| !c.is_empty()),
        allocate_node_ports: spec.allocate_load_balancer_node_ports.unwrap_or(true),
        external_ips,
        topology_keys,
        extra_tags: BTreeMap::new(),
    }
}

/// A headless Service (`clusterIP: None`) has no cluster IP for a load balancer to forward to;
/// the API server refuses it as `type: LoadBalancer` (`ValidateService`), in these words, with
/// `clusterIP` normalised into `clusterIPs` first.
fn refuse_headless(reader: &mut Reader<'_>, spec: &k8s_openapi::api::core::v1::ServiceSpec) {
    // `isHeadlessService`: exactly `clusterIPs: [None]`, or only `clusterIP: None` given.
    let headless = match spec.cluster_ips.as_deref() {
        Some(list) if !list.is_empty() => matches!(list, [only] if only == "None"),
        _ => spec.cluster_ip.as_deref() == Some("None"),
    };
    if headless {
        reader.diag.error(
            Location::field("spec.clusterIPs[0]"),
            Some("None"),
            ErrorKind::Invalid,
            "may not be set to 'None' for LoadBalancer services",
        );
    }
}

fn parse_ip(reader: &mut Reader<'_>, path: &str, raw: &str) -> Option<IpAddr> {
    match raw.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            reader.diag.error(
                Location::field(path),
                Some(raw),
                ErrorKind::Invalid,
                "must be an IPv4 or IPv6 address",
            );
            None
        }
    }
}

/// True for a DNS-1123 label: lowercase alphanumerics and '-', alphanumeric at both ends.
pub(crate) fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= MAX_PORT_NAME
        && bytes.first().is_some_and(alnum)
        && bytes.last().is_some_and(alnum)
        && bytes.iter().all(|b| alnum(b) || *b == b'-')
}

fn port_number(reader: &mut Reader<'_>, path: String, value: i32) -> Option<u16> {
    match u16::try_from(value) {
        Ok(port) if port != 0 => Some(port),
        _ => {
            reader.diag.error(
                Location::field(path),
                Some(&value.to_string()),
                ErrorKind::OutOfRange,
                "must be a port number from 1 to 65535",
            );
            None
        }
    }
}

fn parse_ports(reader: &mut Reader<'_>, ports: &[ServicePort]) -> Vec<PortSpec> {
    if ports.is_empty() {
        reader.diag.error(
            Location::field("spec.ports"),
            None,
            ErrorKind::Missing,
            "a LoadBalancer Service needs at least one port",
        );
        return Vec::new();
    }
    let multi = ports.len() > 1;
    let mut names = HashSet::new();
    let mut pairs = HashSet::new();
    let mut parsed = Vec::with_capacity(ports.len());
    for (i, port) in ports.iter().enumerate() {
        let at = |field: &str| format!("spec.ports[{i}].{field}");
        let name = port.name.clone().filter(|n| !n.is_empty());
        match &name {
            None if multi => reader.diag.error(
                Location::field(at("name")),
                None,
                ErrorKind::Missing,
                "every port needs a name when a Service has more than one port",
            ),
            Some(n) if !is_dns_label(n) => reader.diag.error(
                Location::field(at("name")),
                Some(n),
                ErrorKind::Invalid,
                format!(
                    "must be at most {MAX_PORT_NAME} lowercase alphanumerics or '-', starting and \
                     ending with an alphanumeric (e.g. \"123-abc\", \"web\")"
                ),
            ),
            Some(n) if !names.insert(n.clone()) => reader.diag.error(
                Location::field(at("name")),
                Some(n),
                ErrorKind::Conflict,
                "port names must be unique within the Service",
            ),
            _ => {}
        }
        let protocol = match port.protocol.as_deref() {
            None | Some("") | Some("TCP") => Protocol::Tcp,
            Some("UDP") => Protocol::Udp,
            Some("SCTP") => Protocol::Sctp,
            Some(other) => {
                reader.diag.error(
                    Location::field(at("protocol")),
                    Some(other),
                    ErrorKind::Invalid,
                    "must be \"TCP\", \"UDP\" or \"SCTP\" (upper case)",
                );
                Protocol::Tcp
            }
        };
        let number = port_number(reader, at("port"), port.port);
        let node_port = match port.node_port {
            None | Some(0) => None,
            Some(n) => port_number(reader, at("nodePort"), n),
        };
        let target_port = match &port.target_port {
            // The API server defaults an absent, zero or empty targetPort to the port, so the
            // controller never sees these: reading them the same way keeps lint's verdict equal
            // to the controller's on the raw manifest.
            None | Some(IntOrString::Int(0)) => number.map(TargetPort::Number),
            Some(IntOrString::String(s)) if s.is_empty() => number.map(TargetPort::Number),
            Some(IntOrString::Int(n)) => {
                port_number(reader, at("targetPort"), *n).map(TargetPort::Number)
            }
            Some(IntOrString::String(s)) => match s.parse::<i32>() {
                // The API server accepts a numeric string here; treat it as the number.
                Ok(n) => port_number(reader, at("targetPort"), n).map(TargetPort::Number),
                Err(_) if s.len() <= 15 && !s.is_empty() => Some(TargetPort::Name(s.clone())),
                Err(_) => {
                    reader.diag.error(
                        Location::field(at("targetPort")),
                        Some(s),
                        ErrorKind::Invalid,
                        "must be a port number or a container port name (IANA_SVC_NAME, at most 15 characters)",
                    );
                    None
                }
            },
        };
        let Some(number) = number else { continue };
        if !pairs.insert((number, protocol)) {
            reader.diag.error(
                Location::field(at("port")),
                Some(&number.to_string()),
                ErrorKind::Conflict,
                format!("port {number}/{protocol:?} appears twice; each port and protocol pair must be unique"),
            );
        }
        parsed.push(PortSpec {
            name,
            protocol,
            port: number,
            node_port,
            target_port: target_port.unwrap_or(TargetPort::Number(number)),
        });
    }
    parsed
}

/// `spec.loadBalancerSourceRanges`, else the annotation fallback, else everything.
fn parse_source_ranges(reader: &mut Reader<'_>, field: Option<&[String]>) -> SourceRanges {
    let annotation = reader.get(common::SOURCE_RANGES);
    if let Some(ranges) = field.filter(|r| !r.is_empty()) {
        if annotation.is_some_and(|a| !a.trim().is_empty()) {
            reader.diag.warn(
                Location::annotation(common::SOURCE_RANGES),
                annotation,
                "ignored: spec.loadBalancerSourceRanges is set and takes precedence",
            );
        }
        let cidrs = ranges
            .iter()
            .enumerate()
            .filter_map(|(i, raw)| {
                parse_cidr(
                    reader,
                    Location::field(format!("spec.loadBalancerSourceRanges[{i}]")),
                    raw,
                )
            })
            .collect();
        return SourceRanges {
            cidrs,
            origin: SourceRangeOrigin::Spec,
        };
    }
    let Some(raw) = annotation.filter(|a| !a.trim().is_empty()) else {
        return SourceRanges {
            cidrs: Vec::new(),
            origin: SourceRangeOrigin::Default,
        };
    };
    let cidrs = raw
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .filter_map(|item| parse_cidr(reader, Location::annotation(common::SOURCE_RANGES), item))
        .collect();
    SourceRanges {
        cidrs,
        origin: SourceRangeOrigin::Annotation,
    }
}

/// A CIDR; host bits are cleared with a warning, as the Go parser upstream uses does silently.
pub(crate) fn parse_cidr(reader: &mut Reader<'_>, location: Location, raw: &str) -> Option<IpNet> {
    match raw.trim().parse::<IpNet>() {
        Ok(net) => {
            let network = net.trunc();
            if network != net {
                reader.diag.warn(
                    location,
                    Some(raw),
                    format!("host bits are set; the range used is {network}"),
                );
            }
            Some(network)
        }
        Err(_) => {
            reader.diag.error(
                location,
                Some(raw),
                ErrorKind::Invalid,
                "must be a CIDR such as \"143.231.0.0/16\" or \"2001:db8::/32\"",
            );
            None
        }
    }
}

fn parse_traffic_policy(
    reader: &mut Reader<'_>,
    policy: Option<&str>,
    health_check_node_port: Option<i32>,
) -> TrafficPolicy {
    let hcnp = match health_check_node_port {
        None | Some(0) => None,
        Some(n) => port_number(reader, "spec.healthCheckNodePort".to_owned(), n),
    };
    match policy {
        None | Some("") | Some("Cluster") => {
            if let Some(port) = hcnp {
                reader.diag.error(
                    Location::field("spec.healthCheckNodePort"),
                    Some(&port.to_string()),
                    ErrorKind::Conflict,
                    "may only be set with externalTrafficPolicy: Local",
                );
            }
            TrafficPolicy::Cluster
        }
        Some("Local") => TrafficPolicy::Local {
            health_check_node_port: hcnp,
        },
        Some(other) => {
            reader.diag.error(
                Location::field("spec.externalTrafficPolicy"),
                Some(other),
                ErrorKind::Invalid,
                "must be \"Cluster\" or \"Local\"",
            );
            TrafficPolicy::Cluster
        }
    }
}

fn parse_session_affinity(
    reader: &mut Reader<'_>,
    spec: &k8s_openapi::api::core::v1::ServiceSpec,
) -> SessionAffinity {
    let timeout = spec
        .session_affinity_config
        .as_ref()
        .and_then(|c| c.client_ip.as_ref())
        .and_then(|c| c.timeout_seconds);
    match spec.session_affinity.as_deref() {
        None | Some("") | Some("None") => {
            if let Some(t) = timeout {
                reader.diag.warn(
                    Location::field("spec.sessionAffinityConfig.clientIP.timeoutSeconds"),
                    Some(&t.to_string()),
                    "ignored: sessionAffinity is None",
                );
            }
            SessionAffinity::None
        }
        Some("ClientIP") => {
            let timeout_seconds = match timeout {
                None => DEFAULT_AFFINITY_TIMEOUT,
                Some(t) if (1..=MAX_AFFINITY_TIMEOUT).contains(&t) => t.unsigned_abs(),
                Some(t) => {
                    reader.diag.error(
                        Location::field("spec.sessionAffinityConfig.clientIP.timeoutSeconds"),
                        Some(&t.to_string()),
                        ErrorKind::OutOfRange,
                        format!("must be from 1 to {MAX_AFFINITY_TIMEOUT} seconds (default {DEFAULT_AFFINITY_TIMEOUT})"),
                    );
                    DEFAULT_AFFINITY_TIMEOUT
                }
            };
            SessionAffinity::ClientIP { timeout_seconds }
        }
        Some(other) => {
            reader.diag.error(
                Location::field("spec.sessionAffinity"),
                Some(other),
                ErrorKind::Invalid,
                "must be \"None\" or \"ClientIP\"",
            );
            SessionAffinity::None
        }
    }
}

/// Refuses what one cloud's load balancers cannot carry, before any cloud call: SCTP ports
/// (`sctp` says why) and, when `mixed` says why, TCP and UDP in one Service.
pub(crate) fn refuse_protocols(
    reader: &mut Reader<'_>,
    ports: &[PortSpec],
    sctp: &str,
    mixed: Option<&str>,
) {
    for (i, port) in ports.iter().enumerate() {
        if port.protocol == Protocol::Sctp {
            reader.diag.error(
                Location::field(format!("spec.ports[{i}].protocol")),
                Some("SCTP"),
                ErrorKind::Unsupported,
                sctp,
            );
        }
    }
    let Some(mixed) = mixed else { return };
    let carried: Vec<&'static str> = ports
        .iter()
        .filter_map(|p| match p.protocol {
            Protocol::Tcp => Some("TCP"),
            Protocol::Udp => Some("UDP"),
            Protocol::Sctp => None,
        })
        .collect();
    if carried.windows(2).any(|w| w[0] != w[1]) {
        reader.diag.error(
            Location::field("spec.ports"),
            Some(&carried.join(",")),
            ErrorKind::Unsupported,
            mixed,
        );
    }
}

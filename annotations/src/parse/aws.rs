//! AWS annotations (reference aws.md §1, §4.1, §4.4, §4.5).
//!
//! Value policy, decided per annotation (ANNOTATIONS.md): accept what upstream accepts
//! (*compatible*), reject early what AWS would reject at sync time (*early*), and warn where
//! upstream silently does something surprising (*loud*). Each decision is on the function that
//! reads the annotation.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Service;

use super::Reader;
use super::service::Core;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::aws as key;
use crate::spec::{
    AccessLog, AwsHealthCheck, AwsLoadBalancerKind, AwsSpec, BackendProtocol, ClbListener,
    ClbProtocol, ConnectionDraining, HealthCheckPort, HealthCheckProtocol, NlbListener,
    NlbProtocol, PortSpec, Protocol, Scheme, SessionAffinity, SourceRangeOrigin,
    TargetGroupAttributes, TrafficPolicy,
};
use crate::value::join_allowed;

/// Upstream CLB idle timeout default (seconds).
const DEFAULT_IDLE_TIMEOUT: u32 = 60;
/// Health-check path for `externalTrafficPolicy: Local` (kube-proxy's health server).
const LOCAL_HEALTH_PATH: &str = "/healthz";

pub(crate) fn parse(
    reader: &mut Reader<'_>,
    core: &mut Core,
    service: &Service,
) -> (AwsSpec, Scheme) {
    let kind = parse_kind(reader);
    check_type_change(reader, kind, service);
    let scheme = parse_internal(reader);

    if kind == AwsLoadBalancerKind::ImplementedElsewhere {
        // The aws-load-balancer-controller reads these annotations with its own semantics;
        // judging them by the legacy rules would produce false errors.
        reader.diag.warn(
            Location::annotation(key::TYPE),
            reader.all().get(key::TYPE).map(String::as_str),
            "owned by aws-load-balancer-controller: kube-lb builds no load balancer for this Service",
        );
        mark_all_aws_read(reader);
        return (empty_spec(kind, core), scheme);
    }

    check_core_fields(reader, core, kind);
    let is_nlb = kind == AwsLoadBalancerKind::Nlb;

    let cert = parse_ssl_cert(reader);
    let ssl_ports = parse_ssl_ports(reader, &core.ports, cert.is_some());
    let backend = parse_backend_protocol(
        reader,
        kind,
        cert.is_some() && !ssl_ports_select_none(&ssl_ports, &core.ports),
    );
    let policy = parse_ssl_negotiation_policy(reader, kind);

    let mut clb_listeners = Vec::new();
    let mut nlb_listeners = Vec::new();
    for port in &core.ports {
        let selected = cert.is_some() && ssl_ports.selects(port);
        if is_nlb && selected && port.protocol == Protocol::Udp {
            // Early: NLB has no TLS over UDP; upstream silently builds a plain UDP listener,
            // so the certificate the user asked for would protect nothing.
            let at = if reader.all().contains_key(key::SSL_PORTS) {
                key::SSL_PORTS
            } else {
                key::SSL_CERT
            };
            reader.diag.error(
                Location::annotation(at),
                reader.all().get(at).map(String::as_str),
                ErrorKind::Unsupported,
                format!(
                    "port {} is UDP and an NLB cannot terminate TLS on UDP; list only TCP ports in \
                     ssl-ports or remove ssl-cert",
                    port.port
                ),
            );
        }
        if is_nlb {
            nlb_listeners.push(nlb_listener(
                port,
                selected,
                &cert,
                backend.effective,
                &policy,
            ));
        } else if let Some(listener) = clb_listener(port, selected, &cert, backend.effective) {
            clb_listeners.push(listener);
        }
    }
    if let Some(policy) = policy.as_deref() {
        let any_tls = clb_listeners
            .iter()
            .any(|l| matches!(l.lb_protocol, ClbProtocol::Ssl | ClbProtocol::Https))
            || nlb_listeners.iter().any(|l| l.protocol == NlbProtocol::Tls);
        if !any_tls {
            reader.diag.warn(
                Location::annotation(key::SSL_NEGOTIATION_POLICY),
                Some(policy),
                "no effect: no listener uses TLS (set ssl-cert, and ssl-ports if not all ports)",
            );
        }
    }

    let proxy_protocol = parse_proxy_protocol(reader, kind);
    let health_check = parse_health_check(reader, kind, core, backend.effective);
    let access_log = parse_access_log(reader, kind);
    let connection_draining = parse_draining(reader, kind);
    let idle_timeout_seconds = parse_idle_timeout(reader, kind);
    let cross_zone = reader.go_bool(key::CROSS_ZONE, false);
    let additional_tags = parse_tags(reader);
    core.extra_tags.extend(additional_tags.clone());
    let extra_security_groups = parse_extra_security_groups(reader, kind);
    let security_groups = parse_security_groups(reader, kind);
    let subnets = parse_subnets(reader);
    let (eip_allocations, private_ipv4_addresses) =
        parse_subnet_mappings(reader, kind, scheme, subnets.len());
    let target_node_labels = reader
        .key_values(key::TARGET_NODE_LABELS)
        .unwrap_or_default();
    let target_group_attributes = parse_target_group_attributes(reader, kind, &core.ports);
    warn_unknown_aws_keys(reader);

    let spec = AwsSpec {
        kind,
        clb_listeners,
        nlb_listeners,
        backend_protocol: backend.effective,
        ssl_certificate: cert,
        ssl_negotiation_policy: policy,
        proxy_protocol,
        health_check,
        access_log,
        connection_draining,
        idle_timeout_seconds,
        cross_zone,
        additional_tags,
        extra_security_groups,
        security_groups,
        subnets,
        eip_allocations,
        private_ipv4_addresses,
        target_node_labels,
        target_group_attributes,
    };
    (spec, scheme)
}

fn empty_spec(kind: AwsLoadBalancerKind, core: &Core) -> AwsSpec {
    AwsSpec {
        kind,
        clb_listeners: Vec::new(),
        nlb_listeners: Vec::new(),
        backend_protocol: None,
        ssl_certificate: None,
        ssl_negotiation_policy: None,
        proxy_protocol: false,
        health_check: default_health_check(AwsLoadBalancerKind::Nlb, core, None),
        access_log: AccessLog::default(),
        connection_draining: ConnectionDraining::default(),
        idle_timeout_seconds: DEFAULT_IDLE_TIMEOUT,
        cross_zone: false,
        additional_tags: BTreeMap::new(),
        extra_security_groups: Vec::new(),
        security_groups: Vec::new(),
        subnets: Vec::new(),
        eip_allocations: Vec::new(),
        private_ipv4_addresses: Vec::new(),
        target_node_labels: BTreeMap::new(),
        target_group_attributes: TargetGroupAttributes::default(),
    }
}

fn mark_all_aws_read(reader: &mut Reader<'_>) {
    let keys: Vec<String> = reader
        .all()
        .keys()
        .filter(|k| k.starts_with(key::PREFIX))
        .cloned()
        .collect();
    for k in keys {
        reader.get_dynamic(&k);
    }
}

/// `type`: exactly `nlb` → NLB; `nlb-ip`/`external` → another controller; anything else →
/// Classic (compatible). Loud: a value that is not an obvious way of saying "classic" warns,
/// because a typo such as `NLB` silently builds a Classic ELB upstream.
fn parse_kind(reader: &mut Reader<'_>) -> AwsLoadBalancerKind {
    let Some(raw) = reader.get(key::TYPE) else {
        return AwsLoadBalancerKind::Classic;
    };
    if let Ok(kind) = raw.parse::<AwsLoadBalancerKind>()
        && kind != AwsLoadBalancerKind::Classic
    {
        return kind;
    }
    let plain_classic = ["", "classic", "clb", "elb"]
        .iter()
        .any(|c| raw.eq_ignore_ascii_case(c));
    if !plain_classic {
        let hint = if raw.trim().eq_ignore_ascii_case("nlb") {
            " (did you mean \"nlb\"? the comparison is exact and lowercase)"
        } else {
            ""
        };
        reader.diag.warn(
            Location::annotation(key::TYPE),
            Some(raw),
            format!("not \"nlb\", \"nlb-ip\" or \"external\": upstream builds a Classic ELB{hint}"),
        );
    }
    AwsLoadBalancerKind::Classic
}

/// Early: upstream refuses to switch an existing load balancer between Classic and NLB; the
/// kind is recognisable from the hostname in `status.loadBalancer.ingress[0]`.
fn check_type_change(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind, service: &Service) {
    let hostname = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|ingress| ingress.first())
        .and_then(|ingress| ingress.hostname.as_deref());
    let Some(hostname) = hostname else { return };
    let existing = if hostname.ends_with(".elb.amazonaws.com")
        || hostname.ends_with(".elb.amazonaws.com.cn")
    {
        AwsLoadBalancerKind::Classic
    } else if hostname.contains(".elb.") {
        AwsLoadBalancerKind::Nlb
    } else {
        return;
    };
    if kind != AwsLoadBalancerKind::ImplementedElsewhere && existing != kind {
        reader.diag.error(
            Location::annotation(key::TYPE),
            reader.all().get(key::TYPE).map(String::as_str).or(Some("")),
            ErrorKind::Conflict,
            format!(
                "the existing load balancer {hostname} is {existing}; the type cannot change after \
                 creation (delete and recreate the Service)"
            ),
        );
    }
}

/// `internal`: compatible — empty/absent or exactly `"false"` is internet-facing, every other
/// value is internal (old clusters carry `"0.0.0.0/0"`). Loud: other spellings of false
/// (`"False"`, `"0"`, …) make an internal LB upstream, which is rarely what was meant.
fn parse_internal(reader: &mut Reader<'_>) -> Scheme {
    match reader.get(key::INTERNAL) {
        None | Some("") | Some("false") => Scheme::External,
        Some(raw) => {
            if super::reader::go_parse_bool(raw) == Some(false) {
                reader.diag.warn(
                    Location::annotation(key::INTERNAL),
                    Some(raw),
                    "builds an INTERNAL load balancer: upstream treats every value except exactly \
                     \"false\" as internal",
                );
            }
            Scheme::Internal
        }
    }
}

/// Spec fields AWS rejects (early) and protocol rules (§1.2 list).
fn check_core_fields(reader: &mut Reader<'_>, core: &Core, kind: AwsLoadBalancerKind) {
    if let Some(ip) = core.requested_ip {
        reader.diag.error(
            Location::field("spec.loadBalancerIP"),
            Some(&ip.to_string()),
            ErrorKind::Unsupported,
            "AWS load balancers cannot use a requested IP; remove it (NLB: use the eip-allocations \
             or private-ipv4-addresses annotation)",
        );
    }
    if let SessionAffinity::ClientIP { .. } = core.session_affinity {
        reader.diag.error(
            Location::field("spec.sessionAffinity"),
            Some("ClientIP"),
            ErrorKind::Unsupported,
            "AWS load balancers support only \"None\"",
        );
    }
    if !core.allocate_node_ports && core.ports.iter().any(|p| p.node_port.is_none()) {
        reader.diag.error(
            Location::field("spec.allocateLoadBalancerNodePorts"),
            Some("false"),
            ErrorKind::Unsupported,
            "AWS instance targets need node ports: upstream skips ports without one and the load \
             balancer would have no listeners",
        );
    }
    for (i, cidr) in core.source_ranges.cidrs.iter().enumerate() {
        if cidr.addr().is_ipv6() {
            let location = match core.source_ranges.origin {
                SourceRangeOrigin::Annotation => {
                    Location::annotation(crate::keys::common::SOURCE_RANGES)
                }
                _ => Location::field(format!("spec.loadBalancerSourceRanges[{i}]")),
            };
            reader.diag.error(
                location,
                Some(&cidr.to_string()),
                ErrorKind::Unsupported,
                "only IPv4 ranges are supported on AWS (security-group IpRanges)",
            );
        }
    }
    let protocols: Vec<Protocol> = core.ports.iter().map(|p| p.protocol).collect();
    if protocols.windows(2).any(|w| w[0] != w[1]) {
        reader.diag.error(
            Location::field("spec.ports"),
            Some(&protocol_list(&protocols)),
            ErrorKind::Unsupported,
            "mixed protocols are not supported on AWS: every port must use the same protocol",
        );
    }
    for (i, port) in core.ports.iter().enumerate() {
        let allowed = matches!(
            (kind, port.protocol),
            (AwsLoadBalancerKind::Classic, Protocol::Tcp)
                | (AwsLoadBalancerKind::Nlb, Protocol::Tcp | Protocol::Udp)
        );
        if !allowed {
            let what = if kind == AwsLoadBalancerKind::Nlb {
                "an NLB accepts TCP or UDP"
            } else {
                "a Classic ELB accepts TCP only (use aws-load-balancer-type: nlb for UDP)"
            };
            reader.diag.error(
                Location::field(format!("spec.ports[{i}].protocol")),
                Some(&format!("{:?}", port.protocol).to_uppercase()),
                ErrorKind::Unsupported,
                what,
            );
        }
    }
}

fn protocol_list(protocols: &[Protocol]) -> String {
    protocols
        .iter()
        .map(|p| format!("{p:?}").to_uppercase())
        .collect::<Vec<_>>()
        .join(",")
}

/// `ssl-cert`: one ARN, not split on commas; early error for a comma or something that is not
/// an ARN (AWS returns CertificateNotFound at sync time).
fn parse_ssl_cert(reader: &mut Reader<'_>) -> Option<String> {
    let raw = reader.non_empty(key::SSL_CERT)?;
    if raw.contains(',') || !raw.starts_with("arn:") {
        reader.diag.error(
            Location::annotation(key::SSL_CERT),
            Some(raw),
            ErrorKind::Invalid,
            "must be exactly one ACM or IAM certificate ARN (\"arn:aws:acm:…\" or \"arn:aws:iam:…\")",
        );
        return None;
    }
    Some(raw.to_owned())
}

/// Which ports `ssl-ports` selects.
#[derive(Debug)]
enum SslPorts {
    All,
    Some {
        numbers: Vec<u16>,
        names: Vec<String>,
    },
}

impl SslPorts {
    fn selects(&self, port: &PortSpec) -> bool {
        match self {
            SslPorts::All => true,
            SslPorts::Some { numbers, names } => {
                numbers.contains(&port.port)
                    || port
                        .name
                        .as_deref()
                        .is_some_and(|n| names.iter().any(|m| m.eq_ignore_ascii_case(n)))
            }
        }
    }
}

fn ssl_ports_select_none(ssl: &SslPorts, ports: &[PortSpec]) -> bool {
    !ports.iter().any(|p| ssl.selects(p))
}

/// `ssl-ports`: numbers and/or names; `""`/`"*"` = all. Upstream does not trim, so
/// `"443, 8443"` silently drops 8443; kube-lb trims and warns (loud). Entries matching no port
/// warn; upper-case names warn (upstream compares against the lower-cased port name and never
/// matches them; kube-lb matches case-insensitively). `"*"` among other entries is a port name
/// upstream (matching nothing); kube-lb warns and treats the list as "all".
fn parse_ssl_ports(reader: &mut Reader<'_>, ports: &[PortSpec], has_cert: bool) -> SslPorts {
    let Some(raw) = reader.get(key::SSL_PORTS) else {
        return SslPorts::All;
    };
    if !has_cert && !raw.trim().is_empty() {
        reader.diag.warn(
            Location::annotation(key::SSL_PORTS),
            Some(raw),
            "no effect without the ssl-cert annotation",
        );
    }
    let items = reader.list(key::SSL_PORTS, true).unwrap_or_default();
    if items.is_empty() || items == ["*"] {
        return SslPorts::All;
    }
    if items.contains(&"*") {
        reader.diag.warn(
            Location::annotation(key::SSL_PORTS),
            Some(raw),
            "\"*\" mixed with other entries: upstream reads it as a port name that matches nothing; \
             kube-lb treats the list as all ports (write just \"*\")",
        );
        return SslPorts::All;
    }
    let mut numbers = Vec::new();
    let mut names = Vec::new();
    for item in items {
        if let Ok(n) = item.parse::<u16>() {
            if !ports.iter().any(|p| p.port == n) {
                reader.diag.warn(
                    Location::annotation(key::SSL_PORTS),
                    Some(raw),
                    format!("port {n} is not a port of this Service; it is ignored"),
                );
            }
            numbers.push(n);
            continue;
        }
        if item.chars().any(|c| c.is_ascii_uppercase()) {
            reader.diag.warn(
                Location::annotation(key::SSL_PORTS),
                Some(raw),
                format!(
                    "port name {item:?} has upper case: upstream compares with the lower-cased port \
                     name and never matches it; write {:?}",
                    item.to_ascii_lowercase()
                ),
            );
        }
        if !ports.iter().any(|p| {
            p.name
                .as_deref()
                .is_some_and(|n| n.eq_ignore_ascii_case(item))
        }) {
            reader.diag.warn(
                Location::annotation(key::SSL_PORTS),
                Some(raw),
                format!("{item:?} is neither a port number nor a port name of this Service; it is ignored"),
            );
        }
        names.push(item.to_owned());
    }
    SslPorts::Some { numbers, names }
}

struct Backend {
    effective: Option<BackendProtocol>,
}

/// `backend-protocol`: CLB reads http/https/ssl/tcp. With a certificate on some port, any other
/// value is an error upstream too (early, same). Without one, upstream silently makes it TCP:
/// kube-lb does the same and warns (loud). NLB only uses `ssl`; other values warn as ignored.
fn parse_backend_protocol(
    reader: &mut Reader<'_>,
    kind: AwsLoadBalancerKind,
    tls_in_use: bool,
) -> Backend {
    let Some(raw) = reader.get(key::BACKEND_PROTOCOL).filter(|r| !r.is_empty()) else {
        return Backend { effective: None };
    };
    match raw.parse::<BackendProtocol>() {
        Ok(protocol) => {
            if kind == AwsLoadBalancerKind::Nlb
                && matches!(protocol, BackendProtocol::Http | BackendProtocol::Https)
            {
                reader.diag.warn(
                    Location::annotation(key::BACKEND_PROTOCOL),
                    Some(raw),
                    "ignored on an NLB: only \"ssl\" changes anything (TLS target groups)",
                );
            }
            Backend {
                effective: Some(protocol),
            }
        }
        Err(error) => {
            let hint = if raw.to_ascii_lowercase().parse::<BackendProtocol>().is_ok() {
                " (values are lower case)"
            } else {
                ""
            };
            if tls_in_use && kind == AwsLoadBalancerKind::Classic {
                reader.diag.error(
                    Location::annotation(key::BACKEND_PROTOCOL),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("must be {}{hint}", error.allowed_text()),
                );
            } else {
                reader.diag.warn(
                    Location::annotation(key::BACKEND_PROTOCOL),
                    Some(raw),
                    format!(
                        "not {}: upstream silently uses tcp{hint}",
                        error.allowed_text()
                    ),
                );
            }
            Backend { effective: None }
        }
    }
}

/// `ssl-negotiation-policy`: on a CLB an empty value still triggers policy management and AWS
/// rejects the empty name (early). On an NLB an empty value leaves the policy unset.
fn parse_ssl_negotiation_policy(
    reader: &mut Reader<'_>,
    kind: AwsLoadBalancerKind,
) -> Option<String> {
    let raw = reader.get(key::SSL_NEGOTIATION_POLICY)?;
    let value = raw.trim();
    if value.is_empty() {
        if kind == AwsLoadBalancerKind::Classic {
            reader.diag.error(
                Location::annotation(key::SSL_NEGOTIATION_POLICY),
                Some(raw),
                ErrorKind::Missing,
                "must name a predefined policy such as \"ELBSecurityPolicy-TLS-1-2-2017-01\" (an empty \
                 name fails on a Classic ELB); remove the annotation to keep the default",
            );
        }
        return None;
    }
    Some(value.to_owned())
}

/// Classic ELB listener for one port (aws.md §4.1).
fn clb_listener(
    port: &PortSpec,
    ssl: bool,
    cert: &Option<String>,
    backend: Option<BackendProtocol>,
) -> Option<ClbListener> {
    let (lb_protocol, instance_protocol) = if ssl {
        match backend {
            None | Some(BackendProtocol::Tcp) => (ClbProtocol::Ssl, ClbProtocol::Tcp),
            Some(BackendProtocol::Ssl) => (ClbProtocol::Ssl, ClbProtocol::Ssl),
            Some(BackendProtocol::Http) => (ClbProtocol::Https, ClbProtocol::Http),
            Some(BackendProtocol::Https) => (ClbProtocol::Https, ClbProtocol::Https),
        }
    } else if backend == Some(BackendProtocol::Http) {
        (ClbProtocol::Http, ClbProtocol::Http)
    } else {
        (ClbProtocol::Tcp, ClbProtocol::Tcp)
    };
    Some(ClbListener {
        lb_port: port.port,
        lb_protocol,
        instance_port: port.node_port,
        instance_protocol,
        ssl_certificate_id: if ssl { cert.clone() } else { None },
    })
}

/// NLB listener for one port (aws.md §4.5): TLS when not UDP and selected; TLS target group
/// only with `backend-protocol: ssl`.
fn nlb_listener(
    port: &PortSpec,
    selected: bool,
    cert: &Option<String>,
    backend: Option<BackendProtocol>,
    policy: &Option<String>,
) -> NlbListener {
    let base = if port.protocol == Protocol::Udp {
        NlbProtocol::Udp
    } else {
        NlbProtocol::Tcp
    };
    let tls = selected && base == NlbProtocol::Tcp;
    let target_protocol = if tls && backend == Some(BackendProtocol::Ssl) {
        NlbProtocol::Tls
    } else {
        base
    };
    NlbListener {
        port: port.port,
        protocol: if tls { NlbProtocol::Tls } else { base },
        node_port: port.node_port,
        target_protocol,
        certificate_arn: if tls { cert.clone() } else { None },
        ssl_policy: if tls { policy.clone() } else { None },
    }
}

/// `proxy-protocol`: only `"*"` (early error otherwise, as upstream). NLB ignores it (loud).
fn parse_proxy_protocol(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> bool {
    let Some(raw) = reader.get(key::PROXY_PROTOCOL).filter(|r| !r.is_empty()) else {
        return false;
    };
    if kind == AwsLoadBalancerKind::Nlb {
        reader.diag.warn(
            Location::annotation(key::PROXY_PROTOCOL),
            Some(raw),
            "ignored on an NLB: use target-group-attributes \"proxy_protocol_v2.enabled=true\"",
        );
        return false;
    }
    if raw != "*" {
        reader.diag.error(
            Location::annotation(key::PROXY_PROTOCOL),
            Some(raw),
            ErrorKind::Invalid,
            "the only supported value is \"*\" (PROXY protocol on every port)",
        );
        return false;
    }
    true
}

/// Upstream defaults before annotations (§4.4 CLB, §4.5 NLB).
fn default_health_check(
    kind: AwsLoadBalancerKind,
    core: &Core,
    backend: Option<BackendProtocol>,
) -> AwsHealthCheck {
    let local_port = match core.traffic_policy {
        TrafficPolicy::Local {
            health_check_node_port: Some(port),
        } => Some(HealthCheckPort::Number(port)),
        TrafficPolicy::Local {
            health_check_node_port: None,
        } => Some(HealthCheckPort::HealthCheckNodePort),
        TrafficPolicy::Cluster => None,
    };
    match (kind, local_port) {
        (AwsLoadBalancerKind::Classic, Some(port)) => AwsHealthCheck {
            protocol: HealthCheckProtocol::Http,
            port,
            path: Some(LOCAL_HEALTH_PATH.to_owned()),
            healthy_threshold: 2,
            unhealthy_threshold: 6,
            interval_seconds: 10,
            timeout_seconds: 5,
        },
        (AwsLoadBalancerKind::Classic, None) => AwsHealthCheck {
            protocol: if matches!(backend, Some(BackendProtocol::Https | BackendProtocol::Ssl)) {
                HealthCheckProtocol::Ssl
            } else {
                HealthCheckProtocol::Tcp
            },
            port: HealthCheckPort::TrafficPort,
            path: None,
            healthy_threshold: 2,
            unhealthy_threshold: 6,
            interval_seconds: 10,
            timeout_seconds: 5,
        },
        (_, Some(port)) => AwsHealthCheck {
            protocol: HealthCheckProtocol::Http,
            port,
            path: Some(LOCAL_HEALTH_PATH.to_owned()),
            healthy_threshold: 2,
            unhealthy_threshold: 2,
            interval_seconds: 10,
            timeout_seconds: 10,
        },
        (_, None) => AwsHealthCheck {
            protocol: HealthCheckProtocol::Tcp,
            port: HealthCheckPort::TrafficPort,
            path: Some("/".to_owned()),
            healthy_threshold: 3,
            unhealthy_threshold: 3,
            interval_seconds: 30,
            timeout_seconds: 10,
        },
    }
}

/// Health check (§4.4/§4.5): defaults, then protocol, port, path overrides, then numbers.
///
/// - protocol: CLB upstream uses the value verbatim; kube-lb accepts any case of
///   TCP/HTTP/HTTPS/SSL and warns on non-upper-case (upstream would reconfigure every sync).
///   NLB: TCP/HTTP/HTTPS in any case (upstream upper-cases); SSL is an error as upstream.
/// - port: `traffic-port` or 1–65535, early error otherwise. On a CLB with `Local`, literally
///   `traffic-port` switches to the first listener's node port (upstream special case).
/// - path: only for HTTP/HTTPS (warned as ignored otherwise); must start with `/` (early).
/// - thresholds 2–10, interval 5–300, timeout 2–60 and below the interval (early: AWS rejects).
///   NLB timeouts are parsed but never sent upstream (warned).
fn parse_health_check(
    reader: &mut Reader<'_>,
    kind: AwsLoadBalancerKind,
    core: &Core,
    backend: Option<BackendProtocol>,
) -> AwsHealthCheck {
    let mut hc = default_health_check(kind, core, backend);
    let is_nlb = kind == AwsLoadBalancerKind::Nlb;

    if let Some(raw) = reader.non_empty(key::HEALTHCHECK_PROTOCOL) {
        match raw.to_ascii_uppercase().parse::<HealthCheckProtocol>() {
            Ok(HealthCheckProtocol::Ssl) if is_nlb => reader.diag.error(
                Location::annotation(key::HEALTHCHECK_PROTOCOL),
                Some(raw),
                ErrorKind::Unsupported,
                "an NLB health check must be \"TCP\", \"HTTP\" or \"HTTPS\"",
            ),
            Ok(protocol) => {
                if !is_nlb && raw != protocol.as_str() {
                    reader.diag.warn(
                        Location::annotation(key::HEALTHCHECK_PROTOCOL),
                        Some(raw),
                        format!(
                            "upstream puts the value verbatim into the Classic ELB target and would \
                             reconfigure the health check on every sync; write {:?}",
                            protocol.as_str()
                        ),
                    );
                }
                hc.protocol = protocol;
            }
            Err(_) => reader.diag.error(
                Location::annotation(key::HEALTHCHECK_PROTOCOL),
                Some(raw),
                ErrorKind::Invalid,
                if is_nlb {
                    "must be \"TCP\", \"HTTP\" or \"HTTPS\"".to_owned()
                } else {
                    format!("must be {}", join_allowed(HealthCheckProtocol::ACCEPTED))
                },
            ),
        }
    }

    if let Some(raw) = reader.non_empty(key::HEALTHCHECK_PORT) {
        if raw == "traffic-port" {
            // With `Local` this is upstream's special case: the traffic (node) port instead of
            // the healthCheckNodePort; otherwise it is already the default.
            hc.port = HealthCheckPort::TrafficPort;
        } else {
            match raw.parse::<u16>() {
                Ok(port) if port != 0 => hc.port = HealthCheckPort::Number(port),
                _ => reader.diag.error(
                    Location::annotation(key::HEALTHCHECK_PORT),
                    Some(raw),
                    ErrorKind::Invalid,
                    "must be \"traffic-port\" or a port number from 1 to 65535",
                ),
            }
        }
    }

    let http = matches!(
        hc.protocol,
        HealthCheckProtocol::Http | HealthCheckProtocol::Https
    );
    let path = reader
        .get(key::HEALTHCHECK_PATH)
        .map(str::trim)
        .filter(|p| !p.is_empty());
    match (path, http) {
        (Some(path), true) if !path.starts_with('/') => reader.diag.error(
            Location::annotation(key::HEALTHCHECK_PATH),
            Some(path),
            ErrorKind::Invalid,
            "must be an absolute path starting with '/'",
        ),
        (Some(path), true) => hc.path = Some(path.to_owned()),
        (Some(path), false) => {
            reader.diag.warn(
                Location::annotation(key::HEALTHCHECK_PATH),
                Some(path),
                format!("ignored: the health check protocol is {}", hc.protocol),
            );
        }
        (None, true) => {
            if hc.path.is_none() {
                hc.path = Some("/".to_owned());
            }
        }
        (None, false) => {}
    }
    if !http {
        hc.path = None;
    }

    if let Some(n) = reader.int_in(key::HEALTHCHECK_HEALTHY_THRESHOLD, 2..=10, "checks") {
        hc.healthy_threshold = n;
    }
    if let Some(n) = reader.int_in(key::HEALTHCHECK_UNHEALTHY_THRESHOLD, 2..=10, "checks") {
        hc.unhealthy_threshold = n;
    }
    let interval_given = reader.int_in(key::HEALTHCHECK_INTERVAL, 5..=300, "seconds");
    if let Some(n) = interval_given {
        hc.interval_seconds = n;
    }
    let timeout_given = reader.int_in(key::HEALTHCHECK_TIMEOUT, 2..=60, "seconds");
    if let Some(n) = timeout_given {
        hc.timeout_seconds = n;
        if is_nlb {
            reader.diag.warn(
                Location::annotation(key::HEALTHCHECK_TIMEOUT),
                reader
                    .all()
                    .get(key::HEALTHCHECK_TIMEOUT)
                    .map(String::as_str),
                "not applied to an NLB: upstream parses it but never sends it to AWS",
            );
        }
    }
    if !is_nlb
        && hc.timeout_seconds >= hc.interval_seconds
        && (timeout_given.is_some() || interval_given.is_some())
    {
        let at = if timeout_given.is_some() {
            key::HEALTHCHECK_TIMEOUT
        } else {
            key::HEALTHCHECK_INTERVAL
        };
        reader.diag.error(
            Location::annotation(at),
            reader.all().get(at).map(String::as_str),
            ErrorKind::Conflict,
            format!(
                "the health-check timeout ({}s) must be less than the interval ({}s)",
                hc.timeout_seconds, hc.interval_seconds
            ),
        );
    }
    hc
}

/// Access logs: `enabled` is a Go bool on both kinds; emit interval 5 or 60 (early; CLB only,
/// NLB ignores it — loud); enabling without a bucket fails at AWS (early).
fn parse_access_log(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> AccessLog {
    let enabled = reader.go_bool(key::ACCESS_LOG_ENABLED, false);
    let s3_bucket_name = reader
        .non_empty(key::ACCESS_LOG_BUCKET_NAME)
        .map(str::to_owned);
    let s3_bucket_prefix = reader
        .non_empty(key::ACCESS_LOG_BUCKET_PREFIX)
        .map(str::to_owned);
    let mut emit_interval_minutes = None;
    if let Some(raw) = reader
        .get(key::ACCESS_LOG_EMIT_INTERVAL)
        .filter(|r| !r.is_empty())
    {
        match raw.parse::<i64>() {
            Ok(n @ (5 | 60)) if kind == AwsLoadBalancerKind::Classic => {
                emit_interval_minutes = u32::try_from(n).ok();
            }
            Ok(5 | 60) => reader.diag.warn(
                Location::annotation(key::ACCESS_LOG_EMIT_INTERVAL),
                Some(raw),
                "ignored on an NLB (NLB access logs have a fixed interval)",
            ),
            Ok(_) => reader.diag.error(
                Location::annotation(key::ACCESS_LOG_EMIT_INTERVAL),
                Some(raw),
                ErrorKind::OutOfRange,
                "must be 5 or 60 (minutes)",
            ),
            Err(_) => reader.diag.error(
                Location::annotation(key::ACCESS_LOG_EMIT_INTERVAL),
                Some(raw),
                ErrorKind::Invalid,
                "must be 5 or 60 (minutes)",
            ),
        }
    }
    if enabled && s3_bucket_name.is_none() {
        reader.diag.error(
            Location::annotation(key::ACCESS_LOG_BUCKET_NAME),
            None,
            ErrorKind::Missing,
            "access logs are enabled but no S3 bucket is named; AWS rejects that",
        );
    }
    if !enabled && (s3_bucket_name.is_some() || s3_bucket_prefix.is_some()) {
        reader.diag.warn(
            Location::annotation(key::ACCESS_LOG_ENABLED),
            reader
                .all()
                .get(key::ACCESS_LOG_ENABLED)
                .map(String::as_str),
            "access logs are off, so the bucket annotations have no effect",
        );
    }
    AccessLog {
        enabled,
        emit_interval_minutes,
        s3_bucket_name,
        s3_bucket_prefix,
    }
}

fn warn_clb_only(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind, k: &'static str) {
    if kind == AwsLoadBalancerKind::Nlb
        && let Some(raw) = reader.all().get(k)
    {
        reader.diag.warn(
            Location::annotation(k),
            Some(raw),
            "applies to Classic ELBs only; ignored on an NLB",
        );
    }
}

fn warn_nlb_only(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind, k: &'static str) -> bool {
    if kind == AwsLoadBalancerKind::Classic
        && let Some(raw) = reader.all().get(k)
    {
        reader.diag.warn(
            Location::annotation(k),
            Some(raw),
            "applies to NLBs only; ignored on a Classic ELB",
        );
        return true;
    }
    false
}

/// Draining (CLB only): Go bool, timeout 1–3600 s (early). NLB: ignored, warned.
fn parse_draining(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> ConnectionDraining {
    warn_clb_only(reader, kind, key::CONNECTION_DRAINING_ENABLED);
    warn_clb_only(reader, kind, key::CONNECTION_DRAINING_TIMEOUT);
    let enabled = reader.go_bool(key::CONNECTION_DRAINING_ENABLED, false);
    let timeout_seconds = reader.int_in(key::CONNECTION_DRAINING_TIMEOUT, 1..=3600, "seconds");
    if kind == AwsLoadBalancerKind::Nlb {
        return ConnectionDraining::default();
    }
    ConnectionDraining {
        enabled,
        timeout_seconds,
    }
}

/// Idle timeout (CLB only): 1–4000 s, default 60 (early). NLB: ignored, warned.
fn parse_idle_timeout(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> u32 {
    warn_clb_only(reader, kind, key::CONNECTION_IDLE_TIMEOUT);
    reader
        .int_in(key::CONNECTION_IDLE_TIMEOUT, 1..=4000, "seconds")
        .filter(|_| kind == AwsLoadBalancerKind::Classic)
        .unwrap_or(DEFAULT_IDLE_TIMEOUT)
}

/// Tag keys kube-lb writes itself; a user tag with the same key is overwritten (as upstream).
const RESERVED_TAG_PREFIXES: &[&str] = &["kubernetes.io/service-name", "kubernetes.io/cluster/"];

/// `additional-resource-tags`: upstream map rules; early errors for what AWS rejects (`aws:`
/// prefix, key > 128 or value > 256 characters); loud for keys the provider overwrites.
fn parse_tags(reader: &mut Reader<'_>) -> BTreeMap<String, String> {
    let Some(tags) = reader.key_values(key::ADDITIONAL_RESOURCE_TAGS) else {
        return BTreeMap::new();
    };
    let raw = reader
        .all()
        .get(key::ADDITIONAL_RESOURCE_TAGS)
        .cloned()
        .unwrap_or_default();
    for (k, v) in &tags {
        if k.to_ascii_lowercase().starts_with("aws:")
            || k.chars().count() > 128
            || v.chars().count() > 256
        {
            reader.diag.error(
                Location::annotation(key::ADDITIONAL_RESOURCE_TAGS),
                Some(&raw),
                ErrorKind::Invalid,
                format!("tag {k:?}: keys must not start with \"aws:\" and are at most 128 characters, values at most 256"),
            );
        }
        if RESERVED_TAG_PREFIXES.iter().any(|p| k.starts_with(p)) {
            reader.diag.warn(
                Location::annotation(key::ADDITIONAL_RESOURCE_TAGS),
                Some(&raw),
                format!(
                    "tag {k:?} is written by the controller itself; the user value is overwritten"
                ),
            );
        }
    }
    tags
}

fn security_group_ids(reader: &mut Reader<'_>, k: &'static str) -> Vec<String> {
    let Some(items) = reader.list(k, false) else {
        return Vec::new();
    };
    let raw = reader.all().get(k).cloned().unwrap_or_default();
    items
        .into_iter()
        .filter(|id| {
            let ok = id.starts_with("sg-");
            if !ok {
                reader.diag.error(
                    Location::annotation(k),
                    Some(&raw),
                    ErrorKind::Invalid,
                    format!("{id:?} is not a security group ID (\"sg-…\"); names are not accepted"),
                );
            }
            ok
        })
        .map(str::to_owned)
        .collect()
}

/// `extra-security-groups`: CLB only; on an NLB its mere presence is an error upstream (same).
fn parse_extra_security_groups(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> Vec<String> {
    if kind == AwsLoadBalancerKind::Nlb
        && let Some(raw) = reader.get(key::EXTRA_SECURITY_GROUPS)
    {
        reader.diag.error(
            Location::annotation(key::EXTRA_SECURITY_GROUPS),
            Some(raw),
            ErrorKind::Unsupported,
            "not supported by NLB; remove it (or use security-groups with a managed NLB security group mode)",
        );
        return Vec::new();
    }
    security_group_ids(reader, key::EXTRA_SECURITY_GROUPS)
}

/// `security-groups`: BYO groups. On an NLB upstream honours them only with cloud-config
/// `NLBSecurityGroupMode = Managed` and ignores them silently otherwise (loud).
fn parse_security_groups(reader: &mut Reader<'_>, kind: AwsLoadBalancerKind) -> Vec<String> {
    if kind == AwsLoadBalancerKind::Nlb
        && let Some(raw) = reader.all().get(key::SECURITY_GROUPS)
    {
        reader.diag.warn(
            Location::annotation(key::SECURITY_GROUPS),
            Some(raw),
            "on an NLB this is honoured only with the managed NLB security-group mode and only at creation",
        );
    }
    security_group_ids(reader, key::SECURITY_GROUPS)
}

/// `subnets`: trimmed list; present but empty is an error upstream (same).
fn parse_subnets(reader: &mut Reader<'_>) -> Vec<String> {
    let Some(items) = reader.list(key::SUBNETS, false) else {
        return Vec::new();
    };
    if items.is_empty() {
        reader.diag.error(
            Location::annotation(key::SUBNETS),
            reader.all().get(key::SUBNETS).map(String::as_str),
            ErrorKind::Missing,
            "must list at least one subnet ID (\"subnet-…\") or Name tag",
        );
    }
    items.into_iter().map(str::to_owned).collect()
}

/// `eip-allocations` and `private-ipv4-addresses` (NLB): upstream splits without trimming;
/// kube-lb trims and warns. Early errors: malformed IDs/addresses, count differing from the
/// subnets when both are given, EIPs on an internal NLB, private addresses on an
/// internet-facing NLB, both annotations together.
fn parse_subnet_mappings(
    reader: &mut Reader<'_>,
    kind: AwsLoadBalancerKind,
    scheme: Scheme,
    subnet_count: usize,
) -> (Vec<String>, Vec<Ipv4Addr>) {
    let eip_ignored = warn_nlb_only(reader, kind, key::EIP_ALLOCATIONS);
    let ip_ignored = warn_nlb_only(reader, kind, key::PRIVATE_IPV4_ADDRESSES);
    let eip_raw = reader.all().get(key::EIP_ALLOCATIONS).cloned();
    let ip_raw = reader.all().get(key::PRIVATE_IPV4_ADDRESSES).cloned();
    let eips: Vec<String> = reader
        .list(key::EIP_ALLOCATIONS, true)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let ip_items: Vec<String> = reader
        .list(key::PRIVATE_IPV4_ADDRESSES, true)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_owned)
        .collect();
    if kind != AwsLoadBalancerKind::Nlb || (eip_ignored && ip_ignored) {
        return (Vec::new(), Vec::new());
    }
    for id in &eips {
        if !id.starts_with("eipalloc-") {
            reader.diag.error(
                Location::annotation(key::EIP_ALLOCATIONS),
                eip_raw.as_deref(),
                ErrorKind::Invalid,
                format!("{id:?} is not an allocation ID (\"eipalloc-…\")"),
            );
        }
    }
    let mut ips = Vec::new();
    for item in &ip_items {
        match item.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => ips.push(ip),
            _ => reader.diag.error(
                Location::annotation(key::PRIVATE_IPV4_ADDRESSES),
                ip_raw.as_deref(),
                ErrorKind::Invalid,
                format!("{item:?} is not an IPv4 address"),
            ),
        }
    }
    if !eips.is_empty() && scheme == Scheme::Internal {
        reader.diag.error(
            Location::annotation(key::EIP_ALLOCATIONS),
            eip_raw.as_deref(),
            ErrorKind::Conflict,
            "elastic IPs cannot be attached to an internal NLB",
        );
    }
    if !ip_items.is_empty() && scheme == Scheme::External {
        reader.diag.error(
            Location::annotation(key::PRIVATE_IPV4_ADDRESSES),
            ip_raw.as_deref(),
            ErrorKind::Conflict,
            "private IPv4 addresses can only be chosen for an internal NLB (set the internal annotation)",
        );
    }
    for (k, count, raw) in [
        (key::EIP_ALLOCATIONS, eips.len(), &eip_raw),
        (key::PRIVATE_IPV4_ADDRESSES, ip_items.len(), &ip_raw),
    ] {
        if count > 0 && subnet_count > 0 && count != subnet_count {
            reader.diag.error(
                Location::annotation(k),
                raw.as_deref(),
                ErrorKind::Conflict,
                format!("{count} given but the subnets annotation lists {subnet_count}; one per subnet is required"),
            );
        }
    }
    (eips, ips)
}

/// `target-group-attributes` (NLB only; upstream errors on a CLB — same): keys
/// `preserve_client_ip.enabled` and `proxy_protocol_v2.enabled`, values exactly `true`/`false`;
/// `preserve_client_ip.enabled=false` with a UDP port is rejected by AWS (early).
fn parse_target_group_attributes(
    reader: &mut Reader<'_>,
    kind: AwsLoadBalancerKind,
    ports: &[PortSpec],
) -> TargetGroupAttributes {
    let Some(map) = reader.key_values(key::TARGET_GROUP_ATTRIBUTES) else {
        return TargetGroupAttributes::default();
    };
    let raw = reader
        .all()
        .get(key::TARGET_GROUP_ATTRIBUTES)
        .cloned()
        .unwrap_or_default();
    if kind == AwsLoadBalancerKind::Classic {
        reader.diag.error(
            Location::annotation(key::TARGET_GROUP_ATTRIBUTES),
            Some(&raw),
            ErrorKind::Unsupported,
            "target groups exist only on an NLB (set aws-load-balancer-type: nlb)",
        );
        return TargetGroupAttributes::default();
    }
    let mut attrs = TargetGroupAttributes::default();
    for (k, v) in &map {
        let value = match v.as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => {
                reader.diag.error(
                    Location::annotation(key::TARGET_GROUP_ATTRIBUTES),
                    Some(&raw),
                    ErrorKind::Invalid,
                    format!("{k:?}: value {v:?} must be exactly \"true\" or \"false\""),
                );
                None
            }
        };
        match k.as_str() {
            "preserve_client_ip.enabled" => attrs.preserve_client_ip = value,
            "proxy_protocol_v2.enabled" => attrs.proxy_protocol_v2 = value,
            other => reader.diag.error(
                Location::annotation(key::TARGET_GROUP_ATTRIBUTES),
                Some(&raw),
                ErrorKind::Invalid,
                format!(
                    "unknown attribute {other:?}: allowed are \"preserve_client_ip.enabled\" and \"proxy_protocol_v2.enabled\""
                ),
            ),
        }
    }
    if attrs.preserve_client_ip == Some(false) && ports.iter().any(|p| p.protocol == Protocol::Udp)
    {
        reader.diag.error(
            Location::annotation(key::TARGET_GROUP_ATTRIBUTES),
            Some(&raw),
            ErrorKind::Unsupported,
            "preserve_client_ip.enabled=false is not allowed with UDP ports",
        );
    }
    attrs
}

/// Loud: a key with the AWS prefix that the legacy provider does not read is either a typo or
/// an aws-load-balancer-controller key; both have no effect.
fn warn_unknown_aws_keys(reader: &mut Reader<'_>) {
    let unknown: Vec<(String, String)> = reader
        .all()
        .iter()
        .filter(|(k, _)| k.starts_with(key::PREFIX) && !reader.was_read(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in unknown {
        let suffix = &k[key::PREFIX.len()..];
        let detail = if key::LBC_ONLY_SUFFIXES.contains(&suffix)
            || suffix.starts_with("listener-attributes.")
        {
            "read only by aws-load-balancer-controller; no effect here"
        } else {
            "not an annotation the AWS provider reads (typo?); no effect"
        };
        reader.get_dynamic(&k);
        reader
            .diag
            .warn(Location::Annotation(k.clone()), Some(&v), detail);
    }
}

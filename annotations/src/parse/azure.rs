//! Azure annotations (reference gcp-azure.md §2.3, §2.5).
//!
//! Booleans: upstream compares with `"true"` case-insensitively, except the internal flag,
//! which needs exactly lowercase `true`; other values read as false, so kube-lb warns.

use std::collections::BTreeMap;
use std::net::IpAddr;

use super::Reader;
use super::service::{Core, parse_cidr, refuse_protocols};
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::azure as key;
use crate::spec::{
    AzureHealthProbe, AzurePortOverride, AzureProbeProtocol, AzureSpec, Scheme, SourceRangeOrigin,
    TrafficPolicy,
};

/// Upstream default probe interval (seconds; the code default, not the doc comment's 15).
const DEFAULT_PROBE_INTERVAL: u32 = 5;
/// Upstream default probe threshold.
const DEFAULT_PROBE_NUM: u32 = 2;
/// interval × threshold must stay below this (seconds).
const PROBE_WINDOW_LIMIT: u32 = 120;

/// Protocols: load-balancing rules take `Tcp`, `Udp` or `All` (gcp-azure.md §2, ARM shapes), and
/// kube-lb's Azure provider refuses SCTP, so an SCTP port is an error here. TCP and UDP in one
/// Service are fine (one rule per port and protocol).
pub(crate) fn parse(reader: &mut Reader<'_>, core: &mut Core) -> (AzureSpec, Scheme) {
    refuse_protocols(
        reader,
        &core.ports,
        "Azure Load Balancer rules accept Tcp and Udp, not SCTP",
        None,
    );
    let internal = reader.true_flag(key::INTERNAL, false);
    let internal_subnet = reader.non_empty(key::INTERNAL_SUBNET).map(str::to_owned);
    if internal_subnet.is_some() && !internal {
        reader.diag.warn(
            Location::annotation(key::INTERNAL_SUBNET),
            internal_subnet.as_deref(),
            "only honoured for internal load balancers; ignored",
        );
    }
    let pip_name = reader.non_empty(key::PIP_NAME).map(str::to_owned);
    let pip_name_ipv6 = reader.non_empty(key::PIP_NAME_IPV6).map(str::to_owned);
    let ipv4 = match parse_ip(reader, key::IPV4) {
        Some(IpAddr::V4(ip)) => Some(ip),
        Some(IpAddr::V6(_)) => {
            family_error(reader, key::IPV4, "IPv4");
            None
        }
        None => None,
    };
    let ipv6 = match parse_ip(reader, key::IPV6) {
        Some(IpAddr::V6(ip)) => Some(ip),
        Some(IpAddr::V4(_)) => {
            family_error(reader, key::IPV6, "IPv6");
            None
        }
        None => None,
    };
    if let (Some(field), Some(annotation)) = (
        core.requested_ip,
        ipv4.map(IpAddr::V4).or(ipv6.map(IpAddr::V6)),
    ) && field.is_ipv4() == annotation.is_ipv4()
        && field != annotation
    {
        reader.diag.warn(
            Location::field("spec.loadBalancerIP"),
            Some(&field.to_string()),
            format!("ignored: the per-family annotation asks for {annotation}, which wins"),
        );
    }
    if internal && (pip_name.is_some() || pip_name_ipv6.is_some()) {
        reader.diag.warn(
            Location::annotation(key::PIP_NAME),
            pip_name.as_deref().or(pip_name_ipv6.as_deref()),
            "public IPs are not used by an internal load balancer; ignored",
        );
    }
    let pip_prefix_id = reader.non_empty(key::PIP_PREFIX_ID).map(str::to_owned);
    let dns_label_name = reader.get(key::DNS_LABEL_NAME).map(|v| v.trim().to_owned());
    let resource_group = reader.non_empty(key::RESOURCE_GROUP).map(str::to_owned);
    let pip_tags = reader.key_values(key::PIP_TAGS).unwrap_or_default();
    let allowed_service_tags = reader
        .list(key::ALLOWED_SERVICE_TAGS, false)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let allowed_ip_ranges: Vec<_> = reader
        .list(key::ALLOWED_IP_RANGES, false)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|item| parse_cidr(reader, Location::annotation(key::ALLOWED_IP_RANGES), item))
        .collect();
    if !allowed_ip_ranges.is_empty() && core.source_ranges.origin == SourceRangeOrigin::Spec {
        reader.diag.error(
            Location::annotation(key::ALLOWED_IP_RANGES),
            reader.all().get(key::ALLOWED_IP_RANGES).map(String::as_str),
            ErrorKind::Conflict,
            "cannot be combined with spec.loadBalancerSourceRanges; keep one",
        );
    }
    let deny_all_except_source_ranges = reader.true_flag(key::DENY_ALL_EXCEPT_SOURCE_RANGES, true);
    let tcp_idle_timeout_minutes = reader
        .int_in(key::TCP_IDLE_TIMEOUT, 4..=100, "minutes")
        .unwrap_or(4);
    let disable_tcp_reset = reader.true_flag(key::DISABLE_TCP_RESET, true);
    let high_availability_ports = reader.true_flag(key::HA_PORTS, true);
    if high_availability_ports && !internal {
        reader.diag.error(
            Location::annotation(key::HA_PORTS),
            Some("true"),
            ErrorKind::Unsupported,
            "high-availability ports need an internal load balancer (azure-load-balancer-internal: \"true\")",
        );
    }
    let disable_floating_ip = reader.true_flag(key::DISABLE_FLOATING_IP, true);
    let disable_nsg_rule = reader.true_flag(key::DISABLE_NSG_RULE, true);
    let additional_public_ips = reader
        .list(key::ADDITIONAL_PUBLIC_IPS, false)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|item| match item.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                reader.diag.error(
                    Location::annotation(key::ADDITIONAL_PUBLIC_IPS),
                    Some(item),
                    ErrorKind::Invalid,
                    "must be a comma list of IP addresses",
                );
                None
            }
        })
        .collect();
    let health_probe = parse_probe(reader, core);
    let port_overrides = parse_port_overrides(reader, core);
    warn_unsupported(reader);

    let spec = AzureSpec {
        internal,
        internal_subnet,
        pip_name,
        pip_name_ipv6,
        ipv4,
        ipv6,
        pip_prefix_id,
        dns_label_name,
        resource_group,
        pip_tags,
        allowed_service_tags,
        allowed_ip_ranges,
        deny_all_except_source_ranges,
        tcp_idle_timeout_minutes,
        disable_tcp_reset,
        high_availability_ports,
        disable_floating_ip,
        disable_nsg_rule,
        additional_public_ips,
        health_probe,
        port_overrides,
    };
    let scheme = if internal {
        Scheme::Internal
    } else {
        Scheme::External
    };
    (spec, scheme)
}

fn parse_ip(reader: &mut Reader<'_>, k: &'static str) -> Option<IpAddr> {
    let raw = reader.non_empty(k)?;
    match raw.parse::<IpAddr>() {
        Ok(ip) => Some(ip),
        Err(_) => {
            reader.diag.error(
                Location::annotation(k),
                Some(raw),
                ErrorKind::Invalid,
                "must be an IP address",
            );
            None
        }
    }
}

fn family_error(reader: &mut Reader<'_>, k: &'static str, family: &str) {
    reader.diag.error(
        Location::annotation(k),
        reader.all().get(k).map(String::as_str),
        ErrorKind::Invalid,
        format!("must be an {family} address"),
    );
}

/// Probe protocol: case-insensitive Tcp/Http/Https; an unknown value means TCP upstream (loud).
fn probe_protocol(reader: &mut Reader<'_>, location: Location, raw: &str) -> AzureProbeProtocol {
    let found = AzureProbeProtocol::ALL
        .iter()
        .copied()
        .find(|p| p.as_str().eq_ignore_ascii_case(raw.trim()));
    found.unwrap_or_else(|| {
        reader.diag.warn(
            location,
            Some(raw),
            "not Tcp, Http or Https: upstream silently probes with TCP",
        );
        AzureProbeProtocol::Tcp
    })
}

/// Service-wide probe. With `externalTrafficPolicy: Local` upstream probes HTTP `/healthz` on
/// the healthCheckNodePort; protocol and path annotations are then ignored (loud).
fn parse_probe(reader: &mut Reader<'_>, core: &Core) -> AzureHealthProbe {
    let protocol_raw = reader.non_empty(key::PROBE_PROTOCOL);
    let mut protocol = protocol_raw
        .map(|raw| probe_protocol(reader, Location::annotation(key::PROBE_PROTOCOL), raw))
        .unwrap_or(AzureProbeProtocol::Tcp);
    let interval = reader.int_in(key::PROBE_INTERVAL, 5..=i64::from(u32::MAX), "seconds");
    let num = reader.int_in(key::PROBE_NUM, 2..=i64::from(u32::MAX), "probes");
    let interval_seconds = interval.unwrap_or(DEFAULT_PROBE_INTERVAL);
    let num_of_probe = num.unwrap_or(DEFAULT_PROBE_NUM);
    if u64::from(interval_seconds) * u64::from(num_of_probe) >= u64::from(PROBE_WINDOW_LIMIT) {
        let at = if interval.is_some() {
            key::PROBE_INTERVAL
        } else {
            key::PROBE_NUM
        };
        reader.diag.error(
            Location::annotation(at),
            reader.all().get(at).map(String::as_str),
            ErrorKind::OutOfRange,
            format!(
                "interval ({interval_seconds}s) × number of probes ({num_of_probe}) must be below {PROBE_WINDOW_LIMIT} seconds"
            ),
        );
    }
    let mut request_path = reader
        .non_empty(key::PROBE_REQUEST_PATH)
        .map(str::to_owned)
        .unwrap_or_else(|| "/".to_owned());
    if let TrafficPolicy::Local { .. } = core.traffic_policy {
        for k in [key::PROBE_PROTOCOL, key::PROBE_REQUEST_PATH] {
            if let Some(raw) = reader.all().get(k) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    "ignored with externalTrafficPolicy: Local (HTTP /healthz on the healthCheckNodePort)",
                );
            }
        }
        protocol = AzureProbeProtocol::Http;
        request_path = "/healthz".to_owned();
    }
    AzureHealthProbe {
        protocol,
        interval_seconds,
        num_of_probe,
        request_path,
    }
}

/// `port_<port>_health-probe_<setting>` and `port_<port>_no_{lb,probe}_rule`; `<port>` must be
/// a Service port number or name (warned otherwise: the annotation would match nothing).
fn parse_port_overrides(
    reader: &mut Reader<'_>,
    core: &Core,
) -> BTreeMap<String, AzurePortOverride> {
    let keys: Vec<(String, String)> = reader
        .all()
        .iter()
        .filter(|(k, _)| k.starts_with(key::PORT_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut overrides: BTreeMap<String, AzurePortOverride> = BTreeMap::new();
    for (full, value) in keys {
        reader.get_dynamic(&full);
        let rest = &full[key::PORT_PREFIX.len()..];
        let Some((port, setting)) = rest.split_once('_') else {
            reader.diag.warn(
                Location::Annotation(full.clone()),
                Some(&value),
                "not a per-port annotation (port_<port>_<setting>); no effect",
            );
            continue;
        };
        let known_port = core
            .ports
            .iter()
            .any(|p| p.port.to_string() == port || p.name.as_deref() == Some(port));
        if !known_port {
            reader.diag.warn(
                Location::Annotation(full.clone()),
                Some(&value),
                format!(
                    "{port:?} is neither a port number nor a port name of this Service; no effect"
                ),
            );
        }
        let entry = overrides.entry(port.to_owned()).or_default();
        let location = Location::Annotation(full.clone());
        match setting {
            "health-probe_protocol" => {
                entry.protocol = Some(probe_protocol(reader, location, &value))
            }
            "health-probe_port" => match value.trim().parse::<u16>() {
                Ok(p) if p != 0 => entry.port = Some(p),
                _ => reader.diag.error(
                    location,
                    Some(&value),
                    ErrorKind::Invalid,
                    "must be a port number from 1 to 65535",
                ),
            },
            "health-probe_interval" => match value.trim().parse::<u32>() {
                Ok(n) if n >= 5 => entry.interval_seconds = Some(n),
                _ => reader.diag.error(
                    location,
                    Some(&value),
                    ErrorKind::OutOfRange,
                    "must be an integer of at least 5 (seconds)",
                ),
            },
            "health-probe_num-of-probe" => match value.trim().parse::<u32>() {
                Ok(n) if n >= 2 => entry.num_of_probe = Some(n),
                _ => reader.diag.error(
                    location,
                    Some(&value),
                    ErrorKind::OutOfRange,
                    "must be an integer of at least 2",
                ),
            },
            "health-probe_request-path" => entry.request_path = Some(value.trim().to_owned()),
            "no_lb_rule" => entry.no_lb_rule = value.eq_ignore_ascii_case("true"),
            "no_probe_rule" => entry.no_probe_rule = value.eq_ignore_ascii_case("true"),
            _ => reader.diag.warn(
                location,
                Some(&value),
                "unknown per-port setting; no effect",
            ),
        }
    }
    overrides.retain(|_, o| *o != AzurePortOverride::default());
    overrides
}

/// Keys upstream reads for features kube-lb does not implement; say so rather than pretend.
fn warn_unsupported(reader: &mut Reader<'_>) {
    let found: Vec<(String, String)> = reader
        .all()
        .iter()
        .filter(|(k, _)| k.starts_with(key::PREFIX) && !reader.was_read(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (k, v) in found {
        reader.get_dynamic(&k);
        let detail = if key::UNSUPPORTED_PREFIXES.iter().any(|p| k.starts_with(p)) {
            "read by the upstream Azure provider but not implemented by kube-lb; no effect"
        } else {
            "not an Azure annotation kube-lb knows (typo?); no effect"
        };
        reader.diag.warn(Location::Annotation(k), Some(&v), detail);
    }
}

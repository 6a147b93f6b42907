//! OpenStack annotations (reference other-clouds.md §1.3), with the policy the other clouds
//! follow:
//!
//! - **Warnings** where cloud-provider-openstack silently falls back: booleans other than the
//!   exact `true`/`false`, integers that do not parse (upstream uses the default), an unknown
//!   `proxy-protocol` value (upstream: off), settings with no effect (load-balancer-id makes the
//!   VIP/flavor/zone annotations moot; x-forwarded-for and TLS apply to TCP ports only; a
//!   monitor cannot be switched off for `externalTrafficPolicy: Local`).
//! - **Errors** for what Octavia or Neutron would refuse: ids that are not UUIDs, an unknown
//!   `lb-method`, timeouts and monitor settings outside Octavia's ranges (timeout above delay),
//!   a connection limit below -1, PROXY protocol on a UDP port or together with
//!   X-Forwarded-For, a TLS reference that is not a Barbican URL, a `hostname` the API server
//!   would refuse in `.status`, a node selector that is not `k=v, k` syntax, SCTP ports.
//!
//! `spec.loadBalancerIP` is honoured (the VIP when internal, the floating IP otherwise), and
//! `spec.loadBalancerSourceRanges` becomes the listeners' `allowed_cidrs`.

use super::Reader;
use super::service::{Core, refuse_protocols};
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::openstack as key;
use crate::spec::{
    LabelRequirement, LbMethod, OpenstackHealthMonitor, OpenstackProxyProtocol, OpenstackSpec,
    OpenstackTimeouts, Protocol, Scheme, SelectorOperator,
};

/// Octavia's largest listener timeout, in milliseconds (24 h).
const MAX_TIMEOUT_MS: i64 = 86_400_000;
/// Octavia's largest health-monitor delay/timeout (a 32-bit signed integer of seconds).
const MAX_MONITOR_SECONDS: i64 = i32::MAX as i64;

/// True for a UUID in its dashed (8-4-4-4-12) or plain 32-hex-digit form, as Octavia's and
/// Neutron's id fields accept.
pub(crate) fn is_uuid(value: &str) -> bool {
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    match value.len() {
        32 => hex(value),
        36 => {
            let parts: Vec<&str> = value.split('-').collect();
            parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12]) && parts.iter().all(|p| hex(p))
        }
        _ => false,
    }
}

/// True for a DNS-1123 subdomain (what `.status.loadBalancer.ingress[].hostname` accepts).
fn is_dns_subdomain(value: &str) -> bool {
    value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// True for a Kubernetes label key (`[prefix/]name`).
fn is_label_key(value: &str) -> bool {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    name_ok && prefix.is_none_or(is_dns_subdomain)
}

/// True for a label value (empty allowed).
fn is_label_value(value: &str) -> bool {
    value.is_empty()
        || (value.len() <= 63
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && value.starts_with(|c: char| c.is_ascii_alphanumeric())
            && value.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Parses upstream's node-selector syntax: `k1=v1, k2` (a bare key means "label exists").
pub(crate) fn parse_node_selector(raw: &str) -> Result<Vec<LabelRequirement>, String> {
    let mut requirements = Vec::new();
    for item in raw.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (k, value) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item, None),
        };
        if !is_label_key(k) {
            return Err(format!("{k:?} is not a label key"));
        }
        match value {
            Some(v) if !is_label_value(v) => return Err(format!("{v:?} is not a label value")),
            Some(v) => requirements.push(LabelRequirement {
                key: k.to_owned(),
                operator: SelectorOperator::Equals,
                values: vec![v.to_owned()],
            }),
            None => requirements.push(LabelRequirement {
                key: k.to_owned(),
                operator: SelectorOperator::Exists,
                values: Vec::new(),
            }),
        }
    }
    Ok(requirements)
}

/// An optional UUID-valued key: anything else is an error (Octavia/Neutron answer 400).
fn uuid(reader: &mut Reader<'_>, k: &'static str) -> Option<String> {
    let raw = reader.non_empty(k)?;
    if is_uuid(raw) {
        Some(raw.to_owned())
    } else {
        reader.diag.error(
            Location::annotation(k),
            Some(raw),
            ErrorKind::Invalid,
            "must be a UUID such as \"0e100000-0000-4000-8000-0000000000e1\" (OpenStack refuses other ids)",
        );
        None
    }
}

/// Upstream's boolean: exactly `true`/`false`; anything else silently means "not set"
/// upstream, so kube-lb warns and leaves the default.
fn exact_bool(reader: &mut Reader<'_>, k: &'static str) -> Option<bool> {
    let raw = reader.get(k)?;
    match raw {
        "true" => Some(true),
        "false" => Some(false),
        "" => None,
        other => {
            reader.diag.warn(
                Location::annotation(k),
                Some(other),
                "not exactly \"true\" or \"false\": upstream ignores it and the default applies",
            );
            None
        }
    }
}

/// Upstream's integer: one that does not parse silently falls back to the default (warned);
/// one Octavia would refuse (outside `range`) is an error.
fn int_or_default(
    reader: &mut Reader<'_>,
    k: &'static str,
    range: std::ops::RangeInclusive<i64>,
    unit: &str,
) -> Option<i64> {
    let raw = reader.non_empty(k)?;
    match raw.parse::<i64>() {
        Ok(n) if range.contains(&n) => Some(n),
        Ok(_) => {
            reader.diag.error(
                Location::annotation(k),
                Some(raw),
                ErrorKind::OutOfRange,
                format!(
                    "must be an integer from {} to {} ({unit}); Octavia refuses other values",
                    range.start(),
                    range.end()
                ),
            );
            None
        }
        Err(_) => {
            reader.diag.warn(
                Location::annotation(k),
                Some(raw),
                format!("not an integer ({unit}): upstream ignores it and the default applies"),
            );
            None
        }
    }
}

fn to_u32(value: Option<i64>) -> Option<u32> {
    value.and_then(|v| u32::try_from(v).ok())
}

/// Every OpenStack annotation; see the module documentation for the policy.
pub(crate) fn parse(reader: &mut Reader<'_>, core: &Core) -> (OpenstackSpec, Scheme) {
    refuse_protocols(
        reader,
        &core.ports,
        "kube-lb's OpenStack provider builds TCP and UDP listeners, not SCTP",
        None,
    );
    let has_udp = core.ports.iter().any(|p| p.protocol == Protocol::Udp);
    let internal = reader.true_flag(key::INTERNAL, false);
    // Written back by cloud-provider-openstack; read so it is not reported as unknown.
    let _ = reader.get(key::LOAD_BALANCER_ADDRESS);

    let floating_network_id = uuid(reader, key::FLOATING_NETWORK_ID);
    let floating_subnet_id = uuid(reader, key::FLOATING_SUBNET_ID);
    let floating_subnet = reader.non_empty(key::FLOATING_SUBNET).map(str::to_owned);
    let floating_subnet_tags: Vec<String> = reader
        .list(key::FLOATING_SUBNET_TAGS, false)
        .unwrap_or_default()
        .into_iter()
        .map(str::to_owned)
        .collect();
    if floating_subnet_id.is_some() {
        for k in [key::FLOATING_SUBNET, key::FLOATING_SUBNET_TAGS] {
            if let Some(raw) = reader.all().get(k).filter(|v| !v.trim().is_empty()) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    format!(
                        "ignored: {} names the subnet and wins",
                        key::FLOATING_SUBNET_ID
                    ),
                );
            }
        }
    }
    if internal {
        for k in [
            key::FLOATING_NETWORK_ID,
            key::FLOATING_SUBNET_ID,
            key::FLOATING_SUBNET,
            key::FLOATING_SUBNET_TAGS,
        ] {
            if let Some(raw) = reader.all().get(k).filter(|v| !v.trim().is_empty()) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    "has no effect on an internal load balancer (no floating IP)",
                );
            }
        }
    }
    let class = reader.non_empty(key::CLASS).map(str::to_owned);
    let subnet_id = uuid(reader, key::SUBNET_ID);
    let network_id = uuid(reader, key::NETWORK_ID);
    let member_subnet_id = uuid(reader, key::MEMBER_SUBNET_ID);
    let port_id = uuid(reader, key::PORT_ID);
    if port_id.is_some() {
        for k in [key::SUBNET_ID, key::NETWORK_ID] {
            if let Some(raw) = reader.all().get(k).filter(|v| !v.trim().is_empty()) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    format!(
                        "ignored: {} gives the VIP port, which fixes its network",
                        key::PORT_ID
                    ),
                );
            }
        }
    }

    let lb_method = reader.non_empty(key::LB_METHOD).and_then(|raw| {
        raw.parse::<LbMethod>()
            .map_err(|error| {
                reader.diag.error(
                    Location::annotation(key::LB_METHOD),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("must be {}", error.allowed_text()),
                )
            })
            .ok()
    });
    let proxy_protocol = match reader.non_empty(key::PROXY_PROTOCOL) {
        None | Some("false") => None,
        Some(raw) => match raw.parse::<OpenstackProxyProtocol>() {
            Ok(p) => Some(p),
            Err(_) => {
                reader.diag.warn(
                    Location::annotation(key::PROXY_PROTOCOL),
                    Some(raw),
                    "not \"true\", \"v1\" or \"v2\": upstream silently disables PROXY protocol",
                );
                None
            }
        },
    };
    if let Some(proxy) = proxy_protocol
        && has_udp
    {
        reader.diag.error(
            Location::annotation(key::PROXY_PROTOCOL),
            reader.all().get(key::PROXY_PROTOCOL).map(String::as_str).or(Some(proxy.as_str())),
            ErrorKind::Conflict,
            "PROXY protocol applies to TCP only and this Service has a UDP port (Octavia refuses a PROXY pool behind a UDP listener)",
        );
    }
    let x_forwarded_for = reader.true_flag(key::X_FORWARDED_FOR, false);
    if proxy_protocol.is_some() && x_forwarded_for {
        reader.diag.error(
            Location::annotation(key::X_FORWARDED_FOR),
            Some("true"),
            ErrorKind::Conflict,
            "cannot be combined with loadbalancer.openstack.org/proxy-protocol; keep one",
        );
    }
    if x_forwarded_for && has_udp {
        reader.diag.warn(
            Location::annotation(key::X_FORWARDED_FOR),
            Some("true"),
            "applies to TCP ports only; UDP ports stay UDP",
        );
    }
    let keep_floating_ip = reader.true_flag(key::KEEP_FLOATING_IP, false);
    let connection_limit = int_or_default(
        reader,
        key::CONNECTION_LIMIT,
        -1..=i64::from(i32::MAX),
        "connections, -1 for unlimited",
    )
    .unwrap_or(-1);

    let timeouts = OpenstackTimeouts {
        client_data: to_u32(int_or_default(
            reader,
            key::TIMEOUT_CLIENT_DATA,
            0..=MAX_TIMEOUT_MS,
            "ms",
        )),
        member_connect: to_u32(int_or_default(
            reader,
            key::TIMEOUT_MEMBER_CONNECT,
            0..=MAX_TIMEOUT_MS,
            "ms",
        )),
        member_data: to_u32(int_or_default(
            reader,
            key::TIMEOUT_MEMBER_DATA,
            0..=MAX_TIMEOUT_MS,
            "ms",
        )),
        tcp_inspect: to_u32(int_or_default(
            reader,
            key::TIMEOUT_TCP_INSPECT,
            0..=MAX_TIMEOUT_MS,
            "ms",
        )),
    };

    let health_monitor = OpenstackHealthMonitor {
        enabled: exact_bool(reader, key::ENABLE_HEALTH_MONITOR),
        delay: to_u32(int_or_default(
            reader,
            key::HEALTH_MONITOR_DELAY,
            0..=MAX_MONITOR_SECONDS,
            "seconds",
        )),
        timeout: to_u32(int_or_default(
            reader,
            key::HEALTH_MONITOR_TIMEOUT,
            0..=MAX_MONITOR_SECONDS,
            "seconds",
        )),
        max_retries: to_u32(int_or_default(
            reader,
            key::HEALTH_MONITOR_MAX_RETRIES,
            1..=10,
            "checks",
        )),
        max_retries_down: to_u32(int_or_default(
            reader,
            key::HEALTH_MONITOR_MAX_RETRIES_DOWN,
            1..=10,
            "checks",
        )),
    };
    if let (Some(delay), Some(timeout)) = (health_monitor.delay, health_monitor.timeout)
        && timeout > delay
    {
        reader.diag.error(
            Location::annotation(key::HEALTH_MONITOR_TIMEOUT),
            Some(&timeout.to_string()),
            ErrorKind::Conflict,
            format!(
                "must be at most {} ({delay}); Octavia refuses a timeout longer than the delay",
                key::HEALTH_MONITOR_DELAY
            ),
        );
    }
    if health_monitor.enabled == Some(false) && core.is_local() {
        reader.diag.warn(
            Location::annotation(key::ENABLE_HEALTH_MONITOR),
            Some("false"),
            "kube-lb keeps a health monitor for externalTrafficPolicy: Local: without one, nodes without a ready endpoint would receive (and drop) traffic",
        );
    }

    let flavor_id = uuid(reader, key::FLAVOR_ID);
    let availability_zone = reader.non_empty(key::AVAILABILITY_ZONE).map(str::to_owned);
    let default_tls_container_ref =
        reader
            .non_empty(key::DEFAULT_TLS_CONTAINER_REF)
            .and_then(|raw| {
                let barbican = (raw.starts_with("https://") || raw.starts_with("http://"))
                    && (raw.contains("/containers/") || raw.contains("/secrets/"));
                if barbican {
                    Some(raw.to_owned())
                } else {
                    reader.diag.error(
                        Location::annotation(key::DEFAULT_TLS_CONTAINER_REF),
                        Some(raw),
                        ErrorKind::Invalid,
                        "must be a Barbican reference such as \"https://keymanager.example/v1/containers/<uuid>\" (or .../v1/secrets/<uuid>)",
                    );
                    None
                }
            });
    if default_tls_container_ref.is_some() && has_udp {
        reader.diag.warn(
            Location::annotation(key::DEFAULT_TLS_CONTAINER_REF),
            reader
                .all()
                .get(key::DEFAULT_TLS_CONTAINER_REF)
                .map(String::as_str),
            "applies to TCP ports only; UDP ports stay UDP",
        );
    }
    // kube-lb writes `load-balancer-id` back after every ensure, as OCCM does, and records the
    // same id in CREATED_WITH: that value names the load balancer made for this Service under
    // its name, not an existing one to use instead, so the Service is read as if it had none
    // (found by name, its create-only annotations checked against the record).
    let load_balancer_id =
        uuid(reader, key::LOAD_BALANCER_ID).filter(|id| !is_written_back_id(reader, id));
    if load_balancer_id.is_some() {
        for k in [
            key::SUBNET_ID,
            key::NETWORK_ID,
            key::PORT_ID,
            key::FLAVOR_ID,
            key::AVAILABILITY_ZONE,
        ] {
            if let Some(raw) = reader.all().get(k).filter(|v| !v.trim().is_empty()) {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    format!(
                        "has no effect: {} names an existing load balancer, whose VIP, flavor and zone are fixed",
                        key::LOAD_BALANCER_ID
                    ),
                );
            }
        }
    }
    if load_balancer_id.is_none() {
        warn_create_only_changes(reader, core, internal);
    }
    let hostname = reader.non_empty(key::HOSTNAME).and_then(|raw| {
        if is_dns_subdomain(raw) {
            Some(raw.to_owned())
        } else {
            reader.diag.error(
                Location::annotation(key::HOSTNAME),
                Some(raw),
                ErrorKind::Invalid,
                "must be a DNS name (lowercase letters, digits, '-' and '.'), as .status.loadBalancer.ingress[].hostname requires",
            );
            None
        }
    });
    let node_selector =
        reader
            .non_empty(key::NODE_SELECTOR)
            .and_then(|raw| match parse_node_selector(raw) {
                Ok(requirements) => Some(requirements),
                Err(problem) => {
                    reader.diag.error(
                    Location::annotation(key::NODE_SELECTOR),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!(
                        "{problem}; expected \"key1=value1, key2\" (a bare key: the label exists)"
                    ),
                );
                    None
                }
            });

    let security_group_recorded = reader
        .all()
        .get(key::CREATED_WITH)
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
        .is_some_and(|recorded| recorded.get("security_group").is_some());
    let spec = OpenstackSpec {
        internal,
        floating_network_id,
        floating_subnet_id,
        floating_subnet,
        floating_subnet_tags,
        class,
        subnet_id,
        network_id,
        member_subnet_id,
        port_id,
        lb_method,
        proxy_protocol,
        x_forwarded_for,
        keep_floating_ip,
        connection_limit,
        timeouts,
        health_monitor,
        flavor_id,
        availability_zone,
        default_tls_container_ref,
        load_balancer_id,
        hostname,
        node_selector,
        security_group_recorded,
    };
    let scheme = if internal {
        Scheme::Internal
    } else {
        Scheme::External
    };
    (spec, scheme)
}

/// Whether `id` is the load balancer id kube-lb recorded for the one it created for the
/// Service (field `load_balancer_id` of [`key::CREATED_WITH`]).
fn is_written_back_id(reader: &Reader<'_>, id: &str) -> bool {
    reader
        .all()
        .get(key::CREATED_WITH)
        .and_then(|raw| serde_json::from_str::<serde_json::Value>(raw).ok())
        .and_then(|recorded| {
            recorded
                .get("load_balancer_id")?
                .as_str()
                .map(str::to_owned)
        })
        .is_some_and(|recorded| recorded.eq_ignore_ascii_case(id))
}

/// The create-only annotations and the Octavia field of [`key::CREATED_WITH`] each is
/// compared with, named for people.
const CREATE_ONLY: [(&str, &str, &str); 5] = [
    (key::FLAVOR_ID, "flavor_id", "flavor"),
    (
        key::AVAILABILITY_ZONE,
        "availability_zone",
        "availability zone",
    ),
    (key::SUBNET_ID, "vip_subnet_id", "VIP subnet"),
    (key::NETWORK_ID, "vip_network_id", "VIP network"),
    (key::PORT_ID, "vip_port_id", "VIP port"),
];

/// Warns for each create-only annotation that now says something else than the load balancer
/// was created with (recorded by kube-lb in [`key::CREATED_WITH`]): Octavia cannot change a
/// flavor, zone or VIP afterwards, so the value is not applied, and the Service condition lists
/// it among the ignored annotations. Nothing is said before anything was recorded, nor for an
/// annotation left unset (cloud.conf may have supplied the value). The same for
/// `spec.loadBalancerIP`: the VIP of an internal Service is fixed, and an attached floating IP
/// is not moved to another address (upstream does not either).
fn warn_create_only_changes(reader: &mut Reader<'_>, core: &Core, internal: bool) {
    let Some(raw) = reader.non_empty(key::CREATED_WITH) else {
        return;
    };
    let recorded = match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => {
            reader.diag.warn(
                Location::annotation(key::CREATED_WITH),
                Some(raw),
                "is written back by kube-lb as a JSON object; this value is ignored",
            );
            return;
        }
    };
    let changed: Vec<(&'static str, String, String)> = CREATE_ONLY
        .iter()
        .filter_map(|(annotation, field, what)| {
            let now = reader.all().get(*annotation)?.trim();
            let created = recorded.get(*field)?.as_str()?;
            let same = if *field == "availability_zone" {
                now == created
            } else {
                now.eq_ignore_ascii_case(created)
            };
            (!now.is_empty() && !same).then(|| {
                (
                    *annotation,
                    now.to_string(),
                    format!(
                        "create-only: the load balancer was created with {what} {created}, which Octavia cannot change; this value is not applied (delete and recreate the Service to apply it)"
                    ),
                )
            })
        })
        .collect();
    for (annotation, value, message) in changed {
        reader
            .diag
            .warn(Location::annotation(annotation), Some(&value), message);
    }
    let Some(requested) = core.requested_ip.map(|ip| ip.to_string()) else {
        return;
    };
    let recorded_address = |field: &str| recorded.get(field).and_then(|v| v.as_str());
    let kept = match recorded_address("floating_ip_address") {
        Some(fip) if !internal => Some((
            fip,
            "floating IP",
            "kube-lb does not move an attached floating IP to another address (upstream does not either); detach it, or delete and recreate the Service",
        )),
        _ => recorded_address("vip_address")
            .filter(|_| internal)
            .map(|vip| {
                (
                    vip,
                    "VIP",
                    "Octavia cannot change a VIP; delete and recreate the Service to apply it",
                )
            }),
    };
    if let Some((address, what, consequence)) = kept
        && address != requested
    {
        reader.diag.warn(
            Location::field("spec.loadBalancerIP"),
            Some(&requested),
            format!("create-only: the load balancer has {what} {address}, so this value is not applied: {consequence}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The create-only warnings for a Service with `annotations` and `loadBalancerIP` (pure
    /// parse).
    fn create_only_warnings(
        annotations: &[(&str, &str)],
        load_balancer_ip: Option<&str>,
    ) -> Vec<String> {
        let annotations: std::collections::BTreeMap<&str, &str> =
            annotations.iter().copied().collect();
        let mut spec = serde_json::json!({"type": "LoadBalancer",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]});
        if let Some(ip) = load_balancer_ip {
            spec["loadBalancerIP"] = serde_json::json!(ip);
        }
        let service: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "default", "uid": "u-1",
                    "annotations": annotations},
                "spec": spec}))
            .expect("service");
        let parsed = crate::parse(crate::Cloud::Openstack, &service).expect("valid");
        parsed
            .warnings
            .iter()
            .filter(|w| w.detail.contains("create-only") || w.detail.contains("written back"))
            .map(|w| w.location.to_string())
            .collect()
    }

    #[test]
    fn create_only_changes_after_creation_are_reported() {
        const F1: &str = "0e100000-0000-4000-8000-0000000000f1";
        const F2: &str = "0e100000-0000-4000-8000-0000000000f2";
        const S1: &str = "0e100000-0000-4000-8000-0000000000a1";
        const S2: &str = "0e100000-0000-4000-8000-0000000000a2";
        const P2: &str = "0e100000-0000-4000-8000-0000000000b2";
        const LB: &str = "0e100000-0000-4000-8000-0000000000c1";
        let recorded = format!(
            r#"{{"availability_zone":"az1","flavor_id":"{F1}","vip_port_id":"0e100000-0000-4000-8000-0000000000b1","vip_subnet_id":"{S1}"}}"#
        );
        let created = (key::CREATED_WITH, recorded.as_str());
        let recorded_own = format!(r#"{{"flavor_id":"{F1}","load_balancer_id":"{LB}"}}"#);
        let own = (key::CREATED_WITH, recorded_own.as_str());
        let upper_f1 = F1.to_uppercase();
        /// (annotations, the annotations warned about)
        type Case<'a> = (Vec<(&'a str, &'a str)>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            (vec![(key::FLAVOR_ID, F2)], vec![]),
            (vec![created], vec![]),
            (vec![created, (key::FLAVOR_ID, F1)], vec![]),
            (vec![created, (key::FLAVOR_ID, upper_f1.as_str())], vec![]),
            (vec![created, (key::FLAVOR_ID, F2)], vec![key::FLAVOR_ID]),
            (
                vec![created, (key::AVAILABILITY_ZONE, "az2")],
                vec![key::AVAILABILITY_ZONE],
            ),
            (
                vec![created, (key::SUBNET_ID, S2), (key::PORT_ID, P2)],
                vec![key::SUBNET_ID, key::PORT_ID],
            ),
            // Not recorded (the load balancer has none): nothing to compare with.
            (vec![created, (key::NETWORK_ID, S2)], vec![]),
            // An existing load balancer: already reported as having no effect.
            (
                vec![created, (key::LOAD_BALANCER_ID, LB), (key::FLAVOR_ID, F2)],
                vec![],
            ),
            // The id kube-lb wrote back for the load balancer it made: checked as before.
            (
                vec![own, (key::LOAD_BALANCER_ID, LB), (key::FLAVOR_ID, F2)],
                vec![key::FLAVOR_ID],
            ),
            (vec![(key::CREATED_WITH, "flavor")], vec![key::CREATED_WITH]),
        ];
        for (annotations, want) in cases {
            let want: Vec<String> = want.iter().map(|k| format!("annotation {k}")).collect();
            assert_eq!(
                create_only_warnings(&annotations, None),
                want,
                "{annotations:?}"
            );
        }

        // spec.loadBalancerIP: the floating IP of an external Service, the VIP of an
        // internal one.
        let addresses =
            r#"{"floating_ip_address":"203.0.113.7","vip_address":"10.0.0.9","vip_port_id":"p"}"#;
        let created = (key::CREATED_WITH, addresses);
        let internal = (key::INTERNAL, "true");
        let field = vec!["spec.loadBalancerIP".to_string()];
        for (annotations, requested, want) in [
            (vec![created], "203.0.113.7", vec![]),
            (vec![created], "203.0.113.8", field.clone()),
            (vec![created, internal], "10.0.0.9", vec![]),
            (vec![created, internal], "10.0.0.10", field.clone()),
            // Internal before, external now: the floating IP is attached as asked.
            (
                vec![(key::CREATED_WITH, r#"{"vip_address":"10.0.0.9"}"#)],
                "203.0.113.8",
                vec![],
            ),
        ] {
            assert_eq!(
                create_only_warnings(&annotations, Some(requested)),
                want,
                "{annotations:?} {requested}"
            );
        }
    }

    #[test]
    fn uuids_dns_names_and_selectors() {
        for (value, want) in [
            ("0e100000-0000-4000-8000-0000000000e1", true),
            ("8b4c3f0e2d1a4b5c9d8e7f6a5b4c3d2e", true),
            ("0E100000-0000-4000-8000-0000000000E1", true),
            ("0e100000-0000-4000-8000-0000000000e", false),
            ("0e1000000000-4000-8000-0000-000000e1", false),
            ("public", false),
            ("", false),
        ] {
            assert_eq!(is_uuid(value), want, "{value}");
        }
        for (value, want) in [
            ("web.example.com", true),
            ("a", true),
            ("Web.example.com", false),
            ("-a.b", false),
            ("a..b", false),
            ("1.2.3.4.nip.io", true),
        ] {
            assert_eq!(is_dns_subdomain(value), want, "{value}");
        }
        let parsed = parse_node_selector("zone=a, example.com/gpu ,").expect("valid");
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].operator, SelectorOperator::Equals);
        assert_eq!(parsed[1].key, "example.com/gpu");
        assert_eq!(parsed[1].operator, SelectorOperator::Exists);
        for bad in ["=a", "zone=a b", "bad key"] {
            assert!(parse_node_selector(bad).is_err(), "{bad}");
        }
    }
}

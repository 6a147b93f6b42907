//! Request-body checks the way Octavia's WSME types and Neutron's attribute maps do them,
//! before any state is touched: an attribute the resource type does not have is refused with
//! 400 and the faultstring names it with its path (`Unknown attribute for argument
//! listener_.listener: protocl`), so a client that misspells a field or sends a read-only one
//! (a listener's `protocol` on update) learns it from the mock as it would from Octavia.

use serde_json::Value;

use crate::state::ApiError;

/// `LoadBalancerPOST`.
const LOAD_BALANCER_POST: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "vip_address",
    "vip_port_id",
    "vip_subnet_id",
    "vip_network_id",
    "vip_qos_policy_id",
    "vip_sg_ids",
    "vip_vnic_type",
    "additional_vips",
    "project_id",
    "tenant_id",
    "listeners",
    "pools",
    "provider",
    "tags",
    "flavor_id",
    "availability_zone",
];
/// `LoadBalancerPUT`.
const LOAD_BALANCER_PUT: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "vip_qos_policy_id",
    "vip_sg_ids",
    "tags",
];
/// Attributes every listener type shares (`ListenerPUT`).
const LISTENER_PUT: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "connection_limit",
    "default_tls_container_ref",
    "sni_container_refs",
    "default_pool_id",
    "insert_headers",
    "timeout_client_data",
    "timeout_member_connect",
    "timeout_member_data",
    "timeout_tcp_inspect",
    "tags",
    "client_ca_tls_container_ref",
    "client_authentication",
    "client_crl_container_ref",
    "allowed_cidrs",
    "tls_ciphers",
    "tls_versions",
    "alpn_protocols",
    "hsts_max_age",
    "hsts_include_subdomains",
    "hsts_preload",
];
/// What `ListenerSingleCreate` (inside a load balancer graph) adds to the PUT attributes.
const LISTENER_NESTED_EXTRA: &[&str] = &["protocol", "protocol_port", "default_pool", "l7policies"];
/// What `ListenerPOST` adds on top of that.
const LISTENER_POST_EXTRA: &[&str] = &["loadbalancer_id", "project_id", "tenant_id"];
/// `PoolPUT`.
const POOL_PUT: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "lb_algorithm",
    "session_persistence",
    "tags",
    "tls_container_ref",
    "ca_tls_container_ref",
    "crl_container_ref",
    "tls_enabled",
    "tls_ciphers",
    "tls_versions",
    "alpn_protocols",
];
/// What `PoolSingleCreate` adds.
const POOL_NESTED_EXTRA: &[&str] = &["protocol", "healthmonitor", "members"];
/// What `PoolPOST` adds on top of that.
const POOL_POST_EXTRA: &[&str] = &["listener_id", "loadbalancer_id", "project_id", "tenant_id"];
/// `MemberPUT`.
const MEMBER_PUT: &[&str] = &[
    "name",
    "admin_state_up",
    "weight",
    "backup",
    "monitor_address",
    "monitor_port",
    "tags",
];
/// What `MemberSingleCreate` (nested, and each entry of a batch update) adds.
const MEMBER_NESTED_EXTRA: &[&str] = &["address", "protocol_port", "subnet_id", "request_sriov"];
/// What `MemberPOST` adds on top of that.
const MEMBER_POST_EXTRA: &[&str] = &["project_id", "tenant_id"];
/// `HealthMonitorPUT`.
const MONITOR_PUT: &[&str] = &[
    "name",
    "admin_state_up",
    "delay",
    "timeout",
    "max_retries",
    "max_retries_down",
    "http_method",
    "http_version",
    "url_path",
    "expected_codes",
    "domain_name",
    "tags",
];
/// What `HealthMonitorSingleCreate` adds.
const MONITOR_NESTED_EXTRA: &[&str] = &["type"];
/// What `HealthMonitorPOST` adds on top of that.
const MONITOR_POST_EXTRA: &[&str] = &["pool_id", "project_id", "tenant_id"];

/// How deep in a request an object sits: created on its own (POST), inside a load balancer
/// graph or a batch (nested), or updated (PUT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    Post,
    Nested,
    Put,
}

fn unknown(path: &str, mut attributes: Vec<&str>) -> ApiError {
    attributes.sort_unstable();
    let noun = if attributes.len() > 1 {
        "attributes"
    } else {
        "attribute"
    };
    ApiError::bad_request(format!(
        "Unknown {noun} for argument {path}: {}",
        attributes.join(", ")
    ))
}

/// Refuses attributes of `value` outside `allowed` (each list a part of the allowed set).
fn only(path: &str, value: &Value, allowed: &[&[&str]]) -> Result<(), ApiError> {
    let object = value.as_object().ok_or_else(|| {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute {path}. Value: '{value}'. Value should be an object"
        ))
    })?;
    let extra: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|key| !allowed.iter().any(|set| set.contains(key)))
        .collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(unknown(path, extra))
    }
}

/// The entries of a list attribute (absent or null: none).
fn entries<'a>(value: &'a Value, key: &str) -> Result<&'a [Value], ApiError> {
    match &value[key] {
        Value::Null => Ok(&[]),
        Value::Array(items) => Ok(items),
        other => Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute {key}. Value: '{other}'. Value should be a list"
        ))),
    }
}

/// Checks the one root attribute a request body carries (`{"listener": {...}}`), named by the
/// controller argument (`argument`) as WSME reports it.
pub(crate) fn root<'a>(argument: &str, body: &'a Value, key: &str) -> Result<&'a Value, ApiError> {
    only(argument, body, &[&[key]])?;
    match &body[key] {
        Value::Null => Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute {key}. Value: 'None'. Mandatory field missing."
        ))),
        inner => Ok(inner),
    }
}

pub(crate) fn load_balancer(path: &str, value: &Value, form: Form) -> Result<(), ApiError> {
    if form == Form::Put {
        return only(path, value, &[LOAD_BALANCER_PUT]);
    }
    only(path, value, &[LOAD_BALANCER_POST])?;
    for listener_doc in entries(value, "listeners")? {
        listener(&format!("{path}.listeners"), listener_doc, Form::Nested)?;
    }
    for pool_doc in entries(value, "pools")? {
        pool(&format!("{path}.pools"), pool_doc, Form::Nested)?;
    }
    Ok(())
}

pub(crate) fn listener(path: &str, value: &Value, form: Form) -> Result<(), ApiError> {
    match form {
        Form::Put => return only(path, value, &[LISTENER_PUT]),
        Form::Nested => only(path, value, &[LISTENER_PUT, LISTENER_NESTED_EXTRA])?,
        Form::Post => only(
            path,
            value,
            &[LISTENER_PUT, LISTENER_NESTED_EXTRA, LISTENER_POST_EXTRA],
        )?,
    }
    if value["default_pool"].is_object() {
        pool(
            &format!("{path}.default_pool"),
            &value["default_pool"],
            Form::Nested,
        )?;
    }
    Ok(())
}

pub(crate) fn pool(path: &str, value: &Value, form: Form) -> Result<(), ApiError> {
    match form {
        Form::Put => return only(path, value, &[POOL_PUT]),
        Form::Nested => only(path, value, &[POOL_PUT, POOL_NESTED_EXTRA])?,
        Form::Post => only(path, value, &[POOL_PUT, POOL_NESTED_EXTRA, POOL_POST_EXTRA])?,
    }
    for member_doc in entries(value, "members")? {
        member(&format!("{path}.members"), member_doc, Form::Nested)?;
    }
    if value["healthmonitor"].is_object() {
        monitor(
            &format!("{path}.healthmonitor"),
            &value["healthmonitor"],
            Form::Nested,
        )?;
    }
    Ok(())
}

pub(crate) fn member(path: &str, value: &Value, form: Form) -> Result<(), ApiError> {
    match form {
        Form::Put => only(path, value, &[MEMBER_PUT]),
        Form::Nested => only(path, value, &[MEMBER_PUT, MEMBER_NESTED_EXTRA]),
        Form::Post => only(
            path,
            value,
            &[MEMBER_PUT, MEMBER_NESTED_EXTRA, MEMBER_POST_EXTRA],
        ),
    }
}

/// The batch member update: `{"members": [...]}`, each entry a nested member.
pub(crate) fn member_batch(argument: &str, body: &Value) -> Result<(), ApiError> {
    only(argument, body, &[&["members"]])?;
    if !body["members"].is_array() {
        return Err(ApiError::bad_request(
            "Invalid input for field/attribute members. Value: 'None'. Mandatory field missing.",
        ));
    }
    for entry in entries(body, "members")? {
        member(&format!("{argument}.members"), entry, Form::Nested)?;
    }
    Ok(())
}

pub(crate) fn monitor(path: &str, value: &Value, form: Form) -> Result<(), ApiError> {
    match form {
        Form::Put => only(path, value, &[MONITOR_PUT]),
        Form::Nested => only(path, value, &[MONITOR_PUT, MONITOR_NESTED_EXTRA]),
        Form::Post => only(
            path,
            value,
            &[MONITOR_PUT, MONITOR_NESTED_EXTRA, MONITOR_POST_EXTRA],
        ),
    }
}

/// Listener → pool protocol pairs Octavia accepts (`VALID_LISTENER_POOL_PROTOCOL_MAP`).
pub(crate) fn pool_protocol_fits(listener: &str, pool: &str) -> bool {
    let allowed: &[&str] = match listener {
        "TCP" => &["HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"],
        "HTTP" | "TERMINATED_HTTPS" => &["HTTP", "PROXY", "PROXYV2"],
        "HTTPS" => &["HTTPS", "PROXY", "PROXYV2", "TCP"],
        "UDP" => &["UDP"],
        "SCTP" => &["SCTP"],
        _ => &[],
    };
    allowed.contains(&pool)
}

/// Neutron's check of a request body: `{"<resource>": {...}}` with only the attributes the
/// resource has for this method; anything else is `Unrecognized attribute(s)`.
pub(crate) fn neutron<'a>(
    body: &'a Value,
    resource: &str,
    allowed: &[&str],
) -> Result<&'a Value, ApiError> {
    let inner = body
        .get(resource)
        .filter(|v| v.is_object())
        .ok_or_else(|| {
            ApiError::typed(
                axum::http::StatusCode::BAD_REQUEST,
                "HTTPBadRequest",
                format!("Resource body required for {resource}"),
            )
        })?;
    let mut extra: Vec<&str> = inner
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .map(String::as_str)
        .filter(|key| !allowed.contains(key))
        .collect();
    if extra.is_empty() {
        return Ok(inner);
    }
    extra.sort_unstable();
    Err(ApiError::typed(
        axum::http::StatusCode::BAD_REQUEST,
        "HTTPBadRequest",
        format!("Unrecognized attribute(s) '{}'", extra.join(", ")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn octavia_refuses_attributes_the_type_lacks_naming_their_path() {
        let cases = [
            (
                "graph with a typo in a nested member",
                load_balancer(
                    "load_balancer.loadbalancer",
                    &json!({"name": "a", "listeners": [{"protocol": "TCP", "protocol_port": 80,
                        "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                            "members": [{"address": "10.0.0.1", "protocol_port": 1, "wieght": 2}]}}]}),
                    Form::Post,
                ),
                Some(
                    "Unknown attribute for argument load_balancer.loadbalancer.listeners.default_pool.members: wieght",
                ),
            ),
            (
                "a nested listener cannot name its load balancer",
                load_balancer(
                    "load_balancer.loadbalancer",
                    &json!({"listeners": [{"protocol": "TCP", "protocol_port": 80, "loadbalancer_id": "x"}]}),
                    Form::Post,
                ),
                Some(
                    "Unknown attribute for argument load_balancer.loadbalancer.listeners: loadbalancer_id",
                ),
            ),
            (
                "a listener's protocol is read-only",
                listener(
                    "listener_.listener",
                    &json!({"protocol": "UDP", "zzz": 1}),
                    Form::Put,
                ),
                Some("Unknown attributes for argument listener_.listener: protocol, zzz"),
            ),
            (
                "a full standalone listener",
                listener(
                    "listener_.listener",
                    &json!({"loadbalancer_id": "x", "protocol": "TCP", "protocol_port": 80,
                        "connection_limit": -1, "allowed_cidrs": ["10.0.0.0/8"], "tags": []}),
                    Form::Post,
                ),
                None,
            ),
            (
                "a standalone monitor",
                monitor(
                    "health_monitor_.healthmonitor",
                    &json!({"pool_id": "p", "type": "HTTP", "delay": 5, "timeout": 3,
                        "max_retries": 1, "max_retries_down": 3, "url_path": "/healthz"}),
                    Form::Post,
                ),
                None,
            ),
            (
                "monitor type cannot change",
                monitor(
                    "health_monitor_.healthmonitor",
                    &json!({"type": "TCP"}),
                    Form::Put,
                ),
                Some("Unknown attribute for argument health_monitor_.healthmonitor: type"),
            ),
            (
                "batch entries are nested members",
                member_batch(
                    "members_",
                    &json!({"members": [{"address": "10.0.0.1", "protocol_port": 1, "pool_id": "p"}]}),
                ),
                Some("Unknown attribute for argument members_.members: pool_id"),
            ),
        ];
        for (what, result, want) in cases {
            match (result, want) {
                (Ok(()), None) => {}
                (Err(error), Some(want)) => {
                    assert_eq!(error.status, 400, "{what}");
                    assert_eq!(error.message, want, "{what}");
                }
                (other, want) => panic!("{what}: got {other:?}, wanted {want:?}"),
            }
        }
    }

    #[test]
    fn listener_and_pool_protocols_pair_as_octavia_allows() {
        let cases = [
            ("TCP", "TCP", true),
            ("TCP", "PROXY", true),
            ("TCP", "PROXYV2", true),
            ("TCP", "UDP", false),
            ("UDP", "UDP", true),
            ("UDP", "TCP", false),
            ("HTTP", "HTTP", true),
            ("HTTP", "TCP", false),
            ("TERMINATED_HTTPS", "HTTP", true),
            ("PROMETHEUS", "HTTP", false),
        ];
        for (listener, pool, want) in cases {
            assert_eq!(
                pool_protocol_fits(listener, pool),
                want,
                "{listener} → {pool}"
            );
        }
    }

    #[test]
    fn neutron_names_unrecognized_attributes() {
        let body = json!({"floatingip": {"floating_network_id": "n", "bogus": 1, "also": 2}});
        let error = neutron(&body, "floatingip", &["floating_network_id"]).unwrap_err();
        assert_eq!(error.message, "Unrecognized attribute(s) 'also, bogus'");
        assert_eq!(error.kind, "HTTPBadRequest");
        assert!(neutron(&json!({}), "floatingip", &[]).is_err());
    }
}

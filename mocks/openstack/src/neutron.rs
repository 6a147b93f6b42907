//! Neutron v2.0: networks (with `router:external`) and subnets (fixtures), ports (VIP ports
//! made by Octavia, node ports seeded by the builder, and ports clients create), floating IPs
//! with port association, security groups with their rules, and the project's quota. Request
//! bodies are checked as Neutron's attribute maps do (`Unrecognized attribute(s)`).

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::{ApiError, ApiResult, State, filter, public};
use crate::validate;

/// `GET /networking/`: the versions document.
pub(crate) fn versions(state: &State) -> Value {
    json!({"versions": [{"id": "v2.0", "status": "CURRENT",
        "links": [{"href": format!("{}/networking/v2.0/", state.config.base_url), "rel": "self"}]}]})
}

const FLOATING_IP_POST: &[&str] = &[
    "floating_network_id",
    "port_id",
    "fixed_ip_address",
    "floating_ip_address",
    "subnet_id",
    "description",
    "dns_domain",
    "dns_name",
    "qos_policy_id",
    "project_id",
    "tenant_id",
    "tags",
];
const FLOATING_IP_PUT: &[&str] = &[
    "port_id",
    "fixed_ip_address",
    "description",
    "qos_policy_id",
];
const PORT_PUT: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "fixed_ips",
    "device_id",
    "device_owner",
    "security_groups",
    "allowed_address_pairs",
    "binding:host_id",
    "port_security_enabled",
];
const PORT_POST_EXTRA: &[&str] = &[
    "network_id",
    "mac_address",
    "binding:vnic_type",
    "project_id",
    "tenant_id",
    "tags",
];
const SECURITY_GROUP_PUT: &[&str] = &["name", "description", "stateful"];
const SECURITY_GROUP_POST_EXTRA: &[&str] = &["project_id", "tenant_id", "tags"];
const SECURITY_GROUP_RULE_POST: &[&str] = &[
    "security_group_id",
    "direction",
    "ethertype",
    "protocol",
    "port_range_min",
    "port_range_max",
    "remote_ip_prefix",
    "remote_group_id",
    "remote_address_group_id",
    "description",
    "project_id",
    "tenant_id",
];
/// Protocol names Neutron accepts in a rule (besides numbers 0-255).
const RULE_PROTOCOLS: &[&str] = &[
    "ah",
    "dccp",
    "egp",
    "esp",
    "gre",
    "hopopt",
    "icmp",
    "igmp",
    "ip",
    "ipip",
    "ipv6-encap",
    "ipv6-frag",
    "ipv6-icmp",
    "icmpv6",
    "ipv6-nonxt",
    "ipv6-opts",
    "ipv6-route",
    "ospf",
    "pgm",
    "rsvp",
    "sctp",
    "tcp",
    "udp",
    "udplite",
    "vrrp",
];

/// Serves one request under `/v2.0/`.
pub(crate) fn serve(
    state: &mut State,
    method: &str,
    segments: &[&str],
    query: &[(String, String)],
    body: &Value,
) -> ApiResult {
    // Neutron accepts an optional `.json` suffix on resource paths.
    let segments: Vec<&str> = segments
        .iter()
        .map(|s| s.trim_end_matches(".json"))
        .collect();
    match (method, segments.as_slice()) {
        ("GET", ["quotas", project]) => {
            if *project != state.config.project_id {
                return Err(ApiError::not_found("Project", project));
            }
            let mut quota = serde_json::Map::new();
            for resource in [
                "floatingip",
                "network",
                "port",
                "rbac_policy",
                "router",
                "security_group",
                "security_group_rule",
                "subnet",
                "subnetpool",
            ] {
                let limit = state.quota(resource).map_or(-1, |n| n as i64);
                quota.insert(resource.into(), json!(limit));
            }
            Ok((StatusCode::OK, Some(json!({"quota": quota}))))
        }
        ("GET", ["security-groups"]) => {
            let groups: Vec<Value> = filter(state.store.security_groups.values(), query)
                .iter()
                .map(|group| security_group_document(state, group))
                .collect();
            Ok((StatusCode::OK, Some(json!({"security_groups": groups}))))
        }
        ("GET", ["security-groups", id]) => {
            let group = state.store.security_groups.get(*id).ok_or_else(|| {
                ApiError::typed(
                    StatusCode::NOT_FOUND,
                    "SecurityGroupNotFound",
                    format!("Security group {id} does not exist"),
                )
            })?;
            let document = security_group_document(state, group);
            Ok((StatusCode::OK, Some(json!({"security_group": document}))))
        }
        ("GET", [collection]) => {
            let items = filter(collection_map(state, collection)?.values(), query);
            Ok((StatusCode::OK, Some(json!({key(collection): items}))))
        }
        ("GET", [collection, id]) => {
            let item = collection_map(state, collection)?
                .get(*id)
                .ok_or_else(|| ApiError::not_found(label(collection), id))?;
            Ok((
                StatusCode::OK,
                Some(json!({singular(collection): public(item)})),
            ))
        }
        ("POST", ["floatingips"]) => {
            let request = validate::neutron(body, "floatingip", FLOATING_IP_POST)?;
            create_floating_ip(state, request)
        }
        ("PUT", ["floatingips", id]) => {
            let request = validate::neutron(body, "floatingip", FLOATING_IP_PUT)?;
            update_floating_ip(state, id, request)
        }
        ("DELETE", ["floatingips", id]) => {
            state
                .store
                .floatingips
                .remove(*id)
                .ok_or_else(|| ApiError::not_found("Floating IP", id))?;
            Ok((StatusCode::NO_CONTENT, None))
        }
        ("POST", ["ports"]) => {
            let request = validate::neutron(body, "port", &[PORT_PUT, PORT_POST_EXTRA].concat())?;
            create_port(state, request)
        }
        ("PUT", ["ports", id]) => {
            let request = validate::neutron(body, "port", PORT_PUT)?;
            update_port(state, id, request)
        }
        ("DELETE", ["ports", id]) => {
            if !state.store.ports.contains_key(*id) {
                return Err(ApiError::not_found("Port", id));
            }
            state.remove_port(id);
            Ok((StatusCode::NO_CONTENT, None))
        }
        ("POST", ["security-groups"]) => {
            let request = validate::neutron(
                body,
                "security_group",
                &[SECURITY_GROUP_PUT, SECURITY_GROUP_POST_EXTRA].concat(),
            )?;
            create_security_group(state, request)
        }
        ("PUT", ["security-groups", id]) => {
            let request = validate::neutron(body, "security_group", SECURITY_GROUP_PUT)?;
            update_security_group(state, id, request)
        }
        ("DELETE", ["security-groups", id]) => delete_security_group(state, id),
        ("POST", ["security-group-rules"]) => {
            let request = validate::neutron(body, "security_group_rule", SECURITY_GROUP_RULE_POST)?;
            create_security_group_rule(state, request)
        }
        ("DELETE", ["security-group-rules", id]) => {
            state
                .store
                .security_group_rules
                .remove(*id)
                .ok_or_else(|| {
                    ApiError::typed(
                        StatusCode::NOT_FOUND,
                        "SecurityGroupRuleNotFound",
                        format!("Security group rule {id} does not exist"),
                    )
                })?;
            Ok((StatusCode::NO_CONTENT, None))
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "The resource could not be found.",
        )),
    }
}

fn collection_map<'a>(
    state: &'a State,
    collection: &str,
) -> Result<&'a std::collections::BTreeMap<String, Value>, ApiError> {
    Ok(match collection {
        "networks" => &state.store.networks,
        "subnets" => &state.store.subnets,
        "ports" => &state.store.ports,
        "floatingips" => &state.store.floatingips,
        "security-group-rules" => &state.store.security_group_rules,
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "The resource could not be found.",
            ));
        }
    })
}

/// The JSON key of a collection (URLs use dashes, bodies underscores).
fn key(collection: &str) -> String {
    collection.replace('-', "_")
}

fn singular(collection: &str) -> &'static str {
    match collection {
        "networks" => "network",
        "subnets" => "subnet",
        "ports" => "port",
        "security-group-rules" => "security_group_rule",
        _ => "floatingip",
    }
}

fn label(collection: &str) -> &'static str {
    match collection {
        "networks" => "Network",
        "subnets" => "Subnet",
        "ports" => "Port",
        "security-group-rules" => "Security group rule",
        _ => "Floating IP",
    }
}

/// Neutron's 409 when a create would exceed the project's quota.
fn check_quota(state: &State, resource: &str, in_use: usize) -> Result<(), ApiError> {
    match state.quota(resource) {
        Some(limit) if in_use >= limit => Err(ApiError::typed(
            StatusCode::CONFLICT,
            "OverQuota",
            format!("Quota exceeded for resources: ['{resource}']."),
        )),
        _ => Ok(()),
    }
}

/// A security group as Neutron shows it: with its rules embedded.
pub(crate) fn security_group_document(state: &State, group: &Value) -> Value {
    let mut document = public(group);
    let rules: Vec<Value> = state
        .store
        .security_group_rules
        .values()
        .filter(|rule| rule["security_group_id"] == group["id"])
        .map(public)
        .collect();
    document["security_group_rules"] = json!(rules);
    document
}

/// A node VM's port (the builder's fixtures).
pub(crate) fn seed_server_port(state: &mut State, network_id: &str, device_id: &str, ip: &str) {
    let subnet = state
        .store
        .networks
        .get(network_id)
        .and_then(|n| n["subnets"][0].as_str().map(str::to_string));
    let id = state.new_id(0x9e);
    let project = state.config.project_id.clone();
    state.store.ports.insert(
        id.clone(),
        json!({
            "id": id, "name": "", "network_id": network_id, "device_id": device_id,
            "device_owner": "compute:nova", "fixed_ips": [{"subnet_id": subnet, "ip_address": ip}],
            "status": "ACTIVE", "admin_state_up": true, "security_groups": [],
            "allowed_address_pairs": [], "port_security_enabled": true,
            "mac_address": "fa:16:3e:00:00:02", "description": "", "tags": [],
            "project_id": project, "tenant_id": project, "revision_number": 0,
        }),
    );
}

fn now_fields(document: &mut Value) {
    let now = State::now_text();
    document["created_at"] = json!(now);
    document["updated_at"] = json!(now);
    document["revision_number"] = json!(0);
}

fn touch(document: &mut Value) {
    document["updated_at"] = json!(State::now_text());
    let revision = document["revision_number"].as_i64().unwrap_or_default();
    document["revision_number"] = json!(revision + 1);
}

/// Every id in `security_groups` must name an existing group.
fn known_groups(state: &State, groups: &Value) -> Result<Value, ApiError> {
    let Some(list) = groups.as_array() else {
        return Err(ApiError::bad_request(format!(
            "Invalid input for security_groups. Reason: '{groups}' is not a list."
        )));
    };
    for group in list {
        let id = group.as_str().unwrap_or_default();
        if !state.store.security_groups.contains_key(id) {
            return Err(ApiError::typed(
                StatusCode::NOT_FOUND,
                "SecurityGroupNotFound",
                format!("Security group {id} does not exist"),
            ));
        }
    }
    Ok(groups.clone())
}

fn create_port(state: &mut State, request: &Value) -> ApiResult {
    let network_id = request["network_id"].as_str().ok_or_else(|| {
        ApiError::bad_request("Invalid input for network_id. Reason: 'None' is not a valid UUID.")
    })?;
    let network = state.store.networks.get(network_id).ok_or_else(|| {
        ApiError::typed(
            StatusCode::NOT_FOUND,
            "NetworkNotFound",
            format!("Network {network_id} could not be found."),
        )
    })?;
    let default_subnet = network["subnets"][0]
        .as_str()
        .unwrap_or_default()
        .to_string();
    check_quota(state, "port", state.store.ports.len())?;
    let (subnet_id, address) = match request["fixed_ips"][0].as_object() {
        Some(fixed) => {
            let subnet = fixed
                .get("subnet_id")
                .and_then(Value::as_str)
                .unwrap_or(&default_subnet)
                .to_string();
            match fixed.get("ip_address").and_then(Value::as_str) {
                Some(ip) => (subnet, ip.to_string()),
                None => {
                    let ip = state.allocate_address(&subnet)?.to_string();
                    (subnet, ip)
                }
            }
        }
        None => {
            let ip = state.allocate_address(&default_subnet)?.to_string();
            (default_subnet, ip)
        }
    };
    let groups = match request.get("security_groups") {
        Some(groups) => known_groups(state, groups)?,
        None => json!([]),
    };
    let id = state.new_id(0x9e);
    let project = state.config.project_id.clone();
    let text = |key: &str| json!(request[key].as_str().unwrap_or_default());
    let mut port = json!({
        "id": id, "name": text("name"), "description": text("description"),
        "network_id": network_id, "device_id": text("device_id"), "device_owner": text("device_owner"),
        "fixed_ips": [{"subnet_id": subnet_id, "ip_address": address}], "status": "DOWN",
        "admin_state_up": request["admin_state_up"].as_bool().unwrap_or(true),
        "security_groups": groups, "allowed_address_pairs": request.get("allowed_address_pairs").cloned().unwrap_or(json!([])),
        "port_security_enabled": request["port_security_enabled"].as_bool().unwrap_or(true),
        "mac_address": "fa:16:3e:00:00:03", "tags": request.get("tags").cloned().unwrap_or(json!([])),
        "project_id": project, "tenant_id": project,
    });
    now_fields(&mut port);
    state.store.ports.insert(id.clone(), port.clone());
    Ok((StatusCode::CREATED, Some(json!({"port": port}))))
}

fn update_port(state: &mut State, id: &str, request: &Value) -> ApiResult {
    if !state.store.ports.contains_key(id) {
        return Err(ApiError::not_found("Port", id));
    }
    let groups = match request.get("security_groups") {
        Some(groups) => Some(known_groups(state, groups)?),
        None => None,
    };
    let port = state
        .store
        .ports
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found("Port", id))?;
    if let Some(groups) = groups {
        port["security_groups"] = groups;
    }
    for field in [
        "name",
        "description",
        "admin_state_up",
        "device_id",
        "device_owner",
        "allowed_address_pairs",
        "port_security_enabled",
    ] {
        if let Some(value) = request.get(field) {
            port[field] = value.clone();
        }
    }
    touch(port);
    let document = public(port);
    Ok((StatusCode::OK, Some(json!({"port": document}))))
}

fn create_security_group(state: &mut State, request: &Value) -> ApiResult {
    check_quota(state, "security_group", state.store.security_groups.len())?;
    let id = state.new_id(0x5e);
    let project = state.config.project_id.clone();
    let mut group = json!({
        "id": id, "name": request["name"].as_str().unwrap_or_default(),
        "description": request["description"].as_str().unwrap_or_default(),
        "stateful": request["stateful"].as_bool().unwrap_or(true),
        "tags": request.get("tags").cloned().unwrap_or(json!([])),
        "project_id": project, "tenant_id": project, "shared": false,
    });
    now_fields(&mut group);
    state.store.security_groups.insert(id.clone(), group);
    // A new group allows all egress, as Neutron's default rules do.
    for ethertype in ["IPv4", "IPv6"] {
        let rule_id = state.new_id(0x5f);
        let mut rule = rule_document(
            state,
            &rule_id,
            &json!({
            "security_group_id": id, "direction": "egress", "ethertype": ethertype}),
        );
        now_fields(&mut rule);
        state.store.security_group_rules.insert(rule_id, rule);
    }
    let document = security_group_document(state, &state.store.security_groups[&id]);
    Ok((
        StatusCode::CREATED,
        Some(json!({"security_group": document})),
    ))
}

fn update_security_group(state: &mut State, id: &str, request: &Value) -> ApiResult {
    let group = state.store.security_groups.get_mut(id).ok_or_else(|| {
        ApiError::typed(
            StatusCode::NOT_FOUND,
            "SecurityGroupNotFound",
            format!("Security group {id} does not exist"),
        )
    })?;
    for field in SECURITY_GROUP_PUT {
        if let Some(value) = request.get(*field) {
            group[*field] = value.clone();
        }
    }
    touch(group);
    let document = security_group_document(state, &state.store.security_groups[id]);
    Ok((StatusCode::OK, Some(json!({"security_group": document}))))
}

fn delete_security_group(state: &mut State, id: &str) -> ApiResult {
    if !state.store.security_groups.contains_key(id) {
        return Err(ApiError::typed(
            StatusCode::NOT_FOUND,
            "SecurityGroupNotFound",
            format!("Security group {id} does not exist"),
        ));
    }
    let in_use = state.store.ports.values().any(|port| {
        port["security_groups"]
            .as_array()
            .is_some_and(|groups| groups.iter().any(|g| g == id))
    });
    if in_use {
        return Err(ApiError::typed(
            StatusCode::CONFLICT,
            "SecurityGroupInUse",
            format!("Security Group {id} in use."),
        ));
    }
    state.store.security_groups.remove(id);
    state
        .store
        .security_group_rules
        .retain(|_, rule| rule["security_group_id"] != json!(id));
    Ok((StatusCode::NO_CONTENT, None))
}

/// A rule document with Neutron's defaults filled in.
fn rule_document(state: &State, id: &str, request: &Value) -> Value {
    let project = &state.config.project_id;
    let prefix = request["remote_ip_prefix"].clone();
    json!({
        "id": id, "security_group_id": request["security_group_id"],
        "direction": request["direction"], "ethertype": request["ethertype"].as_str().unwrap_or("IPv4"),
        "protocol": request["protocol"], "port_range_min": request["port_range_min"],
        "port_range_max": request["port_range_max"], "remote_ip_prefix": prefix,
        "normalized_cidr": prefix, "remote_group_id": request["remote_group_id"],
        "remote_address_group_id": request["remote_address_group_id"],
        "description": request["description"].as_str().unwrap_or_default(),
        "project_id": project, "tenant_id": project, "belongs_to_default_sg": false,
    })
}

fn invalid(field: &str, reason: String) -> ApiError {
    ApiError::typed(
        StatusCode::BAD_REQUEST,
        "InvalidInput",
        format!("Invalid input for {field}. Reason: {reason}"),
    )
}

fn create_security_group_rule(state: &mut State, request: &Value) -> ApiResult {
    let group_id = request["security_group_id"]
        .as_str()
        .ok_or_else(|| invalid("security_group_id", "'None' is not a valid UUID.".into()))?;
    if !state.store.security_groups.contains_key(group_id) {
        return Err(ApiError::typed(
            StatusCode::NOT_FOUND,
            "SecurityGroupNotFound",
            format!("Security group {group_id} does not exist"),
        ));
    }
    let direction = request["direction"].as_str().unwrap_or_default();
    if !matches!(direction, "ingress" | "egress") {
        return Err(invalid(
            "direction",
            format!("'{direction}' is not in ['ingress', 'egress']."),
        ));
    }
    let ethertype = request["ethertype"].as_str().unwrap_or("IPv4");
    if !matches!(ethertype, "IPv4" | "IPv6") {
        return Err(invalid(
            "ethertype",
            format!("'{ethertype}' is not in ['IPv4', 'IPv6']."),
        ));
    }
    let protocol = match &request["protocol"] {
        Value::Null => None,
        Value::String(name) => {
            let numeric = name.parse::<u8>().is_ok();
            if !numeric && !RULE_PROTOCOLS.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(ApiError::typed(
                    StatusCode::BAD_REQUEST,
                    "SecurityGroupRuleInvalidProtocol",
                    format!("Security group rule protocol {name} not supported."),
                ));
            }
            Some(name.to_ascii_lowercase())
        }
        other => {
            return Err(ApiError::typed(
                StatusCode::BAD_REQUEST,
                "SecurityGroupRuleInvalidProtocol",
                format!("Security group rule protocol {other} not supported."),
            ));
        }
    };
    let port = |key: &str| -> Result<Option<i64>, ApiError> {
        match &request[key] {
            Value::Null => Ok(None),
            value => value
                .as_i64()
                .filter(|p| (0..=65535).contains(p))
                .map(Some)
                .ok_or_else(|| {
                    ApiError::typed(
                        StatusCode::BAD_REQUEST,
                        "SecurityGroupInvalidPortValue",
                        format!("Invalid value for port {value}."),
                    )
                }),
        }
    };
    let (min, max) = (port("port_range_min")?, port("port_range_max")?);
    if (min.is_some() || max.is_some()) && protocol.is_none() {
        return Err(ApiError::typed(
            StatusCode::BAD_REQUEST,
            "SecurityGroupProtocolRequiredWithPorts",
            "Must also specify protocol if port range is given.",
        ));
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
        && matches!(
            protocol.as_deref(),
            Some("tcp" | "udp" | "sctp" | "dccp" | "udplite")
        )
    {
        return Err(ApiError::typed(
            StatusCode::BAD_REQUEST,
            "SecurityGroupInvalidPortRange",
            "For TCP/UDP protocols, port_range_min must be <= port_range_max",
        ));
    }
    if !request["remote_ip_prefix"].is_null() && !request["remote_group_id"].is_null() {
        return Err(ApiError::typed(
            StatusCode::BAD_REQUEST,
            "SecurityGroupRemoteGroupAndRemoteIpPrefix",
            "Only remote_ip_prefix or remote_group_id may be provided.",
        ));
    }
    if let Some(prefix) = request["remote_ip_prefix"].as_str() {
        let net: ipnet::IpNet = prefix
            .parse()
            .or_else(|_| prefix.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map_err(|_| {
                invalid(
                    "remote_ip_prefix",
                    format!("'{prefix}' is not a valid IP subnet."),
                )
            })?;
        let family = if net.addr().is_ipv4() { "IPv4" } else { "IPv6" };
        if family != ethertype {
            return Err(ApiError::typed(
                StatusCode::BAD_REQUEST,
                "SecurityGroupRuleParameterConflict",
                format!("Conflicting value ethertype {ethertype} for CIDR {prefix}"),
            ));
        }
    }
    check_quota(
        state,
        "security_group_rule",
        state.store.security_group_rules.len(),
    )?;
    let mut normalized = request.clone();
    normalized["ethertype"] = json!(ethertype);
    normalized["protocol"] = json!(protocol);
    let identity = |rule: &Value| {
        [
            "security_group_id",
            "direction",
            "ethertype",
            "protocol",
            "port_range_min",
            "port_range_max",
            "remote_ip_prefix",
            "remote_group_id",
        ]
        .map(|k| rule[k].clone())
    };
    let wanted = identity(&normalized);
    if let Some(existing) = state
        .store
        .security_group_rules
        .values()
        .find(|rule| identity(rule) == wanted)
    {
        return Err(ApiError::typed(
            StatusCode::CONFLICT,
            "SecurityGroupRuleExists",
            format!(
                "Security group rule already exists. Rule id is {}.",
                existing["id"].as_str().unwrap_or_default()
            ),
        ));
    }
    let id = state.new_id(0x5f);
    let mut rule = rule_document(state, &id, &normalized);
    now_fields(&mut rule);
    state.store.security_group_rules.insert(id, rule.clone());
    Ok((
        StatusCode::CREATED,
        Some(json!({"security_group_rule": rule})),
    ))
}

/// Associates `fip` with `port_id` (or dissociates it with `null`), as Neutron checks it: the
/// port must exist and carry no other floating IP.
fn associate(state: &mut State, fip_id: &str, port_id: &Value) -> Result<(), ApiError> {
    let fixed = match port_id {
        Value::Null => Value::Null,
        Value::String(port) => {
            let port_doc = state
                .store
                .ports
                .get(port)
                .ok_or_else(|| ApiError::not_found("Port", port))?;
            let fixed = port_doc["fixed_ips"][0]["ip_address"].clone();
            let taken = state
                .store
                .floatingips
                .values()
                .any(|f| f["port_id"] == json!(port) && f["id"] != json!(fip_id));
            if taken {
                return Err(ApiError::typed(
                    StatusCode::CONFLICT,
                    "FloatingIPPortAlreadyAssociated",
                    format!(
                        "Cannot associate floating IP with port {port}: the port already has a floating IP."
                    ),
                ));
            }
            fixed
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid input for port_id. Reason: '{other}' is not a valid UUID."
            )));
        }
    };
    if let Some(fip) = state.store.floatingips.get_mut(fip_id) {
        fip["status"] = json!(if fixed.is_null() { "DOWN" } else { "ACTIVE" });
        fip["port_id"] = port_id.clone();
        fip["fixed_ip_address"] = fixed;
    }
    Ok(())
}

fn create_floating_ip(state: &mut State, request: &Value) -> ApiResult {
    let network_id = request["floating_network_id"].as_str().ok_or_else(|| {
        ApiError::bad_request(
            "Invalid input for floating_network_id. Reason: 'None' is not a valid UUID.",
        )
    })?;
    let network = state
        .store
        .networks
        .get(network_id)
        .ok_or_else(|| ApiError::not_found("Network", network_id))?;
    if network["router:external"] != json!(true) {
        return Err(ApiError::typed(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "Bad floatingip request: Network {network_id} is not a valid external network."
            ),
        ));
    }
    if let Some(limit) = state.config.quotas.floating_ips
        && state.store.floatingips.len() >= limit
    {
        return Err(ApiError::typed(
            StatusCode::CONFLICT,
            "OverQuota",
            "Quota exceeded for resources: ['floatingip'].",
        ));
    }
    let subnet_id = match request["subnet_id"].as_str() {
        Some(subnet) => subnet.to_string(),
        None => network["subnets"][0]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    };
    let address = match request["floating_ip_address"].as_str() {
        Some(address) => {
            if state
                .store
                .floatingips
                .values()
                .any(|f| f["floating_ip_address"] == json!(address))
            {
                return Err(ApiError::typed(
                    StatusCode::CONFLICT,
                    "IpAddressAlreadyAllocated",
                    format!("IP address {address} already allocated in subnet {subnet_id}"),
                ));
            }
            address.to_string()
        }
        None => state.allocate_address(&subnet_id)?.to_string(),
    };
    let id = state.new_id(0xf1);
    let now = State::now_text();
    state.store.floatingips.insert(
        id.clone(),
        json!({
            "id": id, "floating_ip_address": address, "floating_network_id": network_id,
            "router_id": null, "port_id": null, "fixed_ip_address": null, "status": "DOWN",
            "project_id": state.config.project_id, "tenant_id": state.config.project_id,
            "description": request["description"].as_str().unwrap_or_default(), "tags": [],
            "created_at": now, "updated_at": now, "revision_number": 0, "port_details": null,
            "dns_domain": "", "dns_name": "", "qos_policy_id": null, "port_forwardings": [],
        }),
    );
    if let Some(port) = request.get("port_id").filter(|p| !p.is_null())
        && let Err(error) = associate(state, &id, port)
    {
        state.store.floatingips.remove(&id);
        return Err(error);
    }
    let document = public(&state.store.floatingips[&id]);
    Ok((StatusCode::CREATED, Some(json!({"floatingip": document}))))
}

fn update_floating_ip(state: &mut State, id: &str, request: &Value) -> ApiResult {
    if !state.store.floatingips.contains_key(id) {
        return Err(ApiError::not_found("Floating IP", id));
    }
    if let Some(port) = request.get("port_id") {
        associate(state, id, port)?;
    }
    if let Some(fip) = state.store.floatingips.get_mut(id) {
        if let Some(description) = request["description"].as_str() {
            fip["description"] = json!(description);
        }
        fip["updated_at"] = json!(State::now_text());
        let revision = fip["revision_number"].as_i64().unwrap_or_default();
        fip["revision_number"] = json!(revision + 1);
    }
    let document = public(&state.store.floatingips[id]);
    Ok((StatusCode::OK, Some(json!({"floatingip": document}))))
}

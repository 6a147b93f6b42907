//! Octavia v2: load balancers (fully populated create, cascade delete), listeners, pools,
//! members (incl. the batch update), health monitors, with the provisioning state machine and
//! the 409 on changes under an immutable (`PENDING_*`) load balancer.

use axum::http::StatusCode;
use serde_json::{Map, Value, json};

use crate::state::{ApiError, ApiResult, State, filter, public};
use crate::validate::{self, Form};

const LISTENER_PROTOCOLS: &[&str] = &[
    "TCP",
    "UDP",
    "HTTP",
    "HTTPS",
    "TERMINATED_HTTPS",
    "SCTP",
    "PROMETHEUS",
];
const POOL_PROTOCOLS: &[&str] = &["TCP", "UDP", "HTTP", "HTTPS", "PROXY", "PROXYV2", "SCTP"];
const ALGORITHMS: &[&str] = &[
    "ROUND_ROBIN",
    "LEAST_CONNECTIONS",
    "SOURCE_IP",
    "SOURCE_IP_PORT",
];
const MONITOR_TYPES: &[&str] = &[
    "HTTP",
    "HTTPS",
    "PING",
    "TCP",
    "TLS-HELLO",
    "UDP-CONNECT",
    "SCTP",
];
const PROVIDERS: &[&str] = &["amphora", "octavia", "amphorav2", "ovn", "f5"];

/// The newest API version the mock claims (tags, `allowed_cidrs`, AZs are all supported).
const CURRENT: &str = "v2.27";

/// `GET /load-balancer/`: the versions document; the last (`CURRENT`) entry gates features.
pub(crate) fn versions(state: &State) -> Value {
    let href = format!("{}/load-balancer/v2", state.config.base_url);
    let versions: Vec<Value> = ["v2.0", "v2.1", "v2.5", "v2.12", "v2.14", CURRENT]
        .iter()
        .map(|id| {
            let status = if *id == CURRENT {
                "CURRENT"
            } else {
                "SUPPORTED"
            };
            json!({"id": id, "status": status, "updated": "2023-01-01T00:00:00Z",
                   "links": [{"href": href, "rel": "self"}]})
        })
        .collect();
    json!({"versions": versions})
}

/// `GET /load-balancer/v2`: the current version alone.
pub(crate) fn version(state: &State) -> Value {
    json!({"version": {"id": CURRENT, "status": "CURRENT", "updated": "2023-01-01T00:00:00Z",
        "links": [{"href": format!("{}/load-balancer/v2", state.config.base_url), "rel": "self"}]}})
}

/// Serves one request under `/v2/` (`segments` start after the version).
pub(crate) fn serve(
    state: &mut State,
    method: &str,
    segments: &[&str],
    query: &[(String, String)],
    body: &Value,
) -> ApiResult {
    check_body(method, segments, body)?;
    match (method, segments) {
        ("GET", ["lbaas", "quotas"]) => Ok((
            StatusCode::OK,
            Some(json!({"quotas": [quota_document(state, true)], "quotas_links": []})),
        )),
        ("GET", ["lbaas", "quotas", "defaults"]) => Ok((
            StatusCode::OK,
            Some(json!({"quota": quota_document(state, false)})),
        )),
        ("GET", ["lbaas", "quotas", project]) => {
            if *project != state.config.project_id {
                return Err(ApiError::not_found("Project", project));
            }
            Ok((
                StatusCode::OK,
                Some(json!({"quota": quota_document(state, true)})),
            ))
        }
        ("GET", ["lbaas", collection]) => list(state, collection, query),
        ("GET", ["lbaas", collection, id]) => show(state, collection, id),
        ("POST", ["lbaas", "loadbalancers"]) => create_load_balancer(state, body),
        ("PUT", ["lbaas", "loadbalancers", id]) => update_load_balancer(state, id, body),
        ("DELETE", ["lbaas", "loadbalancers", id]) => delete_load_balancer(state, id, query),
        ("POST", ["lbaas", "listeners"]) => {
            let lb = required_str(&body["listener"], "loadbalancer_id")?;
            state.require_mutable(lb)?;
            let id = create_listener(state, lb, &body["listener"])?;
            state.begin_transition(lb, "PENDING_UPDATE");
            created(state, "listener", &id)
        }
        ("POST", ["lbaas", "pools"]) => {
            let pool = &body["pool"];
            let lb = match (
                pool["loadbalancer_id"].as_str(),
                pool["listener_id"].as_str(),
            ) {
                (Some(lb), _) => lb.to_string(),
                (None, Some(listener)) => lb_of(state, "listener", listener)?,
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "One of listener_id or loadbalancer_id must be specified.",
                    ));
                }
            };
            state.require_mutable(&lb)?;
            let id = create_pool(state, &lb, pool["listener_id"].as_str(), pool)?;
            state.begin_transition(&lb, "PENDING_UPDATE");
            created(state, "pool", &id)
        }
        ("POST", ["lbaas", "healthmonitors"]) => {
            let pool = required_str(&body["healthmonitor"], "pool_id")?;
            let lb = lb_of(state, "pool", pool)?;
            state.require_mutable(&lb)?;
            let id = create_monitor(state, &lb, pool, &body["healthmonitor"])?;
            state.begin_transition(&lb, "PENDING_UPDATE");
            created(state, "healthmonitor", &id)
        }
        (
            "PUT",
            [
                "lbaas",
                collection @ ("listeners" | "pools" | "healthmonitors"),
                id,
            ],
        ) => update_child(state, collection, id, body),
        (
            "DELETE",
            [
                "lbaas",
                collection @ ("listeners" | "pools" | "healthmonitors"),
                id,
            ],
        ) => delete_child(state, collection, id),
        ("GET", ["lbaas", "pools", pool, "members"]) => {
            exists(state, "pools", pool)?;
            let mut query = query.to_vec();
            query.push(("__pool".into(), (*pool).to_string()));
            let members = filter(state.store.members.values(), &query);
            Ok((
                StatusCode::OK,
                Some(json!({"members": members, "members_links": []})),
            ))
        }
        ("GET", ["lbaas", "pools", pool, "members", id]) => {
            exists(state, "pools", pool)?;
            member_of(state, pool, id)
                .map(|m| (StatusCode::OK, Some(json!({"member": public(&m)}))))
        }
        ("POST", ["lbaas", "pools", pool, "members"]) => {
            let lb = lb_of(state, "pool", pool)?;
            state.require_mutable(&lb)?;
            let id = create_member(state, &lb, pool, &body["member"])?;
            state.begin_transition(&lb, "PENDING_UPDATE");
            let member = public(&state.store.members[&id]);
            Ok((StatusCode::CREATED, Some(json!({"member": member}))))
        }
        ("PUT", ["lbaas", "pools", pool, "members"]) => {
            let additive = query
                .iter()
                .any(|(k, v)| k == "additive_only" && v.eq_ignore_ascii_case("true"));
            batch_members(state, pool, body, additive)
        }
        ("PUT", ["lbaas", "pools", pool, "members", id]) => {
            let lb = lb_of(state, "pool", pool)?;
            member_of(state, pool, id)?;
            state.require_mutable(&lb)?;
            let member = state
                .store
                .members
                .get_mut(*id)
                .ok_or_else(|| ApiError::not_found("Member", id))?;
            merge(
                member,
                &body["member"],
                &[
                    "name",
                    "weight",
                    "admin_state_up",
                    "backup",
                    "monitor_address",
                    "monitor_port",
                    "tags",
                ],
            );
            member["provisioning_status"] = json!("PENDING_UPDATE");
            let member = public(member);
            state.begin_transition(&lb, "PENDING_UPDATE");
            Ok((StatusCode::OK, Some(json!({"member": member}))))
        }
        ("DELETE", ["lbaas", "pools", pool, "members", id]) => {
            let lb = lb_of(state, "pool", pool)?;
            member_of(state, pool, id)?;
            state.require_mutable(&lb)?;
            state.store.members.remove(*id);
            unlink(state.store.pools.get_mut(*pool), "members", id);
            state.begin_transition(&lb, "PENDING_UPDATE");
            Ok((StatusCode::NO_CONTENT, None))
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "The resource could not be found.",
        )),
    }
}

/// Checks a POST or PUT body against the Octavia type it must match, before anything is read
/// or changed (Octavia's WSME layer refuses a bad body before the controller runs). The
/// argument names are the controllers' parameter names, as WSME prints them.
fn check_body(method: &str, segments: &[&str], body: &Value) -> Result<(), ApiError> {
    type Check = fn(&str, &Value, Form) -> Result<(), ApiError>;
    let (argument, key, check, form): (&str, &str, Check, Form) = match (method, segments) {
        ("POST", ["lbaas", "loadbalancers"]) => (
            "load_balancer",
            "loadbalancer",
            validate::load_balancer,
            Form::Post,
        ),
        ("PUT", ["lbaas", "loadbalancers", _]) => (
            "load_balancer",
            "loadbalancer",
            validate::load_balancer,
            Form::Put,
        ),
        ("POST", ["lbaas", "listeners"]) => {
            ("listener_", "listener", validate::listener, Form::Post)
        }
        ("PUT", ["lbaas", "listeners", _]) => {
            ("listener_", "listener", validate::listener, Form::Put)
        }
        ("POST", ["lbaas", "pools"]) => ("pool_", "pool", validate::pool, Form::Post),
        ("PUT", ["lbaas", "pools", _]) => ("pool_", "pool", validate::pool, Form::Put),
        ("POST", ["lbaas", "pools", _, "members"]) => {
            ("member_", "member", validate::member, Form::Post)
        }
        ("PUT", ["lbaas", "pools", _, "members"]) => {
            return validate::member_batch("members_", body);
        }
        ("PUT", ["lbaas", "pools", _, "members", _]) => {
            ("member_", "member", validate::member, Form::Put)
        }
        ("POST", ["lbaas", "healthmonitors"]) => (
            "health_monitor_",
            "healthmonitor",
            validate::monitor,
            Form::Post,
        ),
        ("PUT", ["lbaas", "healthmonitors", _]) => (
            "health_monitor_",
            "healthmonitor",
            validate::monitor,
            Form::Put,
        ),
        _ => return Ok(()),
    };
    let inner = validate::root(argument, body, key)?;
    check(&format!("{argument}.{key}"), inner, form)
}

/// Octavia's quota resource names, with the type name its 403 uses.
const QUOTA_RESOURCES: &[(&str, &str)] = &[
    ("load_balancer", "Load Balancer"),
    ("listener", "Listener"),
    ("pool", "Pool"),
    ("member", "Member"),
    ("healthmonitor", "Health Monitor"),
];

/// The project's quota as `GET /v2/lbaas/quotas/{project}` shows it (`-1`: unlimited).
fn quota_document(state: &State, with_project: bool) -> Value {
    let mut quota = serde_json::Map::new();
    for (resource, _) in QUOTA_RESOURCES {
        let limit = state.quota(resource).map_or(-1, |n| n as i64);
        quota.insert((*resource).into(), json!(limit));
    }
    // Octavia still reports the deprecated spelling next to the current one.
    quota.insert("health_monitor".into(), quota["healthmonitor"].clone());
    quota.insert("l7policy".into(), json!(-1));
    quota.insert("l7rule".into(), json!(-1));
    if with_project {
        quota.insert("project_id".into(), json!(state.config.project_id));
    }
    Value::Object(quota)
}

/// Octavia refuses a create that would exceed the project's quota with 403 (not 409, unlike
/// Neutron): "Quota has been met for resources: Listener".
fn check_quota(state: &State, resource: &str, adding: usize) -> Result<(), ApiError> {
    let Some(limit) = state.quota(resource) else {
        return Ok(());
    };
    let in_use = match resource {
        "load_balancer" => state.store.loadbalancers.len(),
        "listener" => state.store.listeners.len(),
        "pool" => state.store.pools.len(),
        "member" => state.store.members.len(),
        _ => state.store.healthmonitors.len(),
    };
    if in_use + adding <= limit {
        return Ok(());
    }
    let label = QUOTA_RESOURCES
        .iter()
        .find(|(name, _)| *name == resource)
        .map_or(resource, |(_, label)| label);
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!("Quota has been met for resources: {label}"),
    ))
}

fn collection_of(name: &str) -> Option<&'static str> {
    Some(match name {
        "loadbalancers" | "loadbalancer" => "loadbalancers",
        "listeners" | "listener" => "listeners",
        "pools" | "pool" => "pools",
        "healthmonitors" | "healthmonitor" => "healthmonitors",
        _ => return None,
    })
}

fn singular(collection: &str) -> &'static str {
    match collection {
        "loadbalancers" => "loadbalancer",
        "listeners" => "listener",
        "pools" => "pool",
        _ => "healthmonitor",
    }
}

fn map<'a>(state: &'a State, collection: &str) -> &'a std::collections::BTreeMap<String, Value> {
    match collection {
        "loadbalancers" => &state.store.loadbalancers,
        "listeners" => &state.store.listeners,
        "pools" => &state.store.pools,
        _ => &state.store.healthmonitors,
    }
}

fn map_mut<'a>(
    state: &'a mut State,
    collection: &str,
) -> &'a mut std::collections::BTreeMap<String, Value> {
    match collection {
        "loadbalancers" => &mut state.store.loadbalancers,
        "listeners" => &mut state.store.listeners,
        "pools" => &mut state.store.pools,
        _ => &mut state.store.healthmonitors,
    }
}

fn label(collection: &str) -> &'static str {
    match collection {
        "loadbalancers" => "Load Balancer",
        "listeners" => "Listener",
        "pools" => "Pool",
        _ => "Health Monitor",
    }
}

fn list(state: &State, collection: &str, query: &[(String, String)]) -> ApiResult {
    let collection = collection_of(collection)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "The resource could not be found."))?;
    let items = filter(map(state, collection).values(), query);
    Ok((
        StatusCode::OK,
        Some(json!({collection: items, format!("{collection}_links"): []})),
    ))
}

fn show(state: &State, collection: &str, id: &str) -> ApiResult {
    let collection = collection_of(collection)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "The resource could not be found."))?;
    let item = map(state, collection)
        .get(id)
        .ok_or_else(|| ApiError::not_found(label(collection), id))?;
    Ok((
        StatusCode::OK,
        Some(json!({singular(collection): public(item)})),
    ))
}

fn created(state: &State, kind: &str, id: &str) -> ApiResult {
    let collection = collection_of(kind).unwrap_or("loadbalancers");
    let item = public(&map(state, collection)[id]);
    Ok((StatusCode::CREATED, Some(json!({kind: item}))))
}

fn exists(state: &State, collection: &str, id: &str) -> Result<(), ApiError> {
    if map(state, collection).contains_key(id) {
        Ok(())
    } else {
        Err(ApiError::not_found(label(collection), id))
    }
}

fn lb_of(state: &State, kind: &str, id: &str) -> Result<String, ApiError> {
    let collection = collection_of(kind).unwrap_or("pools");
    map(state, collection)
        .get(id)
        .and_then(|item| item["__lb"].as_str().map(str::to_string))
        .ok_or_else(|| ApiError::not_found(label(collection), id))
}

fn member_of(state: &State, pool: &str, id: &str) -> Result<Value, ApiError> {
    state
        .store
        .members
        .get(id)
        .filter(|m| m["__pool"] == json!(pool))
        .cloned()
        .ok_or_else(|| ApiError::not_found("Member", id))
}

fn required_str<'a>(body: &'a Value, key: &str) -> Result<&'a str, ApiError> {
    body[key].as_str().filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute {key}. Value: None. Mandatory field missing."
        ))
    })
}

fn one_of(body: &Value, key: &str, allowed: &[&str]) -> Result<String, ApiError> {
    let value = required_str(body, key)?;
    if allowed.contains(&value) {
        Ok(value.to_string())
    } else {
        Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute {key}. Value: '{value}'. Value should be one of: {}",
            allowed.join(", ")
        )))
    }
}

fn int_in(
    body: &Value,
    key: &str,
    min: i64,
    max: i64,
    default: Option<i64>,
) -> Result<i64, ApiError> {
    match (&body[key], default) {
        (Value::Null, Some(default)) => Ok(default),
        (value, _) => value
            .as_i64()
            .filter(|v| (min..=max).contains(v))
            .ok_or_else(|| ApiError::bad_request(format!(
                "Invalid input for field/attribute {key}. Value: '{value}'. Value must be between {min} and {max}."
            ))),
    }
}

fn tags(body: &Value) -> Result<Value, ApiError> {
    match &body["tags"] {
        Value::Null => Ok(json!([])),
        Value::Array(items) if items.iter().all(Value::is_string) => Ok(json!(items)),
        other => Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute tags. Value: '{other}'."
        ))),
    }
}

fn cidrs(body: &Value) -> Result<Value, ApiError> {
    match &body["allowed_cidrs"] {
        Value::Null => Ok(Value::Null),
        Value::Array(items) => {
            for item in items {
                if item
                    .as_str()
                    .and_then(|c| c.parse::<ipnet::IpNet>().ok())
                    .is_none()
                {
                    return Err(ApiError::bad_request(format!(
                        "Invalid input for field/attribute allowed_cidrs. Value: '{item}'."
                    )));
                }
            }
            Ok(json!(items))
        }
        other => Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute allowed_cidrs. Value: '{other}'."
        ))),
    }
}

/// Copies the `allowed` keys present in `patch` onto `target`.
fn merge(target: &mut Value, patch: &Value, allowed: &[&str]) {
    if let Some(patch) = patch.as_object() {
        for (key, value) in patch {
            if allowed.contains(&key.as_str()) {
                target[key.as_str()] = value.clone();
            }
        }
    }
    target["updated_at"] = json!(State::now_text());
}

fn unlink(parent: Option<&mut Value>, field: &str, id: &str) {
    if let Some(list) = parent.and_then(|p| p[field].as_array_mut()) {
        list.retain(|entry| entry["id"] != json!(id));
    }
}

fn link(parent: Option<&mut Value>, field: &str, id: &str) {
    if let Some(list) = parent.and_then(|p| p[field].as_array_mut()) {
        list.push(json!({"id": id}));
    }
}

fn common(state: &State, id: &str, body: &Value, lb: &str) -> Map<String, Value> {
    let now = State::now_text();
    let mut object = Map::new();
    object.insert("id".into(), json!(id));
    object.insert(
        "name".into(),
        json!(body["name"].as_str().unwrap_or_default()),
    );
    object.insert(
        "description".into(),
        json!(body["description"].as_str().unwrap_or_default()),
    );
    object.insert("project_id".into(), json!(state.config.project_id));
    object.insert("tenant_id".into(), json!(state.config.project_id));
    object.insert("provisioning_status".into(), json!("PENDING_CREATE"));
    object.insert("operating_status".into(), json!("OFFLINE"));
    object.insert(
        "admin_state_up".into(),
        json!(body["admin_state_up"].as_bool().unwrap_or(true)),
    );
    object.insert("created_at".into(), json!(now));
    object.insert("updated_at".into(), Value::Null);
    object.insert("__lb".into(), json!(lb));
    object
}

fn create_load_balancer(state: &mut State, body: &Value) -> ApiResult {
    let request = &body["loadbalancer"];
    if !request.is_object() {
        return Err(ApiError::bad_request("Missing argument: loadbalancer"));
    }
    check_quota(state, "load_balancer", 1)?;
    let provider = match request["provider"].as_str() {
        None => "amphora".to_string(),
        Some(_) => one_of(request, "provider", PROVIDERS)?,
    };
    // The VIP: a subnet (address allocated from it), or a network (its first subnet).
    let subnet_id = match (
        request["vip_subnet_id"].as_str(),
        request["vip_network_id"].as_str(),
    ) {
        (Some(subnet), _) => {
            if !state.store.subnets.contains_key(subnet) {
                return Err(ApiError::bad_request(format!(
                    "Validation failure: Subnet {subnet} not found."
                )));
            }
            subnet.to_string()
        }
        (None, Some(network)) => state
            .store
            .networks
            .get(network)
            .and_then(|n| n["subnets"][0].as_str().map(str::to_string))
            .ok_or_else(|| {
                ApiError::bad_request(format!("Validation failure: Network {network} not found."))
            })?,
        (None, None) => {
            return Err(ApiError::bad_request(
                "Validation failure: VIP must contain one of: vip_port_id, vip_network_id, vip_subnet_id.",
            ));
        }
    };
    let network_id = state.store.subnets[&subnet_id]["network_id"].clone();
    let vip = match request["vip_address"].as_str() {
        Some(address) => address.to_string(),
        None => state.allocate_address(&subnet_id)?.to_string(),
    };
    let tags = tags(request)?;
    let id = state.new_id(0x1b);
    let port_id = state.new_id(0x90);
    state.store.ports.insert(port_id.clone(), json!({
        "id": port_id, "name": format!("octavia-lb-{id}"), "network_id": network_id,
        "fixed_ips": [{"subnet_id": subnet_id, "ip_address": vip}], "device_id": format!("lb-{id}"),
        "device_owner": "Octavia", "status": "ACTIVE", "admin_state_up": false,
        "project_id": state.config.project_id, "tenant_id": state.config.project_id,
        "mac_address": "fa:16:3e:00:00:01", "description": "", "tags": [],
        "security_groups": [], "allowed_address_pairs": [], "port_security_enabled": true,
        "revision_number": 0,
    }));
    let mut lb = common(state, &id, request, &id);
    lb.insert("vip_address".into(), json!(vip));
    lb.insert("vip_port_id".into(), json!(port_id));
    lb.insert("vip_subnet_id".into(), json!(subnet_id));
    lb.insert("vip_network_id".into(), network_id);
    lb.insert("vip_qos_policy_id".into(), Value::Null);
    lb.insert("provider".into(), json!(provider));
    lb.insert("flavor_id".into(), request["flavor_id"].clone());
    lb.insert(
        "availability_zone".into(),
        request["availability_zone"].clone(),
    );
    lb.insert("listeners".into(), json!([]));
    lb.insert("pools".into(), json!([]));
    lb.insert("tags".into(), tags);
    lb.insert("additional_vips".into(), json!([]));
    state
        .store
        .loadbalancers
        .insert(id.clone(), Value::Object(lb));
    // A fully populated create: listeners with their default pools, members and monitors.
    let children = request["listeners"].as_array().cloned().unwrap_or_default();
    for listener in &children {
        if let Err(error) = create_listener(state, &id, listener) {
            state.remove_load_balancer(&id);
            return Err(error);
        }
    }
    state.begin_transition(&id, "PENDING_CREATE");
    let document = public(&state.store.loadbalancers[&id]);
    Ok((StatusCode::CREATED, Some(json!({"loadbalancer": document}))))
}

fn update_load_balancer(state: &mut State, id: &str, body: &Value) -> ApiResult {
    state.require_mutable(id)?;
    if body["loadbalancer"].get("tags").is_some() {
        tags(&body["loadbalancer"])?;
    }
    let lb = state
        .store
        .loadbalancers
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found("Load Balancer", id))?;
    merge(
        lb,
        &body["loadbalancer"],
        &[
            "name",
            "description",
            "tags",
            "admin_state_up",
            "vip_qos_policy_id",
        ],
    );
    state.begin_transition(id, "PENDING_UPDATE");
    let document = public(&state.store.loadbalancers[id]);
    Ok((StatusCode::OK, Some(json!({"loadbalancer": document}))))
}

fn delete_load_balancer(state: &mut State, id: &str, query: &[(String, String)]) -> ApiResult {
    let cascade = query
        .iter()
        .any(|(k, v)| k == "cascade" && v.eq_ignore_ascii_case("true"));
    let lb = state
        .store
        .loadbalancers
        .get(id)
        .ok_or_else(|| ApiError::not_found("Load Balancer", id))?;
    if !matches!(lb["provisioning_status"].as_str(), Some("ACTIVE" | "ERROR")) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "Invalid state {} of loadbalancer resource {id}",
                lb["provisioning_status"].as_str().unwrap_or_default()
            ),
        ));
    }
    let has_children = !lb["listeners"].as_array().is_none_or(Vec::is_empty)
        || !lb["pools"].as_array().is_none_or(Vec::is_empty);
    if has_children && !cascade {
        return Err(ApiError::bad_request(format!(
            "Cannot delete Load Balancer {id} - it has children"
        )));
    }
    state.set_tree_status(id, "PENDING_DELETE");
    state.begin_transition(id, "PENDING_DELETE");
    Ok((StatusCode::NO_CONTENT, None))
}

/// Creates a listener (and, fully populated, its default pool) under `lb`.
fn create_listener(state: &mut State, lb: &str, request: &Value) -> Result<String, ApiError> {
    let protocol = one_of(request, "protocol", LISTENER_PROTOCOLS)?;
    let port = int_in(request, "protocol_port", 1, 65535, None)?;
    let limit = int_in(
        request,
        "connection_limit",
        -1,
        i64::from(i32::MAX),
        Some(-1),
    )?;
    let allowed_cidrs = cidrs(request)?;
    let tags = tags(request)?;
    check_quota(state, "listener", 1)?;
    let clash = state.store.listeners.values().any(|l| {
        l["__lb"] == json!(lb)
            && l["protocol_port"] == json!(port)
            && l["protocol"] == json!(protocol)
    });
    if clash {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("Another Listener on this Load Balancer is already using protocol_port {port}"),
        ));
    }
    let id = state.new_id(0x15);
    let mut listener = common(state, &id, request, lb);
    listener.insert("protocol".into(), json!(protocol));
    listener.insert("protocol_port".into(), json!(port));
    listener.insert("connection_limit".into(), json!(limit));
    listener.insert("allowed_cidrs".into(), allowed_cidrs);
    listener.insert("tags".into(), tags);
    listener.insert("default_pool_id".into(), Value::Null);
    listener.insert("loadbalancers".into(), json!([{"id": lb}]));
    listener.insert(
        "insert_headers".into(),
        request.get("insert_headers").cloned().unwrap_or(json!({})),
    );
    for (key, default) in [
        ("timeout_client_data", 50000),
        ("timeout_member_connect", 5000),
        ("timeout_member_data", 50000),
        ("timeout_tcp_inspect", 0),
    ] {
        listener.insert(
            key.into(),
            json!(int_in(request, key, 0, 31_536_000_000, Some(default))?),
        );
    }
    listener.insert(
        "default_tls_container_ref".into(),
        request["default_tls_container_ref"].clone(),
    );
    listener.insert("sni_container_refs".into(), json!([]));
    listener.insert("l7policies".into(), json!([]));
    state
        .store
        .listeners
        .insert(id.clone(), Value::Object(listener));
    link(state.store.loadbalancers.get_mut(lb), "listeners", &id);
    if request["default_pool"].is_object() {
        create_pool(state, lb, Some(&id), &request["default_pool"])?;
    }
    Ok(id)
}

fn create_pool(
    state: &mut State,
    lb: &str,
    listener: Option<&str>,
    request: &Value,
) -> Result<String, ApiError> {
    let protocol = one_of(request, "protocol", POOL_PROTOCOLS)?;
    let algorithm = one_of(request, "lb_algorithm", ALGORITHMS)?;
    let tags = tags(request)?;
    if let Some(listener) = listener {
        let owner = state
            .store
            .listeners
            .get(listener)
            .ok_or_else(|| ApiError::not_found("Listener", listener))?;
        if owner["__lb"] != json!(lb) {
            return Err(ApiError::bad_request(
                "Listener and pool must be on the same load balancer.",
            ));
        }
        if !owner["default_pool_id"].is_null() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("Listener {listener} already has a default pool"),
            ));
        }
        let listener_protocol = owner["protocol"].as_str().unwrap_or_default();
        if !validate::pool_protocol_fits(listener_protocol, &protocol) {
            return Err(ApiError::bad_request(format!(
                "Validation failure: The pool protocol '{protocol}' is invalid while the listener protocol is '{listener_protocol}'."
            )));
        }
    }
    check_quota(state, "pool", 1)?;
    let id = state.new_id(0x90_01);
    let mut pool = common(state, &id, request, lb);
    pool.insert("protocol".into(), json!(protocol));
    pool.insert("lb_algorithm".into(), json!(algorithm));
    pool.insert(
        "session_persistence".into(),
        request["session_persistence"].clone(),
    );
    pool.insert(
        "listeners".into(),
        json!(listener.map(|l| vec![json!({"id": l})]).unwrap_or_default()),
    );
    pool.insert("loadbalancers".into(), json!([{"id": lb}]));
    pool.insert("members".into(), json!([]));
    pool.insert("healthmonitor_id".into(), Value::Null);
    pool.insert("tags".into(), tags);
    pool.insert("tls_enabled".into(), json!(false));
    state.store.pools.insert(id.clone(), Value::Object(pool));
    link(state.store.loadbalancers.get_mut(lb), "pools", &id);
    if let Some(listener) = listener
        && let Some(owner) = state.store.listeners.get_mut(listener)
    {
        owner["default_pool_id"] = json!(id);
    }
    for member in request["members"].as_array().cloned().unwrap_or_default() {
        create_member(state, lb, &id, &member)?;
    }
    if request["healthmonitor"].is_object() {
        create_monitor(state, lb, &id, &request["healthmonitor"])?;
    }
    Ok(id)
}

fn create_member(
    state: &mut State,
    lb: &str,
    pool: &str,
    request: &Value,
) -> Result<String, ApiError> {
    let address = required_str(request, "address")?;
    if address.parse::<std::net::IpAddr>().is_err() {
        return Err(ApiError::bad_request(format!(
            "Invalid input for field/attribute address. Value: '{address}'."
        )));
    }
    let port = int_in(request, "protocol_port", 1, 65535, None)?;
    let duplicate = state.store.members.values().any(|m| {
        m["__pool"] == json!(pool)
            && m["address"] == json!(address)
            && m["protocol_port"] == json!(port)
    });
    if duplicate {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("Duplicate member address {address} and protocol_port {port} in pool {pool}"),
        ));
    }
    check_quota(state, "member", 1)?;
    let id = state.new_id(0x3e);
    let mut member = common(state, &id, request, lb);
    member.remove("description");
    member.insert("address".into(), json!(address));
    member.insert("protocol_port".into(), json!(port));
    member.insert("subnet_id".into(), request["subnet_id"].clone());
    member.insert(
        "weight".into(),
        json!(int_in(request, "weight", 0, 256, Some(1))?),
    );
    member.insert(
        "backup".into(),
        json!(request["backup"].as_bool().unwrap_or(false)),
    );
    member.insert("monitor_address".into(), request["monitor_address"].clone());
    member.insert("monitor_port".into(), request["monitor_port"].clone());
    member.insert("tags".into(), tags(request)?);
    member.insert("__pool".into(), json!(pool));
    state
        .store
        .members
        .insert(id.clone(), Value::Object(member));
    link(state.store.pools.get_mut(pool), "members", &id);
    Ok(id)
}

fn create_monitor(
    state: &mut State,
    lb: &str,
    pool: &str,
    request: &Value,
) -> Result<String, ApiError> {
    let kind = one_of(request, "type", MONITOR_TYPES)?;
    let delay = int_in(request, "delay", 0, i64::from(i32::MAX), None)?;
    let timeout = int_in(request, "timeout", 0, i64::from(i32::MAX), None)?;
    let retries = int_in(request, "max_retries", 1, 10, None)?;
    let retries_down = int_in(request, "max_retries_down", 1, 10, Some(3))?;
    if timeout > delay {
        return Err(ApiError::bad_request(
            "The health monitor timeout must be less than or equal to the delay.",
        ));
    }
    let owner = state
        .store
        .pools
        .get(pool)
        .ok_or_else(|| ApiError::not_found("Pool", pool))?;
    if !owner["healthmonitor_id"].is_null() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("This pool {pool} already has a health monitor"),
        ));
    }
    check_quota(state, "healthmonitor", 1)?;
    let http = matches!(kind.as_str(), "HTTP" | "HTTPS");
    let id = state.new_id(0x4d);
    let mut monitor = common(state, &id, request, lb);
    monitor.remove("description");
    monitor.insert("type".into(), json!(kind));
    monitor.insert("delay".into(), json!(delay));
    monitor.insert("timeout".into(), json!(timeout));
    monitor.insert("max_retries".into(), json!(retries));
    monitor.insert("max_retries_down".into(), json!(retries_down));
    let http_field = |key: &str, default: &str| {
        if http {
            json!(request[key].as_str().unwrap_or(default))
        } else {
            Value::Null
        }
    };
    monitor.insert("http_method".into(), http_field("http_method", "GET"));
    monitor.insert("url_path".into(), http_field("url_path", "/"));
    monitor.insert("expected_codes".into(), http_field("expected_codes", "200"));
    monitor.insert("pools".into(), json!([{"id": pool}]));
    monitor.insert("tags".into(), tags(request)?);
    state
        .store
        .healthmonitors
        .insert(id.clone(), Value::Object(monitor));
    if let Some(owner) = state.store.pools.get_mut(pool) {
        owner["healthmonitor_id"] = json!(id);
    }
    Ok(id)
}

fn update_child(state: &mut State, collection: &str, id: &str, body: &Value) -> ApiResult {
    let kind = singular(collection);
    let lb = lb_of(state, kind, id)?;
    state.require_mutable(&lb)?;
    let request = &body[kind];
    let allowed: &[&str] = match collection {
        "listeners" => {
            if request.get("connection_limit").is_some() {
                int_in(request, "connection_limit", -1, i64::from(i32::MAX), None)?;
            }
            cidrs(request)?;
            &[
                "name",
                "description",
                "connection_limit",
                "allowed_cidrs",
                "tags",
                "admin_state_up",
                "insert_headers",
                "timeout_client_data",
                "timeout_member_connect",
                "timeout_member_data",
                "timeout_tcp_inspect",
                "default_pool_id",
            ]
        }
        "pools" => {
            if request.get("lb_algorithm").is_some() {
                one_of(request, "lb_algorithm", ALGORITHMS)?;
            }
            &[
                "name",
                "description",
                "lb_algorithm",
                "session_persistence",
                "tags",
                "admin_state_up",
            ]
        }
        _ => {
            for key in ["delay", "timeout"] {
                if request.get(key).is_some() {
                    int_in(request, key, 0, i64::from(i32::MAX), None)?;
                }
            }
            if request.get("max_retries").is_some() {
                int_in(request, "max_retries", 1, 10, None)?;
            }
            &[
                "name",
                "delay",
                "timeout",
                "max_retries",
                "max_retries_down",
                "http_method",
                "url_path",
                "expected_codes",
                "tags",
                "admin_state_up",
            ]
        }
    };
    let item = map_mut(state, collection)
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(label(collection), id))?;
    merge(item, request, allowed);
    item["provisioning_status"] = json!("PENDING_UPDATE");
    let document = public(item);
    state.begin_transition(&lb, "PENDING_UPDATE");
    Ok((StatusCode::OK, Some(json!({kind: document}))))
}

fn delete_child(state: &mut State, collection: &str, id: &str) -> ApiResult {
    let kind = singular(collection);
    let lb = lb_of(state, kind, id)?;
    state.require_mutable(&lb)?;
    match collection {
        "listeners" => {
            state.store.listeners.remove(id);
            unlink(state.store.loadbalancers.get_mut(&lb), "listeners", id);
            for pool in state.store.pools.values_mut() {
                unlink(Some(pool), "listeners", id);
            }
        }
        "pools" => {
            let removed = state.store.pools.remove(id);
            state.store.members.retain(|_, m| m["__pool"] != json!(id));
            if let Some(monitor) = removed
                .as_ref()
                .and_then(|p| p["healthmonitor_id"].as_str())
            {
                state.store.healthmonitors.remove(monitor);
            }
            unlink(state.store.loadbalancers.get_mut(&lb), "pools", id);
            for listener in state.store.listeners.values_mut() {
                if listener["default_pool_id"] == json!(id) {
                    listener["default_pool_id"] = Value::Null;
                }
            }
        }
        _ => {
            state.store.healthmonitors.remove(id);
            for pool in state.store.pools.values_mut() {
                if pool["healthmonitor_id"] == json!(id) {
                    pool["healthmonitor_id"] = Value::Null;
                }
            }
        }
    }
    state.begin_transition(&lb, "PENDING_UPDATE");
    Ok((StatusCode::NO_CONTENT, None))
}

/// `PUT /pools/{id}/members`: the wanted member list; members are matched by address and
/// port, then created, updated or deleted to match (`additive_only=true`: none deleted).
/// Answers 202.
fn batch_members(state: &mut State, pool: &str, body: &Value, additive: bool) -> ApiResult {
    let lb = lb_of(state, "pool", pool)?;
    state.require_mutable(&lb)?;
    let wanted = body["members"]
        .as_array()
        .ok_or_else(|| ApiError::bad_request("Missing argument: members"))?
        .clone();
    let key = |m: &Value| {
        (
            m["address"].as_str().unwrap_or_default().to_string(),
            m["protocol_port"].as_i64().unwrap_or_default(),
        )
    };
    let wanted_keys: Vec<_> = wanted.iter().map(key).collect();
    for (i, k) in wanted_keys.iter().enumerate() {
        if wanted_keys[..i].contains(k) {
            return Err(ApiError::bad_request(format!(
                "Duplicate member address {} and protocol_port {} in request",
                k.0, k.1
            )));
        }
    }
    let existing: Vec<(String, (String, i64))> = state
        .store
        .members
        .iter()
        .filter(|(_, m)| m["__pool"] == json!(pool))
        .map(|(id, m)| (id.clone(), key(m)))
        .collect();
    let new_members = wanted_keys
        .iter()
        .filter(|k| !existing.iter().any(|(_, have)| have == *k))
        .count();
    let removed = if additive {
        0
    } else {
        existing
            .iter()
            .filter(|(_, k)| !wanted_keys.contains(k))
            .count()
    };
    check_quota(state, "member", new_members.saturating_sub(removed))?;
    for (id, k) in &existing {
        if !additive && !wanted_keys.contains(k) {
            state.store.members.remove(id);
            unlink(state.store.pools.get_mut(pool), "members", id);
        }
    }
    for member in &wanted {
        match existing.iter().find(|(_, k)| *k == key(member)) {
            Some((id, _)) => {
                if let Some(stored) = state.store.members.get_mut(id) {
                    merge(
                        stored,
                        member,
                        &[
                            "name",
                            "weight",
                            "backup",
                            "monitor_address",
                            "monitor_port",
                            "admin_state_up",
                            "tags",
                        ],
                    );
                    stored["provisioning_status"] = json!("PENDING_UPDATE");
                }
            }
            None => {
                create_member(state, &lb, pool, member)?;
            }
        }
    }
    state.begin_transition(&lb, "PENDING_UPDATE");
    Ok((StatusCode::ACCEPTED, None))
}

//! Neutron v2.0: networks and subnets (read-only fixtures), ports (VIP ports made by Octavia)
//! and floating IPs with port association.

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::{ApiError, ApiResult, State, filter, public};

/// `GET /networking/`: the versions document.
pub(crate) fn versions(state: &State) -> Value {
    json!({"versions": [{"id": "v2.0", "status": "CURRENT",
        "links": [{"href": format!("{}/networking/v2.0/", state.config.base_url), "rel": "self"}]}]})
}

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
        ("GET", [collection]) => {
            let items = filter(collection_map(state, collection)?.values(), query);
            Ok((StatusCode::OK, Some(json!({*collection: items}))))
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
        ("POST", ["floatingips"]) => create_floating_ip(state, &body["floatingip"]),
        ("PUT", ["floatingips", id]) => update_floating_ip(state, id, &body["floatingip"]),
        ("DELETE", ["floatingips", id]) => {
            state
                .store
                .floatingips
                .remove(*id)
                .ok_or_else(|| ApiError::not_found("Floating IP", id))?;
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
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "The resource could not be found.",
            ));
        }
    })
}

fn singular(collection: &str) -> &'static str {
    match collection {
        "networks" => "network",
        "subnets" => "subnet",
        "ports" => "port",
        _ => "floatingip",
    }
}

fn label(collection: &str) -> &'static str {
    match collection {
        "networks" => "Network",
        "subnets" => "Subnet",
        "ports" => "Port",
        _ => "Floating IP",
    }
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

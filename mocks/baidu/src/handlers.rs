//! Request routing and the BLB / EIP operations, validated as BCE validates them.

use std::time::Instant;

use axum::http::Method;
use serde_json::{Map, Value, json};

use crate::state::{ApiError, Blb, Eip, Listener, State, TokenUse};

type Query = [(String, String)];

fn param<'a>(query: &'a Query, key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn has(query: &Query, key: &str) -> bool {
    query.iter().any(|(k, _)| k == key)
}

fn now_text() -> String {
    let at = time::OffsetDateTime::now_utc();
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Dispatches one authenticated request, honouring `clientToken` as BCE does: a mutating
/// request repeated with the token of one that succeeded is answered as the first was, without
/// being done again (so a create retried after a lost answer makes one resource); the token of
/// a different request is refused (`IdempotentParameterMismatch`). A token of a failed request
/// is not remembered: the retry is a new attempt.
pub(crate) fn route_once(
    state: &mut State,
    method: &Method,
    path: &str,
    raw_query: &str,
    query: &Query,
    body: Option<&Value>,
) -> Result<Value, ApiError> {
    let token = param(query, "clientToken")
        .filter(|t| !t.is_empty() && *method != Method::GET && *method != Method::HEAD);
    let Some(token) = token else {
        return route(state, method, path, query, body);
    };
    if let Some(earlier) = state.client_tokens.get(token) {
        let same = earlier.method == method.as_str()
            && earlier.path == path
            && earlier.query == raw_query
            && earlier.body.as_ref() == body;
        return if same {
            Ok(earlier.answer.clone())
        } else {
            Err(ApiError::new(
                400,
                "IdempotentParameterMismatch",
                format!("clientToken {token} was used by a different request"),
            ))
        };
    }
    let answer = route(state, method, path, query, body)?;
    state.client_tokens.insert(
        token.to_string(),
        TokenUse {
            method: method.to_string(),
            path: path.to_string(),
            query: raw_query.to_string(),
            body: body.cloned(),
            answer: answer.clone(),
        },
    );
    Ok(answer)
}

/// Dispatches one authenticated request.
fn route(
    state: &mut State,
    method: &Method,
    path: &str,
    query: &Query,
    body: Option<&Value>,
) -> Result<Value, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let empty = Value::Object(Map::new());
    let body = body.unwrap_or(&empty);
    match (method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "blb"]) => create_blb(state, body),
        ("GET", ["v1", "blb"]) => list_blbs(state, query),
        ("GET", ["v1", "blb", id]) => state
            .blbs
            .get(*id)
            .map(Blb::summary)
            .ok_or_else(|| ApiError::not_found(format!("BLB {id}"))),
        ("PUT", ["v1", "blb", id]) => update_blb(state, id, body),
        ("DELETE", ["v1", "blb", id]) => {
            if !state.blbs.contains_key(*id) {
                return Err(ApiError::not_found(format!("BLB {id}")));
            }
            state.check_available(id)?;
            remove_blb(state, id);
            Ok(json!({}))
        }
        ("POST", ["v1", "blb", id, kind @ ("TCPlistener" | "UDPlistener")]) => {
            create_listener(state, id, protocol_of(kind), body)
        }
        (
            "GET",
            [
                "v1",
                "blb",
                id,
                kind @ ("TCPlistener" | "UDPlistener" | "listener"),
            ],
        ) => list_listeners(state, id, kind, query),
        ("PUT", ["v1", "blb", id, kind @ ("TCPlistener" | "UDPlistener")]) => {
            update_listener(state, id, protocol_of(kind), query, body)
        }
        ("PUT", ["v1", "blb", id, "listener"]) if has(query, "batchdelete") => {
            delete_listeners(state, id, body)
        }
        ("POST", ["v1", "blb", id, "backendserver"]) => add_backends(state, id, body),
        ("GET", ["v1", "blb", id, "backendserver"]) => list_backends(state, id, query),
        ("PUT", ["v1", "blb", id, "backendserver"]) if has(query, "update") => {
            update_backends(state, id, body)
        }
        ("PUT", ["v1", "blb", id, "backendserver"]) => remove_backends(state, id, body),
        ("POST", ["v1", "eip"]) => create_eip(state, body),
        ("GET", ["v1", "eip"]) => list_eips(state, query),
        ("PUT", ["v1", "eip", ip]) if has(query, "bind") => bind_eip(state, ip, body),
        ("PUT", ["v1", "eip", ip]) if has(query, "unbind") => unbind_eip(state, ip),
        ("DELETE", ["v1", "eip", ip]) => release_eip(state, ip),
        ("PUT", ["v1", "blb", id, "securitygroup"]) if has(query, "bind") => {
            state.bind_security_groups(id, body, true)
        }
        ("PUT", ["v1", "blb", id, "securitygroup"]) if has(query, "unbind") => {
            state.bind_security_groups(id, body, false)
        }
        ("GET", ["v1", "blb", id, "securitygroup"]) => state.blb_security_groups(id),
        ("POST", ["v2", "securityGroup"]) => state.create_security_group(body),
        ("GET", ["v2", "securityGroup"]) => {
            let items =
                state.list_security_groups(param(query, "vpcId"), param(query, "securityGroupId"));
            page(items, query, "securityGroups")
        }
        ("DELETE", ["v2", "securityGroup", "rule", rule]) => state.delete_rule(rule),
        ("PUT", ["v2", "securityGroup", id]) if has(query, "authorizeRule") => {
            state.change_rule(id, body, false)
        }
        ("PUT", ["v2", "securityGroup", id]) if has(query, "revokeRule") => {
            state.change_rule(id, body, true)
        }
        ("DELETE", ["v2", "securityGroup", id]) => state.delete_security_group(id),
        _ => Err(ApiError::new(
            400,
            "InvalidURI",
            format!("Could not parse the specified URI: {method} {path}"),
        )),
    }
}

fn protocol_of(kind: &str) -> &'static str {
    if kind.starts_with("UDP") {
        "UDP"
    } else {
        "TCP"
    }
}

fn text<'a>(body: &'a Value, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(ApiError::invalid(format!(
            "{key} must be a string, not {other}"
        ))),
    }
}

fn integer(body: &Value, key: &str, low: i64, high: i64) -> Result<Option<i64>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => match value.as_i64() {
            Some(n) if (low..=high).contains(&n) => Ok(Some(n)),
            _ => Err(ApiError::invalid(format!(
                "{key} must be an integer in [{low}, {high}], not {value}"
            ))),
        },
    }
}

fn required<T>(value: Option<T>, key: &str) -> Result<T, ApiError> {
    value.ok_or_else(|| ApiError::invalid(format!("{key} is required")))
}

/// BLB and EIP names: 1–65 characters, starting with a letter, of letters, digits and `-_/.`.
fn check_name(key: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.chars().count() <= 65
        && name.chars().next().is_some_and(char::is_alphabetic)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || "-_/.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "{key} {name:?} must be 1-65 characters, start with a letter, and contain only letters, digits and -_/."
        )))
    }
}

fn check_tags(body: &Value) -> Result<Value, ApiError> {
    match body.get("tags") {
        None | Some(Value::Null) => Ok(Value::Array(Vec::new())),
        Some(Value::Array(items)) => {
            for tag in items {
                if !tag.get("tagKey").is_some_and(Value::is_string) {
                    return Err(ApiError::invalid(format!("tag {tag} has no string tagKey")));
                }
            }
            Ok(Value::Array(items.clone()))
        }
        Some(other) => Err(ApiError::invalid(format!(
            "tags must be a list, not {other}"
        ))),
    }
}

pub(crate) fn insert_blb(
    state: &mut State,
    name: &str,
    desc: &str,
    vpc_id: &str,
    subnet_id: &str,
    tags: Value,
    available: bool,
) -> String {
    let n = state.fresh_id();
    let id = format!("lb-{n:08x}");
    let prefix = state
        .config
        .subnets
        .get(subnet_id)
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| "192.168.0.".into());
    let host = 10 + state.blbs.len() % 240;
    let delay = state.config.create_delay;
    let busy = !available;
    state.blbs.insert(
        id.clone(),
        Blb {
            id: id.clone(),
            name: name.to_string(),
            desc: desc.to_string(),
            address: format!("{prefix}{host}"),
            vpc_id: vpc_id.to_string(),
            subnet_id: subnet_id.to_string(),
            public_ip: None,
            status: if busy { "creating" } else { "available" },
            busy_until: busy.then(|| Instant::now() + delay),
            create_time: now_text(),
            tags,
            listeners: Default::default(),
            backends: Default::default(),
            security_groups: Vec::new(),
        },
    );
    id
}

fn create_blb(state: &mut State, body: &Value) -> Result<Value, ApiError> {
    let vpc_id = required(text(body, "vpcId")?, "vpcId")?;
    let subnet_id = required(text(body, "subnetId")?, "subnetId")?;
    let name = text(body, "name")?.unwrap_or("");
    let desc = text(body, "desc")?.unwrap_or("");
    if !name.is_empty() {
        check_name("name", name)?;
    }
    if desc.chars().count() > 200 {
        return Err(ApiError::invalid("desc must be at most 200 characters"));
    }
    match state.config.subnets.get(subnet_id) {
        Some((vpc, _)) if vpc == vpc_id => {}
        Some(_) => {
            return Err(ApiError::invalid(format!(
                "subnet {subnet_id} is not in VPC {vpc_id}"
            )));
        }
        None => return Err(ApiError::not_found(format!("subnet {subnet_id}"))),
    }
    let tags = check_tags(body)?;
    if state.blbs.len() >= state.config.quotas.blbs {
        return Err(ApiError::quota(format!(
            "BLB quota of {} instances reached",
            state.config.quotas.blbs
        )));
    }
    let name = if name.is_empty() { "blb" } else { name };
    let id = insert_blb(state, name, desc, vpc_id, subnet_id, tags, false);
    let blb = &state.blbs[&id];
    Ok(json!({"blbId": id, "name": blb.name, "desc": blb.desc, "address": blb.address}))
}

/// `marker`/`maxKeys` paging over items in id order.
fn page(items: Vec<(String, Value)>, query: &Query, list_key: &str) -> Result<Value, ApiError> {
    let max_keys = match param(query, "maxKeys") {
        None => 1000,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => {
                return Err(ApiError::invalid(format!(
                    "maxKeys must be in [1, 1000], not {v}"
                )));
            }
        },
    };
    let marker = param(query, "marker").unwrap_or("");
    let rest: Vec<(String, Value)> = items
        .into_iter()
        .filter(|(key, _)| marker.is_empty() || key.as_str() >= marker)
        .collect();
    let truncated = rest.len() > max_keys;
    let next = rest.get(max_keys).map(|(k, _)| k.clone());
    let list: Vec<Value> = rest.into_iter().take(max_keys).map(|(_, v)| v).collect();
    let mut out = json!({"marker": marker, "isTruncated": truncated, "maxKeys": max_keys});
    out[list_key] = Value::Array(list);
    if let Some(next) = next {
        out["nextMarker"] = json!(next);
    }
    Ok(out)
}

fn list_blbs(state: &State, query: &Query) -> Result<Value, ApiError> {
    let exact = param(query, "exactlyMatch").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let matches = |wanted: Option<&str>, have: &str| match wanted {
        None | Some("") => true,
        Some(w) if exact => w == have,
        Some(w) => have.contains(w),
    };
    let items = state
        .blbs
        .values()
        .filter(|b| matches(param(query, "name"), &b.name))
        .filter(|b| matches(param(query, "blbId"), &b.id))
        .filter(|b| matches(param(query, "address"), &b.address))
        .map(|b| (b.id.clone(), b.summary()))
        .collect();
    page(items, query, "blbList")
}

fn update_blb(state: &mut State, id: &str, body: &Value) -> Result<Value, ApiError> {
    state.check_available(id)?;
    let name = text(body, "name")?;
    let desc = text(body, "desc")?;
    if let Some(name) = name {
        check_name("name", name)?;
    }
    if desc.is_some_and(|d| d.chars().count() > 200) {
        return Err(ApiError::invalid("desc must be at most 200 characters"));
    }
    if let Some(blb) = state.blbs.get_mut(id) {
        if let Some(name) = name {
            blb.name = name.to_string();
        }
        if let Some(desc) = desc {
            blb.desc = desc.to_string();
        }
    }
    state.touch(id);
    Ok(json!({}))
}

pub(crate) fn remove_blb(state: &mut State, id: &str) {
    if state.blbs.remove(id).is_some() {
        for eip in state.eips.values_mut() {
            if eip.instance_id.as_deref() == Some(id) {
                eip.instance_id = None;
                eip.instance_type = None;
                eip.status = "available";
            }
        }
    }
}

const SCHEDULERS: &[&str] = &["RoundRobin", "LeastConnection", "Hash"];

/// Validates listener fields (all optional on update) and returns them.
fn listener_fields(
    protocol: &str,
    body: &Value,
    creating: bool,
) -> Result<Map<String, Value>, ApiError> {
    let mut fields = Map::new();
    let backend_port = integer(body, "backendPort", 1, 65535)?;
    let scheduler = text(body, "scheduler")?;
    if creating {
        required(backend_port, "backendPort")?;
        required(scheduler, "scheduler")?;
    }
    if let Some(s) = scheduler
        && !SCHEDULERS.contains(&s)
    {
        return Err(ApiError::invalid(format!(
            "scheduler {s:?} must be one of RoundRobin, LeastConnection, Hash"
        )));
    }
    let ranged = [
        ("backendPort", 1, 65535),
        ("healthCheckTimeoutInSecond", 1, 60),
        ("healthCheckInterval", 1, 10),
        ("unhealthyThreshold", 2, 5),
        ("healthyThreshold", 2, 5),
        ("tcpSessionTimeout", 10, 4000),
        ("udpSessionTimeout", 5, 4000),
    ];
    for (key, low, high) in ranged {
        if let Some(n) = integer(body, key, low, high)? {
            fields.insert(key.into(), json!(n));
        }
    }
    if let Some(s) = scheduler {
        fields.insert("scheduler".into(), json!(s));
    }
    if protocol == "UDP" {
        let check = text(body, "healthCheckString")?;
        if creating {
            required(check, "healthCheckString")?;
        }
        if let Some(check) = check {
            fields.insert("healthCheckString".into(), json!(check));
        }
    }
    if let Some(kind) = text(body, "healthCheckType")? {
        fields.insert("healthCheckType".into(), json!(kind));
    }
    Ok(fields)
}

fn listener_defaults(protocol: &str, fields: &mut Map<String, Value>) {
    let defaults = [
        ("healthCheckTimeoutInSecond", 3),
        ("healthCheckInterval", 3),
        ("unhealthyThreshold", 3),
        ("healthyThreshold", 3),
    ];
    for (key, value) in defaults {
        fields.entry(key).or_insert(json!(value));
    }
    fields.entry("healthCheckType").or_insert(json!(protocol));
}

fn create_listener(
    state: &mut State,
    id: &str,
    protocol: &'static str,
    body: &Value,
) -> Result<Value, ApiError> {
    let port = required(integer(body, "listenerPort", 1, 65535)?, "listenerPort")?;
    let mut fields = listener_fields(protocol, body, true)?;
    listener_defaults(protocol, &mut fields);
    state.check_available(id)?;
    let limit = state.config.quotas.listeners_per_blb;
    let port = u16::try_from(port).unwrap_or(0);
    let blb = state
        .blbs
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    if blb.listeners.contains_key(&port) {
        return Err(ApiError::new(
            409,
            "ListenerPortConflict",
            format!("BLB {id} already has a listener on port {port}"),
        ));
    }
    if blb.listeners.len() >= limit {
        return Err(ApiError::quota(format!(
            "BLB {id} has the maximum of {limit} listeners"
        )));
    }
    blb.listeners.insert(port, Listener { protocol, fields });
    state.touch(id);
    Ok(json!({}))
}

fn list_listeners(state: &State, id: &str, kind: &str, query: &Query) -> Result<Value, ApiError> {
    let blb = state
        .blbs
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    let wanted_port = param(query, "listenerPort").and_then(|p| p.parse::<u16>().ok());
    let items = blb
        .listeners
        .iter()
        .filter(|(_, l)| kind == "listener" || l.protocol == protocol_of(kind))
        .filter(|(port, _)| wanted_port.is_none_or(|w| w == **port))
        .map(|(port, l)| {
            let mut v = Value::Object(l.fields.clone());
            v["listenerPort"] = json!(port);
            if kind == "listener" {
                v["listenerType"] = json!(l.protocol);
            }
            (format!("{port:05}"), v)
        })
        .collect();
    page(items, query, "listenerList")
}

fn update_listener(
    state: &mut State,
    id: &str,
    protocol: &'static str,
    query: &Query,
    body: &Value,
) -> Result<Value, ApiError> {
    let port = param(query, "listenerPort")
        .and_then(|p| p.parse::<u16>().ok())
        .ok_or_else(|| ApiError::invalid("listenerPort query parameter is required"))?;
    let fields = listener_fields(protocol, body, false)?;
    state.check_available(id)?;
    let blb = state
        .blbs
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    let listener = blb
        .listeners
        .get_mut(&port)
        .filter(|l| l.protocol == protocol)
        .ok_or_else(|| ApiError::not_found(format!("{protocol} listener {port} of BLB {id}")))?;
    listener.fields.extend(fields);
    state.touch(id);
    Ok(json!({}))
}

fn delete_listeners(state: &mut State, id: &str, body: &Value) -> Result<Value, ApiError> {
    let ports: Vec<u16> = match body.get("portList") {
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|p| p.as_u64().and_then(|p| u16::try_from(p).ok()))
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::invalid("portList must hold ports"))?,
        _ => {
            return Err(ApiError::invalid(
                "portList must be a non-empty list of ports",
            ));
        }
    };
    state.check_available(id)?;
    let blb = state
        .blbs
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    if let Some(missing) = ports.iter().find(|p| !blb.listeners.contains_key(p)) {
        return Err(ApiError::not_found(format!(
            "listener {missing} of BLB {id}"
        )));
    }
    for port in ports {
        blb.listeners.remove(&port);
    }
    state.touch(id);
    Ok(json!({}))
}

fn backend_list(body: &Value, with_weight: bool) -> Result<Vec<(String, i64)>, ApiError> {
    let Some(Value::Array(items)) = body.get("backendServerList") else {
        return Err(ApiError::invalid("backendServerList must be a list"));
    };
    if items.is_empty() {
        return Err(ApiError::invalid("backendServerList must not be empty"));
    }
    items
        .iter()
        .map(|item| {
            let (id, weight) = if with_weight {
                let id = text(item, "instanceId")?;
                let weight = integer(item, "weight", 0, 100)?.unwrap_or(100);
                (id, weight)
            } else {
                (item.as_str(), 0)
            };
            match id {
                Some(id) if id.starts_with("i-") && id.len() > 2 => Ok((id.to_string(), weight)),
                _ => Err(ApiError::invalid(format!(
                    "backend server {item} must name an instance id (i-…)"
                ))),
            }
        })
        .collect()
}

fn add_backends(state: &mut State, id: &str, body: &Value) -> Result<Value, ApiError> {
    let servers = backend_list(body, true)?;
    state.check_available(id)?;
    let limit = state.config.quotas.backends_per_blb;
    let blb = state
        .blbs
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    let new = servers
        .iter()
        .filter(|(s, _)| !blb.backends.contains_key(s))
        .count();
    if blb.backends.len() + new > limit {
        return Err(ApiError::quota(format!(
            "BLB {id} may have at most {limit} backend servers"
        )));
    }
    if let Some((dup, _)) = servers.iter().find(|(s, _)| blb.backends.contains_key(s)) {
        return Err(ApiError::new(
            409,
            "BackendServerExists",
            format!("{dup} is already a backend server of BLB {id}"),
        ));
    }
    blb.backends.extend(servers);
    state.touch(id);
    Ok(json!({}))
}

fn list_backends(state: &State, id: &str, query: &Query) -> Result<Value, ApiError> {
    let blb = state
        .blbs
        .get(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    let health = has(query, "listenerPort");
    let items = blb
        .backends
        .iter()
        .map(|(server, weight)| {
            let mut v = json!({"instanceId": server, "weight": weight});
            if health {
                v["status"] = json!("Alive");
            }
            (server.clone(), v)
        })
        .collect();
    page(items, query, "backendServerList")
}

/// BLB `id`, available for a change that names `servers` (backend, weight): each must be a
/// backend of it already, else `NoSuchObject` names the first that is not.
fn blb_with_backends<'a>(
    state: &'a mut State,
    id: &str,
    servers: &[(String, i64)],
) -> Result<&'a mut Blb, ApiError> {
    state.check_available(id)?;
    let blb = state
        .blbs
        .get_mut(id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
    if let Some((missing, _)) = servers.iter().find(|(s, _)| !blb.backends.contains_key(s)) {
        return Err(ApiError::not_found(format!(
            "backend server {missing} of BLB {id}"
        )));
    }
    Ok(blb)
}

fn update_backends(state: &mut State, id: &str, body: &Value) -> Result<Value, ApiError> {
    let servers = backend_list(body, true)?;
    blb_with_backends(state, id, &servers)?
        .backends
        .extend(servers);
    state.touch(id);
    Ok(json!({}))
}

fn remove_backends(state: &mut State, id: &str, body: &Value) -> Result<Value, ApiError> {
    let servers = backend_list(body, false)?;
    let blb = blb_with_backends(state, id, &servers)?;
    for (server, _) in servers {
        blb.backends.remove(&server);
    }
    state.touch(id);
    Ok(json!({}))
}

pub(crate) fn insert_eip(
    state: &mut State,
    name: &str,
    bandwidth: i64,
    payment_timing: &str,
    billing_method: &str,
    tags: Value,
    available: bool,
) -> String {
    let n = state.fresh_id();
    let ip = format!("106.12.{}.{}", (n / 250) % 250, 1 + n % 250);
    let delay = state.config.eip_delay;
    let creating = !available && !delay.is_zero();
    state.eips.insert(
        ip.clone(),
        Eip {
            ip: ip.clone(),
            id: format!("ip-{n:08x}"),
            name: name.to_string(),
            status: if creating { "creating" } else { "available" },
            ready_at: creating.then(|| Instant::now() + delay),
            instance_type: None,
            instance_id: None,
            bandwidth,
            payment_timing: payment_timing.to_string(),
            billing_method: billing_method.to_string(),
            create_time: now_text(),
            tags,
        },
    );
    ip
}

fn create_eip(state: &mut State, body: &Value) -> Result<Value, ApiError> {
    let name = text(body, "name")?.unwrap_or("");
    if !name.is_empty() {
        check_name("name", name)?;
    }
    let billing = body
        .get("billing")
        .ok_or_else(|| ApiError::invalid("billing is required"))?;
    let payment = required(text(billing, "paymentTiming")?, "billing.paymentTiming")?;
    let (method, high) = match payment {
        "Postpaid" => {
            let method = required(text(billing, "billingMethod")?, "billing.billingMethod")?;
            match method {
                "ByTraffic" => (method, 1000),
                "ByBandwidth" => (method, 200),
                other => {
                    return Err(ApiError::invalid(format!(
                        "billing.billingMethod {other:?} must be ByTraffic or ByBandwidth"
                    )));
                }
            }
        }
        "Prepaid" => {
            let length = billing
                .get("reservation")
                .and_then(|r| r.get("reservationLength"))
                .and_then(Value::as_i64);
            if !length.is_some_and(|l| [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 24, 36].contains(&l)) {
                return Err(ApiError::invalid(
                    "billing.reservation.reservationLength must be one of 1-9, 12, 24, 36 (months)",
                ));
            }
            ("ByBandwidth", 200)
        }
        other => {
            return Err(ApiError::invalid(format!(
                "billing.paymentTiming {other:?} must be Prepaid or Postpaid"
            )));
        }
    };
    let bandwidth = required(
        integer(body, "bandwidthInMbps", 1, high)?,
        "bandwidthInMbps",
    )?;
    let tags = check_tags(body)?;
    if state.eips.len() >= state.config.quotas.eips {
        return Err(ApiError::quota(format!(
            "EIP quota of {} addresses reached",
            state.config.quotas.eips
        )));
    }
    let name = if name.is_empty() { "eip" } else { name };
    let ip = insert_eip(state, name, bandwidth, payment, method, tags, false);
    Ok(json!({"eip": ip}))
}

fn list_eips(state: &State, query: &Query) -> Result<Value, ApiError> {
    let wanted = |key: &str, have: Option<&str>| match param(query, key) {
        None | Some("") => true,
        Some(w) => have == Some(w),
    };
    let items = state
        .eips
        .values()
        .filter(|e| wanted("eip", Some(&e.ip)))
        .filter(|e| wanted("name", Some(&e.name)))
        .filter(|e| wanted("instanceType", e.instance_type.as_deref()))
        .filter(|e| wanted("instanceId", e.instance_id.as_deref()))
        .filter(|e| wanted("status", Some(e.status)))
        .map(|e| (e.id.clone(), e.summary()))
        .collect();
    page(items, query, "eipList")
}

fn bind_eip(state: &mut State, ip: &str, body: &Value) -> Result<Value, ApiError> {
    let instance_type = required(text(body, "instanceType")?, "instanceType")?;
    let instance_id = required(text(body, "instanceId")?, "instanceId")?;
    if instance_type != "BLB" {
        return Err(ApiError::invalid(format!(
            "instanceType {instance_type:?}: this mock binds EIPs to BLB only"
        )));
    }
    let eip = state
        .eips
        .get(ip)
        .ok_or_else(|| ApiError::not_found(format!("EIP {ip}")))?;
    if eip.status != "available" {
        return Err(ApiError::busy(format!(
            "EIP {ip} is {}; it must be available to bind",
            eip.status
        )));
    }
    let blb = state
        .blbs
        .get(instance_id)
        .ok_or_else(|| ApiError::not_found(format!("BLB {instance_id}")))?;
    if blb.status != "available" {
        return Err(ApiError::busy(format!(
            "BLB {instance_id} is {}",
            blb.status
        )));
    }
    if let Some(bound) = &blb.public_ip {
        return Err(ApiError::busy(format!(
            "BLB {instance_id} already has EIP {bound}"
        )));
    }
    if let Some(blb) = state.blbs.get_mut(instance_id) {
        blb.public_ip = Some(ip.to_string());
    }
    if let Some(eip) = state.eips.get_mut(ip) {
        eip.instance_type = Some(instance_type.to_string());
        eip.instance_id = Some(instance_id.to_string());
        eip.status = "binded";
    }
    Ok(json!({}))
}

fn unbind_eip(state: &mut State, ip: &str) -> Result<Value, ApiError> {
    let eip = state
        .eips
        .get_mut(ip)
        .ok_or_else(|| ApiError::not_found(format!("EIP {ip}")))?;
    let Some(instance) = eip.instance_id.take() else {
        return Err(ApiError::busy(format!("EIP {ip} is not bound")));
    };
    eip.instance_type = None;
    eip.status = "available";
    if let Some(blb) = state.blbs.get_mut(&instance) {
        blb.public_ip = None;
    }
    Ok(json!({}))
}

fn release_eip(state: &mut State, ip: &str) -> Result<Value, ApiError> {
    let eip = state
        .eips
        .get(ip)
        .ok_or_else(|| ApiError::not_found(format!("EIP {ip}")))?;
    if eip.instance_id.is_some() {
        return Err(ApiError::busy(format!(
            "EIP {ip} is bound; unbind it before releasing"
        )));
    }
    if eip.payment_timing == "Prepaid" {
        return Err(ApiError::busy(format!(
            "EIP {ip} is prepaid and not expired; it cannot be released"
        )));
    }
    state.eips.remove(ip);
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::state::{Config, Quotas};

    fn state() -> State {
        State::new(Config {
            keys: BTreeMap::new(),
            clock_skew: Duration::ZERO,
            create_delay: Duration::ZERO,
            update_delay: Duration::ZERO,
            eip_delay: Duration::ZERO,
            quotas: Quotas::default(),
            subnets: BTreeMap::from([("sbn-1".into(), ("vpc-1".into(), "192.168.0.".into()))]),
        })
    }

    fn create(state: &mut State, token: &str, name: &str, subnet: &str) -> Result<Value, String> {
        let query = format!("clientToken={token}");
        let pairs = crate::auth::query_pairs(&query);
        let body = json!({"name": name, "vpcId": "vpc-1", "subnetId": subnet});
        route_once(state, &Method::POST, "/v1/blb", &query, &pairs, Some(&body)).map_err(|e| e.code)
    }

    /// What the second request of a case is answered.
    #[derive(Debug)]
    enum Second {
        /// The first request's answer, replayed.
        Replayed,
        /// A fresh answer (a new BLB).
        Fresh,
        /// This error code.
        Refused(&'static str),
    }

    #[test]
    fn a_request_repeated_with_its_client_token_is_answered_not_done_again() {
        // (case, two requests as (token, name, subnet), what the second gets, BLBs left)
        type Request = (&'static str, &'static str, &'static str);
        let cases: [(&str, [Request; 2], Second, usize); 4] = [
            (
                "the same create twice (its answer was lost): one BLB",
                [("t1", "web", "sbn-1"), ("t1", "web", "sbn-1")],
                Second::Replayed,
                1,
            ),
            (
                "two tokens: two creates",
                [("t1", "web", "sbn-1"), ("t2", "web", "sbn-1")],
                Second::Fresh,
                2,
            ),
            (
                "the token of another request is refused",
                [("t1", "web", "sbn-1"), ("t1", "api", "sbn-1")],
                Second::Refused("IdempotentParameterMismatch"),
                1,
            ),
            (
                "a refused request's token is not remembered: its retry is done",
                [("t1", "web", "sbn-9"), ("t1", "web", "sbn-1")],
                Second::Fresh,
                1,
            ),
        ];
        for (name, requests, second, blbs) in cases {
            let mut state = state();
            let [first, again] =
                requests.map(|(token, blb, subnet)| create(&mut state, token, blb, subnet));
            let as_wanted = match &second {
                Second::Replayed => first.is_ok() && again == first,
                Second::Fresh => again.is_ok() && again != first,
                Second::Refused(code) => again == Err(code.to_string()),
            };
            assert!(
                as_wanted,
                "{name}: {first:?} then {again:?}, want {second:?}"
            );
            assert_eq!(state.blbs.len(), blbs, "{name}");
        }
    }
}

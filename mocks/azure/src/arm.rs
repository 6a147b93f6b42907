//! Serving one request against the state: auth, api-version, faults, then the resource
//! handlers with etags, async operations and referential integrity.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::error::ArmError;
use crate::integrity;
use crate::route::{Parsed, Route, parse};
use crate::state::{FaultAction, Kind, OpKind, OpStatus, Operation, State, Stored};
use crate::validate::{self, str_at};

/// A reply before it becomes an HTTP response.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// JSON body.
    pub body: Option<Value>,
    /// Drop the connection instead of answering (a lost response).
    pub drop_connection: bool,
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Some(body),
            drop_connection: false,
        }
    }

    fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: None,
            drop_connection: false,
        }
    }
}

impl From<ArmError> for Reply {
    fn from(error: ArmError) -> Reply {
        Reply::json(error.status, error.body())
    }
}

/// The parts of a request the mock looks at.
#[derive(Debug)]
pub struct Request<'a> {
    /// Method.
    pub method: &'a str,
    /// Path.
    pub path: &'a str,
    /// Decoded query parameters.
    pub query: BTreeMap<String, String>,
    /// `Authorization`.
    pub authorization: Option<&'a str>,
    /// `If-Match`.
    pub if_match: Option<&'a str>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a str>,
    /// Raw body.
    pub body: &'a [u8],
}

/// Serves one request.
pub fn serve(state: &mut State, req: &Request<'_>) -> Reply {
    finish_overdue_operations(state);
    match state.take_fault(req.method, req.path) {
        Some(FaultAction::Respond { error, retry_after }) => {
            let mut reply = Reply::from(error);
            if let Some(secs) = retry_after {
                reply.headers.push(("retry-after", secs.to_string()));
            }
            return reply;
        }
        Some(FaultAction::LoseResponse(error)) => {
            let served = match serve_inner(state, req) {
                Ok(reply) => reply,
                Err(error) => error.into(),
            };
            finish_operation_of(state, &served);
            return match error {
                Some(error) => Reply::from(error),
                None => Reply {
                    drop_connection: true,
                    ..Reply::empty(StatusCode::OK)
                },
            };
        }
        // Operation faults are taken when the operation starts.
        Some(FaultAction::FailOperation(_)) | None => {}
    }
    match serve_inner(state, req) {
        Ok(reply) => reply,
        Err(error) => error.into(),
    }
}

/// Ends every operation that has run longer than the configured deadline, polled or not.
fn finish_overdue_operations(state: &mut State) {
    let deadline = state.config.operation_deadline;
    let overdue: Vec<String> = state
        .operations
        .iter()
        .filter(|(_, op)| op.status == OpStatus::InProgress && op.started.elapsed() >= deadline)
        .map(|(id, _)| id.clone())
        .collect();
    for id in overdue {
        if let Some(mut op) = state.operations.remove(&id) {
            complete(state, &mut op);
            state.operations.insert(id, op);
        }
    }
}

/// Runs the operation `reply` started (if any) to its end: nobody will poll it when the
/// answer is lost, and in ARM it finishes on its own.
fn finish_operation_of(state: &mut State, reply: &Reply) {
    let Some(url) = reply
        .headers
        .iter()
        .find(|(name, _)| *name == "azure-asyncoperation")
        .map(|(_, url)| url.clone())
    else {
        return;
    };
    let Some(id) = url
        .split('?')
        .next()
        .and_then(|path| path.rsplit('/').next())
    else {
        return;
    };
    // Bounded: each advance consumes one pending poll.
    for _ in 0..=state.config.lro_polls {
        match advance(state, id) {
            Ok(OpStatus::InProgress) => {}
            _ => break,
        }
    }
}

fn serve_inner(state: &mut State, req: &Request<'_>) -> Result<Reply, ArmError> {
    let Some(Parsed {
        subscription,
        route,
    }) = parse(req.path)
    else {
        return Err(ArmError::new(
            StatusCode::NOT_FOUND,
            "InvalidResourceType",
            format!(
                "The resource type could not be found for path {}.",
                req.path
            ),
        ));
    };
    if route == Route::Token {
        return token(state, req);
    }
    authorize(state, req)?;
    let Some(version) = req.query.get("api-version") else {
        return Err(ArmError::bad_request(
            "MissingApiVersionParameter",
            "The api-version query parameter (?api-version=) is required for all requests.",
        ));
    };
    if !is_api_version(version) {
        return Err(ArmError::bad_request(
            "InvalidApiVersionParameter",
            format!("The api-version '{version}' is invalid."),
        ));
    }
    if subscription.as_deref() != Some(state.config.subscription.as_str()) {
        return Err(ArmError::new(
            StatusCode::NOT_FOUND,
            "SubscriptionNotFound",
            format!(
                "The subscription '{}' could not be found.",
                subscription.unwrap_or_default()
            ),
        ));
    }
    match route {
        Route::Token => token(state, req),
        Route::Operation(id) => operation_status(state, &id),
        Route::OperationResult(id) => operation_result(state, &id, version),
        Route::Collection { rg, collection } => {
            let rg = resource_group(state, &rg)?;
            let kind = kind(&collection)?;
            only(req, &["GET"])?;
            let value: Vec<Value> = state
                .of_kind(kind)
                .filter(|r| r.resource_group.eq_ignore_ascii_case(&rg))
                .map(|r| r.body.clone())
                .collect();
            Ok(Reply::json(StatusCode::OK, json!({ "value": value })))
        }
        Route::Resource {
            rg,
            collection,
            name,
        } => {
            let rg = resource_group(state, &rg)?;
            let kind = kind(&collection)?;
            resource(state, req, &rg, kind, &name, version)
        }
        Route::Child {
            rg,
            collection,
            name,
            child_collection,
            child,
        } => {
            let rg = resource_group(state, &rg)?;
            let kind = kind(&collection)?;
            child_resource(
                state,
                req,
                &rg,
                kind,
                &name,
                &child_collection,
                &child,
                version,
            )
        }
    }
}

fn is_api_version(v: &str) -> bool {
    let date = v.strip_suffix("-preview").unwrap_or(v);
    let parts: Vec<&str> = date.split('-').collect();
    parts.len() == 3
        && parts[0].len() == 4
        && parts[1].len() == 2
        && parts[2].len() == 2
        && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()))
}

fn only(req: &Request<'_>, methods: &[&str]) -> Result<(), ArmError> {
    if methods.contains(&req.method) {
        Ok(())
    } else {
        Err(ArmError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("The {} method is not allowed here.", req.method),
        ))
    }
}

fn kind(collection: &str) -> Result<Kind, ArmError> {
    Kind::from_collection(collection).ok_or_else(|| {
        ArmError::new(
            StatusCode::NOT_FOUND,
            "InvalidResourceType",
            format!("The resource type '{collection}' could not be found in the namespace 'Microsoft.Network'."),
        )
    })
}

fn resource_group(state: &State, rg: &str) -> Result<String, ArmError> {
    state
        .resource_groups
        .keys()
        .find(|k| k.eq_ignore_ascii_case(rg))
        .cloned()
        .ok_or_else(|| {
            ArmError::new(
                StatusCode::NOT_FOUND,
                "ResourceGroupNotFound",
                format!("Resource group '{rg}' could not be found."),
            )
        })
}

fn authorize(state: &State, req: &Request<'_>) -> Result<(), ArmError> {
    let token = req
        .authorization
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim);
    match token {
        None => Err(ArmError::new(
            StatusCode::UNAUTHORIZED,
            "AuthenticationFailed",
            "Authentication failed. The 'Authorization' header is missing.",
        )),
        Some(t) if state.tokens.contains(t) => Ok(()),
        Some(_) => Err(ArmError::new(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthenticationToken",
            "The access token is invalid.",
        )),
    }
}

/// The client-credentials token endpoint (`/{tenant}/oauth2/v2.0/token`).
fn token(state: &mut State, req: &Request<'_>) -> Result<Reply, ArmError> {
    only(req, &["POST"])?;
    let form: BTreeMap<String, String> = String::from_utf8_lossy(req.body)
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode_form(k), decode_form(v)))
        .collect();
    let oauth_error = |code: &str, description: &str| {
        Reply::json(
            StatusCode::BAD_REQUEST,
            json!({"error": code, "error_description": description}),
        )
    };
    if form.get("grant_type").map(String::as_str) != Some("client_credentials") {
        return Ok(oauth_error(
            "unsupported_grant_type",
            "only client_credentials is supported",
        ));
    }
    if !form.get("scope").is_some_and(|s| s.ends_with("/.default")) {
        return Ok(oauth_error(
            "invalid_scope",
            "scope must be <resource>/.default",
        ));
    }
    let client = form.get("client_id").cloned().unwrap_or_default();
    let secret = form.get("client_secret").cloned().unwrap_or_default();
    if state.config.clients.get(&client) != Some(&secret) {
        return Ok(Reply::json(
            StatusCode::UNAUTHORIZED,
            json!({"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."}),
        ));
    }
    let n = state.next();
    let access_token = format!("mock-token-{n}");
    state.tokens.insert(access_token.clone());
    Ok(Reply::json(
        StatusCode::OK,
        json!({"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": access_token}),
    ))
}

fn decode_form(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_body(req: &Request<'_>) -> Result<Value, ArmError> {
    serde_json::from_slice(req.body).map_err(|e| {
        ArmError::bad_request(
            "InvalidRequestFormat",
            format!("Cannot parse the request: {e}."),
        )
    })
}

fn etag_of(body: &Value) -> Option<&str> {
    str_at(body, &["etag"])
}

/// Checks `If-Match` / `If-None-Match` against the current etag (`None`: no resource).
fn preconditions(req: &Request<'_>, current: Option<&str>, name: &str) -> Result<(), ArmError> {
    if let Some(want) = req.if_match {
        let ok = match current {
            Some(cur) => want == "*" || want == cur,
            None => false,
        };
        if !ok {
            return Err(ArmError::etag_mismatch(name));
        }
    }
    if req.if_none_match == Some("*") && current.is_some() {
        return Err(ArmError::etag_mismatch(name));
    }
    Ok(())
}

fn resource(
    state: &mut State,
    req: &Request<'_>,
    rg: &str,
    kind: Kind,
    name: &str,
    version: &str,
) -> Result<Reply, ArmError> {
    let id = state.resource_id(rg, kind, name);
    let key = id.to_ascii_lowercase();
    match req.method {
        "GET" => state
            .resources
            .get(&key)
            .map(|r| Reply::json(StatusCode::OK, r.body.clone()))
            .ok_or_else(|| ArmError::not_found(kind.collection(), name)),
        "PUT" => {
            if kind.is_fixture() {
                return Err(ArmError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    format!("{} are fixtures in this mock", kind.collection()),
                ));
            }
            validate::name(kind.collection(), name)?;
            let existing = state.resources.get(&key).cloned();
            preconditions(req, existing.as_ref().and_then(|r| etag_of(&r.body)), name)?;
            if let Some(r) = &existing {
                busy(r)?;
            }
            let mut body = parse_body(req)?;
            validate::envelope(&body, &state.config.locations)?;
            match kind {
                Kind::LoadBalancer => {
                    validate::load_balancer(&body)?;
                    integrity::load_balancer(state, &id, &mut body, existing.as_ref())?;
                }
                Kind::PublicIp => {
                    validate::public_ip(&body)?;
                    integrity::public_ip(state, &id, &mut body, existing.as_ref())?;
                }
                Kind::SecurityGroup => {
                    validate::security_group(&body)?;
                    integrity::security_group(state, &id, &mut body, existing.as_ref());
                }
                Kind::VirtualNetwork | Kind::NetworkInterface => {}
            }
            let etag = state.new_etag();
            let guid = existing
                .as_ref()
                .and_then(|r| str_at(&r.body, &["properties", "resourceGuid"]).map(str::to_string))
                .unwrap_or_else(|| state.new_guid());
            decorate(&mut body, &id, name, kind, &etag, &guid);
            let created = existing.is_none();
            state.resources.insert(
                key.clone(),
                Stored {
                    kind,
                    resource_group: rg.to_string(),
                    body,
                },
            );
            integrity::sync_public_ip_references(state);
            let status = if created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(start_operation(
                state,
                &key,
                OpKind::Put,
                status,
                req,
                version,
            ))
        }
        "DELETE" => {
            if kind.is_fixture() {
                return Err(ArmError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "MethodNotAllowed",
                    format!("{} are fixtures in this mock", kind.collection()),
                ));
            }
            let Some(existing) = state.resources.get(&key).cloned() else {
                return Ok(Reply::empty(StatusCode::NO_CONTENT));
            };
            preconditions(req, etag_of(&existing.body), name)?;
            if str_at(&existing.body, &["properties", "provisioningState"]) == Some("Deleting") {
                return Ok(Reply::empty(StatusCode::ACCEPTED));
            }
            busy(&existing)?;
            if kind == Kind::PublicIp
                && let Some(user) = str_at(&existing.body, &["properties", "ipConfiguration", "id"])
            {
                return Err(ArmError::bad_request(
                    "PublicIPAddressCannotBeDeleted",
                    format!(
                        "Public IP address {id} can not be deleted since it is still allocated to resource {user}."
                    ),
                ));
            }
            set_state(state, &key, "Deleting");
            Ok(start_operation(
                state,
                &key,
                OpKind::Delete,
                StatusCode::ACCEPTED,
                req,
                version,
            ))
        }
        _ => only(req, &["GET", "PUT", "DELETE"]).map(|()| Reply::empty(StatusCode::OK)),
    }
}

/// A resource whose previous operation still runs refuses another write (NRP's
/// `AnotherOperationInProgress`).
fn busy(r: &Stored) -> Result<(), ArmError> {
    match str_at(&r.body, &["properties", "provisioningState"]) {
        Some("Updating" | "Deleting") => Err(ArmError::new(
            StatusCode::CONFLICT,
            "AnotherOperationInProgress",
            "Another operation on this or dependent resource is in progress.",
        )),
        _ => Ok(()),
    }
}

fn set_state(state: &mut State, key: &str, provisioning: &str) {
    if let Some(r) = state.resources.get_mut(key)
        && let Some(props) = r.body.get_mut("properties").and_then(Value::as_object_mut)
    {
        props.insert("provisioningState".into(), json!(provisioning));
    }
}

/// Fills in server-owned envelope fields.
fn decorate(body: &mut Value, id: &str, name: &str, kind: Kind, etag: &str, guid: &str) {
    if let Some(obj) = body.as_object_mut() {
        obj.insert("id".into(), json!(id));
        obj.insert("name".into(), json!(name));
        obj.insert("type".into(), json!(kind.type_name()));
        obj.insert("etag".into(), json!(etag));
        let props = obj.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            props.insert("resourceGuid".into(), json!(guid));
            props.insert("provisioningState".into(), json!("Updating"));
        }
    }
    // Children share the parent's etag, as in ARM.
    for collection in [
        "frontendIPConfigurations",
        "backendAddressPools",
        "loadBalancingRules",
        "probes",
        "securityRules",
        "subnets",
    ] {
        if let Some(children) = body
            .get_mut("properties")
            .and_then(|p| p.get_mut(collection))
            .and_then(Value::as_array_mut)
        {
            for child in children {
                if let Some(obj) = child.as_object_mut() {
                    let child_name = obj
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string();
                    obj.insert(
                        "id".into(),
                        json!(format!("{id}/{collection}/{child_name}")),
                    );
                    obj.insert("etag".into(), json!(etag));
                    obj.insert(
                        "type".into(),
                        json!(format!("{}/{collection}", kind.type_name())),
                    );
                    let props = obj.entry("properties").or_insert_with(|| json!({}));
                    if let Some(props) = props.as_object_mut() {
                        props.insert("provisioningState".into(), json!("Succeeded"));
                    }
                }
            }
        }
    }
}

fn start_operation(
    state: &mut State,
    key: &str,
    kind: OpKind,
    status: StatusCode,
    req: &Request<'_>,
    version: &str,
) -> Reply {
    let fail_with = match state.take_fault(&format!("LRO-{}", req.method), req.path) {
        Some(FaultAction::FailOperation(e)) => Some(e),
        _ => None,
    };
    let id = state.new_guid();
    let mut op = Operation {
        resource_key: key.to_string(),
        kind,
        remaining_polls: state.config.lro_polls,
        fail_with,
        status: OpStatus::InProgress,
        started: std::time::Instant::now(),
    };
    if op.remaining_polls == 0 {
        complete(state, &mut op);
    }
    state.operations.insert(id.clone(), op);
    let base = format!(
        "{}/subscriptions/{}/providers/Microsoft.Network/locations/{}",
        state.config.base_url,
        state.config.subscription,
        state
            .config
            .locations
            .first()
            .map(String::as_str)
            .unwrap_or("eastus")
    );
    let mut reply = match (status, state.resources.get(key)) {
        (StatusCode::ACCEPTED, _) | (_, None) => Reply::empty(status),
        (_, Some(r)) => Reply::json(status, r.body.clone()),
    };
    reply.headers.push((
        "azure-asyncoperation",
        format!("{base}/operations/{id}?api-version={version}"),
    ));
    if status == StatusCode::ACCEPTED {
        reply.headers.push((
            "location",
            format!("{base}/operationResults/{id}?api-version={version}"),
        ));
    }
    push_retry_after(state, &mut reply);
    reply
}

/// Adds the configured `Retry-After` to an operation answer, if one is configured.
fn push_retry_after(state: &State, reply: &mut Reply) {
    if let Some(secs) = state.config.retry_after_secs {
        reply.headers.push(("retry-after", secs.to_string()));
    }
}

/// Ends an operation: success applies it, failure leaves the resource marked `Failed`.
fn complete(state: &mut State, op: &mut Operation) {
    if let Some(error) = op.fail_with.take() {
        op.status = OpStatus::Failed(error);
        let after = if op.kind == OpKind::Delete {
            "Succeeded"
        } else {
            "Failed"
        };
        set_state(state, &op.resource_key, after);
        return;
    }
    op.status = OpStatus::Succeeded;
    match op.kind {
        OpKind::Put => set_state(state, &op.resource_key, "Succeeded"),
        OpKind::Delete => {
            state.resources.remove(&op.resource_key);
            integrity::sync_public_ip_references(state);
        }
    }
}

fn advance(state: &mut State, id: &str) -> Result<OpStatus, ArmError> {
    let Some(mut op) = state.operations.get(id).cloned() else {
        return Err(ArmError::new(
            StatusCode::NOT_FOUND,
            "OperationNotFound",
            format!("Operation {id} was not found."),
        ));
    };
    if op.status == OpStatus::InProgress {
        if op.remaining_polls > 0 {
            op.remaining_polls -= 1;
        } else {
            complete(state, &mut op);
        }
    }
    let status = op.status.clone();
    state.operations.insert(id.to_string(), op);
    Ok(status)
}

fn operation_status(state: &mut State, id: &str) -> Result<Reply, ArmError> {
    let mut reply = match advance(state, id)? {
        OpStatus::InProgress => Reply::json(StatusCode::OK, json!({"status": "InProgress"})),
        OpStatus::Succeeded => Reply::json(StatusCode::OK, json!({"status": "Succeeded"})),
        OpStatus::Failed(e) => Reply::json(
            StatusCode::OK,
            json!({"status": "Failed", "error": {"code": e.code, "message": e.message}}),
        ),
    };
    push_retry_after(state, &mut reply);
    Ok(reply)
}

fn operation_result(state: &mut State, id: &str, version: &str) -> Result<Reply, ArmError> {
    match advance(state, id)? {
        OpStatus::InProgress => {
            let mut reply = Reply::empty(StatusCode::ACCEPTED);
            reply.headers.push((
                "location",
                format!(
                    "{}/subscriptions/{}/providers/Microsoft.Network/locations/{}/operationResults/{id}?api-version={version}",
                    state.config.base_url,
                    state.config.subscription,
                    state.config.locations.first().map(String::as_str).unwrap_or("eastus")
                ),
            ));
            push_retry_after(state, &mut reply);
            Ok(reply)
        }
        OpStatus::Succeeded => Ok(Reply::empty(StatusCode::NO_CONTENT)),
        OpStatus::Failed(e) => Err(e),
    }
}

#[allow(clippy::too_many_arguments)]
fn child_resource(
    state: &mut State,
    req: &Request<'_>,
    rg: &str,
    kind: Kind,
    name: &str,
    child_collection: &str,
    child: &str,
    version: &str,
) -> Result<Reply, ArmError> {
    const CHILDREN: &[(Kind, &str, bool)] = &[
        (Kind::LoadBalancer, "backendAddressPools", true),
        (Kind::LoadBalancer, "frontendIPConfigurations", false),
        (Kind::LoadBalancer, "loadBalancingRules", false),
        (Kind::LoadBalancer, "probes", false),
        (Kind::SecurityGroup, "securityRules", true),
        (Kind::VirtualNetwork, "subnets", false),
        (Kind::NetworkInterface, "ipConfigurations", false),
    ];
    let Some(&(_, collection, writable)) = CHILDREN
        .iter()
        .find(|(k, c, _)| *k == kind && c.eq_ignore_ascii_case(child_collection))
    else {
        return Err(ArmError::new(
            StatusCode::NOT_FOUND,
            "InvalidResourceType",
            format!(
                "{child_collection} is not a child of {}.",
                kind.collection()
            ),
        ));
    };
    let parent_id = state.resource_id(rg, kind, name);
    let key = parent_id.to_ascii_lowercase();
    let Some(parent) = state.resources.get(&key).cloned() else {
        return Err(ArmError::not_found(kind.collection(), name));
    };
    let children = validate::array_at(&parent.body, &["properties", collection]);
    let index = children
        .iter()
        .position(|c| str_at(c, &["name"]).is_some_and(|n| n.eq_ignore_ascii_case(child)));
    match req.method {
        "GET" => index
            .map(|i| Reply::json(StatusCode::OK, children[i].clone()))
            .ok_or_else(|| {
                ArmError::not_found(&format!("{}/{name}/{collection}", kind.collection()), child)
            }),
        "PUT" | "DELETE" if writable => {
            preconditions(req, index.and_then(|i| etag_of(&children[i])), child)?;
            busy(&parent)?;
            let mut new_parent = parent.body.clone();
            let list = new_parent
                .get_mut("properties")
                .and_then(|p| p.as_object_mut())
                .map(|p| p.entry(collection).or_insert_with(|| json!([])))
                .and_then(Value::as_array_mut);
            let Some(list) = list else {
                return Err(ArmError::bad_request(
                    "InvalidRequestFormat",
                    "parent has no properties",
                ));
            };
            if req.method == "PUT" {
                validate::name(collection, child)?;
                let mut body = parse_body(req)?;
                if let Some(obj) = body.as_object_mut() {
                    obj.insert("name".into(), json!(child));
                }
                match index {
                    Some(i) => list[i] = body,
                    None => list.push(body),
                }
            } else if let Some(i) = index {
                list.remove(i);
            } else {
                return Ok(Reply::empty(StatusCode::NO_CONTENT));
            }
            // The parent is re-validated as a whole, as NRP does for child writes.
            match kind {
                Kind::LoadBalancer => {
                    validate::load_balancer(&new_parent)?;
                    integrity::load_balancer(state, &parent_id, &mut new_parent, Some(&parent))?;
                }
                Kind::SecurityGroup => {
                    validate::security_group(&new_parent)?;
                    integrity::security_group(state, &parent_id, &mut new_parent, Some(&parent));
                }
                _ => {}
            }
            let etag = state.new_etag();
            let guid = str_at(&parent.body, &["properties", "resourceGuid"])
                .unwrap_or_default()
                .to_string();
            decorate(&mut new_parent, &parent_id, name, kind, &etag, &guid);
            state.resources.insert(
                key.clone(),
                Stored {
                    body: new_parent,
                    ..parent
                },
            );
            integrity::sync_public_ip_references(state);
            let status = match (req.method, index) {
                ("DELETE", _) => StatusCode::ACCEPTED,
                (_, None) => StatusCode::CREATED,
                _ => StatusCode::OK,
            };
            let mut reply = start_operation(state, &key, OpKind::Put, status, req, version);
            if req.method == "PUT" {
                reply.body = state.resources.get(&key).and_then(|r| {
                    validate::array_at(&r.body, &["properties", collection])
                        .iter()
                        .find(|c| {
                            str_at(c, &["name"]).is_some_and(|n| n.eq_ignore_ascii_case(child))
                        })
                        .cloned()
                });
            }
            Ok(reply)
        }
        _ => only(req, &["GET"]).map(|()| Reply::empty(StatusCode::OK)),
    }
}

//! The HTTP front end: routing, request decoding, Status errors and the REST verbs.

mod admit;
pub(crate) mod decode;
mod discovery;
mod field_validation;
mod openapi;
mod params;
mod proto;
mod review;
mod route;
mod schema;
mod table;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::faults::{Faults, Verb};
use crate::managed;
use crate::patch::{self, PatchKind};
use crate::resources::{self, Entry, Registry, ResourceId};
use crate::status::{self, ApiError};
use crate::store::{Part, Preconditions, Propagation, Snapshot, Store};
pub use discovery::{MAJOR, MINOR};
use params::{ContinueToken, Params};
use route::Route;

/// Shared state of the HTTP handlers.
#[derive(Debug)]
pub struct AppState {
    /// The object store.
    pub store: Arc<Store>,
    /// Fault injection rules.
    pub faults: Arc<Faults>,
    /// How often watches with `allowWatchBookmarks` get a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Upper bound of a watch without `timeoutSeconds`.
    pub max_watch: Duration,
    /// `host:port` the server is reachable at (reported by `/api`).
    pub server_address: String,
}

/// The router serving the whole API.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// A JSON response.
fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    (
        code,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        bytes,
    )
        .into_response()
}

fn error_response(error: &ApiError) -> Response {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json_response(code, &error.to_status());
    if let Some(secs) = error.details.retry_after_seconds
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

fn verb_of(method: &Method, route: &Route, params: &Params) -> Option<Verb> {
    let collection = matches!(route, Route::Collection { .. });
    Some(match *method {
        Method::GET if params.watch => Verb::Watch,
        Method::GET if collection => Verb::List,
        Method::GET => Verb::Get,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if collection => Verb::DeleteCollection,
        Method::DELETE => Verb::Delete,
        _ => return None,
    })
}

async fn handle(
    State(app): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let path = uri.path().to_string();
    let body = match decode::read_body(body).await {
        Ok(body) => body,
        Err(error) => return error_response(&error),
    };
    let registry = app.store.registry();
    let Some(route) = route::parse(&path, &registry) else {
        return error_response(&ApiError::no_route(&path));
    };
    let params = match Params::parse(&query_pairs(&uri)) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let resource_name = match &route {
        Route::Collection { resource, .. } | Route::Object { resource, .. } => {
            registry.def(*resource).map_or("", |d| d.plural)
        }
        _ => "",
    };
    if let Some(verb) = verb_of(&method, &route, &params)
        && let Some(error) = app.faults.inject(verb, resource_name).await
    {
        tracing::debug!(%path, code = error.code, "injected fault");
        return error_response(&error);
    }
    let result = dispatch(&app, &registry, &method, route, params, &headers, &body).await;
    match result {
        Ok(response) => response,
        Err(error) => {
            tracing::debug!(%method, %path, code = error.code, reason = error.reason, "request failed");
            error_response(&error)
        }
    }
}

/// Serves a request, passing writes through the validating admission webhooks first
/// ([`crate::admission`]).
async fn dispatch(
    app: &AppState,
    registry: &Registry,
    method: &Method,
    route: Route,
    params: Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    match admit::target(app, method, &route) {
        Some(target) => {
            admit::admitted(app, registry, method, route, params, headers, body, target).await
        }
        None => dispatch_unadmitted(app, registry, method, route, params, headers, body).await,
    }
}

async fn dispatch_unadmitted(
    app: &AppState,
    registry: &Registry,
    method: &Method,
    route: Route,
    params: Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let get_only = |doc: Value| {
        if *method == Method::GET {
            Ok(json_response(StatusCode::OK, &doc))
        } else {
            Err(ApiError::method_not_allowed("only GET is served here"))
        }
    };
    match route {
        Route::Version => get_only(discovery::version()),
        Route::Health => Ok((StatusCode::OK, "ok").into_response()),
        Route::CoreVersions => get_only(discovery::core_versions(&app.server_address)),
        Route::OpenApiV2 if *method == Method::GET => {
            openapi::serve_v2(&app.store.registry(), headers)
        }
        Route::OpenApiV2 => Err(ApiError::method_not_allowed("only GET is served here")),
        Route::OpenApiIndex => get_only(openapi::index(&app.store.registry())),
        Route::OpenApiDocument(path) => {
            match openapi::group_version(&app.store.registry(), &path) {
                Some(doc) => get_only(doc),
                None => Err(ApiError::no_route(&format!("/openapi/v3/{path}"))),
            }
        }
        Route::Groups => get_only(discovery::groups(registry)),
        Route::Review(kind) if *method == Method::POST => {
            params.validate_write_options("CreateOptions")?;
            let answered = review::answer(kind, decode_body(body, headers)?)?;
            Ok(json_response(StatusCode::CREATED, &answered))
        }
        Route::Review(_) => Err(ApiError::method_not_allowed("only POST is served here")),
        Route::Group(name) => get_only(discovery::group(registry, &name)),
        Route::Resources { group, version } => {
            get_only(discovery::resource_list(registry, &group, &version))
        }
        Route::Collection {
            resource,
            namespace,
            legacy_watch,
        } => {
            let namespace = namespace.as_deref();
            let entry = served(registry, resource)?;
            let mut params = params;
            if matches!(*method, Method::GET | Method::DELETE) {
                restrict_field_selector(&mut params.fields, &entry)?;
            }
            match *method {
                Method::GET if params.watch || legacy_watch => watch::serve(
                    app,
                    &entry,
                    resource,
                    namespace,
                    &params,
                    wants_table(headers),
                ),
                Method::GET => list(app, &entry, resource, namespace, &params, headers),
                Method::POST => {
                    params.validate_write_options("CreateOptions")?;
                    let mut object = decode_body(body, headers)?;
                    check_type(&entry.def, &object)?;
                    let mut warnings = field_validation::check_body(
                        &entry,
                        &mut object,
                        params.field_directive(),
                    )?;
                    admit_namespace(app, &entry.def, namespace, &object)?;
                    let created = app
                        .store
                        .create(resource, namespace, object, params.dry_run)?;
                    warnings.extend(strategy_warnings(resource, Part::Main, &created));
                    Ok(field_validation::with_warnings(
                        json_response(StatusCode::CREATED, &created),
                        &warnings,
                    ))
                }
                // kube-apiserver's namespace storage has no collection delete.
                Method::DELETE if resource == resources::namespaces() => {
                    Err(ApiError::method_not_allowed(
                        "the server does not allow this method on the requested resource",
                    ))
                }
                Method::DELETE => {
                    delete_collection(app, &entry, resource, namespace, &params, body, headers)
                }
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on a collection"
                ))),
            }
        }
        Route::Object {
            resource,
            namespace,
            name,
            subresource,
            legacy_watch,
        } => {
            let entry = served(registry, resource)?;
            let def = &entry.def;
            let part = match subresource.as_deref() {
                None => Part::Main,
                Some("status") if def.has_status => Part::Status,
                // kube-apiserver serves `/finalize` for updates only.
                Some("finalize") if resource == resources::namespaces() => {
                    if *method != Method::PUT {
                        return Err(ApiError::method_not_allowed(format!(
                            "{method} is not supported on namespaces/finalize"
                        )));
                    }
                    Part::Finalize
                }
                Some(other) => {
                    return Err(ApiError::no_route(&format!(
                        "{}/{other}",
                        def.object_path(namespace.as_deref(), &name)
                    )));
                }
            };
            let namespace = namespace.as_deref();
            if legacy_watch {
                let mut params = params;
                restrict_field_selector(&mut params.fields, &entry)?;
                return watch::serve_one(
                    app,
                    &entry,
                    resource,
                    namespace,
                    &name,
                    &params,
                    wants_table(headers),
                );
            }
            match *method {
                Method::GET => {
                    let object = app.store.get(resource, namespace, &name)?;
                    if wants_table(headers) {
                        let snapshot = Snapshot {
                            resource_version: app.store.current_version(),
                            items: vec![(
                                (namespace.unwrap_or_default().to_string(), name.clone()),
                                object,
                            )],
                        };
                        return Ok(json_response(
                            StatusCode::OK,
                            &table::render(
                                &entry,
                                &snapshot.items,
                                snapshot.resource_version,
                                None,
                                params.include_object,
                            ),
                        ));
                    }
                    Ok(json_response(StatusCode::OK, &object))
                }
                Method::PUT => {
                    params.validate_write_options("UpdateOptions")?;
                    let mut object = decode_body(body, headers)?;
                    check_type(def, &object)?;
                    let mut warnings = field_validation::check_body(
                        &entry,
                        &mut object,
                        params.field_directive(),
                    )?;
                    let create_instead =
                        (part == Part::Main && creates_on_update(def)).then(|| object.clone());
                    let updated = app.store.update(
                        resource,
                        namespace,
                        &name,
                        part,
                        params.dry_run,
                        move |_| Ok(object),
                    );
                    let answered = match (updated, create_instead) {
                        (Ok(updated), _) => {
                            warnings.extend(strategy_warnings(resource, part, &updated));
                            Ok(json_response(StatusCode::OK, &updated))
                        }
                        (Err(missing), Some(object)) if missing.code == 404 => {
                            if crate::meta::name(&object) != Some(name.as_str()) {
                                return Err(ApiError::bad_request(format!(
                                    "the name of the object ({}) does not match the name on the URL ({name})",
                                    crate::meta::name(&object).unwrap_or_default()
                                )));
                            }
                            admit_namespace(app, &entry.def, namespace, &object)?;
                            let created =
                                app.store
                                    .create(resource, namespace, object, params.dry_run)?;
                            warnings.extend(strategy_warnings(resource, Part::Main, &created));
                            Ok(json_response(StatusCode::CREATED, &created))
                        }
                        (Err(error), _) => Err(error),
                    };
                    answered.map(|response| field_validation::with_warnings(response, &warnings))
                }
                Method::PATCH => patch_object(
                    app, &entry, resource, namespace, &name, part, &params, headers, body,
                ),
                Method::DELETE => delete_object(
                    app,
                    registry,
                    resource,
                    namespace,
                    &name,
                    delete_options(body, headers, &params)?,
                ),
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on an object"
                ))),
            }
        }
    }
}

/// Kinds whose registry strategy answers `AllowCreateOnUpdate() == true`, so a PUT of a
/// missing object creates it (201): pkg/registry/core/service/strategy.go,
/// core/endpoint/strategy.go, coordination/lease/strategy.go. Every other kind served here
/// answers 404.
fn creates_on_update(def: &resources::ResourceDef) -> bool {
    matches!(
        (def.group, def.kind),
        ("", "Service" | "Endpoints") | ("coordination.k8s.io", "Lease")
    )
}

/// The served resource a route names (it may have gone since the route was parsed).
fn served(registry: &Registry, resource: ResourceId) -> Result<Entry, ApiError> {
    registry
        .entry(resource)
        .cloned()
        .ok_or_else(|| ApiError::no_route(&format!("resource #{resource}")))
}

/// Limits a list's or watch's field selector to the labels kube-apiserver accepts for the
/// resource served: a built-in kind's conversion table, or a custom resource's name,
/// namespace and `selectableFields`. Anything else is a 400 (handlers/get.go).
fn restrict_field_selector(
    fields: &mut crate::selectors::FieldSelector,
    entry: &Entry,
) -> Result<(), ApiError> {
    let restricted = match &entry.custom {
        Some(custom) => fields.restrict_to_custom(entry.def.namespaced, &custom.selectable_fields),
        None => fields.restrict_to(entry.def.group, entry.def.kind),
    };
    restricted.map_err(ApiError::bad_request)
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
}

fn decode_body(body: &Bytes, headers: &HeaderMap) -> Result<Value, ApiError> {
    let value: Value = if proto::is_protobuf(content_type(headers)) {
        proto::decode(body)?
    } else if content_type(headers).contains("yaml") {
        decode::yaml_value(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}")))?
    };
    if !value.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    Ok(value)
}

/// Removes the fields `object`'s built-in kind does not have, as kube-apiserver's decoder
/// drops them (for state loaded without a request); returns their paths. Custom resources are
/// left to their schema's pruning.
pub fn drop_unknown_fields(object: &mut Value) -> Vec<String> {
    let type_of = |field: &str| {
        object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (type_of("apiVersion"), type_of("kind"));
    proto::unknown_fields(&api_version, &kind, object).unwrap_or_default()
}

/// A body naming another type than the URL is a client mistake (400), not a conversion.
fn check_type(def: &resources::ResourceDef, object: &Value) -> Result<(), ApiError> {
    let kind = object.get("kind").and_then(Value::as_str);
    let api_version = object.get("apiVersion").and_then(Value::as_str);
    if kind.is_some_and(|k| k != def.kind) || api_version.is_some_and(|v| v != def.api_version()) {
        return Err(ApiError::bad_request(format!(
            "the body is a {} {} but the request is for {} {}",
            api_version.unwrap_or_default(),
            kind.unwrap_or_default(),
            def.api_version(),
            def.kind
        )));
    }
    Ok(())
}

fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("as=Table"))
}

fn list(
    app: &AppState,
    entry: &Entry,
    resource: ResourceId,
    namespace: Option<&str>,
    params: &Params,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    params.validate_list_options(false)?;
    let snapshot = match &params.continue_from {
        // storage/etcd3/store.go GetList refuses a resourceVersion next to a continue token.
        Some(_) if params.has_specific_resource_version() => {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Some(token) => {
            let at = token
                .resource_version
                .map_or(crate::store::ReadAt::Latest, crate::store::ReadAt::Exact);
            app.store.list(resource, namespace, at).map_err(|e| {
                if e.code == 410 {
                    expired_continue(&token.after)
                } else {
                    e
                }
            })?
        }
        None => app.store.list(resource, namespace, params.read_at()?)?,
    };
    let after = params.continue_from.as_ref().map(|t| t.after.clone());
    let mut matching = snapshot
        .items
        .into_iter()
        .filter(|(key, _)| after.as_ref().is_none_or(|a| key > a))
        .filter(|(_, obj)| params.labels.matches(obj) && params.fields.matches(obj));
    let mut items = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    for (key, object) in matching.by_ref() {
        if params.limit > 0 && items.len() == params.limit {
            remaining = 1;
            break;
        }
        items.push((key, object));
    }
    if remaining > 0 {
        remaining += matching.count();
        if let Some((last, _)) = items.last() {
            next = Some(ContinueToken {
                resource_version: Some(snapshot.resource_version),
                after: last.clone(),
            });
        }
    }
    if wants_table(headers) {
        return Ok(json_response(
            StatusCode::OK,
            &table::render(
                entry,
                &items,
                snapshot.resource_version,
                next.as_ref().map(ContinueToken::encode),
                params.include_object,
            ),
        ));
    }
    let def = &entry.def;
    let mut metadata = json!({"resourceVersion": snapshot.resource_version.to_string()});
    if let Some(token) = &next {
        metadata["continue"] = json!(token.encode());
        metadata["remainingItemCount"] = json!(remaining);
    }
    // Written piecewise so a large list is serialised once, straight from the stored values.
    let mut out = Vec::with_capacity(256 + items.len() * 1024);
    out.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut out, &def.list_kind()).map_err(internal)?;
    out.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut out, &def.api_version()).map_err(internal)?;
    out.extend_from_slice(b",\"metadata\":");
    serde_json::to_writer(&mut out, &metadata).map_err(internal)?;
    out.extend_from_slice(b",\"items\":[");
    for (i, (_, object)) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, object.as_ref()).map_err(internal)?;
    }
    out.extend_from_slice(b"]}");
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::from(out),
    )
        .into_response())
}

/// 410 for a continue token whose version left the history. Like kube-apiserver (etcd3
/// store.go `handleCompactedErrorForPaging`), the Status carries a token in
/// `metadata.continue` that continues after the same key from the newest state.
fn expired_continue(after: &crate::store::ObjectKey) -> ApiError {
    let mut error = ApiError::expired(
        "The provided continue parameter is too old to display a consistent list result. \
         You can start a new list without the continue parameter, or use the continue token \
         in this response to retrieve the remainder of the results. Continuing with the \
         provided token results in an inconsistent list - objects that were created, \
         modified, or deleted between the time the first chunk was returned and now may show \
         up in the list.",
    );
    error.details.continue_token = Some(
        ContinueToken {
            resource_version: None,
            after: after.clone(),
        }
        .encode(),
    );
    error
}

fn internal(error: serde_json::Error) -> ApiError {
    ApiError::internal(format!("encoding the response failed: {error}"))
}

#[allow(clippy::too_many_arguments)]
fn patch_object(
    app: &AppState,
    entry: &Entry,
    resource: ResourceId,
    namespace: Option<&str>,
    name: &str,
    part: Part,
    params: &Params,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, ApiError> {
    let kind = PatchKind::from_content_type(content_type(headers))
        .map_err(|_| ApiError::unsupported_media_type(content_type(headers)))?;
    params.validate_patch_options(kind == PatchKind::Apply)?;
    let patch_doc =
        patch::parse_body(kind, body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let def = &entry.def;
    if kind == PatchKind::Strategic && entry.custom.is_some() {
        // Custom resources have no Go type to carry patch strategies (kube-apiserver: 415).
        return Err(ApiError::unsupported_media_type(content_type(headers)));
    }
    let manager = params.field_manager.clone().unwrap_or_default();
    let subresource = if part == Part::Status { "status" } else { "" };
    let patch_error = |e: patch::PatchError| match e {
        // A JSON patch that does not apply (a failed `test`, a missing path): handlers/patch.go
        // answers `NewGenericServerResponse(422, "", GroupResource{}, "", err.Error(), ...)`,
        // whose message is fixed, reason Invalid, and whose one cause (type
        // `UnexpectedServerResponse`) carries the patch library's words, path included
        // (k8s.io/apimachinery/pkg/api/errors).
        patch::PatchError::JsonPatch(error) => {
            tracing::debug!(%error, "JSON patch does not apply");
            let mut answer = ApiError::unprocessable(
                "the server rejected our request due to an error in our request",
            );
            answer.details.causes.push(crate::status::Cause {
                reason: "UnexpectedServerResponse",
                message: error.to_string(),
                field: String::new(),
            });
            answer
        }
        patch::PatchError::Shape(_) => ApiError::invalid(
            def,
            name,
            vec![crate::status::Cause {
                reason: "FieldValueInvalid",
                message: e.to_string(),
                field: String::new(),
            }],
        ),
        other => ApiError::bad_request(other.to_string()),
    };
    if kind == PatchKind::Apply {
        // An apply configuration is a partial object: type it before merging, as kube-apiserver
        // decodes it into the Go type first, so a wrong type is named where it was written.
        schema::check_partial(def, &patch_doc)?;
        field_validation::check_apply(entry, &patch_doc)?;
        // structuredMergeManager.Apply (k8s.io/apiserver/pkg/util/managedfields/internal/
        // structuredmerge.go): the configuration must name the served version and carry no
        // managedFields (checked after typing, so a wrong-typed apiVersion is named as such).
        let patch_version = patch_doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if patch_version != def.api_version() {
            return Err(ApiError::bad_request(format!(
                "Incorrect version specified in apply patch. Specified patch version: \
                 {patch_version}, expected: {}",
                def.api_version()
            )));
        }
        if patch_doc
            .pointer("/metadata/managedFields")
            .is_some_and(|m| !m.is_null())
        {
            return Err(ApiError::bad_request("metadata.managedFields must be nil"));
        }
        let exists = app.store.get(resource, namespace, name).is_ok();
        if !exists && part == Part::Main {
            let mut object =
                managed::apply(&json!({}), &patch_doc, &manager, "", &def.api_version())
                    .map_err(patch_error)?;
            crate::meta::metadata_mut(&mut object).insert("name".into(), json!(name));
            schema::check(def, &mut object)?;
            admit_namespace(app, def, namespace, &object)?;
            let created = app
                .store
                .create(resource, namespace, object, params.dry_run)?;
            return Ok(field_validation::with_warnings(
                json_response(StatusCode::CREATED, &created),
                &strategy_warnings(resource, part, &created),
            ));
        }
    }
    let mut warnings = Vec::new();
    let updated = app
        .store
        .update(resource, namespace, name, part, params.dry_run, |current| {
            if kind == PatchKind::Apply {
                if !params.force {
                    let contested = managed::conflicts(current, &patch_doc, &manager, subresource);
                    if !contested.is_empty() {
                        return Err(managed::conflict_error(&contested));
                    }
                }
                managed::apply(
                    current,
                    &patch_doc,
                    &manager,
                    subresource,
                    &def.api_version(),
                )
            } else {
                patch::apply(kind, current, &patch_doc)
            }
            .map_err(patch_error)
            .and_then(|mut patched| {
                // A patch may produce what no body could carry: type it like a body, and drop
                // (or refuse) fields the kind does not have. Applies were checked above.
                if kind == PatchKind::Apply {
                    schema::check(def, &mut patched)?;
                } else {
                    warnings = field_validation::check_patched(
                        entry,
                        &mut patched,
                        params.field_directive(),
                        // Upstream shows a strategic patch as Go prints the decoded patch,
                        // and the result of any other as its JSON.
                        |before| match kind {
                            PatchKind::Strategic => field_validation::go_value_text(&patch_doc),
                            _ => before.to_string(),
                        },
                    )?;
                }
                Ok(patched)
            })
        })?;
    warnings.extend(strategy_warnings(resource, part, &updated));
    Ok(field_validation::with_warnings(
        json_response(StatusCode::OK, &updated),
        &warnings,
    ))
}

/// What a kind's strategy warns about in an object it accepted (`WarningsOnCreate` /
/// `WarningsOnUpdate`; a Service's, for writes of the main resource).
fn strategy_warnings(resource: ResourceId, part: Part, stored: &Value) -> Vec<String> {
    if resource == resources::services() && part == Part::Main {
        crate::services::warnings(stored)
    } else {
        Vec::new()
    }
}

/// Reads `DeleteOptions` from the query and the body and checks them as kube-apiserver's
/// `ValidateDeleteOptions` does (422 `DeleteOptions.meta.k8s.io "" is invalid`).
fn delete_options(
    body: &Bytes,
    headers: &HeaderMap,
    params: &Params,
) -> Result<DeleteRequest, ApiError> {
    let mut preconditions = Preconditions::default();
    let mut dry_run = params.dry_run;
    let mut policy = params.propagation_policy.clone();
    let mut dry_run_values: Vec<String> = params.dry_run_values.clone();
    if !body.is_empty() {
        let options: Value = if proto::is_protobuf(content_type(headers)) {
            let options = proto::decode(body)?;
            if options.get("kind").and_then(Value::as_str) != Some("DeleteOptions") {
                return Err(ApiError::bad_request(
                    "invalid DeleteOptions: the protobuf body holds another kind",
                ));
            }
            options
        } else {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
        };
        preconditions.uid = options
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        preconditions.resource_version = options
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(body_policy) = options.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(body_policy.to_string());
        }
        if let Some(modes) = options.get("dryRun").and_then(Value::as_array) {
            dry_run |= modes.iter().any(|m| m == "All");
            dry_run_values.extend(modes.iter().filter_map(Value::as_str).map(str::to_string));
        }
    }
    let mut causes = params::propagation_policy_causes(policy.as_deref());
    causes.extend(params::dry_run_causes(
        dry_run_values.iter().map(String::as_str),
    ));
    if !causes.is_empty() {
        return Err(ApiError::invalid_options("DeleteOptions", causes));
    }
    let propagation = match policy.as_deref() {
        Some("Orphan") => Some(Propagation::Orphan),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Background") => Some(Propagation::Background),
        _ => None,
    };
    Ok(DeleteRequest {
        preconditions,
        propagation,
        dry_run,
    })
}

/// What a DELETE asks for.
struct DeleteRequest {
    preconditions: Preconditions,
    propagation: Option<Propagation>,
    dry_run: bool,
}

fn delete_object(
    app: &AppState,
    registry: &Registry,
    resource: ResourceId,
    namespace: Option<&str>,
    name: &str,
    request: DeleteRequest,
) -> Result<Response, ApiError> {
    let DeleteRequest {
        preconditions,
        propagation,
        dry_run,
    } = request;
    if resource == resources::namespaces() && IMMORTAL_NAMESPACES.contains(&name) {
        return Err(ApiError::immortal_namespace(
            resources::get(resources::namespaces()),
            name,
        ));
    }
    let deleted = app.store.delete_propagating(
        resource,
        namespace,
        name,
        &preconditions,
        propagation,
        dry_run,
    )?;
    if resource == resources::namespaces() && !dry_run {
        // The namespace controller's work, begun at once: a namespace whose contents nothing
        // holds is gone when this answers (with the Terminating namespace, as upstream does).
        if let Err(error) = crate::namespace_lifecycle::sync(&app.store, name) {
            tracing::debug!(namespace = name, %error, "namespace deletion not finished yet");
        }
    }
    if !deleted.gone {
        // Still held by finalizers (or a dry run): kube-apiserver answers with the object.
        return Ok(json_response(StatusCode::OK, &deleted.object));
    }
    let def = served(registry, resource)?.def;
    let mut success = status::success();
    success["details"] = json!({
        "name": name,
        "group": def.group,
        "kind": def.plural,
        "uid": deleted.object.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
    });
    Ok(json_response(StatusCode::OK, &success))
}

/// The NamespaceLifecycle admission plugin's rule for a create: new content needs an existing
/// namespace (404 for the namespace otherwise, as kube-apiserver answers) that is not being
/// deleted (403).
fn admit_namespace(
    app: &AppState,
    def: &resources::ResourceDef,
    namespace: Option<&str>,
    object: &Value,
) -> Result<(), ApiError> {
    if !def.namespaced {
        return Ok(());
    }
    let namespace = namespace
        .or_else(|| crate::meta::namespace(object))
        .unwrap_or("default");
    match app.store.get(resources::namespaces(), None, namespace) {
        Ok(found)
            if found.pointer("/status/phase").and_then(Value::as_str)
                == Some(crate::store::NAMESPACE_TERMINATING) =>
        {
            Err(ApiError::namespace_terminating(
                def,
                crate::meta::name(object).unwrap_or_default(),
                namespace,
            ))
        }
        Ok(_) => Ok(()),
        Err(error) if error.code == 404 => Err(ApiError::not_found(
            resources::get(resources::namespaces()),
            namespace,
        )),
        Err(error) => Err(error),
    }
}

/// The namespaces the NamespaceLifecycle admission plugin never lets go.
const IMMORTAL_NAMESPACES: [&str; 3] = ["default", "kube-system", "kube-public"];

fn delete_collection(
    app: &AppState,
    entry: &Entry,
    resource: ResourceId,
    namespace: Option<&str>,
    params: &Params,
    body: &Bytes,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let request = delete_options(body, headers, params)?;
    params.validate_list_options(false)?;
    let snapshot = app
        .store
        .list(resource, namespace, crate::store::ReadAt::Latest)?;
    let mut deleted = Vec::new();
    for ((ns, name), object) in snapshot.items {
        if !(params.labels.matches(&object) && params.fields.matches(&object)) {
            continue;
        }
        let ns = (!ns.is_empty()).then_some(ns);
        match app.store.delete_propagating(
            resource,
            ns.as_deref(),
            &name,
            &Preconditions::default(),
            request.propagation,
            request.dry_run,
        ) {
            Ok(outcome) => deleted.push((*outcome.object).clone()),
            // Deleted concurrently: nothing left to do for it.
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let def = &entry.def;
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": def.list_kind(),
            "apiVersion": def.api_version(),
            "metadata": {"resourceVersion": app.store.current_version().to_string()},
            "items": deleted,
        }),
    ))
}

//! Validating admission around the write handlers: which writes the stored
//! ValidatingWebhookConfigurations may have to see ([`target`]), and serving such a write
//! through them ([`admitted`]); the webhook calls themselves are [`crate::admission`].

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::Value;

use super::AppState;
use super::field_validation;
use super::params::Params;
use super::route::Route;
use crate::resources::{self, Registry, ResourceId};
use crate::status::ApiError;

/// A write that validating admission webhooks may have to see.
pub(super) struct AdmissionTarget {
    resource: ResourceId,
    namespace: Option<String>,
    /// The object's name from the path (`None` for a create by POST).
    name: Option<String>,
    subresource: String,
    delete: bool,
    configurations: Vec<Arc<Value>>,
}

/// The write `route` is, when ValidatingWebhookConfigurations exist that could match it.
/// Writes of the configurations themselves are never sent to webhooks, as kube-apiserver
/// never does (a broken webhook could otherwise not be removed).
pub(super) fn target(app: &AppState, method: &Method, route: &Route) -> Option<AdmissionTarget> {
    let (resource, namespace, name, subresource, delete) = match (method, route) {
        (
            &Method::POST,
            Route::Collection {
                resource,
                namespace,
                ..
            },
        ) => (*resource, namespace.clone(), None, None, false),
        (
            &Method::PUT | &Method::PATCH | &Method::DELETE,
            Route::Object {
                resource,
                namespace,
                name,
                subresource,
                legacy_watch: false,
            },
        ) => (
            *resource,
            namespace.clone(),
            Some(name.clone()),
            subresource.clone(),
            *method == Method::DELETE,
        ),
        _ => return None,
    };
    if resource == resources::validating_webhook_configurations() {
        return None;
    }
    let configurations: Vec<Arc<Value>> = app
        .store
        .list(
            resources::validating_webhook_configurations(),
            None,
            crate::store::ReadAt::Latest,
        )
        .ok()?
        .items
        .into_iter()
        .map(|(_, object)| object)
        .collect();
    (!configurations.is_empty()).then(|| AdmissionTarget {
        resource,
        namespace,
        name,
        subresource: subresource.unwrap_or_default(),
        delete,
        configurations,
    })
}

/// A write with webhooks to consult: the write is tried as a dry run (so the webhooks see the
/// object as it would be stored: defaulted, validated, addresses assigned), the matching
/// webhooks are called, and only if they allow it is the request served as sent (a `dryRun`
/// request again as a dry run), with their warnings.
#[allow(clippy::too_many_arguments)]
pub(super) async fn admitted(
    app: &AppState,
    registry: &Registry,
    method: &Method,
    route: Route,
    params: Params,
    headers: &HeaderMap,
    body: &Bytes,
    target: AdmissionTarget,
) -> Result<Response, ApiError> {
    let def = super::served(registry, target.resource)?.def;
    let namespace = target.namespace.as_deref();
    let old = target
        .name
        .as_deref()
        .and_then(|name| app.store.get(target.resource, namespace, name).ok());
    let operation = match (target.delete, &old) {
        (true, _) => "DELETE",
        (false, Some(_)) => "UPDATE",
        (false, None) => "CREATE",
    };
    let configurations: Vec<&Value> = target.configurations.iter().map(AsRef::as_ref).collect();
    let named = crate::admission::Attributes {
        operation,
        group: def.group,
        version: def.version,
        resource: def.plural,
        subresource: &target.subresource,
        namespaced: def.namespaced,
        namespace_labels: Default::default(),
        object: None,
        old_object: None,
    };
    if !crate::admission::rules::any_rule_matches(&configurations, &named) {
        return super::dispatch_unadmitted(app, registry, method, route, params, headers, body)
            .await;
    }
    let object = if target.delete {
        None
    } else {
        let mut trial = params.clone();
        trial.dry_run = true;
        trial.dry_run_values = vec!["All".into()];
        let mut json_headers = headers.clone();
        json_headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        let tried = Box::pin(super::dispatch_unadmitted(
            app,
            registry,
            method,
            route.clone(),
            trial,
            &json_headers,
            body,
        ))
        .await?;
        if !tried.status().is_success() {
            return Ok(tried);
        }
        let bytes = axum::body::to_bytes(tried.into_body(), usize::MAX)
            .await
            .map_err(|e| ApiError::internal(format!("reading the dry run's object: {e}")))?;
        Some(
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|e| ApiError::internal(format!("the dry run's object: {e}")))?,
        )
    };
    if target.delete && old.is_none() {
        // Nothing to delete: the request answers 404 as it would without webhooks.
        return super::dispatch_unadmitted(app, registry, method, route, params, headers, body)
            .await;
    }
    let object_ref = object.as_ref();
    let name = target
        .name
        .clone()
        .or_else(|| object_ref.and_then(|o| crate::meta::name(o).map(str::to_owned)))
        .unwrap_or_default();
    let namespace_labels = if target.resource == resources::namespaces() {
        crate::admission::rules::labels(object_ref.or(old.as_deref()))
    } else {
        namespace
            .and_then(|ns| app.store.get(resources::namespaces(), None, ns).ok())
            .map(|ns| crate::admission::rules::labels(Some(&ns)))
            .unwrap_or_default()
    };
    let attributes = crate::admission::Attributes {
        operation,
        group: def.group,
        version: def.version,
        resource: def.plural,
        subresource: &target.subresource,
        namespaced: def.namespaced,
        namespace_labels,
        object: object_ref,
        old_object: old.as_deref(),
    };
    let hooks = crate::admission::matching(&configurations, &attributes);
    let warnings = if hooks.is_empty() {
        Vec::new()
    } else {
        crate::admission::admit(
            &hooks,
            def.kind,
            &name,
            namespace,
            &attributes,
            params.dry_run,
        )
        .await?
    };
    let response = Box::pin(super::dispatch_unadmitted(
        app, registry, method, route, params, headers, body,
    ))
    .await?;
    Ok(field_validation::with_warnings(response, &warnings))
}

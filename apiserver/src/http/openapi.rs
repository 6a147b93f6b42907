//! OpenAPI documents.
//!
//! v3 (`/openapi/v3`): an index and per-group-version documents with every served kind's schema
//! (the v2 definitions, references moved), which `kubectl explain` reads. kubectl 1.27+
//! downloads these to decide how to validate: when every PATCH operation lists the
//! `fieldValidation` query parameter it leaves validation to the server and needs no schemas.
//!
//! v2 (`/openapi/v2`): the full Swagger 2.0 document of every served kind, built-in and custom
//! ([`v2`]), in JSON or in gnostic's protobuf form ([`protobuf`]). kubectl and client-go before
//! 1.27 cannot `apply` without it: they validate manifests against it and compute strategic
//! merge patches from its patch extensions.

mod definitions;
pub mod protobuf;
pub mod v2;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::discovery::{MAJOR, MINOR};
use crate::resources::Registry;
use crate::status::ApiError;

/// The media type of the protobuf form as answered. Clients ask for it with the older
/// `…spec.v2@v1.0+protobuf` spelling too, but Go's MIME parser (client-go reads every response's
/// type) refuses the `@`, so the response carries the spelling kube-apiserver answers with.
const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// Which form of the v2 document a request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Json,
    Protobuf,
}

/// Content negotiation on `Accept`: the protobuf form only when asked for by name, JSON for
/// JSON, wildcards and no header; `None` (406) for anything else.
fn negotiate(accept: Option<&str>) -> Option<Form> {
    let Some(accept) = accept else {
        return Some(Form::Json);
    };
    let mut json = false;
    for range in accept.split(',') {
        let media = range.split(';').next().unwrap_or_default().trim();
        if media.starts_with("application/com.github.proto-openapi.spec.v2")
            && media.ends_with("+protobuf")
        {
            return Some(Form::Protobuf);
        }
        json |= matches!(media, "application/json" | "application/*" | "*/*" | "");
    }
    json.then_some(Form::Json)
}

/// A strong ETag over the exact bytes served (FNV-1a; only equality matters).
fn etag(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("\"{hash:016X}\"")
}

fn if_none_match_hits(header: Option<&str>, tag: &str) -> bool {
    header.is_some_and(|h| h.split(',').any(|t| t.trim() == tag || t.trim() == "*"))
}

/// The v2 document of what `registry` serves now.
pub fn v2_document(registry: &Registry) -> Value {
    let served: Vec<v2::Served<'_>> = registry
        .entries()
        .map(|(_, entry)| v2::Served {
            def: &entry.def,
            custom_schema: entry.custom.as_ref().map(|c| c.schema.as_ref()),
        })
        .collect();
    v2::document(&served)
}

/// `GET /openapi/v2`: JSON or protobuf by `Accept`, with an ETag honouring `If-None-Match`.
pub fn serve_v2(registry: &Registry, headers: &HeaderMap) -> Result<Response, ApiError> {
    let header_text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let Some(form) = negotiate(header_text(header::ACCEPT)) else {
        let mut error = ApiError::bad_request(format!(
            "only application/json and {PROTOBUF} are served at /openapi/v2"
        ));
        error.code = 406;
        error.reason = "NotAcceptable";
        return Err(error);
    };
    let document = v2_document(registry);
    let (bytes, content_type) = match form {
        Form::Json => (
            serde_json::to_vec(&document)
                .map_err(|e| ApiError::internal(format!("encoding OpenAPI v2: {e}")))?,
            "application/json",
        ),
        Form::Protobuf => (
            protobuf::encode(&document).map_err(|e| ApiError::internal(e.to_string()))?,
            PROTOBUF,
        ),
    };
    let tag = etag(&bytes);
    let status = if if_none_match_hits(header_text(header::IF_NONE_MATCH), &tag) {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let body = if status == StatusCode::OK {
        Body::from(bytes)
    } else {
        Body::empty()
    };
    let mut response = (status, body).into_response();
    let response_headers = response.headers_mut();
    response_headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response_headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    if let Ok(value) = HeaderValue::from_str(&tag) {
        response_headers.insert(header::ETAG, value);
    }
    Ok(response)
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group version's document lives.
pub fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    for (group, version) in registry.group_versions() {
        let path = gv_path(group, version);
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={MAJOR}{MINOR}")}),
        );
    }
    json!({"paths": paths})
}

fn operation(group: &str, version: &str, kind: &str, verb: &str) -> Value {
    json!({
        "operationId": format!("{verb}{kind}"),
        "parameters": [
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
    })
}

/// `/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`; `None` for unknown ones.
pub fn group_version(registry: &Registry, path: &str) -> Option<Value> {
    let (group, version) = match path.split('/').collect::<Vec<_>>().as_slice() {
        ["api", version] => ("", *version),
        ["apis", group, version] => (*group, *version),
        _ => return None,
    };
    let mut paths = Map::new();
    for r in registry
        .entries()
        .map(|(_, entry)| &entry.def)
        .filter(|r| r.group == group && r.version == version)
    {
        let base = format!("/{}", gv_path(group, version));
        let collection = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        paths.insert(
            collection.clone(),
            json!({"post": operation(group, version, r.kind, "post")}),
        );
        paths.insert(
            format!("{collection}/{{name}}"),
            json!({
                "put": operation(group, version, r.kind, "put"),
                "patch": operation(group, version, r.kind, "patch"),
            }),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{MAJOR}.{MINOR}.0")},
        "paths": paths,
        "components": {"schemas": v3_schemas(registry)},
    }))
}

/// The schemas of every served kind in v3 form: the v2 definitions (with their group-version-kind
/// and patch extensions) with references moved to `#/components/schemas/`. `kubectl explain`
/// (1.27+) reads only these; without them it fails with "GVK … not found in OpenAPI schema".
fn v3_schemas(registry: &Registry) -> Value {
    let mut definitions = v2_document(registry)
        .get_mut("definitions")
        .map(Value::take)
        .unwrap_or_else(|| json!({}));
    move_refs(&mut definitions);
    definitions
}

fn move_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                match inner {
                    Value::String(target) if key == "$ref" => {
                        if let Some(name) = target.strip_prefix("#/definitions/") {
                            *target = format!("#/components/schemas/{name}");
                        }
                    }
                    _ => move_refs(inner),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(move_refs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_negotiation() {
        let cases = [
            (None, Some(Form::Json)),
            (Some("application/json"), Some(Form::Json)),
            (Some("*/*"), Some(Form::Json)),
            (Some("application/json, */*"), Some(Form::Json)),
            // client-go before 1.27, client-go 1.27+, and a preference list naming it.
            (
                Some("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
                Some(Form::Protobuf),
            ),
            (Some(PROTOBUF), Some(Form::Protobuf)),
            (
                Some(
                    "application/json;q=0.9, application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
                ),
                Some(Form::Protobuf),
            ),
            (Some("application/yaml"), None),
        ];
        for (accept, want) in cases {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
    }

    #[test]
    fn etags_follow_bytes_and_if_none_match_matches_them() {
        let a = etag(b"one");
        assert_eq!(a, etag(b"one"));
        assert_ne!(a, etag(b"two"));
        assert!(a.starts_with('"') && a.ends_with('"'));
        assert!(if_none_match_hits(Some(&a), &a));
        assert!(if_none_match_hits(Some(&format!("\"x\", {a}")), &a));
        assert!(if_none_match_hits(Some("*"), &a));
        assert!(!if_none_match_hits(Some("\"x\""), &a));
        assert!(!if_none_match_hits(None, &a));
    }

    #[test]
    fn v2_document_encodes_as_protobuf() {
        let document = v2_document(&Registry::builtin());
        let bytes = protobuf::encode(&document).unwrap();
        assert!(bytes.len() > 1000);
    }

    #[test]
    fn index_points_at_every_group_version() {
        let registry = Registry::builtin();
        let index = index(&registry);
        for path in [
            "api/v1",
            "apis/discovery.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
            "apis/admissionregistration.k8s.io/v1",
        ] {
            let url = index["paths"][path]["serverRelativeURL"].as_str().unwrap();
            let doc_path = url
                .trim_start_matches("/openapi/v3/")
                .split('?')
                .next()
                .unwrap();
            assert!(group_version(&registry, doc_path).is_some(), "{path}");
        }
        assert!(group_version(&registry, "apis/nope/v1").is_none());
    }

    #[test]
    fn webhook_configuration_schema_is_published() {
        let doc =
            group_version(&Registry::builtin(), "apis/admissionregistration.k8s.io/v1").unwrap();
        let schemas = &doc["components"]["schemas"];
        let configuration =
            &schemas["io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration"];
        let webhooks = &configuration["properties"]["webhooks"];
        assert_eq!(
            webhooks["x-kubernetes-patch-merge-key"], "name",
            "{configuration}"
        );
        assert_eq!(webhooks["x-kubernetes-patch-strategy"], "merge");
        let client = &schemas["io.k8s.api.admissionregistration.v1.WebhookClientConfig"];
        assert_eq!(
            client["properties"]["caBundle"],
            serde_json::json!({"type": "string", "format": "byte"})
        );
        let webhook = &schemas["io.k8s.api.admissionregistration.v1.ValidatingWebhook"];
        assert_eq!(
            webhook["required"],
            serde_json::json!([
                "name",
                "clientConfig",
                "sideEffects",
                "admissionReviewVersions"
            ])
        );
    }

    #[test]
    fn patch_operations_declare_field_validation() {
        let doc = group_version(&Registry::builtin(), "api/v1").unwrap();
        let op = &doc["paths"]["/api/v1/namespaces/{namespace}/services/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Service");
        assert!(
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
        assert!(doc["paths"]["/api/v1/nodes/{name}"]["patch"].is_object());
    }

    #[test]
    fn v3_documents_carry_the_kinds_schemas_with_v3_references() {
        let doc = group_version(&Registry::builtin(), "api/v1").unwrap();
        let service = &doc["components"]["schemas"]["io.k8s.api.core.v1.Service"];
        assert_eq!(
            service["x-kubernetes-group-version-kind"][0]["kind"], "Service",
            "{service}"
        );
        assert_eq!(
            service["properties"]["spec"]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.ServiceSpec"
        );
        assert!(!doc.to_string().contains("#/definitions/"));
    }
}

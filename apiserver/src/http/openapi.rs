//! A minimal OpenAPI v3 index and per-group-version documents.
//!
//! kubectl downloads these to decide how to validate: when every PATCH operation lists the
//! `fieldValidation` query parameter it leaves validation to the server and needs no schemas;
//! without schemas, `kubectl apply` computes strategic merge patches from its compiled-in
//! types, which is what it does for built-in kinds anyway.

use serde_json::{Map, Value, json};

use super::discovery::{MAJOR, MINOR};
use crate::resources::{self, RESOURCES};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: where each group version's document lives.
pub fn index() -> Value {
    let mut paths = Map::new();
    for (group, version) in resources::group_versions() {
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
pub fn group_version(path: &str) -> Option<Value> {
    let (group, version) = match path.split('/').collect::<Vec<_>>().as_slice() {
        ["api", version] => ("", *version),
        ["apis", group, version] => (*group, *version),
        _ => return None,
    };
    let mut paths = Map::new();
    for r in RESOURCES
        .iter()
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
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_points_at_every_group_version() {
        let index = index();
        for path in [
            "api/v1",
            "apis/discovery.k8s.io/v1",
            "apis/coordination.k8s.io/v1",
        ] {
            let url = index["paths"][path]["serverRelativeURL"].as_str().unwrap();
            let doc_path = url
                .trim_start_matches("/openapi/v3/")
                .split('?')
                .next()
                .unwrap();
            assert!(group_version(doc_path).is_some(), "{path}");
        }
        assert!(group_version("apis/nope/v1").is_none());
    }

    #[test]
    fn patch_operations_declare_field_validation() {
        let doc = group_version("api/v1").unwrap();
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
}

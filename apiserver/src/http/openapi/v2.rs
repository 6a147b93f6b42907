//! The OpenAPI v2 (Swagger 2.0) document of everything served: built-in kinds from the
//! [`definitions`](super::definitions) table, custom resources from their CRD's
//! `openAPIV3Schema`, converted as kube-apiserver publishes them to v2.

use serde_json::{Map, Value, json};

use super::definitions::{self, gvk_extension, list_definition};
use crate::http::discovery::{MAJOR, MINOR};
use crate::resources::ResourceDef;

/// One served resource as the document needs it.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// URL space, scope and kind.
    pub def: &'a ResourceDef,
    /// For a custom resource, its version's `openAPIV3Schema` (`None` when the CRD has none);
    /// `None` for built-in kinds too, which the table describes.
    pub custom_schema: Option<Option<&'a Value>>,
}

/// The definition name kube-apiserver gives a custom resource: the group's labels reversed,
/// then version and kind (`com.example.stable.v1.CronTab`).
fn custom_definition_name(group: &str, version: &str, kind: &str) -> String {
    let mut labels: Vec<&str> = group.split('.').collect();
    labels.reverse();
    format!("{}.{version}.{kind}", labels.join("."))
}

/// The whole document.
pub fn document(served: &[Served<'_>]) -> Value {
    let mut definitions = definitions::all();
    let mut paths = Map::new();
    for s in served {
        let def = s.def;
        let name = match s.custom_schema {
            None => match definitions::kind_definition(def.group, def.version, def.kind) {
                Some(name) => name,
                None => {
                    // A kind added to the resource table without a definition: still served,
                    // just not described (kubectl then skips client-side validation of it).
                    tracing::debug!(kind = def.kind, "no OpenAPI v2 definition");
                    continue;
                }
            },
            Some(schema) => {
                let name = custom_definition_name(def.group, def.version, def.kind);
                definitions.insert(name.clone(), custom_schema(def, schema));
                definitions.insert(
                    format!("{name}List"),
                    list_definition(&name, def.group, def.version, def.kind),
                );
                name
            }
        };
        add_paths(&mut paths, def, &name);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": format!("v{MAJOR}.{MINOR}.0")},
        "paths": paths,
        "definitions": definitions,
    })
}

fn query(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "type": "string",
        "uniqueItems": true,
        "description": description,
    })
}

fn path_parameter(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "type": "string", "uniqueItems": true})
}

fn operation(def: &ResourceDef, verb: &str, action: &str, response: &str, writes: bool) -> Value {
    let mut parameters = Vec::new();
    if writes {
        // kubectl looks for `dryRun` on PATCH to decide whether `--dry-run=server` works.
        parameters.push(query(
            "dryRun",
            "When present, modifications are not persisted.",
        ));
        parameters.push(query(
            "fieldManager",
            "Name of the actor making the change.",
        ));
        parameters.push(query("fieldValidation", "Ignore, Warn or Strict."));
    }
    json!({
        "operationId": format!("{verb}{}", def.kind),
        "consumes": ["*/*"],
        "produces": ["application/json", "application/yaml"],
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "schema": {"$ref": format!("#/definitions/{response}")}}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": def.group, "version": def.version, "kind": def.kind},
    })
}

fn add_paths(paths: &mut Map<String, Value>, def: &ResourceDef, definition: &str) {
    let base = def.group_version_path();
    let (collection, mut parameters) = if def.namespaced {
        (
            format!("{base}/namespaces/{{namespace}}/{}", def.plural),
            vec![path_parameter("namespace")],
        )
    } else {
        (format!("{base}/{}", def.plural), vec![])
    };
    let list = format!("{definition}List");
    paths.insert(
        collection.clone(),
        json!({
            "get": operation(def, "list", "list", &list, false),
            "post": operation(def, "create", "post", definition, true),
            "parameters": parameters,
        }),
    );
    parameters.push(path_parameter("name"));
    paths.insert(
        format!("{collection}/{{name}}"),
        json!({
            "get": operation(def, "read", "get", definition, false),
            "put": operation(def, "replace", "put", definition, true),
            "patch": operation(def, "patch", "patch", definition, true),
            "delete": operation(def, "delete", "delete", definition, true),
            "parameters": parameters,
        }),
    );
}

/// JSON Schema keywords Swagger 2.0 has (and gnostic's protobuf form can carry); the others
/// (`nullable`, `oneOf`, `anyOf`, `not`, …) are dropped as kube-apiserver drops them.
const SCHEMA_KEYWORDS: &[&str] = &[
    "$ref",
    "format",
    "title",
    "description",
    "default",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "enum",
    "additionalProperties",
    "type",
    "items",
    "properties",
    "example",
];

/// A structural `openAPIV3Schema` as Swagger 2.0, the way kube-apiserver's
/// `ToStructuralOpenAPIV2` does it, so kubectl's client-side validation refuses what the
/// server would prune and nothing the server accepts:
/// - `nullable` nodes lose their type and children (v2 cannot say "or null");
/// - `x-kubernetes-preserve-unknown-fields` nodes lose their children (anything goes);
/// - an array left without items loses its type (kubectl cannot parse such an array);
/// - fields that may be null are not required.
fn to_v2(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        return json!({});
    };
    let nullable = object.get("nullable") == Some(&Value::Bool(true));
    let preserve = object.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let mut out = Map::new();
    for (key, value) in object {
        if key.starts_with("x-kubernetes-") {
            out.insert(key.clone(), value.clone());
            continue;
        }
        if !SCHEMA_KEYWORDS.contains(&key.as_str()) {
            continue;
        }
        let converted = match key.as_str() {
            "properties" | "items" | "type" if nullable => continue,
            "properties" | "items" if preserve => continue,
            "properties" => {
                let Some(properties) = value.as_object() else {
                    continue;
                };
                Value::Object(
                    properties
                        .iter()
                        .map(|(name, sub)| (name.clone(), to_v2(sub)))
                        .collect(),
                )
            }
            "items" if value.is_object() => to_v2(value),
            // A list of schemas (`items: [..]`) has no meaning for Kubernetes; drop it.
            "items" => continue,
            "additionalProperties" if value.is_object() => to_v2(value),
            "required" => {
                let properties = object.get("properties").and_then(Value::as_object);
                let may_be_null = |field: &str| {
                    properties
                        .and_then(|p| p.get(field))
                        .and_then(|f| f.get("nullable"))
                        == Some(&Value::Bool(true))
                };
                let kept: Vec<Value> = value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|f| f.as_str().is_some_and(|f| !may_be_null(f)))
                    .cloned()
                    .collect();
                if kept.is_empty() {
                    continue;
                }
                Value::Array(kept)
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    if out.get("type") == Some(&json!("array")) && !out.contains_key("items") {
        out.remove("type");
    }
    Value::Object(out)
}

/// The published definition of a custom resource version: its schema as v2, with
/// `apiVersion`, `kind` and `metadata` typed as for every kind.
fn custom_schema(def: &ResourceDef, schema: Option<&Value>) -> Value {
    let mut out = schema.map(to_v2).unwrap_or_else(|| json!({}));
    if let Some(properties) = out.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert("apiVersion".into(), json!({"type": "string"}));
        properties.insert("kind".into(), json!({"type": "string"}));
        properties.insert(
            "metadata".into(),
            json!({"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}),
        );
    }
    out["x-kubernetes-group-version-kind"] = gvk_extension(def.group, def.version, def.kind);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;

    fn builtin() -> Vec<Served<'static>> {
        RESOURCES
            .iter()
            .map(|def| Served {
                def,
                custom_schema: None,
            })
            .collect()
    }

    /// Every `$ref` names a definition and every array has items: kubectl 1.20 refuses the
    /// whole document otherwise ("unknown model in reference", "array should have exactly
    /// one sub-item").
    fn check_closed(value: &Value, definitions: &Map<String, Value>, at: &str) {
        match value {
            Value::Object(map) => {
                if let Some(reference) = map.get("$ref").and_then(Value::as_str) {
                    let name = reference.trim_start_matches("#/definitions/");
                    assert!(definitions.contains_key(name), "{at}: dangling {reference}");
                }
                if map.get("type") == Some(&json!("array")) {
                    assert!(
                        map.get("items").is_some_and(Value::is_object),
                        "{at}: array without items"
                    );
                }
                for (key, sub) in map {
                    check_closed(sub, definitions, &format!("{at}/{key}"));
                }
            }
            Value::Array(items) => {
                for (i, sub) in items.iter().enumerate() {
                    check_closed(sub, definitions, &format!("{at}/{i}"));
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_built_in_kind_is_described_and_closed() {
        let doc = document(&builtin());
        let definitions = doc["definitions"].as_object().unwrap();
        check_closed(&doc, definitions, "");
        for def in RESOURCES {
            let described = definitions.values().any(|d| {
                d["x-kubernetes-group-version-kind"]
                    == json!([{"group": def.group, "version": def.version, "kind": def.kind}])
            });
            assert!(
                described,
                "{} {} has no definition",
                def.api_version(),
                def.kind
            );
            let collection = if def.namespaced {
                format!(
                    "{}/namespaces/{{namespace}}/{}",
                    def.group_version_path(),
                    def.plural
                )
            } else {
                format!("{}/{}", def.group_version_path(), def.plural)
            };
            let patch = &doc["paths"][format!("{collection}/{{name}}")]["patch"];
            assert_eq!(
                patch["x-kubernetes-group-version-kind"]["kind"], def.kind,
                "{collection}"
            );
            assert!(
                patch["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "dryRun"),
                "{collection}"
            );
        }
    }

    #[test]
    fn patch_strategies_kubectl_apply_relies_on() {
        let doc = document(&builtin());
        let d = &doc["definitions"];
        // (definition, field, merge key, strategy) as in kube-apiserver's swagger.json.
        let cases = [
            (
                "io.k8s.api.core.v1.ServiceSpec",
                "ports",
                Some("port"),
                "merge",
            ),
            (
                "io.k8s.api.core.v1.ServiceStatus",
                "conditions",
                Some("type"),
                "merge",
            ),
            (
                "io.k8s.api.core.v1.NodeStatus",
                "addresses",
                Some("type"),
                "merge",
            ),
            (
                "io.k8s.api.core.v1.NodeStatus",
                "conditions",
                Some("type"),
                "merge",
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "ownerReferences",
                Some("uid"),
                "merge",
            ),
            (
                "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                "finalizers",
                None,
                "merge",
            ),
        ];
        for (definition, field, key, strategy) in cases {
            let schema = &d[definition]["properties"][field];
            assert_eq!(
                schema["x-kubernetes-patch-strategy"], strategy,
                "{definition}.{field}"
            );
            assert_eq!(
                schema["x-kubernetes-patch-merge-key"].as_str(),
                key,
                "{definition}.{field}"
            );
        }
        // Lists without a strategy are replaced whole, as upstream.
        let endpoints = &d["io.k8s.api.discovery.v1.EndpointSlice"]["properties"]["endpoints"];
        assert!(endpoints.get("x-kubernetes-patch-strategy").is_none());
        // Seed 002's field validates with kubectl 1.20.
        assert_eq!(
            d["io.k8s.api.core.v1.ServiceSpec"]["properties"]["topologyKeys"]["type"],
            "array"
        );
    }

    #[test]
    fn custom_resources_are_published_like_kube_apiserver_does() {
        let def = ResourceDef {
            group: "kube-lb.example.com",
            version: "v1alpha1",
            plural: "pools",
            singular: "pool",
            kind: "Pool",
            namespaced: false,
            has_status: true,
            sets_generation: true,
            short_names: &[],
            categories: &[],
        };
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["cidrs", "note"],
                    "properties": {
                        "cidrs": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
                        "note": {"type": "string", "nullable": true},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                                  "properties": {"a": {"type": "string"}}},
                        "opaque": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                                   "items": {"type": "string"}},
                        "choice": {"type": "string", "oneOf": [{"enum": ["a"]}]},
                    },
                },
            },
        });
        let doc = document(&[Served {
            def: &def,
            custom_schema: Some(Some(&schema)),
        }]);
        let definitions = doc["definitions"].as_object().unwrap();
        check_closed(&doc, definitions, "");
        let pool = &definitions["com.example.kube-lb.v1alpha1.Pool"];
        assert_eq!(
            pool["x-kubernetes-group-version-kind"],
            json!([{"group": "kube-lb.example.com", "version": "v1alpha1", "kind": "Pool"}])
        );
        let spec = &pool["properties"]["spec"];
        let cases = [
            (
                "cidrs",
                json!({"type": "array", "items": {"type": "string"}, "maxItems": 8}),
            ),
            ("note", json!({})),
            (
                "extra",
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            ),
            (
                "opaque",
                json!({"x-kubernetes-preserve-unknown-fields": true}),
            ),
            ("choice", json!({"type": "string"})),
        ];
        for (field, want) in cases {
            assert_eq!(spec["properties"][field], want, "{field}");
        }
        assert_eq!(spec["required"], json!(["cidrs"]));
        assert_eq!(pool["properties"]["kind"], json!({"type": "string"}));
        assert!(
            doc["paths"]["/apis/kube-lb.example.com/v1alpha1/pools/{name}"]["patch"].is_object()
        );
        assert!(definitions.contains_key("com.example.kube-lb.v1alpha1.PoolList"));
        // No schema: anything goes, still found by its kind.
        let doc = document(&[Served {
            def: &def,
            custom_schema: Some(None),
        }]);
        assert_eq!(
            doc["definitions"]["com.example.kube-lb.v1alpha1.Pool"],
            json!({"x-kubernetes-group-version-kind": [{"group": "kube-lb.example.com", "version": "v1alpha1", "kind": "Pool"}]})
        );
    }
}

//! The four PATCH flavours of kube-apiserver, as pure functions over JSON values.
//!
//! Strategic merge patch needs the patch strategy of every list; kube-apiserver reads it from the
//! Go struct tags. Here a small table of the lists that matter to Services, Nodes, Pods,
//! EndpointSlices, ValidatingWebhookConfigurations and object metadata stands in for those tags
//! (see [`list_strategy`]); any other list is replaced wholesale, which is also what
//! kube-apiserver does for lists without a strategy.

use serde_json::{Map, Value};

/// A patch request that cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The body is not valid JSON (or YAML for apply patches).
    #[error("the patch body is not valid {format}: {source}")]
    Syntax {
        /// What the body should have been.
        format: &'static str,
        /// The parser's complaint.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A JSON patch operation failed (missing path, failed test, ...).
    #[error("the JSON patch could not be applied: {0}")]
    JsonPatch(#[source] json_patch::PatchError),
    /// The patch is valid JSON but not of the expected shape.
    #[error("invalid patch: {0}")]
    Shape(String),
    /// The content type names no patch flavour the server knows.
    #[error("unsupported patch content type {0:?}")]
    UnsupportedType(String),
}

/// The patch flavours, chosen by the request's Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// `application/json-patch+json` (RFC 6902).
    Json,
    /// `application/merge-patch+json` (RFC 7386).
    Merge,
    /// `application/strategic-merge-patch+json`.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply).
    Apply,
}

impl PatchKind {
    /// Maps a Content-Type header (parameters ignored) to a patch kind.
    pub fn from_content_type(content_type: &str) -> Result<Self, PatchError> {
        let media = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            _ => Err(PatchError::UnsupportedType(content_type.to_string())),
        }
    }
}

/// Parses a patch body for its kind.
pub fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, PatchError> {
    match kind {
        PatchKind::Apply => {
            // JSON is YAML, so one parser covers both apply encodings; the bounded decoder
            // refuses alias bombs.
            crate::http::decode::yaml_value(body).map_err(|e| PatchError::Syntax {
                format: "YAML",
                source: e.into(),
            })
        }
        _ => serde_json::from_slice(body).map_err(|e| PatchError::Syntax {
            format: "JSON",
            source: Box::new(e),
        }),
    }
}

/// Applies a parsed patch of the given kind to a copy of `current`.
pub fn apply(kind: PatchKind, current: &Value, patch: &Value) -> Result<Value, PatchError> {
    let mut target = current.clone();
    match kind {
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| PatchError::Shape(e.to_string()))?;
            apply_json_patch(&mut target, &ops)?;
        }
        PatchKind::Merge => json_patch::merge(&mut target, patch),
        PatchKind::Strategic | PatchKind::Apply => {
            if !patch.is_object() {
                return Err(PatchError::Shape(
                    "a strategic merge or apply patch must be an object".to_string(),
                ));
            }
            strategic_merge(&mut target, patch, &mut Vec::new());
        }
    }
    Ok(target)
}

/// Most operations in one JSON patch (kube-apiserver's `maxJSONPatchOperations`).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Most bytes all `copy` operations of one JSON patch may duplicate. Each copy can double the
/// document, so without a bound 40 operations in a small body ask for terabytes;
/// kube-apiserver bounds the accumulated copy size the same way.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Deepest path a JSON patch operation may name: with values at most 128 deep (the JSON
/// parser's limit) this keeps every patched object shallow enough for recursive code.
pub const MAX_JSON_PATCH_PATH_DEPTH: usize = 64;

/// Applies RFC 6902 operations one by one (the caller's copy makes the whole patch atomic),
/// refusing patches that would amplify a small body into a huge or very deep object.
fn apply_json_patch(target: &mut Value, ops: &json_patch::Patch) -> Result<(), PatchError> {
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::Shape(format!(
            "the JSON patch has {} operations, more than the limit of {MAX_JSON_PATCH_OPERATIONS}",
            ops.0.len()
        )));
    }
    let mut copied = 0usize;
    for (i, op) in ops.0.iter().enumerate() {
        let depth = op.path().as_str().matches('/').count();
        if depth > MAX_JSON_PATCH_PATH_DEPTH {
            return Err(PatchError::Shape(format!(
                "operation {i}: the path has {depth} segments, more than the limit of \
                 {MAX_JSON_PATCH_PATH_DEPTH}"
            )));
        }
        if let json_patch::PatchOperation::Copy(copy) = op
            && let Some(source) = target.pointer(copy.from.as_str())
        {
            copied = copied.saturating_add(serde_json::to_vec(source).map_or(0, |v| v.len()));
            if copied > MAX_JSON_PATCH_COPY_BYTES {
                return Err(PatchError::Shape(format!(
                    "operation {i}: the copy operations duplicate more than \
                     {MAX_JSON_PATCH_COPY_BYTES} bytes"
                )));
            }
        }
        json_patch::patch(target, std::slice::from_ref(op)).map_err(PatchError::JsonPatch)?;
    }
    Ok(())
}

/// How a list field merges in a strategic merge patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListStrategy {
    /// The patch list replaces the old list (no strategy; kube-apiserver's default).
    Replace,
    /// Elements are maps merged by the value of this key.
    MergeByKey(&'static str),
    /// Elements are scalars; the result is the union (e.g. finalizers).
    Set,
}

/// Strategy of the list `field` found at `path` (field names from the root, indices omitted).
pub fn list_strategy(path: &[String], field: &str) -> ListStrategy {
    let parent = path.last().map(String::as_str);
    let in_container = path.iter().any(|p| {
        matches!(
            p.as_str(),
            "containers" | "initContainers" | "ephemeralContainers"
        )
    });
    match field {
        "finalizers" if parent == Some("metadata") => ListStrategy::Set,
        "ownerReferences" if parent == Some("metadata") => ListStrategy::MergeByKey("uid"),
        "conditions" => ListStrategy::MergeByKey("type"),
        "ports" if in_container => ListStrategy::MergeByKey("containerPort"),
        "ports" if parent == Some("spec") => ListStrategy::MergeByKey("port"),
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets" => ListStrategy::MergeByKey("name"),
        "volumeMounts" => ListStrategy::MergeByKey("mountPath"),
        "taints" if parent == Some("spec") => ListStrategy::MergeByKey("key"),
        "addresses" if parent == Some("status") => ListStrategy::MergeByKey("type"),
        "hostAliases" => ListStrategy::MergeByKey("ip"),
        // A ValidatingWebhookConfiguration's webhooks, and each webhook's match conditions.
        "webhooks" if parent.is_none() => ListStrategy::MergeByKey("name"),
        "matchConditions" if parent == Some("webhooks") => ListStrategy::MergeByKey("name"),
        // status.loadBalancer.ingress, tolerations, ipFamilies, clusterIPs, endpoints, ... are
        // atomic in Kubernetes.
        _ => ListStrategy::Replace,
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_PRIMITIVE_PREFIX: &str = "$deleteFromPrimitiveList/";

/// Merges a strategic merge patch map into `target` (made an object if it is not one).
pub fn strategic_merge(target: &mut Value, patch: &Value, path: &mut Vec<String>) {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    match patch_map.get(DIRECTIVE).and_then(Value::as_str) {
        Some("replace") => {
            *target = strip_directives(patch);
            return;
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut orders: Vec<(&str, &Value)> = Vec::new();
    for (key, value) in patch_map {
        if key == DIRECTIVE || key == RETAIN_KEYS {
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ORDER_PREFIX) {
            orders.push((field, value));
            continue;
        }
        if let Some(field) = key.strip_prefix(DELETE_PRIMITIVE_PREFIX) {
            if let (Some(list), Some(remove)) = (
                target.get_mut(field).and_then(Value::as_array_mut),
                value.as_array(),
            ) {
                list.retain(|item| !remove.contains(item));
            }
            continue;
        }
        let Some(map) = target.as_object_mut() else {
            return;
        };
        match value {
            Value::Null => {
                map.remove(key);
            }
            Value::Object(_) => {
                path.push(key.clone());
                let slot = map.entry(key.clone()).or_insert(Value::Null);
                strategic_merge(slot, value, path);
                path.pop();
            }
            Value::Array(items) => {
                let strategy = list_strategy(path, key);
                path.push(key.clone());
                let slot = map.entry(key.clone()).or_insert(Value::Array(Vec::new()));
                merge_list(slot, items, strategy, path);
                path.pop();
            }
            scalar => {
                map.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        let strategy = list_strategy(path, field);
        if let (Some(list), Some(order)) = (
            target.get_mut(field).and_then(Value::as_array_mut),
            order.as_array(),
        ) {
            reorder(list, order, strategy);
        }
    }
    if let Some(Value::Array(retain)) = patch_map.get(RETAIN_KEYS)
        && let Some(map) = target.as_object_mut()
    {
        let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
        map.retain(|k, _| keep.contains(&k.as_str()));
    }
}

/// Removes every `$`-prefixed directive key (recursively) from a patch fragment.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn merge_list(target: &mut Value, items: &[Value], strategy: ListStrategy, path: &mut Vec<String>) {
    let replace_all = items.iter().any(|item| {
        item.get(DIRECTIVE).and_then(Value::as_str) == Some("replace")
            && item.as_object().is_some_and(|m| m.len() == 1)
    });
    if replace_all || !target.is_array() {
        let kept: Vec<Value> = items
            .iter()
            .filter(|item| item.get(DIRECTIVE).is_none())
            .map(strip_directives)
            .collect();
        *target = Value::Array(kept);
        return;
    }
    let Some(list) = target.as_array_mut() else {
        return;
    };
    match strategy {
        ListStrategy::Replace => {
            *list = items.iter().map(strip_directives).collect();
        }
        ListStrategy::Set => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        ListStrategy::MergeByKey(key) => {
            for item in items {
                let Some(id) = item.get(key) else {
                    // Elements without the merge key cannot be matched; keep them.
                    list.push(strip_directives(item));
                    continue;
                };
                let position = list
                    .iter()
                    .position(|existing| existing.get(key) == Some(id));
                let delete = item.get(DIRECTIVE).and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(i), true) => {
                        list.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => strategic_merge(&mut list[i], item, path),
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        strategic_merge(&mut fresh, item, path);
                        list.push(fresh);
                    }
                }
            }
        }
    }
}

/// Orders `list` as `order` says (`$setElementOrder`); elements not named keep their relative
/// order after the named ones.
fn reorder(list: &mut Vec<Value>, order: &[Value], strategy: ListStrategy) {
    let key_of = |v: &Value| -> Value {
        match strategy {
            ListStrategy::MergeByKey(key) => v.get(key).cloned().unwrap_or(Value::Null),
            _ => v.clone(),
        }
    };
    let mut remaining: Vec<Value> = std::mem::take(list);
    for wanted in order {
        let wanted = key_of(wanted);
        if let Some(i) = remaining.iter().position(|v| key_of(v) == wanted) {
            list.push(remaining.remove(i));
        }
    }
    list.extend(remaining);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(current: Value, patch: Value) -> Value {
        apply(PatchKind::Strategic, &current, &patch).unwrap()
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8").unwrap(),
            PatchKind::Merge
        );
        assert_eq!(
            PatchKind::from_content_type("application/apply-patch+yaml").unwrap(),
            PatchKind::Apply
        );
        assert!(PatchKind::from_content_type("text/plain").is_err());
    }

    #[test]
    fn json_and_merge_patches() {
        let current = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"ports": [{"port": 80}]}});
        let merged = apply(
            PatchKind::Merge,
            &current,
            &json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"ports": [{"port": 81}]}}),
        )
        .unwrap();
        assert_eq!(merged["metadata"]["labels"], json!({"b": "2", "c": "3"}));
        assert_eq!(merged["spec"]["ports"], json!([{"port": 81}]));

        let patched = apply(
            PatchKind::Json,
            &current,
            &json!([{"op": "replace", "path": "/spec/ports/0/port", "value": 8080}, {"op": "add", "path": "/metadata/labels/z", "value": "9"}]),
        )
        .unwrap();
        assert_eq!(patched["spec"]["ports"][0]["port"], 8080);
        assert_eq!(patched["metadata"]["labels"]["z"], "9");
        assert!(
            apply(
                PatchKind::Json,
                &current,
                &json!([{"op": "remove", "path": "/nope"}])
            )
            .is_err()
        );
        assert!(apply(PatchKind::Json, &current, &json!({"op": "remove"})).is_err());
    }

    #[test]
    fn strategic_lists_table() {
        let cases: Vec<(&str, Value, Value, Value)> = vec![
            (
                "finalizers merge as a set",
                json!({"metadata": {"finalizers": ["a"]}}),
                json!({"metadata": {"finalizers": ["b", "a"]}}),
                json!({"metadata": {"finalizers": ["a", "b"]}}),
            ),
            (
                "finalizer removed with deleteFromPrimitiveList",
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
                json!({"metadata": {"finalizers": ["b"]}}),
            ),
            (
                "conditions merge by type",
                json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Other", "status": "True"}]}}),
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Other", "status": "True"}]}}),
            ),
            (
                "service ports merge by port",
                json!({"spec": {"ports": [{"port": 80, "nodePort": 30001, "name": "http"}]}}),
                json!({"spec": {"ports": [{"port": 80, "name": "web"}, {"port": 443, "name": "https"}]}}),
                json!({"spec": {"ports": [{"port": 80, "nodePort": 30001, "name": "web"}, {"port": 443, "name": "https"}]}}),
            ),
            (
                "port deleted by directive",
                json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}}),
                json!({"spec": {"ports": [{"port": 80, "$patch": "delete"}]}}),
                json!({"spec": {"ports": [{"port": 443}]}}),
            ),
            (
                "webhooks and their match conditions merge by name, rules are atomic",
                json!({"webhooks": [
                    {"name": "a.b.c", "timeoutSeconds": 5, "rules": [{"operations": ["CREATE"]}], "matchConditions": [{"name": "x", "expression": "true"}]},
                    {"name": "d.e.f", "timeoutSeconds": 7},
                ]}),
                json!({"webhooks": [
                    {"name": "a.b.c", "rules": [{"operations": ["DELETE"]}], "matchConditions": [{"name": "y", "expression": "false"}]},
                ]}),
                json!({"webhooks": [
                    {"name": "a.b.c", "timeoutSeconds": 5, "rules": [{"operations": ["DELETE"]}], "matchConditions": [{"name": "x", "expression": "true"}, {"name": "y", "expression": "false"}]},
                    {"name": "d.e.f", "timeoutSeconds": 7},
                ]}),
            ),
            (
                "ingress is atomic",
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}]}}}),
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "3.3.3.3"}]}}}),
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "3.3.3.3"}]}}}),
            ),
            (
                "containers by name, container ports by containerPort",
                json!({"spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "name": "http"}]}, {"name": "b", "image": "y"}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "z", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}),
                json!({"spec": {"containers": [{"name": "a", "image": "z", "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}]}, {"name": "b", "image": "y"}]}}),
            ),
            (
                "null deletes a key, nested maps merge",
                json!({"metadata": {"annotations": {"a": "1", "b": "2"}}, "spec": {"type": "LoadBalancer"}}),
                json!({"metadata": {"annotations": {"a": null}}, "spec": {"type": "ClusterIP"}}),
                json!({"metadata": {"annotations": {"b": "2"}}, "spec": {"type": "ClusterIP"}}),
            ),
            (
                "setElementOrder reorders",
                json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}}),
                json!({"spec": {"$setElementOrder/ports": [{"port": 443}, {"port": 80}], "ports": [{"port": 443, "name": "https"}]}}),
                json!({"spec": {"ports": [{"port": 443, "name": "https"}, {"port": 80}]}}),
            ),
            (
                "replace directive on a list",
                json!({"spec": {"ports": [{"port": 80}, {"port": 443}]}}),
                json!({"spec": {"ports": [{"$patch": "replace"}, {"port": 8080}]}}),
                json!({"spec": {"ports": [{"port": 8080}]}}),
            ),
            (
                "retainKeys drops other keys",
                json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
                json!({"spec": {"strategy": {"type": "Recreate"}}}),
            ),
            (
                "unknown lists replace",
                json!({"spec": {"tolerations": [{"key": "a"}]}}),
                json!({"spec": {"tolerations": [{"key": "b"}]}}),
                json!({"spec": {"tolerations": [{"key": "b"}]}}),
            ),
            (
                "node addresses merge by type",
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "n1"}]}}),
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
                json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "Hostname", "address": "n1"}]}}),
            ),
        ];
        for (name, current, patch, want) in cases {
            assert_eq!(smp(current, patch), want, "{name}");
        }
    }

    #[test]
    fn apply_patch_parses_yaml_and_merges() {
        let body = b"apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n  labels:\n    a: b\nspec:\n  ports:\n  - port: 80\n";
        let patch = parse_body(PatchKind::Apply, body).unwrap();
        let current = json!({"metadata": {"name": "web", "uid": "u"}, "spec": {"ports": [{"port": 80, "nodePort": 30000}]}});
        let out = apply(PatchKind::Apply, &current, &patch).unwrap();
        assert_eq!(out["metadata"]["uid"], "u");
        assert_eq!(out["metadata"]["labels"]["a"], "b");
        assert_eq!(out["spec"]["ports"][0]["nodePort"], 30000);
        assert!(parse_body(PatchKind::Merge, b"{").is_err());
    }
}

//! Field ownership for server-side apply, enough for the rule clients rely on: a field a
//! manager applied before and leaves out of its next apply is removed.
//!
//! The fields one apply sets are recorded per manager (and subresource) in
//! `metadata.managedFields`, in kube-apiserver's `FieldsV1` encoding (`f:<field>`,
//! `k:{<merge key>}` for keyed list elements, `v:<value>` for set elements, `.` for "the
//! element itself"). Conflicts between managers are not detected: every apply behaves as if
//! `force=true`.

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::patch::{ListStrategy, list_strategy};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// A map field.
    Field(String),
    /// A list element identified by its merge key (`port` = 80), JSON-encoded key object.
    Key(String),
    /// A set element (finalizers), JSON-encoded value.
    Value(String),
}

/// A path from the object root; the set of them is what one apply owns.
pub type FieldPath = Vec<Step>;

/// Fields that identify the object rather than belong to an applier.
fn is_identity(path: &[Step]) -> bool {
    matches!(path, [Step::Field(f)] if f == "apiVersion" || f == "kind")
        || matches!(path, [Step::Field(m), Step::Field(f)]
            if m == "metadata" && matches!(f.as_str(), "name" | "namespace" | "resourceVersion" | "managedFields" | "uid"))
}

/// The leaf fields and list elements an applied configuration sets.
pub fn applied_fields(applied: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    collect(applied, &mut Vec::new(), &mut Vec::new(), &mut out);
    out.retain(|p| !is_identity(p));
    out
}

fn collect(
    value: &Value,
    names: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut BTreeSet<FieldPath>,
) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, child) in map {
                if key.starts_with('$') {
                    continue;
                }
                path.push(Step::Field(key.clone()));
                match child {
                    Value::Array(items) => collect_list(items, key, names, path, out),
                    _ => {
                        names.push(key.clone());
                        collect(child, names, path, out);
                        names.pop();
                    }
                }
                path.pop();
            }
        }
        _ => {
            out.insert(path.clone());
        }
    }
}

fn collect_list(
    items: &[Value],
    field: &str,
    names: &mut Vec<String>,
    path: &mut FieldPath,
    out: &mut BTreeSet<FieldPath>,
) {
    match list_strategy(names, field) {
        ListStrategy::MergeByKey(key) => {
            names.push(field.to_string());
            for item in items {
                let Some(id) = item.get(key) else {
                    continue;
                };
                let mut key_obj = Map::new();
                key_obj.insert(key.to_string(), id.clone());
                path.push(Step::Key(Value::Object(key_obj).to_string()));
                out.insert(path.clone());
                collect(item, names, path, out);
                path.pop();
            }
            names.pop();
        }
        ListStrategy::Set => {
            for item in items {
                path.push(Step::Value(item.to_string()));
                out.insert(path.clone());
                path.pop();
            }
        }
        ListStrategy::Replace => {
            out.insert(path.clone());
        }
    }
}

/// Removes `path` from `object` (a keyed element or set value disappears from its list).
pub fn remove(object: &mut Value, path: &[Step]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for step in parents {
        let next = match (step, current) {
            (Step::Field(f), Value::Object(map)) => map.get_mut(f),
            (Step::Key(k), Value::Array(items)) => {
                let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                items
                    .iter_mut()
                    .find(|item| key.iter().all(|(kk, kv)| item.get(kk) == Some(kv)))
            }
            _ => None,
        };
        match next {
            Some(n) => current = n,
            None => return,
        }
    }
    match (last, current) {
        (Step::Field(f), Value::Object(map)) => {
            map.remove(f);
        }
        (Step::Key(k), Value::Array(items)) => {
            let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            items.retain(|item| !key.iter().all(|(kk, kv)| item.get(kk) == Some(kv)));
        }
        (Step::Value(v), Value::Array(items)) => {
            let value: Value = serde_json::from_str(v).unwrap_or(Value::Null);
            items.retain(|item| *item != value);
        }
        _ => {}
    }
}

/// Encodes a field set as `FieldsV1`.
pub fn encode(fields: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for step in path {
            let key = match step {
                Step::Field(f) => format!("f:{f}"),
                Step::Key(k) => format!("k:{k}"),
                Step::Value(v) => format!("v:{v}"),
            };
            let entry = node.entry(key).or_insert_with(|| json!({}));
            if !entry.is_object() {
                *entry = json!({});
            }
            node = match entry {
                Value::Object(m) => m,
                _ => return Value::Object(root),
            };
        }
        node.insert(".".to_string(), json!({}));
    }
    let mut encoded = Value::Object(root);
    drop_leaf_markers(&mut encoded);
    encoded
}

/// A leaf is written `{}`; only nodes with children need `.` to say they are owned themselves.
fn drop_leaf_markers(node: &mut Value) {
    if let Value::Object(map) = node {
        if map.len() == 1 && map.contains_key(".") {
            map.clear();
        }
        for child in map.values_mut() {
            drop_leaf_markers(child);
        }
    }
}

/// Decodes `FieldsV1` (as written by [`encode`]) back into paths.
pub fn decode(fields: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    decode_into(fields, &mut Vec::new(), &mut out);
    out
}

fn decode_into(node: &Value, path: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(map) = node.as_object() else {
        return;
    };
    if !path.is_empty() && (map.is_empty() || map.contains_key(".")) {
        out.insert(path.clone());
    }
    for (key, child) in map {
        let step = if let Some(f) = key.strip_prefix("f:") {
            Step::Field(f.to_string())
        } else if let Some(k) = key.strip_prefix("k:") {
            Step::Key(k.to_string())
        } else if let Some(v) = key.strip_prefix("v:") {
            Step::Value(v.to_string())
        } else {
            continue;
        };
        path.push(step);
        decode_into(child, path, out);
        path.pop();
    }
}

/// The fields `manager` owns through `subresource` (`""` for the main resource).
pub fn owned(object: &Value, manager: &str, subresource: &str) -> BTreeSet<FieldPath> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .and_then(|entries| {
            entries.iter().find(|e| {
                e.get("manager").and_then(Value::as_str) == Some(manager)
                    && e.get("operation").and_then(Value::as_str) == Some("Apply")
                    && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource
            })
        })
        .and_then(|e| e.get("fieldsV1"))
        .map(decode)
        .unwrap_or_default()
}

/// Forced apply semantics: fields this apply sets stop belonging to other appliers, so their
/// next apply without those fields does not remove them.
fn take_over(object: &mut Value, manager: &str, taken: &BTreeSet<FieldPath>) {
    let Some(Value::Array(entries)) = object.pointer_mut("/metadata/managedFields") else {
        return;
    };
    for entry in entries.iter_mut() {
        if entry.get("manager").and_then(Value::as_str) == Some(manager)
            || entry.get("operation").and_then(Value::as_str) != Some("Apply")
        {
            continue;
        }
        let Some(fields) = entry.get("fieldsV1") else {
            continue;
        };
        let owned = decode(fields);
        if owned.is_disjoint(taken) {
            continue;
        }
        let kept: BTreeSet<FieldPath> = owned.difference(taken).cloned().collect();
        entry["fieldsV1"] = encode(&kept);
    }
}

/// Records what `manager` owns after an apply.
pub fn record(
    object: &mut Value,
    manager: &str,
    subresource: &str,
    api_version: &str,
    fields: &BTreeSet<FieldPath>,
) {
    let mut entry = json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": crate::meta::now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": encode(fields),
    });
    if !subresource.is_empty() {
        entry["subresource"] = json!(subresource);
    }
    let meta = crate::meta::metadata_mut(object);
    let list = meta
        .entry("managedFields")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(entries) = list {
        // Re-applying the same fields keeps the entry (and its time) as it was, so a no-op
        // apply stays a no-op and bumps no resourceVersion.
        let unchanged = entries.iter().any(|e| {
            e.get("manager") == entry.get("manager")
                && e.get("operation") == entry.get("operation")
                && e.get("subresource") == entry.get("subresource")
                && e.get("apiVersion") == entry.get("apiVersion")
                && e.get("fieldsV1") == entry.get("fieldsV1")
        });
        if unchanged {
            return;
        }
        entries.retain(|e| {
            !(e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource)
        });
        entries.push(entry);
    }
}

/// Server-side apply of `applied` by `manager` onto `current`: merge, then drop what the
/// manager applied last time but no longer does, then record the new ownership.
pub fn apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    subresource: &str,
    api_version: &str,
) -> Result<Value, crate::patch::PatchError> {
    let mut next = crate::patch::apply(crate::patch::PatchKind::Apply, current, applied)?;
    let now = applied_fields(applied);
    let before = owned(current, manager, subresource);
    // Shortest paths first: a keyed element is found by its key before its leaves (the key
    // among them) are removed.
    let mut stale: Vec<&FieldPath> = before.difference(&now).collect();
    stale.sort_by_key(|p| p.len());
    for path in stale {
        // A keyed element still named by the new apply keeps existing; only its stale
        // leaves go.
        if now.iter().any(|p| p.starts_with(path)) {
            continue;
        }
        remove(&mut next, path);
    }
    take_over(&mut next, manager, &now);
    record(&mut next, manager, subresource, api_version, &now);
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let applied = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "labels": {"a": "1"}, "finalizers": ["x/y"]},
            "spec": {"ports": [{"port": 80, "name": "http"}], "selector": {"app": "web"}, "ipFamilies": ["IPv4"]}});
        let fields = applied_fields(&applied);
        assert!(fields.contains(&vec![
            Step::Field("metadata".into()),
            Step::Field("labels".into()),
            Step::Field("a".into())
        ]));
        assert!(
            !fields
                .iter()
                .any(|p| p == &vec![Step::Field("kind".into())])
        );
        let encoded = encode(&fields);
        assert_eq!(
            encoded["f:spec"]["f:ports"]["k:{\"port\":80}"]["f:name"],
            json!({})
        );
        assert_eq!(
            encoded["f:spec"]["f:ports"]["k:{\"port\":80}"]["."],
            json!({})
        );
        assert!(encoded["f:metadata"]["f:finalizers"]["v:\"x/y\""].is_object());
        assert_eq!(decode(&encoded), fields);
    }

    #[test]
    fn second_apply_removes_what_it_dropped() {
        let first = json!({"metadata": {"name": "web", "labels": {"a": "1", "b": "2"}},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}},
            "spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
        let current = json!({"metadata": {"name": "web", "labels": {"other": "kept"}},
            "spec": {"ports": [{"port": 80, "nodePort": 30001}], "type": "ClusterIP"}});
        let after_first = apply(&current, &first, "ctl", "", "v1").unwrap();
        assert_eq!(
            after_first["metadata"]["labels"],
            json!({"other": "kept", "a": "1", "b": "2"})
        );
        assert_eq!(after_first["spec"]["ports"].as_array().unwrap().len(), 2);

        let second = json!({"metadata": {"name": "web", "labels": {"a": "1"}},
            "status": {"loadBalancer": {}},
            "spec": {"ports": [{"port": 80}]}});
        let after_second = apply(&after_first, &second, "ctl", "", "v1").unwrap();
        assert_eq!(
            after_second["metadata"]["labels"],
            json!({"other": "kept", "a": "1"})
        );
        assert_eq!(after_second["status"]["loadBalancer"], json!({}));
        let ports = after_second["spec"]["ports"].as_array().unwrap();
        assert_eq!(ports.len(), 1, "{ports:?}");
        assert_eq!(
            ports[0],
            json!({"port": 80, "nodePort": 30001}),
            "name dropped, nodePort kept"
        );
        assert_eq!(after_second["spec"]["type"], "ClusterIP");

        // Another manager's apply does not remove the first one's fields.
        let other = json!({"metadata": {"name": "web", "annotations": {"x": "y"}}});
        let after_other = apply(&after_second, &other, "someone-else", "", "v1").unwrap();
        assert_eq!(after_other["metadata"]["labels"]["a"], "1");
        assert_eq!(
            after_other["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );

        // The same apply again changes nothing at all (no new time stamp either).
        let again = apply(&after_other, &other, "someone-else", "", "v1").unwrap();
        assert_eq!(again, after_other);

        // A field another manager applied changes hands: the first manager dropping it later
        // does not remove it.
        let takeover = json!({"metadata": {"name": "web", "labels": {"a": "mine"}}});
        let taken = apply(&after_other, &takeover, "third", "", "v1").unwrap();
        let ctl_drops_a = json!({"metadata": {"name": "web"}, "status": {"loadBalancer": {}},
            "spec": {"ports": [{"port": 80}]}});
        let after_drop = apply(&taken, &ctl_drops_a, "ctl", "", "v1").unwrap();
        assert_eq!(after_drop["metadata"]["labels"]["a"], "mine");
    }
}

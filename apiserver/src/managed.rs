//! Field ownership for server-side apply, enough for the rule clients rely on: a field a
//! manager applied before and leaves out of its next apply is removed.
//!
//! The fields one apply sets are recorded per manager (and subresource) in
//! `metadata.managedFields`, in kube-apiserver's `FieldsV1` encoding (`f:<field>`,
//! `k:{<merge key>}` for keyed list elements, `v:<value>` for set elements, `.` for "the
//! element itself"). Setting a field another manager owns to a different value is a conflict
//! (409 unless `force=true`, which takes the field over); setting it to the same value shares
//! ownership, as structured-merge-diff does.

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
                let Some(key_obj) = element_key(item, key) else {
                    continue;
                };
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

/// The identity of a keyed list element. Port lists are keyed by port and protocol (as the
/// Kubernetes schema's `listMapKeys` say), the protocol defaulting to TCP.
fn element_key(item: &Value, key: &str) -> Option<Map<String, Value>> {
    let id = item.get(key)?;
    let mut key_obj = Map::new();
    key_obj.insert(key.to_string(), id.clone());
    if matches!(key, "port" | "containerPort") {
        let protocol = item
            .get("protocol")
            .filter(|p| p.is_string())
            .cloned()
            .unwrap_or_else(|| json!("TCP"));
        key_obj.insert("protocol".to_string(), protocol);
    }
    Some(key_obj)
}

/// Whether a list element has the identity `key` (a missing port protocol is TCP).
fn key_matches(item: &Value, key: &Map<String, Value>) -> bool {
    key.iter().all(|(k, v)| match item.get(k) {
        Some(found) => found == v,
        None => k == "protocol" && v == "TCP",
    })
}

/// The value at `path`, if present.
fn lookup<'a>(object: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut current = object;
    for step in path {
        current = match (step, current) {
            (Step::Field(f), Value::Object(map)) => map.get(f)?,
            (Step::Key(k), Value::Array(items)) => {
                let key: Map<String, Value> = serde_json::from_str(k).ok()?;
                items.iter().find(|item| key_matches(item, &key))?
            }
            (Step::Value(v), Value::Array(items)) => {
                let value: Value = serde_json::from_str(v).ok()?;
                items.iter().find(|item| **item == value)?
            }
            _ => return None,
        };
    }
    Some(current)
}

/// structured-merge-diff's path notation: `.spec.ports[port=80,protocol="TCP"].targetPort`.
pub fn path_string(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Step::Key(k) => {
                let key: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
                let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", parts.join(",")));
            }
            Step::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

/// A field another manager owns that an apply would set to a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owning manager.
    pub manager: String,
    /// The contested field.
    pub path: FieldPath,
}

/// Managers other than (`manager`, `subresource`, Apply) and the fields each owns.
fn other_owners(
    object: &Value,
    manager: &str,
    subresource: &str,
) -> Vec<(String, BTreeSet<FieldPath>)> {
    object
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| {
            !(e.get("manager").and_then(Value::as_str) == Some(manager)
                && e.get("operation").and_then(Value::as_str) == Some("Apply")
                && e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource)
        })
        .filter_map(|e| {
            let name = e.get("manager").and_then(Value::as_str)?.to_string();
            Some((name, e.get("fieldsV1").map(decode).unwrap_or_default()))
        })
        .collect()
}

/// The conflicts an apply of `applied` by `manager` would cause on `current`: leaf fields
/// other managers own whose applied value differs from the stored one. Sorted by manager,
/// then path.
pub fn conflicts(
    current: &Value,
    applied: &Value,
    manager: &str,
    subresource: &str,
) -> Vec<Conflict> {
    let wanted = applied_fields(applied);
    let mut out = Vec::new();
    for (owner, owned) in other_owners(current, manager, subresource) {
        for path in wanted.intersection(&owned) {
            // A keyed element or set value only asserts existence; its leaves decide.
            if matches!(path.last(), Some(Step::Key(_) | Step::Value(_))) {
                continue;
            }
            let new = lookup(applied, path);
            if new.is_some_and(|v| v.is_object() && v.as_object().is_some_and(|m| !m.is_empty())) {
                continue;
            }
            if lookup(current, path) != new {
                out.push(Conflict {
                    manager: owner.clone(),
                    path: path.clone(),
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.manager, &a.path).cmp(&(&b.manager, &b.path)));
    out.dedup();
    out
}

/// kube-apiserver's 409 for apply conflicts: `Apply failed with 1 conflict: conflict with
/// "manager-a": .spec.replicas`, one `FieldManagerConflict` cause per field.
pub fn conflict_error(conflicts: &[Conflict]) -> crate::status::ApiError {
    let message = match conflicts {
        [one] => format!(
            "Apply failed with 1 conflict: conflict with {:?}: {}",
            one.manager,
            path_string(&one.path)
        ),
        many => {
            let mut lines = Vec::new();
            let mut last: Option<&str> = None;
            for c in many {
                if last != Some(c.manager.as_str()) {
                    lines.push(format!("conflicts with {:?}:", c.manager));
                    last = Some(c.manager.as_str());
                }
                lines.push(format!("- {}", path_string(&c.path)));
            }
            format!(
                "Apply failed with {} conflicts: {}",
                many.len(),
                lines.join("\n")
            )
        }
    };
    let mut error = crate::status::ApiError::bad_request(message);
    error.code = 409;
    error.reason = "Conflict";
    error.details.causes = conflicts
        .iter()
        .map(|c| crate::status::Cause {
            reason: "FieldManagerConflict",
            message: format!("conflict with {:?}", c.manager),
            field: path_string(&c.path),
        })
        .collect();
    error
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
                items.iter_mut().find(|item| key_matches(item, &key))
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
            items.retain(|item| !key_matches(item, &key));
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

/// Forced apply semantics: contested fields this apply sets stop belonging to their other
/// owners, so their next apply without those fields does not remove them.
fn take_over(object: &mut Value, manager: &str, taken: &BTreeSet<FieldPath>) {
    if taken.is_empty() {
        return;
    }
    let Some(Value::Array(entries)) = object.pointer_mut("/metadata/managedFields") else {
        return;
    };
    for entry in entries.iter_mut() {
        if entry.get("manager").and_then(Value::as_str) == Some(manager) {
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
    // A manager left owning nothing is dropped, as structured-merge-diff's Updater removes
    // empty managers (sigs.k8s.io/structured-merge-diff merge/update.go).
    entries.retain(|entry| {
        entry.get("manager").and_then(Value::as_str) == Some(manager)
            || entry
                .get("fieldsV1")
                .is_none_or(|fields| !decode(fields).is_empty())
    });
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

/// Server-side apply of `applied` by `manager` onto `current` with `force` semantics (the
/// caller refuses [`conflicts`] first when the client did not force): merge, then drop what
/// the manager applied last time, no longer does and nobody else owns, then take contested
/// fields over and record the new ownership.
pub fn apply(
    current: &Value,
    applied: &Value,
    manager: &str,
    subresource: &str,
    api_version: &str,
) -> Result<Value, crate::patch::PatchError> {
    let contested: BTreeSet<FieldPath> = conflicts(current, applied, manager, subresource)
        .into_iter()
        .map(|c| c.path)
        .collect();
    let mut next = crate::patch::apply(crate::patch::PatchKind::Apply, current, applied)?;
    let now = applied_fields(applied);
    let before = owned(current, manager, subresource);
    let others: Vec<BTreeSet<FieldPath>> = other_owners(current, manager, subresource)
        .into_iter()
        .map(|(_, owned)| owned)
        .collect();
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
        // A field someone else still owns stays (it is theirs now).
        if others.iter().any(|o| o.contains(path)) {
            continue;
        }
        remove(&mut next, path);
    }
    take_over(&mut next, manager, &contested);
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
            encoded["f:spec"]["f:ports"]["k:{\"port\":80,\"protocol\":\"TCP\"}"]["f:name"],
            json!({})
        );
        assert_eq!(
            encoded["f:spec"]["f:ports"]["k:{\"port\":80,\"protocol\":\"TCP\"}"]["."],
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

    #[test]
    fn conflicts_between_managers() {
        let a = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "web"}}});
        let base = json!({"metadata": {"name": "web"}, "spec": {"type": "ClusterIP"}});
        let after_a = apply(&base, &a, "manager-a", "", "v1").unwrap();

        // (what, manager-b's apply, expected conflicting paths)
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            (
                "different target port",
                json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
                vec![".spec.ports[port=80,protocol=\"TCP\"].targetPort"],
            ),
            (
                "same values are shared, not contested",
                json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}], "selector": {"app": "web"}}}),
                vec![],
            ),
            (
                "a field nobody owns",
                json!({"spec": {"sessionAffinity": "ClientIP"}}),
                vec![],
            ),
            (
                "two fields",
                json!({"spec": {"ports": [{"port": 80, "targetPort": 1}], "selector": {"app": "other"}}}),
                vec![
                    ".spec.ports[port=80,protocol=\"TCP\"].targetPort",
                    ".spec.selector.app",
                ],
            ),
        ];
        for (what, b, want) in cases {
            let found: Vec<String> = conflicts(&after_a, &b, "manager-b", "")
                .iter()
                .map(|c| {
                    assert_eq!(c.manager, "manager-a");
                    path_string(&c.path)
                })
                .collect();
            assert_eq!(found, want, "{what}");
        }

        let one = conflicts(
            &after_a,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            "manager-b",
            "",
        );
        let status = conflict_error(&one).to_status();
        assert_eq!(status["code"], 409);
        assert_eq!(status["reason"], "Conflict");
        assert_eq!(
            status["message"],
            "Apply failed with 1 conflict: conflict with \"manager-a\": .spec.ports[port=80,protocol=\"TCP\"].targetPort"
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldManagerConflict"
        );
        assert_eq!(
            status["details"]["causes"][0]["message"],
            "conflict with \"manager-a\""
        );
        let two = conflicts(
            &after_a,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 1}], "selector": {"app": "x"}}}),
            "manager-b",
            "",
        );
        assert_eq!(
            conflict_error(&two).message,
            "Apply failed with 2 conflicts: conflicts with \"manager-a\":\n- .spec.ports[port=80,protocol=\"TCP\"].targetPort\n- .spec.selector.app"
        );

        // Forcing takes the contested field over: A's later apply without it leaves it alone.
        let forced = apply(
            &after_a,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            "manager-b",
            "",
            "v1",
        )
        .unwrap();
        assert_eq!(forced["spec"]["ports"][0]["targetPort"], 9090);
        let a_owns = owned(&forced, "manager-a", "");
        assert!(
            !a_owns
                .iter()
                .any(|p| path_string(p).ends_with("targetPort"))
        );
        let a_again = json!({"spec": {"selector": {"app": "web"}}});
        let after = apply(&forced, &a_again, "manager-a", "", "v1").unwrap();
        assert_eq!(
            after["spec"]["ports"][0]["targetPort"], 9090,
            "B's field survives"
        );
        // Shared ownership: a field both set survives one of them dropping it.
        let shared = apply(
            &after_a,
            &json!({"spec": {"selector": {"app": "web"}}}),
            "manager-b",
            "",
            "v1",
        )
        .unwrap();
        let a_drops = apply(
            &shared,
            &json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}]}}),
            "manager-a",
            "",
            "v1",
        )
        .unwrap();
        assert_eq!(a_drops["spec"]["selector"]["app"], "web");
    }
}

//! Structural `openAPIV3Schema` operations on custom objects, in kube-apiserver's order:
//! prune unknown fields, apply defaults, validate.
//!
//! Supported keywords: `type`, `properties`, `additionalProperties`, `items`, `required`,
//! `enum`, `default`, `nullable`, `minimum`/`maximum` (with `exclusive*`), `minLength`/
//! `maxLength`, `minItems`/`maxItems`, `pattern`, `x-kubernetes-preserve-unknown-fields`,
//! `x-kubernetes-int-or-string`, `x-kubernetes-embedded-resource` and
//! `x-kubernetes-list-type: set|map` uniqueness. `format` and CEL rules
//! (`x-kubernetes-validations`) are not evaluated.

use serde_json::{Map, Value};

use crate::status::Cause;

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn embedded(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Fields an object keeps whatever its schema says: the type and object metadata at the root
/// and in embedded resources.
const ALWAYS_KEPT: &[&str] = &["apiVersion", "kind", "metadata"];

/// Removes fields the schema does not specify, except under
/// `x-kubernetes-preserve-unknown-fields`. `root` keeps `apiVersion`, `kind`, `metadata`.
pub fn prune(value: &mut Value, schema: &Value, root: bool) {
    prune_at(value, schema, root, "", &mut Vec::new());
}

/// [`prune`] of a whole object, returning the paths of what it removed (`spec.items[0].x`), as
/// kube-apiserver's field validation names the unknown fields of a custom resource.
pub fn pruned_fields(object: &mut Value, schema: &Value) -> Vec<String> {
    let mut removed = Vec::new();
    prune_at(object, schema, true, "", &mut removed);
    removed
}

fn prune_at(value: &mut Value, schema: &Value, root: bool, path: &str, removed: &mut Vec<String>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keep_unknown =
                preserves_unknown(schema) || additional.and_then(Value::as_bool) == Some(true);
            let keeps_meta = root || embedded(schema);
            map.retain(|key, _| {
                let kept = keep_unknown
                    || properties.is_some_and(|p| p.contains_key(key))
                    || additional.is_some_and(Value::is_object)
                    || (keeps_meta && ALWAYS_KEPT.contains(&key.as_str()));
                if !kept {
                    removed.push(join(key));
                }
                kept
            });
            for (key, child) in map.iter_mut() {
                if keeps_meta && ALWAYS_KEPT.contains(&key.as_str()) {
                    continue;
                }
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.filter(|a| a.is_object()));
                if let Some(child_schema) = child_schema {
                    prune_at(child, child_schema, false, &join(key), removed);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune_at(
                        item,
                        item_schema,
                        false,
                        &format!("{path}[{index}]"),
                        removed,
                    );
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default`s of absent fields, recursively.
pub fn apply_defaults(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child_schema) in properties {
                    let absent = map.get(key).is_none_or(|v| {
                        v.is_null()
                            && child_schema.get("nullable").and_then(Value::as_bool) != Some(true)
                    });
                    if absent && let Some(default) = child_schema.get("default") {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        apply_defaults(child, child_schema);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let known = schema.get("properties").and_then(Value::as_object);
                for (key, child) in map.iter_mut() {
                    if known.is_none_or(|k| !k.contains_key(key)) {
                        apply_defaults(child, additional);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn rendered(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn invalid(field: &str, shown: &str, detail: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {shown}: {detail}"),
        field: field.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Checks `value` against `schema`; `path` is the field path of `value` (empty at the root).
pub fn validate(value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && let Some(expected) = schema.get("type").and_then(Value::as_str)
        {
            causes.push(invalid(
                path,
                "\"null\"",
                format!("{at} in body must be of type {expected}: \"null\""),
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let actual = type_name(value);
    if int_or_string {
        if !matches!(actual, "integer" | "string") {
            causes.push(invalid(
                path,
                &format!("{actual:?}"),
                format!("{at} in body must be of type integer,string: {actual:?}"),
            ));
            return;
        }
    } else if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let fits = expected == actual || (expected == "number" && actual == "integer");
        if !fits {
            causes.push(invalid(
                path,
                &format!("{actual:?}"),
                format!("{at} in body must be of type {expected}: {actual:?}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(rendered).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {}: supported values: {}",
                rendered(value),
                list.join(", ")
            ),
            field: path.to_string(),
        });
    }
    match value {
        Value::Number(n) => check_number(n.as_f64().unwrap_or(0.0), value, schema, path, causes),
        Value::String(s) => check_string(s, schema, path, causes),
        Value::Array(items) => {
            check_items(items, schema, path, causes);
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(item, item_schema, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => check_object(map, schema, path, causes),
        _ => {}
    }
}

fn check_number(n: f64, value: &Value, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let flag = |key: &str| schema.get(key).and_then(Value::as_bool) == Some(true);
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let (bad, words) = if flag("exclusiveMinimum") {
            (n <= min, "greater than")
        } else {
            (n < min, "greater than or equal to")
        };
        if bad {
            causes.push(invalid(
                path,
                &value.to_string(),
                format!("{at} in body should be {words} {}", schema["minimum"]),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let (bad, words) = if flag("exclusiveMaximum") {
            (n >= max, "less than")
        } else {
            (n > max, "less than or equal to")
        };
        if bad {
            causes.push(invalid(
                path,
                &value.to_string(),
                format!("{at} in body should be {words} {}", schema["maximum"]),
            ));
        }
    }
}

fn check_string(s: &str, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = if path.is_empty() { "<root>" } else { path };
    let length = s.chars().count();
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && length as u64 > max
    {
        causes.push(Cause::too_long(
            path,
            usize::try_from(max).unwrap_or(usize::MAX),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && (length as u64) < min
    {
        causes.push(invalid(
            path,
            &format!("{s:?}"),
            format!("{at} in body should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        match regex::Regex::new(pattern) {
            Ok(re) if !re.is_match(s) => causes.push(invalid(
                path,
                &format!("{s:?}"),
                format!("{at} in body should match '{pattern}'"),
            )),
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(pattern, %error, "CRD schema pattern does not compile; not checked");
            }
        }
    }
}

fn check_items(items: &[Value], schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = if path.is_empty() { "<root>" } else { path };
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && items.len() as u64 > max
    {
        causes.push(Cause {
            reason: "FieldValueTooMany",
            message: format!("Too many: {}: must have at most {max} items", items.len()),
            field: path.to_string(),
        });
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        causes.push(invalid(
            path,
            &items.len().to_string(),
            format!("{at} in body should have at least {min} items"),
        ));
    }
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            for (i, item) in items.iter().enumerate() {
                if items[..i].contains(item) {
                    causes.push(Cause::duplicate(format!("{path}[{i}]"), &rendered(item)));
                }
            }
        }
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let key_of = |item: &Value| -> Vec<Value> {
                keys.iter()
                    .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
                    .collect()
            };
            for (i, item) in items.iter().enumerate() {
                let key = key_of(item);
                if items[..i].iter().any(|other| key_of(other) == key) {
                    let shown = keys
                        .iter()
                        .zip(&key)
                        .map(|(k, v)| format!("\"{k}\":{v}"))
                        .collect::<Vec<_>>()
                        .join(",");
                    causes.push(Cause::duplicate(
                        format!("{path}[{i}]"),
                        &format!("map[{shown}]"),
                    ));
                }
            }
        }
        _ => {}
    }
}

fn check_object(map: &Map<String, Value>, schema: &Value, path: &str, causes: &mut Vec<Cause>) {
    for required in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if map.get(required).is_none_or(Value::is_null) {
            causes.push(Cause::required(join(path, required)));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let keeps_meta = path.is_empty() || embedded(schema);
    for (key, child) in map {
        // Object metadata is validated as ObjectMeta, not by the CRD's schema.
        if keeps_meta && key == "metadata" {
            continue;
        }
        let child_path = join(path, key);
        if let Some(child_schema) = properties.and_then(|p| p.get(key)) {
            validate(child, child_schema, &child_path, causes);
        } else if let Some(child_schema) = additional {
            validate(child, child_schema, &child_path, causes);
        }
    }
}

/// Prune, default and validate a whole custom object against its version's schema.
pub fn admit(object: &mut Value, schema: &Value) -> Vec<Cause> {
    prune(object, schema, true);
    apply_defaults(object, schema);
    let mut causes = Vec::new();
    validate(object, schema, "", &mut causes);
    causes
}

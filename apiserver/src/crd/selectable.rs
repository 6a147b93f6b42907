//! Validation of a CRD version's `selectableFields` (GA in kube 1.32), as
//! apiextensions-apiserver's `ValidateCustomResourceSelectableFields` does: each `jsonPath`
//! must resolve, through the version's `openAPIV3Schema`, to a string, boolean or integer
//! field outside `metadata` (whose name and namespace are selectable already), without array
//! notation; paths are unique and a version has at most [`MAX_SELECTABLE_FIELDS`].
//!
//! Paths are resolved as `cel.ValidFieldPath` resolves them (with array notation refused), so
//! a 422 carries upstream's field paths and messages.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::status::Cause;

/// Upstream's `MaxSelectableFields`.
pub const MAX_SELECTABLE_FIELDS: usize = 8;

const NOT_A_FIELD: &str = "does not refer to a valid field";

/// The causes of a 422 for the `selectableFields` of one version. `at` is the list's field
/// path (`spec.versions[0].selectableFields`); `schema` the version's `openAPIV3Schema`.
pub fn validate(selectable: &[Value], schema: Option<&Value>, at: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if selectable.is_empty() {
        return causes;
    }
    let Some(schema) = schema.filter(|s| !s.is_null()) else {
        // Upstream's wording, "not included" included.
        causes.push(Cause::invalid(
            at,
            "",
            "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
        ));
        return causes;
    };
    let mut unique = BTreeSet::new();
    for (i, field) in selectable.iter().enumerate() {
        let path_field = format!("{at}[{i}].jsonPath");
        let json_path = field.get("jsonPath").and_then(Value::as_str).unwrap_or("");
        if json_path.is_empty() {
            causes.push(Cause::required(path_field));
            continue;
        }
        let resolved = match resolve(json_path, schema) {
            Ok(resolved) => resolved,
            Err(why) => {
                causes.push(Cause::invalid(
                    path_field,
                    json_path,
                    &format!("is an invalid path: {why}"),
                ));
                continue;
            }
        };
        if resolved.root == "metadata" {
            causes.push(Cause::invalid(
                path_field.clone(),
                json_path,
                "must not point to fields in metadata",
            ));
        }
        let scalar = resolved
            .schema
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| matches!(t, "string" | "boolean" | "integer"));
        if !scalar {
            causes.push(Cause::invalid(
                path_field.clone(),
                json_path,
                "must point to a field of type string, boolean or integer. Enum string fields \
                 and strings with formats are allowed.",
            ));
        }
        if !unique.insert(resolved.path) {
            causes.push(Cause::duplicate(path_field, json_path));
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        causes.push(Cause::too_many(at, unique.len(), MAX_SELECTABLE_FIELDS));
    }
    causes
}

/// Where a valid path leads.
#[derive(Debug, PartialEq)]
struct Resolved<'a> {
    /// The path as upstream's `field.Path` prints it (`spec.labels[app]`): duplicates are
    /// judged on this, so `.spec.a` and `.spec['a']`-like spellings would collide.
    path: String,
    /// The first field name (`spec`).
    root: String,
    /// The schema the path ends at; `None` past an `additionalProperties: true`.
    schema: Option<&'a Value>,
}

/// Splits a JSON path into `.`, `[` and `]` and the text between them; a part that starts with
/// a single quote runs to the next one, delimiters included.
fn tokens(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = path;
    while let Some(first) = rest.chars().next() {
        let end = match first {
            '.' | '[' | ']' => 1,
            '\'' => rest[1..].find('\'').map_or(rest.len(), |j| j + 2),
            _ => rest.find(['.', '[', ']']).unwrap_or(rest.len()),
        };
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    out
}

/// `cel.ValidFieldPath` with `WithFieldPathAllowArrayNotation(false)`.
fn resolve<'a>(json_path: &str, root: &'a Value) -> Result<Resolved<'a>, String> {
    let mut schema = Some(root);
    let mut path = String::new();
    let mut first = None;
    let mut parts = tokens(json_path).into_iter();
    while let Some(token) = parts.next() {
        match token {
            "." => {
                let name = parts.next().ok_or("unexpected end of JSON path")?;
                let current = schema.ok_or(NOT_A_FIELD)?;
                if let Some(properties) = current.get("properties").and_then(Value::as_object) {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(name);
                    schema = Some(properties.get(name).ok_or(NOT_A_FIELD)?);
                } else if let Some(values) =
                    current.get("additionalProperties").filter(|a| !a.is_null())
                {
                    path.push_str(&format!("[{name}]"));
                    schema = values.is_object().then_some(values);
                } else {
                    return Err(NOT_A_FIELD.into());
                }
                first.get_or_insert_with(|| name.to_string());
            }
            "[" => return Err("array notation is not allowed".into()),
            other => return Err(format!("expected [ or . but got: {other}")),
        }
    }
    Ok(Resolved {
        path,
        root: first.unwrap_or_default(),
        schema,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
            "spec": {"type": "object", "properties": {
                "color": {"type": "string", "enum": ["red", "blue"]},
                "size": {"type": "integer"},
                "enabled": {"type": "boolean"},
                "ratio": {"type": "number"},
                "when": {"type": "string", "format": "date-time"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "nested": {"type": "object", "properties": {"leaf": {"type": "string"}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "anything": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "port": {"x-kubernetes-int-or-string": true}
            }}
        }})
    }

    const AT: &str = "spec.versions[0].selectableFields";

    fn causes(paths: &[&str]) -> Vec<String> {
        let fields: Vec<Value> = paths.iter().map(|p| json!({"jsonPath": p})).collect();
        validate(&fields, Some(&schema()), AT)
            .into_iter()
            .map(|c| format!("{} {}: {}", c.reason, c.field, c.message))
            .collect()
    }

    #[test]
    fn accepted_paths() {
        for path in [
            ".spec.color",
            ".spec.size",
            ".spec.enabled",
            ".spec.when",
            ".spec.nested.leaf",
            ".spec.labels.app",
        ] {
            assert_eq!(causes(&[path]), Vec::<String>::new(), "{path}");
        }
        assert!(causes(&[".spec.color", ".spec.size", ".spec.enabled"]).is_empty());
    }

    #[test]
    fn refused_paths_name_the_field_and_say_why() {
        let scalar = "must point to a field of type string, boolean or integer. Enum string \
                      fields and strings with formats are allowed.";
        let cases: &[(&str, &str)] = &[
            (
                "spec.color",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \"spec.color\": is an invalid path: expected [ or . but got: spec",
            ),
            (
                ".spec.missing",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \".spec.missing\": is an invalid path: does not refer to a valid field",
            ),
            (
                ".spec.",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \".spec.\": is an invalid path: unexpected end of JSON path",
            ),
            (
                ".spec.tags[0]",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \".spec.tags[0]\": is an invalid path: array notation is not allowed",
            ),
            (
                ".spec.color.shade",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \".spec.color.shade\": is an invalid path: does not refer to a valid field",
            ),
            (
                ".spec.anything.x",
                "FieldValueInvalid spec.versions[0].selectableFields[0].jsonPath: Invalid value: \".spec.anything.x\": is an invalid path: does not refer to a valid field",
            ),
        ];
        for (path, expected) in cases {
            assert_eq!(causes(&[path]), vec![expected.to_string()], "{path}");
        }
        for path in [".spec.ratio", ".spec.tags", ".spec.nested", ".spec.port"] {
            assert_eq!(
                causes(&[path]),
                vec![format!(
                    "FieldValueInvalid {AT}[0].jsonPath: Invalid value: \"{path}\": {scalar}"
                )],
                "{path}"
            );
        }
        assert_eq!(
            causes(&[".metadata.name"]),
            vec![format!(
                "FieldValueInvalid {AT}[0].jsonPath: Invalid value: \".metadata.name\": must not point to fields in metadata"
            )]
        );
    }

    #[test]
    fn duplicates_empty_paths_and_too_many() {
        assert_eq!(
            causes(&[".spec.color", "", ".spec.color"]),
            vec![
                format!("FieldValueRequired {AT}[1].jsonPath: Required value"),
                format!("FieldValueDuplicate {AT}[2].jsonPath: Duplicate value: \".spec.color\""),
            ]
        );
        let nine: Vec<String> = (0..9).map(|i| format!(".spec.labels.l{i}")).collect();
        let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
        assert_eq!(
            causes(&nine),
            vec![format!(
                "FieldValueTooMany {AT}: Too many: 9: must have at most 8 items"
            )]
        );
        assert!(causes(&nine[..8]).is_empty());
    }

    #[test]
    fn a_version_without_a_schema_cannot_select() {
        let causes = validate(&[json!({"jsonPath": ".spec.color"})], None, AT);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, AT);
        // Nothing to check without fields.
        assert!(validate(&[], None, AT).is_empty());
    }

    #[test]
    fn tokens_keep_quoted_parts_whole() {
        assert_eq!(tokens(".spec.a"), [".", "spec", ".", "a"]);
        assert_eq!(tokens(".m['a.b']"), [".", "m", "[", "'a.b'", "]"]);
        assert_eq!(tokens("x"), ["x"]);
    }
}

//! The metadata rules every kind meets, as kube-apiserver 1.33 checks them after name
//! generation: `ValidateObjectMetaAccessor` on create and `ValidateObjectMetaAccessorUpdate` on
//! update (k8s.io/apimachinery/pkg/api/validation/objectmeta.go): label keys and values,
//! annotation keys and their total size, owner references, and (on create only) finalizer names.
//! Names, namespaces and the fields the server sets are checked where they are assigned.

use serde_json::Value;

use crate::meta;
use crate::status::Cause;

/// kube-apiserver's cap on an object's annotations, keys and values counted together
/// (`TotalAnnotationSizeLimitB`).
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// The owners no object may name (`BannedOwners`): core/v1 Events.
const BANNED_OWNERS: &[(&str, &str)] = &[("v1", "Event")];

/// What is wrong with the metadata of `object`, in kube-apiserver's order; `creating` adds the
/// finalizer-name rules, which upstream applies to new objects only.
pub fn validate_object_meta(object: &Value, creating: bool) -> Vec<Cause> {
    let field = |name: &str| object.get("metadata").and_then(|m| m.get(name));
    let mut causes = validate_labels("metadata.labels", field("labels"));
    causes.extend(validate_annotations(field("annotations")));
    causes.extend(validate_owner_references(field("ownerReferences")));
    if creating {
        causes.extend(validate_finalizers(field("finalizers")));
    }
    causes
}

/// `ValidateLabels`: every key a qualified name and every value a label value. Services'
/// `spec.selector` follows the same rules.
pub fn validate_labels(field: &str, labels: Option<&Value>) -> Vec<Cause> {
    let Some(Value::Object(labels)) = labels else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    for (key, value) in labels {
        for problem in meta::qualified_name_problems(key) {
            causes.push(Cause::invalid(field, key, &problem));
        }
        let value = value.as_str().unwrap_or_default();
        for problem in meta::label_value_problems(value) {
            causes.push(Cause::invalid(field, value, &problem));
        }
    }
    causes
}

/// `ValidateAnnotations`: keys are qualified names in any case, and keys and values together
/// stay within [`ANNOTATIONS_MAX_BYTES`].
fn validate_annotations(annotations: Option<&Value>) -> Vec<Cause> {
    const FIELD: &str = "metadata.annotations";
    let Some(Value::Object(annotations)) = annotations else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (key, value) in annotations {
        for problem in meta::qualified_name_problems(&key.to_lowercase()) {
            causes.push(Cause::invalid(FIELD, key, &problem));
        }
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_MAX_BYTES {
        causes.push(Cause::too_long(FIELD, ANNOTATIONS_MAX_BYTES));
    }
    causes
}

/// `ValidateOwnerReferences`: each names a version, a kind, a name and a uid, none is a
/// core/v1 Event, and at most one is the controller.
fn validate_owner_references(references: Option<&Value>) -> Vec<Cause> {
    const FIELD: &str = "metadata.ownerReferences";
    let Some(Value::Array(references)) = references else {
        return Vec::new();
    };
    let text = |reference: &Value, name: &str| {
        reference
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let mut causes = Vec::new();
    let mut first_controller: Option<String> = None;
    for reference in references {
        let (api_version, kind) = (text(reference, "apiVersion"), text(reference, "kind"));
        // schema.FromAPIVersionAndKind: `v1`, `group/v1`; anything else has no version.
        let version = match api_version.split('/').collect::<Vec<_>>().as_slice() {
            [version] | [_, version] => (*version).to_string(),
            _ => String::new(),
        };
        if version.is_empty() {
            causes.push(Cause::invalid(
                format!("{FIELD}.apiVersion"),
                &api_version,
                "version must not be empty",
            ));
        }
        for (name, what) in [("kind", &kind), ("name", &text(reference, "name"))]
            .into_iter()
            .chain([("uid", &text(reference, "uid"))])
        {
            if what.is_empty() {
                causes.push(Cause::invalid(
                    format!("{FIELD}.{name}"),
                    "",
                    &format!("{name} must not be empty"),
                ));
            }
        }
        if BANNED_OWNERS.contains(&(api_version.as_str(), kind.as_str())) {
            causes.push(Cause::invalid_literal(
                FIELD,
                &go_owner_reference(reference),
                &format!("/{api_version}, Kind={kind} is disallowed from being an owner"),
            ));
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let this = format!("{kind}/{}", text(reference, "name"));
            match &first_controller {
                Some(first) => causes.push(Cause::invalid_literal(
                    FIELD,
                    &format!(
                        "[]v1.OwnerReference{{{}}}",
                        references
                            .iter()
                            .map(go_owner_reference)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"
                    ),
                )),
                None => first_controller = Some(this),
            }
        }
    }
    causes
}

/// An owner reference as Go's `%#v` prints it, pointers shown by their value (Go shows
/// addresses, which mean nothing outside its process).
fn go_owner_reference(reference: &Value) -> String {
    let text = |name: &str| {
        format!(
            "{:?}",
            reference
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
        )
    };
    let flag = |name: &str| match reference.get(name).and_then(Value::as_bool) {
        Some(value) => format!("(*bool)({value})"),
        None => "(*bool)(nil)".to_string(),
    };
    format!(
        "v1.OwnerReference{{APIVersion:{}, Kind:{}, Name:{}, UID:{}, Controller:{}, BlockOwnerDeletion:{}}}",
        text("apiVersion"),
        text("kind"),
        text("name"),
        text("uid"),
        flag("controller"),
        flag("blockOwnerDeletion")
    )
}

/// `ValidateFinalizers`: every finalizer a qualified name, and not both `orphan` and
/// `foregroundDeletion`.
fn validate_finalizers(finalizers: Option<&Value>) -> Vec<Cause> {
    const FIELD: &str = "metadata.finalizers";
    let Some(Value::Array(finalizers)) = finalizers else {
        return Vec::new();
    };
    let names: Vec<&str> = finalizers.iter().filter_map(Value::as_str).collect();
    let mut causes = Vec::new();
    for name in &names {
        for problem in meta::qualified_name_problems(name) {
            causes.push(Cause::invalid(FIELD, name, &problem));
        }
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        causes.push(Cause::invalid_literal(
            FIELD,
            &meta::go_strings(&names),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Metadata, whether it is a create, and the causes expected (field, message).
    type Case = (Value, bool, Vec<(&'static str, String)>);

    fn object(metadata: Value) -> Value {
        json!({"metadata": metadata})
    }

    /// Each rule, with kube-apiserver 1.33's field and message.
    #[test]
    fn each_rule_names_the_field_and_the_value() {
        let qualified = "name part must consist of alphanumeric characters, '-', '_' or '.', \
            and must start and end with an alphanumeric character (e.g. 'MyName',  or \
            'my.name',  or '123-abc', regex used for validation is \
            '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let cases: Vec<Case> = vec![
            (json!({"labels": {"app": "web", "example.com/tier": "", "a_b.c": "x-1"}}), true, vec![]),
            (
                json!({"labels": {"bad label": "x"}}),
                true,
                vec![("metadata.labels", format!("Invalid value: \"bad label\": {qualified}"))],
            ),
            (
                json!({"labels": {"app": "-web"}}),
                false,
                vec![("metadata.labels", format!("Invalid value: \"-web\": {}", meta::LABEL_VALUE_DETAIL))],
            ),
            (
                json!({"labels": {"app": "a".repeat(64)}}),
                false,
                vec![(
                    "metadata.labels",
                    format!("Invalid value: \"{}\": must be no more than 63 characters", "a".repeat(64)),
                )],
            ),
            (
                json!({"labels": {"/web": "x"}}),
                true,
                vec![("metadata.labels", "Invalid value: \"/web\": prefix part must be non-empty".to_string())],
            ),
            (
                json!({"labels": {"Example.com/web": "x"}}),
                true,
                vec![(
                    "metadata.labels",
                    format!("Invalid value: \"Example.com/web\": prefix part {}", meta::DNS1123_SUBDOMAIN_DETAIL),
                )],
            ),
            (
                json!({"labels": {"a/b/c": "x"}}),
                true,
                vec![(
                    "metadata.labels",
                    "Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
                )],
            ),
            // Annotation keys are checked in lower case; values are free.
            (json!({"annotations": {"Example.COM/Note": "any text at all!"}}), true, vec![]),
            (
                json!({"annotations": {"no spaces": "x"}}),
                true,
                vec![("metadata.annotations", format!("Invalid value: \"no spaces\": {qualified}"))],
            ),
            (
                json!({"annotations": {"big": "x".repeat(ANNOTATIONS_MAX_BYTES)}}),
                true,
                vec![("metadata.annotations", "Too long: may not be more than 262144 bytes".to_string())],
            ),
            (json!({"annotations": {"big": "x".repeat(ANNOTATIONS_MAX_BYTES - 3)}}), true, vec![]),
            (
                json!({"finalizers": ["kube-lb.io/cleanup", "kubernetes", "bad finalizer"]}),
                true,
                vec![("metadata.finalizers", format!("Invalid value: \"bad finalizer\": {qualified}"))],
            ),
            // Upstream checks finalizer names on create only.
            (json!({"finalizers": ["bad finalizer"]}), false, vec![]),
            (
                json!({"finalizers": ["orphan", "foregroundDeletion"]}),
                true,
                vec![(
                    "metadata.finalizers",
                    "Invalid value: []string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set".to_string(),
                )],
            ),
            (
                json!({"ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "1", "controller": true}]}),
                false,
                vec![],
            ),
            (
                json!({"ownerReferences": [{"apiVersion": "apps/", "name": "web"}]}),
                true,
                vec![
                    ("metadata.ownerReferences.apiVersion", "Invalid value: \"apps/\": version must not be empty".to_string()),
                    ("metadata.ownerReferences.kind", "Invalid value: \"\": kind must not be empty".to_string()),
                    ("metadata.ownerReferences.uid", "Invalid value: \"\": uid must not be empty".to_string()),
                ],
            ),
            (
                json!({"ownerReferences": [{"apiVersion": "v1", "kind": "Event", "name": "e", "uid": "1"}]}),
                true,
                vec![(
                    "metadata.ownerReferences",
                    "Invalid value: v1.OwnerReference{APIVersion:\"v1\", Kind:\"Event\", Name:\"e\", UID:\"1\", Controller:(*bool)(nil), BlockOwnerDeletion:(*bool)(nil)}: /v1, Kind=Event is disallowed from being an owner".to_string(),
                )],
            ),
        ];
        for (metadata, creating, want) in cases {
            let got: Vec<(String, String)> =
                validate_object_meta(&object(metadata.clone()), creating)
                    .into_iter()
                    .map(|cause| (cause.field, cause.message))
                    .collect();
            let want: Vec<(String, String)> =
                want.into_iter().map(|(f, m)| (f.to_string(), m)).collect();
            assert_eq!(got, want, "{metadata}");
        }
    }

    #[test]
    fn a_second_controller_reference_is_refused() {
        let causes = validate_object_meta(
            &object(json!({"ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
            ]})),
            false,
        );
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(
            causes[0].message.ends_with(
                "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"
            ),
            "{}",
            causes[0].message
        );
    }
}

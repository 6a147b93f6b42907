//! CustomResourceDefinitions: validating and defaulting the CRD objects themselves, the
//! status kube-apiserver's controllers would give them, and the per-version facts (schema,
//! printer columns) the generic machinery needs to serve their custom resources.
//!
//! The structural-schema operations on custom objects live in [`schema`]; printer-column
//! JSONPath in [`jsonpath`]; the checks of a version's `selectableFields` in [`selectable`].

pub mod jsonpath;
pub mod schema;
pub mod selectable;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::meta;
use crate::resources::{ResourceDef, intern};
use crate::status::Cause;

/// One `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// OpenAPI format hint.
    pub format: String,
    /// Human readable description.
    pub description: String,
    /// 0 for the default view, higher for `-o wide`.
    pub priority: i64,
    /// Simple JSONPath (`.spec.cidrs`) evaluated against each object.
    pub json_path: String,
}

/// What serving one version of a custom resource needs beyond its [`ResourceDef`].
#[derive(Debug, Clone, Default)]
pub struct CustomVersion {
    /// `metadata.name` of the CRD (`plural.group`).
    pub crd_name: String,
    /// The version's `schema.openAPIV3Schema`.
    pub schema: Option<Value>,
    /// Table columns after NAME; empty means the default AGE column.
    pub printer_columns: Vec<PrinterColumn>,
    /// `apiVersion` objects are stored with (the CRD's storage version).
    pub storage_api_version: String,
    /// The version's `selectableFields` as field labels: each `jsonPath` without its leading
    /// dot (`.spec.color` is the label `spec.color`), as apiextensions-apiserver names them.
    pub selectable_fields: Vec<String>,
}

/// A CRD's schema for one served version, as other components (the OpenAPI documents)
/// publish it.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSchema {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource name.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// `openAPIV3Schema` of this version (`{}` when the CRD has none).
    pub schema: Value,
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// kube-apiserver's defaulting of a v1 CRD: singular and listKind from the kind, conversion
/// strategy `None`.
pub fn apply_defaults(crd: &mut Value) {
    let kind = str_at(crd, "/spec/names/kind").to_string();
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if names
            .get("singular")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
            && !kind.is_empty()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut)
        && spec.get("conversion").is_none_or(Value::is_null)
    {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

fn is_dns_label(s: &str) -> bool {
    meta::is_dns1123_label(s)
}

/// Validation of a CRD on create (`old` = `None`) and update, as
/// `apiextensions/validation.ValidateCustomResourceDefinition` does for the parts this server
/// uses. Returns the causes of a 422.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta::name(crd).unwrap_or_default();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let kind = str_at(crd, "/spec/names/kind");
    let singular = str_at(crd, "/spec/names/singular");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    } else if !meta::is_dns1123_subdomain(group) || !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    } else if !is_dns_label(plural) {
        causes.push(Cause::invalid(
            "spec.names.plural",
            plural,
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        ));
    }
    if !singular.is_empty() && !is_dns_label(singular) {
        causes.push(Cause::invalid(
            "spec.names.singular",
            singular,
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        ));
    }
    if kind.is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match str_at(crd, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => causes.push(Cause::required("spec.scope")),
        other => causes.push(Cause::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut storage = 0;
    for (i, version) in versions.iter().enumerate() {
        let field = format!("spec.versions[{i}]");
        let vname = str_at(version, "/name");
        if vname.is_empty() {
            causes.push(Cause::required(format!("{field}.name")));
        } else if !is_dns_label(vname) {
            causes.push(Cause::invalid(
                format!("{field}.name"),
                vname,
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-'",
            ));
        } else if seen.contains(&vname) {
            causes.push(Cause::duplicate(format!("{field}.name"), vname));
        }
        seen.push(vname);
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        match version.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: schemas are required".into(),
                field: format!("{field}.schema.openAPIV3Schema"),
            }),
            Some(root) => {
                if root.get("type").and_then(Value::as_str) != Some("object") {
                    causes.push(Cause::invalid(
                        format!("{field}.schema.openAPIV3Schema.type"),
                        root.get("type").and_then(Value::as_str).unwrap_or_default(),
                        "must be object at the root",
                    ));
                }
            }
        }
        for (j, column) in version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let cfield = format!("{field}.additionalPrinterColumns[{j}]");
            if str_at(column, "/name").is_empty() {
                causes.push(Cause::required(format!("{cfield}.name")));
            }
            match str_at(column, "/type") {
                "string" | "integer" | "number" | "boolean" | "date" => {}
                "" => causes.push(Cause::required(format!("{cfield}.type"))),
                other => causes.push(Cause::not_supported(
                    format!("{cfield}.type"),
                    other,
                    &["boolean", "date", "integer", "number", "string"],
                )),
            }
            let path = str_at(column, "/jsonPath");
            if path.is_empty() {
                causes.push(Cause::required(format!("{cfield}.jsonPath")));
            } else if jsonpath::parse(path).is_err() {
                causes.push(Cause::invalid(
                    format!("{cfield}.jsonPath"),
                    path,
                    "must be a simple json path",
                ));
            }
        }
        if let Some(selectable) = version.get("selectableFields").and_then(Value::as_array) {
            causes.extend(selectable::validate(
                selectable,
                version.pointer("/schema/openAPIV3Schema"),
                &format!("{field}.selectableFields"),
            ));
        }
    }
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            &format!("{storage}"),
            "must have exactly one version marked as storage version",
        ));
    }
    if let Some(old) = old {
        for (field, pointer) in [
            ("spec.scope", "/spec/scope"),
            ("spec.group", "/spec/group"),
            ("spec.names.plural", "/spec/names/plural"),
        ] {
            if str_at(old, pointer) != str_at(crd, pointer) {
                causes.push(Cause::invalid(
                    field,
                    str_at(crd, pointer),
                    "field is immutable",
                ));
            }
        }
    }
    causes
}

/// The status kube-apiserver's naming and establishing controllers converge a CRD to:
/// accepted names, `NamesAccepted` and `Established` conditions, stored versions.
pub fn status(crd: &Value, previous: Option<&Value>) -> Value {
    let now = meta::now();
    let storage_version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        })
        .map(|v| str_at(v, "/name").to_string())
        .unwrap_or_default();
    let mut stored: Vec<Value> = previous
        .and_then(|p| p.pointer("/status/storedVersions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !storage_version.is_empty() && !stored.contains(&json!(storage_version)) {
        stored.push(json!(storage_version));
    }
    // A condition that does not change keeps its transition time.
    let since = |ty: &str| {
        previous
            .and_then(|p| p.pointer("/status/conditions"))
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty && c["status"] == "True"))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now))
    };
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": since("NamesAccepted"),
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": since("Established"),
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "storedVersions": stored,
    })
}

/// A list of names in the CRD (short names, categories), interned: it lives as long as the
/// names it points to.
fn interned_names(crd: &Value, pointer: &str) -> &'static [&'static str] {
    let names: Vec<&'static str> = crd
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(intern)
        .collect();
    if names.is_empty() {
        &[]
    } else {
        intern_list(names)
    }
}

/// The served versions of a (validated) CRD as resource definitions, and the persistence key
/// of its storage version (`group/version/plural`).
pub fn served_versions(crd: &Value) -> (Vec<(ResourceDef, Arc<CustomVersion>)>, String) {
    let crd_name = meta::name(crd).unwrap_or_default().to_string();
    let group = intern(str_at(crd, "/spec/group"));
    let plural = intern(str_at(crd, "/spec/names/plural"));
    let kind = intern(str_at(crd, "/spec/names/kind"));
    let singular = match str_at(crd, "/spec/names/singular") {
        "" => intern(&kind.to_lowercase()),
        s => intern(s),
    };
    let short_names = interned_names(crd, "/spec/names/shortNames");
    let categories = interned_names(crd, "/spec/names/categories");
    let namespaced = str_at(crd, "/spec/scope") != "Cluster";
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| str_at(v, "/name").to_string())
        .unwrap_or_default();
    let storage_api_version = format!("{group}/{storage_version}");
    let served = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        .map(|v| {
            let def = ResourceDef {
                group,
                version: intern(str_at(v, "/name")),
                plural,
                singular,
                kind,
                namespaced,
                has_status: v
                    .pointer("/subresources/status")
                    .is_some_and(Value::is_object),
                sets_generation: true,
                short_names,
                categories,
            };
            let printer_columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|c| PrinterColumn {
                    name: str_at(c, "/name").to_string(),
                    type_: str_at(c, "/type").to_string(),
                    format: str_at(c, "/format").to_string(),
                    description: str_at(c, "/description").to_string(),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    json_path: str_at(c, "/jsonPath").to_string(),
                })
                .collect();
            let custom = CustomVersion {
                crd_name: crd_name.clone(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                printer_columns,
                storage_api_version: storage_api_version.clone(),
                selectable_fields: v
                    .get("selectableFields")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|f| str_at(f, "/jsonPath").trim_start_matches('.').to_string())
                    .filter(|label| !label.is_empty())
                    .collect(),
            };
            (def, Arc::new(custom))
        })
        .collect();
    (served, format!("{group}/{storage_version}/{plural}"))
}

/// A `'static` slice of interned names; identical lists are shared.
fn intern_list(names: Vec<&'static str>) -> &'static [&'static str] {
    use std::collections::BTreeSet;
    use std::sync::{Mutex, OnceLock};
    static LISTS: OnceLock<Mutex<BTreeSet<&'static [&'static str]>>> = OnceLock::new();
    let mut lists = LISTS
        .get_or_init(|| Mutex::new(BTreeSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(existing) = lists.get(names.as_slice()) {
        return existing;
    }
    let leaked: &'static [&'static str] = Box::leak(names.into_boxed_slice());
    lists.insert(leaked);
    leaked
}

#[cfg(test)]
pub(crate) mod tests;

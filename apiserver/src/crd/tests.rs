use serde_json::json;

use super::*;

use crate::resources::Registry;

fn ippool_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "ippools.kube-lb.io"},
        "spec": {
            "group": "kube-lb.io",
            "scope": "Cluster",
            "names": {"plural": "ippools", "kind": "IPPool", "shortNames": ["ipp"], "categories": ["all", "kube-lb"]},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "CIDRs", "type": "string", "jsonPath": ".spec.cidrs"},
                    {"name": "Free", "type": "integer", "jsonPath": ".status.free"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["cidrs"],
                            "properties": {
                                "cidrs": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "^[0-9a-f.:]+/[0-9]+$"}, "x-kubernetes-list-type": "set"},
                                "mode": {"type": "string", "enum": ["layer2", "bgp"], "default": "layer2"},
                                "priority": {"type": "integer", "minimum": 0, "maximum": 100},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                            }
                        },
                        "status": {"type": "object", "properties": {"free": {"type": "integer"}}}
                    }
                }}
            }]
        }
    })
}

#[test]
fn crd_defaults_status_and_versions() {
    let mut crd = ippool_crd();
    apply_defaults(&mut crd);
    assert_eq!(crd["spec"]["names"]["singular"], "ippool");
    assert_eq!(crd["spec"]["names"]["listKind"], "IPPoolList");
    assert_eq!(crd["spec"]["conversion"]["strategy"], "None");
    assert!(
        validate(&crd, None).is_empty(),
        "{:?}",
        validate(&crd, None)
    );
    let status = status(&crd, None);
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, vec!["NamesAccepted", "Established"]);
    assert_eq!(status["storedVersions"], json!(["v1alpha1"]));
    assert_eq!(status["acceptedNames"]["kind"], "IPPool");

    let (versions, key) = served_versions(&crd);
    assert_eq!(key, "kube-lb.io/v1alpha1/ippools");
    let (def, custom) = &versions[0];
    assert_eq!(def.api_version(), "kube-lb.io/v1alpha1");
    assert!(!def.namespaced && def.has_status && def.sets_generation);
    assert_eq!(def.short_names, &["ipp"]);
    assert_eq!(def.categories, &["all", "kube-lb"]);
    assert_eq!(custom.printer_columns.len(), 3);
    assert_eq!(custom.storage_api_version, "kube-lb.io/v1alpha1");
}

#[test]
fn crd_validation_table() {
    // (mutation, expected field of the first cause)
    type Mutate = fn(&mut Value);
    let cases: Vec<(&str, Mutate, &str)> = vec![
        (
            "group without a dot",
            |c| c["spec"]["group"] = json!("kubelb"),
            "spec.group",
        ),
        (
            "name not plural.group",
            |c| c["metadata"]["name"] = json!("pools.kube-lb.io"),
            "metadata.name",
        ),
        (
            "bad scope",
            |c| c["spec"]["scope"] = json!("Global"),
            "spec.scope",
        ),
        (
            "no kind",
            |c| c["spec"]["names"]["kind"] = json!(""),
            "spec.names.kind",
        ),
        (
            "no versions",
            |c| c["spec"]["versions"] = json!([]),
            "spec.versions",
        ),
        (
            "no schema",
            |c| c["spec"]["versions"][0]["schema"] = Value::Null,
            "spec.versions[0].schema.openAPIV3Schema",
        ),
        (
            "no storage version",
            |c| c["spec"]["versions"][0]["storage"] = json!(false),
            "spec.versions",
        ),
        (
            "bad printer column type",
            |c| c["spec"]["versions"][0]["additionalPrinterColumns"][0]["type"] = json!("list"),
            "spec.versions[0].additionalPrinterColumns[0].type",
        ),
    ];
    for (what, mutate, field) in cases {
        let mut crd = ippool_crd();
        mutate(&mut crd);
        apply_defaults(&mut crd);
        let causes = validate(&crd, None);
        assert!(!causes.is_empty(), "{what}: accepted");
        assert_eq!(causes[0].field, field, "{what}: {causes:?}");
    }
    let old = ippool_crd();
    let mut changed = ippool_crd();
    changed["spec"]["scope"] = json!("Namespaced");
    let causes = validate(&changed, Some(&old));
    assert_eq!(causes[0].field, "spec.scope");
    assert!(causes[0].message.contains("immutable"));
}

fn pool_schema() -> Value {
    ippool_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn custom_objects_are_pruned_defaulted_and_validated() {
    let mut pool = json!({
        "apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": "p", "annotations": {"a": "b"}},
        "spec": {"cidrs": ["10.0.0.0/24"], "unknown": 1,
                 "extra": {"anything": {"goes": true}}, "labels": {"k": "v"}},
        "top": "dropped"
    });
    let causes = schema::admit(&mut pool, &pool_schema());
    assert!(causes.is_empty(), "{causes:?}");
    assert!(pool.get("top").is_none());
    assert!(pool["spec"].get("unknown").is_none());
    assert_eq!(pool["spec"]["extra"]["anything"]["goes"], true);
    assert_eq!(pool["spec"]["mode"], "layer2");
    assert_eq!(pool["metadata"]["annotations"]["a"], "b");
    assert_eq!(pool["apiVersion"], "kube-lb.io/v1alpha1");

    // (spec, field, message fragment)
    let cases = vec![
        (json!({}), "spec.cidrs", "Required value"),
        (
            json!({"cidrs": "10.0.0.0/24"}),
            "spec.cidrs",
            "spec.cidrs in body must be of type array: \"string\"",
        ),
        (
            json!({"cidrs": []}),
            "spec.cidrs",
            "should have at least 1 items",
        ),
        (json!({"cidrs": ["nope"]}), "spec.cidrs[0]", "should match"),
        (
            json!({"cidrs": ["10.0.0.0/24", "10.0.0.0/24"]}),
            "spec.cidrs[1]",
            "Duplicate value",
        ),
        (
            json!({"cidrs": ["10.0.0.0/24"], "mode": "ospf"}),
            "spec.mode",
            "Unsupported value: \"ospf\": supported values: \"layer2\", \"bgp\"",
        ),
        (
            json!({"cidrs": ["10.0.0.0/24"], "priority": 101}),
            "spec.priority",
            "Invalid value: 101: spec.priority in body should be less than or equal to 100",
        ),
        (
            json!({"cidrs": ["10.0.0.0/24"], "priority": "high"}),
            "spec.priority",
            "must be of type integer",
        ),
        (
            json!({"cidrs": ["10.0.0.0/24"], "labels": {"k": 1}}),
            "spec.labels.k",
            "must be of type string",
        ),
    ];
    for (spec, field, fragment) in cases {
        let mut pool = json!({"metadata": {"name": "p"}, "spec": spec});
        let causes = schema::admit(&mut pool, &pool_schema());
        assert!(
            causes
                .iter()
                .any(|c| c.field == field && c.message.contains(fragment)),
            "{field}: {causes:?}"
        );
    }
}

/// The IPPool CRD of the tests, defaulted, for other modules' tests.
pub fn ippool_crd_for_tests() -> Value {
    let mut crd = ippool_crd();
    apply_defaults(&mut crd);
    crd
}

/// A registry serving the IPPool CRD.
pub fn registry_with_ippools() -> Registry {
    let mut registry = Registry::builtin();
    let (versions, key) = served_versions(&ippool_crd_for_tests());
    registry.install_crd("ippools.kube-lb.io", versions, key);
    registry
}

//! CustomResourceDefinitions registered at run time, served like built-in kinds: kube-rs
//! (`Api<DynamicObject>`, discovery, watch), kubectl (apply, columns, patch, delete) and the
//! state file.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use common::{crash_and_restart, get, kubectl, kubectl_rig, ok, persisting_to, post};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube_lb_apiserver::ApiServer;
use serde_json::{Value, json};

/// The cluster-scoped address-pool CRD another component builds on, with a status
/// subresource, printer columns, defaults and validation.
const IPPOOL_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: ippools.kube-lb.io
spec:
  group: kube-lb.io
  scope: Cluster
  names:
    plural: ippools
    singular: ippool
    kind: IPPool
    shortNames: [ipp]
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Mode
      type: string
      jsonPath: .spec.mode
    - name: Free
      type: integer
      jsonPath: .status.free
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cidrs]
            properties:
              cidrs:
                type: array
                minItems: 1
                items: {type: string}
              mode:
                type: string
                enum: [layer2, bgp]
                default: layer2
              extra:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              free: {type: integer}
"#;

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

fn pools_resource() -> ApiResource {
    ApiResource {
        group: "kube-lb.io".into(),
        version: "v1alpha1".into(),
        api_version: "kube-lb.io/v1alpha1".into(),
        kind: "IPPool".into(),
        plural: "ippools".into(),
    }
}

fn pool(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": name, "labels": {"tier": name}}, "spec": spec
    }))
    .unwrap()
}

fn crd_from_yaml(text: &str) -> CustomResourceDefinition {
    serde_yaml_ng::from_str(text).unwrap()
}

#[tokio::test]
async fn custom_resources_through_kube_rs() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &crd_from_yaml(IPPOOL_CRD))
        .await
        .unwrap();
    let conditions = created.status.unwrap().conditions.unwrap();
    for wanted in ["NamesAccepted", "Established"] {
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == wanted && c.status == "True"),
            "{wanted}: {conditions:?}"
        );
    }
    assert_eq!(created.spec.names.list_kind.as_deref(), Some("IPPoolList"));

    // Discovery finds the new kind with its scope and status subresource.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (resource, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.kind == "IPPool")
        .expect("IPPool is discoverable");
    assert_eq!(resource.plural, "ippools");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));

    let pools: Api<DynamicObject> = Api::all_with(client.clone(), &pools_resource());
    let watch = watcher(
        pools.clone(),
        watcher::Config::default().labels("tier=gold"),
    )
    .applied_objects()
    .boxed();

    // Defaults applied, unknown fields pruned except under preserve-unknown-fields.
    let gold = pools
        .create(
            &PostParams::default(),
            &pool(
                "gold",
                json!({"cidrs": ["192.0.2.0/24"], "bogus": 1, "extra": {"kept": true}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(gold.data["spec"]["mode"], "layer2");
    assert!(gold.data["spec"].get("bogus").is_none(), "{:?}", gold.data);
    assert_eq!(gold.data["spec"]["extra"]["kept"], true);
    assert_eq!(gold.metadata.generation, Some(1));
    pools
        .create(
            &PostParams::default(),
            &pool("silver", json!({"cidrs": ["198.51.100.0/24"]})),
        )
        .await
        .unwrap();

    // Structural validation: 422 with the field path.
    let err = pools
        .create(
            &PostParams::default(),
            &pool("bad", json!({"mode": "ospf"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .starts_with("IPPool.kube-lb.io \"bad\" is invalid"),
        "{}",
        status.message
    );
    let fields: Vec<&str> = status
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    assert!(
        fields.contains(&"spec.cidrs") && fields.contains(&"spec.mode"),
        "{fields:?}"
    );

    // The status subresource: status changes only there, spec changes bump generation.
    let pp = PatchParams::default();
    let with_status = pools
        .patch_status(
            "gold",
            &pp,
            &Patch::Merge(json!({"status": {"free": 254}, "spec": {"mode": "bgp"}})),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["free"], 254);
    assert_eq!(with_status.data["spec"]["mode"], "layer2");
    let main = pools
        .patch(
            "gold",
            &pp,
            &Patch::Merge(json!({"status": {"free": 1}, "spec": {"mode": "bgp"}})),
        )
        .await
        .unwrap();
    assert_eq!(main.data["status"]["free"], 254);
    assert_eq!(main.data["spec"]["mode"], "bgp");
    assert_eq!(main.metadata.generation, Some(2));
    // Server-side apply works on custom resources too.
    let applied = pools
        .patch(
            "gold",
            &PatchParams::apply("pool-manager").force(),
            &Patch::Apply(
                json!({"apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool",
                "spec": {"cidrs": ["192.0.2.0/25"]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.data["spec"]["cidrs"], json!(["192.0.2.0/25"]));

    // Label selectors on list and watch.
    let listed = pools
        .list(&ListParams::default().labels("tier=silver"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].metadata.name.as_deref(), Some("silver"));
    let mut watch = watch;
    let seen = tokio::time::timeout(Duration::from_secs(10), watch.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.metadata.name.as_deref(), Some("gold"));

    // A namespaced CRD next to it.
    crds.create(&PostParams::default(), &crd_from_yaml(WIDGET_CRD))
        .await
        .unwrap();
    let widget_resource = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &widget_resource);
    let widget: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "anything": {"at": "all"}}))
        .unwrap();
    let stored = widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert_eq!(stored.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(stored.data["anything"]["at"], "all");
    let everywhere: Api<DynamicObject> = Api::all_with(client.clone(), &widget_resource);
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // Deleting the CRD deletes its objects and stops serving the kind.
    crds.delete("ippools.kube-lb.io", &DeleteParams::default())
        .await
        .unwrap();
    let err = pools.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
    let dump = server.store().dump();
    assert!(
        !dump.objects.keys().any(|k| k.contains("ippools")),
        "{:?}",
        dump.objects.keys()
    );
    // Re-created, the kind starts empty.
    crds.create(&PostParams::default(), &crd_from_yaml(IPPOOL_CRD))
        .await
        .unwrap();
    assert!(
        pools
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn custom_resources_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let server = persisting_to(&state).await;
    server.apply_manifests(IPPOOL_CRD).unwrap();
    let pools: Api<DynamicObject> = Api::all_with(server.client().unwrap(), &pools_resource());
    let created = pools
        .create(
            &PostParams::default(),
            &pool("gold", json!({"cidrs": ["192.0.2.0/24"]})),
        )
        .await
        .unwrap();
    pools
        .patch_status(
            "gold",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"free": 7}})),
        )
        .await
        .unwrap();
    let again = crash_and_restart(server, &state).await;
    let pools: Api<DynamicObject> = Api::all_with(again.client().unwrap(), &pools_resource());
    let restored = pools.get("gold").await.unwrap();
    assert_eq!(restored.metadata.uid, created.metadata.uid);
    assert_eq!(restored.data["status"]["free"], 7);
    // Still validated after the restart: the schema came back with the CRD.
    assert!(
        pools
            .create(&PostParams::default(), &pool("bad", json!({})))
            .await
            .is_err()
    );
}

const POOLS: &str = r#"apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata:
  name: gold
spec:
  cidrs: ["192.0.2.0/24"]
---
apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata:
  name: silver
spec:
  cidrs: ["198.51.100.0/24"]
  mode: bgp
"#;

#[tokio::test]
async fn kubectl_drives_custom_resources() {
    let Some(rig) = kubectl_rig("kubectl_drives_custom_resources").await else {
        return;
    };
    let (server, dir, kc) = (&rig.server, &rig.dir, rig.kubeconfig.clone());
    let crd_file = dir.path().join("crd.yaml");
    let pools_file = dir.path().join("pools.yaml");
    std::fs::write(&crd_file, IPPOOL_CRD).unwrap();
    std::fs::write(&pools_file, POOLS).unwrap();

    let out = ok(&kc, &["apply", "-f", crd_file.to_str().unwrap()]).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/ippools.kube-lb.io created"),
        "{out}"
    );
    let out = ok(&kc, &["get", "crd"]).await;
    assert!(
        out.contains("NAME") && out.contains("CREATED AT") && out.contains("ippools.kube-lb.io"),
        "{out}"
    );
    let out = ok(&kc, &["apply", "-f", pools_file.to_str().unwrap()]).await;
    assert!(out.contains("ippool.kube-lb.io/gold created"), "{out}");
    // Re-applying (client-side apply: a JSON merge patch for custom resources) changes nothing.
    let out = ok(&kc, &["apply", "-f", pools_file.to_str().unwrap()]).await;
    assert!(out.contains("ippool.kube-lb.io/gold unchanged"), "{out}");

    // Printer columns, by short name.
    let out = ok(
        &kc,
        &[
            "patch",
            "ipp",
            "gold",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"free":254}}"#,
        ],
    )
    .await;
    assert!(out.contains("patched"), "{out}");
    let table = ok(&kc, &["get", "ipp"]).await;
    let header = table.lines().next().unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(columns, vec!["NAME", "MODE", "FREE", "AGE"], "{table}");
    let gold = table.lines().find(|l| l.starts_with("gold")).unwrap();
    assert!(gold.contains("layer2") && gold.contains("254"), "{table}");
    // An unset column is a null cell, which kubectl leaves blank.
    let silver = table.lines().find(|l| l.starts_with("silver")).unwrap();
    assert!(silver.contains("bgp") && !silver.contains("254"), "{table}");

    // Edit via patch; a strategic merge patch is refused as kube-apiserver refuses it.
    ok(
        &kc,
        &[
            "patch",
            "ippool",
            "gold",
            "--type=merge",
            "-p",
            r#"{"spec":{"mode":"bgp"}}"#,
        ],
    )
    .await;
    let json: Value =
        serde_json::from_str(&ok(&kc, &["get", "ippool", "gold", "-o", "json"]).await).unwrap();
    assert_eq!(json["spec"]["mode"], "bgp");
    assert_eq!(json["status"]["free"], 254);
    let out = kubectl(
        &kc,
        &[
            "patch",
            "ippool",
            "gold",
            "--type=merge",
            "-p",
            r#"{"spec":{"mode":"ospf"}}"#,
        ],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.mode") && stderr.contains("Unsupported value"),
        "{stderr}"
    );

    // Deleting the CRD takes the pools with it.
    let out = ok(&kc, &["delete", "-f", crd_file.to_str().unwrap()]).await;
    assert!(out.contains("deleted"), "{out}");
    let out = kubectl(&kc, &["get", "ippools"]).await;
    assert!(!out.status.success());
    assert!(
        server
            .store()
            .dump()
            .objects
            .keys()
            .all(|k| !k.contains("ippools"))
    );
}

/// A namespaced CRD whose version makes two fields selectable.
const GADGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields:
    - jsonPath: .spec.color
    - jsonPath: .spec.size
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              color: {type: string}
              size: {type: integer}
              shape: {type: string}
"#;

/// Field selectors on custom resources over raw HTTP, as apiextensions-apiserver's
/// `crConverter.ConvertFieldLabel`: `metadata.name`, `metadata.namespace` (namespaced kinds
/// only) and the version's `selectableFields`; any other label is a 400 for lists and
/// watches alike.
#[tokio::test]
async fn custom_resource_field_selectors_are_restricted() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let base = server.url();
    let crds = format!("{base}/apis/apiextensions.k8s.io/v1/customresourcedefinitions");
    for text in [GADGET_CRD, IPPOOL_CRD] {
        let crd: Value = serde_yaml_ng::from_str(text).unwrap();
        let (code, body) = post(&http, &crds, crd).await;
        assert_eq!(code, 201, "{body}");
    }
    let gadgets = format!("{base}/apis/example.com/v1/namespaces/default/gadgets");
    for (name, color, size) in [("a", "red", 1), ("b", "blue", 2), ("c", "red", 3)] {
        let (code, body) = post(
            &http,
            &gadgets,
            json!({"apiVersion": "example.com/v1", "kind": "Gadget",
                   "metadata": {"name": name},
                   "spec": {"color": color, "size": size, "shape": "round"}}),
        )
        .await;
        assert_eq!(code, 201, "{body}");
    }
    let names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    for (selector, expected) in [
        ("spec.color=red", vec!["a", "c"]),
        ("spec.color=red,spec.size!=3", vec!["a"]),
        ("metadata.name=b", vec!["b"]),
        ("metadata.namespace=default,spec.size=2", vec!["b"]),
    ] {
        let (code, body) = get(&http, &format!("{gadgets}?fieldSelector={selector}")).await;
        assert_eq!(code, 200, "{selector}: {body}");
        assert_eq!(names(&body), expected, "{selector}");
    }
    let pools = format!("{base}/apis/kube-lb.io/v1alpha1/ippools");
    for (url, label) in [
        (
            format!("{gadgets}?fieldSelector=spec.shape=round"),
            "spec.shape",
        ),
        (
            format!("{gadgets}?watch=true&fieldSelector=spec.shape=round"),
            "spec.shape",
        ),
        (
            format!("{base}/apis/example.com/v1/gadgets?fieldSelector=status.x=1"),
            "status.x",
        ),
        // A cluster-scoped kind has no namespace to select by.
        (
            format!("{pools}?fieldSelector=metadata.namespace=default"),
            "metadata.namespace",
        ),
    ] {
        let (code, body) = get(&http, &url).await;
        assert_eq!(code, 400, "{url}: {body}");
        assert_eq!(body["reason"], "BadRequest", "{body}");
        assert_eq!(
            body["message"],
            format!("field label not supported: {label}"),
            "{url}"
        );
    }
    let (code, body) = get(&http, &format!("{pools}?fieldSelector=metadata.name=gold")).await;
    assert_eq!(code, 200, "{body}");
    server.shutdown().await;
}

/// A CRD whose `selectableFields` do not resolve to scalar fields of the version's schema is
/// refused on create and on update with apiextensions-apiserver's 422: one cause per bad
/// `jsonPath`, named by its index, and nothing is served.
#[tokio::test]
async fn crd_selectable_fields_are_validated_against_the_schema() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let crds = format!(
        "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        server.url()
    );
    let mut crd: Value = serde_yaml_ng::from_str(GADGET_CRD).unwrap();
    let good = crd["spec"]["versions"][0]["selectableFields"].clone();
    crd["spec"]["versions"][0]["selectableFields"] = json!([
        {"jsonPath": ".spec.color"},
        {"jsonPath": ".spec.missing"},
        {"jsonPath": ".metadata.name"},
        {"jsonPath": "spec.size"},
        {"jsonPath": ".spec.color"},
    ]);
    let (code, refused) = post(&http, &crds, crd.clone()).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(refused["reason"], "Invalid");
    assert_eq!(refused["details"]["group"], "apiextensions.k8s.io");
    let at = "spec.versions[0].selectableFields";
    assert_eq!(
        refused["details"]["causes"],
        json!([
            {"reason": "FieldValueInvalid", "field": format!("{at}[1].jsonPath"),
             "message": "Invalid value: \".spec.missing\": is an invalid path: does not refer to a valid field"},
            {"reason": "FieldValueInvalid", "field": format!("{at}[2].jsonPath"),
             "message": "Invalid value: \".metadata.name\": is an invalid path: does not refer to a valid field"},
            {"reason": "FieldValueInvalid", "field": format!("{at}[3].jsonPath"),
             "message": "Invalid value: \"spec.size\": is an invalid path: expected [ or . but got: spec"},
            {"reason": "FieldValueDuplicate", "field": format!("{at}[4].jsonPath"),
             "message": "Duplicate value: \".spec.color\""},
        ])
    );
    let gadgets = format!("{}/apis/example.com/v1/gadgets", server.url());
    assert_eq!(
        get(&http, &gadgets).await.0,
        404,
        "a refused CRD serves nothing"
    );

    // Created with valid fields, then updated to select a non-scalar field: refused too.
    crd["spec"]["versions"][0]["selectableFields"] = good;
    let (code, body) = post(&http, &crds, crd).await;
    assert_eq!(code, 201, "{body}");
    let (code, refused) = common::merge_patch(
        &http,
        &format!("{crds}/gadgets.example.com"),
        json!({"spec": {"versions": [{
            "name": "v1", "served": true, "storage": true,
            "selectableFields": [{"jsonPath": ".spec"}],
            "schema": body["spec"]["versions"][0]["schema"]}]}}),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": format!("{at}[0].jsonPath"),
                "message": "Invalid value: \".spec\": must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed."}])
    );
    // The stored CRD still selects by its valid fields.
    let (code, _) = get(&http, &format!("{gadgets}?fieldSelector=spec.color=red")).await;
    assert_eq!(code, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn custom_resources_get_field_validation_from_their_schema() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    crds.create(&PostParams::default(), &crd_from_yaml(IPPOOL_CRD))
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let pools = format!("{}/apis/kube-lb.io/v1alpha1/ippools", server.url());
    let body = json!({
        "apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool", "metadata": {"name": "a"},
        "spec": {"cidrs": ["10.0.0.0/24"], "cidr": "typo", "extra": {"free": {"form": 1}}},
    });
    let (code, answer) = post(
        &http,
        &format!("{pools}?fieldValidation=Strict"),
        body.clone(),
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    assert_eq!(
        answer["message"],
        "IPPool in version \"v1alpha1\" cannot be handled as a IPPool: strict decoding error: \
         unknown field \"spec.cidr\""
    );
    // By default the field is pruned with a warning; what the schema preserves stays.
    let response = http.post(&pools).json(&body).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let warning = response.headers()["warning"].to_str().unwrap().to_string();
    assert_eq!(warning, "299 - \"unknown field \\\"spec.cidr\\\"\"");
    let stored: Value = response.json().await.unwrap();
    assert!(stored["spec"].get("cidr").is_none(), "{stored}");
    assert_eq!(stored["spec"]["extra"], json!({"free": {"form": 1}}));
}

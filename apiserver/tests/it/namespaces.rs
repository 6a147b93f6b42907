//! A namespace's deletion as kube-apiserver and the namespace controller carry it out: the
//! namespace is Terminating while its contents go, creates in it are refused, objects held by
//! finalizers keep it (and its conditions say so), and it goes with the last of them.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube_lb_apiserver::ApiServer;
use serde_json::{Value, json};

use crate::common::{self, lb_service};

const HOLD: &str = "example.com/hold";

async fn create_namespace(namespaces: &Api<Namespace>, name: &str) {
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap();
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

fn condition<'a>(namespace: &'a Value, kind: &str) -> &'a Value {
    namespace["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {namespace}"))
}

#[tokio::test]
async fn a_deleted_namespace_terminates_until_its_finalizers_are_done() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_namespace(&namespaces, "team").await;
    let services: Api<Service> = Api::namespaced(client.clone(), "team");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let mut held = lb_service("held", 80);
    held.metadata.namespace = Some("team".into());
    held.metadata.finalizers = Some(vec![HOLD.into()]);
    services
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    config_maps
        .create(&PostParams::default(), &config_map("loose"))
        .await
        .unwrap();

    // The delete answers with the namespace, Terminating (not a Success status).
    let answer = namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = answer.left().expect("the namespace, not a status");
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    assert!(terminating.metadata.deletion_timestamp.is_some());

    // What nothing holds is gone; the held Service is being deleted and keeps the namespace.
    assert!(config_maps.get_opt("loose").await.unwrap().is_none());
    let service = services.get("held").await.unwrap();
    assert!(service.metadata.deletion_timestamp.is_some());
    let http = reqwest::Client::new();
    let ns_url = format!("{}/api/v1/namespaces/team", server.url());
    let namespace = common::eventually(Duration::from_secs(5), "the conditions", || async {
        let (code, body) = common::get(&http, &ns_url).await;
        assert_eq!(code, 200, "{body}");
        body["status"]["conditions"].is_array().then_some(body)
    })
    .await;
    assert_eq!(namespace["status"]["phase"], "Terminating");
    assert_eq!(namespace["spec"]["finalizers"], json!(["kubernetes"]));
    let content = condition(&namespace, "NamespaceContentRemaining");
    assert_eq!(content["status"], "True");
    assert_eq!(
        content["message"],
        "Some resources are remaining: services. has 1 resource instances"
    );
    let finalizers = condition(&namespace, "NamespaceFinalizersRemaining");
    assert_eq!(
        finalizers["message"],
        format!(
            "Some content in the namespace has finalizers remaining: {HOLD} in 1 resource instances"
        )
    );
    assert_eq!(
        condition(&namespace, "NamespaceDeletionContentFailure")["status"],
        "False"
    );

    // No new content while it terminates, by name or by generateName.
    let refused = config_maps
        .create(&PostParams::default(), &config_map("late"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else {
        panic!("{refused:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace team \
         because it is being terminated"
    );
    let cm_url = format!("{}/api/v1/namespaces/team/configmaps", server.url());
    let (code, body) = common::post(
        &http,
        &cm_url,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "late-"}}),
    )
    .await;
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body["message"],
        "configmaps is forbidden: unable to create new content in namespace team because it \
         is being terminated"
    );
    assert_eq!(
        body["details"]["causes"],
        json!([{
            "reason": "NamespaceTerminating",
            "message": "namespace team is being terminated",
            "field": "metadata.namespace",
        }])
    );
    // Deleting it again changes nothing and answers with it.
    let again = namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    assert!(again.is_left());

    // The holder lets go: the Service goes, and the namespace with it.
    let uid = namespace["metadata"]["uid"].as_str().unwrap().to_string();
    services
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        await_condition(namespaces.clone(), "team", conditions::is_deleted(&uid)),
    )
    .await
    .expect("the namespace goes with its last object")
    .unwrap();
    assert!(services.get_opt("held").await.unwrap().is_none());

    // The name is free again, and a new namespace of that name starts Active and empty.
    create_namespace(&namespaces, "team").await;
    let fresh = namespaces.get("team").await.unwrap();
    assert_eq!(fresh.status.unwrap().phase.as_deref(), Some("Active"));
    config_maps
        .create(&PostParams::default(), &config_map("new"))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_empty_namespace_is_gone_when_its_delete_answers() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_namespace(&namespaces, "scratch").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client, "scratch");
    config_maps
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    namespaces
        .delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    assert!(namespaces.get_opt("scratch").await.unwrap().is_none());
    assert!(config_maps.get_opt("a").await.unwrap().is_none());
    // A dry run marks nothing.
    create_namespace(&namespaces, "kept").await;
    let dry = namespaces
        .delete("kept", &DeleteParams::default().dry_run())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(dry.status.unwrap().phase.as_deref(), Some("Terminating"));
    let kept = namespaces.get("kept").await.unwrap();
    assert_eq!(kept.status.unwrap().phase.as_deref(), Some("Active"));
    assert!(kept.metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn the_finalize_subresource_sets_spec_finalizers() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create_namespace(&namespaces, "stuck").await;
    let services: Api<Service> = Api::namespaced(client, "stuck");
    let mut held = lb_service("held", 80);
    held.metadata.namespace = Some("stuck".into());
    held.metadata.finalizers = Some(vec![HOLD.into()]);
    services
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces/stuck/finalize", server.url());

    // Only PUT is served.
    let (code, _) = common::get(&http, &url).await;
    assert_eq!(code, 405);
    let (_, current) =
        common::get(&http, &format!("{}/api/v1/namespaces/stuck", server.url())).await;
    // A name without a domain must be a standard finalizer.
    let mut bad = current.clone();
    bad["spec"]["finalizers"] = json!(["kubernetes", "mine"]);
    let (code, body) = common::put(&http, &url, bad).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"],
        json!([{
            "reason": "FieldValueInvalid",
            "message": "Invalid value: \"mine\": name is neither a standard finalizer name nor is it fully qualified",
            "field": "spec.finalizers[1]",
        }])
    );
    // A qualified one is kept, and the main resource cannot change them.
    let mut extra = current.clone();
    extra["spec"]["finalizers"] = json!(["kubernetes", "example.com/mine"]);
    let (code, body) = common::put(&http, &url, extra).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["spec"]["finalizers"],
        json!(["kubernetes", "example.com/mine"])
    );
    let (code, body) = common::merge_patch(
        &http,
        &format!("{}/api/v1/namespaces/stuck", server.url()),
        json!({"spec": {"finalizers": []}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["spec"]["finalizers"],
        json!(["kubernetes", "example.com/mine"])
    );

    // Deleted, the namespace waits for the Service's finalizer and for its own.
    namespaces
        .delete("stuck", &DeleteParams::default())
        .await
        .unwrap();
    let (_, terminating) =
        common::get(&http, &format!("{}/api/v1/namespaces/stuck", server.url())).await;
    assert_eq!(terminating["status"]["phase"], "Terminating");
    // What operators do with a namespace stuck this way: finalize it by hand. Emptying
    // spec.finalizers removes it at once, whatever it still holds (as upstream).
    let mut emptied = terminating.clone();
    emptied["spec"]["finalizers"] = json!([]);
    let (code, body) = common::put(&http, &url, emptied).await;
    assert_eq!(code, 200, "{body}");
    assert!(namespaces.get_opt("stuck").await.unwrap().is_none());
}

#[tokio::test]
async fn namespaces_are_deleted_one_at_a_time() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces", server.url());
    let (code, body) = common::call(&http, reqwest::Method::DELETE, &url, "", None).await;
    assert_eq!(code, 405, "{body}");
    assert_eq!(body["reason"], "MethodNotAllowed");
    let (code, _) = common::get(&http, &format!("{url}/default")).await;
    assert_eq!(code, 200, "the collection delete touched nothing");
    // Discovery says so, and names the finalize subresource.
    let (_, resources) = common::get(&http, &format!("{}/api/v1", server.url())).await;
    let find = |name: &str| {
        resources["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {resources}"))
    };
    let verbs = find("namespaces")["verbs"].clone();
    assert!(
        !verbs
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "deletecollection"),
        "{verbs}"
    );
    assert_eq!(find("namespaces/finalize")["verbs"], json!(["update"]));
    assert!(
        find("services")["verbs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == "deletecollection")
    );
}

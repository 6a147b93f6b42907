//! Backend selection end to end: the node set (additions, removals, the exclusion label) and
//! `externalTrafficPolicy: Local` (only nodes with ready endpoints) reach the provider.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use controller_support::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_lb::controller::nodes::EXCLUDE_LABEL;
use serde_json::json;

async fn label_node(client: &kube::Client, name: &str, key: &str, value: Option<&str>) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: value}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn node_changes_and_the_exclude_label_change_the_backend_set() {
    let (server, client, running) = server_and_controller().await;
    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    wait_backends(&running.provider, "default/web", &["n1"]).await;

    server.seed(node("n2")).unwrap();
    wait_backends(&running.provider, "default/web", &["n1", "n2"]).await;
    let events = eventually("UpdatedLoadBalancer", || async {
        events_of(&client, "default", "web")
            .await
            .get("UpdatedLoadBalancer")
            .cloned()
    })
    .await;
    assert!(!events.is_empty());

    label_node(&client, "n2", EXCLUDE_LABEL, Some("true")).await;
    wait_backends(&running.provider, "default/web", &["n1"]).await;
    // "false" is the one value that does not exclude.
    label_node(&client, "n2", EXCLUDE_LABEL, Some("false")).await;
    wait_backends(&running.provider, "default/web", &["n1", "n2"]).await;

    Api::<Node>::all(client.clone())
        .delete("n1", &DeleteParams::default())
        .await
        .unwrap();
    wait_backends(&running.provider, "default/web", &["n2"]).await;
    running.stop().await;
}

#[tokio::test]
async fn local_traffic_policy_uses_only_nodes_with_ready_endpoints() {
    let server = server().await;
    server.seed(node("n2")).unwrap();
    server.seed(node("n3")).unwrap();
    server
        .seed(slice("default", "web", &[("n1", false), ("n2", true)]))
        .unwrap();
    let client = server.client().unwrap();
    let running = start_controller(&server, test_config(), true);
    svc_lb("default", "web").local().create(&client).await;
    svc_lb("default", "cluster").create(&client).await;
    wait_address(&client, "default", "web").await;
    wait_backends(&running.provider, "default/web", &["n2"]).await;
    wait_backends(&running.provider, "default/cluster", &["n1", "n2", "n3"]).await;

    // n1's endpoint becomes ready, n3 gains one: the slice change re-syncs only that Service.
    // (The controller's own status write re-syncs nothing: one ensure to converge.)
    let cluster_calls = eventually("the Cluster Service to settle", || async {
        let n = running.provider.ensures_of("default/cluster").len();
        (n >= 1).then_some(n)
    })
    .await;
    let updated = slice(
        "default",
        "web",
        &[("n1", true), ("n2", true), ("n3", true)],
    );
    let name = updated["metadata"]["name"].as_str().unwrap().to_string();
    Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"endpoints": updated["endpoints"]})),
        )
        .await
        .unwrap();
    wait_backends(&running.provider, "default/web", &["n1", "n2", "n3"]).await;
    assert_eq!(
        running.provider.ensures_of("default/cluster").len(),
        cluster_calls
    );
    running.stop().await;
}

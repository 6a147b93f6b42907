//! Seed 002's `spec.topologyKeys`, written as the seed writes it, end to end: the embedded API
//! server admits and stores the field (mirroring it into the annotation typed 1.33 clients can
//! see), the proxy's watch loop reads it, and a node's nftables rules route by it. Traffic
//! from a client namespace to real pods on two nodes.

#![cfg(feature = "watch")]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::testing::{node, slice};
use kube_lb_dataplane::watch;
use support::{Lab, eventually, names, node_ip};

/// Seed 002, "Hanya pada endpoint pada Node lokal" (only endpoints on the local node), with
/// the cluster IP pinned so the lab's client routes reach it.
fn seed_manifest() -> String {
    include_str!("../../../annotations/tests/fixtures/seeds/002-topology-hostname-only.yaml")
        .replace(
            "  name: my-service\n",
            "  name: my-service\n  namespace: default\n",
        )
        .replace("spec:\n", "spec:\n  clusterIP: 10.96.0.20\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_002_topology_keys_field_routes_traffic() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let server = ApiServer::builder().start().await.expect("api server");
    server
        .seed(node("n1", "za", "r1", &[&node_ip(1)]))
        .expect("seed n1");
    server
        .seed(node("n2", "zb", "r1", &[&node_ip(2)]))
        .expect("seed n2");
    let stored = server
        .apply_manifests(&seed_manifest())
        .expect("the seed's manifest is admitted");
    assert_eq!(
        stored[0]["spec"]["topologyKeys"],
        serde_json::json!(["kubernetes.io/hostname"])
    );
    let client = server.client().expect("client");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let typed = services.get("my-service").await.expect("typed get");
    assert_eq!(
        typed
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("service.kubernetes.io/topology-keys"))
            .map(String::as_str),
        Some("kubernetes.io/hostname"),
        "a typed client sees the keys"
    );
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices
        .create(
            &PostParams::default(),
            &slice("default", "my-service", "my-service-1")
                .port("", "TCP", 8080)
                .endpoint(&a.ip, &a.node)
                .endpoint(&b.ip, &b.node)
                .build(),
        )
        .await
        .expect("create slice");

    let (proxy, health) = support::node_proxy(
        support::nft_dataplane(&lab.ns("n1")),
        Duration::from_millis(100),
        Duration::from_secs(2),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(watch::run(client.clone(), proxy, async {
        let _ = stopped.await;
    }));

    let lab_ref = &lab;
    let only = |expected: &'static str| {
        move || {
            let outcomes = lab_ref.tcp("c", "10.96.0.20:80", 12, 1000);
            outcomes.iter().all(|o| o.name().is_some())
                && names(&outcomes) == BTreeSet::from([expected.to_string()])
        }
    };
    // Client traffic enters node n1: only n1's endpoint, never n2's.
    assert!(
        eventually(Duration::from_secs(20), only("a")),
        "hostname topology not applied: {:?}",
        lab.tcp("c", "10.96.0.20:80", 4, 1000)
    );

    // The field changes through the API: the catch-all lets n2's endpoint serve once n1 has none.
    services
        .patch(
            "my-service",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"topologyKeys": ["kubernetes.io/hostname", "*"]}}),
            ),
        )
        .await
        .expect("patch the field");
    let mut current = slices.get("my-service-1").await.expect("get slice");
    current
        .endpoints
        .retain(|endpoint| endpoint.addresses.first() == Some(&b.ip));
    slices
        .replace("my-service-1", &PostParams::default(), &current)
        .await
        .expect("replace slice");
    assert!(
        eventually(Duration::from_secs(10), only("b")),
        "catch-all not applied: {:?}",
        lab.tcp("c", "10.96.0.20:80", 4, 1000)
    );

    // Back to hostname only: n1 has no endpoint of its own, so nothing is reached.
    services
        .patch(
            "my-service",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"topologyKeys": ["kubernetes.io/hostname"]}}),
            ),
        )
        .await
        .expect("patch the field back");
    assert!(
        eventually(Duration::from_secs(10), || {
            lab_ref
                .tcp("c", "10.96.0.20:80", 4, 1000)
                .iter()
                .all(|o| o.name().is_none())
        }),
        "n2's endpoint still served under hostname-only topology"
    );
    assert!(health.status().healthy);

    let _ = stop.send(());
    running.await.expect("join").expect("proxy loop");
    drop(server);
}

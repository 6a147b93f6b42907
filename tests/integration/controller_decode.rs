//! One object that does not decode must not poison the rest: with an undecodable Service, Node
//! and EndpointSlice in the API server (put below its validation, as a state file or a lenient
//! server would hand them out), the controller still gives every good Service its address with
//! the right backends, names the bad Service and its field path in a Warning Event, and counts
//! the skipped objects.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::Api;
use serde_json::{Value, json};

use crate::controller_support::*;

/// A LoadBalancer Service whose node port is a string: k8s-openapi's `Service` refuses it.
fn undecodable_service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "bad",
            "namespace": "default",
            "uid": "0b5e7a9e-0000-4000-8000-000000000bad",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z"
        },
        "spec": {
            "type": "LoadBalancer",
            "clusterIP": "10.96.0.250",
            "selector": {"app": "bad"},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": "30000"}]
        }
    })
}

/// A Node whose `spec.unschedulable` is a string.
fn undecodable_node() -> Value {
    let mut node = node("n-bad");
    node["metadata"]["uid"] = json!("0b5e7a9e-0000-4000-8000-00000000node");
    node["metadata"]["resourceVersion"] = json!("1");
    node["spec"] = json!({"unschedulable": "yes"});
    node
}

/// An EndpointSlice of `default/local` with a ready endpoint on `n1`, whose `ready` is a
/// string: were it read, `n1` would be a backend of `local`.
fn undecodable_slice() -> Value {
    let mut slice = slice("default", "local", &[("n1", true)]);
    slice["metadata"]["name"] = json!("local-bad");
    slice["metadata"]["uid"] = json!("0b5e7a9e-0000-4000-8000-0000000slice");
    slice["metadata"]["resourceVersion"] = json!("1");
    slice["endpoints"][0]["conditions"]["ready"] = json!("true");
    slice
}

#[tokio::test]
async fn undecodable_objects_are_skipped_and_reported_while_the_rest_converge() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut n2 = node("n2");
    n2["status"]["addresses"][0]["address"] = json!("10.0.0.2");
    server.seed(n2).unwrap();
    svc_lb("default", "web").create(&client).await;
    // Given only the nodes with a ready endpoint (TKE's opt-in; everywhere else every node is
    // registered), so the good slice shows in its backends.
    svc_lb("default", "local")
        .local()
        .annotate(
            "service.kubernetes.io/local-svc-only-bind-node-with-pod",
            "true",
        )
        .create(&client)
        .await;
    server
        .seed(slice("default", "local", &[("n2", true)]))
        .unwrap();

    // Below validation: the store takes a dump back as it is (the state-file path).
    let mut dump = server.store().dump();
    for (resource, object) in [
        ("v1/services", undecodable_service()),
        ("v1/nodes", undecodable_node()),
        ("discovery.k8s.io/v1/endpointslices", undecodable_slice()),
    ] {
        dump.objects
            .entry(resource.to_string())
            .or_default()
            .push(Arc::new(object));
    }
    server.store().restore(dump).unwrap();
    // What a typed watch would meet: the whole list fails on one item.
    let typed = Api::<Service>::all(client.clone())
        .list(&Default::default())
        .await;
    assert!(typed.is_err(), "a typed list fails on the bad Service");
    assert!(
        Api::<Node>::all(client.clone())
            .list(&Default::default())
            .await
            .is_err(),
        "a typed list fails on the bad Node"
    );

    let mut config = test_config();
    config.cloud = kube_lb_annotations::Cloud::Tencent;
    let running = start_controller(&server, config, true);

    // Every good Service converges, with the good Nodes and the good slice as backends.
    let web = wait_address(&client, "default", "web").await;
    let local = wait_address(&client, "default", "local").await;
    assert_ne!(web, local);
    wait_backends(&running.provider, "default/web", &["n1", "n2"]).await;
    wait_backends(&running.provider, "default/local", &["n2"]).await;
    assert!(
        running.provider.ensures_of("default/bad").is_empty(),
        "the bad Service is not reconciled"
    );

    // The bad Service is named, with the field path, on itself.
    let notes = eventually("a DecodeFailed event on default/bad", || async {
        events_of(&client, "default", "bad")
            .await
            .get("DecodeFailed")
            .filter(|n| !n.is_empty())
            .cloned()
    })
    .await;
    assert!(
        notes.iter().any(|n| n.contains("spec.ports[0].nodePort")),
        "{notes:#?}"
    );

    // The watch keeps flowing after the bad objects: a Service created now converges too.
    svc_lb("default", "later").port(81).create(&client).await;
    wait_address(&client, "default", "later").await;

    let text = running.metrics.encode().unwrap();
    for resource in ["services", "nodes", "endpointslices"] {
        let prefix = format!("kube_lb_watch_decode_errors_total{{resource=\"{resource}\"}} ");
        let count: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
            .parse()
            .unwrap();
        assert!(count >= 1, "{resource}: {count}");
    }
    running.stop().await;
}

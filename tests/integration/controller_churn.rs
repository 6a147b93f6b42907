//! No churn on Node and EndpointSlice changes (issue 13, requirement 6), measured end to end:
//! 100 LoadBalancer Services and 50 Nodes on the embedded API server, the controller with the
//! `local` provider behind a recording provider, and the provider's `CallCounter`.
//!
//! Waiting rule. "Nothing happened" cannot be awaited directly, so each step waits for the
//! controller to have *seen* the change and then checks that nothing followed from it:
//! - the Node trigger publishes the resourceVersion of the last Node event it judged and how
//!   many re-syncs it started ([`NodeSync`]). Node events arrive in resourceVersion order on one
//!   watch and the trigger queues its re-syncs in the same step as it judges the event, so once
//!   it has judged the resourceVersion our last write returned, every re-sync our writes caused
//!   is already counted; an unchanged count means no Service was queued, hence no provider call
//!   can still come from them.
//! - where a re-sync is expected (the excluded node), the test waits for its visible effect
//!   (every Service's last ensure without that node) and then checks the exact counts.
//! - EndpointSlice events have no such counter: there a marker change to another Service's
//!   slice, on the same watch and later in order, is awaited through its own ensure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::controller_support;

use controller_support::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kube_lb::controller::nodes::EXCLUDE_LABEL;
use kube_lb::controller::{ControllerConfig, LoadBalancerController, NodeSync, Outcome};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use kube_lb_provider_core::CallCounter;
use serde_json::{Value, json};
use tokio::sync::watch;

const SERVICES: usize = 100;
const NODES: usize = 50;
/// Initial convergence of 100 Services is far more work than one condition of the other tests.
const CONVERGE_CEILING: Duration = Duration::from_secs(90);

fn node_name(i: usize) -> String {
    format!("node-{i:02}")
}

/// A Ready node (Ready for an hour) with its own InternalIP, a zone and a provider ID.
fn cluster_node(i: usize) -> Value {
    let name = node_name(i);
    let an_hour_ago = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": format!("zone-{}", i % 3),
        }},
        "spec": {"providerID": format!("local:///{name}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 200, i % 200 + 1)}],
            "conditions": [{
                "type": "Ready", "status": "True",
                "lastHeartbeatTime": Timestamp::now().to_string(),
                "lastTransitionTime": an_hour_ago.to_string(),
            }]
        }
    })
}

fn service_name(i: usize) -> String {
    format!("svc-{i:03}")
}

/// A controller like `start_controller`'s, also handing out the Node trigger's [`NodeSync`].
fn start(
    server: &RunningApiServer,
    config: ControllerConfig,
) -> (Running, watch::Receiver<NodeSync>) {
    let counter = CallCounter::new();
    let provider = Arc::new(RecordingProvider::new(
        server.client().unwrap(),
        counter.clone(),
    ));
    start_inspecting(
        server,
        config,
        true,
        provider,
        counter,
        LoadBalancerController::node_sync,
    )
}

/// Waits until the Node trigger has judged the event with `resource_version`, returning what
/// it had done by then.
async fn judged(node_sync: &mut watch::Receiver<NodeSync>, resource_version: &str) -> NodeSync {
    tokio::time::timeout(
        CEILING,
        node_sync.wait_for(|s| s.observed.as_deref() == Some(resource_version)),
    )
    .await
    .unwrap_or_else(|_| panic!("the Node trigger did not see resourceVersion {resource_version}"))
    .unwrap()
    .clone()
}

async fn wait_ready(running: &Running, count: usize) {
    let mut outcomes = running.outcomes.clone();
    tokio::time::timeout(
        CONVERGE_CEILING,
        outcomes.wait_for(|o| {
            o.values()
                .filter(|o| matches!(o, Outcome::Ready(_)))
                .count()
                == count
        }),
    )
    .await
    .expect("every Service converges")
    .unwrap();
}

/// Ensures per Service name.
fn ensures_per_service(provider: &RecordingProvider) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for call in provider.calls() {
        if let Call::Ensure { service, .. } = call {
            *out.entry(service).or_insert(0) += 1;
        }
    }
    out
}

async fn patch_node(client: &Client, name: &str, body: Value) -> String {
    Api::<Node>::all(client.clone())
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap()
        .resource_version()
        .unwrap()
}

async fn patch_node_status(client: &Client, name: &str, body: Value) -> String {
    Api::<Node>::all(client.clone())
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap()
        .resource_version()
        .unwrap()
}

fn ready_condition(status: &str, since: Timestamp) -> Value {
    json!({"status": {"conditions": [{
        "type": "Ready", "status": status,
        "lastHeartbeatTime": Timestamp::now().to_string(),
        "lastTransitionTime": since.to_string(),
    }]}})
}

async fn converged_cluster() -> (RunningApiServer, Client, Running, watch::Receiver<NodeSync>) {
    let server = ApiServer::builder().start().await.unwrap();
    for i in 0..NODES {
        server.seed(cluster_node(i)).unwrap();
    }
    let client = server.client().unwrap();
    let (running, node_sync) = start(&server, test_config());
    let started = Instant::now();
    for i in 0..SERVICES {
        svc_lb("default", &service_name(i)).create(&client).await;
    }
    wait_ready(&running, SERVICES).await;
    let per_service = ensures_per_service(&running.provider);
    println!(
        "converged: {SERVICES} Services on {NODES} nodes in {:?}, {} ensures, cloud calls {:?}",
        started.elapsed(),
        per_service.values().sum::<usize>(),
        running.counter.snapshot()
    );
    // The controller's own finalizer and status writes re-sync nothing.
    assert!(
        per_service.values().all(|n| *n == 1) && per_service.len() == SERVICES,
        "one ensure per Service to converge: {per_service:?}"
    );
    (server, client, running, node_sync)
}

#[tokio::test]
async fn churn_100_services_50_nodes_only_membership_changes_reach_the_provider() {
    let (_server, client, running, mut node_sync) = converged_cluster().await;
    let before = running.counter.snapshot();
    let ensures_before = running.provider.calls().len();
    let syncs_before = node_sync.borrow().syncs;

    // (a) A label no provider reads, on every node; then a heartbeat on every node.
    let started = Instant::now();
    let mut last = String::new();
    for i in 0..NODES {
        last = patch_node(
            &client,
            &node_name(i),
            json!({"metadata": {"labels": {"team": "blue"}}}),
        )
        .await;
    }
    for i in 0..NODES {
        last = patch_node_status(
            &client,
            &node_name(i),
            json!({"status": {"conditions": [{
                "type": "Ready", "status": "True",
                "lastHeartbeatTime": Timestamp::now().to_string(),
                "lastTransitionTime": (Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1)).to_string(),
            }]}}),
        )
        .await;
    }
    let seen = judged(&mut node_sync, &last).await;
    let calls = running.counter.snapshot().since(&before);
    println!(
        "(a) {} unrelated label changes and {} heartbeats judged in {:?}: {} re-syncs, {} cloud calls",
        NODES,
        NODES,
        started.elapsed(),
        seen.syncs - syncs_before,
        calls.total()
    );
    assert_eq!(seen.syncs, syncs_before, "an unrelated change re-synced");
    assert_eq!(calls.total(), 0, "cloud calls: {calls:?}");
    assert_eq!(running.provider.calls().len(), ensures_before);

    // (b) Every node flaps NotReady and back, well within the 60 s grace.
    let started = Instant::now();
    for i in 0..NODES {
        patch_node_status(
            &client,
            &node_name(i),
            ready_condition("False", Timestamp::now()),
        )
        .await;
    }
    for i in 0..NODES {
        last = patch_node_status(
            &client,
            &node_name(i),
            ready_condition("True", Timestamp::now()),
        )
        .await;
    }
    let seen = judged(&mut node_sync, &last).await;
    let calls = running.counter.snapshot().since(&before);
    println!(
        "(b) {} Ready flaps judged in {:?}: {} re-syncs, {} cloud calls",
        NODES,
        started.elapsed(),
        seen.syncs - syncs_before,
        calls.total()
    );
    assert_eq!(
        seen.syncs, syncs_before,
        "a Ready flap within the grace re-synced"
    );
    assert_eq!(calls.total(), 0, "cloud calls: {calls:?}");
    assert_eq!(running.provider.calls().len(), ensures_before);

    // (c) One node excluded: every Service updated exactly once, without it.
    let started = Instant::now();
    let excluded = node_name(7);
    let rv = patch_node(
        &client,
        &excluded,
        json!({"metadata": {"labels": {EXCLUDE_LABEL: "true"}}}),
    )
    .await;
    let seen = judged(&mut node_sync, &rv).await;
    assert_eq!(seen.syncs, syncs_before + 1, "one pass over the Services");
    eventually("every Service updated without the excluded node", || async {
        let updated = running
            .provider
            .calls()
            .into_iter()
            .skip(ensures_before)
            .filter(|c| matches!(c, Call::Ensure { backends, .. } if backends.len() == NODES - 1 && !backends.contains(&excluded)))
            .count();
        (updated == SERVICES).then_some(())
    })
    .await;
    let elapsed = started.elapsed();
    // A marker Service converging after that shows the controller idle again; nothing more
    // may have reached the provider for the 100 by then.
    svc_lb("default", "marker").create(&client).await;
    wait_address(&client, "default", "marker").await;
    let after = running.provider.calls();
    let new: Vec<&Call> = after[ensures_before..]
        .iter()
        .filter(|c| !matches!(c, Call::Ensure { service, .. } if service == "default/marker"))
        .collect();
    let per_service = ensures_per_service(&running.provider);
    let calls = running.counter.snapshot().since(&before);
    println!(
        "(c) one node excluded: {} ensures for {SERVICES} Services in {elapsed:?}; cloud calls {calls:?} (marker included)",
        new.len()
    );
    assert_eq!(new.len(), SERVICES, "exactly one update per Service");
    assert!(
        per_service
            .iter()
            .filter(|(s, _)| *s != "default/marker")
            .all(|(_, n)| *n == 2),
        "{per_service:?}"
    );
    running.stop().await;
}

#[tokio::test]
async fn node_not_ready_past_the_grace_is_removed_and_added_back_at_once() {
    let server = ApiServer::builder().start().await.unwrap();
    for i in 0..3 {
        server.seed(cluster_node(i)).unwrap();
    }
    let client = server.client().unwrap();
    let grace = Duration::from_secs(3);
    let mut config = test_config();
    config.node_ready_grace = grace;
    let (running, mut node_sync) = start(&server, config);
    for i in 0..5 {
        svc_lb("default", &service_name(i)).create(&client).await;
    }
    wait_ready(&running, 5).await;
    let ensures_before = running.provider.calls().len();
    let syncs_before = node_sync.borrow().syncs;

    let down = node_name(1);
    let since = Timestamp::now();
    let started = Instant::now();
    let rv = patch_node_status(&client, &down, ready_condition("False", since)).await;
    // Within the grace: judged, nothing re-synced.
    let seen = judged(&mut node_sync, &rv).await;
    assert_eq!(seen.syncs, syncs_before);
    assert_eq!(running.provider.calls().len(), ensures_before);

    // Past the grace, with no further Node event: removed from every Service.
    let without = [node_name(0), node_name(2)];
    eventually("the NotReady node removed after the grace", || async {
        let calls = running.provider.calls();
        let removed = calls[ensures_before..]
            .iter()
            .filter(|c| matches!(c, Call::Ensure { backends, .. } if backends == &without))
            .count();
        (removed == 5).then_some(())
    })
    .await;
    let removed_after = started.elapsed();
    println!("NotReady node removed after {removed_after:?} (grace {grace:?})");
    assert!(
        removed_after >= grace - Duration::from_millis(100),
        "removed before the grace ran out: {removed_after:?}"
    );
    assert_eq!(running.provider.calls().len(), ensures_before + 5);

    // Ready again: added back at once (one re-sync, no stabilisation delay).
    let started = Instant::now();
    patch_node_status(&client, &down, ready_condition("True", Timestamp::now())).await;
    let all = [node_name(0), node_name(1), node_name(2)];
    eventually("the node added back", || async {
        let calls = running.provider.calls();
        let added = calls[ensures_before + 5..]
            .iter()
            .filter(|c| matches!(c, Call::Ensure { backends, .. } if backends == &all))
            .count();
        (added == 5).then_some(())
    })
    .await;
    println!("Ready node added back after {:?}", started.elapsed());
    assert!(
        started.elapsed() < grace,
        "added back only after {:?}",
        started.elapsed()
    );
    running.stop().await;
}

#[tokio::test]
async fn local_service_churns_only_when_its_set_of_nodes_with_ready_endpoints_changes() {
    let server = ApiServer::builder().start().await.unwrap();
    for i in 0..3 {
        server.seed(cluster_node(i)).unwrap();
    }
    let (n0, n1, n2) = (node_name(0), node_name(1), node_name(2));
    server
        .seed(slice("default", "web", &[(&n0, true), (&n1, false)]))
        .unwrap();
    server
        .seed(slice("default", "marker", &[(&n0, true)]))
        .unwrap();
    let client = server.client().unwrap();
    // The backends follow the endpoints only where the load balancer is given just the nodes
    // with one: TKE's `local-svc-only-bind-node-with-pod` (everywhere else every eligible node
    // is registered, and no endpoint change is a sync: controller_backends.rs).
    let mut config = test_config();
    config.cloud = kube_lb_annotations::Cloud::Tencent;
    let (running, _node_sync) = start(&server, config);
    let bound = "service.kubernetes.io/local-svc-only-bind-node-with-pod";
    svc_lb("default", "web")
        .local()
        .annotate(bound, "true")
        .create(&client)
        .await;
    svc_lb("default", "marker")
        .local()
        .annotate(bound, "true")
        .create(&client)
        .await;
    wait_ready(&running, 2).await;
    assert_eq!(running.provider.ensures_of("default/web").len(), 1);
    let before = running.counter.snapshot();
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default");
    let set_endpoints = |service: &'static str, endpoints: Vec<(&str, bool)>| {
        let slices = slices.clone();
        let body = slice("default", service, &endpoints);
        async move {
            let name = body["metadata"]["name"].as_str().unwrap().to_string();
            slices
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"endpoints": body["endpoints"]})),
                )
                .await
                .unwrap();
        }
    };
    // More endpoints on n0, which already has a ready one; n1's stays unready: same node set.
    set_endpoints(
        "web",
        vec![(&n0, true), (&n0, true), (&n0, false), (&n1, false)],
    )
    .await;
    // The marker's slice changes its node set; its ensure shows the web change was judged.
    set_endpoints("marker", vec![(&n0, true), (&n2, true)]).await;
    eventually("the marker re-synced", || async {
        (running.provider.ensures_of("default/marker").len() == 2).then_some(())
    })
    .await;
    assert_eq!(running.provider.ensures_of("default/web").len(), 1);
    assert_eq!(
        running.counter.snapshot().since(&before).total(),
        1,
        "only the marker's ensure (one read)"
    );

    // n1's endpoint turns ready: the node set changes, one ensure.
    set_endpoints("web", vec![(&n0, true), (&n1, true)]).await;
    eventually("web re-synced with n1", || async {
        match running.provider.ensures_of("default/web").as_slice() {
            [_, Call::Ensure { backends, .. }] if backends == &[n0.clone(), n1.clone()] => Some(()),
            _ => None,
        }
    })
    .await;
    running.stop().await;
}

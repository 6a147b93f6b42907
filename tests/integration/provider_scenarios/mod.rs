//! One scenario table, run against every cloud provider built into this binary: AWS (moto's
//! server), GCP (the GCE mock), Azure (the ARM mock) and OpenStack (the Keystone + Octavia +
//! Neutron mock). Each scenario drives the provider through the `LoadBalancerProvider` trait
//! only, with the same Service parsed by the real annotation parser, and checks the provider's
//! call counter plus the cloud's own state.
//!
//! Run: `cargo test --features aws,gcp,azure --test integration provider_scenarios::`.
#![cfg(any(
    feature = "aws",
    feature = "gcp",
    feature = "azure",
    feature = "openstack",
    feature = "baidu",
    feature = "tencent"
))]
#![allow(clippy::unwrap_used)]

pub(crate) mod scenarios;

use std::collections::BTreeSet;

use kube_lb_provider_core::{BackendNode, CallCounter, CallKind, CallSnapshot, LoadBalancerStatus};
use scenarios::{Harness, Svc};

/// Mutating operations recorded since `before`, with their counts.
fn mutated(counter: &CallCounter, before: &CallSnapshot) -> Vec<(String, u64)> {
    counter
        .snapshot()
        .since(before)
        .iter()
        .filter(|(record, count)| record.kind == CallKind::Mutate && *count > 0)
        .map(|(record, count)| (record.operation.to_string(), count))
        .collect()
}

/// Runs `ensure` and returns the status plus the mutating operations it made.
async fn ensure<H: Harness>(
    h: &H,
    svc: &Svc,
    nodes: &[BackendNode],
) -> (LoadBalancerStatus, Vec<(String, u64)>) {
    let counter = h.counter();
    let before = counter.snapshot();
    let status = h
        .provider()
        .ensure(&svc.spec(H::CLOUD), nodes)
        .await
        .unwrap_or_else(|e| panic!("{}: ensure failed: {e}", h.provider().name()));
    (status, mutated(&counter, &before))
}

fn assert_has_address(status: &LoadBalancerStatus, provider: &str) {
    assert!(
        !status.ingress.is_empty()
            && status
                .ingress
                .iter()
                .all(|i| i.ip.is_some() || i.hostname.as_deref().is_some_and(|h| !h.is_empty())),
        "{provider}: status has no address: {status:?}"
    );
}

/// A resync of an unchanged spec: zero mutating calls by the provider's counter and, where the
/// mock keeps a journal, by the server's own record.
async fn assert_noop_resync<H: Harness>(h: &H, svc: &Svc, nodes: &[BackendNode], when: &str) {
    let mark = h.mark();
    let (status, mutations) = ensure(h, svc, nodes).await;
    let name = h.provider().name();
    assert_eq!(
        mutations,
        Vec::<(String, u64)>::new(),
        "{name}: resync {when} mutated"
    );
    assert_eq!(
        h.mutations_seen_by_cloud_since(mark),
        Vec::<String>::new(),
        "{name}: the mock saw mutations on resync {when}"
    );
    assert_has_address(&status, name);
}

async fn create_reports_an_address<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (status, mutations) = ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();
    assert_has_address(&status, name);
    assert!(!mutations.is_empty(), "{name}: create made no calls");
    assert!(!h.owned().await.is_empty(), "{name}: nothing in the cloud");
    // The addresses: `annotations` are what ensure asks the controller to write back on the
    // Service (Tencent's create-time records), not cloud state status() could read.
    assert_eq!(
        h.provider()
            .status(&svc.key(H::CLOUD))
            .await
            .unwrap()
            .map(|s| s.ingress),
        Some(status.ingress),
        "{name}: status() disagrees with ensure()"
    );
}

async fn immediate_resync_makes_no_mutating_call<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, &svc, &h.nodes()).await;
    assert_noop_resync(&h, &svc, &h.nodes(), "after create").await;
    let (again, _) = ensure(&h, &svc, &h.nodes()).await;
    assert_eq!(again, first, "{}: address changed", h.provider().name());
}

async fn port_change_converges_and_keeps_the_address<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();

    let changed = svc.clone().ports(&[(80, 30080), (8443, 30443)]);
    let (status, mutations) = ensure(&h, &changed, &h.nodes()).await;
    assert!(!mutations.is_empty(), "{name}: a new port made no calls");
    assert_eq!(status, first, "{name}: the address moved on a port change");
    assert_noop_resync(&h, &changed, &h.nodes(), "after adding a port").await;

    let replaced = svc.clone().ports(&[(8443, 30443)]);
    let (status, mutations) = ensure(&h, &replaced, &h.nodes()).await;
    assert!(
        !mutations.is_empty(),
        "{name}: removing a port made no calls"
    );
    assert_eq!(status, first, "{name}: the address moved on a port removal");
    assert_noop_resync(&h, &replaced, &h.nodes(), "after removing a port").await;
}

async fn node_added_mutates_only_registration<H: Harness>() {
    let mut h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();

    let mut nodes = h.nodes();
    nodes.push(h.add_node().await);
    let (status, mutations) = ensure(&h, &svc, &nodes).await;
    assert_eq!(status, first, "{name}: the address moved on a node add");
    assert!(
        !mutations.is_empty(),
        "{name}: the new node was not registered"
    );
    let allowed: BTreeSet<&str> = h.registration_operations().iter().copied().collect();
    let unexpected: Vec<&(String, u64)> = mutations
        .iter()
        .filter(|(op, _)| !allowed.contains(op.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{name}: a node add mutated more than the registration ({allowed:?}): {mutations:?}"
    );
    assert_noop_resync(&h, &svc, &nodes, "after a node add").await;
}

async fn local_cluster_switch_converges<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();

    let changes_lb = h.traffic_policy_changes_the_load_balancer();
    let local = svc.clone().local(32123);
    let (status, mutations) = ensure(&h, &local, &h.nodes()).await;
    assert_eq!(
        !mutations.is_empty(),
        changes_lb,
        "{name}: Cluster → Local made calls: {mutations:?} (expected some: {changes_lb})"
    );
    assert_eq!(
        status, first,
        "{name}: the address moved on Cluster → Local"
    );
    assert_noop_resync(&h, &local, &h.nodes(), "after Cluster → Local").await;

    let cluster = local.cluster();
    let (status, mutations) = ensure(&h, &cluster, &h.nodes()).await;
    assert_eq!(
        !mutations.is_empty(),
        changes_lb,
        "{name}: Local → Cluster made calls: {mutations:?} (expected some: {changes_lb})"
    );
    assert_eq!(
        status, first,
        "{name}: the address moved on Local → Cluster"
    );
    assert_noop_resync(&h, &cluster, &h.nodes(), "after Local → Cluster").await;
}

async fn delete_removes_everything_and_repeats_freely<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let key = svc.key(H::CLOUD);
    ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();

    h.provider()
        .delete(&key)
        .await
        .unwrap_or_else(|e| panic!("{name}: delete failed: {e}"));
    assert_eq!(h.provider().status(&key).await.unwrap(), None, "{name}");
    assert_eq!(h.owned().await, Vec::<String>::new(), "{name}: left behind");

    let counter = h.counter();
    let before = counter.snapshot();
    let mark = h.mark();
    h.provider()
        .delete(&key)
        .await
        .unwrap_or_else(|e| panic!("{name}: second delete failed: {e}"));
    assert_eq!(
        mutated(&counter, &before),
        Vec::<(String, u64)>::new(),
        "{name}: a second delete mutated"
    );
    assert_eq!(
        h.mutations_seen_by_cloud_since(mark),
        Vec::<String>::new(),
        "{name}: the mock saw mutations on a second delete"
    );
}

async fn delete_after_the_load_balancer_vanished_succeeds<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let key = svc.key(H::CLOUD);
    ensure(&h, &svc, &h.nodes()).await;
    let name = h.provider().name();

    h.remove_load_balancer_out_of_band().await;
    h.provider()
        .delete(&key)
        .await
        .unwrap_or_else(|e| panic!("{name}: delete after out-of-band removal failed: {e}"));
    assert_eq!(h.provider().status(&key).await.unwrap(), None, "{name}");
    assert_eq!(
        h.owned().await,
        Vec::<String>::new(),
        "{name}: what the removed LB left behind was not cleaned up"
    );
}

/// Scenarios × clouds: every scenario becomes one test per cloud, in a module named after
/// the cloud and compiled only with its cargo feature.
macro_rules! scenario_table {
    (
        clouds: [$($cloud:ident => $harness:ty, $feature:literal;)*]
        scenarios: $scenarios:tt
    ) => {
        $(
            #[cfg(feature = $feature)]
            mod $cloud {
                scenario_table!(@tests $harness, $scenarios);
            }
        )*
    };
    (@tests $harness:ty, [$($scenario:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                super::$scenario::<$harness>().await;
            }
        )*
    };
}

scenario_table! {
    clouds: [
        aws => crate::provider_scenarios::scenarios::aws::Aws, "aws";
        gcp => crate::provider_scenarios::scenarios::gcp::Gcp, "gcp";
        azure => crate::provider_scenarios::scenarios::azure::Azure, "azure";
        openstack => crate::provider_scenarios::scenarios::openstack::OpenStack, "openstack";
        baidu => crate::provider_scenarios::scenarios::baidu::Baidu, "baidu";
        tencent => crate::provider_scenarios::scenarios::tencent::Tencent, "tencent";
    ]
    scenarios: [
        create_reports_an_address,
        immediate_resync_makes_no_mutating_call,
        port_change_converges_and_keeps_the_address,
        node_added_mutates_only_registration,
        local_cluster_switch_converges,
        delete_removes_everything_and_repeats_freely,
        delete_after_the_load_balancer_vanished_succeeds,
    ]
}

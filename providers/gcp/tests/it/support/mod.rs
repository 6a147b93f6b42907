//! Fixtures for the GCP provider against the GCE mock: the cluster's node VMs, the `gce.conf`
//! pointing at the mock, a provider built from it with fast retries and polls, and the
//! `BackendNode`s of those VMs. The provider tests use it as `mod support;`; the root
//! integration tests (the shared scenario table and `cloud_fixtures`) compile this same file
//! through `#[path]`, so their set-up cannot drift from the provider's own.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_mock_gce::{MockGce, MockGceBuilder};
use kube_lb_provider_core::{BackendNode, RateLimits, RetryPolicy};
use kube_lb_provider_gcp::{CloudConfig, GcpProvider, Options, PollSettings};

/// The zone of the first node (and the config's `local-zone`).
pub const ZONE_A: &str = "us-central1-a";
/// The zone of the second node.
pub const ZONE_B: &str = "us-central1-b";
/// The network tag every node VM carries.
pub const TAG: &str = "gke-c1-node";

/// Collections the provider writes per Service or per cluster.
pub const OWNED_COLLECTIONS: [&str; 8] = [
    "forwardingRules",
    "addresses",
    "targetPools",
    "httpHealthChecks",
    "healthChecks",
    "firewalls",
    "backendServices",
    "instanceGroups",
];

/// The mock with the cluster's two node VMs: `gke-c1-node-1` in [`ZONE_A`] and
/// `gke-c1-node-2` in [`ZONE_B`], both tagged [`TAG`] (the Nodes of
/// `tests/fixtures/clouds/gcp.yaml`).
pub fn two_node_builder() -> MockGceBuilder {
    MockGce::builder()
        .instance(ZONE_A, "gke-c1-node-1", &[TAG])
        .instance(ZONE_B, "gke-c1-node-2", &[TAG])
}

/// The same plus `gke-c1-node-3` in [`ZONE_A`].
pub fn three_node_builder() -> MockGceBuilder {
    two_node_builder().instance(ZONE_A, "gke-c1-node-3", &[TAG])
}

/// The two-node mock, started.
pub async fn two_node_mock() -> MockGce {
    two_node_builder().start().await.unwrap()
}

/// A `gce.conf` for `project` calling the Compute API at `endpoint`; `extra` (whole lines, e.g.
/// `cluster-id = c1\n`) goes after the network settings.
pub fn gce_conf(project: &str, endpoint: &str, extra: &str) -> String {
    format!(
        "[global]\nproject-id = {project}\nlocal-zone = {ZONE_A}\nmultizone = true\n\
         network-name = default\nsubnetwork-name = default\n{extra}\
         token-url = nil\napi-endpoint = {endpoint}/compute/v1/\n"
    )
}

/// Unlimited rate, four quick attempts, millisecond operation polls.
pub fn fast_options() -> Options {
    Options {
        limits: RateLimits::unlimited(),
        retry: RetryPolicy {
            base: Duration::from_millis(5),
            max: Duration::from_millis(20),
            max_attempts: 4,
        },
        poll: PollSettings {
            initial: Duration::from_millis(2),
            max: Duration::from_millis(10),
            timeout: Duration::from_secs(10),
        },
        ..Options::default()
    }
}

/// A provider for the mock, as a controller (re)starting builds it: nothing cached, cluster
/// `c1`, [`fast_options`].
pub async fn provider_for(gce: &MockGce) -> GcpProvider {
    provider_with(gce, fast_options()).await
}

/// The same with other options.
pub async fn provider_with(gce: &MockGce, options: Options) -> GcpProvider {
    let config =
        CloudConfig::parse(&gce_conf(gce.project(), gce.url(), "cluster-id = c1\n")).unwrap();
    GcpProvider::from_config(config, "ignored", options)
        .await
        .unwrap()
}

/// The Kubernetes Node of the VM `name` in `zone` (provider ID and zone label, no addresses).
pub fn node(zone: &str, name: &str) -> BackendNode {
    BackendNode {
        name: name.to_string(),
        provider_id: Some(format!("gce://mock-project/{zone}/{name}")),
        addresses: Vec::new(),
        labels: BTreeMap::from([("topology.kubernetes.io/zone".to_string(), zone.to_string())]),
    }
}

/// The Nodes of [`two_node_builder`]'s VMs.
pub fn two_nodes() -> Vec<BackendNode> {
    vec![node(ZONE_A, "gke-c1-node-1"), node(ZONE_B, "gke-c1-node-2")]
}

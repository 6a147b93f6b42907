//! GCP: the in-process GCE mock with two node VMs, the external L4 default.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_gce::{JournalEntry, MockGce};
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, RateLimits, RetryPolicy,
};
use kube_lb_provider_gcp::{CloudConfig, GcpProvider, Options, PollSettings};

use super::{Harness, UID, eventually};

const ZONE_A: &str = "us-central1-a";
const ZONE_B: &str = "us-central1-b";
const TAG: &str = "gke-c1-node";

/// Collections the provider writes per Service or per cluster.
const OWNED_COLLECTIONS: [&str; 8] = [
    "forwardingRules",
    "addresses",
    "targetPools",
    "httpHealthChecks",
    "healthChecks",
    "firewalls",
    "backendServices",
    "instanceGroups",
];

/// The GCE mock plus a GCP provider pointed at it.
pub struct Gcp {
    gce: MockGce,
    provider: GcpProvider,
    added: usize,
}

fn node(zone: &str, name: &str) -> BackendNode {
    BackendNode {
        name: name.to_string(),
        provider_id: Some(format!("gce://mock-project/{zone}/{name}")),
        addresses: Vec::new(),
        labels: BTreeMap::from([("topology.kubernetes.io/zone".to_string(), zone.to_string())]),
    }
}

impl Harness for Gcp {
    const CLOUD: Cloud = Cloud::Gcp;

    async fn start() -> Gcp {
        let gce = MockGce::builder()
            .instance(ZONE_A, "gke-c1-node-1", &[TAG])
            .instance(ZONE_B, "gke-c1-node-2", &[TAG])
            .start()
            .await
            .unwrap();
        let config = CloudConfig::parse(&format!(
            "[global]\nproject-id = {}\nlocal-zone = {ZONE_A}\nmultizone = true\n\
             network-name = default\nsubnetwork-name = default\ncluster-id = c1\n\
             token-url = nil\napi-endpoint = {}/compute/v1/\n",
            gce.project(),
            gce.url()
        ))
        .unwrap();
        let options = Options {
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
        };
        let provider = GcpProvider::from_config(config, "ignored", options)
            .await
            .unwrap();
        Gcp {
            gce,
            provider,
            added: 0,
        }
    }

    fn provider(&self) -> &dyn LoadBalancerProvider {
        &self.provider
    }

    fn counter(&self) -> CallCounter {
        self.provider.calls().clone()
    }

    fn nodes(&self) -> Vec<BackendNode> {
        vec![node(ZONE_A, "gke-c1-node-1"), node(ZONE_B, "gke-c1-node-2")]
    }

    async fn add_node(&mut self) -> BackendNode {
        self.added += 1;
        let name = format!("gke-c1-node-extra-{}", self.added);
        self.gce.add_instance(ZONE_A, &name, &[TAG]);
        node(ZONE_A, &name)
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        &["targetPools.addInstance", "instanceGroups.addInstances"]
    }

    async fn owned(&self) -> Vec<String> {
        OWNED_COLLECTIONS
            .iter()
            .flat_map(|collection| {
                self.gce
                    .names(collection)
                    .into_iter()
                    .map(move |name| format!("{collection}/{name}"))
            })
            .collect()
    }

    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String> {
        self.gce
            .mutations_since(mark)
            .iter()
            .map(JournalEntry::short)
            .collect()
    }

    fn mark(&self) -> usize {
        self.gce.journal_len()
    }

    async fn remove_load_balancer_out_of_band(&self) {
        let lb = kube_lb_provider_core::naming::load_balancer_name(UID);
        let url = format!(
            "{}/compute/v1/projects/{}/regions/{}/forwardingRules/{lb}",
            self.gce.url(),
            self.gce.project(),
            self.gce.region()
        );
        let response = reqwest::Client::new().delete(&url).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band delete of {url}: {}",
            response.status()
        );
        eventually(
            "the forwarding rule is gone",
            Duration::from_secs(10),
            || async { self.gce.resource("forwardingRules", &lb).is_none() },
        )
        .await;
    }
}

//! GCP: the in-process GCE mock with two node VMs, the external L4 default. Set up through the
//! provider's own test support module, compiled here from its one place, so the provider tests
//! and this table cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_gce::{JournalEntry, MockGce};
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};
use kube_lb_provider_gcp::{CloudConfig, GcpProvider};

use super::{Harness, UID, eventually, stall_latency};

/// `providers/gcp/tests/it/support`: the mock with the cluster's VMs, its `gce.conf`, the provider
/// pointed at it and the VMs' Nodes.
#[path = "../../../../providers/gcp/tests/it/support/mod.rs"]
pub mod support;

use support::{OWNED_COLLECTIONS, TAG, ZONE_A, node};

/// The GCE mock plus a GCP provider pointed at it.
pub struct Gcp {
    gce: MockGce,
    provider: GcpProvider,
    added: usize,
}

impl Gcp {
    /// The scenario Service's firewall (`k8s-fw-<load balancer>`, as upstream names it).
    fn firewall_name() -> String {
        format!(
            "k8s-fw-{}",
            kube_lb_provider_core::naming::load_balancer_name(UID)
        )
    }
}

impl Harness for Gcp {
    const CLOUD: Cloud = Cloud::Gcp;

    async fn start() -> Gcp {
        let gce = support::two_node_mock().await;
        let provider = support::provider_for(&gce).await;
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
        support::two_nodes()
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

    async fn ports_open(&self) -> BTreeSet<u16> {
        let Some(firewall) = self.gce.resource("firewalls", &Gcp::firewall_name()) else {
            return BTreeSet::new();
        };
        let mut open = BTreeSet::new();
        for allowed in firewall["allowed"].as_array().into_iter().flatten() {
            for entry in allowed["ports"].as_array().into_iter().flatten() {
                let entry = entry.as_str().unwrap();
                let (low, high) = entry.split_once('-').unwrap_or((entry, entry));
                open.extend(low.parse::<u16>().unwrap()..=high.parse::<u16>().unwrap());
            }
        }
        open
    }

    async fn close_port_out_of_band(&self, port: u16) {
        let name = Gcp::firewall_name();
        let firewall = self.gce.resource("firewalls", &name).unwrap();
        let mut allowed = firewall["allowed"].clone();
        for entry in allowed.as_array_mut().unwrap() {
            if let Some(ports) = entry["ports"].as_array_mut() {
                ports.retain(|p| p.as_str() != Some(port.to_string().as_str()));
            }
        }
        let url = format!(
            "{}/compute/v1/projects/{}/global/firewalls/{name}",
            self.gce.url(),
            self.gce.project(),
        );
        let response = reqwest::Client::new()
            .patch(&url)
            .json(&serde_json::json!({"allowed": allowed}))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band patch of {url}: {}",
            response.status()
        );
        eventually("the port is closed", Duration::from_secs(10), || async {
            !self.ports_open().await.contains(&port)
        })
        .await;
    }

    async fn backends(&self) -> BTreeSet<String> {
        let lb = kube_lb_provider_core::naming::load_balancer_name(UID);
        self.gce
            .resource("targetPools", &lb)
            .map(|pool| {
                pool["instances"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        let lb = kube_lb_provider_core::naming::load_balancer_name(UID);
        let url = format!(
            "{}/compute/v1/projects/{}/regions/{}/targetPools/{lb}/removeInstance",
            self.gce.url(),
            self.gce.project(),
            self.gce.region()
        );
        let response = reqwest::Client::new()
            .post(&url)
            .json(&serde_json::json!({"instances": [{"instance": backend}]}))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band removeInstance: {}",
            response.status()
        );
        eventually(
            "the instance is removed",
            Duration::from_secs(10),
            || async { !self.backends().await.contains(backend) },
        )
        .await;
    }

    async fn start_with_request_timeout(timeout: Duration) -> Gcp {
        let gce = support::two_node_mock().await;
        // Through the `gce.conf` key, as an operator sets it.
        let extra = format!(
            "cluster-id = c1\nrequest-timeout = {}ms\n",
            timeout.as_millis()
        );
        let config =
            CloudConfig::parse(&support::gce_conf(gce.project(), gce.url(), &extra)).unwrap();
        assert_eq!(config.request_timeout(), timeout);
        let provider = GcpProvider::from_config(config, "ignored", support::fast_options())
            .await
            .unwrap();
        Gcp {
            gce,
            provider,
            added: 0,
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        support::fast_options().retry
    }

    fn stall(&self, stalled: bool) {
        self.gce.set_latency(stall_latency(stalled));
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        // The scenario's Service is the only one: every forwarding rule is its (a rule under
        // another name would be a duplicate).
        self.gce.names("forwardingRules").len()
    }
}

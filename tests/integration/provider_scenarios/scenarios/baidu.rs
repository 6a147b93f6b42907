//! Baidu: the signing BLB + EIP mock, a public Service (an EIP created and bound) by default.
//! Set up through the provider's own test support module, compiled here from its one place, so
//! the provider tests and this table cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_provider_baidu::ProviderOptions;
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};

use super::Harness;

/// `providers/baidu/tests/it/support`: the mock, the provider pointed at it, node and Service
/// builders, and the hand-built state of cloud-provider-baiducloud.
#[path = "../../../../providers/baidu/tests/it/support/mod.rs"]
pub mod support;

/// The BLB of the scenario Service `default/web` in cluster `c-test01`, upstream's name.
const BLB_NAME: &str = "CCE/SVC/c-test01/default/web";

/// The mock plus a Baidu provider pointed at it.
pub struct Baidu {
    h: support::Harness,
    node_count: usize,
}

impl Harness for Baidu {
    const CLOUD: Cloud = Cloud::Baidu;

    harness_through_provider_support!();

    fn nodes(&self) -> Vec<BackendNode> {
        support::nodes(2)
    }

    async fn add_node(&mut self) -> BackendNode {
        // A backend server is a BCC instance id: the node exists for the BLB as soon as it has
        // one, so there is nothing to create in the mock.
        self.node_count += 1;
        support::node(self.node_count)
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        // One AddBackendServers call per BLB (backends are per BLB, not per listener).
        &["blb:AddBackendServers"]
    }

    fn traffic_policy_changes_the_load_balancer(&self) -> bool {
        // A BLB TCP listener health-checks the backend (node) port only: Local is converged
        // through the backends the controller selects (nodes with a ready endpoint), as
        // cloud-provider-baiducloud did, so the switch alone costs no call.
        false
    }

    async fn owned(&self) -> Vec<String> {
        let cloud = &self.h.cloud;
        let mut owned = Vec::new();
        for blb in cloud.blbs() {
            let id = blb["blbId"].as_str().unwrap_or_default();
            owned.push(format!("blb {}", blb["name"].as_str().unwrap_or_default()));
            owned.extend(
                cloud
                    .listeners(id)
                    .iter()
                    .map(|l| format!("listener {id}:{}", l["listenerPort"])),
            );
            owned.extend(
                cloud
                    .backends(id)
                    .iter()
                    .map(|b| format!("backend {id}:{b}")),
            );
        }
        owned.extend(
            cloud
                .eips()
                .iter()
                .map(|e| format!("eip {}", e["eip"].as_str().unwrap_or_default())),
        );
        // The security groups of loadBalancerSourceRanges go with the BLB.
        owned.extend(
            cloud
                .security_groups()
                .iter()
                .map(|g| format!("security group {}", g["id"].as_str().unwrap_or_default())),
        );
        owned
    }

    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String> {
        self.h
            .cloud
            .journal()
            .iter()
            .skip(mark)
            .filter(|e| e.is_mutation())
            .map(|e| format!("{} {} {}", e.method, e.path, e.status))
            .collect()
    }

    async fn ports_open(&self) -> BTreeSet<u16> {
        let cloud = &self.h.cloud;
        cloud
            .blbs()
            .iter()
            .filter(|blb| blb["name"] == BLB_NAME)
            .flat_map(|blb| cloud.listeners(blb["blbId"].as_str().unwrap_or_default()))
            .map(|l| u16::try_from(l["listenerPort"].as_u64().unwrap()).unwrap())
            .collect()
    }

    async fn close_port_out_of_band(&self, port: u16) {
        support::delete_listener_out_of_band(&self.h.cloud, BLB_NAME, port).await;
    }

    async fn backends(&self) -> BTreeSet<String> {
        let cloud = &self.h.cloud;
        cloud
            .blbs()
            .iter()
            .filter(|blb| blb["name"] == BLB_NAME)
            .flat_map(|blb| cloud.backends(blb["blbId"].as_str().unwrap_or_default()))
            .collect()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        support::remove_backend_out_of_band(&self.h.cloud, BLB_NAME, backend).await;
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        // Every BLB in the mock: a create whose answer never came could leave one under
        // another id.
        self.h.cloud.blbs().len()
    }

    async fn remove_load_balancer_out_of_band(&self) {
        support::remove_out_of_band(&self.h.cloud, BLB_NAME);
        assert!(
            self.h.cloud.blbs().iter().all(|b| b["name"] != BLB_NAME),
            "the BLB is still listed"
        );
    }
}

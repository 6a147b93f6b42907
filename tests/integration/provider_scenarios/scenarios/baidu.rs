//! Baidu: the signing BLB + EIP mock, a public Service (an EIP created and bound) by default.
//! Set up through the provider's own test support module, compiled here from its one place, so
//! the provider tests and this table cannot drift apart.

use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_baidu::{ACCESS_KEY_ID, MockBaidu, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID};
use kube_lb_provider_baidu::sign::Credentials;
use kube_lb_provider_baidu::{BaiduProvider, ProviderOptions, Resolved, WaitSettings};
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, RateLimits, RetryPolicy,
};

use super::Harness;

/// `providers/baidu/tests/support`: the mock, the provider pointed at it, node and Service
/// builders, and the hand-built state of cloud-provider-baiducloud.
#[path = "../../../../providers/baidu/tests/support/mod.rs"]
pub mod support;

/// The BLB of the scenario Service `default/web` in cluster `c-test01`, upstream's name.
const BLB_NAME: &str = "CCE/SVC/c-test01/default/web";

/// The in-place retries of the provider the stalled-cloud scenario builds (the support
/// module's quick steps).
const STALL_RETRY: RetryPolicy = RetryPolicy {
    base: Duration::from_millis(5),
    max: Duration::from_millis(20),
    max_attempts: 3,
};

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

    async fn start_with_request_timeout(timeout: Duration) -> Baidu {
        let cloud = MockBaidu::builder().start().await.unwrap();
        let counter = CallCounter::new();
        // The support module's provider, but with `timeout` (its builder takes no options).
        let resolved = Resolved {
            credentials: Credentials {
                access_key_id: ACCESS_KEY_ID.into(),
                secret_access_key: SECRET_ACCESS_KEY.into(),
                session_token: None,
            },
            blb_endpoint: cloud.endpoint(),
            eip_endpoint: cloud.endpoint(),
            vpc_id: VPC_ID.into(),
            subnet_id: SUBNET_ID.into(),
            cluster_id: Some(support::CLUSTER.into()),
        };
        let options = ProviderOptions {
            wait: WaitSettings {
                first: Duration::from_millis(20),
                factor: 2.0,
                max_interval: Duration::from_millis(100),
                timeout: Duration::from_secs(10),
            },
            retry: STALL_RETRY,
            limits: RateLimits::unlimited(),
            request_timeout: timeout,
            counter: counter.clone(),
        };
        let provider = BaiduProvider::new(resolved, "ignored", options).unwrap();
        Baidu {
            h: support::Harness {
                cloud,
                provider,
                counter,
            },
            node_count: 2,
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        STALL_RETRY
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

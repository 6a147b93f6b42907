//! Azure: the in-process ARM mock with the cluster's VNet and NSG, the public Standard LB
//! default. Set up through the provider's own test support module, compiled here from its one
//! place, so the provider tests and this table cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_azure::{MockArm, SUBSCRIPTION};
use kube_lb_provider_azure::AzureProvider;
use kube_lb_provider_azure::ProviderOptions;
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};

use super::{Harness, UID, eventually, stall_latency};

/// `providers/azure/tests/it/support`: the mock with the cluster's network, its `azure.json`, the
/// provider pointed at it, node and Service builders.
#[path = "../../../../providers/azure/tests/it/support/mod.rs"]
pub mod support;

use support::{CLUSTER, NSG, RG};

/// The ARM mock plus an Azure provider pointed at it.
pub struct Azure {
    arm: MockArm,
    provider: AzureProvider,
    node_count: usize,
}

impl Azure {
    /// The Service's frontends on the cluster's load balancers (one per Service and IP
    /// family; a second one would be a duplicate).
    fn frontends_of_the_service(&self) -> Vec<String> {
        let prefix = support::prefix(UID);
        self.arm
            .load_balancers()
            .iter()
            .flat_map(|lb| {
                lb["properties"]["frontendIPConfigurations"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|frontend| frontend["name"].as_str().map(str::to_string))
            .filter(|name| name.starts_with(&prefix))
            .collect()
    }
}

fn node(index: usize) -> BackendNode {
    support::node(
        &format!("node-{index}"),
        &format!("10.224.0.{}", 10 + index),
    )
}

impl Harness for Azure {
    const CLOUD: Cloud = Cloud::Azure;

    async fn start() -> Azure {
        let support::Harness { arm, provider, .. } = support::harness().await;
        Azure {
            arm,
            provider,
            node_count: 2,
        }
    }

    fn provider(&self) -> &dyn LoadBalancerProvider {
        &self.provider
    }

    fn counter(&self) -> CallCounter {
        self.provider.calls().clone()
    }

    fn nodes(&self) -> Vec<BackendNode> {
        (1..=2).map(node).collect()
    }

    async fn add_node(&mut self) -> BackendNode {
        // IP-based backend pools: a node exists for ARM as soon as it has an address in the
        // VNet, so there is nothing to create in the mock.
        self.node_count += 1;
        node(self.node_count)
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        &["PutLoadBalancer"]
    }

    async fn owned(&self) -> Vec<String> {
        let prefix = support::prefix(UID);
        let mut owned = Vec::new();
        for lb in self.arm.load_balancers() {
            let frontends = lb["properties"]["frontendIPConfigurations"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for frontend in frontends {
                let name = frontend["name"].as_str().unwrap_or_default();
                if name.starts_with(&prefix) {
                    owned.push(format!("frontend {name}"));
                }
            }
        }
        for pip in self.arm.public_ips() {
            let name = pip["name"].as_str().unwrap_or_default();
            if name.contains(&prefix) {
                owned.push(format!("public IP {name}"));
            }
        }
        if let Some(nsg) = self.arm.security_group(RG, NSG) {
            let rules = nsg["properties"]["securityRules"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            for rule in rules {
                let name = rule["name"].as_str().unwrap_or_default();
                if name.contains(&prefix) {
                    owned.push(format!("security rule {name}"));
                }
            }
        }
        owned
    }

    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String> {
        self.arm
            .journal()
            .iter()
            .skip(mark)
            .filter(|e| e.is_mutation())
            .map(|e| format!("{} {}", e.method, e.path))
            .collect()
    }

    fn mark(&self) -> usize {
        self.arm.journal().len()
    }

    async fn remove_load_balancer_out_of_band(&self) {
        let http = reqwest::Client::new();
        let bearer = support::token(&self.arm).await;
        let url = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/\
             Microsoft.Network/loadBalancers/{CLUSTER}?api-version=2024-03-01",
            self.arm.url()
        );
        let response = http.delete(&url).bearer_auth(&bearer).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band delete of the shared LB: {}",
            response.status()
        );
        // ARM finishes an accepted DELETE as its operation is polled, as a client would.
        let operation = response
            .headers()
            .get("azure-asyncoperation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        eventually(
            "the shared load balancer is gone",
            Duration::from_secs(10),
            || async {
                if let Some(operation) = &operation {
                    http.get(operation)
                        .bearer_auth(&bearer)
                        .send()
                        .await
                        .unwrap();
                }
                self.arm.load_balancer(RG, CLUSTER).is_none()
            },
        )
        .await;
    }

    async fn ports_open(&self) -> BTreeSet<u16> {
        let prefix = support::prefix(UID);
        self.arm
            .load_balancers()
            .iter()
            .flat_map(|lb| {
                lb["properties"]["loadBalancingRules"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|rule| {
                rule["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&prefix))
            })
            .map(|rule| {
                u16::try_from(rule["properties"]["frontendPort"].as_u64().unwrap()).unwrap()
            })
            .collect()
    }

    async fn close_port_out_of_band(&self, port: u16) {
        let prefix = support::prefix(UID);
        let mut lb = self.arm.load_balancer(RG, CLUSTER).unwrap();
        lb.as_object_mut().unwrap().remove("etag");
        lb["properties"]["loadBalancingRules"]
            .as_array_mut()
            .unwrap()
            .retain(|rule| {
                !(rule["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&prefix))
                    && rule["properties"]["frontendPort"] == port)
            });
        let http = reqwest::Client::new();
        let bearer = support::token(&self.arm).await;
        let url = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/\
             Microsoft.Network/loadBalancers/{CLUSTER}?api-version=2024-03-01",
            self.arm.url()
        );
        let response = http
            .put(&url)
            .bearer_auth(&bearer)
            .json(&lb)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band update of the shared LB: {}",
            response.status()
        );
        // The operator's client polls its operation to the end, as `az` does.
        let operation = response
            .headers()
            .get("azure-asyncoperation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        eventually("the update finished", Duration::from_secs(10), || async {
            let Some(operation) = &operation else {
                return true;
            };
            let polled: serde_json::Value = http
                .get(operation)
                .bearer_auth(&bearer)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            polled["status"] != "InProgress"
        })
        .await;
        assert!(
            !self.ports_open().await.contains(&port),
            "the rule is still there"
        );
    }

    async fn start_without_read_cache() -> Azure {
        let support::Harness { arm, provider, .. } = support::harness_with(ProviderOptions {
            cache_ttl: Duration::ZERO,
            ..support::fast_options()
        })
        .await;
        Azure {
            arm,
            provider,
            node_count: 2,
        }
    }

    async fn start_with_request_timeout(timeout: Duration) -> Azure {
        let support::Harness { arm, provider, .. } = support::harness_with(ProviderOptions {
            request_timeout: timeout,
            ..support::fast_options()
        })
        .await;
        Azure {
            arm,
            provider,
            node_count: 2,
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        support::fast_options().retry
    }

    fn stall(&self, stalled: bool) {
        self.arm.set_latency(stall_latency(stalled));
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        self.frontends_of_the_service().len()
    }
}

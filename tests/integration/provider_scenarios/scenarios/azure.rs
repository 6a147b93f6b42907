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
    /// Deletes (`None`) or rewrites (`Some`) the cluster's load balancer with an operator's own
    /// client, and polls the operation to its end as `az` does (ARM finishes an accepted write
    /// as its operation is polled).
    async fn write_load_balancer_out_of_band(&self, body: Option<serde_json::Value>) {
        let http = reqwest::Client::new();
        let bearer = support::token(&self.arm).await;
        let url = format!(
            "{}/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/\
             Microsoft.Network/loadBalancers/{CLUSTER}?api-version=2024-03-01",
            self.arm.url()
        );
        let request = match body {
            Some(mut lb) => {
                lb.as_object_mut().unwrap().remove("etag");
                http.put(&url).json(&lb)
            }
            None => http.delete(&url),
        };
        let response = request.bearer_auth(&bearer).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "out-of-band write of the shared LB: {}",
            response.status()
        );
        let operation = response
            .headers()
            .get("azure-asyncoperation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        eventually(
            "the operation finished",
            Duration::from_secs(10),
            || async {
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
            },
        )
        .await;
    }

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
        self.write_load_balancer_out_of_band(None).await;
        assert!(
            self.arm.load_balancer(RG, CLUSTER).is_none(),
            "the shared LB is still there"
        );
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
        lb["properties"]["loadBalancingRules"]
            .as_array_mut()
            .unwrap()
            .retain(|rule| {
                !(rule["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&prefix))
                    && rule["properties"]["frontendPort"] == port)
            });
        self.write_load_balancer_out_of_band(Some(lb)).await;
        assert!(
            !self.ports_open().await.contains(&port),
            "the rule is still there"
        );
    }

    async fn backends(&self) -> BTreeSet<String> {
        self.arm
            .load_balancer(RG, CLUSTER)
            .map(|lb| {
                lb["properties"]["backendAddressPools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|pool| {
                        pool["properties"]["loadBalancerBackendAddresses"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .filter_map(|a| a["properties"]["ipAddress"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        let mut lb = self.arm.load_balancer(RG, CLUSTER).unwrap();
        for pool in lb["properties"]["backendAddressPools"]
            .as_array_mut()
            .unwrap()
        {
            if let Some(addresses) =
                pool["properties"]["loadBalancerBackendAddresses"].as_array_mut()
            {
                addresses.retain(|a| a["properties"]["ipAddress"] != backend);
            }
        }
        self.write_load_balancer_out_of_band(Some(lb)).await;
        assert!(
            !self.backends().await.contains(backend),
            "{backend} is still in the pool"
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

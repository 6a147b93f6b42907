//! Azure: the in-process ARM mock with the cluster's VNet and NSG, the public Standard LB
//! default.

use std::net::IpAddr;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};
use kube_lb_provider_azure::{AzureConfig, AzureProvider, PollSettings, ProviderOptions};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, NodeAddress, RateLimits, RetryPolicy,
};
use serde_json::{Value, json};

use super::{Harness, UID, eventually};

const RG: &str = "cluster-rg";
const VNET: &str = "cluster-vnet";
const NSG: &str = "cluster-nsg";
/// The cluster name, which is also the shared load balancer's name.
const CLUSTER: &str = "kubernetes";

/// The ARM mock plus an Azure provider pointed at it.
pub struct Azure {
    arm: MockArm,
    provider: AzureProvider,
    node_count: usize,
}

/// The azure.json the provider (and `kube-lb reconcile --cloud azure`) reads, pointed at `url`.
pub fn config_json(url: &str) -> Value {
    json!({
        "cloud": "AzurePublicCloud",
        "tenantId": TENANT,
        "subscriptionId": SUBSCRIPTION,
        "aadClientId": CLIENT_ID,
        "aadClientSecret": CLIENT_SECRET,
        "resourceGroup": RG,
        "location": LOCATION,
        "vnetName": VNET,
        "subnetName": "nodes",
        "securityGroupName": NSG,
        "loadBalancerSku": "standard",
        "vmType": "vmss",
        "resourceManagerEndpoint": url,
        "activeDirectoryEndpoint": url,
    })
}

/// The ARM mock with the cluster's network.
pub async fn mock() -> MockArm {
    MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .security_group(RG, NSG)
        .start()
        .await
        .unwrap()
}

fn node(index: usize) -> BackendNode {
    BackendNode {
        name: format!("node-{index}"),
        provider_id: None,
        addresses: vec![NodeAddress {
            kind: NodeAddressKind::InternalIp,
            ip: format!("10.224.0.{}", 10 + index)
                .parse::<IpAddr>()
                .unwrap(),
        }],
        labels: Default::default(),
    }
}

impl Azure {
    fn prefix() -> String {
        kube_lb_provider_core::naming::load_balancer_name(UID)
    }
}

impl Harness for Azure {
    const CLOUD: Cloud = Cloud::Azure;

    async fn start() -> Azure {
        let arm = mock().await;
        let config: AzureConfig = serde_json::from_value(config_json(&arm.url())).unwrap();
        let options = ProviderOptions {
            poll: PollSettings {
                default_interval: Duration::from_millis(10),
                max_interval: Duration::from_secs(2),
                max_polls: 50,
            },
            retry: RetryPolicy {
                base: Duration::from_millis(10),
                max: Duration::from_millis(50),
                max_attempts: 4,
            },
            limits: RateLimits::unlimited(),
            ..ProviderOptions::default()
        };
        let provider = AzureProvider::new(&config, CLUSTER, options).unwrap();
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
        let prefix = Azure::prefix();
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
        let token: Value = http
            .post(format!("{}/{TENANT}/oauth2/v2.0/token", self.arm.url()))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", CLIENT_ID),
                ("client_secret", CLIENT_SECRET),
                ("scope", "https://management.azure.com/.default"),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let bearer = token["access_token"].as_str().unwrap().to_string();
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
}

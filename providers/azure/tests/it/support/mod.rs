//! Fixtures: a mock ARM with the cluster's network, its `azure.json`, a provider pointed at it,
//! Service and node builders. The provider tests use it as `mod support;`; the root integration
//! tests (the shared scenario table and `cloud_fixtures`) compile this same file through
//! `#[path]`, so their set-up cannot drift from the provider's own.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_lb_annotations::Cloud;
use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};
use kube_lb_provider_azure::{AzureConfig, AzureProvider, PollSettings, ProviderOptions};
use kube_lb_provider_core::{BackendNode, RateLimits, RetryPolicy};
use kube_lb_test_support::{ServiceBuilder, internal_ip_node};
use serde_json::{Value, json};

pub const RG: &str = "cluster-rg";
pub const VNET: &str = "cluster-vnet";
pub const NSG: &str = "cluster-nsg";
pub const CLUSTER: &str = "kubernetes";

pub struct Harness {
    pub arm: MockArm,
    pub provider: AzureProvider,
    pub config: AzureConfig,
}

/// The `azure.json` the provider (and `kube-lb reconcile --cloud azure`) reads, calling ARM and
/// Entra ID both at `url`.
pub fn config_json(url: &str) -> Value {
    config_json_for(url, url)
}

/// The same with ARM at `resource_manager` and Entra ID at `active_directory` (a fault proxy
/// may stand in front of one of them).
pub fn config_json_for(resource_manager: &str, active_directory: &str) -> Value {
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
        "resourceManagerEndpoint": resource_manager,
        "activeDirectoryEndpoint": active_directory,
    })
}

pub fn fast_options() -> ProviderOptions {
    ProviderOptions {
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
    }
}

/// The ARM mock with the cluster's network: VNet [`VNET`] with subnets `nodes`
/// (10.224.0.0/16) and `apps` (10.225.0.0/24), and the NSG [`NSG`], all in [`RG`].
pub async fn mock() -> MockArm {
    let mut builder = MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .subnet(RG, VNET, "10.224.0.0/12", "apps", "10.225.0.0/24")
        .security_group(RG, NSG);
    // The nodes' NICs hold their addresses, as on Azure: no frontend may be given one. Those
    // of `nodes` (10.224.0.11 on) and of `tests/fixtures/clouds/azure.yaml` (10.224.0.4, .5).
    let addresses = (11..=14)
        .map(|i| format!("10.224.0.{i}"))
        .chain(["10.224.0.4".to_string(), "10.224.0.5".to_string()]);
    for (i, address) in addresses.enumerate() {
        builder = builder.network_interface(RG, &format!("node-nic-{i}"), VNET, "nodes", &address);
    }
    builder.start().await.unwrap()
}

/// A bearer token from the mock's Entra ID endpoint for the default client, as another ARM
/// client (a person with `az`, upstream's provider) would hold.
pub async fn token(arm: &MockArm) -> String {
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/{TENANT}/oauth2/v2.0/token", arm.url()))
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
    answer["access_token"].as_str().unwrap().to_string()
}

/// Another ARM client (a person with `az`, or upstream's provider), talking HTTP to the mock
/// with its own token.
pub struct OtherClient {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl OtherClient {
    pub async fn new(arm: &MockArm) -> OtherClient {
        OtherClient {
            http: reqwest::Client::new(),
            base: arm.url(),
            token: token(arm).await,
        }
    }

    /// PUTs `body` at the ARM resource `id` and, when ARM started an operation, waits for it
    /// to succeed, as `az` does (so the object is not left busy): the PUT's status and answer.
    pub async fn put_status(&self, id: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .put(format!("{}{id}?api-version=2024-03-01", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let operation = response
            .headers()
            .get("azure-asyncoperation")
            .map(|v| v.to_str().unwrap().to_string());
        let answer: Value = response.json().await.unwrap();
        if let Some(url) = operation {
            for _ in 0..20 {
                let poll = self.get_url(&url).await;
                match poll["status"].as_str() {
                    Some("InProgress") => continue,
                    Some("Succeeded") => break,
                    other => panic!("PUT {id}: operation ended {other:?}: {poll}"),
                }
            }
        }
        (status, answer)
    }

    /// PUTs `body` at `id`, asserts ARM accepted it, waits for its operation and returns the
    /// object as stored.
    pub async fn put(&self, id: &str, body: Value) -> Value {
        let (status, answer) = self.put_status(id, body).await;
        assert!((200..300).contains(&status), "PUT {id}: {status} {answer}");
        self.get(id).await
    }

    /// `PUT networkSecurityGroups/{NSG}/securityRules/{name}`, waited for; returns the status.
    pub async fn put_rule(&self, name: &str, properties: Value) -> u16 {
        let id = format!(
            "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/networkSecurityGroups/{NSG}/securityRules/{name}"
        );
        self.put_status(&id, json!({ "properties": properties }))
            .await
            .0
    }

    /// `GET` of the ARM resource `id`.
    pub async fn get(&self, id: &str) -> Value {
        self.get_url(&format!("{}{id}?api-version=2024-03-01", self.base))
            .await
    }

    /// `GET` of a full URL (a resource, or an operation ARM asked us to poll), as JSON.
    async fn get_url(&self, url: &str) -> Value {
        self.http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

pub async fn harness() -> Harness {
    harness_with(fast_options()).await
}

/// A harness whose provider has `options`.
pub async fn harness_with(options: ProviderOptions) -> Harness {
    let arm = mock().await;
    let config: AzureConfig = serde_json::from_value(config_json(&arm.url())).unwrap();
    let provider = AzureProvider::new(&config, CLUSTER, options).unwrap();
    Harness {
        arm,
        provider,
        config,
    }
}

/// A provider with `options` calling `arm` (a mock built for one test).
pub fn provider_for(arm: &MockArm, options: ProviderOptions) -> AzureProvider {
    let config: AzureConfig = serde_json::from_value(config_json(&arm.url())).unwrap();
    AzureProvider::new(&config, CLUSTER, options).unwrap()
}

/// Asserts that what ran since `started` took well under one of the SDK's 30 s poll sleeps
/// (10 s) and still polled `arm`'s operations at least `min_polls` times: every operation
/// was polled until done, without long sleeps.
pub fn assert_polled_without_long_sleeps(arm: &MockArm, started: Instant, min_polls: usize) {
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let polls = arm
        .journal()
        .iter()
        .filter(|e| e.path.contains("/operations/"))
        .count();
    assert!(
        polls >= min_polls,
        "every operation was polled until done: {polls}"
    );
}

/// A LoadBalancer Service parsed for Azure: the shared builder, annotated by key suffix
/// (`azure-load-balancer-internal` for `service.beta.kubernetes.io/azure-load-balancer-internal`),
/// plus [`AzureSvc`].
pub type Svc = ServiceBuilder;

/// `default/<name>` with one port, 80 → nodePort 30080.
pub fn svc(name: &str, uid: &str) -> Svc {
    ServiceBuilder::new(Cloud::Azure, name, uid).annotation_prefix("service.beta.kubernetes.io/")
}

/// Azure's own shortcut on the Service builder.
pub trait AzureSvc {
    /// `azure-load-balancer-internal: "true"` (a private frontend in the VNet).
    fn internal(self) -> Self;
}

impl AzureSvc for Svc {
    fn internal(self) -> Self {
        self.annotate("azure-load-balancer-internal", "true")
    }
}

pub fn node(name: &str, ip: &str) -> BackendNode {
    internal_ip_node(name, ip)
}

pub fn nodes(n: usize) -> Vec<BackendNode> {
    (1..=n)
        .map(|i| node(&format!("node-{i}"), &format!("10.224.0.{}", 10 + i)))
        .collect()
}

/// `a` + the UID without dashes (the Service's name prefix in Azure).
pub fn prefix(uid: &str) -> String {
    kube_lb_provider_core::naming::load_balancer_name(uid)
}

pub fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

pub fn child<'a>(lb: &'a Value, collection: &str, name: &str) -> &'a Value {
    lb["properties"][collection]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| {
            panic!(
                "{collection}/{name} missing in {}",
                lb["properties"][collection]
            )
        })
}

/// Managed NSG rules (name → properties).
pub fn managed_rules(arm: &MockArm) -> BTreeMap<String, Value> {
    let nsg = arm.security_group(RG, NSG).unwrap();
    nsg["properties"]["securityRules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("k8s-azure-lb_"))
        })
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["properties"].clone(),
            )
        })
        .collect()
}

/// The destination prefixes of a security rule's properties, whichever field holds them,
/// sorted.
pub fn destinations(rule: &Value) -> Vec<String> {
    address_prefixes(rule, "destination")
}

/// The source prefixes of a security rule's properties, sorted.
pub fn sources(rule: &Value) -> Vec<String> {
    address_prefixes(rule, "source")
}

/// `{side}AddressPrefixes` and `{side}AddressPrefix` of a security rule's properties, sorted.
fn address_prefixes(rule: &Value, side: &str) -> Vec<String> {
    let mut all: Vec<String> = rule[format!("{side}AddressPrefixes")]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if let Some(one) = rule[format!("{side}AddressPrefix")].as_str() {
        all.push(one.to_string());
    }
    all.sort();
    all
}

/// Public IPs owned (by tag) by `ns/name`.
pub fn owned_pips(arm: &MockArm, service: &str) -> Vec<Value> {
    arm.public_ips()
        .into_iter()
        .filter(|p| {
            p["tags"]["k8s-azure-service"]
                .as_str()
                .is_some_and(|v| v.split(',').any(|s| s == service))
        })
        .collect()
}

//! Fixtures: a mock OpenStack, a provider pointed at it, Service and node builders.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{Cloud, LoadBalancerSpec, ServiceKey};
use kube_lb_mock_openstack::{
    APPLICATION_CREDENTIAL_ID, APPLICATION_CREDENTIAL_SECRET, DOMAIN, MockOpenStack, PASSWORD,
    PRIVATE_SUBNET_ID, PROJECT_NAME, PUBLIC_NETWORK_ID, USERNAME,
};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, CallCounter, NodeAddress, RateLimits, RetryPolicy};
use kube_lb_provider_openstack::{CloudConfig, OpenStackProvider, ProviderOptions, WaitSettings};
use serde_json::{Value, json};

pub const CLUSTER: &str = "kubernetes";

pub struct Harness {
    pub cloud: MockOpenStack,
    pub provider: OpenStackProvider,
    pub counter: CallCounter,
}

/// `cloud.conf` for the mock, with password credentials and `extra` appended to
/// `[LoadBalancer]`.
pub fn cloud_conf(cloud: &MockOpenStack, extra: &str) -> String {
    format!(
        "[Global]\nauth-url = {}\nusername = {USERNAME}\npassword = {PASSWORD}\nuser-domain-name = {DOMAIN}\n\
         project-name = {PROJECT_NAME}\nproject-domain-name = {DOMAIN}\nregion = RegionOne\n\n\
         [LoadBalancer]\nfloating-network-id = {PUBLIC_NETWORK_ID}\nsubnet-id = {PRIVATE_SUBNET_ID}\n{extra}",
        cloud.auth_url()
    )
}

/// The same with an application credential.
pub fn app_credential_conf(cloud: &MockOpenStack) -> String {
    format!(
        "[Global]\nauth-url = {}\napplication-credential-id = {APPLICATION_CREDENTIAL_ID}\n\
         application-credential-secret = {APPLICATION_CREDENTIAL_SECRET}\n\n\
         [LoadBalancer]\nsubnet-id = {PRIVATE_SUBNET_ID}\n",
        cloud.auth_url()
    )
}

pub fn fast_options(counter: CallCounter) -> ProviderOptions {
    ProviderOptions {
        wait: WaitSettings {
            first: Duration::from_millis(5),
            factor: 1.5,
            max_interval: Duration::from_millis(50),
            timeout: Duration::from_secs(10),
        },
        retry: RetryPolicy {
            base: Duration::from_millis(5),
            max: Duration::from_millis(20),
            max_attempts: 3,
        },
        limits: RateLimits::unlimited(),
        request_timeout: Duration::from_secs(10),
        counter,
    }
}

pub async fn harness() -> Harness {
    harness_with(MockOpenStack::builder().start().await.unwrap(), "").await
}

pub async fn harness_with(cloud: MockOpenStack, extra_conf: &str) -> Harness {
    let config = CloudConfig::parse(&cloud_conf(&cloud, extra_conf)).unwrap();
    provider_for(cloud, config)
}

pub fn provider_for(cloud: MockOpenStack, config: CloudConfig) -> Harness {
    let counter = CallCounter::new();
    let provider = OpenStackProvider::new(config, CLUSTER, fast_options(counter.clone())).unwrap();
    Harness {
        cloud,
        provider,
        counter,
    }
}

/// A LoadBalancer Service, parsed through the real annotation parser.
#[derive(Clone)]
pub struct Svc {
    name: String,
    uid: String,
    annotations: BTreeMap<String, String>,
    ports: Vec<Value>,
    spec: serde_json::Map<String, Value>,
}

pub fn svc(name: &str, uid: &str) -> Svc {
    Svc {
        name: name.into(),
        uid: uid.into(),
        annotations: BTreeMap::new(),
        ports: vec![
            json!({"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}),
        ],
        spec: serde_json::Map::new(),
    }
}

impl Svc {
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    pub fn internal(self) -> Self {
        self.annotate(
            "service.beta.kubernetes.io/openstack-internal-load-balancer",
            "true",
        )
    }

    /// Replaces the ports: (name, port, protocol, nodePort).
    pub fn ports(mut self, ports: &[(&str, u16, &str, u16)]) -> Self {
        self.ports = ports
            .iter()
            .map(|(name, port, protocol, node_port)| {
                json!({"name": name, "port": port, "protocol": protocol, "targetPort": port, "nodePort": node_port})
            })
            .collect();
        self
    }

    pub fn local(mut self, health_check_node_port: u16) -> Self {
        self.spec
            .insert("externalTrafficPolicy".into(), json!("Local"));
        self.spec
            .insert("healthCheckNodePort".into(), json!(health_check_node_port));
        self
    }

    pub fn load_balancer_ip(mut self, ip: &str) -> Self {
        self.spec.insert("loadBalancerIP".into(), json!(ip));
        self
    }

    pub fn key(&self) -> ServiceKey {
        ServiceKey {
            namespace: "default".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    pub fn spec(&self) -> LoadBalancerSpec {
        let mut spec = self.spec.clone();
        spec.insert("type".into(), json!("LoadBalancer"));
        spec.insert("ports".into(), json!(self.ports));
        spec.entry("externalTrafficPolicy")
            .or_insert(json!("Cluster"));
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": "default", "uid": self.uid, "annotations": self.annotations},
            "spec": spec,
        }))
        .unwrap();
        kube_lb_annotations::parse(Cloud::Openstack, &service)
            .unwrap_or_else(|e| panic!("annotations rejected: {e:?}"))
            .spec
    }
}

pub fn node(name: &str, ip: &str) -> BackendNode {
    BackendNode {
        name: name.into(),
        provider_id: None,
        addresses: vec![NodeAddress {
            kind: NodeAddressKind::InternalIp,
            ip: ip.parse::<IpAddr>().unwrap(),
        }],
        labels: BTreeMap::new(),
    }
}

pub fn nodes(n: usize) -> Vec<BackendNode> {
    (1..=n)
        .map(|i| node(&format!("node-{i}"), &format!("10.0.0.{}", 100 + i)))
        .collect()
}

/// The one load balancer named `name` in the mock.
pub fn lb_named(cloud: &MockOpenStack, name: &str) -> Value {
    let found: Vec<Value> = cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| lb["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "load balancers named {name}: {found:?}");
    found.into_iter().next().unwrap()
}

/// Listeners of a load balancer, sorted by port: (name, protocol, port, id, default pool).
pub fn listeners_of(cloud: &MockOpenStack, lb_id: &str) -> Vec<Value> {
    let mut listeners: Vec<Value> = cloud
        .listeners()
        .into_iter()
        .filter(|l| l["loadbalancers"][0]["id"] == lb_id)
        .collect();
    listeners.sort_by_key(|l| l["protocol_port"].as_u64());
    listeners
}

pub fn pool(cloud: &MockOpenStack, id: &Value) -> Value {
    cloud
        .pools()
        .into_iter()
        .find(|p| &p["id"] == id)
        .expect("pool")
}

/// (name, address, port) of a pool's members, sorted.
pub fn member_set(cloud: &MockOpenStack, pool_id: &Value) -> Vec<(String, String, u64)> {
    let mut members: Vec<_> = cloud
        .members(pool_id.as_str().unwrap())
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["address"].as_str().unwrap().to_string(),
                m["protocol_port"].as_u64().unwrap(),
            )
        })
        .collect();
    members.sort();
    members
}

pub fn mutations(cloud: &MockOpenStack) -> Vec<String> {
    cloud
        .mutations()
        .iter()
        .map(|e| {
            format!(
                "{} {} {}",
                e.method,
                e.path
                    .trim_start_matches("/load-balancer/v2/lbaas/")
                    .trim_start_matches("/networking/v2.0/"),
                e.status
            )
        })
        .collect()
}

//! Shared test fixtures: a mock cloud, a provider pointed at it, Services and nodes.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_mock_baidu::{ACCESS_KEY_ID, MockBaidu, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID};
use kube_lb_provider_baidu::sign::Credentials;
use kube_lb_provider_baidu::{BaiduProvider, ProviderOptions, Resolved, WaitSettings};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, CallCounter, NodeAddress, RateLimits, RetryPolicy};

pub struct Harness {
    pub cloud: MockBaidu,
    pub provider: BaiduProvider,
    pub counter: CallCounter,
}

pub fn provider_for(cloud: &MockBaidu, counter: CallCounter) -> BaiduProvider {
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
        cluster_id: Some("c-test01".into()),
    };
    BaiduProvider::new(
        resolved,
        "ignored",
        ProviderOptions {
            wait: WaitSettings {
                first: Duration::from_millis(20),
                max_interval: Duration::from_millis(100),
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
        },
    )
    .unwrap()
}

pub async fn harness_with(cloud: MockBaidu) -> Harness {
    let counter = CallCounter::new();
    let provider = provider_for(&cloud, counter.clone());
    Harness {
        cloud,
        provider,
        counter,
    }
}

pub async fn harness() -> Harness {
    harness_with(MockBaidu::builder().start().await.unwrap()).await
}

/// A LoadBalancer Service parsed for Baidu.
pub fn spec(
    name: &str,
    uid: &str,
    ports: &[(u16, &str, u16)],
    annotations: &[(&str, &str)],
) -> LoadBalancerSpec {
    let ports: Vec<serde_json::Value> = ports
        .iter()
        .enumerate()
        .map(|(i, (port, protocol, node_port))| {
            serde_json::json!({"name": format!("p{i}"), "port": port, "protocol": protocol, "nodePort": node_port})
        })
        .collect();
    let annotations: BTreeMap<String, String> = annotations
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": ports},
    }))
    .unwrap();
    kube_lb_annotations::parse(Cloud::Baidu, &service)
        .unwrap()
        .spec
}

pub fn nodes(count: usize) -> Vec<BackendNode> {
    (1..=count)
        .map(|i| BackendNode {
            name: format!("node-{i}"),
            provider_id: Some(format!("cce://i-node{i:04}")),
            addresses: vec![NodeAddress {
                kind: NodeAddressKind::InternalIp,
                ip: format!("192.168.0.{}", 100 + i).parse().unwrap(),
            }],
            labels: BTreeMap::new(),
        })
        .collect()
}

//! Shared test fixtures: a mock cloud, a provider pointed at it, Services and nodes.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_mock_baidu::{
    ACCESS_KEY_ID, MockBaidu, MockBaiduBuilder, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID,
};
use kube_lb_provider_baidu::sign::Credentials;
use kube_lb_provider_baidu::{BaiduProvider, ProviderOptions, Resolved, WaitSettings};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, CallCounter, NodeAddress, RateLimits, RetryPolicy};
use kube_lb_test_support::ServiceBuilder;

pub struct Harness {
    pub cloud: MockBaidu,
    pub provider: BaiduProvider,
    pub counter: CallCounter,
}

/// Options with short waits and retries, so the tests run quickly; calls counted on `counter`.
pub fn fast_options(counter: CallCounter) -> ProviderOptions {
    ProviderOptions {
        wait: WaitSettings {
            first: Duration::from_millis(20),
            factor: 2.0,
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
    }
}

pub fn provider_for(cloud: &MockBaidu, counter: CallCounter) -> BaiduProvider {
    provider_with(cloud, fast_options(counter))
}

fn provider_with(cloud: &MockBaidu, options: ProviderOptions) -> BaiduProvider {
    let resolved = Resolved {
        credentials: Credentials {
            access_key_id: ACCESS_KEY_ID.into(),
            secret_access_key: SECRET_ACCESS_KEY.into(),
            session_token: None,
        },
        blb_endpoint: cloud.endpoint(),
        eip_endpoint: cloud.endpoint(),
        bcc_endpoint: cloud.endpoint(),
        vpc_id: VPC_ID.into(),
        subnet_id: SUBNET_ID.into(),
        cluster_id: Some(CLUSTER.into()),
    };
    BaiduProvider::new(resolved, "ignored", options).unwrap()
}

pub async fn harness_with(cloud: MockBaidu) -> Harness {
    harness_from(cloud, fast_options)
}

/// A harness on a fresh mock whose provider takes the options `options` makes around its call
/// counter (the others take [`fast_options`]).
pub async fn harness_with_options(options: impl FnOnce(CallCounter) -> ProviderOptions) -> Harness {
    harness_from(MockBaidu::builder().start().await.unwrap(), options)
}

fn harness_from(cloud: MockBaidu, options: impl FnOnce(CallCounter) -> ProviderOptions) -> Harness {
    let counter = CallCounter::new();
    let provider = provider_with(&cloud, options(counter.clone()));
    Harness {
        cloud,
        provider,
        counter,
    }
}

pub async fn harness() -> Harness {
    harness_on(MockBaidu::builder()).await
}

/// A harness on the mock `cloud` describes (delays, quotas), started.
pub async fn harness_on(cloud: MockBaiduBuilder) -> Harness {
    harness_with(cloud.start().await.unwrap()).await
}

/// A LoadBalancer Service parsed for Baidu (the shared builder; nothing Baidu-only).
pub type Svc = ServiceBuilder;

/// `default/<name>` with one port, 80 → nodePort 30080.
pub fn svc(name: &str, uid: &str) -> Svc {
    ServiceBuilder::new(Cloud::Baidu, name, uid)
}

/// A LoadBalancer Service `default/<name>` parsed for Baidu: `ports` are (port, protocol,
/// nodePort), named `p0`, `p1`, … in order.
pub fn spec(
    name: &str,
    uid: &str,
    ports: &[(u16, &str, u16)],
    annotations: &[(&str, &str)],
) -> LoadBalancerSpec {
    service(name, uid, ports, annotations).spec()
}

/// [`spec`] with `spec.loadBalancerIP`.
pub fn spec_with_ip(
    name: &str,
    uid: &str,
    ports: &[(u16, &str, u16)],
    annotations: &[(&str, &str)],
    load_balancer_ip: Option<&str>,
) -> LoadBalancerSpec {
    let service = service(name, uid, ports, annotations);
    match load_balancer_ip {
        Some(ip) => service.load_balancer_ip(ip).spec(),
        None => service.spec(),
    }
}

/// The builder behind [`spec`].
fn service(name: &str, uid: &str, ports: &[(u16, &str, u16)], annotations: &[(&str, &str)]) -> Svc {
    let names: Vec<String> = (0..ports.len()).map(|i| format!("p{i}")).collect();
    let named: Vec<(&str, u16, &str, u16)> = names
        .iter()
        .zip(ports)
        .map(|(name, (port, protocol, node_port))| (name.as_str(), *port, *protocol, *node_port))
        .collect();
    annotations
        .iter()
        .fold(svc(name, uid).ports(&named), |service, (key, value)| {
            service.annotate(key, value)
        })
}

/// `default/web`, one TCP port 80 → nodePort 30080, no annotations: the Service most tests
/// start from (a public BLB with an EIP kube-lb creates).
pub fn web_spec(uid: &str) -> LoadBalancerSpec {
    spec("web", uid, &[(80, "TCP", 30080)], &[])
}

/// [`web_spec`] asking for the EIP at `ip` (`spec.loadBalancerIP`).
pub fn web_spec_at(uid: &str, ip: &str) -> LoadBalancerSpec {
    spec_with_ip("web", uid, &[(80, "TCP", 30080)], &[], Some(ip))
}

pub fn nodes(count: usize) -> Vec<BackendNode> {
    (1..=count).map(node).collect()
}

/// The cluster id every fixture names BLBs with.
pub const CLUSTER: &str = "c-test01";

/// One node, `cce://i-node<index>`, as CCE registers it.
pub fn node(index: usize) -> BackendNode {
    BackendNode {
        name: format!("node-{index}"),
        provider_id: Some(format!("cce://i-node{index:04}")),
        addresses: vec![NodeAddress {
            kind: NodeAddressKind::InternalIp,
            ip: format!("192.168.0.{}", 100 + index).parse().unwrap(),
        }],
        labels: BTreeMap::new(),
    }
}

/// The cloud-config JSON for the mock (the `--cloud-config` of the binary).
pub fn cloud_config(cloud: &MockBaidu) -> String {
    serde_json::json!({
        "ClusterID": CLUSTER,
        "AccessKeyID": ACCESS_KEY_ID,
        "SecretAccessKey": SECRET_ACCESS_KEY,
        "Region": "bj",
        "VpcID": VPC_ID,
        "SubnetID": SUBNET_ID,
        "Endpoint": cloud.endpoint(),
        "EIPEndpoint": cloud.endpoint(),
    })
    .to_string()
}

/// Removes the BLB named `name` behind the provider's back (its EIP is unbound by the cloud,
/// as when someone deletes it in the console).
pub fn remove_out_of_band(cloud: &MockBaidu, name: &str) {
    for blb in cloud.blbs() {
        if blb["name"] == name {
            cloud.remove_blb(blb["blbId"].as_str().unwrap());
        }
    }
}

/// A client of the mock with the operator's own credentials and counter (not the provider's),
/// for changes made behind the provider's back.
pub fn operator_client(cloud: &MockBaidu) -> kube_lb_provider_baidu::BaiduClient {
    let credentials = Credentials {
        access_key_id: ACCESS_KEY_ID.into(),
        secret_access_key: SECRET_ACCESS_KEY.into(),
        session_token: None,
    };
    let api = kube_lb_provider_core::CloudApi::new(
        "operator",
        CallCounter::new(),
        RateLimits::unlimited(),
        RetryPolicy::default(),
    );
    kube_lb_provider_baidu::BaiduClient::new(
        credentials,
        &cloud.endpoint(),
        &cloud.endpoint(),
        api,
        Duration::from_secs(10),
    )
    .unwrap()
}

/// The id of the BLB named `name`.
fn blb_id_named(cloud: &MockBaidu, name: &str) -> String {
    let blb = cloud
        .blbs()
        .into_iter()
        .find(|b| b["name"] == name)
        .unwrap();
    blb["blbId"].as_str().unwrap().to_string()
}

/// Deletes the listener on `port` of the BLB named `name` as an operator would.
pub async fn delete_listener_out_of_band(cloud: &MockBaidu, name: &str, port: u16) {
    let id = blb_id_named(cloud, name);
    operator_client(cloud)
        .delete_listeners(&id, &[port])
        .await
        .unwrap();
}

/// Removes backend server `instance` from the BLB named `name` as an operator would.
pub async fn remove_backend_out_of_band(cloud: &MockBaidu, name: &str, instance: &str) {
    let id = blb_id_named(cloud, name);
    operator_client(cloud)
        .remove_backends(&id, &[instance.to_string()])
        .await
        .unwrap();
}

/// The EIP with address `ip`, as the mock lists it.
pub fn eip_at(cloud: &MockBaidu, ip: &str) -> Option<serde_json::Value> {
    cloud.eips().into_iter().find(|e| e["eip"] == ip)
}

/// A Service as the retired cloud-provider-baiducloud served it.
#[derive(Debug, Clone)]
pub struct UpstreamService {
    pub namespace: String,
    pub name: String,
    /// (protocol, port, nodePort).
    pub ports: Vec<(&'static str, u16, u16)>,
    /// BCC instance ids of the backends.
    pub instances: Vec<String>,
    /// Public (an EIP created and bound) or `cce-load-balancer-internal-vpc`.
    pub public: bool,
}

impl UpstreamService {
    /// Public `default/web` on `ports` (protocol, port, nodePort) with `instances` as backends.
    pub fn public_web(ports: &[(&'static str, u16, u16)], instances: &[&str]) -> Self {
        UpstreamService {
            namespace: "default".into(),
            name: "web".into(),
            ports: ports.to_vec(),
            instances: instances.iter().map(|i| i.to_string()).collect(),
            public: true,
        }
    }
}

/// What upstream left in the cloud for one Service.
#[derive(Debug, Clone)]
pub struct UpstreamBuilt {
    pub blb_id: String,
    pub blb_name: String,
    pub eip: Option<String>,
}

/// Builds, through the signed API, the state cloud-provider-baiducloud created for `svc`
/// (reference other-clouds.md §3.8, upstream `load_balancer_blb.go`, `_listener.go`,
/// `_backend_server.go`, `_eip.go`): a BLB named `CCE/SVC/<cluster>/<ns>/<name>` with the
/// description `auto generated by cce:<cluster>` and no tags; TCP listeners with only port,
/// node port and `RoundRobin` (BCE's default health check), UDP ones with the `HealthCheck`
/// string; the nodes as backend servers by instance id; for a public Service an EIP named as
/// the BLB (Postpaid, ByTraffic, 1000 Mbps, untagged), the description prefixed
/// `cce_auto_create_eip`, then the EIP bound.
pub async fn build_upstream_state(
    provider: &BaiduProvider,
    cluster: &str,
    svc: &UpstreamService,
) -> UpstreamBuilt {
    let client = provider.client();
    let blb_name = format!("CCE/SVC/{cluster}/{}/{}", svc.namespace, svc.name);
    let desc = format!("auto generated by cce:{cluster}");
    let blb_id = client
        .create_blb(&serde_json::json!({
            "name": blb_name, "desc": desc, "vpcId": VPC_ID, "subnetId": SUBNET_ID,
        }))
        .await
        .unwrap();
    for (protocol, port, node_port) in &svc.ports {
        let mut body = serde_json::json!({
            "listenerPort": port, "backendPort": node_port, "scheduler": "RoundRobin",
        });
        if *protocol == "UDP" {
            body["healthCheckString"] = serde_json::json!("HealthCheck");
        }
        client
            .create_listener(&blb_id, protocol, &body)
            .await
            .unwrap();
    }
    if !svc.instances.is_empty() {
        client.add_backends(&blb_id, &svc.instances).await.unwrap();
    }
    let eip = if svc.public {
        client
            .update_blb(
                &blb_id,
                &serde_json::json!({"name": blb_name, "desc": format!("cce_auto_create_eip{desc}")}),
            )
            .await
            .unwrap();
        let ip = client
            .create_eip(&serde_json::json!({
                "name": blb_name, "bandwidthInMbps": 1000,
                "billing": {"paymentTiming": "Postpaid", "billingMethod": "ByTraffic"},
            }))
            .await
            .unwrap();
        client.bind_eip(&ip, &blb_id).await.unwrap();
        Some(ip)
    } else {
        None
    };
    UpstreamBuilt {
        blb_id,
        blb_name,
        eip,
    }
}

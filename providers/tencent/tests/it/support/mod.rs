//! Fixtures: a mock CLB endpoint, a provider pointed at it, Service and node builders.

#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_tencent::{MockTencent, REGION, SECRET_ID, SECRET_KEY, VPC_ID};
use kube_lb_provider_core::{
    BackendNode, CallCounter, CloudApi, LoadBalancerProvider, ProviderError, RateLimits,
    RetryPolicy,
};
use kube_lb_provider_tencent::{
    ClbClient, ProviderOptions, TencentConfig, TencentProvider, WaitSettings,
};
use kube_lb_test_support::{ServiceBuilder, internal_ip_node};
use serde_json::{Value, json};

pub const CLUSTER: &str = "cls-kubelb";
/// The annotation that puts a Service's listeners on a user's CLB.
pub const EXISTED_LBID: &str = "service.kubernetes.io/tke-existed-lbid";

pub struct Harness {
    pub cloud: MockTencent,
    pub provider: TencentProvider,
    pub counter: CallCounter,
}

/// The cloud-config JSON for the mock.
pub fn cloud_config(cloud: &MockTencent) -> String {
    json!({"secretId": SECRET_ID, "secretKey": SECRET_KEY, "region": REGION,
           "vpcId": VPC_ID, "endpoint": cloud.url()})
    .to_string()
}

pub fn fast_options(counter: CallCounter) -> ProviderOptions {
    ProviderOptions {
        wait: WaitSettings {
            first: Duration::from_millis(5),
            factor: 1.5,
            max_interval: Duration::from_millis(40),
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
    provider_for(MockTencent::builder().start().await.unwrap())
}

/// A harness whose mock runs each async task for `delay` (CLBs stay busy that long).
pub async fn harness_with_task_delay(delay: Duration) -> Harness {
    provider_for(
        MockTencent::builder()
            .task_delay(delay)
            .start()
            .await
            .unwrap(),
    )
}

pub fn provider_for(cloud: MockTencent) -> Harness {
    provider_with(cloud, fast_options)
}

/// A harness on a fresh mock whose provider takes the options `options` makes around its call
/// counter (the others take [`fast_options`]).
pub async fn harness_with_options(options: impl FnOnce(CallCounter) -> ProviderOptions) -> Harness {
    provider_with(MockTencent::builder().start().await.unwrap(), options)
}

fn provider_with(
    cloud: MockTencent,
    options: impl FnOnce(CallCounter) -> ProviderOptions,
) -> Harness {
    let config = TencentConfig::resolve(Some(&cloud_config(&cloud)), &|_| None).unwrap();
    let counter = CallCounter::new();
    let provider = TencentProvider::new(config, CLUSTER, options(counter.clone())).unwrap();
    Harness {
        cloud,
        provider,
        counter,
    }
}

/// A second provider on `h`'s mock, as another process (a restarted controller, the CLI)
/// would have: same cloud, nothing remembered.
pub fn provider_for_same_cloud(h: &Harness) -> TencentProvider {
    let config = TencentConfig::resolve(Some(&cloud_config(&h.cloud)), &|_| None).unwrap();
    TencentProvider::new(config, CLUSTER, fast_options(CallCounter::new())).unwrap()
}

/// A LoadBalancer Service parsed for Tencent (the shared builder; nothing Tencent-only).
pub type Svc = ServiceBuilder;

/// `default/<name>` with one port, 80 → nodePort 30080.
pub fn svc(name: &str, uid: &str) -> Svc {
    ServiceBuilder::new(Cloud::Tencent, name, uid)
}

/// The error `ensure` of `service` on one node fails with.
pub async fn refused(h: &Harness, service: &Svc) -> ProviderError {
    h.provider
        .ensure(&service.spec(), &nodes(1))
        .await
        .unwrap_err()
}

pub fn node(name: &str, ip: &str) -> BackendNode {
    internal_ip_node(name, ip)
}

pub fn nodes(n: usize) -> Vec<BackendNode> {
    (1..=n)
        .map(|i| node(&format!("node-{i}"), &format!("10.0.0.{}", 100 + i)))
        .collect()
}

/// The CLBs tagged for `uid`.
pub fn clbs_for(cloud: &MockTencent, uid: &str) -> Vec<Value> {
    cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| {
            lb["Tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["TagKey"] == "tke-lb-serviceuuid" && t["TagValue"] == uid)
        })
        .collect()
}

/// A CLB a user made in the console (no TKE tags) with a listener of their own on TCP:8443;
/// returns its id.
pub fn seed_users_clb(cloud: &MockTencent) -> String {
    cloud.seed_load_balancer(
        "users-clb",
        &[("team", "edge")],
        &[("console-listener", "TCP", 8443)],
    )
}

/// `protocol:port -> sorted "ip:port"` of a CLB.
pub fn bindings(cloud: &MockTencent, lb_id: &str) -> BTreeMap<String, Vec<String>> {
    cloud
        .listeners(lb_id)
        .iter()
        .map(|l| {
            let mut targets: Vec<String> = l["Targets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    let address = t["EniIp"].as_str().or(t["InstanceId"].as_str());
                    format!("{}:{}", address.unwrap_or_default(), t["Port"])
                })
                .collect();
            targets.sort();
            (
                format!("{}:{}", l["Protocol"].as_str().unwrap(), l["Port"]),
                targets,
            )
        })
        .collect()
}

/// A client of the mock with the operator's own credentials and counter (not the provider's),
/// for changes made behind the provider's back.
fn operator_client(cloud: &MockTencent) -> ClbClient {
    let config = TencentConfig::resolve(Some(&cloud_config(cloud)), &|_| None).unwrap();
    let api = CloudApi::new(
        "operator",
        CallCounter::new(),
        RateLimits::unlimited(),
        RetryPolicy::default(),
    );
    ClbClient::new(config, api, Duration::from_secs(10)).unwrap()
}

/// Waits until `gone` holds for the mock (its tasks run on their own), at most 10 s.
async fn wait_until(what: &str, gone: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !gone() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deletes CLB `lb_id` as an operator would in the console (its own credentials and client,
/// not the provider's counter), and waits until the mock no longer shows it.
pub async fn remove_out_of_band(cloud: &MockTencent, lb_id: &str) {
    operator_client(cloud)
        .delete_load_balancer(lb_id)
        .await
        .unwrap();
    wait_until(
        &format!("{lb_id} still there after an out-of-band delete"),
        || {
            !cloud
                .load_balancers()
                .iter()
                .any(|lb| lb["LoadBalancerId"] == lb_id)
        },
    )
    .await;
}

/// Deletes the listener on `port` of CLB `lb_id` as an operator would in the console, and
/// waits until the mock no longer shows it.
pub async fn delete_listener_out_of_band(cloud: &MockTencent, lb_id: &str, port: u16) {
    let listener = cloud
        .listeners(lb_id)
        .into_iter()
        .find(|l| l["Port"] == port)
        .unwrap();
    let id = listener["ListenerId"].as_str().unwrap().to_string();
    operator_client(cloud)
        .delete_listeners(lb_id, &[id])
        .await
        .unwrap();
    wait_until(
        &format!("listener {port} of {lb_id} still there after an out-of-band delete"),
        || !cloud.listeners(lb_id).iter().any(|l| l["Port"] == port),
    )
    .await;
}

/// The targets bound to CLB `lb_id`, as `<listener port>/<EniIp>:<port>`.
pub fn targets_of(cloud: &MockTencent, lb_id: &str) -> Vec<String> {
    cloud
        .listeners(lb_id)
        .iter()
        .flat_map(|l| {
            let port = l["Port"].clone();
            l["Targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| {
                    format!(
                        "{port}/{}:{}",
                        t["EniIp"].as_str().unwrap_or_default(),
                        t["Port"]
                    )
                })
        })
        .collect()
}

/// Unbinds `target` (one of [`targets_of`]) from CLB `lb_id` as an operator would in the
/// console, and waits until the mock no longer shows it.
pub async fn unbind_target_out_of_band(cloud: &MockTencent, lb_id: &str, target: &str) {
    let (listener_port, address) = target.split_once('/').unwrap();
    let (ip, port) = address.rsplit_once(':').unwrap();
    let listener = cloud
        .listeners(lb_id)
        .into_iter()
        .find(|l| l["Port"].as_u64() == listener_port.parse().ok())
        .unwrap();
    let body = json!({"ListenerId": listener["ListenerId"], "EniIp": ip,
        "Port": port.parse::<u16>().unwrap()});
    let failed = operator_client(cloud)
        .batch_targets(lb_id, &[body], false)
        .await
        .unwrap();
    assert!(failed.is_empty(), "unbind refused for {failed:?}");
    wait_until(
        &format!("{target} still bound after an out-of-band unbind"),
        || !targets_of(cloud, lb_id).iter().any(|t| t == target),
    )
    .await;
}

/// A CLB as TKE's own service controller leaves it for Service `uid` in `cluster`
/// (reference other-clouds.md §2.2): tags `tke-createdBy-flag=yes`, `tke-clusterId`,
/// `tke-lb-serviceuuid`, one `TKE-DEDICATED-LISTENER` per port, each node bound by its CVM
/// instance on the NodePort. `ports` are (protocol, port, nodePort); `instances` the CVM ids.
pub fn build_tke_state(
    cloud: &MockTencent,
    cluster: &str,
    uid: &str,
    name: &str,
    ports: &[(&str, u16, u16)],
    instances: &[&str],
) -> String {
    let listeners: Vec<(&str, &str, u16)> = ports
        .iter()
        .map(|(protocol, port, _)| ("TKE-DEDICATED-LISTENER", *protocol, *port))
        .collect();
    let id = cloud.seed_load_balancer(
        name,
        &[
            ("tke-createdBy-flag", "yes"),
            ("tke-clusterId", cluster),
            ("tke-lb-serviceuuid", uid),
        ],
        &listeners,
    );
    for listener in cloud.listeners(&id) {
        let node_port = ports
            .iter()
            .find(|(protocol, port, _)| {
                listener["Protocol"] == *protocol && listener["Port"] == *port
            })
            .map(|(_, _, node_port)| *node_port)
            .unwrap();
        for instance in instances {
            cloud.seed_target(
                &id,
                listener["ListenerId"].as_str().unwrap(),
                instance,
                node_port,
            );
        }
    }
    id
}

/// Actions of the mutating calls so far.
pub fn mutations(cloud: &MockTencent) -> Vec<String> {
    cloud.mutations().iter().map(|e| e.action.clone()).collect()
}

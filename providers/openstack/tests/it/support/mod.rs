//! Fixtures: a mock OpenStack, a provider pointed at it, Service and node builders.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_mock_openstack::{
    APPLICATION_CREDENTIAL_ID, APPLICATION_CREDENTIAL_SECRET, DOMAIN, MockOpenStack, PASSWORD,
    PRIVATE_SUBNET_ID, PROJECT_NAME, PUBLIC_NETWORK_ID, USERNAME,
};
use kube_lb_provider_core::{BackendNode, CallCounter, RateLimits, RetryPolicy};
use kube_lb_provider_openstack::{CloudConfig, OpenStackProvider, ProviderOptions, WaitSettings};
use kube_lb_test_support::{ServiceBuilder, internal_ip_node};
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

/// A harness whose in-place retries follow `retry` (the others use short test steps).
pub async fn harness_retrying(retry: RetryPolicy) -> Harness {
    harness_with_options(|counter| ProviderOptions {
        retry,
        ..fast_options(counter)
    })
    .await
}

/// A harness on a fresh mock whose provider takes the options `options` makes around its call
/// counter (the others take [`fast_options`]).
pub async fn harness_with_options(options: impl FnOnce(CallCounter) -> ProviderOptions) -> Harness {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let config = CloudConfig::parse(&cloud_conf(&cloud, "")).unwrap();
    provider_with(cloud, config, options)
}

pub fn provider_for(cloud: MockOpenStack, config: CloudConfig) -> Harness {
    provider_with(cloud, config, fast_options)
}

fn provider_with(
    cloud: MockOpenStack,
    config: CloudConfig,
    options: impl FnOnce(CallCounter) -> ProviderOptions,
) -> Harness {
    let counter = CallCounter::new();
    let provider = OpenStackProvider::new(config, CLUSTER, options(counter.clone())).unwrap();
    Harness {
        cloud,
        provider,
        counter,
    }
}

/// A LoadBalancer Service parsed for OpenStack: the shared builder plus [`OpenStackSvc`].
pub type Svc = ServiceBuilder;

/// `default/<name>` with one port, 80 → nodePort 30080.
pub fn svc(name: &str, uid: &str) -> Svc {
    ServiceBuilder::new(Cloud::Openstack, name, uid)
}

/// OpenStack's own shortcut on the Service builder.
pub trait OpenStackSvc {
    /// `openstack-internal-load-balancer: "true"` (no floating IP).
    fn internal(self) -> Self;
}

impl OpenStackSvc for Svc {
    fn internal(self) -> Self {
        self.annotate(
            "service.beta.kubernetes.io/openstack-internal-load-balancer",
            "true",
        )
    }
}

pub fn node(name: &str, ip: &str) -> BackendNode {
    internal_ip_node(name, ip)
}

/// A mock in which each of [`nodes`]`(n)` has a VM port on the private network with its
/// address (server `server-<i>`), where managed security groups attach.
pub async fn mock_with_node_ports(n: usize) -> MockOpenStack {
    let mut builder = MockOpenStack::builder();
    for (i, node) in nodes(n).iter().enumerate() {
        builder = builder.server_port(
            kube_lb_mock_openstack::PRIVATE_NETWORK_ID,
            &format!("server-{i}"),
            &node.internal_ip().unwrap().to_string(),
        );
    }
    builder.start().await.unwrap()
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

/// A project-scoped token from the mock's Keystone, for calls made behind the provider's back
/// (another controller, an operator with the `openstack` CLI).
pub async fn token(cloud: &MockOpenStack) -> String {
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": USERNAME, "domain": {"name": DOMAIN}, "password": PASSWORD}}},
        "scope": {"project": {"name": PROJECT_NAME, "domain": {"name": DOMAIN}}}}});
    let response = reqwest::Client::new()
        .post(format!("{}/auth/tokens", cloud.auth_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "token request refused");
    response.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string()
}

/// One call to the mock with `token`: (status, JSON body or null). `path` starts at the
/// service root (`/load-balancer/v2/lbaas/...`, `/networking/v2.0/...`).
pub async fn call(
    cloud: &MockOpenStack,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{path}", cloud.url()))
        .header("x-auth-token", token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until the load balancer `id` is `ACTIVE` (or gone, for a delete): Octavia clients
/// poll, so a hand-made change is finished before the test goes on.
pub async fn settle(cloud: &MockOpenStack, token: &str, id: &str) -> Option<Value> {
    let path = format!("/load-balancer/v2/lbaas/loadbalancers/{id}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, shown) = call(cloud, token, reqwest::Method::GET, &path, None).await;
        if status == 404 {
            return None;
        }
        let lb = shown["loadbalancer"].clone();
        if lb["provisioning_status"] == "ACTIVE" {
            return Some(lb);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "load balancer {id} never settled: {lb}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Deletes the Service's load balancer (cascade) as an operator would, and waits until it is
/// gone.
pub async fn remove_out_of_band(cloud: &MockOpenStack, lb_name: &str) {
    let token = token(cloud).await;
    let id = lb_named(cloud, lb_name)["id"].as_str().unwrap().to_string();
    let (status, body) = call(
        cloud,
        &token,
        reqwest::Method::DELETE,
        &format!("/load-balancer/v2/lbaas/loadbalancers/{id}?cascade=true"),
        None,
    )
    .await;
    assert_eq!(status, 204, "out-of-band delete: {body}");
    assert_eq!(settle(cloud, &token, &id).await, None);
}

/// What cloud-provider-openstack (OCCM) builds for one Service, described from
/// `reference/other-clouds.md` §1.1–1.5: the load balancer `kube_service_<cluster>_<ns>_<name>`
/// with its upstream description and the name as its only tag, per port `listener_<i>_…` →
/// `pool_<i>_…` → members named after the nodes (and `monitor_<i>_…` when monitors are on),
/// plus the floating IP with OCCM's description on the VIP port.
#[derive(Debug, Clone)]
pub struct OccmService {
    /// Namespace.
    pub namespace: String,
    /// Service name.
    pub name: String,
    /// (protocol, port, nodePort) per Service port, in spec order.
    pub ports: Vec<(String, u16, u16)>,
    /// (node name, InternalIP).
    pub nodes: Vec<(String, String)>,
    /// HTTP monitors on this healthCheckNodePort (ETP=Local with `create-monitor`), or TCP
    /// monitors when `Some(0)`; none when `None`.
    pub monitor: Option<u16>,
    /// A floating IP on the VIP (an external Service).
    pub floating_ip: bool,
    /// Built as Kubernetes' in-tree OpenStack provider did before 2019 for the Service with
    /// this UID: load balancer `a<UID without dashes>` (32 characters) described by that name,
    /// no tags, `listener_<lb>_<i>` / `pool_<lb>_<i>` / `monitor_<lb>_<i>`, members
    /// `member_<lb>_<i>_<node>`, and the floating IP described by that name. Upstream still
    /// finds these under the legacy name.
    pub legacy_uid: Option<String>,
}

impl OccmService {
    /// `default/<name>` on `nodes`, one TCP port 80 → 30080, external, no monitor.
    pub fn new(name: &str, nodes: Vec<(String, String)>) -> Self {
        OccmService {
            namespace: "default".into(),
            name: name.into(),
            ports: vec![("TCP".into(), 80, 30080)],
            nodes,
            monitor: None,
            floating_ip: true,
            legacy_uid: None,
        }
    }
}

/// `a` + the UID without dashes, cut to 32 characters (`cloudprovider.DefaultLoadBalancerName`).
pub fn legacy_name(uid: &str) -> String {
    std::iter::once('a')
        .chain(uid.chars().filter(|c| *c != '-'))
        .take(32)
        .collect()
}

/// What [`build_occm_state`] made: the load balancer and the floating IP (if any).
#[derive(Debug, Clone)]
pub struct OccmBuilt {
    /// The load balancer document after it settled.
    pub load_balancer: Value,
    /// The floating IP address.
    pub floating_ip: Option<String>,
}

/// Builds `service` in the mock through the API, the way OCCM's fully populated create does it
/// for cluster `cluster`.
pub async fn build_occm_state(
    cloud: &MockOpenStack,
    cluster: &str,
    service: &OccmService,
) -> OccmBuilt {
    let token = token(cloud).await;
    let legacy = service.legacy_uid.as_deref().map(legacy_name);
    let lb_name = legacy.clone().unwrap_or_else(|| {
        format!(
            "kube_service_{cluster}_{}_{}",
            service.namespace, service.name
        )
    });
    // Child names: `<kind>_<i>_<lb>` upstream, `<kind>_<lb>_<i>` in-tree.
    let child = |kind: &str, i: usize| match &legacy {
        Some(_) => format!("{kind}_{lb_name}_{i}"),
        None => format!("{kind}_{i}_{lb_name}"),
    };
    // What the descriptions name: `<ns>/<name>` upstream, the load balancer in-tree.
    let described = match &legacy {
        Some(name) => name.clone(),
        None => format!("{}/{}", service.namespace, service.name),
    };
    let tags = if legacy.is_some() {
        json!([])
    } else {
        json!([lb_name])
    };
    let listeners: Vec<Value> = service
        .ports
        .iter()
        .enumerate()
        .map(|(i, (protocol, port, node_port))| {
            let members: Vec<Value> = service
                .nodes
                .iter()
                .map(|(node, ip)| {
                    let member_name = match &legacy {
                        Some(_) => format!("member_{lb_name}_{i}_{node}"),
                        None => node.clone(),
                    };
                    let mut member = json!({"name": member_name, "address": ip, "protocol_port": node_port,
                        "subnet_id": PRIVATE_SUBNET_ID});
                    if let Some(health) = service.monitor.filter(|p| *p != 0) {
                        member["monitor_port"] = json!(health);
                    }
                    member
                })
                .collect();
            let mut pool = json!({"name": child("pool", i), "protocol": protocol,
                "lb_algorithm": "ROUND_ROBIN", "members": members});
            match service.monitor {
                Some(0) => {
                    pool["healthmonitor"] = json!({"name": child("monitor", i),
                        "type": if protocol == "UDP" { "UDP-CONNECT" } else { "TCP" },
                        "delay": 5, "timeout": 3, "max_retries": 1, "max_retries_down": 3});
                }
                Some(_) => {
                    pool["healthmonitor"] = json!({"name": child("monitor", i),
                        "type": "HTTP", "http_method": "GET", "url_path": "/healthz",
                        "expected_codes": "200", "delay": 5, "timeout": 3, "max_retries": 1,
                        "max_retries_down": 3});
                }
                None => {}
            }
            json!({"name": child("listener", i), "protocol": protocol,
                "protocol_port": port, "connection_limit": -1, "tags": tags,
                "default_pool": pool})
        })
        .collect();
    let body = json!({"loadbalancer": {
        "name": lb_name,
        "description": format!("Kubernetes external service {described} from cluster {cluster}"),
        "vip_subnet_id": PRIVATE_SUBNET_ID, "provider": "amphora", "tags": tags,
        "listeners": listeners}});
    let (status, created) = call(
        cloud,
        &token,
        reqwest::Method::POST,
        "/load-balancer/v2/lbaas/loadbalancers",
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "OCCM-style create refused: {created}");
    let id = created["loadbalancer"]["id"].as_str().unwrap().to_string();
    let load_balancer = settle(cloud, &token, &id).await.unwrap();
    let mut floating_ip = None;
    if service.floating_ip {
        let (status, fip) = call(
            cloud,
            &token,
            reqwest::Method::POST,
            "/networking/v2.0/floatingips",
            Some(json!({"floatingip": {
                "floating_network_id": PUBLIC_NETWORK_ID,
                "port_id": load_balancer["vip_port_id"],
                "description": format!(
                    "Floating IP for Kubernetes external service {described} from cluster {cluster}"),
            }})),
        )
        .await;
        assert_eq!(status, 201, "OCCM-style floating IP refused: {fip}");
        floating_ip = fip["floatingip"]["floating_ip_address"]
            .as_str()
            .map(str::to_string);
    }
    OccmBuilt {
        load_balancer,
        floating_ip,
    }
}

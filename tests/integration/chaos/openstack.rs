//! OpenStack for the chaos suite: the Keystone + Octavia + Neutron mock, every endpoint the
//! controller uses (Keystone by `auth-url`, Octavia and Neutron by the catalog) behind the fault
//! proxy, and Octavia's asynchronous provisioning (`PENDING_*` for a while after each change)
//! switched on, so kills land while a load balancer is busy. `manage-security-groups` is on, so
//! lost answers and kills also land in the security-group paths: each Service's group, its
//! rules, and the node ports it is attached to.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_annotations::keys::openstack::{INTERNAL, TIMEOUT_CLIENT_DATA};
use kube_lb_mock_openstack::{
    DOMAIN, MockOpenStack, PASSWORD, PRIVATE_NETWORK_ID, PRIVATE_SUBNET_ID, PROJECT_NAME,
    PUBLIC_NETWORK_ID, REGION, USERNAME,
};
use kube_lb_provider_core::naming::load_balancer_name;
use serde_json::Value;

use super::{ChaosCloud, Dialect, FaultProxy, Inventory, ready_node, write_cloud_config};

/// How long each change keeps a load balancer `PENDING_*`: long enough that the controller
/// meets Octavia's 409 "immutable" and is killed mid-wait, short enough for the bounds the
/// other clouds share.
const PROVISIONING: Duration = Duration::from_millis(250);

/// The tag kube-lb puts on a load balancer with the Service UID it was made for.
const UID_TAG_PREFIX: &str = "kube_lb_uid_";

/// How kube-lb (as upstream) names a Service's security group: `lb-sg-<UID>-<ns>-<name>`.
const SECURITY_GROUP_PREFIX: &str = "lb-sg-";

/// The nodes: addresses on the mock's private subnet (`10.0.0.0/24`), where members go, each
/// with its server's port there (where the Services' security groups are attached).
const NODES: [(&str, &str, &str); 2] = [
    (
        "node-1",
        "10.0.0.11",
        "5a1e0000-0000-4000-8000-000000000001",
    ),
    (
        "node-2",
        "10.0.0.12",
        "5a1e0000-0000-4000-8000-000000000002",
    ),
];

/// The mock, started with a provisioning delay.
pub struct OpenStack {
    mock: MockOpenStack,
    /// `cloud.conf` names only the VIP network, so every Service's member subnet is found from
    /// the nodes' Neutron ports (and lost answers and kills land in that look-up too).
    discovers_member_subnet: bool,
}

impl OpenStack {
    /// Starts the mock with its default public and private networks and the nodes' ports;
    /// `cloud.conf` names the subnet.
    pub async fn start() -> Self {
        Self::started(false).await
    }

    /// The same, with `cloud.conf` naming only the VIP network: the member subnet is discovered.
    pub async fn start_discovering_the_member_subnet() -> Self {
        Self::started(true).await
    }

    async fn started(discovers_member_subnet: bool) -> Self {
        let mut builder = MockOpenStack::builder().provisioning_delay(PROVISIONING);
        for (_, ip, server) in NODES {
            builder = builder.server_port(PRIVATE_NETWORK_ID, server, ip);
        }
        let mock = builder.start().await.unwrap();
        Self {
            mock,
            discovers_member_subnet,
        }
    }

    /// True for the nodes' own ports (fixtures, not kube-lb's).
    fn is_node_port(port: &Value) -> bool {
        NODES
            .iter()
            .any(|(_, _, server)| text(port, "device_id") == *server)
    }
}

/// The key the suite knows a load balancer by: the deterministic name of the Service UID it
/// is tagged with, or (no UID tag: not made by kube-lb for a Service) its own name.
fn service_key(lb: &Value) -> String {
    let uid = lb["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|tag| tag.strip_prefix(UID_TAG_PREFIX));
    match uid {
        Some(uid) => load_balancer_name(uid),
        None => lb["name"].as_str().unwrap_or_default().to_string(),
    }
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or_default()
}

/// The id of the first load balancer a listener, pool or monitor document names.
fn parent_lb(value: &Value) -> &str {
    value["loadbalancers"]
        .as_array()
        .and_then(|lbs| lbs.first())
        .map(|lb| text(lb, "id"))
        .unwrap_or_default()
}

#[async_trait]
impl ChaosCloud for OpenStack {
    fn name(&self) -> &'static str {
        "openstack"
    }

    fn controller(
        &self,
        dir: &Path,
        proxy: Option<&FaultProxy>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let endpoint = match proxy {
            Some(proxy) => {
                // The catalog a token carries names the proxy, so Octavia and Neutron calls
                // go through it too, not only Keystone's.
                self.mock.advertise_url(&proxy.url());
                proxy.url()
            }
            None => self.mock.url(),
        };
        let vip = if self.discovers_member_subnet {
            format!("network-id = {PRIVATE_NETWORK_ID}")
        } else {
            format!("subnet-id = {PRIVATE_SUBNET_ID}")
        };
        let conf = format!(
            "[Global]\nauth-url = {endpoint}/v3\nusername = {USERNAME}\npassword = {PASSWORD}\n\
             user-domain-name = {DOMAIN}\nproject-name = {PROJECT_NAME}\n\
             project-domain-name = {DOMAIN}\nregion = {REGION}\n\n\
             [LoadBalancer]\nfloating-network-id = {PUBLIC_NETWORK_ID}\n\
             {vip}\ncreate-monitor = true\n\
             manage-security-groups = true\n"
        );
        (write_cloud_config(dir, "cloud.conf", &conf), Vec::new())
    }

    fn upstream(&self) -> Option<(String, Dialect)> {
        Some((self.mock.url(), Dialect::OpenStack))
    }

    fn nodes(&self) -> Vec<Value> {
        NODES
            .iter()
            .map(|(name, ip, server)| {
                ready_node(name, ip, Some(&format!("openstack:///{server}")), None)
            })
            .collect()
    }

    /// Everything kube-lb may have made, each child named with the key of its load balancer so
    /// the suite can tell whose it is. The mock starts with no load-balancer resources, no
    /// floating IPs, no security groups and no ports but the nodes': all the others are
    /// kube-lb's (ports are VIP ports). A security group is keyed by the Service UID its name
    /// carries, so one outliving its Service, or left behind, is reported; so is a kube-lb
    /// group still attached to a node's port.
    async fn inventory(&self) -> Result<Inventory, String> {
        let mut inventory = Inventory::default();
        let mut key_of: BTreeMap<String, String> = BTreeMap::new();
        let mut key_of_port: BTreeMap<String, String> = BTreeMap::new();
        for lb in self.mock.load_balancers() {
            let key = service_key(&lb);
            key_of.insert(text(&lb, "id").to_string(), key.clone());
            key_of_port.insert(text(&lb, "vip_port_id").to_string(), key.clone());
            inventory.load_balancers.push((
                key,
                format!(
                    "loadbalancer {} {}",
                    text(&lb, "name"),
                    text(&lb, "provisioning_status")
                ),
            ));
        }
        let owner = |id: &str| {
            key_of
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("missing-lb-{id}"))
        };
        for listener in self.mock.listeners() {
            inventory.others.push(format!(
                "listener/{}@{}",
                text(&listener, "name"),
                owner(parent_lb(&listener))
            ));
        }
        for pool in self.mock.pools() {
            let lb = owner(parent_lb(&pool));
            inventory
                .others
                .push(format!("pool/{}@{lb}", text(&pool, "name")));
            for member in self.mock.members(text(&pool, "id")) {
                inventory.others.push(format!(
                    "member/{}:{}@{lb}",
                    text(&member, "address"),
                    member["protocol_port"]
                ));
            }
        }
        let pool_lb: BTreeMap<String, String> = self
            .mock
            .pools()
            .iter()
            .map(|pool| (text(pool, "id").to_string(), owner(parent_lb(pool))))
            .collect();
        for monitor in self.mock.health_monitors() {
            let lb = monitor["pools"]
                .as_array()
                .and_then(|pools| pools.first())
                .and_then(|pool| pool_lb.get(text(pool, "id")))
                .cloned()
                .unwrap_or_else(|| owner(parent_lb(&monitor)));
            inventory
                .others
                .push(format!("healthmonitor/{}@{lb}", text(&monitor, "name")));
        }
        for fip in self.mock.floating_ips() {
            let port = text(&fip, "port_id");
            let on = key_of_port
                .get(port)
                .cloned()
                .unwrap_or_else(|| format!("detached ({})", text(&fip, "description")));
            inventory.others.push(format!(
                "floatingip/{}@{on}",
                text(&fip, "floating_ip_address")
            ));
        }
        let mut group_key: BTreeMap<String, String> = BTreeMap::new();
        for group in self.mock.security_groups() {
            let Some(rest) = text(&group, "name").strip_prefix(SECURITY_GROUP_PREFIX) else {
                continue;
            };
            // A Kubernetes UID is 36 characters; the namespace and name follow it.
            let key = rest
                .get(..36)
                .map(load_balancer_name)
                .unwrap_or_else(|| rest.to_string());
            group_key.insert(text(&group, "id").to_string(), key.clone());
            inventory
                .others
                .push(format!("securitygroup/{}@{key}", text(&group, "name")));
        }
        for port in self.mock.ports() {
            let id = text(&port, "id");
            if Self::is_node_port(&port) {
                for group in port["security_groups"].as_array().into_iter().flatten() {
                    if let Some(key) = group.as_str().and_then(|g| group_key.get(g)) {
                        inventory
                            .others
                            .push(format!("attachment/{}@{key}", text(&port, "device_id")));
                    }
                }
                continue;
            }
            let on = key_of_port
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("no-lb ({})", text(&port, "device_id")));
            inventory
                .others
                .push(format!("port/{}@{on}", text(&port, "name")));
        }
        Ok(inventory)
    }

    fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
        // Internal: no floating IP (released or attached on each switch).
        Some((INTERNAL, "true"))
    }

    fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
        Some((TIMEOUT_CLIENT_DATA, &["50000", "60000", "120000"]))
    }
}

//! The parts of Octavia and Neutron documents kube-lb reads. Unknown fields are ignored and
//! absent ones default, so newer API versions decode unchanged.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// A `{"id": ...}` reference.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct IdRef {
    /// The referenced object's id.
    pub id: String,
}

/// An Octavia load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LoadBalancer {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description (carries the ownership phrase).
    #[serde(default)]
    pub description: String,
    /// `ACTIVE`, `PENDING_CREATE`, `PENDING_UPDATE`, `PENDING_DELETE`, `ERROR`, `DELETED`.
    pub provisioning_status: String,
    /// The VIP.
    #[serde(default)]
    pub vip_address: String,
    /// The Neutron port holding the VIP (floating IPs attach here).
    #[serde(default)]
    pub vip_port_id: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<String>,
    /// The VIP's subnet (fixed at creation, like the four below).
    #[serde(default)]
    pub vip_subnet_id: Option<String>,
    /// The VIP's network.
    #[serde(default)]
    pub vip_network_id: Option<String>,
    /// The Octavia flavor.
    #[serde(default)]
    pub flavor_id: Option<String>,
    /// The availability zone.
    #[serde(default)]
    pub availability_zone: Option<String>,
}

/// An Octavia listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Listener {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP`, ...
    pub protocol: String,
    /// The port it listens on.
    pub protocol_port: u16,
    /// -1 for unlimited.
    #[serde(default = "unlimited")]
    pub connection_limit: i64,
    /// Client CIDRs allowed (`None`: all).
    #[serde(default)]
    pub allowed_cidrs: Option<Vec<String>>,
    /// The pool traffic goes to.
    #[serde(default)]
    pub default_pool_id: Option<String>,
    /// Headers inserted (`X-Forwarded-For`), values as Octavia echoes them.
    #[serde(default, deserialize_with = "null_as_default")]
    pub insert_headers: BTreeMap<String, Value>,
    /// Barbican TLS container for `TERMINATED_HTTPS`.
    #[serde(default)]
    pub default_tls_container_ref: Option<String>,
    /// Client inactivity timeout, ms (absent before Octavia 2.1).
    #[serde(default)]
    pub timeout_client_data: Option<u64>,
    /// Member connect timeout, ms.
    #[serde(default)]
    pub timeout_member_connect: Option<u64>,
    /// Member inactivity timeout, ms.
    #[serde(default)]
    pub timeout_member_data: Option<u64>,
    /// TCP inspection timeout, ms.
    #[serde(default)]
    pub timeout_tcp_inspect: Option<u64>,
    /// Tags.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
    /// The load balancer(s) it belongs to.
    #[serde(default, deserialize_with = "null_as_default")]
    pub loadbalancers: Vec<IdRef>,
}

impl Listener {
    /// One of the four timeouts by its field name.
    pub fn timeout(&self, field: &str) -> Option<u64> {
        match field {
            "timeout_client_data" => self.timeout_client_data,
            "timeout_member_connect" => self.timeout_member_connect,
            "timeout_member_data" => self.timeout_member_data,
            "timeout_tcp_inspect" => self.timeout_tcp_inspect,
            _ => None,
        }
    }
}

/// `null` decodes as the default (Octavia writes `null` for unset maps and lists).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn unlimited() -> i64 {
    -1
}

/// An Octavia pool.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Pool {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP`, `PROXY`, `PROXYV2`, ...
    pub protocol: String,
    /// `ROUND_ROBIN`, ...
    pub lb_algorithm: String,
    /// The listeners using it.
    #[serde(default)]
    pub listeners: Vec<IdRef>,
    /// Its health monitor.
    #[serde(default)]
    pub healthmonitor_id: Option<String>,
    /// Its members' ids (the listing carries no more).
    #[serde(default, deserialize_with = "null_as_default")]
    pub members: Vec<IdRef>,
    /// The load balancer(s) it belongs to.
    #[serde(default, deserialize_with = "null_as_default")]
    pub loadbalancers: Vec<IdRef>,
}

/// An Octavia pool member.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    /// Id.
    pub id: String,
    /// Name (the node name).
    #[serde(default)]
    pub name: String,
    /// The node address.
    pub address: String,
    /// The node port.
    pub protocol_port: u16,
    /// The port health checks go to, when not `protocol_port`.
    #[serde(default)]
    pub monitor_port: Option<u16>,
    /// The subnet the address is on.
    #[serde(default)]
    pub subnet_id: Option<String>,
}

/// An Octavia health monitor.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct HealthMonitor {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// `TCP`, `UDP-CONNECT`, `HTTP`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds between checks.
    pub delay: u64,
    /// Seconds a check may take.
    pub timeout: u64,
    /// Successes to mark a member up.
    pub max_retries: u8,
    /// Failures to mark a member down.
    #[serde(default)]
    pub max_retries_down: Option<u8>,
    /// HTTP path (HTTP monitors).
    #[serde(default)]
    pub url_path: Option<String>,
}

/// A Neutron subnet.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Subnet {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Its network.
    #[serde(default)]
    pub network_id: String,
    /// 4 or 6.
    #[serde(default)]
    pub ip_version: u8,
    /// Its address range (`10.0.0.0/24`).
    #[serde(default)]
    pub cidr: String,
    /// Tags.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
}

/// A Neutron floating IP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FloatingIp {
    /// Id.
    pub id: String,
    /// The public address.
    pub floating_ip_address: String,
    /// The port it is associated with.
    #[serde(default)]
    pub port_id: Option<String>,
    /// Description (carries the ownership phrase when kube-lb created it).
    #[serde(default)]
    pub description: String,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<String>,
}

/// A Neutron network.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Network {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Whether floating IPs can come from it.
    #[serde(default, rename = "router:external")]
    pub external: bool,
}

/// A Neutron security group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroup {
    /// Id.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description (carries the ownership phrase).
    #[serde(default)]
    pub description: String,
    /// Tags.
    #[serde(default, deserialize_with = "null_as_default")]
    pub tags: Vec<String>,
    /// Its rules (Neutron embeds them in the group document).
    #[serde(default, deserialize_with = "null_as_default")]
    pub security_group_rules: Vec<SecurityGroupRule>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<String>,
}

/// A Neutron security group rule.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecurityGroupRule {
    /// Id.
    pub id: String,
    /// `ingress` or `egress`.
    #[serde(default)]
    pub direction: String,
    /// `IPv4` or `IPv6`.
    #[serde(default)]
    pub ethertype: String,
    /// `tcp`, `udp`, ... (`None`: any).
    #[serde(default)]
    pub protocol: Option<String>,
    /// First port.
    #[serde(default)]
    pub port_range_min: Option<u16>,
    /// Last port.
    #[serde(default)]
    pub port_range_max: Option<u16>,
    /// Source CIDR (`None`: anywhere, or a remote group).
    #[serde(default)]
    pub remote_ip_prefix: Option<String>,
    /// Source security group.
    #[serde(default)]
    pub remote_group_id: Option<String>,
    /// Description (marks the rules kube-lb made).
    #[serde(default, deserialize_with = "null_as_default")]
    pub description: String,
}

/// One address of a Neutron port.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FixedIp {
    /// The subnet.
    #[serde(default)]
    pub subnet_id: String,
    /// The address.
    #[serde(default)]
    pub ip_address: String,
}

/// A Neutron port.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Port {
    /// Id.
    pub id: String,
    /// Its network.
    #[serde(default)]
    pub network_id: String,
    /// The server (or other device) it belongs to.
    #[serde(default)]
    pub device_id: String,
    /// Its addresses.
    #[serde(default, deserialize_with = "null_as_default")]
    pub fixed_ips: Vec<FixedIp>,
    /// The security groups applied to it.
    #[serde(default, deserialize_with = "null_as_default")]
    pub security_groups: Vec<String>,
    /// False when the port takes no security groups (Neutron refuses to set any).
    #[serde(default = "enabled")]
    pub port_security_enabled: bool,
}

fn enabled() -> bool {
    true
}

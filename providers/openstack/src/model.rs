//! The parts of Octavia and Neutron documents kube-lb reads. Unknown fields are ignored and
//! absent ones default, so newer API versions decode unchanged.

use serde::Deserialize;

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

//! Values passed between the controller and providers.

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Serialize;

/// The kind of a node address, as in `Node.status.addresses[].type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum NodeAddressKind {
    /// `InternalIP`.
    InternalIp,
    /// `ExternalIP`.
    ExternalIp,
}

/// One address of a backend node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct NodeAddress {
    /// Internal or external.
    pub kind: NodeAddressKind,
    /// The address.
    pub ip: IpAddr,
}

/// A node the load balancer should forward to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendNode {
    /// `metadata.name`.
    pub name: String,
    /// `spec.providerID` (e.g. `aws:///us-east-1a/i-0123…`), when set.
    pub provider_id: Option<String>,
    /// `status.addresses` of kind InternalIP / ExternalIP.
    pub addresses: Vec<NodeAddress>,
    /// `metadata.labels` (zone/region, target-node-labels filters).
    pub labels: BTreeMap<String, String>,
}

impl BackendNode {
    /// The first InternalIP address, if any.
    pub fn internal_ip(&self) -> Option<IpAddr> {
        self.addresses
            .iter()
            .find(|a| a.kind == NodeAddressKind::InternalIp)
            .map(|a| a.ip)
    }
}

/// How traffic to an ingress IP reaches the nodes (`.status.loadBalancer.ingress[].ipMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum IpMode {
    /// The load balancer delivers packets with the IP as destination: node proxies may
    /// short-circuit in-cluster traffic to it (Kubernetes' default when unset).
    #[serde(rename = "VIP")]
    Vip,
    /// The load balancer terminates or rewrites the connection (e.g. PROXY protocol): node
    /// proxies must send in-cluster traffic through it, never short-circuit it.
    Proxy,
}

impl IpMode {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            IpMode::Vip => "VIP",
            IpMode::Proxy => "Proxy",
        }
    }
}

/// One entry of `.status.loadBalancer.ingress`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct LoadBalancerIngress {
    /// An IP address (local, GCP, Azure).
    pub ip: Option<IpAddr>,
    /// A DNS name (AWS).
    pub hostname: Option<String>,
    /// `ipMode`, only with `ip`; `None` leaves it unset (VIP).
    pub ip_mode: Option<IpMode>,
}

/// What the provider reports about a load balancer: the ingress points, and the annotations
/// the controller writes back on the Service.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LoadBalancerStatus {
    /// Ingress points, in a stable order.
    pub ingress: Vec<LoadBalancerIngress>,
    /// Annotations to set on the Service after a successful ensure, as the upstream provider
    /// records its cloud ids there (TKE's `service.kubernetes.io/loadbalance-id`, CCE's
    /// `service.beta.kubernetes.io/cce-load-balancer-id`, the pool of a local address). The
    /// controller patches only keys whose value differs from the Service's; it never removes a
    /// key it is not told to (see `stale_annotations`), so an id stays readable while the load
    /// balancer exists.
    pub annotations: BTreeMap<String, String>,
    /// Keys this provider writes back that no longer apply (Baidu's EIP after a switch to an
    /// internal BLB): the controller removes them when the Service still shows them.
    pub stale_annotations: std::collections::BTreeSet<String>,
}

impl LoadBalancerStatus {
    /// A status with these ingress points and no annotations to write back.
    pub fn with_ingress(ingress: Vec<LoadBalancerIngress>) -> Self {
        Self {
            ingress,
            ..Default::default()
        }
    }
}

//! The dataplane's own vocabulary: what one node must program for one Service port.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

/// Transport protocol of a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the Kubernetes default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The lower-case name nft and conntrack use.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Protocol {
    type Err = String;

    /// Accepts the Kubernetes spelling (`TCP`) and the lower-case one.
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.to_ascii_uppercase().as_str() {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            "SCTP" => Ok(Protocol::Sctp),
            _ => Err(format!(
                "unknown protocol {value:?}; expected TCP, UDP or SCTP"
            )),
        }
    }
}

/// `namespace/name` of a Service.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ServiceKey {
    /// Builds a key.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One Service port: the Service, its port number and protocol (unique within a Service).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortKey {
    /// The Service.
    pub service: ServiceKey,
    /// Protocol of the port.
    pub protocol: Protocol,
    /// `spec.ports[].port`.
    pub port: u16,
}

impl fmt::Display for PortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}/{}", self.service, self.port, self.protocol)
    }
}

/// Where a connection is finally sent: a pod address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointAddr {
    /// Endpoint IP.
    pub ip: IpAddr,
    /// Endpoint port (the resolved targetPort).
    pub port: u16,
}

impl EndpointAddr {
    /// The socket address of the endpoint.
    pub fn socket_addr(self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.ip, self.port)
    }
}

impl fmt::Display for EndpointAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.socket_addr())
    }
}

/// `externalTrafficPolicy` / `internalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrafficPolicy {
    /// Any endpoint in the cluster; external traffic is masqueraded.
    #[default]
    Cluster,
    /// Only endpoints on this node; the client source address is preserved.
    Local,
}

/// PROXY protocol header the userspace backend writes to endpoints (annotation
/// `kube-lb.io/proxy-protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyProtocol {
    /// Text header, `PROXY TCP4 <src> <dst> <sport> <dport>\r\n`.
    V1,
    /// Binary header.
    V2,
}

impl FromStr for ProxyProtocol {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value.trim() {
            "v1" | "1" => Ok(ProxyProtocol::V1),
            "v2" | "2" => Ok(ProxyProtocol::V2),
            other => Err(format!(
                "unknown PROXY protocol version {other:?}; expected v1 or v2"
            )),
        }
    }
}

/// Everything one node programs for one Service port.
#[derive(Debug, Clone, PartialEq)]
pub struct ServicePortModel {
    /// Which Service port.
    pub key: PortKey,
    /// `spec.ports[].name` (may be empty).
    pub port_name: String,
    /// `spec.clusterIPs`.
    pub cluster_ips: Vec<IpAddr>,
    /// `spec.ports[].nodePort`, served on [`Snapshot::nodeport_addresses`].
    pub node_port: Option<u16>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip` (VIP mode only; `ipMode: Proxy` is left to the LB).
    pub load_balancer_ips: Vec<IpAddr>,
    /// `spec.loadBalancerSourceRanges` (applies to traffic to the LB IPs only).
    pub source_ranges: Vec<IpNet>,
    /// ClientIP session affinity timeout; `None` without affinity.
    pub affinity_timeout: Option<Duration>,
    /// `spec.externalTrafficPolicy`.
    pub external_policy: TrafficPolicy,
    /// `spec.internalTrafficPolicy`.
    pub internal_policy: TrafficPolicy,
    /// PROXY protocol towards endpoints (userspace backend only).
    pub proxy_protocol: Option<ProxyProtocol>,
    /// True if any usable endpoint exists anywhere in the cluster (before topology filtering).
    pub has_endpoints: bool,
    /// Endpoints for Cluster-policy traffic from this node, topology-filtered, sorted.
    pub cluster_endpoints: Vec<EndpointAddr>,
    /// Endpoints on this node, sorted (ready ones, or serving-terminating as last resort).
    pub local_endpoints: Vec<EndpointAddr>,
}

impl ServicePortModel {
    /// Endpoints for ClusterIP traffic, honouring `internalTrafficPolicy`.
    pub fn internal_endpoints(&self) -> &[EndpointAddr] {
        match self.internal_policy {
            TrafficPolicy::Cluster => &self.cluster_endpoints,
            TrafficPolicy::Local => &self.local_endpoints,
        }
    }

    /// Endpoints for NodePort / LB IP / externalIP traffic, honouring `externalTrafficPolicy`.
    pub fn external_endpoints(&self) -> &[EndpointAddr] {
        match self.external_policy {
            TrafficPolicy::Cluster => &self.cluster_endpoints,
            TrafficPolicy::Local => &self.local_endpoints,
        }
    }

    /// True when the port is reachable from outside the cluster (NodePort, LB IP, externalIP).
    pub fn is_external(&self) -> bool {
        self.node_port.is_some()
            || !self.external_ips.is_empty()
            || !self.load_balancer_ips.is_empty()
    }
}

/// A health-check node port this node serves (externalTrafficPolicy Local).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheckModel {
    /// `spec.healthCheckNodePort`.
    pub node_port: u16,
    /// Distinct IPs of local, Ready (not terminating) endpoints across all ports.
    pub local_ready_endpoints: usize,
}

/// What a node must program: the output of [`crate::model::Index::snapshot`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// This node's addresses that accept NodePorts (filtered by `--nodeport-addresses`).
    pub nodeport_addresses: Vec<IpAddr>,
    /// Every proxied Service port.
    pub ports: BTreeMap<PortKey, ServicePortModel>,
    /// Health-check servers, per Service.
    pub health_checks: BTreeMap<ServiceKey, HealthCheckModel>,
}

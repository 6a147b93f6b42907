//! The typed load-balancer spec. The provider-neutral core is fixed by the architecture; the
//! per-provider extensions live in [`ProviderSpec`].

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::Serialize;

mod aws;
mod azure;
mod baidu;
mod gcp;
mod local;
mod openstack;
mod tencent;

pub use aws::*;
pub use azure::*;
pub use baidu::*;
pub use gcp::*;
pub use local::*;
pub use openstack::*;
pub use tencent::*;

/// Which cloud's annotations are interpreted (and which provider will build the LB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cloud {
    /// The embedded default: addresses from a local pool, forwarded on this machine.
    Local,
    /// Amazon Web Services (Classic ELB or NLB).
    Aws,
    /// Google Cloud (external or internal passthrough L4).
    Gcp,
    /// Microsoft Azure (Standard Load Balancer).
    Azure,
    /// OpenStack Octavia (annotations parsed; no provider in this repository).
    Openstack,
    /// Tencent Cloud TKE (annotations parsed; no provider in this repository).
    Tencent,
    /// Baidu Cloud CCE (annotations parsed; no provider in this repository).
    Baidu,
}

impl Cloud {
    /// Every cloud, in declaration order.
    pub const ALL: &'static [Cloud] = &[
        Cloud::Local,
        Cloud::Aws,
        Cloud::Gcp,
        Cloud::Azure,
        Cloud::Openstack,
        Cloud::Tencent,
        Cloud::Baidu,
    ];

    /// The lowercase name used on the command line and in serialized specs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Cloud::Local => "local",
            Cloud::Aws => "aws",
            Cloud::Gcp => "gcp",
            Cloud::Azure => "azure",
            Cloud::Openstack => "openstack",
            Cloud::Tencent => "tencent",
            Cloud::Baidu => "baidu",
        }
    }
}

impl fmt::Display for Cloud {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Cloud {
    type Err = crate::UnknownVariant;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cloud::ALL
            .iter()
            .copied()
            .find(|cloud| cloud.as_str() == s)
            .ok_or_else(|| crate::UnknownVariant {
                value: s.to_owned(),
                allowed: &[
                    "local",
                    "aws",
                    "gcp",
                    "azure",
                    "openstack",
                    "tencent",
                    "baidu",
                ],
            })
    }
}

/// Identity of the Service a load balancer belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ServiceKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`; load-balancer names derive from it, as upstream does.
    pub uid: String,
}

impl fmt::Display for ServiceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Transport protocol of a Service port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Protocol {
    /// TCP (the Kubernetes default).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

/// `spec.ports[].targetPort`: a number, or a container port name resolved per endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(untagged)]
pub enum TargetPort {
    /// A port number.
    Number(u16),
    /// A named container port.
    Name(String),
}

/// One Service port, validated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortSpec {
    /// Port name (required and unique when the Service has more than one port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Transport protocol.
    pub protocol: Protocol,
    /// The port the load balancer listens on.
    pub port: u16,
    /// Node port the load balancer forwards to; `None` when `allocateLoadBalancerNodePorts`
    /// is false or the API server has not allocated one yet.
    pub node_port: Option<u16>,
    /// Where endpoints listen.
    pub target_port: TargetPort,
}

/// Whether the load balancer is reachable from the internet or only inside the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Scheme {
    /// Internet-facing (the default everywhere).
    #[default]
    External,
    /// Internal to the VPC / VNet.
    Internal,
}

/// Where the effective source ranges came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SourceRangeOrigin {
    /// Nothing set: every source is allowed.
    Default,
    /// `spec.loadBalancerSourceRanges`.
    Spec,
    /// The `service.beta.kubernetes.io/load-balancer-source-ranges` annotation fallback.
    Annotation,
}

/// Client CIDRs allowed to reach the load balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceRanges {
    /// The CIDRs; empty means "allow all" (origin `Default`).
    pub cidrs: Vec<IpNet>,
    /// Where they came from.
    pub origin: SourceRangeOrigin,
}

impl SourceRanges {
    /// True when no restriction applies.
    pub fn allows_all(&self) -> bool {
        self.cidrs.is_empty()
    }
}

/// `spec.externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "policy", rename_all = "camelCase")]
pub enum TrafficPolicy {
    /// Any node forwards to any endpoint (client address masqueraded).
    Cluster,
    /// Only nodes with a local endpoint receive traffic; the client address is preserved.
    Local {
        /// `spec.healthCheckNodePort`, which answers 200 only on nodes with local endpoints.
        #[serde(rename = "healthCheckNodePort")]
        health_check_node_port: Option<u16>,
    },
}

/// `spec.sessionAffinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "type")]
pub enum SessionAffinity {
    /// No stickiness.
    None,
    /// Connections from one client IP go to the same endpoint for `timeout_seconds`.
    ClientIP {
        /// `sessionAffinityConfig.clientIP.timeoutSeconds` (default 10800).
        #[serde(rename = "timeoutSeconds")]
        timeout_seconds: u32,
    },
}

/// One `topologyKeys` entry (seed 002).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub enum TopologyKey {
    /// `kubernetes.io/hostname`.
    Hostname,
    /// `topology.kubernetes.io/zone`.
    Zone,
    /// `topology.kubernetes.io/region`.
    Region,
    /// `*`: any endpoint (only allowed last).
    Any,
    /// Any other node-label key.
    Label(String),
}

impl From<TopologyKey> for String {
    fn from(key: TopologyKey) -> String {
        key.to_string()
    }
}

impl fmt::Display for TopologyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyKey::Hostname => f.write_str("kubernetes.io/hostname"),
            TopologyKey::Zone => f.write_str("topology.kubernetes.io/zone"),
            TopologyKey::Region => f.write_str("topology.kubernetes.io/region"),
            TopologyKey::Any => f.write_str("*"),
            TopologyKey::Label(label) => f.write_str(label),
        }
    }
}

/// The validated, typed description of the load balancer a Service asks for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSpec {
    /// Which Service this is.
    pub service: ServiceKey,
    /// Which cloud's annotations were interpreted.
    pub cloud: Cloud,
    /// Validated ports, in Service order.
    pub ports: Vec<PortSpec>,
    /// Internal or internet-facing.
    pub scheme: Scheme,
    /// `spec.loadBalancerIP`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_ip: Option<IpAddr>,
    /// Allowed client ranges.
    pub source_ranges: SourceRanges,
    /// `spec.externalTrafficPolicy` and the health-check node port.
    pub traffic_policy: TrafficPolicy,
    /// `spec.sessionAffinity` and its timeout.
    pub session_affinity: SessionAffinity,
    /// `spec.loadBalancerClass`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer_class: Option<String>,
    /// `spec.allocateLoadBalancerNodePorts` (default true).
    pub allocate_node_ports: bool,
    /// `spec.externalIPs`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub external_ips: Vec<IpAddr>,
    /// Ordered topology keys (seed 002); empty when unset.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub topology_keys: Vec<TopologyKey>,
    /// Extra tags the user asked for (e.g. AWS `additional-resource-tags`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_tags: BTreeMap<String, String>,
    /// The provider-specific extension.
    pub provider: ProviderSpec,
}

impl LoadBalancerSpec {
    /// Under `externalTrafficPolicy: Local`, whether the load balancer is given only the nodes
    /// that run a ready endpoint. False everywhere by default, as the upstream providers do it
    /// (cloud-provider-aws, -gcp, -azure, OCCM, the retired cloud-provider-baiducloud and TKE
    /// all register every eligible node): the load balancer's health check on the
    /// health-check node port takes the nodes without an endpoint out, so an endpoint moving
    /// between nodes changes no target and makes no cloud call. True only on TKE with
    /// `service.kubernetes.io/local-svc-only-bind-node-with-pod: "true"`, which asks for the
    /// narrow set.
    pub fn local_binds_only_nodes_with_endpoints(&self) -> bool {
        match &self.provider {
            ProviderSpec::Tencent(tencent) => tencent.local_svc_only_bind_node_with_pod,
            _ => false,
        }
    }
}

/// Per-provider extension of the spec. Filled in by the provider-specific annotation modules.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "cloud", rename_all = "lowercase")]
pub enum ProviderSpec {
    /// The embedded `local` provider: what the Service asks of the address pools.
    Local(LocalSpec),
    /// Amazon: Classic ELB or NLB, listeners and health check resolved.
    Aws(AwsSpec),
    /// Google Cloud L4.
    Gcp(GcpSpec),
    /// Azure Standard Load Balancer.
    Azure(AzureSpec),
    /// OpenStack Octavia.
    Openstack(OpenstackSpec),
    /// Tencent TKE CLB.
    Tencent(TencentSpec),
    /// Baidu CCE BLB.
    Baidu(BaiduSpec),
}

impl ProviderSpec {
    /// The AWS extension, when this spec was parsed for AWS.
    pub fn as_aws(&self) -> Option<&AwsSpec> {
        match self {
            ProviderSpec::Aws(aws) => Some(aws),
            _ => None,
        }
    }

    /// The GCP extension, when this spec was parsed for GCP.
    pub fn as_gcp(&self) -> Option<&GcpSpec> {
        match self {
            ProviderSpec::Gcp(gcp) => Some(gcp),
            _ => None,
        }
    }

    /// The Azure extension, when this spec was parsed for Azure.
    pub fn as_azure(&self) -> Option<&AzureSpec> {
        match self {
            ProviderSpec::Azure(azure) => Some(azure),
            _ => None,
        }
    }

    /// The `local` extension, when this spec was parsed for the `local` provider.
    pub fn as_local(&self) -> Option<&LocalSpec> {
        match self {
            ProviderSpec::Local(local) => Some(local),
            _ => None,
        }
    }
}

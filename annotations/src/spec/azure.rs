//! Azure extension of the spec (`service.beta.kubernetes.io/azure-…`, reference
//! gcp-azure.md §2.3).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use serde::Serialize;

use crate::value::string_enum;

string_enum! {
    /// Health-probe protocol (matched case-insensitively by the parser, as upstream does).
    pub enum AzureProbeProtocol {
        /// TCP connect (the default).
        Tcp => "Tcp",
        /// HTTP GET on the request path.
        Http => "Http",
        /// HTTPS GET on the request path (Standard SKU).
        Https => "Https",
    }
}

/// Health-probe settings, service-wide or for one port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AzureHealthProbe {
    /// Probe protocol.
    pub protocol: AzureProbeProtocol,
    /// `intervalInSeconds` (≥ 5; default 5).
    pub interval_seconds: u32,
    /// `probeThreshold` (≥ 2; default 2); interval × threshold must stay below 120.
    pub num_of_probe: u32,
    /// Request path for HTTP/HTTPS (default `/`).
    pub request_path: String,
}

/// Per-port overrides from `port_<port>_…` annotations; `None` inherits the service-wide value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AzurePortOverride {
    /// `port_<port>_health-probe_protocol`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<AzureProbeProtocol>,
    /// `port_<port>_health-probe_port`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// `port_<port>_health-probe_interval`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_seconds: Option<u32>,
    /// `port_<port>_health-probe_num-of-probe`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_of_probe: Option<u32>,
    /// `port_<port>_health-probe_request-path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_path: Option<String>,
    /// `port_<port>_no_lb_rule`: no load-balancing rule for this port.
    pub no_lb_rule: bool,
    /// `port_<port>_no_probe_rule`: no probe for this port.
    pub no_probe_rule: bool,
}

/// Everything the common Azure annotations decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AzureSpec {
    /// `azure-load-balancer-internal` (exactly `"true"`, as upstream's LB selection needs).
    pub internal: bool,
    /// `azure-load-balancer-internal-subnet` (only honoured when internal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_subnet: Option<String>,
    /// `azure-pip-name`: an existing public IP to use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pip_name: Option<String>,
    /// `azure-pip-name-ipv6`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pip_name_ipv6: Option<String>,
    /// `azure-load-balancer-ipv4`: replaces `spec.loadBalancerIP` for IPv4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<Ipv4Addr>,
    /// `azure-load-balancer-ipv6`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6: Option<Ipv6Addr>,
    /// `azure-pip-prefix-id`: allocate the public IP from this prefix.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pip_prefix_id: Option<String>,
    /// `azure-dns-label-name`; `Some("")` removes the label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_label_name: Option<String>,
    /// `azure-load-balancer-resource-group` (trimmed): where public IPs live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_group: Option<String>,
    /// `azure-pip-tags`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pip_tags: BTreeMap<String, String>,
    /// `azure-allowed-service-tags`: NSG sources.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_service_tags: Vec<String>,
    /// `azure-allowed-ip-ranges`: NSG sources (exclusive with `loadBalancerSourceRanges`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_ip_ranges: Vec<IpNet>,
    /// `azure-deny-all-except-load-balancer-source-ranges`.
    pub deny_all_except_source_ranges: bool,
    /// `azure-load-balancer-tcp-idle-timeout` in minutes (4–100, default 4).
    pub tcp_idle_timeout_minutes: u32,
    /// `azure-load-balancer-disable-tcp-reset`.
    pub disable_tcp_reset: bool,
    /// `azure-load-balancer-enable-high-availability-ports` (internal only).
    pub high_availability_ports: bool,
    /// `azure-disable-load-balancer-floating-ip`.
    pub disable_floating_ip: bool,
    /// `azure-disable-load-balancer-nsg-rule`.
    pub disable_nsg_rule: bool,
    /// `azure-additional-public-ips`: extra NSG destinations.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub additional_public_ips: Vec<IpAddr>,
    /// Service-wide health probe (with `Local`: HTTP `/healthz` on the healthCheckNodePort).
    pub health_probe: AzureHealthProbe,
    /// Per-port overrides keyed by the `<port>` text of the annotation (number or port name).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub port_overrides: BTreeMap<String, AzurePortOverride>,
}

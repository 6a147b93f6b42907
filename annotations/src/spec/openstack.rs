//! OpenStack (Octavia) extension of the spec (no provider in this repository).

use serde::Serialize;

use crate::value::string_enum;

string_enum! {
    /// `loadbalancer.openstack.org/lb-method`.
    pub enum LbMethod {
        /// Round robin (the default).
        RoundRobin => "ROUND_ROBIN",
        /// Fewest active connections.
        LeastConnections => "LEAST_CONNECTIONS",
        /// Hash of the source address.
        SourceIp => "SOURCE_IP",
        /// Hash of the source address and port.
        SourceIpPort => "SOURCE_IP_PORT",
    }
}

string_enum! {
    /// `loadbalancer.openstack.org/proxy-protocol`.
    pub enum OpenstackProxyProtocol {
        /// PROXY protocol v1 (`true` is the upstream alias).
        V1 => "v1" | "true",
        /// PROXY protocol v2.
        V2 => "v2",
    }
}

/// Everything the OpenStack annotations decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackSpec {
    /// `service.beta.kubernetes.io/openstack-internal-load-balancer`: no floating IP.
    pub internal: bool,
    /// `loadbalancer.openstack.org/floating-network-id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating_network_id: Option<String>,
    /// `loadbalancer.openstack.org/subnet-id`: the VIP subnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// `loadbalancer.openstack.org/lb-method`; `None` leaves the cloud config's choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lb_method: Option<LbMethod>,
    /// `loadbalancer.openstack.org/proxy-protocol`; `None` = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<OpenstackProxyProtocol>,
    /// `loadbalancer.openstack.org/keep-floatingip`.
    pub keep_floating_ip: bool,
    /// `loadbalancer.openstack.org/connection-limit` (-1 = unlimited).
    pub connection_limit: i64,
}

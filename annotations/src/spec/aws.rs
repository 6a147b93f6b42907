//! AWS extension of the spec: everything the `aws-load-balancer-*` annotations decide, already
//! resolved (listener tables, health check with defaults applied) so the provider only maps
//! fields onto API calls.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Serialize;

use crate::value::string_enum;

string_enum! {
    /// Which AWS load balancer a Service gets (`aws-load-balancer-type`).
    pub enum AwsLoadBalancerKind {
        /// Classic ELB: the upstream default for an absent or unrecognised value.
        Classic => "classic",
        /// Network Load Balancer (`nlb`, exactly lowercase).
        Nlb => "nlb",
        /// `external` or `nlb-ip`: the aws-load-balancer-controller owns this Service; kube-lb
        /// leaves it alone (upstream returns `ImplementedElsewhere`).
        ImplementedElsewhere => "external" | "nlb-ip",
    }
}

string_enum! {
    /// Protocol of a Classic ELB listener, on either side (load balancer or instance).
    pub enum ClbProtocol {
        /// Layer 7 HTTP (X-Forwarded-For added).
        Http => "HTTP",
        /// Layer 7 HTTPS.
        Https => "HTTPS",
        /// Layer 4 TLS.
        Ssl => "SSL",
        /// Layer 4 TCP.
        Tcp => "TCP",
    }
}

string_enum! {
    /// `aws-load-balancer-backend-protocol`: what the pods speak.
    pub enum BackendProtocol {
        /// Plain HTTP.
        Http => "http",
        /// HTTPS.
        Https => "https",
        /// TLS over TCP.
        Ssl => "ssl",
        /// Plain TCP (the default).
        Tcp => "tcp",
    }
}

string_enum! {
    /// Protocol of an NLB listener or target group.
    pub enum NlbProtocol {
        /// TCP.
        Tcp => "TCP",
        /// UDP.
        Udp => "UDP",
        /// TLS terminated (listener) or re-encrypted (target group).
        Tls => "TLS",
    }
}

string_enum! {
    /// Health-check protocol (CLB target prefix / NLB target-group `HealthCheckProtocol`).
    pub enum HealthCheckProtocol {
        /// TCP connect.
        Tcp => "TCP",
        /// HTTP GET on the path.
        Http => "HTTP",
        /// HTTPS GET on the path.
        Https => "HTTPS",
        /// TLS handshake (CLB only).
        Ssl => "SSL",
    }
}

/// One resolved Classic ELB listener (reference aws.md §4.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClbListener {
    /// `LoadBalancerPort` = the Service port.
    pub lb_port: u16,
    /// `Protocol` on the load-balancer side.
    pub lb_protocol: ClbProtocol,
    /// `InstancePort` = the node port; `None` until the API server has allocated one (upstream
    /// skips such ports at sync time, lint still shows them).
    pub instance_port: Option<u16>,
    /// `InstanceProtocol`.
    pub instance_protocol: ClbProtocol,
    /// `SSLCertificateId` for SSL/HTTPS listeners.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_certificate_id: Option<String>,
}

/// One resolved NLB listener and its target group (reference aws.md §4.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NlbListener {
    /// Listener port = the Service port.
    pub port: u16,
    /// Listener protocol: TLS when the port is selected by `ssl-ports` and a cert is set.
    pub protocol: NlbProtocol,
    /// Target-group port = the node port (`None` until allocated).
    pub node_port: Option<u16>,
    /// Target-group protocol: TLS only for a TLS listener with `backend-protocol: ssl`.
    pub target_protocol: NlbProtocol,
    /// Certificate of a TLS listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_arn: Option<String>,
    /// `SslPolicy` of a TLS listener (AWS defaults to `ELBSecurityPolicy-2016-08` when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_policy: Option<String>,
}

/// Which port the health check probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum HealthCheckPort {
    /// The traffic port: the node port of the listener (CLB: of the first listener).
    TrafficPort,
    /// An explicit port (the `healthCheckNodePort` for `Local` services once known).
    Number(u16),
    /// The Service's `healthCheckNodePort` (`Local` policy) before the API server has
    /// allocated it; the provider reads the number from the core spec's traffic policy.
    HealthCheckNodePort,
}

/// Resolved health check, upstream defaults and `Local` rules applied (aws.md §4.4, §4.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsHealthCheck {
    /// Probe protocol.
    pub protocol: HealthCheckProtocol,
    /// Probe port.
    pub port: HealthCheckPort,
    /// Request path; only for HTTP/HTTPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Successes before healthy (AWS 2–10).
    pub healthy_threshold: u32,
    /// Failures before unhealthy (AWS 2–10).
    pub unhealthy_threshold: u32,
    /// Seconds between probes (CLB 5–300; NLB 10 or 30 historically).
    pub interval_seconds: u32,
    /// Seconds without an answer (CLB 2–60 and below the interval). Upstream never sends it
    /// for NLB target groups.
    pub timeout_seconds: u32,
}

/// Access-log settings (`access-log-*`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct AccessLog {
    /// `access-log-enabled` (default false; re-applied when the annotation is removed).
    pub enabled: bool,
    /// `access-log-emit-interval` in minutes: 5 or 60; unset leaves the AWS default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emit_interval_minutes: Option<u32>,
    /// `access-log-s3-bucket-name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_bucket_name: Option<String>,
    /// `access-log-s3-bucket-prefix`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_bucket_prefix: Option<String>,
}

/// Connection draining (`connection-draining-*`, CLB only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionDraining {
    /// `connection-draining-enabled` (default false).
    pub enabled: bool,
    /// `connection-draining-timeout` in seconds, 1–3600; unset leaves the AWS default (300).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u32>,
}

/// `target-group-attributes` (NLB only); `None` fields are left as AWS has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct TargetGroupAttributes {
    /// `preserve_client_ip.enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_client_ip: Option<bool>,
    /// `proxy_protocol_v2.enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_protocol_v2: Option<bool>,
}

impl TargetGroupAttributes {
    /// True when the annotation set nothing.
    pub fn is_empty(&self) -> bool {
        self.preserve_client_ip.is_none() && self.proxy_protocol_v2.is_none()
    }
}

/// Everything the AWS annotations decide, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AwsSpec {
    /// Classic ELB, NLB, or owned by another controller.
    pub kind: AwsLoadBalancerKind,
    /// Classic ELB listeners (empty for NLB).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clb_listeners: Vec<ClbListener>,
    /// NLB listeners (empty for Classic).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nlb_listeners: Vec<NlbListener>,
    /// `backend-protocol` as upstream uses it; `None` when absent or ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend_protocol: Option<BackendProtocol>,
    /// `ssl-cert`: one ACM/IAM certificate ARN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_certificate: Option<String>,
    /// `ssl-negotiation-policy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_negotiation_policy: Option<String>,
    /// `proxy-protocol: "*"` (CLB: PROXY v1 on every backend port).
    pub proxy_protocol: bool,
    /// Resolved health check.
    pub health_check: AwsHealthCheck,
    /// Access logs.
    pub access_log: AccessLog,
    /// Connection draining (CLB).
    pub connection_draining: ConnectionDraining,
    /// `connection-idle-timeout` in seconds (CLB; default 60, AWS 1–4000).
    pub idle_timeout_seconds: u32,
    /// `cross-zone-load-balancing-enabled` (default false).
    pub cross_zone: bool,
    /// `additional-resource-tags` (also copied into the core `extra_tags`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub additional_tags: BTreeMap<String, String>,
    /// `extra-security-groups` (CLB), appended after the managed group.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_security_groups: Vec<String>,
    /// `security-groups`: bring-your-own groups replacing the managed one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// `subnets`: IDs (`subnet-…`) or `Name` tag values.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// `eip-allocations` (NLB, create-time only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub eip_allocations: Vec<String>,
    /// `private-ipv4-addresses` (NLB, create-time only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub private_ipv4_addresses: Vec<Ipv4Addr>,
    /// `target-node-labels`: a node must carry every key (and equal value when non-empty).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub target_node_labels: BTreeMap<String, String>,
    /// `target-group-attributes` (NLB).
    #[serde(skip_serializing_if = "TargetGroupAttributes::is_empty")]
    pub target_group_attributes: TargetGroupAttributes,
}

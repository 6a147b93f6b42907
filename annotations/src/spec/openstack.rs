//! OpenStack (Octavia) extension of the spec: every annotation of cloud-provider-openstack
//! (reference other-clouds.md §1.3), typed. `None` means "not annotated": the provider then
//! uses the `cloud.conf` default (or Octavia's).

use serde::Serialize;

use crate::spec::LabelRequirement;
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

/// Listener timeouts in milliseconds (`loadbalancer.openstack.org/timeout-*`); `None` leaves
/// Octavia's default (50000, 5000, 50000, 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackTimeouts {
    /// `timeout-client-data`: client inactivity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_data: Option<u32>,
    /// `timeout-member-connect`: connecting to a member.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_connect: Option<u32>,
    /// `timeout-member-data`: member inactivity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_data: Option<u32>,
    /// `timeout-tcp-inspect`: waiting for content inspection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_inspect: Option<u32>,
}

/// Health-monitor annotations; `None` leaves the `cloud.conf` `monitor-*` / `create-monitor`
/// value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenstackHealthMonitor {
    /// `enable-health-monitor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `health-monitor-delay`, seconds between checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay: Option<u32>,
    /// `health-monitor-timeout`, seconds a check may take.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    /// `health-monitor-max-retries`: successes to mark a member up.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// `health-monitor-max-retries-down`: failures to mark a member down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries_down: Option<u32>,
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
    /// `loadbalancer.openstack.org/floating-subnet-id`: the floating IP's subnet (wins over
    /// the two below).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating_subnet_id: Option<String>,
    /// `loadbalancer.openstack.org/floating-subnet`: subnet name of the floating network
    /// (`*` matches any run of characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating_subnet: Option<String>,
    /// `loadbalancer.openstack.org/floating-subnet-tags`: the floating subnet carries all of
    /// these tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub floating_subnet_tags: Vec<String>,
    /// `loadbalancer.openstack.org/class`: a `[LoadBalancerClass "<name>"]` of `cloud.conf`,
    /// whose network settings win over the annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// `loadbalancer.openstack.org/subnet-id`: the VIP subnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    /// `loadbalancer.openstack.org/network-id`: the VIP network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,
    /// `loadbalancer.openstack.org/member-subnet-id`: the members' subnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member_subnet_id: Option<String>,
    /// `loadbalancer.openstack.org/port-id`: a pre-created VIP port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_id: Option<String>,
    /// `loadbalancer.openstack.org/lb-method`; `None` leaves the cloud config's choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lb_method: Option<LbMethod>,
    /// `loadbalancer.openstack.org/proxy-protocol`; `None` = off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<OpenstackProxyProtocol>,
    /// `loadbalancer.openstack.org/x-forwarded-for`: TCP listeners become HTTP and insert the
    /// header.
    pub x_forwarded_for: bool,
    /// `loadbalancer.openstack.org/keep-floatingip`.
    pub keep_floating_ip: bool,
    /// `loadbalancer.openstack.org/connection-limit` (-1 = unlimited).
    pub connection_limit: i64,
    /// `loadbalancer.openstack.org/timeout-*`.
    pub timeouts: OpenstackTimeouts,
    /// `loadbalancer.openstack.org/enable-health-monitor` and `health-monitor-*`.
    pub health_monitor: OpenstackHealthMonitor,
    /// `loadbalancer.openstack.org/flavor-id` (create only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flavor_id: Option<String>,
    /// `loadbalancer.openstack.org/availability-zone` (create only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// `loadbalancer.openstack.org/default-tls-container-ref`: TCP listeners terminate TLS
    /// (`TERMINATED_HTTPS`) with this Barbican container or secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_tls_container_ref: Option<String>,
    /// `loadbalancer.openstack.org/load-balancer-id`: use this existing load balancer. `None`
    /// when the value is the id kube-lb wrote back for the load balancer it made for the
    /// Service (recorded in `kube-lb.io/openstack-created-with`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balancer_id: Option<String>,
    /// `loadbalancer.openstack.org/hostname`: reported in status instead of the address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `loadbalancer.openstack.org/node-selector`: only matching nodes are members
    /// (`k=v` equality, bare `k` existence; all must hold).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Vec<LabelRequirement>>,
    /// kube-lb's record (a `security_group` field in
    /// [`crate::keys::openstack::CREATED_WITH`]) that it made a security group for the Service
    /// (`manage-security-groups`), so the provider removes it once the option is off without
    /// looking for one on every resync.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub security_group_recorded: bool,
}

impl Default for OpenstackSpec {
    fn default() -> Self {
        OpenstackSpec {
            internal: false,
            floating_network_id: None,
            floating_subnet_id: None,
            floating_subnet: None,
            floating_subnet_tags: Vec::new(),
            class: None,
            subnet_id: None,
            network_id: None,
            member_subnet_id: None,
            port_id: None,
            lb_method: None,
            proxy_protocol: None,
            x_forwarded_for: false,
            keep_floating_ip: false,
            connection_limit: -1,
            timeouts: OpenstackTimeouts::default(),
            health_monitor: OpenstackHealthMonitor::default(),
            flavor_id: None,
            availability_zone: None,
            default_tls_container_ref: None,
            load_balancer_id: None,
            hostname: None,
            node_selector: None,
            security_group_recorded: false,
        }
    }
}

//! Annotation keys read by [`crate::parse`], grouped by cloud.

/// Keys every cloud reads.
pub mod common {
    /// Fallback for `spec.loadBalancerSourceRanges` (comma list of CIDRs).
    pub const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
    /// kube-lb's carrier for seed 002 `topologyKeys`, which k8s-openapi 0.29 no longer models:
    /// comma-separated keys, same rules as the field. See [`crate::lift_topology_keys`].
    pub const TOPOLOGY_KEYS: &str = "service.kubernetes.io/topology-keys";
}

/// `service.beta.kubernetes.io/aws-load-balancer-*` (reference aws.md §1.2).
pub mod aws {
    /// Prefix shared by every AWS key.
    pub const PREFIX: &str = "service.beta.kubernetes.io/aws-load-balancer-";
    /// `nlb`, `nlb-ip`/`external`, anything else = Classic.
    pub const TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
    /// Internal scheme: anything but `"false"`.
    pub const INTERNAL: &str = "service.beta.kubernetes.io/aws-load-balancer-internal";
    /// `*` = PROXY protocol on every backend (CLB).
    pub const PROXY_PROTOCOL: &str = "service.beta.kubernetes.io/aws-load-balancer-proxy-protocol";
    /// Access-log emit interval (5 or 60 minutes).
    pub const ACCESS_LOG_EMIT_INTERVAL: &str =
        "service.beta.kubernetes.io/aws-load-balancer-access-log-emit-interval";
    /// Access logs on/off.
    pub const ACCESS_LOG_ENABLED: &str =
        "service.beta.kubernetes.io/aws-load-balancer-access-log-enabled";
    /// Access-log bucket.
    pub const ACCESS_LOG_BUCKET_NAME: &str =
        "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-name";
    /// Access-log key prefix.
    pub const ACCESS_LOG_BUCKET_PREFIX: &str =
        "service.beta.kubernetes.io/aws-load-balancer-access-log-s3-bucket-prefix";
    /// Connection draining on/off (CLB).
    pub const CONNECTION_DRAINING_ENABLED: &str =
        "service.beta.kubernetes.io/aws-load-balancer-connection-draining-enabled";
    /// Connection-draining timeout (CLB).
    pub const CONNECTION_DRAINING_TIMEOUT: &str =
        "service.beta.kubernetes.io/aws-load-balancer-connection-draining-timeout";
    /// Idle timeout (CLB).
    pub const CONNECTION_IDLE_TIMEOUT: &str =
        "service.beta.kubernetes.io/aws-load-balancer-connection-idle-timeout";
    /// Cross-zone balancing.
    pub const CROSS_ZONE: &str =
        "service.beta.kubernetes.io/aws-load-balancer-cross-zone-load-balancing-enabled";
    /// Extra security groups (CLB).
    pub const EXTRA_SECURITY_GROUPS: &str =
        "service.beta.kubernetes.io/aws-load-balancer-extra-security-groups";
    /// Bring-your-own security groups.
    pub const SECURITY_GROUPS: &str =
        "service.beta.kubernetes.io/aws-load-balancer-security-groups";
    /// Certificate ARN.
    pub const SSL_CERT: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert";
    /// Which ports use the certificate.
    pub const SSL_PORTS: &str = "service.beta.kubernetes.io/aws-load-balancer-ssl-ports";
    /// Predefined SSL policy name.
    pub const SSL_NEGOTIATION_POLICY: &str =
        "service.beta.kubernetes.io/aws-load-balancer-ssl-negotiation-policy";
    /// What the pods speak.
    pub const BACKEND_PROTOCOL: &str =
        "service.beta.kubernetes.io/aws-load-balancer-backend-protocol";
    /// Extra tags.
    pub const ADDITIONAL_RESOURCE_TAGS: &str =
        "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags";
    /// Health-check protocol.
    pub const HEALTHCHECK_PROTOCOL: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-protocol";
    /// Health-check port (`traffic-port` or a number).
    pub const HEALTHCHECK_PORT: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-port";
    /// Health-check path.
    pub const HEALTHCHECK_PATH: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-path";
    /// Healthy threshold.
    pub const HEALTHCHECK_HEALTHY_THRESHOLD: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-healthy-threshold";
    /// Unhealthy threshold.
    pub const HEALTHCHECK_UNHEALTHY_THRESHOLD: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-unhealthy-threshold";
    /// Health-check timeout.
    pub const HEALTHCHECK_TIMEOUT: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-timeout";
    /// Health-check interval.
    pub const HEALTHCHECK_INTERVAL: &str =
        "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
    /// NLB target-group attributes.
    pub const TARGET_GROUP_ATTRIBUTES: &str =
        "service.beta.kubernetes.io/aws-load-balancer-target-group-attributes";
    /// NLB elastic IP allocations.
    pub const EIP_ALLOCATIONS: &str =
        "service.beta.kubernetes.io/aws-load-balancer-eip-allocations";
    /// NLB private IPv4 addresses.
    pub const PRIVATE_IPV4_ADDRESSES: &str =
        "service.beta.kubernetes.io/aws-load-balancer-private-ipv4-addresses";
    /// Node label filter.
    pub const TARGET_NODE_LABELS: &str =
        "service.beta.kubernetes.io/aws-load-balancer-target-node-labels";
    /// Subnet IDs or names.
    pub const SUBNETS: &str = "service.beta.kubernetes.io/aws-load-balancer-subnets";

    /// Suffixes read only by aws-load-balancer-controller (reference aws.md §1.4).
    pub const LBC_ONLY_SUFFIXES: &[&str] = &[
        "ip-address-type",
        "manage-backend-security-group-rules",
        "scheme",
        "name",
        "nlb-target-type",
        "healthcheck-success-codes",
        "attributes",
        "alpn-policy",
        "ipv6-addresses",
        "security-group-prefix-lists",
        "proxy-protocol-per-target-group",
        "enable-tcp-udp-listener",
        "quic-enabled-ports",
        "disable-nlb-sg",
        "minimum-load-balancer-capacity",
        "multi-cluster-target-group",
        "inbound-sg-rules-on-private-link-traffic",
        "enable-icmp-for-path-mtu-discovery",
        "enable-prefix-for-ipv6-source-nat",
        "source-nat-ipv6-prefixes",
    ];
}

/// GCP keys (reference gcp-azure.md §1.3).
pub mod gcp {
    /// Internal / external (read first).
    pub const LOAD_BALANCER_TYPE: &str = "networking.gke.io/load-balancer-type";
    /// Deprecated alias of [`LOAD_BALANCER_TYPE`] (the one the seeds show).
    pub const LEGACY_LOAD_BALANCER_TYPE: &str = "cloud.google.com/load-balancer-type";
    /// Subnet name for the internal VIP.
    pub const INTERNAL_SUBNET: &str = "networking.gke.io/internal-load-balancer-subnet";
    /// Global access for internal LBs.
    pub const ALLOW_GLOBAL_ACCESS: &str =
        "networking.gke.io/internal-load-balancer-allow-global-access";
    /// Backend-service sharing among ILBs.
    pub const BACKEND_SHARE: &str = "alpha.cloud.google.com/load-balancer-backend-share";
    /// Deprecated alias of [`BACKEND_SHARE`].
    pub const LEGACY_BACKEND_SHARE: &str = "cloud.google.com/load-balancer-backend-share";
    /// Premium / Standard.
    pub const NETWORK_TIER: &str = "cloud.google.com/network-tier";
    /// `enabled` hands the Service to ingress-gce.
    pub const L4_RBS: &str = "cloud.google.com/l4-rbs";
    /// `spec.loadBalancerClass` selecting the legacy internal implementation.
    pub const CLASS_INTERNAL: &str = "networking.gke.io/l4-regional-internal-legacy";
    /// `spec.loadBalancerClass` selecting the legacy external implementation.
    pub const CLASS_EXTERNAL: &str = "networking.gke.io/l4-regional-external-legacy";
}

/// `service.beta.kubernetes.io/azure-*` (reference gcp-azure.md §2.3).
pub mod azure {
    /// Prefix shared by the Azure keys.
    pub const PREFIX: &str = "service.beta.kubernetes.io/azure-";
    /// Prefix of the per-port keys `port_<port>_…`.
    pub const PORT_PREFIX: &str = "service.beta.kubernetes.io/port_";
    /// Internal LB.
    pub const INTERNAL: &str = "service.beta.kubernetes.io/azure-load-balancer-internal";
    /// Subnet of an internal frontend.
    pub const INTERNAL_SUBNET: &str =
        "service.beta.kubernetes.io/azure-load-balancer-internal-subnet";
    /// Existing public IP name.
    pub const PIP_NAME: &str = "service.beta.kubernetes.io/azure-pip-name";
    /// Existing public IPv6 name.
    pub const PIP_NAME_IPV6: &str = "service.beta.kubernetes.io/azure-pip-name-ipv6";
    /// IPv4 address (replaces `loadBalancerIP`).
    pub const IPV4: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv4";
    /// IPv6 address.
    pub const IPV6: &str = "service.beta.kubernetes.io/azure-load-balancer-ipv6";
    /// Public IP prefix.
    pub const PIP_PREFIX_ID: &str = "service.beta.kubernetes.io/azure-pip-prefix-id";
    /// DNS label on the public IP.
    pub const DNS_LABEL_NAME: &str = "service.beta.kubernetes.io/azure-dns-label-name";
    /// Resource group of public IPs.
    pub const RESOURCE_GROUP: &str =
        "service.beta.kubernetes.io/azure-load-balancer-resource-group";
    /// Extra public-IP tags.
    pub const PIP_TAGS: &str = "service.beta.kubernetes.io/azure-pip-tags";
    /// NSG source service tags.
    pub const ALLOWED_SERVICE_TAGS: &str = "service.beta.kubernetes.io/azure-allowed-service-tags";
    /// NSG source CIDRs.
    pub const ALLOWED_IP_RANGES: &str = "service.beta.kubernetes.io/azure-allowed-ip-ranges";
    /// Deny everything except the source ranges.
    pub const DENY_ALL_EXCEPT_SOURCE_RANGES: &str =
        "service.beta.kubernetes.io/azure-deny-all-except-load-balancer-source-ranges";
    /// TCP idle timeout in minutes.
    pub const TCP_IDLE_TIMEOUT: &str =
        "service.beta.kubernetes.io/azure-load-balancer-tcp-idle-timeout";
    /// Disable TCP reset.
    pub const DISABLE_TCP_RESET: &str =
        "service.beta.kubernetes.io/azure-load-balancer-disable-tcp-reset";
    /// HA ports (internal only).
    pub const HA_PORTS: &str =
        "service.beta.kubernetes.io/azure-load-balancer-enable-high-availability-ports";
    /// Disable floating IP.
    pub const DISABLE_FLOATING_IP: &str =
        "service.beta.kubernetes.io/azure-disable-load-balancer-floating-ip";
    /// No NSG management.
    pub const DISABLE_NSG_RULE: &str =
        "service.beta.kubernetes.io/azure-disable-load-balancer-nsg-rule";
    /// Extra NSG destinations.
    pub const ADDITIONAL_PUBLIC_IPS: &str =
        "service.beta.kubernetes.io/azure-additional-public-ips";
    /// Probe protocol.
    pub const PROBE_PROTOCOL: &str =
        "service.beta.kubernetes.io/azure-load-balancer-health-probe-protocol";
    /// Probe interval.
    pub const PROBE_INTERVAL: &str =
        "service.beta.kubernetes.io/azure-load-balancer-health-probe-interval";
    /// Probe count.
    pub const PROBE_NUM: &str =
        "service.beta.kubernetes.io/azure-load-balancer-health-probe-num-of-probe";
    /// Probe request path.
    pub const PROBE_REQUEST_PATH: &str =
        "service.beta.kubernetes.io/azure-load-balancer-health-probe-request-path";
    /// Keys upstream reads that kube-lb does not implement (LB selection, Private Link).
    pub const UNSUPPORTED_PREFIXES: &[&str] = &[
        "service.beta.kubernetes.io/azure-load-balancer-mode",
        "service.beta.kubernetes.io/azure-load-balancer-configurations",
        "service.beta.kubernetes.io/azure-pls-",
        "service.beta.kubernetes.io/azure-pip-ip-tags",
        "service.beta.kubernetes.io/azure-pip-prefix-id-ipv6",
        "service.beta.kubernetes.io/azure-shared-securityrule",
    ];
}

/// OpenStack keys (reference other-clouds.md §1.3).
pub mod openstack {
    /// Internal LB (no floating IP).
    pub const INTERNAL: &str = "service.beta.kubernetes.io/openstack-internal-load-balancer";
    /// Floating network.
    pub const FLOATING_NETWORK_ID: &str = "loadbalancer.openstack.org/floating-network-id";
    /// VIP subnet.
    pub const SUBNET_ID: &str = "loadbalancer.openstack.org/subnet-id";
    /// Pool algorithm.
    pub const LB_METHOD: &str = "loadbalancer.openstack.org/lb-method";
    /// PROXY protocol version.
    pub const PROXY_PROTOCOL: &str = "loadbalancer.openstack.org/proxy-protocol";
    /// X-Forwarded-For (exclusive with PROXY protocol).
    pub const X_FORWARDED_FOR: &str = "loadbalancer.openstack.org/x-forwarded-for";
    /// Keep the floating IP on delete.
    pub const KEEP_FLOATING_IP: &str = "loadbalancer.openstack.org/keep-floatingip";
    /// Listener connection limit.
    pub const CONNECTION_LIMIT: &str = "loadbalancer.openstack.org/connection-limit";
    /// Floating IP subnet by id.
    pub const FLOATING_SUBNET_ID: &str = "loadbalancer.openstack.org/floating-subnet-id";
    /// Floating IP subnet by name.
    pub const FLOATING_SUBNET: &str = "loadbalancer.openstack.org/floating-subnet";
    /// Floating IP subnet by tags.
    pub const FLOATING_SUBNET_TAGS: &str = "loadbalancer.openstack.org/floating-subnet-tags";
    /// A `[LoadBalancerClass "name"]` of cloud.conf.
    pub const CLASS: &str = "loadbalancer.openstack.org/class";
    /// VIP network.
    pub const NETWORK_ID: &str = "loadbalancer.openstack.org/network-id";
    /// Members' subnet.
    pub const MEMBER_SUBNET_ID: &str = "loadbalancer.openstack.org/member-subnet-id";
    /// Pre-created VIP port.
    pub const PORT_ID: &str = "loadbalancer.openstack.org/port-id";
    /// Listener client inactivity timeout (ms).
    pub const TIMEOUT_CLIENT_DATA: &str = "loadbalancer.openstack.org/timeout-client-data";
    /// Listener member connect timeout (ms).
    pub const TIMEOUT_MEMBER_CONNECT: &str = "loadbalancer.openstack.org/timeout-member-connect";
    /// Listener member inactivity timeout (ms).
    pub const TIMEOUT_MEMBER_DATA: &str = "loadbalancer.openstack.org/timeout-member-data";
    /// Listener TCP inspection timeout (ms).
    pub const TIMEOUT_TCP_INSPECT: &str = "loadbalancer.openstack.org/timeout-tcp-inspect";
    /// Create a health monitor per pool.
    pub const ENABLE_HEALTH_MONITOR: &str = "loadbalancer.openstack.org/enable-health-monitor";
    /// Seconds between health checks.
    pub const HEALTH_MONITOR_DELAY: &str = "loadbalancer.openstack.org/health-monitor-delay";
    /// Seconds per health check.
    pub const HEALTH_MONITOR_TIMEOUT: &str = "loadbalancer.openstack.org/health-monitor-timeout";
    /// Successes to mark a member up.
    pub const HEALTH_MONITOR_MAX_RETRIES: &str =
        "loadbalancer.openstack.org/health-monitor-max-retries";
    /// Failures to mark a member down.
    pub const HEALTH_MONITOR_MAX_RETRIES_DOWN: &str =
        "loadbalancer.openstack.org/health-monitor-max-retries-down";
    /// Octavia flavor.
    pub const FLAVOR_ID: &str = "loadbalancer.openstack.org/flavor-id";
    /// Octavia availability zone.
    pub const AVAILABILITY_ZONE: &str = "loadbalancer.openstack.org/availability-zone";
    /// Barbican TLS container for TERMINATED_HTTPS listeners.
    pub const DEFAULT_TLS_CONTAINER_REF: &str =
        "loadbalancer.openstack.org/default-tls-container-ref";
    /// An existing load balancer to use. Written back after every ensure (by
    /// cloud-provider-openstack, and by kube-lb, which also records the id in
    /// [`CREATED_WITH`] so that its own load balancer's id is not read as one to use).
    pub const LOAD_BALANCER_ID: &str = "loadbalancer.openstack.org/load-balancer-id";
    /// Hostname reported in status.
    pub const HOSTNAME: &str = "loadbalancer.openstack.org/hostname";
    /// Written back after every ensure (by cloud-provider-openstack, and by kube-lb): the
    /// address the Service is reached at, its floating IP or, without one, its VIP (read-only).
    pub const LOAD_BALANCER_ADDRESS: &str = "loadbalancer.openstack.org/load-balancer-address";
    /// Member node label selector.
    pub const NODE_SELECTOR: &str = "loadbalancer.openstack.org/node-selector";
    /// Written back by kube-lb: the create-only settings of the Service's load balancer as
    /// Octavia reports them (JSON: `flavor_id`, `availability_zone`, `vip_subnet_id`,
    /// `vip_network_id`, `vip_port_id`) and its id (`load_balancer_id`); a later annotation
    /// change is reported, not applied.
    pub const CREATED_WITH: &str = "kube-lb.io/openstack-created-with";
}

/// Tencent TKE keys (seed 001; reference other-clouds.md §2.3).
pub mod tencent {
    /// Internal CLB in this subnet.
    pub const INTERNAL_SUBNET_ID: &str =
        "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid";
    /// Backend node label selector.
    pub const BACKENDS_LABEL: &str = "service.kubernetes.io/qcloud-loadbalancer-backends-label";
    /// Existing CLB id.
    pub const EXISTED_LBID: &str = "service.kubernetes.io/tke-existed-lbid";
    /// Extra CreateLoadBalancer parameters (JSON).
    pub const EXTENSIVE_PARAMETERS: &str = "service.kubernetes.io/service.extensiveParameters";
    /// Extra CreateListener parameters (JSON).
    pub const LISTENER_PARAMETERS: &str = "service.kubernetes.io/service.listenerParameters";
    /// classic / application.
    pub const LOADBALANCE_TYPE: &str = "service.kubernetes.io/loadbalance-type";
    /// Internet charge type.
    pub const INTERNET_CHARGE_TYPE: &str =
        "service.kubernetes.io/qcloud-loadbalancer-internet-charge-type";
    /// Max outbound bandwidth, Mbps.
    pub const INTERNET_MAX_BANDWIDTH_OUT: &str =
        "service.kubernetes.io/qcloud-loadbalancer-internet-max-bandwidth-out";
    /// Register only nodes with a pod (Local).
    pub const LOCAL_SVC_ONLY_BIND_NODE_WITH_POD: &str =
        "service.kubernetes.io/local-svc-only-bind-node-with-pod";
    /// Written back (as TKE does): the id of the CLB that holds the Service's listeners.
    pub const LOADBALANCE_ID: &str = "service.kubernetes.io/loadbalance-id";
    /// Written back by kube-lb: the extensiveParameters the Service's CLB was created with
    /// (create-only; a later change is reported, not applied).
    pub const CREATED_WITH_EXTENSIVE_PARAMETERS: &str =
        "kube-lb.io/tencent-created-with-extensive-parameters";
    /// Written back by kube-lb: the listenerParameters the Service's listeners were created
    /// with (create-only; a later change is reported, not applied).
    pub const CREATED_WITH_LISTENER_PARAMETERS: &str =
        "kube-lb.io/tencent-created-with-listener-parameters";
}

/// Baidu CCE keys (reference other-clouds.md §3.8).
pub mod baidu {
    /// Internal BLB (no EIP).
    pub const INTERNAL_VPC: &str = "service.beta.kubernetes.io/cce-load-balancer-internal-vpc";
    /// BLB name override.
    pub const LB_NAME: &str = "service.beta.kubernetes.io/cce-load-balancer-lb-name";
    /// Subnet for a new BLB.
    pub const SUBNET_ID: &str = "service.beta.kubernetes.io/cce-load-balancer-subnet-id";
    /// Ask for a VIP at create.
    pub const ALLOCATE_VIP: &str = "service.beta.kubernetes.io/cce-load-balancer-allocate-vip";
    /// Keep the BLB on delete.
    pub const RESERVE_LB: &str = "service.beta.kubernetes.io/cce-load-balancer-reserve-lb";
    /// Use an existing BLB.
    pub const EXIST_ID: &str = "service.beta.kubernetes.io/cce-load-balancer-exist-id";
    /// The BLB id (read first; upstream writes it back).
    pub const LOAD_BALANCER_ID: &str = "service.beta.kubernetes.io/cce-load-balancer-id";
    /// The BLB id upstream writes back after creating it.
    pub const CCE_ADD_ID: &str = "service.beta.kubernetes.io/cce-load-balancer-cce-add-id";
    /// The EIP upstream writes back.
    pub const CCE_ADD_EIP: &str = "service.beta.kubernetes.io/cce-load-balancer-cce-add-eip";
    /// Upstream's cap on backend servers (not converged by kube-lb: warned).
    pub const RS_MAX_NUM: &str = "service.beta.kubernetes.io/cce-load-balancer-rs-max-num";
    /// EIP name.
    pub const EIP_NAME: &str = "service.beta.kubernetes.io/cce-elastic-ip-name";
    /// `Prepaid` / `Postpaid`.
    pub const EIP_PAYMENT_TIMING: &str = "service.beta.kubernetes.io/cce-elastic-ip-payment-timing";
    /// `ByTraffic` / `ByBandwidth`.
    pub const EIP_BILLING_METHOD: &str = "service.beta.kubernetes.io/cce-elastic-ip-billing-method";
    /// Bandwidth, Mbps.
    pub const EIP_BANDWIDTH_IN_MBPS: &str =
        "service.beta.kubernetes.io/cce-elastic-ip-bandwidth-in-mbps";
    /// Prepaid length, months.
    pub const EIP_RESERVATION_LENGTH: &str =
        "service.beta.kubernetes.io/cce-elastic-ip-reservation-length";
}

/// `local` provider keys (address pools, issue 18), with MetalLB's keys accepted as aliases
/// (reference other-clouds.md §4.1) so a cluster can move over without editing Services.
pub mod local {
    /// Requested addresses, comma separated, at most one per family: the only way to ask for
    /// both families (`spec.loadBalancerIP` holds one address).
    pub const LOAD_BALANCER_IPS: &str = "kube-lb.io/load-balancer-ips";
    /// The `IPPool` to take the address from.
    pub const ADDRESS_POOL: &str = "kube-lb.io/address-pool";
    /// Sharing key: Services with the same key and disjoint (port, protocol) pairs may share
    /// an address.
    pub const ALLOW_SHARED_IP: &str = "kube-lb.io/allow-shared-ip";
    /// Written by the controller: the `IPPool` the Service's address came from.
    pub const ALLOCATED_FROM_POOL: &str = "kube-lb.io/ip-allocated-from-pool";
    /// MetalLB's spelling of [`LOAD_BALANCER_IPS`].
    pub const METALLB_LOAD_BALANCER_IPS: &str = "metallb.io/loadBalancerIPs";
    /// MetalLB's spelling of [`ADDRESS_POOL`].
    pub const METALLB_ADDRESS_POOL: &str = "metallb.io/address-pool";
    /// MetalLB's spelling of [`ALLOW_SHARED_IP`].
    pub const METALLB_ALLOW_SHARED_IP: &str = "metallb.io/allow-shared-ip";
    /// MetalLB's spelling of [`ALLOCATED_FROM_POOL`].
    pub const METALLB_ALLOCATED_FROM_POOL: &str = "metallb.io/ip-allocated-from-pool";
    /// MetalLB's deprecated spelling of [`LOAD_BALANCER_IPS`].
    pub const METALLB_LEGACY_LOAD_BALANCER_IPS: &str = "metallb.universe.tf/loadBalancerIPs";
    /// MetalLB's deprecated spelling of [`ADDRESS_POOL`].
    pub const METALLB_LEGACY_ADDRESS_POOL: &str = "metallb.universe.tf/address-pool";
    /// MetalLB's deprecated spelling of [`ALLOW_SHARED_IP`].
    pub const METALLB_LEGACY_ALLOW_SHARED_IP: &str = "metallb.universe.tf/allow-shared-ip";
    /// MetalLB's deprecated spelling of [`ALLOCATED_FROM_POOL`].
    pub const METALLB_LEGACY_ALLOCATED_FROM_POOL: &str =
        "metallb.universe.tf/ip-allocated-from-pool";
}

use crate::Cloud;

/// Key prefixes (or exact keys) that belong to one cloud; used to warn when a Service carries
/// another cloud's annotations, which then have no effect.
pub(crate) fn cloud_of_key(key: &str) -> Option<Cloud> {
    const TABLE: &[(&str, Cloud)] = &[
        ("service.beta.kubernetes.io/aws-load-balancer-", Cloud::Aws),
        ("cloud.google.com/", Cloud::Gcp),
        ("networking.gke.io/", Cloud::Gcp),
        ("alpha.cloud.google.com/", Cloud::Gcp),
        ("service.beta.kubernetes.io/azure-", Cloud::Azure),
        ("service.beta.kubernetes.io/port_", Cloud::Azure),
        ("service.beta.kubernetes.io/openstack-", Cloud::Openstack),
        ("loadbalancer.openstack.org/", Cloud::Openstack),
        ("service.kubernetes.io/qcloud-", Cloud::Tencent),
        ("service.kubernetes.io/tke-", Cloud::Tencent),
        (
            "service.kubernetes.io/service.extensiveParameters",
            Cloud::Tencent,
        ),
        (
            "service.kubernetes.io/service.listenerParameters",
            Cloud::Tencent,
        ),
        ("service.kubernetes.io/loadbalance-type", Cloud::Tencent),
        (
            "service.kubernetes.io/local-svc-only-bind-node-with-pod",
            Cloud::Tencent,
        ),
        ("service.cloud.tencent.com/", Cloud::Tencent),
        ("service.beta.kubernetes.io/cce-", Cloud::Baidu),
        ("kube-lb.io/load-balancer-ips", Cloud::Local),
        ("kube-lb.io/address-pool", Cloud::Local),
        ("kube-lb.io/allow-shared-ip", Cloud::Local),
        ("kube-lb.io/ip-allocated-from-pool", Cloud::Local),
        ("metallb.io/", Cloud::Local),
        ("metallb.universe.tf/", Cloud::Local),
    ];
    TABLE
        .iter()
        .find(|(prefix, _)| key.starts_with(prefix))
        .map(|(_, cloud)| *cloud)
}

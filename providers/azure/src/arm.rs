//! The few Microsoft.Network resource shapes kube-lb reads and writes (API version
//! [`API_VERSION`]). Every object keeps the fields it does not model in `extra`, so a full-object
//! PUT of a shared load balancer or security group never drops what other writers put there.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The Microsoft.Network API version every request uses: the one `azure_mgmt_network`'s
/// `package_2024_03` module sends, which these shapes follow.
pub const API_VERSION: &str = "2024-03-01";

/// Fields a type does not model, carried through unchanged.
pub type Extra = Map<String, Value>;

/// A reference to another resource by ID.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubResource {
    /// Full ARM resource ID.
    pub id: String,
}

impl SubResource {
    /// A reference to `id`.
    pub fn new(id: impl Into<String>) -> Self {
        SubResource { id: id.into() }
    }

    /// Case-insensitive comparison, as ARM treats IDs.
    pub fn same(&self, id: &str) -> bool {
        self.id.eq_ignore_ascii_case(id)
    }
}

/// `sku` of a load balancer or public IP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sku {
    /// `Basic` or `Standard`.
    pub name: String,
    /// `Regional` or `Global`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// A load balancer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadBalancer {
    /// Resource ID (server-set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    pub name: String,
    /// Region.
    pub location: String,
    /// Current etag (server-set); sent back as `If-Match`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// SKU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Properties.
    #[serde(default)]
    pub properties: LoadBalancerProperties,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `properties` of a load balancer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerProperties {
    /// Frontends.
    #[serde(default, rename = "frontendIPConfigurations")]
    pub frontend_ip_configurations: Vec<FrontendIpConfiguration>,
    /// Backend pools.
    #[serde(default)]
    pub backend_address_pools: Vec<BackendAddressPool>,
    /// Rules.
    #[serde(default)]
    pub load_balancing_rules: Vec<LoadBalancingRule>,
    /// Probes.
    #[serde(default)]
    pub probes: Vec<Probe>,
    /// `Succeeded`, `Updating`, … (server-set).
    #[serde(default, skip_serializing)]
    pub provisioning_state: Option<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A child resource of a load balancer or security group (a frontend, backend pool, rule,
/// probe or security rule): ARM gives each the same envelope around its own properties.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Child<P> {
    /// Name.
    pub name: String,
    /// ID (server-set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Properties.
    #[serde(default)]
    pub properties: P,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A frontend IP configuration, named `a<uid>` or `a<uid>-<subnet>` (its etag and zones stay
/// in `extra`).
pub type FrontendIpConfiguration = Child<FrontendProperties>;

/// `properties` of a frontend.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FrontendProperties {
    /// Public frontends: the public IP.
    #[serde(
        default,
        rename = "publicIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ip_address: Option<SubResource>,
    /// Internal frontends: the subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<SubResource>,
    /// Internal frontends: the address (requested, or allocated by ARM).
    #[serde(
        default,
        rename = "privateIPAddress",
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_address: Option<String>,
    /// `Static` or `Dynamic`.
    #[serde(
        default,
        rename = "privateIPAllocationMethod",
        skip_serializing_if = "Option::is_none"
    )]
    pub private_ip_allocation_method: Option<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A backend pool, named `<cluster>`.
pub type BackendAddressPool = Child<BackendPoolProperties>;

/// `properties` of a backend pool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendPoolProperties {
    /// IP-based members (`nodeIP` membership mode).
    #[serde(default)]
    pub load_balancer_backend_addresses: Vec<BackendAddress>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One IP-based pool member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackendAddress {
    /// Name (the node name).
    pub name: String,
    /// Properties.
    #[serde(default)]
    pub properties: BackendAddressProperties,
}

/// `properties` of a pool member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendAddressProperties {
    /// The node address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// The virtual network the address lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_network: Option<SubResource>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A load-balancing rule, named `a<uid>-TCP-80`.
pub type LoadBalancingRule = Child<RuleProperties>;

/// `properties` of a rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleProperties {
    /// The frontend.
    #[serde(
        default,
        rename = "frontendIPConfiguration",
        skip_serializing_if = "Option::is_none"
    )]
    pub frontend_ip_configuration: Option<SubResource>,
    /// The pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_address_pool: Option<SubResource>,
    /// The probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<SubResource>,
    /// `Tcp`, `Udp` or `All`.
    #[serde(default)]
    pub protocol: String,
    /// Listening port (0 with `All`).
    #[serde(default)]
    pub frontend_port: u16,
    /// Port on the backends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_port: Option<u16>,
    /// Idle timeout in minutes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_in_minutes: Option<u32>,
    /// Direct server return.
    #[serde(
        default,
        rename = "enableFloatingIP",
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_floating_ip: Option<bool>,
    /// TCP reset on idle timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_tcp_reset: Option<bool>,
    /// `Default`, `SourceIP` or `SourceIPProtocol`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_distribution: Option<String>,
    /// Unmodelled fields (server-computed back-references live here too).
    #[serde(flatten)]
    pub extra: Extra,
}

/// A health probe, named as its rule.
pub type Probe = Child<ProbeProperties>;

/// `properties` of a probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProbeProperties {
    /// `Tcp`, `Http` or `Https`.
    #[serde(default)]
    pub protocol: String,
    /// Port probed on the nodes.
    #[serde(default)]
    pub port: u16,
    /// HTTP(S) path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_path: Option<String>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_in_seconds: Option<u32>,
    /// Consecutive failures before a node is marked down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_threshold: Option<u32>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A public IP address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PublicIp {
    /// ID (server-set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    pub name: String,
    /// Region.
    pub location: String,
    /// Current etag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// SKU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sku: Option<Sku>,
    /// Tags (ownership lives here).
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
    /// Properties.
    #[serde(default)]
    pub properties: PublicIpProperties,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `properties` of a public IP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PublicIpProperties {
    /// `Static` or `Dynamic`.
    #[serde(
        default,
        rename = "publicIPAllocationMethod",
        skip_serializing_if = "Option::is_none"
    )]
    pub allocation_method: Option<String>,
    /// `IPv4` or `IPv6`.
    #[serde(
        default,
        rename = "publicIPAddressVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub version: Option<String>,
    /// The allocated address (server-set).
    #[serde(default, rename = "ipAddress", skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// DNS label.
    #[serde(
        default,
        rename = "dnsSettings",
        skip_serializing_if = "Option::is_none"
    )]
    pub dns_settings: Option<DnsSettings>,
    /// The frontend using it (server-set).
    #[serde(
        default,
        rename = "ipConfiguration",
        skip_serializing_if = "Option::is_none"
    )]
    pub ip_configuration: Option<SubResource>,
    /// Prefix to allocate from.
    #[serde(
        default,
        rename = "publicIPPrefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub public_ip_prefix: Option<SubResource>,
    /// Provisioning state (server-set).
    #[serde(default, rename = "provisioningState", skip_serializing)]
    pub provisioning_state: Option<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `dnsSettings` of a public IP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DnsSettings {
    /// The label (`<label>.<region>.cloudapp.azure.com`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain_name_label: Option<String>,
    /// Unmodelled fields (fqdn, …).
    #[serde(flatten)]
    pub extra: Extra,
}

/// A network security group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecurityGroup {
    /// ID (server-set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name.
    pub name: String,
    /// Region.
    pub location: String,
    /// Current etag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// Tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Properties.
    #[serde(default)]
    pub properties: SecurityGroupProperties,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `properties` of a security group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupProperties {
    /// User-visible rules (the defaults are in `extra`).
    #[serde(default)]
    pub security_rules: Vec<SecurityRule>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// One security rule.
pub type SecurityRule = Child<SecurityRuleProperties>;

/// `properties` of a security rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityRuleProperties {
    /// `Tcp`, `Udp`, `*`, …
    #[serde(default)]
    pub protocol: String,
    /// `Allow` or `Deny`.
    #[serde(default)]
    pub access: String,
    /// `Inbound` or `Outbound`.
    #[serde(default)]
    pub direction: String,
    /// 100–4096.
    #[serde(default)]
    pub priority: u32,
    /// Source ports (`*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_port_range: Option<String>,
    /// One destination port or range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_port_range: Option<String>,
    /// Several destination ports.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_port_ranges: Vec<String>,
    /// One source prefix or service tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_address_prefix: Option<String>,
    /// Several sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_address_prefixes: Vec<String>,
    /// One destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_address_prefix: Option<String>,
    /// Several destinations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_address_prefixes: Vec<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

impl SecurityRuleProperties {
    /// All destination prefixes, whichever field holds them.
    pub fn destinations(&self) -> Vec<String> {
        let mut all: Vec<String> = self.destination_address_prefix.iter().cloned().collect();
        all.extend(self.destination_address_prefixes.iter().cloned());
        all
    }
}

/// A subnet (read only).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Subnet {
    /// ID.
    #[serde(default)]
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Properties.
    #[serde(default)]
    pub properties: SubnetProperties,
}

/// `properties` of a subnet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubnetProperties {
    /// CIDR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address_prefix: Option<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `error` of a failed operation.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ErrorDetail {
    /// Code, e.g. `InvalidResourceReference`.
    #[serde(default)]
    pub code: String,
    /// Message.
    #[serde(default)]
    pub message: String,
}

/// The body of an `Azure-AsyncOperation` status URL.
#[derive(Debug, Clone, Deserialize)]
pub struct OperationStatus {
    /// `InProgress`, `Succeeded`, `Failed`, `Canceled`.
    pub status: String,
    /// Set when failed.
    #[serde(default)]
    pub error: Option<ErrorDetail>,
}

/// ARM IDs for one subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ids {
    /// Subscription ID.
    pub subscription: String,
}

impl Ids {
    /// `/subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Network/{collection}/{name}`.
    pub fn resource(&self, rg: &str, collection: &str, name: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/{collection}/{name}",
            self.subscription
        )
    }

    /// A load balancer's ID.
    pub fn load_balancer(&self, rg: &str, name: &str) -> String {
        self.resource(rg, "loadBalancers", name)
    }

    /// A child of a load balancer (`frontendIPConfigurations`, `backendAddressPools`, `probes`).
    pub fn lb_child(&self, rg: &str, lb: &str, collection: &str, name: &str) -> String {
        format!("{}/{collection}/{name}", self.load_balancer(rg, lb))
    }

    /// A public IP's ID.
    pub fn public_ip(&self, rg: &str, name: &str) -> String {
        self.resource(rg, "publicIPAddresses", name)
    }

    /// A virtual network's ID.
    pub fn virtual_network(&self, rg: &str, name: &str) -> String {
        self.resource(rg, "virtualNetworks", name)
    }

    /// A subnet's ID.
    pub fn subnet(&self, rg: &str, vnet: &str, subnet: &str) -> String {
        format!("{}/subnets/{subnet}", self.virtual_network(rg, vnet))
    }
}

/// The resource group segment of an ARM ID.
pub fn resource_group_of(id: &str) -> Option<&str> {
    let mut parts = id.split('/');
    while let Some(part) = parts.next() {
        if part.eq_ignore_ascii_case("resourceGroups") {
            return parts.next();
        }
    }
    None
}

/// The last segment (the name) of an ARM ID.
pub fn name_of(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_survive_a_round_trip() {
        let raw = serde_json::json!({
            "name": "kubernetes", "location": "eastus", "etag": "W/\"1\"",
            "properties": {"frontendIPConfigurations": [], "inboundNatRules": [{"name": "ssh"}],
                "outboundRules": [], "provisioningState": "Succeeded"}});
        let lb: LoadBalancer = serde_json::from_value(raw).unwrap();
        let back = serde_json::to_value(&lb).unwrap();
        assert_eq!(back["properties"]["inboundNatRules"][0]["name"], "ssh");
        assert!(back["properties"].get("provisioningState").is_none());
    }

    #[test]
    fn ids_split() {
        let ids = Ids {
            subscription: "s".into(),
        };
        let id = ids.public_ip("rg-a", "pip");
        assert_eq!(resource_group_of(&id), Some("rg-a"));
        assert_eq!(name_of(&id), "pip");
        assert!(SubResource::new(id.to_uppercase()).same(&id));
    }
}

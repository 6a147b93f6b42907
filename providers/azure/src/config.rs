//! The cloud-config file: upstream's `azure.json`, plus endpoint overrides for sovereign
//! clouds and for tests against the mock.

use std::fmt;
use std::path::Path;

use kube_lb_provider_core::config_file;
use serde::Deserialize;

use crate::error::AzureError;

/// Public Azure's resource manager.
pub const DEFAULT_RESOURCE_MANAGER: &str = "https://management.azure.com";
/// Public Azure's Entra ID authority.
pub const DEFAULT_ACTIVE_DIRECTORY: &str = "https://login.microsoftonline.com";

/// `azure.json`, as upstream's cloud-provider-azure reads it. Unknown keys are accepted and
/// ignored, so an existing file works unchanged.
#[derive(Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AzureConfig {
    /// `AzurePublicCloud`, … (informational; endpoints come from the overrides below).
    pub cloud: String,
    /// Entra ID tenant.
    pub tenant_id: String,
    /// Subscription holding the cluster's network resources.
    pub subscription_id: String,
    /// Service principal client ID.
    pub aad_client_id: String,
    /// Service principal secret. Never logged (see the `Debug` impl).
    pub aad_client_secret: String,
    /// Cluster resource group (load balancers, public IPs by default).
    pub resource_group: String,
    /// Region.
    pub location: String,
    /// Cluster virtual network.
    pub vnet_name: String,
    /// Its resource group (default: `resourceGroup`).
    pub vnet_resource_group: String,
    /// Default subnet for internal load balancers.
    pub subnet_name: String,
    /// The cluster NSG that gets allow rules.
    pub security_group_name: String,
    /// Its resource group (default: `resourceGroup`).
    pub security_group_resource_group: String,
    /// Route table (accepted; not used by the load-balancer provider).
    pub route_table_name: String,
    /// Availability set (accepted; Basic-SKU LB selection is not supported).
    pub primary_availability_set_name: String,
    /// `standard` or `vmss` (accepted; pool membership is IP-based either way).
    pub vm_type: String,
    /// `standard` (default) or `basic`.
    pub load_balancer_sku: String,
    /// Overrides the shared load balancer's base name (default: the cluster name).
    pub load_balancer_name: String,
    /// Resource group of the load balancers (default: `resourceGroup`).
    pub load_balancer_resource_group: String,
    /// Use the VM's managed identity instead of a client secret.
    pub use_managed_identity_extension: bool,
    /// Client ID of a user-assigned managed identity.
    #[serde(rename = "userAssignedIdentityID")]
    pub user_assigned_identity_id: String,
    /// Resource manager base URL (default [`DEFAULT_RESOURCE_MANAGER`]); tests point it at the mock.
    pub resource_manager_endpoint: String,
    /// Entra ID authority (default [`DEFAULT_ACTIVE_DIRECTORY`]).
    pub active_directory_endpoint: String,
    /// Leave Services whose IP is in `excludeMasterFromStandardLB` … accepted for compatibility.
    #[serde(rename = "excludeMasterFromStandardLB")]
    pub exclude_master_from_standard_lb: Option<bool>,
    /// Client-side rate limit: sustained writes per second (upstream's `cloudProviderRateLimitQPSWrite`).
    #[serde(rename = "cloudProviderRateLimitQPSWrite")]
    pub rate_limit_qps_write: Option<f64>,
    /// Client-side rate limit bucket (upstream's `cloudProviderRateLimitBucketWrite`).
    #[serde(rename = "cloudProviderRateLimitBucketWrite")]
    pub rate_limit_bucket_write: Option<u32>,
    /// Upper bound for any wait the server asks for with `Retry-After` (seconds; default 60).
    pub max_retry_after_seconds: Option<u64>,
    /// How long a read load balancer is trusted (upstream's key; see [`AzureConfig::cache_ttl`]).
    #[serde(rename = "loadBalancerCacheTTLInSeconds")]
    pub load_balancer_cache_ttl_in_seconds: Option<u64>,
    /// How long a read security group is trusted (upstream's key).
    #[serde(rename = "nsgCacheTTLInSeconds")]
    pub nsg_cache_ttl_in_seconds: Option<u64>,
    /// How long a read list of public IPs is trusted (upstream's key).
    #[serde(rename = "publicIPCacheTTLInSeconds")]
    pub public_ip_cache_ttl_in_seconds: Option<u64>,
}

impl AzureConfig {
    /// How long the provider trusts a read of the shared objects ([`crate::cache`]), which is
    /// also how soon it sees drift no write of its own runs into: the shortest of upstream's
    /// `loadBalancerCacheTTLInSeconds`, `nsgCacheTTLInSeconds` and `publicIPCacheTTLInSeconds`
    /// that the file sets (one cache serves all three kinds, and none may be trusted longer
    /// than its operator asked), [`crate::cache::DEFAULT_TTL`] when it sets none; `0` reads
    /// afresh on every sync.
    pub fn cache_ttl(&self) -> std::time::Duration {
        [
            self.load_balancer_cache_ttl_in_seconds,
            self.nsg_cache_ttl_in_seconds,
            self.public_ip_cache_ttl_in_seconds,
        ]
        .into_iter()
        .flatten()
        .min()
        .map_or(crate::cache::DEFAULT_TTL, std::time::Duration::from_secs)
    }
}

impl fmt::Debug for AzureConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AzureConfig")
            .field("tenant_id", &self.tenant_id)
            .field("subscription_id", &self.subscription_id)
            .field("aad_client_id", &self.aad_client_id)
            .field(
                "aad_client_secret",
                &if self.aad_client_secret.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("resource_group", &self.resource_group)
            .field("location", &self.location)
            .field("vnet_name", &self.vnet_name)
            .field("subnet_name", &self.subnet_name)
            .field("security_group_name", &self.security_group_name)
            .field("load_balancer_sku", &self.load_balancer_sku)
            .field("resource_manager_endpoint", &self.resource_manager_endpoint)
            .field("active_directory_endpoint", &self.active_directory_endpoint)
            .finish_non_exhaustive()
    }
}

/// The load-balancer SKU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbSku {
    /// Standard (the default, as upstream).
    Standard,
    /// Basic.
    Basic,
}

impl LbSku {
    /// The ARM value.
    pub fn as_str(self) -> &'static str {
        match self {
            LbSku::Standard => "Standard",
            LbSku::Basic => "Basic",
        }
    }
}

fn or<'a>(value: &'a str, fallback: &'a str) -> &'a str {
    if value.trim().is_empty() {
        fallback
    } else {
        value.trim()
    }
}

impl AzureConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<AzureConfig, AzureError> {
        let text = config_file::read(path)?;
        let config: AzureConfig = config_file::parse_json(&path.display().to_string(), &text)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks the values every request needs.
    pub fn validate(&self) -> Result<(), AzureError> {
        for (key, value) in [
            ("subscriptionId", &self.subscription_id),
            ("resourceGroup", &self.resource_group),
            ("location", &self.location),
        ] {
            if value.trim().is_empty() {
                return Err(AzureError::ConfigInvalid(format!("{key} is required")));
            }
        }
        if !self.use_managed_identity_extension
            && (self.tenant_id.is_empty()
                || self.aad_client_id.is_empty()
                || self.aad_client_secret.is_empty())
        {
            return Err(AzureError::ConfigInvalid(
                "tenantId, aadClientId and aadClientSecret are required unless useManagedIdentityExtension is true".into(),
            ));
        }
        self.sku()?;
        Ok(())
    }

    /// The configured SKU.
    pub fn sku(&self) -> Result<LbSku, AzureError> {
        match self.load_balancer_sku.trim().to_ascii_lowercase().as_str() {
            "" | "standard" => Ok(LbSku::Standard),
            "basic" => Ok(LbSku::Basic),
            other => Err(AzureError::ConfigInvalid(format!(
                "loadBalancerSku {other:?} is not standard or basic"
            ))),
        }
    }

    /// The resource manager base URL without a trailing slash.
    pub fn resource_manager(&self) -> String {
        or(&self.resource_manager_endpoint, DEFAULT_RESOURCE_MANAGER)
            .trim_end_matches('/')
            .to_string()
    }

    /// The Entra ID authority without a trailing slash.
    pub fn active_directory(&self) -> String {
        or(&self.active_directory_endpoint, DEFAULT_ACTIVE_DIRECTORY)
            .trim_end_matches('/')
            .to_string()
    }

    /// Resource group of the load balancers.
    pub fn lb_resource_group(&self) -> &str {
        or(&self.load_balancer_resource_group, &self.resource_group)
    }

    /// Resource group of the virtual network.
    pub fn vnet_resource_group(&self) -> &str {
        or(&self.vnet_resource_group, &self.resource_group)
    }

    /// Resource group of the security group.
    pub fn security_group_resource_group(&self) -> &str {
        or(&self.security_group_resource_group, &self.resource_group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const UPSTREAM: &str = r#"{
        "cloud": "AzurePublicCloud",
        "tenantId": "t", "subscriptionId": "s",
        "aadClientId": "c", "aadClientSecret": "very-secret",
        "resourceGroup": "rg", "location": "westeurope",
        "vmType": "vmss", "subnetName": "aks-subnet", "securityGroupName": "aks-agentpool-nsg",
        "vnetName": "aks-vnet", "vnetResourceGroup": "net-rg", "routeTableName": "rt",
        "primaryAvailabilitySetName": "", "primaryScaleSetName": "aks-nodepool1",
        "cloudProviderBackoff": true, "cloudProviderRateLimit": true,
        "useInstanceMetadata": true, "loadBalancerSku": "Standard",
        "excludeMasterFromStandardLB": true, "maximumLoadBalancerRuleCount": 250
    }"#;

    #[test]
    fn reads_an_upstream_file_and_hides_the_secret() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("azure.json");
        std::fs::write(&path, UPSTREAM).unwrap();
        let config = AzureConfig::load(&path).unwrap();
        assert_eq!(config.vnet_resource_group(), "net-rg");
        assert_eq!(config.security_group_resource_group(), "rg");
        assert_eq!(config.sku().unwrap(), LbSku::Standard);
        assert_eq!(config.resource_manager(), DEFAULT_RESOURCE_MANAGER);
        let debug = format!("{config:?}");
        assert!(!debug.contains("very-secret"), "{debug}");
    }

    /// Upstream's cache keys set the TTL; the shortest one given wins, none gives the default.
    #[test]
    fn cache_ttl_follows_upstreams_keys() {
        let ttl = |extra: &str| {
            let text = format!(
                r#"{{"subscriptionId": "s", "resourceGroup": "rg", "location": "l",
                    "vnetName": "v", "subnetName": "n", "securityGroupName": "g",
                    "tenantId": "t", "aadClientId": "c", "aadClientSecret": "x"{extra}}}"#
            );
            serde_json::from_str::<AzureConfig>(&text)
                .unwrap()
                .cache_ttl()
        };
        assert_eq!(ttl(""), crate::cache::DEFAULT_TTL);
        assert_eq!(
            ttl(r#", "loadBalancerCacheTTLInSeconds": 120"#),
            Duration::from_secs(120)
        );
        assert_eq!(
            ttl(r#", "loadBalancerCacheTTLInSeconds": 120, "nsgCacheTTLInSeconds": 30"#),
            Duration::from_secs(30)
        );
        assert_eq!(ttl(r#", "publicIPCacheTTLInSeconds": 0"#), Duration::ZERO);
    }

    #[test]
    fn rejects_missing_values() {
        let cases = [
            (
                r#"{"resourceGroup":"rg","location":"l","tenantId":"t","aadClientId":"c","aadClientSecret":"x"}"#,
                "subscriptionId",
            ),
            (
                r#"{"subscriptionId":"s","resourceGroup":"rg","location":"l"}"#,
                "aadClientSecret",
            ),
            (
                r#"{"subscriptionId":"s","resourceGroup":"rg","location":"l","useManagedIdentityExtension":true,"loadBalancerSku":"premium"}"#,
                "loadBalancerSku",
            ),
        ];
        for (text, want) in cases {
            let config: AzureConfig = serde_json::from_str(text).unwrap();
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains(want), "{text}: {error}");
        }
    }
}

//! Conversion between kube-lb's ARM model ([`crate::arm`]) and the SDK's generated models.
//!
//! Both describe the same ARM JSON, so the conversion is a serde round trip through
//! `serde_json::Value`, done only here. Mapping field by field would mean hand-maintaining
//! thousands of lines against 2024-03 models that are frozen upstream, and the planner keeps
//! its small types (with `extra` for what it does not model) so it stays independent of the
//! SDK that the [`crate::NetworkClient`] seam lets us swap. A field the 2024-03 model does not
//! know is dropped by a trip through it, so the objects kube-lb rewrites (load balancers,
//! public IPs, security groups) never take that trip: the client reads their raw JSON into
//! kube-lb's model and PUTs it back as raw JSON (`client.rs`), and only read-only objects
//! (subnets) are converted here.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::AzureError;

/// Re-reads `value` as another type describing the same JSON.
pub(crate) fn convert<From: Serialize, To: DeserializeOwned>(
    operation: &'static str,
    value: &From,
) -> Result<To, AzureError> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|source| AzureError::Decode { operation, source })
}

#[cfg(test)]
mod tests {
    use azure_mgmt_network::package_2024_03::models;
    use serde_json::json;

    use super::*;
    use crate::arm::{LoadBalancer, PublicIp, SecurityGroup, Subnet};

    fn round_trip<A, S>(value: serde_json::Value)
    where
        A: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
        S: Serialize + DeserializeOwned,
    {
        let ours: A = serde_json::from_value(value).unwrap();
        let sdk: S = convert("test", &ours).unwrap();
        let back: A = convert("test", &sdk).unwrap();
        assert_eq!(back, ours);
    }

    const LB_ID: &str =
        "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/loadBalancers/kubernetes";

    #[test]
    fn load_balancer_survives_the_sdk_model() {
        let fe = format!("{LB_ID}/frontendIPConfigurations/a1");
        let pool = format!("{LB_ID}/backendAddressPools/kubernetes");
        let probe = format!("{LB_ID}/probes/a1-TCP-80");
        round_trip::<LoadBalancer, models::LoadBalancer>(json!({
            "id": LB_ID,
            "name": "kubernetes",
            "type": "Microsoft.Network/loadBalancers",
            "location": "eastus",
            "etag": "W/\"7\"",
            "sku": {"name": "Standard", "tier": "Regional"},
            "tags": {"owner": "someone-else"},
            "properties": {
                "resourceGuid": "g",
                "frontendIPConfigurations": [{
                    "name": "a1", "id": fe, "etag": "W/\"7\"", "zones": ["1", "2"],
                    "properties": {
                        "publicIPAddress": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/publicIPAddresses/p"},
                        "loadBalancingRules": [{"id": format!("{LB_ID}/loadBalancingRules/a1-TCP-80")}]
                    }
                }],
                "backendAddressPools": [{
                    "name": "kubernetes", "id": pool,
                    "properties": {"loadBalancerBackendAddresses": [{
                        "name": "node-1",
                        "properties": {"ipAddress": "10.0.0.4", "virtualNetwork": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v"}}
                    }]}
                }],
                "loadBalancingRules": [{
                    "name": "a1-TCP-80",
                    "properties": {
                        "frontendIPConfiguration": {"id": fe},
                        "backendAddressPool": {"id": pool},
                        "probe": {"id": probe},
                        "protocol": "Tcp", "frontendPort": 80, "backendPort": 80,
                        "idleTimeoutInMinutes": 4, "enableFloatingIP": true,
                        "enableTcpReset": true, "disableOutboundSnat": false,
                        "loadDistribution": "Default"
                    }
                }],
                "probes": [{
                    "name": "a1-TCP-80",
                    "properties": {"protocol": "Http", "port": 30080, "requestPath": "/healthz",
                                   "intervalInSeconds": 5, "probeThreshold": 2}
                }],
                "outboundRules": [{
                    "name": "other-writer",
                    "properties": {"protocol": "All", "backendAddressPool": {"id": pool},
                                   "frontendIPConfigurations": [{"id": fe}]}
                }]
            }
        }));
    }

    #[test]
    fn public_ip_security_group_and_subnet_survive_the_sdk_models() {
        round_trip::<PublicIp, models::PublicIpAddress>(json!({
            "name": "kubernetes-a1", "location": "eastus", "etag": "W/\"1\"",
            "sku": {"name": "Standard", "tier": "Regional"}, "zones": ["1", "2", "3"],
            "tags": {"k8s-azure-service": "default/web", "k8s-azure-cluster-name": "kubernetes"},
            "properties": {
                "publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4",
                "ipAddress": "20.0.0.1",
                "dnsSettings": {"domainNameLabel": "web", "fqdn": "web.eastus.cloudapp.azure.com"},
                "ipTags": [{"ipTagType": "RoutingPreference", "tag": "Internet"}],
                "ipConfiguration": {"id": format!("{LB_ID}/frontendIPConfigurations/a1")}
            }
        }));
        round_trip::<SecurityGroup, models::NetworkSecurityGroup>(json!({
            "name": "nsg", "location": "eastus", "etag": "W/\"2\"",
            "properties": {"securityRules": [{
                "name": "k8s-azure-lb_allow_IPv4_0123",
                "properties": {
                    "protocol": "Tcp", "sourcePortRange": "*",
                    "destinationPortRanges": ["80", "443"],
                    "sourceAddressPrefix": "Internet",
                    "destinationAddressPrefixes": ["20.0.0.1", "20.0.0.2"],
                    "access": "Allow", "priority": 500, "direction": "Inbound"
                }
            }]}
        }));
        round_trip::<Subnet, models::Subnet>(json!({
            "name": "nodes",
            "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v/subnets/nodes",
            "properties": {"addressPrefix": "10.224.0.0/16"}
        }));
    }

    #[test]
    fn a_body_the_model_cannot_hold_is_a_decode_error() {
        let error =
            convert::<_, models::LoadBalancer>("PutLoadBalancer", &json!({"properties": 7}))
                .unwrap_err();
        assert!(
            matches!(
                error,
                AzureError::Decode {
                    operation: "PutLoadBalancer",
                    ..
                }
            ),
            "{error}"
        );
    }
}

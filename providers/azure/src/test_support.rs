//! Fixtures shared by the unit tests of the planner modules.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use kube_lb_provider_core::annotations::{Cloud, LoadBalancerSpec};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, NodeAddress};
use serde_json::json;

use crate::config::AzureConfig;
use crate::desired::Settings;

/// The settings of cluster `kubernetes`: resource group `rg` in `eastus`, VNet `vnet` with
/// subnet `nodes`, security group `nsg`.
pub(crate) fn settings() -> Settings {
    settings_of("kubernetes")
}

/// The same settings for the cluster named `cluster`.
pub(crate) fn settings_of(cluster: &str) -> Settings {
    let config: AzureConfig = serde_json::from_value(json!({
        "subscriptionId": "sub", "resourceGroup": "rg", "location": "eastus",
        "vnetName": "vnet", "subnetName": "nodes", "securityGroupName": "nsg",
        "tenantId": "t", "aadClientId": "c", "aadClientSecret": "s"}))
    .unwrap();
    Settings::new(&config, cluster).unwrap()
}

/// Nodes `n1` … `n<n>` with internal IPs 10.0.0.1 … 10.0.0.`n`.
pub(crate) fn nodes(n: u8) -> Vec<BackendNode> {
    (1..=n)
        .map(|i| BackendNode {
            name: format!("n{i}"),
            provider_id: None,
            addresses: vec![NodeAddress {
                kind: NodeAddressKind::InternalIp,
                ip: format!("10.0.0.{i}").parse().unwrap(),
            }],
            labels: BTreeMap::new(),
        })
        .collect()
}

/// The parsed spec of Service `namespace/name` (`uid`) with a TCP 80 and a UDP 53 port,
/// `annotations` given without their `service.beta.kubernetes.io/` prefix and `extra` fields
/// merged into the spec.
pub(crate) fn spec(
    namespace: &str,
    name: &str,
    uid: &str,
    annotations: serde_json::Value,
    extra: serde_json::Value,
) -> LoadBalancerSpec {
    let mut spec = json!({"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "ports": [
        {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 80, "nodePort": 30080},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53, "nodePort": 30053}]});
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let annotations: BTreeMap<String, String> = annotations
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                format!("service.beta.kubernetes.io/{k}"),
                v.as_str().unwrap().to_string(),
            )
        })
        .collect();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "annotations": annotations},
        "spec": spec,
    }))
    .unwrap();
    kube_lb_provider_core::annotations::parse(Cloud::Azure, &service)
        .unwrap()
        .spec
}

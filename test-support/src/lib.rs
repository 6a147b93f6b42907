//! Fixtures the provider tests share, so each cloud's `tests/support` module keeps only what is
//! its own (the mock, the provider's options, the cloud-state reads):
//!
//! * [`ServiceBuilder`]: a `type: LoadBalancer` Service as the API server stores it, turned into
//!   a [`LoadBalancerSpec`] by the real annotation parser of one [`Cloud`];
//! * [`internal_ip_node`]: a backend node known by its InternalIP alone.
//!
//! A cloud's own shortcuts (Azure's annotation prefix, an `internal()` annotation) are small
//! extensions in that cloud's support module, on top of the builder.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{Cloud, LoadBalancerSpec, Parsed, ServiceKey};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, NodeAddress};
use serde_json::{Map, Value, json};

/// The namespace every built Service lives in.
pub const NAMESPACE: &str = "default";

/// A LoadBalancer Service in [`NAMESPACE`], parsed for one cloud through the real annotation
/// parser. Starts with one port (`http`, 80 → targetPort 8080, nodePort 30080) and
/// `externalTrafficPolicy: Cluster`; each setter replaces or adds one part.
#[derive(Debug, Clone)]
pub struct ServiceBuilder {
    cloud: Cloud,
    name: String,
    uid: String,
    /// Prepended to every key given to [`ServiceBuilder::annotate`].
    annotation_prefix: &'static str,
    annotations: BTreeMap<String, String>,
    ports: Vec<Value>,
    /// `spec` fields other than `type` and `ports`.
    spec: Map<String, Value>,
}

impl ServiceBuilder {
    /// `default/<name>` with UID `uid`, parsed for `cloud`.
    pub fn new(cloud: Cloud, name: &str, uid: &str) -> Self {
        ServiceBuilder {
            cloud,
            name: name.into(),
            uid: uid.into(),
            annotation_prefix: "",
            annotations: BTreeMap::new(),
            ports: vec![
                json!({"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080, "nodePort": 30080}),
            ],
            spec: Map::new(),
        }
    }

    /// Parses for `cloud` instead (one Service reconciled by several clouds' providers).
    pub fn cloud(mut self, cloud: Cloud) -> Self {
        self.cloud = cloud;
        self
    }

    /// Makes [`ServiceBuilder::annotate`] take keys without `prefix` (a cloud whose tests name
    /// its annotations by their suffix).
    pub fn annotation_prefix(mut self, prefix: &'static str) -> Self {
        self.annotation_prefix = prefix;
        self
    }

    /// Sets annotation `key` (after the [`ServiceBuilder::annotation_prefix`]) to `value`.
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.annotations
            .insert(format!("{}{key}", self.annotation_prefix), value.into());
        self
    }

    /// Replaces the ports: (name, port, protocol, nodePort), each with targetPort = port.
    pub fn ports(mut self, ports: &[(&str, u16, &str, u16)]) -> Self {
        self.ports = ports
            .iter()
            .map(|(name, port, protocol, node_port)| {
                json!({"name": name, "port": port, "protocol": protocol, "targetPort": port, "nodePort": node_port})
            })
            .collect();
        self
    }

    /// Removes annotation `key` (after the [`ServiceBuilder::annotation_prefix`]).
    pub fn remove_annotation(mut self, key: &str) -> Self {
        self.annotations
            .remove(&format!("{}{key}", self.annotation_prefix));
        self
    }

    /// No ports at all (to add them one by one with [`ServiceBuilder::add_port`]).
    pub fn without_ports(mut self) -> Self {
        self.ports.clear();
        self
    }

    /// Appends one port, with targetPort = port.
    pub fn add_port(mut self, name: &str, port: u16, protocol: &str, node_port: u16) -> Self {
        self.ports.push(
            json!({"name": name, "port": port, "protocol": protocol, "targetPort": port, "nodePort": node_port}),
        );
        self
    }

    /// `externalTrafficPolicy: Local` with this `healthCheckNodePort`.
    pub fn local(mut self, health_check_node_port: u16) -> Self {
        self.spec
            .insert("externalTrafficPolicy".into(), json!("Local"));
        self.spec
            .insert("healthCheckNodePort".into(), json!(health_check_node_port));
        self
    }

    /// `externalTrafficPolicy: Cluster` again (no health-check node port).
    pub fn cluster(mut self) -> Self {
        self.spec.remove("externalTrafficPolicy");
        self.spec.remove("healthCheckNodePort");
        self
    }

    /// `spec.loadBalancerIP`.
    pub fn load_balancer_ip(mut self, ip: &str) -> Self {
        self.spec.insert("loadBalancerIP".into(), json!(ip));
        self
    }

    /// `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(mut self, ranges: &[&str]) -> Self {
        self.spec
            .insert("loadBalancerSourceRanges".into(), json!(ranges));
        self
    }

    /// Appends one CIDR to `spec.loadBalancerSourceRanges`.
    pub fn add_source_range(mut self, cidr: &str) -> Self {
        let ranges = self
            .spec
            .entry("loadBalancerSourceRanges")
            .or_insert_with(|| json!([]));
        if let Value::Array(ranges) = ranges {
            ranges.push(json!(cidr));
        }
        self
    }

    /// `spec.selector` (providers never read it; the API server's object carries one).
    pub fn selector(mut self, labels: &[(&str, &str)]) -> Self {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        self.spec.insert("selector".into(), json!(labels));
        self
    }

    /// The Service's key (namespace, name, UID).
    pub fn key(&self) -> ServiceKey {
        ServiceKey {
            namespace: NAMESPACE.into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }

    /// The Service object, as the API server would store it.
    pub fn service(&self) -> Service {
        let mut spec = self.spec.clone();
        spec.insert("type".into(), json!("LoadBalancer"));
        spec.insert("ports".into(), json!(self.ports));
        spec.entry("externalTrafficPolicy")
            .or_insert(json!("Cluster"));
        let object = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": self.name, "namespace": NAMESPACE, "uid": self.uid,
                         "annotations": self.annotations},
            "spec": spec,
        });
        serde_json::from_value(object)
            .unwrap_or_else(|e| panic!("the built Service is not a valid Service: {e}"))
    }

    /// The parser's result: spec and warnings. Panics with the parser's errors if the
    /// annotations are rejected.
    pub fn parsed(&self) -> Parsed {
        kube_lb_annotations::parse(self.cloud, &self.service())
            .unwrap_or_else(|e| panic!("annotations rejected: {e:?}"))
    }

    /// The parsed spec (see [`ServiceBuilder::parsed`]).
    pub fn spec(&self) -> LoadBalancerSpec {
        self.parsed().spec
    }

    /// The parser's errors, rendered; empty when the Service parses.
    pub fn errors(&self) -> String {
        match kube_lb_annotations::parse(self.cloud, &self.service()) {
            Ok(_) => String::new(),
            Err(errors) => errors.to_string(),
        }
    }
}

/// A backend node `name` known only by its InternalIP `ip` (no provider ID, no labels).
pub fn internal_ip_node(name: &str, ip: &str) -> BackendNode {
    BackendNode {
        name: name.into(),
        provider_id: None,
        addresses: vec![NodeAddress {
            kind: NodeAddressKind::InternalIp,
            ip: ip
                .parse::<IpAddr>()
                .unwrap_or_else(|e| panic!("node address {ip}: {e}")),
        }],
        labels: BTreeMap::new(),
    }
}

/// The seeds a seeded plan ≡ apply test runs: the one in `KUBE_LB_PLAN_SEED` (a replay), else
/// `KUBE_LB_PLAN_SCENARIOS` of them (default 200, the short form of 40 under `CI=true`) counted
/// from `first`. A seed that does not parse is a panic naming the variable, never a silent
/// default.
pub fn plan_scenario_seeds(first: u64) -> Vec<u64> {
    let number = |name: &str| {
        std::env::var(name).ok().map(|value| {
            value
                .parse::<u64>()
                .unwrap_or_else(|_| panic!("{name}={value:?} is not a whole number"))
        })
    };
    if let Some(seed) = number("KUBE_LB_PLAN_SEED") {
        return vec![seed];
    }
    let short = std::env::var("CI").is_ok_and(|v| v == "true");
    let count = number("KUBE_LB_PLAN_SCENARIOS").unwrap_or(if short { 40 } else { 200 });
    (first..first.saturating_add(count)).collect()
}

#[cfg(test)]
mod tests {
    use kube_lb_annotations::TrafficPolicy;

    use super::*;

    #[test]
    fn the_default_service_is_one_cluster_policy_port() {
        let spec = ServiceBuilder::new(Cloud::Openstack, "web", "uid-1").spec();
        assert_eq!(spec.service.name, "web");
        assert_eq!(spec.service.uid, "uid-1");
        assert_eq!(spec.ports.len(), 1);
        assert_eq!(spec.ports[0].port, 80);
        assert_eq!(spec.ports[0].node_port, Some(30080));
        assert_eq!(spec.traffic_policy, TrafficPolicy::Cluster);
    }

    #[test]
    fn the_annotation_prefix_is_prepended_to_every_key() {
        let service = ServiceBuilder::new(Cloud::Azure, "web", "uid-1")
            .annotation_prefix("service.beta.kubernetes.io/")
            .annotate("azure-load-balancer-internal", "true")
            .service();
        let annotations = service.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["service.beta.kubernetes.io/azure-load-balancer-internal"]
        );
    }

    #[test]
    fn local_then_cluster_leaves_no_health_check_port() {
        let local = ServiceBuilder::new(Cloud::Tencent, "web", "uid-1").local(32000);
        assert_eq!(
            local.spec().traffic_policy,
            TrafficPolicy::Local {
                health_check_node_port: Some(32000)
            }
        );
        let back = local.cluster();
        assert_eq!(back.spec().traffic_policy, TrafficPolicy::Cluster);
        assert_eq!(back.errors(), "");
    }

    #[test]
    fn a_health_check_port_without_local_is_reported_not_hidden() {
        let mut conflicting = ServiceBuilder::new(Cloud::Tencent, "web", "uid-1");
        conflicting
            .spec
            .insert("healthCheckNodePort".into(), json!(32000));
        assert!(
            conflicting.errors().contains("healthCheckNodePort"),
            "{}",
            conflicting.errors()
        );
    }

    #[test]
    fn ports_and_source_ranges_can_be_built_one_by_one() {
        let spec = ServiceBuilder::new(Cloud::Openstack, "web", "uid-1")
            .without_ports()
            .add_port("http", 80, "TCP", 30080)
            .add_port("dns", 53, "UDP", 30053)
            .add_source_range("10.0.0.0/8")
            .add_source_range("192.168.0.0/16")
            .spec();
        let ports: Vec<(u16, Option<u16>)> =
            spec.ports.iter().map(|p| (p.port, p.node_port)).collect();
        assert_eq!(ports, [(80, Some(30080)), (53, Some(30053))]);
        let service = ServiceBuilder::new(Cloud::Aws, "web", "uid-1")
            .add_source_range("10.0.0.0/8")
            .add_source_range("192.168.0.0/16")
            .service();
        assert_eq!(
            service.spec.unwrap_or_default().load_balancer_source_ranges,
            Some(vec!["10.0.0.0/8".to_string(), "192.168.0.0/16".to_string()])
        );
    }

    #[test]
    fn a_removed_annotation_is_gone() {
        let service = ServiceBuilder::new(Cloud::Aws, "web", "uid-1")
            .annotation_prefix("service.beta.kubernetes.io/aws-load-balancer-")
            .annotate("type", "nlb")
            .annotate("internal", "true")
            .remove_annotation("type")
            .service();
        let annotations = service.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            ["service.beta.kubernetes.io/aws-load-balancer-internal"]
        );
    }

    #[test]
    fn internal_ip_node_carries_its_address() {
        let node = internal_ip_node("node-1", "10.0.0.101");
        assert_eq!(node.addresses[0].kind, NodeAddressKind::InternalIp);
        assert_eq!(node.addresses[0].ip.to_string(), "10.0.0.101");
        assert_eq!(node.provider_id, None);
    }
}

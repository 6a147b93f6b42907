//! Which nodes a load balancer forwards to. Pure functions over Nodes and EndpointSlices,
//! following the upstream service controller's rules.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_annotations::{LoadBalancerSpec, TrafficPolicy};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, NodeAddress};

/// Nodes carrying this label (with any value but `false`) are never load-balancer backends.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The cluster autoscaler taints nodes it is about to remove.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
/// EndpointSlices name their Service with this label.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Why a node is not a backend of any load balancer; `None` when it is eligible.
pub fn ineligibility(node: &Node) -> Option<&'static str> {
    if node.metadata.deletion_timestamp.is_some() {
        return Some("being deleted");
    }
    let labels = node.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get(EXCLUDE_LABEL))
        .is_some_and(|value| value != "false")
    {
        return Some("excluded by label");
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    if taints.iter().any(|t| t.key == TO_BE_DELETED_TAINT) {
        return Some("to be deleted by the cluster autoscaler");
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Some("not Ready");
    }
    None
}

/// The provider-facing view of a node.
pub fn backend_node(node: &Node) -> BackendNode {
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
        .iter()
        .filter_map(|a| {
            let kind = match a.type_.as_str() {
                "InternalIP" => NodeAddressKind::InternalIp,
                "ExternalIP" => NodeAddressKind::ExternalIp,
                _ => return None,
            };
            let ip: IpAddr = a.address.parse().ok()?;
            Some(NodeAddress { kind, ip })
        })
        .collect();
    BackendNode {
        name: node.metadata.name.clone().unwrap_or_default(),
        provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
        addresses,
        labels: node.metadata.labels.clone().unwrap_or_default(),
    }
}

/// Every eligible node, sorted by name.
pub fn eligible_nodes<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> Vec<BackendNode> {
    let mut out: Vec<BackendNode> = nodes
        .into_iter()
        .filter(|n| ineligibility(n).is_none())
        .map(backend_node)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// A fingerprint of the eligible node set; when it changes every load balancer must be
/// re-synced, when it does not (heartbeats, condition timestamps) nothing needs doing.
pub fn node_set_fingerprint(nodes: &[BackendNode]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for node in nodes {
        node.name.hash(&mut hasher);
        node.provider_id.hash(&mut hasher);
        node.addresses.hash(&mut hasher);
        node.labels.hash(&mut hasher);
    }
    hasher.finish()
}

/// Names of nodes hosting at least one ready endpoint of the Service `namespace/name`.
pub fn nodes_with_ready_endpoints<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    namespace: &str,
    name: &str,
) -> BTreeSet<String> {
    slices
        .into_iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(String::as_str)
                == Some(name)
        })
        .flat_map(|s| s.endpoints.iter())
        // An absent `ready` means unknown, which consumers must treat as ready.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
        .filter_map(|e| e.node_name.clone())
        .collect()
}

/// The backends for `spec`: every eligible node, or for `externalTrafficPolicy: Local` only
/// those with a ready local endpoint, then narrowed by the provider's own filter.
pub fn select_backends<'a>(
    spec: &LoadBalancerSpec,
    eligible: &[BackendNode],
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    provider_accepts: impl Fn(&BackendNode) -> bool,
) -> Vec<BackendNode> {
    let local: Option<BTreeSet<String>> = match spec.traffic_policy {
        TrafficPolicy::Local { .. } => Some(nodes_with_ready_endpoints(
            slices,
            &spec.service.namespace,
            &spec.service.name,
        )),
        TrafficPolicy::Cluster => None,
    };
    eligible
        .iter()
        .filter(|n| local.as_ref().is_none_or(|names| names.contains(&n.name)))
        .filter(|n| provider_accepts(n))
        .cloned()
        .collect()
}

/// The names of `nodes`, for log lines and tests.
pub fn names(nodes: &[BackendNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        NodeAddress as K8sAddr, NodeCondition, NodeSpec, NodeStatus, Taint,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::controller::testing::spec_for;

    struct NodeB(Node);

    fn node(name: &str) -> NodeB {
        NodeB(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                addresses: Some(vec![K8sAddr {
                    type_: "InternalIP".into(),
                    address: "10.0.0.1".into(),
                }]),
                ..Default::default()
            }),
        })
    }

    impl NodeB {
        fn label(mut self, k: &str, v: &str) -> Self {
            self.0
                .metadata
                .labels
                .get_or_insert_default()
                .insert(k.into(), v.into());
            self
        }
        fn taint(mut self, key: &str) -> Self {
            if let Some(spec) = self.0.spec.as_mut() {
                spec.taints.get_or_insert_default().push(Taint {
                    key: key.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                });
            }
            self
        }
        fn not_ready(mut self) -> Self {
            if let Some(status) = self.0.status.as_mut() {
                status.conditions = Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "False".into(),
                    ..Default::default()
                }]);
            }
            self
        }
        fn deleting(mut self) -> Self {
            self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            self
        }
    }

    #[test]
    fn node_filter_follows_upstream() {
        let cases = [
            (node("plain"), None),
            (
                node("excluded").label(EXCLUDE_LABEL, ""),
                Some("excluded by label"),
            ),
            (
                node("excluded-true").label(EXCLUDE_LABEL, "true"),
                Some("excluded by label"),
            ),
            (node("not-excluded").label(EXCLUDE_LABEL, "false"), None),
            (
                node("tainted").taint(TO_BE_DELETED_TAINT),
                Some("to be deleted by the cluster autoscaler"),
            ),
            (node("other-taint").taint("dedicated"), None),
            (node("down").not_ready(), Some("not Ready")),
            (node("gone").deleting(), Some("being deleted")),
        ];
        for (n, want) in cases {
            assert_eq!(ineligibility(&n.0), want, "{:?}", n.0.metadata.name);
        }
    }

    #[test]
    fn backend_node_reads_addresses_and_provider_id() {
        let mut n = node("n1").label("zone", "a").0;
        if let Some(spec) = n.spec.as_mut() {
            spec.provider_id = Some("aws:///us-east-1a/i-1".into());
        }
        let b = backend_node(&n);
        assert_eq!(b.internal_ip(), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(b.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
        assert_eq!(b.labels.get("zone").map(String::as_str), Some("a"));
    }

    fn slice(service: &str, endpoints: &[(&str, Option<bool>)]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{service}-x")),
                namespace: Some("default".into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: endpoints
                .iter()
                .map(|(node, ready)| Endpoint {
                    addresses: vec!["10.1.0.1".into()],
                    node_name: Some((*node).into()),
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: None,
        }
    }

    #[test]
    fn backend_selection_by_traffic_policy() {
        let nodes = eligible_nodes(&[node("b").0, node("a").0, node("c").not_ready().0]);
        assert_eq!(names(&nodes), ["a", "b"], "sorted, not-ready dropped");
        let slices = [
            slice("web", &[("a", Some(true)), ("b", Some(false))]),
            slice("other", &[("b", Some(true))]),
        ];
        let cluster = spec_for("web", false);
        let local = spec_for("web", true);
        let cases: [(&LoadBalancerSpec, Vec<&str>); 2] =
            [(&cluster, vec!["a", "b"]), (&local, vec!["a"])];
        for (spec, want) in cases {
            let got = select_backends(spec, &nodes, &slices, |_| true);
            assert_eq!(names(&got), want, "{:?}", spec.traffic_policy);
        }
        // The provider's filter narrows further.
        let got = select_backends(&cluster, &nodes, &slices, |n| n.name != "a");
        assert_eq!(names(&got), ["b"]);
    }

    #[test]
    fn unknown_readiness_counts_as_ready() {
        let slices = [slice("web", &[("a", None)])];
        assert_eq!(
            nodes_with_ready_endpoints(&slices, "default", "web"),
            BTreeSet::from(["a".to_string()])
        );
        assert!(nodes_with_ready_endpoints(&slices, "other-ns", "web").is_empty());
    }

    #[test]
    fn fingerprint_changes_only_with_relevant_fields() {
        let base = eligible_nodes(&[node("a").0]);
        let same = eligible_nodes(&[node("a").0]);
        let relabelled = eligible_nodes(&[node("a").label("x", "y").0]);
        assert_eq!(node_set_fingerprint(&base), node_set_fingerprint(&same));
        assert_ne!(
            node_set_fingerprint(&base),
            node_set_fingerprint(&relabelled)
        );
        assert_ne!(node_set_fingerprint(&base), node_set_fingerprint(&[]));
    }
}

//! Which nodes a load balancer forwards to, and which node changes matter. Pure functions over
//! Nodes and EndpointSlices, following the upstream service controller's rules, plus two of
//! our own: a readiness grace period, and the per-cloud list of node labels a provider reads.
//!
//! The backends handed to a provider carry only the node fields some provider reads (name,
//! provider ID, addresses, and the labels [`labels_read`] names). The fingerprints that decide
//! whether a load balancer needs an `ensure` are taken over exactly that view, so a change the
//! view does not show (an unrelated label, a heartbeat, a condition timestamp) cannot reach a
//! provider, and every change the view does show is seen.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube_lb_annotations::{Cloud, LoadBalancerSpec, TrafficPolicy};
use kube_lb_provider_core::eligibility::{
    self, Ineligible, NodeFacts, NodeReadiness, ServiceFacts,
};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{BackendNode, NodeAddress};

pub use kube_lb_provider_core::eligibility::{EXCLUDE_LABEL, TO_BE_DELETED_TAINT};
/// EndpointSlices name their Service with this label.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The zone labels, current and deprecated: the GCP provider places a node without a `gce://`
/// provider ID in the zone they name.
pub const ZONE_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
];

/// The moment and the rule node readiness is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    /// The current time (wall clock: it is compared with condition timestamps).
    pub now: Timestamp,
    /// How long a node that was Ready may report NotReady or Unknown and stay a backend.
    pub grace: Duration,
}

impl Readiness {
    /// The rule with `grace`, judged now.
    pub fn now(grace: Duration) -> Self {
        Self {
            now: Timestamp::now(),
            grace,
        }
    }

    /// When a node whose Ready condition left `True` at `since` stops being a backend.
    fn grace_end(&self, since: Timestamp) -> Timestamp {
        // Overflow needs a grace of centuries: treat it as "never".
        since.checked_add(self.grace).unwrap_or(Timestamp::MAX)
    }
}

/// The state of a node's Ready condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadyState {
    Ready,
    /// NotReady or Unknown since the time given, when known.
    NotReady(Option<Timestamp>),
}

fn ready_state(node: &Node) -> ReadyState {
    let condition = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "Ready");
    match condition {
        Some(c) if c.status == "True" => ReadyState::Ready,
        Some(c) => ReadyState::NotReady(c.last_transition_time.as_ref().map(|t| t.0)),
        None => ReadyState::NotReady(None),
    }
}

/// Why a node is not a backend of any load balancer at the moment `readiness` describes;
/// `None` when it is eligible.
///
/// Deletion, the exclusion label and the autoscaler's taint act at once, as upstream. Readiness
/// acts only after the grace period: a node whose Ready condition went to False or Unknown
/// less than `grace` ago (its `lastTransitionTime`) stays a backend, so a kubelet restart or a
/// missed heartbeat window changes nothing; the clouds' own health checks stop traffic to a
/// node that really is down within about the same time. A node that comes back is a backend
/// again at once: the health checks gate it until it answers, and it can be removed again only
/// after another full grace period, so a flapping node costs at most one removal and one
/// addition per grace period. A NotReady condition without a transition time (or no Ready
/// condition at all) cannot be placed in time and is treated as expired.
pub fn ineligibility(node: &Node, readiness: &Readiness) -> Option<&'static str> {
    eligibility::ineligibility(&node_facts(node, readiness), None).map(Ineligible::as_str)
}

/// What the shared rule ([`eligibility::ineligibility`]) reads from `node`, its readiness
/// judged with the grace period at the moment `readiness` describes.
fn node_facts<'a>(node: &'a Node, readiness: &Readiness) -> NodeFacts<'a> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    NodeFacts {
        being_deleted: node.metadata.deletion_timestamp.is_some(),
        exclude_label: node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(EXCLUDE_LABEL))
            .map(String::as_str),
        autoscaler_removing: taints.iter().any(|t| t.key == TO_BE_DELETED_TAINT),
        readiness: match ready_state(node) {
            ReadyState::Ready => NodeReadiness::Ready,
            // A transition time in the future (clock skew) counts as "just now".
            ReadyState::NotReady(Some(since)) if readiness.now < readiness.grace_end(since) => {
                NodeReadiness::WithinGrace
            }
            ReadyState::NotReady(Some(_)) => NodeReadiness::GraceExpired,
            ReadyState::NotReady(None) => NodeReadiness::NotReady,
        },
    }
}

/// When `node`, eligible now only thanks to the readiness grace, stops being eligible; `None`
/// when it is Ready or already ineligible.
pub fn grace_ends(node: &Node, readiness: &Readiness) -> Option<Timestamp> {
    match ready_state(node) {
        ReadyState::NotReady(Some(since)) if ineligibility(node, readiness).is_none() => {
            Some(readiness.grace_end(since))
        }
        _ => None,
    }
}

/// The provider-facing view of a node, with every label (see [`LabelsRead::project`]).
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

/// Every node eligible at the moment `readiness` describes, sorted by name.
pub fn eligible_nodes<'a>(
    nodes: impl IntoIterator<Item = &'a Node>,
    readiness: &Readiness,
) -> Vec<BackendNode> {
    let mut out: Vec<BackendNode> = nodes
        .into_iter()
        .filter(|n| ineligibility(n, readiness).is_none())
        .map(backend_node)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Which node labels a provider reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelsRead {
    /// Any label may matter (a cloud whose provider this repository does not have).
    All,
    /// Only these keys.
    Only(BTreeSet<String>),
}

impl LabelsRead {
    fn none() -> Self {
        Self::Only(BTreeSet::new())
    }

    fn zones() -> Self {
        Self::Only(ZONE_LABELS.iter().map(|k| (*k).to_string()).collect())
    }

    /// Whether `key` is read.
    pub fn reads(&self, key: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(keys) => keys.contains(key),
        }
    }

    /// `node` with only the labels that are read.
    pub fn project(&self, node: &BackendNode) -> BackendNode {
        BackendNode {
            labels: node
                .labels
                .iter()
                .filter(|(k, _)| self.reads(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..node.clone()
        }
    }
}

/// The labels `cloud`'s provider reads whatever the Service says; `None` when they depend on
/// the Service (AWS `target-node-labels`).
fn labels_read_by_cloud(cloud: Cloud) -> Option<LabelsRead> {
    match cloud {
        // Local forwards on this machine; Azure addresses backends by InternalIP.
        Cloud::Local | Cloud::Azure => Some(LabelsRead::none()),
        // Instance groups are per zone; the zone comes from the provider ID, else the labels.
        Cloud::Gcp => Some(LabelsRead::zones()),
        Cloud::Aws => None,
        Cloud::Openstack | Cloud::Tencent | Cloud::Baidu => Some(LabelsRead::All),
    }
}

/// The node labels the provider of `spec` reads for it. Keep in step with the providers: a
/// provider that starts reading another label must be listed here, or changes of that label
/// would not reach it (and it would not even see the label).
pub fn labels_read(spec: &LoadBalancerSpec) -> LabelsRead {
    labels_read_by_cloud(spec.cloud).unwrap_or_else(|| {
        // AWS: instances come from provider IDs; labels only filter (`target-node-labels`).
        LabelsRead::Only(
            spec.provider
                .as_aws()
                .map(|aws| aws.target_node_labels.keys().cloned().collect())
                .unwrap_or_default(),
        )
    })
}

/// The labels `cloud`'s provider may read for any of `services`: a superset of
/// [`labels_read`] over them, taken from the raw annotations (no full parse per Node event).
pub fn labels_read_by_any<'a>(
    cloud: Cloud,
    services: impl IntoIterator<Item = &'a Service>,
) -> LabelsRead {
    labels_read_by_cloud(cloud).unwrap_or_else(|| {
        let key = kube_lb_annotations::keys::aws::TARGET_NODE_LABELS;
        LabelsRead::Only(
            services
                .into_iter()
                .filter_map(|s| s.annotations().get(key))
                .flat_map(|raw| raw.split(','))
                .filter_map(|item| item.split('=').next())
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect(),
        )
    })
}

/// What a Node change is judged by: every eligible node as a provider could see it, and when
/// the next readiness grace runs out (a change with no Node event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSetView {
    /// Eligible nodes, sorted by name, with only the labels read.
    pub nodes: Vec<BackendNode>,
    /// The earliest end of a running readiness grace.
    pub next_grace_end: Option<Timestamp>,
}

impl NodeSetView {
    /// The view of `nodes` at the moment `readiness` describes.
    pub fn of<'a>(
        nodes: impl IntoIterator<Item = &'a Node> + Clone,
        readiness: &Readiness,
        labels: &LabelsRead,
    ) -> Self {
        Self {
            nodes: eligible_nodes(nodes.clone(), readiness)
                .iter()
                .map(|n| labels.project(n))
                .collect(),
            next_grace_end: nodes
                .into_iter()
                .filter_map(|n| grace_ends(n, readiness))
                .min(),
        }
    }

    /// A fingerprint of the nodes: equal fingerprints, nothing any load balancer depends on
    /// changed.
    pub fn fingerprint(&self) -> u64 {
        node_set_fingerprint(&self.nodes)
    }
}

/// A fingerprint of a node set as providers see it (names, provider IDs, addresses, labels).
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

/// For every Service that has EndpointSlices, keyed `(namespace, name)`, the nodes hosting at
/// least one ready endpoint of it ([`nodes_with_ready_endpoints`] for all Services in one pass).
pub fn ready_endpoint_nodes_by_service<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for slice in slices {
        let (Some(namespace), Some(name)) = (
            slice.metadata.namespace.as_ref(),
            slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL)),
        ) else {
            continue;
        };
        let nodes = out.entry((namespace.clone(), name.clone())).or_default();
        nodes.extend(
            slice
                .endpoints
                .iter()
                .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
                .filter_map(|e| e.node_name.clone()),
        );
    }
    out.retain(|_, nodes| !nodes.is_empty());
    out
}

/// Whether where `service`'s endpoints run decides its backends on `cloud`: a Local Service
/// whose load balancer is given only the nodes with a ready endpoint
/// ([`LoadBalancerSpec::local_binds_only_nodes_with_endpoints`]). Only then does an endpoint
/// moving between nodes call for a sync; otherwise the health check on the health-check node
/// port follows it and the cloud is not touched. A Service that does not parse is not synced
/// for its endpoints (its sync has already reported why).
pub fn backends_follow_endpoints(service: &Service, cloud: Cloud) -> bool {
    let local = service
        .spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local");
    local
        && kube_lb_annotations::parse(cloud, service)
            .is_ok_and(|parsed| parsed.spec.local_binds_only_nodes_with_endpoints())
}

/// The backends for `spec`: every eligible node, or for `externalTrafficPolicy: Local` where
/// the cloud binds only nodes with endpoints, those with a ready local endpoint; then narrowed
/// by the provider's own filter.
pub fn select_backends<'a>(
    spec: &LoadBalancerSpec,
    eligible: &[BackendNode],
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    provider_accepts: impl Fn(&BackendNode) -> bool,
) -> Vec<BackendNode> {
    let local: Option<BTreeSet<String>> = match spec.traffic_policy {
        TrafficPolicy::Local { .. } if spec.local_binds_only_nodes_with_endpoints() => Some(
            nodes_with_ready_endpoints(slices, &spec.service.namespace, &spec.service.name),
        ),
        TrafficPolicy::Local { .. } | TrafficPolicy::Cluster => None,
    };
    // `eligible` passed the node's part of the rule already; this is the Service's part.
    eligible
        .iter()
        .filter(|n| {
            let facts = ServiceFacts {
                needs_local_endpoint: local.is_some(),
                has_local_endpoint: local.as_ref().is_some_and(|names| names.contains(&n.name)),
                provider_accepts: provider_accepts(n),
            };
            facts.ineligibility().is_none()
        })
        .cloned()
        .collect()
}

/// What the provider is given for `spec`: [`select_backends`] (the provider's filter sees every
/// label), each node then cut down to the labels the provider reads ([`labels_read`]).
pub fn provider_backends<'a>(
    spec: &LoadBalancerSpec,
    eligible: &[BackendNode],
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
    provider_accepts: impl Fn(&BackendNode) -> bool,
) -> Vec<BackendNode> {
    let labels = labels_read(spec);
    select_backends(spec, eligible, slices, provider_accepts)
        .iter()
        .map(|n| labels.project(n))
        .collect()
}

/// The names of `nodes`, for log lines and tests.
pub fn names(nodes: &[BackendNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.name.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        NodeAddress as K8sAddr, NodeCondition, NodeSpec, NodeStatus, ServiceSpec, Taint,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::SignedDuration;

    use super::*;
    use crate::controller::testing::spec_for;

    const GRACE: Duration = Duration::from_secs(60);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    /// Judged at t = 0 with a 60 s grace.
    fn readiness() -> Readiness {
        Readiness {
            now: at(0),
            grace: GRACE,
        }
    }

    #[derive(Clone)]
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
                    last_transition_time: Some(Time(at(-3600))),
                    last_heartbeat_time: Some(Time(at(-10))),
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
        /// The Ready condition set to `status`, changed at `since` (seconds from t = 0).
        fn ready_condition(mut self, status: &str, since: Option<i64>) -> Self {
            if let Some(s) = self.0.status.as_mut() {
                s.conditions = Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: status.into(),
                    last_transition_time: since.map(|t| Time(at(t))),
                    ..Default::default()
                }]);
            }
            self
        }
        fn not_ready(self) -> Self {
            self.ready_condition("False", None)
        }
        fn heartbeat(mut self, secs: i64) -> Self {
            if let Some(c) = self
                .0
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
                .and_then(|c| c.first_mut())
            {
                c.last_heartbeat_time = Some(Time(at(secs)));
            }
            self
        }
        fn no_conditions(mut self) -> Self {
            if let Some(s) = self.0.status.as_mut() {
                s.conditions = None;
            }
            self
        }
        fn deleting(mut self) -> Self {
            self.0.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
            self
        }
        fn provider_id(mut self, id: &str) -> Self {
            if let Some(spec) = self.0.spec.as_mut() {
                spec.provider_id = Some(id.into());
            }
            self
        }
        fn address(mut self, kind: &str, ip: &str) -> Self {
            if let Some(s) = self.0.status.as_mut() {
                s.addresses = Some(vec![K8sAddr {
                    type_: kind.into(),
                    address: ip.into(),
                }]);
            }
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
            assert_eq!(
                ineligibility(&n.0, &readiness()),
                want,
                "{:?}",
                n.0.metadata.name
            );
        }
    }

    #[test]
    fn readiness_grace() {
        // (Ready status, transition time in seconds from now, grace, eligible, grace ends at)
        type Case = (&'static str, Option<i64>, u64, bool, Option<i64>);
        let cases: [Case; 11] = [
            ("True", Some(-5), 60, true, None),
            ("False", Some(-5), 60, true, Some(55)),
            ("Unknown", Some(-5), 60, true, Some(55)),
            ("False", Some(-59), 60, true, Some(1)),
            // The grace is half-open: at exactly 60 s the node is out.
            ("False", Some(-60), 60, false, None),
            ("Unknown", Some(-3600), 60, false, None),
            // A transition time from a clock ahead of ours counts as "just now" or later.
            ("False", Some(30), 60, true, Some(90)),
            // No time: cannot be placed, treated as expired.
            ("False", None, 60, false, None),
            // A zero grace is the old rule: NotReady is out at once.
            ("False", Some(0), 0, false, None),
            ("True", None, 0, true, None),
            ("Unknown", Some(-1), 3600, true, Some(3599)),
        ];
        for (status, since, grace, eligible, ends) in cases {
            let n = node("n").ready_condition(status, since).0;
            let rule = Readiness {
                now: at(0),
                grace: Duration::from_secs(grace),
            };
            let case = format!("{status} since {since:?}, grace {grace}s");
            assert_eq!(ineligibility(&n, &rule).is_none(), eligible, "{case}");
            assert_eq!(grace_ends(&n, &rule), ends.map(at), "{case}");
        }
        // A node in its grace that is excluded for another reason has no grace to end.
        let excluded = node("n")
            .ready_condition("False", Some(-5))
            .label(EXCLUDE_LABEL, "true");
        assert_eq!(grace_ends(&excluded.0, &readiness()), None);
        assert_eq!(
            ineligibility(&node("n").no_conditions().0, &readiness()),
            Some("not Ready")
        );
        let later = Readiness {
            now: at(0).checked_add(SignedDuration::from_secs(61)).unwrap(),
            grace: GRACE,
        };
        let flapped = node("n").ready_condition("False", Some(0)).0;
        assert_eq!(ineligibility(&flapped, &readiness()), None);
        assert_eq!(
            ineligibility(&flapped, &later),
            Some("not Ready for longer than the grace period")
        );
    }

    #[test]
    fn backend_node_reads_addresses_and_provider_id() {
        let n = node("n1")
            .label("zone", "a")
            .provider_id("aws:///us-east-1a/i-1")
            .0;
        let b = backend_node(&n);
        assert_eq!(b.internal_ip(), Some("10.0.0.1".parse().unwrap()));
        assert_eq!(b.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
        assert_eq!(b.labels.get("zone").map(String::as_str), Some("a"));
    }

    fn service_with_target_labels(value: Option<&str>) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                annotations: value.map(|v| {
                    [(
                        kube_lb_annotations::keys::aws::TARGET_NODE_LABELS.to_string(),
                        v.to_string(),
                    )]
                    .into()
                }),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn keys(list: &[&str]) -> LabelsRead {
        LabelsRead::Only(list.iter().map(|k| (*k).to_string()).collect())
    }

    #[test]
    fn labels_read_per_cloud() {
        let aws = |value| {
            kube_lb_annotations::parse(Cloud::Aws, &service_with_target_labels(value))
                .unwrap()
                .spec
        };
        let mut gcp = spec_for("web", false);
        gcp.cloud = Cloud::Gcp;
        let mut azure = spec_for("web", false);
        azure.cloud = Cloud::Azure;
        let mut openstack = spec_for("web", false);
        openstack.cloud = Cloud::Openstack;
        let cases = [
            (spec_for("web", false), keys(&[])),
            (azure, keys(&[])),
            (gcp, keys(&ZONE_LABELS)),
            (aws(None), keys(&[])),
            (aws(Some("pool=lb, gpu")), keys(&["gpu", "pool"])),
            (openstack, LabelsRead::All),
        ];
        for (spec, want) in cases {
            assert_eq!(labels_read(&spec), want, "{:?}", spec.cloud);
        }
    }

    #[test]
    fn labels_read_by_any_service_is_a_superset() {
        let services = [
            service_with_target_labels(Some(" pool=lb , gpu,=x, a=b=c")),
            service_with_target_labels(Some("team")),
            service_with_target_labels(None),
        ];
        assert_eq!(
            labels_read_by_any(Cloud::Aws, &services),
            keys(&["a", "gpu", "pool", "team"])
        );
        assert_eq!(labels_read_by_any(Cloud::Aws, &[]), keys(&[]));
        assert_eq!(
            labels_read_by_any(Cloud::Gcp, &services),
            keys(&ZONE_LABELS)
        );
        assert_eq!(labels_read_by_any(Cloud::Local, &services), keys(&[]));
    }

    /// Which Node changes change what some provider could see (and so re-sync load balancers).
    #[test]
    fn relevant_node_changes() {
        let base = || {
            node("a")
                .label("kubernetes.io/hostname", "a")
                .label(ZONE_LABELS[0], "z1")
                .label("pool", "lb")
                .provider_id("gce://p/z1/a")
        };
        let aws_keys = keys(&["pool"]);
        let gcp_keys = keys(&ZONE_LABELS);
        let none = keys(&[]);
        // (change, labels read, relevant)
        let cases: Vec<(&str, NodeB, &LabelsRead, bool)> = vec![
            ("nothing", base(), &none, false),
            ("unrelated label", base().label("team", "x"), &none, false),
            (
                "unrelated label (gcp)",
                base().label("team", "x"),
                &gcp_keys,
                false,
            ),
            (
                "unrelated label (aws)",
                base().label("team", "x"),
                &aws_keys,
                false,
            ),
            ("heartbeat", base().heartbeat(-1), &gcp_keys, false),
            (
                "Ready flap within grace",
                base().ready_condition("False", Some(-30)),
                &none,
                false,
            ),
            (
                "Unknown within grace",
                base().ready_condition("Unknown", Some(-1)),
                &gcp_keys,
                false,
            ),
            (
                "Ready again with a new transition time",
                base().ready_condition("True", Some(-1)),
                &none,
                false,
            ),
            (
                "NotReady past grace",
                base().ready_condition("False", Some(-61)),
                &none,
                true,
            ),
            (
                "zone label (gcp)",
                base().label(ZONE_LABELS[0], "z2"),
                &gcp_keys,
                true,
            ),
            (
                "zone label (local)",
                base().label(ZONE_LABELS[0], "z2"),
                &none,
                false,
            ),
            (
                "target label (aws)",
                base().label("pool", "other"),
                &aws_keys,
                true,
            ),
            (
                "target label (gcp)",
                base().label("pool", "other"),
                &gcp_keys,
                false,
            ),
            (
                "provider ID",
                base().provider_id("gce://p/z1/b"),
                &none,
                true,
            ),
            (
                "InternalIP",
                base().address("InternalIP", "10.0.0.2"),
                &none,
                true,
            ),
            (
                "ExternalIP",
                base().address("ExternalIP", "10.0.0.1"),
                &none,
                true,
            ),
            ("excluded", base().label(EXCLUDE_LABEL, "true"), &none, true),
            (
                "exclusion lifted",
                base().label(EXCLUDE_LABEL, "false"),
                &none,
                false,
            ),
            (
                "autoscaler taint",
                base().taint(TO_BE_DELETED_TAINT),
                &none,
                true,
            ),
            ("other taint", base().taint("dedicated"), &none, false),
            ("being deleted", base().deleting(), &none, true),
            (
                "All labels (openstack)",
                base().label("team", "x"),
                &LabelsRead::All,
                true,
            ),
        ];
        for (what, changed, labels, relevant) in cases {
            let before = NodeSetView::of([&base().0, &node("b").0], &readiness(), labels);
            let after = NodeSetView::of([&changed.0, &node("b").0], &readiness(), labels);
            assert_eq!(
                before.fingerprint() != after.fingerprint(),
                relevant,
                "{what}"
            );
        }
        let empty = NodeSetView::of([], &readiness(), &none);
        let one = NodeSetView::of([&base().0], &readiness(), &none);
        assert_ne!(empty.fingerprint(), one.fingerprint(), "a node joined");
    }

    #[test]
    fn the_view_knows_when_the_next_grace_ends() {
        let nodes = [
            node("a").0,
            node("b").ready_condition("False", Some(-50)).0,
            node("c").ready_condition("Unknown", Some(-10)).0,
            node("d").ready_condition("False", Some(-100)).0,
        ];
        let view = NodeSetView::of(&nodes, &readiness(), &keys(&[]));
        assert_eq!(names(&view.nodes), ["a", "b", "c"]);
        assert_eq!(view.next_grace_end, Some(at(10)));
        let ready = NodeSetView::of(&nodes[..1], &readiness(), &keys(&[]));
        assert_eq!(ready.next_grace_end, None);
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
        let nodes = eligible_nodes(
            &[node("b").0, node("a").0, node("c").not_ready().0],
            &readiness(),
        );
        assert_eq!(names(&nodes), ["a", "b"], "sorted, not-ready dropped");
        let slices = [
            slice("web", &[("a", Some(true)), ("b", Some(false))]),
            slice("other", &[("b", Some(true))]),
        ];
        let cluster = spec_for("web", false);
        // Local as upstream registers it: every eligible node, the health-check node port
        // takes the ones without an endpoint out (only TKE's opt-in narrows it, below).
        let local = spec_for("web", true);
        let cases: [(&LoadBalancerSpec, Vec<&str>); 2] =
            [(&cluster, vec!["a", "b"]), (&local, vec!["a", "b"])];
        for (spec, want) in cases {
            let got = select_backends(spec, &nodes, &slices, |_| true);
            assert_eq!(names(&got), want, "{:?}", spec.traffic_policy);
        }
        // The provider's filter narrows further.
        let got = select_backends(&cluster, &nodes, &slices, |n| n.name != "a");
        assert_eq!(names(&got), ["b"]);
    }

    #[test]
    fn tke_binds_every_node_under_local_unless_asked_for_nodes_with_pods() {
        let nodes = eligible_nodes(&[node("a").0, node("b").0], &readiness());
        let slices = [slice("web", &[("a", Some(true))])];
        let tencent = |only_with_pod: Option<&str>| {
            let mut service = Service {
                metadata: ObjectMeta {
                    name: Some("web".into()),
                    namespace: Some("default".into()),
                    uid: Some("uid-web".into()),
                    annotations: only_with_pod.map(|v| {
                        [(
                            kube_lb_annotations::keys::tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD
                                .to_string(),
                            v.to_string(),
                        )]
                        .into()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            service.spec = Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                external_traffic_policy: Some("Local".into()),
                health_check_node_port: Some(32000),
                ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                    port: 80,
                    node_port: Some(30080),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            kube_lb_annotations::parse(kube_lb_annotations::Cloud::Tencent, &service)
                .expect("a valid TKE Service")
                .spec
        };
        let cases = [
            (
                "TKE default: every node, the CLB health check decides",
                None,
                vec!["a", "b"],
            ),
            ("asked for nodes with pods", Some("true"), vec!["a"]),
            ("explicitly off", Some("false"), vec!["a", "b"]),
        ];
        for (case, annotation, want) in cases {
            let spec = tencent(annotation);
            let got = select_backends(&spec, &nodes, &slices, |_| true);
            assert_eq!(names(&got), want, "{case}");
        }
    }

    #[test]
    fn providers_see_only_the_labels_they_read() {
        let nodes = eligible_nodes(
            &[node("a").label("pool", "lb").label(ZONE_LABELS[1], "z").0],
            &readiness(),
        );
        let mut gcp = spec_for("web", false);
        gcp.cloud = Cloud::Gcp;
        // The filter sees every label; the provider only what it reads.
        let got = provider_backends(&gcp, &nodes, [], |n| n.labels.contains_key("pool"));
        assert_eq!(names(&got), ["a"]);
        assert_eq!(
            got[0].labels,
            [(ZONE_LABELS[1].to_string(), "z".to_string())].into()
        );
        let local = provider_backends(&spec_for("web", false), &nodes, [], |_| true);
        assert!(local[0].labels.is_empty());
        assert_eq!(local[0].provider_id, nodes[0].provider_id);
        assert_eq!(local[0].addresses, nodes[0].addresses);
    }

    #[test]
    fn ready_endpoint_nodes_grouped_by_service() {
        let mut elsewhere = slice("web", &[("c", Some(true))]);
        elsewhere.metadata.namespace = Some("other".into());
        let slices = [
            slice("web", &[("a", Some(true)), ("b", Some(false))]),
            slice("web", &[("c", None)]),
            slice("idle", &[("a", Some(false))]),
            elsewhere,
        ];
        let key = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        let set = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        let got = ready_endpoint_nodes_by_service(&slices);
        assert_eq!(
            got,
            BTreeMap::from([
                (key("default", "web"), set(&["a", "c"])),
                (key("other", "web"), set(&["c"])),
            ]),
            "no entry for a Service without ready endpoints"
        );
        for ((ns, name), nodes) in &got {
            assert_eq!(&nodes_with_ready_endpoints(&slices, ns, name), nodes);
        }
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
}

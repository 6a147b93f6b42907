//! The one place that reads a [`LoadBalancerSpec`]: it turns the spec, the backend nodes and
//! the provider settings into the desired GCE resources. Spec changes stay contained here.
//!
//! Names follow the upstream GCP provider so load balancers it created are adopted.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_lb_annotations::{
    GcpLoadBalancerType, LoadBalancerSpec, NetworkTier, Protocol, ProviderSpec, Scheme,
    SessionAffinity, TrafficPolicy,
};
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{BackendNode, ProviderError};

use crate::model::{
    Address, BackendService, DEFAULT_TIMING, Firewall, ForwardingRule, HealthCheck,
    HealthCheckKind, InstanceGroup, Refs, RulePorts, TargetPool, merge_ranges,
};

/// Google's L4 health-checker source ranges (upstream `--cloud-provider-gce-lb-src-cidrs`).
pub const HEALTH_CHECK_SOURCE_RANGES: [&str; 4] = [
    "130.211.0.0/22",
    "35.191.0.0/16",
    "209.85.152.0/22",
    "209.85.204.0/22",
];
/// kube-proxy's health port, probed by the shared node health check.
pub const NODE_HEALTH_PORT: u16 = 10256;
/// Path probed by every health check.
pub const HEALTH_PATH: &str = "/healthz";
/// Internal forwarding rules list at most this many ports; more means `allPorts`.
pub const MAX_INTERNAL_PORTS: usize = 5;
/// `spec.loadBalancerClass` values that upstream serves as legacy internal L4.
const INTERNAL_CLASS: &str = "networking.gke.io/l4-regional-internal-legacy";

/// Provider-wide settings the desired state depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Canonical reference builder (project, region, network).
    pub refs: Refs,
    /// The `<cid>` in shared names (sanitised).
    pub cluster_id: String,
    /// The cluster subnetwork (`subnetwork-name`), for internal load balancers.
    pub subnetwork: Option<String>,
    /// The zones of the region the cluster may have nodes in.
    pub zones: Vec<String>,
    /// The zone assumed for nodes that carry no zone (single-zone clusters).
    pub local_zone: Option<String>,
}

/// The traffic firewall name: `k8s-fw-<lb>`.
pub fn firewall_name(lb: &str) -> String {
    format!("k8s-fw-{lb}")
}

/// The shared node health check: `k8s-<cid>-node`.
pub fn shared_health_check_name(cluster_id: &str) -> String {
    format!("k8s-{cluster_id}-node")
}

/// The firewall admitting Google's probes for a health check.
pub fn health_check_firewall_name(kind: HealthCheckKind, health_check: &str, lb: &str) -> String {
    match kind {
        HealthCheckKind::LegacyHttp if health_check == lb => format!("k8s-{lb}-http-hc"),
        HealthCheckKind::LegacyHttp => format!("{health_check}-http-hc"),
        HealthCheckKind::Http => format!("{health_check}-hc"),
    }
}

/// The per-zone instance group shared by internal load balancers: `k8s-ig--<cid>`.
pub fn instance_group_name(cluster_id: &str) -> String {
    if cluster_id.is_empty() {
        "k8s-ig".to_string()
    } else {
        format!("k8s-ig--{cluster_id}")
    }
}

/// Turns a cluster name into a `<cid>` usable inside resource names (lowercase letters,
/// digits and dashes; short enough that `k8s-<cid>-node-http-hc` stays within 63 characters).
pub fn sanitise_cluster_id(cluster: &str) -> String {
    let mut id: String = cluster
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    id.truncate(40);
    id.trim_matches('-').to_string()
}

/// The description upstream writes on per-Service resources.
pub fn service_description(service: &str) -> String {
    serde_json::json!({ "kubernetes.io/service-name": service }).to_string()
}

/// A node's GCE instance: zone and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeInstance {
    /// Zone.
    pub zone: String,
    /// Instance name.
    pub name: String,
}

/// Where a node's VM is: `spec.providerID` `gce://<project>/<zone>/<name>`, else the zone
/// labels and the node name, else the local zone.
pub fn node_instance(node: &BackendNode, local_zone: Option<&str>) -> Option<NodeInstance> {
    if let Some(rest) = node
        .provider_id
        .as_deref()
        .and_then(|p| p.strip_prefix("gce://"))
    {
        let parts: Vec<&str> = rest.split('/').collect();
        if let [_, zone, name] = parts.as_slice()
            && !zone.is_empty()
            && !name.is_empty()
        {
            return Some(NodeInstance {
                zone: zone.to_string(),
                name: name.to_string(),
            });
        }
    }
    let zone = node
        .labels
        .get("topology.kubernetes.io/zone")
        .or_else(|| node.labels.get("failure-domain.beta.kubernetes.io/zone"))
        .map(String::as_str)
        .or(local_zone)?;
    Some(NodeInstance {
        zone: zone.to_string(),
        name: node.name.clone(),
    })
}

/// The instances of `backends`, sorted; nodes whose zone cannot be told are left out.
pub fn node_instances(backends: &[BackendNode], settings: &Settings) -> Vec<NodeInstance> {
    let mut instances: Vec<NodeInstance> = backends
        .iter()
        .filter_map(|node| {
            let instance = node_instance(node, settings.local_zone.as_deref());
            if instance.is_none() {
                tracing::warn!(node = %node.name, "node has no zone; left out of the load balancer");
            }
            instance
        })
        .collect();
    instances.sort();
    instances.dedup();
    instances
}

/// How the load balancer's IP is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpRequest {
    /// No `loadBalancerIP`: keep the current one (reserved as `<lb>`), else let GCE pick.
    Any,
    /// `loadBalancerIP`: a user-reserved static address, or one we reserve as `<lb>`.
    Requested(IpAddr),
}

/// Everything the Service needs, before the IP is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// `a` + UID.
    pub lb: String,
    /// `namespace/name`.
    pub service: String,
    /// Internal (backend service) or external (target pool).
    pub internal: bool,
    /// The IP request.
    pub ip: IpRequest,
    /// The address we reserve as `<lb>` (IP filled in by the planner).
    pub address: Address,
    /// The forwarding rule (IP filled in by the planner).
    pub rule: ForwardingRule,
    /// The traffic firewall (destination filled in by the planner).
    pub firewall: Firewall,
    /// The health check to use.
    pub health_check: HealthCheck,
    /// The firewall admitting the health checkers.
    pub health_check_firewall: Firewall,
    /// External: the target pool.
    pub target_pool: Option<TargetPool>,
    /// Internal: the backend service.
    pub backend_service: Option<BackendService>,
    /// Internal: the instance group of every zone (empty members where no node is).
    pub groups: Vec<InstanceGroup>,
}

/// Maps the spec to the desired resources. `target_tags` are the firewall target tags
/// (configured `node-tags`, or read from the instances).
pub fn desired(
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
    settings: &Settings,
    target_tags: &BTreeSet<String>,
) -> Result<Desired, ProviderError> {
    let refs = &settings.refs;
    let lb = load_balancer_name(&spec.service.uid);
    let service = spec.service.to_string();
    let description = service_description(&service);
    let gcp = match &spec.provider {
        ProviderSpec::Gcp(gcp) => Some(gcp),
        _ => None,
    };
    if gcp.is_some_and(|g| g.regional_backend_service) {
        return Err(ProviderError::ImplementedElsewhere);
    }
    let internal = spec.scheme == Scheme::Internal
        || gcp.is_some_and(|g| g.load_balancer_type == GcpLoadBalancerType::Internal)
        || spec.load_balancer_class.as_deref() == Some(INTERNAL_CLASS);

    let protocols: BTreeSet<Protocol> = spec.ports.iter().map(|p| p.protocol).collect();
    let protocol = match protocols.into_iter().collect::<Vec<_>>().as_slice() {
        [Protocol::Tcp] => "TCP",
        [Protocol::Udp] => "UDP",
        [] => return Err(ProviderError::user("the Service has no ports")),
        [Protocol::Sctp] => {
            return Err(ProviderError::user(
                "GCP L4 load balancers support TCP and UDP ports, not SCTP",
            ));
        }
        _ => {
            return Err(ProviderError::user(
                "GCP L4 load balancers cannot mix protocols on one Service; use one protocol",
            ));
        }
    };
    let mut ports: Vec<u16> = spec.ports.iter().map(|p| p.port).collect();
    ports.sort_unstable();
    ports.dedup();
    // Node ports are not needed: passthrough load balancers deliver to the Service port on the
    // node (the seeds: GCE does not need them), so allocateLoadBalancerNodePorts: false is fine.
    if target_tags.is_empty() {
        return Err(ProviderError::user(
            "no firewall target tags: the node instances carry no network tags; set node-tags in \
             the cloud config",
        ));
    }

    let tier = gcp.and_then(|g| g.network_tier).map(|t| match t {
        NetworkTier::Premium => "PREMIUM".to_string(),
        NetworkTier::Standard => "STANDARD".to_string(),
    });
    let subnetwork = if internal {
        let name = gcp
            .and_then(|g| g.internal_subnet.clone())
            .or_else(|| settings.subnetwork.clone())
            .ok_or_else(|| {
                ProviderError::user(
                    "internal load balancers need a subnet: set the \
                     networking.gke.io/internal-load-balancer-subnet annotation or \
                     subnetwork-name in the cloud config",
                )
            })?;
        Some(refs.subnetwork(&name))
    } else {
        None
    };
    let affinity = match spec.session_affinity {
        SessionAffinity::ClientIP { .. } => "CLIENT_IP",
        SessionAffinity::None => "NONE",
    }
    .to_string();

    // Health check: per-Service on healthCheckNodePort for Local, else the shared node check.
    let hc_kind = if internal {
        HealthCheckKind::Http
    } else {
        HealthCheckKind::LegacyHttp
    };
    let (hc_name, hc_port, hc_description) = match spec.traffic_policy {
        TrafficPolicy::Local {
            health_check_node_port: Some(port),
        } => (lb.clone(), port, description.clone()),
        _ => (
            shared_health_check_name(&settings.cluster_id),
            NODE_HEALTH_PORT,
            serde_json::json!({ "kubernetes.io/cluster-id": settings.cluster_id }).to_string(),
        ),
    };
    let health_check = HealthCheck {
        kind: hc_kind,
        name: hc_name.clone(),
        description: hc_description.clone(),
        port: hc_port,
        path: HEALTH_PATH.to_string(),
        timing: DEFAULT_TIMING,
    };
    let health_check_firewall = Firewall {
        name: health_check_firewall_name(hc_kind, &hc_name, &lb),
        description: hc_description,
        network: refs.network(),
        allowed: vec![("tcp".to_string(), vec![(hc_port, hc_port)])],
        source_ranges: HEALTH_CHECK_SOURCE_RANGES
            .iter()
            .map(|s| s.to_string())
            .collect(),
        destination_ranges: BTreeSet::new(),
        target_tags: target_tags.clone(),
    };

    let source_ranges: BTreeSet<String> = if spec.source_ranges.allows_all() {
        BTreeSet::from(["0.0.0.0/0".to_string()])
    } else {
        spec.source_ranges
            .cidrs
            .iter()
            .map(|c| c.trunc().to_string())
            .collect()
    };
    let firewall = Firewall {
        name: firewall_name(&lb),
        description: String::new(),
        network: refs.network(),
        allowed: vec![(
            protocol.to_ascii_lowercase(),
            merge_ranges(ports.iter().map(|p| (*p, *p)).collect()),
        )],
        source_ranges,
        destination_ranges: BTreeSet::new(),
        target_tags: target_tags.clone(),
    };

    let instances = node_instances(backends, settings);
    let instance_links: BTreeSet<String> = instances
        .iter()
        .map(|i| refs.zonal(&i.zone, "instances", &i.name))
        .collect();
    let hc_link = refs.global(hc_kind.collection(), &hc_name);

    let (target_pool, backend_service, groups, rule_ports, target, backend) = if internal {
        let group_name = instance_group_name(&settings.cluster_id);
        let mut by_zone: BTreeMap<String, BTreeSet<String>> = settings
            .zones
            .iter()
            .map(|z| (z.clone(), BTreeSet::new()))
            .collect();
        for instance in &instances {
            by_zone
                .entry(instance.zone.clone())
                .or_default()
                .insert(refs.zonal(&instance.zone, "instances", &instance.name));
        }
        let groups: Vec<InstanceGroup> = by_zone
            .into_iter()
            .map(|(zone, members)| InstanceGroup {
                name: group_name.clone(),
                zone,
                members,
            })
            .collect();
        let backend_service = BackendService {
            name: lb.clone(),
            description: description.clone(),
            protocol: protocol.to_string(),
            health_checks: BTreeSet::from([hc_link]),
            groups: groups
                .iter()
                .filter(|g| !g.members.is_empty())
                .map(|g| refs.zonal(&g.zone, "instanceGroups", &g.name))
                .collect(),
            session_affinity: affinity,
            fingerprint: None,
        };
        let rule_ports = if ports.len() > MAX_INTERNAL_PORTS {
            RulePorts::All
        } else {
            RulePorts::List(ports.iter().copied().collect())
        };
        let backend = refs.regional("backendServices", &lb);
        (
            None,
            Some(backend_service),
            groups,
            rule_ports,
            None,
            Some(backend),
        )
    } else {
        let pool = TargetPool {
            name: lb.clone(),
            description: description.clone(),
            instances: instance_links,
            health_checks: BTreeSet::from([hc_link]),
            session_affinity: affinity,
        };
        let low = ports.first().copied().unwrap_or_default();
        let high = ports.last().copied().unwrap_or_default();
        let target = refs.regional("targetPools", &lb);
        (
            Some(pool),
            None,
            Vec::new(),
            RulePorts::Range(low, high),
            Some(target),
            None,
        )
    };

    let rule = ForwardingRule {
        name: lb.clone(),
        description: description.clone(),
        ip: None,
        protocol: protocol.to_string(),
        ports: rule_ports,
        target,
        backend_service: backend,
        internal,
        network: internal.then(|| refs.network()),
        subnetwork: subnetwork.clone(),
        tier: if internal { None } else { tier.clone() },
        global_access: internal && gcp.is_some_and(|g| g.global_access),
        fingerprint: None,
    };
    let address = Address {
        name: lb.clone(),
        description,
        ip: None,
        internal,
        tier: if internal { None } else { tier },
        subnetwork,
    };
    Ok(Desired {
        lb,
        service,
        internal,
        ip: spec
            .requested_ip
            .map_or(IpRequest::Any, IpRequest::Requested),
        address,
        rule,
        firewall,
        health_check,
        health_check_firewall,
        target_pool,
        backend_service,
        groups,
    })
}

/// The traffic firewall description once the IP is known (upstream records the IP so that an
/// IP change updates the rule).
pub fn firewall_description(service: &str, ip: IpAddr) -> String {
    serde_json::json!({
        "kubernetes.io/service-name": service,
        "kubernetes.io/service-ip": ip.to_string(),
    })
    .to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kube_lb_annotations::Cloud;

    /// Settings as the provider builds them for `mock-project` / `us-central1`.
    pub(crate) fn settings() -> Settings {
        Settings {
            refs: Refs {
                project: "p".into(),
                network_project: "p".into(),
                region: "r1".into(),
                network: "net".into(),
            },
            cluster_id: "c1".into(),
            subnetwork: Some("nodes".into()),
            zones: vec!["r1-a".into(), "r1-b".into()],
            local_zone: Some("r1-a".into()),
        }
    }

    /// A parsed spec for a Service with the given annotations and spec fields merged in.
    pub(crate) fn spec(
        annotations: serde_json::Value,
        extra: serde_json::Value,
    ) -> LoadBalancerSpec {
        let mut service = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "ns", "uid": "0123-4567", "annotations": annotations},
            "spec": {"type": "LoadBalancer", "ports": [
                {"name": "a", "port": 80, "nodePort": 30080, "protocol": "TCP"},
                {"name": "b", "port": 443, "nodePort": 30443, "protocol": "TCP"}]},
        });
        if let (Some(target), Some(source)) = (service["spec"].as_object_mut(), extra.as_object()) {
            for (k, v) in source {
                target.insert(k.clone(), v.clone());
            }
        }
        let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(service).unwrap();
        kube_lb_annotations::parse(Cloud::Gcp, &service)
            .unwrap()
            .spec
    }

    pub(crate) fn node(zone: &str, name: &str) -> BackendNode {
        BackendNode {
            name: name.into(),
            provider_id: Some(format!("gce://p/{zone}/{name}")),
            addresses: Vec::new(),
            labels: Default::default(),
        }
    }

    pub(crate) fn tags() -> BTreeSet<String> {
        BTreeSet::from(["node-tag".to_string()])
    }

    #[test]
    fn node_instances_come_from_provider_id_then_labels_then_local_zone() {
        let mut labelled = node("x", "n2");
        labelled.provider_id = None;
        labelled
            .labels
            .insert("topology.kubernetes.io/zone".into(), "r1-b".into());
        let mut bare = labelled.clone();
        bare.labels.clear();
        bare.name = "n3".into();
        let mut odd = bare.clone();
        odd.provider_id = Some("aws:///us-east-1a/i-1".into());
        odd.name = "n4".into();
        let cases = [
            (node("r1-a", "n1"), Some(("r1-a", "n1"))),
            (labelled, Some(("r1-b", "n2"))),
            (bare, Some(("r1-a", "n3"))),
            (odd, Some(("r1-a", "n4"))),
        ];
        for (node, want) in cases {
            let got = node_instance(&node, Some("r1-a"));
            assert_eq!(
                got.as_ref().map(|i| (i.zone.as_str(), i.name.as_str())),
                want,
                "{node:?}"
            );
        }
        let mut nowhere = node("x", "n5");
        nowhere.provider_id = None;
        assert_eq!(node_instance(&nowhere, None), None);
    }

    #[test]
    fn names_follow_upstream() {
        assert_eq!(firewall_name("a1"), "k8s-fw-a1");
        assert_eq!(shared_health_check_name("c1"), "k8s-c1-node");
        assert_eq!(
            health_check_firewall_name(HealthCheckKind::LegacyHttp, "a1", "a1"),
            "k8s-a1-http-hc"
        );
        assert_eq!(
            health_check_firewall_name(HealthCheckKind::LegacyHttp, "k8s-c1-node", "a1"),
            "k8s-c1-node-http-hc"
        );
        assert_eq!(
            health_check_firewall_name(HealthCheckKind::Http, "a1", "a1"),
            "a1-hc"
        );
        assert_eq!(instance_group_name("c1"), "k8s-ig--c1");
        assert_eq!(instance_group_name(""), "k8s-ig");
        assert_eq!(sanitise_cluster_id("Prod_Cluster.1"), "prod-cluster-1");
        assert!(sanitise_cluster_id(&"x".repeat(100)).len() <= 40);
    }

    #[test]
    fn external_spec_maps_to_target_pool_resources() {
        let spec = spec(
            serde_json::json!({}),
            serde_json::json!({"loadBalancerSourceRanges": ["10.1.2.3/8"]}),
        );
        let want = desired(&spec, &[node("r1-a", "n1")], &settings(), &tags()).unwrap();
        assert!(!want.internal);
        assert_eq!(want.rule.ports, RulePorts::Range(80, 443));
        assert_eq!(
            want.firewall.allowed,
            vec![("tcp".to_string(), vec![(80, 80), (443, 443)])]
        );
        assert_eq!(
            want.firewall.source_ranges,
            BTreeSet::from(["10.0.0.0/8".to_string()])
        );
        assert_eq!(want.health_check.name, "k8s-c1-node");
        assert_eq!(want.health_check.port, NODE_HEALTH_PORT);
        let pool = want.target_pool.unwrap();
        assert_eq!(
            pool.instances,
            BTreeSet::from(["projects/p/zones/r1-a/instances/n1".to_string()])
        );
        assert!(want.backend_service.is_none() && want.groups.is_empty());
    }

    #[test]
    fn internal_spec_maps_to_backend_service_resources() {
        let annotations = serde_json::json!({
            "networking.gke.io/load-balancer-type": "Internal",
            "networking.gke.io/internal-load-balancer-allow-global-access": "true",
        });
        let spec = spec(
            annotations,
            serde_json::json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000}),
        );
        let want = desired(&spec, &[node("r1-b", "n1")], &settings(), &tags()).unwrap();
        assert!(want.internal && want.rule.global_access);
        assert_eq!(want.rule.ports, RulePorts::List([80, 443].into()));
        assert_eq!(
            want.rule.subnetwork.as_deref(),
            Some("projects/p/regions/r1/subnetworks/nodes")
        );
        assert_eq!(
            (want.health_check.name.as_str(), want.health_check.port),
            (want.lb.as_str(), 32000)
        );
        assert_eq!(want.health_check_firewall.name, format!("{}-hc", want.lb));
        let groups: Vec<(&str, usize)> = want
            .groups
            .iter()
            .map(|g| (g.zone.as_str(), g.members.len()))
            .collect();
        assert_eq!(groups, [("r1-a", 0), ("r1-b", 1)]);
        let service = want.backend_service.unwrap();
        assert_eq!(
            service.groups,
            BTreeSet::from(["projects/p/zones/r1-b/instanceGroups/k8s-ig--c1".to_string()])
        );
    }

    #[test]
    fn more_than_five_internal_ports_use_all_ports() {
        let ports: Vec<serde_json::Value> = (0..6)
            .map(|i| serde_json::json!({"name": format!("p{i}"), "port": 80 + i, "nodePort": 30000 + i, "protocol": "TCP"}))
            .collect();
        let spec = spec(
            serde_json::json!({"cloud.google.com/load-balancer-type": "Internal"}),
            serde_json::json!({"ports": ports}),
        );
        let want = desired(&spec, &[], &settings(), &tags()).unwrap();
        assert_eq!(want.rule.ports, RulePorts::All);
    }

    #[test]
    fn services_without_node_ports_are_built() {
        // allocateLoadBalancerNodePorts: false — passthrough LBs never use node ports.
        let spec = spec(
            serde_json::json!({}),
            serde_json::json!({"allocateLoadBalancerNodePorts": false, "ports": [
                {"name": "a", "port": 80, "protocol": "TCP"}]}),
        );
        assert!(spec.ports.iter().all(|p| p.node_port.is_none()));
        assert!(desired(&spec, &[], &settings(), &tags()).is_ok());
    }

    #[test]
    fn unbuildable_specs_are_user_errors() {
        // The annotation parser refuses these before any cloud call (lint and controller); the
        // provider still refuses a spec built some other way.
        let with_protocols = |protocols: [Protocol; 2]| {
            let mut spec = spec(serde_json::json!({}), serde_json::json!({}));
            for (port, protocol) in spec.ports.iter_mut().zip(protocols) {
                port.protocol = protocol;
            }
            spec
        };
        let cases = [
            (
                with_protocols([Protocol::Udp, Protocol::Tcp]),
                settings(),
                tags(),
                "mix protocols",
            ),
            (
                with_protocols([Protocol::Sctp, Protocol::Sctp]),
                settings(),
                tags(),
                "SCTP",
            ),
            (
                spec(serde_json::json!({}), serde_json::json!({})),
                settings(),
                BTreeSet::new(),
                "node-tags",
            ),
            (
                spec(
                    serde_json::json!({"networking.gke.io/load-balancer-type": "Internal"}),
                    serde_json::json!({}),
                ),
                Settings {
                    subnetwork: None,
                    ..settings()
                },
                tags(),
                "subnet",
            ),
        ];
        for (spec, settings, tags, needle) in cases {
            let error = desired(&spec, &[], &settings, &tags).unwrap_err();
            assert_eq!(error.class(), "user", "{needle}");
            assert!(
                error.to_string().contains(needle),
                "{error} should mention {needle}"
            );
        }
        let rbs = spec(
            serde_json::json!({"cloud.google.com/l4-rbs": "enabled"}),
            serde_json::json!({}),
        );
        assert!(matches!(
            desired(&rbs, &[], &settings(), &tags()),
            Err(ProviderError::ImplementedElsewhere)
        ));
    }
}

//! Pure election: from the Services' assigned addresses, their ready endpoints and the set of
//! live announcer nodes, which node announces which address. Every node runs the same function
//! on the same inputs (all read from watches), so they agree without talking to each other.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use kube_lb_provider_core::eligibility::{self, NodeFacts, NodeReadiness, TO_BE_DELETED_TAINT};

use crate::model::{SERVICE_NAME_LABEL, ServiceKey};

pub use kube_lb_provider_core::eligibility::EXCLUDE_LABEL;

/// One Service's claim on an announced address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The Service.
    pub service: ServiceKey,
    /// `externalTrafficPolicy: Local`: only nodes in `local_nodes` may announce.
    pub local_only: bool,
    /// Nodes with at least one ready endpoint of the Service.
    pub local_nodes: BTreeSet<String>,
}

/// Who announces one address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The announcing node; `None` when no live node may announce it (every candidate is down,
    /// or an `externalTrafficPolicy: Local` Service has no ready endpoint on a live node).
    pub node: Option<String>,
    /// The Services that use the address (more than one when they share it).
    pub services: Vec<ServiceKey>,
}

/// An address is worth announcing on a LAN: a unicast address that is neither loopback (the
/// `local` provider's single-machine default pool), link-local nor unspecified.
pub fn announceable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.is_link_local())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

/// The addresses of every LoadBalancer Service (its `.status.loadBalancer.ingress[].ip`, written
/// by the allocator) with the Services claiming each. Entries that are not IPs, hostnames, and
/// addresses that are not [`announceable`] are skipped: nothing is ever announced that is not
/// an address assigned to a Service.
pub fn claims(services: &[&Service], slices: &[&EndpointSlice]) -> BTreeMap<IpAddr, Vec<Claim>> {
    // Keyed by IP family too: an IPv4 address is served by the IPv4 endpoints, so a node with
    // only an IPv6 endpoint of a dual-stack Local Service has none for its IPv4 address.
    let mut local_nodes: BTreeMap<(String, String, bool), BTreeSet<String>> = BTreeMap::new();
    for slice in slices {
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        let Some(service) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        let ipv6 = slice.address_type == "IPv6";
        let nodes = local_nodes
            .entry((namespace, service.clone(), ipv6))
            .or_default();
        for endpoint in &slice.endpoints {
            // As the EndpointSlice API says: an unset `ready` means ready.
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|conditions| conditions.ready)
                .unwrap_or(true);
            if let (true, Some(node)) = (ready, &endpoint.node_name) {
                nodes.insert(node.clone());
            }
        }
    }
    let mut by_ip: BTreeMap<IpAddr, Vec<Claim>> = BTreeMap::new();
    for service in services {
        let Some(spec) = &service.spec else { continue };
        if spec.type_.as_deref() != Some("LoadBalancer") {
            continue;
        }
        let namespace = service.metadata.namespace.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        let ingress = service
            .status
            .as_ref()
            .and_then(|status| status.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        let local_only = spec.external_traffic_policy.as_deref() == Some("Local");
        for entry in ingress.into_iter().flatten() {
            let Some(ip) = entry.ip.as_deref().and_then(|ip| ip.parse::<IpAddr>().ok()) else {
                continue;
            };
            if !announceable(ip) {
                continue;
            }
            by_ip.entry(ip).or_default().push(Claim {
                service: ServiceKey::new(namespace.clone(), name.clone()),
                local_only,
                local_nodes: local_nodes
                    .get(&(namespace.clone(), name.clone(), ip.is_ipv6()))
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }
    by_ip
}

/// Whether a Node object lets its node announce: the shared node rule
/// ([`kube_lb_provider_core::eligibility::ineligibility`]) over [`node_facts`]. A node without
/// a Node object is judged by its lease alone.
pub fn node_may_announce(node: &Node) -> bool {
    eligibility::ineligibility(&node_facts(node), None).is_none()
}

/// What the shared node rule reads from `node`. The dataplane has no readiness grace: a Ready
/// condition that is not `True` (NotReady, Unknown) keeps the node out at once, and a node
/// whose kubelet has not reported one yet is left to its lease.
pub fn node_facts(node: &Node) -> NodeFacts<'_> {
    let not_ready = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|condition| condition.type_ == "Ready" && condition.status != "True");
    NodeFacts {
        being_deleted: node.metadata.deletion_timestamp.is_some(),
        exclude_label: node
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get(EXCLUDE_LABEL))
            .map(String::as_str),
        autoscaler_removing: node
            .spec
            .as_ref()
            .and_then(|spec| spec.taints.as_ref())
            .is_some_and(|taints| taints.iter().any(|taint| taint.key == TO_BE_DELETED_TAINT)),
        readiness: if not_ready {
            NodeReadiness::NotReady
        } else {
            NodeReadiness::Ready
        },
    }
}

/// Rank of `node` for `ip`: the rendezvous (highest-random-weight) hash of the pair. It is the
/// same on every node and in every version of this program (FNV-1a plus a SplitMix64 finish, no
/// per-process seed), and when a node goes only the addresses it held move, spread evenly over
/// the others.
pub fn rank(node: &str, ip: IpAddr) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = FNV_OFFSET;
    let octets: Vec<u8> = match ip {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    // A separator keeps ("ab", x) and ("a", "b"+x) apart.
    for byte in node.bytes().chain([0xff]).chain(octets) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    let mut z = hash.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The candidates for an address among `live` nodes: every live node for Services with
/// `externalTrafficPolicy: Cluster`; for `Local` only live nodes with a ready endpoint. When
/// Services share the address a node must suit all of them; if none does, any node that suits
/// one of them is taken (some of the traffic served beats none).
pub fn candidates(live: &BTreeSet<String>, claims: &[Claim]) -> BTreeSet<String> {
    let suits =
        |claim: &Claim, node: &String| !claim.local_only || claim.local_nodes.contains(node);
    let all: BTreeSet<String> = live
        .iter()
        .filter(|node| claims.iter().all(|claim| suits(claim, node)))
        .cloned()
        .collect();
    if !all.is_empty() {
        return all;
    }
    live.iter()
        .filter(|node| claims.iter().any(|claim| suits(claim, node)))
        .cloned()
        .collect()
}

/// The highest-ranked candidate (ties, which need a 64-bit collision, go to the smaller name).
pub fn winner(candidates: &BTreeSet<String>, ip: IpAddr) -> Option<String> {
    candidates
        .iter()
        .max_by(|a, b| rank(a, ip).cmp(&rank(b, ip)).then_with(|| b.cmp(a)))
        .cloned()
}

/// Assigns every claimed address to at most one live node.
pub fn assign(
    live: &BTreeSet<String>,
    claims: &BTreeMap<IpAddr, Vec<Claim>>,
) -> BTreeMap<IpAddr, Assignment> {
    claims
        .iter()
        .map(|(ip, claims)| {
            let node = winner(&candidates(live, claims), *ip);
            let mut services: Vec<ServiceKey> =
                claims.iter().map(|claim| claim.service.clone()).collect();
            services.sort();
            services.dedup();
            (*ip, Assignment { node, services })
        })
        .collect()
}

/// The addresses `node` announces, with their Services.
pub fn announced_by(
    node: &str,
    assignments: &BTreeMap<IpAddr, Assignment>,
) -> BTreeMap<IpAddr, Vec<ServiceKey>> {
    assignments
        .iter()
        .filter(|(_, assignment)| assignment.node.as_deref() == Some(node))
        .map(|(ip, assignment)| (*ip, assignment.services.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{node, service, slice};

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }

    fn claim(name: &str, local_only: bool, local: &[&str]) -> Claim {
        Claim {
            service: ServiceKey::new("default", name),
            local_only,
            local_nodes: set(local),
        }
    }

    #[test]
    fn candidates_follow_the_traffic_policy() {
        let live = set(&["n1", "n2", "n3"]);
        let cases: [(&str, Vec<Claim>, &[&str]); 6] = [
            (
                "cluster: every live node",
                vec![claim("a", false, &[])],
                &["n1", "n2", "n3"],
            ),
            (
                "local: live nodes with endpoints",
                vec![claim("a", true, &["n2", "n3", "n9"])],
                &["n2", "n3"],
            ),
            (
                "local without endpoints: nobody",
                vec![claim("a", true, &[])],
                &[],
            ),
            (
                "local endpoints only on a dead node: nobody",
                vec![claim("a", true, &["n9"])],
                &[],
            ),
            (
                "shared: a node must suit both",
                vec![
                    claim("a", true, &["n1", "n2"]),
                    claim("b", true, &["n2", "n3"]),
                ],
                &["n2"],
            ),
            (
                "shared without a common node: any that suits one",
                vec![claim("a", true, &["n1"]), claim("b", true, &["n3"])],
                &["n1", "n3"],
            ),
        ];
        for (what, claims, want) in cases {
            assert_eq!(candidates(&live, &claims), set(want), "{what}");
        }
    }

    #[test]
    fn exactly_one_live_candidate_announces_and_all_nodes_agree() {
        let live = set(&["n1", "n2", "n3"]);
        let claims: BTreeMap<IpAddr, Vec<Claim>> = (1..=200)
            .map(|i| {
                (
                    ip(&format!("10.0.{}.{}", i / 250, i % 250 + 1)),
                    vec![claim(&format!("s{i}"), false, &[])],
                )
            })
            .collect();
        let assignments = assign(&live, &claims);
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for (address, assignment) in &assignments {
            let node = assignment.node.clone().expect("a live candidate exists");
            assert!(live.contains(&node));
            *per_node.entry(node.clone()).or_default() += 1;
            // Each node computes its share alone; the shares never overlap and cover all.
            let holders: Vec<&String> = live
                .iter()
                .filter(|n| announced_by(n, &assignments).contains_key(address))
                .collect();
            assert_eq!(holders, vec![&node], "{address}");
        }
        // Spread: no node holds more than half of 200 addresses with three nodes.
        assert!(
            per_node.values().all(|count| *count > 30 && *count < 100),
            "{per_node:?}"
        );
    }

    #[test]
    fn a_dead_node_moves_only_its_own_addresses() {
        let before = set(&["n1", "n2", "n3"]);
        let after = set(&["n2", "n3"]);
        let claims: BTreeMap<IpAddr, Vec<Claim>> = (1..=100)
            .map(|i| {
                (
                    ip(&format!("192.0.2.{i}")),
                    vec![claim(&format!("s{i}"), false, &[])],
                )
            })
            .collect();
        let old = assign(&before, &claims);
        let new = assign(&after, &claims);
        for (address, assignment) in &old {
            let moved = new[address].node != assignment.node;
            assert_eq!(moved, assignment.node.as_deref() == Some("n1"), "{address}");
        }
        // And it comes back to the same addresses when it returns.
        assert_eq!(assign(&before, &claims), old);
    }

    #[test]
    fn ranking_is_fixed_across_processes_and_versions() {
        // Pinned values (computed independently of this code): a change here would make nodes
        // running two versions disagree about who announces.
        let cases = [
            ("n1", "10.0.0.50", 0xb46d_b1aa_dc99_aed2_u64),
            ("n2", "fd00::50", 0xb13a_4716_4ad3_c820),
        ];
        for (node, address, want) in cases {
            assert_eq!(rank(node, ip(address)), want, "{node} {address}");
        }
        assert_ne!(rank("n1", ip("10.0.0.50")), rank("n2", ip("10.0.0.50")));
        assert_ne!(rank("n1", ip("10.0.0.50")), rank("n1", ip("10.0.0.51")));
    }

    #[test]
    fn claims_come_from_load_balancer_status_only() {
        let lb = service("default", "web", "10.96.0.1")
            .port("http", "TCP", 80)
            .load_balancer(&["10.0.0.50", "fd00::50", "127.0.0.5", "not-an-ip", "fe80::1"])
            .build();
        let local = service("default", "api", "10.96.0.2")
            .port("http", "TCP", 80)
            .load_balancer(&["10.0.0.51"])
            .local(31000)
            .build();
        let mut stale = service("default", "old", "10.96.0.3")
            .port("http", "TCP", 80)
            .load_balancer(&["10.0.0.52"])
            .build();
        // Type changed back to ClusterIP; the old status must not be announced.
        if let Some(spec) = stale.spec.as_mut() {
            spec.type_ = Some("ClusterIP".into());
        }
        let api_slice = slice("default", "api", "api-1")
            .port("http", "TCP", 8080)
            .endpoint("10.244.1.10", "n1")
            .endpoint_with("10.244.2.10", "n2", false, false, true)
            .build();
        let got = claims(&[&lb, &local, &stale], &[&api_slice]);
        let addresses: Vec<String> = got.keys().map(ToString::to_string).collect();
        assert_eq!(addresses, ["10.0.0.50", "10.0.0.51", "fd00::50"]);
        assert_eq!(got[&ip("10.0.0.51")], vec![claim("api", true, &["n1"])]);
        assert_eq!(got[&ip("10.0.0.50")], vec![claim("web", false, &[])]);
    }

    /// A dual-stack Local Service: each address family is served by its own endpoints, so a
    /// node with only an IPv6 endpoint is no candidate for the IPv4 address.
    #[test]
    fn local_nodes_are_counted_per_address_family() {
        let dual = service("default", "dual", "10.96.0.4")
            .port("http", "TCP", 80)
            .load_balancer(&["10.0.0.53", "fd00::53"])
            .local(31001)
            .build();
        let v4 = slice("default", "dual", "dual-v4")
            .port("http", "TCP", 8080)
            .endpoint("10.244.1.10", "n1")
            .build();
        let mut v6 = slice("default", "dual", "dual-v6")
            .port("http", "TCP", 8080)
            .endpoint("fd01:1::10", "n1")
            .endpoint("fd01:3::10", "n3")
            .build();
        v6.address_type = "IPv6".into();
        let got = claims(&[&dual], &[&v4, &v6]);
        assert_eq!(got[&ip("10.0.0.53")], vec![claim("dual", true, &["n1"])]);
        assert_eq!(
            got[&ip("fd00::53")],
            vec![claim("dual", true, &["n1", "n3"])]
        );
    }

    #[test]
    fn node_objects_can_veto_announcing() {
        let ready = node("n1", "za", "r1", &["10.0.0.11"]);
        let mut excluded = ready.clone();
        excluded
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(EXCLUDE_LABEL.into(), String::new());
        let mut not_ready = ready.clone();
        if let Some(status) = not_ready.status.as_mut() {
            status.conditions = Some(vec![k8s_openapi::api::core::v1::NodeCondition {
                type_: "Ready".into(),
                status: "Unknown".into(),
                ..Default::default()
            }]);
        }
        let mut deleting = ready.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        // The controller's reading of the label: `false` excludes nothing.
        let mut label_false = ready.clone();
        label_false
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(EXCLUDE_LABEL.into(), "false".into());
        let mut autoscaled = ready.clone();
        autoscaled.spec.get_or_insert_with(Default::default).taints =
            Some(vec![k8s_openapi::api::core::v1::Taint {
                key: TO_BE_DELETED_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]);
        let cases = [
            (ready, true),
            (label_false, true),
            (autoscaled, false),
            (excluded, false),
            (not_ready, false),
            (deleting, false),
        ];
        for (node, want) in cases {
            assert_eq!(node_may_announce(&node), want, "{:?}", node.metadata);
        }
    }
}

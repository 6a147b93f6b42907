//! The nftables backend end to end, in network namespaces the tests create: a client, nodes with
//! zone/region labels running the backend, and pods running real TCP/UDP servers. The model is
//! fed directly from Kubernetes objects (the watch layer is tested separately).

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_dataplane::model::{Index, IndexConfig};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::testing::{node, service, slice};
use support::{Lab, Outcome, eventually, names, node_ip, node_ip6};

/// Nodes 1..=n: n1 (za, r1), n2 (za, r1), n3 (zb, r1), n4 (zc, r2).
fn topology(i: usize) -> (&'static str, &'static str) {
    match i {
        1 | 2 => ("za", "r1"),
        3 => ("zb", "r1"),
        _ => ("zc", "r2"),
    }
}

/// Objects of the simulated cluster plus one nftables backend per node.
struct Cluster {
    nodes: Vec<(Index, NftBackend)>,
    node_objects: Vec<Node>,
}

impl Cluster {
    fn new(lab: &Lab, count: usize, nodeport_cidrs: &[&str], config: NftConfig) -> Cluster {
        let node_objects: Vec<Node> = (1..=count)
            .map(|i| {
                let (zone, region) = topology(i);
                node(&format!("n{i}"), zone, region, &[&node_ip(i)])
            })
            .collect();
        let nodes = (1..=count)
            .map(|i| {
                let mut index = Index::new(IndexConfig {
                    node_name: format!("n{i}"),
                    nodeport_cidrs: nodeport_cidrs
                        .iter()
                        .map(|c| c.parse().expect("cidr"))
                        .collect(),
                    allow_loopback_endpoints: false,
                });
                for object in &node_objects {
                    index.apply_node(object);
                }
                (
                    index,
                    NftBackend::new(
                        config.clone(),
                        Commands::in_netns(&lab.ns(&format!("n{i}"))),
                    ),
                )
            })
            .collect();
        Cluster {
            nodes,
            node_objects,
        }
    }

    fn apply(&mut self, services: &[Service], slices: &[EndpointSlice]) {
        for (index, _) in &mut self.nodes {
            for svc in services {
                index.apply_service(svc);
            }
            for eps in slices {
                index.apply_endpoint_slice(eps);
            }
        }
    }

    fn delete_slice(&mut self, name: &str) {
        for (index, _) in &mut self.nodes {
            index.delete_endpoint_slice("default", name);
        }
    }

    fn delete_service(&mut self, name: &str) {
        for (index, _) in &mut self.nodes {
            index.delete_service("default", name);
        }
    }

    fn replace_node(&mut self, object: Node) {
        for (index, _) in &mut self.nodes {
            index.apply_node(&object);
        }
        self.node_objects.push(object);
    }

    async fn sync(&mut self) {
        for (index, backend) in &mut self.nodes {
            let report = backend.sync(&index.snapshot()).await.expect("nft sync");
            assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        }
    }
}

fn web_slice(pods: &[&support::Pod]) -> EndpointSlice {
    let mut builder = slice("default", "web", "web-1")
        .port("http", "TCP", 8080)
        .port("dns", "UDP", 8080);
    for pod in pods {
        builder = builder.endpoint(&pod.ip, &pod.node);
    }
    builder.build()
}

fn all_ok(outcomes: &[Outcome]) -> bool {
    outcomes.iter().all(|o| o.name().is_some())
}

#[tokio::test]
async fn every_frontend_reaches_every_endpoint() {
    require_netns!();
    let mut lab = Lab::new(3);
    let pods = [lab.pod("a", 1), lab.pod("b", 2), lab.pod("c", 3)];
    let mut cluster = Cluster::new(
        &lab,
        3,
        &[],
        NftConfig {
            cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
            ..NftConfig::default()
        },
    );
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .port("dns", "UDP", 53)
        .node_port(30053)
        .load_balancer(&["192.0.2.10"])
        .external_ips(&["203.0.113.10"])
        .build();
    cluster.apply(&[web], &[web_slice(&pods.iter().collect::<Vec<_>>())]);
    cluster.sync().await;

    let expected: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    for addr in [
        "10.96.0.10:80",
        "10.0.0.11:30080",
        "192.0.2.10:80",
        "203.0.113.10:80",
    ] {
        let outcomes = lab.tcp("c", addr, 40, 2000);
        assert!(all_ok(&outcomes), "{addr}: {outcomes:?}");
        assert_eq!(
            names(&outcomes),
            expected,
            "{addr} must spread over all endpoints"
        );
        // Cluster policy masquerades: endpoints on other nodes see node 1, never the client.
        for outcome in &outcomes {
            assert_ne!(
                outcome.source_ip(),
                Some("10.0.0.100"),
                "{addr}: {outcome:?}"
            );
        }
    }
    // NodePort on another node's address works as well.
    let outcomes = lab.tcp("c", "10.0.0.12:30080", 5, 2000);
    assert!(all_ok(&outcomes), "{outcomes:?}");
    // UDP: ClusterIP and NodePort.
    for addr in ["10.96.0.10:53", "10.0.0.13:30053"] {
        let outcomes = lab.udp("c", addr, 3, 2000, None);
        assert!(all_ok(&outcomes), "{addr}: {outcomes:?}");
    }
}

#[tokio::test]
async fn no_endpoints_are_refused_and_unchanged_resync_is_a_no_op() {
    require_netns!();
    let lab = Lab::new(1);
    let mut cluster = Cluster::new(&lab, 1, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .load_balancer(&["192.0.2.10"])
        .build();
    cluster.apply(&[web], &[]);
    cluster.sync().await;
    for addr in ["10.96.0.10:80", "10.0.0.11:30080", "192.0.2.10:80"] {
        lab.assert_refused("c", addr);
    }
    let (index, backend) = &mut cluster.nodes[0];
    let report = backend.sync(&index.snapshot()).await.unwrap();
    assert_eq!(
        report.commands, 0,
        "a sync without changes must not run nft"
    );
}

#[tokio::test]
async fn session_affinity_sticks_then_expires() {
    require_netns!();
    let mut lab = Lab::new(2);
    let pods = [lab.pod("a", 1), lab.pod("b", 2), lab.pod("c", 2)];
    let mut cluster = Cluster::new(&lab, 2, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .affinity(2)
        .build();
    cluster.apply(&[web], &[web_slice(&pods.iter().collect::<Vec<_>>())]);
    cluster.sync().await;
    let first = lab.tcp("c", "10.96.0.10:80", 15, 2000);
    assert!(all_ok(&first), "{first:?}");
    assert_eq!(
        names(&first).len(),
        1,
        "ClientIP affinity must stick: {first:?}"
    );
    // Once the 2 s timeout passes without traffic, a new choice is made: over a few rounds
    // another endpoint shows up.
    let sticky = first[0].name().unwrap().to_owned();
    let moved = eventually(Duration::from_secs(20), || {
        std::thread::sleep(Duration::from_millis(2500));
        lab.tcp("c", "10.96.0.10:80", 1, 2000)
            .iter()
            .any(|o| o.name().is_some_and(|n| n != sticky))
    });
    assert!(moved, "affinity never expired");
}

#[tokio::test]
async fn local_policy_preserves_client_ip_and_drops_where_no_local_endpoint() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let mut cluster = Cluster::new(&lab, 2, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .load_balancer(&["192.0.2.10"])
        .local(32000)
        .build();
    cluster.apply(&[web], &[web_slice(&[&a])]);
    cluster.sync().await;
    for addr in ["192.0.2.10:80", "10.0.0.11:30080"] {
        let outcomes = lab.tcp("c", addr, 3, 2000);
        assert!(all_ok(&outcomes), "{addr}: {outcomes:?}");
        for outcome in &outcomes {
            assert_eq!(
                outcome.source_ip(),
                Some("10.0.0.100"),
                "{addr}: client address must be preserved"
            );
        }
    }
    // Node 2 has no local endpoint: external traffic there is dropped (a timeout, not a reject).
    let outcomes = lab.tcp("c", "10.0.0.12:30080", 1, 700);
    assert_eq!(outcomes, vec![Outcome::Err("timeout".into())]);
    lab.route_via("c", "192.0.2.0/24", 2);
    let outcomes = lab.tcp("c", "192.0.2.10:80", 1, 700);
    assert_eq!(outcomes, vec![Outcome::Err("timeout".into())]);
}

#[tokio::test]
async fn topology_prefers_host_then_zone_then_region_then_any() {
    require_netns!();
    let mut lab = Lab::new(4);
    let pods = [
        lab.pod("h", 1),
        lab.pod("z", 2),
        lab.pod("r", 3),
        lab.pod("x", 4),
    ];
    let mut cluster = Cluster::new(&lab, 4, &[], NftConfig::default());
    let keys = "kubernetes.io/hostname,topology.kubernetes.io/zone,topology.kubernetes.io/region";
    let with_keys = |keys: &str| {
        service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .annotate("service.kubernetes.io/topology-keys", keys)
            .build()
    };
    // Clients reach the ClusterIP via node 1 (host n1, zone za, region r1).
    let steps: [(&[usize], &str, Option<&str>); 5] = [
        (&[0, 1, 2, 3], keys, Some("h")),
        (&[1, 2, 3], keys, Some("z")),
        (&[2, 3], keys, Some("r")),
        (&[3], keys, None),
        (
            &[3],
            "kubernetes.io/hostname,topology.kubernetes.io/zone,topology.kubernetes.io/region,*",
            Some("x"),
        ),
    ];
    for (endpoints, keys, expected) in steps {
        let chosen: Vec<&support::Pod> = endpoints.iter().map(|i| &pods[*i]).collect();
        cluster.apply(&[with_keys(keys)], &[web_slice(&chosen)]);
        cluster.sync().await;
        let outcomes = lab.tcp("c", "10.96.0.10:80", 10, 1000);
        match expected {
            Some(name) => {
                assert!(all_ok(&outcomes), "{endpoints:?}: {outcomes:?}");
                assert_eq!(
                    names(&outcomes),
                    BTreeSet::from([name.to_string()]),
                    "{endpoints:?} {keys}"
                );
            }
            None => assert!(
                outcomes.iter().all(|o| o.name().is_none()),
                "nothing matches: {outcomes:?}"
            ),
        }
    }
}

#[tokio::test]
async fn source_ranges_block_other_clients() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let mut cluster = Cluster::new(&lab, 1, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .load_balancer(&["192.0.2.10"])
        .source_ranges(&["10.0.0.100/32"])
        .build();
    cluster.apply(&[web], &[web_slice(&[&a])]);
    cluster.sync().await;
    assert!(all_ok(&lab.tcp("c", "192.0.2.10:80", 2, 2000)));
    assert_eq!(
        lab.tcp("c2", "192.0.2.10:80", 1, 700),
        vec![Outcome::Err("timeout".into())]
    );
    // The ClusterIP is not subject to source ranges.
    lab.route_via("c2", "10.96.0.0/16", 1);
    assert!(all_ok(&lab.tcp("c2", "10.96.0.10:80", 1, 2000)));
}

#[tokio::test]
async fn removed_endpoint_gets_no_new_connections_but_established_ones_survive() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let mut cluster = Cluster::new(
        &lab,
        2,
        &[],
        NftConfig {
            scheduler: NftScheduler::RoundRobin,
            ..NftConfig::default()
        },
    );
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .build();
    cluster.apply(&[web], &[web_slice(&[&a, &b])]);
    cluster.sync().await;
    // Hold connections until one lands on b.
    let mut held = Vec::new();
    let mut on_b = None;
    for _ in 0..6 {
        let mut connection = lab.hold("c", "10.96.0.10:80");
        let outcome = connection.request();
        if outcome.name() == Some("b") {
            on_b = Some(connection);
            break;
        }
        held.push(connection);
    }
    let mut on_b = on_b.expect("round robin reaches b");
    cluster.apply(&[], &[web_slice(&[&a])]);
    cluster.sync().await;
    let outcomes = lab.tcp("c", "10.96.0.10:80", 10, 2000);
    assert_eq!(
        names(&outcomes),
        BTreeSet::from(["a".to_string()]),
        "{outcomes:?}"
    );
    assert_eq!(
        on_b.request().name(),
        Some("b"),
        "established connection to the removed endpoint keeps working"
    );
    // An unrelated Service change does not disturb it either.
    let other = service("default", "other", "10.96.0.11")
        .port("http", "TCP", 80)
        .build();
    cluster.apply(&[other], &[]);
    cluster.sync().await;
    assert_eq!(on_b.request().name(), Some("b"));
}

#[tokio::test]
async fn udp_conntrack_is_cleared_when_the_endpoint_goes() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let mut cluster = Cluster::new(&lab, 2, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("dns", "UDP", 53)
        .build();
    cluster.apply(&[web], &[web_slice(&[&a])]);
    cluster.sync().await;
    let first = lab.udp("c", "10.96.0.10:53", 2, 2000, Some(40053));
    assert_eq!(names(&first), BTreeSet::from(["a".to_string()]));
    cluster.apply(&[], &[web_slice(&[&b])]);
    cluster.sync().await;
    // Same client source port: without clearing conntrack the flow would stick to a.
    let second = lab.udp("c", "10.96.0.10:53", 2, 2000, Some(40053));
    assert_eq!(
        names(&second),
        BTreeSet::from(["b".to_string()]),
        "{second:?}"
    );
}

#[tokio::test]
async fn nodeport_addresses_limit_where_node_ports_answer() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    lab.add_node_address(1, "10.0.1.11/24");
    let mut cluster = Cluster::new(&lab, 1, &["10.0.0.0/24"], NftConfig::default());
    cluster.replace_node(node("n1", "za", "r1", &["10.0.0.11", "10.0.1.11"]));
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .build();
    cluster.apply(&[web], &[web_slice(&[&a])]);
    cluster.sync().await;
    assert!(all_ok(&lab.tcp("c", "10.0.0.11:30080", 1, 2000)));
    // Nothing listens on 10.0.1.11:30080 and no rule DNATs it: the kernel refuses.
    lab.assert_refused("c", "10.0.1.11:30080");
    cluster.delete_slice("web-1");
}

#[tokio::test]
async fn ipv6_services_load_into_the_ip6_table() {
    require_netns!();
    let lab = Lab::new(1);
    let mut cluster = Cluster::new(&lab, 1, &[], NftConfig::default());
    let web = service("default", "web6", "fd00:96::10")
        .port("http", "TCP", 80)
        .node_port(30081)
        .load_balancer(&["2001:db8::10"])
        .affinity(30)
        .build();
    let mut eps = slice("default", "web6", "web6-1")
        .port("http", "TCP", 8080)
        .endpoint("fd00:244::10", "n1")
        .build();
    eps.address_type = "IPv6".into();
    cluster.apply(&[web], &[eps]);
    cluster.sync().await;
    let listing = lab.exec("n1", &["nft", "list", "table", "ip6", "kube-lb"]);
    assert!(listing.contains("fd00:96::10 . tcp . 80"), "{listing}");
    assert!(listing.contains("fd00:244::10 . 8080"), "{listing}");
    assert!(
        listing.contains("meta mark . ip6 saddr map @affinity"),
        "{listing}"
    );
}

#[tokio::test]
async fn affinity_survives_other_endpoints_going_and_moves_when_its_endpoint_goes() {
    require_netns!();
    let mut lab = Lab::new(2);
    let pods = [lab.pod("a", 1), lab.pod("b", 2), lab.pod("c", 2)];
    let mut cluster = Cluster::new(&lab, 2, &[], NftConfig::default());
    let web = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .affinity(600)
        .build();
    cluster.apply(
        std::slice::from_ref(&web),
        &[web_slice(&pods.iter().collect::<Vec<_>>())],
    );
    cluster.sync().await;
    let first = lab.tcp("c", "10.96.0.10:80", 5, 2000);
    assert!(all_ok(&first), "{first:?}");
    assert_eq!(names(&first).len(), 1, "{first:?}");
    let sticky = first[0].name().unwrap().to_owned();

    // Another endpoint goes: the client keeps its endpoint.
    let survivors: Vec<&support::Pod> = pods.iter().filter(|p| p.name != sticky).collect();
    let mut kept: Vec<&support::Pod> = pods.iter().filter(|p| p.name == sticky).collect();
    kept.push(survivors[0]);
    cluster.apply(std::slice::from_ref(&web), &[web_slice(&kept)]);
    cluster.sync().await;
    let after = lab.tcp("c", "10.96.0.10:80", 10, 2000);
    assert_eq!(
        names(&after),
        BTreeSet::from([sticky.clone()]),
        "affinity lost when an unrelated endpoint went: {after:?}"
    );

    // Its own endpoint goes: the client is served by the other one, and sticks to it.
    cluster.apply(std::slice::from_ref(&web), &[web_slice(&[survivors[0]])]);
    cluster.sync().await;
    let moved = lab.tcp("c", "10.96.0.10:80", 10, 2000);
    assert_eq!(
        names(&moved),
        BTreeSet::from([survivors[0].name.clone()]),
        "{moved:?}"
    );
    cluster.apply(&[web], &[web_slice(&[survivors[0], survivors[1]])]);
    cluster.sync().await;
    let again = lab.tcp("c", "10.96.0.10:80", 10, 2000);
    assert_eq!(
        names(&again),
        BTreeSet::from([survivors[0].name.clone()]),
        "the new choice was not remembered: {again:?}"
    );
}

#[tokio::test]
async fn a_pod_reaching_itself_through_its_service_is_masqueraded_others_keep_their_address() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 1);
    let config = NftConfig {
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        ..NftConfig::default()
    };
    let mut cluster = Cluster::new(&lab, 1, &[], config);
    let only_a = service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .build();
    cluster.apply(&[only_a], &[web_slice(&[&a])]);
    cluster.sync().await;
    // Without masquerade the reply to itself would never pass the reverse NAT.
    let hairpin = lab.tcp("pa", "10.96.0.10:80", 3, 2000);
    assert!(all_ok(&hairpin), "{hairpin:?}");
    assert!(
        hairpin.iter().all(|o| o.source_ip() == Some("10.244.1.1")),
        "{hairpin:?}"
    );
    // Pod to another pod keeps the pod's address (pod CIDR traffic is not masqueraded).
    let other = lab.tcp("pb", "10.96.0.10:80", 3, 2000);
    assert!(all_ok(&other), "{other:?}");
    assert!(
        other.iter().all(|o| o.source_ip() == Some(b.ip.as_str())),
        "{other:?}"
    );
}

/// 30 new connections from LAN client "c" (address `client_ip`) to `addr`: every one answered,
/// spread over exactly `expected`, none seeing the client's own address (Cluster policy
/// masquerades it).
fn spread_and_masqueraded(lab: &Lab, addr: &str, client_ip: &str, expected: &BTreeSet<String>) {
    let outcomes = lab.tcp("c", addr, 30, 2000);
    assert!(all_ok(&outcomes), "{addr}: {outcomes:?}");
    assert_eq!(
        &names(&outcomes),
        expected,
        "{addr} must spread over both endpoints"
    );
    assert!(
        outcomes.iter().all(|o| o.source_ip() != Some(client_ip)),
        "{addr}: the LAN client is masqueraded under cluster policy: {outcomes:?}"
    );
}

/// Dual stack on real nodes: an IPv6 Service's ClusterIP, NodePort (on each node's own IPv6
/// address), load-balancer IP and external IP carry TCP and UDP through the `ip6` table, from a
/// client on the LAN and from a pod, to endpoints on both nodes; a dual-stack Service answers on
/// both families' cluster IPs. Cluster policy masquerades the
/// LAN client (endpoints never see its address); pod-to-pod traffic keeps the pod's address.
/// When the Service goes, its addresses are gone from the table and stop answering.
#[tokio::test]
async fn ipv6_frontends_carry_traffic_through_the_ip6_table() {
    require_netns!();
    let mut lab = Lab::dual_stack(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let mut cluster = Cluster::new(
        &lab,
        2,
        &[],
        NftConfig {
            cluster_cidrs: vec![
                "10.244.0.0/16".parse().unwrap(),
                "fd00:244::/32".parse().unwrap(),
            ],
            ..NftConfig::default()
        },
    );
    // The nodes' IPv6 addresses in their Node objects: what the model serves NodePorts on
    // (the proxy binary reads them from the node's interfaces instead).
    for i in 1..=2 {
        let (zone, region) = topology(i);
        cluster.replace_node(node(
            &format!("n{i}"),
            zone,
            region,
            &[&node_ip(i), &node_ip6(i)],
        ));
    }
    let web = service("default", "web6", "fd00:96::10")
        .port("http", "TCP", 80)
        .node_port(30081)
        .port("dns", "UDP", 53)
        .node_port(30053)
        .load_balancer(&["2001:db8:10::10"])
        .external_ips(&["2001:db8:20::10"])
        .build();
    let mut eps = slice("default", "web6", "web6-1")
        .port("http", "TCP", 8080)
        .port("dns", "UDP", 8080);
    for pod in [&a, &b] {
        eps = eps.endpoint(pod.ip6.as_deref().expect("dual-stack pod"), &pod.node);
    }
    let mut eps = eps.build();
    eps.address_type = "IPv6".into();
    cluster.apply(&[web], &[eps]);
    cluster.sync().await;

    let both: BTreeSet<String> = ["a", "b"].iter().map(|s| s.to_string()).collect();
    for addr in [
        "[fd00:96::10]:80",
        "[fd00:10::11]:30081",
        "[fd00:10::12]:30081",
        "[2001:db8:10::10]:80",
        "[2001:db8:20::10]:80",
    ] {
        spread_and_masqueraded(&lab, addr, "fd00:10::100", &both);
    }
    for addr in ["[fd00:96::10]:53", "[fd00:10::11]:30053"] {
        let outcomes = lab.udp("c", addr, 3, 2000, None);
        assert!(all_ok(&outcomes), "{addr}: {outcomes:?}");
    }
    eprintln!(
        "DEBUG {}",
        lab.exec("n1", &["nft", "list", "table", "ip6", "kube-lb"])
    );
    // From a pod: both endpoints, and the one on the other node sees the pod itself.
    let from_pod = lab.tcp("pa", "[fd00:96::10]:80", 30, 2000);
    assert!(all_ok(&from_pod), "{from_pod:?}");
    assert_eq!(names(&from_pod), both, "{from_pod:?}");
    assert!(
        from_pod
            .iter()
            .filter(|o| o.name() == Some("b"))
            .all(|o| o.source_ip() == a.ip6.as_deref()),
        "pod-to-pod traffic keeps the pod's address: {from_pod:?}"
    );

    // A dual-stack Service (both families' cluster IPs, one slice per family): each family's
    // address reaches the pods over that family.
    let mut dual = service("default", "dual", "10.96.0.20")
        .port("http", "TCP", 80)
        .build();
    if let Some(spec) = dual.spec.as_mut() {
        spec.cluster_ips = Some(vec!["10.96.0.20".into(), "fd00:96::20".into()]);
        spec.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
        spec.ip_family_policy = Some("RequireDualStack".into());
    }
    let mut v4 = slice("default", "dual", "dual-v4").port("http", "TCP", 8080);
    let mut v6 = slice("default", "dual", "dual-v6").port("http", "TCP", 8080);
    for pod in [&a, &b] {
        v4 = v4.endpoint(&pod.ip, &pod.node);
        v6 = v6.endpoint(pod.ip6.as_deref().expect("dual-stack pod"), &pod.node);
    }
    let mut v6 = v6.build();
    v6.address_type = "IPv6".into();
    cluster.apply(&[dual], &[v4.build(), v6]);
    cluster.sync().await;
    for (addr, client_ip) in [
        ("10.96.0.20:80", "10.0.0.100"),
        ("[fd00:96::20]:80", "fd00:10::100"),
    ] {
        spread_and_masqueraded(&lab, addr, client_ip, &both);
    }

    cluster.delete_service("web6");
    cluster.sync().await;
    let listing = lab.exec("n1", &["nft", "list", "table", "ip6", "kube-lb"]);
    assert!(!listing.contains("fd00:96::10"), "{listing}");
    let gone = lab.tcp("c", "[fd00:96::10]:80", 1, 1000);
    assert!(gone.iter().all(|o| o.name().is_none()), "{gone:?}");
}

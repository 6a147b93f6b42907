//! `--scheduler maglev` in the nftables backend, in network namespaces the tests create: the
//! kernel picks the endpoint the Maglev table names for a flow on every node (and the same one
//! the userspace backend would), and one endpoint change is element updates only, like the
//! default scheduler's one-change path (their times side by side: `bench/dataplane.rs`).

// Helpers panic on setup failures, as the tests calling them do.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_dataplane::maglev::{Table, TableSize};
use kube_lb_dataplane::model::{EndpointAddr, Index, IndexConfig};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::testing::{node, service, slice};
use support::{Lab, Outcome, node_ip, run};

fn maglev_config() -> NftConfig {
    NftConfig {
        scheduler: NftScheduler::Maglev(TableSize::default()),
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
        ..NftConfig::default()
    }
}

fn dns_service() -> Service {
    service("default", "dns", "10.96.0.10")
        .port("dns", "UDP", 53)
        .build()
}

fn dns_slice(pods: &[&support::Pod]) -> EndpointSlice {
    let mut builder = slice("default", "dns", "dns-1").port("dns", "UDP", 8080);
    for pod in pods {
        builder = builder.endpoint(&pod.ip, &pod.node);
    }
    builder.build()
}

/// Index of node `name` knowing nodes n1..=n`count`.
fn index(name: &str, count: usize) -> Index {
    let mut index = Index::new(IndexConfig {
        node_name: name.into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    for i in 1..=count {
        index.apply_node(&node(&format!("n{i}"), "za", "r1", &[&node_ip(i)]));
    }
    index
}

/// The table's answer for a flow from the lab client, as a pod name.
fn predicted(table: &Table, pods: &[support::Pod], port: u16) -> String {
    let flow = SocketAddr::new(IpAddr::from([10, 0, 0, 100]), port);
    let endpoint = table.lookup(flow).expect("a table with endpoints");
    pods.iter()
        .find(|pod| pod.ip == endpoint.ip.to_string())
        .map(|pod| pod.name.clone())
        .expect("the endpoint is a pod")
}

#[tokio::test]
async fn every_node_picks_the_endpoint_the_maglev_table_names_for_a_flow() {
    require_netns!();
    let mut lab = Lab::new(2);
    let pods = vec![
        lab.pod("a", 1),
        lab.pod("b", 1),
        lab.pod("c", 2),
        lab.pod("d", 2),
    ];
    let mut nodes: Vec<(Index, NftBackend)> = (1..=2)
        .map(|i| {
            let mut index = index(&format!("n{i}"), 2);
            index.apply_service(&dns_service());
            index.apply_endpoint_slice(&dns_slice(&pods.iter().collect::<Vec<_>>()));
            let backend = NftBackend::new(
                maglev_config(),
                Commands::in_netns(&lab.ns(&format!("n{i}"))),
            );
            (index, backend)
        })
        .collect();
    for (index, backend) in &mut nodes {
        backend.sync(&index.snapshot()).await.expect("full sync");
    }
    let endpoints: Vec<EndpointAddr> = pods
        .iter()
        .map(|pod| EndpointAddr {
            ip: pod.ip.parse().unwrap(),
            port: 8080,
        })
        .collect();
    let table = Table::new(&endpoints, TableSize::default());

    // Fixed client ports: the kernel's jhash and Maglev table must name the endpoint the
    // userspace computation names, through node 1 and through node 2.
    let ports: Vec<u16> = (0..24).map(|i| 41_000 + i * 37).collect();
    let expected: Vec<String> = ports
        .iter()
        .map(|port| predicted(&table, &pods, *port))
        .collect();
    assert_eq!(
        expected.iter().collect::<BTreeSet<_>>().len(),
        4,
        "these flows spread over every endpoint: {expected:?}"
    );
    for via in [1, 2] {
        lab.route_via("c", "10.96.0.0/16", via);
        let answered: Vec<String> = ports
            .iter()
            .map(|port| {
                match lab
                    .udp("c", "10.96.0.10:53", 1, 2000, Some(*port))
                    .as_slice()
                {
                    [Outcome::Ok { name, .. }] => name.clone(),
                    other => panic!("port {port} via n{via}: {other:?}"),
                }
            })
            .collect();
        assert_eq!(answered, expected, "via node {via}");
    }

    // One endpoint goes: the transaction is element updates of the bucket map, the chains stay
    // as they were, and only flows of the departed endpoint (plus Maglev's small extra) move.
    let (index, backend) = &mut nodes[0];
    let before = run(&[
        "ip",
        "netns",
        "exec",
        &lab.ns("n1"),
        "nft",
        "-t",
        "list",
        "table",
        "ip",
        "kube-lb",
    ]);
    index.apply_endpoint_slice(&dns_slice(&pods[..3].iter().collect::<Vec<_>>()));
    let snapshot = index.snapshot();
    let plan = backend.plan(&snapshot);
    assert!(
        plan.lines()
            .all(|line| line.starts_with("add element ip kube-lb buckets ")
                || line.starts_with("delete element ip kube-lb buckets ")
                || line.starts_with("delete element ip kube-lb hairpin ")),
        "only element updates:\n{}",
        plan.lines()
            .map(|line| line.chars().take(120).collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    backend.sync(&snapshot).await.expect("incremental sync");
    let after = run(&[
        "ip",
        "netns",
        "exec",
        &lab.ns("n1"),
        "nft",
        "-t",
        "list",
        "table",
        "ip",
        "kube-lb",
    ]);
    assert_eq!(before, after, "chains and rules unchanged");
    let smaller = Table::new(&endpoints[..3], TableSize::default());
    let moved = table.moved(&smaller) as f64 / table.len() as f64;
    assert!(moved <= 1.0 / 4.0 + 0.02, "{moved}");
    lab.route_via("c", "10.96.0.0/16", 1);
    for (port, before) in ports.iter().zip(&expected) {
        let now = predicted(&smaller, &pods, *port);
        if before != "d" {
            assert_eq!(&now, before, "a flow of a surviving endpoint stays");
        }
        // The old conntrack entry of a departed endpoint is cleared by the backend, so the
        // retried flow follows the new table.
        let answered = lab.udp("c", "10.96.0.10:53", 1, 2000, Some(*port));
        assert_eq!(answered.first().and_then(Outcome::name), Some(now.as_str()));
    }
}

/// `services` Services of `endpoints` endpoints each, addresses from 10.(100+)…
/// `services` Services with `endpoints` endpoints each; with `swap_one`, Service 0's last
/// endpoint is another address (one endpoint replaced: the change today's one-change figure,
/// 19.9 ms in `bench/dataplane.rs`, measures).
fn many(services: usize, endpoints: usize, swap_one: bool) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut list = Vec::new();
    let mut slices = Vec::new();
    for s in 0..services {
        let name = format!("s{s}");
        list.push(
            service(
                "default",
                &name,
                &format!("10.96.{}.{}", s / 250, s % 250 + 1),
            )
            .port("p", "TCP", 80)
            .build(),
        );
        let mut builder = slice("default", &name, &format!("{name}-1")).port("p", "TCP", 8080);
        for e in 0..endpoints {
            let host = if swap_one && s == 0 && e + 1 == endpoints {
                200
            } else {
                e + 1
            };
            builder = builder.endpoint(&format!("10.{}.{}.{host}", 100 + s / 250, s % 250), "n1");
        }
        slices.push(builder.build());
    }
    (list, slices)
}

#[tokio::test]
async fn one_maglev_endpoint_change_is_a_few_element_updates_like_the_default_schedulers() {
    require_netns!();
    // Its time beside the default scheduler's is measured by `bench/dataplane.rs` (a timed
    // assertion here would measure the CI machine's load); this test pins the shape of the
    // change that keeps it cheap.
    let services = 20;
    let lab = Lab::new(2);
    let schedulers = [
        ("random", NftConfig::default()),
        ("maglev", maglev_config()),
    ];
    let mut nodes: Vec<(&str, Index, NftBackend)> = schedulers
        .into_iter()
        .enumerate()
        .map(|(i, (name, config))| {
            let node_name = format!("n{}", i + 1);
            (
                name,
                index(&node_name, 2),
                NftBackend::new(config, Commands::in_netns(&lab.ns(&node_name))),
            )
        })
        .collect();
    let (full, full_slices) = many(services, 10, false);
    let (_, swapped_slices) = many(services, 10, true);
    let mut chains = Vec::new();
    for (_, index, backend) in &mut nodes {
        for svc in &full {
            index.apply_service(svc);
        }
        for eps in &full_slices {
            index.apply_endpoint_slice(eps);
        }
        assert!(
            backend
                .sync(&index.snapshot())
                .await
                .expect("full sync")
                .full
        );
    }
    for node in ["n1", "n2"] {
        chains.push(chain_listing(&lab, node));
    }
    // Each round replaces one endpoint of Service 0 (and the next puts it back).
    let mut lines: Vec<BTreeSet<usize>> = vec![BTreeSet::new(), BTreeSet::new()];
    for round in 0..4 {
        let slice0 = if round % 2 == 0 {
            &swapped_slices[0]
        } else {
            &full_slices[0]
        };
        for (i, (name, index, backend)) in nodes.iter_mut().enumerate() {
            index.apply_endpoint_slice(slice0);
            let report = backend.sync(&index.snapshot()).await.expect("one change");
            assert!(!report.full, "{name}: one change recreated the table");
            lines[i].insert(report.commands);
        }
    }
    eprintln!(
        "transaction lines per change: random {:?}, maglev {:?}",
        lines[0], lines[1]
    );
    // Maglev adds one table's element updates (the moved slots, in one delete and one add
    // line) to the default scheduler's endpoint-set update: a constant, not a function of how
    // many Services or slots there are.
    let most = |set: &BTreeSet<usize>| set.iter().copied().max().unwrap_or(0);
    assert!(most(&lines[0]) > 0 && most(&lines[1]) > 0, "{lines:?}");
    assert!(most(&lines[1]) <= most(&lines[0]) + 2, "{lines:?}");
    for (node, before) in ["n1", "n2"].iter().zip(&chains) {
        assert_eq!(
            &chain_listing(&lab, node),
            before,
            "{node}: chains rewritten"
        );
    }
}

/// The table's chains and rules (`-t`: set and map contents left out): what a change made of
/// element updates leaves untouched.
fn chain_listing(lab: &Lab, node: &str) -> String {
    run(&[
        "ip",
        "netns",
        "exec",
        &lab.ns(node),
        "nft",
        "-t",
        "list",
        "table",
        "ip",
        "kube-lb",
    ])
}

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ipnet::IpNet;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::maglev::TableSize;
use crate::model::{ServiceKey, Snapshot, TrafficPolicy};
use crate::nft::render::{NftScheduler, diff, render, udp_cleanup};

/// Addresses drawn from small pools, so ports share endpoints, hairpin pairs and frontends (an
/// external IP that is another Service's cluster IP, one LB IP for two Services).
fn ip(rng: &mut StdRng, v4: [u8; 3], v6: u16, pool: u8) -> IpAddr {
    let last = rng.random_range(1..=pool);
    if rng.random_bool(0.8) {
        IpAddr::V4(Ipv4Addr::new(v4[0], v4[1], v4[2], last))
    } else {
        IpAddr::V6(Ipv6Addr::new(0xfd00, v6, 0, 0, 0, 0, 0, u16::from(last)))
    }
}

fn endpoints(rng: &mut StdRng, max: usize) -> Vec<EndpointAddr> {
    let count = rng.random_range(0..=max);
    let port = if rng.random_bool(0.8) { 8080 } else { 9090 };
    let mut endpoints: Vec<EndpointAddr> = (0..count)
        .map(|_| EndpointAddr {
            ip: ip(rng, [10, 244, 0], 0x244, 24),
            port,
        })
        .collect();
    endpoints.sort();
    endpoints.dedup();
    endpoints
}

fn policy(rng: &mut StdRng) -> TrafficPolicy {
    if rng.random_bool(0.3) {
        TrafficPolicy::Local
    } else {
        TrafficPolicy::Cluster
    }
}

/// A random model for `key`.
fn model(rng: &mut StdRng, key: &PortKey) -> ServicePortModel {
    let cluster_endpoints = endpoints(rng, 12);
    let local_endpoints: Vec<EndpointAddr> = cluster_endpoints
        .iter()
        .copied()
        .filter(|_| rng.random_bool(0.4))
        .collect();
    let some_ips = |rng: &mut StdRng, v4: [u8; 3], chance: f64| -> Vec<IpAddr> {
        let mut ips = Vec::new();
        for _ in 0..2 {
            if rng.random_bool(chance) {
                ips.push(ip(rng, v4, 0x96, 6));
            }
        }
        ips
    };
    let load_balancer_ips = some_ips(rng, [192, 0, 2], 0.3);
    ServicePortModel {
        key: key.clone(),
        port_name: String::new(),
        cluster_ips: vec![ip(rng, [10, 96, 0], 0x96, 6)],
        node_port: rng
            .random_bool(0.3)
            .then(|| 30_000 + rng.random_range(0..4)),
        // From the cluster IP pool: collides with other Services' cluster IPs.
        external_ips: some_ips(rng, [10, 96, 0], 0.2),
        source_ranges: if !load_balancer_ips.is_empty() && rng.random_bool(0.5) {
            vec![
                "203.0.113.0/24".parse::<IpNet>().unwrap_or_default(),
                "2001:db8::/64".parse::<IpNet>().unwrap_or_default(),
            ]
        } else {
            Vec::new()
        },
        load_balancer_ips,
        affinity_timeout: rng
            .random_bool(0.3)
            .then(|| Duration::from_secs(rng.random_range(1..4) * 100)),
        external_policy: policy(rng),
        internal_policy: policy(rng),
        proxy_protocol: None,
        has_endpoints: !cluster_endpoints.is_empty() || rng.random_bool(0.2),
        cluster_endpoints,
        local_endpoints,
    }
}

fn port_keys() -> Vec<PortKey> {
    let mut keys = Vec::new();
    for service in ["a", "b", "c", "d", "e", "f"] {
        for (protocol, port) in [
            (Protocol::Tcp, 80),
            (Protocol::Udp, 53),
            (Protocol::Tcp, 443),
        ] {
            keys.push(PortKey {
                service: ServiceKey::new("default", service),
                protocol,
                port,
            });
        }
    }
    keys
}

/// One random step: a few ports appear, disappear or get a new model; sometimes an endpoint
/// of one port is replaced (the common case), sometimes the NodePort addresses change.
fn step(rng: &mut StdRng, snapshot: &mut Snapshot, keys: &[PortKey]) {
    for _ in 0..rng.random_range(1..=3) {
        let key = &keys[rng.random_range(0..keys.len())];
        match rng.random_range(0..4) {
            0 => {
                snapshot.ports.remove(key);
            }
            1 => {
                if let Some(port) = snapshot.ports.get_mut(key)
                    && let Some(last) = port.cluster_endpoints.last_mut()
                {
                    last.ip = ip(rng, [10, 244, 1], 0x245, 200);
                    port.cluster_endpoints.sort();
                    port.cluster_endpoints.dedup();
                }
            }
            _ => {
                snapshot.ports.insert(key.clone(), model(rng, key));
            }
        }
    }
    if rng.random_bool(0.1) {
        snapshot.nodeport_addresses = (0..rng.random_range(0..3))
            .map(|_| ip(rng, [10, 0, 0], 0x10, 4))
            .collect();
    }
}

fn configs() -> Vec<NftConfig> {
    let cidrs = vec![
        "10.244.0.0/16".parse().unwrap_or_default(),
        "fd00:244::/32".parse().unwrap_or_default(),
    ];
    let schedulers = [
        NftScheduler::Random,
        NftScheduler::RoundRobin,
        NftScheduler::SourceHash,
        NftScheduler::Maglev(TableSize::new(31).unwrap_or_default()),
    ];
    schedulers
        .into_iter()
        .flat_map(|scheduler| {
            [Vec::new(), cidrs.clone()]
                .into_iter()
                .map(move |cluster_cidrs| NftConfig {
                    table: "kube-lb".into(),
                    scheduler,
                    cluster_cidrs,
                })
        })
        .collect()
}

/// The proof of the incremental sync: on random change sequences, for every scheduler and
/// family, the transaction built from the changed ports alone is the one a full render and
/// diff produces from the same state, and the table afterwards is the full render.
#[test]
fn incremental_updates_send_what_a_full_render_and_diff_would() {
    let keys = port_keys();
    for (round, config) in configs().into_iter().enumerate() {
        for family in [Family::V4, Family::V6] {
            let seed =
                u64::try_from(round).unwrap_or_default() * 2 + u64::from(family == Family::V6);
            let mut rng = StdRng::seed_from_u64(seed);
            let mut snapshot = Snapshot::default();
            step(&mut rng, &mut snapshot, &keys);
            let mut ids = GroupIds::default();
            let mut table = FamilyTable::full(
                family,
                &config,
                &mut ids,
                snapshot.ports.values(),
                &snapshot.nodeport_addresses,
            );
            let mut reference_ids = ids.clone();
            let (reference, _) = render(&snapshot, family, &config, &mut reference_ids);
            assert_eq!(table.ruleset(), &reference, "full sync, seed {seed}");
            let mut models = snapshot.ports.clone();
            for round in 0..150 {
                step(&mut rng, &mut snapshot, &keys);
                let mut reference_ids = ids.clone();
                let (reference, reference_warnings) =
                    render(&snapshot, family, &config, &mut reference_ids);
                let expected = diff(Some(table.ruleset()), &reference, family, &config);

                let mut changes: Vec<Change<'_>> = snapshot
                    .ports
                    .keys()
                    .chain(models.keys())
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .filter_map(|key| {
                        let (old, new) = (models.get(key), snapshot.ports.get(key));
                        (old != new).then_some(Change { key, old, new })
                    })
                    .collect();
                changes.sort_by(|a, b| a.key.cmp(b.key));
                let (before, after) = table.update(
                    family,
                    &config,
                    &mut ids,
                    &changes,
                    &snapshot.nodeport_addresses,
                );
                let sent = diff(Some(&before), &after, family, &config);
                assert_eq!(sent, expected, "seed {seed}, round {round}");
                assert_eq!(table.ruleset(), &reference, "seed {seed}, round {round}");
                assert_eq!(
                    table.warnings().cloned().collect::<Vec<_>>(),
                    reference_warnings
                );
                assert_eq!(ids.len(), reference_ids.len(), "group ids are freed alike");
                models = snapshot.ports.clone();
            }
        }
    }
}

#[test]
fn an_unchanged_snapshot_updates_nothing() {
    let keys = port_keys();
    let mut rng = StdRng::seed_from_u64(7);
    let mut snapshot = Snapshot::default();
    for _ in 0..5 {
        step(&mut rng, &mut snapshot, &keys);
    }
    let config = NftConfig::default();
    let mut ids = GroupIds::default();
    let mut table = FamilyTable::full(
        Family::V4,
        &config,
        &mut ids,
        snapshot.ports.values(),
        &snapshot.nodeport_addresses,
    );
    let (before, after) = table.update(
        Family::V4,
        &config,
        &mut ids,
        &[],
        &snapshot.nodeport_addresses,
    );
    assert_eq!(diff(Some(&before), &after, Family::V4, &config), "");
}

/// A port whose endpoint changes keeps its group mark, and the transaction is element updates
/// of that group only.
#[test]
fn one_endpoint_change_touches_one_group() {
    let keys = port_keys();
    let mut rng = StdRng::seed_from_u64(11);
    let mut ports = BTreeMap::new();
    for key in keys.iter().filter(|key| key.protocol == Protocol::Tcp) {
        let mut port = model(&mut rng, key);
        port.cluster_ips = vec![IpAddr::V4(Ipv4Addr::new(10, 96, 1, 1))];
        port.cluster_endpoints = (1..=3)
            .map(|i| EndpointAddr {
                ip: IpAddr::V4(Ipv4Addr::new(10, 244, 9, i)),
                port: 8080,
            })
            .collect();
        port.internal_policy = TrafficPolicy::Cluster;
        port.affinity_timeout = None;
        port.has_endpoints = true;
        ports.insert(key.clone(), port);
    }
    let config = NftConfig::default();
    let mut ids = GroupIds::default();
    let mut table = FamilyTable::full(Family::V4, &config, &mut ids, ports.values(), &[]);
    let key = &keys[0];
    let old = ports[key].clone();
    let mut new = old.clone();
    new.cluster_endpoints[2].ip = IpAddr::V4(Ipv4Addr::new(10, 244, 9, 77));
    let change = Change {
        key,
        old: Some(&old),
        new: Some(&new),
    };
    let (before, after) = table.update(Family::V4, &config, &mut ids, &[change], &[]);
    let text = diff(Some(&before), &after, Family::V4, &config);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("delete element ip kube-lb buckets { "),
        "{text}"
    );
    assert!(
        lines[1].starts_with("add element ip kube-lb buckets { "),
        "{text}"
    );
    assert!(lines[1].contains("10.244.9.77 . 8080"), "{text}");
}

/// The conntrack work follows from the changed ports as it does from two whole snapshots.
#[test]
fn udp_cleanup_from_changes_matches_the_whole_snapshot_comparison() {
    let keys = port_keys();
    let mut rng = StdRng::seed_from_u64(3);
    let mut users = UdpEndpoints::default();
    let mut snapshot = Snapshot::default();
    for round in 0..300 {
        let old = snapshot.clone();
        step(&mut rng, &mut snapshot, &keys);
        let changes: Vec<Change<'_>> = snapshot
            .ports
            .keys()
            .chain(old.ports.keys())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .filter_map(|key| {
                let (before, after) = (old.ports.get(key), snapshot.ports.get(key));
                (before != after).then_some(Change {
                    key,
                    old: before,
                    new: after,
                })
            })
            .collect();
        assert_eq!(
            users.apply(&changes),
            udp_cleanup(&old, &snapshot),
            "round {round}"
        );
    }
}

/// A table whose `buckets` map outgrows the size its full sync declared no longer fits (the
/// backend then sends a full sync, which declares room for twice the new count); one that
/// shrinks or stays within the size keeps fitting.
#[test]
fn a_map_that_outgrows_its_declared_size_asks_for_a_full_sync() {
    let key = PortKey {
        service: ServiceKey::new("default", "big"),
        protocol: Protocol::Tcp,
        port: 80,
    };
    let with_endpoints = |count: u32| {
        let mut port = model(&mut StdRng::seed_from_u64(3), &key);
        port.cluster_ips = vec![IpAddr::V4(Ipv4Addr::new(10, 96, 7, 7))];
        port.cluster_endpoints = (0..count)
            .map(|i| EndpointAddr {
                ip: IpAddr::V4(Ipv4Addr::from(0x0af4_0000 + i)),
                port: 8080,
            })
            .collect();
        port.internal_policy = TrafficPolicy::Cluster;
        port.external_policy = TrafficPolicy::Cluster;
        port.affinity_timeout = None;
        port.has_endpoints = count > 0;
        port
    };
    let config = NftConfig::default();
    let declared = render::capacity(100);
    assert_eq!(declared, render::MIN_CAPACITY);
    // (endpoints after the change, fits the sizes declared for 100 endpoints)
    let cases = [
        (10, true),
        (declared as u32, true),
        (declared as u32 + 1, false),
    ];
    for (count, fits) in cases {
        let mut ids = GroupIds::default();
        let first = with_endpoints(100);
        let mut table = FamilyTable::full(Family::V4, &config, &mut ids, [&first].into_iter(), &[]);
        assert_eq!(table.capacities().get("buckets"), Some(&declared));
        assert_eq!(
            table.capacities().get("firewall-allow"),
            None,
            "interval set"
        );
        let next = with_endpoints(count);
        let change = Change {
            key: &key,
            old: Some(&first),
            new: Some(&next),
        };
        table.update(Family::V4, &config, &mut ids, &[change], &[]);
        assert_eq!(table.fits(), fits, "{count} endpoints");
        table.redeclare();
        assert!(table.fits(), "{count} endpoints after redeclaring");
        assert_eq!(
            table.capacities().get("buckets"),
            Some(&render::capacity(count as usize))
        );
    }
}

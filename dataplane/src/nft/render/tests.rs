use super::*;
use crate::model::{Index, IndexConfig};
use crate::testing::{node, service, slice};

fn snapshot(
    services: &[k8s_openapi::api::core::v1::Service],
    slices: &[k8s_openapi::api::discovery::v1::EndpointSlice],
) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    index.apply_node(&node("n1", "za", "r1", &["10.0.0.11"]));
    index.apply_node(&node("n2", "za", "r1", &["10.0.0.12"]));
    for svc in services {
        index.apply_service(svc);
    }
    for eps in slices {
        index.apply_endpoint_slice(eps);
    }
    index.snapshot()
}

fn web() -> k8s_openapi::api::core::v1::Service {
    service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .build()
}

fn web_eps(ips: &[(&str, &str)]) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let mut builder = slice("default", "web", "web-1").port("", "TCP", 8080);
    for (ip, node) in ips {
        builder = builder.endpoint(ip, node);
    }
    builder.build()
}

struct Renderer {
    ids: GroupIds,
    config: NftConfig,
}

impl Renderer {
    fn new() -> Self {
        Renderer {
            ids: GroupIds::default(),
            config: NftConfig::default(),
        }
    }

    fn render(&mut self, snapshot: &Snapshot) -> Ruleset {
        let (ruleset, warnings) = render(snapshot, Family::V4, &self.config, &mut self.ids);
        assert!(warnings.is_empty(), "{warnings:?}");
        ruleset
    }
}

fn element<'a>(ruleset: &'a Ruleset, container: &str, key: &str) -> Option<&'a Option<String>> {
    ruleset
        .elements
        .get(container)
        .and_then(|elements| elements.get(key))
}

#[test]
fn a_resync_without_changes_renders_nothing() {
    let mut renderer = Renderer::new();
    let snap = snapshot(&[web()], &[web_eps(&[("10.244.1.10", "n1")])]);
    let first = renderer.render(&snap);
    let second = renderer.render(&snap);
    assert_eq!(
        diff(Some(&first), &second, Family::V4, &renderer.config),
        ""
    );
}

fn pick_rules(select: &str) -> Vec<String> {
    vec![format!(
        "meta l4proto {{ tcp, udp, sctp }} dnat ip to meta mark . {select} map @buckets"
    )]
}

#[test]
fn incremental_diffs_touch_only_what_changed() {
    let mut renderer = Renderer::new();
    let two = renderer.render(&snapshot(
        &[web()],
        &[web_eps(&[("10.244.1.10", "n1"), ("10.244.2.10", "n2")])],
    ));
    assert_eq!(
        two.chains["pick_random_2"],
        pick_rules("numgen random mod 2")
    );
    assert_eq!(
        element(&two, "group-chains", "4096"),
        Some(&Some("goto pick_random_2".into()))
    );

    // Adding an endpoint: the group moves to the (preset) shared chain for three, one bucket is
    // added; no chain is created or deleted.
    let three = renderer.render(&snapshot(
        &[web()],
        &[web_eps(&[
            ("10.244.1.10", "n1"),
            ("10.244.2.10", "n2"),
            ("10.244.2.11", "n2"),
        ])],
    ));
    assert_eq!(
        diff(Some(&two), &three, Family::V4, &renderer.config),
        "delete element ip kube-lb group-chains { 4096 }\n\
         add element ip kube-lb group-chains { 4096 : goto pick_random_3 }\n\
         add element ip kube-lb buckets { 4096 . 2 : 10.244.2.11 . 8080 }\n"
    );

    // Replacing an endpoint keeps the count: one element changes, no chain is touched.
    let replaced = renderer.render(&snapshot(
        &[web()],
        &[web_eps(&[
            ("10.244.1.10", "n1"),
            ("10.244.2.10", "n2"),
            ("10.244.2.12", "n2"),
        ])],
    ));
    assert_eq!(
        diff(Some(&three), &replaced, Family::V4, &renderer.config),
        "delete element ip kube-lb buckets { 4096 . 2 }\n\
         add element ip kube-lb buckets { 4096 . 2 : 10.244.2.12 . 8080 }\n"
    );

    // Removing the Service: only elements; the preset chains stay.
    let gone = renderer.render(&snapshot(&[], &[]));
    assert_eq!(
        diff(Some(&replaced), &gone, Family::V4, &renderer.config),
        "delete element ip kube-lb group-chains { 4096 }\n\
         delete element ip kube-lb service-groups { 10.96.0.10 . tcp . 80 }\n\
         delete element ip kube-lb buckets { 4096 . 0, 4096 . 1, 4096 . 2 }\n\
         delete element ip kube-lb cluster-ips { 10.96.0.10 }\n"
    );
}

#[test]
fn groups_of_one_size_share_one_chain_and_services_own_none() {
    let mut renderer = Renderer::new();
    let services: Vec<_> = (0..50)
        .map(|i| {
            service("default", &format!("web{i}"), &format!("10.96.1.{i}"))
                .port("", "TCP", 80)
                .build()
        })
        .collect();
    let slices: Vec<_> = (0..50)
        .map(|i| {
            slice("default", &format!("web{i}"), &format!("web{i}-1"))
                .port("", "TCP", 8080)
                .endpoint(&format!("10.244.1.{i}"), "n1")
                .endpoint(&format!("10.244.2.{i}"), "n2")
                .build()
        })
        .collect();
    let ruleset = renderer.render(&snapshot(&services, &slices));
    let presets: Vec<String> = (1..=PRESET_GROUP_SIZES)
        .map(|count| format!("pick_random_{count}"))
        .collect();
    assert_eq!(
        ruleset.chains.keys().collect::<BTreeSet<_>>(),
        presets.iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(ruleset.container("group-chains").count(), 50);
    assert_eq!(ruleset.container("buckets").count(), 100);
}

#[test]
fn a_group_larger_than_the_presets_gets_a_chain_while_it_exists() {
    let mut renderer = Renderer::new();
    let many: Vec<(String, &str)> = (0..20).map(|i| (format!("10.244.1.{i}"), "n1")).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(ip, n)| (ip.as_str(), *n)).collect();
    let big = renderer.render(&snapshot(&[web()], &[web_eps(&many)]));
    assert_eq!(
        big.chains["pick_random_20"],
        pick_rules("numgen random mod 20")
    );
    let small = renderer.render(&snapshot(&[web()], &[web_eps(&many[..2])]));
    let text = diff(Some(&big), &small, Family::V4, &renderer.config);
    assert!(
        text.ends_with("delete chain ip kube-lb pick_random_20\n"),
        "{text}"
    );
    assert!(!text.contains("add chain"), "{text}");
}

#[test]
fn verdicts_follow_the_traffic_policy_matrix() {
    let lb = |builder: crate::testing::ServiceBuilder| {
        builder
            .node_port(30080)
            .load_balancer(&["192.0.2.10"])
            .build()
    };
    let base = || service("default", "web", "10.96.0.10").port("", "TCP", 80);
    let local_and_remote = web_eps(&[("10.244.1.10", "n1"), ("10.244.2.10", "n2")]);
    let remote_only = web_eps(&[("10.244.2.10", "n2")]);
    let cluster_ip = "10.96.0.10 . tcp . 80";
    let lb_ip = "192.0.2.10 . tcp . 80";
    let node_port = "tcp . 30080";
    // The first group rendered (all endpoints) gets id 1, the local group id 2.
    let cluster_group = || Some(Some("4096".to_owned()));
    let local_group = || Some(Some("8192".to_owned()));
    let member = || Some(None);
    let verdict = |text: &str| Some(Some(text.to_owned()));
    type Row = (&'static str, &'static str, Option<Option<String>>);
    let cases: Vec<(&str, Snapshot, Vec<Row>)> = vec![
        (
            "no endpoints: reject everywhere",
            snapshot(&[lb(base())], &[]),
            vec![
                (
                    "no-endpoint-services",
                    cluster_ip,
                    verdict("goto reject-chain"),
                ),
                ("no-endpoint-services", lb_ip, verdict("goto reject-chain")),
                (
                    "no-endpoint-nodeports",
                    node_port,
                    verdict("goto reject-chain"),
                ),
                ("service-groups", cluster_ip, None),
            ],
        ),
        (
            "cluster policy: everything to the cluster group, external masqueraded",
            snapshot(&[lb(base())], std::slice::from_ref(&local_and_remote)),
            vec![
                ("service-groups", cluster_ip, cluster_group()),
                ("service-groups", lb_ip, cluster_group()),
                ("nodeport-groups", node_port, cluster_group()),
                ("masq-frontends", lb_ip, member()),
                ("masq-nodeports", node_port, member()),
                ("local-frontends", lb_ip, None),
                ("no-endpoint-services", lb_ip, None),
            ],
        ),
        (
            "local policy with a local endpoint: outside clients to the local group, no masquerade",
            snapshot(
                &[lb(base().local(32000))],
                std::slice::from_ref(&local_and_remote),
            ),
            vec![
                ("local-frontends", lb_ip, member()),
                ("local-service-groups", lb_ip, local_group()),
                ("local-nodeports", node_port, member()),
                ("local-nodeport-groups", node_port, local_group()),
                // Pods and the node itself still use every endpoint.
                ("service-groups", lb_ip, cluster_group()),
                ("masq-frontends", lb_ip, None),
                ("masq-nodeports", node_port, None),
                ("no-endpoint-services", lb_ip, None),
            ],
        ),
        (
            "local policy without a local endpoint: pods still served, outside clients dropped",
            snapshot(
                &[lb(base().local(32000))],
                std::slice::from_ref(&remote_only),
            ),
            vec![
                ("local-frontends", lb_ip, member()),
                ("local-service-groups", lb_ip, None),
                ("service-groups", lb_ip, cluster_group()),
                ("no-endpoint-services", lb_ip, verdict("drop")),
                ("no-endpoint-nodeports", node_port, verdict("drop")),
                ("service-groups", cluster_ip, cluster_group()),
            ],
        ),
        (
            "internal Local without a local endpoint: ClusterIP dropped",
            snapshot(
                &[base().internal_local().build()],
                std::slice::from_ref(&remote_only),
            ),
            vec![
                ("no-endpoint-services", cluster_ip, verdict("drop")),
                ("service-groups", cluster_ip, None),
            ],
        ),
        (
            "source ranges: the LB IP is filtered, overlapping ranges merged",
            snapshot(
                &[lb(base().source_ranges(&[
                    "10.0.0.0/24",
                    "10.0.0.128/25",
                    "2001:db8::/32",
                ]))],
                std::slice::from_ref(&local_and_remote),
            ),
            vec![
                ("firewall-frontends", lb_ip, member()),
                (
                    "firewall-allow",
                    "192.0.2.10 . tcp . 80 . 10.0.0.0/24",
                    member(),
                ),
                (
                    "firewall-allow",
                    "192.0.2.10 . tcp . 80 . 10.0.0.128/25",
                    None,
                ),
                ("firewall-frontends", cluster_ip, None),
            ],
        ),
    ];
    for (what, snap, rows) in cases {
        let ruleset = Renderer::new().render(&snap);
        for (container, key, expected) in rows {
            assert_eq!(
                element(&ruleset, container, key),
                expected.as_ref(),
                "{what}: {container}[{key}]"
            );
        }
    }
}

#[test]
fn hairpin_pairs_exist_only_when_pod_traffic_is_not_masqueraded() {
    let snap = snapshot(&[web()], &[web_eps(&[("10.244.1.10", "n1")])]);
    let without = Renderer::new().render(&snap);
    assert_eq!(without.container("hairpin").count(), 0);
    let mut renderer = Renderer::new();
    renderer.config.cluster_cidrs = vec!["10.244.0.0/16".parse().unwrap()];
    let with = renderer.render(&snap);
    assert_eq!(
        element(&with, "hairpin", "10.244.1.10 . 10.244.1.10"),
        Some(&None)
    );
    let text = diff(None, &with, Family::V4, &renderer.config);
    assert!(
        text.contains("ip saddr . ip daddr @hairpin masquerade"),
        "{text}"
    );
}

#[test]
fn schedulers_shape_the_pick_chains() {
    let eps = web_eps(&[("10.244.1.10", "n1"), ("10.244.2.10", "n2")]);
    for (scheduler, chain, select) in [
        (NftScheduler::Random, "pick_random_2", "numgen random mod 2"),
        (
            NftScheduler::SourceHash,
            "pick_sh_2",
            "jhash ip saddr mod 2 seed 0x6b6c6221",
        ),
    ] {
        let mut renderer = Renderer::new();
        renderer.config.scheduler = scheduler;
        let ruleset = renderer.render(&snapshot(&[web()], std::slice::from_ref(&eps)));
        assert_eq!(ruleset.chains[chain], pick_rules(select), "{scheduler:?}");
    }
    // Round robin keeps one counter per group: its chain is the group's own.
    let mut renderer = Renderer::new();
    renderer.config.scheduler = NftScheduler::RoundRobin;
    let ruleset = renderer.render(&snapshot(&[web()], std::slice::from_ref(&eps)));
    assert_eq!(
        ruleset.chains["rr_1"],
        vec!["meta mark set numgen inc mod 2 offset 4096 goto dnat-chosen"]
    );
    assert_eq!(
        element(&ruleset, "endpoints", "4097"),
        Some(&Some("10.244.2.10 . 8080".into()))
    );
}

#[test]
fn affinity_remembers_slots_that_survive_endpoint_changes() {
    let mut renderer = Renderer::new();
    let sticky = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .affinity(60)
        .build();
    let three = [
        ("10.244.1.10", "n1"),
        ("10.244.2.10", "n2"),
        ("10.244.2.11", "n2"),
    ];
    let before = renderer.render(&snapshot(std::slice::from_ref(&sticky), &[web_eps(&three)]));
    let remember = "update @affinity { meta mark & 0x7ffff000 . ip saddr timeout 60s : meta mark }";
    assert_eq!(
        before.chains["aff_random_3_60"],
        vec![
            format!(
                "meta mark set meta mark . ip saddr map @affinity {remember} goto dnat-remembered"
            ),
            "goto affpick_random_3_60".to_owned(),
        ]
    );
    assert_eq!(
        before.chains["affpick_random_3_60"],
        vec![format!(
            "meta mark set meta mark . numgen random mod 3 map @slots {remember} goto dnat-chosen"
        )]
    );
    assert_eq!(
        element(&before, "group-repick", "4096"),
        Some(&Some("goto affpick_random_3_60".into()))
    );

    // The first endpoint goes: the others keep their slot marks (and so their clients), the
    // emptied slot disappears and the buckets point at the survivors.
    let after = renderer.render(&snapshot(
        std::slice::from_ref(&sticky),
        &[web_eps(&three[1..])],
    ));
    let endpoints: Vec<(&String, &Option<String>)> = after.container("endpoints").collect();
    assert_eq!(
        endpoints,
        vec![
            (&"4097".to_owned(), &Some("10.244.2.10 . 8080".to_owned())),
            (&"4098".to_owned(), &Some("10.244.2.11 . 8080".to_owned())),
        ]
    );
    let slots: Vec<(&String, &Option<String>)> = after.container("slots").collect();
    assert_eq!(
        slots,
        vec![
            (&"4096 . 0".to_owned(), &Some("4097".to_owned())),
            (&"4096 . 1".to_owned(), &Some("4098".to_owned())),
        ]
    );
    // A newcomer takes the emptied slot.
    let refilled = renderer.render(&snapshot(
        std::slice::from_ref(&sticky),
        &[web_eps(&[
            ("10.244.2.10", "n2"),
            ("10.244.2.11", "n2"),
            ("10.244.3.10", "n2"),
        ])],
    ));
    assert_eq!(
        element(&refilled, "endpoints", "4096"),
        Some(&Some("10.244.3.10 . 8080".into()))
    );
    let text = diff(Some(&after), &refilled, Family::V4, &renderer.config);
    assert!(!text.contains("endpoints { 4097"), "{text}");
}

#[test]
fn full_sync_recreates_the_table_in_one_transaction() {
    let mut renderer = Renderer::new();
    let ruleset = renderer.render(&snapshot(&[web()], &[web_eps(&[("10.244.1.10", "n1")])]));
    let text = diff(None, &ruleset, Family::V4, &renderer.config);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..3],
        &[
            "add table ip kube-lb",
            "delete table ip kube-lb",
            "add table ip kube-lb"
        ]
    );
    let position = |needle: &str| {
        lines
            .iter()
            .position(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("{needle}"))
    };
    assert!(
        position("add rule ip kube-lb pick_random_1")
            < position("add element ip kube-lb group-chains")
    );
    // Chains bind the big maps before they hold elements (each binding checks every element).
    assert!(
        position("add rule ip kube-lb pick_random_16") < position("add element ip kube-lb buckets")
    );
    assert!(
        position("add element ip kube-lb group-chains")
            < position("add element ip kube-lb service-groups")
    );
}

#[test]
fn capacity_is_twice_the_elements_as_a_power_of_two_and_never_small() {
    // (elements, declared size)
    let cases = [
        (0, MIN_CAPACITY),
        (1, MIN_CAPACITY),
        (MIN_CAPACITY / 2, MIN_CAPACITY),
        (MIN_CAPACITY / 2 + 1, 2 * MIN_CAPACITY),
        (250_000, 524_288),
        (262_144, 524_288),
        (262_145, 1_048_576),
    ];
    for (elements, size) in cases {
        assert_eq!(capacity(elements), size, "{elements} elements");
    }
}

#[test]
fn a_full_sync_declares_each_hash_container_with_room_for_twice_its_elements() {
    let mut renderer = Renderer::new();
    let ips: Vec<(String, &str)> = (0..600)
        .map(|i| (format!("10.244.{}.{}", i / 200, i % 200 + 1), "n1"))
        .collect();
    let ips: Vec<(&str, &str)> = ips.iter().map(|(ip, node)| (ip.as_str(), *node)).collect();
    let ruleset = renderer.render(&snapshot(&[web()], &[web_eps(&ips)]));
    assert_eq!(ruleset.len_of("buckets"), 600);
    let text = diff(None, &ruleset, Family::V4, &renderer.config);
    let declaration = |name: &str| {
        text.lines()
            .find(|line| {
                line.starts_with(&format!("add map ip kube-lb {name} {{"))
                    || line.starts_with(&format!("add set ip kube-lb {name} {{"))
            })
            .unwrap_or_else(|| panic!("{name} declared"))
            .to_owned()
    };
    assert!(declaration("buckets").ends_with(" size 2048; }"), "{text}");
    assert!(declaration("service-groups").ends_with(&format!(" size {MIN_CAPACITY}; }}")));
    // Interval sets and the dynamic affinity map keep their own declarations.
    assert!(declaration("firewall-allow").ends_with("flags interval; }"));
    assert!(declaration("affinity").ends_with(&format!("size {}; }}", 1 << 20)));
    let sizes = ruleset.capacities();
    assert!(ruleset.fits(&sizes));
    assert_eq!(sizes.get("buckets"), Some(&2048));
}

#[test]
fn udp_cleanup_lists_gone_endpoints_and_revived_frontends() {
    let dns = || {
        service("default", "dns", "10.96.0.53")
            .port("", "UDP", 53)
            .build()
    };
    let eps = |ips: &[&str]| {
        let mut builder = slice("default", "dns", "dns-1").port("", "UDP", 5353);
        for ip in ips {
            builder = builder.endpoint(ip, "n1");
        }
        builder.build()
    };
    let none = snapshot(&[dns()], &[]);
    let one = snapshot(&[dns()], &[eps(&["10.244.1.10"])]);
    let other = snapshot(&[dns()], &[eps(&["10.244.1.11"])]);
    let revived = udp_cleanup(&none, &one);
    assert!(revived.gone_endpoints.is_empty());
    assert_eq!(
        revived.revived_frontends,
        BTreeSet::from([(Some("10.96.0.53".parse().unwrap()), 53)])
    );
    let swapped = udp_cleanup(&one, &other);
    assert_eq!(
        swapped.gone_endpoints,
        BTreeSet::from([EndpointAddr {
            ip: "10.244.1.10".parse().unwrap(),
            port: 5353
        }])
    );
    assert!(swapped.revived_frontends.is_empty());
    assert_eq!(udp_cleanup(&one, &one), UdpCleanup::default());
}

/// `count` endpoints of the web Service, all on n1.
fn web_endpoints(count: u8) -> Vec<(String, &'static str)> {
    (1..=count)
        .map(|i| (format!("10.244.1.{i}"), "n1"))
        .collect()
}

fn web_eps_owned(
    endpoints: &[(String, &'static str)],
) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let borrowed: Vec<(&str, &str)> = endpoints
        .iter()
        .map(|(ip, node)| (ip.as_str(), *node))
        .collect();
    web_eps(&borrowed)
}

#[test]
fn maglev_groups_own_their_table_and_share_one_chain() {
    let size = TableSize::new(251).unwrap();
    let mut renderer = Renderer::new();
    renderer.config.scheduler = NftScheduler::Maglev(size);
    let five = web_endpoints(5);
    let ruleset = renderer.render(&snapshot(&[web()], &[web_eps_owned(&five)]));
    assert_eq!(
        ruleset.chains["pick_maglev_251"],
        pick_rules("jhash ip saddr . th sport mod 251 seed 0x6d61676c")
    );
    assert_eq!(
        element(&ruleset, "group-chains", "4096"),
        Some(&Some("goto pick_maglev_251".into()))
    );
    // The buckets are the Maglev table of the endpoint set, entry for entry.
    let endpoints: Vec<EndpointAddr> = five
        .iter()
        .map(|(ip, _)| EndpointAddr {
            ip: ip.parse().unwrap(),
            port: 8080,
        })
        .collect();
    let table = maglev::Table::new(&endpoints, size);
    let buckets: Vec<(&String, &Option<String>)> = ruleset.container("buckets").collect();
    assert_eq!(buckets.len(), 251);
    for (bucket, endpoint) in table.iter().enumerate() {
        assert_eq!(
            element(&ruleset, "buckets", &format!("4096 . {bucket}")),
            Some(&Some(format!("{} . 8080", endpoint.ip)))
        );
    }
    // One endpoint needs no table.
    let single = renderer.render(&snapshot(&[web()], &[web_eps_owned(&five[..1])]));
    assert_eq!(single.container("buckets").count(), 1);
    assert_eq!(
        element(&single, "group-chains", "4096"),
        Some(&Some("goto pick_maglev_1".into()))
    );
}

#[test]
fn a_maglev_endpoint_change_is_element_updates_of_the_moved_entries_only() {
    let size = TableSize::default();
    let entries = size.get() as usize;
    let mut renderer = Renderer::new();
    renderer.config.scheduler = NftScheduler::Maglev(size);
    let ten = web_endpoints(10);
    let before = renderer.render(&snapshot(&[web()], &[web_eps_owned(&ten)]));
    for (change, endpoints) in [("removal", &ten[..9]), ("addition", &web_endpoints(11)[..])] {
        let mut renderer = Renderer {
            ids: renderer.ids.clone(),
            config: renderer.config.clone(),
        };
        let after = renderer.render(&snapshot(&[web()], &[web_eps_owned(endpoints)]));
        let text = diff(Some(&before), &after, Family::V4, &renderer.config);
        assert!(
            text.lines()
                .all(|line| line.starts_with("delete element ip kube-lb buckets")
                    || line.starts_with("add element ip kube-lb buckets")
                    || line.starts_with("delete element ip kube-lb hairpin")
                    || line.starts_with("add element ip kube-lb hairpin")),
            "{change}: only bucket elements change:\n{text}"
        );
        let moved = after
            .container("buckets")
            .filter(|(key, value)| element(&before, "buckets", key) != Some(*value))
            .count();
        let bound = (entries as f64 * (1.0 / 10.0 + 0.02)) as usize;
        assert!(
            moved <= bound,
            "{change}: {moved} of {entries} entries moved"
        );
        assert!(moved >= entries / 11, "{change}: {moved}");
    }
}

#[test]
fn maglev_with_affinity_maps_table_entries_to_slots() {
    let size = TableSize::new(251).unwrap();
    let mut renderer = Renderer::new();
    renderer.config.scheduler = NftScheduler::Maglev(size);
    let sticky = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .affinity(60)
        .build();
    let three = web_endpoints(3);
    let ruleset = renderer.render(&snapshot(
        std::slice::from_ref(&sticky),
        &[web_eps_owned(&three)],
    ));
    assert!(
        ruleset.chains["affpick_maglev_251_60"][0].starts_with(
            "meta mark set meta mark . jhash ip saddr . th sport mod 251 seed 0x6d61676c map @slots"
        ),
        "{:?}",
        ruleset.chains
    );
    assert_eq!(ruleset.container("slots").count(), 251);
    // Every bucket's slot holds the endpoint the table names for it.
    let endpoints: Vec<EndpointAddr> = three
        .iter()
        .map(|(ip, _)| EndpointAddr {
            ip: ip.parse().unwrap(),
            port: 8080,
        })
        .collect();
    let table = maglev::Table::new(&endpoints, size);
    for (bucket, endpoint) in table.iter().enumerate() {
        let Some(Some(slot)) = element(&ruleset, "slots", &format!("4096 . {bucket}")) else {
            panic!("bucket {bucket} has no slot");
        };
        assert_eq!(
            element(&ruleset, "endpoints", slot),
            Some(&Some(format!("{} . 8080", endpoint.ip)))
        );
    }
}

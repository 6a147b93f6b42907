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

#[test]
fn incremental_diffs_touch_only_what_changed() {
    let mut renderer = Renderer::new();
    let two = renderer.render(&snapshot(
        &[web()],
        &[web_eps(&[("10.244.1.10", "n1"), ("10.244.2.10", "n2")])],
    ));
    assert_eq!(
        two.chains["cl_default_web_tcp_80"],
        vec!["meta mark set numgen random mod 2 offset 4096 goto dispatch"]
    );

    // Adding an endpoint: the group chain's modulus and one element.
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
        "flush chain ip kube-lb cl_default_web_tcp_80\n\
         add rule ip kube-lb cl_default_web_tcp_80 meta mark set numgen random mod 3 offset 4096 goto dispatch\n\
         add element ip kube-lb endpoints { 4098 : 10.244.2.11 . 8080 }\n"
    );

    // Replacing an endpoint keeps the count: only the map element changes.
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
        "delete element ip kube-lb endpoints { 4098 }\n\
         add element ip kube-lb endpoints { 4098 : 10.244.2.12 . 8080 }\n"
    );

    // Removing the Service: elements first, then the chain.
    let gone = renderer.render(&snapshot(&[], &[]));
    assert_eq!(
        diff(Some(&replaced), &gone, Family::V4, &renderer.config),
        "delete element ip kube-lb service-ips { 10.96.0.10 . tcp . 80 }\n\
         delete element ip kube-lb endpoints { 4096, 4097, 4098 }\n\
         delete element ip kube-lb cluster-ips { 10.96.0.10 }\n\
         delete chain ip kube-lb cl_default_web_tcp_80\n"
    );
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
    let goto = |chain: &str| Some(Some(format!("goto {chain}")));
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
                ("service-ips", cluster_ip, None),
            ],
        ),
        (
            "cluster policy: everything to the cluster group, external masqueraded",
            snapshot(&[lb(base())], std::slice::from_ref(&local_and_remote)),
            vec![
                ("service-ips", cluster_ip, goto("cl_default_web_tcp_80")),
                ("service-ips", lb_ip, goto("cl_default_web_tcp_80")),
                (
                    "service-nodeports",
                    node_port,
                    goto("cl_default_web_tcp_80"),
                ),
                ("masq-frontends", lb_ip, Some(None)),
                ("masq-nodeports", node_port, Some(None)),
                ("no-endpoint-services", lb_ip, None),
            ],
        ),
        (
            "local policy with a local endpoint: external entry chain, no masquerade",
            snapshot(
                &[lb(base().local(32000))],
                std::slice::from_ref(&local_and_remote),
            ),
            vec![
                ("service-ips", lb_ip, goto("ext_default_web_tcp_80")),
                (
                    "service-nodeports",
                    node_port,
                    goto("ext_default_web_tcp_80"),
                ),
                ("masq-frontends", lb_ip, None),
                ("no-endpoint-services", lb_ip, None),
            ],
        ),
        (
            "local policy without a local endpoint: short-circuits stay, the rest is dropped",
            snapshot(
                &[lb(base().local(32000))],
                std::slice::from_ref(&remote_only),
            ),
            vec![
                ("service-ips", lb_ip, goto("ext_default_web_tcp_80")),
                ("no-endpoint-services", lb_ip, verdict("drop")),
                ("no-endpoint-nodeports", node_port, verdict("drop")),
                ("service-ips", cluster_ip, goto("cl_default_web_tcp_80")),
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
                ("service-ips", cluster_ip, None),
            ],
        ),
        (
            "source ranges: LB IP goes through the firewall chain",
            snapshot(
                &[lb(base().source_ranges(&["10.0.0.0/24"]))],
                std::slice::from_ref(&local_and_remote),
            ),
            vec![("firewall-ips", lb_ip, goto("fw_default_web_tcp_80"))],
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
    let ruleset = Renderer::new().render(&snapshot(
        &[lb(base().source_ranges(&["10.0.0.0/24"]))],
        &[local_and_remote],
    ));
    assert_eq!(
        ruleset.chains["fw_default_web_tcp_80"],
        vec!["ip saddr != { 10.0.0.0/24 } drop"]
    );
}

#[test]
fn schedulers_and_affinity_shape_the_group_chain() {
    let eps = web_eps(&[("10.244.1.10", "n1"), ("10.244.2.10", "n2")]);
    let cases = [
        (
            NftScheduler::Random,
            "meta mark set numgen random mod 2 offset 4096 goto dispatch",
        ),
        (
            NftScheduler::RoundRobin,
            "meta mark set numgen inc mod 2 offset 4096 goto dispatch",
        ),
        (
            NftScheduler::SourceHash,
            "meta mark set jhash ip saddr mod 2 seed 0x6b6c6221 offset 4096 goto dispatch",
        ),
    ];
    for (scheduler, rule) in cases {
        let mut renderer = Renderer::new();
        renderer.config.scheduler = scheduler;
        let ruleset = renderer.render(&snapshot(&[web()], std::slice::from_ref(&eps)));
        assert_eq!(
            ruleset.chains["cl_default_web_tcp_80"],
            vec![rule.to_owned()],
            "{scheduler:?}"
        );
    }

    let mut renderer = Renderer::new();
    let sticky = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .affinity(60)
        .build();
    let before = renderer.render(&snapshot(
        std::slice::from_ref(&sticky),
        std::slice::from_ref(&eps),
    ));
    let map = "aff_cl_default_web_tcp_80_60";
    assert_eq!(
        before.chains["cl_default_web_tcp_80"],
        vec![
            format!(
                "meta mark set ip saddr map @{map} update @{map} {{ ip saddr : meta mark }} goto dispatch"
            ),
            format!(
                "meta mark set numgen random mod 2 offset 4096 update @{map} {{ ip saddr : meta mark }} goto dispatch"
            ),
        ]
    );
    let full = diff(None, &before, Family::V4, &renderer.config);
    assert!(full.contains(&format!(
        "add map ip kube-lb {map} {{ type ipv4_addr : mark; flags dynamic,timeout; timeout 60s; }}"
    )));
    // Swapping an endpoint invalidates remembered buckets: the map is flushed.
    let after = renderer.render(&snapshot(
        &[sticky],
        &[web_eps(&[("10.244.1.10", "n1"), ("10.244.2.11", "n2")])],
    ));
    assert!(
        diff(Some(&before), &after, Family::V4, &renderer.config)
            .contains(&format!("flush map ip kube-lb {map}\n"))
    );
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
        position("add chain ip kube-lb cl_default_web_tcp_80")
            < position("add element ip kube-lb service-ips")
    );
    assert!(
        position("add rule ip kube-lb cl_default_web_tcp_80")
            < position("add element ip kube-lb endpoints")
    );
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

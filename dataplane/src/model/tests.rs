use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::{EndpointAddress, EndpointPort, EndpointSubset, Endpoints};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::testing::{node, service, slice};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn ep(text: &str, port: u16) -> EndpointAddr {
    EndpointAddr { ip: ip(text), port }
}

fn index(node_name: &str, cidrs: &[&str]) -> Index {
    let mut index = Index::new(IndexConfig {
        node_name: node_name.into(),
        nodeport_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        allow_loopback_endpoints: false,
    });
    index.apply_node(&node("n1", "za", "r1", &["10.0.0.11", "192.168.1.11"]));
    index.apply_node(&node("n2", "za", "r1", &["10.0.0.12"]));
    index.apply_node(&node("n3", "zb", "r1", &["10.0.0.13"]));
    index.apply_node(&node("n4", "zc", "r2", &["10.0.0.14"]));
    index
}

fn port_of<'a>(
    snapshot: &'a Snapshot,
    name: &str,
    port: u16,
    protocol: Protocol,
) -> &'a ServicePortModel {
    snapshot
        .ports
        .get(&PortKey {
            service: ServiceKey::new("default", name),
            protocol,
            port,
        })
        .unwrap_or_else(|| panic!("no port {name}:{port}"))
}

#[test]
fn frontends_come_from_spec_and_status() {
    let mut index = index("n1", &["10.0.0.0/24"]);
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .node_port(30080)
            .load_balancer(&["192.0.2.10"])
            .external_ips(&["203.0.113.10"])
            .source_ranges(&["10.0.0.100/32"])
            .affinity(30)
            .build(),
    );
    index.apply_endpoint_slice(
        &slice("default", "web", "web-1")
            .port("http", "TCP", 8080)
            .endpoint("10.244.1.10", "n1")
            .build(),
    );
    let snapshot = index.snapshot();
    assert_eq!(
        snapshot.nodeport_addresses,
        vec![ip("10.0.0.11")],
        "filtered by --nodeport-addresses"
    );
    let web = port_of(&snapshot, "web", 80, Protocol::Tcp);
    assert_eq!(web.cluster_ips, vec![ip("10.96.0.10")]);
    assert_eq!(web.node_port, Some(30080));
    assert_eq!(web.load_balancer_ips, vec![ip("192.0.2.10")]);
    assert_eq!(web.external_ips, vec![ip("203.0.113.10")]);
    assert_eq!(web.source_ranges, vec!["10.0.0.100/32".parse().unwrap()]);
    assert_eq!(web.affinity_timeout, Some(Duration::from_secs(30)));
    assert_eq!(web.cluster_endpoints, vec![ep("10.244.1.10", 8080)]);
}

#[test]
fn nodeport_addresses_default_to_every_node_address() {
    let index = index("n1", &[]);
    assert_eq!(
        index.snapshot().nodeport_addresses,
        vec![ip("10.0.0.11"), ip("192.168.1.11")]
    );
}

#[test]
fn skipped_services() {
    let cases = [
        (
            "headless",
            service("default", "s", "None").port("", "TCP", 80).build(),
        ),
        (
            "external-name",
            service("default", "s", "10.96.0.1")
                .port("", "TCP", 80)
                .type_("ExternalName")
                .build(),
        ),
        (
            "other proxy",
            service("default", "s", "10.96.0.1")
                .port("", "TCP", 80)
                .label(SERVICE_PROXY_NAME_LABEL, "x")
                .build(),
        ),
        (
            "headless label",
            service("default", "s", "10.96.0.1")
                .port("", "TCP", 80)
                .label(HEADLESS_LABEL, "")
                .build(),
        ),
    ];
    for (what, svc) in cases {
        let mut index = index("n1", &[]);
        index.apply_service(&svc);
        assert!(
            index.snapshot().ports.is_empty(),
            "{what} must not be proxied"
        );
    }
}

#[test]
fn endpoint_conditions_and_terminating_fallback() {
    // (endpoints as (ip, ready, serving, terminating), expected usable)
    type Conditions<'a> = Vec<(&'a str, bool, bool, bool)>;
    let cases: Vec<(Conditions, Vec<&str>)> = vec![
        (
            vec![
                ("10.244.1.1", true, true, false),
                ("10.244.1.2", false, false, false),
            ],
            vec!["10.244.1.1"],
        ),
        (
            vec![
                ("10.244.1.1", true, true, false),
                ("10.244.1.2", false, true, true),
            ],
            vec!["10.244.1.1"],
        ),
        (
            vec![
                ("10.244.1.1", false, true, true),
                ("10.244.1.2", false, false, true),
            ],
            vec!["10.244.1.1"],
        ),
        (vec![("10.244.1.1", false, false, false)], vec![]),
    ];
    for (endpoints, expected) in cases {
        let mut index = index("n1", &[]);
        index.apply_service(
            &service("default", "web", "10.96.0.10")
                .port("", "TCP", 80)
                .build(),
        );
        let mut builder = slice("default", "web", "web-1").port("", "TCP", 8080);
        for (address, ready, serving, terminating) in &endpoints {
            builder = builder.endpoint_with(address, "n1", *ready, *serving, *terminating);
        }
        index.apply_endpoint_slice(&builder.build());
        let snapshot = index.snapshot();
        let web = port_of(&snapshot, "web", 80, Protocol::Tcp);
        let expected: Vec<EndpointAddr> = expected.iter().map(|a| ep(a, 8080)).collect();
        assert_eq!(web.cluster_endpoints, expected, "{endpoints:?}");
        assert_eq!(web.local_endpoints, expected, "{endpoints:?}");
        assert_eq!(web.has_endpoints, !expected.is_empty());
    }
}

#[test]
fn named_target_ports_resolve_per_slice() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .port("dns", "UDP", 53)
            .build(),
    );
    // Two slices: pods that number the named port differently.
    index.apply_endpoint_slice(
        &slice("default", "web", "a")
            .port("http", "TCP", 8080)
            .port("dns", "UDP", 5353)
            .endpoint("10.244.1.1", "n1")
            .build(),
    );
    index.apply_endpoint_slice(
        &slice("default", "web", "b")
            .port("http", "TCP", 9090)
            .endpoint("10.244.2.1", "n2")
            .build(),
    );
    let snapshot = index.snapshot();
    assert_eq!(
        port_of(&snapshot, "web", 80, Protocol::Tcp).cluster_endpoints,
        vec![ep("10.244.1.1", 8080), ep("10.244.2.1", 9090)]
    );
    assert_eq!(
        port_of(&snapshot, "web", 53, Protocol::Udp).cluster_endpoints,
        vec![ep("10.244.1.1", 5353)]
    );
}

#[test]
fn traffic_policies_split_local_and_cluster() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("", "TCP", 80)
            .node_port(30080)
            .load_balancer(&["192.0.2.1"])
            .local(32000)
            .internal_local()
            .build(),
    );
    index.apply_endpoint_slice(
        &slice("default", "web", "a")
            .port("", "TCP", 8080)
            .endpoint("10.244.1.1", "n1")
            .endpoint("10.244.2.1", "n2")
            .endpoint_with("10.244.1.2", "n1", false, true, true)
            .build(),
    );
    let snapshot = index.snapshot();
    let web = port_of(&snapshot, "web", 80, Protocol::Tcp);
    assert_eq!(web.external_policy, TrafficPolicy::Local);
    assert_eq!(web.external_endpoints(), &[ep("10.244.1.1", 8080)]);
    assert_eq!(web.internal_endpoints(), &[ep("10.244.1.1", 8080)]);
    assert_eq!(
        web.cluster_endpoints,
        vec![ep("10.244.1.1", 8080), ep("10.244.2.1", 8080)]
    );
    let health = &snapshot.health_checks[&ServiceKey::new("default", "web")];
    assert_eq!(
        health,
        &HealthCheckModel {
            node_port: 32000,
            local_ready_endpoints: 1
        }
    );

    // On n3 nothing is local: health reports 0 and external endpoints are empty.
    let mut remote = index_with(&index_objects(), "n3");
    let snapshot = remote.snapshot();
    assert_eq!(
        snapshot.health_checks[&ServiceKey::new("default", "web")].local_ready_endpoints,
        0
    );
    assert!(
        port_of(&snapshot, "web", 80, Protocol::Tcp)
            .external_endpoints()
            .is_empty()
    );
    assert!(
        !remote.apply_node(&node("n3", "zb", "r1", &["10.0.0.13"])),
        "unchanged node"
    );
}

fn index_objects() -> (
    k8s_openapi::api::core::v1::Service,
    k8s_openapi::api::discovery::v1::EndpointSlice,
) {
    (
        service("default", "web", "10.96.0.10")
            .port("", "TCP", 80)
            .node_port(30080)
            .load_balancer(&["192.0.2.1"])
            .local(32000)
            .build(),
        slice("default", "web", "a")
            .port("", "TCP", 8080)
            .endpoint("10.244.1.1", "n1")
            .endpoint("10.244.2.1", "n2")
            .build(),
    )
}

fn index_with(
    objects: &(
        k8s_openapi::api::core::v1::Service,
        k8s_openapi::api::discovery::v1::EndpointSlice,
    ),
    node_name: &str,
) -> Index {
    let mut index = index(node_name, &[]);
    index.apply_service(&objects.0);
    index.apply_endpoint_slice(&objects.1);
    index
}

#[test]
fn topology_keys_from_the_annotation() {
    let keys = "kubernetes.io/hostname,topology.kubernetes.io/zone,topology.kubernetes.io/region";
    // (endpoint nodes, keys, expected endpoint nodes) as seen from n1 (za, r1).
    let cases: Vec<(&[&str], String, Vec<&str>)> = vec![
        (&["n1", "n2", "n3", "n4"], keys.into(), vec!["n1"]),
        (&["n2", "n3", "n4"], keys.into(), vec!["n2"]),
        (&["n3", "n4"], keys.into(), vec!["n3"]),
        (&["n4"], keys.into(), vec![]),
        (&["n4"], format!("{keys},*"), vec!["n4"]),
        // Invalid keys ("*" not last) are ignored with a warning: the Service is not proxied.
    ];
    let node_ip = |name: &str| format!("10.244.{}.1", &name[1..]);
    for (nodes, annotation, expected) in cases {
        let mut index = index("n1", &[]);
        index.apply_service(
            &service("default", "web", "10.96.0.10")
                .port("", "TCP", 80)
                .annotate(topology::TOPOLOGY_KEYS_ANNOTATION, &annotation)
                .build(),
        );
        let mut builder = slice("default", "web", "a").port("", "TCP", 8080);
        for node in nodes {
            builder = builder.endpoint(&node_ip(node), node);
        }
        index.apply_endpoint_slice(&builder.build());
        let snapshot = index.snapshot();
        let web = port_of(&snapshot, "web", 80, Protocol::Tcp);
        let expected: Vec<EndpointAddr> = expected.iter().map(|n| ep(&node_ip(n), 8080)).collect();
        assert_eq!(web.cluster_endpoints, expected, "{nodes:?} {annotation}");
        assert!(web.has_endpoints);
    }
}

/// Seed 002's four manifests, verbatim, as the embedded API server stores them: admission
/// keeps `spec.topologyKeys` and mirrors it into the annotation, which is all a typed 1.33
/// Service still carries. Routing from n1 (zone za, region r1) follows each example's text.
#[test]
fn seed_002_manifests_route_by_topology_after_admission() {
    let seeds = [
        (
            include_str!(
                "../../../annotations/tests/fixtures/seeds/002-topology-hostname-only.yaml"
            ),
            [vec!["n1"], vec![], vec![]],
        ),
        (
            include_str!(
                "../../../annotations/tests/fixtures/seeds/002-topology-prefer-hostname.yaml"
            ),
            [vec!["n1"], vec!["n3", "n4"], vec!["n4"]],
        ),
        (
            include_str!("../../../annotations/tests/fixtures/seeds/002-topology-zone-region.yaml"),
            [vec!["n1", "n2"], vec!["n3"], vec![]],
        ),
        (
            include_str!("../../../annotations/tests/fixtures/seeds/002-topology-all.yaml"),
            [vec!["n1"], vec!["n3"], vec!["n4"]],
        ),
    ];
    let endpoint_sets: [&[&str]; 3] = [&["n1", "n2", "n3", "n4"], &["n3", "n4"], &["n4"]];
    let node_ip = |name: &str| format!("10.244.{}.1", &name[1..]);
    for (yaml, expected) in seeds {
        let mut object: serde_json::Value = serde_yaml_ng::from_str(yaml).unwrap();
        object["metadata"]["namespace"] = serde_json::json!("default");
        let mut allocator = kube_lb_apiserver::services::Allocator::new(
            kube_lb_apiserver::services::default_service_cidr(),
            kube_lb_apiserver::services::DEFAULT_NODE_PORT_RANGE,
        );
        kube_lb_apiserver::services::admit(None, &mut object, &mut allocator).unwrap();
        let typed: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(object.clone()).unwrap();
        for (nodes, want) in endpoint_sets.iter().zip(&expected) {
            let mut index = index("n1", &[]);
            index.apply_service(&typed);
            let mut builder = slice("default", "my-service", "a").port("", "TCP", 9376);
            for node in *nodes {
                builder = builder.endpoint(&node_ip(node), node);
            }
            index.apply_endpoint_slice(&builder.build());
            let snapshot = index.snapshot();
            let got = &port_of(&snapshot, "my-service", 80, Protocol::Tcp).cluster_endpoints;
            let want: Vec<EndpointAddr> = want.iter().map(|n| ep(&node_ip(n), 9376)).collect();
            assert_eq!(
                got, &want,
                "{} with endpoints on {nodes:?}",
                object["spec"]["topologyKeys"]
            );
        }
    }
}

#[test]
fn invalid_topology_keys_skip_the_service_with_a_warning() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("", "TCP", 80)
            .annotate(
                topology::TOPOLOGY_KEYS_ANNOTATION,
                "*,kubernetes.io/hostname",
            )
            .build(),
    );
    assert!(index.snapshot().ports.is_empty());
    assert!(index.warnings()[&ServiceKey::new("default", "web")].contains("last"));
}

#[test]
fn load_balancer_proxy_mode_ingress_is_not_programmed() {
    let mut svc = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .load_balancer(&["192.0.2.1", "192.0.2.2"])
        .build();
    if let Some(ingress) = svc
        .status
        .as_mut()
        .and_then(|s| s.load_balancer.as_mut())
        .and_then(|lb| lb.ingress.as_mut())
    {
        ingress[1].ip_mode = Some("Proxy".into());
    }
    let mut index = index("n1", &[]);
    index.apply_service(&svc);
    assert_eq!(
        port_of(&index.snapshot(), "web", 80, Protocol::Tcp).load_balancer_ips,
        vec![ip("192.0.2.1")]
    );
}

#[test]
fn selector_less_services_use_endpoints_objects() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "ext", "10.96.0.20")
            .port("db", "TCP", 5432)
            .no_selector()
            .build(),
    );
    let endpoints = Endpoints {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some("ext".into()),
            ..ObjectMeta::default()
        },
        subsets: Some(vec![EndpointSubset {
            addresses: Some(vec![EndpointAddress {
                ip: "172.16.0.5".into(),
                ..EndpointAddress::default()
            }]),
            not_ready_addresses: Some(vec![EndpointAddress {
                ip: "172.16.0.6".into(),
                ..EndpointAddress::default()
            }]),
            ports: Some(vec![EndpointPort {
                name: Some("db".into()),
                port: 5432,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }]),
        }]),
    };
    assert!(index.apply_endpoints(&endpoints));
    assert!(
        !index.apply_endpoints(&endpoints),
        "same object again is no change"
    );
    assert_eq!(
        port_of(&index.snapshot(), "ext", 5432, Protocol::Tcp).cluster_endpoints,
        vec![ep("172.16.0.5", 5432)]
    );
}

#[test]
fn updates_report_changes_only() {
    let mut index = index("n1", &[]);
    let svc = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .build();
    let eps = slice("default", "web", "a")
        .port("", "TCP", 8080)
        .endpoint("10.244.1.1", "n1")
        .build();
    assert!(index.apply_service(&svc));
    assert!(index.apply_endpoint_slice(&eps));
    // A relist delivers the same objects (new resourceVersion, same content).
    let mut relisted = svc.clone();
    relisted.metadata.resource_version = Some("42".into());
    assert!(!index.apply_service(&relisted));
    assert!(!index.apply_endpoint_slice(&eps));
    let mut heartbeat = node("n1", "za", "r1", &["10.0.0.11", "192.168.1.11"]);
    heartbeat.metadata.resource_version = Some("7".into());
    assert!(!index.apply_node(&heartbeat));
    assert!(
        index.apply_service(
            &service("default", "web", "10.96.0.10")
                .port("", "TCP", 81)
                .build()
        )
    );
    assert!(index.delete_endpoint_slice("default", "a"));
    assert!(!index.delete_endpoint_slice("default", "a"));
    assert!(index.delete_service("default", "web"));
    assert!(!index.delete_service("default", "web"));
}

fn subset(ips: &[&str], port_name: &str, port: i32) -> EndpointSubset {
    EndpointSubset {
        addresses: Some(
            ips.iter()
                .map(|ip| EndpointAddress {
                    ip: (*ip).into(),
                    ..EndpointAddress::default()
                })
                .collect(),
        ),
        not_ready_addresses: None,
        ports: Some(vec![EndpointPort {
            name: Some(port_name.into()),
            port,
            protocol: Some("TCP".into()),
            app_protocol: None,
        }]),
    }
}

fn endpoints_object(name: &str, subsets: Vec<EndpointSubset>) -> Endpoints {
    Endpoints {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        subsets: Some(subsets),
    }
}

#[test]
fn endpoints_subsets_keep_their_own_ports() {
    // The seeds' selector-less shape with two subsets on different ports: each address is
    // reached on its own subset's port, never on the first subset's.
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "ext", "10.96.0.21")
            .port("", "TCP", 80)
            .no_selector()
            .build(),
    );
    index.apply_endpoints(&endpoints_object(
        "ext",
        vec![
            subset(&["172.16.0.13"], "", 9376),
            subset(&["172.16.0.14", "172.16.0.15"], "", 9377),
        ],
    ));
    assert_eq!(
        port_of(&index.snapshot(), "ext", 80, Protocol::Tcp).cluster_endpoints,
        vec![
            ep("172.16.0.13", 9376),
            ep("172.16.0.14", 9377),
            ep("172.16.0.15", 9377)
        ]
    );
}

#[test]
fn forbidden_endpoint_addresses() {
    let cases = [
        ("127.0.0.1", Some("loopback")),
        ("127.255.0.9", Some("loopback")),
        ("169.254.1.1", Some("link-local")),
        ("224.0.0.5", Some("link-local multicast")),
        ("224.0.1.5", None),
        ("10.0.0.1", None),
        ("::1", Some("loopback")),
        ("fe80::1", Some("link-local")),
        ("febf::1", Some("link-local")),
        ("fec0::1", None),
        ("ff02::1", Some("link-local multicast")),
        ("ff05::1", None),
        ("::ffff:127.0.0.1", Some("loopback")),
        ("2001:db8::1", None),
    ];
    for (text, want) in cases {
        assert_eq!(forbidden_endpoint(ip(text)), want, "{text}");
    }
}

#[test]
fn forbidden_endpoints_are_never_programmed_and_are_reported() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "web", "10.96.0.22")
            .port("http", "TCP", 80)
            .build(),
    );
    index.apply_endpoint_slice(
        &slice("default", "web", "web-1")
            .port("http", "TCP", 8080)
            .endpoint("10.244.0.5", "n1")
            .endpoint("127.0.0.1", "n1")
            .endpoint("169.254.1.1", "n2")
            .build(),
    );
    index.apply_service(
        &service("default", "ext", "10.96.0.23")
            .port("", "TCP", 80)
            .no_selector()
            .build(),
    );
    index.apply_endpoints(&endpoints_object(
        "ext",
        vec![subset(&["224.0.0.5", "172.16.0.9"], "", 80)],
    ));
    let snapshot = index.snapshot();
    assert_eq!(
        port_of(&snapshot, "web", 80, Protocol::Tcp).cluster_endpoints,
        vec![ep("10.244.0.5", 8080)]
    );
    assert_eq!(
        port_of(&snapshot, "ext", 80, Protocol::Tcp).cluster_endpoints,
        vec![ep("172.16.0.9", 80)]
    );
    let rejected = index.rejected_endpoints();
    assert_eq!(
        rejected.get(&ServiceKey::new("default", "web")),
        Some(&[ip("127.0.0.1"), ip("169.254.1.1")].into_iter().collect())
    );
    assert_eq!(
        rejected.get(&ServiceKey::new("default", "ext")),
        Some(&[ip("224.0.0.5")].into_iter().collect())
    );
}

/// `refresh` recomputes only the Services touched since the last refresh; on random sequences
/// of Service, EndpointSlice, Endpoints and Node updates its snapshot stays equal to a full
/// `snapshot()`, and the ports it reports changed are exactly those that differ.
#[test]
fn refresh_keeps_the_snapshot_a_full_rebuild_would_compute() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    let mut rng = StdRng::seed_from_u64(14);
    let mut index = index("n1", &[]);
    let names = ["a", "b", "c", "d"];
    let nodes = ["n1", "n2", "n3"];
    let mut previous = Snapshot::default();
    let full = index.snapshot();
    let (first, _) = index.refresh();
    assert_eq!(first, &full);
    for round in 0..400 {
        for _ in 0..rng.random_range(1..=3) {
            let name = names[rng.random_range(0..names.len())];
            match rng.random_range(0..8) {
                0 => {
                    index.delete_service("default", name);
                }
                1 => {
                    let slice_name = format!("{name}-{}", rng.random_range(0..2));
                    index.delete_endpoint_slice("default", &slice_name);
                }
                2 => {
                    let zone = ["za", "zb"][rng.random_range(0..2)];
                    let node_name = nodes[rng.random_range(0..nodes.len())];
                    index.apply_node(&node(node_name, zone, "r1", &["10.0.0.11"]));
                }
                3 => {
                    // A slice moving to another Service.
                    let other = names[rng.random_range(0..names.len())];
                    let slice_name = format!("{name}-{}", rng.random_range(0..2));
                    index.apply_endpoint_slice(
                        &slice("default", other, &slice_name)
                            .port("", "TCP", 8080)
                            .endpoint("10.244.7.7", "n2")
                            .build(),
                    );
                }
                4 => {
                    let service = service(
                        "default",
                        name,
                        &format!("10.96.0.{}", rng.random_range(1..9)),
                    )
                    .port("", "TCP", 80)
                    .port("dns", "UDP", 53)
                    .node_port(30_000 + rng.random_range(0..3));
                    let service = if rng.random_bool(0.3) {
                        service.local(32_000)
                    } else {
                        service
                    };
                    index.apply_service(&service.build());
                }
                _ => {
                    let slice_name = format!("{name}-{}", rng.random_range(0..2));
                    let mut builder = slice("default", name, &slice_name)
                        .port("", "TCP", 8080)
                        .port("dns", "UDP", 5353);
                    for _ in 0..rng.random_range(0..4) {
                        let ip = format!("10.244.0.{}", rng.random_range(1..12));
                        let node_name = nodes[rng.random_range(0..nodes.len())];
                        builder = builder.endpoint_with(
                            &ip,
                            node_name,
                            rng.random_bool(0.8),
                            true,
                            rng.random_bool(0.1),
                        );
                    }
                    index.apply_endpoint_slice(&builder.build());
                }
            }
        }
        let full = index.snapshot();
        let (refreshed, changes) = index.refresh();
        assert_eq!(refreshed, &full, "round {round}");
        let differing: std::collections::BTreeSet<PortKey> = full
            .ports
            .keys()
            .chain(previous.ports.keys())
            .filter(|key| full.ports.get(*key) != previous.ports.get(*key))
            .cloned()
            .collect();
        assert_eq!(changes.ports, differing, "round {round}");
        assert_eq!(
            changes.health_checks,
            full.health_checks != previous.health_checks,
            "round {round}"
        );
        previous = full;
    }
    let (_, nothing) = index.refresh();
    assert!(nothing.is_empty());
    index.set_nodeport_addresses(Some(vec![ip("10.9.9.9")]));
    let (snapshot, changes) = index.refresh();
    assert_eq!(snapshot.nodeport_addresses, [ip("10.9.9.9")]);
    assert!(changes.nodeport_addresses && changes.ports.is_empty());
}

#[test]
fn assigned_load_balancer_addresses_are_served_before_the_status_shows_them() {
    let mut index = index("n1", &[]);
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .type_("LoadBalancer")
            .build(),
    );
    index.apply_service(
        &service("default", "internal", "10.96.0.11")
            .port("http", "TCP", 80)
            .build(),
    );
    index.refresh();
    let assigned = |pairs: &[(&str, &str)]| -> HashMap<ServiceKey, Vec<IpAddr>> {
        pairs
            .iter()
            .map(|(name, address)| (ServiceKey::new("default", *name), vec![ip(address)]))
            .collect()
    };
    // A ClusterIP Service never takes an address, whatever a provider's table says.
    assert!(index.set_assigned_ingress(assigned(&[
        ("web", "127.240.0.2"),
        ("internal", "127.240.0.3"),
    ])));
    let (snapshot, changes) = index.refresh();
    assert_eq!(
        port_of(snapshot, "web", 80, Protocol::Tcp).load_balancer_ips,
        vec![ip("127.240.0.2")]
    );
    assert!(
        port_of(snapshot, "internal", 80, Protocol::Tcp)
            .load_balancer_ips
            .is_empty()
    );
    // Only web's port model changed.
    assert_eq!(changes.ports.len(), 1, "{changes:?}");
    // The same table again changes nothing.
    assert!(!index.set_assigned_ingress(assigned(&[
        ("web", "127.240.0.2"),
        ("internal", "127.240.0.3"),
    ])));
    // Once the status shows the address, it is served once; released, only the status's stays.
    index.apply_service(
        &service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .load_balancer(&["127.240.0.2"])
            .build(),
    );
    assert!(index.set_assigned_ingress(HashMap::new()));
    let (snapshot, _) = index.refresh();
    assert_eq!(
        port_of(snapshot, "web", 80, Protocol::Tcp).load_balancer_ips,
        vec![ip("127.240.0.2")]
    );
    assert_eq!(
        index.snapshot(),
        *index.refresh().0,
        "refresh agrees with a full snapshot"
    );
}

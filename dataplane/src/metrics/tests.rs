use std::time::Duration;

use super::*;
use crate::model::{Index, IndexConfig};
use crate::testing::{node, service, slice};

fn index_on_n1() -> Index {
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    index.apply_node(&node("n1", "za", "r1", &["10.0.0.11"]));
    index.apply_node(&node("n2", "za", "r1", &["10.0.0.12"]));
    index
}

fn counts(internal: [usize; 2], external: [usize; 2]) -> BTreeMap<(IpFamily, PolicyKind), usize> {
    [
        ((IpFamily::IPv4, PolicyKind::Internal), internal[0]),
        ((IpFamily::IPv6, PolicyKind::Internal), internal[1]),
        ((IpFamily::IPv4, PolicyKind::External), external[0]),
        ((IpFamily::IPv6, PolicyKind::External), external[1]),
    ]
    .into()
}

#[test]
fn services_with_a_local_policy_and_no_endpoint_here_are_counted_once_per_family() {
    // (what the cluster holds, as seen from n1; expected internal / external counts)
    type Case = (
        &'static str,
        Vec<(crate::testing::ServiceBuilder, Vec<&'static str>)>,
        [usize; 2],
        [usize; 2],
    );
    let cases: Vec<Case> = vec![
        (
            "cluster policies never count",
            vec![(
                service("ns", "a", "10.96.0.1")
                    .port("http", "TCP", 80)
                    .load_balancer(&["192.0.2.1"]),
                vec!["n2"],
            )],
            [0, 0],
            [0, 0],
        ),
        (
            "external Local, endpoint only elsewhere",
            vec![(
                service("ns", "a", "10.96.0.1")
                    .port("http", "TCP", 80)
                    .load_balancer(&["192.0.2.1"])
                    .local(30000),
                vec!["n2"],
            )],
            [0, 0],
            [1, 0],
        ),
        (
            "external Local, endpoint here",
            vec![(
                service("ns", "a", "10.96.0.1")
                    .port("http", "TCP", 80)
                    .load_balancer(&["192.0.2.1"])
                    .local(30000),
                vec!["n1", "n2"],
            )],
            [0, 0],
            [0, 0],
        ),
        (
            "internal Local, endpoint only elsewhere",
            vec![(
                service("ns", "a", "10.96.0.1")
                    .port("http", "TCP", 80)
                    .internal_local(),
                vec!["n2"],
            )],
            [1, 0],
            [0, 0],
        ),
        (
            "two ports of one Service count one Service",
            vec![(
                service("ns", "a", "10.96.0.1")
                    .port("http", "TCP", 80)
                    .port("https", "TCP", 443)
                    .internal_local(),
                vec!["n2"],
            )],
            [1, 0],
            [0, 0],
        ),
        (
            "two Services count two",
            vec![
                (
                    service("ns", "a", "10.96.0.1")
                        .port("http", "TCP", 80)
                        .internal_local(),
                    vec![],
                ),
                (
                    service("ns", "b", "10.96.0.2")
                        .port("http", "TCP", 80)
                        .load_balancer(&["192.0.2.2"])
                        .local(30001),
                    vec!["n2"],
                ),
            ],
            [1, 0],
            [1, 0],
        ),
        (
            "an IPv6 Service counts under IPv6",
            vec![(
                service("ns", "a", "fd00::1")
                    .port("http", "TCP", 80)
                    .internal_local(),
                vec![],
            )],
            [0, 1],
            [0, 0],
        ),
    ];
    for (name, objects, internal, external) in cases {
        let mut index = index_on_n1();
        for (builder, nodes) in objects {
            let svc = builder.build();
            let svc_name = svc.metadata.name.clone().unwrap_or_default();
            let mut endpoints = slice("ns", &svc_name, &format!("{svc_name}-1"))
                .port("http", "TCP", 8080)
                .port("https", "TCP", 8443);
            for (i, node) in nodes.iter().enumerate() {
                endpoints = endpoints.endpoint(&format!("10.244.{i}.{}", svc_name.len()), node);
            }
            index.apply_service(&svc);
            index.apply_endpoint_slice(&endpoints.build());
        }
        assert_eq!(
            no_local_endpoints(&index.snapshot()),
            counts(internal, external),
            "{name}"
        );
    }
}

fn slice_with(address_type: &str, annotation: Option<&str>) -> EndpointSlice {
    let mut slice = slice("ns", "a", "a-1").build();
    slice.address_type = address_type.into();
    if let Some(value) = annotation {
        slice.metadata.annotations =
            Some([(LAST_CHANGE_TRIGGER_TIME.to_owned(), value.to_owned())].into());
    }
    slice
}

#[test]
fn the_programming_trigger_is_the_annotation_else_a_live_changes_arrival() {
    let at = |text: &str| humantime::parse_rfc3339(text).unwrap();
    let started = at("2026-12-04T01:00:00Z");
    let arrived = at("2026-12-04T01:05:00Z");
    let cases = [
        (
            "annotated, after start",
            slice_with("IPv4", Some("2026-12-04T01:04:58.250Z")),
            SliceEvent::Changed,
            Some((IpFamily::IPv4, at("2026-12-04T01:04:58.250Z"))),
        ),
        (
            "annotated in the initial list",
            slice_with("IPv6", Some("2026-12-04T01:04:58Z")),
            SliceEvent::Listed,
            Some((IpFamily::IPv6, at("2026-12-04T01:04:58Z"))),
        ),
        (
            "annotated before the proxy started",
            slice_with("IPv4", Some("2026-12-04T00:59:59Z")),
            SliceEvent::Changed,
            None,
        ),
        (
            "no annotation, live change",
            slice_with("IPv4", None),
            SliceEvent::Changed,
            Some((IpFamily::IPv4, arrived)),
        ),
        (
            "no annotation, initial list",
            slice_with("IPv4", None),
            SliceEvent::Listed,
            None,
        ),
        (
            "unparsable annotation, live change",
            slice_with("IPv4", Some("yesterday")),
            SliceEvent::Changed,
            Some((IpFamily::IPv4, arrived)),
        ),
        (
            "a deletion counts from its arrival",
            slice_with("IPv6", Some("2026-12-04T01:01:00Z")),
            SliceEvent::Deleted,
            Some((IpFamily::IPv6, arrived)),
        ),
        (
            "FQDN slices are not proxied",
            slice_with("FQDN", Some("2026-12-04T01:04:58Z")),
            SliceEvent::Changed,
            None,
        ),
    ];
    for (name, slice, event, expected) in cases {
        let got = programming_trigger(&slice, event, arrived, started).map(|t| (t.family, t.at));
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn counters_are_declared_under_their_sample_names_in_text_format() {
    let open_metrics = "# HELP a_changes Changes.\n# TYPE a_changes counter\na_changes_total 3\n\
                        # HELP b_seconds Time.\n# TYPE b_seconds gauge\n# UNIT b_seconds seconds\nb_seconds 1.5\n# EOF\n";
    assert_eq!(
        to_text_format(open_metrics),
        "# HELP a_changes_total Changes.\n# TYPE a_changes_total counter\na_changes_total 3\n\
         # HELP b_seconds Time.\n# TYPE b_seconds gauge\nb_seconds 1.5\n"
    );
}

fn sample(text: &str, line_start: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(line_start))
        .unwrap_or_else(|| panic!("no {line_start} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn every_family_exists_per_ip_family_before_the_first_sync() {
    let text = ProxyMetrics::new().text();
    for ip_family in ["IPv4", "IPv6"] {
        for family in [
            "kubeproxy_sync_proxy_rules_duration_seconds_count",
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
            "kubeproxy_sync_partial_proxy_rules_duration_seconds_count",
            "kubeproxy_network_programming_duration_seconds_count",
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        ] {
            assert_eq!(
                sample(&text, &format!("{family}{{ip_family=\"{ip_family}\"}}")),
                0.0,
                "{family} {ip_family}"
            );
        }
    }
    assert!(
        text.contains("# TYPE kubeproxy_sync_proxy_rules_endpoint_changes_total counter"),
        "{text}"
    );
    assert!(!text.contains("# EOF"));
}

#[test]
fn a_sync_is_recorded_by_kind_and_changes_pending_return_to_zero() {
    let metrics = ProxyMetrics::new();
    let now = humantime::parse_rfc3339("2026-12-04T01:05:00Z").unwrap();
    metrics.service_changed();
    metrics.endpoints_changed();
    metrics.endpoints_changed();
    metrics.queued(now);
    let text = metrics.text();
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending "
        ),
        2.0
    );
    assert_eq!(
        sample(&text, "kubeproxy_sync_proxy_rules_service_changes_pending "),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family=\"IPv6\"} "
        ),
        1_796_346_300.0
    );

    metrics.sync_started();
    metrics.synced(Duration::from_millis(3), Some(false), now);
    metrics.programmed(
        ProgrammingTrigger {
            family: IpFamily::IPv4,
            at: now - Duration::from_millis(700),
        },
        now,
    );
    let text = metrics.text();
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending "
        ),
        0.0
    );
    assert_eq!(
        sample(&text, "kubeproxy_sync_proxy_rules_endpoint_changes_total "),
        2.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} "
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} "
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.004\",ip_family=\"IPv4\"} "
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\",ip_family=\"IPv4\"} "
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"1.0\",ip_family=\"IPv4\"} "
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_network_programming_duration_seconds_bucket{le=\"0.5\",ip_family=\"IPv4\"} "
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_network_programming_duration_seconds_count{ip_family=\"IPv6\"} "
        ),
        0.0
    );
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=\"IPv4\"} "
        ),
        1_796_346_300.0
    );

    metrics.sync_failed();
    metrics.health_answered(HealthPath::Healthz, 503);
    metrics.health_answered(HealthPath::Healthz, 503);
    metrics.health_answered(HealthPath::Livez, 200);
    let text = metrics.text();
    assert_eq!(
        sample(
            &text,
            "kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family=\"IPv6\"} "
        ),
        1.0
    );
    assert_eq!(
        sample(&text, "kubeproxy_proxy_healthz_total{code=\"503\"} "),
        2.0
    );
    assert_eq!(
        sample(&text, "kubeproxy_proxy_livez_total{code=\"200\"} "),
        1.0
    );
}

#[test]
fn the_programming_buckets_are_kube_proxys() {
    let mut registry = Registry::default();
    registry.register("h", "h", programming_histogram());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let bounds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("h_bucket{le=\""))
        .filter_map(|l| l.split_once('"').map(|(le, _)| le))
        .collect();
    // 0.25, 0.5, 1..=59, 60..=115 by 5, 120..=300 by 30, +Inf
    assert_eq!(bounds.len(), 2 + 59 + 12 + 7 + 1, "{bounds:?}");
    assert_eq!(bounds[..3], ["0.25", "0.5", "1.0"]);
    assert_eq!(bounds[bounds.len() - 3..], ["270.0", "300.0", "+Inf"]);
}

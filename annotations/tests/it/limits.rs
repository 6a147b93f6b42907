//! Per-cloud limits known before any cloud call (issue 13, requirement 8) and bounded
//! diagnostics on adversarial values (requirement 9).

use crate::support;

use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_lb_annotations::keys::aws;
use kube_lb_annotations::{Cloud, MAX_PER_LOCATION, MAX_VALUE_BYTES, TargetPort};
use support::{port, svc_lb};

/// What parsing one port set for one cloud must say: `None` = accepted, `Some(needle)` = an
/// error whose text contains `needle`.
struct Case {
    cloud: Cloud,
    protocols: &'static [&'static str],
    want: Option<&'static str>,
}

fn ports(protocols: &[&str]) -> Vec<ServicePort> {
    protocols
        .iter()
        .enumerate()
        .map(|(i, protocol)| {
            let number = 80 + i32::try_from(i).unwrap_or(0);
            port(&format!("p{i}"), protocol, number, 30080 + number)
        })
        .collect()
}

#[test]
fn sctp_and_mixed_protocols_are_refused_exactly_where_the_cloud_refuses_them() {
    let nlb = |s: support::SvcBuilder| s.annotate(aws::TYPE, "nlb");
    let cases = [
        // GCP: one forwarding rule, one IPProtocol (TCP or UDP).
        Case {
            cloud: Cloud::Gcp,
            protocols: &["TCP"],
            want: None,
        },
        Case {
            cloud: Cloud::Gcp,
            protocols: &["UDP", "UDP"],
            want: None,
        },
        Case {
            cloud: Cloud::Gcp,
            protocols: &["SCTP"],
            want: Some("not SCTP"),
        },
        Case {
            cloud: Cloud::Gcp,
            protocols: &["TCP", "UDP"],
            want: Some("cannot mix TCP and UDP"),
        },
        // Azure: rules per port and protocol; no SCTP.
        Case {
            cloud: Cloud::Azure,
            protocols: &["TCP", "UDP"],
            want: None,
        },
        Case {
            cloud: Cloud::Azure,
            protocols: &["SCTP"],
            want: Some("not SCTP"),
        },
        // AWS Classic ELB (the default kind): TCP only.
        Case {
            cloud: Cloud::Aws,
            protocols: &["TCP", "TCP"],
            want: None,
        },
        Case {
            cloud: Cloud::Aws,
            protocols: &["UDP"],
            want: Some("Classic ELB accepts TCP only"),
        },
        Case {
            cloud: Cloud::Aws,
            protocols: &["SCTP"],
            want: Some("Classic ELB accepts TCP only"),
        },
        Case {
            cloud: Cloud::Aws,
            protocols: &["TCP", "UDP"],
            want: Some("mixed protocols"),
        },
        // local forwards any protocol on this machine.
        Case {
            cloud: Cloud::Local,
            protocols: &["TCP", "UDP", "SCTP"],
            want: None,
        },
    ];
    for case in cases {
        let svc = svc_lb("ns", "web").ports(ports(case.protocols));
        match (svc.parse(case.cloud), case.want) {
            (Ok(_), None) => {}
            (Err(errors), Some(needle)) => assert!(
                errors.to_string().contains(needle),
                "{} {:?}: {errors}",
                case.cloud,
                case.protocols
            ),
            (got, want) => panic!(
                "{} {:?}: want {want:?}, got {got:?}",
                case.cloud, case.protocols
            ),
        }
    }
    // NLB: TCP and UDP each, but no SCTP.
    assert!(
        nlb(svc_lb("ns", "web").ports(ports(&["UDP"])))
            .parse(Cloud::Aws)
            .is_ok()
    );
    let errors = nlb(svc_lb("ns", "web").ports(ports(&["SCTP"]))).err(Cloud::Aws);
    assert!(
        errors.to_string().contains("an NLB accepts TCP or UDP"),
        "{errors}"
    );
}

#[test]
fn node_port_clouds_refuse_sctp_missing_node_ports_and_on_baidu_one_port_twice() {
    use kube_lb_annotations::ErrorKind;
    // (cloud, ports, allocateLoadBalancerNodePorts, the errors' field paths)
    let dns = || {
        vec![
            port("dns-udp", "UDP", 53, 30053),
            port("dns-tcp", "TCP", 53, 30054),
        ]
    };
    let bare = || vec![port("http", "TCP", 80, 0)];
    let cases: Vec<(Cloud, Vec<ServicePort>, bool, Vec<&str>)> = vec![
        (
            Cloud::Baidu,
            ports(&["SCTP"]),
            true,
            vec!["spec.ports[0].protocol"],
        ),
        (
            Cloud::Tencent,
            ports(&["SCTP"]),
            true,
            vec!["spec.ports[0].protocol"],
        ),
        (Cloud::Baidu, dns(), true, vec!["spec.ports[1].port"]),
        (Cloud::Tencent, dns(), true, vec![]),
        (Cloud::Baidu, ports(&["TCP", "UDP"]), true, vec![]),
        // Before the API server: node ports are still to come unless allocation is off.
        (Cloud::Baidu, bare(), true, vec![]),
        (Cloud::Baidu, bare(), false, vec!["spec.ports[0].nodePort"]),
        (
            Cloud::Tencent,
            bare(),
            false,
            vec!["spec.ports[0].nodePort"],
        ),
        // Ports that carry their node ports need no allocation.
        (Cloud::Tencent, ports(&["TCP"]), false, vec![]),
        // Clouds that do not forward to node ports.
        (Cloud::Gcp, bare(), false, vec![]),
        (Cloud::Local, bare(), false, vec![]),
    ];
    for (cloud, service_ports, allocate, want) in cases {
        let svc = svc_lb("ns", "web")
            .ports(service_ports)
            .with_spec(|spec| spec.allocate_load_balancer_node_ports = Some(allocate));
        let at: Vec<String> = match svc.parse(cloud) {
            Ok(_) => Vec::new(),
            Err(errors) => errors
                .errors()
                .iter()
                .inspect(|e| {
                    assert!(
                        matches!(e.kind, ErrorKind::Unsupported | ErrorKind::Missing),
                        "{e}"
                    );
                })
                .map(|e| e.location.to_string())
                .collect(),
        };
        assert_eq!(at, want, "{cloud} allocate={allocate}");
    }
}

#[test]
fn a_headless_load_balancer_is_refused_in_the_api_servers_words_on_every_cloud() {
    for cloud in Cloud::ALL {
        let errors = svc_lb("ns", "web")
            .with_spec(|spec| spec.cluster_ip = Some("None".to_owned()))
            .err(*cloud);
        assert_eq!(
            errors.to_string(),
            "spec.clusterIPs[0] = \"None\": may not be set to 'None' for LoadBalancer services",
            "{cloud}"
        );
    }
    let listed = svc_lb("ns", "web")
        .with_spec(|spec| spec.cluster_ips = Some(vec!["None".to_owned()]))
        .err(Cloud::Local);
    assert_eq!(listed.len(), 1, "{listed}");
    // A cluster IP, or the list winning over a stale clusterIP, is not headless.
    for (ip, ips) in [
        (Some("10.96.0.10"), None),
        (Some("None"), Some("10.96.0.11")),
    ] {
        svc_lb("ns", "web")
            .with_spec(|spec| {
                spec.cluster_ip = ip.map(str::to_owned);
                spec.cluster_ips = ips.map(|ip| vec![ip.to_owned()]);
            })
            .ok(Cloud::Local);
    }
}

#[test]
fn protocol_errors_name_the_port() {
    let errors = svc_lb("ns", "web")
        .ports(ports(&["TCP", "SCTP"]))
        .err(Cloud::Gcp);
    let at: Vec<String> = errors
        .errors()
        .iter()
        .map(|e| e.location.to_string())
        .collect();
    assert!(at.contains(&"spec.ports[1].protocol".to_owned()), "{at:?}");
}

#[test]
fn gcp_accepts_services_without_node_ports() {
    let parsed = svc_lb("ns", "web")
        .ports(vec![port("", "TCP", 80, 0)])
        .with_spec(|s| s.allocate_load_balancer_node_ports = Some(false))
        .ok(Cloud::Gcp);
    assert!(!parsed.spec.allocate_node_ports);
    assert_eq!(parsed.spec.ports[0].node_port, None);
}

#[test]
fn a_target_port_the_api_server_defaults_is_read_as_the_port() {
    for (given, want) in [
        (None, TargetPort::Number(80)),
        (Some(IntOrString::Int(0)), TargetPort::Number(80)),
        (
            Some(IntOrString::String(String::new())),
            TargetPort::Number(80),
        ),
        (
            Some(IntOrString::String("8080".into())),
            TargetPort::Number(8080),
        ),
        (
            Some(IntOrString::String("http".into())),
            TargetPort::Name("http".into()),
        ),
    ] {
        let mut p = port("", "TCP", 80, 30080);
        p.target_port = given.clone();
        let parsed = svc_lb("ns", "web").ports(vec![p]).ok(Cloud::Local);
        assert_eq!(parsed.spec.ports[0].target_port, want, "{given:?}");
    }
}

#[test]
fn a_huge_list_value_gives_a_bounded_report() {
    // The fuzz finding: 9,310 ssl-ports entries, one diagnostic each, each repeating the value.
    let value: Vec<String> = (0..9_310).map(|i| format!("name-{i}")).collect();
    let value = value.join(",");
    assert!(value.len() > 90_000);
    let svc = svc_lb("ns", "web")
        .annotate(
            aws::SSL_CERT,
            "arn:aws:acm:us-east-1:123456789012:certificate/abc",
        )
        .annotate(aws::SSL_PORTS, &value);
    let parsed = svc.ok(Cloud::Aws);
    let on_key: Vec<String> = parsed
        .warnings
        .iter()
        .filter(|w| w.location.to_string().contains(aws::SSL_PORTS))
        .map(ToString::to_string)
        .collect();
    assert_eq!(on_key.len(), MAX_PER_LOCATION + 1, "{on_key:#?}");
    let summary = on_key.last().map(String::as_str).unwrap_or_default();
    assert!(summary.contains("… and 9,305 more warnings"), "{summary}");
    let total: usize = parsed.warnings.iter().map(|w| w.to_string().len()).sum();
    assert!(total < 8 * 1024, "{total} bytes of warnings");
    for warning in &parsed.warnings {
        if let Some(v) = &warning.value {
            assert!(v.len() <= MAX_VALUE_BYTES + 40, "{} bytes quoted", v.len());
        }
    }
}

#[test]
fn quoted_values_are_cut_at_a_character_boundary() {
    // Multi-byte characters straddle the cut for every offset of the cut point.
    for pad in 0..4 {
        let value = format!("{}{}", "a".repeat(pad), "é€😀".repeat(200));
        let errors = svc_lb("ns", "web")
            .annotate(aws::HEALTHCHECK_INTERVAL, &value)
            .err(Cloud::Aws);
        let error = &errors.errors()[0];
        let quoted = error.value.as_deref().unwrap_or_default();
        assert!(quoted.contains("bytes in all"), "{quoted}");
        assert!(quoted.len() < MAX_VALUE_BYTES + 40);
    }
}

#[test]
fn source_ranges_on_a_users_own_clb_or_blb_are_refused_in_the_providers_words() {
    use kube_lb_annotations::keys::{baidu, tencent};
    // (cloud, the annotation naming the user's load balancer, ranges, refused)
    let cases = [
        (
            Cloud::Tencent,
            tencent::EXISTED_LBID,
            "lb-users",
            &["143.231.0.0/16"][..],
            true,
        ),
        (
            Cloud::Tencent,
            tencent::EXISTED_LBID,
            "lb-users",
            &["0.0.0.0/0"][..],
            false,
        ),
        (
            Cloud::Tencent,
            tencent::EXISTED_LBID,
            "lb-users",
            &[][..],
            false,
        ),
        (
            Cloud::Baidu,
            baidu::EXIST_ID,
            "lb-0a1b2c",
            &["143.231.0.0/16"][..],
            true,
        ),
        (
            Cloud::Baidu,
            baidu::EXIST_ID,
            "lb-0a1b2c",
            &["10.0.0.0/8", "0.0.0.0/0"][..],
            false,
        ),
    ];
    for (cloud, key, id, ranges, refused) in cases {
        let svc = svc_lb("ns", "web")
            .ports(vec![port("http", "TCP", 80, 30080)])
            .annotate(key, id)
            .source_ranges(ranges);
        match svc.parse(cloud) {
            Ok(_) => assert!(!refused, "{cloud} {ranges:?}: accepted"),
            Err(errors) => {
                assert!(refused, "{cloud} {ranges:?}: {errors}");
                let words = kube_lb_annotations::source_ranges_on_existing(cloud, id).unwrap();
                let error = errors
                    .errors()
                    .iter()
                    .find(|e| e.location.to_string() == "spec.loadBalancerSourceRanges")
                    .unwrap_or_else(|| panic!("{cloud}: no error on the ranges: {errors}"));
                assert_eq!(error.detail, words, "{cloud}: the provider's words");
            }
        }
    }
    // Where kube-lb builds the load balancer, the ranges are enforced, not refused.
    let own = svc_lb("ns", "web")
        .ports(vec![port("http", "TCP", 80, 30080)])
        .source_ranges(&["143.231.0.0/16"]);
    assert!(own.parse(Cloud::Tencent).is_ok());
    assert!(own.parse(Cloud::Baidu).is_ok());
}

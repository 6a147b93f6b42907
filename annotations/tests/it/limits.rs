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

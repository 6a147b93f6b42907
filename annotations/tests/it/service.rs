//! Provider-neutral Service fields (ANNOTATIONS.md "Service spec fields") and topology keys.

use crate::support;

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::keys::common;
use kube_lb_annotations::{
    Cloud, ErrorKind, ProviderSpec, Scheme, SessionAffinity, SourceRangeOrigin, TargetPort,
    TopologyKey, TopologyLiftError, TrafficPolicy, lift_topology_keys,
};
use serde_json::json;
use support::{assert_error, assert_warning, port, svc_lb};

#[test]
fn a_plain_service_parses_with_neutral_defaults() {
    let parsed = svc_lb("ns", "web").ok(Cloud::Local);
    let spec = parsed.spec;
    assert_eq!(spec.service.to_string(), "ns/web");
    assert_eq!(spec.provider, ProviderSpec::Local(Default::default()));
    assert_eq!(spec.scheme, Scheme::External);
    assert_eq!(spec.traffic_policy, TrafficPolicy::Cluster);
    assert_eq!(spec.session_affinity, SessionAffinity::None);
    assert!(spec.source_ranges.allows_all());
    assert_eq!(spec.source_ranges.origin, SourceRangeOrigin::Default);
    assert!(spec.allocate_node_ports);
    assert_eq!(spec.ports[0].target_port, TargetPort::Number(80));
    assert!(parsed.warnings.is_empty());
}

#[test]
fn non_load_balancer_services_are_a_dedicated_skip() {
    for t in ["ClusterIP", "NodePort", "ExternalName"] {
        let errors = svc_lb("ns", "web").type_(t).err(Cloud::Local);
        assert!(errors.is_not_load_balancer(), "{t}");
        assert_eq!(errors.len(), 1);
    }
    let mut no_type = svc_lb("ns", "web");
    no_type.0.spec.as_mut().expect("spec").type_ = None;
    assert!(no_type.err(Cloud::Aws).is_not_load_balancer());
}

#[test]
fn port_names_follow_the_seed_rules() {
    for good in ["web", "123-abc", "a", "http-2"] {
        svc_lb("ns", "web")
            .ports(vec![port(good, "TCP", 80, 0), port("other", "TCP", 81, 0)])
            .ok(Cloud::Local);
    }
    for bad in ["123_abc", "-web", "web-", "Web", "a.b", &"a".repeat(64)] {
        let errors = svc_lb("ns", "web")
            .ports(vec![port(bad, "TCP", 80, 0), port("other", "TCP", 81, 0)])
            .err(Cloud::Local);
        assert_error(
            &errors,
            "spec.ports[0].name",
            ErrorKind::Invalid,
            "lowercase alphanumerics",
        );
    }
}

#[test]
fn port_rules_are_collected() {
    let errors = svc_lb("ns", "web")
        .ports(vec![
            port("", "TCP", 80, 0),
            port("web", "tcp", 81, 0),
            port("web", "TCP", 0, 0),
            port("dup", "TCP", 81, 0),
        ])
        .err(Cloud::Local);
    assert_error(
        &errors,
        "spec.ports[0].name",
        ErrorKind::Missing,
        "more than one port",
    );
    assert_error(
        &errors,
        "spec.ports[1].protocol",
        ErrorKind::Invalid,
        "\"TCP\", \"UDP\" or \"SCTP\"",
    );
    assert_error(&errors, "spec.ports[2].name", ErrorKind::Conflict, "unique");
    assert_error(
        &errors,
        "spec.ports[2].port",
        ErrorKind::OutOfRange,
        "1 to 65535",
    );
    assert_error(
        &errors,
        "spec.ports[3].port",
        ErrorKind::Conflict,
        "appears twice",
    );
    let none = svc_lb("ns", "web").ports(vec![]).err(Cloud::Local);
    assert_error(&none, "spec.ports", ErrorKind::Missing, "at least one port");
}

#[test]
fn source_ranges_prefer_the_field_then_the_annotation() {
    let spec = svc_lb("ns", "web")
        .source_ranges(&["143.231.0.0/16"])
        .ok(Cloud::Local)
        .spec;
    assert_eq!(spec.source_ranges.origin, SourceRangeOrigin::Spec);
    assert_eq!(spec.source_ranges.cidrs[0].to_string(), "143.231.0.0/16");

    let parsed = svc_lb("ns", "web")
        .annotate(common::SOURCE_RANGES, " 10.0.0.0/8 , 192.168.0.0/16,")
        .ok(Cloud::Local);
    assert_eq!(
        parsed.spec.source_ranges.origin,
        SourceRangeOrigin::Annotation
    );
    assert_eq!(parsed.spec.source_ranges.cidrs.len(), 2);

    let both = svc_lb("ns", "web")
        .source_ranges(&["143.231.0.0/16"])
        .annotate(common::SOURCE_RANGES, "10.0.0.0/8")
        .ok(Cloud::Local);
    assert_warning(&both, common::SOURCE_RANGES, "takes precedence");

    let host_bits = svc_lb("ns", "web")
        .source_ranges(&["10.1.2.3/8"])
        .ok(Cloud::Local);
    assert_eq!(
        host_bits.spec.source_ranges.cidrs[0].to_string(),
        "10.0.0.0/8"
    );
    assert_warning(&host_bits, "spec.loadBalancerSourceRanges[0]", "host bits");

    let bad = svc_lb("ns", "web")
        .annotate(common::SOURCE_RANGES, "10.0.0.0/8,office")
        .err(Cloud::Local);
    assert_error(
        &bad,
        common::SOURCE_RANGES,
        ErrorKind::Invalid,
        "must be a CIDR",
    );
}

#[test]
fn traffic_policy_and_health_check_node_port() {
    let spec = svc_lb("ns", "web").local(32000).ok(Cloud::Local).spec;
    assert_eq!(
        spec.traffic_policy,
        TrafficPolicy::Local {
            health_check_node_port: Some(32000)
        }
    );
    let errors = svc_lb("ns", "web")
        .with_spec(|s| s.health_check_node_port = Some(32000))
        .err(Cloud::Local);
    assert_error(
        &errors,
        "spec.healthCheckNodePort",
        ErrorKind::Conflict,
        "Local",
    );
    let errors = svc_lb("ns", "web")
        .with_spec(|s| s.external_traffic_policy = Some("Global".into()))
        .err(Cloud::Local);
    assert_error(
        &errors,
        "spec.externalTrafficPolicy",
        ErrorKind::Invalid,
        "\"Cluster\" or \"Local\"",
    );
}

#[test]
fn session_affinity_timeout_default_and_range() {
    let spec = svc_lb("ns", "web").client_ip(None).ok(Cloud::Local).spec;
    assert_eq!(
        spec.session_affinity,
        SessionAffinity::ClientIP {
            timeout_seconds: 10_800
        }
    );
    for ok in [1, 86_400] {
        let spec = svc_lb("ns", "web")
            .client_ip(Some(ok))
            .ok(Cloud::Local)
            .spec;
        assert_eq!(
            spec.session_affinity,
            SessionAffinity::ClientIP {
                timeout_seconds: ok as u32
            }
        );
    }
    for bad in [0, 86_401, -5] {
        let errors = svc_lb("ns", "web").client_ip(Some(bad)).err(Cloud::Local);
        assert_error(
            &errors,
            "timeoutSeconds",
            ErrorKind::OutOfRange,
            "1 to 86400",
        );
    }
    let errors = svc_lb("ns", "web")
        .with_spec(|s| s.session_affinity = Some("Cookie".into()))
        .err(Cloud::Local);
    assert_error(
        &errors,
        "spec.sessionAffinity",
        ErrorKind::Invalid,
        "\"None\" or \"ClientIP\"",
    );
}

#[test]
fn addresses_class_and_node_port_allocation() {
    let spec = svc_lb("ns", "web")
        .lb_ip("78.11.24.19")
        .with_spec(|s| {
            s.external_ips = Some(vec!["80.11.12.10".into()]);
            s.load_balancer_class = Some("kube-lb.io/local".into());
            s.allocate_load_balancer_node_ports = Some(false);
        })
        .ok(Cloud::Local)
        .spec;
    assert_eq!(
        spec.requested_ip,
        Some("78.11.24.19".parse::<IpAddr>().expect("ip"))
    );
    assert_eq!(
        spec.external_ips,
        vec!["80.11.12.10".parse::<IpAddr>().expect("ip")]
    );
    assert_eq!(
        spec.load_balancer_class.as_deref(),
        Some("kube-lb.io/local")
    );
    assert!(!spec.allocate_node_ports);

    let errors = svc_lb("ns", "web")
        .lb_ip("not-an-ip")
        .with_spec(|s| s.external_ips = Some(vec!["1.2.3".into()]))
        .err(Cloud::Local);
    assert_error(
        &errors,
        "spec.loadBalancerIP",
        ErrorKind::Invalid,
        "IPv4 or IPv6",
    );
    assert_error(
        &errors,
        "spec.externalIPs[0]",
        ErrorKind::Invalid,
        "IPv4 or IPv6",
    );
}

#[test]
fn topology_keys_rules_from_seed_002() {
    let ok = |v: &str| {
        svc_lb("ns", "web")
            .annotate(common::TOPOLOGY_KEYS, v)
            .ok(Cloud::Local)
            .spec
            .topology_keys
    };
    assert_eq!(ok("kubernetes.io/hostname"), vec![TopologyKey::Hostname]);
    assert_eq!(
        ok("kubernetes.io/hostname , topology.kubernetes.io/zone,topology.kubernetes.io/region,*"),
        vec![
            TopologyKey::Hostname,
            TopologyKey::Zone,
            TopologyKey::Region,
            TopologyKey::Any
        ]
    );
    assert!(ok("").is_empty());

    let err = |v: &str| {
        svc_lb("ns", "web")
            .annotate(common::TOPOLOGY_KEYS, v)
            .err(Cloud::Local)
    };
    assert_error(
        &err("*,kubernetes.io/hostname"),
        common::TOPOLOGY_KEYS,
        ErrorKind::Invalid,
        "only be the last",
    );
    let seventeen: Vec<String> = (0..17).map(|i| format!("example.com/k{i}")).collect();
    assert_error(
        &err(&seventeen.join(",")),
        common::TOPOLOGY_KEYS,
        ErrorKind::OutOfRange,
        "at most 16",
    );
    assert_error(
        &err("kubernetes.io/hostname,,*"),
        common::TOPOLOGY_KEYS,
        ErrorKind::Invalid,
        "empty",
    );
    assert_error(
        &err("bad key!"),
        common::TOPOLOGY_KEYS,
        ErrorKind::Invalid,
        "not a label key",
    );
    assert_error(
        &err("kubernetes.io/hostname,kubernetes.io/hostname"),
        common::TOPOLOGY_KEYS,
        ErrorKind::Conflict,
        "twice",
    );
    let local = svc_lb("ns", "web")
        .local(0)
        .annotate(common::TOPOLOGY_KEYS, "kubernetes.io/hostname")
        .err(Cloud::Local);
    assert_error(
        &local,
        common::TOPOLOGY_KEYS,
        ErrorKind::Conflict,
        "externalTrafficPolicy: Local",
    );

    let other = svc_lb("ns", "web")
        .annotate(common::TOPOLOGY_KEYS, "example.com/rack,*")
        .ok(Cloud::Local);
    assert_eq!(
        other.spec.topology_keys[0],
        TopologyKey::Label("example.com/rack".into())
    );
    assert_warning(&other, common::TOPOLOGY_KEYS, "only keys seed 002 allows");
}

#[test]
fn lifting_the_removed_field_into_the_annotation() {
    let mut manifest = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "my-service"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}],
                 "topologyKeys": ["kubernetes.io/hostname", "*"]}
    });
    assert_eq!(lift_topology_keys(&mut manifest), Ok(true));
    assert!(manifest["spec"].get("topologyKeys").is_none());
    assert_eq!(
        manifest["metadata"]["annotations"][common::TOPOLOGY_KEYS],
        "kubernetes.io/hostname,*"
    );
    let service: Service = serde_json::from_value(manifest).expect("service");
    let spec = kube_lb_annotations::parse(Cloud::Local, &service)
        .expect("parse")
        .spec;
    assert_eq!(
        spec.topology_keys,
        vec![TopologyKey::Hostname, TopologyKey::Any]
    );

    let mut absent = json!({"kind": "Service", "spec": {}});
    assert_eq!(lift_topology_keys(&mut absent), Ok(false));
    let mut not_list =
        json!({"kind": "Service", "spec": {"topologyKeys": "kubernetes.io/hostname"}});
    assert_eq!(
        lift_topology_keys(&mut not_list),
        Err(TopologyLiftError::NotAList)
    );
    let mut conflict = json!({
        "metadata": {"annotations": {common::TOPOLOGY_KEYS: "topology.kubernetes.io/zone"}},
        "spec": {"topologyKeys": ["kubernetes.io/hostname"]}
    });
    assert!(matches!(
        lift_topology_keys(&mut conflict),
        Err(TopologyLiftError::Conflict { .. })
    ));
    let mut same = json!({
        "metadata": {"annotations": {common::TOPOLOGY_KEYS: "kubernetes.io/hostname"}},
        "spec": {"topologyKeys": ["kubernetes.io/hostname"]}
    });
    assert_eq!(lift_topology_keys(&mut same), Ok(true));
    // The API server validates each entry as written: a key with a trailing space is not a
    // label key there, so it is not trimmed into one here.
    let mut spaced = json!({"spec": {"topologyKeys": ["kubernetes.io/hostname ", "*"]}});
    let error = lift_topology_keys(&mut spaced).expect_err("spaces");
    assert_eq!(
        error,
        TopologyLiftError::Spaces("kubernetes.io/hostname ".to_owned())
    );
    assert!(
        error.to_string().contains("\"kubernetes.io/hostname \"")
            && error.to_string().contains("the API server refuses it"),
        "{error}"
    );
}

#[test]
fn display_is_one_line_with_key_value_and_allowed() {
    let errors = svc_lb("ns", "web")
        .annotate(
            "service.beta.kubernetes.io/aws-load-balancer-access-log-emit-interval",
            "30",
        )
        .err(Cloud::Aws);
    assert_eq!(
        errors.errors()[0].to_string(),
        "annotation service.beta.kubernetes.io/aws-load-balancer-access-log-emit-interval = \"30\": must be 5 or 60 (minutes)"
    );
    assert!(!errors.to_string().contains('\n'));
}

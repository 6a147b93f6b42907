//! Every YAML example of the seed documents (tests/fixtures/seeds/, copied from the seeds and
//! completed where the seed shows only a fragment) parses to what the seed text describes.

use std::net::IpAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{
    AwsLoadBalancerKind, ClbProtocol, Cloud, ErrorKind, HealthCheckPort, HealthCheckProtocol,
    InternetChargeType, Parsed, ProviderSpec, Scheme, SelectorOperator, SourceRangeOrigin,
    TargetPort, TencentLoadBalanceType, TopologyKey, TrafficPolicy, lift_topology_keys, parse,
};

fn load(name: &str) -> Service {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seeds")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut value: serde_json::Value = serde_yaml_ng::from_str(&text).expect("yaml");
    lift_topology_keys(&mut value).expect("topology keys");
    serde_json::from_value(value).expect("service")
}

/// The seed examples that are not LoadBalancer Services still carry fields the parser checks;
/// make them one to check the rest.
fn as_load_balancer(mut service: Service) -> Service {
    service.spec.get_or_insert_with(Default::default).type_ = Some("LoadBalancer".to_owned());
    service
}

fn ok(cloud: Cloud, service: &Service) -> Parsed {
    parse(cloud, service).unwrap_or_else(|e| panic!("{cloud}: {e}"))
}

#[test]
fn every_fixture_is_covered_below() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seeds");
    let count = std::fs::read_dir(dir).expect("dir").count();
    assert_eq!(count, 25, "add an assertion for each new seed fixture");
}

#[test]
fn internal_load_balancer_tabs() {
    let cases = [
        ("001-internal-gcp.yaml", Cloud::Gcp),
        ("000-internal-gcp-lowercase.yaml", Cloud::Gcp),
        ("001-internal-aws.yaml", Cloud::Aws),
        ("000-internal-aws-cidr.yaml", Cloud::Aws),
        ("001-internal-azure.yaml", Cloud::Azure),
        ("001-internal-openstack.yaml", Cloud::Openstack),
        ("001-internal-baidu.yaml", Cloud::Baidu),
        ("001-internal-tencent.yaml", Cloud::Tencent),
    ];
    for (file, cloud) in cases {
        let service = load(file);
        let parsed = ok(cloud, &service);
        assert_eq!(parsed.spec.scheme, Scheme::Internal, "{file}");
        // The same manifest on the embedded provider: the key has no effect and says so.
        let local = ok(Cloud::Local, &service);
        assert_eq!(local.spec.scheme, Scheme::External, "{file}");
        assert_eq!(local.warnings.len(), 1, "{file}: {:?}", local.warnings);
    }
    let lowercase = ok(Cloud::Gcp, &load("000-internal-gcp-lowercase.yaml"));
    assert!(lowercase.warnings[0].to_string().contains("deprecated"));
    let tencent = ok(Cloud::Tencent, &load("001-internal-tencent.yaml"));
    let ProviderSpec::Tencent(t) = tencent.spec.provider else {
        panic!("tencent")
    };
    assert_eq!(t.internal_subnet_id.as_deref(), Some("subnet-xxxxx"));
}

#[test]
fn type_load_balancer_examples() {
    let service = load("001-load-balancer-status.yaml");
    for cloud in Cloud::ALL {
        let parsed = ok(*cloud, &service);
        assert_eq!(parsed.spec.ports[0].port, 80);
        assert_eq!(parsed.spec.ports[0].target_port, TargetPort::Number(9376));
        assert_eq!(parsed.spec.requested_ip, None);
    }

    // "Some cloud providers allow you to specify the loadBalancerIP … if the provider does not
    // support the feature, the field is ignored" — and AWS refuses it outright.
    let service = load("000-load-balancer-ip.yaml");
    let wanted: IpAddr = "78.11.24.19".parse().expect("ip");
    // Baidu binds the user's EIP at that address (cloud-provider-baiducloud did).
    for cloud in [
        Cloud::Local,
        Cloud::Gcp,
        Cloud::Azure,
        Cloud::Openstack,
        Cloud::Baidu,
    ] {
        assert_eq!(
            ok(cloud, &service).spec.requested_ip,
            Some(wanted),
            "{cloud}"
        );
    }
    assert!(
        ok(Cloud::Tencent, &service).warnings[0]
            .to_string()
            .contains("ignored"),
        "tencent"
    );
    let aws = parse(Cloud::Aws, &service).expect_err("AWS rejects loadBalancerIP");
    assert_eq!(aws.errors()[0].kind, ErrorKind::Unsupported);
    assert!(
        aws.to_string()
            .contains("spec.loadBalancerIP = \"78.11.24.19\"")
    );
}

#[test]
fn cluster_ip_examples_are_skipped_but_their_fields_parse() {
    let multi = load("001-multi-port.yaml");
    assert!(
        parse(Cloud::Local, &multi)
            .expect_err("skip")
            .is_not_load_balancer()
    );
    let spec = ok(Cloud::Local, &as_load_balancer(multi.clone())).spec;
    let names: Vec<_> = spec
        .ports
        .iter()
        .map(|p| p.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["http", "https"]);
    // "you must give all of your ports names"
    let mut unnamed = as_load_balancer(multi);
    if let Some(ports) = unnamed.spec.as_mut().and_then(|s| s.ports.as_mut()) {
        ports[1].name = None;
    }
    assert_eq!(
        parse(Cloud::Local, &unnamed).expect_err("names").errors()[0].kind,
        ErrorKind::Missing
    );

    let external = as_load_balancer(load("001-external-ips.yaml"));
    assert_eq!(
        ok(Cloud::Local, &external).spec.external_ips,
        vec!["80.11.12.10".parse::<IpAddr>().expect("ip")]
    );
}

#[test]
fn aws_tls_with_mixed_ports() {
    let parsed = ok(Cloud::Aws, &load("001-aws-tls-mixed.yaml"));
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let aws = parsed.spec.provider.as_aws().expect("aws");
    let listeners: Vec<_> = aws
        .clb_listeners
        .iter()
        .map(|l| {
            (
                l.lb_port,
                l.lb_protocol,
                l.instance_protocol,
                l.instance_port,
                l.ssl_certificate_id.is_some(),
            )
        })
        .collect();
    assert_eq!(
        listeners,
        vec![
            (80, ClbProtocol::Http, ClbProtocol::Http, Some(30080), false),
            (
                443,
                ClbProtocol::Https,
                ClbProtocol::Http,
                Some(30443),
                true
            ),
            (
                8443,
                ClbProtocol::Https,
                ClbProtocol::Http,
                Some(30843),
                true
            ),
        ]
    );
}

#[test]
fn aws_listener_policies_logs_draining() {
    let policy = ok(Cloud::Aws, &load("001-aws-ssl-negotiation-policy.yaml")).spec;
    let aws = policy.provider.as_aws().expect("aws");
    assert_eq!(
        aws.ssl_negotiation_policy.as_deref(),
        Some("ELBSecurityPolicy-TLS-1-2-2017-01")
    );
    assert_eq!(aws.clb_listeners[0].lb_protocol, ClbProtocol::Ssl);

    let proxy = ok(Cloud::Aws, &load("001-aws-proxy-protocol.yaml")).spec;
    assert!(proxy.provider.as_aws().expect("aws").proxy_protocol);

    let logs = ok(Cloud::Aws, &load("001-aws-access-logs.yaml")).spec;
    let log = &logs.provider.as_aws().expect("aws").access_log;
    assert!(log.enabled);
    assert_eq!(log.emit_interval_minutes, Some(60));
    assert_eq!(log.s3_bucket_name.as_deref(), Some("my-bucket"));
    assert_eq!(
        log.s3_bucket_prefix.as_deref(),
        Some("my-bucket-prefix/prod")
    );

    let draining = ok(Cloud::Aws, &load("001-aws-connection-draining.yaml")).spec;
    let d = &draining.provider.as_aws().expect("aws").connection_draining;
    assert!(d.enabled);
    assert_eq!(d.timeout_seconds, Some(60));
}

#[test]
fn aws_other_elb_annotations() {
    let parsed = ok(Cloud::Aws, &load("001-aws-other-elb.yaml"));
    let aws = parsed.spec.provider.as_aws().expect("aws");
    assert_eq!(aws.idle_timeout_seconds, 60);
    assert!(aws.cross_zone);
    assert_eq!(
        aws.additional_tags.get("environment").map(String::as_str),
        Some("prod")
    );
    assert_eq!(
        aws.additional_tags.get("owner").map(String::as_str),
        Some("devops")
    );
    // The seed leaves the healthy threshold empty: the default 2 applies, with a warning.
    assert_eq!(aws.health_check.healthy_threshold, 2);
    assert_eq!(parsed.warnings.len(), 1);
    assert!(parsed.warnings[0].to_string().contains("healthy-threshold"));
    assert_eq!(aws.health_check.unhealthy_threshold, 3);
    assert_eq!(aws.health_check.interval_seconds, 20);
    assert_eq!(aws.health_check.timeout_seconds, 5);
    assert_eq!(
        aws.extra_security_groups,
        vec!["sg-53fae93f", "sg-42efd82e"]
    );
}

#[test]
fn aws_nlb_with_local_policy_and_source_ranges() {
    let spec = ok(Cloud::Aws, &load("001-aws-nlb.yaml")).spec;
    assert_eq!(
        spec.traffic_policy,
        TrafficPolicy::Local {
            health_check_node_port: None
        }
    );
    assert_eq!(spec.source_ranges.origin, SourceRangeOrigin::Spec);
    assert_eq!(spec.source_ranges.cidrs[0].to_string(), "143.231.0.0/16");
    let aws = spec.provider.as_aws().expect("aws");
    assert_eq!(aws.kind, AwsLoadBalancerKind::Nlb);
    // Nodes without a pod fail the health check on the healthCheckNodePort.
    assert_eq!(aws.health_check.protocol, HealthCheckProtocol::Http);
    assert_eq!(aws.health_check.port, HealthCheckPort::HealthCheckNodePort);
    assert_eq!(aws.health_check.path.as_deref(), Some("/healthz"));
}

#[test]
fn tencent_tke_annotations() {
    let parsed = ok(Cloud::Tencent, &load("001-tke.yaml"));
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    let ProviderSpec::Tencent(t) = parsed.spec.provider else {
        panic!("tencent")
    };
    assert_eq!(t.backends_label[0].operator, SelectorOperator::In);
    assert_eq!(t.backends_label[0].values, ["value1", "value2"]);
    assert_eq!(t.existed_lb_id.as_deref(), Some("lb-6swtxxxx"));
    assert_eq!(t.extensive_parameters, None);
    assert_eq!(t.listener_parameters, None);
    assert_eq!(
        t.load_balance_type,
        Some(TencentLoadBalanceType::Application)
    );
    assert_eq!(
        t.internet_charge_type,
        Some(InternetChargeType::TrafficPostpaidByHour)
    );
    assert_eq!(t.internet_max_bandwidth_out, Some(10));
    assert!(t.local_svc_only_bind_node_with_pod);

    let placeholders =
        parse(Cloud::Tencent, &load("001-tke-placeholders.yaml")).expect_err("xxxxx");
    assert_eq!(placeholders.len(), 2);
    assert!(placeholders.to_string().contains("\"classic\""));
    assert!(
        placeholders
            .to_string()
            .contains("\"BANDWIDTH_POSTPAID_BY_HOUR\"")
    );
}

#[test]
fn topology_examples_of_seed_002() {
    use TopologyKey::*;
    let cases = [
        ("002-topology-hostname-only.yaml", vec![Hostname]),
        ("002-topology-prefer-hostname.yaml", vec![Hostname, Any]),
        ("002-topology-zone-region.yaml", vec![Zone, Region]),
        ("002-topology-all.yaml", vec![Hostname, Zone, Region, Any]),
    ];
    for (file, keys) in cases {
        let service = as_load_balancer(load(file));
        let parsed = ok(Cloud::Local, &service);
        assert_eq!(parsed.spec.topology_keys, keys, "{file}");
        assert!(parsed.warnings.is_empty(), "{file}: {:?}", parsed.warnings);
    }
}

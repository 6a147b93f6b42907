//! AWS annotations: defaults, valid values, every invalid class, warnings, listener matrix and
//! health-check resolution (reference aws.md §1, §4.1, §4.4, §4.5).

use crate::support;

use kube_lb_annotations::keys::aws as key;
use kube_lb_annotations::{
    AwsHealthCheck, AwsLoadBalancerKind, AwsSpec, ClbListener, ClbProtocol, Cloud, ErrorKind,
    HealthCheckPort, HealthCheckProtocol, NlbListener, NlbProtocol, Scheme,
};
use support::{SvcBuilder, assert_error, assert_warning, port, svc_lb};

const CERT: &str =
    "arn:aws:acm:us-east-1:123456789012:certificate/12345678-1234-1234-1234-123456789012";

fn aws(builder: &SvcBuilder) -> AwsSpec {
    builder
        .ok(Cloud::Aws)
        .spec
        .provider
        .as_aws()
        .cloned()
        .expect("aws provider spec")
}

fn nlb() -> SvcBuilder {
    svc_lb("ns", "web").annotate(key::TYPE, "nlb")
}

#[test]
fn absent_annotations_give_upstream_classic_defaults() {
    let parsed = svc_lb("ns", "web").ok(Cloud::Aws);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
    assert_eq!(parsed.spec.scheme, Scheme::External);
    let spec = parsed.spec.provider.as_aws().cloned().expect("aws");
    assert_eq!(spec.kind, AwsLoadBalancerKind::Classic);
    assert_eq!(
        spec.clb_listeners,
        vec![ClbListener {
            lb_port: 80,
            lb_protocol: ClbProtocol::Tcp,
            instance_port: Some(30080),
            instance_protocol: ClbProtocol::Tcp,
            ssl_certificate_id: None,
        }]
    );
    assert!(spec.nlb_listeners.is_empty());
    assert_eq!(
        spec.health_check,
        AwsHealthCheck {
            protocol: HealthCheckProtocol::Tcp,
            port: HealthCheckPort::TrafficPort,
            path: None,
            healthy_threshold: 2,
            unhealthy_threshold: 6,
            interval_seconds: 10,
            timeout_seconds: 5,
        }
    );
    assert_eq!(spec.idle_timeout_seconds, 60);
    assert!(!spec.proxy_protocol && !spec.cross_zone && !spec.access_log.enabled);
    assert!(!spec.connection_draining.enabled);
    assert_eq!(spec.connection_draining.timeout_seconds, None);
    assert_eq!(spec.access_log.emit_interval_minutes, None);
}

#[test]
fn absent_annotations_give_upstream_nlb_defaults() {
    let spec = aws(&nlb());
    assert_eq!(spec.kind, AwsLoadBalancerKind::Nlb);
    assert!(spec.clb_listeners.is_empty());
    assert_eq!(
        spec.nlb_listeners,
        vec![NlbListener {
            port: 80,
            protocol: NlbProtocol::Tcp,
            node_port: Some(30080),
            target_protocol: NlbProtocol::Tcp,
            certificate_arn: None,
            ssl_policy: None,
        }]
    );
    let hc = spec.health_check;
    assert_eq!(
        (
            hc.protocol,
            hc.port,
            hc.healthy_threshold,
            hc.unhealthy_threshold,
            hc.interval_seconds
        ),
        (
            HealthCheckProtocol::Tcp,
            HealthCheckPort::TrafficPort,
            3,
            3,
            30
        )
    );
}

#[test]
fn valid_values_are_typed() {
    type Check = fn(&AwsSpec, Scheme);
    let cases: &[(&str, &str, Check)] = &[
        (key::INTERNAL, "true", |_, s| {
            assert_eq!(s, Scheme::Internal)
        }),
        (key::INTERNAL, "0.0.0.0/0", |_, s| {
            assert_eq!(s, Scheme::Internal)
        }),
        (key::INTERNAL, "false", |_, s| {
            assert_eq!(s, Scheme::External)
        }),
        (key::INTERNAL, "", |_, s| assert_eq!(s, Scheme::External)),
        (key::PROXY_PROTOCOL, "*", |a, _| assert!(a.proxy_protocol)),
        (key::ACCESS_LOG_EMIT_INTERVAL, "5", |a, _| {
            assert_eq!(a.access_log.emit_interval_minutes, Some(5))
        }),
        (key::ACCESS_LOG_EMIT_INTERVAL, "60", |a, _| {
            assert_eq!(a.access_log.emit_interval_minutes, Some(60))
        }),
        (
            key::ACCESS_LOG_BUCKET_PREFIX,
            "my-bucket-prefix/prod",
            |a, _| {
                assert_eq!(
                    a.access_log.s3_bucket_prefix.as_deref(),
                    Some("my-bucket-prefix/prod")
                )
            },
        ),
        (key::CONNECTION_DRAINING_ENABLED, "True", |a, _| {
            assert!(a.connection_draining.enabled)
        }),
        (key::CONNECTION_DRAINING_ENABLED, "0", |a, _| {
            assert!(!a.connection_draining.enabled)
        }),
        (key::CONNECTION_DRAINING_TIMEOUT, "3600", |a, _| {
            assert_eq!(a.connection_draining.timeout_seconds, Some(3600))
        }),
        (key::CONNECTION_IDLE_TIMEOUT, "4000", |a, _| {
            assert_eq!(a.idle_timeout_seconds, 4000)
        }),
        (key::CONNECTION_IDLE_TIMEOUT, "1", |a, _| {
            assert_eq!(a.idle_timeout_seconds, 1)
        }),
        (key::CROSS_ZONE, "t", |a, _| assert!(a.cross_zone)),
        (
            key::ADDITIONAL_RESOURCE_TAGS,
            "environment=prod,owner=devops",
            |a, _| {
                assert_eq!(
                    a.additional_tags.get("environment").map(String::as_str),
                    Some("prod")
                );
                assert_eq!(
                    a.additional_tags.get("owner").map(String::as_str),
                    Some("devops")
                );
            },
        ),
        (
            key::EXTRA_SECURITY_GROUPS,
            "sg-53fae93f, sg-42efd82e",
            |a, _| assert_eq!(a.extra_security_groups, vec!["sg-53fae93f", "sg-42efd82e"]),
        ),
        (key::SECURITY_GROUPS, "sg-1", |a, _| {
            assert_eq!(a.security_groups, vec!["sg-1"])
        }),
        (key::SUBNETS, "subnet-a, private-b", |a, _| {
            assert_eq!(a.subnets, vec!["subnet-a", "private-b"])
        }),
        (key::TARGET_NODE_LABELS, "role=edge,spot", |a, _| {
            assert_eq!(
                a.target_node_labels.get("role").map(String::as_str),
                Some("edge")
            );
            assert_eq!(
                a.target_node_labels.get("spot").map(String::as_str),
                Some("")
            );
        }),
        (key::HEALTHCHECK_HEALTHY_THRESHOLD, "10", |a, _| {
            assert_eq!(a.health_check.healthy_threshold, 10)
        }),
        (key::HEALTHCHECK_UNHEALTHY_THRESHOLD, "2", |a, _| {
            assert_eq!(a.health_check.unhealthy_threshold, 2)
        }),
        (key::HEALTHCHECK_INTERVAL, "300", |a, _| {
            assert_eq!(a.health_check.interval_seconds, 300)
        }),
        (key::HEALTHCHECK_TIMEOUT, "2", |a, _| {
            assert_eq!(a.health_check.timeout_seconds, 2)
        }),
        (key::HEALTHCHECK_PORT, "8080", |a, _| {
            assert_eq!(a.health_check.port, HealthCheckPort::Number(8080))
        }),
        (key::HEALTHCHECK_PROTOCOL, "HTTP", |a, _| {
            assert_eq!(a.health_check.protocol, HealthCheckProtocol::Http);
            assert_eq!(a.health_check.path.as_deref(), Some("/"));
        }),
        (
            key::SSL_NEGOTIATION_POLICY,
            "ELBSecurityPolicy-TLS-1-2-2017-01",
            |a, _| {
                assert_eq!(
                    a.ssl_negotiation_policy.as_deref(),
                    Some("ELBSecurityPolicy-TLS-1-2-2017-01")
                )
            },
        ),
    ];
    for (k, v, check) in cases {
        let parsed = svc_lb("ns", "web").annotate(k, v).parse(Cloud::Aws);
        let parsed = parsed.unwrap_or_else(|e| panic!("{k}={v:?}: {e}"));
        let spec = parsed.spec.provider.as_aws().expect("aws");
        check(spec, parsed.spec.scheme);
    }
}

#[test]
fn invalid_values_name_key_value_and_what_is_allowed() {
    /// (annotations, on an NLB?, key in the message, kind, message fragment)
    type Case<'a> = (&'a [(&'a str, &'a str)], bool, &'a str, ErrorKind, &'a str);
    let cases: &[Case] = &[
        (
            &[(key::ACCESS_LOG_EMIT_INTERVAL, "30")],
            false,
            key::ACCESS_LOG_EMIT_INTERVAL,
            ErrorKind::OutOfRange,
            "must be 5 or 60",
        ),
        (
            &[(key::ACCESS_LOG_EMIT_INTERVAL, "five")],
            false,
            key::ACCESS_LOG_EMIT_INTERVAL,
            ErrorKind::Invalid,
            "must be 5 or 60",
        ),
        (
            &[(key::ACCESS_LOG_ENABLED, "yes")],
            false,
            key::ACCESS_LOG_ENABLED,
            ErrorKind::Invalid,
            "must be a boolean",
        ),
        (
            &[(key::ACCESS_LOG_ENABLED, "true")],
            false,
            key::ACCESS_LOG_BUCKET_NAME,
            ErrorKind::Missing,
            "no S3 bucket",
        ),
        (
            &[(key::HEALTHCHECK_HEALTHY_THRESHOLD, "1")],
            false,
            key::HEALTHCHECK_HEALTHY_THRESHOLD,
            ErrorKind::OutOfRange,
            "from 2 to 10",
        ),
        (
            &[(key::HEALTHCHECK_UNHEALTHY_THRESHOLD, "11")],
            false,
            key::HEALTHCHECK_UNHEALTHY_THRESHOLD,
            ErrorKind::OutOfRange,
            "from 2 to 10",
        ),
        (
            &[(key::HEALTHCHECK_INTERVAL, "4")],
            false,
            key::HEALTHCHECK_INTERVAL,
            ErrorKind::OutOfRange,
            "from 5 to 300",
        ),
        (
            &[(key::HEALTHCHECK_INTERVAL, "301")],
            false,
            key::HEALTHCHECK_INTERVAL,
            ErrorKind::OutOfRange,
            "from 5 to 300",
        ),
        (
            &[(key::HEALTHCHECK_TIMEOUT, "61")],
            false,
            key::HEALTHCHECK_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 2 to 60",
        ),
        (
            &[(key::HEALTHCHECK_TIMEOUT, "10")],
            false,
            key::HEALTHCHECK_TIMEOUT,
            ErrorKind::Conflict,
            "less than the interval (10s)",
        ),
        (
            &[(key::HEALTHCHECK_INTERVAL, "5")],
            false,
            key::HEALTHCHECK_INTERVAL,
            ErrorKind::Conflict,
            "timeout (5s) must be less",
        ),
        (
            &[(key::HEALTHCHECK_PORT, "http")],
            false,
            key::HEALTHCHECK_PORT,
            ErrorKind::Invalid,
            "traffic-port",
        ),
        (
            &[(key::HEALTHCHECK_PROTOCOL, "UDP")],
            false,
            key::HEALTHCHECK_PROTOCOL,
            ErrorKind::Invalid,
            "\"TCP\"",
        ),
        (
            &[(key::HEALTHCHECK_PROTOCOL, "SSL")],
            true,
            key::HEALTHCHECK_PROTOCOL,
            ErrorKind::Unsupported,
            "NLB health check",
        ),
        (
            &[
                (key::HEALTHCHECK_PROTOCOL, "HTTP"),
                (key::HEALTHCHECK_PATH, "healthz"),
            ],
            false,
            key::HEALTHCHECK_PATH,
            ErrorKind::Invalid,
            "starting with '/'",
        ),
        (
            &[(key::CONNECTION_DRAINING_TIMEOUT, "0")],
            false,
            key::CONNECTION_DRAINING_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 1 to 3600",
        ),
        (
            &[(key::CONNECTION_DRAINING_TIMEOUT, "3601")],
            false,
            key::CONNECTION_DRAINING_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 1 to 3600",
        ),
        (
            &[(key::CONNECTION_IDLE_TIMEOUT, "4001")],
            false,
            key::CONNECTION_IDLE_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 1 to 4000",
        ),
        (
            &[(key::CONNECTION_IDLE_TIMEOUT, "1m")],
            false,
            key::CONNECTION_IDLE_TIMEOUT,
            ErrorKind::Invalid,
            "integer",
        ),
        (
            &[(key::CROSS_ZONE, "enabled")],
            false,
            key::CROSS_ZONE,
            ErrorKind::Invalid,
            "boolean",
        ),
        (
            &[(key::PROXY_PROTOCOL, "true")],
            false,
            key::PROXY_PROTOCOL,
            ErrorKind::Invalid,
            "only supported value is \"*\"",
        ),
        (
            &[(key::SSL_CERT, "arn:a,arn:b")],
            false,
            key::SSL_CERT,
            ErrorKind::Invalid,
            "exactly one",
        ),
        (
            &[(key::SSL_CERT, CERT), (key::BACKEND_PROTOCOL, "grpc")],
            false,
            key::BACKEND_PROTOCOL,
            ErrorKind::Invalid,
            "\"http\"",
        ),
        (
            &[(key::SSL_NEGOTIATION_POLICY, "")],
            false,
            key::SSL_NEGOTIATION_POLICY,
            ErrorKind::Missing,
            "predefined policy",
        ),
        (
            &[(key::EXTRA_SECURITY_GROUPS, "sg-1")],
            true,
            key::EXTRA_SECURITY_GROUPS,
            ErrorKind::Unsupported,
            "not supported by NLB",
        ),
        (
            &[(key::EXTRA_SECURITY_GROUPS, "web-sg")],
            false,
            key::EXTRA_SECURITY_GROUPS,
            ErrorKind::Invalid,
            "security group ID",
        ),
        (
            &[(key::SUBNETS, " , ")],
            false,
            key::SUBNETS,
            ErrorKind::Missing,
            "at least one subnet",
        ),
        (
            &[(
                key::TARGET_GROUP_ATTRIBUTES,
                "proxy_protocol_v2.enabled=true",
            )],
            false,
            key::TARGET_GROUP_ATTRIBUTES,
            ErrorKind::Unsupported,
            "only on an NLB",
        ),
        (
            &[(
                key::TARGET_GROUP_ATTRIBUTES,
                "deregistration_delay.timeout_seconds=30",
            )],
            true,
            key::TARGET_GROUP_ATTRIBUTES,
            ErrorKind::Invalid,
            "unknown attribute",
        ),
        (
            &[(
                key::TARGET_GROUP_ATTRIBUTES,
                "proxy_protocol_v2.enabled=True",
            )],
            true,
            key::TARGET_GROUP_ATTRIBUTES,
            ErrorKind::Invalid,
            "exactly \"true\" or \"false\"",
        ),
        (
            &[(key::TARGET_GROUP_ATTRIBUTES, "proxy_protocol_v2.enabled")],
            true,
            key::TARGET_GROUP_ATTRIBUTES,
            ErrorKind::Invalid,
            "exactly \"true\" or \"false\"",
        ),
        (
            &[
                (key::SUBNETS, "subnet-a,subnet-b"),
                (key::INTERNAL, "true"),
                (key::PRIVATE_IPV4_ADDRESSES, "10.0.0.5"),
            ],
            true,
            key::PRIVATE_IPV4_ADDRESSES,
            ErrorKind::Conflict,
            "1 given but the subnets annotation lists 2",
        ),
        (
            &[
                (key::SUBNETS, "subnet-a"),
                (key::EIP_ALLOCATIONS, "eipalloc-1,eipalloc-2"),
            ],
            true,
            key::EIP_ALLOCATIONS,
            ErrorKind::Conflict,
            "2 given but the subnets annotation lists 1",
        ),
        (
            &[
                (key::EIP_ALLOCATIONS, "eipalloc-1"),
                (key::INTERNAL, "true"),
            ],
            true,
            key::EIP_ALLOCATIONS,
            ErrorKind::Conflict,
            "internal NLB",
        ),
        (
            &[(key::EIP_ALLOCATIONS, "alloc-1")],
            true,
            key::EIP_ALLOCATIONS,
            ErrorKind::Invalid,
            "eipalloc-",
        ),
        (
            &[
                (key::PRIVATE_IPV4_ADDRESSES, "10.0.0.300"),
                (key::INTERNAL, "true"),
            ],
            true,
            key::PRIVATE_IPV4_ADDRESSES,
            ErrorKind::Invalid,
            "not an IPv4 address",
        ),
        (
            &[(key::PRIVATE_IPV4_ADDRESSES, "10.0.0.5")],
            true,
            key::PRIVATE_IPV4_ADDRESSES,
            ErrorKind::Conflict,
            "internal NLB",
        ),
        (
            &[(key::ADDITIONAL_RESOURCE_TAGS, "aws:owner=me")],
            false,
            key::ADDITIONAL_RESOURCE_TAGS,
            ErrorKind::Invalid,
            "\"aws:\"",
        ),
    ];
    for (annotations, is_nlb, at, kind, needle) in cases {
        let mut builder = if *is_nlb { nlb() } else { svc_lb("ns", "web") };
        for (k, v) in annotations.iter() {
            builder = builder.annotate(k, v);
        }
        let errors = builder.err(Cloud::Aws);
        assert_error(&errors, at, *kind, needle);
        // Every message carries the value given, quoted, when there is one.
        for error in errors.errors() {
            if let Some(value) = &error.value {
                assert!(error.to_string().contains(&format!("{value:?}")), "{error}");
            }
        }
    }
}

#[test]
fn spec_fields_aws_rejects_are_early_errors() {
    let cases: Vec<(SvcBuilder, &str, ErrorKind, &str)> = vec![
        (
            svc_lb("ns", "web").lb_ip("192.0.2.10"),
            "spec.loadBalancerIP",
            ErrorKind::Unsupported,
            "requested IP",
        ),
        (
            svc_lb("ns", "web").client_ip(None),
            "spec.sessionAffinity",
            ErrorKind::Unsupported,
            "only \"None\"",
        ),
        (
            svc_lb("ns", "web").ports(vec![port("dns", "UDP", 53, 30053)]),
            "spec.ports[0].protocol",
            ErrorKind::Unsupported,
            "TCP only",
        ),
        (
            nlb().ports(vec![
                port("a", "TCP", 53, 30053),
                port("b", "UDP", 53, 30054),
            ]),
            "spec.ports",
            ErrorKind::Unsupported,
            "mixed protocols",
        ),
        (
            nlb().ports(vec![port("s", "SCTP", 9, 30009)]),
            "spec.ports[0].protocol",
            ErrorKind::Unsupported,
            "TCP or UDP",
        ),
        (
            svc_lb("ns", "web").source_ranges(&["2001:db8::/32"]),
            "spec.loadBalancerSourceRanges[0]",
            ErrorKind::Unsupported,
            "only IPv4",
        ),
        (
            svc_lb("ns", "web")
                .ports(vec![port("", "TCP", 80, 0)])
                .with_spec(|s| s.allocate_load_balancer_node_ports = Some(false)),
            "spec.allocateLoadBalancerNodePorts",
            ErrorKind::Unsupported,
            "node ports",
        ),
        (
            nlb().ports(vec![port("dns", "UDP", 53, 30053)]).annotate(
                key::TARGET_GROUP_ATTRIBUTES,
                "preserve_client_ip.enabled=false",
            ),
            key::TARGET_GROUP_ATTRIBUTES,
            ErrorKind::Unsupported,
            "UDP",
        ),
    ];
    for (builder, at, kind, needle) in cases {
        assert_error(&builder.err(Cloud::Aws), at, kind, needle);
    }
}

#[test]
fn errors_are_collected_not_first_only() {
    let errors = svc_lb("ns", "web")
        .lb_ip("192.0.2.1")
        .annotate(key::ACCESS_LOG_EMIT_INTERVAL, "7")
        .annotate(key::HEALTHCHECK_HEALTHY_THRESHOLD, "1")
        .annotate(key::PROXY_PROTOCOL, "v2")
        .annotate(key::CONNECTION_IDLE_TIMEOUT, "0")
        .err(Cloud::Aws);
    assert_eq!(errors.len(), 5, "{errors}");
}

#[test]
fn surprising_upstream_behaviour_is_a_warning() {
    let cases: Vec<(SvcBuilder, &str, &str)> = vec![
        (
            svc_lb("ns", "web").annotate(key::TYPE, "NLB"),
            key::TYPE,
            "did you mean \"nlb\"",
        ),
        (
            svc_lb("ns", "web").annotate(key::TYPE, "network"),
            key::TYPE,
            "Classic ELB",
        ),
        (
            svc_lb("ns", "web").annotate(key::INTERNAL, "False"),
            key::INTERNAL,
            "INTERNAL",
        ),
        (
            svc_lb("ns", "web")
                .ports(vec![
                    port("http", "TCP", 80, 30080),
                    port("https", "TCP", 443, 30443),
                    port("alt", "TCP", 8443, 30843),
                ])
                .annotate(key::SSL_CERT, CERT)
                .annotate(key::SSL_PORTS, "443, 8443"),
            key::SSL_PORTS,
            "whitespace",
        ),
        (
            svc_lb("ns", "web")
                .annotate(key::SSL_CERT, CERT)
                .annotate(key::SSL_PORTS, "8443"),
            key::SSL_PORTS,
            "port 8443 is not a port of this Service",
        ),
        (
            svc_lb("ns", "web")
                .ports(vec![port("https", "TCP", 443, 30443)])
                .annotate(key::SSL_CERT, CERT)
                .annotate(key::SSL_PORTS, "HTTPS"),
            key::SSL_PORTS,
            "upper case",
        ),
        (
            svc_lb("ns", "web").annotate(key::SSL_PORTS, "443"),
            key::SSL_PORTS,
            "without the ssl-cert",
        ),
        (
            svc_lb("ns", "web").annotate(key::BACKEND_PROTOCOL, "HTTP"),
            key::BACKEND_PROTOCOL,
            "silently uses tcp (values are lower case)",
        ),
        (
            svc_lb("ns", "web").annotate(key::BACKEND_PROTOCOL, "grpc"),
            key::BACKEND_PROTOCOL,
            "silently uses tcp",
        ),
        (
            svc_lb("ns", "web").annotate(key::HEALTHCHECK_PROTOCOL, "http"),
            key::HEALTHCHECK_PROTOCOL,
            "write \"HTTP\"",
        ),
        (
            svc_lb("ns", "web").annotate(key::HEALTHCHECK_HEALTHY_THRESHOLD, ""),
            key::HEALTHCHECK_HEALTHY_THRESHOLD,
            "empty value",
        ),
        (
            svc_lb("ns", "web").annotate(key::HEALTHCHECK_PATH, "/ready"),
            key::HEALTHCHECK_PATH,
            "ignored",
        ),
        (
            svc_lb("ns", "web").annotate(key::EIP_ALLOCATIONS, "eipalloc-1"),
            key::EIP_ALLOCATIONS,
            "NLBs only",
        ),
        (
            nlb().annotate(key::CONNECTION_DRAINING_ENABLED, "true"),
            key::CONNECTION_DRAINING_ENABLED,
            "Classic ELBs only",
        ),
        (
            nlb().annotate(key::CONNECTION_IDLE_TIMEOUT, "120"),
            key::CONNECTION_IDLE_TIMEOUT,
            "Classic ELBs only",
        ),
        (
            nlb().annotate(key::PROXY_PROTOCOL, "*"),
            key::PROXY_PROTOCOL,
            "proxy_protocol_v2",
        ),
        (
            nlb().annotate(key::HEALTHCHECK_TIMEOUT, "6"),
            key::HEALTHCHECK_TIMEOUT,
            "never sends",
        ),
        (
            nlb().annotate(key::SECURITY_GROUPS, "sg-1"),
            key::SECURITY_GROUPS,
            "managed NLB security-group mode",
        ),
        (
            nlb().annotate(key::BACKEND_PROTOCOL, "http"),
            key::BACKEND_PROTOCOL,
            "only \"ssl\"",
        ),
        (
            svc_lb("ns", "web").annotate(key::SSL_NEGOTIATION_POLICY, "ELBSecurityPolicy-2016-08"),
            key::SSL_NEGOTIATION_POLICY,
            "no listener uses TLS",
        ),
        (
            svc_lb("ns", "web").annotate(
                "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type",
                "ip",
            ),
            "nlb-target-type",
            "aws-load-balancer-controller",
        ),
        (
            svc_lb("ns", "web").annotate(
                "service.beta.kubernetes.io/aws-load-balancer-healthcheck-intervall",
                "20",
            ),
            "intervall",
            "typo",
        ),
        (
            svc_lb("ns", "web").annotate(key::ACCESS_LOG_BUCKET_NAME, "logs"),
            key::ACCESS_LOG_ENABLED,
            "access logs are off",
        ),
        (
            svc_lb("ns", "web").annotate("cloud.google.com/load-balancer-type", "Internal"),
            "metadata.annotations",
            "for cloud gcp have no effect on cloud aws: cloud.google.com/load-balancer-type",
        ),
    ];
    for (builder, at, needle) in cases {
        let parsed = builder.ok(Cloud::Aws);
        assert_warning(&parsed, at, needle);
    }
}

#[test]
fn implemented_elsewhere_is_left_to_the_other_controller() {
    for value in ["nlb-ip", "external"] {
        let parsed = svc_lb("ns", "web")
            .annotate(key::TYPE, value)
            // Would be an error for the legacy provider; the other controller owns it.
            .annotate(
                "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type",
                "ip",
            )
            .lb_ip("192.0.2.1")
            .ok(Cloud::Aws);
        let spec = parsed.spec.provider.as_aws().expect("aws");
        assert_eq!(spec.kind, AwsLoadBalancerKind::ImplementedElsewhere);
        assert!(spec.clb_listeners.is_empty() && spec.nlb_listeners.is_empty());
        assert_warning(&parsed, key::TYPE, "aws-load-balancer-controller");
    }
}

#[test]
fn type_cannot_change_after_creation() {
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    let with_host = |b: SvcBuilder, host: &str| {
        let mut b = b;
        b.0.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![LoadBalancerIngress {
                    hostname: Some(host.to_owned()),
                    ..Default::default()
                }]),
            }),
            ..Default::default()
        });
        b
    };
    let clb_host = "a1b2-123.us-east-1.elb.amazonaws.com";
    let nlb_host = "a1b2-456.elb.us-east-1.amazonaws.com";
    assert_error(
        &with_host(nlb(), clb_host).err(Cloud::Aws),
        key::TYPE,
        ErrorKind::Conflict,
        "cannot change",
    );
    assert_error(
        &with_host(svc_lb("ns", "web"), nlb_host).err(Cloud::Aws),
        key::TYPE,
        ErrorKind::Conflict,
        "cannot change",
    );
    with_host(nlb(), nlb_host).ok(Cloud::Aws);
    with_host(svc_lb("ns", "web"), clb_host).ok(Cloud::Aws);
}

/// aws.md §4.1, row by row.
#[test]
fn clb_listener_matrix() {
    use ClbProtocol::*;
    let cases: &[(bool, Option<&str>, ClbProtocol, ClbProtocol)] = &[
        (true, None, Ssl, Tcp),
        (true, Some("tcp"), Ssl, Tcp),
        (true, Some("ssl"), Ssl, Ssl),
        (true, Some("http"), Https, Http),
        (true, Some("https"), Https, Https),
        (false, Some("http"), Http, Http),
        (false, Some("https"), Tcp, Tcp),
        (false, Some("ssl"), Tcp, Tcp),
        (false, Some("tcp"), Tcp, Tcp),
        (false, None, Tcp, Tcp),
    ];
    for (cert, backend, lb, instance) in cases {
        let mut b = svc_lb("ns", "web");
        if *cert {
            b = b.annotate(key::SSL_CERT, CERT);
        }
        if let Some(backend) = backend {
            b = b.annotate(key::BACKEND_PROTOCOL, backend);
        }
        let listener = aws(&b).clb_listeners[0].clone();
        assert_eq!(
            (
                listener.lb_protocol,
                listener.instance_protocol,
                listener.ssl_certificate_id.is_some()
            ),
            (*lb, *instance, *cert),
            "cert={cert} backend={backend:?}"
        );
    }
}

#[test]
fn ssl_ports_select_listeners_by_number_and_name() {
    // The seed example: ports 80, 443, 8443 with backend http and ssl-ports "443,8443".
    let b = svc_lb("ns", "web")
        .ports(vec![
            port("http", "TCP", 80, 30080),
            port("https", "TCP", 443, 30443),
            port("alt", "TCP", 8443, 30843),
        ])
        .annotate(key::SSL_CERT, CERT)
        .annotate(key::BACKEND_PROTOCOL, "http")
        .annotate(key::SSL_PORTS, "443,8443");
    let protocols: Vec<(u16, ClbProtocol)> = aws(&b)
        .clb_listeners
        .iter()
        .map(|l| (l.lb_port, l.lb_protocol))
        .collect();
    assert_eq!(
        protocols,
        vec![
            (80, ClbProtocol::Http),
            (443, ClbProtocol::Https),
            (8443, ClbProtocol::Https)
        ]
    );

    let by_name = b.clone().annotate(key::SSL_PORTS, "https");
    let protocols: Vec<ClbProtocol> = aws(&by_name)
        .clb_listeners
        .iter()
        .map(|l| l.lb_protocol)
        .collect();
    assert_eq!(
        protocols,
        vec![ClbProtocol::Http, ClbProtocol::Https, ClbProtocol::Http]
    );

    for all in ["", "*"] {
        let every = b.clone().annotate(key::SSL_PORTS, all);
        assert!(
            aws(&every)
                .clb_listeners
                .iter()
                .all(|l| l.lb_protocol == ClbProtocol::Https),
            "{all:?}"
        );
    }
}

/// aws.md §4.5: TLS when not UDP, cert set and selected; TLS target only with backend ssl.
#[test]
fn nlb_listener_matrix() {
    use NlbProtocol::*;
    let cases: &[(&str, bool, Option<&str>, NlbProtocol, NlbProtocol)] = &[
        ("TCP", false, None, Tcp, Tcp),
        ("TCP", true, None, Tls, Tcp),
        ("TCP", true, Some("ssl"), Tls, Tls),
        ("TCP", true, Some("tcp"), Tls, Tcp),
        ("TCP", false, Some("ssl"), Tcp, Tcp),
        ("UDP", false, None, Udp, Udp),
    ];
    for (protocol, cert, backend, listener, target) in cases {
        let mut b = nlb().ports(vec![port("p", protocol, 443, 30443)]).annotate(
            key::SSL_NEGOTIATION_POLICY,
            "ELBSecurityPolicy-TLS13-1-2-2021-06",
        );
        if *cert {
            b = b.annotate(key::SSL_CERT, CERT);
        }
        if let Some(backend) = backend {
            b = b.annotate(key::BACKEND_PROTOCOL, backend);
        }
        let got = aws(&b).nlb_listeners[0].clone();
        assert_eq!(
            (got.protocol, got.target_protocol),
            (*listener, *target),
            "{protocol} cert={cert} backend={backend:?}"
        );
        let tls = *listener == Tls;
        assert_eq!(got.certificate_arn.is_some(), tls);
        assert_eq!(got.ssl_policy.is_some(), tls);
        assert_eq!(got.node_port, Some(30443));
    }
}

#[test]
fn tls_on_udp_nlb_ports_is_an_early_error() {
    let udp = || nlb().ports(vec![port("dns", "UDP", 53, 30053)]);
    let errors = udp().annotate(key::SSL_CERT, CERT).err(Cloud::Aws);
    assert_error(
        &errors,
        key::SSL_CERT,
        ErrorKind::Unsupported,
        "cannot terminate TLS on UDP",
    );
    let errors = udp()
        .annotate(key::SSL_CERT, CERT)
        .annotate(key::SSL_PORTS, "dns")
        .err(Cloud::Aws);
    assert_error(
        &errors,
        key::SSL_PORTS,
        ErrorKind::Unsupported,
        "port 53 is UDP",
    );
    // A cert for other ports only is fine: the UDP listener stays plain.
    let spec = aws(&udp()
        .annotate(key::SSL_CERT, CERT)
        .annotate(key::SSL_PORTS, "443"));
    assert_eq!(spec.nlb_listeners[0].protocol, NlbProtocol::Udp);
}

#[test]
fn health_check_resolution() {
    struct Case {
        name: &'static str,
        builder: SvcBuilder,
        protocol: HealthCheckProtocol,
        port: HealthCheckPort,
        path: Option<&'static str>,
        numbers: (u32, u32, u32, u32),
    }
    use HealthCheckPort::*;
    use HealthCheckProtocol::*;
    let cases = vec![
        Case {
            name: "clb cluster",
            builder: svc_lb("ns", "web"),
            protocol: Tcp,
            port: TrafficPort,
            path: None,
            numbers: (2, 6, 10, 5),
        },
        Case {
            name: "clb cluster backend ssl",
            builder: svc_lb("ns", "web").annotate(key::BACKEND_PROTOCOL, "https"),
            protocol: Ssl,
            port: TrafficPort,
            path: None,
            numbers: (2, 6, 10, 5),
        },
        Case {
            name: "clb local",
            builder: svc_lb("ns", "web").local(32000),
            protocol: Http,
            port: Number(32000),
            path: Some("/healthz"),
            numbers: (2, 6, 10, 5),
        },
        Case {
            name: "clb local unallocated",
            builder: svc_lb("ns", "web").local(0),
            protocol: Http,
            port: HealthCheckNodePort,
            path: Some("/healthz"),
            numbers: (2, 6, 10, 5),
        },
        Case {
            name: "clb local traffic-port",
            builder: svc_lb("ns", "web")
                .local(32000)
                .annotate(key::HEALTHCHECK_PORT, "traffic-port"),
            protocol: Http,
            port: TrafficPort,
            path: Some("/healthz"),
            numbers: (2, 6, 10, 5),
        },
        Case {
            name: "clb overrides",
            builder: svc_lb("ns", "web")
                .annotate(key::HEALTHCHECK_PROTOCOL, "HTTPS")
                .annotate(key::HEALTHCHECK_PORT, "8443")
                .annotate(key::HEALTHCHECK_PATH, "/ready")
                .annotate(key::HEALTHCHECK_HEALTHY_THRESHOLD, "3")
                .annotate(key::HEALTHCHECK_UNHEALTHY_THRESHOLD, "4")
                .annotate(key::HEALTHCHECK_INTERVAL, "20")
                .annotate(key::HEALTHCHECK_TIMEOUT, "6"),
            protocol: Https,
            port: Number(8443),
            path: Some("/ready"),
            numbers: (3, 4, 20, 6),
        },
        Case {
            name: "nlb cluster",
            builder: nlb(),
            protocol: Tcp,
            port: TrafficPort,
            path: None,
            numbers: (3, 3, 30, 10),
        },
        Case {
            name: "nlb local",
            builder: nlb().local(32001),
            protocol: Http,
            port: Number(32001),
            path: Some("/healthz"),
            numbers: (2, 2, 10, 10),
        },
        Case {
            name: "nlb http path default",
            builder: nlb().annotate(key::HEALTHCHECK_PROTOCOL, "http"),
            protocol: Http,
            port: TrafficPort,
            path: Some("/"),
            numbers: (3, 3, 30, 10),
        },
    ];
    for case in cases {
        let hc = aws(&case.builder).health_check;
        assert_eq!(hc.protocol, case.protocol, "{}", case.name);
        assert_eq!(hc.port, case.port, "{}", case.name);
        assert_eq!(hc.path.as_deref(), case.path, "{}", case.name);
        assert_eq!(
            (
                hc.healthy_threshold,
                hc.unhealthy_threshold,
                hc.interval_seconds,
                hc.timeout_seconds
            ),
            case.numbers,
            "{}",
            case.name
        );
    }
}

#[test]
fn additional_tags_also_reach_the_core_spec() {
    let parsed = svc_lb("ns", "web")
        .annotate(key::ADDITIONAL_RESOURCE_TAGS, "team=a, cost=")
        .ok(Cloud::Aws);
    assert_eq!(
        parsed.spec.extra_tags.get("team").map(String::as_str),
        Some("a")
    );
    assert_eq!(
        parsed.spec.extra_tags.get("cost").map(String::as_str),
        Some("")
    );
}

#[test]
fn nlb_subnet_mappings_and_target_group_attributes_are_typed() {
    let spec = aws(&nlb()
        .annotate(key::INTERNAL, "true")
        .annotate(key::SUBNETS, "subnet-a,subnet-b")
        .annotate(key::PRIVATE_IPV4_ADDRESSES, "10.0.1.5,10.0.2.5")
        .annotate(
            key::TARGET_GROUP_ATTRIBUTES,
            "preserve_client_ip.enabled=false, proxy_protocol_v2.enabled=true",
        ));
    assert_eq!(spec.private_ipv4_addresses.len(), 2);
    assert_eq!(spec.target_group_attributes.preserve_client_ip, Some(false));
    assert_eq!(spec.target_group_attributes.proxy_protocol_v2, Some(true));
    let spec = aws(&nlb()
        .annotate(key::SUBNETS, "subnet-a")
        .annotate(key::EIP_ALLOCATIONS, "eipalloc-0a1"));
    assert_eq!(spec.eip_allocations, vec!["eipalloc-0a1"]);
}

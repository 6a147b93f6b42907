//! GCP, Azure, OpenStack, Tencent TKE and Baidu CCE annotations.

use crate::support;

use kube_lb_annotations::keys::{azure, baidu, gcp, openstack, tencent};
use kube_lb_annotations::{
    AzureProbeProtocol, AzureSpec, Cloud, ErrorKind, GcpLoadBalancerType, InternetChargeType,
    LabelRequirement, LbMethod, NetworkTier, OpenstackProxyProtocol, ProviderSpec, Scheme,
    SelectorOperator, TencentLoadBalanceType, TencentSpec, parse_label_selector,
};
use support::{SvcBuilder, assert_error, assert_warning, port, svc_lb};

fn azure_spec(b: &SvcBuilder) -> AzureSpec {
    b.ok(Cloud::Azure)
        .spec
        .provider
        .as_azure()
        .cloned()
        .expect("azure")
}

fn tencent_spec(b: &SvcBuilder) -> TencentSpec {
    match b.ok(Cloud::Tencent).spec.provider {
        ProviderSpec::Tencent(t) => t,
        other => panic!("{other:?}"),
    }
}

#[test]
fn internal_keys_of_every_cloud_set_the_scheme() {
    let cases: &[(Cloud, &str, &str, Scheme)] = &[
        (
            Cloud::Gcp,
            gcp::LEGACY_LOAD_BALANCER_TYPE,
            "Internal",
            Scheme::Internal,
        ),
        (
            Cloud::Gcp,
            gcp::LOAD_BALANCER_TYPE,
            "Internal",
            Scheme::Internal,
        ),
        (
            Cloud::Gcp,
            gcp::LEGACY_LOAD_BALANCER_TYPE,
            "internal",
            Scheme::Internal,
        ),
        (
            Cloud::Gcp,
            gcp::LOAD_BALANCER_TYPE,
            "External",
            Scheme::External,
        ),
        (Cloud::Azure, azure::INTERNAL, "true", Scheme::Internal),
        (Cloud::Azure, azure::INTERNAL, "false", Scheme::External),
        (
            Cloud::Openstack,
            openstack::INTERNAL,
            "true",
            Scheme::Internal,
        ),
        (Cloud::Baidu, baidu::INTERNAL_VPC, "true", Scheme::Internal),
        (
            Cloud::Tencent,
            tencent::INTERNAL_SUBNET_ID,
            "subnet-xxxxx",
            Scheme::Internal,
        ),
    ];
    for (cloud, k, v, scheme) in cases {
        let spec = svc_lb("ns", "web").annotate(k, v).ok(*cloud).spec;
        assert_eq!(spec.scheme, *scheme, "{cloud} {k}={v}");
        let absent = svc_lb("ns", "web").ok(*cloud).spec;
        assert_eq!(absent.scheme, Scheme::External, "{cloud} default");
    }
}

#[test]
fn gcp_options_and_warnings() {
    let parsed = svc_lb("ns", "web")
        .annotate(gcp::LOAD_BALANCER_TYPE, "Internal")
        .annotate(gcp::INTERNAL_SUBNET, "ilb-subnet")
        .annotate(gcp::ALLOW_GLOBAL_ACCESS, "true")
        .ok(Cloud::Gcp);
    let spec = parsed.spec.provider.as_gcp().cloned().expect("gcp");
    assert_eq!(spec.load_balancer_type, GcpLoadBalancerType::Internal);
    assert_eq!(spec.internal_subnet.as_deref(), Some("ilb-subnet"));
    assert!(spec.global_access);
    assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);

    let typo = svc_lb("ns", "web")
        .annotate(gcp::LEGACY_LOAD_BALANCER_TYPE, "Intrenal")
        .ok(Cloud::Gcp);
    assert_eq!(typo.spec.scheme, Scheme::External);
    assert_warning(&typo, gcp::LEGACY_LOAD_BALANCER_TYPE, "EXTERNAL");
    let lower = svc_lb("ns", "web")
        .annotate(gcp::LEGACY_LOAD_BALANCER_TYPE, "internal")
        .ok(Cloud::Gcp);
    assert_warning(&lower, gcp::LEGACY_LOAD_BALANCER_TYPE, "deprecated");
    let both = svc_lb("ns", "web")
        .annotate(gcp::LOAD_BALANCER_TYPE, "Internal")
        .annotate(gcp::LEGACY_LOAD_BALANCER_TYPE, "External")
        .ok(Cloud::Gcp);
    assert_eq!(both.spec.scheme, Scheme::Internal);
    assert_warning(&both, gcp::LEGACY_LOAD_BALANCER_TYPE, "read first");
    let external_subnet = svc_lb("ns", "web")
        .annotate(gcp::INTERNAL_SUBNET, "s")
        .ok(Cloud::Gcp);
    assert_warning(
        &external_subnet,
        gcp::INTERNAL_SUBNET,
        "internal load balancers only",
    );
    let class = svc_lb("ns", "web")
        .with_spec(|s| s.load_balancer_class = Some(gcp::CLASS_EXTERNAL.into()))
        .annotate(gcp::LOAD_BALANCER_TYPE, "Internal")
        .ok(Cloud::Gcp);
    assert_eq!(class.spec.scheme, Scheme::External);
    assert_warning(
        &class,
        gcp::LOAD_BALANCER_TYPE,
        "conflicts with loadBalancerClass",
    );

    let tier = svc_lb("ns", "web")
        .annotate(gcp::NETWORK_TIER, "Standard")
        .ok(Cloud::Gcp);
    assert_eq!(
        tier.spec.provider.as_gcp().and_then(|g| g.network_tier),
        Some(NetworkTier::Standard)
    );
    let bad_tier = svc_lb("ns", "web")
        .annotate(gcp::NETWORK_TIER, "Gold")
        .err(Cloud::Gcp);
    assert_error(
        &bad_tier,
        gcp::NETWORK_TIER,
        ErrorKind::Invalid,
        "\"Premium\" or \"Standard\"",
    );
}

#[test]
fn azure_common_annotations() {
    let spec = azure_spec(
        &svc_lb("ns", "web")
            .annotate(azure::INTERNAL, "true")
            .annotate(azure::INTERNAL_SUBNET, "apps")
            .annotate(azure::RESOURCE_GROUP, " rg-net ")
            .annotate(azure::DNS_LABEL_NAME, "myapp")
            .annotate(azure::TCP_IDLE_TIMEOUT, "30")
            .annotate(azure::HA_PORTS, "True")
            .annotate(azure::PROBE_PROTOCOL, "http")
            .annotate(azure::PROBE_INTERVAL, "10")
            .annotate(azure::PROBE_NUM, "3")
            .annotate(azure::PROBE_REQUEST_PATH, "/ready")
            .annotate(azure::PIP_TAGS, "a=b,c=d")
            .annotate(
                azure::ALLOWED_SERVICE_TAGS,
                "AzureFrontDoor.Backend, VirtualNetwork",
            )
            .annotate(
                "service.beta.kubernetes.io/port_80_health-probe_protocol",
                "Tcp",
            )
            .annotate("service.beta.kubernetes.io/port_80_no_probe_rule", "true"),
    );
    assert!(spec.internal);
    assert_eq!(spec.internal_subnet.as_deref(), Some("apps"));
    assert_eq!(spec.resource_group.as_deref(), Some("rg-net"));
    assert_eq!(spec.dns_label_name.as_deref(), Some("myapp"));
    assert_eq!(spec.tcp_idle_timeout_minutes, 30);
    assert!(spec.high_availability_ports);
    assert_eq!(spec.health_probe.protocol, AzureProbeProtocol::Http);
    assert_eq!(
        (
            spec.health_probe.interval_seconds,
            spec.health_probe.num_of_probe
        ),
        (10, 3)
    );
    assert_eq!(spec.health_probe.request_path, "/ready");
    assert_eq!(spec.pip_tags.len(), 2);
    assert_eq!(
        spec.allowed_service_tags,
        vec!["AzureFrontDoor.Backend", "VirtualNetwork"]
    );
    let port80 = spec.port_overrides.get("80").expect("port 80 override");
    assert_eq!(port80.protocol, Some(AzureProbeProtocol::Tcp));
    assert!(port80.no_probe_rule);

    let defaults = azure_spec(&svc_lb("ns", "web"));
    assert_eq!(defaults.tcp_idle_timeout_minutes, 4);
    assert_eq!(
        (
            defaults.health_probe.interval_seconds,
            defaults.health_probe.num_of_probe
        ),
        (5, 2)
    );
    assert_eq!(defaults.health_probe.protocol, AzureProbeProtocol::Tcp);

    let local = azure_spec(&svc_lb("ns", "web").local(32000));
    assert_eq!(local.health_probe.protocol, AzureProbeProtocol::Http);
    assert_eq!(local.health_probe.request_path, "/healthz");
}

#[test]
fn azure_value_policy() {
    let errors: Vec<(SvcBuilder, &str, ErrorKind, &str)> = vec![
        (
            svc_lb("ns", "web").annotate(azure::TCP_IDLE_TIMEOUT, "3"),
            azure::TCP_IDLE_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 4 to 100",
        ),
        (
            svc_lb("ns", "web").annotate(azure::TCP_IDLE_TIMEOUT, "101"),
            azure::TCP_IDLE_TIMEOUT,
            ErrorKind::OutOfRange,
            "from 4 to 100",
        ),
        (
            svc_lb("ns", "web").annotate(azure::PROBE_INTERVAL, "4"),
            azure::PROBE_INTERVAL,
            ErrorKind::OutOfRange,
            "at least 5 (seconds)",
        ),
        (
            svc_lb("ns", "web").annotate(azure::PROBE_NUM, "1"),
            azure::PROBE_NUM,
            ErrorKind::OutOfRange,
            "at least 2 (probes)",
        ),
        (
            svc_lb("ns", "web")
                .annotate(azure::PROBE_INTERVAL, "60")
                .annotate(azure::PROBE_NUM, "2"),
            azure::PROBE_INTERVAL,
            ErrorKind::OutOfRange,
            "below 120",
        ),
        (
            svc_lb("ns", "web").annotate(azure::HA_PORTS, "true"),
            azure::HA_PORTS,
            ErrorKind::Unsupported,
            "internal",
        ),
        (
            svc_lb("ns", "web")
                .source_ranges(&["10.0.0.0/8"])
                .annotate(azure::ALLOWED_IP_RANGES, "192.168.0.0/16"),
            azure::ALLOWED_IP_RANGES,
            ErrorKind::Conflict,
            "loadBalancerSourceRanges",
        ),
        (
            svc_lb("ns", "web").annotate(azure::IPV4, "2001:db8::1"),
            azure::IPV4,
            ErrorKind::Invalid,
            "IPv4",
        ),
        (
            svc_lb("ns", "web").annotate(azure::ALLOWED_IP_RANGES, "office"),
            azure::ALLOWED_IP_RANGES,
            ErrorKind::Invalid,
            "CIDR",
        ),
    ];
    for (b, at, kind, needle) in errors {
        assert_error(&b.err(Cloud::Azure), at, kind, needle);
    }
    let warnings: Vec<(SvcBuilder, &str, &str)> = vec![
        (
            svc_lb("ns", "web").annotate(azure::INTERNAL, "True"),
            azure::INTERNAL,
            "exactly \"true\"",
        ),
        (
            svc_lb("ns", "web").annotate(azure::INTERNAL_SUBNET, "apps"),
            azure::INTERNAL_SUBNET,
            "only honoured for internal",
        ),
        (
            svc_lb("ns", "web").annotate(azure::PROBE_PROTOCOL, "grpc"),
            azure::PROBE_PROTOCOL,
            "TCP",
        ),
        (
            svc_lb("ns", "web").annotate("service.beta.kubernetes.io/azure-pls-create", "true"),
            "azure-pls-create",
            "not implemented",
        ),
        (
            svc_lb("ns", "web").annotate("service.beta.kubernetes.io/port_8080_no_lb_rule", "true"),
            "port_8080",
            "neither a port number",
        ),
        (
            svc_lb("ns", "web")
                .local(0)
                .annotate(azure::PROBE_PROTOCOL, "Tcp"),
            azure::PROBE_PROTOCOL,
            "Local",
        ),
    ];
    for (b, at, needle) in warnings {
        assert_warning(&b.ok(Cloud::Azure), at, needle);
    }
}

#[test]
fn openstack_options() {
    let parsed = svc_lb("ns", "web")
        .annotate(openstack::INTERNAL, "true")
        .annotate(openstack::LB_METHOD, "SOURCE_IP")
        .annotate(openstack::PROXY_PROTOCOL, "v2")
        .annotate(openstack::CONNECTION_LIMIT, "1000")
        .ok(Cloud::Openstack);
    let ProviderSpec::Openstack(spec) = parsed.spec.provider else {
        panic!("openstack")
    };
    assert!(spec.internal);
    assert_eq!(spec.lb_method, Some(LbMethod::SourceIp));
    assert_eq!(spec.proxy_protocol, Some(OpenstackProxyProtocol::V2));
    assert_eq!(spec.connection_limit, 1000);
    let errors = svc_lb("ns", "web")
        .annotate(openstack::LB_METHOD, "RANDOM")
        .annotate(openstack::PROXY_PROTOCOL, "true")
        .annotate(openstack::X_FORWARDED_FOR, "true")
        .err(Cloud::Openstack);
    assert_error(
        &errors,
        openstack::LB_METHOD,
        ErrorKind::Invalid,
        "\"ROUND_ROBIN\"",
    );
    assert_error(
        &errors,
        openstack::X_FORWARDED_FOR,
        ErrorKind::Conflict,
        "proxy-protocol",
    );
    let yes = svc_lb("ns", "web")
        .annotate(openstack::INTERNAL, "yes")
        .ok(Cloud::Openstack);
    assert_eq!(yes.spec.scheme, Scheme::External);
    assert_warning(&yes, openstack::INTERNAL, "treated as false");
}

#[test]
fn tencent_the_eight_tke_annotations() {
    let spec = tencent_spec(
        &svc_lb("ns", "web")
            .local(0)
            .annotate(tencent::BACKENDS_LABEL, "key in (value1, value2)")
            .annotate(tencent::EXISTED_LBID, "lb-6swtxxxx")
            .annotate(tencent::EXTENSIVE_PARAMETERS, r#"{"VipIsp":"CTCC"}"#)
            .annotate(
                tencent::LISTENER_PARAMETERS,
                r#"{"Scheduler":"LEAST_CONN"}"#,
            )
            .annotate(tencent::LOADBALANCE_TYPE, "application")
            .annotate(tencent::INTERNET_CHARGE_TYPE, "TRAFFIC_POSTPAID_BY_HOUR")
            .annotate(tencent::INTERNET_MAX_BANDWIDTH_OUT, "10")
            .annotate(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD, "true"),
    );
    assert_eq!(
        spec.backends_label,
        vec![LabelRequirement {
            key: "key".into(),
            operator: SelectorOperator::In,
            values: vec!["value1".into(), "value2".into()]
        }]
    );
    assert_eq!(spec.existed_lb_id.as_deref(), Some("lb-6swtxxxx"));
    assert_eq!(
        spec.extensive_parameters
            .as_ref()
            .and_then(|m| m.get("VipIsp"))
            .and_then(|v| v.as_str()),
        Some("CTCC")
    );
    assert!(spec.listener_parameters.is_some());
    assert_eq!(
        spec.load_balance_type,
        Some(TencentLoadBalanceType::Application)
    );
    assert_eq!(
        spec.internet_charge_type,
        Some(InternetChargeType::TrafficPostpaidByHour)
    );
    assert_eq!(spec.internet_max_bandwidth_out, Some(10));
    assert!(spec.local_svc_only_bind_node_with_pod);

    let errors = svc_lb("ns", "web")
        .annotate(tencent::INTERNAL_SUBNET_ID, "xxxxx")
        .annotate(tencent::BACKENDS_LABEL, "key in value1")
        .annotate(tencent::EXISTED_LBID, "6swtxxxx")
        .annotate(tencent::EXTENSIVE_PARAMETERS, "[1]")
        .annotate(tencent::LISTENER_PARAMETERS, "{not json")
        .annotate(tencent::LOADBALANCE_TYPE, "xxxxx")
        .annotate(tencent::INTERNET_CHARGE_TYPE, "xxxxxx")
        .annotate(tencent::INTERNET_MAX_BANDWIDTH_OUT, "2049")
        .annotate(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD, "sure")
        .err(Cloud::Tencent);
    assert_eq!(errors.len(), 9, "{errors}");
    assert_error(
        &errors,
        tencent::LOADBALANCE_TYPE,
        ErrorKind::Invalid,
        "\"classic\"",
    );
    assert_error(
        &errors,
        tencent::INTERNET_CHARGE_TYPE,
        ErrorKind::Invalid,
        "\"TRAFFIC_POSTPAID_BY_HOUR\" or \"BANDWIDTH_POSTPAID_BY_HOUR\"",
    );
    assert_error(
        &errors,
        tencent::INTERNET_MAX_BANDWIDTH_OUT,
        ErrorKind::OutOfRange,
        "from 1 to 2000",
    );
    assert_error(
        &errors,
        tencent::BACKENDS_LABEL,
        ErrorKind::Invalid,
        "parentheses",
    );

    // The seed's range is [1, 2000]: 2001-2048 (newer docs) are refused, 2000 is not.
    for (value, accepted) in [("2000", true), ("2001", false), ("2048", false)] {
        let svc = svc_lb("ns", "web").annotate(tencent::INTERNET_MAX_BANDWIDTH_OUT, value);
        if accepted {
            assert_eq!(tencent_spec(&svc).internet_max_bandwidth_out, Some(2000));
        } else {
            let errors = svc.err(Cloud::Tencent);
            assert_error(
                &errors,
                tencent::INTERNET_MAX_BANDWIDTH_OUT,
                ErrorKind::OutOfRange,
                "from 1 to 2000",
            );
        }
    }
    // kube-lb builds application CLBs only: classic is refused, naming why.
    for value in ["classic", "yunapi_clb"] {
        let classic = svc_lb("ns", "web")
            .annotate(tencent::LOADBALANCE_TYPE, value)
            .err(Cloud::Tencent);
        assert_eq!(classic.len(), 1, "{classic}");
        assert_error(
            &classic,
            tencent::LOADBALANCE_TYPE,
            ErrorKind::Unsupported,
            "kube-lb builds application CLBs only",
        );
        let text = classic.to_string();
        assert!(
            text.contains(&format!("{value:?}"))
                && text.contains("cannot carry the listener and target model"),
            "{text}"
        );
    }
    let application =
        tencent_spec(&svc_lb("ns", "web").annotate(tencent::LOADBALANCE_TYPE, "application"));
    assert_eq!(
        application.load_balance_type,
        Some(TencentLoadBalanceType::Application)
    );
    let cluster = svc_lb("ns", "web")
        .annotate(tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD, "true")
        .ok(Cloud::Tencent);
    assert_warning(
        &cluster,
        tencent::LOCAL_SVC_ONLY_BIND_NODE_WITH_POD,
        "Local",
    );
    let empty_params =
        tencent_spec(&svc_lb("ns", "web").annotate(tencent::EXTENSIVE_PARAMETERS, ""));
    assert_eq!(empty_params.extensive_parameters, None);
    let conflict = svc_lb("ns", "web")
        .annotate(
            tencent::EXTENSIVE_PARAMETERS,
            r#"{"LoadBalancerType":"INTERNAL"}"#,
        )
        .err(Cloud::Tencent);
    assert_error(
        &conflict,
        tencent::EXTENSIVE_PARAMETERS,
        ErrorKind::Conflict,
        "internal-subnetid",
    );
}

#[test]
fn label_selector_grammar() {
    let req = |key: &str, operator, values: &[&str]| LabelRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
    };
    let cases: Vec<(&str, Vec<LabelRequirement>)> = vec![
        (
            "group=access-layer",
            vec![req("group", SelectorOperator::Equals, &["access-layer"])],
        ),
        (
            "key1=values1, key2==values2",
            vec![
                req("key1", SelectorOperator::Equals, &["values1"]),
                req("key2", SelectorOperator::Equals, &["values2"]),
            ],
        ),
        (
            "key1 in (value1),key2 in (value2)",
            vec![
                req("key1", SelectorOperator::In, &["value1"]),
                req("key2", SelectorOperator::In, &["value2"]),
            ],
        ),
        (
            "key1, key2 notin (value2)",
            vec![
                req("key1", SelectorOperator::Exists, &[]),
                req("key2", SelectorOperator::NotIn, &["value2"]),
            ],
        ),
        (
            "!spot, tier!=db",
            vec![
                req("spot", SelectorOperator::DoesNotExist, &[]),
                req("tier", SelectorOperator::NotEquals, &["db"]),
            ],
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(parse_label_selector(input), Ok(expected), "{input}");
    }
    for bad in [
        "key in value",
        "key in ()",
        "a,,b",
        "key between (a)",
        "k=v v",
    ] {
        assert!(parse_label_selector(bad).is_err(), "{bad}");
    }
}

#[test]
fn load_balancer_ip_is_ignored_loudly_where_the_provider_ignores_it() {
    let parsed = svc_lb("ns", "web").lb_ip("192.0.2.7").ok(Cloud::Tencent);
    assert_warning(&parsed, "spec.loadBalancerIP", "ignored");
    // Baidu binds the user's EIP named by loadBalancerIP (as cloud-provider-baiducloud did).
    for cloud in [
        Cloud::Local,
        Cloud::Gcp,
        Cloud::Azure,
        Cloud::Openstack,
        Cloud::Baidu,
    ] {
        let parsed = svc_lb("ns", "web").lb_ip("192.0.2.7").ok(cloud);
        assert!(parsed.spec.requested_ip.is_some());
        assert!(parsed.warnings.is_empty(), "{cloud}: {:?}", parsed.warnings);
    }
}

#[test]
fn other_clouds_annotations_warn_as_having_no_effect() {
    let parsed = svc_lb("ns", "web")
        .ports(vec![port("", "TCP", 80, 0)])
        .annotate(
            "service.beta.kubernetes.io/aws-load-balancer-internal",
            "true",
        )
        .annotate(azure::INTERNAL, "true")
        .ok(Cloud::Local);
    assert_eq!(parsed.spec.scheme, Scheme::External);
    assert_warning(
        &parsed,
        "metadata.annotations",
        "1 annotation(s) for cloud aws have no effect on cloud local: \
         service.beta.kubernetes.io/aws-load-balancer-internal",
    );
    assert_warning(
        &parsed,
        "metadata.annotations",
        "for cloud azure have no effect",
    );
}

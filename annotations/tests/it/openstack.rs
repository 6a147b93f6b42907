//! Every OpenStack annotation of reference other-clouds.md §1.3: values that parse, upstream's
//! silent fallbacks (warnings) and values Octavia would refuse (errors naming key and value).

use crate::support;

use kube_lb_annotations::keys::openstack as key;
use kube_lb_annotations::{
    Cloud, ErrorKind, LbMethod, OpenstackHealthMonitor, OpenstackProxyProtocol, OpenstackSpec,
    OpenstackTimeouts, ProviderSpec, Scheme, SelectorOperator,
};
use support::{SvcBuilder, assert_error, assert_warning, port, svc_lb};

const NET: &str = "0e100000-0000-4000-8000-0000000000e1";
const SUBNET: &str = "0e100000-0000-4000-8000-0000000000a2";
const PLAIN_UUID: &str = "8b4c3f0e2d1a4b5c9d8e7f6a5b4c3d2e";

fn openstack(b: &SvcBuilder) -> OpenstackSpec {
    match b.ok(Cloud::Openstack).spec.provider {
        ProviderSpec::Openstack(os) => os,
        other => panic!("{other:?}"),
    }
}

#[test]
fn unannotated_service_gets_upstream_defaults() {
    let spec = openstack(&svc_lb("ns", "web"));
    assert_eq!(spec, OpenstackSpec::default());
    assert_eq!(spec.connection_limit, -1);
    assert!(!spec.internal && !spec.keep_floating_ip && !spec.x_forwarded_for);
}

#[test]
fn every_annotation_parses_into_the_typed_spec() {
    let b = svc_lb("ns", "web")
        .annotate(key::INTERNAL, "true")
        .annotate(key::FLOATING_NETWORK_ID, NET)
        .annotate(key::FLOATING_SUBNET_ID, SUBNET)
        .annotate(key::CLASS, "fast")
        .annotate(key::SUBNET_ID, SUBNET)
        .annotate(key::NETWORK_ID, NET)
        .annotate(key::MEMBER_SUBNET_ID, PLAIN_UUID)
        .annotate(key::CONNECTION_LIMIT, "1000")
        .annotate(key::KEEP_FLOATING_IP, "true")
        .annotate(key::X_FORWARDED_FOR, "true")
        .annotate(key::LB_METHOD, "SOURCE_IP_PORT")
        .annotate(key::TIMEOUT_CLIENT_DATA, "60000")
        .annotate(key::TIMEOUT_MEMBER_CONNECT, "3000")
        .annotate(key::TIMEOUT_MEMBER_DATA, "70000")
        .annotate(key::TIMEOUT_TCP_INSPECT, "10")
        .annotate(key::ENABLE_HEALTH_MONITOR, "true")
        .annotate(key::HEALTH_MONITOR_DELAY, "10")
        .annotate(key::HEALTH_MONITOR_TIMEOUT, "4")
        .annotate(key::HEALTH_MONITOR_MAX_RETRIES, "2")
        .annotate(key::HEALTH_MONITOR_MAX_RETRIES_DOWN, "5")
        .annotate(key::FLAVOR_ID, PLAIN_UUID)
        .annotate(key::AVAILABILITY_ZONE, "az-1")
        .annotate(
            key::DEFAULT_TLS_CONTAINER_REF,
            "https://barbican.example/v1/containers/0e100000-0000-4000-8000-0000000000c1",
        )
        .annotate(key::HOSTNAME, "web.example.com")
        .annotate(key::NODE_SELECTOR, "zone=a, example.com/lb");
    let parsed = b.ok(Cloud::Openstack);
    assert_eq!(parsed.spec.scheme, Scheme::Internal);
    let spec = openstack(&b);
    assert!(spec.internal && spec.keep_floating_ip && spec.x_forwarded_for);
    assert_eq!(spec.floating_network_id.as_deref(), Some(NET));
    assert_eq!(spec.floating_subnet_id.as_deref(), Some(SUBNET));
    assert_eq!(spec.class.as_deref(), Some("fast"));
    assert_eq!(spec.subnet_id.as_deref(), Some(SUBNET));
    assert_eq!(spec.network_id.as_deref(), Some(NET));
    assert_eq!(spec.member_subnet_id.as_deref(), Some(PLAIN_UUID));
    assert_eq!(spec.connection_limit, 1000);
    assert_eq!(spec.lb_method, Some(LbMethod::SourceIpPort));
    assert_eq!(
        spec.timeouts,
        OpenstackTimeouts {
            client_data: Some(60000),
            member_connect: Some(3000),
            member_data: Some(70000),
            tcp_inspect: Some(10),
        }
    );
    assert_eq!(
        spec.health_monitor,
        OpenstackHealthMonitor {
            enabled: Some(true),
            delay: Some(10),
            timeout: Some(4),
            max_retries: Some(2),
            max_retries_down: Some(5),
        }
    );
    assert_eq!(spec.flavor_id.as_deref(), Some(PLAIN_UUID));
    assert_eq!(spec.availability_zone.as_deref(), Some("az-1"));
    assert!(spec.default_tls_container_ref.is_some());
    assert_eq!(spec.hostname.as_deref(), Some("web.example.com"));
    let selector = spec.node_selector.expect("selector");
    assert_eq!(selector.len(), 2);
    assert_eq!(
        (selector[0].key.as_str(), selector[0].operator),
        ("zone", SelectorOperator::Equals)
    );
    assert_eq!(
        (selector[1].key.as_str(), selector[1].operator),
        ("example.com/lb", SelectorOperator::Exists)
    );

    // Floating-IP settings on an internal Service have no effect: said so.
    assert_warning(&parsed, key::FLOATING_NETWORK_ID, "internal");

    let by_id = openstack(
        &svc_lb("ns", "web")
            .annotate(key::PORT_ID, SUBNET)
            .annotate(key::LOAD_BALANCER_ID, NET)
            .annotate(key::PROXY_PROTOCOL, "v2")
            .annotate(key::FLOATING_SUBNET, "public-*")
            .annotate(key::FLOATING_SUBNET_TAGS, "a, b"),
    );
    assert_eq!(by_id.port_id.as_deref(), Some(SUBNET));
    assert_eq!(by_id.load_balancer_id.as_deref(), Some(NET));
    assert_eq!(by_id.proxy_protocol, Some(OpenstackProxyProtocol::V2));
    assert_eq!(by_id.floating_subnet.as_deref(), Some("public-*"));
    assert_eq!(by_id.floating_subnet_tags, vec!["a", "b"]);
}

#[test]
fn values_octavia_would_refuse_are_errors_naming_key_value_and_rule() {
    let udp = || {
        svc_lb("ns", "dns").ports(vec![
            port("dns", "UDP", 53, 30053),
            port("web", "TCP", 80, 30080),
        ])
    };
    let cases: Vec<(SvcBuilder, &str, ErrorKind, &str)> = vec![
        (
            svc_lb("ns", "w").annotate(key::SUBNET_ID, "private"),
            key::SUBNET_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::NETWORK_ID, "abc"),
            key::NETWORK_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::MEMBER_SUBNET_ID, "x"),
            key::MEMBER_SUBNET_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::PORT_ID, "x"),
            key::PORT_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::FLOATING_NETWORK_ID, "public"),
            key::FLOATING_NETWORK_ID,
            ErrorKind::Invalid,
            "\"public\"",
        ),
        (
            svc_lb("ns", "w").annotate(key::FLOATING_SUBNET_ID, "x"),
            key::FLOATING_SUBNET_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::FLAVOR_ID, "small"),
            key::FLAVOR_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::LOAD_BALANCER_ID, "lb-1"),
            key::LOAD_BALANCER_ID,
            ErrorKind::Invalid,
            "UUID",
        ),
        (
            svc_lb("ns", "w").annotate(key::LB_METHOD, "RANDOM"),
            key::LB_METHOD,
            ErrorKind::Invalid,
            "\"ROUND_ROBIN\"",
        ),
        (
            svc_lb("ns", "w").annotate(key::CONNECTION_LIMIT, "-2"),
            key::CONNECTION_LIMIT,
            ErrorKind::OutOfRange,
            "-1 to",
        ),
        (
            svc_lb("ns", "w").annotate(key::TIMEOUT_CLIENT_DATA, "-5"),
            key::TIMEOUT_CLIENT_DATA,
            ErrorKind::OutOfRange,
            "0 to 86400000",
        ),
        (
            svc_lb("ns", "w").annotate(key::TIMEOUT_TCP_INSPECT, "90000000"),
            key::TIMEOUT_TCP_INSPECT,
            ErrorKind::OutOfRange,
            "ms",
        ),
        (
            svc_lb("ns", "w").annotate(key::HEALTH_MONITOR_MAX_RETRIES, "0"),
            key::HEALTH_MONITOR_MAX_RETRIES,
            ErrorKind::OutOfRange,
            "1 to 10",
        ),
        (
            svc_lb("ns", "w").annotate(key::HEALTH_MONITOR_MAX_RETRIES_DOWN, "11"),
            key::HEALTH_MONITOR_MAX_RETRIES_DOWN,
            ErrorKind::OutOfRange,
            "1 to 10",
        ),
        (
            svc_lb("ns", "w")
                .annotate(key::HEALTH_MONITOR_DELAY, "3")
                .annotate(key::HEALTH_MONITOR_TIMEOUT, "5"),
            key::HEALTH_MONITOR_TIMEOUT,
            ErrorKind::Conflict,
            "at most",
        ),
        (
            svc_lb("ns", "w")
                .annotate(key::PROXY_PROTOCOL, "true")
                .annotate(key::X_FORWARDED_FOR, "true"),
            key::X_FORWARDED_FOR,
            ErrorKind::Conflict,
            "proxy-protocol",
        ),
        (
            udp().annotate(key::PROXY_PROTOCOL, "v1"),
            key::PROXY_PROTOCOL,
            ErrorKind::Conflict,
            "UDP",
        ),
        (
            svc_lb("ns", "w").annotate(key::DEFAULT_TLS_CONTAINER_REF, "my-cert"),
            key::DEFAULT_TLS_CONTAINER_REF,
            ErrorKind::Invalid,
            "Barbican",
        ),
        (
            svc_lb("ns", "w").annotate(key::HOSTNAME, "Web_Host"),
            key::HOSTNAME,
            ErrorKind::Invalid,
            "DNS name",
        ),
        (
            svc_lb("ns", "w").annotate(key::NODE_SELECTOR, "zone=a b"),
            key::NODE_SELECTOR,
            ErrorKind::Invalid,
            "not a label value",
        ),
        (
            svc_lb("ns", "w").annotate(key::NODE_SELECTOR, "=a"),
            key::NODE_SELECTOR,
            ErrorKind::Invalid,
            "not a label key",
        ),
        (
            svc_lb("ns", "w").ports(vec![port("s", "SCTP", 9, 30009)]),
            "spec.ports[0].protocol",
            ErrorKind::Unsupported,
            "SCTP",
        ),
    ];
    for (b, at, kind, needle) in cases {
        let errors = b.err(Cloud::Openstack);
        assert_error(&errors, at, kind, needle);
    }
}

#[test]
fn upstream_silent_fallbacks_are_warnings() {
    let udp = || {
        svc_lb("ns", "dns").ports(vec![
            port("dns", "UDP", 53, 30053),
            port("web", "TCP", 80, 30080),
        ])
    };
    let cases: Vec<(SvcBuilder, &str, &str)> = vec![
        (
            svc_lb("ns", "w").annotate(key::INTERNAL, "yes"),
            key::INTERNAL,
            "treated as false",
        ),
        (
            svc_lb("ns", "w").annotate(key::KEEP_FLOATING_IP, "True"),
            key::KEEP_FLOATING_IP,
            "treated as false",
        ),
        (
            svc_lb("ns", "w").annotate(key::X_FORWARDED_FOR, "1"),
            key::X_FORWARDED_FOR,
            "treated as false",
        ),
        (
            svc_lb("ns", "w").annotate(key::ENABLE_HEALTH_MONITOR, "yes"),
            key::ENABLE_HEALTH_MONITOR,
            "default applies",
        ),
        (
            svc_lb("ns", "w").annotate(key::PROXY_PROTOCOL, "v3"),
            key::PROXY_PROTOCOL,
            "disables",
        ),
        (
            svc_lb("ns", "w").annotate(key::CONNECTION_LIMIT, "lots"),
            key::CONNECTION_LIMIT,
            "default applies",
        ),
        (
            svc_lb("ns", "w").annotate(key::TIMEOUT_MEMBER_DATA, "1m"),
            key::TIMEOUT_MEMBER_DATA,
            "not an integer",
        ),
        (
            svc_lb("ns", "w").annotate(key::HEALTH_MONITOR_DELAY, "5s"),
            key::HEALTH_MONITOR_DELAY,
            "not an integer",
        ),
        (
            svc_lb("ns", "w")
                .local(32000)
                .annotate(key::ENABLE_HEALTH_MONITOR, "false"),
            key::ENABLE_HEALTH_MONITOR,
            "Local",
        ),
        (
            udp().annotate(key::X_FORWARDED_FOR, "true"),
            key::X_FORWARDED_FOR,
            "TCP ports only",
        ),
        (
            udp().annotate(
                key::DEFAULT_TLS_CONTAINER_REF,
                "https://kms/v1/secrets/0e100000-0000-4000-8000-0000000000c1",
            ),
            key::DEFAULT_TLS_CONTAINER_REF,
            "TCP ports only",
        ),
        (
            svc_lb("ns", "w")
                .annotate(key::LOAD_BALANCER_ID, NET)
                .annotate(key::SUBNET_ID, SUBNET),
            key::SUBNET_ID,
            "existing load balancer",
        ),
        (
            svc_lb("ns", "w")
                .annotate(key::PORT_ID, NET)
                .annotate(key::NETWORK_ID, NET),
            key::NETWORK_ID,
            "VIP port",
        ),
        (
            svc_lb("ns", "w")
                .annotate(key::FLOATING_SUBNET_ID, SUBNET)
                .annotate(key::FLOATING_SUBNET, "pub"),
            key::FLOATING_SUBNET,
            "wins",
        ),
    ];
    for (b, at, needle) in cases {
        assert_warning(&b.ok(Cloud::Openstack), at, needle);
    }
    // The address OCCM writes back is known, not reported as unused.
    let written = svc_lb("ns", "w")
        .annotate(key::LOAD_BALANCER_ADDRESS, "203.0.113.7")
        .ok(Cloud::Openstack);
    assert!(written.warnings.is_empty(), "{:?}", written.warnings);
}

#[test]
fn lint_prints_the_typed_openstack_spec() {
    // `kube-lb lint --cloud openstack` serialises the parsed spec; its JSON is the contract.
    let parsed = svc_lb("ns", "web")
        .annotate(key::LB_METHOD, "LEAST_CONNECTIONS")
        .annotate(key::TIMEOUT_CLIENT_DATA, "60000")
        .annotate(key::NODE_SELECTOR, "zone=a")
        .ok(Cloud::Openstack);
    let json = serde_json::to_value(&parsed.spec).expect("serialises");
    let os = &json["provider"];
    assert_eq!(os["cloud"], "openstack", "{json}");
    assert_eq!(os["lbMethod"], "LEAST_CONNECTIONS", "{json}");
    assert_eq!(os["timeouts"]["clientData"], 60000, "{json}");
    assert_eq!(os["connectionLimit"], -1, "{json}");
    assert_eq!(os["nodeSelector"][0]["key"], "zone", "{json}");
    assert!(
        os.get("hostname").is_none(),
        "unset fields are left out: {json}"
    );
}

/// kube-lb writes `load-balancer-id` back as OCCM does, and records the id in
/// `kube-lb.io/openstack-created-with`: that id is the Service's own load balancer, not an
/// existing one to use (no "has no effect" warnings, found by name as before). Any other id,
/// or one without the record (OCCM's), still names a load balancer to use.
#[test]
fn the_written_back_id_of_the_services_own_load_balancer_names_no_existing_one() {
    const LB: &str = "0e100000-0000-4000-8000-0000000000c1";
    let record = format!(r#"{{"load_balancer_id":"{LB}","vip_subnet_id":"{SUBNET}"}}"#);
    let own = svc_lb("ns", "web")
        .annotate(key::CREATED_WITH, &record)
        .annotate(key::LOAD_BALANCER_ID, LB)
        .annotate(key::SUBNET_ID, SUBNET);
    assert_eq!(openstack(&own).load_balancer_id, None);
    let warnings = own.ok(Cloud::Openstack).warnings;
    assert!(
        warnings.iter().all(|w| !w.detail.contains("has no effect")),
        "{warnings:?}"
    );
    let uppercase = svc_lb("ns", "web")
        .annotate(key::CREATED_WITH, &record)
        .annotate(key::LOAD_BALANCER_ID, &LB.to_uppercase());
    assert_eq!(openstack(&uppercase).load_balancer_id, None);

    let occm = svc_lb("ns", "web").annotate(key::LOAD_BALANCER_ID, LB);
    assert_eq!(openstack(&occm).load_balancer_id.as_deref(), Some(LB));
    let other = svc_lb("ns", "web")
        .annotate(key::CREATED_WITH, &record)
        .annotate(key::LOAD_BALANCER_ID, NET);
    assert_eq!(openstack(&other).load_balancer_id.as_deref(), Some(NET));
}

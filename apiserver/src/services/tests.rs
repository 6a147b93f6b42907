//! Service admission against kube-apiserver 1.33. Every table row names the upstream rule it
//! follows: functions of pkg/apis/core/validation/validation.go (`ValidateService`,
//! `validateServicePort`, `ValidateServiceUpdate`, ...), pkg/apis/core/v1/defaults.go
//! (`SetDefaults_Service`), pkg/registry/core/service/strategy.go and
//! pkg/registry/core/service/storage/alloc.go.

use super::*;

fn allocator() -> Allocator {
    Allocator::new(
        DEFAULT_SERVICE_CIDR.parse().unwrap(),
        DEFAULT_NODE_PORT_RANGE,
    )
}

fn dual_stack() -> Allocator {
    allocator()
        .with_secondary_cidr("fd00:10:96::/112".parse().unwrap())
        .unwrap()
}

fn svc(spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn fields(causes: &[Cause]) -> Vec<&str> {
    causes.iter().map(|c| c.field.as_str()).collect()
}

/// The fields a create of `spec` is refused on (empty: admitted).
fn create_errors(spec: Value) -> Vec<String> {
    let mut s = svc(spec);
    match admit(None, &mut s, &mut allocator()) {
        Ok(()) => Vec::new(),
        Err(causes) => causes.into_iter().map(|c| c.field).collect(),
    }
}

#[test]
fn defaults_cluster_ip_service() {
    let mut a = allocator();
    let mut s = svc(json!({"ports": [{"port": 80}]}));
    admit(None, &mut s, &mut a).unwrap();
    let spec = &s["spec"];
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["ports"][0]["protocol"], "TCP");
    assert_eq!(spec["ports"][0]["targetPort"], 80);
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert!(spec.get("externalTrafficPolicy").is_none());
}

/// `SetDefaults_Service`: ClientIP gets the 10800 s timeout, None drops a config, an
/// externally accessible Service gets `externalTrafficPolicy: Cluster` (a ClusterIP Service
/// with externalIPs is one), LoadBalancer gets `allocateLoadBalancerNodePorts: true`.
#[test]
fn defaults_follow_set_defaults_service() {
    let mut s = svc(
        json!({"type": "LoadBalancer", "sessionAffinity": "ClientIP", "ports": [{"port": 443, "targetPort": "https"}]}),
    );
    apply_defaults(&mut s);
    let spec = &s["spec"];
    assert_eq!(spec["externalTrafficPolicy"], "Cluster");
    assert_eq!(spec["allocateLoadBalancerNodePorts"], true);
    assert_eq!(
        spec["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        10800
    );
    assert_eq!(spec["ports"][0]["targetPort"], "https");

    let mut none = svc(json!({"sessionAffinity": "None",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 5}}, "ports": [{"port": 80}]}));
    apply_defaults(&mut none);
    assert!(none["spec"].get("sessionAffinityConfig").is_none());

    let mut external = svc(json!({"externalIPs": ["192.0.2.7"], "ports": [{"port": 80}]}));
    apply_defaults(&mut external);
    assert_eq!(external["spec"]["externalTrafficPolicy"], "Cluster");

    let mut name = svc(json!({"type": "ExternalName", "externalName": "example.com"}));
    apply_defaults(&mut name);
    assert_eq!(name["spec"]["sessionAffinity"], "None");
    assert!(name["spec"].get("internalTrafficPolicy").is_none());
}

/// `IsValidPortName` (IANA service names): named target ports only.
#[test]
fn iana_names() {
    let cases = [
        ("http", true),
        ("web-8080", true),
        ("a1", true),
        ("123", false),
        ("HTTP", false),
        ("-http", false),
        ("http-", false),
        ("ht--tp", false),
        ("a_b", false),
        ("sixteen-chars-xx", false),
        ("fifteen-chars-x", true),
        ("", false),
    ];
    for (name, ok) in cases {
        assert_eq!(is_iana_svc_name(name), ok, "{name}");
    }
}

#[test]
fn create_validation_table() {
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        // validateServicePort: port names are DNS-1123 labels (ValidateDNS1123Label), not IANA
        // names: digits only, over 15 characters and double hyphens are fine.
        (
            "validateServicePort: DNS-1123 label names",
            json!({"ports": [{"port": 80, "name": "http-metrics-port"}, {"port": 81, "name": "123"}, {"port": 82, "name": "a--b"}]}),
            vec![],
        ),
        (
            "validateServicePort: name not a DNS-1123 label",
            json!({"ports": [{"port": 80, "name": "Bad_Name"}]}),
            vec!["spec.ports[0].name"],
        ),
        (
            "validateServicePort: name longer than 63",
            json!({"ports": [{"port": 80, "name": "a".repeat(64)}]}),
            vec!["spec.ports[0].name"],
        ),
        (
            "validateServicePort: names required with several ports",
            json!({"ports": [{"port": 80}, {"port": 81}]}),
            vec!["spec.ports[0].name", "spec.ports[1].name"],
        ),
        (
            "validateServicePort: names unique",
            json!({"ports": [{"port": 80, "name": "a"}, {"port": 81, "name": "a"}]}),
            vec!["spec.ports[1].name"],
        ),
        (
            "validateServicePort: IsValidPortNum",
            json!({"ports": [{"port": 0, "targetPort": 80}]}),
            vec!["spec.ports[0].port"],
        ),
        (
            "validateServicePort: supportedPortProtocols",
            json!({"ports": [{"port": 80, "protocol": "ICMP"}]}),
            vec!["spec.ports[0].protocol"],
        ),
        (
            "validateServicePort: ValidatePortNumOrName, targetPort names are IANA names",
            json!({"ports": [{"port": 80, "name": "ok", "targetPort": "Not-Valid"}]}),
            vec!["spec.ports[0].targetPort"],
        ),
        (
            "validateServicePort: ValidatePortNumOrName, a 15-letter target port name",
            json!({"ports": [{"port": 80, "targetPort": "metrics-port-xy"}]}),
            vec![],
        ),
        (
            "validateServicePort: ValidatePortNumOrName, target port number in range",
            json!({"ports": [{"port": 80, "targetPort": 70000}]}),
            vec!["spec.ports[0].targetPort"],
        ),
        (
            "validateServicePort: appProtocol is a qualified name",
            json!({"ports": [{"port": 80, "appProtocol": "kubernetes.io/h2c"}, ]}),
            vec![],
        ),
        (
            "validateServicePort: appProtocol not a qualified name",
            json!({"ports": [{"port": 80, "appProtocol": "h2c!"}]}),
            vec!["spec.ports[0].appProtocol"],
        ),
        (
            "ValidateService: supportedServiceType",
            json!({"type": "Magic", "ports": [{"port": 80}]}),
            vec!["spec.type"],
        ),
        (
            "ValidateService: ports required",
            json!({}),
            vec!["spec.ports"],
        ),
        (
            "ValidateService: headless needs no ports",
            json!({"clusterIP": "None"}),
            vec![],
        ),
        (
            "ValidateService: 'None' only for ClusterIP (LoadBalancer)",
            json!({"type": "LoadBalancer", "clusterIP": "None", "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs[0]"],
        ),
        (
            "ValidateService: 'None' only for ClusterIP (NodePort)",
            json!({"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs[0]"],
        ),
        (
            "ValidateService: ExternalName needs externalName",
            json!({"type": "ExternalName"}),
            vec!["spec.externalName"],
        ),
        (
            "ValidateService: ExternalName may end in a dot",
            json!({"type": "ExternalName", "externalName": "db.example.com."}),
            vec![],
        ),
        (
            "ValidateService: ExternalName takes no IP families",
            json!({"type": "ExternalName", "externalName": "db.example.com", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack"}),
            vec!["spec.ipFamilies", "spec.ipFamilyPolicy"],
        ),
        (
            "ValidateService: duplicate (protocol, port)",
            json!({"ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]}),
            vec!["spec.ports[1]"],
        ),
        (
            "ValidateService: same port for TCP and UDP",
            json!({"ports": [{"port": 53, "name": "dns", "protocol": "UDP"}, {"port": 53, "name": "dns-tcp"}]}),
            vec![],
        ),
        (
            "ValidateService: no nodePort when type is ClusterIP",
            json!({"ports": [{"port": 80, "nodePort": 30001}]}),
            vec!["spec.ports[0].nodePort"],
        ),
        (
            "ValidateService: duplicate nodePort for one protocol",
            json!({"type": "NodePort", "ports": [{"port": 80, "name": "a", "nodePort": 30080}, {"port": 81, "name": "b", "nodePort": 30080}]}),
            vec!["spec.ports[1].nodePort"],
        ),
        (
            "ValidateService: LoadBalancerSourceRanges are CIDRs (IsValidCIDR)",
            json!({"type": "LoadBalancer", "loadBalancerSourceRanges": ["nope", " 10.0.0.0/8 "], "ports": [{"port": 80}]}),
            vec!["spec.LoadBalancerSourceRanges[0]"],
        ),
        (
            "ValidateService: LoadBalancerSourceRanges only on LoadBalancer",
            json!({"type": "NodePort", "loadBalancerSourceRanges": ["10.0.0.0/8"], "ports": [{"port": 80}]}),
            vec!["spec.LoadBalancerSourceRanges"],
        ),
        (
            "ValidateService: allocateLoadBalancerNodePorts only on LoadBalancer",
            json!({"type": "NodePort", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
            vec!["spec.allocateLoadBalancerNodePorts"],
        ),
        (
            "validateLoadBalancerClassField: only on LoadBalancer",
            json!({"loadBalancerClass": "example.com/lb", "ports": [{"port": 80}]}),
            vec!["spec.loadBalancerClass"],
        ),
        (
            "validateLoadBalancerClassField: a qualified name",
            json!({"type": "LoadBalancer", "loadBalancerClass": "not a class", "ports": [{"port": 80}]}),
            vec!["spec.loadBalancerClass"],
        ),
        (
            "validateServiceExternalTrafficPolicy: only externally accessible",
            json!({"externalTrafficPolicy": "Local", "ports": [{"port": 80}]}),
            vec!["spec.externalTrafficPolicy"],
        ),
        (
            "validateServiceExternalTrafficPolicy: a ClusterIP with externalIPs is accessible",
            json!({"externalTrafficPolicy": "Local", "externalIPs": ["192.0.2.7"], "ports": [{"port": 80}]}),
            vec![],
        ),
        (
            "validateServiceExternalTrafficPolicy: supported values",
            json!({"type": "NodePort", "externalTrafficPolicy": "Global", "ports": [{"port": 80}]}),
            vec!["spec.externalTrafficPolicy"],
        ),
        (
            "validateServiceExternalTrafficPolicy: healthCheckNodePort needs LoadBalancer+Local",
            json!({"type": "NodePort", "healthCheckNodePort": 30100, "ports": [{"port": 80}]}),
            vec!["spec.healthCheckNodePort"],
        ),
        (
            "validateClientIPAffinityConfig: timeout at most 86400",
            json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86401}}, "ports": [{"port": 80}]}),
            vec!["spec.sessionAffinityConfig.clientIP.timeoutSeconds"],
        ),
        (
            "validateClientIPAffinityConfig: timeout above 0",
            json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 0}}, "ports": [{"port": 80}]}),
            vec!["spec.sessionAffinityConfig.clientIP.timeoutSeconds"],
        ),
        (
            "validateClientIPAffinityConfig: 86400 itself",
            json!({"sessionAffinity": "ClientIP", "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 86400}}, "ports": [{"port": 80}]}),
            vec![],
        ),
        (
            "ValidateService: supportedSessionAffinityType",
            json!({"sessionAffinity": "Cookie", "ports": [{"port": 80}]}),
            vec!["spec.sessionAffinity"],
        ),
        (
            "ValidateService: externalIPs are IPs (IsValidIP)",
            json!({"externalIPs": ["192.0.2.300"], "ports": [{"port": 80}]}),
            vec!["spec.externalIPs[0]"],
        ),
        (
            "ValidateService: externalIPs are not special (ValidateNonSpecialIP)",
            json!({"externalIPs": ["127.0.0.9", "169.254.169.254"], "ports": [{"port": 80}]}),
            vec!["spec.externalIPs[0]", "spec.externalIPs[1]"],
        ),
        (
            "validateServiceInternalTrafficFieldsValue: supported values",
            json!({"internalTrafficPolicy": "Nearby", "ports": [{"port": 80}]}),
            vec!["spec.internalTrafficPolicy"],
        ),
        (
            "validateServiceTrafficDistribution: supported values",
            json!({"trafficDistribution": "Anywhere", "ports": [{"port": 80}]}),
            vec!["spec.trafficDistribution"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: first value must match clusterIP",
            json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.11"], "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: clusterIPs need clusterIP",
            json!({"clusterIPs": ["10.96.0.11"], "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: valid IPs",
            json!({"clusterIP": "10.96.0.999", "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs[0]"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: one IP per family",
            json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "10.96.0.11"], "ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
            vec!["spec.clusterIPs"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: supportedServiceIPFamily",
            json!({"ipFamilies": ["IPv5"], "ports": [{"port": 80}]}),
            vec!["spec.ipFamilies[0]"],
        ),
        (
            "ValidateServiceClusterIPsRelatedFields: supportedServiceIPFamilyPolicy",
            json!({"ipFamilyPolicy": "AnyStack", "ports": [{"port": 80}]}),
            vec!["spec.ipFamilyPolicy"],
        ),
        (
            "initIPFamilyFields: RequireDualStack needs two ranges",
            json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}),
            vec!["spec.ipFamilyPolicy"],
        ),
        (
            "initIPFamilyFields: PreferDualStack falls back to one family",
            json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}),
            vec![],
        ),
        (
            "initIPFamilyFields: a family without a range",
            json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}),
            vec!["spec.ipFamilies[0]"],
        ),
        (
            "1.17–1.21 ValidateService: topologyKeys as in seed 002",
            json!({"topologyKeys": ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "*"], "ports": [{"port": 80}]}),
            vec![],
        ),
        (
            "1.17–1.21 ValidateService: \"*\" must be the last value",
            json!({"topologyKeys": ["*", "kubernetes.io/hostname"], "ports": [{"port": 80}]}),
            vec!["spec.topologyKeys[0]"],
        ),
        (
            "1.17–1.21 ValidateService: topologyKeys duplicate",
            json!({"topologyKeys": ["kubernetes.io/hostname", "kubernetes.io/hostname"], "ports": [{"port": 80}]}),
            vec!["spec.topologyKeys[1]"],
        ),
        (
            "1.17–1.21 ValidateService: topologyKeys are qualified names",
            json!({"topologyKeys": ["not a key"], "ports": [{"port": 80}]}),
            vec!["spec.topologyKeys[0]"],
        ),
        (
            "1.17–1.21 ValidateService: topologyKeys not with externalTrafficPolicy=Local",
            json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "topologyKeys": ["kubernetes.io/hostname"], "ports": [{"port": 80}]}),
            vec!["spec.topologyKeys"],
        ),
    ];
    for (rule, spec, want) in cases {
        assert_eq!(create_errors(spec.clone()), want, "{rule}: {spec}");
    }
}

/// `MaxServiceTopologyKeys` (16) of the 1.17–1.21 API.
#[test]
fn at_most_sixteen_topology_keys() {
    let keys: Vec<String> = (0..17).map(|i| format!("example.com/k{i}")).collect();
    assert_eq!(
        create_errors(json!({"topologyKeys": keys[..16], "ports": [{"port": 80}]})),
        Vec::<String>::new()
    );
    let mut s = svc(json!({"topologyKeys": keys, "ports": [{"port": 80}]}));
    let causes = admit(None, &mut s, &mut allocator()).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.topologyKeys"]);
    assert_eq!(causes[0].reason, "FieldValueTooMany");
}

/// The annotation form of source ranges is validated when the field is empty (`ValidateService`
/// reads `service.beta.kubernetes.io/load-balancer-source-ranges`), with the same rules.
#[test]
fn source_range_annotation_is_validated_like_the_field() {
    let with = |ty: &str, value: &str| {
        let mut s = svc(json!({"type": ty, "ports": [{"port": 80}]}));
        s["metadata"]["annotations"] = json!({SOURCE_RANGES_ANNOTATION: value});
        admit(None, &mut s, &mut allocator())
            .err()
            .unwrap_or_default()
    };
    let field = format!("metadata.annotations[{SOURCE_RANGES_ANNOTATION}]");
    assert!(with("LoadBalancer", " 10.0.0.0/8 , 192.168.0.0/16").is_empty());
    assert!(with("LoadBalancer", "  ").is_empty());
    let bad = with("LoadBalancer", "10.0.0.0/8,not-a-cidr");
    assert_eq!(fields(&bad), vec![field.as_str()]);
    assert!(bad[0].message.contains("\"not-a-cidr\""), "{bad:?}");
    let wrong_type = with("ClusterIP", "10.0.0.0/8");
    assert_eq!(fields(&wrong_type), vec![field.as_str()]);
    assert_eq!(wrong_type[0].reason, "FieldValueForbidden");
}

#[test]
fn invalid_status_message_names_the_upstream_rule_text() {
    let mut s = svc(json!({"ports": [{"port": 80, "name": "Bad_Name"}]}));
    let causes = admit(None, &mut s, &mut allocator()).unwrap_err();
    assert!(
        causes[0].message.contains("a lowercase RFC 1123 label"),
        "{causes:?}"
    );
    let mut lb = svc(json!({"type": "LoadBalancer", "clusterIP": "None", "ports": [{"port": 80}]}));
    let causes = admit(None, &mut lb, &mut allocator()).unwrap_err();
    assert_eq!(
        causes[0].message,
        "Invalid value: \"None\": may not be set to 'None' for LoadBalancer services"
    );
}

#[test]
fn allocates_ip_and_node_ports_for_load_balancer() {
    let mut a = allocator();
    let mut s = svc(
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}),
    );
    admit(None, &mut s, &mut a).unwrap();
    let spec = &s["spec"];
    let ip: IpAddr = spec["clusterIP"].as_str().unwrap().parse().unwrap();
    assert!(a.cidr().contains(&ip));
    assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
    let np0 = spec["ports"][0]["nodePort"].as_u64().unwrap();
    let np1 = spec["ports"][1]["nodePort"].as_u64().unwrap();
    let hc = spec["healthCheckNodePort"].as_u64().unwrap();
    assert_ne!(np0, np1);
    assert_ne!(hc, np0);
    assert!((30000..=32767).contains(&np0));
    assert_eq!(a.allocated_ports(), 3);
    assert_eq!(a.allocated_ips(), 1);
    a.release(&s);
    assert_eq!(a.allocated_ports(), 0);
    assert_eq!(a.allocated_ips(), 0);
}

/// `initNodePorts`: TCP and UDP of one port number share one node port; node ports are unique
/// across Services whatever the protocol.
#[test]
fn node_ports_shared_by_protocol_and_unique_across_services() {
    let mut a = allocator();
    let mut dns = svc(json!({"type": "NodePort", "ports": [
        {"port": 53, "name": "dns", "protocol": "UDP"}, {"port": 53, "name": "dns-tcp", "protocol": "TCP"}]}));
    admit(None, &mut dns, &mut a).unwrap();
    let np = dns["spec"]["ports"][0]["nodePort"].clone();
    assert_eq!(dns["spec"]["ports"][1]["nodePort"], np);
    assert_eq!(a.allocated_ports(), 1);

    let mut other = svc(
        json!({"type": "NodePort", "ports": [{"port": 53, "protocol": "TCP", "nodePort": np}]}),
    );
    other["metadata"]["name"] = json!("other");
    let causes = admit(None, &mut other, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.ports[0].nodePort"]);
    assert!(
        causes[0].message.contains("already allocated"),
        "{causes:?}"
    );

    // Two port numbers may not share a node port even with different protocols.
    let mut two = svc(json!({"type": "NodePort", "ports": [
        {"port": 80, "name": "a", "protocol": "TCP", "nodePort": 30500},
        {"port": 81, "name": "b", "protocol": "UDP", "nodePort": 30500}]}));
    two["metadata"]["name"] = json!("two");
    let causes = admit(None, &mut two, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.ports[1].nodePort"]);
    assert_eq!(a.allocated_ports(), 1);
}

#[test]
fn node_port_outside_the_range_is_refused() {
    let mut a = Allocator::new(DEFAULT_SERVICE_CIDR.parse().unwrap(), 30000..=30010);
    let mut s = svc(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30011}]}));
    let causes = admit(None, &mut s, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.ports[0].nodePort"]);
    assert!(causes[0].message.contains("30000-30010"), "{causes:?}");
}

#[test]
fn no_node_ports_when_lb_allocation_disabled() {
    let mut a = allocator();
    let mut s = svc(
        json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80}]}),
    );
    admit(None, &mut s, &mut a).unwrap();
    assert!(s["spec"]["ports"][0].get("nodePort").is_none());
    assert_eq!(a.allocated_ports(), 0);
}

/// `patchAllocatedValues` keeps node ports of a LoadBalancer that turns allocation off: they
/// are released only when the client removes them.
#[test]
fn turning_lb_node_port_allocation_off_keeps_existing_ports() {
    let mut a = allocator();
    let mut lb = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80, "name": "http"}]}));
    admit(None, &mut lb, &mut a).unwrap();
    let np = lb["spec"]["ports"][0]["nodePort"].clone();
    let mut off = svc(
        json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false, "ports": [{"port": 80, "name": "http"}]}),
    );
    admit(Some(&lb), &mut off, &mut a).unwrap();
    assert_eq!(off["spec"]["ports"][0]["nodePort"], np);
    assert_eq!(a.allocated_ports(), 1);
    let mut removed = off.clone();
    removed["spec"]["ports"][0]
        .as_object_mut()
        .unwrap()
        .remove("nodePort");
    removed["spec"]["ports"][0]["name"] = json!("web");
    admit(Some(&off), &mut removed, &mut a).unwrap();
    assert!(removed["spec"]["ports"][0].get("nodePort").is_none());
    assert_eq!(a.allocated_ports(), 0);
}

#[test]
fn requested_values_honoured_or_rejected() {
    let mut a = allocator();
    let mut first = svc(
        json!({"type": "NodePort", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "nodePort": 30080}]}),
    );
    admit(None, &mut first, &mut a).unwrap();
    assert_eq!(first["spec"]["clusterIP"], "10.96.0.50");
    assert_eq!(first["spec"]["ports"][0]["nodePort"], 30080);

    let mut dup = svc(
        json!({"type": "NodePort", "clusterIP": "10.96.0.50", "ports": [{"port": 80, "nodePort": 30080}]}),
    );
    let causes = admit(None, &mut dup, &mut a).unwrap_err();
    assert_eq!(
        fields(&causes),
        vec!["spec.clusterIPs", "spec.ports[0].nodePort"]
    );
    assert!(causes[0].message.contains("already allocated"));

    let mut out = svc(json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}));
    let causes = admit(None, &mut out, &mut a).unwrap_err();
    assert!(
        causes[0].message.contains("not in the valid range"),
        "{causes:?}"
    );
    // Failed admissions leave nothing behind.
    assert_eq!(a.allocated_ips(), 1);
    assert_eq!(a.allocated_ports(), 1);
}

#[test]
fn headless_gets_no_ip() {
    let mut a = allocator();
    let mut s = svc(json!({"clusterIP": "None", "ports": [{"port": 80}]}));
    admit(None, &mut s, &mut a).unwrap();
    assert_eq!(s["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(a.allocated_ips(), 0);
}

/// Type changes (`dropTypeDependentFields`, `patchAllocatedValues`): LoadBalancer → ClusterIP
/// releases node ports and LB-only fields but keeps the cluster IP; the cluster IP never
/// changes (`validateUpgradeDowngradeClusterIPs`).
#[test]
fn update_carries_allocations_and_type_change_releases_ports() {
    let mut a = allocator();
    let mut lb = svc(
        json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb", "ports": [{"port": 80}]}),
    );
    admit(None, &mut lb, &mut a).unwrap();
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
    let ip = lb["spec"]["clusterIP"].clone();
    let np = lb["spec"]["ports"][0]["nodePort"].clone();

    // A PUT of the original manifest keeps what was allocated.
    let mut same = svc(
        json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/lb", "ports": [{"port": 80}]}),
    );
    same["status"] = lb["status"].clone();
    admit(Some(&lb), &mut same, &mut a).unwrap();
    assert_eq!(same["spec"]["clusterIP"], ip);
    assert_eq!(same["spec"]["ports"][0]["nodePort"], np);
    assert_eq!(a.allocated_ports(), 1);

    let mut cip = same.clone();
    cip["spec"]["type"] = json!("ClusterIP");
    admit(Some(&same), &mut cip, &mut a).unwrap();
    assert!(cip["spec"]["ports"][0].get("nodePort").is_none());
    assert!(cip["spec"].get("loadBalancerClass").is_none());
    assert!(cip["spec"].get("externalTrafficPolicy").is_none());
    assert!(cip["spec"].get("allocateLoadBalancerNodePorts").is_none());
    assert_eq!(cip["status"]["loadBalancer"], json!({}));
    assert_eq!(cip["spec"]["clusterIP"], ip);
    assert_eq!(a.allocated_ports(), 0);
    assert_eq!(a.allocated_ips(), 1);

    let mut moved = cip.clone();
    moved["spec"]["clusterIP"] = json!("10.96.1.1");
    moved["spec"]["clusterIPs"] = json!(["10.96.1.1"]);
    let causes = admit(Some(&cip), &mut moved, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.clusterIPs[0]"]);

    // ExternalName gives the cluster IP back; ClusterIP again allocates one.
    let mut name = cip.clone();
    name["spec"]["type"] = json!("ExternalName");
    name["spec"]["externalName"] = json!("db.example.com");
    admit(Some(&cip), &mut name, &mut a).unwrap();
    assert!(name["spec"].get("clusterIP").is_none());
    assert!(name["spec"].get("ipFamilies").is_none());
    assert_eq!(a.allocated_ips(), 0);
    let mut back = name.clone();
    back["spec"]["type"] = json!("ClusterIP");
    admit(Some(&name), &mut back, &mut a).unwrap();
    assert!(back["spec"]["clusterIP"].as_str().is_some());
    assert_eq!(a.allocated_ips(), 1);
}

/// `validateLoadBalancerClassField` on update: immutable while the Service stays a
/// LoadBalancer, including from unset to set.
#[test]
fn load_balancer_class_is_immutable() {
    let mut a = allocator();
    let mut lb = svc(
        json!({"type": "LoadBalancer", "loadBalancerClass": "example.com/a", "ports": [{"port": 80}]}),
    );
    admit(None, &mut lb, &mut a).unwrap();
    for class in [json!("example.com/b"), Value::Null] {
        let mut changed = lb.clone();
        changed["spec"]["loadBalancerClass"] = class.clone();
        let causes = admit(Some(&lb), &mut changed, &mut a).unwrap_err();
        assert_eq!(fields(&causes), vec!["spec.loadBalancerClass"], "{class}");
        assert!(causes[0].message.contains("may not change once set"));
    }
    let mut unclassed = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    unclassed["metadata"]["name"] = json!("other");
    admit(None, &mut unclassed, &mut a).unwrap();
    let mut set = unclassed.clone();
    set["spec"]["loadBalancerClass"] = json!("example.com/a");
    let causes = admit(Some(&unclassed), &mut set, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.loadBalancerClass"]);
}

/// `validateServiceExternalTrafficFieldsUpdate`: the health check node port of a
/// LoadBalancer/Local Service may not change; going to Cluster releases it.
#[test]
fn traffic_policy_change_releases_health_check_port() {
    let mut a = allocator();
    let mut local = svc(
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local", "ports": [{"port": 80}]}),
    );
    admit(None, &mut local, &mut a).unwrap();
    let hc = local["spec"]["healthCheckNodePort"].as_u64().unwrap();
    assert_eq!(a.allocated_ports(), 2);
    let mut moved = local.clone();
    moved["spec"]["healthCheckNodePort"] = json!(hc + 1);
    let causes = admit(Some(&local), &mut moved, &mut a).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.healthCheckNodePort"]);

    let mut cluster = local.clone();
    cluster["spec"]["externalTrafficPolicy"] = json!("Cluster");
    admit(Some(&local), &mut cluster, &mut a).unwrap();
    assert!(cluster["spec"].get("healthCheckNodePort").is_none());
    assert_eq!(a.allocated_ports(), 1);
    // The freed port can be requested again.
    let mut other = svc(
        json!({"type": "LoadBalancer", "externalTrafficPolicy": "Local",
        "healthCheckNodePort": hc, "ports": [{"port": 81}]}),
    );
    other["metadata"]["name"] = json!("other");
    admit(None, &mut other, &mut a).unwrap();
    assert_eq!(other["spec"]["healthCheckNodePort"].as_u64(), Some(hc));
}

#[test]
fn load_balancer_to_node_port_keeps_node_ports() {
    let mut a = allocator();
    let mut lb = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    admit(None, &mut lb, &mut a).unwrap();
    let np = lb["spec"]["ports"][0]["nodePort"].clone();
    let mut node_port = lb.clone();
    node_port["spec"]["type"] = json!("NodePort");
    admit(Some(&lb), &mut node_port, &mut a).unwrap();
    assert_eq!(node_port["spec"]["ports"][0]["nodePort"], np);
    assert!(
        node_port["spec"]
            .get("allocateLoadBalancerNodePorts")
            .is_none()
    );
    assert_eq!(node_port["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(a.allocated_ports(), 1);
}

/// Dual-stack (`initIPFamilyFields`): with a range per family, RequireDualStack and
/// PreferDualStack get one cluster IP of each, in the order of `ipFamilies`; SingleStack one.
#[test]
fn dual_stack_allocates_one_ip_per_family() {
    let cases: Vec<(Value, Vec<&str>, &str)> = vec![
        (json!({}), vec!["IPv4"], "SingleStack"),
        (
            json!({"ipFamilyPolicy": "PreferDualStack"}),
            vec!["IPv4", "IPv6"],
            "PreferDualStack",
        ),
        (
            json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6"]}),
            vec!["IPv6", "IPv4"],
            "RequireDualStack",
        ),
        (
            json!({"ipFamilies": ["IPv6", "IPv4"]}),
            vec!["IPv6", "IPv4"],
            "RequireDualStack",
        ),
        (json!({"ipFamilies": ["IPv6"]}), vec!["IPv6"], "SingleStack"),
        (
            json!({"clusterIP": "fd00:10:96::a"}),
            vec!["IPv6"],
            "SingleStack",
        ),
    ];
    for (extra, families, policy) in cases {
        let mut a = dual_stack();
        let mut spec = json!({"ports": [{"port": 80}]});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let mut s = svc(spec);
        admit(None, &mut s, &mut a).unwrap_or_else(|c| panic!("{extra}: {c:?}"));
        assert_eq!(s["spec"]["ipFamilies"], json!(families), "{extra}");
        assert_eq!(s["spec"]["ipFamilyPolicy"], policy, "{extra}");
        let ips: Vec<IpAddr> = s["spec"]["clusterIPs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ip| ip.as_str().unwrap().parse().unwrap())
            .collect();
        let got: Vec<&str> = ips.iter().map(|ip| family_of(*ip)).collect();
        assert_eq!(got, families, "{extra}");
        assert_eq!(s["spec"]["clusterIP"], s["spec"]["clusterIPs"][0]);
        assert_eq!(a.allocated_ips(), families.len());
    }
    let mut mismatch =
        svc(json!({"clusterIP": "10.96.0.10", "ipFamilies": ["IPv6"], "ports": [{"port": 80}]}));
    let causes = admit(None, &mut mismatch, &mut dual_stack()).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.clusterIPs[0]"]);
    let mut single_two = svc(
        json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4", "IPv6"], "ports": [{"port": 80}]}),
    );
    let causes = admit(None, &mut single_two, &mut dual_stack()).unwrap_err();
    assert_eq!(fields(&causes), vec!["spec.ipFamilyPolicy"]);
}

/// Changing families (`validateUpgradeDowngradeClusterIPs`, `validateUpgradeDowngradeIPFamilies`,
/// `trimFieldsForDualStackDowngrade`): upgrade by raising the policy, downgrade with
/// SingleStack, the primary never changes.
#[test]
fn dual_stack_upgrade_and_downgrade() {
    let mut a = dual_stack();
    let mut single = svc(json!({"ports": [{"port": 80}]}));
    admit(None, &mut single, &mut a).unwrap();
    let primary = single["spec"]["clusterIP"].clone();

    let mut up = single.clone();
    up["spec"]["ipFamilyPolicy"] = json!("RequireDualStack");
    admit(Some(&single), &mut up, &mut a).unwrap();
    assert_eq!(up["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    assert_eq!(up["spec"]["clusterIPs"][0], primary);
    assert_eq!(a.allocated_ips(), 2);

    // Releasing the secondary without SingleStack is refused.
    let mut bad = up.clone();
    bad["spec"]["clusterIPs"] = json!([primary]);
    bad["spec"]["ipFamilies"] = json!(["IPv4"]);
    let causes = admit(Some(&up), &mut bad, &mut a).unwrap_err();
    assert_eq!(
        fields(&causes),
        vec!["spec.ipFamilyPolicy", "spec.ipFamilyPolicy"]
    );

    let mut down = up.clone();
    down["spec"]["ipFamilyPolicy"] = json!("SingleStack");
    admit(Some(&up), &mut down, &mut a).unwrap();
    assert_eq!(down["spec"]["clusterIPs"], json!([primary]));
    assert_eq!(down["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(a.allocated_ips(), 1);

    let mut swap = down.clone();
    swap["spec"]["ipFamilies"] = json!(["IPv6"]);
    let causes = admit(Some(&down), &mut swap, &mut a).unwrap_err();
    assert!(
        fields(&causes).contains(&"spec.ipFamilies[0]"),
        "{causes:?}"
    );
}

/// Seed 002's field is stored, and mirrored into the annotation every kube-lb consumer reads;
/// the mirror follows the field on update and goes with it.
#[test]
fn topology_keys_are_mirrored_into_the_annotation() {
    let mut a = allocator();
    let mut s =
        svc(json!({"topologyKeys": ["kubernetes.io/hostname", "*"], "ports": [{"port": 80}]}));
    admit(None, &mut s, &mut a).unwrap();
    assert_eq!(
        s["spec"]["topologyKeys"],
        json!(["kubernetes.io/hostname", "*"])
    );
    assert_eq!(
        s["metadata"]["annotations"][TOPOLOGY_KEYS_ANNOTATION],
        "kubernetes.io/hostname,*"
    );
    let mut zone = s.clone();
    zone["spec"]["topologyKeys"] = json!(["topology.kubernetes.io/zone"]);
    admit(Some(&s), &mut zone, &mut a).unwrap();
    assert_eq!(
        zone["metadata"]["annotations"][TOPOLOGY_KEYS_ANNOTATION],
        "topology.kubernetes.io/zone"
    );
    let mut dropped = zone.clone();
    dropped["spec"]
        .as_object_mut()
        .unwrap()
        .remove("topologyKeys");
    admit(Some(&zone), &mut dropped, &mut a).unwrap();
    assert!(
        dropped["metadata"]["annotations"]
            .get(TOPOLOGY_KEYS_ANNOTATION)
            .is_none()
    );

    // A client that sets both to different lists is told so.
    let mut both =
        svc(json!({"topologyKeys": ["kubernetes.io/hostname"], "ports": [{"port": 80}]}));
    both["metadata"]["annotations"] =
        json!({TOPOLOGY_KEYS_ANNOTATION: "topology.kubernetes.io/zone"});
    let causes = admit(None, &mut both, &mut a).unwrap_err();
    assert_eq!(
        fields(&causes),
        vec!["metadata.annotations[service.kubernetes.io/topology-keys]"]
    );
    // The annotation alone is kube-lb's business, not the API server's.
    let mut alone = svc(json!({"ports": [{"port": 80}]}));
    alone["metadata"]["name"] = json!("alone");
    alone["metadata"]["annotations"] = json!({TOPOLOGY_KEYS_ANNOTATION: "*,bad key"});
    admit(None, &mut alone, &mut a).unwrap();
}

#[test]
fn small_ranges_fill_up_without_collisions() {
    let mut a = Allocator::new("10.0.0.0/29".parse().unwrap(), 30000..=30002);
    let mut ips = BTreeSet::new();
    // /29: 8 addresses minus network, first host and broadcast.
    for _ in 0..5 {
        let mut s = svc(json!({"ports": [{"port": 80}]}));
        admit(None, &mut s, &mut a).unwrap();
        assert!(ips.insert(s["spec"]["clusterIP"].as_str().unwrap().to_string()));
    }
    let mut full = svc(json!({"ports": [{"port": 80}]}));
    let causes = admit(None, &mut full, &mut a).unwrap_err();
    assert!(causes[0].message.contains("range is full"));
    let mut ports = BTreeSet::new();
    let mut b = Allocator::new("10.0.0.0/24".parse().unwrap(), 30000..=30002);
    for _ in 0..3 {
        let mut s = svc(json!({"type": "NodePort", "ports": [{"port": 80}]}));
        admit(None, &mut s, &mut b).unwrap();
        assert!(ports.insert(s["spec"]["ports"][0]["nodePort"].as_u64().unwrap()));
    }
    let mut s = svc(json!({"type": "NodePort", "ports": [{"port": 80}]}));
    assert!(admit(None, &mut s, &mut b).is_err());
    assert_eq!(b.allocated_ips(), 3);
}

#[test]
fn secondary_range_must_be_the_other_family() {
    assert!(
        allocator()
            .with_secondary_cidr("10.100.0.0/16".parse().unwrap())
            .is_err()
    );
    let a = dual_stack();
    assert!(a.is_dual_stack());
    assert_eq!(a.cidrs().len(), 2);
    assert!(a.with_secondary_cidr("fd00::/64".parse().unwrap()).is_err());
}

/// LoadBalancerIPMode as kube-apiserver (GA): an ingress IP without ipMode is defaulted to
/// VIP; ipMode is only `VIP` or `Proxy`, and only beside an IP.
#[test]
fn ingress_ip_mode_is_defaulted_and_validated() {
    let lb = || {
        let mut s = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
        admit(None, &mut s, &mut allocator()).unwrap();
        s
    };
    let mut s = lb();
    s["status"] = json!({"loadBalancer": {"ingress": [
        {"ip": "192.0.2.1"}, {"ip": "192.0.2.2", "ipMode": "Proxy"}, {"hostname": "lb.example"}
    ]}});
    admit_status(&mut s, LbStatusOnNonLb::Forbidden).unwrap();
    let ingress = &s["status"]["loadBalancer"]["ingress"];
    assert_eq!(ingress[0]["ipMode"], "VIP", "defaulted");
    assert_eq!(ingress[1]["ipMode"], "Proxy", "kept");
    assert!(
        ingress[2].get("ipMode").is_none(),
        "never beside a hostname only"
    );

    for (entry, field, reason) in [
        (
            json!({"ip": "192.0.2.1", "ipMode": "proxy"}),
            "status.loadBalancer.ingress[0].ipMode",
            "FieldValueNotSupported",
        ),
        (
            json!({"hostname": "lb.example", "ipMode": "Proxy"}),
            "status.loadBalancer.ingress[0].ipMode",
            "FieldValueForbidden",
        ),
    ] {
        let mut s = lb();
        s["status"] = json!({"loadBalancer": {"ingress": [entry.clone()]}});
        let causes = admit_status(&mut s, LbStatusOnNonLb::Forbidden).unwrap_err();
        assert!(
            causes
                .iter()
                .any(|c| c.field == field && c.reason == reason),
            "{entry}: {causes:?}"
        );
    }
}

/// `ValidateLoadBalancerStatus` with `AllowServiceLBStatusOnNonLB` locked off (client writes
/// of /status) and on (seeds of stored state): ingress points only on a LoadBalancer, as one
/// Forbidden cause on the list with nothing else checked; an empty list is no ingress point.
#[test]
fn load_balancer_status_only_on_load_balancers() {
    use LbStatusOnNonLb::{Allowed, Forbidden};
    let forbidden = || vec![("status.loadBalancer.ingress", "FieldValueForbidden")];
    // (type, ingress, gate, (field, reason) of each cause)
    let cases = [
        (
            "ClusterIP",
            json!([{"ip": "192.0.2.1"}]),
            Forbidden,
            forbidden(),
        ),
        (
            "NodePort",
            json!([{"hostname": "lb.example"}]),
            Forbidden,
            forbidden(),
        ),
        (
            "ClusterIP",
            json!([{"ip": "not-an-ip"}]),
            Forbidden,
            forbidden(),
        ),
        ("ClusterIP", json!([]), Forbidden, vec![]),
        (
            "LoadBalancer",
            json!([{"ip": "192.0.2.1"}]),
            Forbidden,
            vec![],
        ),
        ("ClusterIP", json!([{"ip": "192.0.2.1"}]), Allowed, vec![]),
        (
            "ClusterIP",
            json!([{"ip": "not-an-ip"}]),
            Allowed,
            vec![("status.loadBalancer.ingress[0].ip", "FieldValueInvalid")],
        ),
    ];
    for (type_, ingress, gate, expected) in cases {
        let mut s = svc(json!({"type": type_, "ports": [{"port": 80}]}));
        admit(None, &mut s, &mut allocator()).unwrap();
        s["status"] = json!({"loadBalancer": {"ingress": ingress.clone()}});
        let got: Vec<(String, &str)> = match admit_status(&mut s, gate) {
            Ok(()) => Vec::new(),
            Err(causes) => causes.into_iter().map(|c| (c.field, c.reason)).collect(),
        };
        let expected: Vec<(String, &str)> = expected
            .into_iter()
            .map(|(field, reason)| (field.to_string(), reason))
            .collect();
        assert_eq!(got, expected, "{type_} {ingress} {gate:?}");
    }
    let mut s = svc(json!({"ports": [{"port": 80}]}));
    s["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}});
    let causes = admit_status(&mut s, Forbidden).unwrap_err();
    assert_eq!(
        causes[0].message,
        "Forbidden: may only be used when `spec.type` is 'LoadBalancer'"
    );
}

/// `dropTypeDependentFields`: every update of the main resource of a Service that is not a
/// LoadBalancer clears its load-balancer status, whatever the old type and whether or not the
/// type changes (a stored ClusterIP Service that kept ingress points loses them).
#[test]
fn main_update_of_a_non_load_balancer_clears_its_ingress() {
    let mut a = allocator();
    let mut old = svc(json!({"ports": [{"port": 80}]}));
    admit(None, &mut old, &mut a).unwrap();
    old["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]},
                           "conditions": []});
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"touched": "yes"});
    admit(Some(&old), &mut new, &mut a).unwrap();
    assert_eq!(new["status"]["loadBalancer"], json!({}));
    assert_eq!(
        new["status"]["conditions"],
        json!([]),
        "only the load balancer"
    );

    let mut lb = svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]}));
    admit(None, &mut lb, &mut a).unwrap();
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.2"}]}});
    let mut relabelled = lb.clone();
    relabelled["metadata"]["labels"] = json!({"touched": "yes"});
    admit(Some(&lb), &mut relabelled, &mut a).unwrap();
    assert_eq!(
        relabelled["status"]["loadBalancer"]["ingress"][0]["ip"], "192.0.2.2",
        "a LoadBalancer keeps its ingress"
    );
}

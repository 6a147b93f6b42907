//! Endpoints and EndpointSlice validation against kube-apiserver 1.33: `ValidateEndpoints`,
//! `validateEndpointSubsets`, `validateEndpointAddress`, `validateEndpointPort` and
//! `ValidateNonSpecialIP` (pkg/apis/core/validation/validation.go); `ValidateEndpointSlice`,
//! `validateEndpoints`, `validatePorts`, `validateAddressType` and
//! `ValidateEndpointSliceUpdate` (pkg/apis/discovery/validation/validation.go), which apply
//! the same `ValidateNonSpecialIP` to IPv4 and IPv6 slice addresses.

use serde_json::json;

use super::*;
use crate::services::{self, DEFAULT_NODE_PORT_RANGE};

fn allocator() -> Allocator {
    let mut a = Allocator::new(services::default_service_cidr(), DEFAULT_NODE_PORT_RANGE);
    // A Service holding 10.96.0.10, so the seed 003 rule has something to refuse.
    let mut svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}});
    services::admit(None, &mut svc, &mut a).unwrap();
    a
}

fn fields(causes: &[Cause]) -> Vec<&str> {
    causes.iter().map(|c| c.field.as_str()).collect()
}

fn endpoints(subsets: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"}, "subsets": subsets})
}

fn slice(address_type: &str, endpoints: Value, ports: Value) -> Value {
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-1"},
        "addressType": address_type, "endpoints": endpoints, "ports": ports})
}

#[test]
fn endpoints_table() {
    let a = allocator();
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "the seed's example",
            json!([{"addresses": [{"ip": "1.2.3.4"}], "ports": [{"port": 9376}]}]),
            vec![],
        ),
        (
            "ValidateNonSpecialIP: loopback",
            json!([{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "ValidateNonSpecialIP: link-local",
            json!([{"addresses": [{"ip": "169.254.1.1"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "ValidateNonSpecialIP: link-local multicast",
            json!([{"addresses": [{"ip": "224.0.0.5"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "ValidateNonSpecialIP: IPv6 loopback, link-local, multicast; not-ready too",
            json!([{"addresses": [{"ip": "::1"}, {"ip": "fe80::1"}], "notReadyAddresses": [{"ip": "ff02::2"}], "ports": [{"port": 80}]}]),
            vec![
                "subsets[0].addresses[0].ip",
                "subsets[0].addresses[1].ip",
                "subsets[0].notReadyAddresses[0].ip",
            ],
        ),
        (
            "ValidateNonSpecialIP: unspecified",
            json!([{"addresses": [{"ip": "0.0.0.0"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "seed 003: not another Service's cluster IP",
            json!([{"addresses": [{"ip": "10.96.0.10"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "validateEndpointAddress: IsValidIP",
            json!([{"addresses": [{"ip": "10.0.0.300"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].ip"],
        ),
        (
            "validateEndpointAddress: hostname is a DNS-1123 label",
            json!([{"addresses": [{"ip": "10.0.0.1", "hostname": "a.b"}], "ports": [{"port": 80}]}]),
            vec!["subsets[0].addresses[0].hostname"],
        ),
        (
            "validateEndpointSubsets: addresses or notReadyAddresses",
            json!([{"ports": [{"port": 80}]}]),
            vec!["subsets[0]"],
        ),
        (
            "validateEndpointPort: names required with several ports",
            json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}, {"port": 81, "name": "b"}]}]),
            vec!["subsets[0].ports[0].name"],
        ),
        (
            "validateEndpointPort: name is a DNS-1123 label",
            json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80, "name": "http-metrics-port"}, {"port": 81, "name": "Web_1"}]}]),
            vec!["subsets[0].ports[1].name"],
        ),
        (
            "validateEndpointPort: IsValidPortNum and supportedPortProtocols",
            json!([{"addresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 0, "protocol": "ICMP"}]}]),
            vec!["subsets[0].ports[0].port", "subsets[0].ports[0].protocol"],
        ),
    ];
    for (rule, subsets, want) in cases {
        let mut object = endpoints(subsets.clone());
        let causes = validate_endpoints(&mut object, &a);
        assert_eq!(fields(&causes), want, "{rule}: {subsets}");
    }
}

#[test]
fn endpoints_messages_are_upstreams() {
    let mut object =
        endpoints(json!([{"addresses": [{"ip": "127.0.0.1"}], "ports": [{"port": 80}]}]));
    let causes = validate_endpoints(&mut object, &allocator());
    assert_eq!(
        causes[0].message,
        "Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)"
    );
    // SetDefaults_EndpointPort.
    assert_eq!(object["subsets"][0]["ports"][0]["protocol"], "TCP");
}

#[test]
fn endpoint_slice_table() {
    let a = allocator();
    let port = json!([{"name": "http", "port": 80, "protocol": "TCP"}]);
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "a valid IPv4 slice",
            slice(
                "IPv4",
                json!([{"addresses": ["10.1.0.1"], "nodeName": "n1"}]),
                port.clone(),
            ),
            vec![],
        ),
        (
            "validateEndpoints: ValidateNonSpecialIP on IPv4 addresses",
            slice(
                "IPv4",
                json!([{"addresses": ["127.0.0.1"]}, {"addresses": ["169.254.3.3"]}, {"addresses": ["224.0.0.1"]}]),
                port.clone(),
            ),
            vec![
                "endpoints[0].addresses[0]",
                "endpoints[1].addresses[0]",
                "endpoints[2].addresses[0]",
            ],
        ),
        (
            "validateEndpoints: ValidateNonSpecialIP on IPv6 addresses",
            slice(
                "IPv6",
                json!([{"addresses": ["::1"]}, {"addresses": ["fe80::9"]}, {"addresses": ["2001:db8::1"]}]),
                port.clone(),
            ),
            vec!["endpoints[0].addresses[0]", "endpoints[1].addresses[0]"],
        ),
        (
            "validateEndpoints: addresses of the slice's type (IsValidIPv4Address)",
            slice(
                "IPv4",
                json!([{"addresses": ["2001:db8::1"]}]),
                port.clone(),
            ),
            vec!["endpoints[0].addresses[0]"],
        ),
        (
            "validateEndpoints: addresses of the slice's type (IsValidIPv6Address)",
            slice("IPv6", json!([{"addresses": ["10.1.0.1"]}]), port.clone()),
            vec!["endpoints[0].addresses[0]"],
        ),
        (
            "validateEndpoints: FQDN addresses (IsFullyQualifiedDomainName)",
            slice(
                "FQDN",
                json!([{"addresses": ["db.example.com"]}, {"addresses": ["db"]}]),
                port.clone(),
            ),
            vec!["endpoints[1].addresses[0]"],
        ),
        (
            "validateEndpoints: at least one address",
            slice("IPv4", json!([{"addresses": []}]), port.clone()),
            vec!["endpoints[0].addresses"],
        ),
        (
            "seed 003: not a Service's cluster IP",
            slice("IPv4", json!([{"addresses": ["10.96.0.10"]}]), port.clone()),
            vec!["endpoints[0].addresses[0]"],
        ),
        (
            "validateAddressType: required",
            slice("", json!([]), port.clone()),
            vec!["addressType"],
        ),
        (
            "validateAddressType: IP only on update",
            slice("IP", json!([]), port.clone()),
            vec!["addressType"],
        ),
        (
            "validatePorts: names are DNS-1123 labels",
            slice(
                "IPv4",
                json!([]),
                json!([{"name": "http-metrics-port", "port": 80, "protocol": "TCP"}, {"name": "Web", "port": 81, "protocol": "TCP"}]),
            ),
            vec!["ports[1].name"],
        ),
        (
            "validatePorts: names unique, an unnamed port counts as \"\"",
            slice(
                "IPv4",
                json!([]),
                json!([{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "UDP"}]),
            ),
            vec!["ports[1].name"],
        ),
        (
            "validatePorts: supportedPortProtocols",
            slice(
                "IPv4",
                json!([]),
                json!([{"name": "a", "port": 80, "protocol": "ICMP"}]),
            ),
            vec!["ports[0].protocol"],
        ),
        (
            "validateEndpoints: hostname is a DNS-1123 label",
            slice(
                "IPv4",
                json!([{"addresses": ["10.1.0.1"], "hostname": "No"}]),
                port.clone(),
            ),
            vec!["endpoints[0].hostname"],
        ),
    ];
    for (rule, object, want) in cases {
        let mut object = object;
        let causes = validate_endpoint_slice(None, &mut object, &a);
        assert_eq!(fields(&causes), want, "{rule}");
    }
}

#[test]
fn slice_address_type_is_immutable() {
    let a = allocator();
    let old = slice("IPv4", json!([]), json!([]));
    let mut new = slice("IPv6", json!([]), json!([]));
    let causes = validate_endpoint_slice(Some(&old), &mut new, &a);
    assert_eq!(fields(&causes), vec!["addressType"]);
    assert!(causes[0].message.contains("field is immutable"));
    let mut legacy = slice("IP", json!([{"addresses": ["10.1.0.1"]}]), json!([]));
    let old_legacy = legacy.clone();
    assert!(validate_endpoint_slice(Some(&old_legacy), &mut legacy, &a).is_empty());
}

#[test]
fn limits_are_upstreams() {
    let a = allocator();
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"addresses": [format!("10.2.{}.{}", i / 250, i % 250 + 1)]}))
        .collect();
    let mut big = slice("IPv4", json!(many), json!([]));
    let causes = validate_endpoint_slice(None, &mut big, &a);
    assert_eq!(fields(&causes), vec!["endpoints"]);
    assert_eq!(causes[0].reason, "FieldValueTooMany");
    let addresses: Vec<String> = (0..101).map(|i| format!("10.3.0.{}", i + 1)).collect();
    let mut wide = slice("IPv4", json!([{"addresses": addresses}]), json!([]));
    let causes = validate_endpoint_slice(None, &mut wide, &a);
    assert_eq!(fields(&causes), vec!["endpoints[0].addresses"]);
}

/// `kube-lb up` serves its demo backends on loopback, which kube-apiserver refuses; the server
/// it runs allows loopback (and only loopback) endpoints.
#[test]
fn loopback_allowance_covers_loopback_only() {
    let a = allocator().allow_loopback_endpoints(true);
    let mut demo = slice(
        "IPv4",
        json!([{"addresses": ["127.0.0.11"]}, {"addresses": ["169.254.0.1"]}]),
        json!([{"name": "http", "port": 18080, "protocol": "TCP"}]),
    );
    let causes = validate_endpoint_slice(None, &mut demo, &a);
    assert_eq!(fields(&causes), vec!["endpoints[1].addresses[0]"]);
    let mut ep =
        endpoints(json!([{"addresses": [{"ip": "127.0.0.13"}], "ports": [{"port": 9377}]}]));
    assert!(validate_endpoints(&mut ep, &a).is_empty());
}

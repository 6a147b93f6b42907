//! Endpoints and EndpointSlice validation.
//!
//! Beyond kube-apiserver, one rule of seed 003 ("the IP addresses of Endpoints may not be the
//! cluster IPs of other Services, because kube-proxy does not support virtual IPs as a
//! destination") is enforced for both kinds: kube-apiserver leaves it to documentation, and
//! kube-lb's dataplane would loop such traffic back into the Service rules.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_json::{Value, json};

use super::{is_loopback, non_special_ip};
use crate::meta;
use crate::services::{Allocator, too_many};
use crate::status::Cause;

const PROTOCOLS: &[&str] = &["SCTP", "TCP", "UDP"];
const ADDRESS_TYPES: &[&str] = &["FQDN", "IPv4", "IPv6"];
/// Accepted on update only: slices stored before `IP` was deprecated.
const ADDRESS_TYPES_ON_UPDATE: &[&str] = &["FQDN", "IP", "IPv4", "IPv6"];
const MAX_ENDPOINTS: usize = 1000;
const MAX_ADDRESSES: usize = 100;
const MAX_PORTS: usize = 100;
const IP_DETAIL: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const CLUSTER_IP_DETAIL: &str = "may not be the cluster IP of a Service: kube-proxy does not \
    support virtual IPs as a destination (seed 003)";

fn str_field<'a>(value: &'a Value, field: &str) -> Option<&'a str> {
    value.get(field).and_then(Value::as_str)
}

fn list<'a>(value: &'a Value, field: &str) -> &'a [Value] {
    value
        .get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The address checks both kinds share, after the format check: the special ranges (loopback
/// only when the server allows it) and Service cluster IPs.
fn address_rules(field: &str, text: &str, ip: IpAddr, allocator: &Allocator) -> Vec<Cause> {
    if allocator.loopback_endpoints_allowed() && is_loopback(ip) {
        return Vec::new();
    }
    let mut causes = non_special_ip(field, text, ip);
    if causes.is_empty() && allocator.is_cluster_ip(ip) {
        causes.push(Cause::invalid(field, text, CLUSTER_IP_DETAIL));
    }
    causes
}

fn check_dns_label(causes: &mut Vec<Cause>, field: String, value: &str) {
    for problem in meta::dns1123_label_problems(value) {
        causes.push(Cause::invalid(field.clone(), value, &problem));
    }
}

fn check_node_name(causes: &mut Vec<Cause>, field: String, value: &str) {
    for problem in meta::dns1123_subdomain_problems(value) {
        causes.push(Cause::invalid(field.clone(), value, &problem));
    }
}

fn check_protocol(causes: &mut Vec<Cause>, field: String, port: &Value) {
    match str_field(port, "protocol").filter(|p| !p.is_empty()) {
        None => causes.push(Cause::required(field)),
        Some(p) if !PROTOCOLS.contains(&p) => {
            causes.push(Cause::not_supported(field, p, PROTOCOLS));
        }
        Some(_) => {}
    }
}

fn check_app_protocol(causes: &mut Vec<Cause>, field: String, port: &Value) {
    if let Some(app) = str_field(port, "appProtocol")
        && !meta::is_qualified_name(app)
    {
        causes.push(Cause::invalid(field, app, meta::QUALIFIED_NAME_DETAIL));
    }
}

/// `SetDefaults_EndpointPort` for every port of every subset: protocol TCP.
fn default_endpoints(object: &mut Value) {
    if let Some(Value::Array(subsets)) = object.get_mut("subsets") {
        for subset in subsets.iter_mut() {
            if let Some(Value::Array(ports)) = subset.get_mut("ports") {
                for port in ports.iter_mut().filter(|p| p.is_object()) {
                    if port.get("protocol").is_none_or(Value::is_null) {
                        port["protocol"] = json!("TCP");
                    }
                }
            }
        }
    }
}

/// Defaults and validates an Endpoints object (`ValidateEndpoints`, `validateEndpointSubsets`,
/// `validateEndpointAddress`, `validateEndpointPort`).
pub fn validate_endpoints(object: &mut Value, allocator: &Allocator) -> Vec<Cause> {
    default_endpoints(object);
    let mut causes = Vec::new();
    for (i, subset) in list(object, "subsets").iter().enumerate() {
        let path = format!("subsets[{i}]");
        let ready = list(subset, "addresses");
        let not_ready = list(subset, "notReadyAddresses");
        if ready.is_empty() && not_ready.is_empty() {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: must specify `addresses` or `notReadyAddresses`"
                    .to_string(),
                field: path.clone(),
            });
        }
        for (kind, addresses) in [("addresses", ready), ("notReadyAddresses", not_ready)] {
            for (j, address) in addresses.iter().enumerate() {
                let base = format!("{path}.{kind}[{j}]");
                let text = str_field(address, "ip").unwrap_or_default();
                match text.parse::<IpAddr>() {
                    Ok(ip) => {
                        causes.extend(address_rules(&format!("{base}.ip"), text, ip, allocator))
                    }
                    Err(_) => causes.push(Cause::invalid(format!("{base}.ip"), text, IP_DETAIL)),
                }
                if let Some(hostname) = str_field(address, "hostname").filter(|h| !h.is_empty()) {
                    check_dns_label(&mut causes, format!("{base}.hostname"), hostname);
                }
                if let Some(node) = str_field(address, "nodeName") {
                    check_node_name(&mut causes, format!("{base}.nodeName"), node);
                }
            }
        }
        let ports = list(subset, "ports");
        for (j, port) in ports.iter().enumerate() {
            let base = format!("{path}.ports[{j}]");
            match str_field(port, "name").filter(|n| !n.is_empty()) {
                None if ports.len() > 1 => causes.push(Cause::required(format!("{base}.name"))),
                None => {}
                Some(name) => check_dns_label(&mut causes, format!("{base}.name"), name),
            }
            let number = port.get("port").and_then(Value::as_i64).unwrap_or_default();
            if !(1..=65535).contains(&number) {
                causes.push(Cause::invalid_literal(
                    format!("{base}.port"),
                    &number.to_string(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            check_protocol(&mut causes, format!("{base}.protocol"), port);
            check_app_protocol(&mut causes, format!("{base}.appProtocol"), port);
        }
    }
    causes
}

/// `SetDefaults_EndpointPort` of discovery/v1: an unnamed port is named `""`.
fn default_slice(object: &mut Value) {
    if let Some(Value::Array(ports)) = object.get_mut("ports") {
        for port in ports.iter_mut().filter(|p| p.is_object()) {
            if port.get("name").is_none_or(Value::is_null) {
                port["name"] = json!("");
            }
        }
    }
}

/// Whether `text` is a fully qualified domain name (`IsFullyQualifiedDomainName`): at least
/// two labels, a DNS-1123 subdomain once a trailing dot is removed.
fn is_fqdn(text: &str) -> bool {
    let name = text.strip_suffix('.').unwrap_or(text);
    name.contains('.') && meta::is_dns1123_subdomain(name)
}

/// Defaults and validates an EndpointSlice (`ValidateEndpointSliceCreate`/`Update`,
/// `validateEndpoints`, `validatePorts`, `validateAddressType`). The address type is
/// immutable, and every address must be of it: an `IPv4` slice holds IPv4 addresses only.
pub fn validate_endpoint_slice(
    old: Option<&Value>,
    object: &mut Value,
    allocator: &Allocator,
) -> Vec<Cause> {
    default_slice(object);
    let mut causes = Vec::new();
    let address_type = str_field(object, "addressType").unwrap_or_default();
    let allowed = if old.is_some() {
        ADDRESS_TYPES_ON_UPDATE
    } else {
        ADDRESS_TYPES
    };
    if address_type.is_empty() {
        causes.push(Cause::required("addressType"));
    } else if !allowed.contains(&address_type) {
        causes.push(Cause::not_supported("addressType", address_type, allowed));
    }
    if let Some(old) = old {
        let before = str_field(old, "addressType").unwrap_or_default();
        if before != address_type {
            causes.push(Cause::invalid(
                "addressType",
                address_type,
                "field is immutable",
            ));
        }
    }
    let endpoints = list(object, "endpoints");
    if endpoints.len() > MAX_ENDPOINTS {
        causes.push(too_many("endpoints", endpoints.len(), MAX_ENDPOINTS));
    } else {
        for (i, endpoint) in endpoints.iter().enumerate() {
            validate_slice_endpoint(&mut causes, endpoint, address_type, i, allocator);
        }
    }
    let ports = list(object, "ports");
    if ports.len() > MAX_PORTS {
        causes.push(too_many("ports", ports.len(), MAX_PORTS));
        return causes;
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let base = format!("ports[{i}]");
        let name = str_field(port, "name").unwrap_or_default();
        if !name.is_empty() {
            check_dns_label(&mut causes, format!("{base}.name"), name);
        }
        if !names.insert(name) {
            causes.push(Cause::duplicate(format!("{base}.name"), name));
        }
        check_protocol(&mut causes, format!("{base}.protocol"), port);
        check_app_protocol(&mut causes, format!("{base}.appProtocol"), port);
    }
    causes
}

fn validate_slice_endpoint(
    causes: &mut Vec<Cause>,
    endpoint: &Value,
    address_type: &str,
    i: usize,
    allocator: &Allocator,
) {
    let base = format!("endpoints[{i}]");
    let addresses = list(endpoint, "addresses");
    if addresses.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            message: "Required value: must contain at least 1 address".to_string(),
            field: format!("{base}.addresses"),
        });
    } else if addresses.len() > MAX_ADDRESSES {
        causes.push(too_many(
            format!("{base}.addresses"),
            addresses.len(),
            MAX_ADDRESSES,
        ));
    }
    for (j, address) in addresses.iter().take(MAX_ADDRESSES).enumerate() {
        let field = format!("{base}.addresses[{j}]");
        let text = address.as_str().unwrap_or_default();
        // Unknown address types fall through unvalidated, as upstream's switch does.
        match address_type {
            "IPv4" | "IPv6" => {
                let parsed = text.parse::<IpAddr>().ok().filter(|ip| {
                    matches!(
                        (address_type, ip),
                        ("IPv4", IpAddr::V4(_)) | ("IPv6", IpAddr::V6(_))
                    )
                });
                match parsed {
                    Some(ip) => causes.extend(address_rules(&field, text, ip, allocator)),
                    None => causes.push(Cause::invalid(
                        field,
                        text,
                        &format!("must be a valid {address_type} address"),
                    )),
                }
            }
            "IP" if text.parse::<IpAddr>().is_err() => {
                causes.push(Cause::invalid(field, text, IP_DETAIL));
            }
            "FQDN" if !is_fqdn(text) => causes.push(Cause::invalid(
                field,
                text,
                "should be a domain with at least two segments separated by dots",
            )),
            _ => {}
        }
    }
    if let Some(hostname) = str_field(endpoint, "hostname") {
        check_dns_label(causes, format!("{base}.hostname"), hostname);
    }
    if let Some(node) = str_field(endpoint, "nodeName") {
        check_node_name(causes, format!("{base}.nodeName"), node);
    }
}

#[cfg(test)]
mod tests;

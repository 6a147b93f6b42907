//! The warnings kube-apiserver 1.33 sends with a Service it accepts (`GetWarningsForService`,
//! pkg/api/service/warnings.go, and apimachinery's `GetWarningsForIP` / `GetWarningsForCIDR`):
//! fields that are ignored for the Service's type, a deprecated annotation, and addresses or
//! ranges written in a form that is ambiguous or not canonical. kubectl prints each as
//! `Warning: …`.

use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use super::{TOPOLOGY_HINTS_ANNOTATION, TOPOLOGY_MODE_ANNOTATION, annotation, str_field, str_list};

/// The warnings for `service` as it is stored.
pub fn warnings(service: &Value) -> Vec<String> {
    let spec = &service["spec"];
    let ty = str_field(spec, "type").unwrap_or("ClusterIP");
    let mut out = Vec::new();
    if annotation(service, TOPOLOGY_HINTS_ANNOTATION).is_some() {
        out.push(format!(
            "annotation {TOPOLOGY_HINTS_ANNOTATION} is deprecated, please use \
             {TOPOLOGY_MODE_ANNOTATION} instead"
        ));
    }
    let cluster_ip = str_field(spec, "clusterIP").unwrap_or_default();
    if !cluster_ip.is_empty() && cluster_ip != "None" {
        for (i, ip) in str_list(spec, "clusterIPs").iter().enumerate() {
            out.extend(ip_warning(&format!("spec.clusterIPs[{i}]"), ip));
        }
    }
    let external_ips = str_list(spec, "externalIPs");
    if ty == "ClusterIP" && cluster_ip == "None" {
        if str_field(spec, "loadBalancerIP").is_some_and(|ip| !ip.is_empty()) {
            out.push("spec.loadBalancerIP is ignored for headless services".to_string());
        }
        if !external_ips.is_empty() {
            out.push("spec.externalIPs is ignored for headless services".to_string());
        }
        if str_field(spec, "sessionAffinity").is_some_and(|a| a != "None") {
            out.push("spec.SessionAffinity is ignored for headless services".to_string());
        }
    }
    for (i, ip) in external_ips.iter().enumerate() {
        out.extend(ip_warning(&format!("spec.externalIPs[{i}]"), ip));
    }
    if let Some(ip) = str_field(spec, "loadBalancerIP").filter(|ip| !ip.is_empty()) {
        out.extend(ip_warning("spec.loadBalancerIP", ip));
    }
    for (i, range) in str_list(spec, "loadBalancerSourceRanges")
        .iter()
        .enumerate()
    {
        out.extend(cidr_warnings(
            &format!("spec.loadBalancerSourceRanges[{i}]"),
            range,
        ));
    }
    if ty == "ExternalName" && !external_ips.is_empty() {
        out.push("spec.externalIPs is ignored when spec.type is \"ExternalName\"".to_string());
    }
    if ty != "ExternalName" && str_field(spec, "externalName").is_some_and(|n| !n.is_empty()) {
        out.push("spec.externalName is ignored when spec.type is not \"ExternalName\"".to_string());
    }
    out
}

/// `GetWarningsForIP`: an IPv4-mapped IPv6 address, or IPv6 not in RFC 5952 form.
fn ip_warning(field: &str, value: &str) -> Option<String> {
    let IpAddr::V6(v6) = value.parse::<IpAddr>().ok()? else {
        return None;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(format!(
            "{field}: non-standard IP address \"{value}\" will be considered invalid in a \
             future Kubernetes release: use \"{v4}\""
        ));
    }
    let canonical = v6.to_string();
    (canonical != value).then(|| {
        format!("{field}: IPv6 address \"{value}\" should be in RFC 5952 canonical format (\"{canonical}\")")
    })
}

/// `GetWarningsForCIDR`: bits set after the prefix (is the network or the one address meant?),
/// or IPv6 not in RFC 5952 form.
fn cidr_warnings(field: &str, value: &str) -> Vec<String> {
    let Ok(net) = value.parse::<IpNet>() else {
        return Vec::new();
    };
    let network = net.trunc();
    if net.addr() != network.addr() {
        let single = format!("{}/{}", net.addr(), net.max_prefix_len());
        return vec![format!(
            "{field}: CIDR value \"{value}\" is ambiguous in this context (should be \
             \"{network}\" or \"{single}\"?)"
        )];
    }
    match net {
        IpNet::V6(v6) if v6.to_string() != value => vec![format!(
            "{field}: IPv6 CIDR value \"{value}\" should be in RFC 5952 canonical format (\"{v6}\")"
        )],
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn warnings_name_what_is_ignored_ambiguous_or_deprecated() {
        let cases = [
            (
                json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
                vec![],
            ),
            (
                json!({"spec": {"type": "LoadBalancer",
                    "loadBalancerSourceRanges": ["10.0.0.1/8", "192.168.0.0/16", "2001:DB8::/32"]}}),
                vec![
                    "spec.loadBalancerSourceRanges[0]: CIDR value \"10.0.0.1/8\" is ambiguous in \
                     this context (should be \"10.0.0.0/8\" or \"10.0.0.1/32\"?)",
                    "spec.loadBalancerSourceRanges[2]: IPv6 CIDR value \"2001:DB8::/32\" should \
                     be in RFC 5952 canonical format (\"2001:db8::/32\")",
                ],
            ),
            (
                json!({"spec": {"type": "ClusterIP", "clusterIP": "None", "loadBalancerIP": "1.2.3.4",
                    "externalIPs": ["::ffff:192.0.2.1"], "sessionAffinity": "ClientIP"}}),
                vec![
                    "spec.loadBalancerIP is ignored for headless services",
                    "spec.externalIPs is ignored for headless services",
                    "spec.SessionAffinity is ignored for headless services",
                    "spec.externalIPs[0]: non-standard IP address \"::ffff:192.0.2.1\" will be \
                     considered invalid in a future Kubernetes release: use \"192.0.2.1\"",
                ],
            ),
            (
                json!({"metadata": {"annotations": {"service.kubernetes.io/topology-aware-hints": "auto"}},
                    "spec": {"type": "ClusterIP", "externalName": "db.example.com"}}),
                vec![
                    "annotation service.kubernetes.io/topology-aware-hints is deprecated, please \
                     use service.kubernetes.io/topology-mode instead",
                    "spec.externalName is ignored when spec.type is not \"ExternalName\"",
                ],
            ),
            (
                json!({"spec": {"type": "ExternalName", "externalName": "db.example.com",
                    "externalIPs": ["192.0.2.1"]}}),
                vec!["spec.externalIPs is ignored when spec.type is \"ExternalName\""],
            ),
        ];
        for (service, expected) in cases {
            assert_eq!(warnings(&service), expected, "{service}");
        }
    }
}

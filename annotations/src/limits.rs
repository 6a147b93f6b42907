//! What a cloud's node-port load balancers cannot carry, judged from the Service's ports alone.
//!
//! One pure function, [`port_limits`], holds these rules: [`crate::parse`] calls it, so `kube-lb
//! lint` and the controller refuse such a Service before any cloud call, and the providers that
//! build listeners from the ports (`providers/baidu`, `providers/tencent`) call it on the spec
//! they are given, so a spec that did not come through `parse` is refused in the same words.

use std::collections::HashMap;

use crate::diagnostics::{ErrorKind, Location, ParseError};
use crate::spec::{Cloud, PortSpec, Protocol, SourceRangeOrigin, SourceRanges};

/// Why a Baidu BLB cannot carry an SCTP port.
const BAIDU_SCTP: &str = "BLB listeners are TCP or UDP, not SCTP";
/// Why a Baidu BLB needs a node port on every port.
const BAIDU_NODE_PORT: &str = "a BLB forwards to node ports and this port has none; set allocateLoadBalancerNodePorts to true";
/// Why a Baidu BLB cannot carry TCP and UDP on one port.
const BAIDU_SAME_PORT: &str =
    "listed twice (TCP and UDP on one port): a BLB has one listener per port";
/// Why a Tencent CLB cannot carry an SCTP port.
const TENCENT_SCTP: &str = "protocol SCTP is not supported by Tencent CLB (TCP or UDP)";
/// Why a Tencent CLB needs a node port on every port.
const TENCENT_NODE_PORT: &str =
    "no nodePort; the Tencent provider binds NodePorts (set allocateLoadBalancerNodePorts: true)";

/// Whether `ranges` restrict who may connect: some CIDR given and none of them `/0` (a `/0`
/// lets everyone in, so the upstream providers and kube-lb build no filter for it).
pub fn source_ranges_restrict(ranges: &SourceRanges) -> bool {
    !ranges.allows_all() && ranges.cidrs.iter().all(|c| c.prefix_len() != 0)
}

/// Why `loadBalancerSourceRanges` cannot be enforced on a user's own load balancer (a Tencent
/// CLB named by `tke-existed-lbid`, a Baidu BLB named by `cce-load-balancer-exist-id`): its
/// security groups are its owner's and cover every listener on it. `lint`, the controller's
/// parse and the provider's ensure give these words.
pub fn source_ranges_on_existing(cloud: Cloud, id: &str) -> Option<String> {
    let (kind, annotation, short) = match cloud {
        Cloud::Tencent => (
            "CLB",
            crate::keys::tencent::EXISTED_LBID,
            "tke-existed-lbid",
        ),
        Cloud::Baidu => ("BLB", crate::keys::baidu::EXIST_ID, "exist-id"),
        Cloud::Local | Cloud::Aws | Cloud::Gcp | Cloud::Azure | Cloud::Openstack => return None,
    };
    Some(format!(
        "loadBalancerSourceRanges cannot be enforced on the existing {kind} {id} ({annotation}): \
         its security groups are its owner's and apply to every listener on it; bind a security \
         group to that {kind} yourself and remove loadBalancerSourceRanges, or drop {short} so \
         kube-lb creates a {kind} it can restrict"
    ))
}

/// The error [`crate::parse`] reports for [`source_ranges_on_existing`], at the ranges' origin.
pub(crate) fn source_ranges_on_existing_error(
    cloud: Cloud,
    ranges: &SourceRanges,
    id: &str,
) -> Option<ParseError> {
    if !source_ranges_restrict(ranges) {
        return None;
    }
    let message = source_ranges_on_existing(cloud, id)?;
    let location = match ranges.origin {
        SourceRangeOrigin::Annotation => Location::annotation(crate::keys::common::SOURCE_RANGES),
        _ => Location::field("spec.loadBalancerSourceRanges"),
    };
    let value = ranges
        .cidrs
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    Some(ParseError {
        location,
        value: Some(value),
        kind: ErrorKind::Unsupported,
        detail: message,
    })
}

/// The ports of a Service that `cloud`'s load balancer cannot carry, each as the error
/// [`crate::parse`] reports (field path, value, why); empty when every port can be carried, and
/// always empty for clouds without such limits here (SCTP and mixed protocols on AWS, GCP and
/// Azure are refused by their own parsers).
///
/// `node_ports_coming` says whether a port without a `nodePort` may still get one: true before
/// the API server admitted the Service and while `spec.allocateLoadBalancerNodePorts` is not
/// false (the API server allocates them then); false when the ports are final, as in a
/// provider, where a missing node port is refused whatever the reason.
pub fn port_limits(cloud: Cloud, ports: &[PortSpec], node_ports_coming: bool) -> Vec<ParseError> {
    let (sctp, node_port) = match cloud {
        Cloud::Baidu => (BAIDU_SCTP, BAIDU_NODE_PORT),
        Cloud::Tencent => (TENCENT_SCTP, TENCENT_NODE_PORT),
        Cloud::Local | Cloud::Aws | Cloud::Gcp | Cloud::Azure | Cloud::Openstack => {
            return Vec::new();
        }
    };
    let mut problems = Vec::new();
    // The index of the first entry of each port number, for a BLB's one listener per port.
    let mut first_of_port = HashMap::new();
    for (i, port) in ports.iter().enumerate() {
        let at = |field: &str| Location::field(format!("spec.ports[{i}].{field}"));
        if port.protocol == Protocol::Sctp {
            problems.push(problem(at("protocol"), Some("SCTP"), sctp));
        }
        if port.node_port.is_none() && !node_ports_coming {
            problems.push(ParseError {
                location: at("nodePort"),
                value: None,
                kind: ErrorKind::Missing,
                detail: node_port.to_owned(),
            });
        }
        if cloud == Cloud::Baidu && first_of_port.insert(port.port, i).is_some() {
            problems.push(problem(
                at("port"),
                Some(&port.port.to_string()),
                BAIDU_SAME_PORT,
            ));
        }
    }
    problems
}

fn problem(location: Location, value: Option<&str>, detail: &str) -> ParseError {
    ParseError {
        location,
        value: value.map(str::to_owned),
        kind: ErrorKind::Unsupported,
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::TargetPort;

    fn port(number: u16, protocol: Protocol, node_port: Option<u16>) -> PortSpec {
        PortSpec {
            name: None,
            protocol,
            port: number,
            node_port,
            target_port: TargetPort::Number(number),
        }
    }

    fn rendered(cloud: Cloud, ports: &[PortSpec], coming: bool) -> Vec<String> {
        port_limits(cloud, ports, coming)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn baidu_and_tencent_refuse_sctp_and_missing_node_ports_baidu_also_one_port_twice() {
        let dns = [
            port(53, Protocol::Udp, Some(30053)),
            port(53, Protocol::Tcp, Some(30054)),
        ];
        assert_eq!(
            rendered(Cloud::Baidu, &dns, false),
            [format!("spec.ports[1].port = \"53\": {BAIDU_SAME_PORT}")]
        );
        assert!(
            rendered(Cloud::Tencent, &dns, false).is_empty(),
            "a CLB has one listener per port and protocol"
        );
        let sctp = [port(9, Protocol::Sctp, Some(30009))];
        assert_eq!(
            rendered(Cloud::Baidu, &sctp, false),
            [format!("spec.ports[0].protocol = \"SCTP\": {BAIDU_SCTP}")]
        );
        assert_eq!(
            rendered(Cloud::Tencent, &sctp, false),
            [format!("spec.ports[0].protocol = \"SCTP\": {TENCENT_SCTP}")]
        );
        let bare = [port(80, Protocol::Tcp, None)];
        assert_eq!(
            rendered(Cloud::Tencent, &bare, false),
            [format!("spec.ports[0].nodePort: {TENCENT_NODE_PORT}")]
        );
        assert_eq!(
            rendered(Cloud::Baidu, &bare, false),
            [format!("spec.ports[0].nodePort: {BAIDU_NODE_PORT}")]
        );
        assert!(
            rendered(Cloud::Baidu, &bare, true).is_empty(),
            "the API server will allocate it"
        );
    }

    #[test]
    fn other_clouds_have_no_limits_here() {
        let ports = [port(9, Protocol::Sctp, None), port(9, Protocol::Udp, None)];
        for cloud in [
            Cloud::Local,
            Cloud::Aws,
            Cloud::Gcp,
            Cloud::Azure,
            Cloud::Openstack,
        ] {
            assert!(port_limits(cloud, &ports, false).is_empty(), "{cloud}");
        }
    }
}

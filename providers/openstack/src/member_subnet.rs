//! The member subnet when nothing configures it (no `member-subnet-id` or `subnet-id` in
//! `cloud.conf`, its class or the Service's annotations): as cloud-provider-openstack does, the
//! subnet of the Neutron port whose fixed IP is a backend node's address. Members are created
//! on it, and `manage-security-groups` opens the node ports to its CIDR on the nodes' ports
//! there.
//!
//! Upstream asks the first node of its (unordered) list only. Here every backend node votes,
//! so the answer does not depend on the order nodes are listed in:
//!
//! - a node votes for the subnet of each port carrying its address; when its `providerID`
//!   names its server (`openstack:///<id>`), the ports of that server win over any other port
//!   with the same address (private address ranges overlap between networks);
//! - the subnet with the most nodes wins: the members reach the load balancer there directly,
//!   and the security group attaches to the most nodes;
//! - a tie goes to the lowest subnet id, which stays the same from one resync to the next
//!   whatever the nodes are called or the order they come in.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_provider_core::BackendNode;

use crate::model::Port;

/// A backend node's member address, and its server when its `providerID` names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    /// The node's name.
    pub node: String,
    /// The address its members use.
    pub address: String,
    /// The Nova server id from `openstack:///<id>` (or `openstack://<region>/<id>`).
    pub server_id: Option<String>,
}

impl NodeAddress {
    /// The member address of `node` (as [`crate::plan::member_address`] picks it), if any.
    pub fn of(node: &BackendNode) -> Option<Self> {
        Some(NodeAddress {
            node: node.name.clone(),
            address: crate::plan::member_address(node)?.to_string(),
            server_id: node.provider_id.as_deref().and_then(server_id),
        })
    }
}

/// The server id an OpenStack `providerID` names (pure): what follows the last `/` of
/// `openstack://[<region>]/<id>`; `None` for other clouds' ids or an empty id.
pub fn server_id(provider_id: &str) -> Option<String> {
    let rest = provider_id.strip_prefix("openstack://")?;
    let id = rest.rsplit('/').next()?;
    (!id.is_empty()).then(|| id.to_string())
}

/// The subnet found, and which nodes are on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The member subnet.
    pub subnet_id: String,
    /// The nodes with a port on it.
    pub on_it: Vec<String>,
    /// The nodes whose port is on another subnet (members there are reached through the
    /// load balancer's routing, and the security group is not attached to them).
    pub elsewhere: Vec<String>,
    /// The nodes whose address is no port's of the project.
    pub without_port: Vec<String>,
}

/// The member subnet the backend `nodes` point to through the project's `ports` (pure; see
/// the module's rules); `None` when no node's address is a fixed IP of any port.
pub fn discover(nodes: &[NodeAddress], ports: &[Port]) -> Option<Discovered> {
    // subnet -> the nodes voting for it
    let mut votes: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut without_port = Vec::new();
    for node in nodes {
        let carrying: Vec<(&Port, &str)> = ports
            .iter()
            .flat_map(|port| {
                port.fixed_ips
                    .iter()
                    .filter(|ip| ip.ip_address == node.address)
                    .map(move |ip| (port, ip.subnet_id.as_str()))
            })
            .collect();
        let own_server = |port: &Port| node.server_id.as_deref() == Some(port.device_id.as_str());
        let subnets: BTreeSet<&str> = if carrying.iter().any(|(port, _)| own_server(port)) {
            carrying
                .iter()
                .filter(|(port, _)| own_server(port))
                .map(|(_, subnet)| *subnet)
                .collect()
        } else {
            carrying.iter().map(|(_, subnet)| *subnet).collect()
        };
        if subnets.is_empty() {
            without_port.push(node.node.clone());
        }
        for subnet in subnets {
            votes.entry(subnet).or_default().insert(node.node.as_str());
        }
    }
    // Most nodes first; among equals the lowest id (the map iterates ids in order, and
    // `max_by_key` keeps the last maximum, hence the reversed walk).
    let (subnet_id, on_it) = votes.iter().rev().max_by_key(|(_, voters)| voters.len())?;
    let elsewhere = nodes
        .iter()
        .map(|n| n.node.as_str())
        .filter(|n| !on_it.contains(n) && !without_port.iter().any(|w| w == n))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(str::to_string)
        .collect();
    without_port.sort();
    Some(Discovered {
        subnet_id: subnet_id.to_string(),
        on_it: on_it.iter().map(|n| n.to_string()).collect(),
        elsewhere,
        without_port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FixedIp;

    fn port(device: &str, subnet: &str, ip: &str) -> Port {
        Port {
            id: format!("port-{device}-{ip}"),
            network_id: format!("net-{subnet}"),
            device_id: device.into(),
            fixed_ips: vec![FixedIp {
                subnet_id: subnet.into(),
                ip_address: ip.into(),
            }],
            security_groups: Vec::new(),
            port_security_enabled: true,
        }
    }

    fn node(name: &str, address: &str, server: Option<&str>) -> NodeAddress {
        NodeAddress {
            node: name.into(),
            address: address.into(),
            server_id: server.map(str::to_string),
        }
    }

    #[test]
    fn server_ids_come_from_openstack_provider_ids_only() {
        let cases = [
            ("openstack:///0b9d-11", Some("0b9d-11")),
            ("openstack://RegionOne/0b9d-11", Some("0b9d-11")),
            ("openstack:///", None),
            ("aws:///us-east-1a/i-0123", None),
            ("", None),
        ];
        for (provider_id, id) in cases {
            assert_eq!(server_id(provider_id).as_deref(), id, "{provider_id}");
        }
    }

    /// (case, nodes, ports, subnet picked, on it, elsewhere, without a port)
    type Case = (
        &'static str,
        Vec<NodeAddress>,
        Vec<Port>,
        Option<&'static str>,
        Vec<&'static str>,
        Vec<&'static str>,
        Vec<&'static str>,
    );

    #[test]
    fn the_subnet_of_most_nodes_wins_and_ties_go_to_the_lowest_id() {
        let cases: Vec<Case> = vec![
            (
                "all nodes on one subnet",
                vec![node("a", "10.0.0.1", None), node("b", "10.0.0.2", None)],
                vec![
                    port("s-a", "sub-1", "10.0.0.1"),
                    port("s-b", "sub-1", "10.0.0.2"),
                ],
                Some("sub-1"),
                vec!["a", "b"],
                vec![],
                vec![],
            ),
            (
                "nodes disagree: the majority's subnet, whatever the order",
                vec![
                    node("c", "10.1.0.3", None),
                    node("a", "10.0.0.1", None),
                    node("b", "10.0.0.2", None),
                ],
                vec![
                    port("s-c", "sub-0", "10.1.0.3"),
                    port("s-a", "sub-9", "10.0.0.1"),
                    port("s-b", "sub-9", "10.0.0.2"),
                ],
                Some("sub-9"),
                vec!["a", "b"],
                vec!["c"],
                vec![],
            ),
            (
                "a tie: the lowest subnet id, not the first node",
                vec![node("z", "10.1.0.3", None), node("a", "10.0.0.1", None)],
                vec![
                    port("s-z", "sub-b", "10.1.0.3"),
                    port("s-a", "sub-a", "10.0.0.1"),
                ],
                Some("sub-a"),
                vec!["a"],
                vec!["z"],
                vec![],
            ),
            (
                "an address on two networks: the node's own server's port wins",
                vec![
                    node("a", "10.0.0.1", Some("s-a")),
                    node("b", "10.0.0.2", Some("s-b")),
                ],
                vec![
                    port("other-vm", "sub-a", "10.0.0.1"),
                    port("other-vm", "sub-a", "10.0.0.2"),
                    port("s-a", "sub-z", "10.0.0.1"),
                    port("s-b", "sub-z", "10.0.0.2"),
                ],
                Some("sub-z"),
                vec!["a", "b"],
                vec![],
                vec![],
            ),
            (
                "a provider id naming no port's server: the address alone decides",
                vec![node("a", "10.0.0.1", Some("gone"))],
                vec![port("s-a", "sub-1", "10.0.0.1")],
                Some("sub-1"),
                vec!["a"],
                vec![],
                vec![],
            ),
            (
                "some nodes have no port (another project, bare metal)",
                vec![node("a", "10.0.0.1", None), node("x", "192.0.2.7", None)],
                vec![port("s-a", "sub-1", "10.0.0.1")],
                Some("sub-1"),
                vec!["a"],
                vec![],
                vec!["x"],
            ),
            (
                "no node's address is a port's: nothing",
                vec![node("x", "192.0.2.7", None)],
                vec![port("s-a", "sub-1", "10.0.0.1")],
                None,
                vec![],
                vec![],
                vec![],
            ),
            (
                "no nodes: nothing",
                vec![],
                vec![],
                None,
                vec![],
                vec![],
                vec![],
            ),
        ];
        for (case, nodes, ports, subnet, on_it, elsewhere, without_port) in cases {
            let found = discover(&nodes, &ports);
            assert_eq!(
                found.as_ref().map(|f| f.subnet_id.as_str()),
                subnet,
                "{case}"
            );
            if let Some(found) = found {
                assert_eq!(found.on_it, on_it, "{case}");
                assert_eq!(found.elsewhere, elsewhere, "{case}");
                assert_eq!(found.without_port, without_port, "{case}");
            }
            let mut reversed = nodes.clone();
            reversed.reverse();
            assert_eq!(
                discover(&reversed, &ports).map(|f| f.subnet_id),
                subnet.map(str::to_string),
                "{case}: the node order does not matter"
            );
        }
    }
}

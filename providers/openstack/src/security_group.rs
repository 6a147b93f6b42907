//! Pure parts of `[LoadBalancer] manage-security-groups` (cloud-provider-openstack's option of
//! the same name): one Neutron security group per Service, named as upstream names it, whose
//! ingress rules open the Service's node ports (and its health-check node port) to the member
//! subnet, attached to the member-subnet port of every backend node.
//!
//! The group and the rules kube-lb made carry this cluster's and Service's marks, so only they
//! are ever changed: rules someone else added to the group, and the other groups of a port,
//! are kept as they are.

use std::collections::BTreeSet;

use kube_lb_annotations::{LoadBalancerSpec, Protocol, ServiceKey, TrafficPolicy};
use kube_lb_provider_core::{ChangeAction, PlannedChange};
use serde_json::{Value, json};

use crate::model::{Port, SecurityGroup, SecurityGroupRule, Subnet};
use crate::plan::{Desired, Ownership, UID_TAG_PREFIX, same_uid};

/// Neutron names are at most 255 characters.
const MAX_NAME: usize = 255;

/// How upstream's security-group descriptions begin.
pub const SECURITY_GROUP_PHRASE: &str = "Security Group for ";

/// `lb-sg-<UID>-<namespace>-<name>`, as upstream names it.
pub fn security_group_name(service: &ServiceKey) -> String {
    format!(
        "lb-sg-{}-{}-{}",
        service.uid, service.namespace, service.name
    )
    .chars()
    .take(MAX_NAME)
    .collect()
}

/// Upstream's description, which also marks the group as this cluster's Service's.
pub fn security_group_description(cluster: &str, service: &ServiceKey) -> String {
    format!("{SECURITY_GROUP_PHRASE}{service} Service LoadBalancer in cluster {cluster}")
}

/// The description of the rules kube-lb adds: the rules without it are someone else's.
pub fn rule_description(service: &ServiceKey) -> String {
    format!("kube-lb: node port of Kubernetes Service {service}")
}

/// The Service a security-group description written for `cluster` names (pure).
pub fn recorded_owner(description: &str, cluster: &str) -> Option<ServiceKey> {
    let (namespace, name) = description
        .strip_prefix(SECURITY_GROUP_PHRASE)?
        .strip_suffix(&format!(" Service LoadBalancer in cluster {cluster}"))?
        .split_once('/')?;
    Some(ServiceKey {
        namespace: namespace.into(),
        name: name.into(),
        uid: String::new(),
    })
}

/// Whether a security group under the Service's group name is ours to change (pure): made
/// by kube-lb or upstream for `service` in `cluster` when it carries that description and no
/// other Service's UID tag (upstream tags none; the name already holds the UID). Anything
/// else under the name (made by hand, by another cluster, by a Service of the same UID's
/// leftover) is someone else's, and is neither changed nor duplicated.
pub fn ownership(group: &SecurityGroup, cluster: &str, service: &ServiceKey) -> Ownership {
    if group.description != security_group_description(cluster, service) {
        return Ownership::Foreign(format!(
            "the owner its description {:?} names (not this cluster's Service)",
            group.description
        ));
    }
    match group
        .tags
        .iter()
        .filter_map(|t| t.strip_prefix(UID_TAG_PREFIX))
        .find(|uid| !same_uid(uid, &service.uid))
    {
        Some(uid) => Ownership::Foreign(format!(
            "Service UID {uid}, not {} (its tag {UID_TAG_PREFIX}{uid})",
            service.uid
        )),
        None => Ownership::Ours,
    }
}

/// True when `group` is the security group kube-lb (or upstream) made for `service` in
/// `cluster`: its name and description, and no other Service's UID tag.
pub fn is_ours(group: &SecurityGroup, cluster: &str, service: &ServiceKey) -> bool {
    group.name == security_group_name(service)
        && ownership(group, cluster, service) == Ownership::Ours
}

/// One ingress rule: a node port from the member subnet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodePortRule {
    /// `tcp` or `udp`.
    pub protocol: &'static str,
    /// The node port.
    pub port: u16,
    /// `IPv4` or `IPv6`, after the member subnet.
    pub ethertype: &'static str,
    /// The member subnet's CIDR.
    pub remote_ip_prefix: String,
}

impl NodePortRule {
    /// True when `rule` lets in what this one does (whoever made it).
    pub fn matches(&self, rule: &SecurityGroupRule) -> bool {
        rule.direction == "ingress"
            && rule.ethertype == self.ethertype
            && rule.protocol.as_deref() == Some(self.protocol)
            && rule.port_range_min == Some(self.port)
            && rule.port_range_max == Some(self.port)
            && rule.remote_ip_prefix.as_deref() == Some(self.remote_ip_prefix.as_str())
            && rule.remote_group_id.is_none()
    }

    /// The create body for the group `group_id`.
    pub fn body(&self, group_id: &str, description: &str) -> Value {
        json!({"security_group_id": group_id, "direction": "ingress",
            "ethertype": self.ethertype, "protocol": self.protocol,
            "port_range_min": self.port, "port_range_max": self.port,
            "remote_ip_prefix": self.remote_ip_prefix, "description": description})
    }

    /// How plans name it.
    pub fn label(&self) -> String {
        format!(
            "{}/{} from {}",
            self.protocol, self.port, self.remote_ip_prefix
        )
    }
}

/// The label of an observed rule, as [`NodePortRule::label`] would give it.
fn observed_label(rule: &SecurityGroupRule) -> String {
    format!(
        "{}/{} from {}",
        rule.protocol.as_deref().unwrap_or("any"),
        rule.port_range_min
            .map(|p| p.to_string())
            .unwrap_or_default(),
        rule.remote_ip_prefix.as_deref().unwrap_or("anywhere")
    )
}

/// What the Service's security group should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredSecurityGroup {
    /// Name.
    pub name: String,
    /// Description (ownership phrase).
    pub description: String,
    /// The description of the rules kube-lb adds.
    pub rule_description: String,
    /// The member subnet: the ports attached are the nodes' ports on it.
    pub subnet_id: String,
    /// The ingress rules.
    pub rules: BTreeSet<NodePortRule>,
    /// The member addresses (backend nodes) whose ports get the group.
    pub addresses: BTreeSet<String>,
}

impl DesiredSecurityGroup {
    /// The group's create body (rules and attachments follow in their own calls). No tags:
    /// Neutron before the `tag-creation` extension refuses them in a create, and the name
    /// already carries the Service UID.
    pub fn body(&self) -> Value {
        json!({"name": self.name, "description": self.description})
    }
}

/// The security group `spec` needs (pure): a rule per node port (and for the health-check
/// node port with `externalTrafficPolicy: Local`), by each port's protocol, from the member
/// subnet's CIDR; attached to the ports of the members `desired` holds.
pub fn desired_security_group(
    spec: &LoadBalancerSpec,
    desired: &Desired,
    cluster: &str,
    member_subnet: &Subnet,
) -> DesiredSecurityGroup {
    let ethertype = if member_subnet.ip_version == 6 || member_subnet.cidr.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    let from_subnet = (member_subnet.cidr.clone(), ethertype);
    let sources = if desired.provider.as_deref() == Some("ovn") {
        client_sources(spec, ethertype)
    } else {
        vec![from_subnet.clone()]
    };
    let rule = |protocol, port, (prefix, ethertype): &(String, &'static str)| NodePortRule {
        protocol,
        port,
        ethertype,
        remote_ip_prefix: prefix.clone(),
    };
    let mut rules: BTreeSet<NodePortRule> = spec
        .ports
        .iter()
        .filter_map(|port| {
            let protocol = match port.protocol {
                Protocol::Tcp => "tcp",
                Protocol::Udp => "udp",
                Protocol::Sctp => "sctp",
            };
            port.node_port.map(|node_port| (protocol, node_port))
        })
        .flat_map(|(protocol, node_port)| {
            sources
                .iter()
                .map(move |source| rule(protocol, node_port, source))
        })
        .collect();
    if let TrafficPolicy::Local {
        health_check_node_port: Some(port),
    } = spec.traffic_policy
    {
        rules.insert(rule("tcp", port, &from_subnet));
    }
    DesiredSecurityGroup {
        name: security_group_name(&spec.service),
        description: security_group_description(cluster, &spec.service),
        rule_description: rule_description(&spec.service),
        subnet_id: member_subnet.id.clone(),
        rules,
        addresses: desired
            .listeners
            .iter()
            .flat_map(|l| l.members.iter().map(|m| m.address.clone()))
            .collect(),
    }
}

/// Where clients reach the node ports from behind Octavia's OVN provider, which keeps their
/// address (so the nodes see the clients, not the member subnet): the Service's source ranges,
/// each with its family, or everyone of the member subnet's family without
/// `loadBalancerSourceRanges`, as upstream opens them. Health checks still come from the member
/// subnet.
fn client_sources(spec: &LoadBalancerSpec, ethertype: &'static str) -> Vec<(String, &'static str)> {
    if spec.source_ranges.allows_all() {
        let everyone = if ethertype == "IPv6" {
            "::/0"
        } else {
            "0.0.0.0/0"
        };
        return vec![(everyone.to_string(), ethertype)];
    }
    spec.source_ranges
        .cidrs
        .iter()
        .map(|cidr| {
            let family = if cidr.addr().is_ipv6() {
                "IPv6"
            } else {
                "IPv4"
            };
            (cidr.to_string(), family)
        })
        .collect()
}

/// One change to a Service's security group, in the order applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityGroupStep {
    /// Add a missing rule.
    CreateRule(NodePortRule),
    /// Remove a rule kube-lb made that no port needs any more.
    DeleteRule {
        /// Rule id.
        id: String,
        /// What it let in, for plans.
        label: String,
    },
    /// Rewrite a port's group list (`PUT ports/{id}`): our group added or removed, the
    /// others kept.
    SetPortGroups {
        /// Port id.
        port_id: String,
        /// The port's address on the member subnet (or its first), for plans.
        address: String,
        /// The list before.
        before: Vec<String>,
        /// The list after.
        after: Vec<String>,
    },
    /// Delete a group of ours (after its ports let go of it).
    DeleteGroup {
        /// Group id.
        id: String,
        /// Its name.
        name: String,
    },
}

impl SecurityGroupStep {
    /// The step as `kube-lb plan` prints it.
    pub fn planned(&self) -> PlannedChange {
        match self {
            SecurityGroupStep::CreateRule(rule) => PlannedChange::new(
                ChangeAction::Create,
                "SecurityGroupRule",
                rule.label(),
                "POST security-group-rules",
            ),
            SecurityGroupStep::DeleteRule { label, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "SecurityGroupRule",
                label,
                "DELETE security-group-rules",
            ),
            SecurityGroupStep::SetPortGroups {
                port_id,
                address,
                before,
                after,
            } => PlannedChange::new(
                ChangeAction::Modify,
                "Port",
                format!("{port_id} ({address})"),
                "PUT ports",
            )
            .field(
                "security_groups",
                Some(before.join(",")),
                Some(after.join(",")),
            ),
            SecurityGroupStep::DeleteGroup { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "SecurityGroup",
                name,
                "DELETE security-groups",
            ),
        }
    }
}

/// The create of the group itself, as `kube-lb plan` prints it.
pub fn planned_create(desired: &DesiredSecurityGroup) -> PlannedChange {
    PlannedChange::new(
        ChangeAction::Create,
        "SecurityGroup",
        &desired.name,
        "POST security-groups",
    )
}

/// The port's address on `subnet_id` that is one of `addresses`, if any.
fn member_address<'a>(
    port: &'a Port,
    subnet_id: &str,
    addresses: &BTreeSet<String>,
) -> Option<&'a str> {
    port.fixed_ips
        .iter()
        .find(|ip| ip.subnet_id == subnet_id && addresses.contains(&ip.ip_address))
        .map(|ip| ip.ip_address.as_str())
}

/// The rewrite of `port`'s group list that adds `keep` (when `Some`) and drops every id of
/// `drop`, or `None` when the list already is that (pure). `address` names the port in plans.
fn rewrite(
    port: &Port,
    address: Option<&str>,
    keep: Option<&str>,
    drop: &[&str],
) -> Option<SecurityGroupStep> {
    let mut after: Vec<String> = port
        .security_groups
        .iter()
        .filter(|g| !drop.contains(&g.as_str()))
        .cloned()
        .collect();
    if let Some(keep) = keep
        && !after.iter().any(|g| g == keep)
    {
        after.push(keep.to_string());
    }
    let address = address
        .or_else(|| port.fixed_ips.first().map(|ip| ip.ip_address.as_str()))
        .unwrap_or_default();
    (after != port.security_groups).then(|| SecurityGroupStep::SetPortGroups {
        port_id: port.id.clone(),
        address: address.to_string(),
        before: port.security_groups.clone(),
        after,
    })
}

/// The member addresses with no port on the member subnet among `ports` (pure): nodes the
/// group cannot be attached to (their port is on another network, or the address is not a
/// Neutron port's), which the caller reports.
pub fn addresses_without_port<'a>(
    desired: &'a DesiredSecurityGroup,
    ports: &[Port],
) -> Vec<&'a str> {
    desired
        .addresses
        .iter()
        .filter(|address| {
            !ports.iter().any(|port| {
                port.fixed_ips
                    .iter()
                    .any(|ip| ip.subnet_id == desired.subnet_id && &ip.ip_address == *address)
            })
        })
        .map(String::as_str)
        .collect()
}

/// Kubernetes' default node-port range (`--service-node-port-range`).
const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// True when `rule` has the shape of the node-port rules upstream (cloud-provider-openstack)
/// puts in a Service's group: ingress to one TCP, UDP or SCTP node port from one of the
/// sources the Service's rules use (`sources`: the member subnet, or with OVN its source
/// ranges), with no description. Upstream removes every rule of the group it does not want;
/// kube-lb removes only its own and these, so a group adopted from upstream does not keep a
/// node port open after the Service stops using it, while a rule someone described, or made
/// for another port or source, stays.
fn upstream_shaped(rule: &SecurityGroupRule, sources: &BTreeSet<&str>) -> bool {
    rule.direction == "ingress"
        && rule.description.is_empty()
        && matches!(rule.protocol.as_deref(), Some("tcp" | "udp" | "sctp"))
        && rule
            .port_range_min
            .is_some_and(|port| NODE_PORTS.contains(&port))
        && rule.port_range_min == rule.port_range_max
        && rule
            .remote_ip_prefix
            .as_deref()
            .is_some_and(|prefix| sources.contains(prefix))
        && rule.remote_group_id.is_none()
}

/// The steps that make `group` (ours, observed with its rules) and the observed `ports` what
/// `desired` says (pure): missing rules added, rules of ours (and upstream-shaped ones, see
/// [`upstream_shaped`]) no longer wanted removed (another rule that lets in the same is as
/// good, and is never removed); the group put on the member-subnet port of each member and
/// taken off every other port; `duplicates`
/// (further groups of ours under the same name, from a create whose answer was lost) taken
/// off every port and deleted.
pub fn plan(
    group: &SecurityGroup,
    duplicates: &[SecurityGroup],
    ports: &[Port],
    desired: &DesiredSecurityGroup,
) -> Vec<SecurityGroupStep> {
    let sources: BTreeSet<&str> = desired
        .rules
        .iter()
        .map(|rule| rule.remote_ip_prefix.as_str())
        .collect();
    let mut steps: Vec<SecurityGroupStep> = desired
        .rules
        .iter()
        .filter(|want| !group.security_group_rules.iter().any(|r| want.matches(r)))
        .cloned()
        .map(SecurityGroupStep::CreateRule)
        .collect();
    steps.extend(
        group
            .security_group_rules
            .iter()
            .filter(|r| {
                (r.description == desired.rule_description || upstream_shaped(r, &sources))
                    && !desired.rules.iter().any(|want| want.matches(r))
            })
            .map(|r| SecurityGroupStep::DeleteRule {
                id: r.id.clone(),
                label: observed_label(r),
            }),
    );
    let stale: Vec<&str> = duplicates.iter().map(|g| g.id.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut attach = Vec::new();
    let mut detach = Vec::new();
    for port in ports.iter().filter(|p| seen.insert(p.id.as_str())) {
        match member_address(port, &desired.subnet_id, &desired.addresses) {
            // A port without port security takes no groups (Neutron refuses them).
            Some(address) if port.port_security_enabled => {
                attach.extend(rewrite(port, Some(address), Some(&group.id), &stale));
            }
            _ => {
                let mut drop = stale.clone();
                drop.push(&group.id);
                detach.extend(rewrite(port, None, None, &drop));
            }
        }
    }
    steps.extend(attach);
    steps.extend(detach);
    steps.extend(duplicates.iter().map(|g| SecurityGroupStep::DeleteGroup {
        id: g.id.clone(),
        name: g.name.clone(),
    }));
    steps
}

/// The steps that remove `groups` (ours) entirely (pure): each port that carries one lets go
/// of it, keeping its other groups; then the groups are deleted (Neutron refuses to delete a
/// group still in use).
pub fn teardown(groups: &[SecurityGroup], ports: &[Port]) -> Vec<SecurityGroupStep> {
    let ids: Vec<&str> = groups.iter().map(|g| g.id.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut steps: Vec<SecurityGroupStep> = ports
        .iter()
        .filter(|p| seen.insert(p.id.as_str()))
        .filter_map(|port| rewrite(port, None, None, &ids))
        .collect();
    steps.extend(groups.iter().map(|g| SecurityGroupStep::DeleteGroup {
        id: g.id.clone(),
        name: g.name.clone(),
    }));
    steps
}

/// The group list a port should get when `before` → `after` was planned but the port now
/// holds `current`: the groups the plan removed are taken out and the ones it added put in,
/// every other group of `current` kept in its order (another Service's, added meanwhile).
pub fn rebase_port_groups(current: &[String], before: &[String], after: &[String]) -> Vec<String> {
    let removed = |g: &String| before.contains(g) && !after.contains(g);
    let mut groups: Vec<String> = current.iter().filter(|g| !removed(g)).cloned().collect();
    for added in after.iter().filter(|g| !before.contains(g)) {
        if !groups.contains(added) {
            groups.push(added.clone());
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::FixedIp;

    #[test]
    fn a_port_rewrite_keeps_groups_added_since_it_was_planned() {
        let v = |items: &[&str]| items.iter().map(ToString::to_string).collect::<Vec<_>>();
        // (case, current, before, after, wanted)
        let cases = [
            (
                "as planned",
                v(&["a"]),
                v(&["a"]),
                v(&["a", "b"]),
                v(&["a", "b"]),
            ),
            (
                "another Service's group came meanwhile",
                v(&["a", "c"]),
                v(&["a"]),
                v(&["a", "b"]),
                v(&["a", "c", "b"]),
            ),
            (
                "removal keeps the newcomer",
                v(&["a", "b", "c"]),
                v(&["a", "b"]),
                v(&["a"]),
                v(&["a", "c"]),
            ),
            (
                "already there",
                v(&["a", "b"]),
                v(&["a"]),
                v(&["a", "b"]),
                v(&["a", "b"]),
            ),
            (
                "already gone",
                v(&["a"]),
                v(&["a", "b"]),
                v(&["a"]),
                v(&["a"]),
            ),
        ];
        for (case, current, before, after, wanted) in cases {
            assert_eq!(
                rebase_port_groups(&current, &before, &after),
                wanted,
                "{case}"
            );
        }
    }

    const SUBNET: &str = "member-subnet";
    const CIDR: &str = "10.0.0.0/24";

    fn service() -> ServiceKey {
        ServiceKey {
            namespace: "prod".into(),
            name: "web".into(),
            uid: "u-1".into(),
        }
    }

    fn rule(protocol: &'static str, port: u16) -> NodePortRule {
        NodePortRule {
            protocol,
            port,
            ethertype: "IPv4",
            remote_ip_prefix: CIDR.into(),
        }
    }

    fn want(rules: Vec<NodePortRule>, addresses: &[&str]) -> DesiredSecurityGroup {
        DesiredSecurityGroup {
            name: security_group_name(&service()),
            description: security_group_description("c", &service()),
            rule_description: rule_description(&service()),
            subnet_id: SUBNET.into(),
            rules: rules.into_iter().collect(),
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// An observed rule: `ours` carries kube-lb's description.
    fn observed(id: &str, wanted: &NodePortRule, ours: bool) -> SecurityGroupRule {
        SecurityGroupRule {
            id: id.into(),
            direction: "ingress".into(),
            ethertype: wanted.ethertype.into(),
            protocol: Some(wanted.protocol.into()),
            port_range_min: Some(wanted.port),
            port_range_max: Some(wanted.port),
            remote_ip_prefix: Some(wanted.remote_ip_prefix.clone()),
            remote_group_id: None,
            description: if ours {
                rule_description(&service())
            } else {
                String::new()
            },
        }
    }

    fn egress(id: &str) -> SecurityGroupRule {
        SecurityGroupRule {
            id: id.into(),
            direction: "egress".into(),
            ethertype: "IPv4".into(),
            protocol: None,
            port_range_min: None,
            port_range_max: None,
            remote_ip_prefix: None,
            remote_group_id: None,
            description: String::new(),
        }
    }

    fn group(id: &str, rules: Vec<SecurityGroupRule>) -> SecurityGroup {
        SecurityGroup {
            id: id.into(),
            name: security_group_name(&service()),
            description: security_group_description("c", &service()),
            tags: vec![crate::plan::uid_tag(&service())],
            security_group_rules: rules,
            created_at: None,
        }
    }

    fn port(id: &str, subnet: &str, ip: &str, groups: &[&str]) -> Port {
        Port {
            id: id.into(),
            network_id: "net".into(),
            device_id: format!("server-{id}"),
            fixed_ips: vec![FixedIp {
                subnet_id: subnet.into(),
                ip_address: ip.into(),
            }],
            security_groups: groups.iter().map(|g| g.to_string()).collect(),
            port_security_enabled: true,
        }
    }

    fn set(port_id: &str, address: &str, before: &[&str], after: &[&str]) -> SecurityGroupStep {
        let list = |l: &[&str]| l.iter().map(|g| g.to_string()).collect();
        SecurityGroupStep::SetPortGroups {
            port_id: port_id.into(),
            address: address.into(),
            before: list(before),
            after: list(after),
        }
    }

    #[test]
    fn names_descriptions_and_owners_match_upstream() {
        assert_eq!(security_group_name(&service()), "lb-sg-u-1-prod-web");
        assert_eq!(
            security_group_description("kubernetes", &service()),
            "Security Group for prod/web Service LoadBalancer in cluster kubernetes"
        );
        let owner =
            recorded_owner(&security_group_description("c", &service()), "c").expect("ours");
        assert_eq!(
            (owner.namespace.as_str(), owner.name.as_str()),
            ("prod", "web")
        );
        assert_eq!(
            recorded_owner(&security_group_description("other", &service()), "c"),
            None
        );
        let cases = [
            (group("g", vec![]), true),
            (
                SecurityGroup {
                    tags: Vec::new(),
                    ..group("g", vec![])
                },
                true,
            ),
            (
                SecurityGroup {
                    tags: vec!["kube_lb_uid_u-2".into()],
                    ..group("g", vec![])
                },
                false,
            ),
            (
                SecurityGroup {
                    description: "made by hand".into(),
                    ..group("g", vec![])
                },
                false,
            ),
        ];
        for (group, ours) in cases {
            assert_eq!(is_ours(&group, "c", &service()), ours, "{group:?}");
        }
        // A refusal names the owner the marks record.
        let tagged = SecurityGroup {
            tags: vec!["kube_lb_uid_u-2".into()],
            ..group("g", vec![])
        };
        let described = SecurityGroup {
            description: security_group_description("other", &service()),
            ..group("g", vec![])
        };
        for (group, named) in [(tagged, "u-2"), (described, "cluster other")] {
            match ownership(&group, "c", &service()) {
                Ownership::Foreign(owner) => assert!(owner.contains(named), "{owner}"),
                other => panic!("{group:?} is someone else's, not {other:?}"),
            }
        }
    }

    /// (case, group, ports, desired, steps).
    type Case = (
        &'static str,
        SecurityGroup,
        Vec<Port>,
        DesiredSecurityGroup,
        Vec<SecurityGroupStep>,
    );

    #[test]
    fn plans_add_and_remove_only_what_differs() {
        let http = rule("tcp", 30080);
        let dns = rule("udp", 30053);
        let health = rule("tcp", 32000);
        let in_sync_group = || group("sg", vec![egress("e"), observed("r1", &http, true)]);
        let member_ports = || {
            vec![
                port("p1", SUBNET, "10.0.0.1", &["default", "sg"]),
                port("p2", SUBNET, "10.0.0.2", &["sg"]),
            ]
        };
        let cases: Vec<Case> = vec![
            (
                "in sync: nothing",
                in_sync_group(),
                member_ports(),
                want(vec![http.clone()], &["10.0.0.1", "10.0.0.2"]),
                vec![],
            ),
            (
                "node added: its port gets the group, keeping its own",
                in_sync_group(),
                [
                    member_ports(),
                    vec![port("p3", SUBNET, "10.0.0.3", &["default"])],
                ]
                .concat(),
                want(vec![http.clone()], &["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
                vec![set("p3", "10.0.0.3", &["default"], &["default", "sg"])],
            ),
            (
                "node removed: its port lets go of the group only",
                in_sync_group(),
                member_ports(),
                want(vec![http.clone()], &["10.0.0.2"]),
                vec![set("p1", "10.0.0.1", &["default", "sg"], &["default"])],
            ),
            (
                "port added: one more rule",
                in_sync_group(),
                member_ports(),
                want(vec![http.clone(), dns.clone()], &["10.0.0.1", "10.0.0.2"]),
                vec![SecurityGroupStep::CreateRule(dns.clone())],
            ),
            (
                "node port changed: new rule in, ours out",
                in_sync_group(),
                member_ports(),
                want(vec![rule("tcp", 30081)], &["10.0.0.1", "10.0.0.2"]),
                vec![
                    SecurityGroupStep::CreateRule(rule("tcp", 30081)),
                    SecurityGroupStep::DeleteRule {
                        id: "r1".into(),
                        label: "tcp/30080 from 10.0.0.0/24".into(),
                    },
                ],
            ),
            (
                "foreign rules: never removed, and one equal to ours is as good",
                group(
                    "sg",
                    vec![
                        egress("e"),
                        observed("theirs", &rule("tcp", 22), false),
                        observed("occm", &http, false),
                        observed("r2", &health, true),
                    ],
                ),
                member_ports(),
                want(vec![http.clone()], &["10.0.0.1", "10.0.0.2"]),
                vec![SecurityGroupStep::DeleteRule {
                    id: "r2".into(),
                    label: "tcp/32000 from 10.0.0.0/24".into(),
                }],
            ),
            (
                "upstream's rule for a node port no longer used goes; described or other ones stay",
                group(
                    "sg",
                    vec![
                        egress("e"),
                        observed("occm-old", &rule("tcp", 30099), false),
                        SecurityGroupRule {
                            description: "opened by hand".into(),
                            ..observed("described", &rule("tcp", 30098), false)
                        },
                        observed(
                            "elsewhere",
                            &NodePortRule {
                                remote_ip_prefix: "192.0.2.0/24".into(),
                                ..rule("tcp", 30097)
                            },
                            false,
                        ),
                        observed("theirs", &rule("tcp", 22), false),
                        observed("occm", &http, false),
                    ],
                ),
                member_ports(),
                want(vec![http.clone()], &["10.0.0.1", "10.0.0.2"]),
                vec![SecurityGroupStep::DeleteRule {
                    id: "occm-old".into(),
                    label: "tcp/30099 from 10.0.0.0/24".into(),
                }],
            ),
            (
                "ports elsewhere, or without port security, are left without it",
                in_sync_group(),
                vec![
                    port("p1", SUBNET, "10.0.0.1", &["sg"]),
                    port("p2", SUBNET, "10.0.0.2", &["sg"]),
                    port("other", "other-subnet", "10.0.0.1", &[]),
                    Port {
                        port_security_enabled: false,
                        ..port("nosec", SUBNET, "10.0.0.4", &[])
                    },
                ],
                want(vec![http.clone()], &["10.0.0.1", "10.0.0.2", "10.0.0.4"]),
                vec![],
            ),
        ];
        for (case, group, ports, want, steps) in cases {
            assert_eq!(plan(&group, &[], &ports, &want), steps, "{case}");
        }
    }

    #[test]
    fn duplicates_and_teardown_leave_ports_with_their_other_groups() {
        let http = rule("tcp", 30080);
        let keep = group("sg", vec![observed("r1", &http, true)]);
        let duplicate = group("sg2", vec![]);
        let ports = vec![
            port("p1", SUBNET, "10.0.0.1", &["default", "sg", "sg2"]),
            port("p2", "elsewhere", "192.168.0.9", &["sg2"]),
        ];
        assert_eq!(
            plan(
                &keep,
                std::slice::from_ref(&duplicate),
                &ports,
                &want(vec![http], &["10.0.0.1"])
            ),
            vec![
                set(
                    "p1",
                    "10.0.0.1",
                    &["default", "sg", "sg2"],
                    &["default", "sg"]
                ),
                set("p2", "192.168.0.9", &["sg2"], &[]),
                SecurityGroupStep::DeleteGroup {
                    id: "sg2".into(),
                    name: duplicate.name.clone(),
                },
            ]
        );
        assert_eq!(
            teardown(
                &[keep.clone(), duplicate.clone()],
                &[ports[0].clone(), ports[0].clone(), ports[1].clone()]
            ),
            vec![
                set("p1", "10.0.0.1", &["default", "sg", "sg2"], &["default"]),
                set("p2", "192.168.0.9", &["sg2"], &[]),
                SecurityGroupStep::DeleteGroup {
                    id: "sg".into(),
                    name: keep.name.clone(),
                },
                SecurityGroupStep::DeleteGroup {
                    id: "sg2".into(),
                    name: duplicate.name,
                },
            ],
            "each port rewritten once, groups deleted after"
        );
        assert_eq!(teardown(&[], &ports), vec![], "nothing of ours: nothing");
        let wanted = want(vec![], &["10.0.0.1", "10.0.0.7", "192.168.0.9"]);
        assert_eq!(
            addresses_without_port(&wanted, &ports),
            vec!["10.0.0.7", "192.168.0.9"],
            "192.168.0.9 has a port, but not on the member subnet"
        );
    }

    fn spec(ports: serde_json::Value, local: bool) -> LoadBalancerSpec {
        let mut spec = serde_json::json!({"type": "LoadBalancer", "ports": ports,
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" }});
        if local {
            spec["healthCheckNodePort"] = serde_json::json!(32000);
        }
        let service: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1"}, "spec": spec}))
            .expect("service");
        kube_lb_annotations::parse(kube_lb_annotations::Cloud::Openstack, &service)
            .expect("annotations")
            .spec
    }

    fn nodes(ips: &[&str]) -> Vec<kube_lb_provider_core::BackendNode> {
        ips.iter()
            .enumerate()
            .map(|(i, ip)| kube_lb_provider_core::BackendNode {
                name: format!("n{i}"),
                provider_id: None,
                addresses: vec![kube_lb_provider_core::NodeAddress {
                    kind: kube_lb_provider_core::types::NodeAddressKind::InternalIp,
                    ip: ip.parse().expect("ip"),
                }],
                labels: Default::default(),
            })
            .collect()
    }

    #[test]
    fn desired_rules_follow_ports_protocols_health_check_and_subnet_family() {
        let config = crate::config::LoadBalancerConfig {
            network: crate::config::LoadBalancerClass {
                subnet_id: Some(SUBNET.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let subnet = |cidr: &str, ip_version| Subnet {
            id: SUBNET.into(),
            name: String::new(),
            network_id: "net".into(),
            ip_version,
            tags: Vec::new(),
            cidr: cidr.into(),
        };
        let ports = serde_json::json!([
            {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080},
            {"name": "dns", "port": 53, "protocol": "UDP", "nodePort": 30053}]);
        let cases = [
            (
                false,
                subnet(CIDR, 4),
                &["10.0.0.1", "10.0.0.2"][..],
                vec![rule("tcp", 30080), rule("udp", 30053)],
            ),
            (
                true,
                subnet(CIDR, 4),
                &["10.0.0.1"][..],
                vec![rule("tcp", 30080), rule("tcp", 32000), rule("udp", 30053)],
            ),
            (
                false,
                subnet("fd00::/64", 6),
                &["fd00::1"][..],
                ["tcp", "udp"]
                    .into_iter()
                    .zip([30080, 30053])
                    .map(|(protocol, port)| NodePortRule {
                        protocol,
                        port,
                        ethertype: "IPv6",
                        remote_ip_prefix: "fd00::/64".into(),
                    })
                    .collect(),
            ),
        ];
        for (local, subnet, addresses, rules) in cases {
            let spec = spec(ports.clone(), local);
            let desired =
                crate::plan::desired(&spec, &nodes(addresses), "c", &config).expect("desired");
            let group = desired_security_group(&spec, &desired, "c", &subnet);
            assert_eq!(
                group.rules.into_iter().collect::<Vec<_>>(),
                rules,
                "local={local} {}",
                subnet.cidr
            );
            assert_eq!(
                group
                    .addresses
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
                addresses.to_vec()
            );
            assert_eq!(group.name, "lb-sg-u-1-prod-web");
            assert_eq!(group.subnet_id, SUBNET);
        }
    }

    #[test]
    fn with_ovn_node_ports_open_to_the_source_ranges_and_health_checks_to_the_subnet() {
        let config = crate::config::LoadBalancerConfig {
            network: crate::config::LoadBalancerClass {
                subnet_id: Some(SUBNET.into()),
                ..Default::default()
            },
            lb_provider: Some("ovn".into()),
            ..Default::default()
        };
        let subnet = Subnet {
            id: SUBNET.into(),
            name: String::new(),
            network_id: "net".into(),
            ip_version: 4,
            tags: Vec::new(),
            cidr: CIDR.into(),
        };
        let from = |prefix: &str, ethertype, port| NodePortRule {
            ethertype,
            remote_ip_prefix: prefix.into(),
            ..rule("tcp", port)
        };
        let ports =
            serde_json::json!([{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]);
        // (case, loadBalancerSourceRanges, want)
        let cases = [
            (
                "everyone",
                None,
                vec![from("0.0.0.0/0", "IPv4", 30080), from(CIDR, "IPv4", 32000)],
            ),
            (
                "the source ranges, each by its family",
                Some(serde_json::json!(["198.51.100.0/24", "2001:db8::/32"])),
                vec![
                    from(CIDR, "IPv4", 32000),
                    from("198.51.100.0/24", "IPv4", 30080),
                    from("2001:db8::/32", "IPv6", 30080),
                ],
            ),
        ];
        for (case, ranges, mut want) in cases {
            let mut body = serde_json::json!({"type": "LoadBalancer", "ports": ports,
                "externalTrafficPolicy": "Local", "healthCheckNodePort": 32000});
            if let Some(ranges) = ranges {
                body["loadBalancerSourceRanges"] = ranges;
            }
            let service: k8s_openapi::api::core::v1::Service =
                serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "prod", "uid": "u-1"}, "spec": body}))
                .expect("service");
            let spec = kube_lb_annotations::parse(kube_lb_annotations::Cloud::Openstack, &service)
                .expect("annotations")
                .spec;
            let desired =
                crate::plan::desired(&spec, &nodes(&["10.0.0.1"]), "c", &config).expect("desired");
            let group = desired_security_group(&spec, &desired, "c", &subnet);
            want.sort();
            assert_eq!(group.rules.into_iter().collect::<Vec<_>>(), want, "{case}");
        }
    }
}

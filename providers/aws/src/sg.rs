//! Security-group rules as flat values, and the pure diffs over them.
//!
//! EC2 identifies an ingress rule by (protocol, ports, source); the description is metadata.
//! A desired rule is therefore satisfied by any existing rule with the same identity (AWS
//! would reject a duplicate), and only rules this load balancer manages are ever revoked.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_ec2::types::{IpPermission, IpRange, SecurityGroup, UserIdGroupPair};

/// Where an ingress rule admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleSource {
    /// An IPv4 CIDR.
    Cidr(String),
    /// Another security group.
    Group(String),
}

/// One ingress rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IngressRule {
    /// `tcp`, `udp`, `icmp` or `-1` (all).
    pub protocol: String,
    /// First port (ICMP: type); `None` for all protocols.
    pub from_port: Option<i32>,
    /// Last port (ICMP: code); `None` for all protocols.
    pub to_port: Option<i32>,
    /// Source.
    pub source: RuleSource,
    /// Description (ours carry `kubernetes.io/rule/nlb/…=<lb>`).
    pub description: Option<String>,
}

impl IngressRule {
    /// A TCP/UDP rule on one port.
    pub fn port(protocol: &str, port: u16, cidr: &str, description: Option<&str>) -> Self {
        IngressRule {
            protocol: protocol.to_string(),
            from_port: Some(i32::from(port)),
            to_port: Some(i32::from(port)),
            source: RuleSource::Cidr(cidr.to_string()),
            description: description.map(str::to_string),
        }
    }

    /// ICMP "destination unreachable / fragmentation needed" (type 3, code 4) for path-MTU
    /// discovery.
    pub fn mtu(cidr: &str, description: Option<&str>) -> Self {
        IngressRule {
            protocol: "icmp".to_string(),
            from_port: Some(3),
            to_port: Some(4),
            source: RuleSource::Cidr(cidr.to_string()),
            description: description.map(str::to_string),
        }
    }

    /// All traffic from another security group (CLB → node rule, no description like upstream).
    pub fn from_group(group_id: &str) -> Self {
        IngressRule {
            protocol: "-1".to_string(),
            from_port: None,
            to_port: None,
            source: RuleSource::Group(group_id.to_string()),
            description: None,
        }
    }

    /// The identity EC2 uses: everything but the description.
    pub(crate) fn identity(&self) -> (&str, Option<i32>, Option<i32>, &RuleSource) {
        (&self.protocol, self.from_port, self.to_port, &self.source)
    }

    /// The EC2 API shape of this rule.
    pub fn to_permission(&self) -> IpPermission {
        let mut permission = IpPermission::builder().ip_protocol(&self.protocol);
        if self.protocol != "-1" {
            permission = permission
                .set_from_port(self.from_port)
                .set_to_port(self.to_port);
        }
        match &self.source {
            RuleSource::Cidr(cidr) => permission.ip_ranges(
                IpRange::builder()
                    .cidr_ip(cidr)
                    .set_description(self.description.clone())
                    .build(),
            ),
            RuleSource::Group(group) => permission.user_id_group_pairs(
                UserIdGroupPair::builder()
                    .group_id(group)
                    .set_description(self.description.clone())
                    .build(),
            ),
        }
        .build()
    }
}

/// For people (plans, audits): `tcp/30080 from 0.0.0.0/0`, `icmp/3-4 from …`, `all from sg-…`.
impl std::fmt::Display for IngressRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.protocol.as_str(), self.from_port, self.to_port) {
            ("-1", _, _) => f.write_str("all")?,
            (protocol, Some(from), Some(to)) if from == to => write!(f, "{protocol}/{from}")?,
            (protocol, Some(from), Some(to)) => write!(f, "{protocol}/{from}-{to}")?,
            (protocol, _, _) => f.write_str(protocol)?,
        }
        match &self.source {
            RuleSource::Cidr(cidr) => write!(f, " from {cidr}"),
            RuleSource::Group(group) => write!(f, " from {group}"),
        }
    }
}

/// Flattens EC2's grouped permissions into one rule per source. IPv6 ranges and prefix lists
/// are left out: kube-lb never creates them, so they are never revoked either.
pub fn flatten(permissions: &[IpPermission]) -> Vec<IngressRule> {
    let mut rules = Vec::new();
    for permission in permissions {
        let protocol = permission
            .ip_protocol()
            .unwrap_or("-1")
            .to_ascii_lowercase();
        let (from_port, to_port) = if protocol == "-1" {
            (None, None)
        } else {
            (permission.from_port(), permission.to_port())
        };
        for range in permission.ip_ranges() {
            if let Some(cidr) = range.cidr_ip() {
                rules.push(IngressRule {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: RuleSource::Cidr(cidr.to_string()),
                    description: range.description().map(str::to_string),
                });
            }
        }
        for pair in permission.user_id_group_pairs() {
            if let Some(group) = pair.group_id() {
                rules.push(IngressRule {
                    protocol: protocol.clone(),
                    from_port,
                    to_port,
                    source: RuleSource::Group(group.to_string()),
                    description: pair.description().map(str::to_string),
                });
            }
        }
    }
    rules
}

/// A security group as the provider sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedGroup {
    /// `sg-…`.
    pub id: String,
    /// Group name.
    pub name: String,
    /// VPC.
    pub vpc_id: Option<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Ingress rules, flattened.
    pub ingress: Vec<IngressRule>,
}

impl ObservedGroup {
    /// Converts the SDK shape.
    pub fn from_sdk(group: &SecurityGroup) -> Option<Self> {
        Some(ObservedGroup {
            id: group.group_id()?.to_string(),
            name: group.group_name().unwrap_or_default().to_string(),
            vpc_id: group.vpc_id().map(str::to_string),
            tags: group
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
                .collect(),
            ingress: flatten(group.ip_permissions()),
        })
    }
}

/// What to change on one security group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleChanges {
    /// Rules to add.
    pub authorize: Vec<IngressRule>,
    /// Rules to remove (exactly as observed, so EC2 matches them).
    pub revoke: Vec<IngressRule>,
}

impl RuleChanges {
    /// True when nothing changes.
    pub fn is_empty(&self) -> bool {
        self.authorize.is_empty() && self.revoke.is_empty()
    }
}

/// Diffs one group: revoke managed rules that are not desired (compared with their
/// description, so a rule whose description must change is replaced), authorize desired rules
/// whose identity is not present among the rules that stay.
pub fn diff_rules(
    observed: &[IngressRule],
    desired: &[IngressRule],
    managed: impl Fn(&IngressRule) -> bool,
) -> RuleChanges {
    let desired_set: BTreeSet<&IngressRule> = desired.iter().collect();
    let revoke: Vec<IngressRule> = observed
        .iter()
        .filter(|rule| managed(rule) && !desired_set.contains(rule))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let remaining: BTreeSet<_> = observed
        .iter()
        .filter(|rule| !revoke.contains(rule))
        .map(IngressRule::identity)
        .collect();
    let mut authorize: Vec<IngressRule> = Vec::new();
    for rule in desired {
        if !remaining.contains(&rule.identity()) && !authorize.contains(rule) {
            authorize.push(rule.clone());
        }
    }
    authorize.sort();
    RuleChanges { authorize, revoke }
}

/// Picks the one security group of an instance that kube-lb manages rules on, as upstream:
/// the single cluster-tagged group, else the only group. More than one tagged group, or several
/// untagged ones, is ambiguous.
pub fn node_group_for_instance(
    instance_groups: &[String],
    tagged: &BTreeSet<String>,
) -> Result<Option<String>, String> {
    let tagged_here: Vec<&String> = instance_groups
        .iter()
        .filter(|g| tagged.contains(*g))
        .collect();
    match (tagged_here.as_slice(), instance_groups) {
        ([one], _) => Ok(Some((*one).clone())),
        ([], []) => Ok(None),
        ([], [only]) => Ok(Some(only.clone())),
        ([], many) => Err(format!(
            "instance has {} security groups and none carries the cluster tag: {}",
            many.len(),
            many.join(", ")
        )),
        (several, _) => Err(format!(
            "instance has several cluster-tagged security groups ({}); tag only one",
            several
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(port: u16, cidr: &str, lb: &str) -> IngressRule {
        IngressRule::port(
            "tcp",
            port,
            cidr,
            Some(&format!("kubernetes.io/rule/nlb/client={lb}")),
        )
    }

    fn ours(rule: &IngressRule) -> bool {
        rule.description
            .as_deref()
            .is_some_and(|d| d.ends_with("=me"))
    }

    #[test]
    fn diff_cases() {
        let foreign = IngressRule::port("tcp", 22, "10.0.0.0/8", None);
        let cases: Vec<(&str, Vec<IngressRule>, Vec<IngressRule>, RuleChanges)> = vec![
            (
                "no-op",
                vec![client(30080, "0.0.0.0/0", "me")],
                vec![client(30080, "0.0.0.0/0", "me")],
                RuleChanges::default(),
            ),
            (
                "add missing",
                vec![foreign.clone()],
                vec![client(30080, "0.0.0.0/0", "me")],
                RuleChanges {
                    authorize: vec![client(30080, "0.0.0.0/0", "me")],
                    revoke: vec![],
                },
            ),
            (
                "remove stale, keep foreign and other lb",
                vec![
                    foreign.clone(),
                    client(30080, "0.0.0.0/0", "me"),
                    client(30090, "0.0.0.0/0", "other"),
                ],
                vec![],
                RuleChanges {
                    authorize: vec![],
                    revoke: vec![client(30080, "0.0.0.0/0", "me")],
                },
            ),
            (
                "same identity under another description satisfies",
                vec![IngressRule::mtu(
                    "0.0.0.0/0",
                    Some("kubernetes.io/rule/nlb/mtu"),
                )],
                vec![IngressRule::mtu(
                    "0.0.0.0/0",
                    Some("kubernetes.io/rule/nlb/mtu=me"),
                )],
                RuleChanges::default(),
            ),
            (
                "source range change replaces the rule",
                vec![client(30080, "0.0.0.0/0", "me")],
                vec![client(30080, "10.0.0.0/8", "me")],
                RuleChanges {
                    authorize: vec![client(30080, "10.0.0.0/8", "me")],
                    revoke: vec![client(30080, "0.0.0.0/0", "me")],
                },
            ),
        ];
        for (name, observed, desired, want) in cases {
            assert_eq!(diff_rules(&observed, &desired, ours), want, "{name}");
        }
    }

    #[test]
    fn flatten_round_trips_rules() {
        let rules = vec![
            client(30080, "0.0.0.0/0", "me"),
            IngressRule::mtu("10.0.0.0/8", None),
            IngressRule::from_group("sg-1"),
        ];
        let permissions: Vec<IpPermission> = rules.iter().map(IngressRule::to_permission).collect();
        assert_eq!(flatten(&permissions), rules);
    }

    #[test]
    fn node_group_selection() {
        let tagged: BTreeSet<String> = ["sg-t1".to_string(), "sg-t2".to_string()].into();
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            node_group_for_instance(&s(&["sg-a", "sg-t1"]), &tagged),
            Ok(Some("sg-t1".into()))
        );
        assert_eq!(
            node_group_for_instance(&s(&["sg-a"]), &tagged),
            Ok(Some("sg-a".into()))
        );
        assert_eq!(node_group_for_instance(&s(&[]), &tagged), Ok(None));
        assert!(node_group_for_instance(&s(&["sg-a", "sg-b"]), &tagged).is_err());
        assert!(node_group_for_instance(&s(&["sg-t1", "sg-t2"]), &tagged).is_err());
    }
}

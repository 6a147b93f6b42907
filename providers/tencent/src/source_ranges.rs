//! `loadBalancerSourceRanges` (and its annotation fallback) on a CLB: a security group of the
//! Service's own, bound to the CLB. Tencent judges a CLB's traffic by the groups bound to it
//! (none bound: every source passes; bound: the groups in order, each group's ingress policies
//! in order, the first match decides, no match drops; stateful, so replies need no egress
//! policy), so one group with an `ACCEPT` policy per range and protocol, covering the
//! Service's listener ports, lets exactly the ranges in.
//!
//! The group is named `kube-lb-<Service UID>`, described as the Service's, and tagged as the
//! CLBs are (`tke-clusterId`, `tke-createdBy-flag=yes`, `tke-lb-serviceuuid`): it is found by
//! those tags, never by name. Each sync compares the group's policies and the CLB's bound
//! groups with what the Service asks and writes only what differs (a no-op resync reads and
//! writes nothing); a policy opened, changed or removed by hand, or a group bound or unbound by
//! hand, is put back. While ranges apply, the CLB (created for the Service) has exactly the
//! Service's group bound: any other group could let more in. No ranges, or a `/0` among them
//! (as the upstream providers read it), means no group: ours is unbound and deleted, and other
//! groups on the CLB are left as they are.
//!
//! A user's CLB (`tke-existed-lbid`) is shared with whatever else its owner runs on it, and its
//! security groups are the owner's: restricting it for one Service would restrict them all, so
//! source ranges there are refused ([`existing_refusal`]) instead of left unenforced.

use kube_lb_annotations::{ServiceKey, SourceRanges};
use kube_lb_provider_core::{ChangeAction, PlannedChange};
use serde_json::{Value, json};

use crate::client::{PolicySet, SecurityGroup};
use crate::plan::{DesiredListener, TAG_CLUSTER, TAG_CREATED_BY, TAG_SERVICE_UUID};

/// Largest `GroupName`.
const MAX_NAME: usize = 60;
/// Largest `GroupDescription`.
const MAX_DESCRIPTION: usize = 100;

/// The CIDRs the Service restricts its CLB to, `None` when every source is allowed (no
/// ranges, or one of them `/0`).
pub fn restricted(ranges: &SourceRanges) -> Option<Vec<String>> {
    if !kube_lb_annotations::source_ranges_restrict(ranges) {
        return None;
    }
    Some(ranges.cidrs.iter().map(ToString::to_string).collect())
}

/// The refusal of source ranges on a user's CLB (`tke-existed-lbid`), which kube-lb cannot
/// restrict without restricting everything else on it.
pub fn existing_refusal(lb_id: &str) -> String {
    // The words `lint` and the controller's parse give (annotations' limits).
    kube_lb_annotations::source_ranges_on_existing(kube_lb_annotations::Cloud::Tencent, lb_id)
        .unwrap_or_default()
}

/// The Service's group name.
pub fn group_name(service: &ServiceKey) -> String {
    format!("kube-lb-{}", service.uid)
        .chars()
        .take(MAX_NAME)
        .collect()
}

/// The Service's group description.
pub fn group_description(cluster: &str, service: &ServiceKey) -> String {
    format!(
        "kube-lb: loadBalancerSourceRanges of Service {}/{} in cluster {cluster}",
        service.namespace, service.name
    )
    .chars()
    .take(MAX_DESCRIPTION)
    .collect()
}

/// The tags that make a group the Service's.
pub fn group_tags<'a>(cluster: &'a str, service: &'a ServiceKey) -> [(&'a str, &'a str); 3] {
    [
        (TAG_CLUSTER, cluster),
        (TAG_CREATED_BY, "yes"),
        (TAG_SERVICE_UUID, service.uid.as_str()),
    ]
}

/// True when `group` (found by the Service's group name) may be adopted as the Service's: none
/// of the ownership tags it carries names another cluster or Service. A group of that name
/// without our tags is one whose create was cut short before its tags were readable.
pub fn tags_allow_adoption(group: &SecurityGroup, cluster: &str, service: &ServiceKey) -> bool {
    let wanted = group_tags(cluster, service);
    group.tag_set.iter().flatten().all(|tag| {
        wanted
            .iter()
            .all(|(key, value)| tag.key != *key || tag.value == *value)
    })
}

/// One policy, in the fields that decide what it lets through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `TCP`, `UDP`, `ALL`, …
    pub protocol: String,
    /// `ALL`, `80`, `80,443`, `1000-2000`.
    pub port: String,
    /// IPv4 source.
    pub cidr_block: Option<String>,
    /// IPv6 source.
    pub ipv6_cidr_block: Option<String>,
    /// `ACCEPT` or `DROP`.
    pub action: String,
}

impl Policy {
    /// The policy as `DescribeSecurityGroupPolicies` shows it (absent and empty are alike).
    pub fn from_json(value: &Value) -> Policy {
        let text = |key: &str| {
            value[key]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Policy {
            protocol: text("Protocol")
                .unwrap_or_else(|| "ALL".into())
                .to_uppercase(),
            port: text("Port").unwrap_or_else(|| "ALL".into()),
            cidr_block: text("CidrBlock"),
            ipv6_cidr_block: text("Ipv6CidrBlock"),
            action: text("Action").unwrap_or_default().to_uppercase(),
        }
    }

    /// The `SecurityGroupPolicy` to send.
    pub fn to_json(&self, description: &str) -> Value {
        let mut policy = json!({
            "Protocol": self.protocol,
            "Port": self.port,
            "Action": self.action,
            "PolicyDescription": description,
        });
        if let Some(cidr) = &self.cidr_block {
            policy["CidrBlock"] = json!(cidr);
        }
        if let Some(cidr) = &self.ipv6_cidr_block {
            policy["Ipv6CidrBlock"] = json!(cidr);
        }
        policy
    }
}

/// The ingress policies for `cidrs` to the Service's `listeners`: per range and protocol, one
/// `ACCEPT` for the listener ports of that protocol (port order). Nothing else is accepted.
pub fn desired_policies(cidrs: &[String], listeners: &[DesiredListener]) -> Vec<Policy> {
    let mut by_protocol: std::collections::BTreeMap<&str, Vec<u16>> = Default::default();
    for listener in listeners {
        by_protocol
            .entry(listener.protocol.as_str())
            .or_default()
            .push(listener.port);
    }
    let mut policies = Vec::new();
    for cidr in cidrs {
        let ipv6 = cidr.contains(':');
        for (protocol, ports) in &by_protocol {
            let mut ports = ports.clone();
            ports.sort_unstable();
            ports.dedup();
            policies.push(Policy {
                protocol: protocol.to_string(),
                port: ports
                    .iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                cidr_block: (!ipv6).then(|| cidr.clone()),
                ipv6_cidr_block: ipv6.then(|| cidr.clone()),
                action: "ACCEPT".into(),
            });
        }
    }
    policies
}

/// A group of the Service's and its policies as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedGroup {
    /// The group.
    pub group: SecurityGroup,
    /// Its policies.
    pub policies: PolicySet,
}

impl ObservedGroup {
    fn is(&self, wanted: &[Policy]) -> bool {
        let ingress: Vec<Policy> = self
            .policies
            .ingress
            .iter()
            .flatten()
            .map(Policy::from_json)
            .collect();
        ingress == wanted && self.policies.egress.as_ref().is_none_or(Vec::is_empty)
    }
}

/// Which group a step is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupRef {
    /// An existing group.
    Id(String),
    /// The group the plan's [`Step::Create`] makes.
    New,
}

/// One change.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// `CreateSecurityGroup` (empty, tagged as the Service's).
    Create,
    /// `ModifySecurityGroupPolicies`: the group's policies become these (no egress policy:
    /// the group is stateful).
    SetPolicies {
        /// The group.
        group: GroupRef,
        /// Its ingress policies.
        policies: Vec<Policy>,
    },
    /// `SetLoadBalancerSecurityGroups`: the CLB's bound groups become these.
    Bind {
        /// The groups, in order.
        groups: Vec<GroupRef>,
        /// What was bound, for people.
        was: Vec<String>,
    },
    /// `DeleteSecurityGroup`.
    Delete(String),
}

impl Step {
    /// The step as `kube-lb plan` lists it; `lb` names the CLB, `name` the group.
    pub fn planned(&self, lb: &str, name: &str) -> PlannedChange {
        let group = |g: &GroupRef| match g {
            GroupRef::Id(id) => id.clone(),
            GroupRef::New => name.to_string(),
        };
        match self {
            Step::Create => PlannedChange::new(
                ChangeAction::Create,
                "SecurityGroup",
                name,
                "CreateSecurityGroup",
            ),
            Step::SetPolicies { group: g, policies } => PlannedChange::new(
                ChangeAction::Modify,
                "SecurityGroup",
                group(g),
                "ModifySecurityGroupPolicies",
            )
            .field(
                "Ingress",
                None,
                Some(
                    policies
                        .iter()
                        .map(|p| {
                            format!(
                                "{} {}:{} {}",
                                p.action,
                                p.protocol,
                                p.port,
                                p.cidr_block
                                    .as_deref()
                                    .or(p.ipv6_cidr_block.as_deref())
                                    .unwrap_or_default()
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            ),
            Step::Bind { groups, was } => PlannedChange::new(
                ChangeAction::Modify,
                "LoadBalancer",
                lb,
                "SetLoadBalancerSecurityGroups",
            )
            .field(
                "SecureGroups",
                Some(was.join(",")),
                Some(groups.iter().map(group).collect::<Vec<_>>().join(",")),
            ),
            Step::Delete(id) => PlannedChange::new(
                ChangeAction::Delete,
                "SecurityGroup",
                id,
                "DeleteSecurityGroup",
            ),
        }
    }
}

/// The steps that give the CLB (bound groups `bound`; `None` when there is no CLB to bind
/// to) the Service's `wanted` policies (`None`: no restriction), given the Service's groups
/// `ours` as read. Pure; the order is the order to make them in.
pub fn plan(
    ours: &[ObservedGroup],
    bound: Option<&[String]>,
    wanted: Option<&[Policy]>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let is_ours = |id: &String| ours.iter().any(|g| &g.group.security_group_id == id);
    let (Some(wanted), Some(bound)) = (wanted, bound) else {
        // No restriction (or no CLB of the Service's any more): ours are unbound, then gone.
        if let Some(bound) = bound
            && bound.iter().any(is_ours)
        {
            steps.push(Step::Bind {
                groups: bound
                    .iter()
                    .filter(|id| !is_ours(id))
                    .cloned()
                    .map(GroupRef::Id)
                    .collect(),
                was: bound.to_vec(),
            });
        }
        steps.extend(
            ours.iter()
                .map(|g| Step::Delete(g.group.security_group_id.clone())),
        );
        return steps;
    };
    let keep = match ours.first() {
        Some(group) => {
            let id = GroupRef::Id(group.group.security_group_id.clone());
            if !group.is(wanted) {
                steps.push(Step::SetPolicies {
                    group: id.clone(),
                    policies: wanted.to_vec(),
                });
            }
            id
        }
        None => {
            steps.push(Step::Create);
            steps.push(Step::SetPolicies {
                group: GroupRef::New,
                policies: wanted.to_vec(),
            });
            GroupRef::New
        }
    };
    let exactly_ours = matches!((&keep, bound), (GroupRef::Id(id), [only]) if id == only);
    if !exactly_ours {
        steps.push(Step::Bind {
            groups: vec![keep],
            was: bound.to_vec(),
        });
    }
    // A second group of the Service's (a create repeated after a lost answer): unbound by
    // now, so it can go.
    steps.extend(
        ours.iter()
            .skip(1)
            .map(|g| Step::Delete(g.group.security_group_id.clone())),
    );
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(protocol: &str, port: u16) -> DesiredListener {
        DesiredListener {
            protocol: protocol.into(),
            port,
            node_port: 30000 + port,
        }
    }

    fn group(id: &str, ingress: &[Policy]) -> ObservedGroup {
        ObservedGroup {
            group: SecurityGroup {
                security_group_id: id.into(),
                security_group_name: String::new(),
                security_group_desc: String::new(),
                tag_set: None,
            },
            policies: PolicySet {
                ingress: Some(ingress.iter().map(|p| p.to_json("x")).collect()),
                egress: Some(Vec::new()),
            },
        }
    }

    #[test]
    fn one_accept_per_range_and_protocol_covers_the_listener_ports() {
        let policies = desired_policies(
            &["143.231.0.0/16".into(), "2001:db8::/32".into()],
            &[
                listener("TCP", 443),
                listener("UDP", 53),
                listener("TCP", 80),
            ],
        );
        let shown: Vec<String> = policies
            .iter()
            .map(|p| {
                format!(
                    "{} {} {:?} {:?}",
                    p.protocol, p.port, p.cidr_block, p.ipv6_cidr_block
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "TCP 80,443 Some(\"143.231.0.0/16\") None",
                "UDP 53 Some(\"143.231.0.0/16\") None",
                "TCP 80,443 None Some(\"2001:db8::/32\")",
                "UDP 53 None Some(\"2001:db8::/32\")",
            ]
        );
    }

    #[test]
    fn a_converged_group_plans_nothing_and_drift_is_put_back() {
        let wanted = desired_policies(&["10.0.0.0/8".into()], &[listener("TCP", 80)]);
        let ours = [group("sg-1", &wanted)];
        let bound = vec!["sg-1".to_string()];
        assert!(plan(&ours, Some(&bound), Some(&wanted)).is_empty());
        let mut opened = wanted.clone();
        opened.push(Policy {
            cidr_block: Some("0.0.0.0/0".into()),
            ..wanted[0].clone()
        });
        let steps = plan(&[group("sg-1", &opened)], Some(&bound), Some(&wanted));
        assert_eq!(
            steps,
            [Step::SetPolicies {
                group: GroupRef::Id("sg-1".into()),
                policies: wanted.clone()
            }]
        );
        let steps = plan(&ours, Some(&["sg-user".to_string()]), Some(&wanted));
        assert_eq!(
            steps,
            [Step::Bind {
                groups: vec![GroupRef::Id("sg-1".into())],
                was: vec!["sg-user".into()]
            }]
        );
    }

    #[test]
    fn no_ranges_unbind_and_delete_ours_and_leave_others() {
        let wanted = desired_policies(&["10.0.0.0/8".into()], &[listener("TCP", 80)]);
        let bound = vec!["sg-user".to_string(), "sg-1".to_string()];
        let steps = plan(&[group("sg-1", &wanted)], Some(&bound), None);
        assert_eq!(
            steps,
            [
                Step::Bind {
                    groups: vec![GroupRef::Id("sg-user".into())],
                    was: bound.clone()
                },
                Step::Delete("sg-1".into())
            ]
        );
        assert!(plan(&[], Some(&bound), None).is_empty());
    }
}

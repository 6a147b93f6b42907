//! `loadBalancerSourceRanges` (and its annotation fallback) on a BLB: a security group of the
//! Service's own bound to its BLB. BCE judges a BLB's traffic by the groups bound to it (none
//! bound: every source passes; bound: a packet passes when an ingress rule of a bound group
//! allows it, anything else is dropped; rules only allow, and are stateful), so one group with
//! an ingress rule per range and listener lets exactly the ranges in.
//!
//! The group is named `kube-lb-<Service UID>`, described as the Service's, and tagged as the
//! EIPs kube-lb makes (`kube-lb/cluster`, `kube-lb/service`, `kube-lb/service-uid`): it is
//! found by those tags in the cluster's VPC. Each sync compares its ingress rules and the BLB's
//! bound groups with what the Service asks and changes only what differs (a no-op resync
//! writes nothing); a rule added or removed by hand, or a group bound or unbound by hand, is
//! put back. While ranges apply the BLB (created for the Service) has only the Service's group
//! bound: rules of any group count, so another group could let more in. No ranges, or a `/0`
//! among them, means no group: ours is unbound and deleted, others are left alone.
//!
//! The BLB's description carries [`SG_MARK`] while a group of the Service's may exist, so a
//! Service without ranges reads no security group on a resync unless the mark says one may be
//! left to remove; the mark comes off (with the rest of the description) after the group is
//! gone, so a crash in between leaves the mark for the next pass.
//!
//! A user's BLB (`cce-load-balancer-exist-id`) is its owner's, its groups too: source ranges
//! there are refused ([`existing_refusal`]) instead of left unenforced.

use std::collections::BTreeSet;

use kube_lb_annotations::{ServiceKey, SourceRanges};
use kube_lb_provider_core::{ChangeAction, PlannedChange};
use serde_json::{Value, json};

use crate::client::{SecurityGroup, SecurityGroupRule};
use crate::plan::{DesiredListener, TAG_CLUSTER, TAG_SERVICE, TAG_UID};

/// The description word of a BLB whose Service has (or may still have) a security group.
pub const SG_MARK: &str = "source-ranges-sg";

/// Largest security group name.
const MAX_NAME: usize = 65;

/// The CIDRs the Service restricts its BLB to, `None` when every source is allowed (no
/// ranges, or one of them `/0`).
pub fn restricted(ranges: &SourceRanges) -> Option<Vec<String>> {
    if !kube_lb_annotations::source_ranges_restrict(ranges) {
        return None;
    }
    Some(ranges.cidrs.iter().map(ToString::to_string).collect())
}

/// True when a BLB description has [`SG_MARK`].
pub fn has_sg_mark(desc: &str) -> bool {
    desc.split_whitespace().any(|word| word == SG_MARK)
}

/// The refusal of source ranges on a user's BLB (`cce-load-balancer-exist-id`).
pub fn existing_refusal(blb_id: &str) -> String {
    // The words `lint` and the controller's parse give (annotations' limits).
    kube_lb_annotations::source_ranges_on_existing(kube_lb_annotations::Cloud::Baidu, blb_id)
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
    .take(200)
    .collect()
}

/// True when `group` is the Service's (its tags).
pub fn is_ours(group: &SecurityGroup, cluster: &str, service: &ServiceKey) -> bool {
    group.tag(TAG_CLUSTER) == Some(cluster) && group.tag(TAG_UID) == Some(service.uid.as_str())
}

/// The tags of the Service's group.
pub fn group_tags(cluster: &str, service: &ServiceKey) -> Value {
    json!([
        {"tagKey": TAG_CLUSTER, "tagValue": cluster},
        {"tagKey": TAG_SERVICE, "tagValue": format!("{}/{}", service.namespace, service.name)},
        {"tagKey": TAG_UID, "tagValue": service.uid},
    ])
}

/// An ingress rule, in the fields that decide what it lets through.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Rule {
    /// `IPv4` or `IPv6`.
    pub ethertype: String,
    /// `tcp`, `udp`, or empty / `all`.
    pub protocol: String,
    /// A port, `a-b`, or empty (all).
    pub port_range: String,
    /// Source CIDR, empty or `all` for every source.
    pub source_ip: String,
    /// Source group, when the rule names one.
    pub source_group_id: String,
}

impl Rule {
    /// The rule as read (an ingress rule).
    pub fn of(rule: &SecurityGroupRule) -> Rule {
        Rule {
            ethertype: if rule.ethertype.is_empty() {
                "IPv4".into()
            } else {
                rule.ethertype.clone()
            },
            protocol: rule.protocol.to_lowercase(),
            port_range: rule.port_range.clone(),
            source_ip: rule.source_ip.clone(),
            source_group_id: rule.source_group_id.clone(),
        }
    }

    /// The `SecurityGroupRuleModel` to send.
    pub fn to_json(&self, remark: &str) -> Value {
        json!({
            "remark": remark,
            "direction": "ingress",
            "ethertype": self.ethertype,
            "protocol": self.protocol,
            "portRange": self.port_range,
            "sourceIp": self.source_ip,
        })
    }

    fn described(&self) -> String {
        format!(
            "{}:{} from {}",
            self.protocol,
            self.port_range,
            if self.source_group_id.is_empty() {
                &self.source_ip
            } else {
                &self.source_group_id
            }
        )
    }
}

/// The ingress rules for `cidrs` to `listeners`: one per range and listener.
pub fn desired_rules<'a>(
    cidrs: &[String],
    listeners: impl IntoIterator<Item = &'a DesiredListener>,
) -> Vec<Rule> {
    let listeners: Vec<&DesiredListener> = listeners.into_iter().collect();
    let mut rules = BTreeSet::new();
    for cidr in cidrs {
        for listener in &listeners {
            rules.insert(Rule {
                ethertype: if cidr.contains(':') { "IPv6" } else { "IPv4" }.into(),
                protocol: listener.protocol.to_lowercase(),
                port_range: listener.port.to_string(),
                source_ip: cidr.clone(),
                source_group_id: String::new(),
            });
        }
    }
    rules.into_iter().collect()
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
    /// `POST /v2/securityGroup` with these ingress rules, tagged as the Service's.
    Create(Vec<Rule>),
    /// `PUT /v2/securityGroup/{id}?authorizeRule`.
    Authorize {
        /// The group.
        group: String,
        /// The rule.
        rule: Rule,
    },
    /// `DELETE /v2/securityGroup/rule/{id}`: a rule the Service does not ask for.
    DeleteRule {
        /// The rule's id.
        id: String,
        /// The rule, for people.
        rule: Rule,
    },
    /// `PUT /v1/blb/{id}/securitygroup?bind`.
    Bind(GroupRef),
    /// `PUT /v1/blb/{id}/securitygroup?unbind`.
    Unbind(Vec<String>),
    /// `DELETE /v2/securityGroup/{id}`.
    Delete(String),
}

impl Step {
    /// The step as `kube-lb plan` lists it; `blb` names the BLB, `name` the new group.
    pub fn planned(&self, blb: &str, name: &str) -> PlannedChange {
        match self {
            Step::Create(rules) => PlannedChange::new(
                ChangeAction::Create,
                "SecurityGroup",
                name,
                "bcc:CreateSecurityGroup",
            )
            .field(
                "rules",
                None,
                Some(
                    rules
                        .iter()
                        .map(Rule::described)
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            ),
            Step::Authorize { group, rule } => PlannedChange::new(
                ChangeAction::Modify,
                "SecurityGroup",
                group,
                "bcc:AuthorizeSecurityGroupRule",
            )
            .field("rule", None, Some(rule.described())),
            Step::DeleteRule { id, rule } => PlannedChange::new(
                ChangeAction::Modify,
                "SecurityGroup",
                id,
                "bcc:DeleteSecurityGroupRule",
            )
            .field("rule", Some(rule.described()), None),
            Step::Bind(group) => PlannedChange::new(
                ChangeAction::Modify,
                "LoadBalancer",
                blb,
                "blb:BindSecurityGroups",
            )
            .field(
                "securityGroup",
                None,
                Some(match group {
                    GroupRef::Id(id) => id.clone(),
                    GroupRef::New => name.to_string(),
                }),
            ),
            Step::Unbind(groups) => PlannedChange::new(
                ChangeAction::Modify,
                "LoadBalancer",
                blb,
                "blb:UnbindSecurityGroups",
            )
            .field("securityGroups", Some(groups.join(",")), None),
            Step::Delete(id) => PlannedChange::new(
                ChangeAction::Delete,
                "SecurityGroup",
                id,
                "bcc:DeleteSecurityGroup",
            ),
        }
    }
}

/// The steps that give the BLB (bound groups `bound`) the Service's `wanted` ingress rules
/// (`None`: no restriction), given the Service's groups `ours` as read. Pure; the order is
/// the order to make them in: rules before binding (a group is never bound half-made), other
/// groups unbound after ours is bound.
pub fn plan(ours: &[SecurityGroup], bound: &[String], wanted: Option<&[Rule]>) -> Vec<Step> {
    let is_ours = |id: &String| ours.iter().any(|g| &g.id == id);
    let Some(wanted) = wanted else {
        let mut steps = Vec::new();
        let ours_bound: Vec<String> = bound.iter().filter(|id| is_ours(id)).cloned().collect();
        if !ours_bound.is_empty() {
            steps.push(Step::Unbind(ours_bound));
        }
        steps.extend(ours.iter().map(|g| Step::Delete(g.id.clone())));
        return steps;
    };
    let mut steps = Vec::new();
    let keep = match ours.first() {
        Some(group) => {
            let mut seen = BTreeSet::new();
            for rule in group.rules.iter().filter(|r| r.direction == "ingress") {
                let read = Rule::of(rule);
                // A rule not asked for, or a second copy of one: it goes.
                if !wanted.contains(&read) || !seen.insert(read.clone()) {
                    steps.push(Step::DeleteRule {
                        id: rule.security_group_rule_id.clone(),
                        rule: read,
                    });
                }
            }
            for rule in wanted {
                if !seen.contains(rule) {
                    steps.push(Step::Authorize {
                        group: group.id.clone(),
                        rule: rule.clone(),
                    });
                }
            }
            GroupRef::Id(group.id.clone())
        }
        None => {
            steps.push(Step::Create(wanted.to_vec()));
            GroupRef::New
        }
    };
    if !matches!(&keep, GroupRef::Id(id) if bound.contains(id)) {
        steps.push(Step::Bind(keep.clone()));
    }
    let others: Vec<String> = bound
        .iter()
        .filter(|id| !matches!(&keep, GroupRef::Id(k) if k == *id))
        .cloned()
        .collect();
    if !others.is_empty() {
        steps.push(Step::Unbind(others));
    }
    // A second group of the Service's (a create repeated after a lost answer): unbound now.
    steps.extend(ours.iter().skip(1).map(|g| Step::Delete(g.id.clone())));
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(id: &str, rules: &[(&str, Rule)]) -> SecurityGroup {
        SecurityGroup {
            id: id.into(),
            name: String::new(),
            desc: String::new(),
            vpc_id: String::new(),
            rules: rules
                .iter()
                .map(|(rule_id, r)| SecurityGroupRule {
                    security_group_rule_id: (*rule_id).into(),
                    direction: "ingress".into(),
                    ethertype: r.ethertype.clone(),
                    protocol: r.protocol.clone(),
                    port_range: r.port_range.clone(),
                    source_ip: r.source_ip.clone(),
                    source_group_id: String::new(),
                })
                .collect(),
            tags: None,
        }
    }

    fn wanted() -> Vec<Rule> {
        let listeners = [DesiredListener {
            port: 80,
            protocol: "TCP",
            backend_port: 30080,
        }];
        desired_rules(&["143.231.0.0/16".into()], &listeners)
    }

    #[test]
    fn converged_is_silent_and_a_hand_rule_goes_while_ours_comes_back() {
        let want = wanted();
        let ours = [group("g-1", &[("r-1", want[0].clone())])];
        assert!(plan(&ours, &["g-1".into()], Some(&want)).is_empty());
        let opened = Rule {
            source_ip: String::new(),
            ..want[0].clone()
        };
        let steps = plan(
            &[group("g-1", &[("r-9", opened.clone())])],
            &["g-1".into(), "g-user".into()],
            Some(&want),
        );
        assert_eq!(
            steps,
            [
                Step::DeleteRule {
                    id: "r-9".into(),
                    rule: opened
                },
                Step::Authorize {
                    group: "g-1".into(),
                    rule: want[0].clone()
                },
                Step::Unbind(vec!["g-user".into()]),
            ]
        );
    }

    #[test]
    fn nothing_of_ours_means_a_new_bound_group_and_no_ranges_mean_none() {
        let want = wanted();
        assert_eq!(
            plan(&[], &[], Some(&want)),
            [Step::Create(want.clone()), Step::Bind(GroupRef::New)]
        );
        let ours = [group("g-1", &[("r-1", want[0].clone())])];
        assert_eq!(
            plan(&ours, &["g-user".into(), "g-1".into()], None),
            [Step::Unbind(vec!["g-1".into()]), Step::Delete("g-1".into())]
        );
    }
}

//! Node security-group rules: which rules each node group needs for one load balancer (pure),
//! and the scoped reads and writes that converge them. Only cluster-tagged groups and the
//! groups of the backend instances are read, never every group in the region.

use std::collections::{BTreeMap, BTreeSet};

use crate::calls::ops;
use crate::clients::Clients;
use crate::desired::NlbNodeRuleInputs;
use crate::discovery::{InstanceInfo, ec2_filter};
use crate::error::AwsError;
use crate::naming::{NlbRuleKind, nlb_rule_description, parse_nlb_rule_description};
use crate::sg::{
    IngressRule, ObservedGroup, RuleChanges, RuleSource, diff_rules, node_group_for_instance,
};
use kube_lb_provider_core::PageTokens;

/// The rules every node group of an NLB needs (seed 001 table): client traffic on the node
/// ports from the client CIDRs, ICMP path-MTU from the same CIDRs, and health checks from the
/// VPC CIDRs — skipped when the client rule already admits them (all sources, TCP, same ports),
/// as upstream does to save rule quota.
pub fn nlb_node_rules(
    lb: &str,
    inputs: &NlbNodeRuleInputs,
    vpc_cidrs: &[String],
) -> Vec<IngressRule> {
    let client = nlb_rule_description(NlbRuleKind::Client, lb);
    let health = nlb_rule_description(NlbRuleKind::Health, lb);
    let mtu = nlb_rule_description(NlbRuleKind::Mtu, lb);
    let mut rules = Vec::new();
    for port in &inputs.client_ports {
        for cidr in &inputs.client_cidrs {
            rules.push(IngressRule::port(
                &inputs.client_protocol,
                *port,
                cidr,
                Some(&client),
            ));
        }
    }
    for cidr in &inputs.client_cidrs {
        rules.push(IngressRule::mtu(cidr, Some(&mtu)));
    }
    let covered = inputs.client_cidrs == ["0.0.0.0/0"]
        && inputs.client_protocol == "tcp"
        && inputs.health_ports == inputs.client_ports;
    if !covered {
        for port in &inputs.health_ports {
            for cidr in vpc_cidrs {
                rules.push(IngressRule::port("tcp", *port, cidr, Some(&health)));
            }
        }
    }
    rules.sort();
    rules
}

/// True for rules carrying one of this NLB's descriptions.
pub fn is_nlb_rule_of(lb: &str) -> impl Fn(&IngressRule) -> bool + '_ {
    move |rule| {
        rule.description
            .as_deref()
            .and_then(parse_nlb_rule_description)
            .is_some_and(|(_, owner)| owner == lb)
    }
}

/// When this NLB gives up an MTU rule that another NLB's client rule on the same group still
/// relies on (the rule identity is shared, so only one of them can hold it), hand it over:
/// re-authorize it under the other load balancer's description.
fn hand_over_mtu(observed: &[IngressRule], lb: &str, changes: &mut RuleChanges) {
    for revoked in changes.revoke.clone() {
        let is_mtu = revoked
            .description
            .as_deref()
            .and_then(parse_nlb_rule_description)
            .is_some_and(|(kind, _)| kind == NlbRuleKind::Mtu);
        let RuleSource::Cidr(cidr) = &revoked.source else {
            continue;
        };
        if !is_mtu
            || changes
                .authorize
                .iter()
                .any(|r| r.protocol == "icmp" && r.source == revoked.source)
        {
            continue;
        }
        let heir = observed.iter().find_map(|rule| {
            let (kind, owner) = parse_nlb_rule_description(rule.description.as_deref()?)?;
            (kind == NlbRuleKind::Client && owner != lb && rule.source == revoked.source)
                .then_some(owner)
        });
        if let Some(heir) = heir {
            changes.authorize.push(IngressRule::mtu(
                cidr,
                Some(&nlb_rule_description(NlbRuleKind::Mtu, heir)),
            ));
        }
    }
}

/// How one load balancer's rules are recognised on node groups.
#[derive(Debug, Clone, Copy)]
pub enum Ownership<'a> {
    /// Classic ELB: all-traffic rules whose source is one of these groups.
    ClbSource(&'a [String]),
    /// NLB: rules described `kubernetes.io/rule/nlb/*=<lb>`.
    Nlb(&'a str),
}

impl Ownership<'_> {
    fn owns(&self, rule: &IngressRule) -> bool {
        match self {
            Ownership::ClbSource(groups) => {
                matches!(&rule.source, RuleSource::Group(g) if groups.contains(g))
            }
            Ownership::Nlb(lb) => is_nlb_rule_of(lb)(rule),
        }
    }
}

/// Per group, the changes that give `node_groups` exactly `desired` (as far as this load
/// balancer owns rules) and strip this load balancer's rules from every other observed group.
pub fn plan_node_groups(
    groups: &[ObservedGroup],
    node_groups: &BTreeSet<String>,
    desired: &[IngressRule],
    ownership: Ownership<'_>,
) -> BTreeMap<String, RuleChanges> {
    let mut plan = BTreeMap::new();
    for group in groups {
        let wanted: &[IngressRule] = if node_groups.contains(&group.id) {
            desired
        } else {
            &[]
        };
        let mut changes = diff_rules(&group.ingress, wanted, |r| ownership.owns(r));
        if let Ownership::Nlb(lb) = ownership {
            hand_over_mtu(&group.ingress, lb, &mut changes);
        }
        if !changes.is_empty() {
            plan.insert(group.id.clone(), changes);
        }
    }
    plan
}

/// The node-group rule changes a Classic ELB needs: all traffic from its `primary` group on
/// the backend instances' node groups, and no rule from that group anywhere else among
/// `observed_groups`.
pub fn clb_node_rules_plan(
    instances: &BTreeMap<String, InstanceInfo>,
    observed_groups: &[ObservedGroup],
    cluster_tag: &str,
    primary: &str,
) -> Result<BTreeMap<String, RuleChanges>, AwsError> {
    let node_groups = node_groups(instances, observed_groups, cluster_tag)?;
    Ok(plan_node_groups(
        observed_groups,
        &node_groups,
        &[IngressRule::from_group(primary)],
        Ownership::ClbSource(&[primary.to_string()]),
    ))
}

/// The one managed group of each instance (upstream rules: the single cluster-tagged group,
/// else the only group).
pub fn node_groups(
    instances: &BTreeMap<String, InstanceInfo>,
    groups: &[ObservedGroup],
    cluster_tag: &str,
) -> Result<BTreeSet<String>, AwsError> {
    let tagged: BTreeSet<String> = groups
        .iter()
        .filter(|g| g.tags.contains_key(cluster_tag))
        .map(|g| g.id.clone())
        .collect();
    let mut result = BTreeSet::new();
    for info in instances.values() {
        match node_group_for_instance(&info.security_groups, &tagged) {
            Ok(Some(group)) => {
                result.insert(group);
            }
            Ok(None) => tracing::warn!(instance = %info.id, "instance has no security group"),
            Err(message) => {
                return Err(AwsError::Invalid(format!(
                    "instance {}: {message}",
                    info.id
                )));
            }
        }
    }
    Ok(result)
}

/// Reads the cluster-tagged groups (in `vpc` when known) and any of `ids` not among them:
/// one call, two when some node group is untagged.
pub async fn observe_groups(
    clients: &Clients,
    cluster_tag: &str,
    vpc: Option<&str>,
    ids: &BTreeSet<String>,
) -> Result<Vec<ObservedGroup>, AwsError> {
    let mut filters = vec![ec2_filter("tag-key", [cluster_tag])];
    if let Some(vpc) = vpc {
        filters.push(ec2_filter("vpc-id", [vpc]));
    }
    let mut groups = describe_groups(clients, Some(filters), None).await?;
    let missing: Vec<String> = ids
        .iter()
        .filter(|id| !groups.iter().any(|g| &g.id == *id))
        .cloned()
        .collect();
    if !missing.is_empty() {
        groups.extend(describe_groups(clients, None, Some(missing)).await?);
    }
    Ok(groups)
}

/// One (paginated) DescribeSecurityGroups.
pub async fn describe_groups(
    clients: &Clients,
    filters: Option<Vec<aws_sdk_ec2::types::Filter>>,
    ids: Option<Vec<String>>,
) -> Result<Vec<ObservedGroup>, AwsError> {
    let mut groups = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = PageTokens::default();
    loop {
        let response = clients
            .calls
            .run(ops::DESCRIBE_SECURITY_GROUPS, || {
                clients
                    .ec2
                    .describe_security_groups()
                    .set_filters(filters.clone())
                    .set_group_ids(ids.clone())
                    .set_next_token(token.clone())
                    .send()
            })
            .await;
        let response = match response {
            Ok(r) => r,
            Err(e) if e.has_code(&["InvalidGroup.NotFound"]) => return Ok(groups),
            Err(e) => return Err(e),
        };
        groups.extend(
            response
                .security_groups()
                .iter()
                .filter_map(ObservedGroup::from_sdk),
        );
        token = pages.next(ops::DESCRIBE_SECURITY_GROUPS.name, response.next_token())?;
        if token.is_none() {
            return Ok(groups);
        }
    }
}

/// Applies one group's rule changes: revocations first, then authorizations. AWS refuses a
/// whole request when one of its permissions is already there (`InvalidPermission.Duplicate`)
/// or already gone (`InvalidPermission.NotFound`) — which happens when another load balancer's
/// reconcile got there first with a rule of the same identity (the shared MTU rule) — so such a
/// request is repeated one permission at a time, and only the permissions that are really
/// already done are skipped.
pub async fn apply_rule_changes(
    clients: &Clients,
    group: &str,
    changes: &RuleChanges,
) -> Result<(), AwsError> {
    const GONE: &[&str] = &["InvalidPermission.NotFound", "InvalidGroup.NotFound"];
    const THERE: &[&str] = &["InvalidPermission.Duplicate"];
    if !changes.revoke.is_empty() {
        let revoke = |rules: Vec<IngressRule>| async move {
            let permissions: Vec<_> = rules.iter().map(IngressRule::to_permission).collect();
            clients
                .calls
                .run(ops::REVOKE_INGRESS, || {
                    clients
                        .ec2
                        .revoke_security_group_ingress()
                        .group_id(group)
                        .set_ip_permissions(Some(permissions.clone()))
                        .send()
                })
                .await
                .map(|_| ())
        };
        one_by_one_on(GONE, &changes.revoke, revoke).await?;
    }
    if !changes.authorize.is_empty() {
        let authorize = |rules: Vec<IngressRule>| async move {
            let permissions: Vec<_> = rules.iter().map(IngressRule::to_permission).collect();
            clients
                .calls
                .run(ops::AUTHORIZE_INGRESS, || {
                    clients
                        .ec2
                        .authorize_security_group_ingress()
                        .group_id(group)
                        .set_ip_permissions(Some(permissions.clone()))
                        .send()
                })
                .await
                .map(|_| ())
        };
        one_by_one_on(THERE, &changes.authorize, authorize).await?;
    }
    Ok(())
}

/// Runs `call` for all `rules` at once; when that fails with one of `done_codes` (the request
/// was refused as a whole because part of it is already done), runs it for each rule alone,
/// skipping those that fail with `done_codes`.
async fn one_by_one_on<F, Fut>(
    done_codes: &[&str],
    rules: &[IngressRule],
    call: F,
) -> Result<(), AwsError>
where
    F: Fn(Vec<IngressRule>) -> Fut,
    Fut: std::future::Future<Output = Result<(), AwsError>>,
{
    match call(rules.to_vec()).await {
        Ok(()) => return Ok(()),
        Err(e) if e.has_code(done_codes) && rules.len() > 1 => {}
        Err(e) if e.has_code(done_codes) => return Ok(()),
        Err(e) => return Err(e),
    }
    for rule in rules {
        match call(vec![rule.clone()]).await {
            Ok(()) => {}
            Err(e) if e.has_code(done_codes) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(cidrs: &[&str], protocol: &str, health: &[u16]) -> NlbNodeRuleInputs {
        NlbNodeRuleInputs {
            client_protocol: protocol.into(),
            client_ports: BTreeSet::from([30080]),
            health_ports: health.iter().copied().collect(),
            client_cidrs: cidrs.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn seed_table_rules() {
        let vpc = vec!["10.0.0.0/16".to_string()];
        // Cluster policy, open to all, TCP: client rule covers health checks.
        let rules = nlb_node_rules("lb", &inputs(&["0.0.0.0/0"], "tcp", &[30080]), &vpc);
        assert_eq!(
            rules,
            vec![
                IngressRule::mtu("0.0.0.0/0", Some("kubernetes.io/rule/nlb/mtu=lb")),
                IngressRule::port(
                    "tcp",
                    30080,
                    "0.0.0.0/0",
                    Some("kubernetes.io/rule/nlb/client=lb")
                ),
            ]
        );
        // Local policy with source ranges: health rule from the VPC CIDR on the HC node port.
        let rules = nlb_node_rules("lb", &inputs(&["1.2.3.0/24"], "tcp", &[31000]), &vpc);
        assert_eq!(
            rules,
            vec![
                IngressRule::mtu("1.2.3.0/24", Some("kubernetes.io/rule/nlb/mtu=lb")),
                IngressRule::port(
                    "tcp",
                    30080,
                    "1.2.3.0/24",
                    Some("kubernetes.io/rule/nlb/client=lb")
                ),
                IngressRule::port(
                    "tcp",
                    31000,
                    "10.0.0.0/16",
                    Some("kubernetes.io/rule/nlb/health=lb")
                ),
            ]
        );
        // UDP: client rule is UDP, health stays TCP.
        let rules = nlb_node_rules("lb", &inputs(&["0.0.0.0/0"], "udp", &[30080]), &vpc);
        assert!(rules.contains(&IngressRule::port(
            "udp",
            30080,
            "0.0.0.0/0",
            Some("kubernetes.io/rule/nlb/client=lb")
        )));
        assert!(rules.contains(&IngressRule::port(
            "tcp",
            30080,
            "10.0.0.0/16",
            Some("kubernetes.io/rule/nlb/health=lb")
        )));
    }

    fn group(id: &str, ingress: Vec<IngressRule>) -> ObservedGroup {
        ObservedGroup {
            id: id.into(),
            name: id.into(),
            vpc_id: None,
            tags: BTreeMap::new(),
            ingress,
        }
    }

    #[test]
    fn rules_leave_groups_that_no_longer_host_nodes_and_mtu_is_handed_over() {
        let mine = nlb_node_rules("me", &inputs(&["0.0.0.0/0"], "tcp", &[30080]), &[]);
        let other_client = IngressRule::port(
            "tcp",
            30090,
            "0.0.0.0/0",
            Some("kubernetes.io/rule/nlb/client=other"),
        );
        let groups = vec![
            group("sg-node", mine.clone()),
            group("sg-old", {
                let mut r = mine.clone();
                r.push(other_client.clone());
                r
            }),
        ];
        let plan = plan_node_groups(
            &groups,
            &BTreeSet::from(["sg-node".to_string()]),
            &mine,
            Ownership::Nlb("me"),
        );
        assert!(
            !plan.contains_key("sg-node"),
            "converged group must plan nothing"
        );
        let old = &plan["sg-old"];
        assert_eq!(old.revoke.len(), 2);
        assert_eq!(
            old.authorize,
            vec![IngressRule::mtu(
                "0.0.0.0/0",
                Some("kubernetes.io/rule/nlb/mtu=other")
            )]
        );
    }

    #[test]
    fn clb_rules_are_recognised_by_source_group() {
        let lb_groups = vec!["sg-lb".to_string()];
        let groups = vec![
            group("sg-node", vec![]),
            group(
                "sg-stale",
                vec![
                    IngressRule::from_group("sg-lb"),
                    IngressRule::from_group("sg-x"),
                ],
            ),
        ];
        let plan = plan_node_groups(
            &groups,
            &BTreeSet::from(["sg-node".to_string()]),
            &[IngressRule::from_group("sg-lb")],
            Ownership::ClbSource(&lb_groups),
        );
        assert_eq!(
            plan["sg-node"].authorize,
            vec![IngressRule::from_group("sg-lb")]
        );
        assert_eq!(
            plan["sg-stale"].revoke,
            vec![IngressRule::from_group("sg-lb")]
        );
    }
}

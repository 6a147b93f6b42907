//! `kube-lb audit` for AWS: every resource that carries this cluster's ownership, with the
//! Service it was made for, read from a few shared listings (reads only, nothing cached).
//!
//! What is listed, and how its Service is recovered (so that `delete(&service)` removes it):
//! - Classic ELBs and NLBs named `a` + 31 hex digits of a UID and tagged for this cluster
//!   (`kubernetes.io/cluster/<id>`, or the legacy `KubernetesCluster=<id>`): namespace and name
//!   from `kubernetes.io/service-name`, the UID from the name (`a` + UID prefix).
//! - Target groups tagged for this cluster and a Service: the UID from kube-lb's
//!   load-balancer-name tag, else from the NLB of ours they are attached to. Upstream's target
//!   groups (no such tag) that are detached are listed with an empty UID: `delete` finds them by
//!   their name prefix and service-name tag.
//! - The per-load-balancer `k8s-elb-<lb>` security groups tagged for this cluster (they carry no
//!   service-name tag, as upstream's: the Service comes from the load balancer of that name
//!   when it still exists, else only the UID is known).
//! - Node security-group rules: a Classic ELB's all-traffic rule whose source is one of those
//!   groups, and the NLB rules described `kubernetes.io/rule/nlb/<kind>=<lb>`. The MTU rule is
//!   `shared`: its identity serves every NLB with the same client CIDR on that group.
//!
//! A refused or failed read is an error: a shorter list would report resources as absent.

use std::collections::{BTreeMap, BTreeSet};

use aws_smithy_types::date_time::Format;
use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::OwnedResource;
use kube_lb_provider_core::naming::{SERVICE_NAME_TAG, cluster_tag_key};

use crate::clb;
use crate::desired::LB_NAME_TAG;
use crate::discovery::ec2_filter;
use crate::error::AwsError;
use crate::inventory::named_like_ours;
use crate::naming::{NlbRuleKind, parse_nlb_rule_description, target_group_prefix};
use crate::nlb;
use crate::nodes;
use crate::provider::AwsProvider;
use crate::sg::{ObservedGroup, RuleSource};
use crate::tags::LEGACY_CLUSTER_TAG;

/// Kind of a Classic ELB in audit and plan output.
pub const KIND_CLB: &str = "ClassicLoadBalancer";
/// Kind of an NLB.
pub const KIND_NLB: &str = "NetworkLoadBalancer";
/// Kind of a target group.
pub const KIND_TARGET_GROUP: &str = "TargetGroup";
/// Kind of a security group.
pub const KIND_SECURITY_GROUP: &str = "SecurityGroup";
/// Kind of one ingress rule of a security group.
pub const KIND_SECURITY_GROUP_RULE: &str = "SecurityGroupRule";

/// Prefix of the per-Classic-ELB security group names.
const CLB_GROUP_PREFIX: &str = "k8s-elb-";

/// Values per EC2 filter in one request (the API's limit is 200).
const FILTER_VALUES_PER_CALL: usize = 200;

/// One load balancer of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedLb {
    /// Name.
    pub name: String,
    /// ARN (NLB only).
    pub arn: Option<String>,
    /// `CreatedTime`, RFC 3339.
    pub created: Option<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// One target group of the listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedTg {
    /// Name.
    pub name: String,
    /// ARN.
    pub arn: String,
    /// The load balancers it is attached to (ARNs).
    pub load_balancers: Vec<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
}

/// Everything the audit reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Classic ELBs named like ours.
    pub clbs: Vec<ListedLb>,
    /// ELBv2 load balancers named like ours.
    pub nlbs: Vec<ListedLb>,
    /// Target groups named `k8s-…`.
    pub target_groups: Vec<ListedTg>,
    /// Cluster-tagged groups, the known node groups, and every group that references one of
    /// the cluster's `k8s-elb-` groups.
    pub groups: Vec<ObservedGroup>,
}

/// Who the audit considers this cluster.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cluster<'a> {
    /// Cluster ID of the ownership tags.
    pub id: &'a str,
    /// `ElbSecurityGroup` of the cloud config: shared by every Classic ELB, never listed.
    pub elb_security_group: Option<&'a str>,
}

impl Cluster<'_> {
    fn owns(&self, tags: &BTreeMap<String, String>) -> bool {
        tags.contains_key(&cluster_tag_key(self.id))
            || tags.get(LEGACY_CLUSTER_TAG).map(String::as_str) == Some(self.id)
    }
}

/// The Service a service-name tag and a load-balancer name stand for; `None` when the name is
/// not of the UID form.
fn service_of(lb_name: &str, tags: Option<&BTreeMap<String, String>>) -> Option<ServiceKey> {
    if !named_like_ours(lb_name) {
        return None;
    }
    let (namespace, name) = tags
        .and_then(|t| t.get(SERVICE_NAME_TAG))
        .and_then(|s| s.split_once('/'))
        .map(|(ns, n)| (ns.to_string(), n.to_string()))
        .unwrap_or_default();
    Some(ServiceKey {
        namespace,
        name,
        // `load_balancer_name` maps this back to `lb_name`.
        uid: lb_name[1..].to_string(),
    })
}

/// Classifies a listing into owned resources (pure).
pub(crate) fn classify(listing: &Listing, cluster: Cluster<'_>) -> Vec<OwnedResource> {
    let mut owned = Vec::new();
    // The Service of each load balancer of ours, by name, for the resources that only record
    // the load-balancer name.
    let mut services: BTreeMap<&str, ServiceKey> = BTreeMap::new();
    let mut our_nlb_arns: BTreeMap<&str, &str> = BTreeMap::new();
    for (kind, lbs) in [(KIND_CLB, &listing.clbs), (KIND_NLB, &listing.nlbs)] {
        for lb in lbs.iter().filter(|lb| cluster.owns(&lb.tags)) {
            let Some(service) = service_of(&lb.name, Some(&lb.tags)) else {
                continue;
            };
            if let Some(arn) = &lb.arn {
                our_nlb_arns.insert(arn, &lb.name);
            }
            services.insert(&lb.name, service.clone());
            owned.push(OwnedResource {
                kind: kind.to_string(),
                name: lb.name.clone(),
                service,
                created: lb.created.clone(),
                shared: false,
            });
        }
    }
    let service_by_lb = |lb: &str| -> Option<ServiceKey> {
        services.get(lb).cloned().or_else(|| service_of(lb, None))
    };

    for tg in &listing.target_groups {
        if !cluster.owns(&tg.tags) {
            continue;
        }
        let Some((namespace, name)) = tg
            .tags
            .get(SERVICE_NAME_TAG)
            .and_then(|s| s.split_once('/'))
        else {
            continue;
        };
        let attached_to_ours = tg
            .load_balancers
            .iter()
            .find_map(|arn| our_nlb_arns.get(arn.as_str()).copied());
        let uid = match (tg.tags.get(LB_NAME_TAG), attached_to_ours) {
            (Some(lb), _) if named_like_ours(lb) => lb[1..].to_string(),
            (_, Some(lb)) => lb[1..].to_string(),
            _ => String::new(),
        };
        let service = ServiceKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid,
        };
        // `delete` removes a target group through the listeners of its NLB, or finds it by
        // name prefix and tags: kube-lb's by its load-balancer-name tag, upstream's once
        // detached. Others tagged for this cluster are not any Service's to remove.
        let found_by_name = tg.name.starts_with(&target_group_prefix(&service))
            && (tg.tags.contains_key(LB_NAME_TAG) || tg.load_balancers.is_empty());
        let deletable = attached_to_ours.is_some() || found_by_name;
        if !deletable {
            tracing::debug!(target_group = %tg.name, "tagged for this cluster but not removable by a Service's delete; not listed");
            continue;
        }
        owned.push(OwnedResource {
            kind: KIND_TARGET_GROUP.to_string(),
            name: tg.name.clone(),
            service,
            created: None,
            shared: false,
        });
    }

    // The cluster's per-ELB groups, by ID, with the load-balancer name they were made for.
    let mut clb_groups: BTreeMap<&str, &str> = BTreeMap::new();
    for group in &listing.groups {
        let Some(lb) = group.name.strip_prefix(CLB_GROUP_PREFIX) else {
            continue;
        };
        if !named_like_ours(lb)
            || !group.tags.contains_key(&cluster_tag_key(cluster.id))
            || cluster.elb_security_group == Some(group.id.as_str())
        {
            continue;
        }
        let Some(service) = service_by_lb(lb) else {
            continue;
        };
        clb_groups.insert(&group.id, lb);
        owned.push(OwnedResource {
            kind: KIND_SECURITY_GROUP.to_string(),
            name: format!("{} ({})", group.id, group.name),
            service,
            created: None,
            shared: false,
        });
    }

    let mut seen_rules = BTreeSet::new();
    for group in &listing.groups {
        for rule in &group.ingress {
            let (lb, shared) = match (&rule.source, rule.description.as_deref()) {
                (RuleSource::Group(source), _) if clb_groups.contains_key(source.as_str()) => {
                    (clb_groups[source.as_str()], false)
                }
                (_, Some(description)) => match parse_nlb_rule_description(description) {
                    Some((kind, lb)) => (lb, kind == NlbRuleKind::Mtu),
                    None => continue,
                },
                _ => continue,
            };
            let Some(service) = service_by_lb(lb) else {
                continue;
            };
            let name = format!("{} {rule}", group.id);
            if seen_rules.insert(name.clone()) {
                owned.push(OwnedResource {
                    kind: KIND_SECURITY_GROUP_RULE.to_string(),
                    name,
                    service,
                    created: None,
                    shared,
                });
            }
        }
    }
    owned.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    owned
}

fn created(time: Option<&aws_smithy_types::DateTime>) -> Option<String> {
    time.and_then(|t| t.fmt(Format::DateTime).ok())
}

/// Reads everything the audit classifies: load balancers and target groups from paged
/// listings with tags in batches of 20, and the security groups in at most a few filtered
/// listings. Nothing is cached and nothing in the provider's shared listings is used or marked.
pub(crate) async fn read(provider: &AwsProvider) -> Result<Listing, AwsError> {
    let clients = provider.clients_ref();
    let mut listing = Listing::default();

    let descriptions = clb::io::describe_all(clients).await?;
    let names: Vec<String> = descriptions
        .iter()
        .filter_map(|lb| lb.load_balancer_name())
        .filter(|name| named_like_ours(name))
        .map(str::to_string)
        .collect();
    let mut tags = clb::io::read_tags_of(clients, &names).await?;
    for lb in &descriptions {
        let Some(name) = lb.load_balancer_name() else {
            continue;
        };
        // A load balancer deleted between the two calls has no tags entry: it is gone.
        if let Some(tags) = tags.remove(name) {
            listing.clbs.push(ListedLb {
                name: name.to_string(),
                arn: None,
                created: created(lb.created_time()),
                tags,
            });
        }
    }

    let lbs = nlb::io::describe_all_lbs(clients).await?;
    let target_groups = nlb::io::describe_all_target_groups(clients).await?;
    // (name, ARN, created) of the ELBv2 load balancers named like ours.
    let lbs: Vec<(String, String, Option<String>)> = lbs
        .iter()
        .filter(|lb| lb.load_balancer_name().is_some_and(named_like_ours))
        .filter_map(|lb| {
            Some((
                lb.load_balancer_name()?.to_string(),
                lb.load_balancer_arn()?.to_string(),
                created(lb.created_time()),
            ))
        })
        .collect();
    // Upstream's and kube-lb's target-group names start `k8s-` (aws.md §2.4).
    let tgs: Vec<ListedTg> = target_groups
        .iter()
        .filter(|tg| {
            tg.target_group_name()
                .is_some_and(|n| n.starts_with("k8s-"))
        })
        .filter_map(|tg| {
            Some(ListedTg {
                name: tg.target_group_name()?.to_string(),
                arn: tg.target_group_arn()?.to_string(),
                load_balancers: tg.load_balancer_arns().to_vec(),
                tags: BTreeMap::new(),
            })
        })
        .collect();
    let arns: Vec<String> = lbs
        .iter()
        .map(|(_, arn, _)| arn.clone())
        .chain(tgs.iter().map(|tg| tg.arn.clone()))
        .collect();
    let mut tags = nlb::io::read_tags(clients, &arns).await?;
    for (name, arn, created) in lbs {
        let tags = tags.remove(&arn).unwrap_or_default();
        listing.nlbs.push(ListedLb {
            name,
            arn: Some(arn),
            created,
            tags,
        });
    }
    for mut tg in tgs {
        tg.tags = tags.remove(&tg.arn).unwrap_or_default();
        listing.target_groups.push(tg);
    }

    let known = provider.discovery_ref().known_instance_groups();
    let mut groups =
        nodes::observe_groups(clients, &provider.cluster_tag_key(), None, &known).await?;
    // Classic ELB rules may sit on node groups without the cluster tag: those that reference
    // one of the cluster's `k8s-elb-` groups (as `delete` finds them).
    let clb_groups: Vec<String> = groups
        .iter()
        .filter(|g| g.name.starts_with(CLB_GROUP_PREFIX))
        .map(|g| g.id.clone())
        .collect();
    for chunk in clb_groups.chunks(FILTER_VALUES_PER_CALL) {
        let referencing = nodes::describe_groups(
            clients,
            Some(vec![ec2_filter("ip-permission.group-id", chunk.iter())]),
            None,
        )
        .await?;
        for group in referencing {
            if !groups.iter().any(|g| g.id == group.id) {
                groups.push(group);
            }
        }
    }
    listing.groups = groups;
    Ok(listing)
}

/// Every resource this provider owns in the account and region.
pub(crate) async fn owned_resources(
    provider: &AwsProvider,
) -> Result<Vec<OwnedResource>, AwsError> {
    let listing = read(provider).await?;
    let cluster = Cluster {
        id: provider.cluster_id(),
        elb_security_group: provider.config_ref().elb_security_group.as_deref(),
    };
    let owned = classify(&listing, cluster);
    tracing::debug!(
        resources = owned.len(),
        load_balancers = listing.clbs.len() + listing.nlbs.len(),
        target_groups = listing.target_groups.len(),
        groups = listing.groups.len(),
        "audited the cluster's AWS resources"
    );
    Ok(owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sg::IngressRule;

    const LB1: &str = "a0123456789abcdef0123456789abcde";
    const LB2: &str = "a1111111111111111111111111111111";

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ours(service: &str) -> BTreeMap<String, String> {
        tags(&[
            ("kubernetes.io/cluster/c", "owned"),
            ("kubernetes.io/service-name", service),
        ])
    }

    fn lb(name: &str, arn: Option<&str>, tags: BTreeMap<String, String>) -> ListedLb {
        ListedLb {
            name: name.into(),
            arn: arn.map(str::to_string),
            created: Some("2026-01-01T00:00:00Z".into()),
            tags,
        }
    }

    fn group(id: &str, name: &str, tagged: bool, ingress: Vec<IngressRule>) -> ObservedGroup {
        ObservedGroup {
            id: id.into(),
            name: name.into(),
            vpc_id: Some("vpc-1".into()),
            tags: if tagged {
                tags(&[("kubernetes.io/cluster/c", "owned")])
            } else {
                BTreeMap::new()
            },
            ingress,
        }
    }

    fn service(ns: &str, name: &str, lb: &str) -> ServiceKey {
        ServiceKey {
            namespace: ns.into(),
            name: name.into(),
            uid: lb[1..].into(),
        }
    }

    fn cluster() -> Cluster<'static> {
        Cluster {
            id: "c",
            elb_security_group: Some("sg-shared"),
        }
    }

    /// (kind, name, namespace/name, uid, shared) of each resource.
    fn summary(owned: &[OwnedResource]) -> Vec<(String, String, String, String, bool)> {
        owned
            .iter()
            .map(|r| {
                (
                    r.kind.clone(),
                    r.name.clone(),
                    r.service.to_string(),
                    r.service.uid.clone(),
                    r.shared,
                )
            })
            .collect()
    }

    #[test]
    fn load_balancers_are_ours_by_cluster_tag_and_uid_name() {
        let listing = Listing {
            clbs: vec![
                lb(LB1, None, ours("ns/web")),
                // Another cluster's, a name not of the UID form, no ownership tag at all.
                lb(LB2, None, tags(&[("kubernetes.io/cluster/other", "owned")])),
                lb("my-own-elb", None, ours("ns/web")),
                lb("a2222222222222222222222222222222", None, BTreeMap::new()),
            ],
            nlbs: vec![lb(
                "a3333333333333333333333333333333",
                Some("arn:lb3"),
                tags(&[
                    ("KubernetesCluster", "c"),
                    ("kubernetes.io/service-name", "ns/api"),
                ]),
            )],
            ..Listing::default()
        };
        let owned = classify(&listing, cluster());
        assert_eq!(
            summary(&owned),
            vec![
                (
                    KIND_CLB.into(),
                    LB1.into(),
                    "ns/web".into(),
                    LB1[1..].into(),
                    false
                ),
                (
                    KIND_NLB.into(),
                    "a3333333333333333333333333333333".into(),
                    "ns/api".into(),
                    "3333333333333333333333333333333".into(),
                    false
                ),
            ]
        );
        assert!(owned.iter().all(|r| r.created.is_some()));
        for r in &owned {
            assert_eq!(
                kube_lb_provider_core::naming::load_balancer_name(&r.service.uid),
                r.name,
                "delete(&service) finds the load balancer by this name"
            );
        }
    }

    #[test]
    fn target_groups_take_their_uid_from_the_lb_name_tag_or_their_nlb() {
        let prefix = "k8s-ns-api-";
        let mut with_lb_tag = ours("ns/api");
        with_lb_tag.insert(LB_NAME_TAG.into(), LB2.into());
        let tg = |name: &str, lbs: &[&str], tags: BTreeMap<String, String>| ListedTg {
            name: name.into(),
            arn: format!("arn:{name}"),
            load_balancers: lbs.iter().map(|s| s.to_string()).collect(),
            tags,
        };
        let listing = Listing {
            nlbs: vec![lb(LB1, Some("arn:lb1"), ours("ns/api"))],
            target_groups: vec![
                // kube-lb's, its NLB gone (moto keeps a stale ARN): the tag names it.
                tg(&format!("{prefix}1"), &["arn:gone"], with_lb_tag),
                // upstream's, attached to our NLB.
                tg(&format!("{prefix}2"), &["arn:lb1"], ours("ns/api")),
                // upstream's, detached: only namespace/name are known.
                tg(&format!("{prefix}3"), &[], ours("ns/api")),
                // upstream's, attached to a load balancer that is not ours: not removable.
                tg(&format!("{prefix}4"), &["arn:other"], ours("ns/api")),
                // named for another Service than its tag says: `delete` would not find it.
                tg("k8s-ns-other-5", &[], ours("ns/api")),
                // another cluster's.
                tg(
                    &format!("{prefix}6"),
                    &[],
                    tags(&[
                        ("kubernetes.io/cluster/d", "owned"),
                        ("kubernetes.io/service-name", "ns/api"),
                    ]),
                ),
            ],
            ..Listing::default()
        };
        let owned = classify(&listing, cluster());
        let tgs: Vec<_> = summary(&owned)
            .into_iter()
            .filter(|r| r.0 == KIND_TARGET_GROUP)
            .map(|r| (r.1, r.3))
            .collect();
        assert_eq!(
            tgs,
            vec![
                (format!("{prefix}1"), LB2[1..].to_string()),
                (format!("{prefix}2"), LB1[1..].to_string()),
                (format!("{prefix}3"), String::new()),
            ]
        );
    }

    #[test]
    fn groups_and_node_rules_belong_to_the_load_balancer_they_name() {
        let clb_group = format!("k8s-elb-{LB1}");
        let listing = Listing {
            clbs: vec![lb(LB1, None, ours("ns/web"))],
            groups: vec![
                group(
                    "sg-lb1",
                    &clb_group,
                    true,
                    vec![IngressRule::port("tcp", 80, "0.0.0.0/0", None)],
                ),
                // The same name without the cluster tag, and the shared ElbSecurityGroup.
                group("sg-untagged", &format!("k8s-elb-{LB2}"), false, vec![]),
                group("sg-shared", &format!("k8s-elb-{LB2}"), true, vec![]),
                group(
                    "sg-nodes",
                    "nodes",
                    true,
                    vec![
                        IngressRule::from_group("sg-lb1"),
                        IngressRule::from_group("sg-someone"),
                        IngressRule::port(
                            "tcp",
                            30080,
                            "0.0.0.0/0",
                            Some(&format!("kubernetes.io/rule/nlb/client={LB2}")),
                        ),
                        IngressRule::mtu(
                            "0.0.0.0/0",
                            Some(&format!("kubernetes.io/rule/nlb/mtu={LB2}")),
                        ),
                        // Upstream's MTU rule names no load balancer; a foreign rule.
                        IngressRule::mtu("10.0.0.0/8", Some("kubernetes.io/rule/nlb/mtu")),
                        IngressRule::port("tcp", 22, "10.0.0.0/8", Some("ssh")),
                    ],
                ),
            ],
            ..Listing::default()
        };
        let owned = classify(&listing, cluster());
        let lb2 = service("", "", LB2).uid;
        assert_eq!(
            summary(&owned)
                .into_iter()
                .filter(|r| r.0 != KIND_CLB)
                .collect::<Vec<_>>(),
            vec![
                (
                    KIND_SECURITY_GROUP.into(),
                    format!("sg-lb1 ({clb_group})"),
                    "ns/web".into(),
                    LB1[1..].into(),
                    false
                ),
                (
                    KIND_SECURITY_GROUP_RULE.into(),
                    "sg-nodes all from sg-lb1".into(),
                    "ns/web".into(),
                    LB1[1..].into(),
                    false
                ),
                (
                    KIND_SECURITY_GROUP_RULE.into(),
                    "sg-nodes icmp/3-4 from 0.0.0.0/0".into(),
                    "/".into(),
                    lb2.clone(),
                    true
                ),
                (
                    KIND_SECURITY_GROUP_RULE.into(),
                    "sg-nodes tcp/30080 from 0.0.0.0/0".into(),
                    "/".into(),
                    lb2,
                    false
                ),
            ]
        );
    }
}

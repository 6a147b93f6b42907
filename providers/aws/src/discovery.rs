//! Discovery as upstream does it, minus the account-wide scans: instances by ID from each
//! Node's `spec.providerID`, subnets of the VPC (one per zone, by tags and public routes) or
//! the `subnets` annotation, and the VPC CIDRs. Results are cached so a resync reads nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_ec2::types::Filter;
use kube_lb_provider_core::EnvironmentCause;

use crate::calls::ops;
use crate::clients::Clients;
use crate::error::AwsError;
use kube_lb_provider_core::PageTokens;

/// The instance ID in a provider ID such as `aws:///us-east-1a/i-0abc` (or `aws://us-east-1a/i-…`).
pub fn instance_id_from_provider_id(provider_id: &str) -> Option<&str> {
    let rest = provider_id.strip_prefix("aws://")?;
    let last = rest.rsplit('/').next()?;
    (last.starts_with("i-") && last.len() > 2).then_some(last)
}

/// What the provider needs to know about a node's instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    /// `i-…`.
    pub id: String,
    /// VPC.
    pub vpc_id: Option<String>,
    /// Security groups attached to the instance.
    pub security_groups: Vec<String>,
}

/// A subnet with what selection needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetInfo {
    /// `subnet-…`.
    pub id: String,
    /// Availability zone.
    pub zone: String,
    /// IPv4 CIDR.
    pub cidr: Option<String>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Has a route to an internet gateway.
    pub public: bool,
}

impl SubnetInfo {
    /// The subnet as EC2 describes it (`None` without an ID); `public` as the caller decided.
    fn from_sdk(subnet: &aws_sdk_ec2::types::Subnet, public: bool) -> Option<SubnetInfo> {
        Some(SubnetInfo {
            id: subnet.subnet_id()?.to_string(),
            zone: subnet.availability_zone().unwrap_or_default().to_string(),
            cidr: subnet.cidr_block().map(str::to_string),
            tags: tags_of(subnet.tags()),
            public,
        })
    }
}

/// Picks one subnet per zone (aws.md §2.6): subnets tagged for this cluster or for no cluster;
/// internet-facing LBs only use public subnets; ties broken by the role tag, then the cluster
/// tag, then the smaller ID. Sorted by zone.
pub fn select_subnets(subnets: &[SubnetInfo], cluster_tag: &str, internal: bool) -> Vec<String> {
    let role_tag = if internal {
        "kubernetes.io/role/internal-elb"
    } else {
        "kubernetes.io/role/elb"
    };
    let mut best: BTreeMap<&str, &SubnetInfo> = BTreeMap::new();
    let rank = |s: &SubnetInfo| {
        (
            !s.tags.contains_key(role_tag),
            !s.tags.contains_key(cluster_tag),
            s.id.clone(),
        )
    };
    for subnet in subnets {
        let other_cluster = subnet
            .tags
            .keys()
            .any(|k| k.starts_with("kubernetes.io/cluster/") && k != cluster_tag);
        if (other_cluster && !subnet.tags.contains_key(cluster_tag))
            || (!internal && !subnet.public)
        {
            continue;
        }
        match best.get(subnet.zone.as_str()) {
            Some(current) if rank(current) <= rank(subnet) => {}
            _ => {
                best.insert(subnet.zone.as_str(), subnet);
            }
        }
    }
    best.values().map(|s| s.id.clone()).collect()
}

struct Timed<T> {
    value: T,
    at: Instant,
}

/// Discovered subnets per (VPC, internal).
type SubnetCache = HashMap<(String, bool), Timed<Vec<SubnetInfo>>>;

/// Cached discovery results.
#[derive(Default)]
pub struct Discovery {
    instances: Mutex<HashMap<String, Timed<InstanceInfo>>>,
    subnets: Mutex<SubnetCache>,
    vpc_cidrs: Mutex<HashMap<String, Vec<String>>>,
}

impl std::fmt::Debug for Discovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

fn tags_of(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    let mut builder = Filter::builder().name(name);
    for value in values {
        builder = builder.values(value);
    }
    builder.build()
}

impl Discovery {
    /// Instance details for `ids`, describing only those not cached (or older than `ttl`), by
    /// ID: never an unfiltered DescribeInstances.
    pub async fn instances(
        &self,
        clients: &Clients,
        ids: &BTreeSet<String>,
        ttl: Duration,
    ) -> Result<BTreeMap<String, InstanceInfo>, AwsError> {
        let missing: Vec<String> = {
            let cache = self.instances.lock().map_err(|_| poisoned())?;
            ids.iter()
                .filter(|id| cache.get(*id).is_none_or(|t| t.at.elapsed() > ttl))
                .cloned()
                .collect()
        };
        if !missing.is_empty() {
            let mut found = Vec::new();
            for chunk in missing.chunks(500) {
                let mut token: Option<String> = None;
                let mut pages = PageTokens::default();
                loop {
                    let response = clients
                        .calls
                        .run(ops::DESCRIBE_INSTANCES, || {
                            clients
                                .ec2
                                .describe_instances()
                                .set_instance_ids(Some(chunk.to_vec()))
                                .set_next_token(token.clone())
                                .send()
                        })
                        .await;
                    let response = match response {
                        Ok(r) => r,
                        // A terminated instance makes the whole call fail; the node will be
                        // deleted soon, so look the others up one batch at a time instead.
                        Err(e) if e.has_code(&["InvalidInstanceID.NotFound"]) => {
                            tracing::warn!(error = %e, "some node instances do not exist");
                            break;
                        }
                        Err(e) => return Err(e),
                    };
                    for reservation in response.reservations() {
                        for instance in reservation.instances() {
                            let Some(id) = instance.instance_id() else {
                                continue;
                            };
                            found.push(InstanceInfo {
                                id: id.to_string(),
                                vpc_id: instance.vpc_id().map(str::to_string),
                                security_groups: instance
                                    .security_groups()
                                    .iter()
                                    .filter_map(|g| g.group_id().map(str::to_string))
                                    .collect(),
                            });
                        }
                    }
                    token = pages.next(ops::DESCRIBE_INSTANCES.name, response.next_token())?;
                    if token.is_none() {
                        break;
                    }
                }
            }
            let mut cache = self.instances.lock().map_err(|_| poisoned())?;
            for info in found {
                cache.insert(
                    info.id.clone(),
                    Timed {
                        value: info,
                        at: Instant::now(),
                    },
                );
            }
        }
        let cache = self.instances.lock().map_err(|_| poisoned())?;
        Ok(ids
            .iter()
            .filter_map(|id| cache.get(id).map(|t| (id.clone(), t.value.clone())))
            .collect())
    }

    /// Every instance security group seen so far (delete uses it to find node rules).
    pub fn known_instance_groups(&self) -> BTreeSet<String> {
        self.instances
            .lock()
            .map(|cache| {
                cache
                    .values()
                    .flat_map(|t| t.value.security_groups.iter().cloned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Subnets for a load balancer in `vpc`, discovered (cached for `ttl`).
    pub async fn discovered_subnets(
        &self,
        clients: &Clients,
        vpc: &str,
        internal: bool,
        ttl: Duration,
    ) -> Result<Vec<SubnetInfo>, AwsError> {
        let key = (vpc.to_string(), internal);
        if let Some(cached) = self
            .subnets
            .lock()
            .map_err(|_| poisoned())?
            .get(&key)
            .filter(|t| t.at.elapsed() <= ttl)
        {
            return Ok(cached.value.clone());
        }
        let response = clients
            .calls
            .run(ops::DESCRIBE_SUBNETS, || {
                clients
                    .ec2
                    .describe_subnets()
                    .filters(filter("vpc-id", [vpc]))
                    .send()
            })
            .await?;
        let mut subnets: Vec<SubnetInfo> = response
            .subnets()
            .iter()
            // Public or not is decided from the route tables below.
            .filter_map(|s| SubnetInfo::from_sdk(s, false))
            .collect();
        if !internal {
            let tables = clients
                .calls
                .run(ops::DESCRIBE_ROUTE_TABLES, || {
                    clients
                        .ec2
                        .describe_route_tables()
                        .filters(filter("vpc-id", [vpc]))
                        .send()
                })
                .await?;
            let mut main_public = false;
            let mut explicit: HashMap<String, bool> = HashMap::new();
            for table in tables.route_tables() {
                let public = table
                    .routes()
                    .iter()
                    .any(|r| r.gateway_id().is_some_and(|g| g.starts_with("igw")));
                for association in table.associations() {
                    if association.main() == Some(true) {
                        main_public = public;
                    }
                    if let Some(subnet) = association.subnet_id() {
                        explicit.insert(subnet.to_string(), public);
                    }
                }
            }
            for subnet in &mut subnets {
                subnet.public = explicit.get(&subnet.id).copied().unwrap_or(main_public);
            }
        }
        self.subnets.lock().map_err(|_| poisoned())?.insert(
            key,
            Timed {
                value: subnets.clone(),
                at: Instant::now(),
            },
        );
        Ok(subnets)
    }

    /// Resolves the `subnets` annotation: IDs and `Name` tag values; every entry must match.
    pub async fn annotated_subnets(
        &self,
        clients: &Clients,
        vpc: Option<&str>,
        wanted: &[String],
    ) -> Result<Vec<SubnetInfo>, AwsError> {
        let (ids, names): (Vec<&String>, Vec<&String>) =
            wanted.iter().partition(|s| s.starts_with("subnet-"));
        let mut found: Vec<SubnetInfo> = Vec::new();
        let mut queries: Vec<Vec<Filter>> = Vec::new();
        if !ids.is_empty() {
            queries.push(vec![filter("subnet-id", ids.iter().map(|s| s.as_str()))]);
        }
        if !names.is_empty() {
            let mut filters = vec![filter("tag:Name", names.iter().map(|s| s.as_str()))];
            if let Some(vpc) = vpc {
                filters.push(filter("vpc-id", [vpc]));
            }
            queries.push(filters);
        }
        for filters in queries {
            let response = clients
                .calls
                .run(ops::DESCRIBE_SUBNETS, || {
                    clients
                        .ec2
                        .describe_subnets()
                        .set_filters(Some(filters.clone()))
                        .send()
                })
                .await?;
            found.extend(
                response
                    .subnets()
                    .iter()
                    .filter_map(|s| SubnetInfo::from_sdk(s, true)),
            );
        }
        if found.len() != wanted.len() {
            // The named subnets may still be on their way (created by the same pipeline as
            // the Service): retried, not a user error.
            return Err(AwsError::Environment {
                cause: EnvironmentCause::MissingDependency,
                message: format!(
                    "aws-load-balancer-subnets: expected to find {} subnets, but found {}",
                    wanted.len(),
                    found.len()
                ),
            });
        }
        Ok(found)
    }

    /// The IPv4 CIDRs of a VPC (cached for the process lifetime: they only grow).
    pub async fn vpc_cidrs(&self, clients: &Clients, vpc: &str) -> Result<Vec<String>, AwsError> {
        if let Some(cidrs) = self.vpc_cidrs.lock().map_err(|_| poisoned())?.get(vpc) {
            return Ok(cidrs.clone());
        }
        let response = clients
            .calls
            .run(ops::DESCRIBE_VPCS, || {
                clients.ec2.describe_vpcs().vpc_ids(vpc).send()
            })
            .await?;
        let mut cidrs: Vec<String> = Vec::new();
        for v in response.vpcs() {
            for association in v.cidr_block_association_set() {
                if let Some(cidr) = association.cidr_block() {
                    cidrs.push(cidr.to_string());
                }
            }
            if cidrs.is_empty()
                && let Some(cidr) = v.cidr_block()
            {
                cidrs.push(cidr.to_string());
            }
        }
        cidrs.sort();
        cidrs.dedup();
        self.vpc_cidrs
            .lock()
            .map_err(|_| poisoned())?
            .insert(vpc.to_string(), cidrs.clone());
        Ok(cidrs)
    }
}

fn poisoned() -> AwsError {
    AwsError::Unexpected("a discovery cache lock was poisoned".to_string())
}

/// The EC2 filter helper, shared with the other modules.
pub(crate) fn ec2_filter(
    name: &str,
    values: impl IntoIterator<Item = impl Into<String>>,
) -> Filter {
    filter(name, values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids() {
        let cases = [
            (
                "aws:///us-east-1a/i-0123456789abcdef0",
                Some("i-0123456789abcdef0"),
            ),
            ("aws://us-east-1a/i-abc", Some("i-abc")),
            ("aws:///i-abc", Some("i-abc")),
            ("gce://p/z/i-abc", None),
            ("aws:///us-east-1a/", None),
            ("aws:///us-east-1a/i-", None),
        ];
        for (input, want) in cases {
            assert_eq!(instance_id_from_provider_id(input), want, "{input}");
        }
    }

    fn subnet(id: &str, zone: &str, public: bool, tags: &[&str]) -> SubnetInfo {
        SubnetInfo {
            id: id.into(),
            zone: zone.into(),
            cidr: None,
            tags: tags
                .iter()
                .map(|t| (t.to_string(), "1".to_string()))
                .collect(),
            public,
        }
    }

    #[test]
    fn subnet_selection_per_zone() {
        let c = "kubernetes.io/cluster/c";
        let subnets = vec![
            subnet("subnet-b1", "b", true, &[]),
            subnet("subnet-a2", "a", true, &["kubernetes.io/role/elb"]),
            subnet("subnet-a1", "a", true, &[]),
            subnet(
                "subnet-c1",
                "c",
                false,
                &["kubernetes.io/role/internal-elb", c],
            ),
            subnet("subnet-c2", "c", true, &["kubernetes.io/cluster/other"]),
            subnet("subnet-b0", "b", true, &[c]),
        ];
        assert_eq!(
            select_subnets(&subnets, c, false),
            vec!["subnet-a2".to_string(), "subnet-b0".into()]
        );
        // Internal: private subnets qualify; the public-LB role tag does not count.
        assert_eq!(
            select_subnets(&subnets, c, true),
            vec![
                "subnet-a1".to_string(),
                "subnet-b0".into(),
                "subnet-c1".into()
            ]
        );
        assert!(select_subnets(&[], c, false).is_empty());
    }
}

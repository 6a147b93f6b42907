//! `AwsProvider`: observe → plan → apply for Classic ELBs and NLBs, plus resumable delete.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_ec2::types::{ResourceType, TagSpecification};
use kube_lb_annotations::{AwsLoadBalancerKind, LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::naming::{cluster_tag_key, load_balancer_name};
use kube_lb_provider_core::{
    BackendNode, CallCounter, EnvironmentCause, LoadBalancerIngress, LoadBalancerProvider,
    LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};

use crate::calls::{Calls, ops};
use crate::clb;
use crate::clb::plan::{ClbAction, ClbDesired};
use crate::clients::{Clients, load_sdk_config};
use crate::config::{CloudConfig, NlbSecurityGroupMode};
use crate::desired::{self, Context, Placement};
use crate::discovery::{Discovery, InstanceInfo, instance_id_from_provider_id, select_subnets};
use crate::error::AwsError;
use crate::inventory::Inventory;
use crate::naming::{clb_security_group_description, clb_security_group_name};
use crate::nlb;
use crate::nlb::plan::{NlbAction, NlbDesired, NlbObserved, ObservedListener, ObservedTg};
use crate::nodes::{self, Ownership};
use crate::sg::{ObservedGroup, RuleChanges, diff_rules};
use crate::tags::security_group_tags;

/// What the last full reconcile of a load balancer established, so a resync with an unchanged
/// spec only reads what nodes change (instances / targets).
#[derive(Debug, Clone)]
enum Verified {
    Clb {
        fingerprint: u64,
        at: Instant,
        desired: ClbDesired,
    },
    Nlb {
        fingerprint: u64,
        at: Instant,
        desired: NlbDesired,
        arn: String,
        dns_name: Option<String>,
        target_groups: Vec<String>,
    },
}

/// The AWS provider.
#[derive(Debug)]
pub struct AwsProvider {
    clients: Clients,
    config: CloudConfig,
    cluster_id: String,
    discovery: Discovery,
    verified: Mutex<HashMap<String, Verified>>,
    /// Listings the first pass after a start (and each full resync wave) shares.
    inventory: Inventory,
    /// One ensure or delete at a time, as the GCP and Azure providers do: Services share the
    /// node security groups, and a rule of one identity (the MTU rule) is handed from one NLB
    /// to another, so two Services' read-plan-write of those groups must not interleave (seen
    /// in the chaos suite: a hand-over to an NLB whose delete had already read the groups left
    /// its rule behind).
    sync: tokio::sync::Mutex<()>,
}

/// The backend instances of one load balancer, as `ensure` and `kube-lb plan` both read them.
#[derive(Debug, Clone)]
pub(crate) struct BackendInstances {
    /// Instance details by ID.
    pub instances: BTreeMap<String, InstanceInfo>,
    /// Every security group of those instances: where the node groups are chosen from.
    pub candidate_groups: BTreeSet<String>,
    /// The instance IDs (the load balancer's desired targets).
    pub ids: BTreeSet<String>,
}

fn status(hostname: Option<String>) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: hostname
            .map(|h| LoadBalancerIngress {
                ip: None,
                hostname: Some(h),
                ip_mode: None,
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

fn fingerprint(spec: &LoadBalancerSpec, groups: &BTreeSet<String>) -> u64 {
    let mut hasher = DefaultHasher::new();
    format!("{spec:?}").hash(&mut hasher);
    groups.hash(&mut hasher);
    hasher.finish()
}

impl AwsProvider {
    /// Builds the provider from the standard AWS configuration chain (region, credentials,
    /// `AWS_ENDPOINT_URL*`) and an optional cloud-config file. Every AWS call is counted on
    /// `counter` (the binary's `/metrics` observe it).
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster_name: &kube_lb_provider_core::ClusterName,
        counter: CallCounter,
    ) -> Result<AwsProvider, AwsError> {
        let config = CloudConfig::load(path)?;
        let sdk = load_sdk_config().await?;
        Ok(AwsProvider::with_counter(
            &sdk,
            config,
            cluster_name,
            counter,
        ))
    }

    /// Builds the provider from an explicit SDK configuration (tests point it at moto), with a
    /// call counter of its own (read it with [`AwsProvider::call_counter`]).
    pub fn new(sdk: &SdkConfig, config: CloudConfig, cluster_name: &str) -> AwsProvider {
        AwsProvider::with_counter(sdk, config, cluster_name, CallCounter::new())
    }

    /// Like [`AwsProvider::new`], counting every call on `counter`.
    pub fn with_counter(
        sdk: &SdkConfig,
        config: CloudConfig,
        cluster_name: &str,
        counter: CallCounter,
    ) -> AwsProvider {
        let calls = Calls::new(config.rate_limits.clone(), config.retry, counter);
        let cluster_id = config
            .cluster_id
            .clone()
            .unwrap_or_else(|| cluster_name.to_string());
        AwsProvider {
            clients: Clients::new(sdk, calls, config.request_timeout),
            config,
            cluster_id,
            discovery: Discovery::default(),
            verified: Mutex::new(HashMap::new()),
            inventory: Inventory::default(),
            sync: tokio::sync::Mutex::new(()),
        }
    }

    /// The call counter every AWS call is recorded on, by operation label
    /// (`elb:CreateLoadBalancer`) and kind (attach metric observers with
    /// [`CallCounter::observe`], or compare [`CallCounter::snapshot`]s in tests).
    pub fn call_counter(&self) -> CallCounter {
        self.clients.calls.counter().clone()
    }

    /// The SDK clients (tests read AWS state back through them).
    pub fn clients(&self) -> &Clients {
        &self.clients
    }

    /// The cluster ID used in ownership tags.
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    fn cluster_tag(&self) -> String {
        cluster_tag_key(&self.cluster_id)
    }

    pub(crate) fn context<'a>(&'a self, lb_name: &'a str) -> Context<'a> {
        Context {
            cluster_id: &self.cluster_id,
            legacy_tag: self.config.legacy_cluster_tag,
            lb_name,
        }
    }

    fn cached(&self, name: &str) -> Option<Verified> {
        self.verified.lock().ok().and_then(|v| v.get(name).cloned())
    }

    fn remember(&self, name: &str, verified: Option<Verified>) {
        if verified.is_none() {
            self.inventory.forget(name);
        }
        if let Ok(mut map) = self.verified.lock() {
            match verified {
                Some(v) => map.insert(name.to_string(), v),
                None => map.remove(name),
            };
        }
    }

    /// The instances behind `backends` that this Service's load balancer serves (nodes its
    /// target-node labels accept, with an AWS provider ID), with their security groups.
    pub(crate) async fn backend_instances(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<BackendInstances, AwsError> {
        let ids: BTreeSet<String> = backends
            .iter()
            .filter(|node| self.accepts_node(spec, node))
            .filter_map(|node| {
                let id = node
                    .provider_id
                    .as_deref()
                    .and_then(instance_id_from_provider_id);
                if id.is_none() {
                    tracing::debug!(node = %node.name, "node has no AWS provider ID yet; skipped");
                }
                id.map(str::to_string)
            })
            .collect();
        let instances = self
            .discovery
            .instances(&self.clients, &ids, self.config.full_resync)
            .await?;
        Ok(BackendInstances {
            candidate_groups: instances
                .values()
                .flat_map(|i| i.security_groups.iter().cloned())
                .collect(),
            ids: instances.keys().cloned().collect(),
            instances,
        })
    }

    pub(crate) fn vpc(
        &self,
        instances: &BTreeMap<String, InstanceInfo>,
        fallback: Option<&str>,
    ) -> Result<String, AwsError> {
        self.config
            .vpc
            .clone()
            .or_else(|| instances.values().find_map(|i| i.vpc_id.clone()))
            .or_else(|| fallback.map(str::to_string))
            .ok_or_else(|| {
                AwsError::Environment {
                    cause: EnvironmentCause::MissingDependency,
                    message: "cannot determine the VPC: no node has an AWS instance yet; set VPC in the cloud config"
                        .to_string(),
                }
            })
    }

    pub(crate) async fn subnets(
        &self,
        spec: &LoadBalancerSpec,
        vpc: &str,
        internal: bool,
    ) -> Result<Vec<String>, AwsError> {
        let aws = desired::aws_spec(spec)?;
        if !aws.subnets.is_empty() {
            let mut found = self
                .discovery
                .annotated_subnets(&self.clients, Some(vpc), &aws.subnets)
                .await?;
            found.sort_by(|a, b| (&a.zone, &a.id).cmp(&(&b.zone, &b.id)));
            return Ok(found.into_iter().map(|s| s.id).collect());
        }
        let all = self
            .discovery
            .discovered_subnets(&self.clients, vpc, internal, self.config.full_resync)
            .await?;
        let chosen = select_subnets(&all, &self.cluster_tag(), internal);
        if !chosen.is_empty() {
            return Ok(chosen);
        }
        match &self.config.subnet_id {
            Some(subnet) => {
                tracing::warn!(
                    vpc,
                    subnet,
                    "no tagged or public subnet found; using SubnetID"
                );
                Ok(vec![subnet.clone()])
            }
            None => Err(AwsError::Environment {
                cause: EnvironmentCause::MissingDependency,
                message: "could not find any suitable subnets for creating the ELB".to_string(),
            }),
        }
    }

    /// Finds or creates `k8s-elb-<name>` and converges its ingress rules. Returns its ID and
    /// whether it was just created. A group of that name tagged for another cluster is a
    /// [`AwsError::NameTaken`]; one a lost `CreateSecurityGroup` response left is adopted.
    /// `known`: the groups already read in this pass (every group kube-lb owns in the VPC
    /// carries the cluster tag, so the Service's own group is among them when it exists and is
    /// tagged); `None` reads the group by name.
    async fn ensure_clb_group(
        &self,
        spec: &LoadBalancerSpec,
        name: &str,
        vpc: &str,
        known: Option<&[ObservedGroup]>,
    ) -> Result<String, AwsError> {
        match self.ensure_clb_group_once(spec, name, vpc, known).await {
            // Created meanwhile (by our own earlier attempt whose response was lost): the
            // second pass finds it, checks its owner and adopts it.
            Err(e) if e.has_code(&["InvalidGroup.Duplicate"]) => {
                tracing::info!(
                    lb = name,
                    "security group exists after a lost create; adopting it"
                );
                // Read by name this time: an untagged group is not among the known ones.
                self.ensure_clb_group_once(spec, name, vpc, None).await
            }
            other => other,
        }
    }

    async fn ensure_clb_group_once(
        &self,
        spec: &LoadBalancerSpec,
        name: &str,
        vpc: &str,
        known: Option<&[ObservedGroup]>,
    ) -> Result<String, AwsError> {
        let group_name = clb_security_group_name(name);
        let rules = desired::clb_security_group_rules(spec)?;
        let existing = match known {
            Some(groups) => groups
                .iter()
                .filter(|g| g.name == group_name && g.vpc_id.as_deref() == Some(vpc))
                .cloned()
                .collect(),
            None => {
                nodes::describe_groups(
                    &self.clients,
                    Some(vec![
                        crate::discovery::ec2_filter("group-name", [group_name.as_str()]),
                        crate::discovery::ec2_filter("vpc-id", [vpc]),
                    ]),
                    None,
                )
                .await?
            }
        };
        let aws = desired::aws_spec(spec)?;
        if let Some(group) = existing.first() {
            crate::owner::check_group(&group.tags, &self.cluster_tag()).map_err(|owner| {
                AwsError::NameTaken {
                    operation: ops::CREATE_SECURITY_GROUP.name,
                    resource: "security group",
                    name: group_name.clone(),
                    owner,
                }
            })?;
            let owner = group.tags.get(&self.cluster_tag());
            if owner.is_none() {
                // Upstream repairs a missing ownership tag the same way.
                let tags = security_group_tags(&self.cluster_id, &BTreeMap::new());
                let tags: Vec<aws_sdk_ec2::types::Tag> = tags
                    .iter()
                    .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
                    .collect();
                self.clients
                    .calls
                    .run(ops::CREATE_TAGS, || {
                        self.clients
                            .ec2
                            .create_tags()
                            .resources(&group.id)
                            .set_tags(Some(tags.clone()))
                            .send()
                    })
                    .await?;
            }
            let changes = diff_rules(&group.ingress, &rules, |_| true);
            self.apply_rules(&group.id, &changes).await?;
            return Ok(group.id.clone());
        }
        let tags = security_group_tags(&self.cluster_id, &aws.additional_tags);
        let spec_tags = TagSpecification::builder()
            .resource_type(ResourceType::SecurityGroup)
            .set_tags(Some(
                tags.iter()
                    .map(|(k, v)| aws_sdk_ec2::types::Tag::builder().key(k).value(v).build())
                    .collect(),
            ))
            .build();
        let description = clb_security_group_description(name, &spec.service);
        let created = self
            .clients
            .calls
            .run(ops::CREATE_SECURITY_GROUP, || {
                self.clients
                    .ec2
                    .create_security_group()
                    .group_name(&group_name)
                    .description(&description)
                    .vpc_id(vpc)
                    .tag_specifications(spec_tags.clone())
                    .send()
            })
            .await?;
        let id = created
            .group_id()
            .ok_or_else(|| AwsError::Unexpected("CreateSecurityGroup returned no ID".into()))?
            .to_string();
        let changes = diff_rules(&[], &rules, |_| true);
        self.apply_rules(&id, &changes).await?;
        Ok(id)
    }

    /// `retire_nlb`: whether this Service's NLB may still exist (a change of kind, or nothing
    /// verified by this process yet). It is then removed before a Classic ELB is created.
    async fn ensure_clb(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
        retire_nlb: bool,
    ) -> Result<LoadBalancerStatus, AwsError> {
        let name = load_balancer_name(&spec.service.uid);
        let BackendInstances {
            instances,
            candidate_groups,
            ids: instance_ids,
        } = self.backend_instances(spec, backends).await?;
        let fp = fingerprint(spec, &candidate_groups);

        if let Some(Verified::Clb {
            fingerprint: cached_fp,
            at,
            desired: cached,
        }) = self.cached(&name)
            && cached_fp == fp
            && at.elapsed() < self.config.full_resync
        {
            let mut desired = cached;
            desired.instances = instance_ids.clone();
            if let Some(observed) = clb::io::describe(&self.clients, &name).await? {
                let actions = clb::plan::plan(Some(&observed), &desired);
                if !actions
                    .iter()
                    .any(|a| matches!(a, ClbAction::Create | ClbAction::Recreate))
                {
                    clb::io::apply(&self.clients, &desired, &actions).await?;
                    self.remember(
                        &name,
                        Some(Verified::Clb {
                            fingerprint: fp,
                            at,
                            desired,
                        }),
                    );
                    return Ok(status(observed.dns_name));
                }
            }
        }

        // The first pass after a start reads from one listing of all load balancers.
        let (observed, listed_tags) = match self
            .inventory
            .take_clb(&self.clients, &name, self.config.full_resync)
            .await?
        {
            Some(Some(mut listed)) => {
                let tags = listed.tags.take();
                (Some(listed), tags)
            }
            Some(None) => (None, None),
            None => (clb::io::describe(&self.clients, &name).await?, None),
        };
        // Someone else's load balancer under this name is left untouched: checked before
        // anything (the security group) is created for it.
        let observed_tags = match &observed {
            Some(_) => {
                let tags = match listed_tags {
                    Some(tags) => tags,
                    None => clb::io::read_tags(&self.clients, &name).await?,
                };
                self.check_owner(
                    &spec.service,
                    &tags,
                    "Classic ELB",
                    ops::ELB_CREATE_LOAD_BALANCER,
                )?;
                Some(tags)
            }
            None => None,
        };
        if observed.is_none() && retire_nlb {
            crate::delete::retire_nlb(self, spec).await?;
        }
        let vpc = self.vpc(
            &instances,
            observed.as_ref().and_then(|o| o.vpc_id.as_deref()),
        )?;
        let internal = spec.scheme == kube_lb_annotations::Scheme::Internal;
        let subnets = self.subnets(spec, &vpc, internal).await?;
        let aws = desired::aws_spec(spec)?;
        // One read serves the Service's own group and the node groups (taken before the own
        // group is created or changed; neither step touches the node groups).
        let observed_groups = if self.config.disable_security_group_ingress {
            None
        } else {
            Some(
                self.inventory
                    .groups(
                        &self.clients,
                        &name,
                        &self.cluster_tag(),
                        &vpc,
                        &candidate_groups,
                        self.config.full_resync,
                    )
                    .await?,
            )
        };
        let primary = match desired::clb_given_groups(
            &aws.security_groups,
            self.config.elb_security_group.as_deref(),
        ) {
            Some(given) => given,
            None => vec![
                self.ensure_clb_group(spec, &name, &vpc, observed_groups.as_deref())
                    .await?,
            ],
        };
        let groups = desired::with_extra_groups(primary, &aws.extra_security_groups);
        let ctx = self.context(&name);
        let desired = desired::clb(
            &ctx,
            spec,
            &Placement {
                subnets,
                security_groups: groups.clone(),
                instances: instance_ids,
            },
        )?;
        let observed = match observed {
            Some(mut seen) => {
                seen.attributes = Some(clb::io::read_attributes(&self.clients, &name).await?);
                seen.tags = observed_tags;
                Some(seen)
            }
            None => None,
        };
        let actions = clb::plan::plan(observed.as_ref(), &desired);
        let created_dns = clb::io::apply(&self.clients, &desired, &actions).await?;

        if let Some(observed_groups) = &observed_groups
            && let Some(primary) = groups.first()
        {
            let plan = nodes::clb_node_rules_plan(
                &instances,
                observed_groups,
                &self.cluster_tag(),
                primary,
            )?;
            for (group, changes) in &plan {
                self.apply_rules(group, changes).await?;
            }
        }

        let dns = created_dns.or_else(|| observed.and_then(|o| o.dns_name));
        self.remember(
            &name,
            Some(Verified::Clb {
                fingerprint: fp,
                at: Instant::now(),
                desired,
            }),
        );
        Ok(status(dns))
    }

    /// `retire_clb`: whether this Service's Classic ELB may still exist (a change of kind, or
    /// nothing verified by this process yet). It is then removed before an NLB is created.
    async fn ensure_nlb(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
        retire_clb: bool,
    ) -> Result<LoadBalancerStatus, AwsError> {
        let name = load_balancer_name(&spec.service.uid);
        let BackendInstances {
            instances,
            candidate_groups,
            ids: instance_ids,
        } = self.backend_instances(spec, backends).await?;
        let fp = fingerprint(spec, &candidate_groups);

        if let Some(Verified::Nlb {
            fingerprint: cached_fp,
            at,
            desired: cached,
            arn,
            dns_name,
            target_groups,
        }) = self.cached(&name)
            && cached_fp == fp
            && at.elapsed() < self.config.full_resync
        {
            // Same spec, node groups and backends as the last verified reconcile: nothing on our
            // side changed, so a resync costs no call at all. Changes made behind our back are
            // found by the next full resync (`FullResyncSeconds`).
            if cached.instances == instance_ids {
                return Ok(status(dns_name));
            }
            let mut desired = cached;
            desired.instances = instance_ids.clone();
            let mut observed = NlbObserved {
                arn: arn.clone(),
                dns_name: dns_name.clone(),
                internal: desired.internal,
                subnet_mappings: desired.subnet_mappings.clone(),
                addresses_reported: false,
                listeners: Vec::new(),
                target_groups: Vec::new(),
                attributes: None,
                tags: None,
            };
            for (listener, tg_arn) in desired.listeners.iter().zip(&target_groups) {
                let targets = nlb::io::read_targets(&self.clients, tg_arn).await?;
                observed.listeners.push(ObservedListener {
                    arn: String::new(),
                    port: listener.port,
                    protocol: listener.protocol.clone(),
                    certificate: listener.certificate.clone(),
                    ssl_policy: listener.ssl_policy.clone(),
                    target_group_arn: Some(tg_arn.clone()),
                });
                let tg = &listener.target_group;
                observed.target_groups.push(ObservedTg {
                    arn: tg_arn.clone(),
                    name: tg.name.clone(),
                    protocol: tg.protocol.clone(),
                    port: tg.port,
                    health: tg.health.clone(),
                    targets: Some(targets),
                    attributes: None,
                    tags: None,
                });
            }
            let actions = nlb::plan::plan(Some(&observed), &desired);
            let only_targets = actions.iter().all(|a| {
                matches!(
                    a,
                    NlbAction::RegisterTargets { .. } | NlbAction::DeregisterTargets { .. }
                )
            });
            if only_targets {
                let vpc = self.vpc(&instances, None).unwrap_or_default();
                nlb::io::apply(&self.clients, &vpc, Some(&arn), &desired, &actions).await?;
                self.remember(
                    &name,
                    Some(Verified::Nlb {
                        fingerprint: fp,
                        at,
                        desired,
                        arn,
                        dns_name: dns_name.clone(),
                        target_groups,
                    }),
                );
                return Ok(status(dns_name));
            }
        }

        // The first pass after a start reads from one listing of all load balancers.
        let (mut observed, prefetched) = match self
            .inventory
            .take_nlb(&self.clients, &name, self.config.full_resync)
            .await?
        {
            Some(Some((listed, prefetched))) => (Some(listed), Some(prefetched)),
            Some(None) => (None, None),
            None => (nlb::io::describe(&self.clients, &name).await?, None),
        };
        if let Some(seen) = observed.as_mut() {
            self.observe_own_nlb(spec, seen, prefetched.as_ref())
                .await?;
        }
        // An NLB found and ours proves there is no Classic ELB of this Service beside it (every
        // NLB create follows a confirmed absence of the ELB), as the converse does for ELBs.
        if retire_clb && observed.is_none() {
            crate::delete::retire_clb(self, spec, false).await?;
        }
        let vpc = self.vpc(&instances, None)?;
        let internal = spec.scheme == kube_lb_annotations::Scheme::Internal;
        let subnets = self.subnets(spec, &vpc, internal).await?;
        let aws = desired::aws_spec(spec)?;
        let groups = if self.config.nlb_security_group_mode == NlbSecurityGroupMode::Managed {
            aws.security_groups.clone()
        } else {
            Vec::new()
        };
        let ctx = self.context(&name);
        let desired = desired::nlb(&ctx, spec, &subnets, groups, instance_ids)?;
        let actions = nlb::plan::plan(observed.as_ref(), &desired);
        let recreated = actions
            .iter()
            .any(|a| matches!(a, NlbAction::Create | NlbAction::Recreate));
        let applied = nlb::io::apply(
            &self.clients,
            &vpc,
            observed.as_ref().map(|o| o.arn.as_str()),
            &desired,
            &actions,
        )
        .await?;
        let arn = applied
            .arn
            .clone()
            .ok_or_else(|| AwsError::Unexpected("NLB has no ARN after apply".into()))?;
        let mut target_groups = Vec::new();
        // Target groups the apply did not create are those of the load balancer it started
        // from: the observed one, or the one it adopted after a lost create response.
        let base = match &applied.adopted {
            Some(adopted) => Some(adopted),
            None if recreated => None,
            None => observed.as_ref(),
        };
        for (index, listener) in desired.listeners.iter().enumerate() {
            let existing = base.and_then(|o| {
                o.listeners
                    .iter()
                    .find(|l| l.port == listener.port)
                    .and_then(|l| l.target_group_arn.clone())
            });
            match applied.new_tgs.get(&index).cloned().or(existing) {
                Some(tg) => target_groups.push(tg),
                None => {
                    return Err(AwsError::Unexpected(format!(
                        "listener {} has no target group after apply",
                        listener.port
                    )));
                }
            }
        }

        if !self.config.disable_security_group_ingress {
            let observed_groups = self
                .inventory
                .groups(
                    &self.clients,
                    &name,
                    &self.cluster_tag(),
                    &vpc,
                    &candidate_groups,
                    self.config.full_resync,
                )
                .await?;
            // The cluster-tagged groups include a Classic ELB's own group left by a kind change
            // interrupted between deleting the ELB and its group: finish that removal.
            let clb_group = clb_security_group_name(&name);
            if observed_groups.iter().any(|g| g.name == clb_group) {
                crate::delete::retire_clb(self, spec, true).await?;
            }
            let plan = self
                .nlb_node_rules_plan(spec, &vpc, &instances, &observed_groups)
                .await?;
            for (group, changes) in &plan {
                self.apply_rules(group, changes).await?;
            }
        }

        let dns_name = applied.dns_name.clone().or_else(|| {
            if recreated {
                None
            } else {
                observed.and_then(|o| o.dns_name)
            }
        });
        self.remember(
            &name,
            Some(Verified::Nlb {
                fingerprint: fp,
                at: Instant::now(),
                desired,
                arn,
                dns_name: dns_name.clone(),
                target_groups,
            }),
        );
        Ok(status(dns_name))
    }

    /// Completes the observation of the NLB found under the Service's name (listeners, target
    /// groups, attributes, tags; what `prefetched` holds is not read again) and checks that it
    /// is this Service's before anything is planned against it.
    pub(crate) async fn observe_own_nlb(
        &self,
        spec: &LoadBalancerSpec,
        seen: &mut NlbObserved,
        prefetched: Option<&nlb::io::Prefetched>,
    ) -> Result<(), AwsError> {
        nlb::io::observe_details(&self.clients, seen, prefetched).await?;
        self.check_owner(
            &spec.service,
            seen.tags.as_ref().unwrap_or(&BTreeMap::new()),
            "NLB",
            ops::V2_CREATE_LOAD_BALANCER,
        )
    }

    /// The node-group rule changes an NLB needs: its client, health-check and path-MTU rules
    /// on the backend instances' node groups, and none of its rules anywhere else among
    /// `observed_groups`.
    pub(crate) async fn nlb_node_rules_plan(
        &self,
        spec: &LoadBalancerSpec,
        vpc: &str,
        instances: &BTreeMap<String, InstanceInfo>,
        observed_groups: &[ObservedGroup],
    ) -> Result<BTreeMap<String, RuleChanges>, AwsError> {
        let name = load_balancer_name(&spec.service.uid);
        let vpc_cidrs = self.discovery.vpc_cidrs(&self.clients, vpc).await?;
        let inputs = desired::nlb_node_rule_inputs(spec)?;
        let rules = nodes::nlb_node_rules(&name, &inputs, &vpc_cidrs);
        let node_groups = nodes::node_groups(instances, observed_groups, &self.cluster_tag())?;
        Ok(nodes::plan_node_groups(
            observed_groups,
            &node_groups,
            &rules,
            Ownership::Nlb(&name),
        ))
    }

    /// A load balancer found under this Service's name is changed only when its tags say it
    /// is this Service's (kube-lb and upstream write the same ownership tags).
    pub(crate) fn check_owner(
        &self,
        service: &ServiceKey,
        observed: &BTreeMap<String, String>,
        resource: &'static str,
        operation: crate::calls::Op,
    ) -> Result<(), AwsError> {
        let ours = crate::tags::resource_tags(
            &self.cluster_id,
            self.config.legacy_cluster_tag,
            service,
            &BTreeMap::new(),
        );
        crate::owner::check_resource(observed, &ours).map_err(|owner| AwsError::NameTaken {
            operation: operation.name,
            resource,
            name: load_balancer_name(&service.uid),
            owner,
        })
    }

    async fn delete_all(&self, service: &ServiceKey) -> Result<(), AwsError> {
        crate::delete::delete(self, service).await
    }

    pub(crate) fn clients_ref(&self) -> &Clients {
        &self.clients
    }

    pub(crate) fn config_ref(&self) -> &CloudConfig {
        &self.config
    }

    pub(crate) fn discovery_ref(&self) -> &Discovery {
        &self.discovery
    }

    pub(crate) fn cluster_tag_key(&self) -> String {
        self.cluster_tag()
    }

    /// Applies one group's rule changes and keeps the shared group listings in step with them.
    pub(crate) async fn apply_rules(
        &self,
        group: &str,
        changes: &crate::sg::RuleChanges,
    ) -> Result<(), AwsError> {
        let result = nodes::apply_rule_changes(&self.clients, group, changes).await;
        match &result {
            Ok(()) => self.inventory.applied(group, changes),
            Err(_) => self.inventory.forget_groups(),
        }
        result
    }

    pub(crate) fn forget(&self, name: &str) {
        self.remember(name, None);
    }
}

fn to_provider_error(service: &ServiceKey, error: AwsError) -> ProviderError {
    tracing::warn!(service = %service, provider = "aws", error = %error, "AWS reconcile failed");
    ProviderError::from(error)
}

#[async_trait]
impl LoadBalancerProvider for AwsProvider {
    fn name(&self) -> &'static str {
        "aws"
    }

    #[tracing::instrument(skip_all, fields(service = %spec.service, provider = "aws", lb = %load_balancer_name(&spec.service.uid)))]
    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let aws = desired::aws_spec(spec).map_err(|e| to_provider_error(&spec.service, e))?;
        let name = load_balancer_name(&spec.service.uid);
        let _sync = self.sync.lock().await;
        // A change of kind is break-before-make: the other kind is removed completely before
        // this one is created or changed (see `crate::delete` for why). Skipped while this
        // process itself last verified the same kind, which it did after this check, and (for
        // a Classic ELB) when the ELB is found and ours: every create of one kind follows a
        // confirmed absence of the other, so the other cannot exist beside it.
        let verified_kind = match self.cached(&name) {
            Some(Verified::Clb { .. }) => Some(AwsLoadBalancerKind::Classic),
            Some(Verified::Nlb { .. }) => Some(AwsLoadBalancerKind::Nlb),
            None => None,
        };
        let result = match aws.kind {
            AwsLoadBalancerKind::ImplementedElsewhere => {
                return Err(ProviderError::ImplementedElsewhere);
            }
            AwsLoadBalancerKind::Classic => {
                let retire_nlb = verified_kind != Some(AwsLoadBalancerKind::Classic);
                self.ensure_clb(spec, backends, retire_nlb).await
            }
            AwsLoadBalancerKind::Nlb => {
                let retire_clb = verified_kind != Some(AwsLoadBalancerKind::Nlb);
                self.ensure_nlb(spec, backends, retire_clb).await
            }
        };
        result.map_err(|e| {
            // A failed apply leaves AWS in an unknown state: re-read everything next time.
            self.forget(&load_balancer_name(&spec.service.uid));
            to_provider_error(&spec.service, e)
        })
    }

    #[tracing::instrument(skip_all, fields(service = %service, provider = "aws", lb = %load_balancer_name(&service.uid)))]
    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let _sync = self.sync.lock().await;
        self.delete_all(service)
            .await
            .map_err(|e| to_provider_error(service, e))
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let name = load_balancer_name(&service.uid);
        if let Some(clb) = clb::io::describe(&self.clients, &name)
            .await
            .map_err(|e| to_provider_error(service, e))?
        {
            return Ok(Some(status(clb.dns_name)));
        }
        Ok(nlb::io::describe(&self.clients, &name)
            .await
            .map_err(|e| to_provider_error(service, e))?
            .map(|nlb| status(nlb.dns_name)))
    }

    /// Reads only, without the sync lock (nothing is written) and without the shared listings
    /// or the verified cache (reading a listing marks it used; the cache skips drift).
    #[tracing::instrument(skip_all, fields(service = %spec.service, provider = "aws", lb = %load_balancer_name(&spec.service.uid)))]
    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        let aws = desired::aws_spec(spec).map_err(|e| to_provider_error(&spec.service, e))?;
        if aws.kind == AwsLoadBalancerKind::ImplementedElsewhere {
            return Err(ProviderError::ImplementedElsewhere);
        }
        crate::dry_run::plan_ensure(self, spec, backends)
            .await
            .map_err(|e| to_provider_error(&spec.service, e))
    }

    #[tracing::instrument(skip_all, fields(service = %service, provider = "aws", lb = %load_balancer_name(&service.uid)))]
    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        crate::dry_run::plan_delete(self, service)
            .await
            .map_err(|e| to_provider_error(service, e))
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        crate::audit::owned_resources(self).await.map_err(|e| {
            tracing::warn!(provider = "aws", error = %e, "AWS audit failed");
            ProviderError::from(e)
        })
    }

    fn accepts_node(&self, spec: &LoadBalancerSpec, node: &BackendNode) -> bool {
        let Some(aws) = spec.provider.as_aws() else {
            return true;
        };
        aws.target_node_labels.iter().all(|(key, value)| {
            node.labels
                .get(key)
                .is_some_and(|have| value.is_empty() || have == value)
        })
    }
}

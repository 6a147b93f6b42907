//! `AwsProvider`: observe → plan → apply for Classic ELBs and NLBs, plus resumable delete.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use async_trait::async_trait;
use aws_config::SdkConfig;
use kube_lb_annotations::{AwsLoadBalancerKind, AwsSpec, LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::converge;
use kube_lb_provider_core::naming::{cluster_tag_key, load_balancer_name};
use kube_lb_provider_core::{
    BackendNode, CallCounter, EnvironmentCause, LoadBalancerProvider, LoadBalancerStatus,
    OwnedResource, PlannedChange, ProviderError,
};

use crate::calls::{Calls, ops};
use crate::clb;
use crate::clb::plan::ClbDesired;
use crate::clients::{Clients, load_sdk_config};
use crate::config::CloudConfig;
use crate::delete::DeleteFlow;
use crate::desired::{self, Context, ServiceSpec};
use crate::discovery::{Discovery, InstanceInfo, instance_id_from_provider_id, select_subnets};
use crate::error::AwsError;
use crate::flow::{EnsureFlow, Kind, Mode, status};
use crate::inventory::Inventory;
use crate::nlb;
use crate::nlb::plan::{NlbDesired, NlbObserved};
use crate::nodes::{self, Ownership};
use crate::sg::{ObservedGroup, RuleChanges};

/// What the last full reconcile of a load balancer established, so a resync with an unchanged
/// spec only reads what nodes change (instances / targets); `flow` reads and writes it.
#[derive(Debug, Clone)]
pub(crate) enum Verified {
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
        let cluster_id = kube_lb_provider_core::cluster::tagging_name(
            config.cluster_id.as_deref(),
            cluster_name,
        );
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

    /// What the last full reconcile of `name` established, if this process did one.
    pub(crate) fn cached(&self, name: &str) -> Option<Verified> {
        self.verified.lock().ok().and_then(|v| v.get(name).cloned())
    }

    /// Records what a reconcile of `name` established.
    pub(crate) fn remember_verified(&self, name: &str, verified: Verified) {
        self.remember(name, Some(verified));
    }

    /// The listings shared by the first pass after a start.
    pub(crate) fn inventory_ref(&self) -> &Inventory {
        &self.inventory
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
        aws: &AwsSpec,
        backends: &[BackendNode],
    ) -> Result<BackendInstances, AwsError> {
        let ids: BTreeSet<String> = backends
            .iter()
            .filter(|node| targets_node(aws, node))
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
        aws: &AwsSpec,
        vpc: &str,
        internal: bool,
    ) -> Result<Vec<String>, AwsError> {
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
        svc: ServiceSpec<'_>,
        vpc: &str,
        instances: &BTreeMap<String, InstanceInfo>,
        observed_groups: &[ObservedGroup],
    ) -> Result<BTreeMap<String, RuleChanges>, AwsError> {
        let name = load_balancer_name(&svc.spec.service.uid);
        let vpc_cidrs = self.discovery.vpc_cidrs(&self.clients, vpc).await?;
        let inputs = desired::nlb_node_rule_inputs(svc)?;
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

fn reconcile_failed(service: &ServiceKey, error: ProviderError) -> ProviderError {
    tracing::warn!(service = %service, provider = "aws", error = %error, "AWS reconcile failed");
    error
}

fn to_provider_error(service: &ServiceKey, error: AwsError) -> ProviderError {
    reconcile_failed(service, ProviderError::from(error))
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
        let svc = ServiceSpec::new(spec).map_err(|e| to_provider_error(&spec.service, e))?;
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
        let (kind, retire_other) = match svc.aws.kind {
            AwsLoadBalancerKind::ImplementedElsewhere => {
                return Err(ProviderError::ImplementedElsewhere);
            }
            AwsLoadBalancerKind::Classic => (
                Kind::Classic,
                verified_kind != Some(AwsLoadBalancerKind::Classic),
            ),
            AwsLoadBalancerKind::Nlb => {
                (Kind::Nlb, verified_kind != Some(AwsLoadBalancerKind::Nlb))
            }
        };
        let mut flow = EnsureFlow::new(self, svc, backends, Mode::Execute, kind, retire_other);
        converge::execute(&mut flow).await.map_err(|error| {
            // A failed apply leaves AWS in an unknown state: re-read everything next time.
            self.forget(&name);
            reconcile_failed(&spec.service, error)
        })
    }

    #[tracing::instrument(skip_all, fields(service = %service, provider = "aws", lb = %load_balancer_name(&service.uid)))]
    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let _sync = self.sync.lock().await;
        self.forget(&load_balancer_name(&service.uid));
        converge::execute(&mut DeleteFlow::new(self, service))
            .await
            .map_err(|error| reconcile_failed(service, error))
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
        let svc = ServiceSpec::new(spec).map_err(|e| to_provider_error(&spec.service, e))?;
        if svc.aws.kind == AwsLoadBalancerKind::ImplementedElsewhere {
            return Err(ProviderError::ImplementedElsewhere);
        }
        let kind = match svc.aws.kind {
            AwsLoadBalancerKind::Nlb => Kind::Nlb,
            _ => Kind::Classic,
        };
        // The other kind is always looked for: nothing here knows what `ensure` verified.
        let mut flow = EnsureFlow::new(self, svc, backends, Mode::Render, kind, true);
        converge::render(&mut flow)
            .await
            .map_err(|error| reconcile_failed(&spec.service, error))
    }

    #[tracing::instrument(skip_all, fields(service = %service, provider = "aws", lb = %load_balancer_name(&service.uid)))]
    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut DeleteFlow::new(self, service))
            .await
            .map_err(|error| reconcile_failed(service, error))
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        crate::audit::owned_resources(self).await.map_err(|e| {
            tracing::warn!(provider = "aws", error = %e, "AWS audit failed");
            ProviderError::from(e)
        })
    }

    fn accepts_node(&self, spec: &LoadBalancerSpec, node: &BackendNode) -> bool {
        // An entry of its own (the controller and the dataplane ask per node); a spec parsed
        // for another cloud restricts nothing.
        spec.provider
            .as_aws()
            .is_none_or(|aws| targets_node(aws, node))
    }
}

/// Whether `node` carries every `aws-load-balancer-target-node-labels` label of the Service
/// (a label given without a value matches any value).
fn targets_node(aws: &AwsSpec, node: &BackendNode) -> bool {
    aws.target_node_labels.iter().all(|(key, value)| {
        node.labels
            .get(key)
            .is_some_and(|have| value.is_empty() || have == value)
    })
}

//! GCP provider: Services of type LoadBalancer as GCE passthrough L4 load balancers.
//!
//! - External (default): forwarding rule `a<uid>` over the port range → target pool (+ legacy
//!   HTTP health check: shared `k8s-<cid>-node` for `Cluster`, per-Service `<lb>` on the
//!   health-check node port for `Local`) + firewalls `k8s-fw-<lb>` and the health-check one.
//! - Internal (`networking.gke.io/load-balancer-type: Internal` or the deprecated
//!   `cloud.google.com/…`): per-zone instance groups `k8s-ig--<cid>` → regional backend service
//!   (fingerprint-checked updates) → health check → INTERNAL forwarding rule (≤ 5 ports, else
//!   all ports), subnet and global-access annotations.
//!
//! Unlike upstream, the IP stays reserved as address `<lb>` for the Service's lifetime instead
//! of being reserved and released on every sync, so a converged Service costs reads only.
//!
//! Every sync is observe → [`plan`] (pure) → apply, written once as a [`flow`] the core's
//! `converge` driver executes (`ensure`, `delete`) or renders (`kube-lb plan`), one Compute
//! call per step; names follow upstream so existing load balancers are adopted. Ownership is the description upstream writes (see [`adopt`]): a
//! create answered `alreadyExists` after its answer was lost adopts its own resource, and a
//! resource under one of the Service's names that belongs to someone else is reported as a
//! user error naming the owner (`ProviderError::OwnedElsewhere`), never rewritten.
//!
//! `kube-lb plan` renders the same steps with reads only (their changes are rendered by
//! [`preview`] when the plan is made); `kube-lb audit` lists every collection the provider writes
//! to and keeps what [`audit`] recognises as the cluster's.

pub mod adopt;
pub mod audit;
pub mod cache;
pub mod client;
pub mod config;
pub mod desired;
pub mod error;
pub mod flow;
pub mod model;
pub mod plan;
pub mod preview;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube_lb_provider_core::converge;
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{
    BackendNode, CallCounter, CloudApi, LoadBalancerIngress, LoadBalancerProvider,
    LoadBalancerSpec, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError, RateLimit,
    RateLimits, RetryPolicy, ServiceKey,
};

pub use client::PollSettings;
pub use config::CloudConfig;
pub use error::GcpError;

use crate::cache::Cache;
use crate::client::{Collection, Gce};
use crate::desired::{Desired, IpRequest, Settings, node_instances};
use crate::error::Failure;
use crate::model::{Firewall, HealthCheck, HealthCheckKind, InstanceGroup, Refs};
use crate::plan::{Action, Observed, plan_delete};
use crate::preview::HealthCheckDelete;

/// The Compute API methods this provider calls (for reviews and the IAM custom role).
pub const API_METHODS: &[&str] = &[
    "compute.addresses.get",
    "compute.addresses.list",
    "compute.addresses.insert",
    "compute.addresses.delete",
    "compute.forwardingRules.get",
    "compute.forwardingRules.insert",
    "compute.forwardingRules.patch",
    "compute.forwardingRules.delete",
    "compute.targetPools.get",
    "compute.targetPools.list",
    "compute.targetPools.insert",
    "compute.targetPools.delete",
    "compute.targetPools.addInstance",
    "compute.targetPools.removeInstance",
    "compute.targetPools.addHealthCheck",
    "compute.targetPools.removeHealthCheck",
    "compute.httpHealthChecks.get",
    "compute.httpHealthChecks.insert",
    "compute.httpHealthChecks.update",
    "compute.httpHealthChecks.delete",
    "compute.healthChecks.get",
    "compute.healthChecks.insert",
    "compute.healthChecks.update",
    "compute.healthChecks.delete",
    "compute.firewalls.get",
    "compute.firewalls.insert",
    "compute.firewalls.update",
    "compute.firewalls.delete",
    "compute.regionBackendServices.get",
    "compute.regionBackendServices.list",
    "compute.regionBackendServices.insert",
    "compute.regionBackendServices.update",
    "compute.regionBackendServices.delete",
    "compute.instanceGroups.get",
    "compute.instanceGroups.insert",
    "compute.instanceGroups.delete",
    "compute.instanceGroups.addInstances",
    "compute.instanceGroups.removeInstances",
    "compute.instanceGroups.listInstances",
    "compute.instances.list",
    "compute.zones.list",
    "compute.regionOperations.get",
    "compute.zoneOperations.get",
    "compute.globalOperations.get",
];

/// The read-only Compute methods `kube-lb plan` and `kube-lb audit` add to [`API_METHODS`]
/// (the paged lists of every collection the provider writes to).
pub const PLAN_AUDIT_API_METHODS: &[&str] = &[
    "compute.forwardingRules.list",
    "compute.addresses.list",
    "compute.targetPools.list",
    "compute.regionBackendServices.list",
    "compute.httpHealthChecks.list",
    "compute.healthChecks.list",
    "compute.firewalls.list",
    "compute.instanceGroups.list",
];

/// IAM permissions those methods need (for a least-privilege custom role).
pub const IAM_PERMISSIONS: &[&str] = &[
    "compute.addresses.create",
    "compute.addresses.createInternal",
    "compute.addresses.delete",
    "compute.addresses.deleteInternal",
    "compute.addresses.get",
    "compute.addresses.list",
    "compute.addresses.use",
    "compute.addresses.useInternal",
    "compute.forwardingRules.create",
    "compute.forwardingRules.delete",
    "compute.forwardingRules.get",
    "compute.forwardingRules.update",
    "compute.targetPools.create",
    "compute.targetPools.delete",
    "compute.targetPools.get",
    "compute.targetPools.update",
    "compute.targetPools.use",
    "compute.httpHealthChecks.create",
    "compute.httpHealthChecks.delete",
    "compute.httpHealthChecks.get",
    "compute.httpHealthChecks.update",
    "compute.httpHealthChecks.useReadOnly",
    "compute.healthChecks.create",
    "compute.healthChecks.delete",
    "compute.healthChecks.get",
    "compute.healthChecks.update",
    "compute.healthChecks.useReadOnly",
    "compute.firewalls.create",
    "compute.firewalls.delete",
    "compute.firewalls.get",
    "compute.firewalls.update",
    "compute.networks.updatePolicy",
    "compute.networks.use",
    "compute.subnetworks.use",
    "compute.regionBackendServices.create",
    "compute.regionBackendServices.delete",
    "compute.regionBackendServices.get",
    "compute.regionBackendServices.update",
    "compute.regionBackendServices.use",
    "compute.instanceGroups.create",
    "compute.instanceGroups.delete",
    "compute.instanceGroups.get",
    "compute.instanceGroups.update",
    "compute.instanceGroups.use",
    "compute.instances.list",
    "compute.instances.use",
    "compute.zones.list",
    "compute.regionOperations.get",
    "compute.zoneOperations.get",
    "compute.globalOperations.get",
];

/// Knobs for tests and the binary; [`Default`] suits production.
#[derive(Debug, Clone)]
pub struct Options {
    /// Counts every Compute call (shared with the controller's metrics).
    pub counter: CallCounter,
    /// Client-side rate limits (upstream: 5 QPS for operation polling).
    pub limits: RateLimits,
    /// Retries of throttled / failed calls.
    pub retry: RetryPolicy,
    /// Operation polling.
    pub poll: PollSettings,
    /// How long node VMs and the Services' shared objects (node health check, its firewall,
    /// instance groups) are trusted from one lookup ([`cache`]).
    pub cache_ttl: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            counter: CallCounter::new(),
            limits: RateLimits::new(RateLimit::new(20, 20))
                .with_family("operations", RateLimit::new(5, 5)),
            retry: RetryPolicy::default(),
            poll: PollSettings::default(),
            cache_ttl: cache::DEFAULT_TTL,
        }
    }
}

/// The GCP load-balancer provider.
#[derive(Debug)]
pub struct GcpProvider {
    gce: Gce,
    settings: Settings,
    node_tags: Vec<String>,
    /// Shared resources (node health check, its firewall, instance groups) are written by
    /// every Service; one sync at a time avoids racing ourselves on them.
    shared: tokio::sync::Mutex<()>,
    /// Node VMs and shared objects, looked up once for all Services.
    cache: Cache,
    /// The shared node health checks are checked for leftovers before the next sync: set at
    /// start and after any failed sync or delete (see [`flow::EnsureFlow`]).
    leftovers_due: std::sync::atomic::AtomicBool,
}

impl GcpProvider {
    /// Reads `gce.conf` and connects. `cluster_name` becomes the `<cid>` of shared resource
    /// names unless the config sets `cluster-id`. Every Compute call is counted on `counter`
    /// (the binary's `/metrics` observe it).
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster_name: &kube_lb_provider_core::ClusterName,
        counter: CallCounter,
    ) -> Result<GcpProvider, GcpError> {
        let Some(path) = path else {
            return Err(GcpError::Config(
                "--cloud-config is required for gcp (project-id, local-zone or region)".into(),
            ));
        };
        let text = std::fs::read_to_string(path).map_err(|source| GcpError::ReadConfig {
            path: path.display().to_string(),
            source,
        })?;
        let config = CloudConfig::parse(&text)?;
        let options = Options {
            counter,
            ..Options::default()
        };
        GcpProvider::from_config(config, cluster_name, options).await
    }

    /// Connects with a parsed config and explicit options.
    pub async fn from_config(
        config: CloudConfig,
        cluster_name: &str,
        options: Options,
    ) -> Result<GcpProvider, GcpError> {
        for key in &config.unknown_keys {
            tracing::warn!(provider = "gcp", key = %key, "unknown cloud-config key ignored");
        }
        let api = CloudApi::new("gcp", options.counter, options.limits, options.retry);
        let refs = Refs {
            project: config.project_id.clone(),
            network_project: config.network_project().to_string(),
            region: config.region.clone(),
            network: config.network_name.clone(),
        };
        let gce = Gce::connect(
            config.api_endpoint.as_deref(),
            config.anonymous(),
            &config.project_id,
            &config.region,
            &refs.network(),
            api,
            options.poll,
            config.request_timeout(),
        )
        .await?;
        let zones = match (&config.local_zone, config.multizone || config.regional) {
            (Some(zone), false) => vec![zone.clone()],
            _ => gce.zones().await.map_err(GcpError::Startup)?,
        };
        let cluster_id =
            desired::sanitise_cluster_id(&kube_lb_provider_core::cluster::tagging_name(
                config.cluster_id.as_deref(),
                cluster_name,
            ));
        Ok(GcpProvider {
            gce,
            settings: Settings {
                refs,
                cluster_id,
                subnetwork: config.subnetwork_name.clone(),
                zones,
                local_zone: config.local_zone.clone(),
            },
            node_tags: config.node_tags.clone(),
            shared: tokio::sync::Mutex::new(()),
            cache: Cache::new(options.cache_ttl),
            leftovers_due: std::sync::atomic::AtomicBool::new(true),
        })
    }

    /// The call counter (every Compute call, by operation and read/mutate).
    pub fn calls(&self) -> &CallCounter {
        self.gce.api().counter()
    }

    /// The zones considered for nodes and instance groups.
    pub fn zones(&self) -> &[String] {
        &self.settings.zones
    }

    /// Looks the backends' VMs up (one filtered list per zone). Returns the backends whose
    /// instance exists (upstream also only warns about nodes it cannot find) and the firewall
    /// target tags: the configured `node-tags`, else per instance the longest network tag that
    /// prefixes its name (upstream's rule), else all its tags.
    async fn resolve_nodes(
        &self,
        backends: &[BackendNode],
    ) -> Result<(Vec<BackendNode>, BTreeSet<String>), ProviderError> {
        let mut zones: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for instance in node_instances(backends, &self.settings) {
            zones.entry(instance.zone).or_default().push(instance.name);
        }
        let mut tags: BTreeSet<String> = self.node_tags.iter().cloned().collect();
        let mut found = BTreeSet::new();
        for (zone, names) in zones {
            // One list per zone whose nodes are not all cached: it asks for every node of the
            // zone, so a node joining refreshes its neighbours for the same single call.
            let listed = match self.cache.instances(&zone, &names, Instant::now()) {
                Some(cached) => cached,
                None => {
                    let listed = self.gce.instance_tags(&zone, &names).await?;
                    self.cache.put_instances(&zone, &listed, Instant::now());
                    listed
                }
            };
            for (name, instance_tags) in listed {
                if self.node_tags.is_empty() {
                    let best = instance_tags
                        .iter()
                        .filter(|t| name.starts_with(t.as_str()))
                        .max_by_key(|t| t.len());
                    match best {
                        Some(tag) => {
                            tags.insert(tag.clone());
                        }
                        None => tags.extend(instance_tags.iter().cloned()),
                    }
                }
                found.insert((zone.clone(), name));
            }
        }
        let existing = backends
            .iter()
            .filter(|node| {
                let instance = desired::node_instance(node, self.settings.local_zone.as_deref());
                let exists = instance
                    .as_ref()
                    .is_some_and(|i| found.contains(&(i.zone.clone(), i.name.clone())));
                if instance.is_some() && !exists {
                    tracing::warn!(provider = "gcp", node = %node.name, "no GCE instance for node; left out");
                }
                exists
            })
            .cloned()
            .collect();
        Ok((existing, tags))
    }

    /// Reads what the Service's load balancer is made of, in one round trip when it exists
    /// in the desired scheme: its own resources (rule, address, firewall, target pool or
    /// backend service, a per-Service health check and its firewall) and, when its health
    /// check is the shared node one, whether a per-Service health check of the same kind is
    /// left over from `Local`. Shared pieces come from the [`cache`].
    ///
    /// Leftovers of the other scheme (its target pool or backend service and health check)
    /// are only looked for when the rule is missing or of the other scheme: the planner
    /// deletes them before it inserts a rule, so a rule of the desired scheme proves they are
    /// gone.
    async fn observe(&self, desired: &Desired) -> Result<Observed, ProviderError> {
        let gce = &self.gce;
        let lb = &desired.lb;
        let user_address = match desired.ip {
            IpRequest::Requested(ip) => gce.address_by_ip(ip).await?,
            IpRequest::Any => None,
        };
        let hc = &desired.health_check;
        let shared_hc = hc.name != *lb;
        let (
            rule,
            address,
            firewall,
            health_check,
            health_check_firewall,
            target_pool,
            backend_service,
            policy_leftover,
        ) = tokio::join!(
            gce.get_rule(lb),
            gce.get_address(lb),
            gce.get_firewall(&desired.firewall.name),
            self.health_check(hc.kind, &hc.name, shared_hc),
            self.health_check_firewall(&desired.health_check_firewall.name, shared_hc),
            async {
                match desired.internal {
                    false => gce.get_target_pool(lb).await,
                    true => Ok(None),
                }
            },
            async {
                match desired.internal {
                    true => gce.get_backend_service(lb).await,
                    false => Ok(None),
                }
            },
            async {
                match shared_hc {
                    true => gce.get_health_check(hc.kind, lb).await.map(|h| h.is_some()),
                    false => Ok(false),
                }
            },
        );
        let rule = rule?;
        let mut observed = Observed {
            address: address?,
            user_address,
            firewall: firewall?,
            health_check: health_check?,
            health_check_firewall: health_check_firewall?,
            target_pool: target_pool?,
            backend_service: backend_service?,
            other_own_health_checks: Vec::new(),
            groups: Vec::new(),
            rule: None,
        };
        if policy_leftover? {
            observed.other_own_health_checks.push(hc.kind);
        }
        if rule.as_ref().is_none_or(|r| r.internal != desired.internal) {
            let other_kind = match hc.kind {
                HealthCheckKind::LegacyHttp => HealthCheckKind::Http,
                HealthCheckKind::Http => HealthCheckKind::LegacyHttp,
            };
            let (pool, service, other_hc) = tokio::join!(
                async {
                    match desired.internal {
                        true => gce.get_target_pool(lb).await,
                        false => Ok(None),
                    }
                },
                async {
                    match desired.internal {
                        false => gce.get_backend_service(lb).await,
                        true => Ok(None),
                    }
                },
                gce.get_health_check(other_kind, lb),
            );
            if let Some(pool) = pool? {
                observed.target_pool = Some(pool);
            }
            if let Some(service) = service? {
                observed.backend_service = Some(service);
            }
            if other_hc?.is_some() {
                observed.other_own_health_checks.push(other_kind);
            }
        }
        observed.rule = rule;
        for group in &desired.groups {
            let have = self.instance_group(&group.zone, &group.name).await?;
            observed.groups.push((group.zone.clone(), have));
        }
        Ok(observed)
    }

    /// The desired health check: a per-Service one is read, the shared node one comes from
    /// the cache when fresh.
    async fn health_check(
        &self,
        kind: HealthCheckKind,
        name: &str,
        shared: bool,
    ) -> Result<Option<HealthCheck>, ProviderError> {
        if !shared {
            return self.gce.get_health_check(kind, name).await;
        }
        if let Some(hit) = self.cache.health_check(kind, name, Instant::now()) {
            return Ok(hit);
        }
        let found = self.gce.get_health_check(kind, name).await?;
        self.cache
            .put_health_check(kind, name, found.clone(), Instant::now());
        Ok(found)
    }

    /// The health-check firewall: cached like its health check when that is shared.
    async fn health_check_firewall(
        &self,
        name: &str,
        shared: bool,
    ) -> Result<Option<Firewall>, ProviderError> {
        if !shared {
            return self.gce.get_firewall(name).await;
        }
        if let Some(hit) = self.cache.firewall(name, Instant::now()) {
            return Ok(hit);
        }
        let found = self.gce.get_firewall(name).await?;
        self.cache.put_firewall(name, found.clone(), Instant::now());
        Ok(found)
    }

    /// A cluster instance group (shared by every internal Service), cached.
    async fn instance_group(
        &self,
        zone: &str,
        name: &str,
    ) -> Result<Option<InstanceGroup>, ProviderError> {
        if let Some(hit) = self.cache.group(zone, name, Instant::now()) {
            return Ok(hit);
        }
        let found = self.gce.get_instance_group(zone, name).await?;
        self.cache
            .put_group(zone, name, found.clone(), Instant::now());
        Ok(found)
    }

    /// Performs one action. "Already gone" deletes succeed; shared pieces in use elsewhere are
    /// left alone.
    async fn apply(&self, action: &Action, lb: &str) -> Result<(), ProviderError> {
        tracing::info!(provider = "gcp", lb, action = %action.label(), "applying");
        let gce = &self.gce;
        let tolerate = |outcome: client::Outcome<()>,
                        operation: &'static str,
                        ok: &dyn Fn(&Failure) -> bool| {
            match outcome? {
                Ok(()) => Ok(()),
                Err(failure) if ok(&failure) => Ok(()),
                Err(failure) => Err(failure.into_provider_error(operation)),
            }
        };
        let gone = |f: &Failure| f.is_not_found();
        let gone_or_shared = |f: &Failure| f.is_not_found() || f.is_in_use();
        match action {
            Action::ReserveAddress(address) => {
                self.created(
                    gce.insert_address(address).await,
                    "addresses.insert",
                    action,
                )
                .await
            }
            Action::DeleteAddress(name) => {
                tolerate(gce.delete_address(name).await, "addresses.delete", &gone)
            }
            Action::DeleteForwardingRule(name) => {
                tolerate(gce.delete_rule(name).await, "forwardingRules.delete", &gone)
            }
            Action::InsertForwardingRule(rule) => {
                self.created(
                    gce.insert_rule(rule).await,
                    "forwardingRules.insert",
                    action,
                )
                .await
            }
            Action::PatchGlobalAccess {
                name,
                allow,
                fingerprint,
            } => Gce::done(
                gce.patch_global_access(name, *allow, fingerprint.as_deref())
                    .await,
                "forwardingRules.patch",
            ),
            // A shared firewall created by another Service's sync meanwhile is adopted too: it
            // carries this cluster's mark.
            Action::InsertFirewall(firewall) => {
                self.created(
                    gce.put_firewall(firewall, false).await,
                    "firewalls.insert",
                    action,
                )
                .await
            }
            Action::UpdateFirewall(firewall) => {
                Gce::done(gce.put_firewall(firewall, true).await, "firewalls.update")
            }
            Action::DeleteFirewall(name) => {
                tolerate(gce.delete_firewall(name).await, "firewalls.delete", &gone)
            }
            Action::InsertHealthCheck(hc) => {
                self.created(
                    gce.put_health_check(hc, false).await,
                    "healthChecks.insert",
                    action,
                )
                .await
            }
            Action::UpdateHealthCheck(hc) => {
                Gce::done(gce.put_health_check(hc, true).await, "healthChecks.update")
            }
            Action::DeleteHealthCheck { kind, name, .. } => {
                self.delete_health_check(*kind, name, lb).await.map(drop)
            }
            Action::InsertTargetPool(pool) => {
                self.created(
                    gce.insert_target_pool(pool).await,
                    "targetPools.insert",
                    action,
                )
                .await
            }
            Action::DeleteTargetPool(name) => tolerate(
                gce.delete_target_pool(name).await,
                "targetPools.delete",
                &gone,
            ),
            Action::AddPoolInstances(pool, instances) => Gce::done(
                gce.pool_instances(pool, instances, true).await,
                "targetPools.addInstance",
            ),
            Action::RemovePoolInstances(pool, instances) => Gce::done(
                gce.pool_instances(pool, instances, false).await,
                "targetPools.removeInstance",
            ),
            Action::SwapPoolHealthCheck { pool, add, remove } => {
                // A pool holds at most one legacy health check: remove before adding.
                if !remove.is_empty() {
                    Gce::done(
                        gce.pool_health_checks(pool, remove, false).await,
                        "targetPools.removeHealthCheck",
                    )?;
                }
                if !add.is_empty() {
                    Gce::done(
                        gce.pool_health_checks(pool, add, true).await,
                        "targetPools.addHealthCheck",
                    )?;
                }
                Ok(())
            }
            Action::InsertInstanceGroup { zone, name } => {
                self.created(
                    gce.insert_instance_group(zone, name).await,
                    "instanceGroups.insert",
                    action,
                )
                .await
            }
            Action::AddGroupInstances {
                zone,
                name,
                instances,
            } => tolerate(
                gce.group_instances(zone, name, instances, true).await,
                "instanceGroups.addInstances",
                // Another Service's ensure added the node to the shared group first.
                &|f: &Failure| f.reason == "memberAlreadyExists",
            ),
            Action::RemoveGroupInstances {
                zone,
                name,
                instances,
            } => tolerate(
                gce.group_instances(zone, name, instances, false).await,
                "instanceGroups.removeInstances",
                &|f: &Failure| f.reason == "memberNotFound",
            ),
            Action::DeleteInstanceGroup { zone, name } => tolerate(
                gce.delete_instance_group(zone, name).await,
                "instanceGroups.delete",
                &gone_or_shared,
            ),
            Action::InsertBackendService(service) => {
                self.created(
                    gce.put_backend_service(service, false).await,
                    "regionBackendServices.insert",
                    action,
                )
                .await
            }
            Action::UpdateBackendService(service) => Gce::done(
                gce.put_backend_service(service, true).await,
                "regionBackendServices.update",
            ),
            Action::DeleteBackendService(name) => tolerate(
                gce.delete_backend_service(name).await,
                "regionBackendServices.delete",
                &gone,
            ),
        }
    }

    /// Deletes the health check alone (its firewall is a step of its own). True when it is
    /// gone; false when GCE answers that something still uses it, which the plan's reads did
    /// not see: nothing was written and the caller plans again.
    async fn delete_health_check(
        &self,
        kind: HealthCheckKind,
        name: &str,
        lb: &str,
    ) -> Result<bool, ProviderError> {
        match self.gce.delete_health_check(kind, name).await? {
            Ok(()) => Ok(true),
            Err(failure) if failure.is_not_found() => Ok(true),
            Err(failure) if failure.is_in_use() => {
                tracing::debug!(provider = "gcp", lb, health_check = %name, "health check still used elsewhere; kept");
                Ok(false)
            }
            Err(failure) => Err(failure.into_provider_error("healthChecks.delete")),
        }
    }

    /// The end of a create. `alreadyExists` (409) means the name is taken: most likely by this
    /// very create, performed by GCE although its answer was lost, so the resource under the
    /// name is read and adopted when its owner mark is ours ([`adopt::adoption`]); a resource
    /// of another owner is an environment error naming it, and is never changed.
    async fn created(
        &self,
        outcome: client::Outcome<()>,
        operation: &'static str,
        action: &Action,
    ) -> Result<(), ProviderError> {
        let failure = match outcome? {
            Ok(()) => return Ok(()),
            Err(failure) if failure.is_conflict() => failure,
            Err(failure) => return Err(failure.into_provider_error(operation)),
        };
        // Boxed: the SDK's read futures are large, and inlining one per create arm into
        // `apply`'s state machine overflows a test thread's stack.
        Box::pin(self.adopt_existing(failure, operation, action)).await
    }

    /// Reads what holds the name a create found taken and adopts it when it is ours.
    async fn adopt_existing(
        &self,
        failure: Failure,
        operation: &'static str,
        action: &Action,
    ) -> Result<(), ProviderError> {
        let gce = &self.gce;
        let (kind, name, wanted, found) = match action {
            Action::ReserveAddress(a) => (
                "address",
                a.name.as_str(),
                a.description.as_str(),
                gce.get_address(&a.name).await?.map(|f| f.description),
            ),
            Action::InsertForwardingRule(r) => (
                "forwarding rule",
                r.name.as_str(),
                r.description.as_str(),
                gce.get_rule(&r.name).await?.map(|f| f.description),
            ),
            Action::InsertFirewall(f) => (
                "firewall",
                f.name.as_str(),
                f.description.as_str(),
                gce.get_firewall(&f.name).await?.map(|f| f.description),
            ),
            Action::InsertHealthCheck(hc) => (
                "health check",
                hc.name.as_str(),
                hc.description.as_str(),
                gce.get_health_check(hc.kind, &hc.name)
                    .await?
                    .map(|f| f.description),
            ),
            Action::InsertTargetPool(p) => (
                "target pool",
                p.name.as_str(),
                p.description.as_str(),
                gce.get_target_pool(&p.name).await?.map(|f| f.description),
            ),
            Action::InsertBackendService(b) => (
                "backend service",
                b.name.as_str(),
                b.description.as_str(),
                gce.get_backend_service(&b.name)
                    .await?
                    .map(|f| f.description),
            ),
            // Instance groups carry no owner mark (upstream and ingress-gce share them); the
            // cluster-scoped name is the ownership.
            Action::InsertInstanceGroup { zone, name } => (
                "instance group",
                name.as_str(),
                "",
                gce.get_instance_group(zone, name)
                    .await?
                    .map(|_| String::new()),
            ),
            _ => return Err(failure.into_provider_error(operation)),
        };
        let Some(found) = found else {
            // 409, then gone: a concurrent delete won; the controller's retry creates it.
            return Err(ProviderError::retryable(
                operation,
                format!("{kind} {name} already existed but is gone now; retrying"),
            ));
        };
        // Health checks (and their firewalls) may also carry upstream's mark, which names the
        // health check itself; their names already hold the cluster ID or the Service UID.
        let health = matches!(action, Action::InsertHealthCheck(_))
            || matches!(action, Action::InsertFirewall(f) if f.name.ends_with("-hc"));
        let decision = if health {
            let upstream = crate::desired::service_description(name);
            adopt::adoption_any(&[wanted, upstream.as_str()], &found)
        } else {
            adopt::adoption(wanted, &found)
        };
        match decision {
            adopt::Adoption::Adopt => {
                tracing::info!(
                    provider = "gcp",
                    kind,
                    name,
                    "already exists and is ours; adopted"
                );
                Ok(())
            }
            adopt::Adoption::Taken { owner } => Err(ProviderError::owned_elsewhere(
                operation,
                format!("{kind} {name}"),
                owner,
            )),
        }
    }

    /// Whether the resource a delete action targets is still there, so that repeating a finished
    /// delete reads instead of issuing DELETEs that can only answer 404.
    async fn still_exists(&self, action: &Action) -> Result<bool, ProviderError> {
        let gce = &self.gce;
        Ok(match action {
            Action::DeleteForwardingRule(name) => gce.get_rule(name).await?.is_some(),
            Action::DeleteAddress(name) => gce.get_address(name).await?.is_some(),
            Action::DeleteTargetPool(name) => gce.get_target_pool(name).await?.is_some(),
            Action::DeleteBackendService(name) => gce.get_backend_service(name).await?.is_some(),
            Action::DeleteFirewall(name) => gce.get_firewall(name).await?.is_some(),
            // A health check whose firewall outlived it (a delete cut short) still needs the
            // action, which tolerates the health check being gone.
            Action::DeleteHealthCheck {
                kind,
                name,
                firewall,
            } => {
                gce.get_health_check(*kind, name).await?.is_some()
                    || gce.get_firewall(firewall).await?.is_some()
            }
            Action::DeleteInstanceGroup { zone, name } => {
                gce.get_instance_group(zone, name).await?.is_some()
            }
            _ => true,
        })
    }

    /// The deletes of shared node health checks (either kind, with their firewalls) that the
    /// cluster's marks call ours and nothing refers to, found with reads only. What was read
    /// is cached for the Services' syncs that follow.
    async fn shared_leftovers(&self) -> Result<Vec<Action>, ProviderError> {
        let name = desired::shared_health_check_name(&self.settings.cluster_id);
        // Only what the cluster's own descriptions mark (kube-lb's, or upstream's) is removed;
        // another cluster's check under the same name is not ours to judge.
        let ours = |description: &str| {
            let marks = [
                serde_json::json!({ "kubernetes.io/cluster-id": self.settings.cluster_id })
                    .to_string(),
                desired::service_description(&name),
            ];
            let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
            adopt::adoption_any(&marks, description) == adopt::Adoption::Adopt
        };
        let mut leftovers = Vec::new();
        for kind in [HealthCheckKind::LegacyHttp, HealthCheckKind::Http] {
            let firewall_name = desired::health_check_firewall_name(kind, &name, "");
            let now = Instant::now();
            let check = self.gce.get_health_check(kind, &name).await?;
            let orphaned = match &check {
                Some(check) => {
                    ours(&check.description)
                        && !self.gce.health_check_referenced(kind, &name).await?
                }
                None => {
                    let firewall = self.gce.get_firewall(&firewall_name).await?;
                    let orphaned = firewall.as_ref().is_some_and(|f| ours(&f.description));
                    self.cache.put_firewall(&firewall_name, firewall, now);
                    orphaned
                }
            };
            self.cache.put_health_check(kind, &name, check, now);
            if orphaned {
                leftovers.push(Action::DeleteHealthCheck {
                    kind,
                    name: name.clone(),
                    firewall: firewall_name,
                });
            }
        }
        Ok(leftovers)
    }

    /// What `delete` does for `service`. A Service always has a UID; an empty one is how
    /// [`LoadBalancerProvider::owned_resources`] records the cluster's shared pieces, so it
    /// stands for those alone (each removed only when nothing uses it).
    fn delete_actions(&self, service: &ServiceKey) -> Vec<Action> {
        let lb = load_balancer_name(&service.uid);
        let actions = plan_delete(&lb, &self.settings.cluster_id, &self.settings.zones);
        if !service.uid.is_empty() {
            return actions;
        }
        actions
            .into_iter()
            .filter(|action| match action {
                Action::DeleteHealthCheck { name, .. } => *name != lb,
                Action::DeleteInstanceGroup { .. } => true,
                _ => false,
            })
            .collect()
    }

    /// Target pools (legacy health checks) or backend services (health checks, instance
    /// groups), other than the Service's own `lb`, that use the resource at `link_suffix`
    /// (`/httpHealthChecks/<name>`, `/zones/<z>/instanceGroups/<name>`).
    async fn used_elsewhere(
        &self,
        users: Collection,
        link_suffix: &str,
        lb: &str,
    ) -> Result<bool, ProviderError> {
        Ok(self.gce.list(users).await?.iter().any(|user| {
            user.name != lb && user.references.iter().any(|r| r.ends_with(link_suffix))
        }))
    }

    /// The steps `delete` makes for `service`, and `plan_delete` shows: each delete whose
    /// resource exists, shared pieces only when nothing else uses them (reads only).
    async fn delete_steps(&self, service: &ServiceKey) -> Result<Vec<Action>, ProviderError> {
        let lb = load_balancer_name(&service.uid);
        let mut actions = Vec::new();
        for action in self.delete_actions(service) {
            let present = match &action {
                // Decided with their firewalls by `effective`.
                Action::DeleteHealthCheck { .. } | Action::DeleteInstanceGroup { .. } => true,
                _ => Box::pin(self.still_exists(&action)).await?,
            };
            if present {
                actions.push(action);
            }
        }
        self.effective(actions, &lb).await
    }

    /// `actions` as the calls that take effect, decided with reads before any runs: a
    /// health-check delete becomes the deletes of what exists and nothing but `lb` uses (the
    /// check and its firewall, or the firewall alone when the check is gone), an instance
    /// group's delete is kept only when the group exists and no other backend service uses
    /// it. Sending a delete that can only be answered "in use" or 404 would be a mutating call
    /// the plan does not show; both `ensure`/`delete` and their plans go through here. A
    /// health-check delete that stays removes the check alone, followed by its firewall's.
    async fn effective(
        &self,
        actions: Vec<Action>,
        lb: &str,
    ) -> Result<Vec<Action>, ProviderError> {
        let effects = self.health_check_deletes(&actions, lb).await?;
        let mut out = Vec::with_capacity(actions.len());
        for action in actions {
            match action {
                Action::DeleteHealthCheck {
                    kind,
                    name,
                    firewall,
                } => match effects.get(&(kind, name.clone())).copied() {
                    // Two calls, two steps: the check, then its firewall.
                    Some(HealthCheckDelete {
                        check: true,
                        firewall: firewall_too,
                    }) => {
                        let firewall_delete = Action::DeleteFirewall(firewall.clone());
                        out.push(Action::DeleteHealthCheck {
                            kind,
                            name,
                            firewall,
                        });
                        if firewall_too {
                            out.push(firewall_delete);
                        }
                    }
                    Some(HealthCheckDelete {
                        check: false,
                        firewall: true,
                    }) => out.push(Action::DeleteFirewall(firewall)),
                    _ => {}
                },
                Action::DeleteInstanceGroup { zone, name } => {
                    let link = format!("/zones/{zone}/instanceGroups/{name}");
                    if self.gce.get_instance_group(&zone, &name).await?.is_some()
                        && !self
                            .used_elsewhere(Collection::BackendServices, &link, lb)
                            .await?
                    {
                        out.push(Action::DeleteInstanceGroup { zone, name });
                    }
                }
                other => out.push(other),
            }
        }
        Ok(out)
    }

    /// For each health-check delete among `actions`, what it would remove (reads only): the
    /// check when it exists and nothing but `lb` uses it, its firewall when it exists and the
    /// check goes (or is gone).
    async fn health_check_deletes(
        &self,
        actions: &[Action],
        lb: &str,
    ) -> Result<BTreeMap<(HealthCheckKind, String), HealthCheckDelete>, ProviderError> {
        let mut effects = BTreeMap::new();
        for action in actions {
            let Action::DeleteHealthCheck {
                kind,
                name,
                firewall,
            } = action
            else {
                continue;
            };
            let exists = self.gce.get_health_check(*kind, name).await?.is_some();
            let in_use = exists && {
                let users = match kind {
                    HealthCheckKind::LegacyHttp => Collection::TargetPools,
                    HealthCheckKind::Http => Collection::BackendServices,
                };
                let link = format!("/{}/{name}", kind.collection());
                self.used_elsewhere(users, &link, lb).await?
            };
            let firewall = !in_use && self.gce.get_firewall(firewall).await?.is_some();
            effects.insert(
                (*kind, name.clone()),
                HealthCheckDelete {
                    check: exists && !in_use,
                    firewall,
                },
            );
        }
        Ok(effects)
    }
}

#[async_trait]
impl LoadBalancerProvider for GcpProvider {
    fn name(&self) -> &'static str {
        "gcp"
    }

    #[tracing::instrument(skip_all, fields(provider = "gcp", service = %spec.service, lb = %load_balancer_name(&spec.service.uid)))]
    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let _shared = self.shared.lock().await;
        let result = converge::execute(&mut flow::EnsureFlow::new(self, spec, backends)).await;
        if result.is_err() {
            // The failure may be a VM or shared object gone behind our back: look again.
            self.cache.clear();
            self.leftovers_due
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }

    #[tracing::instrument(skip_all, fields(provider = "gcp", service = %service, lb = %load_balancer_name(&service.uid)))]
    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let _shared = self.shared.lock().await;
        let result = converge::execute(&mut flow::DeleteFlow::new(self, service)).await;
        if result.is_err() {
            self.cache.clear();
            self.leftovers_due
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        result
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let lb = load_balancer_name(&service.uid);
        Ok(self
            .gce
            .get_rule(&lb)
            .await?
            .map(|rule| LoadBalancerStatus {
                ingress: vec![LoadBalancerIngress {
                    ip: rule.ip,
                    hostname: None,
                    ip_mode: None,
                }],
                ..Default::default()
            }))
    }

    /// The steps `ensure` would run now, rendered by the same flow with reads only. Where GCE
    /// would choose a new IP, the address is phase 1 and the rest is phase 2, shown with
    /// [`preview::IP_CHOSEN_BY_GCE`] and waiting for [`flow::WAITS_FOR_ADDRESS`]. After a
    /// start or a failure the plan begins, like `ensure`, with the removal of shared node
    /// health checks that are the cluster's and unused.
    #[tracing::instrument(skip_all, fields(provider = "gcp", service = %spec.service, lb = %load_balancer_name(&spec.service.uid)))]
    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut flow::EnsureFlow::new(self, spec, backends)).await
    }

    /// The deletions `delete` would make now: each of its steps whose resource exists, with
    /// shared pieces (node health checks, instance groups) only when nothing else uses them.
    #[tracing::instrument(skip_all, fields(provider = "gcp", service = %service, lb = %load_balancer_name(&service.uid)))]
    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut flow::DeleteFlow::new(self, service)).await
    }

    /// Lists every collection the provider writes to (all pages) and keeps what
    /// [`audit::owned`] recognises as this cluster's. Any refused read fails the whole call.
    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        let mut collections = vec![
            Collection::ForwardingRules,
            Collection::Addresses,
            Collection::TargetPools,
            Collection::BackendServices,
            Collection::HttpHealthChecks,
            Collection::HealthChecks,
            Collection::Firewalls,
        ];
        collections.extend(
            self.settings
                .zones
                .iter()
                .map(|zone| Collection::InstanceGroups(zone.clone())),
        );
        let mut listings = Vec::with_capacity(collections.len());
        for collection in collections {
            let items = self.gce.list(collection.clone()).await?;
            listings.push((collection, items));
        }
        let owned = audit::owned(&listings, &self.settings.cluster_id);
        tracing::debug!(
            provider = "gcp",
            owned = owned.len(),
            "listed owned resources"
        );
        Ok(owned)
    }
}

/// The user error `ensure` (and its plan) gives when a resource under one of the Service's
/// names belongs to someone else: never adopted or rewritten, so retrying cannot help.
fn refuse_foreign(desired: &Desired, observed: &Observed) -> Result<(), ProviderError> {
    match adopt::foreign(desired, observed) {
        None => Ok(()),
        Some((kind, name, owner)) => Err(ProviderError::owned_elsewhere(
            "observe",
            format!(
                "{kind} {name} (the name kube-lb uses for Service {})",
                desired.service
            ),
            owner,
        )),
    }
}

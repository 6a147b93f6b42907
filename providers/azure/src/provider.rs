//! [`AzureProvider`]: the ARM reads and writes its flow ([`crate::flow`]) is made of, status and
//! inventory.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube_lb_provider_core::{
    BackendNode, CallCounter, EnvironmentCause, LoadBalancerIngress, LoadBalancerProvider,
    LoadBalancerSpec, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError, RateLimit,
    RateLimits, RetryPolicy, ServiceKey,
};
use tracing::{debug, info, instrument};

use crate::arm::{LoadBalancer, PublicIp, SecurityGroup, Subnet, resource_group_of};
use crate::cache::{ArmCache, Written};
use crate::client::{ArmClient, NetworkClient, PollSettings};
use crate::config::AzureConfig;
use crate::desired::{Desired, FrontendKind, PipChoice, Settings, desired};
use crate::error::AzureError;
use crate::inventory::owned_resources;
use crate::plan::{Action, Observed, owned_child, status_address};

/// Where upstream keeps the cloud config on nodes.
pub const DEFAULT_CLOUD_CONFIG: &str = "/etc/kubernetes/azure.json";

/// Tunables for [`AzureProvider::new`]; the defaults suit production.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// Long-running operation polling.
    pub poll: PollSettings,
    /// Retries of throttled / failed calls.
    pub retry: RetryPolicy,
    /// Counter every call is recorded in.
    pub counter: CallCounter,
    /// Client-side rate limits (families `arm-read`, `arm-write`).
    pub limits: RateLimits,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// How long a read of the shared objects (load balancers, security group, public IP
    /// lists, subnets) serves every Service's sync ([`crate::cache`]).
    pub cache_ttl: Duration,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            poll: PollSettings::default(),
            retry: RetryPolicy::default(),
            counter: CallCounter::new(),
            limits: RateLimits::new(RateLimit::default()),
            request_timeout: Duration::from_secs(60),
            cache_ttl: crate::cache::DEFAULT_TTL,
        }
    }
}

/// The Azure Standard Load Balancer provider.
#[derive(Debug)]
pub struct AzureProvider {
    client: Arc<dyn NetworkClient>,
    pub(crate) settings: Settings,
    counter: CallCounter,
    /// Reconciles of the shared load balancers are serialised, as upstream does: they rewrite
    /// one object, and concurrent writers would only turn into 412 retries.
    lock: tokio::sync::Mutex<()>,
    /// Reads shared by every Service's sync.
    pub(crate) cache: ArmCache,
}

impl AzureProvider {
    /// Reads `path` (default [`DEFAULT_CLOUD_CONFIG`]) and builds a provider for `cluster_name`,
    /// counting every ARM call on `counter` (the binary's `/metrics` observe it).
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster_name: &kube_lb_provider_core::ClusterName,
        counter: CallCounter,
    ) -> Result<AzureProvider, AzureError> {
        let path = path.unwrap_or_else(|| Path::new(DEFAULT_CLOUD_CONFIG));
        let config = AzureConfig::load(path)?;
        let mut options = ProviderOptions {
            counter,
            cache_ttl: config.cache_ttl(),
            ..ProviderOptions::default()
        };
        if let (Some(qps), Some(bucket)) =
            (config.rate_limit_qps_write, config.rate_limit_bucket_write)
        {
            // The configured rate as written (upstream's default is 1 QPS; fractions are legal).
            options.limits = RateLimits::new(RateLimit::default())
                .with_family("arm-write", RateLimit::fractional(qps, bucket));
        }
        if let Some(secs) = config.max_retry_after_seconds {
            options.poll.max_interval = Duration::from_secs(secs);
        }
        AzureProvider::new(&config, cluster_name, options)
    }

    /// A provider talking ARM over HTTP as `config` says.
    pub fn new(
        config: &AzureConfig,
        cluster_name: &str,
        options: ProviderOptions,
    ) -> Result<AzureProvider, AzureError> {
        let client = ArmClient::from_config(config, &options)?;
        let settings = Settings::new(config, cluster_name)?;
        info!(
            provider = "azure",
            endpoint = %config.resource_manager(),
            resource_group = %config.resource_group,
            lb = %settings.lb_base_name,
            "Azure provider configured"
        );
        Ok(AzureProvider {
            client: Arc::new(client),
            settings,
            counter: options.counter,
            lock: tokio::sync::Mutex::new(()),
            cache: ArmCache::new(options.cache_ttl),
        })
    }

    /// A provider over any [`NetworkClient`] (another transport, or a fake).
    pub fn with_client(
        client: Arc<dyn NetworkClient>,
        settings: Settings,
        counter: CallCounter,
    ) -> AzureProvider {
        AzureProvider {
            client,
            settings,
            counter,
            lock: tokio::sync::Mutex::new(()),
            cache: ArmCache::new(crate::cache::DEFAULT_TTL),
        }
    }

    /// The counter every ARM call is recorded in.
    pub fn calls(&self) -> &CallCounter {
        &self.counter
    }

    /// Cluster-wide settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A load balancer, from the cache when `cached` and fresh.
    async fn load_balancer(
        &self,
        rg: &str,
        name: &str,
        cached: bool,
    ) -> Result<Option<Arc<LoadBalancer>>, AzureError> {
        if cached && let Some(hit) = self.cache.load_balancer(rg, name, Instant::now()) {
            return Ok(hit);
        }
        let found = self.client.get_load_balancer(rg, name).await?.map(Arc::new);
        self.cache
            .put_load_balancer(rg, name, found.clone(), Instant::now());
        Ok(found)
    }

    /// The public IPs of a resource group, from the cache when `cached` and fresh.
    async fn public_ips(&self, rg: &str, cached: bool) -> Result<Vec<Arc<PublicIp>>, AzureError> {
        if cached && let Some(hit) = self.cache.public_ips(rg, Instant::now()) {
            return Ok(hit);
        }
        let found: Vec<Arc<PublicIp>> = self
            .client
            .list_public_ips(rg)
            .await?
            .into_iter()
            .map(Arc::new)
            .collect();
        self.cache.put_public_ips(rg, found.clone(), Instant::now());
        Ok(found)
    }

    /// The security group, from the cache when `cached` and fresh.
    async fn security_group(
        &self,
        rg: &str,
        name: &str,
        cached: bool,
    ) -> Result<Option<Arc<SecurityGroup>>, AzureError> {
        if cached && let Some(hit) = self.cache.security_group(rg, name, Instant::now()) {
            return Ok(hit);
        }
        let found = self
            .client
            .get_security_group(rg, name)
            .await?
            .map(Arc::new);
        self.cache
            .put_security_group(rg, name, found.clone(), Instant::now());
        Ok(found)
    }

    /// Whether a subnet exists (a positive answer is cached).
    async fn subnet_exists(&self, rg: &str, vnet: &str, subnet: &str) -> Result<bool, AzureError> {
        if self.cache.subnet_exists(rg, vnet, subnet, Instant::now()) {
            return Ok(true);
        }
        let found: Option<Subnet> = self.client.get_subnet(rg, vnet, subnet).await?;
        if found.is_some() {
            self.cache.put_subnet(rg, vnet, subnet, Instant::now());
        }
        Ok(found.is_some())
    }

    /// Reads what the Service's sync plans from. With `cached`, the shared objects come from
    /// the [`crate::cache`] when fresh: every Service of a pass plans against one read of
    /// them, shared rather than copied. `status` reads afresh.
    pub(crate) async fn observe(
        &self,
        service: &ServiceKey,
        desired: Option<&Desired>,
        cached: bool,
    ) -> Result<Observed, AzureError> {
        let s = &self.settings;
        let mut observed = Observed::default();
        for name in [
            s.lb_name(kube_lb_provider_core::annotations::Scheme::External),
            s.lb_name(kube_lb_provider_core::annotations::Scheme::Internal),
        ] {
            if let Some(lb) = self
                .load_balancer(&s.lb_resource_group, &name, cached)
                .await?
            {
                observed.load_balancers.push(lb);
            }
        }
        let mut groups: BTreeSet<String> = BTreeSet::from([s.resource_group.to_ascii_lowercase()]);
        if let Some(Desired {
            frontend: FrontendKind::Public(choice),
            ..
        }) = desired
        {
            let rg = match choice {
                PipChoice::Managed { rg, .. }
                | PipChoice::Named { rg, .. }
                | PipChoice::ByAddress { rg, .. } => rg,
            };
            groups.insert(rg.to_ascii_lowercase());
        }
        let prefix = kube_lb_provider_core::naming::load_balancer_name(&service.uid);
        for lb in &observed.load_balancers {
            for fe in lb
                .properties
                .frontend_ip_configurations
                .iter()
                .filter(|f| owned_child(&prefix, &f.name))
            {
                if let Some(rg) = fe
                    .properties
                    .public_ip_address
                    .as_ref()
                    .and_then(|p| resource_group_of(&p.id))
                {
                    groups.insert(rg.to_ascii_lowercase());
                }
            }
        }
        for rg in groups {
            observed
                .public_ips
                .extend(self.public_ips(&rg, cached).await?);
        }
        if let Some((rg, name)) = &s.security_group {
            observed.security_group = self.security_group(rg, name, cached).await?;
            if observed.security_group.is_none() && desired.is_some() {
                return Err(AzureError::Environment {
                    cause: EnvironmentCause::MissingDependency,
                    message: format!("security group {name} in resource group {rg} does not exist"),
                });
            }
        }
        if let Some(Desired {
            frontend: FrontendKind::Internal { subnet, .. },
            ..
        }) = desired
            && !self
                .subnet_exists(&s.vnet_resource_group, &s.vnet, subnet)
                .await?
        {
            // The subnet may still be on its way: retried, not a user error.
            return Err(AzureError::Environment {
                cause: EnvironmentCause::MissingDependency,
                message: format!(
                    "subnet {subnet} not found in virtual network {} (resource group {})",
                    s.vnet, s.vnet_resource_group
                ),
            });
        }
        Ok(observed)
    }

    /// Performs one write and takes what it stored into the cache.
    pub(crate) async fn apply(&self, action: &Action) -> Result<(), AzureError> {
        let s = &self.settings;
        let rg = s.lb_resource_group.as_str();
        let written = match action {
            Action::PutPublicIp { rg, pip } => {
                self.client.put_public_ip(rg, pip).await?;
                Written::PublicIps { rg }
            }
            Action::PutLoadBalancer(lb) => {
                let stored = self.client.put_load_balancer(rg, lb).await?;
                Written::LoadBalancer {
                    rg,
                    name: &lb.name,
                    stored: Some(Arc::new(stored)),
                }
            }
            Action::DeleteLoadBalancer { name, etag } => {
                self.client
                    .delete_load_balancer(rg, name, etag.as_deref())
                    .await?;
                Written::LoadBalancer {
                    rg,
                    name,
                    stored: None,
                }
            }
            Action::PutSecurityGroup { rg, nsg } => {
                let stored = self.client.put_security_group(rg, nsg).await?;
                Written::SecurityGroup {
                    rg,
                    stored: Arc::new(stored),
                }
            }
            Action::DeletePublicIp { rg, name, etag } => {
                self.client
                    .delete_public_ip(rg, name, etag.as_deref())
                    .await?;
                Written::PublicIps { rg }
            }
        };
        self.cache.record(written, Instant::now());
        Ok(())
    }

    /// Observes, plans and applies until the plan is empty; returns the final observation.
    ///
    /// Creates are idempotent by construction: every name is deterministic and every write is
    /// a create-or-update PUT carrying `If-None-Match: *` or the etag it was planned from. When
    /// a write took effect but its answer was lost, the in-place retry meets a changed object
    /// (412), and the next round re-reads it and finds the work done (or tagged for another
    /// owner, which `plan` reports as an environment error naming the owner).
    /// Reads everything that may hold a Service's objects, afresh: both cluster load
    /// balancers, the public IPs of the cluster resource group and of every group a frontend
    /// points into, and the security group (`kube-lb audit`).
    async fn observe_all(&self) -> Result<Observed, AzureError> {
        let s = &self.settings;
        let mut observed = Observed::default();
        for scheme in [
            kube_lb_provider_core::annotations::Scheme::External,
            kube_lb_provider_core::annotations::Scheme::Internal,
        ] {
            let name = s.lb_name(scheme);
            if let Some(lb) = self
                .load_balancer(&s.lb_resource_group, &name, false)
                .await?
            {
                observed.load_balancers.push(lb);
            }
        }
        let mut groups: BTreeSet<String> = BTreeSet::from([s.resource_group.to_ascii_lowercase()]);
        groups.extend(
            observed
                .load_balancers
                .iter()
                .flat_map(|lb| lb.properties.frontend_ip_configurations.iter())
                .filter_map(|fe| fe.properties.public_ip_address.as_ref())
                .filter_map(|pip| resource_group_of(&pip.id))
                .map(str::to_ascii_lowercase),
        );
        for rg in groups {
            observed
                .public_ips
                .extend(self.public_ips(&rg, false).await?);
        }
        if let Some((rg, name)) = &s.security_group {
            observed.security_group = self.security_group(rg, name, false).await?;
        }
        Ok(observed)
    }

    fn status_from(&self, service: &ServiceKey, observed: &Observed) -> Option<LoadBalancerStatus> {
        let address = status_address(service, observed)?;
        let ip = address.parse().ok()?;
        Some(LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: Some(ip),
                hostname: None,
                ip_mode: None,
            }],
            ..Default::default()
        })
    }
}

#[async_trait]
impl LoadBalancerProvider for AzureProvider {
    fn name(&self) -> &'static str {
        "azure"
    }

    #[instrument(skip_all, fields(service = %spec.service, provider = "azure"))]
    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let desired = desired(&self.settings, spec, backends)?;
        let _guard = self.lock.lock().await;
        let observed = crate::flow::converge(self, &spec.service, Some(&desired)).await?;
        self.status_from(&spec.service, &observed).ok_or_else(|| {
            ProviderError::from(AzureError::Arm {
                operation: "Status",
                status: 0,
                code: "NoAddress".into(),
                message: format!("frontend {} has no address yet", desired.frontend_name),
            })
        })
    }

    #[instrument(skip_all, fields(service = %service, provider = "azure"))]
    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let _guard = self.lock.lock().await;
        crate::flow::converge(self, service, None).await?;
        Ok(())
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let observed = self.observe(service, None, false).await?;
        Ok(self.status_from(service, &observed))
    }

    /// Plans from the same (cached) reads `ensure` plans from, so a pass over every Service
    /// reads the shared objects once; nothing is written, to ARM or to the cache beyond what
    /// was read.
    #[instrument(skip_all, fields(service = %spec.service, provider = "azure"))]
    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        let desired = desired(&self.settings, spec, backends)?;
        let changes = crate::flow::render(self, &spec.service, Some(&desired)).await?;
        debug!(changes = changes.len(), "planned ensure");
        Ok(changes)
    }

    #[instrument(skip_all, fields(service = %service, provider = "azure"))]
    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        let changes = crate::flow::render(self, service, None).await?;
        debug!(changes = changes.len(), "planned delete");
        Ok(changes)
    }

    #[instrument(skip_all, fields(provider = "azure"))]
    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        let observed = self.observe_all().await?;
        let owned = owned_resources(&self.settings, &observed);
        debug!(resources = owned.len(), "listed owned resources");
        Ok(owned)
    }
}

//! [`OpenStackProvider`]: observe the Service's Octavia load balancer, plan (pure, in
//! [`crate::plan`]), apply with Octavia's asynchronous model: every change is followed by a
//! wait for `ACTIVE`, and a 409 on an immutable (`PENDING_*`) load balancer is waited out and
//! retried, never reported to the user.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::ChangeAction;
use kube_lb_provider_core::{
    BackendNode, CallCounter, CloudApi, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
    RateLimits, RetryPolicy,
};

use crate::client::OpenStackClient;
use crate::config::CloudConfig;
use crate::error::OpenStackError;
use crate::model::{FloatingIp, LoadBalancer};
use crate::plan::{self, Desired, Observed, Ownership, Step};

/// How patiently to wait for a load balancer to leave `PENDING_*`. Upstream polls from 1 s
/// growing by 1.2× for about 270 s.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitSettings {
    /// First pause.
    pub first: Duration,
    /// Growth per poll.
    pub factor: f64,
    /// Longest pause.
    pub max_interval: Duration,
    /// Give up (with a `Pending` error, retried by the controller) after this long.
    pub timeout: Duration,
}

impl Default for WaitSettings {
    fn default() -> Self {
        WaitSettings {
            first: Duration::from_secs(1),
            factor: 1.2,
            max_interval: Duration::from_secs(15),
            timeout: Duration::from_secs(300),
        }
    }
}

/// Tunables apart from `cloud.conf`.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    /// Waiting for `ACTIVE`.
    pub wait: WaitSettings,
    /// In-place retry of transient failures.
    pub retry: RetryPolicy,
    /// Rate limits per service (`keystone`, `octavia`, `neutron`).
    pub limits: RateLimits,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Counts every call.
    pub counter: CallCounter,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            wait: WaitSettings::default(),
            retry: RetryPolicy::default(),
            limits: RateLimits::new(kube_lb_provider_core::RateLimit::new(10, 20)),
            request_timeout: Duration::from_secs(30),
            counter: CallCounter::new(),
        }
    }
}

/// The OpenStack provider: Octavia load balancers, Neutron floating IPs.
#[derive(Debug, Clone)]
pub struct OpenStackProvider {
    client: Arc<OpenStackClient>,
    config: Arc<CloudConfig>,
    cluster: String,
    wait: WaitSettings,
}

/// How many times a change refused with 409 (busy) is retried after waiting for `ACTIVE`.
const BUSY_RETRIES: usize = 3;

impl OpenStackProvider {
    /// A provider for `config`, naming load balancers for `cluster`.
    pub fn new(
        config: CloudConfig,
        cluster: &str,
        options: ProviderOptions,
    ) -> Result<Self, ProviderError> {
        let api = CloudApi::new("openstack", options.counter, options.limits, options.retry);
        let client = OpenStackClient::new(config.global.clone(), api, options.request_timeout)?;
        Ok(OpenStackProvider {
            client: Arc::new(client),
            config: Arc::new(config),
            cluster: cluster.to_string(),
            wait: options.wait,
        })
    }

    /// Reads `cloud.conf` at `path` (required for OpenStack) and builds the provider.
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster: &str,
        counter: CallCounter,
    ) -> Result<Self, ProviderError> {
        let internal = |message: String| ProviderError::Internal {
            message,
            source: None,
        };
        let path = path.ok_or_else(|| {
            internal("--cloud openstack needs --cloud-config pointing at a cloud.conf".into())
        })?;
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", path.display())))?;
        let config =
            CloudConfig::parse(&text).map_err(|e| internal(format!("{}: {e}", path.display())))?;
        Self::new(
            config,
            cluster,
            ProviderOptions {
                counter,
                ..ProviderOptions::default()
            },
        )
    }

    /// The client (for tests and tools).
    pub fn client(&self) -> &OpenStackClient {
        &self.client
    }

    /// Our load balancer for `service`, if one exists: found by name, ignoring ones being
    /// deleted; `Err` when the name is taken by someone else's.
    async fn find(&self, service: &ServiceKey) -> Result<Option<LoadBalancer>, ProviderError> {
        let name = plan::load_balancer_name(&self.cluster, service);
        let mut found: Vec<LoadBalancer> = self
            .client
            .load_balancers_named(&name)
            .await?
            .into_iter()
            .filter(|lb| {
                !matches!(
                    lb.provisioning_status.as_str(),
                    "DELETED" | "PENDING_DELETE"
                )
            })
            .collect();
        if found.len() > 1 {
            return Err(ProviderError::environment(
                "octavia:ListLoadBalancers",
                EnvironmentCause::NameTaken,
                format!(
                    "{} load balancers are named {name}; remove the extra ones",
                    found.len()
                ),
            ));
        }
        let Some(lb) = found.pop() else {
            return Ok(None);
        };
        match plan::ownership(&lb, &self.cluster, service) {
            Ownership::Ours => Ok(Some(lb)),
            Ownership::Foreign(why) => Err(ProviderError::environment(
                "octavia:ListLoadBalancers",
                EnvironmentCause::NameTaken,
                why,
            )),
        }
    }

    /// Polls until the load balancer is `ACTIVE` and returns it as last read.
    async fn wait_active(&self, lb_id: &str) -> Result<LoadBalancer, ProviderError> {
        let started = Instant::now();
        let mut pause = self.wait.first;
        loop {
            let lb =
                self.client
                    .load_balancer(lb_id)
                    .await?
                    .ok_or_else(|| ProviderError::Internal {
                        message: format!(
                            "load balancer {lb_id} disappeared while waiting for ACTIVE"
                        ),
                        source: None,
                    })?;
            match lb.provisioning_status.as_str() {
                "ACTIVE" => return Ok(lb),
                "ERROR" => {
                    return Err(ProviderError::Internal {
                        message: format!("load balancer {} ({lb_id}) is in ERROR", lb.name),
                        source: None,
                    });
                }
                status => {
                    if started.elapsed() >= self.wait.timeout {
                        return Err(ProviderError::pending(
                            "octavia:GetLoadBalancer",
                            format!(
                                "load balancer {} ({lb_id}) still {status} after {:?}",
                                lb.name, self.wait.timeout
                            ),
                        ));
                    }
                    tracing::debug!(lb = %lb_id, status, ?pause, "waiting for load balancer to become ACTIVE");
                }
            }
            tokio::time::sleep(pause).await;
            pause = pause.mul_f64(self.wait.factor).min(self.wait.max_interval);
        }
    }

    /// Polls until the load balancer is gone.
    async fn wait_deleted(&self, lb_id: &str) -> Result<(), ProviderError> {
        let started = Instant::now();
        let mut pause = self.wait.first;
        while let Some(lb) = self.client.load_balancer(lb_id).await? {
            if started.elapsed() >= self.wait.timeout {
                return Err(ProviderError::pending(
                    "octavia:DeleteLoadBalancer",
                    format!(
                        "load balancer {} ({lb_id}) still {} after {:?}",
                        lb.name, lb.provisioning_status, self.wait.timeout
                    ),
                ));
            }
            tokio::time::sleep(pause).await;
            pause = pause.mul_f64(self.wait.factor).min(self.wait.max_interval);
        }
        Ok(())
    }

    /// Makes a change under `lb_id`: a 409 "immutable" is waited out and the change retried;
    /// after success, waits for `ACTIVE` again (Octavia refuses the next change until then).
    async fn change<T, F, Fut>(&self, lb_id: &str, mut call: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OpenStackError>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Ok(value) => {
                    self.wait_active(lb_id).await?;
                    return Ok(value);
                }
                Err(error) if error.is_immutable() && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    tracing::info!(lb = %lb_id, %error, "load balancer busy; waiting for ACTIVE before retrying");
                    self.wait_active(lb_id).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Reads what exists under a load balancer.
    async fn observe(&self, lb: &LoadBalancer) -> Result<Observed, ProviderError> {
        let listeners = self.client.listeners(&lb.id).await?;
        // Pools hang off listeners (kube-lb creates none without one): no listener, no pool read.
        let pools = if listeners.is_empty() {
            Vec::new()
        } else {
            self.client.pools(&lb.id).await?
        };
        let mut observed = Observed {
            listeners,
            pools,
            ..Observed::default()
        };
        for pool in &observed.pools {
            observed
                .members
                .insert(pool.id.clone(), self.client.members(&pool.id).await?);
            if let Some(id) = &pool.healthmonitor_id
                && let Some(monitor) = self.client.health_monitor(id).await?
            {
                observed.monitors.insert(id.clone(), monitor);
            }
        }
        Ok(observed)
    }

    async fn apply(&self, lb_id: &str, step: &Step) -> Result<(), ProviderError> {
        let client = &self.client;
        match step {
            Step::TagLoadBalancer { tags } => {
                let body = serde_json::json!({"tags": tags});
                self.change(lb_id, || client.update_load_balancer(lb_id, &body))
                    .await
                    .map(drop)
            }
            Step::DeletePool { id, .. } => {
                self.change(lb_id, || ignore_missing(client.delete_pool(id)))
                    .await
            }
            Step::DeleteListener { id, .. } => {
                self.change(lb_id, || ignore_missing(client.delete_listener(id)))
                    .await
            }
            Step::UpdateListener { id, body, .. } => self
                .change(lb_id, || client.update_listener(id, body))
                .await
                .map(drop),
            Step::CreateListener(desired) => {
                let body = desired.listener_body(Some(lb_id));
                let listener = self.change(lb_id, || client.create_listener(&body)).await?;
                self.build_pool(lb_id, &listener.id, desired).await
            }
            Step::CreatePool {
                listener_id,
                desired,
            } => self.build_pool(lb_id, listener_id, desired).await,
            Step::UpdatePool { id, body, .. } => self
                .change(lb_id, || client.update_pool(id, body))
                .await
                .map(drop),
            Step::ReplaceMembers {
                pool_id, members, ..
            } => {
                self.change(lb_id, || client.replace_members(pool_id, members))
                    .await
            }
            Step::CreateMonitor { body, .. } => self
                .change(lb_id, || client.create_health_monitor(body))
                .await
                .map(drop),
            Step::UpdateMonitor { id, body, .. } => self
                .change(lb_id, || client.update_health_monitor(id, body))
                .await
                .map(drop),
            Step::DeleteMonitor { id, .. } => {
                self.change(lb_id, || ignore_missing(client.delete_health_monitor(id)))
                    .await
            }
        }
    }

    /// Pool, members (one batch call) and monitor for a listener.
    async fn build_pool(
        &self,
        lb_id: &str,
        listener_id: &str,
        desired: &plan::DesiredListener,
    ) -> Result<(), ProviderError> {
        let client = &self.client;
        let body = desired.pool_body(Some(listener_id));
        let pool = self.change(lb_id, || client.create_pool(&body)).await?;
        if !desired.members.is_empty() {
            let members = desired.member_bodies();
            self.change(lb_id, || client.replace_members(&pool.id, &members))
                .await?;
        }
        if let Some(body) = desired.monitor_body(&pool.id) {
            self.change(lb_id, || client.create_health_monitor(&body))
                .await?;
        }
        Ok(())
    }

    /// Creates the load balancer with its whole graph in one call and waits for `ACTIVE`. One
    /// that lands in `ERROR` is deleted, so the next attempt starts clean.
    async fn create(&self, desired: &Desired) -> Result<LoadBalancer, ProviderError> {
        let body = desired.create_body();
        let created = self.client.create_load_balancer(&body).await?;
        tracing::info!(lb = %created.id, name = %created.name, "created load balancer");
        match self.wait_active(&created.id).await {
            Ok(lb) => Ok(lb),
            Err(error) => {
                let errored = self
                    .client
                    .load_balancer(&created.id)
                    .await?
                    .is_some_and(|lb| lb.provisioning_status == "ERROR");
                if errored {
                    tracing::warn!(lb = %created.id, "new load balancer went to ERROR; deleting it to start over");
                    self.client.delete_load_balancer(&created.id).await?;
                }
                Err(error)
            }
        }
    }

    /// The floating IP on the VIP port, attaching or allocating one when the Service is
    /// external, or releasing/detaching it when it is internal. Returns the public address.
    async fn converge_floating_ip(
        &self,
        lb: &LoadBalancer,
        desired: &Desired,
    ) -> Result<Option<String>, ProviderError> {
        let attached = self
            .client
            .floating_ips(&[("port_id", &lb.vip_port_id)])
            .await?;
        if desired.internal {
            for fip in attached {
                let release =
                    fip.description == desired.floating_ip_description && !desired.keep_floating_ip;
                self.release_or_detach(&fip, release).await?;
            }
            return Ok(None);
        }
        if let Some(fip) = attached.first() {
            return Ok(Some(fip.floating_ip_address.clone()));
        }
        // A floating IP kube-lb made earlier and lost track of (its port went away with an
        // errored load balancer, or a crash): reuse it instead of leaking it.
        let requested = desired.floating_ip_address.as_deref();
        let candidates = match requested {
            Some(address) => {
                self.client
                    .floating_ips(&[("floating_ip_address", address)])
                    .await?
            }
            // Only a detached one: an attached floating IP with our phrase sits on another
            // cluster's load balancer (same --cluster-name) and is theirs.
            None => self
                .client
                .floating_ips(&[("description", &desired.floating_ip_description)])
                .await?
                .into_iter()
                .filter(is_detached)
                .collect(),
        };
        if let Some(fip) = candidates.into_iter().next() {
            if fip
                .port_id
                .as_deref()
                .is_some_and(|p| !p.is_empty() && p != lb.vip_port_id)
            {
                return Err(ProviderError::environment(
                    "neutron:UpdateFloatingIp",
                    EnvironmentCause::AddressInUse,
                    format!(
                        "floating IP {} is associated with another port",
                        fip.floating_ip_address
                    ),
                ));
            }
            let fip = self
                .client
                .associate_floating_ip(&fip.id, Some(&lb.vip_port_id))
                .await?;
            return Ok(Some(fip.floating_ip_address));
        }
        let network = match &desired.floating_network_id {
            Some(network) => network.clone(),
            None => self
                .client
                .external_networks()
                .await?
                .into_iter()
                .next()
                .map(|n| n.id)
                .ok_or_else(|| ProviderError::environment(
                    "neutron:ListNetworks",
                    EnvironmentCause::MissingDependency,
                    "no external network for floating IPs: set [LoadBalancer] floating-network-id",
                ))?,
        };
        let mut body = serde_json::json!({"floating_network_id": network, "port_id": lb.vip_port_id,
            "description": desired.floating_ip_description});
        if let Some(address) = requested {
            body["floating_ip_address"] = serde_json::json!(address);
        }
        let fip = self.client.create_floating_ip(&body).await?;
        tracing::info!(lb = %lb.id, address = %fip.floating_ip_address, "allocated floating IP");
        Ok(Some(fip.floating_ip_address))
    }

    /// Releases a floating IP (`release`: kube-lb created it and is not asked to keep it), or
    /// only detaches it (a user's, or `keep-floatingip`).
    async fn release_or_detach(
        &self,
        fip: &FloatingIp,
        release: bool,
    ) -> Result<(), ProviderError> {
        if release {
            self.client.delete_floating_ip(&fip.id).await?;
        } else {
            self.client.associate_floating_ip(&fip.id, None).await?;
        }
        Ok(())
    }

    fn status_of(address: &str) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: address
                .parse()
                .ok()
                .map(|ip| LoadBalancerIngress {
                    ip: Some(ip),
                    hostname: None,
                })
                .into_iter()
                .collect(),
        }
    }

    /// An LB that is ours but busy or broken, made ready for changes.
    async fn ready(&self, lb: LoadBalancer) -> Result<Option<LoadBalancer>, ProviderError> {
        match lb.provisioning_status.as_str() {
            "ACTIVE" => Ok(Some(lb)),
            "ERROR" => {
                // Recreate rather than failover: failover needs admin rights most projects lack.
                tracing::warn!(lb = %lb.id, name = %lb.name, "load balancer is in ERROR; deleting it to recreate it");
                self.client.delete_load_balancer(&lb.id).await?;
                self.wait_deleted(&lb.id).await?;
                Ok(None)
            }
            _ => self.wait_active(&lb.id).await.map(Some),
        }
    }
}

/// True for a floating IP associated with no port.
fn is_detached(fip: &FloatingIp) -> bool {
    fip.port_id.as_deref().is_none_or(str::is_empty)
}

/// A delete of something already gone succeeds.
async fn ignore_missing(
    call: impl std::future::Future<Output = Result<(), OpenStackError>>,
) -> Result<(), OpenStackError> {
    match call.await {
        Err(error) if error.is_not_found() => Ok(()),
        other => other,
    }
}

#[async_trait]
impl LoadBalancerProvider for OpenStackProvider {
    fn name(&self) -> &'static str {
        "openstack"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let desired = plan::desired(spec, backends, &self.cluster, &self.config.load_balancer)?;
        let existing = match self.find(&spec.service).await? {
            Some(lb) => self.ready(lb).await?,
            None => None,
        };
        let lb = match existing {
            None => self.create(&desired).await?,
            Some(lb) => {
                let observed = self.observe(&lb).await?;
                let steps = plan::plan(&lb, &observed, &desired);
                for step in &steps {
                    tracing::info!(lb = %lb.id, step = ?step.planned(), "applying");
                    self.apply(&lb.id, step).await?;
                }
                lb
            }
        };
        let address = match self.converge_floating_ip(&lb, &desired).await? {
            Some(fip) => fip,
            None => lb.vip_address.clone(),
        };
        Ok(Self::status_of(&address))
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let marker = plan::floating_ip_description(&self.cluster, service);
        let lb = match self.find(service).await {
            Ok(lb) => lb,
            // Someone else's load balancer under our name: nothing of ours to remove there.
            Err(ProviderError::Environment {
                cause: EnvironmentCause::NameTaken,
                message,
                ..
            }) => {
                tracing::info!(%service, %message, "not deleting a load balancer kube-lb does not own");
                None
            }
            Err(error) => return Err(error),
        };
        if let Some(lb) = lb {
            if lb.provisioning_status.starts_with("PENDING_") {
                self.wait_active(&lb.id).await?;
            }
            for fip in self
                .client
                .floating_ips(&[("port_id", &lb.vip_port_id)])
                .await?
            {
                if fip.description == marker {
                    self.client.delete_floating_ip(&fip.id).await?;
                }
            }
            let client = &self.client;
            let mut attempt = 0;
            loop {
                match client.delete_load_balancer(&lb.id).await {
                    Ok(()) => break,
                    Err(error) if error.is_not_found() => break,
                    Err(error) if error.is_immutable() && attempt < BUSY_RETRIES => {
                        attempt += 1;
                        self.wait_active(&lb.id).await?;
                    }
                    Err(error) => return Err(error.into()),
                }
            }
            self.wait_deleted(&lb.id).await?;
        }
        // Floating IPs of ours left behind (the load balancer was removed out of band, or a
        // crash between the two deletes): released too, so nothing leaks.
        // Only detached ones: an attached one sits on another cluster's load balancer.
        for fip in self
            .client
            .floating_ips(&[("description", &marker)])
            .await?
            .into_iter()
            .filter(is_detached)
        {
            self.client.delete_floating_ip(&fip.id).await?;
        }
        Ok(())
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let Some(lb) = self.find(service).await? else {
            return Ok(None);
        };
        let fip = self
            .client
            .floating_ips(&[("port_id", &lb.vip_port_id)])
            .await?;
        let address = fip
            .first()
            .map(|f| f.floating_ip_address.clone())
            .unwrap_or(lb.vip_address);
        Ok(Some(Self::status_of(&address)))
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        let desired = plan::desired(spec, backends, &self.cluster, &self.config.load_balancer)?;
        let Some(lb) = self.find(&spec.service).await? else {
            return Ok(vec![PlannedChange::new(
                ChangeAction::Create,
                "LoadBalancer",
                &desired.name,
                "POST loadbalancers",
            )]);
        };
        let observed = self.observe(&lb).await?;
        Ok(plan::plan(&lb, &observed, &desired)
            .iter()
            .map(Step::planned)
            .collect())
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        let marker = plan::floating_ip_description(&self.cluster, service);
        let mut changes = Vec::new();
        // Our floating IPs that `delete` releases: the one on our VIP port, and detached ones.
        let mut vip_port = None;
        if let Some(lb) = self.find(service).await? {
            changes.push(PlannedChange::new(
                ChangeAction::Delete,
                "LoadBalancer",
                &lb.name,
                "DELETE loadbalancers?cascade=true",
            ));
            vip_port = Some(lb.vip_port_id);
        }
        for fip in self
            .client
            .floating_ips(&[("description", &marker)])
            .await?
        {
            if is_detached(&fip) || fip.port_id == vip_port {
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    "FloatingIp",
                    &fip.floating_ip_address,
                    "DELETE floatingips",
                ));
            }
        }
        Ok(changes)
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        let suffix = format!(" from cluster {}", self.cluster);
        let service_of = |description: &str, prefix: &str| {
            let rest = description.strip_prefix(prefix)?.strip_suffix(&suffix)?;
            let (namespace, name) = rest.split_once('/')?;
            Some(ServiceKey {
                namespace: namespace.into(),
                name: name.into(),
                uid: String::new(),
            })
        };
        let mut owned = Vec::new();
        for lb in self.client.load_balancers().await? {
            if let Some(mut service) = service_of(&lb.description, "Kubernetes external service ") {
                if let Some(uid) = lb
                    .tags
                    .iter()
                    .find_map(|t| t.strip_prefix(plan::UID_TAG_PREFIX))
                {
                    service.uid = uid.to_string();
                }
                owned.push(OwnedResource {
                    kind: "LoadBalancer".into(),
                    name: lb.name,
                    service,
                    created: lb.created_at,
                    shared: false,
                });
            }
        }
        for fip in self.client.floating_ips(&[]).await? {
            if let Some(service) = service_of(
                &fip.description,
                "Floating IP for Kubernetes external service ",
            ) {
                owned.push(OwnedResource {
                    kind: "FloatingIp".into(),
                    name: fip.floating_ip_address,
                    service,
                    created: fip.created_at,
                    shared: false,
                });
            }
        }
        Ok(owned)
    }
}

//! [`TencentProvider`]: observe the Service's CLB, plan (pure, [`crate::plan`]), apply with the
//! CLB task model: every async call is followed by `DescribeTaskStatus` until it is done (capped
//! backoff), and a write refused with `FailedOperation.ResourceInOperating` (another task on the
//! CLB) is retried after a pause, never reported while it clears.
//!
//! Every write may be repeated after its answer was lost (the client retries a gateway 503 or
//! a timeout in place), so each one's repeat lands where the first call left things:
//! `CreateLoadBalancer` carries a `ClientToken` (the same CLB is answered again), a
//! `CreateListener` refused because the Service's own listeners already hold the ports takes
//! them, a listener delete refused as not found deletes only what is left, and a batch target
//! call that reports listeners as failed is accepted when their targets are as asked.
//!
//! Where the Service's listeners live is written back on the Service as TKE does
//! (`service.kubernetes.io/loadbalance-id`). When that annotation names a CLB other than the
//! one the Service now wants (it left a `tke-existed-lbid` CLB, or moved to another one), the
//! Service's listeners are removed from the old CLB first; the CLB itself stays when a user
//! made it.
//!
//! A CLB's network kind (public `OPEN` or `INTERNAL` in a subnet, from
//! `qcloud-loadbalancer-internal-subnetid`) is fixed at creation, and TKE refuses to switch
//! it; when the annotation changes on a Service that has its CLB, `ensure` and `plan_ensure`
//! both refuse with a user error naming the annotation, both kinds and the ways out
//! ([`plan::network_kind_refusal`]). The refusal is decided in the flow's plan, before any
//! step: the CLB is never switched, deleted or half-rebuilt for it, and nothing on it is
//! written (no listener, no target) while the refusal stands. `ensure` returns it as
//! [`ProviderError::Refused`] carrying the CLB's addresses, so the Service keeps showing where
//! it is served.
//!
//! `ensure` and `delete` are each written once, as a [`converge::Flow`] (`provider/ensure.rs`,
//! `provider/delete.rs`, one step type in `provider/steps.rs`): `ensure`/`delete` run it with
//! [`converge::execute`], `plan_ensure`/`plan_delete` render the same steps with
//! [`converge::render`]. Each CLB step's `run` waits for its asynchronous task
//! (`DescribeTaskStatus`); a CLB created for the Service forces a phase boundary (phase 2
//! waits for "the CLB's id"); the ids of a security group and of listeners created within a
//! phase are placeholders filled by the step that creates them.
//!
//! `loadBalancerSourceRanges` becomes a security group of the Service's bound to its CLB
//! ([`source_ranges`]), converged before the listeners are (a new listener is never open
//! before the group is bound) and deleted after the CLB; a `tke-existed-lbid` CLB with source
//! ranges is refused by `ensure` and `plan_ensure` alike, before any change.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_annotations::{LoadBalancerSpec, ProviderSpec, ServiceKey};
use kube_lb_provider_core::converge;
use kube_lb_provider_core::wait::{self, Look};
use kube_lb_provider_core::{
    BackendNode, CallCounter, ClientOptions, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};
use serde_json::{Value, json};

use crate::client::{ClbClient, LoadBalancer, TaskRef, TaskStatus};
use crate::config::TencentConfig;
use crate::error::TencentError;
use crate::plan::{
    self, Desired, Observed, Placement, TAG_CLUSTER, TAG_CREATED_BY, TAG_SERVICE_UUID,
};
use crate::source_ranges::{self, ObservedGroup};

mod delete;
mod ensure;
mod steps;

use delete::DeleteFlow;
use ensure::EnsureFlow;

/// CLBs not created for a Service that may hold its listeners, by Service UID: the CLBs this
/// process placed them on and the ones recorded on the Service. Lets `delete` look at those
/// instead of every CLB in the VPC; a Service this process has not ensured has no entry, and
/// `delete` then lists them all.
type Placements = Arc<Mutex<HashMap<String, BTreeSet<String>>>>;

pub use kube_lb_provider_core::WaitSettings;

/// Tunables apart from the cloud-config; the `clb` family's rate limit stays under Tencent's
/// default of 20 requests/s per action. [`TencentProvider::default_options`] gives the
/// production ones.
pub type ProviderOptions = ClientOptions;

/// How patiently to wait for async tasks and busy CLBs. The open TKE reference polls up to
/// 100 times 100 ms – 1 s apart.
const DEFAULT_WAIT: WaitSettings = WaitSettings {
    first: Duration::from_millis(200),
    factor: 1.5,
    max_interval: Duration::from_secs(3),
    timeout: Duration::from_secs(120),
};

/// The Tencent Cloud CLB provider.
#[derive(Debug, Clone)]
pub struct TencentProvider {
    client: Arc<ClbClient>,
    config: Arc<TencentConfig>,
    cluster: String,
    wait: WaitSettings,
    placements: Placements,
}

/// How many times a write refused as busy is retried.
const BUSY_RETRIES: u32 = 8;

/// A delete's answer, `None` when it was refused as not found: what it would remove is gone
/// already (a repeat after a lost answer, or someone else's delete).
fn unless_gone<T>(answer: Result<T, TencentError>) -> Result<Option<T>, TencentError> {
    match answer {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.is_not_found() => Ok(None),
        Err(error) => Err(error),
    }
}

impl TencentProvider {
    /// A provider for `config`, tagging CLBs with `cluster`.
    pub fn new(
        config: TencentConfig,
        cluster: &str,
        options: ProviderOptions,
    ) -> Result<Self, ProviderError> {
        let api = options.cloud_api("tencent");
        let client = ClbClient::new(config.clone(), api, options.request_timeout)?;
        Ok(TencentProvider {
            client: Arc::new(client),
            config: Arc::new(config),
            cluster: cluster.to_string(),
            wait: options.wait,
            placements: Placements::default(),
        })
    }

    /// The production options: Tencent's waiting pace and the shared client defaults.
    pub fn default_options() -> ProviderOptions {
        ProviderOptions::new(DEFAULT_WAIT)
    }

    /// Reads the cloud-config (optional) and the environment, and builds the provider.
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster: &kube_lb_provider_core::ClusterName,
        counter: CallCounter,
    ) -> Result<Self, ProviderError> {
        let internal = |message: String| ProviderError::Internal {
            message,
            source: None,
        };
        let text = match path {
            Some(path) => Some(
                tokio::fs::read_to_string(path)
                    .await
                    .map_err(|e| internal(format!("reading {}: {e}", path.display())))?,
            ),
            None => None,
        };
        let config = TencentConfig::resolve(text.as_deref(), &|name| std::env::var(name).ok())
            .map_err(|e| internal(e.to_string()))?;
        Self::new(
            config,
            cluster,
            ProviderOptions {
                counter,
                ..Self::default_options()
            },
        )
    }

    /// The client (for tests and tools).
    pub fn client(&self) -> &ClbClient {
        &self.client
    }

    fn ownership_filters(&self, service: Option<&ServiceKey>) -> Vec<(String, Vec<String>)> {
        let mut filters = vec![
            (format!("tag:{TAG_CLUSTER}"), vec![self.cluster.clone()]),
            (format!("tag:{TAG_CREATED_BY}"), vec!["yes".to_string()]),
        ];
        if let Some(service) = service {
            filters.push((format!("tag:{TAG_SERVICE_UUID}"), vec![service.uid.clone()]));
        }
        filters
    }

    /// The CLBs kube-lb created for `service` (normally one).
    async fn owned(&self, service: &ServiceKey) -> Result<Vec<LoadBalancer>, ProviderError> {
        Ok(self
            .client
            .load_balancers(None, &self.ownership_filters(Some(service)))
            .await?)
    }

    /// Waits for `task_id` to finish.
    async fn wait_task(
        &self,
        action: &'static str,
        task_id: &TaskRef,
    ) -> Result<(), ProviderError> {
        let what = task_id.to_string();
        wait::until(&self.wait, action, &what, || async {
            Ok(match self.client.task_status(task_id).await? {
                TaskStatus::Succeeded => Look::Done(()),
                TaskStatus::Failed(message) => Look::Failed(ProviderError::Internal {
                    message: format!("{action}: {task_id} failed: {message}"),
                    source: None,
                }),
                TaskStatus::Running => Look::Pending("running".to_string()),
            })
        })
        .await
    }

    /// Makes a write: `ResourceInOperating` is waited out and the write repeated.
    async fn write<T, F, Fut>(&self, action: &'static str, call: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TencentError>>,
    {
        let settings = self.wait;
        wait::retry_busy(action, BUSY_RETRIES, TencentError::is_busy, call, |retry| {
            let pause = wait::busy_pause(&settings, retry);
            async move {
                tokio::time::sleep(pause).await;
                Ok::<(), ProviderError>(())
            }
        })
        .await
    }

    /// A write that starts a task, followed by waiting for the task.
    async fn write_and_wait<T, F, Fut>(
        &self,
        action: &'static str,
        call: F,
        task: impl Fn(&T) -> String,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TencentError>>,
    {
        let value = self.write(action, call).await?;
        self.wait_task(action, &TaskRef::Request(task(&value)))
            .await?;
        Ok(value)
    }

    /// Reads listeners and targets.
    async fn observe(
        &self,
        lb: &LoadBalancer,
        service: &ServiceKey,
    ) -> Result<Observed, ProviderError> {
        let lb_id = lb.load_balancer_id.as_str();
        let dedicated = self.is_dedicated(lb, service);
        let listeners = self.client.listeners(lb_id).await?;
        if listeners.is_empty() {
            return Ok(Observed::default().dedicated(dedicated));
        }
        let ids: Vec<String> = listeners.iter().map(|l| l.listener_id.clone()).collect();
        let targets = self.client.targets(lb_id, &ids).await?;
        Ok(Observed::with_targets(listeners, targets).dedicated(dedicated))
    }

    /// True when `lb` was created for `service` in this cluster (TKE's or kube-lb's tags).
    fn is_dedicated(&self, lb: &LoadBalancer, service: &ServiceKey) -> bool {
        lb.tag(TAG_CREATED_BY) == Some("yes")
            && lb.tag(TAG_CLUSTER) == Some(self.cluster.as_str())
            && lb.tag(TAG_SERVICE_UUID) == Some(service.uid.as_str())
    }

    /// Notes that this process tracks `service`'s placements, and that its listeners may be
    /// on `lb_id` (see [`Placements`]).
    fn remember_placement(&self, service: &ServiceKey, lb_id: Option<&str>) {
        let mut placements = self.placements.lock().unwrap_or_else(|p| p.into_inner());
        let known = placements.entry(service.uid.clone()).or_default();
        if let Some(id) = lb_id {
            known.insert(id.to_string());
        }
    }

    /// The Service's listeners (by its own listener name, never TKE's bare one) on CLB
    /// `lb_id`, or nothing when the CLB is gone.
    async fn listeners_named(
        &self,
        lb_id: &str,
        name: &str,
    ) -> Result<Vec<crate::client::Listener>, ProviderError> {
        match self.client.listeners(lb_id).await {
            Ok(listeners) => Ok(listeners
                .into_iter()
                .filter(|l| l.listener_name == name)
                .collect()),
            Err(error) if error.is_not_found() => Ok(Vec::new()),
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes listeners `ids` of CLB `lb_id` and waits. One already gone counts as deleted:
    /// the API refuses the whole call with `ListenerIdNotFound` when any is gone (a repeat
    /// after a lost answer finds them all gone), so the ones still there are deleted again.
    async fn delete_listeners(&self, lb_id: &str, ids: &[String]) -> Result<(), ProviderError> {
        let mut remaining = ids.to_vec();
        // A second refusal can only come from someone else deleting listeners meanwhile.
        for _ in 0..3 {
            let started = self
                .write("DeleteLoadBalancerListeners", || async {
                    unless_gone(self.client.delete_listeners(lb_id, &remaining).await)
                })
                .await?;
            if let Some(task) = started {
                return self
                    .wait_task("DeleteLoadBalancerListeners", &TaskRef::Request(task))
                    .await;
            }
            let existing = match self.client.listeners(lb_id).await {
                Ok(existing) => existing,
                Err(error) if error.is_not_found() => return Ok(()),
                Err(error) => return Err(error.into()),
            };
            remaining.retain(|id| existing.iter().any(|l| &l.listener_id == id));
            if remaining.is_empty() {
                return Ok(());
            }
            tracing::info!(lb = %lb_id, listeners = ?remaining, "some listeners were already gone; deleting the rest");
        }
        Err(ProviderError::Internal {
            message: format!(
                "DeleteLoadBalancerListeners: listeners {remaining:?} of {lb_id} kept being refused as not found"
            ),
            source: None,
        })
    }

    /// Creates the Service's CLB and waits until it is usable. The request carries a
    /// `ClientToken` of its own, so a repeat after a lost answer (the client's in-place retry
    /// of a gateway 503 or a timeout, or a repeat after `ResourceInOperating`) gets the same
    /// CLB back instead of a second one; a later create (after a restart, or after the CLB was
    /// deleted) makes a new token. A `ClientToken` in extensiveParameters is replaced: one
    /// fixed token would answer a deleted CLB's id to every later create.
    async fn create(
        &self,
        service: &ServiceKey,
        body: &serde_json::Map<String, Value>,
    ) -> Result<LoadBalancer, ProviderError> {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let mut body = body.clone();
        body.insert(
            "ClientToken".into(),
            json!(plan::client_token(&service.uid, nonce)),
        );
        let (id, task) = self
            .write("CreateLoadBalancer", || {
                self.client.create_load_balancer(&body)
            })
            .await?;
        tracing::info!(lb = %id, "created CLB");
        self.wait_task("CreateLoadBalancer", &task).await?;
        let mut waiting = self.wait.begin();
        loop {
            match self.client.load_balancer(&id).await? {
                Some(lb) if lb.status == 1 => return Ok(lb),
                _ if waiting.expired() => {
                    return Err(ProviderError::pending(
                        "CreateLoadBalancer",
                        format!("CLB {id} not ready after {:?}", self.wait.timeout),
                    ));
                }
                _ => {}
            }
            waiting.sleep().await;
        }
    }

    /// Deletes a CLB kube-lb owns; gone already is fine.
    async fn delete_load_balancer(&self, id: &str) -> Result<(), ProviderError> {
        let started = self
            .write("DeleteLoadBalancer", || async {
                unless_gone(self.client.delete_load_balancer(id).await)
            })
            .await?;
        if let Some(task) = started {
            self.wait_task("DeleteLoadBalancer", &TaskRef::Request(task))
                .await?;
        }
        tracing::info!(lb = %id, "deleted CLB");
        Ok(())
    }

    /// The user's CLB named by `tke-existed-lbid`, checked against the reuse rules.
    async fn existing(&self, id: &str) -> Result<LoadBalancer, ProviderError> {
        let lb = self.client.load_balancer(id).await?.ok_or_else(|| {
            ProviderError::environment(
                "DescribeLoadBalancers",
                EnvironmentCause::MissingDependency,
                format!(
                    "the CLB {id} named by service.kubernetes.io/tke-existed-lbid does not exist"
                ),
            )
        })?;
        if lb.tag(TAG_CREATED_BY) == Some("yes") {
            return Err(ProviderError::user(format!(
                "service.kubernetes.io/tke-existed-lbid: {id} was created by TKE/kube-lb for another Service (tag {TAG_CREATED_BY}=yes); only CLBs created by a user can be reused"
            )));
        }
        if let Some(vpc) = &self.config.vpc_id
            && &lb.vpc_id != vpc
        {
            return Err(ProviderError::user(format!(
                "service.kubernetes.io/tke-existed-lbid: {id} is in VPC {} but the cluster is in {vpc}",
                lb.vpc_id
            )));
        }
        Ok(lb)
    }

    async fn wait_ready(&self, id: &str) -> Result<LoadBalancer, ProviderError> {
        let what = format!("CLB {id}");
        wait::until(&self.wait, "DescribeLoadBalancers", &what, || async {
            Ok(match self.client.load_balancer(id).await? {
                Some(lb) if lb.status == 1 => Look::Done(lb),
                Some(_) => Look::Pending("creating".to_string()),
                None => Look::Failed(ProviderError::Internal {
                    message: format!("CLB {id} disappeared while being created"),
                    source: None,
                }),
            })
        })
        .await
    }

    /// `CreateListener` with `body` (for `ports` of `protocol`, named `name`) and waits;
    /// returns the listener ids in port order. A port refused as taken by the Service's own
    /// listener is one an earlier attempt made, whose answer was lost (the client repeats a
    /// call answered with a gateway 503): its id is taken. Taken by anyone else, the refusal
    /// stands.
    async fn create_listeners(
        &self,
        lb_id: &str,
        body: &serde_json::Map<String, Value>,
        protocol: &str,
        ports: &[u16],
        name: &str,
    ) -> Result<Vec<String>, ProviderError> {
        let outcome = self
            .write("CreateListener", || async {
                match self.client.create_listener(body).await {
                    Ok(created) => Ok(Ok(created)),
                    Err(error) if error.code() == Some("InvalidParameter.PortCheckFailed") => {
                        Ok(Err(error))
                    }
                    Err(error) => Err(error),
                }
            })
            .await?;
        match outcome {
            Ok((ids, task)) => {
                self.wait_task("CreateListener", &TaskRef::Request(task))
                    .await?;
                Ok(ids)
            }
            Err(refusal) => {
                let listeners = self.client.listeners(lb_id).await?;
                match plan::created_already(&listeners, protocol, ports, name) {
                    Some(ids) => {
                        tracing::info!(lb = %lb_id, listeners = ?ids, "the listeners were made by an earlier attempt whose answer was lost");
                        Ok(ids)
                    }
                    None => Err(refusal.into()),
                }
            }
        }
    }

    /// The Service's security groups (by tags), each with its policies.
    async fn observed_groups(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<ObservedGroup>, ProviderError> {
        let mut observed = Vec::new();
        for group in self.service_groups(service).await? {
            match self
                .client
                .security_group_policies(&group.security_group_id)
                .await
            {
                Ok(policies) => observed.push(ObservedGroup { group, policies }),
                // Deleted between the two reads: not there.
                Err(error) if error.is_not_found() => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(observed)
    }

    /// The security-group steps for the Service's CLB `lb` (`None`: not created yet), with
    /// no read when nothing is asked and nothing is bound.
    async fn source_range_steps(
        &self,
        lb: Option<&LoadBalancer>,
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<Vec<source_ranges::Step>, ProviderError> {
        let wanted = source_ranges::restricted(&spec.source_ranges)
            .map(|cidrs| source_ranges::desired_policies(&cidrs, &desired.listeners));
        let bound = lb
            .and_then(|lb| lb.secure_groups.clone())
            .unwrap_or_default();
        if wanted.is_none() && bound.is_empty() {
            return Ok(Vec::new());
        }
        let ours = self.observed_groups(&desired.service).await?;
        Ok(source_ranges::plan(&ours, Some(&bound), wanted.as_deref()))
    }

    /// The refusal of source ranges where kube-lb has no way to enforce them.
    fn refuse_unenforceable(
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<(), ProviderError> {
        match &desired.placement {
            Placement::Existing(id) if source_ranges::restricted(&spec.source_ranges).is_some() => {
                Err(ProviderError::user(source_ranges::existing_refusal(id)))
            }
            _ => Ok(()),
        }
    }

    fn status_of(lb: &LoadBalancer) -> LoadBalancerStatus {
        let mut ingress: Vec<LoadBalancerIngress> = plan::addresses(lb)
            .iter()
            .filter_map(|a| a.parse().ok())
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip),
                hostname: None,
                ip_mode: None,
            })
            .collect();
        ingress.sort();
        LoadBalancerStatus {
            ingress,
            ..Default::default()
        }
    }

    fn desired(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Desired, ProviderError> {
        plan::desired(
            spec,
            backends,
            &self.cluster,
            self.config.vpc_id.as_deref(),
            &self.config.listener_name,
        )
    }

    /// The CLBs this process knows may hold `service`'s listeners (see [`Placements`]), or
    /// `None` when it has not ensured the Service.
    fn known_placements(&self, service: &ServiceKey) -> Option<BTreeSet<String>> {
        self.placements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&service.uid)
            .cloned()
    }

    /// Forgets `service`'s placements (it was deleted).
    fn forget_placements(&self, service: &ServiceKey) {
        self.placements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&service.uid);
    }

    /// The Service's security group, created unless one exists already. `CreateSecurityGroup`
    /// takes no idempotency token, so a create whose answer was lost (or a pass that stopped
    /// after it) would leave a second group: the group's deterministic name and tags are
    /// looked up first and after a failed create, and one found is adopted.
    async fn create_group(&self, service: &ServiceKey) -> Result<String, ProviderError> {
        let name = source_ranges::group_name(service);
        let description = source_ranges::group_description(&self.cluster, service);
        let tags = source_ranges::group_tags(&self.cluster, service);
        let mut attempt = 0;
        let mut waiting = self.wait.begin();
        loop {
            if let Some(id) = self.existing_group(service).await? {
                tracing::info!(group = %id, "adopted the Service's security group made by an earlier attempt");
                return Ok(id);
            }
            match self
                .write("CreateSecurityGroup", || {
                    self.client
                        .create_security_group(&name, &description, &tags)
                })
                .await
            {
                Ok(id) => {
                    tracing::info!(group = %id, "created the Service's security group");
                    return Ok(id);
                }
                // Lost answers and gateway errors are repeated here, after looking for what
                // the failed call may have made, never blindly.
                Err(error) if error.is_transient() && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    tracing::info!(%error, pause = ?waiting.pause(), "CreateSecurityGroup failed; looking for the group before creating again");
                    waiting.sleep().await;
                }
                Err(error) => {
                    return match self.existing_group(service).await? {
                        Some(id) => Ok(id),
                        None => Err(error),
                    };
                }
            }
        }
    }

    /// A security group of the Service's (see [`Self::service_groups`]), if any.
    async fn existing_group(&self, service: &ServiceKey) -> Result<Option<String>, ProviderError> {
        Ok(self
            .service_groups(service)
            .await?
            .into_iter()
            .next()
            .map(|group| group.security_group_id))
    }

    /// The Service's security groups: the ones its tags name, then any of its deterministic
    /// name whose tags name no other owner (a create cut short before its tags were
    /// readable, or one whose answer was lost), so a replay adopts them instead of making
    /// another, and `delete` finds them too.
    async fn service_groups(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<crate::client::SecurityGroup>, ProviderError> {
        let tags = source_ranges::group_tags(&self.cluster, service);
        let mut groups = self.client.security_groups(&tags).await?;
        let name = source_ranges::group_name(service);
        for group in self.client.security_groups_named(&name).await? {
            if source_ranges::tags_allow_adoption(&group, &self.cluster, service)
                && !groups
                    .iter()
                    .any(|g| g.security_group_id == group.security_group_id)
            {
                groups.push(group);
            }
        }
        Ok(groups)
    }

    /// User CLBs that may hold listeners of `service` (not created by TKE/kube-lb).
    async fn user_load_balancers(&self) -> Result<Vec<LoadBalancer>, ProviderError> {
        let filters = match &self.config.vpc_id {
            Some(vpc) => vec![("vpc-id".to_string(), vec![vpc.clone()])],
            None => Vec::new(),
        };
        Ok(self
            .client
            .load_balancers(None, &filters)
            .await?
            .into_iter()
            .filter(|lb| lb.tag(TAG_CREATED_BY) != Some("yes"))
            .collect())
    }
}

#[async_trait]
impl LoadBalancerProvider for TencentProvider {
    fn name(&self) -> &'static str {
        "tencent"
    }

    fn accepts_node(&self, spec: &LoadBalancerSpec, node: &BackendNode) -> bool {
        match &spec.provider {
            ProviderSpec::Tencent(tencent) => {
                plan::selector_matches(&tencent.backends_label, &node.labels)
            }
            _ => true,
        }
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let mut flow = EnsureFlow::new(self, spec, backends)?;
        // From now on this process knows where the Service's listeners may be: where the
        // Service says they were, and the user CLB it puts them on.
        let desired = flow.desired();
        self.remember_placement(
            &desired.service,
            desired.recorded_load_balancer_id.as_deref(),
        );
        if let Placement::Existing(id) = &desired.placement {
            self.remember_placement(&desired.service, Some(id));
        }
        converge::execute(&mut flow).await
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        converge::execute(&mut DeleteFlow::new(self, service)).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        Ok(self.owned(service).await?.first().map(Self::status_of))
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        match converge::render(&mut EnsureFlow::new(self, spec, backends)?).await {
            // The plan shows the refusal `ensure` would answer, as the user's error it is.
            Err(ProviderError::Refused { message, .. }) => Err(ProviderError::user(message)),
            other => other,
        }
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut DeleteFlow::new(self, service)).await
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        Ok(self
            .client
            .load_balancers(None, &self.ownership_filters(None))
            .await?
            .into_iter()
            .map(|lb| OwnedResource {
                kind: "LoadBalancer".into(),
                service: ServiceKey {
                    namespace: String::new(),
                    name: String::new(),
                    uid: lb.tag(TAG_SERVICE_UUID).unwrap_or_default().to_string(),
                },
                name: lb.load_balancer_id,
                created: lb.create_time,
                shared: false,
            })
            .collect())
    }
}

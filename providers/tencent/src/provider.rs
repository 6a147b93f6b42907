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
//! ([`plan::network_kind_refusal`]). The CLB is never switched, deleted or half-rebuilt for
//! it; `ensure` still converges its listeners and targets as the CLB is (so nodes that come
//! and go during the refusal keep being followed), then returns the refusal as
//! [`ProviderError::Refused`] carrying the CLB's addresses, so the Service keeps showing where
//! it is served while the refusal stands.
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
use kube_lb_provider_core::{
    BackendNode, CallCounter, ChangeAction, ClientOptions, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};
use serde_json::{Value, json};

use crate::client::{ClbClient, LoadBalancer, TaskRef, TaskStatus};
use crate::config::TencentConfig;
use crate::error::TencentError;
use crate::plan::{
    self, Desired, ListenerRef, Observed, Placement, Step, TAG_CLUSTER, TAG_CREATED_BY,
    TAG_SERVICE_UUID,
};
use crate::source_ranges::{self, GroupRef, ObservedGroup};

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
const BUSY_RETRIES: usize = 8;

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
        cluster: &str,
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
        let mut waiting = self.wait.begin();
        loop {
            match self.client.task_status(task_id).await? {
                TaskStatus::Succeeded => return Ok(()),
                TaskStatus::Failed(message) => {
                    return Err(ProviderError::Internal {
                        message: format!("{action}: {task_id} failed: {message}"),
                        source: None,
                    });
                }
                TaskStatus::Running if waiting.expired() => {
                    return Err(ProviderError::pending(
                        action,
                        format!("{task_id} still running after {:?}", self.wait.timeout),
                    ));
                }
                TaskStatus::Running => {
                    tracing::debug!(action, task = %task_id, pause = ?waiting.pause(), "waiting for CLB task");
                }
            }
            waiting.sleep().await;
        }
    }

    /// Makes a write: `ResourceInOperating` is waited out and the write repeated.
    async fn write<T, F, Fut>(&self, action: &'static str, mut call: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, TencentError>>,
    {
        let mut waiting = self.wait.begin();
        let mut attempt = 0;
        loop {
            match call().await {
                Ok(value) => return Ok(value),
                Err(error) if error.is_busy() && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    tracing::info!(action, %error, pause = ?waiting.pause(), "CLB busy with another task; retrying");
                    waiting.sleep().await;
                }
                Err(error) => return Err(error.into()),
            }
        }
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

    /// Removes the Service's listeners from CLB `lb_id`; the CLB and everything else on it
    /// stay.
    async fn remove_listeners(&self, lb_id: &str, name: &str) -> Result<(), ProviderError> {
        let ours: Vec<String> = self
            .listeners_named(lb_id, name)
            .await?
            .into_iter()
            .map(|l| l.listener_id)
            .collect();
        if ours.is_empty() {
            return Ok(());
        }
        self.delete_listeners(lb_id, &ours).await?;
        tracing::info!(lb = %lb_id, listeners = ?ours, "removed the Service's listeners from a CLB it no longer uses");
        Ok(())
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

    /// The CLB recorded on the Service (`loadbalance-id`) when it is not `target`: the one
    /// the Service's listeners must leave.
    fn left_behind<'a>(desired: &'a Desired, target: &str) -> Option<&'a str> {
        desired
            .recorded_load_balancer_id
            .as_deref()
            .filter(|recorded| *recorded != target)
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

    /// The CLB to converge (creating it if needed), whether it was just created, and the
    /// refusal of a network-kind switch it cannot take (reported once the rest converged).
    async fn target_load_balancer(
        &self,
        desired: &Desired,
    ) -> Result<(LoadBalancer, bool, Option<String>), ProviderError> {
        let owned = self.owned(&desired.service).await?;
        match &desired.placement {
            Placement::Existing(id) => {
                let lb = self.existing(id).await?;
                // Switching to an existing CLB releases the one kube-lb made.
                for old in owned {
                    tracing::info!(lb = %old.load_balancer_id, existing = %id, "Service moved to an existing CLB; deleting the one kube-lb created");
                    self.delete_load_balancer(&old.load_balancer_id).await?;
                }
                Ok((lb, false, None))
            }
            Placement::Owned(body) => {
                let mut owned = owned.into_iter();
                match owned.next() {
                    Some(lb) => {
                        // A kind the CLB cannot take is refused, not ignored, and never switched.
                        let refusal = plan::network_kind_refusal(&lb, body);
                        for extra in owned {
                            tracing::warn!(lb = %extra.load_balancer_id, "a second CLB tagged for this Service; deleting it");
                            self.delete_load_balancer(&extra.load_balancer_id).await?;
                        }
                        if lb.status == 1 {
                            Ok((lb, false, refusal))
                        } else {
                            Ok((self.wait_ready(&lb.load_balancer_id).await?, false, refusal))
                        }
                    }
                    None => Ok((self.create(&desired.service, body).await?, true, None)),
                }
            }
        }
    }

    async fn wait_ready(&self, id: &str) -> Result<LoadBalancer, ProviderError> {
        let mut waiting = self.wait.begin();
        loop {
            match self.client.load_balancer(id).await? {
                Some(lb) if lb.status == 1 => return Ok(lb),
                None => {
                    return Err(ProviderError::Internal {
                        message: format!("CLB {id} disappeared while being created"),
                        source: None,
                    });
                }
                Some(_) if waiting.expired() => {
                    return Err(ProviderError::pending(
                        "DescribeLoadBalancers",
                        format!("CLB {id} still creating"),
                    ));
                }
                Some(_) => {}
            }
            waiting.sleep().await;
        }
    }

    async fn apply(
        &self,
        lb_id: &str,
        steps: &[Step],
        desired: &Desired,
    ) -> Result<(), ProviderError> {
        let mut created: std::collections::BTreeMap<plan::ListenerKey, String> = Default::default();
        for step in steps {
            tracing::info!(lb = %lb_id, change = ?step.planned(lb_id), "applying");
            match step {
                Step::DeleteListeners { ids, .. } => {
                    self.delete_listeners(lb_id, ids).await?;
                }
                Step::ModifyHealthCheck {
                    id, health_check, ..
                } => {
                    let mut body = serde_json::Map::new();
                    body.insert("LoadBalancerId".into(), json!(lb_id));
                    body.insert("ListenerId".into(), json!(id));
                    body.insert("HealthCheck".into(), Value::Object(health_check.clone()));
                    self.write_and_wait(
                        "ModifyListener",
                        || self.client.modify_listener(&body),
                        String::clone,
                    )
                    .await?;
                }
                Step::CreateListeners {
                    protocol,
                    ports,
                    health_check,
                } => {
                    let mut body = serde_json::Map::new();
                    body.insert("LoadBalancerId".into(), json!(lb_id));
                    body.insert("Protocol".into(), json!(protocol));
                    body.insert("Ports".into(), json!(ports));
                    if let Some(check) = health_check {
                        body.insert("HealthCheck".into(), Value::Object(check.clone()));
                    }
                    body.insert(
                        "ListenerNames".into(),
                        json!(vec![desired.listener_name.clone(); ports.len()]),
                    );
                    // listenerParameters merge over the typed request; the parser refused
                    // the identity keys (LoadBalancerId, Ports, Protocol, ListenerNames).
                    plan::deep_merge(&mut body, &desired.listener_parameters);
                    let ids = self
                        .create_listeners(lb_id, &body, protocol, ports, &desired.listener_name)
                        .await?;
                    for (port, id) in ports.iter().zip(ids) {
                        created.insert(
                            plan::ListenerKey {
                                protocol: protocol.clone(),
                                port: *port,
                            },
                            id,
                        );
                    }
                }
                Step::Register(targets) | Step::Deregister(targets) => {
                    let register = matches!(step, Step::Register(_));
                    let mut bodies = Vec::new();
                    let mut requested = Vec::new();
                    for (listener, backend) in targets {
                        let id = match listener {
                            ListenerRef::Id(id) => id.clone(),
                            ListenerRef::New(key) => {
                                created.get(key).cloned().ok_or_else(|| {
                                    ProviderError::Internal {
                                        message: format!(
                                            "listener {}:{} was not created",
                                            key.protocol, key.port
                                        ),
                                        source: None,
                                    }
                                })?
                            }
                        };
                        let mut target = json!({"ListenerId": id, "Port": backend.port});
                        if backend.by_instance {
                            target["InstanceId"] = json!(backend.address);
                        } else {
                            target["EniIp"] = json!(backend.address);
                        }
                        bodies.push(target);
                        requested.push((id, backend.clone()));
                    }
                    let action = if register {
                        "BatchRegisterTargets"
                    } else {
                        "BatchDeregisterTargets"
                    };
                    let failed = self
                        .write(action, || {
                            self.client.batch_targets(lb_id, &bodies, register)
                        })
                        .await?;
                    // A repeat after a lost answer is refused for the listeners the first call
                    // already changed: read them, and accept what is as asked.
                    let of_failed: Vec<(String, plan::Backend)> = requested
                        .into_iter()
                        .filter(|(listener, _)| failed.contains(listener))
                        .collect();
                    if !failed.is_empty()
                        && !plan::targets_settled(
                            self.client.targets(lb_id, &failed).await?,
                            &of_failed,
                            register,
                        )
                    {
                        return Err(ProviderError::Internal {
                            message: format!(
                                "{action}: the CLB refused targets for listeners {failed:?}"
                            ),
                            source: None,
                        });
                    }
                }
            }
        }
        Ok(())
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
        let tags = source_ranges::group_tags(&self.cluster, service);
        let mut observed = Vec::new();
        for group in self.client.security_groups(&tags).await? {
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

    /// Makes the security-group `steps` on CLB `lb_id`.
    async fn apply_source_ranges(
        &self,
        lb_id: &str,
        service: &ServiceKey,
        steps: &[source_ranges::Step],
    ) -> Result<(), ProviderError> {
        let name = source_ranges::group_name(service);
        let description = source_ranges::group_description(&self.cluster, service);
        let tags = source_ranges::group_tags(&self.cluster, service);
        let mut created: Option<String> = None;
        let resolve = |group: &GroupRef, created: &Option<String>| match group {
            GroupRef::Id(id) => Ok(id.clone()),
            GroupRef::New => created.clone().ok_or_else(|| ProviderError::Internal {
                message: "a security group step before the group was created".into(),
                source: None,
            }),
        };
        for step in steps {
            tracing::info!(lb = %lb_id, change = ?step.planned(lb_id, &name), "applying");
            match step {
                source_ranges::Step::Create => {
                    let id = self
                        .write("CreateSecurityGroup", || {
                            self.client
                                .create_security_group(&name, &description, &tags)
                        })
                        .await?;
                    tracing::info!(lb = %lb_id, group = %id, "created the Service's security group");
                    created = Some(id);
                }
                source_ranges::Step::SetPolicies { group, policies } => {
                    let id = resolve(group, &created)?;
                    let ingress: Vec<Value> = policies.iter().map(|p| p.to_json(&name)).collect();
                    self.write("ModifySecurityGroupPolicies", || {
                        self.client
                            .replace_security_group_policies(&id, &ingress, &[])
                    })
                    .await?;
                }
                source_ranges::Step::Bind { groups, .. } => {
                    let ids = groups
                        .iter()
                        .map(|g| resolve(g, &created))
                        .collect::<Result<Vec<_>, _>>()?;
                    self.write("SetLoadBalancerSecurityGroups", || {
                        self.client.set_load_balancer_security_groups(lb_id, &ids)
                    })
                    .await?;
                }
                source_ranges::Step::Delete(id) => {
                    self.write("DeleteSecurityGroup", || async {
                        unless_gone(self.client.delete_security_group(id).await)
                    })
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// Deletes the Service's security groups (after its CLB: a bound group cannot go).
    async fn delete_groups(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let tags = source_ranges::group_tags(&self.cluster, service);
        for group in self.client.security_groups(&tags).await? {
            let id = group.security_group_id;
            self.write("DeleteSecurityGroup", || async {
                unless_gone(self.client.delete_security_group(&id).await)
            })
            .await?;
            tracing::info!(group = %id, "deleted the Service's security group");
        }
        Ok(())
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
        let desired = self.desired(spec, backends)?;
        Self::refuse_unenforceable(spec, &desired)?;
        // From now on this process knows where the Service's listeners may be: where the
        // Service says they were, and the user CLBs it puts them on.
        self.remember_placement(
            &desired.service,
            desired.recorded_load_balancer_id.as_deref(),
        );
        let (lb, created, refusal) = self.target_load_balancer(&desired).await?;
        let lb_id = lb.load_balancer_id.as_str();
        if let Placement::Existing(_) = desired.placement {
            self.remember_placement(&desired.service, Some(lb_id));
        }
        if let Some(old) = Self::left_behind(&desired, lb_id) {
            self.remove_listeners(old, &desired.listener_name).await?;
        }
        let observed = self.observe(&lb, &desired.service).await?;
        let steps = plan::plan(&observed, &desired)?;
        let fresh_listeners = !observed
            .listeners
            .iter()
            .any(|l| observed.owns(l, &desired));
        if let Placement::Owned(_) = desired.placement {
            // Before the listeners: a new port is never reachable from outside the ranges.
            let groups = self.source_range_steps(Some(&lb), spec, &desired).await?;
            self.apply_source_ranges(lb_id, &desired.service, &groups)
                .await?;
        }
        self.apply(lb_id, &steps, &desired).await?;
        if let Some(refusal) = refusal {
            // Converged as the CLB is; the switch it was asked for is the Service author's to
            // undo. The CLB keeps serving at its addresses, which the Service keeps showing.
            return Err(ProviderError::refused(refusal, Self::status_of(&lb)));
        }
        if desired.selector_matched_nothing {
            // Converged (the CLB has no targets, as TKE does), but never silently.
            return Err(ProviderError::environment(
                "DescribeTargets",
                EnvironmentCause::MissingDependency,
                format!(
                    "service.kubernetes.io/qcloud-loadbalancer-backends-label matches no ready node: CLB {} has no targets",
                    lb.load_balancer_id
                ),
            ));
        }
        let mut status = Self::status_of(&lb);
        status.annotations = plan::written_back(&desired, lb_id, created, fresh_listeners);
        Ok(status)
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let owned = self.owned(service).await?;
        for lb in &owned {
            self.delete_load_balancer(&lb.load_balancer_id).await?;
        }
        self.delete_groups(service).await?;
        // Listeners on user CLBs (tke-existed-lbid): only ours, the CLB stays. Where this
        // process knows every CLB they may be on, only those are read.
        let name = plan::listener_name(&self.config.listener_name, service);
        let known = self
            .placements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&service.uid)
            .cloned();
        let candidates: Vec<String> = match known {
            Some(ids) => ids
                .into_iter()
                .filter(|id| !owned.iter().any(|lb| &lb.load_balancer_id == id))
                .collect(),
            None => self
                .user_load_balancers()
                .await?
                .into_iter()
                .map(|lb| lb.load_balancer_id)
                .collect(),
        };
        for lb_id in candidates {
            self.remove_listeners(&lb_id, &name).await?;
        }
        self.placements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&service.uid);
        Ok(())
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
        let desired = self.desired(spec, backends)?;
        Self::refuse_unenforceable(spec, &desired)?;
        let owned = self.owned(&desired.service).await?;
        let mut changes = Vec::new();
        let target = match &desired.placement {
            Placement::Existing(id) => Some(id.clone()),
            Placement::Owned(_) => owned.first().map(|lb| lb.load_balancer_id.clone()),
        };
        if let Some(old) = desired
            .recorded_load_balancer_id
            .as_deref()
            .filter(|recorded| Some(*recorded) != target.as_deref())
            .filter(|recorded| !owned.iter().any(|lb| lb.load_balancer_id == *recorded))
        {
            for listener in self.listeners_named(old, &desired.listener_name).await? {
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    "Listener",
                    format!("{old}/{}:{}", listener.protocol, listener.port),
                    "DeleteLoadBalancerListeners",
                ));
            }
        }
        let lb = match &desired.placement {
            Placement::Existing(id) => {
                for old in &owned {
                    changes.push(PlannedChange::new(
                        ChangeAction::Delete,
                        "LoadBalancer",
                        &old.load_balancer_id,
                        "DeleteLoadBalancer",
                    ));
                }
                Some(self.existing(id).await?)
            }
            Placement::Owned(body) => match owned.into_iter().next() {
                // The same refusal `ensure` makes: the plan shows it instead of changes.
                Some(lb) => match plan::network_kind_refusal(&lb, body) {
                    Some(refusal) => return Err(ProviderError::user(refusal)),
                    None => Some(lb),
                },
                None => {
                    changes.push(PlannedChange::new(
                        ChangeAction::Create,
                        "LoadBalancer",
                        body.get("LoadBalancerName")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                        "CreateLoadBalancer",
                    ));
                    None
                }
            },
        };
        let (observed, name) = match &lb {
            Some(lb) => (
                self.observe(lb, &desired.service).await?,
                lb.load_balancer_id.clone(),
            ),
            None => (Observed::default(), "(new)".to_string()),
        };
        if let Placement::Owned(_) = desired.placement {
            let group = source_ranges::group_name(&desired.service);
            changes.extend(
                self.source_range_steps(lb.as_ref(), spec, &desired)
                    .await?
                    .iter()
                    .map(|s| s.planned(&name, &group)),
            );
        }
        changes.extend(
            plan::plan(&observed, &desired)?
                .iter()
                .map(|s| s.planned(&name)),
        );
        Ok(changes)
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        let mut changes: Vec<PlannedChange> = self
            .owned(service)
            .await?
            .iter()
            .map(|lb| {
                PlannedChange::new(
                    ChangeAction::Delete,
                    "LoadBalancer",
                    &lb.load_balancer_id,
                    "DeleteLoadBalancer",
                )
            })
            .collect();
        let tags = source_ranges::group_tags(&self.cluster, service);
        for group in self.client.security_groups(&tags).await? {
            changes.push(PlannedChange::new(
                ChangeAction::Delete,
                "SecurityGroup",
                &group.security_group_id,
                "DeleteSecurityGroup",
            ));
        }
        let name = plan::listener_name(&self.config.listener_name, service);
        for lb in self.user_load_balancers().await? {
            for listener in self.client.listeners(&lb.load_balancer_id).await? {
                if listener.listener_name == name {
                    changes.push(PlannedChange::new(
                        ChangeAction::Delete,
                        "Listener",
                        format!(
                            "{}/{}:{}",
                            lb.load_balancer_id, listener.protocol, listener.port
                        ),
                        "DeleteLoadBalancerListeners",
                    ));
                }
            }
        }
        Ok(changes)
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

//! The Service load-balancer controller: for every `type: LoadBalancer` Service it handles, it
//! parses the annotations into a typed spec, picks the backend nodes, asks the provider to
//! ensure the load balancer and writes the address into `.status.loadBalancer`, with the
//! upstream finalizer and event reasons.

pub mod conditions;
mod decide;
mod error;
pub mod events;
pub mod finalizer;
pub mod nodes;
pub mod pools;
mod reconcile;
pub mod status;
#[cfg(test)]
pub(crate) mod testing;
pub mod tolerant;
#[cfg(test)]
mod trigger_tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use kube_lb_annotations::Cloud;
use kube_lb_provider_core::LoadBalancerProvider;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use error::{Error, ErrorClass};
pub use finalizer::FINALIZER;
pub use reconcile::{Disposition, service_key};

use crate::metrics::Metrics;

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Whose annotations are interpreted (the provider's cloud).
    pub cloud: Cloud,
    /// The `spec.loadBalancerClass` this controller handles, if any.
    pub load_balancer_class: Option<String>,
    /// Whether Services without `spec.loadBalancerClass` are handled too (this controller is
    /// the cluster's default load-balancer implementation).
    pub default_class: bool,
    /// Services reconciled in parallel.
    pub concurrency: u16,
    /// First delay after a retryable failure; doubles per failure of the same Service.
    pub backoff_base: Duration,
    /// Longest delay after retryable failures.
    pub backoff_max: Duration,
    /// Periodic resync of a converged Service (to repair drift made outside Kubernetes).
    pub resync: Duration,
    /// How long a node that was Ready may report NotReady or Unknown and stay a load-balancer
    /// backend (see [`nodes::ineligibility`]). Zero removes a node at its first NotReady.
    pub node_ready_grace: Duration,
    /// Longest one ensure or delete of one Service may take, end to end. Each provider bounds
    /// its own cloud requests; this is the backstop for a path that does not (a connection a
    /// client library never times out, a cloud operation that never finishes): past it the
    /// attempt is dropped, as a crash would drop it and as every provider resumes from, and
    /// retried with backoff, so one hung Service never holds a worker for good.
    pub provider_timeout: Duration,
    /// Reporting instance of events (and the leader identity).
    pub identity: String,
}

impl ControllerConfig {
    /// Defaults: default class, concurrency 4, backoff 5 s → 300 s, resync 10 min, node
    /// readiness grace 60 s, provider timeout 15 min.
    ///
    /// The provider timeout is longer than the slowest legitimate ensure (GCE operations are
    /// waited for up to 10 min; ARM long-running operations take minutes), so it only ever
    /// cuts off an attempt that would otherwise never end.
    ///
    /// The grace is longer than the node monitor grace period (40–50 s after which the node
    /// lifecycle controller marks a silent node Unknown), so a kubelet restart or one missed
    /// heartbeat window does not re-program every load balancer twice; and it is about as long
    /// as the clouds' own health checks take to stop sending to a dead node (NLB 3 × 10 s,
    /// Classic ELB 6 × 10 s), so removing the node later costs no traffic. Upstream never
    /// removes a node for readiness at all (KEP-3458); we still remove a node that stays down,
    /// so a dead node does not stay registered and health-checked until someone deletes it.
    pub fn new(cloud: Cloud) -> Self {
        Self {
            cloud,
            load_balancer_class: None,
            default_class: true,
            concurrency: 4,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(300),
            resync: Duration::from_secs(600),
            node_ready_grace: Duration::from_secs(60),
            provider_timeout: Duration::from_secs(15 * 60),
            identity: "kube-lb".to_string(),
        }
    }

    /// True when this controller is responsible for a Service of `class`.
    pub fn handles_class(&self, class: Option<&str>) -> bool {
        match class {
            Some(class) => self.load_balancer_class.as_deref() == Some(class),
            None => self.default_class,
        }
    }

    /// True when `service` is a LoadBalancer Service this controller should give an address.
    pub fn manages(&self, service: &Service) -> bool {
        let spec = service.spec.as_ref();
        spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
            && self.handles_class(spec.and_then(|s| s.load_balancer_class.as_deref()))
    }
}

/// `namespace/name` of a Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceName {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ServiceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl ServiceName {
    /// The name of `service`.
    pub fn of(service: &Service) -> Self {
        Self {
            namespace: service.namespace().unwrap_or_default(),
            name: service.name_any(),
        }
    }
}

/// Where one Service stands, for `kube-lb reconcile`, `kube-lb up` and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The load balancer exists and the status shows these addresses (IPs or host names).
    Ready(Vec<String>),
    /// The Service cannot be realised as written; nothing is retried until it changes.
    UserError(String),
    /// A transient failure; the controller retries with backoff.
    Retrying(String),
    /// Another controller implements this Service's load balancer (e.g. AWS
    /// `aws-load-balancer-type: nlb-ip`, left to aws-load-balancer-controller): nothing is
    /// done, reported or retried, and it is not a failure.
    ImplementedElsewhere,
}

/// Outcomes of every Service the controller handles.
pub type Outcomes = BTreeMap<ServiceName, Outcome>;

/// Per-Service memory of the controller.
#[derive(Debug, Default, Clone)]
struct ObjectState {
    /// Consecutive retryable failures (drives the backoff).
    failures: u32,
    /// The delay a failure path already chose (and announced in its Warning), for the error
    /// policy to use instead of drawing another.
    retry_in: Option<Duration>,
    /// Fingerprint of the Service when it last failed with a user error.
    user_error: Option<u64>,
    /// Set with `user_error` when that error can clear without the Service changing (a name
    /// held by another owner, which a person or the audit may delete): when the provider is
    /// asked again although the Service is unchanged. The error policy's requeue reads it.
    recheck_at: Option<tokio::time::Instant>,
    /// Set with `user_error` when that error was a refused change: the address of the load
    /// balancer that keeps serving and the condition, shown again if the status is wiped.
    refused: Option<reconcile::Refusal>,
    /// Fingerprint of the Service whose warnings were last published.
    warned: Option<u64>,
    /// Hashes of (spec, backends) last applied successfully.
    applied: Option<(u64, u64)>,
    /// What the last successful ensure was given and returned, to skip the next ensure when
    /// nothing it depends on changed.
    synced: Option<reconcile::Synced>,
    /// The status write of a failure being backed off, so its watch event does not retry early.
    echo: Option<reconcile::Echo>,
}

/// Everything a reconcile needs.
pub struct Context {
    client: Client,
    provider: Arc<dyn LoadBalancerProvider>,
    config: ControllerConfig,
    events: events::Events,
    metrics: Arc<Metrics>,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    state: Mutex<HashMap<ObjectRef<Service>, ObjectState>>,
    outcomes: watch::Sender<Outcomes>,
    leading: watch::Receiver<bool>,
    /// `Some(true)` once the Node and EndpointSlice stores hold a first complete list,
    /// `Some(false)` when they never will (the controller is stopping). See [`stores_ready`].
    stores_ready: watch::Receiver<Option<bool>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("provider", &self.provider.name())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    fn with_state<T>(&self, key: &ObjectRef<Service>, f: impl FnOnce(&mut ObjectState) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        f(state.entry(key.clone()).or_default())
    }

    fn forget(&self, key: &ObjectRef<Service>, name: &ServiceName) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        self.set_outcome(name, None);
    }

    fn set_outcome(&self, name: &ServiceName, outcome: Option<Outcome>) {
        // Another controller's load balancer is not ours to call ready or not.
        let service_ready = match &outcome {
            Some(Outcome::Ready(_)) => Some(true),
            Some(Outcome::UserError(_) | Outcome::Retrying(_)) => Some(false),
            Some(Outcome::ImplementedElsewhere) | None => None,
        };
        self.metrics
            .set_service_ready(&name.namespace, &name.name, service_ready);
        let mut ready = 0;
        self.outcomes.send_if_modified(|all| {
            let changed = match outcome {
                Some(outcome) => {
                    all.insert(name.clone(), outcome.clone()).as_ref() != Some(&outcome)
                }
                None => all.remove(name).is_some(),
            };
            ready = all
                .values()
                .filter(|o| matches!(o, Outcome::Ready(_)))
                .count();
            changed
        });
        self.metrics.set_load_balancers(ready);
    }

    fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits until the Node and EndpointSlice stores are complete; false when they never will be.
    async fn stores_ready(&self) -> bool {
        let mut ready = self.stores_ready.clone();
        match ready.wait_for(Option::is_some).await {
            Ok(ready) => ready.unwrap_or(false),
            Err(_) => false,
        }
    }
}

/// Publishes when both stores are complete, waiting on each from one task only.
///
/// `Store::wait_until_ready` must not be awaited by several tasks at once: kube-runtime keeps
/// one oneshot receiver per store behind a mutex, which remembers only the waker of the task
/// that polled it last. With concurrent reconciles waiting right after a leadership change,
/// every waiter but one was never woken, and its Service stayed unreconciled for good (its
/// later events queue behind a reconcile that never ends) — seen in the chaos suite as a
/// Service whose retype or deletion no replica ever handled.
fn stores_ready(nodes: Store<Node>, slices: Store<EndpointSlice>) -> watch::Receiver<Option<bool>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let ready =
            nodes.wait_until_ready().await.is_ok() && slices.wait_until_ready().await.is_ok();
        tx.send_replace(Some(ready));
    });
    rx
}

/// The controller, ready to run.
pub struct LoadBalancerController {
    client: Client,
    provider: Arc<dyn LoadBalancerProvider>,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    outcomes: watch::Sender<Outcomes>,
    node_sync: watch::Sender<NodeSync>,
    /// Ticks when Services waiting for an address may now get one (see
    /// [`LoadBalancerController::retry_pending_on`]).
    retry_pending: Option<watch::Receiver<u64>>,
}

impl std::fmt::Debug for LoadBalancerController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadBalancerController")
            .field("provider", &self.provider.name())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl LoadBalancerController {
    /// A controller using `provider` through `client`.
    pub fn new(
        client: Client,
        provider: Arc<dyn LoadBalancerProvider>,
        config: ControllerConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            client,
            provider,
            config,
            metrics,
            outcomes: watch::Sender::new(Outcomes::new()),
            node_sync: watch::Sender::new(NodeSync::default()),
            retry_pending: None,
        }
    }

    /// Retries every Service still waiting for its load balancer (outcome `Retrying`) each
    /// time `changes` ticks, without waiting out its backoff: the `local` provider ticks when
    /// a pool, a namespace's labels or another Service changed in a way that may free an
    /// address, so a `<pending>` Service is retried then and not only when it is edited.
    pub fn retry_pending_on(mut self, changes: watch::Receiver<u64>) -> Self {
        self.retry_pending = Some(changes);
        self
    }

    /// Where each handled Service stands; updated as reconciles finish.
    pub fn outcomes(&self) -> watch::Receiver<Outcomes> {
        self.outcomes.subscribe()
    }

    /// What the Node trigger has judged so far (the last Node event, re-syncs it caused).
    pub fn node_sync(&self) -> watch::Receiver<NodeSync> {
        self.node_sync.subscribe()
    }

    /// Runs until `shutdown`. Reconciles only while `leading` reads `true`; each time
    /// leadership is gained, allocations are first re-adopted from Service statuses.
    pub async fn run(
        self,
        mut leading: watch::Receiver<bool>,
        shutdown: CancellationToken,
    ) -> Result<(), kube::Error> {
        self.metrics.track_leadership(leading.clone());
        loop {
            tokio::select! {
                // Shutdown wins over leadership when both are ready (e.g. a zero timeout).
                biased;
                () = shutdown.cancelled() => return Ok(()),
                closed = async { leading.wait_for(|l| *l).await.is_err() } => if closed { return Ok(()) },
            }
            // Adoption talks to the provider: it is fenced by leadership like every reconcile.
            let mut fence = leading.clone();
            match crate::leader::while_leading(&mut fence, self.adopt_existing()).await {
                Some(result) => result?,
                None => {
                    tracing::warn!("leadership lost while re-adopting load balancers");
                    continue;
                }
            }
            let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
            let watch_leading = {
                let mut leading = leading.clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        () = shutdown.cancelled() => {}
                        closed = async { leading.wait_for(|l| !*l).await.is_err() } => {
                            // A closed channel means leadership can no longer change.
                            if closed {
                                shutdown.cancelled().await;
                            }
                        }
                    }
                    let _ = stop_tx.send(());
                })
            };
            self.run_once(leading.clone(), stop_rx.map(|_| ())).await;
            watch_leading.abort();
            if shutdown.is_cancelled() {
                return Ok(());
            }
            tracing::warn!("leadership lost; stopped reconciling");
        }
    }

    /// Re-adopts the addresses recorded in Service statuses, oldest Service first, so a
    /// provider with in-memory state never hands an address out twice after a restart.
    async fn adopt_existing(&self) -> Result<(), kube::Error> {
        // Item by item: one Service that does not decode must not stop the controller.
        let (services, undecodable) = tolerant::list_all::<Service>(self.client.clone()).await?;
        for error in undecodable {
            tracing::warn!(%error, "not re-adopting a Service that does not decode");
        }
        adopt_statuses(self.provider.as_ref(), &services).await;
        Ok(())
    }

    async fn run_once(
        &self,
        leading: watch::Receiver<bool>,
        stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        let client = self.client.clone();
        let events = events::Events::new(client.clone(), self.config.identity.clone());
        // Every watch decodes object by object (see `tolerant`): an object that does not fit
        // its type is skipped and reported instead of failing the whole list.
        let (nodes, nodes_writer) = reflector::store::<Node>();
        let node_events = tolerant::watch_all::<Node>(
            client.clone(),
            watcher::Config::default(),
            Arc::new(tolerant::Rejects::new("nodes", self.metrics.clone())),
        )
        .default_backoff()
        .reflect(nodes_writer);
        let (slices, slices_writer) = reflector::store::<EndpointSlice>();
        let slice_events = tolerant::watch_all::<EndpointSlice>(
            client.clone(),
            watcher::Config::default(),
            Arc::new(tolerant::Rejects::new(
                "endpointslices",
                self.metrics.clone(),
            )),
        )
        .default_backoff()
        .reflect(slices_writer);
        let (services, services_writer) = reflector::store::<Service>();
        let service_events = tolerant::watch_all::<Service>(
            client.clone(),
            watcher::Config::default(),
            Arc::new(tolerant::ServiceRejects::new(
                self.metrics.clone(),
                events.clone(),
            )),
        )
        .default_backoff()
        .reflect(services_writer)
        .applied_objects();

        let controller = Controller::for_stream(service_events, services.clone()).with_config(
            kube::runtime::controller::Config::default()
                .concurrency(self.config.concurrency.max(1)),
        );
        let node_resyncs = node_trigger(
            node_events,
            nodes.clone(),
            services.clone(),
            self.config.cloud,
            self.config.node_ready_grace,
            self.node_sync.clone(),
            self.metrics.clone(),
        );
        let slice_resyncs =
            slice_trigger(slice_events, slices.clone(), services, self.config.cloud);

        let stores_ready = stores_ready(nodes.clone(), slices.clone());
        let ctx = Arc::new(Context {
            stores_ready,
            client: client.clone(),
            provider: self.provider.clone(),
            config: self.config.clone(),
            events,
            metrics: self.metrics.clone(),
            nodes,
            slices,
            state: Mutex::new(HashMap::new()),
            outcomes: self.outcomes.clone(),
            leading,
        });
        let pending_retries = pending_trigger(self.retry_pending.clone(), ctx.clone());
        controller
            .reconcile_on(node_resyncs)
            .reconcile_on(slice_resyncs)
            .reconcile_on(pending_retries)
            .graceful_shutdown_on(stop)
            .run(reconcile_while_leading, reconcile::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile failed");
                }
            })
            .await;
    }
}

/// [`reconcile::reconcile`] fenced by leadership: dropped the moment leadership ends, so a
/// replica that lost the lease starts no further cloud call or API write. kube-runtime's
/// graceful shutdown would instead wait for in-flight reconciles, which may be hung on the very
/// API server that made this replica lose the lease. A request already sent when the future is
/// dropped is abandoned on our side; the timing argument in [`crate::leader`] bounds it.
async fn reconcile_while_leading(
    service: Arc<Service>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let mut leading = ctx.leading.clone();
    let name = ServiceName::of(&service);
    match crate::leader::while_leading(&mut leading, reconcile::reconcile(service, ctx)).await {
        Some(result) => result,
        None => {
            tracing::info!(service = %name, "leadership lost; reconcile cancelled");
            Ok(reconcile::not_leading())
        }
    }
}

/// How long the pending trigger lets ticks gather: an allocation pass over many Services
/// ticks once per freed address, and one retry of the waiting Services covers them all.
const PENDING_GATHER: Duration = Duration::from_millis(100);

/// Turns ticks of `changes` into retries of every Service whose outcome is `Retrying`, with
/// the echo of its last failure forgotten so the retry is not held back to its backoff.
fn pending_trigger(
    changes: Option<watch::Receiver<u64>>,
    ctx: Arc<Context>,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    futures::stream::unfold((changes, ctx), |(mut changes, ctx)| async move {
        let receiver = changes.as_mut()?;
        receiver.changed().await.ok()?;
        tokio::time::sleep(PENDING_GATHER).await;
        receiver.borrow_and_update();
        let waiting: Vec<ObjectRef<Service>> = ctx
            .outcomes
            .borrow()
            .iter()
            .filter(|(_, outcome)| matches!(outcome, Outcome::Retrying(_)))
            .map(|(name, _)| ObjectRef::new(&name.name).within(&name.namespace))
            .collect();
        for key in &waiting {
            ctx.with_state(key, |s| s.echo = None);
        }
        if !waiting.is_empty() {
            tracing::debug!(
                services = waiting.len(),
                "retrying Services waiting for an address"
            );
        }
        Some((futures::stream::iter(waiting), (changes, ctx)))
    })
    .flatten()
}

fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        || service.finalizers().iter().any(|f| f == FINALIZER)
}

/// Tells `provider` about the addresses recorded in the statuses of the Services carrying our
/// finalizer, oldest Service first (see [`LoadBalancerProvider::adopt`]): what the controller
/// does when it starts leading, and what `kube-lb plan` and `kube-lb audit` do first, so a
/// provider with in-memory state (`local`) sees what a running controller would. A refused
/// adoption is logged; the load balancer is then re-created by the next ensure.
pub async fn adopt_statuses(provider: &dyn LoadBalancerProvider, services: &[Service]) {
    let mut owned: Vec<&Service> = services
        .iter()
        .filter(|s| s.finalizers().iter().any(|f| f == FINALIZER))
        .collect();
    owned.sort_by_key(|s| s.metadata.creation_timestamp.as_ref().map(|t| t.0));
    for service in owned {
        let Ok(key) = reconcile::service_key(service) else {
            continue;
        };
        let recorded = status::recorded_status(service);
        if recorded.ingress.is_empty() {
            continue;
        }
        if let Err(error) = provider.adopt(&key, &recorded).await {
            tracing::warn!(service = %key, %error, "could not re-adopt load balancer; it will be re-created");
        }
    }
}

/// What the Node trigger has judged, for tests and diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSync {
    /// `metadata.resourceVersion` of the last Node watch event judged (or listed).
    pub observed: Option<String>,
    /// How many times a Node change, or the end of a readiness grace, re-synced every load
    /// balancer.
    pub syncs: u64,
}

/// The Node trigger's memory between events.
struct NodeTrigger {
    events: futures::stream::BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>>,
    nodes: Store<Node>,
    services: Store<Service>,
    cloud: Cloud,
    grace: Duration,
    sync: watch::Sender<NodeSync>,
    /// Where a pass over the Services is timed (`service_controller_nodesync_latency_seconds`).
    metrics: Arc<Metrics>,
    /// Fingerprint of the last judged node set; `None` before the first complete list.
    last: Option<u64>,
    /// When the next readiness grace runs out.
    wake: Option<k8s_openapi::jiff::Timestamp>,
}

impl NodeTrigger {
    /// The Services to re-sync when the node set as providers see it changed; empty otherwise.
    fn judge(&mut self) -> Vec<ObjectRef<Service>> {
        let services = self.services.state();
        let labels = nodes::labels_read_by_any(self.cloud, services.iter().map(AsRef::as_ref));
        let node_state = self.nodes.state();
        let view = nodes::NodeSetView::of(
            node_state.iter().map(AsRef::as_ref),
            &nodes::Readiness::now(self.grace),
            &labels,
        );
        self.wake = view.next_grace_end;
        let fingerprint = view.fingerprint();
        // The first complete list only sets the baseline: every Service is reconciled when the
        // controller starts anyway, from a node store at least this recent.
        match self.last.replace(fingerprint) {
            Some(last) if last != fingerprint => {}
            _ => return Vec::new(),
        }
        self.sync.send_modify(|s| s.syncs += 1);
        tracing::debug!(
            nodes = view.nodes.len(),
            "node set changed; re-syncing every load balancer"
        );
        let queued: Vec<ObjectRef<Service>> = services
            .iter()
            .filter(|s| is_load_balancer(s))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect();
        self.metrics.node_sync_started(
            queued
                .iter()
                .map(|key| {
                    format!(
                        "{}/{}",
                        key.namespace.as_deref().unwrap_or_default(),
                        key.name
                    )
                })
                .collect(),
        );
        queued
    }

    /// How long until the next readiness grace runs out, if one is running.
    fn until_wake(&self) -> Option<Duration> {
        // A floor: the wall clock may lag the timer a little, and the view is judged again then.
        const MIN: Duration = Duration::from_millis(10);
        let at = self.wake?;
        let left = at.duration_since(k8s_openapi::jiff::Timestamp::now());
        Some(Duration::try_from(left).unwrap_or_default().max(MIN))
    }
}

/// Turns Node watch events into re-syncs of every load balancer, but only when the node set as
/// providers see it changed ([`nodes::NodeSetView`]: eligibility with the readiness grace,
/// provider IDs, addresses, the labels a provider reads) — not on heartbeats, condition
/// timestamps, unrelated labels or Ready flaps within the grace — and also when a readiness
/// grace runs out, which no Node event announces. Each Service's reconcile then compares its
/// own backends with what it last applied, so a re-sync that changes nothing for a Service
/// makes no provider call. As upstream, one Node change costs one pass over the Services, not
/// one per node.
fn node_trigger(
    events: impl futures::Stream<Item = Result<watcher::Event<Node>, watcher::Error>> + Send + 'static,
    nodes: Store<Node>,
    services: Store<Service>,
    cloud: Cloud,
    grace: Duration,
    sync: watch::Sender<NodeSync>,
    metrics: Arc<Metrics>,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let state = NodeTrigger {
        events: events.boxed(),
        nodes,
        services,
        cloud,
        grace,
        sync,
        metrics,
        last: None,
        wake: None,
    };
    futures::stream::unfold(state, |mut trigger| async move {
        loop {
            let wake = trigger.until_wake();
            let event = tokio::select! {
                event = trigger.events.next() => match event {
                    Some(event) => Some(event),
                    None => return None,
                },
                () = tokio::time::sleep(wake.unwrap_or_default()), if wake.is_some() => None,
            };
            let (observed, judge) = match event {
                Some(Ok(watcher::Event::Apply(node) | watcher::Event::Delete(node))) => {
                    (node.resource_version(), true)
                }
                // The store is replaced only at InitDone: judge the complete list then.
                Some(Ok(watcher::Event::InitApply(node))) => (node.resource_version(), false),
                Some(Ok(watcher::Event::Init)) => (None, false),
                Some(Ok(watcher::Event::InitDone)) | None => (None, true),
                Some(Err(error)) => {
                    // The watcher backs off and re-lists by itself.
                    tracing::debug!(%error, "node watch failed");
                    (None, false)
                }
            };
            let resync = if judge { trigger.judge() } else { Vec::new() };
            if observed.is_some() {
                trigger.sync.send_modify(|s| s.observed = observed);
            }
            if !resync.is_empty() {
                return Some((futures::stream::iter(resync), trigger));
            }
        }
    })
    .flatten()
}

/// The EndpointSlice trigger's memory between events.
struct SliceTrigger {
    events:
        futures::stream::BoxStream<'static, Result<watcher::Event<EndpointSlice>, watcher::Error>>,
    slices: Store<EndpointSlice>,
    services: Store<Service>,
    /// Whose annotations say whether a Service's backends follow its endpoints.
    cloud: Cloud,
    /// The nodes with a ready endpoint, per Service; an absent entry is the empty set.
    last: HashMap<ObjectRef<Service>, BTreeSet<String>>,
    /// Whether a complete list has set the baseline.
    listed: bool,
}

impl SliceTrigger {
    /// Records `now` as the set of `key` and tells whether `key` is to be re-synced: its set
    /// changed and its backends depend on endpoints.
    fn changed(
        &mut self,
        key: ObjectRef<Service>,
        now: BTreeSet<String>,
    ) -> Option<ObjectRef<Service>> {
        let previous = if now.is_empty() {
            self.last.remove(&key)
        } else {
            self.last.insert(key.clone(), now.clone())
        };
        if previous.unwrap_or_default() == now {
            return None;
        }
        let service = self.services.get(&key)?;
        (is_load_balancer(&service) && nodes::backends_follow_endpoints(&service, self.cloud))
            .then_some(key)
    }

    /// After an Apply or Delete of `slice` (already in the store): its Service, if it changed.
    fn judge_one(&mut self, slice: &EndpointSlice) -> Vec<ObjectRef<Service>> {
        let (Some(name), Some(namespace)) = (
            slice.labels().get(nodes::SERVICE_NAME_LABEL).cloned(),
            slice.namespace(),
        ) else {
            return Vec::new();
        };
        let state = self.slices.state();
        let now =
            nodes::nodes_with_ready_endpoints(state.iter().map(AsRef::as_ref), &namespace, &name);
        self.changed(ObjectRef::new(&name).within(&namespace), now)
            .into_iter()
            .collect()
    }

    /// After a complete (re-)list: every Service whose set changed while the watch was down.
    fn judge_all(&mut self) -> Vec<ObjectRef<Service>> {
        let state = self.slices.state();
        let mut now: HashMap<ObjectRef<Service>, BTreeSet<String>> =
            nodes::ready_endpoint_nodes_by_service(state.iter().map(AsRef::as_ref))
                .into_iter()
                .map(|((namespace, name), set)| (ObjectRef::new(&name).within(&namespace), set))
                .collect();
        if !std::mem::replace(&mut self.listed, true) {
            // The first list only sets the baseline: every Service is reconciled at start.
            self.last = now;
            return Vec::new();
        }
        let keys: std::collections::HashSet<ObjectRef<Service>> =
            self.last.keys().chain(now.keys()).cloned().collect();
        keys.into_iter()
            .filter_map(|key| {
                let set = now.remove(&key).unwrap_or_default();
                self.changed(key, set)
            })
            .collect()
    }
}

/// Turns EndpointSlice watch events into re-syncs of their Service when its backends depend on
/// endpoints (`externalTrafficPolicy: Local`) and the set of nodes with a ready endpoint of it
/// changed: endpoints coming, going or changing readiness on nodes that keep a ready one change
/// nothing a provider sees. After a re-list (a watch that was down) every Service is judged, as
/// the list shows only the outcome of what happened meanwhile.
fn slice_trigger(
    events: impl futures::Stream<Item = Result<watcher::Event<EndpointSlice>, watcher::Error>>
    + Send
    + 'static,
    slices: Store<EndpointSlice>,
    services: Store<Service>,
    cloud: Cloud,
) -> impl futures::Stream<Item = ObjectRef<Service>> + Send + 'static {
    let state = SliceTrigger {
        events: events.boxed(),
        slices,
        services,
        cloud,
        last: HashMap::new(),
        listed: false,
    };
    futures::stream::unfold(state, |mut trigger| async move {
        loop {
            let resync = match trigger.events.next().await? {
                // The reflector has applied the event to the store before it reaches us.
                Ok(watcher::Event::Apply(slice) | watcher::Event::Delete(slice)) => {
                    trigger.judge_one(&slice)
                }
                // The store is replaced only at InitDone: judge the complete list then.
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Vec::new(),
                Ok(watcher::Event::InitDone) => trigger.judge_all(),
                Err(error) => {
                    // The watcher backs off and re-lists by itself.
                    tracing::debug!(%error, "EndpointSlice watch failed");
                    Vec::new()
                }
            };
            if !resync.is_empty() {
                return Some((futures::stream::iter(resync), trigger));
            }
        }
    })
    .flatten()
}

/// The longest delay before retrying a Service after its `failures`-th consecutive retryable
/// failure: `base` doubling up to `max`. [`retry_delay`] draws the actual delay below it.
pub fn backoff_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    base.checked_mul(1u32 << exponent).unwrap_or(max).min(max)
}

/// The part of the backoff delay jitter may take off.
pub const BACKOFF_JITTER: f64 = 0.5;

/// The delay before the next retry: [`backoff_delay`] shortened by up to
/// [`BACKOFF_JITTER`] of itself, `unit` (uniform in `[0, 1)`) choosing how much.
///
/// "Equal jitter": the delay stays within `[d/2, d]`, so it never passes `max`, its lower
/// bound still doubles per failure, and Services that failed together (a quota outage, a
/// cloud API down) come back spread over half the window instead of all at once; at the 300 s
/// cap 1,000 such Services retry over 150 s, about 7 per second, under the providers'
/// default rate limits.
pub fn retry_delay(base: Duration, max: Duration, failures: u32, unit: f64) -> Duration {
    let nominal = backoff_delay(base, max, failures);
    let unit = if unit.is_finite() {
        unit.clamp(0.0, 1.0)
    } else {
        0.0
    };
    nominal.mul_f64(1.0 - BACKOFF_JITTER * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_goes_from_5s_to_300s() {
        let (base, max) = (Duration::from_secs(5), Duration::from_secs(300));
        let cases = [
            (0, 5),
            (1, 5),
            (2, 10),
            (3, 20),
            (6, 160),
            (7, 300),
            (100, 300),
        ];
        for (failures, secs) in cases {
            assert_eq!(
                backoff_delay(base, max, failures),
                Duration::from_secs(secs),
                "{failures}"
            );
        }
    }

    #[test]
    fn retry_delay_is_jittered_within_half_the_backoff() {
        let (base, max) = (Duration::from_secs(5), Duration::from_secs(300));
        let cases = [
            // (failures, unit, seconds)
            (1, 0.0, 5.0),
            (1, 0.5, 3.75),
            (1, 0.999_999, 2.5),
            (3, 0.0, 20.0),
            (3, 1.0, 10.0),
            (7, 0.0, 300.0),
            (7, 0.5, 225.0),
            (100, 1.0, 150.0),
            (3, -1.0, 20.0),
            (3, f64::NAN, 20.0),
        ];
        for (failures, unit, secs) in cases {
            let got = retry_delay(base, max, failures, unit).as_secs_f64();
            assert!((got - secs).abs() < 0.001, "{failures} {unit}: {got}");
        }
        // Drawn delays stay in [d/2, d] and are not all the same.
        let drawn: std::collections::BTreeSet<Duration> = (0..50)
            .map(|_| retry_delay(base, max, 3, rand::random::<f64>()))
            .collect();
        assert!(drawn.len() > 1, "jitter varies the delay");
        for delay in drawn {
            assert!(
                (Duration::from_secs(10)..=Duration::from_secs(20)).contains(&delay),
                "{delay:?}"
            );
        }
    }

    #[test]
    fn class_handling() {
        let mut config = ControllerConfig::new(Cloud::Local);
        config.load_balancer_class = Some("kube-lb.io/local".into());
        let cases = [
            (true, None, true),
            (true, Some("kube-lb.io/local"), true),
            (true, Some("other.io/lb"), false),
            (false, None, false),
            (false, Some("kube-lb.io/local"), true),
        ];
        for (default_class, class, want) in cases {
            config.default_class = default_class;
            assert_eq!(
                config.handles_class(class),
                want,
                "default={default_class} class={class:?}"
            );
        }
    }
}

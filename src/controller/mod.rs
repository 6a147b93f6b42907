//! The Service load-balancer controller: for every `type: LoadBalancer` Service it handles, it
//! parses the annotations into a typed spec, picks the backend nodes, asks the provider to
//! ensure the load balancer and writes the address into `.status.loadBalancer`, with the
//! upstream finalizer and event reasons.

mod error;
pub mod events;
pub mod finalizer;
pub mod nodes;
mod reconcile;
pub mod status;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
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
    /// Reporting instance of events (and the leader identity).
    pub identity: String,
}

impl ControllerConfig {
    /// Defaults: default class, concurrency 4, backoff 5 s → 300 s, resync 10 min.
    pub fn new(cloud: Cloud) -> Self {
        Self {
            cloud,
            load_balancer_class: None,
            default_class: true,
            concurrency: 4,
            backoff_base: Duration::from_secs(5),
            backoff_max: Duration::from_secs(300),
            resync: Duration::from_secs(600),
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
}

/// Outcomes of every Service the controller handles.
pub type Outcomes = BTreeMap<ServiceName, Outcome>;

/// Per-Service memory of the controller.
#[derive(Debug, Default, Clone)]
struct ObjectState {
    /// Consecutive retryable failures (drives the backoff).
    failures: u32,
    /// Fingerprint of the Service when it last failed with a user error.
    user_error: Option<u64>,
    /// Fingerprint of the Service whose warnings were last published.
    warned: Option<u64>,
    /// Hashes of (spec, backends) last applied successfully.
    applied: Option<(u64, u64)>,
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
}

/// The controller, ready to run.
pub struct LoadBalancerController {
    client: Client,
    provider: Arc<dyn LoadBalancerProvider>,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    outcomes: watch::Sender<Outcomes>,
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
        }
    }

    /// Where each handled Service stands; updated as reconciles finish.
    pub fn outcomes(&self) -> watch::Receiver<Outcomes> {
        self.outcomes.subscribe()
    }

    /// Runs until `shutdown`. Reconciles only while `leading` reads `true`; each time
    /// leadership is gained, allocations are first re-adopted from Service statuses.
    pub async fn run(
        self,
        mut leading: watch::Receiver<bool>,
        shutdown: CancellationToken,
    ) -> Result<(), kube::Error> {
        loop {
            tokio::select! {
                // Shutdown wins over leadership when both are ready (e.g. a zero timeout).
                biased;
                () = shutdown.cancelled() => return Ok(()),
                closed = async { leading.wait_for(|l| *l).await.is_err() } => if closed { return Ok(()) },
            }
            self.adopt_existing().await?;
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
        let services = Api::<Service>::all(self.client.clone())
            .list(&Default::default())
            .await?;
        let mut owned: Vec<&Service> = services
            .items
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
            if let Err(error) = self.provider.adopt(&key, &recorded).await {
                tracing::warn!(service = %key, %error, "could not re-adopt load balancer; it will be re-created");
            }
        }
        Ok(())
    }

    async fn run_once(
        &self,
        leading: watch::Receiver<bool>,
        stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    ) {
        let client = self.client.clone();
        let (nodes, nodes_writer) = reflector::store::<Node>();
        let node_events = watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .reflect(nodes_writer)
            .touched_objects();
        let (slices, slices_writer) = reflector::store::<EndpointSlice>();
        let slice_events = watcher(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(slices_writer)
        .touched_objects();

        let controller = Controller::new(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
        )
        .with_config(
            kube::runtime::controller::Config::default()
                .concurrency(self.config.concurrency.max(1)),
        );
        let services = controller.store();
        let node_mapper = node_trigger(nodes.clone(), services.clone());
        let slice_mapper = slice_trigger(services);

        let ctx = Arc::new(Context {
            client: client.clone(),
            provider: self.provider.clone(),
            config: self.config.clone(),
            events: events::Events::new(client, self.config.identity.clone()),
            metrics: self.metrics.clone(),
            nodes,
            slices,
            state: Mutex::new(HashMap::new()),
            outcomes: self.outcomes.clone(),
            leading,
        });
        controller
            .watches_stream(node_events, node_mapper)
            .watches_stream(slice_events, slice_mapper)
            .graceful_shutdown_on(stop)
            .run(reconcile::reconcile, reconcile::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "reconcile failed");
                }
            })
            .await;
    }
}

fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        || service.finalizers().iter().any(|f| f == FINALIZER)
}

/// Maps Node changes to "re-sync every load balancer", but only when the eligible node set
/// really changed (heartbeats and condition timestamps change nothing).
fn node_trigger(
    nodes: Store<Node>,
    services: Store<Service>,
) -> impl Fn(Node) -> Vec<ObjectRef<Service>> + Send + Sync + 'static {
    let last = Mutex::new(None::<u64>);
    move |_node| {
        let state = nodes.state();
        let eligible = nodes::eligible_nodes(state.iter().map(AsRef::as_ref));
        let fingerprint = nodes::node_set_fingerprint(&eligible);
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        if *last == Some(fingerprint) {
            return Vec::new();
        }
        *last = Some(fingerprint);
        services
            .state()
            .iter()
            .filter(|s| is_load_balancer(s))
            .map(|s| ObjectRef::from_obj(s.as_ref()))
            .collect()
    }
}

/// Maps an EndpointSlice change to its Service, when that Service's backends depend on
/// endpoints (`externalTrafficPolicy: Local`).
fn slice_trigger(
    services: Store<Service>,
) -> impl Fn(EndpointSlice) -> Option<ObjectRef<Service>> + Send + Sync + 'static {
    move |slice| {
        let name = slice.labels().get(nodes::SERVICE_NAME_LABEL)?.clone();
        let namespace = slice.namespace()?;
        let key = ObjectRef::new(&name).within(&namespace);
        let service = services.get(&key)?;
        let local = service
            .spec
            .as_ref()
            .and_then(|s| s.external_traffic_policy.as_deref())
            == Some("Local");
        (local && is_load_balancer(&service)).then_some(key)
    }
}

/// The delay before retrying a Service after its `failures`-th consecutive retryable failure:
/// `base` doubling up to `max`.
pub fn backoff_delay(base: Duration, max: Duration, failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(31);
    base.checked_mul(1u32 << exponent).unwrap_or(max).min(max)
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

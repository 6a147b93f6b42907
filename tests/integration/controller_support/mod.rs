//! Shared harness for the controller integration tests: the in-memory API server over real
//! HTTP, the controller with the `local` provider wrapped in a recording provider, fixture
//! builders and condition waits with a ceiling.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_lb::controller::{ControllerConfig, FINALIZER, LoadBalancerController, Outcomes};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::{Cloud, LoadBalancerSpec, ServiceKey};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, LoadBalancerStatus, ProviderError,
};
use kube_lb_provider_local::{LocalProvider, Pool};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long any awaited condition may take before the test fails.
pub const CEILING: Duration = Duration::from_secs(20);

/// One call the controller made to the provider, with what the API server showed at that
/// moment (so tests can check ordering against the finalizer).
#[derive(Debug, Clone)]
pub enum Call {
    /// `ensure`.
    Ensure {
        service: String,
        ports: Vec<u16>,
        requested_ip: Option<String>,
        backends: Vec<String>,
        finalizer_present: bool,
    },
    /// `delete`.
    Delete {
        service: String,
        finalizer_present: bool,
    },
}

/// Wraps the local provider, recording every call and optionally failing `ensure` with
/// retryable errors.
pub struct RecordingProvider {
    pub inner: LocalProvider,
    client: Client,
    calls: Mutex<Vec<Call>>,
    failures_left: AtomicU32,
    ensure_hangs_left: AtomicU32,
    delete_hangs_left: AtomicU32,
    ensure_hold: Mutex<Option<EnsureHold>>,
    owned_elsewhere_left: AtomicU32,
}

/// Holds the next `ensure` after it is recorded: `entered` is notified when it arrives, and
/// it goes on (to the wrapped provider) once `release` is notified.
#[derive(Clone, Default)]
pub struct EnsureHold {
    pub entered: Arc<tokio::sync::Notify>,
    pub release: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for RecordingProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingProvider").finish_non_exhaustive()
    }
}

/// The addresses the tests' local providers hand out.
pub const TEST_POOL: &str = "127.240.0.0/16";

/// The local provider handing out [`TEST_POOL`], recording its calls on `counter`.
pub fn local_provider(counter: CallCounter) -> LocalProvider {
    LocalProvider::new(
        Pool::new(vec![TEST_POOL.parse().unwrap()]).unwrap(),
        counter,
    )
}

impl RecordingProvider {
    /// The local provider on [`TEST_POOL`], recording every call (and what `client` shows of
    /// the Service's finalizer at that moment).
    pub fn new(client: Client, counter: CallCounter) -> Self {
        Self {
            inner: local_provider(counter),
            client,
            calls: Mutex::new(Vec::new()),
            failures_left: AtomicU32::new(0),
            ensure_hangs_left: AtomicU32::new(0),
            delete_hangs_left: AtomicU32::new(0),
            ensure_hold: Mutex::new(None),
            owned_elsewhere_left: AtomicU32::new(0),
        }
    }

    /// The next `n` ensures find the load balancer's name held by another owner.
    pub fn owned_elsewhere_next(&self, n: u32) {
        self.owned_elsewhere_left.store(n, Ordering::SeqCst);
    }

    /// Holds the next ensure until the test releases it (see [`EnsureHold`]).
    pub fn hold_next_ensure(&self) -> EnsureHold {
        let hold = EnsureHold::default();
        *self.ensure_hold.lock().unwrap() = Some(hold.clone());
        hold
    }

    /// The next `n` ensures fail with a retryable error.
    pub fn fail_next(&self, n: u32) {
        self.failures_left.store(n, Ordering::SeqCst);
    }

    /// The next `n` ensures never answer, as a call to a cloud that stopped responding with
    /// no client timeout would.
    pub fn hang_next_ensures(&self, n: u32) {
        self.ensure_hangs_left.store(n, Ordering::SeqCst);
    }

    /// The next `n` deletes never answer.
    pub fn hang_next_deletes(&self, n: u32) {
        self.delete_hangs_left.store(n, Ordering::SeqCst);
    }

    /// Never returns when `left` says a hang is due (and counts it).
    async fn hang_if_due(left: &AtomicU32) {
        let due = left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if due {
            std::future::pending::<()>().await;
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    pub fn ensures_of(&self, service: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Ensure { service: s, .. } if s == service))
            .collect()
    }

    pub fn deletes_of(&self, service: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Delete { service: s, .. } if s == service))
            .collect()
    }

    async fn has_finalizer(&self, key: &ServiceKey) -> bool {
        let api: Api<Service> = Api::namespaced(self.client.clone(), &key.namespace);
        api.get_opt(&key.name)
            .await
            .ok()
            .flatten()
            .is_some_and(|s| s.finalizers().iter().any(|f| f == FINALIZER))
    }
}

#[async_trait]
impl LoadBalancerProvider for RecordingProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let finalizer_present = self.has_finalizer(&spec.service).await;
        self.calls.lock().unwrap().push(Call::Ensure {
            service: spec.service.to_string(),
            ports: spec.ports.iter().map(|p| p.port).collect(),
            requested_ip: spec.requested_ip.map(|ip| ip.to_string()),
            backends: backends.iter().map(|b| b.name.clone()).collect(),
            finalizer_present,
        });
        Self::hang_if_due(&self.ensure_hangs_left).await;
        let hold = self.ensure_hold.lock().unwrap().take();
        if let Some(hold) = hold {
            hold.entered.notify_one();
            hold.release.notified().await;
        }
        if self
            .owned_elsewhere_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(ProviderError::owned_elsewhere(
                "ensure",
                format!("load balancer {}", spec.service),
                "Service UID 1234 (a leftover)",
            ));
        }
        let left = self.failures_left.load(Ordering::SeqCst);
        if left > 0 {
            self.failures_left.store(left - 1, Ordering::SeqCst);
            return Err(ProviderError::throttled("ensure", "injected throttling"));
        }
        self.inner.ensure(spec, backends).await
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let finalizer_present = self.has_finalizer(service).await;
        self.calls.lock().unwrap().push(Call::Delete {
            service: service.to_string(),
            finalizer_present,
        });
        Self::hang_if_due(&self.delete_hangs_left).await;
        self.inner.delete(service).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        self.inner.status(service).await
    }

    async fn adopt(
        &self,
        service: &ServiceKey,
        status: &LoadBalancerStatus,
    ) -> Result<(), ProviderError> {
        self.inner.adopt(service, status).await
    }
}

/// A running controller.
pub struct Running {
    pub provider: Arc<RecordingProvider>,
    pub metrics: Arc<Metrics>,
    pub counter: CallCounter,
    pub outcomes: watch::Receiver<Outcomes>,
    pub leading: watch::Sender<bool>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), kube::Error>>,
}

impl Running {
    /// Stops the controller and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(CEILING, self.task).await;
    }
}

/// Test-friendly controller settings: short backoff so retries happen within the ceiling.
pub fn test_config() -> ControllerConfig {
    let mut config = ControllerConfig::new(Cloud::Local);
    config.backoff_base = Duration::from_millis(200);
    config.backoff_max = Duration::from_secs(2);
    config.identity = "test-controller".into();
    config
}

/// Starts a controller against `server`.
pub fn start_controller(
    server: &RunningApiServer,
    config: ControllerConfig,
    leading: bool,
) -> Running {
    let client = server.client().unwrap();
    let counter = CallCounter::new();
    let provider = Arc::new(RecordingProvider::new(client.clone(), counter.clone()));
    start_with_provider(server, config, leading, provider, counter)
}

/// Starts a controller against `server` acting through `provider` (whose calls `counter`
/// records).
pub fn start_with_provider(
    server: &RunningApiServer,
    config: ControllerConfig,
    leading: bool,
    provider: Arc<RecordingProvider>,
    counter: CallCounter,
) -> Running {
    start_inspecting(server, config, leading, provider, counter, |_| ()).0
}

/// [`start_with_provider`], also handing out what `inspect` takes from the controller before
/// it runs (e.g. its Node trigger's watch).
pub fn start_inspecting<T>(
    server: &RunningApiServer,
    config: ControllerConfig,
    leading: bool,
    provider: Arc<RecordingProvider>,
    counter: CallCounter,
    inspect: impl FnOnce(&LoadBalancerController) -> T,
) -> (Running, T) {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        kube_lb::cli::init_logging(&filter, kube_lb::cli::LogFormat::Text);
    }
    let client = server.client().unwrap();
    let metrics = Arc::new(Metrics::new());
    metrics.observe_calls(&counter);
    let controller = LoadBalancerController::new(client, provider.clone(), config, metrics.clone());
    let inspected = inspect(&controller);
    let outcomes = controller.outcomes();
    let (leading_tx, leading_rx) = watch::channel(leading);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller.run(leading_rx, shutdown.clone()));
    let running = Running {
        provider,
        metrics,
        counter,
        outcomes,
        leading: leading_tx,
        shutdown,
        task,
    };
    (running, inspected)
}

/// A fresh [`server`], a client of it, and a leading controller with [`test_config`] against
/// it: the start of most controller tests. Keep the server bound (`_server` where unused): it
/// stops when dropped.
pub async fn server_and_controller() -> (RunningApiServer, Client, Running) {
    let server = server().await;
    let client = server.client().unwrap();
    let running = start_controller(&server, test_config(), true);
    (server, client, running)
}

/// A server with one ready node `n1`.
pub async fn server() -> RunningApiServer {
    let server = ApiServer::builder().start().await.unwrap();
    server.seed(node("n1")).unwrap();
    server
}

/// A Ready node with an InternalIP.
pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// Service fixture builder.
#[derive(Debug, Clone)]
pub struct Svc(pub Value);

/// A `type: LoadBalancer` Service `ns/name` with one TCP port 80.
pub fn svc_lb(ns: &str, name: &str) -> Svc {
    Svc(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
        }
    }))
}

impl Svc {
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }
    pub fn port(mut self, port: u16) -> Self {
        self.0["spec"]["ports"][0]["port"] = json!(port);
        self
    }
    pub fn local(mut self) -> Self {
        self.0["spec"]["externalTrafficPolicy"] = json!("Local");
        self
    }
    pub fn class(mut self, class: &str) -> Self {
        self.0["spec"]["loadBalancerClass"] = json!(class);
        self
    }
    pub fn lb_ip(mut self, ip: &str) -> Self {
        self.0["spec"]["loadBalancerIP"] = json!(ip);
        self
    }
    pub fn service(&self) -> Service {
        serde_json::from_value(self.0.clone()).unwrap()
    }
    /// Creates it through the API (as a user would).
    pub async fn create(&self, client: &Client) -> Service {
        let ns = self.0["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        Api::<Service>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &self.service())
            .await
            .unwrap()
    }
}

/// An EndpointSlice for `ns/service` with endpoints on the given nodes.
pub fn slice(ns: &str, service: &str, endpoints: &[(&str, bool)]) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": format!("{service}-slice"),
            "namespace": ns,
            "labels": {"kubernetes.io/service-name": service}
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints.iter().enumerate().map(|(i, (node, ready))| json!({
            "addresses": [format!("10.1.0.{}", i + 1)],
            "conditions": {"ready": ready},
            "nodeName": node
        })).collect::<Vec<_>>()
    })
}

/// Polls `check` until it returns `Some`, failing the test after [`CEILING`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + CEILING;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {CEILING:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Merge-patches Service `ns/name` with `body`, as `kubectl patch --type merge` would.
pub async fn merge_patch_svc(client: &Client, ns: &str, name: &str, body: Value) {
    Api::<Service>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap();
}

/// Waits until the last ensure of `service` had exactly `want` as backends.
pub async fn wait_backends(provider: &RecordingProvider, service: &str, want: &[&str]) {
    eventually(&format!("{service} backends {want:?}"), || async {
        match provider.ensures_of(service).last() {
            Some(Call::Ensure { backends, .. }) if backends == want => Some(()),
            _ => None,
        }
    })
    .await;
}

/// The merge patch that makes an [`svc_lb`] Service a ClusterIP one, dropping the fields
/// only a LoadBalancer may carry (the API server refuses them otherwise) and the node port.
pub fn retype_to_cluster_ip() -> Value {
    json!({"spec": {
        "type": "ClusterIP",
        "externalTrafficPolicy": null,
        "allocateLoadBalancerNodePorts": null,
        "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
    }})
}

/// Reads a Service.
pub async fn get_svc(client: &Client, ns: &str, name: &str) -> Option<Service> {
    Api::<Service>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()
}

/// The ingress IPs/hostnames of a Service.
pub fn ingress_of(service: &Service) -> Vec<String> {
    kube_lb::controller::status::current_ingress(service)
        .into_iter()
        .filter_map(|i| i.ip.or(i.hostname))
        .collect()
}

/// Waits until `ns/name` has an address, returning it.
pub async fn wait_address(client: &Client, ns: &str, name: &str) -> String {
    eventually(&format!("an address on {ns}/{name}"), || async {
        get_svc(client, ns, name)
            .await
            .and_then(|s| ingress_of(&s).into_iter().next())
    })
    .await
}

/// `reason → notes` of the events about `ns/name`.
pub async fn events_of(client: &Client, ns: &str, name: &str) -> BTreeMap<String, Vec<String>> {
    let events = Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in events.items {
        if event.regarding.as_ref().and_then(|r| r.name.as_deref()) != Some(name) {
            continue;
        }
        out.entry(event.reason.clone().unwrap_or_default())
            .or_default()
            .push(event.note.clone().unwrap_or_default());
    }
    out
}

/// Timings of a test Lease (client-go's rules, shortened).
#[derive(Debug, Clone, Copy)]
pub struct LeaseTimings {
    pub lease: Duration,
    pub renew: Duration,
    pub retry: Duration,
}

/// A controller campaigning for the Lease `kube-system/kube-lb-test`.
pub struct Elected {
    /// Whether it leads, as its elector publishes it.
    pub leading: watch::Receiver<bool>,
    pub outcomes: watch::Receiver<Outcomes>,
    pub metrics: Arc<Metrics>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), kube::Error>>,
    pub elector: JoinHandle<()>,
}

/// Starts a controller that campaigns as `identity` through `client` (which may lead through
/// a fault-injecting proxy) and acts through `provider`.
pub fn spawn_elected(
    client: Client,
    identity: &str,
    timings: LeaseTimings,
    provider: Arc<dyn LoadBalancerProvider>,
) -> Elected {
    use kube_lb::leader::{LeaderConfig, LeaderElector};
    if let Ok(filter) = std::env::var("TEST_LOG") {
        kube_lb::cli::init_logging(&filter, kube_lb::cli::LogFormat::Text);
    }
    let mut lease = LeaderConfig::new("kube-system", "kube-lb-test", identity.to_string());
    lease.lease_duration = timings.lease;
    lease.renew_deadline = timings.renew;
    lease.retry_period = timings.retry;
    let shutdown = CancellationToken::new();
    let (leading, elector) = LeaderElector::new(client.clone(), lease)
        .unwrap()
        .spawn(shutdown.clone());
    let mut config = test_config();
    config.identity = identity.to_string();
    let metrics = Arc::new(Metrics::new());
    let controller = LoadBalancerController::new(client, provider, config, metrics.clone());
    let outcomes = controller.outcomes();
    let task = tokio::spawn(controller.run(leading.clone(), shutdown.clone()));
    Elected {
        leading,
        outcomes,
        metrics,
        shutdown,
        task,
        elector,
    }
}

/// Starts a controller that campaigns for the Lease `kube-system/kube-lb-test` as `identity`,
/// with short client-go-style timings.
pub fn start_elected(server: &RunningApiServer, identity: &str) -> (Running, JoinHandle<()>) {
    let client = server.client().unwrap();
    let counter = CallCounter::new();
    let provider = Arc::new(RecordingProvider::new(client.clone(), counter.clone()));
    let timings = LeaseTimings {
        lease: Duration::from_secs(2),
        renew: Duration::from_millis(1500),
        retry: Duration::from_millis(200),
    };
    let elected = spawn_elected(client, identity, timings, provider.clone());
    let (leading_tx, _) = watch::channel(false);
    (
        Running {
            provider,
            metrics: elected.metrics,
            counter,
            outcomes: elected.outcomes,
            leading: leading_tx,
            shutdown: elected.shutdown,
            task: elected.task,
        },
        elected.elector,
    )
}

/// Runs `kube-lb controller --cloud local <flags>` against a kubeconfig that does not exist,
/// asserts it failed, and returns its stderr: for settings refused before anything connects.
pub fn controller_refusal(flags: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["controller", "--cloud", "local"])
        .args(flags)
        .args(["--kubeconfig", "/nonexistent/kubeconfig"])
        .env_remove("KUBE_LB_AUDIT_INTERVAL")
        .env_remove("KUBE_LB_AUDIT_DELETE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{flags:?}: {stderr}");
    stderr
}

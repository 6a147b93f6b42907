//! Starting and stopping the server: the builder, the running handle and its test helpers.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::Error;
use crate::faults::Faults;
use crate::garbage_collector;
use crate::http::{self, AppState};
use crate::namespace_lifecycle;
use crate::persistence;
use crate::resources;
use crate::services::{self, Allocator};
use crate::store::{Store, StoreConfig};

/// How long `shutdown` waits for open requests (watches included) to finish.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(3);
/// Namespaces every fresh server starts with, as a new cluster has them.
const DEFAULT_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Configures and starts an [`ApiServer`].
///
/// ```no_run
/// # async fn demo() -> Result<(), kube_lb_apiserver::Error> {
/// use kube_lb_apiserver::ApiServer;
/// let server = ApiServer::builder().history(50).start().await?;
/// println!("{}", server.url());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ApiServerBuilder {
    listen: SocketAddr,
    history: usize,
    service_cidr: IpNet,
    secondary_service_cidr: Option<IpNet>,
    allow_loopback_endpoints: bool,
    node_ports: RangeInclusive<u16>,
    state_file: Option<PathBuf>,
    /// Whether changes are written back to `state_file` (false: it is only read at start).
    persist: bool,
    bookmark_interval: Duration,
    max_watch: Duration,
    fault_seed: u64,
    event_ttl: Duration,
}

/// kube-apiserver's default `--event-ttl`.
pub const DEFAULT_EVENT_TTL: Duration = Duration::from_secs(3600);

/// Namespace for [`ApiServer::builder`].
#[derive(Debug)]
pub struct ApiServer;

impl ApiServer {
    /// A builder with the defaults: a free loopback port, 1000 retained events, service CIDR
    /// 10.96.0.0/12, node ports 30000–32767, no state file.
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            history: 1000,
            service_cidr: services::default_service_cidr(),
            secondary_service_cidr: None,
            allow_loopback_endpoints: false,
            node_ports: services::DEFAULT_NODE_PORT_RANGE,
            state_file: None,
            persist: false,
            bookmark_interval: Duration::from_secs(5),
            max_watch: Duration::from_secs(1800),
            fault_seed: 0,
            event_ttl: DEFAULT_EVENT_TTL,
        }
    }
}

impl ApiServerBuilder {
    /// A service CIDR of the other IP family: the server becomes dual-stack, as
    /// kube-apiserver with `--service-cluster-ip-range=<v4>,<v6>` (one cluster IP per family
    /// for `PreferDualStack` and `RequireDualStack` Services).
    pub fn secondary_service_cidr(mut self, cidr: IpNet) -> Self {
        self.secondary_service_cidr = Some(cidr);
        self
    }

    /// Accepts loopback addresses in Endpoints and EndpointSlices, which kube-apiserver
    /// refuses (`ValidateNonSpecialIP`). For `kube-lb up`, whose backends listen on loopback.
    pub fn allow_loopback_endpoints(mut self, allow: bool) -> Self {
        self.allow_loopback_endpoints = allow;
        self
    }

    /// Address to listen on (port 0 picks a free one).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// How many change events are kept for watches to resume from; a watch or paged list
    /// from an older resourceVersion gets 410 Gone. Small values force relists in tests.
    pub fn history(mut self, events: usize) -> Self {
        self.history = events;
        self
    }

    /// CIDR Service cluster IPs come from.
    pub fn service_cidr(mut self, cidr: IpNet) -> Self {
        self.service_cidr = cidr;
        self
    }

    /// Range node ports come from.
    pub fn node_port_range(mut self, range: RangeInclusive<u16>) -> Self {
        self.node_ports = range;
        self
    }

    /// Persist objects to this JSON file and load them from it at start.
    pub fn state_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
        self.persist = true;
        self
    }

    /// Load objects from this JSON file at start (as [`ApiServerBuilder::state_file`] does)
    /// but never write it: for read-only commands (`kube-lb plan`, `kube-lb audit`) that must
    /// see the Services, with their UIDs, of the run that wrote it, and leave the file as it
    /// was. A missing file is an error here, since nothing would be seen.
    pub fn state_file_read_only(mut self, path: impl Into<PathBuf>) -> Self {
        self.state_file = Some(path.into());
        self.persist = false;
        self
    }

    /// How often watches that allow bookmarks receive one.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval.max(Duration::from_millis(10));
        self
    }

    /// Longest a watch stays open (clients' `timeoutSeconds` are capped by it).
    pub fn max_watch(mut self, duration: Duration) -> Self {
        self.max_watch = duration;
        self
    }

    /// How long an Event lives after its last write (kube-apiserver's `--event-ttl`, 1 h by
    /// default); zero keeps Events until they are deleted.
    pub fn event_ttl(mut self, ttl: Duration) -> Self {
        self.event_ttl = ttl;
        self
    }

    /// Seed of the fault-injection random sequence.
    pub fn fault_seed(mut self, seed: u64) -> Self {
        self.fault_seed = seed;
        self
    }

    /// Binds, loads the state file if any, and starts serving.
    pub async fn start(self) -> Result<RunningApiServer, Error> {
        let listener = TcpListener::bind(self.listen)
            .await
            .map_err(|source| Error::Bind {
                addr: self.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: self.listen,
            source,
        })?;
        let mut allocator = Allocator::new(self.service_cidr, self.node_ports.clone())
            .allow_loopback_endpoints(self.allow_loopback_endpoints);
        if let Some(secondary) = self.secondary_service_cidr {
            allocator = allocator
                .with_secondary_cidr(secondary)
                .map_err(Error::Config)?;
        }
        let store = Arc::new(Store::new(StoreConfig {
            history: self.history,
            allocator,
        }));
        let restored = match &self.state_file {
            Some(path) => match persistence::load(path)? {
                Some(dump) => {
                    store.restore(dump)?;
                    true
                }
                None if !self.persist => {
                    return Err(Error::Config(format!(
                        "state file {} does not exist (it is written by `kube-lb reconcile \
                         --state-file`)",
                        path.display()
                    )));
                }
                None => false,
            },
            None => false,
        };
        if !restored {
            for ns in DEFAULT_NAMESPACES {
                store.create(
                    resources::namespaces(),
                    None,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                    false,
                )?;
            }
        }
        let faults = Arc::new(Faults::new(self.fault_seed));
        let app = Arc::new(AppState {
            store: store.clone(),
            faults: faults.clone(),
            bookmark_interval: self.bookmark_interval,
            max_watch: self.max_watch,
            server_address: addr.to_string(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let serve = tokio::spawn(accept_loop(listener, http::router(app), stop_rx.clone()));
        let writer = self
            .state_file
            .clone()
            .filter(|_| self.persist)
            .map(|path| {
                tokio::spawn(persistence::run_writer(
                    store.clone(),
                    path,
                    stop_rx.clone(),
                ))
            });
        if !self.event_ttl.is_zero() {
            // Stops with the server (the stop signal, or its sender dropped).
            tokio::spawn(expire_events(
                store.clone(),
                self.event_ttl,
                stop_rx.clone(),
            ));
        }
        // Stop with the server, like the Event expiry.
        tokio::spawn(finish_namespaces(store.clone(), stop_rx.clone()));
        tokio::spawn(garbage_collector::run(store.clone(), stop_rx.clone()));
        tracing::info!(%addr, restored, "in-memory API server listening");
        Ok(RunningApiServer {
            addr,
            store,
            faults,
            stop: stop_tx,
            serve: Some(serve),
            writer,
            state_file: self.state_file.filter(|_| self.persist),
        })
    }
}

/// Serves connections until `stop`; then drops every open connection (watches included), so a
/// restarted server on the same port is what clients reconnect to.
async fn accept_loop(listener: TcpListener, router: axum::Router, mut stop: watch::Receiver<bool>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let service = TowerToHyperService::new(router.clone());
                    connections.spawn(async move {
                        let connection = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service);
                        if let Err(error) = connection.await {
                            tracing::debug!(%error, "connection ended with an error");
                        }
                    });
                }
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = stop.changed() => break,
        }
    }
    connections.abort_all();
}

/// Removes Events older than `ttl` since their last write, checking a quarter of `ttl` apart
/// (between 10 ms and a minute), until `stop`.
async fn expire_events(store: Arc<Store>, ttl: Duration, mut stop: watch::Receiver<bool>) {
    let period = (ttl / 4).clamp(Duration::from_millis(10), Duration::from_secs(60));
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                let removed = store.expire_events(ttl);
                if removed > 0 {
                    tracing::debug!(removed, ttl = ?ttl, "expired events");
                }
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

/// Moves Terminating namespaces on ([`namespace_lifecycle::sync_all`]) after changes (an object
/// whose finalizer goes may be the last thing a namespace waits for), until `stop`. A burst of
/// writes is looked at once, a little after it began, not once per write.
async fn finish_namespaces(store: Arc<Store>, mut stop: watch::Receiver<bool>) {
    const SETTLE: Duration = Duration::from_millis(20);
    let mut committed = store.committed();
    // A state file may hold namespaces that were Terminating when it was written.
    namespace_lifecycle::sync_all(&store);
    loop {
        tokio::select! {
            changed = committed.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
        tokio::time::sleep(SETTLE).await;
        committed.borrow_and_update();
        namespace_lifecycle::sync_all(&store);
    }
}

/// A started server. Dropping it stops serving (without the final state-file write;
/// call [`RunningApiServer::shutdown`] for that).
#[derive(Debug)]
pub struct RunningApiServer {
    addr: SocketAddr,
    store: Arc<Store>,
    faults: Arc<Faults>,
    stop: watch::Sender<bool>,
    serve: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    state_file: Option<PathBuf>,
}

impl RunningApiServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The state file, if persistence is on.
    pub fn state_file(&self) -> Option<&Path> {
        self.state_file.as_deref()
    }

    /// A kubeconfig (context `kube-lb`, namespace `default`, no credentials) pointing here.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-lb\n  cluster:\n    server: {url}\n\
             contexts:\n- name: kube-lb\n  context:\n    cluster: kube-lb\n    user: kube-lb\n    namespace: default\n\
             current-context: kube-lb\nusers:\n- name: kube-lb\n  user: {{}}\npreferences: {{}}\n",
            url = self.url()
        )
    }

    /// Writes [`RunningApiServer::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: impl AsRef<Path>) -> Result<(), Error> {
        let path = path.as_ref();
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The store behind the server, for direct inspection.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The fault injector.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Creates an object as given — status included — with server-side metadata, defaulting,
    /// validation and allocation. Accepts anything serialisable with `apiVersion` and `kind`
    /// (k8s-openapi types, `serde_json::Value`, ...). The status is stored state, not a
    /// request: see [`Store::seed`](crate::store::Store::seed) for the one rule that differs.
    pub fn seed(&self, object: impl serde::Serialize) -> Result<Value, Error> {
        let mut value = serde_json::to_value(object).map_err(Error::Serialize)?;
        // Stored state holds only what the kind's type has, as etcd behind kube-apiserver does.
        http::drop_unknown_fields(&mut value);
        let resource = resource_of(&self.store.registry(), &value)?;
        Ok((*self.store.seed(resource, value)?).clone())
    }

    /// Creates or replaces every object in a multi-document YAML (or JSON) text; `kind: List`
    /// documents are expanded. Returns the stored objects.
    pub fn apply_manifests(&self, text: &str) -> Result<Vec<Value>, Error> {
        let mut out = Vec::new();
        for document in serde_yaml_ng::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(document).map_err(Error::Yaml)?;
            if value.is_null() {
                continue;
            }
            let items = if value.get("kind").and_then(Value::as_str) == Some("List") {
                value
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            } else {
                vec![value]
            };
            for mut item in items {
                let dropped = http::drop_unknown_fields(&mut item);
                if !dropped.is_empty() {
                    tracing::warn!(
                        kind = item.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default(),
                        name = crate::meta::name(&item).unwrap_or_default(),
                        fields = ?dropped,
                        "manifest fields dropped: the kind has no such fields"
                    );
                }
                out.push(self.create_or_replace(item)?);
            }
        }
        Ok(out)
    }

    fn create_or_replace(&self, object: Value) -> Result<Value, Error> {
        let registry = self.store.registry();
        let resource = resource_of(&registry, &object)?;
        let name = crate::meta::name(&object).unwrap_or_default().to_string();
        let namespace = crate::meta::namespace(&object)
            .map(str::to_string)
            .or_else(|| {
                registry
                    .def(resource)
                    .is_some_and(|d| d.namespaced)
                    .then(|| "default".to_string())
            });
        if !name.is_empty()
            && self
                .store
                .get(resource, namespace.as_deref(), &name)
                .is_ok()
        {
            let updated = self.store.update(
                resource,
                namespace.as_deref(),
                &name,
                crate::store::Part::Main,
                false,
                |current| {
                    let mut next = object.clone();
                    if let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("resourceVersion");
                        // As `kubectl apply` leaves what the manifest does not name: the
                        // finalizers controllers set (kube-lb's own, on a Service restored
                        // from a state file) stay unless the manifest lists its own.
                        if !meta.contains_key("finalizers")
                            && let Some(finalizers) = current["metadata"].get("finalizers")
                        {
                            meta.insert("finalizers".into(), finalizers.clone());
                        }
                    }
                    Ok(next)
                },
            )?;
            return Ok((*updated).clone());
        }
        let mut object = object;
        if let Some(ns) = &namespace {
            crate::meta::metadata_mut(&mut object).insert("namespace".into(), json!(ns));
        }
        Ok((*self.store.seed(resource, object)?).clone())
    }

    /// Reads one object by `apiVersion`, `kind`, namespace and name.
    pub fn get_value(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let resource = self.store.registry().find_by_kind(api_version, kind)?;
        self.store
            .get(resource, namespace, name)
            .ok()
            .map(|v| (*v).clone())
    }

    /// Stops serving (closing every connection) and, with persistence on, writes the state
    /// file a last time.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(mut serve) = self.serve.take() {
            // Graceful shutdown waits for in-flight requests; a client that leaves a watch open
            // must not keep the process alive, so the grace period is bounded.
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut serve)
                .await
                .is_err()
            {
                tracing::warn!(
                    "connections still open after the shutdown grace period; closing them"
                );
                serve.abort();
            }
        }
        if let Some(writer) = self.writer.take() {
            let _ = writer.await;
        }
    }
}

#[cfg(feature = "client")]
impl RunningApiServer {
    /// A kube-rs client for this server (default namespace `default`).
    pub fn client(&self) -> Result<kube::Client, Error> {
        let url: axum::http::Uri = self
            .url()
            .parse()
            .map_err(|e: axum::http::uri::InvalidUri| Error::Client(e.to_string()))?;
        let config = kube::Config::new(url);
        kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
    }

    /// Reads one object as a typed resource.
    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
    {
        let api_version = K::api_version(&());
        let kind = K::kind(&());
        let value = self.get_value(&api_version, &kind, namespace, name)?;
        serde_json::from_value(value).ok()
    }
}

impl Drop for RunningApiServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(serve) = self.serve.take() {
            serve.abort();
        }
    }
}

fn resource_of(
    registry: &resources::Registry,
    value: &Value,
) -> Result<resources::ResourceId, Error> {
    let api_version = value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    registry
        .find_by_kind(api_version, kind)
        .ok_or_else(|| Error::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })
}

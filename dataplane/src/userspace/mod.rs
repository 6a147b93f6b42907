//! Userspace backend: tokio listeners on every frontend address of a [`Snapshot`], forwarding TCP
//! streams and UDP datagrams to endpoints chosen by a [`Scheduler`].
//!
//! Behaviour the tests rely on:
//! - a frontend without usable endpoints has **no listener**, so clients are refused by the
//!   kernel rather than accepted and closed; listeners close when their Service goes;
//! - endpoint changes update the pool in place: listeners and established connections stay;
//! - a failed connect is retried on another endpoint with growing timeouts (250 ms … 2 s);
//! - with [`UserspaceConfig::capture`] (`kube-lb proxy --mode userspace`), ClusterIP, LB and
//!   external IP traffic reaches proxy ports through nftables capture rules ([`capture`]), so
//!   those addresses need not be the node's; frontends without endpoints are rejected there;
//! - no SCTP socket is ever opened (tokio has none, and opening one would load the `sctp`
//!   module); SCTP Service ports are reported as skipped.
//!
//! TCP frontends are served by one of two engines ([`UserspaceEngine`]): an io_uring ring per
//! worker thread ([`uring`](self::uring), the default where the kernel allows it), or a tokio
//! runtime per worker thread (the fallback, and always the engine of UDP frontends).
//!
//! Traffic runs on the proxy's own worker threads ([`UserspaceConfig::workers`]), not on the
//! caller's runtime: each frontend has one `SO_REUSEPORT` socket per worker, and a TCP connection
//! or UDP session stays on the worker whose socket the kernel gave it to. Endpoint choice is shared by all workers, so round robin
//! and least-connection see every connection. Dropping the proxy stops the workers and closes
//! every listener and forwarded connection.
//!
//! ```no_run
//! # async fn example(snapshot: kube_lb_dataplane::model::Snapshot) {
//! use kube_lb_dataplane::userspace::{UserspaceConfig, UserspaceProxy};
//! let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
//! let report = proxy.apply(&snapshot).await;
//! for (frontend, error) in &report.failed {
//!     eprintln!("cannot listen on {frontend}: {error}");
//! }
//! # }
//! ```

pub mod capture;
pub mod proxy_protocol;
pub mod relay;
pub mod scheduler;
pub mod state;
mod uring;
mod workers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroUsize;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpSocket, TcpStream, UdpSocket};
use tokio::runtime::Handle;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

pub use scheduler::{Pool, Scheduler};
pub use state::{DEFAULT_UDP_SESSIONS_PER_SERVICE, SessionBudget, StateCounts};
use workers::Workers;
pub use workers::default_workers;

use crate::model::{EndpointAddr, PortKey, Protocol, ProxyProtocol, Snapshot};

/// Settings of the userspace backend.
#[derive(Debug, Clone)]
pub struct UserspaceConfig {
    /// Endpoint choice.
    pub scheduler: Scheduler,
    /// A UDP client session ends after this long without a datagram in either direction.
    pub udp_idle_timeout: Duration,
    /// One connect attempt per entry, each with that timeout, each on another endpoint.
    pub connect_timeouts: Vec<Duration>,
    /// Which Service addresses get a listener.
    pub serve: Serve,
    /// Threads forwarding traffic (started on the first [`UserspaceProxy::apply`]), each with its
    /// own listener per TCP frontend. [`default_workers`] unless set.
    pub workers: NonZeroUsize,
    /// Capture ClusterIP, load-balancer and external IP traffic with nftables rules and serve it
    /// on proxy ports ([`capture`]), instead of binding those addresses (which only works for
    /// addresses the node holds). NodePorts are always bound on the node's addresses.
    pub capture: Option<capture::CaptureConfig>,
    /// UDP sessions one Service port may hold at once; clients beyond it are dropped.
    pub udp_sessions_per_service: usize,
    /// Counts UDP sessions refused for the cap (exported as a metric by the caller).
    pub refused_udp_sessions: Arc<AtomicU64>,
    /// Which engine relays TCP frontends.
    pub engine: UserspaceEngine,
}

/// Which engine relays the userspace backend's TCP connections (`--userspace-engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UserspaceEngine {
    /// io_uring where the kernel offers every operation the engine needs, epoll otherwise.
    Auto,
    /// io_uring, or listening fails (with the reason).
    Uring,
    /// tokio's epoll event loop: the default, until the io_uring engine has run longer under
    /// load (two unexplained failures were seen with it while the machine was saturated).
    #[default]
    Epoll,
}

impl fmt::Display for UserspaceEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UserspaceEngine::Auto => "auto",
            UserspaceEngine::Uring => "uring",
            UserspaceEngine::Epoll => "epoll",
        })
    }
}

impl std::str::FromStr for UserspaceEngine {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(UserspaceEngine::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(UserspaceEngine::Uring),
            "epoll" | "tokio" => Ok(UserspaceEngine::Epoll),
            other => Err(format!(
                "unknown userspace engine {other:?} (auto, uring or epoll)"
            )),
        }
    }
}

/// The engine TCP frontends get, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineChoice {
    /// `Uring` or `Epoll`, never `Auto`.
    pub engine: UserspaceEngine,
    /// Why: io_uring's availability, or that the choice was forced.
    pub reason: String,
}

impl UserspaceEngine {
    /// Resolves `Auto` by probing io_uring; `Uring` fails when io_uring cannot be used.
    pub fn resolve(self) -> Result<EngineChoice, String> {
        match self {
            UserspaceEngine::Epoll => Ok(EngineChoice {
                engine: UserspaceEngine::Epoll,
                reason: "chosen".into(),
            }),
            UserspaceEngine::Uring => uring::probe()
                .map(|()| EngineChoice {
                    engine: UserspaceEngine::Uring,
                    reason: "chosen".into(),
                })
                .map_err(|why| format!("io_uring engine unavailable: {why}")),
            UserspaceEngine::Auto => Ok(match uring::probe() {
                Ok(()) => EngineChoice {
                    engine: UserspaceEngine::Uring,
                    reason: "io_uring available".into(),
                },
                Err(why) => EngineChoice {
                    engine: UserspaceEngine::Epoll,
                    reason: why,
                },
            }),
        }
    }
}

/// Which Service addresses the userspace backend listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Serve {
    /// ClusterIPs, NodePorts, load-balancer and external IPs: a full kube-proxy replacement.
    #[default]
    AllFrontends,
    /// Only `status.loadBalancer.ingress` IPs. `kube-lb up` uses this: the `local` provider's
    /// addresses are the only Service addresses that machine owns, so binding ClusterIPs would
    /// only fail.
    LoadBalancerIps,
}

impl Default for UserspaceConfig {
    fn default() -> Self {
        UserspaceConfig {
            scheduler: Scheduler::RoundRobin,
            udp_idle_timeout: Duration::from_secs(30),
            connect_timeouts: [250, 500, 1000, 2000]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            serve: Serve::AllFrontends,
            workers: default_workers(),
            capture: None,
            udp_sessions_per_service: DEFAULT_UDP_SESSIONS_PER_SERVICE,
            refused_udp_sessions: Arc::default(),
            engine: UserspaceEngine::Auto,
        }
    }
}

/// One address and protocol the proxy listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Frontend {
    /// TCP or UDP.
    pub protocol: Protocol,
    /// Listening address.
    pub addr: SocketAddr,
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.protocol)
    }
}

/// Which Service address a frontend is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendKind {
    /// `spec.clusterIPs`.
    ClusterIp,
    /// `status.loadBalancer.ingress` IPs and `spec.externalIPs`.
    External,
    /// A node address with the NodePort.
    NodePort,
}

/// What one frontend forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendSpec {
    /// The Service port it belongs to.
    pub service: PortKey,
    /// Which address of the Service it is.
    pub kind: FrontendKind,
    /// Endpoints (already filtered by traffic policy and topology).
    pub endpoints: Vec<EndpointAddr>,
    /// ClientIP affinity timeout.
    pub affinity_timeout: Option<Duration>,
    /// PROXY protocol header to send (TCP only).
    pub proxy_protocol: Option<ProxyProtocol>,
}

/// Frontends with at least one endpoint, per snapshot: ClusterIPs (internal endpoints), LB and
/// external IPs and NodePorts on the node's NodePort addresses (external endpoints). Also returns
/// the SCTP ports it skipped.
pub fn frontends(snapshot: &Snapshot) -> (BTreeMap<Frontend, FrontendSpec>, Vec<PortKey>) {
    let mut out = BTreeMap::new();
    let mut skipped = Vec::new();
    for port in snapshot.ports.values() {
        if port.key.protocol == Protocol::Sctp {
            skipped.push(port.key.clone());
            continue;
        }
        let spec = |kind: FrontendKind, endpoints: &[EndpointAddr]| FrontendSpec {
            service: port.key.clone(),
            kind,
            endpoints: endpoints.to_vec(),
            affinity_timeout: port.affinity_timeout,
            proxy_protocol: port.proxy_protocol,
        };
        let mut add = |kind: FrontendKind, ip: IpAddr, number: u16, endpoints: &[EndpointAddr]| {
            if !endpoints.is_empty() {
                let frontend = Frontend {
                    protocol: port.key.protocol,
                    addr: SocketAddr::new(ip, number),
                };
                out.insert(frontend, spec(kind, endpoints));
            }
        };
        for ip in &port.cluster_ips {
            add(
                FrontendKind::ClusterIp,
                *ip,
                port.key.port,
                port.internal_endpoints(),
            );
        }
        for ip in port.load_balancer_ips.iter().chain(&port.external_ips) {
            add(
                FrontendKind::External,
                *ip,
                port.key.port,
                port.external_endpoints(),
            );
        }
        if let Some(node_port) = port.node_port {
            for ip in &snapshot.nodeport_addresses {
                add(
                    FrontendKind::NodePort,
                    *ip,
                    node_port,
                    port.external_endpoints(),
                );
            }
        }
    }
    (out, skipped)
}

/// Result of [`UserspaceProxy::apply`].
#[derive(Debug, Default, Clone)]
pub struct ApplyReport {
    /// Listeners opened.
    pub opened: Vec<Frontend>,
    /// Listeners closed (Service gone or no endpoints left).
    pub closed: Vec<Frontend>,
    /// Listeners whose endpoints or settings changed in place.
    pub updated: Vec<Frontend>,
    /// Frontends that could not be bound (retried on the next apply).
    pub failed: Vec<(Frontend, String)>,
    /// SCTP Service ports this backend does not serve.
    pub skipped_sctp: Vec<PortKey>,
    /// Why the capture rules could not be written (retried on the next apply).
    pub capture_error: Option<String>,
}

#[derive(Debug)]
struct Shared {
    pool: Mutex<Pool>,
    proxy_protocol: Mutex<Option<ProxyProtocol>>,
    /// UDP sessions of the Service port, shared with its other frontends.
    udp_budget: Arc<SessionBudget>,
}

impl Shared {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn proxy_protocol(&self) -> Option<ProxyProtocol> {
        *self
            .proxy_protocol
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Listener {
    spec: FrontendSpec,
    shared: Arc<Shared>,
    /// One accept loop (TCP) or receive loop (UDP) per worker, their sockets sharing the address
    /// with SO_REUSEPORT (tokio engine), and the affinity sweeper.
    tasks: Vec<JoinHandle<()>>,
    /// The listening sockets on the io_uring workers (io_uring engine).
    uring: Vec<uring::UringListener>,
    /// Port of the unspecified address the sockets listen on when the frontend is captured.
    proxy_port: Option<u16>,
}

impl Listener {
    /// Stops accepting and waits until the socket is closed, so the next connection attempt is
    /// refused by the kernel.
    async fn close(mut self) {
        // Synchronous: each socket stops listening before this returns.
        self.uring.clear();
        for task in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The userspace dataplane: feed it snapshots with [`UserspaceProxy::apply`].
#[derive(Debug)]
pub struct UserspaceProxy {
    config: Arc<UserspaceConfig>,
    listeners: BTreeMap<Frontend, Listener>,
    /// The capture rules, when [`UserspaceConfig::capture`] is set.
    capture: Option<capture::Capture>,
    /// UDP session budgets per Service port, while one of its frontends listens.
    budgets: BTreeMap<PortKey, Arc<SessionBudget>>,
    /// Declared after `listeners` so their tasks are aborted before the workers stop.
    threads: Box<Threads>,
}

/// The proxy's threads, each kind started with the first frontend that needs it.
#[derive(Debug, Default)]
struct Threads {
    /// tokio workers: UDP frontends, TCP frontends on the epoll engine, affinity sweeping.
    tokio: Option<Workers>,
    /// io_uring workers: TCP frontends on the io_uring engine.
    uring: Option<uring::Engines>,
    /// The engine of TCP frontends, resolved on the first one.
    engine: Option<Result<EngineChoice, String>>,
}

impl UserspaceProxy {
    /// A proxy with no listeners; its worker threads start with the first listener.
    pub fn new(config: UserspaceConfig) -> Self {
        UserspaceProxy {
            capture: config.capture.clone().map(capture::Capture::new),
            config: Arc::new(config),
            listeners: BTreeMap::new(),
            budgets: BTreeMap::new(),
            threads: Box::default(),
        }
    }

    /// The engine TCP frontends get (resolving [`UserspaceConfig::engine`] on the first call and
    /// logging it), or why the forced io_uring engine cannot run.
    pub fn engine(&mut self) -> Result<EngineChoice, String> {
        self.threads
            .engine
            .get_or_insert_with(|| {
                let choice = self.config.engine.resolve();
                match &choice {
                    Ok(choice) => tracing::debug!(
                        engine = %choice.engine,
                        requested = %self.config.engine,
                        reason = %choice.reason,
                        "userspace TCP engine"
                    ),
                    Err(why) => tracing::error!(requested = %self.config.engine, %why, "userspace TCP engine"),
                }
                choice
            })
            .clone()
    }

    /// Per-client state held right now: affinity entries and UDP sessions.
    pub fn state(&self) -> StateCounts {
        let mut counts = StateCounts::default();
        for listener in self.listeners.values() {
            let pool = listener.shared.pool();
            counts.affinity_entries += pool.affinity_len();
            counts.affinity_capacity += pool.affinity_capacity();
        }
        counts.udp_sessions = self.budgets.values().map(|budget| budget.live()).sum();
        counts
    }

    /// Change notifications of the capture table, when there is one.
    pub fn capture_monitor(&self) -> Option<crate::nft::ChangeMonitor> {
        self.capture.as_ref().map(capture::Capture::monitor)
    }

    /// True once capture rules were written ([`UserspaceProxy::verify_capture`]).
    pub fn capture_verifiable(&self) -> bool {
        self.capture
            .as_ref()
            .is_some_and(capture::Capture::verifiable)
    }

    /// What of the capture table differs from what was last written.
    pub async fn verify_capture(
        &mut self,
    ) -> Result<Vec<crate::nft::Finding>, crate::nft::NftError> {
        match &mut self.capture {
            Some(capture) => Ok(capture.verify().await?.into_iter().collect()),
            None => Ok(Vec::new()),
        }
    }

    /// Writes the capture table again as it was last written.
    pub async fn restore_capture(&mut self) -> Result<(), crate::nft::NftError> {
        let Some(capture) = &mut self.capture else {
            return Ok(());
        };
        capture.restore().await.map_err(|error| match error {
            capture::CaptureError::Spawn { program, source } => {
                crate::nft::NftError::Spawn { program, source }
            }
            capture::CaptureError::Rejected { stderr } => crate::nft::NftError::Rejected { stderr },
        })
    }

    /// Closes every listener and deletes the capture table: the node keeps nothing of this
    /// proxy (the proxy is stopping).
    pub async fn shutdown(&mut self) -> Result<(), capture::CaptureError> {
        for (_, listener) in std::mem::take(&mut self.listeners) {
            listener.close().await;
        }
        match &mut self.capture {
            Some(capture) => capture.remove().await,
            None => Ok(()),
        }
    }

    /// Proxy port of each captured frontend that is listening.
    pub fn proxy_ports(&self) -> BTreeMap<Frontend, u16> {
        self.listeners
            .iter()
            .filter_map(|(frontend, listener)| Some((*frontend, listener.proxy_port?)))
            .collect()
    }

    /// Frontends currently listening.
    pub fn listening(&self) -> Vec<Frontend> {
        self.listeners.keys().copied().collect()
    }

    /// Makes the listeners match `snapshot`: opens missing ones, closes those without a Service or
    /// endpoints, and updates endpoint pools in place.
    pub async fn apply(&mut self, snapshot: &Snapshot) -> ApplyReport {
        let (mut wanted, skipped_sctp) = frontends(snapshot);
        if self.config.serve == Serve::LoadBalancerIps {
            let lb_ips: BTreeSet<IpAddr> = snapshot
                .ports
                .values()
                .flat_map(|port| port.load_balancer_ips.iter().copied())
                .collect();
            wanted.retain(|frontend, _| lb_ips.contains(&frontend.addr.ip()));
        }
        let mut report = ApplyReport {
            skipped_sctp,
            ..ApplyReport::default()
        };
        let rejects = if self.capture.is_some() {
            capture::without_endpoints(snapshot)
        } else {
            BTreeSet::new()
        };
        let stale: Vec<Frontend> = self
            .listeners
            .keys()
            .filter(|f| !wanted.contains_key(f))
            .copied()
            .collect();
        for frontend in stale {
            if let Some(listener) = self.listeners.remove(&frontend) {
                listener.close().await;
            }
            tracing::info!(%frontend, "closed listener");
            report.closed.push(frontend);
        }
        // A budget nobody but this map holds belongs to a Service no longer served.
        self.budgets
            .retain(|_, budget| Arc::strong_count(budget) > 1);
        for (frontend, spec) in wanted {
            if let Some(listener) = self.listeners.get_mut(&frontend) {
                if listener.spec != spec {
                    listener
                        .shared
                        .pool()
                        .update(spec.endpoints.clone(), spec.affinity_timeout);
                    *listener
                        .shared
                        .proxy_protocol
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner) = spec.proxy_protocol;
                    listener.spec = spec;
                    report.updated.push(frontend);
                }
                continue;
            }
            match self.open(frontend, spec) {
                Ok(listener) => {
                    tracing::info!(%frontend, service = %listener.spec.service, "listening");
                    self.listeners.insert(frontend, listener);
                    report.opened.push(frontend);
                }
                Err(error) => {
                    tracing::warn!(%frontend, %error, "cannot listen");
                    report.failed.push((frontend, error.to_string()));
                }
            }
        }
        if let Some(capture) = &mut self.capture {
            let desired = capture::CaptureState {
                redirects: self
                    .listeners
                    .iter()
                    .filter_map(|(frontend, listener)| Some((*frontend, listener.proxy_port?)))
                    .collect(),
                rejects,
            };
            if let Err(error) = capture.sync(&desired).await {
                tracing::warn!(table = capture.table(), %error, "capture rules not written");
                report.capture_error = Some(error.to_string());
            }
        }
        report
    }

    /// Opens the listener(s) of `frontend` on the worker threads: for TCP one `SO_REUSEPORT`
    /// socket per worker, for UDP one socket on the next worker.
    fn open(&mut self, frontend: Frontend, spec: FrontendSpec) -> std::io::Result<Listener> {
        if frontend.protocol == Protocol::Sctp {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "SCTP is not proxied in userspace",
            ));
        }
        // A captured frontend listens on a proxy port of its own on the unspecified address; the
        // capture rules send the frontend's traffic there.
        let captured = self.capture.is_some() && spec.kind != FrontendKind::NodePort;
        let taken: BTreeSet<u16> = self
            .listeners
            .iter()
            .filter(|(other, _)| other.protocol == frontend.protocol)
            .filter_map(|(_, listener)| listener.proxy_port)
            .collect();
        let first = if captured {
            let unspecified: IpAddr = if frontend.addr.is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            };
            SocketAddr::new(unspecified, 0)
        } else {
            frontend.addr
        };
        let uring = frontend.protocol == Protocol::Tcp
            && self.engine().map_err(std::io::Error::other)?.engine == UserspaceEngine::Uring;
        let workers = match &mut self.threads.tokio {
            Some(workers) => workers,
            empty => empty.insert(Workers::start(self.config.workers)?),
        };
        let shared = Arc::new(Shared {
            pool: Mutex::new(Pool::new(
                self.config.scheduler,
                frontend.addr,
                spec.endpoints.clone(),
                spec.affinity_timeout,
            )),
            proxy_protocol: Mutex::new(spec.proxy_protocol),
            udp_budget: self
                .budgets
                .entry(spec.service.clone())
                .or_insert_with(|| {
                    Arc::new(SessionBudget::new(
                        spec.service.clone(),
                        self.config.udp_sessions_per_service,
                        self.config.refused_udp_sessions.clone(),
                    ))
                })
                .clone(),
        });
        let mut tasks = Vec::new();
        // Expired affinity entries are forgotten even when their clients never come back.
        if let Some(worker) = workers.all().first() {
            let reaped = shared.clone();
            tasks.push(worker.spawn(state::reap_affinity(move |now| {
                let mut pool = reaped.pool();
                pool.reap(now);
                pool.reap_interval()
            })));
        }
        // Bind every socket before spawning anything, so a failure leaves nothing behind.
        let mut proxy_port = None;
        let mut uring_listeners = Vec::new();
        if uring {
            let engines = match &mut self.threads.uring {
                Some(engines) => engines,
                empty => empty.insert(uring::Engines::start(self.config.workers.get())?),
            };
            let count = engines.len();
            let sockets = bind_all(
                count,
                first,
                &taken,
                |_, addr| std_tcp_listener(addr),
                |l| l.local_addr(),
            )?;
            if captured {
                proxy_port = sockets.first().map(|(port, _)| *port);
            }
            let route = Arc::new(uring::Route {
                frontend: frontend.addr,
                shared: shared.clone(),
                config: self.config.clone(),
            });
            for (index, (_, socket)) in sockets.into_iter().enumerate() {
                uring_listeners.push(engines.listen(index, socket.into(), route.clone()));
            }
        } else if frontend.protocol == Protocol::Tcp {
            let handles = workers.all();
            let listeners = bind_all(
                handles.len(),
                first,
                &taken,
                |index, addr| on_worker(&handles[index], || tcp_listener(addr)),
                |l| l.local_addr(),
            )?;
            if captured {
                proxy_port = listeners.first().map(|(port, _)| *port);
            }
            for ((_, listener), worker) in listeners.into_iter().zip(handles) {
                tasks.push(worker.spawn(serve_tcp(
                    listener,
                    frontend.addr,
                    shared.clone(),
                    self.config.clone(),
                )));
            }
        } else {
            // The kernel hashes a client's address and port to one of the sockets, so each client
            // keeps its session on one worker.
            let handles = workers.all();
            let sockets = bind_all(
                handles.len(),
                first,
                &taken,
                |index, addr| on_worker(&handles[index], || udp_socket(addr)),
                |s| s.local_addr(),
            )?;
            if captured {
                proxy_port = sockets.first().map(|(port, _)| *port);
            }
            for ((_, socket), worker) in sockets.into_iter().zip(handles) {
                tasks.push(worker.spawn(serve_udp(
                    Arc::new(socket),
                    shared.clone(),
                    self.config.clone(),
                )));
            }
        }
        Ok(Listener {
            spec,
            shared,
            tasks,
            uring: uring_listeners,
            proxy_port,
        })
    }
}

/// Binds `count` sockets to `first` (`bind` gets the socket's index); when `first` has port 0,
/// the kernel's choice is taken by every socket (`SO_REUSEPORT`). A chosen port already used by
/// another frontend of this proxy (`taken`, which `SO_REUSEPORT` would let us join) is held while
/// another one is picked. Returns (port, socket) per index.
fn bind_all<T>(
    count: usize,
    first: SocketAddr,
    taken: &BTreeSet<u16>,
    bind: impl Fn(usize, SocketAddr) -> std::io::Result<T>,
    local: impl Fn(&T) -> std::io::Result<SocketAddr>,
) -> std::io::Result<Vec<(u16, T)>> {
    const ATTEMPTS: usize = 16;
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut held = Vec::new();
    let mut found = None;
    for _ in 0..ATTEMPTS {
        let socket = bind(0, first)?;
        let addr = local(&socket)?;
        if first.port() != 0 || !taken.contains(&addr.port()) {
            found = Some((addr, socket));
            break;
        }
        held.push(socket);
    }
    drop(held);
    let Some((addr, socket)) = found else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "no free proxy port",
        ));
    };
    let mut out = vec![(addr.port(), socket)];
    for index in 1..count {
        out.push((addr.port(), bind(index, addr)?));
    }
    Ok(out)
}

/// Runs `make` with `worker` as the current runtime, so the sockets it creates are registered with
/// that worker's I/O driver.
fn on_worker<T>(worker: &Handle, make: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let _entered = worker.enter();
    make()
}

/// Pending connections the kernel queues per listening socket before refusing more (capped by
/// `net.core.somaxconn`).
const LISTEN_BACKLOG: u32 = 4096;

fn tcp_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    // Accepted sockets inherit TCP_NODELAY from the listener: no setsockopt per connection.
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// A listening socket as [`tcp_listener`] makes, for the io_uring engine: not registered with
/// any runtime, and blocking (io_uring needs no `O_NONBLOCK`).
fn std_tcp_listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG as i32)?;
    Ok(socket.into())
}

fn udp_socket(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::DGRAM.nonblocking().cloexec(),
        None,
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    UdpSocket::from_std(socket.into())
}

async fn serve_tcp(
    listener: TcpListener,
    frontend: SocketAddr,
    shared: Arc<Shared>,
    config: Arc<UserspaceConfig>,
) {
    loop {
        match listener.accept().await {
            Ok((client, peer)) => {
                // Spawned on this worker's runtime: the connection stays on this thread.
                tokio::spawn(forward_tcp(
                    client,
                    peer,
                    frontend,
                    shared.clone(),
                    config.clone(),
                ));
            }
            Err(error) => {
                // Typically EMFILE: back off briefly instead of spinning.
                tracing::warn!(%frontend, %error, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Decrements the active-connection count when a forwarded connection ends.
struct ActiveGuard {
    shared: Arc<Shared>,
    endpoint: EndpointAddr,
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.shared.pool().disconnected(self.endpoint);
    }
}

/// How far [`dial`] got without waiting.
#[derive(Debug)]
enum Dial {
    /// Established by the time `connect(2)` returned, as is usual for endpoints on the same host
    /// or network, with the first this many bytes of what was to be sent already sent. Not
    /// registered with the runtime yet.
    Established(std::net::TcpStream, usize),
    /// The handshake is still under way; nothing was sent.
    Connecting(Socket),
}

/// Opens a connection to `endpoint` and, when the handshake is over by the time `connect(2)`
/// returns (loopback completes it inside the call), sends `first` at once.
///
/// Nagle's algorithm is off: the proxy writes what it read as soon as it read it, so delaying
/// small segments would only add latency. With `first` non-empty, `TCP_QUICKACK` is off before
/// the connect, so the kernel holds back the handshake's last ACK and sends it with those bytes
/// (as HAProxy's `tcp-smart-connect` does): one segment fewer per connection, and the endpoint
/// finds the request beside the new connection. The send also tells whether the handshake is
/// over, where an empty `first` needs a `getpeername(2)`.
fn dial(endpoint: SocketAddr, first: &[u8]) -> std::io::Result<Dial> {
    let socket = Socket::new(
        Domain::for_address(endpoint),
        Type::STREAM.nonblocking().cloexec(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    if !first.is_empty() {
        socket.set_tcp_quickack(false)?;
    }
    match socket.connect(&endpoint.into()) {
        Ok(()) => {}
        Err(error) if error.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(error) => return Err(error),
    }
    if first.is_empty() {
        // A known peer address says the handshake is over without a round through the runtime.
        return Ok(if socket.peer_addr().is_ok() {
            Dial::Established(socket.into(), 0)
        } else {
            Dial::Connecting(socket)
        });
    }
    let stream = std::net::TcpStream::from(socket);
    loop {
        return match std::io::Write::write(&mut &stream, first) {
            Ok(0) => Err(std::io::ErrorKind::WriteZero.into()),
            Ok(sent) => Ok(Dial::Established(stream, sent)),
            // Nothing can be sent before the handshake is over.
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                Ok(Dial::Connecting(stream.into()))
            }
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            // A refused connection shows here (ECONNREFUSED).
            Err(error) => Err(error),
        };
    }
}

/// Registers a socket whose handshake is under way with the runtime and waits until it is over.
async fn handshake(socket: Socket) -> std::io::Result<TcpStream> {
    let stream = TcpStream::from_std(socket.into())?;
    stream.writable().await?;
    if let Some(error) = stream.take_error()? {
        return Err(error);
    }
    Ok(stream)
}

/// What one attempt to reach an endpoint came to without waiting.
#[derive(Debug)]
enum Start {
    /// Established; these bytes (the rest of the header and the client's first bytes) are still
    /// to be sent, before anything else.
    Sent(std::net::TcpStream, Vec<u8>),
    /// The handshake is under way; these bytes (header first) go once it is over.
    Connecting(Socket, Vec<u8>),
    /// The endpoint refused; what was read from the client so far, for the next endpoint.
    Failed(std::io::Error, Vec<u8>),
}

/// One attempt, in one synchronous step with the thread's scratch buffer: puts `header` and the
/// client's first bytes in `scratch` (read now on the first attempt, `carried` from a refused one
/// afterwards), dials `endpoint` and sends them with the handshake. On a fast network the request
/// goes out without a turn through the runtime and without a copy of its own. Fails only when
/// reading the client does: then no endpoint is dialled.
fn start(
    cx: &mut std::task::Context<'_>,
    client: &mut TcpStream,
    endpoint: SocketAddr,
    header: &[u8],
    carried: Option<&[u8]>,
    scratch: &mut [u8],
) -> std::io::Result<Start> {
    let filled = match carried {
        None => relay::first_bytes_tcp(cx, client, header, scratch)?,
        Some(bytes) => {
            let len = header.len() + bytes.len();
            scratch.get_mut(..len).map(|room| {
                let (head, tail) = room.split_at_mut(header.len());
                head.copy_from_slice(header);
                tail.copy_from_slice(bytes);
                len
            })
        }
    };
    Ok(match filled {
        Some(len) => attempt(endpoint, &scratch[..len], header.len()),
        // Longer than the scratch buffer (no PROXY header is): a copy of its own.
        None => attempt(
            endpoint,
            &[header, carried.unwrap_or_default()].concat(),
            header.len(),
        ),
    })
}

fn attempt(endpoint: SocketAddr, first: &[u8], header_len: usize) -> Start {
    match dial(endpoint, first) {
        Ok(Dial::Established(stream, sent)) => Start::Sent(stream, first[sent..].to_vec()),
        Ok(Dial::Connecting(socket)) => Start::Connecting(socket, first.to_vec()),
        Err(error) => Start::Failed(error, client_part(first, header_len)),
    }
}

/// The client's bytes of `first` (what follows the header).
fn client_part(first: &[u8], header_len: usize) -> Vec<u8> {
    first.get(header_len..).unwrap_or_default().to_vec()
}

async fn forward_tcp(
    mut client: TcpStream,
    peer: SocketAddr,
    frontend: SocketAddr,
    shared: Arc<Shared>,
    config: Arc<UserspaceConfig>,
) {
    let mut failed = Vec::new();
    // What the client sent that a refused attempt read, for the next endpoint.
    let mut carried: Option<Vec<u8>> = None;
    for timeout in &config.connect_timeouts {
        let Some(endpoint) = shared.pool().pick(peer, &failed, Instant::now()) else {
            break;
        };
        let header = shared
            .proxy_protocol()
            .map(|version| proxy_protocol::header(version, peer, frontend))
            .unwrap_or_default();
        // One poll: the read does not wait, and the scratch buffer is not held across an await.
        let started = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(relay::with_scratch(|scratch| {
                start(
                    cx,
                    &mut client,
                    endpoint.socket_addr(),
                    &header,
                    // Nothing read yet: read again, the client may have spoken since.
                    carried.as_deref().filter(|bytes| !bytes.is_empty()),
                    scratch,
                )
            }))
        })
        .await;
        let started = match started {
            Ok(started) => started,
            Err(error) => {
                tracing::trace!(%frontend, client = %peer, %error, "client connection failed before dialling");
                return;
            }
        };
        let (mut upstream, unsent) = match started {
            Start::Sent(stream, unsent) => match TcpStream::from_std(stream) {
                Ok(upstream) => (upstream, unsent),
                Err(error) => {
                    tracing::debug!(%frontend, %endpoint, %error, "cannot register the endpoint connection");
                    return;
                }
            },
            // Only here does a connection wait for its handshake, so only here is a timer set.
            Start::Connecting(socket, unsent) => {
                match tokio::time::timeout(*timeout, handshake(socket)).await {
                    Ok(Ok(upstream)) => (upstream, unsent),
                    Ok(Err(error)) => {
                        tracing::debug!(%frontend, %endpoint, %error, "connect failed, trying another endpoint");
                        carried = Some(client_part(&unsent, header.len()));
                        failed.push(endpoint);
                        continue;
                    }
                    Err(_) => {
                        tracing::debug!(%frontend, %endpoint, "connect timed out, trying another endpoint");
                        carried = Some(client_part(&unsent, header.len()));
                        failed.push(endpoint);
                        continue;
                    }
                }
            }
            Start::Failed(error, read) => {
                tracing::debug!(%frontend, %endpoint, %error, "connect failed, trying another endpoint");
                carried = Some(read);
                failed.push(endpoint);
                continue;
            }
        };
        shared.pool().connected(endpoint);
        let _guard = ActiveGuard {
            shared: shared.clone(),
            endpoint,
        };
        let result = match upstream.write_all(&unsent).await {
            Ok(()) => relay::relay_tcp(&mut client, &mut upstream).await.map(drop),
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            tracing::trace!(%frontend, client = %peer, %endpoint, %error, "connection ended with an error");
            reset_on_close(&client);
            reset_on_close(&upstream);
        }
        return;
    }
    tracing::warn!(%frontend, client = %peer, "no endpoint accepted the connection");
    // The client was accepted before any endpoint was: a reset tells it nothing was served,
    // where an end of stream with no bytes could pass for an empty answer.
    reset_on_close(&client);
}

/// Makes the close of `socket` send a reset instead of a FIN. A relay that failed (a peer
/// reset, a write refused) has lost bytes: the other peer must see an error, as it would
/// through kube-proxy's NAT, not an end of stream that passes for a complete answer.
pub(crate) fn reset_on_close(socket: &impl std::os::fd::AsFd) {
    // Best effort: the socket may already be gone on the kernel's side.
    let _ = socket2::SockRef::from(socket).set_linger(Some(Duration::ZERO));
}

type Sessions = Arc<Mutex<HashMap<SocketAddr, Arc<UdpSession>>>>;

#[derive(Debug)]
struct UdpSession {
    upstream: UdpSocket,
    last_seen: Mutex<Instant>,
    /// The session's place under the Service's cap, given back when the session ends.
    _permit: state::SessionPermit,
}

impl UdpSession {
    fn touch(&self) {
        *self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }

    fn deadline(&self, idle: Duration) -> Instant {
        *self
            .last_seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            + idle
    }
}

async fn serve_udp(socket: Arc<UdpSocket>, shared: Arc<Shared>, config: Arc<UserspaceConfig>) {
    let sessions: Sessions = Arc::default();
    // Session tasks die with this task (the JoinSet aborts them on drop).
    let mut tasks = JoinSet::new();
    let mut buffer = vec![0u8; 65_535];
    loop {
        let (len, peer) = tokio::select! {
            received = socket.recv_from(&mut buffer) => match received {
                Ok(received) => received,
                Err(error) => {
                    tracing::debug!(%error, "udp receive failed");
                    continue;
                }
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let existing = sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&peer)
            .cloned();
        let session = match existing {
            Some(session) => session,
            None => {
                let Some(session) = open_udp_session(peer, &shared).await else {
                    continue;
                };
                let session = Arc::new(session);
                let endpoint = session_endpoint(&session);
                sessions
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(peer, session.clone());
                tasks.spawn(relay_replies(
                    Arc::downgrade(&socket),
                    peer,
                    session.clone(),
                    sessions.clone(),
                    shared.clone(),
                    endpoint,
                    config.udp_idle_timeout,
                ));
                session
            }
        };
        session.touch();
        if let Err(error) = session.upstream.send(&buffer[..len]).await {
            tracing::debug!(client = %peer, %error, "udp send to endpoint failed");
        }
    }
}

fn session_endpoint(session: &UdpSession) -> Option<EndpointAddr> {
    session.upstream.peer_addr().ok().map(|addr| EndpointAddr {
        ip: addr.ip(),
        port: addr.port(),
    })
}

async fn open_udp_session(peer: SocketAddr, shared: &Arc<Shared>) -> Option<UdpSession> {
    let permit = shared.udp_budget.acquire()?;
    let endpoint = shared.pool().pick(peer, &[], Instant::now())?;
    let local: SocketAddr = if endpoint.ip.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let upstream = UdpSocket::bind(local).await.ok()?;
    upstream.connect(endpoint.socket_addr()).await.ok()?;
    shared.pool().connected(endpoint);
    Some(UdpSession {
        upstream,
        last_seen: Mutex::new(Instant::now()),
        _permit: permit,
    })
}

/// Sessions hold the frontend socket weakly: it closes as soon as its receive loop ends (the
/// Service went), not when the last session task happens to be dropped.
async fn relay_replies(
    socket: Weak<UdpSocket>,
    peer: SocketAddr,
    session: Arc<UdpSession>,
    sessions: Sessions,
    shared: Arc<Shared>,
    endpoint: Option<EndpointAddr>,
    idle: Duration,
) {
    // No buffer of its own: a reply is received into the worker thread's scratch buffer and
    // sent on in the same synchronous step, so an idle session costs no 64 KiB (a burst of
    // clients up to the session cap would otherwise hold cap × 64 KiB).
    loop {
        match tokio::time::timeout_at(session.deadline(idle), session.upstream.readable()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => break,
            Err(_) if Instant::now() >= session.deadline(idle) => break,
            Err(_) => continue,
        }
        let Some(socket) = socket.upgrade() else {
            break;
        };
        let forwarded = relay::with_scratch(|buffer| {
            let len = session.upstream.try_recv(buffer)?;
            session.touch();
            match socket.try_send_to(&buffer[..len], peer) {
                Ok(_) => Ok(None),
                // The client-facing socket is full: keep this one datagram until it drains.
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    Ok(Some(buffer[..len].to_vec()))
                }
                Err(error) => Err(error),
            }
        });
        match forwarded {
            Ok(None) => {}
            Ok(Some(pending)) => {
                if socket.send_to(&pending, peer).await.is_err() {
                    break;
                }
            }
            // Readiness without a datagram: wait again.
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            // ICMP errors from the endpoint (e.g. port unreachable) end the session, as does a
            // failed send to the client.
            Err(_) => break,
        }
    }
    {
        let mut sessions = sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.remove(&peer);
        // Give back the memory of a burst of clients once most of them are gone.
        let live = sessions.len();
        if sessions.capacity() > 64 && sessions.capacity() > 4 * live {
            sessions.shrink_to(64.max(2 * live));
        }
    }
    if let Some(endpoint) = endpoint {
        shared.pool().disconnected(endpoint);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::io::{AsyncBufReadExt, BufReader};

    use crate::model::{Index, IndexConfig};
    use crate::testing::{service, slice};

    /// A TCP server answering every line with its name.
    async fn named_backend(name: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read).lines();
                    while let Ok(Some(_)) = lines.next_line().await {
                        if write
                            .write_all(format!("{name}\n").as_bytes())
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn one_service(frontend: SocketAddr, endpoints: &[SocketAddr]) -> Snapshot {
        one_service_with(frontend, "TCP", endpoints, None)
    }

    fn one_service_with(
        frontend: SocketAddr,
        protocol: &str,
        endpoints: &[SocketAddr],
        proxy_protocol: Option<&str>,
    ) -> Snapshot {
        let mut index = Index::new(IndexConfig {
            node_name: "n1".into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: true,
        });
        let mut svc = service("default", "web", &frontend.ip().to_string()).port(
            "",
            protocol,
            i32::from(frontend.port()),
        );
        if let Some(version) = proxy_protocol {
            svc = svc.annotate(crate::model::PROXY_PROTOCOL_ANNOTATION, version);
        }
        index.apply_service(&svc.build());
        for (i, endpoint) in endpoints.iter().enumerate() {
            index.apply_endpoint_slice(
                &slice("default", "web", &format!("web-{i}"))
                    .port("", protocol, i32::from(endpoint.port()))
                    .endpoint(&endpoint.ip().to_string(), "n1")
                    .build(),
            );
        }
        index.snapshot()
    }

    /// IPv4 TCP sockets in kernel state `state` (`/proc/net/tcp` hex code) whose local (or, with
    /// `remote`, peer) address is `addr`.
    fn tcp_sockets(addr: SocketAddr, remote: bool, state: &str) -> usize {
        sockets("/proc/net/tcp", addr, remote, state)
    }

    fn sockets(table: &str, addr: SocketAddr, remote: bool, state: &str) -> usize {
        let SocketAddr::V4(v4) = addr else {
            panic!("IPv4 only");
        };
        let wanted = format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        );
        let column = if remote { 2 } else { 1 };
        std::fs::read_to_string(table)
            .unwrap()
            .lines()
            .skip(1)
            .filter(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                fields.get(column) == Some(&wanted.as_str()) && fields.get(3) == Some(&state)
            })
            .count()
    }

    const LISTEN: &str = "0A";
    const SYN_SENT: &str = "02";

    fn listening_sockets(addr: SocketAddr) -> usize {
        tcp_sockets(addr, false, LISTEN)
    }

    async fn ask(frontend: SocketAddr) -> String {
        let mut stream = TcpStream::connect(frontend).await.unwrap();
        stream.write_all(b"hi\n").await.unwrap();
        let mut line = String::new();
        BufReader::new(stream).read_line(&mut line).await.unwrap();
        line.trim().to_owned()
    }

    /// Dials like the proxy does, waiting for the runtime when the handshake is not over at once.
    async fn connect(endpoint: SocketAddr, first: &[u8]) -> std::io::Result<(TcpStream, bool)> {
        match dial(endpoint, first)? {
            Dial::Established(stream, sent) => {
                assert_eq!(sent, first.len());
                Ok((TcpStream::from_std(stream).unwrap(), true))
            }
            Dial::Connecting(socket) => Ok((handshake(socket).await?, false)),
        }
    }

    #[tokio::test]
    async fn connect_outcomes() {
        for first in [&b""[..], b"hello\n"] {
            // Loopback completes the handshake inside connect(2): no wait through the runtime,
            // and the first bytes are sent at once.
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let (stream, at_once) = connect(listener.local_addr().unwrap(), first)
                .await
                .unwrap();
            assert!(at_once, "{first:?}");
            assert!(stream.nodelay().unwrap());
            let (mut accepted, _) = listener.accept().await.unwrap();
            let mut received = vec![0; first.len()];
            tokio::io::AsyncReadExt::read_exact(&mut accepted, &mut received)
                .await
                .unwrap();
            assert_eq!(received, first);

            // Nobody listening: refused.
            let closed = listener.local_addr().unwrap();
            drop((listener, accepted));
            let error = connect(closed, first).await.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
        }
    }

    #[tokio::test]
    async fn connect_waits_for_a_handshake_the_endpoint_completes_late() {
        for first in [&b""[..], b"PROXY UNKNOWN\r\n"] {
            // A listener whose accept queue is full drops SYNs: the handshake only completes once
            // the queue has room and the SYN is retransmitted (after about a second).
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
            let listener = socket.listen(0).unwrap();
            let addr = listener.local_addr().unwrap();
            let queued = TcpStream::connect(addr).await.unwrap();
            let Dial::Connecting(socket) = dial(addr, first).unwrap() else {
                panic!("the SYN was dropped, yet the handshake is over");
            };
            let (_accepted, _) = listener.accept().await.unwrap();
            tokio::time::timeout(Duration::from_secs(10), handshake(socket))
                .await
                .expect("connected after the SYN retransmission")
                .unwrap();
            drop(queued);
        }
    }

    #[tokio::test]
    async fn bulk_streams_arrive_intact_both_ways_on_either_engine() {
        // (bytes client → endpoint, bytes endpoint → client): short, past the splice switch,
        // and bulk both ways at once.
        let sizes = [
            (10, 20),
            (relay::SPLICE_AFTER as usize + 1, 3),
            (3 << 20, 5 << 20),
        ];
        for (i, engine) in [UserspaceEngine::Uring, UserspaceEngine::Epoll]
            .into_iter()
            .enumerate()
        {
            // The endpoint answers with its bytes while it still reads the request, then
            // reports (through the channel) what it read.
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = listener.local_addr().unwrap();
            let (received_tx, mut received_rx) = tokio::sync::mpsc::unbounded_channel();
            tokio::spawn(async move {
                let mut answers = sizes.iter().map(|(_, down)| *down);
                while let Ok((stream, _)) = listener.accept().await {
                    let down = answers.next().unwrap_or(0);
                    let received_tx = received_tx.clone();
                    tokio::spawn(async move {
                        let (mut read, mut write) = stream.into_split();
                        let writer = tokio::spawn(async move {
                            write.write_all(&pattern(down)).await.unwrap();
                        });
                        let mut received = Vec::new();
                        tokio::io::AsyncReadExt::read_to_end(&mut read, &mut received)
                            .await
                            .unwrap();
                        writer.await.unwrap();
                        let _ = received_tx.send(received);
                    });
                }
            });
            let (_proxy, frontend) = proxy_to(engine, 20 + i as u8, endpoint).await;
            for (up, down) in sizes {
                let client = TcpStream::connect(frontend).await.unwrap();
                let (mut read, mut write) = client.into_split();
                let sender = tokio::spawn(async move {
                    write.write_all(&pattern(up)).await.unwrap();
                    write.shutdown().await.unwrap();
                });
                let mut answer = Vec::new();
                tokio::time::timeout(
                    Duration::from_secs(30),
                    tokio::io::AsyncReadExt::read_to_end(&mut read, &mut answer),
                )
                .await
                .expect("the stream ends")
                .unwrap();
                sender.await.unwrap();
                assert!(
                    answer == pattern(down),
                    "{engine}: {down} bytes down intact"
                );
                let received = received_rx.recv().await.unwrap();
                assert!(received == pattern(up), "{engine}: {up} bytes up intact");
            }
        }
    }

    #[tokio::test]
    async fn a_bulk_stream_whose_endpoint_stays_open_arrives_whole_on_either_engine() {
        // The endpoint sends and then neither closes nor sends more: the proxy must still pass
        // on the last bytes it holds, with no end of stream to wake it.
        const LEN: usize = (32 << 20) + 12_345;
        for (i, engine) in [UserspaceEngine::Uring, UserspaceEngine::Epoll]
            .into_iter()
            .enumerate()
        {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                stream.write_all(&pattern(LEN)).await.unwrap();
                std::future::pending::<()>().await;
            });
            let (_proxy, frontend) = proxy_to(engine, 30 + i as u8, endpoint).await;
            let mut client = TcpStream::connect(frontend).await.unwrap();
            let mut received = vec![0; LEN];
            tokio::time::timeout(
                Duration::from_secs(30),
                tokio::io::AsyncReadExt::read_exact(&mut client, &mut received),
            )
            .await
            .unwrap_or_else(|_| panic!("{engine}: the whole stream arrives"))
            .unwrap();
            assert!(received == pattern(LEN), "{engine}: every byte in order");
        }
    }

    #[tokio::test]
    async fn an_endpoint_reset_mid_stream_reaches_the_client_as_a_reset_on_either_engine() {
        for (i, engine) in [UserspaceEngine::Uring, UserspaceEngine::Epoll]
            .into_iter()
            .enumerate()
        {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = listener.local_addr().unwrap();
            tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                stream.write_all(&pattern(1_000)).await.unwrap();
                // Zero linger: the close is a reset, mid-answer.
                stream.set_zero_linger().unwrap();
                drop(stream);
            });
            let (_proxy, frontend) = proxy_to(engine, 40 + i as u8, endpoint).await;
            assert_ends_with_a_reset(engine, frontend).await;
        }
    }

    #[tokio::test]
    async fn a_client_no_endpoint_accepted_sees_a_reset_not_an_empty_answer_on_either_engine() {
        for (i, engine) in [UserspaceEngine::Uring, UserspaceEngine::Epoll]
            .into_iter()
            .enumerate()
        {
            // Nobody listens on the endpoint's port: every attempt is refused.
            let endpoint = TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap()
                .local_addr()
                .unwrap();
            let (_proxy, frontend) = proxy_to(engine, 50 + i as u8, endpoint).await;
            assert_ends_with_a_reset(engine, frontend).await;
        }
    }

    /// Connects to `frontend` and reads to the end: the connection must end with a reset, not
    /// an end of stream that would pass for a complete (or empty) answer. The reset may come
    /// before the client's connect() has looked at its socket: then the connect reports it.
    async fn assert_ends_with_a_reset(engine: UserspaceEngine, frontend: SocketAddr) {
        let mut received = Vec::new();
        let outcome = tokio::time::timeout(Duration::from_secs(30), async {
            let mut client = TcpStream::connect(frontend).await?;
            tokio::io::AsyncReadExt::read_to_end(&mut client, &mut received).await
        })
        .await
        .unwrap_or_else(|_| panic!("{engine}: the connection ends"));
        let error = outcome.expect_err(&format!(
            "{engine}: a clean end of stream after {} bytes would pass for an answer",
            received.len()
        ));
        assert_eq!(
            error.kind(),
            std::io::ErrorKind::ConnectionReset,
            "{engine}"
        );
    }

    /// A proxy on `engine` serving one Service at a free port of 127.77.9.`last` with
    /// `endpoint` behind it; the proxy stops when the returned value is dropped.
    async fn proxy_to(
        engine: UserspaceEngine,
        last: u8,
        endpoint: SocketAddr,
    ) -> (UserspaceProxy, SocketAddr) {
        let ip = std::net::Ipv4Addr::new(127, 77, 9, last);
        let port = TcpListener::bind((ip, 0))
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let frontend = SocketAddr::from((ip, port));
        let mut proxy = UserspaceProxy::new(UserspaceConfig {
            engine,
            ..UserspaceConfig::default()
        });
        proxy.apply(&one_service(frontend, &[endpoint])).await;
        (proxy, frontend)
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// A listener whose accept queue is full: the kernel drops SYNs to it, so a connect to it
    /// stays in progress. Returns it and the connection filling the queue.
    async fn full_listener() -> (TcpListener, TcpStream) {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(0).unwrap();
        let queued = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        (listener, queued)
    }

    #[tokio::test]
    async fn a_connect_refused_or_timed_out_mid_handshake_goes_on_to_the_next_endpoint() {
        // (engine, the stuck endpoint's listener is closed while the proxy waits for it)
        let cases = [
            (UserspaceEngine::Uring, true),
            (UserspaceEngine::Uring, false),
            (UserspaceEngine::Epoll, true),
            (UserspaceEngine::Epoll, false),
        ];
        for (i, (engine, refuse)) in cases.into_iter().enumerate() {
            let (stuck, queued) = full_listener().await;
            let stuck_addr = stuck.local_addr().unwrap();
            let good = named_backend("good").await;
            let ip = std::net::Ipv4Addr::new(127, 77, 9, 10 + i as u8);
            let port = TcpListener::bind((ip, 0))
                .await
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let frontend = SocketAddr::from((ip, port));
            // Refused: the wait is long, so only the refusal can end it. Timed out: short.
            let first_timeout = if refuse { 20_000 } else { 300 };
            let mut proxy = UserspaceProxy::new(UserspaceConfig {
                engine,
                workers: NonZeroUsize::MIN,
                connect_timeouts: vec![
                    Duration::from_millis(first_timeout),
                    Duration::from_secs(10),
                ],
                ..UserspaceConfig::default()
            });
            proxy
                .apply(&one_service(frontend, &[stuck_addr, good]))
                .await;
            // Round robin: one of two connections tries the stuck endpoint first.
            let asked = tokio::spawn(async move { [ask(frontend).await, ask(frontend).await] });
            let waiting = async {
                while tcp_sockets(stuck_addr, true, SYN_SENT) == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(10), waiting)
                .await
                .expect("the proxy dials the stuck endpoint");
            if refuse {
                // The retransmitted SYN now meets a closed port: RST, so ECONNREFUSED.
                drop(stuck);
            }
            let answer = tokio::time::timeout(Duration::from_secs(15), asked)
                .await
                .expect("answered by the next endpoint")
                .unwrap();
            assert_eq!(answer, ["good", "good"], "{engine} refuse={refuse}");
            drop(queued);
        }
    }

    #[tokio::test]
    async fn header_and_payload_reach_an_endpoint_that_completes_the_handshake_late() {
        // The endpoint's accept queue is full, so the proxy's SYN is dropped and its connection
        // completes through the runtime, after the retransmission.
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let endpoint = socket.listen(0).unwrap();
        let endpoint_addr = endpoint.local_addr().unwrap();
        let queued = TcpStream::connect(endpoint_addr).await.unwrap();
        let port = TcpListener::bind("127.77.9.2:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let frontend = SocketAddr::from(([127, 77, 9, 2], port));
        let mut proxy = UserspaceProxy::new(UserspaceConfig {
            connect_timeouts: vec![Duration::from_secs(10)],
            ..UserspaceConfig::default()
        });
        proxy
            .apply(&one_service_with(
                frontend,
                "TCP",
                &[endpoint_addr],
                Some("v1"),
            ))
            .await;
        let mut client = TcpStream::connect(frontend).await.unwrap();
        let client_addr = client.local_addr().unwrap();
        client.write_all(b"payload").await.unwrap();
        // Room in the queue only once the proxy's SYN is out.
        let waiting = async {
            while tcp_sockets(endpoint_addr, true, SYN_SENT) == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the proxy dials the endpoint");
        let (first, _) = endpoint.accept().await.unwrap();
        drop((first, queued));
        let (mut accepted, _) = tokio::time::timeout(Duration::from_secs(10), endpoint.accept())
            .await
            .expect("the retransmitted SYN gets through")
            .unwrap();
        let expected = format!(
            "PROXY TCP4 127.0.0.1 127.77.9.2 {} {port}\r\npayload",
            client_addr.port()
        );
        let mut received = vec![0; expected.len()];
        tokio::io::AsyncReadExt::read_exact(&mut accepted, &mut received)
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&received), expected);
    }

    #[tokio::test]
    async fn a_large_request_read_before_a_refusal_reaches_the_next_endpoint_after_the_header() {
        // Nobody listens on `refused`; round robin sends one of the two connections there first.
        let refused = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap();
        let endpoint = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint_addr = endpoint.local_addr().unwrap();
        let port = TcpListener::bind("127.77.9.4:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let frontend = SocketAddr::from(([127, 77, 9, 4], port));
        let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
        proxy
            .apply(&one_service_with(
                frontend,
                "TCP",
                &[refused, endpoint_addr],
                Some("v1"),
            ))
            .await;
        // More than the scratch buffer and more than a fresh socket takes in one send.
        let request: Vec<u8> = (0..(3 * relay::SCRATCH_BUFFER))
            .map(|i| (i % 251) as u8)
            .collect();
        for _ in 0..2 {
            let mut client = TcpStream::connect(frontend).await.unwrap();
            let client_addr = client.local_addr().unwrap();
            let sent = request.clone();
            let writer = tokio::spawn(async move {
                client.write_all(&sent).await.unwrap();
                client
            });
            let (mut accepted, _) =
                tokio::time::timeout(Duration::from_secs(10), endpoint.accept())
                    .await
                    .expect("the proxy reaches the listening endpoint")
                    .unwrap();
            let mut expected = format!(
                "PROXY TCP4 127.0.0.1 127.77.9.4 {} {port}\r\n",
                client_addr.port()
            )
            .into_bytes();
            expected.extend_from_slice(&request);
            let mut received = vec![0; expected.len()];
            tokio::io::AsyncReadExt::read_exact(&mut accepted, &mut received)
                .await
                .unwrap();
            assert!(received == expected, "header, then every byte in order");
            drop(writer.await.unwrap());
        }
    }

    #[tokio::test]
    async fn udp_frontends_have_a_socket_per_worker_and_every_client_gets_replies() {
        let endpoint = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let endpoint_addr = endpoint.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = [0u8; 64];
            while let Ok((len, peer)) = endpoint.recv_from(&mut buffer).await {
                let mut reply = b"re: ".to_vec();
                reply.extend_from_slice(&buffer[..len]);
                let _ = endpoint.send_to(&reply, peer).await;
            }
        });
        let port = UdpSocket::bind("127.77.9.3:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let frontend = SocketAddr::from(([127, 77, 9, 3], port));
        let mut proxy = UserspaceProxy::new(UserspaceConfig {
            workers: NonZeroUsize::new(3).unwrap(),
            ..UserspaceConfig::default()
        });
        let report = proxy
            .apply(&one_service_with(frontend, "UDP", &[endpoint_addr], None))
            .await;
        assert_eq!(report.opened.len(), 1, "{report:?}");
        const UNCONNECTED: &str = "07";
        assert_eq!(sockets("/proc/net/udp", frontend, false, UNCONNECTED), 3);

        // Whichever socket the kernel hands a client to answers it, twice over one session.
        for i in 0..12u8 {
            let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            client.connect(frontend).await.unwrap();
            for round in 0..2u8 {
                client.send(&[i, round]).await.unwrap();
                let mut buffer = [0u8; 64];
                let len = tokio::time::timeout(Duration::from_secs(10), client.recv(&mut buffer))
                    .await
                    .expect("a reply")
                    .unwrap();
                assert_eq!(&buffer[..len], &[b'r', b'e', b':', b' ', i, round]);
            }
        }

        proxy
            .apply(&one_service_with(frontend, "UDP", &[], None))
            .await;
        assert_eq!(sockets("/proc/net/udp", frontend, false, UNCONNECTED), 0);
    }

    #[tokio::test]
    async fn accepted_connections_inherit_nodelay_from_the_listener() {
        let listener = tcp_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.nodelay().unwrap());
    }

    #[tokio::test]
    async fn every_worker_listens_and_round_robin_spans_them() {
        let endpoints = [
            named_backend("a").await,
            named_backend("b").await,
            named_backend("c").await,
        ];
        let port = TcpListener::bind("127.77.9.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let frontend = SocketAddr::from(([127, 77, 9, 1], port));
        let mut proxy = UserspaceProxy::new(UserspaceConfig {
            workers: NonZeroUsize::new(3).unwrap(),
            ..UserspaceConfig::default()
        });
        let report = proxy.apply(&one_service(frontend, &endpoints)).await;
        assert_eq!(report.opened.len(), 1, "{report:?}");
        assert_eq!(listening_sockets(frontend), 3);

        // The kernel spreads connections over the three sockets, yet the pool is shared: the
        // order stays one global round robin.
        let mut answers = Vec::new();
        for _ in 0..12 {
            answers.push(ask(frontend).await);
        }
        let first: BTreeSet<&String> = answers[..3].iter().collect();
        assert_eq!(first.len(), 3, "{answers:?}");
        for cycle in answers.chunks(3) {
            assert_eq!(cycle, &answers[..3], "{answers:?}");
        }

        proxy.apply(&one_service(frontend, &[])).await;
        assert_eq!(listening_sockets(frontend), 0);
    }
}

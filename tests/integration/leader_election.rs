//! Leader election under a hung API server: two replicas of the controller against the embedded
//! API server, replica A's connections going through a proxy that can switch to "accept
//! connections, never answer". A must stop writing before B may start, its in-flight reconcile
//! (a cloud call that never returns) must be cancelled rather than awaited, and B must take over
//! and converge a Service created after the hang.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use kube::Client;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, LoadBalancerStatus, ProviderError,
};
use kube_lb_provider_local::{LocalProvider, Pool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::controller_support::{
    CEILING, Elected, LeaseTimings, eventually, server, spawn_elected, svc_lb, wait_address,
};

const TIMINGS: LeaseTimings = LeaseTimings {
    lease: Duration::from_secs(3),
    renew: Duration::from_secs(2),
    retry: Duration::from_millis(500),
};

/// Scheduling slack allowed on top of the timing argument's bounds (the test runs beside
/// other test processes on a shared machine).
const SLACK: Duration = Duration::from_millis(250);

/// One write a replica made: a provider call (from its start until it returned or was
/// dropped) or an API write the proxy forwarded (an instant).
#[derive(Debug, Clone)]
struct Write {
    replica: &'static str,
    what: String,
    start: Instant,
    end: Option<Instant>,
    completed: bool,
}

type Log = Arc<Mutex<Vec<Write>>>;

/// `(replica, when, leading)` each time a replica's leadership changed.
type Transitions = Arc<Mutex<Vec<(&'static str, Instant, bool)>>>;

fn record_start(log: &Log, replica: &'static str, what: String) -> usize {
    let mut log = log.lock().unwrap();
    log.push(Write {
        replica,
        what,
        start: Instant::now(),
        end: None,
        completed: false,
    });
    log.len() - 1
}

/// Marks the end of a provider call when it is dropped, whether it returned or was cancelled.
struct CallGuard {
    log: Log,
    index: usize,
    completed: bool,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let mut log = self.log.lock().unwrap();
        log[self.index].end = Some(Instant::now());
        log[self.index].completed = self.completed;
    }
}

/// The local provider, recording every mutating call with its interval; `ensure` of the
/// gated Service waits until the gate opens, standing for a cloud call that never returns.
struct Recorder {
    replica: &'static str,
    inner: LocalProvider,
    log: Log,
    gate: Option<(String, watch::Receiver<bool>)>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    fn new(replica: &'static str, log: Log, gate: Option<(String, watch::Receiver<bool>)>) -> Self {
        let pool = Pool::new(vec!["127.241.0.0/16".parse().unwrap()]).unwrap();
        Self {
            replica,
            inner: LocalProvider::new(pool, CallCounter::new()),
            log,
            gate,
        }
    }

    fn guard(&self, what: String) -> CallGuard {
        CallGuard {
            log: self.log.clone(),
            index: record_start(&self.log, self.replica, what),
            completed: false,
        }
    }
}

#[async_trait]
impl LoadBalancerProvider for Recorder {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let service = spec.service.to_string();
        let mut guard = self.guard(format!("ensure {service}"));
        if let Some((gated, gate)) = &self.gate
            && *gated == service
        {
            let _ = gate.clone().wait_for(|open| *open).await;
        }
        let result = self.inner.ensure(spec, backends).await;
        guard.completed = true;
        result
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let mut guard = self.guard(format!("delete {service}"));
        let result = self.inner.delete(service).await;
        guard.completed = true;
        result
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
        let mut guard = self.guard(format!("adopt {service}"));
        let result = self.inner.adopt(service, status).await;
        guard.completed = true;
        result
    }
}

/// A TCP proxy in front of the API server for one replica. It logs every mutating request it
/// forwards (other than the replica's own Lease writes) and can switch to "hung": from then on
/// it forwards nothing in either direction on any connection, old or new, but keeps them open.
struct Proxy {
    addr: SocketAddr,
    hung: Arc<AtomicBool>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, replica: &'static str, log: Log) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hung = Arc::new(AtomicBool::new(false));
        let flag = hung.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (hung, log) = (flag.clone(), log.clone());
                tokio::spawn(async move {
                    if hung.load(Ordering::SeqCst) {
                        // Accept, never answer.
                        let _held = client;
                        return std::future::pending::<()>().await;
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let requests = pump(
                        client_read,
                        server_write,
                        hung.clone(),
                        Some((replica, log)),
                    );
                    let responses = pump(server_read, client_write, hung, None);
                    tokio::join!(requests, responses);
                });
            }
        });
        Self { addr, hung }
    }

    fn hang(&self) {
        self.hung.store(true, Ordering::SeqCst);
    }

    /// A client whose every request goes through this proxy.
    fn client(&self) -> Client {
        let url: axum::http::Uri = format!("http://{}", self.addr).parse().unwrap();
        Client::try_from(kube::Config::new(url)).unwrap()
    }
}

/// Copies `from` to `to` until EOF; once `hung` is set, holds both ends open and forwards
/// nothing more. Requests are logged when `requests` is given.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    hung: Arc<AtomicBool>,
    requests: Option<(&'static str, Log)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if let Some((replica, log)) = &requests
            && let Some(line) = mutating_request_line(&buf[..n])
        {
            let index = record_start(log, replica, line);
            let mut log = log.lock().unwrap();
            log[index].end = Some(log[index].start);
            log[index].completed = true;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// The request line of a mutating request other than a Lease write, when `chunk` starts one.
/// (kube's client writes each request's head in one piece on loopback.)
fn mutating_request_line(chunk: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&chunk[..chunk.len().min(512)]);
    let line = head.lines().next()?;
    let method = line.split(' ').next()?;
    let mutating = matches!(method, "POST" | "PUT" | "PATCH" | "DELETE");
    (mutating && !line.contains("/leases")).then(|| line.to_string())
}

/// Records when `leading` changes, as the replica's controller sees it.
fn record_leadership(
    replica: &'static str,
    mut leading: watch::Receiver<bool>,
    transitions: Transitions,
) {
    tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            let value = *leading.borrow_and_update();
            transitions
                .lock()
                .unwrap()
                .push((replica, Instant::now(), value));
        }
    });
}

async fn wait_leading(elected: &Elected, want: bool) -> Instant {
    let mut leading = elected.leading.clone();
    tokio::time::timeout(CEILING, leading.wait_for(|l| *l == want))
        .await
        .unwrap_or_else(|_| panic!("leading never became {want}"))
        .unwrap();
    Instant::now()
}

#[tokio::test]
async fn leader_with_a_hung_api_server_stops_writing_before_the_other_takes_over() {
    let server = server().await;
    let client = server.client().unwrap();
    let log: Log = Arc::default();
    let transitions: Transitions = Arc::default();
    let proxy_a = Proxy::start(server.addr(), "a", log.clone()).await;
    let proxy_b = Proxy::start(server.addr(), "b", log.clone()).await;
    let (gate_tx, gate_rx) = watch::channel(false);
    let provider_a = Arc::new(Recorder::new(
        "a",
        log.clone(),
        Some(("default/slow".into(), gate_rx)),
    ));
    let provider_b = Arc::new(Recorder::new("b", log.clone(), None));

    let a = spawn_elected(proxy_a.client(), "replica-a", TIMINGS, provider_a);
    record_leadership("a", a.leading.clone(), transitions.clone());
    wait_leading(&a, true).await;
    let b = spawn_elected(proxy_b.client(), "replica-b", TIMINGS, provider_b);
    record_leadership("b", b.leading.clone(), transitions.clone());

    // A serves a Service, then starts a cloud call that never returns.
    svc_lb("default", "before").create(&client).await;
    wait_address(&client, "default", "before").await;
    svc_lb("default", "slow").create(&client).await;
    eventually("A's ensure of default/slow in flight", || async {
        let log = log.lock().unwrap();
        log.iter()
            .any(|w| w.replica == "a" && w.what == "ensure default/slow" && w.end.is_none())
            .then_some(())
    })
    .await;

    // A's API server hangs: A's renewals, watches and writes all stall.
    proxy_a.hang();
    let hung_at = Instant::now();
    svc_lb("default", "late").create(&client).await;
    let a_stopped = wait_leading(&a, false).await;
    let b_started = wait_leading(&b, true).await;
    wait_address(&client, "default", "late").await;
    wait_address(&client, "default", "slow").await;

    let a_stop_after_hang = a_stopped - hung_at;
    let handover_gap = b_started.saturating_duration_since(a_stopped);
    println!(
        "A stopped {a_stop_after_hang:?} after its API server hung; B started {handover_gap:?} after A stopped"
    );
    // A's last successful renewal started before the hang, so A stops within the renew
    // deadline of the hang, while its renewal request is still hanging.
    assert!(
        a_stop_after_hang <= TIMINGS.renew + SLACK,
        "A stopped {a_stop_after_hang:?} after the hang"
    );
    // B may start no earlier than lease − renew after A stopped.
    assert!(
        handover_gap >= TIMINGS.lease - TIMINGS.renew - SLACK,
        "B started only {handover_gap:?} after A stopped"
    );

    // Opening the gate now would let A's ensure finish if its reconcile were still alive.
    gate_tx.send_replace(true);
    let writes = log.lock().unwrap().clone();
    let slow_a: Vec<&Write> = writes
        .iter()
        .filter(|w| w.replica == "a" && w.what == "ensure default/slow")
        .collect();
    assert_eq!(slow_a.len(), 1, "{slow_a:?}");
    assert!(
        !slow_a[0].completed,
        "A's in-flight ensure was cancelled, not awaited"
    );
    let cancelled_at = slow_a[0].end.expect("A's ensure was dropped");
    assert!(
        cancelled_at <= a_stopped + SLACK,
        "A's ensure was dropped {:?} after A stopped leading",
        cancelled_at - a_stopped
    );

    // At most one writer at any time: every write of A ended before any write of B began,
    // and nothing of A's started after A stopped.
    let a_writes: Vec<&Write> = writes.iter().filter(|w| w.replica == "a").collect();
    let b_writes: Vec<&Write> = writes.iter().filter(|w| w.replica == "b").collect();
    assert!(
        a_writes.iter().any(|w| w.what.starts_with("PATCH")),
        "A wrote: {a_writes:#?}"
    );
    assert!(
        b_writes.iter().any(|w| w.what == "ensure default/late"),
        "B converged the Service created after the hang: {b_writes:#?}"
    );
    let a_last_end = a_writes
        .iter()
        .map(|w| w.end.expect("every write of A has ended"))
        .max()
        .unwrap();
    let b_first_start = b_writes.iter().map(|w| w.start).min().unwrap();
    assert!(
        a_last_end < b_first_start,
        "A's last write ended {:?} after B's first began",
        a_last_end - b_first_start
    );
    assert!(a_writes.iter().all(|w| w.start <= a_stopped));
    assert!(
        b_writes.iter().all(|w| w.start >= b_started - SLACK),
        "B wrote before it led"
    );
    println!(
        "A: {} writes, B: {} writes; A's last write ended {:?} before B's first",
        a_writes.len(),
        b_writes.len(),
        b_first_start - a_last_end
    );

    // Leadership as the controllers saw it: the intervals never overlap.
    let transitions = transitions.lock().unwrap().clone();
    let mut leaders = 0i32;
    for (replica, at, leading) in &transitions {
        leaders += if *leading { 1 } else { -1 };
        assert!(
            leaders <= 1,
            "two leaders at {:?} ({replica}): {transitions:?}",
            *at - hung_at
        );
    }

    b.shutdown.cancel();
    a.shutdown.cancel();
    let _ = tokio::time::timeout(CEILING, b.task).await;
    let _ = tokio::time::timeout(CEILING, b.elector).await;
    let _ = tokio::time::timeout(CEILING, a.elector).await;
}

/// Timings that would break the timing argument are refused before anything connects, with
/// an error naming the flags and the rule.
#[test]
fn controller_refuses_leader_timings_that_allow_two_leaders() {
    let cases = [
        (
            ["--leader-elect-renew-deadline", "20s"],
            "the renew deadline (20s) must be shorter than the lease duration (15s)",
        ),
        (
            ["--leader-elect-retry-period", "10s"],
            "the retry period (10s) must be shorter than the renew deadline (10s)",
        ),
    ];
    for (flags, want) in cases {
        let flags = [&["--leader-elect"], &flags[..]].concat();
        let stderr = crate::controller_support::controller_refusal(&flags);
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
        assert!(
            stderr.contains("--leader-elect-renew-deadline"),
            "{flags:?}: {stderr}"
        );
    }
}

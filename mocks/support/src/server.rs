//! Starting a mock: bind, serve its router in a background task, stop when the handle drops.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::journal::{self, Recorded};

/// A mock's state, shared by its request handlers and its test handle.
pub type Shared<S> = Arc<Mutex<S>>;

/// Locks a mock's state. A panic while the lock was held can only come from a failing test;
/// the mock keeps serving rather than poisoning every later request.
pub fn lock_shared<S>(state: &Mutex<S>) -> MutexGuard<'_, S> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the shared handle needs from a mock's state.
pub trait MockState: Send + 'static {
    /// One journaled request.
    type Entry: Recorded;
    /// One armed fault rule.
    type Fault;

    /// The journal, oldest first.
    fn journal(&mut self) -> &mut Vec<Self::Entry>;

    /// The armed fault rules.
    fn faults(&mut self) -> &mut Vec<Self::Fault>;

    /// Brings time-driven state (pending operations, async tasks) up to date; called before a
    /// test reads the state through the handle, so what it sees is what the next request would.
    fn settle(&mut self) {}
}

/// A running mock: its address, its state, and the server task, stopped when this is dropped.
pub struct MockServer<S> {
    addr: SocketAddr,
    url: String,
    state: Shared<S>,
    latency: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl<S> fmt::Debug for MockServer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl<S> Drop for MockServer<S> {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

impl<S: MockState> MockServer<S> {
    /// Binds `listen` (port 0: a free port), builds the state with the base URL clients will
    /// use (`http://ADDR:PORT`, for links inside documents), and serves the router `app` makes
    /// from the shared state in a background task. `name` names the mock in the log line
    /// written if the server stops on an error.
    pub async fn start(
        listen: SocketAddr,
        name: &'static str,
        state: impl FnOnce(&str) -> S,
        app: impl FnOnce(Shared<S>) -> Router,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let state = Arc::new(Mutex::new(state(&url)));
        let latency = Arc::new(AtomicU64::new(0));
        let app = with_latency(app(state.clone()), latency.clone());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let server = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(error) = server.await {
                tracing::warn!(%error, mock = name, "mock server stopped");
            }
        });
        Ok(MockServer {
            addr,
            url,
            state,
            latency,
            stop: Some(stop),
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The state, settled (see [`MockState::settle`]).
    pub fn lock(&self) -> MutexGuard<'_, S> {
        let mut state = lock_shared(&self.state);
        state.settle();
        state
    }

    /// Every request so far.
    pub fn journal(&self) -> Vec<S::Entry> {
        self.lock().journal().clone()
    }

    /// How many requests so far (a mark for [`MockServer::journal_since`]).
    pub fn journal_len(&self) -> usize {
        self.lock().journal().len()
    }

    /// Requests after the first `from`.
    pub fn journal_since(&self, from: usize) -> Vec<S::Entry> {
        journal::since(self.lock().journal(), from)
    }

    /// Requests that may have changed state.
    pub fn mutations(&self) -> Vec<S::Entry> {
        journal::mutations(self.lock().journal())
    }

    /// Requests after the first `from` that may have changed state.
    pub fn mutations_since(&self, from: usize) -> Vec<S::Entry> {
        journal::mutations(&self.journal_since(from))
    }

    /// Forgets the journal.
    pub fn clear_journal(&self) {
        self.lock().journal().clear();
    }

    /// Arms a fault rule (after those already armed).
    pub fn inject(&self, fault: S::Fault) {
        self.lock().faults().push(fault);
    }

    /// Fault rules not yet spent.
    pub fn pending_faults(&self) -> usize {
        self.lock().faults().len()
    }

    /// Disarms every fault rule.
    pub fn clear_faults(&self) {
        self.lock().faults().clear();
    }

    /// Delays every later request by `per_request` before it is answered (zero: no delay), so
    /// benchmarks see a cloud's round trip instead of loopback's.
    pub fn set_latency(&self, per_request: Duration) {
        let micros = u64::try_from(per_request.as_micros()).unwrap_or(u64::MAX);
        self.latency.store(micros, Ordering::Relaxed);
    }
}

/// Delays every request by the current value of `latency` (microseconds).
fn with_latency(router: Router, latency: Arc<AtomicU64>) -> Router {
    router.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let delay = Duration::from_micros(latency.load(Ordering::Relaxed));
            async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                next.run(request).await
            }
        },
    ))
}

/// A `200` whose headers go out and whose body then fails: hyper aborts the connection, so the
/// client sees a transport error although the request took effect (the "lost response" fault).
pub fn lost_response() -> Response {
    let broken = futures::stream::once(async {
        Err::<Bytes, std::io::Error>(std::io::Error::other("response lost (fault injection)"))
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(Body::from_stream(broken))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone)]
    struct Hit(String);

    impl Recorded for Hit {
        fn is_mutation(&self) -> bool {
            !self.0.starts_with("GET")
        }
    }

    #[derive(Default)]
    struct Counter {
        journal: Vec<Hit>,
        faults: Vec<u16>,
    }

    impl MockState for Counter {
        type Entry = Hit;
        type Fault = u16;
        fn journal(&mut self) -> &mut Vec<Hit> {
            &mut self.journal
        }
        fn faults(&mut self) -> &mut Vec<u16> {
            &mut self.faults
        }
    }

    async fn record(
        axum::extract::State(state): axum::extract::State<Shared<Counter>>,
        method: axum::http::Method,
    ) -> StatusCode {
        let mut state = lock_shared(&state);
        state.journal.push(Hit(method.to_string()));
        match state.faults.pop() {
            Some(status) => StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
            None => StatusCode::OK,
        }
    }

    #[tokio::test]
    async fn serves_journals_and_stops_on_drop() -> Result<(), Box<dyn std::error::Error>> {
        let server = MockServer::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "test",
            |_| Counter::default(),
            |state| Router::new().fallback(record).with_state(state),
        )
        .await?;
        let url = server.url().to_string();
        assert_eq!(url, format!("http://{}", server.addr()));
        let client = reqwest::Client::new();
        server.inject(503);
        assert_eq!(client.get(&url).send().await?.status(), 503);
        assert_eq!(client.put(&url).send().await?.status(), 200);
        assert_eq!(server.journal_len(), 2);
        assert_eq!(server.mutations().len(), 1);
        assert_eq!(server.mutations_since(2).len(), 0);
        assert_eq!(server.pending_faults(), 0);
        server.clear_journal();
        assert!(server.journal().is_empty());
        drop(server);
        // The aborted task never accepts again: a new connection (a new client, so no pooled
        // one) is refused or left unanswered, never served. The timeout only bounds the wait.
        let fresh = reqwest::Client::new();
        let answered = tokio::time::timeout(Duration::from_secs(5), fresh.get(&url).send()).await;
        assert!(
            !matches!(answered, Ok(Ok(_))),
            "the server still answers after its handle was dropped"
        );
        Ok(())
    }
}

//! A fault-injecting HTTP proxy between the controller and a cloud (moto, the GCE mock, the ARM
//! mock). Each request is forwarded, or answered with an injected fault chosen by a seeded RNG:
//! a 503 without forwarding, the cloud's own throttling answer without forwarding, or — the case
//! that tests idempotency — forwarded so the call takes effect, and then answered with a 503 as
//! if the response had been lost on the way back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use axum::response::Response;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the cloud words a throttling answer, so each SDK parses it as its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// AWS Query/EC2 XML errors.
    Aws,
    /// Google JSON errors.
    Gcp,
    /// ARM JSON errors with `Retry-After`.
    Azure,
}

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// 503 without forwarding.
    Unavailable,
    /// The cloud's throttling error without forwarding.
    Throttled,
    /// Forwarded (the call took effect), then answered 503.
    LostResponse,
}

/// Fault probabilities.
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    /// Share of mutating calls that fail (split evenly over the three kinds).
    pub mutating: f64,
    /// Share of reads answered 503.
    pub reads: f64,
}

struct ProxyState {
    upstream: String,
    dialect: Dialect,
    rates: FaultRates,
    enabled: AtomicBool,
    rng: Mutex<StdRng>,
    injected: Mutex<BTreeMap<Fault, u64>>,
    forwarded: Mutex<u64>,
    client: reqwest::Client,
}

/// The running proxy; stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream` (e.g. `http://127.0.0.1:5000`).
    pub async fn start(upstream: &str, dialect: Dialect, rates: FaultRates, seed: u64) -> Self {
        let state = Arc::new(ProxyState {
            upstream: upstream.trim_end_matches('/').to_string(),
            dialect,
            rates,
            enabled: AtomicBool::new(false),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            injected: Mutex::new(BTreeMap::new()),
            forwarded: Mutex::new(0),
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(8)
                .build()
                .expect("reqwest client"),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the fault proxy");
        let addr = listener.local_addr().expect("proxy address");
        let router = axum::Router::new()
            .fallback(handle)
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        FaultProxy { addr, state, task }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Turns fault injection on or off (forwarding always works).
    pub fn set_enabled(&self, enabled: bool) {
        self.state.enabled.store(enabled, Ordering::SeqCst);
    }

    /// Faults injected so far, by kind.
    pub fn injected(&self) -> BTreeMap<Fault, u64> {
        self.state
            .injected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests forwarded so far (including those whose response was then lost).
    pub fn forwarded(&self) -> u64 {
        *self
            .state
            .forwarded
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// True when the request may change cloud state: anything but GET/HEAD, except AWS Query
/// `Describe*` actions (which are POSTs).
fn is_mutating(method: &Method, body: &[u8]) -> bool {
    if matches!(*method, Method::GET | Method::HEAD) {
        return false;
    }
    let text = String::from_utf8_lossy(body);
    let action = text
        .split('&')
        .find_map(|pair| pair.strip_prefix("Action="))
        .unwrap_or_default();
    !action.starts_with("Describe")
}

fn aws_version(body: &[u8]) -> String {
    String::from_utf8_lossy(body)
        .split('&')
        .find_map(|pair| pair.strip_prefix("Version="))
        .unwrap_or_default()
        .to_string()
}

fn unavailable() -> Response {
    let mut response = Response::new(Body::from("injected: service unavailable"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

fn throttled(dialect: Dialect, body: &[u8]) -> Response {
    let (status, content_type, text) = match dialect {
        // EC2 speaks its own XML error shape; ELB and ELBv2 the Query one.
        Dialect::Aws if aws_version(body) == "2016-11-15" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/xml",
            "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit \
             exceeded.</Message></Error></Errors><RequestID>chaos</RequestID></Response>"
                .to_string(),
        ),
        Dialect::Aws => (
            StatusCode::BAD_REQUEST,
            "text/xml",
            "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate \
             exceeded</Message></Error><RequestId>chaos</RequestId></ErrorResponse>"
                .to_string(),
        ),
        Dialect::Gcp => (
            StatusCode::TOO_MANY_REQUESTS,
            "application/json",
            r#"{"error":{"code":429,"message":"Rate Limit Exceeded","status":"RESOURCE_EXHAUSTED","errors":[{"reason":"rateLimitExceeded","message":"Rate Limit Exceeded","domain":"usageLimits"}]}}"#
                .to_string(),
        ),
        Dialect::Azure => (
            StatusCode::TOO_MANY_REQUESTS,
            "application/json",
            r#"{"error":{"code":"TooManyRequests","message":"injected throttling"}}"#.to_string(),
        ),
    };
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    if dialect == Dialect::Azure {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

fn choose(state: &ProxyState, mutating: bool) -> Option<Fault> {
    if !state.enabled.load(Ordering::SeqCst) {
        return None;
    }
    let mut rng = state.rng.lock().unwrap_or_else(PoisonError::into_inner);
    let draw: f64 = rng.random();
    if mutating {
        let share = state.rates.mutating / 3.0;
        if draw < share {
            Some(Fault::Unavailable)
        } else if draw < 2.0 * share {
            Some(Fault::Throttled)
        } else if draw < 3.0 * share {
            Some(Fault::LostResponse)
        } else {
            None
        }
    } else {
        (draw < state.rates.reads).then_some(Fault::Unavailable)
    }
}

async fn forward(
    state: &ProxyState,
    method: Method,
    path: &str,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let url = format!("{}{path}", state.upstream);
    let mut request = state.client.request(method, url).body(body);
    for (name, value) in headers {
        if matches!(
            name.as_str(),
            "host" | "content-length" | "connection" | "transfer-encoding"
        ) {
            continue;
        }
        request = request.header(name, value);
    }
    *state
        .forwarded
        .lock()
        .unwrap_or_else(PoisonError::into_inner) += 1;
    match request.send().await {
        Ok(upstream) => {
            let status = upstream.status();
            let headers = upstream.headers().clone();
            let bytes = upstream.bytes().await.unwrap_or_default();
            let mut response = Response::new(Body::from(bytes));
            *response.status_mut() = status;
            for (name, value) in &headers {
                if !matches!(
                    name.as_str(),
                    "content-length" | "connection" | "transfer-encoding"
                ) {
                    response.headers_mut().insert(name.clone(), value.clone());
                }
            }
            response
        }
        Err(_) => unavailable(),
    }
}

async fn handle(State(state): State<Arc<ProxyState>>, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = to_bytes(body, 64 << 20).await else {
        return unavailable();
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".to_string());
    // Token requests (Azure AD) are not cloud calls; keep them out of the fault plan.
    let fault = if path.contains("/oauth2/") {
        None
    } else {
        choose(&state, is_mutating(&parts.method, &body))
    };
    if let Some(fault) = fault {
        *state
            .injected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(fault)
            .or_default() += 1;
    }
    match fault {
        None => forward(&state, parts.method, &path, &parts.headers, body).await,
        Some(Fault::Unavailable) => unavailable(),
        Some(Fault::Throttled) => throttled(state.dialect, &body),
        Some(Fault::LostResponse) => {
            let _ = forward(&state, parts.method, &path, &parts.headers, body).await;
            unavailable()
        }
    }
}

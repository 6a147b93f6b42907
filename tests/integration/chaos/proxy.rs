//! A fault-injecting HTTP proxy between the controller and a cloud (moto, or the GCE, ARM,
//! OpenStack, Tencent or Baidu mock). Each request is forwarded, or answered with an injected
//! fault chosen by a seeded RNG: a 503 without forwarding, the cloud's own throttling answer
//! without forwarding, or — the case that tests idempotency — forwarded so the call takes effect,
//! and then answered with a 503 as if the response had been lost on the way back.

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
    /// What a rate limiter in front of Keystone, Octavia and Neutron answers, with
    /// `Retry-After`: 429 with a JSON error, or the legacy `overLimit` 413.
    OpenStack,
    /// BCE's JSON error shape (`code`, `message`, `requestId`, as the official SDKs parse it)
    /// with `RequestLimitExceeded` and HTTP 429. Requests are signed over their `Host`
    /// (`bce-auth-v1`), so the proxy forwards the one the client signed.
    Baidu,
    /// Tencent Cloud API 3.0: the API answers errors, throttling included, with HTTP 200 and
    /// `Response.Error{Code, Message}`; what fails before the API (an unavailable or lost
    /// answer) is the gateway's HTML 503. Requests are signed over their `Host`
    /// (TC3-HMAC-SHA256) and name their action in `X-TC-Action`.
    Tencent,
}

impl Dialect {
    /// Whether the client's `Host` header must reach the cloud unchanged (it is signed).
    fn keeps_host(self) -> bool {
        matches!(self, Dialect::Baidu | Dialect::Tencent)
    }
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

/// True when the request may change cloud state: anything but GET/HEAD, except `Describe*`
/// actions, which are POSTs too (AWS Query names them in the body, Tencent in `X-TC-Action`).
fn is_mutating(method: &Method, headers: &HeaderMap, body: &[u8]) -> bool {
    if matches!(*method, Method::GET | Method::HEAD) {
        return false;
    }
    if let Some(action) = headers.get("x-tc-action").and_then(|v| v.to_str().ok()) {
        return !action.starts_with("Describe");
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

/// An injected 503 (unavailable, or a lost answer) as the cloud's front door words it.
fn injected_unavailable(dialect: Dialect) -> Response {
    match dialect {
        // Tencent's gateway (STGW): an HTML page, no `Response` envelope.
        Dialect::Tencent => {
            let mut response = Response::new(Body::from(
                "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n\
                 <body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n\
                 <hr><center>stgw</center>\r\n</body>\r\n</html>\r\n",
            ));
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            let headers = response.headers_mut();
            headers.insert("content-type", HeaderValue::from_static("text/html"));
            headers.insert("server", HeaderValue::from_static("stgw"));
            response
        }
        _ => unavailable(),
    }
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
        // Both forms a client meets: the legacy `overLimit` 413 for calls with a body,
        // a 429 for the others (DELETE).
        Dialect::OpenStack if !body.is_empty() => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "application/json",
            r#"{"overLimit":{"code":413,"message":"This request was rate-limited.","retryAfter":"1","details":"Only 10 POST request(s) can be made every minute."}}"#
                .to_string(),
        ),
        Dialect::OpenStack => (
            StatusCode::TOO_MANY_REQUESTS,
            "application/json",
            r#"{"error":{"code":429,"title":"Too Many Requests","message":"Rate limit exceeded."}}"#
                .to_string(),
        ),
        Dialect::Baidu => (
            StatusCode::TOO_MANY_REQUESTS,
            "application/json; charset=utf-8",
            r#"{"requestId":"chaos-throttled","code":"RequestLimitExceeded","message":"Request rate limit exceeded, please retry later."}"#
                .to_string(),
        ),
        Dialect::Tencent => (
            StatusCode::OK,
            "application/json",
            r#"{"Response":{"Error":{"Code":"RequestLimitExceeded","Message":"Your current request times equals to `21` in a second, which exceeds the frequency limit `20` for a second. Please reduce the frequency of calls."},"RequestId":"00000000-0000-4000-8000-0000c4a05000"}}"#
                .to_string(),
        ),
    };
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    if matches!(dialect, Dialect::Azure | Dialect::OpenStack) {
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
            "content-length" | "connection" | "transfer-encoding"
        ) || (name == "host" && !state.dialect.keeps_host())
        {
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
        choose(&state, is_mutating(&parts.method, &parts.headers, &body))
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
        Some(Fault::Unavailable) => injected_unavailable(state.dialect),
        Some(Fault::Throttled) => throttled(state.dialect, &body),
        Some(Fault::LostResponse) => {
            let _ = forward(&state, parts.method, &path, &parts.headers, body).await;
            injected_unavailable(state.dialect)
        }
    }
}

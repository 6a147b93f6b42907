//! kube-proxy compatible health servers (reference/dataplane.md §3.2–3.3):
//! - one server per externalTrafficPolicy Local Service on its `healthCheckNodePort`, answering
//!   any path with 200 when the node has local ready endpoints (and the proxy is healthy), 503
//!   otherwise, so cloud load balancers only send traffic to nodes that can serve it;
//! - the node's `/healthz` and `/livez`, failing when a queued rule update has been pending longer
//!   than the health timeout (rules are stale).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::model::{HealthCheckModel, ServiceKey};

/// Header carrying the local endpoint count (kube-proxy ≥ 1.28).
pub const WEIGHT_HEADER: &str = "X-Load-Balancing-Endpoint-Weight";

/// Whether the proxy's rules are fresh. Backends call [`ProxyHealth::queued_update`] when a change
/// arrives and [`ProxyHealth::updated`] after a successful sync.
#[derive(Debug)]
pub struct ProxyHealth {
    timeout: Duration,
    state: Mutex<HealthState>,
    rejected_endpoints: std::sync::atomic::AtomicU64,
    refused_udp_sessions: Arc<std::sync::atomic::AtomicU64>,
    syncs: std::sync::atomic::AtomicU64,
    sync_errors: std::sync::atomic::AtomicU64,
}

#[derive(Debug, Clone, Copy)]
struct HealthState {
    last_updated: SystemTime,
    /// The last successful sync; `None` before the first (`last_updated` then holds the start).
    last_success: Option<SystemTime>,
    pending_since: Option<Instant>,
    /// The last sync was refused; cleared by the next successful one.
    failed: bool,
    node_eligible: bool,
}

/// A point-in-time view of [`ProxyHealth`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthStatus {
    /// No update has been pending longer than the timeout.
    pub healthy: bool,
    /// The node is not being deleted (no deletionTimestamp, no ToBeDeletedByClusterAutoscaler taint).
    pub node_eligible: bool,
    /// Last successful sync.
    pub last_updated: SystemTime,
}

/// Pure rule: unhealthy once an update has waited at least `timeout`.
pub fn is_healthy(pending_since: Option<Instant>, now: Instant, timeout: Duration) -> bool {
    pending_since.is_none_or(|since| now.saturating_duration_since(since) < timeout)
}

impl ProxyHealth {
    /// Healthy at start; `timeout` is kube-proxy's 2 × syncPeriod.
    pub fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(ProxyHealth {
            timeout,
            state: Mutex::new(HealthState {
                last_updated: SystemTime::now(),
                last_success: None,
                pending_since: None,
                failed: false,
                node_eligible: true,
            }),
            rejected_endpoints: std::sync::atomic::AtomicU64::new(0),
            refused_udp_sessions: Arc::default(),
            syncs: std::sync::atomic::AtomicU64::new(0),
            sync_errors: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Counts endpoint addresses left out because no endpoint may have them (each distinct
    /// Service and address once).
    pub fn count_rejected_endpoints(&self, count: u64) {
        self.rejected_endpoints
            .fetch_add(count, std::sync::atomic::Ordering::Relaxed);
    }

    /// The counter the userspace backend increments for each UDP datagram dropped because its
    /// Service already holds `--udp-sessions-per-service` sessions
    /// (`UserspaceConfig::refused_udp_sessions`).
    pub fn refused_udp_sessions(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.refused_udp_sessions.clone()
    }

    /// The Prometheus text exposition of the proxy's counters and sync state. The alerts in
    /// `deploy/monitoring/` read these names.
    pub fn metrics_text(&self) -> String {
        let rejected = self
            .rejected_endpoints
            .load(std::sync::atomic::Ordering::Relaxed);
        let refused = self
            .refused_udp_sessions
            .load(std::sync::atomic::Ordering::Relaxed);
        let syncs = self.syncs.load(std::sync::atomic::Ordering::Relaxed);
        let sync_errors = self.sync_errors.load(std::sync::atomic::Ordering::Relaxed);
        let healthy = u8::from(self.status().healthy);
        let state = *self.state();
        let last_success = state
            .last_success
            .and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map_or(0.0, |since_epoch| since_epoch.as_secs_f64());
        let pending = state
            .pending_since
            .map_or(0.0, |since| since.elapsed().as_secs_f64());
        format!(
            "# HELP kube_lb_proxy_syncs_total Successful syncs of the node's rules with the \
             cluster's Services and endpoints.\n\
             # TYPE kube_lb_proxy_syncs_total counter\n\
             kube_lb_proxy_syncs_total {syncs}\n\
             # HELP kube_lb_proxy_sync_errors_total Syncs refused by the dataplane (the previous \
             rules stay in place and the sync is retried).\n\
             # TYPE kube_lb_proxy_sync_errors_total counter\n\
             kube_lb_proxy_sync_errors_total {sync_errors}\n\
             # HELP kube_lb_proxy_last_sync_success_timestamp_seconds Unix time of the last \
             successful sync; 0 before the first.\n\
             # TYPE kube_lb_proxy_last_sync_success_timestamp_seconds gauge\n\
             kube_lb_proxy_last_sync_success_timestamp_seconds {last_success}\n\
             # HELP kube_lb_proxy_sync_pending_seconds How long the oldest change not yet \
             programmed has waited; 0 when the rules are current.\n\
             # TYPE kube_lb_proxy_sync_pending_seconds gauge\n\
             kube_lb_proxy_sync_pending_seconds {pending}\n\
             # HELP kube_lb_proxy_healthy 1 while /healthz answers 200 (no sync refused, no change \
             pending longer than twice the sync period), 0 otherwise.\n\
             # TYPE kube_lb_proxy_healthy gauge\n\
             kube_lb_proxy_healthy {healthy}\n\
             # HELP kube_lb_proxy_rejected_endpoints_total Endpoint addresses never programmed \
             because no endpoint may have them (loopback, link-local, link-local multicast), \
             each Service and address counted once.\n\
             # TYPE kube_lb_proxy_rejected_endpoints_total counter\n\
             kube_lb_proxy_rejected_endpoints_total {rejected}\n\
             # HELP kube_lb_proxy_udp_sessions_refused_total UDP datagrams dropped (userspace \
             mode) because they would open a session beyond the Service's session cap.\n\
             # TYPE kube_lb_proxy_udp_sessions_refused_total counter\n\
             kube_lb_proxy_udp_sessions_refused_total {refused}\n"
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A change is waiting to be programmed.
    pub fn queued_update(&self) {
        let mut state = self.state();
        if state.pending_since.is_none() {
            state.pending_since = Some(Instant::now());
        }
    }

    /// A sync was refused (the previous rules stay): unhealthy until a sync succeeds, without
    /// waiting for the staleness timeout, so a node whose rules cannot follow its Services stops
    /// being sent traffic by load balancers that health-check it.
    pub fn sync_failed(&self) {
        self.sync_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.state().failed = true;
    }

    /// Rules were programmed successfully.
    pub fn updated(&self) {
        self.syncs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut state = self.state();
        let now = SystemTime::now();
        state.pending_since = None;
        state.failed = false;
        state.last_updated = now;
        state.last_success = Some(now);
    }

    /// Records whether the node is being deleted.
    pub fn set_node_eligible(&self, eligible: bool) {
        self.state().node_eligible = eligible;
    }

    /// Current status.
    pub fn status(&self) -> HealthStatus {
        let state = *self.state();
        HealthStatus {
            healthy: !state.failed && is_healthy(state.pending_since, Instant::now(), self.timeout),
            node_eligible: state.node_eligible,
            last_updated: state.last_updated,
        }
    }
}

fn json_response(status: StatusCode, body: String, weight: Option<usize>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(weight) = weight {
        headers.insert(WEIGHT_HEADER, HeaderValue::from(weight));
    }
    response
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServiceHealthBody<'a> {
    service: ServiceName<'a>,
    local_endpoints: usize,
    service_proxy_healthy: bool,
}

#[derive(Serialize)]
struct ServiceName<'a> {
    namespace: &'a str,
    name: &'a str,
}

/// Status and body of a health-check node port answer: tab-indented JSON, no trailing newline.
pub fn service_health(
    service: &ServiceKey,
    local_endpoints: usize,
    proxy_healthy: bool,
) -> (StatusCode, String) {
    let body = ServiceHealthBody {
        service: ServiceName {
            namespace: &service.namespace,
            name: &service.name,
        },
        local_endpoints,
        service_proxy_healthy: proxy_healthy,
    };
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(b"\t"),
    );
    // Serialising a struct of strings, integers and booleans into a Vec cannot fail.
    let _ = body.serialize(&mut serializer);
    let status = if local_endpoints > 0 && proxy_healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, String::from_utf8_lossy(&out).into_owned())
}

/// Status and body of the node's `/healthz` (`eligibility = true`) or `/livez`.
pub fn node_health(
    status: HealthStatus,
    now: SystemTime,
    eligibility: bool,
) -> (StatusCode, String) {
    let ok = status.healthy && (!eligibility || status.node_eligible);
    // Like kube-proxy, a healthy answer reports "now" as the last update.
    let last = if ok { now } else { status.last_updated };
    let last = humantime::format_rfc3339_nanos(last);
    let now = humantime::format_rfc3339_nanos(now);
    let body = if eligibility {
        format!(
            "{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now}\", \"nodeEligible\": {}}}",
            status.node_eligible
        )
    } else {
        format!("{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now}\"}}")
    };
    (
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        body,
    )
}

/// Serves `/healthz`, `/livez` and `/metrics` on `listener` until the task is dropped.
pub async fn serve_node_health(
    listener: TcpListener,
    health: Arc<ProxyHealth>,
) -> std::io::Result<()> {
    let healthz = health.clone();
    let metrics = health.clone();
    let router = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let health = metrics.clone();
                async move {
                    let mut response = Response::new(Body::from(health.metrics_text()));
                    response.headers_mut().insert(
                        axum::http::header::CONTENT_TYPE,
                        axum::http::HeaderValue::from_static("text/plain; version=0.0.4"),
                    );
                    response
                }
            }),
        )
        .route(
            "/healthz",
            axum::routing::get(move || {
                let health = healthz.clone();
                async move {
                    let (status, body) = node_health(health.status(), SystemTime::now(), true);
                    json_response(status, body, None)
                }
            }),
        )
        .route(
            "/livez",
            axum::routing::get(move || {
                let health = health.clone();
                async move {
                    let (status, body) = node_health(health.status(), SystemTime::now(), false);
                    json_response(status, body, None)
                }
            }),
        );
    axum::serve(listener, router).await
}

#[derive(Debug)]
struct ServiceServer {
    port: u16,
    local_endpoints: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ServiceServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The health-check node port servers of this node.
#[derive(Debug)]
pub struct ServiceHealthServers {
    health: Arc<ProxyHealth>,
    bind_ips: Vec<IpAddr>,
    servers: BTreeMap<ServiceKey, ServiceServer>,
}

impl ServiceHealthServers {
    /// Servers bind to `bind_ips` (the NodePort addresses), or all addresses when empty.
    pub fn new(health: Arc<ProxyHealth>, bind_ips: Vec<IpAddr>) -> Self {
        ServiceHealthServers {
            health,
            bind_ips,
            servers: BTreeMap::new(),
        }
    }

    /// Changes the addresses future servers bind to (existing servers are rebound).
    pub fn set_bind_ips(&mut self, bind_ips: Vec<IpAddr>) {
        if bind_ips != self.bind_ips {
            self.bind_ips = bind_ips;
            self.servers.clear();
        }
    }

    /// Ports currently served, per Service.
    pub fn ports(&self) -> BTreeMap<ServiceKey, u16> {
        self.servers
            .iter()
            .map(|(key, server)| (key.clone(), server.port))
            .collect()
    }

    /// Opens, updates and closes servers to match `checks`. Returns the Services whose port could
    /// not be bound (retried on the next call).
    pub async fn apply(
        &mut self,
        checks: &BTreeMap<ServiceKey, HealthCheckModel>,
    ) -> Vec<(ServiceKey, String)> {
        self.servers.retain(|key, server| {
            checks
                .get(key)
                .is_some_and(|check| check.node_port == server.port)
        });
        let mut failures = Vec::new();
        for (key, check) in checks {
            if let Some(server) = self.servers.get(key) {
                server
                    .local_endpoints
                    .store(check.local_ready_endpoints, Ordering::Relaxed);
                continue;
            }
            match self.start(key, check).await {
                Ok(server) => {
                    self.servers.insert(key.clone(), server);
                }
                Err(error) => {
                    tracing::warn!(service = %key, port = check.node_port, %error, "cannot start health check server");
                    failures.push((key.clone(), error.to_string()));
                }
            }
        }
        failures
    }

    async fn start(
        &self,
        key: &ServiceKey,
        check: &HealthCheckModel,
    ) -> std::io::Result<ServiceServer> {
        let local_endpoints = Arc::new(AtomicUsize::new(check.local_ready_endpoints));
        let addresses: Vec<SocketAddr> = if self.bind_ips.is_empty() {
            vec![SocketAddr::from(([0, 0, 0, 0], check.node_port))]
        } else {
            self.bind_ips
                .iter()
                .map(|ip| SocketAddr::new(*ip, check.node_port))
                .collect()
        };
        let mut tasks = Vec::new();
        for address in addresses {
            let listener = TcpListener::bind(address).await?;
            let (service, count, health) =
                (key.clone(), local_endpoints.clone(), self.health.clone());
            // Any path and any method is answered.
            let router = axum::Router::new().fallback(move || {
                let (service, count, health) = (service.clone(), count.clone(), health.clone());
                async move {
                    let local = count.load(Ordering::Relaxed);
                    let (status, body) = service_health(&service, local, health.status().healthy);
                    json_response(status, body, Some(local))
                }
            });
            tasks.push(tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, router).await {
                    tracing::warn!(%error, "health check server stopped");
                }
            }));
        }
        Ok(ServiceServer {
            port: check.node_port,
            local_endpoints,
            tasks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_answers_follow_kube_proxy() {
        let key = ServiceKey::new("default", "web");
        let cases = [
            (2, true, StatusCode::OK),
            (0, true, StatusCode::SERVICE_UNAVAILABLE),
            (2, false, StatusCode::SERVICE_UNAVAILABLE),
        ];
        for (local, healthy, expected) in cases {
            let (status, body) = service_health(&key, local, healthy);
            assert_eq!(status, expected, "local={local} healthy={healthy}");
            let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(
                parsed,
                serde_json::json!({"service": {"namespace": "default", "name": "web"}, "localEndpoints": local, "serviceProxyHealthy": healthy})
            );
        }
        let (_, body) = service_health(&key, 1, true);
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 1,\n\t\"serviceProxyHealthy\": true\n}"
        );
    }

    #[test]
    fn staleness_rule() {
        let now = Instant::now();
        let timeout = Duration::from_secs(60);
        assert!(is_healthy(None, now, timeout));
        assert!(is_healthy(
            Some(now),
            now + Duration::from_secs(59),
            timeout
        ));
        assert!(!is_healthy(
            Some(now),
            now + Duration::from_secs(60),
            timeout
        ));
    }

    #[test]
    fn node_endpoints_differ_in_eligibility() {
        let now = SystemTime::now();
        let status = |healthy, node_eligible| HealthStatus {
            healthy,
            node_eligible,
            last_updated: now,
        };
        assert_eq!(node_health(status(true, true), now, true).0, StatusCode::OK);
        assert_eq!(
            node_health(status(true, false), now, true).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            node_health(status(true, false), now, false).0,
            StatusCode::OK
        );
        assert_eq!(
            node_health(status(false, true), now, false).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let (_, body) = node_health(status(true, true), now, true);
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(parsed.get("lastUpdated").is_some() && parsed["nodeEligible"] == true);
        let (_, body) = node_health(status(true, true), now, false);
        assert!(
            serde_json::from_str::<serde_json::Value>(&body)
                .unwrap()
                .get("nodeEligible")
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn pending_updates_make_the_proxy_stale() {
        let health = ProxyHealth::new(Duration::from_secs(60));
        health.queued_update();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert!(health.status().healthy);
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(!health.status().healthy);
        health.updated();
        assert!(health.status().healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_sync_is_unhealthy_until_a_sync_succeeds() {
        let health = ProxyHealth::new(Duration::from_secs(60));
        health.queued_update();
        health.sync_failed();
        assert!(!health.status().healthy, "at once, not after the timeout");
        tokio::time::advance(Duration::from_secs(600)).await;
        assert!(!health.status().healthy);
        health.updated();
        assert!(health.status().healthy);
    }

    /// The value of the unlabelled sample `name` in `text`.
    fn sample(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    }

    /// What the shipped alerts read: a refused sync counts an error and turns `healthy` to 0 at
    /// once; pending time grows while a change waits; a success sets the timestamp and clears
    /// both.
    #[tokio::test(start_paused = true)]
    async fn sync_metrics_follow_the_sync_loop() {
        let health = ProxyHealth::new(Duration::from_secs(60));
        let text = health.metrics_text();
        for (name, want) in [
            ("kube_lb_proxy_syncs_total", 0.0),
            ("kube_lb_proxy_sync_errors_total", 0.0),
            ("kube_lb_proxy_last_sync_success_timestamp_seconds", 0.0),
            ("kube_lb_proxy_sync_pending_seconds", 0.0),
            ("kube_lb_proxy_healthy", 1.0),
        ] {
            assert_eq!(sample(&text, name), want, "{name} at start");
        }
        health.queued_update();
        tokio::time::advance(Duration::from_secs(5)).await;
        health.sync_failed();
        let text = health.metrics_text();
        assert_eq!(sample(&text, "kube_lb_proxy_sync_errors_total"), 1.0);
        assert_eq!(sample(&text, "kube_lb_proxy_healthy"), 0.0);
        assert_eq!(sample(&text, "kube_lb_proxy_sync_pending_seconds"), 5.0);

        health.updated();
        let text = health.metrics_text();
        assert_eq!(sample(&text, "kube_lb_proxy_syncs_total"), 1.0);
        assert_eq!(sample(&text, "kube_lb_proxy_sync_errors_total"), 1.0);
        assert_eq!(sample(&text, "kube_lb_proxy_healthy"), 1.0);
        assert_eq!(sample(&text, "kube_lb_proxy_sync_pending_seconds"), 0.0);
        let unix_now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let last = sample(&text, "kube_lb_proxy_last_sync_success_timestamp_seconds");
        assert!((unix_now - last).abs() < 60.0, "{last} vs {unix_now}");
    }
}

//! kube-proxy compatible health servers (reference/dataplane.md §3.2–3.3):
//! - one server per externalTrafficPolicy Local Service on its `healthCheckNodePort`, answering
//!   any path with 200 when the node has local ready endpoints (and the proxy is healthy), 503
//!   otherwise, so cloud load balancers only send traffic to nodes that can serve it;
//! - the node's `/healthz` and `/livez`, failing when a queued rule update has been pending longer
//!   than the health timeout (rules are stale), when a sync was refused, and while the kernel's
//!   rules were found to differ from what the proxy wrote, until a repair is confirmed and one
//!   verification period more (issue 37). A failing answer's body says why (`reason`).

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

use crate::metrics::{HealthPath, ProxyMetrics};
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
    /// Repairs of the kernel's rules by reason label (`kube_lb_dataplane_repairs_total`).
    repairs: Mutex<BTreeMap<&'static str, u64>>,
    /// Restores the kernel refused.
    repair_failures: std::sync::atomic::AtomicU64,
    /// kube-proxy's metric families, fed by the proxy loop and the health server.
    metrics: ProxyMetrics,
}

/// The kernel's rules were found to differ from what the proxy wrote.
#[derive(Debug, Clone)]
struct Repair {
    /// What was found, in words.
    found: String,
    /// When health may return: one verification period after the restore was confirmed;
    /// `None` while it is not.
    healthy_at: Option<Instant>,
    /// The last restore was refused by the kernel, and why.
    refused: Option<String>,
}

#[derive(Debug, Clone)]
struct HealthState {
    last_updated: SystemTime,
    /// The last successful sync; `None` before the first (`last_updated` then holds the start).
    last_success: Option<SystemTime>,
    pending_since: Option<Instant>,
    /// The last sync was refused; cleared by the next successful one.
    failed: bool,
    node_eligible: bool,
    /// The rules differ, or did until less than a verification period ago.
    repair: Option<Repair>,
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
                repair: None,
            }),
            rejected_endpoints: std::sync::atomic::AtomicU64::new(0),
            refused_udp_sessions: Arc::default(),
            syncs: std::sync::atomic::AtomicU64::new(0),
            sync_errors: std::sync::atomic::AtomicU64::new(0),
            repairs: Mutex::new(BTreeMap::new()),
            repair_failures: std::sync::atomic::AtomicU64::new(0),
            metrics: ProxyMetrics::new(),
        })
    }

    /// The kube-proxy-named metrics (`kubeproxy_*`, `process_*`).
    pub fn metrics(&self) -> &ProxyMetrics {
        &self.metrics
    }

    /// The kernel's rules were seen to differ from what the proxy last wrote (`found` says
    /// how): unhealthy at once, until [`ProxyHealth::repair_confirmed`] and its hold passed.
    pub fn rules_differ(&self, found: String) {
        self.state().repair = Some(Repair {
            found,
            healthy_at: None,
            refused: None,
        });
    }

    /// A restore of the rules was committed; `reason` is the label it is counted under.
    pub fn repaired(&self, reason: &'static str) {
        *self
            .repairs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(reason)
            .or_default() += 1;
    }

    /// The kernel refused the restored rules (`error`, of which the first lines are kept):
    /// health keeps failing and says so.
    pub fn repair_refused(&self, error: String) {
        let error = first_lines(&error, 3);
        self.repair_failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(repair) = &mut self.state().repair {
            repair.refused = Some(error);
            repair.healthy_at = None;
        }
    }

    /// A check found the rules as written again: health returns after `hold` (one
    /// verification period, so that a prober polling every few hundred milliseconds sees the
    /// failure however fast the repair was).
    pub fn repair_confirmed(&self, hold: Duration) {
        if let Some(repair) = &mut self.state().repair
            && repair.healthy_at.is_none()
        {
            repair.healthy_at = Some(Instant::now() + hold);
            repair.refused = None;
        }
    }

    /// True while a difference was found and its repair is not yet confirmed.
    pub fn repair_pending(&self) -> bool {
        self.state()
            .repair
            .as_ref()
            .is_some_and(|repair| repair.healthy_at.is_none())
    }

    /// Why `/healthz` fails right now, in words; `None` when it does not.
    pub fn unhealthy_reason(&self) -> Option<String> {
        let state = self.state().clone();
        let now = Instant::now();
        if let Some(repair) = state.repair.as_ref().filter(|r| repairing(r, now)) {
            return Some(match (&repair.refused, repair.healthy_at) {
                (Some(error), _) => format!(
                    "nftables rules differ from what the proxy wrote ({}); the kernel refused the restore: {error}",
                    repair.found
                ),
                (None, None) => format!(
                    "nftables rules differ from what the proxy wrote ({}); restoring",
                    repair.found
                ),
                (None, Some(at)) => format!(
                    "nftables rules differed from what the proxy wrote ({}); restored, healthy again in {:.1}s if they stay so",
                    repair.found,
                    at.saturating_duration_since(now).as_secs_f64()
                ),
            });
        }
        if state.failed {
            return Some("the last sync of the rules was refused; retrying".into());
        }
        if !is_healthy(state.pending_since, now, self.timeout) {
            return Some(format!(
                "a change has waited more than {}s to be programmed",
                self.timeout.as_secs()
            ));
        }
        if !state.node_eligible {
            return Some("the node is being deleted".into());
        }
        None
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
    /// `deploy/components/monitoring/` read these names.
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
        let state = self.state().clone();
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
             kube_lb_proxy_udp_sessions_refused_total {refused}\n{}{}",
            self.repair_metrics(),
            self.metrics.text()
        )
    }

    /// `kube_lb_dataplane_repairs_total{reason}` and the refused restores.
    fn repair_metrics(&self) -> String {
        let mut out = String::from(
            "# HELP kube_lb_dataplane_repairs_total Restores of the node's rules after they were \
             found to differ from what the proxy wrote (deleted table or chain, flushed chain, \
             missing or foreign elements), by what was found.\n\
             # TYPE kube_lb_dataplane_repairs_total counter\n",
        );
        let repairs = self
            .repairs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (reason, count) in repairs {
            out.push_str(&format!(
                "kube_lb_dataplane_repairs_total{{reason=\"{reason}\"}} {count}\n"
            ));
        }
        let failures = self
            .repair_failures
            .load(std::sync::atomic::Ordering::Relaxed);
        out.push_str(&format!(
            "# HELP kube_lb_dataplane_repair_failures_total Restores of the node's rules the \
             kernel refused (/healthz keeps failing).\n\
             # TYPE kube_lb_dataplane_repair_failures_total counter\n\
             kube_lb_dataplane_repair_failures_total {failures}\n"
        ));
        out
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HealthState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A change is waiting to be programmed.
    pub fn queued_update(&self) {
        self.metrics.queued(SystemTime::now());
        let mut state = self.state();
        if state.pending_since.is_none() {
            state.pending_since = Some(Instant::now());
        }
    }

    /// A sync was refused (the previous rules stay): unhealthy until a sync succeeds, without
    /// waiting for the staleness timeout, so a node whose rules cannot follow its Services stops
    /// being sent traffic by load balancers that health-check it.
    pub fn sync_failed(&self) {
        self.metrics.sync_failed();
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
        let mut state = self.state();
        let now = Instant::now();
        if state.repair.as_ref().is_some_and(|r| !repairing(r, now)) {
            state.repair = None;
        }
        HealthStatus {
            healthy: !state.failed
                && state.repair.is_none()
                && is_healthy(state.pending_since, now, self.timeout),
            node_eligible: state.node_eligible,
            last_updated: state.last_updated,
        }
    }
}

/// The first `count` lines of `text` (nft repeats every refused line of a transaction), and how
/// many more there were.
pub fn first_lines(text: &str, count: usize) -> String {
    let total = text.lines().count();
    let mut kept = text.lines().take(count).collect::<Vec<_>>().join("\n");
    if total > count {
        kept.push_str(&format!("\n… ({} more lines)", total - count));
    }
    kept
}

/// True while `repair` keeps health failing at `now`.
fn repairing(repair: &Repair, now: Instant) -> bool {
    repair.healthy_at.is_none_or(|at| now < at)
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

/// Status and body of the node's `/healthz` (`eligibility = true`) or `/livez`. A failing
/// answer carries `reason` (why, in words) after kube-proxy's fields.
pub fn node_health(
    status: HealthStatus,
    now: SystemTime,
    eligibility: bool,
    reason: Option<&str>,
) -> (StatusCode, String) {
    let ok = status.healthy && (!eligibility || status.node_eligible);
    // Like kube-proxy, a healthy answer reports "now" as the last update.
    let last = if ok { now } else { status.last_updated };
    let last = humantime::format_rfc3339_nanos(last);
    let now = humantime::format_rfc3339_nanos(now);
    let mut body = if eligibility {
        format!(
            "{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now}\", \"nodeEligible\": {}",
            status.node_eligible
        )
    } else {
        format!("{{\"lastUpdated\": \"{last}\",\"currentTime\": \"{now}\"")
    };
    if let Some(reason) = reason.filter(|_| !ok) {
        // A JSON string of any text cannot fail to serialise.
        let reason = serde_json::to_string(reason).unwrap_or_default();
        body.push_str(&format!(", \"reason\": {reason}"));
    }
    body.push('}');
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
                    let reason = health.unhealthy_reason();
                    let (status, body) =
                        node_health(health.status(), SystemTime::now(), true, reason.as_deref());
                    health
                        .metrics()
                        .health_answered(HealthPath::Healthz, status.as_u16());
                    json_response(status, body, None)
                }
            }),
        )
        .route(
            "/livez",
            axum::routing::get(move || {
                let health = health.clone();
                async move {
                    let reason = health.unhealthy_reason();
                    let (status, body) =
                        node_health(health.status(), SystemTime::now(), false, reason.as_deref());
                    health
                        .metrics()
                        .health_answered(HealthPath::Livez, status.as_u16());
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
        assert_eq!(
            node_health(status(true, true), now, true, None).0,
            StatusCode::OK
        );
        assert_eq!(
            node_health(status(true, false), now, true, None).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            node_health(status(true, false), now, false, None).0,
            StatusCode::OK
        );
        assert_eq!(
            node_health(status(false, true), now, false, None).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let (_, body) = node_health(status(true, true), now, true, None);
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(parsed.get("lastUpdated").is_some() && parsed["nodeEligible"] == true);
        let (_, body) = node_health(status(true, true), now, false, None);
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

    /// Issue 37: failing from the moment a difference is seen, through a refused restore, until
    /// one hold period after the confirmed restore; counted by reason.
    #[tokio::test(start_paused = true)]
    async fn a_repair_fails_health_until_one_period_after_it_is_confirmed() {
        let health = ProxyHealth::new(Duration::from_secs(60));
        assert_eq!(health.unhealthy_reason(), None);
        health.rules_differ("ip table_missing: table ip kube-lb".into());
        assert!(!health.status().healthy);
        let reason = health.unhealthy_reason().expect("a reason");
        assert!(
            reason.contains("table ip kube-lb") && reason.contains("restoring"),
            "{reason}"
        );
        health.repair_refused("Operation not permitted\nline 2\nline 3\nline 4".into());
        let reason = health.unhealthy_reason().expect("a reason");
        assert!(
            reason.contains("refused the restore: Operation not permitted"),
            "{reason}"
        );
        assert!(
            reason.contains("(1 more lines)") && !reason.contains("line 4"),
            "{reason}"
        );
        health.updated();
        assert!(
            !health.status().healthy,
            "a sync alone does not confirm the repair"
        );
        health.repaired("table_missing");
        health.repair_confirmed(Duration::from_secs(30));
        assert!(!health.repair_pending());
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(!health.status().healthy, "held for the period");
        assert!(
            health
                .unhealthy_reason()
                .expect("a reason")
                .contains("restored")
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(health.status().healthy);
        assert_eq!(health.unhealthy_reason(), None);
        let text = health.metrics_text();
        assert!(
            text.contains("kube_lb_dataplane_repairs_total{reason=\"table_missing\"} 1\n"),
            "{text}"
        );
        assert_eq!(
            sample(&text, "kube_lb_dataplane_repair_failures_total"),
            1.0
        );
        let (status, body) = node_health(health.status(), SystemTime::now(), true, Some("why"));
        assert_eq!(status, StatusCode::OK);
        assert!(
            !body.contains("reason"),
            "only a failing answer says why: {body}"
        );
        let failing = HealthStatus {
            healthy: false,
            ..health.status()
        };
        let (_, body) = node_health(failing, SystemTime::now(), true, Some("rules \"gone\""));
        let parsed: serde_json::Value = serde_json::from_str(&body).expect("JSON body");
        assert_eq!(parsed["reason"], "rules \"gone\"");
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

//! Prometheus metrics of the controller: reconciles, their duration, errors by class, cloud
//! calls by provider and operation, throttled cloud calls, the number of load balancers managed,
//! whether each Service's load balancer is ready, whether this replica leads, and the addresses
//! assigned and available in each of the `local` provider's pools.
//!
//! The alerts and the dashboard shipped in `deploy/components/monitoring/` are built on these
//! names; a test (`tests/integration/monitoring.rs`) keeps them in step.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use kube_lb_provider_core::calls::ThrottledCall;
use kube_lb_provider_core::{CallCounter, CallRecord};
use kube_lb_provider_local::LocalProvider;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::controller::ErrorClass;

mod upstream;

pub use upstream::EnsureCause;
use upstream::UpstreamMetrics;

/// Labels of `reconciles_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Labels of `reconcile_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    class: &'static str,
    kind: &'static str,
}

/// Labels of `watch_decode_errors_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

/// Labels of `cloud_calls_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    provider: &'static str,
    operation: &'static str,
    kind: &'static str,
}

/// Labels of `cloud_throttled_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ThrottleLabels {
    provider: &'static str,
    operation: &'static str,
}

/// Labels of `service_load_balancer_ready`. Not `namespace` and `service`: Prometheus'
/// Kubernetes scrape configs attach those as target labels (the controller pod's namespace,
/// the prometheus-operator Service), which would rename ours to `exported_*`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServiceLabels {
    service_namespace: String,
    service_name: String,
}

/// Labels of `ip_pool_addresses_assigned` and `ip_pool_addresses_available` (and of the
/// upstream-named pool families).
use upstream::PoolLabels;

/// The controller's metrics: kube-lb's own under the `kube_lb` prefix, and upstream's service
/// controller and pool families under their names ([`upstream`]).
#[derive(Debug)]
pub struct Metrics {
    /// The root registry: the upstream families, and kube-lb's in a `kube_lb` sub-registry.
    registry: Registry,
    upstream: UpstreamMetrics,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_duration: Histogram,
    errors: Family<ErrorLabels, Counter>,
    cloud_calls: Family<CallLabels, Counter>,
    cloud_throttled: Family<ThrottleLabels, Counter>,
    load_balancers: Gauge,
    decode_errors: Family<ResourceLabels, Counter>,
    service_ready: Family<ServiceLabels, Gauge>,
    leader: Gauge,
    /// Where [`Metrics::encode`] reads leadership from; `None` until
    /// [`Metrics::track_leadership`] (then the gauge reads 0).
    leading: Mutex<Option<watch::Receiver<bool>>>,
    /// The periodic audit's results (`--audit-interval`).
    audit: AuditMetrics,
    pool_assigned: Family<PoolLabels, Gauge>,
    pool_available: Family<PoolLabels, Gauge>,
    /// Where [`Metrics::encode`] reads the pools' counts from; `None` unless the `local`
    /// provider runs ([`Metrics::track_pools`]), and then both families stay empty.
    pools: Mutex<Option<Arc<LocalProvider>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics on their own registry.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let upstream = UpstreamMetrics::register(&mut root);
        // process_cpu_seconds_total, process_resident_memory_bytes, … as every client library.
        root.register_collector(Box::new(
            kube_lb_dataplane::metrics::process::ProcessCollector,
        ));
        let registry = root.sub_registry_with_prefix("kube_lb");
        let reconciles = Family::<ResultLabels, Counter>::default();
        // 1 ms .. ~16 s: local reconciles take microseconds, cloud ones seconds.
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let errors = Family::<ErrorLabels, Counter>::default();
        let cloud_calls = Family::<CallLabels, Counter>::default();
        let cloud_throttled = Family::<ThrottleLabels, Counter>::default();
        let load_balancers = Gauge::default();
        let decode_errors = Family::<ResourceLabels, Counter>::default();
        let service_ready = Family::<ServiceLabels, Gauge>::default();
        let leader = Gauge::default();
        registry.register(
            "reconciles",
            "Service reconciles by result",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent reconciling one Service",
            reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconcile errors by class (retryable, environment, user) and kind",
            errors.clone(),
        );
        registry.register(
            "cloud_calls",
            "Cloud API calls by provider, operation and kind (read, mutate)",
            cloud_calls.clone(),
        );
        registry.register(
            "cloud_throttled",
            "Cloud API call attempts refused for the request rate (throttling, HTTP 429), by \
             provider and operation; each is also counted in cloud_calls_total",
            cloud_throttled.clone(),
        );
        registry.register(
            "load_balancers_managed",
            "Load balancers with an address in their Service status",
            load_balancers.clone(),
        );
        registry.register(
            "watch_decode_errors",
            "Watched objects skipped because they do not decode, by resource",
            decode_errors.clone(),
        );
        registry.register(
            "service_load_balancer_ready",
            "1 when the Service's load balancer is provisioned and its address is in the Service \
             status, 0 while it fails or waits; one series per LoadBalancer Service this \
             controller handles, exported by the leader only",
            service_ready.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica may act (holds the leader-election Lease, or runs without \
             leader election), 0 while it stands by",
            leader.clone(),
        );
        let audit = AuditMetrics::register(registry);
        let pool_assigned = Family::<PoolLabels, Gauge>::default();
        let pool_available = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "ip_pool_addresses_assigned",
            "Addresses of the local provider's pool held by Services, by pool and family \
             (ipv4, ipv6); what the IPPool's status shows as assigned",
            pool_assigned.clone(),
        );
        registry.register(
            "ip_pool_addresses_available",
            "Addresses of the local provider's pool that can still be handed out, by pool and \
             family (ipv4, ipv6; capped at 2^63-1); 0 with some assigned means exhausted",
            pool_available.clone(),
        );
        Self {
            audit,
            pool_assigned,
            pool_available,
            pools: Mutex::new(None),
            registry: root,
            upstream,
            reconciles,
            reconcile_duration,
            errors,
            cloud_calls,
            cloud_throttled,
            load_balancers,
            decode_errors,
            service_ready,
            leader,
            leading: Mutex::new(None),
        }
    }

    /// Feeds `cloud_calls_total` from the call counter handed to the provider
    /// ([`crate::cloud::build`] gives it to every provider, which count each attempt through
    /// `CloudApi`), labelled by provider, operation (`elb:CreateLoadBalancer`,
    /// `forwardingRules.insert`, `PutLoadBalancer`, `allocate`) and kind.
    pub fn observe_calls(self: &Arc<Self>, counter: &CallCounter) {
        let family = self.cloud_calls.clone();
        counter.observe(Arc::new(move |record: &CallRecord| {
            family
                .get_or_create(&CallLabels {
                    provider: record.provider,
                    operation: record.operation,
                    kind: record.kind.as_str(),
                })
                .inc();
        }));
        let throttled = self.cloud_throttled.clone();
        counter.observe_throttled(Arc::new(move |call: &ThrottledCall| {
            throttled
                .get_or_create(&ThrottleLabels {
                    provider: call.provider,
                    operation: call.operation,
                })
                .inc();
        }));
    }

    /// Reads `kube_lb_leader` from `leading` (the controller's leadership channel) at every
    /// scrape, so the gauge can never lag the fence that stops reconciles.
    pub fn track_leadership(&self, leading: watch::Receiver<bool>) {
        *self.leading.lock().unwrap_or_else(PoisonError::into_inner) = Some(leading);
    }

    /// Reads `kube_lb_ip_pool_addresses_*` from the `local` provider's allocator at every
    /// scrape, so they show what an `IPPool`'s status would show now.
    pub fn track_pools(&self, local: Arc<LocalProvider>) {
        *self.pools.lock().unwrap_or_else(PoisonError::into_inner) = Some(local);
    }

    /// Sets the pool gauges from the tracked provider; a pool that is gone loses its series.
    fn refresh_pools(&self) {
        let Some(local) = self
            .pools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        self.pool_assigned.clear();
        self.pool_available.clear();
        self.upstream.pool_total.clear();
        self.upstream.pool_in_use.clear();
        let capped = |count: u128| i64::try_from(count).unwrap_or(i64::MAX);
        for (pool, status) in local.pool_usage() {
            for (family, count) in [("ipv4", &status.ipv4), ("ipv6", &status.ipv6)] {
                let labels = PoolLabels {
                    pool: pool.clone(),
                    family,
                };
                self.pool_assigned
                    .get_or_create(&labels)
                    .set(capped(count.assigned));
                self.pool_available
                    .get_or_create(&labels)
                    .set(capped(count.available));
                self.upstream
                    .pool_in_use
                    .get_or_create(&labels)
                    .set(capped(count.assigned));
                self.upstream
                    .pool_total
                    .get_or_create(&labels)
                    .set(capped(count.assigned.saturating_add(count.available)));
            }
        }
    }

    /// Whether this replica leads, as last published on the tracked channel.
    fn is_leading(&self) -> bool {
        self.leading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|leading| *leading.borrow())
    }

    /// Records whether the load balancer of `namespace/service` is ready (`Some(true)`), failing
    /// or waiting (`Some(false)`), or no longer this controller's concern (`None`: the series
    /// is removed, so a deleted Service does not stay "not ready" forever).
    pub fn set_service_ready(&self, namespace: &str, service: &str, ready: Option<bool>) {
        let labels = ServiceLabels {
            service_namespace: namespace.to_string(),
            service_name: service.to_string(),
        };
        match ready {
            Some(ready) => {
                self.service_ready
                    .get_or_create(&labels)
                    .set(i64::from(ready));
            }
            None => {
                self.service_ready.remove(&labels);
            }
        }
    }

    /// Starts timing a reconcile; the duration is recorded when the guard drops.
    pub fn reconcile_timer(&self) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
            result: "error",
        }
    }

    /// Records one provider ensure made for `cause`, which took `took` (upstream's service
    /// controller families).
    pub fn ensured(&self, cause: EnsureCause, took: std::time::Duration, succeeded: bool) {
        self.upstream.ensured(cause, took, succeeded);
    }

    /// A change of the node set queued these Services (`namespace/name`) for a re-sync: a node
    /// sync pass is open until each was reconciled.
    pub fn node_sync_started(&self, services: std::collections::BTreeSet<String>) {
        self.upstream.node_sync_started(services);
    }

    /// `service` (`namespace/name`) was reconciled, whatever the outcome.
    pub fn reconciled(&self, service: &str) {
        self.upstream.reconciled(service);
    }

    /// Counts an error of `class` and `kind`.
    pub fn error(&self, class: ErrorClass, kind: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels {
                class: class.as_str(),
                kind,
            })
            .inc();
    }

    /// Counts one watched object of `resource` skipped because it does not decode.
    pub fn watch_decode_error(&self, resource: &'static str) {
        self.decode_errors
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    /// Sets the number of load balancers with an address.
    pub fn set_load_balancers(&self, count: usize) {
        self.load_balancers
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Records a successful audit of `provider`: the leaked resources per kind (kinds seen
    /// before and absent now drop to 0) and the time of success.
    pub fn set_audit_result(
        &self,
        provider: &'static str,
        leaked_by_kind: &std::collections::BTreeMap<String, usize>,
    ) {
        self.audit.set(provider, leaked_by_kind);
    }

    /// Counts one leaked resource of `kind` that the periodic audit removed (`--audit-delete`).
    pub fn count_audit_deletion(&self, provider: &'static str, kind: &str) {
        self.audit
            .deleted
            .get_or_create(&AuditLabels {
                provider,
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// The text exposition format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let leading = self.is_leading();
        self.leader.set(i64::from(leading));
        if !leading {
            // A replica standing by remembers the outcomes of its last term, which go stale
            // once another replica acts; only the leader's view may raise "not ready" alerts.
            self.service_ready.clear();
        }
        self.refresh_pools();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// Labels of `audit_leaked_resources`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct AuditLabels {
    provider: &'static str,
    kind: String,
}

/// `audit_leaked_resources{provider,kind}` and `audit_last_success_timestamp_seconds`.
#[derive(Debug)]
struct AuditMetrics {
    leaked: Family<AuditLabels, Gauge>,
    deleted: Family<AuditLabels, Counter>,
    last_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Every label set ever set, so a kind no longer leaked reads 0 instead of vanishing.
    seen: Mutex<std::collections::BTreeSet<AuditLabels>>,
}

impl AuditMetrics {
    fn register(registry: &mut Registry) -> Self {
        let leaked = Family::<AuditLabels, Gauge>::default();
        let last_success = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "audit_leaked_resources",
            "Cloud resources owned by this cluster whose Service is gone, no longer a \
             LoadBalancer or of another class, by provider and kind, as the last successful \
             periodic audit found them (controller --audit-interval)",
            leaked.clone(),
        );
        let deleted = Family::<AuditLabels, Counter>::default();
        registry.register(
            "audit_deleted_resources",
            "Leaked cloud resources the periodic audit removed because their Service is gone \
             (controller --audit-delete), by provider and kind",
            deleted.clone(),
        );
        registry.register(
            "audit_last_success_timestamp_seconds",
            "Unix time of the last successful periodic audit",
            last_success.clone(),
        );
        Self {
            leaked,
            deleted,
            last_success,
            seen: Mutex::new(std::collections::BTreeSet::new()),
        }
    }

    fn set(
        &self,
        provider: &'static str,
        leaked_by_kind: &std::collections::BTreeMap<String, usize>,
    ) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        for labels in seen.iter().filter(|l| l.provider == provider) {
            if !leaked_by_kind.contains_key(&labels.kind) {
                self.leaked.get_or_create(labels).set(0);
            }
        }
        for (kind, count) in leaked_by_kind {
            let labels = AuditLabels {
                provider,
                kind: kind.clone(),
            };
            self.leaked
                .get_or_create(&labels)
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
            seen.insert(labels);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.last_success.set(now.as_secs_f64());
    }
}

/// Records one reconcile's duration and result when dropped, so early returns are measured too.
#[derive(Debug)]
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    start: Instant,
    result: &'static str,
}

impl ReconcileTimer<'_> {
    /// Marks the reconcile as successful.
    pub fn success(&mut self) {
        self.result = "success";
    }
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .observe(self.start.elapsed().as_secs_f64());
        self.metrics
            .reconciles
            .get_or_create(&ResultLabels {
                result: self.result,
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use kube_lb_provider_core::CallKind;

    use super::*;

    #[test]
    fn exposes_every_family() {
        let metrics = Arc::new(Metrics::new());
        let counter = CallCounter::new();
        metrics.observe_calls(&counter);
        counter.record("local", "allocate", CallKind::Mutate);
        metrics.error(ErrorClass::User, "invalid_service");
        metrics.set_load_balancers(3);
        metrics.reconcile_timer().success();
        drop(metrics.reconcile_timer());
        let text = metrics.encode().unwrap();
        for want in [
            r#"kube_lb_cloud_calls_total{provider="local",operation="allocate",kind="mutate"} 1"#,
            r#"kube_lb_reconcile_errors_total{class="user",kind="invalid_service"} 1"#,
            r#"kube_lb_reconciles_total{result="success"} 1"#,
            r#"kube_lb_reconciles_total{result="error"} 1"#,
            "kube_lb_load_balancers_managed 3",
            "kube_lb_reconcile_duration_seconds_count 2",
            // Never tracked: a controller that has not started leads nothing.
            "kube_lb_leader 0",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }

    #[test]
    fn throttled_calls_are_counted_per_provider_and_operation() {
        let metrics = Arc::new(Metrics::new());
        let counter = CallCounter::new();
        metrics.observe_calls(&counter);
        counter.record("gcp", "forwardingRules.get", CallKind::Read);
        counter.record_throttled("gcp", "forwardingRules.get");
        let text = metrics.encode().unwrap();
        assert!(
            text.contains(
                r#"kube_lb_cloud_throttled_total{provider="gcp",operation="forwardingRules.get"} 1"#
            ),
            "{text}"
        );
    }

    /// The pool gauges follow the tracked provider's pools at each scrape: declared (with no
    /// series) when no `local` provider runs, one series per pool and family once pools exist,
    /// gone with the pool.
    #[test]
    fn pool_gauges_follow_the_local_providers_pools() {
        let metrics = Metrics::new();
        let text = metrics.encode().unwrap();
        for family in ["assigned", "available"] {
            assert!(
                text.contains(&format!("# TYPE kube_lb_ip_pool_addresses_{family} gauge")),
                "{text}"
            );
        }
        assert!(!text.contains("pool=\""), "{text}");

        let local = Arc::new(LocalProvider::new(
            kube_lb_provider_local::Pool::new(vec!["127.0.0.1-127.0.0.1".parse().unwrap()])
                .unwrap(),
            CallCounter::new(),
        ));
        metrics.track_pools(local.clone());
        let spec = serde_json::json!({"addresses": ["10.0.0.1-10.0.0.4", "fd00::1-fd00::2"]});
        local.set_pools(vec![kube_lb_provider_local::PoolDef::from_json(
            "lan", &spec,
        )]);
        let text = metrics.encode().unwrap();
        for line in [
            r#"kube_lb_ip_pool_addresses_assigned{pool="lan",family="ipv4"} 0"#,
            r#"kube_lb_ip_pool_addresses_available{pool="lan",family="ipv4"} 4"#,
            r#"kube_lb_ip_pool_addresses_available{pool="lan",family="ipv6"} 2"#,
            // The same counts under MetalLB's allocator names.
            r#"kubelb_pool_addresses_total{pool="lan",family="ipv4"} 4"#,
            r#"kubelb_pool_addresses_total{pool="lan",family="ipv6"} 2"#,
            r#"kubelb_pool_addresses_in_use{pool="lan",family="ipv4"} 0"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }

        local.set_pools(Vec::new());
        let text = metrics.encode().unwrap();
        assert!(!text.contains(r#"pool="lan""#), "{text}");
    }

    /// Table: the leadership channel's value → `kube_lb_leader` and whether per-Service
    /// readiness is exported (only the leader's view is current).
    #[test]
    fn leader_gauge_and_service_readiness_follow_leadership() {
        for (leading, want_leader, want_services) in [(true, 1, true), (false, 0, false)] {
            let metrics = Metrics::new();
            let (tx, rx) = watch::channel(leading);
            metrics.track_leadership(rx);
            metrics.set_service_ready("default", "web", Some(true));
            metrics.set_service_ready("default", "db", Some(false));
            metrics.set_service_ready("default", "gone", Some(false));
            metrics.set_service_ready("default", "gone", None);
            let text = metrics.encode().unwrap();
            assert!(
                text.contains(&format!("kube_lb_leader {want_leader}")),
                "{leading}: {text}"
            );
            for (line, present) in [
                (
                    r#"kube_lb_service_load_balancer_ready{service_namespace="default",service_name="web"} 1"#,
                    want_services,
                ),
                (
                    r#"kube_lb_service_load_balancer_ready{service_namespace="default",service_name="db"} 0"#,
                    want_services,
                ),
                (r#"service_name="gone""#, false),
            ] {
                assert_eq!(text.contains(line), present, "{leading}: {line} in\n{text}");
            }
            // Leadership changes are seen at the next scrape, without any other call.
            tx.send_replace(!leading);
            let text = metrics.encode().unwrap();
            assert!(
                text.contains(&format!("kube_lb_leader {}", 1 - want_leader)),
                "{text}"
            );
        }
    }
}

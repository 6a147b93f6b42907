//! Prometheus metrics of the controller: reconciles, their duration, errors by class, cloud
//! calls by provider and operation, and the number of load balancers managed.

use std::sync::Arc;
use std::time::Instant;

use kube_lb_provider_core::{CallCounter, CallRecord};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::controller::ErrorClass;

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

/// The controller's metrics, registered under the `kube_lb` prefix.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_duration: Histogram,
    errors: Family<ErrorLabels, Counter>,
    cloud_calls: Family<CallLabels, Counter>,
    load_balancers: Gauge,
    decode_errors: Family<ResourceLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Fresh metrics on their own registry.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kube_lb");
        let reconciles = Family::<ResultLabels, Counter>::default();
        // 1 ms .. ~16 s: local reconciles take microseconds, cloud ones seconds.
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 15));
        let errors = Family::<ErrorLabels, Counter>::default();
        let cloud_calls = Family::<CallLabels, Counter>::default();
        let load_balancers = Gauge::default();
        let decode_errors = Family::<ResourceLabels, Counter>::default();
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
            "load_balancers_managed",
            "Load balancers with an address in their Service status",
            load_balancers.clone(),
        );
        registry.register(
            "watch_decode_errors",
            "Watched objects skipped because they do not decode, by resource",
            decode_errors.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_duration,
            errors,
            cloud_calls,
            load_balancers,
            decode_errors,
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
    }

    /// Starts timing a reconcile; the duration is recorded when the guard drops.
    pub fn reconcile_timer(&self) -> ReconcileTimer<'_> {
        ReconcileTimer {
            metrics: self,
            start: Instant::now(),
            result: "error",
        }
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

    /// The text exposition format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
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
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }
}

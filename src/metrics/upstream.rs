//! The families upstream's components export, under their upstream names, so dashboards and
//! alerts written for a cloud-controller-manager and for MetalLB read kube-lb unchanged:
//!
//! - the service controller's (`k8s.io/cloud-provider/controllers/service`):
//!   `service_controller_loadbalancer_sync_total`, `service_controller_nodesync_error_total`,
//!   `service_controller_nodesync_latency_seconds` and
//!   `service_controller_update_loadbalancer_host_latency_seconds`;
//! - the address pools', after MetalLB's allocator: `kubelb_pool_addresses_total` and
//!   `kubelb_pool_addresses_in_use`, per pool and family.
//!
//! They are registered without the `kube_lb` prefix; kube-lb's own families stay beside them.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Why the controller calls the provider's ensure for a Service, as upstream's service
/// controller tells its two paths apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnsureCause {
    /// The Service's load-balancer spec differs from the last one applied (or none was).
    Spec,
    /// Only the backend nodes differ: upstream's `UpdateLoadBalancer` (a host update).
    Hosts,
    /// Nothing differs: the periodic verification of the cloud's state.
    Resync,
}

/// Labels of the pool families, as MetalLB's allocator has `pool`, plus the family.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PoolLabels {
    pub(super) pool: String,
    /// `ipv4` or `ipv6`.
    pub(super) family: &'static str,
}

/// A node sync pass: the Services a change of the node set queued, not all reconciled yet.
#[derive(Debug)]
struct Pass {
    started: Instant,
    outstanding: BTreeSet<String>,
}

/// The upstream-named families.
#[derive(Debug)]
pub(super) struct UpstreamMetrics {
    loadbalancer_sync: Counter,
    nodesync_error: Counter,
    nodesync_latency: Histogram,
    update_host_latency: Histogram,
    pub(super) pool_total: Family<PoolLabels, Gauge>,
    pub(super) pool_in_use: Family<PoolLabels, Gauge>,
    pass: Mutex<Option<Pass>>,
}

impl UpstreamMetrics {
    /// Registers the families on `registry` (the unprefixed root).
    pub(super) fn register(registry: &mut Registry) -> Self {
        let loadbalancer_sync = Counter::default();
        let nodesync_error = Counter::default();
        // Upstream's buckets: 1 s doubling to ~4.5 h; a pass over many load balancers is slow.
        let nodesync_latency = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        let update_host_latency = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        let pool_total = Family::<PoolLabels, Gauge>::default();
        let pool_in_use = Family::<PoolLabels, Gauge>::default();
        registry.register(
            "service_controller_loadbalancer_sync",
            "Times any load balancer was configured as an effect of a Service or node change \
             (kube-lb counts every ensure made for a changed spec or changed backends)",
            loadbalancer_sync.clone(),
        );
        registry.register(
            "service_controller_nodesync_error",
            "Load-balancer updates for a changed set of backend nodes that failed",
            nodesync_error.clone(),
        );
        registry.register(
            "service_controller_nodesync_latency_seconds",
            "Time from a change of the node set until every LoadBalancer Service it queued was \
             reconciled",
            nodesync_latency.clone(),
        );
        registry.register(
            "service_controller_update_loadbalancer_host_latency_seconds",
            "Time one load balancer took to be updated to a changed set of backend nodes",
            update_host_latency.clone(),
        );
        registry.register(
            "kubelb_pool_addresses_total",
            "Addresses of an IP pool of the local provider, by pool and family (ipv4, ipv6; \
             capped at 2^63-1), as MetalLB's metallb_allocator_addresses_total",
            pool_total.clone(),
        );
        registry.register(
            "kubelb_pool_addresses_in_use",
            "Addresses of an IP pool of the local provider assigned to Services, by pool and \
             family, as MetalLB's metallb_allocator_addresses_in_use_total",
            pool_in_use.clone(),
        );
        Self {
            loadbalancer_sync,
            nodesync_error,
            nodesync_latency,
            update_host_latency,
            pool_total,
            pool_in_use,
            pass: Mutex::new(None),
        }
    }

    /// Records one ensure of `cause` that took `took` and succeeded or not.
    pub(super) fn ensured(&self, cause: EnsureCause, took: Duration, succeeded: bool) {
        match cause {
            EnsureCause::Spec => {
                self.loadbalancer_sync.inc();
            }
            EnsureCause::Hosts => {
                self.loadbalancer_sync.inc();
                self.update_host_latency.observe(took.as_secs_f64());
                if !succeeded {
                    self.nodesync_error.inc();
                }
            }
            EnsureCause::Resync => {}
        }
    }

    /// A change of the node set queued `services` (`namespace/name`). A pass still open keeps
    /// its start, so the latency runs from the first change; its Services are replaced by
    /// these, the current ones, so a Service deleted meanwhile cannot hold it open.
    pub(super) fn node_sync_started(&self, services: BTreeSet<String>) {
        let mut pass = self.pass.lock().unwrap_or_else(PoisonError::into_inner);
        let started = pass.as_ref().map_or_else(Instant::now, |open| open.started);
        *pass = (!services.is_empty()).then_some(Pass {
            started,
            outstanding: services,
        });
    }

    /// `service` was reconciled: the pass closes, and its latency is observed, when it was the
    /// last one outstanding.
    pub(super) fn reconciled(&self, service: &str) {
        let mut pass = self.pass.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(open) = pass.as_mut() else { return };
        open.outstanding.remove(service);
        if open.outstanding.is_empty() {
            self.nodesync_latency
                .observe(open.started.elapsed().as_secs_f64());
            *pass = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    fn sample(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    }

    #[test]
    fn ensures_are_counted_by_cause() {
        let mut registry = Registry::default();
        let metrics = UpstreamMetrics::register(&mut registry);
        let second = Duration::from_secs(1);
        for (cause, succeeded) in [
            (EnsureCause::Spec, true),
            (EnsureCause::Hosts, true),
            (EnsureCause::Hosts, false),
            (EnsureCause::Resync, true),
            (EnsureCause::Resync, false),
        ] {
            metrics.ensured(cause, second, succeeded);
        }
        let text = text(&registry);
        // A verifying resync configures nothing; spec and host changes do.
        assert_eq!(
            sample(&text, "service_controller_loadbalancer_sync_total"),
            3.0
        );
        assert_eq!(
            sample(&text, "service_controller_nodesync_error_total"),
            1.0
        );
        assert_eq!(
            sample(
                &text,
                "service_controller_update_loadbalancer_host_latency_seconds_count"
            ),
            2.0
        );
    }

    #[test]
    fn a_node_sync_pass_ends_with_its_last_service() {
        let mut registry = Registry::default();
        let metrics = UpstreamMetrics::register(&mut registry);
        let count = |r: &Registry| {
            sample(
                &text(r),
                "service_controller_nodesync_latency_seconds_count",
            )
        };
        let set = |names: &[&str]| names.iter().map(|n| (*n).to_string()).collect();
        metrics.node_sync_started(set(&["a/x", "a/y"]));
        metrics.reconciled("a/x");
        metrics.reconciled("b/unrelated");
        assert_eq!(count(&registry), 0.0, "one Service still outstanding");
        // A second change while open: the pass now waits for the current Services only.
        metrics.node_sync_started(set(&["a/y", "a/z"]));
        metrics.reconciled("a/y");
        assert_eq!(count(&registry), 0.0);
        metrics.reconciled("a/z");
        assert_eq!(count(&registry), 1.0, "closed by its last Service");
        metrics.reconciled("a/z");
        assert_eq!(count(&registry), 1.0, "no pass open, nothing observed");
        // A change that queues nothing opens no pass.
        metrics.node_sync_started(BTreeSet::new());
        metrics.reconciled("a/x");
        assert_eq!(count(&registry), 1.0);
    }
}

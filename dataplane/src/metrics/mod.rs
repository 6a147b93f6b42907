//! kube-proxy's metric families (`kubeproxy_*`, from kube-proxy 1.33's `pkg/proxy/metrics`),
//! so the kubernetes-mixin proxy dashboard and alerts written for kube-proxy read kube-lb's
//! proxy unchanged, and the `process_*` families ([`process`]).
//!
//! kube-proxy runs one proxier per IP family and labels its sync metrics `ip_family`; kube-lb's
//! backends program both families in one transaction, so a sync is recorded under both. The
//! `ip_family` series exist from the start (at zero), as dashboards template on them.

pub mod process;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::model::{Snapshot, TrafficPolicy};

/// The annotation the EndpointSlice controller sets to when the change behind a slice's
/// update happened (the Pod or Service change); network programming latency is measured from
/// it.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";

/// An IP family, as kube-proxy spells its `ip_family` label.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelValue)]
pub enum IpFamily {
    /// IPv4.
    IPv4,
    /// IPv6.
    IPv6,
}

impl IpFamily {
    /// Both families, in label order.
    pub const ALL: [IpFamily; 2] = [IpFamily::IPv4, IpFamily::IPv6];

    /// The family of `ip`.
    pub fn of(ip: std::net::IpAddr) -> Self {
        if ip.is_ipv4() {
            IpFamily::IPv4
        } else {
            IpFamily::IPv6
        }
    }
}

/// Which of a Service's traffic policies is `Local` without a local endpoint.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum PolicyKind {
    /// `internalTrafficPolicy: Local` (ClusterIP traffic).
    Internal,
    /// `externalTrafficPolicy: Local` (NodePort, load-balancer and external IP traffic).
    External,
}

impl PolicyKind {
    fn label(self) -> &'static str {
        match self {
            PolicyKind::Internal => "internal",
            PolicyKind::External => "external",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FamilyLabel {
    ip_family: IpFamily,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoLocalLabel {
    ip_family: IpFamily,
    traffic_policy: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: String,
}

type Histograms = Family<FamilyLabel, Histogram, fn() -> Histogram>;
type Timestamps = Family<FamilyLabel, Gauge<f64, AtomicU64>>;

/// kube-proxy's sync histograms: 1 ms doubling up to about 16 s.
fn sync_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// kube-proxy's network programming histogram: 0.25 s and 0.5 s, every second to a minute,
/// every 5 s to two minutes, every 30 s to five.
fn programming_histogram() -> Histogram {
    let seconds = [0.25, 0.5]
        .into_iter()
        .chain((1..60).map(f64::from))
        .chain((60..=115).step_by(5).map(f64::from))
        .chain((120..=300).step_by(30).map(f64::from));
    Histogram::new(seconds)
}

/// One endpoint change's start: from the slice's trigger-time annotation when it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgrammingTrigger {
    /// The slice's address family.
    pub family: IpFamily,
    /// When the change behind it happened.
    pub at: SystemTime,
}

/// How an EndpointSlice reached the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceEvent {
    /// In the initial list (or a relist).
    Listed,
    /// Created or updated while watching.
    Changed,
    /// Deleted while watching.
    Deleted,
}

/// When the change behind `slice`'s event started, for network programming latency. A
/// trigger-time annotation from before the proxy started (`started`) is not counted, as
/// kube-proxy does not: the proxy before this one programmed it. Without the annotation, a
/// change counts from its arrival and a listed slice is not counted; a deletion always counts
/// from its arrival (its annotation dates the slice's last update). FQDN slices are not proxied.
pub fn programming_trigger(
    slice: &EndpointSlice,
    event: SliceEvent,
    arrived: SystemTime,
    started: SystemTime,
) -> Option<ProgrammingTrigger> {
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::IPv4,
        "IPv6" => IpFamily::IPv6,
        _ => return None,
    };
    let annotated = slice
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(LAST_CHANGE_TRIGGER_TIME))
        .and_then(|value| humantime::parse_rfc3339_weak(value.trim()).ok());
    let at = match (event, annotated) {
        (SliceEvent::Deleted, _) => arrived,
        (_, Some(at)) if at >= started => at,
        (_, Some(_)) | (SliceEvent::Listed, None) => return None,
        (SliceEvent::Changed, None) => arrived,
    };
    Some(ProgrammingTrigger { family, at })
}

/// How many Services have a `Local` policy but no endpoint on this node, per family (of the
/// Service's cluster IPs) and policy: kube-proxy's
/// `kubeproxy_sync_proxy_rules_no_local_endpoints_total`. The external policy counts only
/// Services reachable from outside (NodePort, load-balancer IP, external IP).
pub fn no_local_endpoints(snapshot: &Snapshot) -> BTreeMap<(IpFamily, PolicyKind), usize> {
    let mut services = std::collections::BTreeSet::new();
    for model in snapshot.ports.values() {
        for family in IpFamily::ALL {
            if !model
                .cluster_ips
                .iter()
                .any(|ip| IpFamily::of(*ip) == family)
            {
                continue;
            }
            let local_here = model
                .local_endpoints
                .iter()
                .any(|endpoint| IpFamily::of(endpoint.ip) == family);
            if local_here {
                continue;
            }
            if model.internal_policy == TrafficPolicy::Local {
                services.insert((family, PolicyKind::Internal, &model.key.service));
            }
            if model.external_policy == TrafficPolicy::Local && model.is_external() {
                services.insert((family, PolicyKind::External, &model.key.service));
            }
        }
    }
    let mut counts = BTreeMap::new();
    for family in IpFamily::ALL {
        for policy in [PolicyKind::Internal, PolicyKind::External] {
            counts.insert((family, policy), 0);
        }
    }
    for (family, policy, _) in services {
        *counts.entry((family, policy)).or_default() += 1;
    }
    counts
}

/// Which node health endpoint answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HealthPath {
    /// `/healthz`.
    Healthz,
    /// `/livez`.
    Livez,
}

/// The proxy's kube-proxy-named metrics. Shared by the proxy loop (syncs, changes) and the
/// health server (answers, scrapes).
#[derive(Debug)]
pub struct ProxyMetrics {
    registry: Registry,
    sync_duration: Histograms,
    full_sync_duration: Histograms,
    partial_sync_duration: Histograms,
    network_programming: Histograms,
    last_sync: Timestamps,
    last_queued: Timestamps,
    endpoint_changes_pending: Gauge,
    service_changes_pending: Gauge,
    endpoint_changes: Counter,
    service_changes: Counter,
    sync_failures: Family<FamilyLabel, Counter>,
    no_local_endpoints: Family<NoLocalLabel, Gauge>,
    healthz: Family<CodeLabel, Counter>,
    livez: Family<CodeLabel, Counter>,
}

impl Default for ProxyMetrics {
    fn default() -> Self {
        Self::new()
    }
}

fn seconds_since_epoch(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

impl ProxyMetrics {
    /// Registers every family, with the `ip_family` series created at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let histograms = || Histograms::new_with_constructor(sync_histogram);
        let metrics = ProxyMetrics {
            sync_duration: histograms(),
            full_sync_duration: histograms(),
            partial_sync_duration: histograms(),
            network_programming: Histograms::new_with_constructor(programming_histogram),
            last_sync: Timestamps::default(),
            last_queued: Timestamps::default(),
            endpoint_changes_pending: Gauge::default(),
            service_changes_pending: Gauge::default(),
            endpoint_changes: Counter::default(),
            service_changes: Counter::default(),
            sync_failures: Family::default(),
            no_local_endpoints: Family::default(),
            healthz: Family::default(),
            livez: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "kubeproxy_sync_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds",
            metrics.sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_full_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for full resyncs",
            metrics.full_sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_sync_partial_proxy_rules_duration_seconds",
            "SyncProxyRules latency in seconds for partial resyncs",
            metrics.partial_sync_duration.clone(),
        );
        registry.register(
            "kubeproxy_network_programming_duration_seconds",
            "In Cluster Network Programming Latency in seconds",
            metrics.network_programming.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
            "The last time proxy rules were successfully synced",
            metrics.last_sync.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
            "The last time a sync of proxy rules was queued",
            metrics.last_queued.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
            "Pending proxy rules Endpoint changes",
            metrics.endpoint_changes_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes_pending",
            "Pending proxy rules Service changes",
            metrics.service_changes_pending.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_endpoint_changes",
            "Cumulative proxy rules Endpoint changes",
            metrics.endpoint_changes.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_service_changes",
            "Cumulative proxy rules Service changes",
            metrics.service_changes.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_nftables_sync_failures",
            "Number of failed nftables syncs (the previous rules stay in place)",
            metrics.sync_failures.clone(),
        );
        registry.register(
            "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
            "Number of services with a Local traffic policy and no endpoints on this node",
            metrics.no_local_endpoints.clone(),
        );
        registry.register(
            "kubeproxy_proxy_healthz",
            "Cumulative proxy healthz HTTP status",
            metrics.healthz.clone(),
        );
        registry.register(
            "kubeproxy_proxy_livez",
            "Cumulative proxy livez HTTP status",
            metrics.livez.clone(),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        for ip_family in IpFamily::ALL {
            let label = FamilyLabel { ip_family };
            for family in [
                &metrics.sync_duration,
                &metrics.full_sync_duration,
                &metrics.partial_sync_duration,
                &metrics.network_programming,
            ] {
                drop(family.get_or_create(&label));
            }
            drop(metrics.last_sync.get_or_create(&label));
            drop(metrics.last_queued.get_or_create(&label));
            drop(metrics.sync_failures.get_or_create(&label));
            for policy in [PolicyKind::Internal, PolicyKind::External] {
                drop(metrics.no_local_endpoints.get_or_create(&NoLocalLabel {
                    ip_family,
                    traffic_policy: policy.label(),
                }));
            }
        }
        ProxyMetrics {
            registry,
            ..metrics
        }
    }

    /// A Service change reached the proxy's model.
    pub fn service_changed(&self) {
        self.service_changes.inc();
        self.service_changes_pending.inc();
    }

    /// An EndpointSlice (or Endpoints) change reached the proxy's model.
    pub fn endpoints_changed(&self) {
        self.endpoint_changes.inc();
        self.endpoint_changes_pending.inc();
    }

    /// A sync was queued at `now`.
    pub fn queued(&self, now: SystemTime) {
        for ip_family in IpFamily::ALL {
            self.last_queued
                .get_or_create(&FamilyLabel { ip_family })
                .set(seconds_since_epoch(now));
        }
    }

    /// A sync took the pending changes.
    pub fn sync_started(&self) {
        self.endpoint_changes_pending.set(0);
        self.service_changes_pending.set(0);
    }

    /// A sync succeeded after `took`; `full`: it rewrote every rule (`None`: the backend has
    /// no partial syncs, the userspace one).
    pub fn synced(&self, took: Duration, full: Option<bool>, now: SystemTime) {
        for ip_family in IpFamily::ALL {
            let label = FamilyLabel { ip_family };
            let seconds = took.as_secs_f64();
            self.sync_duration.get_or_create(&label).observe(seconds);
            match full {
                Some(true) => self
                    .full_sync_duration
                    .get_or_create(&label)
                    .observe(seconds),
                Some(false) => self
                    .partial_sync_duration
                    .get_or_create(&label)
                    .observe(seconds),
                None => {}
            }
            self.last_sync
                .get_or_create(&label)
                .set(seconds_since_epoch(now));
        }
    }

    /// The change `trigger` is in the kernel's rules at `now`.
    pub fn programmed(&self, trigger: ProgrammingTrigger, now: SystemTime) {
        let latency = now.duration_since(trigger.at).unwrap_or_default();
        self.network_programming
            .get_or_create(&FamilyLabel {
                ip_family: trigger.family,
            })
            .observe(latency.as_secs_f64());
    }

    /// A sync was refused; the previous rules stay.
    pub fn sync_failed(&self) {
        for ip_family in IpFamily::ALL {
            self.sync_failures
                .get_or_create(&FamilyLabel { ip_family })
                .inc();
        }
    }

    /// Sets the Services without a local endpoint ([`no_local_endpoints`]).
    pub fn set_no_local_endpoints(&self, counts: &BTreeMap<(IpFamily, PolicyKind), usize>) {
        for ((ip_family, policy), count) in counts {
            self.no_local_endpoints
                .get_or_create(&NoLocalLabel {
                    ip_family: *ip_family,
                    traffic_policy: policy.label(),
                })
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// `path` answered with HTTP status `code`.
    pub fn health_answered(&self, path: HealthPath, code: u16) {
        let family = match path {
            HealthPath::Healthz => &self.healthz,
            HealthPath::Livez => &self.livez,
        };
        family
            .get_or_create(&CodeLabel {
                code: code.to_string(),
            })
            .inc();
    }

    /// The families in Prometheus' text format 0.0.4, to follow the proxy's other metrics.
    pub fn text(&self) -> String {
        let mut open_metrics = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut open_metrics, &self.registry);
        to_text_format(&open_metrics)
    }
}

/// OpenMetrics text (what prometheus-client writes) as Prometheus text format 0.0.4, which the
/// proxy's `/metrics` serves: a counter family is declared under its sample name (`…_total`),
/// and `# UNIT` and `# EOF` are dropped.
pub fn to_text_format(open_metrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = open_metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|declaration| declaration.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len() + counters.len() * 12);
    for line in open_metrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(line) => out.push_str(&line),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;

//! The announcer loop (feature `watch`): renews this node's lease, watches Services,
//! EndpointSlices, Nodes and the announcer leases, runs [`election`] whenever any of them (or a
//! lease's liveness) changes, and keeps the interface responders answering for this node's share.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use regex::Regex;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::election::{self, Assignment};
use super::responder::{self, Announced, Responder};
use crate::health::ProxyHealth;
use crate::model::ServiceKey;

/// Label on every announcer lease (the lease watch selects on it).
pub const LEASE_LABEL: &str = "kube-lb.io/l2-announcer";
/// Annotation with the lease duration in milliseconds (`leaseDurationSeconds` is whole seconds).
pub const LEASE_DURATION_ANNOTATION: &str = "kube-lb.io/l2-lease-duration-ms";
/// Field manager of the lease renewals.
const FIELD_MANAGER: &str = "kube-lb-l2";
/// How often liveness is re-evaluated: lease expiry is noticed within this.
const TICK: Duration = Duration::from_millis(50);
/// How often the interface list is re-read.
const INTERFACE_RESCAN: Duration = Duration::from_secs(5);

/// Settings of the announcer.
#[derive(Debug, Clone)]
pub struct L2Config {
    /// This node's name (the lease holder and the name in Services' EndpointSlices).
    pub node_name: String,
    /// Interfaces to answer on: a regular expression matched against whole interface names.
    pub interfaces: Regex,
    /// Namespace of the leases.
    pub lease_namespace: String,
    /// How often this node renews its lease.
    pub renew_interval: Duration,
    /// How long a lease counts as live after its last renewal was seen.
    pub lease_duration: Duration,
    /// The dataplane's health: the lease is only renewed while the rules are fresh, and only
    /// after the first sync (a node must not attract traffic before it can forward it).
    pub health: Option<Arc<ProxyHealth>>,
    /// Where the metrics go.
    pub metrics: Arc<L2Metrics>,
}

/// Errors of the announcer.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    /// The interface selector matches no interface that can be opened.
    #[error("no interface matches {0:?}")]
    NoInterface(String),
    /// All watch streams ended.
    #[error("watch streams ended")]
    StreamsEnded,
    /// The interface selector is not a regular expression.
    #[error("{0:?} is not an interface name or regular expression: {1}")]
    Selector(String, regex::Error),
}

/// The interface selector of `--l2-interface`: a name, or a regular expression that must match
/// a whole interface name.
pub fn interface_selector(text: &str) -> Result<Regex, L2Error> {
    Regex::new(text).map_err(|error| L2Error::Selector(text.to_owned(), error))
}

/// The announcer's metrics, rendered as Prometheus text by [`L2Metrics::text`].
#[derive(Debug, Default)]
pub struct L2Metrics {
    state: Mutex<MetricsState>,
}

#[derive(Debug, Default)]
struct MetricsState {
    announcing: BTreeMap<(ServiceKey, IpAddr), String>,
    live_nodes: usize,
    renewals: u64,
    renewal_failures: u64,
    takeovers: u64,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl L2Metrics {
    fn state(&self) -> std::sync::MutexGuard<'_, MetricsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Service addresses this node announces now, as `(service, ip)`.
    pub fn announcing(&self) -> Vec<(ServiceKey, IpAddr)> {
        self.state().announcing.keys().cloned().collect()
    }

    /// Prometheus text exposition.
    pub fn text(&self) -> String {
        let state = self.state();
        let mut text = String::from(
            "# HELP kube_lb_l2_announcing 1 for each Service address this node answers ARP/NDP for.\n\
             # TYPE kube_lb_l2_announcing gauge\n",
        );
        for ((service, ip), interfaces) in &state.announcing {
            text.push_str(&format!(
                "kube_lb_l2_announcing{{service=\"{}\",ip=\"{ip}\",interface=\"{}\"}} 1\n",
                escape(&service.to_string()),
                escape(interfaces)
            ));
        }
        text.push_str(&format!(
            "# HELP kube_lb_l2_live_nodes Announcer nodes whose lease this node sees as live.\n\
             # TYPE kube_lb_l2_live_nodes gauge\n\
             kube_lb_l2_live_nodes {}\n\
             # HELP kube_lb_l2_lease_renewals_total Successful renewals of this node's lease.\n\
             # TYPE kube_lb_l2_lease_renewals_total counter\n\
             kube_lb_l2_lease_renewals_total {}\n\
             # HELP kube_lb_l2_lease_renewal_failures_total Failed renewals of this node's lease.\n\
             # TYPE kube_lb_l2_lease_renewal_failures_total counter\n\
             kube_lb_l2_lease_renewal_failures_total {}\n\
             # HELP kube_lb_l2_takeovers_total Addresses this node started announcing.\n\
             # TYPE kube_lb_l2_takeovers_total counter\n\
             kube_lb_l2_takeovers_total {}\n",
            state.live_nodes, state.renewals, state.renewal_failures, state.takeovers
        ));
        text
    }
}

/// Serves `/metrics` with the announcer's metrics on `listener` until the task is dropped.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Arc<L2Metrics>,
) -> std::io::Result<()> {
    let router = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move { metrics.text() }
        }),
    );
    axum::serve(listener, router).await
}

/// Name of a node's lease.
pub fn lease_name(node: &str) -> String {
    format!("kube-lb-l2-{node}")
}

/// A lease as this node last saw it change.
#[derive(Debug, Clone)]
struct SeenLease {
    holder: String,
    resource_version: String,
    /// When this node saw the current version (its own clock: node clocks need not agree).
    observed: Instant,
    duration: Duration,
}

/// Liveness of the announcer nodes, from the leases as they change. A lease is live for its
/// duration after this node saw it renewed; a relist that returns an unchanged lease does not
/// revive it.
#[derive(Debug, Default)]
struct Leases {
    seen: BTreeMap<String, SeenLease>,
    listing: Option<BTreeSet<String>>,
    synced: bool,
}

impl Leases {
    fn observe(&mut self, lease: &Lease, now: Instant, default_duration: Duration) {
        let name = lease.name_any();
        let holder = lease
            .spec
            .as_ref()
            .and_then(|spec| spec.holder_identity.clone())
            .unwrap_or_default();
        let resource_version = lease.resource_version().unwrap_or_default();
        let duration = lease
            .annotations()
            .get(LEASE_DURATION_ANNOTATION)
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
            .or_else(|| {
                lease
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.lease_duration_seconds)
                    .and_then(|seconds| u64::try_from(seconds).ok())
                    .map(Duration::from_secs)
            })
            .unwrap_or(default_duration);
        let unchanged = self
            .seen
            .get(&name)
            .is_some_and(|seen| seen.resource_version == resource_version);
        if unchanged {
            return;
        }
        self.seen.insert(
            name,
            SeenLease {
                holder,
                resource_version,
                observed: now,
                duration,
            },
        );
    }

    fn handle(&mut self, event: watcher::Event<Lease>, now: Instant, default_duration: Duration) {
        match event {
            watcher::Event::Apply(lease) => self.observe(&lease, now, default_duration),
            watcher::Event::Delete(lease) => {
                self.seen.remove(&lease.name_any());
            }
            watcher::Event::Init => self.listing = Some(BTreeSet::new()),
            watcher::Event::InitApply(lease) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(lease.name_any());
                }
                self.observe(&lease, now, default_duration);
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listing.take() {
                    self.seen.retain(|name, _| listed.contains(name));
                }
                self.synced = true;
            }
        }
    }

    fn live(&self, now: Instant) -> BTreeSet<String> {
        self.seen
            .values()
            .filter(|seen| !seen.holder.is_empty())
            .filter(|seen| now.saturating_duration_since(seen.observed) < seen.duration)
            .map(|seen| seen.holder.clone())
            .collect()
    }
}

enum Change {
    Service(Box<watcher::Event<Service>>),
    Slice(Box<watcher::Event<EndpointSlice>>),
    Node(Box<watcher::Event<Node>>),
}

fn lease_watch(
    client: &Client,
    namespace: &str,
) -> impl Stream<Item = Result<watcher::Event<Lease>, watcher::Error>> + Send + use<> {
    watcher(
        Api::<Lease>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&format!("{LEASE_LABEL}=true")),
    )
}

/// The lease body this node applies on every renewal.
fn lease_body(config: &L2Config) -> serde_json::Value {
    let seconds = config.lease_duration.as_millis().div_ceil(1000).max(1);
    serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": lease_name(&config.node_name),
            "namespace": config.lease_namespace,
            "labels": {LEASE_LABEL: "true"},
            "annotations": {
                LEASE_DURATION_ANNOTATION: config.lease_duration.as_millis().to_string(),
            },
        },
        "spec": {
            "holderIdentity": config.node_name,
            "leaseDurationSeconds": seconds,
            "renewTime": humantime::format_rfc3339_micros(SystemTime::now()).to_string(),
        },
    })
}

/// Renews this node's lease every `renew_interval` while the dataplane is healthy (one apply
/// request per renewal), reporting each outcome: the renewed lease, or `None` on failure.
async fn renew(client: Client, config: L2Config, results: mpsc::UnboundedSender<Option<Lease>>) {
    let api = Api::<Lease>::namespaced(client, &config.lease_namespace);
    let name = lease_name(&config.node_name);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut first_sync_seen = config.health.is_none();
    let mut interval = tokio::time::interval(config.renew_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if let Some(health) = &config.health {
            let status = health.status();
            first_sync_seen = first_sync_seen || has_synced(health);
            if !first_sync_seen || !status.healthy || !status.node_eligible {
                tracing::debug!(
                    synced = first_sync_seen,
                    healthy = status.healthy,
                    "dataplane not ready: lease not renewed"
                );
                continue;
            }
        }
        let body = Patch::Apply(lease_body(&config));
        let request = api.patch(&name, &params, &body);
        // A renewal slower than the lease is worthless: give up on it and count a failure.
        let result = tokio::time::timeout(config.lease_duration, request).await;
        let report = match result {
            Ok(Ok(lease)) => Some(lease),
            Ok(Err(error)) => {
                tracing::warn!(%error, lease = %name, "lease not renewed");
                None
            }
            Err(_) => {
                tracing::warn!(lease = %name, "lease renewal timed out");
                None
            }
        };
        if results.send(report).is_err() {
            return;
        }
    }
}

/// Whether the proxy has programmed its rules once: its exported last-success timestamp (the
/// one the alerts read) is 0 until then.
pub(crate) fn has_synced(health: &ProxyHealth) -> bool {
    health
        .metrics_text()
        .lines()
        .find_map(|line| line.strip_prefix("kube_lb_proxy_last_sync_success_timestamp_seconds "))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .is_some_and(|seconds| seconds > 0.0)
}

/// What this node announces, and the bookkeeping that turns changes into events.
#[derive(Debug, Default)]
struct Announcing {
    mine: BTreeMap<IpAddr, Vec<ServiceKey>>,
    /// Addresses without any candidate already reported (once per outage).
    unannounced: BTreeSet<IpAddr>,
}

/// Runs the announcer until `shutdown` resolves; on shutdown the lease is deleted so the other
/// nodes take over at once instead of after the lease expires.
pub async fn run(
    client: Client,
    config: L2Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), L2Error> {
    let node = config.node_name.clone();
    let (announced_sender, announced) = watch::channel::<Announced>(Arc::default());
    let mut responders: BTreeMap<String, Responder> = BTreeMap::new();
    refresh_responders(&config.interfaces, &mut responders, &announced);
    if responders.is_empty() {
        return Err(L2Error::NoInterface(config.interfaces.as_str().to_owned()));
    }
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "kube-lb-proxy".into(),
            instance: Some(node.clone()),
        },
    );

    let mut changes = futures::stream::select_all([
        crate::watch::watch(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
            Change::Service,
            "l2",
        )
        .boxed(),
        crate::watch::watch(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
            Change::Slice,
            "l2",
        )
        .boxed(),
        crate::watch::watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            Change::Node,
            "l2",
        )
        .boxed(),
    ]);
    let mut lease_events = lease_watch(&client, &config.lease_namespace).boxed();
    let (mut services, mut slices, mut nodes) = (
        Writer::<Service>::default(),
        Writer::<EndpointSlice>::default(),
        Writer::<Node>::default(),
    );
    let mut synced = [false; 3];
    let mut leases = Leases::default();
    let mut last_lease_event = Instant::now();
    let mut last_renewal: Option<Instant> = None;

    let (renewals_sender, mut renewals) = mpsc::unbounded_channel();
    let renewer = tokio::spawn(renew(client.clone(), config.clone(), renewals_sender));

    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rescan = tokio::time::interval(INTERFACE_RESCAN);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut last_live: Option<BTreeSet<String>> = None;
    let mut state = Announcing::default();
    tokio::pin!(shutdown);

    let result = loop {
        tokio::select! {
            () = &mut shutdown => break Ok(()),
            change = changes.next() => {
                let Some(change) = change else { break Err(L2Error::StreamsEnded) };
                let (index, done) = match change {
                    Change::Service(event) => { services.apply_watcher_event(&event); (0, matches!(*event, watcher::Event::InitDone)) }
                    Change::Slice(event) => { slices.apply_watcher_event(&event); (1, matches!(*event, watcher::Event::InitDone)) }
                    Change::Node(event) => { nodes.apply_watcher_event(&event); (2, matches!(*event, watcher::Event::InitDone)) }
                };
                synced[index] |= done;
                dirty = true;
            }
            event = lease_events.next() => {
                match event {
                    Some(Ok(event)) => {
                        last_lease_event = Instant::now();
                        leases.handle(event, Instant::now(), config.lease_duration);
                    }
                    Some(Err(error)) => tracing::warn!(%error, "lease watch error"),
                    None => break Err(L2Error::StreamsEnded),
                }
            }
            renewed = renewals.recv() => {
                let Some(renewed) = renewed else { break Err(L2Error::StreamsEnded) };
                let mut metrics = config.metrics.state();
                match renewed {
                    Some(lease) => {
                        metrics.renewals += 1;
                        last_renewal = Some(Instant::now());
                        // The answer is an observation of our own lease: no need to wait for
                        // the watch to echo it.
                        leases.observe(&lease, Instant::now(), config.lease_duration);
                    }
                    None => metrics.renewal_failures += 1,
                }
            }
            _ = rescan.tick() => {
                refresh_responders(&config.interfaces, &mut responders, &announced);
            }
            _ = tick.tick() => {
                let now = Instant::now();
                // Our renewals succeed but the watch has been silent for a while although every
                // renewal is a change it should carry: the watch is stuck. Start it again (one
                // list of the leases) rather than act on a stale view.
                let renewing = last_renewal.is_some_and(|at| now.saturating_duration_since(at) < config.lease_duration);
                if renewing && now.saturating_duration_since(last_lease_event) > config.lease_duration * 2 {
                    tracing::warn!("lease watch silent: restarting it");
                    lease_events = lease_watch(&client, &config.lease_namespace).boxed();
                    last_lease_event = now;
                }
                if !(synced.iter().all(|s| *s) && leases.synced) {
                    continue;
                }
                let node_objects: BTreeMap<String, Arc<Node>> = nodes
                    .as_reader()
                    .state()
                    .into_iter()
                    .map(|n| (n.name_any(), n))
                    .collect();
                let mut live = leases.live(now);
                live.retain(|name| node_objects.get(name).is_none_or(|n| election::node_may_announce(n)));
                // We count ourselves live only while our own renewals succeed: a node cut off
                // from the API server stops announcing about when the others take over.
                if !renewing {
                    live.remove(&node);
                }
                if !dirty && last_live.as_ref() == Some(&live) {
                    continue;
                }
                if last_live.as_ref() != Some(&live) {
                    tracing::info!(live = ?live, "announcer nodes");
                }
                dirty = false;
                let service_objects = services.as_reader().state();
                let slice_objects = slices.as_reader().state();
                let claims = election::claims(
                    &service_objects.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                    &slice_objects.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                );
                let assignments = election::assign(&live, &claims);
                config.metrics.state().live_nodes = live.len();
                apply(
                    &node,
                    &live,
                    &assignments,
                    &mut state,
                    &announced_sender,
                    &announced,
                    &responders,
                    &service_objects,
                    &recorder,
                    &config.metrics,
                );
                last_live = Some(live);
            }
        }
    };

    renewer.abort();
    announced_sender.send_replace(Arc::default());
    drop(responders);
    config.metrics.state().announcing.clear();
    let api = Api::<Lease>::namespaced(client, &config.lease_namespace);
    match api
        .delete(&lease_name(&node), &DeleteParams::default())
        .await
    {
        Ok(_) => tracing::info!(lease = %lease_name(&node), "lease released"),
        Err(error) => tracing::warn!(%error, "lease not released; it expires on its own"),
    }
    result
}

/// Starts responders on interfaces that appeared, stops those of interfaces that went or changed.
fn refresh_responders(
    selector: &Regex,
    responders: &mut BTreeMap<String, Responder>,
    announced: &watch::Receiver<Announced>,
) {
    let present = responder::interfaces(selector);
    responders.retain(|name, responder| {
        let keep = present.iter().any(|i| i == responder.interface());
        if !keep {
            tracing::info!(interface = %name, "interface gone or changed: not answering on it");
        }
        keep
    });
    for interface in present {
        if responders.contains_key(&interface.name) {
            continue;
        }
        let name = interface.name.clone();
        match Responder::start(interface, announced.clone()) {
            Ok(responder) => {
                // Addresses already announced are announced on the new interface too.
                let current: Vec<IpAddr> = announced.borrow().iter().copied().collect();
                responder.announce(current, announced.clone());
                responders.insert(name, responder);
            }
            Err(error) => {
                tracing::warn!(interface = %name, %error, "cannot open packet sockets")
            }
        }
    }
}

/// Moves the responders to this node's new share and reports what changed.
#[allow(clippy::too_many_arguments)]
fn apply(
    node: &str,
    live: &BTreeSet<String>,
    assignments: &BTreeMap<IpAddr, Assignment>,
    state: &mut Announcing,
    sender: &watch::Sender<Announced>,
    announced: &watch::Receiver<Announced>,
    responders: &BTreeMap<String, Responder>,
    services: &[Arc<Service>],
    recorder: &Recorder,
    metrics: &L2Metrics,
) {
    let mine = election::announced_by(node, assignments);
    let gained: Vec<IpAddr> = mine
        .keys()
        .filter(|ip| !state.mine.contains_key(ip))
        .copied()
        .collect();
    let lost: Vec<IpAddr> = state
        .mine
        .keys()
        .filter(|ip| !mine.contains_key(ip))
        .copied()
        .collect();
    if gained.is_empty() && lost.is_empty() && mine == state.mine {
        report_unannounced(node, live, assignments, state, services, recorder);
        return;
    }
    sender.send_replace(Arc::new(mine.keys().copied().collect()));
    for responder in responders.values() {
        responder.announce(gained.clone(), announced.clone());
    }
    let interfaces: Vec<&str> = responders.keys().map(String::as_str).collect();
    let interfaces = interfaces.join(",");
    for ip in &lost {
        let holder = assignments
            .get(ip)
            .and_then(|a| a.node.clone())
            .unwrap_or_else(|| "nobody".into());
        tracing::info!(%ip, to = %holder, "stopped announcing");
    }
    for ip in &gained {
        let keys = &mine[ip];
        tracing::info!(%ip, node = %node, interfaces = %interfaces, services = ?keys.iter().map(ToString::to_string).collect::<Vec<_>>(), "announcing");
        for key in keys {
            let Some(service) = services.iter().find(|s| {
                s.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                    && s.metadata.name.as_deref() == Some(key.name.as_str())
            }) else {
                continue;
            };
            let reference = service.object_ref(&());
            let event = Event {
                type_: EventType::Normal,
                reason: "L2Announcing".into(),
                note: Some(format!(
                    "{ip} is announced by node {node} on {interfaces} ({})",
                    if ip.is_ipv4() { "ARP" } else { "NDP" }
                )),
                action: "Announce".into(),
                secondary: None,
            };
            let recorder = recorder.clone();
            tokio::spawn(async move {
                if let Err(error) = recorder.publish(&event, &reference).await {
                    tracing::warn!(%error, "announcement event not recorded");
                }
            });
        }
    }
    {
        let mut metrics = metrics.state();
        metrics.takeovers += u64::try_from(gained.len()).unwrap_or(u64::MAX);
        metrics.announcing = mine
            .iter()
            .flat_map(|(ip, keys)| {
                keys.iter()
                    .map(|key| ((key.clone(), *ip), interfaces.clone()))
            })
            .collect();
    }
    state.mine = mine;
    report_unannounced(node, live, assignments, state, services, recorder);
}

/// An address no live node may announce is reported once (a Warning on its Services) by one
/// node: the one that would hold it if endpoints did not matter, so the report is not repeated
/// by every node.
fn report_unannounced(
    node: &str,
    live: &BTreeSet<String>,
    assignments: &BTreeMap<IpAddr, Assignment>,
    state: &mut Announcing,
    services: &[Arc<Service>],
    recorder: &Recorder,
) {
    let orphans: BTreeSet<IpAddr> = assignments
        .iter()
        .filter(|(_, a)| a.node.is_none())
        .map(|(ip, _)| *ip)
        .collect();
    state.unannounced.retain(|ip| orphans.contains(ip));
    for ip in &orphans {
        if state.unannounced.contains(ip) || election::winner(live, *ip).as_deref() != Some(node) {
            continue;
        }
        state.unannounced.insert(*ip);
        tracing::warn!(%ip, "no live node may announce this address");
        for key in &assignments[ip].services {
            let Some(service) = services.iter().find(|s| {
                s.metadata.namespace.as_deref() == Some(key.namespace.as_str())
                    && s.metadata.name.as_deref() == Some(key.name.as_str())
            }) else {
                continue;
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "L2NotAnnounced".into(),
                note: Some(format!(
                    "{ip} is not announced: no live announcer node{}",
                    if service
                        .spec
                        .as_ref()
                        .and_then(|s| s.external_traffic_policy.as_deref())
                        == Some("Local")
                    {
                        " has a ready endpoint (externalTrafficPolicy: Local)"
                    } else {
                        ""
                    }
                )),
                action: "Announce".into(),
                secondary: None,
            };
            let reference = service.object_ref(&());
            let recorder = recorder.clone();
            tokio::spawn(async move {
                if let Err(error) = recorder.publish(&event, &reference).await {
                    tracing::warn!(%error, "event not recorded");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn lease(node: &str, version: &str) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(lease_name(node)),
                resource_version: Some(version.into()),
                annotations: Some(
                    [(LEASE_DURATION_ANNOTATION.to_owned(), "1500".to_owned())].into(),
                ),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(node.into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_lease_lives_for_its_duration_after_it_was_seen_to_change() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let set = |names: &[&str]| {
            names
                .iter()
                .map(|n| (*n).to_owned())
                .collect::<BTreeSet<_>>()
        };
        let mut leases = Leases::default();
        leases.handle(watcher::Event::Init, start, ms(1500));
        leases.handle(watcher::Event::InitApply(lease("n1", "1")), start, ms(1500));
        leases.handle(watcher::Event::InitApply(lease("n2", "2")), start, ms(1500));
        leases.handle(watcher::Event::InitDone, start, ms(1500));
        assert!(leases.synced);
        assert_eq!(leases.live(start + ms(1000)), set(&["n1", "n2"]));
        // n1 renews at 1.0 s; n2 stops.
        leases.handle(
            watcher::Event::Apply(lease("n1", "3")),
            start + ms(1000),
            ms(1500),
        );
        assert_eq!(leases.live(start + ms(1499)), set(&["n1", "n2"]));
        assert_eq!(leases.live(start + ms(1500)), set(&["n1"]));
        // A relist returning n2's old lease does not revive it; a renewal does.
        leases.handle(watcher::Event::Init, start + ms(1600), ms(1500));
        leases.handle(
            watcher::Event::InitApply(lease("n1", "3")),
            start + ms(1600),
            ms(1500),
        );
        leases.handle(
            watcher::Event::InitApply(lease("n2", "2")),
            start + ms(1600),
            ms(1500),
        );
        leases.handle(watcher::Event::InitDone, start + ms(1600), ms(1500));
        assert_eq!(leases.live(start + ms(1700)), set(&["n1"]));
        leases.handle(
            watcher::Event::Apply(lease("n2", "4")),
            start + ms(1800),
            ms(1500),
        );
        assert_eq!(leases.live(start + ms(1900)), set(&["n1", "n2"]));
        // A released (deleted) lease is gone at once; a relist without it removes it too.
        leases.handle(
            watcher::Event::Delete(lease("n2", "4")),
            start + ms(2000),
            ms(1500),
        );
        assert_eq!(leases.live(start + ms(2000)), set(&["n1"]));
        leases.handle(watcher::Event::Init, start + ms(2100), ms(1500));
        leases.handle(watcher::Event::InitDone, start + ms(2100), ms(1500));
        assert_eq!(leases.live(start + ms(2100)), set(&[]));
    }

    #[test]
    fn the_lease_waits_for_the_first_sync() {
        let health = ProxyHealth::new(Duration::from_secs(60));
        assert!(!has_synced(&health));
        health.queued_update();
        health.updated();
        assert!(has_synced(&health));
    }

    #[test]
    fn metrics_name_the_service_and_address() {
        let metrics = L2Metrics::default();
        metrics.state().announcing.insert(
            (
                ServiceKey::new("default", "web"),
                "10.0.0.50".parse().expect("ip"),
            ),
            "eth0".into(),
        );
        let text = metrics.text();
        assert!(
            text.contains("kube_lb_l2_announcing{service=\"default/web\",ip=\"10.0.0.50\",interface=\"eth0\"} 1"),
            "{text}"
        );
    }
}

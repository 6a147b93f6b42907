//! The proxy loop (feature `watch`): kube-rs watchers for Services, EndpointSlices, Endpoints and
//! Nodes feed the [`Index`]; a real change schedules one sync of the backend and the health
//! servers, at most once per `min_sync_period`. Relists that change nothing cost nothing.
//!
//! The loop also keeps the kernel's rules as it wrote them (issue 37): every `sync_period`, and
//! at once when `nft monitor` reports someone else's change to the tables, the nftables backend
//! (or the userspace backend, for its capture table) compares the kernel's table with what it
//! committed ([`crate::nft::verify`]); a difference is
//! restored from what was committed, `/healthz` fails from the moment it is seen until one
//! `sync_period` after the restore was confirmed, and the repair is counted
//! (`kube_lb_dataplane_repairs_total`).

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::time::Instant;

use crate::health::{ProxyHealth, ServiceHealthServers};
use crate::metrics::{ProgrammingTrigger, SliceEvent, no_local_endpoints, programming_trigger};
use crate::model::{
    HEADLESS_LABEL, Index, IndexConfig, PortKey, SERVICE_PROXY_NAME_LABEL, ServiceKey, Snapshot,
    SnapshotChanges,
};
use crate::nft::{ChangeMonitor, Family, Finding, NftBackend, NftError};
use crate::userspace::UserspaceProxy;

/// Errors of the proxy loop.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// All watch streams ended (the client was dropped).
    #[error("watch streams ended")]
    StreamsEnded,
}

/// The backend the loop programs.
#[derive(Debug)]
pub enum Dataplane {
    /// nftables.
    Nft(Box<NftBackend>),
    /// userspace listeners.
    Userspace(UserspaceProxy),
    /// The inner backend, given only ClusterIPs and load-balancer IPs (`kube-lb up`: NodePorts
    /// and externalIPs there would capture ports and addresses of the machine that no cluster owns).
    NoNodePorts(Box<Dataplane>),
}

impl Dataplane {
    /// Programs `snapshot`. `changed`: the ports that may differ from the last successful
    /// sync (`None`: any may), so the nftables backend compares and renders only those.
    /// Says what of it the backend could not serve.
    pub async fn sync(
        &mut self,
        snapshot: &Snapshot,
        changed: Option<&BTreeSet<PortKey>>,
    ) -> Result<Synced, NftError> {
        let mut synced = Synced::default();
        match self {
            Dataplane::Nft(backend) => {
                let report = backend.sync_changed(snapshot, changed).await?;
                for warning in &report.warnings {
                    tracing::warn!(%warning, "service port not programmed");
                }
                synced.full = Some(report.full);
                tracing::info!(
                    full = report.full,
                    commands = report.commands,
                    nft_ms = u64::try_from(report.nft_time.as_millis()).unwrap_or(u64::MAX),
                    conntrack_deletions = report.conntrack_deletions,
                    "synced nftables"
                );
            }
            Dataplane::Userspace(proxy) => {
                let report = proxy.apply(snapshot).await;
                if let Some(error) = &report.capture_error {
                    // Listeners are up but unreachable: fail the sync so health says so and it
                    // is retried.
                    return Err(NftError::Rejected {
                        stderr: format!("userspace capture rules: {error}"),
                    });
                }
                for key in &report.skipped_sctp {
                    tracing::warn!(service = %key, "SCTP is not proxied by the userspace backend");
                    for ip in snapshot
                        .ports
                        .get(key)
                        .into_iter()
                        .flat_map(|m| &m.load_balancer_ips)
                    {
                        synced.not_served.insert((*ip, key.port, key.protocol));
                    }
                }
                for (frontend, error) in &report.failed {
                    tracing::warn!(%frontend, %error, "cannot listen");
                    synced.not_served.insert((
                        frontend.addr.ip(),
                        frontend.addr.port(),
                        frontend.protocol,
                    ));
                    synced.retry = true;
                }
                tracing::info!(
                    opened = report.opened.len(),
                    closed = report.closed.len(),
                    updated = report.updated.len(),
                    failed = report.failed.len(),
                    "synced userspace listeners"
                );
            }
            Dataplane::NoNodePorts(inner) => {
                synced = Box::pin(inner.sync(&without_node_ports(snapshot), changed)).await?;
            }
        }
        Ok(synced)
    }

    /// Starts the change notifications of the backend's kernel state: its nftables tables, or
    /// the userspace backend's capture table.
    pub fn monitor(&self) -> Option<ChangeMonitor> {
        match self {
            Dataplane::Nft(backend) => Some(backend.monitor()),
            Dataplane::Userspace(proxy) => proxy.capture_monitor(),
            Dataplane::NoNodePorts(inner) => inner.monitor(),
        }
    }

    /// True when the backend holds committed kernel state it can check ([`Dataplane::verify`]).
    pub fn verifiable(&self) -> bool {
        match self {
            Dataplane::Nft(backend) => backend.verifiable(),
            Dataplane::Userspace(proxy) => proxy.capture_verifiable(),
            Dataplane::NoNodePorts(inner) => inner.verifiable(),
        }
    }

    /// What of the kernel's state differs from what the backend last wrote. `full`: compare
    /// every rule and element; otherwise only the tables' chains where that is cheaper (see
    /// [`crate::nft::verify`]).
    pub async fn verify(&mut self, full: bool) -> Result<Vec<Finding>, NftError> {
        match self {
            Dataplane::Nft(backend) if full => backend.verify().await,
            Dataplane::Nft(backend) => backend.verify_chains().await,
            // A few elements per Service: always the full check.
            Dataplane::Userspace(proxy) => proxy.verify_capture().await,
            Dataplane::NoNodePorts(inner) => Box::pin(inner.verify(full)).await,
        }
    }

    /// How many periods apart the full checks may be: one per 20,000 elements of the tables,
    /// at most ten (see [`crate::nft::verify`]).
    pub fn full_check_periods(&self) -> u32 {
        const ELEMENTS_PER_PERIOD: usize = 20_000;
        match self {
            Dataplane::Nft(backend) => {
                let periods = backend.committed_elements() / ELEMENTS_PER_PERIOD;
                u32::try_from(periods.clamp(1, 10)).unwrap_or(10)
            }
            Dataplane::Userspace(_) => 1,
            Dataplane::NoNodePorts(inner) => inner.full_check_periods(),
        }
    }

    /// Writes the state of `families` again as the backend last committed it.
    pub async fn restore(&mut self, families: &[Family]) -> Result<(), NftError> {
        match self {
            Dataplane::Nft(backend) => backend.restore(families).await,
            // One table, family inet: `families` does not apply.
            Dataplane::Userspace(proxy) => proxy.restore_capture().await,
            Dataplane::NoNodePorts(inner) => Box::pin(inner.restore(families)).await,
        }
    }

    /// Removes what the backend added to the node that would outlive the process: the
    /// userspace backend's listeners and capture table. nftables rules stay, so a restarted
    /// proxy finds the node still forwarding.
    pub async fn shutdown(&mut self) {
        match self {
            Dataplane::Nft(_) => {}
            Dataplane::Userspace(proxy) => {
                if let Err(error) = proxy.shutdown().await {
                    tracing::warn!(%error, "capture rules not removed");
                }
            }
            Dataplane::NoNodePorts(inner) => Box::pin(inner.shutdown()).await,
        }
    }
}

/// What a successful sync could not do.
#[derive(Debug, Default)]
pub struct Synced {
    /// Load-balancer frontends not served (a userspace listener whose port is taken, SCTP in
    /// userspace mode); the hand-off does not report them as served.
    pub not_served: ServedFrontends,
    /// Something may work on a later try (a port that was taken): sync again after the retry
    /// interval even if nothing changes.
    pub retry: bool,
    /// The sync rewrote every rule (`Some(false)`: only the changed ports); `None` for the
    /// userspace backend, which has no partial syncs.
    pub full: Option<bool>,
}

/// `snapshot` without NodePorts, externalIPs and health-check node ports.
fn without_node_ports(snapshot: &Snapshot) -> Snapshot {
    let mut kept = snapshot.clone();
    kept.nodeport_addresses.clear();
    kept.health_checks.clear();
    for port in kept.ports.values_mut() {
        port.node_port = None;
        port.external_ips.clear();
    }
    kept
}

/// Timing of the loop.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Minimum time between two syncs.
    pub min_sync_period: Duration,
    /// Retry interval after a failed sync, and the period of the checks of the kernel's
    /// rules (kube-proxy's `--sync-period`).
    pub sync_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            min_sync_period: Duration::from_secs(1),
            sync_period: Duration::from_secs(30),
        }
    }
}

/// A Service as the proxy reads it off the API server: the typed object, after the
/// `spec.topologyKeys` field of the 1.17–1.21 API (seed 002's manifests) was lifted into the
/// `service.kubernetes.io/topology-keys` annotation — typed decoding with today's API types would
/// drop the field silently. The lift is the one `lint` and `reconcile -f` use
/// ([`kube_lb_annotations::lift_topology_keys`]), so the field and the annotation are one input
/// everywhere. A field that cannot be lifted (not a list, or disagreeing with an annotation
/// already set) leaves the object as the annotation says, with a warning.
#[derive(Debug, Clone)]
struct WatchedService(Service);

impl<'de> serde::Deserialize<'de> for WatchedService {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = serde_json::Value::deserialize(deserializer)?;
        if let Err(error) = kube_lb_annotations::lift_topology_keys(&mut value) {
            let name = |field: &str| {
                value
                    .pointer(&format!("/metadata/{field}"))
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            tracing::warn!(service = %format!("{}/{}", name("namespace"), name("name")), %error, "spec.topologyKeys not applied");
        }
        serde_json::from_value(value)
            .map(WatchedService)
            .map_err(serde::de::Error::custom)
    }
}

impl Resource for WatchedService {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        Service::kind(dt)
    }

    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        Service::group(dt)
    }

    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        Service::version(dt)
    }

    fn api_version(dt: &()) -> std::borrow::Cow<'_, str> {
        Service::api_version(dt)
    }

    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        Service::plural(dt)
    }

    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.0.metadata
    }

    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.0.metadata
    }
}

/// A watch event of [`WatchedService`]s as one of the Services it carries.
fn service_change(event: Box<watcher::Event<WatchedService>>) -> Change {
    let event = match *event {
        watcher::Event::Apply(s) => watcher::Event::Apply(s.0),
        watcher::Event::Delete(s) => watcher::Event::Delete(s.0),
        watcher::Event::InitApply(s) => watcher::Event::InitApply(s.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    };
    Change::Service(Box::new(event))
}

/// One watch event of any kind the proxy follows.
enum Change {
    Service(Box<watcher::Event<Service>>),
    Slice(Box<watcher::Event<EndpointSlice>>),
    Endpoints(Box<watcher::Event<Endpoints>>),
    Node(Box<watcher::Event<Node>>),
}

/// Tracks a relist so objects deleted while the watch was down are removed at `InitDone`.
#[derive(Debug, Default)]
struct Relist {
    known: HashSet<(String, String)>,
    listing: Option<HashSet<(String, String)>>,
    synced: bool,
}

type ApplyFn<K> = fn(&mut Index, &K) -> bool;
type DeleteFn = fn(&mut Index, &str, &str) -> bool;

impl Relist {
    /// Applies one event to the index; returns whether the index changed.
    fn handle<K: Resource>(
        &mut self,
        index: &mut Index,
        event: watcher::Event<K>,
        apply: ApplyFn<K>,
        delete: DeleteFn,
    ) -> bool {
        let key = |object: &K| {
            (
                object.meta().namespace.clone().unwrap_or_default(),
                object.meta().name.clone().unwrap_or_default(),
            )
        };
        match event {
            watcher::Event::Apply(object) => {
                self.known.insert(key(&object));
                apply(index, &object)
            }
            watcher::Event::Delete(object) => {
                let key = key(&object);
                self.known.remove(&key);
                delete(index, &key.0, &key.1)
            }
            watcher::Event::Init => {
                self.listing = Some(HashSet::new());
                false
            }
            watcher::Event::InitApply(object) => {
                if let Some(listing) = &mut self.listing {
                    listing.insert(key(&object));
                }
                self.known.insert(key(&object));
                apply(index, &object)
            }
            watcher::Event::InitDone => {
                self.synced = true;
                let listed = self.listing.take().unwrap_or_default();
                let gone: Vec<_> = self.known.difference(&listed).cloned().collect();
                let mut changed = false;
                for (namespace, name) in gone {
                    self.known.remove(&(namespace.clone(), name.clone()));
                    changed |= delete(index, &namespace, &name);
                }
                changed
            }
        }
    }
}

/// The events of one kube-rs watcher, each wrapped by `wrap` into the loop's own change type
/// so several kinds can be merged into one stream (this proxy loop's and the L2 announcer's).
/// Errors are logged under `loop_name` and skipped.
pub(crate) fn watch<K, C>(
    api: Api<K>,
    config: watcher::Config,
    wrap: fn(Box<watcher::Event<K>>) -> C,
    loop_name: &'static str,
) -> impl Stream<Item = C> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    C: Send + 'static,
{
    watcher(api, config).filter_map(move |event| async move {
        match event {
            Ok(event) => Some(wrap(Box::new(event))),
            Err(error) => {
                // The watcher retries with backoff on its own; the next Init relists.
                tracing::warn!(%error, watch = loop_name, "watch error");
                None
            }
        }
    })
}

/// True unless the Node is going away, deleted or tainted by the cluster autoscaler (KEP-3836
/// node eligibility for `/healthz`): the removal part of the shared node rule only, since a
/// node's own health endpoint does not answer for its labels or readiness.
pub fn node_eligible(node: &Node) -> bool {
    crate::l2::election::node_facts(node)
        .being_removed()
        .is_none()
}

/// Everything the loop drives.
#[derive(Debug)]
pub struct Proxy {
    /// Node settings of the index.
    pub index: IndexConfig,
    /// The backend.
    pub dataplane: Dataplane,
    /// Freshness of the rules (shared with the `/healthz` server).
    pub health: Arc<ProxyHealth>,
    /// Health-check node port servers.
    pub service_health: ServiceHealthServers,
    /// Sync pacing.
    pub timing: Timing,
    /// The hand-off with a provider in the same process (`kube-lb up`); `None` on a node.
    pub handoff: Option<Handoff>,
}

/// Load-balancer addresses a provider in the same process assigned, by Service, before the
/// Services' status shows them.
pub type AssignedIngress = std::collections::HashMap<ServiceKey, Vec<std::net::IpAddr>>;

/// The load-balancer frontends (address, port, protocol) the last successful sync programmed.
pub type ServedFrontends = BTreeSet<(std::net::IpAddr, u16, crate::model::Protocol)>;

/// What `kube-lb up`'s provider and dataplane tell each other, so a Service's status shows an
/// address only once connections to it are forwarded: the provider's assignments come in
/// ([`crate::model::Index::set_assigned_ingress`]), and after every successful sync the
/// frontends programmed go out, which the provider waits for before it reports the address.
#[derive(Debug)]
pub struct Handoff {
    /// Assignments, as the provider publishes them.
    pub assigned: tokio::sync::watch::Receiver<AssignedIngress>,
    /// What the rules serve.
    pub served: tokio::sync::watch::Sender<ServedFrontends>,
    /// What the rules serve and forward to at least one endpoint (the others are refused, as
    /// kube-proxy refuses a Service without endpoints): a Service created just before its
    /// EndpointSlice is programmed first without endpoints.
    pub forwarded: tokio::sync::watch::Sender<ServedFrontends>,
}

/// The load-balancer frontends of `snapshot`.
fn served_frontends(snapshot: &crate::model::Snapshot) -> ServedFrontends {
    frontends_where(snapshot, |_| true)
}

/// The load-balancer frontends of `snapshot` that have endpoints.
fn forwarded_frontends(snapshot: &crate::model::Snapshot) -> ServedFrontends {
    frontends_where(snapshot, |model| model.has_endpoints)
}

/// The load-balancer frontends of the ports of `snapshot` that `keep` keeps.
fn frontends_where(
    snapshot: &crate::model::Snapshot,
    keep: impl Fn(&crate::model::ServicePortModel) -> bool,
) -> ServedFrontends {
    snapshot
        .ports
        .values()
        .filter(|model| keep(model))
        .flat_map(|model| {
            model
                .load_balancer_ips
                .iter()
                .map(|ip| (*ip, model.key.port, model.key.protocol))
        })
        .collect()
}

/// Runs the proxy until `shutdown` resolves. Rules are only written once Services, EndpointSlices
/// and Nodes have been listed completely.
pub async fn run(
    client: Client,
    proxy: Proxy,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WatchError> {
    run_with_addresses(client, proxy, None, shutdown).await
}

/// [`run`], with NodePorts served on `nodeport_addresses` (the node's own interface addresses,
/// see [`crate::node_addresses`]) instead of the Node object's status addresses; each change of
/// the addresses is a sync. On `shutdown` the backend removes what it added to the node
/// ([`Dataplane::shutdown`]).
pub async fn run_with_addresses(
    client: Client,
    mut proxy: Proxy,
    mut nodeport_addresses: Option<tokio::sync::watch::Receiver<Vec<std::net::IpAddr>>>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), WatchError> {
    let node_name = proxy.index.node_name.clone();
    let restrict_health_bind = !proxy.index.nodeport_cidrs.is_empty();
    let mut index = Index::new(proxy.index.clone());
    if let Some(handoff) = proxy.handoff.as_mut() {
        index.set_assigned_ingress(handoff.assigned.borrow_and_update().clone());
    }
    let not_ours = format!("!{HEADLESS_LABEL},!{SERVICE_PROXY_NAME_LABEL}");
    let mut changes = futures::stream::select_all([
        watch(
            Api::<WatchedService>::all(client.clone()),
            watcher::Config::default().labels(&not_ours),
            service_change,
            "proxy",
        )
        .boxed(),
        watch(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
            Change::Slice,
            "proxy",
        )
        .boxed(),
        watch(
            Api::<Endpoints>::all(client.clone()),
            watcher::Config::default(),
            Change::Endpoints,
            "proxy",
        )
        .boxed(),
        watch(
            Api::<Node>::all(client),
            watcher::Config::default(),
            Change::Node,
            "proxy",
        )
        .boxed(),
    ]);
    let (mut services, mut slices, mut endpoints, mut nodes) = (
        Relist::default(),
        Relist::default(),
        Relist::default(),
        Relist::default(),
    );
    let mut dirty = false;
    // When the last sync left something to retry (see [`Synced::retry`]): then the snapshot is
    // applied again even if nothing changed.
    let mut retry_at: Option<Instant> = None;
    let mut next_sync = Instant::now();
    // What changed since the last successful sync (`None`: nothing was synced yet). The index
    // keeps the snapshot itself; only the changed ports are compared and rendered.
    let mut unsynced: Option<SnapshotChanges> = None;
    let mut reported_rejections: std::collections::BTreeSet<(ServiceKey, std::net::IpAddr)> =
        std::collections::BTreeSet::new();
    // Someone else's changes to the backend's tables, reported as they happen.
    let mut monitor = proxy.dataplane.monitor();
    // The next check of the kernel's rules; `None` until a sync committed something to check.
    let mut verify_at: Option<Instant> = None;
    // Restores in a row that a check did not yet find intact.
    let mut restores = 0u32;
    // When the next check must be a full one (every rule and element), not the chains only.
    let mut full_check_at = Instant::now();
    // Endpoint changes not yet in the kernel, for network programming latency.
    let started = SystemTime::now();
    let mut triggers: Vec<ProgrammingTrigger> = Vec::new();
    tokio::pin!(shutdown);

    loop {
        let sync_due =
            (dirty || retry_at.is_some()) && services.synced && slices.synced && nodes.synced;
        let wake = match retry_at {
            Some(at) if !dirty => at,
            _ => next_sync,
        };
        tokio::select! {
            () = &mut shutdown => {
                proxy.dataplane.shutdown().await;
                return Ok(());
            }
            changed = async { proxy.handoff.as_mut()?.assigned.changed().await.ok() }, if proxy.handoff.is_some() => {
                match (changed, proxy.handoff.as_mut()) {
                    (Some(()), Some(handoff)) => {
                        let assigned = handoff.assigned.borrow_and_update().clone();
                        if index.set_assigned_ingress(assigned) && !dirty {
                            dirty = true;
                            proxy.health.queued_update();
                        }
                    }
                    // The provider is gone (shutting down): serve what the status shows.
                    _ => proxy.handoff = None,
                }
            }
            change = async { monitor.as_mut()?.next().await }, if monitor.is_some() => {
                match change {
                    None => monitor = None,
                    Some(change) if verify_at.is_some() => {
                        tracing::debug!(event = %change.event, pid = ?change.pid, "nftables rules changed by someone else; checking them");
                        verify_at = Some(Instant::now());
                        full_check_at = Instant::now();
                    }
                    Some(_) => {}
                }
            }
            () = tokio::time::sleep_until(verify_at.unwrap_or_else(Instant::now)), if verify_at.is_some() => {
                let full = Instant::now() >= full_check_at || proxy.health.repair_pending();
                let checked = check_rules(&mut proxy, &mut restores, full).await;
                if full {
                    let periods = proxy.dataplane.full_check_periods();
                    full_check_at = Instant::now() + proxy.timing.sync_period * periods;
                }
                verify_at = Some(checked.next);
                if checked.resync {
                    // The restore was refused: the backend recreates every table from the
                    // Services at the next sync.
                    retry_at = Some(Instant::now() + proxy.timing.sync_period);
                }
            }
            changed = async { nodeport_addresses.as_mut()?.changed().await.ok() }, if nodeport_addresses.is_some() => {
                if changed.is_none() {
                    // The address follower stopped: keep the last addresses.
                    nodeport_addresses = None;
                } else if !dirty {
                    dirty = true;
                    proxy.health.queued_update();
                }
            }
            change = changes.next() => {
                let Some(change) = change else { return Err(WatchError::StreamsEnded) };
                let metrics = proxy.health.metrics();
                let changed = match change {
                    Change::Service(event) => {
                        let changed = services.handle(&mut index, *event, Index::apply_service, Index::delete_service);
                        if changed {
                            metrics.service_changed();
                        }
                        changed
                    }
                    Change::Slice(event) => {
                        let trigger = slice_trigger(&event, started);
                        let changed = slices.handle(&mut index, *event, Index::apply_endpoint_slice, Index::delete_endpoint_slice);
                        if changed {
                            metrics.endpoints_changed();
                            triggers.extend(trigger);
                        }
                        changed
                    }
                    Change::Endpoints(event) => {
                        let changed = endpoints.handle(&mut index, *event, Index::apply_endpoints, Index::delete_endpoints);
                        if changed {
                            metrics.endpoints_changed();
                        }
                        changed
                    }
                    Change::Node(event) => {
                        if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event.as_ref()
                            && node.name_any() == node_name
                        {
                            proxy.health.set_node_eligible(node_eligible(node));
                        }
                        nodes.handle(&mut index, *event, Index::apply_node, |index, _, name| index.delete_node(name))
                    }
                };
                if changed && !dirty {
                    dirty = true;
                    proxy.health.queued_update();
                }
            }
            () = tokio::time::sleep_until(wake), if sync_due => {
                for (service, warning) in index.warnings() {
                    tracing::warn!(%service, %warning, "service not proxied");
                }
                let rejected = index.rejected_endpoints();
                let mut new_rejections = 0;
                for (service, ips) in &rejected {
                    for ip in ips {
                        if reported_rejections.insert((service.clone(), *ip)) {
                            new_rejections += 1;
                            let reason = crate::model::forbidden_endpoint(*ip).unwrap_or_default();
                            tracing::warn!(%service, endpoint = %ip, reason, "endpoint address not programmed");
                        }
                    }
                }
                // Forget what is gone, so an address that comes back is reported again.
                reported_rejections.retain(|(service, ip)| rejected.get(service).is_some_and(|ips| ips.contains(ip)));
                proxy.health.count_rejected_endpoints(new_rejections);
                index.set_nodeport_addresses(
                    nodeport_addresses.as_ref().map(|addresses| addresses.borrow().clone()),
                );
                let sync_began = Instant::now();
                let (snapshot, changes) = index.refresh();
                proxy.health.metrics().sync_started();
                let first = unsynced.is_none();
                let pending = unsynced.get_or_insert_with(SnapshotChanges::default);
                pending.extend(changes);
                if !first && pending.is_empty() && retry_at.is_none() {
                    // Changes that cancel out, or touch fields the dataplane ignores, cost nothing.
                    let now = SystemTime::now();
                    for trigger in triggers.drain(..) {
                        proxy.health.metrics().programmed(trigger, now);
                    }
                    dirty = false;
                    proxy.health.updated();
                    continue;
                }
                match proxy.dataplane.sync(snapshot, (!first).then_some(&pending.ports)).await {
                    Ok(synced) => {
                        let metrics = proxy.health.metrics();
                        let now = SystemTime::now();
                        metrics.synced(sync_began.elapsed(), synced.full, now);
                        for trigger in triggers.drain(..) {
                            metrics.programmed(trigger, now);
                        }
                        metrics.set_no_local_endpoints(&no_local_endpoints(snapshot));
                        if restrict_health_bind {
                            proxy.service_health.set_bind_ips(snapshot.nodeport_addresses.clone());
                        }
                        for (service, error) in proxy.service_health.apply(&snapshot.health_checks).await {
                            tracing::warn!(%service, %error, "health check node port not served");
                        }
                        dirty = false;
                        proxy.health.updated();
                        unsynced = Some(SnapshotChanges::default());
                        next_sync = Instant::now() + proxy.timing.min_sync_period;
                        if let Some(handoff) = &proxy.handoff {
                            let mut served = served_frontends(snapshot);
                            served.retain(|frontend| !synced.not_served.contains(frontend));
                            let mut forwarded = forwarded_frontends(snapshot);
                            forwarded.retain(|frontend| served.contains(frontend));
                            handoff.served.send_replace(served);
                            handoff.forwarded.send_replace(forwarded);
                        }
                        // Not a pending change: health stays as this sync left it.
                        retry_at = synced
                            .retry
                            .then(|| Instant::now() + proxy.timing.sync_period);
                        if proxy.dataplane.verifiable() {
                            let period = proxy.timing.sync_period;
                            if proxy.health.repair_pending() {
                                // A repair waits for a check of what this sync wrote.
                                verify_at = Some(Instant::now());
                            } else {
                                verify_at.get_or_insert_with(|| Instant::now() + period);
                            }
                        }
                    }
                    Err(error) => {
                        // The transaction was refused as a whole: the kernel still holds the
                        // last good ruleset. Name the Services whose change it carried.
                        let services = changed_services((!first).then_some(&*pending), snapshot);
                        if first {
                            unsynced = None;
                        }
                        tracing::error!(
                            %error,
                            services = %summarise(&services),
                            "sync refused; the previous rules stay in place; retrying"
                        );
                        proxy.health.sync_failed();
                        next_sync = Instant::now() + proxy.timing.sync_period;
                    }
                }
            }
        }
    }
}

/// The start of the endpoint change an EndpointSlice event carries ([`programming_trigger`]);
/// a deletion counts from its arrival.
fn slice_trigger(
    event: &watcher::Event<EndpointSlice>,
    started: SystemTime,
) -> Option<ProgrammingTrigger> {
    let (slice, kind) = match event {
        watcher::Event::Apply(slice) => (slice, SliceEvent::Changed),
        watcher::Event::InitApply(slice) => (slice, SliceEvent::Listed),
        watcher::Event::Delete(slice) => (slice, SliceEvent::Deleted),
        watcher::Event::Init | watcher::Event::InitDone => return None,
    };
    programming_trigger(slice, kind, SystemTime::now(), started)
}

/// What a check of the kernel's rules decided.
struct Checked {
    /// When to check next.
    next: Instant,
    /// The backend forgot what it committed (a restore was refused): sync from the Services.
    resync: bool,
}

/// Compares the kernel's rules with what the backend last wrote and restores them where they
/// differ; keeps `/healthz` failing from the difference until a check confirms the restore,
/// and for one `sync_period` after. `restores`: restores in a row not yet confirmed; `full`:
/// compare every rule and element, not only the chains.
async fn check_rules(proxy: &mut Proxy, restores: &mut u32, full: bool) -> Checked {
    let period = proxy.timing.sync_period;
    let later = |resync| Checked {
        next: Instant::now() + period,
        resync,
    };
    if !proxy.dataplane.verifiable() {
        return later(false);
    }
    let findings = match proxy.dataplane.verify(full).await {
        Ok(findings) => findings,
        Err(error) => {
            tracing::warn!(%error, "cannot check the nftables rules; checking again later");
            return later(false);
        }
    };
    if findings.is_empty() {
        if proxy.health.repair_pending() {
            tracing::info!(
                healthy_in = ?period,
                "nftables rules restored and confirmed; /healthz recovers after one sync period"
            );
            proxy.health.repair_confirmed(period);
        }
        *restores = 0;
        return later(false);
    }
    let mut found = Vec::new();
    for finding in &findings {
        let missing = finding.details.join("; ");
        tracing::warn!(
            table = %finding.table,
            reason = %finding.reason,
            %missing,
            "nftables rules differ from what the proxy wrote; restoring them"
        );
        found.push(format!("{} {}: {missing}", finding.table, finding.reason));
    }
    proxy.health.rules_differ(found.join("; "));
    let families: Vec<Family> = findings.iter().map(|finding| finding.family).collect();
    let started = Instant::now();
    match proxy.dataplane.restore(&families).await {
        Ok(()) => {
            for finding in &findings {
                proxy.health.repaired(finding.reason.label());
            }
            tracing::info!(
                restore_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                "nftables rules restored; checking them"
            );
            *restores += 1;
            // Confirm at once. A table that differs again at once (someone keeps deleting it,
            // or a difference no restore removes) is restored less and less often: after
            // min_sync_period, twice that, … up to once per sync period.
            let backoff = proxy
                .timing
                .min_sync_period
                .saturating_mul(1 << (*restores - 1).min(16))
                .min(period);
            let next = if *restores == 1 {
                Instant::now()
            } else {
                Instant::now() + backoff
            };
            Checked {
                next,
                resync: false,
            }
        }
        Err(error) => {
            let error = crate::health::first_lines(&error.to_string(), 3);
            tracing::error!(
                %error,
                "the kernel refused the restored nftables rules; /healthz keeps failing; \
                 recreating them from the Services after the sync period"
            );
            proxy.health.repair_refused(error);
            later(true)
        }
    }
}

/// The Services a sync carried: those of the changed ports since the last successful sync, or
/// every Service of `next` when nothing was synced yet (`None`), sorted.
fn changed_services(
    changes: Option<&SnapshotChanges>,
    next: &crate::model::Snapshot,
) -> Vec<crate::model::ServiceKey> {
    let services: BTreeSet<ServiceKey> = match changes {
        Some(changes) => changes
            .ports
            .iter()
            .map(|key| key.service.clone())
            .collect(),
        None => next.ports.keys().map(|key| key.service.clone()).collect(),
    };
    services.into_iter().collect()
}

/// At most ten names, then how many more (a full sync carries every Service).
fn summarise(services: &[crate::model::ServiceKey]) -> String {
    const SHOWN: usize = 10;
    let mut text = services
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if services.len() > SHOWN {
        text.push_str(&format!(" and {} more", services.len() - SHOWN));
    }
    if text.is_empty() {
        text.push_str("none (node addresses only)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::service;

    #[test]
    fn the_topology_keys_field_reaches_the_proxy_as_the_annotation() {
        let decode = |spec: serde_json::Value, annotations: serde_json::Value| {
            let service: WatchedService = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
                "spec": spec,
            }))
            .expect("a Service decodes whatever its topologyKeys field holds");
            service
                .0
                .annotations()
                .get(crate::model::topology::TOPOLOGY_KEYS_ANNOTATION)
                .cloned()
        };
        let keys = serde_json::json!(["kubernetes.io/hostname", "*"]);
        // Seed 002 as a 1.17–1.21 API server stores it: the field only.
        assert_eq!(
            decode(
                serde_json::json!({"topologyKeys": keys}),
                serde_json::json!({})
            ),
            Some("kubernetes.io/hostname,*".to_string())
        );
        // Field and annotation agree (the embedded API server mirrors one into the other).
        assert_eq!(
            decode(
                serde_json::json!({"topologyKeys": keys}),
                serde_json::json!({"service.kubernetes.io/topology-keys": "kubernetes.io/hostname,*"})
            ),
            Some("kubernetes.io/hostname,*".to_string())
        );
        // A disagreement or a malformed field leaves the annotation in charge.
        assert_eq!(
            decode(
                serde_json::json!({"topologyKeys": ["*"]}),
                serde_json::json!({"service.kubernetes.io/topology-keys": "kubernetes.io/hostname"})
            ),
            Some("kubernetes.io/hostname".to_string())
        );
        assert_eq!(
            decode(
                serde_json::json!({"topologyKeys": "zone"}),
                serde_json::json!({})
            ),
            None
        );
        assert_eq!(decode(serde_json::json!({}), serde_json::json!({})), None);
    }

    #[test]
    fn a_refused_sync_names_the_services_whose_change_it_carried() {
        let mut index = Index::new(IndexConfig {
            node_name: "n1".into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: false,
        });
        index.apply_service(&svc("a", "10.96.0.1"));
        index.apply_service(&svc("b", "10.96.0.2"));
        let (first, changes) = index.refresh();
        let first = first.clone();
        let names = |services: Vec<crate::model::ServiceKey>| {
            services.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        assert_eq!(
            names(changed_services(None, &first)),
            ["default/a", "default/b"]
        );
        assert_eq!(
            names(changed_services(Some(&changes), &first)),
            ["default/a", "default/b"]
        );
        let (_, unchanged) = index.refresh();
        assert!(changed_services(Some(&unchanged), &first).is_empty());
        index.apply_service(&svc("b", "10.96.0.3"));
        index.apply_service(&svc("c", "10.96.0.4"));
        index.delete_service("default", "a");
        let (next, changes) = index.refresh();
        assert_eq!(
            names(changed_services(Some(&changes), next)),
            ["default/a", "default/b", "default/c"]
        );
        let many: Vec<_> = (0..12)
            .map(|i| crate::model::ServiceKey::new("ns", format!("s{i:02}")))
            .collect();
        assert!(
            summarise(&many).ends_with("ns/s09 and 2 more"),
            "{}",
            summarise(&many)
        );
        assert_eq!(summarise(&[]), "none (node addresses only)");
    }

    fn svc(name: &str, ip: &str) -> Service {
        service("default", name, ip).port("", "TCP", 80).build()
    }

    #[test]
    fn relists_remove_what_disappeared_and_report_changes_only() {
        let mut index = Index::new(IndexConfig {
            node_name: "n1".into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: false,
        });
        let mut relist = Relist::default();
        let mut handle = |index: &mut Index, event| relist_handle(&mut relist, index, event);
        assert!(!handle(&mut index, watcher::Event::Init));
        assert!(handle(
            &mut index,
            watcher::Event::InitApply(svc("a", "10.96.0.1"))
        ));
        assert!(handle(
            &mut index,
            watcher::Event::InitApply(svc("b", "10.96.0.2"))
        ));
        assert!(!handle(&mut index, watcher::Event::InitDone));
        assert_eq!(index.snapshot().ports.len(), 2);

        // The watch restarts; "b" was deleted meanwhile and "a" is unchanged.
        assert!(!handle(&mut index, watcher::Event::Init));
        assert!(
            !handle(&mut index, watcher::Event::InitApply(svc("a", "10.96.0.1"))),
            "unchanged object"
        );
        assert!(handle(&mut index, watcher::Event::InitDone), "b is gone");
        assert_eq!(index.snapshot().ports.len(), 1);

        // A relist with nothing new changes nothing.
        assert!(!handle(&mut index, watcher::Event::Init));
        assert!(!handle(
            &mut index,
            watcher::Event::InitApply(svc("a", "10.96.0.1"))
        ));
        assert!(!handle(&mut index, watcher::Event::InitDone));
        assert!(handle(
            &mut index,
            watcher::Event::Delete(svc("a", "10.96.0.1"))
        ));
        assert!(index.snapshot().ports.is_empty());
    }

    fn relist_handle(
        relist: &mut Relist,
        index: &mut Index,
        event: watcher::Event<Service>,
    ) -> bool {
        relist.handle(index, event, Index::apply_service, Index::delete_service)
    }

    #[test]
    fn nodes_being_deleted_are_not_eligible() {
        let mut node = crate::testing::node("n1", "za", "r1", &["10.0.0.1"]);
        assert!(node_eligible(&node));
        node.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
            taints: Some(vec![k8s_openapi::api::core::v1::Taint {
                key: "ToBeDeletedByClusterAutoscaler".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(!node_eligible(&node));
    }
}

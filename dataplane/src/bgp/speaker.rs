//! The speaker loop (feature `watch`): watches what decides this node's routes, recomputes
//! [`desired`](super::desired::desired) on every change, hands the rendered FRR configuration
//! to the daemons when it differs from what they run, and reads back what they actually do
//! (sessions, BFD, the prefixes sent) for metrics, logs and the Services' events.
//!
//! Watched: Services, EndpointSlices, this node's Node object, `IPPool`s, kube-lb's
//! `BGPPeer` / `BGPAdvertisement` / `BFDProfile` and, with `--bgp-metallb-namespace`,
//! MetalLB's. Session passwords are read (`get`, nothing else) from the one Secret the
//! proxy's ServiceAccount may read.
//!
//! Before the dataplane's first sync, while its rules are stale, and from the moment the proxy
//! is asked to stop, the node advertises nothing (sessions stay up): a router must never send
//! traffic to a node that cannot forward it. On stop the withdrawal is applied and given
//! `withdraw_grace` to reach the routers before the loop returns and the dataplane stops, so
//! connections in flight finish on the old rules while new ones go to other nodes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use kube_lb_provider_local::ippool::PoolDef;
use serde_json::Value;
use tokio::time::Instant;

use super::crd::{self, Objects};
use super::daemon::{BfdState, Frr, NeighborState};
use super::desired::{self, DesiredSpeaker, NodeView, PoolView};
use super::frr::{self, RenderContext};
use super::model::{BgpConfig, Origin, SecretKeyRef};
use super::status::{self, SessionStatus};
use crate::health::ProxyHealth;
use crate::l2::election;
use crate::model::ServiceKey;

/// How often changes are folded into a new desired state.
const TICK: Duration = Duration::from_millis(50);
/// How often passwords are read again (a rotated Secret takes effect within this).
const PASSWORD_REFRESH: Duration = Duration::from_secs(30);
/// First wait before applying again after the daemons refused or did not answer.
const RETRY_MIN: Duration = Duration::from_millis(500);
/// Longest wait between attempts.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Settings of the speaker.
#[derive(Debug, Clone)]
pub struct SpeakerConfig {
    /// This node's name.
    pub node_name: String,
    /// Where the daemons are.
    pub frr: Frr,
    /// The BGP router ID; `None`: the Node's first IPv4 InternalIP.
    pub router_id: Option<Ipv4Addr>,
    /// Namespace of MetalLB's objects to import read-only; `None`: MetalLB's kinds are not
    /// read.
    pub metallb_namespace: Option<String>,
    /// How often the daemons' state is read back.
    pub state_interval: Duration,
    /// How long after withdrawing everything on stop the loop waits before returning.
    pub withdraw_grace: Duration,
    /// The dataplane's health (gates advertising).
    pub health: Option<Arc<ProxyHealth>>,
    /// Where the metrics go.
    pub metrics: Arc<BgpMetrics>,
}

/// Errors of the speaker.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    /// All watch streams ended.
    #[error("watch streams ended")]
    StreamsEnded,
}

fn kind_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

enum Change {
    Service(Box<watcher::Event<Service>>),
    Slice(Box<watcher::Event<EndpointSlice>>),
    Node(Box<watcher::Event<Node>>),
    Custom(usize, Box<watcher::Event<DynamicObject>>),
}

/// The custom kinds watched, in a fixed order: IPPools, then (kind, origin) pairs.
struct CustomKinds {
    resources: Vec<(ApiResource, Option<String>)>,
}

const POOLS: usize = 0;

impl CustomKinds {
    fn new(metallb_namespace: Option<&str>) -> Self {
        let mut resources = vec![(
            kind_resource(
                kube_lb_provider_local::ippool::GROUP,
                kube_lb_provider_local::ippool::VERSION,
                kube_lb_provider_local::ippool::KIND,
                kube_lb_provider_local::ippool::PLURAL,
            ),
            None,
        )];
        for kind in [crd::BGP_PEER, crd::BGP_ADVERTISEMENT, crd::BFD_PROFILE] {
            resources.push((
                kind_resource(crd::GROUP, crd::VERSION, kind.kind, kind.plural),
                None,
            ));
        }
        if let Some(namespace) = metallb_namespace {
            for kind in [crd::BGP_PEER, crd::BGP_ADVERTISEMENT, crd::BFD_PROFILE] {
                resources.push((
                    kind_resource(
                        crd::METALLB_GROUP,
                        kind.metallb_version,
                        kind.kind,
                        kind.plural,
                    ),
                    Some(namespace.to_owned()),
                ));
            }
        }
        Self { resources }
    }
}

fn values(store: &Writer<DynamicObject>) -> Vec<Value> {
    let mut objects: Vec<Value> = store
        .as_reader()
        .state()
        .iter()
        .filter_map(|object| serde_json::to_value(object.as_ref()).ok())
        .collect();
    objects.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    objects
}

/// Why this node must advertise nothing now, if it must not: the shared node rule, a
/// cordon, the dataplane's state, or a stop.
pub fn withdrawal(
    node: Option<&Node>,
    dataplane_ready: Result<(), String>,
    stopping: bool,
) -> Option<String> {
    if stopping {
        return Some("the proxy is stopping".to_owned());
    }
    if let Err(reason) = dataplane_ready {
        return Some(reason);
    }
    let node = node?;
    if node.spec.as_ref().and_then(|spec| spec.unschedulable) == Some(true) {
        return Some("the node is cordoned".to_owned());
    }
    kube_lb_provider_core::eligibility::ineligibility(&election::node_facts(node), None)
        .map(|reason| format!("the node may not take load-balancer traffic: {reason}"))
}

fn dataplane_ready(health: Option<&ProxyHealth>, synced_once: &mut bool) -> Result<(), String> {
    let Some(health) = health else { return Ok(()) };
    *synced_once = *synced_once || crate::l2::announcer::has_synced(health);
    if !*synced_once {
        return Err("the dataplane has not synced yet".to_owned());
    }
    if !health.status().healthy {
        return Err("the dataplane's rules are stale".to_owned());
    }
    Ok(())
}

/// The node's first IPv4 InternalIP (then any IPv4 address it reports).
pub fn node_router_id(node: &Node) -> Option<Ipv4Addr> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    let v4 = |type_filter: Option<&str>| {
        addresses
            .iter()
            .filter(|a| type_filter.is_none_or(|t| a.type_ == t))
            .find_map(|a| a.address.parse::<Ipv4Addr>().ok())
    };
    v4(Some("InternalIP")).or_else(|| v4(None))
}

fn password_of(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .map(|text| text.trim_end_matches(['\r', '\n']).to_owned())
}

async fn read_passwords(
    client: &Client,
    wanted: &BTreeSet<SecretKeyRef>,
) -> BTreeMap<SecretKeyRef, String> {
    let mut passwords = BTreeMap::new();
    let mut secrets: BTreeMap<(String, String), Option<Secret>> = BTreeMap::new();
    for reference in wanted {
        let id = (reference.namespace.clone(), reference.name.clone());
        if !secrets.contains_key(&id) {
            let api = Api::<Secret>::namespaced(client.clone(), &reference.namespace);
            let secret = match api.get(&reference.name).await {
                Ok(secret) => Some(secret),
                Err(error) => {
                    tracing::warn!(
                        %error,
                        secret = %format!("{}/{}", reference.namespace, reference.name),
                        "BGP password Secret not readable: its sessions stay shut"
                    );
                    None
                }
            };
            secrets.insert(id.clone(), secret);
        }
        let value = secrets
            .get(&id)
            .and_then(Option::as_ref)
            .and_then(|secret| password_of(secret, &reference.key));
        match value {
            Some(password) => {
                passwords.insert(reference.clone(), password);
            }
            None => tracing::warn!(
                secret = %format!("{}/{}", reference.namespace, reference.name),
                key = %reference.key,
                "BGP password key missing: its session stays shut"
            ),
        }
    }
    passwords
}

/// What was last handed to the daemons, and when to try again after a failure.
#[derive(Debug, Default)]
struct Applied {
    text: Option<String>,
    /// The prefixes and instance AS of the configuration last handed over (what the dead
    /// man's switch must be able to withdraw).
    prefixes: BTreeSet<ipnet::IpNet>,
    asn: Option<u32>,
    generation: u64,
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// Runs the speaker until `shutdown` completes, then withdraws every route, waits
/// `withdraw_grace` and returns.
pub async fn run(
    client: Client,
    config: SpeakerConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), SpeakerError> {
    let node_name = config.node_name.clone();
    let kinds = CustomKinds::new(config.metallb_namespace.as_deref());
    let mut streams = vec![
        crate::watch::watch(
            Api::<Service>::all(client.clone()),
            watcher::Config::default(),
            Change::Service,
            "bgp",
        )
        .boxed(),
        crate::watch::watch(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
            Change::Slice,
            "bgp",
        )
        .boxed(),
        crate::watch::watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            Change::Node,
            "bgp",
        )
        .boxed(),
    ];
    let mut custom: Vec<Writer<DynamicObject>> = Vec::new();
    for (index, (resource, namespace)) in kinds.resources.iter().enumerate() {
        let api = match namespace {
            Some(namespace) => {
                Api::<DynamicObject>::namespaced_with(client.clone(), namespace, resource)
            }
            None => Api::<DynamicObject>::all_with(client.clone(), resource),
        };
        let stream = watcher(api, watcher::Config::default()).filter_map(move |event| async move {
            match event {
                Ok(event) => Some(Change::Custom(index, Box::new(event))),
                Err(error) => {
                    tracing::warn!(%error, watch = "bgp", "watch error");
                    None
                }
            }
        });
        streams.push(stream.boxed());
        custom.push(Writer::new(resource.clone()));
    }
    let mut changes = futures::stream::select_all(streams);
    let mut services = Writer::<Service>::default();
    let mut slices = Writer::<EndpointSlice>::default();
    let mut nodes = Writer::<Node>::default();
    // The built-in kinds must be listed before anything is advertised; custom kinds may be
    // missing (no CRD installed reads as nothing configured), so they do not block.
    let mut synced = [false; 3];
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "kube-lb-proxy".into(),
            instance: Some(node_name.clone()),
        },
    );

    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut state_tick = tokio::time::interval(config.state_interval);
    state_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut dirty = true;
    let mut stopping = false;
    let mut synced_once = false;
    let mut last_withdrawal: Option<Option<String>> = None;
    let mut passwords: BTreeMap<SecretKeyRef, String> = BTreeMap::new();
    let mut passwords_read: Option<(Instant, BTreeSet<SecretKeyRef>)> = None;
    let mut applied = Applied {
        generation: config.frr.last_generation().await.unwrap_or(0),
        ..Applied::default()
    };
    let _heartbeat = AbortOnDrop(tokio::spawn(heartbeat(config.frr.clone())));
    let mut fired = config.frr.deadman_fired().await;
    let mut desired_now = DesiredSpeaker::default();
    let mut reported = Reported::default();
    let mut last_problems: Vec<String> = Vec::new();
    let mut written_valid: BTreeMap<(String, String), Value> = BTreeMap::new();
    tokio::pin!(shutdown);

    loop {
        tokio::select! {
            () = &mut shutdown, if !stopping => {
                tracing::info!(node = %node_name, "stopping: withdrawing every BGP route first");
                stopping = true;
                dirty = true;
            }
            change = changes.next() => {
                let Some(change) = change else { return Err(SpeakerError::StreamsEnded) };
                match change {
                    Change::Service(event) => { synced[0] |= matches!(*event, watcher::Event::InitDone); services.apply_watcher_event(&event) }
                    Change::Slice(event) => { synced[1] |= matches!(*event, watcher::Event::InitDone); slices.apply_watcher_event(&event) }
                    Change::Node(event) => { synced[2] |= matches!(*event, watcher::Event::InitDone); nodes.apply_watcher_event(&event) }
                    Change::Custom(index, event) => custom[index].apply_watcher_event(&event),
                }
                dirty = true;
            }
            _ = state_tick.tick() => {
                read_state(&config, &desired_now, &recorder, &services, &mut reported).await;
                write_session_status(&client, &kinds, &config.node_name, &desired_now, &mut reported).await;
            }
            _ = tick.tick() => {
                let now = Instant::now();
                let ready = dataplane_ready(config.health.as_deref(), &mut synced_once);
                let node = nodes.as_reader().state().into_iter().find(|n| n.name_any() == node_name);
                let withdrawn = withdrawal(node.as_deref(), ready, stopping);
                if last_withdrawal.as_ref() != Some(&withdrawn) {
                    match &withdrawn {
                        Some(reason) => tracing::info!(node = %node_name, %reason, "advertising nothing"),
                        None => tracing::info!(node = %node_name, "advertising"),
                    }
                    last_withdrawal = Some(withdrawn.clone());
                    dirty = true;
                }
                let fired_now = config.frr.deadman_fired().await;
                if fired_now != fired {
                    // FRR withdrew everything while this proxy was stalled: hand the
                    // configuration over again.
                    tracing::warn!("FRR's dead man's switch fired: applying the configuration again");
                    fired = fired_now;
                    applied.text = None;
                    dirty = true;
                }
                let retry_due = applied.retry_at.is_some_and(|at| now >= at);
                let passwords_due = passwords_read.as_ref().is_some_and(|(at, _)| now.saturating_duration_since(*at) >= PASSWORD_REFRESH);
                if !synced.iter().all(|s| *s) {
                    if stopping {
                        // Nothing was ever handed to the daemons: nothing to withdraw.
                        break;
                    }
                    continue;
                }
                if !(dirty || retry_due || passwords_due) {
                    continue;
                }
                dirty = false;
                let bgp = read_config(&custom, config.metallb_namespace.is_some());
                let problems: Vec<String> = bgp.problems.iter().map(|p| format!("{} {} {}: {}", p.kind, p.name, p.field, p.message)).collect();
                if problems != last_problems {
                    for problem in &problems {
                        tracing::warn!(%problem, "BGP configuration problem: the object (or its field) is left out");
                    }
                    last_problems = problems;
                }
                config.metrics.state().config_problems = bgp.problems.len();
                write_valid_conditions(&client, &kinds, &custom, &bgp, &mut written_valid).await;
                let pools = pools(&custom[POOLS]);
                let service_objects = services.as_reader().state();
                let slice_objects = slices.as_reader().state();
                let claims = election::claims(
                    &service_objects.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                    &slice_objects.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                );
                let view = NodeView {
                    name: node_name.clone(),
                    labels: node.as_ref().map(|n| n.labels().clone()).unwrap_or_default(),
                    withdrawn,
                };
                let router_id = config.router_id.or_else(|| node.as_deref().and_then(node_router_id));
                // One session per neighbour address: of peers sharing one for this node, the
                // first is kept (the others are named in the log).
                let mut bgp = bgp;
                let dropped: BTreeSet<String> = crd::conflicts(&bgp, &view.labels).into_iter().map(|p| { tracing::warn!(problem = %p.message, peer = %p.name, "BGP peer left out on this node"); p.name }).collect();
                bgp.peers.retain(|peer| !dropped.contains(&peer.name));
                desired_now = desired::desired(&bgp, &pools, &claims, &view, router_id);
                let wanted: BTreeSet<SecretKeyRef> = desired_now.sessions.iter().filter_map(|s| s.password().cloned()).collect();
                let stale = passwords_read.as_ref().is_none_or(|(at, read)| read != &wanted || now.saturating_duration_since(*at) >= PASSWORD_REFRESH);
                if stale {
                    passwords = read_passwords(&client, &wanted).await;
                    passwords_read = Some((now, wanted));
                }
                let text = frr::render(&desired_now, &RenderContext { hostname: node_name.clone(), passwords: passwords.clone() });
                if applied.text.as_deref() == Some(text.as_str()) && applied.retry_at.is_none() {
                    if stopping {
                        break;
                    }
                    continue;
                }
                apply(&config, &mut applied, text, &desired_now).await;
                if stopping {
                    if applied.retry_at.is_none() {
                        tracing::info!(grace = ?config.withdraw_grace, "routes withdrawn; waiting for the routers before the dataplane stops");
                        tokio::time::sleep(config.withdraw_grace).await;
                    } else {
                        // The daemons cannot be reached: nothing more can be withdrawn from
                        // here (BFD and the hold timer take the routes away when the node goes).
                        tracing::warn!("could not withdraw the BGP routes; stopping anyway");
                    }
                    break;
                }
            }
        }
    }
    Ok(())
}

async fn apply(
    config: &SpeakerConfig,
    applied: &mut Applied,
    text: String,
    desired: &DesiredSpeaker,
) {
    let generation = applied.generation + 1;
    let started = std::time::Instant::now();
    let prefixes: BTreeSet<ipnet::IpNet> = desired.routes.keys().copied().collect();
    let asn = frr::instance_asn(desired);
    // While the hand-over runs, the switch must cover what was announced and what is about
    // to be: a crash in between leaves no prefix behind.
    let mut both = applied.prefixes.clone();
    both.extend(prefixes.iter().copied());
    let deadman = |asn, prefixes| frr::withdrawal_commands(asn, prefixes);
    if let Err(error) = config
        .frr
        .write_deadman(&deadman(applied.asn.or(asn), &both))
        .await
    {
        tracing::warn!(%error, "dead man's switch not updated");
    }
    match config.frr.apply(&text, generation).await {
        Ok(()) => {
            tracing::info!(generation, took = ?started.elapsed(), "FRR configuration applied");
            if let Err(error) = config.frr.write_deadman(&deadman(asn, &prefixes)).await {
                tracing::warn!(%error, "dead man's switch not updated");
            }
            applied.text = Some(text);
            applied.prefixes = prefixes;
            applied.asn = asn;
            applied.generation = generation;
            applied.retry_at = None;
            applied.backoff = Duration::ZERO;
            config.metrics.state().reloads_ok += 1;
        }
        Err(error) => {
            applied.generation = generation;
            applied.prefixes = both;
            applied.backoff = (applied.backoff * 2).clamp(RETRY_MIN, RETRY_MAX);
            applied.retry_at = Some(Instant::now() + applied.backoff);
            tracing::error!(%error, retry_in = ?applied.backoff, "FRR configuration not applied");
            config.metrics.state().reloads_failed += 1;
        }
    }
}

/// Beats every [`HEARTBEAT_INTERVAL`](super::daemon::HEARTBEAT_INTERVAL) until dropped.
async fn heartbeat(frr: Frr) {
    let mut interval = tokio::time::interval(super::daemon::HEARTBEAT_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    for beat in 1u64.. {
        interval.tick().await;
        match frr.beat(beat).await {
            Ok(()) => warned = false,
            Err(error) if !warned => {
                tracing::warn!(%error, "BGP heartbeat not written: FRR withdraws this node's routes");
                warned = true;
            }
            Err(_) => {}
        }
    }
}

/// Aborts the task it holds when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn read_config(custom: &[Writer<DynamicObject>], with_metallb: bool) -> BgpConfig {
    let kube_lb: Vec<Vec<Value>> = custom[1..4].iter().map(values).collect();
    let metallb: Vec<Vec<Value>> = if with_metallb {
        custom[4..7].iter().map(values).collect()
    } else {
        vec![Vec::new(), Vec::new(), Vec::new()]
    };
    crd::read_all(
        Objects {
            peers: &kube_lb[0],
            advertisements: &kube_lb[1],
            bfd_profiles: &kube_lb[2],
        },
        Objects {
            peers: &metallb[0],
            advertisements: &metallb[1],
            bfd_profiles: &metallb[2],
        },
    )
}

fn pools(store: &Writer<DynamicObject>) -> Vec<PoolView> {
    store
        .as_reader()
        .state()
        .iter()
        .map(|object| PoolView {
            def: PoolDef::from_json(&object.name_any(), &object.data["spec"]),
            labels: object.labels().clone(),
        })
        .collect()
}

/// Which peers the daemons have sent each Service's prefixes to, as last reported.
#[derive(Debug, Default)]
struct Reported {
    by_service: BTreeMap<ServiceKey, BTreeSet<String>>,
    sessions: BTreeMap<String, bool>,
    /// Peer name → bgpd's state and last reset reason, as last read.
    neighbors: BTreeMap<String, (String, Option<String>)>,
    /// Peer name → the session status last written.
    written: BTreeMap<String, SessionStatus>,
}

async fn read_state(
    config: &SpeakerConfig,
    desired: &DesiredSpeaker,
    recorder: &Recorder,
    services: &Writer<Service>,
    reported: &mut Reported,
) {
    let neighbors = match config.frr.neighbors().await {
        Ok(neighbors) => neighbors,
        Err(error) => {
            tracing::debug!(%error, "BGP state not readable");
            return;
        }
    };
    let bfd = config.frr.bfd_peers().await.unwrap_or_default();
    let snapshot = PeerSnapshot::of(desired, &neighbors, &bfd);
    for (peer, up) in &snapshot.session_up {
        if reported.sessions.get(peer) != Some(up) {
            tracing::info!(peer = %peer, up, state = %snapshot.state.get(peer).map_or("", String::as_str), "BGP session");
        }
    }
    reported.sessions = snapshot.session_up.clone();
    reported.neighbors = desired
        .sessions
        .iter()
        .map(|session| {
            let neighbor = neighbors.get(&session.peer.address);
            (
                session.peer.name.clone(),
                (
                    neighbor.map_or_else(|| "Unknown".to_owned(), |n| n.state.clone()),
                    neighbor.and_then(|n| n.last_reset.clone()),
                ),
            )
        })
        .collect();
    let by_service = snapshot.peers_by_service(desired);
    let service_objects = services.as_reader().state();
    for (service, peers) in &by_service {
        if reported.by_service.get(service) == Some(peers) {
            continue;
        }
        if let Some(object) = service_objects.iter().find(|s| {
            s.namespace().as_deref() == Some(service.namespace.as_str())
                && s.name_any() == service.name
        }) {
            let note = if peers.is_empty() {
                format!(
                    "node {} advertises no route for it: no peer has it",
                    config.node_name
                )
            } else {
                let list: Vec<&str> = peers.iter().map(String::as_str).collect();
                format!(
                    "node {} advertises it over BGP; sent to {}",
                    config.node_name,
                    list.join(", ")
                )
            };
            let event = Event {
                type_: if peers.is_empty() {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: if peers.is_empty() {
                    "BGPNotAdvertised"
                } else {
                    "BGPAdvertised"
                }
                .into(),
                note: Some(note),
                action: "Advertise".into(),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&event, &object.object_ref(&())).await {
                tracing::debug!(%error, "event not written");
            }
        }
    }
    reported.by_service = by_service;
    *config.metrics.peers() = snapshot;
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Writes the `Valid` condition of each kube-lb object whose stored one differs (see
/// [`status::valid_patch`]); each patch once until the object changes.
async fn write_valid_conditions(
    client: &Client,
    kinds: &CustomKinds,
    custom: &[Writer<DynamicObject>],
    bgp: &BgpConfig,
    written: &mut BTreeMap<(String, String), Value>,
) {
    let now = now_rfc3339();
    for (index, kind) in [crd::BGP_PEER, crd::BGP_ADVERTISEMENT, crd::BFD_PROFILE]
        .iter()
        .enumerate()
    {
        let (resource, _) = &kinds.resources[index + 1];
        let api = Api::<DynamicObject>::all_with(client.clone(), resource);
        for object in custom[index + 1].as_reader().state() {
            let name = object.name_any();
            let problems = crd::problems_of(&bgp.problems, kind.kind, Origin::KubeLb, &name);
            let Ok(value) = serde_json::to_value(object.as_ref()) else {
                continue;
            };
            let Some(patch) = status::valid_patch(&value, &problems, &now) else {
                continue;
            };
            let key = (kind.kind.to_owned(), name.clone());
            let condition = patch["status"]["conditions"][0].clone();
            let mut unchanged = condition.clone();
            unchanged["lastTransitionTime"] = Value::Null;
            if written.get(&key) == Some(&unchanged) {
                continue;
            }
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    written.insert(key, unchanged);
                }
                Err(error) => {
                    tracing::debug!(%error, kind = kind.kind, %name, "Valid condition not written")
                }
            }
        }
    }
}

/// Writes this node's entry of `status.sessions` on each kube-lb `BGPPeer` whose session
/// changed.
async fn write_session_status(
    client: &Client,
    kinds: &CustomKinds,
    node: &str,
    desired: &DesiredSpeaker,
    reported: &mut Reported,
) {
    let (resource, _) = &kinds.resources[1];
    let api = Api::<DynamicObject>::all_with(client.clone(), resource);
    let now = now_rfc3339();
    for session in desired
        .sessions
        .iter()
        .filter(|s| s.peer.origin == Origin::KubeLb)
    {
        let name = &session.peer.name;
        let Some((state, reset)) = reported.neighbors.get(name) else {
            continue;
        };
        let wanted = status::session_status(&session.peer, state, reset.as_deref());
        if reported.written.get(name) == Some(&wanted) {
            continue;
        }
        let patch = status::session_patch(node, &wanted, &now);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                if !wanted.established {
                    tracing::warn!(peer = %name, message = %wanted.message, "BGP session down");
                }
                reported.written.insert(name.clone(), wanted);
            }
            Err(error) => tracing::debug!(%error, peer = %name, "session status not written"),
        }
    }
}

/// The daemons' state per peer, as last read: what the metrics show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerSnapshot {
    /// Peer name → the peer's address.
    pub address: BTreeMap<String, IpAddr>,
    /// Peer name → session established.
    pub session_up: BTreeMap<String, bool>,
    /// Peer name → bgpd's state name.
    pub state: BTreeMap<String, String>,
    /// Peer name → BFD up, for sessions with BFD.
    pub bfd_up: BTreeMap<String, bool>,
    /// Peer name → prefixes bgpd has sent.
    pub advertised: BTreeMap<String, BTreeSet<String>>,
    /// Peer name → prefixes kube-lb asked for.
    pub desired: BTreeMap<String, BTreeSet<String>>,
}

impl PeerSnapshot {
    /// The snapshot of `neighbors` and `bfd` for the sessions of `desired`.
    pub fn of(
        desired: &DesiredSpeaker,
        neighbors: &BTreeMap<IpAddr, NeighborState>,
        bfd: &BTreeMap<IpAddr, BfdState>,
    ) -> Self {
        let mut snapshot = Self::default();
        for session in &desired.sessions {
            let name = session.peer.name.clone();
            let address = session.peer.address;
            let neighbor = neighbors.get(&address);
            snapshot.address.insert(name.clone(), address);
            snapshot
                .session_up
                .insert(name.clone(), neighbor.is_some_and(|n| n.established));
            snapshot.state.insert(
                name.clone(),
                neighbor.map_or_else(|| "Unknown".to_owned(), |n| n.state.clone()),
            );
            if session.bfd.is_some() {
                snapshot.bfd_up.insert(
                    name.clone(),
                    bfd.get(&address).is_some_and(|b| b.status == "up"),
                );
            }
            snapshot.advertised.insert(
                name.clone(),
                neighbor
                    .filter(|n| n.established)
                    .map(|n| n.advertised.iter().cloned().collect())
                    .unwrap_or_default(),
            );
            snapshot.desired.insert(
                name.clone(),
                desired
                    .routes
                    .iter()
                    .filter(|(_, route)| route.peers.contains_key(&name))
                    .map(|(prefix, _)| prefix.to_string())
                    .collect(),
            );
        }
        snapshot
    }

    /// Per Service of `desired`, the peers bgpd has actually sent one of its prefixes to.
    pub fn peers_by_service(
        &self,
        desired: &DesiredSpeaker,
    ) -> BTreeMap<ServiceKey, BTreeSet<String>> {
        let mut by_service: BTreeMap<ServiceKey, BTreeSet<String>> = BTreeMap::new();
        for (prefix, route) in &desired.routes {
            let prefix = prefix.to_string();
            for service in &route.services {
                let peers = by_service.entry(service.clone()).or_default();
                for (peer, sent) in &self.advertised {
                    if sent.contains(&prefix) {
                        peers.insert(peer.clone());
                    }
                }
            }
        }
        by_service
    }
}

/// The speaker's metrics, rendered as Prometheus text by [`BgpMetrics::text`]. Names follow
/// MetalLB's (`metallb_bgp_session_up`, `metallb_bgp_announced_prefixes_total`) under the
/// `kube_lb_` prefix.
#[derive(Debug, Default)]
pub struct BgpMetrics {
    state: Mutex<MetricsState>,
    peers: Mutex<PeerSnapshot>,
}

#[derive(Debug, Default)]
struct MetricsState {
    reloads_ok: u64,
    reloads_failed: u64,
    config_problems: usize,
}

fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl BgpMetrics {
    fn state(&self) -> std::sync::MutexGuard<'_, MetricsState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, PeerSnapshot> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The daemons' state per peer, as last read.
    pub fn snapshot(&self) -> PeerSnapshot {
        self.peers().clone()
    }

    /// Prometheus text exposition.
    pub fn text(&self) -> String {
        let peers = self.peers().clone();
        let state = self.state();
        let mut text = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
            text.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, value) in rows {
                text.push_str(&format!("{name}{labels} {value}\n"));
            }
        };
        let label = |peer: &str| {
            let address = peers
                .address
                .get(peer)
                .map(ToString::to_string)
                .unwrap_or_default();
            format!(
                "{{peer=\"{}\",address=\"{}\"}}",
                escape(peer),
                escape(&address)
            )
        };
        family(
            "kube_lb_bgp_session_up",
            "gauge",
            "1 while the BGP session with the peer is established (bgpd's own state).",
            peers
                .session_up
                .iter()
                .map(|(p, up)| (label(p), u64::from(*up)))
                .collect(),
        );
        family(
            "kube_lb_bgp_bfd_session_up",
            "gauge",
            "1 while the BFD session with the peer is up (bfdd's own state); sessions with BFD only.",
            peers
                .bfd_up
                .iter()
                .map(|(p, up)| (label(p), u64::from(*up)))
                .collect(),
        );
        family(
            "kube_lb_bgp_announced_prefixes_total",
            "gauge",
            "Prefixes bgpd has sent to the peer (read back from the daemon, not what kube-lb asked).",
            peers
                .advertised
                .iter()
                .map(|(p, s)| (label(p), s.len() as u64))
                .collect(),
        );
        family(
            "kube_lb_bgp_desired_prefixes",
            "gauge",
            "Prefixes kube-lb asked the daemon to send to the peer.",
            peers
                .desired
                .iter()
                .map(|(p, s)| (label(p), s.len() as u64))
                .collect(),
        );
        family(
            "kube_lb_bgp_config_reloads_total",
            "counter",
            "FRR configuration hand-overs, by result.",
            vec![
                ("{result=\"success\"}".to_owned(), state.reloads_ok),
                ("{result=\"failure\"}".to_owned(), state.reloads_failed),
            ],
        );
        family(
            "kube_lb_bgp_config_problems",
            "gauge",
            "BGPPeer, BGPAdvertisement and BFDProfile fields left out as invalid.",
            vec![(String::new(), state.config_problems as u64)],
        );
        text
    }
}

/// Serves `/metrics` with the speaker's metrics on `listener` until the task is dropped.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Arc<BgpMetrics>,
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

#[cfg(test)]
mod tests;

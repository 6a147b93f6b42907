//! `kube-lb proxy`: the node dataplane. Watches Services, EndpointSlices, Endpoints and Nodes,
//! keeps the dataplane index, and programs nftables or the userspace proxy on every real change.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use futures::{Stream, StreamExt};
use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Endpoints, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use kube_lb_dataplane::health::{self, ProxyHealth, ServiceHealthServers};
use kube_lb_dataplane::model::{
    HEADLESS_LABEL, Index, IndexConfig, SERVICE_PROXY_NAME_LABEL, Snapshot,
};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::userspace::{Scheduler, UserspaceConfig, UserspaceProxy};
use tokio::time::Instant;

/// Which dataplane programs the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One nftables table per family, updated in one transaction per change.
    Nftables,
    /// tokio listeners on every frontend address (no kernel rules).
    Userspace,
}

/// Arguments of `kube-lb proxy`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kube-lb proxy --node-name $(hostname) --mode nftables --nodeport-addresses 10.0.0.0/8"
)]
pub struct Args {
    /// Name of this node (its Node object gives addresses and topology labels).
    #[arg(long, env = "KUBE_LB_NODE_NAME")]
    pub node_name: String,

    /// Dataplane backend.
    #[arg(long, value_enum, default_value_t = Mode::Nftables)]
    pub mode: Mode,

    /// Only node addresses inside these CIDRs accept NodePorts (comma separated; default: all).
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Vec<IpNet>,

    /// Endpoint scheduler: rr, random or sh (nftables); rr, lc, dh, sh, sed, nq or random (userspace).
    #[arg(long, default_value = "random")]
    pub scheduler: String,

    /// Address of the node health server (`/healthz`, `/livez`).
    #[arg(long, default_value = "0.0.0.0:10256")]
    pub healthz_addr: SocketAddr,

    /// Kubeconfig to use instead of the in-cluster configuration.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Pod CIDRs: ClusterIP traffic from outside them is masqueraded (default: all of it).
    #[arg(long, value_delimiter = ',')]
    pub cluster_cidr: Vec<IpNet>,

    /// Minimum time between two syncs (changes in between are batched).
    #[arg(long, default_value = "1s")]
    pub min_sync_period: humantime::Duration,

    /// Retry interval after a failed sync; health fails after twice this with pending changes.
    #[arg(long, default_value = "30s")]
    pub sync_period: humantime::Duration,

    /// nftables table name (both families).
    #[arg(long, default_value = "kube-lb")]
    pub nft_table: String,

    /// Run nft and conntrack inside this network namespace (testing and debugging).
    #[arg(long)]
    pub netns: Option<String>,

    /// Idle timeout of userspace UDP sessions.
    #[arg(long, default_value = "30s")]
    pub udp_idle_timeout: humantime::Duration,
}

/// The programmed backend.
enum Dataplane {
    Nft(Box<NftBackend>),
    Userspace(UserspaceProxy),
}

impl Dataplane {
    fn new(args: &Args) -> anyhow::Result<Self> {
        Ok(match args.mode {
            Mode::Nftables => {
                let scheduler = match args.scheduler.as_str() {
                    "random" => NftScheduler::Random,
                    "rr" => NftScheduler::RoundRobin,
                    "sh" => NftScheduler::SourceHash,
                    other => anyhow::bail!(
                        "scheduler {other:?} is not available in nftables mode (use random, rr or sh)"
                    ),
                };
                let config = NftConfig {
                    table: args.nft_table.clone(),
                    scheduler,
                    cluster_cidrs: args.cluster_cidr.clone(),
                };
                let commands = match &args.netns {
                    Some(netns) => Commands::in_netns(netns),
                    None => Commands::default(),
                };
                Dataplane::Nft(Box::new(NftBackend::new(config, commands)))
            }
            Mode::Userspace => {
                let scheduler: Scheduler = args.scheduler.parse().map_err(anyhow::Error::msg)?;
                Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
                    scheduler,
                    udp_idle_timeout: args.udp_idle_timeout.into(),
                    ..UserspaceConfig::default()
                }))
            }
        })
    }

    async fn sync(&mut self, snapshot: &Snapshot) -> anyhow::Result<()> {
        match self {
            Dataplane::Nft(backend) => {
                let report = backend.sync(snapshot).await?;
                for warning in &report.warnings {
                    tracing::warn!(%warning, "service port not programmed");
                }
                tracing::info!(
                    full = report.full,
                    commands = report.commands,
                    nft_ms = report.nft_time.as_millis() as u64,
                    conntrack_deletions = report.conntrack_deletions,
                    "synced nftables"
                );
            }
            Dataplane::Userspace(proxy) => {
                let report = proxy.apply(snapshot).await;
                for key in &report.skipped_sctp {
                    tracing::warn!(service = %key, "SCTP is not proxied by the userspace backend");
                }
                tracing::info!(
                    opened = report.opened.len(),
                    closed = report.closed.len(),
                    updated = report.updated.len(),
                    failed = report.failed.len(),
                    "synced userspace listeners"
                );
            }
        }
        Ok(())
    }
}

/// One watch event of any kind the proxy follows.
enum Change {
    Service(Box<watcher::Event<Service>>),
    Slice(Box<watcher::Event<EndpointSlice>>),
    Endpoints(Box<watcher::Event<Endpoints>>),
    Node(Box<watcher::Event<Node>>),
}

/// Tracks a relist so objects deleted while the watch was down are removed at `InitDone`.
#[derive(Default)]
struct Relist {
    known: HashSet<(String, String)>,
    listing: Option<HashSet<(String, String)>>,
    synced: bool,
}

impl Relist {
    /// Applies one event through `apply`/`delete`; returns whether the index changed.
    fn handle<K: Resource>(
        &mut self,
        index: &mut Index,
        event: watcher::Event<K>,
        apply: fn(&mut Index, &K) -> bool,
        delete: fn(&mut Index, &str, &str) -> bool,
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

fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    wrap: fn(Box<watcher::Event<K>>) -> Change,
) -> impl Stream<Item = Change> + Send
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config).filter_map(move |event| async move {
        match event {
            Ok(event) => Some(wrap(Box::new(event))),
            Err(error) => {
                // The watcher retries on its own; the next Init relists.
                tracing::warn!(%error, "watch error");
                None
            }
        }
    })
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(
                kubeconfig,
                &kube::config::KubeConfigOptions::default(),
            )
            .await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and no in-cluster configuration")?,
    };
    Ok(Client::try_from(config)?)
}

/// True unless the Node is being deleted (KEP-3836 node eligibility for `/healthz`).
fn node_eligible(node: &Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|taint| taint.key == "ToBeDeletedByClusterAutoscaler")
        });
    node.metadata.deletion_timestamp.is_none() && !tainted
}

/// Runs `kube-lb proxy`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut dataplane = Dataplane::new(&args)?;
    let client = client(args.kubeconfig.as_ref()).await?;
    let sync_period: Duration = args.sync_period.into();
    let min_sync_period: Duration = args.min_sync_period.into();
    let health = ProxyHealth::new(sync_period * 2);
    let healthz = tokio::net::TcpListener::bind(args.healthz_addr)
        .await
        .with_context(|| format!("binding the health server to {}", args.healthz_addr))?;
    tracing::info!(addr = %healthz.local_addr()?, "serving /healthz and /livez");
    let node_health = tokio::spawn(health::serve_node_health(healthz, health.clone()));
    let mut service_health = ServiceHealthServers::new(health.clone(), Vec::new());

    let mut index = Index::new(IndexConfig {
        node_name: args.node_name.clone(),
        nodeport_cidrs: args.nodeport_addresses.clone(),
    });
    let not_ours = format!("!{HEADLESS_LABEL},!{SERVICE_PROXY_NAME_LABEL}");
    let mut changes = futures::stream::select_all([
        watch(
            Api::<Service>::all(client.clone()),
            watcher::Config::default().labels(&not_ours),
            Change::Service,
        )
        .boxed(),
        watch(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default(),
            Change::Slice,
        )
        .boxed(),
        watch(
            Api::<Endpoints>::all(client.clone()),
            watcher::Config::default(),
            Change::Endpoints,
        )
        .boxed(),
        watch(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            Change::Node,
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
    let mut next_sync = Instant::now();
    let mut last_snapshot: Option<Snapshot> = None;
    let shutdown = super::wait_for_signal();
    tokio::pin!(shutdown);
    tracing::info!(node = %args.node_name, mode = ?args.mode, "proxy started");

    loop {
        let ready = services.synced && slices.synced && nodes.synced;
        let sync_due = dirty && ready;
        tokio::select! {
            _ = &mut shutdown => break,
            change = changes.next() => {
                let Some(change) = change else { anyhow::bail!("watch streams ended") };
                let changed = match change {
                    Change::Service(event) => services.handle(&mut index, *event, Index::apply_service, Index::delete_service),
                    Change::Slice(event) => slices.handle(&mut index, *event, Index::apply_endpoint_slice, Index::delete_endpoint_slice),
                    Change::Endpoints(event) => endpoints.handle(&mut index, *event, Index::apply_endpoints, Index::delete_endpoints),
                    Change::Node(event) => {
                        if let watcher::Event::Apply(node) | watcher::Event::InitApply(node) = event.as_ref()
                            && node.name_any() == args.node_name
                        {
                            health.set_node_eligible(node_eligible(node));
                        }
                        nodes.handle(&mut index, *event, Index::apply_node, |index, _, name| index.delete_node(name))
                    }
                };
                if changed && !dirty {
                    dirty = true;
                    health.queued_update();
                }
            }
            _ = tokio::time::sleep_until(next_sync), if sync_due => {
                for (service, warning) in index.warnings() {
                    tracing::warn!(%service, %warning, "service not proxied");
                }
                let snapshot = index.snapshot();
                if last_snapshot.as_ref() == Some(&snapshot) {
                    // Changes that cancel out (or only touch unused fields) cost nothing.
                    dirty = false;
                    health.updated();
                    continue;
                }
                match dataplane.sync(&snapshot).await {
                    Ok(()) => {
                        service_health.set_bind_ips(if args.nodeport_addresses.is_empty() { Vec::new() } else { snapshot.nodeport_addresses.clone() });
                        for (service, error) in service_health.apply(&snapshot.health_checks).await {
                            tracing::warn!(%service, %error, "health check node port not served");
                        }
                        dirty = false;
                        health.updated();
                        last_snapshot = Some(snapshot);
                        next_sync = Instant::now() + min_sync_period;
                    }
                    Err(error) => {
                        tracing::error!(error = format!("{error:#}"), "sync failed; retrying");
                        next_sync = Instant::now() + sync_period;
                    }
                }
            }
        }
    }
    node_health.abort();
    tracing::info!("proxy stopped; nftables rules stay in place for a restart");
    Ok(ExitCode::SUCCESS)
}

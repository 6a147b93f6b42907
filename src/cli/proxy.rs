//! `kube-lb proxy`: the node dataplane. Watches Services, EndpointSlices, Endpoints and Nodes,
//! keeps the dataplane index, and programs nftables or the userspace proxy on every real change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ipnet::IpNet;
use kube::Client;
use kube_lb_dataplane::bgp::speaker as bgp;
use kube_lb_dataplane::health::{self, ProxyHealth, ServiceHealthServers};
use kube_lb_dataplane::l2::announcer as l2;
use kube_lb_dataplane::maglev::TableSize;
use kube_lb_dataplane::model::IndexConfig;
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::node_addresses::{self, AddressSource};
use kube_lb_dataplane::userspace::capture::{self, CaptureConfig};
use kube_lb_dataplane::userspace::{Scheduler, UserspaceConfig, UserspaceProxy};
use kube_lb_dataplane::watch::{self, Dataplane, Proxy, Timing};

/// Which dataplane programs the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One nftables table per family, updated in one transaction per change.
    Nftables,
    /// tokio listeners; ClusterIP, load-balancer and external IP traffic is captured by a small
    /// nftables table (`--capture-table`) and redirected to them, NodePorts are bound directly.
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

    /// Only the node's interface addresses inside these CIDRs accept NodePorts (comma separated;
    /// default: every local address; `127.0.0.0/8`: loopback only). Followed while running.
    #[arg(long, value_delimiter = ',')]
    pub nodeport_addresses: Vec<IpNet>,

    /// Endpoint scheduler. nftables: random (default), rr, sh or maglev; userspace: rr (default,
    /// as the seeds describe the userspace proxy), lc, dh, sh, sed, nq, random or maglev. maglev
    /// (both modes) hashes the client address and port into a Maglev table, so every node picks
    /// the same endpoint for a flow.
    #[arg(long)]
    pub scheduler: Option<String>,

    /// Entries of each Maglev lookup table (a prime; --scheduler maglev). One endpoint change
    /// moves at most 1/N + 2 % of the flows while this is ~400 × the largest Service's endpoint
    /// count N (4093: up to 10 endpoints; 16381: up to ~160); an nftables update rewrites ~size/N
    /// map elements, and each endpoint group of 2+ endpoints holds this many.
    #[arg(long, default_value_t = TableSize::default())]
    pub maglev_table_size: TableSize,

    /// Most UDP sessions one Service port holds at once in userspace mode; datagrams of further
    /// clients are dropped (counted in kube_lb_proxy_udp_sessions_refused_total) until sessions
    /// idle out.
    #[arg(long, default_value_t = kube_lb_dataplane::userspace::DEFAULT_UDP_SESSIONS_PER_SERVICE)]
    pub udp_sessions_per_service: usize,

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
    /// Also the period of the checks that the kernel still holds the rules the proxy wrote
    /// (nftables mode; `nft monitor` triggers one at once when someone else changes them): a
    /// difference is restored, counted in kube_lb_dataplane_repairs_total{reason}, and fails
    /// /healthz until one period after the restore was confirmed.
    #[arg(long, default_value = "30s")]
    pub sync_period: humantime::Duration,

    /// nftables table name (both families).
    #[arg(long, default_value = "kube-lb")]
    pub nft_table: String,

    /// Run nft and conntrack inside this network namespace (testing and debugging).
    #[arg(long)]
    pub netns: Option<String>,

    /// nftables table (family inet) of the userspace mode's capture rules; deleted when the
    /// proxy stops and recreated when it starts.
    #[arg(long, default_value = capture::DEFAULT_TABLE)]
    pub capture_table: String,

    /// Idle timeout of userspace UDP sessions.
    #[arg(long, default_value = "30s")]
    pub udp_idle_timeout: humantime::Duration,

    /// Threads forwarding userspace traffic, each with its own SO_REUSEPORT socket per frontend
    /// (default: one per CPU, at most 4).
    #[arg(long)]
    pub userspace_workers: Option<std::num::NonZeroUsize>,

    /// Engine relaying userspace TCP connections: `auto` (the default) takes `uring` when this
    /// kernel allows it (io_uring present, not turned off by kernel.io_uring_disabled or a
    /// seccomp filter, 5.19 or later) and `epoll` otherwise; `uring` insists on it (an error at
    /// start where it cannot run); `epoll` is tokio's event loop. `uring` is one io_uring ring per
    /// worker thread with accepts, receives, sends and closes as ring requests and no epoll: less
    /// CPU per connection and a lower p99 (see bench/RESULTS.md). UDP always uses epoll. The
    /// engine in use, and why, is logged at start.
    #[arg(long, default_value = "auto", value_name = "auto|uring|epoll")]
    pub userspace_engine: kube_lb_dataplane::userspace::UserspaceEngine,

    /// Layer-2 announcement: answer ARP (IPv4) and NDP (IPv6) for the load-balancer addresses
    /// this node is elected for, on `--l2-interface`, and take them over when their node fails.
    /// For bare-metal clusters whose addresses come from local pools.
    #[arg(long)]
    pub l2_announce: bool,

    /// Interfaces to announce on (with --l2-announce): an interface name or a regular
    /// expression matched against whole names, e.g. `eth0` or `en.*|bond0`.
    #[arg(long, value_name = "NAME|REGEX")]
    pub l2_interface: Option<String>,

    /// Namespace of the per-node announcer leases (one Lease per node, whatever the number of
    /// Services).
    #[arg(long, default_value = "kube-lb-system")]
    pub l2_lease_namespace: String,

    /// How often this node renews its announcer lease.
    #[arg(long, default_value = "500ms")]
    pub l2_renew_interval: humantime::Duration,

    /// How long after its last renewal a node's lease counts as live: its addresses move about
    /// this long after the node fails. Every node should use the same value.
    #[arg(long, default_value = "1500ms")]
    pub l2_lease_duration: humantime::Duration,

    /// Address of the Layer-2 announcer's `/metrics` (kube_lb_l2_announcing{service,ip,interface}).
    #[arg(long, default_value = "0.0.0.0:10259")]
    pub l2_metrics_addr: SocketAddr,

    /// BGP announcement: advertise the load-balancer addresses this node may take traffic for
    /// to the routers named by BGPPeer objects (kube-lb.io/v1alpha1, or metallb.io with
    /// --bgp-metallb-namespace), through FRR running beside the proxy (bgpd, bfdd and
    /// frr-reloader.sh, see deploy/components/bgp-frr). Cluster Services are advertised from
    /// every eligible node, Local ones from nodes with a ready endpoint; a cordoned or excluded
    /// node, and a stopping proxy, withdraw first.
    #[arg(long)]
    pub bgp: bool,

    /// Directory shared with FRR's reloader (with --bgp): kube-lb.conf is written there.
    #[arg(long, default_value = "/etc/frr")]
    pub bgp_frr_conf_dir: std::path::PathBuf,

    /// Directory of FRR's VTY sockets (with --bgp): the daemons' state is read there.
    #[arg(long, default_value = "/var/run/frr")]
    pub bgp_frr_vty_dir: std::path::PathBuf,

    /// BGP router ID (with --bgp; default: the Node's first IPv4 InternalIP).
    #[arg(long)]
    pub bgp_router_id: Option<std::net::Ipv4Addr>,

    /// Also read MetalLB's BGPPeer, BGPAdvertisement and BFDProfile objects in this namespace
    /// (read-only, each logged with a warning), so a cluster can move over without rewriting
    /// them.
    #[arg(long, value_name = "NAMESPACE")]
    pub bgp_metallb_namespace: Option<String>,

    /// How long a stopping proxy waits after withdrawing its routes before its dataplane stops
    /// (the routers move new connections away meanwhile; established ones keep working).
    #[arg(long, default_value = "2s")]
    pub bgp_withdraw_grace: humantime::Duration,

    /// Address of the BGP speaker's `/metrics` (kube_lb_bgp_session_up{peer,address}, ...).
    #[arg(long, default_value = "0.0.0.0:10260")]
    pub bgp_metrics_addr: SocketAddr,
}

/// The scheduler of a mode when `--scheduler` is not given: random in nftables mode (what
/// kube-proxy's nftables and iptables modes do) and round robin in userspace mode (the seeds: "by
/// default, kube-proxy in userspace mode chooses a backend via a round-robin algorithm").
pub fn default_scheduler(mode: Mode) -> &'static str {
    match mode {
        Mode::Nftables => "random",
        Mode::Userspace => "rr",
    }
}

fn dataplane(args: &Args, health: &ProxyHealth) -> anyhow::Result<Dataplane> {
    Ok(match args.mode {
        Mode::Nftables => {
            let scheduler = match args
                .scheduler
                .as_deref()
                .unwrap_or(default_scheduler(Mode::Nftables))
            {
                "random" => NftScheduler::Random,
                "rr" => NftScheduler::RoundRobin,
                "sh" => NftScheduler::SourceHash,
                "maglev" => NftScheduler::Maglev(args.maglev_table_size),
                other => anyhow::bail!(
                    "scheduler {other:?} is not available in nftables mode (use random, rr, sh or maglev)"
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
            let scheduler: Scheduler = args
                .scheduler
                .as_deref()
                .unwrap_or(default_scheduler(Mode::Userspace))
                .parse()
                .map_err(anyhow::Error::msg)?;
            let scheduler = match scheduler {
                Scheduler::Maglev(_) => Scheduler::Maglev(args.maglev_table_size),
                other => other,
            };
            let defaults = UserspaceConfig::default();
            let engine = args
                .userspace_engine
                .resolve()
                .map_err(anyhow::Error::msg)?;
            tracing::info!(engine = %engine.engine, requested = %args.userspace_engine, reason = %engine.reason, "userspace TCP engine");
            Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
                engine: engine.engine,
                capture: Some(CaptureConfig {
                    table: args.capture_table.clone(),
                    nft: vec!["nft".into()],
                }),
                scheduler,
                udp_idle_timeout: args.udp_idle_timeout.into(),
                workers: args.userspace_workers.unwrap_or(defaults.workers),
                udp_sessions_per_service: args.udp_sessions_per_service,
                refused_udp_sessions: health.refused_udp_sessions(),
                ..defaults
            }))
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

/// Starts the Layer-2 announcer (`--l2-announce`) and its metrics server.
async fn start_l2(
    args: &Args,
    client: Client,
    health: std::sync::Arc<ProxyHealth>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), l2::L2Error>>> {
    let selector = args
        .l2_interface
        .as_deref()
        .context("--l2-announce needs --l2-interface (an interface name or regex)")?;
    let interfaces = l2::interface_selector(selector).context("--l2-interface")?;
    let metrics = std::sync::Arc::new(l2::L2Metrics::default());
    let listener = tokio::net::TcpListener::bind(args.l2_metrics_addr)
        .await
        .with_context(|| {
            format!(
                "binding the layer-2 metrics server to {}",
                args.l2_metrics_addr
            )
        })?;
    tracing::info!(addr = %listener.local_addr()?, "serving layer-2 /metrics");
    tokio::spawn(l2::serve_metrics(listener, metrics.clone()));
    let config = l2::L2Config {
        node_name: args.node_name.clone(),
        interfaces,
        lease_namespace: args.l2_lease_namespace.clone(),
        renew_interval: args.l2_renew_interval.into(),
        lease_duration: args.l2_lease_duration.into(),
        health: Some(health),
        metrics,
    };
    tracing::info!(interfaces = %selector, lease_namespace = %config.lease_namespace, "layer-2 announcement on");
    Ok(tokio::spawn(async move {
        // Reported when it happens, not only when the proxy stops.
        let result = l2::run(client, config, shutdown).await;
        if let Err(error) = &result {
            tracing::error!(%error, "layer-2 announcer stopped: this node announces nothing");
        }
        result
    }))
}

/// Starts the BGP speaker (`--bgp`) and its metrics server.
async fn start_bgp(
    args: &Args,
    client: Client,
    health: std::sync::Arc<ProxyHealth>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), bgp::SpeakerError>>> {
    let metrics = std::sync::Arc::new(bgp::BgpMetrics::default());
    let listener = tokio::net::TcpListener::bind(args.bgp_metrics_addr)
        .await
        .with_context(|| {
            format!(
                "binding the BGP metrics server to {}",
                args.bgp_metrics_addr
            )
        })?;
    tracing::info!(addr = %listener.local_addr()?, "serving BGP /metrics");
    tokio::spawn(bgp::serve_metrics(listener, metrics.clone()));
    let config = bgp::SpeakerConfig {
        node_name: args.node_name.clone(),
        frr: kube_lb_dataplane::bgp::daemon::Frr {
            conf_dir: args.bgp_frr_conf_dir.clone(),
            vty_dir: args.bgp_frr_vty_dir.clone(),
            reload_timeout: Duration::from_secs(10),
        },
        router_id: args.bgp_router_id,
        metallb_namespace: args.bgp_metallb_namespace.clone(),
        state_interval: Duration::from_secs(1),
        withdraw_grace: args.bgp_withdraw_grace.into(),
        health: Some(health),
        metrics,
    };
    tracing::info!(conf_dir = %args.bgp_frr_conf_dir.display(), "BGP announcement on");
    Ok(tokio::spawn(async move {
        let result = bgp::run(client, config, shutdown).await;
        if let Err(error) = &result {
            tracing::error!(%error, "BGP speaker stopped: this node advertises nothing new");
        }
        result
    }))
}

/// Runs `kube-lb proxy`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let sync_period: Duration = args.sync_period.into();
    let health = ProxyHealth::new(sync_period * 2);
    let dataplane = dataplane(&args, &health)?;
    let client = client(args.kubeconfig.as_ref()).await?;
    let healthz = tokio::net::TcpListener::bind(args.healthz_addr)
        .await
        .with_context(|| format!("binding the health server to {}", args.healthz_addr))?;
    tracing::info!(addr = %healthz.local_addr()?, "serving /healthz and /livez");
    let node_health = tokio::spawn(health::serve_node_health(healthz, health.clone()));

    let proxy = Proxy {
        index: IndexConfig {
            node_name: args.node_name.clone(),
            nodeport_cidrs: args.nodeport_addresses.clone(),
            allow_loopback_endpoints: false,
        },
        dataplane,
        health: health.clone(),
        service_health: ServiceHealthServers::new(health.clone(), Vec::new()),
        timing: Timing {
            min_sync_period: args.min_sync_period.into(),
            sync_period,
        },
        handoff: None,
    };
    // The userspace sockets live in this process's namespace; `--netns` only moves nft there.
    let address_source = match (&args.netns, args.mode) {
        (Some(netns), Mode::Nftables) => AddressSource::Netns(netns.clone()),
        _ => AddressSource::Local,
    };
    let addresses = node_addresses::follow(
        address_source,
        args.nodeport_addresses.clone(),
        node_addresses::DEFAULT_POLL,
    )
    .await
    .context("reading the node's interface addresses for NodePorts")?;
    tracing::info!(node = %args.node_name, mode = ?args.mode, "proxy started");
    let l2_health = health.clone();
    // A signal first stops the BGP speaker, which withdraws this node's routes and waits for
    // the routers to move new connections away; then the dataplane loop and the announcer.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (stop_bgp, bgp_stopped) = tokio::sync::watch::channel(false);
    let stopped_future = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let speaker = if args.bgp {
        Some(start_bgp(&args, client.clone(), health, stopped_future(bgp_stopped)).await?)
    } else {
        None
    };
    tokio::spawn(async move {
        super::wait_for_signal().await;
        let _ = stop_bgp.send(true);
        if let Some(speaker) = speaker {
            match speaker.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "BGP speaker"),
                Err(error) => tracing::warn!(%error, "BGP speaker task"),
            }
        }
        let _ = stop.send(true);
    });
    let announcer = if args.l2_announce {
        Some(
            start_l2(
                &args,
                client.clone(),
                l2_health,
                stopped_future(stopped.clone()),
            )
            .await?,
        )
    } else {
        None
    };
    let result = watch::run_with_addresses(
        client,
        proxy,
        Some(addresses.subscribe()),
        stopped_future(stopped),
    )
    .await;
    node_health.abort();
    if let Some(announcer) = announcer {
        announcer.await.context("layer-2 announcer")??;
    }
    result?;
    match args.mode {
        Mode::Nftables => {
            tracing::info!("proxy stopped; nftables rules stay in place for a restart")
        }
        Mode::Userspace => {
            tracing::info!("proxy stopped; listeners closed and capture rules removed")
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_scheduler_per_mode_follows_the_seeds() {
        let cases = [(Mode::Nftables, "random"), (Mode::Userspace, "rr")];
        for (mode, want) in cases {
            assert_eq!(default_scheduler(mode), want, "{mode:?}");
        }
        let userspace: Scheduler = default_scheduler(Mode::Userspace).parse().unwrap();
        assert_eq!(userspace, Scheduler::RoundRobin);
    }
}

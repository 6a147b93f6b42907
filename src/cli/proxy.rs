//! `kube-lb proxy`: the node dataplane. Watches Services, EndpointSlices, Endpoints and Nodes,
//! keeps the dataplane index, and programs nftables or the userspace proxy on every real change.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use ipnet::IpNet;
use kube::Client;
use kube_lb_dataplane::health::{self, ProxyHealth, ServiceHealthServers};
use kube_lb_dataplane::model::IndexConfig;
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::userspace::{Scheduler, UserspaceConfig, UserspaceProxy};
use kube_lb_dataplane::watch::{self, Dataplane, Proxy, Timing};

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

    /// Endpoint scheduler. nftables: random (default), rr or sh; userspace: rr (default, as the
    /// seeds describe the userspace proxy), lc, dh, sh, sed, nq or random.
    #[arg(long)]
    pub scheduler: Option<String>,

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

    /// Threads forwarding userspace traffic, each with its own SO_REUSEPORT socket per frontend
    /// (default: one per CPU, at most 4).
    #[arg(long)]
    pub userspace_workers: Option<std::num::NonZeroUsize>,
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

fn dataplane(args: &Args) -> anyhow::Result<Dataplane> {
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
            let scheduler: Scheduler = args
                .scheduler
                .as_deref()
                .unwrap_or(default_scheduler(Mode::Userspace))
                .parse()
                .map_err(anyhow::Error::msg)?;
            let defaults = UserspaceConfig::default();
            Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
                scheduler,
                udp_idle_timeout: args.udp_idle_timeout.into(),
                workers: args.userspace_workers.unwrap_or(defaults.workers),
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

/// Runs `kube-lb proxy`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let dataplane = dataplane(&args)?;
    let client = client(args.kubeconfig.as_ref()).await?;
    let sync_period: Duration = args.sync_period.into();
    let health = ProxyHealth::new(sync_period * 2);
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
        service_health: ServiceHealthServers::new(health, Vec::new()),
        timing: Timing {
            min_sync_period: args.min_sync_period.into(),
            sync_period,
        },
    };
    tracing::info!(node = %args.node_name, mode = ?args.mode, "proxy started");
    let result = watch::run(client, proxy, super::wait_for_signal()).await;
    node_health.abort();
    result?;
    tracing::info!("proxy stopped; nftables rules stay in place for a restart");
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

//! `kube-lb up`: everything on this machine — the embedded API server, the controller with the
//! `local` provider, and a dataplane serving each load-balancer address: the nftables backend
//! when this process may program nftables (root, `nft` on the PATH), the userspace backend
//! (TCP and UDP, round robin over the Service's ready endpoints) otherwise.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use kube_lb_annotations::Cloud;
use kube_lb_apiserver::ApiServer;
use kube_lb_provider_core::CallCounter;
use kube_lb_provider_local::{DEFAULT_POOL, IpRange, LocalLoadBalancers};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controller::{ControllerConfig, LoadBalancerController, Outcome};
use crate::metrics::Metrics;
use crate::{cloud, demo, manifests};

/// Arguments of `kube-lb up`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  kube-lb up --demo\n  kube-lb up -f examples/local/")]
pub struct Args {
    /// Manifest file or directory to apply at start; repeatable (`-` reads stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,

    /// Also start three echo backends on loopback and example Services for them.
    #[arg(long)]
    pub demo: bool,

    /// Address of the embedded API server (port 0 picks a free one).
    #[arg(long, env = "KUBE_LB_UP_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// Where to write the kubeconfig for kubectl.
    #[arg(long, env = "KUBE_LB_UP_KUBECONFIG")]
    pub kubeconfig_out: Option<PathBuf>,

    /// Keep the API server's objects in this file between runs.
    #[arg(long)]
    pub state_file: Option<PathBuf>,

    /// Address ranges for load balancers: CIDRs or FIRST-LAST, comma separated.
    #[arg(long, env = "KUBE_LB_LOCAL_POOL", value_delimiter = ',', default_value = DEFAULT_POOL)]
    pub local_pool: Vec<IpRange>,

    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "KUBE_LB_METRICS_ADDR", default_value = "127.0.0.1:10258")]
    pub metrics_addr: SocketAddr,

    /// Backend forwarding load-balancer addresses. auto: nftables when running as root with a
    /// working `nft`, userspace otherwise.
    #[arg(long, value_enum, default_value_t = DataplaneChoice::Auto)]
    pub dataplane: DataplaneChoice,

    /// nftables table (both families) of the nftables backend, deleted when `up` stops.
    #[arg(long, default_value = UP_NFT_TABLE)]
    pub nft_table: String,
}

/// `--dataplane` of `kube-lb up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DataplaneChoice {
    /// nftables if it can be programmed here, userspace otherwise.
    Auto,
    /// The nftables backend (fails at start if `nft` cannot program this machine).
    Nftables,
    /// The userspace backend.
    Userspace,
}

/// Default nftables table of `up`; not the proxy's, so both can run side by side.
pub const UP_NFT_TABLE: &str = "kube-lb-up";

/// What running `nft list tables` here told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NftProbe {
    /// It listed the tables: this process can program nftables.
    Usable,
    /// No `nft` program on the PATH.
    Missing,
    /// `nft` ran and failed (not root, no CAP_NET_ADMIN, no nf_tables); its message.
    Refused(String),
}

/// The backend `up` runs, and why, for the line it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// True for nftables, false for userspace.
    pub nftables: bool,
    /// Why, in a few words.
    pub reason: String,
}

/// Picks the backend from `--dataplane` and what probing `nft` found; an error when nftables is
/// demanded but unusable.
pub fn choose_dataplane(requested: DataplaneChoice, probe: &NftProbe) -> anyhow::Result<Chosen> {
    let unusable = match probe {
        NftProbe::Usable => None,
        NftProbe::Missing => Some("nft not found on the PATH".to_string()),
        NftProbe::Refused(message) => Some(format!("nft cannot program this machine: {message}")),
    };
    Ok(match (requested, unusable) {
        (DataplaneChoice::Userspace, _) => Chosen {
            nftables: false,
            reason: "--dataplane userspace".into(),
        },
        (DataplaneChoice::Nftables, Some(why)) => anyhow::bail!("--dataplane nftables: {why}"),
        (DataplaneChoice::Nftables, None) => Chosen {
            nftables: true,
            reason: "--dataplane nftables".into(),
        },
        (DataplaneChoice::Auto, None) => Chosen {
            nftables: true,
            reason: "nft is usable here".into(),
        },
        (DataplaneChoice::Auto, Some(why)) => Chosen {
            nftables: false,
            reason: why,
        },
    })
}

/// Runs `nft list tables`: it needs the same privilege as programming rules, and changes nothing.
async fn probe_nft() -> NftProbe {
    let output = tokio::process::Command::new("nft")
        .args(["list", "tables"])
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match output {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => NftProbe::Missing,
        Err(error) => NftProbe::Refused(error.to_string()),
        Ok(output) if output.status.success() => NftProbe::Usable,
        Ok(output) => NftProbe::Refused(
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .next()
                .unwrap_or("failed")
                .trim()
                .to_string(),
        ),
    }
}

/// Deletes `up`'s nftables tables; a table that is not there is fine.
async fn remove_nft_tables(table: &str) {
    for family in ["ip", "ip6"] {
        let result = tokio::process::Command::new("nft")
            .args(["delete", "table", family, table])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
        if let Err(error) = result {
            tracing::warn!(%error, family, table, "removing the nftables table");
        }
    }
}

/// The address `--demo` pins `demo/echo-pinned` to: the 100th address of the first range
/// when that range is IPv4 and large enough, otherwise none is pinned.
fn pinned_demo_ip(pool: &[IpRange]) -> IpAddr {
    let first = pool.first().map(ToString::to_string).unwrap_or_default();
    match first
        .split('-')
        .next()
        .and_then(|s| s.parse::<Ipv4Addr>().ok())
    {
        Some(start) => IpAddr::V4(Ipv4Addr::from(u32::from(start).saturating_add(99))),
        None => IpAddr::V4(Ipv4Addr::new(127, 240, 0, 100)),
    }
}

/// Runs `kube-lb up` until Ctrl-C.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let shutdown = CancellationToken::new();
    // The demo backends listen on loopback, which kube-apiserver refuses as an endpoint.
    let mut builder = ApiServer::builder()
        .listen(args.listen)
        .allow_loopback_endpoints(true);
    if let Some(path) = &args.state_file {
        builder = builder.state_file(path);
    }
    let server = builder
        .start()
        .await
        .context("starting the embedded API server")?;
    let kubeconfig = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("kube-lb-up.kubeconfig"));
    server
        .write_kubeconfig(&kubeconfig)
        .context("writing the kubeconfig")?;
    println!("API server:  {}", server.url());
    println!("kubeconfig:  {}", kubeconfig.display());
    println!(
        "try:         KUBECONFIG={} kubectl get svc -A -w",
        kubeconfig.display()
    );

    // Address pools can be applied with -f or kubectl; none keeps the --local-pool ranges.
    server
        .apply_manifests(crate::controller::pools::IPPOOL_CRD)
        .context("installing the IPPool CRD")?;
    let applied = apply_files(&server, &args.files)?;
    let has_node = applied.iter().any(|o| o["kind"] == "Node")
        || server
            .get_value("v1", "Node", None, demo::NODE_NAME)
            .is_some();
    if !has_node {
        server
            .seed(demo::node())
            .context("creating the local Node")?;
    }
    if args.demo {
        let (port, listeners) = demo::bind_backends()
            .await
            .context("starting the demo echo backends")?;
        demo::serve_backends(listeners, shutdown.clone());
        let objects = demo::objects(port, pinned_demo_ip(&args.local_pool))
            .context("reading the demo's EndpointSlice template")?;
        for object in objects {
            server
                .apply_manifests(&object.to_string())
                .context("creating the demo objects")?;
        }
        println!(
            "demo:        echo backends on {} port {port}; Services demo/echo and demo/echo-pinned",
            demo::BACKEND_IPS.map(|ip| ip.to_string()).join(", ")
        );
        // No endpoints controller runs here: show the slice written by hand in its place.
        println!(
            "demo:        no endpoints controller runs; demo/echo's backends come from this hand-written EndpointSlice:\n---\n{}---",
            demo::endpoint_slice_yaml("echo", port)
        );
    }

    let chosen = choose_dataplane(args.dataplane, &probe_nft().await)?;
    if chosen.nftables {
        println!(
            "dataplane:   nftables (table {}; {})",
            args.nft_table, chosen.reason
        );
    } else {
        println!("dataplane:   userspace ({})", chosen.reason);
    }

    let client = server.client().context("building a client")?;
    let counter = CallCounter::new();
    let metrics = Arc::new(Metrics::new());
    metrics.observe_calls(&counter);
    let provider = cloud::local_provider(args.local_pool.clone(), counter)?;
    let local = provider
        .local
        .clone()
        .context("the local provider was not built")?;
    metrics.track_pools(local.clone());
    let mut config = ControllerConfig::new(Cloud::Local);
    config.identity = "kube-lb-up".to_string();
    let controller =
        LoadBalancerController::new(client.clone(), provider.provider, config, metrics.clone())
            .retry_pending_on(local.changes());
    let outcomes = controller.outcomes();
    let (_leading_tx, leading) = watch::channel(true);
    let pools_task = tokio::spawn(crate::controller::pools::run(
        client.clone(),
        local.clone(),
        leading.clone(),
        "kube-lb-up".to_string(),
        shutdown.clone(),
    ));
    let (_ready_tx, ready) = watch::channel(true);
    let (metrics_addr, metrics_server) =
        crate::health::serve(args.metrics_addr, metrics, ready, shutdown.clone())
            .await
            .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    println!("metrics:     http://{metrics_addr}/metrics");
    println!("Press Ctrl-C to stop.\n");

    // Before the controller runs: no address is reported before the dataplane forwards it.
    let (handoff, handoff_task) = crate::cli::up_handoff::connect(&local, shutdown.clone());
    let controller_task = tokio::spawn(controller.run(leading, shutdown.clone()));
    let dataplane_task = tokio::spawn(run_dataplane(
        client,
        chosen.nftables.then(|| args.nft_table.clone()),
        handoff,
        shutdown.clone(),
    ));
    let printer = tokio::spawn(print_changes(local.subscribe(), outcomes, shutdown.clone()));

    crate::cli::wait_for_signal().await;
    println!("\nshutting down");
    shutdown.cancel();
    let controller_result = controller_task.await;
    match dataplane_task.await {
        Ok(Err(error)) => tracing::error!(error = %error, "the dataplane stopped"),
        Err(error) => tracing::error!(error = %error, "the dataplane task failed"),
        Ok(Ok(())) => {}
    }
    if chosen.nftables {
        remove_nft_tables(&args.nft_table).await;
    }
    let _ = printer.await;
    let _ = handoff_task.await;
    let _ = pools_task.await;
    let _ = metrics_server.await;
    server.shutdown().await;
    match controller_result {
        Ok(Ok(())) => Ok(ExitCode::SUCCESS),
        Ok(Err(error)) => Err(error).context("controller failed"),
        Err(error) => Err(error).context("controller task failed"),
    }
}

fn apply_files(
    server: &kube_lb_apiserver::RunningApiServer,
    files: &[String],
) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut applied = Vec::new();
    for manifest in manifests::read(files)? {
        let objects = server
            .apply_manifests(&manifest.text)
            .with_context(|| format!("applying {}", manifest.source.display()))?;
        applied.extend(objects);
    }
    Ok(applied)
}

/// Prints each Service as it gets (or changes) its address, and every user error once.
async fn print_changes(
    mut lbs: watch::Receiver<LocalLoadBalancers>,
    mut outcomes: watch::Receiver<crate::controller::Outcomes>,
    shutdown: CancellationToken,
) {
    let mut shown: BTreeSet<String> = BTreeSet::new();
    loop {
        let lines: Vec<String> = {
            let lbs = lbs.borrow_and_update();
            let outcomes = outcomes.borrow_and_update();
            let mut lines: Vec<String> = lbs
                .iter()
                .map(|(service, lb)| {
                    let ports: Vec<String> = lb
                        .ports
                        .iter()
                        .map(|p| format!("{}/{:?}", p.port, p.protocol).to_uppercase())
                        .collect();
                    let hint = lb
                        .ports
                        .first()
                        .map(|p| format!("   curl http://{}/", SocketAddr::new(lb.ip, p.port)))
                        .unwrap_or_default();
                    format!("{service:<32} {:<16} {}{hint}", lb.ip, ports.join(","))
                })
                .collect();
            lines.extend(outcomes.iter().filter_map(|(name, outcome)| match outcome {
                Outcome::UserError(text) => Some(format!("{name:<32} error: {text}")),
                _ => None,
            }));
            lines
        };
        for line in lines {
            if shown.insert(line.clone()) {
                println!("{line}");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = lbs.changed() => if changed.is_err() { return },
            changed = outcomes.changed() => if changed.is_err() { return },
        }
    }
}

/// The dataplane of `up`: a backend of `kube-lb proxy` serving the `local` provider's
/// load-balancer addresses. NodePorts and externalIPs are left alone: they would capture ports and
/// addresses of this machine that no cluster owns. The userspace backend listens on the
/// load-balancer addresses only; the nftables backend (in `nft_table`, when given) also answers
/// the embedded API server's ClusterIPs, addresses from its Service range that nothing else here
/// uses.
async fn run_dataplane(
    client: kube::Client,
    nft_table: Option<String>,
    handoff: kube_lb_dataplane::watch::Handoff,
    shutdown: CancellationToken,
) -> Result<(), kube_lb_dataplane::watch::WatchError> {
    use kube_lb_dataplane::health::{ProxyHealth, ServiceHealthServers};
    use kube_lb_dataplane::model::IndexConfig;
    use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig};
    use kube_lb_dataplane::userspace::{Serve, UserspaceConfig, UserspaceProxy};
    use kube_lb_dataplane::watch::{self as dataplane_watch, Dataplane, Proxy, Timing};

    let health = ProxyHealth::new(std::time::Duration::from_secs(60));
    let backend = if let Some(table) = nft_table {
        Dataplane::Nft(Box::new(NftBackend::new(
            NftConfig {
                table,
                ..NftConfig::default()
            },
            Commands::default(),
        )))
    } else {
        Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
            serve: Serve::LoadBalancerIps,
            ..UserspaceConfig::default()
        }))
    };
    let proxy = Proxy {
        index: IndexConfig {
            node_name: "kube-lb-up".to_string(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: true,
        },
        dataplane: Dataplane::NoNodePorts(Box::new(backend)),
        health: health.clone(),
        service_health: ServiceHealthServers::new(health, Vec::new()),
        // No batching: here the dataplane is the load balancer, and the provider waits for its
        // sync before it reports an address (the hand-off). One machine's few Services make
        // every sync cheap.
        // A listener whose port was taken is tried again after `sync_period`.
        timing: Timing {
            min_sync_period: std::time::Duration::ZERO,
            sync_period: std::time::Duration::from_secs(5),
        },
        handoff: Some(handoff),
    };
    dataplane_watch::run(client, proxy, shutdown.cancelled_owned()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataplane_choice_follows_the_flag_and_what_nft_can_do() {
        let refused = NftProbe::Refused("Operation not permitted".into());
        // (requested, probe, Some(nftables) or None for an error)
        let cases = [
            (DataplaneChoice::Auto, NftProbe::Usable, Some(true)),
            (DataplaneChoice::Auto, NftProbe::Missing, Some(false)),
            (DataplaneChoice::Auto, refused.clone(), Some(false)),
            (DataplaneChoice::Userspace, NftProbe::Usable, Some(false)),
            (DataplaneChoice::Userspace, NftProbe::Missing, Some(false)),
            (DataplaneChoice::Nftables, NftProbe::Usable, Some(true)),
            (DataplaneChoice::Nftables, NftProbe::Missing, None),
            (DataplaneChoice::Nftables, refused, None),
        ];
        for (requested, probe, want) in cases {
            let got = choose_dataplane(requested, &probe);
            assert_eq!(
                got.as_ref().ok().map(|c| c.nftables),
                want,
                "{requested:?} {probe:?}: {got:?}"
            );
        }
        let why = choose_dataplane(DataplaneChoice::Auto, &NftProbe::Missing).unwrap();
        assert_eq!(why.reason, "nft not found on the PATH");
    }

    #[test]
    fn pinned_ip_is_inside_the_default_pool() {
        let pool: Vec<IpRange> = vec![DEFAULT_POOL.parse().unwrap()];
        assert_eq!(pinned_demo_ip(&pool).to_string(), "127.240.0.100");
        let custom: Vec<IpRange> = vec!["127.9.0.1-127.9.0.200".parse().unwrap()];
        assert_eq!(pinned_demo_ip(&custom).to_string(), "127.9.0.100");
    }
}

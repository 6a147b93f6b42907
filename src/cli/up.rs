//! `kube-lb up`: everything on this machine — the embedded API server, the controller with the
//! `local` provider, and the userspace dataplane serving each load-balancer address (TCP and
//! UDP, round robin over the Service's ready endpoints).

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
    let mut builder = ApiServer::builder().listen(args.listen);
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
        for object in demo::objects(port, pinned_demo_ip(&args.local_pool)) {
            server
                .apply_manifests(&object.to_string())
                .context("creating the demo objects")?;
        }
        println!(
            "demo:        echo backends on {} port {port}; Services demo/echo and demo/echo-pinned",
            demo::BACKEND_IPS.map(|ip| ip.to_string()).join(", ")
        );
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
    let mut config = ControllerConfig::new(Cloud::Local);
    config.identity = "kube-lb-up".to_string();
    let controller =
        LoadBalancerController::new(client.clone(), provider.provider, config, metrics.clone());
    let outcomes = controller.outcomes();
    let (_leading_tx, leading) = watch::channel(true);
    let (_ready_tx, ready) = watch::channel(true);
    let (metrics_addr, metrics_server) =
        crate::health::serve(args.metrics_addr, metrics, ready, shutdown.clone())
            .await
            .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;
    println!("metrics:     http://{metrics_addr}/metrics");
    println!("Press Ctrl-C to stop.\n");

    let controller_task = tokio::spawn(controller.run(leading, shutdown.clone()));
    let dataplane_task = tokio::spawn(run_dataplane(client, shutdown.clone()));
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
    let _ = printer.await;
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

/// The dataplane of `up`: the userspace backend of `kube-lb proxy`, listening only on the
/// `local` provider's load-balancer addresses. ClusterIPs and NodePorts of the embedded API
/// server are not routed to this machine, so they are left alone.
async fn run_dataplane(
    client: kube::Client,
    shutdown: CancellationToken,
) -> Result<(), kube_lb_dataplane::watch::WatchError> {
    use kube_lb_dataplane::health::{ProxyHealth, ServiceHealthServers};
    use kube_lb_dataplane::model::IndexConfig;
    use kube_lb_dataplane::userspace::{Serve, UserspaceConfig, UserspaceProxy};
    use kube_lb_dataplane::watch::{self as dataplane_watch, Dataplane, Proxy, Timing};

    let health = ProxyHealth::new(std::time::Duration::from_secs(60));
    let proxy = Proxy {
        index: IndexConfig {
            node_name: "kube-lb-up".to_string(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: true,
        },
        dataplane: Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
            serve: Serve::LoadBalancerIps,
            ..UserspaceConfig::default()
        })),
        health: health.clone(),
        service_health: ServiceHealthServers::new(health, Vec::new()),
        timing: Timing::default(),
    };
    dataplane_watch::run(client, proxy, shutdown.cancelled_owned()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_ip_is_inside_the_default_pool() {
        let pool: Vec<IpRange> = vec![DEFAULT_POOL.parse().unwrap()];
        assert_eq!(pinned_demo_ip(&pool).to_string(), "127.240.0.100");
        let custom: Vec<IpRange> = vec!["127.9.0.1-127.9.0.200".parse().unwrap()];
        assert_eq!(pinned_demo_ip(&custom).to_string(), "127.9.0.100");
    }
}

//! `kube-lb apiserver`: the in-memory Kubernetes API server on its own, for `kube-lb proxy` on
//! test hosts and for trying kubectl against.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use ipnet::IpNet;
use kube_lb_apiserver::ApiServer;

use crate::manifests;

/// Arguments of `kube-lb apiserver`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kube-lb apiserver --listen 127.0.0.1:6443 --kubeconfig-out /tmp/kube-lb.kubeconfig -f examples/\n  KUBECONFIG=/tmp/kube-lb.kubeconfig kubectl get svc -A"
)]
pub struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        env = "KUBE_LB_APISERVER_LISTEN",
        default_value = "127.0.0.1:6443"
    )]
    pub listen: SocketAddr,

    /// Keep objects in this JSON file across restarts.
    #[arg(long, env = "KUBE_LB_APISERVER_STATE_FILE", value_name = "FILE")]
    pub state_file: Option<PathBuf>,

    /// Where to write a kubeconfig for this server (default: a file in the temp directory).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig_out: Option<PathBuf>,

    /// Manifest file or directory to apply at start; repeatable (`-` reads stdin).
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,

    /// CIDR Service cluster IPs are allocated from.
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cidr: IpNet,

    /// A second Service CIDR of the other IP family, for dual-stack Services
    /// (`ipFamilyPolicy: PreferDualStack` / `RequireDualStack` get one cluster IP from each
    /// range), like the second range of kube-apiserver's `--service-cluster-ip-range`.
    #[arg(long, value_name = "CIDR")]
    pub secondary_service_cidr: Option<IpNet>,

    /// Node port range, `FIRST-LAST`.
    #[arg(long, default_value = "30000-32767", value_parser = parse_port_range)]
    pub node_port_range: std::ops::RangeInclusive<u16>,

    /// Change events kept for watches to resume from.
    #[arg(long, default_value_t = 1000)]
    pub history: usize,

    /// How long an Event is kept after its last write, as kube-apiserver's `--event-ttl`;
    /// `0s` keeps Events until something deletes them.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1h")]
    pub event_ttl: std::time::Duration,
}

fn parse_port_range(text: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let (first, last) = text
        .split_once('-')
        .ok_or_else(|| format!("{text:?} is not FIRST-LAST"))?;
    let first: u16 = first
        .trim()
        .parse()
        .map_err(|e| format!("{first:?}: {e}"))?;
    let last: u16 = last.trim().parse().map_err(|e| format!("{last:?}: {e}"))?;
    if first > last {
        return Err(format!("{first} is above {last}"));
    }
    Ok(first..=last)
}

/// Runs `kube-lb apiserver` until Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let texts = manifests::read(&args.files)?;
    let mut builder = ApiServer::builder()
        .listen(args.listen)
        .history(args.history)
        .event_ttl(args.event_ttl)
        .service_cidr(args.service_cidr)
        .node_port_range(args.node_port_range.clone());
    if let Some(cidr) = args.secondary_service_cidr {
        builder = builder.secondary_service_cidr(cidr);
    }
    if let Some(path) = &args.state_file {
        builder = builder.state_file(path);
    }
    let server = builder.start().await.context("starting the API server")?;
    for manifest in &texts {
        let applied = server
            .apply_manifests(&manifest.text)
            .with_context(|| format!("applying {}", manifest.source.display()))?;
        tracing::info!(source = %manifest.source.display(), objects = applied.len(), "applied manifests");
    }
    let kubeconfig = args
        .kubeconfig_out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("kube-lb-apiserver.kubeconfig"));
    server
        .write_kubeconfig(&kubeconfig)
        .context("writing the kubeconfig")?;
    println!("API server:  {}", server.url());
    println!("kubeconfig:  {}", kubeconfig.display());
    println!(
        "try:         KUBECONFIG={} kubectl get svc -A",
        kubeconfig.display()
    );
    super::wait_for_signal().await;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("30000-30010"), Ok(30000..=30010));
        assert!(parse_port_range("30010-30000").is_err());
        assert!(parse_port_range("30000").is_err());
        assert!(parse_port_range("a-b").is_err());
    }
}

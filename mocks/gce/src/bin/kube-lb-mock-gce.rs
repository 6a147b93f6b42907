//! Runs the GCE mock standalone, e.g. for `kube-lb reconcile --cloud gcp` by hand:
//!
//! ```text
//! cargo run -p kube-lb-mock-gce -- --listen 127.0.0.1:0 \
//!     --instance us-central1-a/node-1 --write-config /tmp/gce.conf
//! ```
//!
//! Prints `GCE_MOCK_URL=http://127.0.0.1:PORT` on the first line of stdout, then serves until
//! interrupted.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use kube_lb_mock_gce::MockGce;

/// In-memory GCE compute API (load-balancer resources) for tests and demos.
#[derive(Debug, Parser)]
#[command(name = "kube-lb-mock-gce", version)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Project ID served.
    #[arg(long, default_value = "mock-project")]
    project: String,
    /// Region served.
    #[arg(long, default_value = "us-central1")]
    region: String,
    /// Zones of the region (comma separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "us-central1-a,us-central1-b"
    )]
    zones: Vec<String>,
    /// A VM fixture `ZONE/NAME[:TAG,TAG…]`; repeat for more nodes.
    #[arg(long = "instance")]
    instances: Vec<String>,
    /// Polls an operation stays RUNNING before DONE.
    #[arg(long, default_value_t = 0)]
    running_polls: u32,
    /// Write a `gce.conf` pointing at this mock to this path.
    #[arg(long)]
    write_config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let zones: Vec<&str> = args.zones.iter().map(String::as_str).collect();
    let mut builder = MockGce::builder()
        .project(&args.project)
        .region(&args.region, &zones)
        .running_polls(args.running_polls);
    for spec in &args.instances {
        let (location, tags) = spec.split_once(':').unwrap_or((spec, ""));
        let (zone, name) = location
            .split_once('/')
            .with_context(|| format!("--instance '{spec}' must be ZONE/NAME[:TAGS]"))?;
        let tags: Vec<&str> = tags.split(',').filter(|t| !t.is_empty()).collect();
        builder = builder.instance(zone, name, &tags);
    }
    let mock = builder.start_on(args.listen).await?;
    if let Some(path) = &args.write_config {
        let config = format!(
            "[global]\nproject-id = {}\nregion = {}\nlocal-zone = {}\nmultizone = true\n\
             network-name = default\nsubnetwork-name = default\napi-endpoint = {}\n\
             token-url = nil\n",
            args.project,
            args.region,
            zones.first().copied().unwrap_or_default(),
            mock.url()
        );
        std::fs::write(path, config).with_context(|| format!("writing {}", path.display()))?;
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "GCE_MOCK_URL={}", mock.url())?;
    stdout.flush()?;
    tokio::signal::ctrl_c().await?;
    Ok(())
}

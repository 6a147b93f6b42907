//! Runs the GCE mock standalone, e.g. for `kube-lb reconcile --cloud gcp` by hand:
//!
//! ```text
//! cargo run -p kube-lb-mock-gce -- --listen 127.0.0.1:0 \
//!     --instance us-central1-a/node-1 --write-config /tmp/gce.conf
//! ```
//!
//! Prints `GCE_MOCK_URL=http://127.0.0.1:PORT` on the first line of stdout, then serves until
//! interrupted.

use std::net::SocketAddr;

use kube_lb_mock_gce::MockGce;
use kube_lb_mock_support::cli::{self, CliSpec};

const CLI: CliSpec = CliSpec {
    program: "kube-lb-mock-gce",
    version: env!("CARGO_PKG_VERSION"),
    usage: "kube-lb-mock-gce [--listen 127.0.0.1:0] [--project mock-project] \
            [--region us-central1] [--zones us-central1-a,us-central1-b] \
            [--instance ZONE/NAME[:TAG,TAG...]]... [--running-polls N] [--write-config gce.conf]",
    default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0),
    config_flag: "--write-config",
    value_flags: &[
        "--project",
        "--region",
        "--zones",
        "--instance",
        "--running-polls",
    ],
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = CLI.parse_or_exit();
    let project = args.value("--project").unwrap_or("mock-project");
    let region = args.value("--region").unwrap_or("us-central1");
    let zones: Vec<&str> = args
        .value("--zones")
        .unwrap_or("us-central1-a,us-central1-b")
        .split(',')
        .collect();
    let running_polls = args
        .parsed("--running-polls", 0u32)
        .unwrap_or_else(|message| CLI.exit_with(&message));
    let mut builder = MockGce::builder()
        .project(project)
        .region(region, &zones)
        .running_polls(running_polls);
    for spec in args.values("--instance") {
        let (location, tags) = spec.split_once(':').unwrap_or((spec, ""));
        let Some((zone, name)) = location.split_once('/') else {
            CLI.exit_with(&format!("--instance '{spec}' must be ZONE/NAME[:TAGS]"));
        };
        let tags: Vec<&str> = tags.split(',').filter(|t| !t.is_empty()).collect();
        builder = builder.instance(zone, name, &tags);
    }
    cli::init_logging();
    let mock = builder
        .start_on(args.listen)
        .await
        .map_err(std::io::Error::other)?;
    let config = args.config_out.as_deref().map(|path| {
        let config = format!(
            "[global]\nproject-id = {project}\nregion = {region}\nlocal-zone = {}\n\
             multizone = true\nnetwork-name = default\nsubnetwork-name = default\n\
             api-endpoint = {}\ntoken-url = nil\n",
            zones.first().copied().unwrap_or_default(),
            mock.url()
        );
        (path, config)
    });
    cli::announce_and_wait(config, &[format!("GCE_MOCK_URL={}", mock.url())]).await
}

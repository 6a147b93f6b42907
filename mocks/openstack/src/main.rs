//! Runs the mock OpenStack (Keystone + Octavia + Neutron) until interrupted. Prints its URL on
//! the first line of stdout and, with `--config-out FILE`, writes a `cloud.conf` that points
//! kube-lb at it:
//!
//! ```text
//! kube-lb-mock-openstack [--listen 127.0.0.1:0] [--config-out cloud.conf] [--provisioning-delay-ms N]
//! ```

use std::net::SocketAddr;

use kube_lb_mock_openstack::MockOpenStack;
use kube_lb_mock_support::cli::{self, CliSpec};

const CLI: CliSpec = CliSpec {
    program: "kube-lb-mock-openstack",
    version: env!("CARGO_PKG_VERSION"),
    usage: "kube-lb-mock-openstack [--listen 127.0.0.1:0] [--config-out cloud.conf] [--provisioning-delay-ms N]",
    default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0),
    config_flag: "--config-out",
    value_flags: &["--provisioning-delay-ms"],
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = CLI.parse_or_exit();
    let delay = args
        .millis("--provisioning-delay-ms")
        .unwrap_or_else(|message| CLI.exit_with(&message));
    cli::init_logging();
    let cloud = MockOpenStack::builder()
        .listen(args.listen)
        .provisioning_delay(delay)
        .start()
        .await?;
    let config = args
        .config_out
        .as_deref()
        .map(|path| (path, cloud.cloud_conf()));
    cli::announce_and_wait(config, &[cloud.url()]).await
}

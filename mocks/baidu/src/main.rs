//! `kube-lb-mock-baidu`: the mock BLB + EIP server as a standalone process, for trying
//! `kube-lb reconcile --cloud baidu` by hand.

use std::net::SocketAddr;

use kube_lb_mock_baidu::{ACCESS_KEY_ID, MockBaidu, REGION, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID};
use kube_lb_mock_support::cli::{self, CliSpec};

const CLI: CliSpec = CliSpec {
    program: "kube-lb-mock-baidu",
    version: env!("CARGO_PKG_VERSION"),
    usage: "kube-lb-mock-baidu [--listen ADDR] [--create-delay DURATION] [--update-delay DURATION] [--config-out PATH]",
    default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8765),
    config_flag: "--config-out",
    value_flags: &["--create-delay", "--update-delay"],
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = CLI.parse_or_exit();
    let delay = |flag| {
        args.duration(flag)
            .unwrap_or_else(|message| CLI.exit_with(&message))
    };
    let mut builder = MockBaidu::builder();
    if let Some(create) = delay("--create-delay") {
        builder = builder.create_delay(create);
    }
    if let Some(update) = delay("--update-delay") {
        builder = builder.update_delay(update);
    }
    cli::init_logging();
    let cloud = builder.listen(args.listen).start().await?;
    // The provider's cloud-config for this mock.
    let config = args.config_out.as_deref().map(|path| {
        let config = serde_json::json!({
            "ClusterID": "c-mock", "Region": REGION, "VpcID": VPC_ID, "SubnetID": SUBNET_ID,
            "AccessKeyID": ACCESS_KEY_ID, "SecretAccessKey": SECRET_ACCESS_KEY,
            "Endpoint": cloud.endpoint(), "EIPEndpoint": cloud.endpoint(),
        });
        (path, format!("{config:#}\n"))
    });
    let banner = [
        format!("mock Baidu BLB/EIP listening on {}", cloud.endpoint()),
        format!("access key: {ACCESS_KEY_ID}"),
        format!("secret key: {SECRET_ACCESS_KEY}"),
        format!("vpc: {VPC_ID}  subnet: {SUBNET_ID}"),
    ];
    cli::announce_and_wait(config, &banner).await
}

//! Runs the mock Tencent CLB endpoint until interrupted. Prints its URL on the first line of
//! stdout and, with `--config-out FILE`, writes a kube-lb Tencent cloud-config pointing at it:
//!
//! ```text
//! kube-lb-mock-tencent [--listen 127.0.0.1:0] [--config-out tencent.json] [--task-delay-ms N]
//! ```

use std::net::SocketAddr;

use kube_lb_mock_support::cli::{self, CliSpec};
use kube_lb_mock_tencent::{MockTencent, REGION, SECRET_ID, SECRET_KEY, VPC_ID};

const CLI: CliSpec = CliSpec {
    program: "kube-lb-mock-tencent",
    version: env!("CARGO_PKG_VERSION"),
    usage: "kube-lb-mock-tencent [--listen 127.0.0.1:0] [--config-out tencent.json] [--task-delay-ms N]",
    default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0),
    config_flag: "--config-out",
    value_flags: &["--task-delay-ms"],
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = CLI.parse_or_exit();
    let delay = args
        .millis("--task-delay-ms")
        .unwrap_or_else(|message| CLI.exit_with(&message));
    cli::init_logging();
    let cloud = MockTencent::builder()
        .listen(args.listen)
        .task_delay(delay)
        .start()
        .await?;
    let config = args.config_out.as_deref().map(|path| {
        let conf = serde_json::json!({
            "secretId": SECRET_ID, "secretKey": SECRET_KEY, "region": REGION,
            "vpcId": VPC_ID, "endpoint": cloud.url(),
        });
        (path, format!("{conf:#}\n"))
    });
    cli::announce_and_wait(config, &[cloud.url()]).await
}

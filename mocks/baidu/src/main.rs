//! `kube-lb-mock-baidu`: the mock BLB + EIP server as a standalone process, for trying
//! `kube-lb reconcile --cloud baidu` by hand.

use std::net::SocketAddr;
use std::time::Duration;

fn usage() -> ! {
    eprintln!(
        "usage: kube-lb-mock-baidu [--listen ADDR] [--create-delay DURATION] [--update-delay DURATION] [--config-out PATH]\n\
         serves BLB and EIP on one port; access key {} / secret {}",
        kube_lb_mock_baidu::ACCESS_KEY_ID,
        kube_lb_mock_baidu::SECRET_ACCESS_KEY
    );
    std::process::exit(2)
}

fn duration(value: Option<String>) -> Duration {
    value
        .and_then(|v| humantime::parse_duration(&v).ok())
        .unwrap_or_else(|| usage())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut builder = kube_lb_mock_baidu::MockBaidu::builder();
    let mut listen = SocketAddr::from(([127, 0, 0, 1], 8765));
    let mut config_out = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => {
                listen = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage());
            }
            "--create-delay" => builder = builder.create_delay(duration(args.next())),
            "--update-delay" => builder = builder.update_delay(duration(args.next())),
            "--config-out" => config_out = Some(args.next().unwrap_or_else(|| usage())),
            _ => usage(),
        }
    }
    let cloud = builder.listen(listen).start().await?;
    if let Some(path) = config_out {
        // The provider's cloud-config for this mock, written before the URL is printed.
        let config = serde_json::json!({
            "ClusterID": "c-mock", "Region": kube_lb_mock_baidu::REGION,
            "VpcID": kube_lb_mock_baidu::VPC_ID, "SubnetID": kube_lb_mock_baidu::SUBNET_ID,
            "AccessKeyID": kube_lb_mock_baidu::ACCESS_KEY_ID,
            "SecretAccessKey": kube_lb_mock_baidu::SECRET_ACCESS_KEY,
            "Endpoint": cloud.endpoint(), "EIPEndpoint": cloud.endpoint(),
        });
        std::fs::write(&path, format!("{config:#}\n"))?;
    }
    println!("mock Baidu BLB/EIP listening on {}", cloud.endpoint());
    println!("access key: {}", kube_lb_mock_baidu::ACCESS_KEY_ID);
    println!("secret key: {}", kube_lb_mock_baidu::SECRET_ACCESS_KEY);
    println!(
        "vpc: {}  subnet: {}",
        kube_lb_mock_baidu::VPC_ID,
        kube_lb_mock_baidu::SUBNET_ID
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}

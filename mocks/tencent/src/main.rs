//! Runs the mock Tencent CLB endpoint until interrupted. Prints its URL on the first line of
//! stdout and, with `--config-out FILE`, writes a kube-lb Tencent cloud-config pointing at it:
//!
//! ```text
//! kube-lb-mock-tencent [--listen 127.0.0.1:0] [--config-out tencent.json] [--task-delay-ms N]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube_lb_mock_tencent::{MockTencent, REGION, SECRET_ID, SECRET_KEY, VPC_ID};

const USAGE: &str =
    "kube-lb-mock-tencent [--listen 127.0.0.1:0] [--config-out tencent.json] [--task-delay-ms N]";

struct Args {
    listen: SocketAddr,
    config_out: Option<PathBuf>,
    delay: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        config_out: None,
        delay: Duration::ZERO,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--listen" => {
                let value = it.next().ok_or("--listen needs ADDR:PORT")?;
                args.listen = value
                    .parse()
                    .map_err(|e| format!("--listen {value}: {e}"))?;
            }
            "--config-out" => {
                args.config_out = Some(it.next().ok_or("--config-out needs a path")?.into())
            }
            "--task-delay-ms" => {
                let value = it.next().ok_or("--task-delay-ms needs a number")?;
                let ms: u64 = value
                    .parse()
                    .map_err(|e| format!("--task-delay-ms {value}: {e}"))?;
                args.delay = Duration::from_millis(ms);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("kube-lb-mock-tencent: {message}");
            std::process::exit(2);
        }
    };
    let cloud = MockTencent::builder()
        .listen(args.listen)
        .task_delay(args.delay)
        .start()
        .await?;
    println!("{}", cloud.url());
    if let Some(path) = args.config_out {
        let conf = serde_json::json!({
            "secretId": SECRET_ID, "secretKey": SECRET_KEY, "region": REGION,
            "vpcId": VPC_ID, "endpoint": cloud.url(),
        });
        std::fs::write(&path, format!("{conf:#}\n"))?;
    }
    tokio::signal::ctrl_c().await?;
    Ok(())
}

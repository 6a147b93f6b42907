//! Runs the mock OpenStack (Keystone + Octavia + Neutron) until interrupted. Prints its URL on
//! the first line of stdout and, with `--config-out FILE`, writes a `cloud.conf` that points
//! kube-lb at it:
//!
//! ```text
//! kube-lb-mock-openstack [--listen 127.0.0.1:0] [--config-out cloud.conf] [--provisioning-delay-ms N]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use kube_lb_mock_openstack::MockOpenStack;

const USAGE: &str = "kube-lb-mock-openstack [--listen 127.0.0.1:0] [--config-out cloud.conf] [--provisioning-delay-ms N]";

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
            "--provisioning-delay-ms" => {
                let value = it.next().ok_or("--provisioning-delay-ms needs a number")?;
                let ms: u64 = value
                    .parse()
                    .map_err(|e| format!("--provisioning-delay-ms {value}: {e}"))?;
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
            eprintln!("kube-lb-mock-openstack: {message}");
            std::process::exit(2);
        }
    };
    let cloud = MockOpenStack::builder()
        .listen(args.listen)
        .provisioning_delay(args.delay)
        .start()
        .await?;
    // The config first: once the URL is printed, everything is ready.
    if let Some(path) = args.config_out {
        std::fs::write(&path, cloud.cloud_conf())?;
    }
    println!("{}", cloud.url());
    tokio::signal::ctrl_c().await?;
    Ok(())
}

//! Runs the mock ARM server until interrupted. Prints its URL on the first line of stdout and,
//! with `--config-out FILE`, writes an `azure.json` that points kube-lb at it:
//!
//! ```text
//! kube-lb-mock-azure [--listen 127.0.0.1:0] [--config-out azure.json]
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};

/// Resource group, virtual network, subnet and NSG the mock starts with.
const RESOURCE_GROUP: &str = "kube-lb";
const VNET: &str = "kube-lb-vnet";
const SUBNET: &str = "nodes";
const NSG: &str = "kube-lb-nsg";

struct Args {
    listen: SocketAddr,
    config_out: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        config_out: None,
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
            "-h" | "--help" => {
                println!("kube-lb-mock-azure [--listen 127.0.0.1:0] [--config-out azure.json]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("kube-lb-mock-azure: {message}");
            std::process::exit(2);
        }
    };
    let arm = MockArm::builder()
        .listen(args.listen)
        .subnet(
            RESOURCE_GROUP,
            VNET,
            "10.224.0.0/11",
            SUBNET,
            "10.224.0.0/16",
        )
        // examples/azure/internal.yaml asks for the `apps` subnet.
        .subnet(
            RESOURCE_GROUP,
            VNET,
            "10.224.0.0/11",
            "apps",
            "10.240.0.0/24",
        )
        .security_group(RESOURCE_GROUP, NSG)
        .start()
        .await?;
    let url = arm.url();
    let config = serde_json::json!({
        "cloud": "AzurePublicCloud",
        "tenantId": TENANT,
        "subscriptionId": SUBSCRIPTION,
        "aadClientId": CLIENT_ID,
        "aadClientSecret": CLIENT_SECRET,
        "resourceGroup": RESOURCE_GROUP,
        "location": LOCATION,
        "vnetName": VNET,
        "vnetResourceGroup": RESOURCE_GROUP,
        "subnetName": SUBNET,
        "securityGroupName": NSG,
        "loadBalancerSku": "standard",
        "resourceManagerEndpoint": url,
        "activeDirectoryEndpoint": url,
    });
    if let Some(path) = &args.config_out {
        std::fs::write(path, format!("{config:#}\n"))?;
    }
    println!("{url}");
    tokio::signal::ctrl_c().await?;
    drop(arm);
    Ok(())
}

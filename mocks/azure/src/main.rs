//! Runs the mock ARM server until interrupted. Prints its URL on the first line of stdout and,
//! with `--config-out FILE`, writes an `azure.json` that points kube-lb at it:
//!
//! ```text
//! kube-lb-mock-azure [--listen 127.0.0.1:0] [--config-out azure.json]
//! ```

use std::net::SocketAddr;

use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};
use kube_lb_mock_support::cli::{self, CliSpec};

/// Resource group, virtual network, subnet and NSG the mock starts with.
const RESOURCE_GROUP: &str = "kube-lb";
const VNET: &str = "kube-lb-vnet";
const SUBNET: &str = "nodes";
const NSG: &str = "kube-lb-nsg";

const CLI: CliSpec = CliSpec {
    program: "kube-lb-mock-azure",
    version: env!("CARGO_PKG_VERSION"),
    usage: "kube-lb-mock-azure [--listen 127.0.0.1:0] [--config-out azure.json]",
    default_listen: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0),
    config_flag: "--config-out",
    value_flags: &[],
};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = CLI.parse_or_exit();
    cli::init_logging();
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
    let config = args
        .config_out
        .as_deref()
        .map(|path| (path, format!("{config:#}\n")));
    cli::announce_and_wait(config, &[url]).await
}

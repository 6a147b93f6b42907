//! Runs the mock ARM server until interrupted and prints its URL plus an `azure.json` that
//! points kube-lb at it.

use std::net::SocketAddr;

use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let listen: SocketAddr = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)));
    let arm = MockArm::builder()
        .listen(listen)
        .subnet(
            "kube-lb",
            "kube-lb-vnet",
            "10.224.0.0/12",
            "nodes",
            "10.224.0.0/16",
        )
        .security_group("kube-lb", "kube-lb-nsg")
        .start()
        .await?;
    let url = arm.url();
    println!("{url}");
    let config = serde_json::json!({
        "cloud": "AzurePublicCloud",
        "tenantId": TENANT,
        "subscriptionId": SUBSCRIPTION,
        "aadClientId": CLIENT_ID,
        "aadClientSecret": CLIENT_SECRET,
        "resourceGroup": "kube-lb",
        "location": LOCATION,
        "vnetName": "kube-lb-vnet",
        "vnetResourceGroup": "kube-lb",
        "subnetName": "nodes",
        "securityGroupName": "kube-lb-nsg",
        "loadBalancerSku": "standard",
        "resourceManagerEndpoint": url,
        "activeDirectoryEndpoint": url,
    });
    eprintln!("azure.json for this mock:\n{config:#}");
    tokio::signal::ctrl_c().await?;
    drop(arm);
    Ok(())
}

//! An outsider's view of the mock: after the provider built a load balancer, the official
//! Python `openstacksdk` (in the project's venv, `scripts/setup-venv.sh`) authenticates,
//! discovers the endpoints and lists and shows everything the provider created.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use std::path::PathBuf;

use kube_lb_mock_openstack::{PASSWORD, PROJECT_NAME, USERNAME};
use kube_lb_provider_core::LoadBalancerProvider;
use serde_json::Value;
use support::*;

/// The venv's Python (`KUBE_LB_PYTHON` overrides it).
fn python() -> PathBuf {
    match std::env::var_os("KUBE_LB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3"),
    }
}

#[tokio::test]
async fn official_openstacksdk_lists_what_the_provider_created() {
    let h = harness().await;
    let web = svc("web", "8ae4a1c2-6b2e-11e9-a923-1681be663d3e")
        .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)])
        .local(32000);
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openstacksdk_view.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .args([
            h.cloud.auth_url().as_str(),
            USERNAME,
            PASSWORD,
            PROJECT_NAME,
        ])
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (run scripts/setup-venv.sh, or set KUBE_LB_PYTHON)",
                python().display()
            )
        });
    assert!(
        output.status.success(),
        "openstacksdk failed (run scripts/setup-venv.sh for openstacksdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: Value = serde_json::from_slice(&output.stdout).unwrap();

    let name = "kube_service_kubernetes_default_web";
    let lbs = view["loadbalancers"].as_array().unwrap();
    assert_eq!(lbs.len(), 1, "{view:#}");
    assert_eq!(lbs[0]["name"], name);
    assert_eq!(lbs[0]["provisioning_status"], "ACTIVE");
    assert_eq!(
        lbs[0]["description"],
        "Kubernetes external service default/web from cluster kubernetes"
    );

    let mut listeners: Vec<(String, u64)> = view["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["protocol_port"].as_u64().unwrap(),
            )
        })
        .collect();
    listeners.sort();
    assert_eq!(
        listeners,
        vec![
            (format!("listener_0_{name}"), 80),
            (format!("listener_1_{name}"), 443)
        ]
    );
    assert!(
        view["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["load_balancer_ids"][0] == lbs[0]["id"])
    );

    let pools = view["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    for pool in pools {
        let members: Vec<&str> = pool["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["address"].as_str().unwrap())
            .collect();
        assert_eq!(members, vec!["10.0.0.101", "10.0.0.102"], "{pool}");
    }
    assert_eq!(view["healthmonitors"].as_array().unwrap().len(), 2);
    assert!(
        view["healthmonitors"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["type"] == "HTTP")
    );

    let fips = view["floatingips"].as_array().unwrap();
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0]["port_id"], lbs[0]["vip_port_id"]);
    assert_eq!(
        fips[0]["floating_ip_address"],
        status.ingress[0].ip.unwrap().to_string()
    );
}

//! An outsider's view: after the provider built a public Service, the official
//! `bce-python-sdk` (project venv, `scripts/setup-venv.sh`) lists the BLB, its listeners and
//! backends and the EIP, signing its own requests against the mock.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::path::PathBuf;

use kube_lb_mock_baidu::{ACCESS_KEY_ID, SECRET_ACCESS_KEY};
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
async fn official_sdk_reads_back_what_the_provider_created() {
    let h = harness().await;
    let web = spec(
        "web",
        "uid-sdk",
        &[(80, "TCP", 30080), (53, "UDP", 30053)],
        &[],
    );
    let status = h.provider.ensure(&web, &nodes(2)).await.unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bce_sdk_view.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .args([
            &h.cloud.endpoint(),
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            "CCE/SVC/c-test01/default/web",
        ])
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (run scripts/setup-venv.sh)",
                python().display()
            )
        });
    assert!(
        output.status.success(),
        "bce-python-sdk failed (run scripts/setup-venv.sh for bce-python-sdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(view["blbs"].as_array().unwrap().len(), 1, "{view:#}");
    let blb = &view["blbs"][0];
    assert_eq!(blb["status"], "available");
    assert_eq!(
        blb["public_ip"],
        status.ingress[0].ip.unwrap().to_string().as_str()
    );
    let ports: Vec<(u64, &str)> = view["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["listener_port"].as_u64().unwrap(),
                l["listener_type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [(53, "UDP"), (80, "TCP")]);
    let backends: Vec<&str> = view["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["instance_id"].as_str().unwrap())
        .collect();
    assert_eq!(backends, ["i-node0001", "i-node0002"]);
    assert_eq!(view["eips"][0]["status"], "binded");
    assert_eq!(view["eips"][0]["instance_id"], blb["blb_id"]);
}

#[tokio::test]
async fn official_sdk_lists_the_bound_security_group_and_its_rules() {
    let h = harness().await;
    let web = svc("web", "uid-sdk-sg")
        .ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
        .source_ranges(&["143.231.0.0/16"]);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bce_sdk_view.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .args([
            &h.cloud.endpoint(),
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            "CCE/SVC/c-test01/default/web",
        ])
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (run scripts/setup-venv.sh)",
                python().display()
            )
        });
    assert!(
        output.status.success(),
        "bce-python-sdk failed (run scripts/setup-venv.sh for bce-python-sdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: Value = serde_json::from_slice(&output.stdout).unwrap();
    // The BLB's own view of its bound groups, with the rules in its spelling.
    let bound = view["blb_security_groups"].as_array().unwrap();
    assert_eq!(bound.len(), 1, "{view:#}");
    assert_eq!(bound[0]["security_group_name"], "kube-lb-uid-sdk-sg");
    let mut rules: Vec<(String, String, String)> = bound[0]["security_group_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["direction"], "ingress");
            (
                r["protocol"].as_str().unwrap().to_string(),
                r["port_range"].as_str().unwrap().to_string(),
                r["source_ip"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rules.sort();
    let cidr = "143.231.0.0/16".to_string();
    assert_eq!(
        rules,
        [
            ("tcp".into(), "80".into(), cidr.clone()),
            ("udp".into(), "53".into(), cidr)
        ]
    );
    // The BCC API's view of the same group: its tags say whose it is.
    let groups = view["security_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{view:#}");
    assert_eq!(groups[0]["id"], bound[0]["security_group_id"]);
    assert_eq!(groups[0]["rules"].as_array().unwrap().len(), 2);
    let tags: Vec<(&str, &str)> = groups[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["tag_key"].as_str().unwrap(),
                t["tag_value"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        tags.contains(&("kube-lb/service-uid", "uid-sdk-sg")),
        "{tags:?}"
    );
}

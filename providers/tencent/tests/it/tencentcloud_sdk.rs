//! The official Python SDK (`tencentcloud-sdk-python-clb`, in the project's venv via
//! `scripts/setup-venv.sh`) as an outsider: its TC3 code path signs the same inputs to the same
//! signatures as kube-lb's signer, and after the provider built CLBs, the SDK (signing its own
//! requests, which the mock verifies) lists and reads back exactly what kube-lb created.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::path::PathBuf;
use std::process::Stdio;

use kube_lb_mock_tencent::{REGION, SECRET_ID, SECRET_KEY, SUBNET_ID};
use kube_lb_provider_core::LoadBalancerProvider;
use kube_lb_provider_tencent::sign::{SignInput, sign};
use serde_json::{Value, json};
use support::*;
use tokio::io::AsyncWriteExt;

/// The venv's Python (`KUBE_LB_PYTHON` overrides it).
fn python() -> PathBuf {
    match std::env::var_os("KUBE_LB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3"),
    }
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name)
}

#[tokio::test]
async fn kube_lb_signs_like_the_official_sdk() {
    let cases = [
        (
            "testsecretkey",
            "clb",
            "clb.tencentcloudapi.com",
            "application/json",
            r#"{"Limit":1}"#,
            1_700_000_000i64,
        ),
        (
            "another/Key+with=symbols",
            "clb",
            "clb.ap-guangzhou.tencentcloudapi.com",
            "application/json",
            r#"{"LoadBalancerType":"OPEN","Tags":[{"TagKey":"tke-clusterId","TagValue":"cls-1"}]}"#,
            1_735_689_599,
        ),
        (
            "k",
            "clb",
            "127.0.0.1:18080",
            "application/json",
            "{}",
            1_735_689_600,
        ),
        (
            "k",
            "clb",
            "clb.tencentcloudapi.com",
            "application/json; charset=utf-8",
            r#"{"LoadBalancerName":"名字"}"#,
            951_782_400,
        ),
    ];
    let mut input = String::new();
    for (secret_key, service, host, content_type, body, timestamp) in cases {
        input.push_str(
            &json!({"secret_key": secret_key, "service": service, "host": host,
            "content_type": content_type, "body": body, "timestamp": timestamp})
            .to_string(),
        );
        input.push('\n');
    }
    let mut child = tokio::process::Command::new(python())
        .arg(script("tc3_sign.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "running {}: {e} (run scripts/setup-venv.sh)",
                python().display()
            )
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .await
        .unwrap();
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "tencentcloud-sdk-python: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let theirs: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let ours: Vec<String> = cases
        .iter()
        .map(
            |(secret_key, service, host, content_type, body, timestamp)| {
                sign(&SignInput {
                    secret_key,
                    service,
                    host,
                    content_type,
                    body: body.as_bytes(),
                    timestamp: *timestamp,
                })
                .signature
            },
        )
        .collect();
    assert_eq!(ours, theirs);
}

#[tokio::test]
async fn the_official_sdk_reads_back_what_the_provider_created() {
    let h = harness().await;
    let public =
        svc("web", "uid-web").ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)]);
    let internal = svc("api", "uid-api").annotate(
        "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid",
        SUBNET_ID,
    );
    h.provider.ensure(&public.spec(), &nodes(2)).await.unwrap();
    h.provider
        .ensure(&internal.spec(), &nodes(1))
        .await
        .unwrap();
    let paid = svc("paid", "uid-paid")
        .annotate(
            "service.kubernetes.io/qcloud-loadbalancer-internet-charge-type",
            "TRAFFIC_POSTPAID_BY_HOUR",
        )
        .annotate(
            "service.kubernetes.io/qcloud-loadbalancer-internet-max-bandwidth-out",
            "100",
        );
    h.provider.ensure(&paid.spec(), &nodes(1)).await.unwrap();
    let output = tokio::process::Command::new(python())
        .arg(script("tencentcloud_view.py"))
        .args([h.cloud.url().as_str(), SECRET_ID, SECRET_KEY, REGION])
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
        "tencentcloud-sdk-python-clb failed (run scripts/setup-venv.sh): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen.len(), 3, "{seen:?}");
    let by_uid = |uid: &str| {
        seen.iter()
            .find(|lb| lb["tags"]["tke-lb-serviceuuid"] == uid)
            .unwrap_or_else(|| panic!("no CLB for {uid} in {seen:?}"))
            .clone()
    };
    let web = by_uid("uid-web");
    assert_eq!(web["type"], "OPEN");
    assert_eq!(web["status"], 1);
    assert_eq!(web["tags"]["tke-createdBy-flag"], "yes");
    assert_eq!(web["tags"]["tke-clusterId"], CLUSTER);
    let mut listeners: Vec<(String, u64, Vec<String>)> = web["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["name"], "TKE-DEDICATED-LISTENER-uid-web");
            (
                l["protocol"].as_str().unwrap().to_string(),
                l["port"].as_u64().unwrap(),
                serde_json::from_value(l["targets"].clone()).unwrap(),
            )
        })
        .collect();
    listeners.sort();
    assert_eq!(
        listeners,
        vec![
            (
                "TCP".into(),
                80,
                vec!["10.0.0.101:30080".into(), "10.0.0.102:30080".into()]
            ),
            (
                "UDP".into(),
                53,
                vec!["10.0.0.101:30053".into(), "10.0.0.102:30053".into()]
            ),
        ]
    );
    let api = by_uid("uid-api");
    assert_eq!(api["type"], "INTERNAL");
    assert_eq!(api["subnet"], SUBNET_ID);
    let paid = by_uid("uid-paid");
    assert_eq!(paid["charge"], "TRAFFIC_POSTPAID_BY_HOUR");
    assert_eq!(paid["bandwidth"], 100);
    // Every SDK request passed the mock's signature check.
    assert!(
        h.cloud.journal().iter().all(|e| e.error.is_none()),
        "{:?}",
        h.cloud.journal()
    );
}

#[tokio::test]
async fn the_official_sdk_lists_the_bound_security_group_and_its_policies() {
    let h = harness().await;
    let web = svc("web", "uid-web")
        .ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
        .source_ranges(&["143.231.0.0/16"]);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let output = tokio::process::Command::new(python())
        .arg(script("tencentcloud_view.py"))
        .args([h.cloud.url().as_str(), SECRET_ID, SECRET_KEY, REGION])
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
        "tencentcloud-sdk-python failed (run scripts/setup-venv.sh): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let groups = seen[0]["security_groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{seen:?}");
    assert_eq!(groups[0]["name"], "kube-lb-uid-web");
    assert_eq!(groups[0]["tags"]["tke-lb-serviceuuid"], "uid-web");
    assert_eq!(groups[0]["tags"]["tke-clusterId"], CLUSTER);
    assert_eq!(
        groups[0]["ingress"],
        serde_json::json!([
            {"protocol": "TCP", "port": "80", "action": "ACCEPT", "cidr": "143.231.0.0/16"},
            {"protocol": "UDP", "port": "53", "action": "ACCEPT", "cidr": "143.231.0.0/16"},
        ])
    );
}

//! The mock through the official `bce-python-sdk` (an outsider that signs its own requests):
//! signature and timestamp checks, the `creating` → `available` transition and the refusal of
//! changes meanwhile, body validation, quotas, EIP bind/unbind/release rules, the journal and
//! fault injection.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::path::PathBuf;
use std::time::Duration;

use kube_lb_mock_baidu::{
    ACCESS_KEY_ID, ApiError, Fault, MockBaidu, Quotas, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID,
};
use serde_json::Value;

/// The venv's Python (`KUBE_LB_PYTHON` overrides it).
fn python() -> PathBuf {
    match std::env::var_os("KUBE_LB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3"),
    }
}

#[tokio::test]
async fn official_sdk_session_sees_bce_behaviour() {
    let cloud = MockBaidu::builder()
        .create_delay(Duration::from_millis(400))
        .quotas(Quotas {
            eips: 1,
            ..Quotas::default()
        })
        .start()
        .await
        .unwrap();
    // The first describe filtered by name is answered with a throttling error.
    cloud.inject(
        Fault::respond(
            "GET",
            "/v1/blb",
            1,
            ApiError::new(429, "RequestLimitExceeded", "slow down"),
        )
        .with_query("name=sdk-blb"),
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/bce_sdk_session.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .args([
            &cloud.endpoint(),
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
            VPC_ID,
            SUBNET_ID,
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
        "bce-python-sdk session failed (run scripts/setup-venv.sh for bce-python-sdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    let error = |step: &str| out[step]["error"].as_str().unwrap_or("<none>").to_string();
    let ok = |step: &str| assert!(out[step].get("ok").is_some(), "{step}: {}", out[step]);

    // Async creation: busy first, then available; changes refused meanwhile.
    assert_eq!(out["status_after_create"], "creating");
    assert_eq!(error("listener_while_creating"), "OperationDenied");
    assert_eq!(out["status_later"], "available");
    // Body validation and conflicts.
    assert_eq!(error("bad_scheduler"), "InappropriateJSON");
    ok("tcp");
    assert_eq!(error("udp_no_check_string"), "InappropriateJSON");
    ok("udp");
    assert_eq!(error("duplicate_port"), "ListenerPortConflict");
    let listeners = out["listeners"].as_array().unwrap();
    assert_eq!(listeners.len(), 2, "{listeners:?}");
    assert_eq!(listeners[1]["listener_port"], 80);
    assert_eq!(listeners[1]["backend_port"], 30080);
    assert_eq!(listeners[1]["health_check_interval"], 5);
    ok("add_backends");
    assert_eq!(error("bad_backend"), "InappropriateJSON");
    ok("remove_backend");
    assert_eq!(out["backends"].as_array().unwrap().len(), 1);
    assert_eq!(out["backends"][0]["instance_id"], "i-node1");
    ok("delete_listener");
    // EIP rules and quota.
    let ip = out["eip_create"]["eip"].as_str().unwrap().to_string();
    assert_eq!(error("eip_quota"), "QuotaExceeded");
    ok("eip_bind");
    assert_eq!(out["blb_public_ip"], ip.as_str());
    assert_eq!(error("eip_release_bound"), "OperationDenied");
    assert_eq!(out["eips"][0]["status"], "binded");
    ok("eip_unbind");
    ok("eip_release");
    // Fault injection answers in BCE's error shape.
    assert_eq!(error("faulted_describe"), "RequestLimitExceeded");
    assert_eq!(out["faulted_describe"]["status"], 429);
    assert_eq!(out["by_name"].as_array().unwrap().len(), 1);
    // Signature checks.
    assert_eq!(error("wrong_secret"), "SignatureDoesNotMatch");
    assert_eq!(error("unknown_key"), "InvalidAccessKeyId");
    assert_eq!(out["stale"]["status"], 400);
    assert_eq!(out["stale"]["body"]["code"], "RequestExpired");
    assert!(out["stale"]["body"]["requestId"].is_string());
    ok("delete_blb");
    assert_eq!(out["blbs_after"].as_array().unwrap().len(), 0);
    // Security groups: made with their rules, bound, undeletable while bound.
    let group = out["sg_create"]["security_group_id"].as_str().unwrap();
    assert!(group.starts_with("g-"), "{}", out["sg_create"]);
    assert_eq!(error("sg_duplicate_rule"), "DuplicateRule");
    ok("sg_bind");
    let bound = out["sg_bound"].as_array().unwrap();
    assert_eq!(bound.len(), 1, "{bound:?}");
    assert_eq!(bound[0]["security_group_id"], group);
    assert_eq!(
        bound[0]["security_group_rules"][0]["source_ip"],
        "143.231.0.0/16"
    );
    assert_eq!(bound[0]["security_group_rules"][0]["port_range"], "80");
    assert_eq!(
        error("sg_delete_bound"),
        "SecurityGroup.InstancesAssociatedSecurityGroupCanNotBeDeleted"
    );
    assert_eq!(out["sg_delete_bound"]["status"], 409);
    let listed = out["sg_listed"].as_array().unwrap();
    assert_eq!(listed[0]["id"], group);
    assert_eq!(listed[0]["rules"][0]["direction"], "ingress");
    ok("sg_delete_unbound");
    assert_eq!(out["sg_after"].as_array().unwrap().len(), 0);

    // The journal saw every request, refused ones included, with the code answered.
    let journal = cloud.journal();
    assert!(journal.iter().any(|e| e.method == "POST"
        && e.path == "/v1/blb"
        && e.body.as_ref().is_some_and(|b| b["name"] == "sdk-blb")));
    assert!(
        journal
            .iter()
            .any(|e| e.code.as_deref() == Some("SignatureDoesNotMatch"))
    );
    assert!(
        journal
            .iter()
            .any(|e| e.path.starts_with("/v1/eip/") && e.query.contains("bind"))
    );
    assert_eq!(cloud.pending_faults(), 0);
}

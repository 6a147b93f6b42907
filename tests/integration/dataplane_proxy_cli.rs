//! `kube-lb proxy` command-line contract: bad settings fail fast with a clear message (exit 2)
//! before any cluster access.

use assert_cmd::Command;

fn proxy(args: &[&str]) -> assert_cmd::assert::Assert {
    Command::cargo_bin("kube-lb")
        .expect("binary")
        .arg("proxy")
        .args(args)
        .env_remove("KUBECONFIG")
        .assert()
}

#[test]
fn schedulers_nftables_cannot_express_are_rejected() {
    let output = proxy(&[
        "--node-name",
        "n1",
        "--mode",
        "nftables",
        "--scheduler",
        "lc",
    ])
    .code(2)
    .get_output()
    .clone();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not available in nftables mode"),
        "{stderr}"
    );
}

#[test]
fn unknown_userspace_scheduler_is_rejected() {
    let output = proxy(&[
        "--node-name",
        "n1",
        "--mode",
        "userspace",
        "--scheduler",
        "wlc",
    ])
    .code(2)
    .get_output()
    .clone();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown scheduler"), "{stderr}");
}

#[test]
fn nodeport_addresses_must_be_cidrs() {
    proxy(&["--node-name", "n1", "--nodeport-addresses", "10.0.0.0/33"]).failure();
}

#[test]
fn missing_kubeconfig_is_reported() {
    let output = proxy(&[
        "--node-name",
        "n1",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ])
    .code(2)
    .get_output()
    .clone();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

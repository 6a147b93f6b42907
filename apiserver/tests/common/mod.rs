//! Shared helpers of the integration tests.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use serde_json::json;

/// Waits for `check` to return `Some`, polling every few milliseconds, failing after `ceiling`.
pub async fn eventually<T, F, Fut>(ceiling: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + ceiling;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {ceiling:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A Service fixture.
pub fn service(name: &str, spec: serde_json::Value) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

/// A LoadBalancer Service with one TCP port.
pub fn lb_service(name: &str, port: i32) -> Service {
    service(
        name,
        json!({"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"name": "http", "port": port}]}),
    )
}

/// kubectl 1.32, as installed with the Google Cloud CLI.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// kubectl, or `None` (a loud skip) outside CI; under `CI=true` a missing kubectl fails.
pub fn kubectl_available(test: &str) -> bool {
    if std::path::Path::new(KUBECTL).exists() {
        return true;
    }
    let message = format!("{test}: {KUBECTL} is not installed (install kubectl 1.32 to run it)");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("\n\n*** SKIPPING {message} ***\n\n");
    false
}

/// Runs kubectl against the server of `kubeconfig`.
pub async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .args(["--request-timeout=20s"])
        .args(args)
        .output()
        .await
        .unwrap()
}

/// Runs kubectl and returns its stdout; a failure fails the test.
pub async fn ok(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed ({}):\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

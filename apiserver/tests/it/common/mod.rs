//! Shared helpers of the integration tests.

#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use reqwest::Method;
use serde_json::{Value, json};

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

/// The resourceVersion of a list of `api` made now: where a watch of what happens next
/// starts.
pub async fn list_version<K>(api: &kube::Api<K>) -> String
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap()
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

/// Runs kubectl with `-o json` and parses what it printed; a failure fails the test.
pub async fn get_json(kubeconfig: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&ok(kubeconfig, &all).await).unwrap()
}

/// A server, and a kubeconfig in a temporary directory (which lives as long as this) that
/// points kubectl at it.
pub struct KubectlRig {
    /// The server.
    pub server: kube_lb_apiserver::RunningApiServer,
    /// The directory of the kubeconfig, for the test's own files too.
    pub dir: tempfile::TempDir,
    /// The kubeconfig.
    pub kubeconfig: std::path::PathBuf,
}

/// Starts a server for a kubectl test, or `None` (a loud skip, see [`kubectl_available`]).
pub async fn kubectl_rig(test: &str) -> Option<KubectlRig> {
    if !kubectl_available(test) {
        return None;
    }
    let server = kube_lb_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    Some(KubectlRig {
        server,
        dir,
        kubeconfig,
    })
}

/// Sends a request and returns the status code and the JSON body.
pub async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    content_type: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request
            .header("content-type", content_type)
            .body(body.to_string());
    }
    let response = request.send().await.unwrap();
    let code = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// A GET through [`call`].
pub async fn get(http: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    call(http, reqwest::Method::GET, url, "", None).await
}

/// A POST of `body` as JSON through [`call`].
pub async fn post(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    call(http, Method::POST, url, "application/json", Some(body)).await
}

/// A PUT of `body` as JSON through [`call`].
pub async fn put(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    call(http, Method::PUT, url, "application/json", Some(body)).await
}

/// The content type of a JSON merge patch (RFC 7386).
pub const MERGE_PATCH: &str = "application/merge-patch+json";

/// A JSON merge patch of `url` with `body` through [`call`].
pub async fn merge_patch(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    call(http, Method::PATCH, url, MERGE_PATCH, Some(body)).await
}

/// A server keeping its state in the file `state` (and starting from it if it exists).
pub async fn persisting_to(state: &std::path::Path) -> RunningApiServer {
    ApiServer::builder()
        .state_file(state)
        .start()
        .await
        .unwrap()
}

/// Stops `server` abruptly once the state file at `state` records everything it stored:
/// dropped, not shut down, so there is no final write. Then starts another server from that
/// file.
pub async fn crash_and_restart(
    server: RunningApiServer,
    state: &std::path::Path,
) -> RunningApiServer {
    state_file_reaches(state, server.store().current_version()).await;
    drop(server);
    persisting_to(state).await
}

/// Waits until the state file at `state` records `version` (it is written behind the
/// changes).
pub async fn state_file_reaches(state: &std::path::Path, version: u64) {
    eventually(
        Duration::from_secs(10),
        "the state file to catch up",
        || {
            let state = state.to_path_buf();
            async move {
                let text = std::fs::read_to_string(&state).ok()?;
                let dump: serde_json::Value = serde_json::from_str(&text).ok()?;
                (dump["resourceVersion"].as_u64() == Some(version)).then_some(())
            }
        },
    )
    .await;
}

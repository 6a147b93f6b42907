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

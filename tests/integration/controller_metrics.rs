//! `/metrics`, `/healthz` and `/readyz` served next to a running controller.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use controller_support::*;
use tokio::sync::watch;

#[tokio::test]
async fn metrics_count_reconciles_cloud_calls_and_load_balancers() {
    let server = server().await;
    let client = server.client().unwrap();
    let running = start_controller(&server, test_config(), true);
    let (ready_tx, ready_rx) = watch::channel(false);
    let (addr, task) = kube_lb::health::serve(
        "127.0.0.1:0".parse().unwrap(),
        running.metrics.clone(),
        ready_rx,
        running.shutdown.clone(),
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        let http = http.clone();
        async move {
            let response = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    assert_eq!(get("/readyz").await.0, 503);
    ready_tx.send_replace(true);
    assert_eq!(get("/readyz").await.0, 200);

    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    let (status, text) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.contains(
            r#"kube_lb_cloud_calls_total{provider="local",operation="allocate",kind="mutate"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains("# TYPE kube_lb_reconcile_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        text.contains(r#"kube_lb_reconciles_total{result="success"}"#),
        "{text}"
    );
    assert!(text.contains("kube_lb_load_balancers_managed 1"), "{text}");
    running.stop().await;
    task.await.unwrap();
}

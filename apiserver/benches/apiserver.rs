//! Throughput and latency of the in-memory API server over loopback HTTP.
//!
//! Run: `cargo bench -p kube-lb-apiserver --bench apiserver`
//! (`KUBE_LB_BENCH_SERVICES` changes the number of Services, default 10000.)
//!
//! Measures: creating N Services over HTTP (64 in flight), listing all N (raw bytes and decoded
//! into k8s-openapi types, best and median of 5), and the delay from sending a PATCH to the
//! matching watch event arriving (200 sequential patches, p50/p99/max).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_lb_apiserver::ApiServer;
use serde_json::json;

fn service(i: usize) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("svc-{i:05}"), "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"type": "LoadBalancer", "selector": {"app": "bench"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080}]},
    }))
    .expect("static fixture")
}

fn summary(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!(
        "p50 {:?}  p99 {:?}  max {:?}  (n={})",
        pick(0.5),
        pick(0.99),
        samples[samples.len() - 1],
        samples.len()
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let count: usize = std::env::var("KUBE_LB_BENCH_SERVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let server = ApiServer::builder()
        .history(1000)
        .node_port_range(30000..=32767)
        .start()
        .await
        .expect("server starts");
    let client = server.client().expect("client");
    let api: Api<Service> = Api::namespaced(client.clone(), "default");

    // Node ports run out after 2768 LoadBalancers; the rest are ClusterIP.
    let started = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move {
                let mut svc = service(i);
                if i >= 2000 {
                    svc.spec.as_mut().expect("spec").type_ = Some("ClusterIP".into());
                }
                api.create(&PostParams::default(), &svc)
                    .await
                    .expect("create")
            }
        })
        .buffer_unordered(64)
        .for_each(|_| async {})
        .await;
    let elapsed = started.elapsed();
    println!(
        "create {count} Services over HTTP: {elapsed:?} ({:.0}/s)",
        count as f64 / elapsed.as_secs_f64()
    );

    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/namespaces/default/services", server.url());
    let mut raw = Vec::new();
    let mut bytes = 0;
    for _ in 0..5 {
        let t = Instant::now();
        let body = http
            .get(&url)
            .send()
            .await
            .expect("list")
            .bytes()
            .await
            .expect("body");
        raw.push(t.elapsed());
        bytes = body.len();
    }
    raw.sort();
    println!(
        "list {count} Services, raw HTTP ({:.1} MB): best {:?}, median {:?}",
        bytes as f64 / 1e6,
        raw[0],
        raw[2]
    );
    let mut typed = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await.expect("list");
        assert_eq!(list.items.len(), count);
        typed.push(t.elapsed());
    }
    typed.sort();
    println!(
        "list {count} Services, kube-rs decoded: best {:?}, median {:?}",
        typed[0], typed[2]
    );

    let rv = server.store().current_version().to_string();
    let mut events = api
        .watch(
            &WatchParams::default().fields("metadata.name=svc-00000"),
            &rv,
        )
        .await
        .expect("watch")
        .boxed();
    let mut latencies = Vec::new();
    let params = PatchParams::default();
    for i in 0..200 {
        let patch = Patch::Merge(json!({"metadata": {"annotations": {"n": i.to_string()}}}));
        let sent = Instant::now();
        // Time the event's arrival on its own, not the PATCH response.
        let (_, (event, arrived)) = tokio::join!(api.patch("svc-00000", &params, &patch), async {
            let event = events.next().await;
            (event, Instant::now())
        });
        match event {
            Some(Ok(WatchEvent::Modified(_))) => latencies.push(arrived - sent),
            other => panic!("unexpected watch item {other:?}"),
        }
    }
    println!("PATCH -> watch event latency: {}", summary(latencies));
}

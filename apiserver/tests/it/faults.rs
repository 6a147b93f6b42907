//! Fault injection seen by a kube-rs client: errors by verb and resource, delays, and the same
//! faults for the same seed.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::lb_service;
use k8s_openapi::api::core::v1::{Node, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube_lb_apiserver::{ApiServer, FaultAction, FaultRule, Verb};
use serde_json::json;

fn code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn errors_hit_only_matching_requests() {
    let server = ApiServer::builder().start().await.unwrap();
    let client = server.client().unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let nodes: Api<Node> = Api::all(client);
    services
        .create(&PostParams::default(), &lb_service("web", 80))
        .await
        .unwrap();

    server.faults().add(
        FaultRule::new(FaultAction::InternalError)
            .verb(Verb::List)
            .resource("services"),
    );
    server
        .faults()
        .add(FaultRule::new(FaultAction::Conflict).verb(Verb::Patch));
    assert_eq!(
        code(services.list(&ListParams::default()).await.unwrap_err()),
        500
    );
    nodes.list(&ListParams::default()).await.unwrap();
    services.get("web").await.unwrap();
    let patch = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(
        code(
            services
                .patch("web", &PatchParams::default(), &patch)
                .await
                .unwrap_err()
        ),
        409
    );
    assert_eq!(server.faults().injected(), 2);

    server.faults().clear();
    server
        .faults()
        .add(FaultRule::new(FaultAction::InternalError).resource("nodes"));
    assert_eq!(
        code(nodes.list(&ListParams::default()).await.unwrap_err()),
        500
    );
    services.list(&ListParams::default()).await.unwrap();
}

#[tokio::test]
async fn throttling_is_retried_by_kube_clients() {
    let server = ApiServer::builder().fault_seed(3).start().await.unwrap();
    server.faults().add(
        FaultRule::new(FaultAction::TooManyRequests)
            .verb(Verb::List)
            .fraction(0.5),
    );
    // Raw HTTP sees the 429 with Retry-After ...
    let url = format!("{}/api/v1/namespaces/default/services", server.url());
    let mut saw_429 = false;
    for _ in 0..20 {
        let response = reqwest::get(&url).await.unwrap();
        if response.status().as_u16() == 429 {
            assert_eq!(response.headers()["retry-after"], "1");
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["reason"], "TooManyRequests");
            saw_429 = true;
        }
    }
    assert!(saw_429);
    // ... while kube-rs' default retry policy rides it out.
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let before = server.faults().injected();
    for _ in 0..10 {
        services.list(&ListParams::default()).await.unwrap();
    }
    assert!(server.faults().injected() > before);
}

#[tokio::test]
async fn delays_slow_requests_down() {
    let server = ApiServer::builder().start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    server
        .faults()
        .add(FaultRule::new(FaultAction::Delay(Duration::from_millis(200))).verb(Verb::List));
    let started = Instant::now();
    services.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

async fn failure_pattern(seed: u64) -> Vec<bool> {
    let server = ApiServer::builder().fault_seed(seed).start().await.unwrap();
    let services: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    server.faults().add(
        FaultRule::new(FaultAction::InternalError)
            .verb(Verb::List)
            .fraction(0.3),
    );
    let mut pattern = Vec::new();
    for _ in 0..40 {
        pattern.push(services.list(&ListParams::default()).await.is_err());
    }
    pattern
}

#[tokio::test]
async fn same_seed_same_faults() {
    let first = failure_pattern(42).await;
    assert_eq!(first, failure_pattern(42).await);
    let failures = first.iter().filter(|f| **f).count();
    assert!((4..=20).contains(&failures), "{failures} of 40 at 0.3");
}

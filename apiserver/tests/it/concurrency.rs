//! Many clients at once: allocation without collisions and watch events in order.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeSet;

use common::{lb_service, list_version};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube_lb_apiserver::ApiServer;

const CREATES: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_allocate_unique_addresses_and_ports() {
    // Small ranges make collisions likely if allocation were racy.
    let server = ApiServer::builder()
        .service_cidr("10.0.0.0/23".parse().unwrap())
        .node_port_range(30000..=30450)
        .history(10_000)
        .start()
        .await
        .unwrap();
    let client = server.client().unwrap();
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    let start = list_version(&api).await;
    let watch = api
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();

    let creates = (0..CREATES).map(|i| {
        let api = api.clone();
        tokio::spawn(async move {
            // Half the Services are LoadBalancers with node ports, half ClusterIP only.
            let mut svc = lb_service(&format!("svc-{i:03}"), 80);
            if i % 2 == 1 {
                svc.spec.as_mut().unwrap().type_ = Some("ClusterIP".to_string());
            }
            api.create(&PostParams::default(), &svc).await
        })
    });
    let results = futures::future::join_all(creates).await;
    let mut ips = BTreeSet::new();
    let mut ports = BTreeSet::new();
    for result in results {
        let svc = result.unwrap().unwrap();
        let spec = svc.spec.unwrap();
        assert!(ips.insert(spec.cluster_ip.unwrap()), "duplicate cluster IP");
        if let Some(np) = spec.ports.unwrap()[0].node_port {
            assert!(ports.insert(np), "duplicate node port {np}");
        }
    }
    assert_eq!(ips.len(), CREATES);
    assert_eq!(ports.len(), CREATES / 2);

    // The watch saw every create exactly once, in increasing resourceVersion order.
    let events: Vec<WatchEvent<Service>> = watch.take(CREATES).try_collect().await.unwrap();
    let mut last = 0u64;
    let mut names = BTreeSet::new();
    for event in events {
        let WatchEvent::Added(svc) = event else {
            panic!("expected only ADDED events, got {event:?}");
        };
        let rv: u64 = svc.metadata.resource_version.unwrap().parse().unwrap();
        assert!(rv > last, "events out of order: {rv} after {last}");
        last = rv;
        names.insert(svc.metadata.name.unwrap());
    }
    assert_eq!(names.len(), CREATES);
}

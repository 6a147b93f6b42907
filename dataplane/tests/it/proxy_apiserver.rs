//! The whole proxy: the in-memory API server, the watch loop and the nftables backend of one
//! node programming a network namespace; traffic from a client namespace to real pods.

#![cfg(feature = "watch")]

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::testing::{node, service, slice};
use kube_lb_dataplane::watch;
use support::{Lab, Outcome, eventually, names, node_ip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_objects_drive_the_node_rules() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let server = ApiServer::builder().start().await.expect("api server");
    for i in 1..=2 {
        server
            .seed(node(&format!("n{i}"), "za", "r1", &[&node_ip(i)]))
            .expect("seed node");
    }
    server
        .seed(
            service("default", "web", "10.96.0.10")
                .port("http", "TCP", 80)
                .node_port(30080)
                .build(),
        )
        .expect("seed service");
    let web_slice = |pods: &[&support::Pod]| -> EndpointSlice {
        let mut builder = slice("default", "web", "web-1").port("http", "TCP", 8080);
        for pod in pods {
            builder = builder.endpoint(&pod.ip, &pod.node);
        }
        builder.build()
    };
    let client = server.client().expect("client");
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices
        .create(&PostParams::default(), &web_slice(&[&a, &b]))
        .await
        .expect("create slice");

    let (proxy, health) = support::node_proxy(
        support::nft_dataplane(&lab.ns("n1")),
        Duration::from_millis(100),
        Duration::from_secs(2),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(watch::run(client.clone(), proxy, async {
        let _ = stopped.await;
    }));

    let both = BTreeSet::from(["a".to_string(), "b".to_string()]);
    let lab_ref = &lab;
    let reached = |addr: &'static str, expected: BTreeSet<String>| {
        move || {
            let outcomes = lab_ref.tcp("c", addr, 20, 1000);
            outcomes.iter().all(|o| o.name().is_some()) && names(&outcomes) == expected
        }
    };
    assert!(
        eventually(
            Duration::from_secs(20),
            reached("10.96.0.10:80", both.clone())
        ),
        "ClusterIP never served"
    );
    assert!(
        eventually(Duration::from_secs(5), reached("10.0.0.11:30080", both)),
        "NodePort never served"
    );

    // The EndpointSlice loses b: new connections only reach a.
    let mut current = slices.get("web-1").await.expect("get slice");
    current
        .endpoints
        .retain(|endpoint| endpoint.addresses.first() == Some(&a.ip));
    slices
        .replace("web-1", &PostParams::default(), &current)
        .await
        .expect("replace slice");
    assert!(eventually(
        Duration::from_secs(10),
        reached("10.96.0.10:80", BTreeSet::from(["a".to_string()]))
    ));

    // No endpoints left: refused.
    slices
        .delete("web-1", &DeleteParams::default())
        .await
        .expect("delete slice");
    assert!(eventually(Duration::from_secs(10), || {
        lab_ref.tcp("c", "10.96.0.10:80", 1, 1000) == vec![Outcome::Err("refused".into())]
    }));
    assert!(health.status().healthy);

    let _ = stop.send(());
    running.await.expect("join").expect("proxy loop");
    drop(server);
}

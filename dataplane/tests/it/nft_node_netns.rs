//! The nftables backend driven by the whole proxy loop (in-memory API server, watch loop,
//! interface-address follower) for node 1 of a namespace lab: Endpoints subsets on their own
//! ports, and NodePorts that follow the node's interface addresses.

#![cfg(feature = "watch")]

use crate::support;

use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Endpoints;
use kube::Api;
use kube::api::PostParams;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::node_addresses::{self, AddressSource};
use kube_lb_dataplane::testing::{node, service, slice};
use kube_lb_dataplane::watch;
use support::{Lab, Outcome, eventually, names, node_ip, set};

/// The proxy loop of node 1 with the nftables backend.
struct NodeProxy {
    client: kube::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), watch::WatchError>>,
    _addresses: node_addresses::NodeAddresses,
    _server: kube_lb_apiserver::RunningApiServer,
}

impl NodeProxy {
    async fn start(lab: &Lab, nodes: usize, cidrs: &[&str]) -> NodeProxy {
        let server = ApiServer::builder().start().await.expect("api server");
        for i in 1..=nodes {
            server
                .seed(node(&format!("n{i}"), "za", "r1", &[&node_ip(i)]))
                .expect("seed node");
        }
        let client = server.client().expect("client");
        let cidrs: Vec<IpNet> = cidrs.iter().map(|c| c.parse().expect("cidr")).collect();
        let addresses = node_addresses::follow(
            AddressSource::Netns(lab.ns("n1")),
            cidrs,
            Duration::from_millis(200),
        )
        .await
        .expect("interface addresses");
        let (proxy, _health) = support::node_proxy(
            support::nft_dataplane(&lab.ns("n1")),
            Duration::from_millis(50),
            Duration::from_secs(1),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(watch::run_with_addresses(
            client.clone(),
            proxy,
            Some(addresses.subscribe()),
            async {
                let _ = stopped.await;
            },
        ));
        NodeProxy {
            client,
            stop,
            running,
            _addresses: addresses,
            _server: server,
        }
    }

    async fn create<K>(&self, object: &K)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), object)
            .await
            .expect("create");
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.running.await.expect("join").expect("proxy loop");
    }
}

fn two_subsets(a_ip: &str, b_ip: &str, with_a: bool) -> Endpoints {
    let mut subsets = vec![serde_json::json!({
        "addresses": [{ "ip": b_ip, "nodeName": "n2" }],
        "ports": [{ "name": "http", "port": 9377, "protocol": "TCP" }]
    })];
    if with_a {
        subsets.insert(
            0,
            serde_json::json!({
                "addresses": [{ "ip": a_ip, "nodeName": "n1" }],
                "ports": [{ "name": "http", "port": 9376, "protocol": "TCP" }]
            }),
        );
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": { "namespace": "default", "name": "legacy" },
        "subsets": subsets
    }))
    .expect("endpoints")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nft_endpoints_subsets_keep_their_own_ports() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let a9376 = support::Server::start(&lab.ns("pa"), "a9376", 9376);
    let _b9377 = support::Server::start(&lab.ns("pb"), "b9377", 9377);
    let proxy = NodeProxy::start(&lab, 2, &[]).await;
    proxy
        .create(
            &service("default", "legacy", "10.96.0.20")
                .port("http", "TCP", 80)
                .no_selector()
                .build(),
        )
        .await;
    proxy.create(&two_subsets(&a.ip, &b.ip, true)).await;
    let both = set(&["a9376", "b9377"]);
    lab.assert_reaches("c", "10.96.0.20:80", &both, 12, Duration::from_secs(15));

    // a's server stops while still listed: the kernel has no retry, so connections that pick a
    // are refused, but the others reach b on b's own port.
    drop(a9376);
    let outcomes = lab.tcp("c", "10.96.0.20:80", 20, 2000);
    let answered: Vec<&Outcome> = outcomes.iter().filter(|o| o.name().is_some()).collect();
    assert!(!answered.is_empty(), "{outcomes:?}");
    assert_eq!(names(&outcomes), set(&["b9377"]), "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o.name().is_some() || *o == Outcome::Err("refused".into())),
        "{outcomes:?}"
    );
    // Once a's subset is gone, every connection reaches b.
    Api::<Endpoints>::namespaced(proxy.client.clone(), "default")
        .replace(
            "legacy",
            &PostParams::default(),
            &two_subsets(&a.ip, &b.ip, false),
        )
        .await
        .expect("replace endpoints");
    lab.assert_reaches(
        "c",
        "10.96.0.20:80",
        &set(&["b9377"]),
        12,
        Duration::from_secs(10),
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nft_nodeports_follow_the_node_interface_addresses() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let proxy = NodeProxy::start(&lab, 1, &["10.0.0.0/24"]).await;
    proxy
        .create(
            &service("default", "web", "10.96.0.10")
                .port("http", "TCP", 80)
                .node_port(30080)
                .build(),
        )
        .await;
    proxy
        .create(
            &slice("default", "web", "web-1")
                .port("http", "TCP", 8080)
                .endpoint(&a.ip, "n1")
                .build(),
        )
        .await;
    let only_a = set(&["a"]);
    lab.assert_reaches("c", "10.0.0.11:30080", &only_a, 12, Duration::from_secs(15));
    // Outside --nodeport-addresses: nothing answers there.
    lab.assert_refused("pa", "10.244.1.1:30080");
    // An address added after start gains the NodePort; removed, it leaves the set.
    lab.add_node_address(1, "10.0.0.50/32");
    lab.assert_reaches("c", "10.0.0.50:30080", &only_a, 12, Duration::from_secs(10));
    lab.exec("n1", &["ip", "addr", "del", "10.0.0.50/32", "dev", "eth0"]);
    assert!(
        eventually(Duration::from_secs(10), || {
            !lab.exec(
                "n1",
                &["nft", "list", "set", "ip", "kube-lb", "nodeport-ips"],
            )
            .contains("10.0.0.50")
        }),
        "{}",
        lab.exec(
            "n1",
            &["nft", "list", "set", "ip", "kube-lb", "nodeport-ips"]
        )
    );
    proxy.stop().await;

    // The seed's example: 127.0.0.0/8 serves NodePorts on loopback only (host clients).
    let proxy = NodeProxy::start(&lab, 1, &["127.0.0.0/8"]).await;
    proxy
        .create(
            &service("default", "web", "10.96.0.10")
                .port("http", "TCP", 80)
                .node_port(30080)
                .build(),
        )
        .await;
    proxy
        .create(
            &slice("default", "web", "web-1")
                .port("http", "TCP", 8080)
                .endpoint(&a.ip, "n1")
                .build(),
        )
        .await;
    lab.assert_reaches(
        "n1",
        "127.0.0.1:30080",
        &only_a,
        12,
        Duration::from_secs(15),
    );
    lab.assert_refused("c", "10.0.0.11:30080");
    proxy.stop().await;
}

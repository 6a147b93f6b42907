//! The cost of a no-op resync: no mutating call, and at most one read per load balancer
//! amortised over a resync wave (one project listing shared by every Service, pool members
//! re-read only when a pool's member ids changed). Proven with the call counter and the
//! mock's journal.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_provider_core::LoadBalancerProvider;
use support::*;

/// Long enough for one wave on a loaded machine; the test waits it out between waves.
const REFRESH: Duration = Duration::from_secs(2);

fn uid(i: usize) -> String {
    format!("8ae4a1c2-6b2e-11e9-a923-{i:012}")
}

#[tokio::test]
async fn a_no_op_resync_wave_reads_each_resource_type_once() {
    let h = harness().await;
    let provider = h.provider.clone().with_listing_refresh(REFRESH);
    let services: Vec<Svc> = (0..6)
        .map(|i| {
            let service = svc(&format!("web-{i}"), &uid(i))
                .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
            if i % 3 == 0 {
                service.internal()
            } else {
                service
            }
        })
        .collect();
    let wave = || async {
        for service in &services {
            provider.ensure(&service.spec(), &nodes(3)).await.unwrap();
        }
    };
    wave().await; // creates
    tokio::time::sleep(REFRESH).await;
    wave().await; // warms the member cache (first read of every pool's members)
    tokio::time::sleep(REFRESH).await;

    h.cloud.clear_journal();
    let before = h.counter.snapshot();
    wave().await;
    let calls = h.counter.snapshot().since(&before);
    assert_eq!(calls.mutations(), 0, "{calls:?}");
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    let reads: Vec<String> = h
        .cloud
        .journal()
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(
        reads,
        vec![
            "GET /load-balancer/v2/lbaas/loadbalancers",
            "GET /load-balancer/v2/lbaas/listeners",
            "GET /load-balancer/v2/lbaas/pools",
            "GET /networking/v2.0/floatingips",
        ],
        "one listing per resource type for the whole wave (no monitors here)"
    );
    assert!(calls.reads() as usize <= services.len(), "{calls:?}");
    assert_eq!(calls.reads(), 4);
}

#[tokio::test]
async fn a_node_change_re_reads_only_the_changed_pools_and_later_resyncs_stay_cheap() {
    let h = harness().await;
    let provider = h.provider.clone().with_listing_refresh(REFRESH);
    let web =
        svc("web", &uid(1)).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    tokio::time::sleep(REFRESH).await;
    provider.ensure(&web.spec(), &nodes(2)).await.unwrap(); // warm

    // Within the same wave the listing is not used twice: the Service's own scoped reads
    // (load balancer, listeners, pools, floating IP) still skip the unchanged members.
    h.cloud.clear_journal();
    provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    let member_reads = |cloud: &kube_lb_mock_openstack::MockOpenStack| {
        cloud
            .journal()
            .iter()
            .filter(|e| e.method == "GET" && e.path.ends_with("/members"))
            .count()
    };
    assert_eq!(member_reads(&h.cloud), 0);
    assert_eq!(
        mutations(&h.cloud).len(),
        2,
        "one batch member update per pool"
    );

    // The next wave sees new member ids on both pools: they are read once, then cached.
    tokio::time::sleep(REFRESH).await;
    h.cloud.clear_journal();
    provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    assert_eq!(member_reads(&h.cloud), 2);
    assert!(mutations(&h.cloud).is_empty());
    tokio::time::sleep(REFRESH).await;
    h.cloud.clear_journal();
    provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    assert_eq!(member_reads(&h.cloud), 0);
    assert!(mutations(&h.cloud).is_empty());
}

#[tokio::test]
async fn a_legacy_named_load_balancer_is_answered_from_the_listing_too() {
    // Kubernetes' in-tree provider named it `a<UID>`: once adopted, its resyncs cost no more
    // than any other's (the listing is searched under the legacy name as well).
    let h = harness().await;
    let provider = h.provider.clone().with_listing_refresh(REFRESH);
    // Random like a real UID: the legacy name keeps only 31 of its 32 digits, so the test's
    // counting UIDs (differing in the last digit) would all share one legacy name.
    let legacy_uid = "3c9f1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b".to_string();
    let occm_nodes = nodes(2)
        .iter()
        .map(|n| (n.name.clone(), n.internal_ip().unwrap().to_string()))
        .collect();
    build_occm_state(
        &h.cloud,
        CLUSTER,
        &OccmService {
            legacy_uid: Some(legacy_uid.clone()),
            ..OccmService::new("old", occm_nodes)
        },
    )
    .await;
    let services = [svc("old", &legacy_uid), svc("web", &uid(1))];
    let wave = || async {
        for service in &services {
            provider.ensure(&service.spec(), &nodes(2)).await.unwrap();
        }
    };
    wave().await; // adopts old, creates web
    assert_eq!(
        h.cloud.load_balancers().len(),
        2,
        "{:#?}",
        h.cloud.load_balancers()
    );
    tokio::time::sleep(REFRESH).await;
    wave().await; // warms the member cache
    tokio::time::sleep(REFRESH).await;

    h.cloud.clear_journal();
    wave().await;
    let reads: Vec<String> = h
        .cloud
        .journal()
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(
        reads,
        vec![
            "GET /load-balancer/v2/lbaas/loadbalancers",
            "GET /load-balancer/v2/lbaas/listeners",
            "GET /load-balancer/v2/lbaas/pools",
            "GET /networking/v2.0/floatingips",
        ],
        "no lookup by name, legacy or not"
    );
}

/// Without a configured member subnet, every Service finds it from the nodes' ports: one port
/// listing serves a whole wave (the same nodes back every Service), not one per Service.
#[tokio::test]
async fn member_subnet_discovery_lists_the_nodes_ports_once_per_wave() {
    let cloud = mock_with_node_ports(3).await;
    let conf = crate::member_subnet::network_only_conf(&cloud, "");
    let h = provider_for(
        cloud,
        kube_lb_provider_openstack::CloudConfig::parse(&conf).unwrap(),
    );
    let provider = h.provider.clone().with_listing_refresh(REFRESH);
    let services: Vec<Svc> = (0..4).map(|i| svc(&format!("web-{i}"), &uid(i))).collect();
    for service in &services {
        provider.ensure(&service.spec(), &nodes(3)).await.unwrap();
    }
    tokio::time::sleep(REFRESH).await;

    h.cloud.clear_journal();
    for service in &services {
        provider.ensure(&service.spec(), &nodes(3)).await.unwrap();
    }
    let port_listings = h
        .cloud
        .journal()
        .iter()
        .filter(|e| e.method == "GET" && e.path == "/networking/v2.0/ports")
        .count();
    assert_eq!(port_listings, 1, "{:?}", h.cloud.journal());
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
}

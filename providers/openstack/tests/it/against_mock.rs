//! The OpenStack provider against the mock Keystone + Octavia + Neutron: every test reads
//! the cloud state back.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_mock_openstack::{Fault, MockOpenStack, PRIVATE_SUBNET_ID, PUBLIC_NETWORK_ID};
use kube_lb_provider_core::{LoadBalancerProvider, ProviderError};
use kube_lb_provider_openstack::CloudConfig;
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";

fn ip_of(status: &kube_lb_provider_core::LoadBalancerStatus) -> String {
    status.ingress[0].ip.expect("ingress ip").to_string()
}

#[tokio::test]
async fn ensure_creates_the_upstream_object_graph_and_a_floating_ip() {
    let h = harness().await;
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)]);
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();

    let name = "kube_service_kubernetes_default_web";
    let lb = lb_named(&h.cloud, name);
    assert_eq!(lb["provisioning_status"], "ACTIVE");
    assert_eq!(
        lb["description"],
        "Kubernetes external service default/web from cluster kubernetes"
    );
    assert_eq!(lb["vip_subnet_id"], PRIVATE_SUBNET_ID);
    assert_eq!(
        lb["tags"],
        serde_json::json!([name, format!("kube_lb_uid_{UID_A}")])
    );

    let listeners = listeners_of(&h.cloud, lb["id"].as_str().unwrap());
    let summary: Vec<(String, String, u64)> = listeners
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().into(),
                l["protocol"].as_str().unwrap().into(),
                l["protocol_port"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (format!("listener_1_{name}"), "UDP".into(), 53),
            (format!("listener_0_{name}"), "TCP".into(), 80),
        ]
    );
    let http_pool = pool(&h.cloud, &listeners[1]["default_pool_id"]);
    assert_eq!(http_pool["name"], format!("pool_0_{name}"));
    assert_eq!(http_pool["lb_algorithm"], "ROUND_ROBIN");
    assert_eq!(
        member_set(&h.cloud, &http_pool["id"]),
        vec![
            ("node-1".into(), "10.0.0.101".into(), 30080),
            ("node-2".into(), "10.0.0.102".into(), 30080)
        ]
    );
    let dns_pool = pool(&h.cloud, &listeners[0]["default_pool_id"]);
    assert_eq!(dns_pool["protocol"], "UDP");
    assert_eq!(member_set(&h.cloud, &dns_pool["id"]).len(), 2);
    assert!(
        h.cloud.health_monitors().is_empty(),
        "create-monitor defaults to false for Cluster policy"
    );

    let fips = h.cloud.floating_ips();
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0]["port_id"], lb["vip_port_id"]);
    assert_eq!(fips[0]["floating_network_id"], PUBLIC_NETWORK_ID);
    assert_eq!(
        fips[0]["description"],
        "Floating IP for Kubernetes external service default/web from cluster kubernetes"
    );
    assert_eq!(
        ip_of(&status),
        fips[0]["floating_ip_address"].as_str().unwrap()
    );

    // One fully populated create and one floating IP: no per-object calls.
    let writes = mutations(&h.cloud);
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes[0].starts_with("POST loadbalancers 201"),
        "{writes:?}"
    );
    assert!(writes[1].starts_with("POST floatingips 201"), "{writes:?}");
}

#[tokio::test]
async fn second_ensure_makes_no_mutating_call() {
    let h = harness().await;
    let web = svc("web", UID_A)
        .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)])
        .local(32000);
    let db = svc("db", UID_B).internal();
    let first_web = h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    let first_db = h.provider.ensure(&db.spec(), &nodes(3)).await.unwrap();
    assert_eq!(
        h.cloud.health_monitors().len(),
        2,
        "Local traffic gets a monitor per port"
    );
    assert!(
        h.cloud
            .health_monitors()
            .iter()
            .all(|m| m["type"] == "HTTP" && m["url_path"] == "/healthz")
    );

    h.cloud.clear_journal();
    let before = h.counter.snapshot();
    assert_eq!(
        h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap(),
        first_web
    );
    assert_eq!(
        h.provider.ensure(&db.spec(), &nodes(3)).await.unwrap(),
        first_db
    );
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    let after = h.counter.snapshot();
    assert_eq!(after.mutations(), before.mutations(), "counted mutations");
    // Right after the create, within the lifetime of the listing the creates used, each
    // Service reads for itself: load balancer by name, listeners, pools, the monitor and
    // (the first time; then cached) the members per pool, the floating IP by port. The
    // external one's members are cached already: its create had a second phase (the
    // floating IP) planned from a fresh observation. A resync wave shares one listing
    // instead: see resync_cost.rs.
    let reads = h.cloud.journal().len();
    assert_eq!(reads, (3 + 2 + 1) + (3 + 1 + 1), "{:#?}", h.cloud.journal());
}

#[tokio::test]
async fn port_change_replaces_only_that_listener_and_pool() {
    let h = harness().await;
    let before =
        svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    h.provider.ensure(&before.spec(), &nodes(2)).await.unwrap();
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    let lb_id = lb["id"].as_str().unwrap();
    let kept = listeners_of(&h.cloud, lb_id)[0].clone();
    let kept_pool = pool(&h.cloud, &kept["default_pool_id"]);

    h.cloud.clear_journal();
    let after =
        svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 8443, "TCP", 30443)]);
    h.provider.ensure(&after.spec(), &nodes(2)).await.unwrap();

    let listeners = listeners_of(&h.cloud, lb_id);
    let ports: Vec<u64> = listeners
        .iter()
        .map(|l| l["protocol_port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, vec![80, 8443]);
    assert_eq!(listeners[0], kept, "the unchanged listener is untouched");
    assert_eq!(pool(&h.cloud, &kept["default_pool_id"]), kept_pool);
    let writes: Vec<String> = mutations(&h.cloud)
        .iter()
        .map(|w| {
            w.split_whitespace().next().unwrap().to_string()
                + " "
                + w.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .split('/')
                    .next()
                    .unwrap()
        })
        .collect();
    assert_eq!(
        writes,
        vec![
            "DELETE pools",
            "DELETE listeners",
            "POST listeners",
            "POST pools",
            "PUT pools"
        ],
        "{:?}",
        mutations(&h.cloud)
    );
    assert_eq!(
        member_set(&h.cloud, &listeners[1]["default_pool_id"]).len(),
        2
    );
    assert_eq!(h.cloud.floating_ips().len(), 1, "the floating IP stays");
}

#[tokio::test]
async fn node_added_is_one_batch_member_update_per_pool() {
    let h = harness().await;
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    let writes = mutations(&h.cloud);
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(
        writes
            .iter()
            .all(|w| w.starts_with("PUT pools/") && w.ends_with("/members 202")),
        "{writes:?}"
    );
    for pool in h.cloud.pools() {
        assert_eq!(member_set(&h.cloud, &pool["id"]).len(), 3);
    }
}

#[tokio::test]
async fn internal_service_gets_its_vip_and_no_floating_ip() {
    let h = harness().await;
    let db = svc("db", UID_B).internal();
    let status = h.provider.ensure(&db.spec(), &nodes(1)).await.unwrap();
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_db");
    assert_eq!(ip_of(&status), lb["vip_address"].as_str().unwrap());
    assert!(ip_of(&status).starts_with("10.0.0."));
    assert!(h.cloud.floating_ips().is_empty());

    // Switching an external Service to internal releases the floating IP kube-lb made.
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.floating_ips().len(), 1);
    let status = h
        .provider
        .ensure(&web.clone().internal().spec(), &nodes(1))
        .await
        .unwrap();
    assert!(h.cloud.floating_ips().is_empty());
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    assert_eq!(ip_of(&status), lb["vip_address"].as_str().unwrap());
}

#[tokio::test]
async fn delete_leaves_nothing_of_ours_and_keeps_a_user_floating_ip() {
    let h = harness().await;
    let user_fip = h.cloud.seed_floating_ip("reserved by the user").unwrap();
    let address = user_fip["floating_ip_address"].as_str().unwrap();
    let pinned = svc("pinned", UID_A).load_balancer_ip(address);
    let plain = svc("plain", UID_B);
    let status = h.provider.ensure(&pinned.spec(), &nodes(2)).await.unwrap();
    assert_eq!(
        ip_of(&status),
        address,
        "the user's floating IP is attached, not a new one"
    );
    h.provider.ensure(&plain.spec(), &nodes(2)).await.unwrap();
    assert_eq!(h.cloud.floating_ips().len(), 2);

    h.provider.delete(&pinned.key()).await.unwrap();
    h.provider.delete(&plain.key()).await.unwrap();
    assert!(h.cloud.load_balancers().is_empty());
    assert!(h.cloud.listeners().is_empty() && h.cloud.pools().is_empty());
    assert!(
        h.cloud.ports().is_empty(),
        "VIP ports go with their load balancers"
    );
    let fips = h.cloud.floating_ips();
    assert_eq!(fips.len(), 1, "{fips:?}");
    assert_eq!(fips[0]["id"], user_fip["id"]);
    assert!(fips[0]["port_id"].is_null());

    // Repeated delete: nothing to do, no mutation.
    h.cloud.clear_journal();
    h.provider.delete(&plain.key()).await.unwrap();
    assert!(mutations(&h.cloud).is_empty());
    assert_eq!(h.provider.status(&plain.key()).await.unwrap(), None);
}

#[tokio::test]
async fn delete_after_out_of_band_removal_releases_the_orphaned_floating_ip() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    // Someone deletes the load balancer by hand: Neutron detaches the floating IP.
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    h.cloud
        .set_status(lb["id"].as_str().unwrap(), "PENDING_DELETE", Duration::ZERO);
    assert!(h.cloud.load_balancers().is_empty());
    assert_eq!(h.cloud.floating_ips().len(), 1);
    h.provider.delete(&web.key()).await.unwrap();
    assert!(h.cloud.floating_ips().is_empty());
}

#[tokio::test]
async fn load_balancer_in_pending_update_is_waited_on() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    let lb_id = lb["id"].as_str().unwrap();

    // Another actor's change is in progress: kube-lb waits instead of failing.
    h.cloud
        .set_status(lb_id, "PENDING_UPDATE", Duration::from_millis(150));
    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let pools = h.cloud.pools();
    assert_eq!(member_set(&h.cloud, &pools[0]["id"]).len(), 2);
    assert!(
        h.cloud.journal().iter().all(|e| e.status != 409),
        "waited before changing"
    );

    // A change refused with 409 (the LB went busy between read and write) is retried.
    h.cloud.inject(Fault::respond(
        "PUT",
        "/members",
        409,
        &format!("Load Balancer {lb_id} is immutable and cannot be updated."),
        1,
    ));
    h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    assert_eq!(h.cloud.pending_faults(), 0);
    assert_eq!(member_set(&h.cloud, &pools[0]["id"]).len(), 3);

    // Every change while a provisioning delay runs is waited out.
    h.cloud.set_provisioning_delay(Duration::from_millis(30));
    let two = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("alt", 81, "TCP", 30081)]);
    h.provider.ensure(&two.spec(), &nodes(3)).await.unwrap();
    assert_eq!(listeners_of(&h.cloud, lb_id).len(), 2);
}

#[tokio::test]
async fn expired_token_is_renewed_once_and_the_call_repeated() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.tokens_issued(), 1, "the token is cached");
    h.cloud.expire_tokens();
    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.tokens_issued(), 2);
    let unauthorized = h.cloud.journal().iter().filter(|e| e.status == 401).count();
    assert_eq!(unauthorized, 1, "{:#?}", h.cloud.journal());
}

#[tokio::test]
async fn refused_credentials_are_a_permission_error() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let conf = cloud_conf(&cloud, "").replace("password = kube-lb-secret", "password = wrong");
    let h = provider_for(cloud, CloudConfig::parse(&conf).unwrap());
    let error = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ProviderError::Environment {
                cause: kube_lb_provider_core::EnvironmentCause::PermissionDenied,
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn application_credentials_and_network_autodetection_work() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let conf = app_credential_conf(&cloud);
    let h = provider_for(cloud, CloudConfig::parse(&conf).unwrap());
    let status = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    let fips = h.cloud.floating_ips();
    assert_eq!(
        fips[0]["floating_network_id"], PUBLIC_NETWORK_ID,
        "the external network was found"
    );
    assert_eq!(
        ip_of(&status),
        fips[0]["floating_ip_address"].as_str().unwrap()
    );
}

#[tokio::test]
async fn load_balancer_of_another_service_uid_is_not_touched() {
    let h = harness().await;
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    h.cloud.clear_journal();
    // Same namespace/name and cluster name, different Service (another cluster).
    let error = h
        .provider
        .ensure(&svc("web", UID_B).spec(), &nodes(2))
        .await
        .unwrap_err();
    match &error {
        ProviderError::OwnedElsewhere {
            resource, owner, ..
        } => {
            assert!(resource.contains("kube_service_"), "{error}");
            assert!(owner.contains(UID_A), "names the owner: {error}");
        }
        other => panic!("want OwnedElsewhere, got {other:?}"),
    }
    assert_eq!(error.class(), "user", "a user error");
    assert!(!error.is_retryable(), "waits for the Service to change");
    assert!(mutations(&h.cloud).is_empty());
    h.provider.delete(&svc("web", UID_B).key()).await.unwrap();
    assert_eq!(
        h.cloud.load_balancers().len(),
        1,
        "someone else's LB survives our delete"
    );
    assert_eq!(
        h.cloud.floating_ips().len(),
        1,
        "and so does its floating IP, though its description reads like ours"
    );
}

/// A Service deleted without its load balancer (its finalizer removed by hand), then made again
/// under the same namespace/name. With this cluster's identity known (its tag on the load
/// balancer), the new Service's ensure removes the leftover and its floating IP, as the first
/// Service's delete would have, and makes its own; a plan says so first. A load balancer of
/// another cluster with the same `--cluster-name` under that name stays refused and untouched.
#[tokio::test]
async fn a_leftover_of_this_cluster_is_replaced_and_another_clusters_is_refused() {
    let Harness {
        cloud, provider, ..
    } = harness().await;
    let provider = provider.with_cluster_id(Some(&"k1".parse().unwrap()));
    let name = "kube_service_kubernetes_default_web";
    provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    let first = lb_named(&cloud, name);
    assert!(
        first["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "kube_lb_cluster_k1"),
        "tagged with the cluster's identity: {first}"
    );
    let first_fip = cloud.floating_ips()[0]["id"].clone();

    // UID_A's Service is gone without a delete; UID_B's takes its namespace/name.
    let planned = provider
        .plan_ensure(&svc("web", UID_B).spec(), &nodes(1))
        .await
        .unwrap();
    let kinds: Vec<_> = planned
        .iter()
        .map(|c| format!("{:?} {}", c.action, c.kind))
        .collect();
    assert!(
        kinds.contains(&"Delete LoadBalancer".to_string())
            && kinds.contains(&"Create LoadBalancer".to_string()),
        "the plan removes the leftover and makes a new one: {kinds:?}"
    );
    assert_eq!(
        lb_named(&cloud, name)["id"],
        first["id"],
        "a plan changes nothing"
    );

    provider
        .ensure(&svc("web", UID_B).spec(), &nodes(2))
        .await
        .unwrap();
    let live: Vec<_> = cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| lb["provisioning_status"] != "DELETED")
        .collect();
    assert_eq!(live.len(), 1, "the leftover is gone, one is left: {live:?}");
    assert_ne!(live[0]["id"], first["id"]);
    assert!(
        live[0]["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| *t == format!("kube_lb_uid_{UID_B}")),
        "the new one is UID_B's: {}",
        live[0]
    );
    let fips = cloud.floating_ips();
    assert_eq!(
        fips.len(),
        1,
        "the leftover's floating IP was released: {fips:?}"
    );
    assert_ne!(fips[0]["id"], first_fip);
    assert_eq!(fips[0]["port_id"], live[0]["vip_port_id"]);

    // Another cluster sharing the cluster name, with a Service of the same namespace/name.
    let config = CloudConfig::parse(&cloud_conf(&cloud, "")).unwrap();
    let other = kube_lb_provider_openstack::OpenStackProvider::new(
        config,
        CLUSTER,
        fast_options(kube_lb_provider_core::CallCounter::new()),
    )
    .unwrap()
    .with_cluster_id(Some(&"k2".parse().unwrap()));
    cloud.clear_journal();
    let error = other
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    match &error {
        ProviderError::OwnedElsewhere { owner, .. } => {
            assert!(owner.contains(UID_B), "names the owner: {error}");
            assert!(owner.contains("kube_lb_cluster_k2"), "says why: {error}");
        }
        other => panic!("want OwnedElsewhere, got {other:?}"),
    }
    assert!(mutations(&cloud).is_empty(), "{:?}", mutations(&cloud));
    // And its audit never counts this cluster's load balancer as its own leak.
    let lbs = |owned: Vec<kube_lb_provider_core::OwnedResource>| {
        owned
            .into_iter()
            .filter(|r| r.kind == "LoadBalancer")
            .count()
    };
    assert_eq!(lbs(provider.owned_resources().await.unwrap()), 1);
    assert_eq!(lbs(other.owned_resources().await.unwrap()), 0);
}

/// Two load balancers of one Service under its name (a lost create's answer that the look-up
/// did not find in time, then a restart): the delete removes both, so none outlives the
/// Service and blocks the next Service of the same namespace/name; another owner's one under
/// that name stays.
#[tokio::test]
async fn every_load_balancer_of_the_service_goes_with_it() {
    let h = harness().await;
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    let first = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    let twin = serde_json::json!({
        "name": first["name"],
        "description": first["description"],
        "tags": first["tags"],
        "vip_subnet_id": first["vip_subnet_id"],
    });
    h.provider
        .client()
        .create_load_balancer(&twin)
        .await
        .unwrap();
    assert_eq!(h.cloud.load_balancers().len(), 2, "the twin exists");
    let planned = h
        .provider
        .plan_delete(&svc("web", UID_A).key())
        .await
        .unwrap();
    assert_eq!(
        planned.iter().filter(|c| c.kind == "LoadBalancer").count(),
        2,
        "the plan says so too: {planned:?}"
    );

    h.provider.delete(&svc("web", UID_A).key()).await.unwrap();
    let left: Vec<_> = h
        .cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| lb["provisioning_status"] != "DELETED")
        .collect();
    assert!(left.is_empty(), "both went with the Service: {left:?}");
    assert!(
        h.provider
            .status(&svc("web", UID_A).key())
            .await
            .unwrap()
            .is_none()
    );

    // The next Service of that name gets a load balancer of its own.
    h.provider
        .ensure(&svc("web", UID_B).spec(), &nodes(1))
        .await
        .unwrap();
}

#[tokio::test]
async fn quota_and_server_errors_map_to_their_classes() {
    let cloud = MockOpenStack::builder()
        .quotas(kube_lb_mock_openstack::Quotas {
            load_balancers: Some(0),
            floating_ips: None,
        })
        .start()
        .await
        .unwrap();
    let h = harness_with(cloud, "").await;
    let error = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ProviderError::Environment {
                cause: kube_lb_provider_core::EnvironmentCause::Quota,
                ..
            }
        ),
        "{error:?}"
    );

    let h = harness().await;
    h.cloud.inject(Fault::respond(
        "POST",
        "/lbaas/loadbalancers",
        503,
        "Service Unavailable",
        1,
    ));
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    let posts = h
        .cloud
        .journal()
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with("/loadbalancers"))
        .count();
    assert_eq!(posts, 2, "a 503 is retried in place");
}

/// POSTs the mock answered to paths ending in `suffix`.
fn posts_to(cloud: &MockOpenStack, suffix: &str) -> usize {
    cloud
        .journal()
        .iter()
        .filter(|e| e.method == "POST" && e.path.ends_with(suffix))
        .count()
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_found_not_made_twice() {
    // Octavia and Neutron take no idempotency token: a create that took effect but whose
    // answer was lost (a gateway 503) must not be sent again blindly.
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let h = harness_with(cloud, "create-monitor = true\n").await;
    for path in ["/lbaas/loadbalancers", "/floatingips"] {
        h.cloud.inject(Fault::lose_response("POST", path, 503, 1));
    }
    let web = svc("web", UID_A);
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(h.cloud.pending_faults(), 0, "both answers were lost");
    assert_eq!(h.cloud.load_balancers().len(), 1, "one load balancer");
    assert_eq!(posts_to(&h.cloud, "/loadbalancers"), 1, "created once");
    let fips = h.cloud.floating_ips();
    assert_eq!(fips.len(), 1, "one floating IP: {fips:?}");
    assert_eq!(posts_to(&h.cloud, "/floatingips"), 1, "allocated once");
    assert_eq!(ip_of(&status), fips[0]["floating_ip_address"]);

    // A new port: listener, pool and monitor are created one by one, each answer lost.
    for path in ["/lbaas/listeners", "/lbaas/pools", "/lbaas/healthmonitors"] {
        h.cloud.inject(Fault::lose_response("POST", path, 503, 1));
    }
    h.cloud.clear_journal();
    let two = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("alt", 81, "TCP", 30081)]);
    h.provider.ensure(&two.spec(), &nodes(2)).await.unwrap();
    assert_eq!(h.cloud.pending_faults(), 0, "every answer was lost");
    assert_eq!(h.cloud.listeners().len(), 2);
    assert_eq!(h.cloud.pools().len(), 2);
    assert_eq!(h.cloud.health_monitors().len(), 2);
    for suffix in ["/listeners", "/pools", "/healthmonitors"] {
        assert_eq!(posts_to(&h.cloud, suffix), 1, "{suffix} created once");
    }
    let lb = lb_named(&h.cloud, "kube_service_kubernetes_default_web");
    let listeners = listeners_of(&h.cloud, lb["id"].as_str().unwrap());
    let new_pool = pool(&h.cloud, &listeners[1]["default_pool_id"]);
    assert_eq!(
        member_set(&h.cloud, &new_pool["id"]).len(),
        2,
        "members set"
    );
    assert!(new_pool["healthmonitor_id"].is_string(), "monitored");
}

/// `web` (one node) built on a mock started from `builder`.
async fn web_built_on(builder: kube_lb_mock_openstack::MockOpenStackBuilder) -> (Harness, Svc) {
    let h = harness_with(builder.start().await.unwrap(), "").await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    (h, web)
}

#[tokio::test]
async fn a_delete_whose_answer_was_lost_waits_for_the_deletion_it_started() {
    // The DELETE took effect (the load balancer is PENDING_DELETE) but its answer was lost;
    // the repeat is refused as busy. That is the deletion under way, not a reason to wait
    // for ACTIVE (which never comes) and fail.
    let (h, web) =
        web_built_on(MockOpenStack::builder().provisioning_delay(Duration::from_millis(100))).await;
    h.cloud.inject(Fault::lose_response(
        "DELETE",
        "/lbaas/loadbalancers/",
        503,
        1,
    ));
    h.provider.delete(&web.key()).await.unwrap();
    assert_eq!(h.cloud.pending_faults(), 0, "the answer was lost");
    assert!(h.cloud.load_balancers().is_empty(), "deleted");
    assert!(h.cloud.floating_ips().is_empty(), "floating IP released");
}

#[tokio::test]
async fn token_is_renewed_before_it_expires() {
    let (h, web) = web_built_on(MockOpenStack::builder().token_ttl(Duration::from_secs(2))).await;
    assert_eq!(h.cloud.tokens_issued(), 1);
    // Half the token's life later (the renewal point for short-lived tokens), before expiry.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.tokens_issued(), 2, "renewed ahead of expiry");
    assert!(
        h.cloud.journal().iter().all(|e| e.status != 401),
        "no call was refused"
    );
}

#[tokio::test]
async fn keep_floatingip_detaches_instead_of_releasing_on_switch_to_internal() {
    let h = harness().await;
    let web = svc("web", UID_A).annotate("loadbalancer.openstack.org/keep-floatingip", "true");
    let status = h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    h.provider
        .ensure(&web.clone().internal().spec(), &nodes(1))
        .await
        .unwrap();
    let fips = h.cloud.floating_ips();
    assert_eq!(fips.len(), 1, "kept");
    assert!(fips[0]["port_id"].is_null(), "but detached");
    assert_eq!(
        fips[0]["floating_ip_address"].as_str().unwrap(),
        ip_of(&status)
    );
}

#[tokio::test]
async fn plans_and_inventory_read_without_changing_anything() {
    let h = harness().await;
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    let db = svc("db", UID_B).internal();
    let planned = h
        .provider
        .plan_ensure(&web.spec(), &nodes(2))
        .await
        .unwrap();
    // The load balancer now; its floating IP once Octavia has assigned the VIP port.
    assert_eq!(planned.len(), 2, "{planned:#?}");
    assert_eq!(planned[0].kind, "LoadBalancer");
    assert_eq!(planned[0].phase, 1);
    assert_eq!(planned[1].kind, "FloatingIp");
    assert_eq!(planned[1].phase, 2);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    h.provider.ensure(&db.spec(), &nodes(2)).await.unwrap();

    h.cloud.clear_journal();
    assert!(
        h.provider
            .plan_ensure(&web.spec(), &nodes(2))
            .await
            .unwrap()
            .is_empty()
    );
    let grown = h
        .provider
        .plan_ensure(&web.spec(), &nodes(3))
        .await
        .unwrap();
    assert_eq!(
        grown.iter().map(|c| c.call.as_str()).collect::<Vec<_>>(),
        vec!["PUT pools/members"; 2]
    );
    let teardown = h.provider.plan_delete(&web.key()).await.unwrap();
    assert_eq!(
        teardown.iter().map(|c| c.kind.as_str()).collect::<Vec<_>>(),
        vec!["FloatingIp", "LoadBalancer"],
        "the floating IP goes before the load balancer, as delete makes the calls"
    );

    let mut owned: Vec<(String, String, String)> = h
        .provider
        .owned_resources()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.kind, r.service.to_string(), r.service.uid))
        .collect();
    owned.sort();
    assert_eq!(
        owned,
        vec![
            ("FloatingIp".into(), "default/web".into(), String::new()),
            ("LoadBalancer".into(), "default/db".into(), UID_B.into()),
            ("LoadBalancer".into(), "default/web".into(), UID_A.into()),
        ]
    );
    assert!(
        mutations(&h.cloud).is_empty(),
        "plans and inventory only read"
    );
}

#[tokio::test]
async fn malformed_cloud_conf_names_the_file_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cloud.conf");
    std::fs::write(
        &path,
        "[Global]\nauth-url = x\nusername = u\npassword = p\nproject-name = d\n[LoadBalancer]\nsubnet-id = private\n",
    )
    .unwrap();
    // The binary maps this error (like every provider set-up error) to exit status 2.
    let error = kube_lb_provider_openstack::OpenStackProvider::from_cloud_config(
        Some(&path),
        &"kubernetes".parse().unwrap(),
        kube_lb_provider_core::CallCounter::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("cloud.conf") && error.contains("line 7") && error.contains("subnet-id"),
        "{error}"
    );
}

#[tokio::test]
async fn clouds_yaml_credentials_authenticate_against_keystone() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  mock:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: {}\n      application_credential_id: {}\n      application_credential_secret: {}\n    region_name: RegionOne\n",
            cloud.auth_url(),
            kube_lb_mock_openstack::APPLICATION_CREDENTIAL_ID,
            kube_lb_mock_openstack::APPLICATION_CREDENTIAL_SECRET,
        ),
    )
    .unwrap();
    let conf = format!(
        "[Global]\nuse-clouds = true\nclouds-file = {}\ncloud = mock\n\n[LoadBalancer]\nsubnet-id = {}\n",
        clouds.display(),
        kube_lb_mock_openstack::PRIVATE_SUBNET_ID
    );
    let h = provider_for(cloud, CloudConfig::parse(&conf).unwrap());
    let status = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(h.cloud.tokens_issued(), 1);
    assert_eq!(
        ip_of(&status),
        h.cloud.floating_ips()[0]["floating_ip_address"]
            .as_str()
            .unwrap()
    );
}

#[tokio::test]
async fn an_unreadable_ca_file_is_named_at_start_up() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not a certificate").unwrap();
    let conf = cloud_conf(&cloud, "").replace(
        "[LoadBalancer]",
        &format!("ca-file = {}\n\n[LoadBalancer]", ca.display()),
    );
    let config = CloudConfig::parse(&conf).unwrap();
    assert_eq!(config.global.ca_file.as_deref(), ca.to_str());
    let error = kube_lb_provider_openstack::OpenStackProvider::new(
        config,
        "kubernetes",
        kube_lb_provider_openstack::OpenStackProvider::default_options(),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("ca.pem") && error.contains("PEM"), "{error}");
}

const KEEP: &str = "loadbalancer.openstack.org/keep-floatingip";

/// The one floating IP in the mock.
fn only_floating_ip(cloud: &MockOpenStack) -> serde_json::Value {
    let fips = cloud.floating_ips();
    assert_eq!(fips.len(), 1, "{fips:?}");
    fips.into_iter().next().unwrap()
}

fn owned_kinds(owned: &[kube_lb_provider_core::OwnedResource]) -> Vec<&str> {
    let mut kinds: Vec<&str> = owned.iter().map(|r| r.kind.as_str()).collect();
    kinds.sort();
    kinds
}

#[tokio::test]
async fn keep_floatingip_on_delete_hands_the_floating_ip_over_detached() {
    let h = harness().await;
    let web = svc("web", UID_A).annotate(KEEP, "true");
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let address = ip_of(&status);
    let fip = only_floating_ip(&h.cloud);
    assert_eq!(
        fip["description"],
        "Floating IP for Kubernetes external service default/web from cluster kubernetes \
         (keep-floatingip: kept when the Service is deleted)",
        "the keep decision is recorded on the floating IP (a delete sees no annotations)"
    );
    assert_eq!(
        owned_kinds(&h.provider.owned_resources().await.unwrap()),
        vec!["FloatingIp", "LoadBalancer"],
        "while the Service lives the kept floating IP is still ours"
    );
    let planned = h.provider.plan_delete(&web.key()).await.unwrap();
    let summary: Vec<(String, String)> = planned
        .iter()
        .map(|c| (c.action.to_string(), c.kind.clone()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("modify".to_string(), "FloatingIp".to_string()),
            ("delete".to_string(), "LoadBalancer".to_string())
        ],
        "{planned:?}"
    );

    h.provider.delete(&web.key()).await.unwrap();
    assert!(h.cloud.load_balancers().is_empty());
    let kept = only_floating_ip(&h.cloud);
    assert_eq!(kept["floating_ip_address"], address.as_str());
    assert!(kept["port_id"].is_null(), "detached: {kept}");
    let description = kept["description"].as_str().unwrap();
    assert!(
        !description.contains("Floating IP for Kubernetes external service"),
        "no ownership phrase is left, so neither kube-lb nor upstream ever releases it: {description}"
    );
    assert!(
        h.provider.owned_resources().await.unwrap().is_empty(),
        "the kept floating IP is the user's now: audits do not count it as leaked"
    );

    // Repeated delete: nothing to do.
    h.cloud.clear_journal();
    h.provider.delete(&web.key()).await.unwrap();
    assert!(mutations(&h.cloud).is_empty(), "{:?}", mutations(&h.cloud));
    assert_eq!(only_floating_ip(&h.cloud)["id"], kept["id"]);

    // The user gets the address back with loadBalancerIP; it stays theirs on delete.
    let again = svc("web", UID_B).load_balancer_ip(&address);
    let status = h.provider.ensure(&again.spec(), &nodes(2)).await.unwrap();
    assert_eq!(ip_of(&status), address);
    assert_eq!(
        only_floating_ip(&h.cloud)["description"].as_str().unwrap(),
        description,
        "a user's floating IP keeps its words"
    );
    h.provider.delete(&again.key()).await.unwrap();
    assert_eq!(only_floating_ip(&h.cloud)["id"], kept["id"]);
}

#[tokio::test]
async fn keep_floatingip_removed_before_delete_releases_the_floating_ip() {
    let h = harness().await;
    let kept = svc("web", UID_A).annotate(KEEP, "true");
    h.provider.ensure(&kept.spec(), &nodes(1)).await.unwrap();
    h.cloud.clear_journal();
    let plain = svc("web", UID_A).annotate(KEEP, "false");
    h.provider.ensure(&plain.spec(), &nodes(1)).await.unwrap();
    let fip = only_floating_ip(&h.cloud);
    assert_eq!(
        mutations(&h.cloud),
        vec![format!(
            "PUT floatingips/{} 200",
            fip["id"].as_str().unwrap()
        )],
        "only the floating IP's record changes"
    );
    assert_eq!(
        fip["description"],
        "Floating IP for Kubernetes external service default/web from cluster kubernetes"
    );
    h.provider.delete(&plain.key()).await.unwrap();
    assert!(h.cloud.floating_ips().is_empty(), "released");
    assert!(h.cloud.load_balancers().is_empty());
}

#[tokio::test]
async fn kept_floating_ip_detached_for_an_internal_phase_comes_back_when_external_again() {
    let h = harness().await;
    let web = svc("web", UID_A).annotate(KEEP, "true");
    let external = ip_of(&h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap());
    h.provider
        .ensure(&web.clone().internal().spec(), &nodes(1))
        .await
        .unwrap();
    assert!(only_floating_ip(&h.cloud)["port_id"].is_null());
    let status = h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(ip_of(&status), external, "the same address, not a new one");
    assert_eq!(h.cloud.floating_ips().len(), 1);
}

/// A Service UID whose legacy name the in-tree provider used.
const LEGACY_UID: &str = "3c9f1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b";

fn legacy_service(floating_ip: bool) -> OccmService {
    let nodes = nodes(2)
        .iter()
        .map(|n| (n.name.clone(), n.internal_ip().unwrap().to_string()))
        .collect();
    OccmService {
        legacy_uid: Some(LEGACY_UID.into()),
        floating_ip,
        ..OccmService::new("web", nodes)
    }
}

#[tokio::test]
async fn legacy_named_load_balancer_is_adopted_not_duplicated() {
    let h = harness().await;
    let built = build_occm_state(&h.cloud, CLUSTER, &legacy_service(true)).await;
    let legacy = legacy_name(LEGACY_UID);
    assert_eq!(legacy, "a3c9f1a2b4d5e4f608a7b9c0d1e2f3a4");
    let web = svc("web", LEGACY_UID);

    let planned = h
        .provider
        .plan_ensure(&web.spec(), &nodes(2))
        .await
        .unwrap();
    assert!(
        planned
            .iter()
            .all(|c| c.action != kube_lb_provider_core::ChangeAction::Create),
        "no new load balancer: {planned:?}"
    );
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(Some(ip_of(&status)), built.floating_ip);
    let lbs = h.cloud.load_balancers();
    assert_eq!(lbs.len(), 1, "adopted, not duplicated: {lbs:?}");
    assert_eq!(lbs[0]["id"], built.load_balancer["id"]);
    assert_eq!(lbs[0]["name"], legacy.as_str(), "not renamed (as upstream)");
    let tags: Vec<&str> = lbs[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(
        tags.contains(&"kube_service_kubernetes_default_web")
            && tags.contains(&format!("kube_lb_uid_{LEGACY_UID}").as_str()),
        "{tags:?}"
    );
    assert_eq!(h.cloud.floating_ips().len(), 1);
    assert_eq!(
        only_floating_ip(&h.cloud)["description"],
        "Floating IP for Kubernetes external service default/web from cluster kubernetes",
        "the in-tree phrase is rewritten to upstream's"
    );

    // Found again (by listing and by name), nothing more to do.
    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert!(mutations(&h.cloud).is_empty(), "{:?}", mutations(&h.cloud));
    assert!(
        h.provider
            .plan_ensure(&web.spec(), &nodes(2))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        h.provider
            .status(&web.key())
            .await
            .unwrap()
            .map(|s| ip_of(&s)),
        built.floating_ip
    );

    h.provider.delete(&web.key()).await.unwrap();
    assert!(
        h.cloud.load_balancers().is_empty(),
        "upstream would leave it (its name lacks kube_service_); kube-lb made it for this Service"
    );
    assert!(h.cloud.floating_ips().is_empty());
}

#[tokio::test]
async fn audit_knows_legacy_resources_by_uid_and_their_delete_removes_them() {
    let h = harness().await;
    let built = build_occm_state(&h.cloud, CLUSTER, &legacy_service(true)).await;
    let owned = h.provider.owned_resources().await.unwrap();
    assert_eq!(owned_kinds(&owned), vec!["FloatingIp", "LoadBalancer"]);
    let digits: String = LEGACY_UID.chars().filter(|c| *c != '-').take(31).collect();
    for resource in &owned {
        assert_eq!(
            (
                resource.service.namespace.as_str(),
                resource.service.name.as_str()
            ),
            ("", ""),
            "the in-tree names record only the UID"
        );
        assert_eq!(resource.service.uid, digits, "{resource:?}");
    }
    // `kube-lb audit --delete` calls delete with what the resource records.
    let recorded = owned[0].service.clone();
    let planned = h.provider.plan_delete(&recorded).await.unwrap();
    assert_eq!(
        planned
            .iter()
            .map(|c| (c.kind.as_str(), c.name.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("FloatingIp", built.floating_ip.as_deref().unwrap()),
            ("LoadBalancer", legacy_name(LEGACY_UID).as_str())
        ]
    );
    h.provider.delete(&recorded).await.unwrap();
    assert!(h.cloud.load_balancers().is_empty());
    assert!(h.cloud.floating_ips().is_empty());
    assert!(h.provider.owned_resources().await.unwrap().is_empty());
}

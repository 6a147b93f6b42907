//! Every OpenStack annotation converged against the mock: what the cloud holds after
//! `ensure`, that a second pass changes nothing, and that a changed annotation touches only
//! what it names. Also `[LoadBalancerClass]`, load-balancer-id adoption and the ERROR state.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_mock_openstack::{
    MockOpenStack, PRIVATE_NETWORK_ID, PRIVATE_SUBNET_ID, PUBLIC_SUBNET_ID,
};
use kube_lb_provider_core::{LoadBalancerProvider, ProviderError};
use kube_lb_provider_openstack::CloudConfig;
use serde_json::json;
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";
const FLAVOR: &str = "0e100000-0000-4000-8000-0000000000f1";
const TLS_REF: &str = "https://barbican.example/v1/containers/0e100000-0000-4000-8000-0000000000c1";
const BACKUP_NETWORK_ID: &str = "0e100000-0000-4000-8000-0000000000b1";
const BACKUP_SUBNET_ID: &str = "0e100000-0000-4000-8000-0000000000b2";
const SOURCE_RANGES: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";
const LB_NAME: &str = "kube_service_kubernetes_default_web";

fn os(key: &str) -> String {
    format!("loadbalancer.openstack.org/{key}")
}

fn listener_of(cloud: &MockOpenStack) -> serde_json::Value {
    let lb = lb_named(cloud, LB_NAME);
    listeners_of(cloud, lb["id"].as_str().unwrap())[0].clone()
}

#[tokio::test]
async fn listener_pool_and_monitor_annotations_are_converged_and_then_left_alone() {
    let h = harness().await;
    let web = svc("web", UID_A)
        .annotate(&os("lb-method"), "LEAST_CONNECTIONS")
        .annotate(&os("connection-limit"), "500")
        .annotate(&os("x-forwarded-for"), "true")
        .annotate(&os("timeout-client-data"), "60000")
        .annotate(&os("timeout-member-connect"), "3000")
        .annotate(&os("timeout-member-data"), "70000")
        .annotate(&os("timeout-tcp-inspect"), "10")
        .annotate(&os("enable-health-monitor"), "true")
        .annotate(&os("health-monitor-delay"), "7")
        .annotate(&os("health-monitor-timeout"), "4")
        .annotate(&os("health-monitor-max-retries"), "2")
        .annotate(&os("health-monitor-max-retries-down"), "5")
        .annotate(&os("member-subnet-id"), PRIVATE_SUBNET_ID)
        .annotate(&os("flavor-id"), FLAVOR)
        .annotate(&os("availability-zone"), "az-1")
        .annotate(SOURCE_RANGES, "192.0.2.0/24,198.51.100.0/24");
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();

    let lb = lb_named(&h.cloud, LB_NAME);
    assert_eq!(lb["flavor_id"], FLAVOR);
    assert_eq!(lb["availability_zone"], "az-1");
    let listener = listener_of(&h.cloud);
    assert_eq!(listener["protocol"], "HTTP", "X-Forwarded-For needs HTTP");
    assert_eq!(listener["insert_headers"]["X-Forwarded-For"], "true");
    assert_eq!(listener["connection_limit"], 500);
    assert_eq!(
        listener["allowed_cidrs"],
        json!(["192.0.2.0/24", "198.51.100.0/24"])
    );
    for (field, want) in [
        ("timeout_client_data", 60000),
        ("timeout_member_connect", 3000),
        ("timeout_member_data", 70000),
        ("timeout_tcp_inspect", 10),
    ] {
        assert_eq!(listener[field], want, "{field}");
    }
    let pool = pool(&h.cloud, &listener["default_pool_id"]);
    assert_eq!(pool["protocol"], "HTTP");
    assert_eq!(pool["lb_algorithm"], "LEAST_CONNECTIONS");
    let members = h.cloud.members(pool["id"].as_str().unwrap());
    assert!(members.iter().all(|m| m["subnet_id"] == PRIVATE_SUBNET_ID));
    let monitors = h.cloud.health_monitors();
    assert_eq!(monitors.len(), 1);
    assert_eq!(
        (
            &monitors[0]["delay"],
            &monitors[0]["timeout"],
            &monitors[0]["max_retries"],
            &monitors[0]["max_retries_down"]
        ),
        (&json!(7), &json!(4), &json!(2), &json!(5))
    );

    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new(), "in sync");

    // Changed listener settings are one PUT on the listener; the monitor follows its own.
    let changed = web
        .clone()
        .annotate(&os("connection-limit"), "800")
        .annotate(&os("timeout-client-data"), "90000")
        .annotate(&os("health-monitor-delay"), "9");
    h.provider.ensure(&changed.spec(), &nodes(2)).await.unwrap();
    let writes: Vec<String> = mutations(&h.cloud)
        .iter()
        .map(|w| w.split('/').next().unwrap().to_string())
        .collect();
    assert_eq!(writes, vec!["PUT listeners", "PUT healthmonitors"]);
    let listener = listener_of(&h.cloud);
    assert_eq!(listener["connection_limit"], 800);
    assert_eq!(listener["timeout_client_data"], 90000);
    assert_eq!(h.cloud.health_monitors()[0]["delay"], 9);

    // Removing annotations restores Octavia's defaults and removes the monitor.
    h.cloud.clear_journal();
    let plain = svc("web", UID_A)
        .annotate(&os("x-forwarded-for"), "true")
        .annotate(&os("lb-method"), "LEAST_CONNECTIONS")
        .annotate(&os("member-subnet-id"), PRIVATE_SUBNET_ID)
        .annotate(SOURCE_RANGES, "192.0.2.0/24,198.51.100.0/24");
    h.provider.ensure(&plain.spec(), &nodes(2)).await.unwrap();
    let listener = listener_of(&h.cloud);
    assert_eq!(listener["connection_limit"], -1);
    assert_eq!(listener["timeout_client_data"], 50000);
    assert_eq!(listener["timeout_tcp_inspect"], 0);
    assert!(h.cloud.health_monitors().is_empty());
}

#[tokio::test]
async fn tls_proxy_protocol_and_hostnames_shape_listeners_and_status() {
    let h = harness_with(
        MockOpenStack::builder().start().await.unwrap(),
        "enable-ingress-hostname = true\n",
    )
    .await;
    let tls = svc("web", UID_A).annotate(&os("default-tls-container-ref"), TLS_REF);
    h.provider.ensure(&tls.spec(), &nodes(1)).await.unwrap();
    let listener = listener_of(&h.cloud);
    assert_eq!(listener["protocol"], "TERMINATED_HTTPS");
    assert_eq!(listener["default_tls_container_ref"], TLS_REF);
    assert_eq!(
        pool(&h.cloud, &listener["default_pool_id"])["protocol"],
        "HTTP"
    );
    h.provider.delete(&tls.key()).await.unwrap();

    // PROXY v2: the pool speaks PROXYV2; with enable-ingress-hostname the status is
    // `<ip>.nip.io`, so in-cluster clients also go through the load balancer.
    let proxy = svc("web", UID_A).annotate(&os("proxy-protocol"), "v2");
    let status = h.provider.ensure(&proxy.spec(), &nodes(1)).await.unwrap();
    let listener = listener_of(&h.cloud);
    assert_eq!(listener["protocol"], "TCP");
    assert_eq!(
        pool(&h.cloud, &listener["default_pool_id"])["protocol"],
        "PROXYV2"
    );
    let fip = h.cloud.floating_ips()[0]["floating_ip_address"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(status.ingress[0].ip, None);
    assert_eq!(
        status.ingress[0].hostname.as_deref(),
        Some(format!("{fip}.nip.io").as_str())
    );

    // The hostname annotation wins over the address.
    let named = proxy.annotate(&os("hostname"), "web.example.com");
    let status = h.provider.ensure(&named.spec(), &nodes(1)).await.unwrap();
    assert_eq!(
        status.ingress[0].hostname.as_deref(),
        Some("web.example.com")
    );
}

#[tokio::test]
async fn node_selector_picks_members_and_internal_ip_requests_the_vip() {
    let h = harness().await;
    let mut all = nodes(3);
    all[1].labels.insert("lb".into(), "yes".into());
    all[2].labels.insert("lb".into(), "no".into());
    let web = svc("web", UID_A)
        .annotate(&os("node-selector"), "lb=yes")
        .internal()
        .load_balancer_ip("10.0.0.77");
    let status = h.provider.ensure(&web.spec(), &all).await.unwrap();
    assert!(
        all.iter()
            .map(|n| h.provider.accepts_node(&web.spec(), n))
            .eq([false, true, false])
    );
    let members = member_set(&h.cloud, &h.cloud.pools()[0]["id"]);
    assert_eq!(members, vec![("node-2".into(), "10.0.0.102".into(), 30080)]);
    assert_eq!(lb_named(&h.cloud, LB_NAME)["vip_address"], "10.0.0.77");
    assert_eq!(status.ingress[0].ip.unwrap().to_string(), "10.0.0.77");
    assert!(h.cloud.floating_ips().is_empty());
}

#[tokio::test]
async fn load_balancer_class_picks_networks_and_an_unknown_class_is_a_user_error() {
    let cloud = MockOpenStack::builder()
        .network(
            BACKUP_NETWORK_ID,
            "backup",
            true,
            BACKUP_SUBNET_ID,
            "192.0.2.0/24",
        )
        .start()
        .await
        .unwrap();
    let conf = cloud_conf(&cloud, "")
        + &format!(
            "\n[LoadBalancerClass \"backup\"]\nfloating-network-id = {BACKUP_NETWORK_ID}\nfloating-subnet = back*\nnetwork-id = {PRIVATE_NETWORK_ID}\n\n[LoadBalancerClass \"other\"]\nsubnet-id = {PRIVATE_SUBNET_ID}\n"
        );
    let h = provider_for(cloud, CloudConfig::parse(&conf).unwrap());
    let web = svc("web", UID_A).annotate(&os("class"), "backup");
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let fips = h.cloud.floating_ips();
    assert_eq!(
        fips[0]["floating_network_id"], BACKUP_NETWORK_ID,
        "the class's network"
    );
    let posted = h
        .cloud
        .journal()
        .into_iter()
        .find(|e| e.method == "POST" && e.path.ends_with("/floatingips"))
        .unwrap();
    assert_eq!(
        posted.body.unwrap()["floatingip"]["subnet_id"],
        BACKUP_SUBNET_ID,
        "matched by name pattern"
    );
    assert_eq!(
        lb_named(&h.cloud, LB_NAME)["vip_network_id"],
        PRIVATE_NETWORK_ID
    );

    h.cloud.clear_journal();
    let error = h
        .provider
        .ensure(
            &svc("db", UID_B).annotate(&os("class"), "gold").spec(),
            &nodes(1),
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, ProviderError::User { .. }), "{error:?}");
    assert!(
        text.contains("loadbalancer.openstack.org/class")
            && text.contains("gold")
            && text.contains("backup, other"),
        "{text}"
    );
    assert!(
        h.cloud.journal().is_empty(),
        "refused before any cloud call"
    );
}

#[tokio::test]
async fn floating_subnet_id_is_used_for_the_floating_ip() {
    let h = harness().await;
    let web = svc("web", UID_A).annotate(&os("floating-subnet-id"), PUBLIC_SUBNET_ID);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let posted = h
        .cloud
        .journal()
        .into_iter()
        .find(|e| e.method == "POST" && e.path.ends_with("/floatingips"))
        .unwrap();
    assert_eq!(
        posted.body.unwrap()["floatingip"]["subnet_id"],
        PUBLIC_SUBNET_ID
    );
}

#[tokio::test]
async fn an_adopted_load_balancer_gets_only_our_listeners_and_survives_delete() {
    let h = harness().await;
    // A load balancer made by hand, with a listener of its own on port 443.
    let shared = h
        .provider
        .client()
        .create_load_balancer(
            &json!({"name": "shared", "vip_subnet_id": PRIVATE_SUBNET_ID,
            "listeners": [{"name": "theirs", "protocol": "TCP", "protocol_port": 443}]}),
        )
        .await
        .unwrap();
    let id = shared.id.clone();
    let web = svc("web", UID_A).annotate(&os("load-balancer-id"), &id);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let listeners = listeners_of(&h.cloud, &id);
    assert_eq!(listeners.len(), 2, "{listeners:?}");
    let ours = &listeners[0];
    assert_eq!(ours["name"], format!("listener_0_{LB_NAME}"));
    assert_eq!(ours["tags"], json!([format!("kube_lb_uid_{UID_A}")]));
    assert_eq!(listeners[1]["name"], "theirs", "theirs is untouched");
    let lb = h.cloud.load_balancers();
    assert_eq!(lb.len(), 1, "nothing created besides the listener");
    assert_eq!(lb[0]["name"], "shared", "not renamed");
    assert!(
        h.cloud.floating_ips().is_empty(),
        "its floating IPs are its owner's business"
    );

    h.cloud.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());

    // A port that clashes with their listener is refused, nothing changed.
    let clash = svc("web", UID_A)
        .annotate(&os("load-balancer-id"), &id)
        .ports(&[("https", 443, "TCP", 30443)]);
    let error = h
        .provider
        .ensure(&clash.spec(), &nodes(2))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("theirs"), "{error}");
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());

    let teardown = h.provider.plan_delete(&web.key()).await.unwrap();
    assert_eq!(
        teardown.iter().map(|c| c.kind.as_str()).collect::<Vec<_>>(),
        vec!["Pool", "Listener"],
        "only our listener goes (its pool first, one call each, as delete makes them)"
    );
    h.provider.delete(&web.key()).await.unwrap();
    assert_eq!(h.cloud.load_balancers().len(), 1, "never deleted");
    let left = listeners_of(&h.cloud, &id);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["name"], "theirs");
}

#[tokio::test]
async fn load_balancer_in_error_is_reported_then_recreated_with_its_floating_ip() {
    let h = harness().await;
    let web = svc("web", UID_A);
    let first = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let broken = lb_named(&h.cloud, LB_NAME);
    h.cloud
        .set_status(broken["id"].as_str().unwrap(), "ERROR", Duration::ZERO);

    // The pass that finds it reports it (the controller turns this into a Warning event and
    // retries with backoff) and removes the broken load balancer.
    let error = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap_err();
    assert!(error.is_retryable(), "{error:?}");
    assert!(error.to_string().contains("ERROR"), "{error}");
    assert!(h.cloud.load_balancers().is_empty());
    assert_eq!(h.cloud.floating_ips().len(), 1, "the floating IP is kept");

    let second = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let rebuilt = lb_named(&h.cloud, LB_NAME);
    assert_ne!(rebuilt["id"], broken["id"]);
    assert_eq!(
        second.ingress, first.ingress,
        "the same floating IP on the new VIP"
    );
    let fips = h.cloud.floating_ips();
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0]["port_id"], rebuilt["vip_port_id"]);
}

#[tokio::test]
async fn create_only_settings_are_recorded_and_a_later_change_is_reported_not_applied() {
    const OTHER_FLAVOR: &str = "0e100000-0000-4000-8000-0000000000f2";
    let h = harness().await;
    let web = svc("web", UID_A)
        .annotate(&os("flavor-id"), FLAVOR)
        .annotate(&os("availability-zone"), "az1");
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let lb = lb_named(&h.cloud, LB_NAME);
    let recorded = status
        .annotations
        .get("kube-lb.io/openstack-created-with")
        .expect("the create-only settings are written back");
    let recorded: serde_json::Value = serde_json::from_str(recorded).unwrap();
    // What Octavia reports for the load balancer.
    for (field, want) in [
        ("availability_zone", json!("az1")),
        ("flavor_id", json!(FLAVOR)),
        ("vip_port_id", lb["vip_port_id"].clone()),
        ("vip_subnet_id", json!(PRIVATE_SUBNET_ID)),
        ("vip_address", lb["vip_address"].clone()),
        (
            "floating_ip_address",
            json!(status.ingress[0].ip.expect("ip").to_string()),
        ),
    ] {
        assert_eq!(recorded[field], want, "{field} in {recorded}");
    }

    // The controller writes the annotation back; then the user changes the flavor and zone.
    let changed = web
        .clone()
        .annotate("kube-lb.io/openstack-created-with", &recorded.to_string())
        .annotate(&os("flavor-id"), OTHER_FLAVOR)
        .annotate(&os("availability-zone"), "az2");
    let warned: Vec<String> = changed
        .parsed()
        .warnings
        .iter()
        .filter(|w| w.detail.contains("create-only"))
        .map(|w| w.location.to_string())
        .collect();
    assert_eq!(
        warned,
        vec![
            format!("annotation {}", os("flavor-id")),
            format!("annotation {}", os("availability-zone"))
        ],
        "reported (a Warning event, listed as ignored in the Service condition)"
    );
    h.cloud.clear_journal();
    let again = h.provider.ensure(&changed.spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new(), "not applied");
    assert_eq!(
        again.annotations, status.annotations,
        "the record keeps what the load balancer has, so the warning stays until it is recreated"
    );
}

//! The Azure provider against the mock ARM server: every test reads the cloud state back.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use kube_lb_mock_azure::{ArmError, Fault};
use kube_lb_provider_azure::arm::{LoadBalancer, PublicIp, SecurityGroup, Subnet};
use kube_lb_provider_azure::desired::Settings;
use kube_lb_provider_azure::{ARM_OPERATIONS, ArmClient, AzureError, AzureProvider, NetworkClient};
use kube_lb_provider_core::{CallCounter, LoadBalancerProvider, ProviderError};
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";

fn ip_of(status: &kube_lb_provider_core::LoadBalancerStatus) -> String {
    status.ingress[0].ip.expect("ingress ip").to_string()
}

#[tokio::test]
async fn external_service_gets_frontend_rules_probes_pool_pip_and_nsg() {
    let h = harness().await;
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let p = prefix(UID_A);

    let pip = h
        .arm
        .public_ip(RG, &format!("{CLUSTER}-{p}"))
        .expect("managed public IP");
    assert_eq!(
        ip_of(&status),
        pip["properties"]["ipAddress"].as_str().unwrap()
    );
    assert_eq!(pip["tags"]["k8s-azure-service"], "default/web");
    assert_eq!(pip["tags"]["k8s-azure-cluster-name"], CLUSTER);
    assert_eq!(pip["sku"]["name"], "Standard");
    assert_eq!(pip["properties"]["publicIPAllocationMethod"], "Static");

    let lb = h.arm.load_balancer(RG, CLUSTER).expect("shared LB");
    assert_eq!(lb["sku"]["name"], "Standard");
    let fe = child(&lb, "frontendIPConfigurations", &p);
    assert_eq!(fe["properties"]["publicIPAddress"]["id"], pip["id"]);
    assert_eq!(
        pip["properties"]["ipConfiguration"]["id"], fe["id"],
        "PIP back-reference"
    );
    assert_eq!(
        names(&lb["properties"]["loadBalancingRules"]),
        vec![format!("{p}-TCP-443"), format!("{p}-TCP-80")]
    );
    let rule = child(&lb, "loadBalancingRules", &format!("{p}-TCP-443"));
    assert_eq!(rule["properties"]["protocol"], "Tcp");
    assert_eq!(rule["properties"]["frontendPort"], 443);
    assert_eq!(
        rule["properties"]["backendPort"], 443,
        "floating IP keeps the service port"
    );
    assert_eq!(rule["properties"]["enableFloatingIP"], true);
    assert_eq!(rule["properties"]["enableTcpReset"], true);
    assert_eq!(rule["properties"]["idleTimeoutInMinutes"], 4);
    let probe = child(&lb, "probes", &format!("{p}-TCP-443"));
    assert_eq!(probe["properties"]["protocol"], "Tcp");
    assert_eq!(
        probe["properties"]["port"], 30443,
        "Cluster policy probes the nodePort"
    );
    assert_eq!(probe["properties"]["intervalInSeconds"], 5);
    assert_eq!(probe["properties"]["probeThreshold"], 2);
    let pool = child(&lb, "backendAddressPools", CLUSTER);
    let members: Vec<&str> = pool["properties"]["loadBalancerBackendAddresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["properties"]["ipAddress"].as_str().unwrap())
        .collect();
    assert_eq!(members, vec!["10.224.0.11", "10.224.0.12"]);

    let rules = managed_rules(&h.arm);
    assert_eq!(rules.len(), 1, "{rules:?}");
    let allow = rules.values().next().unwrap();
    assert_eq!(allow["sourceAddressPrefix"], "Internet");
    assert_eq!(allow["access"], "Allow");
    assert_eq!(allow["priority"], 500);
    assert_eq!(destinations(allow), vec![ip_of(&status)]);
    assert_eq!(
        allow["destinationPortRanges"],
        serde_json::json!(["443", "80"]),
        "upstream's layout: ports sorted as strings"
    );
    assert_eq!(
        rules.keys().next().unwrap(),
        "k8s-azure-lb_allow_IPv4_556f7044ec033071ec0dfcf7cd85bc93",
        "upstream's name for Tcp from Internet to 80 and 443"
    );

    // Every write carried an etag precondition: If-Match on updates, If-None-Match on creates.
    for entry in h.arm.mutations() {
        if entry.method == "PUT" {
            let create = entry.status == 201;
            assert_eq!(entry.if_match.is_some(), !create, "{entry:?}");
            assert_eq!(entry.if_none_match.is_some(), create, "{entry:?}");
        }
    }
}

#[tokio::test]
async fn no_op_resync_makes_zero_mutating_calls() {
    let h = harness().await;
    let web = svc("web", UID_A).source_ranges(&["203.0.113.0/24"]);
    let internal = svc("db", UID_B).internal();
    let first_web = h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    let first_db = h
        .provider
        .ensure(&internal.spec(), &nodes(3))
        .await
        .unwrap();
    h.arm.clear_journal();
    let before = h.provider.calls().snapshot();

    assert_eq!(
        h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap(),
        first_web
    );
    assert_eq!(
        h.provider
            .ensure(&internal.spec(), &nodes(3))
            .await
            .unwrap(),
        first_db
    );

    let mutations = h.arm.mutations();
    assert!(mutations.is_empty(), "resync wrote: {mutations:?}");
    let resync = h.provider.calls().snapshot().since(&before);
    assert_eq!(resync.mutations(), 0);
    // Within the shared-object cache's TTL the resync plans from what the creates stored.
    assert_eq!(resync.reads(), 0, "{resync:?}");
}

#[tokio::test]
async fn internal_service_on_default_and_annotated_subnet_and_static_ip() {
    let h = harness().await;
    let db = svc("db", UID_A).internal();
    let status = h.provider.ensure(&db.spec(), &nodes(1)).await.unwrap();
    let p = prefix(UID_A);
    let address: std::net::IpAddr = ip_of(&status).parse().unwrap();
    assert!(
        "10.224.0.0/16"
            .parse::<ipnet::IpNet>()
            .unwrap()
            .contains(&address),
        "{address}"
    );
    let lb = h
        .arm
        .load_balancer(RG, &format!("{CLUSTER}-internal"))
        .expect("internal LB");
    let fe = child(&lb, "frontendIPConfigurations", &p);
    assert!(
        fe["properties"]["subnet"]["id"]
            .as_str()
            .unwrap()
            .ends_with("/subnets/nodes")
    );
    assert!(
        h.arm.load_balancer(RG, CLUSTER).is_none(),
        "no public LB for an internal Service"
    );
    assert!(
        h.arm.public_ips().is_empty(),
        "internal Services need no public IP"
    );
    assert!(
        managed_rules(&h.arm).is_empty(),
        "internal without ranges: VNet defaults apply"
    );

    // Annotated subnet plus a static address: the frontend moves and is renamed.
    let moved = db
        .clone()
        .annotate("azure-load-balancer-internal-subnet", "apps")
        .load_balancer_ip("10.225.0.50");
    let status = h.provider.ensure(&moved.spec(), &nodes(1)).await.unwrap();
    assert_eq!(ip_of(&status), "10.225.0.50");
    let lb = h
        .arm
        .load_balancer(RG, &format!("{CLUSTER}-internal"))
        .unwrap();
    assert_eq!(
        names(&lb["properties"]["frontendIPConfigurations"]),
        vec![format!("{p}-apps")]
    );
    let fe = child(&lb, "frontendIPConfigurations", &format!("{p}-apps"));
    assert_eq!(fe["properties"]["privateIPAllocationMethod"], "Static");
    assert_eq!(
        names(&lb["properties"]["loadBalancingRules"]),
        vec![format!("{p}-apps-TCP-80")]
    );
}

#[tokio::test]
async fn port_and_annotation_changes_replace_only_what_changed() {
    let h = harness().await;
    let other = svc("other", UID_B);
    h.provider.ensure(&other.spec(), &nodes(2)).await.unwrap();
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let p = prefix(UID_A);
    let q = prefix(UID_B);

    let changed = web
        .clone()
        .ports(&[("http", 8080, "TCP", 31080), ("dns", 53, "UDP", 31053)])
        .annotate("azure-load-balancer-tcp-idle-timeout", "10")
        .annotate("azure-load-balancer-health-probe-protocol", "Http")
        .annotate("azure-load-balancer-health-probe-request-path", "/ready");
    h.provider.ensure(&changed.spec(), &nodes(2)).await.unwrap();
    let lb = h.arm.load_balancer(RG, CLUSTER).unwrap();
    assert_eq!(
        names(&lb["properties"]["loadBalancingRules"]),
        vec![
            format!("{q}-TCP-80"),
            format!("{p}-TCP-8080"),
            format!("{p}-UDP-53")
        ]
    );
    assert_eq!(
        names(&lb["properties"]["probes"]),
        vec![format!("{q}-TCP-80"), format!("{p}-TCP-8080")],
        "UDP ports get no probe; the old probe is gone"
    );
    let rule = child(&lb, "loadBalancingRules", &format!("{p}-TCP-8080"));
    assert_eq!(rule["properties"]["idleTimeoutInMinutes"], 10);
    let probe = child(&lb, "probes", &format!("{p}-TCP-8080"));
    assert_eq!(probe["properties"]["protocol"], "Http");
    assert_eq!(probe["properties"]["requestPath"], "/ready");
    assert_eq!(probe["properties"]["port"], 31080);
    let udp = child(&lb, "loadBalancingRules", &format!("{p}-UDP-53"));
    assert_eq!(udp["properties"]["protocol"], "Udp");
    assert!(udp["properties"].get("probe").is_none());
    // The other Service's rule is untouched.
    let other_rule = child(&lb, "loadBalancingRules", &format!("{q}-TCP-80"));
    assert_eq!(other_rule["properties"]["idleTimeoutInMinutes"], 4);
    // NSG: one consolidated rule per protocol for this Service's address.
    let web_ip =
        h.arm.public_ip(RG, &format!("{CLUSTER}-{p}")).unwrap()["properties"]["ipAddress"].clone();
    let rules = managed_rules(&h.arm);
    let web_rules: Vec<_> = rules
        .values()
        .filter(|r| destinations(r).contains(&web_ip.as_str().unwrap().to_string()))
        .collect();
    let protocols: BTreeSet<String> = web_rules
        .iter()
        .map(|r| r["protocol"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        protocols,
        BTreeSet::from(["Tcp".to_string(), "Udp".to_string()])
    );
}

#[tokio::test]
async fn local_and_cluster_policies_switch_probes() {
    let h = harness().await;
    let p = prefix(UID_A);
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    h.provider
        .ensure(&web.clone().local(32000).spec(), &nodes(2))
        .await
        .unwrap();
    let lb = h.arm.load_balancer(RG, CLUSTER).unwrap();
    let local_probe = format!("{p}-TCP-32000");
    assert_eq!(
        names(&lb["properties"]["probes"]),
        vec![local_probe.clone()]
    );
    let probe = child(&lb, "probes", &local_probe);
    assert_eq!(probe["properties"]["protocol"], "Http");
    assert_eq!(probe["properties"]["requestPath"], "/healthz");
    assert_eq!(probe["properties"]["port"], 32000);
    for rule in ["80", "443"] {
        let rule = child(&lb, "loadBalancingRules", &format!("{p}-TCP-{rule}"));
        assert!(
            rule["properties"]["probe"]["id"]
                .as_str()
                .unwrap()
                .ends_with(&format!("/probes/{local_probe}"))
        );
    }

    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let lb = h.arm.load_balancer(RG, CLUSTER).unwrap();
    assert_eq!(
        names(&lb["properties"]["probes"]),
        vec![format!("{p}-TCP-443"), format!("{p}-TCP-80")]
    );
    assert_eq!(
        child(&lb, "probes", &format!("{p}-TCP-80"))["properties"]["port"],
        30080
    );
    assert_eq!(
        child(&lb, "probes", &format!("{p}-TCP-80"))["properties"]["protocol"],
        "Tcp"
    );
}

#[tokio::test]
async fn node_add_and_remove_update_the_shared_pool() {
    let h = harness().await;
    let web = svc("web", UID_A);
    let members = |arm: &kube_lb_mock_azure::MockArm| -> Vec<String> {
        let lb = arm.load_balancer(RG, CLUSTER).unwrap();
        names(
            &child(&lb, "backendAddressPools", CLUSTER)["properties"]["loadBalancerBackendAddresses"],
        )
    };
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(members(&h.arm), vec!["node-1", "node-2"]);
    h.provider.ensure(&web.spec(), &nodes(3)).await.unwrap();
    assert_eq!(members(&h.arm), vec!["node-1", "node-2", "node-3"]);
    h.arm.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(members(&h.arm), vec!["node-1"]);
    let writes: Vec<String> = h
        .arm
        .mutations()
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(writes.len(), 1, "only the LB is rewritten: {writes:?}");
    assert!(writes[0].ends_with(&format!("/loadBalancers/{CLUSTER}")));
}

#[tokio::test]
async fn delete_removes_everything_owned_and_keeps_other_services() {
    let h = harness().await;
    let web = svc("web", UID_A).source_ranges(&["198.51.100.0/24"]);
    let api = svc("api", UID_B);
    let web_ip = ip_of(&h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap());
    let api_ip = ip_of(&h.provider.ensure(&api.spec(), &nodes(2)).await.unwrap());

    h.provider.delete(&web.spec().service).await.unwrap();
    let lb = h
        .arm
        .load_balancer(RG, CLUSTER)
        .expect("LB stays for the other Service");
    let p = prefix(UID_A);
    let q = prefix(UID_B);
    assert_eq!(
        names(&lb["properties"]["frontendIPConfigurations"]),
        vec![q.clone()]
    );
    assert!(
        names(&lb["properties"]["loadBalancingRules"])
            .iter()
            .all(|n| n.starts_with(&q))
    );
    assert!(
        names(&lb["properties"]["probes"])
            .iter()
            .all(|n| n.starts_with(&q))
    );
    assert!(owned_pips(&h.arm, "default/web").is_empty());
    let all_destinations: Vec<String> = managed_rules(&h.arm)
        .values()
        .flat_map(destinations)
        .collect();
    assert!(!all_destinations.contains(&web_ip), "{all_destinations:?}");
    assert!(all_destinations.contains(&api_ip));
    assert!(h.arm.public_ip(RG, &format!("{CLUSTER}-{p}")).is_none());

    h.provider.delete(&api.spec().service).await.unwrap();
    assert!(
        h.arm.load_balancer(RG, CLUSTER).is_none(),
        "an LB without frontends is deleted"
    );
    assert!(h.arm.public_ips().is_empty());
    assert!(managed_rules(&h.arm).is_empty());
    assert_eq!(h.provider.status(&api.spec().service).await.unwrap(), None);
    // Deleting again is fine.
    h.provider.delete(&api.spec().service).await.unwrap();
}

#[tokio::test]
async fn delete_interrupted_halfway_is_finished_by_the_retry() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    // The public IP delete fails on every attempt of the first try: the LB is already gone.
    h.arm.inject(Fault::error(
        "DELETE",
        "/publicIPAddresses/",
        ArmError::new(axum_status(500), "InternalServerError", "boom"),
        4,
    ));
    let error = h.provider.delete(&web.spec().service).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert!(h.arm.load_balancer(RG, CLUSTER).is_none());
    assert_eq!(
        owned_pips(&h.arm, "default/web").len(),
        1,
        "left behind by the failure"
    );

    h.provider.delete(&web.spec().service).await.unwrap();
    assert!(owned_pips(&h.arm, "default/web").is_empty());
    assert!(managed_rules(&h.arm).is_empty());

    // A failed async operation (LB delete ends Failed) is also retried to completion.
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    h.arm.inject(Fault {
        method: Some("LRO-DELETE".into()),
        path_contains: "/loadBalancers/".into(),
        skip: 0,
        times: 1,
        action: kube_lb_mock_azure::FaultAction::FailOperation(ArmError::new(
            axum_status(500),
            "InternalServerError",
            "operation failed",
        )),
    });
    assert!(h.provider.delete(&web.spec().service).await.is_err());
    h.provider.delete(&web.spec().service).await.unwrap();
    assert!(h.arm.load_balancer(RG, CLUSTER).is_none());
    assert!(h.arm.public_ips().is_empty());
}

fn axum_status(code: u16) -> axum::http::StatusCode {
    axum::http::StatusCode::from_u16(code).unwrap()
}

/// Lets another writer change the load balancer right before our first PUT of it.
#[derive(Debug)]
struct RacingClient {
    inner: ArmClient,
    raced: AtomicBool,
}

#[async_trait]
impl NetworkClient for RacingClient {
    async fn get_load_balancer(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<LoadBalancer>, AzureError> {
        self.inner.get_load_balancer(rg, name).await
    }
    async fn put_load_balancer(
        &self,
        rg: &str,
        lb: &LoadBalancer,
    ) -> Result<LoadBalancer, AzureError> {
        if lb.etag.is_some() && !self.raced.swap(true, Ordering::SeqCst) {
            let mut theirs = self.inner.get_load_balancer(rg, &lb.name).await?.unwrap();
            theirs
                .tags
                .insert("touched-by".into(), "someone-else".into());
            self.inner.put_load_balancer(rg, &theirs).await?;
        }
        self.inner.put_load_balancer(rg, lb).await
    }
    async fn delete_load_balancer(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        self.inner.delete_load_balancer(rg, name, etag).await
    }
    async fn list_public_ips(&self, rg: &str) -> Result<Vec<PublicIp>, AzureError> {
        self.inner.list_public_ips(rg).await
    }
    async fn get_public_ip(&self, rg: &str, name: &str) -> Result<Option<PublicIp>, AzureError> {
        self.inner.get_public_ip(rg, name).await
    }
    async fn put_public_ip(&self, rg: &str, pip: &PublicIp) -> Result<PublicIp, AzureError> {
        self.inner.put_public_ip(rg, pip).await
    }
    async fn delete_public_ip(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        self.inner.delete_public_ip(rg, name, etag).await
    }
    async fn get_security_group(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<SecurityGroup>, AzureError> {
        self.inner.get_security_group(rg, name).await
    }
    async fn put_security_group(
        &self,
        rg: &str,
        nsg: &SecurityGroup,
    ) -> Result<SecurityGroup, AzureError> {
        self.inner.put_security_group(rg, nsg).await
    }
    async fn get_subnet(
        &self,
        rg: &str,
        vnet: &str,
        subnet: &str,
    ) -> Result<Option<Subnet>, AzureError> {
        self.inner.get_subnet(rg, vnet, subnet).await
    }
}

#[tokio::test]
async fn a_concurrent_write_is_detected_by_etag_and_retried_after_rereading() {
    let arm = mock().await;
    let config: kube_lb_provider_azure::AzureConfig =
        serde_json::from_value(config_json(&arm.url())).unwrap();
    let options = fast_options();
    let inner = ArmClient::from_config(&config, &options).unwrap();
    let client = Arc::new(RacingClient {
        inner,
        raced: AtomicBool::new(false),
    });
    let provider = AzureProvider::with_client(
        client,
        Settings::new(&config, CLUSTER).unwrap(),
        CallCounter::new(),
    );
    provider
        .ensure(&svc("first", UID_B).spec(), &nodes(1))
        .await
        .unwrap();
    provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();

    let puts: Vec<u16> = arm
        .journal()
        .iter()
        .filter(|e| e.method == "PUT" && e.path.ends_with(&format!("/loadBalancers/{CLUSTER}")))
        .map(|e| e.status)
        .collect();
    assert!(puts.contains(&412), "the stale write was refused: {puts:?}");
    let lb = arm.load_balancer(RG, CLUSTER).unwrap();
    assert_eq!(
        lb["tags"]["touched-by"], "someone-else",
        "the other writer's change survived"
    );
    assert_eq!(
        names(&lb["properties"]["frontendIPConfigurations"]),
        vec![prefix(UID_B), prefix(UID_A)]
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn throttling_is_honoured_with_retry_after() {
    let h = harness().await;
    h.arm
        .inject(Fault::throttle("PUT", "/publicIPAddresses/", 1, 1));
    let started = Instant::now();
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was not waited for"
    );
    let pip_puts: Vec<u16> = h
        .arm
        .journal()
        .iter()
        .filter(|e| e.method == "PUT" && e.path.contains("/publicIPAddresses/"))
        .map(|e| e.status)
        .collect();
    assert_eq!(pip_puts, vec![429, 201]);
    // The 429 is counted as throttled (kube_lb_cloud_throttled_total), apart from other failures.
    let throttled = h.provider.calls().throttled();
    assert_eq!(throttled.values().sum::<u64>(), 1, "{throttled:?}");
}

#[tokio::test]
async fn load_balancer_ip_uses_an_existing_public_ip_and_never_deletes_it() {
    let h = harness().await;
    let ip = h
        .arm
        .seed_public_ip(RG, "reserved-ip", serde_json::json!({}))
        .unwrap();
    let web = svc("web", UID_A).load_balancer_ip(&ip);
    let status = h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    assert_eq!(ip_of(&status), ip);
    assert_eq!(h.arm.public_ips().len(), 1, "no managed PIP created");
    h.provider.delete(&web.spec().service).await.unwrap();
    let kept = h.arm.public_ip(RG, "reserved-ip").expect("user PIP kept");
    assert!(kept["properties"].get("ipConfiguration").is_none());

    let missing = svc("web", UID_A).load_balancer_ip("20.1.2.3");
    let error = h
        .provider
        .ensure(&missing.spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::User { .. }), "{error}");
    assert!(error.to_string().contains("20.1.2.3"));
}

#[tokio::test]
async fn switching_internal_to_external_moves_the_service_between_load_balancers() {
    let h = harness().await;
    let db = svc("db", UID_A).internal();
    h.provider.ensure(&db.spec(), &nodes(1)).await.unwrap();
    assert!(
        h.arm
            .load_balancer(RG, &format!("{CLUSTER}-internal"))
            .is_some()
    );
    let public = svc("db", UID_A).annotate("azure-dns-label-name", "my-db");
    h.provider.ensure(&public.spec(), &nodes(1)).await.unwrap();
    assert!(
        h.arm
            .load_balancer(RG, &format!("{CLUSTER}-internal"))
            .is_none(),
        "emptied internal LB deleted"
    );
    let pip = h
        .arm
        .public_ip(RG, &format!("{CLUSTER}-{}", prefix(UID_A)))
        .unwrap();
    assert_eq!(pip["properties"]["dnsSettings"]["domainNameLabel"], "my-db");
    assert_eq!(pip["tags"]["k8s-azure-dns-label-service"], "default/db");
}

#[tokio::test]
async fn every_arm_call_made_is_in_the_role_definition() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    h.provider
        .ensure(&svc("db", UID_B).internal().spec(), &nodes(1))
        .await
        .unwrap();
    h.provider.delete(&web.spec().service).await.unwrap();
    let declared: BTreeSet<&str> = ARM_OPERATIONS.iter().copied().collect();
    for entry in h.arm.journal() {
        if entry.path.contains("/oauth2/") {
            continue;
        }
        let segments: Vec<&str> = entry.path.split('/').collect();
        let network = segments
            .iter()
            .position(|s| *s == "Microsoft.Network")
            .unwrap();
        let kinds: Vec<&str> = segments[network + 1..].iter().step_by(2).copied().collect();
        let verb = match entry.method.as_str() {
            "GET" => "read",
            "PUT" => "write",
            "DELETE" => "delete",
            other => panic!("unexpected {other}"),
        };
        let action = format!("Microsoft.Network/{}/{verb}", kinds.join("/"));
        assert!(
            declared.contains(action.as_str()),
            "{action} missing from ARM_OPERATIONS"
        );
    }
}

#[tokio::test]
async fn long_retry_after_on_operations_is_capped_not_slept() {
    let arm = kube_lb_mock_azure::MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .security_group(RG, NSG)
        .retry_after(30)
        .lro_polls(2)
        .start()
        .await
        .unwrap();
    let mut options = fast_options();
    options.poll.max_interval = Duration::from_millis(50);
    let provider = provider_for(&arm, options);
    let started = Instant::now();
    provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    assert_polled_without_long_sleeps(&arm, started, 3 * 3);
    let tokens = arm
        .journal()
        .iter()
        .filter(|e| e.path.contains("/oauth2/"))
        .count();
    assert_eq!(tokens, 1, "the token is cached");
}

#[tokio::test]
async fn ha_ports_floating_ip_and_per_port_annotations() {
    let h = harness().await;
    let p = prefix(UID_A);
    let ha = svc("gw", UID_A)
        .internal()
        .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)])
        .annotate("azure-load-balancer-enable-high-availability-ports", "true");
    h.provider.ensure(&ha.spec(), &nodes(1)).await.unwrap();
    let lb = h
        .arm
        .load_balancer(RG, &format!("{CLUSTER}-internal"))
        .unwrap();
    assert_eq!(
        names(&lb["properties"]["loadBalancingRules"]),
        vec![format!("{p}-TCP-80")]
    );
    let rule = child(&lb, "loadBalancingRules", &format!("{p}-TCP-80"));
    assert_eq!(
        (
            rule["properties"]["protocol"].as_str(),
            rule["properties"]["frontendPort"].as_u64()
        ),
        (Some("All"), Some(0))
    );

    let q = prefix(UID_B);
    let web = svc("web", UID_B)
        .ports(&[("http", 80, "TCP", 30080), ("admin", 9000, "TCP", 30900)])
        .annotate("azure-disable-load-balancer-floating-ip", "true")
        .annotate("port_9000_no_lb_rule", "true")
        .annotate("port_80_health-probe_protocol", "Http")
        .annotate("port_80_health-probe_request-path", "/healthz")
        .annotate("azure-allowed-service-tags", "AzureFrontDoor.Backend");
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let lb = h.arm.load_balancer(RG, CLUSTER).unwrap();
    assert_eq!(
        names(&lb["properties"]["loadBalancingRules"]),
        vec![format!("{q}-TCP-80")],
        "port 9000 has no rule"
    );
    let rule = child(&lb, "loadBalancingRules", &format!("{q}-TCP-80"));
    assert_eq!(rule["properties"]["enableFloatingIP"], false);
    assert_eq!(
        rule["properties"]["backendPort"], 30080,
        "without floating IP the backend is the nodePort"
    );
    let probe = child(&lb, "probes", &format!("{q}-TCP-80"));
    assert_eq!(
        (
            probe["properties"]["protocol"].as_str(),
            probe["properties"]["requestPath"].as_str()
        ),
        (Some("Http"), Some("/healthz"))
    );
    let rules = managed_rules(&h.arm);
    let node_rule = rules
        .values()
        .find(|r| r["sourceAddressPrefix"] == "AzureFrontDoor.Backend")
        .expect("service-tag rule");
    assert_eq!(
        destinations(node_rule),
        vec!["10.224.0.11", "10.224.0.12"],
        "destinations are the nodes"
    );
    assert_eq!(
        node_rule["destinationPortRanges"],
        serde_json::json!(["30080"]),
        "port 9000 has no rule, so no NSG entry"
    );
    h.provider.delete(&web.spec().service).await.unwrap();
    assert!(
        managed_rules(&h.arm)
            .values()
            .all(|r| r["sourceAddressPrefix"] != "AzureFrontDoor.Backend")
    );
}

#[tokio::test]
async fn pip_name_annotation_uses_the_named_public_ip() {
    let h = harness().await;
    let ip = h
        .arm
        .seed_public_ip(RG, "my-ip", serde_json::json!({"owner": "team-a"}))
        .unwrap();
    let web = svc("web", UID_A).annotate("azure-pip-name", "my-ip");
    assert_eq!(
        ip_of(&h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap()),
        ip
    );
    let missing = svc("web", UID_A).annotate("azure-pip-name", "nope");
    let error = h
        .provider
        .ensure(&missing.spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("azure-pip-name=nope"), "{error}");
    h.provider.delete(&web.spec().service).await.unwrap();
    assert_eq!(
        h.arm.public_ip(RG, "my-ip").unwrap()["tags"]["owner"],
        "team-a",
        "never modified or deleted"
    );
}

#[tokio::test]
async fn from_cloud_config_reads_azure_json_with_an_endpoint_override() {
    let arm = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("azure.json");
    std::fs::write(&path, config_json(&arm.url()).to_string()).unwrap();
    let counter = CallCounter::new();
    let provider =
        AzureProvider::from_cloud_config(Some(&path), &CLUSTER.parse().unwrap(), counter.clone())
            .await
            .unwrap();
    let status = provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    assert!(!status.ingress.is_empty());
    assert!(arm.load_balancer(RG, CLUSTER).is_some());
    // The caller's counter (the binary's metrics) sees the calls.
    assert!(counter.snapshot().mutations() > 0, "{counter:?}");

    std::fs::write(&path, r#"{"subscriptionId": "s"}"#).unwrap();
    let error = AzureProvider::from_cloud_config(
        Some(&path),
        &CLUSTER.parse().unwrap(),
        CallCounter::new(),
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("cloud config"), "{error}");
}

/// azure.json's cache keys reach the provider: with `loadBalancerCacheTTLInSeconds: 0` a sync
/// right after another reads ARM again (so it sees drift at once), with no key it is served
/// from the cache.
#[tokio::test]
async fn the_cache_ttl_comes_from_azure_json() {
    let arm = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("azure.json");
    for (ttl, rereads) in [(None, false), (Some(0), true)] {
        let mut config = config_json(&arm.url());
        if let Some(ttl) = ttl {
            config["loadBalancerCacheTTLInSeconds"] = serde_json::json!(ttl);
        }
        std::fs::write(&path, config.to_string()).unwrap();
        let counter = CallCounter::new();
        let provider = AzureProvider::from_cloud_config(
            Some(&path),
            &CLUSTER.parse().unwrap(),
            counter.clone(),
        )
        .await
        .unwrap();
        let spec = svc("web", UID_A).spec();
        provider.ensure(&spec, &nodes(1)).await.unwrap();
        let before = counter.snapshot();
        provider.ensure(&spec, &nodes(1)).await.unwrap();
        let calls = counter.snapshot().since(&before);
        assert_eq!(calls.mutations(), 0, "{ttl:?}: {calls:?}");
        assert_eq!(calls.reads() > 0, rereads, "{ttl:?}: {calls:?}");
    }
}

/// After a controller restart (a fresh provider, nothing cached) the first pass over Services
/// that are in sync mutates nothing and reads the shared objects once for all Services: the
/// public and internal load balancers, the resource group's public IPs (one page here), the
/// security group and the internal frontends' subnet. That is 5 reads for the whole pass,
/// whatever the number of Services; each Service is made of 3 ARM objects (a frontend with
/// its rules and probes in one load balancer, a public IP or subnet address, its rules in the
/// security group), so the budget of 3 reads per load balancer holds with room to spare.
#[tokio::test]
async fn restart_resync_reads_the_shared_objects_once_for_all_services() {
    const N: usize = 20;
    const SHARED_READS: u64 = 5;
    let h = harness().await;
    let services: Vec<Svc> = (0..N)
        .map(|i| {
            let base = svc(
                &format!("svc{i}"),
                &format!("{i:08}-6b2e-11e9-a923-1681be663d3e"),
            );
            if i % 4 == 3 { base.internal() } else { base }
        })
        .collect();
    for service in &services {
        h.provider.ensure(&service.spec(), &nodes(3)).await.unwrap();
    }

    let restarted = AzureProvider::new(&h.config, CLUSTER, fast_options()).unwrap();
    h.arm.clear_journal();
    for service in &services {
        restarted.ensure(&service.spec(), &nodes(3)).await.unwrap();
    }
    let pass = restarted.calls().snapshot();
    assert_eq!(pass.mutations(), 0, "{:?}", h.arm.mutations());
    assert_eq!(pass.reads(), SHARED_READS, "{pass:?}");
    assert!(pass.reads() <= 3 * u64::try_from(N).unwrap());
}

//! The GCP provider against the in-memory GCE mock (real HTTP on loopback). Every test reads
//! the cloud state back from the mock instead of trusting the provider's answer.

// Test helpers outside #[test] functions: a failed setup step should panic with its error.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use kube_lb_annotations::{Cloud, LoadBalancerSpec, ServiceKey};
use kube_lb_mock_gce::{ApiError, Fault, FaultResponse, JournalEntry, MockGce, MockGceBuilder};
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider};
use kube_lb_provider_gcp::GcpProvider;
use serde_json::{Value, json};
use support::{
    OWNED_COLLECTIONS, TAG, ZONE_A, ZONE_B, node, provider_for, three_node_builder, two_nodes,
};

struct Env {
    gce: MockGce,
    provider: GcpProvider,
}

fn nodes_builder() -> MockGceBuilder {
    three_node_builder().subnetwork("ilb", "10.200.0.0/24")
}

async fn env_with(builder: MockGceBuilder) -> Env {
    let gce = builder.start().await.unwrap();
    let provider = provider_for(&gce).await;
    Env { gce, provider }
}

async fn env() -> Env {
    env_with(nodes_builder()).await
}

/// A Service manifest, built up by the test and parsed by the real annotation parser.
#[derive(Clone)]
struct Svc(Value);

fn svc(uid: &str) -> Svc {
    Svc(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "uid": uid, "annotations": {}},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Cluster",
            "ports": [
                {"name": "http", "port": 80, "nodePort": 30080, "protocol": "TCP", "targetPort": 8080},
                {"name": "https", "port": 443, "nodePort": 30443, "protocol": "TCP", "targetPort": 8443},
            ],
        },
    }))
}

impl Svc {
    fn annotate(mut self, key: &str, value: &str) -> Svc {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }
    fn unannotate(mut self, key: &str) -> Svc {
        if let Some(a) = self.0["metadata"]["annotations"].as_object_mut() {
            a.remove(key);
        }
        self
    }
    fn internal(self) -> Svc {
        self.annotate("networking.gke.io/load-balancer-type", "Internal")
    }
    fn ports(mut self, ports: &[u16]) -> Svc {
        self.0["spec"]["ports"] = ports
            .iter()
            .map(|p| json!({"name": format!("p{p}"), "port": p, "nodePort": 30000 + p % 1000, "protocol": "TCP", "targetPort": p}))
            .collect();
        self
    }
    fn local(mut self, health_port: u16) -> Svc {
        self.0["spec"]["externalTrafficPolicy"] = json!("Local");
        self.0["spec"]["healthCheckNodePort"] = json!(health_port);
        self
    }
    fn cluster(mut self) -> Svc {
        self.0["spec"]["externalTrafficPolicy"] = json!("Cluster");
        if let Some(spec) = self.0["spec"].as_object_mut() {
            spec.remove("healthCheckNodePort");
        }
        self
    }
    fn source_ranges(mut self, ranges: &[&str]) -> Svc {
        self.0["spec"]["loadBalancerSourceRanges"] = json!(ranges);
        self
    }
    fn ip(mut self, ip: &str) -> Svc {
        self.0["spec"]["loadBalancerIP"] = json!(ip);
        self
    }
    fn spec(&self) -> LoadBalancerSpec {
        let service: k8s_openapi::api::core::v1::Service =
            serde_json::from_value(self.0.clone()).unwrap();
        kube_lb_annotations::parse(Cloud::Gcp, &service)
            .unwrap()
            .spec
    }
    fn key(&self) -> ServiceKey {
        self.spec().service
    }
}

const UID: &str = "4b2a6798-feb5-11e6-bdea-42010af00000";
const LB: &str = "a4b2a6798feb511e6bdea42010af0000";

fn strs(value: &Value) -> Vec<String> {
    let mut out: Vec<String> = value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn names_of(links: &Value) -> Vec<String> {
    let mut out: Vec<String> = strs(links)
        .iter()
        .map(|l| l.rsplit('/').next().unwrap_or_default().to_string())
        .collect();
    out.sort();
    out
}

fn shorts(entries: &[JournalEntry]) -> Vec<String> {
    entries.iter().map(JournalEntry::short).collect()
}

/// Asserts a resync changes nothing: zero mutating calls, per the mock's journal and the
/// provider's own call counter.
async fn assert_noop_resync(env: &Env, spec: &LoadBalancerSpec, nodes: &[BackendNode]) {
    let mark = env.gce.journal_len();
    let calls = env.provider.calls().snapshot();
    env.provider.ensure(spec, nodes).await.unwrap();
    let mutations = env.gce.mutations_since(mark);
    assert!(
        mutations.is_empty(),
        "resync mutated: {:?}",
        shorts(&mutations)
    );
    assert_eq!(env.provider.calls().snapshot().since(&calls).mutations(), 0);
    assert!(env.gce.journal_len() > mark, "resync should observe");
}

fn assert_nothing_left(gce: &MockGce) {
    for collection in OWNED_COLLECTIONS {
        assert_eq!(
            gce.names(collection),
            Vec::<String>::new(),
            "{collection} left behind"
        );
    }
}

#[tokio::test]
async fn external_create_builds_every_resource_and_resync_is_free() {
    let env = env().await;
    let service = svc(UID).source_ranges(&["192.0.2.0/24", "198.51.100.7/32"]);
    let status = env
        .provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    let ip = status.ingress[0].ip.unwrap().to_string();

    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert_eq!(rule["IPAddress"], json!(ip));
    assert_eq!(rule["IPProtocol"], json!("TCP"));
    assert_eq!(rule["portRange"], json!("80-443"));
    assert_eq!(rule["loadBalancingScheme"], json!("EXTERNAL"));
    assert!(
        rule["target"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/regions/us-central1/targetPools/{LB}"))
    );

    let address = env.gce.resource("addresses", LB).unwrap();
    assert_eq!(address["address"], json!(ip));
    assert_eq!(address["status"], json!("IN_USE"));

    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(
        names_of(&pool["instances"]),
        ["gke-c1-node-1", "gke-c1-node-2"]
    );
    assert_eq!(names_of(&pool["healthChecks"]), ["k8s-c1-node"]);

    let hc = env.gce.resource("httpHealthChecks", "k8s-c1-node").unwrap();
    assert_eq!(
        (hc["port"].clone(), hc["requestPath"].clone()),
        (json!(10256), json!("/healthz"))
    );
    assert_eq!(
        (hc["checkIntervalSec"].clone(), hc["timeoutSec"].clone()),
        (json!(8), json!(1))
    );

    let fw = env
        .gce
        .resource("firewalls", &format!("k8s-fw-{LB}"))
        .unwrap();
    assert_eq!(
        strs(&fw["sourceRanges"]),
        ["192.0.2.0/24", "198.51.100.7/32"]
    );
    assert_eq!(strs(&fw["destinationRanges"]), std::slice::from_ref(&ip));
    assert_eq!(strs(&fw["targetTags"]), [TAG]);
    assert_eq!(
        fw["allowed"],
        json!([{"IPProtocol": "tcp", "ports": ["80", "443"]}])
    );
    assert!(fw["description"].as_str().unwrap().contains(&ip));

    let hc_fw = env
        .gce
        .resource("firewalls", "k8s-c1-node-http-hc")
        .unwrap();
    assert_eq!(strs(&hc_fw["sourceRanges"]).len(), 4);
    assert_eq!(
        hc_fw["allowed"],
        json!([{"IPProtocol": "tcp", "ports": ["10256"]}])
    );

    assert_eq!(
        env.provider.status(&service.key()).await.unwrap(),
        Some(status)
    );
    assert_noop_resync(&env, &service.spec(), &two_nodes()).await;
}

#[tokio::test]
async fn operations_that_stay_running_are_polled_until_done() {
    let env = env_with(nodes_builder().running_polls(2)).await;
    env.provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    let polls = env
        .gce
        .journal()
        .iter()
        .filter(|e| e.method == "GET" && e.path.contains("/operations/"))
        .count();
    assert!(polls >= 2, "expected operation polls, saw {polls}");
    assert!(env.gce.resource("forwardingRules", LB).is_some());
}

#[tokio::test]
async fn port_and_source_range_changes_keep_the_ip() {
    let env = env().await;
    let first = env
        .provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    let changed = svc(UID)
        .ports(&[80, 8080])
        .source_ranges(&["203.0.113.0/24"]);
    let mark = env.gce.journal_len();
    let second = env
        .provider
        .ensure(&changed.spec(), &two_nodes())
        .await
        .unwrap();
    assert_eq!(
        first, second,
        "IP must survive re-creating the forwarding rule"
    );
    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert_eq!(rule["portRange"], json!("80-8080"));
    let fw = env
        .gce
        .resource("firewalls", &format!("k8s-fw-{LB}"))
        .unwrap();
    assert_eq!(
        fw["allowed"],
        json!([{"IPProtocol": "tcp", "ports": ["80", "8080"]}])
    );
    assert_eq!(strs(&fw["sourceRanges"]), ["203.0.113.0/24"]);
    let mutations = shorts(&env.gce.mutations_since(mark));
    assert!(mutations.contains(&format!("DELETE regions/us-central1/forwardingRules/{LB}")));
    assert!(
        !mutations.iter().any(|m| m.contains("/addresses")),
        "{mutations:?}"
    );
    assert_noop_resync(&env, &changed.spec(), &two_nodes()).await;
}

#[tokio::test]
async fn local_and_cluster_policies_swap_health_checks_in_place() {
    let env = env().await;
    env.provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();

    let local = svc(UID).local(31234);
    let mark = env.gce.journal_len();
    env.provider
        .ensure(&local.spec(), &two_nodes())
        .await
        .unwrap();
    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(names_of(&pool["healthChecks"]), [LB]);
    let hc = env.gce.resource("httpHealthChecks", LB).unwrap();
    assert_eq!(
        (hc["port"].clone(), hc["requestPath"].clone()),
        (json!(31234), json!("/healthz"))
    );
    assert!(
        env.gce
            .resource("firewalls", &format!("k8s-{LB}-http-hc"))
            .is_some()
    );
    // The shared check served only this Service, so it and its firewall are gone.
    assert!(
        env.gce
            .resource("httpHealthChecks", "k8s-c1-node")
            .is_none()
    );
    assert!(
        env.gce
            .resource("firewalls", "k8s-c1-node-http-hc")
            .is_none()
    );
    let mutations = shorts(&env.gce.mutations_since(mark));
    assert!(
        !mutations.iter().any(|m| m.contains("forwardingRules")),
        "no rule churn: {mutations:?}"
    );
    assert_noop_resync(&env, &local.spec(), &two_nodes()).await;

    let back = local.cluster();
    env.provider
        .ensure(&back.spec(), &two_nodes())
        .await
        .unwrap();
    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(names_of(&pool["healthChecks"]), ["k8s-c1-node"]);
    assert!(env.gce.resource("httpHealthChecks", LB).is_none());
    assert!(
        env.gce
            .resource("firewalls", &format!("k8s-{LB}-http-hc"))
            .is_none()
    );
    assert_noop_resync(&env, &back.spec(), &two_nodes()).await;
}

#[tokio::test]
async fn shared_health_check_survives_while_another_service_uses_it() {
    let env = env().await;
    let other = "11111111-2222-3333-4444-555555555555";
    env.provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    env.provider
        .ensure(&svc(other).spec(), &two_nodes())
        .await
        .unwrap();
    env.provider.delete(&svc(UID).key()).await.unwrap();
    assert!(
        env.gce
            .resource("httpHealthChecks", "k8s-c1-node")
            .is_some()
    );
    assert!(
        env.gce
            .resource("firewalls", "k8s-c1-node-http-hc")
            .is_some()
    );
    env.provider.delete(&svc(other).key()).await.unwrap();
    assert_nothing_left(&env.gce);
}

#[tokio::test]
async fn nodes_joining_and_leaving_update_pool_membership_only() {
    let env = env().await;
    let service = svc(UID);
    env.provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    let mut nodes = two_nodes();
    nodes.push(node(ZONE_A, "gke-c1-node-3"));
    let mark = env.gce.journal_len();
    env.provider.ensure(&service.spec(), &nodes).await.unwrap();
    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(
        names_of(&pool["instances"]),
        ["gke-c1-node-1", "gke-c1-node-2", "gke-c1-node-3"]
    );
    assert_eq!(
        shorts(&env.gce.mutations_since(mark)),
        [format!(
            "POST regions/us-central1/targetPools/{LB}/addInstance"
        )]
    );

    nodes.remove(0);
    let mark = env.gce.journal_len();
    env.provider.ensure(&service.spec(), &nodes).await.unwrap();
    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(
        names_of(&pool["instances"]),
        ["gke-c1-node-2", "gke-c1-node-3"]
    );
    assert_eq!(
        shorts(&env.gce.mutations_since(mark)),
        [format!(
            "POST regions/us-central1/targetPools/{LB}/removeInstance"
        )]
    );
    assert_noop_resync(&env, &service.spec(), &nodes).await;
}

#[tokio::test]
async fn network_tier_change_moves_to_a_new_address_of_that_tier() {
    let env = env().await;
    let first = env
        .provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    let standard = svc(UID).annotate("cloud.google.com/network-tier", "Standard");
    let second = env
        .provider
        .ensure(&standard.spec(), &two_nodes())
        .await
        .unwrap();
    assert_ne!(first, second, "a Premium IP cannot become Standard");
    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert_eq!(rule["networkTier"], json!("STANDARD"));
    let address = env.gce.resource("addresses", LB).unwrap();
    assert_eq!(address["networkTier"], json!("STANDARD"));
    assert_eq!(address["address"], rule["IPAddress"]);
    assert_eq!(
        env.gce.names("addresses"),
        [LB],
        "the Premium reservation is released"
    );
    assert_noop_resync(&env, &standard.spec(), &two_nodes()).await;
}

#[tokio::test]
async fn nodes_without_a_vm_are_left_out() {
    let env = env().await;
    let mut nodes = two_nodes();
    nodes.push(node(ZONE_B, "gke-c1-node-gone"));
    env.provider.ensure(&svc(UID).spec(), &nodes).await.unwrap();
    let pool = env.gce.resource("targetPools", LB).unwrap();
    assert_eq!(
        names_of(&pool["instances"]),
        ["gke-c1-node-1", "gke-c1-node-2"]
    );
}

#[tokio::test]
async fn delete_removes_everything_owned() {
    let env = env().await;
    let service = svc(UID).local(31234);
    env.provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    env.provider.delete(&service.key()).await.unwrap();
    assert_nothing_left(&env.gce);
    assert_eq!(env.provider.status(&service.key()).await.unwrap(), None);
    // Deleting again is a no-op success.
    env.provider.delete(&service.key()).await.unwrap();
}

#[tokio::test]
async fn delete_interrupted_halfway_finishes_on_retry() {
    let env = env().await;
    let service = svc(UID);
    env.provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    // The forwarding rule and address go, then the target-pool delete operation fails.
    env.gce.inject(Fault::on(
        "DELETE",
        "/targetPools/",
        FaultResponse::OperationError {
            code: "INTERNAL_ERROR".into(),
            message: "backend failure".into(),
            http_status: 500,
        },
    ));
    let error = env.provider.delete(&service.key()).await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    assert!(env.gce.resource("forwardingRules", LB).is_none());
    assert!(
        env.gce.resource("targetPools", LB).is_some(),
        "the failed step left its resource"
    );
    env.provider.delete(&service.key()).await.unwrap();
    assert_nothing_left(&env.gce);
}

#[tokio::test]
async fn throttling_is_retried_after_retry_after() {
    let env = env().await;
    env.gce.throttle(2, 1);
    let status = env
        .provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    assert!(status.ingress[0].ip.is_some());
    let journal = env.gce.journal();
    let throttled: Vec<&JournalEntry> = journal.iter().filter(|e| e.status == 429).collect();
    assert_eq!(throttled.len(), 2);
    // Both are counted as throttled (kube_lb_cloud_throttled_total), apart from other failures.
    let counted: u64 = env.provider.calls().throttled().values().sum();
    assert_eq!(counted, 2, "{:?}", env.provider.calls().throttled());
    let after = &journal[throttled[1].seq as usize + 1];
    assert!(
        after.at - throttled[1].at >= Duration::from_secs(1),
        "retried after {:?}, Retry-After was 1s",
        after.at - throttled[1].at
    );
    assert!(env.gce.resource("forwardingRules", LB).is_some());
}

#[tokio::test]
async fn throttling_answered_with_403_is_told_from_a_permission_error_by_its_reason() {
    // GCE refuses a project's excess request rate with 403 `rateLimitExceeded`, the status it
    // also uses for a missing permission: only the reason in the body tells them apart, so it
    // must reach the classification whatever shape the client parsed the body into.
    let env = env().await;
    env.gce.inject(
        Fault::on(
            "*",
            ".",
            FaultResponse::Http(ApiError::new(
                403,
                "rateLimitExceeded",
                "Rate Limit Exceeded",
            )),
        )
        .times(1),
    );
    let status = env
        .provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    assert!(status.ingress[0].ip.is_some());
    let counted: u64 = env.provider.calls().throttled().values().sum();
    assert_eq!(counted, 1, "{:?}", env.provider.calls().throttled());
}

#[tokio::test]
async fn quota_exhaustion_is_an_environment_error() {
    let env = env_with(nodes_builder().quota("FORWARDING_RULES", 0)).await;
    let error = env
        .provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap_err();
    // Retried by the controller: the quota may be raised without the Service changing.
    assert_eq!(error.class(), "environment", "{error}");
    assert!(error.to_string().contains("FORWARDING_RULES"), "{error}");
}

#[tokio::test]
async fn user_owned_static_ip_is_used_and_never_released() {
    let env = env().await;
    let reserve = reqwest::Client::new()
        .post(format!(
            "{}/compute/v1/projects/mock-project/regions/us-central1/addresses",
            env.gce.url()
        ))
        .json(&json!({"name": "my-static-ip", "address": "203.0.113.200"}))
        .send()
        .await
        .unwrap();
    assert!(reserve.status().is_success());
    let service = svc(UID).ip("203.0.113.200");
    let status = env
        .provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    assert_eq!(status.ingress[0].ip.unwrap().to_string(), "203.0.113.200");
    assert_eq!(env.gce.names("addresses"), ["my-static-ip"]);
    assert_noop_resync(&env, &service.spec(), &two_nodes()).await;
    env.provider.delete(&service.key()).await.unwrap();
    assert_eq!(env.gce.names("addresses"), ["my-static-ip"]);
    assert!(env.gce.names("forwardingRules").is_empty());
}

#[tokio::test]
async fn unreserved_requested_external_ip_is_a_user_error() {
    let env = env().await;
    let error = env
        .provider
        .ensure(&svc(UID).ip("203.0.113.201").spec(), &two_nodes())
        .await
        .unwrap_err();
    assert_eq!(error.class(), "user");
    assert!(
        error.to_string().contains("neither static nor assigned"),
        "{error}"
    );
}

#[tokio::test]
async fn a_node_another_service_added_to_the_shared_group_first_is_not_an_error() {
    // Two Services' ensures race to add the same node to the cluster's shared instance group:
    // the loser's add is answered 400 `memberAlreadyExists`, which means the work is done.
    let env = env().await;
    env.gce.inject(Fault::on(
        "POST",
        "/instanceGroups/.*/addInstances",
        FaultResponse::Http(ApiError::new(
            400,
            "memberAlreadyExists",
            "The instance is already a member of the instance group",
        )),
    ));
    env.provider
        .ensure(&svc(UID).internal().spec(), &two_nodes())
        .await
        .unwrap();
    assert!(
        env.gce
            .journal()
            .iter()
            .any(|e| e.status == 400 && e.path.contains("/addInstances")),
        "the race was not staged"
    );
}

#[tokio::test]
async fn internal_create_uses_groups_backend_service_and_subnet() {
    let env = env().await;
    let service = svc(UID).internal();
    let status = env
        .provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    let ip = status.ingress[0].ip.unwrap();
    assert!(ip.to_string().starts_with("10.128."), "{ip}");

    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert_eq!(rule["loadBalancingScheme"], json!("INTERNAL"));
    assert_eq!(strs(&rule["ports"]), ["443", "80"]);
    assert!(
        rule["subnetwork"]
            .as_str()
            .unwrap()
            .ends_with("/subnetworks/default")
    );
    assert_eq!(rule["allowGlobalAccess"], json!(false));
    assert!(
        rule["backendService"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/backendServices/{LB}"))
    );

    let bs = env.gce.resource("backendServices", LB).unwrap();
    assert_eq!(bs["loadBalancingScheme"], json!("INTERNAL"));
    assert_eq!(bs["protocol"], json!("TCP"));
    assert_eq!(bs["backends"].as_array().unwrap().len(), 2);
    assert!(
        bs["backends"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["balancingMode"] == json!("CONNECTION"))
    );
    assert_eq!(names_of(&bs["healthChecks"]), ["k8s-c1-node"]);
    let fingerprint = bs["fingerprint"].as_str().unwrap().to_string();

    assert_eq!(
        env.gce.group_members(ZONE_A, "k8s-ig--c1").unwrap(),
        ["gke-c1-node-1"]
    );
    assert_eq!(
        env.gce.group_members(ZONE_B, "k8s-ig--c1").unwrap(),
        ["gke-c1-node-2"]
    );
    assert!(env.gce.resource("healthChecks", "k8s-c1-node").is_some());
    assert!(env.gce.resource("firewalls", "k8s-c1-node-hc").is_some());
    assert!(env.gce.resource("targetPools", LB).is_none());
    let address = env.gce.resource("addresses", LB).unwrap();
    assert_eq!(address["addressType"], json!("INTERNAL"));

    assert_noop_resync(&env, &service.spec(), &two_nodes()).await;
    assert_eq!(
        env.gce.resource("backendServices", LB).unwrap()["fingerprint"],
        json!(fingerprint)
    );
}

#[tokio::test]
async fn internal_node_changes_move_group_members_and_backends() {
    let env = env().await;
    let service = svc(UID).internal();
    let only_a = vec![node(ZONE_A, "gke-c1-node-1")];
    env.provider.ensure(&service.spec(), &only_a).await.unwrap();
    let bs = env.gce.resource("backendServices", LB).unwrap();
    assert_eq!(bs["backends"].as_array().unwrap().len(), 1);
    let old_fingerprint = bs["fingerprint"].clone();

    env.provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    let bs = env.gce.resource("backendServices", LB).unwrap();
    assert_eq!(
        bs["backends"].as_array().unwrap().len(),
        2,
        "new zone joins the backends"
    );
    assert_ne!(
        bs["fingerprint"], old_fingerprint,
        "update went through with the fingerprint"
    );
    assert_eq!(
        env.gce.group_members(ZONE_B, "k8s-ig--c1").unwrap(),
        ["gke-c1-node-2"]
    );

    env.provider.ensure(&service.spec(), &only_a).await.unwrap();
    assert_eq!(
        env.gce.group_members(ZONE_B, "k8s-ig--c1").unwrap(),
        Vec::<String>::new()
    );
    let bs = env.gce.resource("backendServices", LB).unwrap();
    assert_eq!(bs["backends"].as_array().unwrap().len(), 1);
    assert_noop_resync(&env, &service.spec(), &only_a).await;
}

#[tokio::test]
async fn internal_annotations_subnet_global_access_and_many_ports() {
    let env = env().await;
    let base = svc(UID).internal();
    env.provider
        .ensure(&base.spec(), &two_nodes())
        .await
        .unwrap();

    let global = base.clone().annotate(
        "networking.gke.io/internal-load-balancer-allow-global-access",
        "true",
    );
    let mark = env.gce.journal_len();
    env.provider
        .ensure(&global.spec(), &two_nodes())
        .await
        .unwrap();
    assert_eq!(
        env.gce.resource("forwardingRules", LB).unwrap()["allowGlobalAccess"],
        json!(true)
    );
    assert_eq!(
        shorts(&env.gce.mutations_since(mark)),
        [format!("PATCH regions/us-central1/forwardingRules/{LB}")],
        "global access is patched in place"
    );

    let many = global.clone().ports(&[80, 81, 82, 83, 84, 85]);
    env.provider
        .ensure(&many.spec(), &two_nodes())
        .await
        .unwrap();
    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert_eq!(rule["allPorts"], json!(true));

    let subnet = many
        .clone()
        .annotate("networking.gke.io/internal-load-balancer-subnet", "ilb");
    let status = env
        .provider
        .ensure(&subnet.spec(), &two_nodes())
        .await
        .unwrap();
    assert!(
        status.ingress[0]
            .ip
            .unwrap()
            .to_string()
            .starts_with("10.200.0.")
    );
    let rule = env.gce.resource("forwardingRules", LB).unwrap();
    assert!(
        rule["subnetwork"]
            .as_str()
            .unwrap()
            .ends_with("/subnetworks/ilb")
    );
    assert_noop_resync(&env, &subnet.spec(), &two_nodes()).await;

    let back = subnet.unannotate("networking.gke.io/internal-load-balancer-subnet");
    let status = env
        .provider
        .ensure(&back.spec(), &two_nodes())
        .await
        .unwrap();
    assert!(
        status.ingress[0]
            .ip
            .unwrap()
            .to_string()
            .starts_with("10.128.")
    );
    assert_eq!(env.gce.names("addresses"), [LB]);
}

#[tokio::test]
async fn switching_scheme_replaces_the_load_balancer() {
    let env = env().await;
    env.provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    let internal = svc(UID).internal();
    env.provider
        .ensure(&internal.spec(), &two_nodes())
        .await
        .unwrap();
    assert!(env.gce.names("targetPools").is_empty());
    assert!(env.gce.names("httpHealthChecks").is_empty());
    assert_eq!(
        env.gce.resource("forwardingRules", LB).unwrap()["loadBalancingScheme"],
        json!("INTERNAL")
    );
    assert_noop_resync(&env, &internal.spec(), &two_nodes()).await;

    env.provider
        .ensure(&svc(UID).spec(), &two_nodes())
        .await
        .unwrap();
    assert!(env.gce.names("backendServices").is_empty());
    assert_eq!(
        env.gce.resource("forwardingRules", LB).unwrap()["loadBalancingScheme"],
        json!("EXTERNAL")
    );
    env.provider.delete(&svc(UID).key()).await.unwrap();
    assert_nothing_left(&env.gce);
}

#[tokio::test]
async fn internal_delete_after_injected_failure_then_retry() {
    let env = env().await;
    let service = svc(UID).internal().local(31999);
    env.provider
        .ensure(&service.spec(), &two_nodes())
        .await
        .unwrap();
    env.gce.inject(
        Fault::on(
            "DELETE",
            "/backendServices/",
            FaultResponse::Http(ApiError::new(503, "backendError", "try again")),
        )
        .times(10),
    );
    assert!(env.provider.delete(&service.key()).await.is_err());
    assert!(env.gce.resource("backendServices", LB).is_some());
    env.gce.clear_faults();
    env.provider.delete(&service.key()).await.unwrap();
    assert_nothing_left(&env.gce);
}

/// Names of everything in the collections a load balancer is made of.
fn footprint(gce: &MockGce) -> Vec<(&'static str, Vec<String>)> {
    OWNED_COLLECTIONS
        .iter()
        .map(|c| (*c, gce.names(c)))
        .collect()
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_adopted_on_the_retry() {
    let lost_503 = || Some(ApiError::new(503, "backendError", "answer lost"));
    let external = svc(UID);
    let local = svc(UID).local(31999);
    let internal = svc(UID).internal();
    // (what, Service, method and path of the create whose answer is lost, 503 or dropped)
    let cases: Vec<(&str, &Svc, &str, Option<ApiError>)> = vec![
        (
            "address",
            &external,
            "/regions/us-central1/addresses$",
            lost_503(),
        ),
        (
            "address, dropped",
            &external,
            "/regions/us-central1/addresses$",
            None,
        ),
        ("target pool", &external, "/targetPools$", lost_503()),
        ("target pool, dropped", &external, "/targetPools$", None),
        (
            "forwarding rule",
            &external,
            "/forwardingRules$",
            lost_503(),
        ),
        (
            "forwarding rule, dropped",
            &internal,
            "/forwardingRules$",
            None,
        ),
        (
            "shared legacy health check",
            &external,
            "/global/httpHealthChecks$",
            lost_503(),
        ),
        (
            "per-Service legacy health check",
            &local,
            "/global/httpHealthChecks$",
            None,
        ),
        ("firewall", &external, "/global/firewalls$", lost_503()),
        ("firewall, dropped", &local, "/global/firewalls$", None),
        (
            "health check",
            &internal,
            "/global/healthChecks$",
            lost_503(),
        ),
        (
            "backend service",
            &internal,
            "/backendServices$",
            lost_503(),
        ),
        (
            "backend service, dropped",
            &internal,
            "/backendServices$",
            None,
        ),
        ("instance group", &internal, "/instanceGroups$", lost_503()),
        (
            "instance group, dropped",
            &internal,
            "/instanceGroups$",
            None,
        ),
    ];
    for (what, service, path, lost) in cases {
        let reference = env().await;
        reference
            .provider
            .ensure(&service.spec(), &two_nodes())
            .await
            .unwrap();
        let want = footprint(&reference.gce);

        let env = env().await;
        env.gce
            .inject(Fault::on("POST", path, FaultResponse::LoseResponse(lost)));
        let status = match env.provider.ensure(&service.spec(), &two_nodes()).await {
            Ok(status) => status,
            // Whatever the first attempt reports, the controller's retry must recognise what
            // the lost call did.
            Err(error) => {
                assert!(error.is_retryable(), "{what}: {error}");
                env.provider
                    .ensure(&service.spec(), &two_nodes())
                    .await
                    .unwrap()
            }
        };
        assert!(status.ingress[0].ip.is_some(), "{what}");
        let journal = env.gce.journal();
        assert!(
            journal.iter().any(|e| e.status == 409),
            "{what}: the retried create met its own resource: {:?}",
            shorts(&journal)
        );
        assert_eq!(
            footprint(&env.gce),
            want,
            "{what}: nothing missing, nothing extra"
        );
        assert_noop_resync(&env, &service.spec(), &two_nodes()).await;
        env.provider.delete(&service.key()).await.unwrap();
        assert_nothing_left(&env.gce);
    }
}

#[tokio::test]
async fn a_resource_with_our_name_but_another_owner_is_left_alone() {
    let http = reqwest::Client::new();
    let fw_name = format!("k8s-fw-{LB}");
    // (what, collection path, body of the foreign resource, owner the error must name)
    let cases: Vec<(&str, String, Value, &str)> = vec![
        (
            "firewall of another Service",
            "global/firewalls".into(),
            json!({"name": fw_name, "description": json!({"kubernetes.io/service-name": "shop/cart"}).to_string(),
                "allowed": [{"IPProtocol": "tcp", "ports": ["22"]}], "sourceRanges": ["0.0.0.0/0"]}),
            "shop/cart",
        ),
        (
            "target pool made by hand",
            "regions/us-central1/targetPools".into(),
            json!({"name": LB, "description": "legacy pool, do not touch"}),
            "do not touch",
        ),
        (
            "shared health check of another cluster",
            "global/httpHealthChecks".into(),
            json!({"name": "k8s-c1-node", "port": 10256, "requestPath": "/healthz",
                "description": json!({"kubernetes.io/cluster-id": "other"}).to_string()}),
            "cluster other",
        ),
    ];
    for (what, collection, body, owner) in cases {
        let env = env().await;
        let url = format!(
            "{}/compute/v1/projects/{}/{collection}",
            env.gce.url(),
            env.gce.project()
        );
        let created = http.post(url).json(&body).send().await.unwrap();
        assert_eq!(created.status().as_u16(), 200, "{what}");
        let name = body["name"].as_str().unwrap();
        let collection_name = collection.rsplit('/').next().unwrap();
        let before = env.gce.resource(collection_name, name).unwrap();

        let error = env
            .provider
            .ensure(&svc(UID).spec(), &two_nodes())
            .await
            .unwrap_err();
        match &error {
            kube_lb_provider_core::ProviderError::OwnedElsewhere {
                resource,
                owner: named,
                ..
            } => {
                assert!(named.contains(owner), "{what}: {error}");
                assert!(resource.contains(name), "{what}: {error}");
                assert_eq!(error.class(), "user", "{what}: a user error");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(
            !error.is_retryable(),
            "{what}: a user error waits for the Service to change"
        );
        assert_eq!(
            env.gce.resource(collection_name, name).unwrap(),
            before,
            "{what}: untouched"
        );
    }
}

/// After a controller restart (a fresh provider, nothing cached) the first pass over Services
/// that are in sync mutates nothing, reads each load balancer's own resources once, and does
/// the node and shared-object lookups once for all Services rather than once per Service.
///
/// Reads per load balancer (its name in the path) against what it is made of:
/// - external, `Cluster`: rule, address, firewall, target pool = 4, plus one probe for a
///   per-Service health check left from `Local` = 5 (made of 6: those 4 and the shared node
///   health check and its firewall);
/// - external, `Local`: rule, address, firewall, target pool, health check, its firewall = 6
///   (made of those 6);
/// - internal, `Cluster`: rule, address, firewall, backend service + the same probe = 5 (made
///   of 4 + shared health check, its firewall and the zones' instance groups).
///
/// Shared, once per pass: one `instances.list` per zone with nodes (2), the two node health
/// checks and their firewalls (4), each zone's instance group with its members (2 × 2), and
/// the check that each node health check is still used by something (one target-pool and one
/// backend-service list, 2) before a start's look for leftovers of interrupted changes.
#[tokio::test]
async fn restart_resync_reads_each_load_balancer_once_and_shared_pieces_once() {
    const N: usize = 18;
    const SHARED_READS: usize = 2 + 4 + 4 + 2;
    let env = env().await;
    let services: Vec<(Svc, usize)> = (0..N)
        .map(|i| {
            let base = svc(&format!("{i:08}-feb5-11e6-bdea-42010af00000"));
            match i % 3 {
                0 => (base, 5),
                1 => (base.local(31000 + u16::try_from(i).unwrap()), 6),
                _ => (base.internal(), 5),
            }
        })
        .collect();
    let nodes = two_nodes();
    for (service, _) in &services {
        env.provider.ensure(&service.spec(), &nodes).await.unwrap();
    }

    let restarted = provider_for(&env.gce).await;
    let mark = env.gce.journal_len();
    let before = restarted.calls().snapshot();
    for (service, _) in &services {
        restarted.ensure(&service.spec(), &nodes).await.unwrap();
    }
    let pass = restarted.calls().snapshot().since(&before);
    let journal = env.gce.journal_since(mark);
    assert_eq!(
        pass.mutations(),
        0,
        "{:?}",
        shorts(&env.gce.mutations_since(mark))
    );
    assert_eq!(pass.reads(), u64::try_from(journal.len()).unwrap());

    let mut attributed = 0;
    for (service, budget) in &services {
        let lb = kube_lb_provider_core::naming::load_balancer_name(&service.key().uid);
        let reads: Vec<String> = journal
            .iter()
            .filter(|e| e.path.contains(&lb))
            .map(JournalEntry::short)
            .collect();
        assert_eq!(reads.len(), *budget, "{lb}: {reads:?}");
        attributed += reads.len();
    }
    let shared: Vec<String> = journal
        .iter()
        .filter(|e| {
            !services.iter().any(|(s, _)| {
                e.path
                    .contains(&kube_lb_provider_core::naming::load_balancer_name(
                        &s.key().uid,
                    ))
            })
        })
        .map(JournalEntry::short)
        .collect();
    assert_eq!(attributed + shared.len(), journal.len());
    assert_eq!(shared.len(), SHARED_READS, "{shared:?}");
}

/// `text` as a regular expression matching only itself.
fn literal(text: &str) -> String {
    text.chars().fold(String::new(), |mut out, c| {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
        out
    })
}

/// A change of scheme (external ↔ internal) is break-before-make; stopped before any one of
/// its changes — as a SIGKILL there would stop it — a restarted provider finishes it: one load
/// balancer of the new scheme, nothing of the old one, a free resync, and a delete that leaves
/// nothing.
#[tokio::test]
async fn a_scheme_switch_stopped_before_any_of_its_changes_converges_after_a_restart() {
    let external = svc(UID);
    let internal = svc(UID).internal();
    for (from, to, what) in [
        (&external, &internal, "external → internal"),
        (&internal, &external, "internal → external"),
    ] {
        // The uninterrupted switch, for its sequence of changes and its end state.
        let reference = env().await;
        reference
            .provider
            .ensure(&from.spec(), &two_nodes())
            .await
            .unwrap();
        let mark = reference.gce.journal_len();
        reference
            .provider
            .ensure(&to.spec(), &two_nodes())
            .await
            .unwrap();
        let steps = reference.gce.mutations_since(mark);
        let end = footprint(&reference.gce);
        assert!(steps.len() >= 4, "{what}: {:?}", shorts(&steps));

        for (k, step) in steps.iter().enumerate() {
            let case = format!("{what}, stopped before change {k} ({})", step.short());
            let env = env().await;
            env.provider
                .ensure(&from.spec(), &two_nodes())
                .await
                .unwrap();
            let mark = env.gce.journal_len();
            let earlier = steps[..k]
                .iter()
                .filter(|s| s.method == step.method && s.path == step.path)
                .count();
            env.gce.inject(
                Fault::on(
                    &step.method,
                    &format!("^{}$", literal(&step.path)),
                    FaultResponse::Http(ApiError::new(400, "invalid", "injected: stopped here")),
                )
                .nth(u32::try_from(earlier + 1).unwrap())
                .times(1000),
            );
            let stopped = provider_for(&env.gce)
                .await
                .ensure(&to.spec(), &two_nodes())
                .await;
            assert!(stopped.is_err(), "{case}: {stopped:?}");
            let made: Vec<String> = env
                .gce
                .mutations_since(mark)
                .iter()
                .take(k)
                .map(JournalEntry::short)
                .collect();
            assert_eq!(
                made,
                shorts(&steps[..k]),
                "{case}: the same changes led up to it"
            );
            env.gce.clear_faults();
            let restarted = provider_for(&env.gce).await;
            restarted
                .ensure(&to.spec(), &two_nodes())
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(footprint(&env.gce), end, "{case}");
            let resync = Env {
                gce: env.gce,
                provider: restarted,
            };
            assert_noop_resync(&resync, &to.spec(), &two_nodes()).await;
            resync.provider.delete(&to.key()).await.unwrap();
            assert_nothing_left(&resync.gce);
        }
    }
}

#[tokio::test]
async fn internal_local_and_cluster_services_share_the_group_and_resync_is_free() {
    // The cluster's instance group holds every eligible node whatever a Service's traffic
    // policy (upstream's `k8s-ig--<cid>`); `Local` only changes the health check. Two internal
    // Services of either policy on the same nodes must agree on its members, so resyncing
    // them in turn changes nothing.
    let env = env().await;
    let local = svc(UID).internal().local(31500);
    let cluster = svc("5c3b7809-feb5-11e6-bdea-42010af00000").internal();
    let nodes = two_nodes();
    env.provider.ensure(&local.spec(), &nodes).await.unwrap();
    env.provider.ensure(&cluster.spec(), &nodes).await.unwrap();
    assert_eq!(
        env.gce.group_members(ZONE_A, "k8s-ig--c1").unwrap(),
        ["gke-c1-node-1"]
    );
    assert_eq!(
        env.gce.group_members(ZONE_B, "k8s-ig--c1").unwrap(),
        ["gke-c1-node-2"]
    );
    for _ in 0..2 {
        assert_noop_resync(&env, &local.spec(), &nodes).await;
        assert_noop_resync(&env, &cluster.spec(), &nodes).await;
    }
    // Each Service's plan agrees: nothing to change.
    for service in [&local, &cluster] {
        let mark = env.gce.journal_len();
        let plan = env
            .provider
            .plan_ensure(&service.spec(), &nodes)
            .await
            .unwrap();
        assert!(plan.is_empty(), "{plan:?}");
        assert!(env.gce.mutations_since(mark).is_empty());
    }
}

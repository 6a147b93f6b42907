//! `loadBalancerSourceRanges` on Baidu: a security group of the Service's bound to its BLB,
//! judged by the mock as BCE judges it (`MockBaidu::would_reach`), repaired after a hand edit,
//! deleted with the BLB, planned as ensured.

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use kube_lb_mock_baidu::{ApiError, Fault, JournalEntry, MockBaidu};
use kube_lb_provider_core::{LoadBalancerProvider, ProviderError};
use serde_json::{Value, json};

use crate::support::{Harness, Svc, harness, nodes, operator_client, provider_for, svc};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn restricted() -> Svc {
    svc("web", "uid-web")
        .ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
        .source_ranges(&["143.231.0.0/16"])
}

/// The one BLB of the harness.
fn blb(cloud: &MockBaidu) -> String {
    let blbs = cloud.blbs();
    assert_eq!(blbs.len(), 1, "{blbs:?}");
    blbs[0]["blbId"].as_str().unwrap().to_string()
}

/// The security groups tagged for `uid`.
fn groups_of(cloud: &MockBaidu, uid: &str) -> Vec<Value> {
    cloud
        .security_groups()
        .into_iter()
        .filter(|g| {
            g["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["tagKey"] == "kube-lb/service-uid" && t["tagValue"] == uid)
        })
        .collect()
}

/// The mutating requests since `from`, as `METHOD path?flag`.
fn writes(cloud: &MockBaidu, from: usize) -> Vec<String> {
    cloud
        .mutations_since(from)
        .iter()
        .map(|e: &JournalEntry| {
            let flag = e
                .query
                .split('&')
                .find(|p| !p.starts_with("clientToken"))
                .unwrap_or_default();
            format!("{} {}?{flag}", e.method, e.path)
        })
        .collect()
}

#[tokio::test]
async fn only_clients_inside_the_ranges_reach_the_listeners() {
    let h = harness().await;
    h.provider
        .ensure(&restricted().spec(), &nodes(2))
        .await
        .unwrap();
    let id = blb(&h.cloud);
    let groups = groups_of(&h.cloud, "uid-web");
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0]["name"], "kube-lb-uid-web");
    assert!(
        groups[0]["desc"].as_str().unwrap().contains("default/web"),
        "{groups:?}"
    );
    assert_eq!(
        h.cloud.bound_security_groups(&id),
        [groups[0]["id"].as_str().unwrap()]
    );
    for (protocol, port) in [("TCP", 80), ("UDP", 53)] {
        assert!(h.cloud.would_reach(&id, ip("143.231.7.9"), protocol, port));
        assert!(!h.cloud.would_reach(&id, ip("198.51.100.7"), protocol, port));
    }
    let before = h.cloud.journal_len();
    h.provider
        .ensure(&restricted().spec(), &nodes(2))
        .await
        .unwrap();
    assert_eq!(writes(&h.cloud, before), Vec::<String>::new());
}

#[tokio::test]
async fn a_rule_opened_or_removed_by_hand_and_a_group_unbound_by_hand_are_put_back() {
    let h = harness().await;
    let service = restricted();
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let id = blb(&h.cloud);
    let group = groups_of(&h.cloud, "uid-web")[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let operator = operator_client(&h.cloud);
    let outsider = ip("198.51.100.7");

    // Opened to every source by hand.
    let open = json!({"direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
                      "portRange": "80", "sourceIp": "0.0.0.0/0"});
    operator.authorize_rule(&group, &open).await.unwrap();
    assert!(h.cloud.would_reach(&id, outsider, "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert!(!h.cloud.would_reach(&id, outsider, "TCP", 80));
    assert!(h.cloud.would_reach(&id, ip("143.231.0.1"), "TCP", 80));

    // Our rule removed by hand: the Service's clients are shut out until the repair.
    let ours = groups_of(&h.cloud, "uid-web")[0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["portRange"] == "80")
        .unwrap()["securityGroupRuleId"]
        .as_str()
        .unwrap()
        .to_string();
    operator.delete_rule(&ours).await.unwrap();
    assert!(!h.cloud.would_reach(&id, ip("143.231.0.1"), "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert!(h.cloud.would_reach(&id, ip("143.231.0.1"), "TCP", 80));

    // Unbound by hand: open to everyone until the next ensure binds it again.
    operator
        .bind_security_groups(&id, std::slice::from_ref(&group), false)
        .await
        .unwrap();
    assert!(h.cloud.would_reach(&id, outsider, "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.bound_security_groups(&id), [group]);
    assert!(!h.cloud.would_reach(&id, outsider, "TCP", 80));
}

#[tokio::test]
async fn ranges_removed_or_all_open_mean_no_group_and_delete_leaves_none() {
    let h = harness().await;
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let id = blb(&h.cloud);
    let open = restricted().source_ranges(&["0.0.0.0/0"]);
    h.provider.ensure(&open.spec(), &nodes(1)).await.unwrap();
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
    assert!(h.cloud.bound_security_groups(&id).is_empty());
    assert!(h.cloud.would_reach(&id, ip("198.51.100.7"), "TCP", 80));
    // Once the group is gone a resync reads no security group at all.
    let before = h.cloud.journal_len();
    h.provider.ensure(&open.spec(), &nodes(1)).await.unwrap();
    let read: Vec<String> = h
        .cloud
        .journal_since(before)
        .iter()
        .map(|e| e.path.clone())
        .collect();
    assert!(
        !read
            .iter()
            .any(|p| p.to_lowercase().contains("securitygroup")),
        "{read:?}"
    );

    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    h.provider.delete(&restricted().key()).await.unwrap();
    assert!(h.cloud.blbs().is_empty());
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
}

#[tokio::test]
async fn a_crash_midway_converges_after_a_restart() {
    let h = harness().await;
    // Dies as it binds: the group exists, the BLB is open.
    h.cloud.inject(Fault::respond(
        "PUT",
        "/securitygroup",
        10,
        ApiError::new(500, "InternalError", "crash"),
    ));
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap_err();
    h.cloud.clear_faults();
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    let restarted = provider_for(&h.cloud, kube_lb_provider_core::CallCounter::new());
    restarted
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let id = blb(&h.cloud);
    assert_eq!(
        groups_of(&h.cloud, "uid-web").len(),
        1,
        "the group is reused"
    );
    assert!(!h.cloud.would_reach(&id, ip("198.51.100.7"), "TCP", 80));
    // Dies after the BLB is deleted: the restart deletes the group left behind.
    h.cloud.inject(Fault::respond(
        "DELETE",
        "/v2/securityGroup/",
        10,
        ApiError::new(500, "InternalError", "crash"),
    ));
    restarted.delete(&restricted().key()).await.unwrap_err();
    h.cloud.clear_faults();
    assert!(h.cloud.blbs().is_empty());
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    provider_for(&h.cloud, kube_lb_provider_core::CallCounter::new())
        .delete(&restricted().key())
        .await
        .unwrap();
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
}

#[tokio::test]
async fn the_plan_lists_exactly_the_security_group_calls_ensure_makes() {
    let h: Harness = harness().await;
    let scenarios: [(Svc, &[&str]); 4] = [
        (
            restricted(),
            &["bcc:CreateSecurityGroup", "blb:BindSecurityGroups"],
        ),
        (restricted(), &[]),
        (
            restricted().source_ranges(&["10.0.0.0/8"]),
            &[
                "bcc:DeleteSecurityGroupRule",
                "bcc:DeleteSecurityGroupRule",
                "bcc:AuthorizeSecurityGroupRule",
                "bcc:AuthorizeSecurityGroupRule",
            ],
        ),
        (
            restricted().source_ranges(&[]),
            &["blb:UnbindSecurityGroups", "bcc:DeleteSecurityGroup"],
        ),
    ];
    for (service, wanted) in scenarios {
        let planned = h
            .provider
            .plan_ensure(&service.spec(), &nodes(1))
            .await
            .unwrap();
        let planned_groups: Vec<&str> = planned
            .iter()
            .map(|c| c.call.as_str())
            .filter(|call| call.contains("SecurityGroup"))
            .collect();
        assert_eq!(planned_groups, wanted, "{planned:?}");
        let before = h.counter.snapshot();
        h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
        let made = h.counter.snapshot().since(&before);
        let made: Vec<String> = made
            .operations(kube_lb_provider_core::CallKind::Mutate)
            .into_keys()
            .map(str::to_string)
            .collect();
        let mut planned_all: Vec<String> = planned.iter().map(|c| c.call.clone()).collect();
        planned_all.sort();
        planned_all.dedup();
        assert_eq!(made, planned_all, "ensure made what the plan listed");
    }
}

#[tokio::test]
async fn source_ranges_on_a_users_blb_are_refused_before_any_change() {
    let h = harness().await;
    let users = h.cloud.seed_blb("users-blb", "the team's own BLB");
    let service = restricted().annotate(
        "service.beta.kubernetes.io/cce-load-balancer-exist-id",
        &users,
    );
    // The parser refuses it first, so lint and the controller do, in the provider's words...
    let words =
        kube_lb_annotations::source_ranges_on_existing(kube_lb_annotations::Cloud::Baidu, &users)
            .unwrap();
    assert!(service.errors().contains(&words), "{}", service.errors());
    // ...and the provider refuses a spec that did not come through the parser, before any
    // change: the ranges put on the parsed spec of the same Service without them.
    let mut spec = restricted()
        .source_ranges(&[])
        .annotate(
            "service.beta.kubernetes.io/cce-load-balancer-exist-id",
            &users,
        )
        .spec();
    spec.source_ranges = restricted().spec().source_ranges;
    let before = h.cloud.journal_len();
    let error = h.provider.ensure(&spec, &nodes(1)).await.unwrap_err();
    assert!(matches!(error, ProviderError::User { .. }), "{error:?}");
    assert!(
        error.to_string().contains("loadBalancerSourceRanges"),
        "{error}"
    );
    let error = h.provider.plan_ensure(&spec, &nodes(1)).await.unwrap_err();
    assert!(
        error.to_string().contains("loadBalancerSourceRanges"),
        "{error}"
    );
    assert!(writes(&h.cloud, before).is_empty());
    assert!(h.cloud.listeners(&users).is_empty());
}

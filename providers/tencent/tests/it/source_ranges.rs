//! `loadBalancerSourceRanges` on Tencent: a security group of the Service's bound to its CLB,
//! judged by the mock as the cloud judges it (`MockTencent::would_reach`), repaired after a
//! hand edit, deleted with the CLB, planned as ensured.

#![allow(clippy::unwrap_used)]

use std::net::IpAddr;

use kube_lb_mock_tencent::{Fault, JournalEntry, MockTencent};
use kube_lb_provider_core::{ChangeAction, LoadBalancerProvider, ProviderError};
use kube_lb_provider_tencent::Action;
use serde_json::{Value, json};

use crate::support::{
    EXISTED_LBID, Harness, clbs_for, harness, nodes, provider_for_same_cloud, seed_users_clb, svc,
};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// The one CLB of `uid`.
fn clb_of(cloud: &MockTencent, uid: &str) -> String {
    let found = clbs_for(cloud, uid);
    assert_eq!(found.len(), 1, "{found:?}");
    found[0]["LoadBalancerId"].as_str().unwrap().to_string()
}

/// The security groups tagged for `uid`.
fn groups_of(cloud: &MockTencent, uid: &str) -> Vec<Value> {
    cloud
        .security_groups()
        .into_iter()
        .filter(|g| {
            g["TagSet"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["Key"] == "tke-lb-serviceuuid" && t["Value"] == uid)
        })
        .collect()
}

fn actions(entries: &[JournalEntry]) -> Vec<String> {
    entries.iter().map(|e| e.action.clone()).collect()
}

/// A call to the mock's API as an operator would make it (the console, tccli): signed with the
/// same account, through the provider's client.
async fn operator(h: &Harness, action: Action, body: Value) {
    h.provider.client().call(action, &body).await.unwrap();
}

fn restricted() -> crate::support::Svc {
    svc("web", "uid-web")
        .ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
        .source_ranges(&["143.231.0.0/16"])
}

#[tokio::test]
async fn only_clients_inside_the_ranges_reach_the_listeners() {
    let h = harness().await;
    let status = h
        .provider
        .ensure(&restricted().spec(), &nodes(2))
        .await
        .unwrap();
    assert!(!status.ingress.is_empty());
    let lb = clb_of(&h.cloud, "uid-web");
    let groups = groups_of(&h.cloud, "uid-web");
    assert_eq!(groups.len(), 1, "{groups:?}");
    let group = &groups[0];
    assert_eq!(group["SecurityGroupName"], "kube-lb-uid-web");
    assert!(
        group["SecurityGroupDesc"]
            .as_str()
            .unwrap()
            .contains("default/web"),
        "{group}"
    );
    assert_eq!(
        h.cloud.bound_security_groups(&lb),
        [group["SecurityGroupId"].as_str().unwrap()]
    );
    for (protocol, port) in [("TCP", 80), ("UDP", 53)] {
        assert!(h.cloud.would_reach(&lb, ip("143.231.7.9"), protocol, port));
        assert!(!h.cloud.would_reach(&lb, ip("198.51.100.7"), protocol, port));
    }
    // The group names the listener ports only: the other protocol's port is closed too.
    assert!(!h.cloud.would_reach(&lb, ip("143.231.7.9"), "TCP", 53));
    // A resync with nothing changed writes nothing.
    let before = h.cloud.journal_len();
    h.provider
        .ensure(&restricted().spec(), &nodes(2))
        .await
        .unwrap();
    assert_eq!(
        actions(&h.cloud.mutations_since(before)),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn a_rule_opened_or_removed_by_hand_and_a_group_unbound_by_hand_are_put_back() {
    let h = harness().await;
    let service = restricted();
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let lb = clb_of(&h.cloud, "uid-web");
    let group = groups_of(&h.cloud, "uid-web")[0]["SecurityGroupId"]
        .as_str()
        .unwrap()
        .to_string();
    let outsider = ip("198.51.100.7");

    // Opened to the world by hand, ahead of our policies.
    let open =
        json!({"Protocol": "ALL", "Port": "ALL", "CidrBlock": "0.0.0.0/0", "Action": "ACCEPT"});
    let mut body = json!({"SecurityGroupId": group, "SecurityGroupPolicySet": {"Ingress": [open]}});
    let ours = groups_of(&h.cloud, "uid-web")[0]["SecurityGroupPolicySet"]["Ingress"].clone();
    body["SecurityGroupPolicySet"]["Ingress"]
        .as_array_mut()
        .unwrap()
        .extend(ours.as_array().unwrap().iter().cloned());
    operator(&h, Action::ModifySecurityGroupPolicies, body).await;
    assert!(h.cloud.would_reach(&lb, outsider, "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert!(!h.cloud.would_reach(&lb, outsider, "TCP", 80));
    assert!(h.cloud.would_reach(&lb, ip("143.231.0.1"), "TCP", 80));

    // Our policies removed by hand: the Service's clients are locked out until the repair.
    operator(
        &h,
        Action::ModifySecurityGroupPolicies,
        json!({"SecurityGroupId": group, "SecurityGroupPolicySet": {"Ingress": [], "Egress": []}}),
    )
    .await;
    assert!(!h.cloud.would_reach(&lb, ip("143.231.0.1"), "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert!(h.cloud.would_reach(&lb, ip("143.231.0.1"), "TCP", 80));

    // Unbound by hand: open to everyone until the next ensure binds it again.
    operator(
        &h,
        Action::SetLoadBalancerSecurityGroups,
        json!({"LoadBalancerId": lb, "SecurityGroups": []}),
    )
    .await;
    assert!(h.cloud.would_reach(&lb, outsider, "TCP", 80));
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert_eq!(h.cloud.bound_security_groups(&lb), [group]);
    assert!(!h.cloud.would_reach(&lb, outsider, "TCP", 80));
}

#[tokio::test]
async fn ranges_removed_or_all_open_mean_no_group_and_delete_leaves_none() {
    let h = harness().await;
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let lb = clb_of(&h.cloud, "uid-web");
    // 0.0.0.0/0 is no restriction: the group goes.
    let open = restricted().source_ranges(&["0.0.0.0/0"]);
    h.provider.ensure(&open.spec(), &nodes(1)).await.unwrap();
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
    assert!(h.cloud.bound_security_groups(&lb).is_empty());
    assert!(h.cloud.would_reach(&lb, ip("198.51.100.7"), "TCP", 80));
    // A Service that never had ranges reads no security group at all.
    let before = h.cloud.journal_len();
    h.provider.ensure(&open.spec(), &nodes(1)).await.unwrap();
    let read = actions(&h.cloud.journal_since(before));
    assert!(
        !read.iter().any(|a| a.contains("SecurityGroup")),
        "{read:?}"
    );

    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    h.provider.delete(&restricted().key()).await.unwrap();
    assert!(clbs_for(&h.cloud, "uid-web").is_empty());
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
}

#[tokio::test]
async fn a_crash_between_the_group_and_its_binding_converges_after_a_restart() {
    let h = harness().await;
    // The process dies as it binds: the group exists with its policies, the CLB open.
    h.cloud.inject(Fault::error(
        "SetLoadBalancerSecurityGroups",
        "InternalError",
        "crash",
        10,
    ));
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap_err();
    h.cloud.clear_faults();
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    let restarted = provider_for_same_cloud(&h);
    restarted
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let lb = clb_of(&h.cloud, "uid-web");
    assert_eq!(
        groups_of(&h.cloud, "uid-web").len(),
        1,
        "the group is reused"
    );
    assert!(!h.cloud.would_reach(&lb, ip("198.51.100.7"), "TCP", 80));
    // Deleting stops after the CLB: the restart deletes the group left behind.
    h.cloud.inject(Fault::error(
        "DeleteSecurityGroup",
        "InternalError",
        "crash",
        10,
    ));
    restarted.delete(&restricted().key()).await.unwrap_err();
    h.cloud.clear_faults();
    assert!(clbs_for(&h.cloud, "uid-web").is_empty());
    assert_eq!(groups_of(&h.cloud, "uid-web").len(), 1);
    provider_for_same_cloud(&h)
        .delete(&restricted().key())
        .await
        .unwrap();
    assert!(groups_of(&h.cloud, "uid-web").is_empty());
}

#[tokio::test]
async fn the_plan_lists_exactly_the_security_group_calls_ensure_makes() {
    let h = harness().await;
    // (the Service, what the plan must list among its changes)
    let scenarios: [(crate::support::Svc, &[&str]); 4] = [
        (
            restricted(),
            &[
                "CreateSecurityGroup",
                "ModifySecurityGroupPolicies",
                "SetLoadBalancerSecurityGroups",
            ],
        ),
        (restricted(), &[]),
        (
            restricted().source_ranges(&["10.0.0.0/8", "2001:db8::/32"]),
            &["ModifySecurityGroupPolicies"],
        ),
        (
            restricted().source_ranges(&[]),
            &["SetLoadBalancerSecurityGroups", "DeleteSecurityGroup"],
        ),
    ];
    for (service, wanted) in scenarios {
        let planned = h
            .provider
            .plan_ensure(&service.spec(), &nodes(1))
            .await
            .unwrap();
        let planned_groups: Vec<String> = planned
            .iter()
            .map(|c| c.call.clone())
            .filter(|op| op.contains("SecurityGroup"))
            .collect();
        assert_eq!(planned_groups, wanted, "{planned:?}");
        let before = h.cloud.journal_len();
        h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
        let made: Vec<String> = actions(&h.cloud.mutations_since(before))
            .into_iter()
            .filter(|a| a.contains("SecurityGroup"))
            .collect();
        assert_eq!(made, planned_groups);
        let planned_all: Vec<String> = planned.iter().map(|c| c.call.clone()).collect();
        let made_all = actions(&h.cloud.mutations_since(before));
        for op in &made_all {
            assert!(
                planned_all.contains(op),
                "{op} made but not planned: {planned_all:?}"
            );
        }
    }
    let planned = h.provider.plan_delete(&restricted().key()).await.unwrap();
    assert!(planned.iter().all(|c| c.action == ChangeAction::Delete));
}

#[tokio::test]
async fn source_ranges_on_a_users_clb_are_refused_before_any_change() {
    let h = harness().await;
    let users = seed_users_clb(&h.cloud);
    let service = restricted().annotate(EXISTED_LBID, &users);
    // The parser refuses it first, so lint and the controller do, in the provider's words...
    let words =
        kube_lb_annotations::source_ranges_on_existing(kube_lb_annotations::Cloud::Tencent, &users)
            .unwrap();
    assert!(service.errors().contains(&words), "{}", service.errors());
    // ...and the provider refuses a spec that did not come through the parser, before any
    // change: the ranges put on the parsed spec of the same Service without them.
    let mut spec = restricted()
        .source_ranges(&[])
        .annotate(EXISTED_LBID, &users)
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
    assert!(h.cloud.mutations_since(before).is_empty());
    assert!(
        h.cloud
            .listeners(&users)
            .iter()
            .all(|l| l["ListenerName"] != "TKE-DEDICATED-LISTENER-uid-web")
    );
}

/// `CreateSecurityGroup` takes no idempotency token. A create whose answer is lost is not
/// repeated blindly: the Service's group is looked for by its tags and deterministic name
/// first, and the one the lost call made is adopted — one group, one create.
#[tokio::test]
async fn a_security_group_create_whose_answer_is_lost_is_adopted_not_repeated() {
    let h = harness().await;
    h.cloud.inject(Fault::lose_answer("CreateSecurityGroup"));
    let before = h.cloud.journal_len();
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let creates = actions(&h.cloud.mutations_since(before))
        .into_iter()
        .filter(|a| a == "CreateSecurityGroup")
        .count();
    assert_eq!(creates, 1, "the lost create is not repeated");
    let groups = groups_of(&h.cloud, "uid-web");
    assert_eq!(groups.len(), 1, "{groups:?}");
    let lb = clb_of(&h.cloud, "uid-web");
    assert_eq!(
        h.cloud.bound_security_groups(&lb),
        [groups[0]["SecurityGroupId"].as_str().unwrap()]
    );
    assert!(!h.cloud.would_reach(&lb, ip("198.51.100.7"), "TCP", 80));
}

/// A group of the Service's deterministic name whose tags are not there (a create cut short
/// before its tags were readable) is the Service's: planned, used and deleted as such, never
/// duplicated. One whose tags name another Service is left alone.
#[tokio::test]
async fn a_group_of_the_services_name_without_its_tags_is_adopted() {
    let h = harness().await;
    let hand = provider_for_same_cloud(&h);
    let untagged = hand
        .client()
        .create_security_group("kube-lb-uid-web", "cut short", &[])
        .await
        .unwrap();
    let plan = h
        .provider
        .plan_ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    assert!(
        !plan.iter().any(|c| c.call == "CreateSecurityGroup"),
        "{plan:#?}"
    );
    let before = h.cloud.journal_len();
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let made = actions(&h.cloud.mutations_since(before));
    assert!(
        !made.contains(&"CreateSecurityGroup".to_string()),
        "{made:?}"
    );
    let lb = clb_of(&h.cloud, "uid-web");
    assert_eq!(
        h.cloud.bound_security_groups(&lb),
        std::slice::from_ref(&untagged)
    );
    h.provider.delete(&restricted().key()).await.unwrap();
    assert!(
        !h.cloud
            .security_groups()
            .iter()
            .any(|g| g["SecurityGroupId"] == untagged.as_str()),
        "deleted with the Service"
    );
    // Another Service's group of that name (its tags say whose) is not ours.
    let foreign = hand
        .client()
        .create_security_group(
            "kube-lb-uid-web",
            "someone else's",
            &[("tke-lb-serviceuuid", "uid-other")],
        )
        .await
        .unwrap();
    h.provider
        .ensure(&restricted().spec(), &nodes(1))
        .await
        .unwrap();
    let lb = clb_of(&h.cloud, "uid-web");
    assert_ne!(h.cloud.bound_security_groups(&lb), [foreign]);
}

//! The provider against the mock CLB endpoint: create, no-op resync, node changes, ports,
//! internal CLBs, charge/bandwidth, extensiveParameters / listenerParameters, backends-label,
//! tke-existed-lbid reuse rules, the task model (busy CLBs, throttling, failed tasks) and
//! leak-free, resumable delete.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_mock_tencent::{Fault, MockTencent, SUBNET_ID, SUBNET_ID_2};
use kube_lb_provider_core::{CallKind, LoadBalancerProvider, ProviderError};
use support::*;

const UID: &str = "6f1c2a34-0b1d-4e6f-9a8b-7c6d5e4f3a21";

#[tokio::test]
async fn creates_a_public_clb_with_ownership_tags_listener_and_targets() {
    let h = harness().await;
    let service = svc("web", UID);
    let status = h.provider.ensure(&service.spec(), &nodes(3)).await.unwrap();
    let clbs = clbs_for(&h.cloud, UID);
    assert_eq!(clbs.len(), 1);
    let clb = &clbs[0];
    assert_eq!(clb["LoadBalancerType"], "OPEN");
    let tags: Vec<(String, String)> = clb["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["TagKey"].as_str().unwrap().into(),
                t["TagValue"].as_str().unwrap().into(),
            )
        })
        .collect();
    for want in [
        ("tke-createdBy-flag", "yes"),
        ("tke-clusterId", CLUSTER),
        ("tke-lb-serviceuuid", UID),
    ] {
        assert!(
            tags.contains(&(want.0.into(), want.1.into())),
            "{want:?} in {tags:?}"
        );
    }
    let vip = clb["LoadBalancerVips"][0].as_str().unwrap();
    assert_eq!(status.ingress.len(), 1);
    assert_eq!(
        status.ingress[0].ip.unwrap().to_string(),
        vip,
        "status from LoadBalancerVips"
    );
    let id = clb["LoadBalancerId"].as_str().unwrap();
    assert_eq!(
        bindings(&h.cloud, id)["TCP:80"],
        vec!["10.0.0.101:30080", "10.0.0.102:30080", "10.0.0.103:30080"]
    );
    let listener = &h.cloud.listeners(id)[0];
    assert_eq!(
        listener["ListenerName"],
        format!("TKE-DEDICATED-LISTENER-{UID}")
    );
    // Every async action was waited for.
    let journal = h.cloud.journal();
    let tasks = journal
        .iter()
        .filter(|e| e.action == "DescribeTaskStatus")
        .count();
    assert!(
        tasks >= 2,
        "CreateLoadBalancer and CreateListener waited: {tasks}"
    );
}

#[tokio::test]
async fn a_resync_without_changes_makes_no_mutating_call() {
    let h = harness().await;
    let service = svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)]);
    h.provider.ensure(&service.spec(), &nodes(2)).await.unwrap();
    h.cloud.clear_journal();
    let before = h.counter.snapshot();
    h.provider.ensure(&service.spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    let calls = h.counter.snapshot().since(&before);
    assert_eq!(calls.kind(CallKind::Mutate), 0);
    assert!(
        calls.reads() <= 3,
        "describe CLB, listeners, targets: {calls:?}"
    );
    let plan = h
        .provider
        .plan_ensure(&service.spec(), &nodes(2))
        .await
        .unwrap();
    assert!(plan.is_empty(), "{plan:?}");
}

#[tokio::test]
async fn node_changes_bind_and_unbind_in_one_batch_call_each() {
    let h = harness().await;
    let service =
        svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    h.provider.ensure(&service.spec(), &nodes(2)).await.unwrap();
    h.cloud.clear_journal();
    let mut changed = nodes(3);
    changed.remove(0);
    h.provider.ensure(&service.spec(), &changed).await.unwrap();
    assert_eq!(
        mutations(&h.cloud),
        vec!["BatchDeregisterTargets", "BatchRegisterTargets"]
    );
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    let bound = bindings(&h.cloud, &id);
    assert_eq!(
        bound["TCP:80"],
        vec!["10.0.0.102:30080", "10.0.0.103:30080"]
    );
    assert_eq!(
        bound["TCP:443"],
        vec!["10.0.0.102:30443", "10.0.0.103:30443"]
    );
}

#[tokio::test]
async fn hundreds_of_nodes_are_bound_in_batches_of_at_most_500() {
    let h = harness().await;
    let service = svc("web", UID).ports(&[("a", 80, "TCP", 30080), ("b", 81, "TCP", 30081)]);
    let many: Vec<_> = (0..300)
        .map(|i| {
            node(
                &format!("n{i}"),
                &format!("10.1.{}.{}", i / 250, i % 250 + 1),
            )
        })
        .collect();
    h.provider.ensure(&service.spec(), &many).await.unwrap();
    let batches: Vec<usize> = h
        .cloud
        .journal()
        .iter()
        .filter(|e| e.action == "BatchRegisterTargets")
        .map(|e| e.body["Targets"].as_array().unwrap().len())
        .collect();
    assert_eq!(batches, vec![500, 100]);
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(bindings(&h.cloud, &id)["TCP:81"].len(), 300);
}

#[tokio::test]
async fn port_changes_replace_only_the_changed_listeners() {
    let h = harness().await;
    let v1 = svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("old", 8080, "TCP", 30081)]);
    h.provider.ensure(&v1.spec(), &nodes(1)).await.unwrap();
    h.cloud.clear_journal();
    let v2 = svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("new", 9090, "UDP", 30090)]);
    h.provider.ensure(&v2.spec(), &nodes(1)).await.unwrap();
    assert_eq!(
        mutations(&h.cloud),
        vec![
            "DeleteLoadBalancerListeners",
            "CreateListener",
            "BatchRegisterTargets"
        ]
    );
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    let bound = bindings(&h.cloud, &id);
    assert_eq!(
        bound.keys().cloned().collect::<Vec<_>>(),
        vec!["TCP:80", "UDP:9090"]
    );
}

#[tokio::test]
async fn internal_subnet_charge_type_and_bandwidth_reach_create_load_balancer() {
    let h = harness().await;
    let internal = svc("internal", "uid-internal").annotate(
        "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid",
        SUBNET_ID,
    );
    let status = h
        .provider
        .ensure(&internal.spec(), &nodes(1))
        .await
        .unwrap();
    let clb = &clbs_for(&h.cloud, "uid-internal")[0];
    assert_eq!(clb["LoadBalancerType"], "INTERNAL");
    assert_eq!(clb["SubnetId"], SUBNET_ID);
    assert!(
        status.ingress[0]
            .ip
            .unwrap()
            .to_string()
            .starts_with("10.0.1.")
    );

    let public = svc("public", "uid-public")
        .annotate(
            "service.kubernetes.io/qcloud-loadbalancer-internet-charge-type",
            "TRAFFIC_POSTPAID_BY_HOUR",
        )
        .annotate(
            "service.kubernetes.io/qcloud-loadbalancer-internet-max-bandwidth-out",
            "2000",
        );
    h.provider.ensure(&public.spec(), &nodes(1)).await.unwrap();
    let clb = &clbs_for(&h.cloud, "uid-public")[0];
    assert_eq!(
        clb["NetworkAttributes"]["InternetChargeType"],
        "TRAFFIC_POSTPAID_BY_HOUR"
    );
    assert_eq!(clb["NetworkAttributes"]["InternetMaxBandwidthOut"], 2000);
}

/// The internal-subnet annotation changed on a Service that has its CLB: TKE refuses to
/// switch a CLB between public and internal, or to another subnet, and so does kube-lb —
/// before any write, in `ensure` and in `plan_ensure` alike, naming the annotation, both kinds
/// and what to do. `ensure`'s refusal carries the CLB's addresses as a successful ensure
/// reports them (the CLB keeps serving, so the Service keeps showing them); the plan's is a
/// plain user error. Setting the annotation back converges with no write.
#[tokio::test]
async fn switching_public_and_internal_is_refused_never_performed_and_plan_shows_it() {
    const SUBNET_KEY: &str = "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid";
    let h = harness().await;
    let public = svc("web", UID);
    let internal = svc("web", UID).annotate(SUBNET_KEY, SUBNET_ID);
    let moved = svc("web", UID).annotate(SUBNET_KEY, SUBNET_ID_2);
    // (created as, then asked for, the refusal names these, the CLB recreated then is)
    let cases = [
        (
            &public,
            &internal,
            ["is OPEN (public)", "asks for INTERNAL in subnet-kubelb01"],
            ("INTERNAL", SUBNET_ID),
        ),
        (
            &internal,
            &public,
            ["is INTERNAL in subnet-kubelb01", "asks for OPEN (public)"],
            ("OPEN", ""),
        ),
        (
            &internal,
            &moved,
            [
                "is INTERNAL in subnet-kubelb01",
                "asks for INTERNAL in subnet-kubelb02",
            ],
            ("INTERNAL", SUBNET_ID_2),
        ),
    ];
    for (created, asked, named, (kind, subnet)) in cases {
        let serving = h.provider.ensure(&created.spec(), &nodes(1)).await.unwrap();
        assert!(!serving.ingress.is_empty(), "the CLB has an address");
        let before = clbs_for(&h.cloud, UID);
        h.cloud.clear_journal();
        let refused = h
            .provider
            .ensure(&asked.spec(), &nodes(2))
            .await
            .unwrap_err();
        let planned = h
            .provider
            .plan_ensure(&asked.spec(), &nodes(2))
            .await
            .unwrap_err();
        match &refused {
            ProviderError::Refused { current, .. } => assert_eq!(
                current.ingress, serving.ingress,
                "the refusal shows the CLB's addresses"
            ),
            other => panic!("a refusal carrying the CLB wanted, got {other:?}"),
        }
        assert_eq!(refused.class(), "user");
        assert!(matches!(planned, ProviderError::User { .. }), "{planned:?}");
        for error in [&refused, &planned] {
            let text = error.to_string();
            for part in named
                .iter()
                .chain(&[SUBNET_KEY, "delete and recreate the Service"])
            {
                assert!(text.contains(part), "{part:?} in {text}");
            }
        }
        // A refused Service makes no write at all: the CLB is not switched, and the second
        // node that came in meanwhile is not registered (nor is any listener touched).
        assert_eq!(
            mutations(&h.cloud),
            Vec::<String>::new(),
            "refused before any step"
        );
        assert_eq!(clbs_for(&h.cloud, UID), before, "the CLB is as it was");
        h.cloud.clear_journal();
        let again = h
            .provider
            .ensure(&asked.spec(), &nodes(2))
            .await
            .unwrap_err();
        assert_eq!(again.current_status(), refused.current_status());
        assert_eq!(
            mutations(&h.cloud),
            Vec::<String>::new(),
            "refused again, nothing to write"
        );
        // Back to what the CLB is: converged as it was left, no error and nothing to write.
        h.cloud.clear_journal();
        h.provider.ensure(&created.spec(), &nodes(1)).await.unwrap();
        assert_eq!(mutations(&h.cloud), Vec::<String>::new());
        // Deleting the Service (the way out) lets the next ensure create the wanted kind.
        h.provider.delete(&created.key()).await.unwrap();
        h.provider.ensure(&asked.spec(), &nodes(1)).await.unwrap();
        let now = clbs_for(&h.cloud, UID);
        assert_eq!(now.len(), 1);
        assert_ne!(now[0]["LoadBalancerId"], before[0]["LoadBalancerId"]);
        assert_eq!(
            (
                now[0]["LoadBalancerType"].as_str(),
                now[0]["SubnetId"].as_str()
            ),
            (Some(kind), Some(subnet))
        );
        h.provider.delete(&asked.key()).await.unwrap();
    }
}

#[tokio::test]
async fn extensive_and_listener_parameters_merge_over_the_typed_requests() {
    let h = harness().await;
    let service = svc("web", UID)
        .annotate(
            "service.kubernetes.io/service.extensiveParameters",
            r#"{"VipIsp":"CTCC","InternetAccessible":{"InternetMaxBandwidthOut":20},"Tags":[{"TagKey":"team","TagValue":"edge"}]}"#,
        )
        .annotate(
            "service.kubernetes.io/qcloud-loadbalancer-internet-charge-type",
            "BANDWIDTH_POSTPAID_BY_HOUR",
        )
        .annotate(
            "service.kubernetes.io/service.listenerParameters",
            r#"{"Scheduler":"LEAST_CONN","HealthCheck":{"HealthSwitch":1,"IntervalTime":5}}"#,
        );
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let clb = &clbs_for(&h.cloud, UID)[0];
    assert_eq!(clb["VipIsp"], "CTCC");
    // Deep merge: the annotation's charge type stays, the bandwidth comes from the JSON.
    assert_eq!(
        clb["NetworkAttributes"]["InternetChargeType"],
        "BANDWIDTH_POSTPAID_BY_HOUR"
    );
    assert_eq!(clb["NetworkAttributes"]["InternetMaxBandwidthOut"], 20);
    let tag_keys: Vec<&str> = clb["Tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["TagKey"].as_str().unwrap())
        .collect();
    assert_eq!(
        tag_keys,
        vec![
            "tke-createdBy-flag",
            "tke-clusterId",
            "tke-lb-serviceuuid",
            "team"
        ]
    );
    let listener = &h.cloud.listeners(clb["LoadBalancerId"].as_str().unwrap())[0];
    assert_eq!(listener["Scheduler"], "LEAST_CONN");
    assert_eq!(listener["HealthCheck"]["IntervalTime"], 5);
}

#[tokio::test]
async fn bad_annotation_values_are_refused_before_any_cloud_call() {
    let cases = [
        (
            "service.kubernetes.io/service.extensiveParameters",
            r#"{"Tags":[{"TagKey":"tke-createdBy-flag","TagValue":"no"}]}"#,
            "tke-createdBy-flag",
        ),
        (
            "service.kubernetes.io/service.extensiveParameters",
            r#"{"Number":3}"#,
            "Number",
        ),
        (
            "service.kubernetes.io/service.extensiveParameters",
            r#"["VipIsp"]"#,
            "JSON object",
        ),
        (
            "service.kubernetes.io/service.listenerParameters",
            r#"{"Ports":[1]}"#,
            "Ports",
        ),
        (
            "service.kubernetes.io/qcloud-loadbalancer-internet-max-bandwidth-out",
            "4096",
            "2000",
        ),
        (
            "service.kubernetes.io/qcloud-loadbalancer-internet-charge-type",
            "MONTHLY",
            "TRAFFIC_POSTPAID_BY_HOUR",
        ),
        ("service.kubernetes.io/tke-existed-lbid", "clb-1", "lb-"),
    ];
    for (key, value, allowed) in cases {
        let errors = svc("web", UID).annotate(key, value).errors();
        assert!(
            errors.contains(key) && errors.contains(allowed),
            "{key}={value}: {errors}"
        );
    }
}

#[tokio::test]
async fn backends_label_selects_nodes_and_an_empty_match_is_a_warning() {
    let h = harness().await;
    let service = svc("web", UID).annotate(
        "service.kubernetes.io/qcloud-loadbalancer-backends-label",
        "group in (access-layer)",
    );
    let spec = service.spec();
    let mut all = nodes(3);
    all[1].labels.insert("group".into(), "access-layer".into());
    let accepted: Vec<_> = all
        .iter()
        .filter(|n| h.provider.accepts_node(&spec, n))
        .cloned()
        .collect();
    assert_eq!(accepted.len(), 1);
    h.provider.ensure(&spec, &accepted).await.unwrap();
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(bindings(&h.cloud, &id)["TCP:80"], vec!["10.0.0.102:30080"]);
    // The label goes away: nothing matches, targets are emptied, and the result says so.
    let error = h.provider.ensure(&spec, &[]).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Environment { .. })
            && error.to_string().contains("backends-label"),
        "{error}"
    );
    assert_eq!(bindings(&h.cloud, &id)["TCP:80"], Vec::<String>::new());
}

#[tokio::test]
async fn an_existing_clb_is_reused_with_only_our_listeners_touched_and_never_deleted() {
    let h = harness().await;
    let user = seed_users_clb(&h.cloud);
    let tke = h
        .cloud
        .seed_load_balancer("tke-clb", &[("tke-createdBy-flag", "yes")], &[]);
    // Start on an auto-created CLB, then switch to the user's one.
    let service = svc("web", UID);
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert_eq!(clbs_for(&h.cloud, UID).len(), 1);
    let existing = service.clone().annotate(EXISTED_LBID, &user);
    let status = h
        .provider
        .ensure(&existing.spec(), &nodes(2))
        .await
        .unwrap();
    assert_eq!(
        clbs_for(&h.cloud, UID).len(),
        0,
        "the auto-created CLB is released"
    );
    let bound = bindings(&h.cloud, &user);
    assert_eq!(
        bound["TCP:80"],
        vec!["10.0.0.101:30080", "10.0.0.102:30080"]
    );
    assert_eq!(
        bound["TCP:8443"],
        Vec::<String>::new(),
        "the user's listener is untouched"
    );
    assert_eq!(status.ingress.len(), 1);
    // A port held by the user's own listener is refused, not taken over.
    let clash = service
        .clone()
        .annotate(EXISTED_LBID, &user)
        .ports(&[("https", 8443, "TCP", 30443)]);
    let error = refused(&h, &clash).await;
    assert!(error.to_string().contains("8443"), "{error}");
    // A CLB created by TKE for something else is refused.
    let foreign = service.clone().annotate(EXISTED_LBID, &tke);
    let error = refused(&h, &foreign).await;
    assert!(matches!(error, ProviderError::User { .. }), "{error}");
    // Deleting the Service removes only its listeners; the CLB and the user's listener stay.
    h.provider.delete(&service.key()).await.unwrap();
    let left = bindings(&h.cloud, &user);
    assert_eq!(left.keys().cloned().collect::<Vec<_>>(), vec!["TCP:8443"]);
    assert!(
        h.cloud
            .load_balancers()
            .iter()
            .any(|lb| lb["LoadBalancerId"] == user.as_str())
    );
}

#[tokio::test]
async fn busy_clbs_and_throttling_are_waited_out() {
    let h = harness_with_task_delay(Duration::from_millis(60)).await;
    h.cloud.inject(Fault::error(
        "DescribeLoadBalancers",
        "RequestLimitExceeded",
        "too many",
        1,
    ));
    let service = svc("web", UID);
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(h.counter.throttled().values().sum::<u64>(), 1);
    // Someone else works on the CLB: our write is refused as busy, then retried.
    h.cloud.occupy(&id, Duration::from_millis(100));
    h.provider.ensure(&service.spec(), &nodes(2)).await.unwrap();
    let refused = h
        .cloud
        .journal()
        .iter()
        .filter(|e| e.error.as_deref() == Some("FailedOperation.ResourceInOperating"))
        .count();
    assert!(refused >= 1, "the busy answer was seen and retried");
    assert_eq!(bindings(&h.cloud, &id)["TCP:80"].len(), 2);
}

#[tokio::test]
async fn a_failed_task_is_an_error_and_the_next_pass_converges() {
    let h = harness().await;
    h.cloud.inject(Fault::fail_task(
        "CreateListener",
        "listener backend unavailable",
    ));
    let service = svc("web", UID);
    let error = refused(&h, &service).await;
    assert!(
        error.to_string().contains("listener backend unavailable"),
        "{error}"
    );
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    assert_eq!(
        clbs_for(&h.cloud, UID).len(),
        1,
        "the CLB was reused, not duplicated"
    );
}

#[tokio::test]
async fn a_create_whose_answer_is_lost_is_retried_into_the_same_clb() {
    // The CLB is made, but the gateway's 503 comes back: the client repeats the call in place.
    let h = harness_with_task_delay(Duration::from_millis(30)).await;
    h.cloud.inject(Fault::lose_answer("CreateLoadBalancer"));
    let service = svc("web", UID);
    let status = h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let creates: Vec<_> = h
        .cloud
        .journal()
        .into_iter()
        .filter(|e| e.action == "CreateLoadBalancer")
        .collect();
    assert_eq!(creates.len(), 2, "the lost answer was retried");
    assert_eq!(
        creates[0].body["ClientToken"], creates[1].body["ClientToken"],
        "the repeat is the same request"
    );
    let clbs = clbs_for(&h.cloud, UID);
    assert_eq!(clbs.len(), 1, "one CLB, not two: {clbs:?}");
    assert_eq!(
        status.ingress[0].ip.unwrap().to_string(),
        clbs[0]["LoadBalancerVips"][0].as_str().unwrap()
    );
    // A later creation for the same Service (its CLB deleted) is a new request.
    h.provider.delete(&service.key()).await.unwrap();
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let tokens: std::collections::BTreeSet<String> = h
        .cloud
        .journal()
        .into_iter()
        .filter(|e| e.action == "CreateLoadBalancer")
        .map(|e| e.body["ClientToken"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tokens.len(), 2, "{tokens:?}");
    assert_eq!(clbs_for(&h.cloud, UID).len(), 1);
}

#[tokio::test]
async fn a_create_whose_answer_is_lost_is_adopted_after_a_restart() {
    let h = harness().await;
    // The answer is lost and every in-place retry is refused: the pass fails with the CLB made.
    h.cloud.inject(Fault::lose_answer("CreateLoadBalancer"));
    h.cloud.inject(Fault::error(
        "CreateLoadBalancer",
        "RequestLimitExceeded",
        "too many",
        10,
    ));
    let service = svc("web", UID);
    assert!(h.provider.ensure(&service.spec(), &nodes(1)).await.is_err());
    assert_eq!(clbs_for(&h.cloud, UID).len(), 1);
    h.cloud.clear_faults();
    // Another process (a restarted controller) finds it by its tags and finishes it.
    let restarted = provider_for_same_cloud(&h);
    restarted.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let clbs = clbs_for(&h.cloud, UID);
    assert_eq!(clbs.len(), 1, "adopted, not duplicated: {clbs:?}");
    let id = clbs[0]["LoadBalancerId"].as_str().unwrap();
    assert_eq!(bindings(&h.cloud, id)["TCP:80"], vec!["10.0.0.101:30080"]);
}

#[tokio::test]
async fn a_change_whose_answer_is_lost_converges_in_the_same_pass() {
    // (action whose answer is lost, ports and node count before, ports and node count now)
    type Ports = &'static [(&'static str, u16, &'static str, u16)];
    type Shape = (Ports, usize);
    let http: Ports = &[("http", 80, "TCP", 30080)];
    let https: Ports = &[("https", 443, "TCP", 30443)];
    let cases: [(&str, Option<Shape>, Shape); 4] = [
        ("CreateListener", None, (http, 2)),
        ("BatchRegisterTargets", None, (http, 2)),
        ("DeleteLoadBalancerListeners", Some((http, 2)), (https, 2)),
        ("BatchDeregisterTargets", Some((http, 2)), (http, 1)),
    ];
    for (action, before, (ports, node_count)) in cases {
        let h = harness_with_task_delay(Duration::from_millis(30)).await;
        if let Some((ports, node_count)) = before {
            let service = svc("web", UID).ports(ports);
            h.provider
                .ensure(&service.spec(), &nodes(node_count))
                .await
                .unwrap();
        }
        h.cloud.inject(Fault::lose_answer(action));
        let service = svc("web", UID).ports(ports);
        h.provider
            .ensure(&service.spec(), &nodes(node_count))
            .await
            .unwrap_or_else(|error| panic!("{action} answer lost: {error}"));
        assert_eq!(h.cloud.pending_faults(), 0, "{action}: the fault fired");
        let clbs = clbs_for(&h.cloud, UID);
        assert_eq!(clbs.len(), 1, "{action}");
        let id = clbs[0]["LoadBalancerId"].as_str().unwrap();
        let (_, port, protocol, node_port) = ports[0];
        let want: Vec<String> = nodes(node_count)
            .iter()
            .map(|n| format!("{}:{node_port}", n.internal_ip().unwrap()))
            .collect();
        assert_eq!(
            bindings(&h.cloud, id),
            [(format!("{protocol}:{port}"), want)].into(),
            "{action}"
        );
        // Nothing is left to do.
        h.cloud.clear_journal();
        h.provider
            .ensure(&service.spec(), &nodes(node_count))
            .await
            .unwrap();
        assert_eq!(mutations(&h.cloud), Vec::<String>::new(), "{action}");
    }
}

#[tokio::test]
async fn delete_is_leak_free_and_resumable() {
    let h = harness().await;
    let service = svc("web", UID);
    h.provider
        .ensure(&service.spec(), &nodes(25))
        .await
        .unwrap();
    let plan = h.provider.plan_delete(&service.key()).await.unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    let owned = h.provider.owned_resources().await.unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(owned[0].service.uid, UID);
    // The first attempt fails mid-way; the second finishes; a third finds nothing to do.
    h.cloud.inject(Fault::error(
        "DeleteLoadBalancer",
        "InternalError",
        "try again",
        4,
    ));
    assert!(h.provider.delete(&service.key()).await.is_err());
    h.provider.delete(&service.key()).await.unwrap();
    assert!(h.cloud.load_balancers().is_empty());
    h.cloud.clear_journal();
    h.provider.delete(&service.key()).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    assert!(
        h.provider
            .plan_delete(&service.key())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(h.provider.status(&service.key()).await.unwrap().is_none());
}

#[tokio::test]
async fn wrong_credentials_are_a_permission_error_naming_the_cloud_code() {
    let cloud = MockTencent::builder().start().await.unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&cloud_config(&cloud)).unwrap();
    config["secretKey"] = "wrong".into();
    let config =
        kube_lb_provider_tencent::TencentConfig::resolve(Some(&config.to_string()), &|_| None)
            .unwrap();
    let provider = kube_lb_provider_tencent::TencentProvider::new(
        config,
        CLUSTER,
        fast_options(kube_lb_provider_core::CallCounter::new()),
    )
    .unwrap();
    let error = provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("AuthFailure.SignatureFailure"),
        "{error}"
    );
    assert!(
        matches!(error, ProviderError::Environment { .. }),
        "{error}"
    );
}

/// `DescribeListeners` calls, by CLB id, since the journal was last cleared.
fn listeners_read(cloud: &MockTencent) -> Vec<String> {
    cloud
        .journal()
        .iter()
        .filter(|e| e.action == "DescribeListeners")
        .map(|e| e.body["LoadBalancerId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_clb_id_is_written_back_and_leaving_a_users_clb_removes_only_our_listeners() {
    let h = harness().await;
    let user = seed_users_clb(&h.cloud);
    let on_user = svc("web", UID).annotate(EXISTED_LBID, &user);
    let status = h.provider.ensure(&on_user.spec(), &nodes(2)).await.unwrap();
    assert_eq!(
        status.annotations["service.kubernetes.io/loadbalance-id"],
        user
    );
    assert_eq!(h.cloud.listeners(&user).len(), 2);

    // The annotation removed; the written-back id says where the listeners were.
    let back = svc("web", UID).annotate("service.kubernetes.io/loadbalance-id", &user);
    let plan = h
        .provider
        .plan_ensure(&back.spec(), &nodes(2))
        .await
        .unwrap();
    let planned: Vec<String> = plan
        .iter()
        .map(|c| format!("{} {} {}", c.action, c.kind, c.name))
        .collect();
    assert_eq!(
        planned[0],
        format!("delete Listener {user}/TCP:80"),
        "{planned:?}"
    );
    let status = h.provider.ensure(&back.spec(), &nodes(2)).await.unwrap();
    let owned = clbs_for(&h.cloud, UID);
    assert_eq!(owned.len(), 1);
    let new_id = owned[0]["LoadBalancerId"].as_str().unwrap();
    assert_eq!(
        status.annotations["service.kubernetes.io/loadbalance-id"],
        new_id
    );
    let left: Vec<String> = bindings(&h.cloud, &user).into_keys().collect();
    assert_eq!(left, vec!["TCP:8443"], "only the Service's listener went");
    assert!(
        h.cloud
            .load_balancers()
            .iter()
            .any(|lb| lb["LoadBalancerId"] == user.as_str()),
        "the user's CLB is never deleted"
    );
    assert_eq!(
        bindings(&h.cloud, new_id)["TCP:80"],
        vec!["10.0.0.101:30080", "10.0.0.102:30080"]
    );
}

#[tokio::test]
async fn moving_between_users_clbs_cleans_the_one_left() {
    let h = harness().await;
    let first = h
        .cloud
        .seed_load_balancer("a", &[], &[("theirs", "TCP", 22)]);
    let second = h.cloud.seed_load_balancer("b", &[], &[]);
    let on_first = svc("web", UID).annotate(EXISTED_LBID, &first);
    h.provider
        .ensure(&on_first.spec(), &nodes(1))
        .await
        .unwrap();
    let on_second = svc("web", UID)
        .annotate(EXISTED_LBID, &second)
        .annotate("service.kubernetes.io/loadbalance-id", &first);
    h.provider
        .ensure(&on_second.spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(
        bindings(&h.cloud, &first).into_keys().collect::<Vec<_>>(),
        vec!["TCP:22"]
    );
    assert_eq!(
        bindings(&h.cloud, &second).into_keys().collect::<Vec<_>>(),
        vec!["TCP:80"]
    );
    // A resync where the annotation already names the CLB in use changes nothing.
    let settled = svc("web", UID)
        .annotate(EXISTED_LBID, &second)
        .annotate("service.kubernetes.io/loadbalance-id", &second);
    h.cloud.clear_journal();
    h.provider.ensure(&settled.spec(), &nodes(1)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
}

#[tokio::test]
async fn delete_reads_only_the_clbs_the_service_used_and_lists_them_all_when_it_does_not_know() {
    let h = harness().await;
    let user = h
        .cloud
        .seed_load_balancer("users-clb", &[], &[("theirs", "TCP", 22)]);
    let others: Vec<String> = (0..3)
        .map(|i| {
            h.cloud
                .seed_load_balancer(&format!("other-{i}"), &[], &[("x", "TCP", 22)])
        })
        .collect();
    let service = svc("web", UID).annotate(EXISTED_LBID, &user);
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();

    // Another process (a restarted controller, `kube-lb audit --delete`) knows nothing: it
    // looks at every user CLB in the VPC, and still removes exactly our listener.
    let fresh = provider_for_same_cloud(&h);
    h.cloud.clear_journal();
    let plan = fresh.plan_delete(&service.key()).await.unwrap();
    assert_eq!(plan.len(), 1, "{plan:?}");
    let mut read = listeners_read(&h.cloud);
    read.sort();
    let mut every = others.clone();
    every.push(user.clone());
    every.sort();
    assert_eq!(read, every);

    // The process that placed the listeners reads only that CLB.
    h.cloud.clear_journal();
    h.provider.delete(&service.key()).await.unwrap();
    assert_eq!(listeners_read(&h.cloud), vec![user.clone()]);
    assert!(
        h.cloud
            .journal()
            .iter()
            .filter(|e| e.action == "DescribeLoadBalancers")
            .all(|e| e.body["Filters"].to_string().contains("tke-lb-serviceuuid")),
        "no VPC-wide listing"
    );
    assert_eq!(
        bindings(&h.cloud, &user).into_keys().collect::<Vec<_>>(),
        vec!["TCP:22"]
    );
    // Done: a second delete (now unknown to this process too) finds nothing anywhere.
    h.cloud.clear_journal();
    h.provider.delete(&service.key()).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
}

#[tokio::test]
async fn local_traffic_checks_the_health_check_node_port_and_switching_back_restores_tcp() {
    let h = harness().await;
    let service = svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)]);
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let id = clbs_for(&h.cloud, UID)[0]["LoadBalancerId"]
        .as_str()
        .unwrap()
        .to_string();
    let local = service.clone().local(32100);
    h.cloud.clear_journal();
    h.provider.ensure(&local.spec(), &nodes(1)).await.unwrap();
    assert_eq!(mutations(&h.cloud), vec!["ModifyListener"], "TCP only");
    let check = |protocol: &str| -> serde_json::Value {
        h.cloud
            .listeners(&id)
            .into_iter()
            .find(|l| l["Protocol"] == protocol)
            .unwrap()["HealthCheck"]
            .clone()
    };
    let http = check("TCP");
    assert_eq!(
        (
            &http["CheckType"],
            &http["CheckPort"],
            &http["HttpCheckPath"]
        ),
        (&"HTTP".into(), &32100.into(), &"/healthz".into())
    );
    assert!(check("UDP").is_null(), "UDP keeps the CLB's check");
    h.cloud.clear_journal();
    h.provider.ensure(&local.spec(), &nodes(1)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    let tcp = check("TCP");
    assert_eq!(
        (&tcp["CheckType"], &tcp["CheckPort"]),
        (&"TCP".into(), &30080.into())
    );
    // A HealthCheck in listenerParameters is the user's: never modified.
    let custom = local.annotate(
        "service.kubernetes.io/service.listenerParameters",
        r#"{"HealthCheck":{"HealthSwitch":0}}"#,
    );
    h.cloud.clear_journal();
    h.provider.ensure(&custom.spec(), &nodes(1)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
}

//! Failure handling: retryable provider errors back off and then succeed; a controller
//! restarted mid-flight converges without handing an address out twice; with leader election
//! only one of two replicas acts.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use controller_support::*;
use kube::ResourceExt;
use kube_lb::controller::{Outcome, ServiceName};

#[tokio::test]
async fn retryable_failures_back_off_then_succeed() {
    let (_server, client, running) = server_and_controller().await;
    running.provider.fail_next(3);
    let started = Instant::now();
    svc_lb("default", "web").create(&client).await;
    let mut outcomes = running.outcomes.clone();
    let key = ServiceName {
        namespace: "default".into(),
        name: "web".into(),
    };
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| matches!(o.get(&key), Some(Outcome::Retrying(_)))),
    )
    .await
    .expect("the failure is reported")
    .unwrap();
    wait_address(&client, "default", "web").await;
    let elapsed = started.elapsed();

    let calls = running.provider.ensures_of("default/web").len();
    // Three failures, one success, then possibly a no-op re-sync after the status write.
    assert!((4..=5).contains(&calls), "{calls} ensure calls");
    // Backoff 200 ms doubling with equal jitter (each delay in [d/2, d]): at least
    // 100 + 200 + 400 ms between the attempts.
    assert!(
        elapsed >= Duration::from_millis(700),
        "retried too fast: {elapsed:?}"
    );
    assert_failure_reported(&client, "web", "injected throttling").await;
    running.stop().await;
}

/// A provider call that never answers holds neither the Service nor its worker: it is given up
/// after `provider_timeout`, reported, and retried, for an ensure and for a delete.
#[tokio::test]
async fn a_provider_call_that_never_answers_is_abandoned_and_retried() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    config.provider_timeout = Duration::from_millis(500);
    let running = start_controller(&server, config, true);
    running.provider.hang_next_ensures(1);
    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    assert!(
        running.provider.ensures_of("default/web").len() >= 2,
        "the hung ensure was retried: {:?}",
        running.provider.calls()
    );
    assert_failure_reported(&client, "web", "no answer from the provider within 500ms").await;

    running.provider.hang_next_deletes(1);
    let api: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client.clone(), "default");
    api.delete("web", &Default::default()).await.unwrap();
    eventually("the Service is released after a hung delete", || async {
        get_svc(&client, "default", "web")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        running.provider.deletes_of("default/web").len() >= 2,
        "the hung delete was retried: {:?}",
        running.provider.calls()
    );
    running.stop().await;
}

#[tokio::test]
async fn restart_mid_flight_converges_without_duplicate_addresses() {
    let server = server().await;
    let client = server.client().unwrap();
    let first = start_controller(&server, test_config(), true);
    for i in 0..20 {
        svc_lb("default", &format!("svc-{i}")).create(&client).await;
    }
    // Stop while some Services still wait for an address.
    let before: Vec<(String, String)> = eventually("a few addresses", || async {
        let mut with = Vec::new();
        for i in 0..20 {
            let name = format!("svc-{i}");
            if let Some(ip) = get_svc(&client, "default", &name)
                .await
                .and_then(|s| ingress_of(&s).pop())
            {
                with.push((name, ip));
            }
        }
        (with.len() >= 3).then_some(with)
    })
    .await;
    first.stop().await;
    for i in 20..25 {
        svc_lb("default", &format!("svc-{i}")).create(&client).await;
    }

    // A new process: a fresh, empty pool that must re-adopt from the statuses.
    let second = start_controller(&server, test_config(), true);
    let mut addresses = BTreeSet::new();
    for i in 0..25 {
        let ip = wait_address(&client, "default", &format!("svc-{i}")).await;
        assert!(
            addresses.insert(ip.clone()),
            "address {ip} handed out twice"
        );
    }
    for (name, ip) in before {
        assert_eq!(
            wait_address(&client, "default", &name).await,
            ip,
            "{name} kept its address"
        );
    }
    assert_eq!(second.provider.inner.subscribe().borrow().len(), 25);
    second.stop().await;
}

#[tokio::test]
async fn with_leader_election_only_one_replica_acts() {
    let server = server().await;
    let client = server.client().unwrap();
    let (a, elector_a) = start_elected(&server, "replica-a");
    let (b, elector_b) = start_elected(&server, "replica-b");
    for i in 0..5 {
        svc_lb("default", &format!("svc-{i}")).create(&client).await;
    }
    let mut first_addresses = BTreeSet::new();
    for i in 0..5 {
        first_addresses.insert(wait_address(&client, "default", &format!("svc-{i}")).await);
    }
    let (a_calls, b_calls) = (a.provider.calls().len(), b.provider.calls().len());
    assert!(
        (a_calls > 0) ^ (b_calls > 0),
        "exactly one replica acts: a made {a_calls} calls, b made {b_calls}"
    );
    let (leader, leader_elector, follower, follower_elector) = if a_calls > 0 {
        (a, elector_a, b, elector_b)
    } else {
        (b, elector_b, a, elector_a)
    };

    // The leader stops (releasing the lease); the follower takes over, re-adopts the existing
    // addresses and serves new Services.
    leader.stop().await;
    let _ = leader_elector.await;
    svc_lb("default", "late").create(&client).await;
    let late = wait_address(&client, "default", "late").await;
    assert!(
        !first_addresses.contains(&late),
        "{late} was already in use"
    );
    assert!(!follower.provider.ensures_of("default/late").is_empty());
    follower.stop().await;
    let _ = follower_elector.await;
}

/// A Service retyped to ClusterIP while its first ensure is in flight: the status write built
/// from the LoadBalancer version is refused by the API server (a load-balancer status is
/// forbidden on a ClusterIP Service). That is a lost race, not a failure: no reconcile error
/// is counted, no failure is reported, and the load balancer the ensure made is released.
#[tokio::test]
async fn a_retype_racing_the_status_write_is_not_a_failure() {
    let (_server, client, running) = server_and_controller().await;
    let hold = running.provider.hold_next_ensure();
    svc_lb("default", "web").create(&client).await;
    tokio::time::timeout(CEILING, hold.entered.notified())
        .await
        .expect("the first ensure arrives");
    merge_patch_svc(&client, "default", "web", retype_to_cluster_ip()).await;
    hold.release.notify_one();

    // The retype is reconciled: the load balancer goes and the finalizer comes off.
    eventually("the load balancer released", || async {
        let released = !running.provider.deletes_of("default/web").is_empty();
        let finalized = get_svc(&client, "default", "web").await.is_some_and(|s| {
            s.finalizers()
                .iter()
                .any(|f| f == kube_lb::controller::FINALIZER)
        });
        (released && !finalized).then_some(())
    })
    .await;
    let service = get_svc(&client, "default", "web").await.unwrap();
    assert!(ingress_of(&service).is_empty(), "{:?}", service.status);
    let metrics = running.metrics.encode().unwrap();
    assert!(
        !metrics.contains("kube_lb_reconcile_errors_total{"),
        "the lost race was counted as a failure:\n{metrics}"
    );
    let events = events_of(&client, "default", "web").await;
    assert!(
        !events.contains_key("SyncLoadBalancerFailed"),
        "the lost race was reported as a failure: {events:?}"
    );
    running.stop().await;
}

/// A load balancer name held by another owner is a user error, but one a person can clear
/// without touching the Service (deleting the leftover, or `--audit-delete` doing it): the
/// Service is looked at again after the longest backoff (2 s here), unchanged, and gets its
/// address then; an event meanwhile (a new node) does not cancel that recheck.
#[tokio::test]
async fn a_name_held_elsewhere_is_checked_again_without_a_service_change() {
    let (server, client, running) = server_and_controller().await;
    running.provider.owned_elsewhere_next(1);
    let started = Instant::now();
    svc_lb("default", "web").create(&client).await;
    let key = ServiceName {
        namespace: "default".into(),
        name: "web".into(),
    };
    let mut outcomes = running.outcomes.clone();
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| matches!(o.get(&key), Some(Outcome::UserError(_)))),
    )
    .await
    .expect("the refusal is reported")
    .unwrap();
    // A new node re-reconciles the Service, unchanged: the refusal stands and the recheck
    // stays scheduled.
    server.seed(node("n2")).unwrap();
    wait_address(&client, "default", "web").await;
    let elapsed = started.elapsed();
    assert_eq!(running.provider.ensures_of("default/web").len(), 2);
    // Not at once: after the longest backoff (2 s in the test config).
    assert!(
        elapsed >= Duration::from_millis(1800),
        "rechecked after {elapsed:?}"
    );
    assert_failure_reported(&client, "web", "a leftover").await;
    running.stop().await;
}

/// Asserts that a `SyncLoadBalancerFailed` event of `default/<service>` mentions `text`.
async fn assert_failure_reported(client: &kube::Client, service: &str, text: &str) {
    let events = events_of(client, "default", service).await;
    assert!(
        events
            .get("SyncLoadBalancerFailed")
            .is_some_and(|texts| texts.iter().any(|t| t.contains(text))),
        "a SyncLoadBalancerFailed event mentioning {text:?}: {events:?}"
    );
}

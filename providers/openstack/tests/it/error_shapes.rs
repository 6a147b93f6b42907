//! Error answers in the shapes the real services use (Octavia `faultstring`, Neutron
//! `NeutronError`), through the real client against the mock, land in the specific class a
//! user sees: throttles counted and retried, quota and permission as their environment
//! causes, a load balancer already gone on delete as success.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Duration;

use kube_lb_mock_openstack::{Fault, MockOpenStack, Quotas};
use kube_lb_provider_core::{
    CallCounter, EnvironmentCause, LoadBalancerProvider, ProviderError, RetryPolicy,
};
use support::*;

const UID: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";

/// Throttled attempts of `operation` the provider counted.
fn throttled(counter: &CallCounter, operation: &str) -> u64 {
    counter.throttled_count("openstack", operation)
}

/// Requests the mock answered with `status` for `method` on a path containing `path`.
fn answered(cloud: &MockOpenStack, method: &str, path: &str, status: u16) -> usize {
    cloud
        .journal()
        .iter()
        .filter(|e| e.method == method && e.path.contains(path) && e.status == status)
        .count()
}

#[tokio::test]
async fn a_429_is_counted_as_throttled_and_retried_in_place() {
    let h = harness().await;
    h.cloud.inject(Fault::respond(
        "POST",
        "/lbaas/loadbalancers",
        429,
        "Too Many Requests",
        1,
    ));
    h.provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(throttled(&h.counter, "octavia:CreateLoadBalancer"), 1);
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 429), 1);
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 201), 1);
}

#[tokio::test]
async fn a_rate_limit_413_that_outlasts_the_retries_is_a_throttle_not_an_unknown_error() {
    let h = harness().await;
    // A rate limiter in front of Octavia keeps refusing: every attempt is counted, and
    // what reaches the controller says "throttled".
    h.cloud.inject(Fault::respond(
        "GET",
        "/lbaas/loadbalancers",
        413,
        "This request was rate-limited.",
        100,
    ));
    let error = h
        .provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Throttled { .. }),
        "{error:?}"
    );
    let refused = answered(&h.cloud, "GET", "/lbaas/loadbalancers", 413) as u64;
    assert!(refused > 1, "retried in place: {refused}");
    assert_eq!(throttled(&h.counter, "octavia:ListLoadBalancers"), refused);
}

/// A harness with the deployed retry policy (200 ms steps, at most 5 s per wait) whose
/// Octavia refuses the first load-balancer create with 429 and `Retry-After: seconds`; and
/// when that was armed.
async fn refused_once_asking_for(seconds: u64) -> (Harness, std::time::Instant) {
    let h = harness_retrying(RetryPolicy::default()).await;
    h.cloud.inject(
        Fault::respond("POST", "/lbaas/loadbalancers", 429, "Too Many Requests", 1)
            .with_retry_after(seconds),
    );
    (h, std::time::Instant::now())
}

#[tokio::test]
async fn a_rate_refusal_is_retried_after_the_wait_it_asks_for_not_sooner() {
    // A rate limiter in front of Octavia refuses once and asks for 1 s: the retry waits that
    // long, although the policy's own first step is far shorter.
    let (h, started) = refused_once_asking_for(1).await;
    h.provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after {:?}, Retry-After was 1 s",
        started.elapsed()
    );
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 429), 1);
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 201), 1);
}

#[tokio::test]
async fn a_rate_refusal_asking_for_longer_than_an_in_place_retry_goes_back_to_the_controller() {
    // 60 s is past the in-place policy's longest wait (5 s): the worker does not sit it out
    // and does not knock again before the window ends; the controller's backoff takes over.
    let (h, started) = refused_once_asking_for(60).await;
    let error = h
        .provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Throttled { .. }),
        "{error:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 429), 1);
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 201), 0);
}

#[tokio::test]
async fn neutron_over_quota_on_the_floating_ip_is_a_quota_cause() {
    let cloud = MockOpenStack::builder()
        .quotas(Quotas {
            load_balancers: None,
            floating_ips: Some(0),
        })
        .start()
        .await
        .unwrap();
    let h = harness_with(cloud, "").await;
    let error = h
        .provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(
        error.environment_cause(),
        Some(EnvironmentCause::Quota),
        "{error:?}"
    );
    assert_eq!(
        answered(&h.cloud, "POST", "/floatingips", 409),
        1,
        "a quota answer is not retried in place"
    );
}

#[tokio::test]
async fn an_octavia_policy_refusal_is_a_permission_cause_and_not_retried() {
    let h = harness().await;
    h.cloud.inject(Fault::respond(
        "POST",
        "/lbaas/loadbalancers",
        403,
        "Policy does not allow this request to be performed.",
        1,
    ));
    let error = h
        .provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(
        error.environment_cause(),
        Some(EnvironmentCause::PermissionDenied),
        "{error:?}"
    );
    assert_eq!(answered(&h.cloud, "POST", "/lbaas/loadbalancers", 403), 1);
    assert!(h.counter.throttled().is_empty());
}

#[tokio::test]
async fn a_load_balancer_gone_before_our_delete_lands_is_a_successful_delete() {
    let h = harness().await;
    let web = svc("web", UID);
    h.provider.ensure(&web.spec(), &nodes(1)).await.unwrap();
    let lb_id = lb_named(&h.cloud, "kube_service_kubernetes_default_web")["id"]
        .as_str()
        .unwrap()
        .to_string();
    // Our DELETE is held at the door while an operator removes the load balancer, so
    // Octavia answers it with its own 404.
    h.cloud.inject(Fault::delay(
        "DELETE",
        "/lbaas/loadbalancers/",
        Duration::from_secs(2),
        1,
    ));
    let provider = h.provider.clone();
    let key = web.key();
    let delete = tokio::spawn(async move { provider.delete(&key).await });
    while h.counter.snapshot().operation("octavia:DeleteLoadBalancer") == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    h.cloud.set_status(&lb_id, "PENDING_DELETE", Duration::ZERO);
    delete.await.unwrap().unwrap();
    assert_eq!(
        answered(&h.cloud, "DELETE", "/lbaas/loadbalancers/", 404),
        1
    );
    assert!(h.cloud.load_balancers().is_empty());
    assert!(
        h.cloud.floating_ips().is_empty(),
        "the floating IP is released"
    );
}

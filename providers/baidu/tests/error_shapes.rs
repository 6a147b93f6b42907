//! Error answers in the shape the real BCE APIs use (HTTP status with
//! `{"code", "message", "requestId"}`), through the real client against the mock, land in
//! the specific class a user sees: throttles counted and retried, quota and permission as
//! their environment causes, a BLB or EIP already gone on delete as success.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use kube_lb_mock_baidu::{ApiError, Fault, MockBaidu, Quotas};
use kube_lb_provider_core::{CallCounter, EnvironmentCause, LoadBalancerProvider, ProviderError};
use support::*;

const UID: &str = "0c5d3c8e-6a3f-4d2b-9e1f-2a4b6c8d0e1f";

/// Throttled attempts of `operation` the provider counted.
fn throttled(counter: &CallCounter, operation: &str) -> u64 {
    counter.throttled_count("baidu", operation)
}

/// Requests `method` on a path containing `path` that the mock answered with `code`.
fn refused(cloud: &MockBaidu, method: &str, path: &str, code: &str) -> usize {
    cloud
        .journal()
        .iter()
        .filter(|e| e.method == method && e.path.contains(path) && e.code.as_deref() == Some(code))
        .count()
}

fn rate_limited() -> ApiError {
    ApiError::new(
        429,
        "RequestLimitExceeded",
        "The request rate exceeds the limit.",
    )
}

#[tokio::test]
async fn request_limit_exceeded_is_counted_and_retried_in_place() {
    let h = harness().await;
    h.cloud
        .inject(Fault::respond("POST", "/v1/blb", 1, rate_limited()).with_query("clientToken"));
    h.provider.ensure(&web_spec(UID), &nodes(1)).await.unwrap();
    assert_eq!(throttled(&h.counter, "blb:CreateLoadBalancer"), 1);
    assert_eq!(
        refused(&h.cloud, "POST", "/v1/blb", "RequestLimitExceeded"),
        1
    );
    assert_eq!(h.cloud.blbs().len(), 1, "the retry created it once");
}

#[tokio::test]
async fn a_throttle_that_outlasts_the_retries_reaches_the_controller_as_throttled() {
    let h = harness().await;
    h.cloud
        .inject(Fault::respond("GET", "/v1/blb", 100, rate_limited()));
    let error = h
        .provider
        .ensure(&web_spec(UID), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Throttled { .. }),
        "{error:?}"
    );
    let answered = refused(&h.cloud, "GET", "/v1/blb", "RequestLimitExceeded") as u64;
    assert!(answered > 1, "retried in place: {answered}");
    let counted: u64 = h.counter.throttled().values().sum();
    assert_eq!(counted, answered);
}

#[tokio::test]
async fn quota_exceeded_is_a_quota_cause_and_not_retried() {
    let h = harness_on(MockBaidu::builder().quotas(Quotas {
        blbs: 0,
        ..Quotas::default()
    }))
    .await;
    let error = h
        .provider
        .ensure(&web_spec(UID), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(
        error.environment_cause(),
        Some(EnvironmentCause::Quota),
        "{error:?}"
    );
    assert_eq!(refused(&h.cloud, "POST", "/v1/blb", "QuotaExceeded"), 1);
}

#[tokio::test]
async fn access_denied_is_a_permission_cause_and_not_retried() {
    let h = harness().await;
    h.cloud.inject(
        Fault::respond(
            "POST",
            "/v1/blb",
            1,
            ApiError::new(403, "AccessDenied", "Access denied."),
        )
        .with_query("clientToken"),
    );
    let error = h
        .provider
        .ensure(&web_spec(UID), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(
        error.environment_cause(),
        Some(EnvironmentCause::PermissionDenied),
        "{error:?}"
    );
    assert_eq!(refused(&h.cloud, "POST", "/v1/blb", "AccessDenied"), 1);
    assert!(h.counter.throttled().is_empty());
}

#[tokio::test]
async fn a_blb_and_an_eip_already_gone_when_our_deletes_land_are_a_successful_delete() {
    let h = harness().await;
    let web = web_spec(UID);
    h.provider.ensure(&web, &nodes(1)).await.unwrap();
    let not_found =
        |what: &str| ApiError::new(404, "NoSuchObject", format!("{what} does not exist"));
    h.cloud
        .inject(Fault::respond("DELETE", "/v1/blb/", 1, not_found("BLB")));
    h.cloud
        .inject(Fault::respond("DELETE", "/v1/eip/", 1, not_found("EIP")));
    h.provider.delete(&web.service).await.unwrap();
    assert_eq!(refused(&h.cloud, "DELETE", "/v1/blb/", "NoSuchObject"), 1);
    assert_eq!(refused(&h.cloud, "DELETE", "/v1/eip/", "NoSuchObject"), 1);
}

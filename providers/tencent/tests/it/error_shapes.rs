//! Error answers in the shape the real CLB API 3.0 uses (HTTP 200 with
//! `Response.Error{Code, Message}`), through the real client against the mock, land in the
//! specific class a user sees: throttles counted and retried, quota and permission as their
//! environment causes, a CLB already gone on delete as success.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use kube_lb_mock_tencent::{Fault, MockTencent, Quotas};
use kube_lb_provider_core::{CallCounter, EnvironmentCause, LoadBalancerProvider, ProviderError};
use support::*;

const UID: &str = "6f1c2a34-0b1d-4e6f-9a8b-7c6d5e4f3a21";

/// Throttled attempts of `action` the provider counted.
fn throttled(counter: &CallCounter, action: &str) -> u64 {
    counter.throttled_count("tencent", action)
}

/// Requests of `action` the mock answered with error `code`.
fn refused(cloud: &MockTencent, action: &str, code: &str) -> usize {
    cloud
        .journal()
        .iter()
        .filter(|e| e.action == action && e.error.as_deref() == Some(code))
        .count()
}

#[tokio::test]
async fn request_limit_exceeded_is_counted_and_retried_in_place() {
    let h = harness().await;
    h.cloud.inject(Fault::error(
        "CreateLoadBalancer",
        "RequestLimitExceeded",
        "Your request rate exceeds the limit.",
        1,
    ));
    h.provider
        .ensure(&svc("web", UID).spec(), &nodes(1))
        .await
        .unwrap();
    assert_eq!(throttled(&h.counter, "CreateLoadBalancer"), 1);
    assert_eq!(
        h.cloud.load_balancers().len(),
        1,
        "the retry created it once"
    );
}

#[tokio::test]
async fn a_throttle_that_outlasts_the_retries_reaches_the_controller_as_throttled() {
    let h = harness().await;
    h.cloud.inject(Fault::error(
        "DescribeLoadBalancers",
        "RequestLimitExceeded.UinLimitExceeded",
        "The account's request rate exceeds the limit.",
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
    let answered = refused(
        &h.cloud,
        "DescribeLoadBalancers",
        "RequestLimitExceeded.UinLimitExceeded",
    ) as u64;
    assert!(answered > 1, "retried in place: {answered}");
    assert_eq!(throttled(&h.counter, "DescribeLoadBalancers"), answered);
}

#[tokio::test]
async fn limit_exceeded_on_create_is_a_quota_cause_and_not_retried() {
    let cloud = MockTencent::builder()
        .quotas(Quotas {
            public_load_balancers: 0,
            ..Quotas::default()
        })
        .start()
        .await
        .unwrap();
    let h = provider_for(cloud);
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
    assert_eq!(refused(&h.cloud, "CreateLoadBalancer", "LimitExceeded"), 1);
}

#[tokio::test]
async fn unauthorized_operation_is_a_permission_cause_and_not_retried() {
    let h = harness().await;
    h.cloud.inject(Fault::error(
        "CreateLoadBalancer",
        "UnauthorizedOperation",
        "The CAM policy does not allow clb:CreateLoadBalancer.",
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
    assert!(
        error.to_string().contains("UnauthorizedOperation"),
        "{error}"
    );
    assert_eq!(
        refused(&h.cloud, "CreateLoadBalancer", "UnauthorizedOperation"),
        1
    );
    assert!(h.counter.throttled().is_empty());
}

#[tokio::test]
async fn a_clb_already_gone_when_our_delete_lands_is_a_successful_delete() {
    let h = harness().await;
    let service = svc("web", UID);
    h.provider.ensure(&service.spec(), &nodes(1)).await.unwrap();
    // The CLB vanished between our read and our delete: the API says so in its own code.
    h.cloud.inject(Fault::error(
        "DeleteLoadBalancer",
        "InvalidParameter.LBIdNotFound",
        "The LoadBalancerId does not exist.",
        1,
    ));
    h.provider.delete(&service.key()).await.unwrap();
    assert_eq!(
        refused(
            &h.cloud,
            "DeleteLoadBalancer",
            "InvalidParameter.LBIdNotFound"
        ),
        1
    );
}

//! Error classes through the real client path: the mock ARM answers in ARM's error shape
//! (`{"error":{"code","message"}}` with ARM's status, `Retry-After` on throttling, failed
//! async operations), azure_core reads it, the shared call path retries and counts, and the
//! provider turns the code into the class the controller acts on. Every test asserts the
//! specific class, cause or counter: an ARM code lost on the way falls back to the HTTP status
//! and would still "be an error".

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use kube_lb_mock_azure::{ArmError, Fault, FaultAction, MockArm, Quotas};
use kube_lb_provider_core::{EnvironmentCause, LoadBalancerProvider, ProviderError};
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";

fn status(code: u16) -> axum::http::StatusCode {
    axum::http::StatusCode::from_u16(code).unwrap()
}

/// The environment cause of an error, if it is an environment error.
fn cause(error: &ProviderError) -> Option<EnvironmentCause> {
    match error {
        ProviderError::Environment { cause, .. } => Some(*cause),
        _ => None,
    }
}

/// How many answers to `method` requests on paths containing `path` had `status`.
fn answered(arm: &MockArm, method: &str, path: &str, status: u16) -> usize {
    arm.journal()
        .iter()
        .filter(|e| e.method == method && e.path.contains(path) && e.status == status)
        .count()
}

/// ARM throttles every attempt of a write (`429 TooManyRequests` with `Retry-After: 0`): the
/// call uses up its retry budget, every 429 is counted as throttled, and the Service's error is
/// `Throttled` (condition `CloudThrottled`), not a generic retryable or internal one.
#[tokio::test]
async fn throttling_past_the_retry_budget_is_reported_as_throttled() {
    let h = harness().await;
    h.arm
        .inject(Fault::throttle("PUT", "/publicIPAddresses/", 0, 20));
    let error = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Throttled { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("429"), "{error}");
    let throttled_answers = answered(&h.arm, "PUT", "/publicIPAddresses/", 429);
    assert_eq!(
        throttled_answers,
        fast_options().retry.max_attempts as usize,
        "retried in place up to the budget"
    );
    let counted: u64 = h.provider.calls().throttled().values().sum();
    assert_eq!(counted, throttled_answers as u64, "every 429 counted");

    // Once ARM lets requests through, the next pass converges.
    h.arm.clear_faults();
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
}

/// Quotas, synchronous and from a failed async operation: the mock enforces the public IP
/// count (`400 PublicIPCountLimitReached`), and an LB write whose operation ends `Failed` with
/// `QuotaExceeded`. Both are environment quota errors that name ARM's code, and neither is
/// retried in place.
#[tokio::test]
async fn quota_refusals_are_environment_quota_errors() {
    let arm = MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .security_group(RG, NSG)
        .quotas(Quotas {
            public_ips: 1,
            ..Quotas::default()
        })
        .start()
        .await
        .unwrap();
    let provider = provider_for(&arm, fast_options());
    provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    let error = provider
        .ensure(&svc("api", UID_B).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(cause(&error), Some(EnvironmentCause::Quota), "{error:?}");
    assert!(
        error.to_string().contains("PublicIPCountLimitReached"),
        "{error}"
    );
    assert_eq!(
        answered(&arm, "PUT", "/publicIPAddresses/", 400),
        1,
        "a quota is not retried in place"
    );

    // The same verdict when ARM accepts the write and its async operation fails.
    let h = harness().await;
    h.arm.inject(Fault {
        method: Some("LRO-PUT".into()),
        path_contains: "/loadBalancers/".into(),
        skip: 0,
        times: 1,
        action: FaultAction::FailOperation(ArmError::new(
            status(409),
            "QuotaExceeded",
            "Operation results in exceeding quota limits of Core.",
        )),
    });
    let error = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(cause(&error), Some(EnvironmentCause::Quota), "{error:?}");
    assert!(error.to_string().contains("QuotaExceeded"), "{error}");
}

/// The controller's identity may not read or write (`403 AuthorizationFailed`): a permission
/// problem for the operator, on reads and on writes, not retried in place.
#[tokio::test]
async fn permission_refusals_are_environment_permission_errors() {
    let forbidden = || {
        ArmError::new(
            status(403),
            "AuthorizationFailed",
            "The client 'x' with object id 'y' does not have authorization to perform action \
             'Microsoft.Network/loadBalancers/write'",
        )
    };
    for (what, method) in [("read", "GET"), ("write", "PUT")] {
        let h = harness().await;
        h.arm
            .inject(Fault::error(method, "/loadBalancers/", forbidden(), 1));
        let error = h
            .provider
            .ensure(&svc("web", UID_A).spec(), &nodes(1))
            .await
            .unwrap_err();
        assert_eq!(
            cause(&error),
            Some(EnvironmentCause::PermissionDenied),
            "{what}: {error:?}"
        );
        assert!(error.to_string().contains("AuthorizationFailed"), "{what}");
        assert_eq!(
            answered(&h.arm, method, "/loadBalancers/", 403),
            1,
            "{what}: not retried in place"
        );
    }
}

/// A write into a resource group that is gone: ARM answers the PUT `404 ResourceGroupNotFound`.
/// That is a missing dependency, and the operator reads ARM's code and words, not a claim that
/// the resource vanished after it was written.
#[tokio::test]
async fn a_put_answered_not_found_keeps_arms_code() {
    let h = harness().await;
    h.arm.inject(Fault::error(
        "PUT",
        "/publicIPAddresses/",
        ArmError::new(
            status(404),
            "ResourceGroupNotFound",
            format!("Resource group '{RG}' could not be found."),
        ),
        1,
    ));
    let error = h
        .provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap_err();
    assert_eq!(
        cause(&error),
        Some(EnvironmentCause::MissingDependency),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("ResourceGroupNotFound") && text.contains("could not be found"),
        "{text}"
    );
}

/// Deletes that find the resource already gone: another client's delete wins the race (the
/// mock carries ours out, then answers `404 ResourceNotFound`, as ARM does for a resource that
/// no longer exists). The Service's delete succeeds, and nothing it owned is left.
#[tokio::test]
async fn not_found_while_deleting_is_tolerated() {
    let h = harness().await;
    let web = svc("web", UID_A);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let pip_name = owned_pips(&h.arm, "default/web")[0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    for path in ["/loadBalancers/", "/publicIPAddresses/"] {
        h.arm.inject(Fault::lose_response(
            "DELETE",
            path,
            Some(ArmError::not_found("resource", "gone")),
            1,
        ));
    }
    h.provider.delete(&web.spec().service).await.unwrap();
    assert_eq!(h.arm.pending_faults(), 0, "both deletes met the 404");
    assert_eq!(answered(&h.arm, "DELETE", "/loadBalancers/", 404), 1);
    assert_eq!(answered(&h.arm, "DELETE", "/publicIPAddresses/", 404), 1);
    assert!(h.arm.load_balancer(RG, CLUSTER).is_none());
    assert!(h.arm.public_ip(RG, &pip_name).is_none());
    assert!(managed_rules(&h.arm).is_empty());
    assert_eq!(h.provider.status(&web.spec().service).await.unwrap(), None);
}

//! What the SDK-backed client adds to `azure_mgmt_network`, observed at the mock ARM server:
//! etag preconditions on every write, the SDK's API version, and operation polling without the
//! SDK's 30 s sleep.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::Instant;

use kube_lb_provider_azure::arm::API_VERSION;
use kube_lb_provider_core::LoadBalancerProvider;
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";

#[tokio::test]
async fn writes_carry_etag_preconditions_and_the_sdk_api_version() {
    let h = harness().await;
    h.provider
        .ensure(&svc("web", UID_A).spec(), &nodes(2))
        .await
        .unwrap();
    h.provider
        .ensure(&svc("db", UID_B).internal().spec(), &nodes(2))
        .await
        .unwrap();
    h.provider
        .delete(&svc("web", UID_A).spec().service)
        .await
        .unwrap();

    let journal = h.arm.journal();
    let mut seen = (0, 0, 0);
    for entry in &journal {
        if entry.path.contains("/oauth2/") {
            continue;
        }
        assert!(
            entry
                .query
                .split('&')
                .any(|p| p == format!("api-version={API_VERSION}")),
            "{entry:?}"
        );
        match (entry.method.as_str(), entry.status) {
            ("PUT", 201) => {
                assert_eq!(entry.if_none_match.as_deref(), Some("*"), "{entry:?}");
                assert!(entry.if_match.is_none(), "{entry:?}");
                seen.0 += 1;
            }
            ("PUT", _) => {
                assert!(entry.if_match.is_some(), "{entry:?}");
                assert!(entry.if_none_match.is_none(), "{entry:?}");
                seen.1 += 1;
            }
            ("DELETE", _) => {
                assert!(entry.if_match.is_some(), "{entry:?}");
                seen.2 += 1;
            }
            ("GET", _) => {
                assert!(entry.if_match.is_none() && entry.if_none_match.is_none());
            }
            (method, _) => panic!("unexpected {method} {}", entry.path),
        }
    }
    assert!(seen.0 >= 3, "creates: PIP, LB, internal LB: {seen:?}");
    assert!(seen.1 >= 1, "updates: the NSG at least: {seen:?}");
    assert!(seen.2 >= 2, "deletes: the emptied LB and the PIP: {seen:?}");
}

#[tokio::test]
async fn operations_without_retry_after_are_polled_at_the_short_default() {
    let arm = kube_lb_mock_azure::MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .security_group(RG, NSG)
        .without_retry_after()
        .lro_polls(3)
        .start()
        .await
        .unwrap();
    let provider = provider_for(&arm, fast_options());
    let started = Instant::now();
    provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .unwrap();
    provider
        .delete(&svc("web", UID_A).spec().service)
        .await
        .unwrap();
    // PIP, LB and NSG writes, then NSG, LB and PIP deletes/writes, each polled 4 times: with
    // the SDK's own poller this would take over 30 s per poll.
    assert_polled_without_long_sleeps(&arm, started, 6 * 4);
    assert!(arm.load_balancers().is_empty());
    assert!(arm.public_ips().is_empty());
}

#[tokio::test]
async fn an_operation_running_past_the_poll_budget_ends_retryable_and_named() {
    let arm = kube_lb_mock_azure::MockArm::builder()
        .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
        .security_group(RG, NSG)
        .without_retry_after()
        .lro_polls(10)
        .start()
        .await
        .unwrap();
    let mut options = fast_options();
    options.poll.max_polls = 3;
    let provider = provider_for(&arm, options);
    let error = provider
        .ensure(&svc("web", UID_A).spec(), &nodes(1))
        .await
        .expect_err("the first write's operation outlasts the budget");
    assert!(error.is_retryable(), "{error:?}");
    assert!(
        error.to_string().contains("still running after 3 polls"),
        "{error}"
    );
    // The budget is polls, not time: exactly three, then the wait gives up.
    let polls = arm
        .journal()
        .iter()
        .filter(|e| e.path.contains("/operations/"))
        .count();
    assert_eq!(polls, 3);
}

//! Error answers in the shape the real BCE APIs use (HTTP status with
//! `{"code", "message", "requestId"}`), through the real client against the mock, land in
//! the specific class a user sees: throttles counted and retried, quota and permission as
//! their environment causes, a BLB or EIP already gone on delete as success.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

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

/// A list answer that keeps saying "truncated, go on from marker `m1`" (a cloud-side bug, or a
/// proxy replaying one page): the listing ends with an error naming the marker after following
/// it once, instead of asking for the same page for ever.
#[tokio::test]
async fn a_page_marker_handed_back_twice_ends_the_listing() {
    use kube_lb_provider_baidu::BaiduClient;
    use kube_lb_provider_baidu::sign::Credentials;
    use kube_lb_provider_core::{CloudApi, RateLimits, RetryPolicy};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let pages = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let served = pages.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let served = served.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 8192];
                // One request per connection is enough for the test: read its head, answer.
                if stream.read(&mut request).await.unwrap_or(0) == 0 {
                    return;
                }
                served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let body = r#"{"blbList":[],"marker":"m1","isTruncated":true,"nextMarker":"m1","maxKeys":1000}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    let client = BaiduClient::new(
        Credentials {
            access_key_id: "ak".into(),
            secret_access_key: "sk".into(),
            session_token: None,
        },
        &endpoint,
        &endpoint,
        CloudApi::new(
            "baidu",
            CallCounter::new(),
            RateLimits::default(),
            RetryPolicy::default(),
        ),
        std::time::Duration::from_secs(5),
    )
    .unwrap();
    let error = tokio::time::timeout(std::time::Duration::from_secs(20), client.blbs_named("x"))
        .await
        .expect("the listing ends")
        .unwrap_err();
    assert!(
        error.to_string().contains("\"m1\" a second time"),
        "{error}"
    );
    assert_eq!(
        pages.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the first page and the one its marker names, then no more"
    );
}

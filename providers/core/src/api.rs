//! [`CloudApi`]: the one path through which every provider (local, AWS, GCP, Azure) makes a
//! cloud call, so every call is rate limited per API family, retried in place with backoff
//! when transient, and counted by provider, operation and kind (the binary's
//! `kube_lb_cloud_calls_total`).

use std::future::Future;

use crate::ProviderError;
use crate::calls::{CallCounter, CallKind};
use crate::ratelimit::RateLimits;
use crate::retry::{Again, RetryPolicy};

/// Rate limiter + retry policy + call counter for one provider. Cheap to clone.
#[derive(Debug, Clone)]
pub struct CloudApi {
    provider: &'static str,
    counter: CallCounter,
    limits: RateLimits,
    retry: RetryPolicy,
}

impl CloudApi {
    /// Calls made through this value are labelled `provider`.
    pub fn new(
        provider: &'static str,
        counter: CallCounter,
        limits: RateLimits,
        retry: RetryPolicy,
    ) -> Self {
        Self {
            provider,
            counter,
            limits,
            retry,
        }
    }

    /// The provider label.
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    /// The shared call counter.
    pub fn counter(&self) -> &CallCounter {
        &self.counter
    }

    /// Counts one attempt of `operation` that the cloud refused for its request rate; the
    /// provider calls this where it classifies the answer (it alone knows a throttle from
    /// another transient failure). Feeds `kube_lb_cloud_throttled_total`.
    pub fn record_throttled(&self, operation: &'static str) {
        tracing::debug!(provider = self.provider, operation, "cloud call throttled");
        self.counter.record_throttled(self.provider, operation);
    }

    /// Performs `call` (an `operation` of API `family`): waits for the family's rate limit,
    /// counts the attempt, and retries [transient](ProviderError::is_transient) failures per
    /// the policy. Every attempt is counted, because every attempt reaches the cloud.
    pub async fn call<T, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        kind: CallKind,
        call: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        self.call_with(family, operation, kind, ProviderError::is_transient, call)
            .await
    }

    /// Like [`CloudApi::call`] for a provider that keeps its own error type at call sites
    /// (AWS keeps `AwsError` so callers can match on codes): `is_transient` must answer what
    /// `ProviderError::from(error).is_transient()` would.
    pub async fn call_with<T, E, C, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        kind: CallKind,
        is_transient: C,
        call: F,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        C: Fn(&E) -> bool,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.call_as(
            family,
            operation,
            kind,
            |error| {
                if is_transient(error) {
                    Again::Backoff
                } else {
                    Again::No
                }
            },
            call,
        )
        .await
    }

    /// Like [`CloudApi::call_with`], with `decide` also passing on a wait the cloud asked for
    /// (`Retry-After`); see [`RetryPolicy::retry_as`].
    pub async fn call_as<T, E, D, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        kind: CallKind,
        decide: D,
        mut call: F,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        D: Fn(&E) -> Again,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.retry
            .retry_as(operation, decide, || {
                // The future is created now but does nothing until polled (the SDKs build and
                // sign the request on first poll), which is after the token is taken.
                let attempt = call();
                async move {
                    self.limits.acquire(family).await;
                    self.counter.record(self.provider, operation, kind);
                    attempt.await
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn counts_every_attempt() {
        let api = CloudApi::new(
            "test",
            CallCounter::new(),
            RateLimits::unlimited(),
            RetryPolicy {
                base: Duration::from_millis(10),
                max: Duration::from_millis(10),
                max_attempts: 3,
            },
        );
        let failures = AtomicU32::new(1);
        let out = api
            .call("elb", "CreateLoadBalancer", CallKind::Mutate, || async {
                if failures.fetch_sub(1, Ordering::SeqCst) > 0 {
                    Err(ProviderError::Retryable {
                        operation: "CreateLoadBalancer",
                        message: "503".into(),
                        source: None,
                    })
                } else {
                    Ok("lb")
                }
            })
            .await;
        assert_eq!(out.ok(), Some("lb"));
        let snap = api.counter().snapshot();
        assert_eq!(snap.operation("CreateLoadBalancer"), 2);
        assert_eq!(snap.mutations(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn call_with_retries_only_what_the_classifier_calls_transient() {
        // (first error, attempts made, mutate calls counted)
        let cases = [("Throttling", 2, 2), ("TooManyLoadBalancers", 1, 1)];
        for (code, want_attempts, want_counted) in cases {
            let api = CloudApi::new(
                "aws",
                CallCounter::new(),
                RateLimits::unlimited(),
                RetryPolicy {
                    base: Duration::from_millis(10),
                    max: Duration::from_millis(10),
                    max_attempts: 4,
                },
            );
            let attempts = AtomicU32::new(0);
            let out: Result<&str, String> = api
                .call_with(
                    "elb-mutate",
                    "elb:CreateLoadBalancer",
                    CallKind::Mutate,
                    |e: &String| e == "Throttling",
                    || async {
                        if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                            Err(code.to_string())
                        } else {
                            Ok("lb")
                        }
                    },
                )
                .await;
            assert_eq!(attempts.load(Ordering::SeqCst), want_attempts, "{code}");
            assert_eq!(out.is_ok(), want_attempts > 1, "{code}");
            let snap = api.counter().snapshot();
            assert_eq!(snap.operation("elb:CreateLoadBalancer"), want_counted);
            assert_eq!(snap.mutations(), want_counted, "{code}");
            assert_eq!(snap.reads(), 0);
        }
    }
}

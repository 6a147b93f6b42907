//! [`CloudApi`]: the one path through which a provider makes a cloud call, so every call is
//! rate limited per API family, retried with backoff when retryable, and counted.

use std::future::Future;

use crate::ProviderError;
use crate::calls::{CallCounter, CallKind};
use crate::ratelimit::RateLimits;
use crate::retry::RetryPolicy;

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

    /// Performs `call` (an `operation` of API `family`): waits for the family's rate limit,
    /// counts the attempt, and retries retryable failures per the policy. Every attempt is
    /// counted, because every attempt reaches the cloud.
    pub async fn call<T, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        kind: CallKind,
        mut call: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        self.retry
            .retry(operation, || {
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
}

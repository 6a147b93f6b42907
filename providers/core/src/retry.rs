//! Retrying cloud calls in place with capped, jittered exponential backoff. One semantics for
//! every provider: only transient failures ([`ProviderError::is_transient`]: throttling, 5xx,
//! timeouts) are repeated here; quotas, permissions and user errors go straight back to the
//! controller, whose per-Service backoff and Warning events handle them.
//!
//! Providers whose call sites keep a richer error type (AWS keeps `AwsError` for its codes)
//! use [`RetryPolicy::retry_if`] with a classifier that goes through their
//! `From<_> for ProviderError`, so the decision is still `is_transient()` of the mapped error.

use std::future::Future;
use std::time::Duration;

use rand::Rng;

use crate::ProviderError;

/// How many times and how patiently to retry a failing call.
///
/// Delays use **equal jitter**: after the `n`-th failure the wait is drawn uniformly from
/// `[step/2, step]` with `step = min(max, base·2^n)`. Full jitter (`[0, step]`) spreads a herd
/// of clients slightly better, but it can draw a wait near zero, and a throttled call retried
/// at once is throttled again: it spends one of the few in-place attempts and a token of the
/// account-wide bucket other controllers share. Equal jitter keeps half the step as a floor,
/// and the random other half still de-synchronises replicas and Services that failed
/// together. The sum of waits is bounded by `max_attempts · max`, which keeps a reconcile
/// from holding its worker for long before the controller's own backoff takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry (before jitter).
    pub base: Duration,
    /// Upper bound of any single delay.
    pub max: Duration,
    /// Total attempts including the first; 1 disables retrying.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    /// 4 attempts, 200 ms doubling up to 5 s: absorbs throttling bursts without holding a
    /// reconcile for long; the controller's own per-Service backoff takes over after that.
    fn default() -> Self {
        Self {
            base: Duration::from_millis(200),
            max: Duration::from_secs(5),
            max_attempts: 4,
        }
    }
}

impl RetryPolicy {
    /// A policy that never retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The delay after the `retry`-th failure (0-based), with `jitter` in `[0, 1]` choosing a
    /// point in the upper half of the exponential step ("equal jitter"): never less than half
    /// the step, so retries spread out without collapsing to zero.
    pub fn delay(&self, retry: u32, jitter: f64) -> Duration {
        let step = self
            .base
            .checked_mul(2u32.saturating_pow(retry))
            .unwrap_or(self.max)
            .min(self.max);
        let half = step / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// Runs `call` until it succeeds, fails with an error that is not
    /// [transient](ProviderError::is_transient), or runs out of attempts. Sleeps with
    /// `tokio::time`, so tests can use a paused clock.
    pub async fn retry<T, F, Fut>(
        &self,
        operation: &'static str,
        call: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ProviderError>>,
    {
        self.retry_if(operation, ProviderError::is_transient, call)
            .await
    }

    /// Like [`RetryPolicy::retry`] for a provider's own error type: `is_transient` decides
    /// which failures are repeated in place, and must agree with what the error maps to in
    /// [`ProviderError`] (see the module docs).
    pub async fn retry_if<T, E, C, F, Fut>(
        &self,
        operation: &'static str,
        is_transient: C,
        call: F,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        C: Fn(&E) -> bool,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        self.retry_as(
            operation,
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

    /// Like [`RetryPolicy::retry_if`], with `decide` also passing on how long the cloud asked
    /// the caller to wait (`Retry-After`): such a failure is repeated after that wait (or the
    /// backoff step, whichever is longer) when it is no longer than [`RetryPolicy::max`], and
    /// handed back at once when it is — a worker does not sit out a long throttling window in
    /// place, and retrying before the window ends would only be refused again; the
    /// controller's per-Service backoff takes over.
    pub async fn retry_as<T, E, D, F, Fut>(
        &self,
        operation: &'static str,
        decide: D,
        mut call: F,
    ) -> Result<T, E>
    where
        E: std::fmt::Display,
        D: Fn(&E) -> Again,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempts = self.max_attempts.max(1);
        let mut retry = 0;
        loop {
            let error = match call().await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            if retry + 1 >= attempts {
                return Err(error);
            }
            let backoff = self.delay(retry, rand::rng().random::<f64>());
            let delay = match decide(&error) {
                Again::No => return Err(error),
                Again::Backoff => backoff,
                Again::After(asked) if asked > self.max => {
                    tracing::debug!(
                        operation,
                        retry_after_ms = u64::try_from(asked.as_millis()).unwrap_or(u64::MAX),
                        %error,
                        "the cloud asks for a longer wait than an in-place retry takes; handing back"
                    );
                    return Err(error);
                }
                Again::After(asked) => asked.max(backoff),
            };
            tracing::debug!(
                operation,
                attempt = retry + 1,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                %error,
                "retrying cloud call"
            );
            tokio::time::sleep(delay).await;
            retry += 1;
        }
    }
}

/// What a failed attempt says about repeating it in place ([`RetryPolicy::retry_as`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// Not in place: the error goes back to the caller.
    No,
    /// After the policy's backoff step.
    Backoff,
    /// After the wait the cloud asked for (`Retry-After`), if the policy allows that long.
    After(Duration),
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base: Duration::from_millis(100),
            max: Duration::from_secs(1),
            max_attempts: 5,
        }
    }

    /// A wait the cloud asked for is kept when the policy allows it, and hands the error back
    /// at once when it is longer than any single in-place wait.
    #[tokio::test(start_paused = true)]
    async fn a_wait_the_cloud_asks_for_is_honoured_up_to_the_policy_max() {
        // (asked wait, attempts made, time slept)
        let cases = [
            (
                Again::After(Duration::from_millis(700)),
                2,
                Duration::from_millis(700),
            ),
            // Shorter than the backoff step: the step wins (policy base 100 ms, ≥ 50 ms).
            (Again::After(Duration::ZERO), 2, Duration::from_millis(50)),
            (Again::After(Duration::from_secs(30)), 1, Duration::ZERO),
            (Again::No, 1, Duration::ZERO),
        ];
        for (again, want_attempts, at_least) in cases {
            let attempts = AtomicU32::new(0);
            let started = tokio::time::Instant::now();
            let out: Result<&str, String> = policy()
                .retry_as(
                    "op",
                    |_| again,
                    || async {
                        if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                            Err("429".to_string())
                        } else {
                            Ok("done")
                        }
                    },
                )
                .await;
            let slept = started.elapsed();
            assert_eq!(attempts.load(Ordering::SeqCst), want_attempts, "{again:?}");
            assert_eq!(out.is_ok(), want_attempts == 2, "{again:?}");
            assert!(slept >= at_least, "{again:?}: slept {slept:?}");
            if want_attempts == 1 {
                assert_eq!(slept, Duration::ZERO, "{again:?}: handed back at once");
            }
        }
    }

    #[test]
    fn delay_doubles_and_caps() {
        let cases = [
            (0, 1.0, Duration::from_millis(100)),
            (0, 0.0, Duration::from_millis(50)),
            (1, 1.0, Duration::from_millis(200)),
            (3, 1.0, Duration::from_millis(800)),
            (4, 1.0, Duration::from_secs(1)),
            (40, 1.0, Duration::from_secs(1)),
            (40, 0.0, Duration::from_millis(500)),
            (2, 0.5, Duration::from_millis(300)),
        ];
        for (retry, jitter, want) in cases {
            assert_eq!(
                policy().delay(retry, jitter),
                want,
                "retry {retry} jitter {jitter}"
            );
        }
    }

    fn throttled() -> ProviderError {
        ProviderError::Retryable {
            operation: "Describe",
            message: "Throttling".into(),
            source: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_retryable_errors_with_backoff() {
        let calls = AtomicU32::new(0);
        let start = tokio::time::Instant::now();
        let result = policy()
            .retry("Describe", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(throttled())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let waited = start.elapsed();
        // Two delays: [50,100] ms + [100,200] ms.
        assert!(waited >= Duration::from_millis(150), "waited {waited:?}");
        assert!(waited <= Duration::from_millis(300), "waited {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn user_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = policy()
            .retry("Create", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(ProviderError::user("bad certificate"))
            })
            .await;
        assert!(matches!(result, Err(ProviderError::User { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn only_transient_errors_are_retried_in_place() {
        // (error, attempts made by a 5-attempt policy)
        let cases: [(fn() -> ProviderError, u32); 5] = [
            (throttled, 5),
            (
                || {
                    ProviderError::environment(
                        "Create",
                        crate::EnvironmentCause::Quota,
                        "TooManyLoadBalancers",
                    )
                },
                1,
            ),
            (
                || {
                    ProviderError::environment(
                        "Create",
                        crate::EnvironmentCause::PermissionDenied,
                        "403",
                    )
                },
                1,
            ),
            (|| ProviderError::user("bad port"), 1),
            (
                || ProviderError::Internal {
                    message: "odd answer".into(),
                    source: None,
                },
                1,
            ),
        ];
        for (make, want) in cases {
            let calls = AtomicU32::new(0);
            let result: Result<(), _> = policy()
                .retry("Create", || async {
                    calls.fetch_add(1, Ordering::SeqCst);
                    Err(make())
                })
                .await;
            let error = result.unwrap_err();
            assert_eq!(calls.load(Ordering::SeqCst), want, "{error}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_if_uses_the_given_classifier() {
        let calls = AtomicU32::new(0);
        let result: Result<u32, String> = policy()
            .retry_if(
                "Describe",
                |e: &String| e == "SlowDown",
                || async {
                    match calls.fetch_add(1, Ordering::SeqCst) {
                        0 => Err("SlowDown".to_string()),
                        1 => Err("AccessDenied".to_string()),
                        _ => Ok(1),
                    }
                },
            )
            .await;
        assert_eq!(result, Err("AccessDenied".to_string()));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_attempts() {
        let calls = AtomicU32::new(0);
        let result: Result<(), _> = policy()
            .retry("Describe", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(throttled())
            })
            .await;
        assert!(result.is_err_and(|e| e.is_retryable()));
        assert_eq!(calls.load(Ordering::SeqCst), 5);
    }
}

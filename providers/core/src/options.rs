//! Tunables shared by the providers whose cloud changes resources asynchronously (OpenStack,
//! Tencent, Baidu): how patiently to wait for a resource to leave a transitional state
//! ([`WaitSettings`], polled with a [`Waiting`] clock) and how the cloud client behaves
//! ([`ClientOptions`]: retry, rate limits, request timeout, call counter).
//!
//! The clouds differ only in the numbers, so each provider crate keeps its own defaults (a
//! `DEFAULT_WAIT` constant) and builds its options with [`ClientOptions::new`].

use std::time::Duration;

use tokio::time::Instant;

use crate::api::CloudApi;
use crate::calls::CallCounter;
use crate::ratelimit::{RateLimit, RateLimits};
use crate::retry::RetryPolicy;

/// How patiently to wait for a resource to leave a transitional (`PENDING_*`, `creating`,
/// task running) state: pauses start at `first`, grow by `factor` up to `max_interval`, and
/// the wait gives up after `timeout` (with a `Pending` error the controller retries later).
///
/// There is no `Default`: each cloud's pace differs, so each provider crate names its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WaitSettings {
    /// First pause.
    pub first: Duration,
    /// Growth per poll (1.0 keeps the pause constant).
    pub factor: f64,
    /// Longest pause.
    pub max_interval: Duration,
    /// Give up (a `Pending` error, retried by the controller) after this long.
    pub timeout: Duration,
}

impl WaitSettings {
    /// The pause that follows `pause`: grown by `factor`, capped at `max_interval`.
    pub fn pause_after(&self, pause: Duration) -> Duration {
        pause.mul_f64(self.factor).min(self.max_interval)
    }

    /// Starts the clock for one wait.
    pub fn begin(&self) -> Waiting {
        Waiting {
            settings: *self,
            started: Instant::now(),
            pause: self.first,
        }
    }
}

/// One wait in progress: when it started and the pause before the next look. Its clock is
/// tokio's (the same as `std`'s outside paused-time tests), so the timeout and the pauses it
/// sleeps are measured alike.
///
/// Callers keep their own loop (only they know which states are done, fatal or transitional
/// and what to say when the wait runs out):
///
/// ```ignore
/// let mut waiting = self.wait.begin();
/// loop {
///     match look().await? {
///         State::Done(value) => return Ok(value),
///         State::Busy if waiting.expired() => return Err(ProviderError::pending(..)),
///         State::Busy => {}
///     }
///     waiting.sleep().await;
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Waiting {
    settings: WaitSettings,
    started: Instant,
    pause: Duration,
}

impl Waiting {
    /// True once the wait has lasted [`WaitSettings::timeout`].
    pub fn expired(&self) -> bool {
        self.started.elapsed() >= self.settings.timeout
    }

    /// How long the wait has lasted.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The pause [`Waiting::sleep`] takes next.
    pub fn pause(&self) -> Duration {
        self.pause
    }

    /// Sleeps for [`Waiting::pause`], then grows the pause for the next time.
    pub async fn sleep(&mut self) {
        tokio::time::sleep(self.pause).await;
        self.pause = self.settings.pause_after(self.pause);
    }

    /// Sleeps for the pause the cloud asked for (ARM's `Retry-After`) instead of
    /// [`Waiting::pause`], capped at [`WaitSettings::max_interval`] so a server asking for an
    /// hour cannot stall a reconcile; the schedule then grows as if it had slept its own pause.
    pub async fn sleep_as_asked(&mut self, asked: Duration) {
        tokio::time::sleep(self.asked(asked)).await;
        self.pause = self.settings.pause_after(self.pause);
    }

    /// What [`Waiting::sleep_as_asked`] sleeps for `asked`.
    pub fn asked(&self, asked: Duration) -> Duration {
        asked.min(self.settings.max_interval)
    }
}

/// How a provider's cloud client behaves, apart from its cloud config.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Waiting for resources and tasks to settle.
    pub wait: WaitSettings,
    /// In-place retry of transient failures (throttling, 5xx).
    pub retry: RetryPolicy,
    /// Client-side rate limits per API family.
    pub limits: RateLimits,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Counts every call.
    pub counter: CallCounter,
}

impl ClientOptions {
    /// Options waiting as `wait` says, with what the providers share: the default retry
    /// policy, 10 requests/s (burst 20) per API family, a 30 s request timeout and a fresh
    /// call counter.
    pub fn new(wait: WaitSettings) -> Self {
        ClientOptions {
            wait,
            retry: RetryPolicy::default(),
            limits: RateLimits::new(RateLimit::new(10, 20)),
            request_timeout: Duration::from_secs(30),
            counter: CallCounter::new(),
        }
    }

    /// The rate-limited, retrying, counted call path for `provider` (its metric label).
    pub fn cloud_api(&self, provider: &'static str) -> CloudApi {
        CloudApi::new(
            provider,
            self.counter.clone(),
            self.limits.clone(),
            self.retry,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn settings(first: Duration, factor: f64, max_interval: Duration) -> WaitSettings {
        WaitSettings {
            first,
            factor,
            max_interval,
            timeout: Duration::from_secs(300),
        }
    }

    #[test]
    fn pauses_grow_by_the_factor_up_to_the_cap() {
        // The providers' defaults and their tests' fast settings.
        let cases: [(&str, WaitSettings, &[u64]); 6] = [
            (
                "openstack: 1 s growing 1.2x to 15 s",
                settings(ms(1000), 1.2, ms(15_000)),
                &[1000, 1200, 1440, 1728, 2073, 2488],
            ),
            (
                "tencent: 200 ms growing 1.5x to 3 s",
                settings(ms(200), 1.5, ms(3000)),
                &[200, 300, 450, 675, 1012, 1518, 2278, 3000, 3000],
            ),
            (
                "baidu: 1 s doubling to 10 s",
                settings(ms(1000), 2.0, ms(10_000)),
                &[1000, 2000, 4000, 8000, 10_000, 10_000],
            ),
            (
                "baidu tests: 20 ms doubling to 100 ms",
                settings(ms(20), 2.0, ms(100)),
                &[20, 40, 80, 100, 100],
            ),
            (
                "factor 1 keeps the pause",
                settings(ms(50), 1.0, ms(1000)),
                &[50, 50, 50],
            ),
            (
                "a first pause above the cap is cut to it after one pause",
                settings(ms(500), 2.0, ms(100)),
                &[500, 100, 100],
            ),
        ];
        for (name, wait, expected_ms) in cases {
            let mut pause = wait.first;
            let mut seen = Vec::new();
            for _ in expected_ms {
                seen.push(pause.as_millis() as u64);
                pause = wait.pause_after(pause);
            }
            assert_eq!(seen, expected_ms, "{name}");
        }
    }

    #[test]
    fn doubling_is_exact_to_the_nanosecond() {
        // Baidu doubled with integer arithmetic before it shared this code.
        let wait = settings(
            Duration::new(0, 123_456_789),
            2.0,
            Duration::from_secs(3600),
        );
        let mut pause = wait.first;
        for _ in 0..12 {
            assert_eq!(wait.pause_after(pause), (pause * 2).min(wait.max_interval));
            pause = wait.pause_after(pause);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_sleeps_its_pauses_and_expires_at_the_timeout() {
        let wait = WaitSettings {
            first: ms(100),
            factor: 2.0,
            max_interval: ms(300),
            timeout: ms(1000),
        };
        let start = tokio::time::Instant::now();
        let mut waiting = wait.begin();
        let mut slept = Vec::new();
        while !waiting.expired() {
            slept.push(waiting.pause().as_millis() as u64);
            waiting.sleep().await;
        }
        // 100 + 200 + 300 + 300 = 900 ms, still short of 1 s; one more pause passes it.
        assert_eq!(slept, [100, 200, 300, 300, 300]);
        assert_eq!(start.elapsed(), ms(1200));
    }

    #[test]
    fn shared_client_defaults() {
        let wait = settings(ms(1), 1.5, ms(2));
        let options = ClientOptions::new(wait);
        assert_eq!(options.wait, wait);
        assert_eq!(options.retry, RetryPolicy::default());
        assert_eq!(options.limits, RateLimits::new(RateLimit::new(10, 20)));
        assert_eq!(options.request_timeout, Duration::from_secs(30));
        let api = options.cloud_api("openstack");
        assert_eq!(api.provider(), "openstack");
    }
}

//! A shared client-side rate limiter with one token bucket per API family, so a burst of
//! reconciles cannot exhaust a cloud's request quota (e.g. the ELB describe family is throttled
//! separately from EC2 in AWS).

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Sustained rate and burst of one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Requests per second, sustained; fractional rates (one request every two seconds) are
    /// allowed because some cloud quotas are that low. Non-finite or non-positive values act
    /// as one per second.
    pub per_second: f64,
    /// Requests allowed back to back before the rate applies; zero acts as one.
    pub burst: u32,
}

impl RateLimit {
    /// A limit of `per_second` requests per second with a burst of `burst`; zero values are
    /// raised to one because a bucket that never refills would stall every call.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: f64::from(per_second.max(1)),
            burst: burst.max(1),
        }
    }

    /// A limit with a fractional rate (e.g. `0.5` per second), for quotas below one request
    /// per second and for configuration files that state rates as decimals.
    pub fn fractional(per_second: f64, burst: u32) -> Self {
        Self { per_second, burst }
    }

    /// The rate actually enforced: `per_second` when it is a positive finite number, else 1.
    pub fn effective_per_second(self) -> f64 {
        if self.per_second.is_finite() && self.per_second > 0.0 {
            self.per_second
        } else {
            1.0
        }
    }

    fn quota(self) -> Quota {
        let burst = NonZeroU32::new(self.burst).unwrap_or(NonZeroU32::MIN);
        // governor refills one token per period; a rate above 10^9/s rounds to the 1 ns floor,
        // which is unlimited for any real caller.
        let period =
            Duration::from_secs_f64(1.0 / self.effective_per_second()).max(Duration::from_nanos(1));
        Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(burst)
    }
}

impl Default for RateLimit {
    /// 20 requests per second with a burst of 40, well under every cloud's default quotas.
    fn default() -> Self {
        Self::new(20, 40)
    }
}

/// Token buckets keyed by API family (`elb`, `ec2`, `compute`, `local`, ...). Clones share the
/// buckets.
#[derive(Clone)]
pub struct RateLimits {
    inner: Arc<Inner>,
}

struct Inner {
    default: RateLimit,
    overrides: HashMap<&'static str, RateLimit>,
    buckets: Mutex<HashMap<&'static str, Arc<DefaultDirectRateLimiter>>>,
}

impl fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimits")
            .field("default", &self.inner.default)
            .field("overrides", &self.inner.overrides)
            .finish_non_exhaustive()
    }
}

impl PartialEq for RateLimits {
    /// Equal when they configure the same limits (the buckets' current fill is not compared).
    fn eq(&self, other: &Self) -> bool {
        self.inner.default == other.inner.default && self.inner.overrides == other.inner.overrides
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        Self::new(RateLimit::default())
    }
}

impl RateLimits {
    /// Every family gets `default` unless overridden with [`RateLimits::with_family`].
    pub fn new(default: RateLimit) -> Self {
        Self {
            inner: Arc::new(Inner {
                default,
                overrides: HashMap::new(),
                buckets: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// No effective limit (for tests and the in-process `local` provider).
    pub fn unlimited() -> Self {
        Self::new(RateLimit::new(u32::MAX, u32::MAX))
    }

    /// Gives `family` its own limit. Call before the limits are shared.
    #[must_use]
    pub fn with_family(self, family: &'static str, limit: RateLimit) -> Self {
        let mut overrides = self.inner.overrides.clone();
        overrides.insert(family, limit);
        Self {
            inner: Arc::new(Inner {
                default: self.inner.default,
                overrides,
                buckets: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The limit that applies to `family`.
    pub fn limit_for(&self, family: &str) -> RateLimit {
        self.inner
            .overrides
            .get(family)
            .copied()
            .unwrap_or(self.inner.default)
    }

    fn bucket(&self, family: &'static str) -> Arc<DefaultDirectRateLimiter> {
        let mut buckets = self
            .inner
            .buckets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        buckets
            .entry(family)
            .or_insert_with(|| Arc::new(RateLimiter::direct(self.limit_for(family).quota())))
            .clone()
    }

    /// Waits until `family`'s bucket allows one more request.
    pub async fn acquire(&self, family: &'static str) {
        self.bucket(family).until_ready().await;
    }

    /// Takes a token from `family`'s bucket without waiting; false when the bucket is empty.
    pub fn try_acquire(&self, family: &'static str) -> bool {
        self.bucket(family).check().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_enforced_per_family() {
        let limits = RateLimits::new(RateLimit::new(1, 2)).with_family("elb", RateLimit::new(1, 1));
        assert!(limits.try_acquire("ec2"));
        assert!(limits.try_acquire("ec2"));
        assert!(
            !limits.try_acquire("ec2"),
            "third call exceeds the burst of 2"
        );
        // A different family has its own bucket, with its own override.
        assert!(limits.try_acquire("elb"));
        assert!(!limits.try_acquire("elb"));
    }

    #[test]
    fn zero_limits_are_raised_to_one() {
        let limit = RateLimit::new(0, 0);
        assert_eq!(limit.per_second, 1.0);
        assert_eq!(limit.burst, 1);
        let limits = RateLimits::new(RateLimit::fractional(f64::NAN, 0));
        assert!(limits.try_acquire("x"), "a NaN rate still admits one call");
        assert!(!limits.try_acquire("x"));
    }

    #[tokio::test]
    async fn fractional_rates_space_calls_out() {
        // governor keeps real time (not tokio's), so this waits for real: 2.5/s with a burst
        // of 1 puts 400 ms between the first and second call.
        let limits = RateLimits::new(RateLimit::fractional(2.5, 1));
        let start = std::time::Instant::now();
        limits.acquire("ec2-mutate").await;
        limits.acquire("ec2-mutate").await;
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(350), "waited {waited:?}");
        assert!(waited <= Duration::from_secs(3), "waited {waited:?}");
    }

    #[test]
    fn equality_compares_configuration() {
        let a = RateLimits::new(RateLimit::new(1, 1)).with_family("elb", RateLimit::new(2, 2));
        let b = RateLimits::new(RateLimit::new(1, 1)).with_family("elb", RateLimit::new(2, 2));
        assert_eq!(a, b);
        assert!(
            a.try_acquire("elb"),
            "draining a bucket does not change equality"
        );
        assert_eq!(a, b);
        assert_ne!(a, RateLimits::new(RateLimit::new(1, 1)));
    }

    #[test]
    fn clones_share_buckets() {
        let limits = RateLimits::new(RateLimit::new(1, 1));
        let clone = limits.clone();
        assert!(limits.try_acquire("x"));
        assert!(!clone.try_acquire("x"));
    }
}

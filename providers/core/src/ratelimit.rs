//! A shared client-side rate limiter with one token bucket per API family, so a burst of
//! reconciles cannot exhaust a cloud's request quota (e.g. the ELB describe family is throttled
//! separately from EC2 in AWS).

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// Sustained rate and burst of one bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second, sustained.
    pub per_second: NonZeroU32,
    /// Requests allowed back to back before the rate applies.
    pub burst: NonZeroU32,
}

impl RateLimit {
    /// A limit of `per_second` requests per second with a burst of `burst`; zero values are
    /// raised to one because a bucket that never refills would stall every call.
    pub fn new(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN),
            burst: NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN),
        }
    }

    fn quota(self) -> Quota {
        Quota::per_second(self.per_second).allow_burst(self.burst)
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
        assert_eq!(limit.per_second.get(), 1);
        assert_eq!(limit.burst.get(), 1);
    }

    #[test]
    fn clones_share_buckets() {
        let limits = RateLimits::new(RateLimit::new(1, 1));
        let clone = limits.clone();
        assert!(limits.try_acquire("x"));
        assert!(!clone.try_acquire("x"));
    }
}

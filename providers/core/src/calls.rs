//! Counting every cloud API call by provider, operation and kind (read or mutate).
//!
//! Tests use [`CallCounter::snapshot`] to assert that a no-op resync performs no mutating call;
//! the binary installs an observer that feeds the Prometheus `cloud_calls` family.
//!
//! Calls the cloud refused for its request rate (throttling, HTTP 429) are counted a second time,
//! apart, through [`CallCounter::record_throttled`]: only the provider can tell a throttle from
//! another transient failure (AWS error codes, GCE `rateLimitExceeded`, ARM 429), and operators
//! need to tell them apart (a throttled account needs a quota raise or fewer callers, a 5xx
//! needs nothing).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

/// Whether a cloud call only reads state or changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CallKind {
    /// Describe/list/get: safe to repeat, changes nothing.
    Read,
    /// Create/modify/delete: changes cloud state.
    Mutate,
}

impl CallKind {
    /// A fixed label for metrics (`read`, `mutate`).
    pub fn as_str(self) -> &'static str {
        match self {
            CallKind::Read => "read",
            CallKind::Mutate => "mutate",
        }
    }
}

impl fmt::Display for CallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One counted call: which provider, which operation, what kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CallRecord {
    /// Provider name (`local`, `aws`, ...).
    pub provider: &'static str,
    /// Cloud operation (e.g. `CreateLoadBalancer`, `allocate`).
    pub operation: &'static str,
    /// Read or mutate.
    pub kind: CallKind,
}

/// A callback told about every call as it is made (e.g. to increment a Prometheus counter).
pub type CallObserver = Arc<dyn Fn(&CallRecord) + Send + Sync>;

/// One call the cloud refused because of its request rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ThrottledCall {
    /// Provider name (`aws`, `gcp`, `azure`, ...).
    pub provider: &'static str,
    /// Cloud operation, the same label as [`CallRecord::operation`].
    pub operation: &'static str,
}

/// A callback told about every throttled call as it is answered.
pub type ThrottleObserver = Arc<dyn Fn(&ThrottledCall) + Send + Sync>;

/// Counts of calls made so far, keyed by [`CallRecord`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSnapshot {
    counts: BTreeMap<CallRecord, u64>,
}

impl CallSnapshot {
    /// Number of calls of `operation` (any kind).
    pub fn operation(&self, operation: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(record, _)| record.operation == operation)
            .map(|(_, count)| count)
            .sum()
    }

    /// Number of calls of the given kind, across operations and providers.
    pub fn kind(&self, kind: CallKind) -> u64 {
        self.counts
            .iter()
            .filter(|(record, _)| record.kind == kind)
            .map(|(_, count)| count)
            .sum()
    }

    /// Number of mutating calls.
    pub fn mutations(&self) -> u64 {
        self.kind(CallKind::Mutate)
    }

    /// Number of read calls.
    pub fn reads(&self) -> u64 {
        self.kind(CallKind::Read)
    }

    /// Number of calls of any kind.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }

    /// Calls of one kind per operation label, e.g. `{"elb:CreateLoadBalancer": 1}`: what a
    /// test prints when a count is not what it expected.
    pub fn operations(&self, kind: CallKind) -> BTreeMap<&'static str, u64> {
        let mut out = BTreeMap::new();
        for (record, count) in &self.counts {
            if record.kind == kind {
                *out.entry(record.operation).or_insert(0) += count;
            }
        }
        out
    }

    /// Every counted call with its count.
    pub fn iter(&self) -> impl Iterator<Item = (&CallRecord, u64)> {
        self.counts.iter().map(|(record, count)| (record, *count))
    }

    /// What happened between `earlier` and `self` (counts only grow).
    pub fn since(&self, earlier: &CallSnapshot) -> CallSnapshot {
        let counts = self
            .counts
            .iter()
            .filter_map(|(record, count)| {
                let before = earlier.counts.get(record).copied().unwrap_or(0);
                let delta = count.saturating_sub(before);
                (delta > 0).then_some((*record, delta))
            })
            .collect();
        CallSnapshot { counts }
    }
}

/// A cheap-to-clone, shared call counter. Every provider records each API call through one.
#[derive(Clone, Default)]
pub struct CallCounter {
    inner: Arc<CounterInner>,
}

#[derive(Default)]
struct CounterInner {
    counts: Mutex<BTreeMap<CallRecord, u64>>,
    observers: Mutex<Vec<CallObserver>>,
    throttled: Mutex<BTreeMap<ThrottledCall, u64>>,
    throttle_observers: Mutex<Vec<ThrottleObserver>>,
}

impl fmt::Debug for CallCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallCounter")
            .field("snapshot", &self.snapshot())
            .finish_non_exhaustive()
    }
}

impl CallCounter {
    /// A counter with no calls recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an observer told about every later call.
    pub fn observe(&self, observer: CallObserver) {
        self.inner
            .observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(observer);
    }

    /// Records one call.
    pub fn record(&self, provider: &'static str, operation: &'static str, kind: CallKind) {
        let record = CallRecord {
            provider,
            operation,
            kind,
        };
        *self
            .inner
            .counts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(record)
            .or_insert(0) += 1;
        let observers = self
            .inner
            .observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for observer in observers {
            observer(&record);
        }
    }

    /// Adds an observer told about every later throttled call.
    pub fn observe_throttled(&self, observer: ThrottleObserver) {
        self.inner
            .throttle_observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(observer);
    }

    /// Records that the cloud refused one attempt of `operation` for its request rate. The
    /// attempt itself was already counted by [`CallCounter::record`].
    pub fn record_throttled(&self, provider: &'static str, operation: &'static str) {
        let call = ThrottledCall {
            provider,
            operation,
        };
        *self
            .inner
            .throttled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(call)
            .or_insert(0) += 1;
        let observers = self
            .inner
            .throttle_observers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for observer in observers {
            observer(&call);
        }
    }

    /// Throttled attempts so far, per provider and operation.
    pub fn throttled(&self) -> BTreeMap<ThrottledCall, u64> {
        self.inner
            .throttled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Throttled attempts so far of `operation` by `provider`.
    pub fn throttled_count(&self, provider: &str, operation: &str) -> u64 {
        self.throttled()
            .iter()
            .filter(|(call, _)| call.provider == provider && call.operation == operation)
            .map(|(_, count)| count)
            .sum()
    }

    /// The counts so far.
    pub fn snapshot(&self) -> CallSnapshot {
        CallSnapshot {
            counts: self
                .inner
                .counts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn counts_by_operation_and_kind() {
        let counter = CallCounter::new();
        counter.record("local", "allocate", CallKind::Mutate);
        counter.record("local", "lookup", CallKind::Read);
        counter.record("local", "lookup", CallKind::Read);
        let snap = counter.snapshot();
        assert_eq!(snap.operation("lookup"), 2);
        assert_eq!(snap.operation("allocate"), 1);
        assert_eq!(snap.mutations(), 1);
        assert_eq!(snap.kind(CallKind::Read), 2);
        assert_eq!(snap.reads(), 2);
        assert_eq!(snap.total(), 3);
        assert_eq!(
            snap.operations(CallKind::Read),
            BTreeMap::from([("lookup", 2)])
        );
        assert_eq!(
            snap.operations(CallKind::Mutate),
            BTreeMap::from([("allocate", 1)])
        );
    }

    #[test]
    fn since_reports_only_new_calls() {
        let counter = CallCounter::new();
        counter.record("aws", "DescribeLoadBalancers", CallKind::Read);
        let before = counter.snapshot();
        counter.record("aws", "DescribeLoadBalancers", CallKind::Read);
        counter.record("aws", "CreateLoadBalancer", CallKind::Mutate);
        let delta = counter.snapshot().since(&before);
        assert_eq!(delta.operation("DescribeLoadBalancers"), 1);
        assert_eq!(delta.mutations(), 1);
        assert_eq!(
            counter.snapshot().since(&counter.snapshot()),
            CallSnapshot::default()
        );
    }

    #[test]
    fn observers_see_every_call_and_clones_share_counts() {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = CallCounter::new();
        let seen2 = seen.clone();
        counter.observe(Arc::new(move |record: &CallRecord| {
            assert_eq!(record.provider, "gcp");
            seen2.fetch_add(1, Ordering::SeqCst);
        }));
        let clone = counter.clone();
        clone.record("gcp", "insert", CallKind::Mutate);
        counter.record("gcp", "get", CallKind::Read);
        assert_eq!(seen.load(Ordering::SeqCst), 2);
        assert_eq!(counter.snapshot().iter().count(), 2);
    }

    #[test]
    fn throttled_calls_are_counted_apart_and_observed() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let counter = CallCounter::new();
        let sink = seen.clone();
        counter.observe_throttled(Arc::new(move |call: &ThrottledCall| {
            sink.lock().unwrap().push(*call);
        }));
        counter.record("aws", "elb:DescribeLoadBalancers", CallKind::Read);
        counter.record_throttled("aws", "elb:DescribeLoadBalancers");
        counter
            .clone()
            .record_throttled("aws", "elb:DescribeLoadBalancers");
        let call = ThrottledCall {
            provider: "aws",
            operation: "elb:DescribeLoadBalancers",
        };
        assert_eq!(counter.throttled(), BTreeMap::from([(call, 2)]));
        assert_eq!(*seen.lock().unwrap(), vec![call, call]);
        // A throttle is not a second call: the attempt was counted once, by `record`.
        assert_eq!(counter.snapshot().total(), 1);
    }
}

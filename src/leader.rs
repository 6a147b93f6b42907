//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's timings and rules.
//!
//! # Rules
//!
//! - A candidate takes the lease only when it is free, already its own, or its record has not
//!   changed for a full lease duration **measured on the candidate's own clock from the moment
//!   it observed the last change** (any write changes the `resourceVersion`). Clock offsets
//!   between replicas therefore do not matter; only their rates must agree, as in client-go.
//! - Every write uses optimistic concurrency (the `resourceVersion` read just before), so of two
//!   candidates racing for the same record exactly one wins; the other gets a conflict.
//! - Every attempt (get + create or update) is bounded as a whole: a leader's attempt ends at
//!   its renew deadline at the latest, anyone else's after `renew_deadline`.
//! - A leader acts until `renew_deadline` after the **start** of its last successful attempt,
//!   and publishes `leading = false` at that instant even while a request is still hanging (the
//!   deadline is a timer beside the request, not something the request has to return for).
//!
//! # Why the old leader has stopped before anyone else may start
//!
//! Defaults: lease duration `L` = 15 s, renew deadline `D` = 10 s, retry period `R` = 2 s.
//!
//! Let `s` be the start of the leader's last successful attempt and `w ≥ s` the moment the API
//! server applied that write. The leader stops at `s + D` at the latest (its own timer).
//!
//! A candidate can only observe the new record at some `o ≥ w` (it reads it after it was
//! written; a slow read makes `o` later, never earlier), and it may take over no earlier than
//! `o + L ≥ w + L ≥ s + L`. So between the leader's stop and the earliest takeover there are at
//! least `L − D` = 5 s. Measuring the leader's deadline from the *start* of its request is what
//! makes this hold: measured from the response, a slow response would push `s + D` past `w + L`.
//! Because the candidate's `L` and the leader's `D` are both intervals on their own clocks, no
//! clock synchronisation is needed, only rates that agree to well under `(L − D) / L` = 33 %.
//!
//! If the lease record names a longer duration than the candidate's own configuration (a
//! rollout that changed the flags), the candidate waits for the longer of the two.
//!
//! # What "stops" means, and what it cannot cover
//!
//! When `leading` turns false, the controller drops every in-flight reconcile (see
//! [`while_leading`]): no new cloud call or API write starts after that instant. A request
//! already on the wire cannot be recalled: dropping it closes the connection on our side, but the
//! server may still apply it. Such a request was sent before `s + D`; it is harmless as long as
//! the server applies it within the remaining `L − D` (5 s by default) — the margin of the
//! argument above is `L − D` minus the longest time a request that was sent may take to take
//! effect. Cloud and API server writes normally apply within a second; a cloud call stuck longer
//! than that on the server side is outside what any client-side election can fence.
//!
//! A replica whose deadline passed keeps campaigning: if its next read still shows it as the
//! holder (nobody took over), it renews and leads again; the conditional write makes this safe.
//! A tokio runtime starved for longer than the margin would delay the timer that publishes
//! `false`; the controller runs on a multi-threaded runtime with no blocking work on it.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Timings and identity of one candidate.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (pod name or hostname plus a random suffix).
    pub identity: String,
    /// How long a lease is valid after its last observed change (client-go default 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps acting after the start of its last successful renewal
    /// (client-go default 10 s). Must be shorter than `lease_duration`.
    pub renew_deadline: Duration,
    /// Interval between attempts (client-go default 2 s). Must be shorter than
    /// `renew_deadline`.
    pub retry_period: Duration,
}

/// A leader-election configuration that would break the timing argument.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A duration is zero.
    #[error("leader election: {0} must be greater than zero")]
    Zero(&'static str),
    /// `renew_deadline >= lease_duration`: the old leader could still act after another
    /// replica took over.
    #[error(
        "leader election: the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?}), or a leader that cannot renew could still act after another replica took over"
    )]
    DeadlineNotBeforeExpiry {
        /// The configured renew deadline.
        renew_deadline: Duration,
        /// The configured lease duration.
        lease_duration: Duration,
    },
    /// `retry_period >= renew_deadline`: a leader would lose the lease on a single failed
    /// renewal without a chance to retry.
    #[error(
        "leader election: the retry period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?}), or one failed renewal ends leadership without a retry"
    )]
    RetryNotBeforeDeadline {
        /// The configured retry period.
        retry_period: Duration,
        /// The configured renew deadline.
        renew_deadline: Duration,
    },
}

impl LeaderConfig {
    /// client-go's defaults for the given lease and identity.
    pub fn new(namespace: &str, name: &str, identity: String) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// Checks `0 < retry_period < renew_deadline < lease_duration`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, value) in [
            ("the lease duration", self.lease_duration),
            ("the renew deadline", self.renew_deadline),
            ("the retry period", self.retry_period),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Zero(name));
            }
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(ConfigError::DeadlineNotBeforeExpiry {
                renew_deadline: self.renew_deadline,
                lease_duration: self.lease_duration,
            });
        }
        if self.retry_period >= self.renew_deadline {
            return Err(ConfigError::RetryNotBeforeDeadline {
                retry_period: self.retry_period,
                renew_deadline: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// The lease duration as the Lease records it: whole seconds, rounded up so a candidate
    /// reading the record never waits less than the holder assumes.
    fn lease_seconds(&self) -> i32 {
        let secs = self
            .lease_duration
            .as_secs()
            .saturating_add(u64::from(self.lease_duration.subsec_nanos() > 0));
        i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
    }
}

/// A sensible default identity: `$POD_NAME` or the host name, plus a random suffix so two
/// processes on one host are distinct.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "kube-lb".to_string());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// Runs `work` while `leading` reads `true`; drops it (cancelling whatever it awaits) as soon
/// as `leading` turns `false`, returning `None`. Leadership is checked before `work` is polled,
/// so once `false` is published no further step of `work` runs. A closed channel means
/// leadership can no longer change: `work` then runs to completion.
pub async fn while_leading<F: Future>(
    leading: &mut watch::Receiver<bool>,
    work: F,
) -> Option<F::Output> {
    let lost = async {
        if leading.wait_for(|l| !*l).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        () = lost => None,
        output = work => Some(output),
    }
}

/// What the candidate last saw in the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observation {
    /// Changes on every write, whoever makes it.
    resource_version: Option<String>,
    holder: Option<String>,
    lease_seconds: Option<i32>,
}

/// The candidate's memory of the record and when, on its own clock, it last saw it change.
#[derive(Debug, Default)]
struct LeaseObserver {
    last: Option<(Observation, Instant)>,
}

impl LeaseObserver {
    /// Records what a read returned at `now`.
    fn observe(&mut self, observation: Observation, now: Instant) {
        match &self.last {
            Some((previous, _)) if *previous == observation => {}
            _ => self.last = Some((observation, now)),
        }
    }

    /// Whether `identity` may write itself into the record at `now`: the record is free,
    /// already ours, or unchanged for the longer of `lease_duration` and the duration the
    /// record names.
    fn may_acquire(&self, identity: &str, lease_duration: Duration, now: Instant) -> bool {
        let Some((observation, observed_at)) = &self.last else {
            return true;
        };
        match observation.holder.as_deref() {
            None | Some("") => true,
            Some(holder) if holder == identity => true,
            Some(_) => {
                let recorded = observation
                    .lease_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(Duration::ZERO, Duration::from_secs);
                now.duration_since(*observed_at) >= lease_duration.max(recorded)
            }
        }
    }
}

/// The leader's side: until when it may act.
#[derive(Debug, Default, Clone, Copy)]
struct Term {
    until: Option<Instant>,
}

impl Term {
    /// An attempt that started at `started` succeeded.
    fn renewed(&mut self, started: Instant, renew_deadline: Duration) {
        self.until = Some(started + renew_deadline);
    }

    /// Someone else holds the lease.
    fn end(&mut self) {
        self.until = None;
    }

    fn is_leading(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// When an attempt starting at `now` must be abandoned: at the end of the term while
    /// leading (so a hung renewal cannot stretch it), `renew_deadline` later otherwise.
    fn attempt_deadline(&self, now: Instant, renew_deadline: Duration) -> Instant {
        match self.until {
            Some(until) if until > now => until,
            _ => now + renew_deadline,
        }
    }
}

/// The Lease operations an election needs; a seam so the loop can be tested on a paused clock
/// against a store that hangs on demand.
#[async_trait]
trait LeaseStore: Send + Sync {
    async fn get(&self, name: &str) -> Result<Option<Lease>, kube::Error>;
    async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error>;
    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, kube::Error>;
}

#[async_trait]
impl LeaseStore for Api<Lease> {
    async fn get(&self, name: &str) -> Result<Option<Lease>, kube::Error> {
        self.get_opt(name).await
    }
    async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error> {
        Api::create(self, &PostParams::default(), lease).await
    }
    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, kube::Error> {
        Api::replace(self, name, &PostParams::default(), lease).await
    }
}

/// Campaigns for a Lease and publishes whether this replica leads.
pub struct LeaderElector {
    store: Box<dyn LeaseStore>,
    config: LeaderConfig,
    observer: LeaseObserver,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The result of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    Leading,
    Following,
}

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error("lease request failed: {0}")]
    Api(kube::Error),
    #[error("lease request did not finish before its deadline")]
    TimedOut,
}

impl LeaderElector {
    /// A candidate for `config.name` in `config.namespace`; fails when the timings would
    /// break the timing argument (see the module documentation).
    pub fn new(client: kube::Client, config: LeaderConfig) -> Result<Self, ConfigError> {
        let store = Box::new(Api::<Lease>::namespaced(client, &config.namespace));
        Self::with_store(store, config)
    }

    fn with_store(store: Box<dyn LeaseStore>, config: LeaderConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            store,
            config,
            observer: LeaseObserver::default(),
        })
    }

    /// Campaigns until `shutdown`, then releases the lease if held. The receiver reads `true`
    /// exactly while this replica may act, and turns `false` no later than `renew_deadline`
    /// after the start of the last successful renewal.
    pub fn spawn(
        self,
        shutdown: CancellationToken,
    ) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(self.campaign(tx, shutdown));
        (rx, task)
    }

    fn publish(&self, tx: &watch::Sender<bool>, leading: bool) {
        let changed = tx.send_if_modified(|current| std::mem::replace(current, leading) != leading);
        if changed {
            if leading {
                tracing::info!(identity = %self.config.identity, lease = %self.config.name, "became leader");
            } else {
                tracing::warn!(identity = %self.config.identity, lease = %self.config.name, "stopped leading");
            }
        }
    }

    async fn campaign(mut self, tx: watch::Sender<bool>, shutdown: CancellationToken) {
        let renew_deadline = self.config.renew_deadline;
        let mut term = Term::default();
        loop {
            let started = Instant::now();
            let deadline = term.attempt_deadline(started, renew_deadline);
            let result = tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                result = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => {
                    result.unwrap_or(Err(AttemptError::TimedOut))
                }
            };
            match result {
                Ok(Attempt::Leading) => term.renewed(started, renew_deadline),
                Ok(Attempt::Following) => term.end(),
                Err(error) => {
                    tracing::warn!(identity = %self.config.identity, %error, "lease attempt failed");
                }
            }
            self.publish(&tx, term.is_leading(Instant::now()));

            let next = Instant::now() + self.config.retry_period;
            let wait = async {
                // The term may end while we wait for the next attempt: publish it on time.
                if let Some(until) = term.until.filter(|until| *until < next) {
                    tokio::time::sleep_until(until).await;
                    self.publish(&tx, false);
                }
                tokio::time::sleep_until(next).await;
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = wait => {}
            }
        }
        let was_leading = tx.send_replace(false);
        if was_leading {
            tracing::info!(identity = %self.config.identity, "shutting down; releasing the lease");
            match tokio::time::timeout(renew_deadline, self.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::warn!(%error, "could not release the lease"),
                Err(_) => tracing::warn!("releasing the lease timed out"),
            }
        }
    }

    fn spec_for_us(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let ours = previous.and_then(|p| p.holder_identity.as_deref())
            == Some(self.config.identity.as_str());
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_seconds()),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: Some(if ours || previous.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, AttemptError> {
        let current = self
            .store
            .get(&self.config.name)
            .await
            .map_err(AttemptError::Api)?;
        let Some(lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec_for_us(None)),
            };
            return match self.store.create(&lease).await {
                Ok(_) => Ok(Attempt::Leading),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following),
                Err(error) => Err(AttemptError::Api(error)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observer.observe(
            Observation {
                resource_version: lease.metadata.resource_version.clone(),
                holder: spec.holder_identity.clone(),
                lease_seconds: spec.lease_duration_seconds,
            },
            Instant::now(),
        );
        if !self.observer.may_acquire(
            &self.config.identity,
            self.config.lease_duration,
            Instant::now(),
        ) {
            return Ok(Attempt::Following);
        }
        let updated = Lease {
            metadata: lease.metadata.clone(),
            spec: Some(self.spec_for_us(Some(&spec))),
        };
        match self.store.replace(&self.config.name, &updated).await {
            Ok(_) => Ok(Attempt::Leading),
            // Someone else wrote since our read: they won this round.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Attempt::Following),
            Err(error) => Err(AttemptError::Api(error)),
        }
    }

    async fn release(&self) -> Result<(), kube::Error> {
        let Some(lease) = self.store.get(&self.config.name).await? else {
            return Ok(());
        };
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        // As client-go does on release: an empty holder lets the next candidate take over at
        // its next attempt.
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        let released = Lease {
            metadata: lease.metadata,
            spec: Some(spec),
        };
        self.store.replace(&self.config.name, &released).await?;
        tracing::info!(identity = %self.config.identity, "released the lease");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use kube::core::Status;

    use super::*;

    const L: Duration = Duration::from_secs(15);
    const D: Duration = Duration::from_secs(10);
    const R: Duration = Duration::from_secs(2);

    fn config(identity: &str) -> LeaderConfig {
        LeaderConfig::new("kube-system", "kube-lb", identity.to_string())
    }

    #[test]
    fn validation_rejects_timings_that_break_the_argument() {
        let secs = Duration::from_secs;
        let cases = [
            ((15, 10, 2), None),
            ((3, 2, 1), None),
            ((10, 10, 2), Some("must be shorter than the lease duration")),
            ((10, 12, 2), Some("must be shorter than the lease duration")),
            (
                (15, 10, 10),
                Some("must be shorter than the renew deadline"),
            ),
            (
                (15, 10, 0),
                Some("the retry period must be greater than zero"),
            ),
            (
                (0, 10, 2),
                Some("the lease duration must be greater than zero"),
            ),
        ];
        for ((lease, renew, retry), want) in cases {
            let mut config = config("a");
            config.lease_duration = secs(lease);
            config.renew_deadline = secs(renew);
            config.retry_period = secs(retry);
            let got = config.validate().err().map(|e| e.to_string());
            match (want, got) {
                (None, None) => {}
                (Some(want), Some(got)) => assert!(got.contains(want), "{got}"),
                (want, got) => panic!("{lease}/{renew}/{retry}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn lease_seconds_round_up() {
        let mut config = config("a");
        for (duration, want) in [(1500, 2), (2000, 2), (100, 1), (15_000, 15)] {
            config.lease_duration = Duration::from_millis(duration);
            assert_eq!(config.lease_seconds(), want, "{duration} ms");
        }
    }

    fn held_by(holder: Option<&str>, version: &str, seconds: i32) -> Observation {
        Observation {
            resource_version: Some(version.to_string()),
            holder: holder.map(String::from),
            lease_seconds: Some(seconds),
        }
    }

    /// The candidate's expiry decision: a full lease duration on its own clock since it saw
    /// the record change, whatever the record's timestamps say.
    #[tokio::test(start_paused = true)]
    async fn candidate_waits_a_lease_duration_from_the_last_change_it_saw() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        // (observations at ms, asked at ms, may acquire)
        type Case = (Vec<(u64, Observation)>, u64, bool);
        let cases: Vec<Case> = vec![
            (vec![], 0, true),
            (vec![(0, held_by(None, "1", 15))], 0, true),
            (vec![(0, held_by(Some(""), "1", 15))], 0, true),
            (vec![(0, held_by(Some("me"), "1", 15))], 0, true),
            (vec![(0, held_by(Some("other"), "1", 15))], 14_999, false),
            (vec![(0, held_by(Some("other"), "1", 15))], 15_000, true),
            // Re-reading an unchanged record does not restart the clock.
            (
                vec![
                    (0, held_by(Some("other"), "1", 15)),
                    (10_000, held_by(Some("other"), "1", 15)),
                ],
                15_000,
                true,
            ),
            // A renewal (new resourceVersion) seen at 10 s restarts it.
            (
                vec![
                    (0, held_by(Some("other"), "1", 15)),
                    (10_000, held_by(Some("other"), "2", 15)),
                ],
                24_999,
                false,
            ),
            (
                vec![
                    (0, held_by(Some("other"), "1", 15)),
                    (10_000, held_by(Some("other"), "2", 15)),
                ],
                25_000,
                true,
            ),
            // A holder configured with a longer lease is given its longer lease.
            (vec![(0, held_by(Some("other"), "1", 20))], 19_999, false),
            (vec![(0, held_by(Some("other"), "1", 20))], 20_000, true),
        ];
        for (observations, asked, want) in cases {
            let mut observer = LeaseObserver::default();
            for (ms, observation) in &observations {
                observer.observe(observation.clone(), at(*ms));
            }
            assert_eq!(
                observer.may_acquire("me", L, at(asked)),
                want,
                "{observations:?} asked at {asked} ms"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leader_term_ends_a_renew_deadline_after_the_start_of_its_last_renewal() {
        let mut term = Term::default();
        let t0 = Instant::now();
        assert!(!term.is_leading(t0));
        assert_eq!(
            term.attempt_deadline(t0, D),
            t0 + D,
            "candidate: bounded by D"
        );
        // A renewal that started at t0 and took 3 s still only counts from t0.
        tokio::time::advance(Duration::from_secs(3)).await;
        term.renewed(t0, D);
        let now = Instant::now();
        assert!(term.is_leading(now));
        assert_eq!(
            term.attempt_deadline(now, D),
            t0 + D,
            "leader: ends with the term"
        );
        assert!(term.is_leading(t0 + D - Duration::from_millis(1)));
        assert!(!term.is_leading(t0 + D));
        term.end();
        assert!(!term.is_leading(now));
    }

    /// An in-memory Lease store shared by candidates; each handle can be hung (requests
    /// accepted, never answered) on its own.
    #[derive(Default)]
    struct Shared {
        lease: Mutex<Option<Lease>>,
        version: AtomicU64,
    }

    #[derive(Clone)]
    struct FakeStore {
        shared: Arc<Shared>,
        hung: Arc<AtomicBool>,
        /// Start of every read that was answered.
        reads: Arc<Mutex<Vec<Instant>>>,
    }

    impl FakeStore {
        fn new(shared: Arc<Shared>) -> Self {
            Self {
                shared,
                hung: Arc::default(),
                reads: Arc::default(),
            }
        }

        async fn hang_if_asked(&self) {
            if self.hung.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
        }

        fn stored(&self, mut lease: Lease) -> Lease {
            let version = self.shared.version.fetch_add(1, Ordering::SeqCst) + 1;
            lease.metadata.resource_version = Some(version.to_string());
            *self.shared.lease.lock().unwrap() = Some(lease.clone());
            lease
        }
    }

    fn conflict() -> kube::Error {
        kube::Error::Api(
            Status::failure("conflict", "Conflict")
                .with_code(409)
                .boxed(),
        )
    }

    #[async_trait]
    impl LeaseStore for FakeStore {
        async fn get(&self, _name: &str) -> Result<Option<Lease>, kube::Error> {
            let started = Instant::now();
            self.hang_if_asked().await;
            self.reads.lock().unwrap().push(started);
            Ok(self.shared.lease.lock().unwrap().clone())
        }
        async fn create(&self, lease: &Lease) -> Result<Lease, kube::Error> {
            self.hang_if_asked().await;
            if self.shared.lease.lock().unwrap().is_some() {
                return Err(conflict());
            }
            Ok(self.stored(lease.clone()))
        }
        async fn replace(&self, _name: &str, lease: &Lease) -> Result<Lease, kube::Error> {
            self.hang_if_asked().await;
            let current = self.shared.lease.lock().unwrap().clone();
            if current.and_then(|l| l.metadata.resource_version) != lease.metadata.resource_version
            {
                return Err(conflict());
            }
            Ok(self.stored(lease.clone()))
        }
    }

    fn elector(store: &FakeStore, identity: &str) -> LeaderElector {
        let mut config = config(identity);
        (
            config.lease_duration,
            config.renew_deadline,
            config.retry_period,
        ) = (L, D, R);
        LeaderElector::with_store(Box::new(store.clone()), config).unwrap()
    }

    /// A leader whose API server stops answering publishes `false` exactly `D` after the start
    /// of its last successful attempt, while the request is still hanging; the other replica
    /// takes over no earlier than `L − D` after that.
    #[tokio::test(start_paused = true)]
    async fn a_hung_leader_stops_before_the_other_replica_may_start() {
        let shared = Arc::new(Shared::default());
        let (store_a, store_b) = (FakeStore::new(shared.clone()), FakeStore::new(shared));
        let shutdown = CancellationToken::new();
        let (mut leading_a, task_a) = elector(&store_a, "a").spawn(shutdown.clone());
        leading_a.wait_for(|l| *l).await.unwrap();
        let (mut leading_b, task_b) = elector(&store_b, "b").spawn(shutdown.clone());

        // Several renewals, then A's server hangs between two of them.
        tokio::time::sleep(Duration::from_millis(7_300)).await;
        store_a.hung.store(true, Ordering::SeqCst);
        let last_renewal = *store_a.reads.lock().unwrap().last().unwrap();
        leading_a.wait_for(|l| !*l).await.unwrap();
        let stopped = Instant::now();
        assert_eq!(
            stopped,
            last_renewal + D,
            "A stops D after its last renewal started"
        );
        assert!(
            !*leading_b.borrow(),
            "B does not lead while A may still act"
        );

        leading_b.wait_for(|l| *l).await.unwrap();
        let took_over = Instant::now();
        assert!(
            took_over >= stopped + (L - D),
            "B took over {:?} after A stopped",
            took_over - stopped
        );
        assert!(
            took_over <= last_renewal + L + 2 * R,
            "B takes over within two retry periods of expiry (one to see the change, one to act)"
        );
        shutdown.cancel();
        task_b.await.unwrap();
        task_a.abort();
    }

    /// Work racing the leadership watch is dropped, not awaited, when leadership ends.
    #[tokio::test(start_paused = true)]
    async fn work_is_dropped_when_leadership_ends() {
        let (tx, mut rx) = watch::channel(true);
        let finished = Arc::new(AtomicBool::new(false));
        let work = {
            let finished = finished.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(60)).await;
                finished.store(true, Ordering::SeqCst);
            }
        };
        let lose = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send_replace(false);
        };
        let started = Instant::now();
        let (outcome, ()) = tokio::join!(while_leading(&mut rx, work), lose);
        assert_eq!(outcome, None);
        assert_eq!(Instant::now() - started, Duration::from_secs(1));
        assert!(!finished.load(Ordering::SeqCst));

        // Not leading to begin with: the work is never polled.
        let polled = AtomicBool::new(false);
        let outcome = while_leading(&mut rx, async { polled.store(true, Ordering::SeqCst) }).await;
        assert_eq!(outcome, None);
        assert!(!polled.load(Ordering::SeqCst));

        // A closed channel that last read `true` lets work finish.
        let (tx, mut rx) = watch::channel(true);
        drop(tx);
        assert_eq!(while_leading(&mut rx, async { 7 }).await, Some(7));
    }
}

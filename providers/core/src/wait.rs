//! The two loops every asynchronous cloud needs, written once and parameterised per cloud:
//!
//! - [`until`] (and [`until_within`], which it is built on): poll a resource (an Octavia load
//!   balancer's `provisioning_status`, a Tencent task, a Baidu BLB's status, a GCE operation,
//!   an ARM async operation) until it settles, fails, or the wait runs out;
//! - [`retry_busy`]: repeat a write the cloud refused because the resource is busy with an
//!   earlier change (Octavia's 409 "immutable", Tencent's `ResourceInOperating`, Baidu's
//!   "not available"), settling in between, a bounded number of times.
//!
//! The clouds differ in what "settled", "failed" and "busy" mean, in how long to wait
//! ([`WaitSettings`]), in whether the server paces the polls ([`Look::PendingFor`], ARM's
//! `Retry-After`) and in what bounds the wait ([`Budget`]: time, or ARM's poll count); the
//! loops, the caps and what is logged do not.

use std::future::Future;
use std::time::Duration;

use crate::error::ProviderError;
use crate::options::WaitSettings;

/// What one look at a resource found. `E` is the error of a resource that will not settle:
/// core's [`ProviderError`] for [`until`]; a cloud that keeps its own error type through the
/// wait (ARM's) names it for [`until_within`].
#[derive(Debug)]
pub enum Look<T, E = ProviderError> {
    /// Settled: the wait returns this.
    Done(T),
    /// Still in a transitional state, named for the log and the timeout message
    /// (`PENDING_UPDATE`, `task running`); the next look follows the schedule's pause.
    Pending(String),
    /// Still in a transitional state, and the server said when to look again (ARM's
    /// `Retry-After`): the next pause is this one instead of the schedule's, capped at
    /// [`WaitSettings::max_interval`].
    PendingFor(String, Duration),
    /// It will not settle (Octavia `ERROR`, a failed task): the wait stops with this error.
    Failed(E),
}

/// What a wait may spend before it gives up with the resource still pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// [`WaitSettings::timeout`] of time: the clouds whose polls the client paces (Octavia,
    /// Tencent, Baidu, GCE).
    Time,
    /// This many looks (at least one), however long the pauses between them: ARM, whose
    /// `Retry-After` paces the polls, bounds a wait by their count, and
    /// [`WaitSettings::timeout`] is not consulted.
    Looks(u32),
}

/// A wait that spent its [`Budget`] with the resource still pending: the caller names the
/// error (a `Pending` [`ProviderError`] for [`until`], ARM's `PollTimeout`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The state the last look found.
    pub state: String,
    /// Looks made.
    pub looks: u32,
    /// How long the wait lasted.
    pub waited: Duration,
}

/// Polls `look` until it reports [`Look::Done`] (returned) or [`Look::Failed`] (the error),
/// pausing as `settings` say between looks, or as the server asked ([`Look::PendingFor`]).
/// When `settings.timeout` has passed with the resource still pending, the wait ends with a
/// `Pending` error for `operation` saying "`what` still `<state>` after `<timeout>`", which
/// the controller retries later.
pub async fn until<T, F, Fut>(
    settings: &WaitSettings,
    operation: &'static str,
    what: &str,
    look: F,
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>, ProviderError>>,
{
    until_within(settings, Budget::Time, operation, what, look)
        .await?
        .map_err(|expired| {
            ProviderError::pending(
                operation,
                format!(
                    "{what} still {} after {:?}",
                    expired.state, settings.timeout
                ),
            )
        })
}

/// The loop under [`until`], for a cloud that bounds its wait otherwise or keeps its own
/// error type: polls `look` until it reports [`Look::Done`] (`Ok(Ok(value))`) or
/// [`Look::Failed`] (`Err`, as is an error of the look itself), pausing between looks as
/// `settings` say or as the server asked ([`Look::PendingFor`], capped at
/// `settings.max_interval`). A wait that spends `budget` with the resource still pending ends
/// with `Ok(Err(Expired))` for the caller to name.
pub async fn until_within<T, E, F, Fut>(
    settings: &WaitSettings,
    budget: Budget,
    operation: &'static str,
    what: &str,
    mut look: F,
) -> Result<Result<T, Expired>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T, E>, E>>,
{
    let mut waiting = settings.begin();
    let mut looks = 0u32;
    loop {
        let found = look().await?;
        looks += 1;
        let (state, asked) = match found {
            Look::Done(value) => return Ok(Ok(value)),
            Look::Failed(error) => return Err(error),
            Look::Pending(state) => (state, None),
            Look::PendingFor(state, pause) => (state, Some(pause)),
        };
        let spent = match budget {
            Budget::Time => waiting.expired(),
            Budget::Looks(most) => looks >= most,
        };
        if spent {
            return Ok(Err(Expired {
                state,
                looks,
                waited: waiting.elapsed(),
            }));
        }
        let pause = asked.map_or(waiting.pause(), |asked| waiting.asked(asked));
        tracing::debug!(
            operation,
            resource = what,
            state,
            ?pause,
            looks,
            server_paced = asked.is_some(),
            "waiting for the resource to settle"
        );
        match asked {
            Some(asked) => waiting.sleep_as_asked(asked).await,
            None => waiting.sleep().await,
        }
    }
}

/// Makes `call`; while it fails with an error `is_busy` accepts, and fewer than `attempts`
/// retries were made, runs `settle(retry)` (wait for the resource to be ready again, or just
/// pause) and makes the call again. Any other error, or a busy one past the budget, is
/// returned as a [`ProviderError`].
pub async fn retry_busy<T, E, C, CFut, S, SFut, R>(
    operation: &'static str,
    attempts: u32,
    is_busy: impl Fn(&E) -> bool,
    mut call: C,
    mut settle: S,
) -> Result<T, ProviderError>
where
    E: std::fmt::Display + Into<ProviderError>,
    C: FnMut() -> CFut,
    CFut: Future<Output = Result<T, E>>,
    S: FnMut(u32) -> SFut,
    SFut: Future<Output = Result<R, ProviderError>>,
{
    let mut retries = 0;
    loop {
        match call().await {
            Ok(value) => return Ok(value),
            Err(error) if is_busy(&error) && retries < attempts => {
                retries += 1;
                tracing::info!(operation, %error, retry = retries, "resource busy with an earlier change; retrying once it settles");
                settle(retries).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
}

/// The pause before busy retry number `retry` (1-based) when there is nothing to poll: the
/// schedule of `settings` (`first`, grown by `factor`, capped at `max_interval`).
pub fn busy_pause(settings: &WaitSettings, retry: u32) -> Duration {
    let mut pause = settings.first;
    for _ in 1..retry {
        pause = settings.pause_after(pause);
    }
    pause
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn settings() -> WaitSettings {
        WaitSettings {
            first: Duration::from_millis(100),
            factor: 2.0,
            max_interval: Duration::from_millis(300),
            timeout: Duration::from_secs(1),
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Refused(&'static str);

    impl From<Refused> for ProviderError {
        fn from(error: Refused) -> Self {
            ProviderError::Internal {
                message: error.0.to_string(),
                source: None,
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn until_returns_what_settled_after_the_pending_looks() {
        let looks = Mutex::new(vec![
            Look::Pending("PENDING_UPDATE".into()),
            Look::Pending("PENDING_UPDATE".into()),
            Look::Done("lb"),
        ]);
        let started = tokio::time::Instant::now();
        let value = until(&settings(), "op", "lb-1", || async {
            Ok(looks.lock().expect("lock").remove(0))
        })
        .await
        .expect("settles");
        assert_eq!(value, "lb");
        // Two pauses: 100 ms, then 200 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn until_stops_on_failure_and_times_out_as_pending() {
        let failed = until::<(), _, _>(&settings(), "op", "lb-1", || async {
            Ok(Look::Failed(ProviderError::pending("op", "went to ERROR")))
        })
        .await
        .expect_err("failed");
        assert!(failed.to_string().contains("went to ERROR"), "{failed}");

        let stuck = until::<(), _, _>(&settings(), "octavia:GetLoadBalancer", "lb-1", || async {
            Ok(Look::Pending("PENDING_CREATE".into()))
        })
        .await
        .expect_err("times out");
        assert!(matches!(stuck, ProviderError::Pending { .. }), "{stuck:?}");
        assert!(
            stuck
                .to_string()
                .contains("lb-1 still PENDING_CREATE after 1s"),
            "{stuck}"
        );
    }

    /// How a row of [`until_within_paces_and_bounds_as_asked`] ends.
    #[derive(Debug, PartialEq)]
    enum Ended {
        Settled(&'static str),
        Expired { state: String, looks: u32 },
        Failed(&'static str),
    }

    #[tokio::test(start_paused = true)]
    async fn until_within_paces_and_bounds_as_asked() {
        // ARM's shape: a constant 2 s without `Retry-After`, at most 60 s, bounded by looks.
        let arm = WaitSettings {
            first: Duration::from_secs(2),
            factor: 1.0,
            max_interval: Duration::from_secs(60),
            timeout: Duration::MAX,
        };
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        let pending = |state: &str| Look::Pending(state.to_string());
        let asked = |state: &str, pause| Look::PendingFor(state.to_string(), pause);
        type Row = (
            &'static str,
            WaitSettings,
            Budget,
            Vec<Look<&'static str, Refused>>,
            Ended,
            Duration,
        );
        let rows: Vec<Row> = vec![
            (
                // 250 ms as asked, then the schedule goes on from where it was: 200 ms.
                "the server's pause replaces the schedule's",
                settings(),
                Budget::Time,
                vec![
                    asked("InProgress", ms(250)),
                    pending("InProgress"),
                    Look::Done("lb"),
                ],
                Ended::Settled("lb"),
                ms(450),
            ),
            (
                "an asked pause is capped at max_interval",
                settings(),
                Budget::Time,
                vec![asked("InProgress", secs(3600)), Look::Done("lb")],
                Ended::Settled("lb"),
                ms(300),
            ),
            (
                "a zero pause looks again at once",
                settings(),
                Budget::Time,
                vec![asked("InProgress", Duration::ZERO), Look::Done("lb")],
                Ended::Settled("lb"),
                Duration::ZERO,
            ),
            (
                // 900 ms after four looks is inside the second; the fifth, at 1.2 s, is not.
                "a time budget counts the asked pauses",
                settings(),
                Budget::Time,
                (0..5).map(|_| asked("InProgress", ms(300))).collect(),
                Ended::Expired {
                    state: "InProgress".into(),
                    looks: 5,
                },
                ms(1200),
            ),
            (
                // Three looks, two 30 s pauses between them: no pause after the last.
                "a look budget ends after that many looks, however long they took",
                arm,
                Budget::Looks(3),
                (0..3).map(|_| asked("InProgress", secs(30))).collect(),
                Ended::Expired {
                    state: "InProgress".into(),
                    looks: 3,
                },
                secs(60),
            ),
            (
                "without Retry-After a look budget follows the schedule",
                arm,
                Budget::Looks(4),
                vec![
                    pending("202"),
                    asked("202", secs(5)),
                    pending("202"),
                    Look::Done("ok"),
                ],
                Ended::Settled("ok"),
                secs(9),
            ),
            (
                "a budget of one look never pauses",
                arm,
                Budget::Looks(1),
                vec![asked("InProgress", secs(30))],
                Ended::Expired {
                    state: "InProgress".into(),
                    looks: 1,
                },
                Duration::ZERO,
            ),
            (
                "a failed look ends the wait with its error",
                arm,
                Budget::Looks(10),
                vec![
                    asked("InProgress", secs(1)),
                    Look::Failed(Refused("Canceled")),
                ],
                Ended::Failed("Canceled"),
                secs(1),
            ),
        ];
        for (name, settings, budget, looks, want, took) in rows {
            let looks = Mutex::new(looks);
            let started = tokio::time::Instant::now();
            let ended = until_within(&settings, budget, "op", "lb-1", || async {
                Ok::<_, Refused>(looks.lock().expect("lock").remove(0))
            })
            .await;
            let ended = match ended {
                Ok(Ok(value)) => Ended::Settled(value),
                Ok(Err(expired)) => {
                    assert_eq!(expired.waited, took, "{name}: waited");
                    Ended::Expired {
                        state: expired.state,
                        looks: expired.looks,
                    }
                }
                Err(error) => Ended::Failed(error.0),
            };
            assert_eq!(ended, want, "{name}");
            assert_eq!(started.elapsed(), took, "{name}: elapsed");
            assert!(looks.lock().expect("lock").is_empty(), "{name}: looks left");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn until_names_the_last_state_when_the_server_paced_wait_times_out() {
        let stuck = until::<(), _, _>(&settings(), "op", "lb-1", || async {
            Ok(Look::PendingFor(
                "InProgress".into(),
                Duration::from_millis(400),
            ))
        })
        .await
        .expect_err("times out");
        assert!(matches!(stuck, ProviderError::Pending { .. }), "{stuck:?}");
        assert!(
            stuck.to_string().contains("lb-1 still InProgress after 1s"),
            "{stuck}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retry_busy_settles_between_busy_refusals_within_its_budget() {
        let answers = Mutex::new(vec![Err(Refused("busy")), Err(Refused("busy")), Ok(7)]);
        let settled = Mutex::new(Vec::new());
        let value = retry_busy(
            "op",
            3,
            |e: &Refused| e.0 == "busy",
            || async { answers.lock().expect("lock").remove(0) },
            |retry| {
                settled.lock().expect("lock").push(retry);
                async { Ok::<(), ProviderError>(()) }
            },
        )
        .await
        .expect("succeeds on the third call");
        assert_eq!(value, 7);
        assert_eq!(*settled.lock().expect("lock"), vec![1, 2]);

        let over_budget = retry_busy(
            "op",
            1,
            |e: &Refused| e.0 == "busy",
            || async { Err::<(), _>(Refused("busy")) },
            |_| async { Ok::<(), ProviderError>(()) },
        )
        .await
        .expect_err("gives up");
        assert!(over_budget.to_string().contains("busy"), "{over_budget}");

        let other = retry_busy(
            "op",
            5,
            |e: &Refused| e.0 == "busy",
            || async { Err::<(), _>(Refused("quota")) },
            // A settle would end the call with its own error: the answer shows none ran.
            |_| async { Err::<(), _>(ProviderError::pending("op", "settled")) },
        )
        .await
        .expect_err("returned as is");
        assert!(other.to_string().contains("quota"), "{other}");
    }

    #[test]
    fn busy_pauses_follow_the_wait_schedule() {
        let s = settings();
        let pauses: Vec<u128> = (1..=4).map(|r| busy_pause(&s, r).as_millis()).collect();
        assert_eq!(pauses, vec![100, 200, 300, 300]);
    }
}

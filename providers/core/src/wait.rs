//! The two loops every asynchronous cloud needs, written once and parameterised per cloud:
//!
//! - [`until`]: poll a resource (an Octavia load balancer's `provisioning_status`, a Tencent
//!   task, a Baidu BLB's status) until it settles, fails, or the wait runs out;
//! - [`retry_busy`]: repeat a write the cloud refused because the resource is busy with an
//!   earlier change (Octavia's 409 "immutable", Tencent's `ResourceInOperating`, Baidu's
//!   "not available"), settling in between, a bounded number of times.
//!
//! The clouds differ in what "settled", "failed" and "busy" mean and in how long to wait
//! ([`WaitSettings`]); the loops, the timeout and what is logged do not.

use std::future::Future;
use std::time::Duration;

use crate::error::ProviderError;
use crate::options::WaitSettings;

/// What one look at a resource found.
#[derive(Debug)]
pub enum Look<T> {
    /// Settled: the wait returns this.
    Done(T),
    /// Still in a transitional state, named for the log and the timeout message
    /// (`PENDING_UPDATE`, `task running`).
    Pending(String),
    /// It will not settle (Octavia `ERROR`, a failed task): the wait stops with this error.
    Failed(ProviderError),
}

/// Polls `look` until it reports [`Look::Done`] (returned) or [`Look::Failed`] (the error),
/// pausing as `settings` say between looks. When `settings.timeout` has passed with the
/// resource still pending, the wait ends with a `Pending` error for `operation` saying
/// "`what` still `<state>` after `<timeout>`", which the controller retries later.
pub async fn until<T, F, Fut>(
    settings: &WaitSettings,
    operation: &'static str,
    what: &str,
    mut look: F,
) -> Result<T, ProviderError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Look<T>, ProviderError>>,
{
    let mut waiting = settings.begin();
    loop {
        match look().await? {
            Look::Done(value) => return Ok(value),
            Look::Failed(error) => return Err(error),
            Look::Pending(state) => {
                if waiting.expired() {
                    return Err(ProviderError::pending(
                        operation,
                        format!("{what} still {state} after {:?}", settings.timeout),
                    ));
                }
                tracing::debug!(operation, resource = what, state, pause = ?waiting.pause(), "waiting for the resource to settle");
            }
        }
        waiting.sleep().await;
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

//! Waiting for ARM's long-running operations, instead of the SDK's poller (which sleeps 30 s
//! when `Retry-After` is absent, reports `Failed` without the error, and does not exist for
//! DELETE).
//!
//! A write answered with `Azure-AsyncOperation` is polled there until its `status` is terminal;
//! a `202` with only `Location` is polled until that URL stops answering `202`, through core's
//! wait loop ([`wait::until_within`]) and at most [`PollSettings::max_polls`] times. Between
//! polls the server's `Retry-After` is honoured up to [`PollSettings::max_interval`], with
//! [`PollSettings::default_interval`] when it sends none. Every poll goes through the same
//! pipeline (token, endpoint check, transport) and [`CloudApi`](kube_lb_provider_core::CloudApi)
//! as the SDK's own requests.

use std::future::Future;
use std::time::Duration;

use azure_core::headers::{AUTHORIZATION, AZURE_ASYNCOPERATION, Headers, LOCATION};
use azure_core::{Context, Method, Request, Url};
use bytes::Bytes;
use kube_lb_provider_core::wait::{self, Budget, Look};
use kube_lb_provider_core::{CallKind, WaitSettings};

use crate::arm::OperationStatus;
use crate::client::{ArmClient, PollSettings, Started};
use crate::error::AzureError;
use crate::pipeline::retry_after;

/// How a started operation reports its progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tracker {
    /// Nothing to poll: the write finished synchronously.
    Done,
    /// `Azure-AsyncOperation`: a status document with `status`.
    AsyncOperation(String),
    /// `Location` on a `202`: answers `202` until the operation is over.
    Location(String),
}

/// Where to follow a write's progress, from its first answer.
pub(crate) fn tracker(started: &Started) -> Tracker {
    if let Some(url) = started.headers.get_optional_string(&AZURE_ASYNCOPERATION) {
        return Tracker::AsyncOperation(url);
    }
    match started.headers.get_optional_string(&LOCATION) {
        Some(url) if started.status == 202 => Tracker::Location(url),
        _ => Tracker::Done,
    }
}

/// The wait before the next poll.
pub(crate) fn delay(poll: &PollSettings, headers: &Headers) -> Duration {
    retry_after(headers)
        .unwrap_or(poll.default_interval)
        .min(poll.max_interval)
}

/// What a terminal `status` means; `None` while the operation runs.
pub(crate) fn outcome(
    operation: &'static str,
    status: OperationStatus,
) -> Option<Result<(), AzureError>> {
    match status.status.as_str() {
        "Succeeded" => Some(Ok(())),
        "Failed" | "Canceled" => {
            let error = status.error.unwrap_or_default();
            Some(Err(AzureError::OperationFailed {
                operation,
                status: status.status,
                code: error.code,
                message: error.message,
            }))
        }
        _ => None,
    }
}

/// One poll's answer.
struct Polled {
    status: u16,
    headers: Headers,
    body: Bytes,
}

/// Core's wait schedule for an ARM wait: pauses from `first`, grown by `factor`, every one
/// (the server's `Retry-After` included) capped at [`PollSettings::max_interval`]. ARM bounds a
/// wait by [`PollSettings::max_polls`] ([`Budget::Looks`]), so the timeout is never consulted.
fn schedule(poll: &PollSettings, first: Duration, factor: f64) -> WaitSettings {
    WaitSettings {
        first,
        factor,
        max_interval: poll.max_interval,
        timeout: Duration::MAX,
    }
}

/// The look of a poll that found the operation still running: paced by its `Retry-After` when
/// it sent one, by the schedule ([`PollSettings::default_interval`]) when not.
fn running(state: String, headers: &Headers) -> Look<(), AzureError> {
    match retry_after(headers) {
        Some(pause) => Look::PendingFor(state, pause),
        None => Look::Pending(state),
    }
}

impl ArmClient {
    /// Waits for the operation a write started, if it started one: through core's wait loop
    /// ([`wait::until_within`]), at most [`PollSettings::max_polls`] polls, the first one
    /// after the write's own `Retry-After`.
    pub(crate) async fn wait(
        &self,
        operation: &'static str,
        started: &Started,
    ) -> Result<(), AzureError> {
        let (url, async_operation) = match tracker(started) {
            Tracker::Done => return Ok(()),
            Tracker::AsyncOperation(url) => (url, true),
            Tracker::Location(url) => (url, false),
        };
        let url = Url::parse(&url).map_err(|_| AzureError::ForeignPollUrl {
            operation,
            url: url.clone(),
        })?;
        let what = if async_operation {
            "async operation"
        } else {
            "operation Location"
        };
        // The write's answer is the first look; the first poll waits as it asked.
        tokio::time::sleep(delay(&self.poll, &started.headers)).await;
        let settings = schedule(&self.poll, self.poll.default_interval, 1.0);
        let url = &url;
        wait::until_within(
            &settings,
            Budget::Looks(self.poll.max_polls),
            operation,
            what,
            || self.poll_operation(operation, url, async_operation),
        )
        .await?
        .map_err(|expired| AzureError::PollTimeout {
            operation,
            polls: expired.looks,
        })
    }

    /// One poll of a started operation: its status document (`async_operation`) or its
    /// `Location`.
    async fn poll_operation(
        &self,
        operation: &'static str,
        url: &Url,
        async_operation: bool,
    ) -> Result<Look<(), AzureError>, AzureError> {
        let polled = self
            .call(operation, CallKind::Read, None, || {
                self.poll_once(url.clone())
            })
            .await?;
        let Some(polled) = polled else {
            if async_operation {
                return Ok(Look::Failed(AzureError::Arm {
                    operation,
                    status: 404,
                    code: "OperationNotFound".into(),
                    message: "the async operation status URL answered 404".into(),
                }));
            }
            // A Location URL that is gone means the operation (a delete) is over.
            return Ok(Look::Done(()));
        };
        if !async_operation {
            return Ok(match polled.status {
                202 => running("Accepted".into(), &polled.headers),
                _ => Look::Done(()),
            });
        }
        let status: OperationStatus = serde_json::from_slice(&polled.body)
            .map_err(|source| AzureError::Decode { operation, source })?;
        let state = status.status.clone();
        Ok(match outcome(operation, status) {
            Some(Ok(())) => Look::Done(()),
            Some(Err(error)) => Look::Failed(error),
            None => running(state, &polled.headers),
        })
    }

    /// Waits for a DELETE: its operation if it started one, then until `gone` confirms the
    /// resource no longer exists (ARM may report the operation done a moment before), at most
    /// [`PollSettings::max_polls`] looks, the pause doubling from the DELETE's `Retry-After`.
    pub(crate) async fn wait_deleted<F, Fut>(
        &self,
        operation: &'static str,
        started: &Started,
        mut gone: F,
    ) -> Result<(), AzureError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool, AzureError>>,
    {
        if started.status != 202 && tracker(started) == Tracker::Done {
            // 200 or 204 without an operation: deleted synchronously.
            return Ok(());
        }
        self.wait(operation, started).await?;
        let settings = schedule(&self.poll, delay(&self.poll, &started.headers), 2.0);
        wait::until_within(
            &settings,
            Budget::Looks(self.poll.max_polls),
            operation,
            "deleted resource",
            || {
                let gone = gone();
                async move {
                    let found: Look<(), AzureError> = match gone.await? {
                        true => Look::Done(()),
                        false => Look::Pending("still listed".into()),
                    };
                    Ok(found)
                }
            },
        )
        .await?
        .map_err(|expired| AzureError::PollTimeout {
            operation,
            polls: expired.looks,
        })
    }

    async fn poll_once(&self, url: Url) -> azure_core::Result<Polled> {
        let scopes: Vec<&str> = self.scopes.iter().map(String::as_str).collect();
        let token = self.credential.get_token(&scopes).await?;
        let mut request = Request::new(url, Method::Get);
        request.insert_header(AUTHORIZATION, format!("Bearer {}", token.token.secret()));
        let response = self.polls.send(&Context::new(), &mut request).await?;
        let (status, headers, body) = response.deconstruct();
        Ok(Polled {
            status: u16::from(status),
            headers,
            body: body.collect().await?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arm::ErrorDetail;

    fn started(status: u16, headers: &[(&'static str, &'static str)]) -> Started {
        let mut map = Headers::new();
        for (name, value) in headers {
            map.insert(*name, *value);
        }
        Started {
            status,
            headers: map,
        }
    }

    #[test]
    fn the_tracker_prefers_the_async_operation_header() {
        let cases = [
            (
                started(
                    201,
                    &[
                        ("azure-asyncoperation", "http://a/op"),
                        ("location", "http://a/res"),
                    ],
                ),
                Tracker::AsyncOperation("http://a/op".into()),
            ),
            (
                started(202, &[("location", "http://a/res")]),
                Tracker::Location("http://a/res".into()),
            ),
            // A Location on a finished (200) write is just the resource's address.
            (started(200, &[("location", "http://a/res")]), Tracker::Done),
            (started(200, &[]), Tracker::Done),
        ];
        for (answer, want) in cases {
            assert_eq!(tracker(&answer), want, "{answer:?}");
        }
    }

    #[test]
    fn polls_wait_as_asked_within_bounds() {
        let poll = PollSettings {
            default_interval: Duration::from_millis(10),
            max_interval: Duration::from_secs(2),
            max_polls: 3,
        };
        let cases = [
            (started(201, &[]).headers, Duration::from_millis(10)),
            (
                started(201, &[("retry-after", "1")]).headers,
                Duration::from_secs(1),
            ),
            (
                started(201, &[("retry-after", "30")]).headers,
                Duration::from_secs(2),
            ),
            (
                started(201, &[("retry-after", "0")]).headers,
                Duration::ZERO,
            ),
        ];
        for (headers, want) in cases {
            assert_eq!(delay(&poll, &headers), want);
        }
    }

    #[test]
    fn a_running_poll_is_paced_by_its_retry_after_else_by_the_schedule() {
        let cases = [
            (started(200, &[]).headers, None),
            (
                started(200, &[("retry-after", "7")]).headers,
                Some(Duration::from_secs(7)),
            ),
            // Capped by core's wait at `max_interval`, not here.
            (
                started(200, &[("retry-after", "3600")]).headers,
                Some(Duration::from_secs(3600)),
            ),
        ];
        for (headers, want) in cases {
            match (running("InProgress".into(), &headers), want) {
                (Look::Pending(state), None) => assert_eq!(state, "InProgress"),
                (Look::PendingFor(state, pause), Some(want)) => {
                    assert_eq!(state, "InProgress");
                    assert_eq!(pause, want);
                }
                (other, want) => panic!("{other:?}, want a pause of {want:?}"),
            }
        }
    }

    #[test]
    fn terminal_statuses_keep_the_error() {
        let status = |s: &str, error: Option<ErrorDetail>| OperationStatus {
            status: s.into(),
            error,
        };
        assert!(outcome("op", status("InProgress", None)).is_none());
        assert!(matches!(
            outcome("op", status("Succeeded", None)),
            Some(Ok(()))
        ));
        let failed = outcome(
            "op",
            status(
                "Canceled",
                Some(ErrorDetail {
                    code: "CanceledAndSupersededDueToAnotherOperation".into(),
                    message: "superseded".into(),
                }),
            ),
        );
        match failed {
            Some(Err(AzureError::OperationFailed { status, code, .. })) => {
                assert_eq!(status, "Canceled");
                assert_eq!(code, "CanceledAndSupersededDueToAnotherOperation");
            }
            other => panic!("{other:?}"),
        }
    }
}

//! One reconcile of one Service: decide whether it is ours, then apply (ensure the load
//! balancer, write the status) or clean up (delete the load balancer, release the finalizer).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service};
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::ProviderError;
use tokio::time::Instant;

use super::conditions::{ConditionStatus, Readiness};
use super::events::Reason;
use super::finalizer::{self, FINALIZER, Step};
use super::status::ConditionChange;
use super::{
    Context, Error, ErrorClass, Outcome, ServiceName, backoff_delay, nodes, retry_delay, status,
};

/// Retry delay after a write conflict.
const CONFLICT_RETRY: std::time::Duration = std::time::Duration::from_millis(200);

/// Retry delay of a reconcile that found this replica not leading.
const NOT_LEADING_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// What a reconcile returns when this replica is not (or no longer) leading: a short retry,
/// never "wait for a change". Leadership can lapse and come back (a renewal that missed its
/// deadline, then succeeded one retry period later) before the run loop sees it was lost; a
/// Service parked until its next edit would then keep its old load balancer, finalizer or
/// status indefinitely. While the replica really follows, the run loop has stopped the
/// controller and the retry never runs.
pub(crate) fn not_leading() -> Action {
    Action::requeue(NOT_LEADING_RETRY)
}

/// What to do with a Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Not ours and nothing of ours on it.
    Ignore,
    /// Ours: add the finalizer, ensure, or (when it is being deleted) clean up.
    Manage,
    /// Carries our finalizer but is no longer ours (type changed away from LoadBalancer):
    /// delete the load balancer, clear the status, remove the finalizer.
    Release,
}

impl Disposition {
    /// Decides from the Service alone.
    pub fn of(service: &Service, config: &super::ControllerConfig) -> Self {
        let finalized = service.finalizers().iter().any(|f| f == FINALIZER);
        let deleting = service.metadata.deletion_timestamp.is_some();
        match (deleting, finalized, config.manages(service)) {
            (true, true, _) | (false, _, true) => Disposition::Manage,
            (false, true, false) => Disposition::Release,
            (true, false, _) | (false, false, false) => Disposition::Ignore,
        }
    }
}

/// The provider-facing identity of a Service.
pub fn service_key(service: &Service) -> Result<ServiceKey, Error> {
    Ok(ServiceKey {
        namespace: service
            .namespace()
            .ok_or(Error::MissingField("namespace"))?,
        name: service
            .metadata
            .name
            .clone()
            .ok_or(Error::MissingField("name"))?,
        uid: service.uid().ok_or(Error::MissingField("uid"))?,
    })
}

/// A fingerprint of what the user controls (spec, annotations, labels): a Service that failed
/// with a user error is not retried until this changes.
fn user_fingerprint(service: &Service) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&service.spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    service.annotations().hash(&mut hasher);
    service.labels().hash(&mut hasher);
    hasher.finish()
}

fn hash_of<T: serde::Serialize>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(value)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Entry point called by the runtime for every Service event and requeue.
#[tracing::instrument(skip_all, fields(service = %ServiceName::of(&service), provider = ctx.provider.name()))]
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    let mut timer = ctx.metrics.reconcile_timer();
    if !ctx.is_leading() {
        // A follower never writes.
        return Ok(not_leading());
    }
    let namespace = service
        .namespace()
        .ok_or(Error::MissingField("namespace"))?;
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let disposition = Disposition::of(&service, &ctx.config);
    tracing::debug!(
        ?disposition,
        resource_version = service.resource_version().unwrap_or_default(),
        "reconciling"
    );
    let action = match disposition {
        Disposition::Ignore => {
            ctx.forget(
                &ObjectRef::from_obj(service.as_ref()),
                &ServiceName::of(&service),
            );
            Action::await_change()
        }
        Disposition::Release => release(&api, service, &ctx).await?,
        Disposition::Manage => match finalizer::step(&service) {
            Step::Add => {
                // Before any cloud call; the update triggers the next reconcile.
                finalizer::set(&api, &service, true).await?;
                Action::await_change()
            }
            Step::Apply => apply(&api, service, &ctx).await?,
            Step::Cleanup => {
                let action = cleanup(&api, service.clone(), &ctx).await?;
                // Only a cleanup that deleted the load balancer releases the finalizer; one
                // that returned early (not leading, waiting out a backoff) did not.
                if action == Action::await_change() {
                    finalizer::set(&api, &service, false).await?;
                }
                action
            }
            Step::Done => Action::await_change(),
        },
    };
    timer.success();
    Ok(action)
}

/// Counts a failure of `key` that will be retried and draws the delay before the retry; the
/// error policy uses the same delay, so the Warning announcing it tells the truth. Returns the
/// upper bound of the jittered delay, for the event text.
fn schedule_retry(ctx: &Context, key: &ObjectRef<Service>) -> std::time::Duration {
    let (base, max) = (ctx.config.backoff_base, ctx.config.backoff_max);
    ctx.with_state(key, |s| {
        s.failures = s.failures.saturating_add(1);
        s.retry_in = Some(retry_delay(base, max, s.failures, rand::random::<f64>()));
        backoff_delay(base, max, s.failures)
    })
}

/// The Warning text of a failure that will be retried: what is wrong, and when the retry
/// comes at the latest. The bound only changes while the backoff grows, so a cause that
/// persists yields a handful of events, then none until it changes (see `events`).
/// `call`, given up after [`super::ControllerConfig::provider_timeout`] as a retryable failure.
async fn within_provider_timeout<T>(
    ctx: &Context,
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    let limit = ctx.config.provider_timeout;
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result,
        Err(_) => {
            let limit = humantime::format_duration(limit);
            tracing::warn!(operation, %limit, "provider call abandoned: no answer within the provider timeout");
            Err(ProviderError::retryable(
                operation,
                format!(
                    "no answer from the provider within {limit} (--provider-timeout); abandoned"
                ),
            ))
        }
    }
}

fn retry_note(what: &str, error: &ProviderError, within: std::time::Duration) -> String {
    format!(
        "{what}: {error}; will retry within {}",
        humantime::format_duration(within)
    )
}

/// Chooses the retry by error class: retryable and environment errors back off per Service
/// (5 s doubling to 300 s by default, with jitter); user errors wait for the Service to change.
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let class = error.class();
    let key = ObjectRef::from_obj(service.as_ref());
    if error.is_conflict() {
        // Someone wrote the Service since our cache saw it; the newer version is already on
        // its way through the watch, so retry soon without counting a failure (nor an error
        // for the error-ratio alert).
        tracing::debug!(service = %ServiceName::of(&service), %error, "conflict; retrying soon");
        return Action::requeue(CONFLICT_RETRY);
    }
    ctx.metrics.error(class, error.kind());
    match class {
        ErrorClass::User if error.clears_outside_the_service() => {
            // Chosen by the failure path (`recheck_at`), as a retryable failure's delay is.
            let recheck = ctx
                .with_state(&key, |s| s.recheck_at)
                .map_or(ctx.config.backoff_max, |at| {
                    at.saturating_duration_since(Instant::now())
                });
            tracing::info!(
                service = %ServiceName::of(&service),
                %error,
                recheck_in = %humantime::format_duration(recheck),
                "user error; waiting for the Service to change or for the name to be freed"
            );
            Action::requeue(recheck)
        }
        ErrorClass::User => {
            tracing::info!(service = %ServiceName::of(&service), %error, "user error; waiting for the Service to change");
            Action::await_change()
        }
        ErrorClass::Retryable | ErrorClass::Environment => {
            let (base, max) = (ctx.config.backoff_base, ctx.config.backoff_max);
            let (delay, failures) = ctx.with_state(&key, |s| match s.retry_in.take() {
                // Chosen and announced by the failure path.
                Some(delay) => (delay, s.failures),
                None => {
                    s.failures = s.failures.saturating_add(1);
                    let delay = retry_delay(base, max, s.failures, rand::random::<f64>());
                    (delay, s.failures)
                }
            });
            tracing::warn!(
                service = %ServiceName::of(&service),
                %error,
                class = class.as_str(),
                ?delay,
                failures,
                "reconcile failed; retrying"
            );
            Action::requeue(delay)
        }
    }
}

async fn apply(api: &Api<Service>, service: Arc<Service>, ctx: &Context) -> Result<Action, Error> {
    if !ctx.is_leading() {
        return Ok(not_leading());
    }
    let key = ObjectRef::from_obj(service.as_ref());
    let name = ServiceName::of(&service);
    let fingerprint = user_fingerprint(&service);
    let (user_error, recheck_at) = ctx.with_state(&key, |s| (s.user_error, s.recheck_at));
    let now = Instant::now();
    let recheck_due = recheck_at.is_some_and(|at| at <= now);
    if user_error == Some(fingerprint) && !recheck_due {
        // Already reported; nothing the user has not changed can succeed now. A refused change
        // left its load balancer serving: when the Service stopped showing it (its status was
        // wiped or rewritten meanwhile), it shows it again, without a provider call.
        if let Some(refusal) = ctx.with_state(&key, |s| s.refused.clone()) {
            write_status(
                api,
                &service,
                ctx,
                Some(&refusal.ingress),
                ConditionChange::Set(&refusal.readiness),
            )
            .await?;
        }
        // An error that can clear outside the Service keeps its recheck: this pass (a
        // resync, an unrelated event) must not cancel it.
        return Ok(recheck_at.map_or_else(Action::await_change, |at| {
            Action::requeue(at.saturating_duration_since(now))
        }));
    }
    if user_error == Some(fingerprint) {
        tracing::info!(
            service = %name,
            "Service unchanged since its load balancer's name was found held by another owner; checking again"
        );
    }
    let (parsed, warnings) = match kube_lb_annotations::parse(ctx.config.cloud, &service) {
        Ok(parsed) => {
            let warnings = parsed.warnings.iter().map(ToString::to_string).collect();
            (Ok(parsed.spec), warnings)
        }
        Err(errors) => {
            let warnings = errors.warnings().iter().map(ToString::to_string).collect();
            (Err(errors), warnings)
        }
    };
    // One event per kind, each line exactly as `kube-lb lint` prints it: several events with
    // the same reason would be folded into one series by the recorder, losing all but one text.
    let warnings: Vec<String> = warnings;
    if !warnings.is_empty()
        && ctx.with_state(&key, |s| s.warned.replace(fingerprint)) != Some(fingerprint)
    {
        ctx.events
            .publish(&service, Reason::AnnotationWarning, warnings.join("; "))
            .await;
    }
    let spec = match parsed {
        Ok(spec) => spec,
        Err(errors) => {
            let text = errors.to_string();
            ctx.events
                .publish(&service, Reason::SyncLoadBalancerFailed, text.clone())
                .await;
            ctx.with_state(&key, |s| {
                s.user_error = Some(fingerprint);
                s.recheck_at = None;
                s.refused = None;
            });
            ctx.set_outcome(&name, Some(Outcome::UserError(text)));
            let readiness = Readiness::invalid(&errors).with_ignored(&warnings);
            report_failure(api, &service, ctx, &readiness, None).await;
            return Err(Error::InvalidService(errors));
        }
    };
    if !ctx.stores_ready().await {
        // The watches are gone: the controller is shutting down.
        return Ok(Action::await_change());
    }
    let backends = backends_for(&spec, ctx);
    let hashes = (hash_of(&spec), hash_of(&backends));
    let in_sync = ctx.with_state(&key, |s| {
        skip_ensure(s.synced.as_ref(), hashes, &service, Instant::now())
    });
    if let Some(next_resync) = in_sync {
        // A Node, EndpointSlice or status-only event that changed nothing the provider is
        // given: no provider call. The periodic resync still comes when it is due. The
        // condition is still brought up to date: an annotation edit that only adds a warning
        // leaves the spec as it was, and someone may have edited the condition.
        tracing::trace!(?next_resync, "load balancer in sync; no ensure");
        let shown = ctx.with_state(&key, |s| {
            s.synced
                .as_ref()
                .map(|synced| status::addresses(&synced.ingress))
        });
        if let Some(shown) = shown {
            let readiness = Readiness::provisioned(&shown).with_ignored(&warnings);
            write_status(api, &service, ctx, None, ConditionChange::Set(&readiness)).await?;
        }
        return Ok(Action::requeue(next_resync));
    }
    let echo = ctx.with_state(&key, |s| {
        echo_wait(s.echo.as_ref(), &service, Some(hashes), Instant::now())
    });
    if let Some(wait) = echo {
        // Woken by the status write of the failure being backed off, with nothing else
        // changed: the retry stays where the backoff put it.
        tracing::trace!(?wait, "own status write; retry not brought forward");
        return Ok(Action::requeue(wait));
    }
    // Until this ensure succeeds the load balancer's state is unknown: never skip on old news.
    ctx.with_state(&key, |s| s.synced = None);
    let applied = ctx.with_state(&key, |s| s.applied);
    let spec_changed = applied.map(|a| a.0) != Some(hashes.0);
    let backends_changed = applied.map(|a| a.1) != Some(hashes.1);
    if spec_changed {
        ctx.events
            .publish(
                &service,
                Reason::EnsuringLoadBalancer,
                "Ensuring load balancer",
            )
            .await;
    }
    tracing::debug!(backends = ?nodes::names(&backends), "ensuring load balancer");
    let ensured = within_provider_timeout(ctx, "ensure", ctx.provider.ensure(&spec, &backends));
    let lb_status = match ensured.await {
        Ok(lb_status) => lb_status,
        Err(ProviderError::ImplementedElsewhere) => {
            // Another controller owns this load balancer (upstream's ImplementedElsewhere):
            // no Warning, no retry loop; the finalizer stays as upstream keeps it, so deletion
            // still passes through us and finds nothing of ours to remove.
            tracing::debug!("load balancer implemented by another controller; leaving it alone");
            ctx.with_state(&key, |s| {
                s.failures = 0;
                s.applied = Some(hashes);
            });
            ctx.set_outcome(&name, Some(Outcome::ImplementedElsewhere));
            // Nothing of kube-lb's to report; a condition from before the Service was handed
            // over would only mislead.
            write_status(api, &service, ctx, None, ConditionChange::Remove).await?;
            return Ok(Action::await_change());
        }
        Err(error) => {
            let readiness = Readiness::from_provider(&error).map(|r| r.with_ignored(&warnings));
            let mut backoff = None;
            if error.is_retryable() {
                let within = schedule_retry(ctx, &key);
                let text = retry_note("Error syncing load balancer", &error, within);
                ctx.events
                    .publish(&service, Reason::SyncLoadBalancerFailed, text.clone())
                    .await;
                ctx.set_outcome(&name, Some(Outcome::Retrying(text)));
                let delay = ctx.with_state(&key, |s| s.retry_in).unwrap_or(within);
                backoff = Some((Some(hashes), delay));
            } else {
                let text = format!("Error syncing load balancer: {error}");
                ctx.events
                    .publish(&service, Reason::SyncLoadBalancerFailed, text)
                    .await;
                // A refusal leaves the load balancer that exists serving: the Service shows
                // its address along with the condition naming the refusal.
                let refusal = match (error.current_status(), &readiness) {
                    (Some(current), Some(readiness)) => Some(Refusal {
                        ingress: status::ingress(current),
                        readiness: readiness.clone(),
                    }),
                    _ => None,
                };
                let recheck_at = error
                    .may_clear_outside_the_service()
                    .then(|| Instant::now() + ctx.config.backoff_max);
                ctx.with_state(&key, |s| {
                    s.user_error = Some(fingerprint);
                    s.recheck_at = recheck_at;
                    s.refused = refusal.clone();
                });
                ctx.set_outcome(&name, Some(Outcome::UserError(error.to_string())));
                if let Some(refusal) = refusal {
                    // In one write, as a successful ensure writes them. A failed write fails
                    // the reconcile (a conflict is retried at once, anything else with
                    // backoff); the retry finds the refusal recorded and writes it again.
                    write_status(
                        api,
                        &service,
                        ctx,
                        Some(&refusal.ingress),
                        ConditionChange::Set(&refusal.readiness),
                    )
                    .await?;
                    tracing::info!(
                        addresses = ?status::addresses(&refusal.ingress),
                        "change refused; the existing load balancer keeps serving"
                    );
                    return Err(Error::Provider(error));
                }
            }
            if let Some(readiness) = readiness {
                report_failure(api, &service, ctx, &readiness, backoff).await;
            }
            return Err(Error::Provider(error));
        }
    };
    write_annotations(api, &service, &lb_status).await?;
    let ingress = status::ingress(&lb_status);
    let shown = status::addresses(&ingress);
    let readiness = if shown.is_empty() {
        Readiness::awaiting_address()
    } else {
        Readiness::provisioned(&shown)
    }
    .with_ignored(&warnings);
    // The address and the condition in one write.
    let written = write_status(
        api,
        &service,
        ctx,
        Some(&ingress),
        ConditionChange::Set(&readiness),
    )
    .await?;
    if spec_changed {
        ctx.events
            .publish(
                &service,
                Reason::EnsuredLoadBalancer,
                "Ensured load balancer",
            )
            .await;
    } else if backends_changed {
        ctx.events
            .publish(
                &service,
                Reason::UpdatedLoadBalancer,
                "Updated load balancer with new hosts",
            )
            .await;
    }
    ctx.with_state(&key, |s| {
        s.failures = 0;
        s.user_error = None;
        s.recheck_at = None;
        s.refused = None;
        s.applied = Some(hashes);
        s.echo = None;
    });
    if shown.is_empty() {
        // The provider is still provisioning (e.g. a DNS name not assigned yet).
        ctx.set_outcome(
            &name,
            Some(Outcome::Retrying("load balancer has no address yet".into())),
        );
        let recheck = ctx.config.backoff_base;
        if let Some(resource_version) = written {
            ctx.with_state(&key, |s| {
                s.echo = Some(Echo {
                    resource_version,
                    hashes: Some(hashes),
                    retry_at: Instant::now() + recheck,
                });
            });
        }
        return Ok(Action::requeue(recheck));
    }
    ctx.with_state(&key, |s| {
        s.synced = Some(Synced {
            hashes,
            ingress,
            fresh_until: Instant::now() + ctx.config.resync,
        });
    });
    ctx.set_outcome(&name, Some(Outcome::Ready(shown)));
    Ok(Action::requeue(ctx.config.resync))
}

/// A refused change in force ([`ProviderError::Refused`]): what the Service shows until it
/// changes, so a status wiped meanwhile is written again without asking the provider.
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    /// The ingress of the load balancer that keeps serving.
    ingress: Vec<LoadBalancerIngress>,
    /// The condition naming the refusal.
    readiness: Readiness,
}

/// A status write this controller made while a retry was pending, and when that retry is due.
/// The write comes back as a watch event that would run the reconcile at once; recognised by
/// its resourceVersion, it must not bring the retry forward (a throttled cloud would get one
/// extra call per change of the condition).
#[derive(Debug, Clone)]
pub(super) struct Echo {
    /// `metadata.resourceVersion` the write produced.
    resource_version: String,
    /// Hashes of the spec and backends the failed ensure was given (`None` for a delete).
    hashes: Option<(u64, u64)>,
    /// When the retry is due.
    retry_at: Instant,
}

/// `Some(time until the retry)` when `service` is exactly what our own write left (same
/// resourceVersion, same spec and backends) and the retry is not due yet; `None` when the
/// reconcile must go ahead.
fn echo_wait(
    echo: Option<&Echo>,
    service: &Service,
    hashes: Option<(u64, u64)>,
    now: Instant,
) -> Option<std::time::Duration> {
    let echo = echo?;
    let same = service.metadata.resource_version.as_deref() == Some(echo.resource_version.as_str())
        && echo.hashes == hashes;
    (same && now < echo.retry_at).then(|| echo.retry_at - now)
}

/// Sets the annotations the provider records its ids in (TKE's load-balancer id, CCE's BLB
/// id), before the status write so the status write's resourceVersion stays the newest.
async fn write_annotations(
    api: &Api<Service>,
    service: &Service,
    lb_status: &kube_lb_provider_core::LoadBalancerStatus,
) -> Result<(), Error> {
    let wanted = &lb_status.annotations;
    let Some(patch) = status::annotation_patch(service, wanted, &lb_status.stale_annotations)
    else {
        return Ok(());
    };
    api.patch(
        &service.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await?;
    tracing::debug!(keys = ?wanted.keys().collect::<Vec<_>>(), "annotations written back");
    Ok(())
}

/// Writes the status patch (ingress and condition together) when the Service does not show
/// them yet, and mirrors the condition into an Event, since `kubectl describe svc` prints
/// events but not Service conditions (the events layer publishes it when its text changed or
/// the last mirror is old enough to expire). Returns the resourceVersion the write produced,
/// `None` when nothing needed writing.
async fn write_status(
    api: &Api<Service>,
    service: &Service,
    ctx: &Context,
    ingress: Option<&[LoadBalancerIngress]>,
    condition: ConditionChange<'_>,
) -> Result<Option<String>, Error> {
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some(patch) = status::patch_for(service, ingress, condition, now) else {
        if let ConditionChange::Set(readiness) = condition {
            // Shown already; mirrored again only when the last mirror is due to expire.
            announce(service, ctx, readiness).await;
        }
        return Ok(None);
    };
    let written = match api
        .patch_status(
            &service.name_any(),
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await
    {
        Ok(written) => written,
        Err(kube::Error::Api(refusal)) if refusal.code == 422 => {
            return Err(superseded_or(api, service, refusal).await);
        }
        Err(error) => return Err(error.into()),
    };
    if let ConditionChange::Set(readiness) = condition {
        tracing::debug!(
            status = readiness.status().as_str(),
            reason = readiness.reason.as_str(),
            "condition written"
        );
        announce(service, ctx, readiness).await;
    }
    Ok(written.resource_version())
}

/// What a 422 answer to a status write of `service` means. The patch is built from the version
/// this reconcile read; when the stored Service is newer (retyped to ClusterIP meanwhile, so a
/// load-balancer status is forbidden, or deleted), the write lost a race and the newer version
/// will be reconciled: [`Error::Superseded`], not a failure. Against the same version the
/// refusal stands as the API error.
async fn superseded_or(
    api: &Api<Service>,
    service: &Service,
    refusal: Box<kube::core::Status>,
) -> Error {
    let stored = match api.get_opt(&service.name_any()).await {
        Ok(stored) => stored,
        // Cannot tell: report the refusal as it came.
        Err(_) => return Error::Kube(kube::Error::Api(refusal)),
    };
    let current = stored.as_ref().and_then(|s| s.resource_version());
    if current.is_none() || current != service.resource_version() {
        tracing::debug!(
            service = %ServiceName::of(service),
            refusal = %refusal.message,
            "status write refused for a Service that has changed since; the newer version comes next"
        );
        return Error::Superseded(refusal.message);
    }
    Error::Kube(kube::Error::Api(refusal))
}

/// Mirrors the condition into an Event (True as Normal `LoadBalancerReady`, False and
/// Unknown as Warning `LoadBalancerNotReady`), its note the condition's type, status, reason
/// and message. The events layer decides what is news: a text that differs from the last one
/// mirrored (status, reason or only the message), or the same text once the last mirror is
/// old enough for the API server to expire it.
async fn announce(service: &Service, ctx: &Context, readiness: &Readiness) {
    let reason = match readiness.status() {
        ConditionStatus::True => Reason::LoadBalancerReady,
        ConditionStatus::False | ConditionStatus::Unknown => Reason::LoadBalancerNotReady,
    };
    ctx.events
        .publish(service, reason, readiness.event_note())
        .await;
}

/// Writes the condition of a failure. The failure is what the reconcile reports, so a failed
/// write is only logged. With `backoff` (`(hashes, delay)` of a retried failure) the write is
/// remembered as an [`Echo`], so the watch event it causes does not retry at once.
async fn report_failure(
    api: &Api<Service>,
    service: &Service,
    ctx: &Context,
    readiness: &Readiness,
    backoff: Option<(Option<(u64, u64)>, std::time::Duration)>,
) {
    match write_status(api, service, ctx, None, ConditionChange::Set(readiness)).await {
        Ok(Some(resource_version)) => {
            if let Some((hashes, delay)) = backoff {
                let key = ObjectRef::from_obj(service);
                ctx.with_state(&key, |s| {
                    s.echo = Some(Echo {
                        resource_version,
                        hashes,
                        retry_at: Instant::now() + delay,
                    });
                });
            }
        }
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(
                %error,
                reason = readiness.reason.as_str(),
                "could not write the condition"
            );
        }
    }
}

/// What the last successful ensure of a Service was given and what it wrote, so the next
/// reconcile can tell whether the provider needs calling at all.
#[derive(Debug, Clone)]
pub(super) struct Synced {
    /// Hashes of the spec and of the backends as given to the provider.
    hashes: (u64, u64),
    /// The ingress written into the Service's status.
    ingress: Vec<LoadBalancerIngress>,
    /// When the periodic resync is due (it repairs drift made outside Kubernetes).
    fresh_until: Instant,
}

/// `Some(time to the next periodic resync)` when the ensure can be skipped: the last ensure
/// succeeded with this very spec and backends, the Service still shows the address it
/// returned, and the periodic resync is not due; `None` when the provider must be called.
fn skip_ensure(
    synced: Option<&Synced>,
    hashes: (u64, u64),
    service: &Service,
    now: Instant,
) -> Option<std::time::Duration> {
    let synced = synced?;
    let unchanged = synced.hashes == hashes;
    // Someone cleared or edited the status: write it again, through a fresh ensure.
    let status_intact = status::ingress_shown(service, &synced.ingress);
    (unchanged && status_intact && now < synced.fresh_until).then(|| synced.fresh_until - now)
}

fn backends_for(spec: &LoadBalancerSpec, ctx: &Context) -> Vec<kube_lb_provider_core::BackendNode> {
    let node_state = ctx.nodes.state();
    let readiness = nodes::Readiness::now(ctx.config.node_ready_grace);
    let eligible = nodes::eligible_nodes(node_state.iter().map(AsRef::as_ref), &readiness);
    let slice_state = ctx.slices.state();
    nodes::provider_backends(
        spec,
        &eligible,
        slice_state.iter().map(AsRef::as_ref),
        |n| ctx.provider.accepts_node(spec, n),
    )
}

/// Deletes the load balancer. Returns [`Action::await_change`] only when it is gone; any other
/// action means nothing was deleted yet and the finalizer must stay.
async fn cleanup(
    api: &Api<Service>,
    service: Arc<Service>,
    ctx: &Context,
) -> Result<Action, Error> {
    if !ctx.is_leading() {
        return Ok(not_leading());
    }
    let key = service_key(&service)?;
    let object = ObjectRef::from_obj(service.as_ref());
    let echo = ctx.with_state(&object, |s| {
        echo_wait(s.echo.as_ref(), &service, None, Instant::now())
    });
    if let Some(wait) = echo {
        // Woken by the condition of the failed delete being backed off.
        return Ok(Action::requeue(wait));
    }
    ctx.events
        .publish(
            &service,
            Reason::DeletingLoadBalancer,
            "Deleting load balancer",
        )
        .await;
    match within_provider_timeout(ctx, "delete", ctx.provider.delete(&key)).await {
        // Nothing of ours exists for a load balancer another controller implements.
        Ok(()) | Err(ProviderError::ImplementedElsewhere) => {}
        Err(error) => {
            // Every delete failure is retried: the Service is going away or no longer ours,
            // so no edit by its author could help, and the finalizer must come off.
            let within = schedule_retry(ctx, &object);
            ctx.events
                .publish(
                    &service,
                    Reason::SyncLoadBalancerFailed,
                    retry_note("Error deleting load balancer", &error, within),
                )
                .await;
            // Said on the Service too: a deletion stuck on the cloud shows why.
            let delay = ctx.with_state(&object, |s| s.retry_in).unwrap_or(within);
            let readiness = Readiness::delete_failed(&error);
            report_failure(api, &service, ctx, &readiness, Some((None, delay))).await;
            return Err(Error::Delete(error));
        }
    }
    ctx.events
        .publish(
            &service,
            Reason::DeletedLoadBalancer,
            "Deleted load balancer",
        )
        .await;
    ctx.forget(
        &ObjectRef::from_obj(service.as_ref()),
        &ServiceName::of(&service),
    );
    Ok(Action::await_change())
}

/// The Service stopped being ours while carrying our finalizer: delete the load balancer, then
/// clear the status, then drop the finalizer, in that order so a crash at any point is redone.
async fn release(
    api: &Api<Service>,
    service: Arc<Service>,
    ctx: &Context,
) -> Result<Action, Error> {
    if !ctx.is_leading() {
        return Ok(not_leading());
    }
    tracing::debug!("no longer a load balancer of ours: releasing");
    let action = cleanup(api, service.clone(), ctx).await?;
    if action != Action::await_change() {
        // Not leading, or waiting out the backoff of a failed delete.
        return Ok(action);
    }
    let name = service.name_any();
    // The address and kube-lb's condition go in one write.
    if write_status(api, &service, ctx, Some(&[]), ConditionChange::Remove)
        .await?
        .is_some()
    {
        tracing::debug!("status and condition cleared");
    }
    // Re-read: the status patch changed the resourceVersion the finalizer patch is guarded by.
    let current = Arc::new(api.get(&name).await?);
    if matches!(Disposition::of(&current, &ctx.config), Disposition::Manage) {
        // Made a load balancer again while we released it: the finalizer stays (dropping it
        // now would let a delete that follows skip the cleanup of the load balancer the next
        // reconcile creates — seen in the chaos suite when the watch cache still showed the
        // finalizer), and the Service is ensured again.
        tracing::debug!("a load balancer of ours again: finalizer kept");
        return Ok(Action::requeue(CONFLICT_RETRY));
    }
    finalizer::set(api, &current, false).await?;
    tracing::debug!("finalizer removed");
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube_lb_annotations::Cloud;

    use super::*;
    use crate::controller::ControllerConfig;

    fn svc(type_: &str, class: Option<&str>, finalized: bool, deleting: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                finalizers: finalized.then(|| vec![FINALIZER.to_string()]),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some(type_.into()),
                load_balancer_class: class.map(String::from),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn dispositions() {
        let config = ControllerConfig::new(Cloud::Local);
        let cases = [
            (svc("LoadBalancer", None, false, false), Disposition::Manage),
            (svc("LoadBalancer", None, true, false), Disposition::Manage),
            (svc("LoadBalancer", None, true, true), Disposition::Manage),
            (svc("LoadBalancer", None, false, true), Disposition::Ignore),
            (svc("ClusterIP", None, false, false), Disposition::Ignore),
            (svc("ClusterIP", None, true, false), Disposition::Release),
            (svc("NodePort", None, true, true), Disposition::Manage),
            (
                svc("LoadBalancer", Some("other.io/x"), false, false),
                Disposition::Ignore,
            ),
            (
                svc("LoadBalancer", Some("other.io/x"), true, false),
                Disposition::Release,
            ),
        ];
        for (service, want) in cases {
            assert_eq!(
                Disposition::of(&service, &config),
                want,
                "{:?}",
                service.spec
            );
        }
    }

    #[test]
    fn ensure_is_skipped_only_when_nothing_it_depends_on_changed() {
        use k8s_openapi::api::core::v1::{LoadBalancerStatus, ServiceStatus};
        let now = Instant::now();
        let resync = std::time::Duration::from_secs(600);
        let ingress = vec![LoadBalancerIngress {
            ip: Some("127.240.0.1".into()),
            ..Default::default()
        }];
        let with_status = |ingress: Vec<LoadBalancerIngress>| {
            let mut s = svc("LoadBalancer", None, true, false);
            s.status = Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(ingress),
                }),
                ..Default::default()
            });
            s
        };
        let shown = with_status(ingress.clone());
        let cleared = svc("LoadBalancer", None, true, false);
        let edited = with_status(vec![LoadBalancerIngress {
            ip: Some("192.0.2.1".into()),
            ..Default::default()
        }]);
        let synced = Synced {
            hashes: (1, 2),
            ingress,
            fresh_until: now + resync,
        };
        let second = std::time::Duration::from_secs(1);
        // (case, last ensure, hashes now, Service now, time, expected skip)
        let cases = [
            ("in sync", Some(&synced), (1, 2), &shown, now, Some(resync)),
            ("never ensured (or failed)", None, (1, 2), &shown, now, None),
            ("spec changed", Some(&synced), (9, 2), &shown, now, None),
            ("backends changed", Some(&synced), (1, 9), &shown, now, None),
            ("status cleared", Some(&synced), (1, 2), &cleared, now, None),
            ("status edited", Some(&synced), (1, 2), &edited, now, None),
            (
                "just before the resync",
                Some(&synced),
                (1, 2),
                &shown,
                now + resync - second,
                Some(second),
            ),
            (
                "resync due",
                Some(&synced),
                (1, 2),
                &shown,
                now + resync,
                None,
            ),
        ];
        for (case, last, hashes, service, at, want) in cases {
            assert_eq!(skip_ensure(last, hashes, service, at), want, "{case}");
        }
    }

    #[test]
    fn service_key_and_fingerprints() {
        let s = svc("LoadBalancer", None, false, false);
        let key = service_key(&s).unwrap();
        assert_eq!(
            (key.namespace.as_str(), key.name.as_str(), key.uid.as_str()),
            ("default", "web", "u-1")
        );
        let mut annotated = s.clone();
        annotated
            .metadata
            .annotations
            .get_or_insert_default()
            .insert("a".into(), "b".into());
        assert_ne!(user_fingerprint(&s), user_fingerprint(&annotated));
        let mut status_only = s.clone();
        status_only.status = Some(Default::default());
        assert_eq!(
            user_fingerprint(&s),
            user_fingerprint(&status_only),
            "status is not the user's"
        );
        let mut nameless = s;
        nameless.metadata.uid = None;
        assert!(matches!(
            service_key(&nameless),
            Err(Error::MissingField("uid"))
        ));
    }
}

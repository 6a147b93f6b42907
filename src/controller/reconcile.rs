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
pub(super) use super::decide::{Echo, Refusal, Synced};
use super::events::Reason;
use super::finalizer::{self, FINALIZER, Step};
use super::status::ConditionChange;
use super::{Context, Error, ErrorClass, ServiceName, decide, nodes, retry_delay, status};

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
    // Whatever the outcome, this Service no longer holds a node sync pass open.
    let _reconciled = Reconciled {
        ctx: &ctx,
        service: ServiceName::of(&service).to_string(),
    };
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
            Step::Add => perform(&api, &service, &ctx, decide::add_finalizer()).await?,
            Step::Apply => apply(&api, service, &ctx).await?,
            // Only a cleanup that deleted the load balancer releases the finalizer; one that
            // returned early (not leading, waiting out a backoff) does not.
            Step::Cleanup => cleanup(&api, service, &ctx, true).await?,
            Step::Done => Action::await_change(),
        },
    };
    timer.success();
    Ok(action)
}

/// Tells the metrics a Service was reconciled when dropped, so every return counts.
struct Reconciled<'a> {
    ctx: &'a Context,
    service: String,
}

impl Drop for Reconciled<'_> {
    fn drop(&mut self) {
        self.ctx.metrics.reconciled(&self.service);
    }
}

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
    let fingerprint = user_fingerprint(&service);
    let gate = ctx.with_state(&key, |s| {
        decide::user_error_gate(s, fingerprint, Instant::now())
    });
    match gate {
        decide::Gate::Hold(plan) => return perform(api, &service, ctx, plan).await,
        decide::Gate::Recheck => tracing::info!(
            service = %ServiceName::of(&service),
            "Service unchanged since its load balancer's name was found held by another owner; checking again"
        ),
        decide::Gate::Proceed => {}
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
    // Each line exactly as `kube-lb lint` prints it.
    let warnings: Vec<String> = warnings;
    let announced = ctx.with_state(&key, |s| {
        decide::annotation_warnings(s, &warnings, fingerprint)
    });
    run_effects(api, &service, ctx, announced).await?;
    let spec = match parsed {
        Ok(spec) => spec,
        Err(errors) => {
            let plan = decide::invalid(errors, fingerprint, &warnings);
            return perform(api, &service, ctx, plan).await;
        }
    };
    if !ctx.stores_ready().await {
        // The watches are gone: the controller is shutting down.
        return Ok(Action::await_change());
    }
    let backends = backends_for(&spec, ctx);
    let hashes = (hash_of(&spec), hash_of(&backends));
    let skipped = ctx.with_state(&key, |s| {
        decide::skip(s, &service, hashes, &warnings, Instant::now())
    });
    if let Some((why, plan)) = skipped {
        match why {
            decide::Skip::InSync(next_resync) => {
                tracing::trace!(?next_resync, "load balancer in sync; no ensure");
            }
            decide::Skip::Echo(wait) => {
                tracing::trace!(?wait, "own status write; retry not brought forward");
            }
        }
        return perform(api, &service, ctx, plan).await;
    }
    let (before, cause) = ctx.with_state(&key, |s| {
        (
            decide::before_ensure(s, hashes),
            decide::ensure_cause(s, hashes),
        )
    });
    run_effects(api, &service, ctx, before.effects).await?;
    tracing::debug!(backends = ?nodes::names(&backends), ?cause, "ensuring load balancer");
    let started = Instant::now();
    let ensured = within_provider_timeout(ctx, "ensure", ctx.provider.ensure(&spec, &backends));
    let outcome = ensured.await;
    ctx.metrics
        .ensured(cause, started.elapsed(), outcome.is_ok());
    match &outcome {
        Ok(lb_status) => write_annotations(api, &service, lb_status).await?,
        Err(ProviderError::ImplementedElsewhere) => {
            tracing::debug!("load balancer implemented by another controller; leaving it alone");
        }
        Err(_) => {}
    }
    let input = decide::EnsureInput {
        hashes,
        fingerprint,
        warnings: &warnings,
        timing: timing(ctx),
        jitter: rand::random::<f64>(),
        now: Instant::now(),
    };
    let plan = ctx.with_state(&key, |s| decide::after_ensure(s, input, outcome));
    perform(api, &service, ctx, plan).await
}

fn timing(ctx: &Context) -> decide::Timing {
    decide::Timing {
        backoff_base: ctx.config.backoff_base,
        backoff_max: ctx.config.backoff_max,
        resync: ctx.config.resync,
    }
}

/// Performs a decision's effects, then returns as it says. A decision that asks for the
/// provider call is performed with [`run_effects`] instead.
async fn perform(
    api: &Api<Service>,
    service: &Arc<Service>,
    ctx: &Context,
    plan: decide::Plan,
) -> Result<Action, Error> {
    run_effects(api, service, ctx, plan.effects).await?;
    match plan.next {
        decide::Next::Return(action) => Ok(action),
        decide::Next::Fail(error) => Err(error),
        // Only the decisions before a provider call ask for it, and their callers make it.
        decide::Next::Call => Ok(Action::await_change()),
    }
}

/// Performs effects in order; a failed write that must fail the reconcile stops there.
async fn run_effects(
    api: &Api<Service>,
    service: &Arc<Service>,
    ctx: &Context,
    effects: Vec<decide::Effect>,
) -> Result<(), Error> {
    use decide::{Condition, Effect, OnError};
    let key = ObjectRef::from_obj(service.as_ref());
    // The resourceVersion of this reconcile's last status write, for an echo.
    let mut written: Option<String> = None;
    for effect in effects {
        match effect {
            Effect::Record(update) => ctx.with_state(&key, |s| update.record(s, Instant::now())),
            Effect::Publish(reason, note) => ctx.events.publish(service, reason, note).await,
            Effect::Outcome(outcome) => ctx.set_outcome(&ServiceName::of(service), outcome),
            Effect::Forget => ctx.forget(&key, &ServiceName::of(service)),
            Effect::WriteStatus {
                ingress,
                condition,
                on_error,
            } => {
                let change = match &condition {
                    Condition::Set(readiness) => ConditionChange::Set(readiness),
                    Condition::Remove => ConditionChange::Remove,
                };
                match write_status(api, service, ctx, ingress.as_deref(), change).await {
                    Ok(resource_version) => written = resource_version,
                    Err(error) if on_error == OnError::Fail => return Err(error),
                    Err(error) => {
                        written = None;
                        if let Condition::Set(readiness) = &condition {
                            tracing::warn!(
                                %error,
                                reason = readiness.reason.as_str(),
                                "could not write the condition"
                            );
                        }
                    }
                }
            }
            Effect::Echo { hashes, delay } => {
                if let Some(resource_version) = written.clone() {
                    ctx.with_state(&key, |s| {
                        s.echo = Some(Echo {
                            resource_version,
                            hashes,
                            retry_at: Instant::now() + delay,
                        });
                    });
                }
            }
            Effect::NoteRefusal(addresses) => tracing::info!(
                ?addresses,
                "change refused; the existing load balancer keeps serving"
            ),
            Effect::Finalizer(present) => finalizer::set(api, service, present).await?,
        }
    }
    Ok(())
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

/// Deletes the load balancer. Returns [`Action::await_change`] only when it is gone (and, with
/// `finalize`, the finalizer removed); any other action means nothing was deleted yet and the
/// finalizer must stay.
async fn cleanup(
    api: &Api<Service>,
    service: Arc<Service>,
    ctx: &Context,
    finalize: bool,
) -> Result<Action, Error> {
    if !ctx.is_leading() {
        return Ok(not_leading());
    }
    let key = service_key(&service)?;
    let object = ObjectRef::from_obj(service.as_ref());
    let before = ctx.with_state(&object, |s| {
        decide::before_delete(s, &service, Instant::now())
    });
    if !matches!(before.next, decide::Next::Call) {
        // Woken by the condition of the failed delete being backed off.
        return perform(api, &service, ctx, before).await;
    }
    run_effects(api, &service, ctx, before.effects).await?;
    let outcome = within_provider_timeout(ctx, "delete", ctx.provider.delete(&key)).await;
    let (timing, jitter) = (timing(ctx), rand::random::<f64>());
    let plan = ctx.with_state(&object, |s| {
        decide::after_delete(s, timing, jitter, finalize, outcome)
    });
    perform(api, &service, ctx, plan).await
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
    let action = cleanup(api, service.clone(), ctx, false).await?;
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
    let managed_again = matches!(Disposition::of(&current, &ctx.config), Disposition::Manage);
    if managed_again {
        // Seen in the chaos suite when the watch cache still showed the finalizer.
        tracing::debug!("a load balancer of ours again: finalizer kept");
    }
    let action = perform(
        api,
        &current,
        ctx,
        decide::finish_release(managed_again, CONFLICT_RETRY),
    )
    .await?;
    if !managed_again {
        tracing::debug!("finalizer removed");
    }
    Ok(action)
}

#[cfg(test)]
#[path = "reconcile_tests.rs"]
mod tests;

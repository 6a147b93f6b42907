//! Leaked load-balancer resources: what a provider owns (its ownership tags, labels or names)
//! whose Service no longer needs it. `kube-lb audit` prints them (and can delete them through
//! the provider's resumable delete); the controller can run the same audit periodically and
//! export the count (`--audit-interval`, off by default), and remove what two audits in a row
//! found leaked because its Service is gone (`--audit-delete`).
//!
//! The judgement is one pure function, [`classify`], over the provider's
//! [`OwnedResource`]s and a [`ServiceView`] per Service, so the command and the controller can
//! never disagree:
//!
//! - a resource is matched to its Service by UID when the resource records one (also a UID
//!   prefix, for clouds whose 32-character names keep only part of it), else by
//!   namespace/name;
//! - it is leaked when that Service no longer exists, is being deleted without kube-lb's
//!   finalizer (nothing will clean up), is no longer `type: LoadBalancer`, or has a
//!   `loadBalancerClass` this controller does not handle;
//! - resources of a Service this controller manages (or is cleaning up) are never listed, and
//!   neither are those of a Service that does not decode (it cannot be judged);
//! - a shared resource (a node security-group rule, a shared health check) is leaked only when
//!   no Service of this controller remains at all — simple and conservative: a shared rule kept
//!   for a while is harmless, one removed under a live Service is an outage.
//!
//! The provider's resources are read before the Services, so a Service created during an
//! audit cannot make its brand-new load balancer look leaked; one deleted between the two
//! reads can show once, until the controller has cleaned it up.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::core::ApiResource;
use kube::{Client, ResourceExt};
use kube_lb_provider_core::{LoadBalancerProvider, OwnedResource, ProviderError, ServiceKey};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controller::tolerant::{self, DecodeError, RawObject};
use crate::controller::{ControllerConfig, Disposition};
use crate::metrics::Metrics;

/// What the audit needs to know about one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceView {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// Whether its load balancer is still needed, and if not why.
    pub state: ServiceState,
}

/// Where a Service stands for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceState {
    /// This controller manages its load balancer, or is cleaning it up (deleted, finalizer
    /// still on): its resources are in use.
    InUse,
    /// It did not decode, so it cannot be judged: its resources count as in use.
    Unknown,
    /// Being deleted without kube-lb's finalizer: nothing will clean its load balancer up.
    DeletingWithoutFinalizer,
    /// No longer `type: LoadBalancer`.
    NotLoadBalancer {
        /// Its `spec.type`.
        type_: String,
    },
    /// A `type: LoadBalancer` Service of a class this controller does not handle.
    OtherClass {
        /// Its `spec.loadBalancerClass` (`None`: unclassed, and this controller is not the
        /// default implementation).
        class: Option<String>,
    },
}

impl ServiceView {
    /// Judges `service` the way the controller does ([`Disposition::of`]).
    pub fn judge(service: &Service, config: &ControllerConfig) -> Self {
        let spec = service.spec.as_ref();
        let state = if Disposition::of(service, config) == Disposition::Manage {
            ServiceState::InUse
        } else if service.metadata.deletion_timestamp.is_some() {
            ServiceState::DeletingWithoutFinalizer
        } else {
            let type_ = spec
                .and_then(|s| s.type_.clone())
                .unwrap_or_else(|| "ClusterIP".to_string());
            if type_ == "LoadBalancer" {
                ServiceState::OtherClass {
                    class: spec.and_then(|s| s.load_balancer_class.clone()),
                }
            } else {
                ServiceState::NotLoadBalancer { type_ }
            }
        };
        Self {
            namespace: service.namespace().unwrap_or_default(),
            name: service.name_any(),
            uid: service.uid().unwrap_or_default(),
            state,
        }
    }

    /// A Service that did not decode: named and identified by what its metadata gave.
    pub fn unknown(raw: &RawObject) -> Self {
        Self {
            namespace: raw.metadata.namespace.clone().unwrap_or_default(),
            name: raw.metadata.name.clone().unwrap_or_default(),
            uid: raw.metadata.uid.clone().unwrap_or_default(),
            state: ServiceState::Unknown,
        }
    }

    fn in_use(&self) -> bool {
        matches!(self.state, ServiceState::InUse | ServiceState::Unknown)
    }
}

/// Why a resource is considered leaked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeakReason {
    /// No Service with the recorded identity exists.
    ServiceDeleted {
        /// A Service of the same namespace/name exists, with another UID (deleted, then
        /// created again).
        recreated: bool,
    },
    /// See [`ServiceState::DeletingWithoutFinalizer`].
    DeletingWithoutFinalizer,
    /// See [`ServiceState::NotLoadBalancer`].
    NotLoadBalancer {
        /// The Service's `spec.type`.
        type_: String,
    },
    /// See [`ServiceState::OtherClass`].
    OtherClass {
        /// The Service's `spec.loadBalancerClass`.
        class: Option<String>,
    },
    /// A shared resource, and no Service of this controller remains.
    SharedUnused,
}

impl LeakReason {
    /// A stable code for scripts (`-o json`).
    pub fn code(&self) -> &'static str {
        match self {
            LeakReason::ServiceDeleted { .. } => "ServiceDeleted",
            LeakReason::DeletingWithoutFinalizer => "DeletingWithoutFinalizer",
            LeakReason::NotLoadBalancer { .. } => "NotLoadBalancer",
            LeakReason::OtherClass { .. } => "OtherClass",
            LeakReason::SharedUnused => "SharedUnused",
        }
    }
}

impl fmt::Display for LeakReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeakReason::ServiceDeleted { recreated: false } => f.write_str("Service deleted"),
            LeakReason::ServiceDeleted { recreated: true } => {
                f.write_str("Service deleted (a Service of that name exists with another UID)")
            }
            LeakReason::DeletingWithoutFinalizer => {
                f.write_str("Service is being deleted without kube-lb's finalizer")
            }
            LeakReason::NotLoadBalancer { type_ } => write!(f, "Service is type {type_}"),
            LeakReason::OtherClass { class: Some(class) } => {
                write!(f, "Service has loadBalancerClass {class}, not handled here")
            }
            LeakReason::OtherClass { class: None } => f.write_str(
                "Service has no loadBalancerClass and this controller is not the default",
            ),
            LeakReason::SharedUnused => {
                f.write_str("shared, and no LoadBalancer Service of this controller remains")
            }
        }
    }
}

/// One leaked resource and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// The resource, as the provider listed it.
    pub resource: OwnedResource,
    /// Why it is leaked.
    pub reason: LeakReason,
}

/// True when a Service with `uid` is the one a resource recorded as `recorded`: the same UID,
/// or (for names that keep only part of it, like AWS's 32-character load-balancer names) a
/// prefix of at least 16 hex digits of it, dashes and case aside.
pub fn uid_matches(uid: &str, recorded: &str) -> bool {
    if uid == recorded {
        return true;
    }
    let digits = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let (uid, recorded) = (digits(uid), digits(recorded));
    recorded.len() >= 16 && uid.len() > recorded.len() && uid.starts_with(&recorded)
}

/// The Service a resource belongs to, if it still exists.
fn owner<'a>(services: &'a [ServiceView], key: &ServiceKey) -> Option<&'a ServiceView> {
    if key.uid.is_empty() {
        services
            .iter()
            .find(|s| s.namespace == key.namespace && s.name == key.name)
    } else {
        services.iter().find(|s| uid_matches(&s.uid, &key.uid))
    }
}

/// The leaked resources among `resources`, in their order (see the module documentation for
/// the rules).
pub fn classify(resources: &[OwnedResource], services: &[ServiceView]) -> Vec<Leak> {
    let any_in_use = services.iter().any(ServiceView::in_use);
    resources
        .iter()
        .filter_map(|resource| {
            let reason = if resource.shared {
                (!any_in_use).then_some(LeakReason::SharedUnused)
            } else {
                match owner(services, &resource.service) {
                    None => Some(LeakReason::ServiceDeleted {
                        recreated: services.iter().any(|s| {
                            s.namespace == resource.service.namespace
                                && s.name == resource.service.name
                        }),
                    }),
                    Some(service) => match &service.state {
                        ServiceState::InUse | ServiceState::Unknown => None,
                        ServiceState::DeletingWithoutFinalizer => {
                            Some(LeakReason::DeletingWithoutFinalizer)
                        }
                        ServiceState::NotLoadBalancer { type_ } => {
                            Some(LeakReason::NotLoadBalancer {
                                type_: type_.clone(),
                            })
                        }
                        ServiceState::OtherClass { class } => Some(LeakReason::OtherClass {
                            class: class.clone(),
                        }),
                    },
                }
            };
            reason.map(|reason| Leak {
                resource: resource.clone(),
                reason,
            })
        })
        .collect()
}

/// How long ago `created` (RFC 3339) was, at `now` (zero when it lies ahead); `None` when
/// unknown or unreadable.
pub fn age(created: Option<&str>, now: Timestamp) -> Option<Duration> {
    let created: Timestamp = created?.parse().ok()?;
    // A creation time ahead of our clock is skew, not a negative age.
    Some(Duration::try_from(now.duration_since(created)).unwrap_or_default())
}

/// An age as `kubectl get` shows it: `45s`, `12m`, `5h`, `3d`.
pub fn format_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0..120 => format!("{secs}s"),
        120..7_200 => format!("{}m", secs / 60),
        7_200..172_800 => format!("{}h", secs / 3_600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// Leaked resources per kind, for the gauge.
pub fn count_by_kind(leaks: &[Leak]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for leak in leaks {
        *counts.entry(leak.resource.kind.clone()).or_insert(0) += 1;
    }
    counts
}

/// Identity of one leaked resource from one audit to the next.
pub type LeakId = (String, String, ServiceKey);

fn leak_id(leak: &Leak) -> LeakId {
    (
        leak.resource.kind.clone(),
        leak.resource.name.clone(),
        leak.resource.service.clone(),
    )
}

/// Whether the controller may remove a leak on its own (`--audit-delete`): only when its Service
/// is gone or going without kube-lb's finalizer. A Service that still exists (no longer a
/// LoadBalancer, another class) is released by its own reconcile, and a removal racing it could
/// take the load balancer of a Service that has just turned back; shared resources wait until
/// an operator runs `kube-lb audit --delete`.
pub fn removable(reason: &LeakReason) -> bool {
    matches!(
        reason,
        LeakReason::ServiceDeleted { .. } | LeakReason::DeletingWithoutFinalizer
    )
}

/// The Services whose leaked resources to remove now: those with a removable leak that the
/// previous audit (`previous`, the [`LeakId`]s it found) found too. One sighting is not enough:
/// a Service deleted between an audit's two reads shows once while the controller is still
/// cleaning it up. Also returns this audit's ids, for the next call.
pub fn confirmed_removals(
    previous: &BTreeSet<LeakId>,
    leaks: &[Leak],
) -> (Vec<ServiceKey>, BTreeSet<LeakId>) {
    let seen: BTreeSet<LeakId> = leaks.iter().map(leak_id).collect();
    let services: BTreeSet<ServiceKey> = leaks
        .iter()
        .filter(|leak| removable(&leak.reason) && previous.contains(&leak_id(leak)))
        .map(|leak| leak.resource.service.clone())
        .collect();
    (services.into_iter().collect(), seen)
}

/// Why an audit could not be completed. Never a shorter answer: an audit that could not read
/// everything reports nothing.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The provider could not list its resources.
    #[error("listing the provider's resources: {0}")]
    Provider(#[from] ProviderError),
    /// The Services could not be listed.
    #[error("listing Services: {0}")]
    Kubernetes(#[from] kube::Error),
}

/// A Service that does not decode.
#[derive(Debug, Clone)]
pub struct Undecodable {
    /// What its metadata gave (state [`ServiceState::Unknown`]).
    pub view: ServiceView,
    /// Why it does not decode.
    pub error: DecodeError,
    /// Whether it may be a load balancer of ours: `spec.type` reads `LoadBalancer` or it
    /// carries kube-lb's finalizer.
    pub maybe_ours: bool,
}

/// Every Service of the cluster, read item by item: the decoded ones, and those that do not
/// decode.
pub async fn list_services(
    client: Client,
) -> Result<(Vec<Service>, Vec<Undecodable>), kube::Error> {
    let api: Api<RawObject> = Api::all_with(client, &ApiResource::erase::<Service>(&()));
    let list = api.list(&ListParams::default()).await?;
    let mut services = Vec::with_capacity(list.items.len());
    let mut undecodable = Vec::new();
    for raw in &list.items {
        match tolerant::decode::<Service>(raw) {
            Ok(service) => services.push(service),
            Err(error) => undecodable.push(Undecodable {
                view: ServiceView::unknown(raw),
                error,
                maybe_ours: raw
                    .value
                    .pointer("/spec/type")
                    .and_then(serde_json::Value::as_str)
                    == Some("LoadBalancer")
                    || raw
                        .metadata
                        .finalizers
                        .iter()
                        .flatten()
                        .any(|f| f == crate::controller::FINALIZER),
            }),
        }
    }
    Ok((services, undecodable))
}

/// One audit's result.
#[derive(Debug, Clone)]
pub struct Audit {
    /// How many resources the provider owns.
    pub owned: usize,
    /// The leaked ones.
    pub leaks: Vec<Leak>,
    /// Services that did not decode (their resources were counted as in use).
    pub undecodable: Vec<DecodeError>,
    /// Load balancers of this controller that no owned resource names as its Service: new, or
    /// (on manifests read without their UIDs) the owner under a new UID of a resource that
    /// records only the old one.
    pub unowned_services: Vec<ServiceKey>,
}

/// The in-use Services among `services` that no resource of `owned` belongs to.
pub fn unowned_services(owned: &[OwnedResource], services: &[ServiceView]) -> Vec<ServiceKey> {
    services
        .iter()
        .filter(|s| s.state == ServiceState::InUse)
        .filter(|s| {
            !owned
                .iter()
                .any(|r| owner(std::slice::from_ref(*s), &r.service).is_some())
        })
        .map(|s| ServiceKey {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            uid: s.uid.clone(),
        })
        .collect()
}

/// Reads the provider's resources, then the Services, and classifies.
pub async fn find_leaks(
    client: Client,
    provider: &dyn LoadBalancerProvider,
    config: &ControllerConfig,
) -> Result<Audit, AuditError> {
    let owned = provider.owned_resources().await?;
    let (services, undecodable) = list_services(client).await?;
    let mut views: Vec<ServiceView> = services
        .iter()
        .map(|s| ServiceView::judge(s, config))
        .collect();
    let mut errors = Vec::with_capacity(undecodable.len());
    for Undecodable { view, error, .. } in undecodable {
        views.push(view);
        errors.push(error);
    }
    Ok(Audit {
        owned: owned.len(),
        leaks: classify(&owned, &views),
        undecodable: errors,
        unowned_services: unowned_services(&owned, &views),
    })
}

/// How the controller audits (`--audit-interval`, `--audit-delete`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeriodicAudit {
    /// Time between audits.
    pub interval: Duration,
    /// Remove what [`confirmed_removals`] selects, through the provider's delete.
    pub delete: bool,
}

/// The controller's periodic audit: every `interval` while this replica leads (the leader's
/// view is the one that matters, and for `local` the only one that holds allocations), counts
/// the leaked resources per kind into `kube_lb_audit_leaked_resources` and stamps
/// `kube_lb_audit_last_success_timestamp_seconds`. A failed audit is logged and leaves both
/// unchanged. Reads only, unless `delete`: then the resources of Services that are gone, found
/// leaked by two audits in a row, are removed through the provider's delete (each bounded by
/// the controller's provider timeout) and counted in `kube_lb_audit_deleted_resources_total`.
/// That closes the one leak a crash can leave that no reconcile revisits: a create still in
/// flight when its replica died, landing after the Service's cleanup.
pub async fn run_periodic(
    client: Client,
    provider: Arc<dyn LoadBalancerProvider>,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    schedule: PeriodicAudit,
    leading: watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    let mut previous = BTreeSet::new();
    let mut ticker = tokio::time::interval(schedule.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if !*leading.borrow() {
            // A term of our own starts from scratch: sightings from an earlier term are stale.
            previous.clear();
            continue;
        }
        match find_leaks(client.clone(), provider.as_ref(), &config).await {
            Ok(audit) => {
                for leak in &audit.leaks {
                    tracing::warn!(
                        provider = provider.name(),
                        kind = %leak.resource.kind,
                        name = %leak.resource.name,
                        service = %leak.resource.service,
                        reason = %leak.reason,
                        "leaked load-balancer resource"
                    );
                }
                for error in &audit.undecodable {
                    tracing::debug!(%error, "audit: Service not judged; its resources count as in use");
                }
                metrics.set_audit_result(provider.name(), &count_by_kind(&audit.leaks));
                tracing::debug!(
                    owned = audit.owned,
                    leaked = audit.leaks.len(),
                    "periodic audit done"
                );
                let (services, seen) = confirmed_removals(&previous, &audit.leaks);
                previous = seen;
                if schedule.delete && *leading.borrow() {
                    remove_leaked(
                        provider.as_ref(),
                        &config,
                        &metrics,
                        &audit.leaks,
                        &services,
                    )
                    .await;
                }
            }
            Err(error) => {
                tracing::warn!(provider = provider.name(), %error, "periodic audit failed; leaked-resource gauge left unchanged");
            }
        }
    }
}

/// Removes the leaked resources of `services`, one provider delete per Service.
async fn remove_leaked(
    provider: &dyn LoadBalancerProvider,
    config: &ControllerConfig,
    metrics: &Metrics,
    leaks: &[Leak],
    services: &[ServiceKey],
) {
    for service in services {
        let result =
            match tokio::time::timeout(config.provider_timeout, provider.delete(service)).await {
                Ok(result) => result.map_err(|error| error.to_string()),
                Err(_) => Err(format!(
                    "gave up after --provider-timeout {}",
                    humantime::format_duration(config.provider_timeout)
                )),
            };
        let of_service = leaks
            .iter()
            .filter(|leak| &leak.resource.service == service);
        match result {
            Ok(()) => {
                for leak in of_service {
                    tracing::info!(
                        provider = provider.name(),
                        service = %service,
                        uid = %service.uid,
                        kind = %leak.resource.kind,
                        name = %leak.resource.name,
                        reason = %leak.reason,
                        "removed leaked load-balancer resource"
                    );
                    metrics.count_audit_deletion(provider.name(), &leak.resource.kind);
                }
            }
            Err(error) => tracing::warn!(
                provider = provider.name(),
                service = %service,
                uid = %service.uid,
                %error,
                "removing leaked load-balancer resources failed; the next audit tries again"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use kube_lb_annotations::Cloud;

    use super::*;
    use crate::controller::FINALIZER;

    const UID_WEB: &str = "6f1c2a3b-0d4e-4f5a-8b6c-7d8e9f0a1b2c";

    fn view(name: &str, uid: &str, state: ServiceState) -> ServiceView {
        ServiceView {
            namespace: "default".into(),
            name: name.into(),
            uid: uid.into(),
            state,
        }
    }

    fn resource(name: &str, service: &str, uid: &str, shared: bool) -> OwnedResource {
        OwnedResource {
            kind: "LoadBalancer".into(),
            name: name.into(),
            service: ServiceKey {
                namespace: "default".into(),
                name: service.into(),
                uid: uid.into(),
            },
            created: None,
            shared,
        }
    }

    #[test]
    fn classification() {
        use LeakReason as R;
        use ServiceState as S;
        let web = || view("web", UID_WEB, S::InUse);
        let not_lb = |t: &str| S::NotLoadBalancer { type_: t.into() };
        // (case, resource, services, expected reason; None = not listed)
        let cases: Vec<(&str, OwnedResource, Vec<ServiceView>, Option<LeakReason>)> = vec![
            (
                "in use, by UID",
                resource("a", "web", UID_WEB, false),
                vec![web()],
                None,
            ),
            (
                "in use, by a 31-digit UID prefix without dashes",
                resource("a", "", "6f1c2a3b0d4e4f5a8b6c7d8e9f0a1b2", false),
                vec![web()],
                None,
            ),
            (
                "a short prefix is no match",
                resource("a", "web", "6f1c", false),
                vec![web()],
                Some(R::ServiceDeleted { recreated: true }),
            ),
            (
                "in use, by namespace/name when no UID is recorded",
                resource("a", "web", "", false),
                vec![web()],
                None,
            ),
            (
                "deleted",
                resource("a", "gone", "u-gone", false),
                vec![web()],
                Some(R::ServiceDeleted { recreated: false }),
            ),
            (
                "deleted and created again under the same name",
                resource("a", "web", "u-old", false),
                vec![web()],
                Some(R::ServiceDeleted { recreated: true }),
            ),
            (
                "no longer a LoadBalancer",
                resource("a", "web", UID_WEB, false),
                vec![view("web", UID_WEB, not_lb("ClusterIP"))],
                Some(R::NotLoadBalancer {
                    type_: "ClusterIP".into(),
                }),
            ),
            (
                "another class",
                resource("a", "web", UID_WEB, false),
                vec![view(
                    "web",
                    UID_WEB,
                    S::OtherClass {
                        class: Some("x.io/lb".into()),
                    },
                )],
                Some(R::OtherClass {
                    class: Some("x.io/lb".into()),
                }),
            ),
            (
                "deleting without the finalizer",
                resource("a", "web", UID_WEB, false),
                vec![view("web", UID_WEB, S::DeletingWithoutFinalizer)],
                Some(R::DeletingWithoutFinalizer),
            ),
            (
                "an undecodable Service is never judged",
                resource("a", "web", UID_WEB, false),
                vec![view("web", UID_WEB, S::Unknown)],
                None,
            ),
            (
                "shared, a live Service remains",
                resource("sg", "gone", "u-gone", true),
                vec![web()],
                None,
            ),
            (
                "shared, no live Service remains",
                resource("sg", "web", UID_WEB, true),
                vec![view("web", UID_WEB, not_lb("NodePort"))],
                Some(R::SharedUnused),
            ),
            (
                "shared, no Service at all",
                resource("sg", "web", UID_WEB, true),
                vec![],
                Some(R::SharedUnused),
            ),
        ];
        for (case, resource, services, want) in cases {
            let got = classify(std::slice::from_ref(&resource), &services);
            assert_eq!(got.first().map(|l| l.reason.clone()), want, "{case}");
            assert!(got.len() <= 1, "{case}");
        }
    }

    fn svc(type_: &str, class: Option<&str>, finalized: bool, deleting: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some(UID_WEB.into()),
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
    fn services_are_judged_as_the_controller_does() {
        use ServiceState as S;
        let config = ControllerConfig::new(Cloud::Local);
        let cases = [
            (svc("LoadBalancer", None, true, false), S::InUse),
            (svc("LoadBalancer", None, false, false), S::InUse),
            (svc("LoadBalancer", None, true, true), S::InUse),
            (svc("NodePort", None, true, true), S::InUse),
            (
                svc("LoadBalancer", None, false, true),
                S::DeletingWithoutFinalizer,
            ),
            (
                svc("ClusterIP", None, true, false),
                S::NotLoadBalancer {
                    type_: "ClusterIP".into(),
                },
            ),
            (
                svc("LoadBalancer", Some("x.io/lb"), true, false),
                S::OtherClass {
                    class: Some("x.io/lb".into()),
                },
            ),
        ];
        for (service, want) in cases {
            assert_eq!(
                ServiceView::judge(&service, &config).state,
                want,
                "{:?}",
                service.spec
            );
        }
        let mut classed = ControllerConfig::new(Cloud::Local);
        classed.load_balancer_class = Some("kube-lb.io/local".into());
        classed.default_class = false;
        assert_eq!(
            ServiceView::judge(&svc("LoadBalancer", None, false, false), &classed).state,
            S::OtherClass { class: None }
        );
    }

    #[test]
    fn gauge_keeps_kinds_no_longer_leaked_at_zero() {
        let metrics = Metrics::new();
        let counts = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
            pairs.iter().map(|(k, n)| ((*k).to_string(), *n)).collect()
        };
        metrics.set_audit_result("aws", &counts(&[("LoadBalancer", 2), ("TargetGroup", 1)]));
        metrics.set_audit_result("aws", &counts(&[("LoadBalancer", 1)]));
        let text = metrics.encode().unwrap();
        for want in [
            r#"kube_lb_audit_leaked_resources{provider="aws",kind="LoadBalancer"} 1"#,
            r#"kube_lb_audit_leaked_resources{provider="aws",kind="TargetGroup"} 0"#,
            "# TYPE kube_lb_audit_last_success_timestamp_seconds gauge",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        assert!(
            !text.contains("kube_lb_audit_last_success_timestamp_seconds 0.0\n"),
            "stamped: {text}"
        );
    }

    #[test]
    fn ages() {
        let now: Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
        let cases = [
            (Some("2026-01-02T03:04:00Z"), Some("5s")),
            (Some("2026-01-02T03:00:05Z"), Some("4m")),
            (Some("2026-01-02T00:04:05Z"), Some("3h")),
            (Some("2025-12-26T03:04:05Z"), Some("7d")),
            (Some("2026-01-02T03:04:09+00:00"), Some("0s")),
            (Some("not a time"), None),
            (None, None),
        ];
        for (created, want) in cases {
            assert_eq!(
                age(created, now).map(format_age).as_deref(),
                want,
                "{created:?}"
            );
        }
    }

    #[test]
    fn only_services_that_are_gone_and_were_leaked_in_the_last_audit_too_are_removed() {
        use LeakReason as R;
        let leak = |name: &str, service: &str, reason: R| Leak {
            resource: resource(name, service, UID_WEB, false),
            reason,
        };
        let gone = || R::ServiceDeleted { recreated: false };
        let first = [leak("a", "old", gone())];
        // (case, this audit's leaks, Services whose resources are removed)
        let cases: Vec<(&str, Vec<Leak>, Vec<&str>)> = vec![
            (
                "seen twice, Service deleted",
                vec![leak("a", "old", gone())],
                vec!["old"],
            ),
            (
                "seen twice, Service deleted and created again",
                vec![leak("a", "old", R::ServiceDeleted { recreated: true })],
                vec!["old"],
            ),
            (
                "seen twice, Service deleting without the finalizer",
                vec![leak("a", "old", R::DeletingWithoutFinalizer)],
                vec!["old"],
            ),
            (
                "seen twice but the Service exists as a ClusterIP: its reconcile releases it",
                vec![leak(
                    "a",
                    "old",
                    R::NotLoadBalancer {
                        type_: "ClusterIP".into(),
                    },
                )],
                vec![],
            ),
            (
                "seen twice but the Service exists in another class",
                vec![leak("a", "old", R::OtherClass { class: None })],
                vec![],
            ),
            (
                "a shared resource: left to an operator",
                vec![leak("a", "old", R::SharedUnused)],
                vec![],
            ),
            (
                "seen once: a resource the last audit did not find",
                vec![leak("b", "new", gone())],
                vec![],
            ),
            ("no longer leaked", vec![], vec![]),
        ];
        for (case, leaks, expected) in cases {
            let (_, previous) = confirmed_removals(&BTreeSet::new(), &first);
            let (services, seen) = confirmed_removals(&previous, &leaks);
            let names: Vec<&str> = services.iter().map(|s| s.name.as_str()).collect();
            assert_eq!(names, expected, "{case}");
            assert_eq!(
                seen.len(),
                leaks.len(),
                "{case}: this audit's sightings are kept"
            );
        }
        // A first audit never removes anything.
        let (services, _) = confirmed_removals(&BTreeSet::new(), &first);
        assert!(services.is_empty());
    }
}

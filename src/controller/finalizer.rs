//! The load-balancer cleanup finalizer: added before the first cloud call, removed only after
//! the provider confirmed deletion.
//!
//! kube-runtime's `finalizer` helper guards its JSON patch with a `test` of
//! `/metadata/finalizers` against `null` when the list is absent, which some API servers
//! (including the embedded one) reject as an invalid path. These merge patches carry the
//! object's `resourceVersion` instead, which gives the same protection against concurrent
//! writers (a 409 Conflict, retried) on every API server.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::Error;

/// The upstream finalizer name.
pub const FINALIZER: &str = "service.kubernetes.io/load-balancer-cleanup";

/// What the finalizer state asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Add the finalizer; the resulting update triggers the next reconcile.
    Add,
    /// The finalizer is in place and the object lives: ensure the load balancer.
    Apply,
    /// The object is being deleted and still carries the finalizer: clean up, then remove it.
    Cleanup,
    /// Being deleted without our finalizer: nothing of ours is left.
    Done,
}

/// Decides the step from the object alone.
pub fn step(service: &Service) -> Step {
    let present = has_finalizer(service);
    match (present, service.metadata.deletion_timestamp.is_some()) {
        (false, false) => Step::Add,
        (true, false) => Step::Apply,
        (true, true) => Step::Cleanup,
        (false, true) => Step::Done,
    }
}

/// True when `service` carries the finalizer.
pub fn has_finalizer(service: &Service) -> bool {
    service.finalizers().iter().any(|f| f == FINALIZER)
}

/// The merge patch adding (`add`) or removing the finalizer, guarded by resourceVersion;
/// `None` when nothing would change.
pub fn patch(service: &Service, add: bool) -> Option<Value> {
    let mut finalizers: Vec<String> = service.finalizers().to_vec();
    let present = has_finalizer(service);
    if add == present {
        return None;
    }
    if add {
        finalizers.push(FINALIZER.to_string());
    } else {
        finalizers.retain(|f| f != FINALIZER);
    }
    let list = if finalizers.is_empty() {
        Value::Null
    } else {
        json!(finalizers)
    };
    Some(json!({
        "metadata": {
            "finalizers": list,
            "resourceVersion": service.resource_version(),
        }
    }))
}

/// Adds or removes the finalizer on the API server.
pub async fn set(api: &Api<Service>, service: &Arc<Service>, add: bool) -> Result<(), Error> {
    if let Some(body) = patch(service, add) {
        api.patch(
            &service.name_any(),
            &PatchParams::default(),
            &Patch::Merge(body),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn svc(finalizers: &[&str], deleting: bool) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                resource_version: Some("7".into()),
                finalizers: (!finalizers.is_empty())
                    .then(|| finalizers.iter().map(|f| f.to_string()).collect()),
                deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn steps() {
        let cases = [
            (svc(&[], false), Step::Add),
            (svc(&["other"], false), Step::Add),
            (svc(&[FINALIZER], false), Step::Apply),
            (svc(&["other", FINALIZER], true), Step::Cleanup),
            (svc(&["other"], true), Step::Done),
        ];
        for (s, want) in cases {
            assert_eq!(step(&s), want, "{:?}", s.metadata);
        }
    }

    #[test]
    fn patches_keep_other_finalizers_and_carry_the_resource_version() {
        assert_eq!(
            patch(&svc(&["other"], false), true),
            Some(json!({"metadata": {"finalizers": ["other", FINALIZER], "resourceVersion": "7"}}))
        );
        assert_eq!(
            patch(&svc(&["other", FINALIZER], true), false),
            Some(json!({"metadata": {"finalizers": ["other"], "resourceVersion": "7"}}))
        );
        assert_eq!(
            patch(&svc(&[FINALIZER], true), false),
            Some(json!({"metadata": {"finalizers": null, "resourceVersion": "7"}}))
        );
        assert_eq!(patch(&svc(&[FINALIZER], false), true), None);
        assert_eq!(patch(&svc(&[], false), false), None);
    }
}

//! What kube-controller-manager's namespace controller does for a Terminating namespace: delete
//! everything in it, report what is left in the namespace's status conditions, and when nothing
//! is left take its `kubernetes` finalizer off through `/finalize`, which removes the namespace.
//!
//! The store marks a namespace Terminating on its first delete and creates in it are refused
//! from then on (the NamespaceLifecycle admission plugin). Objects held by finalizers (a
//! LoadBalancer Service whose cloud resources are still being released) keep the namespace
//! until their finalizers are gone; the server calls [`sync_all`] after changes, so the
//! namespace goes with the last of them.
//!
//! The condition types, reasons and messages are upstream's (pkg/controller/namespace/deletion),
//! since `kubectl describe namespace` and operators' scripts read them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::meta;
use crate::resources;
use crate::status::ApiError;
use crate::store::{self, Part, Preconditions, ReadAt, Store};

/// The spec finalizer this lifecycle owns (`FinalizerKubernetes`).
const FINALIZER: &str = "kubernetes";

/// What is still in a Terminating namespace after a deletion pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Remaining {
    /// Objects left per resource, keyed `plural.group` (`services.` for the core group, as
    /// upstream prints a GroupVersionResource's resource and group).
    pub by_resource: BTreeMap<String, usize>,
    /// Objects left per finalizer that holds them.
    pub by_finalizer: BTreeMap<String, usize>,
}

impl Remaining {
    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.by_resource.is_empty()
    }
}

/// Where a namespace stands after [`sync`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Not being deleted (or already gone): nothing to do.
    Idle,
    /// Being deleted, but a finalizer other than this lifecycle's holds it.
    HeldByOthers,
    /// Objects are left (held by their finalizers).
    Waiting(Remaining),
    /// Emptied and finalized: the namespace is gone, or goes when its metadata finalizers do.
    Finalized,
}

/// One condition of a Terminating namespace: `(type, status, reason, message)`.
type Condition = (&'static str, &'static str, &'static str, String);

/// The namespace status conditions upstream's deleter keeps, for what is `remaining`. Discovery,
/// group-version parsing and content deletion cannot fail in this server, so those three always
/// report success.
pub fn conditions(remaining: &Remaining) -> Vec<Condition> {
    let ok = |kind, reason, message: &str| (kind, "False", reason, message.to_string());
    let mut out = vec![
        ok(
            "NamespaceDeletionDiscoveryFailure",
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        ok(
            "NamespaceDeletionGroupVersionParsingFailure",
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        ok(
            "NamespaceDeletionContentFailure",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
    ];
    out.push(if remaining.by_resource.is_empty() {
        ok(
            "NamespaceContentRemaining",
            "ContentRemoved",
            "All content successfully removed",
        )
    } else {
        let parts = sorted_counts(&remaining.by_resource, "has", "resource instances");
        (
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {parts}"),
        )
    });
    out.push(if remaining.by_finalizer.is_empty() {
        ok(
            "NamespaceFinalizersRemaining",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished",
        )
    } else {
        let parts = sorted_counts(&remaining.by_finalizer, "in", "resource instances");
        (
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!("Some content in the namespace has finalizers remaining: {parts}"),
        )
    });
    out
}

/// `a has 2 resource instances, b has 1 resource instances`, sorted as text (as upstream sorts
/// the rendered entries, not the keys).
fn sorted_counts(counts: &BTreeMap<String, usize>, verb: &str, noun: &str) -> String {
    let mut parts: Vec<String> = counts
        .iter()
        .map(|(key, count)| format!("{key} {verb} {count} {noun}"))
        .collect();
    parts.sort();
    parts.join(", ")
}

/// `current` conditions with `wanted` merged in: a condition keeps its `lastTransitionTime`
/// unless its status changes. `None` when nothing changes (no write is needed).
pub fn merge_conditions(current: &[Value], wanted: &[Condition], now: &str) -> Option<Vec<Value>> {
    let mut merged = current.to_vec();
    let mut changed = false;
    for (kind, status, reason, message) in wanted {
        let position = merged.iter().position(|c| c["type"] == *kind);
        let fresh = json!({
            "type": kind, "status": status, "lastTransitionTime": now,
            "reason": reason, "message": message,
        });
        match position {
            None => {
                merged.push(fresh);
                changed = true;
            }
            Some(index) => {
                let old = &merged[index];
                if old["status"] == *status
                    && old["reason"] == *reason
                    && old["message"] == *message
                {
                    continue;
                }
                let mut updated = fresh;
                if old["status"] == *status {
                    updated["lastTransitionTime"] = old["lastTransitionTime"].clone();
                }
                merged[index] = updated;
                changed = true;
            }
        }
    }
    changed.then_some(merged)
}

/// Moves every Terminating namespace on (see [`sync`]); errors are logged, and the next change
/// tries again.
pub fn sync_all(store: &Store) {
    let Ok(namespaces) = store.list(resources::namespaces(), None, ReadAt::Latest) else {
        return;
    };
    for ((_, name), namespace) in namespaces.items {
        if !meta::is_deleting(&namespace) {
            continue;
        }
        if let Err(error) = sync(store, &name) {
            tracing::debug!(namespace = %name, %error, "namespace deletion not finished yet");
        }
    }
}

/// One pass over namespace `name` if it is Terminating: delete what it contains, write what is
/// left into its conditions, and finalize it when nothing is.
pub fn sync(store: &Store, name: &str) -> Result<Progress, ApiError> {
    let namespace = match store.get(resources::namespaces(), None, name) {
        Ok(namespace) => namespace,
        Err(error) if error.code == 404 => return Ok(Progress::Idle),
        Err(error) => return Err(error),
    };
    if !meta::is_deleting(&namespace) {
        return Ok(Progress::Idle);
    }
    if namespace.pointer("/status/phase").and_then(Value::as_str)
        != Some(store::NAMESPACE_TERMINATING)
    {
        write_status(store, name, |status| {
            status.insert("phase".into(), json!(store::NAMESPACE_TERMINATING));
        })?;
    }
    let holds_ours = namespace
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
    if !holds_ours {
        return Ok(Progress::HeldByOthers);
    }
    let remaining = delete_contents(store, name);
    let current = store.get(resources::namespaces(), None, name)?;
    let existing = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(merged) = merge_conditions(&existing, &conditions(&remaining), &meta::now()) {
        write_status(store, name, |status| {
            status.insert("conditions".into(), Value::Array(merged));
        })?;
    }
    if !remaining.is_empty() {
        return Ok(Progress::Waiting(remaining));
    }
    finalize(store, name)?;
    Ok(Progress::Finalized)
}

/// Deletes every object in `namespace` not already being deleted, and counts what is left.
fn delete_contents(store: &Store, namespace: &str) -> Remaining {
    let registry = store.registry();
    let mut remaining = Remaining::default();
    for (id, entry) in registry.slot_entries() {
        if !entry.def.namespaced {
            continue;
        }
        let Ok(snapshot) = store.list(id, Some(namespace), ReadAt::Latest) else {
            continue;
        };
        let mut left = 0;
        for ((_, name), object) in snapshot.items {
            if meta::is_deleting(&object) {
                left += 1;
                count_finalizers(&object, &mut remaining);
                continue;
            }
            match store.delete(id, Some(namespace), &name, &Preconditions::default(), false) {
                Ok(deleted) if deleted.gone => {}
                Ok(deleted) => {
                    left += 1;
                    count_finalizers(&deleted.object, &mut remaining);
                }
                // Gone in between.
                Err(error) if error.code == 404 => {}
                Err(error) => {
                    tracing::debug!(namespace, name, %error, "namespace deletion left an object");
                    left += 1;
                    count_finalizers(&object, &mut remaining);
                }
            }
        }
        if left > 0 {
            let key = format!("{}.{}", entry.def.plural, entry.def.group);
            *remaining.by_resource.entry(key).or_default() += left;
        }
    }
    remaining
}

fn count_finalizers(object: &Value, remaining: &mut Remaining) {
    for finalizer in meta::finalizers(object) {
        *remaining
            .by_finalizer
            .entry(finalizer.to_string())
            .or_default() += 1;
    }
}

/// Writes the namespace's status through `/status`.
fn write_status(
    store: &Store,
    name: &str,
    change: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> Result<(), ApiError> {
    store.update(
        resources::namespaces(),
        None,
        name,
        Part::Status,
        false,
        |current| {
            let mut next = current.clone();
            if !next.get("status").is_some_and(Value::is_object) {
                next["status"] = json!({});
            }
            if let Some(status) = next["status"].as_object_mut() {
                change(status);
            }
            Ok(next)
        },
    )?;
    Ok(())
}

/// Takes this lifecycle's finalizer off through `/finalize`; the store removes the namespace
/// when that leaves no finalizer at all.
fn finalize(store: &Store, name: &str) -> Result<(), ApiError> {
    let updated = store.update(
        resources::namespaces(),
        None,
        name,
        Part::Finalize,
        false,
        |current| {
            Ok(meta::retaining(current, "/spec/finalizers", |f| {
                f != FINALIZER
            }))
        },
    );
    match updated {
        Ok(_) => Ok(()),
        Err(error) if error.code == 404 => Ok(()),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests;

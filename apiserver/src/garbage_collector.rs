//! What kube-controller-manager's garbage collector does with `metadata.ownerReferences`: an
//! object whose owners are all gone is deleted (after a `Background` delete of the owner, the
//! default), an owner deleted with `Orphan` has its dependents' references to it removed before
//! it goes, and one deleted with `Foreground` stays until its blocking dependents
//! (`blockOwnerDeletion: true`) are gone.
//!
//! It follows every change the store commits and keeps an index from each owner's uid to its
//! dependents, so a change costs only the objects it concerns. Owners are looked up by their
//! reference (apiVersion, kind, name, the dependent's namespace for a namespaced owner) and must
//! have the referenced uid, as upstream checks them.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use crate::meta;
use crate::resources::ResourceId;
use crate::status::ApiError;
use crate::store::{
    Event, EventType, FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Part, Preconditions, Propagation,
    ReadAt, Store,
};

/// One stored object: its storage slot, namespace (empty when cluster-scoped) and name.
type ObjectId = (ResourceId, String, String);

/// An owner reference as the collector needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnerRef {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    block_owner_deletion: bool,
}

fn owner_refs(object: &Value) -> Vec<OwnerRef> {
    let Some(refs) = object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    refs.iter()
        .filter_map(|r| {
            let text = |field: &str| r.get(field).and_then(Value::as_str).map(str::to_string);
            Some(OwnerRef {
                api_version: text("apiVersion")?,
                kind: text("kind")?,
                name: text("name")?,
                uid: text("uid")?,
                block_owner_deletion: r["blockOwnerDeletion"].as_bool() == Some(true),
            })
        })
        .collect()
}

/// Where an owner stands, for one dependent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    /// It exists and is not waiting for its dependents.
    Solid,
    /// Gone (or replaced by an object of another uid).
    Dangling,
    /// Being deleted in the foreground: it waits for its dependents to go.
    Waiting,
}

/// What an owner reference leads to.
enum Lookup {
    /// A kind this server does not serve.
    Unserved,
    /// No object of that name with that uid.
    Absent,
    /// The owner, with its id.
    Found(ObjectId, Arc<Value>),
}

/// What to do with a dependent, from the states of its owners ([`OwnerState`]) and whether it
/// has dependents of its own: upstream's `attemptToDeleteItem`, as a pure decision.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// Leave it.
    Keep,
    /// Keep it, without the references to these (dangling or waiting) owners.
    DropReferences(Vec<String>),
    /// Delete it with this propagation.
    Delete(Propagation),
}

fn verdict(
    owners: &[(OwnerRef, OwnerState)],
    has_dependents: bool,
    finalizers: &[&str],
) -> Verdict {
    if owners.is_empty() {
        return Verdict::Keep;
    }
    let of = |state| {
        owners
            .iter()
            .filter(move |(_, s)| *s == state)
            .map(|(r, _)| r.uid.clone())
    };
    let solid = of(OwnerState::Solid).count();
    let waiting: Vec<String> = of(OwnerState::Waiting).collect();
    if solid > 0 {
        let stale: Vec<String> = of(OwnerState::Dangling).chain(waiting).collect();
        return if stale.is_empty() {
            Verdict::Keep
        } else {
            Verdict::DropReferences(stale)
        };
    }
    if !waiting.is_empty() && has_dependents {
        return Verdict::Delete(Propagation::Foreground);
    }
    Verdict::Delete(if finalizers.contains(&ORPHAN_FINALIZER) {
        Propagation::Orphan
    } else if finalizers.contains(&FOREGROUND_FINALIZER) {
        Propagation::Foreground
    } else {
        Propagation::Background
    })
}

/// The collector: the store and the owner index.
struct Collector {
    store: Arc<Store>,
    /// Owner uid → the objects that name it.
    dependents: HashMap<String, BTreeSet<ObjectId>>,
    /// Object → the owner references it had when last seen.
    references: HashMap<ObjectId, Vec<OwnerRef>>,
}

/// Runs the collector until `stop`.
pub async fn run(store: Arc<Store>, mut stop: watch::Receiver<bool>) {
    // Subscribed before the first look, so no change falls between the two.
    let mut changes = store.changes();
    let mut collector = Collector {
        store,
        dependents: HashMap::new(),
        references: HashMap::new(),
    };
    collector.rebuild();
    loop {
        tokio::select! {
            change = changes.recv() => match change {
                Ok(event) => collector.observe(&event),
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "garbage collector fell behind; looking at everything");
                    collector.rebuild();
                }
                Err(RecvError::Closed) => return,
            },
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return;
                }
            }
        }
    }
}

impl Collector {
    /// Indexes every stored object again and acts on each one that needs it.
    fn rebuild(&mut self) {
        self.dependents.clear();
        self.references.clear();
        let registry = self.store.registry();
        let mut objects = Vec::new();
        for (_, entry) in registry.slot_entries() {
            let Ok(snapshot) = self.store.list(entry.storage, None, ReadAt::Latest) else {
                continue;
            };
            for ((namespace, name), object) in snapshot.items {
                objects.push(((entry.storage, namespace, name), object));
            }
        }
        for (id, object) in &objects {
            self.index(id, object);
        }
        for (id, object) in objects {
            self.act_on(&id, &object);
        }
    }

    fn index(&mut self, id: &ObjectId, object: &Value) {
        self.unindex(id);
        let refs = owner_refs(object);
        if refs.is_empty() {
            return;
        }
        for owner in &refs {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(id.clone());
        }
        self.references.insert(id.clone(), refs);
    }

    /// Forgets `id`'s references; returns them.
    fn unindex(&mut self, id: &ObjectId) -> Vec<OwnerRef> {
        let refs = self.references.remove(id).unwrap_or_default();
        for owner in &refs {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(id);
                if set.is_empty() {
                    self.dependents.remove(&owner.uid);
                }
            }
        }
        refs
    }

    fn observe(&mut self, event: &Event) {
        let id: ObjectId = (event.resource, event.key.0.clone(), event.key.1.clone());
        match event.event_type {
            EventType::Deleted => {
                let refs = self.unindex(&id);
                // Its dependents may have lost their last owner.
                if let Some(uid) = meta::meta_str(&event.object, "uid")
                    && let Some(dependents) = self.dependents.get(uid).cloned()
                {
                    for dependent in dependents {
                        self.attempt_to_delete(&dependent);
                    }
                }
                // An owner waiting in the foreground may have lost its last blocking dependent.
                for owner in refs {
                    if let Lookup::Found(owner_id, object) = self.lookup(&id, &owner)
                        && meta::is_deleting(&object)
                    {
                        self.act_on(&owner_id, &object);
                    }
                }
            }
            EventType::Added | EventType::Modified => {
                self.index(&id, &event.object);
                self.act_on(&id, &event.object);
            }
        }
    }

    /// Whatever `object` needs: its own deletion when its owners are gone, and its dependents'
    /// treatment when it is being deleted with a collector's finalizer.
    fn act_on(&mut self, id: &ObjectId, object: &Value) {
        if self.references.contains_key(id) {
            self.attempt_to_delete(id);
        }
        if !meta::is_deleting(object) {
            return;
        }
        let finalizers = meta::finalizers(object);
        let Some(uid) = meta::meta_str(object, "uid") else {
            return;
        };
        if finalizers.contains(&ORPHAN_FINALIZER) {
            self.orphan_dependents(id, uid);
        } else if finalizers.contains(&FOREGROUND_FINALIZER) {
            self.delete_dependents(id, uid);
        }
    }

    /// The object `reference` names, seen from dependent `from` (a namespaced owner lives in
    /// the dependent's namespace), and whether it exists with the referenced uid.
    fn lookup(&self, from: &ObjectId, reference: &OwnerRef) -> Lookup {
        let registry = self.store.registry();
        let Some(resource) = registry.find_by_kind(&reference.api_version, &reference.kind) else {
            return Lookup::Unserved;
        };
        let Some(entry) = registry.entry(resource) else {
            return Lookup::Unserved;
        };
        let namespace = if entry.def.namespaced {
            from.1.as_str()
        } else {
            ""
        };
        let found = self.store.get(
            resource,
            (!namespace.is_empty()).then_some(namespace),
            &reference.name,
        );
        match found {
            Ok(object) if meta::meta_str(&object, "uid") == Some(reference.uid.as_str()) => {
                let id = (entry.storage, namespace.to_string(), reference.name.clone());
                Lookup::Found(id, object)
            }
            _ => Lookup::Absent,
        }
    }

    fn owner_state(&self, from: &ObjectId, reference: &OwnerRef) -> OwnerState {
        match self.lookup(from, reference) {
            // A kind this server does not serve cannot be checked: never a reason to delete.
            Lookup::Unserved => OwnerState::Solid,
            Lookup::Absent => OwnerState::Dangling,
            Lookup::Found(_, owner)
                if meta::is_deleting(&owner)
                    && meta::finalizers(&owner).contains(&FOREGROUND_FINALIZER) =>
            {
                OwnerState::Waiting
            }
            Lookup::Found(..) => OwnerState::Solid,
        }
    }

    fn attempt_to_delete(&mut self, id: &ObjectId) {
        let Some(object) = self.get(id) else {
            return;
        };
        let owners: Vec<(OwnerRef, OwnerState)> = owner_refs(&object)
            .into_iter()
            .map(|r| {
                let state = self.owner_state(id, &r);
                (r, state)
            })
            .collect();
        let uid = meta::meta_str(&object, "uid")
            .unwrap_or_default()
            .to_string();
        let has_dependents = self.dependents.contains_key(&uid);
        let result = match verdict(&owners, has_dependents, &meta::finalizers(&object)) {
            Verdict::Keep => Ok(()),
            Verdict::DropReferences(uids) => self.drop_references(id, &uids),
            Verdict::Delete(propagation) => {
                if meta::is_deleting(&object) && propagation == Propagation::Background {
                    // Already on its way; its own finalizers decide when it goes.
                    return;
                }
                let preconditions = Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                };
                self.store
                    .delete_propagating(
                        id.0,
                        namespace_of(id),
                        &id.2,
                        &preconditions,
                        Some(propagation),
                        false,
                    )
                    .map(|_| ())
            }
        };
        if let Err(error) = result.or_else(ignore_gone) {
            tracing::debug!(object = %id.2, %error, "garbage collector could not act");
        }
    }

    /// An owner deleted with `Orphan`: its dependents lose their reference to it, then it goes.
    fn orphan_dependents(&mut self, owner: &ObjectId, uid: &str) {
        let dependents = self.dependents.get(uid).cloned().unwrap_or_default();
        for dependent in dependents {
            if let Err(error) = self
                .drop_references(&dependent, &[uid.to_string()])
                .or_else(ignore_gone)
            {
                tracing::debug!(object = %dependent.2, %error, "orphaning failed; retried on the next change");
                return;
            }
        }
        self.remove_finalizer(owner, ORPHAN_FINALIZER);
    }

    /// An owner deleted in the foreground: its dependents are deleted, and it goes when none
    /// that blocks it is left.
    fn delete_dependents(&mut self, owner: &ObjectId, uid: &str) {
        let dependents = self.dependents.get(uid).cloned().unwrap_or_default();
        let mut blocked = false;
        for dependent in &dependents {
            let blocks = self
                .references
                .get(dependent)
                .is_some_and(|refs| refs.iter().any(|r| r.uid == uid && r.block_owner_deletion));
            blocked |= blocks;
            if let Some(object) = self.get(dependent)
                && !meta::is_deleting(&object)
            {
                self.attempt_to_delete(dependent);
            }
        }
        if !blocked {
            self.remove_finalizer(owner, FOREGROUND_FINALIZER);
        }
    }

    fn get(&self, id: &ObjectId) -> Option<Arc<Value>> {
        self.store.get(id.0, namespace_of(id), &id.2).ok()
    }

    /// Writes object `id` as `change` makes it from what is stored.
    fn rewrite(&self, id: &ObjectId, change: impl FnOnce(&Value) -> Value) -> Result<(), ApiError> {
        self.store
            .update(
                id.0,
                namespace_of(id),
                &id.2,
                Part::Main,
                false,
                |current| Ok(change(current)),
            )
            .map(|_| ())
    }

    fn drop_references(&self, id: &ObjectId, uids: &[String]) -> Result<(), ApiError> {
        self.rewrite(id, |current| {
            let mut next = meta::retaining(current, "/metadata/ownerReferences", |r| {
                !uids.iter().any(|uid| r["uid"] == json!(uid))
            });
            if next
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                meta::metadata_mut(&mut next).remove("ownerReferences");
            }
            next
        })
    }

    fn remove_finalizer(&self, id: &ObjectId, finalizer: &str) {
        let removed = self.rewrite(id, |current| {
            meta::retaining(current, "/metadata/finalizers", |f| f != finalizer)
        });
        if let Err(error) = removed.or_else(ignore_gone) {
            tracing::debug!(object = %id.2, %error, "garbage collector could not finish a deletion");
        }
    }
}

fn namespace_of(id: &ObjectId) -> Option<&str> {
    (!id.1.is_empty()).then_some(id.1.as_str())
}

/// An object gone in between needs nothing more.
fn ignore_gone(error: ApiError) -> Result<(), ApiError> {
    if error.code == 404 {
        Ok(())
    } else {
        Err(error)
    }
}

#[cfg(test)]
mod tests;

//! The generic versioned object store: every resource's objects as JSON, one global
//! resourceVersion counter, a bounded change history and the watch fan-out.
//!
//! All writes happen under one mutex and publish their event while still holding it, so the
//! history and every subscriber see changes in resourceVersion order, and a watch that
//! subscribes under the same lock neither misses nor duplicates an event between its starting
//! point and the live stream.

mod history;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

pub use history::{Event, EventType, History, ObjectKey};

use crate::crd;
use crate::events::{self, EventApi};
use crate::meta;
use crate::resources::{self, Entry, Registry, ResourceDef, ResourceId};
use crate::services::{self, Allocator};
use crate::status::{ApiError, Cause};
use crate::validation;

/// Capacity of the live event channel; a watcher that falls this far behind gets 410 and
/// relists, like a kube-apiserver watch cache overflow.
const LIVE_CHANNEL_CAPACITY: usize = 16384;

/// Which state a read observes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest state.
    Latest,
    /// Exactly the state at this version (`resourceVersionMatch=Exact`, continue tokens).
    Exact(u64),
    /// Any state at least this new (served as the newest state, or 504 if it is in the future).
    NotOlderThan(u64),
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// Replay the current objects as ADDED events first (resourceVersion unset or "0", and
    /// `sendInitialEvents=true`).
    Snapshot,
    /// Only changes after this version.
    Version(u64),
}

/// Which part of an object an update may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The main resource: everything except `status` (for resources with a status
    /// subresource).
    Main,
    /// The `/status` subresource: only `status`.
    Status,
    /// A Namespace's `/finalize` subresource: everything but `status`, `spec.finalizers`
    /// included (the main resource keeps those as they are).
    Finalize,
}

/// A consistent list result.
#[derive(Debug)]
pub struct Snapshot {
    /// The version the list reflects.
    pub resource_version: u64,
    /// Objects sorted by namespace, then name.
    pub items: Vec<(ObjectKey, Arc<Value>)>,
}

/// A started watch: the backlog to send first, then the live receiver.
#[derive(Debug)]
pub struct Subscription {
    /// For [`WatchFrom::Snapshot`]: current objects to send as ADDED, sorted.
    pub initial: Vec<Arc<Value>>,
    /// For [`WatchFrom::Version`]: retained events after that version.
    pub backlog: Vec<Arc<Event>>,
    /// The store's version when the watch started (for the initial-events-end bookmark).
    pub resource_version: u64,
    /// Live events committed after the subscription (all resources; filter on receipt).
    pub live: broadcast::Receiver<Arc<Event>>,
}

/// Result of a delete request.
#[derive(Debug)]
pub struct Deleted {
    /// The object as last stored (with deletionTimestamp when finalizers hold it).
    pub object: Arc<Value>,
    /// Whether the object is gone (false while finalizers remain).
    pub gone: bool,
}

/// Preconditions of a delete (`DeleteOptions.preconditions`).
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// Required `metadata.uid`.
    pub uid: Option<String>,
    /// Required `metadata.resourceVersion`.
    pub resource_version: Option<String>,
}

/// How a delete treats the objects that name the deleted one as their owner
/// (`DeleteOptions.propagationPolicy`): the garbage collector acts on the finalizer it leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents lose their reference and stay (finalizer `orphan`).
    Orphan,
    /// The object goes at once; the collector deletes its dependents afterwards.
    Background,
    /// The object stays (finalizer `foregroundDeletion`) until its blocking dependents are gone.
    Foreground,
}

/// The finalizer that makes the collector orphan an object's dependents.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer that keeps an object until the collector has deleted its dependents.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// The finalizers `current` keeps when deleted with `propagation`, as the generic registry's
/// `deletionFinalizersForGarbageCollection` computes them: an explicit policy decides, else a GC
/// finalizer already there, else neither (the default for every kind served here).
fn finalizers_for_deletion(current: &Value, propagation: Option<Propagation>) -> Vec<String> {
    let existing = meta::finalizers(current);
    let has = |name: &str| existing.contains(&name);
    let (orphan, foreground) = match propagation {
        Some(Propagation::Orphan) => (true, false),
        Some(Propagation::Foreground) => (false, true),
        Some(Propagation::Background) => (false, false),
        None => (
            has(ORPHAN_FINALIZER),
            !has(ORPHAN_FINALIZER) && has(FOREGROUND_FINALIZER),
        ),
    };
    let mut kept: Vec<String> = existing
        .iter()
        .filter(|f| **f != ORPHAN_FINALIZER && **f != FOREGROUND_FINALIZER)
        .map(|f| f.to_string())
        .collect();
    if orphan {
        kept.push(ORPHAN_FINALIZER.to_string());
    }
    if foreground {
        kept.push(FOREGROUND_FINALIZER.to_string());
    }
    kept
}

/// Everything the server persists; allocations are derived from the Services on load.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Dump {
    /// The global resourceVersion counter.
    #[serde(rename = "resourceVersion")]
    pub resource_version: u64,
    /// Objects grouped by `apiVersion/plural`.
    pub objects: BTreeMap<String, Vec<Arc<Value>>>,
}

/// Configuration of a [`Store`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Number of events retained for watch resumption and consistent paging.
    pub history: usize,
    /// Allocator for Service cluster IPs and node ports.
    pub allocator: Allocator,
}

struct State {
    resource_version: u64,
    /// What is served; replaced (copy on write) when a CRD changes.
    registry: Arc<Registry>,
    /// Indexed by storage slot (see [`Entry::storage`]).
    objects: Vec<BTreeMap<ObjectKey, Arc<Value>>>,
    history: History,
    allocator: Allocator,
    /// When each stored Event was last written, for [`Store::expire_events`].
    event_writes: BTreeMap<ObjectKey, std::time::Instant>,
}

/// The shared object store.
pub struct Store {
    state: Mutex<State>,
    live: broadcast::Sender<Arc<Event>>,
    committed: watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("resource_version", &self.current_version())
            .finish_non_exhaustive()
    }
}

fn key_for(namespace: Option<&str>, name: &str) -> ObjectKey {
    (namespace.unwrap_or_default().to_string(), name.to_string())
}

fn rv_string(rv: u64) -> Value {
    Value::String(rv.to_string())
}

impl Store {
    /// An empty store.
    pub fn new(config: StoreConfig) -> Self {
        let (live, _) = broadcast::channel(LIVE_CHANNEL_CAPACITY);
        let (committed, _) = watch::channel(0);
        Self {
            state: Mutex::new(State {
                resource_version: 0,
                registry: Arc::new(Registry::builtin()),
                objects: vec![BTreeMap::new(); Registry::builtin().slots()],
                history: History::new(config.history, 0),
                allocator: config.allocator,
                event_writes: BTreeMap::new(),
            }),
            live,
            committed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied write (writes are built
        // on copies and swapped in), so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The newest committed resourceVersion.
    pub fn current_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Follows the committed version (the persistence writer waits on it).
    pub fn committed(&self) -> watch::Receiver<u64> {
        self.committed.subscribe()
    }

    /// Every change from now on, of every resource (events name storage slots). A receiver that
    /// falls too far behind gets `Lagged` and must look at the whole store again.
    pub fn changes(&self) -> broadcast::Receiver<Arc<Event>> {
        self.live.subscribe()
    }

    /// The resources served right now.
    pub fn registry(&self) -> Arc<Registry> {
        self.lock().registry.clone()
    }

    /// Reads one object.
    pub fn get(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, ApiError> {
        let state = self.lock();
        let entry = state.entry(resource)?;
        let namespace = if entry.def.namespaced {
            namespace
        } else {
            None
        };
        state.objects[entry.storage]
            .get(&key_for(namespace, name))
            .cloned()
            .map(|o| view(&entry, o))
            .ok_or_else(|| ApiError::not_found(&entry.def, name))
    }

    /// Lists objects of a resource (one namespace or all), at the requested version.
    pub fn list(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        at: ReadAt,
    ) -> Result<Snapshot, ApiError> {
        let state = self.lock();
        let entry = state.entry(resource)?;
        let slot = entry.storage;
        let current = state.resource_version;
        let in_scope = |key: &ObjectKey| namespace.is_none_or(|ns| key.0 == ns);
        let collect = |map: &BTreeMap<ObjectKey, Arc<Value>>| -> Vec<(ObjectKey, Arc<Value>)> {
            match namespace {
                Some(ns) => map
                    .range((ns.to_string(), String::new())..)
                    .take_while(|(k, _)| k.0 == ns)
                    .map(|(k, v)| (k.clone(), view(&entry, v.clone())))
                    .collect(),
                None => map
                    .iter()
                    .map(|(k, v)| (k.clone(), view(&entry, v.clone())))
                    .collect(),
            }
        };
        match at {
            ReadAt::Latest => Ok(Snapshot {
                resource_version: current,
                items: collect(&state.objects[slot]),
            }),
            ReadAt::NotOlderThan(rv) if rv <= current => Ok(Snapshot {
                resource_version: current,
                items: collect(&state.objects[slot]),
            }),
            ReadAt::NotOlderThan(rv) | ReadAt::Exact(rv) if rv > current => {
                Err(ApiError::too_large_resource_version(rv, current))
            }
            ReadAt::Exact(rv) if rv == current => Ok(Snapshot {
                resource_version: current,
                items: collect(&state.objects[slot]),
            }),
            ReadAt::Exact(rv) | ReadAt::NotOlderThan(rv) => {
                if rv < state.history.compacted() {
                    return Err(ApiError::expired(format!(
                        "The resourceVersion for the provided list is too old: {rv} (oldest retained: {})",
                        state.history.compacted()
                    )));
                }
                let scoped: BTreeMap<ObjectKey, Arc<Value>> = state.objects[slot]
                    .iter()
                    .filter(|(k, _)| in_scope(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let rewound = state.history.rewind(slot, scoped, rv);
                Ok(Snapshot {
                    resource_version: rv,
                    items: rewound
                        .into_iter()
                        .filter(|(k, _)| in_scope(k))
                        .map(|(k, v)| (k, view(&entry, v)))
                        .collect(),
                })
            }
        }
    }

    /// Starts a watch of one resource. Events name the storage slot ([`Entry::storage`]);
    /// objects of other versions of a custom resource are shown with [`view`].
    pub fn watch(&self, resource: ResourceId, from: WatchFrom) -> Result<Subscription, ApiError> {
        let state = self.lock();
        let entry = state.entry(resource)?;
        let slot = entry.storage;
        let live = self.live.subscribe();
        match from {
            WatchFrom::Snapshot => Ok(Subscription {
                initial: state.objects[slot]
                    .values()
                    .map(|o| view(&entry, o.clone()))
                    .collect(),
                backlog: Vec::new(),
                resource_version: state.resource_version,
                live,
            }),
            WatchFrom::Version(rv) => {
                if rv > state.resource_version {
                    return Err(ApiError::too_large_resource_version(
                        rv,
                        state.resource_version,
                    ));
                }
                if rv < state.history.compacted() {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        state.history.compacted()
                    )));
                }
                Ok(Subscription {
                    initial: Vec::new(),
                    backlog: state.history.since(slot, rv),
                    resource_version: state.resource_version,
                    live,
                })
            }
        }
    }

    /// Commits a new version of `key` (or its removal when `object` is `None`) and publishes
    /// the event. Must be called with the state locked.
    fn commit(
        &self,
        state: &mut State,
        resource: ResourceId,
        key: ObjectKey,
        event_type: EventType,
        mut object: Value,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        state.resource_version += 1;
        let rv = state.resource_version;
        meta::metadata_mut(&mut object).insert("resourceVersion".into(), rv_string(rv));
        let object = Arc::new(object);
        if event_type == EventType::Deleted {
            state.objects[resource].remove(&key);
        } else {
            state.objects[resource].insert(key.clone(), object.clone());
        }
        if resource == resources::core_events() {
            // Every write restarts an Event's time to live, as kube-apiserver's etcd lease.
            if event_type == EventType::Deleted {
                state.event_writes.remove(&key);
            } else {
                state
                    .event_writes
                    .insert(key.clone(), std::time::Instant::now());
            }
        }
        let event = Arc::new(Event {
            resource_version: rv,
            resource,
            event_type,
            object: object.clone(),
            previous,
            key,
        });
        state.history.push(event.clone());
        // No receivers is fine: nobody is watching.
        let _ = self.live.send(event.clone());
        self.committed.send_replace(rv);
        if resource == resources::custom_resource_definitions() {
            self.crd_changed(state, &event);
        }
        object
    }

    /// Serves what a CRD now defines; a deleted CRD takes its objects with it (each deletion
    /// is an event, so watchers see them go).
    fn crd_changed(&self, state: &mut State, event: &Event) {
        let name = event.key.1.clone();
        match event.event_type {
            EventType::Added | EventType::Modified => {
                let (versions, storage_key) = crd::served_versions(&event.object);
                let registry = Arc::make_mut(&mut state.registry);
                registry.install_crd(&name, versions, storage_key);
                let slots = registry.slots();
                if state.objects.len() < slots {
                    state.objects.resize_with(slots, BTreeMap::new);
                }
            }
            EventType::Deleted => {
                let Some(slot) = state.registry.crd_storage(&name) else {
                    return;
                };
                let objects = std::mem::take(&mut state.objects[slot]);
                for (key, object) in objects {
                    let last = (*object).clone();
                    self.commit(state, slot, key, EventType::Deleted, last, Some(object));
                }
                Arc::make_mut(&mut state.registry).remove_crd(&name);
                tracing::info!(crd = %name, "custom resource definition removed with its objects");
            }
        }
    }

    /// Creates an object. `namespace` is the request path's namespace (ignored for
    /// cluster-scoped resources).
    pub fn create(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        object: Value,
        dry_run: bool,
    ) -> Result<Arc<Value>, ApiError> {
        self.create_as(resource, namespace, object, dry_run, None)
    }

    /// [`Store::create`], with `uid` as the new object's `metadata.uid` instead of a fresh one
    /// (for seeded objects that recorded theirs).
    fn create_as(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        mut object: Value,
        dry_run: bool,
        uid: Option<String>,
    ) -> Result<Arc<Value>, ApiError> {
        // Storage's own check, which a dry run never reaches; `0` and versions that are not
        // numbers pass it, as they do upstream.
        if !dry_run
            && meta::resource_version(&object)
                .and_then(|version| version.parse::<u64>().ok())
                .is_some_and(|version| version != 0)
        {
            return Err(ApiError::resource_version_on_create());
        }
        let mut state = self.lock();
        let entry = state.entry(resource)?;
        let def = entry.def;
        let slot = entry.storage;
        let namespace = if def.namespaced {
            let body_ns = meta::namespace(&object).map(str::to_string);
            match (namespace, body_ns) {
                (Some(path_ns), Some(body_ns)) if path_ns != body_ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(path_ns), _) => Some(path_ns.to_string()),
                (None, Some(body_ns)) => Some(body_ns),
                (None, None) => Some("default".to_string()),
            }
        } else {
            None
        };
        let name = match meta::name(&object) {
            Some(name) => name.to_string(),
            None => match meta::meta_str(&object, "generateName") {
                Some(prefix) => {
                    let mut attempt = format!("{prefix}{}", meta::name_suffix());
                    while state.objects[slot].contains_key(&key_for(namespace.as_deref(), &attempt))
                    {
                        attempt = format!("{prefix}{}", meta::name_suffix());
                    }
                    attempt
                }
                None => {
                    return Err(ApiError::invalid(
                        &def,
                        "",
                        vec![Cause::required("metadata.name")],
                    ));
                }
            },
        };
        let key = key_for(namespace.as_deref(), &name);
        if state.objects[slot].contains_key(&key) {
            return Err(ApiError::already_exists(&def, &name));
        }
        {
            let meta = meta::metadata_mut(&mut object);
            meta.insert("name".into(), json!(name));
            match &namespace {
                Some(ns) => meta.insert("namespace".into(), json!(ns)),
                None => meta.remove("namespace"),
            };
            meta.insert("uid".into(), json!(uid.unwrap_or_else(meta::new_uid)));
            meta.insert("creationTimestamp".into(), json!(meta::now()));
            for field in [
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
                "selfLink",
            ] {
                meta.remove(field);
            }
            if def.sets_generation {
                meta.insert("generation".into(), json!(1));
            } else {
                meta.remove("generation");
            }
        }
        let mut object = to_storage(&entry, object);
        prepare_create(&def, &mut object);
        set_type_meta(&entry, &mut object);
        let mut allocator = if dry_run {
            Some(state.allocator.clone())
        } else {
            None
        };
        let alloc = allocator.as_mut().unwrap_or(&mut state.allocator);
        admit(
            resource,
            &entry,
            None,
            Write::request(Part::Main),
            &mut object,
            alloc,
        )?;
        if dry_run {
            return Ok(view(&entry, Arc::new(object)));
        }
        let stored = self.commit(&mut state, slot, key, EventType::Added, object, None);
        Ok(view(&entry, stored))
    }

    /// Updates an existing object: `change` gets the current object and returns the proposed
    /// one. A `metadata.resourceVersion` in the proposal must match (409 otherwise). Status and
    /// immutable metadata are handled per `part`. An update that changes nothing commits
    /// nothing and returns the stored object.
    pub fn update<F>(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        dry_run: bool,
        change: F,
    ) -> Result<Arc<Value>, ApiError>
    where
        F: FnOnce(&Value) -> Result<Value, ApiError>,
    {
        self.update_as(
            resource,
            namespace,
            name,
            Write::request(part),
            dry_run,
            change,
        )
    }

    /// [`Store::update`], saying whether a client asks or a seed loads state.
    fn update_as<F>(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: &str,
        write: Write,
        dry_run: bool,
        change: F,
    ) -> Result<Arc<Value>, ApiError>
    where
        F: FnOnce(&Value) -> Result<Value, ApiError>,
    {
        let part = write.part;
        let mut state = self.lock();
        let entry = state.entry(resource)?;
        let def = entry.def;
        let slot = entry.storage;
        let namespace = if def.namespaced { namespace } else { None };
        let key = key_for(namespace, name);
        let current = state.objects[slot]
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def, name))?;
        // The caller works on the version it addressed.
        let current_view = view(&entry, current.clone());
        let proposed = change(&current_view)?;
        if let Some(body_name) = meta::name(&proposed)
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = meta::resource_version(&proposed)
            && Some(rv) != meta::resource_version(&current)
        {
            return Err(ApiError::conflict(&def, name));
        }
        let mut next = merge_parts(&def, part, &current, to_storage(&entry, proposed));
        carry_system_metadata(&current, &mut next);
        if meta::is_deleting(&current) {
            let old: Vec<&str> = meta::finalizers(&current);
            let added: Vec<String> = meta::finalizers(&next)
                .into_iter()
                .filter(|f| !old.contains(f))
                .map(str::to_string)
                .collect();
            if !added.is_empty() {
                return Err(ApiError::invalid(
                    &def,
                    name,
                    vec![Cause::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {added:?}"
                        ),
                    )],
                ));
            }
        }
        if resource == resources::validating_webhook_configurations() {
            // Defaults first, as kube-apiserver decodes them in: a manifest that leaves them
            // out is no change to the stored webhooks.
            validation::default_webhook_configuration(&mut next);
        }
        let source = resources::generation_source(&def);
        if def.sets_generation && next.get(source) != current.get(source) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta::metadata_mut(&mut next).insert("generation".into(), json!(generation + 1));
        }
        set_type_meta(&entry, &mut next);
        let mut scratch = if dry_run {
            Some(state.allocator.clone())
        } else {
            None
        };
        let alloc = scratch.as_mut().unwrap_or(&mut state.allocator);
        admit(resource, &entry, Some(&current), write, &mut next, alloc)?;
        if dry_run || next == *current {
            return Ok(if dry_run {
                view(&entry, Arc::new(next))
            } else {
                current_view
            });
        }
        let event_type = if meta::is_deleting(&next)
            && meta::finalizers(&next).is_empty()
            && (resource != resources::namespaces() || namespace_finalized(&next))
        {
            release(resource, &next, &mut state.allocator);
            EventType::Deleted
        } else {
            EventType::Modified
        };
        let stored = self.commit(&mut state, slot, key, event_type, next, Some(current));
        Ok(view(&entry, stored))
    }

    /// Deletes an object: gone at once without finalizers, otherwise marked with
    /// `deletionTimestamp` and removed when the last finalizer is.
    pub fn delete(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        dry_run: bool,
    ) -> Result<Deleted, ApiError> {
        self.delete_propagating(resource, namespace, name, preconditions, None, dry_run)
    }

    /// [`Store::delete`] with a propagation policy: `Orphan` and `Foreground` leave the object
    /// with the garbage collector's finalizer, `Background` takes those finalizers off.
    pub fn delete_propagating(
        &self,
        resource: ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
        propagation: Option<Propagation>,
        dry_run: bool,
    ) -> Result<Deleted, ApiError> {
        let mut state = self.lock();
        let entry = state.entry(resource)?;
        let def = entry.def;
        let slot = entry.storage;
        let namespace = if def.namespaced { namespace } else { None };
        let key = key_for(namespace, name);
        let current = state.objects[slot]
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&def, name))?;
        // rest.BeforeDelete (k8s.io/apiserver/pkg/registry/rest/delete.go) checks the
        // preconditions first and names the kind, not the resource, in its 409.
        let object_uid = meta::meta_str(&current, "uid").unwrap_or_default();
        let object_rv = meta::resource_version(&current).unwrap_or_default();
        let failed = match (&preconditions.uid, &preconditions.resource_version) {
            (Some(uid), _) if uid != object_uid => Some(format!(
                "the UID in the precondition ({uid}) does not match the UID in record \
                 ({object_uid}). The object might have been deleted and then recreated"
            )),
            (_, Some(rv)) if rv != object_rv => Some(format!(
                "the ResourceVersion in the precondition ({rv}) does not match the \
                 ResourceVersion in record ({object_rv}). The object might have been modified"
            )),
            _ => None,
        };
        if let Some(failed) = failed {
            return Err(ApiError::precondition_failed(&def, name, &failed));
        }
        // A namespace is first only marked Terminating; it goes once its contents are gone and
        // its spec.finalizers are done (kube-apiserver's namespace storage). Emptying it is
        // the namespace lifecycle's work.
        if resource == resources::namespaces() && !namespace_finalized(&current) {
            if meta::is_deleting(&current) {
                return Ok(held(&entry, current));
            }
            let mut marked = (*current).clone();
            meta::metadata_mut(&mut marked).insert("deletionTimestamp".into(), json!(meta::now()));
            marked["status"]["phase"] = json!(NAMESPACE_TERMINATING);
            if dry_run {
                return Ok(held(&entry, Arc::new(marked)));
            }
            return Ok(self.keep_marked(&mut state, &entry, key, marked, current));
        }
        if dry_run {
            return Ok(held(&entry, current));
        }
        let finalizers = finalizers_for_deletion(&current, propagation);
        if !finalizers.is_empty() {
            let unchanged = finalizers.iter().map(String::as_str).collect::<Vec<_>>()
                == meta::finalizers(&current);
            if meta::is_deleting(&current) && unchanged {
                return Ok(held(&entry, current));
            }
            let mut marked = (*current).clone();
            let meta = meta::metadata_mut(&mut marked);
            meta.insert("finalizers".into(), json!(finalizers));
            if !meta.contains_key("deletionTimestamp") {
                meta.insert("deletionTimestamp".into(), json!(meta::now()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            return Ok(self.keep_marked(&mut state, &entry, key, marked, current));
        }
        release(resource, &current, &mut state.allocator);
        let object = self.commit(
            &mut state,
            slot,
            key,
            EventType::Deleted,
            (*current).clone(),
            Some(current),
        );
        Ok(Deleted {
            object: view(&entry, object),
            gone: true,
        })
    }

    /// Stores `marked` (an object a delete leaves in place, marked for deletion) over
    /// `current`, and answers with it.
    fn keep_marked(
        &self,
        state: &mut State,
        entry: &Entry,
        key: ObjectKey,
        marked: Value,
        current: Arc<Value>,
    ) -> Deleted {
        let stored = self.commit(
            state,
            entry.storage,
            key,
            EventType::Modified,
            marked,
            Some(current),
        );
        held(entry, stored)
    }

    /// Deletes every Event not written for `ttl` (kube-apiserver's `--event-ttl`: each write
    /// of an Event gives it a lease of that length), as ordinary deletions that watchers see.
    /// An Event loaded from a state file counts as written when this first sees it. Returns
    /// how many went.
    pub fn expire_events(&self, ttl: std::time::Duration) -> usize {
        let now = std::time::Instant::now();
        // With the resourceVersion seen now: an Event written between this look and its
        // delete has a fresh lease and must stay (the delete's precondition fails).
        let expired: Vec<(ObjectKey, String)> = {
            let mut state = self.lock();
            let state = &mut *state;
            let stored = &state.objects[resources::core_events()];
            state.event_writes.retain(|key, _| stored.contains_key(key));
            for (key, event) in stored {
                state
                    .event_writes
                    .entry(key.clone())
                    .or_insert_with(|| lease_start(event, now, ttl));
            }
            state
                .event_writes
                .iter()
                .filter(|(_, written)| now.saturating_duration_since(**written) >= ttl)
                .filter_map(|(key, _)| {
                    let rv = meta::resource_version(stored.get(key)?)?;
                    Some((key.clone(), rv.to_string()))
                })
                .collect()
        };
        let mut removed = 0;
        for ((namespace, name), rv) in expired {
            let namespace = (!namespace.is_empty()).then_some(namespace.as_str());
            let preconditions = Preconditions {
                uid: None,
                resource_version: Some(rv),
            };
            // A failure is a client's write or delete in between, which settles the lease.
            if self
                .delete(
                    resources::core_events(),
                    namespace,
                    &name,
                    &preconditions,
                    false,
                )
                .is_ok()
            {
                removed += 1;
            }
        }
        removed
    }

    /// Stores an object as given (status included), assigning metadata and allocations like a
    /// create; for test fixtures and manifests loaded at start-up.
    ///
    /// The object is validated as a create and its status as a `/status` write, with one rule
    /// relaxed: a Service that is not a LoadBalancer may keep ingress points in its status.
    /// Seeds describe state, not requests: `kube-lb plan`, `audit`, `apiserver` and `up` load
    /// manifests that record a cluster (`kubectl get -o yaml` output), and a cluster can hold
    /// such a Service: written while `AllowServiceLBStatusOnNonLB` was on (the default before
    /// kube 1.29), it stays in storage as it is until something writes it again. Client writes
    /// of `/status` get kube 1.33's Forbidden.
    pub fn seed(&self, resource: ResourceId, mut object: Value) -> Result<Arc<Value>, ApiError> {
        // A recorded object carries the version it had there; it gets one of this store's.
        meta::metadata_mut(&mut object).remove("resourceVersion");
        let status = object.get("status").cloned();
        let namespace = meta::namespace(&object).map(str::to_string);
        // Manifests often leave their namespaces out; the cluster they record had them.
        let namespaced = self.registry().def(resource).is_some_and(|d| d.namespaced);
        if let Some(ns) = namespace.as_deref().filter(|_| namespaced) {
            let namespace_object =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match self.create(resources::namespaces(), None, namespace_object, false) {
                Ok(_) => {}
                Err(error) if error.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
        let uid = self.recorded_uid(resource, &object)?;
        let created = self.create_as(resource, namespace.as_deref(), object, false, uid)?;
        match status {
            Some(status) if self.registry().def(resource).is_some_and(|d| d.has_status) => {
                let name = meta::name(&created).unwrap_or_default().to_string();
                let write = Write {
                    part: Part::Status,
                    origin: Origin::Seed,
                };
                self.update_as(resource, namespace.as_deref(), &name, write, false, |cur| {
                    let mut next = cur.clone();
                    next["status"] = status;
                    Ok(next)
                })
            }
            _ => Ok(created),
        }
    }

    /// The `metadata.uid` a seeded object recorded, kept so that what was built for the object
    /// in the cluster it came from (cloud load balancers are named and tagged after their
    /// Service's UID) is recognised as its own. Refused when it is not a plausible UID or when
    /// another object of the kind already holds it: two objects with one identity would make
    /// each other's cloud resources look like theirs.
    fn recorded_uid(
        &self,
        resource: ResourceId,
        object: &Value,
    ) -> Result<Option<String>, ApiError> {
        let Some(uid) = meta::meta_str(object, "uid").filter(|uid| !uid.is_empty()) else {
            return Ok(None);
        };
        let state = self.lock();
        let entry = state.entry(resource)?;
        if !meta::plausible_uid(uid) {
            return Err(ApiError::invalid(
                &entry.def,
                meta::name(object).unwrap_or_default(),
                vec![Cause::invalid(
                    "metadata.uid",
                    uid,
                    "a recorded UID is 1 to 64 letters, digits and dashes",
                )],
            ));
        }
        let holder = state.objects[entry.storage]
            .values()
            .find(|other| meta::meta_str(other, "uid") == Some(uid));
        if let Some(holder) = holder {
            let holder = match meta::namespace(holder) {
                Some(ns) => format!("{ns}/{}", meta::name(holder).unwrap_or_default()),
                None => meta::name(holder).unwrap_or_default().to_string(),
            };
            return Err(ApiError::invalid(
                &entry.def,
                meta::name(object).unwrap_or_default(),
                vec![Cause::invalid(
                    "metadata.uid",
                    uid,
                    &format!("already the UID of {holder}"),
                )],
            ));
        }
        Ok(Some(uid.to_string()))
    }

    /// Everything, for persistence. Cheap under the lock: objects are shared, not copied.
    pub fn dump(&self) -> Dump {
        let state = self.lock();
        let objects = state
            .registry
            .storage_slots()
            .into_iter()
            .filter(|(slot, _)| state.objects.get(*slot).is_some_and(|o| !o.is_empty()))
            .map(|(slot, key)| (key, state.objects[slot].values().cloned().collect()))
            .collect();
        Dump {
            resource_version: state.resource_version,
            objects,
        }
    }

    /// Replaces the contents with a dump; allocations are rebuilt from the Services and the
    /// history starts empty at the dump's version (older watches get 410 and relist).
    pub fn restore(&self, dump: Dump) -> Result<(), ApiError> {
        let mut state = self.lock();
        let mut registry = Registry::builtin();
        // CRDs first: they decide which other keys name a resource.
        let crd_key = {
            let def = resources::get(resources::custom_resource_definitions());
            format!("{}/{}", def.api_version(), def.plural)
        };
        for crd_object in dump.objects.get(&crd_key).into_iter().flatten() {
            let name = meta::name(crd_object).unwrap_or_default().to_string();
            let (versions, storage_key) = crd::served_versions(crd_object);
            registry.install_crd(&name, versions, storage_key);
        }
        let slots = registry.storage_slots();
        let mut objects = vec![BTreeMap::new(); registry.slots()];
        let mut allocator = state.allocator.clone();
        allocator.clear();
        for (group_resource, items) in dump.objects {
            let Some(id) = slots
                .iter()
                .find(|(_, key)| *key == group_resource)
                .map(|(slot, _)| *slot)
            else {
                return Err(ApiError::bad_request(format!(
                    "state file names an unknown resource {group_resource}"
                )));
            };
            let slot = registry.entry(id).map_or(id, |e| e.storage);
            for item in items {
                let name = meta::name(&item).unwrap_or_default().to_string();
                let namespace = meta::namespace(&item).map(str::to_string);
                if id == resources::services() {
                    allocator.restore(&item);
                }
                let key = key_for(namespace.as_deref(), &name);
                if slot == id {
                    objects[slot].entry(key).or_insert(item);
                } else {
                    // A state file from before Events shared one storage: the events.k8s.io
                    // original wins over its core/v1 mirror.
                    objects[slot].insert(key, Arc::new(events::to_core_v1(&item)));
                }
            }
        }
        state.objects = objects;
        state.registry = Arc::new(registry);
        state.allocator = allocator;
        state.resource_version = dump.resource_version;
        let limit = state.history_limit();
        state.history = History::new(limit, dump.resource_version);
        self.committed.send_replace(dump.resource_version);
        Ok(())
    }
}

impl State {
    fn history_limit(&self) -> usize {
        self.history.limit()
    }

    /// The served resource `id`, or 404 when it is not (any longer) served.
    fn entry(&self, id: ResourceId) -> Result<Entry, ApiError> {
        self.registry
            .entry(id)
            .cloned()
            .ok_or_else(|| ApiError::no_route(&format!("resource #{id}")))
    }
}

/// An object as seen through `entry`: custom resources are stored in their CRD's storage
/// version and shown in the version addressed (conversion strategy `None`: only `apiVersion`
/// changes).
pub fn view(entry: &Entry, object: Arc<Value>) -> Arc<Value> {
    let api_version = entry.def.api_version();
    if object.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str()) {
        return object;
    }
    if entry.custom.is_some() {
        let mut shown = (*object).clone();
        shown["apiVersion"] = json!(api_version);
        return Arc::new(shown);
    }
    if is_events_v1(entry) {
        return Arc::new(events::to_events_v1(&object));
    }
    object
}

/// Whether `entry` serves the events.k8s.io/v1 view of the stored core/v1 Events.
fn is_events_v1(entry: &Entry) -> bool {
    entry.custom.is_none() && entry.def == *resources::get(resources::events_v1())
}

/// A request's object in the form its storage slot keeps (the inverse of [`view`]): an
/// events.k8s.io/v1 Event becomes its core/v1 form; everything else is stored as written
/// (a custom resource's `apiVersion` is set by [`set_type_meta`]).
fn to_storage(entry: &Entry, object: Value) -> Value {
    if is_events_v1(entry) {
        events::to_core_v1(&object)
    } else {
        object
    }
}

/// `apiVersion` and `kind` always reflect the resource stored (a custom resource's storage
/// version, core/v1 for Events).
fn set_type_meta(entry: &Entry, object: &mut Value) {
    let api_version = match &entry.custom {
        Some(custom) if !custom.storage_api_version.is_empty() => {
            custom.storage_api_version.clone()
        }
        Some(_) => entry.def.api_version(),
        // A built-in resource stored in another's slot is stored in that one's form.
        None => resources::get(entry.storage).api_version(),
    };
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(entry.def.kind));
    }
}

/// The label every namespace carries with its own name (`kubernetes.io/metadata.name`), set on
/// every write whatever the client sent, as kube-apiserver's namespace strategy canonicalises it:
/// selectors (NetworkPolicy `namespaceSelector`, webhooks) rely on it being there and true.
fn label_namespace_name(object: &mut Value, name: &str) {
    let meta = meta::metadata_mut(object);
    match meta.get_mut("labels") {
        Some(Value::Object(labels)) => {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        None | Some(Value::Null) => {
            meta.insert(
                "labels".into(),
                json!({"kubernetes.io/metadata.name": name}),
            );
        }
        // Not a map: the schema check refuses it before it gets here.
        Some(_) => {}
    }
}

/// A namespace's `spec.finalizers`: `[kubernetes]` when it is created, whatever the client sent,
/// and unchanged by updates of the main resource (kube-apiserver's namespace strategy; the
/// namespace lifecycle changes them through `/finalize`).
fn keep_namespace_finalizers(old: Option<&Value>, object: &mut Value) {
    let finalizers = match old {
        None => Some(json!(["kubernetes"])),
        Some(old) => old.pointer("/spec/finalizers").cloned(),
    };
    if !object.get("spec").is_some_and(Value::is_object) {
        object["spec"] = json!({});
    }
    match finalizers {
        Some(finalizers) => object["spec"]["finalizers"] = finalizers,
        None => {
            if let Some(spec) = object["spec"].as_object_mut() {
                spec.remove("finalizers");
            }
        }
    }
}

/// A delete's answer for an object that stays (finalizers hold it, or a dry run).
fn held(entry: &Entry, object: Arc<Value>) -> Deleted {
    Deleted {
        object: view(entry, object),
        gone: false,
    }
}

/// A Namespace's `status.phase` from its first delete on.
pub const NAMESPACE_TERMINATING: &str = "Terminating";

/// Whether a Namespace's `spec.finalizers` are all done (none left), so that a delete or an
/// update of a Terminating namespace removes it (`ShouldDeleteNamespaceDuringUpdate`).
pub fn namespace_finalized(namespace: &Value) -> bool {
    namespace
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
}

/// Per-kind create-time resets kube-apiserver performs.
fn prepare_create(def: &ResourceDef, object: &mut Value) {
    match def.kind {
        // A new Service never starts with a status (load-balancer ingress is the
        // controller's to write).
        "Service" if def.group.is_empty() => {
            if let Some(map) = object.as_object_mut() {
                map.insert("status".into(), json!({"loadBalancer": {}}));
            }
        }
        "Namespace" if def.group.is_empty() => {
            object["status"] = json!({"phase": "Active"});
        }
        "Pod"
            if def.group.is_empty()
                && object
                    .get("status")
                    .is_none_or(|s| s.get("phase").is_none()) =>
        {
            object["status"]["phase"] = json!("Pending");
        }
        _ => {}
    }
}

/// Builds the stored object from the proposal according to which part may change.
fn merge_parts(def: &ResourceDef, part: Part, current: &Value, proposed: Value) -> Value {
    match part {
        Part::Status => {
            let mut next = current.clone();
            match proposed.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(map) = next.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            // A status apply records its ownership in metadata.
            if let Some(owned) = proposed.pointer("/metadata/managedFields") {
                meta::metadata_mut(&mut next).insert("managedFields".into(), owned.clone());
            }
            next
        }
        Part::Main | Part::Finalize if def.has_status => {
            let mut next = proposed;
            if let Some(map) = next.as_object_mut() {
                match current.get("status") {
                    Some(status) => map.insert("status".into(), status.clone()),
                    None => map.remove("status"),
                };
            }
            next
        }
        Part::Main | Part::Finalize => proposed,
    }
}

/// Metadata clients cannot change through an update.
fn carry_system_metadata(current: &Value, next: &mut Value) {
    let old_meta = current.get("metadata").cloned().unwrap_or(json!({}));
    let meta = meta::metadata_mut(next);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.get(field) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    // Field ownership survives updates that do not mention it (kube-apiserver resets it only
    // when a client sends a replacement).
    if !meta.contains_key("managedFields")
        && let Some(owned) = old_meta.get("managedFields")
    {
        meta.insert("managedFields".into(), owned.clone());
    }
    meta.remove("selfLink");
}

/// Who writes an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A client request (or the embedded server's own API calls).
    Request,
    /// [`Store::seed`]: state loaded as given.
    Seed,
}

/// Which part of an object a write changes, and who writes it.
#[derive(Debug, Clone, Copy)]
struct Write {
    part: Part,
    origin: Origin,
}

impl Write {
    /// A client's write of `part`.
    fn request(part: Part) -> Self {
        Self {
            part,
            origin: Origin::Request,
        }
    }
}

/// Validation and allocation (`old` is `None` on create): the metadata rules every kind meets,
/// then the kind's own ([`admit_kind`]), reported together in one 422 with the metadata's
/// causes first, as kube-apiserver's strategies do.
fn admit(
    resource: ResourceId,
    entry: &Entry,
    old: Option<&Value>,
    write: Write,
    object: &mut Value,
    allocator: &mut Allocator,
) -> Result<(), ApiError> {
    let def = &entry.def;
    let name = meta::name(object).unwrap_or_default().to_string();
    // Names are checked when objects are created: an update cannot change one
    // (carry_system_metadata keeps it), and an update through events.k8s.io/v1 must not refuse
    // the name a core/v1 create accepted.
    let mut meta_causes = match old {
        None => name_causes(resource, object),
        Some(_) => Vec::new(),
    };
    if resource == resources::core_events() {
        // Upstream's core/v1 Event strategy has no metadata rules: rest.BeforeCreate and
        // BeforeUpdate apply the generic ones after the kind's own, as an error of their own.
        if !meta_causes.is_empty() {
            return Err(ApiError::invalid(def, &name, meta_causes));
        }
        admit_kind(resource, entry, old, write, object, allocator)?;
        let causes = validation::validate_object_meta(object, old.is_none());
        if causes.is_empty() {
            return Ok(());
        }
        return Err(ApiError::invalid(def, &name, causes));
    }
    meta_causes.extend(validation::validate_object_meta(object, old.is_none()));
    if meta_causes.is_empty() {
        return admit_kind(resource, entry, old, write, object, allocator);
    }
    // The request fails whatever the kind's rules say: what they would allocate is thrown away.
    let mut scratch = allocator.clone();
    match admit_kind(resource, entry, old, write, object, &mut scratch) {
        Err(error) if error.code == 422 => Err(error.with_causes_first(meta_causes)),
        _ => Err(ApiError::invalid(def, &name, meta_causes)),
    }
}

/// The kind's own validation, defaulting and allocation.
fn admit_kind(
    resource: ResourceId,
    entry: &Entry,
    old: Option<&Value>,
    write: Write,
    object: &mut Value,
    allocator: &mut Allocator,
) -> Result<(), ApiError> {
    let def = &entry.def;
    let name = meta::name(object).unwrap_or_default().to_string();
    default_protocols(def, object);
    if resource == resources::namespaces() {
        label_namespace_name(object, &name);
        if write.part != Part::Finalize {
            keep_namespace_finalizers(old, object);
        }
    }
    if resource == resources::services() {
        let admitted = match (write.part, old) {
            (Part::Status, Some(_)) => {
                let gate = match write.origin {
                    Origin::Request => services::LbStatusOnNonLb::Forbidden,
                    Origin::Seed => services::LbStatusOnNonLb::Allowed,
                };
                services::admit_status(object, gate)
            }
            _ => services::admit(old, object, allocator),
        };
        admitted.map_err(|causes| ApiError::invalid(def, &name, causes))?;
    }
    let kind_causes = match (def.group, def.kind) {
        ("", "Endpoints") => validation::validate_endpoints(object, allocator),
        ("discovery.k8s.io", "EndpointSlice") => {
            validation::validate_endpoint_slice(old, object, allocator)
        }
        ("", "ConfigMap") => validation::validate_config_map(old, object),
        ("", "Node") => {
            validation::sync_pod_cidrs(object);
            validation::validate_node(object)
        }
        ("coordination.k8s.io", "Lease") => validation::validate_lease(object),
        ("", "Namespace") => validation::validate_namespace_finalizers(object),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            validation::default_webhook_configuration(object);
            validation::validate_webhook_configuration(old, object)
        }
        _ => Vec::new(),
    };
    if !kind_causes.is_empty() {
        return Err(qualified_invalid(def, &name, kind_causes));
    }
    let event_api = if resource == resources::core_events() {
        Some(EventApi::Core)
    } else if resource == resources::events_v1() {
        Some(EventApi::EventsV1)
    } else {
        None
    };
    if let Some(api) = event_api {
        let causes = match old {
            None => events::validate_create(object, api),
            Some(old) => events::validate_update(object, old, api),
        };
        if !causes.is_empty() {
            // Upstream validates the internal (core) Event, so either API names the core
            // kind: `Event "x" is invalid`.
            return Err(ApiError::invalid(
                resources::get(resources::core_events()),
                &name,
                causes,
            ));
        }
    }
    if resource == resources::custom_resource_definitions() {
        crd::apply_defaults(object);
        let causes = crd::validate(object, old);
        if !causes.is_empty() {
            return Err(qualified_invalid(def, &name, causes));
        }
        object["status"] = crd::status(object, old);
    }
    if let Some(schema) = entry.custom.as_ref().and_then(|c| c.schema.as_ref()) {
        let causes = crd::schema::admit(object, schema);
        if !causes.is_empty() {
            return Err(qualified_invalid(def, &name, causes));
        }
    }
    Ok(())
}

/// What is wrong with the name (and `generateName`) of a new object, in kube-apiserver's words:
/// Namespaces need a DNS-1123 label, Services a DNS-1035 label, core/v1 Events only a URL path
/// segment (upstream gives them no ObjectMeta validation of their own, only rest.BeforeCreate's
/// path-segment rule), every other kind a DNS-1123 subdomain. A `generateName` is checked as a
/// prefix: a trailing `-` is allowed.
fn name_causes(resource: ResourceId, object: &Value) -> Vec<Cause> {
    let problems: fn(&str) -> Vec<String> = if resource == resources::core_events() {
        meta::path_segment_name_problems
    } else if resource == resources::namespaces() {
        meta::dns1123_label_problems
    } else if resource == resources::services() {
        meta::dns1035_label_problems
    } else {
        meta::dns1123_subdomain_problems
    };
    let mut causes = Vec::new();
    if let Some(prefix) = meta::meta_str(object, "generateName") {
        // maskTrailingDash: `web-` stands for `web-` plus a suffix.
        let masked = match prefix.strip_suffix('-') {
            Some(head) if !head.is_empty() => format!("{head}a"),
            _ => prefix.to_string(),
        };
        for problem in problems(&masked) {
            causes.push(Cause::invalid("metadata.generateName", prefix, &problem));
        }
    }
    let name = meta::name(object).unwrap_or_default();
    for problem in problems(name) {
        causes.push(Cause::invalid("metadata.name", name, &problem));
    }
    causes
}

/// 422 naming the kind with its group (`IPPool.kube-lb.io "x" is invalid: ...`), as
/// kube-apiserver does for every kind outside the core group.
fn qualified_invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> ApiError {
    // `ApiError::invalid` qualifies the kind itself.
    ApiError::invalid(def, name, causes)
}

/// Port protocols default to TCP in Pods and EndpointSlices, as kube-apiserver's defaulting
/// does (Services get theirs in `services::apply_defaults`).
fn default_protocols(def: &resources::ResourceDef, object: &mut Value) {
    let default_list = |ports: Option<&mut Value>| {
        if let Some(Value::Array(ports)) = ports {
            for port in ports.iter_mut().filter(|p| p.is_object()) {
                if port.get("protocol").is_none_or(Value::is_null) {
                    port["protocol"] = json!("TCP");
                }
            }
        }
    };
    match (def.group, def.kind) {
        ("", "Pod") => {
            for list in ["containers", "initContainers"] {
                if let Some(Value::Array(containers)) = object.pointer_mut(&format!("/spec/{list}"))
                {
                    for container in containers.iter_mut() {
                        default_list(container.get_mut("ports"));
                    }
                }
            }
        }
        ("discovery.k8s.io", "EndpointSlice") => default_list(object.get_mut("ports")),
        _ => {}
    }
}

fn release(resource: ResourceId, object: &Value, allocator: &mut Allocator) {
    if resource == resources::services() {
        allocator.release(object);
    }
}

#[cfg(test)]
mod tests;

/// Where the lease of an Event that expiry sees for the first time without having seen it
/// written (one loaded from a state file) starts: at its last write as the Event itself tells
/// it, the latest of its timestamps and of its managers' write times, as kube-apiserver's
/// etcd lease started at that write and outlived a restart. An Event older than `ttl` expires
/// at once; one with no readable time (or a time ahead of this clock) starts its lease `now`.
fn lease_start(
    event: &Value,
    now: std::time::Instant,
    ttl: std::time::Duration,
) -> std::time::Instant {
    let managers = event["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|entry| &entry["time"]);
    let written = [
        &event["metadata"]["creationTimestamp"],
        &event["lastTimestamp"],
        &event["eventTime"],
        &event["series"]["lastObservedTime"],
    ]
    .into_iter()
    .chain(managers)
    .filter_map(Value::as_str)
    .filter_map(|time| humantime::parse_rfc3339_weak(time).ok())
    .max();
    let age = written
        .and_then(|written| std::time::SystemTime::now().duration_since(written).ok())
        .unwrap_or_default();
    now.checked_sub(age.min(ttl)).unwrap_or(now)
}

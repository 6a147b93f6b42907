//! The table of resource kinds the server knows: where they live in the URL space, whether they
//! are namespaced, which subresources they have and how the apiserver treats them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::crd::CustomVersion;

/// Static description of one served resource (one group/version/resource triple).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; empty for the legacy core group served under `/api`.
    pub group: &'static str,
    /// API version within the group.
    pub version: &'static str,
    /// Plural lowercase resource name used in URLs (`services`).
    pub plural: &'static str,
    /// Singular lowercase name, reported in discovery.
    pub singular: &'static str,
    /// The `kind` of a single object.
    pub kind: &'static str,
    /// Whether objects live inside a namespace.
    pub namespaced: bool,
    /// Whether a `/status` subresource exists; then the main resource ignores status changes.
    pub has_status: bool,
    /// Whether `metadata.generation` is maintained (bumped on every spec change).
    pub sets_generation: bool,
    /// Short names reported in discovery (used by kubectl, e.g. `svc`).
    pub short_names: &'static [&'static str],
    /// Categories reported in discovery: `kubectl get all` lists the resources in `all`.
    pub categories: &'static [&'static str],
}

impl ResourceDef {
    /// `group/version`, or just `version` for the core group — the value of `apiVersion`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a list of these objects.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Human readable `plural.group` (as kube-apiserver writes it in Status details).
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Path prefix of the group version (`/api/v1`, `/apis/discovery.k8s.io/v1`).
    pub fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// Path of one object, used for `metadata.selfLink`-like messages and tests.
    pub fn object_path(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!(
                "{}/namespaces/{ns}/{}/{name}",
                self.group_version_path(),
                self.plural
            ),
            _ => format!("{}/{}/{name}", self.group_version_path(), self.plural),
        }
    }
}

/// A namespaced resource without a status subresource; see the modifiers below.
const fn def(
    group_version: (&'static str, &'static str),
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    short_names: &'static [&'static str],
) -> ResourceDef {
    ResourceDef {
        group: group_version.0,
        version: group_version.1,
        plural,
        singular,
        kind,
        namespaced: true,
        has_status: false,
        sets_generation: false,
        short_names,
        categories: &[],
    }
}

impl ResourceDef {
    const fn cluster_scoped(mut self) -> Self {
        self.namespaced = false;
        self
    }

    const fn with_status(mut self) -> Self {
        self.has_status = true;
        self
    }

    /// In the `all` category, as kube-apiserver puts Pods and Services (`kubectl get all`).
    const fn in_all(mut self) -> Self {
        self.categories = &["all"];
        self
    }

    const fn with_generation(mut self) -> Self {
        self.sets_generation = true;
        self
    }
}

const CORE: (&str, &str) = ("", "v1");

/// Every resource the server serves. Index positions are stable ids ([`ResourceId`]).
///
/// Of these kinds only CustomResourceDefinitions and ValidatingWebhookConfigurations get
/// `metadata.generation` from kube-apiserver 1.33 (Services, Nodes, Pods and the rest have no
/// observedGeneration contract); custom resources get it too. A webhook configuration has no
/// `spec`: its generation follows `webhooks` ([`generation_source`]).
pub const RESOURCES: &[ResourceDef] = &[
    def(CORE, "namespaces", "namespace", "Namespace", &["ns"])
        .cluster_scoped()
        .with_status(),
    def(CORE, "services", "service", "Service", &["svc"])
        .with_status()
        .in_all(),
    def(CORE, "endpoints", "endpoints", "Endpoints", &["ep"]),
    def(CORE, "nodes", "node", "Node", &["no"])
        .cluster_scoped()
        .with_status(),
    def(CORE, "pods", "pod", "Pod", &["po"])
        .with_status()
        .in_all(),
    def(CORE, "events", "event", "Event", &["ev"]),
    def(CORE, "configmaps", "configmap", "ConfigMap", &["cm"]),
    def(
        ("discovery.k8s.io", "v1"),
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        &[],
    ),
    def(
        ("coordination.k8s.io", "v1"),
        "leases",
        "lease",
        "Lease",
        &[],
    ),
    def(("events.k8s.io", "v1"), "events", "event", "Event", &["ev"]),
    def(
        ("apiextensions.k8s.io", "v1"),
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        &["crd", "crds"],
    )
    .cluster_scoped()
    .with_status()
    .with_generation(),
    def(
        ("admissionregistration.k8s.io", "v1"),
        "validatingwebhookconfigurations",
        "validatingwebhookconfiguration",
        "ValidatingWebhookConfiguration",
        &[],
    )
    .cluster_scoped()
    .with_generation(),
];

/// Index of a resource in [`RESOURCES`].
pub type ResourceId = usize;

// Positions in RESOURCES of the kinds with special behaviour (checked by a test).
const NAMESPACES: ResourceId = 0;
const SERVICES: ResourceId = 1;
const CORE_EVENTS: ResourceId = 5;
const EVENTS_V1: ResourceId = 9;
const CRDS: ResourceId = 10;
const VALIDATING_WEBHOOK_CONFIGURATIONS: ResourceId = 11;

/// Looks up a resource by group, version and plural name.
pub fn find(group: &str, version: &str, plural: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

/// Looks up a resource by `apiVersion` and `kind` (as found in a manifest).
pub fn find_by_kind(api_version: &str, kind: &str) -> Option<ResourceId> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind)
}

/// The resource definition for an id.
pub fn get(id: ResourceId) -> &'static ResourceDef {
    &RESOURCES[id]
}

/// Id of the core/v1 Service resource.
pub fn services() -> ResourceId {
    SERVICES
}

/// Id of the admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration resource.
pub fn validating_webhook_configurations() -> ResourceId {
    VALIDATING_WEBHOOK_CONFIGURATIONS
}

/// The top-level field whose changes bump `metadata.generation` of a kind that keeps one:
/// `webhooks` for a ValidatingWebhookConfiguration (its registry strategy compares the
/// webhook lists), `spec` for every other kind.
pub fn generation_source(def: &ResourceDef) -> &'static str {
    match (def.group, def.kind) {
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => "webhooks",
        _ => "spec",
    }
}

/// Id of the core/v1 Event resource.
pub fn core_events() -> ResourceId {
    CORE_EVENTS
}

/// Id of the events.k8s.io/v1 Event resource.
pub fn events_v1() -> ResourceId {
    EVENTS_V1
}

/// Id of the apiextensions.k8s.io/v1 CustomResourceDefinition resource.
pub fn custom_resource_definitions() -> ResourceId {
    CRDS
}

/// Id of the core/v1 Namespace resource.
pub fn namespaces() -> ResourceId {
    NAMESPACES
}

/// The storage slot of a built-in resource: its own, except events.k8s.io/v1 Events, which
/// are core/v1 Events seen through another API (one object, as in kube-apiserver's etcd).
pub fn builtin_storage(id: ResourceId) -> ResourceId {
    if id == EVENTS_V1 { CORE_EVENTS } else { id }
}

/// Distinct `(group, version)` pairs, in table order.
pub fn group_versions() -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    for r in RESOURCES {
        if !out.contains(&(r.group, r.version)) {
            out.push((r.group, r.version));
        }
    }
    out
}

/// A string with the `'static` lifetime [`ResourceDef`] needs, for names that come from
/// CustomResourceDefinitions at run time. Each distinct name is allocated once per process and
/// then shared, so re-registering the same CRD (restarts of an embedded server, tests) costs
/// nothing; only names never seen before grow the set.
pub fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<BTreeSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(|| Mutex::new(BTreeSet::new()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(existing) = names.get(name) {
        return existing;
    }
    let leaked: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// One served resource of a [`Registry`].
#[derive(Debug, Clone)]
pub struct Entry {
    /// URL space, scope and behaviour.
    pub def: ResourceDef,
    /// The slot holding the objects: the entry's own id for built-in kinds (core/v1 Events'
    /// for events.k8s.io/v1 Events); one slot per CustomResourceDefinition, shared by all its
    /// served versions.
    pub storage: ResourceId,
    /// Schema and printer columns of a custom resource version; `None` for built-in kinds.
    pub custom: Option<Arc<CustomVersion>>,
}

/// The resources a server serves right now: the built-in table plus the versions of every
/// established CustomResourceDefinition. Ids are never reused, so an event or a watch of a
/// deleted CRD can never be mistaken for a later one.
#[derive(Debug, Clone)]
pub struct Registry {
    /// Indexed by id; `None` for storage-only slots and for resources no longer served.
    entries: Vec<Option<Entry>>,
    /// CRD name to its storage slot.
    crds: BTreeMap<String, ResourceId>,
    /// Storage slot of a CRD to its persistence key (`group/version/plural` of the storage
    /// version).
    storage_keys: BTreeMap<ResourceId, String>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Registry {
    /// Only the built-in resources.
    pub fn builtin() -> Self {
        Self {
            entries: RESOURCES
                .iter()
                .enumerate()
                .map(|(id, def)| {
                    Some(Entry {
                        def: *def,
                        storage: builtin_storage(id),
                        custom: None,
                    })
                })
                .collect(),
            crds: BTreeMap::new(),
            storage_keys: BTreeMap::new(),
        }
    }

    /// Number of ids (served resources and storage slots) ever handed out.
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// The served resource with this id.
    pub fn entry(&self, id: ResourceId) -> Option<&Entry> {
        self.entries.get(id).and_then(Option::as_ref)
    }

    /// The definition of a served resource.
    pub fn def(&self, id: ResourceId) -> Option<ResourceDef> {
        self.entry(id).map(|e| e.def)
    }

    /// Every served resource with its id, built-in ones first.
    pub fn entries(&self) -> impl Iterator<Item = (ResourceId, &Entry)> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(id, e)| e.as_ref().map(|e| (id, e)))
    }

    /// One served resource per storage slot (the first by id): the versions of a custom
    /// resource, and the two Event APIs, share their objects, so a walk over every stored
    /// object visits each slot once.
    pub fn slot_entries(&self) -> Vec<(ResourceId, &Entry)> {
        let mut seen = Vec::new();
        self.entries()
            .filter(|(_, entry)| {
                let first = !seen.contains(&entry.storage);
                seen.push(entry.storage);
                first
            })
            .collect()
    }

    /// Looks up a served resource by group, version and plural name.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResourceId> {
        self.entries()
            .find(|(_, e)| {
                e.def.group == group && e.def.version == version && e.def.plural == plural
            })
            .map(|(id, _)| id)
    }

    /// Looks up a served resource by `apiVersion` and `kind`.
    pub fn find_by_kind(&self, api_version: &str, kind: &str) -> Option<ResourceId> {
        self.entries()
            .find(|(_, e)| e.def.kind == kind && e.def.api_version() == api_version)
            .map(|(id, _)| id)
    }

    /// Whether any served resource is in this group.
    pub fn has_group(&self, group: &str) -> bool {
        !group.is_empty() && self.entries().any(|(_, e)| e.def.group == group)
    }

    /// Distinct `(group, version)` pairs, in id order (versions of a CRD in its listed order).
    pub fn group_versions(&self) -> Vec<(&'static str, &'static str)> {
        let mut out: Vec<(&'static str, &'static str)> = Vec::new();
        for (_, e) in self.entries() {
            if !out.contains(&(e.def.group, e.def.version)) {
                out.push((e.def.group, e.def.version));
            }
        }
        out
    }

    /// Storage slots holding objects, each with its persistence key.
    pub fn storage_slots(&self) -> Vec<(ResourceId, String)> {
        let mut out: Vec<(ResourceId, String)> = RESOURCES
            .iter()
            .enumerate()
            .map(|(id, def)| (id, format!("{}/{}", def.api_version(), def.plural)))
            .collect();
        out.extend(self.storage_keys.iter().map(|(id, key)| (*id, key.clone())));
        out
    }

    /// The storage slot of a CRD, by the CRD's name.
    pub fn crd_storage(&self, crd_name: &str) -> Option<ResourceId> {
        self.crds.get(crd_name).copied()
    }

    /// Registers (or re-registers after an update) the served versions of a CRD. Versions
    /// kept keep their ids; versions no longer served stop being routable. Returns the storage
    /// slot.
    pub fn install_crd(
        &mut self,
        crd_name: &str,
        versions: Vec<(ResourceDef, Arc<CustomVersion>)>,
        storage_key: String,
    ) -> ResourceId {
        let slot = match self.crds.get(crd_name) {
            Some(slot) => *slot,
            None => {
                self.entries.push(None);
                let slot = self.entries.len() - 1;
                self.crds.insert(crd_name.to_string(), slot);
                slot
            }
        };
        self.storage_keys.insert(slot, storage_key);
        let mut kept = Vec::new();
        for (def, custom) in versions {
            let existing = self.entries().find(|(_, e)| {
                e.storage == slot
                    && e.def.group == def.group
                    && e.def.version == def.version
                    && e.def.plural == def.plural
            });
            let entry = Entry {
                def,
                storage: slot,
                custom: Some(custom),
            };
            match existing.map(|(id, _)| id) {
                Some(id) => {
                    self.entries[id] = Some(entry);
                    kept.push(id);
                }
                None => {
                    self.entries.push(Some(entry));
                    kept.push(self.entries.len() - 1);
                }
            }
        }
        for (id, entry) in self.entries.iter_mut().enumerate() {
            if entry.as_ref().is_some_and(|e| e.storage == slot) && !kept.contains(&id) {
                *entry = None;
            }
        }
        slot
    }

    /// Every served custom resource version with its schema, for the OpenAPI documents.
    pub fn published_schemas(&self) -> Vec<crate::crd::PublishedSchema> {
        self.entries()
            .filter_map(|(_, e)| {
                let custom = e.custom.as_ref()?;
                Some(crate::crd::PublishedSchema {
                    group: e.def.group.to_string(),
                    version: e.def.version.to_string(),
                    kind: e.def.kind.to_string(),
                    plural: e.def.plural.to_string(),
                    namespaced: e.def.namespaced,
                    schema: custom
                        .schema
                        .clone()
                        .unwrap_or_else(|| serde_json::json!({})),
                })
            })
            .collect()
    }

    /// Stops serving a CRD's versions; returns its storage slot.
    pub fn remove_crd(&mut self, crd_name: &str) -> Option<ResourceId> {
        let slot = self.crds.remove(crd_name)?;
        self.storage_keys.remove(&slot);
        for entry in &mut self.entries {
            if entry.as_ref().is_some_and(|e| e.storage == slot) {
                *entry = None;
            }
        }
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_round_trip() {
        for (id, r) in RESOURCES.iter().enumerate() {
            assert_eq!(find(r.group, r.version, r.plural), Some(id));
            assert_eq!(find_by_kind(&r.api_version(), r.kind), Some(id));
        }
        assert_eq!(get(services()).kind, "Service");
        assert_eq!(get(namespaces()).kind, "Namespace");
        assert_eq!(get(core_events()).api_version(), "v1");
        assert_eq!(get(core_events()).kind, "Event");
        assert_eq!(get(events_v1()).api_version(), "events.k8s.io/v1");
        assert_eq!(get(events_v1()).kind, "Event");
        // One storage for both Event APIs.
        let registry = Registry::builtin();
        assert_eq!(registry.entry(events_v1()).unwrap().storage, core_events());
        assert_eq!(
            registry.entry(core_events()).unwrap().storage,
            core_events()
        );
        assert_eq!(
            get(custom_resource_definitions()).kind,
            "CustomResourceDefinition"
        );
        let webhooks = get(validating_webhook_configurations());
        assert_eq!(webhooks.kind, "ValidatingWebhookConfiguration");
        assert_eq!(webhooks.api_version(), "admissionregistration.k8s.io/v1");
        assert!(!webhooks.namespaced && !webhooks.has_status && webhooks.sets_generation);
        assert_eq!(generation_source(webhooks), "webhooks");
        assert_eq!(
            generation_source(get(custom_resource_definitions())),
            "spec"
        );
    }

    #[test]
    fn crd_versions_keep_ids_and_share_storage() {
        let mut registry = Registry::builtin();
        let def = |version: &str| ResourceDef {
            group: intern("kube-lb.io"),
            version: intern(version),
            plural: "ippools",
            singular: "ippool",
            kind: "IPPool",
            namespaced: false,
            has_status: true,
            sets_generation: true,
            short_names: &[],
            categories: &[],
        };
        let custom = Arc::new(CustomVersion::default());
        let slot = registry.install_crd(
            "ippools.kube-lb.io",
            vec![(def("v1alpha1"), custom.clone())],
            "kube-lb.io/v1alpha1/ippools".into(),
        );
        let alpha = registry.find("kube-lb.io", "v1alpha1", "ippools").unwrap();
        assert_eq!(registry.entry(alpha).unwrap().storage, slot);
        assert!(
            registry.def(slot).is_none(),
            "a storage slot is not routable"
        );
        let again = registry.install_crd(
            "ippools.kube-lb.io",
            vec![(def("v1alpha1"), custom.clone()), (def("v1"), custom)],
            "kube-lb.io/v1/ippools".into(),
        );
        assert_eq!(again, slot);
        assert_eq!(
            registry.find("kube-lb.io", "v1alpha1", "ippools"),
            Some(alpha)
        );
        let v1 = registry.find("kube-lb.io", "v1", "ippools").unwrap();
        assert_eq!(registry.entry(v1).unwrap().storage, slot);
        assert!(registry.has_group("kube-lb.io"));
        let published = registry.published_schemas();
        assert_eq!(published.len(), 2);
        assert_eq!(published[0].kind, "IPPool");
        assert!(
            registry
                .storage_slots()
                .contains(&(slot, "kube-lb.io/v1/ippools".to_string()))
        );
        assert_eq!(registry.remove_crd("ippools.kube-lb.io"), Some(slot));
        assert!(registry.find("kube-lb.io", "v1", "ippools").is_none());
        assert!(!registry.has_group("kube-lb.io"));
        // Ids are not reused.
        let third = registry.install_crd(
            "ippools.kube-lb.io",
            vec![(def("v1"), Arc::new(CustomVersion::default()))],
            "kube-lb.io/v1/ippools".into(),
        );
        assert!(third > v1);
    }

    #[test]
    fn interned_names_are_shared() {
        let a = intern("widgets");
        let owned = String::from("widgets");
        let b = intern(owned.as_str());
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn paths() {
        let svc = get(services());
        assert_eq!(
            svc.object_path(Some("ns"), "web"),
            "/api/v1/namespaces/ns/services/web"
        );
        let slice = get(find("discovery.k8s.io", "v1", "endpointslices").unwrap());
        assert_eq!(slice.api_version(), "discovery.k8s.io/v1");
        assert_eq!(slice.group_resource(), "endpointslices.discovery.k8s.io");
    }
}

//! The table of resource kinds the server knows: where they live in the URL space, whether they
//! are namespaced, which subresources they have and how the apiserver treats them.

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
}

const CORE: (&str, &str) = ("", "v1");

/// Every resource the server serves. Index positions are stable ids ([`ResourceId`]).
///
/// None of these kinds gets `metadata.generation` from kube-apiserver 1.33 (Services, Nodes,
/// Pods and the rest have no observedGeneration contract), so `sets_generation` is false for
/// all; the generic machinery honours the flag for kinds added later.
pub const RESOURCES: &[ResourceDef] = &[
    def(CORE, "namespaces", "namespace", "Namespace", &["ns"])
        .cluster_scoped()
        .with_status(),
    def(CORE, "services", "service", "Service", &["svc"]).with_status(),
    def(CORE, "endpoints", "endpoints", "Endpoints", &["ep"]),
    def(CORE, "nodes", "node", "Node", &["no"])
        .cluster_scoped()
        .with_status(),
    def(CORE, "pods", "pod", "Pod", &["po"]).with_status(),
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
];

/// Index of a resource in [`RESOURCES`].
pub type ResourceId = usize;

// Positions in RESOURCES of the kinds with special behaviour (checked by a test).
const NAMESPACES: ResourceId = 0;
const SERVICES: ResourceId = 1;
const CORE_EVENTS: ResourceId = 5;
const EVENTS_V1: ResourceId = 9;

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

/// Id of the core/v1 Event resource.
pub fn core_events() -> ResourceId {
    CORE_EVENTS
}

/// Id of the events.k8s.io/v1 Event resource.
pub fn events_v1() -> ResourceId {
    EVENTS_V1
}

/// Id of the core/v1 Namespace resource.
pub fn namespaces() -> ResourceId {
    NAMESPACES
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

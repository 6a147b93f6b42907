//! Maps request paths to what they address, without touching the store.

use super::review;
use crate::resources::{self, Registry, ResourceId};

/// What a request path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/version`.
    Version,
    /// `/healthz`, `/livez`, `/readyz`.
    Health,
    /// `/api`.
    CoreVersions,
    /// `/openapi/v2`.
    OpenApiV2,
    /// `/openapi/v3`.
    OpenApiIndex,
    /// `/openapi/v3/<group-version path>`.
    OpenApiDocument(String),
    /// `/apis`.
    Groups,
    /// `/apis/<group>`.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`.
    Resources {
        /// API group ("" for core).
        group: String,
        /// API version.
        version: String,
    },
    /// A collection: one namespace, all namespaces, or a cluster-scoped resource.
    Collection {
        /// The resource.
        resource: ResourceId,
        /// Namespace from the path, if any.
        namespace: Option<String>,
        /// Reached through the legacy `/watch/` prefix.
        legacy_watch: bool,
    },
    /// A self review of `authorization.k8s.io/v1`, answered and never stored.
    Review(super::review::Review),
    /// One object, or one of its subresources.
    Object {
        /// The resource.
        resource: ResourceId,
        /// Namespace from the path, if any.
        namespace: Option<String>,
        /// Object name.
        name: String,
        /// Subresource (`status`).
        subresource: Option<String>,
        /// Reached through the legacy `/watch/` prefix.
        legacy_watch: bool,
    },
}

/// Parses a request path against what `registry` serves; `None` when it names nothing.
pub fn parse(path: &str, registry: &Registry) -> Option<Route> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segments.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz" | "livez" | "readyz", ..] => Some(Route::Health),
        ["api"] => Some(Route::CoreVersions),
        ["openapi", "v2"] => Some(Route::OpenApiV2),
        ["openapi", "v3"] => Some(Route::OpenApiIndex),
        ["openapi", "v3", rest @ ..] => Some(Route::OpenApiDocument(rest.join("/"))),
        ["apis"] => Some(Route::Groups),
        ["apis", group] => (registry.has_group(group) || *group == review::GROUP)
            .then(|| Route::Group((*group).to_string())),
        ["apis", review::GROUP, review::VERSION] => Some(Route::Resources {
            group: review::GROUP.to_string(),
            version: review::VERSION.to_string(),
        }),
        ["apis", review::GROUP, review::VERSION, rest @ ..] => {
            review::Review::from_path(rest).map(Route::Review)
        }
        ["api", version, rest @ ..] => resource_route(registry, "", version, rest),
        ["apis", group, version, rest @ ..] => resource_route(registry, group, version, rest),
        _ => None,
    }
}

fn resource_route(registry: &Registry, group: &str, version: &str, rest: &[&str]) -> Option<Route> {
    if !registry.group_versions().contains(&(group, version)) {
        return None;
    }
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    let find = |plural: &str| registry.find(group, version, plural);
    let is_namespaced = |id: ResourceId| registry.def(id).is_some_and(|d| d.namespaced);
    let namespaced = |plural: &str| find(plural).filter(|id| is_namespaced(*id));
    let cluster = |plural: &str| find(plural);
    let object = |resource, namespace: Option<&str>, name: &str, sub: Option<&str>| {
        Some(Route::Object {
            resource,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
            subresource: sub.map(str::to_string),
            legacy_watch,
        })
    };
    let collection = |resource, namespace: Option<&str>| {
        Some(Route::Collection {
            resource,
            namespace: namespace.map(str::to_string),
            legacy_watch,
        })
    };
    match rest {
        [] if !legacy_watch => Some(Route::Resources {
            group: group.to_string(),
            version: version.to_string(),
        }),
        // Namespace subresources share the shape of a namespaced collection; no resource is
        // called `status` or `finalize`, so those words decide.
        ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
            object(resources::namespaces(), None, ns, Some(sub))
        }
        ["namespaces", ns, plural] => collection(namespaced(plural)?, Some(ns)),
        ["namespaces", ns, plural, name] => object(namespaced(plural)?, Some(ns), name, None),
        ["namespaces", ns, plural, name, sub] => {
            object(namespaced(plural)?, Some(ns), name, Some(sub))
        }
        [plural] => collection(cluster(plural)?, None),
        [plural, name] => {
            let id = cluster(plural)?;
            (!is_namespaced(id)).then_some(())?;
            object(id, None, name, None)
        }
        [plural, name, sub] => {
            let id = cluster(plural)?;
            (!is_namespaced(id)).then_some(())?;
            object(id, None, name, Some(sub))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(group: &str, plural: &str) -> ResourceId {
        resources::find(group, "v1", plural).unwrap()
    }

    #[test]
    fn routes_table() {
        let svc = id("", "services");
        let ns = id("", "namespaces");
        let node = id("", "nodes");
        let slices = id("discovery.k8s.io", "endpointslices");
        let obj =
            |resource, namespace: Option<&str>, name: &str, sub: Option<&str>| Route::Object {
                resource,
                namespace: namespace.map(str::to_string),
                name: name.to_string(),
                subresource: sub.map(str::to_string),
                legacy_watch: false,
            };
        let coll = |resource, namespace: Option<&str>| Route::Collection {
            resource,
            namespace: namespace.map(str::to_string),
            legacy_watch: false,
        };
        let cases: Vec<(&str, Option<Route>)> = vec![
            ("/version", Some(Route::Version)),
            ("/api", Some(Route::CoreVersions)),
            ("/apis", Some(Route::Groups)),
            (
                "/apis/discovery.k8s.io",
                Some(Route::Group("discovery.k8s.io".into())),
            ),
            ("/apis/nope.io", None),
            (
                "/api/v1",
                Some(Route::Resources {
                    group: String::new(),
                    version: "v1".into(),
                }),
            ),
            ("/api/v1/services", Some(coll(svc, None))),
            (
                "/api/v1/namespaces/default/services",
                Some(coll(svc, Some("default"))),
            ),
            (
                "/api/v1/namespaces/default/services/web",
                Some(obj(svc, Some("default"), "web", None)),
            ),
            (
                "/api/v1/namespaces/default/services/web/status",
                Some(obj(svc, Some("default"), "web", Some("status"))),
            ),
            ("/api/v1/namespaces", Some(coll(ns, None))),
            (
                "/api/v1/namespaces/kube-system",
                Some(obj(ns, None, "kube-system", None)),
            ),
            (
                "/api/v1/namespaces/x/status",
                Some(obj(ns, None, "x", Some("status"))),
            ),
            (
                "/api/v1/nodes/n1/status",
                Some(obj(node, None, "n1", Some("status"))),
            ),
            ("/api/v1/services/web", None),
            ("/api/v1/namespaces/default/nodes", None),
            (
                "/apis/discovery.k8s.io/v1/namespaces/a/endpointslices",
                Some(coll(slices, Some("a"))),
            ),
            ("/api/v2/services", None),
            ("/api/v1/nothings", None),
        ];
        let registry = Registry::builtin();
        for (path, want) in cases {
            assert_eq!(parse(path, &registry), want, "{path}");
        }
        assert_eq!(
            parse("/api/v1/watch/namespaces/default/services", &registry),
            Some(Route::Collection {
                resource: svc,
                namespace: Some("default".into()),
                legacy_watch: true
            })
        );
    }

    #[test]
    fn custom_resource_routes() {
        let registry = crate::crd::tests::registry_with_ippools();
        let pools = registry.find("kube-lb.io", "v1alpha1", "ippools").unwrap();
        let cases: Vec<(&str, Option<Route>)> = vec![
            (
                "/apis/kube-lb.io/v1alpha1/ippools",
                Some(Route::Collection {
                    resource: pools,
                    namespace: None,
                    legacy_watch: false,
                }),
            ),
            (
                "/apis/kube-lb.io/v1alpha1/ippools/p/status",
                Some(Route::Object {
                    resource: pools,
                    namespace: None,
                    name: "p".into(),
                    subresource: Some("status".into()),
                    legacy_watch: false,
                }),
            ),
            ("/apis/kube-lb.io", Some(Route::Group("kube-lb.io".into()))),
            ("/apis/kube-lb.io/v1alpha1/namespaces/x/ippools", None),
            ("/apis/kube-lb.io/v1/ippools", None),
        ];
        for (path, want) in cases {
            assert_eq!(parse(path, &registry), want, "{path}");
        }
        assert_eq!(parse("/apis/kube-lb.io", &Registry::builtin()), None);
    }
}

//! Version and discovery documents (`/version`, `/api`, `/apis`, resource lists).

use serde_json::{Value, json};

use super::review;
use crate::resources::Registry;

/// The Kubernetes version this server claims to be.
pub const MAJOR: &str = "1";
/// Minor version claimed (matches the k8s-openapi feature the workspace uses).
pub const MINOR: &str = "33";

/// `/version`.
pub fn version() -> Value {
    json!({
        "major": MAJOR,
        "minor": MINOR,
        "gitVersion": format!("v{MAJOR}.{MINOR}.0-kube-lb-mock"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Kubernetes version priority (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1` > other
/// names, those alphabetically): the first is a group's preferred version.
fn version_rank(version: &str) -> (u8, u64, u64, String) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        if tail.is_empty() {
            return Some((0, major, 0));
        }
        for (stage, prefix) in [(1, "beta"), (2, "alpha")] {
            if let Some(n) = tail.strip_prefix(prefix)
                && let Ok(minor) = n.parse::<u64>()
            {
                return Some((stage, major, minor));
            }
        }
        None
    });
    match parsed {
        // Higher numbers first: invert them for an ascending sort.
        Some((stage, major, minor)) => (stage, u64::MAX - major, u64::MAX - minor, String::new()),
        None => (3, 0, 0, version.to_string()),
    }
}

fn group_doc(registry: &Registry, group: &str) -> Value {
    let mut versions: Vec<&str> = registry
        .group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(_, v)| v)
        .collect();
    versions.sort_by_key(|v| version_rank(v));
    let versions: Vec<Value> = versions
        .into_iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups(registry: &Registry) -> Value {
    let mut names: Vec<&str> = Vec::new();
    for (_, entry) in registry.entries() {
        if !entry.def.group.is_empty() && !names.contains(&entry.def.group) {
            names.push(entry.def.group);
        }
    }
    let mut groups: Vec<Value> = names.into_iter().map(|g| group_doc(registry, g)).collect();
    groups.push(review::group_doc());
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups,
    })
}

/// `/apis/<group>`.
pub fn group(registry: &Registry, name: &str) -> Value {
    let mut doc = if name == review::GROUP {
        review::group_doc()
    } else {
        group_doc(registry, name)
    };
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    doc
}

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/api/v1`, `/apis/<group>/<version>`.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Value {
    let mut list = if (group, version) == (review::GROUP, review::VERSION) {
        review::resources()
    } else {
        Vec::new()
    };
    for r in registry
        .entries()
        .map(|(_, e)| &e.def)
        .filter(|r| r.group == group && r.version == version)
    {
        // Namespaces are deleted one by one (kube-apiserver serves no deletecollection for
        // them) and have a finalize subresource.
        let is_namespaces = r.group.is_empty() && r.plural == "namespaces";
        let verbs: Vec<&str> = VERBS
            .iter()
            .copied()
            .filter(|verb| !(is_namespaces && *verb == "deletecollection"))
            .collect();
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        list.push(entry);
        if is_namespaces {
            list.push(json!({
                "name": "namespaces/finalize",
                "singularName": "",
                "namespaced": false,
                "kind": r.kind,
                "verbs": ["update"],
            }));
        }
        if r.has_status {
            list.push(json!({
                "name": format!("{}/status", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": list,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_cover_every_resource() {
        let registry = Registry::builtin();
        let core = resource_list(&registry, "", "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        let categories = |name: &str| {
            core["resources"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .map(|r| r["categories"].clone())
        };
        // `kubectl get all` lists what is in `all`: Pods and Services, as kube-apiserver says.
        assert_eq!(categories("pods"), Some(json!(["all"])));
        assert_eq!(categories("services"), Some(json!(["all"])));
        assert_eq!(categories("configmaps"), Some(Value::Null));
        for want in [
            "services",
            "services/status",
            "nodes",
            "nodes/status",
            "pods",
            "events",
            "endpoints",
            "namespaces",
        ] {
            assert!(names.contains(&want), "{want} missing from {names:?}");
        }
        let groups = groups(&registry);
        let group_names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            group_names,
            vec![
                "discovery.k8s.io",
                "coordination.k8s.io",
                "events.k8s.io",
                "apiextensions.k8s.io",
                "admissionregistration.k8s.io",
                "authorization.k8s.io"
            ]
        );
        assert_eq!(
            group(&registry, "events.k8s.io")["preferredVersion"]["groupVersion"],
            "events.k8s.io/v1"
        );
        assert_eq!(
            resource_list(&registry, "coordination.k8s.io", "v1")["resources"][0]["kind"],
            "Lease"
        );
        let webhooks = &resource_list(&registry, "admissionregistration.k8s.io", "v1")["resources"];
        assert_eq!(webhooks.as_array().map(Vec::len), Some(1));
        assert_eq!(webhooks[0]["name"], "validatingwebhookconfigurations");
        assert_eq!(webhooks[0]["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(webhooks[0]["namespaced"], false);
    }

    #[test]
    fn preferred_version_follows_kubernetes_priority() {
        let mut versions = vec![
            "v1alpha1",
            "foo",
            "v1",
            "v1beta1",
            "v2",
            "v1beta2",
            "v10alpha1",
        ];
        versions.sort_by_key(|v| version_rank(v));
        assert_eq!(
            versions,
            vec![
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v10alpha1",
                "v1alpha1",
                "foo"
            ]
        );
    }
}

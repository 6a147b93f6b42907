//! Version and discovery documents (`/version`, `/api`, `/apis`, resource lists).

use serde_json::{Value, json};

use crate::resources::{self, RESOURCES};

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

fn group_doc(group: &str) -> Value {
    let versions: Vec<Value> = resources::group_versions()
        .into_iter()
        .filter(|(g, _)| *g == group)
        .map(|(g, v)| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

/// `/apis`.
pub fn groups() -> Value {
    let mut names: Vec<&str> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !names.contains(&r.group) {
            names.push(r.group);
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": names.into_iter().map(group_doc).collect::<Vec<_>>(),
    })
}

/// `/apis/<group>`.
pub fn group(name: &str) -> Value {
    let mut doc = group_doc(name);
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
pub fn resource_list(group: &str, version: &str) -> Value {
    let mut list = Vec::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": VERBS,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        list.push(entry);
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
        let core = resource_list("", "v1");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
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
        let groups = groups();
        let group_names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            group_names,
            vec!["discovery.k8s.io", "coordination.k8s.io", "events.k8s.io"]
        );
        assert_eq!(
            group("events.k8s.io")["preferredVersion"]["groupVersion"],
            "events.k8s.io/v1"
        );
        assert_eq!(
            resource_list("coordination.k8s.io", "v1")["resources"][0]["kind"],
            "Lease"
        );
    }
}

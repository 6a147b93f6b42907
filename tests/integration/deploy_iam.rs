//! The cloud permissions in `deploy/iam/` grant exactly what each provider calls: every action
//! the code can make is granted, and nothing is granted that the code does not need.

use std::collections::BTreeSet;
use std::path::Path;

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

fn assert_same(granted: &BTreeSet<String>, needed: &BTreeSet<String>, what: &str) {
    let missing: Vec<_> = needed.difference(granted).collect();
    let extra: Vec<_> = granted.difference(needed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: missing {missing:?}, granted but never used {extra:?}"
    );
}

#[cfg(feature = "aws")]
#[test]
fn aws_policy_grants_exactly_the_operations_the_provider_counts() {
    let policy: serde_json::Value =
        serde_json::from_str(&repo_file("deploy/iam/aws-policy.json")).unwrap();
    let mut granted = BTreeSet::new();
    for statement in policy["Statement"].as_array().unwrap() {
        assert_eq!(statement["Effect"], "Allow");
        for action in statement["Action"].as_array().unwrap() {
            let action = action.as_str().unwrap().to_string();
            assert!(
                !action.contains('*'),
                "no wildcards in the policy: {action}"
            );
            granted.insert(action);
        }
    }
    // Derived from the call counter's operation names, not from a second hand-kept list.
    let needed: BTreeSet<String> = kube_lb_provider_aws::OPERATIONS
        .iter()
        .map(|op| op.iam_action())
        .collect();
    assert_same(&granted, &needed, "deploy/iam/aws-policy.json");
}

/// Maps a Compute API method to the IAM permission it checks on the resource it names.
#[cfg(feature = "gcp")]
fn gcp_permission(method: &str) -> String {
    let (resource, verb) = method
        .rsplit_once('.')
        .unwrap_or_else(|| panic!("method {method} has no verb"));
    let verb = match verb {
        "insert" => "create",
        "patch" | "addInstances" | "removeInstances" => "update",
        "listInstances" => "get",
        other => other,
    };
    format!("{resource}.{verb}")
}

/// Permissions a call checks on *other* resources it references; each one says which call.
#[cfg(feature = "gcp")]
const GCP_IMPLIED: &[(&str, &str)] = &[
    (
        "compute.addresses.use",
        "forwardingRules.insert with a reserved IPAddress",
    ),
    (
        "compute.targetPools.use",
        "forwardingRules.insert targeting a target pool",
    ),
    (
        "compute.regionBackendServices.use",
        "forwardingRules.insert with a backendService",
    ),
    (
        "compute.httpHealthChecks.useReadOnly",
        "targetPools.insert/addHealthCheck",
    ),
    (
        "compute.healthChecks.useReadOnly",
        "regionBackendServices.insert/update",
    ),
    (
        "compute.instanceGroups.use",
        "regionBackendServices.insert/update with backends",
    ),
    (
        "compute.instances.use",
        "targetPools.addInstance, instanceGroups.addInstances",
    ),
    (
        "compute.networks.updatePolicy",
        "firewalls.insert/update/delete",
    ),
    (
        "compute.networks.use",
        "internal forwardingRules.insert, instanceGroups.insert",
    ),
    ("compute.subnetworks.use", "internal forwardingRules.insert"),
];

#[cfg(feature = "gcp")]
#[test]
fn gcp_role_grants_exactly_the_methods_the_provider_calls() {
    let role: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&repo_file("deploy/iam/gcp-role.yaml")).unwrap();
    let granted: BTreeSet<String> = role["includedPermissions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    // The controller's own calls plus the paged lists of `plan`, `audit` and the periodic
    // audit (`--audit-interval`), which run with the same identity.
    let mut needed: BTreeSet<String> = kube_lb_provider_gcp::API_METHODS
        .iter()
        .chain(kube_lb_provider_gcp::PLAN_AUDIT_API_METHODS)
        .map(|m| gcp_permission(m))
        .collect();
    needed.extend(GCP_IMPLIED.iter().map(|(p, _)| p.to_string()));
    assert_same(&granted, &needed, "deploy/iam/gcp-role.yaml");
}

#[cfg(feature = "azure")]
#[test]
fn azure_role_grants_exactly_the_operations_the_provider_performs() {
    let role: serde_json::Value =
        serde_json::from_str(&repo_file("deploy/iam/azure-role.json")).unwrap();
    assert_eq!(role["IsCustom"], true);
    let granted: BTreeSet<String> = role["Actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let needed: BTreeSet<String> = kube_lb_provider_azure::ARM_OPERATIONS
        .iter()
        .map(|a| a.to_string())
        .collect();
    assert_same(&granted, &needed, "deploy/iam/azure-role.json");
}

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

/// Every `.rs` file under `dir`, in subdirectories too (a provider's modules may be nested).
#[cfg(any(feature = "openstack", feature = "baidu"))]
fn rust_sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The calls the OpenStack provider can make: every `"octavia:…"` / `"neutron:…"` operation
/// name in its sources (each client call is counted under one such literal; Keystone's token
/// request needs no policy rule).
#[cfg(feature = "openstack")]
fn openstack_operations() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("providers/openstack/src");
    let mut operations = BTreeSet::new();
    for path in rust_sources(&dir) {
        let source = std::fs::read_to_string(path).unwrap();
        for service in ["octavia", "neutron"] {
            let opening = format!("\"{service}:");
            for (at, _) in source.match_indices(&opening) {
                let rest = &source[at + 1..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == ':')
                    .collect();
                operations.insert(name);
            }
        }
    }
    operations
}

/// The oslo.policy rule an OpenStack operation is checked against: Octavia
/// `os_load-balancer_api:<resource>:<action>`, Neutron `<action>_<resource>`. An operation
/// this does not know fails the test, so a new call cannot slip past the policy file.
#[cfg(feature = "openstack")]
fn openstack_rule(operation: &str) -> (&'static str, String) {
    let (service, call) = operation
        .split_once(':')
        .unwrap_or_else(|| panic!("operation {operation} names no service"));
    let split = [
        ("BatchUpdate", "put", "update"),
        ("List", "get_all", "get"),
        ("Get", "get_one", "get"),
        ("Create", "post", "create"),
        ("Update", "put", "update"),
        ("Delete", "delete", "delete"),
    ]
    .iter()
    .find_map(|(verb, octavia, neutron)| {
        call.strip_prefix(verb)
            .map(|resource| (*octavia, *neutron, resource))
    });
    let Some((octavia_action, neutron_action, resource)) = split else {
        panic!("{operation}: unknown verb; add its policy rule mapping here");
    };
    let resource = resource.strip_suffix('s').unwrap_or(resource);
    match service {
        "octavia" => {
            let resource = match resource {
                "LoadBalancer" => "loadbalancer",
                "Listener" => "listener",
                "Pool" => "pool",
                "Member" => "member",
                "HealthMonitor" => "healthmonitor",
                other => panic!("{operation}: unknown Octavia resource {other}"),
            };
            (
                "octavia",
                format!("os_load-balancer_api:{resource}:{octavia_action}"),
            )
        }
        "neutron" => {
            let resource = match resource {
                "FloatingIp" => "floatingip",
                "Network" => "network",
                "Subnet" => "subnet",
                "Port" => "port",
                "SecurityGroup" => "security_group",
                "SecurityGroupRule" => "security_group_rule",
                other => panic!("{operation}: unknown Neutron resource {other}"),
            };
            ("neutron", format!("{neutron_action}_{resource}"))
        }
        other => panic!("{operation}: unknown service {other}"),
    }
}

#[cfg(feature = "openstack")]
#[test]
fn openstack_policy_lists_exactly_the_rules_the_provider_calls_are_checked_against() {
    let policy: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&repo_file("deploy/iam/openstack-policy.yaml")).unwrap();
    let operations = openstack_operations();
    for core in [
        "octavia:CreateLoadBalancer",
        "octavia:BatchUpdateMembers",
        "neutron:CreateFloatingIp",
    ] {
        assert!(
            operations.contains(core),
            "the source scan missed {core}: {operations:?}"
        );
    }
    for service in ["octavia", "neutron"] {
        // rule → the operations the file says need it, and the same derived from the code.
        let granted: BTreeSet<String> = policy[service]
            .as_mapping()
            .unwrap()
            .iter()
            .flat_map(|(rule, ops)| {
                let rule = rule.as_str().unwrap().to_string();
                ops.as_sequence()
                    .unwrap()
                    .iter()
                    .map(move |op| format!("{rule} ← {}", op.as_str().unwrap()))
            })
            .collect();
        let needed: BTreeSet<String> = operations
            .iter()
            .map(|op| (openstack_rule(op), op))
            .filter(|((svc, _), _)| *svc == service)
            .map(|((_, rule), op)| format!("{rule} ← {op}"))
            .collect();
        assert_same(
            &granted,
            &needed,
            &format!("deploy/iam/openstack-policy.yaml {service}"),
        );
    }
    assert_eq!(policy["roles"]["octavia"], "load-balancer_member");
    assert_eq!(policy["roles"]["neutron"], "member");
}

#[cfg(feature = "openstack")]
#[test]
fn openstack_overlay_cloud_conf_is_read_by_the_provider() {
    let text = repo_file("deploy/overlays/openstack/cloud.conf");
    let config = kube_lb_provider_openstack::CloudConfig::parse(&text)
        .unwrap_or_else(|e| panic!("deploy/overlays/openstack/cloud.conf: {e}"));
    assert_eq!(
        config.global.auth_url,
        "https://keystone.example.com:5000/v3"
    );
    assert_eq!(config.global.region.as_deref(), Some("RegionOne"));
}

/// Every `"blb:…"` / `"eip:…"` / `"bcc:…"` operation name in the Baidu provider's source.
#[cfg(feature = "baidu")]
fn baidu_operations() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("providers/baidu/src");
    let mut operations = BTreeSet::new();
    for path in rust_sources(&dir) {
        let source = std::fs::read_to_string(path).unwrap();
        for service in ["blb", "eip", "bcc"] {
            for (at, _) in source.match_indices(&format!("\"{service}:")) {
                let name: String = source[at + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == ':')
                    .collect();
                operations.insert(name);
            }
        }
    }
    operations
}

#[cfg(feature = "baidu")]
#[test]
fn baidu_policy_grants_exactly_the_permissions_the_provider_calls_need() {
    let file: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&repo_file("deploy/iam/baidu-policy.yaml")).unwrap();
    let operations = baidu_operations();
    for core in [
        "blb:CreateLoadBalancer",
        "blb:AddBackendServers",
        "eip:BindEip",
    ] {
        assert!(
            operations.contains(core),
            "the source scan missed {core}: {operations:?}"
        );
    }
    // BCE checks reads against READ and changes against OPERATE.
    let needed: BTreeSet<String> = operations
        .iter()
        .map(|op| {
            let (service, call) = op.split_once(':').unwrap();
            let permission = if call.starts_with("Describe") || call.starts_with("List") {
                "READ"
            } else {
                "OPERATE"
            };
            format!("bce:{service} {permission} ← {op}")
        })
        .collect();
    let listed: BTreeSet<String> = file["operations"]
        .as_mapping()
        .unwrap()
        .iter()
        .flat_map(|(service, permissions)| {
            let service = service.as_str().unwrap().to_string();
            permissions
                .as_mapping()
                .unwrap()
                .iter()
                .flat_map(move |(permission, ops)| {
                    let prefix = format!("{service} {}", permission.as_str().unwrap());
                    ops.as_sequence()
                        .unwrap()
                        .iter()
                        .map(move |op| format!("{prefix} ← {}", op.as_str().unwrap()))
                })
        })
        .collect();
    assert_same(&listed, &needed, "deploy/iam/baidu-policy.yaml operations");
    // The policy document grants exactly the permissions the operations use, per service.
    let policy: serde_json::Value = serde_json::from_str(file["policy"].as_str().unwrap()).unwrap();
    let granted: BTreeSet<String> = policy["accessControlList"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|entry| {
            assert_eq!(entry["effect"], "Allow");
            let service = entry["service"].as_str().unwrap().to_string();
            entry["permission"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |p| format!("{service} {}", p.as_str().unwrap()))
        })
        .collect();
    let used: BTreeSet<String> = needed
        .iter()
        .map(|line| line.split(" ← ").next().unwrap().to_string())
        .collect();
    assert_same(&granted, &used, "deploy/iam/baidu-policy.yaml policy");
}

#[cfg(feature = "baidu")]
#[test]
fn baidu_overlay_cloud_config_is_read_by_the_provider() {
    let text = repo_file("deploy/overlays/baidu/cloud-config.json");
    let resolved = kube_lb_provider_baidu::CloudConfig::parse(&text)
        .and_then(|config| config.resolve(|_| None))
        .unwrap_or_else(|e| panic!("deploy/overlays/baidu/cloud-config.json: {e}"));
    assert_eq!(resolved.blb_endpoint, "https://blb.bj.baidubce.com");
    assert_eq!(resolved.cluster_id.as_deref(), Some("c-replace-me"));
}

#[cfg(feature = "tencent")]
#[test]
fn tencent_cam_policy_grants_exactly_the_actions_the_client_can_call() {
    let policy: serde_json::Value =
        serde_json::from_str(&repo_file("deploy/iam/tencent-cam-policy.json")).unwrap();
    assert_eq!(policy["version"], "2.0");
    let mut granted = BTreeSet::new();
    for statement in policy["statement"].as_array().unwrap() {
        assert_eq!(statement["effect"], "allow");
        for action in statement["action"].as_array().unwrap() {
            let action = action.as_str().unwrap().to_string();
            assert!(
                !action.contains('*'),
                "no wildcards in the policy: {action}"
            );
            granted.insert(action);
        }
    }
    // Derived from the client's action enum, the only way the provider reaches the API.
    let needed: BTreeSet<String> = kube_lb_provider_tencent::cam_actions()
        .into_iter()
        .collect();
    assert_same(&granted, &needed, "deploy/iam/tencent-cam-policy.json");
}

#[cfg(feature = "tencent")]
#[test]
fn tencent_overlay_cloud_config_is_read_by_the_provider() {
    let text = repo_file("deploy/overlays/tencent/tencent.json");
    let config = kube_lb_provider_tencent::TencentConfig::resolve(Some(&text), &|name| {
        (name == "TENCENTCLOUD_SECRET_ID" || name == "TENCENTCLOUD_SECRET_KEY")
            .then(|| "from-the-secret".to_string())
    })
    .unwrap_or_else(|e| panic!("deploy/overlays/tencent/tencent.json: {e}"));
    assert_eq!(config.region, "ap-guangzhou");
    assert_eq!(config.secret_id, "from-the-secret");
}

//! `kube-lb plan` and `kube-lb audit` with `--cloud openstack`, the binary against the
//! Keystone + Octavia + Neutron mock. The cloud state is built by hand the way
//! cloud-provider-openstack (OCCM) leaves it (`reference/other-clouds.md` §1.1–1.5), so these
//! are the migration checks: what adopting OCCM's load balancers changes, and that planning
//! and auditing make no mutating call (the mock's own journal says so).
#![cfg(feature = "openstack")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::plan_audit_support::{
    self, CloudFlags, ClusterSource, changes_of_only_service, leaked_resources, mutations_since,
    only_service, owned, text,
};
use crate::provider_scenarios::scenarios::openstack::support::{
    self, OccmBuilt, OccmService, cloud_conf,
};

/// The mock's private subnet holds the nodes; these are the Nodes of every manifest.
const NODES: &str = "\
apiVersion: v1
kind: Node
metadata: {name: node-1}
status:
  conditions: [{type: Ready, status: 'True'}]
  addresses: [{type: InternalIP, address: 10.0.0.11}]
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
status:
  conditions: [{type: Ready, status: 'True'}]
  addresses: [{type: InternalIP, address: 10.0.0.12}]
";

fn occm_nodes() -> Vec<(String, String)> {
    vec![
        ("node-1".into(), "10.0.0.11".into()),
        ("node-2".into(), "10.0.0.12".into()),
    ]
}

/// A LoadBalancer Service as OCCM served it: its finalizer on, its address in the status.
fn served(name: &str, address: &str, extra_spec: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
  finalizers: [service.kubernetes.io/load-balancer-cleanup]
spec:
  type: LoadBalancer
  selector: {{app: {name}}}
  ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}}]{extra_spec}
status:
  loadBalancer:
    ingress: [{{ip: {address}}}]
"
    )
}

/// The binary's flags for the mock.
static OPENSTACK: CloudFlags = CloudFlags {
    flags: &["--cloud", "openstack"],
    config_file: "cloud.conf",
    env_remove: &[],
};

/// The mock with `cloud.conf` written next to the manifests.
async fn cloud(extra_conf: &str) -> (kube_lb_mock_openstack::MockOpenStack, tempfile::TempDir) {
    let cloud = kube_lb_mock_openstack::MockOpenStack::builder()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("cloud.conf"),
        cloud_conf(&cloud, extra_conf),
    )
    .unwrap();
    (cloud, dir)
}

/// Runs the binary with `args` and `manifest` against the mock, off the runtime's threads:
/// (exit code, stdout, stderr).
async fn run(dir: PathBuf, manifest: String, args: Vec<&'static str>) -> (i32, String, String) {
    plan_audit_support::run(
        &OPENSTACK,
        dir,
        ClusterSource::Manifest(manifest),
        owned(&args),
    )
    .await
}

fn occm_web(monitor: Option<u16>) -> OccmService {
    OccmService {
        monitor,
        ..OccmService::new("web", occm_nodes())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_occm_plans_only_the_ownership_tag_and_mutates_nothing() {
    let (cloud, dir) = cloud("").await;
    let OccmBuilt {
        load_balancer,
        floating_ip,
    } = support::build_occm_state(&cloud, "kubernetes", &occm_web(None)).await;
    let fip = floating_ip.unwrap();
    let manifest = format!("{NODES}{}", served("web", &fip, ""));
    let mark = cloud.journal().len();

    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        manifest.clone(),
        vec!["plan", "-o", "json", "--detailed-exitcode"],
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let web = only_service(&report);
    assert_eq!(web["name"], "web");
    assert_eq!(web["operation"], "ensure");
    // OCCM's listener, pool and members are exactly what kube-lb wants: the only change is
    // the Service-UID tag kube-lb adds so that another cluster with the same --cluster-name
    // can never take this load balancer over. OCCM's own name tag is kept.
    let name = "kube_service_kubernetes_default_web";
    let changes = web["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{report:#}");
    let tag = &changes[0];
    assert_eq!(
        (&tag["action"], &tag["kind"], &tag["call"]),
        (
            &json!("modify"),
            &json!("LoadBalancer"),
            &json!("PUT loadbalancers")
        ),
        "{report:#}"
    );
    assert_eq!(tag["fields"].as_array().unwrap().len(), 1, "{report:#}");
    assert_eq!(tag["fields"][0]["field"], "tags");
    // The embedded API server gave the Service its UID.
    let tags = tag["fields"][0]["new"].as_str().unwrap();
    let uid = tags
        .strip_prefix(&format!("{name},kube_lb_uid_"))
        .unwrap_or_else(|| panic!("OCCM's name tag kept, the UID tag added: {tags}"));
    assert_eq!(uid.len(), 36, "{tags}");
    assert_eq!(report["summary"]["modify"], 1);
    assert_eq!(report["summary"]["create"], 0);
    assert_eq!(report["summary"]["delete"], 0);
    let mutations = mutations_since(&cloud.journal(), mark);
    assert_eq!(mutations, Vec::<String>::new(), "plan mutated the cloud");

    // Table output names the call, for people.
    let (code, stdout, _) = run(dir.path().to_path_buf(), manifest, vec!["plan"]).await;
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("default/web (ensure):\n  ~ modify LoadBalancer"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Plan: 0 to create, 1 to modify, 0 to delete"),
        "{stdout}"
    );
    // The load balancer was not touched: same tags, same status.
    let now = support::lb_named(&cloud, name);
    assert_eq!(now["tags"], load_balancer["tags"]);
    assert_eq!(now["updated_at"], load_balancer["updated_at"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_occm_with_local_traffic_plans_the_monitor_it_lacks() {
    // OCCM with create-monitor=false (its default) and ETP=Local: no monitor, members without
    // monitor_port — the black hole of cloud-provider-openstack#2866. kube-lb always checks
    // the health-check node port for Local, so adoption adds the monitor and the members'
    // monitor_port; nothing is replaced.
    let (cloud, dir) = cloud("").await;
    let built = support::build_occm_state(&cloud, "kubernetes", &occm_web(None)).await;
    let fip = built.floating_ip.unwrap();
    let manifest = format!(
        "{NODES}{}",
        served(
            "web",
            &fip,
            "\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 32100"
        )
    );
    let mark = cloud.journal().len();
    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        manifest,
        vec!["plan", "-o", "json", "--detailed-exitcode"],
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let web = only_service(&report);
    let summary: Vec<String> = web["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} {} ({})",
                c["action"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
                c["name"].as_str().unwrap(),
                c["call"].as_str().unwrap()
            )
        })
        .collect();
    let name = "kube_service_kubernetes_default_web";
    assert_eq!(
        summary,
        vec![
            "modify LoadBalancer  (PUT loadbalancers)".to_string(),
            format!("modify Pool pool_0_{name} (PUT pools/members)"),
            format!("create HealthMonitor monitor_0_{name} (POST healthmonitors)"),
        ],
        "{report:#}"
    );
    assert_eq!(report["summary"]["delete"], 0, "adoption replaces nothing");
    assert!(
        cloud.journal()[mark..].iter().all(|e| !e.is_mutation()),
        "plan mutated the cloud"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_exactly_the_orphaned_occm_service_and_delete_removes_exactly_it() {
    let (cloud, dir) = cloud("").await;
    let web = support::build_occm_state(&cloud, "kubernetes", &occm_web(None)).await;
    let mut old_service = occm_web(Some(0));
    old_service.name = "old".into();
    let old = support::build_occm_state(&cloud, "kubernetes", &old_service).await;
    // A user's floating IP (not OCCM's phrase) and another cluster's load balancer: never ours.
    cloud.seed_floating_ip("reserved by hand").unwrap();
    support::build_occm_state(
        &cloud,
        "other-cluster",
        &OccmService {
            name: "old".into(),
            floating_ip: false,
            ..occm_web(None)
        },
    )
    .await;
    // `old` was deleted while no controller ran: only `web` is left in the cluster.
    let web_fip = web.floating_ip.clone().unwrap();
    let manifest = format!("{NODES}{}", served("web", &web_fip, ""));
    let mark = cloud.journal().len();

    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        manifest.clone(),
        vec!["audit", "-o", "json"],
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let mut leaked = leaked_resources(&report, "name");
    leaked.sort();
    let old_fip = old.floating_ip.clone().unwrap();
    assert_eq!(
        leaked,
        vec![
            (
                "FloatingIp".to_string(),
                old_fip.clone(),
                "old".to_string(),
                "ServiceDeleted".to_string()
            ),
            (
                "LoadBalancer".to_string(),
                "kube_service_kubernetes_default_old".to_string(),
                "old".to_string(),
                "ServiceDeleted".to_string()
            ),
        ],
        "{report:#}"
    );
    assert_eq!(report["owned"], 4, "web's and old's LB and FIP: {report:#}");
    assert!(
        cloud.journal()[mark..].iter().all(|e| !e.is_mutation()),
        "audit mutated the cloud"
    );

    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        manifest.clone(),
        vec!["audit", "--delete"],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("kube_service_kubernetes_default_old") && stdout.contains(&old_fip),
        "{stdout}"
    );
    let deletes = mutations_since(&cloud.journal(), mark);
    let old_lb = old.load_balancer["id"].as_str().unwrap();
    assert!(
        deletes
            .iter()
            .all(|d| d.starts_with("DELETE ")
                && !d.contains(web.load_balancer["id"].as_str().unwrap())),
        "only deletes, none of web's: {deletes:?}"
    );
    assert!(
        deletes
            .iter()
            .any(|d| d == &format!("DELETE /load-balancer/v2/lbaas/loadbalancers/{old_lb}")),
        "{deletes:?}"
    );

    let names: Vec<String> = cloud
        .load_balancers()
        .iter()
        .map(|lb| lb["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "web's and the other cluster's stay: {names:?}"
    );
    assert!(names.contains(&"kube_service_kubernetes_default_web".to_string()));
    assert!(names.contains(&"kube_service_other-cluster_default_old".to_string()));
    let addresses: Vec<String> = cloud
        .floating_ips()
        .iter()
        .map(|f| f["floating_ip_address"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(addresses.len(), 2, "web's and the user's: {addresses:?}");
    assert!(addresses.contains(&web_fip) && !addresses.contains(&old_fip));

    let (code, stdout, stderr) = run(dir.path().to_path_buf(), manifest, vec!["audit"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "No leaked resources: 2 owned by this cluster, all in use.\n"
    );
}

/// Runs the binary with `args` against the mock and the API server of `kubeconfig` (file in
/// `dir`): (exit code, stdout, stderr).
async fn run_on_cluster(dir: PathBuf, args: Vec<&'static str>) -> (i32, String, String) {
    plan_audit_support::run(&OPENSTACK, dir, ClusterSource::Kubeconfig, owned(&args)).await
}

/// `(action, kind, call)` of each planned change of the plan's only Service.
fn change_summary(report: &Value) -> Vec<String> {
    changes_of_only_service(report)
        .iter()
        .map(|c| {
            format!(
                "{} {} ({})",
                text(c, "action"),
                text(c, "kind"),
                text(c, "call")
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_in_tree_load_balancer_is_planned_as_adopted_and_audited_by_uid() {
    // Kubernetes' in-tree OpenStack provider named load balancers `a<UID>`; upstream still
    // looks that name up when `kube_service_...` is absent, and so must kube-lb: the plan
    // adopts it (no second load balancer), and the audit knows its pieces by UID.
    let (cloud, dir) = cloud("").await;
    let server = kube_lb_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    let stored = server
        .apply_manifests(&format!("{NODES}{}", served("web", "192.0.2.1", "")))
        .unwrap();
    let uid = stored
        .iter()
        .find(|o| o["kind"] == "Service")
        .and_then(|s| s["metadata"]["uid"].as_str())
        .unwrap()
        .to_string();
    let built = support::build_occm_state(
        &cloud,
        "kubernetes",
        &OccmService {
            legacy_uid: Some(uid.clone()),
            ..OccmService::new("web", occm_nodes())
        },
    )
    .await;
    let legacy = support::legacy_name(&uid);
    assert_eq!(built.load_balancer["name"], legacy.as_str());
    let fip = built.floating_ip.clone().unwrap();
    // The status OCCM wrote: the floating IP.
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(server.client().unwrap(), "default");
    services
        .patch_status(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": fip}]}}}),
            ),
        )
        .await
        .unwrap();
    server
        .write_kubeconfig(dir.path().join("kubeconfig"))
        .unwrap();
    let mark = cloud.journal().len();

    let (code, stdout, stderr) = run_on_cluster(
        dir.path().to_path_buf(),
        vec!["plan", "-o", "json", "--detailed-exitcode"],
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    // The load balancer gains kube-lb's tags, the members are renamed to their nodes (the
    // in-tree provider named them member_<lb>_<i>_<node>), the floating IP's in-tree phrase
    // becomes upstream's: adoption, nothing created, nothing replaced.
    assert_eq!(
        change_summary(&report),
        vec![
            "modify LoadBalancer (PUT loadbalancers)",
            "modify Pool (PUT pools/members)",
            "modify FloatingIp (PUT floatingips)",
        ],
        "{report:#}"
    );
    let changes = only_service(&report)["changes"].as_array().unwrap();
    // The tags name this cluster by its kube-system namespace's UID (--cluster-id's default).
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(server.client().unwrap());
    let cluster_id = namespaces
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let tags = changes[0]["fields"][0]["new"].as_str().unwrap_or_default();
    assert!(
        tags.split(',')
            .any(|tag| tag == format!("kube_lb_cluster_{cluster_id}")),
        "{report:#}"
    );
    assert_eq!(
        changes[2]["fields"][0]["new"],
        "Floating IP for Kubernetes external service default/web from cluster kubernetes",
        "{report:#}"
    );
    assert_eq!(report["summary"]["create"], 0, "{report:#}");
    assert_eq!(report["summary"]["delete"], 0, "{report:#}");

    // While the Service lives, its legacy pieces are in use.
    let (code, stdout, stderr) =
        run_on_cluster(dir.path().to_path_buf(), vec!["audit", "-o", "json"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["owned"], 2, "{report:#}");
    assert!(
        cloud.journal()[mark..].iter().all(|e| !e.is_mutation()),
        "plan and audit mutated the cloud"
    );

    // Without the Service they are leaked, recorded by (31 digits of) its UID, and
    // `audit --delete` removes them through the provider's delete.
    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        NODES.to_string(),
        vec!["audit", "-o", "json"],
    )
    .await;
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let digits: String = uid.chars().filter(|c| *c != '-').take(31).collect();
    let mut leaked: Vec<(String, String)> = report["leaked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["service"]["uid"], digits.as_str(), "{report:#}");
            assert_eq!(l["reasonCode"], "ServiceDeleted", "{report:#}");
            (
                l["kind"].as_str().unwrap().to_string(),
                l["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    leaked.sort();
    assert_eq!(
        leaked,
        vec![
            ("FloatingIp".to_string(), fip.clone()),
            ("LoadBalancer".to_string(), legacy.clone())
        ],
        "{report:#}"
    );
    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        NODES.to_string(),
        vec!["audit", "--delete"],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        cloud.load_balancers().is_empty(),
        "{:?}",
        cloud.load_balancers()
    );
    assert!(
        cloud.floating_ips().is_empty(),
        "{:?}",
        cloud.floating_ips()
    );
}

/// `kube-lb reconcile` as the README shows it: the mock's `--config-out` file
/// ([`kube_lb_mock_openstack::MockOpenStack::cloud_conf`]) and
/// `mocks/openstack/testdata/reconcile.yaml`; (exit code, stdout, stderr).
async fn readme_reconcile(conf: &Path, state: &Path, delete: bool) -> (i32, String, String) {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("mocks/openstack/testdata/reconcile.yaml");
    let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
    command
        .env_remove("KUBE_LB_CLOUD")
        .env_remove("KUBE_LB_CLOUD_CONFIG")
        .env_remove("KUBE_LB_CLUSTER_NAME")
        .args(["--log", "warn", "reconcile", "-f"])
        .arg(manifest)
        .args(["--cloud", "openstack", "--cloud-config"])
        .arg(conf)
        .arg("--state-file")
        .arg(state)
        .stdin(Stdio::null());
    if delete {
        command.arg("--delete");
    }
    tokio::task::spawn_blocking(move || {
        let out = command.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

/// The EXTERNAL-IP cell of `default/<name>` in reconcile's table.
fn external_ip(stdout: &str, name: &str) -> String {
    stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&"default") && cells.get(1) == Some(&name))
        .and_then(|cells| cells.get(3).map(|c| c.to_string()))
        .unwrap_or_else(|| panic!("no row for default/{name}:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_reconcile_against_the_mock_converges_resyncs_for_free_and_deletes_everything() {
    let cloud = kube_lb_mock_openstack::MockOpenStack::builder()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("openstack.conf");
    std::fs::write(&conf, cloud.cloud_conf()).unwrap();
    let state = dir.path().join("os.state.json");

    let (code, stdout, stderr) = readme_reconcile(&conf, &state, false).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let web = external_ip(&stdout, "web");
    let db = external_ip(&stdout, "db");
    assert!(
        web.starts_with("172.24.4."),
        "web gets a floating IP: {stdout}"
    );
    assert!(
        db.starts_with("10.0.0."),
        "the internal db gets its VIP: {stdout}"
    );
    assert_eq!(cloud.load_balancers().len(), 2);
    assert_eq!(cloud.floating_ips().len(), 1);

    let mark = cloud.journal().len();
    let (code, stdout, stderr) = readme_reconcile(&conf, &state, false).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        (external_ip(&stdout, "web"), external_ip(&stdout, "db")),
        (web, db)
    );
    let mutations = mutations_since(&cloud.journal(), mark);
    assert_eq!(
        mutations,
        Vec::<String>::new(),
        "a second run changed the cloud"
    );

    let (code, stdout, stderr) = readme_reconcile(&conf, &state, true).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        cloud.load_balancers().is_empty(),
        "{:?}",
        cloud.load_balancers()
    );
    assert!(
        cloud.floating_ips().is_empty(),
        "{:?}",
        cloud.floating_ips()
    );
    assert!(
        cloud.ports().is_empty(),
        "VIP ports go with their load balancers"
    );
}

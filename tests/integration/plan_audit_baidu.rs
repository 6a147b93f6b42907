//! `kube-lb plan` and `kube-lb audit` with `--cloud baidu`, the binary against the signing BLB +
//! EIP mock. The cloud state is built by hand, through the signed API, the way the retired
//! cloud-provider-baiducloud left it (`reference/other-clouds.md` §3.8; see
//! `providers/baidu/tests/it/support::build_upstream_state`), so these are the migration checks:
//! what adopting its BLBs and EIPs changes, and that planning and auditing make no mutating
//! call (the mock's own journal says so).
#![cfg(feature = "baidu")]

use std::path::PathBuf;

use kube_lb_mock_baidu::MockBaidu;
use serde_json::Value;

use crate::plan_audit_support::{
    self, CloudFlags, ClusterSource, change_line, leaked_resources, owned,
};
use crate::provider_scenarios::scenarios::baidu::support::{
    self, CLUSTER, UpstreamBuilt, UpstreamService,
};

/// The CCE nodes of every manifest: their BCC instances in `spec.providerID`.
const NODES: &str = "\
apiVersion: v1
kind: Node
metadata: {name: node-1}
spec: {providerID: 'cce://i-node0001'}
status:
  conditions: [{type: Ready, status: 'True'}]
  addresses: [{type: InternalIP, address: 192.168.0.101}]
---
apiVersion: v1
kind: Node
metadata: {name: node-2}
spec: {providerID: 'cce://i-node0002'}
status:
  conditions: [{type: Ready, status: 'True'}]
  addresses: [{type: InternalIP, address: 192.168.0.102}]
";

fn instances() -> Vec<String> {
    vec!["i-node0001".into(), "i-node0002".into()]
}

/// A LoadBalancer Service as upstream served it: its finalizer on, its address in the status,
/// the ids it wrote in the annotations.
fn served(name: &str, built: &UpstreamBuilt, address: &str, extra: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: default
  finalizers: [service.kubernetes.io/load-balancer-cleanup]
  annotations:
    service.beta.kubernetes.io/cce-load-balancer-cce-add-id: {id}
    service.beta.kubernetes.io/cce-load-balancer-id: {id}{extra}
spec:
  type: LoadBalancer
  selector: {{app: {name}}}
  ports:
  - {{name: http, port: 80, targetPort: 8080, nodePort: 30080, protocol: TCP}}
  - {{name: dns, port: 53, targetPort: 53, nodePort: 30053, protocol: UDP}}
status:
  loadBalancer:
    ingress: [{{ip: {address}}}]
",
        id = built.blb_id
    )
}

fn upstream(name: &str, public: bool) -> UpstreamService {
    UpstreamService {
        namespace: "default".into(),
        name: name.into(),
        ports: vec![("TCP", 80, 30080), ("UDP", 53, 30053)],
        instances: instances(),
        public,
    }
}

/// The binary's flags for the mock, and the real credentials it must not pick up.
static BAIDU: CloudFlags = CloudFlags {
    flags: &["--cloud", "baidu"],
    config_file: "baidu.json",
    env_remove: &[
        "BCE_ACCESS_KEY_ID",
        "BCE_SECRET_ACCESS_KEY",
        "BCE_SESSION_TOKEN",
    ],
};

/// Runs the binary with `args` and `manifest` against the mock, off the runtime's threads:
/// (exit code, stdout, stderr).
async fn run(dir: PathBuf, manifest: String, args: Vec<&'static str>) -> (i32, String, String) {
    plan_audit_support::run(&BAIDU, dir, ClusterSource::Manifest(manifest), owned(&args)).await
}

/// The mock, a provider on it (to build upstream's state) and the cloud-config file.
async fn cloud() -> (support::Harness, tempfile::TempDir) {
    let h = support::harness_with(MockBaidu::builder().start().await.unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("baidu.json"),
        support::cloud_config(&h.cloud),
    )
    .unwrap();
    (h, dir)
}

fn mutations_since(cloud: &MockBaidu, mark: usize) -> Vec<String> {
    plan_audit_support::mutations_since(&cloud.journal(), mark)
}

/// `action kind name (call)` of each change of the only Service in a plan report.
fn changes_of_only_service(report: &Value) -> Vec<String> {
    plan_audit_support::changes_of_only_service(report)
        .iter()
        .map(change_line)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_from_cloud_provider_baiducloud_plans_only_the_uid_mark_and_mutates_nothing() {
    let (h, dir) = cloud().await;
    let web = support::build_upstream_state(&h.provider, CLUSTER, &upstream("web", true)).await;
    let eip = web.eip.clone().unwrap();
    let db = support::build_upstream_state(&h.provider, CLUSTER, &upstream("db", false)).await;
    let db_address = h
        .cloud
        .blbs()
        .into_iter()
        .find(|b| b["blbId"] == db.blb_id.as_str())
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    let before = h.cloud.blbs();
    let web_manifest = format!(
        "{NODES}{}",
        served(
            "web",
            &web,
            &eip,
            &format!("\n    service.beta.kubernetes.io/cce-load-balancer-cce-add-eip: {eip}")
        )
    );
    let db_manifest = format!(
        "{NODES}{}",
        served(
            "db",
            &db,
            &db_address,
            "\n    service.beta.kubernetes.io/cce-load-balancer-internal-vpc: 'true'"
        )
    );
    let mark = h.cloud.journal().len();

    // Upstream's listeners (BCE's default health check), backends and EIP are exactly what
    // kube-lb wants: the only change is the Service UID kube-lb appends to the description,
    // so that a second cluster with the same ClusterID can never take the BLB over. Upstream's
    // text (and its EIP mark, which tells kube-lb the EIP is the controller's to release) stays.
    for (name, manifest, blb) in [("web", &web_manifest, &web), ("db", &db_manifest, &db)] {
        let (code, stdout, stderr) = run(
            dir.path().to_path_buf(),
            manifest.clone(),
            vec!["plan", "-o", "json", "--detailed-exitcode"],
        )
        .await;
        assert_eq!(code, 2, "{name}: {stdout}{stderr}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(
            changes_of_only_service(&report),
            vec![format!(
                "modify LoadBalancer {} (blb:UpdateLoadBalancer)",
                blb.blb_name
            )],
            "{name}: {report:#}"
        );
        let field = &report["services"][0]["changes"][0]["fields"][0];
        assert_eq!(field["field"], "desc", "{report:#}");
        let desc = field["new"].as_str().unwrap();
        let upstream_desc = if name == "web" {
            "cce_auto_create_eipauto generated by cce:c-test01 kube-lb:"
        } else {
            "auto generated by cce:c-test01 kube-lb:"
        };
        assert_eq!(
            format!("{} kube-lb:", field["old"].as_str().unwrap()),
            upstream_desc,
            "old → new: {report:#}"
        );
        let uid = desc
            .strip_prefix(upstream_desc)
            .unwrap_or_else(|| panic!("{name}: upstream's text kept, the UID added: {desc}"));
        assert_eq!(uid.len(), 36, "the API server's UID: {desc}");
        assert_eq!(report["summary"]["modify"], 1);
        assert_eq!(report["summary"]["create"], 0);
        assert_eq!(report["summary"]["delete"], 0);
    }
    assert_eq!(
        mutations_since(&h.cloud, mark),
        Vec::<String>::new(),
        "plan mutated the cloud"
    );
    assert_eq!(h.cloud.blbs(), before, "nothing changed");

    // Table output names the call, for people.
    let (code, stdout, _) = run(dir.path().to_path_buf(), web_manifest, vec!["plan"]).await;
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("Plan: 0 to create, 1 to modify, 0 to delete"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_finds_exactly_the_orphaned_upstream_service_and_delete_removes_exactly_it() {
    let (h, dir) = cloud().await;
    let web = support::build_upstream_state(&h.provider, CLUSTER, &upstream("web", true)).await;
    let old = support::build_upstream_state(&h.provider, CLUSTER, &upstream("old", true)).await;
    // Another cluster's BLB and a user's EIP: never this cluster's.
    let other =
        support::build_upstream_state(&h.provider, "c-other", &upstream("old", false)).await;
    let users_eip = h.cloud.seed_eip("reserved-by-hand");
    // `old` was deleted while no controller ran: only `web` is left in the cluster.
    let web_eip = web.eip.clone().unwrap();
    let old_eip = old.eip.clone().unwrap();
    let manifest = format!("{NODES}{}", served("web", &web, &web_eip, ""));
    let mark = h.cloud.journal().len();

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
    assert_eq!(
        leaked,
        vec![
            (
                "Eip".to_string(),
                old_eip.clone(),
                "old".to_string(),
                "ServiceDeleted".to_string()
            ),
            (
                "LoadBalancer".to_string(),
                old.blb_name.clone(),
                "old".to_string(),
                "ServiceDeleted".to_string()
            ),
        ],
        "{report:#}"
    );
    assert_eq!(
        report["owned"], 4,
        "web's and old's BLB and EIP: {report:#}"
    );
    assert_eq!(
        mutations_since(&h.cloud, mark),
        Vec::<String>::new(),
        "audit mutated"
    );

    let (code, stdout, stderr) = run(
        dir.path().to_path_buf(),
        manifest.clone(),
        vec!["audit", "--delete"],
    )
    .await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(&old.blb_name) && stdout.contains(&old_eip),
        "{stdout}"
    );
    let mutations = mutations_since(&h.cloud, mark);
    assert!(
        mutations
            .iter()
            .all(|m| m.contains(&old.blb_id) || m.contains(&old_eip)),
        "only old's BLB and EIP were touched: {mutations:?}"
    );
    assert!(
        mutations.contains(&format!("DELETE /v1/blb/{}", old.blb_id)),
        "{mutations:?}"
    );
    let blbs: Vec<String> = h
        .cloud
        .blbs()
        .iter()
        .map(|b| b["blbId"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(blbs, vec![web.blb_id.clone(), other.blb_id.clone()]);
    let mut eips: Vec<String> = h
        .cloud
        .eips()
        .iter()
        .map(|e| e["eip"].as_str().unwrap().to_string())
        .collect();
    eips.sort();
    let mut expected = vec![web_eip, users_eip];
    expected.sort();
    assert_eq!(eips, expected, "web's and the user's EIPs stay");

    let (code, stdout, stderr) = run(dir.path().to_path_buf(), manifest, vec!["audit"]).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "No leaked resources: 2 owned by this cluster, all in use.\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_read_makes_plan_and_audit_fail_naming_the_call_never_report_nothing() {
    let (h, dir) = cloud().await;
    let web = support::build_upstream_state(&h.provider, CLUSTER, &upstream("web", true)).await;
    let manifest = format!(
        "{NODES}{}",
        served("web", &web, web.eip.as_deref().unwrap(), "")
    );
    h.cloud.inject(kube_lb_mock_baidu::Fault::respond(
        "GET",
        "/v1/blb",
        1000,
        kube_lb_mock_baidu::ApiError::new(403, "AccessDenied", "the sub-user may not read BLB"),
    ));
    for args in [
        vec!["plan", "--detailed-exitcode"],
        vec!["audit", "-o", "json"],
    ] {
        let what = args[0];
        let (code, stdout, stderr) = run(dir.path().to_path_buf(), manifest.clone(), args).await;
        assert_eq!(code, 1, "{what}: {stdout}{stderr}");
        let said = format!("{stdout}{stderr}");
        assert!(
            said.contains("blb:DescribeLoadBalancers") && said.contains("AccessDenied"),
            "{what} names the call and the cloud's code: {said}"
        );
        assert!(
            !stdout.contains("No changes") && !stdout.contains("No leaked"),
            "{what}: {stdout}"
        );
    }
}

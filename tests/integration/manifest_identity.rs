//! Identity on manifests, on every cloud: `plan`, `audit` and `reconcile` given `-f` see the
//! same Services as the run that built the cloud state, so a plan made after a reconcile is in
//! sync and an audit with `--delete` removes nothing of a live Service.
//!
//! The defect this guards against: the embedded API server gives every object it creates a new
//! UID, load balancers are named and tagged after their Service's UID, and the audit matches
//! resources to Services by UID. Plan and audit of the manifests a reconcile had built from then
//! saw new Services beside old, unowned load balancers: the plan created a second set, and
//! `audit --delete` deleted the live Services' load balancers. Now `--state-file` gives plan and
//! audit the Services (and UIDs) of the run that wrote it, a manifest's own `metadata.uid` is
//! kept, and `audit --delete` keeps, without `--force`, whatever belongs to a Service that
//! exists by namespace/name with another UID.
//!
//! Each cloud runs the real binary against its mock; what exists in the cloud is read back
//! directly (the chaos suite's inventory of each cloud) before and after every read-only step.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kube_lb_apiserver::ApiServer;
use serde_json::{Value, json};

use crate::chaos::ChaosCloud;

/// One run of the binary: exit code, stdout, stderr.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs `kube-lb <args> <cloud args>` with the cloud's environment, off the runtime's threads
/// (the mocks and the API server answer on them).
async fn kube_lb(args: Vec<String>, cloud: (Vec<String>, Vec<(String, String)>)) -> Run {
    let (cloud_args, env) = cloud;
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
            .env_remove("KUBE_LB_CLOUD")
            .env_remove("KUBE_LB_CLUSTER_NAME")
            .env_remove("KUBE_LB_CLUSTER_ID")
            .envs(env)
            .args(["--log", "warn"])
            .args(&args)
            .args(&cloud_args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// The cloud's nodes and two LoadBalancer Services, as one multi-document manifest.
fn manifest(cloud: &dyn ChaosCloud) -> String {
    let service = |name: &str, port: u16| {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "type": "LoadBalancer",
                "selector": {"app": name},
                "ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]
            }
        })
    };
    cloud
        .nodes()
        .into_iter()
        .chain([service("web", 80), service("api", 443)])
        .map(|doc| doc.to_string())
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// What the cloud holds, read directly, sorted.
async fn holdings(cloud: &dyn ChaosCloud) -> Vec<String> {
    let mut all = cloud.inventory().await.unwrap().all();
    all.sort();
    all
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(ToString::to_string).collect()
}

/// `--cloud <name> --cluster-name chaos` and the cloud's own flags and environment.
fn cloud_flags(cloud: &dyn ChaosCloud, dir: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let (own, env) = cloud.controller(dir, None);
    let mut flags = strings(&["--cloud", cloud.name(), "--cluster-name", "chaos"]);
    flags.extend(own);
    (flags, env)
}

/// Asserts a `plan -o json --detailed-exitcode` run found both Services in sync.
fn assert_in_sync(plan: &Run, how: &str) {
    assert_eq!(plan.code, 0, "{how}: the plan must be empty: {plan:?}");
    let report = plan.json();
    assert_eq!(report["summary"]["servicesInSync"], 2, "{how}: {report:#}");
    assert_eq!(
        report["summary"]["servicesWithChanges"], 0,
        "{how}: {report:#}"
    );
}

/// Asserts an `audit -o json --delete` run found nothing leaked.
fn assert_nothing_leaked(audit: &Run, how: &str) {
    assert_eq!(audit.code, 0, "{how}: {audit:?}");
    let report = audit.json();
    assert_eq!(report["leaked"], json!([]), "{how}: {report:#}");
}

/// reconcile -f → plan -f → audit -f --delete, with and without the state file, and the same
/// through a kubeconfig.
async fn check(cloud: &dyn ChaosCloud) {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests.yaml");
    std::fs::write(&manifests, manifest(cloud)).unwrap();
    let state = dir.path().join("state.json");
    let flags = || cloud_flags(cloud, dir.path());
    let path = |p: &PathBuf| p.display().to_string();

    let built = kube_lb(
        [
            strings(&["reconcile", "-f"]),
            vec![path(&manifests)],
            strings(&["--state-file"]),
            vec![path(&state)],
            strings(&["--timeout", "90s", "--backoff-base", "100ms"]),
        ]
        .concat(),
        flags(),
    )
    .await;
    assert_eq!(built.code, 0, "reconcile: {built:?}");
    let held = holdings(cloud).await;
    if cloud.name() != "local" {
        assert!(!held.is_empty(), "reconcile built nothing in the cloud");
    }
    let state_bytes = std::fs::read(&state).unwrap();

    // With the state file: the Services (and UIDs) the reconcile built for.
    let with_state = |command: &str, extra: &[&str]| {
        [
            strings(&[command, "-f"]),
            vec![path(&manifests)],
            strings(&["--state-file"]),
            vec![path(&state)],
            strings(&["-o", "json"]),
            strings(extra),
        ]
        .concat()
    };
    let plan = kube_lb(with_state("plan", &["--detailed-exitcode"]), flags()).await;
    assert_in_sync(&plan, "plan -f --state-file");
    let audit = kube_lb(with_state("audit", &["--delete"]), flags()).await;
    assert_nothing_leaked(&audit, "audit -f --state-file --delete");
    assert_eq!(
        holdings(cloud).await,
        held,
        "plan and audit with the state file"
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        state_bytes,
        "plan and audit never write the state file"
    );

    // Without it the manifests' Services get new UIDs: audit --delete lists what belongs to the
    // Services of those names, and keeps it.
    let fresh = kube_lb(
        [
            strings(&["audit", "-f"]),
            vec![path(&manifests)],
            strings(&["-o", "json", "--delete"]),
        ]
        .concat(),
        flags(),
    )
    .await;
    let report = fresh.json();
    let leaked = report["leaked"].as_array().unwrap();
    assert!(
        leaked
            .iter()
            .all(|row| row["kept"].is_string() && row["deleted"] == json!(false)),
        "audit --delete without the state file keeps what a Service of that name owns: {report:#}"
    );
    let expected = if leaked.is_empty() { 0 } else { 2 };
    assert_eq!(fresh.code, expected, "kept resources exit 2: {fresh:?}");
    if cloud.name() != "local" {
        assert!(
            !leaked.is_empty(),
            "the other-UID resources are listed: {report:#}"
        );
        let plan = kube_lb(
            [
                strings(&["plan", "-f"]),
                vec![path(&manifests)],
                strings(&["--detailed-exitcode"]),
            ]
            .concat(),
            flags(),
        )
        .await;
        assert!(
            plan.stderr.contains("none of these Services is by UID")
                && plan.stderr.contains("--state-file"),
            "a plan that would build a second load balancer says why: {plan:?}"
        );
    }
    assert_eq!(
        holdings(cloud).await,
        held,
        "audit --delete without --force"
    );

    // Through a kubeconfig: the same Services served by an API server holding the state.
    let server = ApiServer::builder()
        .state_file_read_only(&state)
        .start()
        .await
        .unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let live = |command: &str, extra: &[&str]| {
        [
            strings(&[command, "--kubeconfig"]),
            vec![path(&kubeconfig)],
            strings(&["-o", "json"]),
            strings(extra),
        ]
        .concat()
    };
    let plan = kube_lb(live("plan", &["--detailed-exitcode"]), flags()).await;
    assert_in_sync(&plan, "plan --kubeconfig");
    let audit = kube_lb(live("audit", &["--delete"]), flags()).await;
    assert_nothing_leaked(&audit, "audit --kubeconfig --delete");
    assert_eq!(
        holdings(cloud).await,
        held,
        "plan and audit through a kubeconfig"
    );
    server.shutdown().await;

    // Leave nothing behind.
    let deleted = kube_lb(
        [
            strings(&["reconcile", "-f"]),
            vec![path(&manifests)],
            strings(&["--state-file"]),
            vec![path(&state)],
            strings(&["--timeout", "90s", "--backoff-base", "100ms", "--delete"]),
        ]
        .concat(),
        flags(),
    )
    .await;
    assert_eq!(deleted.code, 0, "reconcile --delete: {deleted:?}");
    assert_eq!(
        holdings(cloud).await,
        Vec::<String>::new(),
        "after --delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local() {
    check(&crate::chaos::clouds::Local).await;
}

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws() {
    check(&crate::chaos::clouds::Aws::start().await).await;
}

#[cfg(feature = "gcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp() {
    check(&crate::chaos::clouds::Gcp::start().await).await;
}

#[cfg(feature = "azure")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure() {
    check(&crate::chaos::clouds::Azure::start().await).await;
}

#[cfg(feature = "openstack")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack() {
    check(&crate::chaos::openstack::OpenStack::start().await).await;
}

#[cfg(feature = "tencent")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tencent() {
    check(&crate::chaos::tencent::Tencent::start().await).await;
}

#[cfg(feature = "baidu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baidu() {
    check(&crate::chaos::baidu::Baidu::start().await).await;
}

/// A manifest's own `metadata.uid` is kept: audit of manifests exported from the cluster that
/// built the load balancers (`kubectl get svc -o yaml`) matches them without a state file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_uid_is_kept_and_a_duplicate_refused() {
    let server = ApiServer::builder().start().await.unwrap();
    let uid = "8f0c3a52-1d2e-4f6a-9b7c-0d1e2f3a4b5c";
    let svc = |name: &str| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"type": "ClusterIP", "ports": [{"port": 80}]}
        })
        .to_string()
    };
    let created = server.apply_manifests(&svc("web")).unwrap();
    assert_eq!(created[0]["metadata"]["uid"], uid);
    let error = server
        .apply_manifests(&svc("other"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("metadata.uid") && error.contains("default/web"),
        "two objects with one UID are refused, naming the holder: {error}"
    );
    let bad = server
        .apply_manifests(&svc("third").replace(uid, "not a uid"))
        .unwrap_err()
        .to_string();
    assert!(bad.contains("metadata.uid"), "{bad}");
    server.shutdown().await;
}

/// A state file that does not exist is an error naming it, not an empty cluster whose plan
/// would be "no changes".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_state_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere.json");
    for command in ["plan", "audit"] {
        let run = kube_lb(
            vec![
                command.to_string(),
                "--state-file".to_string(),
                missing.display().to_string(),
            ],
            (strings(&["--cloud", "local"]), Vec::new()),
        )
        .await;
        assert_eq!(run.code, 1, "{command}: {run:?}");
        assert!(
            run.stderr.contains("nowhere.json") && run.stderr.contains("does not exist"),
            "{command}: {run:?}"
        );
        assert!(!missing.exists(), "{command} wrote the state file");
    }
}

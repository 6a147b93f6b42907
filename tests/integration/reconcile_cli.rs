//! `kube-lb reconcile` as scripts use it: exit codes, output formats, `--state-file` and
//! `--delete`.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use assert_cmd::Command;
use serde_json::Value;

const GOOD: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: LoadBalancer
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: prod}
spec:
  type: LoadBalancer
  loadBalancerIP: 127.240.0.50
  ports: [{name: https, port: 443, targetPort: 8443}]
---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: default}
spec:
  ports: [{port: 82}]
"#;

const BAD: &str = r#"
apiVersion: v1
kind: Service
metadata:
  name: bad
  namespace: default
  annotations:
    service.kubernetes.io/topology-keys: "*,kubernetes.io/hostname"
spec:
  type: LoadBalancer
  ports: [{port: 81}]
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn reconcile(args: &[&str]) -> (i32, Vec<Value>, String) {
    let out = Command::cargo_bin("kube-lb")
        .unwrap()
        .arg("--log")
        .arg("warn")
        .arg("reconcile")
        .args(args)
        .args(["-o", "json", "--timeout", "30s"])
        .output()
        .unwrap();
    let rows = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (
        out.status.code().unwrap(),
        rows,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn row<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows:?}"))
}

#[test]
fn all_addressed_exits_0_and_prints_every_service() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "good.yaml", GOOD);
    let (code, rows, stderr) = reconcile(&["-f", &file]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(rows.len(), 3);
    assert_eq!(row(&rows, "api")["externalIp"], "127.240.0.50");
    assert!(
        row(&rows, "web")["externalIp"]
            .as_str()
            .unwrap()
            .starts_with("127.240.")
    );
    assert_eq!(row(&rows, "web")["status"], "Ready");
    assert_eq!(row(&rows, "internal")["status"], "-");
}

#[test]
fn a_user_error_exits_1_with_the_event_text() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.yaml", GOOD);
    let bad = write(dir.path(), "bad.yaml", BAD);
    let (code, rows, stderr) = reconcile(&["-f", &good, "-f", &bad]);
    assert_eq!(code, 1, "{stderr}");
    let bad = row(&rows, "bad");
    assert_eq!(bad["status"], "Error");
    assert_eq!(bad["externalIp"], "<pending>");
    assert!(
        bad["event"].as_str().unwrap().starts_with(
            "annotation service.kubernetes.io/topology-keys = \"*,kubernetes.io/hostname\""
        ),
        "{bad}"
    );
    assert_eq!(row(&rows, "web")["status"], "Ready");
}

#[test]
fn table_output_has_kubectl_like_columns() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "good.yaml", GOOD);
    let out = Command::cargo_bin("kube-lb")
        .unwrap()
        .args(["--log", "warn", "reconcile", "-f", &file])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let header = text.lines().next().unwrap();
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "NAMESPACE",
            "NAME",
            "TYPE",
            "EXTERNAL-IP",
            "PORTS",
            "STATUS/EVENT"
        ]
    );
    assert!(text.contains("127.240.0.50"), "{text}");
}

#[test]
fn state_file_makes_a_second_run_a_resync_and_delete_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "good.yaml", GOOD);
    let state = dir.path().join("state.json").display().to_string();
    let (code, first, stderr) = reconcile(&["-f", &file, "--state-file", &state]);
    assert_eq!(code, 0, "{stderr}");
    let (code, second, stderr) = reconcile(&["-f", &file, "--state-file", &state]);
    assert_eq!(code, 0, "{stderr}");
    for name in ["web", "api"] {
        assert_eq!(
            row(&first, name)["externalIp"],
            row(&second, name)["externalIp"],
            "{name}"
        );
    }
    let (code, deleted, stderr) = reconcile(&["-f", &file, "--state-file", &state, "--delete"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(row(&deleted, "web")["status"], "Deleted");
    assert_eq!(row(&deleted, "internal")["status"], "-");
}

#[test]
fn unavailable_cloud_and_timeouts_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "good.yaml", GOOD);
    let (code, _, stderr) = reconcile(&["-f", &file, "--cloud", "gcp"]);
    assert_eq!(code, 2, "{stderr}");
    let out = Command::cargo_bin("kube-lb")
        .unwrap()
        .args(["--log", "warn", "reconcile", "-f", &file, "--timeout", "0s"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));
}

#[test]
fn one_wrong_typed_service_does_not_keep_the_others_from_converging() {
    // The fuzz finding: exit 2, none of the 3 good Services addressed, neither the Service nor
    // the field named.
    let bad = r#"
apiVersion: v1
kind: Service
metadata: {name: typo, namespace: default}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 84, nodePort: "30000"}]
"#;
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "mixed.yaml", &format!("{GOOD}---{bad}"));
    let (code, rows, stderr) = reconcile(&["-f", &file]);
    assert_eq!(code, 1, "{stderr}");
    assert_eq!(row(&rows, "web")["status"], "Ready");
    assert_eq!(row(&rows, "api")["status"], "Ready");
    assert_eq!(row(&rows, "internal")["status"], "-");
    let typo = row(&rows, "typo");
    assert_eq!(typo["status"], "Error");
    assert_eq!(typo["namespace"], "default");
    assert_eq!(
        typo["event"],
        "not a valid Service object: spec.ports[0].nodePort: invalid type: string \"30000\", \
         expected i32"
    );
}

/// Lint's status of each Service, keyed `namespace/name`.
fn lint_verdicts(files: &[&str]) -> std::collections::BTreeMap<String, String> {
    let mut cmd = Command::cargo_bin("kube-lb").unwrap();
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("KUBE_LB_CLOUD")
        .args(["lint", "--cloud", "local", "-o", "json"])
        // The pool reconcile gets below: lint judges the pinned addresses against it too.
        .args(["--local-pool", "127.240.0.0/16,127.0.0.240-127.0.0.243"]);
    for file in files {
        cmd.args(["-f", file]);
    }
    let out = cmd.output().unwrap();
    let reports: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    reports
        .iter()
        .filter_map(|r| {
            let object = r["object"].as_str()?.strip_prefix("Service ")?.to_owned();
            Some((object, r["status"].as_str()?.to_owned()))
        })
        .collect()
}

#[test]
fn lint_and_reconcile_give_the_same_verdict_per_service() {
    // The fuzz finding: 61 Services lint called invalid got addresses from reconcile. Causes:
    // `spec.topologyKeys` was lifted and judged by lint only (reconcile's API server kept the
    // removed field and the typed Service dropped it), and a targetPort of 0 or "" that the API
    // server defaults to the port was an error for lint only.
    let files = [
        "tests/fixtures/judgement",
        "tests/fixtures/invalid",
        "examples/local",
    ];
    let lint = lint_verdicts(&files);
    assert!(lint.len() >= 15, "{lint:?}");
    let mut cmd = Command::cargo_bin("kube-lb").unwrap();
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "--log",
            "warn",
            "reconcile",
            "--cloud",
            "local",
            "-o",
            "json",
        ])
        .args(["--timeout", "60s"])
        // The address pool is runtime configuration lint cannot know: give reconcile one that
        // holds the example's pinned loadBalancerIP, as `kube-lb up` does.
        .args(["--local-pool", "127.240.0.0/16,127.0.0.240-127.0.0.243"]);
    for file in files {
        cmd.args(["-f", file]);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut disagreements = Vec::new();
    for (object, verdict) in &lint {
        let reconciled = rows
            .iter()
            .find(|r| {
                format!(
                    "{}/{}",
                    r["namespace"].as_str().unwrap(),
                    r["name"].as_str().unwrap()
                ) == *object
            })
            .map_or("<missing>", |r| r["status"].as_str().unwrap_or_default());
        let expected = match verdict.as_str() {
            "ok" => "Ready",
            "invalid" => "Error",
            _ => "-",
        };
        if reconciled != expected {
            disagreements.push(format!("{object}: lint {verdict}, reconcile {reconciled}"));
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}\n{stderr}");
    // Every Service reconcile printed was judged by lint too.
    assert_eq!(rows.len(), lint.len(), "{rows:#?}");
}

/// A state file that recorded a delete in progress (a Service marked for deletion, its
/// finalizer still on): the next run releases it and is settled when it is gone. Before, it
/// waited for that Service to get an address, and exited 2 ("timed out") although the delete
/// had finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_being_deleted_in_the_state_file_settles_when_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "good.yaml", GOOD);
    let state = dir.path().join("state.json").display().to_string();
    let run = |args: Vec<String>| {
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            reconcile(&args)
        })
    };
    let args = |file: &str| {
        vec![
            "-f".to_string(),
            file.to_string(),
            "--state-file".to_string(),
            state.clone(),
        ]
    };
    let (code, _, stderr) = run(args(&file)).await.unwrap();
    assert_eq!(code, 0, "{stderr}");

    // Delete prod/api as a client would: its finalizer keeps it, marked, in the state file.
    let server = kube_lb_apiserver::ApiServer::builder()
        .state_file(&state)
        .start()
        .await
        .unwrap();
    let api: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(server.client().unwrap(), "prod");
    api.delete("api", &Default::default()).await.unwrap();
    let marked = api.get("api").await.unwrap();
    assert!(
        marked.metadata.deletion_timestamp.is_some(),
        "held by the finalizer"
    );
    server.shutdown().await;

    let web_only = write(
        dir.path(),
        "web.yaml",
        GOOD.split("\n---\n").next().unwrap(),
    );
    let (code, rows, stderr) = run(args(&web_only)).await.unwrap();
    assert_eq!(code, 0, "settled once prod/api is gone: {stderr}");
    assert_eq!(row(&rows, "web")["status"], "Ready");
    assert!(
        rows.iter().all(|r| r["name"] != "api"),
        "prod/api is gone: {rows:?}"
    );
}

//! The official Kubernetes Python client (a reader nobody here wrote) against the server:
//! its streaming-list watch, and the errors it surfaces for bad list options, a JSON patch
//! whose `test` fails, a failed delete precondition, ingress points on a ClusterIP Service and
//! an Event field selector kube does not support, compared with kube-apiserver 1.33.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::Value;

/// The project's virtualenv, which carries the `kubernetes` package.
fn python() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

/// The interpreter, or `None` (a loud skip) outside CI when it or `kubernetes` is missing.
pub async fn python_with_client(test: &str) -> Option<PathBuf> {
    let python = python();
    let has_client = tokio::process::Command::new(&python)
        .args(["-c", "import kubernetes"])
        .output()
        .await
        .is_ok_and(|out| out.status.success());
    if has_client {
        return Some(python);
    }
    let message = format!(
        "{test}: {} with the `kubernetes` package is not installed \
         (`bash scripts/setup-venv.sh`)",
        python.display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("\n\n*** SKIPPING {message} ***\n\n");
    None
}

/// Runs `script` with the path of a kubeconfig for `server` as its argument; returns its
/// stdout. A failed run fails the test.
pub async fn run_script(python: &Path, script: &str, server: &RunningApiServer) -> String {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::process::Command::new(python)
        .args(["-c", script])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Each step prints one JSON line: what the client returned or raised.
const SCRIPT: &str = r#"
import json, sys
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

config.load_kube_config(sys.argv[1])
v1 = client.CoreV1Api()
ns = "default"

def failure(step, call):
    try:
        call()
        print(json.dumps({"step": step, "status": 0}))
    except ApiException as e:
        print(json.dumps({"step": step, "status": e.status, "body": json.loads(e.body)}))

for name in ("one", "two"):
    v1.create_namespaced_config_map(ns, {"metadata": {"name": name}, "data": {"k": name}})

failure("match-without-version",
        lambda: v1.list_namespaced_config_map(ns, resource_version_match="NotOlderThan"))

events = []
for event in watch.Watch().stream(
        v1.list_namespaced_config_map, ns, send_initial_events=True,
        resource_version_match="NotOlderThan", allow_watch_bookmarks=True, timeout_seconds=1):
    raw = event["raw_object"]
    events.append({"type": event["type"], "name": raw["metadata"].get("name"),
                   "annotations": raw["metadata"].get("annotations")})
print(json.dumps({"step": "watch-list", "events": events}))

failure("json-patch-test",
        lambda: v1.patch_namespaced_config_map(
            "one", ns, [{"op": "test", "path": "/data/k", "value": "other"}]))

uid = v1.read_namespaced_config_map("one", ns).metadata.uid
failure("wrong-uid", lambda: v1.delete_namespaced_config_map(
    "one", ns, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-" + uid))))
print(json.dumps({"step": "uid", "uid": uid}))

v1.create_namespaced_service(ns, {"metadata": {"name": "internal"}, "spec": {"ports": [{"port": 80}]}})
failure("status-on-cluster-ip", lambda: v1.patch_namespaced_service_status(
    "internal", ns, {"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}}))
failure("event-field-selector",
        lambda: v1.list_namespaced_event(ns, field_selector="message=x"))
"#;

#[tokio::test]
async fn python_client_sees_kube_apiserver_answers() {
    let Some(python) = python_with_client("python_client_sees_kube_apiserver_answers").await else {
        return;
    };
    let server = ApiServer::builder().start().await.unwrap();
    let stdout = run_script(&python, SCRIPT, &server).await;
    let steps: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no step {name} in {stdout}"))
    };

    // ValidateListOptions: 422 naming ListOptions.meta.k8s.io and the offending option.
    let refused = step("match-without-version");
    assert_eq!(refused["status"], 422);
    assert_eq!(refused["body"]["details"]["kind"], "ListOptions");
    assert_eq!(
        refused["body"]["details"]["causes"][0]["field"],
        "resourceVersionMatch"
    );

    // The client's watch-list: both objects, then the bookmark that ends the initial events.
    let events = step("watch-list")["events"].as_array().unwrap();
    let summary: Vec<(String, Option<String>)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap().to_string(),
                e["name"].as_str().map(str::to_string),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ADDED".to_string(), Some("one".to_string())),
            ("ADDED".to_string(), Some("two".to_string())),
            ("BOOKMARK".to_string(), None),
        ]
    );
    assert_eq!(
        events[2]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );

    // A failed JSON-patch `test` is kube-apiserver's bare 422 (handlers/patch.go).
    let patch = step("json-patch-test");
    assert_eq!(patch["status"], 422);
    assert_eq!(patch["body"]["reason"], "Invalid");
    assert_eq!(
        patch["body"]["message"],
        "the server rejected our request due to an error in our request"
    );

    // A wrong uid precondition is a 409 naming the kind and both uids (rest/delete.go).
    let uid = step("uid")["uid"].as_str().unwrap();
    let conflict = step("wrong-uid");
    assert_eq!(conflict["status"], 409);
    assert_eq!(conflict["body"]["reason"], "Conflict");
    assert_eq!(
        conflict["body"]["message"],
        format!(
            "Operation cannot be fulfilled on ConfigMap \"one\": the UID in the precondition \
             (not-{uid}) does not match the UID in record ({uid}). The object might have been \
             deleted and then recreated"
        )
    );

    // Ingress points on a Service that is not a LoadBalancer: kube 1.33's one Forbidden cause.
    let lb_status = step("status-on-cluster-ip");
    assert_eq!(lb_status["status"], 422);
    assert_eq!(
        lb_status["body"]["details"]["causes"],
        serde_json::json!([{"reason": "FieldValueForbidden",
            "message": "Forbidden: may only be used when `spec.type` is 'LoadBalancer'",
            "field": "status.loadBalancer.ingress"}])
    );

    // A field label core/v1 Events do not have is a 400 naming it.
    let selector = step("event-field-selector");
    assert_eq!(selector["status"], 400);
    assert_eq!(
        selector["body"]["message"],
        "field label not supported: message"
    );
    server.shutdown().await;
}

//! `/openapi/v2`: the JSON and protobuf forms, ETags, custom resources in the document, and
//! Debian's kubectl 1.20 (unpacked by scripts/setup-tools.sh) really reading the schemas:
//! client-side validation names unknown fields and `explain` walks them. The apply / get /
//! describe / delete cycle of kubectl 1.20 and 1.32 against `kube-lb apiserver` and
//! `kube-lb up` is in the root integration tests (`kubectl_legacy`).

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::{Value, json};

const PROTOBUF_ASKED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const PROTOBUF_ANSWERED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// kubectl 1.20: `$KUBE_LB_KUBECTL_1_20`, else where scripts/setup-tools.sh unpacks it.
fn kubectl_1_20() -> PathBuf {
    std::env::var_os("KUBE_LB_KUBECTL_1_20").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/kubectl-1.20/usr/bin/kubectl"),
        PathBuf::from,
    )
}

/// The binary, or `None` (a loud skip) outside CI; in CI a missing tool fails the test.
fn require(path: PathBuf, how: &str) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path);
    }
    let message = format!("{} not found; {how}", path.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("SKIPPED: {message}");
    None
}

async fn kubectl(binary: &Path, kubeconfig: &Path, args: &[&str], stdin: &str) -> Output {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new(binary)
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", kubeconfig.parent().unwrap())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .arg("--request-timeout=20s")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    drop(input);
    child.wait_with_output().await.unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn start() -> (RunningApiServer, tempfile::TempDir, PathBuf) {
    let server = ApiServer::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    (server, dir, kubeconfig)
}

const SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  topologyKeys: ["kubernetes.io/hostname", "*"]
  ports:
  - port: 80
    targetPort: http
"#;

#[tokio::test]
async fn kubectl_1_20_validates_and_explains_with_the_served_schemas() {
    let Some(binary) = require(kubectl_1_20(), "run scripts/setup-tools.sh") else {
        return;
    };
    let (server, _dir, kubeconfig) = start().await;
    let bogus = SERVICE.replace("  selector:\n", "  bogus: 1\n  selector:\n");
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], &bogus).await;
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains(
                "ValidationError(Service.spec): unknown field \"bogus\" in io.k8s.api.core.v1.ServiceSpec"
            ),
        "{}",
        text(&out)
    );
    let wrong_type = SERVICE.replace("port: 80", "port: [80]");
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], &wrong_type).await;
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("port"),
        "{}",
        text(&out)
    );
    // Seed 002's field passes kubectl 1.20's validation.
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], SERVICE).await;
    assert!(out.status.success(), "{}", text(&out));
    let out = kubectl(
        &binary,
        &kubeconfig,
        &["explain", "service.spec.ports.targetPort"],
        "",
    )
    .await;
    let explained = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && explained.contains("FIELD:    targetPort"),
        "{}",
        text(&out)
    );
    server.shutdown().await;
}

#[tokio::test]
async fn openapi_v2_forms_and_etag() {
    let server = ApiServer::builder().start().await.unwrap();
    let url = format!("{}/openapi/v2", server.url());
    let http = reqwest::Client::new();

    let response = http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let etag = response.headers()["etag"].to_str().unwrap().to_string();
    let doc: Value = response.json().await.unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert_eq!(
        doc["definitions"]["io.k8s.api.core.v1.Service"]["x-kubernetes-group-version-kind"],
        json!([{"group": "", "version": "v1", "kind": "Service"}])
    );

    let response = http
        .get(&url)
        .header("accept", PROTOBUF_ASKED)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], PROTOBUF_ANSWERED);
    let pb_etag = response.headers()["etag"].to_str().unwrap().to_string();
    assert_ne!(pb_etag, etag, "each form has its own tag");
    let bytes = response.bytes().await.unwrap();
    // Field 1 (swagger), length 3, "2.0".
    assert!(bytes.windows(5).any(|w| w == b"\x0a\x032.0"));

    let response = http
        .get(&url)
        .header("accept", PROTOBUF_ASKED)
        .header("if-none-match", &pb_etag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 304);
    assert!(response.bytes().await.unwrap().is_empty());
    let response = http
        .get(&url)
        .header("if-none-match", &pb_etag)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "a protobuf tag does not match JSON");

    let response = http
        .get(&url)
        .header("accept", "application/yaml")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 406);
    server.shutdown().await;
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: pools.example.kube-lb.io
spec:
  group: example.kube-lb.io
  scope: Cluster
  names: {plural: pools, singular: pool, kind: Pool}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [cidrs]
            properties:
              cidrs: {type: array, items: {type: string}}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

const POOL: &str = r#"apiVersion: example.kube-lb.io/v1alpha1
kind: Pool
metadata:
  name: lab
spec:
  cidrs: ["192.0.2.0/28"]
  extra: {anything: [1, 2]}
"#;

/// A CRD registered at run time appears in the document; kubectl 1.20 validates its objects
/// against the published schema and applies them (JSON merge patch, as for any custom kind).
#[tokio::test]
async fn custom_resources_are_published() {
    let (server, _dir, kubeconfig) = start().await;
    server.apply_manifests(CRD).unwrap();
    let url = format!("{}/openapi/v2", server.url());
    let doc: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    let pool = &doc["definitions"]["io.kube-lb.example.v1alpha1.Pool"];
    assert_eq!(
        pool["x-kubernetes-group-version-kind"],
        json!([{"group": "example.kube-lb.io", "version": "v1alpha1", "kind": "Pool"}]),
        "{pool}"
    );
    assert_eq!(pool["properties"]["spec"]["required"], json!(["cidrs"]));
    assert!(doc["paths"]["/apis/example.kube-lb.io/v1alpha1/pools/{name}"]["patch"].is_object());

    let Some(binary) = require(kubectl_1_20(), "run scripts/setup-tools.sh") else {
        return;
    };
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], POOL).await;
    assert!(out.status.success(), "{}", text(&out));
    let twice = POOL.replace("192.0.2.0/28", "192.0.2.16/28");
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], &twice).await;
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("pool.example.kube-lb.io/lab configured"),
        "{}",
        text(&out)
    );
    let missing = POOL.replace("  cidrs: [\"192.0.2.0/28\"]\n", "");
    let out = kubectl(&binary, &kubeconfig, &["apply", "-f", "-"], &missing).await;
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("missing required field \"cidrs\""),
        "{}",
        text(&out)
    );
    server.shutdown().await;
}

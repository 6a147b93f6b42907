//! `kube-lb webhook` as kube-apiserver meets it: HTTPS with the certificate it was given to
//! trust, AdmissionReview v1 in and out, warnings with field paths, `--deny`, and a 400 for a
//! malformed review.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const INTERVAL: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";

struct Webhook {
    child: Child,
    url: String,
    client: reqwest::Client,
    ca_pem: Vec<u8>,
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the webhook with a self-signed certificate for 127.0.0.1 and waits until it answers
/// `/healthz` to a client trusting only that certificate.
async fn start(dir: &Path, name: &str, extra: &[&str]) -> Webhook {
    let port = crate::monitoring::free_port();
    let ca = dir.join(format!("{name}-ca.pem"));
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args([
            "webhook",
            "--self-signed-for",
            "127.0.0.1,localhost",
            "--cloud",
            "aws",
        ])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--ca-bundle-out")
        .arg(&ca)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let base = format!("https://127.0.0.1:{port}");
    // Owned by the guard from here on, so a failed wait below still kills it.
    let mut webhook = Webhook {
        child,
        url: format!("{base}/validate-service"),
        client: reqwest::Client::new(),
        ca_pem: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the webhook did not answer within 30 s: {}",
            std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
        );
        if let Ok(pem) = std::fs::read(&ca) {
            let client = reqwest::Client::builder()
                .tls_built_in_root_certs(false)
                .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            if client
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
            {
                webhook.client = client;
                webhook.ca_pem = pem;
                return webhook;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn review_of(annotations: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "operation": "CREATE",
            "namespace": "default",
            "name": "web",
            "object": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
                "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP"}]}
            },
            "dryRun": false
        }
    })
}

#[tokio::test]
async fn webhook_warns_with_field_paths_denies_on_request_and_refuses_malformed_reviews() {
    let dir = tempfile::tempdir().unwrap();
    let (warn, deny) = tokio::join!(
        start(dir.path(), "warn", &[]),
        start(dir.path(), "deny", &["--deny"])
    );
    let bad = review_of(json!({INTERVAL: "2"}));

    let answer: Value = warn
        .client
        .post(&warn.url)
        .json(&bad)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let response = &answer["response"];
    assert_eq!(response["uid"], "0df28fbd-5f5f-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true, "{answer}");
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with(&format!("metadata.annotations[{INTERVAL}]: invalid value \"2\": must be an integer from 5 to 300")),
        "{warnings:?}"
    );

    let answer: Value = deny
        .client
        .post(&deny.url)
        .json(&bad)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["allowed"], false, "{answer}");
    assert_eq!(answer["response"]["status"]["code"], 422, "{answer}");
    assert!(
        answer["response"]["status"]["message"]
            .as_str()
            .unwrap()
            .contains(INTERVAL),
        "{answer}"
    );
    let clean: Value = deny
        .client
        .post(&deny.url)
        .json(&review_of(json!({})))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(clean["response"]["allowed"], true, "{clean}");

    for (body, reason) in [
        ("{".to_string(), "not JSON"),
        (json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}).to_string(), "admission.k8s.io/v1"),
    ] {
        let answered = warn.client.post(&warn.url).header("content-type", "application/json").body(body.clone()).send().await.unwrap();
        assert_eq!(answered.status(), 400, "{body}");
        let text = answered.text().await.unwrap();
        assert!(text.contains(reason), "{body}: {text}");
    }

    // Only TLS is served, and only with the certificate made for it.
    let untrusting = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(untrusting.post(&warn.url).json(&bad).send().await.is_err());
    let plain = warn.url.replace("https://", "http://");
    let over_http = warn.client.post(&plain).json(&bad).send().await;
    assert!(over_http.is_err() || over_http.is_ok_and(|r| !r.status().is_success()));
}

#[test]
fn webhook_needs_a_certificate() {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["webhook", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--tls-cert-file") && stderr.contains("--self-signed-for"),
        "{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("tls.crt");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["webhook", "--listen", "127.0.0.1:0", "--tls-cert-file"])
        .arg(&missing)
        .arg("--tls-private-key-file")
        .arg(dir.path().join("tls.key"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("tls.crt"), "{stderr}");
}

/// A ValidatingWebhookConfiguration for Services calling `url`, trusting `ca_pem`.
fn configuration(name: &str, url: &str, ca_pem: &[u8], failure_policy: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {name}
webhooks:
- name: services.{name}.kube-lb.io
  clientConfig:
    url: {url}
    caBundle: {ca}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["services"]
    scope: Namespaced
  namespaceSelector:
    matchExpressions:
    - {{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}}
  sideEffects: None
  admissionReviewVersions: ["v1"]
  failurePolicy: {failure_policy}
  timeoutSeconds: 5
"#
    )
}

fn bad_service(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata:
  name: {name}
  annotations:
    {INTERVAL}: "2"
spec:
  type: LoadBalancer
  ports:
  - port: 80
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_shows_the_webhooks_warnings_and_a_dry_run_persists_nothing() {
    let Some(binary) = crate::kubectl_legacy::require(
        std::path::PathBuf::from("/usr/bin/kubectl"),
        "install kubectl",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (warn, deny) = tokio::join!(
        start(dir.path(), "warn", &[]),
        start(dir.path(), "deny", &["--deny"])
    );
    let apiserver = crate::kubectl_legacy::start(&["apiserver", "--listen", "127.0.0.1:0"]);
    let kubectl = crate::kubectl_legacy::Kubectl {
        binary: &binary,
        running: &apiserver,
    };
    let run = |args: &[&str], stdin: Option<&str>| {
        let out = kubectl.run(args, stdin);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    kubectl.ok(
        &["apply", "-f", "-"],
        Some(&configuration("lint", &warn.url, &warn.ca_pem, "Ignore")),
    );
    let expected = format!(
        "Warning: metadata.annotations[{INTERVAL}]: invalid value \"2\": must be an integer from 5 to 300"
    );

    // A server-side dry run: the warning, and nothing stored (no Service, no address held).
    let (ok, stdout, stderr) = run(
        &["apply", "--dry-run=server", "-o", "json", "-f", "-"],
        Some(&bad_service("web")),
    );
    assert!(ok, "{stderr}");
    assert!(stderr.contains(&expected), "dry run: {stderr}");
    let tried: Value = serde_json::from_str(&stdout).unwrap();
    let tried_ip = tried["spec"]["clusterIP"].as_str().unwrap().to_owned();
    let (found, _, stderr) = run(&["get", "svc", "web"], None);
    assert!(
        !found && stderr.contains("NotFound"),
        "the dry run stored the Service: {stderr}"
    );
    let mut reuse = bad_service("other");
    reuse.push_str(&format!("  clusterIP: {tried_ip}\n"));
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&reuse));
    assert!(ok, "the dry run's cluster IP {tried_ip} was held: {stderr}");

    // The apply itself: stored, with the warning printed.
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&bad_service("web")));
    assert!(ok, "{stderr}");
    assert!(stderr.contains(&expected), "apply: {stderr}");
    kubectl.ok(&["get", "svc", "web"], None);
    // An update (kubectl apply patches the stored Service) is judged too, as stored after it.
    let changed = bad_service("web").replace("\"2\"", "\"4\"");
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&changed));
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Warning: metadata.annotations[{INTERVAL}]: invalid value \"4\""
        )),
        "update: {stderr}"
    );
    let stored = kubectl.ok(
        &[
            "get",
            "svc",
            "web",
            "-o",
            "jsonpath={.metadata.annotations}",
        ],
        None,
    );
    assert!(stored.contains("\"4\""), "{stored}");
    // kube-system is outside the namespace selector: no warning there.
    let (ok, _, stderr) = run(
        &["apply", "-n", "kube-system", "-f", "-"],
        Some(&bad_service("web")),
    );
    assert!(ok && !stderr.contains("Warning:"), "kube-system: {stderr}");

    // The denying webhook refuses; the refusal names the webhook and the annotation.
    kubectl.ok(
        &["apply", "-f", "-"],
        Some(&configuration("deny", &deny.url, &deny.ca_pem, "Fail")),
    );
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&bad_service("refused")));
    assert!(!ok, "a denied Service was stored");
    assert!(
        stderr.contains("admission webhook \"services.deny.kube-lb.io\" denied the request")
            && stderr.contains(INTERVAL),
        "{stderr}"
    );
    let (found, _, _) = run(&["get", "svc", "refused"], None);
    assert!(!found, "the refused Service exists");

    // A webhook that is down: Ignore lets the apply through, Fail refuses it and says why.
    drop(deny);
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&bad_service("while-down")));
    assert!(
        !ok && stderr.contains("failed calling webhook \"services.deny.kube-lb.io\""),
        "{stderr}"
    );
    kubectl.ok(&["delete", "validatingwebhookconfiguration", "deny"], None);
    drop(warn);
    let (ok, _, stderr) = run(&["apply", "-f", "-"], Some(&bad_service("while-down")));
    assert!(
        ok,
        "an unreachable Ignore webhook blocked the apply: {stderr}"
    );
}

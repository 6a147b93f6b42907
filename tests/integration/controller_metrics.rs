//! `/metrics`, `/healthz` and `/readyz` served next to a running controller, and
//! `kube_lb_cloud_calls_total{provider,operation,kind}` per operation for every provider: the
//! `kube-lb controller` binary against the local pool, moto (AWS), the GCE mock and the ARM
//! mock, scraped over HTTP after it gave a Service its address.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use controller_support::*;
use tokio::sync::watch;

#[tokio::test]
async fn metrics_count_reconciles_cloud_calls_and_load_balancers() {
    let (_server, client, running) = server_and_controller().await;
    let (ready_tx, ready_rx) = watch::channel(false);
    let (addr, task) = kube_lb::health::serve(
        "127.0.0.1:0".parse().unwrap(),
        running.metrics.clone(),
        ready_rx,
        running.shutdown.clone(),
    )
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let get = |path: &'static str| {
        let http = http.clone();
        async move {
            let response = http
                .get(format!("http://{addr}{path}"))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await.0, 200);
    assert_eq!(get("/readyz").await.0, 503);
    ready_tx.send_replace(true);
    assert_eq!(get("/readyz").await.0, 200);

    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    // The status write lands before the controller records the reconcile's outcome: wait for
    // the outcome rather than reading the first scrape after the address appears.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (status, text) = loop {
        let (status, text) = get("/metrics").await;
        if (status == 200 && text.contains("kube_lb_load_balancers_managed 1"))
            || tokio::time::Instant::now() > deadline
        {
            break (status, text);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status, 200);
    assert!(
        text.contains(
            r#"kube_lb_cloud_calls_total{provider="local",operation="allocate",kind="mutate"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains("# TYPE kube_lb_reconcile_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        text.contains(r#"kube_lb_reconciles_total{result="success"}"#),
        "{text}"
    );
    assert!(text.contains("kube_lb_load_balancers_managed 1"), "{text}");
    running.stop().await;
    task.await.unwrap();
}

/// How long a cloud reconcile through the binary may take (process start, informer sync, a
/// dozen mock calls, the controller's first backoff if a mock is slow to answer).
const CLOUD_CEILING: Duration = Duration::from_secs(90);

/// `(operation, kind) → count` of the `kube_lb_cloud_calls_total` samples of `provider`.
fn cloud_calls(text: &str, provider: &str) -> BTreeMap<(String, String), u64> {
    let prefix = format!("kube_lb_cloud_calls_total{{provider=\"{provider}\",");
    text.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (labels, value) = rest.rsplit_once("} ")?;
            let operation = labels
                .strip_prefix("operation=\"")?
                .split('"')
                .next()?
                .to_string();
            let kind = labels
                .split("kind=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_string();
            Some(((operation, kind), value.trim().parse().ok()?))
        })
        .collect()
}

/// A `kube-lb controller` child process, killed when dropped so a failed assertion does not
/// leave it running.
struct Controller {
    child: Child,
    log: PathBuf,
    metrics: String,
}

impl Controller {
    /// Starts the binary on `kubeconfig` for `cloud`, with `/metrics` on a free loopback port.
    fn start(
        dir: &Path,
        kubeconfig: &Path,
        cloud: &str,
        config: Option<&Path>,
        env: &[(String, String)],
    ) -> Controller {
        // Ask the kernel for a free port, then hand it over; nothing else on this loopback
        // binds ports by number in the meantime.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.join(format!("controller-{cloud}.log"));
        let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
        command
            .env_remove("KUBE_LB_CLOUD")
            .env_remove("KUBE_LB_CLOUD_CONFIG")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .args(["--log", "info", "controller", "--cloud", cloud])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--backoff-base", "200ms"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(config) = config {
            command.arg("--cloud-config").arg(config);
        }
        Controller {
            child: command.spawn().unwrap(),
            log,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the binary for `cloud` on a cluster holding `manifests` (Nodes and the LoadBalancer
/// Service `default/web`), waits for the address, and returns the `cloud_calls` samples of
/// `provider` scraped over HTTP.
async fn reconcile_and_scrape(
    cloud: &str,
    manifests: &str,
    config: Option<&Path>,
    env: &[(String, String)],
) -> BTreeMap<(String, String), u64> {
    let server = server().await;
    server.apply_manifests(manifests).unwrap();
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut controller = Controller::start(dir.path(), &kubeconfig, cloud, config, env);

    let deadline = tokio::time::Instant::now() + CLOUD_CEILING;
    let address = loop {
        if let Some(address) = get_svc(&client, "default", "web")
            .await
            .and_then(|s| ingress_of(&s).into_iter().next())
        {
            break address;
        }
        if let Some(exit) = controller.child.try_wait().unwrap() {
            panic!("controller exited with {exit}:\n{}", controller.log());
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no address on default/web after {CLOUD_CEILING:?}:\n{}",
            controller.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(!address.is_empty());

    let text = reqwest::get(&controller.metrics)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The binary's `--cloud` value is the provider label.
    let calls = cloud_calls(&text, cloud);
    assert!(
        calls
            .keys()
            .all(|(_, kind)| kind == "read" || kind == "mutate"),
        "{calls:?}"
    );
    calls
}

/// Asserts that each `(operation, kind)` of `want` was counted at least once, and that reads
/// and mutations were both counted.
fn assert_counted(cloud: &str, calls: &BTreeMap<(String, String), u64>, want: &[(&str, &str)]) {
    for (operation, kind) in want {
        let count = calls
            .get(&(operation.to_string(), kind.to_string()))
            .copied()
            .unwrap_or(0);
        assert!(
            count >= 1,
            "{cloud}: no {kind} call of {operation} counted in /metrics: {calls:#?}"
        );
    }
    for kind in ["read", "mutate"] {
        assert!(
            calls.iter().any(|((_, k), n)| k == kind && *n > 0),
            "{cloud}: no {kind} calls counted: {calls:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_counts_local_calls_per_operation() {
    let manifest = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
                    spec:\n  type: LoadBalancer\n  selector: {app: web}\n  \
                    ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]\n";
    let calls = reconcile_and_scrape("local", manifest, None, &[]).await;
    assert_eq!(
        calls.get(&("allocate".to_string(), "mutate".to_string())),
        Some(&1),
        "{calls:#?}"
    );
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/clouds")
            .join(name),
    )
    .unwrap()
}

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_counts_aws_calls_per_operation() {
    use crate::cloud_fixtures::{WEB_SERVICE_YAML, aws_env, aws_node_docs, moto};

    let moto = moto().await;
    let network = moto.cluster_network("kubernetes", 2).await.unwrap();
    let mut docs = aws_node_docs(&network.instances);
    docs.push(WEB_SERVICE_YAML.to_string());
    let env = aws_env(&moto.endpoint());
    let calls = reconcile_and_scrape("aws", &docs.join("---\n"), None, &env).await;
    assert_counted(
        "aws",
        &calls,
        &[
            ("elb:CreateLoadBalancer", "mutate"),
            ("elb:DescribeLoadBalancers", "read"),
            ("ec2:DescribeInstances", "read"),
            ("ec2:CreateSecurityGroup", "mutate"),
        ],
    );
    // Exactly one load balancer was created, so exactly one create was counted (no retry).
    assert_eq!(
        calls.get(&("elb:CreateLoadBalancer".to_string(), "mutate".to_string())),
        Some(&1),
        "{calls:#?}"
    );
}

#[cfg(feature = "gcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_counts_gcp_calls_per_operation() {
    use crate::cloud_fixtures::{gce, write_gce_conf};

    let gce = gce().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_gce_conf(dir.path(), gce.project(), gce.url());
    let calls = reconcile_and_scrape("gcp", &fixture("gcp.yaml"), Some(&config), &[]).await;
    assert_counted(
        "gcp",
        &calls,
        &[
            ("forwardingRules.insert", "mutate"),
            ("forwardingRules.get", "read"),
            ("targetPools.insert", "mutate"),
        ],
    );
}

#[cfg(feature = "azure")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_counts_azure_calls_per_operation() {
    use crate::cloud_fixtures::{arm, write_azure_json};

    let arm = arm().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_azure_json(dir.path(), &arm.url(), &arm.url());
    let calls = reconcile_and_scrape("azure", &fixture("azure.yaml"), Some(&config), &[]).await;
    assert_counted(
        "azure",
        &calls,
        &[
            ("PutLoadBalancer", "mutate"),
            ("PutPublicIPAddress", "mutate"),
            ("GetLoadBalancer", "read"),
        ],
    );
}

//! `kube-lb reconcile --cloud {aws,gcp,azure}` as a user runs it, against a mock started by
//! each test: the first run prints an address, a second run with the same state file changes
//! nothing in the cloud, `--delete` leaves nothing owned, and a bad annotation exits 1 with
//! its error text.
#![cfg(any(feature = "aws", feature = "gcp", feature = "azure"))]
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use assert_cmd::Command;

/// What one run printed.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The EXTERNAL-IP cell of `default/<name>` in the table.
    fn external_ip(&self, name: &str) -> String {
        let header = self.stdout.lines().next().unwrap_or_default();
        assert!(header.contains("EXTERNAL-IP"), "no table: {self:?}");
        let row = self
            .stdout
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cells| cells.first() == Some(&"default") && cells.get(1) == Some(&name))
            .unwrap_or_else(|| {
                panic!(
                    "no row for default/{name}:\n{}\n{}",
                    self.stdout, self.stderr
                )
            });
        row[3].to_string()
    }
}

/// Runs the binary with `env` and `args` off the async runtime (the mocks serve on it).
async fn reconcile(env: Vec<(String, String)>, args: Vec<String>) -> Run {
    tokio::task::spawn_blocking(move || {
        let out = Command::cargo_bin("kube-lb")
            .unwrap()
            .env_remove("KUBE_LB_CLOUD")
            .env_remove("KUBE_LB_CLOUD_CONFIG")
            .envs(env)
            .args(["--log", "warn", "reconcile"])
            .args(&args)
            .args(["--timeout", "90s", "--backoff-base", "100ms"])
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

fn args(cloud: &str, manifest: &Path, config: Option<&Path>, state: &Path) -> Vec<String> {
    let mut args = vec![
        "-f".to_string(),
        manifest.display().to_string(),
        "--cloud".to_string(),
        cloud.to_string(),
        "--state-file".to_string(),
        state.display().to_string(),
    ];
    if let Some(config) = config {
        args.push("--cloud-config".to_string());
        args.push(config.display().to_string());
    }
    args
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/clouds")
        .join(name)
}

/// A LoadBalancer Service `bad` with one annotation the parser must refuse.
fn bad_service(dir: &Path, key: &str, value: &str) -> PathBuf {
    let path = dir.join("bad.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: bad\n  namespace: default\n  \
             annotations: {{'{key}': '{value}'}}\nspec:\n  type: LoadBalancer\n  \
             ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]\n"
        ),
    )
    .unwrap();
    path
}

/// Asserts a run refused the bad annotation: exit 1, the key named in the output.
fn assert_rejected(run: &Run, key: &str) {
    assert_eq!(run.code, 1, "a bad annotation exits 1: {run:?}");
    assert!(
        run.stdout.contains("Error") && run.stdout.contains(key),
        "the error names the annotation: {run:?}"
    );
}

#[cfg(feature = "gcp")]
mod gcp {
    use super::*;
    use crate::provider_scenarios::scenarios::gcp::support::OWNED_COLLECTIONS;
    use kube_lb_mock_gce::{JournalEntry, MockGce};

    async fn mock() -> MockGce {
        crate::cloud_fixtures::gce().await
    }

    fn gce_conf(dir: &Path, gce: &MockGce) -> PathBuf {
        crate::cloud_fixtures::write_gce_conf(dir, gce.project(), gce.url())
    }

    fn owned(gce: &MockGce) -> Vec<String> {
        OWNED_COLLECTIONS
            .iter()
            .flat_map(|c| gce.names(c).into_iter().map(move |n| format!("{c}/{n}")))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_create_resync_delete() {
        let gce = mock().await;
        let dir = tempfile::tempdir().unwrap();
        let config = gce_conf(dir.path(), &gce);
        let state = dir.path().join("state.json");
        let args = args("gcp", &fixture("gcp.yaml"), Some(&config), &state);

        let first = reconcile(vec![], args.clone()).await;
        assert_eq!(first.code, 0, "{first:?}");
        let ip = first.external_ip("web");
        assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{first:?}");
        assert_eq!(gce.names("forwardingRules").len(), 1);

        let mark = gce.journal_len();
        let second = reconcile(vec![], args.clone()).await;
        assert_eq!(second.code, 0, "{second:?}");
        assert_eq!(second.external_ip("web"), ip);
        let mutations: Vec<String> = gce
            .mutations_since(mark)
            .iter()
            .map(JournalEntry::short)
            .collect();
        assert_eq!(mutations, Vec::<String>::new(), "the second run mutated");

        let mut delete = args;
        delete.push("--delete".into());
        let deleted = reconcile(vec![], delete).await;
        assert_eq!(deleted.code, 0, "{deleted:?}");
        assert_eq!(owned(&gce), Vec::<String>::new(), "left behind");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_bad_annotation_exits_1() {
        let gce = mock().await;
        let dir = tempfile::tempdir().unwrap();
        let config = gce_conf(dir.path(), &gce);
        // (An unknown load-balancer-type only warns: upstream builds an external LB then.)
        let key = "cloud.google.com/network-tier";
        let manifest = bad_service(dir.path(), key, "Gold");
        let state = dir.path().join("state.json");
        let run = reconcile(vec![], args("gcp", &manifest, Some(&config), &state)).await;
        assert_rejected(&run, key);
        assert_eq!(owned(&gce), Vec::<String>::new(), "nothing built");
    }
}

#[cfg(feature = "azure")]
mod azure {
    use super::*;
    use kube_lb_mock_azure::MockArm;

    async fn mock() -> MockArm {
        crate::cloud_fixtures::arm().await
    }

    fn azure_json(dir: &Path, arm: &MockArm) -> PathBuf {
        crate::cloud_fixtures::write_azure_json(dir, &arm.url(), &arm.url())
    }

    fn mutations_since(arm: &MockArm, mark: usize) -> Vec<String> {
        arm.journal()
            .iter()
            .skip(mark)
            .filter(|e| e.is_mutation())
            .map(|e| format!("{} {}", e.method, e.path))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_create_resync_delete() {
        let arm = mock().await;
        let dir = tempfile::tempdir().unwrap();
        let config = azure_json(dir.path(), &arm);
        let state = dir.path().join("state.json");
        let args = args("azure", &fixture("azure.yaml"), Some(&config), &state);

        let first = reconcile(vec![], args.clone()).await;
        assert_eq!(first.code, 0, "{first:?}");
        let ip = first.external_ip("web");
        assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{first:?}");
        assert_eq!(arm.load_balancers().len(), 1);
        assert_eq!(arm.public_ips().len(), 1);

        let mark = arm.journal().len();
        let second = reconcile(vec![], args.clone()).await;
        assert_eq!(second.code, 0, "{second:?}");
        assert_eq!(second.external_ip("web"), ip);
        assert_eq!(
            mutations_since(&arm, mark),
            Vec::<String>::new(),
            "the second run mutated"
        );

        let mut delete = args;
        delete.push("--delete".into());
        let deleted = reconcile(vec![], delete).await;
        assert_eq!(deleted.code, 0, "{deleted:?}");
        assert_eq!(arm.load_balancers(), Vec::<serde_json::Value>::new());
        assert_eq!(arm.public_ips(), Vec::<serde_json::Value>::new());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_bad_annotation_exits_1() {
        let arm = mock().await;
        let dir = tempfile::tempdir().unwrap();
        let config = azure_json(dir.path(), &arm);
        let key = "service.beta.kubernetes.io/azure-load-balancer-health-probe-interval";
        let manifest = bad_service(dir.path(), key, "often");
        let state = dir.path().join("state.json");
        let run = reconcile(vec![], args("azure", &manifest, Some(&config), &state)).await;
        assert_rejected(&run, key);
        assert!(arm.load_balancers().is_empty(), "nothing built");
    }
}

#[cfg(feature = "aws")]
mod aws {
    use super::*;
    use kube_lb_mock_aws::{MotoServer, xml_values};

    use crate::cloud_fixtures::{
        WEB_SERVICE_YAML, aws_env, aws_node_docs, elb_security_groups, moto,
    };

    fn env(moto: &MotoServer) -> Vec<(String, String)> {
        aws_env(&moto.endpoint())
    }

    /// Nodes carrying the moto instances' provider IDs, plus the `web` Service.
    fn manifest(dir: &Path, instances: &[String]) -> PathBuf {
        let mut docs = aws_node_docs(instances);
        docs.push(WEB_SERVICE_YAML.to_string());
        let path = dir.join("cluster.yaml");
        std::fs::write(&path, docs.join("---\n")).unwrap();
        path
    }

    /// The Classic ELB names in moto, read over the Query API.
    async fn load_balancers(moto: &MotoServer) -> Vec<String> {
        let body = reqwest::Client::new()
            .post(moto.endpoint())
            .header("content-type", "application/x-www-form-urlencoded")
            .header(
                "authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/\
                 elasticloadbalancing/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body("Action=DescribeLoadBalancers&Version=2012-06-01")
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            body.contains("DescribeLoadBalancersResponse"),
            "unexpected answer: {body}"
        );
        xml_values(&body, "LoadBalancerName")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_create_resync_delete() {
        let moto = moto().await;
        let network = moto.cluster_network("kubernetes", 2).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let manifest = manifest(dir.path(), &network.instances);
        let state = dir.path().join("state.json");
        let args = args("aws", &manifest, None, &state);

        let first = reconcile(env(&moto), args.clone()).await;
        assert_eq!(first.code, 0, "{first:?}");
        let hostname = first.external_ip("web");
        assert!(hostname.ends_with(".amazonaws.com"), "{first:?}");
        assert_eq!(load_balancers(&moto).await.len(), 1);

        let second = reconcile(env(&moto), args.clone()).await;
        assert_eq!(second.code, 0, "{second:?}");
        assert_eq!(second.external_ip("web"), hostname);
        assert_eq!(
            load_balancers(&moto).await.len(),
            1,
            "the second run made another load balancer"
        );

        let mut delete = args;
        delete.push("--delete".into());
        let deleted = reconcile(env(&moto), delete).await;
        assert_eq!(deleted.code, 0, "{deleted:?}");
        assert_eq!(load_balancers(&moto).await, Vec::<String>::new());
        assert_eq!(
            elb_security_groups(&moto).await,
            Vec::<String>::new(),
            "the CLB security group is left behind"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconcile_bad_annotation_exits_1() {
        let moto = moto().await;
        let dir = tempfile::tempdir().unwrap();
        let key = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
        let manifest = bad_service(dir.path(), key, "often");
        let state = dir.path().join("state.json");
        let run = reconcile(env(&moto), args("aws", &manifest, None, &state)).await;
        assert_rejected(&run, key);
        assert_eq!(load_balancers(&moto).await, Vec::<String>::new());
    }
}

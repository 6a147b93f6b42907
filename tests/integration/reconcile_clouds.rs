//! `kube-lb reconcile --cloud {aws,gcp,azure}` as a user runs it, against a mock started by
//! each test: the first run prints an address, a second run with the same state file changes
//! nothing in the cloud, `--delete` leaves nothing owned, and a bad annotation exits 1 with
//! its error text.
//!
//! And one judgement per cloud ([`judgement`]): every Service of `tests/fixtures` goes through
//! `kube-lb lint --cloud X` and `kube-lb reconcile --cloud X` against X's mock (and `local`),
//! and the two must agree Service by Service: lint ok ⇔ an address, a lint error ⇔ a user
//! error, skipped ⇔ left alone; the few Services whose verdict depends on what exists in the
//! cloud account are listed per cloud, each with why.
#![cfg(any(
    feature = "aws",
    feature = "gcp",
    feature = "azure",
    feature = "openstack",
    feature = "tencent",
    feature = "baidu"
))]
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

/// One judgement per cloud: `lint` and `reconcile` on every Service of `tests/fixtures`.
mod judgement {
    use std::collections::BTreeMap;

    use serde_json::Value;

    use super::*;

    /// Every fixture file (`tests/fixtures/**.yaml`), relative to the crate, sorted as `-f DIR`
    /// sorts them; `broken.yaml` is left out: it is not YAML, and a file that cannot be read
    /// fails a whole `reconcile` run (lint's exit 2).
    fn fixture_files() -> Vec<String> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
                    out.push(path);
                }
            }
        }
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        walk(&root.join("tests/fixtures"), &mut files);
        files.sort();
        files
            .into_iter()
            .filter(|f| f.file_name().is_none_or(|n| n != "broken.yaml"))
            .map(|f| f.display().to_string())
            .collect()
    }

    /// One Service's verdict: `ok`, `error` or `skipped`, and the text behind it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Verdict {
        kind: &'static str,
        text: String,
    }

    /// Lint's verdict per `namespace/name`; a later object of the same name replaces an earlier
    /// one, as a later manifest does in the API server.
    fn lint_verdicts(cloud: &str, files: &[String], extra: &[&str]) -> BTreeMap<String, Verdict> {
        let mut cmd = Command::cargo_bin("kube-lb").unwrap();
        cmd.env_remove("KUBE_LB_CLOUD")
            .env_remove("KUBE_LB_LOCAL_POOL")
            .env_remove("KUBE_LB_LOAD_BALANCER_CLASS")
            .env_remove("KUBE_LB_DEFAULT_CLASS")
            .args(["lint", "--cloud", cloud, "-o", "json"])
            .args(extra);
        for file in files {
            cmd.args(["-f", file]);
        }
        let out = cmd.output().unwrap();
        let reports: Vec<Value> = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        reports
            .iter()
            .filter_map(|r| {
                let object = r["object"].as_str()?.strip_prefix("Service ")?.to_owned();
                let texts = |field: &str| {
                    r[field]
                        .as_array()
                        .map(|list| {
                            list.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join("; ")
                        })
                        .unwrap_or_default()
                };
                let verdict = match r["status"].as_str()? {
                    "ok" => Verdict {
                        kind: "ok",
                        text: texts("warnings"),
                    },
                    "invalid" => Verdict {
                        kind: "error",
                        text: texts("errors"),
                    },
                    _ => Verdict {
                        kind: "skipped",
                        text: r["reason"].as_str().unwrap_or_default().to_owned(),
                    },
                };
                Some((object, verdict))
            })
            .collect()
    }

    /// Reconcile's verdict per `namespace/name`: an address is `ok`, a user error `error`, a
    /// Service the controller leaves alone `skipped`; anything else (still pending when the
    /// run timed out) is kept as its status.
    async fn reconcile_verdicts(
        env: Vec<(String, String)>,
        mut args: Vec<String>,
    ) -> BTreeMap<String, Verdict> {
        args.extend(["-o".to_string(), "json".to_string()]);
        // Exit 2 (a timeout) still prints every row: the pending ones show as disagreements.
        let run = reconcile(env, args).await;
        let rows: Vec<Value> =
            serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"));
        rows.iter()
            .map(|r| {
                let name = format!(
                    "{}/{}",
                    r["namespace"].as_str().unwrap_or_default(),
                    r["name"].as_str().unwrap_or_default()
                );
                let kind = match r["status"].as_str().unwrap_or_default() {
                    "Ready" => "ok",
                    "Error" => "error",
                    "-" | "External" => "skipped",
                    _ => "pending",
                };
                let text = r["event"].as_str().unwrap_or_default().to_owned();
                (name, Verdict { kind, text })
            })
            .collect()
    }

    /// Lint and reconcile agree on every Service but the `expected` ones — Services whose
    /// verdict on this cloud depends on what exists in the cloud account, which lint cannot
    /// see — and every Service lint judged was reconciled.
    fn assert_agree(
        cloud: &str,
        lint: &BTreeMap<String, Verdict>,
        reconciled: &BTreeMap<String, Verdict>,
        expected: &[(&str, &str)],
    ) {
        let mut disagreements = BTreeMap::new();
        for (name, verdict) in lint {
            let Some(other) = reconciled.get(name) else {
                disagreements.insert(name.clone(), format!("lint {verdict:?}, not reconciled"));
                continue;
            };
            if other.kind != verdict.kind {
                disagreements.insert(
                    name.clone(),
                    format!("lint {verdict:?}, reconcile {other:?}"),
                );
            }
        }
        let found: Vec<&String> = disagreements.keys().collect();
        let wanted: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            found, wanted,
            "{cloud}: lint and reconcile disagree:\n{disagreements:#?}"
        );
        assert_eq!(
            reconciled.keys().collect::<Vec<_>>(),
            lint.keys().collect::<Vec<_>>(),
            "{cloud}: the same Services"
        );
    }

    /// The same words: a Service both refuse is refused for the same reason (lint may list
    /// more errors than the controller's first; the controller's event names one of them).
    fn assert_same_words(
        lint: &BTreeMap<String, Verdict>,
        reconciled: &BTreeMap<String, Verdict>,
        names: &[&str],
    ) {
        for name in names {
            let (Some(l), Some(r)) = (lint.get(*name), reconciled.get(*name)) else {
                panic!("{name}: not judged by both");
            };
            assert_eq!((l.kind, r.kind), ("error", "error"), "{name}");
            let first = l.text.split("; ").next().unwrap_or_default();
            assert!(
                r.text.contains(first) || l.text.contains(&r.text),
                "{name}: lint said {:?}, reconcile {:?}",
                l.text,
                r.text
            );
        }
    }

    /// The fixture Services each cloud must refuse in lint's words.
    const REFUSED_EVERYWHERE: &[&str] = &[
        "judge-clouds/topology-trailing-space",
        "judge/topology-wildcard-first",
    ];

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_lint_and_reconcile_agree_on_every_fixture() {
        let files = fixture_files();
        let lint = lint_verdicts("local", &files, &[]);
        let dir = tempfile::tempdir().unwrap();
        let mut args = Vec::new();
        for file in &files {
            args.extend(["-f".to_string(), file.clone()]);
        }
        args.extend(["--cloud", "local", "--state-file"].map(String::from));
        args.push(dir.path().join("state.json").display().to_string());
        let reconciled = reconcile_verdicts(vec![], args).await;
        assert_agree("local", &lint, &reconciled, &[]);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
        assert_same_words(&lint, &reconciled, &["judge-clouds/lb-ip-outside-pool"]);
        assert_eq!(lint["judge-clouds/other-class"].kind, "skipped");
        assert!(
            lint["judge-clouds/other-class"]
                .text
                .contains("\"example.com/other-lb\""),
            "{:?}",
            lint["judge-clouds/other-class"]
        );
    }

    /// `-f` for every fixture plus `extra` (a cloud's Nodes), then the cloud flags.
    fn cloud_args(
        extra: Option<&Path>,
        cloud: &[&str],
        config: Option<&Path>,
        state: &Path,
    ) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(extra) = extra {
            args.extend(["-f".to_string(), extra.display().to_string()]);
        }
        for file in fixture_files() {
            args.extend(["-f".to_string(), file]);
        }
        args.extend(cloud.iter().map(|s| s.to_string()));
        if let Some(config) = config {
            args.extend(["--cloud-config".to_string(), config.display().to_string()]);
        }
        args.extend(["--state-file".to_string(), state.display().to_string()]);
        args
    }

    /// The API server refuses a headless LoadBalancer Service; lint says so in its words.
    fn assert_headless_refused(
        lint: &BTreeMap<String, Verdict>,
        reconciled: &BTreeMap<String, Verdict>,
    ) {
        let words = "may not be set to 'None' for LoadBalancer services";
        let name = "judge-clouds/headless";
        assert_eq!(
            lint[name].text,
            format!("spec.clusterIPs[0] = \"None\": {words}")
        );
        assert!(
            reconciled[name].text.contains(&format!(
                "spec.clusterIPs[0]: Invalid value: \"None\": {words}"
            )),
            "{:?}",
            reconciled[name]
        );
    }

    #[cfg(feature = "gcp")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gcp_lint_and_reconcile_agree_on_every_fixture() {
        let gce = crate::cloud_fixtures::gce().await;
        let dir = tempfile::tempdir().unwrap();
        let config = crate::cloud_fixtures::write_gce_conf(dir.path(), gce.project(), gce.url());
        // The Nodes are those of tests/fixtures/clouds/gcp.yaml.
        let args = cloud_args(
            None,
            &["--cloud", "gcp"],
            Some(&config),
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("gcp", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(vec![], args).await;
        assert_agree("gcp", &lint, &reconciled, GCP_EXPECTED);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
    }

    /// Where GCP's verdict depends on the project's state: a requested address must be a
    /// reserved static address of the project.
    #[cfg(feature = "gcp")]
    const GCP_EXPECTED: &[(&str, &str)] = &[(
        "judge-clouds/lb-ip-outside-pool",
        "a static address lint cannot see",
    )];

    #[cfg(feature = "azure")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn azure_lint_and_reconcile_agree_on_every_fixture() {
        let arm = crate::cloud_fixtures::arm().await;
        let dir = tempfile::tempdir().unwrap();
        let config = crate::cloud_fixtures::write_azure_json(dir.path(), &arm.url(), &arm.url());
        // The Nodes are those of tests/fixtures/clouds/azure.yaml.
        let args = cloud_args(
            None,
            &["--cloud", "azure"],
            Some(&config),
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("azure", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(vec![], args).await;
        assert_agree("azure", &lint, &reconciled, AZURE_EXPECTED);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
    }

    #[cfg(feature = "aws")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aws_lint_and_reconcile_agree_on_every_fixture() {
        use crate::cloud_fixtures::{aws_env, aws_node_docs, moto};
        let moto = moto().await;
        let network = moto.cluster_network("kubernetes", 2).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let nodes = dir.path().join("nodes.yaml");
        std::fs::write(&nodes, aws_node_docs(&network.instances).join("---\n")).unwrap();
        let args = cloud_args(
            Some(&nodes),
            &["--cloud", "aws"],
            None,
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("aws", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(aws_env(&moto.endpoint()), args).await;
        assert_agree("aws", &lint, &reconciled, &[]);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
    }

    #[cfg(feature = "openstack")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn openstack_lint_and_reconcile_agree_on_every_fixture() {
        use crate::provider_scenarios::scenarios::openstack::support::cloud_conf;
        let cloud = kube_lb_mock_openstack::MockOpenStack::builder()
            .start()
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cloud.conf");
        std::fs::write(&config, cloud_conf(&cloud, "")).unwrap();
        // OpenStack finds its members by address on the private subnet: no provider ID.
        let nodes = dir.path().join("nodes.yaml");
        std::fs::write(&nodes, node_docs("", "10.0.0.1")).unwrap();
        let args = cloud_args(
            Some(&nodes),
            &["--cloud", "openstack"],
            Some(&config),
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("openstack", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(vec![], args).await;
        assert_agree("openstack", &lint, &reconciled, &[]);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
    }

    /// Where Azure's verdict depends on the subscription's state: a requested public address
    /// must be a static public IP of the resource group.
    #[cfg(feature = "azure")]
    const AZURE_EXPECTED: &[(&str, &str)] = &[(
        "judge-clouds/lb-ip-outside-pool",
        "a public IP resource lint cannot see",
    )];

    #[cfg(feature = "tencent")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tencent_lint_and_reconcile_agree_on_every_fixture() {
        use crate::provider_scenarios::scenarios::tencent::support::{CLUSTER, cloud_config};
        let cloud = kube_lb_mock_tencent::MockTencent::builder()
            .start()
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tencent.json");
        std::fs::write(&config, cloud_config(&cloud)).unwrap();
        let nodes = dir.path().join("nodes.yaml");
        std::fs::write(
            &nodes,
            node_docs("qcloud:///800002/ins-0000000", "10.0.0.1"),
        )
        .unwrap();
        let args = cloud_args(
            Some(&nodes),
            &["--cloud", "tencent", "--cluster-name", CLUSTER],
            Some(&config),
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("tencent", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(vec![], args).await;
        assert_agree("tencent", &lint, &reconciled, &[]);
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
        assert_same_words(
            &lint,
            &reconciled,
            &[
                "judge-clouds/sctp",
                "judge-clouds/no-node-ports",
                "judge-clouds/tencent-classic",
                "judge-clouds/tencent-bandwidth-2048",
            ],
        );
    }

    #[cfg(feature = "baidu")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn baidu_lint_and_reconcile_agree_on_every_fixture() {
        use crate::provider_scenarios::scenarios::baidu::support::cloud_config;
        let cloud = kube_lb_mock_baidu::MockBaidu::builder()
            .start()
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("baidu.json");
        std::fs::write(&config, cloud_config(&cloud)).unwrap();
        let nodes = dir.path().join("nodes.yaml");
        std::fs::write(&nodes, node_docs("cce://i-node000", "192.168.0.10")).unwrap();
        let args = cloud_args(
            Some(&nodes),
            &["--cloud", "baidu"],
            Some(&config),
            &dir.path().join("state.json"),
        );
        let lint = lint_verdicts("baidu", &fixture_files(), &[]);
        let reconciled = reconcile_verdicts(vec![], args).await;
        // Baidu binds `spec.loadBalancerIP` as an existing EIP of the account: whether it
        // exists is the cloud's state, not the manifest's.
        assert_agree(
            "baidu",
            &lint,
            &reconciled,
            &[("judge-clouds/lb-ip-outside-pool", "an EIP lint cannot see")],
        );
        assert_same_words(&lint, &reconciled, REFUSED_EVERYWHERE);
        assert_headless_refused(&lint, &reconciled);
        assert_same_words(
            &lint,
            &reconciled,
            &[
                "judge-clouds/sctp",
                "judge-clouds/no-node-ports",
                "judge-clouds/dns-one-port",
            ],
        );
    }

    /// Two Ready Nodes whose provider IDs are `<prefix>1` and `<prefix>2`, at `<ip>1`, `<ip>2`.
    /// (An empty prefix leaves `spec.providerID` unset.)
    fn node_docs(provider_id_prefix: &str, ip_prefix: &str) -> String {
        (1..=2)
            .map(|i| {
                let spec = if provider_id_prefix.is_empty() {
                    String::new()
                } else {
                    format!("spec: {{providerID: '{provider_id_prefix}{i}'}}\n")
                };
                format!(
                    "apiVersion: v1\nkind: Node\nmetadata: {{name: judge-node-{i}}}\n{spec}\
                     status:\n  conditions: [{{type: Ready, status: 'True'}}]\n  \
                     addresses: [{{type: InternalIP, address: {ip_prefix}{i}}}]\n"
                )
            })
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

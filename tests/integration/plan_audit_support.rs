//! What the `plan_audit_<cloud>` tests share: running the real `kube-lb` binary against a cloud
//! mock (with a manifest file or a kubeconfig, from a temp dir, off the runtime's threads since
//! the mocks and the API server answer on them), reading plan and audit JSON reports, and
//! listing what a mock's journal records as mutating since a mark.
#![cfg(any(feature = "openstack", feature = "tencent", feature = "baidu"))]
// Each cloud's tests use part of this; with only some clouds built the rest goes unused.
#![cfg_attr(
    not(all(feature = "openstack", feature = "tencent", feature = "baidu")),
    allow(dead_code)
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// How the binary is pointed at one cloud's mock.
pub struct CloudFlags {
    /// `--cloud <name>` and any flags that follow it, up to `--cloud-config`.
    pub flags: &'static [&'static str],
    /// The cloud-config file's name in the test's temp dir.
    pub config_file: &'static str,
    /// Variables (besides `KUBE_LB_CLOUD`, `KUBE_LB_CLUSTER_NAME`) the binary must not inherit
    /// from the developer's shell, e.g. real credentials.
    pub env_remove: &'static [&'static str],
}

/// Where the binary reads the cluster from.
pub enum ClusterSource {
    /// Manifests, written to `manifests.yaml` in the temp dir and passed with `-f`.
    Manifest(String),
    /// The API server of `kubeconfig` in the temp dir.
    Kubeconfig,
}

/// Runs the binary with `args` against the mock configured in `dir`: (exit code, stdout,
/// stderr). Blocking.
pub fn kube_lb(
    cloud: &CloudFlags,
    dir: &Path,
    source: &ClusterSource,
    args: &[String],
) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
    command
        .env_remove("KUBE_LB_CLOUD")
        .env_remove("KUBE_LB_CLUSTER_NAME");
    for name in cloud.env_remove {
        command.env_remove(name);
    }
    command
        .args(["--log", "warn"])
        .args(args)
        .args(cloud.flags)
        .arg("--cloud-config")
        .arg(dir.join(cloud.config_file));
    match source {
        ClusterSource::Manifest(manifest) => {
            let manifests = dir.join("manifests.yaml");
            std::fs::write(&manifests, manifest).unwrap();
            command.arg("-f").arg(manifests);
        }
        ClusterSource::Kubeconfig => {
            command.arg("--kubeconfig").arg(dir.join("kubeconfig"));
        }
    }
    let out = command.stdin(Stdio::null()).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// [`kube_lb`] off the runtime's threads (the mock, and the API server if any, serve on them).
pub async fn run(
    cloud: &'static CloudFlags,
    dir: PathBuf,
    source: ClusterSource,
    args: Vec<String>,
) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || kube_lb(cloud, &dir, &source, &args))
        .await
        .unwrap()
}

/// Owned copies of borrowed arguments, for [`run`].
pub fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.to_string()).collect()
}

/// The plan report's one Service, after asserting it is the only one.
pub fn only_service(report: &Value) -> &Value {
    let services = report["services"].as_array().unwrap();
    assert_eq!(services.len(), 1, "{report:#}");
    &services[0]
}

/// The planned changes of the plan report's only Service.
pub fn changes_of_only_service(report: &Value) -> &Vec<Value> {
    only_service(report)["changes"].as_array().unwrap()
}

/// `action kind name (call)` of one planned change.
pub fn change_line(change: &Value) -> String {
    format!(
        "{} {} {} ({})",
        text(change, "action"),
        text(change, "kind"),
        text(change, "name"),
        text(change, "call")
    )
}

/// String field `key` of a JSON object.
pub fn text<'v>(value: &'v Value, key: &str) -> &'v str {
    value[key].as_str().unwrap()
}

/// `(kind, name, service[service_key], reasonCode)` of each leaked resource of an audit
/// report, in report order.
pub fn leaked_resources(
    report: &Value,
    service_key: &str,
) -> Vec<(String, String, String, String)> {
    report["leaked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                text(l, "kind").to_string(),
                text(l, "name").to_string(),
                l["service"][service_key].as_str().unwrap().to_string(),
                text(l, "reasonCode").to_string(),
            )
        })
        .collect()
}

/// A mock journal entry that can say whether it changed the cloud, and what it was.
pub trait MutationRecord {
    /// Whether the call changed the cloud's state.
    fn is_mutation(&self) -> bool;
    /// The call in one line, as the tests compare it.
    fn describe(&self) -> String;
}

#[cfg(feature = "baidu")]
impl MutationRecord for kube_lb_mock_baidu::JournalEntry {
    fn is_mutation(&self) -> bool {
        kube_lb_mock_baidu::JournalEntry::is_mutation(self)
    }
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[cfg(feature = "openstack")]
impl MutationRecord for kube_lb_mock_openstack::JournalEntry {
    fn is_mutation(&self) -> bool {
        kube_lb_mock_openstack::JournalEntry::is_mutation(self)
    }
    fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[cfg(feature = "tencent")]
impl MutationRecord for kube_lb_mock_tencent::JournalEntry {
    fn is_mutation(&self) -> bool {
        kube_lb_mock_tencent::JournalEntry::is_mutation(self)
    }
    fn describe(&self) -> String {
        format!("{} {}", self.action, self.body)
    }
}

/// The mutating calls of `journal` from index `mark` on, described.
pub fn mutations_since<E: MutationRecord>(journal: &[E], mark: usize) -> Vec<String> {
    journal[mark..]
        .iter()
        .filter(|e| e.is_mutation())
        .map(MutationRecord::describe)
        .collect()
}

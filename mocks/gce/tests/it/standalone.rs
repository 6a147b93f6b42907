//! The mock binary runs on its own (for `kube-lb reconcile --cloud gcp` by hand): it prints its
//! URL, writes a `gce.conf` pointing at itself, and serves its instance fixtures.

// Test helpers outside #[test] functions: a failed setup step should panic with its error.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Kills the child process even when an assertion fails.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_prints_its_url_and_writes_a_cloud_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gce.conf");
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_kube-lb-mock-gce"))
            .args([
                "--listen",
                "127.0.0.1:0",
                "--instance",
                "us-central1-b/node-1:node-tag",
            ])
            .arg("--write-config")
            .arg(&config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("GCE_MOCK_URL=")
        .unwrap()
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");

    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains(&format!("api-endpoint = {url}")),
        "{written}"
    );
    assert!(written.contains("project-id = mock-project"), "{written}");

    let instances: serde_json::Value = reqwest::get(format!(
        "{url}/compute/v1/projects/mock-project/zones/us-central1-b/instances"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(instances["items"][0]["name"], "node-1");
    assert_eq!(instances["items"][0]["tags"]["items"][0], "node-tag");
}

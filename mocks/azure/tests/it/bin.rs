//! The `kube-lb-mock-azure` binary prints its URL and writes a usable `azure.json`.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn prints_url_and_writes_config() {
    let dir = std::env::temp_dir().join(format!("kube-lb-mock-azure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config_path = dir.join("azure.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-lb-mock-azure"))
        .args(["--config-out", config_path.to_str().unwrap()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line.trim().to_string();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    assert_eq!(config["resourceManagerEndpoint"], url);
    assert_eq!(config["activeDirectoryEndpoint"], url);
    assert_eq!(config["securityGroupName"], "kube-lb-nsg");
}

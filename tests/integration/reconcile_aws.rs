//! `kube-lb reconcile --cloud aws` against moto's server, as the README shows it: the AWS
//! endpoint and credentials come from the standard environment variables, Nodes carry the
//! instances' provider IDs, a second run with the same state file is a no-op resync, and
//! `--delete` removes every load balancer.
#![cfg(feature = "aws")]
#![allow(clippy::unwrap_used)]

use std::path::Path;

use crate::cloud_fixtures::{WEB_SERVICE_YAML, aws_node_docs, elb_security_groups, moto};
use assert_cmd::Command;
use serde_json::Value;

/// Writes the cluster (one Node per moto instance, Service `default/web`) to `dir`.
fn manifests(dir: &Path, instances: &[String]) -> String {
    let mut docs = aws_node_docs(instances);
    docs.push(WEB_SERVICE_YAML.to_string());
    // Classic ELB only: moto names NLBs like Classic ELBs (`<name>-1.<region>.elb.amazonaws.com`),
    // so on the second run the upstream-compatible type-change check (hostname shape) would
    // reject an NLB Service. The NLB paths are covered in providers/aws/tests/it/nlb.rs.
    let path = dir.join("cluster.yaml");
    std::fs::write(&path, docs.join("---\n")).unwrap();
    path.display().to_string()
}

fn reconcile(endpoint: &str, args: &[&str]) -> (i32, Value) {
    let out = Command::cargo_bin("kube-lb")
        .unwrap()
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .args([
            "--log",
            "warn",
            "reconcile",
            "--cloud",
            "aws",
            "--cluster-name",
            "demo",
        ])
        .args(args)
        .args(["-o", "json", "--timeout", "90s"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr: {stderr}"));
    (out.status.code().unwrap_or(-1), json)
}

fn hostnames(output: &Value) -> Vec<String> {
    let text = output.to_string();
    let mut found: Vec<String> = text
        .split('"')
        .filter(|s| s.ends_with(".amazonaws.com"))
        .map(str::to_string)
        .collect();
    found.sort();
    found.dedup();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn reconcile_cloud_aws_against_moto() {
    let moto = moto().await;
    let network = moto.cluster_network("demo", 2).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = manifests(dir.path(), &network.instances);
    let state = dir.path().join("state.json").display().to_string();
    let endpoint = moto.endpoint();

    let run = {
        let endpoint = endpoint.clone();
        let file = file.clone();
        let state = state.clone();
        move |extra: &'static [&'static str]| {
            let mut args = vec!["-f", file.as_str(), "--state-file", state.as_str()];
            args.extend_from_slice(extra);
            reconcile(&endpoint, &args)
        }
    };
    let (code, first) = tokio::task::spawn_blocking({
        let run = run.clone();
        move || run(&[])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{first}");
    let hosts = hostnames(&first);
    assert_eq!(hosts.len(), 1, "the Classic ELB hostname: {first}");

    // Same state file: same UIDs, same load balancers, same hostnames.
    let (code, second) = tokio::task::spawn_blocking({
        let run = run.clone();
        move || run(&[])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{second}");
    assert_eq!(hostnames(&second), hosts);

    let (code, deleted) = tokio::task::spawn_blocking(move || run(&["--delete"]))
        .await
        .unwrap();
    assert_eq!(code, 0, "{deleted}");
    let groups = elb_security_groups(&moto).await;
    assert!(
        groups.is_empty(),
        "the CLB security group is deleted: {groups:?}"
    );
}

//! `kube-lb controller` as a process against a cluster reached through a kubeconfig, with
//! leader election on: it takes the Lease, gives Services addresses, and stops on SIGTERM.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use controller_support::*;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

#[tokio::test]
async fn controller_subcommand_elects_itself_and_serves_services() {
    let server = server().await;
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args([
            "--log",
            "warn",
            "controller",
            "--cloud",
            "local",
            "--leader-elect",
        ])
        .args([
            "--metrics-addr",
            "127.0.0.1:0",
            "--leader-elect-namespace",
            "default",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    svc_lb("default", "web").create(&client).await;
    let address = wait_address(&client, "default", "web").await;
    assert!(address.starts_with("127.240."), "{address}");
    let lease = Api::<Lease>::namespaced(client.clone(), "default")
        .get("kube-lb-controller")
        .await
        .unwrap();
    let holder = lease.spec.unwrap().holder_identity.unwrap_or_default();
    assert!(!holder.is_empty(), "the lease has a holder");

    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + CEILING;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "controller did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "{exit:?}");
    // On a clean stop the lease is released for the next replica.
    let lease = Api::<Lease>::namespaced(client, "default")
        .get("kube-lb-controller")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity, None);
}

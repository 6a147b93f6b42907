//! Drives 1,000 `type: LoadBalancer` Services through the `local` provider and reports the
//! time until every one has an address and the controller's peak RSS.
//!
//! The API server runs in this process; the controller runs as the real `kube-lb controller`
//! binary, so its VmHWM (from `/proc/<pid>/status`) is the controller's alone.
//!
//! Run: `cargo bench --bench controller_scale` (env `SERVICES`, `CONCURRENCY` override the
//! defaults of 1000 and 4).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube_lb_apiserver::ApiServer;
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let services = env_or("SERVICES", 1000);
    let concurrency = env_or("CONCURRENCY", 4);
    let server = ApiServer::builder().start().await?;
    server.seed(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))?;
    let dir = std::env::temp_dir().join(format!("kube-lb-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig)?;

    let mut controller = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args([
            "--log",
            "warn",
            "controller",
            "--cloud",
            "local",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--concurrency")
        .arg(concurrency.to_string())
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .spawn()?;
    let pid = controller.id();
    let idle_hwm = {
        // Let the controller start its watches before the load arrives.
        tokio::time::sleep(Duration::from_millis(500)).await;
        vm_hwm_kib(pid)
    };

    let start = Instant::now();
    for i in 0..services {
        server.seed(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": format!("svc-{i:04}"), "namespace": "default"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]}
        }))?;
    }
    let created = start.elapsed();

    let api: Api<Service> = Api::namespaced(server.client()?, "default");
    let deadline = Instant::now() + Duration::from_secs(600);
    let addresses = loop {
        let list = api.list(&ListParams::default()).await?;
        let addresses: Vec<String> = list
            .items
            .iter()
            .filter_map(|s| {
                s.status
                    .as_ref()?
                    .load_balancer
                    .as_ref()?
                    .ingress
                    .as_ref()?
                    .first()?
                    .ip
                    .clone()
            })
            .collect();
        if addresses.len() >= services || Instant::now() > deadline {
            break addresses;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let converged = start.elapsed();
    let peak = vm_hwm_kib(pid);
    let distinct: BTreeSet<&String> = addresses.iter().collect();

    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let _ = controller.wait();
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);

    println!(
        "controller_scale: {services} LoadBalancer Services, local provider, concurrency {concurrency}"
    );
    println!(
        "  created in                 {:>8.2} s",
        created.as_secs_f64()
    );
    println!(
        "  all addressed after        {:>8.2} s  ({} of {services}, {} distinct)",
        converged.as_secs_f64(),
        addresses.len(),
        distinct.len()
    );
    println!(
        "  controller VmHWM idle      {:>8} KiB",
        idle_hwm.map_or("?".into(), |v| v.to_string())
    );
    println!(
        "  controller VmHWM peak      {:>8} KiB",
        peak.map_or("?".into(), |v| v.to_string())
    );
    if addresses.len() < services || distinct.len() != addresses.len() {
        return Err("did not converge to distinct addresses".into());
    }
    Ok(())
}

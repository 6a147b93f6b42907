//! The controller with the Baidu provider against the BLB + EIP mock, end to end through the
//! embedded API server: the ids cloud-provider-baiducloud wrote on the Service are written
//! back (merge patch after a successful ensure), a `spec.loadBalancerIP` that is a user's EIP
//! is bound and survives the Service, and one that is not an EIP is a Warning naming it with
//! nothing built.
#![cfg(feature = "baidu")]

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_lb::controller::{ControllerConfig, LoadBalancerController};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::Cloud;
use kube_lb_annotations::keys::baidu as key;
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controller_support::{events_of, eventually, get_svc, svc_lb, wait_address};
use crate::provider_scenarios::scenarios::baidu::support;

/// A Ready CCE node: its BCC instance in `spec.providerID`, as CCE registers it.
fn cce_node(index: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": format!("node-{index}")},
        "spec": {"providerID": format!("cce://i-node{index:04}")},
        "status": {
            "addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", 100 + index)}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

struct Running {
    server: RunningApiServer,
    h: support::Harness,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kube::Error>>,
}

/// The API server with two CCE nodes, the mock, and the controller with the Baidu provider.
async fn start() -> Running {
    let server = ApiServer::builder().start().await.unwrap();
    server.seed(cce_node(1)).unwrap();
    server.seed(cce_node(2)).unwrap();
    let h = support::harness().await;
    let mut config = ControllerConfig::new(Cloud::Baidu);
    config.backoff_base = Duration::from_millis(200);
    config.backoff_max = Duration::from_secs(2);
    config.node_ready_grace = Duration::ZERO;
    let metrics = Arc::new(Metrics::new());
    let controller = LoadBalancerController::new(
        server.client().unwrap(),
        Arc::new(h.provider.clone()),
        config,
        metrics,
    );
    let (_leading, leading_rx) = watch::channel(true);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller.run(leading_rx, shutdown.clone()));
    Running {
        server,
        h,
        shutdown,
        task,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.task).await;
    }
}

fn annotation(service: &k8s_openapi::api::core::v1::Service, key: &str) -> Option<String> {
    service
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blb_id_and_eip_are_written_back_under_upstreams_keys() {
    let r = start().await;
    let client = r.server.client().unwrap();
    svc_lb("default", "web").create(&client).await;
    let address = wait_address(&client, "default", "web").await;

    let blb = r.h.cloud.blbs().remove(0);
    let id = blb["blbId"].as_str().unwrap().to_string();
    assert_eq!(blb["publicIp"], address.as_str());
    let written = eventually("the ids on the Service", || async {
        let svc = get_svc(&client, "default", "web").await?;
        let got = (
            annotation(&svc, key::LOAD_BALANCER_ID)?,
            annotation(&svc, key::CCE_ADD_ID)?,
            annotation(&svc, key::CCE_ADD_EIP)?,
        );
        Some(got)
    })
    .await;
    assert_eq!(written, (id.clone(), id.clone(), address.clone()));

    // Internal from now on: the EIP is gone, so is the annotation naming it; the ids stay.
    let services =
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default");
    let internal = json!({"metadata": {"annotations": {key::INTERNAL_VPC: "true"}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&internal))
        .await
        .unwrap();
    let vpc_address = eventually("the EIP annotation removed", || async {
        let svc = get_svc(&client, "default", "web").await?;
        let shown = svc
            .status
            .clone()?
            .load_balancer?
            .ingress?
            .first()?
            .ip
            .clone()?;
        (shown != address && annotation(&svc, key::CCE_ADD_EIP).is_none()).then(|| {
            assert_eq!(annotation(&svc, key::LOAD_BALANCER_ID), Some(id.clone()));
            shown
        })
    })
    .await;
    assert_eq!(r.h.cloud.blbs()[0]["address"], vpc_address.as_str());

    // Deleting the Service removes the BLB and the EIP kube-lb created.
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service gone", || async {
        get_svc(&client, "default", "web")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(r.h.cloud.blbs().is_empty(), "{:?}", r.h.cloud.blbs());
    assert!(r.h.cloud.eips().is_empty(), "{:?}", r.h.cloud.eips());
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_balancer_ip_binds_the_users_eip_or_warns_when_it_is_not_one() {
    let r = start().await;
    let client = r.server.client().unwrap();
    svc_lb("default", "typo")
        .lb_ip("106.12.250.250")
        .create(&client)
        .await;
    let notes = eventually("a Warning naming the address", || async {
        let events = events_of(&client, "default", "typo").await;
        let notes: Vec<String> = events.into_values().flatten().collect();
        notes
            .iter()
            .any(|n| n.contains("106.12.250.250") && n.contains("not an EIP"))
            .then_some(notes)
    })
    .await;
    assert!(!notes.is_empty());
    assert!(r.h.cloud.blbs().is_empty(), "no half-built BLB");
    assert!(r.h.cloud.eips().is_empty());

    let ip = r.h.cloud.seed_eip("reserved");
    svc_lb("default", "pinned").lb_ip(&ip).create(&client).await;
    assert_eq!(wait_address(&client, "default", "pinned").await, ip);
    assert_eq!(r.h.cloud.eips().len(), 1, "the user's EIP, none created");
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default")
        .delete("pinned", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the pinned Service gone", || async {
        get_svc(&client, "default", "pinned")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    let eips = r.h.cloud.eips();
    assert_eq!(eips.len(), 1, "the user's EIP outlives the Service");
    assert!(
        eips[0]["instanceId"].is_null(),
        "and is unbound: {:?}",
        eips[0]
    );
    r.stop().await;
}

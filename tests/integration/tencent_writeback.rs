//! The Tencent provider through the real controller and the embedded API server, against the
//! CLB mock: the CLB id written back as TKE writes it (`service.kubernetes.io/loadbalance-id`),
//! create-only extensiveParameters / listenerParameters changed later reported (an Event and
//! the Service condition) instead of silently ignored, and a Service leaving a user's CLB
//! (`tke-existed-lbid` removed) taking its listeners with it.
#![cfg(feature = "tencent")]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube_lb::controller::{ControllerConfig, LoadBalancerController};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::Cloud;
use kube_lb_apiserver::RunningApiServer;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller_support::{events_of, eventually, get_svc, server, svc_lb};
use crate::provider_scenarios::scenarios::tencent::support;

const LOADBALANCE_ID: &str = "service.kubernetes.io/loadbalance-id";
const EXTENSIVE: &str = "service.kubernetes.io/service.extensiveParameters";
const LISTENER: &str = "service.kubernetes.io/service.listenerParameters";
const EXISTED: &str = "service.kubernetes.io/tke-existed-lbid";
const CONDITION: &str = "kube-lb.io/LoadBalancerReady";

/// The API server, the mock and a controller running the Tencent provider against it.
struct Running {
    server: RunningApiServer,
    cloud: kube_lb_mock_tencent::MockTencent,
    client: Client,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), kube::Error>>,
    _leading: tokio::sync::watch::Sender<bool>,
}

impl Running {
    async fn start() -> Running {
        let server = server().await;
        let h = support::harness().await;
        let client = server.client().unwrap();
        let mut config = ControllerConfig::new(Cloud::Tencent);
        config.backoff_base = Duration::from_millis(200);
        config.backoff_max = Duration::from_secs(2);
        config.identity = "tencent-writeback-test".into();
        let controller = LoadBalancerController::new(
            client.clone(),
            Arc::new(h.provider),
            config,
            Arc::new(Metrics::new()),
        );
        let (leading_tx, leading) = tokio::sync::watch::channel(true);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(leading, shutdown.clone()));
        Running {
            server,
            cloud: h.cloud,
            client,
            shutdown,
            task,
            _leading: leading_tx,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(20), self.task).await;
        drop(self.server);
    }

    async fn service(&self, name: &str) -> Service {
        get_svc(&self.client, "default", name).await.unwrap()
    }

    async fn annotate(&self, name: &str, annotations: Value) {
        Api::<Service>::namespaced(self.client.clone(), "default")
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
            )
            .await
            .unwrap();
    }

    /// Waits until `name` carries annotation `key`, returning its value.
    async fn annotation(&self, name: &str, key: &str) -> String {
        eventually(&format!("{key} on default/{name}"), || async {
            self.service(name)
                .await
                .metadata
                .annotations
                .and_then(|a| a.get(key).cloned())
        })
        .await
    }

    /// Waits until `name`'s condition message satisfies `want`, returning it.
    async fn condition_message(&self, name: &str, want: impl Fn(&str) -> bool) -> String {
        eventually(&format!("the condition of default/{name}"), || async {
            self.service(name)
                .await
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == CONDITION)
                .map(|c| c.message)
                .filter(|m| want(m))
        })
        .await
    }
}

/// The CLB ids tagged for the Service's UID.
fn clbs_of(cloud: &kube_lb_mock_tencent::MockTencent, service: &Service) -> Vec<String> {
    let uid = service.metadata.uid.clone().unwrap();
    support::clbs_for(cloud, &uid)
        .iter()
        .map(|lb| lb["LoadBalancerId"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clb_id_is_written_back_and_late_create_only_changes_are_reported_not_applied() {
    let r = Running::start().await;
    svc_lb("default", "web")
        .annotate(EXTENSIVE, r#"{"VipIsp":"CTCC"}"#)
        .annotate(LISTENER, r#"{"Scheduler":"LEAST_CONN"}"#)
        .create(&r.client)
        .await;
    let id = r.annotation("web", LOADBALANCE_ID).await;
    let service = r.service("web").await;
    assert_eq!(
        clbs_of(&r.cloud, &service),
        vec![id.clone()],
        "TKE's annotation names the CLB"
    );
    let ready = r.condition_message("web", |_| true).await;
    assert!(!ready.contains("create-only"), "{ready}");

    // Both create-only annotations change after the CLB and its listener exist.
    let mark = r.cloud.journal().len();
    r.annotate(
        "web",
        json!({EXTENSIVE: r#"{"VipIsp":"CMCC"}"#, LISTENER: r#"{"Scheduler":"WRR"}"#}),
    )
    .await;
    let message = r
        .condition_message("web", |m| m.contains(EXTENSIVE) && m.contains(LISTENER))
        .await;
    assert!(
        message.contains("create-only") && message.contains(r#"{"VipIsp":"CTCC"}"#),
        "the condition says what the CLB was created with: {message}"
    );
    let warnings = eventually("an AnnotationWarning event naming both keys", || async {
        events_of(&r.client, "default", "web")
            .await
            .remove("AnnotationWarning")
            .filter(|notes| {
                notes
                    .iter()
                    .any(|n| n.contains(EXTENSIVE) && n.contains(LISTENER))
            })
    })
    .await;
    assert!(
        warnings.iter().any(|n| n.contains("create-only")),
        "{warnings:?}"
    );
    // Nothing was recreated or modified to "apply" them.
    let clb = r
        .cloud
        .load_balancers()
        .into_iter()
        .find(|lb| lb["LoadBalancerId"] == id.as_str())
        .unwrap();
    assert_eq!(clb["VipIsp"], "CTCC");
    assert_eq!(r.cloud.listeners(&id)[0]["Scheduler"], "LEAST_CONN");
    let mutations: Vec<String> = r.cloud.journal()[mark..]
        .iter()
        .filter(|e| e.is_mutation())
        .map(|e| e.action.clone())
        .collect();
    assert_eq!(mutations, Vec::<String>::new());
    // The record keeps what the CLB was created with, so the report stays until resolved.
    assert_eq!(
        r.annotation(
            "web",
            "kube-lb.io/tencent-created-with-extensive-parameters"
        )
        .await,
        r#"{"VipIsp":"CTCC"}"#
    );

    // Changed back: nothing to report any more.
    r.annotate(
        "web",
        json!({EXTENSIVE: r#"{"VipIsp":"CTCC"}"#, LISTENER: r#"{"Scheduler":"LEAST_CONN"}"#}),
    )
    .await;
    r.condition_message("web", |m| !m.contains("create-only"))
        .await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_a_users_clb_takes_only_the_services_listeners_with_it() {
    let r = Running::start().await;
    let user = r.cloud.seed_load_balancer(
        "users-clb",
        &[("team", "edge")],
        &[("console-listener", "TCP", 8443)],
    );
    svc_lb("default", "web")
        .annotate(EXISTED, &user)
        .create(&r.client)
        .await;
    let recorded = r.annotation("web", LOADBALANCE_ID).await;
    assert_eq!(recorded, user);
    eventually("the Service's listener on the user's CLB", || async {
        (r.cloud.listeners(&user).len() == 2).then_some(())
    })
    .await;

    // Back to an auto-created CLB: the annotation moves to it and the user's CLB is left as
    // the user made it.
    r.annotate("web", json!({EXISTED: null})).await;
    let moved = eventually("loadbalance-id naming the new CLB", || async {
        let service = r.service("web").await;
        let id = service.metadata.annotations?.get(LOADBALANCE_ID)?.clone();
        (id != user).then_some(id)
    })
    .await;
    let service = r.service("web").await;
    assert_eq!(clbs_of(&r.cloud, &service), vec![moved.clone()]);
    let left: Vec<String> = r
        .cloud
        .listeners(&user)
        .iter()
        .map(|l| l["ListenerName"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        left,
        vec!["console-listener"],
        "only the Service's listener went"
    );
    assert!(
        r.cloud
            .load_balancers()
            .iter()
            .any(|lb| lb["LoadBalancerId"] == user.as_str()),
        "the user's CLB stays"
    );
    assert_eq!(r.cloud.listeners(&moved).len(), 1);
    r.stop().await;
}

//! Error classes seen from outside, against the embedded API server over real HTTP: a Warning
//! never exceeds the API's note limit, an environment error is retried (and reported once per
//! distinct text) until its cause goes away, and a load balancer another controller implements
//! is left alone quietly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube_lb::controller::{LoadBalancerController, Outcome, ServiceName};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::{
    BackendNode, CallCounter, LoadBalancerProvider, LoadBalancerStatus, ProviderError,
};
use kube_lb_provider_local::LocalProvider;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controller_support::*;

/// The API server's limit on an Event's note, in bytes.
const NOTE_LIMIT: usize = 1024;

fn name(n: &str) -> ServiceName {
    ServiceName {
        namespace: "default".into(),
        name: n.into(),
    }
}

/// The notes of `reason` events about `default/service`, once there is at least one.
async fn notes(client: &kube::Client, service: &str, reason: &str) -> Vec<String> {
    eventually(&format!("a {reason} event on {service}"), || async {
        events_of(client, "default", service)
            .await
            .get(reason)
            .filter(|n| !n.is_empty())
            .cloned()
    })
    .await
}

#[tokio::test]
async fn a_service_with_sixty_annotation_errors_gets_a_warning_within_the_note_limit() {
    let (_server, client, running) = server_and_controller().await;
    // 30 bad topology keys: even with the parser's per-location cap the text is far over the
    // limit. (Only input kube-apiserver accepts: it refuses bad source-range CIDRs itself.)
    let keys: Vec<String> = (0..30)
        .map(|i| format!("not a topology key {i} {}!", "x".repeat(24)))
        .collect();
    let noisy =
        svc_lb("default", "noisy").annotate("service.kubernetes.io/topology-keys", &keys.join(","));
    let Err(errors) =
        kube_lb_annotations::parse(kube_lb_annotations::Cloud::Local, &noisy.service())
    else {
        panic!("the Service is invalid");
    };
    let full = errors.to_string();
    assert!(
        full.len() > NOTE_LIMIT,
        "the test needs a long text: {full}"
    );
    noisy.create(&client).await;

    let notes = notes(&client, "noisy", "SyncLoadBalancerFailed").await;
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let note = &notes[0];
    assert!(note.len() <= NOTE_LIMIT, "{} bytes: {note}", note.len());
    let (kept, tail) = note.split_once("… [").expect("an ellipsis says it was cut");
    assert!(full.starts_with(kept), "the start of the full text: {note}");
    assert_eq!(tail, format!("{} more bytes]", full.len() - kept.len()));
    let mut outcomes = running.outcomes.clone();
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| matches!(o.get(&name("noisy")), Some(Outcome::UserError(_)))),
    )
    .await
    .expect("a user error")
    .unwrap();
    running.stop().await;
}

#[tokio::test]
async fn an_address_in_use_is_retried_with_warnings_until_it_is_freed() {
    let (_server, client, running) = server_and_controller().await;
    svc_lb("default", "holder")
        .lb_ip("127.240.0.77")
        .create(&client)
        .await;
    assert_eq!(
        wait_address(&client, "default", "holder").await,
        "127.240.0.77"
    );
    svc_lb("default", "waiter")
        .lb_ip("127.240.0.77")
        .create(&client)
        .await;

    // Reported as an environment problem that will be retried, not as a user error.
    let warnings = notes(&client, "waiter", "SyncLoadBalancerFailed").await;
    assert!(
        warnings[0].contains("address in use")
            && warnings[0].contains("default/holder")
            && warnings[0].contains("will retry within"),
        "{warnings:?}"
    );
    let mut outcomes = running.outcomes.clone();
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| matches!(o.get(&name("waiter")), Some(Outcome::Retrying(_)))),
    )
    .await
    .expect("retrying")
    .unwrap();
    // Retried with backoff: more ensures come without any change to the Service.
    eventually("a retry of the waiting Service", || async {
        (running.provider.ensures_of("default/waiter").len() >= 3).then_some(())
    })
    .await;

    // The cause goes away; the waiting Service gets the address without being edited.
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default")
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        wait_address(&client, "default", "waiter").await,
        "127.240.0.77"
    );

    // Every Warning text was published once: the backoff bound in the text grows (200ms,
    // 400ms, …, 2s), then the same text is not published again.
    let warnings = events_of(&client, "default", "waiter")
        .await
        .remove("SyncLoadBalancerFailed")
        .unwrap_or_default();
    let distinct: BTreeSet<&String> = warnings.iter().collect();
    assert_eq!(distinct.len(), warnings.len(), "{warnings:#?}");
    let metrics = running.metrics.encode().unwrap();
    assert!(
        metrics
            .contains(r#"kube_lb_reconcile_errors_total{class="environment",kind="environment"}"#),
        "{metrics}"
    );
    running.stop().await;
}

/// A leading controller running a test's own provider wrapper (`start_with_provider` takes
/// only the recording provider).
struct Wrapped {
    metrics: Arc<Metrics>,
    outcomes: watch::Receiver<kube_lb::controller::Outcomes>,
    /// Cancels the controller and waits for it (keeps the leadership sender alive until then).
    stop: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
}

fn start_wrapped(client: &kube::Client, provider: Arc<dyn LoadBalancerProvider>) -> Wrapped {
    let metrics = Arc::new(Metrics::new());
    let controller =
        LoadBalancerController::new(client.clone(), provider, test_config(), metrics.clone());
    let outcomes = controller.outcomes();
    let (leading_tx, leading) = watch::channel(true);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(controller.run(leading, shutdown.clone()));
    let stop = Box::pin(async move {
        shutdown.cancel();
        let _ = tokio::time::timeout(CEILING, task).await;
        drop(leading_tx);
    });
    Wrapped {
        metrics,
        outcomes,
        stop,
    }
}

/// The local provider, except that Services whose name starts with `elsewhere` belong to
/// another controller (as AWS `aws-load-balancer-type: nlb-ip` does).
#[derive(Debug)]
struct Elsewhere {
    inner: LocalProvider,
    ensures: AtomicU32,
    deletes: Mutex<Vec<String>>,
}

#[async_trait]
impl LoadBalancerProvider for Elsewhere {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        if spec.service.name.starts_with("elsewhere") {
            self.ensures.fetch_add(1, Ordering::SeqCst);
            return Err(ProviderError::ImplementedElsewhere);
        }
        self.inner.ensure(spec, backends).await
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        self.deletes.lock().unwrap().push(service.to_string());
        self.inner.delete(service).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        self.inner.status(service).await
    }
}

#[tokio::test]
async fn a_load_balancer_implemented_elsewhere_is_left_alone_quietly() {
    let server = server().await;
    let client = server.client().unwrap();
    let provider = Arc::new(Elsewhere {
        inner: local_provider(CallCounter::new()),
        ensures: AtomicU32::new(0),
        deletes: Mutex::new(Vec::new()),
    });
    let Wrapped {
        metrics,
        mut outcomes,
        stop,
    } = start_wrapped(&client, provider.clone());

    svc_lb("default", "elsewhere").create(&client).await;
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| {
            matches!(
                o.get(&name("elsewhere")),
                Some(Outcome::ImplementedElsewhere)
            )
        }),
    )
    .await
    .expect("left to the other controller")
    .unwrap();
    // A Service created afterwards and ready: the controller has worked through the events
    // before it, including any requeue of the first one.
    svc_lb("default", "plain").create(&client).await;
    wait_address(&client, "default", "plain").await;
    server.seed(node("n2")).unwrap();
    wait_address(&client, "default", "plain").await;

    let events = events_of(&client, "default", "elsewhere").await;
    assert!(
        !events.contains_key("SyncLoadBalancerFailed"),
        "no failure event: {events:?}"
    );
    let svc = get_svc(&client, "default", "elsewhere").await.unwrap();
    assert!(ingress_of(&svc).is_empty(), "no address of ours");
    assert_eq!(
        svc.finalizers().len(),
        1,
        "the finalizer is added once and kept, as upstream does"
    );
    // No error went through the error policy, so nothing was requeued with backoff.
    let text = metrics.encode().unwrap();
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("kube_lb_reconcile_errors_total{")),
        "{text}"
    );
    assert!(
        provider.ensures.load(Ordering::SeqCst) <= 3,
        "asked at most once per event (create, finalizer, node): {}",
        provider.ensures.load(Ordering::SeqCst)
    );

    // Deleting it goes through cleanup once and releases the finalizer.
    Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), "default")
        .delete("elsewhere", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service to be gone", || async {
        get_svc(&client, "default", "elsewhere")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    stop.await;
}

/// `kube-lb reconcile --cloud aws` against moto: a Service of `aws-load-balancer-type: nlb-ip`
/// is shown as `External`, does not fail the run, and gets no load balancer of ours.
#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread")]
async fn reconcile_leaves_nlb_ip_to_the_aws_load_balancer_controller() {
    let moto = crate::cloud_fixtures::moto().await;
    let network = moto.cluster_network("demo", 1).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-0}}\n\
         spec: {{providerID: 'aws:///us-east-1a/{}'}}\n\
         status:\n  conditions: [{{type: Ready, status: 'True'}}]\n  \
         addresses: [{{type: InternalIP, address: 10.0.1.10}}]\n---\n\
         apiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: default}}\n\
         spec:\n  type: LoadBalancer\n  selector: {{app: web}}\n  \
         ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30080}}]\n---\n\
         apiVersion: v1\nkind: Service\nmetadata:\n  name: pods\n  namespace: default\n  \
         annotations: {{service.beta.kubernetes.io/aws-load-balancer-type: nlb-ip}}\n\
         spec:\n  type: LoadBalancer\n  selector: {{app: pods}}\n  \
         ports: [{{name: http, port: 80, targetPort: 8080, nodePort: 30081}}]\n",
        network.instances[0]
    );
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, manifest).unwrap();
    let endpoint = moto.endpoint();
    let out = tokio::task::spawn_blocking(move || {
        assert_cmd::Command::cargo_bin("kube-lb")
            .unwrap()
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_PROFILE")
            .args(["--log", "warn", "reconcile", "--cloud", "aws"])
            .args(["--cluster-name", "demo", "-f"])
            .arg(&path)
            .args(["-o", "json", "--timeout", "90s"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).unwrap();
    let status = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .map(|r| r["status"].as_str().unwrap_or_default().to_string())
    };
    assert_eq!(status("web").as_deref(), Some("Ready"), "{stdout}");
    assert_eq!(status("pods").as_deref(), Some("External"), "{stdout}");
    let pods = rows.iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!(
        pods["externalIp"], "<pending>",
        "no address of ours: {stdout}"
    );
    // The controller logs every failure it retries at warn: none for this run.
    assert!(
        !stderr.contains("reconcile failed"),
        "left alone quietly: {stderr}"
    );
}

/// The local provider, except that while `taken` is set, Services whose name starts with
/// `taken` find their load balancer's name held by another owner (as a cloud provider reports
/// a same-named resource tagged for another cluster).
#[derive(Debug)]
struct NameHeldElsewhere {
    inner: LocalProvider,
    taken: std::sync::atomic::AtomicBool,
    refused: AtomicU32,
}

#[async_trait]
impl LoadBalancerProvider for NameHeldElsewhere {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        if spec.service.name.starts_with("taken") && self.taken.load(Ordering::SeqCst) {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(ProviderError::owned_elsewhere(
                "CreateLoadBalancer",
                "Classic ELB a1b2c3",
                "Service(s) shop/cart of cluster other",
            ));
        }
        self.inner.ensure(spec, backends).await
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        self.inner.delete(service).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        self.inner.status(service).await
    }
}

/// A load balancer name held by another owner is a user error: one Warning naming the
/// resource and its owner, condition `NameTaken`, and no retries while the Service is
/// unchanged (retrying cannot clear it); once the other owner's resource is gone, a change to
/// the Service (a label) makes the controller try again and the Service gets its address.
#[tokio::test]
async fn a_name_held_by_another_owner_is_a_user_error_that_waits_for_a_change() {
    let server = server().await;
    let client = server.client().unwrap();
    let provider = Arc::new(NameHeldElsewhere {
        inner: local_provider(CallCounter::new()),
        taken: std::sync::atomic::AtomicBool::new(true),
        refused: AtomicU32::new(0),
    });
    let Wrapped {
        metrics,
        mut outcomes,
        stop,
    } = start_wrapped(&client, provider.clone());

    svc_lb("default", "taken").create(&client).await;
    tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| matches!(o.get(&name("taken")), Some(Outcome::UserError(_)))),
    )
    .await
    .expect("a user error")
    .unwrap();
    let warnings = notes(&client, "taken", "SyncLoadBalancerFailed").await;
    assert!(
        warnings[0].contains("Classic ELB a1b2c3")
            && warnings[0].contains("shop/cart of cluster other")
            && !warnings[0].contains("will retry"),
        "{warnings:?}"
    );
    let svc = eventually("the NameTaken condition", || async {
        let svc = get_svc(&client, "default", "taken").await?;
        let condition = svc
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == kube_lb::controller::conditions::CONDITION_TYPE)?
            .clone();
        (condition.reason == "NameTaken").then_some(condition)
    })
    .await;
    assert_eq!(svc.status, "False");
    assert!(
        svc.message.contains("shop/cart of cluster other"),
        "{}",
        svc.message
    );

    // Work that comes after it (a new Service, a node) is done while the Service waits: no
    // retry of it without a change to it.
    let asked = provider.refused.load(Ordering::SeqCst);
    svc_lb("default", "plain").create(&client).await;
    wait_address(&client, "default", "plain").await;
    server.seed(node("n2")).unwrap();
    wait_address(&client, "default", "plain").await;
    assert!(
        provider.refused.load(Ordering::SeqCst) == asked,
        "retried without a change to the Service: {} ensures after {asked}",
        provider.refused.load(Ordering::SeqCst)
    );
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(r#"kube_lb_reconcile_errors_total{class="user",kind="user"}"#),
        "{text}"
    );

    // The other owner removes its resource; a label on the Service makes kube-lb try again.
    provider.taken.store(false, Ordering::SeqCst);
    merge_patch_svc(
        &client,
        "default",
        "taken",
        serde_json::json!({"metadata": {"labels": {"kube-lb.io/retry": "1"}}}),
    )
    .await;
    wait_address(&client, "default", "taken").await;
    stop.await;
}

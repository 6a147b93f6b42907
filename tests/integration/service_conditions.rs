//! The `kube-lb.io/LoadBalancerReady` Service condition: written with the address in one
//! status write, False with the annotation named when the Service cannot be realised, listing
//! the annotations that are ignored, removed when the Service stops being a load balancer, and
//! never rewritten by a resync that changes nothing. End to end, `kubectl wait
//! --for=condition=…` and `kubectl describe svc` against `kube-lb up`.
#![allow(clippy::unwrap_used)]

use crate::controller_support;
use crate::kubectl_legacy::{Kubectl, require, start};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use controller_support::*;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::api::Api;
use kube_lb::controller::conditions::CONDITION_TYPE;
use kube_lb_apiserver::faults::{FaultAction, FaultRule, Verb};
use serde_json::json;

/// An AWS annotation: it has no effect on the local cloud, and the condition must say so.
const FOREIGN: &str = "service.beta.kubernetes.io/aws-load-balancer-type";
/// An annotation only kube-lb judges (kube-apiserver accepts any value).
const TOPOLOGY: &str = "service.kubernetes.io/topology-keys";

fn condition(service: &Service) -> Option<Condition> {
    service
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
        .cloned()
}

/// Waits until `ns/name` shows the condition with `reason`, returning the Service.
async fn wait_reason(client: &kube::Client, ns: &str, name: &str, reason: &str) -> Service {
    eventually(
        &format!("{ns}/{name} condition reason {reason}"),
        || async {
            let svc = get_svc(client, ns, name).await?;
            (condition(&svc)?.reason == reason).then_some(svc)
        },
    )
    .await
}

#[tokio::test]
async fn condition_is_ready_then_names_the_bad_annotation_then_goes_with_the_type() {
    let (_server, client, running) = server_and_controller().await;
    svc_lb("default", "web")
        .annotate(FOREIGN, "nlb")
        .create(&client)
        .await;

    let svc = wait_reason(&client, "default", "web", "Provisioned").await;
    let ready = condition(&svc).unwrap();
    let address = ingress_of(&svc).pop().unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.observed_generation, svc.metadata.generation);
    assert!(ready.message.contains(&address), "{}", ready.message);
    assert!(
        ready.message.contains("Ignored or only partly honoured")
            && ready.message.contains(FOREIGN),
        "the ignored AWS annotation is listed: {}",
        ready.message
    );
    // `kubectl describe` prints events, not Service conditions: the condition is mirrored.
    let events = eventually("LoadBalancerReady event", || async {
        let events = events_of(&client, "default", "web").await;
        events.get("LoadBalancerReady").cloned()
    })
    .await;
    assert!(
        events[0].starts_with("kube-lb.io/LoadBalancerReady=True Provisioned: "),
        "{events:?}"
    );

    // An annotation kube-lb cannot realise: False, naming the annotation; the address stays.
    merge_patch_svc(
        &client,
        "default",
        "web",
        json!({"metadata": {"annotations": {TOPOLOGY: "*,kubernetes.io/hostname"}}}),
    )
    .await;
    let svc = wait_reason(&client, "default", "web", "AnnotationInvalid").await;
    let invalid = condition(&svc).unwrap();
    assert_eq!(invalid.status, "False");
    assert!(
        invalid.message.contains(&format!("annotation {TOPOLOGY}")),
        "{}",
        invalid.message
    );
    assert!(invalid.last_transition_time.0 >= ready.last_transition_time.0);
    assert_eq!(ingress_of(&svc), std::slice::from_ref(&address));
    let warnings = eventually("LoadBalancerNotReady event", || async {
        events_of(&client, "default", "web")
            .await
            .get("LoadBalancerNotReady")
            .cloned()
    })
    .await;
    assert!(warnings[0].contains(TOPOLOGY), "{warnings:?}");

    // Fixed: ready again.
    merge_patch_svc(
        &client,
        "default",
        "web",
        json!({"metadata": {"annotations": {TOPOLOGY: null}}}),
    )
    .await;
    wait_reason(&client, "default", "web", "Provisioned").await;

    // Not a load balancer any more: the condition goes, with the address and the finalizer.
    merge_patch_svc(&client, "default", "web", retype_to_cluster_ip()).await;
    let svc = eventually("condition, address and finalizer gone", || async {
        let svc = get_svc(&client, "default", "web").await?;
        (condition(&svc).is_none() && ingress_of(&svc).is_empty() && svc.finalizers().is_empty())
            .then_some(svc)
    })
    .await;
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    running.stop().await;
}

/// A Service of another `loadBalancerClass` never gets the condition.
#[tokio::test]
async fn other_classes_get_no_condition() {
    let (_server, client, running) = server_and_controller().await;
    svc_lb("default", "theirs")
        .class("example.com/other")
        .create(&client)
        .await;
    svc_lb("default", "ours").create(&client).await;
    // Created after `theirs`: once `ours` is done, `theirs` was seen.
    wait_reason(&client, "default", "ours", "Provisioned").await;
    let theirs = get_svc(&client, "default", "theirs").await.unwrap();
    assert_eq!(condition(&theirs), None);
    assert!(running.provider.ensures_of("default/theirs").is_empty());
    running.stop().await;
}

/// Periodic resyncs of a converged Service send no PATCH or PUT for it at all (counted at the
/// API server), so the condition costs no write per resync.
#[tokio::test]
async fn a_no_op_resync_sends_no_status_write() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    config.resync = Duration::from_millis(200);
    let running = start_controller(&server, config, true);
    svc_lb("default", "web")
        .annotate(FOREIGN, "nlb")
        .create(&client)
        .await;
    let svc = wait_reason(&client, "default", "web", "Provisioned").await;
    // The reconcile our own status write triggers has run once the provider saw two ensures.
    eventually("the write's own reconcile", || async {
        (running.provider.ensures_of("default/web").len() >= 2).then_some(())
    })
    .await;
    // Zero-delay rules: they change nothing but count every matching request.
    for verb in [Verb::Patch, Verb::Update] {
        server.faults().add(
            FaultRule::new(FaultAction::Delay(Duration::ZERO))
                .verb(verb)
                .resource("services"),
        );
    }
    let ensures = running.provider.ensures_of("default/web").len();
    eventually("three periodic resyncs", || async {
        (running.provider.ensures_of("default/web").len() >= ensures + 3).then_some(())
    })
    .await;
    assert_eq!(server.faults().injected(), 0, "resyncs wrote to Services");
    let after = get_svc(&client, "default", "web").await.unwrap();
    assert_eq!(condition(&after), condition(&svc));
    assert_eq!(after.resource_version(), svc.resource_version());
    running.stop().await;
}

/// A failure that is retried with backoff shows as Unknown with the cloud's words, and the
/// status write it causes does not bring the retry forward.
#[tokio::test]
async fn a_throttled_cloud_is_unknown_and_the_retry_keeps_its_backoff() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    // Long enough that an early retry would be seen, short enough for the test.
    config.backoff_base = Duration::from_secs(2);
    config.backoff_max = Duration::from_secs(2);
    let running = start_controller(&server, config, true);
    running.provider.fail_next(1);
    svc_lb("default", "web").create(&client).await;
    let svc = wait_reason(&client, "default", "web", "CloudThrottled").await;
    let throttled = condition(&svc).unwrap();
    assert_eq!(throttled.status, "Unknown");
    assert!(
        throttled.message.contains("injected throttling"),
        "{}",
        throttled.message
    );
    // Mirrored for `kubectl describe`, which shows events but not conditions.
    let mirrored = eventually("LoadBalancerNotReady event", || async {
        events_of(&client, "default", "web")
            .await
            .get("LoadBalancerNotReady")
            .cloned()
    })
    .await;
    assert!(
        mirrored.iter().any(|note| note
            .starts_with("kube-lb.io/LoadBalancerReady=Unknown CloudThrottled: ")
            && note.contains("injected throttling")),
        "{mirrored:?}"
    );
    let failed_at = Instant::now();
    wait_reason(&client, "default", "web", "Provisioned").await;
    let ensures = running.provider.ensures_of("default/web");
    assert_eq!(ensures.len(), 2, "one failure, one retry: {ensures:?}");
    // Jitter takes at most half the 2 s backoff off; the condition write must not have woken
    // the retry at once.
    assert!(
        failed_at.elapsed() >= Duration::from_millis(700),
        "retried after {:?}",
        failed_at.elapsed()
    );
    running.stop().await;
}

// End to end, through the binary and kubectl.

/// `kubectl`, or `None` (a loud skip) outside CI; under `CI=true` a missing kubectl fails.
fn kubectl_binary() -> Option<PathBuf> {
    let path = std::env::var_os("KUBECTL")
        .map_or_else(|| PathBuf::from("/usr/bin/kubectl"), PathBuf::from);
    require(path, "install kubectl")
}

const SERVICES: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: broken
  annotations:
    service.kubernetes.io/topology-keys: "*,kubernetes.io/hostname"
spec:
  type: LoadBalancer
  selector:
    app: broken
  ports:
  - name: http
    port: 80
    targetPort: 8080
"#;

#[test]
fn kubectl_wait_and_describe_show_the_condition() {
    let Some(binary) = kubectl_binary() else {
        return;
    };
    // `kube-lb up` with a pool of its own, so the userspace dataplane binds no address another
    // test uses.
    let running = start(&[
        "up",
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--dataplane",
        "userspace",
        "--local-pool",
        "127.20.79.1-127.20.79.6",
    ]);
    let kubectl = Kubectl {
        binary: &binary,
        running: &running,
    };
    kubectl.ok(&["apply", "-f", "-"], Some(SERVICES));
    let ready = format!("--for=condition={CONDITION_TYPE}");
    let waited = kubectl.ok(&["wait", &ready, "svc/web", "--timeout=60s"], None);
    assert_eq!(waited.trim(), "service/web condition met");
    let not_ready = format!("--for=condition={CONDITION_TYPE}=False");
    kubectl.ok(&["wait", &not_ready, "svc/broken", "--timeout=60s"], None);

    // kubectl 1.32's `describe svc` prints no Service conditions (describeService: metadata,
    // spec fields, `LoadBalancer Ingress`, Events); the condition reaches it as the Event that
    // mirrors it, one line per event: type, reason, age, source, then the whole note, which
    // is the condition's type=status, reason and message.
    let described = kubectl.ok(&["describe", "svc", "web"], None);
    eprintln!("{described}");
    let ready_line = event_line(&described, "LoadBalancerReady")
        .unwrap_or_else(|| panic!("no LoadBalancerReady event:\n{described}"));
    assert!(ready_line.starts_with("Normal"), "{ready_line}");
    assert!(ready_line.contains("service-controller"), "{ready_line}");
    assert!(
        ready_line.contains(
            "kube-lb.io/LoadBalancerReady=True Provisioned: Load balancer ready at 127.20.79."
        ),
        "{ready_line}"
    );
    assert!(described.contains("LoadBalancer Ingress:"), "{described}");
    let broken = kubectl.ok(&["describe", "svc", "broken"], None);
    eprintln!("{broken}");
    let broken_line = event_line(&broken, "LoadBalancerNotReady")
        .unwrap_or_else(|| panic!("no LoadBalancerNotReady event:\n{broken}"));
    assert!(broken_line.starts_with("Warning"), "{broken_line}");
    assert!(
        broken_line.contains(
            "kube-lb.io/LoadBalancerReady=False AnnotationInvalid: The Service cannot be \
             realised as written. Change: annotation service.kubernetes.io/topology-keys"
        ),
        "{broken_line}"
    );

    // Only the message changes (an annotation that has no effect on this cloud is now
    // listed; still True, still Provisioned): describe shows the new text too.
    kubectl.ok(
        &[
            "annotate",
            "svc",
            "web",
            "service.beta.kubernetes.io/aws-load-balancer-type=nlb",
        ],
        None,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed = loop {
        let described = kubectl.ok(&["describe", "svc", "web"], None);
        let listed = described.lines().find(|line| {
            line.contains("kube-lb.io/LoadBalancerReady=True Provisioned:")
                && line.contains("Ignored or only partly honoured")
                && line.contains("aws-load-balancer-type")
        });
        if let Some(line) = listed {
            break line.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the message-only change never reached describe:\n{described}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(listed.trim_start().starts_with("Normal"), "{listed}");
    // The condition itself, as `kubectl get -o jsonpath` scripts read it.
    let reason = kubectl.ok(
        &[
            "get",
            "svc",
            "broken",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"kube-lb.io/LoadBalancerReady\")].reason}",
        ],
        None,
    );
    assert_eq!(reason, "AnnotationInvalid");
}

/// The line of `kubectl describe`'s Events table with `reason`, without its indent.
fn event_line<'a>(described: &'a str, reason: &str) -> Option<&'a str> {
    let events = described.split_once("\nEvents:")?.1;
    events
        .lines()
        .map(str::trim_start)
        .find(|line| line.split_whitespace().nth(1) == Some(reason))
}

/// The local provider whose next `delete`s fail with a retryable error.
#[derive(Debug)]
struct FailingDeletes {
    inner: kube_lb_provider_local::LocalProvider,
    failures_left: std::sync::atomic::AtomicU32,
    deletes: std::sync::atomic::AtomicU32,
}

#[async_trait::async_trait]
impl kube_lb_provider_core::LoadBalancerProvider for FailingDeletes {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn ensure(
        &self,
        spec: &kube_lb_annotations::LoadBalancerSpec,
        backends: &[kube_lb_provider_core::BackendNode],
    ) -> Result<kube_lb_provider_core::LoadBalancerStatus, kube_lb_provider_core::ProviderError>
    {
        self.inner.ensure(spec, backends).await
    }

    async fn delete(
        &self,
        service: &kube_lb_annotations::ServiceKey,
    ) -> Result<(), kube_lb_provider_core::ProviderError> {
        use std::sync::atomic::Ordering;
        self.deletes.fetch_add(1, Ordering::SeqCst);
        let left = self.failures_left.load(Ordering::SeqCst);
        if left > 0 {
            self.failures_left.store(left - 1, Ordering::SeqCst);
            return Err(kube_lb_provider_core::ProviderError::retryable(
                "delete",
                "injected outage",
            ));
        }
        self.inner.delete(service).await
    }

    async fn status(
        &self,
        service: &kube_lb_annotations::ServiceKey,
    ) -> Result<
        Option<kube_lb_provider_core::LoadBalancerStatus>,
        kube_lb_provider_core::ProviderError,
    > {
        self.inner.status(service).await
    }
}

/// A deletion stuck on the cloud says so on the Service (False, `Deleting`, the cloud's words)
/// and keeps the finalizer until the load balancer is really gone.
#[tokio::test]
async fn a_failing_delete_shows_deleting_and_keeps_the_finalizer() {
    use std::sync::atomic::Ordering;
    let server = server().await;
    let client = server.client().unwrap();
    let provider = std::sync::Arc::new(FailingDeletes {
        inner: local_provider(kube_lb_provider_core::CallCounter::new()),
        failures_left: std::sync::atomic::AtomicU32::new(0),
        deletes: std::sync::atomic::AtomicU32::new(0),
    });
    let mut config = test_config();
    config.backoff_base = Duration::from_secs(1);
    let metrics = std::sync::Arc::new(kube_lb::metrics::Metrics::new());
    let controller = kube_lb::controller::LoadBalancerController::new(
        client.clone(),
        provider.clone(),
        config,
        metrics,
    );
    let (_leading, leading_rx) = tokio::sync::watch::channel(true);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(controller.run(leading_rx, shutdown.clone()));

    let created = svc_lb("default", "web").create(&client).await;
    wait_reason(&client, "default", "web", "Provisioned").await;
    provider.failures_left.store(2, Ordering::SeqCst);
    Api::<Service>::namespaced(client.clone(), "default")
        .delete("web", &Default::default())
        .await
        .unwrap();

    let svc = wait_reason(&client, "default", "web", "Deleting").await;
    let deleting = condition(&svc).unwrap();
    assert_eq!(deleting.status, "False");
    assert!(
        deleting.message.contains("injected outage"),
        "{}",
        deleting.message
    );
    assert!(
        !svc.finalizers().is_empty(),
        "finalizer kept while the delete fails"
    );
    eventually("the Service gone once the delete succeeds", || async {
        get_svc(&client, "default", "web")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    use kube_lb_provider_core::LoadBalancerProvider as _;
    let key = kube_lb::controller::service_key(&created).unwrap();
    assert_eq!(
        provider.status(&key).await.unwrap(),
        None,
        "load balancer gone"
    );
    assert_eq!(
        provider.deletes.load(Ordering::SeqCst),
        3,
        "two failures, one success"
    );
    shutdown.cancel();
    let _ = tokio::time::timeout(CEILING, task).await;
}

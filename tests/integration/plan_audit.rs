//! `kube-lb plan` and `kube-lb audit` with the `local` provider: the binary's exit codes and
//! output on manifests, and in-process against a controller's own pool, where a port change
//! shows as a modify, planning makes no mutating call, an orphan left by a Service deleted
//! while the controller was stopped is found and removed, and the controller's periodic audit
//! exports the count.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use std::collections::BTreeSet;
use std::process::{Command as StdCommand, Stdio};
use std::sync::Arc;
use std::time::Duration;

use assert_cmd::Command;
use controller_support::*;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_lb::cli::audit::AuditOptions;
use kube_lb::cli::plan::{Operation, PlanStatus};
use kube_lb::controller::LoadBalancerController;
use kube_lb::metrics::Metrics;
use kube_lb_apiserver::faults::{FaultAction, FaultRule, Verb};
use kube_lb_provider_core::{
    CallCounter, CallKind, ChangeAction, FieldChange, LoadBalancerProvider, PlannedChange,
};
use kube_lb_provider_local::LocalProvider;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const NODE: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {kubernetes.io/hostname: n1}}
status:
  addresses: [{type: InternalIP, address: 10.0.0.1}]
  conditions: [{type: Ready, status: "True"}]
"#;

/// A Service the controller already serves: finalizer on, address in the status.
fn served(namespace: &str, name: &str, type_: &str, extra: &str, ip: &str) -> String {
    format!(
        r#"
---
apiVersion: v1
kind: Service
metadata:
  name: {name}
  namespace: {namespace}
  finalizers: [service.kubernetes.io/load-balancer-cleanup]
spec:
  type: {type_}
  ports: [{{name: http, port: 80, targetPort: 8080}}]{extra}
status:
  loadBalancer:
    ingress: [{{ip: {ip}}}]
"#
    )
}

const NEW: &str = r#"
---
apiVersion: v1
kind: Service
metadata: {name: new, namespace: default}
spec:
  type: LoadBalancer
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: internal, namespace: default}
spec:
  ports: [{port: 82}]
"#;

const BAD: &str = r#"
---
apiVersion: v1
kind: Service
metadata:
  name: bad
  namespace: default
  annotations:
    service.kubernetes.io/topology-keys: "*,kubernetes.io/hostname"
spec:
  type: LoadBalancer
  ports: [{port: 81}]
"#;

/// Runs the binary on a manifest with `args`; (exit code, stdout, stderr).
fn kube_lb(manifest: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("manifests.yaml");
    std::fs::write(&path, manifest).unwrap();
    let out = Command::cargo_bin("kube-lb")
        .unwrap()
        .env_remove("KUBE_LB_CLOUD")
        .args(["--log", "warn"])
        .args(args)
        .args(["--cloud", "local", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn plan_of_an_in_sync_state_is_empty_and_exits_0() {
    let manifest = format!(
        "{NODE}{}",
        served("default", "web", "LoadBalancer", "", "127.240.0.1")
    );
    let (code, stdout, stderr) = kube_lb(&manifest, &["plan", "--detailed-exitcode"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "default/web (ensure): in sync\n\nNo changes: 1 load balancer(s) in sync.\n"
    );
}

#[test]
fn plan_shows_a_create_and_an_address_change_and_exits_2_only_when_asked() {
    let moved = served(
        "shop",
        "moved",
        "LoadBalancer",
        "\n  loadBalancerIP: 127.240.0.9",
        "127.240.0.2",
    );
    let manifest = format!(
        "{NODE}{}{moved}{NEW}",
        served("default", "web", "LoadBalancer", "", "127.240.0.1")
    );
    let (code, stdout, stderr) = kube_lb(&manifest, &["plan", "--detailed-exitcode"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        "\
default/new (ensure):
  + create Address 127.240.0.3 (allocate)
      address: (none) → 127.240.0.3
      ports: (none) → http:80/TCP
default/web (ensure): in sync
shop/moved (ensure):
  ~ modify Address 127.240.0.2 (allocate)
      address: 127.240.0.2 → 127.240.0.9

Plan: 1 to create, 1 to modify, 0 to delete, for 2 Service(s); 1 in sync.
"
    );
    let (code, _, _) = kube_lb(&manifest, &["plan"]);
    assert_eq!(
        code, 0,
        "pending changes exit 0 without --detailed-exitcode"
    );

    let (code, stdout, _) = kube_lb(&manifest, &["plan", "-o", "json"]);
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["summary"]["create"], 1);
    assert_eq!(report["summary"]["modify"], 1);
    assert_eq!(report["services"][0]["name"], "new");
    assert_eq!(report["services"][0]["status"], "changes");
    assert_eq!(
        report["services"][0]["changes"][0]["fields"][0],
        json!({"field": "address", "old": null, "new": "127.240.0.3"})
    );
}

#[test]
fn plan_reports_an_invalid_service_and_still_plans_the_others() {
    let manifest = format!(
        "{NODE}{}{BAD}{NEW}",
        served("default", "retyped", "ClusterIP", "", "127.240.0.5")
    );
    let (code, stdout, stderr) = kube_lb(&manifest, &["plan", "--detailed-exitcode"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("default/bad (ensure): ERROR: invalid Service: annotation service.kubernetes.io/topology-keys"),
        "{stdout}"
    );
    assert!(
        stdout.contains("default/new (ensure):\n  + create Address"),
        "{stdout}"
    );
    // Carries the finalizer but is no longer a LoadBalancer: its address is released.
    assert!(
        stdout.contains("default/retyped (delete):\n  - delete Address 127.240.0.5 (release)"),
        "{stdout}"
    );
    assert!(!stdout.contains("No changes"), "{stdout}");
    assert!(stdout.contains("Plan incomplete: 1 error(s)"), "{stdout}");
}

#[tokio::test]
async fn plan_and_audit_exit_1_naming_a_refused_read_and_never_claim_nothing() {
    let server = server().await;
    svc_lb("default", "web")
        .create(&server.client().unwrap())
        .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    server.faults().add(
        FaultRule::new(FaultAction::InternalError)
            .verb(Verb::List)
            .resource("services"),
    );
    for command in ["plan", "audit"] {
        // Off the runtime's thread: the API server answers on it.
        let kubeconfig = kubeconfig.clone();
        let out = tokio::task::spawn_blocking(move || {
            StdCommand::new(env!("CARGO_BIN_EXE_kube-lb"))
                .env_remove("KUBE_LB_CLOUD")
                .args([
                    "--log",
                    "error",
                    command,
                    "--cloud",
                    "local",
                    "--kubeconfig",
                ])
                .arg(&kubeconfig)
                .stdin(Stdio::null())
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(1), "{command}: {stdout}{stderr}");
        assert!(stderr.contains("listing Services"), "{command}: {stderr}");
        assert!(
            stdout.is_empty(),
            "{command} printed a partial answer: {stdout}"
        );
    }
}

#[test]
fn audit_lists_exactly_the_resources_of_services_that_stopped_being_ours() {
    let manifest = format!(
        "{NODE}{}{}{}",
        served("default", "web", "LoadBalancer", "", "127.240.0.1"),
        served("default", "retyped", "ClusterIP", "", "127.240.0.3"),
        served(
            "default",
            "reclassed",
            "LoadBalancer",
            "\n  loadBalancerClass: other.io/lb",
            "127.240.0.4"
        ),
    );
    let (code, stdout, stderr) = kube_lb(&manifest, &["audit", "-o", "json"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["owned"], 3);
    let leaked: Vec<(String, String, String)> = report["leaked"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["service"]["name"].as_str().unwrap().to_string(),
                l["reasonCode"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        leaked,
        vec![
            (
                "127.240.0.3".into(),
                "retyped".into(),
                "NotLoadBalancer".into()
            ),
            (
                "127.240.0.4".into(),
                "reclassed".into(),
                "OtherClass".into()
            ),
        ],
        "the live Service's address is never listed"
    );

    let (code, stdout, stderr) = kube_lb(&manifest, &["audit", "--delete"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("deleted: Address 127.240.0.3 (Service default/retyped)\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("deleted: Address 127.240.0.4 (Service default/reclassed)\n"),
        "{stdout}"
    );
    assert!(!stdout.contains("127.240.0.1"), "{stdout}");

    let clean = format!(
        "{NODE}{}",
        served("default", "web", "LoadBalancer", "", "127.240.0.1")
    );
    let (code, stdout, _) = kube_lb(&clean, &["audit"]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        "No leaked resources: 1 owned by this cluster, all in use.\n"
    );
}

/// A controller acting through `provider`, with the test's short backoff.
struct Running {
    _leading: watch::Sender<bool>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), kube::Error>>,
}

impl Running {
    fn start(
        server: &kube_lb_apiserver::RunningApiServer,
        provider: Arc<LocalProvider>,
    ) -> Running {
        let controller = LoadBalancerController::new(
            server.client().unwrap(),
            provider,
            test_config(),
            Arc::new(Metrics::new()),
        );
        let (leading, rx) = watch::channel(true);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(rx, shutdown.clone()));
        Running {
            _leading: leading,
            shutdown,
            task,
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(CEILING, self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn plan_of_a_port_change_is_a_modify_and_makes_no_mutating_call() {
    let server = server().await;
    let client = server.client().unwrap();
    let counter = CallCounter::new();
    let provider = Arc::new(local_provider(counter.clone()));
    let running = Running::start(&server, provider.clone());
    svc_lb("default", "web").create(&client).await;
    assert_eq!(wait_address(&client, "default", "web").await, "127.240.0.1");
    running.stop().await;

    Api::<Service>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [
                {"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}
            ]}})),
        )
        .await
        .unwrap();
    let before = counter.snapshot();
    let report = kube_lb::cli::plan::plan(
        client.clone(),
        provider.as_ref(),
        &test_config(),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    let planning = counter.snapshot().since(&before);
    let mutations: BTreeSet<&str> = planning.operations(CallKind::Mutate).into_keys().collect();
    // Re-adopting the recorded address (in-process memory, as the controller does at start)
    // is counted as a read: planning makes no mutating call at all.
    assert!(mutations.is_empty(), "planning mutated: {planning:?}");
    assert_eq!(planning.mutations(), 0, "{planning:?}");
    let reads = planning.operations(CallKind::Read);
    assert_eq!(reads.get("adopt"), Some(&1), "{planning:?}");
    assert_eq!(report.services.len(), 1, "{report:?}");
    let web = &report.services[0];
    assert_eq!(
        (web.name.as_str(), web.operation, web.status),
        ("web", Operation::Ensure, PlanStatus::Changes)
    );
    assert_eq!(
        web.changes,
        vec![PlannedChange {
            action: ChangeAction::Modify,
            kind: "Address".into(),
            name: "127.240.0.1".into(),
            call: "allocate".into(),
            fields: vec![FieldChange::new(
                "ports",
                Some("http:80/TCP".into()),
                Some("http:8080/TCP".into())
            )],
            phase: 1,
            depends_on: None,
        }]
    );
    assert_eq!(
        provider.subscribe().borrow().values().next().unwrap().ports[0].port,
        80,
        "still serving the old port"
    );

    // The controller then makes exactly the planned call, and the plan is empty.
    let before = counter.snapshot();
    let running = Running::start(&server, provider.clone());
    eventually("the new port served", || async {
        (provider.subscribe().borrow().values().next()?.ports[0].port == 8080).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(
        counter.snapshot().since(&before).operation("allocate"),
        1,
        "one allocate, as planned"
    );
    let report = kube_lb::cli::plan::plan(
        client,
        provider.as_ref(),
        &test_config(),
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    assert_eq!(report.services[0].status, PlanStatus::InSync, "{report:?}");
}

/// Removes our finalizer by hand and deletes the Service: with no controller running, its
/// load balancer is left behind.
async fn orphan(client: &kube::Client, name: &str) {
    let api = Api::<Service>::namespaced(client.clone(), "default");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    api.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("the Service gone", || async {
        get_svc(client, "default", name)
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// Services `web` and `old` given their addresses by a controller that then stops, and `old`
/// orphaned: the provider holding both addresses, and the addresses of `web` and `old`.
async fn web_and_an_orphaned_old(
    server: &kube_lb_apiserver::RunningApiServer,
    client: &kube::Client,
) -> (Arc<LocalProvider>, String, String) {
    let provider = Arc::new(local_provider(CallCounter::new()));
    let running = Running::start(server, provider.clone());
    svc_lb("default", "web").create(client).await;
    svc_lb("default", "old").create(client).await;
    let web = wait_address(client, "default", "web").await;
    let old = wait_address(client, "default", "old").await;
    running.stop().await;
    orphan(client, "old").await;
    (provider, web, old)
}

/// The periodic audit of a leading controller, every 50 ms; `delete` as `--audit-delete`.
struct PeriodicAuditTask {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// Keeps the leadership channel open while the audit runs.
    _leading: watch::Sender<bool>,
}

impl PeriodicAuditTask {
    fn spawn(
        client: &kube::Client,
        provider: Arc<LocalProvider>,
        metrics: Arc<Metrics>,
        delete: bool,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let (leading_tx, leading) = watch::channel(true);
        let task = tokio::spawn(kube_lb::audit::run_periodic(
            client.clone(),
            provider,
            test_config(),
            metrics,
            kube_lb::audit::PeriodicAudit {
                interval: Duration::from_millis(50),
                delete,
            },
            leading,
            shutdown.clone(),
        ));
        Self {
            shutdown,
            task,
            _leading: leading_tx,
        }
    }

    /// Stops the audit and waits for it.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(CEILING, self.task)
            .await
            .unwrap()
            .unwrap();
    }
}

#[tokio::test]
async fn audit_finds_exactly_the_orphan_and_delete_removes_exactly_it() {
    let server = server().await;
    let client = server.client().unwrap();
    let (provider, web, old) = web_and_an_orphaned_old(&server, &client).await;

    let config = test_config();
    let audit = |delete: bool| {
        let options = AuditOptions {
            delete,
            force: false,
            lasting: true,
        };
        kube_lb::cli::audit::audit(client.clone(), provider.as_ref(), &config, options)
    };
    let report = audit(false).await.unwrap();
    let listed: Vec<(&str, &str, &str)> = report
        .leaked
        .iter()
        .map(|l| (l.name.as_str(), l.service.name.as_str(), l.reason_code))
        .collect();
    assert_eq!(listed, vec![(old.as_str(), "old", "ServiceDeleted")]);
    assert_eq!(report.owned, 2);
    assert_eq!(report.exit_code(false), 2);
    assert!(
        report.leaked[0].age_seconds.is_some(),
        "allocated here: its age is known"
    );

    let deleted = audit(true).await.unwrap();
    assert_eq!(deleted.leaked.len(), 1);
    assert_eq!(deleted.leaked[0].deleted, Some(true));
    assert_eq!(deleted.exit_code(true), 0);

    let after = audit(false).await.unwrap();
    assert!(after.leaked.is_empty(), "{after:?}");
    assert_eq!(after.owned, 1);
    let owned = provider.owned_resources().await.unwrap();
    assert_eq!(owned.len(), 1);
    assert_eq!(
        (owned[0].name.as_str(), owned[0].service.name.as_str()),
        (web.as_str(), "web")
    );
}

fn gauge(text: &str, kind: &str) -> Option<String> {
    let prefix = format!("kube_lb_audit_leaked_resources{{provider=\"local\",kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(str::to_string)
}

fn last_success(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("kube_lb_audit_last_success_timestamp_seconds "))
        .map(str::to_string)
}

#[tokio::test]
async fn periodic_audit_exports_the_leak_count_and_keeps_it_when_an_audit_fails() {
    let server = server().await;
    let client = server.client().unwrap();
    let (provider, _, _) = web_and_an_orphaned_old(&server, &client).await;

    let metrics = Arc::new(Metrics::new());
    let audit = PeriodicAuditTask::spawn(&client, provider.clone(), metrics.clone(), false);
    eventually("one leaked address in the gauge", || async {
        (gauge(&metrics.encode().unwrap(), "Address").as_deref() == Some("1")).then_some(())
    })
    .await;

    // The next audits fail: the gauge keeps its last value, and the time of the last success
    // stands still, even once the orphan is gone. Audits run one after another, so once one
    // has failed, none that read before the fault can still stamp.
    let injected = server.faults().injected();
    server.faults().add(
        FaultRule::new(FaultAction::InternalError)
            .verb(Verb::List)
            .resource("services"),
    );
    eventually("a failed audit", || async {
        (server.faults().injected() > injected).then_some(())
    })
    .await;
    let stamped = last_success(&metrics.encode().unwrap()).unwrap();
    let old = provider
        .owned_resources()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.service.name == "old")
        .unwrap();
    provider.delete(&old.service).await.unwrap();
    let failed = server.faults().injected();
    eventually("two more failed audits", || async {
        (server.faults().injected() >= failed + 2).then_some(())
    })
    .await;
    let text = metrics.encode().unwrap();
    assert_eq!(gauge(&text, "Address").as_deref(), Some("1"), "{text}");
    assert_eq!(last_success(&text).as_deref(), Some(stamped.as_str()));

    // Audits succeed again: the leak is gone and the kind reads 0.
    server.faults().clear();
    eventually("the gauge back to 0", || async {
        (gauge(&metrics.encode().unwrap(), "Address").as_deref() == Some("0")).then_some(())
    })
    .await;
    audit.stop().await;
}

/// `--audit-delete`: the leader removes what two audits in a row found leaked because its
/// Service is gone, and nothing of a live Service.
#[tokio::test]
async fn periodic_audit_with_delete_removes_what_a_gone_service_left_and_keeps_the_rest() {
    let server = server().await;
    let client = server.client().unwrap();
    // As a crash leaves it: the Service is gone and nothing will clean up its address.
    let (provider, _, _) = web_and_an_orphaned_old(&server, &client).await;

    let metrics = Arc::new(Metrics::new());
    let audit = PeriodicAuditTask::spawn(&client, provider.clone(), metrics.clone(), true);
    let owned_services = || async {
        provider
            .owned_resources()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.service.name)
            .collect::<Vec<_>>()
    };
    eventually("the orphaned address removed", || async {
        (owned_services().await == ["web"]).then_some(())
    })
    .await;
    let text = metrics.encode().unwrap();
    assert!(
        text.lines()
            .any(|l| l
                == "kube_lb_audit_deleted_resources_total{provider=\"local\",kind=\"Address\"} 1"),
        "{text}"
    );
    eventually("the gauge back to 0", || async {
        (gauge(&metrics.encode().unwrap(), "Address").as_deref() == Some("0")).then_some(())
    })
    .await;
    // The live Service keeps its address through further audits.
    let stamped = last_success(&metrics.encode().unwrap()).unwrap();
    eventually("another successful audit", || async {
        (last_success(&metrics.encode().unwrap()).unwrap() != stamped).then_some(())
    })
    .await;
    assert_eq!(owned_services().await, ["web"]);
    audit.stop().await;
}

/// Settings that would silently do nothing or never give up are refused before anything
/// connects, naming the flag.
#[test]
fn controller_refuses_audit_delete_without_audits_and_a_zero_provider_timeout() {
    let cases: [(&[&str], &str); 3] = [
        (&["--audit-delete"], "give --audit-interval too"),
        (
            &["--audit-delete", "--audit-interval", "0s"],
            "give --audit-interval too",
        ),
        (
            &["--provider-timeout", "0s"],
            "invalid --provider-timeout 0s",
        ),
    ];
    for (flags, want) in cases {
        let stderr = controller_refusal(flags);
        assert!(stderr.contains(want), "{flags:?}: {stderr}");
        assert!(
            !stderr.contains("nonexistent"),
            "refused before connecting: {stderr}"
        );
    }
}

#[tokio::test]
async fn controller_binary_exports_the_periodic_audit() {
    let server = server().await;
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = StdCommand::new(env!("CARGO_BIN_EXE_kube-lb"))
        .env_remove("KUBE_LB_CLOUD")
        .args(["--log", "warn", "controller", "--cloud", "local"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--audit-interval", "100ms"])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let _child = KillOnDrop(child);
    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    let http = reqwest::Client::new();
    let scrape = || {
        let http = http.clone();
        async move {
            http.get(format!("http://127.0.0.1:{port}/metrics"))
                .send()
                .await
                .ok()?
                .text()
                .await
                .ok()
        }
    };
    eventually("a successful audit", || async {
        last_success(&scrape().await?).filter(|v| v != "0.0")
    })
    .await;
    let text = scrape().await.unwrap();
    assert_eq!(gauge(&text, "Address"), None, "nothing leaked: {text}");

    // Someone strips our finalizer and retypes the Service in one write: the controller
    // no longer considers it its own and never releases the address; the audit finds it.
    Api::<Service>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"finalizers": null},
                "spec": {"type": "ClusterIP"}
            })),
        )
        .await
        .unwrap();
    eventually("the leaked address in the controller's gauge", || async {
        (gauge(&scrape().await?, "Address").as_deref() == Some("1")).then_some(())
    })
    .await;
}

/// Stops the child process when the test ends, passed or failed.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

//! The `local` provider's address pools through the embedded API server: `IPPool` custom
//! resources, why a Service stays `<pending>` (condition reason and Warning event) and that it is
//! retried when pools or other Services change — not only when it is edited — the pool written
//! back on each Service, pool statuses, and stable addresses across a controller restart with
//! 500 Services, some pending.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kube_lb::controller::{ControllerConfig, LoadBalancerController, conditions, pools};
use kube_lb::metrics::Metrics;
use kube_lb_apiserver::RunningApiServer;
use kube_lb_provider_core::CallCounter;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller_support::{
    events_of, get_svc, ingress_of, local_provider, server, svc_lb, test_config,
};

/// Ceiling of the waits of the 500-Service test.
const LONG: Duration = Duration::from_secs(120);
/// Ceiling of the other waits.
const SHORT: Duration = Duration::from_secs(20);

struct Controller {
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Controller {
    /// Stops as `kube-lb controller` does on SIGTERM: no reconcile starts any more, those in
    /// flight finish, then the watches end — so no write of this controller lands after this
    /// returns. (Aborting the tasks instead would drop requests already sent, which the API
    /// server may still apply after the next controller has started.)
    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            tokio::time::timeout(SHORT, task)
                .await
                .expect("the controller stops within the ceiling")
                .expect("the controller's tasks do not panic");
        }
        self.leading.send_replace(false);
    }
}

/// A controller as `kube-lb controller --cloud local` runs it: the local provider fed by the
/// IPPool watcher, pending Services retried on its changes. The backoff is long, so a retry
/// within the test's ceiling can only come from a change.
fn start(server: &RunningApiServer) -> Controller {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        kube_lb::cli::init_logging(&filter, kube_lb::cli::LogFormat::Text);
    }
    let client = server.client().unwrap();
    let local = Arc::new(local_provider(CallCounter::new()));
    let mut config: ControllerConfig = test_config();
    config.backoff_base = Duration::from_secs(300);
    config.backoff_max = Duration::from_secs(300);
    config.concurrency = 8;
    let (leading_tx, leading) = watch::channel(true);
    let shutdown = CancellationToken::new();
    let pool_task = tokio::spawn(pools::run(
        client.clone(),
        local.clone(),
        leading.clone(),
        "test".into(),
        shutdown.clone(),
    ));
    let controller =
        LoadBalancerController::new(client, local.clone(), config, Arc::new(Metrics::new()))
            .retry_pending_on(local.changes());
    let run = controller.run(leading, shutdown.clone());
    let controller_task = tokio::spawn(async move {
        let _ = run.await;
    });
    Controller {
        leading: leading_tx,
        shutdown,
        tasks: vec![pool_task, controller_task],
    }
}

fn pools_api(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &pools::ippool_resource())
}

async fn apply_pool(client: &Client, name: &str, spec: Value) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kube-lb.io/v1alpha1", "kind": "IPPool",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    pools_api(client)
        .patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&object),
        )
        .await
        .unwrap();
}

async fn wait_for<T, F, Fut>(what: &str, ceiling: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + ceiling;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {ceiling:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn reason_of(service: &Service) -> Option<String> {
    conditions::current(service).map(|c| c.reason.clone())
}

async fn wait_reason(client: &Client, name: &str, reason: &str) -> Service {
    wait_for(&format!("{name} to show {reason}"), SHORT, || async {
        get_svc(client, "default", name)
            .await
            .filter(|s| reason_of(s).as_deref() == Some(reason))
    })
    .await
}

async fn wait_ip(client: &Client, name: &str) -> String {
    wait_for(&format!("an address on {name}"), SHORT, || async {
        get_svc(client, "default", name)
            .await
            .and_then(|s| ingress_of(&s).into_iter().next())
    })
    .await
}

async fn pool_status(client: &Client, name: &str) -> Value {
    pools_api(client)
        .get(name)
        .await
        .unwrap()
        .data
        .get("status")
        .cloned()
        .unwrap_or(Value::Null)
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

async fn installed_server() -> RunningApiServer {
    let server = server().await;
    server
        .apply_manifests(pools::IPPOOL_CRD)
        .expect("the deploy/ CRD is accepted by the API server");
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_reasons_retries_write_back_and_status() {
    let server = installed_server().await;
    let client = server.client().unwrap();
    apply_pool(
        &client,
        "small",
        json!({"addresses": ["10.20.0.1-10.20.0.1"]}),
    )
    .await;
    let controller = start(&server);

    svc_lb("default", "first").create(&client).await;
    assert_eq!(wait_ip(&client, "first").await, "10.20.0.1");
    // The pool is written back, its status counts the address.
    wait_for("the pool annotation on first", SHORT, || async {
        get_svc(&client, "default", "first").await.filter(|s| {
            s.annotations().get("kube-lb.io/ip-allocated-from-pool") == Some(&"small".to_string())
        })
    })
    .await;
    wait_for("small's status", SHORT, || async {
        let status = pool_status(&client, "small").await;
        (status["ipv4"]["assigned"] == 1 && status["ipv4"]["available"] == 0).then_some(())
    })
    .await;

    // Exhausted: a condition and a Warning saying so.
    svc_lb("default", "second").create(&client).await;
    let pending = wait_reason(&client, "second", "PoolExhausted").await;
    assert!(ingress_of(&pending).is_empty());
    let events = events_of(&client, "default", "second").await;
    assert!(
        events["SyncLoadBalancerFailed"]
            .iter()
            .any(|n| n.contains("address pool \"small\" is exhausted")),
        "{events:?}"
    );
    // Widening the pool retries it (the backoff is 300 s: only the change can).
    apply_pool(
        &client,
        "small",
        json!({"addresses": ["10.20.0.1-10.20.0.2"]}),
    )
    .await;
    assert_eq!(wait_ip(&client, "second").await, "10.20.0.2");

    // A requested address held by another Service: SharingConflict naming it; retried when
    // the other goes.
    svc_lb("default", "third")
        .lb_ip("10.20.0.1")
        .port(81)
        .create(&client)
        .await;
    let clash = wait_reason(&client, "third", "SharingConflict").await;
    let message = conditions::current(&clash).unwrap().message.clone();
    assert!(
        message.contains("in use by Service default/first"),
        "{message}"
    );
    Api::<Service>::namespaced(client.clone(), "default")
        .delete("first", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(wait_ip(&client, "third").await, "10.20.0.1");

    // An address outside every pool waits with MissingDependency until a pool holds it.
    svc_lb("default", "fourth")
        .lb_ip("10.30.0.5")
        .create(&client)
        .await;
    let outside = wait_reason(&client, "fourth", "MissingDependency").await;
    assert!(
        conditions::current(&outside)
            .unwrap()
            .message
            .contains("10.30.0.5 is outside every address pool")
    );
    // An invalid pool is reported and does not take the others down; its valid part serves.
    apply_pool(
        &client,
        "broken",
        json!({"addresses": ["10.30.0.0/29", "not-a-range"]}),
    )
    .await;
    assert_eq!(wait_ip(&client, "fourth").await, "10.30.0.5");
    let broken = wait_for("broken's status", SHORT, || async {
        let status = pool_status(&client, "broken").await;
        (condition(&status, "Valid")["status"] == "False").then_some(status)
    })
    .await;
    assert!(
        condition(&broken, "Valid")["message"]
            .as_str()
            .unwrap()
            .contains("\"not-a-range\""),
        "{broken}"
    );
    let pool_events = wait_for("the InvalidIPPool event", SHORT, || async {
        let all = Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        all.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("InvalidIPPool"))
    })
    .await;
    assert_eq!(pool_events.type_.as_deref(), Some("Warning"));
    controller.stop().await;
}

fn address_map(services: &[Service]) -> BTreeMap<String, String> {
    services
        .iter()
        .filter_map(|s| {
            ingress_of(s)
                .into_iter()
                .next()
                .map(|ip| (s.name_any(), ip))
        })
        .collect()
}

async fn all_services(client: &Client) -> Vec<Service> {
    Api::<Service>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// Issue 18 item 5: 500 Services through the embedded API server, the controller restarted
/// mid-way with some still pending; no Service that had an address gets another one, no
/// address is handed out twice, and freed addresses go to the waiting Services.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_500_services_keep_their_addresses_across_a_restart() {
    const POOL_SIZE: usize = 400;
    const SERVICES: usize = 500;
    let server = installed_server().await;
    let client = server.client().unwrap();
    // 400 addresses, two ranges: 100 Services stay pending.
    apply_pool(
        &client,
        "bulk",
        json!({"addresses": ["10.40.0.0/24", "10.40.1.0-10.40.1.143"]}),
    )
    .await;
    let first = start(&server);
    for i in 0..SERVICES / 2 {
        svc_lb("default", &format!("s{i:03}")).create(&client).await;
    }
    // Restart mid-way: some of the first half have addresses, the rest are pending or not
    // reconciled yet.
    let before = wait_for("some addresses before the restart", LONG, || async {
        let map = address_map(&all_services(&client).await);
        (map.len() >= 100).then_some(map)
    })
    .await;
    first.stop().await;
    let before = {
        // The stop may have let a few more reconciles finish: what counts is what the
        // Services showed when the first controller was gone.
        let after_stop = address_map(&all_services(&client).await);
        assert!(after_stop.len() >= before.len());
        after_stop
    };
    assert!(before.len() < SERVICES, "some Services are still pending");

    let second = start(&server);
    for i in SERVICES / 2..SERVICES {
        svc_lb("default", &format!("s{i:03}")).create(&client).await;
    }
    let settled = wait_for(
        "every address handed out and the rest exhausted",
        LONG,
        || async {
            let services = all_services(&client).await;
            let map = address_map(&services);
            let exhausted = services
                .iter()
                .filter(|s| reason_of(s).as_deref() == Some("PoolExhausted"))
                .count();
            (map.len() == POOL_SIZE && exhausted == SERVICES - POOL_SIZE).then_some(map)
        },
    )
    .await;
    for (name, ip) in &before {
        assert_eq!(settled.get(name), Some(ip), "{name} was re-assigned");
    }
    let distinct: BTreeSet<&String> = settled.values().collect();
    assert_eq!(distinct.len(), POOL_SIZE, "no address is handed out twice");
    let status = wait_for("bulk's status", SHORT, || async {
        let status = pool_status(&client, "bulk").await;
        (status["ipv4"]["assigned"] == POOL_SIZE && status["ipv4"]["available"] == 0)
            .then_some(status)
    })
    .await;
    assert_eq!(condition(&status, "AddressesStranded")["status"], "False");

    // Ten Services go: ten waiting ones get their addresses, nobody else moves.
    let gone: Vec<String> = settled.keys().take(10).cloned().collect();
    let api = Api::<Service>::namespaced(client.clone(), "default");
    for name in &gone {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let last = wait_for("the freed addresses reassigned", LONG, || async {
        let map = address_map(&all_services(&client).await);
        (map.len() == POOL_SIZE && gone.iter().all(|g| !map.contains_key(g))).then_some(map)
    })
    .await;
    for (name, ip) in settled.iter().filter(|(n, _)| !gone.contains(n)) {
        assert_eq!(last.get(name), Some(ip), "{name} moved");
    }
    second.stop().await;
}

/// Issue 18 items 5 and 8: an address shown by two Services that may not share it (here a
/// hand edit of a waiting Service's status; after a restart, a late write of the old
/// controller) stays with the Service that showed it first; the other gets a Warning naming
/// it, stops showing the address, and waits — and it gets the address, without being edited,
/// once the first Service is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_conflicting_status_is_resolved_and_the_waiting_service_retried_on_delete() {
    let server = installed_server().await;
    let client = server.client().unwrap();
    apply_pool(
        &client,
        "one",
        json!({"addresses": ["10.50.0.1-10.50.0.1"]}),
    )
    .await;
    let controller = start(&server);
    svc_lb("default", "holder").create(&client).await;
    assert_eq!(wait_ip(&client, "holder").await, "10.50.0.1");
    svc_lb("default", "waiter").create(&client).await;
    let waiting = wait_reason(&client, "waiter", "PoolExhausted").await;

    // Someone writes the holder's address into the waiter's status.
    let patch = json!({
        "metadata": {"resourceVersion": waiting.resource_version()},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.50.0.1"}]}},
    });
    Api::<Service>::namespaced(client.clone(), "default")
        .patch_status("waiter", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let warning = wait_for("the AddressConflict Warning on waiter", SHORT, || async {
        events_of(&client, "default", "waiter")
            .await
            .remove("AddressConflict")
    })
    .await;
    assert!(
        warning[0].contains("also claimed by Service default/holder, which claimed it first"),
        "{warning:?}"
    );
    // The waiter no longer shows the address; the holder keeps it.
    let cleared = wait_for("the stale address gone from waiter", SHORT, || async {
        get_svc(&client, "default", "waiter")
            .await
            .filter(|s| ingress_of(s).is_empty())
    })
    .await;
    assert_eq!(reason_of(&cleared).as_deref(), Some("PoolExhausted"));
    let holder = get_svc(&client, "default", "holder").await.unwrap();
    assert_eq!(ingress_of(&holder), vec!["10.50.0.1".to_string()]);

    // The holder goes: the waiter, never edited, gets the address (the backoff is 300 s, so
    // only the release can have retried it).
    Api::<Service>::namespaced(client.clone(), "default")
        .delete("holder", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(wait_ip(&client, "waiter").await, "10.50.0.1");
    controller.stop().await;
}

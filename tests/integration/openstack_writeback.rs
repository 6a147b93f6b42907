//! The OpenStack provider through the real controller and the embedded API server, against the
//! Keystone + Octavia + Neutron mock: after every ensure the Service carries what
//! cloud-provider-openstack (OCCM) writes back, `loadbalancer.openstack.org/load-balancer-id`
//! and `loadbalancer.openstack.org/load-balancer-address` (the floating IP, or the VIP without
//! one), so a cluster going back to OCCM, or a tool reading them, finds its load balancer. The
//! write-back costs nothing on a no-op resync (no cloud call, no Service patch), and a Service
//! that OCCM served, carrying OCCM's id, is taken over as its own load balancer.
#![cfg(feature = "openstack")]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_lb::controller::{ControllerConfig, LoadBalancerController};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::Cloud;
use kube_lb_annotations::keys::openstack as key;
use kube_lb_apiserver::RunningApiServer;
use kube_lb_mock_openstack::MockOpenStack;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller_support::{eventually, get_svc, server, svc_lb};
use crate::provider_scenarios::scenarios::openstack::support::{
    self, CLUSTER, OccmService, build_occm_state,
};

/// How often the controller resyncs a converged Service here: often enough to watch several.
const RESYNC: Duration = Duration::from_millis(300);

/// The API server (node `n1` at 10.0.0.1, in the mock's private subnet), the mock and a
/// controller running the OpenStack provider against it.
struct Running {
    server: RunningApiServer,
    cloud: MockOpenStack,
    client: Client,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), kube::Error>>,
    _leading: tokio::sync::watch::Sender<bool>,
}

impl Running {
    async fn start() -> Running {
        let server = server().await;
        let h = support::harness().await;
        let client = server.client().unwrap();
        let mut config = ControllerConfig::new(Cloud::Openstack);
        config.backoff_base = Duration::from_millis(200);
        config.backoff_max = Duration::from_secs(2);
        config.resync = RESYNC;
        config.identity = "openstack-writeback-test".into();
        let metrics = Arc::new(Metrics::new());
        // One listing serves the whole test, as one serves a resync wave in production.
        let provider = h.provider.with_listing_refresh(Duration::from_secs(600));
        let controller = LoadBalancerController::new(
            client.clone(),
            Arc::new(provider),
            config,
            metrics.clone(),
        );
        let (leading_tx, leading) = tokio::sync::watch::channel(true);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(leading, shutdown.clone()));
        Running {
            server,
            cloud: h.cloud,
            client,
            metrics,
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

    /// Successful reconciles so far (`kube_lb_reconciles_total{result="success"}`).
    fn reconciles(&self) -> u64 {
        let text = self.metrics.encode().unwrap();
        text.lines()
            .find_map(|line| line.strip_prefix(r#"kube_lb_reconciles_total{result="success"} "#))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Waits for `count` more successful reconciles.
    async fn reconciled(&self, count: u64) {
        let target = self.reconciles() + count;
        eventually(&format!("{count} more reconciles"), || async {
            (self.reconciles() >= target).then_some(())
        })
        .await;
    }
}

/// The first ingress IP of `service`.
fn ingress_ip(service: &Service) -> Option<String> {
    service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_ref()?
        .first()?
        .ip
        .clone()
}

/// The mock's live load balancers named `name`.
fn load_balancers_named(cloud: &MockOpenStack, name: &str) -> Vec<Value> {
    cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| lb["name"] == name)
        .collect()
}

/// The floating IP on `lb`'s VIP port, if any.
fn floating_ip_of(cloud: &MockOpenStack, lb: &Value) -> Option<String> {
    cloud
        .floating_ips()
        .into_iter()
        .find(|fip| fip["port_id"] == lb["vip_port_id"])
        .and_then(|fip| fip["floating_ip_address"].as_str().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_id_and_address_are_written_back_as_occm_writes_them_at_no_cost_on_resync() {
    let r = Running::start().await;
    svc_lb("default", "web").create(&r.client).await;
    let id = r.annotation("web", key::LOAD_BALANCER_ID).await;
    let address = r.annotation("web", key::LOAD_BALANCER_ADDRESS).await;
    let lbs = load_balancers_named(&r.cloud, "kube_service_kubernetes_default_web");
    assert_eq!(lbs.len(), 1, "{lbs:#?}");
    assert_eq!(
        lbs[0]["id"],
        id.as_str(),
        "OCCM's annotation names the load balancer"
    );
    // An external Service: OCCM's address is the floating IP (ensureFloatingIP's answer),
    // which is also the ingress; the VIP stays behind it.
    let fip = floating_ip_of(&r.cloud, &lbs[0]).expect("a floating IP on the VIP");
    assert_eq!(address, fip);
    assert_ne!(address, lbs[0]["vip_address"].as_str().unwrap());
    assert_eq!(ingress_ip(&r.service("web").await), Some(fip.clone()));

    // Converged: resyncs change nothing. With the id written back the Service is still found
    // by name in the resync wave's one shared listing of the project (the four list calls a
    // wave costs whatever the number of Services), never read by id and observed live, so
    // the write-back adds no cloud call to a no-op resync; and the values are unchanged, so
    // the Service is not patched either.
    r.reconciled(2).await;
    // One more wave before the mark: the last converging sync's member update leaves the
    // pool's member cache to be refilled by the next read (seen in a loaded CI run).
    r.reconciled(1).await;
    let mark = r.cloud.journal_len();
    let version = r.service("web").await.metadata.resource_version;
    r.reconciled(3).await;
    const WAVE_LISTING: [&str; 4] = [
        "GET /load-balancer/v2/lbaas/loadbalancers",
        "GET /load-balancer/v2/lbaas/listeners",
        "GET /load-balancer/v2/lbaas/pools",
        "GET /networking/v2.0/floatingips",
    ];
    let calls: Vec<String> = r.cloud.journal()[mark..]
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(!calls.is_empty(), "resyncs ran");
    let extra: Vec<&String> = calls
        .iter()
        .filter(|call| !WAVE_LISTING.contains(&call.as_str()))
        .collect();
    assert_eq!(
        extra,
        Vec::<&String>::new(),
        "a no-op resync costs only the wave's listing: {calls:#?}"
    );
    assert_eq!(calls.len() % WAVE_LISTING.len(), 0, "{calls:#?}");
    assert_eq!(
        r.service("web").await.metadata.resource_version,
        version,
        "no Service write when the written-back values are unchanged"
    );

    // An internal Service is reached at its VIP: that is the address written back.
    svc_lb("default", "db")
        .annotate(
            "service.beta.kubernetes.io/openstack-internal-load-balancer",
            "true",
        )
        .create(&r.client)
        .await;
    let internal = r.annotation("db", key::LOAD_BALANCER_ADDRESS).await;
    let db = load_balancers_named(&r.cloud, "kube_service_kubernetes_default_db");
    assert_eq!(db.len(), 1, "{db:#?}");
    assert_eq!(internal, db[0]["vip_address"].as_str().unwrap());
    assert_eq!(floating_ip_of(&r.cloud, &db[0]), None);
    assert_eq!(
        r.annotation("db", key::LOAD_BALANCER_ID).await,
        db[0]["id"].as_str().unwrap()
    );

    // Deleted: the load balancer written back as the Service's own goes with it (it was
    // never taken for someone else's because its id is on the Service).
    Api::<Service>::namespaced(r.client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("web's load balancer to be deleted", || async {
        load_balancers_named(&r.cloud, "kube_service_kubernetes_default_web")
            .is_empty()
            .then_some(())
    })
    .await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_carrying_occms_id_takes_over_that_load_balancer_as_its_own() {
    let r = Running::start().await;
    let built = build_occm_state(
        &r.cloud,
        CLUSTER,
        &OccmService::new("web", vec![("n1".into(), "10.0.0.1".into())]),
    )
    .await;
    let occm_id = built.load_balancer["id"].as_str().unwrap().to_string();
    let occm_fip = built.floating_ip.clone().unwrap();
    // As OCCM left the Service: its id and address written back.
    svc_lb("default", "web")
        .annotate(key::LOAD_BALANCER_ID, &occm_id)
        .annotate(key::LOAD_BALANCER_ADDRESS, &occm_fip)
        .create(&r.client)
        .await;
    let recorded = r.annotation("web", key::CREATED_WITH).await;
    let recorded: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(recorded["load_balancer_id"], occm_id.as_str());
    eventually("web's address", || async {
        (ingress_ip(&r.service("web").await).as_deref() == Some(occm_fip.as_str())).then_some(())
    })
    .await;
    let service = r.service("web").await;
    let annotations = service.metadata.annotations.unwrap();
    assert_eq!(annotations[key::LOAD_BALANCER_ID], occm_id);
    assert_eq!(annotations[key::LOAD_BALANCER_ADDRESS], occm_fip);
    assert_eq!(
        r.cloud.load_balancers().len(),
        1,
        "OCCM's load balancer is used, no second one made"
    );

    // From now on it is found by name like any of kube-lb's: no read by id on a resync.
    r.reconciled(2).await;
    let mark = r.cloud.journal_len();
    r.reconciled(3).await;
    let by_id = format!("/loadbalancers/{occm_id}");
    let reads_by_id: Vec<String> = r.cloud.journal()[mark..]
        .iter()
        .filter(|e| e.path.ends_with(&by_id))
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert_eq!(reads_by_id, Vec::<String>::new());

    // Taken over as the Service's own, as OCCM's owner Service had it: a port change is
    // applied to it, and deleting the Service deletes it.
    Api::<Service>::namespaced(r.client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"ports": [{"name": "http", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}})),
        )
        .await
        .unwrap();
    eventually("the listener on port 8080", || async {
        r.cloud
            .listeners()
            .iter()
            .any(|l| l["protocol_port"] == 8080)
            .then_some(())
    })
    .await;
    Api::<Service>::namespaced(r.client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "OCCM's load balancer to be deleted with the Service",
        || async { r.cloud.load_balancers().is_empty().then_some(()) },
    )
    .await;
    r.stop().await;
}

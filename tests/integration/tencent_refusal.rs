//! A refused change to an existing CLB through the real controller and the embedded API
//! server, against the CLB mock: TKE refuses to move a CLB to another subnet, so kube-lb keeps
//! the CLB serving as it is, and the Service keeps showing its address while the refusal is
//! reported (a Warning event and the Service's condition). The address comes back even when
//! the Service's status was lost: wiped while no controller ran (a fresh controller learns it
//! from the provider's refusal), or wiped while the refusal stands (written again from what
//! the refusal reported, without a provider call).
#![cfg(feature = "tencent")]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube_lb::controller::{ControllerConfig, LoadBalancerController};
use kube_lb::metrics::Metrics;
use kube_lb_annotations::Cloud;
use kube_lb_mock_tencent::{SUBNET_ID, SUBNET_ID_2};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::controller_support::{events_of, eventually, get_svc, ingress_of, server, svc_lb};
use crate::provider_scenarios::scenarios::tencent::support;

const SUBNET_KEY: &str = "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid";
const CONDITION: &str = "kube-lb.io/LoadBalancerReady";

/// One controller process: a Tencent provider on the shared mock, nothing remembered from an
/// earlier one.
struct Controller {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), kube::Error>>,
    _leading: tokio::sync::watch::Sender<bool>,
}

impl Controller {
    fn start(client: &Client, h: &support::Harness) -> Controller {
        let mut config = ControllerConfig::new(Cloud::Tencent);
        config.backoff_base = Duration::from_millis(200);
        config.backoff_max = Duration::from_secs(2);
        config.identity = "tencent-refusal-test".into();
        let controller = LoadBalancerController::new(
            client.clone(),
            Arc::new(support::provider_for_same_cloud(h)),
            config,
            Arc::new(Metrics::new()),
        );
        let (leading_tx, leading) = tokio::sync::watch::channel(true);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(leading, shutdown.clone()));
        Controller {
            shutdown,
            task,
            _leading: leading_tx,
        }
    }

    /// Stops it and waits until it has: nothing it does can land after this returns.
    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("the controller stops")
            .expect("the controller task does not panic")
            .expect("the controller ends without error");
    }
}

/// kube-lb's condition on `service`, if shown.
fn condition(service: &Service) -> Option<Condition> {
    service
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION)
        .cloned()
}

/// Waits until default/web shows `address` and a condition with `reason`, returning it.
async fn shown(client: &Client, address: &str, reason: &str) -> Condition {
    eventually(
        &format!("default/web showing {address} and reason {reason}"),
        || async {
            let service = get_svc(client, "default", "web").await?;
            let condition = condition(&service).filter(|c| c.reason == reason)?;
            (ingress_of(&service) == [address]).then_some(condition)
        },
    )
    .await
}

/// Removes the address and the condition, as a lost or wiped status leaves the Service.
async fn wipe_status(client: &Client) {
    // What the write left, not a later read: a running controller may already be writing the
    // status back.
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": null}, "conditions": null}}),
            ),
        )
        .await
        .unwrap();
    assert!(ingress_of(&service).is_empty(), "the address is wiped");
    assert!(condition(&service).is_none(), "the condition is wiped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subnet_switch_keeps_the_clb_serving_and_its_address_shown() {
    let server = server().await;
    let client = server.client().unwrap();
    let h = support::harness().await;
    let first = Controller::start(&client, &h);
    svc_lb("default", "web")
        .annotate(SUBNET_KEY, SUBNET_ID)
        .create(&client)
        .await;
    let address = eventually("an address on default/web", || async {
        ingress_of(&get_svc(&client, "default", "web").await?)
            .into_iter()
            .next()
    })
    .await;
    shown(&client, &address, "Provisioned").await;
    let uid = get_svc(&client, "default", "web")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let clbs = support::clbs_for(&h.cloud, &uid);
    assert_eq!(clbs.len(), 1);
    assert_eq!(clbs[0]["SubnetId"], SUBNET_ID);

    // The controller is gone (a restart) when the status is lost and the Service moved to
    // another subnet: the next controller knows nothing but what the cloud and the Service say.
    first.stop().await;
    wipe_status(&client).await;
    Api::<Service>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SUBNET_KEY: SUBNET_ID_2}}})),
        )
        .await
        .unwrap();
    let second = Controller::start(&client, &h);
    let refused = shown(&client, &address, "CloudRejected").await;
    assert_eq!(refused.status, "False");
    for part in [
        SUBNET_KEY,
        SUBNET_ID,
        SUBNET_ID_2,
        "keeps serving",
        &address,
    ] {
        assert!(
            refused.message.contains(part),
            "{part:?} in {}",
            refused.message
        );
    }
    let warnings = eventually(
        "a SyncLoadBalancerFailed event naming the refusal",
        || async {
            events_of(&client, "default", "web")
                .await
                .remove("SyncLoadBalancerFailed")
                .filter(|notes| notes.iter().any(|n| n.contains(SUBNET_KEY)))
        },
    )
    .await;
    assert!(
        warnings.iter().any(|n| n.contains(SUBNET_ID_2)),
        "{warnings:?}"
    );
    // Nothing was switched or rebuilt: the one CLB is where it was.
    assert_eq!(support::clbs_for(&h.cloud, &uid), clbs);

    // Wiped again while the refusal stands: written back from what the refusal reported,
    // with no cloud call at all.
    let mark = h.cloud.journal().len();
    wipe_status(&client).await;
    let again = shown(&client, &address, "CloudRejected").await;
    assert_eq!(again.message, refused.message);
    assert_eq!(
        h.cloud.journal().len(),
        mark,
        "the refusal was not asked again"
    );

    // The annotation set back: the CLB is what the Service asks for, and the refusal clears.
    Api::<Service>::namespaced(client.clone(), "default")
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {SUBNET_KEY: SUBNET_ID}}})),
        )
        .await
        .unwrap();
    let ready = shown(&client, &address, "Provisioned").await;
    assert_eq!(ready.status, "True");
    assert_eq!(support::clbs_for(&h.cloud, &uid), clbs);
    second.stop().await;
}

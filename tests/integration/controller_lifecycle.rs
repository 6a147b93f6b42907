//! The controller's Service lifecycle against the in-memory API server over HTTP: finalizer,
//! status, updates, no-op resyncs, requested addresses, type changes, deletion, classes and
//! annotation errors. Each test asserts both the API state and the provider calls.
#![allow(clippy::unwrap_used)]

use crate::controller_support;

use std::time::Duration;

use controller_support::*;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube_lb::controller::{FINALIZER, Outcome, ServiceName};
use kube_lb_annotations::Cloud;
use kube_lb_provider_core::LoadBalancerProvider;
use serde_json::json;

#[tokio::test]
async fn create_adds_finalizer_before_any_provider_call_then_writes_status() {
    let (_server, client, running) = server_and_controller().await;

    svc_lb("default", "web").create(&client).await;
    let address = wait_address(&client, "default", "web").await;

    assert!(
        address.starts_with("127.240."),
        "address {address} from the pool"
    );
    let svc = get_svc(&client, "default", "web").await.unwrap();
    assert!(svc.finalizers().iter().any(|f| f == FINALIZER));
    let ensures = running.provider.ensures_of("default/web");
    assert!(!ensures.is_empty());
    assert!(
        ensures.iter().all(|c| matches!(
            c,
            Call::Ensure {
                finalizer_present: true,
                ..
            }
        )),
        "every ensure happened with the finalizer in place: {ensures:?}"
    );
    let events = eventually("Ensured event", || async {
        let events = events_of(&client, "default", "web").await;
        events.contains_key("EnsuredLoadBalancer").then_some(events)
    })
    .await;
    assert!(events.contains_key("EnsuringLoadBalancer"), "{events:?}");
    running.stop().await;
}

#[tokio::test]
async fn port_change_reaches_the_provider_and_keeps_the_address() {
    let (_server, client, running) = server_and_controller().await;
    svc_lb("default", "web").create(&client).await;
    let address = wait_address(&client, "default", "web").await;

    merge_patch_svc(
        &client,
        "default",
        "web",
        json!({"spec": {"ports": [{"name": "http", "port": 8443, "targetPort": 8080, "protocol": "TCP"}]}}),
    )
    .await;

    let lbs = running.provider.inner.subscribe();
    eventually("the provider to serve port 8443", || async {
        lbs.borrow()
            .values()
            .any(|lb| lb.ports.iter().any(|p| p.port == 8443))
            .then_some(())
    })
    .await;
    let last = running.provider.ensures_of("default/web").pop().unwrap();
    assert!(
        matches!(last, Call::Ensure { ref ports, .. } if ports == &[8443]),
        "{last:?}"
    );
    assert_eq!(wait_address(&client, "default", "web").await, address);
    running.stop().await;
}

#[tokio::test]
async fn a_no_op_resync_makes_no_mutating_call_and_no_write() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    config.resync = Duration::from_millis(200);
    let running = start_controller(&server, config, true);
    svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;
    // Let the reconcile triggered by our own status write finish.
    let settled = eventually("two ensures", || async {
        (running.provider.ensures_of("default/web").len() >= 2).then_some(())
    })
    .await;
    let () = settled;
    let before = running.counter.snapshot();
    let version = get_svc(&client, "default", "web")
        .await
        .unwrap()
        .resource_version();
    let ensures_before = running.provider.ensures_of("default/web").len();

    eventually("three more periodic resyncs", || async {
        (running.provider.ensures_of("default/web").len() >= ensures_before + 3).then_some(())
    })
    .await;

    let delta = running.counter.snapshot().since(&before);
    assert_eq!(delta.mutations(), 0, "resyncs mutated: {delta:?}");
    assert!(delta.operation("get") >= 3, "resyncs observed: {delta:?}");
    let after = get_svc(&client, "default", "web")
        .await
        .unwrap()
        .resource_version();
    assert_eq!(version, after, "a resync wrote to the Service");
    running.stop().await;
}

#[tokio::test]
async fn load_balancer_ip_is_honoured_or_refused_as_a_user_error() {
    let (server, client, running) = server_and_controller().await;

    svc_lb("default", "pinned")
        .lb_ip("127.240.0.77")
        .create(&client)
        .await;
    assert_eq!(
        wait_address(&client, "default", "pinned").await,
        "127.240.0.77"
    );

    svc_lb("default", "outside")
        .lb_ip("192.0.2.10")
        .create(&client)
        .await;
    svc_lb("default", "taken")
        .lb_ip("127.240.0.77")
        .create(&client)
        .await;
    let mut outcomes = running.outcomes.clone();
    let name = |n: &str| ServiceName {
        namespace: "default".into(),
        name: n.into(),
    };
    let settled = tokio::time::timeout(
        CEILING,
        outcomes.wait_for(|o| {
            matches!(o.get(&name("outside")), Some(Outcome::UserError(_)))
                // An address held by another Service may be freed: retried, not a user error.
                && matches!(o.get(&name("taken")), Some(Outcome::Retrying(_)))
        }),
    )
    .await
    .expect("both refused")
    .unwrap()
    .clone();
    let text = |n: &str| match settled.get(&name(n)) {
        Some(Outcome::UserError(t) | Outcome::Retrying(t)) => t.clone(),
        other => panic!("{other:?}"),
    };
    assert!(
        text("outside").contains("not in the local address pool"),
        "{}",
        text("outside")
    );
    assert!(
        text("taken").contains("in use by Service default/pinned"),
        "{}",
        text("taken")
    );
    for refused in ["outside", "taken"] {
        let svc = get_svc(&client, "default", refused).await.unwrap();
        assert!(ingress_of(&svc).is_empty(), "{refused} got an address");
        let events = eventually("a Warning event", || async {
            let events = events_of(&client, "default", refused).await;
            events.get("SyncLoadBalancerFailed").cloned()
        })
        .await;
        assert!(
            events
                .iter()
                .any(|n| n.contains("Error syncing load balancer")),
            "{events:?}"
        );
    }

    // User errors are not retried until the Service changes: a node change re-syncs every
    // load balancer, but not the refused ones.
    let refused_calls = running.provider.ensures_of("default/outside").len();
    let pinned_calls = running.provider.ensures_of("default/pinned").len();
    server.seed(node("n2")).unwrap();
    eventually(
        "the pinned Service to be re-synced for the new node",
        || async {
            (running.provider.ensures_of("default/pinned").len() > pinned_calls).then_some(())
        },
    )
    .await;
    assert_eq!(
        running.provider.ensures_of("default/outside").len(),
        refused_calls
    );

    // Changing the Service is what retries it.
    merge_patch_svc(
        &client,
        "default",
        "outside",
        json!({"spec": {"loadBalancerIP": "127.240.0.78"}}),
    )
    .await;
    assert_eq!(
        wait_address(&client, "default", "outside").await,
        "127.240.0.78"
    );
    running.stop().await;
}

#[tokio::test]
async fn type_change_away_from_load_balancer_deletes_clears_status_and_finalizer() {
    let (_server, client, running) = server_and_controller().await;
    let created = svc_lb("default", "web").create(&client).await;
    wait_address(&client, "default", "web").await;

    merge_patch_svc(&client, "default", "web", retype_to_cluster_ip()).await;

    let svc = eventually("finalizer and status gone", || async {
        let svc = get_svc(&client, "default", "web").await?;
        (svc.finalizers().is_empty() && ingress_of(&svc).is_empty()).then_some(svc)
    })
    .await;
    assert_eq!(svc.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    let deletes = running.provider.deletes_of("default/web");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    let key = kube_lb::controller::service_key(&created).unwrap();
    assert_eq!(running.provider.status(&key).await.unwrap(), None);
    let events = eventually("Deleted event", || async {
        let events = events_of(&client, "default", "web").await;
        events.contains_key("DeletedLoadBalancer").then_some(events)
    })
    .await;
    assert!(events.contains_key("DeletingLoadBalancer"));
    running.stop().await;
}

#[tokio::test]
async fn delete_runs_provider_delete_then_removes_finalizer_then_object_is_gone() {
    let (_server, client, running) = server_and_controller().await;
    let created = svc_lb("default", "web").create(&client).await;
    let address = wait_address(&client, "default", "web").await;

    Api::<Service>::namespaced(client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Service to disappear", || async {
        get_svc(&client, "default", "web")
            .await
            .is_none()
            .then_some(())
    })
    .await;

    let deletes = running.provider.deletes_of("default/web");
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert!(
        matches!(
            deletes[0],
            Call::Delete {
                finalizer_present: true,
                ..
            }
        ),
        "the provider deleted while the finalizer still held the object"
    );
    let key = kube_lb::controller::service_key(&created).unwrap();
    assert_eq!(running.provider.status(&key).await.unwrap(), None);
    // The address went back to the pool: the next Service gets it.
    svc_lb("default", "next").create(&client).await;
    assert_eq!(wait_address(&client, "default", "next").await, address);
    running.stop().await;
}

#[tokio::test]
async fn deleting_a_namespace_releases_its_load_balancers_before_the_namespace_goes() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;
    use kube::runtime::wait::{await_condition, conditions};

    let (_server, client, running) = server_and_controller().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let team = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap(),
        )
        .await
        .unwrap();
    svc_lb("team", "a").create(&client).await;
    svc_lb("team", "b").create(&client).await;
    let addresses = [
        wait_address(&client, "team", "a").await,
        wait_address(&client, "team", "b").await,
    ];

    namespaces
        .delete("team", &DeleteParams::default())
        .await
        .unwrap();
    // The Services' finalizer holds the namespace until the provider has released both.
    tokio::time::timeout(
        Duration::from_secs(20),
        await_condition(
            namespaces.clone(),
            "team",
            conditions::is_deleted(&team.uid().unwrap()),
        ),
    )
    .await
    .expect("the namespace goes once its load balancers are released")
    .unwrap();
    for name in ["team/a", "team/b"] {
        let deletes = running.provider.deletes_of(name);
        assert_eq!(deletes.len(), 1, "{name}: {deletes:?}");
        assert!(
            matches!(
                deletes[0],
                Call::Delete {
                    finalizer_present: true,
                    ..
                }
            ),
            "{name}: released after its Service was gone"
        );
    }
    // The addresses went back to the pool: the next Service gets the lower of the two.
    let lowest = addresses
        .iter()
        .map(|a| a.parse::<std::net::IpAddr>().unwrap())
        .min()
        .unwrap();
    svc_lb("default", "next").create(&client).await;
    let reused = wait_address(&client, "default", "next").await;
    assert_eq!(reused, lowest.to_string(), "{addresses:?}");
    running.stop().await;
}

#[tokio::test]
async fn services_of_another_load_balancer_class_are_ignored() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    config.load_balancer_class = Some("kube-lb.io/test".into());
    config.default_class = true;
    let running = start_controller(&server, config, true);

    svc_lb("default", "other")
        .class("example.com/other")
        .create(&client)
        .await;
    svc_lb("default", "ours")
        .class("kube-lb.io/test")
        .create(&client)
        .await;
    svc_lb("default", "unclassed").create(&client).await;
    wait_address(&client, "default", "ours").await;
    wait_address(&client, "default", "unclassed").await;

    let other = get_svc(&client, "default", "other").await.unwrap();
    assert!(other.finalizers().is_empty(), "{:?}", other.finalizers());
    assert!(ingress_of(&other).is_empty());
    assert!(running.provider.ensures_of("default/other").is_empty());
    assert!(events_of(&client, "default", "other").await.is_empty());
    running.stop().await;
}

#[tokio::test]
async fn unclassed_services_are_left_alone_when_not_the_default() {
    let server = server().await;
    let client = server.client().unwrap();
    let mut config = test_config();
    config.load_balancer_class = Some("kube-lb.io/test".into());
    config.default_class = false;
    let running = start_controller(&server, config, true);
    svc_lb("default", "unclassed").create(&client).await;
    svc_lb("default", "ours")
        .class("kube-lb.io/test")
        .create(&client)
        .await;
    wait_address(&client, "default", "ours").await;
    let unclassed = get_svc(&client, "default", "unclassed").await.unwrap();
    assert!(unclassed.finalizers().is_empty());
    assert!(running.provider.ensures_of("default/unclassed").is_empty());
    running.stop().await;
}

#[tokio::test]
async fn bad_annotation_is_a_warning_event_with_the_lint_text_and_no_provider_call() {
    let (_server, client, running) = server_and_controller().await;
    // kube-apiserver itself refuses bad source ranges (field or annotation); a misordered
    // topology list is the annotation only kube-lb judges.
    let bad = svc_lb("default", "bad").annotate(
        "service.kubernetes.io/topology-keys",
        "*,kubernetes.io/hostname",
    );
    let expected = kube_lb_annotations::parse(Cloud::Local, &bad.service())
        .expect_err("the fixture must be invalid");
    bad.create(&client).await;
    svc_lb("default", "good").create(&client).await;

    let notes = eventually("the Warning event", || async {
        events_of(&client, "default", "bad")
            .await
            .get("SyncLoadBalancerFailed")
            .cloned()
    })
    .await;
    // Exactly the lines `kube-lb lint` prints for this Service.
    for error in expected.errors() {
        assert!(
            notes.iter().any(|n| n.contains(&error.to_string())),
            "{notes:?} lacks {error}"
        );
    }
    wait_address(&client, "default", "good").await;
    assert!(
        running.provider.ensures_of("default/bad").is_empty(),
        "provider called for an invalid Service"
    );
    let svc = get_svc(&client, "default", "bad").await.unwrap();
    assert!(ingress_of(&svc).is_empty());
    running.stop().await;
}

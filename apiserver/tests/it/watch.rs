//! Watches over real HTTP: kube-rs watchers and reflectors across a forced 410 relist, a
//! server restart with persistence and streaming lists; raw watch semantics.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{eventually, lb_service, list_version};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube_lb_apiserver::{ApiServer, FaultAction, FaultRule, Verb};
use serde_json::json;

const CEILING: Duration = Duration::from_secs(20);

/// name -> resourceVersion, as the server has it.
async fn server_view(api: &Api<Service>) -> BTreeMap<String, String> {
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            (
                s.metadata.name.unwrap(),
                s.metadata.resource_version.unwrap(),
            )
        })
        .collect()
}

fn reader_view(store: &Store<Service>) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .map(|s| {
            (
                s.metadata.name.clone().unwrap(),
                s.metadata.resource_version.clone().unwrap(),
            )
        })
        .collect()
}

/// Runs a reflector in the background; returns its store and a counter of `Init` events
/// (one per full (re)list).
fn spawn_reflector(
    api: Api<Service>,
    config: watcher::Config,
) -> (Store<Service>, Arc<AtomicUsize>) {
    let (reader, writer) = reflector::store();
    let inits = Arc::new(AtomicUsize::new(0));
    let counter = inits.clone();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff());
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Init) = event {
                counter.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    (reader, inits)
}

async fn converged(api: &Api<Service>, store: &Store<Service>, what: &str) {
    eventually(CEILING, what, || async {
        let want = server_view(api).await;
        (reader_view(store) == want).then_some(())
    })
    .await;
}

#[tokio::test]
async fn reflector_relists_after_410() {
    let server = ApiServer::builder()
        .history(5)
        .max_watch(Duration::from_millis(300))
        .start()
        .await
        .unwrap();
    let api: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    for i in 0..3 {
        api.create(&PostParams::default(), &lb_service(&format!("svc-{i}"), 80))
            .await
            .unwrap();
    }
    let (store, inits) = spawn_reflector(api.clone(), watcher::Config::default());
    converged(&api, &store, "initial sync").await;
    assert_eq!(inits.load(Ordering::SeqCst), 1);

    // Refuse watches, wait until the current one has ended and a re-watch was refused, then
    // make more changes than the history holds.
    server
        .faults()
        .add(FaultRule::new(FaultAction::InternalError).verb(Verb::Watch));
    eventually(CEILING, "a refused re-watch", || async {
        (server.faults().injected() > 0).then_some(())
    })
    .await;
    for i in 3..10 {
        api.create(&PostParams::default(), &lb_service(&format!("svc-{i}"), 80))
            .await
            .unwrap();
    }
    api.delete("svc-0", &DeleteParams::default()).await.unwrap();
    api.patch(
        "svc-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"changed": "yes"}}})),
    )
    .await
    .unwrap();
    server.faults().clear();

    // The watch resumes from a version older than the history: 410, relist, same state.
    converged(&api, &store, "state after relist").await;
    eventually(CEILING, "a second Init (relist)", || async {
        (inits.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    assert!(!reader_view(&store).contains_key("svc-0"));
    let svc1 = store
        .state()
        .into_iter()
        .find(|s| s.metadata.name.as_deref() == Some("svc-1"))
        .unwrap();
    assert_eq!(svc1.metadata.labels.as_ref().unwrap()["changed"], "yes");
}

#[tokio::test]
async fn reflector_survives_restart_with_persistence() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let first = ApiServer::builder()
        .state_file(&state)
        .start()
        .await
        .unwrap();
    let addr = first.addr();
    let api: Api<Service> = Api::namespaced(first.client().unwrap(), "default");
    let mut before = BTreeMap::new();
    for i in 0..5 {
        let svc = api
            .create(
                &PostParams::default(),
                &lb_service(&format!("keep-{i}"), 80),
            )
            .await
            .unwrap();
        before.insert(svc.metadata.name.clone().unwrap(), svc);
    }
    let (store, _inits) = spawn_reflector(api.clone(), watcher::Config::default());
    converged(&api, &store, "sync with the first server").await;
    let last_rv = first.store().current_version();
    first.shutdown().await;

    let second = ApiServer::builder()
        .listen(addr)
        .state_file(&state)
        .start()
        .await
        .unwrap();
    assert_eq!(second.store().current_version(), last_rv);
    let api2: Api<Service> = Api::namespaced(second.client().unwrap(), "default");
    // Objects, uids and allocations survived.
    for (name, old) in &before {
        let now = api2.get(name).await.unwrap();
        assert_eq!(now.metadata.uid, old.metadata.uid);
        assert_eq!(
            now.spec.as_ref().unwrap().cluster_ip,
            old.spec.as_ref().unwrap().cluster_ip
        );
    }
    let fresh = api2
        .create(&PostParams::default(), &lb_service("fresh", 80))
        .await
        .unwrap();
    let fresh_rv: u64 = fresh
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(fresh_rv > last_rv);
    let fresh_spec = fresh.spec.unwrap();
    for old in before.values() {
        let old_spec = old.spec.as_ref().unwrap();
        assert_ne!(fresh_spec.cluster_ip, old_spec.cluster_ip);
        assert_ne!(
            fresh_spec.ports.as_ref().unwrap()[0].node_port,
            old_spec.ports.as_ref().unwrap()[0].node_port
        );
    }
    api2.delete("keep-0", &DeleteParams::default())
        .await
        .unwrap();
    // The reflector (still pointed at the same address) catches up with the new server.
    converged(&api2, &store, "sync with the restarted server").await;
    second.shutdown().await;
}

#[tokio::test]
async fn streaming_list_watcher_syncs() {
    let server = ApiServer::builder().start().await.unwrap();
    let api: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    for i in 0..4 {
        api.create(&PostParams::default(), &lb_service(&format!("s-{i}"), 80))
            .await
            .unwrap();
    }
    let (store, inits) = spawn_reflector(api.clone(), watcher::Config::default().streaming_lists());
    converged(&api, &store, "streaming initial list").await;
    api.create(&PostParams::default(), &lb_service("later", 80))
        .await
        .unwrap();
    converged(&api, &store, "live event after the streaming list").await;
    assert_eq!(inits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn raw_watch_semantics() {
    let server = ApiServer::builder()
        .history(3)
        .bookmark_interval(Duration::from_millis(50))
        .start()
        .await
        .unwrap();
    let api: Api<Service> = Api::namespaced(server.client().unwrap(), "default");
    let start = list_version(&api).await;

    // A selector watch sees an object that stops matching as DELETED.
    let mut labelled = lb_service("sel", 80);
    labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
    let stream = api
        .watch(&WatchParams::default().labels("team=a"), &start)
        .await
        .unwrap();
    futures::pin_mut!(stream);
    api.create(&PostParams::default(), &labelled).await.unwrap();
    api.patch(
        "sel",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "b"}}})),
    )
    .await
    .unwrap();
    // Bookmarks (every 50 ms) may fall anywhere between the two events on a loaded machine.
    let mut kinds = Vec::new();
    while kinds.len() < 2 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Added(s) => kinds.push(format!("ADDED {}", s.metadata.name.unwrap())),
            WatchEvent::Modified(s) => kinds.push(format!("MODIFIED {}", s.metadata.name.unwrap())),
            WatchEvent::Deleted(s) => kinds.push(format!("DELETED {}", s.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(kinds, ["ADDED sel", "DELETED sel"]);

    // More changes than the history holds: an old version yields a 410 ERROR event.
    for i in 0..5 {
        api.create(&PostParams::default(), &lb_service(&format!("x-{i}"), 80))
            .await
            .unwrap();
    }
    let stream = api.watch(&WatchParams::default(), &start).await.unwrap();
    futures::pin_mut!(stream);
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected 410, got {other:?}"),
    }
    // And a list at that exact version is 410 as well.
    let err = api
        .list(
            &ListParams::default()
                .at(&start)
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 410),
        "{err:?}"
    );
}

//! One Event, two APIs, as in kube-apiserver: an Event written through `core/v1` or
//! `events.k8s.io/v1` is read, listed, watched, patched and deleted through the other, as the
//! same object (name, uid, creationTimestamp, resourceVersion), with the fields renamed as
//! upstream's conversion renames them. Each API validates writes in its own terms and selects
//! by its own field names. Driven over HTTP by raw requests, kube-rs, kubectl and the Python
//! client.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use serde_json::{Value, json};

use crate::common::{self, call, get, merge_patch, post};

const CORE: &str = "/api/v1/namespaces/default/events";
const V1: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

/// An Event as kube-rs' recorder writes it through events.k8s.io/v1.
fn recorder_event(name: &str, regarding: &str) -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
           "metadata": {"name": name},
           "regarding": {"apiVersion": "v1", "kind": "Service", "name": regarding,
                         "namespace": "default"},
           "note": "Ensured load balancer", "reason": "EnsuredLoadBalancer", "type": "Normal",
           "action": "Ensure", "eventTime": "2026-01-01T00:00:00.000000Z",
           "reportingController": "service-controller", "reportingInstance": "kube-lb-0"})
}

/// An Event as a kubelet writes it through core/v1 (the old style: no eventTime).
fn kubelet_event(name: &str, regarding: &str) -> Value {
    json!({"metadata": {"name": name},
           "involvedObject": {"apiVersion": "v1", "kind": "Service", "name": regarding,
                              "namespace": "default"},
           "message": "Pulled image", "reason": "Pulled", "type": "Normal",
           "source": {"component": "kubelet", "host": "n1"}, "count": 3,
           "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:02:00Z"})
}

/// `event` (events.k8s.io/v1 form) as a core/v1 client would write it.
fn to_core_form(event: &Value) -> Value {
    let mut core = event.clone();
    let object = core.as_object_mut().unwrap();
    for (v1_name, core_name) in [
        ("regarding", "involvedObject"),
        ("note", "message"),
        ("reportingController", "reportingComponent"),
    ] {
        if let Some(value) = object.remove(v1_name) {
            object.insert(core_name.to_string(), value);
        }
    }
    object.insert("apiVersion".into(), json!("v1"));
    core
}

fn url(server: &RunningApiServer, collection: &str, name: &str) -> String {
    match name {
        "" => format!("{}{collection}", server.url()),
        name => format!("{}{collection}/{name}", server.url()),
    }
}

async fn create(server: &RunningApiServer, collection: &str, event: Value) -> Value {
    let http = reqwest::Client::new();
    let (code, body) = post(&http, &url(server, collection, ""), event).await;
    assert_eq!(code, 201, "{body}");
    body
}

async fn read(server: &RunningApiServer, collection: &str, name: &str) -> (u16, Value) {
    get(&reqwest::Client::new(), &url(server, collection, name)).await
}

async fn delete(server: &RunningApiServer, collection: &str, name: &str) -> u16 {
    let http = reqwest::Client::new();
    let target = url(server, collection, name);
    call(&http, reqwest::Method::DELETE, &target, "", None)
        .await
        .0
}

/// The metadata both APIs must agree on.
fn identity(object: &Value) -> Value {
    let meta = &object["metadata"];
    json!([
        meta["name"],
        meta["namespace"],
        meta["uid"],
        meta["creationTimestamp"],
        meta["resourceVersion"]
    ])
}

/// The field of each cause of a 422, in order.
fn cause_fields(status: &Value) -> Vec<&str> {
    status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect()
}

fn sorted_names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn an_event_written_through_one_api_is_read_through_the_other() {
    let server = ApiServer::builder().start().await.unwrap();
    let core_made = create(&server, CORE, kubelet_event("pulled", "web")).await;
    let v1_made = create(&server, V1, recorder_event("ensured", "web")).await;

    // core/v1 -> events.k8s.io/v1: renamed fields, nothing made up, the same object.
    let (code, seen) = read(&server, V1, "pulled").await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["apiVersion"], "events.k8s.io/v1");
    assert_eq!(seen["regarding"], core_made["involvedObject"]);
    assert_eq!(seen["note"], "Pulled image");
    assert_eq!(
        seen["deprecatedSource"],
        json!({"component": "kubelet", "host": "n1"})
    );
    assert_eq!(seen["deprecatedCount"], 3);
    assert_eq!(seen["deprecatedFirstTimestamp"], "2026-01-01T00:00:00Z");
    assert_eq!(seen["deprecatedLastTimestamp"], "2026-01-01T00:02:00Z");
    assert_eq!(
        (&seen["reason"], &seen["type"]),
        (&json!("Pulled"), &json!("Normal"))
    );
    for core_only in [
        "involvedObject",
        "message",
        "source",
        "count",
        "firstTimestamp",
    ] {
        assert!(seen.get(core_only).is_none(), "{core_only} in {seen}");
    }
    assert_eq!(identity(&seen), identity(&core_made));

    // events.k8s.io/v1 -> core/v1.
    let (code, seen) = read(&server, CORE, "ensured").await;
    assert_eq!(code, 200, "{seen}");
    assert_eq!(seen["apiVersion"], "v1");
    assert_eq!(seen["involvedObject"], v1_made["regarding"]);
    assert_eq!(seen["message"], "Ensured load balancer");
    assert_eq!(seen["reportingComponent"], "service-controller");
    assert_eq!(seen["reportingInstance"], "kube-lb-0");
    assert_eq!(seen["eventTime"], "2026-01-01T00:00:00.000000Z");
    assert_eq!(seen["action"], "Ensure");
    // Upstream's conversion sets no source, count or timestamps the writer did not send.
    for absent in ["source", "count", "firstTimestamp", "lastTimestamp", "note"] {
        assert!(seen.get(absent).is_none(), "{absent} in {seen}");
    }
    assert_eq!(identity(&seen), identity(&v1_made));

    // Both lists hold both, at one list resourceVersion.
    let (_, core_list) = read(&server, CORE, "").await;
    let (_, v1_list) = read(&server, V1, "").await;
    assert_eq!(sorted_names(&core_list), ["ensured", "pulled"]);
    assert_eq!(sorted_names(&v1_list), ["ensured", "pulled"]);
    assert_eq!(
        core_list["metadata"]["resourceVersion"],
        v1_list["metadata"]["resourceVersion"]
    );
    assert_eq!(v1_list["kind"], "EventList");
    assert_eq!(v1_list["apiVersion"], "events.k8s.io/v1");

    // kube-rs' typed clients decode both forms.
    let client = server.client().unwrap();
    let typed_v1: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let pulled = typed_v1.get("pulled").await.unwrap();
    assert_eq!(pulled.regarding.unwrap().name.as_deref(), Some("web"));
    let typed_core: Api<CoreEvent> = Api::namespaced(client, "default");
    let ensured = typed_core.get("ensured").await.unwrap();
    assert_eq!(
        ensured.reporting_component.as_deref(),
        Some("service-controller")
    );

    if let Some((_dir, rig)) = kubectl_on(
        &server,
        "an_event_written_through_one_api_is_read_through_the_other",
    ) {
        let listed: Value = serde_json::from_str(
            &common::ok(&rig, &["get", "events.v1.events.k8s.io", "-o", "json"]).await,
        )
        .unwrap();
        let notes: Vec<&str> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["note"].as_str().unwrap())
            .collect();
        assert_eq!(notes, ["Ensured load balancer", "Pulled image"]);
        let core: Value =
            serde_json::from_str(&common::ok(&rig, &["get", "events", "-o", "json"]).await)
                .unwrap();
        assert_eq!(sorted_names(&core), ["ensured", "pulled"]);
        // The events.k8s.io/v1 table prints the Event written through core/v1 too.
        let table = common::ok(&rig, &["get", "events.v1.events.k8s.io"]).await;
        assert!(
            table.contains("service/web") && table.contains("Pulled image"),
            "{table}"
        );
        // `kubectl events` reads core/v1 and prints the recorder's Event too.
        let printed = common::ok(&rig, &["events", "--for", "service/web"]).await;
        assert!(
            printed.contains("EnsuredLoadBalancer") && printed.contains("Pulled"),
            "{printed}"
        );
    }
    server.shutdown().await;
}

/// A kubeconfig for `server` (in a directory that lives as long as the returned guard) when
/// kubectl is installed; a loud skip otherwise.
fn kubectl_on(server: &RunningApiServer, test: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    if !common::kubectl_available(test) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    Some((dir, kubeconfig))
}

#[tokio::test]
async fn updates_and_deletes_through_either_api_reach_the_other() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    create(&server, V1, recorder_event("ensured", "web")).await;

    // core/v1 is lax: the message may change, and events.k8s.io/v1 sees it at once.
    let (code, patched) = merge_patch(
        &http,
        &url(&server, CORE, "ensured"),
        json!({"message": "changed through core"}),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    let (_, seen) = read(&server, V1, "ensured").await;
    assert_eq!(seen["note"], "changed through core");
    assert_eq!(identity(&seen), identity(&patched));

    // events.k8s.io/v1 lets only the series move (what the recorder patches on a repeat).
    let series = json!({"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"});
    let (code, bumped) = merge_patch(
        &http,
        &url(&server, V1, "ensured"),
        json!({"series": series}),
    )
    .await;
    assert_eq!(code, 200, "{bumped}");
    let (_, seen) = read(&server, CORE, "ensured").await;
    assert_eq!(seen["series"], series);
    assert_eq!(identity(&seen), identity(&bumped));
    let (code, refused) = merge_patch(
        &http,
        &url(&server, V1, "ensured"),
        json!({"note": "changed through events.k8s.io"}),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"],
        json!([{"reason": "FieldValueInvalid", "field": "message",
                "message": "Invalid value: \"changed through events.k8s.io\": field is immutable"}])
    );

    // A delete through one API removes the Event from both.
    assert_eq!(delete(&server, CORE, "ensured").await, 200);
    assert_eq!(read(&server, V1, "ensured").await.0, 404);
    create(&server, CORE, kubelet_event("pulled", "web")).await;
    if let Some((_dir, rig)) = kubectl_on(
        &server,
        "updates_and_deletes_through_either_api_reach_the_other",
    ) {
        common::ok(&rig, &["delete", "events.v1.events.k8s.io", "pulled"]).await;
    } else {
        assert_eq!(delete(&server, V1, "pulled").await, 200);
    }
    assert_eq!(read(&server, CORE, "pulled").await.0, 404);
    let (_, v1_list) = read(&server, V1, "").await;
    assert!(sorted_names(&v1_list).is_empty(), "{v1_list}");
    server.shutdown().await;
}

/// The next event of a watch, which must be of type `want` (`ADDED`, `MODIFIED` or
/// `DELETED`), failing after a generous ceiling; returns its object.
async fn expect<K: std::fmt::Debug>(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
    want: &str,
) -> K {
    let event = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .expect("a watch event within 10 s")
        .unwrap()
        .expect("the watch stream to stay open");
    match (want, event) {
        ("ADDED", WatchEvent::Added(object))
        | ("MODIFIED", WatchEvent::Modified(object))
        | ("DELETED", WatchEvent::Deleted(object)) => object,
        (want, other) => panic!("expected {want}, got {other:?}"),
    }
}

#[tokio::test]
async fn watches_through_either_api_see_writes_through_the_other() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    let client = server.client().unwrap();
    let v1_api: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let core_api: Api<CoreEvent> = Api::namespaced(client, "default");
    let from = core_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // Each watch selects by its own API's field names.
    let mut v1_watch = v1_api
        .watch(
            &WatchParams::default()
                .fields("regarding.name=web")
                .timeout(30),
            &from,
        )
        .await
        .unwrap()
        .boxed();
    let mut core_watch = core_api
        .watch(
            &WatchParams::default()
                .fields("involvedObject.name=web")
                .timeout(30),
            &from,
        )
        .await
        .unwrap()
        .boxed();

    // Written through core/v1: the events.k8s.io/v1 watch sees it in its own form.
    let made = create(&server, CORE, kubelet_event("pulled", "web")).await;
    let added = expect(&mut v1_watch, "ADDED").await;
    assert_eq!(added.note.as_deref(), Some("Pulled image"));
    assert_eq!(
        added.metadata.resource_version.as_deref(),
        made["metadata"]["resourceVersion"].as_str()
    );
    let added = expect(&mut core_watch, "ADDED").await;
    assert_eq!(added.metadata.name.as_deref(), Some("pulled"));

    // Written through events.k8s.io/v1, about another Service (selected by neither watch),
    // then about web: the core/v1 watch sees only the second.
    create(&server, V1, recorder_event("about-db", "db")).await;
    let made = create(&server, V1, recorder_event("ensured", "web")).await;
    let added = expect(&mut core_watch, "ADDED").await;
    assert_eq!(added.metadata.name.as_deref(), Some("ensured"));
    assert_eq!(added.message.as_deref(), Some("Ensured load balancer"));
    assert_eq!(
        added.metadata.uid.as_deref(),
        made["metadata"]["uid"].as_str()
    );
    let added = expect(&mut v1_watch, "ADDED").await;
    assert_eq!(added.metadata.name.as_deref(), Some("ensured"));

    // A patch through core/v1 and a delete through events.k8s.io/v1, seen by both.
    let (code, _) = merge_patch(
        &http,
        &url(&server, CORE, "pulled"),
        json!({"message": "Pulled again"}),
    )
    .await;
    assert_eq!(code, 200);
    let modified = expect(&mut v1_watch, "MODIFIED").await;
    assert_eq!(modified.note.as_deref(), Some("Pulled again"));
    let modified = expect(&mut core_watch, "MODIFIED").await;
    assert_eq!(modified.message.as_deref(), Some("Pulled again"));
    v1_api.delete("ensured", &Default::default()).await.unwrap();
    let deleted = expect(&mut core_watch, "DELETED").await;
    assert_eq!(deleted.metadata.name.as_deref(), Some("ensured"));
    let deleted = expect(&mut v1_watch, "DELETED").await;
    assert_eq!(deleted.metadata.name.as_deref(), Some("ensured"));
    server.shutdown().await;
}

#[tokio::test]
async fn each_api_validates_events_in_its_own_terms() {
    let server = ApiServer::builder().start().await.unwrap();
    let http = reqwest::Client::new();
    // An old-style Event is fine through core/v1 and refused through events.k8s.io/v1, with
    // upstream's causes and the core kind (upstream validates the internal core Event).
    let mut old_style = kubelet_event("old-style", "web");
    old_style["apiVersion"] = json!("events.k8s.io/v1");
    old_style["kind"] = json!("Event");
    let (code, refused) = post(&http, &url(&server, V1, ""), old_style).await;
    assert_eq!(code, 422, "{refused}");
    let causes: Vec<(&str, &str)> = refused["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
        .collect();
    // Through events.k8s.io/v1 the core-only fields (involvedObject, message, source, ...)
    // are unknown and dropped, as decoding drops them upstream; what is left lacks eventTime.
    assert_eq!(causes, [("eventTime", "Required value")], "{refused}");
    assert_eq!(refused["details"]["kind"], "Event");
    assert_eq!(refused["details"]["group"], Value::Null);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .starts_with("Event \"old-style\" is invalid: "),
        "{refused}"
    );
    create(&server, CORE, kubelet_event("old-style", "web")).await;

    // Through events.k8s.io/v1 the deprecated fields must stay unset.
    let mut with_count = recorder_event("counted", "web");
    with_count["deprecatedCount"] = json!(2);
    with_count["deprecatedSource"] = json!({"component": "kubelet"});
    let (code, refused) = post(&http, &url(&server, V1, ""), with_count).await;
    assert_eq!(code, 422, "{refused}");
    let fields = cause_fields(&refused);
    assert_eq!(fields, ["count", "source"]);

    // core/v1 names need only be path segments; events.k8s.io/v1 names DNS subdomains, but
    // an update through events.k8s.io/v1 of a core/v1 Event keeps its name.
    let mut loose = recorder_event("Web_1.ABC", "web");
    let (code, refused) = post(&http, &url(&server, V1, ""), loose.clone()).await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(refused["details"]["causes"][0]["field"], "metadata.name");
    loose = to_core_form(&loose);
    let (code, body) = post(&http, &url(&server, CORE, ""), loose).await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = merge_patch(
        &http,
        &url(&server, V1, "Web_1.ABC"),
        json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"}}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (code, refused) = post(
        &http,
        &url(&server, CORE, ""),
        json!({"metadata": {"name": "a/b"}, "involvedObject": {"kind": "Node", "name": "n1"}}),
    )
    .await;
    assert_eq!(code, 422, "{refused}");
    assert_eq!(
        refused["details"]["causes"][0]["message"],
        "Invalid value: \"a/b\": may not contain '/'"
    );

    // A new-style Event through core/v1 still needs its reporting fields (legacy rules).
    let mut new_style = kubelet_event("new-style", "web");
    new_style["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
    let (code, refused) = post(&http, &url(&server, CORE, ""), new_style).await;
    assert_eq!(code, 422, "{refused}");
    let fields = cause_fields(&refused);
    assert_eq!(
        fields,
        [
            "reportingController",
            "reportingController",
            "reportingController",
            "reportingInstance",
            "action"
        ]
    );
    server.shutdown().await;
}

/// The Python client reads through each API an Event written through the other.
const PYTHON: &str = r#"
import json, sys
from kubernetes import client, config

config.load_kube_config(sys.argv[1])
core, events = client.CoreV1Api(), client.EventsV1Api()
core.create_namespaced_event("default", {
    "metadata": {"name": "from-core"},
    "involvedObject": {"kind": "Service", "name": "web", "namespace": "default"},
    "reason": "Synced", "message": "synced through core", "type": "Normal", "action": "Sync",
    "eventTime": "2026-01-01T00:00:00.000000Z",
    "reportingComponent": "kube-proxy", "reportingInstance": "n1"})
events.create_namespaced_event("default", {
    "metadata": {"name": "from-events"},
    "regarding": {"kind": "Service", "name": "web", "namespace": "default"},
    "reason": "EnsuredLoadBalancer", "note": "ensured", "type": "Normal", "action": "Ensure",
    "eventTime": "2026-01-01T00:00:00.000000Z",
    "reportingController": "service-controller", "reportingInstance": "kube-lb-0"})
a = events.read_namespaced_event("from-core", "default")
b = core.read_namespaced_event("from-events", "default")
a_core = core.read_namespaced_event("from-core", "default")
listed = events.list_namespaced_event("default", field_selector="regarding.name=web")
print(json.dumps({
    "note": a.note, "reporting_controller": a.reporting_controller,
    "regarding": a.regarding.name, "same_rv": a.metadata.resource_version == a_core.metadata.resource_version,
    "message": b.message, "reporting_component": b.reporting_component,
    "involved": b.involved_object.name,
    "listed": sorted(i.metadata.name for i in listed.items)}))
"#;

#[tokio::test]
async fn python_client_reads_each_event_through_both_apis() {
    let Some(python) = crate::python_client::python_with_client(
        "python_client_reads_each_event_through_both_apis",
    )
    .await
    else {
        return;
    };
    let server = ApiServer::builder().start().await.unwrap();
    let stdout = crate::python_client::run_script(&python, PYTHON, &server).await;
    let seen: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        seen,
        json!({"note": "synced through core", "reporting_controller": "kube-proxy",
               "regarding": "web", "same_rv": true,
               "message": "ensured", "reporting_component": "service-controller",
               "involved": "web", "listed": ["from-core", "from-events"]})
    );
    server.shutdown().await;
}

/// Events expire as with kube-apiserver's `--event-ttl`: an Event is deleted (a DELETED watch
/// event, seen through both APIs) once it has not been written for the TTL, and every write
/// renews it. Here the TTL is 2 s: `a` is never written again and goes after 2 s; `b` is
/// patched after 1 s and outlives `a`, then goes as well; a Service is untouched.
#[tokio::test]
async fn events_expire_a_ttl_after_their_last_write() {
    let ttl = Duration::from_secs(2);
    let server = ApiServer::builder().event_ttl(ttl).start().await.unwrap();
    let http = reqwest::Client::new();
    let client = server.client().unwrap();
    let v1_api: Api<EventV1> = Api::namespaced(client.clone(), "default");
    let from = common::list_version(&v1_api).await;
    let mut watch = v1_api
        .watch(&WatchParams::default().timeout(30), &from)
        .await
        .unwrap()
        .boxed();
    let (code, body) = post(
        &http,
        &format!("{}/api/v1/namespaces/default/services", server.url()),
        serde_json::to_value(common::service("web", json!({"ports": [{"port": 80}]}))).unwrap(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let started = tokio::time::Instant::now();
    create(&server, V1, recorder_event("a", "web")).await;
    create(&server, CORE, kubelet_event("b", "web")).await;
    tokio::time::sleep(ttl / 2).await;
    let (code, body) = merge_patch(&http, &url(&server, CORE, "b"), json!({"count": 4})).await;
    assert_eq!(code, 200, "{body}");

    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    common::eventually(Duration::from_secs(10), "a expired", || async {
        core_api.get_opt("a").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= ttl,
        "a went after {:?}",
        started.elapsed()
    );
    assert!(
        core_api.get_opt("b").await.unwrap().is_some(),
        "b was written {:?} after a and must outlive it",
        ttl / 2
    );
    common::eventually(Duration::from_secs(10), "b expired", || async {
        core_api.get_opt("b").await.unwrap().is_none().then_some(())
    })
    .await;
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client, "default");
    assert!(services.get_opt("web").await.unwrap().is_some());

    // The watch saw each go as a deletion.
    let mut deleted = Vec::new();
    while deleted.len() < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), watch.try_next())
            .await
            .expect("watch events")
            .unwrap()
            .expect("watch open");
        if let WatchEvent::Deleted(event) = event {
            deleted.push(event.metadata.name.unwrap());
        }
    }
    assert_eq!(deleted, ["a", "b"]);
}

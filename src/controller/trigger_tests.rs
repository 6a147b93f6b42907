//! The Node and EndpointSlice triggers driven through real reflector stores: which watch
//! events re-sync which Services.

use futures::channel::mpsc;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube_lb_annotations::Cloud;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::nodes::EXCLUDE_LABEL;
use super::{NodeSync, node_trigger, slice_trigger};

type Events<K> = mpsc::UnboundedSender<Result<watcher::Event<K>, watcher::Error>>;
/// (what happens, the watch events, the Services re-synced)
type Step<K> = (&'static str, Vec<watcher::Event<K>>, Vec<&'static str>);

fn service(name: &str, type_: &str, local: bool) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {
            "type": type_,
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" },
            "ports": [{"port": 80}]
        }
    }))
    .unwrap()
}

fn services(list: &[Service]) -> reflector::Store<Service> {
    let (store, mut writer) = reflector::store::<Service>();
    for s in list {
        writer.apply_watcher_event(&watcher::Event::Apply(s.clone()));
    }
    store
}

fn node(name: &str, rv: u32, labels: Value, ready: &str, since: Timestamp) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "resourceVersion": rv.to_string(), "labels": labels},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{
                "type": "Ready", "status": ready,
                "lastHeartbeatTime": Timestamp::now().to_string(),
                "lastTransitionTime": since.to_string(),
            }]
        }
    }))
    .unwrap()
}

fn refs(names: &[&str]) -> Vec<ObjectRef<Service>> {
    names
        .iter()
        .map(|n| ObjectRef::new(n).within("default"))
        .collect()
}

/// Everything the trigger yields for the events sent so far (it never ends while `tx` lives).
fn drain<S: Stream<Item = ObjectRef<Service>> + Unpin>(trigger: &mut S) -> Vec<ObjectRef<Service>> {
    let mut out = Vec::new();
    while let Some(Some(r)) = trigger.next().now_or_never() {
        out.push(r);
    }
    out
}

fn send<K>(tx: &Events<K>, events: Vec<watcher::Event<K>>) {
    for e in events {
        tx.unbounded_send(Ok(e)).unwrap();
    }
}

#[tokio::test]
async fn node_trigger_resyncs_load_balancers_only_when_the_node_set_changes() {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    let (nodes, writer) = reflector::store::<Node>();
    let (tx, rx) = mpsc::unbounded();
    let (sync, sync_rx) = watch::channel(NodeSync::default());
    let svcs = services(&[
        service("web", "LoadBalancer", false),
        service("db", "ClusterIP", false),
    ]);
    let mut trigger = Box::pin(node_trigger(
        rx.reflect(writer),
        nodes,
        svcs,
        Cloud::Local,
        std::time::Duration::from_secs(60),
        sync,
        std::sync::Arc::new(crate::metrics::Metrics::new()),
    ));
    let old = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    let now = Timestamp::now();
    let plain = json!({"kubernetes.io/hostname": "a"});
    let a = |rv, labels: &Value, ready, since| node("a", rv, labels.clone(), ready, since);
    // (what, events, re-synced Services)
    let steps: Vec<Step<Node>> = vec![
        (
            "the first list only sets the baseline",
            vec![Init, InitApply(a(1, &plain, "True", old)), InitDone],
            vec![],
        ),
        (
            "an unrelated label",
            vec![Apply(a(2, &json!({"team": "x"}), "True", old))],
            vec![],
        ),
        (
            "a heartbeat",
            vec![Apply(a(3, &json!({"team": "x"}), "True", old))],
            vec![],
        ),
        (
            "NotReady within the grace",
            vec![Apply(a(4, &plain, "False", now))],
            vec![],
        ),
        (
            "Ready again",
            vec![Apply(a(5, &plain, "True", now))],
            vec![],
        ),
        (
            "a new node: LoadBalancer Services only",
            vec![Apply(node("b", 6, plain.clone(), "True", old))],
            vec!["web"],
        ),
        (
            "a node excluded",
            vec![Apply(a(7, &json!({EXCLUDE_LABEL: "true"}), "True", now))],
            vec!["web"],
        ),
        (
            "a node deleted",
            vec![Delete(node("b", 8, plain.clone(), "True", old))],
            vec!["web"],
        ),
        (
            "a re-list that shows what the watch saw",
            vec![
                Init,
                InitApply(a(9, &json!({EXCLUDE_LABEL: "true"}), "True", now)),
                InitDone,
            ],
            vec![],
        ),
        (
            "a re-list that shows a change missed while the watch was down",
            vec![Init, InitApply(a(10, &plain, "True", now)), InitDone],
            vec!["web"],
        ),
        (
            "NotReady past the grace",
            vec![Apply(a(11, &plain, "Unknown", old))],
            vec!["web"],
        ),
    ];
    let mut syncs = 0;
    for (what, events, want) in steps {
        let last_rv = events.iter().rev().find_map(|e| match e {
            Apply(n) | Delete(n) | InitApply(n) => n.metadata.resource_version.clone(),
            _ => None,
        });
        send(&tx, events);
        assert_eq!(drain(&mut trigger), refs(&want), "{what}");
        syncs += u64::from(!want.is_empty());
        let seen = sync_rx.borrow().clone();
        assert_eq!(seen.observed, last_rv, "{what}: every event judged");
        assert_eq!(seen.syncs, syncs, "{what}");
    }
}

fn slice(service: &str, endpoints: &[(&str, bool)]) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {
            "name": format!("{service}-1"),
            "namespace": "default",
            "labels": {"kubernetes.io/service-name": service}
        },
        "addressType": "IPv4",
        "endpoints": endpoints.iter().map(|(node, ready)| json!({
            "addresses": ["10.1.0.1"], "nodeName": node, "conditions": {"ready": ready}
        })).collect::<Vec<_>>()
    }))
    .unwrap()
}

/// `name` of type LoadBalancer, Local, with its node ports as the API server allocates them.
fn local_with_node_ports(name: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 32000,
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]
        }
    }))
    .unwrap()
}

/// `name` of type LoadBalancer, Local, with TKE's `local-svc-only-bind-node-with-pod`: its
/// backends are the nodes with a ready endpoint.
fn bound_to_pods(name: &str) -> Service {
    let mut svc = local_with_node_ports(name);
    svc.metadata.annotations = Some(
        [(
            "service.kubernetes.io/local-svc-only-bind-node-with-pod".to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    svc
}

/// The endpoint moves of [`slice_trigger_resyncs_local_services_only_when_their_ready_nodes_change`],
/// with the Services re-synced when `web`'s backends follow its endpoints.
fn endpoint_moves() -> Vec<Step<EndpointSlice>> {
    use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
    vec![
        (
            "the first list only sets the baseline",
            vec![
                Init,
                InitApply(slice("web", &[("a", true)])),
                InitApply(slice("cluster", &[("a", true)])),
                InitDone,
            ],
            vec![],
        ),
        (
            "more endpoints on a node that has a ready one",
            vec![Apply(slice(
                "web",
                &[("a", true), ("a", true), ("b", false)],
            ))],
            vec![],
        ),
        (
            "an endpoint turns ready on another node",
            vec![Apply(slice("web", &[("a", true), ("b", true)]))],
            vec!["web"],
        ),
        (
            "a Cluster Service's endpoints do not matter",
            vec![Apply(slice("cluster", &[("c", true)]))],
            vec![],
        ),
        (
            "the last slice gone",
            vec![Delete(slice("web", &[("a", true), ("b", true)]))],
            vec!["web"],
        ),
        (
            "a re-list that shows a change missed while the watch was down",
            vec![
                Init,
                InitApply(slice("web", &[("c", true)])),
                InitApply(slice("cluster", &[("c", true)])),
                InitDone,
            ],
            vec!["web"],
        ),
        (
            "a re-list with nothing new",
            vec![
                Init,
                InitApply(slice("web", &[("c", true)])),
                InitApply(slice("cluster", &[("c", true)])),
                InitDone,
            ],
            vec![],
        ),
    ]
}

#[tokio::test]
async fn slice_trigger_resyncs_local_services_only_when_their_ready_nodes_change() {
    // TKE with `local-svc-only-bind-node-with-pod`: the backends are the nodes with a ready
    // endpoint, so a change of that set is a sync.
    let (slices, writer) = reflector::store::<EndpointSlice>();
    let (tx, rx) = mpsc::unbounded();
    let svcs = services(&[
        bound_to_pods("web"),
        service("cluster", "LoadBalancer", false),
    ]);
    let mut trigger = Box::pin(slice_trigger(
        rx.reflect(writer),
        slices,
        svcs,
        Cloud::Tencent,
    ));
    for (what, events, want) in endpoint_moves() {
        send(&tx, events);
        assert_eq!(drain(&mut trigger), refs(&want), "{what}");
    }
}

#[tokio::test]
async fn endpoint_moves_of_a_local_service_sync_nothing_where_every_node_is_registered() {
    // Everywhere else (and on TKE by default) every eligible node is registered and the
    // health-check node port follows the endpoints: no move is a sync, on any cloud.
    for cloud in [
        Cloud::Aws,
        Cloud::Gcp,
        Cloud::Azure,
        Cloud::Openstack,
        Cloud::Baidu,
        Cloud::Tencent,
        Cloud::Local,
    ] {
        let web = local_with_node_ports("web");
        assert!(
            kube_lb_annotations::parse(cloud, &web).is_ok(),
            "{cloud:?}: the Service must parse, or the test shows nothing"
        );
        let (slices, writer) = reflector::store::<EndpointSlice>();
        let (tx, rx) = mpsc::unbounded();
        let svcs = services(&[web, service("cluster", "LoadBalancer", false)]);
        let mut trigger = Box::pin(slice_trigger(rx.reflect(writer), slices, svcs, cloud));
        for (what, events, _) in endpoint_moves() {
            send(&tx, events);
            assert_eq!(drain(&mut trigger), refs(&[]), "{cloud:?}: {what}");
        }
    }
}

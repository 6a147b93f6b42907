//! Store semantics without HTTP.

use serde_json::json;

use super::*;
use crate::services::DEFAULT_NODE_PORT_RANGE;

fn store(history: usize) -> Store {
    Store::new(StoreConfig {
        history,
        allocator: Allocator::new(services::default_service_cidr(), DEFAULT_NODE_PORT_RANGE),
    })
}

fn cm(name: &str, data: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": data}})
}

fn configmaps() -> ResourceId {
    resources::find("", "v1", "configmaps").unwrap()
}

#[test]
fn versions_increase_and_noop_updates_commit_nothing() {
    let s = store(10);
    let a = s
        .create(configmaps(), Some("ns"), cm("a", "1"), false)
        .unwrap();
    assert_eq!(meta::resource_version(&a), Some("1"));
    let same = s
        .update(configmaps(), Some("ns"), "a", Part::Main, false, |cur| {
            Ok(cur.clone())
        })
        .unwrap();
    assert_eq!(meta::resource_version(&same), Some("1"));
    assert_eq!(s.current_version(), 1);
    let changed = s
        .update(configmaps(), Some("ns"), "a", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["data"]["k"] = json!("2");
            Ok(next)
        })
        .unwrap();
    assert_eq!(meta::resource_version(&changed), Some("2"));
    // uid and creationTimestamp cannot be changed by an update.
    let kept = s
        .update(configmaps(), Some("ns"), "a", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["metadata"]["uid"] = json!("forged");
            next["data"]["k"] = json!("3");
            Ok(next)
        })
        .unwrap();
    assert_eq!(kept["metadata"]["uid"], a["metadata"]["uid"]);
}

#[test]
fn stale_resource_version_conflicts() {
    let s = store(10);
    s.create(configmaps(), Some("ns"), cm("a", "1"), false)
        .unwrap();
    let err = s
        .update(configmaps(), Some("ns"), "a", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["metadata"]["resourceVersion"] = json!("999");
            Ok(next)
        })
        .unwrap_err();
    assert_eq!((err.code, err.reason), (409, "Conflict"));
    let err = s
        .create(configmaps(), Some("ns"), cm("a", "1"), false)
        .unwrap_err();
    assert_eq!((err.code, err.reason), (409, "AlreadyExists"));
}

#[test]
fn dry_run_changes_nothing() {
    let s = store(10);
    let created = s
        .create(configmaps(), Some("ns"), cm("a", "1"), true)
        .unwrap();
    assert_eq!(created["metadata"]["name"], "a");
    assert_eq!(s.current_version(), 0);
    assert!(s.get(configmaps(), Some("ns"), "a").is_err());
}

#[test]
fn lists_at_older_versions_and_expiry() {
    let s = store(3);
    s.create(configmaps(), Some("ns"), cm("a", "1"), false)
        .unwrap(); // rv 1
    s.create(configmaps(), Some("ns"), cm("b", "1"), false)
        .unwrap(); // rv 2
    s.delete(
        configmaps(),
        Some("ns"),
        "a",
        &Preconditions::default(),
        false,
    )
    .unwrap(); // rv 3
    let at2 = s.list(configmaps(), Some("ns"), ReadAt::Exact(2)).unwrap();
    let names: Vec<&str> = at2.items.iter().map(|(k, _)| k.1.as_str()).collect();
    assert_eq!(names, vec!["a", "b"]);
    let now = s.list(configmaps(), None, ReadAt::Latest).unwrap();
    assert_eq!(now.items.len(), 1);
    s.create(configmaps(), Some("ns"), cm("c", "1"), false)
        .unwrap(); // rv 4, rv 1 compacted
    assert_eq!(
        s.list(configmaps(), Some("ns"), ReadAt::Exact(0))
            .unwrap_err()
            .code,
        410
    );
    assert_eq!(
        s.list(configmaps(), Some("ns"), ReadAt::Exact(99))
            .unwrap_err()
            .code,
        504
    );
    assert_eq!(
        s.watch(configmaps(), WatchFrom::Version(0))
            .unwrap_err()
            .code,
        410
    );
    assert_eq!(
        s.watch(configmaps(), WatchFrom::Version(99))
            .unwrap_err()
            .code,
        504
    );
    let sub = s.watch(configmaps(), WatchFrom::Version(2)).unwrap();
    let versions: Vec<u64> = sub.backlog.iter().map(|e| e.resource_version).collect();
    assert_eq!(versions, vec![3, 4]);
}

#[test]
fn finalizers_delay_removal() {
    let s = store(10);
    let mut obj = cm("a", "1");
    obj["metadata"]["finalizers"] = json!(["x/y"]);
    s.create(configmaps(), Some("ns"), obj, false).unwrap();
    let first = s
        .delete(
            configmaps(),
            Some("ns"),
            "a",
            &Preconditions::default(),
            false,
        )
        .unwrap();
    assert!(!first.gone);
    assert!(meta::is_deleting(&first.object));
    let again = s
        .delete(
            configmaps(),
            Some("ns"),
            "a",
            &Preconditions::default(),
            false,
        )
        .unwrap();
    assert_eq!(
        again.object, first.object,
        "a second delete changes nothing"
    );
    let mut live = s
        .watch(configmaps(), WatchFrom::Version(s.current_version()))
        .unwrap()
        .live;
    s.update(configmaps(), Some("ns"), "a", Part::Main, false, |cur| {
        let mut next = cur.clone();
        next["metadata"]["finalizers"] = json!([]);
        Ok(next)
    })
    .unwrap();
    assert!(s.get(configmaps(), Some("ns"), "a").is_err());
    let event = live.try_recv().unwrap();
    assert_eq!(event.event_type, EventType::Deleted);
}

#[test]
fn delete_preconditions() {
    let s = store(10);
    s.create(configmaps(), Some("ns"), cm("a", "1"), false)
        .unwrap();
    let wrong_uid = Preconditions {
        uid: Some("nope".into()),
        resource_version: None,
    };
    assert_eq!(
        s.delete(configmaps(), Some("ns"), "a", &wrong_uid, false)
            .unwrap_err()
            .code,
        409
    );
}

#[test]
fn status_part_changes_only_status() {
    let s = store(10);
    // A LoadBalancer: no other type may hold ingress points (ValidateLoadBalancerStatus), and
    // an update of any other type's main resource clears them (dropTypeDependentFields).
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    let created = s
        .create(resources::services(), Some("ns"), svc, false)
        .unwrap();
    assert_eq!(
        created["status"],
        json!({"loadBalancer": {}}),
        "create resets status"
    );
    let updated = s
        .update(
            resources::services(),
            Some("ns"),
            "web",
            Part::Status,
            false,
            |cur| {
                let mut next = cur.clone();
                next["status"]["loadBalancer"]["ingress"] = json!([{"ip": "192.0.2.1"}]);
                next["spec"]["ports"][0]["port"] = json!(81);
                Ok(next)
            },
        )
        .unwrap();
    assert_eq!(updated["spec"]["ports"][0]["port"], 80);
    assert_eq!(
        updated["status"]["loadBalancer"]["ingress"][0]["ip"],
        "192.0.2.1"
    );
    let main = s
        .update(
            resources::services(),
            Some("ns"),
            "web",
            Part::Main,
            false,
            |cur| {
                let mut next = cur.clone();
                next["status"] = json!({});
                Ok(next)
            },
        )
        .unwrap();
    assert_eq!(
        main["status"]["loadBalancer"]["ingress"][0]["ip"],
        "192.0.2.1"
    );
}

#[test]
fn dump_and_restore_keep_versions_and_allocations() {
    let s = store(10);
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30007}]}});
    s.create(resources::services(), Some("ns"), svc.clone(), false)
        .unwrap();
    let dump = s.dump();
    let t = store(10);
    t.restore(dump).unwrap();
    assert_eq!(t.current_version(), 1);
    let mut clash = svc;
    clash["metadata"]["name"] = json!("other");
    let err = t
        .create(resources::services(), Some("ns"), clash, false)
        .unwrap_err();
    assert_eq!(
        err.code, 422,
        "node port 30007 is still allocated after restore"
    );
}

#[test]
fn both_event_apis_see_one_object() {
    let s = store(10);
    let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "regarding": {"kind": "Service", "name": "web", "namespace": "ns"}, "note": "hello",
        "reason": "R", "type": "Normal", "action": "Ensure", "eventTime": "2025-01-01T00:00:00.000000Z",
        "reportingController": "kube-lb", "reportingInstance": "kube-lb-0"});
    let created = s
        .create(resources::events_v1(), Some("ns"), ev, false)
        .unwrap();
    assert_eq!(created["apiVersion"], "events.k8s.io/v1");
    assert_eq!(created["note"], "hello");
    let core = s.get(resources::core_events(), Some("ns"), "e1").unwrap();
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "hello");
    assert_eq!(core["involvedObject"]["name"], "web");
    assert_eq!(
        core["metadata"], created["metadata"],
        "same uid and resourceVersion"
    );
    // An update through core/v1 is seen through events.k8s.io/v1, at the same version.
    let updated = s
        .update(
            resources::core_events(),
            Some("ns"),
            "e1",
            Part::Main,
            false,
            |cur| {
                let mut next = cur.clone();
                next["message"] = json!("changed");
                Ok(next)
            },
        )
        .unwrap();
    let v1 = s.get(resources::events_v1(), Some("ns"), "e1").unwrap();
    assert_eq!(v1["note"], "changed");
    assert_eq!(
        v1["metadata"]["resourceVersion"],
        updated["metadata"]["resourceVersion"]
    );
    assert_eq!(
        s.list(resources::events_v1(), Some("ns"), ReadAt::Latest)
            .unwrap()
            .items
            .len(),
        1
    );
    s.delete(
        resources::events_v1(),
        Some("ns"),
        "e1",
        &Preconditions::default(),
        false,
    )
    .unwrap();
    assert!(s.get(resources::core_events(), Some("ns"), "e1").is_err());
}

#[test]
fn state_files_from_the_mirroring_days_restore_one_event() {
    // Before Events shared one storage, a state file held the events.k8s.io/v1 original and
    // its core/v1 mirror (with another resourceVersion); the original wins.
    let original = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
        "regarding": {"kind": "Service", "name": "web", "namespace": "ns"}, "note": "hello"});
    let mirror = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "e1", "namespace": "ns", "uid": "u1", "resourceVersion": "8"},
        "involvedObject": {"kind": "Service", "name": "web", "namespace": "ns"},
        "message": "hello", "count": 1, "source": {"component": "made-up"}});
    let dump = Dump {
        resource_version: 8,
        objects: [
            (
                "events.k8s.io/v1/events".to_string(),
                vec![Arc::new(original)],
            ),
            ("v1/events".to_string(), vec![Arc::new(mirror)]),
        ]
        .into_iter()
        .collect(),
    };
    let s = store(10);
    s.restore(dump).unwrap();
    let core = s.get(resources::core_events(), Some("ns"), "e1").unwrap();
    assert_eq!(core["metadata"]["resourceVersion"], "7");
    assert!(core.get("source").is_none(), "{core}");
    let v1 = s.get(resources::events_v1(), Some("ns"), "e1").unwrap();
    assert_eq!(v1["note"], "hello");
    // Saved again, it is one object.
    let saved = s.dump();
    assert_eq!(saved.objects.keys().collect::<Vec<_>>(), ["v1/events"]);
    assert_eq!(saved.objects["v1/events"].len(), 1);
}

#[test]
fn port_protocols_default_to_tcp() {
    let s = store(10);
    let pods = resources::find("", "v1", "pods").unwrap();
    let pod = s
        .create(
            pods,
            Some("ns"),
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}]}}),
            false,
        )
        .unwrap();
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["protocol"], "TCP");
    assert_eq!(pod["spec"]["containers"][0]["ports"][1]["protocol"], "UDP");
    assert_eq!(pod["status"]["phase"], "Pending");
    let slices = resources::find("discovery.k8s.io", "v1", "endpointslices").unwrap();
    let slice = s
        .create(
            slices,
            Some("ns"),
            json!({"metadata": {"name": "s"}, "addressType": "IPv4", "ports": [{"port": 80}]}),
            false,
        )
        .unwrap();
    assert_eq!(slice["ports"][0]["protocol"], "TCP");
}

#[test]
fn expiry_takes_only_events_older_than_the_ttl_restored_ones_from_their_last_write() {
    let event = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "Service", "name": "web", "namespace": "ns"},
            "message": "m", "reason": "R", "type": "Normal"})
    };
    let s = store(100);
    s.create(resources::core_events(), Some("ns"), event("e1"), false)
        .unwrap();
    s.create(configmaps(), Some("ns"), cm("c", "1"), false)
        .unwrap();
    // Not old enough: nothing goes.
    assert_eq!(s.expire_events(std::time::Duration::from_secs(3600)), 0);
    // Everything written is at least zero old: the Event goes, the ConfigMap stays.
    assert_eq!(s.expire_events(std::time::Duration::ZERO), 1);
    assert!(s.get(resources::core_events(), Some("ns"), "e1").is_err());
    assert!(s.get(configmaps(), Some("ns"), "c").is_ok());

    // Events loaded from a dump start their lease when expiry first sees them.
    s.create(resources::core_events(), Some("ns"), event("e2"), false)
        .unwrap();
    let restored = store(100);
    restored.restore(s.dump()).unwrap();
    assert_eq!(
        restored.expire_events(std::time::Duration::from_secs(3600)),
        0
    );
    assert!(
        restored
            .get(resources::core_events(), Some("ns"), "e2")
            .is_ok()
    );
    assert_eq!(restored.expire_events(std::time::Duration::ZERO), 1);

    // Restored Events keep the lease their last write started, as the Event tells it: one
    // last written two hours ago is past an hour's TTL at once, one written now is not.
    let written = |name: &str, ago: std::time::Duration| {
        let at = humantime::format_rfc3339_micros(std::time::SystemTime::now() - ago).to_string();
        let mut e = event(name);
        e["lastTimestamp"] = json!(at);
        e["metadata"]["managedFields"] =
            json!([{"manager": "kube-lb", "operation": "Update", "time": at}]);
        e
    };
    let dumped = store(100);
    dumped
        .create(
            resources::core_events(),
            Some("ns"),
            written("old", std::time::Duration::from_secs(7200)),
            false,
        )
        .unwrap();
    dumped
        .create(
            resources::core_events(),
            Some("ns"),
            written("new", std::time::Duration::ZERO),
            false,
        )
        .unwrap();
    // As a state file written two hours after "old" was made holds it.
    let mut dump = dumped.dump();
    for events in dump.objects.values_mut() {
        for stored in events.iter_mut() {
            if stored["metadata"]["name"] == "old" {
                let mut old = (**stored).clone();
                old["metadata"]["creationTimestamp"] = old["lastTimestamp"].clone();
                *stored = std::sync::Arc::new(old);
            }
        }
    }
    let restored = store(100);
    restored.restore(dump).unwrap();
    assert_eq!(
        restored.expire_events(std::time::Duration::from_secs(3600)),
        1
    );
    assert!(
        restored
            .get(resources::core_events(), Some("ns"), "old")
            .is_err()
    );
    assert!(
        restored
            .get(resources::core_events(), Some("ns"), "new")
            .is_ok()
    );
}

#[test]
fn namespaces_always_carry_their_name_label_and_the_kubernetes_finalizer() {
    let s = store(10);
    let namespace = |labels: Value| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": labels}});
    let created = s
        .create(resources::namespaces(), None, namespace(Value::Null), false)
        .unwrap();
    assert_eq!(
        created["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a"})
    );
    assert_eq!(created["spec"], json!({"finalizers": ["kubernetes"]}));
    // A client cannot drop or forge it; its other labels stay.
    for labels in [
        json!({"tier": "front"}),
        json!({"tier": "front", "kubernetes.io/metadata.name": "team-b"}),
    ] {
        let updated = s
            .update(
                resources::namespaces(),
                None,
                "team-a",
                Part::Main,
                false,
                |cur| {
                    let mut next = cur.clone();
                    next["metadata"]["labels"] = labels.clone();
                    Ok(next)
                },
            )
            .unwrap();
        assert_eq!(
            updated["metadata"]["labels"],
            json!({"tier": "front", "kubernetes.io/metadata.name": "team-a"})
        );
        assert_eq!(updated["spec"], json!({"finalizers": ["kubernetes"]}));
    }
}

#[test]
fn a_deletes_policy_decides_the_collectors_finalizers() {
    use super::Propagation::{Background, Foreground, Orphan};
    let with = |finalizers: &[&str]| json!({"metadata": {"finalizers": finalizers}});
    let cases: [(&[&str], Option<Propagation>, &[&str]); 8] = [
        (&[], None, &[]),
        (&["example.com/x"], None, &["example.com/x"]),
        (&[], Some(Orphan), &["orphan"]),
        (&[], Some(Foreground), &["foregroundDeletion"]),
        (&["orphan"], Some(Foreground), &["foregroundDeletion"]),
        (
            &["example.com/x", "orphan"],
            Some(Background),
            &["example.com/x"],
        ),
        // Without a policy, a collector's finalizer already there decides (orphan first).
        (&["foregroundDeletion"], None, &["foregroundDeletion"]),
        (&["orphan", "foregroundDeletion"], None, &["orphan"]),
    ];
    for (existing, policy, expected) in cases {
        assert_eq!(
            finalizers_for_deletion(&with(existing), policy),
            expected,
            "{existing:?} {policy:?}"
        );
    }
}

/// A webhook configuration keeps a generation that follows its webhooks only: the defaults a
/// client leaves out are no change, nor is a label; a changed webhook is, and a refused one is
/// a 422 naming the field.
#[test]
fn webhook_configuration_generation_follows_webhooks() {
    let s = store(10);
    let id = resources::validating_webhook_configurations();
    let hook = json!({
        "name": "services.kube-lb.io",
        "clientConfig": {"url": "https://hooks.example.com/validate"},
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    let object = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "kube-lb"},
        "webhooks": [hook.clone()],
    });
    let created = s.create(id, None, object.clone(), false).unwrap();
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(created["webhooks"][0]["timeoutSeconds"], 10);
    let generation = |v: &Value| v["metadata"]["generation"].as_i64();

    // The undefaulted body again: nothing to store.
    let same = s
        .update(id, None, "kube-lb", Part::Main, false, |cur| {
            let mut next = object.clone();
            next["metadata"] = cur["metadata"].clone();
            Ok(next)
        })
        .unwrap();
    assert_eq!(generation(&same), Some(1));
    assert_eq!(
        meta::resource_version(&same),
        meta::resource_version(&created)
    );

    let labelled = s
        .update(id, None, "kube-lb", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["metadata"]["labels"] = json!({"a": "b"});
            Ok(next)
        })
        .unwrap();
    assert_eq!(generation(&labelled), Some(1));

    let changed = s
        .update(id, None, "kube-lb", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["webhooks"][0]["timeoutSeconds"] = json!(3);
            Ok(next)
        })
        .unwrap();
    assert_eq!(generation(&changed), Some(2));

    let refused = s
        .update(id, None, "kube-lb", Part::Main, false, |cur| {
            let mut next = cur.clone();
            next["webhooks"][0]["sideEffects"] = json!("Some");
            Ok(next)
        })
        .unwrap_err();
    assert_eq!(refused.code, 422);
    assert_eq!(refused.details.causes[0].field, "webhooks[0].sideEffects");
    let stored = s.get(id, None, "kube-lb").unwrap();
    assert_eq!(stored["webhooks"][0]["sideEffects"], "None");
    assert_eq!(generation(&stored), Some(2));
}

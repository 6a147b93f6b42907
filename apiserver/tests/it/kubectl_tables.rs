//! kubectl 1.32: server-side apply conflicts between two field managers, and the printed
//! columns of events, nodes, leases and EndpointSlices.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;

use common::{kubectl, kubectl_rig, ok};
use serde_json::json;

fn service(target_port: u16) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 80\n    targetPort: {target_port}\n"
    )
}

#[tokio::test]
async fn server_side_apply_conflicts_between_managers() {
    let Some(rig) = kubectl_rig("server_side_apply_conflicts_between_managers").await else {
        return;
    };
    let (dir, kc) = (&rig.dir, rig.kubeconfig.clone());
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    let same = dir.path().join("same.yaml");
    std::fs::write(&a, service(8080)).unwrap();
    std::fs::write(&b, service(9090)).unwrap();
    std::fs::write(&same, service(8080)).unwrap();
    let apply = |manager: &'static str, file: &Path, force: bool| {
        let mut args = vec![
            "apply".to_string(),
            "--server-side".to_string(),
            format!("--field-manager={manager}"),
            "-f".to_string(),
            file.to_str().unwrap().to_string(),
        ];
        if force {
            args.push("--force-conflicts".to_string());
        }
        args
    };
    let run = |args: Vec<String>| {
        let kc = kc.clone();
        async move {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl(&kc, &refs).await
        }
    };
    let target_port = || {
        let kc = kc.clone();
        async move {
            let jsonpath = "jsonpath={.spec.ports[0].targetPort}";
            ok(&kc, &["get", "svc", "web", "-o", jsonpath]).await
        }
    };

    let out = run(apply("manager-a", &a, false)).await;
    assert!(out.status.success(), "{out:?}");
    // Same value from another manager: shared ownership, no conflict.
    let out = run(apply("manager-b", &same, false)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A different value: 409, printed as kubectl prints it against kube-apiserver.
    let out = run(apply("manager-c", &b, false)).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "Apply failed with 2 conflicts: conflicts with \"manager-a\":\n- .spec.ports[port=80,protocol=\"TCP\"].targetPort\nconflicts with \"manager-b\":\n- .spec.ports[port=80,protocol=\"TCP\"].targetPort"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("--force-conflicts"),
        "kubectl adds its advice: {stderr}"
    );
    let web = target_port().await;
    assert_eq!(web, "8080", "nothing changed");

    // Forced, the field changes hands.
    let out = run(apply("manager-c", &b, true)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let web = target_port().await;
    assert_eq!(web, "9090");
    // Now manager-a conflicts with manager-c alone.
    let out = run(apply("manager-a", &a, false)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "Apply failed with 1 conflict: conflict with \"manager-c\": .spec.ports[port=80,protocol=\"TCP\"].targetPort"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn kubectl_columns_for_events_nodes_leases_and_slices() {
    let Some(rig) = kubectl_rig("kubectl_columns_for_events_nodes_leases_and_slices").await else {
        return;
    };
    let (server, kc) = (&rig.server, rig.kubeconfig.clone());
    // Seeded out of time order: the newest event has the alphabetically first name.
    for (name, last, reason) in [
        ("a-newest", "2025-01-03T00:00:00Z", "Third"),
        ("b-oldest", "2025-01-01T00:00:00Z", "First"),
        ("c-middle", "2025-01-02T00:00:00Z", "Second"),
    ] {
        server
            .seed(json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"kind": "Service", "name": "web", "namespace": "default"},
                "reason": reason, "message": format!("{reason} thing happened"), "type": "Normal",
                "source": {"component": "kube-lb"}, "count": 1,
                "firstTimestamp": last, "lastTimestamp": last}))
            .unwrap();
    }
    let out = ok(&kc, &["get", "events"]).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{out}"
    );
    assert!(
        out.contains("service/web") && out.contains("Third thing happened"),
        "{out}"
    );
    let sorted = ok(&kc, &["get", "events", "--sort-by=.lastTimestamp"]).await;
    let reasons: Vec<&str> = sorted
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().nth(2).unwrap())
        .collect();
    assert_eq!(reasons, vec!["First", "Second", "Third"], "{sorted}");
    let wide = ok(&kc, &["get", "events", "-o", "wide"]).await;
    assert!(wide.lines().next().unwrap().contains("SUBOBJECT"), "{wide}");
    assert!(wide.contains("kube-lb"), "{wide}");

    server
        .seed(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0"}}}))
        .unwrap();
    let nodes = ok(&kc, &["get", "nodes"]).await;
    let header: Vec<&str> = nodes.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{nodes}"
    );
    let row: Vec<&str> = nodes.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        (row[1], row[2], row[4]),
        ("Ready", "worker", "v1.33.0"),
        "{nodes}"
    );
    let wide = ok(&kc, &["get", "nodes", "-o", "wide"]).await;
    assert!(
        wide.contains("INTERNAL-IP") && wide.contains("10.0.0.1"),
        "{wide}"
    );

    server
        .seed(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kube-lb", "namespace": "default"},
            "spec": {"holderIdentity": "controller-0"}}),
        )
        .unwrap();
    let leases = ok(&kc, &["get", "leases"]).await;
    let header: Vec<&str> = leases.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, vec!["NAME", "HOLDER", "AGE"], "{leases}");
    assert!(leases.contains("controller-0"), "{leases}");

    server
        .seed(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "default"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2"]}],
            "ports": [{"port": 8080, "protocol": "TCP"}]}),
        )
        .unwrap();
    let slices = ok(&kc, &["get", "endpointslices"]).await;
    let header: Vec<&str> = slices.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        vec!["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"],
        "{slices}"
    );
    assert!(
        slices.contains("8080") && slices.contains("10.1.0.1,10.1.0.2"),
        "{slices}"
    );
}

/// `kubectl get events --field-selector` and `kubectl events --for` (which selects by
/// `involvedObject.kind`, `.apiVersion` and `.name`) get what kube-apiserver gives: the matching events, and for a label
/// core/v1 Events do not have, kube's 400 `field label not supported`.
#[tokio::test]
async fn kubectl_event_field_selectors() {
    let Some(rig) = kubectl_rig("kubectl_event_field_selectors").await else {
        return;
    };
    let (server, kc) = (&rig.server, rig.kubeconfig.clone());
    for (name, kind, object, reason, type_) in [
        (
            "ensured",
            "Service",
            "web",
            "EnsuringLoadBalancer",
            "Normal",
        ),
        (
            "failed",
            "Service",
            "web",
            "SyncLoadBalancerFailed",
            "Warning",
        ),
        ("other", "Service", "db", "EnsuringLoadBalancer", "Normal"),
        ("node", "Node", "n1", "NodeNotReady", "Warning"),
    ] {
        server
            .seed(json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": kind, "name": object,
                                   "namespace": "default"},
                "reason": reason, "message": format!("{reason} {object}"), "type": type_,
                "source": {"component": "kube-lb"}, "count": 1,
                "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:00:00Z"}))
            .unwrap();
    }
    let selected = |selector: &'static str| {
        let kc = kc.clone();
        async move {
            let out = ok(
                &kc,
                &["get", "events", "--field-selector", selector, "-o", "name"],
            )
            .await;
            let mut names: Vec<String> = out.lines().map(str::to_string).collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        selected("involvedObject.kind=Service,involvedObject.name=web").await,
        ["event/ensured", "event/failed"]
    );
    assert_eq!(
        selected("type=Warning").await,
        ["event/failed", "event/node"]
    );
    assert_eq!(
        selected("reason=EnsuringLoadBalancer,involvedObject.name!=web").await,
        ["event/other"]
    );
    assert_eq!(
        selected("source=kube-lb,metadata.name=node").await,
        ["event/node"]
    );

    let about_web = ok(&kc, &["events", "--for", "service/web"]).await;
    assert!(
        about_web.contains("SyncLoadBalancerFailed") && about_web.contains("EnsuringLoadBalancer"),
        "{about_web}"
    );
    assert!(
        !about_web.contains("NodeNotReady") && !about_web.contains("db"),
        "{about_web}"
    );

    let refused = kubectl(&kc, &["get", "events", "--field-selector", "message=x"]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("(BadRequest)") && stderr.contains("field label not supported: message"),
        "{stderr}"
    );
}

#[tokio::test]
async fn kubectl_get_all_lists_pods_and_services() {
    let Some(rig) = kubectl_rig("kubectl_get_all_lists_pods_and_services").await else {
        return;
    };
    let kc = rig.kubeconfig.as_path();
    let manifest = rig.dir.path().join("all.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: cache\nspec:\n  containers:\n  - name: cache\n    image: redis\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: cache\nspec:\n  ports:\n  - port: 6379\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n",
    )
    .unwrap();
    ok(kc, &["apply", "-f", manifest.to_str().unwrap()]).await;
    let listed = ok(kc, &["get", "all", "-o", "name"]).await;
    let mut names: Vec<&str> = listed.lines().collect();
    names.sort_unstable();
    // The ConfigMap is not in `all`, as on any cluster.
    assert_eq!(names, ["pod/cache", "service/cache"], "{listed}");
}

#[tokio::test]
async fn kubectl_explain_describes_served_kinds() {
    let Some(rig) = kubectl_rig("kubectl_explain_describes_served_kinds").await else {
        return;
    };
    let kc = rig.kubeconfig.as_path();
    let ports = ok(kc, &["explain", "services.spec.ports"]).await;
    assert!(ports.contains("FIELD: ports <[]ServicePort>"), "{ports}");
    assert!(ports.contains("port\t<integer> -required-"), "{ports}");
    let slices = ok(kc, &["explain", "endpointslices"]).await;
    assert!(slices.contains("GROUP:      discovery.k8s.io"), "{slices}");
    assert!(
        slices.contains("addressType\t<string> -required-"),
        "{slices}"
    );
}

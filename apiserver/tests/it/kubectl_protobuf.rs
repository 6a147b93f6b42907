//! kubectl 1.32 sends the objects it builds itself (`create namespace`, `create service`,
//! `create configmap`, the pod deletes of `drain`) in Kubernetes' protobuf encoding, as
//! client-go's typed clients do. The server must take them as kube-apiserver does: the same
//! object as the JSON of the same command, and the same errors.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;

use common::{get_json, kubectl, kubectl_rig, ok};
use serde_json::{Value, json};

const PROTOBUF: &str = "Content-Type: application/vnd.kubernetes.protobuf";

/// Runs kubectl at `-v=8` and checks that it sent a protobuf body, so this test keeps testing
/// what it says if a kubectl release changes encodings.
async fn ok_in_protobuf(kubeconfig: &Path, args: &[&str]) {
    let mut all = vec!["-v=8"];
    all.extend(args);
    let out = kubectl(kubeconfig, &all).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl {args:?} failed:\n{stderr}");
    assert!(
        stderr.contains(PROTOBUF),
        "kubectl {args:?} sent no protobuf body:\n{stderr}"
    );
}

/// What the server made of an object, without what it assigns itself.
fn comparable(mut object: Value) -> Value {
    let meta = object["metadata"].as_object_mut().unwrap();
    for assigned in ["uid", "resourceVersion", "creationTimestamp", "namespace"] {
        meta.remove(assigned);
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports {
                port.as_object_mut().unwrap().remove("nodePort");
            }
        }
    }
    object
}

#[tokio::test]
async fn objects_kubectl_sends_as_protobuf_land_as_their_json_would() {
    let Some(rig) = kubectl_rig("objects_kubectl_sends_as_protobuf_land_as_their_json_would").await
    else {
        return;
    };
    let kc = rig.kubeconfig.as_path();

    ok_in_protobuf(kc, &["create", "namespace", "team-a"]).await;
    let namespace = get_json(kc, &["get", "namespace", "team-a"]).await;
    assert_eq!(
        namespace["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a"})
    );
    assert_eq!(namespace["status"]["phase"], "Active");
    ok(kc, &["create", "namespace", "team-b"]).await;

    // The same command through protobuf into team-a, and through kubectl's JSON into team-b.
    let blob = rig.dir.path().join("blob");
    std::fs::write(&blob, [0u8, 159, 146, 150]).unwrap();
    let blob_arg = format!("--from-file=blob={}", blob.display());
    let commands: [&[&str]; 3] = [
        &[
            "create",
            "service",
            "loadbalancer",
            "web",
            "--tcp=80:8080",
            "--tcp=443:8443",
        ],
        &[
            "create",
            "service",
            "externalname",
            "docs",
            "--external-name=docs.example.com",
        ],
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
            &blob_arg,
        ],
    ];
    for command in commands {
        let mut in_a = vec!["-n", "team-a"];
        in_a.extend(command);
        ok_in_protobuf(kc, &in_a).await;
        let mut as_json = vec!["-n", "team-b"];
        as_json.extend(command);
        as_json.extend(["--dry-run=client", "-o", "json"]);
        let manifest = rig.dir.path().join("manifest.json");
        std::fs::write(&manifest, ok(kc, &as_json).await).unwrap();
        ok(
            kc,
            &["-n", "team-b", "create", "-f", manifest.to_str().unwrap()],
        )
        .await;

        // `create service <type> <name>`, `create configmap <name>`.
        let kind = command[1];
        let name = if kind == "service" {
            command[3]
        } else {
            command[2]
        };
        let from_protobuf = get_json(kc, &["-n", "team-a", "get", kind, name]).await;
        let from_json = get_json(kc, &["-n", "team-b", "get", kind, name]).await;
        assert_eq!(
            comparable(from_protobuf),
            comparable(from_json),
            "{command:?}"
        );
    }
    let settings = get_json(kc, &["-n", "team-a", "get", "configmap", "settings"]).await;
    assert_eq!(settings["data"], json!({"mode": "fast"}));
    assert_eq!(settings["binaryData"], json!({"blob": "AJ+Slg=="}));
    let web = get_json(kc, &["-n", "team-a", "get", "service", "web"]).await;
    assert_eq!(web["spec"]["type"], "LoadBalancer");
    assert_eq!(web["spec"]["ports"][1]["targetPort"], 8443);

    // A bad object is refused with the field named, as from JSON.
    let out = kubectl(
        kc,
        &[
            "-n",
            "team-a",
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=80",
            "--node-port=20000",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "node port 20000 was accepted");
    assert!(
        stderr.contains("spec.ports[0].nodePort: Invalid value: 20000"),
        "{stderr}"
    );

    // drain deletes the node's pods with protobuf DeleteOptions.
    let node_and_pod = "apiVersion: v1\nkind: Node\nmetadata:\n  name: worker-1\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: cache\n  namespace: team-a\nspec:\n  nodeName: worker-1\n  containers:\n  - name: cache\n    image: redis\n";
    let manifest = rig.dir.path().join("node.yaml");
    std::fs::write(&manifest, node_and_pod).unwrap();
    ok(kc, &["apply", "-f", manifest.to_str().unwrap()]).await;
    ok_in_protobuf(
        kc,
        &[
            "drain",
            "worker-1",
            "--force",
            "--grace-period=1",
            "--disable-eviction",
        ],
    )
    .await;
    let pods = get_json(kc, &["-n", "team-a", "get", "pods"]).await;
    assert_eq!(pods["items"], json!([]));
}

#[tokio::test]
async fn kubectl_auth_can_i_gets_answers() {
    let Some(rig) = kubectl_rig("kubectl_auth_can_i_gets_answers").await else {
        return;
    };
    let kc = rig.kubeconfig.as_path();
    // kubectl 1.32 posts its SelfSubjectAccessReview as protobuf.
    ok_in_protobuf(kc, &["auth", "can-i", "create", "services"]).await;
    assert_eq!(
        ok(
            kc,
            &[
                "auth",
                "can-i",
                "patch",
                "services/status",
                "-n",
                "kube-system"
            ]
        )
        .await,
        "yes\n"
    );
    assert_eq!(ok(kc, &["auth", "can-i", "get", "/healthz"]).await, "yes\n");
    let rules = ok(kc, &["auth", "can-i", "--list"]).await;
    assert!(rules.lines().any(|line| line.starts_with("*.*")), "{rules}");
}

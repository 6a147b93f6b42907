//! kubectl 1.32 end to end against the server: apply, re-apply, get, describe, patch, delete.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::Path;

use common::{KUBECTL, get_json, kubectl, ok};
use kube_lb_apiserver::ApiServer;

const MANIFEST_V1: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
  annotations:
    example.com/owner: team-a
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: https
    port: 443
    targetPort: 8443
---
apiVersion: v1
kind: Service
metadata:
  name: db
spec:
  clusterIP: None
  selector:
    app: db
  ports:
  - port: 5432
"#;

/// Changes a target port, drops the https port and the annotation, adds a label.
const MANIFEST_V2: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
    tier: front
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 9090
"#;

#[tokio::test]
async fn kubectl_end_to_end() {
    if !Path::new(KUBECTL).exists() {
        eprintln!(
            "\n\n*** SKIPPING kubectl_end_to_end: {KUBECTL} is not installed (install kubectl 1.32 to run it) ***\n\n"
        );
        return;
    }
    let server = ApiServer::builder().start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let v1 = dir.path().join("v1.yaml");
    let v2 = dir.path().join("v2.yaml");
    std::fs::write(&v1, MANIFEST_V1).unwrap();
    std::fs::write(&v2, MANIFEST_V2).unwrap();
    let kc = kubeconfig.as_path();

    let out = ok(kc, &["apply", "-f", v1.to_str().unwrap()]).await;
    assert!(
        out.contains("service/web created") && out.contains("service/db created"),
        "{out}"
    );
    let web = get_json(kc, &["get", "service", "web"]).await;
    let node_port = web["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    let cluster_ip = web["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert_eq!(web["spec"]["ports"].as_array().unwrap().len(), 2);
    assert!(
        web["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    // Re-applying the same file changes nothing.
    let rv_before = web["metadata"]["resourceVersion"].clone();
    let out = ok(kc, &["apply", "-f", v1.to_str().unwrap()]).await;
    assert!(out.contains("service/web unchanged"), "{out}");
    let web = get_json(kc, &["get", "service", "web"]).await;
    assert_eq!(web["metadata"]["resourceVersion"], rv_before);

    // Applying v2: three-way strategic merge removes what v1 had and v2 does not.
    let out = ok(kc, &["apply", "-f", v2.to_str().unwrap()]).await;
    assert!(out.contains("service/web configured"), "{out}");
    let web = get_json(kc, &["get", "service", "web"]).await;
    let ports = web["spec"]["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1, "{web}");
    assert_eq!(ports[0]["targetPort"], 9090);
    assert_eq!(
        ports[0]["nodePort"].as_i64(),
        Some(node_port),
        "allocations are kept"
    );
    assert_eq!(web["spec"]["clusterIP"], cluster_ip.as_str());
    assert_eq!(web["metadata"]["labels"]["tier"], "front");
    assert!(
        web["metadata"]["annotations"]
            .get("example.com/owner")
            .is_none(),
        "{web}"
    );

    // Listing, in the table form kubectl prints.
    let table = ok(kc, &["get", "services", "-A", "-o", "wide"]).await;
    let web_line = table
        .lines()
        .find(|l| l.contains(" web "))
        .unwrap_or_default();
    assert!(
        web_line.contains("LoadBalancer") && web_line.contains(&cluster_ip),
        "{table}"
    );
    assert!(web_line.contains(&format!("80:{node_port}/TCP")), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.contains(" db ") && l.contains("None")),
        "{table}"
    );
    let names = ok(kc, &["get", "svc", "-l", "tier=front", "-o", "name"]).await;
    assert_eq!(names.trim(), "service/web");

    // An event recorded through events.k8s.io/v1 (as kube-rs' Recorder does) shows up in
    // `kubectl describe`, which reads core/v1 Events.
    let client = server.client().unwrap();
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(client.clone(), "default");
    let web_ref = kube::Resource::object_ref(&services.get("web").await.unwrap(), &());
    let recorder = kube::runtime::events::Recorder::new(
        client,
        kube::runtime::events::Reporter {
            controller: "kube-lb-test".into(),
            instance: None,
        },
    );
    for _ in 0..2 {
        recorder
            .publish(
                &kube::runtime::events::Event {
                    type_: kube::runtime::events::EventType::Normal,
                    reason: "EnsuredLoadBalancer".into(),
                    note: Some("Ensured load balancer".into()),
                    action: "Ensure".into(),
                    secondary: None,
                },
                &web_ref,
            )
            .await
            .unwrap();
    }

    let described = ok(kc, &["describe", "service", "web"]).await;
    assert!(
        described.contains("EnsuredLoadBalancer") && described.contains("Ensured load balancer"),
        "{described}"
    );
    assert!(described.contains("kube-lb-test"), "{described}");
    assert!(
        described.contains("Type:") && described.contains("LoadBalancer"),
        "{described}"
    );
    assert!(described.contains(&cluster_ip), "{described}");
    assert!(described.contains("9090/TCP"), "{described}");

    // Every patch flavour kubectl offers.
    ok(
        kc,
        &[
            "patch",
            "service",
            "web",
            "-p",
            r#"{"metadata":{"labels":{"patched":"strategic"}}}"#,
        ],
    )
    .await;
    ok(
        kc,
        &[
            "patch",
            "service",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"sessionAffinity":"ClientIP"}}"#,
        ],
    )
    .await;
    ok(
        kc,
        &[
            "patch",
            "service",
            "web",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/annotations/note","value":"json"}]"#,
        ],
    )
    .await;
    let web = get_json(kc, &["get", "service", "web"]).await;
    assert_eq!(web["metadata"]["labels"]["patched"], "strategic");
    assert_eq!(web["spec"]["sessionAffinity"], "ClientIP");
    assert_eq!(
        web["spec"]["sessionAffinityConfig"]["clientIP"]["timeoutSeconds"],
        10800
    );
    assert_eq!(web["metadata"]["annotations"]["note"], "json");

    // A bad patch is rejected with the server's message.
    let out = kubectl(
        kc,
        &[
            "patch",
            "service",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"ports":[{"name":"BAD_NAME","port":80}]}}"#,
        ],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("spec.ports[0].name") && stderr.contains("Invalid"),
        "{stderr}"
    );

    // `kubectl get -w` prints the change as a table row (watch events carry Tables).
    let mut watcher = tokio::process::Command::new(KUBECTL)
        .env("KUBECONFIG", kc)
        .args(["get", "service", "web", "--watch"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(
        watcher.stdout.take().unwrap(),
    ));
    let header = lines.next_line().await.unwrap().unwrap();
    assert!(header.contains("EXTERNAL-IP"), "{header}");

    ok(
        kc,
        &[
            "patch",
            "service",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.10"}]}}}"#,
        ],
    )
    .await;
    let table = ok(kc, &["get", "service", "web"]).await;
    assert!(table.contains("192.0.2.10"), "{table}");
    let seen = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("192.0.2.10") {
                return line;
            }
        }
        panic!("kubectl get -w ended without showing the new address");
    })
    .await
    .expect("kubectl get -w shows the status change within 20s");
    assert!(seen.contains("LoadBalancer"), "{seen}");
    drop(watcher);

    let out = ok(kc, &["delete", "-f", v1.to_str().unwrap()]).await;
    assert!(
        out.contains("\"web\" deleted") && out.contains("\"db\" deleted"),
        "{out}"
    );
    let out = kubectl(kc, &["get", "service", "web"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
    let empty = ok(kc, &["get", "services"]).await;
    assert!(empty.trim().is_empty(), "{empty}");
}

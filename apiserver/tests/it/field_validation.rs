//! Fields a built-in kind does not have, as kube-apiserver treats them: dropped with a warning
//! by default, dropped silently with `fieldValidation=Ignore`, refused with `Strict` (kubectl's
//! default since 1.27, so a typo in a manifest is an error and not a silently ignored field),
//! and always refused by server-side apply.

#![allow(clippy::unwrap_used)]

use reqwest::Method;
use serde_json::{Value, json};

use crate::common;

fn typo_service(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "type": "LoadBalancer",
            "ports": [{"port": 80, "protocl": "TCP"}],
            "loadBalancerSourceRange": ["10.0.0.0/8"],
        },
    })
}

async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Vec<String>, Value) {
    let response = http
        .request(method, url)
        .header("content-type", content_type)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    (code, warnings, response.json().await.unwrap())
}

/// A server (keep it bound), a client, and the URL of its default namespace's Services.
async fn services_rig() -> (kube_lb_apiserver::RunningApiServer, reqwest::Client, String) {
    let server = kube_lb_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    let services = format!("{}/api/v1/namespaces/default/services", server.url());
    (server, reqwest::Client::new(), services)
}

#[tokio::test]
async fn unknown_fields_are_dropped_warned_or_refused_as_asked() {
    let (_server, http, services) = services_rig().await;
    let json = "application/json";

    // The default (Warn): created without them, one warning each.
    let (code, warnings, body) = send(
        &http,
        Method::POST,
        &services,
        json,
        &typo_service("warned"),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [
            "299 - \"unknown field \\\"spec.loadBalancerSourceRange\\\"\"",
            "299 - \"unknown field \\\"spec.ports[0].protocl\\\"\"",
        ]
    );
    assert!(
        body["spec"].get("loadBalancerSourceRange").is_none(),
        "{body}"
    );
    assert_eq!(body["spec"]["ports"][0]["protocol"], "TCP", "defaulted");
    assert!(body["spec"]["ports"][0].get("protocl").is_none(), "{body}");

    // Ignore: the same, silently.
    let url = format!("{services}?fieldValidation=Ignore");
    let (code, warnings, _) = send(&http, Method::POST, &url, json, &typo_service("quiet")).await;
    assert_eq!((code, warnings.len()), (201, 0));

    // Strict: nothing is stored.
    let url = format!("{services}?fieldValidation=Strict");
    let (code, _, body) = send(&http, Method::POST, &url, json, &typo_service("strict")).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(
        body["message"],
        "Service in version \"v1\" cannot be handled as a Service: strict decoding error: \
         unknown field \"spec.loadBalancerSourceRange\", unknown field \"spec.ports[0].protocl\""
    );
    let (code, _) = common::get(&http, &format!("{services}/strict")).await;
    assert_eq!(code, 404);
    // An update, the same way.
    let (_, current) = common::get(&http, &format!("{services}/warned")).await;
    let mut replaced = current.clone();
    replaced["spec"]["extra"] = json!(true);
    let url = format!("{services}/warned?fieldValidation=Strict");
    let (code, _, body) = send(&http, Method::PUT, &url, json, &replaced).await;
    assert_eq!(code, 400, "{body}");

    // A merge patch: Strict is a 422 on `patch`; the default drops and warns.
    let url = format!("{services}/warned?fieldValidation=Strict");
    let patch = json!({"spec": {"externalTrafficPolicy": "Local", "healthCheck": 1}});
    let (code, _, body) = send(&http, Method::PATCH, &url, common::MERGE_PATCH, &patch).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    let cause = &body["details"]["causes"][0];
    assert_eq!(cause["field"], "patch");
    assert!(
        cause["message"]
            .as_str()
            .unwrap()
            .ends_with(": strict decoding error: unknown field \"spec.healthCheck\""),
        "{cause}"
    );
    let url = format!("{services}/warned");
    let (code, warnings, body) =
        send(&http, Method::PATCH, &url, common::MERGE_PATCH, &patch).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        warnings,
        ["299 - \"unknown field \\\"spec.healthCheck\\\"\""]
    );
    assert_eq!(body["spec"]["externalTrafficPolicy"], "Local");
    assert!(body["spec"].get("healthCheck").is_none());
    // A strategic merge patch shows the patch as Go prints it.
    let url = format!("{services}/warned?fieldValidation=Strict");
    let (code, _, body) = send(
        &http,
        Method::PATCH,
        &url,
        "application/strategic-merge-patch+json",
        &json!({"spec": {"bogus": 1}}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        " \"\" is invalid: patch: Invalid value: \"map[spec:map[bogus:1]]\": strict decoding \
         error: unknown field \"spec.bogus\""
    );

    // Server-side apply needs every field declared, whatever the directive.
    let url = format!("{services}/applied?fieldManager=me");
    let (code, _, body) = send(
        &http,
        Method::PATCH,
        &url,
        "application/apply-patch+yaml",
        &typo_service("applied"),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    assert!(body.get("reason").is_none(), "{body}");
    assert_eq!(
        body["message"],
        "failed to create typed patch object (/applied; /v1, Kind=Service): errors:\n  \
         .spec.loadBalancerSourceRange: field not declared in schema\n  \
         .spec.ports[0].protocl: field not declared in schema"
    );

    // Only upstream's directives.
    let url = format!("{services}?fieldValidation=strict");
    let (code, _, body) = send(&http, Method::POST, &url, json, &typo_service("x")).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
    );

    // The field the seeds' Service Topology document writes is kept.
    let mut topology = typo_service("topology");
    topology["spec"] =
        json!({"ports": [{"port": 80}], "topologyKeys": ["kubernetes.io/hostname", "*"]});
    let url = format!("{services}?fieldValidation=Strict");
    let (code, _, body) = send(&http, Method::POST, &url, json, &topology).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        body["spec"]["topologyKeys"],
        json!(["kubernetes.io/hostname", "*"])
    );
}

#[tokio::test]
async fn kubectl_refuses_a_manifest_with_a_typo_and_warns_when_told_to() {
    let Some(rig) = common::kubectl_rig("kubectl_refuses_a_manifest_with_a_typo").await else {
        return;
    };
    let manifest = rig.dir.path().join("svc.yaml");
    std::fs::write(&manifest, typo_service("web").to_string()).unwrap();
    let path = manifest.to_str().unwrap();
    let refused = common::kubectl(&rig.kubeconfig, &["apply", "-f", path]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("strict decoding error: unknown field \"spec.loadBalancerSourceRange\""),
        "{stderr}"
    );
    let warned = common::kubectl(&rig.kubeconfig, &["apply", "--validate=warn", "-f", path]).await;
    assert!(warned.status.success());
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(
        stderr.contains("Warning: unknown field \"spec.loadBalancerSourceRange\""),
        "{stderr}"
    );
    let stored = common::get_json(&rig.kubeconfig, &["get", "svc", "web"]).await;
    assert!(stored["spec"].get("loadBalancerSourceRange").is_none());
}

#[tokio::test]
async fn a_service_gets_kube_apiservers_warnings() {
    let (_server, http, services) = services_rig().await;
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "edge"},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 443}],
                 "loadBalancerSourceRanges": ["203.0.113.7/24"]},
    });
    let (code, warnings, body) =
        send(&http, Method::POST, &services, "application/json", &service).await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(
        warnings,
        [
            "299 - \"spec.loadBalancerSourceRanges[0]: CIDR value \\\"203.0.113.7/24\\\" is \
          ambiguous in this context (should be \\\"203.0.113.0/24\\\" or \\\"203.0.113.7/32\\\"?)\""
        ]
    );
    // The same on an update of the main resource; none on a status write.
    let patch = json!({"spec": {"externalName": "db.example.com"}});
    let url = format!("{services}/edge");
    let (code, warnings, _) = send(&http, Method::PATCH, &url, common::MERGE_PATCH, &patch).await;
    assert_eq!(code, 200);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[1].contains("spec.externalName is ignored when spec.type is not"),
        "{warnings:?}"
    );
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}});
    let url = format!("{services}/edge/status");
    let (code, warnings, _) = send(&http, Method::PATCH, &url, common::MERGE_PATCH, &status).await;
    assert_eq!((code, warnings.len()), (200, 0), "{warnings:?}");
}

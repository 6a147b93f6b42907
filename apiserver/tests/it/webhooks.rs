//! ValidatingWebhookConfigurations through kubectl 1.32 and kube-rs: apply (defaults filled,
//! generation kept), re-apply, the printed table, a 422 for an invalid one, delete.

// Test helpers may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{get_json, kubectl, kubectl_rig, ok};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::Api;
use kube_lb_apiserver::resources;
use kube_lb_apiserver::store::ReadAt;

/// Two webhooks, one called through a Service and one by URL, optional fields left out.
const VALID: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: kube-lb
webhooks:
- name: services.kube-lb.io
  clientConfig:
    service:
      namespace: kube-lb
      name: webhook
      path: /validate
    caBundle: Zm9vCg==
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE", "UPDATE"]
    resources: ["services"]
  sideEffects: None
  admissionReviewVersions: ["v1"]
- name: pools.kube-lb.io
  clientConfig:
    url: https://hooks.example.com/pools
  sideEffects: NoneOnDryRun
  admissionReviewVersions: ["v1", "v1beta1"]
  timeoutSeconds: 5
"#;

/// A side effect v1 does not allow, and no client to call.
const INVALID: &str = r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: bad
webhooks:
- name: bad.kube-lb.io
  clientConfig: {}
  sideEffects: Some
  admissionReviewVersions: ["v1"]
"#;

#[tokio::test]
async fn kubectl_applies_gets_and_deletes_webhook_configurations() {
    let Some(rig) = kubectl_rig("kubectl_applies_gets_and_deletes_webhook_configurations").await
    else {
        return;
    };
    let kc = rig.kubeconfig.as_path();
    let valid = rig.dir.path().join("valid.yaml");
    let invalid = rig.dir.path().join("invalid.yaml");
    std::fs::write(&valid, VALID).unwrap();
    std::fs::write(&invalid, INVALID).unwrap();
    let valid = valid.to_str().unwrap();

    let out = ok(kc, &["apply", "-f", valid]).await;
    assert!(
        out.contains("validatingwebhookconfiguration.admissionregistration.k8s.io/kube-lb created"),
        "{out}"
    );
    let object = get_json(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert_eq!(object["metadata"]["generation"], 1, "{object}");
    let first = &object["webhooks"][0];
    assert_eq!(first["failurePolicy"], "Fail");
    assert_eq!(first["matchPolicy"], "Equivalent");
    assert_eq!(first["timeoutSeconds"], 10);
    assert_eq!(first["namespaceSelector"], serde_json::json!({}));
    assert_eq!(first["objectSelector"], serde_json::json!({}));
    assert_eq!(first["rules"][0]["scope"], "*");
    assert_eq!(first["clientConfig"]["service"]["port"], 443);
    assert_eq!(first["clientConfig"]["caBundle"], "Zm9vCg==");
    assert_eq!(object["webhooks"][1]["timeoutSeconds"], 5);

    // Re-applying the same file changes nothing stored. kubectl still sends the rules again:
    // a rule list is atomic and the live one has the defaulted scope, so kubectl says
    // "configured", as it does against kube-apiserver.
    let version = object["metadata"]["resourceVersion"].clone();
    ok(kc, &["apply", "-f", valid]).await;
    let again = get_json(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert_eq!(again["metadata"]["resourceVersion"], version, "{again}");
    assert_eq!(again["metadata"]["generation"], 1);
    // With every default written out there is nothing to send.
    let explicit = VALID.replace(
        "    resources: [\"services\"]\n",
        "    resources: [\"services\"]\n    scope: \"*\"\n",
    );
    let explicit_path = rig.dir.path().join("explicit.yaml");
    std::fs::write(&explicit_path, explicit).unwrap();
    let explicit_path = explicit_path.to_str().unwrap();
    ok(kc, &["apply", "-f", explicit_path]).await;
    let out = ok(kc, &["apply", "-f", explicit_path]).await;
    assert!(out.contains("unchanged"), "{out}");
    let again = get_json(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert_eq!(again["metadata"]["generation"], 1, "{again}");

    // A changed webhook is a new generation.
    let changed = VALID.replace("timeoutSeconds: 5", "timeoutSeconds: 7");
    let changed_path = rig.dir.path().join("changed.yaml");
    std::fs::write(&changed_path, changed).unwrap();
    let out = ok(kc, &["apply", "-f", changed_path.to_str().unwrap()]).await;
    assert!(out.contains("configured"), "{out}");
    let object = get_json(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert_eq!(object["metadata"]["generation"], 2, "{object}");
    assert_eq!(object["webhooks"][1]["timeoutSeconds"], 7);
    assert_eq!(object["webhooks"].as_array().map(Vec::len), Some(2));

    // The table kube-apiserver prints: name, number of webhooks, age.
    let table = ok(kc, &["get", "validatingwebhookconfigurations"]).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "WEBHOOKS", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..2], ["kube-lb", "2"], "{table}");
    let selected = ok(
        kc,
        &[
            "get",
            "validatingwebhookconfigurations",
            "--field-selector",
            "metadata.name=kube-lb",
            "-o",
            "name",
        ],
    )
    .await;
    assert_eq!(
        selected.trim(),
        "validatingwebhookconfiguration.admissionregistration.k8s.io/kube-lb"
    );

    // Typed clients read it back, and so does the store through the resource's id.
    let api: Api<ValidatingWebhookConfiguration> = Api::all(rig.server.client().unwrap());
    let listed = api.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    let hook = &listed.items[0].webhooks.as_ref().unwrap()[0];
    assert_eq!(hook.side_effects, "None");
    assert_eq!(
        hook.client_config.ca_bundle.as_ref().map(|b| b.0.clone()),
        Some(b"foo\n".to_vec())
    );
    let stored = rig
        .server
        .store()
        .list(
            resources::validating_webhook_configurations(),
            None,
            ReadAt::Latest,
        )
        .unwrap();
    assert_eq!(stored.items.len(), 1);

    // An invalid one is refused with the fields named, as kube-apiserver words it.
    let out = kubectl(kc, &["apply", "-f", invalid.to_str().unwrap()]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"The ValidatingWebhookConfiguration "bad" is invalid"#),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "webhooks[0].clientConfig: Required value: exactly one of url or service is required"
        ),
        "{stderr}"
    );
    let out = kubectl(kc, &["get", "validatingwebhookconfiguration", "bad"]).await;
    assert!(!out.status.success());
    // The Status behind it: 422 Invalid, the qualified kind in the message, causes by field.
    let body: serde_json::Value = serde_yaml_ng::from_str(INVALID).unwrap();
    let (code, status) = common::post(
        &reqwest::Client::new(),
        &format!(
            "{}/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
            rig.server.url()
        ),
        body,
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "ValidatingWebhookConfiguration");
    assert_eq!(status["details"]["group"], "admissionregistration.k8s.io");
    assert!(
        status["message"].as_str().unwrap().starts_with(
            r#"ValidatingWebhookConfiguration.admissionregistration.k8s.io "bad" is invalid: ["#
        ),
        "{status}"
    );
    let fields: Vec<&str> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        ["webhooks[0].sideEffects", "webhooks[0].clientConfig"]
    );

    // Unknown fields are refused by kubectl's strict field validation.
    let typo = VALID.replace(
        "sideEffects: None\n",
        "sideEffects: None\n  sideEfects: None\n",
    );
    let typo_path = rig.dir.path().join("typo.yaml");
    std::fs::write(&typo_path, typo).unwrap();
    let out = kubectl(kc, &["apply", "-f", typo_path.to_str().unwrap()]).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sideEfects"), "{stderr}");

    let described = ok(
        kc,
        &["describe", "validatingwebhookconfiguration", "kube-lb"],
    )
    .await;
    assert!(
        described.contains("services.kube-lb.io") && described.contains("Side Effects"),
        "{described}"
    );

    // Server-side apply of the same content takes the fields over without a change.
    let same = std::fs::read_to_string(explicit_path)
        .unwrap()
        .replace("timeoutSeconds: 5", "timeoutSeconds: 7");
    let same_path = rig.dir.path().join("same.yaml");
    std::fs::write(&same_path, same).unwrap();
    let out = ok(
        kc,
        &["apply", "--server-side", "-f", same_path.to_str().unwrap()],
    )
    .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let again = get_json(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert_eq!(again["metadata"]["generation"], 2, "{again}");

    let out = ok(kc, &["delete", "-f", valid]).await;
    assert!(
        out.contains(
            r#"validatingwebhookconfiguration.admissionregistration.k8s.io "kube-lb" deleted"#
        ),
        "{out}"
    );
    let out = kubectl(kc, &["get", "validatingwebhookconfiguration", "kube-lb"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
}

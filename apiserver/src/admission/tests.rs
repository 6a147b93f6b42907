use std::time::Duration;

use serde_json::json;

use super::*;

fn hook() -> Hook {
    Hook {
        name: "services.webhook.kube-lb.io".into(),
        url: "https://127.0.0.1:1/validate".into(),
        ca_bundle: Vec::new(),
        timeout: Duration::from_secs(1),
        fail_open: false,
    }
}

fn answer(response: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})).unwrap()
}

#[test]
fn answers_are_read_as_kube_apiservers_dispatcher_reads_them() {
    let cases: Vec<(&str, u16, Vec<u8>, Verdict)> = vec![
        (
            "allowed with warnings",
            200,
            answer(json!({"uid": "u", "allowed": true, "warnings": ["a", "b"]})),
            Verdict::Allowed(vec!["a".into(), "b".into()]),
        ),
        (
            "denied with the webhook's code",
            200,
            answer(
                json!({"uid": "u", "allowed": false, "status": {"code": 422, "message": "bad annotation"}}),
            ),
            Verdict::Denied(ApiError::admission_denied(
                422,
                "admission webhook \"services.webhook.kube-lb.io\" denied the request: bad annotation",
            )),
        ),
        (
            "denied without a status",
            200,
            answer(json!({"uid": "u", "allowed": false})),
            Verdict::Denied(ApiError::admission_denied(
                403,
                "admission webhook \"services.webhook.kube-lb.io\" denied the request: without explanation",
            )),
        ),
        (
            "another request's uid",
            200,
            answer(json!({"uid": "v", "allowed": true})),
            Verdict::Failed("expected response.uid=\"u\", got \"v\"".into()),
        ),
        (
            "no response",
            200,
            serde_json::to_vec(&json!({"kind": "AdmissionReview"})).unwrap(),
            Verdict::Failed("webhook response was absent".into()),
        ),
        (
            "an HTTP error",
            400,
            b"malformed".to_vec(),
            Verdict::Failed("the server responded with HTTP 400".into()),
        ),
        (
            "not JSON",
            200,
            b"<html>".to_vec(),
            Verdict::Failed("the response is not JSON".into()),
        ),
    ];
    for (name, status, body, expected) in cases {
        assert_eq!(interpret(&hook(), "u", status, &body), expected, "{name}");
    }
}

#[test]
fn the_review_names_the_request_and_carries_dry_run() {
    let object = json!({"metadata": {"name": "web", "namespace": "default"}});
    let attributes = Attributes {
        operation: "UPDATE",
        group: "",
        version: "v1",
        resource: "services",
        subresource: "",
        namespaced: true,
        namespace_labels: Default::default(),
        object: Some(&object),
        old_object: Some(&object),
    };
    let review = review_request("u", "Service", "web", Some("default"), &attributes, true);
    let request = &review["request"];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(request["uid"], "u");
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "Service"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "services"})
    );
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["dryRun"], true);
    assert_eq!(request["options"]["kind"], "UpdateOptions");
    assert_eq!(request["object"], object);
    assert_eq!(request["oldObject"], object);
    assert!(request.get("subResource").is_none());
}

#[tokio::test]
async fn an_unreachable_webhook_fails_closed_or_open_by_its_policy() {
    // Nothing listens on port 1 of loopback.
    let object = json!({"metadata": {"name": "web"}});
    let attributes = Attributes {
        operation: "CREATE",
        group: "",
        version: "v1",
        resource: "services",
        subresource: "",
        namespaced: true,
        namespace_labels: Default::default(),
        object: Some(&object),
        old_object: None,
    };
    let closed = admit(
        &[hook()],
        "Service",
        "web",
        Some("default"),
        &attributes,
        false,
    )
    .await;
    let error = closed.unwrap_err();
    assert_eq!(error.code, 500);
    assert!(
        error.message.starts_with(
            "Internal error occurred: failed calling webhook \"services.webhook.kube-lb.io\": Post"
        ),
        "{}",
        error.message
    );
    let open = Hook {
        fail_open: true,
        ..hook()
    };
    assert_eq!(
        admit(
            &[open],
            "Service",
            "web",
            Some("default"),
            &attributes,
            false
        )
        .await,
        Ok(Vec::new())
    );
}

#[tokio::test]
async fn a_webhook_that_never_answers_is_cut_off_at_its_timeout() {
    // Accepts connections and never answers (not even the TLS handshake).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}/validate", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let object = json!({"metadata": {"name": "web"}});
    let attributes = Attributes {
        operation: "CREATE",
        group: "",
        version: "v1",
        resource: "services",
        subresource: "",
        namespaced: true,
        namespace_labels: Default::default(),
        object: Some(&object),
        old_object: None,
    };
    let slow = Hook {
        url,
        timeout: Duration::from_secs(1),
        ..hook()
    };
    let started = std::time::Instant::now();
    let closed = admit(
        std::slice::from_ref(&slow),
        "Service",
        "web",
        Some("default"),
        &attributes,
        false,
    )
    .await;
    let waited = started.elapsed();
    let error = closed.unwrap_err();
    assert!(
        error.message.contains("context deadline exceeded"),
        "{}",
        error.message
    );
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    let open = Hook {
        fail_open: true,
        ..slow
    };
    assert_eq!(
        admit(
            &[open],
            "Service",
            "web",
            Some("default"),
            &attributes,
            false
        )
        .await,
        Ok(Vec::new())
    );
    held.abort();
}

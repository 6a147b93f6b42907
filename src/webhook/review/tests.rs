use serde_json::{Value, json};

use super::*;
use kube_lb_annotations::Cloud;

fn config(cloud: Cloud) -> ControllerConfig {
    ControllerConfig::new(cloud)
}

fn service(annotations: Value, type_: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "default", "annotations": annotations},
        "spec": {"type": type_, "ports": [{"port": 80, "protocol": "TCP"}]},
    })
}

fn admission(
    operation: &str,
    resource: &str,
    sub_resource: Option<&str>,
    object: Value,
) -> Vec<u8> {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "", "version": "v1", "kind": "Service"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "operation": operation,
        "namespace": "default",
        "name": "web",
        "object": object,
        "dryRun": false,
    });
    if let Some(sub) = sub_resource {
        request["subResource"] = json!(sub);
    }
    serde_json::to_vec(
        &json!({"apiVersion": ADMISSION_V1, "kind": "AdmissionReview", "request": request}),
    )
    .unwrap()
}

const INTERVAL: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";
const TYPE: &str = "service.beta.kubernetes.io/aws-load-balancer-type";

type Case = (
    &'static str,
    Vec<u8>,
    Mode,
    bool,
    Vec<String>,
    Option<&'static str>,
);

#[test]
fn findings_become_warnings_or_a_denial_with_their_field_path() {
    let bad = service(json!({INTERVAL: "2"}), "LoadBalancer");
    let surprising = service(json!({TYPE: "bogus"}), "LoadBalancer");
    // (case, request, mode, allowed, warnings that must be there (prefixes), denial message part)
    let cases: Vec<Case> = vec![
        (
            "an error is a warning by default",
            admission("CREATE", "services", None, bad.clone()),
            Mode::Warn,
            true,
            vec![format!(
                "metadata.annotations[{INTERVAL}]: invalid value \"2\": must be an integer from 5 to 300"
            )],
            None,
        ),
        (
            "an error refuses the Service with --deny",
            admission("UPDATE", "services", None, bad.clone()),
            Mode::Deny,
            false,
            vec![],
            Some(
                "metadata.annotations[service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval]: invalid value \"2\"",
            ),
        ),
        (
            "a warning is a warning in both modes",
            admission("CREATE", "services", None, surprising.clone()),
            Mode::Deny,
            true,
            vec![format!("metadata.annotations[{TYPE}]: \"bogus\": ")],
            None,
        ),
        (
            "a clean Service has nothing to say",
            admission(
                "CREATE",
                "services",
                None,
                service(json!({}), "LoadBalancer"),
            ),
            Mode::Deny,
            true,
            vec![],
            None,
        ),
        (
            "a ClusterIP Service is not judged",
            admission(
                "CREATE",
                "services",
                None,
                service(json!({INTERVAL: "2"}), "ClusterIP"),
            ),
            Mode::Deny,
            true,
            vec![],
            None,
        ),
        (
            "a status update is not judged",
            admission("UPDATE", "services", Some("status"), bad.clone()),
            Mode::Deny,
            true,
            vec![],
            None,
        ),
        (
            "a delete is not judged",
            admission("DELETE", "services", None, Value::Null),
            Mode::Deny,
            true,
            vec![],
            None,
        ),
        (
            "another resource is not judged",
            admission("CREATE", "configmaps", None, json!({"kind": "ConfigMap"})),
            Mode::Deny,
            true,
            vec![],
            None,
        ),
    ];
    for (name, body, mode, allowed, warnings, denial) in cases {
        let answer =
            review(&body, &config(Cloud::Aws), mode).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(answer["apiVersion"], ADMISSION_V1, "{name}");
        assert_eq!(answer["kind"], "AdmissionReview", "{name}");
        let response = &answer["response"];
        assert_eq!(
            response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002",
            "{name}"
        );
        assert_eq!(response["allowed"], allowed, "{name}: {response}");
        let got: Vec<&str> = response["warnings"]
            .as_array()
            .map(|w| w.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(got.len(), warnings.len(), "{name}: {got:?}");
        for expected in &warnings {
            assert!(
                got.iter().any(|w| w.starts_with(expected.as_str())),
                "{name}: no warning starting {expected:?} in {got:?}"
            );
        }
        match denial {
            Some(part) => {
                assert_eq!(response["status"]["code"], 422, "{name}");
                let message = response["status"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(part), "{name}: {message}");
            }
            None => assert!(response.get("status").is_none(), "{name}: {response}"),
        }
    }
}

#[test]
fn a_service_of_another_class_is_left_to_its_controller() {
    let mut other = service(json!({INTERVAL: "2"}), "LoadBalancer");
    other["spec"]["loadBalancerClass"] = json!("example.com/other");
    let answer = review(
        &admission("CREATE", "services", None, other),
        &config(Cloud::Aws),
        Mode::Deny,
    )
    .unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("warnings").is_none(), "{answer}");
}

#[test]
fn the_annotations_of_the_configured_cloud_are_judged() {
    // The interval is an AWS annotation: an error for AWS, never that error on `local`.
    let body = admission(
        "CREATE",
        "services",
        None,
        service(json!({INTERVAL: "2"}), "LoadBalancer"),
    );
    let local = review(&body, &config(Cloud::Local), Mode::Deny).unwrap();
    assert_eq!(local["response"]["allowed"], true, "{local}");
    let aws = review(&body, &config(Cloud::Aws), Mode::Deny).unwrap();
    assert_eq!(aws["response"]["allowed"], false, "{aws}");
}

#[test]
fn a_malformed_review_is_refused_with_the_reason() {
    let encode = |v: Value| serde_json::to_vec(&v).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"{".to_vec(), "not JSON"),
        (
            "v1beta1",
            encode(
                json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}),
            ),
            "admission.k8s.io/v1beta1",
        ),
        (
            "another kind",
            encode(json!({"apiVersion": ADMISSION_V1, "kind": "TokenReview"})),
            "TokenReview",
        ),
        (
            "no request",
            encode(json!({"apiVersion": ADMISSION_V1, "kind": "AdmissionReview"})),
            "no request",
        ),
        (
            "no uid",
            encode(
                json!({"apiVersion": ADMISSION_V1, "kind": "AdmissionReview", "request": {"operation": "CREATE"}}),
            ),
            "request.uid",
        ),
        (
            "a create without its object",
            encode(
                json!({"apiVersion": ADMISSION_V1, "kind": "AdmissionReview", "request": {"uid": "u", "operation": "CREATE", "resource": {"group": "", "version": "v1", "resource": "services"}}}),
            ),
            "without request.object",
        ),
        (
            "an object that is no Service",
            admission(
                "CREATE",
                "services",
                None,
                json!({"kind": "Service", "spec": {"ports": "eighty"}}),
            ),
            "not a Service",
        ),
    ];
    for (name, body, reason) in cases {
        match review(&body, &config(Cloud::Aws), Mode::Warn) {
            Err(Malformed(message)) => assert!(message.contains(reason), "{name}: {message}"),
            Ok(answer) => panic!("{name}: answered {answer}"),
        }
    }
}

use serde_json::json;

use super::*;

fn service_create<'a>(object: &'a Value, namespace_labels: &[(&str, &str)]) -> Attributes<'a> {
    Attributes {
        operation: "CREATE",
        group: "",
        version: "v1",
        resource: "services",
        subresource: "",
        namespaced: true,
        namespace_labels: namespace_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        object: Some(object),
        old_object: None,
    }
}

fn configuration(webhook: Value) -> Value {
    let mut hook = json!({
        "name": "services.webhook.kube-lb.io",
        "clientConfig": {"url": "https://127.0.0.1:9443/validate-service", "caBundle": "LS0tLQ=="},
        "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["services"], "scope": "Namespaced"}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Ignore",
        "timeoutSeconds": 5,
    });
    if let (Some(hook), Some(extra)) = (hook.as_object_mut(), webhook.as_object()) {
        for (key, value) in extra {
            hook.insert(key.clone(), value.clone());
        }
    }
    json!({"metadata": {"name": "kube-lb"}, "webhooks": [hook]})
}

#[test]
fn rules_and_selectors_choose_the_webhooks_as_kube_apiserver_does() {
    let plain = json!({"metadata": {"name": "web", "labels": {"app": "web"}}});
    let skipped = json!({"metadata": {"name": "web", "labels": {"kube-lb.io/skip-lint": "true"}}});
    let system = [("kubernetes.io/metadata.name", "kube-system")];
    let default = [("kubernetes.io/metadata.name", "default")];
    let not_system = json!({"namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}});
    let no_skip = json!({"objectSelector": {"matchExpressions": [{"key": "kube-lb.io/skip-lint", "operator": "DoesNotExist"}]}});
    let status = |object| Attributes {
        subresource: "status",
        operation: "UPDATE",
        old_object: Some(object),
        ..service_create(object, &default)
    };
    let delete = |object| Attributes {
        operation: "DELETE",
        object: None,
        old_object: Some(object),
        ..service_create(object, &default)
    };
    let configmap = |object| Attributes {
        resource: "configmaps",
        ..service_create(object, &default)
    };
    let cases: Vec<(&str, Value, Attributes, bool)> = vec![
        (
            "a Service create matches",
            json!({}),
            service_create(&plain, &default),
            true,
        ),
        (
            "a status update is a subresource",
            json!({}),
            status(&plain),
            false,
        ),
        (
            "services/status names it",
            json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["services/status"]}]}),
            status(&plain),
            true,
        ),
        (
            "*/* covers subresources",
            json!({"rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"]}]}),
            status(&plain),
            true,
        ),
        (
            "* does not",
            json!({"rules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]}),
            status(&plain),
            false,
        ),
        (
            "DELETE is not in the operations",
            json!({}),
            delete(&plain),
            false,
        ),
        ("another resource", json!({}), configmap(&plain), false),
        (
            "Cluster scope skips namespaced kinds",
            json!({"rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["services"], "scope": "Cluster"}]}),
            service_create(&plain, &default),
            false,
        ),
        (
            "the namespace selector keeps kube-system out",
            not_system.clone(),
            service_create(&plain, &system),
            false,
        ),
        (
            "and lets default in",
            not_system,
            service_create(&plain, &default),
            true,
        ),
        (
            "the object selector skips a labelled Service",
            no_skip.clone(),
            service_create(&skipped, &default),
            false,
        ),
        (
            "and keeps the others",
            no_skip,
            service_create(&plain, &default),
            true,
        ),
        (
            "matchLabels",
            json!({"objectSelector": {"matchLabels": {"app": "web"}}}),
            service_create(&plain, &default),
            true,
        ),
        (
            "matchLabels that differ",
            json!({"objectSelector": {"matchLabels": {"app": "db"}}}),
            service_create(&plain, &default),
            false,
        ),
    ];
    for (name, webhook, attributes, expected) in cases {
        let configuration = configuration(webhook);
        let hooks = matching(&[&configuration], &attributes);
        assert_eq!(hooks.len(), usize::from(expected), "{name}: {hooks:?}");
    }
}

#[test]
fn a_matching_webhook_carries_its_endpoint_trust_timeout_and_policy() {
    let object = json!({"metadata": {"name": "web"}});
    let by_url = configuration(json!({}));
    let by_service = configuration(
        json!({"clientConfig": {"service": {"namespace": "kube-lb", "name": "kube-lb-webhook", "path": "/validate-service"}}, "failurePolicy": "Fail", "timeoutSeconds": 99}),
    );
    let hooks = matching(&[&by_url, &by_service], &service_create(&object, &[]));
    assert_eq!(
        hooks,
        vec![
            Hook {
                name: "services.webhook.kube-lb.io".into(),
                url: "https://127.0.0.1:9443/validate-service".into(),
                ca_bundle: b"----".to_vec(),
                timeout: Duration::from_secs(5),
                fail_open: true,
            },
            Hook {
                name: "services.webhook.kube-lb.io".into(),
                url: "https://kube-lb-webhook.kube-lb.svc:443/validate-service".into(),
                ca_bundle: Vec::new(),
                timeout: Duration::from_secs(30),
                fail_open: false,
            },
        ]
    );
}

#[test]
fn a_write_no_rule_names_needs_no_webhook() {
    let configuration = configuration(json!({"objectSelector": {"matchLabels": {"app": "db"}}}));
    let object = json!({"metadata": {"name": "web"}});
    let create = service_create(&object, &[]);
    // Rules only: the selector (which this object fails) is not looked at.
    assert!(any_rule_matches(&[&configuration], &create));
    let status = Attributes {
        subresource: "status",
        operation: "UPDATE",
        ..service_create(&object, &[])
    };
    assert!(!any_rule_matches(&[&configuration], &status));
    let configmap = Attributes {
        resource: "configmaps",
        ..service_create(&object, &[])
    };
    assert!(!any_rule_matches(&[&configuration], &configmap));
}

//! Which webhooks of the stored ValidatingWebhookConfigurations a request must pass, as
//! kube-apiserver's `webhook/predicates` decide it: rules (operation, group, version,
//! resource and subresource, scope), then the namespace and object selectors.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

/// What a write request is, for matching.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// `CREATE`, `UPDATE` or `DELETE`.
    pub operation: &'static str,
    /// The resource's group (`""` for the core group).
    pub group: &'a str,
    /// Its version.
    pub version: &'a str,
    /// Its plural name.
    pub resource: &'a str,
    /// `status`, or empty for the object itself.
    pub subresource: &'a str,
    /// Whether the resource lives in namespaces.
    pub namespaced: bool,
    /// The labels of the request's namespace (for a Namespace, its own).
    pub namespace_labels: BTreeMap<String, String>,
    /// The object as it would be stored (`None` on DELETE).
    pub object: Option<&'a Value>,
    /// The object before (`None` on CREATE).
    pub old_object: Option<&'a Value>,
}

/// A webhook to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// `webhooks[].name`.
    pub name: String,
    /// Where to POST the review.
    pub url: String,
    /// `clientConfig.caBundle`, decoded (PEM); empty: the system's roots.
    pub ca_bundle: Vec<u8>,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// `failurePolicy: Ignore`: a failed call lets the request through.
    pub fail_open: bool,
}

fn strings(value: Option<&Value>) -> Vec<&str> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `resources` entries match as kube-apiserver's rule matcher does: `*` every resource (not
/// subresources), `*/*` everything, `r/*` every subresource of `r`, `*/s` subresource `s` of
/// every resource.
fn resource_matches(pattern: &str, resource: &str, subresource: &str) -> bool {
    let (want_resource, want_sub) = pattern.split_once('/').unwrap_or((pattern, ""));
    (want_resource == "*" || want_resource == resource)
        && (want_sub == subresource
            || (want_sub == "*" && !subresource.is_empty())
            || pattern == "*/*")
}

fn rule_matches(rule: &Value, attributes: &Attributes) -> bool {
    let any = |list: Vec<&str>, value: &str| list.iter().any(|item| *item == "*" || *item == value);
    let scope = rule.get("scope").and_then(Value::as_str).unwrap_or("*");
    let in_scope = match scope {
        "Cluster" => !attributes.namespaced,
        "Namespaced" => attributes.namespaced,
        _ => true,
    };
    in_scope
        && any(strings(rule.get("operations")), attributes.operation)
        && any(strings(rule.get("apiGroups")), attributes.group)
        && any(strings(rule.get("apiVersions")), attributes.version)
        && strings(rule.get("resources"))
            .iter()
            .any(|pattern| resource_matches(pattern, attributes.resource, attributes.subresource))
}

/// Whether `labels` satisfy a `metav1.LabelSelector` (absent or `{}`: everything).
pub fn selector_matches(selector: Option<&Value>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return true;
    };
    let exact = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|wanted| {
            wanted
                .iter()
                .all(|(key, value)| labels.get(key).map(String::as_str) == value.as_str())
        });
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|expressions| {
            expressions.iter().all(|expression| {
                let key = expression
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let values = strings(expression.get("values"));
                let has = labels.get(key);
                match expression.get("operator").and_then(Value::as_str) {
                    Some("In") => has.is_some_and(|v| values.contains(&v.as_str())),
                    Some("NotIn") => has.is_none_or(|v| !values.contains(&v.as_str())),
                    Some("Exists") => has.is_some(),
                    Some("DoesNotExist") => has.is_none(),
                    // Validation refuses other operators; match nothing rather than everything.
                    _ => false,
                }
            })
        });
    exact && expressions
}

/// The labels of an object.
pub fn labels(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Where a webhook's client configuration points: its `url`, or its Service's DNS name (which
/// only resolves where the cluster's DNS does).
fn url(client: &Value) -> Option<String> {
    if let Some(url) = client.get("url").and_then(Value::as_str) {
        return Some(url.to_owned());
    }
    let service = client.get("service")?;
    let name = service.get("name")?.as_str()?;
    let namespace = service.get("namespace")?.as_str()?;
    let port = service.get("port").and_then(Value::as_u64).unwrap_or(443);
    let path = service.get("path").and_then(Value::as_str).unwrap_or("");
    Some(format!("https://{name}.{namespace}.svc:{port}{path}"))
}

fn ca_bundle(client: &Value) -> Vec<u8> {
    use base64::Engine;
    client
        .get("caBundle")
        .and_then(Value::as_str)
        .and_then(|text| base64::engine::general_purpose::STANDARD.decode(text).ok())
        .unwrap_or_default()
}

/// Whether any webhook's rules name this request (operation, group, version, resource,
/// subresource, scope), before selectors are looked at: a write no rule names needs no
/// webhook, nor the dry run that shows the webhooks the object.
pub fn any_rule_matches(configurations: &[&Value], attributes: &Attributes) -> bool {
    configurations.iter().any(|configuration| {
        configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|webhook| webhook.get("rules").and_then(Value::as_array))
            .flatten()
            .any(|rule| rule_matches(rule, attributes))
    })
}

/// The webhooks of `configurations` that `attributes` must pass, in configuration order.
pub fn matching(configurations: &[&Value], attributes: &Attributes) -> Vec<Hook> {
    let object_labels = labels(attributes.object);
    let old_labels = labels(attributes.old_object);
    let mut hooks = Vec::new();
    for configuration in configurations {
        for webhook in configuration
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let rules = webhook.get("rules").and_then(Value::as_array);
            if !rules.is_some_and(|rules| rules.iter().any(|rule| rule_matches(rule, attributes))) {
                continue;
            }
            // Cluster-scoped objects are not in a namespace; a Namespace is judged by its own labels.
            let namespace_applies = attributes.namespaced || attributes.resource == "namespaces";
            if namespace_applies
                && !selector_matches(
                    webhook.get("namespaceSelector"),
                    &attributes.namespace_labels,
                )
            {
                continue;
            }
            let object_selector = webhook.get("objectSelector");
            let selected = (attributes.object.is_some()
                && selector_matches(object_selector, &object_labels))
                || (attributes.old_object.is_some()
                    && selector_matches(object_selector, &old_labels));
            if !selected {
                continue;
            }
            let client = webhook.get("clientConfig").cloned().unwrap_or_default();
            let Some(url) = url(&client) else { continue };
            hooks.push(Hook {
                name: webhook
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                url,
                ca_bundle: ca_bundle(&client),
                timeout: Duration::from_secs(
                    webhook
                        .get("timeoutSeconds")
                        .and_then(Value::as_u64)
                        .unwrap_or(10)
                        .clamp(1, 30),
                ),
                fail_open: webhook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore"),
            });
        }
    }
    hooks
}

#[cfg(test)]
mod tests;

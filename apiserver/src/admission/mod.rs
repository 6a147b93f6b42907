//! Validating admission webhooks, called as kube-apiserver calls them: every
//! ValidatingWebhookConfiguration webhook whose rules and selectors match a write
//! ([`rules::matching`]) is sent an AdmissionReview (admission.k8s.io/v1) with the object as it
//! would be stored, all of them at once, each within its `timeoutSeconds`. A denial refuses
//! the write with the webhook's status; a failed call refuses it too unless the webhook's
//! `failurePolicy` is `Ignore`; warnings reach the client as `Warning` headers. A `dryRun`
//! request is sent with `dryRun: true` and persists nothing.
//!
//! A webhook configured by `clientConfig.service` is called at the Service's cluster DNS name,
//! which resolves only where the cluster's DNS does: beside the embedded server, configure
//! webhooks by `url`.

pub mod rules;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde_json::{Value, json};

use crate::status::ApiError;
pub use rules::{Attributes, Hook, matching};

/// What one webhook answered.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Allowed, with these warnings.
    Allowed(Vec<String>),
    /// Refused: the error the client gets.
    Denied(ApiError),
    /// No usable answer (unreachable, timed out, not an AdmissionReview, wrong uid).
    Failed(String),
}

/// The `options` kind kube-apiserver sends for an operation.
fn options_kind(operation: &str) -> &'static str {
    match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    }
}

/// The AdmissionReview request for `attributes`.
pub fn review_request(
    uid: &str,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    attributes: &Attributes,
    dry_run: bool,
) -> Value {
    let group_version_kind =
        json!({"group": attributes.group, "version": attributes.version, "kind": kind});
    let group_version_resource = json!({"group": attributes.group, "version": attributes.version, "resource": attributes.resource});
    let mut request = json!({
        "uid": uid,
        "kind": group_version_kind,
        "resource": group_version_resource,
        "requestKind": group_version_kind,
        "requestResource": group_version_resource,
        "name": name,
        "operation": attributes.operation,
        // The embedded server authenticates no one.
        "userInfo": {"username": "system:anonymous", "groups": ["system:unauthenticated"]},
        "object": attributes.object.cloned().unwrap_or(Value::Null),
        "oldObject": attributes.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind(attributes.operation)},
    });
    if let Some(namespace) = namespace {
        request["namespace"] = json!(namespace);
    }
    if !attributes.subresource.is_empty() {
        request["subResource"] = json!(attributes.subresource);
        request["requestSubResource"] = json!(attributes.subresource);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// Reads a webhook's answer to the review with `uid`, as kube-apiserver's validating
/// dispatcher does.
pub fn interpret(hook: &Hook, uid: &str, status: u16, body: &[u8]) -> Verdict {
    if !(200..300).contains(&status) {
        return Verdict::Failed(format!("the server responded with HTTP {status}"));
    }
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return Verdict::Failed("the response is not JSON".into());
    };
    let Some(response) = review.get("response").filter(|r| r.is_object()) else {
        return Verdict::Failed("webhook response was absent".into());
    };
    let answered = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answered != uid {
        return Verdict::Failed(format!("expected response.uid={uid:?}, got {answered:?}"));
    }
    let warnings: Vec<String> = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if response.get("allowed").and_then(Value::as_bool) == Some(true) {
        return Verdict::Allowed(warnings);
    }
    let status = response.get("status");
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(403);
    let message = status
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .unwrap_or("without explanation");
    Verdict::Denied(ApiError::admission_denied(
        code,
        format!(
            "admission webhook {:?} denied the request: {message}",
            hook.name
        ),
    ))
}

/// One HTTPS client per CA bundle (connections are kept alive between reviews).
fn client_for(ca_bundle: &[u8]) -> Result<reqwest::Client, String> {
    static CLIENTS: OnceLock<Mutex<HashMap<Vec<u8>, reqwest::Client>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Mutex::default);
    let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(client) = clients.get(ca_bundle) {
        return Ok(client.clone());
    }
    let mut builder = reqwest::Client::builder();
    if !ca_bundle.is_empty() {
        let roots = reqwest::Certificate::from_pem_bundle(ca_bundle)
            .map_err(|e| format!("caBundle is not PEM: {e}"))?;
        builder = builder.tls_built_in_root_certs(false);
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    let client = builder
        .build()
        .map_err(|e| format!("building the client: {e}"))?;
    clients.insert(ca_bundle.to_vec(), client.clone());
    Ok(client)
}

/// Sends `review` to `hook` and reads its answer.
pub async fn call(hook: &Hook, uid: &str, review: &Value) -> Verdict {
    let client = match client_for(&hook.ca_bundle) {
        Ok(client) => client,
        Err(error) => return Verdict::Failed(error),
    };
    let sent = client
        .post(&hook.url)
        .timeout(hook.timeout)
        .json(review)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(error) if error.is_timeout() => {
            return Verdict::Failed(format!("Post {:?}: context deadline exceeded", hook.url));
        }
        Err(error) => return Verdict::Failed(format!("Post {:?}: {error}", hook.url)),
    };
    let status = response.status().as_u16();
    match response.bytes().await {
        Ok(body) => interpret(hook, uid, status, &body),
        Err(error) => Verdict::Failed(format!("reading the response: {error}")),
    }
}

/// Calls every hook at once and combines their verdicts: the first denial (in configuration
/// order), else the first failure of a `Fail` webhook, else every warning.
pub async fn admit(
    hooks: &[Hook],
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    attributes: &Attributes<'_>,
    dry_run: bool,
) -> Result<Vec<String>, ApiError> {
    let calls = hooks.iter().map(|hook| async move {
        let uid = crate::meta::new_uid();
        let review = review_request(&uid, kind, name, namespace, attributes, dry_run);
        (hook, call(hook, &uid, &review).await)
    });
    let verdicts = futures::future::join_all(calls).await;
    let mut warnings = Vec::new();
    let mut failure = None;
    for (hook, verdict) in verdicts {
        match verdict {
            Verdict::Allowed(mut more) => warnings.append(&mut more),
            Verdict::Denied(error) => return Err(error),
            Verdict::Failed(reason) if hook.fail_open => {
                tracing::warn!(webhook = %hook.name, %reason, "admission webhook failed; failurePolicy Ignore lets the request through");
            }
            Verdict::Failed(reason) => {
                failure.get_or_insert_with(|| {
                    ApiError::internal(format!(
                        "Internal error occurred: failed calling webhook {:?}: {reason}",
                        hook.name
                    ))
                });
            }
        }
    }
    match failure {
        Some(error) => Err(error),
        None => Ok(warnings),
    }
}

#[cfg(test)]
mod tests;

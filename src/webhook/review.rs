//! The admission decision: an AdmissionReview request in, its response out. Pure, so every
//! rule is a table test and the server only moves bytes.

use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{Location, ParseError, Warning};
use serde_json::{Value, json};

use crate::controller::ControllerConfig;

/// The only AdmissionReview version served (the configuration asks for `v1`).
pub const ADMISSION_V1: &str = "admission.k8s.io/v1";

/// What lint found in one Service, as admission messages (`<field path>: <why>`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// The Service cannot be built as written.
    pub errors: Vec<String>,
    /// It can, but the user should know something.
    pub warnings: Vec<String>,
}

/// Where a finding is, as kube-apiserver names fields in its own warnings:
/// `metadata.annotations[<key>]` or the field path.
pub fn field_path(location: &Location) -> String {
    match location {
        Location::Annotation(key) => format!("metadata.annotations[{key}]"),
        Location::Field(path) => path.clone(),
    }
}

fn error_message(error: &ParseError) -> String {
    let path = field_path(&error.location);
    match &error.value {
        Some(value) => format!("{path}: invalid value {value:?}: {}", error.detail),
        None => format!("{path}: {}", error.detail),
    }
}

fn warning_message(warning: &Warning) -> String {
    let path = field_path(&warning.location);
    match &warning.value {
        Some(value) => format!("{path}: {value:?}: {}", warning.detail),
        None => format!("{path}: {}", warning.detail),
    }
}

/// What lint says of `service` under `config` (its cloud and the classes the controller
/// handles). A Service that is no LoadBalancer, or one of a class another controller handles,
/// has no findings: it is not kube-lb's to judge. The `local` provider's address pools are not
/// consulted (the webhook does not watch them); the controller reports pool problems as
/// conditions and events.
pub fn findings(service: &Service, config: &ControllerConfig) -> Findings {
    if !config.manages(service) {
        return Findings::default();
    }
    match kube_lb_annotations::parse(config.cloud, service) {
        Ok(parsed) => Findings {
            errors: Vec::new(),
            warnings: parsed.warnings.iter().map(warning_message).collect(),
        },
        Err(errors) if errors.is_not_load_balancer() => Findings::default(),
        Err(errors) => Findings {
            errors: errors.errors().iter().map(error_message).collect(),
            warnings: errors.warnings().iter().map(warning_message).collect(),
        },
    }
}

/// How findings become an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Errors and warnings are admission warnings; every request is allowed.
    Warn,
    /// A Service with errors is refused (its warnings still shown).
    Deny,
}

/// A request the webhook cannot answer: HTTP 400 with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Malformed(pub String);

/// Answers one AdmissionReview (`body`, JSON). Services are judged by [`findings`]; any other
/// resource, a subresource, and DELETE / CONNECT are allowed as they are. The response carries
/// the request's `uid`, as kube-apiserver requires.
pub fn review(body: &[u8], config: &ControllerConfig, mode: Mode) -> Result<Value, Malformed> {
    let document: Value = serde_json::from_slice(body)
        .map_err(|e| Malformed(format!("the body is not JSON: {e}")))?;
    let api_version = document.get("apiVersion").and_then(Value::as_str);
    if api_version != Some(ADMISSION_V1)
        || document.get("kind").and_then(Value::as_str) != Some("AdmissionReview")
    {
        return Err(Malformed(format!(
            "expected an AdmissionReview of {ADMISSION_V1}, got apiVersion {} kind {}",
            api_version.unwrap_or("(none)"),
            document
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("(none)")
        )));
    }
    let request = document
        .get("request")
        .filter(|r| r.is_object())
        .ok_or_else(|| Malformed("the AdmissionReview has no request".into()))?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())
        .ok_or_else(|| Malformed("request.uid is missing or empty".into()))?;
    let found = judged_service(request)?
        .map(|service| findings(&service, config))
        .unwrap_or_default();
    let mut response = json!({"uid": uid, "allowed": true});
    let refused = mode == Mode::Deny && !found.errors.is_empty();
    let mut warnings = found.warnings;
    if refused {
        response["allowed"] = json!(false);
        response["status"] = json!({
            "code": 422,
            "reason": "Invalid",
            "message": format!(
                "kube-lb cannot build this load balancer: {}",
                found.errors.join("; ")
            ),
        });
    } else {
        let mut errors = found.errors;
        for error in &mut errors {
            error.push_str(" (kube-lb will not build this load balancer until it is fixed)");
        }
        errors.append(&mut warnings);
        warnings = errors;
    }
    if !warnings.is_empty() {
        response["warnings"] = json!(warnings);
    }
    Ok(json!({
        "apiVersion": ADMISSION_V1,
        "kind": "AdmissionReview",
        "response": response,
    }))
}

/// The Service a request asks about: `None` when it is about something else (another
/// resource, a subresource such as `status`, a DELETE or CONNECT).
fn judged_service(request: &Value) -> Result<Option<Service>, Malformed> {
    let resource = request.get("resource");
    let field = |name: &str| {
        resource
            .and_then(|r| r.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let sub_resource = request
        .get("subResource")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let operation = request
        .get("operation")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !field("group").is_empty()
        || field("resource") != "services"
        || !sub_resource.is_empty()
        || !matches!(operation, "CREATE" | "UPDATE")
    {
        return Ok(None);
    }
    let object = request
        .get("object")
        .filter(|o| o.is_object())
        .ok_or_else(|| Malformed(format!("a {operation} of a Service without request.object")))?;
    serde_json::from_value(object.clone())
        .map(Some)
        .map_err(|e| Malformed(format!("request.object is not a Service: {e}")))
}

#[cfg(test)]
mod tests;

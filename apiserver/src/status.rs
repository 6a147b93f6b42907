//! API errors rendered as `kind: Status` objects, the way kube-apiserver reports failures.

use serde_json::{Value, json};

use crate::resources::ResourceDef;

/// One field-level cause of an `Invalid` (422) error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// JSON path of the offending field, e.g. `spec.ports[0].name`.
    pub field: String,
}

impl Cause {
    /// A `FieldValueInvalid` cause.
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: \"{value}\": {detail}"),
            field: field.into(),
        }
    }

    /// A `FieldValueInvalid` cause whose value Go prints without quotes: numbers (`%v`) and
    /// lists (`%#v`, `[]string{"a"}`), as field.Error.ErrorBody renders non-string values
    /// (k8s.io/apimachinery/pkg/util/validation/field/errors.go).
    pub fn invalid_literal(field: impl Into<String>, literal: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: {literal}: {detail}"),
            field: field.into(),
        }
    }

    /// A `FieldValueRequired` cause.
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            message: "Required value".to_string(),
            field: field.into(),
        }
    }

    /// A `FieldValueDuplicate` cause.
    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            message: format!("Duplicate value: \"{value}\""),
            field: field.into(),
        }
    }

    /// A `FieldValueNotSupported` cause.
    pub fn not_supported(field: impl Into<String>, value: &str, allowed: &[&str]) -> Self {
        Self {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: \"{value}\": supported values: {}",
                allowed
                    .iter()
                    .map(|a| format!("\"{a}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            field: field.into(),
        }
    }

    /// A `FieldValueTooMany` cause (`field.TooMany` with both quantities known).
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        let items = if max == 1 { "item" } else { "items" };
        Self {
            reason: "FieldValueTooMany",
            message: format!("Too many: {actual}: must have at most {max} {items}"),
            field: field.into(),
        }
    }

    /// A `FieldValueTooLong` cause (`field.TooLong`, which leaves the value out).
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            message: format!("Too long: may not be more than {max_bytes} bytes"),
            field: field.into(),
        }
    }

    /// A `FieldValueForbidden` cause.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }

    fn render(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// A failed API request: HTTP code plus the Status body fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason` of the Status (`NotFound`, `Conflict`, ...).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` (boxed: errors travel through many `Result`s and should stay small).
    pub details: Box<Details>,
}

/// The `details` of a Status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Details {
    /// `details.name`, when the error is about one object.
    pub name: Option<String>,
    /// `details.group`.
    pub group: Option<String>,
    /// `details.kind` (kube-apiserver puts the plural resource name here).
    pub kind: Option<String>,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `details.retryAfterSeconds`.
    pub retry_after_seconds: Option<u32>,
    /// `metadata.continue` of the Status (not of `details`): the token that continues an
    /// expired paginated list inconsistently, from the newest state.
    pub continue_token: Option<String>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: Box::default(),
        }
    }

    fn about(mut self, def: &ResourceDef, name: &str) -> Self {
        self.details.name = Some(name.to_string());
        self.details.group = Some(def.group.to_string());
        self.details.kind = Some(def.plural.to_string());
        self
    }

    /// 404 for a missing object.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", def.group_resource()),
        )
        .about(def, name)
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    /// 409 for a create of an existing name.
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.group_resource()),
        )
        .about(def, name)
    }

    /// 409 for an update with a stale resourceVersion.
    pub fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                def.group_resource()
            ),
        )
        .about(def, name)
    }

    /// 409 for a failed delete precondition: kube-apiserver names the kind (qualified by its
    /// group) where other conflicts name the resource (rest/delete.go `BeforeDelete`).
    pub fn precondition_failed(def: &ResourceDef, name: &str, why: &str) -> Self {
        let qualified = if def.group.is_empty() {
            def.kind.to_string()
        } else {
            format!("{}.{}", def.kind, def.group)
        };
        let mut err = Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {qualified} \"{name}\": {why}"),
        )
        .about(def, name);
        err.details.kind = Some(def.kind.to_string());
        err
    }

    /// 410 for a resourceVersion older than the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 422 with field causes. The message names the kind qualified by its group
    /// (`EndpointSlice.discovery.k8s.io "x" is invalid: ...`), as apimachinery's
    /// `errors.NewInvalid` does with `GroupKind.String()` (k8s.io/apimachinery/pkg/api/errors).
    pub fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        Self::invalid_kind(def.group, def.kind, Some(name), causes)
    }

    /// The same 422 with `causes` listed before its own (kube-apiserver checks metadata before
    /// a kind's fields and reports both in one error); other errors are returned unchanged.
    pub fn with_causes_first(self, mut causes: Vec<Cause>) -> Self {
        if self.code != 422 || self.details.causes.is_empty() {
            return self;
        }
        let details = *self.details;
        causes.extend(details.causes);
        Self::invalid_kind(
            details.group.as_deref().unwrap_or_default(),
            details.kind.as_deref().unwrap_or_default(),
            Some(details.name.as_deref().unwrap_or_default()),
            causes,
        )
    }

    /// 422 for invalid request options (`ListOptions`, `PatchOptions`, `DeleteOptions`):
    /// kube-apiserver reports them as an invalid object of group `meta.k8s.io` with an empty
    /// name (`ListOptions.meta.k8s.io "" is invalid: ...`; handlers/get.go, handlers/patch.go).
    pub fn invalid_options(kind: &str, causes: Vec<Cause>) -> Self {
        Self::invalid_kind("meta.k8s.io", kind, None, causes)
    }

    fn invalid_kind(group: &str, kind: &str, name: Option<&str>, causes: Vec<Cause>) -> Self {
        let rendered = causes
            .iter()
            .map(Cause::render)
            .collect::<Vec<_>>()
            .join(", ");
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let shown_name = name.unwrap_or_default();
        let message = if causes.len() == 1 {
            format!("{qualified} \"{shown_name}\" is invalid: {rendered}")
        } else {
            format!("{qualified} \"{shown_name}\" is invalid: [{rendered}]")
        };
        let mut err = Self::new(422, "Invalid", message);
        err.details.name = name.filter(|n| !n.is_empty()).map(str::to_string);
        err.details.group = Some(group.to_string());
        err.details.kind = Some(kind.to_string());
        err.details.causes = causes;
        err
    }

    /// A bare 422 `Invalid` without details (a JSON patch that does not apply).
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// 400 for a malformed request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 415 for a body in an encoding the server does not take for this kind.
    pub fn unsupported_body(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 415 for a patch content type the server does not know.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})"
            ),
        )
    }

    /// 500 (also used by fault injection).
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// A validating admission webhook's refusal: its status code (403 when it gave none) and
    /// the reason kube-apiserver pairs with that code.
    pub fn admission_denied(code: u16, message: impl Into<String>) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Gone",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "Forbidden",
        };
        Self::new(code, reason, message)
    }

    /// 403 for a namespace that may not be deleted (the NamespaceLifecycle admission plugin's
    /// answer for `default`, `kube-system` and `kube-public`).
    pub fn immortal_namespace(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: this namespace may not be deleted",
                def.plural
            ),
        )
        .about(def, name)
    }

    /// 403 for new content in a Terminating namespace (the NamespaceLifecycle admission plugin),
    /// with its `NamespaceTerminating` cause. `name` is empty for a create by `generateName`
    /// (admission runs before the name is made), and then the message names no object.
    pub fn namespace_terminating(def: &ResourceDef, name: &str, namespace: &str) -> Self {
        let subject = if name.is_empty() {
            def.group_resource()
        } else {
            format!("{} \"{name}\"", def.group_resource())
        };
        let mut err = Self::new(
            403,
            "Forbidden",
            format!(
                "{subject} is forbidden: unable to create new content in namespace {namespace} \
                 because it is being terminated"
            ),
        )
        .about(def, name);
        err.details.causes.push(Cause {
            reason: "NamespaceTerminating",
            message: format!("namespace {namespace} is being terminated"),
            field: "metadata.namespace".into(),
        });
        err
    }

    /// 500 for a create whose object names a resourceVersion: etcd3 storage refuses it (the
    /// object was most likely copied from a read), and kube-apiserver passes that on as an
    /// error of no known reason.
    pub fn resource_version_on_create() -> Self {
        Self::unknown("resourceVersion should not be set on objects to be created")
    }

    /// A plain 500 with no reason: what kube-apiserver answers for an error that is not an API
    /// status of its own (`StatusReasonUnknown`, which Go leaves out).
    pub fn unknown(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// The patch handler's 422 for a patched object it cannot take: no kind and no name, one
    /// cause on `patch` holding what was patched (`shown`, quoted as Go's `%q` does).
    pub fn invalid_patch(shown: &str, detail: &str) -> Self {
        Self::invalid_kind(
            "",
            "",
            Some(""),
            vec![Cause::invalid_literal(
                "patch",
                &format!("{shown:?}"),
                detail,
            )],
        )
    }

    /// 429 (fault injection).
    pub fn too_many_requests() -> Self {
        let mut err = Self::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        );
        err.details.retry_after_seconds = Some(1);
        err
    }

    /// 504 for a resourceVersion newer than anything the server has seen.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        let mut err = Self::new(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        );
        err.details.causes.push(Cause {
            reason: "ResourceVersionTooLarge",
            message: "Too large resource version".to_string(),
            field: String::new(),
        });
        err.details.retry_after_seconds = Some(1);
        err
    }

    /// The `kind: Status` body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            // metav1.StatusReasonUnknown is "", which Go leaves out.
            if let Some(fields) = status.as_object_mut() {
                fields.remove("reason");
            }
        }
        let mut details = serde_json::Map::new();
        let d = &self.details;
        // Go leaves an empty name out (omitempty), as it does the group.
        if let Some(name) = d.name.as_ref().filter(|n| !n.is_empty()) {
            details.insert("name".into(), json!(name));
        }
        if let Some(group) = d.group.as_ref().filter(|g| !g.is_empty()) {
            details.insert("group".into(), json!(group));
        }
        if let Some(kind) = d.kind.as_ref().filter(|k| !k.is_empty()) {
            details.insert("kind".into(), json!(kind));
        }
        if !d.causes.is_empty() {
            let causes: Vec<Value> = d
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"reason": c.reason, "message": c.message});
                    if !c.field.is_empty() {
                        cause["field"] = json!(c.field);
                    }
                    cause
                })
                .collect();
            details.insert("causes".into(), Value::Array(causes));
        }
        if let Some(secs) = d.retry_after_seconds {
            details.insert("retryAfterSeconds".into(), json!(secs));
        }
        if !details.is_empty() {
            status["details"] = Value::Object(details);
        }
        if let Some(token) = &d.continue_token {
            status["metadata"] = json!({"continue": token});
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// The Status returned by a successful DELETE of an object that is gone immediately.
pub fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources;

    #[test]
    fn invalid_status_lists_causes() {
        let def = resources::get(resources::services());
        let err = ApiError::invalid(def, "web", vec![Cause::required("spec.ports[0].name")]);
        let status = err.to_status();
        assert_eq!(status["code"], 422);
        assert_eq!(status["reason"], "Invalid");
        assert_eq!(status["details"]["kind"], "Service");
        assert_eq!(
            status["details"]["causes"][0]["field"],
            "spec.ports[0].name"
        );
        assert_eq!(
            status["message"],
            "Service \"web\" is invalid: spec.ports[0].name: Required value"
        );
    }

    #[test]
    fn not_found_names_group_resource() {
        let def = resources::get(resources::find("coordination.k8s.io", "v1", "leases").unwrap());
        let status = ApiError::not_found(def, "lock").to_status();
        assert_eq!(
            status["message"],
            "leases.coordination.k8s.io \"lock\" not found"
        );
        assert_eq!(status["details"]["group"], "coordination.k8s.io");
        assert_eq!(status["details"]["kind"], "leases");
    }
}

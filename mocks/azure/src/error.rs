//! ARM error responses: `{"error":{"code","message","details"}}` with the HTTP status ARM uses.

use axum::http::StatusCode;
use serde_json::{Value, json};

/// One error the mock answers with, shaped like ARM's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmError {
    /// HTTP status.
    pub status: StatusCode,
    /// `error.code`, e.g. `InvalidResourceReference`.
    pub code: String,
    /// `error.message`.
    pub message: String,
    /// Extra `error.details[].code` entries (e.g. `PreconditionFailedEtagMismatch`).
    pub details: Vec<String>,
}

impl ArmError {
    /// An error with no details.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ArmError {
            status,
            code: code.to_string(),
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// A 400 with the given code (ARM's usual answer to a body it refuses).
    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        ArmError::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// A 404 `ResourceNotFound`.
    pub fn not_found(kind: &str, name: &str) -> Self {
        ArmError::new(
            StatusCode::NOT_FOUND,
            "ResourceNotFound",
            format!("The Resource 'Microsoft.Network/{kind}/{name}' was not found."),
        )
    }

    /// The 412 ARM returns when `If-Match` does not match the current etag.
    pub fn etag_mismatch(name: &str) -> Self {
        ArmError {
            status: StatusCode::PRECONDITION_FAILED,
            code: "PreconditionFailed".into(),
            message: format!(
                "Precondition failed: the etag in the If-Match header does not match the current etag of resource {name}."
            ),
            details: vec!["PreconditionFailedEtagMismatch".into()],
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let details: Vec<Value> = self
            .details
            .iter()
            .map(|code| json!({"code": code, "message": self.message}))
            .collect();
        json!({"error": {"code": self.code, "message": self.message, "details": details}})
    }
}

//! GCE-shaped error responses: `{error:{code, message, errors:[{domain, reason, message}]}}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error the mock answers with, shaped like a real Compute API error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// `errors[0].reason` (`notFound`, `alreadyExists`, `invalid`, …).
    pub reason: String,
    /// Human-readable message (clients string-match some of them, e.g. "being used by").
    pub message: String,
    /// `Retry-After` seconds, for throttling responses.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with the given status, reason and message.
    pub fn new(status: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            reason: reason.to_string(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400 `invalid`: a request field breaks the API's rules.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid", message)
    }

    /// 404 `notFound` for a canonical resource path.
    pub fn not_found(path: &str) -> Self {
        ApiError::new(
            404,
            "notFound",
            format!("The resource '{path}' was not found"),
        )
    }

    /// 409 `alreadyExists` for a canonical resource path.
    pub fn already_exists(path: &str) -> Self {
        ApiError::new(
            409,
            "alreadyExists",
            format!("The resource '{path}' already exists"),
        )
    }

    /// 400 `resourceInUseByAnotherResource`; the message carries "is already being used by",
    /// which the upstream provider string-matches.
    pub fn in_use(path: &str, user: &str) -> Self {
        ApiError::new(
            400,
            "resourceInUseByAnotherResource",
            format!("The {path} resource '{path}' is already being used by '{user}'"),
        )
    }

    /// 403 `quotaExceeded`.
    pub fn quota(metric: &str, limit: u64, region: &str) -> Self {
        ApiError::new(
            403,
            "quotaExceeded",
            format!("Quota '{metric}' exceeded.  Limit: {limit}.0 in region {region}."),
        )
    }

    /// 412 `conditionNotMet` (stale fingerprint).
    pub fn condition_not_met(message: impl Into<String>) -> Self {
        ApiError::new(412, "conditionNotMet", message)
    }

    /// The JSON error body.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"domain": "global", "reason": self.reason, "message": self.message}],
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(secs));
        }
        response
    }
}

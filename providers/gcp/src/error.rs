//! Errors of this crate, and the classification of Compute API failures into the controller's
//! classes (retryable, user error, internal).

use std::time::Duration;

use kube_lb_provider_core::ProviderError;

/// Why the provider could not be constructed.
#[derive(Debug, thiserror::Error)]
pub enum GcpError {
    /// The cloud-config file could not be read.
    #[error("reading cloud config {path}")]
    ReadConfig {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cloud-config is incomplete or malformed.
    #[error("cloud config: {0}")]
    Config(String),
    /// A Compute API client could not be built.
    #[error("building the {service} client")]
    Client {
        /// The service client (e.g. `ForwardingRules`).
        service: &'static str,
        /// The builder error.
        #[source]
        source: google_cloud_gax::client_builder::Error,
    },
    /// A call made while starting (listing zones) failed.
    #[error("starting the GCP provider")]
    Startup(#[source] ProviderError),
}

/// One failed Compute call, reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status (or the operation's `httpErrorStatusCode`), when known.
    pub status: Option<u16>,
    /// `errors[0].reason` for synchronous errors, `errors[0].code` for operation errors.
    pub reason: String,
    /// The message.
    pub message: String,
    /// `Retry-After`, when the server sent one.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// From a client error (HTTP status, headers and the GCE error body).
    pub fn from_client(error: &google_cloud_compute_v1::Error) -> Failure {
        let status = error.http_status_code();
        let retry_after = error
            .http_headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body: Option<serde_json::Value> = error
            .http_payload()
            .and_then(|p| serde_json::from_slice(p).ok());
        let detail = body.as_ref().and_then(|b| b.pointer("/error/errors/0"));
        let reason = detail
            .and_then(|d| d.get("reason"))
            .and_then(|r| r.as_str())
            .unwrap_or_default()
            .to_string();
        let message = body
            .as_ref()
            .and_then(|b| b.pointer("/error/message"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        Failure {
            status,
            reason,
            message,
            retry_after,
        }
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404) || self.reason == "RESOURCE_NOT_FOUND"
    }

    /// 409 (name taken).
    pub fn is_conflict(&self) -> bool {
        self.status == Some(409)
    }

    /// 400 "in use" (the upstream provider string-matches "being used by" too).
    pub fn is_in_use(&self) -> bool {
        self.reason == "resourceInUseByAnotherResource"
            || self.reason == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
            || self.message.contains("being used by")
    }

    /// Throttling, server errors, stale fingerprints and transport failures.
    pub fn is_retryable(&self) -> bool {
        match self.status {
            None => true,
            Some(429 | 412) => true,
            Some(403) => matches!(
                self.reason.as_str(),
                "rateLimitExceeded" | "userRateLimitExceeded" | "RATE_LIMIT_EXCEEDED"
            ),
            Some(s) => s >= 500,
        }
    }

    /// Worth repeating the same request at once (after `Retry-After`): throttling, server
    /// errors, transport failures. A stale fingerprint (412) is not: it needs a fresh read.
    pub fn retry_in_place(&self) -> bool {
        self.is_retryable() && self.status != Some(412)
    }

    /// Classifies for the controller.
    pub fn into_provider_error(self, operation: &'static str) -> ProviderError {
        let quota = self.reason == "quotaExceeded" || self.reason == "QUOTA_EXCEEDED";
        let text = match self.status {
            Some(status) => format!("HTTP {status} {}: {}", self.reason, self.message),
            None => self.message.clone(),
        };
        if self.is_retryable() {
            ProviderError::Retryable {
                operation,
                message: text,
                source: None,
            }
        } else if quota || matches!(self.status, Some(400 | 403 | 409 | 412)) {
            ProviderError::User {
                message: format!("{operation}: {text}"),
            }
        } else {
            ProviderError::Internal {
                message: format!("{operation}: {text}"),
                source: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: Option<u16>, reason: &str, message: &str) -> Failure {
        Failure {
            status,
            reason: reason.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    #[test]
    fn classifies_like_the_upstream_provider() {
        let cases = [
            (failure(Some(429), "rateLimitExceeded", ""), "retryable"),
            (failure(Some(403), "rateLimitExceeded", ""), "retryable"),
            (failure(Some(503), "backendError", ""), "retryable"),
            (failure(Some(412), "conditionNotMet", ""), "retryable"),
            (failure(None, "", "connection reset"), "retryable"),
            (
                failure(Some(403), "quotaExceeded", "Quota 'FORWARDING_RULES'"),
                "user",
            ),
            (failure(Some(400), "invalid", "bad IP"), "user"),
            (failure(Some(403), "forbidden", ""), "user"),
            (failure(Some(404), "notFound", ""), "internal"),
        ];
        for (failure, class) in cases {
            let label = format!("{failure:?}");
            assert_eq!(failure.into_provider_error("op").class(), class, "{label}");
        }
    }

    #[test]
    fn recognises_in_use_and_not_found() {
        assert!(failure(Some(400), "resourceInUseByAnotherResource", "").is_in_use());
        assert!(failure(Some(400), "invalid", "is already being used by 'x'").is_in_use());
        assert!(!failure(Some(400), "invalid", "bad").is_in_use());
        assert!(failure(Some(404), "notFound", "").is_not_found());
        assert!(failure(None, "RESOURCE_NOT_FOUND", "").is_not_found());
    }
}

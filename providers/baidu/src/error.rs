//! What a BCE answer means in kube-lb's error taxonomy.
//!
//! | answer | class | why |
//! |---|---|---|
//! | `SignatureDoesNotMatch`, `InvalidAccessKeyId`, `AccessDenied`, 401/403 | Environment / PermissionDenied | the keys are refused |
//! | `RequestExpired` | Transient | the clock moved; re-signed and retried in place |
//! | `QuotaExceeded` (and codes containing `Quota`) | Environment / Quota | an account limit |
//! | `EipInUse` (also as `*.EipInUse`) | Environment / AddressInUse | the EIP is bound to something else |
//! | `OperationDenied`, 409 on a BLB or EIP that is `creating`/`updating`/bound | Pending | waited out, then retried |
//! | `NoSuchObject`, `ResourceNotFound` / 404 | Stale | it vanished under us; the next pass reads afresh |
//! | 429, `RequestLimitExceeded` | Transient (counted as throttled) | the request rate; retried in place |
//! | 5xx (also without a JSON body, from a gateway), transport failures | Transient | retried in place |
//! | anything else | Unknown | reported with BCE's code and message, retried with backoff |

use kube_lb_provider_core::error::Classification;
use kube_lb_provider_core::{EnvironmentCause, ProviderError};

/// A failed BCE call.
#[derive(Debug, thiserror::Error)]
pub enum BceError {
    /// BCE answered with an error.
    #[error("{operation}: {code} (HTTP {status}): {message} [requestId {request_id}]")]
    Api {
        /// The operation (`blb:CreateLoadBalancer`).
        operation: &'static str,
        /// HTTP status.
        status: u16,
        /// BCE's error code.
        code: String,
        /// BCE's message.
        message: String,
        /// BCE's request id, for a support ticket.
        request_id: String,
    },
    /// No answer (connection refused, timeout, TLS).
    #[error("{operation}: {source}")]
    Transport {
        /// The operation.
        operation: &'static str,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// An answer kube-lb cannot use.
    #[error("{operation}: {message}")]
    Unexpected {
        /// The operation.
        operation: &'static str,
        /// What was wrong.
        message: String,
    },
}

impl BceError {
    /// BCE's error code, for API errors.
    pub fn code(&self) -> Option<&str> {
        match self {
            BceError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when the object is gone.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BceError::Api { status: 404, .. })
            || matches!(self.code(), Some("NoSuchObject" | "ResourceNotFound"))
    }

    /// True for "busy": the BLB or EIP is in a transitional state.
    pub fn is_busy(&self) -> bool {
        matches!(self.classification(), Classification::Pending)
    }

    /// Where this error falls in the shared taxonomy.
    pub fn classification(&self) -> Classification {
        match self {
            BceError::Transport { .. } => Classification::Transient,
            BceError::Unexpected { .. } => Classification::Unknown,
            BceError::Api { status, code, .. } => match code.as_str() {
                "SignatureDoesNotMatch" | "InvalidAccessKeyId" | "AccessDenied" => {
                    Classification::Environment(EnvironmentCause::PermissionDenied)
                }
                "RequestExpired" | "RequestLimitExceeded" | "InternalError" => {
                    Classification::Transient
                }
                "OperationDenied" => Classification::Pending,
                "NoSuchObject" | "ResourceNotFound" => Classification::Stale,
                c if c.contains("Quota") => Classification::Environment(EnvironmentCause::Quota),
                c if c == "EipInUse" || c.ends_with(".EipInUse") => {
                    Classification::Environment(EnvironmentCause::AddressInUse)
                }
                _ => match status {
                    429 | 500..=599 => Classification::Transient,
                    401 | 403 => Classification::Environment(EnvironmentCause::PermissionDenied),
                    404 => Classification::Stale,
                    409 => Classification::Pending,
                    _ => Classification::Unknown,
                },
            },
        }
    }

    /// True when BCE refused the request rate (`RequestLimitExceeded`, HTTP 429).
    pub fn is_throttled(&self) -> bool {
        matches!(self, BceError::Api { status, code, .. } if *status == 429 || code == "RequestLimitExceeded")
    }

    fn operation(&self) -> &'static str {
        match self {
            BceError::Api { operation, .. }
            | BceError::Transport { operation, .. }
            | BceError::Unexpected { operation, .. } => operation,
        }
    }
}

impl From<BceError> for ProviderError {
    fn from(error: BceError) -> Self {
        let (operation, message) = (error.operation(), error.to_string());
        let (class, throttled) = (error.classification(), error.is_throttled());
        class.into_error(operation, message, throttled, Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, code: &str) -> BceError {
        BceError::Api {
            operation: "blb:CreateLoadBalancer",
            status,
            code: code.into(),
            message: "m".into(),
            request_id: "r".into(),
        }
    }

    #[test]
    fn codes_map_onto_the_shared_taxonomy() {
        let cases = [
            (400, "SignatureDoesNotMatch", "environment"),
            (403, "InvalidAccessKeyId", "environment"),
            (400, "RequestExpired", "retryable"),
            (429, "RequestLimitExceeded", "retryable"),
            (500, "InternalError", "retryable"),
            (503, "Whatever", "retryable"),
            (409, "OperationDenied", "retryable"),
            (400, "QuotaExceeded", "environment"),
            (404, "NoSuchObject", "internal"),
            (404, "ResourceNotFound", "internal"),
            (400, "Eip.EipQuotaExceeded", "environment"),
            (409, "EipInUse", "environment"),
            (502, "", "retryable"),
            (400, "InappropriateJSON", "internal"),
        ];
        for (status, code, class) in cases {
            let error = ProviderError::from(api(status, code));
            assert_eq!(error.class(), class, "{code}");
            assert!(
                error.to_string().contains(code),
                "{code}: the Warning names BCE's code"
            );
        }
        assert!(api(409, "OperationDenied").is_busy());
        assert!(api(404, "NoSuchObject").is_not_found());
        assert!(api(400, "ResourceNotFound").is_not_found());
        assert!(api(400, "RequestLimitExceeded").is_throttled());
        assert!(api(429, "").is_throttled());
        assert!(!api(503, "ServiceUnavailable").is_throttled());
        assert!(matches!(
            ProviderError::from(api(400, "RequestLimitExceeded")),
            ProviderError::Throttled { .. }
        ));
        assert!(matches!(
            ProviderError::from(api(409, "EipInUse")),
            ProviderError::Environment {
                cause: EnvironmentCause::AddressInUse,
                ..
            }
        ));
        assert!(!ProviderError::from(api(409, "OperationDenied")).is_transient());
        assert!(ProviderError::from(api(429, "RequestLimitExceeded")).is_transient());
    }
}

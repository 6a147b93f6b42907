//! What a CLB API answer means in kube-lb's error taxonomy.
//!
//! | answer | class | why |
//! |---|---|---|
//! | `RequestLimitExceeded*`, `FailedOperation.RateLimitExceeded` | Transient (counted as throttled) | the account's request rate; retried in place after the shared limiter |
//! | `InternalError*`, `ResourceUnavailable*`, transport failures | Transient | the cloud's side, retried in place |
//! | `FailedOperation.ResourceInOperating` | Pending | another task runs on the CLB; the provider waits and retries |
//! | `AuthFailure*`, `UnauthorizedOperation*` | Environment / PermissionDenied | the credentials or the CAM policy |
//! | `LimitExceeded*`, `ResourceInsufficient*` | Environment / Quota | a region or CLB quota |
//! | `InvalidParameter.SubnetIdNotFound`, `InvalidParameter.VpcIdNotFound` | Environment / MissingDependency | the configuration names what does not exist |
//! | `InvalidParameter.PortCheckFailed` | Environment / AddressInUse | a listener of someone else holds the port |
//! | `InvalidParameter.LBIdNotFound`, `InvalidParameter.ListenerIdNotFound` | Stale | the object vanished under us |
//! | `UnknownParameter*`, `InvalidParameterValue*` on create calls | User | the Service's extensiveParameters / listenerParameters |
//! | anything else | Unknown | reported verbatim, retried with backoff |

use kube_lb_provider_core::error::Classification;
use kube_lb_provider_core::{EnvironmentCause, ProviderError};

/// A failed CLB call.
#[derive(Debug, thiserror::Error)]
pub enum TencentError {
    /// The API answered `Response.Error`.
    #[error("{action}: {code}: {message} (RequestId {request_id})")]
    Api {
        /// The action (`CreateLoadBalancer`).
        action: &'static str,
        /// Tencent's error code.
        code: String,
        /// Its message.
        message: String,
        /// The request id, for Tencent support.
        request_id: String,
    },
    /// No answer (connection refused, timeout, TLS).
    #[error("{action}: {source}")]
    Transport {
        /// The action.
        action: &'static str,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// An answer kube-lb cannot use.
    #[error("{action}: {message}")]
    Unexpected {
        /// The action.
        action: &'static str,
        /// What was wrong.
        message: String,
    },
}

impl TencentError {
    /// The error code, for API errors.
    pub fn code(&self) -> Option<&str> {
        match self {
            TencentError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when the CLB (or listener) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code(),
            Some("InvalidParameter.LBIdNotFound" | "InvalidParameter.ListenerIdNotFound")
        )
    }

    /// True when another task runs on the CLB.
    pub fn is_busy(&self) -> bool {
        self.code() == Some("FailedOperation.ResourceInOperating")
    }

    /// True when the cloud refused the request rate.
    pub fn is_throttled(&self) -> bool {
        self.code().is_some_and(is_throttle_code)
    }

    /// Where this error falls in the shared taxonomy.
    pub fn classification(&self) -> Classification {
        match self {
            TencentError::Api { action, code, .. } => classify(action, code),
            TencentError::Transport { .. } => Classification::Transient,
            TencentError::Unexpected { .. } => Classification::Unknown,
        }
    }
}

fn is_throttle_code(code: &str) -> bool {
    code.starts_with("RequestLimitExceeded") || code == "FailedOperation.RateLimitExceeded"
}

/// Classifies an error code answered to `action` (pure; see the module table).
pub fn classify(action: &str, code: &str) -> Classification {
    let family = code.split('.').next().unwrap_or(code);
    match code {
        _ if is_throttle_code(code) => Classification::Transient,
        "FailedOperation.ResourceInOperating" => Classification::Pending,
        "InvalidParameter.SubnetIdNotFound" | "InvalidParameter.VpcIdNotFound" => {
            Classification::Environment(EnvironmentCause::MissingDependency)
        }
        "InvalidParameter.PortCheckFailed" => {
            Classification::Environment(EnvironmentCause::AddressInUse)
        }
        "InvalidParameter.LBIdNotFound" | "InvalidParameter.ListenerIdNotFound" => {
            Classification::Stale
        }
        _ => match family {
            "InternalError" | "ResourceUnavailable" => Classification::Transient,
            "AuthFailure" | "UnauthorizedOperation" => {
                Classification::Environment(EnvironmentCause::PermissionDenied)
            }
            "LimitExceeded" | "ResourceInsufficient" => {
                Classification::Environment(EnvironmentCause::Quota)
            }
            "UnknownParameter" | "InvalidParameterValue"
                if matches!(action, "CreateLoadBalancer" | "CreateListener") =>
            {
                Classification::User
            }
            _ => Classification::Unknown,
        },
    }
}

impl From<TencentError> for ProviderError {
    fn from(error: TencentError) -> Self {
        let operation = match &error {
            TencentError::Api { action, .. }
            | TencentError::Transport { action, .. }
            | TencentError::Unexpected { action, .. } => *action,
        };
        let message = match &error {
            TencentError::Api { code, message, .. } => format!("{code}: {message}"),
            other => other.to_string(),
        };
        match error.classification() {
            Classification::Transient if error.is_throttled() => ProviderError::Throttled {
                operation,
                message,
                source: Some(Box::new(error)),
            },
            Classification::Transient => ProviderError::Retryable {
                operation,
                message,
                source: Some(Box::new(error)),
            },
            Classification::Pending => ProviderError::Pending {
                operation,
                message,
                source: Some(Box::new(error)),
            },
            Classification::Environment(cause) => {
                ProviderError::environment(operation, cause, message)
            }
            Classification::User => {
                ProviderError::user(format!("{operation} refused by Tencent Cloud: {message}"))
            }
            Classification::Stale | Classification::Unknown => ProviderError::Internal {
                message: format!("{operation}: {message}"),
                source: Some(Box::new(error)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_the_shared_taxonomy() {
        use EnvironmentCause::*;
        let cases = [
            (
                "DescribeLoadBalancers",
                "RequestLimitExceeded",
                Classification::Transient,
            ),
            (
                "CreateListener",
                "RequestLimitExceeded.UinLimitExceeded",
                Classification::Transient,
            ),
            (
                "RegisterTargets",
                "FailedOperation.RateLimitExceeded",
                Classification::Transient,
            ),
            ("CreateListener", "InternalError", Classification::Transient),
            (
                "CreateListener",
                "FailedOperation.ResourceInOperating",
                Classification::Pending,
            ),
            (
                "DescribeLoadBalancers",
                "AuthFailure.SignatureFailure",
                Classification::Environment(PermissionDenied),
            ),
            (
                "CreateLoadBalancer",
                "UnauthorizedOperation",
                Classification::Environment(PermissionDenied),
            ),
            (
                "CreateLoadBalancer",
                "LimitExceeded",
                Classification::Environment(Quota),
            ),
            (
                "CreateLoadBalancer",
                "InvalidParameter.SubnetIdNotFound",
                Classification::Environment(MissingDependency),
            ),
            (
                "CreateListener",
                "InvalidParameter.PortCheckFailed",
                Classification::Environment(AddressInUse),
            ),
            (
                "DeleteListener",
                "InvalidParameter.ListenerIdNotFound",
                Classification::Stale,
            ),
            (
                "CreateLoadBalancer",
                "UnknownParameter",
                Classification::User,
            ),
            (
                "CreateListener",
                "InvalidParameterValue",
                Classification::User,
            ),
            (
                "ModifyListener",
                "InvalidParameterValue",
                Classification::Unknown,
            ),
            (
                "DescribeTargets",
                "FailedOperation",
                Classification::Unknown,
            ),
        ];
        for (action, code, want) in cases {
            assert_eq!(classify(action, code), want, "{action} {code}");
        }
    }

    #[test]
    fn user_errors_carry_the_cloud_code_and_message() {
        let error = ProviderError::from(TencentError::Api {
            action: "CreateLoadBalancer",
            code: "UnknownParameter".into(),
            message: "The parameter `Colour` is not recognized.".into(),
            request_id: "r".into(),
        });
        let text = error.to_string();
        assert!(
            text.contains("UnknownParameter") && text.contains("Colour"),
            "{text}"
        );
    }
}

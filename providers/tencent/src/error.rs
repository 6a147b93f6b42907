//! What a CLB API answer means in kube-lb's error taxonomy.
//!
//! | answer | class | why |
//! |---|---|---|
//! | `RequestLimitExceeded*`, `FailedOperation.RateLimitExceeded` | Transient (counted as throttled) | the account's request rate; retried in place after the shared limiter |
//! | `InternalError*`, `ResourceUnavailable*`, transport failures | Transient | the cloud's side, retried in place |
//! | HTTP 5xx/429 without a `Response` envelope | Transient (429: counted as throttled) | a gateway in front of the API answered, not the API (the SDK calls it `ServerNetworkError` and retries it) |
//! | `FailedOperation.ResourceInOperating`, `FailedOperation.ResourceInCloning`, `FailedOperation.InvalidLBStatus` | Pending | another task runs on the CLB, or it is not yet in a state that takes the change; the provider waits and retries |
//! | `AuthFailure*`, `UnauthorizedOperation*` | Environment / PermissionDenied | the credentials or the CAM policy |
//! | `LimitExceeded*`, `ResourceInsufficient*`, `ResourcesSoldOut*` | Environment / Quota | a region or CLB quota, or no capacity left in the zone |
//! | `InvalidParameter.SubnetIdNotFound`, `InvalidParameter.VpcIdNotFound` | Environment / MissingDependency | the configuration names what does not exist |
//! | `InvalidParameter.PortCheckFailed` | Environment / AddressInUse | a listener of someone else holds the port |
//! | `ResourceInUse` on `DeleteSecurityGroup` | Pending | the group is still bound to a CLB being deleted |
//! | `InvalidParameter.LBIdNotFound`, `InvalidParameter.ListenerIdNotFound`, `InvalidSecurityGroupID.NotFound`, `ResourceNotFound` | Stale | the object vanished under us |
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
    /// An HTTP error status without the API's `Response` envelope: a gateway or load
    /// balancer in front of the API answered (the API itself answers errors with HTTP 200).
    #[error("{action}: HTTP {status}: {message}")]
    Gateway {
        /// The action.
        action: &'static str,
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        message: String,
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
        self.code().is_some_and(is_not_found_code)
    }

    /// True when another task runs on the CLB, or it is not yet in a state that takes the
    /// change.
    pub fn is_busy(&self) -> bool {
        self.code().is_some_and(is_busy_code)
    }

    /// True when the cloud (or the gateway in front of it) refused the request rate.
    pub fn is_throttled(&self) -> bool {
        match self {
            TencentError::Gateway { status, .. } => *status == 429,
            _ => self.code().is_some_and(is_throttle_code),
        }
    }

    /// Where this error falls in the shared taxonomy.
    pub fn classification(&self) -> Classification {
        match self {
            TencentError::Api { action, code, .. } => classify(action, code),
            TencentError::Gateway { status, .. } => match status {
                429 | 500..=599 => Classification::Transient,
                _ => Classification::Unknown,
            },
            TencentError::Transport { .. } => Classification::Transient,
            TencentError::Unexpected { .. } => Classification::Unknown,
        }
    }
}

fn is_throttle_code(code: &str) -> bool {
    code.starts_with("RequestLimitExceeded") || code == "FailedOperation.RateLimitExceeded"
}

fn is_busy_code(code: &str) -> bool {
    matches!(
        code,
        "FailedOperation.ResourceInOperating"
            | "FailedOperation.ResourceInCloning"
            | "FailedOperation.InvalidLBStatus"
    )
}

fn is_not_found_code(code: &str) -> bool {
    matches!(
        code,
        "InvalidParameter.LBIdNotFound"
            | "InvalidParameter.ListenerIdNotFound"
            | "InvalidSecurityGroupID.NotFound"
    ) || code == "ResourceNotFound"
}

/// Classifies an error code answered to `action` (pure; see the module table).
pub fn classify(action: &str, code: &str) -> Classification {
    let family = code.split('.').next().unwrap_or(code);
    match code {
        _ if is_throttle_code(code) => Classification::Transient,
        _ if is_busy_code(code) => Classification::Pending,
        "InvalidParameter.SubnetIdNotFound" | "InvalidParameter.VpcIdNotFound" => {
            Classification::Environment(EnvironmentCause::MissingDependency)
        }
        "InvalidParameter.PortCheckFailed" => {
            Classification::Environment(EnvironmentCause::AddressInUse)
        }
        // A security group still bound (its CLB's delete has not finished): passes.
        "ResourceInUse" if action == "DeleteSecurityGroup" => Classification::Pending,
        _ if is_not_found_code(code) => Classification::Stale,
        _ => match family {
            "InternalError" | "ResourceUnavailable" => Classification::Transient,
            "AuthFailure" | "UnauthorizedOperation" => {
                Classification::Environment(EnvironmentCause::PermissionDenied)
            }
            "LimitExceeded" | "ResourceInsufficient" | "ResourcesSoldOut" => {
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
            | TencentError::Gateway { action, .. }
            | TencentError::Transport { action, .. }
            | TencentError::Unexpected { action, .. } => *action,
        };
        let message = match &error {
            TencentError::Api { code, message, .. } => format!("{code}: {message}"),
            other => other.to_string(),
        };
        let (class, throttled) = (error.classification(), error.is_throttled());
        // The user and internal variants carry no operation of their own: it goes into
        // their words.
        let message = match class {
            Classification::User => format!("{operation} refused by Tencent Cloud: {message}"),
            Classification::Stale | Classification::Unknown => format!("{operation}: {message}"),
            _ => message,
        };
        class.into_error(operation, message, throttled, Box::new(error))
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
            (
                "ModifyListener",
                "FailedOperation.InvalidLBStatus",
                Classification::Pending,
            ),
            (
                "DeleteLoadBalancer",
                "ResourceNotFound",
                Classification::Stale,
            ),
            (
                "CreateLoadBalancer",
                "ResourcesSoldOut",
                Classification::Environment(Quota),
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

    #[test]
    fn gateway_answers_without_an_envelope_are_retried_and_429_is_a_throttle() {
        let gateway = |status| TencentError::Gateway {
            action: "DescribeLoadBalancers",
            status,
            message: "<html>bad gateway</html>".into(),
        };
        let cases = [
            (502, Classification::Transient, false),
            (503, Classification::Transient, false),
            (429, Classification::Transient, true),
            (404, Classification::Unknown, false),
        ];
        for (status, class, throttled) in cases {
            let error = gateway(status);
            assert_eq!(error.classification(), class, "{status}");
            assert_eq!(error.is_throttled(), throttled, "{status}");
            assert_eq!(
                matches!(ProviderError::from(error), ProviderError::Throttled { .. }),
                throttled,
                "{status}"
            );
        }
    }
}

//! What an OpenStack API answer means in kube-lb's error taxonomy.
//!
//! | answer | class | why |
//! |---|---|---|
//! | 401 (after one re-authentication) | Environment / PermissionDenied | the credentials are refused |
//! | 403, 409 or 413 mentioning a quota | Environment / Quota | Octavia says "Quota has been met" (403), Neutron `OverQuota` (409) |
//! | 429, or 413 not about a quota | Transient (counted as throttled) | a rate limiter in front of the API (`overLimit`, "Rate limit exceeded") |
//! | 403 | Environment / PermissionDenied | a policy forbids the call |
//! | 409 "immutable" / `PENDING_*` / "Invalid state" | Pending | the load balancer is busy; waited on, then retried |
//! | 409 `FloatingIPPortAlreadyAssociated`, `IpAddressAlreadyAllocated`, `IpAddressInUse` | Environment / AddressInUse | someone else holds the address |
//! | other 409 | Stale | our picture is out of date; the next pass reads afresh |
//! | 400/404 naming a subnet, network or port "not found" | Environment / MissingDependency | the configuration names something that does not exist |
//! | 404 | Stale | the object vanished under us |
//! | 5xx, transport failures | Transient | retried in place |
//! | anything else | Unknown | reported verbatim, retried with backoff |

use kube_lb_provider_core::EnvironmentCause;
use kube_lb_provider_core::ProviderError;
use kube_lb_provider_core::error::Classification;

/// A failed OpenStack call.
#[derive(Debug, thiserror::Error)]
pub enum OpenStackError {
    /// The service answered with an error status.
    #[error("{operation}: HTTP {status}: {message}")]
    Api {
        /// The operation (`octavia:CreateLoadBalancer`).
        operation: &'static str,
        /// The HTTP status.
        status: u16,
        /// The service's own words (`faultstring`, `NeutronError.message`, `error.message`).
        message: String,
        /// The wait the answer asked for (`Retry-After` in seconds), with a rate refusal.
        retry_after: Option<std::time::Duration>,
    },
    /// The request did not get an answer (connection refused, timeout, TLS).
    #[error("{operation}: {source}")]
    Transport {
        /// The operation.
        operation: &'static str,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// An answer kube-lb cannot use (bad JSON, a missing catalog entry, a missing header).
    #[error("{operation}: {message}")]
    Unexpected {
        /// The operation.
        operation: &'static str,
        /// What was wrong.
        message: String,
    },
}

impl OpenStackError {
    /// The HTTP status, for API errors.
    pub fn status(&self) -> Option<u16> {
        match self {
            OpenStackError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// How to repeat this failure in place: not at all, after the backoff step, or after the
    /// wait a rate refusal asked for (`Retry-After`).
    pub fn again(&self) -> kube_lb_provider_core::Again {
        use kube_lb_provider_core::Again;
        if !self.classification().retries_in_place() {
            return Again::No;
        }
        match self {
            OpenStackError::Api {
                retry_after: Some(wait),
                ..
            } if self.is_throttled() => Again::After(*wait),
            _ => Again::Backoff,
        }
    }

    /// True when a mutating call that failed this way may still have taken effect: no
    /// answer arrived (a timeout after the request went out), or a 5xx, which a gateway also
    /// sends when the service acted and its answer was lost. A 4xx, a rate refusal included,
    /// says the request was refused.
    pub fn may_have_taken_effect(&self) -> bool {
        match self {
            OpenStackError::Api { status, .. } => *status >= 500,
            OpenStackError::Transport { .. } => true,
            OpenStackError::Unexpected { .. } => false,
        }
    }

    /// True when Neutron named the error `kind` (`SecurityGroupRuleExists`, ...): the client
    /// renders Neutron's type after its message, in parentheses.
    pub fn is_neutron(&self, kind: &str) -> bool {
        match self {
            OpenStackError::Api { message, .. } => message.ends_with(&format!("({kind})")),
            _ => false,
        }
    }

    /// True for a 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }

    /// True when the API (or the rate limiter in front of it) refused the request rate.
    pub fn is_throttled(&self) -> bool {
        match self {
            OpenStackError::Api {
                status, message, ..
            } => is_rate_limited(*status, message),
            _ => false,
        }
    }

    /// True for Octavia's "busy" answer: a change under a load balancer in `PENDING_*`.
    pub fn is_immutable(&self) -> bool {
        matches!(classify_error(self), Classification::Pending)
    }

    /// Where this error falls in the shared taxonomy.
    pub fn classification(&self) -> Classification {
        classify_error(self)
    }
}

fn classify_error(error: &OpenStackError) -> Classification {
    match error {
        OpenStackError::Api {
            status, message, ..
        } => classify(*status, message),
        OpenStackError::Transport { .. } => Classification::Transient,
        OpenStackError::Unexpected { .. } => Classification::Unknown,
    }
}

fn mentions_quota(message: &str) -> bool {
    let text = message.to_ascii_lowercase();
    text.contains("quota")
}

/// True for an answer that refuses the request rate: 429, or 413 that is not about a quota
/// (Nova-style `overLimit` from a rate limiter; a 413 quota answer is an account limit).
pub fn is_rate_limited(status: u16, message: &str) -> bool {
    status == 429 || (status == 413 && !mentions_quota(message))
}

/// Classifies an HTTP error status and the service's message (pure; see the module table).
pub fn classify(status: u16, message: &str) -> Classification {
    let text = message.to_ascii_lowercase();
    let mentions = |words: &[&str]| words.iter().any(|w| text.contains(w));
    match status {
        401 => Classification::Environment(EnvironmentCause::PermissionDenied),
        403 | 409 | 413 if mentions_quota(message) => {
            Classification::Environment(EnvironmentCause::Quota)
        }
        _ if is_rate_limited(status, message) => Classification::Transient,
        403 => Classification::Environment(EnvironmentCause::PermissionDenied),
        409 if mentions(&["immutable", "pending_", "invalid state"]) => Classification::Pending,
        409 if mentions(&[
            "already associated",
            "alreadyassociated",
            "already allocated",
            "alreadyallocated",
            "ipaddressinuse",
        ]) =>
        {
            Classification::Environment(EnvironmentCause::AddressInUse)
        }
        409 => Classification::Stale,
        400 | 404
            if mentions(&["subnet", "network", "port"])
                && mentions(&["not found", "could not be found"]) =>
        {
            Classification::Environment(EnvironmentCause::MissingDependency)
        }
        404 => Classification::Stale,
        500..=599 => Classification::Transient,
        _ => Classification::Unknown,
    }
}

impl From<OpenStackError> for ProviderError {
    fn from(error: OpenStackError) -> Self {
        let operation = match &error {
            OpenStackError::Api { operation, .. }
            | OpenStackError::Transport { operation, .. }
            | OpenStackError::Unexpected { operation, .. } => *operation,
        };
        let message = match &error {
            OpenStackError::Api {
                message, status, ..
            } => format!("HTTP {status}: {message}"),
            other => other.to_string(),
        };
        match error.classification() {
            // The request rate was refused (the client counts it apart too).
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
            Classification::User => ProviderError::user(message),
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
    fn answers_map_to_the_shared_taxonomy() {
        use EnvironmentCause::*;
        let cases = [
            (
                401,
                "The request you have made requires authentication.",
                Classification::Environment(PermissionDenied),
            ),
            (
                403,
                "Quota has been met for resources: Load Balancer",
                Classification::Environment(Quota),
            ),
            (413, "Quota exceeded", Classification::Environment(Quota)),
            (
                409,
                "Quota exceeded for resources: ['floatingip'].",
                Classification::Environment(Quota),
            ),
            (
                403,
                "Policy does not allow this request to be performed.",
                Classification::Environment(PermissionDenied),
            ),
            (
                409,
                "Load Balancer 1b is immutable and cannot be updated.",
                Classification::Pending,
            ),
            (
                409,
                "Invalid state PENDING_UPDATE of loadbalancer resource 1b",
                Classification::Pending,
            ),
            (
                409,
                "Cannot associate floating IP with port p: the port already has a floating IP. FloatingIPPortAlreadyAssociated",
                Classification::Environment(AddressInUse),
            ),
            (
                409,
                "Another Listener on this Load Balancer is already using protocol_port 80",
                Classification::Stale,
            ),
            (
                400,
                "Validation failure: Subnet 42 not found.",
                Classification::Environment(MissingDependency),
            ),
            (
                404,
                "Network 42 could not be found.",
                Classification::Environment(MissingDependency),
            ),
            (
                404,
                "Load Balancer 1b could not be found.",
                Classification::Stale,
            ),
            (429, "Too Many Requests", Classification::Transient),
            (
                413,
                "This request was rate-limited.",
                Classification::Transient,
            ),
            (
                409,
                "Unable to complete operation for network n. The IP address 10.0.0.5 is in use. (IpAddressInUse)",
                Classification::Environment(AddressInUse),
            ),
            (500, "Internal Server Error", Classification::Transient),
            (503, "Service Unavailable", Classification::Transient),
            (
                400,
                "Invalid input for field/attribute protocol_port.",
                Classification::Unknown,
            ),
        ];
        for (status, message, want) in cases {
            assert_eq!(classify(status, message), want, "{status} {message}");
            let error = ProviderError::from(OpenStackError::Api {
                operation: "op",
                status,
                message: message.into(),
                retry_after: None,
            });
            assert_eq!(error.retry(), want.retry(), "{status} {message}: {error}");
        }
    }

    #[test]
    fn only_rate_refusals_are_throttles() {
        let cases = [
            (429, "Too Many Requests", true),
            (413, "This request was rate-limited.", true),
            (413, "Quota exceeded for resources: ['floatingip'].", false),
            (503, "Service Unavailable", false),
            (
                403,
                "Policy does not allow this request to be performed.",
                false,
            ),
        ];
        for (status, message, throttled) in cases {
            let error = OpenStackError::Api {
                operation: "op",
                status,
                message: message.into(),
                retry_after: None,
            };
            assert_eq!(error.is_throttled(), throttled, "{status} {message}");
            assert_eq!(
                matches!(ProviderError::from(error), ProviderError::Throttled { .. }),
                throttled,
                "{status} {message}"
            );
        }
    }

    #[test]
    fn only_answers_that_prove_a_refusal_rule_out_a_lost_response() {
        let api = |status: u16, message: &str| OpenStackError::Api {
            operation: "op",
            status,
            message: message.into(),
            retry_after: None,
        };
        let cases = [
            (api(503, "Service Unavailable"), true),
            (api(502, "Bad Gateway"), true),
            (api(500, "Internal Server Error"), true),
            (api(429, "Too Many Requests"), false),
            (api(413, "This request was rate-limited."), false),
            (
                api(409, "Load Balancer x is immutable and cannot be updated."),
                false,
            ),
            (api(400, "Invalid input"), false),
            (
                OpenStackError::Unexpected {
                    operation: "op",
                    message: "answer is not JSON".into(),
                },
                false,
            ),
        ];
        for (error, maybe) in cases {
            assert_eq!(error.may_have_taken_effect(), maybe, "{error}");
        }
    }
}

//! Provider errors, classed so the controller can choose between retrying in place, backing
//! off, and waiting for the user to change the Service.
//!
//! The taxonomy, shared by every provider:
//!
//! | variant | who can fix it | what happens |
//! |---|---|---|
//! | [`ProviderError::Retryable`] | nobody: it passes (throttling, 5xx, a timeout, a conflict) | retried in place by `CloudApi`, then by the controller with backoff |
//! | [`ProviderError::Environment`] | the cluster's operator or time (quota, permission, a missing network, an exhausted pool) | not retried in place; the controller retries with capped backoff and a Warning naming the cause |
//! | [`ProviderError::User`] | only the Service's author | Warning event, then wait for the Service to change |
//! | [`ProviderError::ImplementedElsewhere`] | nobody: another controller owns it | left alone quietly |
//! | [`ProviderError::Internal`] | us (an unexpected answer) | retried by the controller with backoff |

use std::fmt;

/// A boxed underlying error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why something outside the Service blocks its load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EnvironmentCause {
    /// An account or project quota is used up (`TooManyLoadBalancers`, GCP `QUOTA_EXCEEDED`).
    Quota,
    /// The controller's cloud identity may not make the call (403, `UnauthorizedOperation`).
    PermissionDenied,
    /// Something the load balancer needs does not exist (yet): a subnet, a security group, a
    /// network, a certificate the cluster configuration names.
    MissingDependency,
    /// No address is left in the pool.
    PoolExhausted,
    /// The requested address is held by someone else.
    AddressInUse,
    /// A resource with the load balancer's name exists and belongs to someone else.
    NameTaken,
}

impl EnvironmentCause {
    /// A fixed label for metrics and event text.
    pub fn as_str(self) -> &'static str {
        match self {
            EnvironmentCause::Quota => "quota",
            EnvironmentCause::PermissionDenied => "permission_denied",
            EnvironmentCause::MissingDependency => "missing_dependency",
            EnvironmentCause::PoolExhausted => "pool_exhausted",
            EnvironmentCause::AddressInUse => "address_in_use",
            EnvironmentCause::NameTaken => "name_taken",
        }
    }
}

impl fmt::Display for EnvironmentCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvironmentCause::Quota => "quota exceeded",
            EnvironmentCause::PermissionDenied => "permission denied",
            EnvironmentCause::MissingDependency => "missing dependency",
            EnvironmentCause::PoolExhausted => "address pool exhausted",
            EnvironmentCause::AddressInUse => "address in use",
            EnvironmentCause::NameTaken => "name taken by another owner",
        })
    }
}

/// Why a provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A transient failure (throttling, 5xx, a conflict, a timeout): retried in place with
    /// backoff, then by the controller.
    #[error("{operation}: {message}")]
    Retryable {
        /// The cloud operation that failed (e.g. `CreateLoadBalancer`).
        operation: &'static str,
        /// What went wrong.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// Something outside the Service blocks it (quota, permission, a missing dependency, an
    /// exhausted pool): not retried in place, retried by the controller with capped backoff
    /// and reported as a Warning, because the cause may go away without the Service changing.
    #[error("{operation}: {cause}: {message}")]
    Environment {
        /// The cloud operation that failed.
        operation: &'static str,
        /// What kind of obstacle it is.
        cause: EnvironmentCause,
        /// The cloud's words.
        message: String,
    },
    /// The Service asks for something that cannot be built (a bad value, an invalid
    /// certificate, an address outside every pool): only its author can fix it, so report it
    /// and wait until the Service changes.
    #[error("{message}")]
    User {
        /// What the user must change, in words they can act on.
        message: String,
    },
    /// Another controller owns this Service's load balancer (e.g. AWS `type: nlb-ip`).
    #[error("load balancer is implemented by another controller")]
    ImplementedElsewhere,
    /// Anything else: misconfiguration of the provider itself, an unexpected response.
    #[error("{message}")]
    Internal {
        /// What went wrong.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
}

impl ProviderError {
    /// True when the same call may succeed later without any change to the Service: the
    /// controller retries it with backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::Retryable { .. }
                | ProviderError::Environment { .. }
                | ProviderError::Internal { .. }
        )
    }

    /// True when repeating the very same call soon is likely to succeed (throttling, 5xx,
    /// timeouts): `CloudApi` retries only these in place.
    pub fn is_transient(&self) -> bool {
        matches!(self, ProviderError::Retryable { .. })
    }

    /// A fixed label for metrics (`retryable`, `environment`, `user`,
    /// `implemented_elsewhere`, `internal`).
    pub fn class(&self) -> &'static str {
        match self {
            ProviderError::Retryable { .. } => "retryable",
            ProviderError::Environment { .. } => "environment",
            ProviderError::User { .. } => "user",
            ProviderError::ImplementedElsewhere => "implemented_elsewhere",
            ProviderError::Internal { .. } => "internal",
        }
    }

    /// A user error with the given message.
    pub fn user(message: impl Into<String>) -> Self {
        ProviderError::User {
            message: message.into(),
        }
    }

    /// An environment error.
    pub fn environment(
        operation: &'static str,
        cause: EnvironmentCause,
        message: impl Into<String>,
    ) -> Self {
        ProviderError::Environment {
            operation,
            cause,
            message: message.into(),
        }
    }

    /// A transient error.
    pub fn retryable(operation: &'static str, message: impl Into<String>) -> Self {
        ProviderError::Retryable {
            operation,
            message: message.into(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_decide_retries() {
        let cases = [
            (
                ProviderError::retryable("Create", "503"),
                true,
                true,
                "retryable",
            ),
            (
                ProviderError::environment(
                    "Create",
                    EnvironmentCause::Quota,
                    "TooManyLoadBalancers",
                ),
                true,
                false,
                "environment",
            ),
            (ProviderError::user("bad port"), false, false, "user"),
            (
                ProviderError::ImplementedElsewhere,
                false,
                false,
                "implemented_elsewhere",
            ),
            (
                ProviderError::Internal {
                    message: "odd".into(),
                    source: None,
                },
                true,
                false,
                "internal",
            ),
        ];
        for (error, retryable, transient, class) in cases {
            assert_eq!(error.is_retryable(), retryable, "{error}");
            assert_eq!(error.is_transient(), transient, "{error}");
            assert_eq!(error.class(), class, "{error}");
        }
    }
}

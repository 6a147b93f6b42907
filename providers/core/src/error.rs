//! Provider errors, classed so the controller can choose between backing off and waiting for
//! the user to change the Service.

/// A boxed underlying error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A transient failure (throttling, 5xx, a conflict, a timeout): retry with backoff.
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
    /// The Service asks for something that cannot be built (bad value, quota, address not
    /// available, invalid certificate): report it and wait until the Service changes.
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
    /// True when the same call may succeed later without any change to the Service.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProviderError::Retryable { .. } | ProviderError::Internal { .. }
        )
    }

    /// A fixed label for metrics (`retryable`, `user`, `implemented_elsewhere`, `internal`).
    pub fn class(&self) -> &'static str {
        match self {
            ProviderError::Retryable { .. } => "retryable",
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
}

//! Reconcile errors, classed like provider errors so the error policy can choose between
//! backing off and waiting for the Service to change.

use kube_lb_annotations::ParseErrors;
use kube_lb_provider_core::ProviderError;

/// Why reconciling one Service failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Service's annotations or fields cannot be turned into a load balancer.
    #[error("{0}")]
    InvalidService(#[source] ParseErrors),
    /// The provider failed.
    #[error("{0}")]
    Provider(#[source] ProviderError),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The Service lacks a field the API server always sets (name, namespace, uid).
    #[error("Service has no {0}")]
    MissingField(&'static str),
}

/// The error classes used for metrics and the error policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// Try again later with backoff.
    Retryable,
    /// Report and wait until the Service changes.
    User,
}

impl ErrorClass {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Retryable => "retryable",
            ErrorClass::User => "user",
        }
    }
}

impl Error {
    /// The class deciding the error policy.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidService(_) => ErrorClass::User,
            Error::Provider(e) if !e.is_retryable() => ErrorClass::User,
            _ => ErrorClass::Retryable,
        }
    }

    /// True for a 409 Conflict from the API server (an optimistic-concurrency loss).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube(kube::Error::Api(status)) if status.code == 409)
    }

    /// A short label for metrics, never built from `Debug`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidService(_) => "invalid_service",
            Error::Provider(e) => e.class(),
            Error::Kube(_) => "kube",
            Error::MissingField(_) => "missing_field",
        }
    }
}

impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Self {
        Error::Kube(error)
    }
}

impl From<ProviderError> for Error {
    fn from(error: ProviderError) -> Self {
        Error::Provider(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let cases = [
            (
                Error::Provider(ProviderError::user("quota")),
                ErrorClass::User,
            ),
            (
                Error::Provider(ProviderError::Retryable {
                    operation: "x",
                    message: "503".into(),
                    source: None,
                }),
                ErrorClass::Retryable,
            ),
            (Error::MissingField("uid"), ErrorClass::Retryable),
            (
                Error::InvalidService(
                    kube_lb_annotations::ParseErrors::from_vec(vec![
                        kube_lb_annotations::ParseError {
                            location: kube_lb_annotations::Location::field("spec.ports"),
                            value: None,
                            kind: kube_lb_annotations::ErrorKind::Missing,
                            detail: "at least one port".into(),
                        },
                    ])
                    .unwrap(),
                ),
                ErrorClass::User,
            ),
        ];
        for (error, want) in cases {
            assert_eq!(error.class(), want, "{error}");
        }
    }
}

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
    /// The provider failed to delete a load balancer. Always retried: the Service is going
    /// away (or stopped being ours), so there is nothing its author could edit, and the
    /// finalizer must not stay forever.
    #[error("{0}")]
    Delete(#[source] ProviderError),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[source] kube::Error),
    /// The Service lacks a field the API server always sets (name, namespace, uid).
    #[error("Service has no {0}")]
    MissingField(&'static str),
    /// A write the API server refused because the Service changed after this reconcile read
    /// it (retyped away from `LoadBalancer`, say, which forbids a load-balancer status). The
    /// newer version is on its way through the watch; nothing failed.
    #[error("the Service changed while it was reconciled: {0}")]
    Superseded(String),
}

/// The error classes used for metrics and the error policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ErrorClass {
    /// Try again later with backoff (throttling, 5xx, an unexpected answer, the API server).
    Retryable,
    /// Something outside the Service blocks it (quota, permission, a missing dependency, an
    /// exhausted pool): try again later with backoff, with a Warning naming the cause.
    Environment,
    /// Report and wait until the Service changes.
    User,
}

impl ErrorClass {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Retryable => "retryable",
            ErrorClass::Environment => "environment",
            ErrorClass::User => "user",
        }
    }
}

impl Error {
    /// The class deciding the error policy.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidService(_) => ErrorClass::User,
            Error::Provider(ProviderError::Environment { .. })
            | Error::Delete(ProviderError::Environment { .. }) => ErrorClass::Environment,
            Error::Provider(e) if !e.is_retryable() => ErrorClass::User,
            _ => ErrorClass::Retryable,
        }
    }

    /// True when the reconcile lost a race with a newer version of the Service: a 409 Conflict
    /// from the API server (an optimistic-concurrency loss), or a write refused because the
    /// Service had changed ([`Error::Superseded`]).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Superseded(_))
            || matches!(self, Error::Kube(kube::Error::Api(status)) if status.code == 409)
    }

    /// True for a user error that can clear without the Service changing: a resource with the
    /// load balancer's name owned by someone else, which a person (or `--audit-delete`) may
    /// remove. The Service is looked at again after the longest backoff, not only on a change.
    pub fn clears_outside_the_service(&self) -> bool {
        matches!(self, Error::Provider(error) if error.may_clear_outside_the_service())
    }

    /// A short label for metrics, never built from `Debug`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidService(_) => "invalid_service",
            Error::Provider(e) | Error::Delete(e) => e.class(),
            Error::Kube(_) => "kube",
            Error::MissingField(_) => "missing_field",
            Error::Superseded(_) => "superseded",
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
    use kube_lb_provider_core::EnvironmentCause;

    use super::*;

    #[test]
    fn classes() {
        let invalid = Error::InvalidService(
            kube_lb_annotations::ParseErrors::from_vec(vec![kube_lb_annotations::ParseError {
                location: kube_lb_annotations::Location::field("spec.ports"),
                value: None,
                kind: kube_lb_annotations::ErrorKind::Missing,
                detail: "at least one port".into(),
            }])
            .unwrap(),
        );
        let quota = || {
            ProviderError::environment(
                "CreateLoadBalancer",
                EnvironmentCause::Quota,
                "TooManyLoadBalancers",
            )
        };
        let cases = [
            (invalid, ErrorClass::User, "invalid_service"),
            (
                Error::Provider(ProviderError::user("bad certificate")),
                ErrorClass::User,
                "user",
            ),
            // A refused change waits for the Service to change, counted as a user error.
            (
                Error::Provider(ProviderError::refused(
                    "network type is fixed",
                    kube_lb_provider_core::LoadBalancerStatus::default(),
                )),
                ErrorClass::User,
                "user",
            ),
            (
                Error::Provider(ProviderError::retryable("x", "503")),
                ErrorClass::Retryable,
                "retryable",
            ),
            (
                Error::Provider(quota()),
                ErrorClass::Environment,
                "environment",
            ),
            (
                Error::Provider(ProviderError::Internal {
                    message: "odd".into(),
                    source: None,
                }),
                ErrorClass::Retryable,
                "internal",
            ),
            (
                Error::Delete(ProviderError::user("cannot")),
                ErrorClass::Retryable,
                "user",
            ),
            (
                Error::Delete(quota()),
                ErrorClass::Environment,
                "environment",
            ),
            (
                Error::MissingField("uid"),
                ErrorClass::Retryable,
                "missing_field",
            ),
        ];
        for (error, class, kind) in cases {
            assert_eq!(error.class(), class, "{error}");
            assert_eq!(error.kind(), kind, "{error}");
        }
    }

    #[test]
    fn lost_races_are_conflicts_and_nothing_else_is() {
        let api = |code: u16| {
            Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            })))
        };
        let cases = [
            (api(409), true),
            (
                Error::Superseded("status.loadBalancer.ingress: Forbidden".into()),
                true,
            ),
            (api(422), false),
            (api(500), false),
            (Error::Provider(ProviderError::retryable("x", "503")), false),
        ];
        for (error, conflict) in cases {
            assert_eq!(error.is_conflict(), conflict, "{error}");
        }
    }
}

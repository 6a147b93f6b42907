//! Provider errors, classed so the controller can choose between retrying in place, backing
//! off, and waiting for the user to change the Service.
//!
//! The taxonomy, shared by every provider:
//!
//! | variant | who can fix it | what happens |
//! |---|---|---|
//! | [`ProviderError::Retryable`] | nobody: it passes in a moment (5xx, a timeout) | retried in place by `CloudApi`, then by the controller with backoff |
//! | [`ProviderError::Throttled`] | nobody: the cloud refused the request rate (throttling, HTTP 429) | as `Retryable` (same retry, same `retryable` metric class); its own variant so the Service's condition says `CloudThrottled` from the type, not from the cloud's words |
//! | [`ProviderError::Pending`] | nobody: it passes, but slowly (a dependency being torn down, a resource in a transitional state) | not retried in place; the controller retries with backoff |
//! | [`ProviderError::Environment`] | the cluster's operator or time (quota, permission, a missing network, an exhausted pool) | not retried in place; the controller retries with capped backoff and a Warning naming the cause |
//! | [`ProviderError::User`] | only the Service's author | Warning event, then wait for the Service to change |
//! | [`ProviderError::Refused`] | only the Service's author: it asks for a change the existing load balancer cannot take in place | as `User`; the load balancer keeps serving as it is and the Service keeps showing its address |
//! | [`ProviderError::OwnedElsewhere`] | a person: a resource with this load balancer's deterministic name belongs to another owner | a user error naming the owner: Warning event, then wait for the Service to change, looked at again after the longest backoff (the name may have been freed); never adopted, never rewritten |
//! | [`ProviderError::ImplementedElsewhere`] | nobody: another controller owns it | left alone quietly |
//! | [`ProviderError::Internal`] | us (an unexpected answer) | retried by the controller with backoff |
//!
//! The last column is [`Retry`], read through [`ProviderError::retry`]: `CloudApi` repeats a
//! call in place only for [`Retry::InPlace`], the controller backs off for
//! [`Retry::InPlace`] and [`Retry::Backoff`]. Providers that classify cloud error codes answer
//! with a [`Classification`], whose [`Classification::retry`] is the same rule, so a
//! provider's in-place decision on its own error type and the class its error converts to
//! cannot disagree.

use std::fmt;

use crate::types::LoadBalancerStatus;

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
    /// The requested address is held by someone else: outside this cluster, or by something
    /// the provider cannot name. When the holder is another Service of this cluster that may
    /// not share it, providers answer [`EnvironmentCause::SharingConflict`] instead.
    AddressInUse,
    /// The requested address is held by another Service of this cluster that may not share it
    /// (no common sharing key, or a port both use). Like [`EnvironmentCause::AddressInUse`] it
    /// clears without this Service changing (the other one goes or moves), so it is retried
    /// with backoff; its own cause so the condition says `SharingConflict` from the type.
    SharingConflict,
    /// The cloud answered that a resource with the load balancer's name already exists,
    /// before its owner was checked (`DuplicateLoadBalancerName`, GCE `alreadyExists`): most
    /// often this Service's own create whose answer was lost, adopted on the next pass. Once
    /// the owner is known to be someone else, providers answer
    /// [`ProviderError::OwnedElsewhere`] instead.
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
            EnvironmentCause::SharingConflict => "sharing_conflict",
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
            EnvironmentCause::SharingConflict => "address in use by another Service",
            EnvironmentCause::NameTaken => "name taken by another owner",
        })
    }
}

/// When a failed call may be made again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Retry {
    /// Now: the same request is likely to succeed in a moment (throttling, 5xx, a timeout, a
    /// dropped connection). `CloudApi` repeats it in place with a short backoff; if that runs
    /// out, the controller retries with its per-Service backoff.
    InPlace,
    /// Later: the cause passes or is fixed outside the Service, but not within an in-place
    /// backoff step (a dependency still being torn down, a read that went stale, a quota, a
    /// permission, an unexpected answer). Only the controller retries, with backoff; repeating
    /// it in place would spend attempts and rate-limit tokens for nothing.
    Backoff,
    /// After the Service changes: only its author can fix it.
    OnChange,
    /// Never: there is nothing for this controller to do.
    Never,
}

impl Retry {
    /// True when the controller retries with backoff ([`Retry::InPlace`] and
    /// [`Retry::Backoff`]).
    pub fn with_backoff(self) -> bool {
        matches!(self, Retry::InPlace | Retry::Backoff)
    }
}

/// What one cloud error code (or transport failure) means, in the shared taxonomy. A
/// provider's code table answers with this; [`Classification::retry`] is its in-place
/// decision and the provider converts it into the [`ProviderError`] variant named on each
/// case, which has the same [`ProviderError::retry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Classification {
    /// Throttling, 5xx, transport failures: [`ProviderError::Retryable`], or
    /// [`ProviderError::Throttled`] when the provider knows the cloud refused the request
    /// rate (both retry in place).
    Transient,
    /// A condition that clears on its own, slowly (a dependency still being torn down, a
    /// resource in a transitional state): [`ProviderError::Pending`].
    Pending,
    /// The provider's picture is out of date (one of its own resources vanished or appeared
    /// under it): the controller's next pass reads afresh. [`ProviderError::Internal`].
    Stale,
    /// Something outside the Service blocks it: [`ProviderError::Environment`].
    Environment(EnvironmentCause),
    /// Only the Service's author can fix it: [`ProviderError::User`].
    User,
    /// A code the table does not know: retried with backoff and reported verbatim.
    /// [`ProviderError::Internal`].
    Unknown,
}

impl Classification {
    /// When the failed call may be made again (the same as the converted error's
    /// [`ProviderError::retry`]).
    pub fn retry(self) -> Retry {
        match self {
            Classification::Transient => Retry::InPlace,
            Classification::Pending
            | Classification::Stale
            | Classification::Environment(_)
            | Classification::Unknown => Retry::Backoff,
            Classification::User => Retry::OnChange,
        }
    }

    /// True when the call is repeated in place now ([`Retry::InPlace`]).
    pub fn retries_in_place(self) -> bool {
        self.retry() == Retry::InPlace
    }
}

/// Why a provider call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// A transient failure (throttling, 5xx, a timeout): retried in place with backoff, then
    /// by the controller.
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
    /// The cloud refused the request rate (AWS `Throttling`, GCE `rateLimitExceeded`, ARM
    /// `TooManyRequests`, HTTP 429). Retried exactly like [`ProviderError::Retryable`] (in place,
    /// then by the controller) and counted as `retryable`; a variant of its own so the
    /// Service's condition reason (`CloudThrottled`) comes from the provider's classification
    /// of the cloud's code, not from its message.
    #[error("{operation}: {message}")]
    Throttled {
        /// The cloud operation that was throttled.
        operation: &'static str,
        /// The cloud's words.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A condition that passes on its own, but not within an in-place backoff step (a
    /// dependency still being torn down, a resource in a transitional state): not retried in
    /// place, retried by the controller with backoff. Counted as `retryable`.
    #[error("{operation}: {message}")]
    Pending {
        /// The cloud operation that failed.
        operation: &'static str,
        /// What is still in progress, in the cloud's words.
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
    /// The Service asks for a change its existing load balancer cannot take in place (TKE
    /// refuses to switch a CLB between public and internal access): a user error exactly like
    /// [`ProviderError::User`] (reported, then nothing is retried until the Service changes),
    /// except that a load balancer exists and keeps serving as it is. `current` is that load
    /// balancer as a successful ensure would have reported it, so the controller still shows
    /// its address: only its `ingress` is written; `annotations` and `stale_annotations` are
    /// not written back on a refusal.
    #[error("{message}")]
    Refused {
        /// What was refused and what the user can do, in words they can act on.
        message: String,
        /// The load balancer that exists and keeps serving (boxed: it is rare, and every
        /// `Result` carrying a `ProviderError` stays small).
        current: Box<LoadBalancerStatus>,
    },
    /// A cloud resource with the deterministic name this Service's load balancer needs
    /// exists, and its ownership marks (tags, description) name another owner: another
    /// cluster, another Service, or nobody we know. It is a user error, not an environment
    /// one: kube-lb never adopts or rewrites it, and retrying at once cannot help, so the
    /// Service waits for a change with a Warning naming the owner; the controller also looks
    /// again after its longest backoff, for when a person (or the audit) deleted the resource.
    /// A *raw* "name already exists" answer, before ownership is checked, is
    /// [`EnvironmentCause::NameTaken`] instead: usually our own lost create, adopted on the
    /// next pass.
    #[error("{operation}: {resource} already exists and belongs to {owner}, not to this Service")]
    OwnedElsewhere {
        /// The cloud operation that found it.
        operation: &'static str,
        /// The resource's kind and name (`Classic ELB a1b2…`).
        resource: String,
        /// Who owns it, in the words of its ownership marks (`cluster other`, `Service ns/x`,
        /// `no kube-lb ownership tags`).
        owner: String,
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
    /// True for an error that waits for the Service to change ([`Retry::OnChange`]) but can
    /// also clear without it: a resource with the load balancer's name owned by someone else
    /// ([`ProviderError::OwnedElsewhere`]), which a person or the audit may delete. The
    /// controller looks at such a Service again after its longest backoff.
    pub fn may_clear_outside_the_service(&self) -> bool {
        matches!(self, ProviderError::OwnedElsewhere { .. })
    }

    /// When the failed call may be made again: the one rule behind `CloudApi`'s in-place
    /// retry and the controller's error policy.
    pub fn retry(&self) -> Retry {
        match self {
            ProviderError::Retryable { .. } | ProviderError::Throttled { .. } => Retry::InPlace,
            ProviderError::Pending { .. }
            | ProviderError::Environment { .. }
            | ProviderError::Internal { .. } => Retry::Backoff,
            ProviderError::User { .. }
            | ProviderError::Refused { .. }
            | ProviderError::OwnedElsewhere { .. } => Retry::OnChange,
            ProviderError::ImplementedElsewhere => Retry::Never,
        }
    }

    /// True when the same call may succeed later without any change to the Service: the
    /// controller retries it with backoff ([`Retry::with_backoff`]).
    pub fn is_retryable(&self) -> bool {
        self.retry().with_backoff()
    }

    /// True when repeating the very same call soon is likely to succeed (throttling, 5xx,
    /// timeouts): `CloudApi` retries only these in place ([`Retry::InPlace`]).
    pub fn is_transient(&self) -> bool {
        self.retry() == Retry::InPlace
    }

    /// A fixed label for metrics (`retryable`, `environment`, `user`,
    /// `implemented_elsewhere`, `internal`). [`ProviderError::Pending`] and
    /// [`ProviderError::Throttled`] are `retryable` too: to the controller and to dashboards
    /// they are the same class (throttles are counted apart by `kube_lb_cloud_throttled_total`).
    pub fn class(&self) -> &'static str {
        match self {
            ProviderError::Retryable { .. }
            | ProviderError::Pending { .. }
            | ProviderError::Throttled { .. } => "retryable",
            ProviderError::Environment { .. } => "environment",
            ProviderError::User { .. }
            | ProviderError::Refused { .. }
            | ProviderError::OwnedElsewhere { .. } => "user",
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

    /// A refused change: `message` says what the Service asks for that its load balancer
    /// cannot take, `current` is that load balancer, which keeps serving as it is.
    pub fn refused(message: impl Into<String>, current: LoadBalancerStatus) -> Self {
        ProviderError::Refused {
            message: message.into(),
            current: Box::new(current),
        }
    }

    /// The load balancer that exists and keeps serving despite the error: `Some` only for
    /// [`ProviderError::Refused`].
    pub fn current_status(&self) -> Option<&LoadBalancerStatus> {
        match self {
            ProviderError::Refused { current, .. } => Some(current),
            _ => None,
        }
    }

    /// A user error: `resource` exists under this load balancer's name but belongs to `owner`.
    pub fn owned_elsewhere(
        operation: &'static str,
        resource: impl Into<String>,
        owner: impl Into<String>,
    ) -> Self {
        ProviderError::OwnedElsewhere {
            operation,
            resource: resource.into(),
            owner: owner.into(),
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

    /// The cloud refused the request rate for `operation` (retried like a transient error).
    pub fn throttled(operation: &'static str, message: impl Into<String>) -> Self {
        ProviderError::Throttled {
            operation,
            message: message.into(),
            source: None,
        }
    }

    /// What the environment lacks, for an [`ProviderError::Environment`] error.
    pub fn environment_cause(&self) -> Option<EnvironmentCause> {
        match self {
            ProviderError::Environment { cause, .. } => Some(*cause),
            _ => None,
        }
    }

    /// True when the cloud refused the request rate ([`ProviderError::Throttled`]).
    pub fn is_throttled(&self) -> bool {
        matches!(self, ProviderError::Throttled { .. })
    }

    /// A pending condition (retried later, not in place).
    pub fn pending(operation: &'static str, message: impl Into<String>) -> Self {
        ProviderError::Pending {
            operation,
            message: message.into(),
            source: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::LoadBalancerIngress;

    /// The load balancer a refused change leaves serving.
    fn refused_status() -> LoadBalancerStatus {
        LoadBalancerStatus::with_ingress(vec![LoadBalancerIngress {
            ip: Some(std::net::IpAddr::from([203, 0, 113, 7])),
            hostname: None,
            ip_mode: None,
        }])
    }

    /// Only a refusal carries the load balancer that keeps serving, and it reads like a user
    /// error: the user's words, nothing added.
    #[test]
    fn only_a_refusal_carries_the_current_load_balancer() {
        let refused = ProviderError::refused("network type is fixed", refused_status());
        assert_eq!(refused.current_status(), Some(&refused_status()));
        assert_eq!(refused.to_string(), "network type is fixed");
        let others = [
            ProviderError::user("network type is fixed"),
            ProviderError::owned_elsewhere("Create", "CLB lb-1", "cluster other"),
            ProviderError::retryable("Create", "503"),
            ProviderError::ImplementedElsewhere,
        ];
        for error in others {
            assert_eq!(error.current_status(), None, "{error}");
        }
    }

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
                ProviderError::throttled("Describe", "Throttling: Rate exceeded"),
                true,
                true,
                "retryable",
            ),
            (
                ProviderError::pending("Delete", "DependencyViolation"),
                true,
                false,
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
                ProviderError::refused("network type is fixed", refused_status()),
                false,
                false,
                "user",
            ),
            (
                ProviderError::owned_elsewhere(
                    "CreateLoadBalancer",
                    "Classic ELB a1b2",
                    "cluster other",
                ),
                false,
                false,
                "user",
            ),
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

    #[test]
    fn each_error_has_one_retry_rule() {
        let cases = [
            (ProviderError::retryable("Create", "503"), Retry::InPlace),
            (ProviderError::throttled("Create", "429"), Retry::InPlace),
            (ProviderError::pending("Delete", "in use"), Retry::Backoff),
            (
                ProviderError::environment("Create", EnvironmentCause::SharingConflict, "held"),
                Retry::Backoff,
            ),
            (
                ProviderError::environment("Create", EnvironmentCause::Quota, "quota"),
                Retry::Backoff,
            ),
            (
                ProviderError::Internal {
                    message: "odd".into(),
                    source: None,
                },
                Retry::Backoff,
            ),
            (ProviderError::user("bad port"), Retry::OnChange),
            (
                ProviderError::refused("network type is fixed", refused_status()),
                Retry::OnChange,
            ),
            (ProviderError::ImplementedElsewhere, Retry::Never),
        ];
        for (error, retry) in cases {
            assert_eq!(error.retry(), retry, "{error}");
            assert_eq!(error.is_transient(), retry == Retry::InPlace, "{error}");
            assert_eq!(error.is_retryable(), retry.with_backoff(), "{error}");
        }
    }

    /// A classification and the error variant it names retry the same way.
    #[test]
    fn classifications_retry_like_the_errors_they_become() {
        let cases = [
            (
                Classification::Transient,
                ProviderError::retryable("op", "m"),
            ),
            (
                Classification::Transient,
                ProviderError::throttled("op", "m"),
            ),
            (Classification::Pending, ProviderError::pending("op", "m")),
            (
                Classification::Stale,
                ProviderError::Internal {
                    message: "m".into(),
                    source: None,
                },
            ),
            (
                Classification::Environment(EnvironmentCause::PermissionDenied),
                ProviderError::environment("op", EnvironmentCause::PermissionDenied, "m"),
            ),
            (Classification::User, ProviderError::user("m")),
            (
                Classification::Unknown,
                ProviderError::Internal {
                    message: "m".into(),
                    source: None,
                },
            ),
        ];
        for (class, error) in cases {
            assert_eq!(class.retry(), error.retry(), "{class:?}");
            assert_eq!(class.retries_in_place(), error.is_transient(), "{class:?}");
        }
    }
}

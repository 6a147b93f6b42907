//! The `kube-lb.io/LoadBalancerReady` condition: why a Service has (or has not) got its load
//! balancer, in `status.conditions`, so `kubectl wait` and dashboards can tell without reading
//! controller logs.
//!
//! Pure: this module turns what a reconcile found (an address, a parse error, a provider
//! error) into the condition the Service should show; [`super::status`] compares it with what
//! the Service shows and builds the one status patch that writes both.

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_lb_annotations::ParseErrors;
use kube_lb_provider_core::{EnvironmentCause, ProviderError};

use super::Error;

/// The condition type kube-lb owns on every Service it manages (domain-qualified, so it never
/// collides with a condition another controller writes).
pub const CONDITION_TYPE: &str = "kube-lb.io/LoadBalancerReady";

/// The API server's limit on a condition message, in bytes (`metav1.Condition` validation).
pub const MESSAGE_LIMIT: usize = 32 * 1024;

/// `status` of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionStatus {
    /// The load balancer exists and the Service shows its address.
    True,
    /// The load balancer is not ready and will not become ready until something changes (the
    /// Service, the cloud account, the cluster's configuration).
    False,
    /// Not known yet: provisioning is under way or a transient cloud failure is being retried.
    Unknown,
}

impl ConditionStatus {
    /// The API spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// Why the `kube-lb.io/LoadBalancerReady` condition has its status: a closed set, so alerts and
/// scripts can match on it. Each reason has one status.
///
/// | reason | status | from | what to do |
/// |---|---|---|---|
/// | `Provisioned` | True | the provider returned an address | nothing |
/// | `Pending` | Unknown | created, no address yet; or the cloud reports a transitional state ([`ProviderError::Pending`]) | wait |
/// | `Deleting` | False | deleting the load balancer failed (the Service is being deleted or stopped being ours) | see the message; retried |
/// | `AnnotationInvalid` | False | an annotation or field cannot be realised ([`Error::InvalidService`]) | fix the annotation the message names |
/// | `CloudRejected` | False | the cloud refused the Service's settings ([`ProviderError::User`]), or a change the existing load balancer cannot take in place ([`ProviderError::Refused`]: it keeps serving, the Service keeps showing its address) | change the Service |
/// | `CloudThrottled` | Unknown | the cloud throttled the controller ([`ProviderError::Throttled`]) | nothing; retried with backoff |
/// | `CloudError` | Unknown | any other transient or unexpected cloud failure ([`ProviderError::Retryable`], [`ProviderError::Internal`]) | nothing unless it persists; retried |
/// | `QuotaExceeded` | False | [`EnvironmentCause::Quota`] | raise the quota or free load balancers |
/// | `PermissionDenied` | False | [`EnvironmentCause::PermissionDenied`] | grant the controller's cloud identity the call named |
/// | `PoolExhausted` | False | [`EnvironmentCause::PoolExhausted`] | add addresses to the pool |
/// | `AddressInUse` | False | [`EnvironmentCause::AddressInUse`]: held outside this cluster | request another address |
/// | `SharingConflict` | False | [`EnvironmentCause::SharingConflict`]: held by another Service that may not share it | give one Service another address |
/// | `NameTaken` | False | [`ProviderError::OwnedElsewhere`] (a user error: waits for a change), or [`EnvironmentCause::NameTaken`] before the owner is known (retried) | delete or re-tag the resource named, or recreate the Service |
/// | `MissingDependency` | False | [`EnvironmentCause::MissingDependency`] | create what is named, or fix the cloud config |
///
/// Environment reasons (quota to missing dependency) are retried with backoff as well: the
/// cause can go away without the Service changing.
///
/// Every reason comes from the error's type (its variant, or its [`EnvironmentCause`]), never
/// from the cloud's words: a provider that recognises a throttle or a clash between two
/// Services says so in the error it builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadyReason {
    /// The load balancer exists and its address is in `status.loadBalancer`.
    Provisioned,
    /// Provisioning is under way.
    Pending,
    /// Deleting the load balancer failed; the finalizer stays until it succeeds.
    Deleting,
    /// An annotation or field of the Service cannot be realised as written.
    AnnotationInvalid,
    /// The cloud refused what the Service asks for.
    CloudRejected,
    /// The cloud throttled the controller's requests.
    CloudThrottled,
    /// A transient or unexpected cloud failure.
    CloudError,
    /// A cloud quota is used up.
    QuotaExceeded,
    /// The controller's cloud identity may not make a call it needs.
    PermissionDenied,
    /// No address is left in the pool.
    PoolExhausted,
    /// The requested address is held outside this cluster.
    AddressInUse,
    /// A cloud resource with the load balancer's name belongs to someone else.
    NameTaken,
    /// Something the load balancer needs does not exist.
    MissingDependency,
    /// The requested address is held by another Service of this cluster.
    SharingConflict,
}

impl ReadyReason {
    /// Every reason, in documentation order.
    pub const ALL: [ReadyReason; 14] = [
        ReadyReason::Provisioned,
        ReadyReason::Pending,
        ReadyReason::Deleting,
        ReadyReason::AnnotationInvalid,
        ReadyReason::CloudRejected,
        ReadyReason::CloudThrottled,
        ReadyReason::CloudError,
        ReadyReason::QuotaExceeded,
        ReadyReason::PermissionDenied,
        ReadyReason::PoolExhausted,
        ReadyReason::AddressInUse,
        ReadyReason::SharingConflict,
        ReadyReason::NameTaken,
        ReadyReason::MissingDependency,
    ];

    /// The API spelling (CamelCase, as `metav1.Condition` requires).
    pub fn as_str(self) -> &'static str {
        match self {
            ReadyReason::Provisioned => "Provisioned",
            ReadyReason::Pending => "Pending",
            ReadyReason::Deleting => "Deleting",
            ReadyReason::AnnotationInvalid => "AnnotationInvalid",
            ReadyReason::CloudRejected => "CloudRejected",
            ReadyReason::CloudThrottled => "CloudThrottled",
            ReadyReason::CloudError => "CloudError",
            ReadyReason::QuotaExceeded => "QuotaExceeded",
            ReadyReason::PermissionDenied => "PermissionDenied",
            ReadyReason::PoolExhausted => "PoolExhausted",
            ReadyReason::AddressInUse => "AddressInUse",
            ReadyReason::NameTaken => "NameTaken",
            ReadyReason::MissingDependency => "MissingDependency",
            ReadyReason::SharingConflict => "SharingConflict",
        }
    }

    /// The status that goes with the reason.
    pub fn status(self) -> ConditionStatus {
        match self {
            ReadyReason::Provisioned => ConditionStatus::True,
            ReadyReason::Pending | ReadyReason::CloudThrottled | ReadyReason::CloudError => {
                ConditionStatus::Unknown
            }
            ReadyReason::Deleting
            | ReadyReason::AnnotationInvalid
            | ReadyReason::CloudRejected
            | ReadyReason::QuotaExceeded
            | ReadyReason::PermissionDenied
            | ReadyReason::PoolExhausted
            | ReadyReason::AddressInUse
            | ReadyReason::NameTaken
            | ReadyReason::MissingDependency
            | ReadyReason::SharingConflict => ConditionStatus::False,
        }
    }
}

/// The condition a Service should show, without the timestamps (those depend on what it shows
/// now; see [`super::status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// Why.
    pub reason: ReadyReason,
    /// What happened and what to change, within [`MESSAGE_LIMIT`].
    pub message: String,
}

impl Readiness {
    fn new(reason: ReadyReason, message: String) -> Self {
        Self { reason, message }
    }

    /// The status implied by the reason.
    pub fn status(&self) -> ConditionStatus {
        self.reason.status()
    }

    /// The load balancer is ready at `addresses` (IPs or host names).
    pub fn provisioned(addresses: &[String]) -> Self {
        Self::new(
            ReadyReason::Provisioned,
            format!("Load balancer ready at {}.", addresses.join(", ")),
        )
    }

    /// The provider created the load balancer but reported no address yet.
    pub fn awaiting_address() -> Self {
        Self::new(
            ReadyReason::Pending,
            "Load balancer created; waiting for the cloud to assign its address. kube-lb checks \
             again shortly."
                .to_string(),
        )
    }

    /// The Service's annotations or fields cannot be realised: each problem names the
    /// annotation key or field path, the value and what is allowed.
    pub fn invalid(errors: &ParseErrors) -> Self {
        Self::new(
            ReadyReason::AnnotationInvalid,
            format!(
                "The Service cannot be realised as written. Change: {errors}. kube-lb tries \
                 again when the Service changes."
            ),
        )
    }

    /// Deleting the load balancer failed.
    pub fn delete_failed(error: &ProviderError) -> Self {
        Self::new(
            ReadyReason::Deleting,
            format!(
                "Deleting the load balancer failed: {error}. kube-lb retries with backoff; the \
                 finalizer stays until the load balancer is gone."
            ),
        )
    }

    /// What a failed ensure means for the Service; `None` when another controller implements
    /// its load balancer (nothing of kube-lb's to report).
    pub fn from_provider(error: &ProviderError) -> Option<Self> {
        let readiness = match error {
            ProviderError::ImplementedElsewhere => return None,
            ProviderError::OwnedElsewhere {
                operation,
                resource,
                owner,
            } => Self::new(
                ReadyReason::NameTaken,
                format!(
                    "{operation}: {resource} already exists and belongs to {owner}, not to this \
                     Service. kube-lb never adopts or changes another owner's resource: delete \
                     or re-tag it (or recreate the Service, which gives its load balancer a new \
                     name). kube-lb looks again within the longest retry delay (--backoff-max, \
                     5m by default), or at once when the Service changes (any label will do, \
                     e.g. `kubectl label svc NAME kube-lb.io/retry=1 --overwrite`)."
                ),
            ),
            ProviderError::User { message } => Self::new(
                ReadyReason::CloudRejected,
                format!(
                    "The cloud cannot build the load balancer as the Service asks: {message}. \
                     Change the Service; kube-lb tries again when it changes."
                ),
            ),
            ProviderError::Refused { message, current } => {
                let serving = super::status::addresses(&super::status::ingress(current));
                let serving = if serving.is_empty() {
                    String::new()
                } else {
                    format!(" at {}", serving.join(", "))
                };
                Self::new(
                    ReadyReason::CloudRejected,
                    format!(
                        "The existing load balancer cannot change as the Service asks: \
                         {message}. It keeps serving as it is{serving}. Change the Service; \
                         kube-lb tries again when it changes."
                    ),
                )
            }
            ProviderError::Throttled {
                operation, message, ..
            } => Self::new(
                ReadyReason::CloudThrottled,
                format!(
                    "The cloud throttled {operation}: {message}. kube-lb backs off and retries; \
                     if this persists, lower the controller's request rate or raise the cloud \
                     API rate quota."
                ),
            ),
            ProviderError::Retryable { .. } | ProviderError::Internal { .. } => Self::new(
                ReadyReason::CloudError,
                format!(
                    "Cloud call failed: {error}. kube-lb retries with backoff; nothing to change \
                     unless this persists."
                ),
            ),
            ProviderError::Pending { .. } => Self::new(
                ReadyReason::Pending,
                format!("Waiting for the cloud: {error}. kube-lb retries with backoff."),
            ),
            ProviderError::Environment {
                operation,
                cause,
                message,
            } => environment(operation, *cause, message),
        };
        Some(readiness)
    }

    /// What a reconcile error means for the Service; `None` when it says nothing about the
    /// load balancer (an API server failure: the condition is left as it is).
    pub fn from_error(error: &Error) -> Option<Self> {
        match error {
            Error::InvalidService(errors) => Some(Self::invalid(errors)),
            Error::Provider(error) => Self::from_provider(error),
            Error::Delete(error) => Some(Self::delete_failed(error)),
            Error::Kube(_) | Error::MissingField(_) | Error::Superseded(_) => None,
        }
    }

    /// Adds the annotations and fields that were ignored or only partly honoured (`kube-lb
    /// lint` warnings: another cloud's annotations, options that do not apply to this kind of
    /// load balancer, settings honoured only at creation), so the user learns that the load
    /// balancer is not quite what the Service says.
    pub fn with_ignored(mut self, warnings: &[String]) -> Self {
        if !warnings.is_empty() {
            self.message.push_str(" Ignored or only partly honoured: ");
            self.message.push_str(&warnings.join("; "));
            if !self.message.ends_with('.') {
                self.message.push('.');
            }
        }
        self
    }

    /// The condition as one line for the Event that mirrors it (`kubectl describe svc` prints
    /// events, not Service conditions): `kube-lb.io/LoadBalancerReady=False CloudRejected: …`,
    /// as `kubectl wait --for=condition=…=False` and the reason table name it.
    pub fn event_note(&self) -> String {
        format!(
            "{CONDITION_TYPE}={} {}: {}",
            self.status().as_str(),
            self.reason.as_str(),
            self.message
        )
    }

    /// The message cut to [`MESSAGE_LIMIT`] bytes on a character boundary, marked when cut.
    pub fn limited_message(&self) -> String {
        cut_message(&self.message, MESSAGE_LIMIT)
    }

    /// The condition as the Service should show it at `now`, keeping the transition time of
    /// `current` when the status did not change.
    pub fn to_condition(
        &self,
        current: Option<&Condition>,
        generation: Option<i64>,
        now: k8s_openapi::jiff::Timestamp,
    ) -> Condition {
        let status = self.status().as_str();
        let last_transition_time = match current {
            Some(current) if current.status == status => current.last_transition_time.clone(),
            _ => k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now),
        };
        Condition {
            type_: CONDITION_TYPE.to_string(),
            status: status.to_string(),
            reason: self.reason.as_str().to_string(),
            message: self.limited_message(),
            observed_generation: generation,
            last_transition_time,
        }
    }

    /// True when `current` already says exactly this for `generation` (no write needed).
    pub fn is_shown_by(&self, current: Option<&Condition>, generation: Option<i64>) -> bool {
        current.is_some_and(|c| {
            c.status == self.status().as_str()
                && c.reason == self.reason.as_str()
                && c.message == self.limited_message()
                && c.observed_generation == generation
        })
    }
}

/// The message of an environment error: the cloud's words, then what to change.
fn environment(operation: &str, cause: EnvironmentCause, message: &str) -> Readiness {
    let (reason, advice) = match cause {
        EnvironmentCause::Quota => (
            ReadyReason::QuotaExceeded,
            "Raise the cloud quota or delete load balancers that are no longer used",
        ),
        EnvironmentCause::PermissionDenied => (
            ReadyReason::PermissionDenied,
            "Grant the controller's cloud identity permission for this call (see the IAM \
             policies in deploy/)",
        ),
        EnvironmentCause::PoolExhausted => (
            ReadyReason::PoolExhausted,
            "Add addresses to the pool or delete LoadBalancer Services that are no longer used",
        ),
        EnvironmentCause::SharingConflict => (
            ReadyReason::SharingConflict,
            "Another Service holds this address: give one of them a different \
             spec.loadBalancerIP, or delete the other",
        ),
        EnvironmentCause::AddressInUse => (
            ReadyReason::AddressInUse,
            "Request another address (spec.loadBalancerIP or the cloud's address annotation) \
             or release this one",
        ),
        EnvironmentCause::NameTaken => (
            ReadyReason::NameTaken,
            "A cloud resource with this load balancer's name belongs to another owner: delete \
             or re-tag it",
        ),
        EnvironmentCause::MissingDependency => (
            ReadyReason::MissingDependency,
            "Create the missing resource, or fix the annotation or cloud configuration that \
             names it",
        ),
    };
    Readiness::new(
        reason,
        format!("{operation}: {cause}: {message}. {advice}; kube-lb retries with backoff."),
    )
}

/// `message` cut to at most `limit` bytes, never inside a character, ending with a note of how
/// much was cut. Unchanged when it fits.
pub fn cut_message(message: &str, limit: usize) -> String {
    if message.len() <= limit {
        return message.to_string();
    }
    let suffix = |cut: usize| format!("… [{cut} more bytes]");
    // Sized for the most that could be cut, so the real suffix is never longer.
    let room = limit.saturating_sub(suffix(message.len()).len());
    let mut end = room.min(message.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = format!("{}{}", &message[..end], suffix(message.len() - end));
    if cut.len() <= limit {
        return cut;
    }
    let mut end = limit;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

/// The `kube-lb.io/LoadBalancerReady` condition the Service shows, if any.
pub fn current(service: &Service) -> Option<&Condition> {
    service
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)
}

#[cfg(test)]
mod tests {
    use kube_lb_annotations::{ErrorKind, Location, ParseError};

    use super::*;

    fn parse_errors() -> ParseErrors {
        ParseErrors::from_vec(vec![ParseError {
            location: Location::annotation(
                "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval",
            ),
            value: Some("9000".into()),
            kind: ErrorKind::OutOfRange,
            detail: "must be between 5 and 300 seconds".into(),
        }])
        .unwrap()
    }

    fn env(cause: EnvironmentCause, message: &str) -> Error {
        Error::Provider(ProviderError::environment(
            "CreateLoadBalancer",
            cause,
            message,
        ))
    }

    /// Every reconcile error class, the reason and status it shows, and words the message must
    /// carry (what went wrong and what to change).
    #[test]
    fn errors_map_to_reasons_statuses_and_actionable_messages() {
        use ConditionStatus::{False, Unknown};
        use EnvironmentCause::*;
        let cases: Vec<(Error, ReadyReason, ConditionStatus, &[&str])> = vec![
            (
                Error::InvalidService(parse_errors()),
                ReadyReason::AnnotationInvalid,
                False,
                &[
                    "annotation service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval",
                    "\"9000\"",
                    "between 5 and 300",
                    "Change:",
                ],
            ),
            (
                Error::Provider(ProviderError::user(
                    "loadBalancerIP 10.9.9.9 is outside the pool 127.240.0.0/16",
                )),
                ReadyReason::CloudRejected,
                False,
                &["outside the pool", "Change the Service"],
            ),
            // A refused change is rejected like any user error, and says the load balancer
            // that exists keeps serving, at the address the Service shows.
            (
                Error::Provider(ProviderError::refused(
                    "the CLB is OPEN (public) but the Service now asks for INTERNAL",
                    kube_lb_provider_core::LoadBalancerStatus::with_ingress(vec![
                        kube_lb_provider_core::LoadBalancerIngress {
                            ip: Some(std::net::IpAddr::from([203, 0, 113, 7])),
                            hostname: None,
                            ip_mode: None,
                        },
                    ]),
                )),
                ReadyReason::CloudRejected,
                False,
                &[
                    "asks for INTERNAL",
                    "keeps serving as it is at 203.0.113.7",
                    "Change the Service",
                ],
            ),
            (
                Error::Provider(ProviderError::throttled(
                    "DescribeLoadBalancers",
                    "Throttling: Rate exceeded",
                )),
                ReadyReason::CloudThrottled,
                Unknown,
                &["DescribeLoadBalancers", "Rate exceeded", "retries"],
            ),
            (
                Error::Provider(ProviderError::throttled(
                    "forwardingRules.insert",
                    "HTTP 403 rateLimitExceeded: quota per minute",
                )),
                ReadyReason::CloudThrottled,
                Unknown,
                &["forwardingRules.insert"],
            ),
            // The reason comes from the type: a throttle the provider did not recognise as
            // one is a cloud error, whatever its words say ...
            (
                Error::Provider(ProviderError::retryable(
                    "DescribeLoadBalancers",
                    "Throttling: Rate exceeded",
                )),
                ReadyReason::CloudError,
                Unknown,
                &["Rate exceeded", "retries"],
            ),
            // ... and a throttle it did recognise needs no tell-tale words.
            (
                Error::Provider(ProviderError::throttled("ensure", "HTTP 429")),
                ReadyReason::CloudThrottled,
                Unknown,
                &["ensure", "HTTP 429", "raise the cloud API rate quota"],
            ),
            (
                Error::Provider(ProviderError::retryable(
                    "CreateLoadBalancer",
                    "ServiceUnavailable",
                )),
                ReadyReason::CloudError,
                Unknown,
                &["ServiceUnavailable", "retries"],
            ),
            (
                Error::Provider(ProviderError::Internal {
                    message: "unexpected answer".into(),
                    source: None,
                }),
                ReadyReason::CloudError,
                Unknown,
                &["unexpected answer"],
            ),
            (
                Error::Provider(ProviderError::pending(
                    "DeleteSecurityGroup",
                    "DependencyViolation",
                )),
                ReadyReason::Pending,
                Unknown,
                &["DependencyViolation"],
            ),
            (
                env(Quota, "TooManyLoadBalancers"),
                ReadyReason::QuotaExceeded,
                False,
                &["TooManyLoadBalancers", "Raise the cloud quota"],
            ),
            (
                env(PermissionDenied, "UnauthorizedOperation"),
                ReadyReason::PermissionDenied,
                False,
                &[
                    "CreateLoadBalancer",
                    "Grant the controller's cloud identity",
                ],
            ),
            (
                env(
                    PoolExhausted,
                    "the local address pool (127.240.0.0/30) is exhausted",
                ),
                ReadyReason::PoolExhausted,
                False,
                &["127.240.0.0/30", "Add addresses to the pool"],
            ),
            (
                env(AddressInUse, "PublicIPAddressInUse"),
                ReadyReason::AddressInUse,
                False,
                &["PublicIPAddressInUse", "Request another address"],
            ),
            (
                env(
                    SharingConflict,
                    "address 127.240.0.7 is in use by Service default/a on port 53/UDP as well",
                ),
                ReadyReason::SharingConflict,
                False,
                &["default/a", "different spec.loadBalancerIP"],
            ),
            // The holder's name in the words does not make it a sharing conflict: only the
            // cause does.
            (
                env(
                    AddressInUse,
                    "loadBalancerIP 127.240.0.7 is already in use by Service default/a",
                ),
                ReadyReason::AddressInUse,
                False,
                &["default/a", "Request another address"],
            ),
            (
                env(NameTaken, "load balancer a1b2 belongs to cluster c2"),
                ReadyReason::NameTaken,
                False,
                &["a1b2", "delete or re-tag"],
            ),
            (
                Error::Provider(ProviderError::owned_elsewhere(
                    "CreateLoadBalancer",
                    "Classic ELB a1b2",
                    "Service(s) shop/cart of cluster c2",
                )),
                ReadyReason::NameTaken,
                False,
                &[
                    "Classic ELB a1b2",
                    "shop/cart of cluster c2",
                    "delete or re-tag",
                    "when the Service changes",
                ],
            ),
            (
                env(MissingDependency, "subnet subnet-123 not found"),
                ReadyReason::MissingDependency,
                False,
                &["subnet-123", "Create the missing resource"],
            ),
            (
                Error::Delete(ProviderError::retryable("DeleteLoadBalancer", "503")),
                ReadyReason::Deleting,
                False,
                &["Deleting the load balancer failed", "503", "finalizer"],
            ),
        ];
        for (error, reason, status, words) in cases {
            let readiness =
                Readiness::from_error(&error).unwrap_or_else(|| panic!("{error}: no condition"));
            assert_eq!(readiness.reason, reason, "{error}");
            assert_eq!(readiness.status(), status, "{error}");
            for word in words {
                assert!(
                    readiness.message.contains(word),
                    "{error}: {word:?} missing from {:?}",
                    readiness.message
                );
            }
        }
        // Nothing about the load balancer: the condition stays as it is.
        let kube = Error::MissingField("uid");
        assert_eq!(Readiness::from_error(&kube), None);
        assert_eq!(
            Readiness::from_error(&Error::Provider(ProviderError::ImplementedElsewhere)),
            None
        );
    }

    /// Each provider's own error, built from the cloud's code, through the provider's one
    /// conversion to the condition: a throttle is `CloudThrottled` because the provider
    /// classed it so (HTTP 429 with no tell-tale words included), any other transient failure
    /// is `CloudError`; both keep the `retryable` class and the in-place retry.
    #[test]
    fn every_providers_throttles_show_as_cloud_throttled() {
        #[allow(unused_mut)]
        let mut cases: Vec<(&str, ProviderError, ReadyReason)> = Vec::new();
        #[cfg(feature = "aws")]
        {
            use kube_lb_provider_aws::AwsError;
            let api = |code: &str, status: u16| AwsError::Api {
                operation: "DescribeLoadBalancers",
                code: code.to_string(),
                message: "Rate exceeded".to_string(),
                status: Some(status),
                source: "sdk".into(),
            };
            cases.push((
                "aws Throttling",
                api("Throttling", 400).into(),
                ReadyReason::CloudThrottled,
            ));
            cases.push((
                "aws RequestLimitExceeded",
                api("RequestLimitExceeded", 503).into(),
                ReadyReason::CloudThrottled,
            ));
            cases.push((
                "aws 500",
                api("InternalFailure", 500).into(),
                ReadyReason::CloudError,
            ));
        }
        #[cfg(feature = "gcp")]
        {
            use kube_lb_provider_gcp::error::Failure;
            let failure = |status: u16, reason: &str| {
                Failure {
                    status: Some(status),
                    reason: reason.to_string(),
                    message: "m".to_string(),
                    retry_after: None,
                }
                .into_provider_error("forwardingRules.insert")
            };
            cases.push((
                "gcp 403 rateLimitExceeded",
                failure(403, "rateLimitExceeded"),
                ReadyReason::CloudThrottled,
            ));
            cases.push(("gcp 429", failure(429, ""), ReadyReason::CloudThrottled));
            cases.push((
                "gcp 503",
                failure(503, "backendError"),
                ReadyReason::CloudError,
            ));
        }
        #[cfg(feature = "azure")]
        {
            use kube_lb_provider_azure::AzureError;
            let arm = |status: u16, code: &str| {
                ProviderError::from(AzureError::Arm {
                    operation: "PutLoadBalancer",
                    status,
                    code: code.to_string(),
                    message: "m".to_string(),
                })
            };
            cases.push((
                "azure 429",
                arm(429, "TooManyRequests"),
                ReadyReason::CloudThrottled,
            ));
            cases.push((
                "azure 503",
                arm(503, "ServiceUnavailable"),
                ReadyReason::CloudError,
            ));
        }
        #[cfg(feature = "openstack")]
        {
            use kube_lb_provider_openstack::OpenStackError;
            let api = |status: u16| {
                ProviderError::from(OpenStackError::Api {
                    operation: "octavia:CreateLoadBalancer",
                    status,
                    message: "m".to_string(),
                    retry_after: None,
                })
            };
            cases.push(("openstack 429", api(429), ReadyReason::CloudThrottled));
            cases.push(("openstack 503", api(503), ReadyReason::CloudError));
        }
        #[cfg(feature = "tencent")]
        {
            use kube_lb_provider_tencent::TencentError;
            let api = |code: &str| {
                ProviderError::from(TencentError::Api {
                    action: "CreateLoadBalancer",
                    code: code.to_string(),
                    message: "m".to_string(),
                    request_id: "r".to_string(),
                })
            };
            cases.push((
                "tencent RequestLimitExceeded",
                api("RequestLimitExceeded"),
                ReadyReason::CloudThrottled,
            ));
            cases.push((
                "tencent InternalError",
                api("InternalError"),
                ReadyReason::CloudError,
            ));
        }
        #[cfg(feature = "baidu")]
        {
            use kube_lb_provider_baidu::BceError;
            let api = |status: u16, code: &str| {
                ProviderError::from(BceError::Api {
                    operation: "blb:CreateLoadBalancer",
                    status,
                    code: code.to_string(),
                    message: "m".to_string(),
                    request_id: "r".to_string(),
                })
            };
            cases.push((
                "baidu RequestLimitExceeded",
                api(400, "RequestLimitExceeded"),
                ReadyReason::CloudThrottled,
            ));
            cases.push((
                "baidu 429",
                api(429, "TooMany"),
                ReadyReason::CloudThrottled,
            ));
            cases.push(("baidu 500", api(500, "ServerBusy"), ReadyReason::CloudError));
        }
        for (label, error, reason) in cases {
            assert_eq!(
                error.class(),
                "retryable",
                "{label}: metrics class unchanged"
            );
            assert!(error.is_transient(), "{label}: retried in place as before");
            assert_eq!(
                error.is_throttled(),
                reason == ReadyReason::CloudThrottled,
                "{label}"
            );
            let readiness = Readiness::from_provider(&error).unwrap();
            assert_eq!(readiness.reason, reason, "{label}: {error}");
        }
    }

    #[test]
    fn reasons_are_a_closed_set_of_valid_condition_reasons() {
        let mut seen = std::collections::BTreeSet::new();
        for reason in ReadyReason::ALL {
            let text = reason.as_str();
            assert!(seen.insert(text), "{text} twice");
            // metav1.Condition: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`, CamelCase here.
            assert!(text.chars().next().is_some_and(|c| c.is_ascii_uppercase()));
            assert!(text.chars().all(|c| c.is_ascii_alphanumeric()), "{text}");
        }
        assert_eq!(ReadyReason::Provisioned.status(), ConditionStatus::True);
        let required = [
            "Provisioned",
            "AnnotationInvalid",
            "CloudRejected",
            "CloudThrottled",
            "QuotaExceeded",
            "PermissionDenied",
            "PoolExhausted",
            "AddressInUse",
            "NameTaken",
            "MissingDependency",
            "SharingConflict",
            "Pending",
            "Deleting",
            "CloudError",
        ];
        for name in required {
            assert!(seen.contains(name), "{name} missing");
        }
    }

    #[test]
    fn ignored_annotations_are_listed() {
        let readiness = Readiness::provisioned(&["127.240.0.1".into()]).with_ignored(&[
            "metadata.annotations: 1 annotation(s) for cloud aws have no effect on cloud local: \
             service.beta.kubernetes.io/aws-load-balancer-type"
                .into(),
        ]);
        assert_eq!(readiness.reason, ReadyReason::Provisioned);
        assert!(
            readiness
                .message
                .starts_with("Load balancer ready at 127.240.0.1."),
            "{}",
            readiness.message
        );
        let listed = "Ignored or only partly honoured: metadata.annotations: 1 annotation(s) \
                      for cloud aws";
        assert!(readiness.message.contains(listed), "{}", readiness.message);
        let plain = Readiness::provisioned(&["a".into()]).with_ignored(&[]);
        assert_eq!(plain.message, "Load balancer ready at a.");
    }

    #[test]
    fn messages_are_cut_to_the_api_limit_on_character_boundaries() {
        let cases = [
            "x".repeat(MESSAGE_LIMIT),
            "x".repeat(MESSAGE_LIMIT + 1),
            "é".repeat(MESSAGE_LIMIT),
            "€".repeat(MESSAGE_LIMIT),
            "🦀".repeat(MESSAGE_LIMIT / 2),
        ];
        for message in cases {
            let cut = cut_message(&message, MESSAGE_LIMIT);
            assert!(cut.len() <= MESSAGE_LIMIT, "{} bytes", cut.len());
            if message.len() <= MESSAGE_LIMIT {
                assert_eq!(cut, message);
            } else {
                assert!(cut.ends_with("more bytes]"));
                assert!(cut.len() + 8 >= MESSAGE_LIMIT, "as much as fits is kept");
            }
        }
        assert_eq!(cut_message("ééé", 3), "é");
        // Through the condition too.
        let huge = Readiness::provisioned(&["a".into()]).with_ignored(&["ü".repeat(40_000)]);
        assert!(huge.limited_message().len() <= MESSAGE_LIMIT);
    }

    #[test]
    fn the_event_note_names_type_status_reason_and_message() {
        let cases = [
            (
                Readiness::provisioned(&["127.240.0.1".into()]),
                "kube-lb.io/LoadBalancerReady=True Provisioned: Load balancer ready at 127.240.0.1.",
            ),
            (
                Readiness::from_provider(&ProviderError::throttled("ensure", "HTTP 429")).unwrap(),
                "kube-lb.io/LoadBalancerReady=Unknown CloudThrottled: The cloud throttled ensure: HTTP 429.",
            ),
            (
                Readiness::invalid(&parse_errors()),
                "kube-lb.io/LoadBalancerReady=False AnnotationInvalid: The Service cannot be realised",
            ),
        ];
        for (readiness, start) in cases {
            let note = readiness.event_note();
            assert!(note.starts_with(start), "{note}");
            assert!(note.ends_with(&readiness.message), "{note}");
        }
    }

    #[test]
    fn transition_time_changes_only_with_the_status() {
        use k8s_openapi::jiff::Timestamp;
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_600).unwrap();
        let invalid = Readiness::invalid(&parse_errors());
        let rejected = Readiness::from_provider(&ProviderError::user("bad")).unwrap();
        let ready = Readiness::provisioned(&["127.240.0.1".into()]);
        let first = invalid.to_condition(None, Some(3), t0);
        assert_eq!(first.last_transition_time.0, t0);
        assert_eq!(first.observed_generation, Some(3));
        assert_eq!(first.type_, CONDITION_TYPE);
        assert_eq!(
            (first.status.as_str(), first.reason.as_str()),
            ("False", "AnnotationInvalid")
        );
        // Same status, another reason and message: the transition time stays.
        let second = rejected.to_condition(Some(&first), Some(4), t1);
        assert_eq!(second.last_transition_time.0, t0);
        assert_eq!(second.reason, "CloudRejected");
        assert_eq!(second.observed_generation, Some(4));
        // The status changes: a new transition time.
        let third = ready.to_condition(Some(&second), None, t1);
        assert_eq!(third.last_transition_time.0, t1);
        assert_eq!(third.status, "True");
        assert_eq!(third.observed_generation, None);
        // What is shown already needs no write; any difference does.
        assert!(ready.is_shown_by(Some(&third), None));
        assert!(
            !ready.is_shown_by(Some(&third), Some(1)),
            "a newer generation"
        );
        assert!(!ready.is_shown_by(Some(&second), None));
        assert!(!ready.is_shown_by(None, None));
    }
}

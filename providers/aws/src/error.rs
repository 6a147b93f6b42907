//! Errors of the AWS provider, classified for the controller (retry vs user error).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use kube_lb_provider_core::error::Classification;
use kube_lb_provider_core::{EnvironmentCause, ProviderError};

use crate::calls::Op;

/// Error codes AWS uses for request-rate throttling across EC2, ELB and ELBv2.
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestLimitExceeded",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
    "EC2ThrottledException",
    "PriorRequestNotComplete",
    // Classic ELB: a service it calls on the request's behalf (EC2) throttled it.
    "DependencyThrottle",
];

/// Codes of server-side failures that some endpoints (and moto) send with a 4xx status.
const SERVER_ERROR_CODES: &[&str] = &[
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "InsufficientAddressCapacity",
];

/// Codes of conditions that clear up on their own, so the same call may simply be repeated
/// later: a dependency still being torn down, a resource in a passing state. Clearing takes
/// longer than an in-place backoff step, so the controller's backoff retries them.
const CONFLICT_CODES: &[&str] = &[
    "DependencyViolation",
    "ResourceInUse",
    "ResourceInUseException",
    "OperationNotPermitted",
    "IncorrectState",
    "IncorrectInstanceState",
    "InvalidState",
];

/// Codes meaning what the provider read a moment ago changed under it: one of its own
/// resources (or a node's instance) is gone, or already exists. Repeating the same call cannot
/// help (and call sites test several of these as "absent"), so they are not retried in place;
/// the controller's next pass re-reads and carries on.
const STALE_CODES: &[&str] = &[
    "LoadBalancerNotFound",
    "AccessPointNotFound",
    "TargetGroupNotFound",
    "ListenerNotFound",
    "InvalidInstanceID.NotFound",
    "InvalidTarget",
    "InvalidPermission.NotFound",
    "InvalidPermission.Duplicate",
    "DuplicateListener",
    "PriorityInUse",
];

/// Codes meaning the Service asks for something AWS will not build, where the value comes from
/// the Service itself (an annotation, a port, a protocol): only its author can fix it.
const USER_ERROR_CODES: &[&str] = &[
    "CertificateNotFound",
    "CertificateNotFoundException",
    "UnsupportedCertificate",
    "ValidationError",
    "InvalidConfigurationRequest",
    "InvalidParameter",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "MissingParameter",
    "UnsupportedProtocol",
    "IncompatibleProtocols",
    "PolicyTypeNotFound",
    "PolicyNotFound",
    "SSLPolicyNotFound",
    // The wire codes of the SDK's `ALPNPolicyNotSupportedException` and
    // `InvalidSchemeException`: the code AWS sends is not the model's shape name.
    "ALPNPolicyNotFound",
    "InvalidScheme",
    "TooManyTags",
];

/// Quota codes that do not follow the `TooMany*` / `*LimitExceeded` patterns.
const QUOTA_CODES: &[&str] = &[
    "LimitExceeded",
    "ResourceLimitExceeded",
    // ELBv2: a target group is already used by as many load balancers as it may be.
    "TargetGroupAssociationLimit",
];

/// Codes meaning the controller's AWS identity may not make the call.
const PERMISSION_CODES: &[&str] = &[
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "AuthFailure",
    "Blocked",
    "OptInRequired",
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "SignatureDoesNotMatch",
];

/// Codes meaning something the load balancer needs does not exist (yet).
const MISSING_DEPENDENCY_CODES: &[&str] = &[
    "InvalidGroup.NotFound",
    "InvalidSecurityGroup",
    "InvalidSubnetID.NotFound",
    "InvalidSubnet",
    "SubnetNotFound",
    "InvalidVpcID.NotFound",
    "InvalidAllocationID.NotFound",
    "AllocationIdNotFound",
    "InvalidNetworkInterfaceID.NotFound",
];

/// Codes meaning a resource with our name exists: by the time such an error reaches
/// [`ProviderError`], the provider has already checked whether it is ours to adopt.
const NAME_TAKEN_CODES: &[&str] = &[
    "DuplicateLoadBalancerName",
    "DuplicateAccessPointName",
    "DuplicateTargetGroupName",
    "InvalidGroup.Duplicate",
];

/// Classifies an AWS error code (or a transport category such as `Timeout`) and the HTTP
/// status it came with, in the providers' shared taxonomy: both the in-place retry
/// ([`Classification::retries_in_place`]) and the conversion to [`ProviderError`] read this
/// one answer. Pure, so the whole table is tested without AWS.
pub fn classify(code: &str, status: Option<u16>) -> Classification {
    if THROTTLING_CODES.contains(&code)
        || SERVER_ERROR_CODES.contains(&code)
        || matches!(code, "Timeout" | "Dispatch" | "Response")
        || status.is_some_and(|s| s >= 500)
    {
        return Classification::Transient;
    }
    if CONFLICT_CODES.contains(&code) {
        return Classification::Pending;
    }
    if STALE_CODES.contains(&code) {
        return Classification::Stale;
    }
    if USER_ERROR_CODES.contains(&code) {
        return Classification::User;
    }
    if NAME_TAKEN_CODES.contains(&code) {
        return Classification::Environment(EnvironmentCause::NameTaken);
    }
    if MISSING_DEPENDENCY_CODES.contains(&code) {
        return Classification::Environment(EnvironmentCause::MissingDependency);
    }
    if PERMISSION_CODES.contains(&code) || status == Some(403) {
        return Classification::Environment(EnvironmentCause::PermissionDenied);
    }
    // EC2 and ELB spell quotas as `TooMany…` (`TooManyLoadBalancers`) or `…LimitExceeded`
    // (`RulesPerSecurityGroupLimitExceeded`); the throttling codes among them matched above.
    if QUOTA_CODES.contains(&code) || code.starts_with("TooMany") || code.ends_with("LimitExceeded")
    {
        return Classification::Environment(EnvironmentCause::Quota);
    }
    Classification::Unknown
}

/// What went wrong in the AWS provider.
#[derive(Debug, thiserror::Error)]
pub enum AwsError {
    /// An AWS API call failed (after retries, for transient failures).
    #[error("{operation}: {code}: {message}")]
    Api {
        /// The operation (`DescribeLoadBalancers`, …).
        operation: &'static str,
        /// The AWS error code, or a transport category (`Timeout`, `Dispatch`, …).
        code: String,
        /// The message AWS returned.
        message: String,
        /// The HTTP status, when a response was received.
        status: Option<u16>,
        /// The SDK error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The cloud-config file could not be read.
    #[error("cannot read cloud config {path}")]
    ConfigRead {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cloud-config file has an invalid line or value.
    #[error("cloud config line {line}: {message}")]
    ConfigParse {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The SDK configuration is unusable (no region, …).
    #[error("AWS configuration: {0}")]
    Setup(String),
    /// The Service asks for something that cannot be built.
    #[error("{0}")]
    Invalid(String),
    /// Something outside the Service is missing or refused, found by the provider itself
    /// rather than reported by an AWS error code (no subnet to place the load balancer in, no
    /// node with an instance yet).
    #[error("{message}")]
    Environment {
        /// What kind of obstacle it is.
        cause: EnvironmentCause,
        /// What is missing, in words the operator can act on.
        message: String,
    },
    /// AWS answered with something the provider cannot use (a missing field, an owner clash).
    #[error("unexpected AWS state: {0}")]
    Unexpected(String),
    /// A resource with this Service's deterministic name exists and belongs to someone else.
    #[error("{operation}: {resource} {name} exists and belongs to {owner}, not to this Service")]
    NameTaken {
        /// The create that found the name taken.
        operation: &'static str,
        /// What kind of resource (`load balancer`, `target group`, `security group`).
        resource: &'static str,
        /// The name.
        name: String,
        /// Who owns it, from its tags.
        owner: String,
    },
}

impl AwsError {
    /// Builds an [`AwsError::Api`] from an SDK error, keeping code, message and HTTP status.
    pub fn from_sdk<E>(op: Op, error: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let status = error.raw_response().map(|r| r.status().as_u16());
        let (code, message) = match &error {
            SdkError::ServiceError(service) => {
                let inner = service.err();
                (
                    inner.code().unwrap_or("Unknown").to_string(),
                    inner.message().unwrap_or_default().to_string(),
                )
            }
            SdkError::TimeoutError(_) => ("Timeout".to_string(), "request timed out".to_string()),
            SdkError::DispatchFailure(_) => (
                "Dispatch".to_string(),
                "could not send the request".to_string(),
            ),
            SdkError::ResponseError(_) => (
                "Response".to_string(),
                "could not read the response".to_string(),
            ),
            SdkError::ConstructionFailure(_) => (
                "Construction".to_string(),
                "could not build the request".to_string(),
            ),
            _ => ("Unknown".to_string(), error.to_string()),
        };
        AwsError::Api {
            operation: op.name,
            code,
            message,
            status,
            source: Box::new(error),
        }
    }

    /// The AWS error code, for API errors.
    pub fn code(&self) -> Option<&str> {
        match self {
            AwsError::Api { code, .. } => Some(code),
            _ => None,
        }
    }

    /// True when the error code is one of `codes`.
    pub fn has_code(&self, codes: &[&str]) -> bool {
        self.code().is_some_and(|c| codes.contains(&c))
    }

    /// This error in the providers' shared taxonomy: what [`ProviderError::from`] turns it
    /// into and whether the shared call path repeats it in place.
    pub fn classification(&self) -> Classification {
        match self {
            AwsError::Api { code, status, .. } => classify(code, *status),
            AwsError::Invalid(_) => Classification::User,
            AwsError::Environment { cause, .. } => Classification::Environment(*cause),
            // The owner is known and it is not this Service: only a person can clear it.
            AwsError::NameTaken { .. } => Classification::User,
            AwsError::ConfigRead { .. }
            | AwsError::ConfigParse { .. }
            | AwsError::Setup(_)
            | AwsError::Unexpected(_) => Classification::Unknown,
        }
    }

    /// True for throttling codes only.
    pub fn is_throttling(&self) -> bool {
        self.has_code(THROTTLING_CODES)
    }
}

/// The single conversion from AWS errors to the controller's classes: the variant
/// [`AwsError::classification`] names, so the converted error retries exactly as the shared
/// call path did ([`ProviderError::retry`] equals [`Classification::retry`]).
impl From<kube_lb_provider_core::RepeatedPageToken> for AwsError {
    fn from(repeated: kube_lb_provider_core::RepeatedPageToken) -> Self {
        AwsError::Unexpected(repeated.to_string())
    }
}

impl From<AwsError> for ProviderError {
    fn from(error: AwsError) -> Self {
        let class = error.classification();
        let (operation, text) = match &error {
            AwsError::Invalid(message) => return ProviderError::user(message.clone()),
            AwsError::Environment { cause, message } => {
                return ProviderError::environment("aws", *cause, message.clone());
            }
            AwsError::NameTaken {
                operation,
                resource,
                name,
                owner,
            } => {
                return ProviderError::owned_elsewhere(
                    operation,
                    format!("{resource} {name}"),
                    owner.clone(),
                );
            }
            AwsError::Api {
                operation,
                code,
                message,
                ..
            } => (*operation, format!("{code}: {message}")),
            AwsError::ConfigRead { .. }
            | AwsError::ConfigParse { .. }
            | AwsError::Setup(_)
            | AwsError::Unexpected(_) => ("aws", String::new()),
        };
        match class {
            Classification::Transient if error.is_throttling() => ProviderError::Throttled {
                operation,
                message: text,
                source: Some(Box::new(error)),
            },
            Classification::Transient => ProviderError::Retryable {
                operation,
                message: text,
                source: Some(Box::new(error)),
            },
            Classification::Pending => ProviderError::Pending {
                operation,
                message: text,
                source: Some(Box::new(error)),
            },
            Classification::Environment(cause) => {
                ProviderError::environment(operation, cause, text)
            }
            Classification::User => ProviderError::user(format!("{operation}: {text}")),
            Classification::Stale | Classification::Unknown => ProviderError::Internal {
                message: error.to_string(),
                source: Some(Box::new(error)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str, status: u16) -> AwsError {
        AwsError::Api {
            operation: "CreateLoadBalancer",
            code: code.to_string(),
            message: "m".to_string(),
            status: Some(status),
            source: "sdk".into(),
        }
    }

    fn env(cause: EnvironmentCause) -> &'static str {
        cause.as_str()
    }

    /// Every code the providers meet, with the class and (for environment errors) the cause
    /// the controller reports.
    #[test]
    fn error_codes_map_to_classes() {
        use EnvironmentCause::*;
        let cases: &[(&str, u16, &str, Option<&str>)] = &[
            // throttling, server errors, transport: retried
            ("Throttling", 400, "retryable", None),
            ("RequestLimitExceeded", 503, "retryable", None),
            ("ThrottlingException", 400, "retryable", None),
            ("TooManyRequestsException", 429, "retryable", None),
            ("SlowDown", 503, "retryable", None),
            ("DependencyThrottle", 400, "retryable", None),
            ("InternalError", 500, "retryable", None),
            ("InternalFailure", 400, "retryable", None),
            ("ServiceUnavailable", 503, "retryable", None),
            ("Unknown", 502, "retryable", None),
            ("Timeout", 0, "retryable", None),
            ("Dispatch", 0, "retryable", None),
            // passing conflicts: retried by the controller, not in place
            ("DependencyViolation", 400, "retryable", None),
            ("ResourceInUse", 400, "retryable", None),
            ("OperationNotPermitted", 400, "retryable", None),
            ("IncorrectState", 400, "retryable", None),
            ("PriorityInUse", 400, "internal", None),
            // our own resources vanished or appeared under us: retried after a fresh read
            ("DuplicateListener", 400, "internal", None),
            ("LoadBalancerNotFound", 400, "internal", None),
            ("TargetGroupNotFound", 400, "internal", None),
            ("ListenerNotFound", 400, "internal", None),
            ("InvalidInstanceID.NotFound", 400, "internal", None),
            ("InvalidTarget", 400, "internal", None),
            // quotas
            ("TooManyLoadBalancers", 400, "environment", Some(env(Quota))),
            ("TooManyTargetGroups", 400, "environment", Some(env(Quota))),
            ("TooManyListeners", 400, "environment", Some(env(Quota))),
            ("TooManyTargets", 400, "environment", Some(env(Quota))),
            ("TooManyAccessPoints", 400, "environment", Some(env(Quota))),
            ("TooManyPolicies", 400, "environment", Some(env(Quota))),
            ("TooManyCertificates", 400, "environment", Some(env(Quota))),
            (
                "RulesPerSecurityGroupLimitExceeded",
                400,
                "environment",
                Some(env(Quota)),
            ),
            (
                "SecurityGroupLimitExceeded",
                400,
                "environment",
                Some(env(Quota)),
            ),
            ("AddressLimitExceeded", 400, "environment", Some(env(Quota))),
            ("VpcLimitExceeded", 400, "environment", Some(env(Quota))),
            ("LimitExceeded", 400, "environment", Some(env(Quota))),
            (
                "TargetGroupAssociationLimit",
                400,
                "environment",
                Some(env(Quota)),
            ),
            // permission
            (
                "UnauthorizedOperation",
                403,
                "environment",
                Some(env(PermissionDenied)),
            ),
            (
                "AccessDenied",
                403,
                "environment",
                Some(env(PermissionDenied)),
            ),
            (
                "AuthFailure",
                401,
                "environment",
                Some(env(PermissionDenied)),
            ),
            (
                "OptInRequired",
                401,
                "environment",
                Some(env(PermissionDenied)),
            ),
            (
                "SomethingForbidden",
                403,
                "environment",
                Some(env(PermissionDenied)),
            ),
            // missing dependencies
            (
                "InvalidGroup.NotFound",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "InvalidSecurityGroup",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "InvalidSubnetID.NotFound",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "InvalidSubnet",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "InvalidVpcID.NotFound",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "InvalidAllocationID.NotFound",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            (
                "AllocationIdNotFound",
                400,
                "environment",
                Some(env(MissingDependency)),
            ),
            // the cloud's raw answer, before the owner is checked: usually our own lost
            // create, adopted on the next pass; another owner's becomes AwsError::NameTaken
            (
                "DuplicateLoadBalancerName",
                400,
                "environment",
                Some(env(NameTaken)),
            ),
            (
                "DuplicateAccessPointName",
                400,
                "environment",
                Some(env(NameTaken)),
            ),
            (
                "DuplicateTargetGroupName",
                400,
                "environment",
                Some(env(NameTaken)),
            ),
            (
                "InvalidGroup.Duplicate",
                400,
                "environment",
                Some(env(NameTaken)),
            ),
            // what only the Service's author can fix
            ("CertificateNotFound", 400, "user", None),
            ("CertificateNotFoundException", 400, "user", None),
            ("UnsupportedCertificate", 400, "user", None),
            ("ValidationError", 400, "user", None),
            ("InvalidConfigurationRequest", 400, "user", None),
            ("InvalidParameterValue", 400, "user", None),
            ("InvalidParameterCombination", 400, "user", None),
            ("UnsupportedProtocol", 400, "user", None),
            ("PolicyTypeNotFound", 400, "user", None),
            ("SSLPolicyNotFound", 400, "user", None),
            ("InvalidScheme", 400, "user", None),
            ("ALPNPolicyNotFound", 400, "user", None),
            ("TooManyTags", 400, "user", None),
            // unknown: retried with backoff, reported verbatim
            ("SomethingNew", 400, "internal", None),
        ];
        for &(code, status, class, cause) in cases {
            let status = (status != 0).then_some(status);
            let mut error = api(code, 400);
            if let AwsError::Api { status: s, .. } = &mut error {
                *s = status;
            }
            let converted = ProviderError::from(error);
            assert_eq!(converted.class(), class, "{code} ({status:?}): {converted}");
            let got_cause = match &converted {
                ProviderError::Environment { cause, .. } => Some(cause.as_str()),
                _ => None,
            };
            assert_eq!(got_cause, cause, "{code}");
            assert!(
                converted.to_string().contains(code),
                "{converted} names {code}"
            );
        }
    }

    /// Throttling codes become `Throttled` (the Service's condition says `CloudThrottled`);
    /// other passing failures stay `Retryable`.
    #[test]
    fn throttling_codes_become_throttled_errors() {
        let cases = [
            ("Throttling", 400, true),
            ("RequestLimitExceeded", 503, true),
            ("DependencyThrottle", 400, true),
            ("TooManyRequestsException", 429, true),
            ("InternalError", 500, false),
            ("ServiceUnavailable", 503, false),
        ];
        for (code, status, throttled) in cases {
            let converted = ProviderError::from(api(code, status));
            assert_eq!(
                matches!(converted, ProviderError::Throttled { .. }),
                throttled,
                "{code}: {converted:?}"
            );
            assert!(converted.is_transient(), "{code}");
        }
    }

    #[test]
    fn in_place_retries_are_only_for_passing_failures() {
        let cases = [
            ("Throttling", 400, true),
            ("InternalError", 500, true),
            ("DependencyViolation", 400, false),
            ("LoadBalancerNotFound", 400, false),
            ("TooManyLoadBalancers", 400, false),
            ("InvalidGroup.NotFound", 400, false),
        ];
        for (code, status, transient) in cases {
            assert_eq!(
                api(code, status).classification().retries_in_place(),
                transient,
                "{code}"
            );
        }
    }

    /// The in-place retry on `AwsError` and the converted `ProviderError` follow one rule, for
    /// every code of every table and for the provider's own errors.
    #[test]
    fn in_place_retry_and_conversion_agree() {
        let tables: [&[&str]; 10] = [
            THROTTLING_CODES,
            SERVER_ERROR_CODES,
            CONFLICT_CODES,
            STALE_CODES,
            USER_ERROR_CODES,
            QUOTA_CODES,
            PERMISSION_CODES,
            MISSING_DEPENDENCY_CODES,
            NAME_TAKEN_CODES,
            &[
                "Timeout",
                "Dispatch",
                "Response",
                "SomethingNew",
                "TooManyX",
            ],
        ];
        let mut errors: Vec<AwsError> = Vec::new();
        for code in tables.into_iter().flatten() {
            for status in [None, Some(400), Some(403), Some(503)] {
                let mut error = api(code, 400);
                if let AwsError::Api { status: s, .. } = &mut error {
                    *s = status;
                }
                errors.push(error);
            }
        }
        errors.extend([
            AwsError::Invalid("bad port".into()),
            AwsError::Environment {
                cause: EnvironmentCause::MissingDependency,
                message: "no subnet".into(),
            },
            AwsError::Unexpected("no ARN".into()),
            AwsError::Setup("no region".into()),
            AwsError::NameTaken {
                operation: "CreateLoadBalancer",
                resource: "load balancer",
                name: "a".into(),
                owner: "b".into(),
            },
        ]);
        for error in errors {
            let label = error.to_string();
            let class = error.classification();
            let converted = ProviderError::from(error);
            assert_eq!(converted.retry(), class.retry(), "{label}: {converted}");
        }
    }

    #[test]
    fn non_api_errors_are_classed() {
        let cases = [
            (AwsError::Invalid("bad port".into()), "user"),
            (
                AwsError::Environment {
                    cause: EnvironmentCause::MissingDependency,
                    message: "no subnet".into(),
                },
                "environment",
            ),
            (AwsError::Unexpected("no ARN".into()), "internal"),
            (AwsError::Setup("no region".into()), "internal"),
            (
                AwsError::NameTaken {
                    operation: "CreateLoadBalancer",
                    resource: "Classic ELB",
                    name: "a1b2".into(),
                    owner: "cluster other".into(),
                },
                "user",
            ),
        ];
        for (error, class) in cases {
            let text = error.to_string();
            assert_eq!(ProviderError::from(error).class(), class, "{text}");
        }
    }
}

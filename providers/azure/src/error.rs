//! Errors of the Azure provider and how they map onto the controller's error classes.

use kube_lb_provider_core::{EnvironmentCause, ProviderError};

/// Why an Azure operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// The cloud-config file could not be read or is not valid `azure.json` (the message names
    /// the file, and the line and column of a JSON error).
    #[error("cloud config: {0}")]
    ConfigFile(#[from] kube_lb_provider_core::config_file::ConfigFileError),
    /// The cloud config lacks a value or holds an unusable one.
    #[error("cloud config: {0}")]
    ConfigInvalid(String),
    /// No token could be obtained from Entra ID or the instance metadata service.
    #[error("acquiring an access token: {0}")]
    Auth(String),
    /// The HTTP request could not be sent or its body not read.
    #[error("{operation}: transport error")]
    Transport {
        /// ARM operation.
        operation: &'static str,
        /// The SDK's I/O error.
        #[source]
        source: azure_core::Error,
    },
    /// The SDK failed in a way that is neither an HTTP answer nor I/O (e.g. a response body
    /// its generated model could not read).
    #[error("{operation}: Azure SDK error")]
    Sdk {
        /// ARM operation.
        operation: &'static str,
        /// The SDK error.
        #[source]
        source: azure_core::Error,
    },
    /// ARM answered with an error status.
    #[error("{operation}: HTTP {status} {code}: {message}")]
    Arm {
        /// ARM operation.
        operation: &'static str,
        /// HTTP status.
        status: u16,
        /// `error.code`.
        code: String,
        /// `error.message`.
        message: String,
    },
    /// `If-Match` did not match: someone else changed the resource; re-read and retry.
    #[error("{operation}: etag mismatch (412 PreconditionFailed)")]
    PreconditionFailed {
        /// ARM operation.
        operation: &'static str,
    },
    /// A long-running operation ended `Failed` or `Canceled`.
    #[error("{operation}: async operation {status}: {code}: {message}")]
    OperationFailed {
        /// ARM operation.
        operation: &'static str,
        /// `Failed` or `Canceled`.
        status: String,
        /// `error.code`.
        code: String,
        /// `error.message`.
        message: String,
    },
    /// A response body did not have the expected shape.
    #[error("{operation}: unexpected response body")]
    Decode {
        /// ARM operation.
        operation: &'static str,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A polling URL pointed somewhere other than the configured endpoint; it is not followed
    /// so the token is never sent elsewhere.
    #[error("{operation}: refusing to poll {url}: not on the resource manager endpoint")]
    ForeignPollUrl {
        /// ARM operation.
        operation: &'static str,
        /// The URL.
        url: String,
    },
    /// A long-running operation did not finish in time.
    #[error("{operation}: async operation still running after {polls} polls")]
    PollTimeout {
        /// ARM operation.
        operation: &'static str,
        /// Polls made.
        polls: u32,
    },
    /// The Service asks for something Azure cannot build (or that does not exist).
    #[error("{0}")]
    User(String),
    /// Something outside the Service is missing, found by the provider itself rather than
    /// reported by ARM (the cluster's security group, the subnet of an internal frontend).
    #[error("{message}")]
    Environment {
        /// What kind of obstacle it is.
        cause: EnvironmentCause,
        /// What is missing, in words the operator can act on.
        message: String,
    },
    /// The load balancer kept changing under us (412 after every re-read).
    #[error("load balancer state did not converge after {0} rounds")]
    NotConverged(u32),
}

/// ARM error codes for conditions that pass: throttling, server errors, another operation
/// on the same resource, a referenced resource still provisioning.
const RETRYABLE_CODES: &[&str] = &[
    "RetryableError",
    "RetryableErrorDueToAnotherOperation",
    "AnotherOperationInProgress",
    "CanceledAndSupersededDueToAnotherOperation",
    "ReferencedResourceNotProvisioned",
    "OperationPreempted",
    "TooManyRequests",
    "InternalServerError",
    "ServiceUnavailable",
    "GatewayTimeout",
    "Conflict",
];

/// ARM error codes meaning the controller's identity may not make the call (RBAC, a policy
/// assignment, a token problem).
const PERMISSION_CODES: &[&str] = &[
    "AuthorizationFailed",
    "LinkedAuthorizationFailed",
    "AuthenticationFailed",
    "InvalidAuthenticationToken",
    "InvalidAuthenticationTokenTenant",
    "ExpiredAuthenticationToken",
    "RequestDisallowedByPolicy",
    "Forbidden",
];

/// ARM error codes meaning something the load balancer refers to does not exist (yet).
const MISSING_CODES: &[&str] = &[
    "InvalidResourceReference",
    "ResourceNotFound",
    "NotFound",
    "ResourceGroupNotFound",
    "SubnetNotFound",
    "NetworkSecurityGroupNotFound",
    "ParentResourceNotFound",
];

/// ARM error codes meaning an address is held by another resource.
const ADDRESS_IN_USE_CODES: &[&str] = &["PrivateIPAddressIsAllocated", "PublicIPAddressInUse"];

/// ARM error codes meaning a name is held by another owner.
const NAME_TAKEN_CODES: &[&str] = &["DnsRecordInUse", "DnsRecordInUseByAnotherSubscription"];

/// ARM error codes meaning the value the Service asks for cannot be built: only its author can
/// fix it.
const USER_CODES: &[&str] = &[
    "PrivateIPAddressNotInSubnet",
    "PublicIPAndLBSkuDoNotMatch",
    "InvalidDomainNameLabel",
    "LoadBalancingRuleFrontendPortConflict",
];

/// What the controller should do about one ARM error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Throttling, 5xx, conflicts with a running operation: retry.
    Retryable,
    /// Something outside the Service blocks it.
    Environment(EnvironmentCause),
    /// Only the Service's author can fix it.
    User,
    /// Anything else: retried with backoff, reported as is.
    Unknown,
}

/// Classifies an ARM `error.code` and the HTTP status it came with (`None` for a failed
/// long-running operation). Codes first: ARM answers a quota with 400 or 409, a permission
/// problem with 403, and the same 409 for a conflict that passes.
pub fn classify(code: &str, status: Option<u16>) -> Class {
    if RETRYABLE_CODES.contains(&code) {
        return Class::Retryable;
    }
    if code == "SubnetIsFull" {
        return Class::Environment(EnvironmentCause::PoolExhausted);
    }
    if ADDRESS_IN_USE_CODES.contains(&code) {
        return Class::Environment(EnvironmentCause::AddressInUse);
    }
    if NAME_TAKEN_CODES.contains(&code) {
        return Class::Environment(EnvironmentCause::NameTaken);
    }
    // `QuotaExceeded`, `PublicIPCountLimitReached`, `LoadBalancingRuleCountLimitReached`,
    // `SecurityRulesPerNetworkSecurityGroupLimitReached`, …
    if code.contains("Quota") || code.ends_with("LimitReached") || code.ends_with("LimitExceeded") {
        return Class::Environment(EnvironmentCause::Quota);
    }
    if PERMISSION_CODES.contains(&code) {
        return Class::Environment(EnvironmentCause::PermissionDenied);
    }
    if MISSING_CODES.contains(&code) {
        return Class::Environment(EnvironmentCause::MissingDependency);
    }
    if USER_CODES.contains(&code) {
        return Class::User;
    }
    match status {
        Some(408 | 409 | 412 | 429 | 500..=599) => Class::Retryable,
        Some(401 | 403) => Class::Environment(EnvironmentCause::PermissionDenied),
        Some(404) => Class::Environment(EnvironmentCause::MissingDependency),
        _ => Class::Unknown,
    }
}

impl AzureError {
    /// The class of this error (see [`classify`]).
    pub fn class(&self) -> Class {
        match self {
            AzureError::Transport { .. }
            | AzureError::PreconditionFailed { .. }
            | AzureError::PollTimeout { .. }
            | AzureError::NotConverged(_) => Class::Retryable,
            AzureError::Arm { status, code, .. } => classify(code, Some(*status)),
            AzureError::OperationFailed { code, message, .. } => {
                if message
                    .to_ascii_lowercase()
                    .contains("canceledandsupersededduetoanotheroperation")
                {
                    return Class::Retryable;
                }
                match classify(code, None) {
                    // A failed operation with a code this table does not know has no status
                    // to judge by; ARM's own advice is to retry it.
                    Class::Unknown => Class::Retryable,
                    class => class,
                }
            }
            AzureError::User(_) => Class::User,
            AzureError::Environment { cause, .. } => Class::Environment(*cause),
            _ => Class::Unknown,
        }
    }

    /// True when ARM refused the request rate (HTTP 429, `TooManyRequests`): the client
    /// counts these apart and the Service's condition says `CloudThrottled`.
    pub fn is_throttled(&self) -> bool {
        matches!(self, AzureError::Arm { status, code, .. } if *status == 429 || code == "TooManyRequests")
    }

    /// True for ARM answers that are worth retrying unchanged (throttling, 5xx, conflicts with
    /// a running operation, an etag race).
    pub fn is_transient(&self) -> bool {
        self.class() == Class::Retryable
    }
}

/// The single conversion from Azure errors to the controller's classes.
impl From<AzureError> for ProviderError {
    fn from(error: AzureError) -> ProviderError {
        let operation = match &error {
            AzureError::Transport { operation, .. }
            | AzureError::Arm { operation, .. }
            | AzureError::PreconditionFailed { operation }
            | AzureError::OperationFailed { operation, .. }
            | AzureError::Decode { operation, .. }
            | AzureError::Sdk { operation, .. }
            | AzureError::ForeignPollUrl { operation, .. }
            | AzureError::PollTimeout { operation, .. } => *operation,
            _ => "azure",
        };
        match error.class() {
            Class::Retryable if error.is_throttled() => ProviderError::Throttled {
                operation,
                message: error.to_string(),
                source: Some(Box::new(error)),
            },
            Class::Retryable => ProviderError::Retryable {
                operation,
                message: error.to_string(),
                source: Some(Box::new(error)),
            },
            Class::Environment(cause) => {
                ProviderError::environment(operation, cause, error.to_string())
            }
            Class::User => ProviderError::user(error.to_string()),
            Class::Unknown => ProviderError::Internal {
                message: error.to_string(),
                source: Some(Box::new(error)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(status: u16, code: &str) -> AzureError {
        AzureError::Arm {
            operation: "PutLoadBalancer",
            status,
            code: code.into(),
            message: "m".into(),
        }
    }

    fn failed(code: &str) -> AzureError {
        AzureError::OperationFailed {
            operation: "PutLoadBalancer",
            status: "Failed".into(),
            code: code.into(),
            message: "m".into(),
        }
    }

    /// Each ARM error code (synchronous with its status, or from a failed long-running
    /// operation) and its class.
    #[test]
    fn error_codes_map_to_classes() {
        use EnvironmentCause::*;
        let env = |c: EnvironmentCause| Some(c.as_str());
        let cases = [
            // throttling, server errors, conflicts that pass
            (arm(429, "TooManyRequests"), "retryable", None),
            (arm(503, "ServiceUnavailable"), "retryable", None),
            (arm(500, "InternalServerError"), "retryable", None),
            (arm(504, "GatewayTimeout"), "retryable", None),
            (arm(409, "AnotherOperationInProgress"), "retryable", None),
            (arm(409, "SomethingConflicting"), "retryable", None),
            (arm(400, "RetryableError"), "retryable", None),
            (
                arm(400, "ReferencedResourceNotProvisioned"),
                "retryable",
                None,
            ),
            (failed("RetryableError"), "retryable", None),
            (failed("AnotherOperationInProgress"), "retryable", None),
            (failed("InternalServerError"), "retryable", None),
            (failed("SomethingNew"), "retryable", None),
            (
                AzureError::PreconditionFailed { operation: "x" },
                "retryable",
                None,
            ),
            (
                AzureError::PollTimeout {
                    operation: "x",
                    polls: 9,
                },
                "retryable",
                None,
            ),
            (AzureError::NotConverged(3), "retryable", None),
            // quotas
            (arm(409, "QuotaExceeded"), "environment", env(Quota)),
            (
                arm(400, "PublicIPCountLimitReached"),
                "environment",
                env(Quota),
            ),
            (
                arm(400, "LoadBalancerFrontendIPConfigurationCountLimitReached"),
                "environment",
                env(Quota),
            ),
            (
                arm(400, "LoadBalancingRuleCountLimitReached"),
                "environment",
                env(Quota),
            ),
            (
                arm(400, "SecurityRulesPerNetworkSecurityGroupLimitReached"),
                "environment",
                env(Quota),
            ),
            (
                arm(
                    400,
                    "SecurityRuleAddressesOrPortsPerSecurityGroupLimitReached",
                ),
                "environment",
                env(Quota),
            ),
            (failed("QuotaExceeded"), "environment", env(Quota)),
            // permission
            (
                arm(403, "AuthorizationFailed"),
                "environment",
                env(PermissionDenied),
            ),
            (
                arm(403, "LinkedAuthorizationFailed"),
                "environment",
                env(PermissionDenied),
            ),
            (
                arm(401, "InvalidAuthenticationToken"),
                "environment",
                env(PermissionDenied),
            ),
            (
                arm(403, "RequestDisallowedByPolicy"),
                "environment",
                env(PermissionDenied),
            ),
            (
                arm(403, "SomethingForbidden"),
                "environment",
                env(PermissionDenied),
            ),
            // missing dependencies
            (
                arm(400, "InvalidResourceReference"),
                "environment",
                env(MissingDependency),
            ),
            (
                arm(404, "ResourceGroupNotFound"),
                "environment",
                env(MissingDependency),
            ),
            (
                arm(404, "ResourceNotFound"),
                "environment",
                env(MissingDependency),
            ),
            (
                failed("InvalidResourceReference"),
                "environment",
                env(MissingDependency),
            ),
            // pool, addresses and names held by others
            (arm(400, "SubnetIsFull"), "environment", env(PoolExhausted)),
            (
                arm(400, "PrivateIPAddressIsAllocated"),
                "environment",
                env(AddressInUse),
            ),
            (
                arm(400, "PublicIPAddressInUse"),
                "environment",
                env(AddressInUse),
            ),
            (arm(400, "DnsRecordInUse"), "environment", env(NameTaken)),
            // what only the Service's author can fix
            (arm(400, "PrivateIPAddressNotInSubnet"), "user", None),
            (arm(400, "InvalidDomainNameLabel"), "user", None),
            (arm(400, "PublicIPAndLBSkuDoNotMatch"), "user", None),
            (
                arm(400, "LoadBalancingRuleFrontendPortConflict"),
                "user",
                None,
            ),
            (AzureError::User("no such pip".into()), "user", None),
            (
                AzureError::Environment {
                    cause: MissingDependency,
                    message: "subnet s not found".into(),
                },
                "environment",
                env(MissingDependency),
            ),
            // our own mistakes: retried with backoff, reported as is
            (arm(400, "InvalidRequestFormat"), "internal", None),
        ];
        for (error, class, cause) in cases {
            let text = error.to_string();
            let converted = ProviderError::from(error);
            assert_eq!(converted.class(), class, "{text}");
            let got = match &converted {
                ProviderError::Environment { cause, .. } => Some(cause.as_str()),
                _ => None,
            };
            assert_eq!(got, cause, "{text}");
        }
    }

    #[test]
    fn only_passing_failures_are_retried_in_place() {
        let cases = [
            (arm(429, "TooManyRequests"), true),
            (arm(409, "AnotherOperationInProgress"), true),
            (arm(409, "QuotaExceeded"), false),
            (arm(403, "AuthorizationFailed"), false),
            (arm(400, "InvalidResourceReference"), false),
        ];
        for (error, transient) in cases {
            assert_eq!(error.is_transient(), transient, "{error}");
        }
    }
}

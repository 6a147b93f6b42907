//! Errors of the AWS provider, classified for the controller (retry vs user error).

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use kube_lb_provider_core::ProviderError;

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
];

/// Codes that mean "the Service asks for something AWS will not build": waiting and retrying
/// does not help until the Service (or the account) changes.
const USER_ERROR_CODES: &[&str] = &[
    "CertificateNotFound",
    "CertificateNotFoundException",
    "ValidationError",
    "InvalidConfigurationRequest",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "InvalidSubnet",
    "InvalidSecurityGroup",
    "InvalidSubnetID.NotFound",
    "InvalidGroup.NotFound",
    "InvalidAllocationID.NotFound",
    "TooManyLoadBalancers",
    "TooManyTargetGroups",
    "TooManyListeners",
    "TooManyTargets",
    "TooManyTags",
    "TooManyAccessPoints",
    "TooManyPolicies",
    "RulesPerSecurityGroupLimitExceeded",
    "SecurityGroupLimitExceeded",
    "UnsupportedProtocol",
    "PolicyTypeNotFound",
    "InvalidSchemeException",
    "AllocationIdNotFound",
];

/// Codes of conditions that clear up on their own (dependencies still being torn down).
const TRANSIENT_CONFLICT_CODES: &[&str] = &[
    "DependencyViolation",
    "ResourceInUse",
    "OperationNotPermitted",
];

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
    /// AWS answered with something the provider cannot use (a missing field, an owner clash).
    #[error("unexpected AWS state: {0}")]
    Unexpected(String),
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

    /// True for throttling, 5xx and transport failures: the same call is retried in place.
    pub fn is_transient(&self) -> bool {
        match self {
            AwsError::Api { code, status, .. } => {
                THROTTLING_CODES.contains(&code.as_str())
                    || matches!(code.as_str(), "Timeout" | "Dispatch" | "Response")
                    || status.is_some_and(|s| s >= 500)
            }
            _ => false,
        }
    }

    /// True for throttling codes only.
    pub fn is_throttling(&self) -> bool {
        self.has_code(THROTTLING_CODES)
    }
}

impl From<AwsError> for ProviderError {
    fn from(error: AwsError) -> Self {
        match &error {
            AwsError::Invalid(message) => ProviderError::user(message.clone()),
            AwsError::Api {
                operation,
                code,
                message,
                ..
            } => {
                if USER_ERROR_CODES.contains(&code.as_str()) {
                    ProviderError::user(format!("{operation}: {code}: {message}"))
                } else if error.is_transient() || TRANSIENT_CONFLICT_CODES.contains(&code.as_str())
                {
                    ProviderError::Retryable {
                        operation,
                        message: format!("{code}: {message}"),
                        source: Some(Box::new(error)),
                    }
                } else {
                    ProviderError::Internal {
                        message: error.to_string(),
                        source: Some(Box::new(error)),
                    }
                }
            }
            _ => ProviderError::Internal {
                message: error.to_string(),
                source: Some(Box::new(error)),
            },
        }
    }
}

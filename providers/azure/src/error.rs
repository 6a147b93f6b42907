//! Errors of the Azure provider and how they map onto the controller's error classes.

use kube_lb_provider_core::ProviderError;

/// Why an Azure operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// The cloud-config file could not be read.
    #[error("reading cloud config {path}")]
    ConfigRead {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cloud-config file is not valid `azure.json`.
    #[error("parsing cloud config {path}")]
    ConfigParse {
        /// The file.
        path: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
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
    /// The load balancer kept changing under us (412 after every re-read).
    #[error("load balancer state did not converge after {0} rounds")]
    NotConverged(u32),
}

/// ARM error codes that mean the user must change the Service (or its cloud resources).
const USER_CODES: &[&str] = &[
    "InvalidResourceReference",
    "PublicIPCountLimitReached",
    "LoadBalancerFrontendIPConfigurationCountLimitReached",
    "LoadBalancingRuleCountLimitReached",
    "PrivateIPAddressIsAllocated",
    "PrivateIPAddressNotInSubnet",
    "PublicIPAddressInUse",
    "PublicIPAndLBSkuDoNotMatch",
    "DnsRecordInUse",
    "InvalidDomainNameLabel",
    "SecurityRuleAddressesOrPortsPerSecurityGroupLimitReached",
    "SecurityRulesPerNetworkSecurityGroupLimitReached",
    "SubnetIsFull",
    "LoadBalancingRuleFrontendPortConflict",
];

impl AzureError {
    /// True for ARM answers that are worth retrying unchanged (throttling, 5xx, conflicts with
    /// a running operation, an etag race).
    pub fn is_transient(&self) -> bool {
        match self {
            AzureError::Transport { .. }
            | AzureError::PreconditionFailed { .. }
            | AzureError::PollTimeout { .. }
            | AzureError::NotConverged(_) => true,
            AzureError::Arm { status, code, .. } => {
                matches!(status, 408 | 409 | 429 | 500..=599)
                    || code == "ReferencedResourceNotProvisioned"
            }
            AzureError::OperationFailed { code, message, .. } => {
                !USER_CODES.contains(&code.as_str())
                    || message
                        .to_ascii_lowercase()
                        .contains("canceledandsupersededduetoanotheroperation")
            }
            _ => false,
        }
    }
}

impl From<AzureError> for ProviderError {
    fn from(error: AzureError) -> ProviderError {
        let user_code = match &error {
            AzureError::Arm { code, status, .. } => {
                *status == 400 && USER_CODES.contains(&code.as_str())
            }
            AzureError::OperationFailed { code, .. } => USER_CODES.contains(&code.as_str()),
            AzureError::User(_) => true,
            _ => false,
        };
        if user_code {
            return ProviderError::user(error.to_string());
        }
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
        if error.is_transient() {
            ProviderError::Retryable {
                operation,
                message: error.to_string(),
                source: Some(Box::new(error)),
            }
        } else {
            ProviderError::Internal {
                message: error.to_string(),
                source: Some(Box::new(error)),
            }
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

    #[test]
    fn classes() {
        let cases = [
            (arm(429, "TooManyRequests"), "retryable"),
            (arm(503, "ServiceUnavailable"), "retryable"),
            (arm(400, "PublicIPCountLimitReached"), "user"),
            (arm(400, "InvalidRequestFormat"), "internal"),
            (
                AzureError::PreconditionFailed { operation: "x" },
                "retryable",
            ),
            (AzureError::User("no such pip".into()), "user"),
        ];
        for (error, class) in cases {
            let text = error.to_string();
            assert_eq!(ProviderError::from(error).class(), class, "{text}");
        }
    }
}

//! SDK clients sharing one rate-limited, counted, retrying call path ([`Calls`] over
//! `providers/core`'s `CloudApi`).

use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls;
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;

use crate::calls::Calls;
use crate::error::AwsError;

/// The HTTPS client: rustls with the `ring` provider (the same crypto kube already pulls in,
/// so the build does not compile aws-lc).
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

/// Loads the standard configuration: region and credentials from the usual chain, endpoints
/// from `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>` (LocalStack, moto).
pub async fn load_sdk_config() -> Result<SdkConfig, AwsError> {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .load()
        .await;
    if config.region().is_none() {
        return Err(AwsError::Setup(
            "no AWS region: set AWS_REGION (or a profile region)".to_string(),
        ));
    }
    Ok(config)
}

/// The three service clients.
#[derive(Debug, Clone)]
pub struct Clients {
    /// EC2.
    pub ec2: aws_sdk_ec2::Client,
    /// Classic ELB.
    pub elb: aws_sdk_elasticloadbalancing::Client,
    /// ELBv2.
    pub elbv2: aws_sdk_elasticloadbalancingv2::Client,
    /// Rate limits, retries, counters.
    pub calls: Arc<Calls>,
}

/// Longest wait for a TCP (and TLS) connection, within the attempt timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Bounds every attempt by `attempt` (`RequestTimeoutMillis`, 30 s by default): a request AWS
/// (or a proxy) accepted but never answers fails as a `Timeout`, which is transient, instead
/// of holding the Service's worker forever. The attempt timeout covers the whole attempt
/// (credentials, connect, answer, body); connecting alone gets at most [`CONNECT_TIMEOUT`].
fn timeouts(attempt: Duration) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT.min(attempt))
        .operation_attempt_timeout(attempt)
        .build()
}

impl Clients {
    /// Builds clients with the SDK's own retries off: [`Calls::run`] retries (through the shared
    /// `CloudApi`), so every attempt is rate-limited and counted once. Each attempt may take at
    /// most `attempt_timeout` (see [`timeouts`]).
    pub fn new(sdk: &SdkConfig, calls: Arc<Calls>, attempt_timeout: Duration) -> Self {
        let ec2 = aws_sdk_ec2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts(attempt_timeout))
            .build();
        let elb = aws_sdk_elasticloadbalancing::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts(attempt_timeout))
            .build();
        let elbv2 = aws_sdk_elasticloadbalancingv2::config::Builder::from(sdk)
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts(attempt_timeout))
            .build();
        Clients {
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            elb: aws_sdk_elasticloadbalancing::Client::from_conf(elb),
            elbv2: aws_sdk_elasticloadbalancingv2::Client::from_conf(elbv2),
            calls,
        }
    }
}

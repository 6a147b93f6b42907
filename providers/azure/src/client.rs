//! [`NetworkClient`]: the handful of ARM calls the provider makes, as a small trait so the
//! transport can be swapped (e.g. for the Azure SDK once an official Network crate ships), and
//! [`ArmClient`], its implementation over `reqwest`.
//!
//! Every write carries `If-Match` with the etag of the object it was computed from (or
//! `If-None-Match: *` when creating), so a concurrent writer makes it fail with 412 instead of
//! being overwritten. Long-running operations are polled through `Azure-AsyncOperation` (or
//! `Location`), honouring `Retry-After` up to a cap; DELETE is awaited the same way.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_provider_core::{CallKind, CloudApi, ProviderError};
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::arm::{
    API_VERSION, ErrorBody, Ids, List, LoadBalancer, OperationStatus, PublicIp, SecurityGroup,
    Subnet,
};
use crate::auth::TokenSource;
use crate::config::AzureConfig;
use crate::error::AzureError;
use crate::provider::ProviderOptions;

/// The ARM calls the provider needs.
#[async_trait]
pub trait NetworkClient: Send + Sync + fmt::Debug {
    /// `GET loadBalancers/{name}`; `None` when it does not exist.
    async fn get_load_balancer(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<LoadBalancer>, AzureError>;
    /// `PUT loadBalancers/{name}` with `If-Match: lb.etag` (or `If-None-Match: *` without an
    /// etag); waits for the operation and returns the stored object.
    async fn put_load_balancer(
        &self,
        rg: &str,
        lb: &LoadBalancer,
    ) -> Result<LoadBalancer, AzureError>;
    /// `DELETE loadBalancers/{name}` (with `If-Match` when `etag` is given), awaited.
    async fn delete_load_balancer(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError>;
    /// `GET publicIPAddresses` in `rg`.
    async fn list_public_ips(&self, rg: &str) -> Result<Vec<PublicIp>, AzureError>;
    /// `GET publicIPAddresses/{name}`.
    async fn get_public_ip(&self, rg: &str, name: &str) -> Result<Option<PublicIp>, AzureError>;
    /// `PUT publicIPAddresses/{name}` (etag rules as for load balancers), awaited.
    async fn put_public_ip(&self, rg: &str, pip: &PublicIp) -> Result<PublicIp, AzureError>;
    /// `DELETE publicIPAddresses/{name}`, awaited.
    async fn delete_public_ip(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError>;
    /// `GET networkSecurityGroups/{name}`.
    async fn get_security_group(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<SecurityGroup>, AzureError>;
    /// `PUT networkSecurityGroups/{name}` with `If-Match`, awaited.
    async fn put_security_group(
        &self,
        rg: &str,
        nsg: &SecurityGroup,
    ) -> Result<SecurityGroup, AzureError>;
    /// `GET virtualNetworks/{vnet}/subnets/{subnet}`.
    async fn get_subnet(
        &self,
        rg: &str,
        vnet: &str,
        subnet: &str,
    ) -> Result<Option<Subnet>, AzureError>;
}

/// The ARM authorization actions the provider performs; the custom role for the controller
/// needs exactly these (deploy/ renders them into a role definition).
pub const ARM_OPERATIONS: &[&str] = &[
    "Microsoft.Network/loadBalancers/read",
    "Microsoft.Network/loadBalancers/write",
    "Microsoft.Network/loadBalancers/delete",
    "Microsoft.Network/publicIPAddresses/read",
    "Microsoft.Network/publicIPAddresses/write",
    "Microsoft.Network/publicIPAddresses/delete",
    "Microsoft.Network/publicIPAddresses/join/action",
    "Microsoft.Network/networkSecurityGroups/read",
    "Microsoft.Network/networkSecurityGroups/write",
    "Microsoft.Network/virtualNetworks/read",
    "Microsoft.Network/virtualNetworks/subnets/read",
    "Microsoft.Network/virtualNetworks/subnets/join/action",
    "Microsoft.Network/locations/operations/read",
    "Microsoft.Network/locations/operationResults/read",
];

/// How long-running operations are polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSettings {
    /// Wait between polls when the server sends no `Retry-After`.
    pub default_interval: Duration,
    /// Upper bound on any server-requested wait (`Retry-After` on polls and on 429s).
    pub max_interval: Duration,
    /// Polls before giving up (the controller retries the whole reconcile later).
    pub max_polls: u32,
}

impl Default for PollSettings {
    /// 2 s without `Retry-After` (not azure_core's 30 s), at most 60 s, 300 polls.
    fn default() -> Self {
        PollSettings {
            default_interval: Duration::from_secs(2),
            max_interval: Duration::from_secs(60),
            max_polls: 300,
        }
    }
}

/// One HTTP exchange's result.
struct Raw {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// [`NetworkClient`] over `reqwest`, with rate limiting, retries and call counting from
/// [`CloudApi`].
pub struct ArmClient {
    http: reqwest::Client,
    base: String,
    ids: Ids,
    tokens: TokenSource,
    api: CloudApi,
    poll: PollSettings,
}

impl fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmClient")
            .field("base", &self.base)
            .field("subscription", &self.ids.subscription)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let millis = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
    };
    millis("retry-after-ms")
        .or_else(|| millis("x-ms-retry-after-ms"))
        .or_else(|| {
            headers
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs)
        })
}

impl ArmClient {
    /// A client for the endpoint, subscription and credentials in `config`.
    pub fn from_config(
        config: &AzureConfig,
        options: &ProviderOptions,
    ) -> Result<ArmClient, AzureError> {
        config.validate()?;
        let http = reqwest::Client::builder()
            .timeout(options.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|source| AzureError::Transport {
                operation: "BuildClient",
                source,
            })?;
        let tokens = TokenSource::from_config(config, http.clone());
        let api = CloudApi::new(
            "azure",
            options.counter.clone(),
            options.limits.clone(),
            options.retry,
        );
        Ok(ArmClient::new(
            http,
            &config.resource_manager(),
            &config.subscription_id,
            tokens,
            api,
            options.poll,
        ))
    }

    /// A client for `base` (the resource manager URL) and `subscription`.
    pub fn new(
        http: reqwest::Client,
        base: &str,
        subscription: &str,
        tokens: TokenSource,
        api: CloudApi,
        poll: PollSettings,
    ) -> ArmClient {
        ArmClient {
            http,
            base: base.trim_end_matches('/').to_string(),
            ids: Ids {
                subscription: subscription.to_string(),
            },
            tokens,
            api,
            poll,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}?api-version={API_VERSION}", self.base)
    }

    fn on_endpoint(&self, url: &str) -> bool {
        url.starts_with(&format!("{}/", self.base))
    }

    /// One request through the rate limiter, counted, retried on throttling and 5xx (after the
    /// server's `Retry-After`, capped). 412 and other client errors come back unretried.
    async fn send(
        &self,
        operation: &'static str,
        kind: CallKind,
        method: Method,
        url: &str,
        body: Option<&serde_json::Value>,
        preconditions: &[(&'static str, String)],
    ) -> Result<Raw, AzureError> {
        let family = match kind {
            CallKind::Read => "arm-read",
            CallKind::Mutate => "arm-write",
        };
        let result = self
            .api
            .call(family, operation, kind, || {
                let method = method.clone();
                async move {
                    let outcome = self
                        .attempt(operation, method, url, body, preconditions)
                        .await;
                    match outcome {
                        Err(error)
                            if error.is_transient()
                                && !matches!(error, AzureError::PreconditionFailed { .. }) =>
                        {
                            Err(ProviderError::Retryable {
                                operation,
                                message: error.to_string(),
                                source: Some(Box::new(error)),
                            })
                        }
                        other => Ok(other),
                    }
                }
            })
            .await;
        match result {
            Ok(inner) => inner,
            Err(ProviderError::Retryable {
                source: Some(source),
                message,
                ..
            }) => match source.downcast::<AzureError>() {
                Ok(error) => Err(*error),
                // Only this client builds these errors, so the source is always an AzureError;
                // keep the text (as a transient failure) should that ever change.
                Err(_) => Err(AzureError::Arm {
                    operation,
                    status: 503,
                    code: "RetriesExhausted".into(),
                    message,
                }),
            },
            Err(other) => Err(AzureError::Arm {
                operation,
                status: 0,
                code: other.class().to_string(),
                message: other.to_string(),
            }),
        }
    }

    async fn attempt(
        &self,
        operation: &'static str,
        method: Method,
        url: &str,
        body: Option<&serde_json::Value>,
        preconditions: &[(&'static str, String)],
    ) -> Result<Raw, AzureError> {
        let token = self.tokens.token().await?;
        let mut request = self.http.request(method, url).bearer_auth(token);
        for (name, value) in preconditions {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|source| AzureError::Transport { operation, source })?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|source| AzureError::Transport { operation, source })?
            .to_vec();
        if status.is_success() || status == StatusCode::NOT_FOUND {
            return Ok(Raw {
                status,
                headers,
                body,
            });
        }
        if status == StatusCode::PRECONDITION_FAILED {
            return Err(AzureError::PreconditionFailed { operation });
        }
        let parsed: ErrorBody = serde_json::from_slice(&body).unwrap_or_default();
        if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            // Honour the server's back-off before the retry policy adds its own jittered delay.
            if let Some(wait) = retry_after(&headers) {
                let wait = wait.min(self.poll.max_interval);
                tracing::debug!(operation, ?wait, %status, "ARM asked to retry later");
                tokio::time::sleep(wait).await;
            }
        }
        Err(AzureError::Arm {
            operation,
            status: status.as_u16(),
            code: parsed.error.code,
            message: parsed.error.message,
        })
    }

    async fn get<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
    ) -> Result<Option<T>, AzureError> {
        let raw = self
            .send(
                operation,
                CallKind::Read,
                Method::GET,
                &self.url(path),
                None,
                &[],
            )
            .await?;
        if raw.status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        serde_json::from_slice(&raw.body)
            .map(Some)
            .map_err(|source| AzureError::Decode { operation, source })
    }

    async fn list<T: DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
    ) -> Result<Vec<T>, AzureError> {
        let mut items = Vec::new();
        let mut next = Some(self.url(path));
        while let Some(url) = next.take() {
            if !self.on_endpoint(&url) {
                return Err(AzureError::ForeignPollUrl { operation, url });
            }
            let raw = self
                .send(operation, CallKind::Read, Method::GET, &url, None, &[])
                .await?;
            if raw.status == StatusCode::NOT_FOUND {
                return Ok(items);
            }
            let page: List<T> = serde_json::from_slice(&raw.body)
                .map_err(|source| AzureError::Decode { operation, source })?;
            items.extend(page.value);
            next = page.next_link;
        }
        Ok(items)
    }

    fn preconditions(etag: Option<&str>) -> Vec<(&'static str, String)> {
        match etag {
            Some(etag) => vec![("if-match", etag.to_string())],
            None => vec![("if-none-match", "*".to_string())],
        }
    }

    async fn put<T: Serialize + DeserializeOwned>(
        &self,
        operation: &'static str,
        path: &str,
        object: &T,
        etag: Option<&str>,
    ) -> Result<T, AzureError> {
        let body = serde_json::to_value(object)
            .map_err(|source| AzureError::Decode { operation, source })?;
        let raw = self
            .send(
                operation,
                CallKind::Mutate,
                Method::PUT,
                &self.url(path),
                Some(&body),
                &Self::preconditions(etag),
            )
            .await?;
        if raw.status == StatusCode::NOT_FOUND {
            return Err(AzureError::Arm {
                operation,
                status: 404,
                code: "NotFound".into(),
                message: format!("{path} vanished during PUT"),
            });
        }
        self.wait(operation, &raw).await?;
        match self.get::<T>(operation, path).await? {
            Some(stored) => Ok(stored),
            None => Err(AzureError::Arm {
                operation,
                status: 404,
                code: "NotFound".into(),
                message: format!("{path} not found after PUT"),
            }),
        }
    }

    async fn delete(
        &self,
        operation: &'static str,
        path: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        let preconditions: Vec<(&'static str, String)> = etag
            .map(|e| ("if-match", e.to_string()))
            .into_iter()
            .collect();
        let raw = self
            .send(
                operation,
                CallKind::Mutate,
                Method::DELETE,
                &self.url(path),
                None,
                &preconditions,
            )
            .await?;
        if raw.status == StatusCode::NOT_FOUND {
            return Ok(());
        }
        self.wait(operation, &raw).await
    }

    /// Polls the operation a write started, if it started one.
    async fn wait(&self, operation: &'static str, started: &Raw) -> Result<(), AzureError> {
        let header = |name: &str| {
            started
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (url, async_operation) = match (header("azure-asyncoperation"), header("location")) {
            (Some(url), _) => (url, true),
            (None, Some(url)) if started.status == StatusCode::ACCEPTED => (url, false),
            _ => return Ok(()),
        };
        if !self.on_endpoint(&url) {
            return Err(AzureError::ForeignPollUrl { operation, url });
        }
        let mut delay = self.delay(&started.headers);
        for _ in 0..self.poll.max_polls {
            tokio::time::sleep(delay).await;
            let raw = self
                .send(operation, CallKind::Read, Method::GET, &url, None, &[])
                .await?;
            delay = self.delay(&raw.headers);
            if async_operation {
                let status: OperationStatus = serde_json::from_slice(&raw.body)
                    .map_err(|source| AzureError::Decode { operation, source })?;
                match status.status.as_str() {
                    "Succeeded" => return Ok(()),
                    "Failed" | "Canceled" => {
                        let error = status.error.unwrap_or_default();
                        return Err(AzureError::OperationFailed {
                            operation,
                            status: status.status,
                            code: error.code,
                            message: error.message,
                        });
                    }
                    _ => {}
                }
            } else if raw.status != StatusCode::ACCEPTED {
                return Ok(());
            }
        }
        Err(AzureError::PollTimeout {
            operation,
            polls: self.poll.max_polls,
        })
    }

    fn delay(&self, headers: &HeaderMap) -> Duration {
        retry_after(headers)
            .unwrap_or(self.poll.default_interval)
            .min(self.poll.max_interval)
    }

    fn path(&self, rg: &str, collection: &str, name: &str) -> String {
        self.ids.resource(rg, collection, name)
    }
}

#[async_trait]
impl NetworkClient for ArmClient {
    async fn get_load_balancer(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<LoadBalancer>, AzureError> {
        self.get("GetLoadBalancer", &self.path(rg, "loadBalancers", name))
            .await
    }

    async fn put_load_balancer(
        &self,
        rg: &str,
        lb: &LoadBalancer,
    ) -> Result<LoadBalancer, AzureError> {
        self.put(
            "PutLoadBalancer",
            &self.path(rg, "loadBalancers", &lb.name),
            lb,
            lb.etag.as_deref(),
        )
        .await
    }

    async fn delete_load_balancer(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        self.delete(
            "DeleteLoadBalancer",
            &self.path(rg, "loadBalancers", name),
            etag,
        )
        .await
    }

    async fn list_public_ips(&self, rg: &str) -> Result<Vec<PublicIp>, AzureError> {
        let path = format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/publicIPAddresses",
            self.ids.subscription
        );
        self.list("ListPublicIPAddresses", &path).await
    }

    async fn get_public_ip(&self, rg: &str, name: &str) -> Result<Option<PublicIp>, AzureError> {
        self.get(
            "GetPublicIPAddress",
            &self.path(rg, "publicIPAddresses", name),
        )
        .await
    }

    async fn put_public_ip(&self, rg: &str, pip: &PublicIp) -> Result<PublicIp, AzureError> {
        self.put(
            "PutPublicIPAddress",
            &self.path(rg, "publicIPAddresses", &pip.name),
            pip,
            pip.etag.as_deref(),
        )
        .await
    }

    async fn delete_public_ip(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        self.delete(
            "DeletePublicIPAddress",
            &self.path(rg, "publicIPAddresses", name),
            etag,
        )
        .await
    }

    async fn get_security_group(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<SecurityGroup>, AzureError> {
        self.get(
            "GetNetworkSecurityGroup",
            &self.path(rg, "networkSecurityGroups", name),
        )
        .await
    }

    async fn put_security_group(
        &self,
        rg: &str,
        nsg: &SecurityGroup,
    ) -> Result<SecurityGroup, AzureError> {
        self.put(
            "PutNetworkSecurityGroup",
            &self.path(rg, "networkSecurityGroups", &nsg.name),
            nsg,
            nsg.etag.as_deref(),
        )
        .await
    }

    async fn get_subnet(
        &self,
        rg: &str,
        vnet: &str,
        subnet: &str,
    ) -> Result<Option<Subnet>, AzureError> {
        let path = format!(
            "{}/subnets/{subnet}",
            self.path(rg, "virtualNetworks", vnet)
        );
        self.get("GetSubnet", &path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}

//! [`NetworkClient`]: the handful of ARM calls the provider makes, as a small trait (the seam
//! the planner and provider are written against), and [`ArmClient`], its implementation on
//! the `azure_mgmt_network` 0.21 SDK client over `azure_core` 0.21.
//!
//! The SDK is the design's choice. It is frozen upstream (the legacy azure-sdk-for-rust), which
//! is why nothing outside this module and `convert.rs` sees its types: swapping it for
//! another transport means implementing [`NetworkClient`] again. The SDK gives typed builders
//! and models; kube-lb adds what it lacks:
//!
//! * optimistic concurrency: every write carries `If-Match` with the etag of the object it was
//!   computed from (or `If-None-Match: *` when creating), set by a pipeline policy
//!   (`pipeline.rs`), so a concurrent writer makes it fail with 412, which surfaces as
//!   [`AzureError::PreconditionFailed`] and makes the provider re-read and re-plan;
//! * long-running operations: PUT and DELETE are issued with `.send()` and their
//!   `Azure-AsyncOperation` (or `Location`) URL is polled here (`lro.rs`), honouring
//!   `Retry-After` with a short default and a ceiling. The SDK's own PUT poller sleeps 30 s
//!   when `Retry-After` is absent, drops the failure's code and message, and DELETE has no
//!   poller at all;
//! * one retry layer: azure_core's retry policy is switched off and every attempt goes through
//!   [`CloudApi`] (client-side rate limit per family, backoff, call counting), as for the other
//!   clouds. azure_core's policy would retry invisibly to the counters and the rate limiter and
//!   would wait as long as any `Retry-After` says; here the server's `Retry-After` is honoured
//!   up to [`PollSettings::max_interval`];
//! * fields the SDK does not know: load balancers, public IPs and security groups are read as
//!   raw JSON into kube-lb's model (which keeps unknown fields in `extra`) and PUT back as raw
//!   JSON through the same pipeline, so a property ARM added after the 2024-03 models
//!   survives kube-lb's read-modify-write;
//! * safety of the bearer token: azure_core 0.21 logs requests with the `Authorization` value
//!   at debug level, so the pipeline carries the token beside the request and the transport
//!   only sends to the configured endpoint (`pipeline.rs`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use azure_core::auth::TokenCredential;
use azure_core::error::ErrorKind;
use azure_core::headers::{AUTHORIZATION, CONTENT_TYPE, Headers};
use azure_core::{
    ClientOptions, Context, Method, Pipeline, Request, RetryOptions, TransportOptions, Url,
};
use azure_mgmt_network::package_2024_03::models;
use bytes::Bytes;
use kube_lb_provider_core::{CallKind, CloudApi, PageTokens, ProviderError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use crate::arm::{API_VERSION, LoadBalancer, PublicIp, SecurityGroup, Subnet};
use crate::auth::TokenSource;
use crate::config::AzureConfig;
use crate::convert::convert;
use crate::error::AzureError;
use crate::pipeline::{ForeignUrl, Precondition, Preconditions, Transport, WithholdToken, in_call};
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

/// What a PUT or DELETE answered before its operation finished.
#[derive(Debug)]
pub(crate) struct Started {
    /// HTTP status (`200`, `201`, `202`, `204`).
    pub(crate) status: u16,
    /// Response headers (`Azure-AsyncOperation`, `Location`, `Retry-After`).
    pub(crate) headers: Headers,
}

/// [`NetworkClient`] on the `azure_mgmt_network` SDK client, with rate limiting, retries and
/// call counting from [`CloudApi`].
pub struct ArmClient {
    pub(crate) sdk: azure_mgmt_network::package_2024_03::Client,
    /// The same policies and transport as the SDK client's, for operation polling.
    pub(crate) polls: Pipeline,
    pub(crate) credential: Arc<dyn TokenCredential>,
    pub(crate) scopes: Vec<String>,
    endpoint: Url,
    subscription: String,
    pub(crate) api: CloudApi,
    pub(crate) poll: PollSettings,
}

impl fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmClient")
            .field("endpoint", &self.endpoint.as_str())
            .field("subscription", &self.subscription)
            .field("poll", &self.poll)
            .finish_non_exhaustive()
    }
}

/// What an ARM 404 answer means to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnNotFound {
    /// The resource is not there: the call returns `Ok(None)` (reads, and deletes of what is
    /// already gone).
    Absent,
    /// The call failed, with ARM's code and message (a PUT whose resource group or parent
    /// does not exist).
    Failure,
}

/// The HTTP status of an SDK error that is an ARM answer.
pub(crate) fn status_of(error: &azure_core::Error) -> Option<u16> {
    match error.kind() {
        ErrorKind::HttpResponse { status, .. } => Some(u16::from(*status)),
        _ => None,
    }
}

/// The first error of type `T` in `error`'s chain (the SDK wraps errors in context layers).
fn find_in_chain<T: std::error::Error + 'static>(error: &azure_core::Error) -> Option<&T> {
    let mut current: &(dyn std::error::Error + 'static) = error.get_ref()?;
    loop {
        if let Some(found) = current.downcast_ref::<T>() {
            return Some(found);
        }
        current = current.source()?;
    }
}

/// kube-lb's reading of an SDK error.
pub(crate) fn classify(operation: &'static str, error: azure_core::Error) -> AzureError {
    if let Some(foreign) = find_in_chain::<ForeignUrl>(&error) {
        return AzureError::ForeignPollUrl {
            operation,
            url: foreign.url.clone(),
        };
    }
    match error.kind().clone() {
        ErrorKind::HttpResponse { status, error_code } => {
            let status = u16::from(status);
            if status == 412 {
                return AzureError::PreconditionFailed { operation };
            }
            let message = error
                .as_http_error()
                .and_then(|e| e.error_message())
                .unwrap_or_default()
                .to_string();
            AzureError::Arm {
                operation,
                status,
                code: error_code.unwrap_or_default(),
                message,
            }
        }
        ErrorKind::Credential => match find_in_chain::<AzureError>(&error) {
            Some(AzureError::Auth(message)) => AzureError::Auth(message.clone()),
            // The token request got no answer (timed out, refused, reset): as transient as the
            // call it was made for, not a credential problem.
            Some(AzureError::Transport { .. }) => AzureError::Transport {
                operation,
                source: error,
            },
            _ => AzureError::Auth(error.to_string()),
        },
        ErrorKind::Io => AzureError::Transport {
            operation,
            source: error,
        },
        _ => AzureError::Sdk {
            operation,
            source: error,
        },
    }
}

/// A top-level resource kube-lb PUTs whole as raw JSON: where it lives, its name, and the etag
/// it was read with.
trait Stored: Serialize {
    /// The Microsoft.Network collection (`loadBalancers`, …).
    const COLLECTION: &'static str;
    fn name(&self) -> &str;
    fn etag(&self) -> Option<&str>;
}

macro_rules! stored {
    ($($ty:ty => $collection:literal),* $(,)?) => {$(
        impl Stored for $ty {
            const COLLECTION: &'static str = $collection;
            fn name(&self) -> &str {
                &self.name
            }
            fn etag(&self) -> Option<&str> {
                self.etag.as_deref()
            }
        }
    )*};
}

stored!(
    LoadBalancer => "loadBalancers",
    PublicIp => "publicIPAddresses",
    SecurityGroup => "networkSecurityGroups",
);

/// Reads an ARM JSON body into kube-lb's model.
fn decode<T: DeserializeOwned>(operation: &'static str, body: &[u8]) -> Result<T, AzureError> {
    serde_json::from_slice(body).map_err(|source| AzureError::Decode { operation, source })
}

/// Writes kube-lb's model as an ARM JSON body.
fn encode<T: Serialize>(operation: &'static str, value: &T) -> Result<Bytes, AzureError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|source| AzureError::Decode { operation, source })
}

fn missing_after_put(operation: &'static str, what: &str) -> AzureError {
    AzureError::Arm {
        operation,
        status: 404,
        code: "NotFound".into(),
        message: format!("{what} not found after PUT"),
    }
}

async fn started(response: azure_core::Response) -> azure_core::Result<Started> {
    let (status, headers, body) = response.deconstruct();
    // Read the body so the connection can be reused; the resource is read back after the
    // operation, so its (provisional) content is not needed.
    body.collect().await?;
    Ok(Started {
        status: u16::from(status),
        headers,
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
            .map_err(|source| AzureError::Sdk {
                operation: "BuildClient",
                source: azure_core::Error::new(ErrorKind::Other, source),
            })?;
        let resource_manager = config.resource_manager();
        let endpoint = Url::parse(&resource_manager).map_err(|e| {
            AzureError::ConfigInvalid(format!(
                "resource manager endpoint {resource_manager:?}: {e}"
            ))
        })?;
        let credential: Arc<dyn TokenCredential> =
            Arc::new(TokenSource::from_config(config, http.clone()));
        let scopes = vec![format!(
            "{}/.default",
            resource_manager.trim_end_matches('/')
        )];

        let mut client_options = ClientOptions::new(TransportOptions::new_custom_policy(Arc::new(
            Transport::new(http, endpoint.clone()),
        )))
        .retry(RetryOptions::none());
        client_options
            .per_call_policies_mut()
            .extend([Arc::new(WithholdToken) as _, Arc::new(Preconditions) as _]);
        let sdk = azure_mgmt_network::package_2024_03::Client::new(
            endpoint.clone(),
            Arc::clone(&credential),
            scopes.clone(),
            client_options.clone(),
        );
        let polls = Pipeline::new(
            Some(env!("CARGO_PKG_NAME")),
            Some(env!("CARGO_PKG_VERSION")),
            client_options,
            Vec::new(),
            Vec::new(),
        );
        let api = CloudApi::new(
            "azure",
            options.counter.clone(),
            options.limits.clone(),
            options.retry,
        );
        Ok(ArmClient {
            sdk,
            polls,
            credential,
            scopes,
            endpoint,
            subscription: config.subscription_id.clone(),
            api,
            poll: options.poll,
        })
    }

    /// One ARM request (`request` builds it afresh for every attempt) through the rate limiter,
    /// counted, retried on throttling, 5xx and transport errors after the server's
    /// `Retry-After` (capped). `Ok(None)` when ARM answers 404; 412 and other client errors
    /// come back unretried.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        kind: CallKind,
        precondition: Option<Precondition>,
        request: F,
    ) -> Result<Option<T>, AzureError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = azure_core::Result<T>>,
    {
        self.call_with(operation, kind, precondition, OnNotFound::Absent, request)
            .await
    }

    /// [`ArmClient::call`], with the meaning of a 404 chosen by the caller.
    async fn call_with<T, F, Fut>(
        &self,
        operation: &'static str,
        kind: CallKind,
        precondition: Option<Precondition>,
        on_not_found: OnNotFound,
        mut request: F,
    ) -> Result<Option<T>, AzureError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = azure_core::Result<T>>,
    {
        let family = match kind {
            CallKind::Read => "arm-read",
            CallKind::Mutate => "arm-write",
        };
        let result = self
            .api
            .call(family, operation, kind, || {
                let attempt = in_call(precondition.clone(), request());
                async move {
                    let (outcome, retry_after) = attempt.await;
                    let error = match outcome {
                        Ok(value) => return Ok(Ok(Some(value))),
                        Err(error)
                            if on_not_found == OnNotFound::Absent
                                && status_of(&error) == Some(404) =>
                        {
                            return Ok(Ok(None));
                        }
                        Err(error) => {
                            let error = classify(operation, error);
                            // The same test the conversion to `ProviderError::Throttled` uses,
                            // so the throttled counter and the Service's condition agree.
                            if error.is_throttled() {
                                self.api.record_throttled(operation);
                            }
                            error
                        }
                    };
                    if !error.is_transient()
                        || matches!(error, AzureError::PreconditionFailed { .. })
                    {
                        return Ok(Err(error));
                    }
                    // Honour the server's back-off before the retry policy adds its own
                    // jittered delay.
                    if let Some(wait) = retry_after {
                        let wait = wait.min(self.poll.max_interval);
                        debug!(operation, ?wait, "ARM asked to retry later");
                        tokio::time::sleep(wait).await;
                    }
                    Err(ProviderError::Retryable {
                        operation,
                        message: error.to_string(),
                        source: Some(Box::new(error)),
                    })
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

    /// A `GET` of one resource: the SDK builds and sends the request (`send`, afresh for every
    /// attempt), but its typed model would drop fields it does not know, so the body is read
    /// as raw JSON into kube-lb's model, which keeps them. `None` when ARM answers 404.
    async fn get_raw<T, F, Fut>(
        &self,
        operation: &'static str,
        send: F,
    ) -> Result<Option<T>, AzureError>
    where
        T: DeserializeOwned,
        F: Fn() -> Fut,
        Fut: Future<Output = azure_core::Result<azure_core::Response>>,
    {
        let found = self
            .call(operation, CallKind::Read, None, || {
                let response = send();
                async move { response.await?.into_body().collect().await }
            })
            .await?;
        found.map(|body| decode(operation, &body)).transpose()
    }

    async fn load_balancer(
        &self,
        operation: &'static str,
        rg: &str,
        name: &str,
    ) -> Result<Option<LoadBalancer>, AzureError> {
        let client = self.sdk.load_balancers_client();
        self.get_raw(operation, || {
            let request = client.get(rg, name, &self.subscription).send();
            async move { Ok(request.await?.into_raw_response()) }
        })
        .await
    }

    async fn public_ip(
        &self,
        operation: &'static str,
        rg: &str,
        name: &str,
    ) -> Result<Option<PublicIp>, AzureError> {
        let client = self.sdk.public_ip_addresses_client();
        self.get_raw(operation, || {
            let request = client.get(rg, name, &self.subscription).send();
            async move { Ok(request.await?.into_raw_response()) }
        })
        .await
    }

    async fn security_group(
        &self,
        operation: &'static str,
        rg: &str,
        name: &str,
    ) -> Result<Option<SecurityGroup>, AzureError> {
        let client = self.sdk.network_security_groups_client();
        self.get_raw(operation, || {
            let request = client.get(rg, name, &self.subscription).send();
            async move { Ok(request.await?.into_raw_response()) }
        })
        .await
    }

    /// The URL of `{collection}/{name}` (or the collection, without a name) in `rg`.
    fn resource_url(&self, rg: &str, collection: &str, name: Option<&str>) -> Url {
        let mut url = self.endpoint.clone();
        let mut path = format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/{collection}",
            self.subscription
        );
        if let Some(name) = name {
            path.push('/');
            path.push_str(name);
        }
        url.set_path(&path);
        url.query_pairs_mut()
            .append_pair("api-version", API_VERSION);
        url
    }

    /// One request with a raw JSON body through the same pipeline (preconditions, token
    /// handling, endpoint check, transport) as the SDK's requests. Writes go this way because
    /// the SDK's typed request models drop the fields they do not know, so every
    /// read-modify-write would erase a property ARM added after the 2024-03 models.
    async fn raw(
        &self,
        method: Method,
        url: Url,
        body: Option<Bytes>,
    ) -> azure_core::Result<azure_core::Response> {
        let scopes: Vec<&str> = self.scopes.iter().map(String::as_str).collect();
        let token = self.credential.get_token(&scopes).await?;
        let mut request = Request::new(url, method);
        request.insert_header(AUTHORIZATION, format!("Bearer {}", token.token.secret()));
        if let Some(body) = body {
            request.insert_header(CONTENT_TYPE, "application/json");
            request.set_body(body);
        }
        self.polls.send(&Context::new(), &mut request).await
    }

    /// A PUT of `object` (kube-lb's model as raw JSON, unknown fields included) with the write
    /// precondition of its etag, awaited, then read back with `read`.
    async fn put_object<T, ReadFut>(
        &self,
        operation: &'static str,
        rg: &str,
        object: &T,
        read: impl FnOnce() -> ReadFut,
    ) -> Result<T, AzureError>
    where
        T: Stored,
        ReadFut: Future<Output = Result<Option<T>, AzureError>>,
    {
        let url = self.resource_url(rg, T::COLLECTION, Some(object.name()));
        let body = encode(operation, object)?;
        self.put_and_read(
            operation,
            object.name(),
            object.etag(),
            || self.raw(Method::Put, url.clone(), Some(body.clone())),
            read,
        )
        .await
    }

    /// Issues a write; `None` when ARM answered 404 and `on_not_found` says that means absent.
    async fn write<Fut>(
        &self,
        operation: &'static str,
        precondition: Option<Precondition>,
        on_not_found: OnNotFound,
        mut send: impl FnMut() -> Fut,
    ) -> Result<Option<Started>, AzureError>
    where
        Fut: Future<Output = azure_core::Result<azure_core::Response>>,
    {
        self.call_with(
            operation,
            CallKind::Mutate,
            precondition,
            on_not_found,
            || {
                let request = send();
                async move { started(request.await?).await }
            },
        )
        .await
    }

    /// A PUT of `name`: sent with the write precondition of `etag`, its operation waited for,
    /// then the stored object read back with `read`.
    async fn put_and_read<T, Fut, ReadFut>(
        &self,
        operation: &'static str,
        name: &str,
        etag: Option<&str>,
        send: impl FnMut() -> Fut,
        read: impl FnOnce() -> ReadFut,
    ) -> Result<T, AzureError>
    where
        Fut: Future<Output = azure_core::Result<azure_core::Response>>,
        ReadFut: Future<Output = Result<Option<T>, AzureError>>,
    {
        // A PUT answered 404 did not find what it builds on (ARM's `ResourceGroupNotFound`,
        // `ParentResourceNotFound`): ARM's code and words are the diagnosis, so they are kept.
        let started = self
            .write(
                operation,
                Some(Precondition::for_write(etag)),
                OnNotFound::Failure,
                send,
            )
            .await?
            .ok_or_else(|| missing_after_put(operation, name))?;
        self.wait(operation, &started).await?;
        read()
            .await?
            .ok_or_else(|| missing_after_put(operation, name))
    }

    /// A DELETE, with `If-Match` when `etag` is given, waited for until `gone` reports the
    /// resource absent. An already missing resource is not an error.
    async fn delete_and_wait<Fut, GoneFut>(
        &self,
        operation: &'static str,
        etag: Option<&str>,
        send: impl FnMut() -> Fut,
        gone: impl FnMut() -> GoneFut,
    ) -> Result<(), AzureError>
    where
        Fut: Future<Output = azure_core::Result<azure_core::Response>>,
        GoneFut: Future<Output = Result<bool, AzureError>>,
    {
        let precondition = etag.map(|etag| Precondition::IfMatch(etag.to_string()));
        match self
            .write(operation, precondition, OnNotFound::Absent, send)
            .await?
        {
            Some(started) => self.wait_deleted(operation, &started, gone).await,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl NetworkClient for ArmClient {
    async fn get_load_balancer(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<LoadBalancer>, AzureError> {
        self.load_balancer("GetLoadBalancer", rg, name).await
    }

    async fn put_load_balancer(
        &self,
        rg: &str,
        lb: &LoadBalancer,
    ) -> Result<LoadBalancer, AzureError> {
        const OPERATION: &str = "PutLoadBalancer";
        self.put_object(OPERATION, rg, lb, || {
            self.load_balancer(OPERATION, rg, &lb.name)
        })
        .await
    }

    async fn delete_load_balancer(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        const OPERATION: &str = "DeleteLoadBalancer";
        let client = self.sdk.load_balancers_client();
        self.delete_and_wait(
            OPERATION,
            etag,
            || {
                let request = client.delete(rg, name, &self.subscription).send();
                async move { Ok(request.await?.into_raw_response()) }
            },
            || async { Ok(self.load_balancer(OPERATION, rg, name).await?.is_none()) },
        )
        .await
    }

    async fn list_public_ips(&self, rg: &str) -> Result<Vec<PublicIp>, AzureError> {
        const OPERATION: &str = "ListPublicIPAddresses";
        /// One page of a list, as raw JSON items (so unknown fields survive a later PUT).
        #[derive(serde::Deserialize)]
        struct Page {
            #[serde(default)]
            value: Vec<PublicIp>,
            #[serde(default, rename = "nextLink")]
            next_link: Option<String>,
        }
        let mut items = Vec::new();
        let mut next = Some(self.resource_url(rg, <PublicIp as Stored>::COLLECTION, None));
        // Each link is followed once: an answer that hands one back again would page forever.
        let mut pages = PageTokens::default();
        while let Some(url) = next.take() {
            if let Err(repeated) = pages.next(OPERATION, Some(url.as_str())) {
                return Err(AzureError::Sdk {
                    operation: OPERATION,
                    source: azure_core::Error::message(
                        ErrorKind::DataConversion,
                        repeated.to_string(),
                    ),
                });
            }
            let body = self
                .call(OPERATION, CallKind::Read, None, || {
                    let request = self.raw(Method::Get, url.clone(), None);
                    async move { request.await?.into_body().collect().await }
                })
                .await?;
            let Some(body) = body else {
                break;
            };
            let page: Page = decode(OPERATION, &body)?;
            items.extend(page.value);
            // A foreign nextLink is refused by the transport (the token stays on the endpoint).
            next = page
                .next_link
                .filter(|link| !link.is_empty())
                .map(|link| {
                    Url::parse(&link).map_err(|_| AzureError::ForeignPollUrl {
                        operation: OPERATION,
                        url: link.clone(),
                    })
                })
                .transpose()?;
        }
        Ok(items)
    }

    async fn get_public_ip(&self, rg: &str, name: &str) -> Result<Option<PublicIp>, AzureError> {
        self.public_ip("GetPublicIPAddress", rg, name).await
    }

    async fn put_public_ip(&self, rg: &str, pip: &PublicIp) -> Result<PublicIp, AzureError> {
        const OPERATION: &str = "PutPublicIPAddress";
        self.put_object(OPERATION, rg, pip, || {
            self.public_ip(OPERATION, rg, &pip.name)
        })
        .await
    }

    async fn delete_public_ip(
        &self,
        rg: &str,
        name: &str,
        etag: Option<&str>,
    ) -> Result<(), AzureError> {
        const OPERATION: &str = "DeletePublicIPAddress";
        let client = self.sdk.public_ip_addresses_client();
        self.delete_and_wait(
            OPERATION,
            etag,
            || {
                let request = client.delete(rg, name, &self.subscription).send();
                async move { Ok(request.await?.into_raw_response()) }
            },
            || async { Ok(self.public_ip(OPERATION, rg, name).await?.is_none()) },
        )
        .await
    }

    async fn get_security_group(
        &self,
        rg: &str,
        name: &str,
    ) -> Result<Option<SecurityGroup>, AzureError> {
        self.security_group("GetNetworkSecurityGroup", rg, name)
            .await
    }

    async fn put_security_group(
        &self,
        rg: &str,
        nsg: &SecurityGroup,
    ) -> Result<SecurityGroup, AzureError> {
        const OPERATION: &str = "PutNetworkSecurityGroup";
        self.put_object(OPERATION, rg, nsg, || {
            self.security_group(OPERATION, rg, &nsg.name)
        })
        .await
    }

    async fn get_subnet(
        &self,
        rg: &str,
        vnet: &str,
        subnet: &str,
    ) -> Result<Option<Subnet>, AzureError> {
        const OPERATION: &str = "GetSubnet";
        let client = self.sdk.subnets_client();
        let found: Option<models::Subnet> = self
            .call(OPERATION, CallKind::Read, None, || {
                let request = client.get(rg, vnet, subnet, &self.subscription).send();
                async move { request.await?.into_body().await }
            })
            .await?;
        found.map(|s| convert(OPERATION, &s)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::http::Uri;
    use azure_core::StatusCode;

    use super::*;

    /// An ARM endpoint (with its own token endpoint) whose public-IP listing runs page 1 →
    /// page 2 → page 3 and then names page 2 again; it records the `$skiptoken` of every
    /// listing request it answers (`first` for the first page).
    async fn public_ips_whose_next_link_repeats() -> (String, Arc<Mutex<Vec<String>>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let (link_base, seen) = (base.clone(), Arc::clone(&asked));
        let app = axum::Router::new().fallback(move |uri: Uri| {
            let (link_base, seen) = (link_base.clone(), Arc::clone(&seen));
            async move {
                if uri.path().ends_with("/oauth2/v2.0/token") {
                    return axum::Json(serde_json::json!({
                        "access_token": "token", "token_type": "Bearer", "expires_in": 3600,
                    }));
                }
                let page = uri
                    .query()
                    .unwrap_or_default()
                    .split('&')
                    .find_map(|pair| pair.strip_prefix("$skiptoken="))
                    .unwrap_or("first")
                    .to_string();
                seen.lock().unwrap().push(page.clone());
                let next = match page.as_str() {
                    "first" => "2",
                    "2" => "3",
                    _ => "2",
                };
                axum::Json(serde_json::json!({
                    "value": [{"name": format!("pip-{page}"), "location": "eastus"}],
                    "nextLink": format!(
                        "{link_base}{}?api-version={API_VERSION}&$skiptoken={next}",
                        uri.path()
                    ),
                }))
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        (base, asked)
    }

    /// A listing whose `nextLink` names a page it already followed ends with an error after
    /// exactly the pages before the repeat, instead of paging forever.
    #[tokio::test]
    async fn a_next_link_handed_back_twice_ends_the_listing() {
        let (base, asked) = public_ips_whose_next_link_repeats().await;
        let config: AzureConfig = serde_json::from_value(serde_json::json!({
            "tenantId": "tenant", "subscriptionId": "sub", "aadClientId": "id",
            "aadClientSecret": "secret", "resourceGroup": "rg", "location": "eastus",
            "resourceManagerEndpoint": base, "activeDirectoryEndpoint": base,
        }))
        .unwrap();
        let client = ArmClient::from_config(&config, &ProviderOptions::default()).unwrap();

        let listed = tokio::time::timeout(Duration::from_secs(10), client.list_public_ips("rg"))
            .await
            .expect("the listing never ended");

        match listed {
            Err(AzureError::Sdk { operation, source }) => {
                assert_eq!(operation, "ListPublicIPAddresses");
                assert!(source.to_string().contains("skiptoken=2"), "{source}");
            }
            other => panic!("expected the repeated link to end the listing, got {other:?}"),
        }
        assert_eq!(*asked.lock().unwrap(), ["first", "2", "3"]);
    }

    #[test]
    fn sdk_errors_become_provider_errors() {
        let http = |status: StatusCode, code: &str| {
            azure_core::Error::from(ErrorKind::http_response(status, Some(code.into())))
        };
        let cases: Vec<(azure_core::Error, &str)> = vec![
            (
                http(StatusCode::PreconditionFailed, "PreconditionFailed"),
                "precondition",
            ),
            (
                http(StatusCode::TooManyRequests, "TooManyRequests"),
                "arm 429",
            ),
            (
                http(StatusCode::BadRequest, "InvalidResourceReference"),
                "arm 400",
            ),
            (
                azure_core::Error::message(ErrorKind::Io, "reset"),
                "transport",
            ),
            (
                azure_core::Error::new(
                    ErrorKind::Credential,
                    AzureError::Auth("token endpoint answered 401".into()),
                ),
                "auth",
            ),
            (
                azure_core::Error::new(
                    ErrorKind::Credential,
                    AzureError::Transport {
                        operation: "AcquireToken",
                        source: azure_core::Error::message(ErrorKind::Io, "timed out"),
                    },
                ),
                "transport",
            ),
            (
                azure_core::Error::new(
                    ErrorKind::Other,
                    ForeignUrl {
                        url: "http://elsewhere/".into(),
                    },
                )
                .context("non-io error occurred which will not be retried"),
                "foreign",
            ),
            (
                azure_core::Error::message(ErrorKind::DataConversion, "bad json"),
                "sdk",
            ),
        ];
        for (error, want) in cases {
            let got = match classify("PutLoadBalancer", error) {
                AzureError::PreconditionFailed { .. } => "precondition".to_string(),
                AzureError::Arm { status, .. } => format!("arm {status}"),
                AzureError::Transport { .. } => "transport".into(),
                AzureError::Auth(message) => {
                    assert!(message.contains("401"), "{message}");
                    "auth".into()
                }
                AzureError::ForeignPollUrl { url, .. } => {
                    assert_eq!(url, "http://elsewhere/");
                    "foreign".into()
                }
                AzureError::Sdk { .. } => "sdk".into(),
                other => format!("{other:?}"),
            };
            assert_eq!(got, want);
        }
    }
}

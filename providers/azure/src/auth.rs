//! Access tokens for ARM: the service-principal client-credentials flow against Entra ID, or
//! the instance metadata service for managed identities. Tokens are cached until shortly
//! before they expire. [`TokenSource`] is the `azure_core` credential the SDK client uses.

use std::fmt;
use std::time::Duration;

use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::error::ErrorKind;
use serde::Deserialize;
use time::OffsetDateTime;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::config::AzureConfig;
use crate::error::AzureError;

/// The instance metadata service's token endpoint.
const IMDS_TOKEN_URL: &str = "http://169.254.169.254/metadata/identity/oauth2/token";
/// Tokens are renewed this long before they expire.
const EXPIRY_MARGIN: Duration = Duration::from_secs(120);

/// Where tokens come from.
#[derive(Clone)]
enum Credential {
    ClientSecret {
        token_url: String,
        client_id: String,
        secret: String,
        scope: String,
    },
    ManagedIdentity {
        resource: String,
        client_id: Option<String>,
    },
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::ClientSecret {
                token_url,
                client_id,
                ..
            } => f
                .debug_struct("ClientSecret")
                .field("token_url", token_url)
                .field("client_id", client_id)
                .finish_non_exhaustive(),
            Credential::ManagedIdentity { client_id, .. } => f
                .debug_struct("ManagedIdentity")
                .field("client_id", client_id)
                .finish_non_exhaustive(),
        }
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

/// Hands out a valid bearer token, fetching a new one when the cached one is about to expire.
/// It is the SDK's [`TokenCredential`], so the generated request builders and kube-lb's own
/// operation polling share one cache.
pub struct TokenSource {
    http: reqwest::Client,
    credential: Credential,
    cached: Mutex<Option<(String, Instant)>>,
}

impl fmt::Debug for TokenSource {
    // Written by hand: a derived Debug would print the cached token.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenSource")
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

impl TokenSource {
    /// The credential the config describes.
    pub fn from_config(config: &AzureConfig, http: reqwest::Client) -> TokenSource {
        let resource = config.resource_manager();
        let credential = if config.use_managed_identity_extension {
            Credential::ManagedIdentity {
                resource: format!("{resource}/"),
                client_id: (!config.user_assigned_identity_id.is_empty())
                    .then(|| config.user_assigned_identity_id.clone()),
            }
        } else {
            Credential::ClientSecret {
                token_url: format!(
                    "{}/{}/oauth2/v2.0/token",
                    config.active_directory(),
                    config.tenant_id
                ),
                client_id: config.aad_client_id.clone(),
                secret: config.aad_client_secret.clone(),
                scope: format!("{resource}/.default"),
            }
        };
        TokenSource {
            http,
            credential,
            cached: Mutex::new(None),
        }
    }

    /// A token valid for at least [`EXPIRY_MARGIN`], and when it expires.
    pub async fn token(&self) -> Result<(String, Instant), AzureError> {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires)) = cached.as_ref()
            && Instant::now() + EXPIRY_MARGIN < *expires
        {
            return Ok((token.clone(), *expires));
        }
        let response = match &self.credential {
            Credential::ClientSecret {
                token_url,
                client_id,
                secret,
                scope,
            } => {
                self.http
                    .post(token_url)
                    .form(&[
                        ("grant_type", "client_credentials"),
                        ("client_id", client_id.as_str()),
                        ("client_secret", secret.as_str()),
                        ("scope", scope.as_str()),
                    ])
                    .send()
                    .await
            }
            Credential::ManagedIdentity {
                resource,
                client_id,
            } => {
                let mut query = vec![
                    ("api-version", "2018-02-01"),
                    ("resource", resource.as_str()),
                ];
                if let Some(id) = client_id {
                    query.push(("client_id", id.as_str()));
                }
                self.http
                    .get(IMDS_TOKEN_URL)
                    .header("Metadata", "true")
                    .query(&query)
                    .send()
                    .await
            }
        }
        .map_err(|e| token_failure("token request failed", e))?;
        let status = response.status();
        if !status.is_success() {
            // The error body names the problem (e.g. AADSTS7000215) and never echoes the secret.
            let body = response.text().await.unwrap_or_default();
            return Err(token_refusal(status.as_u16(), body));
        }
        let parsed: TokenResponse = response
            .json()
            .await
            .map_err(|e| token_failure("token response unreadable", e))?;
        let lifetime = parsed
            .expires_in
            .and_then(|v| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            })
            .unwrap_or(300);
        let token = parsed.access_token;
        let expires = Instant::now() + Duration::from_secs(lifetime);
        *cached = Some((token.clone(), expires));
        Ok((token, expires))
    }
}

/// An error answer of the token endpoint. Entra ID and the instance metadata service throttle
/// (429) and fail (5xx) like any HTTP service: those are transient, retried like an ARM call's
/// (carried as an error answer of the `AcquireToken` operation, so the status classifies it);
/// any other status refuses the credentials: [`AzureError::Auth`].
fn token_refusal(status: u16, body: String) -> AzureError {
    if matches!(status, 408 | 429 | 500..=599) {
        AzureError::Arm {
            operation: "AcquireToken",
            status,
            code: String::new(),
            message: format!("token endpoint answered {status}: {body}"),
        }
    } else {
        AzureError::Auth(format!("token endpoint answered {status}: {body}"))
    }
}

/// A token request that got no whole answer (timed out, refused, reset, cut off mid-body) is
/// a transport failure, transient like any ARM call's; only an answer that refuses the
/// credentials or cannot be read is [`AzureError::Auth`].
fn token_failure(what: &str, error: reqwest::Error) -> AzureError {
    if error.is_timeout() || error.is_connect() || error.is_request() || error.is_body() {
        AzureError::Transport {
            operation: "AcquireToken",
            source: azure_core::Error::new(ErrorKind::Io, error),
        }
    } else {
        AzureError::Auth(format!("{what}: {error}"))
    }
}

#[async_trait::async_trait]
impl TokenCredential for TokenSource {
    /// The scope comes from the cloud config (`<resource manager>/.default`), which is what the
    /// SDK asks for too, so `scopes` is not consulted.
    async fn get_token(&self, _scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let (token, expires) = self
            .token()
            .await
            .map_err(|error| azure_core::Error::new(ErrorKind::Credential, error))?;
        let remaining = expires.saturating_duration_since(Instant::now());
        Ok(AccessToken::new(
            Secret::new(token),
            OffsetDateTime::now_utc() + remaining,
        ))
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        *self.cached.lock().await = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_lb_provider_core::ProviderError;

    #[test]
    fn token_endpoint_throttling_and_outages_are_transient_refusals_are_not() {
        // (status, transient, throttled)
        let cases = [
            (429, true, true),
            (500, true, false),
            (503, true, false),
            (408, true, false),
            (400, false, false),
            (401, false, false),
            (403, false, false),
        ];
        for (status, transient, throttled) in cases {
            let error = ProviderError::from(token_refusal(status, "{\"error\":\"x\"}".into()));
            assert_eq!(error.is_transient(), transient, "{status}: {error:?}");
            assert_eq!(
                matches!(error, ProviderError::Throttled { .. }),
                throttled,
                "{status}: {error:?}"
            );
            assert!(
                error
                    .to_string()
                    .contains(&format!("token endpoint answered {status}")),
                "{status}: {error}"
            );
        }
    }
}

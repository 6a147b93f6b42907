//! Where the provider's settings come from: a JSON cloud-config file (`--cloud-config`) and the
//! environment the official SDKs read. Credentials in `TENCENTCLOUD_SECRET_ID`,
//! `TENCENTCLOUD_SECRET_KEY` and `TENCENTCLOUD_SESSION_TOKEN` win over the file (so a Secret
//! mounted as environment needs no file edit); `TENCENTCLOUD_REGION` is used when the file names
//! no region.
//!
//! The file (every key optional except where the environment does not supply it):
//!
//! ```json
//! {
//!   "secretId": "AKID…", "secretKey": "…", "sessionToken": "…",
//!   "region": "ap-guangzhou",
//!   "vpcId": "vpc-…",
//!   "endpoint": "https://clb.tencentcloudapi.com",
//!   "vpcEndpoint": "https://vpc.tencentcloudapi.com",
//!   "listenerName": "TKE-DEDICATED-LISTENER"
//! }
//! ```
//!
//! `vpcEndpoint` (the VPC API, for the security groups that enforce
//! `loadBalancerSourceRanges`) defaults to `endpoint` with its `clb.` host prefix made `vpc.`,
//! or to `endpoint` itself when its host has no such prefix (a mock or a proxy serving both).
//!
//! Unknown keys are refused (a typo would otherwise silently build the wrong thing).

use serde::Deserialize;

/// The default CLB API endpoint.
pub const DEFAULT_ENDPOINT: &str = "https://clb.tencentcloudapi.com";

/// The name TKE gives the listeners it owns; only listeners with this name are ever changed
/// or deleted on a CLB kube-lb did not create.
pub const DEFAULT_LISTENER_NAME: &str = "TKE-DEDICATED-LISTENER";

/// A configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file is not the expected JSON.
    #[error("tencent cloud-config: {0}")]
    Syntax(String),
    /// A required setting is absent from both the file and the environment.
    #[error("tencent cloud-config: {setting} is required (set {env} or \"{key}\" in the file)")]
    Missing {
        /// What is missing.
        setting: &'static str,
        /// The environment variable.
        env: &'static str,
        /// The file key.
        key: &'static str,
    },
    /// A value that cannot be right.
    #[error("tencent cloud-config: \"{key}\" = {value:?}: {reason}")]
    Value {
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// Why not.
        reason: &'static str,
    },
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    secret_id: Option<String>,
    secret_key: Option<String>,
    session_token: Option<String>,
    region: Option<String>,
    vpc_id: Option<String>,
    endpoint: Option<String>,
    vpc_endpoint: Option<String>,
    listener_name: Option<String>,
}

/// Everything the client and provider need.
#[derive(Clone, PartialEq, Eq)]
pub struct TencentConfig {
    /// SecretId.
    pub secret_id: String,
    /// SecretKey (never logged).
    pub secret_key: String,
    /// Token of temporary (STS / role) credentials, sent as `X-TC-Token`.
    pub session_token: Option<String>,
    /// `X-TC-Region`.
    pub region: String,
    /// The cluster VPC: CLBs are created in it, and an existing CLB must be in it.
    pub vpc_id: Option<String>,
    /// Base URL (`https://clb.tencentcloudapi.com`, or a mock's `http://127.0.0.1:PORT`).
    pub endpoint: String,
    /// Base URL of the VPC API (security groups).
    pub vpc_endpoint: String,
    /// The owned listener name.
    pub listener_name: String,
}

impl std::fmt::Debug for TencentConfig {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TencentConfig")
            .field("secret_id", &self.secret_id)
            .field("secret_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .field("region", &self.region)
            .field("vpc_id", &self.vpc_id)
            .field("endpoint", &self.endpoint)
            .field("vpc_endpoint", &self.vpc_endpoint)
            .field("listener_name", &self.listener_name)
            .finish()
    }
}

impl TencentConfig {
    /// Resolves the settings from the file text (if any) and `env` (a variable lookup).
    pub fn resolve(
        file: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<TencentConfig, ConfigError> {
        let file: File = match file {
            Some(text) => {
                // The shared reader adds line and column; the path is not known here.
                kube_lb_provider_core::config_file::parse_json("cloud-config", text)
                    .map_err(|e| ConfigError::Syntax(e.to_string()))?
            }
            None => File::default(),
        };
        let env = |name: &str| env(name).filter(|v| !v.is_empty());
        let secret_id =
            env("TENCENTCLOUD_SECRET_ID")
                .or(file.secret_id)
                .ok_or(ConfigError::Missing {
                    setting: "the SecretId",
                    env: "TENCENTCLOUD_SECRET_ID",
                    key: "secretId",
                })?;
        let secret_key =
            env("TENCENTCLOUD_SECRET_KEY")
                .or(file.secret_key)
                .ok_or(ConfigError::Missing {
                    setting: "the SecretKey",
                    env: "TENCENTCLOUD_SECRET_KEY",
                    key: "secretKey",
                })?;
        let session_token = env("TENCENTCLOUD_SESSION_TOKEN").or(file.session_token);
        let region =
            file.region
                .or_else(|| env("TENCENTCLOUD_REGION"))
                .ok_or(ConfigError::Missing {
                    setting: "the region",
                    env: "TENCENTCLOUD_REGION",
                    key: "region",
                })?;
        let endpoint = file
            .endpoint
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        if !is_url(&endpoint) {
            return Err(ConfigError::Value {
                key: "endpoint",
                value: endpoint,
                reason: "must be an http:// or https:// URL",
            });
        }
        let endpoint = endpoint.trim_end_matches('/').to_string();
        let vpc_endpoint = file
            .vpc_endpoint
            .unwrap_or_else(|| vpc_endpoint_for(&endpoint));
        if !is_url(&vpc_endpoint) {
            return Err(ConfigError::Value {
                key: "vpcEndpoint",
                value: vpc_endpoint,
                reason: "must be an http:// or https:// URL",
            });
        }
        if let Some(vpc) = &file.vpc_id
            && !vpc.starts_with("vpc-")
        {
            return Err(ConfigError::Value {
                key: "vpcId",
                value: vpc.clone(),
                reason: "must be a VPC id such as vpc-xxxxxxxx",
            });
        }
        let listener_name = file
            .listener_name
            .unwrap_or_else(|| DEFAULT_LISTENER_NAME.to_string());
        if listener_name.is_empty() || listener_name.chars().count() > 255 {
            return Err(ConfigError::Value {
                key: "listenerName",
                value: listener_name,
                reason: "must be 1 to 255 characters",
            });
        }
        Ok(TencentConfig {
            secret_id,
            secret_key,
            session_token,
            region,
            vpc_id: file.vpc_id,
            endpoint,
            vpc_endpoint: vpc_endpoint.trim_end_matches('/').to_string(),
            listener_name,
        })
    }
}

fn is_url(text: &str) -> bool {
    text.starts_with("https://") || text.starts_with("http://")
}

/// The VPC API beside the CLB API `endpoint`: `https://clb.X` → `https://vpc.X`; any other
/// host (a mock, a proxy) is taken to serve both.
fn vpc_endpoint_for(endpoint: &str) -> String {
    for scheme in ["https://", "http://"] {
        if let Some(rest) = endpoint.strip_prefix(scheme)
            && let Some(host) = rest.strip_prefix("clb.")
        {
            return format!("{scheme}vpc.{host}");
        }
    }
    endpoint.to_string()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn resolve(file: Option<&str>, env: &[(&str, &str)]) -> Result<TencentConfig, ConfigError> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        TencentConfig::resolve(file, &|name| env.get(name).cloned())
    }

    #[test]
    fn environment_credentials_win_and_the_file_fills_the_rest() {
        let config = resolve(
            Some(r#"{"secretId":"file-id","secretKey":"file-key","region":"ap-shanghai","vpcId":"vpc-1"}"#),
            &[
                ("TENCENTCLOUD_SECRET_ID", "env-id"),
                ("TENCENTCLOUD_SECRET_KEY", "env-key"),
                ("TENCENTCLOUD_SESSION_TOKEN", "tok"),
                ("TENCENTCLOUD_REGION", "ap-beijing"),
            ],
        )
        .expect("valid");
        assert_eq!(config.secret_id, "env-id");
        assert_eq!(config.secret_key, "env-key");
        assert_eq!(config.session_token.as_deref(), Some("tok"));
        assert_eq!(config.region, "ap-shanghai", "the file's region wins");
        assert_eq!(config.endpoint, DEFAULT_ENDPOINT);
        assert_eq!(config.vpc_endpoint, "https://vpc.tencentcloudapi.com");
        assert_eq!(config.listener_name, DEFAULT_LISTENER_NAME);
        assert!(
            !format!("{config:?}").contains("env-key"),
            "secrets are redacted"
        );
    }

    #[test]
    fn the_vpc_endpoint_follows_the_clb_one_unless_given() {
        let base = r#""secretId":"i","secretKey":"k","region":"r""#;
        let vpc = |extra: &str| {
            resolve(Some(&format!("{{{base}{extra}}}")), &[])
                .expect("valid")
                .vpc_endpoint
        };
        assert_eq!(
            vpc(r#","endpoint":"https://clb.ap-guangzhou.tencentcloudapi.com""#),
            "https://vpc.ap-guangzhou.tencentcloudapi.com"
        );
        assert_eq!(
            vpc(r#","endpoint":"http://127.0.0.1:9""#),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            vpc(r#","vpcEndpoint":"https://vpc.internal/""#),
            "https://vpc.internal"
        );
    }

    #[test]
    fn refuses_what_cannot_work_naming_the_key() {
        // (file, environment, what the error must name)
        type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case<'_>; 5] = [
            (
                None,
                &[
                    ("TENCENTCLOUD_SECRET_KEY", "k"),
                    ("TENCENTCLOUD_REGION", "r"),
                ],
                "TENCENTCLOUD_SECRET_ID",
            ),
            (
                None,
                &[
                    ("TENCENTCLOUD_SECRET_ID", "i"),
                    ("TENCENTCLOUD_SECRET_KEY", "k"),
                ],
                "TENCENTCLOUD_REGION",
            ),
            (
                Some(r#"{"secretId":"i","secretKey":"k","region":"r","endpiont":"x"}"#),
                &[],
                "endpiont",
            ),
            (
                Some(r#"{"secretId":"i","secretKey":"k","region":"r","endpoint":"clb.example"}"#),
                &[],
                "endpoint",
            ),
            (
                Some(r#"{"secretId":"i","secretKey":"k","region":"r","vpcId":"subnet-1"}"#),
                &[],
                "vpcId",
            ),
        ];
        for (file, env, want) in cases {
            let error = resolve(file, env).expect_err(want).to_string();
            assert!(error.contains(want), "{error} should name {want}");
        }
    }
}

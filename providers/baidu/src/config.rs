//! Configuration: the JSON cloud-config of `cloud-provider-baiducloud` (its field names), with
//! the keys optionally from the environment.
//!
//! ```json
//! {"ClusterID": "c-abc123", "AccessKeyID": "…", "SecretAccessKey": "…", "Region": "bj",
//!  "VpcID": "vpc-…", "SubnetID": "sbn-…",
//!  "Endpoint": "http://127.0.0.1:8765", "EIPEndpoint": "http://127.0.0.1:8765"}
//! ```
//!
//! `BCE_ACCESS_KEY_ID`, `BCE_SECRET_ACCESS_KEY` and `BCE_SESSION_TOKEN` override the file's
//! keys. `Endpoint`/`EIPEndpoint` default to `https://blb.<Region>.baidubce.com` and
//! `https://eip.<Region>.baidubce.com`; `BCCEndpoint` (the security groups behind
//! `loadBalancerSourceRanges`) to `Endpoint` with its `blb.` host prefix made `bcc.`, or to
//! `Endpoint` itself when it has no such prefix (a mock or a proxy serving both). `SubnetID` is where BLBs are created unless a Service
//! names one (upstream looked it up from a node's BCC instance, an API kube-lb does not call).

use serde::Deserialize;

use crate::sign::Credentials;

/// A configuration problem.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The parsed cloud-config.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct CloudConfig {
    /// Cluster id used in BLB names (`CCE/SVC/<ClusterID>/…`); defaults to `--cluster-name`.
    #[serde(rename = "ClusterID", default)]
    pub cluster_id: Option<String>,
    /// Access key id.
    #[serde(rename = "AccessKeyID", default)]
    pub access_key_id: Option<String>,
    /// Secret access key.
    #[serde(rename = "SecretAccessKey", default)]
    pub secret_access_key: Option<String>,
    /// Region (`bj`, `gz`, `su`, …).
    #[serde(rename = "Region", default)]
    pub region: Option<String>,
    /// The cluster's VPC.
    #[serde(rename = "VpcID", default)]
    pub vpc_id: Option<String>,
    /// The default subnet for new BLBs.
    #[serde(rename = "SubnetID", default)]
    pub subnet_id: Option<String>,
    /// BLB endpoint override.
    #[serde(rename = "Endpoint", default)]
    pub endpoint: Option<String>,
    /// EIP endpoint override.
    #[serde(rename = "EIPEndpoint", default)]
    pub eip_endpoint: Option<String>,
    /// BCC endpoint override (security groups).
    #[serde(rename = "BCCEndpoint", default)]
    pub bcc_endpoint: Option<String>,
}

/// Everything the client needs, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Keys.
    pub credentials: Credentials,
    /// BLB API base URL.
    pub blb_endpoint: String,
    /// EIP API base URL.
    pub eip_endpoint: String,
    /// BCC API base URL (security groups).
    pub bcc_endpoint: String,
    /// VPC of new BLBs.
    pub vpc_id: String,
    /// Default subnet of new BLBs.
    pub subnet_id: String,
    /// Cluster id for names, when the file sets one.
    pub cluster_id: Option<String>,
}

impl CloudConfig {
    /// Parses the JSON text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        // The shared reader adds line and column; the file's path is not known here.
        kube_lb_provider_core::config_file::parse_json("cloud-config", text)
            .map_err(|e| ConfigError(format!("not a Baidu cloud-config: {e}")))
    }

    /// Fills in defaults and the environment (`env` is `std::env::var` in production).
    pub fn resolve(&self, env: impl Fn(&str) -> Option<String>) -> Result<Resolved, ConfigError> {
        let pick = |var: &str, file: &Option<String>| {
            env(var).or_else(|| file.clone()).filter(|v| !v.is_empty())
        };
        let access_key_id = pick("BCE_ACCESS_KEY_ID", &self.access_key_id).ok_or_else(|| {
            ConfigError("no access key: set AccessKeyID or BCE_ACCESS_KEY_ID".into())
        })?;
        let secret_access_key =
            pick("BCE_SECRET_ACCESS_KEY", &self.secret_access_key).ok_or_else(|| {
                ConfigError("no secret key: set SecretAccessKey or BCE_SECRET_ACCESS_KEY".into())
            })?;
        let region = self.region.clone().unwrap_or_else(|| "bj".into());
        let endpoint = |explicit: &Option<String>, service: &str| {
            explicit
                .clone()
                .unwrap_or_else(|| format!("https://{service}.{region}.baidubce.com"))
                .trim_end_matches('/')
                .to_string()
        };
        let vpc_id = self.vpc_id.clone().ok_or_else(|| {
            ConfigError("VpcID is required (the VPC new BLBs are created in)".into())
        })?;
        let subnet_id = self.subnet_id.clone().ok_or_else(|| {
            ConfigError("SubnetID is required (the default subnet of new BLBs)".into())
        })?;
        let blb_endpoint = endpoint(&self.endpoint, "blb");
        let bcc_endpoint = match &self.bcc_endpoint {
            Some(explicit) => explicit.trim_end_matches('/').to_string(),
            None => bcc_endpoint_for(&blb_endpoint),
        };
        Ok(Resolved {
            credentials: Credentials {
                access_key_id,
                secret_access_key,
                session_token: env("BCE_SESSION_TOKEN"),
            },
            bcc_endpoint,
            blb_endpoint,
            eip_endpoint: endpoint(&self.eip_endpoint, "eip"),
            vpc_id,
            subnet_id,
            cluster_id: self.cluster_id.clone(),
        })
    }
}

/// The BCC API beside the BLB API `endpoint`: `https://blb.X` → `https://bcc.X`; any other
/// host (a mock, a proxy) is taken to serve both.
pub fn bcc_endpoint_for(endpoint: &str) -> String {
    for scheme in ["https://", "http://"] {
        if let Some(rest) = endpoint.strip_prefix(scheme)
            && let Some(host) = rest.strip_prefix("blb.")
        {
            return format!("{scheme}bcc.{host}");
        }
    }
    endpoint.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_overrides_file_keys_and_endpoints_default_per_region() {
        let config = CloudConfig::parse(
            r#"{"AccessKeyID":"file-ak","SecretAccessKey":"file-sk","Region":"gz","VpcID":"vpc-1","SubnetID":"sbn-1","ClusterID":"c-1"}"#,
        )
        .unwrap_or_default();
        let env = |var: &str| (var == "BCE_ACCESS_KEY_ID").then(|| "env-ak".to_string());
        let resolved = config.resolve(env).map_err(|e| e.0);
        let resolved = resolved.as_ref().map_err(String::as_str);
        assert_eq!(
            resolved.map(|r| r.credentials.access_key_id.as_str()),
            Ok("env-ak")
        );
        assert_eq!(
            resolved.map(|r| r.credentials.secret_access_key.as_str()),
            Ok("file-sk")
        );
        assert_eq!(
            resolved.map(|r| r.blb_endpoint.as_str()),
            Ok("https://blb.gz.baidubce.com")
        );
        assert_eq!(
            resolved.map(|r| r.eip_endpoint.as_str()),
            Ok("https://eip.gz.baidubce.com")
        );
        assert_eq!(
            resolved.map(|r| r.bcc_endpoint.as_str()),
            Ok("https://bcc.gz.baidubce.com")
        );
        assert_eq!(bcc_endpoint_for("http://127.0.0.1:9"), "http://127.0.0.1:9");
    }

    #[test]
    fn missing_pieces_are_named() {
        let cases = [
            (r#"{"VpcID":"v","SubnetID":"s"}"#, "AccessKeyID"),
            (
                r#"{"AccessKeyID":"a","SecretAccessKey":"s","SubnetID":"s"}"#,
                "VpcID",
            ),
            (
                r#"{"AccessKeyID":"a","SecretAccessKey":"s","VpcID":"v"}"#,
                "SubnetID",
            ),
        ];
        for (text, named) in cases {
            let error = CloudConfig::parse(text)
                .and_then(|c| c.resolve(|_| None))
                .map(|_| ())
                .expect_err(named);
            assert!(error.0.contains(named), "{error}");
        }
        assert!(CloudConfig::parse("VpcID = x").is_err());
    }
}

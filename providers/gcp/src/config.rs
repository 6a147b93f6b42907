//! The upstream `gce.conf` cloud-config (INI, `[global]` section), so files users already have
//! keep working. Known upstream keys are accepted (those without meaning here are ignored);
//! unknown keys produce warnings, not errors. kube-lb adds `region`, `cluster-id` and
//! `request-timeout`.

use std::time::Duration;

use kube_lb_provider_core::config_file::{self, ConfigFileError, Document};

use crate::error::GcpError;

/// The file name used in error messages (the text may come from any path).
const CONFIG_FILE: &str = "gce.conf";

/// Keys of `[global]` this provider reads.
const KNOWN_KEYS: &[&str] = &[
    "project-id",
    "network-project-id",
    "network-name",
    "subnetwork-name",
    "node-tags",
    "node-instance-prefix",
    "local-zone",
    "region",
    "multizone",
    "regional",
    "api-endpoint",
    "token-url",
    "cluster-id",
    "request-timeout",
];

/// How long one Compute request attempt (credentials, connect, answer and body) may take
/// when `request-timeout` is not set: the other clouds' request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Upstream keys that are accepted but do not change what this provider does.
const ACCEPTED_UPSTREAM_KEYS: &[&str] = &[
    "token-body",
    "secondary-range-name",
    "container-api-endpoint",
    "alpha-features",
    "external-instance-groups-prefix",
    "network-project-id",
];

/// The parsed configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CloudConfig {
    /// `project-id` (required).
    pub project_id: String,
    /// `network-project-id`: the host project of a shared VPC (defaults to the project).
    pub network_project_id: Option<String>,
    /// `network-name` (default `default`).
    pub network_name: String,
    /// `subnetwork-name`: the cluster subnet, used for internal load balancers.
    pub subnetwork_name: Option<String>,
    /// `node-tags`: firewall target tags; when empty, tags are read from the node instances.
    pub node_tags: Vec<String>,
    /// `node-instance-prefix`.
    pub node_instance_prefix: Option<String>,
    /// `local-zone`: the zone the controller runs in.
    pub local_zone: Option<String>,
    /// `region` (kube-lb extension); derived from `local-zone` when absent.
    pub region: String,
    /// `multizone`: nodes may be in every zone of the region.
    pub multizone: bool,
    /// `regional`: a regional cluster (implies multizone).
    pub regional: bool,
    /// `api-endpoint`: Compute API base URL (tests point it at the mock).
    pub api_endpoint: Option<String>,
    /// `token-url`: `nil` means no credentials (anonymous), as for test endpoints.
    pub token_url: Option<String>,
    /// `cluster-id` (kube-lb extension): the `<cid>` in shared resource names
    /// (`k8s-<cid>-node`, `k8s-ig--<cid>`); upstream reads it from the `ingress-uid` ConfigMap.
    pub cluster_id: Option<String>,
    /// `request-timeout` (kube-lb extension): how long one Compute request attempt may take
    /// before it fails as a transient error (retried in place, then by the controller), so an
    /// endpoint that accepts a request and never answers cannot hold a Service's sync. Whole
    /// seconds (`30`) or with a unit (`500ms`, `30s`, `2m`); [`DEFAULT_REQUEST_TIMEOUT`] when
    /// absent (see [`CloudConfig::request_timeout`]).
    pub request_timeout: Option<Duration>,
    /// Keys that were not recognised (reported as warnings).
    pub unknown_keys: Vec<String>,
}

impl CloudConfig {
    /// Parses `gce.conf` text with the shared gcfg-style reader.
    pub fn parse(text: &str) -> Result<CloudConfig, GcpError> {
        let doc = config_file::parse_ini(CONFIG_FILE, text).map_err(config_error)?;
        let global = doc.section("global", None);
        let string = |key: &str| {
            global
                .string(key)
                .map(|v| v.map(str::to_string))
                .map_err(config_error)
        };
        let flag = |key: &str| {
            global
                .bool(key)
                .map(|v| v.unwrap_or(false))
                .map_err(config_error)
        };
        let mut config = CloudConfig {
            project_id: string("project-id")?.unwrap_or_default(),
            network_project_id: string("network-project-id")?,
            network_name: string("network-name")?
                .map_or_else(|| "default".to_string(), |v| last_segment(&v)),
            subnetwork_name: string("subnetwork-name")?.map(|v| last_segment(&v)),
            // Upstream reads node-tags as a multi-valued key; each value may also be a
            // comma-separated list.
            node_tags: global
                .list("node-tags")
                .map_err(config_error)?
                .into_iter()
                .flat_map(|v| v.split(','))
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect(),
            node_instance_prefix: string("node-instance-prefix")?,
            local_zone: string("local-zone")?,
            region: String::new(),
            multizone: flag("multizone")?,
            regional: flag("regional")?,
            api_endpoint: string("api-endpoint")?,
            token_url: string("token-url")?,
            cluster_id: string("cluster-id")?,
            request_timeout: None,
            unknown_keys: unknown_keys(&doc),
        };
        if let Some(entry) = global
            .entries()
            .iter()
            .rev()
            .find(|e| e.key == "request-timeout")
        {
            let value = string("request-timeout")?.unwrap_or_default();
            config.request_timeout = Some(parse_timeout(&entry.key, &value, entry.line)?);
        }
        let region = string("region")?;
        if config.project_id.is_empty() {
            return Err(GcpError::Config(
                "project-id is required in [global]".into(),
            ));
        }
        config.region = match (region, &config.local_zone) {
            (Some(region), _) => region,
            (None, Some(zone)) => zone
                .rsplit_once('-')
                .map(|(region, _)| region.to_string())
                .ok_or_else(|| {
                    GcpError::Config(format!("local-zone '{zone}' is not a zone name"))
                })?,
            (None, None) => {
                return Err(GcpError::Config(
                    "either local-zone or region is required in [global]".into(),
                ));
            }
        };
        if let Some(endpoint) = &config.api_endpoint {
            config.api_endpoint = Some(normalise_endpoint(endpoint));
        }
        Ok(config)
    }

    /// True when calls go out without credentials (`token-url = nil`, or a plain-HTTP
    /// endpoint such as the mock).
    pub fn anonymous(&self) -> bool {
        self.token_url.as_deref() == Some("nil")
            || self
                .api_endpoint
                .as_deref()
                .is_some_and(|e| e.starts_with("http://"))
    }

    /// How long one Compute request attempt may take: `request-timeout`, or
    /// [`DEFAULT_REQUEST_TIMEOUT`].
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout.unwrap_or(DEFAULT_REQUEST_TIMEOUT)
    }

    /// The project holding the network (shared VPC host project, or the project itself).
    pub fn network_project(&self) -> &str {
        self.network_project_id
            .as_deref()
            .unwrap_or(&self.project_id)
    }
}

/// `api-endpoint` upstream is a full base path such as
/// `https://www.googleapis.com/compute/v1/`; the client wants the host part only.
fn normalise_endpoint(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    let base = trimmed
        .find("/compute/")
        .map_or(trimmed, |idx| &trimmed[..idx]);
    base.to_string()
}

fn config_error(error: ConfigFileError) -> GcpError {
    GcpError::Config(error.to_string())
}

/// Keys this provider neither reads nor knows from upstream, for warnings: `key` in
/// `[global]`, `[section] key` elsewhere.
fn unknown_keys(doc: &Document) -> Vec<String> {
    let mut out = Vec::new();
    for name in doc.section_names() {
        let plain = std::iter::once(None);
        let subs = doc.subsections(name).into_iter().map(Some);
        for sub in plain.chain(subs) {
            let section = doc.section(name, sub);
            for entry in section.entries() {
                let key = entry.key.as_str();
                if name == "global" && sub.is_none() {
                    if !KNOWN_KEYS.contains(&key) && !ACCEPTED_UPSTREAM_KEYS.contains(&key) {
                        out.push(key.to_string());
                    }
                } else {
                    let label = sub.map_or_else(|| name.to_string(), |s| format!("{name} {s:?}"));
                    out.push(format!("[{label}] {key}"));
                }
            }
        }
    }
    out
}

/// Network and subnetwork may be given as names or URLs; keep the name.
fn last_segment(value: &str) -> String {
    value
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or(value)
        .to_string()
}

/// A positive duration: whole seconds (`30`, as gcfg numbers are written) or a number with a
/// unit (`500ms`, `30s`, `2m`).
fn parse_timeout(key: &str, value: &str, line: usize) -> Result<Duration, GcpError> {
    let value = value.trim();
    let digits = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(digits);
    let invalid = || {
        GcpError::Config(format!(
            "line {line}: {key} must be a positive duration such as 30s, 500ms or 2m, got '{value}'"
        ))
    };
    let number: u64 = number.parse().map_err(|_| invalid())?;
    let timeout = match unit.trim() {
        "" | "s" => Duration::from_secs(number),
        "ms" => Duration::from_millis(number),
        "m" => Duration::from_secs(number.saturating_mul(60)),
        _ => return Err(invalid()),
    };
    if timeout.is_zero() {
        return Err(invalid());
    }
    Ok(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_upstream_file() {
        let text = r#"
# written by kube-up
[Global]
project-id = my-proj
network-project-id = host-proj
network-name = projects/host-proj/global/networks/vpc
subnetwork-name = nodes
node-tags = gke-c1-node
node-tags = extra
node-instance-prefix = gke-c1
multizone = true
local-zone = europe-west1-b
token-url = nil
api-endpoint = http://127.0.0.1:9999/compute/v1/
alpha-features = ILBSubsets
some-new-key = 1
"#;
        let config = CloudConfig::parse(text).unwrap();
        assert_eq!(config.project_id, "my-proj");
        assert_eq!(config.network_project(), "host-proj");
        assert_eq!(config.network_name, "vpc");
        assert_eq!(config.subnetwork_name.as_deref(), Some("nodes"));
        assert_eq!(config.node_tags, ["gke-c1-node", "extra"]);
        assert!(config.multizone);
        assert_eq!(config.region, "europe-west1");
        assert_eq!(
            config.api_endpoint.as_deref(),
            Some("http://127.0.0.1:9999")
        );
        assert!(config.anonymous());
        assert_eq!(config.unknown_keys, ["some-new-key"]);
    }

    #[test]
    fn region_key_wins_and_defaults_apply() {
        let config = CloudConfig::parse(
            "[global]\nproject-id = p\nregion = us-east1\nlocal-zone = us-central1-a\n",
        )
        .unwrap();
        assert_eq!(config.region, "us-east1");
        assert_eq!(config.network_name, "default");
        assert!(!config.anonymous());
        assert!(config.node_tags.is_empty());
        assert_eq!(config.request_timeout(), DEFAULT_REQUEST_TIMEOUT);
    }

    /// `request-timeout` in each accepted spelling, and the values refused.
    #[test]
    fn request_timeout_spellings() {
        let parse = |value: &str| {
            CloudConfig::parse(&format!(
                "[global]\nproject-id = p\nregion = r\nrequest-timeout = {value}\n"
            ))
            .map(|c| c.request_timeout())
        };
        for (value, expected) in [
            ("45", Duration::from_secs(45)),
            ("45s", Duration::from_secs(45)),
            ("1500ms", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("\"10s\"", Duration::from_secs(10)),
        ] {
            assert_eq!(parse(value).unwrap(), expected, "{value}");
        }
        for value in ["0", "0s", "-1s", "10h", "s", "ten", "1.5s"] {
            assert!(parse(value).is_err(), "{value} was accepted");
        }
    }

    /// The shared gcfg reader's rules as they reach `gce.conf`: comments after values, a bare
    /// bool key, the last duplicate winning, other sections reported as unknown, and errors
    /// naming the line.
    #[test]
    fn follows_the_shared_ini_rules() {
        let text = "[global]\nproject-id = first\nproject-id = \"p # not a comment\" # comment\n\
                    regional\nregion = r ; trailing\n[Other]\nfoo = 1\n";
        let config = CloudConfig::parse(text).unwrap();
        assert_eq!(config.project_id, "p # not a comment");
        assert!(config.regional);
        assert!(!config.multizone);
        assert_eq!(config.region, "r");
        assert_eq!(config.unknown_keys, ["[other] foo"]);

        let err = CloudConfig::parse("[global]\nproject-id = p\nregion = r\nmultizone = maybe\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("gce.conf:4") && err.contains("multizone"),
            "{err}"
        );
        // A bare key is `true` for a bool only; a string key needs a value.
        assert!(CloudConfig::parse("[global]\nproject-id\nregion = r\n").is_err());
    }

    #[test]
    fn rejects_what_cannot_work() {
        let cases = [
            "[global]\nlocal-zone = us-central1-a\n",
            "[global]\nproject-id = p\n",
            "[global]\nproject-id = p\nlocal-zone = nozone\n",
            "[global]\nproject-id = p\nlocal-zone = us-central1-a\nmultizone = maybe\n",
        ];
        for text in cases {
            assert!(CloudConfig::parse(text).is_err(), "{text}");
        }
    }
}

//! The cloud-config file (`--cloud-config`), in the gcfg/ini format the upstream AWS provider
//! reads, plus kube-lb's own `[KubeLB]` section for rate limits and retries.
//!
//! `[Global]` keys that change behaviour:
//! - `KubernetesClusterID` (or legacy `KubernetesClusterTag`, which also adds the legacy
//!   `KubernetesCluster=<id>` tag): the cluster ID used in ownership tags; defaults to the
//!   controller's `--cluster-name`.
//! - `DisableSecurityGroupIngress`: never touch node security groups.
//! - `ElbSecurityGroup`: one pre-existing group for every Classic ELB instead of `k8s-elb-<name>`.
//! - `VPC`: the VPC (otherwise taken from the backend instances).
//! - `SubnetID`: fallback subnet when no subnet is tagged for load balancers.
//! - `NLBSecurityGroupMode`: only `Managed` (or empty) is accepted, as upstream; see the crate
//!   docs for what kube-lb does with it.
//!
//! Accepted and ignored (they concern node/zone handling or cross-account roles that kube-lb
//! takes from the standard AWS credential chain instead): `Zone`, `RoleARN`, `SourceARN`,
//! `DisableStrictZoneCheck`, `NodeIPFamilies`, `TagNodeIPAddresses`,
//! `ClusterServiceLoadBalancerHealthProbeMode`, `ClusterServiceSharedLoadBalancerHealthProbePort`,
//! `ClusterServiceSharedLoadBalancerHealthProbePath`, and every `[ServiceOverride …]` section
//! (endpoints come from `AWS_ENDPOINT_URL*`). Any other `[Global]` key is an error.
//!
//! `[KubeLB]`: `RateLimit = <family> <per-second> <burst>` (repeatable; families `ec2-read`,
//! `ec2-mutate`, `elb-read`, `elb-mutate`, `elbv2-read`, `elbv2-mutate`; per-second may be a
//! fraction; defaults in [`crate::calls::default_rate_limits`]), `MaxAttempts` (default 4),
//! `RetryBaseDelayMillis` (200), `RetryMaxDelayMillis` (5000), `FullResyncSeconds`,
//! `RequestTimeoutMillis` (30000: how long one attempt of one call may take before it fails
//! as a transient `Timeout`; above 0). The limits
//! and the retry policy are `providers/core`'s, shared with every provider: only throttling,
//! 5xx and transport failures are retried in place, with capped, equal-jitter backoff.

use std::path::Path;
use std::time::Duration;

use crate::calls::{Family, RateLimit, RateLimits, RetryPolicy, default_rate_limits};
use crate::error::AwsError;

/// `NLBSecurityGroupMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NlbSecurityGroupMode {
    /// Unset: NLBs get no security group; node rules are CIDR rules (upstream default).
    #[default]
    Unmanaged,
    /// `Managed`: honour BYO `security-groups` on new NLBs.
    Managed,
}

/// Everything the cloud-config file configures.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudConfig {
    /// Cluster ID for ownership tags; `None` means "use the cluster name".
    pub cluster_id: Option<String>,
    /// True when the ID came from the legacy `KubernetesClusterTag` key.
    pub legacy_cluster_tag: bool,
    /// Skip all node security-group rule management.
    pub disable_security_group_ingress: bool,
    /// One shared, pre-existing security group for every Classic ELB.
    pub elb_security_group: Option<String>,
    /// The VPC to use.
    pub vpc: Option<String>,
    /// Fallback subnet when discovery finds none.
    pub subnet_id: Option<String>,
    /// NLB security-group mode.
    pub nlb_security_group_mode: NlbSecurityGroupMode,
    /// Per-family rate limits.
    pub rate_limits: RateLimits,
    /// Retry policy for transient errors.
    pub retry: RetryPolicy,
    /// How long a verified load balancer is trusted before an ensure re-reads everything
    /// (attributes, tags, security-group rules) to heal drift made outside kube-lb.
    pub full_resync: Duration,
    /// `RequestTimeoutMillis`: how long one attempt of one call (connect, answer, body) may
    /// take before it fails as a transient `Timeout`, so an endpoint that accepts a request and
    /// never answers cannot hold a Service's sync.
    pub request_timeout: Duration,
}

/// How long one call attempt may take unless `RequestTimeoutMillis` says otherwise: ELB and
/// EC2 answer in well under a second, the slowest calls (CreateLoadBalancer) in a few.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for CloudConfig {
    fn default() -> Self {
        CloudConfig {
            cluster_id: None,
            legacy_cluster_tag: false,
            disable_security_group_ingress: false,
            elb_security_group: None,
            vpc: None,
            subnet_id: None,
            nlb_security_group_mode: NlbSecurityGroupMode::Unmanaged,
            rate_limits: default_rate_limits(),
            retry: RetryPolicy::default(),
            full_resync: Duration::from_secs(600),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

const IGNORED_GLOBAL_KEYS: &[&str] = &[
    "zone",
    "rolearn",
    "sourcearn",
    "disablestrictzonecheck",
    "nodeipfamilies",
    "tagnodeipaddresses",
    "clusterserviceloadbalancerhealthprobemode",
    "clusterservicesharedloadbalancerhealthprobeport",
    "clusterservicesharedloadbalancerhealthprobepath",
];

fn parse_bool(line: usize, key: &str, value: &str) -> Result<bool, AwsError> {
    // gcfg accepts these spellings (case-insensitive); a bare key means true.
    match value.to_ascii_lowercase().as_str() {
        "" | "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(AwsError::ConfigParse {
            line,
            message: format!("{key}: {value:?} is not a boolean (true/false)"),
        }),
    }
}

fn parse_number<T: std::str::FromStr>(line: usize, key: &str, value: &str) -> Result<T, AwsError> {
    value.parse().map_err(|_| AwsError::ConfigParse {
        line,
        message: format!("{key}: {value:?} is not a number"),
    })
}

fn unquote(value: &str) -> &str {
    let value = value.trim();
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

impl CloudConfig {
    /// Reads and parses a file; `None` gives the defaults.
    pub fn load(path: Option<&Path>) -> Result<Self, AwsError> {
        match path {
            None => Ok(CloudConfig::default()),
            Some(path) => {
                let text =
                    std::fs::read_to_string(path).map_err(|source| AwsError::ConfigRead {
                        path: path.display().to_string(),
                        source,
                    })?;
                CloudConfig::parse(&text)
            }
        }
    }

    /// Parses the file contents.
    pub fn parse(text: &str) -> Result<Self, AwsError> {
        let mut config = CloudConfig::default();
        let mut section = String::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
                continue;
            }
            if let Some(header) = trimmed.strip_prefix('[') {
                let header = header
                    .strip_suffix(']')
                    .ok_or_else(|| AwsError::ConfigParse {
                        line,
                        message: format!("unterminated section header {trimmed:?}"),
                    })?;
                // `[ServiceOverride "1"]` → section name `serviceoverride`.
                section = header
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .to_ascii_lowercase();
                if !matches!(section.as_str(), "global" | "kubelb" | "serviceoverride") {
                    return Err(AwsError::ConfigParse {
                        line,
                        message: format!("unknown section [{header}]"),
                    });
                }
                continue;
            }
            let (key, value) = match trimmed.split_once('=') {
                Some((k, v)) => (k.trim(), unquote(v)),
                None => (trimmed, ""),
            };
            match section.as_str() {
                "global" => config.global_key(line, key, value)?,
                "kubelb" => config.kube_lb_key(line, key, value)?,
                "serviceoverride" => {}
                _ => {
                    return Err(AwsError::ConfigParse {
                        line,
                        message: format!("key {key:?} outside of a section"),
                    });
                }
            }
        }
        Ok(config)
    }

    fn global_key(&mut self, line: usize, key: &str, value: &str) -> Result<(), AwsError> {
        match key.to_ascii_lowercase().as_str() {
            "kubernetesclusterid" => self.cluster_id = non_empty(value),
            "kubernetesclustertag" => {
                if self.cluster_id.is_none() {
                    self.cluster_id = non_empty(value);
                    self.legacy_cluster_tag = self.cluster_id.is_some();
                }
            }
            "disablesecuritygroupingress" => {
                self.disable_security_group_ingress = parse_bool(line, key, value)?;
            }
            "elbsecuritygroup" => self.elb_security_group = non_empty(value),
            "vpc" => self.vpc = non_empty(value),
            "subnetid" => self.subnet_id = non_empty(value),
            "nlbsecuritygroupmode" => {
                self.nlb_security_group_mode = match value {
                    "" => NlbSecurityGroupMode::Unmanaged,
                    "Managed" => NlbSecurityGroupMode::Managed,
                    other => {
                        return Err(AwsError::ConfigParse {
                            line,
                            message: format!(
                                "NLBSecurityGroupMode: {other:?} is not supported (only \"Managed\")"
                            ),
                        });
                    }
                }
            }
            lower if IGNORED_GLOBAL_KEYS.contains(&lower) => {
                tracing::info!(
                    key,
                    "cloud-config key accepted for compatibility and ignored"
                );
            }
            _ => {
                return Err(AwsError::ConfigParse {
                    line,
                    message: format!("unknown [Global] key {key:?}"),
                });
            }
        }
        Ok(())
    }

    fn kube_lb_key(&mut self, line: usize, key: &str, value: &str) -> Result<(), AwsError> {
        match key.to_ascii_lowercase().as_str() {
            "ratelimit" => {
                let parts: Vec<&str> = value.split_whitespace().collect();
                let [family, per_second, burst] = parts.as_slice() else {
                    return Err(AwsError::ConfigParse {
                        line,
                        message: format!("RateLimit: {value:?} is not \"<family> <qps> <burst>\""),
                    });
                };
                let family = Family::from_name(family).ok_or_else(|| AwsError::ConfigParse {
                    line,
                    message: format!(
                        "RateLimit: unknown family {family:?} (one of {})",
                        Family::ALL.map(Family::name).join(", ")
                    ),
                })?;
                let per_second: f64 = parse_number(line, key, per_second)?;
                if !(per_second.is_finite() && per_second > 0.0) {
                    return Err(AwsError::ConfigParse {
                        line,
                        message: format!("RateLimit: {per_second} requests/s must be above 0"),
                    });
                }
                let burst: u32 = parse_number(line, key, burst)?;
                self.rate_limits = std::mem::take(&mut self.rate_limits).with_family(
                    family.name(),
                    RateLimit::fractional(per_second, burst.max(1)),
                );
            }
            "maxattempts" => {
                self.retry.max_attempts = parse_number::<u32>(line, key, value)?.max(1)
            }
            "retrybasedelaymillis" => {
                self.retry.base = Duration::from_millis(parse_number(line, key, value)?);
            }
            "retrymaxdelaymillis" => {
                self.retry.max = Duration::from_millis(parse_number(line, key, value)?);
            }
            "fullresyncseconds" => {
                self.full_resync = Duration::from_secs(parse_number(line, key, value)?);
            }
            "requesttimeoutmillis" => {
                let millis: u64 = parse_number(line, key, value)?;
                if millis == 0 {
                    return Err(AwsError::ConfigParse {
                        line,
                        message: "RequestTimeoutMillis: must be above 0".to_string(),
                    });
                }
                self.request_timeout = Duration::from_millis(millis);
            }
            _ => {
                return Err(AwsError::ConfigParse {
                    line,
                    message: format!("unknown [KubeLB] key {key:?}"),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::{Access, Service};

    #[test]
    fn parses_upstream_global_keys() {
        let config = CloudConfig::parse(
            "; upstream file\n[Global]\nKubernetesClusterID = prod-1\nDisableSecurityGroupIngress = true\n\
             ElbSecurityGroup=sg-123\nVPC = \"vpc-9\"\nSubnetID = subnet-1\nNLBSecurityGroupMode = Managed\n\
             Zone = us-east-1a\n[ServiceOverride \"1\"]\nService = ec2\nURL = https://example.invalid\n",
        )
        .unwrap();
        assert_eq!(config.cluster_id.as_deref(), Some("prod-1"));
        assert!(!config.legacy_cluster_tag);
        assert!(config.disable_security_group_ingress);
        assert_eq!(config.elb_security_group.as_deref(), Some("sg-123"));
        assert_eq!(config.vpc.as_deref(), Some("vpc-9"));
        assert_eq!(config.subnet_id.as_deref(), Some("subnet-1"));
        assert_eq!(
            config.nlb_security_group_mode,
            NlbSecurityGroupMode::Managed
        );
    }

    #[test]
    fn legacy_cluster_tag_sets_legacy_mode_unless_id_given() {
        let legacy = CloudConfig::parse("[Global]\nKubernetesClusterTag = old\n").unwrap();
        assert_eq!(legacy.cluster_id.as_deref(), Some("old"));
        assert!(legacy.legacy_cluster_tag);
        let both =
            CloudConfig::parse("[global]\nkubernetesclusterid = new\nKubernetesClusterTag = old\n")
                .unwrap();
        assert_eq!(both.cluster_id.as_deref(), Some("new"));
        assert!(!both.legacy_cluster_tag);
    }

    #[test]
    fn rejects_bad_values_with_line_numbers() {
        let cases = [
            (
                "[Global]\nNLBSecurityGroupMode = Shared\n",
                2,
                "NLBSecurityGroupMode",
            ),
            (
                "[Global]\nDisableSecurityGroupIngress = maybe\n",
                2,
                "boolean",
            ),
            ("[Global]\n\nBogus = 1\n", 3, "Bogus"),
            ("Key = 1\n", 1, "outside"),
            ("[KubeLB]\nRateLimit = s3-read 1 1\n", 2, "s3-read"),
            ("[KubeLB]\nRateLimit = ec2-read 0 1\n", 2, "above 0"),
            ("[KubeLB]\nRequestTimeoutMillis = 0\n", 2, "above 0"),
            ("[KubeLB]\nRequestTimeoutMillis = 2s\n", 2, "not a number"),
            ("[Other]\n", 1, "unknown section"),
        ];
        for (text, want_line, needle) in cases {
            match CloudConfig::parse(text) {
                Err(AwsError::ConfigParse { line, message }) => {
                    assert_eq!(line, want_line, "{text}");
                    assert!(
                        message.contains(needle),
                        "{message} should mention {needle}"
                    );
                }
                other => panic!("{text}: expected a parse error, got {other:?}"),
            }
        }
    }

    #[test]
    fn kube_lb_section_sets_limits_and_retries() {
        let config = CloudConfig::parse(
            "[KubeLB]\nRateLimit = elbv2-mutate 2.5 3\nMaxAttempts = 4\nRetryBaseDelayMillis = 10\n\
             FullResyncSeconds = 30\n",
        )
        .unwrap();
        let family = Family {
            service: Service::Elbv2,
            access: Access::Mutate,
        };
        assert_eq!(
            config.rate_limits.limit_for(family.name()),
            RateLimit {
                per_second: 2.5,
                burst: 3
            }
        );
        // The other families keep their defaults.
        assert_eq!(
            config.rate_limits.limit_for("elb-read"),
            default_rate_limits().limit_for("elb-read")
        );
        assert_eq!(config.retry.max_attempts, 4);
        assert_eq!(config.retry.base, Duration::from_millis(10));
        assert_eq!(config.full_resync, Duration::from_secs(30));
    }

    /// The attempt timeout: 30 s unless `RequestTimeoutMillis` sets it.
    #[test]
    fn request_timeout_defaults_and_is_configurable() {
        assert_eq!(
            CloudConfig::default().request_timeout,
            Duration::from_secs(30)
        );
        let config = CloudConfig::parse("[KubeLB]\nRequestTimeoutMillis = 1500\n").unwrap();
        assert_eq!(config.request_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(CloudConfig::parse("").unwrap(), CloudConfig::default());
        assert_eq!(CloudConfig::load(None).unwrap(), CloudConfig::default());
    }
}

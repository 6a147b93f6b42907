//! `cloud.conf`, the file cloud-provider-openstack users already have: `[Global]` for Keystone
//! and `[LoadBalancer]` for Octavia/Neutron defaults. Parsed strictly where a wrong value
//! would build the wrong thing (every error names the key and the line); keys kube-lb does
//! not use are logged and ignored, so an upstream file works unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_annotations::LbMethod;

/// A `cloud.conf` that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A line that is neither a section header, a `key = value` pair, a comment nor blank.
    #[error(
        "cloud.conf line {line}: cannot parse {text:?} (expected `[Section]` or `key = value`)"
    )]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// A value of the wrong type or outside its range.
    #[error("cloud.conf line {line}: [{section}] {key} = {value:?}: {reason}")]
    Value {
        /// 1-based line number.
        line: usize,
        /// The section.
        section: String,
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A required key is absent.
    #[error("cloud.conf: [{section}] {key} is required: {reason}")]
    Missing {
        /// The section.
        section: &'static str,
        /// The key.
        key: &'static str,
        /// Why it is needed.
        reason: &'static str,
    },
}

/// How kube-lb authenticates to Keystone.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `username`/`password` scoped to a project.
    Password {
        /// `username`.
        username: String,
        /// `password`.
        password: String,
        /// `user-domain-name` (default `Default`).
        user_domain_name: String,
        /// `project-id` (preferred over the name when both are given).
        project_id: Option<String>,
        /// `project-name` (alias `tenant-name`).
        project_name: Option<String>,
        /// `project-domain-name` (default: the user's domain).
        project_domain_name: String,
    },
    /// `application-credential-id`/`application-credential-secret` (the credential carries
    /// its project).
    ApplicationCredential {
        /// `application-credential-id`.
        id: String,
        /// `application-credential-secret`.
        secret: String,
    },
}

impl std::fmt::Debug for Credentials {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password {
                username,
                user_domain_name,
                project_id,
                project_name,
                ..
            } => f
                .debug_struct("Password")
                .field("username", username)
                .field("user_domain_name", user_domain_name)
                .field("project_id", project_id)
                .field("project_name", project_name)
                .finish_non_exhaustive(),
            Credentials::ApplicationCredential { id, .. } => f
                .debug_struct("ApplicationCredential")
                .field("id", id)
                .finish_non_exhaustive(),
        }
    }
}

/// `[Global]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalConfig {
    /// `auth-url`: the Keystone v3 endpoint.
    pub auth_url: String,
    /// The credentials.
    pub credentials: Credentials,
    /// `region`: which catalog endpoints to use (`None`: the first of each type).
    pub region: Option<String>,
    /// `ca-file`: a PEM bundle to trust in addition to the system roots.
    pub ca_file: Option<String>,
}

/// `[LoadBalancer]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerConfig {
    /// `floating-network-id`: where floating IPs come from (`None`: the first external network).
    pub floating_network_id: Option<String>,
    /// `subnet-id`: the VIP subnet.
    pub subnet_id: Option<String>,
    /// `member-subnet-id`: the members' subnet (default: the VIP subnet).
    pub member_subnet_id: Option<String>,
    /// `lb-method` (default `ROUND_ROBIN`).
    pub lb_method: LbMethod,
    /// `create-monitor` (default false; `externalTrafficPolicy: Local` always gets one).
    pub create_monitor: bool,
    /// `monitor-delay` (default 5 s).
    pub monitor_delay: Duration,
    /// `monitor-timeout` (default 3 s).
    pub monitor_timeout: Duration,
    /// `monitor-max-retries` (default 1).
    pub monitor_max_retries: u8,
    /// `monitor-max-retries-down` (default 3).
    pub monitor_max_retries_down: u8,
    /// `internal-lb`: every Service is internal (default false).
    pub internal_lb: bool,
    /// `lb-provider` (default: the cloud's default, usually `amphora`).
    pub lb_provider: Option<String>,
}

impl Default for LoadBalancerConfig {
    fn default() -> Self {
        LoadBalancerConfig {
            floating_network_id: None,
            subnet_id: None,
            member_subnet_id: None,
            lb_method: LbMethod::RoundRobin,
            create_monitor: false,
            monitor_delay: Duration::from_secs(5),
            monitor_timeout: Duration::from_secs(3),
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            internal_lb: false,
            lb_provider: None,
        }
    }
}

/// A parsed `cloud.conf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudConfig {
    /// `[Global]`.
    pub global: GlobalConfig,
    /// `[LoadBalancer]`.
    pub load_balancer: LoadBalancerConfig,
}

/// One `key = value` with where it came from.
struct Entry {
    value: String,
    line: usize,
}

type Sections = BTreeMap<String, BTreeMap<String, Entry>>;

/// Splits the gcfg/INI text into sections of keys (lower-cased, as gcfg matches them).
fn sections(text: &str) -> Result<Sections, ConfigError> {
    let mut sections: Sections = BTreeMap::new();
    let mut current = String::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = header.trim().to_string();
            sections.entry(current.clone()).or_default();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(ConfigError::Syntax {
                line: index + 1,
                text: raw.to_string(),
            });
        };
        if current.is_empty() {
            return Err(ConfigError::Syntax {
                line: index + 1,
                text: raw.to_string(),
            });
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        sections.entry(current.clone()).or_default().insert(
            key.trim().to_ascii_lowercase(),
            Entry {
                value: value.to_string(),
                line: index + 1,
            },
        );
    }
    Ok(sections)
}

struct Section<'a> {
    name: &'static str,
    entries: Option<&'a BTreeMap<String, Entry>>,
}

impl Section<'_> {
    fn string(&self, key: &str) -> Option<String> {
        self.entries
            .and_then(|e| e.get(key))
            .map(|e| e.value.clone())
            .filter(|v| !v.is_empty())
    }

    fn invalid(&self, key: &str, reason: &str) -> ConfigError {
        let entry = self.entries.and_then(|e| e.get(key));
        ConfigError::Value {
            line: entry.map(|e| e.line).unwrap_or_default(),
            section: self.name.to_string(),
            key: key.to_string(),
            value: entry.map(|e| e.value.clone()).unwrap_or_default(),
            reason: reason.to_string(),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        match self.string(key).map(|v| v.to_ascii_lowercase()).as_deref() {
            None => Ok(default),
            Some("true" | "yes" | "on" | "1") => Ok(true),
            Some("false" | "no" | "off" | "0") => Ok(false),
            Some(_) => Err(self.invalid(key, "expected true or false")),
        }
    }

    fn number(&self, key: &str, default: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        match self.string(key) {
            None => Ok(default),
            Some(value) => value
                .parse::<u64>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .ok_or_else(|| {
                    self.invalid(key, &format!("expected a whole number from {min} to {max}"))
                }),
        }
    }

    /// A duration: gcfg's Go duration text (`5s`, `500ms`, `1m`) or bare seconds.
    fn duration(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        match self.string(key) {
            None => Ok(default),
            Some(value) => value
                .parse::<u64>()
                .map(Duration::from_secs)
                .or_else(|_| humantime::parse_duration(&value))
                .map_err(|_| self.invalid(key, "expected a duration such as 5s")),
        }
    }
}

impl CloudConfig {
    /// Parses `cloud.conf` text.
    pub fn parse(text: &str) -> Result<CloudConfig, ConfigError> {
        let sections = sections(text)?;
        for (name, entries) in &sections {
            let known: &[&str] = match name.to_ascii_lowercase().as_str() {
                "global" => &[
                    "auth-url",
                    "username",
                    "user-id",
                    "password",
                    "user-domain-name",
                    "user-domain-id",
                    "project-name",
                    "tenant-name",
                    "project-id",
                    "tenant-id",
                    "project-domain-name",
                    "project-domain-id",
                    "domain-name",
                    "application-credential-id",
                    "application-credential-secret",
                    "application-credential-name",
                    "region",
                    "ca-file",
                ],
                "loadbalancer" => &[
                    "floating-network-id",
                    "subnet-id",
                    "member-subnet-id",
                    "lb-method",
                    "create-monitor",
                    "monitor-delay",
                    "monitor-timeout",
                    "monitor-max-retries",
                    "monitor-max-retries-down",
                    "internal-lb",
                    "lb-provider",
                ],
                _ => &[],
            };
            for key in entries.keys().filter(|k| !known.contains(&k.as_str())) {
                tracing::warn!(section = %name, key = %key, "cloud.conf key not used by kube-lb; ignored");
            }
        }
        let find = |name: &'static str| Section {
            name,
            entries: sections
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v),
        };
        let global = find("Global");
        let lb = find("LoadBalancer");
        let auth_url = global.string("auth-url").ok_or(ConfigError::Missing {
            section: "Global",
            key: "auth-url",
            reason: "the Keystone v3 endpoint",
        })?;
        let credentials = match (
            global.string("application-credential-id"),
            global.string("username"),
        ) {
            (Some(id), _) => Credentials::ApplicationCredential {
                id,
                secret: global.string("application-credential-secret").ok_or(
                    ConfigError::Missing {
                        section: "Global",
                        key: "application-credential-secret",
                        reason: "application-credential-id is set",
                    },
                )?,
            },
            (None, Some(username)) => {
                let user_domain_name = global
                    .string("user-domain-name")
                    .or_else(|| global.string("domain-name"))
                    .unwrap_or_else(|| "Default".to_string());
                let project_id = global
                    .string("project-id")
                    .or_else(|| global.string("tenant-id"));
                let project_name = global
                    .string("project-name")
                    .or_else(|| global.string("tenant-name"));
                if project_id.is_none() && project_name.is_none() {
                    return Err(ConfigError::Missing {
                        section: "Global",
                        key: "project-id",
                        reason: "password authentication needs a project (project-id or project-name)",
                    });
                }
                Credentials::Password {
                    username,
                    password: global.string("password").ok_or(ConfigError::Missing {
                        section: "Global",
                        key: "password",
                        reason: "username is set",
                    })?,
                    project_domain_name: global
                        .string("project-domain-name")
                        .unwrap_or_else(|| user_domain_name.clone()),
                    user_domain_name,
                    project_id,
                    project_name,
                }
            }
            (None, None) => {
                return Err(ConfigError::Missing {
                    section: "Global",
                    key: "username",
                    reason: "set username/password or application-credential-id/secret",
                });
            }
        };
        let defaults = LoadBalancerConfig::default();
        let lb_method = match lb.string("lb-method") {
            None => defaults.lb_method,
            Some(value) => value.parse::<LbMethod>().map_err(|_| {
                lb.invalid(
                    "lb-method",
                    "expected ROUND_ROBIN, LEAST_CONNECTIONS, SOURCE_IP or SOURCE_IP_PORT",
                )
            })?,
        };
        let monitor_delay = lb.duration("monitor-delay", defaults.monitor_delay)?;
        let monitor_timeout = lb.duration("monitor-timeout", defaults.monitor_timeout)?;
        if monitor_timeout > monitor_delay {
            return Err(lb.invalid(
                "monitor-timeout",
                "Octavia requires the timeout to be at most monitor-delay",
            ));
        }
        let load_balancer = LoadBalancerConfig {
            floating_network_id: lb.string("floating-network-id"),
            subnet_id: lb.string("subnet-id"),
            member_subnet_id: lb.string("member-subnet-id"),
            lb_method,
            create_monitor: lb.bool("create-monitor", defaults.create_monitor)?,
            monitor_delay,
            monitor_timeout,
            monitor_max_retries: lb.number("monitor-max-retries", 1, 1, 10)? as u8,
            monitor_max_retries_down: lb.number("monitor-max-retries-down", 3, 1, 10)? as u8,
            internal_lb: lb.bool("internal-lb", defaults.internal_lb)?,
            lb_provider: lb.string("lb-provider"),
        };
        Ok(CloudConfig {
            global: GlobalConfig {
                auth_url,
                credentials,
                region: global.string("region"),
                ca_file: global.string("ca-file"),
            },
            load_balancer,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[Global]\nauth-url = http://keystone/v3\nusername = u\npassword = p\nproject-name = demo\n";

    #[test]
    fn password_and_application_credentials_parse() {
        let config = CloudConfig::parse(MINIMAL).expect("valid");
        assert_eq!(
            config.global.credentials,
            Credentials::Password {
                username: "u".into(),
                password: "p".into(),
                user_domain_name: "Default".into(),
                project_id: None,
                project_name: Some("demo".into()),
                project_domain_name: "Default".into(),
            }
        );
        assert_eq!(config.load_balancer, LoadBalancerConfig::default());

        let text = "[Global]\nauth-url=\"http://k/v3\"\napplication-credential-id = abc\napplication-credential-secret = s3cret\nregion = RegionTwo\n\
                    [LoadBalancer]\nfloating-network-id = fn\nsubnet-id = sn\nlb-method = SOURCE_IP\ncreate-monitor = true\nmonitor-delay = 10s\nmonitor-timeout = 2\ninternal-lb = true\nlb-provider = ovn\n\
                    [LoadBalancerClass \"fast\"]\nsubnet-id = other\n";
        let config = CloudConfig::parse(text).expect("valid");
        assert_eq!(config.global.auth_url, "http://k/v3");
        assert_eq!(config.global.region.as_deref(), Some("RegionTwo"));
        assert!(
            matches!(config.global.credentials, Credentials::ApplicationCredential { ref id, .. } if id == "abc")
        );
        let lb = config.load_balancer;
        assert_eq!(lb.floating_network_id.as_deref(), Some("fn"));
        assert_eq!(lb.lb_method, LbMethod::SourceIp);
        assert!(lb.create_monitor && lb.internal_lb);
        assert_eq!(lb.monitor_delay, Duration::from_secs(10));
        assert_eq!(lb.monitor_timeout, Duration::from_secs(2));
        assert_eq!(lb.lb_provider.as_deref(), Some("ovn"));
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let cases = [
            ("[Global]\nauth-url http://x\n", "line 2", "cannot parse"),
            (
                "[Global]\nusername = u\npassword = p\nproject-name = d\n",
                "auth-url",
                "required",
            ),
            (
                "[Global]\nauth-url = x\nusername = u\nproject-name = d\n",
                "password",
                "required",
            ),
            (
                "[Global]\nauth-url = x\nusername = u\npassword = p\n",
                "project-id",
                "project",
            ),
            (
                "[Global]\nauth-url = x\napplication-credential-id = i\n",
                "application-credential-secret",
                "required",
            ),
            ("[Global]\nauth-url = x\n", "username", "required"),
            (
                &format!("{MINIMAL}[LoadBalancer]\ncreate-monitor = maybe\n"),
                "line 7",
                "create-monitor",
            ),
            (
                &format!("{MINIMAL}[LoadBalancer]\nlb-method = RANDOM\n"),
                "lb-method",
                "ROUND_ROBIN",
            ),
            (
                &format!("{MINIMAL}[LoadBalancer]\nmonitor-max-retries = 11\n"),
                "monitor-max-retries",
                "1 to 10",
            ),
            (
                &format!("{MINIMAL}[LoadBalancer]\nmonitor-delay = 2s\nmonitor-timeout = 3s\n"),
                "monitor-timeout",
                "at most",
            ),
            ("auth-url = x\n", "line 1", "cannot parse"),
        ];
        for (text, key, words) in cases {
            let error = CloudConfig::parse(text).expect_err(text).to_string();
            assert!(
                error.contains(key) && error.contains(words),
                "{text:?} -> {error}"
            );
        }
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let config = CloudConfig::parse(MINIMAL).expect("valid");
        assert!(!format!("{config:?}").contains("password: \"p\""));
    }
}

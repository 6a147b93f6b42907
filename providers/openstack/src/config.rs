//! `cloud.conf`, the file cloud-provider-openstack users already have: `[Global]` for Keystone
//! and `[LoadBalancer]` for Octavia/Neutron defaults. Parsed strictly where a wrong value
//! would build the wrong thing (every error names the key and the line); keys kube-lb does
//! not use are logged and ignored, so an upstream file works unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use kube_lb_provider_core::config_file::{self, ConfigFileError, Document, Entry};

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
    /// A `clouds.yaml` that cannot be used.
    #[error("{path} line {line}: {key}: {reason}")]
    CloudsYaml {
        /// The file.
        path: String,
        /// 1-based line (0: not tied to one line).
        line: usize,
        /// The key path (`clouds.<name>.auth.auth_url`).
        key: String,
        /// What is wrong.
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

/// A Keystone domain, by id or by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Domain {
    /// `*-domain-id`.
    Id(String),
    /// `*-domain-name`.
    Name(String),
}

impl Domain {
    fn body(&self) -> serde_json::Value {
        match self {
            Domain::Id(id) => serde_json::json!({"id": id}),
            Domain::Name(name) => serde_json::json!({"name": name}),
        }
    }
}

/// A Keystone user, by id or by name within a domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum User {
    /// `user-id`.
    Id(String),
    /// `username` in `user-domain-name`/`user-domain-id`.
    Name {
        /// The user name.
        name: String,
        /// Its domain.
        domain: Domain,
    },
}

impl User {
    /// The `user` object of a token request (without the password).
    pub fn body(&self) -> serde_json::Value {
        match self {
            User::Id(id) => serde_json::json!({"id": id}),
            User::Name { name, domain } => {
                serde_json::json!({"name": name, "domain": domain.body()})
            }
        }
    }
}

/// The project a password token is scoped to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Project {
    /// `project-id` (alias `tenant-id`).
    Id(String),
    /// `project-name` (alias `tenant-name`) in `project-domain-name`/`project-domain-id`.
    Name {
        /// The project name.
        name: String,
        /// Its domain.
        domain: Domain,
    },
}

impl Project {
    /// The `scope.project` object of a token request.
    pub fn body(&self) -> serde_json::Value {
        match self {
            Project::Id(id) => serde_json::json!({"id": id}),
            Project::Name { name, domain } => {
                serde_json::json!({"name": name, "domain": domain.body()})
            }
        }
    }
}

/// How kube-lb authenticates to Keystone.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A user and password scoped to a project.
    Password {
        /// The user.
        user: User,
        /// `password`.
        password: String,
        /// The project.
        project: Project,
    },
    /// An application credential (it carries its project): by id, or by name with its user.
    ApplicationCredential {
        /// `application-credential-id`.
        id: Option<String>,
        /// `application-credential-name` (needs the user).
        name: Option<String>,
        /// The owning user, for a credential named rather than identified.
        user: Option<User>,
        /// `application-credential-secret`.
        secret: String,
    },
}

impl std::fmt::Debug for Credentials {
    // Secrets never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Password { user, project, .. } => f
                .debug_struct("Password")
                .field("user", user)
                .field("project", project)
                .finish_non_exhaustive(),
            Credentials::ApplicationCredential { id, name, user, .. } => f
                .debug_struct("ApplicationCredential")
                .field("id", id)
                .field("name", name)
                .field("user", user)
                .finish_non_exhaustive(),
        }
    }
}

/// Where the credentials came from (named in errors and logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialSource {
    /// `[Global]` of `cloud.conf`.
    CloudConf,
    /// The named cloud of a `clouds.yaml`.
    CloudsYaml {
        /// The file.
        path: String,
        /// The cloud's name.
        cloud: String,
    },
}

/// `[Global]`, or the `clouds.yaml` cloud it points at.
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
    /// Where these settings came from.
    pub source: CredentialSource,
}

/// The network settings a `[LoadBalancerClass "name"]` section gives (they win over the
/// Service's annotations, as upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadBalancerClass {
    /// `floating-network-id`.
    pub floating_network_id: Option<String>,
    /// `floating-subnet-id`.
    pub floating_subnet_id: Option<String>,
    /// `floating-subnet` (name; `*` matches any run of characters).
    pub floating_subnet: Option<String>,
    /// `floating-subnet-tags` (comma separated; all must be present).
    pub floating_subnet_tags: Vec<String>,
    /// `network-id`: the VIP network.
    pub network_id: Option<String>,
    /// `subnet-id`: the VIP subnet.
    pub subnet_id: Option<String>,
    /// `member-subnet-id`.
    pub member_subnet_id: Option<String>,
}

/// `[LoadBalancer]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancerConfig {
    /// `floating-network-id` (`None`: the first external network), `floating-subnet-id`,
    /// `floating-subnet`, `floating-subnet-tags`, `network-id`, `subnet-id` (the VIP subnet),
    /// `member-subnet-id` (default: the VIP subnet): the defaults, in the shape of a class.
    pub network: LoadBalancerClass,
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
    /// `flavor-id`: the default Octavia flavor.
    pub flavor_id: Option<String>,
    /// `availability-zone`: the default Octavia availability zone.
    pub availability_zone: Option<String>,
    /// `enable-ingress-hostname`: with PROXY protocol, report `<ip>.<suffix>` as the status
    /// hostname (so in-cluster clients go through the load balancer).
    pub enable_ingress_hostname: bool,
    /// `ingress-hostname-suffix` (default `nip.io`).
    pub ingress_hostname_suffix: String,
    /// `manage-security-groups` (default false): one Neutron security group per Service,
    /// opening its node ports to the member subnet, on the member ports of its nodes.
    pub manage_security_groups: bool,
    /// `[LoadBalancerClass "name"]` sections by name.
    pub classes: BTreeMap<String, LoadBalancerClass>,
}

impl Default for LoadBalancerConfig {
    fn default() -> Self {
        LoadBalancerConfig {
            network: LoadBalancerClass::default(),
            lb_method: LbMethod::RoundRobin,
            create_monitor: false,
            monitor_delay: Duration::from_secs(5),
            monitor_timeout: Duration::from_secs(3),
            monitor_max_retries: 1,
            monitor_max_retries_down: 3,
            internal_lb: false,
            lb_provider: None,
            flavor_id: None,
            availability_zone: None,
            enable_ingress_hostname: false,
            ingress_hostname_suffix: "nip.io".to_string(),
            manage_security_groups: false,
            classes: BTreeMap::new(),
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

/// The file name used in errors.
const CONFIG_FILE: &str = "cloud.conf";

/// `[LoadBalancer]` and `[Global]` keys read as booleans: the only keys a bare name (gcfg's
/// "blank" value, meaning `true`) may stand for.
const BOOL_KEYS: &[&str] = &[
    "use-clouds",
    "create-monitor",
    "internal-lb",
    "enable-ingress-hostname",
    "manage-security-groups",
];

/// Turns a shared-reader error into this crate's, keeping the line and, for a syntax error,
/// the offending line's text.
fn from_file_error(text: &str, error: ConfigFileError) -> ConfigError {
    match error {
        ConfigFileError::Value {
            line,
            section,
            key,
            value,
            expected,
            ..
        } => ConfigError::Value {
            line,
            section,
            key,
            value: value.unwrap_or_default(),
            reason: format!("expected {expected}"),
        },
        ConfigFileError::Syntax { line, .. } => ConfigError::Syntax {
            line,
            text: text
                .strip_prefix('\u{feff}')
                .unwrap_or(text)
                .split('\n')
                .nth(line.saturating_sub(1))
                .unwrap_or_default()
                .trim_end_matches('\r')
                .to_string(),
        },
        // The text is already in memory and nothing else is raised by `parse_ini`; keep the
        // message rather than panic should that change.
        other => ConfigError::Syntax {
            line: 0,
            text: other.to_string(),
        },
    }
}

/// One section of the parsed file, with the typed reads this provider needs; the name is as
/// shown in errors (`LoadBalancer`, `LoadBalancerClass "fast"`).
struct Section<'a> {
    name: String,
    inner: config_file::Section<'a>,
}

impl<'a> Section<'a> {
    fn new(doc: &'a Document, name: &str, subsection: Option<&str>) -> Section<'a> {
        Section {
            name: match subsection {
                Some(sub) => format!("{name} {sub:?}"),
                None => name.to_string(),
            },
            inner: doc.section(name, subsection),
        }
    }

    fn entry(&self, key: &str) -> Option<&'a Entry> {
        self.inner
            .entries()
            .iter()
            .rev()
            .find(|e| e.key == key)
            .copied()
    }

    fn file_error(&self, error: ConfigFileError) -> ConfigError {
        // The shared reader labels sections lower-cased; name them as the docs spell them.
        match from_file_error("", error) {
            ConfigError::Value {
                line,
                key,
                value,
                reason,
                ..
            } => ConfigError::Value {
                line,
                section: self.name.clone(),
                key,
                value,
                reason,
            },
            other => other,
        }
    }

    /// Fails on a bare key among `known` that is not a boolean, so [`Section::string`] can
    /// treat every value it sees as text.
    fn check_bare(&self, known: &[&str]) -> Result<(), ConfigError> {
        for key in known.iter().filter(|k| !BOOL_KEYS.contains(k)) {
            self.inner.string(key).map_err(|e| self.file_error(e))?;
        }
        Ok(())
    }

    /// The last value; an empty value (`key =`) reads as absent, as upstream's defaults apply.
    fn string(&self, key: &str) -> Option<String> {
        self.entry(key)
            .and_then(|e| e.value.clone())
            .filter(|v| !v.is_empty())
    }

    fn invalid(&self, key: &str, reason: &str) -> ConfigError {
        let entry = self.entry(key);
        ConfigError::Value {
            line: entry.map(|e| e.line).unwrap_or_default(),
            section: self.name.clone(),
            key: key.to_string(),
            value: entry.and_then(|e| e.value.clone()).unwrap_or_default(),
            reason: reason.to_string(),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ConfigError> {
        Ok(self
            .inner
            .bool(key)
            .map_err(|e| self.file_error(e))?
            .unwrap_or(default))
    }

    fn number(&self, key: &str, default: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
        if self.string(key).is_none() {
            return Ok(default);
        }
        self.inner
            .u64(key)
            .ok()
            .flatten()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                self.invalid(key, &format!("expected a whole number from {min} to {max}"))
            })
    }

    /// A duration: Go duration text (`5s`, `500ms`, `1m`) as upstream's gcfg reads it, bare
    /// seconds (a kube-lb extension the tests pin), or what `humantime` accepted before.
    fn duration(&self, key: &str, default: Duration) -> Result<Duration, ConfigError> {
        let Some(value) = self.string(key) else {
            return Ok(default);
        };
        if let Ok(secs) = value.parse::<u64>() {
            return Ok(Duration::from_secs(secs));
        }
        match self.inner.duration(key) {
            Ok(Some(d)) => Ok(d),
            _ => humantime::parse_duration(&value)
                .map_err(|_| self.invalid(key, "expected a duration such as 5s")),
        }
    }

    /// A UUID-valued key (Neutron/Octavia ids): anything else would be refused by the cloud.
    fn uuid(&self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.string(key) {
            Some(value) if !looks_like_uuid(&value) => Err(self.invalid(
                key,
                "expected a UUID such as 0e100000-0000-4000-8000-0000000000e1",
            )),
            other => Ok(other),
        }
    }

    fn list(&self, key: &str) -> Result<Vec<String>, ConfigError> {
        Ok(self
            .inner
            .comma_list(key)
            .map_err(|e| self.file_error(e))?
            .into_iter()
            .map(str::to_string)
            .collect())
    }

    /// The network settings shared by `[LoadBalancer]` and `[LoadBalancerClass]`.
    fn network(&self) -> Result<LoadBalancerClass, ConfigError> {
        Ok(LoadBalancerClass {
            floating_network_id: self.uuid("floating-network-id")?,
            floating_subnet_id: self.uuid("floating-subnet-id")?,
            floating_subnet: self.string("floating-subnet"),
            floating_subnet_tags: self.list("floating-subnet-tags")?,
            network_id: self.uuid("network-id")?,
            subnet_id: self.uuid("subnet-id")?,
            member_subnet_id: self.uuid("member-subnet-id")?,
        })
    }
}

/// True for a dashed or plain UUID.
fn looks_like_uuid(value: &str) -> bool {
    let hex = |s: &str| s.chars().all(|c| c.is_ascii_hexdigit());
    match value.len() {
        32 => hex(value),
        36 => {
            let parts: Vec<&str> = value.split('-').collect();
            parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12]) && parts.iter().all(|p| hex(p))
        }
        _ => false,
    }
}

const GLOBAL_KEYS: &[&str] = &[
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
    "domain-id",
    "application-credential-id",
    "application-credential-secret",
    "application-credential-name",
    "region",
    "ca-file",
    "use-clouds",
    "clouds-file",
    "cloud",
];

const NETWORK_KEYS: &[&str] = &[
    "floating-network-id",
    "floating-subnet-id",
    "floating-subnet",
    "floating-subnet-tags",
    "network-id",
    "subnet-id",
    "member-subnet-id",
];

const LOAD_BALANCER_KEYS: &[&str] = &[
    "lb-method",
    "create-monitor",
    "monitor-delay",
    "monitor-timeout",
    "monitor-max-retries",
    "monitor-max-retries-down",
    "internal-lb",
    "lb-provider",
    "flavor-id",
    "availability-zone",
    "enable-ingress-hostname",
    "ingress-hostname-suffix",
    "manage-security-groups",
];

/// Octavia provider drivers upstream accepts for `lb-provider`.
const LB_PROVIDERS: &[&str] = &["amphora", "octavia", "ovn", "f5", "amphorav2"];

/// Where `cloud.conf` parsing looks outside the text: the environment (`OS_CLOUD`,
/// `OS_CLIENT_CONFIG_FILE`, `HOME`) and the file system (`clouds.yaml`). Tests substitute both.
pub struct Environment<'a> {
    /// An environment variable.
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// A file's text; `None` when it cannot be read.
    pub read: &'a dyn Fn(&str) -> Option<String>,
}

impl std::fmt::Debug for Environment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment").finish_non_exhaustive()
    }
}

impl Environment<'_> {
    /// The process environment and file system.
    pub fn process() -> Environment<'static> {
        Environment {
            var: &|name| std::env::var(name).ok(),
            read: &|path| std::fs::read_to_string(path).ok(),
        }
    }
}

impl CloudConfig {
    /// Parses `cloud.conf` text; `use-clouds = true` reads `clouds.yaml` from the process's
    /// environment and file system.
    pub fn parse(text: &str) -> Result<CloudConfig, ConfigError> {
        Self::parse_in(text, &Environment::process())
    }

    /// Parses `cloud.conf` text, reading `clouds.yaml` through `env`.
    pub fn parse_in(text: &str, env: &Environment<'_>) -> Result<CloudConfig, ConfigError> {
        let doc =
            config_file::parse_ini(CONFIG_FILE, text).map_err(|e| from_file_error(text, e))?;
        if let Some(line) = doc.header_line("loadbalancerclass", None) {
            return Err(ConfigError::Syntax {
                line,
                text: "[LoadBalancerClass] (expected [LoadBalancerClass \"name\"])".to_string(),
            });
        }
        let mut classes = BTreeMap::new();
        for class in doc.subsections("loadbalancerclass") {
            let section = Section::new(&doc, "LoadBalancerClass", Some(class));
            section.check_bare(NETWORK_KEYS)?;
            classes.insert(class.to_string(), section.network()?);
        }
        let global = Section::new(&doc, "Global", None);
        let lb = Section::new(&doc, "LoadBalancer", None);
        global.check_bare(GLOBAL_KEYS)?;
        lb.check_bare(&[NETWORK_KEYS, LOAD_BALANCER_KEYS].concat())?;
        warn_unused(&doc);
        let global = if global.bool("use-clouds", false)? {
            clouds_yaml(&global, env)?
        } else {
            global_from_conf(&global)?
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
        let lb_provider = lb.string("lb-provider");
        if let Some(provider) = &lb_provider
            && !LB_PROVIDERS.contains(&provider.as_str())
        {
            return Err(lb.invalid(
                "lb-provider",
                "expected amphora, octavia, ovn, f5 or amphorav2",
            ));
        }
        let load_balancer = LoadBalancerConfig {
            network: lb.network()?,
            lb_method,
            create_monitor: lb.bool("create-monitor", defaults.create_monitor)?,
            monitor_delay,
            monitor_timeout,
            monitor_max_retries: lb.number("monitor-max-retries", 1, 1, 10)? as u8,
            monitor_max_retries_down: lb.number("monitor-max-retries-down", 3, 1, 10)? as u8,
            internal_lb: lb.bool("internal-lb", defaults.internal_lb)?,
            lb_provider,
            flavor_id: lb.uuid("flavor-id")?,
            availability_zone: lb.string("availability-zone"),
            enable_ingress_hostname: lb.bool("enable-ingress-hostname", false)?,
            ingress_hostname_suffix: lb
                .string("ingress-hostname-suffix")
                .unwrap_or(defaults.ingress_hostname_suffix),
            manage_security_groups: lb
                .bool("manage-security-groups", defaults.manage_security_groups)?,
            classes,
        };
        Ok(CloudConfig {
            global,
            load_balancer,
        })
    }
}

/// Logs every key kube-lb does not read (upstream sections such as `[BlockStorage]` included),
/// so an upstream file works unchanged.
fn warn_unused(doc: &Document) {
    for name in doc.section_names() {
        let subsections = doc.subsections(name).into_iter().map(Some);
        for sub in std::iter::once(None).chain(subsections) {
            let known: Vec<&str> = match (name, sub) {
                ("global", None) => GLOBAL_KEYS.to_vec(),
                ("loadbalancer", None) => [NETWORK_KEYS, LOAD_BALANCER_KEYS].concat(),
                ("loadbalancerclass", Some(_)) => NETWORK_KEYS.to_vec(),
                _ => Vec::new(),
            };
            let section = doc.section(name, sub);
            let mut warned: Vec<&str> = Vec::new();
            for entry in section.entries() {
                let key = entry.key.as_str();
                if !known.contains(&key) && !warned.contains(&key) {
                    warned.push(key);
                    let label = sub.map_or_else(|| name.to_string(), |s| format!("{name} {s:?}"));
                    tracing::warn!(section = %label, key = %key, "cloud.conf key not used by kube-lb; ignored");
                }
            }
        }
    }
}

fn missing(key: &'static str, reason: &'static str) -> ConfigError {
    ConfigError::Missing {
        section: "Global",
        key,
        reason,
    }
}

/// `[Global]` credentials written in `cloud.conf` itself.
fn global_from_conf(global: &Section<'_>) -> Result<GlobalConfig, ConfigError> {
    let auth_url = global
        .string("auth-url")
        .ok_or(missing("auth-url", "the Keystone v3 endpoint"))?;
    let domain = |id_key: &str, name_key: &str| {
        global
            .string(id_key)
            .map(Domain::Id)
            .or_else(|| global.string(name_key).map(Domain::Name))
    };
    // `domain-id`/`domain-name` are upstream's defaults for both the user's and the project's.
    let default_domain =
        domain("domain-id", "domain-name").unwrap_or_else(|| Domain::Name("Default".to_string()));
    let user_domain =
        domain("user-domain-id", "user-domain-name").unwrap_or_else(|| default_domain.clone());
    let user = match (global.string("user-id"), global.string("username")) {
        (Some(id), _) => Some(User::Id(id)),
        (None, Some(name)) => Some(User::Name {
            name,
            domain: user_domain.clone(),
        }),
        (None, None) => None,
    };
    let secret = global.string("application-credential-secret");
    let credentials = match (
        global.string("application-credential-id"),
        global.string("application-credential-name"),
    ) {
        (None, None) => {
            let user = user.ok_or(missing(
                "username",
                "set username (or user-id) and password, or application-credential-id/-name and -secret",
            ))?;
            let password = global
                .string("password")
                .ok_or(missing("password", "username is set"))?;
            let project_domain =
                domain("project-domain-id", "project-domain-name").unwrap_or_else(|| match &user {
                    User::Name { domain, .. } => domain.clone(),
                    User::Id(_) => default_domain.clone(),
                });
            let project = match (
                global
                    .string("project-id")
                    .or_else(|| global.string("tenant-id")),
                global
                    .string("project-name")
                    .or_else(|| global.string("tenant-name")),
            ) {
                (Some(id), _) => Project::Id(id),
                (None, Some(name)) => Project::Name {
                    name,
                    domain: project_domain,
                },
                (None, None) => {
                    return Err(missing(
                        "project-id",
                        "password authentication needs a project (project-id or project-name)",
                    ));
                }
            };
            Credentials::Password {
                user,
                password,
                project,
            }
        }
        (id, name) => {
            let secret = secret.ok_or(missing(
                "application-credential-secret",
                "an application credential is set",
            ))?;
            if id.is_none() && user.is_none() {
                return Err(missing(
                    "username",
                    "application-credential-name identifies a credential only with its user (username or user-id)",
                ));
            }
            Credentials::ApplicationCredential {
                user: if id.is_none() { user } else { None },
                id,
                name,
                secret,
            }
        }
    };
    Ok(GlobalConfig {
        auth_url,
        credentials,
        region: global.string("region"),
        ca_file: global.string("ca-file"),
        source: CredentialSource::CloudConf,
    })
}

/// The 1-based line of the first `key:` at or after line `from` in a YAML text.
fn yaml_line(text: &str, key: &str, from: usize) -> usize {
    text.lines()
        .enumerate()
        .skip(from.saturating_sub(1))
        .find(|(_, line)| line.trim_start().starts_with(&format!("{key}:")))
        .map(|(index, _)| index + 1)
        .unwrap_or(from)
}

/// `use-clouds = true`: the cloud named by `cloud` (or `OS_CLOUD`) from `clouds-file` (or
/// `OS_CLIENT_CONFIG_FILE`, or the standard locations), with `auth_type` `password` or
/// `v3applicationcredential`, as openstacksdk reads it.
fn clouds_yaml(global: &Section<'_>, env: &Environment<'_>) -> Result<GlobalConfig, ConfigError> {
    let candidates: Vec<String> = match global
        .string("clouds-file")
        .or_else(|| (env.var)("OS_CLIENT_CONFIG_FILE"))
    {
        Some(path) => vec![path],
        None => {
            let mut paths = vec!["clouds.yaml".to_string()];
            if let Some(home) = (env.var)("HOME") {
                paths.push(format!("{home}/.config/openstack/clouds.yaml"));
            }
            paths.push("/etc/openstack/clouds.yaml".to_string());
            paths
        }
    };
    let (path, text) = candidates
        .iter()
        .find_map(|p| (env.read)(p).map(|t| (p.clone(), t)))
        .ok_or_else(|| {
            global.invalid(
                "use-clouds",
                &format!("no readable clouds.yaml (tried {})", candidates.join(", ")),
            )
        })?;
    let cloud = global
        .string("cloud")
        .or_else(|| (env.var)("OS_CLOUD"))
        .ok_or(missing(
            "cloud",
            "use-clouds is set: name the clouds.yaml entry with `cloud` or OS_CLOUD",
        ))?;
    let yaml_error = |line: usize, key: String, reason: String| ConfigError::CloudsYaml {
        path: path.clone(),
        line,
        key,
        reason,
    };
    let document: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).map_err(|e| {
        yaml_error(
            e.location().map(|l| l.line()).unwrap_or_default(),
            "clouds".into(),
            format!("not YAML: {e}"),
        )
    })?;
    let entry = &document["clouds"][cloud.as_str()];
    let entry_line = yaml_line(&text, &cloud, 1);
    if !entry.is_mapping() {
        let known: Vec<String> = document["clouds"]
            .as_mapping()
            .map(|m| {
                m.keys()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        return Err(yaml_error(
            0,
            format!("clouds.{cloud}"),
            format!("no such cloud (the file has: {})", known.join(", ")),
        ));
    }
    let auth = &entry["auth"];
    let auth_line = yaml_line(&text, "auth", entry_line);
    // A present key of the wrong type is an error naming its line; absent is `None`.
    let text_of = |value: &serde_yaml_ng::Value,
                   parent: &str,
                   from: usize,
                   key: &str|
     -> Result<Option<String>, ConfigError> {
        match &value[key] {
            serde_yaml_ng::Value::Null => Ok(None),
            serde_yaml_ng::Value::String(s) if s.is_empty() => Ok(None),
            serde_yaml_ng::Value::String(s) => Ok(Some(s.clone())),
            serde_yaml_ng::Value::Number(n) => Ok(Some(n.to_string())),
            _ => Err(yaml_error(
                yaml_line(&text, key, from),
                format!("clouds.{cloud}.{parent}{key}"),
                "expected a string".into(),
            )),
        }
    };
    let field = |key: &str| text_of(auth, "auth.", auth_line, key);
    let required = |key: &str, why: &str| -> Result<String, ConfigError> {
        field(key)?.ok_or_else(|| {
            yaml_error(
                auth_line,
                format!("clouds.{cloud}.auth.{key}"),
                format!("required: {why}"),
            )
        })
    };
    let auth_url = required("auth_url", "the Keystone v3 endpoint")?;
    let auth_type =
        text_of(entry, "", entry_line, "auth_type")?.unwrap_or_else(|| "password".to_string());
    let domain = |id_key: &str, name_key: &str| -> Result<Option<Domain>, ConfigError> {
        Ok(match field(id_key)? {
            Some(id) => Some(Domain::Id(id)),
            None => field(name_key)?.map(Domain::Name),
        })
    };
    let default_domain =
        domain("domain_id", "domain_name")?.unwrap_or_else(|| Domain::Name("Default".to_string()));
    let user_domain =
        domain("user_domain_id", "user_domain_name")?.unwrap_or_else(|| default_domain.clone());
    let user = match (field("user_id")?, field("username")?) {
        (Some(id), _) => Some(User::Id(id)),
        (None, Some(name)) => Some(User::Name {
            name,
            domain: user_domain,
        }),
        (None, None) => None,
    };
    let credentials = match auth_type.as_str() {
        "password" | "v3password" => {
            let user = user.ok_or_else(|| {
                yaml_error(
                    auth_line,
                    format!("clouds.{cloud}.auth.username"),
                    "required for auth_type password".into(),
                )
            })?;
            let password = required("password", "auth_type password")?;
            let project_domain =
                domain("project_domain_id", "project_domain_name")?.unwrap_or(default_domain);
            let project = match (field("project_id")?, field("project_name")?) {
                (Some(id), _) => Project::Id(id),
                (None, Some(name)) => Project::Name {
                    name,
                    domain: project_domain,
                },
                (None, None) => {
                    return Err(yaml_error(
                        auth_line,
                        format!("clouds.{cloud}.auth.project_id"),
                        "required: password authentication needs a project (project_id or project_name)".into(),
                    ));
                }
            };
            Credentials::Password {
                user,
                password,
                project,
            }
        }
        "v3applicationcredential" => {
            let id = field("application_credential_id")?;
            let name = field("application_credential_name")?;
            if id.is_none() && (name.is_none() || user.is_none()) {
                return Err(yaml_error(
                    auth_line,
                    format!("clouds.{cloud}.auth.application_credential_id"),
                    "required (or application_credential_name with username)".into(),
                ));
            }
            Credentials::ApplicationCredential {
                user: if id.is_none() { user } else { None },
                id,
                name,
                secret: required(
                    "application_credential_secret",
                    "auth_type v3applicationcredential",
                )?,
            }
        }
        other => {
            return Err(yaml_error(
                yaml_line(&text, "auth_type", entry_line),
                format!("clouds.{cloud}.auth_type"),
                format!(
                    "{other:?} is not supported (password, v3password, v3applicationcredential)"
                ),
            ));
        }
    };
    Ok(GlobalConfig {
        auth_url,
        credentials,
        // cloud.conf's own region and ca-file win, as they are the more specific setting.
        region: global
            .string("region")
            .map(Ok)
            .or_else(|| text_of(entry, "", entry_line, "region_name").transpose())
            .transpose()?,
        ca_file: global
            .string("ca-file")
            .map(Ok)
            .or_else(|| text_of(entry, "", entry_line, "cacert").transpose())
            .transpose()?,
        source: CredentialSource::CloudsYaml { path, cloud },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[Global]\nauth-url = http://keystone/v3\nusername = u\npassword = p\nproject-name = demo\n";
    const SUBNET: &str = "0e100000-0000-4000-8000-0000000000a2";
    const NETWORK: &str = "0e100000-0000-4000-8000-0000000000e1";

    fn no_env() -> Environment<'static> {
        Environment {
            var: &|_| None,
            read: &|_| None,
        }
    }

    #[test]
    fn password_credentials_by_id_and_by_name() {
        let name = |n: &str| Domain::Name(n.into());
        let cases = [
            (
                MINIMAL.to_string(),
                User::Name {
                    name: "u".into(),
                    domain: name("Default"),
                },
                Project::Name {
                    name: "demo".into(),
                    domain: name("Default"),
                },
            ),
            (
                "[Global]\nauth-url=x\nuser-id = uid\npassword = p\nproject-id = pid\n".into(),
                User::Id("uid".into()),
                Project::Id("pid".into()),
            ),
            (
                "[Global]\nauth-url=x\nusername = u\npassword = p\nuser-domain-id = ud\ntenant-name = t\nproject-domain-name = PD\n".into(),
                User::Name {
                    name: "u".into(),
                    domain: Domain::Id("ud".into()),
                },
                Project::Name {
                    name: "t".into(),
                    domain: name("PD"),
                },
            ),
            (
                "[Global]\nauth-url=x\nusername = u\npassword = p\ndomain-name = Corp\nproject-name = t\n".into(),
                User::Name {
                    name: "u".into(),
                    domain: name("Corp"),
                },
                Project::Name {
                    name: "t".into(),
                    domain: name("Corp"),
                },
            ),
        ];
        for (text, user, project) in cases {
            let config = CloudConfig::parse_in(&text, &no_env()).expect(&text);
            assert_eq!(
                config.global.credentials,
                Credentials::Password {
                    user,
                    password: "p".into(),
                    project
                },
                "{text}"
            );
            assert_eq!(config.global.source, CredentialSource::CloudConf);
        }
    }

    #[test]
    fn application_credentials_and_load_balancer_section_parse() {
        let text = format!(
            "[Global]\nauth-url=\"http://k/v3\"\napplication-credential-id = abc\napplication-credential-secret = s3cret\nregion = RegionTwo\nca-file = /etc/ca.pem\n\
             [LoadBalancer]\nfloating-network-id = {NETWORK}\nsubnet-id = {SUBNET}\nlb-method = SOURCE_IP\ncreate-monitor = true\nmonitor-delay = 10s\nmonitor-timeout = 2\n\
             internal-lb = true\nlb-provider = ovn\nenable-ingress-hostname = true\ningress-hostname-suffix = example.net\nfloating-subnet-tags = a, b\n\
             manage-security-groups = true\n\
             [LoadBalancerClass \"fast\"]\nsubnet-id = {SUBNET}\nfloating-subnet = public-*\n"
        );
        let config = CloudConfig::parse_in(&text, &no_env()).expect("valid");
        assert_eq!(config.global.auth_url, "http://k/v3");
        assert_eq!(config.global.region.as_deref(), Some("RegionTwo"));
        assert_eq!(config.global.ca_file.as_deref(), Some("/etc/ca.pem"));
        assert!(
            matches!(config.global.credentials, Credentials::ApplicationCredential { id: Some(ref id), user: None, .. } if id == "abc")
        );
        let lb = config.load_balancer;
        assert_eq!(lb.network.floating_network_id.as_deref(), Some(NETWORK));
        assert_eq!(lb.network.floating_subnet_tags, vec!["a", "b"]);
        assert_eq!(lb.lb_method, LbMethod::SourceIp);
        assert!(lb.create_monitor && lb.internal_lb && lb.enable_ingress_hostname);
        assert!(lb.manage_security_groups);
        assert!(!LoadBalancerConfig::default().manage_security_groups);
        assert_eq!(lb.ingress_hostname_suffix, "example.net");
        assert_eq!(lb.monitor_delay, Duration::from_secs(10));
        assert_eq!(lb.monitor_timeout, Duration::from_secs(2));
        assert_eq!(lb.lb_provider.as_deref(), Some("ovn"));
        let fast = lb.classes.get("fast").expect("class");
        assert_eq!(fast.subnet_id.as_deref(), Some(SUBNET));
        assert_eq!(fast.floating_subnet.as_deref(), Some("public-*"));

        let by_name = "[Global]\nauth-url=x\napplication-credential-name = ci\napplication-credential-secret = s\nusername = u\n";
        let config = CloudConfig::parse_in(by_name, &no_env()).expect("valid");
        assert!(matches!(
            config.global.credentials,
            Credentials::ApplicationCredential {
                id: None,
                name: Some(_),
                user: Some(User::Name { .. }),
                ..
            }
        ));
        assert_eq!(
            LoadBalancerConfig::default().ingress_hostname_suffix,
            "nip.io"
        );
    }

    const CLOUDS: &str = "clouds:\n  prod:\n    auth:\n      auth_url: https://keystone.prod/v3\n      username: alice\n      password: pw\n      project_name: web\n      user_domain_name: Corp\n      project_domain_id: corp-id\n    region_name: RegionTwo\n    cacert: /etc/prod-ca.pem\n  ci:\n    auth_type: v3applicationcredential\n    auth:\n      auth_url: https://keystone.ci/v3\n      application_credential_id: ac1\n      application_credential_secret: s\n";

    #[test]
    fn clouds_yaml_is_read_as_openstacksdk_does() {
        let read = |path: &str| (path == "/etc/kube-lb/clouds.yaml").then(|| CLOUDS.to_string());
        type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                "[Global]\nuse-clouds = true\nclouds-file = /etc/kube-lb/clouds.yaml\ncloud = prod\n",
                vec![],
                "prod",
            ),
            (
                "[Global]\nuse-clouds = true\n",
                vec![
                    ("OS_CLOUD", "ci"),
                    ("OS_CLIENT_CONFIG_FILE", "/etc/kube-lb/clouds.yaml"),
                ],
                "ci",
            ),
        ];
        for (text, vars, cloud) in cases {
            let var = |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            };
            let env = Environment {
                var: &var,
                read: &read,
            };
            let global = CloudConfig::parse_in(text, &env).expect(text).global;
            assert_eq!(
                global.source,
                CredentialSource::CloudsYaml {
                    path: "/etc/kube-lb/clouds.yaml".into(),
                    cloud: cloud.into()
                }
            );
            match cloud {
                "prod" => {
                    assert_eq!(global.auth_url, "https://keystone.prod/v3");
                    assert_eq!(global.region.as_deref(), Some("RegionTwo"));
                    assert_eq!(global.ca_file.as_deref(), Some("/etc/prod-ca.pem"));
                    assert_eq!(
                        global.credentials,
                        Credentials::Password {
                            user: User::Name {
                                name: "alice".into(),
                                domain: Domain::Name("Corp".into())
                            },
                            password: "pw".into(),
                            project: Project::Name {
                                name: "web".into(),
                                domain: Domain::Id("corp-id".into())
                            },
                        }
                    );
                }
                _ => assert!(matches!(
                    global.credentials,
                    Credentials::ApplicationCredential { id: Some(ref id), .. } if id == "ac1"
                )),
            }
        }
    }

    #[test]
    fn errors_name_the_key_and_line() {
        let yaml =
            |body: &'static str| move |path: &str| (path == "/c.yaml").then(|| body.to_string());
        let broken_yaml = yaml("clouds:\n  prod:\n    auth: [unclosed\n");
        let no_url = yaml("clouds:\n  prod:\n    auth:\n      username: u\n");
        let bad_type =
            yaml("clouds:\n  prod:\n    auth:\n      auth_url: x\n      username: [u]\n");
        let odd_auth =
            yaml("clouds:\n  prod:\n    auth_type: token\n    auth:\n      auth_url: x\n");
        let env_for = |read: &'static ReadFile| Environment {
            var: &|_| None,
            read,
        };
        type ReadFile = dyn Fn(&str) -> Option<String>;
        let leak = |f: Box<ReadFile>| -> &'static ReadFile { Box::leak(f) };
        let yaml_conf = "[Global]\nuse-clouds = true\nclouds-file = /c.yaml\ncloud = prod\n";
        let cases: Vec<(String, Environment<'static>, &str, &str)> = vec![
            ("[Global]\nauth-url http://x\n".into(), no_env(), "line 2", "cannot parse"),
            ("[Global]\nusername = u\npassword = p\nproject-name = d\n".into(), no_env(), "auth-url", "required"),
            ("[Global]\nauth-url = x\nusername = u\nproject-name = d\n".into(), no_env(), "password", "required"),
            ("[Global]\nauth-url = x\nusername = u\npassword = p\n".into(), no_env(), "project-id", "project"),
            ("[Global]\nauth-url = x\napplication-credential-id = i\n".into(), no_env(), "application-credential-secret", "required"),
            ("[Global]\nauth-url = x\napplication-credential-name = n\napplication-credential-secret = s\n".into(), no_env(), "username", "its user"),
            ("[Global]\nauth-url = x\n".into(), no_env(), "username", "required"),
            (format!("{MINIMAL}[LoadBalancer]\ncreate-monitor = maybe\n"), no_env(), "line 7", "create-monitor"),
            (format!("{MINIMAL}[LoadBalancer]\nlb-method = RANDOM\n"), no_env(), "lb-method", "ROUND_ROBIN"),
            (format!("{MINIMAL}[LoadBalancer]\nmonitor-max-retries = 11\n"), no_env(), "monitor-max-retries", "1 to 10"),
            (format!("{MINIMAL}[LoadBalancer]\nmonitor-delay = 2s\nmonitor-timeout = 3s\n"), no_env(), "monitor-timeout", "at most"),
            (format!("{MINIMAL}[LoadBalancer]\nlb-provider = haproxy\n"), no_env(), "line 7: [LoadBalancer] lb-provider", "amphora"),
            (format!("{MINIMAL}[LoadBalancer]\nsubnet-id = private\n"), no_env(), "line 7: [LoadBalancer] subnet-id", "UUID"),
            (format!("{MINIMAL}[LoadBalancerClass \"x\"]\nnetwork-id = n\n"), no_env(), "line 7: [LoadBalancerClass \"x\"] network-id", "UUID"),
            (format!("{MINIMAL}[LoadBalancerClass]\n"), no_env(), "line 6", "LoadBalancerClass \\\"name\\\""),
            ("auth-url = x\n".into(), no_env(), "line 1", "cannot parse"),
            ("[Global]\nuse-clouds = true\ncloud = prod\n".into(), no_env(), "use-clouds", "no readable clouds.yaml"),
            ("[Global]\nuse-clouds = true\nclouds-file = /c.yaml\n".into(), env_for(leak(Box::new(yaml("clouds: {}\n")))), "cloud", "OS_CLOUD"),
            ("[Global]\nuse-clouds = true\nclouds-file = /c.yaml\ncloud = dev\n".into(), env_for(leak(Box::new(yaml("clouds:\n  prod: {}\n")))), "clouds.dev", "has: prod"),
            (yaml_conf.into(), env_for(leak(Box::new(broken_yaml))), "/c.yaml line", "not YAML"),
            (yaml_conf.into(), env_for(leak(Box::new(no_url))), "line 3: clouds.prod.auth.auth_url", "required"),
            (yaml_conf.into(), env_for(leak(Box::new(bad_type))), "line 5: clouds.prod.auth.username", "expected a string"),
            (yaml_conf.into(), env_for(leak(Box::new(odd_auth))), "line 3: clouds.prod.auth_type", "not supported"),
        ];
        for (text, env, key, words) in cases {
            let error = CloudConfig::parse_in(&text, &env)
                .expect_err(&text)
                .to_string();
            assert!(
                error.contains(key) && error.contains(words),
                "{text:?} -> {error}"
            );
        }
    }

    /// gcfg's rules, as upstream's reader applies them: a bare boolean key is `true`, a bare
    /// text key is refused, comments after values are dropped, a repeated section is merged
    /// and the last duplicate key wins.
    #[test]
    fn reads_cloud_conf_with_gcfg_rules() {
        let text = format!(
            "{MINIMAL}[LoadBalancer]\ncreate-monitor\nlb-provider = amphora ; default\n\
             [Global]\nregion = one\nregion = \"two ; three\"\n"
        );
        let config = CloudConfig::parse_in(&text, &no_env()).expect("valid");
        assert!(config.load_balancer.create_monitor);
        assert_eq!(config.load_balancer.lb_provider.as_deref(), Some("amphora"));
        assert_eq!(config.global.region.as_deref(), Some("two ; three"));

        let bare = format!("{MINIMAL}[LoadBalancer]\nsubnet-id\n");
        let error = CloudConfig::parse_in(&bare, &no_env())
            .expect_err("bare text key")
            .to_string();
        assert!(
            error.contains("line 7: [LoadBalancer] subnet-id"),
            "{error}"
        );
    }

    #[test]
    fn secrets_stay_out_of_debug_output() {
        let config = CloudConfig::parse_in(MINIMAL, &no_env()).expect("valid");
        let text = format!("{config:?}");
        assert!(!text.contains("\"p\""), "{text}");
    }
}

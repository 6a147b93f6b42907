//! The mock's state: resources as JSON documents keyed by lower-cased ARM ID, async operations,
//! the request journal, armed faults and issued tokens.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use ipnet::Ipv4Net;
use serde::Serialize;
use serde_json::Value;

use crate::error::ArmError;

/// Limits the mock enforces, mirroring the documented Azure networking limits (defaults) or
/// lowered by tests to exercise quota errors.
#[derive(Debug, Clone)]
pub struct Quotas {
    /// Public IP addresses per subscription and region (`PublicIPCountLimitReached`).
    pub public_ips: usize,
    /// Frontend IP configurations per load balancer.
    pub frontends_per_lb: usize,
    /// Load-balancing rules per load balancer.
    pub rules_per_lb: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            public_ips: 1000,
            frontends_per_lb: 600,
            rules_per_lb: 1500,
        }
    }
}

/// Fixed configuration of one mock instance.
#[derive(Debug, Clone)]
pub struct Config {
    /// The one subscription served.
    pub subscription: String,
    /// Locations accepted in bodies; the first is where operation URLs point.
    pub locations: Vec<String>,
    /// Public IPs are allocated from here, in order.
    pub public_ip_pool: Ipv4Net,
    /// `InProgress` answers each async operation gives before it completes.
    pub lro_polls: u32,
    /// The `Retry-After` seconds sent with async operations (`None`: no header).
    pub retry_after_secs: Option<u64>,
    /// Limits.
    pub quotas: Quotas,
    /// Service principals accepted at the token endpoint: client ID → secret.
    pub clients: BTreeMap<String, String>,
    /// Base URL, filled in once the listener is bound.
    pub base_url: String,
    /// An operation nobody polls finishes on its own after this long (as in ARM), so a
    /// client whose answer was lost is not blocked by `AnotherOperationInProgress` or
    /// `ReferencedResourceNotProvisioned` forever.
    pub operation_deadline: std::time::Duration,
}

/// The kinds of top-level resources served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    /// `loadBalancers`.
    LoadBalancer,
    /// `publicIPAddresses`.
    PublicIp,
    /// `networkSecurityGroups`.
    SecurityGroup,
    /// `virtualNetworks` (fixtures; read-only).
    VirtualNetwork,
    /// `networkInterfaces` (fixtures; read-only): the nodes' NICs, whose IP configurations
    /// hold their private addresses.
    NetworkInterface,
}

impl Kind {
    /// Whether resources of this kind are fixtures the builder creates (ARM's other
    /// resource providers own them), so PUT and DELETE are refused.
    pub fn is_fixture(self) -> bool {
        matches!(self, Kind::VirtualNetwork | Kind::NetworkInterface)
    }

    /// The collection segment in resource IDs.
    pub fn collection(self) -> &'static str {
        match self {
            Kind::LoadBalancer => "loadBalancers",
            Kind::PublicIp => "publicIPAddresses",
            Kind::SecurityGroup => "networkSecurityGroups",
            Kind::VirtualNetwork => "virtualNetworks",
            Kind::NetworkInterface => "networkInterfaces",
        }
    }

    /// Parses a collection segment case-insensitively, as ARM does.
    pub fn from_collection(segment: &str) -> Option<Kind> {
        [
            Kind::LoadBalancer,
            Kind::PublicIp,
            Kind::SecurityGroup,
            Kind::VirtualNetwork,
            Kind::NetworkInterface,
        ]
        .into_iter()
        .find(|k| k.collection().eq_ignore_ascii_case(segment))
    }

    /// The `type` property.
    pub fn type_name(self) -> String {
        format!("Microsoft.Network/{}", self.collection())
    }
}

/// One stored resource.
#[derive(Debug, Clone)]
pub struct Stored {
    /// Its kind.
    pub kind: Kind,
    /// Resource group, as first written.
    pub resource_group: String,
    /// The full JSON document as GET returns it.
    pub body: Value,
}

/// What an async operation does when it completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// A create or update: the resource becomes `Succeeded`.
    Put,
    /// A delete: the resource disappears.
    Delete,
}

/// Final or current status of an async operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpStatus {
    /// Still running.
    InProgress,
    /// Done.
    Succeeded,
    /// Failed with the error.
    Failed(ArmError),
}

/// An async operation, polled through `Azure-AsyncOperation` or `Location`.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Lower-cased ID of the resource it acts on.
    pub resource_key: String,
    /// Create/update or delete.
    pub kind: OpKind,
    /// `InProgress` answers left.
    pub remaining_polls: u32,
    /// Error to end with instead of success (fault injection).
    pub fail_with: Option<ArmError>,
    /// Current status.
    pub status: OpStatus,
    /// When it started: ARM finishes operations on its own, polled or not.
    pub started: std::time::Instant,
}

/// One request as the mock saw it.
#[derive(Debug, Clone, Serialize)]
pub struct JournalEntry {
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// The `If-Match` header, when sent.
    pub if_match: Option<String>,
    /// The `If-None-Match` header, when sent.
    pub if_none_match: Option<String>,
    /// The JSON body, when there was one.
    pub body: Option<Value>,
    /// The status answered.
    pub status: u16,
}

impl JournalEntry {
    /// True for requests that may change state (anything but GET/HEAD and token requests).
    pub fn is_mutation(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD") && !self.path.contains("/oauth2/")
    }
}

/// What an armed fault does.
#[derive(Debug, Clone)]
pub enum FaultAction {
    /// Answer the request with this error instead of serving it (optionally with `Retry-After`).
    Respond {
        /// The error.
        error: ArmError,
        /// `Retry-After` seconds.
        retry_after: Option<u64>,
    },
    /// Serve the request, but let the async operation it starts end `Failed` with this error.
    FailOperation(ArmError),
    /// Serve the request (the write takes effect and its operation completes at once, as if
    /// time had passed), then lose the answer: reply with this error instead, or, with
    /// `None`, drop the connection before a body arrives. This is the case that tests whether
    /// a client recognises its own create on the retry.
    LoseResponse(Option<ArmError>),
}

/// A fault armed for requests matching a method and a path substring.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Method to match (`None`: any).
    pub method: Option<String>,
    /// Case-insensitive substring of the path to match.
    pub path_contains: String,
    /// Matching requests to let through before the fault fires.
    pub skip: u32,
    /// How many times it fires.
    pub times: u32,
    /// What it does.
    pub action: FaultAction,
}

kube_lb_mock_support::impl_armed!(Fault { outcome: action: FaultAction });

impl Fault {
    /// `429 TooManyRequests` with `Retry-After`, `times` times.
    pub fn throttle(method: &str, path_contains: &str, retry_after_secs: u64, times: u32) -> Fault {
        let throttled = ArmError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "The request is being throttled.",
        );
        let action = FaultAction::Respond {
            error: throttled,
            retry_after: Some(retry_after_secs),
        };
        Fault::armed(method, path_contains, times, action)
    }

    /// An error answer (e.g. `500 InternalServerError`), `times` times.
    pub fn error(method: &str, path_contains: &str, error: ArmError, times: u32) -> Fault {
        let action = FaultAction::Respond {
            error,
            retry_after: None,
        };
        Fault::armed(method, path_contains, times, action)
    }

    /// Applies matching requests but loses their answers (`500 InternalServerError` with
    /// `Some`, a dropped connection with `None`), `times` times.
    pub fn lose_response(
        method: &str,
        path_contains: &str,
        error: Option<ArmError>,
        times: u32,
    ) -> Fault {
        Fault::armed(
            method,
            path_contains,
            times,
            FaultAction::LoseResponse(error),
        )
    }

    /// `action` for the first `times` `method` requests whose path contains `path_contains`.
    fn armed(method: &str, path_contains: &str, times: u32, action: FaultAction) -> Fault {
        Fault {
            method: Some(method.to_string()),
            path_contains: path_contains.to_string(),
            skip: 0,
            times,
            action,
        }
    }

    /// Lets the first `skip` matching requests through before firing.
    pub fn after(mut self, skip: u32) -> Fault {
        self.skip = skip;
        self
    }

    /// Paths are compared without case, as ARM treats resource IDs.
    fn matches(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && path
                .to_ascii_lowercase()
                .contains(&self.path_contains.to_ascii_lowercase())
    }
}

/// Everything the mock knows.
#[derive(Debug)]
pub struct State {
    /// Configuration.
    pub config: Config,
    /// Resource groups → location.
    pub resource_groups: BTreeMap<String, String>,
    /// Resources by lower-cased ID.
    pub resources: BTreeMap<String, Stored>,
    /// Async operations by ID.
    pub operations: BTreeMap<String, Operation>,
    /// Every request, in order.
    pub journal: Vec<JournalEntry>,
    /// Armed faults.
    pub faults: Vec<Fault>,
    /// Tokens issued by the token endpoint (plus any pre-seeded ones).
    pub tokens: BTreeSet<String>,
    counter: u64,
    next_public_ip: u32,
}

impl State {
    /// Empty state for `config`.
    pub fn new(config: Config) -> State {
        State {
            config,
            resource_groups: BTreeMap::new(),
            resources: BTreeMap::new(),
            operations: BTreeMap::new(),
            journal: Vec::new(),
            faults: Vec::new(),
            tokens: BTreeSet::new(),
            counter: 0,
            next_public_ip: 0,
        }
    }

    /// A fresh counter value (etags, GUIDs, operation IDs, tokens are derived from it so runs
    /// are deterministic).
    pub fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// A new weak etag.
    pub fn new_etag(&mut self) -> String {
        let n = self.next();
        format!("W/\"{n:08x}-6c2e-4d1a-9f00-{n:012x}\"")
    }

    /// A new GUID-shaped string.
    pub fn new_guid(&mut self) -> String {
        let n = self.next();
        format!("{n:08x}-0000-4000-8000-{n:012x}")
    }

    /// The next free address of the public pool, skipping any in use.
    pub fn allocate_public_ip(&mut self) -> Option<Ipv4Addr> {
        let in_use: BTreeSet<String> = self
            .resources
            .values()
            .filter(|r| r.kind == Kind::PublicIp)
            .filter_map(|r| crate::validate::str_at(&r.body, &["properties", "ipAddress"]))
            .map(str::to_string)
            .collect();
        let hosts: Vec<Ipv4Addr> = self.config.public_ip_pool.hosts().collect();
        for _ in 0..hosts.len() {
            let candidate = hosts[self.next_public_ip as usize % hosts.len()];
            self.next_public_ip += 1;
            if !in_use.contains(&candidate.to_string()) {
                return Some(candidate);
            }
        }
        None
    }

    /// The canonical ID of a top-level resource.
    pub fn resource_id(&self, rg: &str, kind: Kind, name: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{rg}/providers/Microsoft.Network/{}/{name}",
            self.config.subscription,
            kind.collection()
        )
    }

    /// Looks a resource up by (any-case) ID.
    pub fn by_id(&self, id: &str) -> Option<&Stored> {
        self.resources.get(&id.to_ascii_lowercase())
    }

    /// Takes the first armed fault matching the request, if any.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<FaultAction> {
        kube_lb_mock_support::faults::fire_first(&mut self.faults, |f| f.matches(method, path))
    }

    /// Resources of one kind.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Stored> {
        self.resources.values().filter(move |r| r.kind == kind)
    }
}

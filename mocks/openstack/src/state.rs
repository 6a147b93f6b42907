//! The mock's state: Keystone tokens, Octavia objects, Neutron objects, the journal and armed
//! faults. Objects are kept as the JSON documents the API returns, so what a test reads back
//! is exactly what a client sees.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use axum::http::StatusCode;
use ipnet::IpNet;
use serde_json::{Value, json};

/// One request the mock answered.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// HTTP method.
    pub method: String,
    /// URL path (`/load-balancer/v2/lbaas/loadbalancers`).
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// The JSON body, when there was one (never for token requests: they carry secrets).
    pub body: Option<Value>,
    /// The status answered.
    pub status: u16,
}

impl JournalEntry {
    /// True for Octavia/Neutron requests that may change state (anything but GET/HEAD; token
    /// requests are not counted, they change no cloud resource).
    pub fn is_mutation(&self) -> bool {
        !matches!(self.method.as_str(), "GET" | "HEAD") && !self.path.contains("/auth/tokens")
    }
}

/// What an armed fault does to a matching request.
#[derive(Debug, Clone)]
pub enum FaultAction {
    /// Answer with this status and message (in the service's error format) without serving.
    Respond {
        /// HTTP status.
        status: u16,
        /// The error text.
        message: String,
        /// `Retry-After` seconds sent with the answer (rate limiters do).
        retry_after: Option<u64>,
    },
    /// Serve the request normally after waiting this long (the lock is not held meanwhile).
    Delay(Duration),
    /// Serve the request (it takes effect), then answer with this status and message instead
    /// of the result: the answer was lost on its way back (a gateway timing out, a dropped
    /// connection), so the client cannot tell whether its call happened.
    LoseResponse {
        /// HTTP status.
        status: u16,
        /// The error text.
        message: String,
    },
}

/// A fault armed for requests matching a method and a path substring.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Method to match (`None`: any).
    pub method: Option<String>,
    /// Substring of the path to match.
    pub path_contains: String,
    /// Matching requests to let through before the fault fires.
    pub skip: u32,
    /// How many times it fires.
    pub times: u32,
    /// What it does.
    pub action: FaultAction,
}

impl Fault {
    /// Answers `times` matching requests with `status` and `message`.
    pub fn respond(
        method: &str,
        path_contains: &str,
        status: u16,
        message: &str,
        times: u32,
    ) -> Fault {
        Fault {
            method: Some(method.to_string()),
            path_contains: path_contains.to_string(),
            skip: 0,
            times,
            action: FaultAction::Respond {
                status,
                message: message.to_string(),
                retry_after: None,
            },
        }
    }

    /// The same answer with `Retry-After: seconds`, as a rate limiter sends it.
    pub fn with_retry_after(mut self, seconds: u64) -> Fault {
        if let FaultAction::Respond { retry_after, .. } = &mut self.action {
            *retry_after = Some(seconds);
        }
        self
    }

    /// Serves `times` matching requests, then answers each with `status` instead of the
    /// result (a lost response).
    pub fn lose_response(method: &str, path_contains: &str, status: u16, times: u32) -> Fault {
        Fault {
            method: Some(method.to_string()),
            path_contains: path_contains.to_string(),
            skip: 0,
            times,
            action: FaultAction::LoseResponse {
                status,
                message: "The server did not answer in time.".to_string(),
            },
        }
    }

    /// Delays `times` matching requests by `delay`.
    pub fn delay(method: &str, path_contains: &str, delay: Duration, times: u32) -> Fault {
        Fault {
            method: Some(method.to_string()),
            path_contains: path_contains.to_string(),
            skip: 0,
            times,
            action: FaultAction::Delay(delay),
        }
    }

    pub(crate) fn matches(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && path.contains(&self.path_contains)
    }
}

/// Limits the mock enforces (`None`: unlimited).
#[derive(Debug, Clone, Default)]
pub struct Quotas {
    /// Load balancers per project (Octavia answers 403 "Quota has been met").
    pub load_balancers: Option<usize>,
    /// Floating IPs per project (Neutron answers 409 `OverQuota`).
    pub floating_ips: Option<usize>,
}

/// Credentials Keystone accepts.
#[derive(Debug, Clone)]
pub(crate) struct Credentials {
    pub users: BTreeMap<String, String>,
    pub application_credentials: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub base_url: String,
    pub region: String,
    pub project_id: String,
    pub project_name: String,
    pub domain_name: String,
    pub token_ttl: Duration,
    pub provisioning_delay: Duration,
    pub quotas: Quotas,
    /// Limits beyond [`Quotas`], by the quota API's resource name (`listener`, `pool`,
    /// `member`, `healthmonitor`, `security_group`, `security_group_rule`, `port`).
    pub limits: BTreeMap<String, usize>,
    pub credentials: Credentials,
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub expires: SystemTime,
}

/// A load balancer's transitional state: `status` until `until`, then `ACTIVE` (or gone for
/// `PENDING_DELETE`).
#[derive(Debug, Clone)]
pub(crate) struct Transition {
    pub until: Instant,
}

/// Octavia and Neutron collections, keyed by id.
#[derive(Debug, Default)]
pub(crate) struct Store {
    pub loadbalancers: BTreeMap<String, Value>,
    pub listeners: BTreeMap<String, Value>,
    pub pools: BTreeMap<String, Value>,
    pub members: BTreeMap<String, Value>,
    pub healthmonitors: BTreeMap<String, Value>,
    pub networks: BTreeMap<String, Value>,
    pub subnets: BTreeMap<String, Value>,
    pub ports: BTreeMap<String, Value>,
    pub floatingips: BTreeMap<String, Value>,
    pub security_groups: BTreeMap<String, Value>,
    pub security_group_rules: BTreeMap<String, Value>,
}

impl Store {
    /// The collections of objects under a load balancer (each names it in `__lb`).
    pub fn octavia_children(&mut self) -> [&mut BTreeMap<String, Value>; 4] {
        [
            &mut self.listeners,
            &mut self.pools,
            &mut self.members,
            &mut self.healthmonitors,
        ]
    }
}

#[derive(Debug)]
pub(crate) struct State {
    pub config: Config,
    pub tokens: BTreeMap<String, Token>,
    pub store: Store,
    pub transitions: BTreeMap<String, Transition>,
    pub journal: Vec<JournalEntry>,
    pub faults: Vec<Fault>,
    next_id: u64,
}

/// An API error: status plus the message in the answering service's own format.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Neutron's error type (`OverQuota`, `FloatingIPPortAlreadyAssociated`, ...).
    pub kind: &'static str,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind: "",
        }
    }

    pub fn typed(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        Self::typed(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{what} {id} could not be found."),
        )
    }
}

pub(crate) type ApiResult = Result<(StatusCode, Option<Value>), ApiError>;

impl State {
    pub fn new(config: Config) -> Self {
        State {
            config,
            tokens: BTreeMap::new(),
            store: Store::default(),
            transitions: BTreeMap::new(),
            journal: Vec::new(),
            faults: Vec::new(),
            next_id: 0,
        }
    }

    /// The limit on `resource` (a quota API resource name), `None`: unlimited.
    pub fn quota(&self, resource: &str) -> Option<usize> {
        match resource {
            "load_balancer" | "loadbalancer" => self.config.quotas.load_balancers,
            "floatingip" => self.config.quotas.floating_ips,
            other => self.config.limits.get(other).copied(),
        }
    }

    /// A fresh UUID-shaped id; `kind` keeps ids of different collections apart when read.
    pub fn new_id(&mut self, kind: u32) -> String {
        self.next_id += 1;
        format!("{kind:08x}-0000-4000-8000-{:012x}", self.next_id)
    }

    pub fn now_text() -> String {
        humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
    }

    /// Moves load balancers whose transition is over to `ACTIVE` (children too), and removes
    /// those that were being deleted.
    pub fn settle(&mut self) {
        let now = Instant::now();
        let done: Vec<String> = self
            .transitions
            .iter()
            .filter(|(_, t)| t.until <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in done {
            self.transitions.remove(&id);
            let status = self
                .store
                .loadbalancers
                .get(&id)
                .and_then(|lb| lb["provisioning_status"].as_str())
                .unwrap_or_default()
                .to_string();
            if status == "PENDING_DELETE" {
                self.remove_load_balancer(&id);
            } else {
                self.set_tree_status(&id, "ACTIVE");
            }
        }
    }

    /// Sets the provisioning status of a load balancer and of every child still in a
    /// transitional state (or all children, for a non-`ACTIVE` target).
    pub fn set_tree_status(&mut self, lb_id: &str, status: &str) {
        let online = if status == "ACTIVE" {
            "ONLINE"
        } else {
            "OFFLINE"
        };
        if let Some(lb) = self.store.loadbalancers.get_mut(lb_id) {
            lb["provisioning_status"] = json!(status);
            if status == "ACTIVE" {
                lb["operating_status"] = json!(online);
            }
        }
        for collection in self.store.octavia_children() {
            for child in collection.values_mut() {
                if child["__lb"] != json!(lb_id) {
                    continue;
                }
                let pending = child["provisioning_status"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("PENDING_"));
                if pending || status != "ACTIVE" {
                    child["provisioning_status"] = json!(status);
                    if status == "ACTIVE" {
                        child["operating_status"] = json!(online);
                    }
                }
            }
        }
    }

    /// Puts a load balancer into `status` (a `PENDING_*` value) for the configured delay.
    pub fn begin_transition(&mut self, lb_id: &str, status: &str) {
        self.begin_transition_for(lb_id, status, self.config.provisioning_delay);
    }

    pub fn begin_transition_for(&mut self, lb_id: &str, status: &str, delay: Duration) {
        if let Some(lb) = self.store.loadbalancers.get_mut(lb_id) {
            lb["provisioning_status"] = json!(status);
            lb["updated_at"] = json!(Self::now_text());
        }
        self.transitions.insert(
            lb_id.to_string(),
            Transition {
                until: Instant::now() + delay,
            },
        );
    }

    /// Octavia refuses any change under a load balancer that is not `ACTIVE` (409).
    pub fn require_mutable(&self, lb_id: &str) -> Result<(), ApiError> {
        let lb = self
            .store
            .loadbalancers
            .get(lb_id)
            .ok_or_else(|| ApiError::not_found("Load Balancer", lb_id))?;
        match lb["provisioning_status"].as_str() {
            Some("ACTIVE") => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::CONFLICT,
                format!("Load Balancer {lb_id} is immutable and cannot be updated."),
            )),
        }
    }

    /// Removes a load balancer with all its children and its VIP port (Neutron disassociates a
    /// floating IP whose port goes away).
    pub fn remove_load_balancer(&mut self, lb_id: &str) {
        let Some(lb) = self.store.loadbalancers.remove(lb_id) else {
            return;
        };
        for collection in self.store.octavia_children() {
            collection.retain(|_, child| child["__lb"] != json!(lb_id));
        }
        if let Some(port) = lb["vip_port_id"].as_str() {
            self.remove_port(port);
        }
    }

    pub fn remove_port(&mut self, port_id: &str) {
        self.store.ports.remove(port_id);
        // Neutron detaches floating IPs from a port that goes away.
        for fip in self.store.floatingips.values_mut() {
            if fip["port_id"] == json!(port_id) {
                fip["port_id"] = Value::Null;
                fip["fixed_ip_address"] = Value::Null;
                fip["status"] = json!("DOWN");
            }
        }
    }

    /// The first free address of `subnet` (skipping the network, gateway and addresses
    /// already bound to ports or floating IPs).
    pub fn allocate_address(&self, subnet_id: &str) -> Result<IpAddr, ApiError> {
        let subnet = self
            .store
            .subnets
            .get(subnet_id)
            .ok_or_else(|| ApiError::not_found("Subnet", subnet_id))?;
        let cidr: IpNet = subnet["cidr"]
            .as_str()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| ApiError::bad_request("subnet has no valid cidr"))?;
        let used: Vec<String> = self
            .store
            .ports
            .values()
            .flat_map(|p| {
                p["fixed_ips"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| f["ip_address"].as_str().map(str::to_string))
            })
            .chain(
                self.store
                    .floatingips
                    .values()
                    .filter_map(|f| f["floating_ip_address"].as_str().map(str::to_string)),
            )
            .collect();
        let gateway = subnet["gateway_ip"].as_str().unwrap_or_default();
        cidr.hosts()
            .skip(1) // .1 is the gateway by convention
            .find(|ip| {
                let text = ip.to_string();
                text != gateway && !used.contains(&text)
            })
            .ok_or_else(|| {
                ApiError::typed(
                    StatusCode::CONFLICT,
                    "IpAddressGenerationFailure",
                    format!(
                        "No more IP addresses available on network {}.",
                        subnet["network_id"]
                    ),
                )
            })
    }
}

/// Keeps the documents whose fields match every filter of `query` (Octavia and Neutron
/// filter lists by any attribute; `tags` needs all listed tags; a list attribute matches
/// when it holds the value). Paging and field selection
/// parameters are ignored.
pub(crate) fn filter<'a>(
    items: impl Iterator<Item = &'a Value>,
    query: &[(String, String)],
) -> Vec<Value> {
    let fixed_ips = FixedIpFilter::from_query(query);
    items
        .filter(|item| fixed_ips.as_ref().is_none_or(|f| f.matches(item)))
        .filter(|item| {
            query.iter().all(|(key, wanted)| match key.as_str() {
                "limit" | "marker" | "fields" | "sort_key" | "sort_dir" | "page_reverse" => true,
                // Judged as a whole by `FixedIpFilter`.
                "fixed_ips" => true,
                "tags" => wanted.split(',').all(|tag| {
                    item["tags"]
                        .as_array()
                        .is_some_and(|tags| tags.iter().any(|t| t == tag))
                }),
                "loadbalancer_id" if item.get("loadbalancer_id").is_none() => {
                    item["__lb"].as_str() == Some(wanted.as_str())
                }
                // A list attribute (a port's `security_groups`) matches when it holds the value.
                _ => match &item[key.as_str()] {
                    Value::Array(values) => values
                        .iter()
                        .any(|v| render(v).is_some_and(|have| have.eq_ignore_ascii_case(wanted))),
                    value => render(value).is_some_and(|have| have.eq_ignore_ascii_case(wanted)),
                },
            })
        })
        .map(public)
        .collect()
}

/// Neutron's `fixed_ips` port filter: each `fixed_ips=ip_address=<ip>` or
/// `fixed_ips=subnet_id=<id>` adds a value; a port matches when one of its fixed IPs has one
/// of the addresses (when any is given) on one of the subnets (when any is given). Repeating
/// the filter widens it, as Neutron's `IN (...)` query does, so one call finds the ports of
/// many addresses.
struct FixedIpFilter {
    addresses: Vec<String>,
    subnets: Vec<String>,
    /// A sub-key Neutron would not filter on (`fixed_ips=mac=...`): nothing matches.
    unknown: bool,
}

impl FixedIpFilter {
    fn from_query(query: &[(String, String)]) -> Option<Self> {
        let mut filter = FixedIpFilter {
            addresses: Vec::new(),
            subnets: Vec::new(),
            unknown: false,
        };
        let mut any = false;
        for (_, value) in query.iter().filter(|(key, _)| key == "fixed_ips") {
            any = true;
            match value.split_once('=') {
                Some(("ip_address", ip)) => filter.addresses.push(ip.to_string()),
                Some(("subnet_id", subnet)) => filter.subnets.push(subnet.to_string()),
                _ => filter.unknown = true,
            }
        }
        any.then_some(filter)
    }

    fn matches(&self, port: &Value) -> bool {
        let wanted = |list: &[String], value: &Value| {
            list.is_empty() || value.as_str().is_some_and(|v| list.iter().any(|w| w == v))
        };
        !self.unknown
            && port["fixed_ips"].as_array().is_some_and(|ips| {
                ips.iter().any(|ip| {
                    wanted(&self.addresses, &ip["ip_address"])
                        && wanted(&self.subnets, &ip["subnet_id"])
                })
            })
    }
}

fn render(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A stored document without the mock's bookkeeping fields (`__lb`, `__pool`).
pub(crate) fn public(value: &Value) -> Value {
    let mut value = value.clone();
    if let Some(object) = value.as_object_mut() {
        object.retain(|key, _| !key.starts_with("__"));
    }
    value
}

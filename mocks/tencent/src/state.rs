//! The mock's state: CLBs with their listeners and targets, the async tasks, quotas, the
//! journal and armed faults; and the CLB actions served against it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// An error answer: `Response.Error{Code, Message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Tencent's error code (`InvalidParameter.LBIdNotFound`).
    pub code: String,
    /// Its message.
    pub message: String,
}

impl ApiError {
    /// An error with `code` and `message`.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        ApiError {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

pub(crate) type Reply = Result<Map<String, Value>, ApiError>;

/// Limits the mock enforces.
#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    /// Public (`OPEN`) CLBs per region (Tencent's default: 100).
    pub public_load_balancers: usize,
    /// Internal CLBs per region (default 100).
    pub internal_load_balancers: usize,
    /// Listeners per CLB (default 50).
    pub listeners_per_load_balancer: usize,
    /// Security groups per region (Tencent's default: 50).
    pub security_groups: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            public_load_balancers: 100,
            internal_load_balancers: 100,
            listeners_per_load_balancer: 50,
            security_groups: 50,
        }
    }
}

/// A fault armed for an action.
#[derive(Debug, Clone)]
pub struct Fault {
    /// The `X-TC-Action` to match.
    pub action: String,
    /// Matching requests to let through first.
    pub skip: u32,
    /// How many times it fires.
    pub times: u32,
    /// What it does.
    pub kind: FaultKind,
}

/// What a fault does.
#[derive(Debug, Clone)]
pub enum FaultKind {
    /// Answer with this error instead of serving.
    Error {
        /// Error code (`RequestLimitExceeded`, `InternalError`).
        code: String,
        /// Message.
        message: String,
    },
    /// Serve the request, but its async task ends in `Status 1` with this message and the
    /// change is undone.
    FailTask(String),
    /// Serve the request (the change is made), then answer the gateway's HTML 503 instead of
    /// the API's answer: the answer was lost on the way back.
    LoseAnswer,
}

impl Fault {
    /// Answers the next `times` calls of `action` with `code`.
    pub fn error(action: &str, code: &str, message: &str, times: u32) -> Fault {
        Fault {
            action: action.into(),
            skip: 0,
            times,
            kind: FaultKind::Error {
                code: code.into(),
                message: message.into(),
            },
        }
    }

    /// The next call of `action` starts a task that fails with `message`.
    pub fn fail_task(action: &str, message: &str) -> Fault {
        Fault {
            action: action.into(),
            skip: 0,
            times: 1,
            kind: FaultKind::FailTask(message.into()),
        }
    }

    /// The next call of `action` is served but its answer is lost (a gateway 503).
    pub fn lose_answer(action: &str) -> Fault {
        Fault {
            action: action.into(),
            skip: 0,
            times: 1,
            kind: FaultKind::LoseAnswer,
        }
    }

    /// Lets `skip` matching calls through before firing.
    pub fn after(mut self, skip: u32) -> Fault {
        self.skip = skip;
        self
    }
}

/// One request, as the mock saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// `X-TC-Action`.
    pub action: String,
    /// The JSON body.
    pub body: Value,
    /// The error code answered, if any.
    pub error: Option<String>,
}

impl JournalEntry {
    /// True for actions that may change state (everything but `Describe*`).
    pub fn is_mutation(&self) -> bool {
        !self.action.starts_with("Describe")
    }
}

/// A bound target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Target {
    /// `InstanceId` (a CVM) when bound by instance.
    pub instance_id: Option<String>,
    /// `EniIp` when bound by IP.
    pub eni_ip: Option<String>,
    /// Backend port.
    pub port: u16,
    /// Weight 0–100.
    pub weight: u8,
}

impl Target {
    fn same_backend(&self, other: &Target) -> bool {
        self.instance_id == other.instance_id
            && self.eni_ip == other.eni_ip
            && self.port == other.port
    }

    /// As `DescribeTargets` shows it (the API's `Backend`: an IP-bound target is `Type` ENI
    /// with its address in `PrivateIpAddresses`; there is no `EniIp` field in answers).
    fn to_json(&self) -> Value {
        json!({
            "Type": if self.instance_id.is_some() { "CVM" } else { "ENI" },
            "InstanceId": self.instance_id.clone().unwrap_or_default(),
            "Port": self.port, "Weight": self.weight,
            "PrivateIpAddresses": self.eni_ip.iter().collect::<Vec<_>>(),
        })
    }
}

/// A listener.
#[derive(Debug, Clone)]
pub struct Listener {
    /// `lbl-…`.
    pub id: String,
    /// `ListenerName`.
    pub name: String,
    /// `TCP`, `UDP`, …
    pub protocol: String,
    /// Front-end port.
    pub port: u16,
    /// Every other parameter given at create or modify (`HealthCheck`, `Scheduler`, …).
    pub attributes: Map<String, Value>,
    /// Bound targets.
    pub targets: Vec<Target>,
}

impl Listener {
    fn to_json(&self) -> Value {
        let mut listener = self.attributes.clone();
        listener.insert("ListenerId".into(), json!(self.id));
        listener.insert("ListenerName".into(), json!(self.name));
        listener.insert("Protocol".into(), json!(self.protocol));
        listener.insert("Port".into(), json!(self.port));
        listener.entry("Scheduler").or_insert_with(|| json!("WRR"));
        listener
            .entry("SessionExpireTime")
            .or_insert_with(|| json!(0));
        Value::Object(listener)
    }
}

/// A CLB.
#[derive(Debug, Clone)]
pub struct LoadBalancer {
    /// `lb-…`.
    pub id: String,
    /// `LoadBalancerName`.
    pub name: String,
    /// `OPEN` or `INTERNAL`.
    pub kind: String,
    /// `VpcId`.
    pub vpc_id: String,
    /// `SubnetId` (internal only).
    pub subnet_id: String,
    /// `LoadBalancerVips`.
    pub vips: Vec<String>,
    /// `AddressIPv6` (IPv6 CLBs).
    pub address_ipv6: Option<String>,
    /// `Status`: 0 creating, 1 normal.
    pub status: u8,
    /// Tags in order.
    pub tags: Vec<(String, String)>,
    /// Other create parameters (`InternetAccessible`, `VipIsp`, …) echoed in Describe.
    pub attributes: Map<String, Value>,
    /// Listeners by id.
    pub listeners: BTreeMap<String, Listener>,
    /// Bound security groups in priority order (`SecureGroups`).
    pub security_groups: Vec<String>,
}

impl LoadBalancer {
    /// As `DescribeLoadBalancers` shows it.
    pub(crate) fn to_json(&self) -> Value {
        let mut lb = self.attributes.clone();
        // Create's `InternetAccessible` is shown as `NetworkAttributes` in Describe answers.
        if let Some(access) = lb.remove("InternetAccessible") {
            lb.insert("NetworkAttributes".into(), access);
        }
        lb.insert("LoadBalancerId".into(), json!(self.id));
        lb.insert("LoadBalancerName".into(), json!(self.name));
        lb.insert("LoadBalancerType".into(), json!(self.kind));
        lb.insert("Forward".into(), json!(1));
        lb.insert("VpcId".into(), json!(self.vpc_id));
        lb.insert("SubnetId".into(), json!(self.subnet_id));
        lb.insert("LoadBalancerVips".into(), json!(self.vips));
        lb.insert("AddressIPv6".into(), json!(self.address_ipv6));
        lb.insert("Status".into(), json!(self.status));
        lb.insert("SecureGroups".into(), json!(self.security_groups));
        lb.insert(
            "Tags".into(),
            Value::Array(
                self.tags
                    .iter()
                    .map(|(k, v)| json!({"TagKey": k, "TagValue": v}))
                    .collect(),
            ),
        );
        Value::Object(lb)
    }

    /// The listener `id`, or `InvalidParameter.ListenerIdNotFound`.
    fn listener(&self, id: &str) -> Result<&Listener, ApiError> {
        self.listeners.get(id).ok_or_else(|| listener_not_found(id))
    }

    fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What completing a task does.
#[derive(Debug, Clone)]
enum Completion {
    /// The CLB becomes `Status 1`.
    Created,
    /// The CLB goes away.
    Deleted,
    /// Nothing beyond freeing the CLB.
    Changed,
}

/// An async task (keyed by the `RequestId` of the call that started it).
#[derive(Debug, Clone)]
pub struct Task {
    lb_id: String,
    deal: Option<String>,
    done_at: Instant,
    failure: Option<String>,
    /// The CLB before the change, restored when the task fails (`None`: it did not exist).
    before: Option<LoadBalancer>,
    completion: Completion,
    finished: bool,
}

/// Fixed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// SecretId → (SecretKey, required X-TC-Token).
    pub credentials: BTreeMap<String, (String, Option<String>)>,
    /// The one region served.
    pub region: String,
    /// The cluster VPC.
    pub vpc_id: String,
    /// Subnets of the VPC: id → the /24 prefix internal VIPs come from (`10.0.1`).
    pub subnets: BTreeMap<String, String>,
    /// How long async tasks run.
    pub task_delay: Duration,
    /// Largest accepted |now − X-TC-Timestamp|.
    pub signature_window: Duration,
    /// Limits.
    pub quotas: Quotas,
}

/// Everything the mock holds.
#[derive(Debug)]
pub struct State {
    /// Configuration.
    pub config: Config,
    /// CLBs by id.
    pub load_balancers: BTreeMap<String, LoadBalancer>,
    /// Tasks by id.
    pub tasks: BTreeMap<String, Task>,
    /// Every request.
    pub journal: Vec<JournalEntry>,
    /// Armed faults.
    pub faults: Vec<Fault>,
    /// VPC security groups by id.
    pub security_groups: BTreeMap<String, crate::security_groups::SecurityGroup>,
    /// `CreateLoadBalancer` answers by the `ClientToken` that asked for them: a request
    /// repeated with the same token gets the first answer again and creates nothing.
    client_tokens: BTreeMap<String, Map<String, Value>>,
    sequence: u64,
}

/// The CreateLoadBalancer parameters the API knows (2018-03-17, `models.py`).
const CREATE_LB_KEYS: &[&str] = &[
    "LoadBalancerType",
    "Forward",
    "LoadBalancerName",
    "VpcId",
    "SubnetId",
    "ProjectId",
    "AddressIPVersion",
    "Number",
    "MasterZoneId",
    "ZoneId",
    "InternetAccessible",
    "VipIsp",
    "Tags",
    "Vip",
    "BandwidthPackageId",
    "ExclusiveCluster",
    "SlaType",
    "ClusterIds",
    "ClientToken",
    "SnatPro",
    "SnatIps",
    "ClusterTag",
    "SlaveZoneId",
    "EipAddressId",
    "LoadBalancerPassToTarget",
    "DynamicVip",
    "Egress",
    "LBChargePrepaid",
    "LBChargeType",
    "AccessLogTopicId",
    "AdvancedRoute",
    "AvailableZoneAffinityInfo",
];

/// The CreateListener parameters the API knows.
const CREATE_LISTENER_KEYS: &[&str] = &[
    "LoadBalancerId",
    "Ports",
    "Protocol",
    "ListenerNames",
    "HealthCheck",
    "Certificate",
    "SessionExpireTime",
    "Scheduler",
    "SniSwitch",
    "TargetType",
    "SessionType",
    "KeepaliveEnable",
    "EndPort",
    "DeregisterTargetRst",
    "MultiCertInfo",
    "MaxConn",
    "MaxCps",
    "IdleConnectTimeout",
    "ProxyProtocol",
    "SnatEnable",
    "FullEndPorts",
    "H2cSwitch",
    "SslCloseSwitch",
    "DataCompressMode",
    "RescheduleTargetZeroWeight",
    "RescheduleUnhealthy",
    "RescheduleExpandTarget",
    "RescheduleStartTime",
    "RescheduleInterval",
];

/// The ModifyListener parameters the mock accepts.
const MODIFY_LISTENER_KEYS: &[&str] = &[
    "LoadBalancerId",
    "ListenerId",
    "ListenerName",
    "SessionExpireTime",
    "HealthCheck",
    "Certificate",
    "Scheduler",
    "SniSwitch",
    "TargetType",
    "KeepaliveEnable",
    "DeregisterTargetRst",
    "SessionType",
    "MaxConn",
    "MaxCps",
    "IdleConnectTimeout",
    "ProxyProtocol",
    "SnatEnable",
];

fn unknown_keys(body: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match body.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(ApiError::new(
            "UnknownParameter",
            format!("The parameter `{key}` is not recognized."),
        )),
        None => Ok(()),
    }
}

fn required_str<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a str, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Err(ApiError::new(
            "MissingParameter",
            format!("The request is missing a required parameter `{key}`."),
        )),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(invalid_type(key, "String")),
    }
}

fn optional_str<'a>(body: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid_type(key, "String")),
    }
}

fn optional_int(body: &Map<String, Value>, key: &str) -> Result<Option<i64>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| invalid_type(key, "Integer")),
    }
}

fn optional_array<'a>(
    body: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Vec<Value>>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(_) => Err(invalid_type(key, "Array")),
    }
}

/// A required array, refused as missing with the short message the API gives for lists.
fn required_array<'a>(body: &'a Map<String, Value>, key: &str) -> Result<&'a Vec<Value>, ApiError> {
    optional_array(body, key)?.ok_or_else(|| {
        ApiError::new(
            "MissingParameter",
            format!("The request is missing `{key}`."),
        )
    })
}

/// An optional array of strings (`LoadBalancerIds`, `ListenerIds`).
fn optional_strings(body: &Map<String, Value>, key: &str) -> Result<Option<Vec<String>>, ApiError> {
    optional_array(body, key)?
        .map(|items| strings(items, key))
        .transpose()
}

/// An optional object. Unlike the scalar parameters, an explicit `null` is refused as the
/// wrong type (what the mock has always answered for `HealthCheck` and `InternetAccessible`).
fn optional_object<'a>(
    body: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Map<String, Value>>, ApiError> {
    body.get(key)
        .map(|value| value.as_object().ok_or_else(|| invalid_type(key, "Object")))
        .transpose()
}

/// One element of an array of structures (`Tags`, `Filters`, `Targets`); `what` names the
/// array's type in the refusal (`Array of TagInfo`).
fn element<'a>(item: &'a Value, key: &str, what: &str) -> Result<&'a Map<String, Value>, ApiError> {
    item.as_object().ok_or_else(|| invalid_type(key, what))
}

/// An optional integer that, when given, must lie in `allowed`; the refusal says `rule`.
fn optional_int_in(
    body: &Map<String, Value>,
    key: &str,
    allowed: std::ops::RangeInclusive<i64>,
    rule: &str,
) -> Result<Option<i64>, ApiError> {
    match optional_int(body, key)? {
        Some(value) if !allowed.contains(&value) => Err(invalid_value(key, rule)),
        value => Ok(value),
    }
}

/// An enumerated string value; the refusal names the value given. `key` is the parameter's
/// path as the API reports it (`InternetAccessible.InternetChargeType`).
fn one_of<'a>(key: &str, value: &'a str, allowed: &[&str]) -> Result<&'a str, ApiError> {
    if allowed.contains(&value) {
        Ok(value)
    } else {
        Err(invalid_value(key, value))
    }
}

/// A listener's `SessionExpireTime`: 0 (no persistence) or 30 to 3600 seconds.
fn check_session_expire_time(body: &Map<String, Value>) -> Result<(), ApiError> {
    match optional_int(body, "SessionExpireTime")? {
        Some(expire) if expire != 0 && !(30..=3600).contains(&expire) => {
            Err(invalid_value("SessionExpireTime", "must be 0 or 30-3600"))
        }
        _ => Ok(()),
    }
}

/// How many targets one call may carry: 1 to `max`; `who_takes` names the action(s) and verb
/// in the refusal (`RegisterTargets takes`).
fn check_target_count(count: usize, max: usize, who_takes: &str) -> Result<(), ApiError> {
    if count == 0 || count > max {
        return Err(ApiError::new(
            "LimitExceeded",
            format!("{count} targets in one call; {who_takes} 1 to {max}."),
        ));
    }
    Ok(())
}

fn invalid_type(key: &str, want: &str) -> ApiError {
    ApiError::new(
        "InvalidParameter",
        format!("The type of parameter `{key}` must be {want}."),
    )
}

fn invalid_value(key: &str, message: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        "InvalidParameterValue",
        format!("The value of `{key}` is invalid: {message}"),
    )
}

fn strings(items: &[Value], key: &str) -> Result<Vec<String>, ApiError> {
    items
        .iter()
        .map(|v| {
            v.as_str()
                .map(str::to_string)
                .ok_or_else(|| invalid_type(key, "Array of String"))
        })
        .collect()
}

impl State {
    /// A fresh state.
    pub fn new(config: Config) -> Self {
        State {
            config,
            load_balancers: BTreeMap::new(),
            tasks: BTreeMap::new(),
            journal: Vec::new(),
            faults: Vec::new(),
            security_groups: BTreeMap::new(),
            client_tokens: BTreeMap::new(),
            sequence: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.sequence += 1;
        self.sequence
    }

    /// A number unique within the mock (for new resource ids).
    pub(crate) fn next_id(&mut self) -> u64 {
        self.next()
    }

    /// [`Self::writable`] for the sibling modules.
    pub(crate) fn writable_load_balancer(&self, id: &str) -> Result<&LoadBalancer, ApiError> {
        self.writable(id)
    }

    /// A request id (UUID-shaped, unique within the mock).
    pub fn request_id(&mut self) -> String {
        format!("00000000-0000-4000-8000-{:012x}", self.next())
    }

    /// Finishes the tasks whose time has come.
    pub fn settle(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| !t.finished && t.done_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            let Some(task) = self.tasks.get_mut(&id) else {
                continue;
            };
            task.finished = true;
            let task = task.clone();
            if task.failure.is_some() {
                match task.before {
                    Some(before) => {
                        self.load_balancers.insert(task.lb_id.clone(), before);
                    }
                    None => {
                        self.load_balancers.remove(&task.lb_id);
                    }
                }
                continue;
            }
            match task.completion {
                Completion::Created => {
                    if let Some(lb) = self.load_balancers.get_mut(&task.lb_id) {
                        lb.status = 1;
                    }
                }
                Completion::Deleted => {
                    self.load_balancers.remove(&task.lb_id);
                }
                Completion::Changed => {}
            }
        }
    }

    /// True while a task on `lb_id` runs.
    pub fn busy(&self, lb_id: &str) -> bool {
        self.tasks.values().any(|t| !t.finished && t.lb_id == lb_id)
    }

    fn start_task(
        &mut self,
        request_id: &str,
        lb_id: &str,
        before: Option<LoadBalancer>,
        completion: Completion,
        failure: Option<String>,
        deal: Option<String>,
    ) {
        let done_at = Instant::now() + self.config.task_delay;
        self.tasks.insert(
            request_id.to_string(),
            Task {
                lb_id: lb_id.to_string(),
                deal,
                done_at,
                failure,
                before,
                completion,
                finished: false,
            },
        );
    }

    /// Starts the task of a write that changed CLB `lb_id` in place; when `failure` makes the
    /// task fail, the CLB goes back to `before`.
    fn start_change(
        &mut self,
        request_id: &str,
        lb_id: &str,
        before: LoadBalancer,
        failure: Option<String>,
    ) {
        self.start_task(
            request_id,
            lb_id,
            Some(before),
            Completion::Changed,
            failure,
            None,
        );
    }

    /// Listener `listener_id` of CLB `lb_id`, to change, when both exist.
    fn listener_mut(&mut self, lb_id: &str, listener_id: &str) -> Option<&mut Listener> {
        self.load_balancers
            .get_mut(lb_id)
            .and_then(|lb| lb.listeners.get_mut(listener_id))
    }

    /// The CLB `id`, or `InvalidParameter.LBIdNotFound`.
    fn load_balancer(&self, id: &str) -> Result<&LoadBalancer, ApiError> {
        self.load_balancers.get(id).ok_or_else(|| lb_not_found(id))
    }

    /// The CLB `id`, ready for a write: exists, not being created or busy.
    fn writable(&self, id: &str) -> Result<&LoadBalancer, ApiError> {
        let lb = self.load_balancer(id)?;
        if self.busy(id) {
            return Err(ApiError::new(
                "FailedOperation.ResourceInOperating",
                format!(
                    "The load balancer {id} is being operated on by another task; try again later."
                ),
            ));
        }
        Ok(lb)
    }

    /// Serves one action. `fail` makes its task fail (an armed [`FaultKind::FailTask`]).
    pub fn serve(
        &mut self,
        action: &str,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
    ) -> Reply {
        match action {
            "CreateLoadBalancer" => self.create_load_balancer(body, request_id, fail),
            "DescribeLoadBalancers" => self.describe_load_balancers(body),
            "DeleteLoadBalancer" => self.delete_load_balancer(body, request_id, fail),
            "DescribeTaskStatus" => self.describe_task_status(body),
            "CreateListener" => self.create_listener(body, request_id, fail),
            "DescribeListeners" => self.describe_listeners(body),
            "ModifyListener" => self.modify_listener(body, request_id, fail),
            "DeleteListener" => self.delete_listeners(body, request_id, fail, false),
            "DeleteLoadBalancerListeners" => self.delete_listeners(body, request_id, fail, true),
            "RegisterTargets" => self.register_targets(body, request_id, fail, true),
            "DeregisterTargets" => self.register_targets(body, request_id, fail, false),
            "BatchRegisterTargets" => self.batch_targets(body, true),
            "BatchDeregisterTargets" => self.batch_targets(body, false),
            "DescribeTargets" => self.describe_targets(body),
            "SetLoadBalancerSecurityGroups" => self.set_load_balancer_security_groups(body),
            other => Err(ApiError::new(
                "InvalidAction",
                format!("The action `{other}` is not supported by this mock."),
            )),
        }
    }

    fn create_load_balancer(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
    ) -> Reply {
        unknown_keys(body, CREATE_LB_KEYS)?;
        let client_token = optional_str(body, "ClientToken")?.map(str::to_string);
        if let Some(token) = &client_token {
            if token.is_empty() || token.len() > 64 || !token.is_ascii() {
                return Err(invalid_value(
                    "ClientToken",
                    "must be 1 to 64 ASCII characters",
                ));
            }
            // Idempotency as the API documents it: the same token, the same answer.
            if let Some(first) = self.client_tokens.get(token) {
                return Ok(first.clone());
            }
        }
        let kind = required_str(body, "LoadBalancerType")?.to_string();
        if kind != "OPEN" && kind != "INTERNAL" {
            return Err(invalid_value(
                "LoadBalancerType",
                "must be OPEN or INTERNAL",
            ));
        }
        optional_int_in(
            body,
            "Forward",
            1..=1,
            "only 1 (application CLB) can be created; classic CLBs are no longer sold",
        )?;
        optional_int_in(body, "Number", 1..=1, "this mock creates one CLB per call")?;
        let vpc_id = optional_str(body, "VpcId")?
            .unwrap_or(&self.config.vpc_id)
            .to_string();
        if vpc_id != self.config.vpc_id {
            return Err(ApiError::new(
                "InvalidParameter.VpcIdNotFound",
                format!("VPC {vpc_id} does not exist."),
            ));
        }
        let subnet_id = optional_str(body, "SubnetId")?.map(str::to_string);
        let vip_prefix = match (&*kind, &subnet_id) {
            ("INTERNAL", None) => {
                return Err(ApiError::new(
                    "MissingParameter",
                    "An INTERNAL load balancer needs `SubnetId`.",
                ));
            }
            ("INTERNAL", Some(subnet)) => match self.config.subnets.get(subnet) {
                Some(prefix) => prefix.clone(),
                None => {
                    return Err(ApiError::new(
                        "InvalidParameter.SubnetIdNotFound",
                        format!("Subnet {subnet} does not exist in {vpc_id}."),
                    ));
                }
            },
            (_, Some(_)) => {
                return Err(invalid_value(
                    "SubnetId",
                    "only INTERNAL load balancers take a subnet",
                ));
            }
            _ => "203.0.113".to_string(),
        };
        if let Some(access) = optional_object(body, "InternetAccessible")? {
            unknown_keys(
                access,
                &[
                    "InternetChargeType",
                    "InternetMaxBandwidthOut",
                    "BandwidthpkgSubType",
                ],
            )?;
            if let Some(charge) = optional_str(access, "InternetChargeType")? {
                one_of(
                    "InternetAccessible.InternetChargeType",
                    charge,
                    &[
                        "TRAFFIC_POSTPAID_BY_HOUR",
                        "BANDWIDTH_POSTPAID_BY_HOUR",
                        "BANDWIDTH_PACKAGE",
                    ],
                )?;
            }
            if let Some(bandwidth) = optional_int(access, "InternetMaxBandwidthOut")?
                && !(1..=2048).contains(&bandwidth)
            {
                return Err(invalid_value(
                    "InternetAccessible.InternetMaxBandwidthOut",
                    format!("{bandwidth} is outside [1, 2048]"),
                ));
            }
        }
        let ip_version = one_of(
            "AddressIPVersion",
            optional_str(body, "AddressIPVersion")?.unwrap_or("IPV4"),
            &["IPV4", "IPV6", "IPv6FullChain"],
        )?;
        let name = optional_str(body, "LoadBalancerName")?.map(str::to_string);
        if name.as_ref().is_some_and(|n| n.chars().count() > 60) {
            return Err(ApiError::new(
                "InvalidParameterValue.Length",
                "LoadBalancerName must be at most 60 characters.",
            ));
        }
        let mut tags = Vec::new();
        for tag in optional_array(body, "Tags")?.into_iter().flatten() {
            let tag = element(tag, "Tags", "Array of TagInfo")?;
            unknown_keys(tag, &["TagKey", "TagValue"])?;
            tags.push((
                required_str(tag, "TagKey")?.to_string(),
                optional_str(tag, "TagValue")?
                    .unwrap_or_default()
                    .to_string(),
            ));
        }
        let (count, quota) = if kind == "OPEN" {
            (
                self.load_balancers
                    .values()
                    .filter(|lb| lb.kind == "OPEN")
                    .count(),
                self.config.quotas.public_load_balancers,
            )
        } else {
            (
                self.load_balancers
                    .values()
                    .filter(|lb| lb.kind == "INTERNAL")
                    .count(),
                self.config.quotas.internal_load_balancers,
            )
        };
        if count >= quota {
            return Err(ApiError::new(
                "LimitExceeded",
                format!("The quota of {quota} {kind} load balancers in this region is used up."),
            ));
        }
        let n = self.next();
        let id = format!("lb-{n:08x}");
        let mut attributes = Map::new();
        for (key, value) in body {
            if !matches!(
                key.as_str(),
                "LoadBalancerType"
                    | "LoadBalancerName"
                    | "VpcId"
                    | "SubnetId"
                    | "Tags"
                    | "Number"
                    | "Forward"
                    | "ClientToken"
            ) {
                attributes.insert(key.clone(), value.clone());
            }
        }
        attributes.insert("AddressIPVersion".into(), json!(ip_version));
        let lb = LoadBalancer {
            id: id.clone(),
            name: name.unwrap_or_else(|| format!("clb-{n}")),
            kind,
            vpc_id,
            subnet_id: subnet_id.unwrap_or_default(),
            vips: if ip_version == "IPV4" || ip_version == "IPv6FullChain" {
                vec![format!("{vip_prefix}.{}", 10 + n % 240)]
            } else {
                Vec::new()
            },
            address_ipv6: (ip_version != "IPV4").then(|| format!("2001:db8::{n:x}")),
            status: 0,
            tags,
            attributes,
            listeners: BTreeMap::new(),
            security_groups: Vec::new(),
        };
        self.load_balancers.insert(id.clone(), lb);
        let deal = format!("2026{n:012}");
        self.start_task(
            request_id,
            &id,
            None,
            Completion::Created,
            fail,
            Some(deal.clone()),
        );
        let mut reply = Map::new();
        reply.insert("LoadBalancerIds".into(), json!([id]));
        reply.insert("DealName".into(), json!(deal));
        if let Some(token) = client_token {
            self.client_tokens.insert(token, reply.clone());
        }
        Ok(reply)
    }

    fn describe_load_balancers(&mut self, body: &Map<String, Value>) -> Reply {
        let limit =
            optional_int_in(body, "Limit", 1..=100, "must be between 1 and 100")?.unwrap_or(20);
        let offset = optional_int(body, "Offset")?.unwrap_or(0).max(0);
        let ids = optional_strings(body, "LoadBalancerIds")?;
        let kind = optional_str(body, "LoadBalancerType")?;
        let vpc = optional_str(body, "VpcId")?;
        let mut filters = Vec::new();
        for filter in optional_array(body, "Filters")?.into_iter().flatten() {
            let filter = element(filter, "Filters", "Array of Filter")?;
            let name = required_str(filter, "Name")?.to_string();
            let values = strings(
                optional_array(filter, "Values")?
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
                "Filters.Values",
            )?;
            if name != "tag-key" && name != "vpc-id" && !name.starts_with("tag:") {
                return Err(invalid_value(
                    "Filters.Name",
                    format!("{name} is not supported"),
                ));
            }
            filters.push((name, values));
        }
        let matching: Vec<&LoadBalancer> = self
            .load_balancers
            .values()
            .filter(|lb| ids.as_ref().is_none_or(|ids| ids.contains(&lb.id)))
            .filter(|lb| kind.is_none_or(|k| lb.kind == k))
            .filter(|lb| vpc.is_none_or(|v| lb.vpc_id == v))
            .filter(|lb| {
                filters.iter().all(|(name, values)| match name.as_str() {
                    "tag-key" => values.iter().any(|k| lb.tag(k).is_some()),
                    "vpc-id" => values.contains(&lb.vpc_id),
                    tag => {
                        let key = tag.trim_start_matches("tag:");
                        lb.tag(key).is_some_and(|v| values.iter().any(|w| w == v))
                    }
                })
            })
            .collect();
        let total = matching.len();
        let page: Vec<Value> = matching
            .into_iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(usize::try_from(limit).unwrap_or(100))
            .map(LoadBalancer::to_json)
            .collect();
        let mut reply = Map::new();
        reply.insert("TotalCount".into(), json!(total));
        reply.insert("LoadBalancerSet".into(), Value::Array(page));
        Ok(reply)
    }

    fn delete_load_balancer(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
    ) -> Reply {
        unknown_keys(body, &["LoadBalancerIds", "ForceDelete"])?;
        let ids = strings(required_array(body, "LoadBalancerIds")?, "LoadBalancerIds")?;
        if ids.len() != 1 {
            return Err(invalid_value(
                "LoadBalancerIds",
                "this mock deletes one CLB per call",
            ));
        }
        let id = &ids[0];
        let lb = self.writable(id)?.clone();
        let bound: usize = lb.listeners.values().map(|l| l.targets.len()).sum();
        if bound >= 20 && body.get("ForceDelete") != Some(&json!(true)) {
            return Err(ApiError::new(
                "FailedOperation",
                format!("{id} has {bound} targets bound; unbind them or set ForceDelete."),
            ));
        }
        self.start_task(request_id, id, Some(lb), Completion::Deleted, fail, None);
        Ok(Map::new())
    }

    fn describe_task_status(&mut self, body: &Map<String, Value>) -> Reply {
        let task_id = optional_str(body, "TaskId")?;
        let deal = optional_str(body, "DealName")?;
        let task = match (task_id, deal) {
            (Some(id), _) => self.tasks.get(id),
            (None, Some(deal)) => self
                .tasks
                .values()
                .find(|t| t.deal.as_deref() == Some(deal)),
            (None, None) => {
                return Err(ApiError::new(
                    "MissingParameter",
                    "Either `TaskId` or `DealName` is required.",
                ));
            }
        }
        .ok_or_else(|| ApiError::new("InvalidParameter", "The task does not exist."))?;
        let (status, message) = match (&task.failure, task.finished) {
            (_, false) => (2, String::new()),
            (Some(failure), true) => (1, failure.clone()),
            (None, true) => (0, String::new()),
        };
        let mut reply = Map::new();
        reply.insert("Status".into(), json!(status));
        reply.insert("Message".into(), json!(message));
        reply.insert("LoadBalancerIds".into(), json!([task.lb_id]));
        Ok(reply)
    }

    fn create_listener(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
    ) -> Reply {
        unknown_keys(body, CREATE_LISTENER_KEYS)?;
        let lb_id = required_str(body, "LoadBalancerId")?.to_string();
        let before = self.writable(&lb_id)?.clone();
        let protocol = one_of(
            "Protocol",
            required_str(body, "Protocol")?,
            &["TCP", "UDP", "HTTP", "HTTPS", "TCP_SSL", "QUIC"],
        )?
        .to_string();
        let ports: Vec<i64> = required_array(body, "Ports")?
            .iter()
            .map(|p| {
                p.as_i64()
                    .ok_or_else(|| invalid_type("Ports", "Array of Integer"))
            })
            .collect::<Result<_, _>>()?;
        if ports.is_empty() || ports.len() >= 50 {
            return Err(invalid_value("Ports", "must hold 1 to 49 ports"));
        }
        let names = optional_strings(body, "ListenerNames")?.unwrap_or_default();
        if !names.is_empty() && names.len() != ports.len() {
            return Err(invalid_value(
                "ListenerNames",
                "must have one name per port",
            ));
        }
        check_session_expire_time(body)?;
        if let Some(scheduler) = optional_str(body, "Scheduler")? {
            one_of("Scheduler", scheduler, &["WRR", "LEAST_CONN", "IP_HASH"])?;
        }
        optional_object(body, "HealthCheck")?;
        let quota = self.config.quotas.listeners_per_load_balancer;
        if before.listeners.len() + ports.len() > quota {
            return Err(ApiError::new(
                "LimitExceeded",
                format!("A load balancer has at most {quota} listeners."),
            ));
        }
        let udp = protocol == "UDP";
        let mut created = Vec::new();
        let mut listeners = Vec::new();
        for (i, port) in ports.iter().enumerate() {
            let port = u16::try_from(*port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| invalid_value("Ports", format!("{port} is not a port")))?;
            let clash = before
                .listeners
                .values()
                .any(|l| l.port == port && (l.protocol == "UDP") == udp)
                || listeners.iter().any(|l: &Listener| l.port == port);
            if clash {
                return Err(ApiError::new(
                    "InvalidParameter.PortCheckFailed",
                    format!("Port {port} is already used by a listener of the same transport."),
                ));
            }
            let mut attributes = Map::new();
            for (key, value) in body {
                if !matches!(
                    key.as_str(),
                    "LoadBalancerId" | "Ports" | "Protocol" | "ListenerNames"
                ) {
                    attributes.insert(key.clone(), value.clone());
                }
            }
            let id = format!("lbl-{:08x}", self.next());
            created.push(id.clone());
            listeners.push(Listener {
                id,
                name: names.get(i).cloned().unwrap_or_default(),
                protocol: protocol.clone(),
                port,
                attributes,
                targets: Vec::new(),
            });
        }
        if let Some(lb) = self.load_balancers.get_mut(&lb_id) {
            for listener in listeners {
                lb.listeners.insert(listener.id.clone(), listener);
            }
        }
        self.start_change(request_id, &lb_id, before, fail);
        let mut reply = Map::new();
        reply.insert("ListenerIds".into(), json!(created));
        Ok(reply)
    }

    fn describe_listeners(&mut self, body: &Map<String, Value>) -> Reply {
        let lb = self.load_balancer(required_str(body, "LoadBalancerId")?)?;
        let ids = optional_strings(body, "ListenerIds")?;
        let protocol = optional_str(body, "Protocol")?;
        let port = optional_int(body, "Port")?;
        let listeners: Vec<Value> = lb
            .listeners
            .values()
            .filter(|l| ids.as_ref().is_none_or(|ids| ids.contains(&l.id)))
            .filter(|l| protocol.is_none_or(|p| l.protocol == p))
            .filter(|l| port.is_none_or(|p| i64::from(l.port) == p))
            .map(Listener::to_json)
            .collect();
        let mut reply = Map::new();
        reply.insert("TotalCount".into(), json!(listeners.len()));
        reply.insert("Listeners".into(), Value::Array(listeners));
        Ok(reply)
    }

    fn modify_listener(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
    ) -> Reply {
        unknown_keys(body, MODIFY_LISTENER_KEYS)?;
        let lb_id = required_str(body, "LoadBalancerId")?.to_string();
        let listener_id = required_str(body, "ListenerId")?.to_string();
        let before = self.writable(&lb_id)?.clone();
        before.listener(&listener_id)?;
        check_session_expire_time(body)?;
        optional_object(body, "HealthCheck")?;
        if let Some(listener) = self.listener_mut(&lb_id, &listener_id) {
            for (key, value) in body {
                match key.as_str() {
                    "LoadBalancerId" | "ListenerId" => {}
                    "ListenerName" => {
                        listener.name = value.as_str().unwrap_or_default().to_string();
                    }
                    // The API changes only the HealthCheck fields given; the others stay.
                    "HealthCheck" => match (listener.attributes.get_mut(key), value) {
                        (Some(Value::Object(current)), Value::Object(given)) => {
                            for (field, setting) in given {
                                current.insert(field.clone(), setting.clone());
                            }
                        }
                        _ => {
                            listener.attributes.insert(key.clone(), value.clone());
                        }
                    },
                    _ => {
                        listener.attributes.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        self.start_change(request_id, &lb_id, before, fail);
        Ok(Map::new())
    }

    fn delete_listeners(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
        many: bool,
    ) -> Reply {
        let lb_id = required_str(body, "LoadBalancerId")?.to_string();
        let before = self.writable(&lb_id)?.clone();
        let ids = if many {
            unknown_keys(body, &["LoadBalancerId", "ListenerIds"])?;
            optional_strings(body, "ListenerIds")?
                .unwrap_or_else(|| before.listeners.keys().cloned().collect())
        } else {
            unknown_keys(body, &["LoadBalancerId", "ListenerId"])?;
            vec![required_str(body, "ListenerId")?.to_string()]
        };
        for id in &ids {
            before.listener(id)?;
        }
        if let Some(lb) = self.load_balancers.get_mut(&lb_id) {
            for id in &ids {
                lb.listeners.remove(id);
            }
        }
        self.start_change(request_id, &lb_id, before, fail);
        Ok(Map::new())
    }

    fn register_targets(
        &mut self,
        body: &Map<String, Value>,
        request_id: &str,
        fail: Option<String>,
        register: bool,
    ) -> Reply {
        unknown_keys(
            body,
            &[
                "LoadBalancerId",
                "ListenerId",
                "Targets",
                "LocationId",
                "Domain",
                "Url",
            ],
        )?;
        let lb_id = required_str(body, "LoadBalancerId")?.to_string();
        let listener_id = required_str(body, "ListenerId")?.to_string();
        let before = self.writable(&lb_id)?.clone();
        let listener = before.listener(&listener_id)?;
        let items = required_array(body, "Targets")?;
        check_target_count(items.len(), 20, "RegisterTargets takes")?;
        let targets = items
            .iter()
            .map(|t| parse_target(t, false).map(|(_, t)| t))
            .collect::<Result<Vec<_>, _>>()?;
        let mut bound = listener.targets.clone();
        apply_targets(&mut bound, &targets, register)?;
        if let Some(listener) = self.listener_mut(&lb_id, &listener_id) {
            listener.targets = bound;
        }
        self.start_change(request_id, &lb_id, before, fail);
        Ok(Map::new())
    }

    fn batch_targets(&mut self, body: &Map<String, Value>, register: bool) -> Reply {
        unknown_keys(body, &["LoadBalancerId", "Targets"])?;
        let lb_id = required_str(body, "LoadBalancerId")?.to_string();
        let mut lb = self.writable(&lb_id)?.clone();
        let items = required_array(body, "Targets")?;
        check_target_count(items.len(), 500, "the batch actions take")?;
        let mut by_listener: BTreeMap<String, Vec<Target>> = BTreeMap::new();
        for item in items {
            let (listener, target) = parse_target(item, true)?;
            by_listener
                .entry(listener.unwrap_or_default())
                .or_default()
                .push(target);
        }
        // Partial failure as the API reports it: listeners that could not take their targets.
        let mut failed = Vec::new();
        for (listener_id, targets) in by_listener {
            match lb.listeners.get_mut(&listener_id) {
                Some(listener) => {
                    let mut bound = listener.targets.clone();
                    match apply_targets(&mut bound, &targets, register) {
                        Ok(()) => listener.targets = bound,
                        Err(_) => failed.push(listener_id),
                    }
                }
                None => failed.push(listener_id),
            }
        }
        self.load_balancers.insert(lb_id, lb);
        let mut reply = Map::new();
        reply.insert("FailListenerIdSet".into(), json!(failed));
        Ok(reply)
    }

    fn describe_targets(&mut self, body: &Map<String, Value>) -> Reply {
        let lb = self.load_balancer(required_str(body, "LoadBalancerId")?)?;
        let ids = optional_strings(body, "ListenerIds")?;
        if ids.as_ref().is_some_and(|ids| ids.len() > 20) {
            return Err(invalid_value(
                "ListenerIds",
                "at most 20 listener ids per call",
            ));
        }
        let listeners: Vec<Value> = lb
            .listeners
            .values()
            .filter(|l| ids.as_ref().is_none_or(|ids| ids.contains(&l.id)))
            .map(|l| {
                json!({
                    "ListenerId": l.id, "Protocol": l.protocol, "Port": l.port,
                    "ListenerName": l.name,
                    "Targets": l.targets.iter().map(Target::to_json).collect::<Vec<_>>(),
                })
            })
            .collect();
        let mut reply = Map::new();
        reply.insert("Listeners".into(), Value::Array(listeners));
        Ok(reply)
    }
}

fn lb_not_found(id: &str) -> ApiError {
    ApiError::new(
        "InvalidParameter.LBIdNotFound",
        format!("The load balancer {id} does not exist."),
    )
}

fn listener_not_found(id: &str) -> ApiError {
    ApiError::new(
        "InvalidParameter.ListenerIdNotFound",
        format!("The listener {id} does not exist."),
    )
}

/// One target object; with `batch`, also its `ListenerId`.
fn parse_target(value: &Value, batch: bool) -> Result<(Option<String>, Target), ApiError> {
    let target = element(value, "Targets", "Array of Target")?;
    let mut known = vec!["InstanceId", "EniIp", "Port", "Weight", "Tag"];
    if batch {
        known.extend(["ListenerId", "LocationId"]);
    }
    unknown_keys(target, &known)?;
    let listener = if batch {
        Some(required_str(target, "ListenerId")?.to_string())
    } else {
        None
    };
    let instance_id = optional_str(target, "InstanceId")?.map(str::to_string);
    let eni_ip = optional_str(target, "EniIp")?.map(str::to_string);
    if instance_id.is_some() == eni_ip.is_some() {
        return Err(invalid_value(
            "Targets",
            "give exactly one of InstanceId and EniIp",
        ));
    }
    if let Some(ip) = &eni_ip
        && ip.parse::<std::net::IpAddr>().is_err()
    {
        return Err(invalid_value("Targets.EniIp", ip));
    }
    let port = optional_int(target, "Port")?
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| invalid_value("Targets.Port", "must be 1-65535"))?;
    let weight = match optional_int(target, "Weight")? {
        None => 10,
        Some(w) => u8::try_from(w)
            .ok()
            .filter(|w| *w <= 100)
            .ok_or_else(|| invalid_value("Targets.Weight", "must be 0-100"))?,
    };
    Ok((
        listener,
        Target {
            instance_id,
            eni_ip,
            port,
            weight,
        },
    ))
}

/// Binds (or unbinds) `targets` in `bound`; binding one already bound, or unbinding one that
/// is not, is refused as the API does.
fn apply_targets(
    bound: &mut Vec<Target>,
    targets: &[Target],
    register: bool,
) -> Result<(), ApiError> {
    for target in targets {
        let position = bound.iter().position(|b| b.same_backend(target));
        match (register, position) {
            (true, None) => bound.push(target.clone()),
            (true, Some(_)) => {
                return Err(ApiError::new(
                    "InvalidParameter",
                    format!(
                        "Target {:?}:{} is already bound.",
                        target.eni_ip.as_ref().or(target.instance_id.as_ref()),
                        target.port
                    ),
                ));
            }
            (false, Some(i)) => {
                bound.remove(i);
            }
            (false, None) => {
                return Err(ApiError::new(
                    "InvalidParameter",
                    format!(
                        "Target {:?}:{} is not bound.",
                        target.eni_ip.as_ref().or(target.instance_id.as_ref()),
                        target.port
                    ),
                ));
            }
        }
    }
    bound.sort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// What a helper answered: the value it read (as JSON) or the error code and message.
    fn outcome<T: Into<Value>>(result: Result<T, ApiError>) -> Result<Value, (String, String)> {
        result
            .map(Into::into)
            .map_err(|error| (error.code, error.message))
    }

    fn outcome_unit(result: Result<(), ApiError>) -> Result<Value, (String, String)> {
        outcome(result.map(|()| Value::Null))
    }

    fn refused(code: &str, message: &str) -> Result<Value, (String, String)> {
        Err((code.to_string(), message.to_string()))
    }

    #[test]
    fn parameter_helpers_answer_with_the_api_codes() {
        type Answer = Result<Value, (String, String)>;
        type Check = fn(&Map<String, Value>) -> Answer;
        let cases: Vec<(&str, Value, Check, Answer)> = vec![
            (
                "required string given",
                json!({"LoadBalancerId": "lb-1"}),
                |b| outcome(required_str(b, "LoadBalancerId")),
                Ok(json!("lb-1")),
            ),
            (
                "required string null is missing",
                json!({"LoadBalancerId": null}),
                |b| outcome(required_str(b, "LoadBalancerId")),
                refused(
                    "MissingParameter",
                    "The request is missing a required parameter `LoadBalancerId`.",
                ),
            ),
            (
                "required string of the wrong type",
                json!({"LoadBalancerId": 7}),
                |b| outcome(required_str(b, "LoadBalancerId")),
                refused(
                    "InvalidParameter",
                    "The type of parameter `LoadBalancerId` must be String.",
                ),
            ),
            (
                "required array absent",
                json!({}),
                |b| outcome(required_array(b, "Targets").cloned()),
                refused("MissingParameter", "The request is missing `Targets`."),
            ),
            (
                "required array of the wrong type",
                json!({"Targets": "t"}),
                |b| outcome(required_array(b, "Targets").cloned()),
                refused(
                    "InvalidParameter",
                    "The type of parameter `Targets` must be Array.",
                ),
            ),
            (
                "optional strings absent",
                json!({}),
                |b| outcome(optional_strings(b, "ListenerIds")),
                Ok(Value::Null),
            ),
            (
                "optional strings given",
                json!({"ListenerIds": ["a", "b"]}),
                |b| outcome(optional_strings(b, "ListenerIds")),
                Ok(json!(["a", "b"])),
            ),
            (
                "optional strings with a number",
                json!({"ListenerIds": ["a", 1]}),
                |b| outcome(optional_strings(b, "ListenerIds")),
                refused(
                    "InvalidParameter",
                    "The type of parameter `ListenerIds` must be Array of String.",
                ),
            ),
            (
                "optional object null is the wrong type",
                json!({"HealthCheck": null}),
                |b| outcome(optional_object(b, "HealthCheck").map(|o| o.cloned())),
                refused(
                    "InvalidParameter",
                    "The type of parameter `HealthCheck` must be Object.",
                ),
            ),
            (
                "optional object absent",
                json!({}),
                |b| outcome(optional_object(b, "HealthCheck").map(|o| o.cloned())),
                Ok(Value::Null),
            ),
            (
                "element not an object",
                json!({"Tags": [1]}),
                |b| outcome(element(&b["Tags"][0], "Tags", "Array of TagInfo").cloned()),
                refused(
                    "InvalidParameter",
                    "The type of parameter `Tags` must be Array of TagInfo.",
                ),
            ),
            (
                "integer in range",
                json!({"Limit": 100}),
                |b| {
                    outcome(optional_int_in(
                        b,
                        "Limit",
                        1..=100,
                        "must be between 1 and 100",
                    ))
                },
                Ok(json!(100)),
            ),
            (
                "integer out of range",
                json!({"Limit": 101}),
                |b| {
                    outcome(optional_int_in(
                        b,
                        "Limit",
                        1..=100,
                        "must be between 1 and 100",
                    ))
                },
                refused(
                    "InvalidParameterValue",
                    "The value of `Limit` is invalid: must be between 1 and 100",
                ),
            ),
            (
                "integer of the wrong type",
                json!({"Limit": "10"}),
                |b| {
                    outcome(optional_int_in(
                        b,
                        "Limit",
                        1..=100,
                        "must be between 1 and 100",
                    ))
                },
                refused(
                    "InvalidParameter",
                    "The type of parameter `Limit` must be Integer.",
                ),
            ),
            (
                "enumerated value known",
                json!({"Protocol": "UDP"}),
                |b| {
                    outcome(one_of(
                        "Protocol",
                        required_str(b, "Protocol").unwrap_or(""),
                        &["TCP", "UDP"],
                    ))
                },
                Ok(json!("UDP")),
            ),
            (
                "enumerated value unknown names the value",
                json!({"Protocol": "SCTP"}),
                |b| {
                    outcome(one_of(
                        "Protocol",
                        required_str(b, "Protocol").unwrap_or(""),
                        &["TCP", "UDP"],
                    ))
                },
                refused(
                    "InvalidParameterValue",
                    "The value of `Protocol` is invalid: SCTP",
                ),
            ),
            (
                "session expiry zero turns persistence off",
                json!({"SessionExpireTime": 0}),
                |b| outcome(check_session_expire_time(b).map(|()| Value::Null)),
                Ok(Value::Null),
            ),
            (
                "session expiry below 30",
                json!({"SessionExpireTime": 29}),
                |b| outcome(check_session_expire_time(b).map(|()| Value::Null)),
                refused(
                    "InvalidParameterValue",
                    "The value of `SessionExpireTime` is invalid: must be 0 or 30-3600",
                ),
            ),
            (
                "too many targets",
                json!({}),
                |_| outcome_unit(check_target_count(21, 20, "RegisterTargets takes")),
                refused(
                    "LimitExceeded",
                    "21 targets in one call; RegisterTargets takes 1 to 20.",
                ),
            ),
            (
                "no targets",
                json!({}),
                |_| outcome_unit(check_target_count(0, 500, "the batch actions take")),
                refused(
                    "LimitExceeded",
                    "0 targets in one call; the batch actions take 1 to 500.",
                ),
            ),
        ];
        for (name, given, check, want) in cases {
            assert_eq!(check(&body(given)), want, "{name}");
        }
    }
}

//! The mock's state: BLBs with their listeners and backend servers, EIPs, the journal and
//! armed faults. Everything a handler changes goes through [`State`], under one lock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube_lb_mock_support::faults;
use serde_json::{Value, json};

/// An error answer in BCE's shape: `{"requestId", "code", "message"}` with an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// BCE error code (`SignatureDoesNotMatch`, `NoSuchObject`, …).
    pub code: String,
    /// Human text.
    pub message: String,
}

impl ApiError {
    /// An error answer.
    pub fn new(status: u16, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "InappropriateJSON", message)
    }

    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        ApiError::new(
            404,
            "NoSuchObject",
            format!("{} does not exist", what.into()),
        )
    }

    pub(crate) fn busy(message: impl Into<String>) -> Self {
        ApiError::new(409, "OperationDenied", message)
    }

    pub(crate) fn quota(message: impl Into<String>) -> Self {
        ApiError::new(400, "QuotaExceeded", message)
    }
}

/// One request as the mock saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    /// HTTP method.
    pub method: String,
    /// URL path (`/v1/blb/lb-00000001/TCPlistener`).
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// JSON body, when there was one.
    pub body: Option<Value>,
    /// HTTP status answered.
    pub status: u16,
    /// Error code answered, if any.
    pub code: Option<String>,
}

impl JournalEntry {
    /// True for requests that may change state (anything but GET).
    pub fn is_mutation(&self) -> bool {
        self.method != "GET" && self.method != "HEAD"
    }
}

/// A fault armed for requests matching a method and a path substring: they are answered with
/// the error instead of being served.
#[derive(Debug, Clone)]
pub struct Fault {
    /// Method to match (`None`: any).
    pub method: Option<String>,
    /// Substring of the path to match.
    pub path_contains: String,
    /// Substring of the raw query string to match (empty: any).
    pub query_contains: String,
    /// Matching requests let through before the fault fires.
    pub skip: u32,
    /// How many times it fires.
    pub times: u32,
    /// The answer.
    pub error: ApiError,
    /// Serve the request first (it takes effect), then answer `error` instead of the result:
    /// the response lost on its way back, the case a create's `clientToken` is for.
    pub after_serving: bool,
}

impl Fault {
    /// Answers the next `times` requests matching `method` and `path_contains` with `error`.
    pub fn respond(method: &str, path_contains: &str, times: u32, error: ApiError) -> Self {
        Fault {
            method: Some(method.to_string()),
            path_contains: path_contains.to_string(),
            query_contains: String::new(),
            skip: 0,
            times,
            error,
            after_serving: false,
        }
    }

    /// Serves the next `times` requests matching `method` and `path_contains`, then answers
    /// each with a gateway's 503 as if the response had been lost.
    pub fn lose_response(method: &str, path_contains: &str, times: u32) -> Self {
        Fault {
            after_serving: true,
            ..Fault::respond(
                method,
                path_contains,
                times,
                ApiError::new(503, "ServiceUnavailable", "the response was lost"),
            )
        }
    }

    /// Only requests whose raw query string contains `text`.
    pub fn with_query(mut self, text: &str) -> Self {
        self.query_contains = text.to_string();
        self
    }
}

impl kube_lb_mock_support::Armed for Fault {
    /// The error, and whether the request is served first.
    type Outcome = (ApiError, bool);

    fn countdown(&mut self) -> (&mut u32, &mut u32) {
        (&mut self.skip, &mut self.times)
    }

    fn outcome(&self) -> (ApiError, bool) {
        (self.error.clone(), self.after_serving)
    }
}

/// A mutating request made with a `clientToken`, and what it answered: BCE answers a repeat
/// of the same request with the same token with that answer, without doing it again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TokenUse {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Option<Value>,
    pub answer: Value,
}

/// Account limits the mock enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// BLB instances per account.
    pub blbs: usize,
    /// Listeners per BLB.
    pub listeners_per_blb: usize,
    /// Backend servers per BLB.
    pub backends_per_blb: usize,
    /// EIPs per account.
    pub eips: usize,
    /// Security groups per account.
    pub security_groups: usize,
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas {
            blbs: 20,
            listeners_per_blb: 50,
            backends_per_blb: 50,
            eips: 20,
            security_groups: 100,
        }
    }
}

/// A listener (the BLB's identity for it is the port).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Listener {
    pub protocol: &'static str,
    pub fields: serde_json::Map<String, Value>,
}

#[derive(Debug, Clone)]
pub(crate) struct Blb {
    pub id: String,
    pub name: String,
    pub desc: String,
    pub address: String,
    pub vpc_id: String,
    pub subnet_id: String,
    pub public_ip: Option<String>,
    pub status: &'static str,
    pub busy_until: Option<Instant>,
    pub create_time: String,
    pub tags: Value,
    pub listeners: BTreeMap<u16, Listener>,
    pub backends: BTreeMap<String, i64>,
    /// Bound security groups, in binding order.
    pub security_groups: Vec<String>,
}

impl Blb {
    pub fn summary(&self) -> Value {
        json!({
            "blbId": self.id, "name": self.name, "desc": self.desc, "address": self.address,
            "status": self.status, "vpcId": self.vpc_id, "subnetId": self.subnet_id,
            "publicIp": self.public_ip.clone().unwrap_or_default(),
            "createTime": self.create_time, "tags": self.tags, "allowDelete": true,
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Eip {
    pub ip: String,
    pub id: String,
    pub name: String,
    pub status: &'static str,
    pub ready_at: Option<Instant>,
    pub instance_type: Option<String>,
    pub instance_id: Option<String>,
    pub bandwidth: i64,
    pub payment_timing: String,
    pub billing_method: String,
    pub create_time: String,
    pub tags: Value,
}

impl Eip {
    pub fn summary(&self) -> Value {
        json!({
            "name": self.name, "eip": self.ip, "eipId": self.id, "status": self.status,
            "instanceType": self.instance_type, "instanceId": self.instance_id,
            "bandwidthInMbps": self.bandwidth, "paymentTiming": self.payment_timing,
            "billingMethod": self.billing_method, "createTime": self.create_time,
            "expireTime": Value::Null, "shareGroupId": Value::Null, "tags": self.tags,
        })
    }
}

/// Configuration fixed at start (some parts adjustable while running).
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub keys: BTreeMap<String, String>,
    pub clock_skew: Duration,
    pub create_delay: Duration,
    pub update_delay: Duration,
    pub eip_delay: Duration,
    pub quotas: Quotas,
    /// VPC id → subnet id → (prefix of the subnet's addresses, e.g. `192.168.0.`).
    pub subnets: BTreeMap<String, (String, String)>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub config: Config,
    pub blbs: BTreeMap<String, Blb>,
    pub eips: BTreeMap<String, Eip>,
    pub security_groups: BTreeMap<String, crate::security_groups::SecurityGroup>,
    pub journal: Vec<JournalEntry>,
    pub faults: Vec<Fault>,
    pub next_id: u64,
    /// Successful mutating requests by `clientToken`.
    pub client_tokens: BTreeMap<String, TokenUse>,
}

impl State {
    pub fn new(config: Config) -> Self {
        State {
            config,
            blbs: BTreeMap::new(),
            eips: BTreeMap::new(),
            security_groups: BTreeMap::new(),
            journal: Vec::new(),
            faults: Vec::new(),
            next_id: 1,
            client_tokens: BTreeMap::new(),
        }
    }

    /// Ends transitions whose time has come.
    pub fn settle(&mut self) {
        let now = Instant::now();
        for blb in self.blbs.values_mut() {
            if blb.busy_until.is_some_and(|t| t <= now) {
                blb.busy_until = None;
                blb.status = "available";
            }
        }
        for eip in self.eips.values_mut() {
            if eip.ready_at.is_some_and(|t| t <= now) {
                eip.ready_at = None;
                eip.status = if eip.instance_id.is_some() {
                    "binded"
                } else {
                    "available"
                };
            }
        }
    }

    pub fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The error of the first armed fault matching this request and whether the request is
    /// served before it is answered, counted down by the shared countdown (see
    /// [`faults::fire_first`]); `None` when no fault fires.
    pub fn take_fault(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
    ) -> Option<(ApiError, bool)> {
        faults::fire_first(&mut self.faults, |f| {
            faults::method_and_path_match(f.method.as_deref(), &f.path_contains, method, path)
                && query.contains(&f.query_contains)
        })
    }

    /// Refuses a change to a BLB that is missing or not `available` (`creating`, `updating`).
    pub fn check_available(&self, id: &str) -> Result<(), ApiError> {
        let blb = self
            .blbs
            .get(id)
            .ok_or_else(|| ApiError::not_found(format!("BLB {id}")))?;
        if blb.status != "available" {
            return Err(ApiError::busy(format!(
                "BLB {id} is {}; retry when it is available",
                blb.status
            )));
        }
        Ok(())
    }

    /// After a successful change: the BLB is `updating` for the configured delay.
    pub fn touch(&mut self, id: &str) {
        let delay = self.config.update_delay;
        if let Some(blb) = self.blbs.get_mut(id)
            && !delay.is_zero()
        {
            blb.status = "updating";
            blb.busy_until = Some(Instant::now() + delay);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(faults: Vec<Fault>) -> State {
        let mut state = State::new(Config {
            keys: BTreeMap::new(),
            clock_skew: Duration::ZERO,
            create_delay: Duration::ZERO,
            update_delay: Duration::ZERO,
            eip_delay: Duration::ZERO,
            quotas: Quotas::default(),
            subnets: BTreeMap::new(),
        });
        state.faults = faults;
        state
    }

    #[test]
    fn armed_faults_match_method_path_and_query_then_count_down() {
        let busy = ApiError::busy("try later");
        let twice_after_one = Fault {
            skip: 1,
            ..Fault::respond("put", "/v1/blb/", 2, busy.clone())
        };
        type Request = (&'static str, &'static str, &'static str);
        // (name, armed, requests as (method, path, query), codes answered, faults left)
        type Case = (
            &'static str,
            Vec<Fault>,
            Vec<Request>,
            Vec<Option<&'static str>>,
            usize,
        );
        let cases: [Case; 4] = [
            (
                "method compared without case, path by substring",
                vec![Fault::respond("post", "/v1/eip", 1, busy.clone())],
                vec![
                    ("GET", "/v1/eip", ""),
                    ("POST", "/v1/eip/1", ""),
                    ("POST", "/v1/eip", ""),
                ],
                vec![None, Some("OperationDenied"), None],
                0,
            ),
            (
                "query substring must match too",
                vec![Fault::respond("PUT", "/v1/eip/", 1, busy.clone()).with_query("bind")],
                vec![
                    ("PUT", "/v1/eip/1", "unbind="),
                    ("PUT", "/v1/eip/1", "resize="),
                ],
                vec![Some("OperationDenied"), None],
                0,
            ),
            (
                "skip lets one through, then fires twice",
                vec![twice_after_one],
                vec![("PUT", "/v1/blb/a", ""); 4],
                vec![None, Some("OperationDenied"), Some("OperationDenied"), None],
                0,
            ),
            (
                "unmatched fault stays armed",
                vec![Fault::respond("DELETE", "/v1/blb/", 1, busy.clone())],
                vec![("GET", "/v1/blb/a", "")],
                vec![None],
                1,
            ),
        ];
        for (name, faults, requests, want, left) in cases {
            let mut state = state_with(faults);
            let answered: Vec<Option<String>> = requests
                .iter()
                .map(|(method, path, query)| {
                    state
                        .take_fault(method, path, query)
                        .map(|(error, _)| error.code)
                })
                .collect();
            let want: Vec<Option<String>> = want
                .into_iter()
                .map(|code| code.map(str::to_string))
                .collect();
            assert_eq!((answered, state.faults.len()), (want, left), "{name}");
        }
    }
}

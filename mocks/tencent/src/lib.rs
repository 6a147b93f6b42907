//! A stateful mock of Tencent Cloud CLB API 3.0 (`2018-03-17`) on one loopback port.
//!
//! Every call is `POST /` with the action in `X-TC-Action`, checked as the cloud checks it:
//! `X-TC-Version` must be `2018-03-17`, `X-TC-Region` the served region, `X-TC-Timestamp`
//! within five minutes of the mock's clock (else `AuthFailure.SignatureExpire`), and the
//! TC3-HMAC-SHA256 `Authorization` must match the headers and body as received (else
//! `AuthFailure.SignatureFailure`). Answers are `{"Response": {…, "RequestId"}}` with errors as
//! `Response.Error{Code, Message}` and HTTP 200.
//!
//! Writes are async tasks keyed by their `RequestId` (`DescribeTaskStatus` answers 2 until a
//! configurable delay has passed, then 0, or 1 when a fault made the task fail and the change is
//! undone); while a task runs, other writes on the same CLB get
//! `FailedOperation.ResourceInOperating`. Quotas, the per-call target limits (20, batch 500),
//! `Limit` ≤ 100 and unknown parameters are enforced. `CreateLoadBalancer` honours
//! `ClientToken` as the API documents it: repeated with the same token, it answers the first
//! call's `LoadBalancerIds` and `DealName` again and creates nothing. Every request is
//! journaled; faults can be armed per action (an error answer, a failing task, or an answer
//! lost after the request was served).
//!
//! The VPC security-group actions a CLB's access control needs (`2017-03-12`, requests signed
//! for service `vpc`) are served on the same port: `CreateSecurityGroup`,
//! `DescribeSecurityGroups`, `DescribeSecurityGroupPolicies`, `CreateSecurityGroupPolicies`,
//! `DeleteSecurityGroupPolicies`, `ModifySecurityGroupPolicies`, `DeleteSecurityGroup`; the CLB
//! binds them with `SetLoadBalancerSecurityGroups` and shows them as `SecureGroups`.
//! [`MockTencent::would_reach`] judges a client address against the bound groups.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let cloud = kube_lb_mock_tencent::MockTencent::builder().start().await?;
//! println!("endpoint = {}", cloud.url());
//! # Ok(()) }
//! ```

mod security_groups;
mod sign;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use kube_lb_mock_support::faults;
use kube_lb_mock_support::{MockServer, Shared, lock_shared};
use serde_json::{Map, Value, json};

pub use security_groups::{Policy, SecurityGroup};
pub use sign::{authorization_header, expected_signature, parse_authorization, utc_date};
pub use state::{ApiError, Fault, FaultKind, JournalEntry, Quotas};

use state::{Config, LoadBalancer, State};

/// The SecretId accepted by default.
pub const SECRET_ID: &str = "AKIDkubelbmock00000000000000000000000";
/// Its SecretKey.
pub const SECRET_KEY: &str = "kube-lb-mock-secret-key-000000000";
/// The region served.
pub const REGION: &str = "ap-guangzhou";
/// The cluster VPC.
pub const VPC_ID: &str = "vpc-kubelb00";
/// A subnet of it (internal VIPs from `10.0.1.0/24`).
pub const SUBNET_ID: &str = "subnet-kubelb01";
/// A second subnet (`10.0.2.0/24`).
pub const SUBNET_ID_2: &str = "subnet-kubelb02";
/// The API version served.
pub const VERSION: &str = "2018-03-17";
/// The VPC API version served (security groups).
pub const VPC_VERSION: &str = "2017-03-12";

/// Builds a [`MockTencent`].
#[derive(Debug)]
pub struct MockTencentBuilder {
    config: Config,
    listen: SocketAddr,
}

impl MockTencentBuilder {
    /// Another accepted key pair; with `token`, requests must carry it as `X-TC-Token`
    /// (temporary credentials).
    pub fn credential(mut self, secret_id: &str, secret_key: &str, token: Option<&str>) -> Self {
        self.config.credentials.insert(
            secret_id.into(),
            (secret_key.into(), token.map(str::to_string)),
        );
        self
    }

    /// How long each async task runs (default 0: the next request sees it done).
    pub fn task_delay(mut self, delay: Duration) -> Self {
        self.config.task_delay = delay;
        self
    }

    /// Limits to enforce.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.config.quotas = quotas;
        self
    }

    /// Listen address (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Binds and serves in a background task.
    pub async fn start(self) -> std::io::Result<MockTencent> {
        let config = self.config;
        let server = MockServer::start(
            self.listen,
            "tencent",
            |_| State::new(config),
            |shared| Router::new().fallback(handle).with_state(shared),
        )
        .await?;
        Ok(MockTencent { server })
    }
}

/// A running mock CLB endpoint. Stops when dropped.
#[derive(Debug)]
pub struct MockTencent {
    server: MockServer<State>,
}

kube_lb_mock_support::impl_mock_handle!(MockTencent.server: State {
    journal: JournalEntry,
    faults: Fault,
    settle: State::settle
});
kube_lb_mock_support::impl_armed!(Fault { outcome: kind: FaultKind });

impl MockTencent {
    /// A builder with the defaults: [`SECRET_ID`]/[`SECRET_KEY`], region [`REGION`], VPC
    /// [`VPC_ID`] with subnets [`SUBNET_ID`] and [`SUBNET_ID_2`], no task delay.
    pub fn builder() -> MockTencentBuilder {
        MockTencentBuilder {
            config: Config {
                credentials: BTreeMap::from([(SECRET_ID.into(), (SECRET_KEY.into(), None))]),
                region: REGION.into(),
                vpc_id: VPC_ID.into(),
                subnets: BTreeMap::from([
                    (SUBNET_ID.into(), "10.0.1".into()),
                    (SUBNET_ID_2.into(), "10.0.2".into()),
                ]),
                task_delay: Duration::ZERO,
                signature_window: Duration::from_secs(300),
                quotas: Quotas::default(),
            },
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// `http://127.0.0.1:PORT`, the endpoint override for clients.
    pub fn url(&self) -> String {
        self.server.url().to_string()
    }

    /// `127.0.0.1:PORT` (the `Host` clients sign).
    pub fn host(&self) -> String {
        self.server.addr().to_string()
    }

    /// Changes the task delay for tasks started from now on.
    pub fn set_task_delay(&self, delay: Duration) {
        self.lock().config.task_delay = delay;
    }

    /// Every CLB as `DescribeLoadBalancers` shows it.
    pub fn load_balancers(&self) -> Vec<Value> {
        self.lock()
            .load_balancers
            .values()
            .map(LoadBalancer::to_json)
            .collect()
    }

    /// The listeners of `lb_id` (each with its `Targets`).
    pub fn listeners(&self, lb_id: &str) -> Vec<Value> {
        let state = self.lock();
        state
            .load_balancers
            .get(lb_id)
            .map(|lb| {
                lb.listeners
                    .values()
                    .map(|l| {
                        let mut listener = json!({
                            "ListenerId": l.id, "ListenerName": l.name,
                            "Protocol": l.protocol, "Port": l.port,
                            "Targets": l.targets.iter().map(|t| json!({
                                "EniIp": t.eni_ip, "InstanceId": t.instance_id,
                                "Port": t.port, "Weight": t.weight})).collect::<Vec<_>>(),
                        });
                        for (k, v) in &l.attributes {
                            listener[k] = v.clone();
                        }
                        listener
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Creates a CLB as a user would in the console (no TKE tags unless given), already
    /// `Status 1`, with a listener `(name, protocol, port)` per entry. Returns its id.
    pub fn seed_load_balancer(
        &self,
        name: &str,
        tags: &[(&str, &str)],
        listeners: &[(&str, &str, u16)],
    ) -> String {
        let mut state = self.lock();
        let request_id = state.request_id();
        let mut body = Map::new();
        body.insert("LoadBalancerType".into(), json!("OPEN"));
        body.insert("LoadBalancerName".into(), json!(name));
        body.insert(
            "Tags".into(),
            Value::Array(
                tags.iter()
                    .map(|(k, v)| json!({"TagKey": k, "TagValue": v}))
                    .collect(),
            ),
        );
        let Ok(reply) = state.serve("CreateLoadBalancer", &body, &request_id, None) else {
            return String::new();
        };
        let id = reply["LoadBalancerIds"][0]
            .as_str()
            .unwrap_or_default()
            .to_string();
        state.tasks.clear();
        if let Some(lb) = state.load_balancers.get_mut(&id) {
            lb.status = 1;
        }
        for (name, protocol, port) in listeners {
            let mut body = Map::new();
            body.insert("LoadBalancerId".into(), json!(id));
            body.insert("Protocol".into(), json!(protocol));
            body.insert("Ports".into(), json!([port]));
            body.insert("ListenerNames".into(), json!([name]));
            let request_id = state.request_id();
            let _ = state.serve("CreateListener", &body, &request_id, None);
            state.tasks.clear();
        }
        id
    }

    /// Binds CVM `instance_id` on `port` to listener `listener_id` of `lb_id` as another actor
    /// would (TKE's controller, the console), done at once. False when the mock refused it.
    pub fn seed_target(
        &self,
        lb_id: &str,
        listener_id: &str,
        instance_id: &str,
        port: u16,
    ) -> bool {
        let mut state = self.lock();
        let request_id = state.request_id();
        let mut body = Map::new();
        body.insert("LoadBalancerId".into(), json!(lb_id));
        body.insert("ListenerId".into(), json!(listener_id));
        body.insert(
            "Targets".into(),
            json!([{"InstanceId": instance_id, "Port": port}]),
        );
        let done = state
            .serve("RegisterTargets", &body, &request_id, None)
            .is_ok();
        state.tasks.clear();
        done
    }

    /// Every security group, as `DescribeSecurityGroups` shows it, with its
    /// `SecurityGroupPolicySet` as `DescribeSecurityGroupPolicies` shows it.
    pub fn security_groups(&self) -> Vec<Value> {
        let mut state = self.lock();
        let ids: Vec<String> = state.security_groups.keys().cloned().collect();
        ids.iter()
            .filter_map(|id| {
                let mut body = Map::new();
                body.insert("SecurityGroupIds".into(), json!([id]));
                let mut group = state
                    .serve_vpc("DescribeSecurityGroups", &body)?
                    .ok()?
                    .remove("SecurityGroupSet")?
                    .as_array()?
                    .first()?
                    .clone();
                let mut body = Map::new();
                body.insert("SecurityGroupId".into(), json!(id));
                let policies = state
                    .serve_vpc("DescribeSecurityGroupPolicies", &body)?
                    .ok()?
                    .remove("SecurityGroupPolicySet")?;
                group["SecurityGroupPolicySet"] = policies;
                Some(group)
            })
            .collect()
    }

    /// The security groups bound to `lb_id`, in priority order (`SecureGroups`).
    pub fn bound_security_groups(&self, lb_id: &str) -> Vec<String> {
        self.lock()
            .load_balancers
            .get(lb_id)
            .map(|lb| lb.security_groups.clone())
            .unwrap_or_default()
    }

    /// Would a client at `source` reach listener `protocol`/`port` (`TCP`, `UDP`) of CLB
    /// `lb_id`, as the cloud judges it: no group bound lets everyone in; bound groups are read in
    /// order, each group's ingress policies in order, the first match decides, no match drops.
    pub fn would_reach(
        &self,
        lb_id: &str,
        source: std::net::IpAddr,
        protocol: &str,
        port: u16,
    ) -> bool {
        self.lock().would_reach(lb_id, source, protocol, port)
    }

    /// Starts a task on `lb_id` as another actor would (console edit): writes are refused
    /// with `ResourceInOperating` until `duration` has passed.
    pub fn occupy(&self, lb_id: &str, duration: Duration) {
        let mut state = self.lock();
        let request_id = state.request_id();
        let delay = state.config.task_delay;
        state.config.task_delay = duration;
        let mut body = Map::new();
        body.insert("LoadBalancerId".into(), json!(lb_id));
        body.insert("ListenerIds".into(), json!([]));
        let _ = state.serve("DeleteLoadBalancerListeners", &body, &request_id, None);
        state.config.task_delay = delay;
    }
}

fn envelope(request_id: &str, mut body: Map<String, Value>) -> Response {
    body.insert("RequestId".into(), json!(request_id));
    axum::Json(json!({"Response": body})).into_response()
}

fn error_response(request_id: &str, error: &ApiError) -> Response {
    let mut body = Map::new();
    body.insert(
        "Error".into(),
        json!({"Code": error.code, "Message": error.message}),
    );
    envelope(request_id, body)
}

/// What Tencent's gateway answers when the API's answer does not reach it: an HTML 503, no
/// `Response` envelope.
fn gateway_unavailable() -> Response {
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        [("content-type", "text/html"), ("server", "stgw")],
        "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n\
         <center><h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>stgw</center>\r\n\
         </body>\r\n</html>\r\n",
    )
        .into_response()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The API version each served service answers: CLB, and VPC for security groups.
const SERVICES: &[(&str, &str)] = &[("clb", VERSION), ("vpc", VPC_VERSION)];

/// The checks the API gateway makes before an action runs; returns the service the request
/// was signed for (`clb` or `vpc`: each has its own host in the cloud, one port here).
fn authenticate(
    config: &state::Config,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<&'static str, ApiError> {
    let missing = |name: &str| {
        ApiError::new(
            "MissingParameter",
            format!("The request is missing a required header `{name}`."),
        )
    };
    let version = header(headers, "x-tc-version").ok_or_else(|| missing("X-TC-Version"))?;
    let timestamp: i64 = header(headers, "x-tc-timestamp")
        .ok_or_else(|| missing("X-TC-Timestamp"))?
        .parse()
        .map_err(|_| ApiError::new("InvalidParameter", "X-TC-Timestamp must be Unix seconds."))?;
    let authorization = header(headers, "authorization").ok_or_else(|| missing("Authorization"))?;
    let auth = parse_authorization(authorization).ok_or_else(|| {
        ApiError::new(
            "AuthFailure.InvalidAuthorization",
            "The Authorization header is not a TC3-HMAC-SHA256 authorization.",
        )
    })?;
    let (service, served_version) = SERVICES
        .iter()
        .find(|(service, _)| *service == auth.service)
        .copied()
        .unwrap_or(("clb", VERSION));
    if version != served_version {
        return Err(ApiError::new(
            "NoSuchVersion",
            format!("Version `{version}` does not exist for service {service}."),
        ));
    }
    let (secret_key, token) = config.credentials.get(&auth.secret_id).ok_or_else(|| {
        ApiError::new(
            "AuthFailure.SecretIdNotFound",
            "The SecretId is not found; check that it is correct and enabled.",
        )
    })?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    if now.abs_diff(timestamp) > config.signature_window.as_secs() {
        return Err(ApiError::new(
            "AuthFailure.SignatureExpire",
            format!(
                "The signature expired: timestamp {timestamp} is more than {} s from server time {now}.",
                config.signature_window.as_secs()
            ),
        ));
    }
    if let Some(token) = token
        && header(headers, "x-tc-token") != Some(token.as_str())
    {
        return Err(ApiError::new(
            "AuthFailure.TokenFailure",
            "The X-TC-Token is missing or does not belong to the temporary credentials.",
        ));
    }
    let content_type = header(headers, "content-type").unwrap_or_default();
    let host = header(headers, "host").unwrap_or_default();
    let want = expected_signature(secret_key, service, content_type, host, body, timestamp);
    if auth.service != service
        || auth.date != utc_date(timestamp)
        || auth.signed_headers != "content-type;host"
        || auth.signature != want
    {
        return Err(ApiError::new(
            "AuthFailure.SignatureFailure",
            "The provided credentials could not be validated; check the signature.",
        ));
    }
    let region = header(headers, "x-tc-region").ok_or_else(|| missing("X-TC-Region"))?;
    if region != config.region {
        return Err(ApiError::new(
            "UnsupportedRegion",
            format!("The region `{region}` is not supported by this endpoint."),
        ));
    }
    Ok(service)
}

async fn handle(
    AxumState(shared): AxumState<Shared<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let mut state = lock_shared(&shared);
    state.settle();
    let request_id = state.request_id();
    let action = header(&headers, "x-tc-action")
        .unwrap_or_default()
        .to_string();
    let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut answer_lost = false;
    let outcome = (|| {
        if method != Method::POST || uri.path() != "/" {
            return Err(ApiError::new(
                "InvalidParameter",
                "Only POST / is served (TC3-HMAC-SHA256 JSON requests).",
            ));
        }
        if action.is_empty() {
            return Err(ApiError::new(
                "MissingParameter",
                "The request is missing `X-TC-Action`.",
            ));
        }
        let service = authenticate(&state.config, &headers, &body)?;
        let Value::Object(params) = &parsed else {
            return Err(ApiError::new(
                "InvalidParameter",
                "The body must be a JSON object.",
            ));
        };
        let fail_task = match faults::fire_first(&mut state.faults, |f| f.action == action) {
            Some(FaultKind::Error { code, message }) => return Err(ApiError::new(&code, message)),
            Some(FaultKind::FailTask(message)) => Some(message),
            Some(FaultKind::LoseAnswer) => {
                answer_lost = true;
                None
            }
            None => None,
        };
        let params = params.clone();
        if service == "vpc" {
            return state.serve_vpc(&action, &params).unwrap_or_else(|| {
                Err(ApiError::new(
                    "InvalidAction",
                    format!("The action `{action}` is not supported by service vpc."),
                ))
            });
        }
        state.serve(&action, &params, &request_id, fail_task)
    })();
    state.journal.push(JournalEntry {
        action: action.clone(),
        body: parsed,
        error: outcome.as_ref().err().map(|e| e.code.clone()),
    });
    drop(state);
    if answer_lost {
        tracing::debug!(action, "mock Tencent served a request and lost its answer");
        return gateway_unavailable();
    }
    match outcome {
        Ok(reply) => envelope(&request_id, reply),
        Err(error) => {
            tracing::debug!(action, code = %error.code, "mock Tencent refused a request");
            error_response(&request_id, &error)
        }
    }
}

//! A stateful mock of the two Baidu Cloud (BCE) APIs a load-balancer controller uses, on one
//! loopback port: BLB v1 (`/v1/blb…`: instances, TCP/UDP listeners, backend servers) and EIP
//! v1 (`/v1/eip…`: create, list, bind, unbind, release).
//!
//! Like BCE it refuses any request whose `bce-auth-v1` signature does not verify
//! (`SignatureDoesNotMatch`), whose access key is unknown (`InvalidAccessKeyId`) or whose
//! signing time is outside its validity window (`RequestExpired`), answering in BCE's error
//! shape `{"requestId","code","message"}`. A new BLB is `creating` for a configurable delay and
//! refuses changes until `available` (`OperationDenied`); so does a BLB `updating` after a
//! change when an update delay is set. Quotas and request bodies are checked. A mutating request
//! repeated with the `clientToken` of one that succeeded is answered as the first was and not
//! done again, as BCE does (a create retried after a lost answer makes one resource). Every
//! request is journaled; faults can be armed per method and path: answered instead of served,
//! or served and then answered with a 503 as a lost response ([`Fault::lose_response`]).
//!
//! Security groups are served too (BCC/VPC v2, `/v2/securityGroup…`: create with rules, list,
//! authorize / revoke / delete a rule, delete), and BLBs bind them
//! (`/v1/blb/{id}/securitygroup?bind|unbind`, read back with `GET`);
//! [`MockBaidu::would_reach`] judges a client address against the bound groups.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let cloud = kube_lb_mock_baidu::MockBaidu::builder().start().await?;
//! println!("endpoint = {}", cloud.endpoint());
//! # Ok(()) }
//! ```

mod auth;
mod handlers;
mod security_groups;
mod state;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use kube_lb_mock_support::{MockServer, Shared, lock_shared};
use serde_json::{Value, json};

pub use state::{ApiError, Fault, JournalEntry, Quotas};

use state::{Config, State};

/// Access key id accepted by default.
pub const ACCESS_KEY_ID: &str = "kube-lb-ak-0123456789";
/// Its secret key.
pub const SECRET_ACCESS_KEY: &str = "kube-lb-sk-abcdefabcdef";
/// The VPC the nodes live in.
pub const VPC_ID: &str = "vpc-kubelb00001";
/// Its subnet, `192.168.0.0/24`, where BLB addresses come from.
pub const SUBNET_ID: &str = "sbn-kubelb00001";
/// A second subnet of the VPC, `192.168.1.0/24` (for `cce-load-balancer-subnet-id`).
pub const OTHER_SUBNET_ID: &str = "sbn-kubelb00002";
/// The region the mock pretends to be.
pub const REGION: &str = "bj";

/// Builds a [`MockBaidu`].
#[derive(Debug)]
pub struct MockBaiduBuilder {
    config: Config,
    listen: SocketAddr,
}

impl MockBaiduBuilder {
    /// Another access key pair.
    pub fn access_key(mut self, id: &str, secret: &str) -> Self {
        self.config.keys.insert(id.into(), secret.into());
        self
    }

    /// How long a new BLB stays `creating` (default 0: the create answer is the only moment it
    /// is `creating`; the next request sees `available`).
    pub fn create_delay(mut self, delay: Duration) -> Self {
        self.config.create_delay = delay;
        self
    }

    /// How long a BLB stays `updating` after each change (default 0).
    pub fn update_delay(mut self, delay: Duration) -> Self {
        self.config.update_delay = delay;
        self
    }

    /// How long a new EIP stays `creating` (default 0).
    pub fn eip_delay(mut self, delay: Duration) -> Self {
        self.config.eip_delay = delay;
        self
    }

    /// Clock tolerance for signature times (default 5 minutes).
    pub fn clock_skew(mut self, skew: Duration) -> Self {
        self.config.clock_skew = skew;
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
    pub async fn start(self) -> std::io::Result<MockBaidu> {
        let config = self.config;
        let server = MockServer::start(
            self.listen,
            "baidu",
            |_| State::new(config),
            |shared| Router::new().fallback(handle).with_state(shared),
        )
        .await?;
        Ok(MockBaidu { server })
    }
}

/// A running mock. Stops when dropped.
#[derive(Debug)]
pub struct MockBaidu {
    server: MockServer<State>,
}

kube_lb_mock_support::impl_mock_handle!(MockBaidu.server: State {
    journal: JournalEntry,
    faults: Fault,
    settle: State::settle
});

impl MockBaidu {
    /// A builder with the defaults: key pair [`ACCESS_KEY_ID`]/[`SECRET_ACCESS_KEY`], VPC
    /// [`VPC_ID`] with subnets [`SUBNET_ID`] and [`OTHER_SUBNET_ID`], no delays, default quotas,
    /// five minutes of clock skew.
    pub fn builder() -> MockBaiduBuilder {
        MockBaiduBuilder {
            config: Config {
                keys: BTreeMap::from([(ACCESS_KEY_ID.into(), SECRET_ACCESS_KEY.into())]),
                clock_skew: Duration::from_secs(300),
                create_delay: Duration::ZERO,
                update_delay: Duration::ZERO,
                eip_delay: Duration::ZERO,
                quotas: Quotas::default(),
                subnets: BTreeMap::from([
                    (SUBNET_ID.into(), (VPC_ID.into(), "192.168.0.".into())),
                    (OTHER_SUBNET_ID.into(), (VPC_ID.into(), "192.168.1.".into())),
                ]),
            },
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// `http://127.0.0.1:PORT`: the endpoint for both BLB and EIP.
    pub fn endpoint(&self) -> String {
        self.server.url().to_string()
    }

    /// Every BLB, as `DescribeLoadBalancers` shows it.
    pub fn blbs(&self) -> Vec<Value> {
        self.lock().blbs.values().map(|b| b.summary()).collect()
    }

    /// One BLB's listeners (`{"port": .., "protocol": .., fields…}`), by port.
    pub fn listeners(&self, blb_id: &str) -> Vec<Value> {
        self.lock()
            .blbs
            .get(blb_id)
            .map(|b| {
                b.listeners
                    .iter()
                    .map(|(port, l)| {
                        let mut v = Value::Object(l.fields.clone());
                        v["listenerPort"] = json!(port);
                        v["protocol"] = json!(l.protocol);
                        v
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// One BLB's backend server instance ids.
    pub fn backends(&self, blb_id: &str) -> Vec<String> {
        self.lock()
            .blbs
            .get(blb_id)
            .map(|b| b.backends.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every EIP, as `ListEips` shows it.
    pub fn eips(&self) -> Vec<Value> {
        self.lock().eips.values().map(|e| e.summary()).collect()
    }

    /// Every security group, as `GET /v2/securityGroup` shows it.
    pub fn security_groups(&self) -> Vec<Value> {
        self.lock()
            .list_security_groups(None, None)
            .into_iter()
            .map(|(_, g)| g)
            .collect()
    }

    /// The security groups bound to `blb_id`, in binding order.
    pub fn bound_security_groups(&self, blb_id: &str) -> Vec<String> {
        self.lock()
            .blbs
            .get(blb_id)
            .map(|b| b.security_groups.clone())
            .unwrap_or_default()
    }

    /// Would a client at `source` reach listener `protocol`/`port` (`TCP`, `UDP`) of BLB
    /// `blb_id`, as BCE judges it: no group bound lets everyone in; with groups bound, a
    /// packet passes when an ingress rule of a bound group allows it, and is dropped otherwise.
    pub fn would_reach(
        &self,
        blb_id: &str,
        source: std::net::IpAddr,
        protocol: &str,
        port: u16,
    ) -> bool {
        self.lock().would_reach(blb_id, source, protocol, port)
    }

    /// Creates a BLB as another actor would (a user's BLB for `exist-id`), already
    /// `available`; returns its id.
    pub fn seed_blb(&self, name: &str, desc: &str) -> String {
        let mut state = self.lock();
        handlers::insert_blb(
            &mut state,
            name,
            desc,
            VPC_ID,
            SUBNET_ID,
            Value::Array(Vec::new()),
            true,
        )
    }

    /// Creates an EIP as another actor would; returns its address.
    pub fn seed_eip(&self, name: &str) -> String {
        let mut state = self.lock();
        handlers::insert_eip(
            &mut state,
            name,
            100,
            "Postpaid",
            "ByTraffic",
            Value::Array(Vec::new()),
            true,
        )
    }

    /// Puts a BLB into `status` for `duration` (then `available`), as the cloud would during
    /// its own maintenance.
    pub fn set_blb_status(&self, blb_id: &str, status: &'static str, duration: Duration) {
        if let Some(blb) = self.lock().blbs.get_mut(blb_id) {
            blb.status = status;
            blb.busy_until = Some(std::time::Instant::now() + duration);
        }
    }

    /// Removes a BLB out of band (its EIP is unbound), as a person in the console would.
    pub fn remove_blb(&self, blb_id: &str) {
        let mut state = self.lock();
        handlers::remove_blb(&mut state, blb_id);
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn error_response(error: &ApiError, request_id: &str) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        [("x-bce-request-id", request_id.to_string())],
        axum::Json(json!({"requestId": request_id, "code": error.code, "message": error.message})),
    )
        .into_response()
}

async fn handle(
    AxumState(shared): AxumState<Shared<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let raw_query = uri.query().unwrap_or("").to_string();
    let body_json: Option<Value> = if body.is_empty() {
        None
    } else {
        serde_json::from_slice(&body).ok()
    };
    let mut state = lock_shared(&shared);
    state.settle();
    let request_id = format!("mock-{:08x}", state.fresh_id());
    let outcome = (|| {
        auth::verify(
            &state.config.keys,
            &method,
            &path,
            &raw_query,
            &headers,
            now_unix(),
            i64::try_from(state.config.clock_skew.as_secs()).unwrap_or(300),
        )?;
        let lost = match state.take_fault(method.as_str(), &path, &raw_query) {
            Some((error, false)) => return Err(error),
            Some((error, true)) => Some(error),
            None => None,
        };
        if !body.is_empty() && body_json.is_none() {
            return Err(ApiError::new(
                400,
                "MalformedJSON",
                "The JSON you provided was not well-formed.",
            ));
        }
        let query = auth::query_pairs(&raw_query);
        let served = handlers::route_once(
            &mut state,
            &method,
            &path,
            &raw_query,
            &query,
            body_json.as_ref(),
        );
        match lost {
            // Done (or refused) as asked; the client only sees the lost answer.
            Some(error) => Err(error),
            None => served,
        }
    })();
    let (response, status, code) = match outcome {
        Ok(value) => {
            let response = (
                StatusCode::OK,
                [("x-bce-request-id", request_id.clone())],
                axum::Json(value),
            )
                .into_response();
            (response, 200, None)
        }
        Err(error) => (
            error_response(&error, &request_id),
            error.status,
            Some(error.code.clone()),
        ),
    };
    state.journal.push(JournalEntry {
        method: method.to_string(),
        path,
        query: raw_query,
        body: body_json,
        status,
        code,
    });
    response
}

//! How AWS tests get an AWS: moto's server (the engine LocalStack builds on) on a free loopback
//! port, plus a small fault-injecting HTTP proxy that answers some requests with AWS throttling
//! errors and forwards the rest.
//!
//! The server binary comes from `KUBE_LB_MOTO_SERVER`, else `<repo>/.venv/bin/moto_server`
//! (created by `scripts/setup-moto.sh`). When neither exists, [`MotoServer::start`] fails with a
//! message saying how to install it: AWS tests must never pass without running.
//!
//! Where moto differs from real AWS in a way the provider must not work around, the harness
//! patches moto instead (see [`MOTO_PATCHES`]): the provider is written for AWS, not for moto.
//!
//! The proxy can also lose responses: forward a mutating call to moto (so it takes effect) and
//! then answer the client with a 5xx or drop the connection — the case that tests idempotent
//! creates ([`LoseResponse`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

/// Why the harness could not provide a server.
#[derive(Debug, thiserror::Error)]
pub enum MockAwsError {
    /// moto's server is not installed where the harness looks.
    #[error(
        "moto_server not found at {path}: run `bash scripts/setup-moto.sh` (creates .venv with \
         moto[server]) or set KUBE_LB_MOTO_SERVER to the moto_server binary"
    )]
    NotInstalled {
        /// Where it was looked for.
        path: String,
    },
    /// Spawning or talking to the process failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server did not answer in time, or answered something unexpected.
    #[error("{0}")]
    Server(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MockAwsError {
    let what = what.into();
    move |source| MockAwsError::Io { what, source }
}

/// Where the moto_server binary is expected.
pub fn moto_server_path() -> PathBuf {
    match std::env::var_os("KUBE_LB_MOTO_SERVER") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/moto_server"),
    }
}

async fn free_port() -> Result<u16, MockAwsError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io("binding a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(io("reading the port"))?
        .port())
}

/// Python run before moto's server starts, when the `python3` of moto's virtualenv sits next to
/// `moto_server`. It teaches moto two AWS behaviours the provider relies on, so that the
/// provider is written for AWS and never works around moto:
/// - Real ELBv2 changes a listener's protocol to TLS, UDP or TCP_UDP in place with
///   `ModifyListener`; moto 5 refuses every protocol but HTTP, HTTPS and TCP there
///   (`UnsupportedProtocol`). Deleting and re-creating a live listener instead would leave the
///   port without a listener on AWS.
/// - ELBv2 load-balancer names are unique: AWS's `CreateLoadBalancer` is idempotent (the same
///   name and settings return the existing load balancer) and answers
///   `DuplicateLoadBalancerName` for other settings. moto 5 checks a random ARN instead, so a
///   retried create makes a second load balancer with the same name.
/// - Likewise one listener per port: AWS's `CreateListener` returns the existing listener for
///   the same settings (here: the same protocol) and answers `DuplicateListener` otherwise;
///   moto 5 compares the port with listener ARNs and adds a second listener on the port.
pub const MOTO_PATCHES: &str = r#"
import sys
from moto.elbv2 import models as _elbv2
from moto.elbv2.exceptions import DuplicateLoadBalancerName as _DuplicateLoadBalancerName

_create_load_balancer = _elbv2.ELBv2Backend.create_load_balancer

def _create_load_balancer_once(self, name, *args, **kwargs):
    for existing in self.load_balancers.values():
        if existing.name == name:
            if (existing.scheme or "internet-facing") == (kwargs.get("scheme") or "internet-facing"):
                return existing
            raise _DuplicateLoadBalancerName()
    return _create_load_balancer(self, name, *args, **kwargs)

_elbv2.ELBv2Backend.create_load_balancer = _create_load_balancer_once

from moto.elbv2.exceptions import DuplicateListenerError as _DuplicateListenerError

_create_listener = _elbv2.ELBv2Backend.create_listener

def _create_listener_once_per_port(self, load_balancer_arn, protocol, port, *args, **kwargs):
    balancer = self.load_balancers.get(load_balancer_arn)
    if balancer is not None:
        for existing in balancer.listeners.values():
            if str(existing.port) == str(port):
                if (existing.protocol or "").upper() == (protocol or "").upper():
                    return existing
                raise _DuplicateListenerError()
    return _create_listener(self, load_balancer_arn, protocol, port, *args, **kwargs)

_elbv2.ELBv2Backend.create_listener = _create_listener_once_per_port

_modify_listener = _elbv2.ELBv2Backend.modify_listener

def _modify_listener_any_protocol(self, arn, port=None, protocol=None, ssl_policy=None, certificates=None, actions=None):
    if protocol in ("TLS", "UDP", "TCP_UDP"):
        listener = _modify_listener(self, arn, port, None, ssl_policy, certificates, actions)
        listener.protocol = protocol
        if certificates:
            listener.certificate = certificates[0]["CertificateArn"]
            listener.certificates = [c["CertificateArn"] for c in certificates]
        elif protocol != "TLS":
            listener.certificate = None
            listener.certificates = []
        return listener
    return _modify_listener(self, arn, port, protocol, ssl_policy, certificates, actions)

_elbv2.ELBv2Backend.modify_listener = _modify_listener_any_protocol

from moto.server import main
sys.argv[0] = "moto_server"
sys.exit(main())
"#;

/// The command that starts moto: its virtualenv's python with [`MOTO_PATCHES`] when there is
/// one next to `moto_server`, else `moto_server` itself (unpatched).
fn moto_command(path: &std::path::Path) -> Command {
    let python = path.with_file_name("python3");
    if python.exists() {
        let mut command = Command::new(python);
        command.args(["-c", MOTO_PATCHES]);
        command
    } else {
        tracing::warn!(path = %path.display(), "no python3 beside moto_server; moto runs unpatched");
        Command::new(path)
    }
}

/// A running moto server, killed on drop.
#[derive(Debug)]
pub struct MotoServer {
    addr: SocketAddr,
    _child: Child,
}

impl MotoServer {
    /// Starts moto's server on a free loopback port and waits (up to 60 s) until it answers.
    pub async fn start() -> Result<MotoServer, MockAwsError> {
        let path = moto_server_path();
        if !path.exists() {
            return Err(MockAwsError::NotInstalled {
                path: path.display().to_string(),
            });
        }
        let mut last_error = String::new();
        // Another process may grab the port between probing and binding; try a few.
        for _ in 0..3 {
            let port = free_port().await?;
            let child = moto_command(&path)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .map_err(io(format!("spawning {}", path.display())))?;
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let server = MotoServer {
                addr,
                _child: child,
            };
            match server.wait_ready(Duration::from_secs(60)).await {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e.to_string(),
            }
        }
        Err(MockAwsError::Server(format!(
            "moto_server did not become ready: {last_error}"
        )))
    }

    async fn wait_ready(&self, ceiling: Duration) -> Result<(), MockAwsError> {
        let deadline = Instant::now() + ceiling;
        loop {
            if let Ok(response) =
                http_request(self.addr, "GET", "/moto-api/data.json", &[], Bytes::new()).await
                && response.0.is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(MockAwsError::Server(format!(
                    "no answer on {} within {ceiling:?}",
                    self.addr
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint URL for `AWS_ENDPOINT_URL` / the SDK's `endpoint_url`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests an ACM certificate (moto checks that listener certificates exist) and returns
    /// its ARN.
    pub async fn request_certificate(&self, domain: &str) -> Result<String, MockAwsError> {
        let body = format!("{{\"DomainName\":\"{domain}\"}}");
        let text = self
            .post(
                "acm",
                "RequestCertificate",
                &[
                    ("content-type", "application/x-amz-json-1.1"),
                    ("x-amz-target", "CertificateManager.RequestCertificate"),
                ],
                body,
            )
            .await?;
        // {"CertificateArn": "arn:aws:acm:..."}
        text.split('"')
            .find(|part| part.starts_with("arn:aws:acm:"))
            .map(str::to_string)
            .ok_or_else(|| MockAwsError::Server(format!("RequestCertificate answered {text}")))
    }
}

/// A VPC laid out like a small cluster: an internet gateway with a default route, two public
/// subnets in two zones (tagged for load balancers and the cluster), a cluster-tagged node
/// security group and `instances` instances in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNetwork {
    /// VPC ID.
    pub vpc: String,
    /// Subnet IDs (us-east-1a, us-east-1b).
    pub subnets: Vec<String>,
    /// Node security group ID.
    pub node_security_group: String,
    /// Instance IDs.
    pub instances: Vec<String>,
}

/// The text of the first `<tag>…</tag>` in an XML document.
pub fn xml_value(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{tag}>"))? + start;
    Some(xml[start..end].to_string())
}

/// Every `<tag>…</tag>` text in an XML document.
pub fn xml_values(xml: &str, tag: &str) -> Vec<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else { break };
        out.push(after[..end].to_string());
        rest = &after[end + close.len()..];
    }
    out
}

fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl MotoServer {
    /// One EC2 Query API call; returns the XML body.
    pub async fn ec2(&self, action: &str, params: &[(&str, &str)]) -> Result<String, MockAwsError> {
        let mut body = format!("Action={action}&Version=2016-11-15");
        for (key, value) in params {
            body.push_str(&format!("&{}={}", form_encode(key), form_encode(value)));
        }
        self.post(
            "ec2",
            action,
            &[("content-type", "application/x-www-form-urlencoded")],
            body,
        )
        .await
    }

    /// One `action` POSTed to moto for `service` (the credential scope moto routes by, with a
    /// dummy signature) with `headers` besides; the answer's body, or an error naming `action`
    /// when moto refuses it.
    async fn post(
        &self,
        service: &str,
        action: &str,
        headers: &[(&str, &str)],
        body: String,
    ) -> Result<String, MockAwsError> {
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
        );
        let mut headers = headers.to_vec();
        headers.push(("authorization", &authorization));
        let (status, text) =
            http_request(self.addr, "POST", "/", &headers, Bytes::from(body)).await?;
        if !status.is_success() {
            return Err(MockAwsError::Server(format!("{action}: {status}: {text}")));
        }
        Ok(text)
    }

    async fn ec2_id(
        &self,
        action: &str,
        params: &[(&str, &str)],
        tag: &str,
    ) -> Result<String, MockAwsError> {
        let xml = self.ec2(action, params).await?;
        xml_value(&xml, tag)
            .ok_or_else(|| MockAwsError::Server(format!("{action}: no <{tag}> in {xml}")))
    }

    /// Creates a [`ClusterNetwork`] for cluster `cluster`.
    pub async fn cluster_network(
        &self,
        cluster: &str,
        instances: usize,
    ) -> Result<ClusterNetwork, MockAwsError> {
        let cluster_tag = format!("kubernetes.io/cluster/{cluster}");
        let vpc = self
            .ec2_id("CreateVpc", &[("CidrBlock", "10.0.0.0/16")], "vpcId")
            .await?;
        let igw = self
            .ec2_id("CreateInternetGateway", &[], "internetGatewayId")
            .await?;
        self.ec2(
            "AttachInternetGateway",
            &[("InternetGatewayId", &igw), ("VpcId", &vpc)],
        )
        .await?;
        let tables = self
            .ec2(
                "DescribeRouteTables",
                &[("Filter.1.Name", "vpc-id"), ("Filter.1.Value.1", &vpc)],
            )
            .await?;
        let table = xml_value(&tables, "routeTableId")
            .ok_or_else(|| MockAwsError::Server("the VPC has no route table".into()))?;
        self.ec2(
            "CreateRoute",
            &[
                ("RouteTableId", &table),
                ("DestinationCidrBlock", "0.0.0.0/0"),
                ("GatewayId", &igw),
            ],
        )
        .await?;
        let mut subnets = Vec::new();
        for (zone, cidr) in [("us-east-1a", "10.0.1.0/24"), ("us-east-1b", "10.0.2.0/24")] {
            subnets.push(
                self.ec2_id(
                    "CreateSubnet",
                    &[
                        ("VpcId", &vpc),
                        ("CidrBlock", cidr),
                        ("AvailabilityZone", zone),
                        ("TagSpecification.1.ResourceType", "subnet"),
                        ("TagSpecification.1.Tag.1.Key", "kubernetes.io/role/elb"),
                        ("TagSpecification.1.Tag.1.Value", "1"),
                        ("TagSpecification.1.Tag.2.Key", &cluster_tag),
                        ("TagSpecification.1.Tag.2.Value", "shared"),
                    ],
                    "subnetId",
                )
                .await?,
            );
        }
        let node_security_group = self
            .ec2_id(
                "CreateSecurityGroup",
                &[
                    ("GroupName", "nodes"),
                    ("GroupDescription", "cluster nodes"),
                    ("VpcId", &vpc),
                    ("TagSpecification.1.ResourceType", "security-group"),
                    ("TagSpecification.1.Tag.1.Key", &cluster_tag),
                    ("TagSpecification.1.Tag.1.Value", "owned"),
                ],
                "groupId",
            )
            .await?;
        let count = instances.to_string();
        let launched = self
            .ec2(
                "RunInstances",
                &[
                    ("ImageId", "ami-12c6146b"),
                    ("MinCount", &count),
                    ("MaxCount", &count),
                    ("SubnetId", &subnets[0]),
                    ("SecurityGroupId.1", &node_security_group),
                ],
            )
            .await?;
        Ok(ClusterNetwork {
            vpc,
            subnets,
            node_security_group,
            instances: xml_values(&launched, "instanceId"),
        })
    }
}

/// One plain HTTP/1.1 request over a fresh connection: the response's head and whole body.
async fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(hyper::http::response::Parts, Bytes), MockAwsError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(io(format!("connecting to {addr}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| MockAwsError::Server(format!("handshake: {e}")))?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(body))
        .map_err(|e| MockAwsError::Server(format!("request: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| MockAwsError::Server(format!("send: {e}")))?;
    let (parts, body) = response.into_parts();
    let bytes = body
        .collect()
        .await
        .map_err(|e| MockAwsError::Server(format!("body: {e}")))?
        .to_bytes();
    Ok((parts, bytes))
}

/// One plain HTTP/1.1 request over a fresh connection: the status and the body as text.
async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(StatusCode, String), MockAwsError> {
    let (parts, bytes) = exchange(addr, method, path, headers, body).await?;
    Ok((parts.status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Which requests the proxy answers with a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPlan {
    /// Forward everything.
    None,
    /// Throttle every `n`-th request (1-based count over all requests).
    ThrottleEvery(u32),
    /// Answer every `n`-th request with HTTP 500.
    ServerErrorEvery(u32),
    /// Forward the selected mutating calls to moto — they take effect — then lose the answer.
    LoseResponse(LoseResponse),
    /// Forward the first `k` mutating calls (counted from when the plan is set), then answer
    /// every later mutating call with a non-retryable `InjectedStop` error without forwarding
    /// it: the caller stops right after its `k`-th change, as if it had been killed there.
    StopAfterMutations(u32),
    /// Answer every call of `action` with an HTTP 400 error `code` without forwarding it, as
    /// AWS refuses a request it finds invalid (`ModifyListener` with an unusable certificate,
    /// say).
    Refuse {
        /// The action refused (`ModifyListener`, …).
        action: &'static str,
        /// The AWS error code in the answer.
        code: &'static str,
    },
    /// Forward every call of `action` (it takes effect), then answer HTTP 200 with a body that
    /// is not the API's XML: a truncated or corrupted answer the client must survive.
    Garble {
        /// The action whose answers are garbled; `None` = every action.
        action: Option<&'static str>,
    },
}

/// How a lost response looks to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostAs {
    /// HTTP 503 with an AWS `ServiceUnavailable` error: the SDK sees a retryable failure.
    ServiceUnavailable,
    /// The connection is closed without any answer.
    Dropped,
}

/// Selects the mutating calls (not `Describe*`, `List*`, `Get*`) whose response is lost after
/// moto carried them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoseResponse {
    /// Only calls of this action (`CreateLoadBalancer`, …); `None` = every mutating call.
    pub action: Option<&'static str>,
    /// Every `n`-th selected call, counting selected calls from 1 (`1` = each of them).
    pub every: u32,
    /// At most this many losses; `None` = no limit.
    pub limit: Option<u32>,
    /// What the client gets instead of the real answer.
    pub how: LostAs,
}

impl LoseResponse {
    /// The first call of `action` loses its response (as a 503), later ones go through.
    pub fn once(action: &'static str) -> LoseResponse {
        LoseResponse {
            action: Some(action),
            every: 1,
            limit: Some(1),
            how: LostAs::ServiceUnavailable,
        }
    }

    /// Every `n`-th mutating call, of any action, loses its response.
    pub fn every_mutation(n: u32, how: LostAs) -> LoseResponse {
        LoseResponse {
            action: None,
            every: n,
            limit: None,
            how,
        }
    }
}

/// True for calls that change state: everything but reads.
pub fn is_mutating(action: &str) -> bool {
    !(action.starts_with("Describe")
        || action.starts_with("List")
        || action.starts_with("Get")
        || action == "?")
}

/// One request the proxy saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// When it arrived.
    pub at: Instant,
    /// The `Action` form parameter (`DescribeLoadBalancers`, …) or `?`.
    pub action: String,
    /// The API version, which tells EC2 (`2016-11-15`), ELB (`2012-06-01`) and ELBv2
    /// (`2015-12-01`) apart.
    pub version: String,
    /// True when the proxy answered with an injected fault instead of forwarding.
    pub injected: bool,
    /// True when the call was forwarded (and took effect) but its response was lost.
    pub lost: bool,
}

/// Counters of the lost-response mode.
#[derive(Debug, Default)]
struct LossCounters {
    /// Selected calls so far.
    selected: u32,
    /// Responses lost so far.
    lost: u32,
    /// Mutating calls forwarded under [`FaultPlan::StopAfterMutations`].
    mutations: u32,
}

#[derive(Debug)]
struct ProxyState {
    upstream: SocketAddr,
    /// Added to every request before it is handled, in microseconds.
    latency: std::sync::atomic::AtomicU64,
    plan: Mutex<FaultPlan>,
    losses: Mutex<LossCounters>,
    seen: Mutex<Vec<Seen>>,
}

impl ProxyState {
    fn plan(&self) -> FaultPlan {
        self.plan.lock().map(|p| *p).unwrap_or(FaultPlan::None)
    }

    /// Whether this call is refused under [`FaultPlan::StopAfterMutations`] (counts it).
    fn stop(&self, action: &str) -> bool {
        let FaultPlan::StopAfterMutations(k) = self.plan() else {
            return false;
        };
        if !is_mutating(action) {
            return false;
        }
        let Ok(mut counters) = self.losses.lock() else {
            return false;
        };
        if counters.mutations < k {
            counters.mutations += 1;
            false
        } else {
            true
        }
    }

    /// Whether this call's response is to be lost (counts it when it is selected).
    fn lose(&self, action: &str) -> Option<LostAs> {
        let FaultPlan::LoseResponse(rule) = self.plan() else {
            return None;
        };
        if !is_mutating(action) || rule.action.is_some_and(|a| a != action) {
            return None;
        }
        let mut counters = self.losses.lock().ok()?;
        counters.selected += 1;
        let due = rule.every > 0 && counters.selected % rule.every == 0;
        let allowed = rule.limit.is_none_or(|limit| counters.lost < limit);
        if due && allowed {
            counters.lost += 1;
            Some(rule.how)
        } else {
            None
        }
    }
}

/// Why the proxy closed a connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("response to {0} dropped by the fault proxy")]
struct Dropped(String);

/// A fault-injecting HTTP proxy in front of moto, stopped on drop.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn form_value(body: &str, key: &str) -> Option<String> {
    body.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

/// EC2's API version: EC2 answers errors in its own envelope, ELB and ELBv2 in the Query one.
const EC2_VERSION: &str = "2016-11-15";

/// An AWS error answer in the envelope of the service `version` belongs to: the SDKs read the
/// code only from their service's envelope (EC2 `<Response><Errors>`, ELB/ELBv2
/// `<ErrorResponse>`), so an injected error in the wrong one reaches the provider as `Unknown`.
fn error_response(
    version: &str,
    status: StatusCode,
    sender: bool,
    code: &str,
    message: &str,
) -> Response<Full<Bytes>> {
    let body = if version == EC2_VERSION {
        format!(
            "<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error>\
             </Errors><RequestID>fault-proxy</RequestID></Response>"
        )
    } else {
        let kind = if sender { "Sender" } else { "Receiver" };
        format!(
            "<ErrorResponse><Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}\
             </Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>"
        )
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

fn throttle_response(version: &str) -> Response<Full<Bytes>> {
    // EC2 and ELB use different codes and statuses for the same condition too.
    if version == EC2_VERSION {
        error_response(
            version,
            StatusCode::SERVICE_UNAVAILABLE,
            true,
            "RequestLimitExceeded",
            "Request limit exceeded.",
        )
    } else {
        error_response(
            version,
            StatusCode::BAD_REQUEST,
            true,
            "Throttling",
            "Rate exceeded",
        )
    }
}

fn unavailable_response(version: &str) -> Response<Full<Bytes>> {
    let code = if version == EC2_VERSION {
        "Unavailable"
    } else {
        "ServiceUnavailable"
    };
    error_response(
        version,
        StatusCode::SERVICE_UNAVAILABLE,
        false,
        code,
        "injected: the call took effect, its response was lost",
    )
}

fn stop_response(version: &str) -> Response<Full<Bytes>> {
    error_response(
        version,
        StatusCode::BAD_REQUEST,
        true,
        "InjectedStop",
        "injected: the caller stops here",
    )
}

fn refusal_response(version: &str, code: &str) -> Response<Full<Bytes>> {
    error_response(
        version,
        StatusCode::BAD_REQUEST,
        true,
        code,
        "injected: the request was refused",
    )
}

/// What [`FaultPlan::Garble`] answers: the start of an XML document, cut off, then noise.
fn garbled_response() -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from_static(
        b"<?xml version=\"1.0\"?><DescribeLoadBalancersResponse><Resul\x00\xff{\"not\": xml",
    )))
}

fn server_error_response(version: &str) -> Response<Full<Bytes>> {
    let code = if version == EC2_VERSION {
        "InternalError"
    } else {
        "InternalFailure"
    };
    error_response(
        version,
        StatusCode::INTERNAL_SERVER_ERROR,
        false,
        code,
        "injected",
    )
}

async fn proxy(
    state: Arc<ProxyState>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let delay = Duration::from_micros(state.latency.load(std::sync::atomic::Ordering::Relaxed));
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let (parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let text = String::from_utf8_lossy(&body);
    let action = form_value(&text, "Action").unwrap_or_else(|| "?".to_string());
    let version = form_value(&text, "Version").unwrap_or_default();
    let count = {
        let seen = state.seen.lock().map(|s| s.len()).unwrap_or(0);
        u32::try_from(seen + 1).unwrap_or(u32::MAX)
    };
    let plan = state.plan();
    let garble = matches!(plan, FaultPlan::Garble { action: a } if a.is_none_or(|a| a == action));
    let fault = match plan {
        FaultPlan::None | FaultPlan::LoseResponse(_) | FaultPlan::Garble { .. } => None,
        FaultPlan::Refuse { action: a, code } => {
            (a == action).then(|| refusal_response(&version, code))
        }
        FaultPlan::StopAfterMutations(_) => state.stop(&action).then(|| stop_response(&version)),
        FaultPlan::ThrottleEvery(n) => {
            (n > 0 && count % n == 0).then(|| throttle_response(&version))
        }
        FaultPlan::ServerErrorEvery(n) => {
            (n > 0 && count % n == 0).then(|| server_error_response(&version))
        }
    };
    let lose = if fault.is_none() {
        state.lose(&action)
    } else {
        None
    };
    if let Ok(mut seen) = state.seen.lock() {
        seen.push(Seen {
            at: Instant::now(),
            action: action.clone(),
            version: version.clone(),
            injected: fault.is_some(),
            lost: lose.is_some() || garble,
        });
    }
    if let Some(response) = fault {
        return Ok(response);
    }
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .filter(|(name, _)| name.as_str() != "host" && name.as_str() != "content-length")
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let header_refs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let forwarded = forward(
        state.upstream,
        parts.method.as_str(),
        path,
        &header_refs,
        body,
    )
    .await;
    if garble {
        return Ok(garbled_response());
    }
    // The call reached moto (and took effect, if moto accepted it) before its answer is lost.
    match lose {
        Some(LostAs::ServiceUnavailable) => return Ok(unavailable_response(&version)),
        Some(LostAs::Dropped) => return Err(Dropped(action)),
        None => {}
    }
    Ok(match forwarded {
        Ok(response) => response,
        Err(e) => {
            let mut response = Response::new(Full::new(Bytes::from(e.to_string())));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    })
}

async fn forward(
    upstream: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Response<Full<Bytes>>, MockAwsError> {
    let (parts, bytes) = exchange(upstream, method, path, headers, body).await?;
    let mut out = Response::new(Full::new(bytes));
    *out.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if name.as_str() != "content-length" && name.as_str() != "transfer-encoding" {
            out.headers_mut().insert(name.clone(), value.clone());
        }
    }
    Ok(out)
}

impl FaultProxy {
    /// Starts the proxy on a free loopback port.
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> Result<FaultProxy, MockAwsError> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(io("binding the proxy"))?;
        let addr = listener
            .local_addr()
            .map_err(io("reading the proxy port"))?;
        let state = Arc::new(ProxyState {
            upstream,
            latency: std::sync::atomic::AtomicU64::new(0),
            plan: Mutex::new(plan),
            losses: Mutex::new(LossCounters::default()),
            seen: Mutex::new(Vec::new()),
        });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        // An error closes the connection without an answer (`LostAs::Dropped`).
                        async move { proxy(state, request).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(FaultProxy { addr, state, task })
    }

    /// The endpoint URL to give the SDK.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Replaces the fault plan from now on (the lost-response counters start again).
    pub fn set_plan(&self, plan: FaultPlan) {
        if let Ok(mut current) = self.state.plan.lock() {
            *current = plan;
        }
        if let Ok(mut counters) = self.state.losses.lock() {
            *counters = LossCounters::default();
        }
    }

    /// Delays every later request by `per_request` before handling it (zero: no delay), so
    /// benchmarks see a cloud's round trip on top of moto's own time.
    pub fn set_latency(&self, per_request: Duration) {
        let micros = u64::try_from(per_request.as_micros()).unwrap_or(u64::MAX);
        self.state
            .latency
            .store(micros, std::sync::atomic::Ordering::Relaxed);
    }

    /// Actions whose response was lost so far, in order.
    pub fn lost(&self) -> Vec<String> {
        self.seen()
            .into_iter()
            .filter(|s| s.lost)
            .map(|s| s.action)
            .collect()
    }

    /// Every request seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cluster_network_is_created_through_the_query_api() {
        let moto = MotoServer::start().await.unwrap();
        let network = moto.cluster_network("demo", 2).await.unwrap();
        assert!(network.vpc.starts_with("vpc-"));
        assert_eq!(network.subnets.len(), 2);
        assert_eq!(network.instances.len(), 2, "{network:?}");
        let described = moto
            .ec2(
                "DescribeInstances",
                &[("InstanceId.1", &network.instances[0])],
            )
            .await
            .unwrap();
        assert!(described.contains(&network.node_security_group));
    }

    #[test]
    fn xml_helpers() {
        let xml = "<a><id>1</id><x/><id>2</id></a>";
        assert_eq!(xml_value(xml, "id").as_deref(), Some("1"));
        assert_eq!(
            xml_values(xml, "id"),
            vec!["1".to_string(), "2".to_string()]
        );
        assert_eq!(xml_value(xml, "nope"), None);
        assert_eq!(form_encode("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn form_values() {
        let body = "Action=DescribeLoadBalancers&Version=2012-06-01&LoadBalancerNames.member.1=a";
        assert_eq!(
            form_value(body, "Action").as_deref(),
            Some("DescribeLoadBalancers")
        );
        assert_eq!(form_value(body, "Version").as_deref(), Some("2012-06-01"));
        assert_eq!(form_value(body, "Missing"), None);
    }

    #[tokio::test]
    async fn proxy_throttles_every_nth_request_and_forwards_the_rest() {
        let moto = MotoServer::start().await.unwrap();
        let proxy = FaultProxy::start(moto.addr(), FaultPlan::ThrottleEvery(2))
            .await
            .unwrap();
        let addr: SocketAddr = proxy
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let form = Bytes::from_static(b"Action=DescribeVpcs&Version=2016-11-15");
        let auth = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0";
        let headers = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("authorization", auth),
        ];
        let (first, body) = http_request(addr, "POST", "/", &headers, form.clone())
            .await
            .unwrap();
        assert!(first.is_success(), "{first}: {body}");
        let (second, body) = http_request(addr, "POST", "/", &headers, form)
            .await
            .unwrap();
        assert_eq!(second, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("RequestLimitExceeded"));
        let seen = proxy.seen();
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].action, "DescribeVpcs");
        assert!(!seen[0].injected && seen[1].injected);
    }

    fn vpc_count(xml: &str) -> usize {
        xml_values(xml, "vpcId").len()
    }

    #[tokio::test]
    async fn lost_responses_take_effect_and_are_selected_by_action_and_count() {
        let moto = MotoServer::start().await.unwrap();
        let proxy = FaultProxy::start(moto.addr(), FaultPlan::None)
            .await
            .unwrap();
        let addr: SocketAddr = proxy
            .endpoint()
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let auth = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0";
        let headers = [
            ("content-type", "application/x-www-form-urlencoded"),
            ("authorization", auth),
        ];
        let create =
            Bytes::from_static(b"Action=CreateVpc&Version=2016-11-15&CidrBlock=10.9.0.0%2F16");
        let before = vpc_count(&moto.ec2("DescribeVpcs", &[]).await.unwrap());

        // Once, by action, as a 503: the VPC exists although the client saw a failure.
        proxy.set_plan(FaultPlan::LoseResponse(LoseResponse::once("CreateVpc")));
        let describe = Bytes::from_static(b"Action=DescribeVpcs&Version=2016-11-15");
        let (status, _) = http_request(addr, "POST", "/", &headers, describe)
            .await
            .unwrap();
        assert!(status.is_success(), "reads are never lost");
        let (status, body) = http_request(addr, "POST", "/", &headers, create.clone())
            .await
            .unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(
            vpc_count(&moto.ec2("DescribeVpcs", &[]).await.unwrap()),
            before + 1
        );
        let (status, _) = http_request(addr, "POST", "/", &headers, create.clone())
            .await
            .unwrap();
        assert!(status.is_success(), "only the first one is lost");
        assert_eq!(proxy.lost(), vec!["CreateVpc".to_string()]);

        // Every 2nd mutating call, as a dropped connection.
        proxy.set_plan(FaultPlan::LoseResponse(LoseResponse::every_mutation(
            2,
            LostAs::Dropped,
        )));
        let first = http_request(addr, "POST", "/", &headers, create.clone()).await;
        assert!(first.is_ok_and(|(s, _)| s.is_success()));
        let second = http_request(addr, "POST", "/", &headers, create).await;
        assert!(second.is_err(), "the connection closes without an answer");
        assert_eq!(
            vpc_count(&moto.ec2("DescribeVpcs", &[]).await.unwrap()),
            before + 4
        );
        assert_eq!(proxy.lost().len(), 2);

        // Stop after one more mutation: reads go on, later mutations are refused unforwarded.
        proxy.set_plan(FaultPlan::StopAfterMutations(1));
        let create =
            Bytes::from_static(b"Action=CreateVpc&Version=2016-11-15&CidrBlock=10.9.0.0%2F16");
        let (first, _) = http_request(addr, "POST", "/", &headers, create.clone())
            .await
            .unwrap();
        assert!(first.is_success());
        let (second, body) = http_request(addr, "POST", "/", &headers, create)
            .await
            .unwrap();
        assert_eq!(second, StatusCode::BAD_REQUEST);
        assert!(body.contains("InjectedStop"), "{body}");
        let describe = Bytes::from_static(b"Action=DescribeVpcs&Version=2016-11-15");
        let (read, _) = http_request(addr, "POST", "/", &headers, describe)
            .await
            .unwrap();
        assert!(read.is_success());
        assert_eq!(
            vpc_count(&moto.ec2("DescribeVpcs", &[]).await.unwrap()),
            before + 5
        );
    }

    #[test]
    fn only_mutating_calls_are_selected() {
        for (action, mutating) in [
            ("CreateLoadBalancer", true),
            ("AuthorizeSecurityGroupIngress", true),
            ("DescribeTags", false),
            ("ListTagsForResource", false),
            ("GetConsoleOutput", false),
            ("?", false),
        ] {
            assert_eq!(is_mutating(action), mutating, "{action}");
        }
    }
}

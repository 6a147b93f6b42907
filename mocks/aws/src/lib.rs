//! How AWS tests get an AWS: moto's server (the engine LocalStack builds on) on a free loopback
//! port, plus a small fault-injecting HTTP proxy that answers some requests with AWS throttling
//! errors and forwards the rest.
//!
//! The server binary comes from `KUBE_LB_MOTO_SERVER`, else `<repo>/.venv/bin/moto_server`
//! (created by `scripts/setup-moto.sh`). When neither exists, [`MotoServer::start`] fails with a
//! message saying how to install it: AWS tests must never pass without running.

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
            let child = Command::new(&path)
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
        let (status, text) = http_request(
            self.addr,
            "POST",
            "/",
            &[
                ("content-type", "application/x-amz-json-1.1"),
                ("x-amz-target", "CertificateManager.RequestCertificate"),
                (
                    "authorization",
                    "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/acm/aws4_request, SignedHeaders=host, Signature=0",
                ),
            ],
            Bytes::from(body),
        )
        .await?;
        if !status.is_success() {
            return Err(MockAwsError::Server(format!(
                "RequestCertificate: {status}: {text}"
            )));
        }
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
        let (status, text) = http_request(
            self.addr,
            "POST",
            "/",
            &[
                ("content-type", "application/x-www-form-urlencoded"),
                (
                    "authorization",
                    "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0",
                ),
            ],
            Bytes::from(body),
        )
        .await?;
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

/// One plain HTTP/1.1 request over a fresh connection.
async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<(StatusCode, String), MockAwsError> {
    let stream = TcpStream::connect(addr).await.map_err(io("connecting"))?;
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
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| MockAwsError::Server(format!("body: {e}")))?
        .to_bytes();
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Which requests the proxy answers with a throttling error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPlan {
    /// Forward everything.
    None,
    /// Throttle every `n`-th request (1-based count over all requests).
    ThrottleEvery(u32),
    /// Answer every `n`-th request with HTTP 500.
    ServerErrorEvery(u32),
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
}

#[derive(Debug)]
struct ProxyState {
    upstream: SocketAddr,
    plan: FaultPlan,
    seen: Mutex<Vec<Seen>>,
}

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

fn throttle_response(version: &str) -> Response<Full<Bytes>> {
    // EC2 and ELB use different error envelopes and codes for the same condition.
    let (status, body) = if version == "2016-11-15" {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "<Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>fault-proxy</RequestID></Response>",
        )
    } else {
        (
            StatusCode::BAD_REQUEST,
            "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>",
        )
    };
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}

fn server_error_response() -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(
        b"<ErrorResponse><Error><Type>Receiver</Type><Code>InternalFailure</Code><Message>injected</Message></Error><RequestId>fault-proxy</RequestId></ErrorResponse>",
    )));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response
}

async fn proxy(state: Arc<ProxyState>, request: Request<Incoming>) -> Response<Full<Bytes>> {
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
    let fault = match state.plan {
        FaultPlan::None => None,
        FaultPlan::ThrottleEvery(n) => {
            (n > 0 && count % n == 0).then(|| throttle_response(&version))
        }
        FaultPlan::ServerErrorEvery(n) => (n > 0 && count % n == 0).then(server_error_response),
    };
    if let Ok(mut seen) = state.seen.lock() {
        seen.push(Seen {
            at: Instant::now(),
            action,
            version,
            injected: fault.is_some(),
        });
    }
    if let Some(response) = fault {
        return response;
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
    match forward(
        state.upstream,
        parts.method.as_str(),
        path,
        &header_refs,
        body,
    )
    .await
    {
        Ok(response) => response,
        Err(e) => {
            let mut response = Response::new(Full::new(Bytes::from(e.to_string())));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

async fn forward(
    upstream: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Response<Full<Bytes>>, MockAwsError> {
    let stream = TcpStream::connect(upstream)
        .await
        .map_err(io("connecting upstream"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| MockAwsError::Server(format!("handshake: {e}")))?;
    tokio::spawn(connection);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", upstream.to_string());
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
            plan,
            seen: Mutex::new(Vec::new()),
        });
        let accept_state = state.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let state = accept_state.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(proxy(state, request).await) }
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
}

//! A thin typed client for the BLB v1 and EIP v1 APIs, and the BCC v2 security groups behind
//! `loadBalancerSourceRanges`: every request is signed with
//! `bce-auth-v1` ([`crate::sign`]) and made through the shared [`CloudApi`] (rate limit, retry
//! of transient failures, call counting). Creates carry a `clientToken` fixed across retries,
//! so a retried create cannot make a second resource.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_lb_provider_core::{CallKind, CloudApi, PageTokens};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::BceError;
use crate::sign::{self, Credentials, HeadersToSign, SigningInput};

/// A BLB as `DescribeLoadBalancers` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blb {
    /// `lb-…`.
    pub blb_id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description (kube-lb's ownership marks live here).
    #[serde(default)]
    pub desc: String,
    /// VPC address.
    #[serde(default)]
    pub address: String,
    /// `creating`, `available`, `updating`, `paused`, `unavailable`.
    #[serde(default)]
    pub status: String,
    /// The bound EIP, empty when none.
    #[serde(default)]
    pub public_ip: String,
    /// Creation time.
    #[serde(default)]
    pub create_time: Option<String>,
}

/// A TCP or UDP listener.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Listener {
    /// Front port (the listener's identity).
    pub listener_port: u16,
    /// Node port.
    #[serde(default)]
    pub backend_port: u16,
    /// `RoundRobin`, `LeastConnection`, `Hash`.
    #[serde(default)]
    pub scheduler: String,
    /// Health check timeout, seconds.
    #[serde(default)]
    pub health_check_timeout_in_second: Option<u32>,
    /// Health check interval, seconds.
    #[serde(default)]
    pub health_check_interval: Option<u32>,
    /// Failures before unhealthy.
    #[serde(default)]
    pub unhealthy_threshold: Option<u32>,
    /// Successes before healthy.
    #[serde(default)]
    pub healthy_threshold: Option<u32>,
    /// UDP probe payload.
    #[serde(default)]
    pub health_check_string: Option<String>,
    /// `TCP` or `UDP`, filled in by the client from the endpoint it read.
    #[serde(skip)]
    pub protocol: &'static str,
}

/// A backend server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackendServer {
    /// `i-…`.
    pub instance_id: String,
    /// 0–100.
    #[serde(default)]
    pub weight: u32,
}

/// A tag on a BLB or EIP.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tag {
    /// Key.
    pub tag_key: String,
    /// Value.
    #[serde(default)]
    pub tag_value: String,
}

/// The value of tag `key` among `tags` (absent when the resource has no tags).
fn tag_value<'a>(tags: Option<&'a [Tag]>, key: &str) -> Option<&'a str> {
    tags.unwrap_or_default()
        .iter()
        .find(|t| t.tag_key == key)
        .map(|t| t.tag_value.as_str())
}

/// An EIP as `ListEips` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip {
    /// The address (its identity in the API).
    pub eip: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// `creating`, `available`, `binded`, …
    #[serde(default)]
    pub status: String,
    /// What it is bound to.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The kind of instance it is bound to (`BLB`, `BCC`, …).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// `Prepaid` / `Postpaid`.
    #[serde(default)]
    pub payment_timing: String,
    /// Creation time.
    #[serde(default)]
    pub create_time: Option<String>,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<Tag>>,
}

impl Eip {
    /// The value of tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        tag_value(self.tags.as_deref(), key)
    }
}

/// A security group as `GET /v2/securityGroup` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroup {
    /// `g-…`.
    pub id: String,
    /// Name.
    #[serde(default)]
    pub name: String,
    /// Description.
    #[serde(default)]
    pub desc: String,
    /// VPC.
    #[serde(default)]
    pub vpc_id: String,
    /// Rules.
    #[serde(default)]
    pub rules: Vec<SecurityGroupRule>,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<Tag>>,
}

impl SecurityGroup {
    /// The value of tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        tag_value(self.tags.as_deref(), key)
    }
}

/// One rule of a security group.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupRule {
    /// Rule id.
    #[serde(default)]
    pub security_group_rule_id: String,
    /// `ingress` or `egress`.
    #[serde(default)]
    pub direction: String,
    /// `IPv4` or `IPv6`.
    #[serde(default)]
    pub ethertype: String,
    /// `tcp`, `udp`, `icmp`, `all` or empty (all).
    #[serde(default)]
    pub protocol: String,
    /// A port, a range `a-b`, or empty (all).
    #[serde(default)]
    pub port_range: String,
    /// Source CIDR (ingress).
    #[serde(default)]
    pub source_ip: String,
    /// Source group (ingress).
    #[serde(default)]
    pub source_group_id: String,
}

/// A group bound to a BLB, as `GET /v1/blb/{id}/securitygroup` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BoundGroup {
    /// `g-…`.
    pub security_group_id: String,
    /// Name.
    #[serde(default)]
    pub security_group_name: String,
}

/// The BLB + EIP client.
#[derive(Debug, Clone)]
pub struct BaiduClient {
    http: reqwest::Client,
    credentials: Credentials,
    blb_endpoint: String,
    eip_endpoint: String,
    bcc_endpoint: String,
    api: CloudApi,
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn client_token() -> String {
    format!("kube-lb-{:032x}", rand::random::<u128>())
}

/// A BCE error answer: `{"code", "message", "requestId"}` with its HTTP status. An answer
/// without that body (a gateway's HTML page, an empty 503) keeps its status, so it is
/// classified by status as the SDK does, and its request id from `x-bce-request-id`.
fn error_from_answer(
    operation: &'static str,
    status: u16,
    body: Option<Value>,
    text: &str,
    header_request_id: String,
) -> BceError {
    let field = |key: &str| {
        body.as_ref()
            .and_then(|b| b.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    BceError::Api {
        operation,
        status,
        code: field("code").unwrap_or_default(),
        message: field("message").unwrap_or_else(|| text.chars().take(200).collect()),
        request_id: field("requestId").unwrap_or(header_request_id),
    }
}

#[derive(Clone, Copy)]
enum Service {
    Blb,
    Eip,
    Bcc,
}

impl BaiduClient {
    /// A client for the two endpoints.
    pub fn new(
        credentials: Credentials,
        blb_endpoint: &str,
        eip_endpoint: &str,
        api: CloudApi,
        timeout: Duration,
    ) -> Result<Self, BceError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|source| BceError::Transport {
                operation: "client",
                source,
            })?;
        Ok(BaiduClient {
            http,
            credentials,
            blb_endpoint: blb_endpoint.trim_end_matches('/').to_string(),
            eip_endpoint: eip_endpoint.trim_end_matches('/').to_string(),
            bcc_endpoint: crate::config::bcc_endpoint_for(blb_endpoint.trim_end_matches('/')),
            api,
        })
    }

    /// The same client with the BCC API (security groups) at `endpoint`; by default beside
    /// the BLB endpoint ([`crate::config::bcc_endpoint_for`]).
    pub fn with_bcc_endpoint(mut self, endpoint: &str) -> Self {
        self.bcc_endpoint = endpoint.trim_end_matches('/').to_string();
        self
    }

    /// The shared call path (for counters in tests).
    pub fn api(&self) -> &CloudApi {
        &self.api
    }

    #[allow(clippy::too_many_arguments)]
    async fn call(
        &self,
        service: Service,
        operation: &'static str,
        kind: CallKind,
        method: Method,
        path: &str,
        query: &[(String, String)],
        body: Option<&Value>,
    ) -> Result<Value, BceError> {
        let family = match service {
            Service::Blb => "blb",
            Service::Eip => "eip",
            Service::Bcc => "bcc",
        };
        self.api
            .call_with(
                family,
                operation,
                kind,
                |e: &BceError| {
                    matches!(
                        e.classification(),
                        kube_lb_provider_core::error::Classification::Transient
                    )
                },
                || self.send(service, operation, method.clone(), path, query, body),
            )
            .await
    }

    /// A write carrying a fresh `clientToken` after the valueless `flags` (`bind`,
    /// `batchdelete`). The shared call path repeats the request as it was after a lost
    /// answer, and BCE answers a repeated token as it answered the first call, so the change
    /// is made once.
    async fn write(
        &self,
        service: Service,
        operation: &'static str,
        method: Method,
        path: &str,
        flags: &[&str],
        body: Option<&Value>,
    ) -> Result<Value, BceError> {
        let mut query: Vec<(String, String)> = flags
            .iter()
            .map(|flag| (flag.to_string(), String::new()))
            .collect();
        query.push(("clientToken".to_string(), client_token()));
        self.call(
            service,
            operation,
            CallKind::Mutate,
            method,
            path,
            &query,
            body,
        )
        .await
    }

    async fn send(
        &self,
        service: Service,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(String, String)],
        body: Option<&Value>,
    ) -> Result<Value, BceError> {
        let base = match service {
            Service::Blb => &self.blb_endpoint,
            Service::Eip => &self.eip_endpoint,
            Service::Bcc => &self.bcc_endpoint,
        };
        let mut url = format!("{base}{}", sign::uri_encode(path, true));
        if !query.is_empty() {
            let encoded: Vec<String> = query
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}={}",
                        sign::uri_encode(k, false),
                        sign::uri_encode(v, false)
                    )
                })
                .collect();
            url.push('?');
            url.push_str(&encoded.join("&"));
        }
        let parsed = reqwest::Url::parse(&url).map_err(|e| BceError::Unexpected {
            operation,
            message: format!("bad endpoint URL {url}: {e}"),
        })?;
        let host = match (parsed.host_str(), parsed.port()) {
            (Some(host), Some(port)) => format!("{host}:{port}"),
            (Some(host), None) => host.to_string(),
            (None, _) => {
                return Err(BceError::Unexpected {
                    operation,
                    message: format!("endpoint {base} has no host"),
                });
            }
        };
        // Signed each attempt: a retry after a pause gets a fresh timestamp.
        let now = now_unix();
        let date = sign::canonical_time(now);
        let payload = body.map(Value::to_string);
        let mut headers = vec![("host".to_string(), host), ("x-bce-date".to_string(), date)];
        let mut names = vec!["host", "x-bce-date"];
        if let Some(payload) = &payload {
            headers.push((
                "content-type".into(),
                "application/json;charset=utf-8".into(),
            ));
            headers.push(("content-length".into(), payload.len().to_string()));
            names.extend(["content-type", "content-length"]);
        }
        if let Some(token) = &self.credentials.session_token {
            headers.push(("x-bce-security-token".into(), token.clone()));
            names.push("x-bce-security-token");
        }
        names.sort_unstable();
        let input = SigningInput {
            method: method.as_str(),
            path,
            query,
            headers: &headers,
        };
        let authorization = sign::authorization(
            &self.credentials,
            &input,
            now,
            sign::DEFAULT_EXPIRATION_SECONDS,
            HeadersToSign::Listed(&names),
        );
        let mut request = self.http.request(method, parsed);
        for (name, value) in &headers {
            if name != "host" && name != "content-length" {
                request = request.header(name.as_str(), value.as_str());
            }
        }
        request = request.header("authorization", authorization);
        if let Some(payload) = payload {
            request = request.body(payload);
        }
        let response = request
            .send()
            .await
            .map_err(|source| BceError::Transport { operation, source })?;
        let status = response.status().as_u16();
        let header_request_id = response
            .headers()
            .get("x-bce-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let text = response
            .text()
            .await
            .map_err(|source| BceError::Transport { operation, source })?;
        let parsed: Result<Value, _> = if text.trim().is_empty() {
            Ok(json!({}))
        } else {
            serde_json::from_str(&text)
        };
        if (200..300).contains(&status) {
            return parsed.map_err(|e| BceError::Unexpected {
                operation,
                message: format!("HTTP {status}, not JSON ({e}): {text:.200}"),
            });
        }
        let error = error_from_answer(operation, status, parsed.ok(), &text, header_request_id);
        if error.is_throttled() {
            self.api.record_throttled(operation);
        }
        Err(error)
    }

    fn decode<T: serde::de::DeserializeOwned>(
        operation: &'static str,
        value: Value,
    ) -> Result<T, BceError> {
        serde_json::from_value(value).map_err(|e| BceError::Unexpected {
            operation,
            message: format!("unexpected answer: {e}"),
        })
    }

    /// Pages through a list (`marker` / `nextMarker`).
    async fn list<T: serde::de::DeserializeOwned>(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
        filters: &[(&str, &str)],
        list_key: &str,
    ) -> Result<Vec<T>, BceError> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        // Each page is bounded by the request timeout; a marker handed back twice would send
        // the listing round the same pages for ever, so it ends the listing instead.
        let mut pages = PageTokens::default();
        loop {
            let mut query: Vec<(String, String)> = filters
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            if let Some(marker) = &marker {
                query.push(("marker".into(), marker.clone()));
            }
            let page = self
                .call(
                    service,
                    operation,
                    CallKind::Read,
                    Method::GET,
                    path,
                    &query,
                    None,
                )
                .await?;
            let items = page
                .get(list_key)
                .cloned()
                .unwrap_or(Value::Array(Vec::new()));
            out.extend(Self::decode::<Vec<T>>(operation, items)?);
            let truncated = page
                .get("isTruncated")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let next = page
                .get("nextMarker")
                .and_then(Value::as_str)
                .filter(|_| truncated);
            marker = pages
                .next(operation, next)
                .map_err(|repeated| BceError::Unexpected {
                    operation,
                    message: repeated.to_string(),
                })?;
            if marker.is_none() {
                return Ok(out);
            }
        }
    }

    /// BLBs named exactly `name`.
    pub async fn blbs_named(&self, name: &str) -> Result<Vec<Blb>, BceError> {
        let blbs: Vec<Blb> = self
            .list(
                Service::Blb,
                "blb:DescribeLoadBalancers",
                "/v1/blb",
                &[("name", name), ("exactlyMatch", "true")],
                "blbList",
            )
            .await?;
        Ok(blbs.into_iter().filter(|b| b.name == name).collect())
    }

    /// Every BLB of the account.
    pub async fn blbs(&self) -> Result<Vec<Blb>, BceError> {
        self.list(
            Service::Blb,
            "blb:DescribeLoadBalancers",
            "/v1/blb",
            &[],
            "blbList",
        )
        .await
    }

    /// One BLB, `None` when it does not exist.
    pub async fn blb(&self, id: &str) -> Result<Option<Blb>, BceError> {
        match self
            .call(
                Service::Blb,
                "blb:DescribeLoadBalancerDetail",
                CallKind::Read,
                Method::GET,
                &format!("/v1/blb/{id}"),
                &[],
                None,
            )
            .await
        {
            Ok(value) => Self::decode("blb:DescribeLoadBalancerDetail", value).map(Some),
            Err(error) if error.is_not_found() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Creates a BLB; returns its id.
    pub async fn create_blb(&self, body: &Value) -> Result<String, BceError> {
        let answer = self
            .write(
                Service::Blb,
                "blb:CreateLoadBalancer",
                Method::POST,
                "/v1/blb",
                &[],
                Some(body),
            )
            .await?;
        answer
            .get("blbId")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| BceError::Unexpected {
                operation: "blb:CreateLoadBalancer",
                message: format!("no blbId in {answer}"),
            })
    }

    /// Changes a BLB's name or description.
    pub async fn update_blb(&self, id: &str, body: &Value) -> Result<(), BceError> {
        self.write(
            Service::Blb,
            "blb:UpdateLoadBalancer",
            Method::PUT,
            &format!("/v1/blb/{id}"),
            &[],
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Deletes a BLB.
    pub async fn delete_blb(&self, id: &str) -> Result<(), BceError> {
        self.write(
            Service::Blb,
            "blb:DeleteLoadBalancer",
            Method::DELETE,
            &format!("/v1/blb/{id}"),
            &[],
            None,
        )
        .await
        .map(drop)
    }

    /// Every listener of a BLB, in one paged call (`DescribeAllListeners`), each with its
    /// protocol from `listenerType` (one read per resync instead of one per protocol).
    pub async fn listeners(&self, id: &str) -> Result<Vec<Listener>, BceError> {
        let raw: Vec<Value> = self
            .list(
                Service::Blb,
                "blb:DescribeAllListeners",
                &format!("/v1/blb/{id}/listener"),
                &[],
                "listenerList",
            )
            .await?;
        raw.into_iter()
            .map(|item| {
                let protocol = match item.get("listenerType").and_then(Value::as_str) {
                    Some("TCP") => "TCP",
                    Some("UDP") => "UDP",
                    Some("HTTP") => "HTTP",
                    Some("HTTPS") => "HTTPS",
                    Some("SSL") => "SSL",
                    _ => "OTHER",
                };
                let mut listener: Listener = Self::decode("blb:DescribeAllListeners", item)?;
                listener.protocol = protocol;
                Ok(listener)
            })
            .collect()
    }

    /// Creates a listener (`protocol` `TCP` or `UDP`).
    pub async fn create_listener(
        &self,
        id: &str,
        protocol: &str,
        body: &Value,
    ) -> Result<(), BceError> {
        let (kind, operation) = if protocol == "UDP" {
            ("UDPlistener", "blb:CreateUDPListener")
        } else {
            ("TCPlistener", "blb:CreateTCPListener")
        };
        self.write(
            Service::Blb,
            operation,
            Method::POST,
            &format!("/v1/blb/{id}/{kind}"),
            &[],
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Updates a listener in place.
    pub async fn update_listener(
        &self,
        id: &str,
        protocol: &str,
        port: u16,
        body: &Value,
    ) -> Result<(), BceError> {
        let (kind, operation) = if protocol == "UDP" {
            ("UDPlistener", "blb:UpdateUDPListener")
        } else {
            ("TCPlistener", "blb:UpdateTCPListener")
        };
        let query = vec![("listenerPort".to_string(), port.to_string())];
        self.call(
            Service::Blb,
            operation,
            CallKind::Mutate,
            Method::PUT,
            &format!("/v1/blb/{id}/{kind}"),
            &query,
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Deletes listeners by port, in one call.
    pub async fn delete_listeners(&self, id: &str, ports: &[u16]) -> Result<(), BceError> {
        self.write(
            Service::Blb,
            "blb:DeleteListeners",
            Method::PUT,
            &format!("/v1/blb/{id}/listener"),
            &["batchdelete"],
            Some(&json!({"portList": ports})),
        )
        .await
        .map(drop)
    }

    /// The backend servers of a BLB.
    pub async fn backends(&self, id: &str) -> Result<Vec<BackendServer>, BceError> {
        self.list(
            Service::Blb,
            "blb:DescribeBackendServers",
            &format!("/v1/blb/{id}/backendserver"),
            &[],
            "backendServerList",
        )
        .await
    }

    /// Adds backend servers (weight 100), in one call.
    pub async fn add_backends(&self, id: &str, instances: &[String]) -> Result<(), BceError> {
        let list: Vec<Value> = instances
            .iter()
            .map(|i| json!({"instanceId": i, "weight": 100}))
            .collect();
        self.write(
            Service::Blb,
            "blb:AddBackendServers",
            Method::POST,
            &format!("/v1/blb/{id}/backendserver"),
            &[],
            Some(&json!({"backendServerList": list})),
        )
        .await
        .map(drop)
    }

    /// Removes backend servers, in one call.
    pub async fn remove_backends(&self, id: &str, instances: &[String]) -> Result<(), BceError> {
        self.write(
            Service::Blb,
            "blb:RemoveBackendServers",
            Method::PUT,
            &format!("/v1/blb/{id}/backendserver"),
            &[],
            Some(&json!({"backendServerList": instances})),
        )
        .await
        .map(drop)
    }

    /// EIPs matching `filters` (`eip`, `name`, `instanceType`, `instanceId`).
    pub async fn eips(&self, filters: &[(&str, &str)]) -> Result<Vec<Eip>, BceError> {
        self.list(Service::Eip, "eip:ListEips", "/v1/eip", filters, "eipList")
            .await
    }

    /// Creates an EIP; returns its address.
    pub async fn create_eip(&self, body: &Value) -> Result<String, BceError> {
        let answer = self
            .write(
                Service::Eip,
                "eip:CreateEip",
                Method::POST,
                "/v1/eip",
                &[],
                Some(body),
            )
            .await?;
        answer
            .get("eip")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| BceError::Unexpected {
                operation: "eip:CreateEip",
                message: format!("no eip in {answer}"),
            })
    }

    /// Binds an EIP to a BLB.
    pub async fn bind_eip(&self, ip: &str, blb_id: &str) -> Result<(), BceError> {
        self.write(
            Service::Eip,
            "eip:BindEip",
            Method::PUT,
            &format!("/v1/eip/{ip}"),
            &["bind"],
            Some(&json!({"instanceType": "BLB", "instanceId": blb_id})),
        )
        .await
        .map(drop)
    }

    /// Unbinds an EIP.
    pub async fn unbind_eip(&self, ip: &str) -> Result<(), BceError> {
        self.write(
            Service::Eip,
            "eip:UnbindEip",
            Method::PUT,
            &format!("/v1/eip/{ip}"),
            &["unbind"],
            None,
        )
        .await
        .map(drop)
    }

    /// Releases an EIP.
    pub async fn release_eip(&self, ip: &str) -> Result<(), BceError> {
        self.write(
            Service::Eip,
            "eip:ReleaseEip",
            Method::DELETE,
            &format!("/v1/eip/{ip}"),
            &[],
            None,
        )
        .await
        .map(drop)
    }

    /// The security groups bound to BLB `id`, in binding order.
    pub async fn blb_security_groups(&self, id: &str) -> Result<Vec<BoundGroup>, BceError> {
        let answer = self
            .call(
                Service::Blb,
                "blb:DescribeSecurityGroups",
                CallKind::Read,
                Method::GET,
                &format!("/v1/blb/{id}/securitygroup"),
                &[],
                None,
            )
            .await?;
        Self::decode(
            "blb:DescribeSecurityGroups",
            answer
                .get("blbSecurityGroups")
                .cloned()
                .unwrap_or(Value::Array(Vec::new())),
        )
    }

    /// Binds (`bind`) or unbinds security groups `groups` to or from BLB `id`.
    pub async fn bind_security_groups(
        &self,
        id: &str,
        groups: &[String],
        bind: bool,
    ) -> Result<(), BceError> {
        let (operation, flag) = if bind {
            ("blb:BindSecurityGroups", "bind")
        } else {
            ("blb:UnbindSecurityGroups", "unbind")
        };
        self.write(
            Service::Blb,
            operation,
            Method::PUT,
            &format!("/v1/blb/{id}/securitygroup"),
            &[flag],
            Some(&json!({"securityGroupIds": groups})),
        )
        .await
        .map(drop)
    }

    /// The security groups of VPC `vpc_id`.
    pub async fn security_groups(&self, vpc_id: &str) -> Result<Vec<SecurityGroup>, BceError> {
        self.list(
            Service::Bcc,
            "bcc:ListSecurityGroups",
            "/v2/securityGroup",
            &[("vpcId", vpc_id)],
            "securityGroups",
        )
        .await
    }

    /// Creates a security group with its rules (`body`: name, desc, vpcId, rules, tags);
    /// returns its id.
    pub async fn create_security_group(&self, body: &Value) -> Result<String, BceError> {
        let answer = self
            .write(
                Service::Bcc,
                "bcc:CreateSecurityGroup",
                Method::POST,
                "/v2/securityGroup",
                &[],
                Some(body),
            )
            .await?;
        answer
            .get("securityGroupId")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| BceError::Unexpected {
                operation: "bcc:CreateSecurityGroup",
                message: format!("no securityGroupId in {answer}"),
            })
    }

    /// Adds `rule` to security group `id`.
    pub async fn authorize_rule(&self, id: &str, rule: &Value) -> Result<(), BceError> {
        self.write(
            Service::Bcc,
            "bcc:AuthorizeSecurityGroupRule",
            Method::PUT,
            &format!("/v2/securityGroup/{id}"),
            &["authorizeRule"],
            Some(&json!({"rule": rule})),
        )
        .await
        .map(drop)
    }

    /// Deletes rule `rule_id` (of whichever group holds it).
    pub async fn delete_rule(&self, rule_id: &str) -> Result<(), BceError> {
        self.write(
            Service::Bcc,
            "bcc:DeleteSecurityGroupRule",
            Method::DELETE,
            &format!("/v2/securityGroup/rule/{rule_id}"),
            &[],
            None,
        )
        .await
        .map(drop)
    }

    /// Deletes security group `id`.
    pub async fn delete_security_group(&self, id: &str) -> Result<(), BceError> {
        self.write(
            Service::Bcc,
            "bcc:DeleteSecurityGroup",
            Method::DELETE,
            &format!("/v2/securityGroup/{id}"),
            &[],
            None,
        )
        .await
        .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(status, code, message, request id)` of an API error answer.
    fn answer_parts(error: &BceError) -> (u16, &str, &str, &str) {
        match error {
            BceError::Api {
                status,
                code,
                message,
                request_id,
                ..
            } => (*status, code, message, request_id),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn error_answers_keep_bces_code_or_at_least_the_status() {
        let bce = error_from_answer(
            "blb:CreateLoadBalancer",
            400,
            Some(json!({"code": "QuotaExceeded", "message": "BLB quota", "requestId": "r1"})),
            "",
            "h1".into(),
        );
        assert_eq!(
            answer_parts(&bce),
            (400, "QuotaExceeded", "BLB quota", "r1")
        );
        let gateway = error_from_answer(
            "blb:DescribeLoadBalancers",
            502,
            None,
            "<html>Bad Gateway</html>",
            "h2".into(),
        );
        assert_eq!(
            answer_parts(&gateway),
            (502, "", "<html>Bad Gateway</html>", "h2")
        );
        assert!(kube_lb_provider_core::ProviderError::from(gateway).is_transient());
    }
}

//! A thin typed client for the CLB API 3.0 actions kube-lb makes, and the VPC security-group
//! actions behind `loadBalancerSourceRanges` (API `2017-03-12`, signed for service `vpc` and
//! sent to the VPC endpoint): every call is `POST /` with a
//! JSON body, the action in `X-TC-Action`, signed with TC3-HMAC-SHA256 ([`crate::sign`]) at the
//! moment of each attempt (a retried request gets a fresh timestamp), and sent through
//! [`CloudApi`] (rate limited as the `clb` family, retried in place when transient, counted per
//! action). Throttling answers (`RequestLimitExceeded`) are counted as throttled.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_lb_provider_core::{CallKind, CloudApi};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use crate::config::TencentConfig;
use crate::error::TencentError;
use crate::sign::{SignInput, authorization, sign};

/// The API version served by CLB 3.0.
pub const VERSION: &str = "2018-03-17";
/// The API version of the VPC actions (security groups).
pub const VPC_VERSION: &str = "2017-03-12";
/// Largest `Limit` of `DescribeSecurityGroups`.
pub const SECURITY_GROUP_PAGE: usize = 100;

/// Largest `Limit` of `DescribeLoadBalancers`.
pub const DESCRIBE_PAGE: usize = 100;
/// Largest number of listener ids per `DescribeTargets`.
pub const DESCRIBE_TARGETS_LISTENERS: usize = 20;
/// Largest number of targets per `BatchRegisterTargets` / `BatchDeregisterTargets`.
pub const BATCH_TARGETS: usize = 500;
/// Largest number of targets per `RegisterTargets` / `DeregisterTargets`.
pub const SINGLE_TARGETS: usize = 20;

macro_rules! actions {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Every action the client can make (the CAM policy grants exactly these).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Action { $($(#[$doc])* $name,)* }

        impl Action {
            /// Every action.
            pub const ALL: &'static [Action] = &[$(Action::$name,)*];

            /// The `X-TC-Action` value (and the CAM action after `clb:` / `vpc:`).
            pub fn as_str(self) -> &'static str {
                match self { $(Action::$name => stringify!($name),)* }
            }
        }
    };
}

actions! {
    /// Find CLBs by id or tag; read VIPs and status.
    DescribeLoadBalancers,
    /// Create a CLB (async).
    CreateLoadBalancer,
    /// Delete a CLB (async).
    DeleteLoadBalancer,
    /// Poll an async task.
    DescribeTaskStatus,
    /// Read listeners.
    DescribeListeners,
    /// Create listeners (async).
    CreateListener,
    /// Change a listener's health check (async).
    ModifyListener,
    /// Delete listeners (async).
    DeleteLoadBalancerListeners,
    /// Read bound targets.
    DescribeTargets,
    /// Bind up to 500 targets across listeners (sync).
    BatchRegisterTargets,
    /// Unbind up to 500 targets across listeners (sync).
    BatchDeregisterTargets,
    /// Set the security groups bound to a CLB (set semantics, sync).
    SetLoadBalancerSecurityGroups,
    /// VPC: create a security group (empty, tagged).
    CreateSecurityGroup,
    /// VPC: find security groups by tag.
    DescribeSecurityGroups,
    /// VPC: read a group's policies.
    DescribeSecurityGroupPolicies,
    /// VPC: replace all of a group's policies.
    ModifySecurityGroupPolicies,
    /// VPC: delete a security group.
    DeleteSecurityGroup,
}

impl Action {
    /// The service the action belongs to: `clb`, or `vpc` for security groups (its CAM
    /// prefix, its signing scope and its endpoint).
    pub fn service(self) -> &'static str {
        match self {
            Action::CreateSecurityGroup
            | Action::DescribeSecurityGroups
            | Action::DescribeSecurityGroupPolicies
            | Action::ModifySecurityGroupPolicies
            | Action::DeleteSecurityGroup => "vpc",
            _ => "clb",
        }
    }

    fn version(self) -> &'static str {
        if self.service() == "vpc" {
            VPC_VERSION
        } else {
            VERSION
        }
    }

    fn kind(self) -> CallKind {
        if self.as_str().starts_with("Describe") {
            CallKind::Read
        } else {
            CallKind::Mutate
        }
    }
}

/// One tag.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Tag {
    /// Key.
    pub tag_key: String,
    /// Value.
    #[serde(default)]
    pub tag_value: String,
}

/// A CLB as `DescribeLoadBalancers` shows it (the fields kube-lb reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct LoadBalancer {
    /// `lb-…`.
    pub load_balancer_id: String,
    /// Name.
    #[serde(default)]
    pub load_balancer_name: String,
    /// `OPEN` or `INTERNAL`.
    #[serde(default)]
    pub load_balancer_type: String,
    /// VIPs.
    #[serde(default)]
    pub load_balancer_vips: Option<Vec<String>>,
    /// IPv6 address of an IPv6 CLB.
    #[serde(default, rename = "AddressIPv6")]
    pub address_ipv6: Option<String>,
    /// 0 creating, 1 normal.
    #[serde(default)]
    pub status: u64,
    /// Tags.
    #[serde(default)]
    pub tags: Option<Vec<Tag>>,
    /// VPC.
    #[serde(default)]
    pub vpc_id: String,
    /// Subnet (internal CLBs).
    #[serde(default)]
    pub subnet_id: String,
    /// Creation time as the API reports it.
    #[serde(default)]
    pub create_time: Option<String>,
    /// Bound security groups, in priority order.
    #[serde(default)]
    pub secure_groups: Option<Vec<String>>,
}

impl LoadBalancer {
    /// The value of tag `key`.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .flatten()
            .find(|t| t.tag_key == key)
            .map(|t| t.tag_value.as_str())
    }
}

/// A VPC tag (`{Key, Value}`, unlike CLB's `{TagKey, TagValue}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct VpcTag {
    /// Key.
    pub key: String,
    /// Value.
    #[serde(default)]
    pub value: String,
}

/// A security group as `DescribeSecurityGroups` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct SecurityGroup {
    /// `sg-…`.
    pub security_group_id: String,
    /// Name.
    #[serde(default)]
    pub security_group_name: String,
    /// Description.
    #[serde(default)]
    pub security_group_desc: String,
    /// Tags.
    #[serde(default)]
    pub tag_set: Option<Vec<VpcTag>>,
}

/// A group's policies as `DescribeSecurityGroupPolicies` shows them (`SecurityGroupPolicy`
/// objects, kept as JSON: [`crate::source_ranges::Policy`] reads the fields that count).
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PolicySet {
    /// Ingress policies in order.
    #[serde(default)]
    pub ingress: Option<Vec<Value>>,
    /// Egress policies in order.
    #[serde(default)]
    pub egress: Option<Vec<Value>>,
}

/// A listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Listener {
    /// `lbl-…`.
    pub listener_id: String,
    /// Name.
    #[serde(default)]
    pub listener_name: String,
    /// `TCP`, `UDP`, …
    pub protocol: String,
    /// Port.
    pub port: u16,
    /// The health check as the API shows it (`HealthSwitch`, `CheckType`, `CheckPort`, …).
    #[serde(default)]
    pub health_check: Option<Value>,
}

/// A bound target (the API's `Backend`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Target {
    /// `CVM` (bound by instance) or `ENI` (bound by IP, `EniIp` at registration).
    #[serde(default, rename = "Type")]
    pub kind: String,
    /// CVM id when bound by instance.
    #[serde(default)]
    pub instance_id: Option<String>,
    /// The bound private address(es).
    #[serde(default)]
    pub private_ip_addresses: Option<Vec<String>>,
    /// Port.
    pub port: u16,
    /// Weight.
    #[serde(default)]
    pub weight: Option<u64>,
}

/// The targets of one listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ListenerTargets {
    /// The listener.
    pub listener_id: String,
    /// Bound targets.
    #[serde(default)]
    pub targets: Option<Vec<Target>>,
}

/// The outcome of an async task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskStatus {
    /// Done.
    Succeeded,
    /// Failed, with the cloud's message.
    Failed(String),
    /// Still running.
    Running,
}

/// How an async task is asked after (`DescribeTaskStatus` takes either).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRef {
    /// The `RequestId` of the call that started it (`TaskId`).
    Request(String),
    /// The order a `CreateLoadBalancer` answered (`DealName`): the same for every repeat of a
    /// create made with one `ClientToken`, whose later `RequestId`s start no task.
    Deal(String),
}

impl std::fmt::Display for TaskRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskRef::Request(id) => write!(f, "task {id}"),
            TaskRef::Deal(deal) => write!(f, "order {deal}"),
        }
    }
}

/// The CLB API behind one set of credentials.
#[derive(Debug)]
pub struct ClbClient {
    http: reqwest::Client,
    config: TencentConfig,
    host: String,
    vpc_host: String,
    api: CloudApi,
}

/// `host[:port]` of `endpoint`, as signed.
fn host_of(endpoint: &str) -> Result<String, TencentError> {
    let url = reqwest::Url::parse(endpoint).map_err(|e| TencentError::Unexpected {
        action: "configure",
        message: format!("endpoint {endpoint}: {e}"),
    })?;
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => Ok(format!("{host}:{port}")),
        (Some(host), None) => Ok(host.to_string()),
        (None, _) => Err(TencentError::Unexpected {
            action: "configure",
            message: format!("endpoint {endpoint} has no host"),
        }),
    }
}

fn unexpected(action: Action, message: impl Into<String>) -> TencentError {
    TencentError::Unexpected {
        action: action.as_str(),
        message: message.into(),
    }
}

impl ClbClient {
    /// A client for `config`, calling through `api`.
    pub fn new(
        config: TencentConfig,
        api: CloudApi,
        timeout: Duration,
    ) -> Result<Self, TencentError> {
        let host = host_of(&config.endpoint)?;
        let vpc_host = host_of(&config.vpc_endpoint)?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|source| TencentError::Transport {
                action: "configure",
                source,
            })?;
        Ok(ClbClient {
            http,
            config,
            host,
            vpc_host,
            api,
        })
    }

    /// The call wrapper (counter, limiter, retry).
    pub fn api(&self) -> &CloudApi {
        &self.api
    }

    /// One action: returns `Response` (without `Error`) and its `RequestId`.
    pub async fn call(
        &self,
        action: Action,
        body: &Value,
    ) -> Result<(Value, String), TencentError> {
        let name = action.as_str();
        let service = action.service();
        let (endpoint, host) = if service == "vpc" {
            (&self.config.vpc_endpoint, &self.vpc_host)
        } else {
            (&self.config.endpoint, &self.host)
        };
        let bytes = serde_json::to_vec(body).map_err(|e| unexpected(action, e.to_string()))?;
        let api = &self.api;
        // CreateSecurityGroup takes no idempotency token: a blind repeat after a lost answer
        // makes a second group, so its caller looks for the first before creating again.
        let repeatable = action != Action::CreateSecurityGroup;
        let is_transient = |e: &TencentError| repeatable && e.classification().retries_in_place();
        self.api
            .call_with(service, name, action.kind(), is_transient, || async {
                let timestamp = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs() as i64)
                    .unwrap_or_default();
                let signature = sign(&SignInput {
                    secret_key: &self.config.secret_key,
                    service,
                    host,
                    content_type: "application/json",
                    body: &bytes,
                    timestamp,
                });
                let mut request = self
                    .http
                    .post(endpoint)
                    .header("content-type", "application/json")
                    .header(
                        "authorization",
                        authorization(&self.config.secret_id, service, &signature),
                    )
                    .header("x-tc-action", name)
                    .header("x-tc-version", action.version())
                    .header("x-tc-region", &self.config.region)
                    .header("x-tc-timestamp", timestamp.to_string())
                    .body(bytes.clone());
                if let Some(token) = &self.config.session_token {
                    request = request.header("x-tc-token", token);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|source| TencentError::Transport {
                        action: name,
                        source,
                    })?;
                let status = response.status();
                let text = response
                    .text()
                    .await
                    .map_err(|source| TencentError::Transport {
                        action: name,
                        source,
                    })?;
                let envelope = serde_json::from_str::<Value>(&text)
                    .map_err(|e| format!("answer is not JSON ({e})"))
                    .and_then(
                        |mut document| match document.get_mut("Response").map(Value::take) {
                            Some(Value::Object(reply)) => Ok(reply),
                            _ => Err("no `Response` in the answer".to_string()),
                        },
                    );
                let mut reply = match envelope {
                    Ok(reply) => reply,
                    // The API answers its errors with 200 and an envelope; an error status
                    // without one comes from a gateway in front of it.
                    Err(_) if !status.is_success() => {
                        let error = TencentError::Gateway {
                            action: name,
                            status: status.as_u16(),
                            message: text.chars().take(200).collect(),
                        };
                        if error.is_throttled() {
                            api.record_throttled(name);
                        }
                        return Err(error);
                    }
                    Err(problem) => {
                        return Err(unexpected(action, format!("HTTP {status}: {problem}")));
                    }
                };
                let request_id = reply
                    .remove("RequestId")
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                if let Some(error) = reply.get("Error") {
                    let error = TencentError::Api {
                        action: name,
                        code: error["Code"].as_str().unwrap_or("Unknown").to_string(),
                        message: error["Message"].as_str().unwrap_or_default().to_string(),
                        request_id,
                    };
                    if error.is_throttled() {
                        api.record_throttled(name);
                    }
                    return Err(error);
                }
                Ok((Value::Object(reply), request_id))
            })
            .await
    }

    async fn call_as<T: DeserializeOwned>(
        &self,
        action: Action,
        body: &Value,
        field: &str,
    ) -> Result<T, TencentError> {
        let (reply, _) = self.call(action, body).await?;
        let value = reply.get(field).cloned().unwrap_or(Value::Null);
        serde_json::from_value(value)
            .map_err(|e| unexpected(action, format!("`{field}` is not what was expected: {e}")))
    }

    /// Every CLB matching `filters` (`[{Name, Values}]`) and, when given, `ids`, read page by
    /// page (`Limit` 100).
    pub async fn load_balancers(
        &self,
        ids: Option<&[String]>,
        filters: &[(String, Vec<String>)],
    ) -> Result<Vec<LoadBalancer>, TencentError> {
        let mut found = Vec::new();
        loop {
            let mut body = json!({"Offset": found.len(), "Limit": DESCRIBE_PAGE});
            if let Some(ids) = ids {
                body["LoadBalancerIds"] = json!(ids);
            }
            if !filters.is_empty() {
                body["Filters"] = Value::Array(
                    filters
                        .iter()
                        .map(|(name, values)| json!({"Name": name, "Values": values}))
                        .collect(),
                );
            }
            let (reply, _) = self.call(Action::DescribeLoadBalancers, &body).await?;
            let page: Vec<LoadBalancer> = serde_json::from_value(reply["LoadBalancerSet"].clone())
                .map_err(|e| {
                    unexpected(
                        Action::DescribeLoadBalancers,
                        format!("LoadBalancerSet: {e}"),
                    )
                })?;
            let total = reply["TotalCount"].as_u64().unwrap_or_default();
            let got = page.len();
            found.extend(page);
            if got == 0 || found.len() as u64 >= total {
                return Ok(found);
            }
        }
    }

    /// The CLB `id`, if it exists.
    pub async fn load_balancer(&self, id: &str) -> Result<Option<LoadBalancer>, TencentError> {
        Ok(self
            .load_balancers(Some(&[id.to_string()]), &[])
            .await?
            .into_iter()
            .find(|lb| lb.load_balancer_id == id))
    }

    /// Starts `CreateLoadBalancer`; returns the new id and how to follow its task: the
    /// order (`DealName`) when the answer names one, else the request. A body with a
    /// `ClientToken` may be sent again after an answer was lost: the cloud answers the first
    /// call's id and order again instead of creating a second CLB.
    pub async fn create_load_balancer(
        &self,
        body: &Map<String, Value>,
    ) -> Result<(String, TaskRef), TencentError> {
        let action = Action::CreateLoadBalancer;
        let (reply, request_id) = self.call(action, &Value::Object(body.clone())).await?;
        let id = reply["LoadBalancerIds"][0]
            .as_str()
            .ok_or_else(|| unexpected(action, "no LoadBalancerIds in the answer"))?
            .to_string();
        let task = match reply["DealName"].as_str().filter(|deal| !deal.is_empty()) {
            Some(deal) => TaskRef::Deal(deal.to_string()),
            None => TaskRef::Request(request_id),
        };
        Ok((id, task))
    }

    /// Starts `DeleteLoadBalancer`; returns the task id.
    pub async fn delete_load_balancer(&self, id: &str) -> Result<String, TencentError> {
        // ForceDelete: the CLB is ours, and the API otherwise refuses one with ≥ 20 bound targets.
        let body = json!({"LoadBalancerIds": [id], "ForceDelete": true});
        Ok(self.call(Action::DeleteLoadBalancer, &body).await?.1)
    }

    /// The status of `task`.
    pub async fn task_status(&self, task: &TaskRef) -> Result<TaskStatus, TencentError> {
        let body = match task {
            TaskRef::Request(id) => json!({"TaskId": id}),
            TaskRef::Deal(deal) => json!({"DealName": deal}),
        };
        let (reply, _) = self.call(Action::DescribeTaskStatus, &body).await?;
        match reply["Status"].as_u64() {
            Some(0) => Ok(TaskStatus::Succeeded),
            Some(1) => Ok(TaskStatus::Failed(
                reply["Message"].as_str().unwrap_or_default().to_string(),
            )),
            Some(2) => Ok(TaskStatus::Running),
            other => Err(unexpected(
                Action::DescribeTaskStatus,
                format!("unknown task Status {other:?}"),
            )),
        }
    }

    /// The listeners of `lb_id`.
    pub async fn listeners(&self, lb_id: &str) -> Result<Vec<Listener>, TencentError> {
        let listeners: Option<Vec<Listener>> = self
            .call_as(
                Action::DescribeListeners,
                &json!({"LoadBalancerId": lb_id}),
                "Listeners",
            )
            .await?;
        Ok(listeners.unwrap_or_default())
    }

    /// Starts `CreateListener` with `body`; returns the listener ids and the task id.
    pub async fn create_listener(
        &self,
        body: &Map<String, Value>,
    ) -> Result<(Vec<String>, String), TencentError> {
        let action = Action::CreateListener;
        let (reply, request_id) = self.call(action, &Value::Object(body.clone())).await?;
        let ids = serde_json::from_value(reply["ListenerIds"].clone())
            .map_err(|e| unexpected(action, format!("ListenerIds: {e}")))?;
        Ok((ids, request_id))
    }

    /// Starts `ModifyListener` with `body`; returns the task id.
    pub async fn modify_listener(&self, body: &Map<String, Value>) -> Result<String, TencentError> {
        Ok(self
            .call(Action::ModifyListener, &Value::Object(body.clone()))
            .await?
            .1)
    }

    /// Starts `DeleteLoadBalancerListeners` for `ids`; returns the task id.
    pub async fn delete_listeners(
        &self,
        lb_id: &str,
        ids: &[String],
    ) -> Result<String, TencentError> {
        let body = json!({"LoadBalancerId": lb_id, "ListenerIds": ids});
        Ok(self
            .call(Action::DeleteLoadBalancerListeners, &body)
            .await?
            .1)
    }

    /// The targets of `listener_ids` (asked 20 listeners at a time).
    pub async fn targets(
        &self,
        lb_id: &str,
        listener_ids: &[String],
    ) -> Result<Vec<ListenerTargets>, TencentError> {
        let mut all = Vec::new();
        for chunk in listener_ids.chunks(DESCRIBE_TARGETS_LISTENERS) {
            let found: Option<Vec<ListenerTargets>> = self
                .call_as(
                    Action::DescribeTargets,
                    &json!({"LoadBalancerId": lb_id, "ListenerIds": chunk}),
                    "Listeners",
                )
                .await?;
            all.extend(found.unwrap_or_default());
        }
        Ok(all)
    }

    /// Binds (`register`) or unbinds `targets` (`{ListenerId, EniIp, Port[, Weight]}`) in
    /// calls of at most 500. Returns the listeners the cloud reported as failed.
    pub async fn batch_targets(
        &self,
        lb_id: &str,
        targets: &[Value],
        register: bool,
    ) -> Result<Vec<String>, TencentError> {
        let action = if register {
            Action::BatchRegisterTargets
        } else {
            Action::BatchDeregisterTargets
        };
        let mut failed = Vec::new();
        for chunk in targets.chunks(BATCH_TARGETS) {
            let ids: Option<Vec<String>> = self
                .call_as(
                    action,
                    &json!({"LoadBalancerId": lb_id, "Targets": chunk}),
                    "FailListenerIdSet",
                )
                .await?;
            failed.extend(ids.unwrap_or_default());
        }
        failed.sort();
        failed.dedup();
        Ok(failed)
    }

    /// Every security group carrying all of `tags` (`Filters` `tag:KEY`), page by page.
    pub async fn security_groups(
        &self,
        tags: &[(&str, &str)],
    ) -> Result<Vec<SecurityGroup>, TencentError> {
        let filters: Vec<Value> = tags
            .iter()
            .map(|(key, value)| json!({"Name": format!("tag:{key}"), "Values": [value]}))
            .collect();
        self.security_groups_where(filters).await
    }

    /// Every security group named `name` (`Filters` `security-group-name`), page by page:
    /// finds a group whose tags are not (yet) readable by the tag filter.
    pub async fn security_groups_named(
        &self,
        name: &str,
    ) -> Result<Vec<SecurityGroup>, TencentError> {
        self.security_groups_where(vec![
            json!({"Name": "security-group-name", "Values": [name]}),
        ])
        .await
    }

    async fn security_groups_where(
        &self,
        filters: Vec<Value>,
    ) -> Result<Vec<SecurityGroup>, TencentError> {
        let action = Action::DescribeSecurityGroups;
        let mut found = Vec::new();
        loop {
            // The VPC API types Offset and Limit of this action as strings.
            let body = json!({
                "Filters": filters,
                "Offset": found.len().to_string(),
                "Limit": SECURITY_GROUP_PAGE.to_string(),
            });
            let (reply, _) = self.call(action, &body).await?;
            let page: Vec<SecurityGroup> =
                serde_json::from_value(reply["SecurityGroupSet"].clone())
                    .map_err(|e| unexpected(action, format!("SecurityGroupSet: {e}")))?;
            let total = reply["TotalCount"].as_u64().unwrap_or_default();
            let got = page.len();
            found.extend(page);
            if got == 0 || found.len() as u64 >= total {
                return Ok(found);
            }
        }
    }

    /// The policies of security group `id`.
    pub async fn security_group_policies(&self, id: &str) -> Result<PolicySet, TencentError> {
        self.call_as(
            Action::DescribeSecurityGroupPolicies,
            &json!({"SecurityGroupId": id}),
            "SecurityGroupPolicySet",
        )
        .await
    }

    /// Creates an empty security group; returns its id.
    pub async fn create_security_group(
        &self,
        name: &str,
        description: &str,
        tags: &[(&str, &str)],
    ) -> Result<String, TencentError> {
        let action = Action::CreateSecurityGroup;
        let tags: Vec<Value> = tags
            .iter()
            .map(|(key, value)| json!({"Key": key, "Value": value}))
            .collect();
        let body = json!({"GroupName": name, "GroupDescription": description, "Tags": tags});
        let (reply, _) = self.call(action, &body).await?;
        reply["SecurityGroup"]["SecurityGroupId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| unexpected(action, "no SecurityGroup.SecurityGroupId in the answer"))
    }

    /// Makes `ingress` and `egress` the whole of group `id`'s policies (one call).
    pub async fn replace_security_group_policies(
        &self,
        id: &str,
        ingress: &[Value],
        egress: &[Value],
    ) -> Result<(), TencentError> {
        let body = json!({
            "SecurityGroupId": id,
            "SecurityGroupPolicySet": {"Ingress": ingress, "Egress": egress},
        });
        self.call(Action::ModifySecurityGroupPolicies, &body)
            .await
            .map(drop)
    }

    /// Deletes security group `id`.
    pub async fn delete_security_group(&self, id: &str) -> Result<(), TencentError> {
        self.call(Action::DeleteSecurityGroup, &json!({"SecurityGroupId": id}))
            .await
            .map(drop)
    }

    /// Makes `groups` exactly the security groups bound to CLB `lb_id` (none unbinds all).
    pub async fn set_load_balancer_security_groups(
        &self,
        lb_id: &str,
        groups: &[String],
    ) -> Result<(), TencentError> {
        self.call(
            Action::SetLoadBalancerSecurityGroups,
            &json!({"LoadBalancerId": lb_id, "SecurityGroups": groups}),
        )
        .await
        .map(drop)
    }
}

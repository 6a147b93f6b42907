//! The in-memory Compute state and the semantics of every call: references between resources,
//! conflicts, in-use checks, fingerprints, quotas, IP allocation and operations.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use base64::Engine as _;
use ipnet::{IpNet, Ipv4Net};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::filter::Filter;
use crate::validate::{self, Kind, opt_bool, opt_str, req_str, str_list};

/// Whether a request reads or changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CallClass {
    /// GET, `…/wait` and `…/listInstances`.
    Read,
    /// Everything else (insert, delete, update, patch, actions).
    Mutate,
}

/// One request the mock received.
#[derive(Debug, Clone, serde::Serialize)]
pub struct JournalEntry {
    /// Arrival order, from 0.
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Read or mutate.
    pub class: CallClass,
    /// The HTTP status answered.
    pub status: u16,
    /// The request body, when it was JSON.
    pub body: Option<Value>,
    /// When it arrived, measured from the mock's start.
    pub at: std::time::Duration,
}

impl JournalEntry {
    /// True for calls that change (or try to change) cloud state.
    pub fn is_mutation(&self) -> bool {
        self.class == CallClass::Mutate
    }

    /// `METHOD path` with the `/compute/v1/projects/<p>/` prefix removed, for assertions.
    pub fn short(&self) -> String {
        let path = self
            .path
            .split_once("/projects/")
            .and_then(|(_, rest)| rest.split_once('/'))
            .map_or(self.path.as_str(), |(_, rest)| rest);
        format!("{} {}", self.method, path)
    }
}

/// What an injected fault answers.
#[derive(Debug, Clone)]
pub enum FaultResponse {
    /// A synchronous HTTP error (any status; `retry_after` adds the header).
    Http(ApiError),
    /// The call is accepted but its operation finishes with this error and nothing changes.
    OperationError {
        /// `error.errors[0].code`, e.g. `QUOTA_EXCEEDED`.
        code: String,
        /// The message.
        message: String,
        /// `httpErrorStatusCode`.
        http_status: u16,
    },
    /// The call is performed (an insert creates its resource) but its answer is lost: the
    /// client gets this error instead (e.g. 503), or, with `None`, a connection dropped
    /// before any body. The case that tests whether a client recognises its own create.
    LoseResponse(Option<ApiError>),
}

/// Fail the Nth (and following `times - 1`) request matching a method and path pattern.
#[derive(Debug, Clone)]
pub struct Fault {
    /// HTTP method to match; `None` matches any.
    pub method: Option<String>,
    /// Regular expression searched in the URL path (`None`: the pattern was invalid, so the
    /// fault never fires).
    pub path: Option<regex::Regex>,
    /// 1-based index of the first matching request that fails.
    pub nth: u32,
    /// How many consecutive matching requests fail from there.
    pub times: u32,
    /// The answer.
    pub response: FaultResponse,
    seen: u32,
}

impl Fault {
    /// A fault on requests whose method is `method` (or any, with `"*"`) and whose path
    /// contains a match of `path_regex`. Fails the first matching request once; adjust with
    /// [`Fault::nth`] and [`Fault::times`]. An invalid pattern matches nothing.
    pub fn on(method: &str, path_regex: &str, response: FaultResponse) -> Fault {
        Fault {
            method: (method != "*").then(|| method.to_ascii_uppercase()),
            path: regex::Regex::new(path_regex).ok(),
            nth: 1,
            times: 1,
            response,
            seen: 0,
        }
    }

    /// Fail starting at the `n`th matching request (1-based).
    pub fn nth(mut self, n: u32) -> Fault {
        self.nth = n.max(1);
        self
    }

    /// Fail this many consecutive matching requests.
    pub fn times(mut self, times: u32) -> Fault {
        self.times = times;
        self
    }

    fn hit(&mut self, method: &str, path: &str) -> bool {
        let path_matches = self.path.as_ref().is_some_and(|re| re.is_match(path));
        if self.method.as_deref().is_some_and(|m| m != method) || !path_matches {
            return false;
        }
        self.seen += 1;
        self.seen >= self.nth && self.seen < self.nth + self.times
    }
}

/// A per-scope quota limit.
#[derive(Debug, Clone)]
pub(crate) struct Quota {
    pub scope: String,
    pub metric: String,
    pub limit: u64,
}

/// Static topology the mock is built with.
#[derive(Debug, Clone)]
pub(crate) struct Topology {
    pub project: String,
    /// zone → region.
    pub zones: BTreeMap<String, String>,
    /// network name.
    pub networks: Vec<String>,
    /// (region, name, network, cidr).
    pub subnetworks: Vec<(String, String, String, Ipv4Net)>,
    pub external_pool: Ipv4Net,
    pub running_polls: u32,
    pub quotas: Vec<Quota>,
}

#[derive(Debug)]
struct Operation {
    body: Value,
    polls_left: u32,
}

/// The whole mock state.
#[derive(Debug)]
pub(crate) struct Store {
    pub topo: Topology,
    pub base_url: String,
    resources: BTreeMap<String, Value>,
    ig_members: BTreeMap<String, BTreeSet<String>>,
    operations: BTreeMap<String, Operation>,
    next_id: u64,
    pub journal: Vec<JournalEntry>,
    pub faults: Vec<Fault>,
    pub started: std::time::Instant,
}

/// The parsed request target.
#[derive(Debug)]
struct Target<'a> {
    scope_type: &'a str,
    scope: Option<&'a str>,
    collection: &'a str,
    name: Option<&'a str>,
    verb: Option<&'a str>,
}

impl Store {
    pub fn new(topo: Topology, base_url: String) -> Store {
        let mut store = Store {
            topo,
            base_url,
            resources: BTreeMap::new(),
            ig_members: BTreeMap::new(),
            operations: BTreeMap::new(),
            next_id: 1_000_000_000_000_000_000,
            journal: Vec::new(),
            faults: Vec::new(),
            started: std::time::Instant::now(),
        };
        for network in store.topo.networks.clone() {
            let path = format!("projects/{}/global/networks/{network}", store.topo.project);
            let body = json!({"name": network, "autoCreateSubnetworks": false});
            store.put_new(Kind::Network, &path, body);
        }
        for (region, name, network, cidr) in store.topo.subnetworks.clone() {
            let path = format!(
                "projects/{}/regions/{region}/subnetworks/{name}",
                store.topo.project
            );
            let network = store.link(&format!(
                "projects/{}/global/networks/{network}",
                store.topo.project
            ));
            let body = json!({"name": name, "network": network, "ipCidrRange": cidr.to_string(),
                "gatewayAddress": cidr.hosts().next().map(|ip| ip.to_string())});
            store.put_new(Kind::Subnetwork, &path, body);
        }
        store
    }

    // ---------------------------------------------------------------- helpers

    fn project(&self) -> &str {
        &self.topo.project
    }

    /// The absolute URL of a canonical path.
    pub fn link(&self, canon: &str) -> String {
        format!("{}/compute/v1/{canon}", self.base_url)
    }

    /// Normalises a reference (absolute URL, `projects/…`, or `regions/…`/`zones/…`/`global/…`)
    /// to its canonical `projects/<p>/…` path.
    pub fn canon(&self, reference: &str) -> Result<String, ApiError> {
        let canon = if let Some(idx) = reference.find("projects/") {
            reference[idx..].to_string()
        } else if ["global/", "regions/", "zones/"]
            .iter()
            .any(|p| reference.starts_with(p))
        {
            format!("projects/{}/{reference}", self.project())
        } else {
            return Err(ApiError::invalid(format!(
                "Invalid value for a resource reference: '{reference}'"
            )));
        };
        Ok(canon.trim_end_matches('/').to_string())
    }

    fn canon_field(&self, body: &Value, field: &str) -> Result<Option<String>, ApiError> {
        opt_str(body, field)?.map(|r| self.canon(r)).transpose()
    }

    fn fresh_id(&mut self) -> String {
        self.next_id += 1;
        self.next_id.to_string()
    }

    fn fingerprint(&mut self) -> String {
        self.next_id += 1;
        let mixed = self
            .next_id
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(17);
        base64::engine::general_purpose::URL_SAFE.encode(mixed.to_be_bytes())
    }

    fn put_new(&mut self, kind: Kind, canon: &str, mut body: Value) {
        let id = self.fresh_id();
        let link = self.link(canon);
        if let Some(object) = body.as_object_mut() {
            object.insert("kind".into(), json!(kind.kind_name()));
            object.insert("id".into(), json!(id));
            object.insert("selfLink".into(), json!(link));
            object.insert("creationTimestamp".into(), json!(rfc3339_now()));
            let parts: Vec<&str> = canon.split('/').collect();
            if parts.get(2) == Some(&"regions")
                && let Some(region) = parts.get(3)
            {
                let region_link =
                    self.link(&format!("projects/{}/regions/{region}", self.project()));
                object.insert("region".into(), json!(region_link));
            }
            if parts.get(2) == Some(&"zones")
                && let Some(zone) = parts.get(3)
            {
                let zone_link = self.link(&format!("projects/{}/zones/{zone}", self.project()));
                object.insert("zone".into(), json!(zone_link));
            }
        }
        self.resources.insert(canon.to_string(), body);
    }

    fn get_res(&self, canon: &str) -> Result<&Value, ApiError> {
        self.resources
            .get(canon)
            .ok_or_else(|| ApiError::not_found(canon))
    }

    fn expect_kind(&self, canon: &str, kind: Kind) -> Result<&Value, ApiError> {
        let value = self.get_res(canon)?;
        if value.get("kind").and_then(Value::as_str) == Some(kind.kind_name()) {
            Ok(value)
        } else {
            Err(ApiError::invalid(format!(
                "The resource '{canon}' is not a {}",
                kind.collection()
            )))
        }
    }

    fn of_kind(&self, kind: Kind) -> impl Iterator<Item = (&String, &Value)> {
        self.resources
            .iter()
            .filter(move |(_, v)| v.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
    }

    fn refs_to(&self, value: &Value, field: &str, canon: &str) -> bool {
        match value.get(field) {
            Some(Value::String(s)) => self.canon(s).is_ok_and(|c| c == canon),
            Some(Value::Array(items)) => items.iter().any(|item| match item {
                Value::String(s) => self.canon(s).is_ok_and(|c| c == canon),
                Value::Object(o) => o
                    .get("group")
                    .and_then(Value::as_str)
                    .is_some_and(|g| self.canon(g).is_ok_and(|c| c == canon)),
                _ => false,
            }),
            _ => false,
        }
    }

    /// The first resource of `kind` whose `field` references `canon`.
    fn user_of(&self, kind: Kind, field: &str, canon: &str) -> Option<String> {
        self.of_kind(kind)
            .find(|(_, v)| self.refs_to(v, field, canon))
            .map(|(path, _)| path.clone())
    }

    fn check_quota(&self, kind: Kind, scope: &str, metric: &str) -> Result<(), ApiError> {
        let Some(quota) = self
            .topo
            .quotas
            .iter()
            .find(|q| q.metric == metric && (q.scope == scope || q.scope == "global"))
        else {
            return Ok(());
        };
        let used = self
            .of_kind(kind)
            .filter(|(path, _)| quota.scope == "global" || path.contains(&format!("/{scope}/")))
            .count() as u64;
        if used >= quota.limit {
            Err(ApiError::quota(metric, quota.limit, scope))
        } else {
            Ok(())
        }
    }

    fn known_scope(&self, scope_type: &str, scope: Option<&str>) -> bool {
        match (scope_type, scope) {
            ("global", None) => true,
            ("regions", Some(r)) => self.topo.zones.values().any(|zr| zr == r),
            ("zones", Some(z)) => self.topo.zones.contains_key(z),
            _ => false,
        }
    }

    // ---------------------------------------------------------------- operations

    fn operation(
        &mut self,
        scope_prefix: &str,
        op_type: &str,
        target: &str,
        error: Option<(String, String, u16)>,
    ) -> Value {
        let id = self.fresh_id();
        let name = format!(
            "operation-{id}-{}",
            &self.fingerprint()[..6]
                .to_ascii_lowercase()
                .replace(['-', '_', '='], "x")
        );
        let canon = format!("{scope_prefix}/operations/{name}");
        let now = rfc3339_now();
        let target_id = self
            .resources
            .get(target)
            .and_then(|v| v.get("id"))
            .cloned()
            .unwrap_or_else(|| json!(id));
        let mut body = json!({
            "kind": "compute#operation",
            "id": id,
            "name": name,
            "operationType": op_type,
            "targetLink": self.link(target),
            "targetId": target_id,
            "status": "DONE",
            "progress": 100,
            "insertTime": now,
            "startTime": now,
            "endTime": now,
            "user": "mock@kube-lb.invalid",
            "selfLink": self.link(&canon),
        });
        let parts: Vec<&str> = scope_prefix.split('/').collect();
        if let (Some(&scope_type), Some(&scope)) = (parts.get(2), parts.get(3)) {
            let key = if scope_type == "regions" {
                "region"
            } else {
                "zone"
            };
            let scope_link =
                self.link(&format!("projects/{}/{scope_type}/{scope}", self.project()));
            body[key] = json!(scope_link);
        }
        if let Some((code, message, http)) = error {
            body["error"] = json!({"errors": [{"code": code, "message": message}]});
            body["httpErrorStatusCode"] = json!(http);
            body["httpErrorMessage"] = json!(http_reason(http));
        }
        let polls_left = self.topo.running_polls;
        let mut shown = body.clone();
        if polls_left > 0 {
            shown["status"] = json!("RUNNING");
            shown["progress"] = json!(0);
            if let Some(o) = shown.as_object_mut() {
                o.remove("endTime");
                o.remove("error");
                o.remove("httpErrorStatusCode");
                o.remove("httpErrorMessage");
            }
        }
        self.operations
            .insert(canon, Operation { body, polls_left });
        shown
    }

    fn poll_operation(&mut self, canon: &str, wait: bool) -> Result<Value, ApiError> {
        let op = self
            .operations
            .get_mut(canon)
            .ok_or_else(|| ApiError::not_found(canon))?;
        if wait {
            op.polls_left = 0;
        }
        if op.polls_left > 0 {
            op.polls_left -= 1;
            let mut shown = op.body.clone();
            shown["status"] = json!("RUNNING");
            shown["progress"] = json!(50);
            if let Some(o) = shown.as_object_mut() {
                o.remove("endTime");
                o.remove("error");
                o.remove("httpErrorStatusCode");
                o.remove("httpErrorMessage");
            }
            return Ok(shown);
        }
        Ok(op.body.clone())
    }

    // ---------------------------------------------------------------- dispatch

    /// Classifies a request.
    pub fn class_of(method: &str, path: &str) -> CallClass {
        if method == "GET" || path.ends_with("/wait") || path.ends_with("/listInstances") {
            CallClass::Read
        } else {
            CallClass::Mutate
        }
    }

    /// Returns the injected fault for this request, if one fires.
    pub fn take_fault(&mut self, method: &str, path: &str) -> Option<FaultResponse> {
        self.faults
            .iter_mut()
            .find_map(|f| f.hit(method, path).then(|| f.response.clone()))
    }

    /// An accepted request whose operation fails (fault injection), without changing state.
    pub fn failed_operation(
        &mut self,
        path: &str,
        method: &str,
        code: String,
        message: String,
        http: u16,
    ) -> Result<Value, ApiError> {
        let (prefix, target) = self.split_for_fault(path)?;
        let op_type = match method {
            "DELETE" => "delete",
            "PUT" => "update",
            "PATCH" => "patch",
            _ => "insert",
        };
        Ok(self.operation(&prefix, op_type, &target, Some((code, message, http))))
    }

    fn split_for_fault(&self, path: &str) -> Result<(String, String), ApiError> {
        let canon = self.canon(path.trim_start_matches("/compute/v1/"))?;
        let parts: Vec<&str> = canon.split('/').collect();
        let prefix_len = if parts.get(2) == Some(&"global") {
            3
        } else {
            4
        };
        let prefix = parts
            .iter()
            .take(prefix_len)
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        let target = parts
            .iter()
            .take(prefix_len + 2)
            .copied()
            .collect::<Vec<_>>()
            .join("/");
        Ok((prefix, target))
    }

    /// Serves one API call.
    pub fn handle(
        &mut self,
        method: &str,
        path: &str,
        query: &BTreeMap<String, String>,
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let Some(rest) = path.strip_prefix("/compute/v1/projects/") else {
            return Err(ApiError::new(
                404,
                "notFound",
                format!("Unknown path '{path}'"),
            ));
        };
        let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        let Some((&project, segments)) = segments.split_first() else {
            return Err(ApiError::new(
                404,
                "notFound",
                format!("Unknown path '{path}'"),
            ));
        };
        if project != self.project() {
            return Err(ApiError::not_found(&format!("projects/{project}")));
        }
        if segments == ["zones"] && method == "GET" {
            return self.list_zones(query);
        }
        let target = match segments {
            ["global", collection, tail @ ..] => Target {
                scope_type: "global",
                scope: None,
                collection,
                name: tail.first().copied(),
                verb: tail.get(1).copied(),
            },
            [
                scope_type @ ("regions" | "zones"),
                scope,
                collection,
                tail @ ..,
            ] => Target {
                scope_type,
                scope: Some(scope),
                collection,
                name: tail.first().copied(),
                verb: tail.get(1).copied(),
            },
            _ => {
                return Err(ApiError::new(
                    404,
                    "notFound",
                    format!("Unknown path '{path}'"),
                ));
            }
        };
        if !self.known_scope(target.scope_type, target.scope) {
            let scope = target.scope.unwrap_or_default();
            return Err(ApiError::not_found(&format!(
                "projects/{project}/{}/{scope}",
                target.scope_type
            )));
        }
        let prefix = match target.scope {
            Some(scope) => format!("projects/{project}/{}/{scope}", target.scope_type),
            None => format!("projects/{project}/global"),
        };
        if target.collection == "operations" {
            let name = target
                .name
                .ok_or_else(|| ApiError::new(405, "methodNotAllowed", "list operations"))?;
            let canon = format!("{prefix}/operations/{name}");
            return match (method, target.verb) {
                ("GET", None) => self.poll_operation(&canon, false),
                ("POST", Some("wait")) => self.poll_operation(&canon, true),
                ("DELETE", None) => self
                    .operations
                    .remove(&canon)
                    .map(|_| json!({}))
                    .ok_or_else(|| ApiError::not_found(&canon)),
                _ => Err(ApiError::new(
                    405,
                    "methodNotAllowed",
                    "unsupported operation call",
                )),
            };
        }
        let kind =
            Kind::from_collection(target.scope_type, target.collection).ok_or_else(|| {
                ApiError::new(
                    404,
                    "notFound",
                    format!("Unknown collection '{}'", target.collection),
                )
            })?;
        let collection = format!("{prefix}/{}", kind.collection());
        let empty = Value::Object(Map::new());
        let body = body.unwrap_or(&empty);
        match (method, target.name, target.verb) {
            ("GET", None, None) => self.list(kind, &collection, query),
            ("POST", None, None) => self.insert(kind, &prefix, &collection, body),
            ("GET", Some(name), None) => {
                let canon = format!("{collection}/{name}");
                self.get_res(&canon).cloned()
            }
            ("DELETE", Some(name), None) => {
                self.delete(kind, &prefix, &format!("{collection}/{name}"))
            }
            ("PUT", Some(name), None) => {
                self.update(kind, &prefix, &format!("{collection}/{name}"), body, false)
            }
            ("PATCH", Some(name), None) => {
                self.update(kind, &prefix, &format!("{collection}/{name}"), body, true)
            }
            ("POST", Some(name), Some(verb)) => {
                self.action(kind, &prefix, &format!("{collection}/{name}"), verb, body)
            }
            _ => Err(ApiError::new(
                405,
                "methodNotAllowed",
                format!("{method} is not supported on {path}"),
            )),
        }
    }

    fn list_zones(&self, query: &BTreeMap<String, String>) -> Result<Value, ApiError> {
        let filter = Filter::parse(query.get("filter").map_or("", String::as_str))?;
        let items: Vec<Value> = self
            .topo
            .zones
            .iter()
            .map(|(zone, region)| {
                json!({
                    "kind": "compute#zone",
                    "name": zone,
                    "status": "UP",
                    "region": self.link(&format!("projects/{}/regions/{region}", self.project())),
                    "selfLink": self.link(&format!("projects/{}/zones/{zone}", self.project())),
                })
            })
            .filter(|z| filter.matches(z))
            .collect();
        Ok(json!({"kind": "compute#zoneList", "items": items}))
    }

    fn list(
        &self,
        kind: Kind,
        collection: &str,
        query: &BTreeMap<String, String>,
    ) -> Result<Value, ApiError> {
        let filter = Filter::parse(query.get("filter").map_or("", String::as_str))?;
        let max: usize = query
            .get("maxResults")
            .map(|m| {
                m.parse()
                    .map_err(|_| ApiError::invalid("Invalid maxResults"))
            })
            .transpose()?
            .unwrap_or(500)
            .clamp(1, 500);
        let start: usize = query
            .get("pageToken")
            .filter(|t| !t.is_empty())
            .map(|t| {
                t.parse()
                    .map_err(|_| ApiError::invalid("Invalid pageToken"))
            })
            .transpose()?
            .unwrap_or(0);
        let prefix = format!("{collection}/");
        let matching: Vec<&Value> = self
            .resources
            .iter()
            .filter(|(path, _)| path.starts_with(&prefix) && !path[prefix.len()..].contains('/'))
            .map(|(_, v)| v)
            .filter(|v| filter.matches(v))
            .collect();
        let page: Vec<Value> = matching
            .iter()
            .skip(start)
            .take(max)
            .map(|v| (*v).clone())
            .collect();
        let mut out = json!({
            "kind": format!("{}List", kind.kind_name()),
            "id": collection,
            "items": page,
            "selfLink": self.link(collection),
        });
        if start + max < matching.len() {
            out["nextPageToken"] = json!((start + max).to_string());
        }
        Ok(out)
    }

    // ---------------------------------------------------------------- insert

    fn insert(
        &mut self,
        kind: Kind,
        prefix: &str,
        collection: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        validate::check_body(kind, body)?;
        let name = req_str(body, "name")?;
        let canon = format!("{collection}/{name}");
        if self.resources.contains_key(&canon) {
            return Err(ApiError::already_exists(&canon));
        }
        let scope = prefix.rsplit('/').next().unwrap_or_default().to_string();
        let stored = match kind {
            Kind::Address => {
                self.check_quota(kind, &scope, "STATIC_ADDRESSES")?;
                self.build_address(&scope, body)?
            }
            Kind::ForwardingRule => {
                self.check_quota(kind, &scope, "FORWARDING_RULES")?;
                let mut stored = self.build_forwarding_rule(&scope, body)?;
                stored["fingerprint"] = json!(self.fingerprint());
                stored
            }
            Kind::TargetPool => {
                self.check_quota(kind, &scope, "TARGET_POOLS")?;
                self.build_target_pool(body)?
            }
            Kind::BackendService => {
                self.check_quota(kind, &scope, "BACKEND_SERVICES")?;
                let mut stored = self.build_backend_service(&canon, body)?;
                stored["fingerprint"] = json!(self.fingerprint());
                stored
            }
            Kind::HttpHealthCheck | Kind::HealthCheck => {
                self.check_quota(Kind::HealthCheck, "global", "HEALTH_CHECKS")?;
                self.check_quota(Kind::HttpHealthCheck, "global", "HEALTH_CHECKS")?;
                self.build_health_check(kind, body)?
            }
            Kind::Firewall => {
                self.check_quota(kind, "global", "FIREWALLS")?;
                self.build_firewall(body)?
            }
            Kind::InstanceGroup => {
                let mut stored = body.clone();
                if let Some(network) = self.canon_field(body, "network")? {
                    self.expect_kind(&network, Kind::Network)?;
                    stored["network"] = json!(self.link(&network));
                }
                stored["size"] = json!(0);
                stored["fingerprint"] = json!(self.fingerprint());
                self.ig_members.insert(canon.clone(), BTreeSet::new());
                stored
            }
            Kind::Network | Kind::Subnetwork | Kind::Instance => {
                return Err(ApiError::new(405, "methodNotAllowed", "read-only fixture"));
            }
        };
        let stored = strip_output_only(stored);
        self.put_new(kind, &canon, stored);
        if matches!(kind, Kind::ForwardingRule | Kind::Address) {
            self.mark_address_users();
        }
        Ok(self.operation(prefix, "insert", &canon, None))
    }

    fn subnet_cidr(&self, subnet: &str) -> Result<Ipv4Net, ApiError> {
        let value = self.expect_kind(subnet, Kind::Subnetwork)?;
        value
            .get("ipCidrRange")
            .and_then(Value::as_str)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| ApiError::invalid(format!("subnetwork {subnet} has no range")))
    }

    /// Every IP taken in `region`: addresses, forwarding rules and (for internal) instances.
    fn used_ips(&self) -> BTreeSet<IpAddr> {
        let mut used = BTreeSet::new();
        for (_, v) in self.of_kind(Kind::Address) {
            if let Some(ip) = v
                .get("address")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
            {
                used.insert(ip);
            }
        }
        for (_, v) in self.of_kind(Kind::ForwardingRule) {
            if let Some(ip) = v
                .get("IPAddress")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
            {
                used.insert(ip);
            }
        }
        for (_, v) in self.of_kind(Kind::Instance) {
            for nic in v
                .get("networkInterfaces")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(ip) = nic
                    .get("networkIP")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse().ok())
                {
                    used.insert(ip);
                }
            }
        }
        used
    }

    fn allocate(&self, range: Ipv4Net, skip: usize) -> Result<Ipv4Addr, ApiError> {
        let used = self.used_ips();
        range
            .hosts()
            .skip(skip)
            .find(|ip| !used.contains(&IpAddr::V4(*ip)))
            .ok_or_else(|| {
                ApiError::new(
                    400,
                    "ipSpaceExhausted",
                    format!("IP space of '{range}' is exhausted"),
                )
            })
    }

    /// The address resource in `region` reserving `ip`, if any.
    fn address_by_ip(&self, region: &str, ip: &str) -> Option<(String, Value)> {
        let prefix = format!("projects/{}/regions/{region}/addresses/", self.project());
        self.of_kind(Kind::Address)
            .find(|(path, v)| {
                path.starts_with(&prefix) && v.get("address").and_then(Value::as_str) == Some(ip)
            })
            .map(|(p, v)| (p.clone(), v.clone()))
    }

    fn forwarding_rule_by_ip(&self, region: &str, ip: &str) -> Option<String> {
        let prefix = format!(
            "projects/{}/regions/{region}/forwardingRules/",
            self.project()
        );
        self.of_kind(Kind::ForwardingRule)
            .find(|(path, v)| {
                path.starts_with(&prefix) && v.get("IPAddress").and_then(Value::as_str) == Some(ip)
            })
            .map(|(p, _)| p.clone())
    }

    fn build_address(&self, region: &str, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        let internal = opt_str(body, "addressType")? == Some("INTERNAL");
        stored["addressType"] = json!(if internal { "INTERNAL" } else { "EXTERNAL" });
        stored["networkTier"] = json!(opt_str(body, "networkTier")?.unwrap_or("PREMIUM"));
        let subnet = self.canon_field(body, "subnetwork")?;
        let range = match (&subnet, internal) {
            (Some(subnet), true) => {
                stored["subnetwork"] = json!(self.link(subnet));
                self.subnet_cidr(subnet)?
            }
            (None, true) => {
                return Err(ApiError::invalid(
                    "Required field 'resource.subnetwork' not specified for an INTERNAL address \
                     in a custom-mode network",
                ));
            }
            (_, false) => self.topo.external_pool,
        };
        let ip = match opt_str(body, "address")? {
            Some(ip) => {
                let parsed: IpAddr = ip
                    .parse()
                    .map_err(|_| ApiError::invalid(format!("Invalid IP address '{ip}'")))?;
                if !IpNet::from(range).contains(&parsed) {
                    return Err(ApiError::invalid(format!(
                        "Invalid value for field 'resource.address': '{ip}'. The address is \
                         not within the range of {}",
                        if internal {
                            "the subnetwork"
                        } else {
                            "addresses available to the project"
                        }
                    )));
                }
                if let Some((other, _)) = self.address_by_ip(region, ip) {
                    // Real GCE answers 400 for an external conflict and 409 for internal.
                    let status = if internal { 409 } else { 400 };
                    return Err(ApiError::new(
                        status,
                        if internal { "alreadyExists" } else { "invalid" },
                        format!(
                            "Invalid value for field 'resource.address': '{ip}'. Specified IP \
                             address is already reserved by '{other}'"
                        ),
                    ));
                }
                ip.to_string()
            }
            None => self
                .allocate(range, if internal { 1 } else { 9 })?
                .to_string(),
        };
        stored["address"] = json!(ip);
        stored["status"] = json!("RESERVED");
        stored["users"] = json!([]);
        Ok(stored)
    }

    /// Recomputes address `status`/`users` from the forwarding rules using their IPs.
    fn mark_address_users(&mut self) {
        let addresses: Vec<(String, String)> = self
            .of_kind(Kind::Address)
            .filter_map(|(path, v)| Some((path.clone(), v.get("address")?.as_str()?.to_string())))
            .collect();
        for (path, ip) in addresses {
            let region = path.split('/').nth(3).unwrap_or_default().to_string();
            let user = self
                .forwarding_rule_by_ip(&region, &ip)
                .map(|fr| self.link(&fr));
            if let Some(address) = self.resources.get_mut(&path) {
                address["status"] = json!(if user.is_some() { "IN_USE" } else { "RESERVED" });
                address["users"] = json!(user.into_iter().collect::<Vec<_>>());
            }
        }
    }

    fn build_forwarding_rule(&self, region: &str, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        let scheme = opt_str(body, "loadBalancingScheme")?.unwrap_or("EXTERNAL");
        let internal = scheme == "INTERNAL";
        let protocol = opt_str(body, "IPProtocol")?.unwrap_or("TCP");
        stored["loadBalancingScheme"] = json!(scheme);
        stored["IPProtocol"] = json!(protocol);
        stored["networkTier"] = json!(opt_str(body, "networkTier")?.unwrap_or("PREMIUM"));
        if let Some(range) = opt_str(body, "portRange")? {
            let (low, high) = validate::parse_port_range("portRange", range)?;
            stored["portRange"] = json!(format!("{low}-{high}"));
        }
        let region_prefix = format!("projects/{}/regions/{region}/", self.project());
        if let Some(target) = self.canon_field(body, "target")? {
            if !target.starts_with(&region_prefix) {
                return Err(ApiError::invalid(
                    "The target must be in the forwarding rule's region",
                ));
            }
            self.expect_kind(&target, Kind::TargetPool)?;
            stored["target"] = json!(self.link(&target));
        }
        if let Some(bs) = self.canon_field(body, "backendService")? {
            let service = self.expect_kind(&bs, Kind::BackendService)?;
            if service.get("loadBalancingScheme").and_then(Value::as_str) != Some(scheme) {
                return Err(ApiError::invalid(format!(
                    "Invalid value for field 'resource.backendService': '{bs}'. The backend \
                     service's load balancing scheme must be {scheme}"
                )));
            }
            let bs_protocol = service
                .get("protocol")
                .and_then(Value::as_str)
                .unwrap_or("HTTP");
            if bs_protocol != protocol && bs_protocol != "UNSPECIFIED" {
                return Err(ApiError::invalid(format!(
                    "Invalid value for field 'resource.IPProtocol': '{protocol}'. The backend \
                     service protocol is {bs_protocol}"
                )));
            }
            stored["backendService"] = json!(self.link(&bs));
        }
        let mut subnet_range = None;
        if internal {
            let Some(subnet) = self.canon_field(body, "subnetwork")? else {
                return Err(ApiError::invalid(
                    "Required field 'resource.subnetwork' not specified: the network is in \
                     custom subnet mode",
                ));
            };
            let subnet_value = self.expect_kind(&subnet, Kind::Subnetwork)?.clone();
            subnet_range = Some(self.subnet_cidr(&subnet)?);
            let subnet_network = subnet_value
                .get("network")
                .and_then(Value::as_str)
                .map(|n| self.canon(n))
                .transpose()?;
            if let Some(network) = self.canon_field(body, "network")? {
                self.expect_kind(&network, Kind::Network)?;
                if Some(&network) != subnet_network.as_ref() {
                    return Err(ApiError::invalid(
                        "The subnetwork does not belong to the given network",
                    ));
                }
            }
            stored["subnetwork"] = json!(self.link(&subnet));
            if let Some(network) = subnet_network {
                stored["network"] = json!(self.link(&network));
            }
            stored["allowGlobalAccess"] = json!(opt_bool(body, "allowGlobalAccess")?);
        } else if let Some(network) = self.canon_field(body, "network")? {
            self.expect_kind(&network, Kind::Network)?;
            stored["network"] = json!(self.link(&network));
        }
        // IP: an address URL, a reserved IP, (internal) a free subnet IP, or allocate.
        let requested = match opt_str(body, "IPAddress")? {
            Some(r) if r.contains("/addresses/") => {
                let address = self.expect_kind(&self.canon(r)?, Kind::Address)?;
                address
                    .get("address")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            }
            other => other.map(str::to_string),
        };
        let ip = match requested {
            Some(ip) => {
                if let Some(user) = self.forwarding_rule_by_ip(region, &ip) {
                    return Err(ApiError::new(
                        400,
                        "ipInUseByAnotherResource",
                        format!(
                            "Invalid value for field 'resource.IPAddress': '{ip}'. Specified IP \
                             address is in-use and would result in a conflict. (used by {user})"
                        ),
                    ));
                }
                match self.address_by_ip(region, &ip) {
                    Some((_, address)) => {
                        let address_type = address
                            .get("addressType")
                            .and_then(Value::as_str)
                            .unwrap_or("EXTERNAL");
                        if (address_type == "INTERNAL") != internal {
                            return Err(ApiError::invalid(format!(
                                "Invalid value for field 'resource.IPAddress': '{ip}'. The \
                                 address type {address_type} does not match the scheme {scheme}"
                            )));
                        }
                        if !internal && address.get("networkTier") != stored.get("networkTier") {
                            return Err(ApiError::invalid(format!(
                                "Invalid value for field 'resource.IPAddress': '{ip}'. The \
                                 address network tier does not match the forwarding rule"
                            )));
                        }
                    }
                    None if internal => {
                        let parsed: IpAddr = ip
                            .parse()
                            .map_err(|_| ApiError::invalid(format!("Invalid IP address '{ip}'")))?;
                        let in_subnet =
                            subnet_range.is_some_and(|range| IpNet::from(range).contains(&parsed));
                        if !in_subnet {
                            return Err(ApiError::invalid(format!(
                                "Invalid value for field 'resource.IPAddress': '{ip}'. The IP \
                                 is not within the subnetwork"
                            )));
                        }
                    }
                    None => {
                        return Err(ApiError::invalid(format!(
                            "Invalid value for field 'resource.IPAddress': '{ip}'. Specified IP \
                             address is not reserved in region {region}"
                        )));
                    }
                }
                ip
            }
            None => match subnet_range {
                Some(range) => self.allocate(range, 1)?.to_string(),
                None => self.allocate(self.topo.external_pool, 9)?.to_string(),
            },
        };
        stored["IPAddress"] = json!(ip);
        Ok(stored)
    }

    fn instance_links(&self, items: &[String]) -> Result<Vec<String>, ApiError> {
        items
            .iter()
            .map(|i| {
                let canon = self.canon(i)?;
                self.expect_kind(&canon, Kind::Instance)?;
                Ok(self.link(&canon))
            })
            .collect()
    }

    fn build_target_pool(&self, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        stored["instances"] = json!(self.instance_links(&str_list(body, "instances")?)?);
        let mut hcs = Vec::new();
        for hc in str_list(body, "healthChecks")? {
            let canon = self.canon(&hc)?;
            self.expect_kind(&canon, Kind::HttpHealthCheck)?;
            hcs.push(self.link(&canon));
        }
        stored["healthChecks"] = json!(hcs);
        stored["sessionAffinity"] = json!(opt_str(body, "sessionAffinity")?.unwrap_or("NONE"));
        Ok(stored)
    }

    fn build_backend_service(&self, canon: &str, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        stored["protocol"] = json!(opt_str(body, "protocol")?.unwrap_or("HTTP"));
        stored["loadBalancingScheme"] =
            json!(opt_str(body, "loadBalancingScheme")?.unwrap_or("EXTERNAL"));
        stored["sessionAffinity"] = json!(opt_str(body, "sessionAffinity")?.unwrap_or("NONE"));
        let mut hcs = Vec::new();
        for hc in str_list(body, "healthChecks")? {
            let hc = self.canon(&hc)?;
            self.expect_kind(&hc, Kind::HealthCheck)?;
            hcs.push(self.link(&hc));
        }
        stored["healthChecks"] = json!(hcs);
        let mut backends = Vec::new();
        let mut groups = Vec::new();
        for backend in body
            .get("backends")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let group = self.canon(req_str(backend, "group")?)?;
            self.expect_kind(&group, Kind::InstanceGroup)?;
            let mut b = backend.clone();
            b["group"] = json!(self.link(&group));
            if b.get("balancingMode").is_none_or(Value::is_null) {
                b["balancingMode"] = json!("CONNECTION");
            }
            backends.push(b);
            groups.push(group);
        }
        self.check_single_lb_group(canon, &groups, None)?;
        stored["backends"] = json!(backends);
        Ok(stored)
    }

    /// An instance may belong to at most one load-balanced instance group: reject when one of
    /// `groups` (about to be a backend of `service`) shares an instance with a group that is a
    /// backend of another service. `extra` is (group, instance) being added.
    fn check_single_lb_group(
        &self,
        service: &str,
        groups: &[String],
        extra: Option<(&str, &str)>,
    ) -> Result<(), ApiError> {
        let members = |group: &str| -> BTreeSet<String> {
            let mut set = self.ig_members.get(group).cloned().unwrap_or_default();
            if let Some((g, i)) = extra
                && g == group
            {
                set.insert(i.to_string());
            }
            set
        };
        let mut other_groups = BTreeSet::new();
        for (path, bs) in self.of_kind(Kind::BackendService) {
            if path == service {
                continue;
            }
            for backend in bs
                .get("backends")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(g) = backend.get("group").and_then(Value::as_str)
                    && let Ok(g) = self.canon(g)
                {
                    other_groups.insert(g);
                }
            }
        }
        for group in groups {
            for other in other_groups.iter().filter(|o| *o != group) {
                if let Some(instance) = members(group).intersection(&members(other)).next() {
                    return Err(ApiError::new(
                        400,
                        "invalid",
                        format!(
                            "INSTANCE_IN_MULTIPLE_LOAD_BALANCED_IGS: Validation failed for \
                             instance '{instance}': instance may belong to at most one \
                             load-balanced instance group."
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    fn build_health_check(&self, kind: Kind, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        for (field, default) in [
            ("checkIntervalSec", 5),
            ("timeoutSec", 5),
            ("healthyThreshold", 2),
            ("unhealthyThreshold", 2),
        ] {
            if body.get(field).is_none_or(Value::is_null) {
                stored[field] = json!(default);
            }
        }
        if kind == Kind::HttpHealthCheck {
            if body.get("port").is_none_or(Value::is_null) {
                stored["port"] = json!(80);
            }
            if body.get("requestPath").is_none_or(Value::is_null) {
                stored["requestPath"] = json!("/");
            }
        }
        Ok(stored)
    }

    fn build_firewall(&self, body: &Value) -> Result<Value, ApiError> {
        let mut stored = body.clone();
        let network = self
            .canon_field(body, "network")?
            .unwrap_or_else(|| format!("projects/{}/global/networks/default", self.project()));
        self.expect_kind(&network, Kind::Network)?;
        stored["network"] = json!(self.link(&network));
        let direction = opt_str(body, "direction")?.unwrap_or("INGRESS").to_string();
        stored["direction"] = json!(direction);
        if body.get("priority").is_none_or(Value::is_null) {
            stored["priority"] = json!(1000);
        }
        if direction == "INGRESS"
            && str_list(body, "sourceRanges")?.is_empty()
            && str_list(body, "sourceTags")?.is_empty()
        {
            stored["sourceRanges"] = json!(["0.0.0.0/0"]);
        }
        stored["disabled"] = json!(opt_bool(body, "disabled")?);
        Ok(stored)
    }

    // ---------------------------------------------------------------- delete

    fn delete(&mut self, kind: Kind, prefix: &str, canon: &str) -> Result<Value, ApiError> {
        self.get_res(canon)?;
        let blocker = match kind {
            Kind::TargetPool => self.user_of(Kind::ForwardingRule, "target", canon),
            Kind::BackendService => self.user_of(Kind::ForwardingRule, "backendService", canon),
            Kind::HttpHealthCheck => self.user_of(Kind::TargetPool, "healthChecks", canon),
            Kind::HealthCheck => self.user_of(Kind::BackendService, "healthChecks", canon),
            Kind::InstanceGroup => self.user_of(Kind::BackendService, "backends", canon),
            Kind::Network | Kind::Subnetwork | Kind::Instance => {
                return Err(ApiError::new(405, "methodNotAllowed", "read-only fixture"));
            }
            _ => None,
        };
        if let Some(user) = blocker {
            return Err(ApiError::in_use(canon, &self.link(&user)));
        }
        let op = self.operation(prefix, "delete", canon, None);
        self.resources.remove(canon);
        self.ig_members.remove(canon);
        // Deleting an in-use address leaves the rule's IP in place (demotion to ephemeral);
        // deleting a rule frees its reservation.
        self.mark_address_users();
        Ok(op)
    }

    // ---------------------------------------------------------------- update / patch

    fn update(
        &mut self,
        kind: Kind,
        prefix: &str,
        canon: &str,
        body: &Value,
        patch: bool,
    ) -> Result<Value, ApiError> {
        let current = self.get_res(canon)?.clone();
        let name = canon.rsplit('/').next().unwrap_or_default();
        let supported = match kind {
            Kind::Firewall | Kind::BackendService => true,
            Kind::HttpHealthCheck | Kind::HealthCheck => true,
            Kind::ForwardingRule => patch,
            _ => false,
        };
        if !supported {
            return Err(ApiError::new(
                405,
                "methodNotAllowed",
                format!(
                    "{} does not support {}",
                    kind.collection(),
                    if patch { "patch" } else { "update" }
                ),
            ));
        }
        let merged = if patch {
            let mut merged = strip_output_only(current.clone());
            if let (Some(target), Some(source)) = (merged.as_object_mut(), body.as_object()) {
                for (k, v) in source {
                    target.insert(k.clone(), v.clone());
                }
            }
            merged
        } else {
            body.clone()
        };
        if merged.get("name").and_then(Value::as_str) != Some(name) {
            return Err(ApiError::invalid(
                "Invalid value for field 'resource.name': the name cannot be changed",
            ));
        }
        if kind == Kind::ForwardingRule {
            // Only a few fields are patchable on a forwarding rule; the rest need re-creation.
            for (k, v) in body.as_object().into_iter().flatten() {
                let patchable = matches!(k.as_str(), "allowGlobalAccess" | "name" | "fingerprint");
                if !patchable && current.get(k) != Some(v) {
                    return Err(ApiError::invalid(format!(
                        "Invalid value for field 'resource.{k}': the field cannot be changed by \
                         patch"
                    )));
                }
            }
        }
        if matches!(kind, Kind::BackendService | Kind::ForwardingRule) {
            let wanted = merged.get("fingerprint").and_then(Value::as_str);
            let actual = current.get("fingerprint").and_then(Value::as_str);
            match wanted {
                None if kind == Kind::BackendService => {
                    return Err(ApiError::condition_not_met(
                        "Required field 'fingerprint' not specified: an up-to-date fingerprint \
                         must be provided to update the backend service",
                    ));
                }
                Some(w) if Some(w) != actual => {
                    return Err(ApiError::condition_not_met(format!(
                        "Invalid fingerprint '{w}': the resource changed since it was read \
                         (current fingerprint '{}')",
                        actual.unwrap_or_default()
                    )));
                }
                _ => {}
            }
        }
        validate::check_body(kind, &merged)?;
        let mut stored = match kind {
            Kind::Firewall => self.build_firewall(&merged)?,
            Kind::BackendService => self.build_backend_service(canon, &merged)?,
            Kind::HttpHealthCheck | Kind::HealthCheck => self.build_health_check(kind, &merged)?,
            _ => merged,
        };
        if matches!(kind, Kind::BackendService | Kind::ForwardingRule) {
            stored["fingerprint"] = json!(self.fingerprint());
        }
        let mut stored = strip_output_only(stored);
        for key in [
            "kind",
            "id",
            "selfLink",
            "creationTimestamp",
            "region",
            "zone",
        ] {
            if let Some(v) = current.get(key) {
                stored[key] = v.clone();
            }
        }
        if kind == Kind::ForwardingRule {
            for key in [
                "IPAddress",
                "network",
                "subnetwork",
                "target",
                "backendService",
            ] {
                if let Some(v) = current.get(key) {
                    stored[key] = v.clone();
                }
            }
        }
        self.resources.insert(canon.to_string(), stored);
        Ok(self.operation(prefix, if patch { "patch" } else { "update" }, canon, None))
    }

    // ---------------------------------------------------------------- actions

    fn action_instances(&self, body: &Value) -> Result<Vec<String>, ApiError> {
        let items = body
            .get("instances")
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
            .ok_or_else(|| ApiError::invalid("Required field 'instances' not specified"))?;
        items
            .iter()
            .map(|item| {
                let instance = req_str(item, "instance").map_err(|_| {
                    ApiError::invalid("Required field 'instances[].instance' not specified")
                })?;
                let canon = self.canon(instance)?;
                self.expect_kind(&canon, Kind::Instance)?;
                Ok(canon)
            })
            .collect()
    }

    fn action(
        &mut self,
        kind: Kind,
        prefix: &str,
        canon: &str,
        verb: &str,
        body: &Value,
    ) -> Result<Value, ApiError> {
        let current = self.get_res(canon)?.clone();
        match (kind, verb) {
            (Kind::TargetPool, "addInstance" | "removeInstance") => {
                let wanted = self.action_instances(body)?;
                let mut members: Vec<String> = str_list(&current, "instances")?
                    .iter()
                    .filter_map(|i| self.canon(i).ok())
                    .collect();
                for instance in wanted {
                    let present = members.contains(&instance);
                    match (verb, present) {
                        ("addInstance", false) => members.push(instance),
                        ("removeInstance", true) => members.retain(|m| *m != instance),
                        ("addInstance", true) => {
                            return Err(ApiError::invalid(format!(
                                "The instance '{instance}' is already a member of '{canon}'"
                            )));
                        }
                        _ => {
                            return Err(ApiError::invalid(format!(
                                "The instance '{instance}' is not a member of '{canon}'"
                            )));
                        }
                    }
                }
                let links: Vec<String> = members.iter().map(|m| self.link(m)).collect();
                if let Some(pool) = self.resources.get_mut(canon) {
                    pool["instances"] = json!(links);
                }
                Ok(self.operation(prefix, verb, canon, None))
            }
            (Kind::TargetPool, "addHealthCheck" | "removeHealthCheck") => {
                let items = body
                    .get("healthChecks")
                    .and_then(Value::as_array)
                    .filter(|a| !a.is_empty())
                    .ok_or_else(|| {
                        ApiError::invalid("Required field 'healthChecks' not specified")
                    })?;
                let mut hcs: Vec<String> = str_list(&current, "healthChecks")?
                    .iter()
                    .filter_map(|h| self.canon(h).ok())
                    .collect();
                for item in items {
                    let hc = self.canon(req_str(item, "healthCheck").map_err(|_| {
                        ApiError::invalid(
                            "Required field 'healthChecks[].healthCheck' not specified",
                        )
                    })?)?;
                    if verb == "addHealthCheck" {
                        self.expect_kind(&hc, Kind::HttpHealthCheck)?;
                        if !hcs.contains(&hc) {
                            hcs.push(hc);
                        }
                    } else {
                        hcs.retain(|h| *h != hc);
                    }
                }
                if hcs.len() > 1 {
                    return Err(ApiError::invalid(
                        "A target pool may have at most one health check",
                    ));
                }
                let links: Vec<String> = hcs.iter().map(|h| self.link(h)).collect();
                if let Some(pool) = self.resources.get_mut(canon) {
                    pool["healthChecks"] = json!(links);
                }
                Ok(self.operation(prefix, verb, canon, None))
            }
            (Kind::InstanceGroup, "addInstances" | "removeInstances") => {
                let wanted = self.action_instances(body)?;
                let zone_prefix = format!("{prefix}/instances/");
                let mut members = self.ig_members.get(canon).cloned().unwrap_or_default();
                for instance in wanted {
                    if !instance.starts_with(&zone_prefix) {
                        return Err(ApiError::invalid(format!(
                            "The instance '{instance}' is not in the instance group's zone"
                        )));
                    }
                    if verb == "addInstances" {
                        if !members.insert(instance.clone()) {
                            return Err(ApiError::new(
                                400,
                                "memberAlreadyExists",
                                format!(
                                    "The instance '{instance}' is already a member of '{canon}'"
                                ),
                            ));
                        }
                        if let Some(bs) = self.user_of(Kind::BackendService, "backends", canon) {
                            self.check_single_lb_group(
                                &bs,
                                &[canon.to_string()],
                                Some((canon, &instance)),
                            )?;
                        }
                    } else if !members.remove(&instance) {
                        return Err(ApiError::new(
                            400,
                            "memberNotFound",
                            format!("The instance '{instance}' is not a member of '{canon}'"),
                        ));
                    }
                }
                let size = members.len();
                self.ig_members.insert(canon.to_string(), members);
                let fingerprint = self.fingerprint();
                if let Some(group) = self.resources.get_mut(canon) {
                    group["size"] = json!(size);
                    group["fingerprint"] = json!(fingerprint);
                }
                Ok(self.operation(prefix, verb, canon, None))
            }
            (Kind::InstanceGroup, "listInstances") => {
                let items: Vec<Value> = self
                    .ig_members
                    .get(canon)
                    .into_iter()
                    .flatten()
                    .map(|m| json!({"instance": self.link(m), "status": "RUNNING"}))
                    .collect();
                Ok(json!({"kind": "compute#instanceGroupsListInstances", "items": items}))
            }
            _ => Err(ApiError::new(
                405,
                "methodNotAllowed",
                format!("{} does not support '{verb}'", kind.collection()),
            )),
        }
    }

    // ---------------------------------------------------------------- fixtures

    /// Adds (or replaces) a VM fixture.
    pub fn add_instance(&mut self, zone: &str, name: &str, tags: &[String], ip: Option<Ipv4Addr>) {
        let region = self.topo.zones.get(zone).cloned().unwrap_or_default();
        let subnet = self
            .topo
            .subnetworks
            .iter()
            .find(|(r, ..)| *r == region)
            .map(|(_, name, _, cidr)| (name.clone(), *cidr));
        let ip = ip.or_else(|| {
            subnet
                .as_ref()
                .and_then(|(_, cidr)| self.allocate(*cidr, 1).ok())
        });
        let subnet_link = subnet.map(|(name, _)| {
            self.link(&format!(
                "projects/{}/regions/{region}/subnetworks/{name}",
                self.project()
            ))
        });
        let canon = format!("projects/{}/zones/{zone}/instances/{name}", self.project());
        let network = self.link(&format!(
            "projects/{}/global/networks/{}",
            self.project(),
            self.topo.networks.first().map_or("default", String::as_str)
        ));
        let body = json!({
            "name": name,
            "machineType": self.link(&format!("projects/{}/zones/{zone}/machineTypes/e2-standard-2", self.project())),
            "status": "RUNNING",
            "tags": {"items": tags},
            "networkInterfaces": [{"network": network, "subnetwork": subnet_link,
                "networkIP": ip.map(|i| i.to_string())}],
        });
        self.put_new(Kind::Instance, &canon, body);
    }

    /// Removes a VM fixture (and its instance-group memberships, as GCE does).
    pub fn remove_instance(&mut self, zone: &str, name: &str) {
        let canon = format!("projects/{}/zones/{zone}/instances/{name}", self.project());
        self.resources.remove(&canon);
        for members in self.ig_members.values_mut() {
            members.remove(&canon);
        }
    }

    /// Resources of one collection (all scopes), as stored.
    pub fn collection(&self, collection: &str) -> Vec<Value> {
        self.resources
            .iter()
            .filter(|(path, _)| path.split('/').rev().nth(1) == Some(collection))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Instance-group members (canonical instance paths) by group name.
    pub fn group_members(&self, zone: &str, group: &str) -> Option<Vec<String>> {
        let canon = format!(
            "projects/{}/zones/{zone}/instanceGroups/{group}",
            self.project()
        );
        self.ig_members
            .get(&canon)
            .map(|m| m.iter().cloned().collect())
    }
}

fn strip_output_only(mut value: Value) -> Value {
    if let Some(object) = value.as_object_mut() {
        for key in [
            "kind",
            "id",
            "selfLink",
            "creationTimestamp",
            "status",
            "users",
            "selfLinkWithId",
        ] {
            object.remove(key);
        }
    }
    value
}

fn http_reason(status: u16) -> &'static str {
    match status {
        400 => "BAD REQUEST",
        403 => "FORBIDDEN",
        404 => "NOT FOUND",
        409 => "CONFLICT",
        412 => "PRECONDITION FAILED",
        429 => "TOO MANY REQUESTS",
        _ => "ERROR",
    }
}

/// Now as RFC 3339 UTC with milliseconds (GCE's timestamp shape).
fn rfc3339_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil-from-days (Howard Hinnant's algorithm), for dates after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}-00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        now.subsec_millis()
    )
}

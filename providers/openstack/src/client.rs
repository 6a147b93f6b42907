//! A thin typed client for the ~20 Keystone, Octavia and Neutron calls kube-lb makes, over
//! `reqwest` (already in the build for the other providers).
//!
//! Keystone: a project-scoped token (password or application credential) is obtained on the
//! first call, cached with the catalog's Octavia and Neutron endpoints, and renewed a margin
//! before `expires_at`. A 401 drops the cached token, re-authenticates and repeats the call
//! once; a second 401 is an error (the credentials are refused).
//!
//! Every request goes through [`CloudApi`]: rate limited per service (`keystone`, `octavia`,
//! `neutron`), retried in place when transient, counted per operation. A create (POST) is
//! the exception: Octavia and Neutron take no idempotency token, so after a failure that may
//! have taken effect (a 5xx, no answer) the client first looks for what the call would have
//! made and repeats the POST only when nothing is there.

use std::time::{Duration, SystemTime};

use kube_lb_provider_core::{CallKind, CloudApi};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::config::{Credentials, GlobalConfig};
use crate::error::OpenStackError;
use crate::model::{
    FloatingIp, HealthMonitor, Listener, LoadBalancer, Member, Network, Pool, Port, SecurityGroup,
    SecurityGroupRule, Subnet,
};

/// Which API a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    Octavia,
    Neutron,
}

impl Service {
    fn family(self) -> &'static str {
        match self {
            Service::Octavia => "octavia",
            Service::Neutron => "neutron",
        }
    }
}

/// A token and the endpoints of its catalog.
#[derive(Debug, Clone)]
struct Session {
    token: String,
    /// When to get a new token: a margin before `expires_at`.
    renew_at: SystemTime,
    /// Octavia's versioned root (`…/load-balancer/v2`).
    octavia: String,
    /// Neutron's versioned root (`…/networking/v2.0`).
    neutron: String,
}

/// How many times a create is sent when its answers may have been lost and nothing it would
/// have made is found (the in-place retries other calls get, counted the same way).
const CREATE_ATTEMPTS: u32 = 3;

/// Keystone, Octavia and Neutron behind one token.
#[derive(Debug)]
pub struct OpenStackClient {
    http: reqwest::Client,
    global: GlobalConfig,
    api: CloudApi,
    session: Mutex<Option<Session>>,
    renew_before: Duration,
}

/// Appends the API version to a catalog endpoint unless it already carries one (catalogs
/// register Octavia and Neutron unversioned, e.g. `https://cloud/load-balancer`).
fn versioned(endpoint: &str, version: &str) -> String {
    let root = endpoint.trim_end_matches('/');
    if root.ends_with(&format!("/{version}")) || (version == "v2" && root.ends_with("/v2.0")) {
        root.to_string()
    } else {
        format!("{root}/{version}")
    }
}

/// The project-scoped token request body for `credentials` (pure).
pub fn token_request(credentials: &Credentials) -> Value {
    match credentials {
        Credentials::Password {
            user,
            password,
            project,
        } => {
            let mut user = user.body();
            user["password"] = json!(password);
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": user}},
                "scope": {"project": project.body()}}})
        }
        Credentials::ApplicationCredential {
            id,
            name,
            user,
            secret,
        } => {
            let mut credential = json!({"secret": secret});
            match (id, name) {
                (Some(id), _) => credential["id"] = json!(id),
                (None, name) => {
                    credential["name"] = json!(name);
                    if let Some(user) = user {
                        credential["user"] = user.body();
                    }
                }
            }
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": credential}}})
        }
    }
}

/// The public endpoint of `kind` in a token's catalog, in `region` when one is configured.
pub fn catalog_endpoint(token: &Value, kind: &str, region: Option<&str>) -> Option<String> {
    token["token"]["catalog"]
        .as_array()?
        .iter()
        .filter(|service| service["type"] == kind)
        .flat_map(|service| service["endpoints"].as_array().into_iter().flatten())
        .find(|endpoint| {
            endpoint["interface"] == "public"
                && region.is_none_or(|r| endpoint["region_id"] == r || endpoint["region"] == r)
        })
        .and_then(|endpoint| endpoint["url"].as_str().map(str::to_string))
}

impl OpenStackClient {
    /// A client for the cloud `global` describes. Nothing is called until the first request.
    pub fn new(
        global: GlobalConfig,
        api: CloudApi,
        request_timeout: Duration,
    ) -> Result<Self, OpenStackError> {
        let mut builder = reqwest::Client::builder().timeout(request_timeout);
        if let Some(path) = &global.ca_file {
            let unexpected = |message: String| OpenStackError::Unexpected {
                operation: "config:ca-file",
                message,
            };
            let pem =
                std::fs::read(path).map_err(|e| unexpected(format!("reading {path}: {e}")))?;
            // A bundle may hold several certificates; one holding none is a mistake that
            // would otherwise only show as TLS failures later.
            let certificates = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| unexpected(format!("{path} is not a PEM certificate bundle: {e}")))?;
            if certificates.is_empty()
                || !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----")
            {
                return Err(unexpected(format!(
                    "{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
                )));
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder
            .build()
            .map_err(|source| OpenStackError::Transport {
                operation: "config:http-client",
                source,
            })?;
        Ok(OpenStackClient {
            http,
            global,
            api,
            session: Mutex::new(None),
            renew_before: Duration::from_secs(300),
        })
    }

    /// The call counter and limits this client uses.
    pub fn api(&self) -> &CloudApi {
        &self.api
    }

    /// A valid session: the cached one unless it expires within the renewal margin.
    async fn session(&self) -> Result<Session, OpenStackError> {
        let mut cached = self.session.lock().await;
        if let Some(session) = cached.as_ref()
            && SystemTime::now() < session.renew_at
        {
            return Ok(session.clone());
        }
        let session = self.authenticate().await?;
        *cached = Some(session.clone());
        Ok(session)
    }

    async fn invalidate(&self, token: &str) {
        let mut cached = self.session.lock().await;
        if cached.as_ref().is_some_and(|s| s.token == token) {
            *cached = None;
        }
    }

    async fn authenticate(&self) -> Result<Session, OpenStackError> {
        const OPERATION: &str = "keystone:IssueToken";
        let url = format!("{}/auth/tokens", self.global.auth_url.trim_end_matches('/'));
        let body = token_request(&self.global.credentials);
        let (token, document) = self
            .api
            .call_as(
                "keystone",
                OPERATION,
                CallKind::Read,
                OpenStackError::again,
                || async {
                    let response =
                        self.http
                            .post(&url)
                            .json(&body)
                            .send()
                            .await
                            .map_err(|source| OpenStackError::Transport {
                                operation: OPERATION,
                                source,
                            })?;
                    let status = response.status();
                    let wait = retry_after(response.headers());
                    let token = response
                        .headers()
                        .get("x-subject-token")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let text =
                        response
                            .text()
                            .await
                            .map_err(|source| OpenStackError::Transport {
                                operation: OPERATION,
                                source,
                            })?;
                    if !status.is_success() {
                        return Err(api_error(OPERATION, status.as_u16(), &text, wait));
                    }
                    let token = token.ok_or_else(|| OpenStackError::Unexpected {
                        operation: OPERATION,
                        message: "Keystone answered without X-Subject-Token".into(),
                    })?;
                    let document: Value =
                        serde_json::from_str(&text).map_err(|e| OpenStackError::Unexpected {
                            operation: OPERATION,
                            message: format!("token document: {e}"),
                        })?;
                    Ok((token, document))
                },
            )
            .await?;
        let expires = document["token"]["expires_at"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
            .ok_or_else(|| OpenStackError::Unexpected {
                operation: OPERATION,
                message: "token document without a readable expires_at".into(),
            })?;
        let region = self.global.region.as_deref();
        let endpoint = |kind: &str| {
            catalog_endpoint(&document, kind, region).ok_or_else(|| OpenStackError::Unexpected {
                operation: OPERATION,
                message: format!(
                    "the catalog has no public {kind} endpoint{}",
                    region
                        .map(|r| format!(" in region {r}"))
                        .unwrap_or_default()
                ),
            })
        };
        // Renew a margin before expiry; for short-lived tokens, at half their remaining life.
        let life = expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        let session = Session {
            token,
            renew_at: expires - self.renew_before.min(life / 2),
            octavia: versioned(&endpoint("load-balancer")?, "v2"),
            neutron: versioned(&endpoint("network")?, "v2.0"),
        };
        tracing::debug!(octavia = %session.octavia, neutron = %session.neutron, "authenticated to Keystone");
        Ok(session)
    }

    /// One request; a 401 re-authenticates once and repeats it.
    async fn call(
        &self,
        service: Service,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Option<Value>, OpenStackError> {
        match self
            .call_once(service, operation, method.clone(), path, query, body)
            .await
        {
            Err((error, Some(token))) if error.status() == Some(401) => {
                tracing::info!(operation, "token refused; authenticating again");
                self.invalidate(&token).await;
                self.call_once(service, operation, method, path, query, body)
                    .await
                    .map_err(|(error, _)| error)
            }
            other => other.map_err(|(error, _)| error),
        }
    }

    /// One request through [`CloudApi`]; on failure, also the token it used.
    async fn call_once(
        &self,
        service: Service,
        operation: &'static str,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Option<Value>, (OpenStackError, Option<String>)> {
        let session = self.session().await.map_err(|e| (e, None))?;
        let root = match service {
            Service::Octavia => &session.octavia,
            Service::Neutron => &session.neutron,
        };
        let url = format!("{root}/{path}");
        let kind = if method == Method::GET {
            CallKind::Read
        } else {
            CallKind::Mutate
        };
        let api = &self.api;
        // Every POST here creates something, and Octavia and Neutron take no idempotency
        // token: repeating one whose answer was lost would make a second object. Only an
        // answer proving the request was refused is repeated in place; the caller looks for
        // what a maybe-lost create made before repeating it (see `create`).
        let creates = method == Method::POST;
        let decide = |error: &OpenStackError| {
            if creates && error.may_have_taken_effect() {
                kube_lb_provider_core::Again::No
            } else {
                error.again()
            }
        };
        self.api
            .call_as(service.family(), operation, kind, decide, || async {
                let mut request = self
                    .http
                    .request(method.clone(), &url)
                    .header("x-auth-token", &session.token)
                    .header("accept", "application/json")
                    .query(query);
                if let Some(body) = body {
                    request = request.json(body);
                }
                let response = request
                    .send()
                    .await
                    .map_err(|source| OpenStackError::Transport { operation, source })?;
                let status = response.status();
                let wait = retry_after(response.headers());
                let text = response
                    .text()
                    .await
                    .map_err(|source| OpenStackError::Transport { operation, source })?;
                if !status.is_success() {
                    let error = api_error(operation, status.as_u16(), &text, wait);
                    if error.is_throttled() {
                        api.record_throttled(operation);
                    }
                    return Err(error);
                }
                if text.trim().is_empty() {
                    return Ok(None);
                }
                serde_json::from_str(&text)
                    .map(Some)
                    .map_err(|e| OpenStackError::Unexpected {
                        operation,
                        message: format!("answer is not JSON: {e}"),
                    })
            })
            .await
            .map_err(|e| (e, Some(session.token.clone())))
    }

    async fn get<T: DeserializeOwned>(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
        query: &[(&str, &str)],
        key: &str,
    ) -> Result<T, OpenStackError> {
        let document = self
            .call(service, operation, Method::GET, path, query, None)
            .await?;
        decode(operation, document, key)
    }

    /// One object; `None` when it does not exist (404).
    async fn get_optional<T: DeserializeOwned>(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
        key: &str,
    ) -> Result<Option<T>, OpenStackError> {
        match self.get(service, operation, path, &[], key).await {
            Err(error) if error.is_not_found() => Ok(None),
            other => other.map(Some),
        }
    }

    async fn send<T: DeserializeOwned>(
        &self,
        service: Service,
        operation: &'static str,
        method: Method,
        path: &str,
        body: &Value,
        key: &str,
    ) -> Result<T, OpenStackError> {
        let document = self
            .call(service, operation, method, path, &[], Some(body))
            .await?;
        decode(operation, document, key)
    }

    /// POSTs `body` to create an object (answer under `key`). When the call fails in a way
    /// that may have taken effect (a 5xx, no answer), `made` looks for the object a lost
    /// answer would have announced; it is returned when found, and only when it is not is the
    /// POST repeated, so a lost answer never makes a second object.
    async fn create<T, F, Fut>(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
        body: &Value,
        key: &str,
        made: F,
    ) -> Result<T, OpenStackError>
    where
        T: DeserializeOwned,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, OpenStackError>>,
    {
        let mut attempt = 1;
        loop {
            match self
                .send(service, operation, Method::POST, path, body, key)
                .await
            {
                Err(error) if error.may_have_taken_effect() && attempt < CREATE_ATTEMPTS => {
                    tracing::info!(operation, %error, attempt, "create failed without a clear refusal; looking for what it may have made before repeating it");
                    if let Some(found) = made().await? {
                        tracing::info!(
                            operation,
                            "the create had taken effect; using what it made"
                        );
                        return Ok(found);
                    }
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn delete(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<(), OpenStackError> {
        self.call(service, operation, Method::DELETE, path, query, None)
            .await
            .map(drop)
    }

    /// Deletes an object; one already gone (404) is not an error.
    async fn delete_existing(
        &self,
        service: Service,
        operation: &'static str,
        path: &str,
    ) -> Result<(), OpenStackError> {
        match self.delete(service, operation, path, &[]).await {
            Err(error) if error.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Load balancers named `name`.
    pub async fn load_balancers_named(
        &self,
        name: &str,
    ) -> Result<Vec<LoadBalancer>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListLoadBalancers",
            "lbaas/loadbalancers",
            &[("name", name)],
            "loadbalancers",
        )
        .await
    }

    /// Every load balancer of the project.
    pub async fn load_balancers(&self) -> Result<Vec<LoadBalancer>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListLoadBalancers",
            "lbaas/loadbalancers",
            &[],
            "loadbalancers",
        )
        .await
    }

    /// One load balancer; `None` when it does not exist.
    pub async fn load_balancer(&self, id: &str) -> Result<Option<LoadBalancer>, OpenStackError> {
        self.get_optional(
            Service::Octavia,
            "octavia:GetLoadBalancer",
            &format!("lbaas/loadbalancers/{id}"),
            "loadbalancer",
        )
        .await
    }

    /// Creates a load balancer (fully populated when `body` carries listeners).
    /// A create whose answer was lost is found by name, description and tags (see `create`).
    pub async fn create_load_balancer(&self, body: &Value) -> Result<LoadBalancer, OpenStackError> {
        let name = text(body, "name");
        let made = || {
            found_in(self.load_balancers_named(name), |lb: &LoadBalancer| {
                lb.provisioning_status != "DELETED"
                    && lb.provisioning_status != "PENDING_DELETE"
                    && lb.description == text(body, "description")
                    && strings(body, "tags").iter().all(|t| lb.tags.contains(t))
            })
        };
        self.create(
            Service::Octavia,
            "octavia:CreateLoadBalancer",
            "lbaas/loadbalancers",
            &json!({"loadbalancer": body}),
            "loadbalancer",
            made,
        )
        .await
    }

    /// Changes a load balancer's name, description or tags.
    pub async fn update_load_balancer(
        &self,
        id: &str,
        body: &Value,
    ) -> Result<LoadBalancer, OpenStackError> {
        self.send(
            Service::Octavia,
            "octavia:UpdateLoadBalancer",
            Method::PUT,
            &format!("lbaas/loadbalancers/{id}"),
            &json!({"loadbalancer": body}),
            "loadbalancer",
        )
        .await
    }

    /// Deletes a load balancer with everything under it.
    pub async fn delete_load_balancer(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(
            Service::Octavia,
            "octavia:DeleteLoadBalancer",
            &format!("lbaas/loadbalancers/{id}"),
            &[("cascade", "true")],
        )
        .await
    }

    /// The listeners of a load balancer.
    pub async fn listeners(&self, lb_id: &str) -> Result<Vec<Listener>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListListeners",
            "lbaas/listeners",
            &[("loadbalancer_id", lb_id)],
            "listeners",
        )
        .await
    }

    /// Listeners matching `filters` (`tags`, `name`, ...), across load balancers.
    pub async fn listeners_matching(
        &self,
        filters: &[(&str, &str)],
    ) -> Result<Vec<Listener>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListListeners",
            "lbaas/listeners",
            filters,
            "listeners",
        )
        .await
    }

    /// Creates a listener.
    /// A create whose answer was lost is found by load balancer, name and port.
    pub async fn create_listener(&self, body: &Value) -> Result<Listener, OpenStackError> {
        let made = || {
            found_in(
                self.listeners(text(body, "loadbalancer_id")),
                |l: &Listener| {
                    l.name == text(body, "name")
                        && Some(u64::from(l.protocol_port)) == body["protocol_port"].as_u64()
                },
            )
        };
        self.create(
            Service::Octavia,
            "octavia:CreateListener",
            "lbaas/listeners",
            &json!({"listener": body}),
            "listener",
            made,
        )
        .await
    }

    /// Changes a listener.
    pub async fn update_listener(
        &self,
        id: &str,
        body: &Value,
    ) -> Result<Listener, OpenStackError> {
        self.send(
            Service::Octavia,
            "octavia:UpdateListener",
            Method::PUT,
            &format!("lbaas/listeners/{id}"),
            &json!({"listener": body}),
            "listener",
        )
        .await
    }

    /// Deletes a listener.
    pub async fn delete_listener(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(
            Service::Octavia,
            "octavia:DeleteListener",
            &format!("lbaas/listeners/{id}"),
            &[],
        )
        .await
    }

    /// The pools of a load balancer.
    pub async fn pools(&self, lb_id: &str) -> Result<Vec<Pool>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListPools",
            "lbaas/pools",
            &[("loadbalancer_id", lb_id)],
            "pools",
        )
        .await
    }

    /// Every pool of the project (each names its load balancer and member ids).
    pub async fn all_pools(&self) -> Result<Vec<Pool>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListPools",
            "lbaas/pools",
            &[],
            "pools",
        )
        .await
    }

    /// Every health monitor of the project.
    pub async fn health_monitors(&self) -> Result<Vec<HealthMonitor>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListHealthMonitors",
            "lbaas/healthmonitors",
            &[],
            "healthmonitors",
        )
        .await
    }

    /// Creates a pool (members and monitor follow in their own calls).
    /// A create whose answer was lost is found by name and listener (or load balancer).
    pub async fn create_pool(&self, body: &Value) -> Result<Pool, OpenStackError> {
        let parent = |refs: &[crate::model::IdRef], key: &str| {
            body[key]
                .as_str()
                .is_none_or(|id| refs.iter().any(|r| r.id == id))
        };
        let made = || {
            found_in(self.all_pools(), |p: &Pool| {
                p.name == text(body, "name")
                    && parent(&p.listeners, "listener_id")
                    && parent(&p.loadbalancers, "loadbalancer_id")
            })
        };
        self.create(
            Service::Octavia,
            "octavia:CreatePool",
            "lbaas/pools",
            &json!({"pool": body}),
            "pool",
            made,
        )
        .await
    }

    /// Changes a pool.
    pub async fn update_pool(&self, id: &str, body: &Value) -> Result<Pool, OpenStackError> {
        self.send(
            Service::Octavia,
            "octavia:UpdatePool",
            Method::PUT,
            &format!("lbaas/pools/{id}"),
            &json!({"pool": body}),
            "pool",
        )
        .await
    }

    /// Deletes a pool (its members and monitor go with it).
    pub async fn delete_pool(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(
            Service::Octavia,
            "octavia:DeletePool",
            &format!("lbaas/pools/{id}"),
            &[],
        )
        .await
    }

    /// The members of a pool.
    pub async fn members(&self, pool_id: &str) -> Result<Vec<Member>, OpenStackError> {
        self.get(
            Service::Octavia,
            "octavia:ListMembers",
            &format!("lbaas/pools/{pool_id}/members"),
            &[],
            "members",
        )
        .await
    }

    /// Replaces a pool's members with `members` in one batch call.
    pub async fn replace_members(
        &self,
        pool_id: &str,
        members: &[Value],
    ) -> Result<(), OpenStackError> {
        let body = json!({"members": members});
        self.call(
            Service::Octavia,
            "octavia:BatchUpdateMembers",
            Method::PUT,
            &format!("lbaas/pools/{pool_id}/members"),
            &[],
            Some(&body),
        )
        .await
        .map(drop)
    }

    /// One health monitor; `None` when it does not exist.
    pub async fn health_monitor(&self, id: &str) -> Result<Option<HealthMonitor>, OpenStackError> {
        self.get_optional(
            Service::Octavia,
            "octavia:GetHealthMonitor",
            &format!("lbaas/healthmonitors/{id}"),
            "healthmonitor",
        )
        .await
    }

    /// Creates a health monitor.
    pub async fn create_health_monitor(
        &self,
        body: &Value,
    ) -> Result<HealthMonitor, OpenStackError> {
        // A pool has at most one monitor: the one on the pool is what a lost create made.
        let made = || async move {
            let pool_id = text(body, "pool_id");
            let monitor = self
                .all_pools()
                .await?
                .into_iter()
                .find(|p| p.id == pool_id)
                .and_then(|p| p.healthmonitor_id);
            match monitor {
                Some(id) => self.health_monitor(&id).await,
                None => Ok(None),
            }
        };
        self.create(
            Service::Octavia,
            "octavia:CreateHealthMonitor",
            "lbaas/healthmonitors",
            &json!({"healthmonitor": body}),
            "healthmonitor",
            made,
        )
        .await
    }

    /// Changes a health monitor.
    pub async fn update_health_monitor(
        &self,
        id: &str,
        body: &Value,
    ) -> Result<HealthMonitor, OpenStackError> {
        self.send(
            Service::Octavia,
            "octavia:UpdateHealthMonitor",
            Method::PUT,
            &format!("lbaas/healthmonitors/{id}"),
            &json!({"healthmonitor": body}),
            "healthmonitor",
        )
        .await
    }

    /// Deletes a health monitor.
    pub async fn delete_health_monitor(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete(
            Service::Octavia,
            "octavia:DeleteHealthMonitor",
            &format!("lbaas/healthmonitors/{id}"),
            &[],
        )
        .await
    }

    /// Floating IPs matching `filters` (`port_id`, `floating_ip_address`, `description`).
    pub async fn floating_ips(
        &self,
        filters: &[(&str, &str)],
    ) -> Result<Vec<FloatingIp>, OpenStackError> {
        self.get(
            Service::Neutron,
            "neutron:ListFloatingIps",
            "floatingips",
            filters,
            "floatingips",
        )
        .await
    }

    /// Allocates a floating IP.
    /// A create whose answer was lost is found by its port (or requested address) and
    /// description.
    pub async fn create_floating_ip(&self, body: &Value) -> Result<FloatingIp, OpenStackError> {
        let made = || async move {
            let filter = match (
                body["port_id"].as_str(),
                body["floating_ip_address"].as_str(),
            ) {
                (Some(port), _) => ("port_id", port),
                (None, Some(address)) => ("floating_ip_address", address),
                (None, None) => ("description", text(body, "description")),
            };
            found_in(self.floating_ips(&[filter]), |fip: &FloatingIp| {
                fip.description == text(body, "description")
            })
            .await
        };
        self.create(
            Service::Neutron,
            "neutron:CreateFloatingIp",
            "floatingips",
            &json!({"floatingip": body}),
            "floatingip",
            made,
        )
        .await
    }

    /// Associates a floating IP with a port (`None`: dissociates it).
    pub async fn associate_floating_ip(
        &self,
        id: &str,
        port_id: Option<&str>,
    ) -> Result<FloatingIp, OpenStackError> {
        self.update_floating_ip(id, &json!({"port_id": port_id}))
            .await
    }

    /// Changes a floating IP's `port_id` and/or `description` (`body` holds the fields).
    pub async fn update_floating_ip(
        &self,
        id: &str,
        body: &Value,
    ) -> Result<FloatingIp, OpenStackError> {
        self.send(
            Service::Neutron,
            "neutron:UpdateFloatingIp",
            Method::PUT,
            &format!("floatingips/{id}"),
            &json!({"floatingip": body}),
            "floatingip",
        )
        .await
    }

    /// Releases a floating IP; one already gone is not an error.
    pub async fn delete_floating_ip(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete_existing(
            Service::Neutron,
            "neutron:DeleteFloatingIp",
            &format!("floatingips/{id}"),
        )
        .await
    }

    /// Subnets matching `filters` (`network_id`, `tags`, ...).
    pub async fn subnets(&self, filters: &[(&str, &str)]) -> Result<Vec<Subnet>, OpenStackError> {
        self.get(
            Service::Neutron,
            "neutron:ListSubnets",
            "subnets",
            filters,
            "subnets",
        )
        .await
    }

    /// One subnet; `None` when it does not exist.
    pub async fn subnet(&self, id: &str) -> Result<Option<Subnet>, OpenStackError> {
        self.get_optional(
            Service::Neutron,
            "neutron:GetSubnet",
            &format!("subnets/{id}"),
            "subnet",
        )
        .await
    }

    /// Ports matching `filters` (`network_id`, `security_groups`, ...).
    pub async fn ports(&self, filters: &[(&str, &str)]) -> Result<Vec<Port>, OpenStackError> {
        self.get(
            Service::Neutron,
            "neutron:ListPorts",
            "ports",
            filters,
            "ports",
        )
        .await
    }

    /// Sets a port's security groups to `groups` (the whole list).
    pub async fn set_port_security_groups(
        &self,
        port_id: &str,
        groups: &[String],
    ) -> Result<Port, OpenStackError> {
        self.send(
            Service::Neutron,
            "neutron:UpdatePort",
            Method::PUT,
            &format!("ports/{port_id}"),
            &json!({"port": {"security_groups": groups}}),
            "port",
        )
        .await
    }

    /// Security groups matching `filters` (`name`, ...), each with its rules.
    pub async fn security_groups(
        &self,
        filters: &[(&str, &str)],
    ) -> Result<Vec<SecurityGroup>, OpenStackError> {
        self.get(
            Service::Neutron,
            "neutron:ListSecurityGroups",
            "security-groups",
            filters,
            "security_groups",
        )
        .await
    }

    /// Creates a security group.
    /// A create whose answer was lost is found by name and description.
    pub async fn create_security_group(
        &self,
        body: &Value,
    ) -> Result<SecurityGroup, OpenStackError> {
        let made = || async move {
            found_in(
                self.security_groups(&[("name", text(body, "name"))]),
                |group: &SecurityGroup| group.description == text(body, "description"),
            )
            .await
        };
        self.create(
            Service::Neutron,
            "neutron:CreateSecurityGroup",
            "security-groups",
            &json!({"security_group": body}),
            "security_group",
            made,
        )
        .await
    }

    /// Deletes a security group; one already gone is not an error.
    pub async fn delete_security_group(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete_existing(
            Service::Neutron,
            "neutron:DeleteSecurityGroup",
            &format!("security-groups/{id}"),
        )
        .await
    }

    /// Adds a rule to a security group. A rule that already exists (Neutron's 409
    /// `SecurityGroupRuleExists`, or found after a lost answer) is what was asked for.
    pub async fn create_security_group_rule(&self, body: &Value) -> Result<(), OpenStackError> {
        let made = || async move {
            let group = text(body, "security_group_id");
            let same = |rule: &SecurityGroupRule| {
                rule.direction == text(body, "direction")
                    && rule.ethertype == text(body, "ethertype")
                    && rule.protocol.as_deref() == body["protocol"].as_str()
                    && rule.port_range_min.map(u64::from) == body["port_range_min"].as_u64()
                    && rule.port_range_max.map(u64::from) == body["port_range_max"].as_u64()
                    && rule.remote_ip_prefix.as_deref() == body["remote_ip_prefix"].as_str()
            };
            found_in(
                self.get::<Vec<SecurityGroupRule>>(
                    Service::Neutron,
                    "neutron:ListSecurityGroupRules",
                    "security-group-rules",
                    &[("security_group_id", group)],
                    "security_group_rules",
                ),
                same,
            )
            .await
        };
        match self
            .create(
                Service::Neutron,
                "neutron:CreateSecurityGroupRule",
                "security-group-rules",
                &json!({"security_group_rule": body}),
                "security_group_rule",
                made,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if error.is_neutron("SecurityGroupRuleExists") => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Deletes a security group rule; one already gone is not an error.
    pub async fn delete_security_group_rule(&self, id: &str) -> Result<(), OpenStackError> {
        self.delete_existing(
            Service::Neutron,
            "neutron:DeleteSecurityGroupRule",
            &format!("security-group-rules/{id}"),
        )
        .await
    }

    /// External (`router:external`) networks.
    pub async fn external_networks(&self) -> Result<Vec<Network>, OpenStackError> {
        self.get(
            Service::Neutron,
            "neutron:ListNetworks",
            "networks",
            &[("router:external", "true")],
            "networks",
        )
        .await
    }
}

/// The first item of `listing` that `wanted` accepts: how a create whose answer may have been
/// lost looks for what it made.
async fn found_in<T>(
    listing: impl std::future::Future<Output = Result<Vec<T>, OpenStackError>>,
    wanted: impl Fn(&T) -> bool,
) -> Result<Option<T>, OpenStackError> {
    Ok(listing.await?.into_iter().find(|item| wanted(item)))
}

/// Extracts `document[key]` as `T`.
/// A string field of a request body (`""` when absent).
fn text<'a>(body: &'a Value, key: &str) -> &'a str {
    body[key].as_str().unwrap_or_default()
}

/// A list-of-strings field of a request body.
fn strings(body: &Value, key: &str) -> Vec<String> {
    body[key]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn decode<T: DeserializeOwned>(
    operation: &'static str,
    document: Option<Value>,
    key: &str,
) -> Result<T, OpenStackError> {
    let mut document = document.ok_or_else(|| OpenStackError::Unexpected {
        operation,
        message: "empty answer".into(),
    })?;
    // `get_mut`, not indexing: an answer that is not an object must be an error, not a panic.
    let field = document.get_mut(key).map(Value::take).unwrap_or_default();
    serde_json::from_value(field).map_err(|e| OpenStackError::Unexpected {
        operation,
        message: format!("answer's {key:?}: {e}"),
    })
}

/// The service's own words from an error body: Octavia `faultstring`, Neutron
/// `NeutronError.message` (with its type), Keystone `error.message`; else the raw text.
fn api_error(
    operation: &'static str,
    status: u16,
    text: &str,
    retry_after: Option<std::time::Duration>,
) -> OpenStackError {
    let body: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let message = body["faultstring"]
        .as_str()
        .map(str::to_string)
        .or_else(|| {
            body["NeutronError"]["message"].as_str().map(|m| {
                match body["NeutronError"]["type"].as_str() {
                    Some(kind) if !kind.is_empty() => format!("{m} ({kind})"),
                    _ => m.to_string(),
                }
            })
        })
        .or_else(|| body["error"]["message"].as_str().map(str::to_string))
        .or_else(|| nested_message(&body))
        .unwrap_or_else(|| text.chars().take(300).collect());
    OpenStackError::Api {
        operation,
        status,
        message,
        retry_after,
    }
}

/// `Retry-After` in seconds (the form rate limiters in front of OpenStack APIs send); an HTTP
/// date or anything else is ignored, leaving the policy's own backoff.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<std::time::Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(std::time::Duration::from_secs)
}

/// The `message` of the one object an OpenStack fault body wraps under its kind
/// (`{"overLimit": {"code": 413, "message": …}}`, `{"itemNotFound": {…}}`): the shape rate
/// limiters and other services put in front of the API use, read as openstacksdk reads it.
fn nested_message(body: &Value) -> Option<String> {
    body.as_object()?
        .values()
        .find_map(|inner| inner.get("message")?.as_str())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_requests_follow_keystone_v3() {
        use crate::config::{Domain, Project, User};
        let cases = [
            (
                Credentials::Password {
                    user: User::Name {
                        name: "u".into(),
                        domain: Domain::Name("Default".into()),
                    },
                    password: "p".into(),
                    project: Project::Name {
                        name: "demo".into(),
                        domain: Domain::Id("d1".into()),
                    },
                },
                json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
                    {"name": "u", "domain": {"name": "Default"}, "password": "p"}}},
                    "scope": {"project": {"name": "demo", "domain": {"id": "d1"}}}}}),
            ),
            (
                Credentials::Password {
                    user: User::Id("uid".into()),
                    password: "p".into(),
                    project: Project::Id("pid".into()),
                },
                json!({"auth": {"identity": {"methods": ["password"], "password": {"user":
                    {"id": "uid", "password": "p"}}}, "scope": {"project": {"id": "pid"}}}}),
            ),
            (
                Credentials::ApplicationCredential {
                    id: Some("ac".into()),
                    name: None,
                    user: None,
                    secret: "s".into(),
                },
                json!({"auth": {"identity": {"methods": ["application_credential"],
                    "application_credential": {"id": "ac", "secret": "s"}}}}),
            ),
            (
                Credentials::ApplicationCredential {
                    id: None,
                    name: Some("ci".into()),
                    user: Some(User::Id("uid".into())),
                    secret: "s".into(),
                },
                json!({"auth": {"identity": {"methods": ["application_credential"],
                    "application_credential": {"name": "ci", "user": {"id": "uid"}, "secret": "s"}}}}),
            ),
        ];
        for (credentials, want) in cases {
            assert_eq!(token_request(&credentials), want, "{credentials:?}");
        }
    }

    #[test]
    fn catalog_endpoints_get_their_api_version() {
        let cases = [
            (
                "https://cloud/load-balancer",
                "v2",
                "https://cloud/load-balancer/v2",
            ),
            (
                "https://cloud/load-balancer/",
                "v2",
                "https://cloud/load-balancer/v2",
            ),
            ("https://cloud:9876/v2", "v2", "https://cloud:9876/v2"),
            ("https://cloud:9876/v2.0", "v2", "https://cloud:9876/v2.0"),
            ("https://cloud:9696", "v2.0", "https://cloud:9696/v2.0"),
            (
                "https://cloud:9696/v2.0/",
                "v2.0",
                "https://cloud:9696/v2.0",
            ),
        ];
        for (endpoint, version, want) in cases {
            assert_eq!(versioned(endpoint, version), want, "{endpoint}");
        }
    }

    #[test]
    fn catalog_lookup_honours_interface_and_region() {
        let token = json!({"token": {"catalog": [
            {"type": "load-balancer", "endpoints": [
                {"interface": "internal", "region_id": "R1", "url": "http://internal"},
                {"interface": "public", "region_id": "R1", "url": "http://r1"},
                {"interface": "public", "region_id": "R2", "url": "http://r2"}]}]}});
        assert_eq!(
            catalog_endpoint(&token, "load-balancer", None).as_deref(),
            Some("http://r1")
        );
        assert_eq!(
            catalog_endpoint(&token, "load-balancer", Some("R2")).as_deref(),
            Some("http://r2")
        );
        assert_eq!(catalog_endpoint(&token, "load-balancer", Some("R3")), None);
        assert_eq!(catalog_endpoint(&token, "network", None), None);
    }

    #[test]
    fn error_bodies_yield_the_services_words() {
        let cases = [
            (
                r#"{"faultcode": "Client", "faultstring": "Load Balancer x is immutable and cannot be updated.", "debuginfo": null}"#,
                "Load Balancer x is immutable and cannot be updated.",
            ),
            (
                r#"{"NeutronError": {"type": "OverQuota", "message": "Quota exceeded.", "detail": ""}}"#,
                "Quota exceeded. (OverQuota)",
            ),
            (
                r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#,
                "The request you have made requires authentication.",
            ),
            (
                r#"{"overLimit": {"code": 413, "message": "This request was rate-limited.", "retryAfter": "2"}}"#,
                "This request was rate-limited.",
            ),
            ("<html>bad gateway</html>", "<html>bad gateway</html>"),
        ];
        for (body, want) in cases {
            match api_error("op", 400, body, None) {
                OpenStackError::Api { message, .. } => assert_eq!(message, want),
                other => panic!("{other:?}"),
            }
        }
    }
}

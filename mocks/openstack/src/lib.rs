//! A stateful mock of the OpenStack APIs a load-balancer controller uses, on one loopback
//! port:
//!
//! * Keystone v3 at `/v3` (`POST /v3/auth/tokens` with password or application credential;
//!   `X-Subject-Token`, `expires_at` and a catalog pointing back at this server),
//! * Octavia v2 at `/load-balancer` (versions document, then `/load-balancer/v2/lbaas/...`),
//! * Neutron v2.0 at `/networking` (networks with `router:external`, subnets, ports, floating
//!   IPs with port association, security groups and rules, the project's quota).
//!
//! Request bodies are checked as Octavia's WSME types and Neutron's attribute maps check them
//! (an unknown or read-only attribute, a bad enum value → 400 in the service's error format),
//! and quotas are enforced as each service answers (Octavia 403, Neutron 409 `OverQuota`).
//!
//! It models what Octavia users run into: every change puts the load balancer into
//! `PENDING_CREATE`/`PENDING_UPDATE`/`PENDING_DELETE` for a configurable delay, and any change
//! under a load balancer that is not `ACTIVE` is refused with 409 ("immutable"). Tokens are
//! required and checked (401 when missing, unknown or expired). Every request is journaled and
//! faults (an error answer, a delay) can be armed per method and path.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let cloud = kube_lb_mock_openstack::MockOpenStack::builder().start().await?;
//! println!("auth-url = {}", cloud.auth_url());
//! # Ok(()) }
//! ```

mod keystone;
mod neutron;
mod octavia;
mod state;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use kube_lb_mock_support::faults;
use kube_lb_mock_support::{MockServer, Shared, lock_shared};
use serde_json::{Value, json};

pub use state::{Fault, FaultAction, JournalEntry, Quotas};

use state::{ApiError, Config, Credentials, State};

/// Keystone user accepted by default.
pub const USERNAME: &str = "kube-lb";
/// Its password.
pub const PASSWORD: &str = "kube-lb-secret";
/// The one project (tenant).
pub const PROJECT_NAME: &str = "kube-lb";
/// Its id.
pub const PROJECT_ID: &str = "8b4c3f0e2d1a4b5c9d8e7f6a5b4c3d2e";
/// User and project domain.
pub const DOMAIN: &str = "Default";
/// Region in the catalog.
pub const REGION: &str = "RegionOne";
/// Application credential accepted by default.
pub const APPLICATION_CREDENTIAL_ID: &str = "4f3e2d1c0b0a49d8a7b6c5d4e3f2a1b0";
/// Its secret.
pub const APPLICATION_CREDENTIAL_SECRET: &str = "kube-lb-app-secret";
/// The external (`router:external`) network floating IPs come from.
pub const PUBLIC_NETWORK_ID: &str = "0e100000-0000-4000-8000-0000000000e1";
/// Its subnet, `172.24.4.0/24`.
pub const PUBLIC_SUBNET_ID: &str = "0e100000-0000-4000-8000-0000000000e2";
/// The tenant network the nodes (and VIPs) live on.
pub const PRIVATE_NETWORK_ID: &str = "0e100000-0000-4000-8000-0000000000a1";
/// Its subnet, `10.0.0.0/24`.
pub const PRIVATE_SUBNET_ID: &str = "0e100000-0000-4000-8000-0000000000a2";

/// Builds a [`MockOpenStack`].
#[derive(Debug)]
pub struct MockOpenStackBuilder {
    config: Config,
    networks: Vec<(String, String, bool, String, String)>,
    server_ports: Vec<(String, String, String)>,
    listen: SocketAddr,
}

impl MockOpenStackBuilder {
    /// Adds a network with one subnet: (network id, name, `router:external`, subnet id, CIDR).
    pub fn network(
        mut self,
        id: &str,
        name: &str,
        external: bool,
        subnet_id: &str,
        cidr: &str,
    ) -> Self {
        self.networks.push((
            id.into(),
            name.into(),
            external,
            subnet_id.into(),
            cidr.into(),
        ));
        self
    }

    /// Another Keystone user (password authentication in the default domain and project).
    pub fn user(mut self, name: &str, password: &str) -> Self {
        self.config
            .credentials
            .users
            .insert(name.into(), password.into());
        self
    }

    /// Another application credential.
    pub fn application_credential(mut self, id: &str, secret: &str) -> Self {
        self.config
            .credentials
            .application_credentials
            .insert(id.into(), secret.into());
        self
    }

    /// How long issued tokens live (default one hour).
    pub fn token_ttl(mut self, ttl: Duration) -> Self {
        self.config.token_ttl = ttl;
        self
    }

    /// How long a load balancer stays `PENDING_*` after each change (default 0: the answer to
    /// the change shows `PENDING_*`, the next request sees `ACTIVE`).
    pub fn provisioning_delay(mut self, delay: Duration) -> Self {
        self.config.provisioning_delay = delay;
        self
    }

    /// Limits to enforce.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.config.quotas = quotas;
        self
    }

    /// A limit on one more resource, by its quota API name: Octavia's `listener`, `pool`,
    /// `member`, `healthmonitor` (exceeded: 403) or Neutron's `security_group`,
    /// `security_group_rule`, `port` (exceeded: 409 `OverQuota`).
    pub fn quota(mut self, resource: &str, limit: usize) -> Self {
        self.config.limits.insert(resource.into(), limit);
        self
    }

    /// A Neutron port on `network_id` with `ip_address` from the network's first subnet, owned
    /// by the server `device_id` (`compute:nova`), as a node VM has: what OCCM reads to find
    /// the subnet of a node and where managed security groups attach.
    pub fn server_port(mut self, network_id: &str, device_id: &str, ip_address: &str) -> Self {
        self.server_ports
            .push((network_id.into(), device_id.into(), ip_address.into()));
        self
    }

    /// Listen address (default `127.0.0.1:0`).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Binds the listener and serves in a background task.
    pub async fn start(self) -> std::io::Result<MockOpenStack> {
        let MockOpenStackBuilder {
            mut config,
            networks,
            server_ports,
            listen,
        } = self;
        let seed = move |url: &str| {
            config.base_url = url.to_string();
            seed_state(State::new(config), networks, server_ports)
        };
        let server = MockServer::start(listen, "openstack", seed, |shared| {
            Router::new().fallback(handle).with_state(shared)
        })
        .await?;
        Ok(MockOpenStack { server })
    }
}

/// The fixtures a new mock starts with: networks with their subnet, server ports.
fn seed_state(
    mut state: State,
    networks: Vec<(String, String, bool, String, String)>,
    server_ports: Vec<(String, String, String)>,
) -> State {
    for (id, name, external, subnet_id, cidr) in networks {
        let gateway = cidr
            .parse::<ipnet::IpNet>()
            .ok()
            .and_then(|net| net.hosts().next())
            .map(|ip| ip.to_string());
        let project = state.config.project_id.clone();
        state.store.networks.insert(
            id.clone(),
            json!({
                "id": id, "name": name, "router:external": external, "status": "ACTIVE",
                "subnets": [subnet_id], "admin_state_up": true, "shared": false, "mtu": 1500,
                "project_id": project, "tenant_id": project, "tags": [], "description": "",
                "availability_zones": ["nova"], "is_default": external,
            }),
        );
        state.store.subnets.insert(
            subnet_id.clone(),
            json!({
                "id": subnet_id, "name": format!("{name}-subnet"), "network_id": id, "cidr": cidr,
                "ip_version": 4, "gateway_ip": gateway, "enable_dhcp": !external,
                "project_id": project, "tenant_id": project, "tags": [], "description": "",
                "allocation_pools": [], "dns_nameservers": [], "host_routes": [],
            }),
        );
    }
    for (network_id, device_id, ip_address) in server_ports {
        neutron::seed_server_port(&mut state, &network_id, &device_id, &ip_address);
    }
    state
}

/// A running mock OpenStack. Stops when dropped.
#[derive(Debug)]
pub struct MockOpenStack {
    server: MockServer<State>,
}

kube_lb_mock_support::impl_mock_handle!(MockOpenStack.server: State {
    journal: JournalEntry,
    faults: Fault,
    settle: State::settle
});
kube_lb_mock_support::impl_armed!(Fault { outcome: action: FaultAction });

impl MockOpenStack {
    /// A builder with the defaults: user [`USERNAME`]/[`PASSWORD`] in project
    /// [`PROJECT_NAME`], the application credential [`APPLICATION_CREDENTIAL_ID`], a public
    /// network [`PUBLIC_NETWORK_ID`] (`172.24.4.0/24`) and a private one
    /// [`PRIVATE_NETWORK_ID`] (`10.0.0.0/24`), one-hour tokens, no provisioning delay.
    pub fn builder() -> MockOpenStackBuilder {
        MockOpenStackBuilder {
            config: Config {
                base_url: String::new(),
                region: REGION.into(),
                project_id: PROJECT_ID.into(),
                project_name: PROJECT_NAME.into(),
                domain_name: DOMAIN.into(),
                token_ttl: Duration::from_secs(3600),
                provisioning_delay: Duration::ZERO,
                quotas: Quotas::default(),
                limits: BTreeMap::new(),
                credentials: Credentials {
                    users: BTreeMap::from([(USERNAME.into(), PASSWORD.into())]),
                    application_credentials: BTreeMap::from([(
                        APPLICATION_CREDENTIAL_ID.into(),
                        APPLICATION_CREDENTIAL_SECRET.into(),
                    )]),
                },
            },
            networks: vec![
                (
                    PUBLIC_NETWORK_ID.into(),
                    "public".into(),
                    true,
                    PUBLIC_SUBNET_ID.into(),
                    "172.24.4.0/24".into(),
                ),
                (
                    PRIVATE_NETWORK_ID.into(),
                    "private".into(),
                    false,
                    PRIVATE_SUBNET_ID.into(),
                    "10.0.0.0/24".into(),
                ),
            ],
            server_ports: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// Base URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> String {
        self.server.url().to_string()
    }

    /// The Keystone v3 endpoint, as `auth-url` in `cloud.conf`.
    pub fn auth_url(&self) -> String {
        format!("{}/v3", self.url())
    }

    /// A `cloud.conf` (cloud-provider-openstack's format) that points kube-lb at this mock:
    /// password credentials of [`USERNAME`] in [`PROJECT_NAME`], floating IPs from the public
    /// network, VIPs and members on the private subnet. What `--config-out` writes.
    pub fn cloud_conf(&self) -> String {
        format!(
            "[Global]\nauth-url = {}\nusername = {USERNAME}\npassword = {PASSWORD}\n\
             user-domain-name = {DOMAIN}\nproject-name = {PROJECT_NAME}\n\
             project-domain-name = {DOMAIN}\nregion = {REGION}\n\n\
             [LoadBalancer]\nfloating-network-id = {PUBLIC_NETWORK_ID}\n\
             subnet-id = {PRIVATE_SUBNET_ID}\n",
            self.auth_url()
        )
    }

    /// Makes the Keystone catalog and the version documents name `url` (e.g. a proxy in front
    /// of this server) instead of this server's own address, as a deployment's catalog names
    /// the public endpoints in front of its services. Tokens issued from now on carry it.
    pub fn advertise_url(&self, url: &str) {
        self.lock().config.base_url = url.trim_end_matches('/').to_string();
    }

    /// Changes the provisioning delay for changes made from now on.
    pub fn set_provisioning_delay(&self, delay: Duration) {
        self.lock().config.provisioning_delay = delay;
    }

    /// Puts a load balancer (and its children) into `status` (`PENDING_UPDATE`, `ERROR`, ...)
    /// as another actor would; a `PENDING_*` status ends after `duration`, `ERROR` stays.
    pub fn set_status(&self, lb_id: &str, status: &str, duration: Duration) {
        let mut state = self.lock();
        state.set_tree_status(lb_id, status);
        if status.starts_with("PENDING_") {
            state.begin_transition_for(lb_id, status, duration);
        } else {
            state.transitions.remove(lb_id);
        }
    }

    /// Makes every token issued so far expired (the next call with one gets 401).
    pub fn expire_tokens(&self) {
        let past = SystemTime::now() - Duration::from_secs(1);
        for token in self.lock().tokens.values_mut() {
            token.expires = past;
        }
    }

    /// How many tokens Keystone has issued.
    pub fn tokens_issued(&self) -> usize {
        self.lock().tokens.len()
    }

    /// All load balancers, as `GET /v2/lbaas/loadbalancers` shows them.
    pub fn load_balancers(&self) -> Vec<Value> {
        state::filter(self.lock().store.loadbalancers.values(), &[])
    }

    /// All listeners.
    pub fn listeners(&self) -> Vec<Value> {
        state::filter(self.lock().store.listeners.values(), &[])
    }

    /// All pools.
    pub fn pools(&self) -> Vec<Value> {
        state::filter(self.lock().store.pools.values(), &[])
    }

    /// The members of `pool_id`.
    pub fn members(&self, pool_id: &str) -> Vec<Value> {
        state::filter(
            self.lock().store.members.values(),
            &[("__pool".to_string(), pool_id.to_string())],
        )
    }

    /// All health monitors.
    pub fn health_monitors(&self) -> Vec<Value> {
        state::filter(self.lock().store.healthmonitors.values(), &[])
    }

    /// All floating IPs.
    pub fn floating_ips(&self) -> Vec<Value> {
        state::filter(self.lock().store.floatingips.values(), &[])
    }

    /// All ports.
    pub fn ports(&self) -> Vec<Value> {
        state::filter(self.lock().store.ports.values(), &[])
    }

    /// All networks.
    pub fn networks(&self) -> Vec<Value> {
        state::filter(self.lock().store.networks.values(), &[])
    }

    /// All subnets.
    pub fn subnets(&self) -> Vec<Value> {
        state::filter(self.lock().store.subnets.values(), &[])
    }

    /// All security groups (each with its `security_group_rules`).
    pub fn security_groups(&self) -> Vec<Value> {
        let state = self.lock();
        state
            .store
            .security_groups
            .values()
            .map(|group| neutron::security_group_document(&state, group))
            .collect()
    }

    /// All security group rules.
    pub fn security_group_rules(&self) -> Vec<Value> {
        state::filter(self.lock().store.security_group_rules.values(), &[])
    }

    /// Allocates an unattached floating IP on the public network, as a user would before
    /// asking for it with `loadBalancerIP`. Returns its document.
    pub fn seed_floating_ip(&self, description: &str) -> Option<Value> {
        let mut state = self.lock();
        let body = json!({"floatingip": {"floating_network_id": PUBLIC_NETWORK_ID, "description": description}});
        match neutron::serve(&mut state, "POST", &["floatingips"], &[], &body) {
            Ok((_, Some(document))) => Some(document["floatingip"].clone()),
            _ => None,
        }
    }
}

/// Which API a path belongs to.
enum Api<'a> {
    IdentityVersions,
    IdentityVersion,
    Tokens,
    OctaviaVersions,
    OctaviaVersion,
    Octavia(Vec<&'a str>),
    NeutronVersions,
    Neutron(Vec<&'a str>),
    Unknown,
}

fn route(path: &str) -> Api<'_> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => Api::IdentityVersions,
        ["v3"] => Api::IdentityVersion,
        ["v3", "auth", "tokens"] => Api::Tokens,
        ["load-balancer"] => Api::OctaviaVersions,
        ["load-balancer", "v2" | "v2.0"] => Api::OctaviaVersion,
        ["load-balancer", "v2" | "v2.0", rest @ ..] => Api::Octavia(rest.to_vec()),
        ["networking"] | ["networking", "v2.0"] => Api::NeutronVersions,
        ["networking", "v2.0", rest @ ..] => Api::Neutron(rest.to_vec()),
        _ => Api::Unknown,
    }
}

/// The error body in the format of the service that answers.
fn error_body(api: &Api<'_>, error: &ApiError) -> Value {
    let code = error.status.as_u16();
    match api {
        _ if code == 401 => {
            json!({"error": {"code": 401, "title": "Unauthorized", "message": error.message}})
        }
        Api::Tokens | Api::IdentityVersion | Api::IdentityVersions => {
            json!({"error": {"code": code, "title": error.status.canonical_reason().unwrap_or("Error"), "message": error.message}})
        }
        Api::Neutron(_) | Api::NeutronVersions => json!({"NeutronError": {
            "type": if error.kind.is_empty() { "HTTPError" } else { error.kind }, "message": error.message, "detail": ""}}),
        _ => {
            json!({"faultcode": if code >= 500 { "Server" } else { "Client" }, "faultstring": error.message, "debuginfo": null})
        }
    }
}

struct Reply {
    status: StatusCode,
    body: Option<Value>,
    subject_token: Option<String>,
}

async fn handle(
    AxumState(shared): AxumState<Shared<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let api = route(&path);
    let query: Vec<(String, String)> = Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|q| q.0)
        .unwrap_or_default();
    let parsed: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(error) => {
                let error = ApiError::bad_request(format!("Malformed request body: {error}"));
                return (error.status, axum::Json(error_body(&api, &error))).into_response();
            }
        }
    };
    // An armed delay is served outside the lock, so other requests go on meanwhile.
    let delay = {
        let mut state = lock_shared(&shared);
        take_fault(&mut state, method.as_str(), &path, true)
    };
    if let Some(FaultAction::Delay(delay)) = delay {
        tokio::time::sleep(delay).await;
    }
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok());
    let (reply, wait) = {
        let mut state = lock_shared(&shared);
        state.settle();
        let (reply, wait) = match take_fault(&mut state, method.as_str(), &path, false) {
            Some(FaultAction::Respond {
                status,
                message,
                retry_after,
            }) => {
                let error = ApiError::new(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                    message,
                );
                let reply = Reply {
                    status: error.status,
                    body: Some(error_body(&api, &error)),
                    subject_token: None,
                };
                (reply, retry_after)
            }
            Some(FaultAction::LoseResponse { status, message }) => {
                let _served = serve(&mut state, &api, method.as_str(), &query, &parsed, token);
                let error = ApiError::new(
                    StatusCode::from_u16(status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                    message,
                );
                let reply = Reply {
                    status: error.status,
                    body: Some(error_body(&api, &error)),
                    subject_token: None,
                };
                (reply, None)
            }
            _ => (
                serve(&mut state, &api, method.as_str(), &query, &parsed, token),
                None,
            ),
        };
        state.journal.push(JournalEntry {
            method: method.to_string(),
            path: path.clone(),
            query: uri.query().unwrap_or_default().to_string(),
            body: if matches!(api, Api::Tokens) {
                None
            } else {
                Some(parsed).filter(|b| !b.is_null())
            },
            status: reply.status.as_u16(),
        });
        (reply, wait)
    };
    let mut response = match reply.body {
        Some(body) => (reply.status, axum::Json(body)).into_response(),
        None => reply.status.into_response(),
    };
    if let Some(token) = reply
        .subject_token
        .and_then(|t| HeaderValue::from_str(&t).ok())
    {
        response.headers_mut().insert("x-subject-token", token);
    }
    if let Some(seconds) = wait {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(seconds));
    }
    if reply.status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            "www-authenticate",
            HeaderValue::from_static("Keystone uri=\"/v3\""),
        );
    }
    response
}

/// Fires the first armed fault matching the request (delays when `delays`, answers
/// otherwise), counting down its `skip` and `times`.
fn take_fault(state: &mut State, method: &str, path: &str, delays: bool) -> Option<FaultAction> {
    faults::fire_first(&mut state.faults, |f| {
        f.matches(method, path) && matches!(f.action, FaultAction::Delay(_)) == delays
    })
}

fn serve(
    state: &mut State,
    api: &Api<'_>,
    method: &str,
    query: &[(String, String)],
    body: &Value,
    token: Option<&str>,
) -> Reply {
    let ok = |body: Value| Reply {
        status: StatusCode::OK,
        body: Some(body),
        subject_token: None,
    };
    let result = match api {
        Api::IdentityVersions if method == "GET" => return ok(keystone::versions(state)),
        Api::IdentityVersion if method == "GET" => return ok(keystone::version(state)),
        Api::OctaviaVersions if method == "GET" => return ok(octavia::versions(state)),
        Api::OctaviaVersion if method == "GET" => return ok(octavia::version(state)),
        Api::NeutronVersions if method == "GET" => return ok(neutron::versions(state)),
        Api::Tokens if method == "POST" => match keystone::issue(state, body) {
            Ok((token, document)) => {
                return Reply {
                    status: StatusCode::CREATED,
                    body: Some(document),
                    subject_token: Some(token),
                };
            }
            Err(error) => Err(error),
        },
        Api::Octavia(segments) => keystone::validate(state, token)
            .and_then(|()| octavia::serve(state, method, segments, query, body)),
        Api::Neutron(segments) => keystone::validate(state, token)
            .and_then(|()| neutron::serve(state, method, segments, query, body)),
        Api::Unknown => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "The resource could not be found.",
        )),
        _ => Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "The method is not allowed for the requested URL.",
        )),
    };
    match result {
        Ok((status, body)) => Reply {
            status,
            body,
            subject_token: None,
        },
        Err(error) => Reply {
            status: error.status,
            body: Some(error_body(api, &error)),
            subject_token: None,
        },
    }
}

//! A stateful mock of Azure Resource Manager for the Microsoft.Network resources kube-lb uses:
//! load balancers (and their backend pools), public IP addresses, network security groups (and
//! their rules), virtual networks and subnets and the nodes' network interfaces (fixtures), plus
//! the Entra ID client-credentials token endpoint.
//!
//! It enforces what ARM enforces for these resources: `api-version` and a bearer token on every
//! call, request-body rules from the public REST reference (required fields, enum values, name
//! patterns, ranges), etags with `If-Match`/`If-None-Match` (412 on mismatch), async operations
//! (`201`/`202` with `Azure-AsyncOperation`, `Location` and `Retry-After`), referential
//! integrity (rules point inside their LB, frontends at existing public IPs and subnets; a
//! public IP in use cannot be deleted nor attached twice), quotas, and throttling through
//! fault injection. Every request is journaled so tests can assert call sequences.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let arm = kube_lb_mock_azure::MockArm::builder()
//!     .subnet("rg", "vnet", "10.0.0.0/16", "nodes", "10.0.0.0/24")
//!     .security_group("rg", "nsg")
//!     .start()
//!     .await?;
//! println!("{}", arm.url());
//! # Ok(()) }
//! ```

mod arm;
mod error;
mod integrity;
mod route;
mod state;
mod validate;

use std::collections::BTreeMap;
use std::net::SocketAddr;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use ipnet::{IpNet, Ipv4Net};
use kube_lb_mock_support::server::lost_response;
use kube_lb_mock_support::{MockServer, Shared, lock_shared};
use serde_json::{Value, json};

pub use error::ArmError;
pub use state::{Fault, FaultAction, JournalEntry, Quotas};

use state::{Config, Kind, State, Stored};

/// Default subscription served.
pub const SUBSCRIPTION: &str = "00000000-0000-0000-0000-000000000001";
/// Default tenant.
pub const TENANT: &str = "00000000-0000-0000-0000-0000000000aa";
/// Default service principal client ID accepted by the token endpoint.
pub const CLIENT_ID: &str = "kube-lb-test-client";
/// Its secret.
pub const CLIENT_SECRET: &str = "kube-lb-test-secret";
/// Default location.
pub const LOCATION: &str = "eastus";

/// Builds a [`MockArm`].
#[derive(Debug)]
pub struct MockArmBuilder {
    config: Config,
    resource_groups: Vec<String>,
    subnets: Vec<(String, String, IpNet, String, IpNet)>,
    network_interfaces: Vec<NetworkInterface>,
    security_groups: Vec<(String, String)>,
    listen: SocketAddr,
}

/// A network interface fixture: one IP configuration holding `address` in a subnet.
#[derive(Debug)]
struct NetworkInterface {
    rg: String,
    name: String,
    vnet: String,
    subnet: String,
    address: String,
}

impl MockArmBuilder {
    /// The subscription served (default [`SUBSCRIPTION`]).
    pub fn subscription(mut self, subscription: &str) -> Self {
        self.config.subscription = subscription.to_string();
        self
    }

    /// The location accepted in bodies (default [`LOCATION`]).
    pub fn location(mut self, location: &str) -> Self {
        self.config.locations = vec![location.to_string()];
        self
    }

    /// Adds a resource group.
    pub fn resource_group(mut self, rg: &str) -> Self {
        self.resource_groups.push(rg.to_string());
        self
    }

    /// Adds a virtual network with one subnet (both created in `rg`). Call again for more
    /// subnets of the same network.
    pub fn subnet(
        mut self,
        rg: &str,
        vnet: &str,
        vnet_prefix: &str,
        subnet: &str,
        prefix: &str,
    ) -> Self {
        let parse = |s: &str| {
            s.parse::<IpNet>()
                .unwrap_or_else(|_| IpNet::V4(Ipv4Net::default()))
        };
        self.resource_groups.push(rg.to_string());
        self.subnets.push((
            rg.to_string(),
            vnet.to_string(),
            parse(vnet_prefix),
            subnet.to_string(),
            parse(prefix),
        ));
        self
    }

    /// Adds a network interface `name` in `rg` (a node's NIC) whose primary IP configuration
    /// `ipconfig1` holds `address` in subnet `subnet` of virtual network `vnet` (in `rg`), as
    /// Azure gave it dynamically: a frontend never gets that address, and asking for it
    /// statically fails with `PrivateIPAddressIsAllocated`.
    pub fn network_interface(
        mut self,
        rg: &str,
        name: &str,
        vnet: &str,
        subnet: &str,
        address: &str,
    ) -> Self {
        self.resource_groups.push(rg.to_string());
        self.network_interfaces.push(NetworkInterface {
            rg: rg.to_string(),
            name: name.to_string(),
            vnet: vnet.to_string(),
            subnet: subnet.to_string(),
            address: address.to_string(),
        });
        self
    }

    /// Adds an (empty) network security group in `rg`.
    pub fn security_group(mut self, rg: &str, name: &str) -> Self {
        self.resource_groups.push(rg.to_string());
        self.security_groups
            .push((rg.to_string(), name.to_string()));
        self
    }

    /// Where public IPs are allocated from (default `20.50.0.0/24`; data only, never contacted).
    pub fn public_ip_pool(mut self, pool: Ipv4Net) -> Self {
        self.config.public_ip_pool = pool;
        self
    }

    /// How many `InProgress` answers each async operation gives (default 1).
    pub fn lro_polls(mut self, polls: u32) -> Self {
        self.config.lro_polls = polls;
        self
    }

    /// The `Retry-After` seconds on async operations (default 0).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.config.retry_after_secs = Some(secs);
        self
    }

    /// Async operations carry no `Retry-After` (ARM may omit it; clients must then pick their
    /// own poll interval).
    pub fn without_retry_after(mut self) -> Self {
        self.config.retry_after_secs = None;
        self
    }

    /// Limits to enforce.
    pub fn quotas(mut self, quotas: Quotas) -> Self {
        self.config.quotas = quotas;
        self
    }

    /// An additional service principal the token endpoint accepts.
    pub fn client(mut self, client_id: &str, secret: &str) -> Self {
        self.config
            .clients
            .insert(client_id.to_string(), secret.to_string());
        self
    }

    /// Listen address (default `127.0.0.1:0`, a free loopback port).
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Binds the listener and serves in a background task.
    pub async fn start(self) -> std::io::Result<MockArm> {
        let listen = self.listen;
        let server = MockServer::start(
            listen,
            "azure",
            |url| self.seed(url),
            |shared| Router::new().fallback(handle).with_state(shared),
        )
        .await?;
        Ok(MockArm { server })
    }

    /// The state a new mock starts with: the builder's resource groups, virtual networks with
    /// their subnets and security groups, with IDs under `url`.
    fn seed(self, url: &str) -> State {
        let mut config = self.config;
        config.base_url = url.to_string();
        let mut state = State::new(config);
        for rg in self.resource_groups {
            state
                .resource_groups
                .insert(rg, state.config.locations[0].clone());
        }
        let mut vnets: BTreeMap<(String, String), (IpNet, Vec<Value>)> = BTreeMap::new();
        for (rg, vnet, vnet_prefix, subnet, prefix) in self.subnets {
            let id = state.resource_id(&rg, Kind::VirtualNetwork, &vnet);
            vnets
                .entry((rg, vnet))
                .or_insert_with(|| (vnet_prefix, Vec::new()))
                .1
                .push(json!({"name": subnet, "id": format!("{id}/subnets/{subnet}"),
                    "properties": {"addressPrefix": prefix.to_string(), "provisioningState": "Succeeded"}}));
        }
        for ((rg, vnet), (prefix, subnets)) in vnets {
            let id = state.resource_id(&rg, Kind::VirtualNetwork, &vnet);
            let etag = state.new_etag();
            let body = json!({"id": id, "name": vnet, "type": Kind::VirtualNetwork.type_name(),
                "location": state.config.locations[0], "etag": etag,
                "properties": {"provisioningState": "Succeeded",
                    "addressSpace": {"addressPrefixes": [prefix.to_string()]}, "subnets": subnets}});
            state.resources.insert(
                id.to_ascii_lowercase(),
                Stored {
                    kind: Kind::VirtualNetwork,
                    resource_group: rg,
                    body,
                },
            );
        }
        for nic in self.network_interfaces {
            let id = state.resource_id(&nic.rg, Kind::NetworkInterface, &nic.name);
            let subnet_id = format!(
                "{}/subnets/{}",
                state.resource_id(&nic.rg, Kind::VirtualNetwork, &nic.vnet),
                nic.subnet
            );
            let etag = state.new_etag();
            let body = json!({"id": id, "name": nic.name, "type": Kind::NetworkInterface.type_name(),
                "location": state.config.locations[0], "etag": etag,
                "properties": {"provisioningState": "Succeeded", "ipConfigurations": [{
                    "name": "ipconfig1", "id": format!("{id}/ipConfigurations/ipconfig1"),
                    "properties": {"provisioningState": "Succeeded", "primary": true,
                        "privateIPAddress": nic.address, "privateIPAllocationMethod": "Dynamic",
                        "privateIPAddressVersion": "IPv4", "subnet": {"id": subnet_id}}}]}});
            state.resources.insert(
                id.to_ascii_lowercase(),
                Stored {
                    kind: Kind::NetworkInterface,
                    resource_group: nic.rg,
                    body,
                },
            );
        }
        for (rg, name) in self.security_groups {
            let id = state.resource_id(&rg, Kind::SecurityGroup, &name);
            let etag = state.new_etag();
            let mut body = json!({"id": id, "name": name, "type": Kind::SecurityGroup.type_name(),
                "location": state.config.locations[0], "etag": etag,
                "properties": {"provisioningState": "Succeeded", "securityRules": []}});
            integrity::security_group(&state, &id, &mut body, None);
            state.resources.insert(
                id.to_ascii_lowercase(),
                Stored {
                    kind: Kind::SecurityGroup,
                    resource_group: rg,
                    body,
                },
            );
        }
        state
    }
}

/// A running mock ARM server. Stops when dropped.
#[derive(Debug)]
pub struct MockArm {
    server: MockServer<State>,
}

kube_lb_mock_support::impl_mock_handle!(MockArm.server: State {
    journal: JournalEntry,
    faults: Fault
});

impl MockArm {
    /// A builder with the defaults: subscription [`SUBSCRIPTION`], location [`LOCATION`], the
    /// client [`CLIENT_ID`]/[`CLIENT_SECRET`], one `InProgress` poll per operation,
    /// `Retry-After: 0`.
    pub fn builder() -> MockArmBuilder {
        MockArmBuilder {
            config: Config {
                subscription: SUBSCRIPTION.to_string(),
                locations: vec![LOCATION.to_string()],
                public_ip_pool: Ipv4Net::new(std::net::Ipv4Addr::new(20, 50, 0, 0), 24)
                    .unwrap_or_default(),
                lro_polls: 1,
                retry_after_secs: Some(0),
                quotas: Quotas::default(),
                clients: BTreeMap::from([(CLIENT_ID.to_string(), CLIENT_SECRET.to_string())]),
                base_url: String::new(),
                operation_deadline: std::time::Duration::from_secs(2),
            },
            resource_groups: Vec::new(),
            subnets: Vec::new(),
            network_interfaces: Vec::new(),
            security_groups: Vec::new(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// Base URL (`http://127.0.0.1:PORT`), used both as the resource manager and the Entra ID
    /// endpoint.
    pub fn url(&self) -> String {
        self.server.url().to_string()
    }

    /// Changes the number of `InProgress` polls for operations started from now on.
    pub fn set_lro_polls(&self, polls: u32) {
        self.lock().config.lro_polls = polls;
    }

    /// How long an operation nobody polls takes to finish on its own (default 2 s).
    pub fn set_operation_deadline(&self, deadline: std::time::Duration) {
        self.lock().config.operation_deadline = deadline;
    }

    /// Changes the `Retry-After` seconds for operations started from now on.
    pub fn set_retry_after(&self, secs: u64) {
        self.lock().config.retry_after_secs = Some(secs);
    }

    /// A resource's document by ID or path (`/subscriptions/…`), as GET would return it.
    pub fn get(&self, id: &str) -> Option<Value> {
        self.lock().by_id(id).map(|r| r.body.clone())
    }

    /// Changes a stored resource in place, as another writer would (a new etag, so a client
    /// holding the old one gets 412): e.g. to add a property a newer ARM API version has and
    /// a client's model does not. Returns false when there is no such resource.
    pub fn edit(&self, id: &str, edit: impl FnOnce(&mut Value)) -> bool {
        let mut state = self.lock();
        let etag = state.new_etag();
        let Some(stored) = state.resources.get_mut(&id.to_ascii_lowercase()) else {
            return false;
        };
        edit(&mut stored.body);
        if let Some(obj) = stored.body.as_object_mut() {
            obj.insert("etag".into(), json!(etag));
        }
        true
    }

    /// A load balancer by resource group and name.
    pub fn load_balancer(&self, rg: &str, name: &str) -> Option<Value> {
        let state = self.lock();
        let id = state.resource_id(rg, Kind::LoadBalancer, name);
        state.by_id(&id).map(|r| r.body.clone())
    }

    /// A public IP by resource group and name.
    pub fn public_ip(&self, rg: &str, name: &str) -> Option<Value> {
        let state = self.lock();
        let id = state.resource_id(rg, Kind::PublicIp, name);
        state.by_id(&id).map(|r| r.body.clone())
    }

    /// A network security group by resource group and name.
    pub fn security_group(&self, rg: &str, name: &str) -> Option<Value> {
        let state = self.lock();
        let id = state.resource_id(rg, Kind::SecurityGroup, name);
        state.by_id(&id).map(|r| r.body.clone())
    }

    /// All load balancers, all public IPs, as (name, document) pairs.
    pub fn load_balancers(&self) -> Vec<Value> {
        self.lock()
            .of_kind(Kind::LoadBalancer)
            .map(|r| r.body.clone())
            .collect()
    }

    /// All public IPs.
    pub fn public_ips(&self) -> Vec<Value> {
        self.lock()
            .of_kind(Kind::PublicIp)
            .map(|r| r.body.clone())
            .collect()
    }

    /// Creates a public IP directly (a user-created address, e.g. for `loadBalancerIP` or
    /// `azure-pip-name`). Returns its address.
    pub fn seed_public_ip(&self, rg: &str, name: &str, tags: Value) -> Option<String> {
        let mut state = self.lock();
        state
            .resource_groups
            .entry(rg.to_string())
            .or_insert_with(|| LOCATION.to_string());
        let id = state.resource_id(rg, Kind::PublicIp, name);
        let ip = state.allocate_public_ip()?.to_string();
        let etag = state.new_etag();
        let guid = state.new_guid();
        let location = state.config.locations[0].clone();
        let body = json!({"id": id, "name": name, "type": Kind::PublicIp.type_name(), "location": location,
            "etag": etag, "tags": tags, "sku": {"name": "Standard", "tier": "Regional"},
            "properties": {"provisioningState": "Succeeded", "resourceGuid": guid,
                "publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4",
                "idleTimeoutInMinutes": 4, "ipAddress": ip}});
        state.resources.insert(
            id.to_ascii_lowercase(),
            Stored {
                kind: Kind::PublicIp,
                resource_group: rg.to_string(),
                body,
            },
        );
        Some(ip)
    }
}

async fn handle(
    AxumState(shared): AxumState<Shared<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let query: BTreeMap<String, String> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let request = arm::Request {
        method: method.as_str(),
        path: uri.path(),
        query,
        authorization: header("authorization"),
        if_match: header("if-match"),
        if_none_match: header("if-none-match"),
        body: &body,
    };
    let reply = {
        let mut state = lock_shared(&shared);
        let reply = arm::serve(&mut state, &request);
        let journaled_body = if uri.path().contains("/oauth2/") {
            None // the form carries the client secret
        } else {
            serde_json::from_slice(&body).ok()
        };
        state.journal.push(JournalEntry {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or_default().to_string(),
            if_match: request.if_match.map(str::to_string),
            if_none_match: request.if_none_match.map(str::to_string),
            body: journaled_body,
            status: reply.status.as_u16(),
        });
        reply
    };
    if reply.drop_connection {
        return lost_response();
    }
    let mut response = match reply.body {
        Some(body) => (reply.status, axum::Json(body)).into_response(),
        None => reply.status.into_response(),
    };
    let out = response.headers_mut();
    for (name, value) in reply.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.insert(name, value);
        }
    }
    out.insert(
        "x-ms-ratelimit-remaining-subscription-reads",
        HeaderValue::from_static("11999"),
    );
    out.insert(
        "x-ms-ratelimit-remaining-subscription-writes",
        HeaderValue::from_static("1199"),
    );
    if reply.status == StatusCode::NO_CONTENT {
        out.remove("content-type");
    }
    response
}

//! An in-memory GCE Compute REST API (`/compute/v1/projects/{p}/…`) for the resources the GCP
//! load-balancer provider uses: addresses, forwarding rules, target pools, legacy HTTP and
//! new-style health checks, firewalls, regional backend services, instance groups, instances
//! and zones (fixtures), and region/zone/global operations.
//!
//! It is stateful and enforces what the real API enforces: request-body rules, references
//! between resources, name conflicts (409), "in use" deletes (400
//! `resourceInUseByAnotherResource`), fingerprints (URL-safe base64, 412 on a stale one),
//! quotas (403 `quotaExceeded`), address promotion/demotion and operations that may stay
//! `RUNNING` for a few polls. Tests get a request journal and fault injection.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_lb_mock_gce::MockError> {
//! let gce = kube_lb_mock_gce::MockGce::builder()
//!     .instance("us-central1-a", "node-1", &["node-tag"])
//!     .start()
//!     .await?;
//! println!("{}", gce.url());
//! # Ok(()) }
//! ```

pub mod error;
pub mod filter;
mod store;
pub mod validate;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use ipnet::Ipv4Net;
use kube_lb_mock_support::server::lost_response;
use kube_lb_mock_support::{MockServer, Shared, lock_shared};
use serde_json::Value;

pub use error::ApiError;
pub use store::{CallClass, Fault, FaultResponse, JournalEntry};
use store::{Quota, Store, Topology};

/// Why the mock could not start.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// Binding the listen address failed.
    #[error("binding {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A builder value is malformed (e.g. a CIDR).
    #[error("invalid mock configuration: {0}")]
    Config(String),
}

/// Builds a [`MockGce`]. Defaults: project `mock-project`, region `us-central1` with zones
/// `us-central1-a` and `us-central1-b`, network `default` with subnetwork `default`
/// (`10.128.0.0/20`), external addresses from `203.0.113.0/24`, operations done at once.
#[derive(Debug, Clone)]
pub struct MockGceBuilder {
    project: String,
    region: String,
    zones: Vec<String>,
    network: String,
    subnetworks: Vec<(String, String)>,
    external_pool: String,
    instances: Vec<(String, String, Vec<String>)>,
    running_polls: u32,
    quotas: Vec<(String, u64)>,
}

impl Default for MockGceBuilder {
    fn default() -> Self {
        MockGceBuilder {
            project: "mock-project".into(),
            region: "us-central1".into(),
            zones: vec!["us-central1-a".into(), "us-central1-b".into()],
            network: "default".into(),
            subnetworks: vec![("default".into(), "10.128.0.0/20".into())],
            external_pool: "203.0.113.0/24".into(),
            instances: Vec::new(),
            running_polls: 0,
            quotas: Vec::new(),
        }
    }
}

impl MockGceBuilder {
    /// The project ID served.
    pub fn project(mut self, project: &str) -> Self {
        self.project = project.into();
        self
    }

    /// The region and its zones.
    pub fn region(mut self, region: &str, zones: &[&str]) -> Self {
        self.region = region.into();
        self.zones = zones.iter().map(|z| z.to_string()).collect();
        self
    }

    /// The network name (its subnetworks are set with [`MockGceBuilder::subnetwork`]).
    pub fn network(mut self, network: &str) -> Self {
        self.network = network.into();
        self
    }

    /// Adds a subnetwork of the region with an IPv4 range.
    pub fn subnetwork(mut self, name: &str, cidr: &str) -> Self {
        self.subnetworks.push((name.into(), cidr.into()));
        self
    }

    /// The range external addresses are allocated from.
    pub fn external_pool(mut self, cidr: &str) -> Self {
        self.external_pool = cidr.into();
        self
    }

    /// A VM fixture (a Kubernetes node) with network tags; its internal IP comes from the
    /// region's first subnetwork.
    pub fn instance(mut self, zone: &str, name: &str, tags: &[&str]) -> Self {
        self.instances.push((
            zone.into(),
            name.into(),
            tags.iter().map(|t| t.to_string()).collect(),
        ));
        self
    }

    /// How many polls an operation answers `RUNNING` before `DONE`.
    pub fn running_polls(mut self, polls: u32) -> Self {
        self.running_polls = polls;
        self
    }

    /// A quota limit (`FORWARDING_RULES`, `TARGET_POOLS`, `STATIC_ADDRESSES`,
    /// `BACKEND_SERVICES` per region; `FIREWALLS`, `HEALTH_CHECKS` global).
    pub fn quota(mut self, metric: &str, limit: u64) -> Self {
        self.quotas.push((metric.into(), limit));
        self
    }

    /// Starts on a free loopback port.
    pub async fn start(self) -> Result<MockGce, MockError> {
        self.start_on(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
    }

    /// Starts on the given address.
    pub async fn start_on(self, addr: SocketAddr) -> Result<MockGce, MockError> {
        let parse = |cidr: &str| -> Result<Ipv4Net, MockError> {
            cidr.parse()
                .map_err(|_| MockError::Config(format!("'{cidr}' is not an IPv4 CIDR")))
        };
        let mut subnetworks = Vec::new();
        for (name, cidr) in &self.subnetworks {
            subnetworks.push((
                self.region.clone(),
                name.clone(),
                self.network.clone(),
                parse(cidr)?,
            ));
        }
        let quotas = self
            .quotas
            .iter()
            .map(|(metric, limit)| Quota {
                scope: if matches!(metric.as_str(), "FIREWALLS" | "HEALTH_CHECKS") {
                    "global".into()
                } else {
                    self.region.clone()
                },
                metric: metric.clone(),
                limit: *limit,
            })
            .collect();
        let topo = Topology {
            project: self.project.clone(),
            zones: self
                .zones
                .iter()
                .map(|z| (z.clone(), self.region.clone()))
                .collect(),
            networks: vec![self.network.clone()],
            subnetworks,
            external_pool: parse(&self.external_pool)?,
            running_polls: self.running_polls,
            quotas,
        };
        let instances = &self.instances;
        // Fixtures are created once the base URL is known, so their links are absolute.
        let seed = |url: &str| {
            let mut store = Store::new(topo, url.to_string());
            for (zone, name, tags) in instances {
                store.add_instance(zone, name, tags, None);
            }
            store
        };
        let server = MockServer::start(addr, "gce", seed, |state| {
            Router::new().fallback(serve).with_state(state)
        })
        .await
        .map_err(|source| MockError::Bind { addr, source })?;
        Ok(MockGce {
            project: self.project,
            region: self.region,
            server,
        })
    }
}

/// A running mock; the server stops when this is dropped.
#[derive(Debug)]
pub struct MockGce {
    project: String,
    region: String,
    server: MockServer<Store>,
}

kube_lb_mock_support::impl_mock_handle!(MockGce.server: Store {
    journal: JournalEntry,
    faults: Fault
});

impl MockGce {
    /// A builder with the defaults described on [`MockGceBuilder`].
    pub fn builder() -> MockGceBuilder {
        MockGceBuilder::default()
    }

    /// The endpoint to give clients (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        self.server.url()
    }

    /// The project served.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The region served.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The next `times` requests (of any kind) answer 429 `rateLimitExceeded` with
    /// `Retry-After: retry_after_secs`.
    pub fn throttle(&self, times: u32, retry_after_secs: u64) {
        let mut error = ApiError::new(
            429,
            "rateLimitExceeded",
            "Rate Limit Exceeded: quota 'Queries per minute' exhausted",
        );
        error.retry_after = Some(retry_after_secs);
        self.inject(Fault::on("*", ".", FaultResponse::Http(error)).times(times));
    }

    /// Stored resources of a collection (`forwardingRules`, `firewalls`, …), across scopes.
    pub fn resources(&self, collection: &str) -> Vec<Value> {
        self.lock().collection(collection)
    }

    /// One stored resource by collection and name (any scope).
    pub fn resource(&self, collection: &str, name: &str) -> Option<Value> {
        self.resources(collection)
            .into_iter()
            .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
    }

    /// Names of the stored resources of a collection, sorted.
    pub fn names(&self, collection: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .resources(collection)
            .iter()
            .filter_map(|r| r.get("name").and_then(Value::as_str).map(str::to_string))
            .collect();
        names.sort();
        names
    }

    /// Instance names in an instance group, sorted; `None` if the group does not exist.
    pub fn group_members(&self, zone: &str, group: &str) -> Option<Vec<String>> {
        self.lock().group_members(zone, group).map(|members| {
            members
                .iter()
                .filter_map(|m| m.rsplit('/').next().map(str::to_string))
                .collect()
        })
    }

    /// Adds a VM fixture at runtime (a node joining).
    pub fn add_instance(&self, zone: &str, name: &str, tags: &[&str]) {
        let tags: Vec<String> = tags.iter().map(|t| t.to_string()).collect();
        self.lock().add_instance(zone, name, &tags, None);
    }

    /// Removes a VM fixture at runtime (a node leaving).
    pub fn remove_instance(&self, zone: &str, name: &str) {
        self.lock().remove_instance(zone, name);
    }
}

async fn serve(
    State(state): State<Shared<Store>>,
    method: Method,
    uri: Uri,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let parsed: Result<Option<Value>, ApiError> = if body.is_empty() {
        Ok(None)
    } else {
        serde_json::from_slice(&body)
            .map(Some)
            .map_err(|e| ApiError::invalid(format!("Invalid JSON payload received. {e}")))
    };
    let mut store = lock_shared(&state);
    let seq = store.journal.len() as u64;
    let class = Store::class_of(method.as_str(), &path);
    let mut drop_connection = false;
    let result = match parsed {
        Err(error) => Err(error),
        Ok(body) => match store.take_fault(method.as_str(), &path) {
            Some(FaultResponse::Http(error)) => Err(error),
            Some(FaultResponse::OperationError {
                code,
                message,
                http_status,
            }) => store.failed_operation(&path, method.as_str(), code, message, http_status),
            Some(FaultResponse::LoseResponse(lost)) => {
                // The call takes effect; only its answer goes missing.
                let _ = store.handle(method.as_str(), &path, &query, body.as_ref());
                match lost {
                    Some(error) => Err(error),
                    None => {
                        drop_connection = true;
                        Ok(Value::Null)
                    }
                }
            }
            None => store.handle(method.as_str(), &path, &query, body.as_ref()),
        },
    };
    let status = match &result {
        Ok(_) => 200,
        Err(error) => error.status,
    };
    tracing::debug!(%method, %path, status, "gce mock request");
    let at = store.started.elapsed();
    store.journal.push(JournalEntry {
        seq,
        method: method.to_string(),
        path,
        query: uri.query().unwrap_or_default().to_string(),
        class,
        status,
        body: serde_json::from_slice(&body).ok(),
        at,
    });
    drop(store);
    if drop_connection {
        return lost_response();
    }
    match result {
        Ok(value) => axum::Json(value).into_response(),
        Err(error) => error.into_response(),
    }
}

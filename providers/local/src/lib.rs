//! The embedded `local` provider: load-balancer addresses come from address pools — the
//! `kube-lb.io/v1alpha1` `IPPool` custom resources when any exist, else the `--local-pool`
//! ranges (by default inside 127.0.0.0/8, so nothing needs configuring) — and the set of
//! allocated addresses with their ports is published on a watch channel for the dataplane.
//!
//! The allocation rules are in [`alloc`]; the custom resource in [`ippool`]. The controller
//! feeds pools and namespace labels in ([`LocalProvider::set_pools`],
//! [`LocalProvider::set_namespace_labels`]) and listens on [`LocalProvider::changes`] to retry
//! Services that wait for an address when something that could give them one changed.

pub mod alloc;
mod flow;
pub mod ippool;
pub mod pool;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use ipnet::IpNet;
use kube_lb_annotations::{LoadBalancerSpec, PortSpec, Protocol, ServiceKey};
use kube_lb_provider_core::converge;
use kube_lb_provider_core::{
    BackendNode, CallCounter, CallKind, CloudApi, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
    RateLimits, RetryPolicy,
};
use tokio::sync::watch;

pub use alloc::{
    AllocError, Allocation, Allocator, Choice, Conflict, FALLBACK_POOL_NAME, PoolCondition,
    PoolStatus, Request, SharingTerms, Shown,
};
pub use ippool::{IpPoolSpec, PoolDef, PoolProblem};
pub use pool::{DEFAULT_POOL, IpRange, Pool, PoolError};

/// Provider name used in logs and metric labels.
pub const PROVIDER_NAME: &str = "local";
/// The API family label of every pool operation (for rate limiting and call counting).
const FAMILY: &str = "pool";
/// What a local load balancer is, in `kube-lb plan` and `kube-lb audit`: one pool address
/// (with the ports the dataplane serves on it).
pub const RESOURCE_KIND: &str = "Address";
/// The pool operation that hands out an address or changes what is served on it.
const ALLOCATE: &str = "allocate";
/// The pool operation that frees an address.
const RELEASE: &str = "release";

/// One listening port of a local load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalPort {
    /// The Service port name, matching the EndpointSlice port name.
    pub name: Option<String>,
    /// Transport protocol.
    pub protocol: Protocol,
    /// The port clients connect to on [`LocalLoadBalancer::ip`].
    pub port: u16,
}

/// What the dataplane must serve for one Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalLoadBalancer {
    /// The first allocated address (of the Service's first family).
    pub ip: IpAddr,
    /// Every allocated address, one per family, in the Service's family order.
    pub ips: Vec<IpAddr>,
    /// The pool the addresses came from, when known.
    pub pool: Option<String>,
    /// The pool the Service's `kube-lb.io/ip-allocated-from-pool` annotation named when it
    /// was last ensured (the controller writes the annotation when it differs from `pool`).
    pub written_pool: Option<String>,
    /// Ports to listen on.
    pub ports: Vec<LocalPort>,
    /// Allowed client ranges; empty allows everyone.
    pub source_ranges: Vec<IpNet>,
}

impl LocalLoadBalancer {
    fn new(choice: &Choice, spec: &LoadBalancerSpec) -> Option<Self> {
        Some(Self {
            ip: *choice.ips.first()?,
            ips: choice.ips.clone(),
            pool: choice.pool.clone(),
            written_pool: spec
                .provider
                .as_local()
                .and_then(|l| l.allocated_from_pool.clone()),
            ports: spec.ports.iter().map(local_port).collect(),
            source_ranges: spec.source_ranges.cidrs.clone(),
        })
    }

    fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: self
                .ips
                .iter()
                .map(|ip| LoadBalancerIngress {
                    ip: Some(*ip),
                    hostname: None,
                    ip_mode: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    fn addresses(&self) -> String {
        self.ips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn local_port(port: &PortSpec) -> LocalPort {
    LocalPort {
        name: port.name.clone(),
        protocol: port.protocol,
        port: port.port,
    }
}

/// Every local load balancer, by Service.
pub type LocalLoadBalancers = BTreeMap<ServiceKey, LocalLoadBalancer>;

/// The `local` provider. Its state lives in memory; what survives a restart is what the
/// Services show: the controller re-adopts it through [`LoadBalancerProvider::adopt`] when it
/// starts leading, and keeps telling the provider what every Service shows
/// ([`LocalProvider::observe`]), so an address a Service shows is never handed to another,
/// whoever wrote it.
#[derive(Debug)]
pub struct LocalProvider {
    allocator: Mutex<Allocator>,
    api: CloudApi,
    published: watch::Sender<LocalLoadBalancers>,
    changes: watch::Sender<u64>,
    /// False from [`LocalProvider::hold_until_pools_known`] until the first
    /// [`LocalProvider::set_pools`]: allocations wait, so a controller that starts before its
    /// `IPPool` watch has listed never hands out an address from the wrong pool.
    pools_known: watch::Sender<bool>,
    /// False from [`LocalProvider::hold_until_services_known`] until the first
    /// [`LocalProvider::observe_all`]: no address is handed out before every address the
    /// Services show is known to be taken.
    services_known: watch::Sender<bool>,
    /// When set, `ensure` reports a load balancer only once it is served.
    served: Gate,
}

/// Waits until a published load balancer is served: `Ok` once traffic to every address and
/// port flows, `Err` with what is still missing when it gave up. Set by `kube-lb up`, whose
/// in-process dataplane serves what this provider publishes ([`LocalProvider::gate_on_served`]).
pub type ServedGate = Arc<
    dyn Fn(LocalLoadBalancer) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>
        + Send
        + Sync,
>;

/// The optional [`ServedGate`] (a closure has no `Debug`).
#[derive(Default)]
struct Gate(OnceLock<ServedGate>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "Gate(set)"
        } else {
            "Gate(none)"
        })
    }
}

/// How long an `ensure` waits for the pools to be read before it fails as pending.
const POOLS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl LocalProvider {
    /// A provider whose pool, while no `IPPool` is set, is `pool`; it counts its operations on
    /// `counter`.
    pub fn new(pool: Pool, counter: CallCounter) -> Self {
        Self {
            allocator: Mutex::new(Allocator::new(pool.ranges())),
            // In-memory operations never fail transiently, and nothing needs protecting from
            // bursts; the counter is what matters.
            api: CloudApi::new(
                PROVIDER_NAME,
                counter,
                RateLimits::unlimited(),
                RetryPolicy::none(),
            ),
            published: watch::Sender::new(BTreeMap::new()),
            changes: watch::Sender::new(0),
            pools_known: watch::Sender::new(true),
            services_known: watch::Sender::new(true),
            served: Gate::default(),
        }
    }

    /// Makes `ensure` wait, after publishing a load balancer, until `gate` says
    /// it is served, and fail as pending (retried) when it is not: the Service's status then
    /// shows an address only once connections to it are forwarded, as a cloud's load balancer
    /// is ready when its address is reported. Set once; a later call changes nothing.
    pub fn gate_on_served(&self, gate: ServedGate) {
        let _ = self.served.0.set(gate);
    }

    /// Waits for the [`ServedGate`], if any.
    async fn until_served(&self, lb: &LocalLoadBalancer) -> Result<(), ProviderError> {
        match self.served.0.get() {
            Some(gate) => gate(lb.clone())
                .await
                .map_err(|missing| ProviderError::pending("serve", missing)),
            None => Ok(()),
        }
    }

    /// Makes allocations wait until the next [`LocalProvider::observe_all`] (at most 30 s,
    /// then they fail as pending and are retried): called before the Service watch starts.
    pub fn hold_until_services_known(&self) {
        self.services_known.send_replace(false);
    }

    /// Records what every live Service shows in its status (the Service watch listed them
    /// all): each address shown is taken by its Service. Releases
    /// [`LocalProvider::hold_until_services_known`].
    pub fn observe_all(&self, all: HashMap<ServiceKey, Shown>) {
        if self.with_allocator(|a| a.observe_all(all)) {
            self.bump();
        }
        self.services_known.send_replace(true);
    }

    /// Records what `service` shows in its status now; `None` when it shows nothing.
    pub fn observe(&self, service: &ServiceKey, shown: Option<Shown>) {
        if self.with_allocator(|a| a.observe(service, shown)) {
            self.bump();
        }
    }

    /// `service` no longer exists: what it showed is free, and what it held is released
    /// (normally its cleanup released it already; this covers a finalizer removed by hand).
    pub fn forget(&self, service: &ServiceKey) {
        let (freed, released) =
            self.with_allocator(|a| (a.observe(service, None), a.release(service).is_some()));
        if released {
            self.publish(service, None);
        }
        if freed || released {
            self.bump();
        }
    }

    /// Every address two Services claim although they may not share it, with who keeps it.
    pub fn conflicts(&self) -> Vec<Conflict> {
        self.with_allocator(|a| a.conflicts())
    }

    /// Makes allocations wait until the next [`LocalProvider::set_pools`] (at most 30 s, then
    /// they fail as pending and are retried): called before the `IPPool` watch starts.
    pub fn hold_until_pools_known(&self) {
        self.pools_known.send_replace(false);
    }

    async fn wait_for_pools(&self) -> Result<(), ProviderError> {
        let mut pools = self.pools_known.subscribe();
        let mut services = self.services_known.subscribe();
        let both = async {
            pools.wait_for(|k| *k).await.is_ok() && services.wait_for(|k| *k).await.is_ok()
        };
        match tokio::time::timeout(POOLS_WAIT, both).await {
            Ok(true) => Ok(()),
            _ => Err(ProviderError::Pending {
                operation: ALLOCATE,
                message: "the address pools (IPPools) and the addresses Services show have not \
                          been read yet"
                    .to_string(),
                source: None,
            }),
        }
    }

    /// The load balancers to serve; updated on every change.
    pub fn subscribe(&self) -> watch::Receiver<LocalLoadBalancers> {
        self.published.subscribe()
    }

    /// Bumped whenever a Service waiting for an address might now get one: a pool or a
    /// namespace's labels changed, an address was freed, a sharing Service changed its ports.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// The call counter.
    pub fn counter(&self) -> &CallCounter {
        self.api.counter()
    }

    /// Replaces the `IPPool`s (an empty set brings back the `--local-pool` ranges). Addresses
    /// Services hold are kept, also when their pool no longer contains them.
    pub fn set_pools(&self, pools: Vec<PoolDef>) {
        if self.with_allocator(|a| a.set_pools(pools)) {
            self.bump();
        }
        self.pools_known.send_replace(true);
    }

    /// Replaces the labels of every namespace (for `namespaceSelectors`).
    pub fn set_namespace_labels(&self, labels: HashMap<String, BTreeMap<String, String>>) {
        if self.with_allocator(|a| a.set_namespace_labels(labels)) {
            self.bump();
        }
    }

    /// The status of every `IPPool`, by name.
    pub fn pool_statuses(&self) -> BTreeMap<String, PoolStatus> {
        self.with_allocator(|a| a.statuses())
    }

    /// The usage of every pool addresses come from now (the `IPPool`s, else the
    /// `--local-pool` fallback), by name.
    pub fn pool_usage(&self) -> BTreeMap<String, PoolStatus> {
        self.with_allocator(|a| a.usage())
    }

    /// The problems of every invalid `IPPool`, by name.
    pub fn pool_problems(&self) -> BTreeMap<String, Vec<PoolProblem>> {
        self.with_allocator(|a| a.problems())
    }

    fn bump(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    fn with_allocator<T>(&self, f: impl FnOnce(&mut Allocator) -> T) -> T {
        f(&mut self
            .allocator
            .lock()
            .unwrap_or_else(PoisonError::into_inner))
    }

    fn current(&self, service: &ServiceKey) -> Option<LocalLoadBalancer> {
        self.published.borrow().get(service).cloned()
    }

    fn publish(&self, service: &ServiceKey, lb: Option<LocalLoadBalancer>) {
        self.published.send_if_modified(|all| match lb {
            Some(lb) => all.insert(service.clone(), lb.clone()).as_ref() != Some(&lb),
            None => all.remove(service).is_some(),
        });
    }
}

/// Classes allocation failures. Every one can clear up without the Service changing — another
/// Service goes, a pool is added or widened, a namespace is relabelled — so all are
/// environment errors: retried with backoff, and at once when [`LocalProvider::changes`]
/// ticks. The message names the cause for the Service's condition.
///
/// One exception: while no `IPPool` exists (`custom_pools` false), an address outside the
/// `--local-pool` ranges can only be fixed by the Service's author (or a restart with other
/// flags), so it is a user error, as it always was.
fn alloc_error(error: AllocError, custom_pools: bool) -> ProviderError {
    if let AllocError::Outside { ip, .. } = &error
        && !custom_pools
    {
        return ProviderError::user(format!(
            "loadBalancerIP {ip} is not in the local address pool (--local-pool)"
        ));
    }
    let cause = match &error {
        AllocError::Exhausted { .. } => EnvironmentCause::PoolExhausted,
        // Both name the Service holding the address: a clash inside this cluster.
        AllocError::InUse { .. }
        | AllocError::SharingClash { .. }
        | AllocError::PolicyClash { .. } => EnvironmentCause::SharingConflict,
        AllocError::NoPool { .. }
        | AllocError::UnknownPool { .. }
        | AllocError::OutOfScope { .. }
        | AllocError::Outside { .. } => EnvironmentCause::MissingDependency,
    };
    ProviderError::environment(ALLOCATE, cause, error.to_string())
}

fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// `http:80/TCP, 53/UDP`, as the plan shows the ports of a load balancer.
fn describe_ports(ports: &[LocalPort]) -> String {
    ports
        .iter()
        .map(|p| {
            let number = format!("{}/{}", p.port, protocol_name(p.protocol));
            match &p.name {
                Some(name) => format!("{name}:{number}"),
                None => number,
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The allowed client ranges; `None` when everyone is allowed (no restriction to show).
fn describe_ranges(ranges: &[IpNet]) -> Option<String> {
    (!ranges.is_empty()).then(|| {
        ranges
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// What [`LocalProvider::ensure`] does for `spec`, decided from what the provider serves
/// (`published`) and what the allocator holds; pure, shared by `ensure` and `plan_ensure`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    /// Served and recorded exactly so: nothing to do.
    InSync(LocalLoadBalancer),
    /// Held (adopted at start-up) but not served yet: record the ports, publish, no pool call.
    Republish(LocalLoadBalancer),
    /// A pool call: allocate, move or change what is served.
    Allocate(LocalLoadBalancer),
}

fn step_for(
    spec: &LoadBalancerSpec,
    req: &Request,
    published: Option<&LocalLoadBalancer>,
    allocator: &Allocator,
) -> Result<(Choice, Step), AllocError> {
    let choice = allocator.plan(req)?;
    let Some(desired) = LocalLoadBalancer::new(&choice, spec) else {
        return Err(AllocError::NoPool {
            service: spec.service.to_string(),
            namespace: spec.service.namespace.clone(),
        });
    };
    let held = allocator.claimed(&spec.service);
    // What the annotation says is not what is served: a write-back alone changes nothing.
    let served = published.map(|p| LocalLoadBalancer {
        written_pool: desired.written_pool.clone(),
        ..p.clone()
    });
    let step = if served.as_ref() == Some(&desired) && allocator.is_recorded(req, &choice) {
        Step::InSync(desired)
    } else if published.is_none() && held.as_ref().is_some_and(|h| h.ips == choice.ips) {
        Step::Republish(desired)
    } else {
        Step::Allocate(desired)
    };
    Ok((choice, step))
}

/// Every address the provider holds or serves, with its Service.
fn owned_from(allocator: &Allocator, published: &LocalLoadBalancers) -> Vec<OwnedResource> {
    let allocations = allocator.allocations();
    let mut owned: Vec<OwnedResource> = allocations
        .iter()
        .map(|a| OwnedResource {
            kind: RESOURCE_KIND.to_string(),
            name: a.ip.to_string(),
            service: a.service.clone(),
            created: a
                .allocated_at
                .map(|at| humantime::format_rfc3339_seconds(at).to_string()),
            shared: false,
        })
        .collect();
    // Served without an allocation cannot happen through `ensure`; listed all the same, so an
    // audit never hides what the dataplane still serves.
    owned.extend(
        published
            .iter()
            .filter(|(service, _)| !allocations.iter().any(|a| &a.service == *service))
            .flat_map(|(service, lb)| {
                lb.ips.iter().map(move |ip| OwnedResource {
                    kind: RESOURCE_KIND.to_string(),
                    name: ip.to_string(),
                    service: service.clone(),
                    created: None,
                    shared: false,
                })
            }),
    );
    owned
}

#[async_trait]
impl LoadBalancerProvider for LocalProvider {
    fn name(&self) -> &'static str {
        PROVIDER_NAME
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        _backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        self.wait_for_pools().await?;
        // Backends do not matter here: the local dataplane forwards straight to endpoints.
        let mut flow = flow::EnsureFlow::new(self, spec);
        let error = match converge::execute(&mut flow).await {
            Ok(status) => return Ok(status),
            Err(error) => error,
        };
        if flow.refused_by_pool {
            // Addresses lost to a Service that claimed them first are no longer served,
            // although nothing else could be found (the controller's Service watch removes
            // them from this Service's status: `kube_lb::controller::pools`).
            let service = &spec.service;
            let req = Request::from_spec(spec);
            if self.with_allocator(|a| a.drop_lost(&req)) {
                let kept = self.with_allocator(|a| a.held(service));
                let lb = match (kept, flow.current.take()) {
                    (Some(kept), Some(lb)) if !kept.ips.is_empty() => Some(LocalLoadBalancer {
                        ip: kept.ips[0],
                        ips: kept.ips,
                        ..lb
                    }),
                    _ => None,
                };
                self.publish(service, lb);
                self.bump();
            }
        }
        Err(error)
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        converge::execute(&mut flow::DeleteFlow::new(self, service)).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        self.api
            .call(FAMILY, "get", CallKind::Read, || async {
                Ok(self.current(service).map(|lb| lb.status()))
            })
            .await
    }

    async fn adopt(
        &self,
        service: &ServiceKey,
        status: &LoadBalancerStatus,
    ) -> Result<(), ProviderError> {
        let ips: Vec<IpAddr> = status.ingress.iter().filter_map(|i| i.ip).collect();
        if ips.is_empty() {
            return Ok(());
        }
        // Counted as a read: re-adoption restores this process's memory from what the Service
        // status recorded; nothing outside changes, so `kube-lb plan` and the mutation count
        // of `kube_lb_cloud_calls_total` must not show it as a change.
        self.api
            .call(FAMILY, "adopt", CallKind::Read, || async {
                self.with_allocator(|a| a.adopt(service, &ips));
                Ok(())
            })
            .await
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        _backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut flow::EnsureFlow::new(self, spec)).await
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut flow::DeleteFlow::new(self, service)).await
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        self.api
            .call(FAMILY, "list", CallKind::Read, || async {
                let published = self.published.borrow().clone();
                Ok(self.with_allocator(|a| owned_from(a, &published)))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use kube_lb_annotations::{
        Cloud, ProviderSpec, Scheme, SessionAffinity, SourceRangeOrigin, SourceRanges, TargetPort,
        TrafficPolicy,
    };
    use kube_lb_provider_core::ChangeAction;

    use super::*;

    fn spec(name: &str, port: u16) -> LoadBalancerSpec {
        LoadBalancerSpec {
            service: ServiceKey {
                namespace: "default".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            cloud: Cloud::Local,
            ports: vec![PortSpec {
                name: Some("http".into()),
                protocol: Protocol::Tcp,
                port,
                node_port: Some(30080),
                target_port: TargetPort::Number(8080),
            }],
            scheme: Scheme::External,
            requested_ip: None,
            source_ranges: SourceRanges {
                cidrs: vec![],
                origin: SourceRangeOrigin::Default,
            },
            traffic_policy: TrafficPolicy::Cluster,
            session_affinity: SessionAffinity::None,
            load_balancer_class: None,
            allocate_node_ports: true,
            external_ips: vec![],
            topology_keys: vec![],
            extra_tags: BTreeMap::new(),
            provider: ProviderSpec::Local(Default::default()),
        }
    }

    fn provider(range: &str) -> LocalProvider {
        LocalProvider::new(
            Pool::new(vec![range.parse().unwrap()]).unwrap(),
            CallCounter::new(),
        )
    }

    fn ip_of(status: &LoadBalancerStatus) -> IpAddr {
        status.ingress[0].ip.unwrap()
    }

    #[tokio::test]
    async fn ensure_allocates_publishes_and_resync_mutates_nothing() {
        let p = provider("127.0.0.10-127.0.0.20");
        let rx = p.subscribe();
        let status = p.ensure(&spec("web", 80), &[]).await.unwrap();
        assert_eq!(ip_of(&status).to_string(), "127.0.0.10");
        assert_eq!(rx.borrow().values().next().unwrap().ports[0].port, 80);
        let before = p.counter().snapshot();
        let again = p.ensure(&spec("web", 80), &[]).await.unwrap();
        assert_eq!(again, status);
        assert_eq!(p.counter().snapshot().since(&before).mutations(), 0);
        // A port change is a mutation that keeps the address.
        let changed = p.ensure(&spec("web", 8080), &[]).await.unwrap();
        assert_eq!(changed, status);
        assert_eq!(
            p.counter().snapshot().since(&before).operation("allocate"),
            1
        );
        assert_eq!(rx.borrow().values().next().unwrap().ports[0].port, 8080);
    }

    #[tokio::test]
    async fn a_served_gate_holds_the_status_until_it_opens_and_a_closed_one_is_pending() {
        let p = provider("127.0.0.10-127.0.0.20");
        let (open_tx, open) = watch::channel(false);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen_by_gate = seen.clone();
        p.gate_on_served(Arc::new(move |lb| {
            seen_by_gate
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(lb.ip);
            let mut open = open.clone();
            Box::pin(async move {
                tokio::select! {
                    opened = open.wait_for(|open| *open) => opened.map(drop).map_err(|e| e.to_string()),
                    () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
                        Err("127.0.0.10:80/Tcp not forwarded".to_string())
                    }
                }
            })
        }));
        // Closed: the address is published (the dataplane can take it) but not reported.
        let rx = p.subscribe();
        let err = p.ensure(&spec("web", 80), &[]).await.unwrap_err();
        assert_eq!(err.class(), "retryable", "{err}");
        assert!(err.to_string().contains("not forwarded"), "{err}");
        assert_eq!(rx.borrow().len(), 1);
        // Open: the retry, in sync with what was published, is reported.
        open_tx.send_replace(true);
        let status = p.ensure(&spec("web", 80), &[]).await.unwrap();
        assert_eq!(ip_of(&status).to_string(), "127.0.0.10");
        let asked: Vec<String> = seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(asked, ["127.0.0.10", "127.0.0.10"]);
    }

    #[tokio::test]
    async fn requested_ip_is_honoured_or_refused() {
        let p = provider("127.0.0.10-127.0.0.20");
        let mut s = spec("a", 80);
        s.requested_ip = Some("127.0.0.15".parse().unwrap());
        assert_eq!(
            ip_of(&p.ensure(&s, &[]).await.unwrap()).to_string(),
            "127.0.0.15"
        );
        let mut other = spec("b", 80);
        other.requested_ip = Some("127.0.0.15".parse().unwrap());
        let err = p.ensure(&other, &[]).await.unwrap_err();
        // The holder may go away: retried, not a user error.
        assert_eq!(err.class(), "environment", "{err}");
        assert!(
            err.to_string().contains("in use by Service default/a"),
            "{err}"
        );
        other.requested_ip = Some("192.0.2.1".parse().unwrap());
        let err = p.ensure(&other, &[]).await.unwrap_err();
        // Only the --local-pool ranges exist: only the Service's author can fix it.
        assert_eq!(err.class(), "user", "{err}");
        assert!(
            err.to_string().contains("not in the local address pool"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn delete_releases_and_is_idempotent() {
        let p = provider("127.0.0.10-127.0.0.20");
        let s = spec("web", 80);
        p.ensure(&s, &[]).await.unwrap();
        p.delete(&s.service).await.unwrap();
        assert!(p.subscribe().borrow().is_empty());
        assert_eq!(p.status(&s.service).await.unwrap(), None);
        let before = p.counter().snapshot();
        p.delete(&s.service).await.unwrap();
        assert_eq!(p.counter().snapshot().since(&before).mutations(), 0);
        // The address is free again.
        let next = p.ensure(&spec("other", 80), &[]).await.unwrap();
        assert_eq!(ip_of(&next).to_string(), "127.0.0.10");
    }

    #[tokio::test]
    async fn adopted_addresses_are_kept_and_not_reused() {
        let p = provider("127.0.0.10-127.0.0.20");
        let old = spec("old", 80);
        let status = LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: Some("127.0.0.10".parse().unwrap()),
                hostname: None,
                ip_mode: None,
            }],
            ..Default::default()
        };
        p.adopt(&old.service, &status).await.unwrap();
        let fresh = p.ensure(&spec("fresh", 80), &[]).await.unwrap();
        assert_eq!(ip_of(&fresh).to_string(), "127.0.0.11");
        assert_eq!(p.ensure(&old, &[]).await.unwrap(), status);
        // Two statuses naming one address (a hand edit): both adopted, and the second
        // Service moves at its ensure, since neither shares.
        let thief = spec("thief", 8080);
        p.adopt(&thief.service, &status).await.unwrap();
        let moved = p.ensure(&thief, &[]).await.unwrap();
        assert_ne!(moved, status);
        assert_eq!(p.ensure(&old, &[]).await.unwrap(), status);
    }

    /// Re-adoption at start-up (the controller's, and `kube-lb plan`'s and `audit`'s before
    /// they look) is no mutation: counted as one read per Service, never as a mutate call.
    #[tokio::test]
    async fn adoption_is_counted_as_a_read_not_a_mutation() {
        let before = provider("127.0.0.10-127.0.0.20");
        let specs: Vec<LoadBalancerSpec> = (0..3).map(|i| spec(&format!("a{i}"), 80)).collect();
        let mut statuses = Vec::new();
        for s in &specs {
            statuses.push(before.ensure(s, &[]).await.unwrap());
        }
        let restarted = provider("127.0.0.10-127.0.0.20");
        for (s, status) in specs.iter().zip(&statuses) {
            restarted.adopt(&s.service, status).await.unwrap();
        }
        let counted = restarted.counter().snapshot();
        assert_eq!(counted.mutations(), 0, "{counted:?}");
        assert_eq!(counted.reads(), 3, "{counted:?}");
        assert_eq!(counted.operation("adopt"), 3);
    }

    /// A restart: every address is adopted from the Services' status, then the first pass
    /// finds each one held and only republishes it: one read per load balancer (its pool
    /// entry, the one thing it is made of) and no mutation.
    #[tokio::test]
    async fn restart_pass_after_adoption_reads_once_per_service_and_mutates_nothing() {
        let before = provider("127.0.0.10-127.0.0.40");
        let specs: Vec<LoadBalancerSpec> = (0..20).map(|i| spec(&format!("s{i}"), 80)).collect();
        let mut statuses = Vec::new();
        for s in &specs {
            statuses.push(before.ensure(s, &[]).await.unwrap());
        }

        let restarted = provider("127.0.0.10-127.0.0.40");
        let mut table = restarted.subscribe();
        for (s, status) in specs.iter().zip(&statuses) {
            restarted.adopt(&s.service, status).await.unwrap();
        }
        let adopted = restarted.counter().snapshot();
        for (s, status) in specs.iter().zip(&statuses) {
            assert_eq!(&restarted.ensure(s, &[]).await.unwrap(), status);
        }
        let pass = restarted.counter().snapshot().since(&adopted);
        assert_eq!(pass.mutations(), 0, "{pass:?}");
        assert_eq!(pass.reads(), 20);
        assert_eq!(
            table.borrow_and_update().len(),
            20,
            "the dataplane table is rebuilt"
        );
        // A requested address other than the adopted one is a real change.
        let mut moved = specs[0].clone();
        moved.requested_ip = Some("127.0.0.40".parse().unwrap());
        restarted.ensure(&moved, &[]).await.unwrap();
        assert_eq!(
            restarted.counter().snapshot().since(&adopted).mutations(),
            1
        );
    }

    /// `(action, name, [(field, old, new)])` of a plan, for table comparisons.
    type Summary = Vec<(
        ChangeAction,
        String,
        Vec<(String, Option<String>, Option<String>)>,
    )>;

    fn summary(plan: &[PlannedChange]) -> Summary {
        plan.iter()
            .map(|c| {
                assert_eq!(c.kind, RESOURCE_KIND);
                let fields = c
                    .fields
                    .iter()
                    .map(|f| (f.field.clone(), f.old.clone(), f.new.clone()))
                    .collect();
                (c.action, c.name.clone(), fields)
            })
            .collect()
    }

    fn field(
        name: &str,
        old: Option<&str>,
        new: Option<&str>,
    ) -> (String, Option<String>, Option<String>) {
        (name.into(), old.map(String::from), new.map(String::from))
    }

    #[test]
    fn plan_ensure_mirrors_ensure() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let range: IpRange = "127.0.0.10-127.0.0.20".parse().unwrap();
        let web = spec("web", 80);
        let mut pool = Allocator::new(&[range]);
        pool.allocate(&Request::from_spec(&spec("other", 80)))
            .unwrap();
        let mut held = pool.clone();
        let choice = held.allocate(&Request::from_spec(&web)).unwrap();
        let served = LocalLoadBalancer::new(&choice, &web).unwrap();
        let mut restricted = web.clone();
        restricted.source_ranges.cidrs = vec!["10.0.0.0/8".parse().unwrap()];
        let mut requested = web.clone();
        requested.requested_ip = Some(ip("127.0.0.15"));
        let web_8080 = spec("web", 8080);
        let mut taken = web.clone();
        taken.requested_ip = Some(ip("127.0.0.10"));
        let mut adopted = pool.clone();
        adopted.adopt(&web.service, &[ip("127.0.0.11")]);
        // (case, spec, served, allocator, expected plan or error class)
        type Case<'a> = (
            &'a str,
            &'a LoadBalancerSpec,
            Option<&'a LocalLoadBalancer>,
            &'a Allocator,
            Result<Summary, &'a str>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("in sync", &web, Some(&served), &held, Ok(vec![])),
            (
                "adopted, not served yet: ensure only publishes",
                &web,
                None,
                &adopted,
                Ok(vec![]),
            ),
            (
                "new: the lowest free address",
                &web,
                None,
                &pool,
                Ok(vec![(
                    ChangeAction::Create,
                    "127.0.0.11".into(),
                    vec![
                        field("address", None, Some("127.0.0.11")),
                        field("ports", None, Some("http:80/TCP")),
                    ],
                )]),
            ),
            (
                "port changed",
                &web_8080,
                Some(&served),
                &held,
                Ok(vec![(
                    ChangeAction::Modify,
                    "127.0.0.11".into(),
                    vec![field("ports", Some("http:80/TCP"), Some("http:8080/TCP"))],
                )]),
            ),
            (
                "source ranges added",
                &restricted,
                Some(&served),
                &held,
                Ok(vec![(
                    ChangeAction::Modify,
                    "127.0.0.11".into(),
                    vec![field("sourceRanges", None, Some("10.0.0.0/8"))],
                )]),
            ),
            (
                "requested address moves it",
                &requested,
                Some(&served),
                &held,
                Ok(vec![(
                    ChangeAction::Modify,
                    "127.0.0.11".into(),
                    vec![field("address", Some("127.0.0.11"), Some("127.0.0.15"))],
                )]),
            ),
            (
                "requested address held by another Service",
                &taken,
                None,
                &pool,
                Err("environment"),
            ),
        ];
        for (case, spec, served, allocator, want) in cases {
            let got = flow::plan_ensure(spec, served, allocator)
                .map(|(plan, _, _)| summary(&converge::describe(&plan)))
                .map_err(|e| alloc_error(e, true).class());
            assert_eq!(got, want, "{case}");
        }
    }

    #[tokio::test]
    async fn plans_make_no_mutating_call_and_match_what_ensure_and_delete_do() {
        let p = provider("127.0.0.10-127.0.0.20");
        let web = spec("web", 80);
        let before = p.counter().snapshot();
        let plan = p.plan_ensure(&web, &[]).await.unwrap();
        assert_eq!(summary(&plan)[0].0, ChangeAction::Create);
        assert!(p.plan_delete(&web.service).await.unwrap().is_empty());
        assert!(p.owned_resources().await.unwrap().is_empty());
        let planning = p.counter().snapshot().since(&before);
        assert_eq!(planning.mutations(), 0, "{planning:?}");
        assert_eq!(planning.reads(), 3);

        let status = p.ensure(&web, &[]).await.unwrap();
        assert_eq!(
            plan[0].name,
            ip_of(&status).to_string(),
            "the planned address is the one given"
        );
        assert!(
            p.plan_ensure(&web, &[]).await.unwrap().is_empty(),
            "in sync after ensure"
        );
        let owned = p.owned_resources().await.unwrap();
        assert_eq!(owned.len(), 1);
        assert_eq!(
            (owned[0].name.as_str(), &owned[0].service),
            ("127.0.0.10", &web.service)
        );
        assert!(
            owned[0].created.is_some(),
            "allocated by this process: it knows when"
        );

        let delete = p.plan_delete(&web.service).await.unwrap();
        assert_eq!(
            summary(&delete),
            vec![(ChangeAction::Delete, "127.0.0.10".to_string(), vec![])]
        );
        p.delete(&web.service).await.unwrap();
        assert!(p.plan_delete(&web.service).await.unwrap().is_empty());
        assert!(p.owned_resources().await.unwrap().is_empty());
    }

    #[test]
    fn allocation_failures_are_environment_errors_with_the_condition_cause() {
        let ip: IpAddr = "127.0.0.15".parse().unwrap();
        let cases = [
            (
                AllocError::Outside {
                    ip,
                    where_: "every address pool".into(),
                },
                EnvironmentCause::MissingDependency,
            ),
            (
                AllocError::NoPool {
                    service: "d/web".into(),
                    namespace: "d".into(),
                },
                EnvironmentCause::MissingDependency,
            ),
            (
                AllocError::UnknownPool { pool: "lan".into() },
                EnvironmentCause::MissingDependency,
            ),
            (
                AllocError::InUse {
                    ip,
                    owner: "default/a".into(),
                    why: String::new(),
                },
                EnvironmentCause::SharingConflict,
            ),
            (
                AllocError::SharingClash {
                    ip,
                    owner: "default/a".into(),
                    port: 53,
                    protocol: "UDP",
                },
                EnvironmentCause::SharingConflict,
            ),
            (
                AllocError::Exhausted {
                    pool: "lan".into(),
                    detail: "no IPv4 address is free".into(),
                },
                EnvironmentCause::PoolExhausted,
            ),
        ];
        for (error, cause) in cases {
            let text = error.to_string();
            let converted = alloc_error(error, true);
            assert_eq!(converted.class(), "environment", "{text}");
            let got = match &converted {
                ProviderError::Environment { cause, .. } => Some(*cause),
                _ => None,
            };
            assert_eq!(got, Some(cause), "{text}");
        }
    }
}

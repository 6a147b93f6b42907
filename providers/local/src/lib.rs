//! The embedded `local` provider: load-balancer addresses come from a pool on this machine
//! (by default inside 127.0.0.0/8, so nothing needs configuring), and the set of allocated
//! addresses with their ports is published on a watch channel for the dataplane to serve.

pub mod pool;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use ipnet::IpNet;
use kube_lb_annotations::{LoadBalancerSpec, PortSpec, Protocol, ServiceKey};
use kube_lb_provider_core::{
    BackendNode, CallCounter, CallKind, ChangeAction, CloudApi, EnvironmentCause,
    LoadBalancerIngress, LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange,
    ProviderError, RateLimits, RetryPolicy,
};
use tokio::sync::watch;

pub use pool::{Allocation, DEFAULT_POOL, IpRange, Pool, PoolError};

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
    /// The allocated address.
    pub ip: IpAddr,
    /// Ports to listen on.
    pub ports: Vec<LocalPort>,
    /// Allowed client ranges; empty allows everyone.
    pub source_ranges: Vec<IpNet>,
}

impl LocalLoadBalancer {
    fn new(ip: IpAddr, spec: &LoadBalancerSpec) -> Self {
        Self {
            ip,
            ports: spec.ports.iter().map(local_port).collect(),
            source_ranges: spec.source_ranges.cidrs.clone(),
        }
    }

    fn status(&self) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress: vec![LoadBalancerIngress {
                ip: Some(self.ip),
                hostname: None,
            }],
        }
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

/// The `local` provider. Its state lives in memory; after a restart the controller re-adopts
/// allocations from Service statuses through [`LoadBalancerProvider::adopt`].
#[derive(Debug)]
pub struct LocalProvider {
    pool: Mutex<Pool>,
    api: CloudApi,
    published: watch::Sender<LocalLoadBalancers>,
}

impl LocalProvider {
    /// A provider over `pool`, counting its operations on `counter`.
    pub fn new(pool: Pool, counter: CallCounter) -> Self {
        Self {
            pool: Mutex::new(pool),
            // In-memory operations never fail transiently, and nothing needs protecting from
            // bursts; the counter is what matters.
            api: CloudApi::new(
                PROVIDER_NAME,
                counter,
                RateLimits::unlimited(),
                RetryPolicy::none(),
            ),
            published: watch::Sender::new(BTreeMap::new()),
        }
    }

    /// The load balancers to serve; updated on every change.
    pub fn subscribe(&self) -> watch::Receiver<LocalLoadBalancers> {
        self.published.subscribe()
    }

    /// The call counter.
    pub fn counter(&self) -> &CallCounter {
        self.api.counter()
    }

    fn with_pool<T>(&self, f: impl FnOnce(&mut Pool) -> T) -> T {
        f(&mut self.pool.lock().unwrap_or_else(PoisonError::into_inner))
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

/// Classes pool failures: an address outside the pool is the Service's own choice (only its
/// author can fix it); an address held by another Service or an exhausted pool can clear up
/// when other Services go away, so the controller retries those.
fn pool_error(error: PoolError) -> ProviderError {
    match &error {
        PoolError::OutsidePool { .. } => ProviderError::user(error.to_string()),
        PoolError::InUse { .. } => ProviderError::environment(
            "allocate",
            EnvironmentCause::AddressInUse,
            error.to_string(),
        ),
        PoolError::Exhausted { .. } => ProviderError::environment(
            "allocate",
            EnvironmentCause::PoolExhausted,
            error.to_string(),
        ),
        PoolError::InvalidRange { .. } | PoolError::Empty => ProviderError::Internal {
            message: error.to_string(),
            source: Some(Box::new(error)),
        },
    }
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

/// The calls [`LocalProvider::ensure`] would make for `spec`, given what the provider serves
/// (`published`) and what the pool holds; pure, and it mirrors `ensure` branch by branch.
///
/// A load balancer the pool holds but does not serve yet was adopted from its Service's status
/// (a fresh process: the controller after a restart, or `kube-lb plan`): `ensure` only
/// publishes it, without a pool call, so the plan is empty. Its ports were never recorded
/// outside the process that served them, so a port change is visible only to the process
/// that serves the load balancer.
fn plan_ensure_from(
    spec: &LoadBalancerSpec,
    published: Option<&LocalLoadBalancer>,
    pool: &Pool,
) -> Result<Vec<PlannedChange>, PoolError> {
    let service = &spec.service;
    let held = pool.get(service);
    let requested_ok = |ip: IpAddr| spec.requested_ip.is_none_or(|requested| requested == ip);
    if let Some(lb) = published
        && held == Some(lb.ip)
        && requested_ok(lb.ip)
        && *lb == LocalLoadBalancer::new(lb.ip, spec)
    {
        return Ok(Vec::new());
    }
    if published.is_none()
        && let Some(ip) = held
        && requested_ok(ip)
    {
        return Ok(Vec::new());
    }
    let ip = pool.would_allocate(service, spec.requested_ip)?;
    let desired = LocalLoadBalancer::new(ip, spec);
    let change = match published.map(|lb| lb.ip).or(held) {
        None => {
            let create = PlannedChange::new(
                ChangeAction::Create,
                RESOURCE_KIND,
                ip.to_string(),
                ALLOCATE,
            )
            .field("address", None, Some(ip.to_string()))
            .field("ports", None, Some(describe_ports(&desired.ports)));
            match describe_ranges(&desired.source_ranges) {
                Some(ranges) => create.field("sourceRanges", None, Some(ranges)),
                None => create,
            }
        }
        Some(old_ip) => {
            let mut modify = PlannedChange::new(
                ChangeAction::Modify,
                RESOURCE_KIND,
                old_ip.to_string(),
                ALLOCATE,
            );
            if old_ip != ip {
                modify = modify.field("address", Some(old_ip.to_string()), Some(ip.to_string()));
            }
            if let Some(lb) = published {
                if lb.ports != desired.ports {
                    modify = modify.field(
                        "ports",
                        Some(describe_ports(&lb.ports)),
                        Some(describe_ports(&desired.ports)),
                    );
                }
                if lb.source_ranges != desired.source_ranges {
                    modify = modify.field(
                        "sourceRanges",
                        describe_ranges(&lb.source_ranges),
                        describe_ranges(&desired.source_ranges),
                    );
                }
            }
            modify
        }
    };
    Ok(vec![change])
}

/// The calls [`LocalProvider::delete`] would make for `service`: one release of its address.
fn plan_delete_from(
    service: &ServiceKey,
    published: Option<&LocalLoadBalancer>,
    pool: &Pool,
) -> Vec<PlannedChange> {
    pool.get(service)
        .or(published.map(|lb| lb.ip))
        .map(|ip| PlannedChange::new(ChangeAction::Delete, RESOURCE_KIND, ip.to_string(), RELEASE))
        .into_iter()
        .collect()
}

/// Every address the provider holds or serves, with its Service.
fn owned_from(pool: &Pool, published: &LocalLoadBalancers) -> Vec<OwnedResource> {
    let allocations = pool.allocations();
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
    // Served without a pool entry cannot happen through `ensure`; listed all the same, so an
    // audit never hides what the dataplane still serves.
    owned.extend(
        published
            .iter()
            .filter(|(service, _)| !allocations.iter().any(|a| &a.service == *service))
            .map(|(service, lb)| OwnedResource {
                kind: RESOURCE_KIND.to_string(),
                name: lb.ip.to_string(),
                service: service.clone(),
                created: None,
                shared: false,
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
        let service = &spec.service;
        // Backends do not matter here: the local dataplane forwards straight to endpoints.
        let current = self
            .api
            .call(FAMILY, "get", CallKind::Read, || async {
                Ok(self.current(service))
            })
            .await?;
        let held = self.with_pool(|pool| pool.get(service));
        let published = current.is_some();
        if let Some(lb) = current
            && held == Some(lb.ip)
            && spec.requested_ip.is_none_or(|ip| ip == lb.ip)
            && lb == LocalLoadBalancer::new(lb.ip, spec)
        {
            return Ok(lb.status());
        }
        if !published
            && let Some(ip) = held
            && spec.requested_ip.is_none_or(|requested| requested == ip)
        {
            // Adopted at start-up from the Service's status: the pool already holds the
            // address, so a restart's first pass changes nothing and only rebuilds the
            // in-process table the dataplane serves from.
            let lb = LocalLoadBalancer::new(ip, spec);
            self.publish(service, Some(lb.clone()));
            return Ok(lb.status());
        }
        let lb = self
            .api
            .call(FAMILY, ALLOCATE, CallKind::Mutate, || async {
                let ip = self
                    .with_pool(|pool| pool.allocate(service, spec.requested_ip))
                    .map_err(pool_error)?;
                let lb = LocalLoadBalancer::new(ip, spec);
                self.publish(service, Some(lb.clone()));
                Ok(lb)
            })
            .await?;
        tracing::info!(service = %service, provider = PROVIDER_NAME, lb = %lb.ip, "local load balancer ensured");
        Ok(lb.status())
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let exists = self
            .api
            .call(FAMILY, "get", CallKind::Read, || async {
                Ok(self.current(service).is_some()
                    || self.with_pool(|pool| pool.get(service)).is_some())
            })
            .await?;
        if !exists {
            return Ok(());
        }
        self.api
            .call(FAMILY, RELEASE, CallKind::Mutate, || async {
                let released = self.with_pool(|pool| pool.release(service));
                self.publish(service, None);
                if let Some(ip) = released {
                    tracing::info!(service = %service, provider = PROVIDER_NAME, lb = %ip, "local load balancer released");
                }
                Ok(())
            })
            .await
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
        let Some(ip) = status.ingress.iter().find_map(|ingress| ingress.ip) else {
            return Ok(());
        };
        self.api
            .call(FAMILY, "adopt", CallKind::Mutate, || async {
                self.with_pool(|pool| pool.adopt(service, ip))
                    .map_err(pool_error)
            })
            .await
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        _backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        self.api
            .call(FAMILY, "get", CallKind::Read, || async {
                let published = self.current(&spec.service);
                self.with_pool(|pool| plan_ensure_from(spec, published.as_ref(), pool))
                    .map_err(pool_error)
            })
            .await
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        self.api
            .call(FAMILY, "get", CallKind::Read, || async {
                let published = self.current(service);
                Ok(self.with_pool(|pool| plan_delete_from(service, published.as_ref(), pool)))
            })
            .await
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        self.api
            .call(FAMILY, "list", CallKind::Read, || async {
                let published = self.published.borrow().clone();
                Ok(self.with_pool(|pool| owned_from(pool, &published)))
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
            provider: ProviderSpec::Local,
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
            }],
        };
        p.adopt(&old.service, &status).await.unwrap();
        let fresh = p.ensure(&spec("fresh", 80), &[]).await.unwrap();
        assert_eq!(ip_of(&fresh).to_string(), "127.0.0.11");
        assert_eq!(p.ensure(&old, &[]).await.unwrap(), status);
        assert!(p.adopt(&spec("thief", 80).service, &status).await.is_err());
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
        let web = spec("web", 80);
        let mut pool = Pool::new(vec!["127.0.0.10-127.0.0.20".parse().unwrap()]).unwrap();
        pool.allocate(&spec("other", 80).service, None).unwrap();
        let mut held = pool.clone();
        held.allocate(&web.service, None).unwrap();
        let served = LocalLoadBalancer::new(ip("127.0.0.11"), &web);
        let mut restricted = web.clone();
        restricted.source_ranges.cidrs = vec!["10.0.0.0/8".parse().unwrap()];
        let mut requested = web.clone();
        requested.requested_ip = Some(ip("127.0.0.15"));
        let web_8080 = spec("web", 8080);
        let mut taken = web.clone();
        taken.requested_ip = Some(ip("127.0.0.10"));
        // (case, spec, served, pool, expected plan or error class)
        type Case<'a> = (
            &'a str,
            &'a LoadBalancerSpec,
            Option<&'a LocalLoadBalancer>,
            &'a Pool,
            Result<Summary, &'a str>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("in sync", &web, Some(&served), &held, Ok(vec![])),
            (
                "adopted, not served yet: ensure only publishes",
                &web,
                None,
                &held,
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
        for (case, spec, served, pool, want) in cases {
            let got = plan_ensure_from(spec, served, pool)
                .map(|plan| summary(&plan))
                .map_err(|e| pool_error(e).class());
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
    fn pool_error_classes() {
        let ip: IpAddr = "127.0.0.15".parse().unwrap();
        let cases = [
            (
                PoolError::OutsidePool {
                    ip,
                    pool: "127.0.0.10-127.0.0.20".into(),
                },
                "user",
                None,
            ),
            (
                PoolError::InUse {
                    ip,
                    owner: "default/a".into(),
                },
                "environment",
                Some(EnvironmentCause::AddressInUse),
            ),
            (
                PoolError::Exhausted {
                    pool: "127.0.0.10-127.0.0.20".into(),
                },
                "environment",
                Some(EnvironmentCause::PoolExhausted),
            ),
            (PoolError::Empty, "internal", None),
            (
                PoolError::InvalidRange { input: "x".into() },
                "internal",
                None,
            ),
        ];
        for (error, class, cause) in cases {
            let text = error.to_string();
            let converted = pool_error(error);
            assert_eq!(converted.class(), class, "{text}");
            let got = match &converted {
                ProviderError::Environment { cause, .. } => Some(*cause),
                _ => None,
            };
            assert_eq!(got, cause, "{text}");
        }
    }
}

//! Provider harnesses for the shared scenario table: each one starts its own cloud mock (moto's
//! server, the GCE mock, the ARM mock), builds the real provider against it and exposes the
//! few cloud-state reads the scenarios need. Set-up mirrors each provider's own tests, written
//! against the crates' public APIs.

#![allow(clippy::unwrap_used, dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use kube_lb_annotations::{Cloud, LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};
use kube_lb_test_support::ServiceBuilder;

/// The [`Harness`] methods that read alike for every cloud set up through its provider's own
/// test support module (OpenStack, Tencent, Baidu). Expanded inside `impl Harness for X`, where
/// `X` keeps that module's `support::Harness` (the mock `cloud`, the `provider`, its call
/// `counter`) in field `h` and the number of nodes it has handed out in `node_count`, the mock
/// keeps a request journal and has a latency knob, and the module's `harness_with_options`
/// builds the provider from options its `fast_options` start (`ProviderOptions` being the
/// provider's).
macro_rules! harness_through_provider_support {
    () => {
        async fn start() -> Self {
            Self {
                h: support::harness().await,
                node_count: 2,
            }
        }

        async fn start_with_request_timeout(timeout: Duration) -> Self {
            let h = support::harness_with_options(|counter| ProviderOptions {
                request_timeout: timeout,
                ..support::fast_options(counter)
            })
            .await;
            Self { h, node_count: 2 }
        }

        fn retry_policy(&self) -> RetryPolicy {
            support::fast_options(CallCounter::new()).retry
        }

        fn provider(&self) -> &dyn LoadBalancerProvider {
            &self.h.provider
        }

        fn counter(&self) -> CallCounter {
            self.h.counter.clone()
        }

        fn mark(&self) -> usize {
            self.h.cloud.journal().len()
        }

        fn stall(&self, stalled: bool) {
            self.h.cloud.set_latency(super::stall_latency(stalled));
        }
    };
}

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "azure")]
pub mod azure;
#[cfg(feature = "baidu")]
pub mod baidu;
#[cfg(feature = "gcp")]
pub mod gcp;
#[cfg(feature = "openstack")]
pub mod openstack;
#[cfg(feature = "tencent")]
pub mod tencent;

/// The UID of the Service every scenario uses (the load-balancer names derive from it).
pub const UID: &str = "5d4c3b2a-1f0e-4d3c-8b2a-19f8e7d6c5b4";

/// One cloud, started fresh for one test.
pub trait Harness: Sized {
    /// Whose annotations the Service is parsed with.
    const CLOUD: Cloud;

    /// Starts the mock and builds the provider against it.
    fn start() -> impl Future<Output = Self>;

    /// The provider under test.
    fn provider(&self) -> &dyn LoadBalancerProvider;

    /// The counter the provider records every cloud call on.
    fn counter(&self) -> CallCounter;

    /// The backends the Service starts with (instances that exist in the mock).
    fn nodes(&self) -> Vec<BackendNode>;

    /// Makes one more node exist in the cloud and returns it as a backend.
    fn add_node(&mut self) -> impl Future<Output = BackendNode>;

    /// The operations a node added to the backends may legitimately mutate with.
    fn registration_operations(&self) -> &'static [&'static str];

    /// Whether switching `externalTrafficPolicy` with the backends unchanged changes the load
    /// balancer itself (a health check on the health-check node port). False for a cloud whose
    /// load balancer can check only the backend port (Baidu's BLB): Local is then converged
    /// through the backends the controller selects, and the switch alone must cost no call.
    fn traffic_policy_changes_the_load_balancer(&self) -> bool {
        true
    }

    /// The per-cloud annotations the Service carries (kept minimal: the defaults).
    fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    /// Resources in the cloud owned by the Service's load balancer, by kind (empty when
    /// nothing is left).
    fn owned(&self) -> impl Future<Output = Vec<String>>;

    /// Mutating requests the mock itself saw since [`Harness::mark`] (cross-checks the
    /// provider's counter with the server's view where the mock keeps a journal).
    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String>;

    /// A position in the mock's journal (0 where the mock keeps none).
    fn mark(&self) -> usize;

    /// Removes the Service's load balancer behind the provider's back, as an operator
    /// deleting it in the console would, and waits until the cloud no longer shows it.
    fn remove_load_balancer_out_of_band(&self) -> impl Future<Output = ()>;

    /// The Service ports the cloud lets through, as the cloud itself shows them: the load
    /// balancer's listeners (AWS, OpenStack, Baidu, Tencent), its load-balancing rules for the
    /// Service's frontend (Azure), or the Service's firewall (GCP, whose forwarding rule takes
    /// every port).
    fn ports_open(&self) -> impl Future<Output = BTreeSet<u16>>;

    /// Takes `port` away behind the provider's back, as an operator editing the load balancer
    /// in the console would: its listener, its rule, its firewall entry. Waits until the cloud
    /// shows the change.
    fn close_port_out_of_band(&self, port: u16) -> impl Future<Output = ()>;

    /// Where the cloud sends the Service's traffic, as the cloud itself shows it: one entry per
    /// registration (an instance of the CLB or the target pool, a member of a pool, a target of
    /// a listener, an address of the backend pool).
    fn backends(&self) -> impl Future<Output = BTreeSet<String>>;

    /// Removes registration `backend` (one of [`Harness::backends`]) behind the provider's
    /// back, as an operator or a script deregistering a node would, and waits until the cloud
    /// shows it gone.
    fn remove_backend_out_of_band(&self, backend: &str) -> impl Future<Output = ()>;

    /// Starts like [`Harness::start`], with a provider that keeps no read of the cloud from
    /// one sync to the next where it otherwise would (Azure's shared-object cache, whose TTL is
    /// how soon drift behind its back is seen): "the next sync" then means the next one.
    fn start_without_read_cache() -> impl Future<Output = Self> {
        Self::start()
    }

    /// Starts like [`Harness::start`], with a provider that gives up one attempt of any cloud
    /// request after `timeout` (each provider's own request-timeout setting) and can have its
    /// cloud stop answering ([`Harness::stall`]).
    fn start_with_request_timeout(timeout: Duration) -> impl Future<Output = Self>;

    /// The in-place retry policy the provider was built with: how many attempts a request that
    /// gets no answer makes, and the pauses between them.
    fn retry_policy(&self) -> RetryPolicy;

    /// `true`: from now on the cloud accepts every request and never answers it (the mock's
    /// latency knob, or a proxy's, set beyond any test's length); `false`: it answers again.
    /// Requests already held stay unanswered; the client has given them up by then.
    fn stall(&self, stalled: bool);

    /// How many load balancers the cloud holds for the scenario Service (its own, by the name
    /// or tag the provider gives it).
    fn load_balancers_of_the_service(&self) -> impl Future<Output = usize>;
}

/// A latency no test waits out: a request delayed this long is, for the test, never answered.
pub const NEVER: Duration = Duration::from_secs(24 * 3600);

/// The latency a mock's (or proxy's) knob is set to for [`Harness::stall`]: [`NEVER`] while
/// the cloud is stalled, none once it answers again.
pub fn stall_latency(stalled: bool) -> Duration {
    if stalled { NEVER } else { Duration::ZERO }
}

/// The Service every scenario reconciles; built as the API server stores it.
#[derive(Debug, Clone)]
pub struct Svc {
    annotations: BTreeMap<String, String>,
    ports: Vec<(u16, u16)>,
    local_health_port: Option<u16>,
}

impl Svc {
    /// `default/web` with port 80 → node port 30080, externalTrafficPolicy Cluster.
    pub fn new(annotations: BTreeMap<String, String>) -> Svc {
        Svc {
            annotations,
            ports: vec![(80, 30080)],
            local_health_port: None,
        }
    }

    /// Replaces the ports (port, nodePort).
    pub fn ports(mut self, ports: &[(u16, u16)]) -> Svc {
        self.ports = ports.to_vec();
        self
    }

    /// externalTrafficPolicy Local with this healthCheckNodePort.
    pub fn local(mut self, health_port: u16) -> Svc {
        self.local_health_port = Some(health_port);
        self
    }

    /// externalTrafficPolicy Cluster.
    pub fn cluster(mut self) -> Svc {
        self.local_health_port = None;
        self
    }

    /// The Service through the shared test-support builder, to be parsed for `cloud`.
    fn builder(&self, cloud: Cloud) -> ServiceBuilder {
        let names: Vec<String> = self
            .ports
            .iter()
            .map(|(port, _)| format!("p{port}"))
            .collect();
        let ports: Vec<(&str, u16, &str, u16)> = names
            .iter()
            .zip(&self.ports)
            .map(|(name, (port, node_port))| (name.as_str(), *port, "TCP", *node_port))
            .collect();
        let web = ServiceBuilder::new(cloud, "web", UID)
            .selector(&[("app", "web")])
            .ports(&ports);
        let web = match self.local_health_port {
            Some(port) => web.local(port),
            None => web,
        };
        self.annotations
            .iter()
            .fold(web, |web, (key, value)| web.annotate(key, value))
    }

    /// The spec, through the real annotation parser for `cloud`.
    pub fn spec(&self, cloud: Cloud) -> LoadBalancerSpec {
        self.builder(cloud).spec()
    }

    /// The Service's key.
    pub fn key(&self, cloud: Cloud) -> ServiceKey {
        self.spec(cloud).service
    }
}

/// Waits for `condition` to hold, polling, for at most `ceiling`.
pub async fn eventually<F, Fut>(what: &str, ceiling: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    let mut pause = Duration::from_millis(5);
    loop {
        if condition().await {
            return;
        }
        assert!(
            start.elapsed() < ceiling,
            "{what}: not true after {ceiling:?}"
        );
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

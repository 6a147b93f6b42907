//! One scenario table, run against every cloud provider built into this binary: AWS (moto's
//! server), GCP (the GCE mock), Azure (the ARM mock) and OpenStack (the Keystone + Octavia +
//! Neutron mock). Each scenario drives the provider through the `LoadBalancerProvider` trait
//! only, with the same Service parsed by the real annotation parser, and checks the provider's
//! call counter plus the cloud's own state.
//!
//! Run: `cargo test --features aws,gcp,azure --test integration provider_scenarios::`.
//! With `KUBE_LB_SCENARIO_CALLS=<path>` set, every step also appends its mutating calls to that
//! file as a JSON line ([`record`]), to compare two trees with `scripts/scenario-calls-diff.py`.
#![cfg(any(
    feature = "aws",
    feature = "gcp",
    feature = "azure",
    feature = "openstack",
    feature = "baidu",
    feature = "tencent"
))]
#![allow(clippy::unwrap_used)]

mod record;
pub(crate) mod scenarios;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::{
    BackendNode, CallCounter, CallKind, CallSnapshot, LoadBalancerStatus, ProviderError,
    RetryPolicy,
};
use scenarios::{Harness, Svc};

/// Mutating operations recorded since `before`, with their counts.
fn mutated(counter: &CallCounter, before: &CallSnapshot) -> Vec<(String, u64)> {
    counter
        .snapshot()
        .since(before)
        .iter()
        .filter(|(record, count)| record.kind == CallKind::Mutate && *count > 0)
        .map(|(record, count)| (record.operation.to_string(), count))
        .collect()
}

/// Runs `ensure` as the scenario's step `step` ([`record`]) and returns the status plus the
/// mutating operations it made.
async fn ensure<H: Harness>(
    h: &H,
    step: &str,
    svc: &Svc,
    nodes: &[BackendNode],
) -> (LoadBalancerStatus, Vec<(String, u64)>) {
    let counter = h.counter();
    let before = counter.snapshot();
    let mark = h.mark();
    let status = h
        .provider()
        .ensure(&svc.spec(H::CLOUD), nodes)
        .await
        .unwrap_or_else(|e| panic!("{}: {step}: ensure failed: {e}", h.provider().name()));
    let mutations = mutated(&counter, &before);
    record::step(h, step, &mutations, mark);
    (status, mutations)
}

/// Runs `delete` as the scenario's step `step` ([`record`]) and returns the mutating
/// operations it made.
async fn delete<H: Harness>(h: &H, step: &str, key: &ServiceKey) -> Vec<(String, u64)> {
    let counter = h.counter();
    let before = counter.snapshot();
    let mark = h.mark();
    h.provider()
        .delete(key)
        .await
        .unwrap_or_else(|e| panic!("{}: {step}: delete failed: {e}", h.provider().name()));
    let mutations = mutated(&counter, &before);
    record::step(h, step, &mutations, mark);
    mutations
}

fn assert_has_address(status: &LoadBalancerStatus, provider: &str) {
    assert!(
        !status.ingress.is_empty()
            && status
                .ingress
                .iter()
                .all(|i| i.ip.is_some() || i.hostname.as_deref().is_some_and(|h| !h.is_empty())),
        "{provider}: status has no address: {status:?}"
    );
}

/// A resync of an unchanged spec: zero mutating calls by the provider's counter and, where the
/// mock keeps a journal, by the server's own record.
async fn assert_noop_resync<H: Harness>(h: &H, svc: &Svc, nodes: &[BackendNode], when: &str) {
    let mark = h.mark();
    let (status, mutations) = ensure(h, &format!("resync {when}"), svc, nodes).await;
    let name = h.provider().name();
    assert_eq!(
        mutations,
        Vec::<(String, u64)>::new(),
        "{name}: resync {when} mutated"
    );
    assert_eq!(
        h.mutations_seen_by_cloud_since(mark),
        Vec::<String>::new(),
        "{name}: the mock saw mutations on resync {when}"
    );
    assert_has_address(&status, name);
}

async fn create_reports_an_address<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (status, mutations) = ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();
    assert_has_address(&status, name);
    assert!(!mutations.is_empty(), "{name}: create made no calls");
    assert!(!h.owned().await.is_empty(), "{name}: nothing in the cloud");
    // The addresses: `annotations` are what ensure asks the controller to write back on the
    // Service (Tencent's create-time records), not cloud state status() could read.
    assert_eq!(
        h.provider()
            .status(&svc.key(H::CLOUD))
            .await
            .unwrap()
            .map(|s| s.ingress),
        Some(status.ingress),
        "{name}: status() disagrees with ensure()"
    );
}

async fn immediate_resync_makes_no_mutating_call<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, "create", &svc, &h.nodes()).await;
    assert_noop_resync(&h, &svc, &h.nodes(), "after create").await;
    let (again, _) = ensure(&h, "resync again", &svc, &h.nodes()).await;
    assert_eq!(again, first, "{}: address changed", h.provider().name());
}

async fn port_change_converges_and_keeps_the_address<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();

    let changed = svc.clone().ports(&[(80, 30080), (8443, 30443)]);
    let (status, mutations) = ensure(&h, "add a port", &changed, &h.nodes()).await;
    assert!(!mutations.is_empty(), "{name}: a new port made no calls");
    assert_eq!(status, first, "{name}: the address moved on a port change");
    assert_noop_resync(&h, &changed, &h.nodes(), "after adding a port").await;

    let replaced = svc.clone().ports(&[(8443, 30443)]);
    let (status, mutations) = ensure(&h, "replace the ports", &replaced, &h.nodes()).await;
    assert!(
        !mutations.is_empty(),
        "{name}: removing a port made no calls"
    );
    assert_eq!(status, first, "{name}: the address moved on a port removal");
    assert_noop_resync(&h, &replaced, &h.nodes(), "after removing a port").await;
}

async fn node_added_mutates_only_registration<H: Harness>() {
    let mut h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();

    let mut nodes = h.nodes();
    nodes.push(h.add_node().await);
    let (status, mutations) = ensure(&h, "add a node", &svc, &nodes).await;
    assert_eq!(status, first, "{name}: the address moved on a node add");
    assert!(
        !mutations.is_empty(),
        "{name}: the new node was not registered"
    );
    let allowed: BTreeSet<&str> = h.registration_operations().iter().copied().collect();
    let unexpected: Vec<&(String, u64)> = mutations
        .iter()
        .filter(|(op, _)| !allowed.contains(op.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "{name}: a node add mutated more than the registration ({allowed:?}): {mutations:?}"
    );
    assert_noop_resync(&h, &svc, &nodes, "after a node add").await;
}

async fn local_cluster_switch_converges<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let (first, _) = ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();

    let changes_lb = h.traffic_policy_changes_the_load_balancer();
    let local = svc.clone().local(32123);
    let (status, mutations) = ensure(&h, "Cluster to Local", &local, &h.nodes()).await;
    assert_eq!(
        !mutations.is_empty(),
        changes_lb,
        "{name}: Cluster → Local made calls: {mutations:?} (expected some: {changes_lb})"
    );
    assert_eq!(
        status, first,
        "{name}: the address moved on Cluster → Local"
    );
    assert_noop_resync(&h, &local, &h.nodes(), "after Cluster → Local").await;

    let cluster = local.cluster();
    let (status, mutations) = ensure(&h, "Local to Cluster", &cluster, &h.nodes()).await;
    assert_eq!(
        !mutations.is_empty(),
        changes_lb,
        "{name}: Local → Cluster made calls: {mutations:?} (expected some: {changes_lb})"
    );
    assert_eq!(
        status, first,
        "{name}: the address moved on Local → Cluster"
    );
    assert_noop_resync(&h, &cluster, &h.nodes(), "after Local → Cluster").await;
}

async fn delete_removes_everything_and_repeats_freely<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let key = svc.key(H::CLOUD);
    ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();

    delete(&h, "delete", &key).await;
    assert_eq!(h.provider().status(&key).await.unwrap(), None, "{name}");
    assert_eq!(h.owned().await, Vec::<String>::new(), "{name}: left behind");

    let mark = h.mark();
    assert_eq!(
        delete(&h, "delete again", &key).await,
        Vec::<(String, u64)>::new(),
        "{name}: a second delete mutated"
    );
    assert_eq!(
        h.mutations_seen_by_cloud_since(mark),
        Vec::<String>::new(),
        "{name}: the mock saw mutations on a second delete"
    );
}

async fn delete_after_the_load_balancer_vanished_succeeds<H: Harness>() {
    let h = H::start().await;
    let svc = Svc::new(h.annotations());
    let key = svc.key(H::CLOUD);
    ensure(&h, "create", &svc, &h.nodes()).await;
    let name = h.provider().name();

    h.remove_load_balancer_out_of_band().await;
    delete(&h, "delete after the load balancer vanished", &key).await;
    assert_eq!(h.provider().status(&key).await.unwrap(), None, "{name}");
    assert_eq!(
        h.owned().await,
        Vec::<String>::new(),
        "{name}: what the removed LB left behind was not cleaned up"
    );
}

/// Tampering: the load balancer is deleted behind the provider's back (an operator in the
/// console, a cleanup script). The next resync that reads the cloud finds it gone and makes it
/// again, one of it, with an address; the resync after that is a no-op, and a delete leaves
/// nothing.
async fn ensure_after_the_load_balancer_vanished_makes_it_again<H: Harness>() {
    let h = H::start_without_read_cache().await;
    let (created, _) = ensure(&h, "create", &Svc::new(h.annotations()), &h.nodes()).await;
    let name = h.provider().name();
    // The ids the Service now carries (TKE's, CCE's) name a load balancer that will be gone.
    let svc = written_back(&h, &created);
    let key = svc.key(H::CLOUD);

    h.remove_load_balancer_out_of_band().await;
    let (status, mutations) = ensure(&h, "ensure after it vanished", &svc, &h.nodes()).await;
    assert!(
        !mutations.is_empty(),
        "{name}: the resync after an out-of-band removal made no calls"
    );
    assert_has_address(&status, name);
    assert_eq!(
        h.load_balancers_of_the_service().await,
        1,
        "{name}: load balancers for the Service after it was made again"
    );
    assert_noop_resync(
        &h,
        &svc,
        &h.nodes(),
        "after the load balancer was made again",
    )
    .await;
    delete(&h, "delete", &key).await;
    assert_eq!(h.owned().await, Vec::<String>::new(), "{name}: left behind");
}

/// Tampering, in part: one port of the load balancer is closed behind the provider's back (its
/// listener deleted, its rule removed, its firewall entry dropped). The next resync that reads
/// the cloud opens it again at the same address, and the one after is a no-op.
async fn a_port_closed_behind_the_providers_back_is_opened_again<H: Harness>() {
    let h = H::start_without_read_cache().await;
    let both = svc_ports(&[80, 8443]);
    let ports = [(80, 30080), (8443, 30443)];
    let created = Svc::new(h.annotations()).ports(&ports);
    let (first, _) = ensure(&h, "create", &created, &h.nodes()).await;
    let name = h.provider().name();
    assert_eq!(h.ports_open().await, both, "{name}: after create");
    let svc = written_back(&h, &first).ports(&ports);

    h.close_port_out_of_band(8443).await;
    assert_eq!(
        h.ports_open().await,
        svc_ports(&[80]),
        "{name}: the tamper landed"
    );
    let (status, mutations) = ensure(&h, "ensure after a port closed", &svc, &h.nodes()).await;
    assert!(
        !mutations.is_empty(),
        "{name}: the resync after a port was closed made no calls"
    );
    assert_eq!(status.ingress, first.ingress, "{name}: the address moved");
    assert_eq!(
        h.ports_open().await,
        both,
        "{name}: the port was not opened again"
    );
    assert_noop_resync(&h, &svc, &h.nodes(), "after the port was opened again").await;
}

/// The scenario Service as the controller leaves it after an ensure that returned `status`:
/// with the annotations the provider asked to record on it (TKE's and CCE's load-balancer ids,
/// the parameters a CLB was made with).
fn written_back<H: Harness>(h: &H, status: &LoadBalancerStatus) -> Svc {
    let mut annotations = h.annotations();
    annotations.extend(status.annotations.clone());
    Svc::new(annotations)
}

/// Tampering with registration: one backend is removed behind the provider's back (an
/// instance deregistered, a pool member or a listener's target deleted, a pool address
/// dropped). The next resync that reads the cloud registers it again, and the one after is a
/// no-op.
async fn a_backend_removed_behind_the_providers_back_is_registered_again<H: Harness>() {
    let h = H::start_without_read_cache().await;
    let (first, _) = ensure(&h, "create", &Svc::new(h.annotations()), &h.nodes()).await;
    let name = h.provider().name();
    let svc = written_back(&h, &first);
    let registered = h.backends().await;
    assert!(!registered.is_empty(), "{name}: nothing registered");

    let removed = registered.iter().next().unwrap().clone();
    h.remove_backend_out_of_band(&removed).await;
    assert!(
        !h.backends().await.contains(&removed),
        "{name}: the tamper landed"
    );
    let (_, mutations) = ensure(&h, "ensure after a backend removed", &svc, &h.nodes()).await;
    assert!(
        !mutations.is_empty(),
        "{name}: the resync after {removed} was removed made no calls"
    );
    assert_eq!(
        h.backends().await,
        registered,
        "{name}: {removed} was not registered again"
    );
    assert_noop_resync(
        &h,
        &svc,
        &h.nodes(),
        "after the backend was registered again",
    )
    .await;
}

fn svc_ports(ports: &[u16]) -> BTreeSet<u16> {
    ports.iter().copied().collect()
}

/// The request timeout the stalled-cloud scenario builds each provider with: short, yet long
/// enough for moto on a loaded machine to answer a create once the cloud answers again.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// What scheduling on a busy test machine may add to a bound computed from the settings.
const SCHEDULING_SLACK: Duration = Duration::from_secs(1);

/// Longest a call can take when no attempt is ever answered: each of the policy's attempts
/// waits out `timeout`, and between attempts the policy pauses at most its step with the
/// highest jitter.
fn unanswered_call_bound(timeout: Duration, policy: &RetryPolicy) -> Duration {
    let attempts = policy.max_attempts.max(1);
    let pauses: Duration = (0..attempts - 1)
        .map(|retry| policy.delay(retry, 1.0))
        .sum();
    timeout * attempts + pauses
}

/// Runs `call` (an ensure or a delete) against a cloud that has stopped answering and returns
/// its error, checking that it came within the bound the provider's retry policy gives
/// ([`unanswered_call_bound`]), only after every in-place attempt had waited out the timeout
/// (not from a refusal), and that it is transient (the controller backs off and retries; it
/// is not a user error).
async fn fails_in_time<H: Harness, T: std::fmt::Debug>(
    h: &H,
    what: &str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> ProviderError {
    let name = h.provider().name();
    let policy = h.retry_policy();
    let bound = unanswered_call_bound(STALL_TIMEOUT, &policy) + SCHEDULING_SLACK;
    let started = Instant::now();
    // The ceiling only keeps a provider that does hang from hanging the test run.
    let outcome = tokio::time::timeout(bound * 4, call).await;
    let took = started.elapsed();
    let error = match outcome {
        Err(_) => panic!("{name}: {what} against a silent cloud still waiting after {took:?}"),
        Ok(Ok(answer)) => panic!("{name}: {what} succeeded against a silent cloud: {answer:?}"),
        Ok(Err(error)) => error,
    };
    println!(
        "{name}: {what} against a silent cloud failed after {took:?} (bound {bound:?}): {error}"
    );
    assert!(
        took <= bound,
        "{name}: {what} gave up after {took:?}, later than the bound {bound:?}: {error}"
    );
    // Each in-place attempt waited its timeout out: the error is the timeout's, retried as a
    // transient failure, not a refusal that came back at once.
    let waited = STALL_TIMEOUT * policy.max_attempts.max(1);
    assert!(
        took >= waited,
        "{name}: {what} failed after {took:?}, before its attempts could time out \
         ({waited:?}): {error}"
    );
    assert!(
        error.is_transient(),
        "{name}: {what} that got no answer is not transient (class {}): {error}",
        error.class()
    );
    error
}

/// [`fails_in_time`] for `call` made while the cloud has stopped answering: the cloud stalls
/// first (the call's future sends nothing before it is polled) and answers again after.
async fn fails_in_time_while_silent<H: Harness, T: std::fmt::Debug>(
    h: &H,
    what: &str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) {
    h.stall(true);
    fails_in_time(h, what, call).await;
    h.stall(false);
}

async fn a_cloud_that_stops_answering_fails_in_time_then_converges<H: Harness>() {
    let h = H::start_with_request_timeout(STALL_TIMEOUT).await;
    let name = h.provider().name();
    let svc = Svc::new(h.annotations());
    let provider = h.provider();

    // A create into a cloud that has stopped answering: set-up is done, so the provider's
    // first request of the ensure is the first one held.
    let spec = svc.spec(H::CLOUD);
    fails_in_time_while_silent(
        &h,
        "the ensure of a new Service",
        provider.ensure(&spec, &h.nodes()),
    )
    .await;
    let (first, _) = ensure(&h, "create after a stall", &svc, &h.nodes()).await;
    assert_has_address(&first, name);
    assert_eq!(
        h.load_balancers_of_the_service().await,
        1,
        "{name}: load balancers for the Service after the cloud answered again"
    );
    assert_noop_resync(&h, &svc, &h.nodes(), "after the create converged").await;

    // An update of the existing load balancer, same again: it fails in time and converges on
    // the same load balancer, at the same address.
    let changed = svc.clone().ports(&[(80, 30080), (8443, 30443)]);
    let spec = changed.spec(H::CLOUD);
    fails_in_time_while_silent(
        &h,
        "the ensure of a port change",
        provider.ensure(&spec, &h.nodes()),
    )
    .await;
    let (status, _) = ensure(&h, "add a port after a stall", &changed, &h.nodes()).await;
    assert_eq!(status, first, "{name}: the address moved");
    assert_eq!(
        h.load_balancers_of_the_service().await,
        1,
        "{name}: load balancers for the Service after the update converged"
    );
    assert_noop_resync(&h, &changed, &h.nodes(), "after the update converged").await;

    // A delete, same again: once the cloud answers, the next delete removes everything.
    let key = changed.key(H::CLOUD);
    fails_in_time_while_silent(&h, "the delete", provider.delete(&key)).await;
    delete(&h, "delete after a stall", &key).await;
    assert_eq!(provider.status(&key).await.unwrap(), None, "{name}");
    assert_eq!(h.owned().await, Vec::<String>::new(), "{name}: left behind");
}

/// Scenarios × clouds: every scenario becomes one test per cloud, in a module named after
/// the cloud and compiled only with its cargo feature.
macro_rules! scenario_table {
    (
        clouds: [$($cloud:ident => $harness:ty, $feature:literal;)*]
        scenarios: $scenarios:tt
    ) => {
        $(
            #[cfg(feature = $feature)]
            mod $cloud {
                scenario_table!(@tests $cloud, $harness, $scenarios);
            }
        )*
    };
    (@tests $cloud:ident, $harness:ty, [$($scenario:ident),* $(,)?]) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let scenario = super::$scenario::<$harness>();
                super::record::scenario(stringify!($cloud), stringify!($scenario), scenario).await;
            }
        )*
    };
}

scenario_table! {
    clouds: [
        aws => crate::provider_scenarios::scenarios::aws::Aws, "aws";
        gcp => crate::provider_scenarios::scenarios::gcp::Gcp, "gcp";
        azure => crate::provider_scenarios::scenarios::azure::Azure, "azure";
        openstack => crate::provider_scenarios::scenarios::openstack::OpenStack, "openstack";
        baidu => crate::provider_scenarios::scenarios::baidu::Baidu, "baidu";
        tencent => crate::provider_scenarios::scenarios::tencent::Tencent, "tencent";
    ]
    scenarios: [
        create_reports_an_address,
        immediate_resync_makes_no_mutating_call,
        port_change_converges_and_keeps_the_address,
        node_added_mutates_only_registration,
        local_cluster_switch_converges,
        delete_removes_everything_and_repeats_freely,
        delete_after_the_load_balancer_vanished_succeeds,
        ensure_after_the_load_balancer_vanished_makes_it_again,
        a_port_closed_behind_the_providers_back_is_opened_again,
        a_backend_removed_behind_the_providers_back_is_registered_again,
        a_cloud_that_stops_answering_fails_in_time_then_converges,
    ]
}

//! plan ≡ apply for `ensure` and `delete`, as a seeded property: from a random start (a Service ensured or
//! not, then tampered with at the mock behind the provider's back), a random Service edit
//! (ports, protocols, internal/external, annotations, source ranges, Local traffic, nodes, or
//! a new Service under the name of an earlier one that left its load balancer behind) is
//! planned, then ensured. The plan makes no mutating call at the mock; the mutating calls the
//! mock then journals are the plan's phase-1 steps in order and count (all of them when the
//! plan has one phase); and a second plan of the same wish is empty. Then the Service is
//! deleted (after more tampering, at random) the same way: `plan_delete` mutates nothing,
//! `delete`'s mutating calls are its steps, and nothing is left to delete after it.
//!
//! `KUBE_LB_PLAN_SEED=<u64>` replays one scenario; `KUBE_LB_PLAN_SCENARIOS` sets how many
//! run (default 200, 40 when `CI=true`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_mock_openstack::{JournalEntry, MockOpenStack};
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider, PlannedChange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::Method;
use serde_json::json;

use crate::support::{OpenStackSvc, call, harness, nodes, settle, svc, token};

const UID: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";

/// An earlier Service of the same namespace/name, deleted without its load balancer.
const PREVIOUS_UID: &str = "1f0c9d2e-6b2e-11e9-a923-1681be663d3e";

/// The call a mutating request at the mock is, as `PlannedChange::call` names it: method and
/// resource path without ids (`PUT pools/members`).
fn operation(entry: &JournalEntry) -> String {
    let path = entry
        .path
        .trim_start_matches("/load-balancer/v2/lbaas/")
        .trim_start_matches("/load-balancer/v2.0/lbaas/")
        .trim_start_matches("/networking/v2.0/");
    let resources: Vec<&str> = path.split('/').step_by(2).collect();
    format!("{} {}", entry.method, resources.join("/"))
}

/// A planned change's call without the words `kube-lb plan` adds (`?cascade=true (…)`).
fn planned_call(change: &PlannedChange) -> String {
    let call = change.call.as_str();
    let end = call.find(['?', '(']).unwrap_or(call.len());
    call[..end].trim().to_string()
}

/// What a Service asks, drawn at random.
#[derive(Debug, Clone)]
struct Wish {
    /// The Service's UID: another one for an earlier Service of the same name.
    uid: &'static str,
    /// (port, protocol, nodePort)
    ports: Vec<(u16, &'static str, u16)>,
    internal: bool,
    keep_floating_ip: bool,
    lb_method: Option<&'static str>,
    connection_limit: Option<&'static str>,
    ranges: Vec<&'static str>,
    local: bool,
    nodes: Vec<usize>,
}

impl Wish {
    fn spec(&self) -> LoadBalancerSpec {
        let names: Vec<String> = (0..self.ports.len()).map(|i| format!("p{i}")).collect();
        let ports: Vec<(&str, u16, &str, u16)> = names
            .iter()
            .zip(&self.ports)
            .map(|(n, (p, proto, np))| (n.as_str(), *p, *proto, *np))
            .collect();
        let mut s = svc("web", self.uid).ports(&ports);
        if self.internal {
            s = s.internal();
        }
        if self.keep_floating_ip {
            s = s.annotate("loadbalancer.openstack.org/keep-floatingip", "true");
        }
        if let Some(method) = self.lb_method {
            s = s.annotate("loadbalancer.openstack.org/lb-method", method);
        }
        if let Some(limit) = self.connection_limit {
            s = s.annotate("loadbalancer.openstack.org/connection-limit", limit);
        }
        if !self.ranges.is_empty() {
            s = s.source_ranges(&self.ranges);
        }
        if self.local {
            s = s.local(32000);
        }
        s.spec()
    }

    fn nodes(&self) -> Vec<BackendNode> {
        let all = nodes(4);
        self.nodes.iter().map(|i| all[*i].clone()).collect()
    }
}

fn draw_ports(rng: &mut StdRng) -> Vec<(u16, &'static str, u16)> {
    let mut ports = Vec::new();
    for (port, node_ports) in [
        (80, [30080, 30081]),
        (443, [30443, 30444]),
        (53, [30053, 30054]),
    ] {
        if ports.is_empty() && port == 53 || rng.random_bool(0.5) {
            let protocol = if port == 53 && rng.random_bool(0.5) {
                "UDP"
            } else {
                "TCP"
            };
            ports.push((port, protocol, node_ports[rng.random_range(0..2)]));
        }
    }
    ports
}

fn draw_nodes(rng: &mut StdRng) -> Vec<usize> {
    (0..4).filter(|_| rng.random_bool(0.5)).collect()
}

fn draw_wish(rng: &mut StdRng) -> Wish {
    Wish {
        uid: UID,
        ports: draw_ports(rng),
        internal: rng.random_bool(0.25),
        keep_floating_ip: rng.random_bool(0.2),
        lb_method: rng.random_bool(0.2).then_some("SOURCE_IP"),
        connection_limit: rng.random_bool(0.2).then_some("100"),
        ranges: if rng.random_bool(0.3) {
            vec!["10.0.0.0/8"]
        } else {
            Vec::new()
        },
        local: rng.random_bool(0.2),
        nodes: draw_nodes(rng),
    }
}

/// Edits `wish` as a user would between two syncs.
fn edit(rng: &mut StdRng, wish: &Wish) -> Wish {
    let mut next = wish.clone();
    for _ in 0..rng.random_range(0..=3) {
        match rng.random_range(0..8) {
            0 => next.ports = draw_ports(rng),
            1 => next.internal = !next.internal,
            2 => next.keep_floating_ip = !next.keep_floating_ip,
            3 => next.lb_method = next.lb_method.xor(Some("SOURCE_IP")),
            4 => next.connection_limit = next.connection_limit.xor(Some("100")),
            5 => {
                next.ranges = if next.ranges.is_empty() {
                    vec!["10.0.0.0/8", "192.168.0.0/16"]
                } else {
                    Vec::new()
                }
            }
            6 => next.local = !next.local,
            _ => next.nodes = draw_nodes(rng),
        }
    }
    next
}

/// Changes what the mock holds behind the provider's back, as an operator with the
/// `openstack` CLI would; a change the mock refuses is simply not made.
async fn tamper(rng: &mut StdRng, cloud: &MockOpenStack) {
    let token = token(cloud).await;
    for _ in 0..rng.random_range(0..=2) {
        let Some(lb) = cloud.load_balancers().into_iter().next() else {
            return;
        };
        let lb_id = lb["id"].as_str().unwrap().to_string();
        let octavia = "/load-balancer/v2/lbaas";
        match rng.random_range(0..7) {
            0 => {
                if let Some(pool) = cloud.pools().first() {
                    let path = format!("{octavia}/pools/{}", pool["id"].as_str().unwrap());
                    call(cloud, &token, Method::DELETE, &path, None).await;
                }
            }
            1 => {
                if let Some(pool) = cloud.pools().first() {
                    let path = format!("{octavia}/pools/{}/members", pool["id"].as_str().unwrap());
                    let body = json!({"members": []});
                    call(cloud, &token, Method::PUT, &path, Some(body)).await;
                }
            }
            2 => {
                if let Some(pool) = cloud.pools().first() {
                    let path = format!("{octavia}/pools/{}", pool["id"].as_str().unwrap());
                    let body = json!({"pool": {"lb_algorithm": "LEAST_CONNECTIONS"}});
                    call(cloud, &token, Method::PUT, &path, Some(body)).await;
                }
            }
            3 => {
                if let Some(monitor) = cloud.health_monitors().first() {
                    let path = format!(
                        "{octavia}/healthmonitors/{}",
                        monitor["id"].as_str().unwrap()
                    );
                    call(cloud, &token, Method::DELETE, &path, None).await;
                }
            }
            4 => {
                // A floating IP detached by hand.
                if let Some(fip) = cloud.floating_ips().first() {
                    let path = format!(
                        "/networking/v2.0/floatingips/{}",
                        fip["id"].as_str().unwrap()
                    );
                    let body = json!({"floatingip": {"port_id": null}});
                    call(cloud, &token, Method::PUT, &path, Some(body)).await;
                }
            }
            5 => {
                if let Some(listener) = cloud.listeners().first() {
                    let path = format!("{octavia}/listeners/{}", listener["id"].as_str().unwrap());
                    let body = json!({"listener": {"connection_limit": 7}});
                    call(cloud, &token, Method::PUT, &path, Some(body)).await;
                }
            }
            _ => {
                let path = format!("{octavia}/loadbalancers/{lb_id}?cascade=true");
                call(cloud, &token, Method::DELETE, &path, None).await;
            }
        }
        settle(cloud, &token, &lb_id).await;
    }
}

fn mutations(cloud: &MockOpenStack, from: usize) -> Vec<String> {
    cloud.mutations_since(from).iter().map(operation).collect()
}

/// What a scenario exercised, so the run can show it covered each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Plan and apply refused the wish alike, before any change.
    Refused,
    /// Nothing to do.
    NoOp,
    /// One phase of changes.
    OnePhase,
    /// A load balancer created: phase 1, then its floating IP.
    Phases,
    /// An earlier Service's load balancer removed, then the Service's own created.
    Leftover,
}

/// One scenario: an ensure, then the Service deleted; `Err` describes the mismatch.
async fn scenario(seed: u64) -> Result<(Kind, bool), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let h = harness().await;
    // This cluster's identity known, so an earlier Service's load balancer is a leftover to
    // remove rather than someone else's to refuse.
    let provider = h
        .provider
        .clone()
        .with_cluster_id(Some(&"k1".parse().unwrap()));
    let (cloud, provider) = (&h.cloud, &provider);
    let (kind, spec) = ensure_scenario(&mut rng, cloud, provider).await?;
    let removed = delete_scenario(&mut rng, cloud, provider, &spec).await?;
    Ok((kind, removed))
}

/// The Service of `spec` deleted from whatever the ensure left (tampered with again, at
/// random): `plan_delete` makes no mutating call, `delete`'s mutating calls at the mock are
/// its steps in order and count (a delete has one phase), and nothing is left to delete.
/// True when the delete had something to remove.
async fn delete_scenario(
    rng: &mut StdRng,
    cloud: &MockOpenStack,
    provider: &impl LoadBalancerProvider,
    spec: &LoadBalancerSpec,
) -> Result<bool, String> {
    if rng.random_bool(0.5) {
        tamper(rng, cloud).await;
    }
    let service = &spec.service;
    let before_plan = cloud.journal_len();
    let planned = provider
        .plan_delete(service)
        .await
        .map_err(|e| format!("plan_delete failed: {e}"))?;
    let planned_mutations = mutations(cloud, before_plan);
    if !planned_mutations.is_empty() {
        return Err(format!("plan_delete mutated: {planned_mutations:?}"));
    }
    if let Some(later) = planned.iter().find(|c| c.phase > 1) {
        return Err(format!("a delete plans one phase, got {later:?}"));
    }
    let before_apply = cloud.journal_len();
    provider
        .delete(service)
        .await
        .map_err(|e| format!("delete failed: {e}"))?;
    let done = mutations(cloud, before_apply);
    let want: Vec<String> = planned.iter().map(planned_call).collect();
    if done != want {
        return Err(format!(
            "plan_delete: {want:?}\ndelete applied: {done:?}\nplan: {planned:#?}"
        ));
    }
    let again = provider
        .plan_delete(service)
        .await
        .map_err(|e| format!("second plan_delete failed: {e}"))?;
    if !again.is_empty() {
        let calls: Vec<String> = again.iter().map(planned_call).collect();
        return Err(format!("left after delete {done:?}: plans {calls:?}"));
    }
    Ok(!done.is_empty())
}

/// The ensure half of a scenario; returns what it exercised and the Service it ensured.
async fn ensure_scenario(
    rng: &mut StdRng,
    cloud: &MockOpenStack,
    provider: &impl LoadBalancerProvider,
) -> Result<(Kind, LoadBalancerSpec), String> {
    let mut first = draw_wish(rng);
    if rng.random_bool(0.2) {
        // Start from what an earlier Service of this namespace/name left behind.
        first.uid = PREVIOUS_UID;
    }
    if rng.random_bool(0.8) {
        // A start state the provider made; an error here (a refused wish) is a start too.
        let _ = provider.ensure(&first.spec(), &first.nodes()).await;
    }
    tamper(rng, cloud).await;
    let mut next = edit(rng, &first);
    next.uid = UID;
    let (spec, nodes) = (next.spec(), next.nodes());

    let before_plan = cloud.journal_len();
    let planned = provider.plan_ensure(&spec, &nodes).await;
    let planned_mutations = mutations(cloud, before_plan);
    if !planned_mutations.is_empty() {
        return Err(format!("plan mutated: {planned_mutations:?}"));
    }
    let before_apply = cloud.journal_len();
    let applied = provider.ensure(&spec, &nodes).await.map(|_| ());
    let done = mutations(cloud, before_apply);
    let planned = match (planned, applied) {
        (Ok(planned), Ok(())) => planned,
        (Err(p), Err(a)) if p.to_string() == a.to_string() && done.is_empty() => {
            return Ok((Kind::Refused, spec));
        }
        (p, a) => {
            return Err(format!(
                "plan and apply disagree on failing: plan {p:?}, apply {a:?}, applied {done:?}"
            ));
        }
    };
    let first_phase: Vec<&PlannedChange> = planned.iter().filter(|c| c.phase <= 1).collect();
    let single = first_phase.len() == planned.len();
    let want: Vec<String> = first_phase.iter().map(|c| planned_call(c)).collect();
    let got: Vec<String> = if single {
        done.clone()
    } else {
        done.iter().take(want.len()).cloned().collect()
    };
    if got != want {
        return Err(format!(
            "planned (phase 1{}): {want:?}\napplied: {done:?}\nplan: {planned:#?}",
            if single { ", the only one" } else { "" }
        ));
    }
    // Converged: the same wish plans nothing more.
    let again = provider
        .plan_ensure(&spec, &nodes)
        .await
        .map_err(|e| format!("second plan failed: {e}"))?;
    if !again.is_empty() {
        let calls: Vec<String> = again.iter().map(planned_call).collect();
        return Err(format!(
            "not converged after apply {done:?}: plans {calls:?}"
        ));
    }
    let removes = |kind: &str| {
        planned
            .iter()
            .any(|c| c.kind == "LoadBalancer" && c.action.to_string() == kind && c.phase == 1)
    };
    if removes("delete") && removes("create") {
        return Ok((Kind::Leftover, spec));
    }
    let kind = match (planned.is_empty(), single) {
        (true, _) => Kind::NoOp,
        (false, true) => Kind::OnePhase,
        (false, false) => Kind::Phases,
    };
    Ok((kind, spec))
}

#[tokio::test]
async fn what_plan_shows_is_what_ensure_does() {
    let seeds = kube_lb_test_support::plan_scenario_seeds(0);
    let mut failures = Vec::new();
    let mut kinds = std::collections::BTreeMap::new();
    // Deletes by whether they removed anything.
    let mut deletes = std::collections::BTreeMap::new();
    for seed in &seeds {
        match scenario(*seed).await {
            Ok((kind, removed)) => {
                *kinds.entry(kind).or_insert(0) += 1;
                *deletes.entry(removed).or_insert(0) += 1;
            }
            Err(report) => failures.push(format!(
                "seed {seed} (replay: KUBE_LB_PLAN_SEED={seed}):\n{report}"
            )),
        }
    }
    eprintln!("scenarios by kind: {kinds:?}; deletes that removed something: {deletes:?}");
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n\n")
    );
    if seeds.len() >= 40 {
        for kind in [Kind::NoOp, Kind::OnePhase, Kind::Phases, Kind::Leftover] {
            assert!(
                kinds.contains_key(&kind),
                "no scenario of kind {kind:?}: {kinds:?}"
            );
        }
        for removed in [true, false] {
            assert!(
                deletes.contains_key(&removed),
                "no delete that removed {}: {deletes:?}",
                if removed { "something" } else { "nothing" }
            );
        }
    }
}

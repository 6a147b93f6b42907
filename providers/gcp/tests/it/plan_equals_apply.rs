//! plan ≡ apply, as a seeded property: over randomized sequences of Service edits (internal or
//! external, `externalTrafficPolicy` either way, ports, protocols, source ranges), node
//! changes, hand tampering at the mock and deletes, the mutating calls the next `ensure` or
//! `delete` makes — counted at the mock, from its journal — equal the calls its plan lists (its first phase when GCE choosing the IP makes a second),
//! in order and count, and planning itself mutates nothing.
//!
//! `KUBE_LB_PLAN_SEED` replays one scenario; `KUBE_LB_PLAN_SCENARIOS` sets how many run
//! (200 by default, 40 when `CI=true`). A failure prints the seed and both call lists.

// Setup steps of a test panic with their error.
#![allow(clippy::unwrap_used)]

use crate::support::{self, ZONE_A, ZONE_B};

use kube_lb_annotations::{Cloud, LoadBalancerSpec, ServiceKey};
use kube_lb_mock_gce::{JournalEntry, MockGce};
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider, PlannedChange};
use kube_lb_provider_gcp::GcpProvider;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const UIDS: [&str; 2] = [
    "4b2a6798-feb5-11e6-bdea-42010af00000",
    "5c3b7809-feb5-11e6-bdea-42010af00000",
];
const NODES: [(&str, &str); 3] = [
    (ZONE_A, "gke-c1-node-1"),
    (ZONE_B, "gke-c1-node-2"),
    (ZONE_A, "gke-c1-node-3"),
];
const PORTS: [u16; 7] = [80, 443, 8080, 53, 9000, 9001, 9002];
const RANGES: [&[&str]; 3] = [&[], &["192.0.2.0/24"], &["198.51.100.7/32", "192.0.2.0/24"]];

/// The Compute API call a mock journal entry is, in the names `PlannedChange::call` uses
/// (`firewalls.insert`, `instanceGroups.addInstances`, `regionBackendServices.update`).
fn call_name(entry: &JournalEntry) -> String {
    let rest = entry
        .path
        .split_once("/projects/")
        .and_then(|(_, rest)| rest.split_once('/'))
        .map_or(entry.path.as_str(), |(_, rest)| rest);
    let mut parts: Vec<&str> = rest.split('/').collect();
    let regional = parts.first() == Some(&"regions");
    // Drop the scope: `global`, `regions/<r>`, `zones/<z>`.
    let skip = if parts.first() == Some(&"global") {
        1
    } else {
        2
    };
    parts.drain(..skip.min(parts.len()));
    let collection = match parts.first().copied().unwrap_or_default() {
        "backendServices" if regional => "regionBackendServices",
        other => other,
    };
    let verb = match (parts.get(2), entry.method.as_str()) {
        (Some(verb), _) => (*verb).to_string(),
        (None, "POST") => "insert".into(),
        (None, "DELETE") => "delete".into(),
        (None, "PATCH") => "patch".into(),
        (None, "PUT") => "update".into(),
        (None, other) => other.to_ascii_lowercase(),
    };
    format!("{collection}.{verb}")
}

fn service(uid: &str, rng: &mut StdRng) -> (LoadBalancerSpec, String) {
    let protocol = if rng.random_bool(0.2) { "UDP" } else { "TCP" };
    let count = rng.random_range(1..=PORTS.len());
    let start = rng.random_range(0..PORTS.len());
    let ports: Vec<Value> = (0..count)
        .map(|i| {
            let port = PORTS[(start + i) % PORTS.len()];
            json!({"name": format!("p{port}"), "port": port, "nodePort": 30000 + port % 1000,
                   "protocol": protocol, "targetPort": port})
        })
        .collect();
    let mut manifest = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": format!("web-{}", &uid[..4]), "namespace": "default", "uid": uid,
                     "annotations": {}},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster", "ports": ports},
    });
    let internal = rng.random_bool(0.5);
    if internal {
        manifest["metadata"]["annotations"]["networking.gke.io/load-balancer-type"] =
            json!("Internal");
    }
    if rng.random_bool(0.5) {
        manifest["spec"]["externalTrafficPolicy"] = json!("Local");
        manifest["spec"]["healthCheckNodePort"] = json!(31000 + u16::from(uid == UIDS[1]));
    }
    let ranges = RANGES[rng.random_range(0..RANGES.len())];
    if !ranges.is_empty() {
        manifest["spec"]["loadBalancerSourceRanges"] = json!(ranges);
    }
    let parsed: k8s_openapi::api::core::v1::Service = serde_json::from_value(manifest).unwrap();
    let spec = kube_lb_annotations::parse(Cloud::Gcp, &parsed)
        .unwrap()
        .spec;
    let shown = format!(
        "{} {protocol} {:?} {count} ports, ranges {ranges:?}",
        if internal { "internal" } else { "external" },
        spec.traffic_policy,
    );
    (spec, shown)
}

fn nodes(rng: &mut StdRng) -> Vec<BackendNode> {
    let mut picked: Vec<BackendNode> = NODES
        .iter()
        .filter(|_| rng.random_bool(0.6))
        .map(|(zone, name)| support::node(zone, name))
        .collect();
    if picked.is_empty() {
        picked.push(support::node(NODES[0].0, NODES[0].1));
    }
    picked
}

/// Changes or deletes one of the Service's resources directly at the mock, as a person with
/// console access would. Returns what it did, for the failure message.
async fn tamper(gce: &MockGce, lb: &str, rng: &mut StdRng) -> String {
    let base = format!("{}/compute/v1/projects/{}", gce.url(), gce.project());
    let region = gce.region();
    let http = reqwest::Client::new();
    let (what, request) = match rng.random_range(0..4) {
        0 => (
            "delete the traffic firewall",
            http.delete(format!("{base}/global/firewalls/k8s-fw-{lb}")),
        ),
        1 => (
            "narrow the traffic firewall's sources",
            http.patch(format!("{base}/global/firewalls/k8s-fw-{lb}"))
                .json(&json!({"sourceRanges": ["10.9.9.0/24"]})),
        ),
        2 => (
            "delete the forwarding rule",
            http.delete(format!("{base}/regions/{region}/forwardingRules/{lb}")),
        ),
        _ => (
            "remove a node from the target pool",
            http.post(format!(
                "{base}/regions/{region}/targetPools/{lb}/removeInstance"
            ))
            .json(&json!({"instances": [{"instance": format!(
                    "{base}/zones/{ZONE_A}/instances/gke-c1-node-1")}]})),
        ),
    };
    // A tamper of something that does not exist is answered 404 and changes nothing.
    let status = request.send().await.unwrap().status();
    format!("{what} ({status})")
}

/// The calls of the plan's first phase, and whether later phases follow it.
fn planned_calls(plan: &[PlannedChange]) -> (Vec<String>, bool) {
    let first = plan
        .iter()
        .filter(|c| c.phase <= 1)
        .map(|c| c.call.clone())
        .collect();
    (first, plan.iter().any(|c| c.phase > 1))
}

/// What went wrong in one scenario, with the history that led there.
struct Mismatch {
    history: Vec<String>,
    planned: Vec<String>,
    applied: Vec<String>,
    note: &'static str,
}

/// Plans, checks the plan mutated nothing, applies, and compares the mock's calls.
async fn check(
    gce: &MockGce,
    provider: &GcpProvider,
    op: Op<'_>,
    history: &[String],
) -> Result<(), Mismatch> {
    let mark = gce.journal_len();
    let plan = match op {
        Op::Ensure(spec, nodes) => provider.plan_ensure(spec, nodes).await,
        Op::Delete(key) => provider.plan_delete(key).await,
    };
    let plan = plan.unwrap_or_else(|e| panic!("plan failed after {history:?}: {e}"));
    let during_plan: Vec<String> = gce.mutations_since(mark).iter().map(call_name).collect();
    let (planned, later_phases) = planned_calls(&plan);
    if !during_plan.is_empty() {
        return Err(Mismatch {
            history: history.to_vec(),
            planned,
            applied: during_plan,
            note: "planning mutated the cloud",
        });
    }
    let mark = gce.journal_len();
    let result = match op {
        Op::Ensure(spec, nodes) => provider.ensure(spec, nodes).await.map(drop),
        Op::Delete(key) => provider.delete(key).await,
    };
    result.unwrap_or_else(|e| panic!("apply failed after {history:?}: {e}"));
    let applied: Vec<String> = gce.mutations_since(mark).iter().map(call_name).collect();
    // With later phases (GCE chooses the IP), the first phase is exact and the rest is
    // planned again from a new observation: the apply begins with the first phase.
    let matches = match later_phases {
        false => applied == planned,
        true => applied.len() > planned.len() && applied.starts_with(&planned),
    };
    if !matches {
        return Err(Mismatch {
            history: history.to_vec(),
            planned,
            applied,
            note: "the apply's calls differ from the plan",
        });
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Op<'a> {
    Ensure(&'a LoadBalancerSpec, &'a [BackendNode]),
    Delete(&'a ServiceKey),
}

async fn scenario(seed: u64) -> Result<usize, Mismatch> {
    let mut rng = StdRng::seed_from_u64(seed);
    let gce = support::three_node_builder()
        .subnetwork("ilb", "10.200.0.0/24")
        .start()
        .await
        .unwrap();
    let provider = support::provider_for(&gce).await;
    let mut current: [Option<(LoadBalancerSpec, Vec<BackendNode>)>; 2] = [None, None];
    let mut history = Vec::new();
    let mut checked = 0;
    for _ in 0..rng.random_range(3..=7) {
        let which = rng.random_range(0..UIDS.len());
        let uid = UIDS[which];
        let roll = rng.random_range(0..100);
        if roll < 15 && current[which].is_some() {
            let lb = kube_lb_provider_core::naming::load_balancer_name(uid);
            history.push(format!(
                "tamper {which}: {}",
                tamper(&gce, &lb, &mut rng).await
            ));
            // The next pass must see and repair it, through the plan it shows.
            let (spec, nodes) = current[which].clone().unwrap();
            check(&gce, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("resync {which}"));
        } else if roll < 25 && current[which].is_some() {
            let key = current[which].take().unwrap().0.service;
            check(&gce, &provider, Op::Delete(&key), &history).await?;
            history.push(format!("delete {which}"));
        } else if roll < 40 && current[which].is_some() {
            // Node change only.
            let spec = current[which].clone().unwrap().0;
            let nodes = nodes(&mut rng);
            check(&gce, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("nodes {which}: {}", nodes.len()));
            current[which] = Some((spec, nodes));
        } else {
            let (spec, shown) = service(uid, &mut rng);
            let nodes = if rng.random_bool(0.5) {
                current[which]
                    .as_ref()
                    .map_or_else(|| nodes(&mut rng), |(_, n)| n.clone())
            } else {
                nodes(&mut rng)
            };
            check(&gce, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("ensure {which}: {shown}, {} nodes", nodes.len()));
            current[which] = Some((spec, nodes));
        }
        checked += 1;
    }
    // Converged: each Service's resync plans nothing and does nothing.
    for entry in current.iter().flatten() {
        check(&gce, &provider, Op::Ensure(&entry.0, &entry.1), &history).await?;
        checked += 1;
    }
    Ok(checked)
}

#[tokio::test]
async fn the_plan_lists_exactly_the_calls_the_next_pass_makes() {
    let seeds = kube_lb_test_support::plan_scenario_seeds(0);
    let mut checked = 0;
    let mut failures = Vec::new();
    for seed in &seeds {
        match scenario(*seed).await {
            Ok(n) => checked += n,
            Err(m) => failures.push(format!(
                "seed {seed}: {}\n  after: {:?}\n  planned: {:?}\n  applied: {:?}",
                m.note, m.history, m.planned, m.applied
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} scenarios broke plan ≡ apply (replay with KUBE_LB_PLAN_SEED):\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
    assert!(checked >= seeds.len(), "every scenario checked something");
}

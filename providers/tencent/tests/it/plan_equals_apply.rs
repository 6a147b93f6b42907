//! plan ≡ apply, proven against the mock: for randomized start states (Services created with
//! random ports, protocols, source ranges, network kind, traffic policy and nodes; then drift
//! and hand tampering made directly at the cloud), a random next step (a Service edit, node
//! changes, an internal↔external switch, a user's CLB, a retype or delete) is planned and then
//! applied, and the mutating calls the apply makes — counted at the mock, from its journal —
//! are the plan's phase-1 steps, in order and count (all of them when the plan has one
//! phase). `plan` itself makes no mutating call, and a plan that refuses means an apply that
//! writes nothing.
//!
//! `KUBE_LB_PLAN_SEED=<u64>` replays one scenario; `KUBE_LB_PLAN_SCENARIOS` sets how many run
//! (200 by default, 40 when `CI=true`).

#![allow(clippy::unwrap_used)]

use kube_lb_mock_tencent::{MockTencent, SUBNET_ID, SUBNET_ID_2};
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider, PlannedChange};
use kube_lb_provider_tencent::TencentProvider;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::support::{Harness, Svc, harness, node, provider_for_same_cloud, svc};

const SUBNET_KEY: &str = "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid";
const EXISTED_LBID: &str = "service.kubernetes.io/tke-existed-lbid";
const UID: &str = "0c1d2e3f-4a5b-4c6d-8e7f-8a9b0c1d2e3f";

/// The mock journal's action for a planned call: the plan names each change by the API
/// action it makes, so this is the identity — kept as the one place the two are matched.
fn journal_action(change: &PlannedChange) -> String {
    change.call.clone()
}

const PORTS: &[(&str, u16, &str, u16)] = &[
    ("http", 80, "TCP", 30080),
    ("https", 443, "TCP", 30443),
    ("dns", 53, "UDP", 30053),
    ("alt", 8080, "TCP", 30808),
];

/// A random Service: ports (at least one), network kind, source ranges, traffic policy.
fn random_service(rng: &mut StdRng, users_clb: Option<&str>) -> Svc {
    let mut ports: Vec<(&str, u16, &str, u16)> = PORTS
        .iter()
        .copied()
        .filter(|_| rng.random_bool(0.5))
        .collect();
    if ports.is_empty() {
        ports.push(PORTS[rng.random_range(0..PORTS.len())]);
    }
    let mut service = svc("web", UID).ports(&ports);
    if let Some(lb) = users_clb {
        return service.annotate(EXISTED_LBID, lb);
    }
    match rng.random_range(0..3) {
        0 => {}
        1 => service = service.annotate(SUBNET_KEY, SUBNET_ID),
        _ => service = service.annotate(SUBNET_KEY, SUBNET_ID_2),
    }
    match rng.random_range(0..3) {
        0 => {}
        1 => service = service.source_ranges(&["143.231.0.0/16"]),
        _ => service = service.source_ranges(&["10.10.0.0/16", "2001:db8::/32"]),
    }
    if rng.random_bool(0.3) {
        service = service.local(32000);
    }
    service
}

fn random_nodes(rng: &mut StdRng) -> Vec<BackendNode> {
    (1..=5)
        .filter(|_| rng.random_bool(0.6))
        .map(|i| node(&format!("node-{i}"), &format!("10.0.0.{}", 100 + i)))
        .collect()
}

/// The Service with what `ensure` wrote back on it, as the controller records it.
fn written_back(mut service: Svc, annotations: &std::collections::BTreeMap<String, String>) -> Svc {
    for (key, value) in annotations {
        service = service.annotate(key, value);
    }
    service
}

/// One change made by hand at the cloud, through its API as another actor would.
async fn tamper(rng: &mut StdRng, cloud: &MockTencent, hand: &TencentProvider) {
    let client = hand.client();
    let ours: Vec<String> = crate::support::clbs_for(cloud, UID)
        .iter()
        .filter_map(|lb| lb["LoadBalancerId"].as_str().map(str::to_string))
        .collect();
    let Some(lb) = ours.first() else { return };
    let listeners = cloud.listeners(lb);
    let groups: Vec<String> = cloud
        .security_groups()
        .iter()
        .filter_map(|g| g["SecurityGroupId"].as_str().map(str::to_string))
        .collect();
    // Refusals (a group still bound, a listener already gone) are part of the drift.
    match rng.random_range(0..8) {
        0 => {
            if let Some(l) = listeners.get(rng.random_range(0..listeners.len().max(1))) {
                let id = l["ListenerId"].as_str().unwrap_or_default().to_string();
                let _ = client.delete_listeners(lb, &[id]).await;
            }
        }
        1 => {
            for l in &listeners {
                if let Some(t) = l["Targets"].as_array().and_then(|t| t.first()) {
                    let body = json!({"ListenerId": l["ListenerId"], "Port": t["Port"],
                        "EniIp": t["EniIp"]});
                    let _ = client.batch_targets(lb, &[body], false).await;
                    break;
                }
            }
        }
        2 => {
            if let Some(l) = listeners.iter().find(|l| l["Protocol"] == "TCP") {
                let id = l["ListenerId"].as_str().unwrap_or_default();
                cloud.seed_target(lb, id, "ins-foreign", 31999);
            }
        }
        3 => {
            let _ = client.set_load_balancer_security_groups(lb, &[]).await;
        }
        4 => {
            if let Some(id) = groups.first() {
                let open = json!({"Protocol": "ALL", "Port": "ALL", "CidrBlock": "0.0.0.0/0",
                    "Action": "ACCEPT"});
                let _ = client
                    .replace_security_group_policies(id, &[open], &[])
                    .await;
            }
        }
        5 => {
            if let Some(id) = groups.first() {
                let _ = client.set_load_balancer_security_groups(lb, &[]).await;
                let _ = client.delete_security_group(id).await;
            }
        }
        6 => {
            let _ = client.delete_load_balancer(lb).await;
        }
        _ => {
            if let Some(l) = listeners.iter().find(|l| l["Protocol"] == "TCP") {
                let mut body = serde_json::Map::new();
                body.insert("LoadBalancerId".into(), json!(lb));
                body.insert("ListenerId".into(), l["ListenerId"].clone());
                body.insert(
                    "HealthCheck".into(),
                    json!({"HealthSwitch": 1, "CheckType": "HTTP", "CheckPort": 31111,
                        "HttpCheckPath": "/", "HttpCheckDomain": "x", "HttpCheckMethod": "GET",
                        "HttpVersion": "HTTP/1.1", "HttpCode": 2}),
                );
                let _ = client.modify_listener(&body).await;
            }
        }
    }
}

fn mutations_since(cloud: &MockTencent, from: usize) -> Vec<String> {
    cloud
        .mutations_since(from)
        .into_iter()
        .map(|e| e.action)
        .collect()
}

/// One scenario; `Err` describes the mismatch.
async fn scenario(seed: u64) -> Result<Outcome, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let h: Harness = harness().await;
    let hand = provider_for_same_cloud(&h);
    let users_clb = h.cloud.seed_load_balancer(
        "users-clb",
        &[("team", "edge")],
        &[("console", "TCP", 9443)],
    );
    // Start: a Service converged once (or never), then drift.
    let mut service = random_service(&mut rng, None);
    let mut nodes = random_nodes(&mut rng);
    if rng.random_bool(0.85)
        && let Ok(status) = h.provider.ensure(&service.spec(), &nodes).await
    {
        service = written_back(service, &status.annotations);
    }
    for _ in 0..rng.random_range(0..3) {
        tamper(&mut rng, &h.cloud, &hand).await;
    }
    // The next step: an edit, a node change, a switch, a user's CLB, or a delete.
    let delete = rng.random_bool(0.2);
    if !delete {
        match rng.random_range(0..4) {
            0 => nodes = random_nodes(&mut rng),
            1 => {
                let recorded = service.clone();
                service = random_service(&mut rng, None);
                service = carry_records(recorded, service);
            }
            2 => {
                let recorded = service.clone();
                service = carry_records(recorded, random_service(&mut rng, Some(&users_clb)));
            }
            _ => {}
        }
    }
    let before_plan = h.cloud.journal_len();
    let planned = if delete {
        h.provider.plan_delete(&service.key()).await
    } else {
        h.provider.plan_ensure(&service.spec(), &nodes).await
    };
    let during_plan = mutations_since(&h.cloud, before_plan);
    if !during_plan.is_empty() {
        return Err(format!("plan made mutating calls: {during_plan:?}"));
    }
    let before = h.cloud.journal_len();
    let applied = if delete {
        h.provider.delete(&service.key()).await.map(drop)
    } else {
        h.provider.ensure(&service.spec(), &nodes).await.map(drop)
    };
    let made = mutations_since(&h.cloud, before);
    let planned = match planned {
        Ok(planned) => planned,
        Err(refusal) => {
            // A plan that refuses: the apply refuses too, before any write.
            return match (made.is_empty(), applied) {
                (true, Err(_)) => Ok(Outcome::Refused),
                (_, applied) => Err(format!(
                    "plan refused ({refusal}) but apply answered {applied:?} after {made:?}"
                )),
            };
        }
    };
    let first: Vec<String> = planned
        .iter()
        .filter(|c| c.phase <= 1)
        .map(journal_action)
        .collect();
    let single_phase = planned.iter().all(|c| c.phase <= 1);
    let agrees = if single_phase {
        made == first
    } else {
        made.len() >= first.len() && made[..first.len()] == first[..]
    };
    if !agrees {
        return Err(format!(
            "plan (phase 1{}): {first:?}\napply: {made:?}\nplanned: {planned:#?}",
            if single_phase { ", the only one" } else { "" }
        ));
    }
    if let Err(error) = applied {
        // Errors the plan cannot see are the Service's own (a foreign port) only after the
        // steps it listed; anything else is a failure of the flow.
        return Err(format!("apply failed after running the plan: {error}"));
    }
    Ok(if single_phase {
        Outcome::Applied { calls: made.len() }
    } else {
        Outcome::Phased
    })
}

/// What a scenario came to, so the run can show it covered each kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// The plan refused, and so did the apply, with no write.
    Refused,
    /// The plan had a later phase (a CLB created first).
    Phased,
    /// One phase, this many calls.
    Applied { calls: usize },
}

/// `next` with the annotations kube-lb wrote back on `recorded` (the controller keeps them).
fn carry_records(recorded: Svc, mut next: Svc) -> Svc {
    let service = recorded.service();
    for (key, value) in service.metadata.annotations.iter().flatten() {
        if key.contains("loadbalance-id") || key.contains("created-with") {
            next = next.annotate(key, value);
        }
    }
    next
}

#[tokio::test]
async fn the_next_apply_makes_exactly_the_planned_calls() {
    let seeds = kube_lb_test_support::plan_scenario_seeds(0x7e4c_e000);
    let mut outcomes = Vec::new();
    for seed in &seeds {
        match scenario(*seed).await {
            Ok(outcome) => outcomes.push(outcome),
            Err(mismatch) => panic!("plan ≠ apply for KUBE_LB_PLAN_SEED={seed}:\n{mismatch}"),
        }
    }
    if seeds.len() >= 40 {
        // The scenarios reach every kind of plan: refusals, phased creates, changes, no-ops.
        let count = |f: &dyn Fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count();
        let refused = count(&|o| *o == Outcome::Refused);
        let phased = count(&|o| *o == Outcome::Phased);
        let changed = count(&|o| matches!(o, Outcome::Applied { calls } if *calls > 0));
        let idle = count(&|o| *o == Outcome::Applied { calls: 0 });
        eprintln!(
            "{} scenarios: {refused} refused, {phased} phased, {changed} changed, {idle} idle",
            seeds.len()
        );
        assert!(
            refused > 0 && phased > 0 && changed > 0 && idle > 0,
            "{refused} refused, {phased} phased, {changed} changed, {idle} idle"
        );
    }
}

//! plan ≡ apply, as a seeded property: from a random start (a Service ensured or not, then
//! tampered with at the mock), a random next step (a Service edit, node changes, a new UID, a
//! delete) is planned, then done. The plan makes no mutating call at the mock; the mutating
//! calls the mock then journals are the plan's phase-1 steps in order and count (all of them
//! when the plan has one phase); and a second plan of the same wish is empty.
//!
//! `KUBE_LB_PLAN_SEED=<u64>` replays one scenario; `KUBE_LB_PLAN_SCENARIOS` sets how many
//! run (default 200, 40 when `CI=true`).

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_annotations::keys::baidu as key;
use kube_lb_mock_baidu::{JournalEntry, MockBaidu};
use kube_lb_provider_baidu::BaiduProvider;
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, PlannedChange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::support::{node, operator_client, provider_for, svc};

/// The client call a mutating request at the mock is (the names `PlannedChange::call` uses).
fn operation(entry: &JournalEntry) -> String {
    let segments: Vec<&str> = entry.path.trim_matches('/').split('/').collect();
    let query = |word: &str| {
        entry
            .query
            .split('&')
            .any(|p| p.split('=').next() == Some(word))
    };
    let name = match (entry.method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "blb"]) => "blb:CreateLoadBalancer",
        ("PUT", ["v1", "blb", _]) => "blb:UpdateLoadBalancer",
        ("DELETE", ["v1", "blb", _]) => "blb:DeleteLoadBalancer",
        ("POST", ["v1", "blb", _, "TCPlistener"]) => "blb:CreateTCPListener",
        ("POST", ["v1", "blb", _, "UDPlistener"]) => "blb:CreateUDPListener",
        ("PUT", ["v1", "blb", _, "TCPlistener"]) => "blb:UpdateTCPListener",
        ("PUT", ["v1", "blb", _, "UDPlistener"]) => "blb:UpdateUDPListener",
        ("PUT", ["v1", "blb", _, "listener"]) => "blb:DeleteListeners",
        ("POST", ["v1", "blb", _, "backendserver"]) => "blb:AddBackendServers",
        ("PUT", ["v1", "blb", _, "backendserver"]) if query("update") => "blb:UpdateBackendServers",
        ("PUT", ["v1", "blb", _, "backendserver"]) => "blb:RemoveBackendServers",
        ("PUT", ["v1", "blb", _, "securitygroup"]) if query("bind") => "blb:BindSecurityGroups",
        ("PUT", ["v1", "blb", _, "securitygroup"]) => "blb:UnbindSecurityGroups",
        ("POST", ["v1", "eip"]) => "eip:CreateEip",
        ("PUT", ["v1", "eip", _]) if query("bind") => "eip:BindEip",
        ("PUT", ["v1", "eip", _]) => "eip:UnbindEip",
        ("DELETE", ["v1", "eip", _]) => "eip:ReleaseEip",
        ("POST", ["v2", "securityGroup"]) => "bcc:CreateSecurityGroup",
        ("DELETE", ["v2", "securityGroup", "rule", _]) => "bcc:DeleteSecurityGroupRule",
        ("PUT", ["v2", "securityGroup", _]) if query("authorizeRule") => {
            "bcc:AuthorizeSecurityGroupRule"
        }
        ("PUT", ["v2", "securityGroup", _]) => "bcc:RevokeSecurityGroupRule",
        ("DELETE", ["v2", "securityGroup", _]) => "bcc:DeleteSecurityGroup",
        _ => return format!("{} {}?{}", entry.method, entry.path, entry.query),
    };
    name.to_string()
}

/// What a Service asks, drawn at random.
#[derive(Debug, Clone)]
struct Wish {
    uid: String,
    /// (port, protocol, nodePort)
    ports: Vec<(u16, &'static str, u16)>,
    internal: bool,
    reserve: bool,
    eip_name: Option<&'static str>,
    ranges: Vec<&'static str>,
    /// `spec.loadBalancerIP`: a user's EIP seeded at the mock.
    user_eip: Option<String>,
    /// `cce-load-balancer-exist-id`: a user's BLB seeded at the mock.
    exist_id: Option<String>,
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
        let mut s = svc("web", &self.uid).ports(&ports);
        if self.internal {
            s = s.annotate(key::INTERNAL_VPC, "true");
        }
        if self.reserve {
            s = s.annotate(key::RESERVE_LB, "true");
        }
        if let Some(name) = self.eip_name {
            s = s.annotate(key::EIP_NAME, name);
        }
        if let Some(id) = &self.exist_id {
            s = s.annotate(key::EXIST_ID, id);
        }
        if !self.ranges.is_empty() {
            s = s.source_ranges(&self.ranges);
        }
        if let Some(ip) = &self.user_eip {
            s = s.load_balancer_ip(ip);
        }
        s.spec()
    }

    fn nodes(&self) -> Vec<BackendNode> {
        self.nodes.iter().map(|i| node(*i)).collect()
    }
}

const UIDS: [&str; 2] = [
    "11111111-2222-3333-4444-555555555555",
    "66666666-7777-8888-9999-000000000000",
];

fn draw_ports(rng: &mut StdRng) -> Vec<(u16, &'static str, u16)> {
    let mut ports = Vec::new();
    for (port, node_ports) in [
        (80, [30080, 30081]),
        (443, [30443, 30444]),
        (53, [30053, 30054]),
    ] {
        if ports.is_empty() && port == 53 || rng.random_bool(0.5) {
            let protocol = if rng.random_bool(0.3) { "UDP" } else { "TCP" };
            ports.push((port, protocol, node_ports[rng.random_range(0..2)]));
        }
    }
    ports
}

fn draw_nodes(rng: &mut StdRng) -> Vec<usize> {
    (1..=4).filter(|_| rng.random_bool(0.5)).collect()
}

fn draw_wish(rng: &mut StdRng, cloud: &MockBaidu, uid: &str) -> Wish {
    let internal = rng.random_bool(0.25);
    let exist_id = rng
        .random_bool(0.1)
        .then(|| cloud.seed_blb("users-blb", "made by hand"));
    let user_eip = (!internal && rng.random_bool(0.15)).then(|| cloud.seed_eip("users-eip"));
    Wish {
        uid: uid.to_string(),
        ports: draw_ports(rng),
        internal,
        reserve: rng.random_bool(0.15),
        eip_name: rng.random_bool(0.15).then_some("named-eip"),
        ranges: if exist_id.is_none() && rng.random_bool(0.3) {
            match rng.random_range(0..3) {
                0 => vec!["10.0.0.0/8"],
                1 => vec!["10.0.0.0/8", "192.168.0.0/16"],
                _ => vec!["0.0.0.0/0"],
            }
        } else {
            Vec::new()
        },
        user_eip,
        exist_id,
        nodes: draw_nodes(rng),
    }
}

/// Edits `wish` as a user would between two syncs.
fn edit(rng: &mut StdRng, cloud: &MockBaidu, wish: &Wish) -> Wish {
    let mut next = wish.clone();
    for _ in 0..rng.random_range(1..=3) {
        match rng.random_range(0..8) {
            0 => next.ports = draw_ports(rng),
            1 => next.internal = !next.internal,
            2 => {
                next.ranges = match (next.ranges.is_empty(), next.exist_id.is_some()) {
                    (_, true) => Vec::new(),
                    (true, false) => vec!["172.16.0.0/12"],
                    (false, false) if rng.random_bool(0.5) => Vec::new(),
                    (false, false) => vec!["10.0.0.0/8", "172.16.0.0/12"],
                }
            }
            3 => next.nodes = draw_nodes(rng),
            4 => next.reserve = !next.reserve,
            5 => {
                next.user_eip = match next.user_eip {
                    Some(_) => None,
                    None => Some(cloud.seed_eip("users-eip-2")),
                }
            }
            6 => next.eip_name = next.eip_name.xor(Some("named-eip")),
            // A new Service of the same namespace/name: the old one's BLB is a leftover.
            _ if next.exist_id.is_none() => next.uid = UIDS[1].to_string(),
            _ => {}
        }
    }
    if next.internal {
        next.user_eip = None;
    }
    next
}

/// Changes what the mock holds behind the provider's back; a change the mock refuses (a
/// backend already there) is simply not made.
async fn tamper(rng: &mut StdRng, cloud: &MockBaidu) {
    let operator = operator_client(cloud);
    for _ in 0..rng.random_range(0..=2) {
        let blbs = cloud.blbs();
        let Some(blb) = blbs.first() else { return };
        let id = blb["blbId"].as_str().unwrap().to_string();
        match rng.random_range(0..7) {
            0 => {
                if let Some(l) = cloud.listeners(&id).first() {
                    let port = u16::try_from(l["listenerPort"].as_u64().unwrap()).unwrap();
                    operator.delete_listeners(&id, &[port]).await.ok();
                }
            }
            1 => {
                if let Some(b) = cloud.backends(&id).first() {
                    operator
                        .remove_backends(&id, std::slice::from_ref(b))
                        .await
                        .ok();
                }
            }
            2 => {
                operator
                    .add_backends(&id, &["i-stranger1".to_string()])
                    .await
                    .ok();
            }
            3 => {
                let desc = blb["desc"].as_str().unwrap().replace(" reserve-lb", "");
                operator
                    .update_blb(&id, &json!({"desc": format!("{desc} edited")}))
                    .await
                    .ok();
            }
            4 => {
                let ip = blb["publicIp"].as_str().unwrap_or_default();
                if !ip.is_empty() {
                    operator.unbind_eip(ip).await.ok();
                }
            }
            5 => {
                for group in cloud.bound_security_groups(&id) {
                    operator
                        .bind_security_groups(&id, &[group], false)
                        .await
                        .unwrap();
                }
            }
            _ => cloud.remove_blb(&id),
        }
    }
}

/// The calls of `changes`, in order.
fn calls(changes: &[PlannedChange]) -> Vec<String> {
    changes.iter().map(|c| c.call.clone()).collect()
}

fn mutations(cloud: &MockBaidu, from: usize) -> Vec<String> {
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
    /// A BLB created: phase 1, then what depends on it.
    Phases,
}

/// One scenario; `Err` describes the mismatch.
async fn scenario(seed: u64) -> Result<Kind, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let cloud = MockBaidu::builder().start().await.unwrap();
    let provider: BaiduProvider = if rng.random_bool(0.7) {
        provider_for(&cloud, CallCounter::new()).with_cluster_id(Some(&"k1".parse().unwrap()))
    } else {
        provider_for(&cloud, CallCounter::new())
    };
    let first = draw_wish(&mut rng, &cloud, UIDS[0]);
    if rng.random_bool(0.8) {
        // A start state the provider made; an error here (a refused wish) is a start too.
        let _ = provider.ensure(&first.spec(), &first.nodes()).await;
    }
    tamper(&mut rng, &cloud).await;
    let delete = rng.random_bool(0.2);
    let next = edit(&mut rng, &cloud, &first);
    let (spec, nodes) = (next.spec(), next.nodes());

    let before_plan = cloud.journal_len();
    let planned = if delete {
        provider.plan_delete(&spec.service).await
    } else {
        provider.plan_ensure(&spec, &nodes).await
    };
    let planned_mutations = mutations(&cloud, before_plan);
    if !planned_mutations.is_empty() {
        return Err(format!("plan mutated: {planned_mutations:?}"));
    }
    let before_apply = cloud.journal_len();
    let applied = if delete {
        provider.delete(&spec.service).await.map(|_| ())
    } else {
        provider.ensure(&spec, &nodes).await.map(|_| ())
    };
    let done = mutations(&cloud, before_apply);
    let planned = match (planned, applied) {
        (Ok(planned), Ok(())) => planned,
        (Err(p), Err(a)) if p.to_string() == a.to_string() && done.is_empty() => {
            return Ok(Kind::Refused);
        }
        (p, a) => {
            return Err(format!(
                "plan and apply disagree on failing: plan {p:?}, apply {a:?}, applied {done:?}"
            ));
        }
    };
    let first_phase: Vec<PlannedChange> =
        planned.iter().filter(|c| c.phase <= 1).cloned().collect();
    let single = first_phase.len() == planned.len();
    let want = calls(&first_phase);
    let got = if single {
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
    // Converged: the same wish plans nothing more, and a second pass mutates nothing.
    let again = if delete {
        provider.plan_delete(&spec.service).await
    } else {
        provider.plan_ensure(&spec, &nodes).await
    }
    .map_err(|e| format!("second plan failed: {e}"))?;
    if !again.is_empty() {
        return Err(format!(
            "not converged after apply {done:?}: plans {:?}",
            calls(&again)
        ));
    }
    Ok(match (planned.is_empty(), single) {
        (true, _) => Kind::NoOp,
        (false, true) => Kind::OnePhase,
        (false, false) => Kind::Phases,
    })
}

#[tokio::test]
async fn what_plan_shows_is_what_ensure_and_delete_do() {
    let seeds = kube_lb_test_support::plan_scenario_seeds(0);
    let mut failures = Vec::new();
    let mut kinds = std::collections::BTreeMap::new();
    for seed in &seeds {
        match scenario(*seed).await {
            Ok(kind) => *kinds.entry(kind).or_insert(0) += 1,
            Err(report) => failures.push(format!(
                "seed {seed} (replay: KUBE_LB_PLAN_SEED={seed}):\n{report}"
            )),
        }
    }
    eprintln!("scenarios by kind: {kinds:?}");
    assert!(
        failures.is_empty(),
        "{} of {} scenarios differ:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n\n")
    );
    if seeds.len() >= 40 {
        for kind in [Kind::NoOp, Kind::OnePhase, Kind::Phases] {
            assert!(
                kinds.contains_key(&kind),
                "no scenario of kind {kind:?}: {kinds:?}"
            );
        }
    }
}

/// A new Service's plan: the create is phase 1, exactly; the rest waits for the BLB's id.
#[tokio::test]
async fn a_new_blb_is_phase_one_and_the_rest_waits_for_it() {
    let cloud = MockBaidu::builder().start().await.unwrap();
    let provider = provider_for(&cloud, CallCounter::new());
    let wish = svc("web", UIDS[0]).ports(&[("http", 80, "TCP", 30080)]);
    let plan = provider
        .plan_ensure(&wish.spec(), &[node(1)])
        .await
        .unwrap();
    let shown: Vec<(&str, u32, Option<&str>)> = plan
        .iter()
        .map(|c| (c.call.as_str(), c.phase, c.depends_on.as_deref()))
        .collect();
    let later = Some(kube_lb_provider_baidu::flow::WAITS_FOR_BLB);
    assert_eq!(
        shown,
        [
            ("blb:CreateLoadBalancer", 1, None),
            ("blb:CreateTCPListener", 2, later),
            ("blb:AddBackendServers", 2, later),
            ("eip:CreateEip", 2, later),
            ("eip:BindEip", 2, later),
        ]
    );
    assert!(cloud.mutations().is_empty(), "{:?}", cloud.mutations());
}

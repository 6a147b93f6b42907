//! plan ≡ apply, seeded: random Service edits (ports, protocols, internal/external, source
//! ranges, traffic policy), node changes, deletes and hand edits of the shared load balancer
//! and security group at the mock; before each `ensure`/`delete` the plan is rendered, and the
//! writes the mock then receives (its journal, not the provider's counter) must be the plan's
//! first phase in order and count — all of the plan when it has one phase — while planning
//! itself writes nothing. `KUBE_LB_PLAN_SEED` replays one seed; `KUBE_LB_PLAN_SCENARIOS` sets
//! the count (default 200, 40 under `CI=true`).

use kube_lb_mock_azure::SUBSCRIPTION;
use kube_lb_provider_core::{LoadBalancerProvider, PlannedChange};
use serde_json::Value;

use crate::support::*;

/// xorshift64*: seedable and small.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

const UIDS: [&str; 3] = [
    "0b9c1a52-3c55-4d6c-9f39-6f2b8d1e0a01",
    "1c8d2b63-4d66-4e7d-8e4a-7a3c9e2f1b02",
    "2d7e3c74-5e77-4f8e-9f5b-8b4d0f3a2c03",
];

/// The ARM call a journal entry is, in the plan's vocabulary; `None` for what is not a write
/// of an object the provider plans (operation polls, token requests).
fn call_of(method: &str, path: &str) -> Option<String> {
    let kind = if path.contains("/loadBalancers/") {
        "LoadBalancer"
    } else if path.contains("/publicIPAddresses/") {
        "PublicIPAddress"
    } else if path.contains("/networkSecurityGroups/") {
        "NetworkSecurityGroup"
    } else {
        return None;
    };
    match method {
        "PUT" => Some(format!("Put{kind}")),
        "DELETE" => Some(format!("Delete{kind}")),
        _ => None,
    }
}

fn random_service(rng: &mut Rng, index: usize) -> Svc {
    let name = format!("svc-{index}");
    let mut svc = svc(&name, UIDS[index]).without_ports();
    let ports = 1 + rng.below(3);
    for p in 0..ports {
        let protocol = if rng.below(4) == 0 { "UDP" } else { "TCP" };
        let port = [80u16, 443, 8080, 53][rng.below(4) as usize] + p as u16 * 1000;
        svc = svc.add_port(
            &format!("p{p}"),
            port,
            protocol,
            30000 + index as u16 * 10 + p as u16,
        );
    }
    if rng.below(3) == 0 {
        svc = svc.internal();
    }
    match rng.below(4) {
        0 => svc = svc.source_ranges(&["10.0.0.0/8"]),
        1 => svc = svc.source_ranges(&["192.168.0.0/16", "172.16.0.0/12"]),
        _ => {}
    }
    if rng.below(3) == 0 {
        svc = svc.local(32000 + index as u16);
    }
    svc
}

fn lb_id(name: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/loadBalancers/{name}"
    )
}

fn nsg_id() -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/networkSecurityGroups/{NSG}"
    )
}

/// A hand edit of what the provider manages: a rule removed, a probe retimed, a managed
/// security rule removed.
fn tamper(h: &Harness, rng: &mut Rng) {
    let which = rng.below(3);
    let lb = if rng.below(2) == 0 {
        CLUSTER.to_string()
    } else {
        format!("{CLUSTER}-internal")
    };
    match which {
        0 => {
            h.arm.edit(&lb_id(&lb), |body| {
                if let Some(Value::Array(rules)) =
                    body.pointer_mut("/properties/loadBalancingRules")
                {
                    rules.pop();
                }
            });
        }
        1 => {
            h.arm.edit(&lb_id(&lb), |body| {
                if let Some(Value::Array(probes)) = body.pointer_mut("/properties/probes")
                    && let Some(probe) = probes.first_mut()
                {
                    probe["properties"]["intervalInSeconds"] = Value::from(30);
                }
            });
        }
        _ => {
            h.arm.edit(&nsg_id(), |body| {
                if let Some(Value::Array(rules)) = body.pointer_mut("/properties/securityRules") {
                    rules.retain(|r| {
                        !r["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("k8s-azure-lb_"))
                    });
                }
            });
        }
    }
}

fn first_phase(plan: &[PlannedChange]) -> Vec<String> {
    plan.iter()
        .filter(|c| c.phase <= 1)
        .map(|c| c.call.clone())
        .collect()
}

async fn scenario(seed: u64) {
    let mut rng = Rng::new(seed);
    let h = harness().await;
    let mut provider = provider_for(&h.arm, fast_options());
    let mut live = [false; 3];
    for turn in 0..8 {
        let index = rng.below(3) as usize;
        if rng.below(5) == 0 {
            tamper(&h, &mut rng);
            // A hand edit reaches a running provider when its cache of the shared objects
            // expires; `kube-lb plan` and `reconcile` read afresh. Both start cold here, so
            // the plan and the apply see the edit alike.
            provider = provider_for(&h.arm, fast_options());
        }
        let svc = random_service(&mut rng, index);
        let nodes = nodes(1 + rng.below(3) as usize);
        let deleting = live[index] && rng.below(4) == 0;
        let mark = h.arm.journal_len();
        let plan = if deleting {
            provider.plan_delete(&svc.key()).await
        } else {
            provider.plan_ensure(&svc.spec(), &nodes).await
        };
        let planned_writes: Vec<String> = h
            .arm
            .mutations_since(mark)
            .iter()
            .filter_map(|e| call_of(&e.method, &e.path))
            .collect();
        assert!(
            planned_writes.is_empty(),
            "seed {seed} turn {turn}: planning wrote {planned_writes:?}"
        );
        let mark = h.arm.journal_len();
        let applied = if deleting {
            provider.delete(&svc.key()).await
        } else {
            provider.ensure(&svc.spec(), &nodes).await.map(|_| ())
        };
        let writes: Vec<String> = h
            .arm
            .mutations_since(mark)
            .iter()
            .filter_map(|e| call_of(&e.method, &e.path))
            .collect();
        match (&plan, &applied) {
            (Ok(plan), Ok(())) => {
                let first = first_phase(plan);
                let single = plan.iter().all(|c| c.phase <= 1);
                let compared = if single {
                    &writes[..]
                } else {
                    &writes[..first.len().min(writes.len())]
                };
                assert_eq!(
                    first,
                    compared,
                    "seed {seed} turn {turn} (svc-{index}, delete: {deleting}): plan {:#?}\nwrites {:?}",
                    plan.iter()
                        .map(|c| (c.phase, &c.call, &c.name))
                        .collect::<Vec<_>>(),
                    h.arm
                        .mutations_since(mark)
                        .iter()
                        .map(|e| (e.method.clone(), e.path.clone(), e.status))
                        .collect::<Vec<_>>()
                );
            }
            (Err(p), Err(a)) => {
                assert_eq!(p.class(), a.class(), "seed {seed} turn {turn}: {p} vs {a}");
                assert!(
                    writes.is_empty(),
                    "seed {seed} turn {turn}: refused but wrote {writes:?}"
                );
            }
            (p, a) => panic!("seed {seed} turn {turn}: plan {p:?} but apply {a:?}"),
        }
        if applied.is_ok() {
            live[index] = !deleting;
        }
    }
}

#[tokio::test]
async fn plan_equals_apply_over_seeded_scenarios() {
    for seed in kube_lb_test_support::plan_scenario_seeds(0) {
        scenario(seed).await;
    }
}

//! plan ≡ apply, as a seeded property: over randomized sequences of Service edits (Classic ELB
//! or NLB, so kind changes both ways; internal or internet-facing, so scheme changes that
//! recreate; ports, `externalTrafficPolicy`, source ranges, extra tags), node changes, hand
//! tampering through the AWS SDK and deletes, the mutating AWS requests the next `ensure` or
//! `delete` sends — counted at a proxy in front of moto, by service and action — equal the calls
//! its plan lists (its first phase, when a kind change makes a second), in order and count, and
//! planning itself sends no mutating request.
//!
//! The provider runs with `FullResyncSeconds` 0: within that window `ensure` deliberately
//! trusts what it verified last (a resync after hand tampering repairs at the next full resync),
//! while `plan` always reads everything.
//!
//! `KUBE_LB_PLAN_SEED` replays one scenario; `KUBE_LB_PLAN_SCENARIOS` sets how many run
//! (200 by default, 40 when `CI=true`). A failure prints the seed and both call lists.

// Setup steps of a test panic with their error.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_mock_aws::{FaultPlan, FaultProxy, is_mutating};
use kube_lb_provider_aws::AwsProvider;
use kube_lb_provider_core::naming::load_balancer_name;
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider, PlannedChange};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::common::{self, Env, svc};

const PORTS: [u16; 3] = [80, 443, 8080];
const RANGES: [&[&str]; 3] = [&[], &["192.0.2.0/24"], &["198.51.100.7/32", "192.0.2.0/24"]];

/// The AWS API a planned change goes to, by the kind of resource it changes.
fn service_of(change: &PlannedChange) -> &'static str {
    match change.kind.as_str() {
        "ClassicLoadBalancer" | "LoadBalancerPolicy" => "elb",
        "SecurityGroup" | "SecurityGroupRule" => "ec2",
        _ => "elbv2",
    }
}

/// The AWS API a request went to, by its API version.
fn service_of_version(version: &str) -> &'static str {
    match version {
        "2012-06-01" => "elb",
        "2015-12-01" => "elbv2",
        _ => "ec2",
    }
}

/// The mutating requests the proxy saw after the first `from`.
fn mutations(proxy: &FaultProxy, from: usize) -> Vec<String> {
    proxy.seen()[from..]
        .iter()
        .filter(|s| is_mutating(&s.action))
        .map(|s| format!("{}:{}", service_of_version(&s.version), s.action))
        .collect()
}

/// One Service's uid in scenario `seed`: distinct per scenario, so scenarios share one moto.
fn uid(seed: u64, which: usize) -> String {
    // The load balancer name keeps only the first 31 hex digits, so both vary up front.
    format!(
        "{:07x}{which}-feb5-11e6-bdea-42010af00000",
        seed & 0xfff_ffff
    )
}

fn service(uid: &str, which: usize, rng: &mut StdRng) -> (LoadBalancerSpec, String) {
    let nlb = rng.random_bool(0.5);
    let internal = rng.random_bool(0.3);
    let mut builder = svc(&format!("web{which}"), uid);
    let count = rng.random_range(1..=PORTS.len());
    let start = rng.random_range(0..PORTS.len());
    for i in 0..count {
        let port = PORTS[(start + i) % PORTS.len()];
        builder = builder.port(&format!("p{port}"), port, 30000 + port % 1000, "TCP");
    }
    if nlb {
        builder = builder.aws("type", "nlb");
    }
    if internal {
        builder = builder.aws("internal", "true");
    }
    let local = rng.random_bool(0.3);
    if local {
        builder = builder.local(31000 + u16::try_from(which).unwrap());
    }
    let ranges = RANGES[rng.random_range(0..RANGES.len())];
    for range in ranges {
        builder = builder.source_range(range);
    }
    let tagged = rng.random_bool(0.3);
    if tagged {
        builder = builder.aws("additional-resource-tags", "team=edge");
    }
    let shown = format!(
        "{} {} {count} ports, local {local}, ranges {ranges:?}, tagged {tagged}",
        if nlb { "nlb" } else { "clb" },
        if internal { "internal" } else { "external" },
    );
    (builder.spec(), shown)
}

fn nodes(env: &Env, rng: &mut StdRng) -> Vec<BackendNode> {
    let mut picked: Vec<String> = env
        .instances
        .iter()
        .filter(|_| rng.random_bool(0.6))
        .cloned()
        .collect();
    if picked.is_empty() {
        picked.push(env.instances[0].clone());
    }
    env.nodes(&picked)
}

/// Changes one of the Service's resources behind kube-lb's back, as a person with console
/// access would, straight at moto (not through the counting proxy).
async fn tamper(env: &Env, lb: &str, rng: &mut StdRng) -> String {
    match rng.random_range(0..4) {
        0 => {
            let result = env
                .elb
                .deregister_instances_from_load_balancer()
                .load_balancer_name(lb)
                .instances(
                    aws_sdk_elasticloadbalancing::types::Instance::builder()
                        .instance_id(&env.instances[0])
                        .build(),
                )
                .send()
                .await;
            format!("deregister an instance from the ELB ({})", result.is_ok())
        }
        1 => {
            let result = env
                .elb
                .delete_load_balancer_listeners()
                .load_balancer_name(lb)
                .load_balancer_ports(i32::from(PORTS[0]))
                .send()
                .await;
            format!("delete the ELB's port-80 listener ({})", result.is_ok())
        }
        2 => {
            let found = env
                .elbv2
                .describe_load_balancers()
                .names(lb)
                .send()
                .await
                .ok()
                .and_then(|d| d.load_balancers().first().cloned());
            let Some(arn) = found.and_then(|l| l.load_balancer_arn().map(str::to_string)) else {
                return "delete an NLB listener (no NLB)".into();
            };
            let listeners = env
                .elbv2
                .describe_listeners()
                .load_balancer_arn(&arn)
                .send()
                .await
                .unwrap();
            let Some(listener) = listeners
                .listeners()
                .first()
                .and_then(|l| l.listener_arn().map(str::to_string))
            else {
                return "delete an NLB listener (none)".into();
            };
            let result = env
                .elbv2
                .delete_listener()
                .listener_arn(&listener)
                .send()
                .await;
            format!("delete an NLB listener ({})", result.is_ok())
        }
        _ => {
            let rules = env.rules(&env.node_sg).await;
            let Some(rule) = rules.into_iter().find(|r| {
                r.description
                    .as_deref()
                    .is_some_and(|d| d.contains(lb) || d.contains("ELB"))
                    || matches!(&r.source, kube_lb_provider_aws::sg::RuleSource::Group(_))
            }) else {
                return "revoke a node rule (none)".into();
            };
            let result = env
                .ec2
                .revoke_security_group_ingress()
                .group_id(&env.node_sg)
                .ip_permissions(rule.to_permission())
                .send()
                .await;
            format!("revoke node rule {rule} ({})", result.is_ok())
        }
    }
}

/// The calls of the plan's first phase, and whether later phases follow it.
fn planned_calls(plan: &[PlannedChange]) -> (Vec<String>, bool) {
    let first = plan
        .iter()
        .filter(|c| c.phase <= 1)
        .map(|c| format!("{}:{}", service_of(c), c.call))
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

#[derive(Clone, Copy)]
enum Op<'a> {
    Ensure(&'a LoadBalancerSpec, &'a [BackendNode]),
    Delete(&'a ServiceKey),
}

/// Plans, checks the plan mutated nothing, applies, and compares the requests seen.
async fn check(
    proxy: &FaultProxy,
    provider: &AwsProvider,
    op: Op<'_>,
    history: &[String],
) -> Result<(), Mismatch> {
    let mark = proxy.seen().len();
    let plan = match op {
        Op::Ensure(spec, nodes) => provider.plan_ensure(spec, nodes).await,
        Op::Delete(key) => provider.plan_delete(key).await,
    };
    let plan = plan.unwrap_or_else(|e| panic!("plan failed after {history:?}: {e}"));
    let (planned, later_phases) = planned_calls(&plan);
    let during_plan = mutations(proxy, mark);
    if !during_plan.is_empty() {
        return Err(Mismatch {
            history: history.to_vec(),
            planned,
            applied: during_plan,
            note: "planning mutated the cloud",
        });
    }
    let mark = proxy.seen().len();
    let result = match op {
        Op::Ensure(spec, nodes) => provider.ensure(spec, nodes).await.map(drop),
        Op::Delete(key) => provider.delete(key).await,
    };
    result.unwrap_or_else(|e| panic!("apply failed after {history:?}: {e}"));
    let applied = mutations(proxy, mark);
    // With a later phase (a kind change removes the other load balancer first), the first
    // phase is exact and the rest is planned again from a new observation.
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

async fn scenario(env: &Env, proxy: &FaultProxy, seed: u64) -> Result<usize, Mismatch> {
    let mut rng = StdRng::seed_from_u64(seed);
    let sdk = common::sdk_config(&proxy.endpoint()).await;
    let mut config = env.config();
    config.full_resync = Duration::ZERO;
    let provider = AwsProvider::new(&sdk, config, common::CLUSTER);
    let uids = [uid(seed, 0), uid(seed, 1)];
    let mut current: [Option<(LoadBalancerSpec, Vec<BackendNode>)>; 2] = [None, None];
    let mut history = Vec::new();
    let mut checked = 0;
    for _ in 0..rng.random_range(3..=6) {
        let which = rng.random_range(0..uids.len());
        let roll = rng.random_range(0..100);
        if roll < 15 && current[which].is_some() {
            let lb = load_balancer_name(&uids[which]);
            history.push(format!(
                "tamper {which}: {}",
                tamper(env, &lb, &mut rng).await
            ));
            // The next pass must see and repair it, through the plan it shows.
            let (spec, nodes) = current[which].clone().unwrap();
            check(proxy, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("resync {which}"));
        } else if roll < 25 && current[which].is_some() {
            let key = current[which].take().unwrap().0.service;
            check(proxy, &provider, Op::Delete(&key), &history).await?;
            history.push(format!("delete {which}"));
        } else if roll < 40 && current[which].is_some() {
            let spec = current[which].clone().unwrap().0;
            let nodes = nodes(env, &mut rng);
            check(proxy, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("nodes {which}: {}", nodes.len()));
            current[which] = Some((spec, nodes));
        } else {
            let (spec, shown) = service(&uids[which], which, &mut rng);
            let nodes = if rng.random_bool(0.5) {
                current[which]
                    .as_ref()
                    .map_or_else(|| nodes(env, &mut rng), |(_, n)| n.clone())
            } else {
                nodes(env, &mut rng)
            };
            check(proxy, &provider, Op::Ensure(&spec, &nodes), &history).await?;
            history.push(format!("ensure {which}: {shown}, {} nodes", nodes.len()));
            current[which] = Some((spec, nodes));
        }
        checked += 1;
    }
    // Converged: each Service's resync plans nothing and does nothing; then delete, so the
    // next scenario starts from the shared node group as this one found it.
    for entry in current.iter().flatten() {
        check(proxy, &provider, Op::Ensure(&entry.0, &entry.1), &history).await?;
        checked += 1;
    }
    for entry in current.iter().flatten() {
        check(proxy, &provider, Op::Delete(&entry.0.service), &history).await?;
        checked += 1;
    }
    Ok(checked)
}

/// Runs every `SHARES`-th seed from `share` on: the scenarios are split across tests so
/// nextest runs them side by side (each test with its own moto) within its time limit.
const SHARES: usize = 4;

async fn run_share(share: usize) {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::None)
        .await
        .unwrap();
    let all = kube_lb_test_support::plan_scenario_seeds(0);
    // A replayed seed runs in every share, so any one of them reproduces it.
    let seeds: Vec<u64> = if all.len() == 1 {
        all
    } else {
        all.into_iter().skip(share).step_by(SHARES).collect()
    };
    let mut checked = 0;
    let mut failures = Vec::new();
    for seed in &seeds {
        match scenario(&env, &proxy, *seed).await {
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

#[tokio::test]
async fn the_plan_lists_exactly_the_calls_the_next_pass_makes_share_0() {
    run_share(0).await;
}

#[tokio::test]
async fn the_plan_lists_exactly_the_calls_the_next_pass_makes_share_1() {
    run_share(1).await;
}

#[tokio::test]
async fn the_plan_lists_exactly_the_calls_the_next_pass_makes_share_2() {
    run_share(2).await;
}

#[tokio::test]
async fn the_plan_lists_exactly_the_calls_the_next_pass_makes_share_3() {
    run_share(3).await;
}

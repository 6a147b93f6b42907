//! A controller restart with load balancers in sync: the fresh provider (nothing cached) must
//! find nothing to change, read each load balancer's own resources, and look the shared ones
//! (node instances, subnets, the node security group) up once for all Services.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Env, Meter, svc};
use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_provider_aws::AwsProvider;
use kube_lb_provider_core::{BackendNode, CallKind, CallSnapshot, LoadBalancerProvider};

fn uid(n: usize) -> String {
    // The load-balancer name keeps the first 31 hex digits: vary the leading ones.
    format!("{n:08}-0000-4000-8000-7e57a7700000")
}

/// `count` Services named `<prefix><i>`, each with one HTTP port of its own and the AWS
/// annotations `aws`.
fn services(count: usize, prefix: &str, aws: &[(&str, &str)]) -> Vec<LoadBalancerSpec> {
    (0..count)
        .map(|i| {
            let service = aws.iter().fold(
                svc(&format!("{prefix}{i}"), &uid(i)),
                |service, (key, value)| service.aws(key, value),
            );
            service
                .port("http", 80, 30080 + u16::try_from(i).unwrap(), "TCP")
                .spec()
        })
        .collect()
}

/// Ensures `services` with one provider, then again with a fresh one (a restarted
/// controller): returns that provider and the calls of its pass, which changed nothing.
async fn in_sync_after_restart(
    env: &Env,
    services: &[LoadBalancerSpec],
    nodes: &[BackendNode],
) -> (AwsProvider, CallSnapshot) {
    let first = env.provider(env.config());
    for spec in services {
        first.ensure(spec, nodes).await.unwrap();
    }
    let restarted = env.provider(env.config());
    let meter = Meter::new(&restarted);
    for spec in services {
        restarted.ensure(spec, nodes).await.unwrap();
    }
    let pass = meter.take();
    assert_eq!(pass.mutations(), 0, "{pass:?}");
    (restarted, pass)
}

#[tokio::test]
async fn restart_resync_reads_each_classic_elb_and_shared_lookups_once() {
    const N: usize = 12;
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let services = services(N, "svc", &[]);
    let (restarted, pass) = in_sync_after_restart(&env, &services, &nodes).await;
    // A Classic ELB is made of the ELB and its security group. The ELBs named like ours are
    // listed together (one page, tags in batches of 20) and the cluster's groups in one
    // listing shared with the node groups; what is left per ELB is its attributes. Shared
    // lookups once for all Services; no NLB lookup for a Service whose ELB is found.
    let n = N as u64;
    let want: std::collections::BTreeMap<&str, u64> = [
        ("ec2:DescribeInstances", 1),
        ("ec2:DescribeRouteTables", 1),
        ("ec2:DescribeSubnets", 1),
        ("ec2:DescribeSecurityGroups", 1),
        ("elb:DescribeLoadBalancerAttributes", n),
        ("elb:DescribeLoadBalancers", 1),
        ("elb:DescribeTags", n.div_ceil(20)),
    ]
    .into_iter()
    .collect();
    assert_eq!(pass.operations(CallKind::Read), want);
    let per_lb = pass.reads() as f64 / N as f64;
    assert!(
        per_lb <= 2.0,
        "{per_lb:.2} reads per Classic ELB (2 resources)"
    );

    // The listing speaks for each Service once: the next full pass (a change, say) reads the
    // ELB itself again, and a load balancer changed behind its back is seen.
    let meter = Meter::new(&restarted);
    restarted.delete(&services[0].service).await.unwrap();
    restarted.ensure(&services[0], &nodes).await.unwrap();
    let recreated = meter.take();
    assert_eq!(
        recreated
            .operations(CallKind::Mutate)
            .get("elb:CreateLoadBalancer"),
        Some(&1),
        "a Service whose ELB was deleted after the listing gets a new one: {recreated:?}"
    );
}

#[tokio::test]
async fn restart_resync_reads_each_nlb_from_shared_listings() {
    const N: usize = 12;
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let services = services(N, "nlb", &[("type", "nlb")]);
    let (_, pass) = in_sync_after_restart(&env, &services, &nodes).await;
    // An NLB with one port is made of the load balancer, its listener, its target group and
    // two rules in the node security group (client traffic, path-MTU discovery): 5 resources.
    // Load balancers, target groups and their tags are listed together (an NLB found and
    // ours also proves no Classic ELB of the Service is left); per NLB: its listeners, the
    // target group's targets and attributes, and the load balancer's attributes.
    let n = N as u64;
    let want: std::collections::BTreeMap<&str, u64> = [
        ("ec2:DescribeInstances", 1),
        ("ec2:DescribeRouteTables", 1),
        ("ec2:DescribeSubnets", 1),
        ("ec2:DescribeSecurityGroups", 1),
        ("ec2:DescribeVpcs", 1),
        ("elbv2:DescribeLoadBalancers", 1),
        ("elbv2:DescribeTargetGroups", 1),
        ("elbv2:DescribeTags", (2 * n).div_ceil(20)),
        ("elbv2:DescribeListeners", n),
        ("elbv2:DescribeTargetHealth", n),
        ("elbv2:DescribeTargetGroupAttributes", n),
        ("elbv2:DescribeLoadBalancerAttributes", n),
    ]
    .into_iter()
    .collect();
    assert_eq!(pass.operations(CallKind::Read), want);
    let per_lb = pass.reads() as f64 / N as f64;
    assert!(per_lb <= 5.0, "{per_lb:.2} reads per NLB (5 resources)");
}

#[tokio::test]
async fn a_classic_elb_deleted_behind_the_fast_path_is_described_once_and_rebuilt() {
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let spec = services(1, "gone", &[]).remove(0);
    let provider = env.provider(env.config());
    provider.ensure(&spec, &nodes).await.unwrap();
    // Deleted by hand: the verified cache still says in sync, so the next resync takes the
    // fast path, finds nothing, and falls back to the full plan.
    let name = kube_lb_provider_core::naming::load_balancer_name(&spec.service.uid);
    env.elb
        .delete_load_balancer()
        .load_balancer_name(&name)
        .send()
        .await
        .unwrap();
    let meter = Meter::new(&provider);
    provider.ensure(&spec, &nodes).await.unwrap();
    let pass = meter.take();
    assert_eq!(
        pass.operations(CallKind::Mutate)
            .get("elb:CreateLoadBalancer"),
        Some(&1),
        "{pass:?}"
    );
    // The fast path's description is the full plan's: the ELB is described once.
    assert_eq!(
        pass.operations(CallKind::Read)
            .get("elb:DescribeLoadBalancers"),
        Some(&1),
        "{pass:?}"
    );
    env.clb(&name).await;
}

//! A controller restart with load balancers in sync: the fresh provider (nothing cached) must
//! find nothing to change, read each load balancer's own resources, and look the shared ones
//! (node instances, subnets, the node security group) up once for all Services.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Env, Meter, svc};
use kube_lb_provider_core::{CallKind, LoadBalancerProvider};

fn uid(n: usize) -> String {
    // The load-balancer name keeps the first 31 hex digits: vary the leading ones.
    format!("{n:08}-0000-4000-8000-7e57a7700000")
}

#[tokio::test]
async fn restart_resync_reads_each_classic_elb_and_shared_lookups_once() {
    const N: usize = 12;
    let env = Env::start().await;
    let nodes = env.nodes(&env.instances);
    let services: Vec<_> = (0..N)
        .map(|i| {
            svc(&format!("svc{i}"), &uid(i))
                .port("http", 80, 30080 + u16::try_from(i).unwrap(), "TCP")
                .spec()
        })
        .collect();
    let first = env.provider(env.config());
    for spec in &services {
        first.ensure(spec, &nodes).await.unwrap();
    }

    let restarted = env.provider(env.config());
    let meter = Meter::new(&restarted);
    for spec in &services {
        restarted.ensure(spec, &nodes).await.unwrap();
    }
    let pass = meter.take();
    assert_eq!(pass.mutations(), 0, "{pass:?}");
    // Per Classic ELB its own resources: the ELB (description, tags, attributes) and its
    // security group, which one DescribeSecurityGroups reads together with the node groups.
    // Shared lookups once for all Services; no NLB lookup for a Service whose ELB is found.
    let n = N as u64;
    let want: std::collections::BTreeMap<&str, u64> = [
        ("ec2:DescribeInstances", 1),
        ("ec2:DescribeRouteTables", 1),
        ("ec2:DescribeSubnets", 1),
        ("ec2:DescribeSecurityGroups", n),
        ("elb:DescribeLoadBalancerAttributes", n),
        ("elb:DescribeLoadBalancers", n),
        ("elb:DescribeTags", n),
    ]
    .into_iter()
    .collect();
    assert_eq!(pass.operations(CallKind::Read), want);
}

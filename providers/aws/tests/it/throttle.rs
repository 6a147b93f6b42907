//! Throttling: a fault-injecting proxy in front of moto answers every third request with AWS's
//! throttling error (EC2 `RequestLimitExceeded` / ELB `Throttling`). The provider converges
//! anyway, the requests that reach the proxy never exceed the configured per-family rate, and
//! every request that reached it (retries included) is counted once on the core call counter.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, svc};
use kube_lb_mock_aws::{FaultPlan, FaultProxy, Seen};
use kube_lb_provider_aws::calls::Family;
use kube_lb_provider_aws::{AwsProvider, RateLimit, RetryPolicy};
use kube_lb_provider_core::{CallKind, LoadBalancerProvider};

const PER_SECOND: f64 = 5.0;
const BURST: u32 = 2;

fn family(seen: &Seen) -> &'static str {
    let service = match seen.version.as_str() {
        "2016-11-15" => "ec2",
        "2012-06-01" => "elb",
        _ => "elbv2",
    };
    let access = if seen.action.starts_with("Describe") {
        "read"
    } else {
        "mutate"
    };
    match (service, access) {
        ("ec2", "read") => "ec2-read",
        ("ec2", _) => "ec2-mutate",
        ("elb", "read") => "elb-read",
        ("elb", _) => "elb-mutate",
        (_, "read") => "elbv2-read",
        _ => "elbv2-mutate",
    }
}

/// Every window [t_i, t_j] holds at most burst + rate·(t_j − t_i) requests (one extra allowed
/// for the gap between the limiter releasing a request and the proxy timestamping it).
fn assert_within_rate(seen: &[Seen]) {
    let mut by_family: BTreeMap<&str, Vec<std::time::Instant>> = BTreeMap::new();
    for s in seen {
        by_family.entry(family(s)).or_default().push(s.at);
    }
    for (name, times) in by_family {
        for i in 0..times.len() {
            for j in i..times.len() {
                let span = times[j].duration_since(times[i]).as_secs_f64();
                let allowed = f64::from(BURST) + PER_SECOND * span + 1.0;
                let count = (j - i + 1) as f64;
                assert!(
                    count <= allowed,
                    "{name}: {count} requests within {span:.3}s exceed {PER_SECOND}/s burst {BURST}"
                );
            }
        }
    }
}

#[tokio::test]
async fn converges_through_throttling_without_exceeding_the_rate() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::ThrottleEvery(3))
        .await
        .unwrap();
    let sdk = common::sdk_config(&proxy.endpoint()).await;
    let mut config = env.config();
    for f in Family::ALL {
        config.rate_limits = config.rate_limits.with_family(
            f.name(),
            RateLimit {
                per_second: PER_SECOND,
                burst: BURST,
            },
        );
    }
    config.retry = RetryPolicy {
        max_attempts: 6,
        base: Duration::from_millis(20),
        max: Duration::from_millis(200),
    };
    let provider = AwsProvider::new(&sdk, config, common::CLUSTER);

    let clb = svc("web", "10000000-0000-0000-0000-000000000001")
        .port("http", 80, 30080, "TCP")
        .spec();
    let nlb = svc("api", "20000000-0000-0000-0000-000000000002")
        .port("tcp", 443, 30443, "TCP")
        .aws("type", "nlb")
        .spec();
    let nodes = env.nodes(&env.instances);
    for spec in [&clb, &nlb] {
        if let Err(error) = provider.ensure(spec, &nodes).await {
            let trace: Vec<String> = proxy
                .seen()
                .iter()
                .map(|s| {
                    format!(
                        "{}{}",
                        s.action,
                        if s.injected { " (throttled)" } else { "" }
                    )
                })
                .collect();
            panic!("{error}\nrequests: {trace:#?}");
        }
    }
    let counter = provider.call_counter();
    let created = counter.snapshot();
    let seen = proxy.seen();
    let throttled = seen.iter().filter(|s| s.injected).count();
    assert!(throttled > 0, "the proxy must have throttled some calls");
    // Every attempt that reached AWS, the throttled ones and their retries included, is
    // counted exactly once, under the operation's label.
    assert_eq!(created.total(), seen.len() as u64, "{created:?}");
    for s in &seen {
        let counted = created
            .iter()
            .filter(|(record, _)| record.operation.ends_with(&format!(":{}", s.action)))
            .count();
        assert!(counted > 0, "{} reached AWS but was not counted", s.action);
    }
    assert!(created.operation("elb:CreateLoadBalancer") >= 1);
    assert!(created.operation("elbv2:CreateLoadBalancer") >= 1);
    // Exactly the throttled answers are counted as throttled (kube_lb_cloud_throttled_total).
    let counted: u64 = counter.throttled().values().sum();
    assert_eq!(counted, throttled as u64, "{:?}", counter.throttled());

    // Converged despite the faults: a resync changes nothing.
    provider.ensure(&clb, &nodes).await.unwrap();
    provider.ensure(&nlb, &nodes).await.unwrap();
    let resync = counter.snapshot().since(&created);
    assert_eq!(
        resync.mutations(),
        0,
        "{:?}",
        resync.operations(CallKind::Mutate)
    );

    let seen = proxy.seen();
    assert!(
        seen.iter().any(|s| s.injected && s.version == "2016-11-15"),
        "EC2 throttled"
    );
    assert!(
        seen.iter().any(|s| s.injected && s.version != "2016-11-15"),
        "ELB throttled"
    );
    assert_within_rate(&seen);

    provider.delete(&clb.service).await.unwrap();
    provider.delete(&nlb.service).await.unwrap();
    assert!(provider.status(&clb.service).await.unwrap().is_none());
    assert!(provider.status(&nlb.service).await.unwrap().is_none());
}

/// The shared call path on its own: with every second request throttled, each call succeeds on
/// its retry, and both attempts are counted under the operation's label.
#[tokio::test]
async fn throttled_calls_are_retried_in_place_and_every_attempt_is_counted() {
    let env = Env::start().await;
    let proxy = FaultProxy::start(env.moto.addr(), FaultPlan::ThrottleEvery(2))
        .await
        .unwrap();
    let sdk = common::sdk_config(&proxy.endpoint()).await;
    let mut config = env.config();
    config.retry = RetryPolicy {
        max_attempts: 3,
        base: Duration::from_millis(10),
        max: Duration::from_millis(20),
    };
    let provider = AwsProvider::new(&sdk, config, common::CLUSTER);
    let clients = provider.clients();
    for _ in 0..3 {
        clients
            .calls
            .run(kube_lb_provider_aws::calls::ops::DESCRIBE_VPCS, || {
                clients.ec2.describe_vpcs().send()
            })
            .await
            .unwrap();
    }
    let calls = provider.call_counter().snapshot();
    let seen = proxy.seen();
    // Requests 2 and 4 were throttled and retried as requests 3 and 5.
    assert_eq!(seen.iter().filter(|s| s.injected).count(), 2);
    assert_eq!(calls.operation("ec2:DescribeVpcs"), 5, "{calls:?}");
    assert_eq!(calls.total(), seen.len() as u64);
}

//! Throttling: a fault-injecting proxy in front of moto answers every third request with AWS's
//! throttling error (EC2 `RequestLimitExceeded` / ELB `Throttling`). The provider converges
//! anyway, and the requests that reach the proxy never exceed the configured per-family rate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Env, svc};
use kube_lb_mock_aws::{FaultPlan, FaultProxy, Seen};
use kube_lb_provider_aws::calls::Family;
use kube_lb_provider_aws::{AwsProvider, RateLimit, RetryPolicy};
use kube_lb_provider_core::LoadBalancerProvider;

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
        config.rate_limits.set(
            f,
            RateLimit {
                per_second: PER_SECOND,
                burst: BURST,
            },
        );
    }
    config.retry = RetryPolicy {
        max_attempts: 6,
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(200),
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
    provider.ensure(&clb, &nodes).await.unwrap();
    provider.ensure(&nlb, &nodes).await.unwrap();
    let stats = provider.take_calls();
    assert!(
        stats.retried > 0,
        "the proxy must have throttled some calls: {stats:?}"
    );

    // Converged despite the faults: a resync changes nothing.
    provider.ensure(&clb, &nodes).await.unwrap();
    provider.ensure(&nlb, &nodes).await.unwrap();
    assert_eq!(provider.take_calls().mutations, 0);

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

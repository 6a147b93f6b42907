//! What a no-op `ensure` of one Service costs as the cluster's shared objects grow (issue 13
//! item 10): every Service is a frontend, a rule and a probe of one of the two shared load
//! balancers, a destination of the shared security rules, and (when public) one of the listed
//! public IPs, so anything a Service's sync copies or rebuilds whole grows with the number of
//! Services, and a pass over all of them with its square.
//!
//! The measurement is ignored by default (it sets up hundreds of Services); run it with
//!
//! ```text
//! KUBE_LB_RESYNC_SIZES=100,300 cargo nextest run --workspace --all-features \
//!   -E 'package(kube-lb-provider-azure) and test(no_op_ensure_cost)' --run-ignored only --no-capture
//! ```
//!
//! (1,000 Services take longer to set up than nextest's 5-minute limit: run the same build with
//! `cargo test --workspace --all-features --test resync_cost -- --ignored --nocapture`.)
//!
//! It prints, per size, the CPU time (user + system, whole process, 10 ms resolution) and wall
//! time per Service of the first pass after a restart (nothing cached: a few reads, then cache
//! hits) and of the following passes (everything cached; `KUBE_LB_RESYNC_REPEAT` of them,
//! default 3, averaged), and checks that no pass makes a mutating call. No latency is added:
//! the figures are the provider's own work.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::time::{Duration, Instant};

use kube_lb_annotations::LoadBalancerSpec;
use kube_lb_mock_azure::MockArm;
use kube_lb_provider_azure::{AzureConfig, AzureProvider};
use kube_lb_provider_core::{BackendNode, LoadBalancerProvider};
use support::*;

/// Process CPU time (user + system) from `/proc/self/stat`, in clock ticks of 10 ms (Linux's
/// `USER_HZ` is 100 on every architecture Rust targets), or `None` elsewhere.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name, which may itself contain spaces.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Ensures every spec in order; returns (CPU, wall) spent.
async fn pass(
    provider: &AzureProvider,
    specs: &[LoadBalancerSpec],
    nodes: &[BackendNode],
) -> (Duration, Duration) {
    let (cpu, wall) = (cpu_time().unwrap_or_default(), Instant::now());
    for spec in specs {
        provider.ensure(spec, nodes).await.unwrap();
    }
    (
        cpu_time().unwrap_or_default().saturating_sub(cpu),
        wall.elapsed(),
    )
}

fn per_service(total: Duration, n: usize) -> String {
    let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    format!("{:>9.1} µs", (total / n).as_secs_f64() * 1e6)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: sets up hundreds of Services; run explicitly (see the header)"]
async fn no_op_ensure_cost_per_service() {
    let sizes: Vec<usize> = std::env::var("KUBE_LB_RESYNC_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 300]);
    let nodes = nodes(3);
    println!(
        "{:>6} | {:>12} {:>12} | {:>12} {:>12} | setup",
        "N", "1st cpu/svc", "1st wall/svc", "next cpu/svc", "next wall/svc"
    );
    for n in sizes {
        let arm = MockArm::builder()
            .subnet(RG, VNET, "10.224.0.0/12", "nodes", "10.224.0.0/16")
            .security_group(RG, NSG)
            .public_ip_pool("20.50.0.0/16".parse().unwrap())
            .start()
            .await
            .unwrap();
        let config: AzureConfig = serde_json::from_value(config_json(&arm.url())).unwrap();
        // Half internal, as bench/resync.rs: each load balancer holds about N/2 Services.
        let specs: Vec<LoadBalancerSpec> = (0..n)
            .map(|i| {
                let s = svc(
                    &format!("svc-{i}"),
                    &format!("{i:08x}-5e5e-4c4c-8a8a-000000000000"),
                );
                if i % 2 == 1 { s.internal() } else { s }.spec()
            })
            .collect();
        let setup_started = Instant::now();
        let setup = AzureProvider::new(&config, CLUSTER, fast_options()).unwrap();
        pass(&setup, &specs, &nodes).await;
        let setup_time = setup_started.elapsed();
        // Progress (setting up 1,000 Services takes minutes), and a mark to attach a profiler.
        eprintln!(
            "{n} Services set up in {:.1}s; measuring",
            setup_time.as_secs_f64()
        );

        // A restart: nothing cached.
        let restarted = AzureProvider::new(&config, CLUSTER, fast_options()).unwrap();
        let first = pass(&restarted, &specs, &nodes).await;
        let repeat: u32 = std::env::var("KUBE_LB_RESYNC_REPEAT")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(3)
            .max(1);
        let mut second = (Duration::ZERO, Duration::ZERO);
        for _ in 0..repeat {
            let (cpu, wall) = pass(&restarted, &specs, &nodes).await;
            second = (second.0 + cpu / repeat, second.1 + wall / repeat);
        }
        let calls = restarted.calls().snapshot();
        assert_eq!(
            calls.mutations(),
            0,
            "a pass over Services in sync writes nothing"
        );
        println!(
            "{n:>6} | {} {} | {} {} | {:.1}s, {} reads in all passes",
            per_service(first.0, n),
            per_service(first.1, n),
            per_service(second.0, n),
            per_service(second.1, n),
            setup_time.as_secs_f64(),
            calls.reads(),
        );
    }
}

//! Opt-in record of the mutating calls each scenario step makes, for comparing two trees
//! (issue 36: per scenario, mutating calls are equal or fewer after a change).
//!
//! With `KUBE_LB_SCENARIO_CALLS=<path>` set, every `ensure` and `delete` a scenario makes
//! through the table's helpers appends one JSON line to `<path>`:
//!
//! ```json
//! {"calls":{"ec2:AuthorizeSecurityGroupIngress":1,"elb:CreateLoadBalancerListeners":1},
//!  "cloud":"aws","label":"add a port","scenario":"port_change_converges_and_keeps_the_address",
//!  "seen_by_cloud":null,"step":2,"total":2}
//! ```
//!
//! `calls` are the provider's counter ([`super::mutated`]); `seen_by_cloud` counts the mutating
//! requests the mock's own journal saw in the step (`null` for a mock that keeps none: moto).
//! Steps are numbered from 1 within a scenario. Lines are appended, one write each, so
//! parallel test processes can share the file. Without the variable nothing is read or
//! written. `scripts/scenario-calls-diff.py` tables two such files against each other.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::scenarios::Harness;

/// The variable naming the file to append to.
const VAR: &str = "KUBE_LB_SCENARIO_CALLS";

/// The scenario running in this test: whose table row it is, and how many steps it recorded.
struct Scenario {
    cloud: &'static str,
    name: &'static str,
    steps: AtomicUsize,
}

tokio::task_local! {
    static SCENARIO: Scenario;
}

/// Runs `scenario` (row `name` of the table, for `cloud`) with its steps recorded under that
/// name.
pub(super) async fn scenario<F: Future>(
    cloud: &'static str,
    name: &'static str,
    scenario: F,
) -> F::Output {
    let steps = AtomicUsize::new(0);
    SCENARIO
        .scope(Scenario { cloud, name, steps }, scenario)
        .await
}

/// Records one step: `calls` as the provider's counter has them, the mock's view from its
/// journal position `mark` on. Does nothing without [`VAR`] or outside [`scenario`].
pub(super) fn step<H: Harness>(h: &H, label: &str, calls: &[(String, u64)], mark: usize) {
    let Some(path) = std::env::var_os(VAR) else {
        return;
    };
    // `mark` is 0 only where the mock keeps no journal, or before a first request.
    let seen_by_cloud =
        (mark > 0 || h.mark() > 0).then(|| h.mutations_seen_by_cloud_since(mark).len());
    let mut by_operation = BTreeMap::<&str, u64>::new();
    for (operation, n) in calls {
        *by_operation.entry(operation).or_default() += n;
    }
    let Ok(mut line) = SCENARIO.try_with(|s| {
        serde_json::json!({
            "cloud": s.cloud,
            "scenario": s.name,
            "step": s.steps.fetch_add(1, Ordering::Relaxed) + 1,
            "label": label,
            "calls": by_operation,
            "total": calls.iter().map(|(_, n)| n).sum::<u64>(),
            "seen_by_cloud": seen_by_cloud,
        })
        .to_string()
    }) else {
        return;
    };
    line.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .unwrap_or_else(|e| panic!("{VAR}={}: {e}", path.to_string_lossy()));
}

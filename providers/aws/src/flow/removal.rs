//! The steps that remove the other kind of load balancer (or, in `delete`, both).

use crate::delete::{ClbSide, NlbSide};
use crate::steps::{self, AwsStep};

/// The steps that remove an NLB side: listeners, target groups, node rules, the NLB last (the
/// anchor by which an interrupted removal is found again).
pub(crate) fn nlb_side_steps(name: &str, side: &NlbSide) -> Vec<AwsStep> {
    let mut out: Vec<AwsStep> = side
        .listeners
        .iter()
        .filter_map(|l| {
            l.listener_arn()
                .map(|arn| steps::remove_listener_step(name, arn, l.port()))
        })
        .collect();
    out.extend(
        side.target_groups
            .iter()
            .map(|arn| steps::remove_target_group_step(arn)),
    );
    if let Some(node_rules) = &side.node_rules {
        out.extend(steps::rule_steps(node_rules));
    }
    if let Some(arn) = &side.arn {
        out.push(steps::delete_nlb_step(name, arn));
    }
    out
}

/// The rule revocations of a Classic ELB side, in the order they are applied.
pub(crate) fn clb_side_revokes(side: &ClbSide) -> Vec<AwsStep> {
    side.rule_plans.iter().flat_map(steps::rule_steps).collect()
}

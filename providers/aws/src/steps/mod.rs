//! The AWS plan as steps for the core driver ([`kube_lb_provider_core::converge`]): one
//! [`AwsStep`] per mutating call, each carrying the change `kube-lb plan` shows for it (the
//! call, the resource and every field it changes old → new). Pure: the steps are built from
//! the pure planners' actions (`clb::plan`, `nlb::plan`, `sg::diff_rules`,
//! `nodes::plan_node_groups`) and what was observed, and the flows (`flow`, `delete`) both
//! execute them (`ensure`, `delete`) and render them (`kube-lb plan`).
//!
//! A recreate is planned as two steps (the delete, then the create) and target registrations
//! are split into AWS's batches of 100, so every step is exactly one call.

use std::collections::BTreeMap;

use kube_lb_provider_core::converge::Step;
use kube_lb_provider_core::{ChangeAction, PlannedChange};

use crate::audit::{KIND_CLB, KIND_NLB, KIND_SECURITY_GROUP, KIND_TARGET_GROUP};
use crate::calls::ops;
use crate::clb::plan::ClbAction;
use crate::nlb::plan::NlbAction;
use crate::sg::IngressRule;

mod clb;
mod nlb;
mod rules;

pub(crate) use clb::clb_steps;
pub(crate) use nlb::nlb_steps;
pub(crate) use rules::rule_steps;

/// Kind of a Classic ELB policy.
pub(super) const KIND_POLICY: &str = "LoadBalancerPolicy";
/// Kind of an NLB listener.
pub(crate) const KIND_LISTENER: &str = "Listener";
/// Targets per `RegisterTargets` / `DeregisterTargets` call (AWS's batch limit).
pub(super) const TARGET_BATCH: usize = 100;

/// The AWS call one step makes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Call {
    /// A change of the flow's desired Classic ELB (`Create` or an update; never `Recreate`,
    /// which is planned as [`Call::DeleteClb`] then `Create`).
    Clb(ClbAction),
    /// `elb:DeleteLoadBalancer` (absent counts as done).
    DeleteClb {
        /// The load balancer's name.
        name: String,
    },
    /// A change of the flow's desired NLB (`Create` or an update; never `Recreate`).
    Nlb(NlbAction),
    /// `elbv2:DeleteLoadBalancer` (absent counts as done).
    DeleteNlb {
        /// The load balancer's ARN.
        arn: String,
    },
    /// `elbv2:DeleteListener` of a load balancer being removed.
    RemoveListener {
        /// The listener's ARN.
        arn: String,
    },
    /// `elbv2:DeleteTargetGroup` of a load balancer being removed.
    RemoveTargetGroup {
        /// The target group's ARN.
        arn: String,
    },
    /// One `RevokeSecurityGroupIngress` or `AuthorizeSecurityGroupIngress` on one group.
    Rules {
        /// The group's ID.
        group: String,
        /// Revoke (else authorize).
        revoke: bool,
        /// The rules, all in one request.
        rules: Vec<IngressRule>,
    },
    /// `ec2:CreateSecurityGroup` of the Classic ELB's own `k8s-elb-` group.
    CreateGroup {
        /// Its name.
        name: String,
        /// Its VPC.
        vpc: String,
        /// Its description.
        description: String,
        /// Its tags.
        tags: BTreeMap<String, String>,
    },
    /// `ec2:CreateTags` on a group of ours that lost its cluster tag.
    TagGroup {
        /// The group's ID.
        id: String,
        /// The tags to set.
        tags: BTreeMap<String, String>,
    },
    /// `ec2:DeleteSecurityGroup` of an owned `k8s-elb-` group (absent counts as done).
    DeleteGroup {
        /// The group's ID.
        id: String,
    },
}

/// One mutating call and the change `kube-lb plan` shows for it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AwsStep {
    /// What to call.
    pub call: Call,
    /// How the plan shows it.
    pub change: PlannedChange,
}

impl Step for AwsStep {
    fn describe(&self) -> PlannedChange {
        self.change.clone()
    }
}

/// Collects steps while a renderer walks the actions: each change pushed becomes a step of
/// the call set last.
pub(super) struct Steps {
    call: Option<Call>,
    steps: Vec<AwsStep>,
}

impl Steps {
    pub(super) fn new() -> Self {
        Steps {
            call: None,
            steps: Vec::new(),
        }
    }

    pub(super) fn set(&mut self, call: Call) {
        self.call = Some(call);
    }

    pub(super) fn push(&mut self, change: PlannedChange) {
        if let Some(call) = self.call.clone() {
            self.steps.push(AwsStep { call, change });
        }
    }
}

/// The steps that remove a Classic ELB by name.
pub(crate) fn delete_clb_step(name: &str) -> AwsStep {
    AwsStep {
        call: Call::DeleteClb {
            name: name.to_string(),
        },
        change: PlannedChange::new(
            ChangeAction::Delete,
            KIND_CLB,
            name,
            ops::ELB_DELETE_LOAD_BALANCER.name,
        ),
    }
}

/// The step that removes an NLB.
pub(crate) fn delete_nlb_step(name: &str, arn: &str) -> AwsStep {
    AwsStep {
        call: Call::DeleteNlb {
            arn: arn.to_string(),
        },
        change: PlannedChange::new(
            ChangeAction::Delete,
            KIND_NLB,
            name,
            ops::V2_DELETE_LOAD_BALANCER.name,
        ),
    }
}

/// The step that removes a listener of an NLB being removed; `port` names it.
pub(crate) fn remove_listener_step(lb: &str, arn: &str, port: Option<i32>) -> AwsStep {
    let port = port.map_or_else(|| "?".to_string(), |p| p.to_string());
    AwsStep {
        call: Call::RemoveListener {
            arn: arn.to_string(),
        },
        change: PlannedChange::new(
            ChangeAction::Delete,
            KIND_LISTENER,
            format!("{lb}:{port}"),
            ops::V2_DELETE_LISTENER.name,
        ),
    }
}

/// The step that removes a target group of an NLB being removed.
pub(crate) fn remove_target_group_step(arn: &str) -> AwsStep {
    AwsStep {
        call: Call::RemoveTargetGroup {
            arn: arn.to_string(),
        },
        change: PlannedChange::new(
            ChangeAction::Delete,
            KIND_TARGET_GROUP,
            target_group_name_of(arn),
            ops::V2_DELETE_TARGET_GROUP.name,
        ),
    }
}

/// The step that deletes an owned security group.
pub(crate) fn delete_group_step(id: &str) -> AwsStep {
    AwsStep {
        call: Call::DeleteGroup { id: id.to_string() },
        change: PlannedChange::new(
            ChangeAction::Delete,
            KIND_SECURITY_GROUP,
            id,
            ops::DELETE_SECURITY_GROUP.name,
        ),
    }
}

/// The step that creates the Classic ELB's own group.
pub(crate) fn create_group_step(
    name: &str,
    vpc: &str,
    description: &str,
    tags: &BTreeMap<String, String>,
) -> AwsStep {
    let mut change = PlannedChange::new(
        ChangeAction::Create,
        KIND_SECURITY_GROUP,
        name,
        ops::CREATE_SECURITY_GROUP.name,
    )
    .field("VpcId", None, Some(vpc.to_string()));
    for (key, value) in tags {
        change = change.field(format!("Tags[{key}]"), None, Some(value.clone()));
    }
    AwsStep {
        call: Call::CreateGroup {
            name: name.to_string(),
            vpc: vpc.to_string(),
            description: description.to_string(),
            tags: tags.clone(),
        },
        change,
    }
}

/// The step that puts back the tags a group of ours lost.
pub(crate) fn tag_group_step(id: &str, tags: &BTreeMap<String, String>) -> AwsStep {
    let mut change = PlannedChange::new(
        ChangeAction::Modify,
        KIND_SECURITY_GROUP,
        id,
        ops::CREATE_TAGS.name,
    );
    for (key, value) in tags {
        change = change.field(format!("Tags[{key}]"), None, Some(value.clone()));
    }
    AwsStep {
        call: Call::TagGroup {
            id: id.to_string(),
            tags: tags.clone(),
        },
        change,
    }
}

/// The name inside a target-group ARN (`…:targetgroup/<name>/<id>`), else the ARN.
pub(super) fn target_group_name_of(arn: &str) -> &str {
    arn.split_once(":targetgroup/")
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap_or(arn)
}

// ---- Rendering (pure) ----

pub(super) fn opt<T: ToString>(value: Option<T>) -> Option<String> {
    value.map(|v| v.to_string())
}

pub(super) fn joined<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    items
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `change` with a field added only when `old` and `new` differ.
pub(super) fn diff_field(
    change: PlannedChange,
    field: &str,
    old: Option<String>,
    new: Option<String>,
) -> PlannedChange {
    if old == new {
        change
    } else {
        change.field(field, old, new)
    }
}

#[cfg(test)]
pub(super) mod test_text {
    //! How the step tests show changes.
    use super::*;

    pub(crate) fn describe(steps: &[AwsStep]) -> Vec<PlannedChange> {
        steps.iter().map(Step::describe).collect()
    }

    /// `action kind name call field:old→new …`, one line per change.
    pub(crate) fn text(changes: &[PlannedChange]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                let mut line = format!("{} {} {} {}", c.action, c.kind, c.name, c.call);
                for f in &c.fields {
                    line.push_str(&format!(
                        " {}:{}→{}",
                        f.field,
                        f.old.as_deref().unwrap_or("-"),
                        f.new.as_deref().unwrap_or("-")
                    ));
                }
                line
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_group_names_come_from_their_arns() {
        for (arn, name) in [
            (
                "arn:aws:elasticloadbalancing:us-east-1:1:targetgroup/k8s-ns-api-1/50dc6c495c0c9188",
                "k8s-ns-api-1",
            ),
            ("not-an-arn", "not-an-arn"),
        ] {
            assert_eq!(target_group_name_of(arn), name);
        }
    }
}

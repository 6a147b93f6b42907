//! Security-group rule changes as steps: one call per group and direction.

use std::collections::BTreeMap;

use kube_lb_provider_core::{ChangeAction, PlannedChange};

use super::{AwsStep, Call};
use crate::audit::KIND_SECURITY_GROUP_RULE;
use crate::calls::ops;
use crate::sg::RuleChanges;

/// The steps of rule changes per group: per group, one revoke of all its stale rules, then
/// one authorize of all its missing ones (as `nodes::apply_rule_changes` sends them).
pub(crate) fn rule_steps(plan: &BTreeMap<String, RuleChanges>) -> Vec<AwsStep> {
    let mut steps = Vec::new();
    for (group, rule_changes) in plan {
        for (rules, revoke) in [
            (&rule_changes.revoke, true),
            (&rule_changes.authorize, false),
        ] {
            if rules.is_empty() {
                continue;
            }
            let (action, call) = if revoke {
                (ChangeAction::Delete, ops::REVOKE_INGRESS.name)
            } else {
                (ChangeAction::Create, ops::AUTHORIZE_INGRESS.name)
            };
            let text: Vec<String> = rules.iter().map(ToString::to_string).collect();
            let mut change = PlannedChange::new(
                action,
                KIND_SECURITY_GROUP_RULE,
                format!("{group} {}", text.join(", ")),
                call,
            );
            for rule in rules {
                if let Some(description) = &rule.description {
                    let field = if rules.len() == 1 {
                        "Description".to_string()
                    } else {
                        format!("Description[{rule}]")
                    };
                    change = if revoke {
                        change.field(field, Some(description.clone()), None)
                    } else {
                        change.field(field, None, Some(description.clone()))
                    };
                }
            }
            steps.push(AwsStep {
                call: Call::Rules {
                    group: group.clone(),
                    revoke,
                    rules: rules.clone(),
                },
                change,
            });
        }
    }
    steps
}
#[cfg(test)]
mod tests {
    use super::super::test_text::{describe, text};
    use super::*;
    use crate::sg::IngressRule;

    #[test]
    fn rules_are_revoked_before_authorized_with_their_descriptions() {
        let plan = BTreeMap::from([(
            "sg-1".to_string(),
            RuleChanges {
                authorize: vec![IngressRule::port("tcp", 80, "10.0.0.0/8", Some("d"))],
                revoke: vec![IngressRule::from_group("sg-lb")],
            },
        )]);
        assert_eq!(
            text(&describe(&rule_steps(&plan))),
            vec![
                "delete SecurityGroupRule sg-1 all from sg-lb RevokeSecurityGroupIngress",
                "create SecurityGroupRule sg-1 tcp/80 from 10.0.0.0/8 AuthorizeSecurityGroupIngress Description:-→d",
            ]
        );
    }
}

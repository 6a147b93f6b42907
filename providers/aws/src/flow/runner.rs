//! Runs one step of a phase, with what earlier steps of the phase produced.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use kube_lb_provider_core::converge::Slot;

use crate::calls::ops;
use crate::clb;
use crate::clb::plan::{ClbAction, ClbDesired};
use crate::error::AwsError;
use crate::nlb;
use crate::nlb::plan::NlbDesired;
use crate::provider::AwsProvider;
use crate::sg::{IngressRule, RuleChanges, RuleSource};
use crate::steps::{AwsStep, Call};

/// The state the steps of one phase run against, and what they produced.
#[derive(Debug, Default)]
pub(crate) struct Runner {
    /// The desired Classic ELB `Call::Clb` steps change.
    pub(super) clb: Option<ClbDesired>,
    /// The desired NLB `Call::Nlb` steps change.
    pub(super) nlb: Option<NlbDesired>,
    /// The VPC target groups are created in.
    pub(super) vpc: String,
    /// The NLB's ARN and the target groups created in this phase.
    pub(super) applied: nlb::io::Applied,
    /// The DNS name a Classic ELB create returned.
    pub(super) created_dns: Option<String>,
    /// A step found the cloud other than planned (a create found ours from an earlier
    /// attempt): the rest of the phase must be planned again.
    pub(super) stale: bool,
    /// The Classic ELB's own group when this phase creates it: the name the plan uses in its
    /// place, and the ID its create returns, which the later steps of the phase (its rules, the
    /// ELB, the node rules that admit it) take when they run.
    pub(super) own_group: Option<(String, Slot<String>)>,
}

impl Runner {
    /// Starts a new phase: what the last one produced no longer applies (the new plan was
    /// made from a new observation).
    pub(super) fn new_phase(&mut self) {
        *self = Runner::default();
    }

    /// `group` as the cloud knows it: the created group's ID in place of its name.
    pub(super) fn group_id(&self, group: &str) -> Result<String, AwsError> {
        match &self.own_group {
            Some((name, id)) if name == group => Ok(id
                .require()
                .map_err(|e| AwsError::Unexpected(e.to_string()))?
                .clone()),
            _ => Ok(group.to_string()),
        }
    }

    fn resolve_rules(&self, rules: &[IngressRule]) -> Result<Vec<IngressRule>, AwsError> {
        rules
            .iter()
            .map(|rule| {
                let mut rule = rule.clone();
                if let RuleSource::Group(group) = &rule.source {
                    rule.source = RuleSource::Group(self.group_id(group)?);
                }
                Ok(rule)
            })
            .collect()
    }

    pub(super) fn resolve_groups(&self, groups: &[String]) -> Result<Vec<String>, AwsError> {
        groups.iter().map(|g| self.group_id(g)).collect()
    }

    /// Performs one step.
    pub(crate) async fn run(
        &mut self,
        provider: &AwsProvider,
        step: &AwsStep,
    ) -> Result<(), AwsError> {
        let clients = provider.clients_ref();
        match &step.call {
            Call::Clb(action) => {
                let mut desired = self
                    .clb
                    .clone()
                    .ok_or_else(|| AwsError::Unexpected("no desired Classic ELB planned".into()))?;
                desired.security_groups = self.resolve_groups(&desired.security_groups)?;
                let action = match action {
                    ClbAction::ApplySecurityGroups(groups) => {
                        ClbAction::ApplySecurityGroups(self.resolve_groups(groups)?)
                    }
                    other => other.clone(),
                };
                let created = clb::io::apply_one(clients, &desired, &action).await?;
                if created.dns.is_some() {
                    self.created_dns = created.dns;
                }
                self.stale |= created.adopted;
            }
            Call::DeleteClb { name } => clb::io::delete(clients, name).await?,
            Call::Nlb(action) => {
                let desired = self
                    .nlb
                    .as_ref()
                    .ok_or_else(|| AwsError::Unexpected("no desired NLB planned".into()))?;
                let adopted =
                    nlb::io::apply_one(clients, &self.vpc, desired, &mut self.applied, action)
                        .await?;
                self.stale |= adopted;
            }
            Call::DeleteNlb { arn } => nlb::io::delete_lb(clients, arn).await?,
            Call::RemoveListener { arn } => nlb::io::delete_listener(clients, arn).await?,
            Call::RemoveTargetGroup { arn } => nlb::io::delete_tg(clients, arn).await?,
            Call::Rules {
                group,
                revoke,
                rules,
            } => {
                let rules = self.resolve_rules(rules)?;
                let changes = if *revoke {
                    RuleChanges {
                        authorize: Vec::new(),
                        revoke: rules,
                    }
                } else {
                    RuleChanges {
                        authorize: rules,
                        revoke: Vec::new(),
                    }
                };
                provider
                    .apply_rules(&self.group_id(group)?, &changes)
                    .await?;
            }
            Call::CreateGroup {
                name,
                vpc,
                description,
                tags,
            } => {
                self.create_group(provider, name, vpc, description, tags)
                    .await?
            }
            Call::TagGroup { id, tags } => {
                let tags = sdk_tags(tags);
                clients
                    .calls
                    .run(ops::CREATE_TAGS, || {
                        clients
                            .ec2
                            .create_tags()
                            .resources(id)
                            .set_tags(Some(tags.clone()))
                            .send()
                    })
                    .await?;
            }
            Call::DeleteGroup { id } => {
                match clients
                    .calls
                    .run(ops::DELETE_SECURITY_GROUP, || {
                        clients.ec2.delete_security_group().group_id(id).send()
                    })
                    .await
                {
                    Ok(_) => {}
                    // Gone already (an earlier attempt's response was lost).
                    Err(e) if e.has_code(&["InvalidGroup.NotFound"]) => {}
                    // The load balancer's network interfaces take a while to go away after it
                    // is deleted; the next pass tries again.
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    async fn create_group(
        &mut self,
        provider: &AwsProvider,
        name: &str,
        vpc: &str,
        description: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        let clients = provider.clients_ref();
        let specification = TagSpecification::builder()
            .resource_type(ResourceType::SecurityGroup)
            .set_tags(Some(sdk_tags(tags)))
            .build();
        let created = clients
            .calls
            .run(ops::CREATE_SECURITY_GROUP, || {
                clients
                    .ec2
                    .create_security_group()
                    .group_name(name)
                    .description(description)
                    .vpc_id(vpc)
                    .tag_specifications(specification.clone())
                    .send()
            })
            .await;
        match created {
            Ok(created) => {
                let id = created.group_id().ok_or_else(|| {
                    AwsError::Unexpected("CreateSecurityGroup returned no ID".into())
                })?;
                if let Some((_, slot)) = self.own_group.as_mut() {
                    slot.fill(id.to_string());
                }
                Ok(())
            }
            // Made by our own earlier attempt whose response was lost: the next plan finds it
            // by name, checks its owner and adopts it.
            Err(e) if e.has_code(&["InvalidGroup.Duplicate"]) => {
                tracing::info!(group = name, "security group exists after a lost create");
                self.stale = true;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

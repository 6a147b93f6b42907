//! The Classic ELB flow: observe, then plan its own group, the ELB and the node rules.

use std::collections::BTreeMap;
use std::time::Instant;

use kube_lb_annotations::Scheme;
use kube_lb_provider_core::converge::{Plan, Slot};

use crate::calls::ops;
use crate::clb;
use crate::clb::plan::ClbObserved;
use crate::delete::{Foreign, observe_nlb_side};
use crate::desired::{self, Placement};
use crate::discovery::ec2_filter;
use crate::error::AwsError;
use crate::naming::{clb_security_group_description, clb_security_group_name};
use crate::nodes;
use crate::provider::BackendInstances;
use crate::sg::{ObservedGroup, diff_rules};
use crate::steps::{self, AwsStep};
use crate::tags::security_group_tags;

use super::*;

impl EnsureFlow<'_> {
    /// The Classic ELB under the Service's name, with the tags a listing brought.
    pub(super) async fn read_clb(
        &mut self,
    ) -> Result<(Option<ClbObserved>, Option<BTreeMap<String, String>>), AwsError> {
        let clients = self.provider.clients_ref();
        if let Some(described) = self.described_clb.take() {
            return Ok((described, None));
        }
        if self.mode == Mode::Execute {
            // The first pass after a start reads from one listing of all load balancers.
            match self
                .provider
                .inventory_ref()
                .take_clb(clients, &self.name, self.full_resync())
                .await?
            {
                Some(Some(mut listed)) => {
                    let tags = listed.tags.take();
                    return Ok((Some(listed), tags));
                }
                Some(None) => return Ok((None, None)),
                None => {}
            }
        }
        Ok((clb::io::describe(clients, &self.name).await?, None))
    }

    /// The Classic ELB's own `k8s-elb-` group in `vpc`, if it exists: among the groups read
    /// (every group kube-lb owns carries the cluster tag), else read by name (an upstream
    /// group that lost its cluster tag).
    pub(super) async fn own_group(
        &self,
        vpc: &str,
        known: Option<&[ObservedGroup]>,
    ) -> Result<Option<ObservedGroup>, AwsError> {
        let group_name = clb_security_group_name(&self.name);
        let matches = |g: &&ObservedGroup| g.name == group_name && g.vpc_id.as_deref() == Some(vpc);
        if let Some(group) = known.and_then(|groups| groups.iter().find(matches)) {
            return Ok(Some(group.clone()));
        }
        Ok(nodes::describe_groups(
            self.provider.clients_ref(),
            Some(vec![
                ec2_filter("group-name", [group_name.as_str()]),
                ec2_filter("vpc-id", [vpc]),
            ]),
            None,
        )
        .await?
        .into_iter()
        .next())
    }

    /// Plans the Classic ELB of the Service: the NLB's removal first when it may exist, then
    /// its own group (created, tagged, its rules), the ELB's changes and the node rules.
    pub(super) async fn plan_clb(
        &mut self,
        instances: BackendInstances,
        fp: u64,
    ) -> Result<Plan<AwsStep>, AwsError> {
        let provider = self.provider;
        let ServiceSpec { spec, aws } = self.svc;
        let clients = provider.clients_ref();
        let config = provider.config_ref();
        let name = self.name.clone();
        let cluster_tag = provider.cluster_tag_key();

        let (observed, listed_tags) = self.read_clb().await?;
        // Someone else's load balancer under this name is left untouched: checked before
        // anything (the security group) is planned for it.
        let observed_tags = match &observed {
            Some(_) => {
                let tags = match listed_tags {
                    Some(tags) => tags,
                    None => clb::io::read_tags(clients, &name).await?,
                };
                provider.check_owner(
                    &spec.service,
                    &tags,
                    "Classic ELB",
                    ops::ELB_CREATE_LOAD_BALANCER,
                )?;
                Some(tags)
            }
            None => None,
        };
        // Break-before-make: this Service's NLB goes first.
        let mut first = Vec::new();
        if observed.is_none() && self.retire_other {
            match observe_nlb_side(
                provider,
                &spec.service,
                Foreign::Error(ops::ELB_CREATE_LOAD_BALANCER),
                false,
            )
            .await?
            {
                Some(side) => first.extend(nlb_side_steps(&name, &side)),
                // Confirmed absent: a later phase of this pass need not look again.
                None => self.retire_other = false,
            }
        }
        let vpc = provider.vpc(
            &instances.instances,
            observed.as_ref().and_then(|o| o.vpc_id.as_deref()),
        )?;
        let internal = spec.scheme == Scheme::Internal;
        let subnets = provider.subnets(aws, &vpc, internal).await?;
        // One read serves the Service's own group and the node groups.
        let observed_groups = if config.disable_security_group_ingress {
            None
        } else {
            Some(self.read_groups(&vpc, &instances.candidate_groups).await?)
        };
        let mut rest = Vec::new();
        let primary = match desired::clb_given_groups(
            &aws.security_groups,
            config.elb_security_group.as_deref(),
        ) {
            Some(given) => given,
            None => {
                let rules = desired::clb_security_group_rules(spec)?;
                match self.own_group(&vpc, observed_groups.as_deref()).await? {
                    Some(group) => {
                        crate::owner::check_group(&group.tags, &cluster_tag).map_err(|owner| {
                            AwsError::NameTaken {
                                operation: ops::CREATE_SECURITY_GROUP.name,
                                resource: "security group",
                                name: group.name.clone(),
                                owner,
                            }
                        })?;
                        if !group.tags.contains_key(&cluster_tag) {
                            // Upstream repairs a lost ownership tag the same way.
                            let tags = security_group_tags(provider.cluster_id(), &BTreeMap::new());
                            rest.push(steps::tag_group_step(&group.id, &tags));
                        }
                        let changes = diff_rules(&group.ingress, &rules, |_| true);
                        rest.extend(steps::rule_steps(&BTreeMap::from([(
                            group.id.clone(),
                            changes,
                        )])));
                        vec![group.id]
                    }
                    None => {
                        let group_name = clb_security_group_name(&name);
                        let tags = security_group_tags(provider.cluster_id(), &aws.additional_tags);
                        rest.push(steps::create_group_step(
                            &group_name,
                            &vpc,
                            &clb_security_group_description(&name, &spec.service),
                            &tags,
                        ));
                        // Until it exists, the plan names the group by its name; the steps
                        // after the create take its ID when they run.
                        self.runner.own_group = Some((
                            group_name.clone(),
                            Slot::new("the ID of the Classic ELB's new security group"),
                        ));
                        let changes = diff_rules(&[], &rules, |_| true);
                        rest.extend(steps::rule_steps(&BTreeMap::from([(
                            group_name.clone(),
                            changes,
                        )])));
                        vec![group_name]
                    }
                }
            }
        };
        let groups = desired::with_extra_groups(primary, &aws.extra_security_groups);
        let desired = desired::clb(
            &provider.context(&name),
            self.svc,
            &Placement {
                subnets,
                security_groups: groups.clone(),
                instances: instances.ids.clone(),
            },
        )?;
        let observed = match observed {
            Some(mut seen) => {
                seen.attributes = Some(clb::io::read_attributes(clients, &name).await?);
                seen.tags = observed_tags;
                Some(seen)
            }
            None => None,
        };
        let actions = clb::plan::plan(observed.as_ref(), &desired);
        rest.extend(steps::clb_steps(observed.as_ref(), &desired, &actions));
        if let Some(observed_groups) = &observed_groups
            && let Some(primary) = groups.first()
        {
            let plan = nodes::clb_node_rules_plan(
                &instances.instances,
                observed_groups,
                &cluster_tag,
                primary,
            )?;
            rest.extend(steps::rule_steps(&plan));
        }
        self.runner.clb = Some(desired.clone());
        self.outcome = Some(Outcome::Clb {
            fingerprint: fp,
            at: Instant::now(),
            desired,
            dns: observed.and_then(|o| o.dns_name),
        });
        Ok(phased(first, "this Service's NLB removed", rest))
    }
}

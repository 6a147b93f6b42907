//! The NLB flow: observe, then plan the NLB, the node rules and the Classic ELB's removal.

use std::time::Instant;

use kube_lb_annotations::Scheme;
use kube_lb_provider_core::converge::Plan;

use crate::calls::ops;
use crate::config::NlbSecurityGroupMode;
use crate::delete::{Foreign, observe_clb_side};
use crate::desired;
use crate::error::AwsError;
use crate::naming::clb_security_group_name;
use crate::nlb;
use crate::nlb::plan::NlbAction;
use crate::provider::BackendInstances;
use crate::steps::{self, AwsStep};

use super::*;

impl EnsureFlow<'_> {
    /// Plans the NLB of the Service: the Classic ELB's removal first when it may exist, then
    /// the NLB's changes, the node rules and the removal of a `k8s-elb-` group left behind.
    pub(super) async fn plan_nlb(
        &mut self,
        instances: BackendInstances,
        fp: u64,
    ) -> Result<Plan<AwsStep>, AwsError> {
        let provider = self.provider;
        let svc = self.svc;
        let spec = svc.spec;
        let clients = provider.clients_ref();
        let config = provider.config_ref();
        let name = self.name.clone();

        let (mut observed, prefetched) = match self.mode {
            Mode::Execute => match provider
                .inventory_ref()
                .take_nlb(clients, &name, self.full_resync())
                .await?
            {
                Some(Some((listed, prefetched))) => (Some(listed), Some(prefetched)),
                Some(None) => (None, None),
                None => (nlb::io::describe(clients, &name).await?, None),
            },
            Mode::Render => (nlb::io::describe(clients, &name).await?, None),
        };
        if let Some(seen) = observed.as_mut() {
            provider
                .observe_own_nlb(spec, seen, prefetched.as_ref())
                .await?;
        }
        let vpc = provider.vpc(&instances.instances, None)?;
        let internal = spec.scheme == Scheme::Internal;
        let subnets = provider.subnets(svc.aws, &vpc, internal).await?;
        let observed_groups = if config.disable_security_group_ingress {
            None
        } else {
            Some(self.read_groups(&vpc, &instances.candidate_groups).await?)
        };
        // Break-before-make: this Service's Classic ELB goes first. An NLB found and ours
        // proves there is none beside it (every NLB create follows its confirmed absence),
        // unless its `k8s-elb-` group is left from a kind change interrupted between deleting
        // the ELB and the group: that removal is finished here.
        let clb_group = clb_security_group_name(&name);
        let clb_group_left = observed_groups
            .as_ref()
            .is_some_and(|groups| groups.iter().any(|g| g.name == clb_group));
        let side = if (self.retire_other && observed.is_none()) || clb_group_left {
            observe_clb_side(
                provider,
                &spec.service,
                Foreign::Error(ops::V2_CREATE_LOAD_BALANCER),
                clb_group_left,
            )
            .await?
        } else {
            None
        };
        let groups = if config.nlb_security_group_mode == NlbSecurityGroupMode::Managed {
            svc.aws.security_groups.clone()
        } else {
            Vec::new()
        };
        let desired = desired::nlb(
            &provider.context(&name),
            svc,
            &subnets,
            groups,
            instances.ids.clone(),
        )?;
        let actions = nlb::plan::plan(observed.as_ref(), &desired);
        let recreated = actions
            .iter()
            .any(|a| matches!(a, NlbAction::Create | NlbAction::Recreate));
        let mut rest = steps::nlb_steps(observed.as_ref(), &desired, &actions);
        if let Some(observed_groups) = &observed_groups {
            let plan = provider
                .nlb_node_rules_plan(svc, &vpc, &instances.instances, observed_groups)
                .await?;
            rest.extend(steps::rule_steps(&plan));
        }
        if side.is_none() && observed.is_none() {
            // Confirmed absent: a later phase of this pass need not look again.
            self.retire_other = false;
        }
        let mut first = Vec::new();
        if let Some(side) = side {
            let group_deletes = side
                .owned_groups
                .iter()
                .map(|id| steps::delete_group_step(id));
            if side.present {
                first.extend(clb_side_revokes(&side));
                first.push(steps::delete_clb_step(&name));
                rest.extend(group_deletes);
            } else {
                rest.extend(clb_side_revokes(&side));
                rest.extend(group_deletes);
            }
        }
        self.runner.vpc = vpc;
        self.runner.applied.arn = observed.as_ref().map(|o| o.arn.clone());
        self.runner.nlb = Some(desired.clone());
        self.outcome = Some(Outcome::Nlb {
            fingerprint: fp,
            at: Instant::now(),
            desired,
            base: observed.filter(|_| !recreated),
        });
        Ok(phased(first, "this Service's Classic ELB removed", rest))
    }
}

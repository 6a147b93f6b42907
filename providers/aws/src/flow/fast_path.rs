//! The verified-cache shortcut of `ensure` (never of `plan`): a resync with the same spec and
//! node groups as the last full reconcile within `FullResyncSeconds` reads only what node
//! changes move.

use kube_lb_provider_core::converge::Plan;

use crate::clb;
use crate::clb::plan::ClbAction;
use crate::error::AwsError;
use crate::nlb;
use crate::nlb::plan::{NlbAction, NlbObserved, ObservedListener, ObservedTg};
use crate::provider::{BackendInstances, Verified};
use crate::steps::{self, AwsStep};

use super::*;

impl EnsureFlow<'_> {
    /// Same spec and node groups as the last full reconcile within `FullResyncSeconds`: only
    /// the Classic ELB's description is read, and only what node changes move is planned.
    pub(super) async fn clb_fast_path(
        &mut self,
        instances: &BackendInstances,
        fp: u64,
    ) -> Result<Option<Plan<AwsStep>>, AwsError> {
        let Some(Verified::Clb {
            fingerprint,
            at,
            desired,
        }) = self.provider.cached(&self.name)
        else {
            return Ok(None);
        };
        if fingerprint != fp || at.elapsed() >= self.full_resync() {
            return Ok(None);
        }
        let mut desired = desired;
        desired.instances = instances.ids.clone();
        let Some(observed) = clb::io::describe(self.provider.clients_ref(), &self.name).await?
        else {
            self.described_clb = Some(None);
            return Ok(None);
        };
        let actions = clb::plan::plan(Some(&observed), &desired);
        if actions
            .iter()
            .any(|a| matches!(a, ClbAction::Create | ClbAction::Recreate))
        {
            // The full plan starts from this description instead of reading it again.
            self.described_clb = Some(Some(observed));
            return Ok(None);
        }
        let planned = steps::clb_steps(Some(&observed), &desired, &actions);
        self.runner.clb = Some(desired.clone());
        self.outcome = Some(Outcome::Clb {
            fingerprint: fp,
            at,
            desired,
            dns: observed.dns_name,
        });
        Ok(Some(Plan::now(planned)))
    }

    /// Same spec and node groups as the last full reconcile within `FullResyncSeconds`: with
    /// the same instances nothing is read at all; otherwise only the target groups' targets.
    pub(super) async fn nlb_fast_path(
        &mut self,
        instances: &BackendInstances,
        fp: u64,
    ) -> Result<Option<Plan<AwsStep>>, AwsError> {
        let Some(Verified::Nlb {
            fingerprint,
            at,
            desired,
            arn,
            dns_name,
            target_groups,
        }) = self.provider.cached(&self.name)
        else {
            return Ok(None);
        };
        if fingerprint != fp || at.elapsed() >= self.full_resync() {
            return Ok(None);
        }
        let unchanged = desired.instances == instances.ids;
        let mut desired = desired;
        desired.instances = instances.ids.clone();
        // The NLB as the last full reconcile left it; the targets are read only when the
        // instances changed (changes behind kube-lb's back wait for the next full resync).
        let mut observed = NlbObserved {
            arn: arn.clone(),
            dns_name,
            internal: desired.internal,
            subnet_mappings: desired.subnet_mappings.clone(),
            addresses_reported: false,
            listeners: Vec::new(),
            target_groups: Vec::new(),
            attributes: None,
            tags: None,
        };
        for (listener, tg_arn) in desired.listeners.iter().zip(&target_groups) {
            let targets = if unchanged {
                None
            } else {
                Some(nlb::io::read_targets(self.provider.clients_ref(), tg_arn).await?)
            };
            observed.listeners.push(ObservedListener {
                arn: String::new(),
                port: listener.port,
                protocol: listener.protocol.clone(),
                certificate: listener.certificate.clone(),
                ssl_policy: listener.ssl_policy.clone(),
                target_group_arn: Some(tg_arn.clone()),
            });
            let tg = &listener.target_group;
            observed.target_groups.push(ObservedTg {
                arn: tg_arn.clone(),
                name: tg.name.clone(),
                protocol: tg.protocol.clone(),
                port: tg.port,
                health: tg.health.clone(),
                targets,
                attributes: None,
                tags: None,
            });
        }
        let actions = if unchanged {
            Vec::new()
        } else {
            nlb::plan::plan(Some(&observed), &desired)
        };
        let only_targets = actions.iter().all(|a| {
            matches!(
                a,
                NlbAction::RegisterTargets { .. } | NlbAction::DeregisterTargets { .. }
            )
        });
        if !only_targets {
            return Ok(None);
        }
        let planned = steps::nlb_steps(Some(&observed), &desired, &actions);
        self.runner.vpc = self
            .provider
            .vpc(&instances.instances, None)
            .unwrap_or_default();
        self.runner.applied.arn = Some(arn);
        self.runner.nlb = Some(desired.clone());
        self.outcome = Some(Outcome::Nlb {
            fingerprint: fp,
            at,
            desired,
            base: Some(observed),
        });
        Ok(Some(Plan::now(planned)))
    }
}

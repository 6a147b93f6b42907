//! The EIP side of a Service's BLB, read only: which EIPs are the Service's, which the next
//! pass detaches or releases, and the calls that give the BLB the address the Service wants.

use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::ProviderError;

use crate::client::{Blb, Eip};
use crate::plan::{self, Desired, EipStep};
use crate::provider::BaiduProvider;

impl BaiduProvider {
    /// Is this EIP one kube-lb created for the Service?
    pub(crate) fn eip_is_ours(&self, eip: &Eip, service: &ServiceKey) -> bool {
        eip.tag(plan::TAG_CLUSTER) == Some(self.cluster())
            && eip
                .tag(plan::TAG_UID)
                .is_some_and(|uid| service.uid.is_empty() || uid == service.uid)
    }

    /// Our EIPs that are not bound (left by a crash between create and bind, or after the
    /// BLB went away): reused by ensure, released by delete.
    pub(crate) async fn loose_eips(&self, service: &ServiceKey) -> Result<Vec<Eip>, ProviderError> {
        Ok(self
            .client()
            .eips(&[])
            .await?
            .into_iter()
            .filter(|e| {
                self.eip_is_ours(e, service) && e.instance_id.as_deref().is_none_or(str::is_empty)
            })
            .collect())
    }

    /// The EIP with address `ip`, if the account has one.
    pub(crate) async fn eip_at(&self, ip: &str) -> Result<Option<Eip>, ProviderError> {
        Ok(self.client().eips(&[("eip", ip)]).await?.into_iter().next())
    }

    /// Was the EIP bound to `blb` made for this Service: by kube-lb (its tags), or by
    /// cloud-provider-baiducloud (untagged, named as the BLB — upstream's default EIP name —
    /// under a BLB with upstream's EIP mark)? Upstream never removed the mark when a user's
    /// loadBalancerIP replaced its EIP, so the mark alone could release a user's address; the
    /// name check keeps that from happening (an upstream EIP renamed by
    /// `cce-elastic-ip-name` is then only unbound, never released: a leak, not a loss).
    pub(crate) fn bound_is_ours(&self, eip: &Eip, blb: &Blb, service: &ServiceKey) -> bool {
        self.eip_is_ours(eip, service) || plan::is_upstream_eip(eip, blb)
    }

    /// Detaching the EIP bound to `blb`: unbound, and released when it is ours and postpaid
    /// (a user's EIP, or a prepaid one, is only unbound). `only_ours`: leave a user's alone.
    pub(crate) async fn detach_steps(
        &self,
        blb: &Blb,
        service: &ServiceKey,
        only_ours: bool,
    ) -> Result<Vec<EipStep>, ProviderError> {
        if blb.public_ip.is_empty() {
            return Ok(Vec::new());
        }
        let Some(eip) = self.eip_at(&blb.public_ip).await? else {
            return Ok(Vec::new());
        };
        let ours = self.bound_is_ours(&eip, blb, service);
        if only_ours && !ours {
            return Ok(Vec::new());
        }
        let mut steps = vec![EipStep::Unbind(eip.eip.clone())];
        if ours && eip.payment_timing != "Prepaid" {
            steps.push(EipStep::Release(eip.eip));
        }
        Ok(steps)
    }

    /// Our EIPs that a switch away from a managed EIP (to internal, or to a user's EIP) unbound
    /// but did not release, the pass having failed or the controller died in between: the BLB
    /// has no address bound yet still carries the EIP mark, which comes off only after the EIP
    /// calls. They are released (unless prepaid), not left billed while the Service lives. No
    /// read unless the BLB is in that state.
    pub(crate) async fn interrupted_detach(
        &self,
        blb: &Blb,
        service: &ServiceKey,
        owned: bool,
    ) -> Result<Vec<EipStep>, ProviderError> {
        if !owned || !blb.public_ip.is_empty() || !plan::has_eip_mark(&blb.desc) {
            return Ok(Vec::new());
        }
        let mut steps: Vec<EipStep> = self
            .loose_eips(service)
            .await?
            .into_iter()
            .filter(|e| e.payment_timing != "Prepaid")
            .map(|e| EipStep::Release(e.eip))
            .collect();
        steps.extend(self.unbound_upstream_eips(blb).await?);
        Ok(steps)
    }

    /// An EIP upstream created for `blb` that an interrupted delete already unbound: untagged,
    /// unbound, named as the BLB (upstream's default EIP name), under a BLB with the EIP mark.
    pub(crate) async fn unbound_upstream_eips(
        &self,
        blb: &Blb,
    ) -> Result<Vec<EipStep>, ProviderError> {
        if !blb.public_ip.is_empty() || !plan::has_eip_mark(&blb.desc) {
            return Ok(Vec::new());
        }
        Ok(self
            .client()
            .eips(&[("name", &blb.name)])
            .await?
            .into_iter()
            .filter(|e| {
                plan::is_upstream_eip(e, blb)
                    && e.instance_id.as_deref().is_none_or(str::is_empty)
                    && e.payment_timing != "Prepaid"
            })
            .map(|e| EipStep::Release(e.eip))
            .collect())
    }

    /// A user's EIP (`spec.loadBalancerIP`) must exist in the account and be free (or bound to
    /// this Service's BLB `blb_id`): checked before anything is created.
    pub(crate) async fn check_user_eip(
        &self,
        ip: &str,
        blb_id: Option<&str>,
    ) -> Result<(), ProviderError> {
        let Some(eip) = self.eip_at(ip).await? else {
            return Err(ProviderError::user(format!(
                "spec.loadBalancerIP {ip} is not an EIP of this Baidu account: kube-lb binds an \
                 existing EIP but never creates one for loadBalancerIP; create the EIP first, or \
                 remove loadBalancerIP to get a new EIP"
            )));
        };
        match eip.instance_id.as_deref().filter(|id| !id.is_empty()) {
            Some(bound) if Some(bound) != blb_id => Err(ProviderError::user(format!(
                "spec.loadBalancerIP {ip}: the EIP is bound to {} {bound}; unbind it first",
                eip.instance_type.as_deref().unwrap_or("instance")
            ))),
            _ => Ok(()),
        }
    }

    /// [`Self::check_user_eip`] for a Service with `spec.loadBalancerIP`, skipped (no read) when
    /// its BLB `found` already has that address.
    pub(crate) async fn check_requested_eip(
        &self,
        desired: &Desired,
        found: Option<&Blb>,
    ) -> Result<(), ProviderError> {
        match &desired.user_eip {
            Some(ip) if found.is_none_or(|b| &b.public_ip != ip) => {
                self.check_user_eip(ip, found.map(|b| b.blb_id.as_str()))
                    .await
            }
            _ => Ok(()),
        }
    }

    /// The EIP calls that give `blb` the address the Service wants, and that address when it
    /// is known before the calls (`None`: the EIP the steps create).
    pub(crate) async fn address_plan(
        &self,
        blb: &Blb,
        desired: &Desired,
        owned: bool,
    ) -> Result<(Vec<EipStep>, Option<String>), ProviderError> {
        let service = &desired.service;
        let bound = (!blb.public_ip.is_empty()).then(|| blb.public_ip.clone());
        match (&desired.user_eip, &desired.eip) {
            (Some(ip), _) => {
                if bound.as_deref() == Some(ip.as_str()) {
                    return Ok((Vec::new(), Some(ip.clone())));
                }
                let mut steps = self.detach_steps(blb, service, false).await?;
                steps.extend(self.interrupted_detach(blb, service, owned).await?);
                steps.push(EipStep::Bind(Some(ip.clone())));
                Ok((steps, Some(ip.clone())))
            }
            // Internal: the VPC address; an EIP of ours is detached (on a user's BLB, only ours).
            (None, None) => {
                let mut steps = self.detach_steps(blb, service, !owned).await?;
                steps.extend(self.interrupted_detach(blb, service, owned).await?);
                Ok((steps, Some(blb.address.clone())))
            }
            (None, Some(want)) => {
                let mut steps = Vec::new();
                if let Some(ip) = bound {
                    // The marked BLB's EIP is the managed one (kube-lb's or upstream's); on a
                    // user's BLB whatever is bound is used. No read on a no-op resync.
                    if !owned || plan::has_eip_mark(&blb.desc) {
                        return Ok((Vec::new(), Some(ip)));
                    }
                    match self.eip_at(&ip).await? {
                        Some(eip) if !self.eip_is_ours(&eip, service) => {
                            // A user's EIP from an earlier loadBalancerIP: unbound, never released.
                            steps.push(EipStep::Unbind(ip));
                        }
                        _ => return Ok((Vec::new(), Some(ip))),
                    }
                }
                match self.loose_eips(service).await?.into_iter().next() {
                    Some(eip) => {
                        steps.push(EipStep::Bind(Some(eip.eip.clone())));
                        Ok((steps, Some(eip.eip)))
                    }
                    None => {
                        steps.push(EipStep::Create(want.clone()));
                        steps.push(EipStep::Bind(None));
                        Ok((steps, None))
                    }
                }
            }
        }
    }
}

//! [`BaiduProvider`]: observe the Service's BLB, plan (pure, [`crate::plan`]), apply with the
//! fewest calls, waiting out BLB's asynchronous states (`creating`, `updating`) and retrying a
//! change refused as busy (`OperationDenied`) after the wait.
//!
//! `loadBalancerSourceRanges` becomes a security group of the Service's bound to its BLB
//! ([`crate::source_ranges`]), converged before the listeners (a new listener is never open
//! before the group is bound) and deleted after the BLB; an `exist-id` BLB with source ranges
//! is refused by `ensure` and `plan_ensure` alike, before any change.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_annotations::keys::baidu as annotation;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::{
    BackendNode, CallCounter, ChangeAction, ClientOptions, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};
use serde_json::json;

use crate::client::{BaiduClient, Blb, Eip};
use crate::config::{CloudConfig, Resolved};
use crate::error::BceError;
use crate::plan::{self, Desired, EipStep, Observed, Step};
use crate::source_ranges::{self, GroupRef};

pub use kube_lb_provider_core::WaitSettings;

/// Tunables apart from the cloud-config; rate limits are per API (`blb`, `eip`).
/// [`BaiduProvider::default_options`] gives the production ones.
pub type ProviderOptions = ClientOptions;

/// How patiently to wait for a BLB or EIP to leave a transitional state: the pause doubles
/// from 1 s up to 10 s.
const DEFAULT_WAIT: WaitSettings = WaitSettings {
    first: Duration::from_secs(1),
    factor: 2.0,
    max_interval: Duration::from_secs(10),
    timeout: Duration::from_secs(300),
};

/// The Baidu provider: BLB + EIP.
#[derive(Debug, Clone)]
pub struct BaiduProvider {
    client: Arc<BaiduClient>,
    cluster: String,
    /// The description word naming this cluster's identity (`--cluster-id`), when known.
    cluster_mark: Option<String>,
    vpc_id: String,
    subnet_id: String,
    wait: WaitSettings,
}

/// How many times a change refused as busy is retried after waiting.
const BUSY_RETRIES: usize = 3;

/// What a look-up does with a BLB an earlier Service of the same namespace/name left behind in
/// this cluster ([`plan::leftover_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftovers {
    /// Removes it (an ensure, which then makes the Service's own).
    Remove,
    /// Leaves it, as not the Service's (reads, plans, deletes of the new Service).
    Keep,
}

/// A description change that removes the EIP mark (the Service no longer wants an EIP of ours).
fn drops_eip_mark(step: &Step) -> bool {
    matches!(step, Step::UpdateDesc { from, to } if plan::has_eip_mark(from) && !plan::has_eip_mark(to))
}

fn status_of(address: &str) -> LoadBalancerStatus {
    LoadBalancerStatus {
        ingress: address
            .parse()
            .ok()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip),
                hostname: None,
                ip_mode: None,
            })
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

/// The status of `address`, with the annotations upstream wrote on the Service: the BLB id
/// under `cce-load-balancer-id` and `cce-load-balancer-cce-add-id` when the BLB is the
/// Service's own (upstream wrote them when it created the BLB, not for an `exist-id` one),
/// and the EIP under `cce-load-balancer-cce-add-eip` when the address is one (the key is
/// marked stale otherwise, so the controller removes it).
fn status_for(blb: &Blb, owned: bool, address: &str, eip: bool) -> LoadBalancerStatus {
    let mut status = status_of(address);
    if owned {
        for key in [annotation::LOAD_BALANCER_ID, annotation::CCE_ADD_ID] {
            status
                .annotations
                .insert(key.to_string(), blb.blb_id.clone());
        }
    }
    if eip && !address.is_empty() {
        status
            .annotations
            .insert(annotation::CCE_ADD_EIP.to_string(), address.to_string());
    } else if !eip {
        // An internal BLB (or one that lost its EIP) has no EIP to name: a value left from
        // an earlier public phase would mislead.
        status
            .stale_annotations
            .insert(annotation::CCE_ADD_EIP.to_string());
    }
    status
}

impl BaiduProvider {
    /// A provider from resolved configuration; `cluster` names BLBs unless the config has a
    /// `ClusterID`.
    pub fn new(
        config: Resolved,
        cluster: &str,
        options: ProviderOptions,
    ) -> Result<Self, ProviderError> {
        let api = options.cloud_api("baidu");
        let client = BaiduClient::new(
            config.credentials,
            &config.blb_endpoint,
            &config.eip_endpoint,
            api,
            options.request_timeout,
        )?
        .with_bcc_endpoint(&config.bcc_endpoint);
        Ok(BaiduProvider {
            client: Arc::new(client),
            cluster: config.cluster_id.unwrap_or_else(|| cluster.to_string()),
            cluster_mark: None,
            vpc_id: config.vpc_id,
            subnet_id: config.subnet_id,
            wait: options.wait,
        })
    }

    /// Marks the BLBs it makes with this cluster's identity `id` (`--cluster-id`, by default
    /// the UID of the kube-system namespace), and so can tell a BLB that a deleted Service of
    /// this cluster left behind under its namespace/name from another cluster's: the first is
    /// removed when a new Service of that namespace/name is ensured, the second refused.
    /// `None` (unknown) refuses both.
    pub fn with_cluster_id(mut self, id: Option<&str>) -> Self {
        self.cluster_mark = id.filter(|id| !id.is_empty()).map(plan::cluster_mark);
        self
    }

    /// The production options: Baidu's waiting pace and the shared client defaults.
    pub fn default_options() -> ProviderOptions {
        ProviderOptions::new(DEFAULT_WAIT)
    }

    /// Reads the cloud-config at `path` (required) and the environment.
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster: &str,
        counter: CallCounter,
    ) -> Result<Self, ProviderError> {
        let internal = |message: String| ProviderError::Internal {
            message,
            source: None,
        };
        let path = path.ok_or_else(|| {
            internal("--cloud baidu needs --cloud-config pointing at a JSON cloud-config".into())
        })?;
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", path.display())))?;
        let resolved = CloudConfig::parse(&text)
            .and_then(|c| c.resolve(|var| std::env::var(var).ok()))
            .map_err(|e| internal(format!("{}: {e}", path.display())))?;
        Self::new(
            resolved,
            cluster,
            ProviderOptions {
                counter,
                ..Self::default_options()
            },
        )
    }

    /// The client (for tests and tools).
    pub fn client(&self) -> &BaiduClient {
        &self.client
    }

    /// The cluster id in names.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// What `ensure` would remove before making the Service's BLB: the one an earlier Service
    /// of its namespace/name left behind in this cluster, with its EIP.
    async fn planned_leftover_removal(
        &self,
        desired: &Desired,
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        if desired.exist_id.is_some() {
            return Ok(Vec::new());
        }
        match self.client.blbs_named(&desired.name).await?.as_slice() {
            [blb] => match self.leftover_of(blb, &desired.service) {
                Some(previous) => self.plan_delete(&previous).await,
                None => Ok(Vec::new()),
            },
            _ => Ok(Vec::new()),
        }
    }

    /// The earlier Service whose leftover `blb` is ([`plan::leftover_of`]).
    fn leftover_of(&self, blb: &Blb, service: &ServiceKey) -> Option<ServiceKey> {
        plan::leftover_of(
            &blb.desc,
            &self.cluster,
            self.cluster_mark.as_deref(),
            service,
        )
    }

    fn is_ours(&self, blb: &Blb, service: &ServiceKey) -> bool {
        blb.desc
            .contains(&format!("{}{}", plan::DESC_PREFIX, self.cluster))
            && plan::uid_of_desc(&blb.desc)
                .is_none_or(|uid| uid == service.uid || service.uid.is_empty())
    }

    /// The Service's BLB: the `exist-id` one, or ours by name. `Err` when the name is taken by
    /// someone else's BLB.
    async fn find(
        &self,
        desired: &Desired,
        leftovers: Leftovers,
    ) -> Result<Option<(Blb, bool)>, ProviderError> {
        if let Some(id) = &desired.exist_id {
            return match self.client.blb(id).await? {
                Some(blb) => Ok(Some((blb, false))),
                None => Err(ProviderError::environment(
                    "blb:DescribeLoadBalancerDetail",
                    EnvironmentCause::MissingDependency,
                    format!("cce-load-balancer-exist-id names BLB {id}, which does not exist"),
                )),
            };
        }
        self.find_owned(&desired.name, &desired.service, leftovers)
            .await
            .map(|b| b.map(|b| (b, true)))
    }

    async fn find_owned(
        &self,
        name: &str,
        service: &ServiceKey,
        leftovers: Leftovers,
    ) -> Result<Option<Blb>, ProviderError> {
        let mut found = self.client.blbs_named(name).await?;
        if let [blb] = found.as_slice()
            && let Some(previous) = self.leftover_of(blb, service)
        {
            if leftovers == Leftovers::Remove {
                tracing::warn!(%service, blb = %blb.blb_id, %name, previous_uid = %previous.uid, "removing the BLB a deleted Service of the same namespace/name left behind in this cluster");
                LoadBalancerProvider::delete(self, &previous).await?;
            }
            // Not this Service's: gone now, or going at its ensure.
            return Ok(None);
        }
        if found.len() > 1 {
            return Err(ProviderError::environment(
                "blb:DescribeLoadBalancers",
                EnvironmentCause::NameTaken,
                format!(
                    "{} BLBs are named {name}; remove the extra ones",
                    found.len()
                ),
            ));
        }
        let Some(blb) = found.pop() else {
            return Ok(None);
        };
        if self.is_ours(&blb, service) {
            Ok(Some(blb))
        } else {
            Err(ProviderError::environment(
                "blb:DescribeLoadBalancers",
                EnvironmentCause::NameTaken,
                format!(
                    "BLB {name} ({}) exists but is not this cluster's for Service {service} (description {:?})",
                    blb.blb_id, blb.desc
                ),
            ))
        }
    }

    /// Polls until the BLB is `available`.
    async fn wait_available(&self, id: &str) -> Result<Blb, ProviderError> {
        let mut waiting = self.wait.begin();
        loop {
            let blb = self
                .client
                .blb(id)
                .await?
                .ok_or_else(|| ProviderError::Internal {
                    message: format!(
                        "BLB {id} disappeared while waiting for it to become available"
                    ),
                    source: None,
                })?;
            match blb.status.as_str() {
                "available" => return Ok(blb),
                "unavailable" | "paused" => {
                    return Err(ProviderError::environment(
                        "blb:DescribeLoadBalancerDetail",
                        EnvironmentCause::MissingDependency,
                        format!(
                            "BLB {id} is {} (account in arrears or stopped by the cloud)",
                            blb.status
                        ),
                    ));
                }
                status if waiting.expired() => {
                    return Err(ProviderError::pending(
                        "blb:DescribeLoadBalancerDetail",
                        format!("BLB {id} still {status} after {:?}", self.wait.timeout),
                    ));
                }
                status => {
                    tracing::debug!(blb = %id, status, pause = ?waiting.pause(), "waiting for BLB to become available")
                }
            }
            waiting.sleep().await;
        }
    }

    /// A change under a BLB: refused-as-busy is waited out and retried.
    async fn change<F, Fut>(&self, id: &str, mut call: F) -> Result<(), ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), BceError>>,
    {
        let mut attempt = 0;
        loop {
            match call().await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_busy() && attempt < BUSY_RETRIES => {
                    attempt += 1;
                    tracing::info!(blb = %id, %error, "BLB busy; waiting for it before retrying");
                    self.wait_available(id).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
    }

    async fn observe(&self, id: &str) -> Result<Observed, ProviderError> {
        Ok(Observed {
            listeners: self.client.listeners(id).await?,
            backends: self.client.backends(id).await?,
        })
    }

    async fn apply(&self, id: &str, step: &Step) -> Result<(), ProviderError> {
        let c = &self.client;
        match step {
            Step::UpdateDesc { to, .. } => {
                let body = json!({"desc": to});
                self.change(id, || c.update_blb(id, &body)).await
            }
            Step::DeleteListeners(ports) => self.change(id, || c.delete_listeners(id, ports)).await,
            Step::CreateListener(l) => {
                let body = l.body();
                self.change(id, || c.create_listener(id, l.protocol, &body))
                    .await
            }
            Step::UpdateListener { listener, .. } => {
                let mut body = listener.body();
                if let Some(fields) = body.as_object_mut() {
                    fields.remove("listenerPort");
                }
                self.change(id, || {
                    c.update_listener(id, listener.protocol, listener.port, &body)
                })
                .await
            }
            Step::RemoveBackends(ids) => self.change(id, || c.remove_backends(id, ids)).await,
            Step::AddBackends(ids) => self.change(id, || c.add_backends(id, ids)).await,
        }
    }

    /// Is this EIP one kube-lb created for the Service?
    fn eip_is_ours(&self, eip: &Eip, service: &ServiceKey) -> bool {
        eip.tag(plan::TAG_CLUSTER) == Some(self.cluster.as_str())
            && eip
                .tag(plan::TAG_UID)
                .is_some_and(|uid| service.uid.is_empty() || uid == service.uid)
    }

    /// Our EIPs that are not bound (left by a crash between create and bind, or after the
    /// BLB went away): reused by ensure, released by delete.
    async fn loose_eips(&self, service: &ServiceKey) -> Result<Vec<Eip>, ProviderError> {
        Ok(self
            .client
            .eips(&[])
            .await?
            .into_iter()
            .filter(|e| {
                self.eip_is_ours(e, service) && e.instance_id.as_deref().is_none_or(str::is_empty)
            })
            .collect())
    }

    async fn wait_eip(&self, ip: &str) -> Result<(), ProviderError> {
        let mut waiting = self.wait.begin();
        loop {
            let status = self
                .client
                .eips(&[("eip", ip)])
                .await?
                .into_iter()
                .next()
                .map(|e| e.status);
            match status.as_deref() {
                Some("available") => return Ok(()),
                None => {
                    return Err(ProviderError::Internal {
                        message: format!("EIP {ip} disappeared"),
                        source: None,
                    });
                }
                Some(status) if waiting.expired() => {
                    return Err(ProviderError::pending(
                        "eip:ListEips",
                        format!("EIP {ip} still {status}"),
                    ));
                }
                Some(_) => {}
            }
            waiting.sleep().await;
        }
    }

    /// The EIP with address `ip`, if the account has one.
    async fn eip_at(&self, ip: &str) -> Result<Option<Eip>, ProviderError> {
        Ok(self.client.eips(&[("eip", ip)]).await?.into_iter().next())
    }

    /// Was the EIP bound to `blb` made for this Service: by kube-lb (its tags), or by
    /// cloud-provider-baiducloud (untagged, named as the BLB — upstream's default EIP name —
    /// under a BLB with upstream's EIP mark)? Upstream never removed the mark when a user's
    /// loadBalancerIP replaced its EIP, so the mark alone could release a user's address; the
    /// name check keeps that from happening (an upstream EIP renamed by
    /// `cce-elastic-ip-name` is then only unbound, never released: a leak, not a loss).
    fn bound_is_ours(&self, eip: &Eip, blb: &Blb, service: &ServiceKey) -> bool {
        self.eip_is_ours(eip, service) || plan::is_upstream_eip(eip, blb)
    }

    /// Detaching the EIP bound to `blb`: unbound, and released when it is ours and postpaid
    /// (a user's EIP, or a prepaid one, is only unbound). `only_ours`: leave a user's alone.
    async fn detach_steps(
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
    async fn interrupted_detach(
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
    async fn unbound_upstream_eips(&self, blb: &Blb) -> Result<Vec<EipStep>, ProviderError> {
        if !blb.public_ip.is_empty() || !plan::has_eip_mark(&blb.desc) {
            return Ok(Vec::new());
        }
        Ok(self
            .client
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
    async fn check_user_eip(&self, ip: &str, blb_id: Option<&str>) -> Result<(), ProviderError> {
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
    async fn check_requested_eip(
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
    async fn address_plan(
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

    /// Makes the EIP calls; returns the address created, if one was.
    async fn apply_eip_steps(
        &self,
        blb_id: &str,
        steps: &[EipStep],
    ) -> Result<Option<String>, ProviderError> {
        let mut created: Option<String> = None;
        for step in steps {
            tracing::info!(blb = %blb_id, step = ?step, "applying");
            match step {
                EipStep::Unbind(ip) => match self.client.unbind_eip(ip).await {
                    Err(error) if !error.is_not_found() => return Err(error.into()),
                    _ => {}
                },
                EipStep::Release(ip) => match self.client.release_eip(ip).await {
                    Err(error) if !error.is_not_found() => return Err(error.into()),
                    _ => {}
                },
                EipStep::Create(want) => {
                    let ip = self.client.create_eip(&want.body).await?;
                    tracing::info!(blb = %blb_id, eip = %ip, "created EIP");
                    created = Some(ip);
                }
                EipStep::Bind(ip) => {
                    let Some(ip) = ip.clone().or_else(|| created.clone()) else {
                        return Err(ProviderError::Internal {
                            message: "EIP bind planned without an address".into(),
                            source: None,
                        });
                    };
                    self.wait_eip(&ip).await?;
                    let client = &self.client;
                    self.change(blb_id, || client.bind_eip(&ip, blb_id)).await?;
                }
            }
        }
        Ok(created)
    }

    fn parse_desired(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Desired, ProviderError> {
        let mut desired =
            plan::desired(spec, backends, &self.cluster, &self.vpc_id, &self.subnet_id)?;
        if let Some(mark) = &self.cluster_mark
            && desired.exist_id.is_none()
            && desired.desc.chars().count() + 1 + mark.len() <= plan::MAX_DESC
        {
            desired.desc.push(' ');
            desired.desc.push_str(mark);
        }
        if !desired.skipped_nodes.is_empty() {
            tracing::warn!(service = %spec.service, nodes = ?desired.skipped_nodes, "nodes without a BCC instance id (spec.providerID cce://i-…) are not backends");
        }
        if source_ranges::restricted(&spec.source_ranges).is_some() {
            if let Some(id) = &desired.exist_id {
                return Err(ProviderError::user(source_ranges::existing_refusal(id)));
            }
            // Says that a group of the Service's may exist (see the module); where it does not
            // fit, a Service whose ranges are dropped keeps its group until it is deleted.
            if desired.desc.chars().count() + 1 + source_ranges::SG_MARK.len() <= plan::MAX_DESC {
                desired.desc.push(' ');
                desired.desc.push_str(source_ranges::SG_MARK);
            }
        }
        Ok(desired)
    }
}

#[async_trait]
impl LoadBalancerProvider for BaiduProvider {
    fn name(&self) -> &'static str {
        "baidu"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let desired = self.parse_desired(spec, backends)?;
        let found = self.find(&desired, Leftovers::Remove).await?;
        self.check_requested_eip(&desired, found.as_ref().map(|(blb, _)| blb))
            .await?;
        let (blb, owned) = match found {
            Some((blb, owned)) if blb.status == "available" => (blb, owned),
            Some((blb, owned)) => (self.wait_available(&blb.blb_id).await?, owned),
            None => {
                let id = self
                    .client
                    .create_blb(&desired.create_body(&self.cluster))
                    .await?;
                tracing::info!(blb = %id, name = %desired.name, "created BLB");
                (self.wait_available(&id).await?, true)
            }
        };
        if owned {
            // Before the listeners: a new port is never reachable from outside the ranges.
            let groups = self.source_range_steps(Some(&blb), spec, &desired).await?;
            self.apply_source_ranges(&blb.blb_id, &desired.service, &groups)
                .await?;
        }
        let observed = self.observe(&blb.blb_id).await?;
        // The EIP mark comes off the description only once the EIP calls are done: until then
        // it is what tells the next pass that an EIP of ours may be left unbound.
        let (unmark, steps): (Vec<Step>, Vec<Step>) = plan::plan(&blb, &observed, &desired, owned)
            .into_iter()
            .partition(drops_eip_mark);
        for step in &steps {
            tracing::info!(blb = %blb.blb_id, step = ?step, "applying");
            self.apply(&blb.blb_id, step).await?;
        }
        let (eip_steps, known) = self.address_plan(&blb, &desired, owned).await?;
        let created = self.apply_eip_steps(&blb.blb_id, &eip_steps).await?;
        for step in &unmark {
            tracing::info!(blb = %blb.blb_id, step = ?step, "applying");
            self.apply(&blb.blb_id, step).await?;
        }
        let address = known.or(created).unwrap_or_default();
        let public = desired.eip.is_some() || desired.user_eip.is_some();
        Ok(status_for(&blb, owned, &address, public))
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        let blbs = self.blbs_to_delete(service).await?;
        for blb in blbs.iter().cloned() {
            // Every EIP bound to the Service's BLB is unbound (a user's loadBalancerIP too, as
            // upstream did); ours are released. Then the BLB, unless reserve-lb.
            let mut steps = self.detach_steps(&blb, service, false).await?;
            steps.extend(self.unbound_upstream_eips(&blb).await?);
            self.apply_eip_steps(&blb.blb_id, &steps).await?;
            let reserved = blb.desc.split_whitespace().any(|w| w == plan::RESERVE_MARK);
            if reserved {
                tracing::info!(blb = %blb.blb_id, "reserve-lb: keeping the BLB");
            } else {
                if blb.status != "available" {
                    self.wait_available(&blb.blb_id).await?;
                }
                let client = &self.client;
                self.change(&blb.blb_id, || async {
                    match client.delete_blb(&blb.blb_id).await {
                        Err(e) if e.is_not_found() => Ok(()),
                        other => other,
                    }
                })
                .await?;
            }
        }
        // The BLBs are gone, so their groups are unbound and can go.
        self.delete_groups(service, &blbs).await?;
        // Our EIPs, now unbound (or left by an earlier crash): released unless prepaid.
        for eip in self.loose_eips(service).await? {
            if eip.payment_timing == "Prepaid" {
                tracing::info!(eip = %eip.eip, "prepaid EIP kept (BCE releases prepaid EIPs only after they expire)");
                continue;
            }
            match self.client.release_eip(&eip.eip).await {
                Err(error) if !error.is_not_found() => return Err(error.into()),
                _ => {}
            }
        }
        Ok(())
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let name = plan::blb_name(&self.cluster, service);
        let blb = match self.find_owned(&name, service, Leftovers::Keep).await? {
            Some(blb) => blb,
            None => match self.renamed_blb(service).await? {
                Some(blb) => blb,
                None => return Ok(None),
            },
        };
        let public = !blb.public_ip.is_empty();
        let address = if public {
            blb.public_ip.clone()
        } else {
            blb.address.clone()
        };
        Ok(Some(status_for(&blb, true, &address, public)))
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        let desired = self.parse_desired(spec, backends)?;
        let found = self.find(&desired, Leftovers::Keep).await?;
        self.check_requested_eip(&desired, found.as_ref().map(|(blb, _)| blb))
            .await?;
        let eip_name = desired
            .eip
            .as_ref()
            .map_or_else(|| desired.name.clone(), |e| e.name.clone());
        let Some((blb, owned)) = found else {
            let mut changes = self.planned_leftover_removal(&desired).await?;
            changes.push(PlannedChange::new(
                ChangeAction::Create,
                "LoadBalancer",
                &desired.name,
                "blb:CreateLoadBalancer",
            ));
            let group = source_ranges::group_name(&desired.service);
            changes.extend(
                self.source_range_steps(None, spec, &desired)
                    .await?
                    .iter()
                    .map(|s| s.planned(&desired.name, &group)),
            );
            for l in desired.listeners.values() {
                changes.push(Step::CreateListener(l.clone()).planned(&desired.name));
            }
            if !desired.backends.is_empty() {
                changes.push(
                    Step::AddBackends(desired.backends.iter().cloned().collect())
                        .planned(&desired.name),
                );
            }
            let eip_steps = match (&desired.user_eip, &desired.eip) {
                (Some(ip), _) => vec![EipStep::Bind(Some(ip.clone()))],
                (None, Some(eip)) => vec![EipStep::Create(eip.clone()), EipStep::Bind(None)],
                (None, None) => Vec::new(),
            };
            changes.extend(eip_steps.iter().map(|s| s.planned(&eip_name)));
            return Ok(changes);
        };
        let mut changes: Vec<PlannedChange> = Vec::new();
        if owned {
            let group = source_ranges::group_name(&desired.service);
            changes.extend(
                self.source_range_steps(Some(&blb), spec, &desired)
                    .await?
                    .iter()
                    .map(|s| s.planned(&blb.name, &group)),
            );
        }
        let observed = self.observe(&blb.blb_id).await?;
        changes.extend(
            plan::plan(&blb, &observed, &desired, owned)
                .iter()
                .map(|s| s.planned(&blb.name)),
        );
        let (eip_steps, _) = self.address_plan(&blb, &desired, owned).await?;
        changes.extend(eip_steps.iter().map(|s| s.planned(&eip_name)));
        Ok(changes)
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        let mut changes = Vec::new();
        for blb in &self.blbs_to_delete(service).await? {
            let mut steps = self.detach_steps(blb, service, false).await?;
            steps.extend(self.unbound_upstream_eips(blb).await?);
            changes.extend(steps.iter().map(|s| s.planned(&blb.name)));
            if !blb.desc.split_whitespace().any(|w| w == plan::RESERVE_MARK) {
                changes.push(PlannedChange::new(
                    ChangeAction::Delete,
                    "LoadBalancer",
                    &blb.name,
                    "blb:DeleteLoadBalancer",
                ));
            }
        }
        let blbs = self.blbs_to_delete(service).await?;
        if blbs.is_empty() || blbs.iter().any(|b| source_ranges::has_sg_mark(&b.desc)) {
            for group in self.our_groups(service).await? {
                changes.push(source_ranges::Step::Delete(group.id).planned("", ""));
            }
        }
        for eip in self.loose_eips(service).await? {
            if eip.payment_timing != "Prepaid" {
                changes.push(EipStep::Release(eip.eip).planned(""));
            }
        }
        Ok(changes)
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        let mut owned = Vec::new();
        let mark = format!("{}{}", plan::DESC_PREFIX, self.cluster);
        // EIPs cloud-provider-baiducloud created carry no tags: they are known by the BLB they
        // are bound to (its description has upstream's EIP mark), and belong to its Service.
        let mut upstream_eips = std::collections::BTreeMap::new();
        for blb in self.client.blbs().await? {
            // Another cluster's with the same cluster id: never reported as this cluster's
            // leak, so never deleted by `audit --delete`.
            if !blb.desc.contains(&mark)
                || plan::another_clusters(&blb.desc, self.cluster_mark.as_deref())
            {
                continue;
            }
            let (namespace, name) =
                plan::service_of_name(&self.cluster, &blb.name).unwrap_or_default();
            let service = ServiceKey {
                namespace,
                name,
                uid: plan::uid_of_desc(&blb.desc).unwrap_or_default().to_string(),
            };
            if plan::has_eip_mark(&blb.desc) && !blb.public_ip.is_empty() {
                upstream_eips.insert(blb.public_ip.clone(), (blb.clone(), service.clone()));
            }
            owned.push(OwnedResource {
                kind: "LoadBalancer".into(),
                name: blb.name.clone(),
                service,
                created: blb.create_time.clone(),
                shared: false,
            });
        }
        for eip in self.client.eips(&[]).await? {
            let service = if eip.tag(plan::TAG_CLUSTER) == Some(self.cluster.as_str()) {
                let (namespace, name) = eip
                    .tag(plan::TAG_SERVICE)
                    .and_then(|s| s.split_once('/'))
                    .map(|(n, m)| (n.to_string(), m.to_string()))
                    .unwrap_or_default();
                ServiceKey {
                    namespace,
                    name,
                    uid: eip.tag(plan::TAG_UID).unwrap_or_default().to_string(),
                }
            } else if let Some((blb, service)) = upstream_eips.get(&eip.eip)
                && plan::is_upstream_eip(&eip, blb)
            {
                service.clone()
            } else {
                continue;
            };
            owned.push(OwnedResource {
                kind: "Eip".into(),
                name: eip.eip.clone(),
                service,
                created: eip.create_time.clone(),
                shared: false,
            });
        }
        Ok(owned)
    }
}

impl BaiduProvider {
    /// The Service's security groups in the cluster's VPC (by tags).
    async fn our_groups(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<crate::client::SecurityGroup>, ProviderError> {
        Ok(self
            .client
            .security_groups(&self.vpc_id)
            .await?
            .into_iter()
            .filter(|g| source_ranges::is_ours(g, &self.cluster, service))
            .collect())
    }

    /// The security-group steps for the Service's BLB `blb` (`None`: not created yet), with
    /// no read when nothing is asked and the description says no group may be left.
    async fn source_range_steps(
        &self,
        blb: Option<&Blb>,
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<Vec<source_ranges::Step>, ProviderError> {
        let wanted = source_ranges::restricted(&spec.source_ranges)
            .map(|cidrs| source_ranges::desired_rules(&cidrs, desired.listeners.values()));
        if wanted.is_none() && !blb.is_some_and(|b| source_ranges::has_sg_mark(&b.desc)) {
            return Ok(Vec::new());
        }
        let bound: Vec<String> = match blb {
            Some(blb) => self
                .client
                .blb_security_groups(&blb.blb_id)
                .await?
                .into_iter()
                .map(|g| g.security_group_id)
                .collect(),
            None => Vec::new(),
        };
        let ours = self.our_groups(&desired.service).await?;
        Ok(source_ranges::plan(&ours, &bound, wanted.as_deref()))
    }

    /// Makes the security-group `steps` on BLB `blb_id`.
    async fn apply_source_ranges(
        &self,
        blb_id: &str,
        service: &ServiceKey,
        steps: &[source_ranges::Step],
    ) -> Result<(), ProviderError> {
        let name = source_ranges::group_name(service);
        let remark = format!("kube-lb {}/{}", service.namespace, service.name);
        let c = &self.client;
        let mut created: Option<String> = None;
        for step in steps {
            tracing::info!(blb = %blb_id, change = ?step.planned(blb_id, &name), "applying");
            match step {
                source_ranges::Step::Create(rules) => {
                    let body = json!({
                        "name": name,
                        "desc": source_ranges::group_description(&self.cluster, service),
                        "vpcId": self.vpc_id,
                        "rules": rules.iter().map(|r| r.to_json(&remark)).collect::<Vec<_>>(),
                        "tags": source_ranges::group_tags(&self.cluster, service),
                    });
                    let id = c.create_security_group(&body).await?;
                    tracing::info!(blb = %blb_id, group = %id, "created the Service's security group");
                    created = Some(id);
                }
                source_ranges::Step::Authorize { group, rule } => {
                    c.authorize_rule(group, &rule.to_json(&remark)).await?;
                }
                source_ranges::Step::DeleteRule { id, .. } => match c.delete_rule(id).await {
                    Err(error) if !error.is_not_found() => return Err(error.into()),
                    _ => {}
                },
                source_ranges::Step::Bind(group) => {
                    let id = match group {
                        GroupRef::Id(id) => id.clone(),
                        GroupRef::New => {
                            created.clone().ok_or_else(|| ProviderError::Internal {
                                message: "a security group bound before it was created".into(),
                                source: None,
                            })?
                        }
                    };
                    let ids = [id];
                    self.change(blb_id, || c.bind_security_groups(blb_id, &ids, true))
                        .await?;
                }
                source_ranges::Step::Unbind(groups) => {
                    self.change(blb_id, || c.bind_security_groups(blb_id, groups, false))
                        .await?;
                }
                source_ranges::Step::Delete(id) => match c.delete_security_group(id).await {
                    Err(error) if !error.is_not_found() => return Err(error.into()),
                    _ => {}
                },
            }
        }
        Ok(())
    }

    /// Deletes the Service's security groups once its BLBs are gone: read when a BLB said a
    /// group may exist ([`source_ranges::SG_MARK`]) or none was left to say (an earlier
    /// delete that stopped after the BLB).
    async fn delete_groups(&self, service: &ServiceKey, blbs: &[Blb]) -> Result<(), ProviderError> {
        if !blbs.is_empty() && !blbs.iter().any(|b| source_ranges::has_sg_mark(&b.desc)) {
            return Ok(());
        }
        let ours = self.our_groups(service).await?;
        // A BLB kept on delete (reserve-lb) still has the group bound: unbound first, or BCE
        // refuses to delete it.
        let kept = blbs
            .iter()
            .filter(|b| b.desc.split_whitespace().any(|w| w == plan::RESERVE_MARK));
        for blb in kept {
            let bound: Vec<String> = self
                .client
                .blb_security_groups(&blb.blb_id)
                .await?
                .into_iter()
                .map(|g| g.security_group_id)
                .filter(|id| ours.iter().any(|g| &g.id == id))
                .collect();
            if !bound.is_empty() {
                let c = &self.client;
                self.change(&blb.blb_id, || {
                    c.bind_security_groups(&blb.blb_id, &bound, false)
                })
                .await?;
            }
        }
        for group in ours {
            match self.client.delete_security_group(&group.id).await {
                Err(error) if !error.is_not_found() => return Err(error.into()),
                _ => tracing::info!(group = %group.id, "deleted the Service's security group"),
            }
        }
        Ok(())
    }

    /// A BLB of this cluster whose description records the Service's UID but whose name is not
    /// the default (`cce-load-balancer-lb-name`): found by listing, so delete stays leak-free.
    async fn renamed_blb(&self, service: &ServiceKey) -> Result<Option<Blb>, ProviderError> {
        Ok(self.renamed_blbs(service).await?.into_iter().next())
    }

    /// Every BLB of this cluster whose description records the Service's UID, whatever its
    /// name (one list call).
    async fn renamed_blbs(&self, service: &ServiceKey) -> Result<Vec<Blb>, ProviderError> {
        if service.uid.is_empty() {
            return Ok(Vec::new());
        }
        let mark = format!("{}{}", plan::DESC_PREFIX, self.cluster);
        Ok(self
            .client
            .blbs()
            .await?
            .into_iter()
            .filter(|b| {
                b.desc.contains(&mark) && plan::uid_of_desc(&b.desc) == Some(service.uid.as_str())
            })
            .collect())
    }

    /// The BLBs deleting the Service removes: ours under its name, else every one of this
    /// cluster recording its UID — all of them when the name is held twice, so a duplicate
    /// (made by whatever means) goes with the Service instead of outliving its finalizer.
    async fn blbs_to_delete(&self, service: &ServiceKey) -> Result<Vec<Blb>, ProviderError> {
        let name = plan::blb_name(&self.cluster, service);
        match self.find_owned(&name, service, Leftovers::Keep).await {
            Ok(Some(blb)) => Ok(vec![blb]),
            Ok(None) => self.renamed_blbs(service).await,
            Err(ProviderError::Environment {
                cause: EnvironmentCause::NameTaken,
                message,
                ..
            }) => {
                tracing::info!(%service, %message, "deleting only the BLBs that record this Service");
                self.renamed_blbs(service).await
            }
            Err(error) => Err(error),
        }
    }
}

//! [`BaiduProvider`]: the observation side of the flows in [`crate::flow`] (finding the
//! Service's BLB, waiting out BLB's asynchronous states `creating` / `updating`, reading its
//! listeners, backends and security groups) and the calls under a BLB, a change refused as busy
//! (`OperationDenied`) retried after the wait. `ensure` and `delete` run the flows through
//! [`kube_lb_provider_core::converge::execute`]; `plan_ensure` and `plan_delete` render the
//! same flows ([`kube_lb_provider_core::converge::render`]).
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
use kube_lb_provider_core::converge;
use kube_lb_provider_core::wait::{self, Look};
use kube_lb_provider_core::{
    BackendNode, CallCounter, ClientOptions, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};
use serde_json::json;

use crate::client::{BaiduClient, Blb};
use crate::config::{CloudConfig, Resolved};
use crate::error::BceError;
use crate::flow::{DeleteFlow, EnsureFlow};
use crate::plan::{self, Desired, Observed, Step};
use crate::source_ranges;

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
const BUSY_RETRIES: u32 = 3;

/// What looking the Service's BLB up found.
#[derive(Debug, Clone)]
pub(crate) enum Lookup {
    /// The BLB, and whether it is the Service's own (not an `exist-id` one).
    Found(Blb, bool),
    /// None; with the earlier Service of the same namespace/name whose leftover BLB holds the
    /// name in this cluster ([`plan::leftover_of`]), to be removed before the create.
    Absent(Option<ServiceKey>),
}

/// A description change that removes the EIP mark (the Service no longer wants an EIP of ours).
pub(crate) fn drops_eip_mark(step: &Step) -> bool {
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
pub(crate) fn status_for(blb: &Blb, owned: bool, address: &str, eip: bool) -> LoadBalancerStatus {
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
            cluster: kube_lb_provider_core::cluster::tagging_name(
                config.cluster_id.as_deref(),
                cluster,
            ),
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
    pub fn with_cluster_id(mut self, id: Option<&kube_lb_provider_core::ClusterIdentity>) -> Self {
        self.cluster_mark = id.map(|id| plan::cluster_mark(id.as_str()));
        self
    }

    /// The production options: Baidu's waiting pace and the shared client defaults.
    pub fn default_options() -> ProviderOptions {
        ProviderOptions::new(DEFAULT_WAIT)
    }

    /// Reads the cloud-config at `path` (required) and the environment.
    pub async fn from_cloud_config(
        path: Option<&Path>,
        cluster: &kube_lb_provider_core::ClusterName,
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

    /// The cluster's VPC.
    pub(crate) fn vpc_id(&self) -> &str {
        &self.vpc_id
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
    pub(crate) async fn find(&self, desired: &Desired) -> Result<Lookup, ProviderError> {
        if let Some(id) = &desired.exist_id {
            return match self.client.blb(id).await? {
                Some(blb) => Ok(Lookup::Found(blb, false)),
                None => Err(ProviderError::environment(
                    "blb:DescribeLoadBalancerDetail",
                    EnvironmentCause::MissingDependency,
                    format!("cce-load-balancer-exist-id names BLB {id}, which does not exist"),
                )),
            };
        }
        self.look_up(&desired.name, &desired.service).await
    }

    /// Ours under `name`, if any.
    async fn find_owned(
        &self,
        name: &str,
        service: &ServiceKey,
    ) -> Result<Option<Blb>, ProviderError> {
        Ok(match self.look_up(name, service).await? {
            Lookup::Found(blb, _) => Some(blb),
            Lookup::Absent(_) => None,
        })
    }

    /// The BLB named `name` when it is the Service's, or the earlier Service whose leftover it
    /// is (one list call).
    async fn look_up(&self, name: &str, service: &ServiceKey) -> Result<Lookup, ProviderError> {
        let mut found = self.client.blbs_named(name).await?;
        if let [blb] = found.as_slice()
            && let Some(previous) = self.leftover_of(blb, service)
        {
            // Not this Service's: its ensure removes it first.
            return Ok(Lookup::Absent(Some(previous)));
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
            return Ok(Lookup::Absent(None));
        };
        if self.is_ours(&blb, service) {
            Ok(Lookup::Found(blb, true))
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

    /// Polls until the BLB is `available`; `unavailable` or `paused` (arrears, stopped by the
    /// cloud) and vanishing stop the wait.
    pub(crate) async fn wait_available(&self, id: &str) -> Result<Blb, ProviderError> {
        let what = format!("BLB {id}");
        wait::until(
            &self.wait,
            "blb:DescribeLoadBalancerDetail",
            &what,
            || async {
                let Some(blb) = self.client.blb(id).await? else {
                    return Err(ProviderError::Internal {
                        message: format!(
                            "BLB {id} disappeared while waiting for it to become available"
                        ),
                        source: None,
                    });
                };
                Ok(match blb.status.as_str() {
                    "available" => Look::Done(blb),
                    "unavailable" | "paused" => Look::Failed(ProviderError::environment(
                        "blb:DescribeLoadBalancerDetail",
                        EnvironmentCause::MissingDependency,
                        format!(
                            "BLB {id} is {} (account in arrears or stopped by the cloud)",
                            blb.status
                        ),
                    )),
                    status => Look::Pending(status.to_string()),
                })
            },
        )
        .await
    }

    /// A change under a BLB: refused-as-busy is waited out and retried.
    pub(crate) async fn change<F, Fut>(&self, id: &str, call: F) -> Result<(), ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<(), BceError>>,
    {
        wait::retry_busy("BLB change", BUSY_RETRIES, BceError::is_busy, call, |_| {
            self.wait_available(id)
        })
        .await
    }

    pub(crate) async fn observe(&self, id: &str) -> Result<Observed, ProviderError> {
        Ok(Observed {
            listeners: self.client.listeners(id).await?,
            backends: self.client.backends(id).await?,
        })
    }

    pub(crate) async fn apply(&self, id: &str, step: &Step) -> Result<(), ProviderError> {
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

    /// Polls until the EIP `ip` is `available`.
    pub(crate) async fn wait_eip(&self, ip: &str) -> Result<(), ProviderError> {
        let what = format!("EIP {ip}");
        wait::until(&self.wait, "eip:ListEips", &what, || async {
            let status = self
                .client
                .eips(&[("eip", ip)])
                .await?
                .into_iter()
                .next()
                .map(|e| e.status);
            Ok(match status.as_deref() {
                Some("available") => Look::Done(()),
                Some(status) => Look::Pending(status.to_string()),
                None => Look::Failed(ProviderError::Internal {
                    message: format!("EIP {ip} disappeared"),
                    source: None,
                }),
            })
        })
        .await
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
        converge::execute(&mut EnsureFlow::new(self, spec, desired)).await
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        converge::execute(&mut DeleteFlow::new(self, service)).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let name = plan::blb_name(&self.cluster, service);
        let blb = match self.find_owned(&name, service).await? {
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
        converge::render(&mut EnsureFlow::new(self, spec, desired)).await
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        converge::render(&mut DeleteFlow::new(self, service)).await
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
    pub(crate) async fn our_groups(
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
    pub(crate) async fn source_range_steps(
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
    pub(crate) async fn blbs_to_delete(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<Blb>, ProviderError> {
        let name = plan::blb_name(&self.cluster, service);
        match self.find_owned(&name, service).await {
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

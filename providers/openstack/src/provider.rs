//! [`OpenStackProvider`]: observe the Service's Octavia load balancer, plan (pure, in
//! [`crate::plan`]), apply with Octavia's asynchronous model: every change is followed by a
//! wait for `ACTIVE`, and a 409 on an immutable (`PENDING_*`) load balancer is waited out and
//! retried, never reported to the user.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
use kube_lb_provider_core::wait::{self, Look};
use kube_lb_provider_core::{
    BackendNode, CallCounter, ClientOptions, EnvironmentCause, LoadBalancerIngress,
    LoadBalancerProvider, LoadBalancerStatus, OwnedResource, PlannedChange, ProviderError,
};

use crate::client::OpenStackClient;
use crate::config::CloudConfig;
use crate::error::OpenStackError;
use crate::inventory::Inventory;
use crate::member_subnet::{self, NodeAddress};
use crate::model::{FloatingIp, Listener, LoadBalancer, Port, SecurityGroup};
use crate::plan::{self, Desired, Observed, Ownership};
use crate::security_group::{self, DesiredSecurityGroup, SecurityGroupStep};

// A child of this module (it uses the shell's private helpers), kept beside the other
// sources: tools read `src/` as one flat directory.
#[path = "delete_flow.rs"]
mod delete;
#[path = "ensure_flow.rs"]
mod ensure;

pub use kube_lb_provider_core::WaitSettings;

/// Tunables apart from `cloud.conf`; rate limits are per service (`keystone`, `octavia`,
/// `neutron`). [`OpenStackProvider::default_options`] gives the production ones.
pub type ProviderOptions = ClientOptions;

/// How patiently to wait for a load balancer to leave `PENDING_*`. Upstream polls from 1 s
/// growing by 1.2× for about 270 s.
const DEFAULT_WAIT: WaitSettings = WaitSettings {
    first: Duration::from_secs(1),
    factor: 1.2,
    max_interval: Duration::from_secs(15),
    timeout: Duration::from_secs(300),
};

/// The OpenStack provider: Octavia load balancers, Neutron floating IPs.
#[derive(Debug, Clone)]
pub struct OpenStackProvider {
    client: Arc<OpenStackClient>,
    config: Arc<CloudConfig>,
    cluster: String,
    /// The tag naming this cluster's identity (`--cluster-id`), when it is known.
    cluster_tag: Option<String>,
    wait: WaitSettings,
    inventory: Arc<Inventory>,
    /// Held while a port's security-group list is read and rewritten. A port of a node is
    /// shared by every Service's group, and `PUT ports/{id}` replaces the whole list: two
    /// Services converging at once would each write the list they read, and one group would
    /// be lost (seen: a node port left without one Service's group after a reconcile of two).
    port_groups: Arc<tokio::sync::Mutex<()>>,
}

/// How long one project listing serves a resync wave (see [`crate::inventory`]).
pub const DEFAULT_LISTING_REFRESH: Duration = Duration::from_secs(30);

/// How many times a change refused with 409 (busy) is retried after waiting for `ACTIVE`.
const BUSY_RETRIES: u32 = 3;

/// How many node addresses one port listing asks for when finding the member subnet (each
/// adds about 40 characters to the URL).
const ADDRESSES_PER_PORT_QUERY: usize = 40;

impl OpenStackProvider {
    /// A provider for `config`, naming load balancers for `cluster`.
    pub fn new(
        config: CloudConfig,
        cluster: &str,
        options: ProviderOptions,
    ) -> Result<Self, ProviderError> {
        let api = options.cloud_api("openstack");
        let client = OpenStackClient::new(config.global.clone(), api, options.request_timeout)?;
        Ok(OpenStackProvider {
            client: Arc::new(client),
            config: Arc::new(config),
            cluster: cluster.to_string(),
            cluster_tag: None,
            wait: options.wait,
            inventory: Arc::new(Inventory::new(DEFAULT_LISTING_REFRESH)),
            port_groups: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// The production options: OpenStack's waiting pace and the shared client defaults.
    pub fn default_options() -> ProviderOptions {
        ProviderOptions::new(DEFAULT_WAIT)
    }

    /// Tags the load balancers it makes with this cluster's identity `id` (`--cluster-id`, by
    /// default the UID of the kube-system namespace), and so can tell a load balancer that a
    /// deleted Service of this cluster left behind under a namespace/name from another
    /// cluster's with the same `--cluster-name`: the first is removed when a new Service of
    /// that namespace/name is ensured, the second refused. `None` (unknown) refuses both.
    pub fn with_cluster_id(mut self, id: Option<&kube_lb_provider_core::ClusterIdentity>) -> Self {
        self.cluster_tag = id.map(|id| plan::cluster_tag(id.as_str()));
        self
    }

    /// Reuses one project listing for `refresh` across the Services of a resync wave
    /// (default [`DEFAULT_LISTING_REFRESH`]); zero reads every Service on its own.
    pub fn with_listing_refresh(mut self, refresh: Duration) -> Self {
        self.inventory = Arc::new(Inventory::new(refresh));
        self
    }

    /// Reads `cloud.conf` at `path` (required for OpenStack) and builds the provider.
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
            internal("--cloud openstack needs --cloud-config pointing at a cloud.conf".into())
        })?;
        let text = tokio::fs::read_to_string(path)
            .await
            .map_err(|e| internal(format!("reading {}: {e}", path.display())))?;
        let config =
            CloudConfig::parse(&text).map_err(|e| internal(format!("{}: {e}", path.display())))?;
        Self::new(
            config,
            cluster,
            ProviderOptions {
                counter,
                ..Self::default_options()
            },
        )
    }

    /// The client (for tests and tools).
    pub fn client(&self) -> &OpenStackClient {
        &self.client
    }

    /// Our load balancer for `service`, if one exists: found by name, else (as upstream, with
    /// `legacy`) by the in-tree provider's legacy name `a<UID>`, ignoring ones being deleted;
    /// `Err` when the name is taken by someone else's. A legacy load balancer keeps its name:
    /// upstream never renames it either, so a rollback finds it as before.
    async fn find(
        &self,
        service: &ServiceKey,
        legacy: bool,
    ) -> Result<Option<LoadBalancer>, ProviderError> {
        let name = plan::load_balancer_name(&self.cluster, service);
        let found = self.client.load_balancers_named(&name).await?;
        if let Some(lb) = self.ours_among(found, service)? {
            return Ok(Some(lb));
        }
        let Some(legacy_name) = plan::legacy_load_balancer_name(service).filter(|_| legacy) else {
            return Ok(None);
        };
        let found = self.client.load_balancers_named(&legacy_name).await?;
        let lb = self.ours_among(found, service)?;
        if let Some(lb) = &lb {
            tracing::info!(%service, lb = %lb.id, name = %lb.name, "found the Service's load balancer under its legacy in-tree name");
        }
        Ok(lb)
    }

    /// The Service's load balancer as it should be ([`plan::desired`]), tagged with this
    /// cluster's identity when that is known and the load balancer is kube-lb's own (not one
    /// that `load-balancer-id` names).
    fn desired(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Desired, ProviderError> {
        let mut desired = plan::desired(spec, backends, &self.cluster, &self.config.load_balancer)?;
        if desired.existing_id.is_none() {
            desired.tags.extend(self.cluster_tag.clone());
        }
        Ok(desired)
    }

    /// What `lb` is to `service` ([`plan::ownership`] with this provider's cluster marks).
    fn ownership(&self, lb: &LoadBalancer, service: &ServiceKey) -> Ownership {
        plan::ownership(lb, &self.cluster, self.cluster_tag.as_deref(), service)
    }

    /// Every live load balancer under the Service's name (or its legacy in-tree name) whose
    /// ownership marks name this cluster and Service. A delete removes them all: a second one
    /// (a create whose answer was lost and that nothing found in time) must not outlive the
    /// Service, and with names taken from namespace/name it would block the next Service of
    /// that name. Load balancers of other owners under the name are left alone.
    async fn owned_load_balancers(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<LoadBalancer>, ProviderError> {
        let mut names = vec![plan::load_balancer_name(&self.cluster, service)];
        names.extend(plan::legacy_load_balancer_name(service));
        let mut owned = Vec::new();
        for name in names {
            owned.extend(
                self.client
                    .load_balancers_named(&name)
                    .await?
                    .into_iter()
                    .filter(is_live)
                    .filter(|lb| matches!(self.ownership(lb, service), Ownership::Ours)),
            );
        }
        Ok(owned)
    }

    /// The listeners this Service added to load balancers it adopted (`load-balancer-id`),
    /// each with its load balancer's id: they carry its UID tag, on a load balancer not
    /// among `owned`.
    async fn adopted_listeners(
        &self,
        service: &ServiceKey,
        owned: &[LoadBalancer],
    ) -> Result<Vec<(String, Listener)>, ProviderError> {
        if service.uid.is_empty() {
            return Ok(Vec::new());
        }
        let tag = plan::uid_tag(service);
        Ok(self
            .client
            .listeners_matching(&[("tags", tag.as_str())])
            .await?
            .into_iter()
            .filter_map(|listener| {
                let lb_id = listener.loadbalancers.first()?.id.clone();
                owned
                    .iter()
                    .all(|ours| ours.id != lb_id)
                    .then_some((lb_id, listener))
            })
            .collect())
    }

    /// The address `lb` is reached at: the floating IP on its VIP port, else the VIP.
    async fn public_address(&self, lb: &LoadBalancer) -> Result<String, ProviderError> {
        let fip = self
            .client
            .floating_ips(&[("port_id", &lb.vip_port_id)])
            .await?;
        Ok(fip
            .first()
            .map(|f| f.floating_ip_address.clone())
            .unwrap_or_else(|| lb.vip_address.clone()))
    }

    /// Of the load balancers carrying a Service's name, the live one, when it is ours.
    fn ours_among(
        &self,
        found: Vec<LoadBalancer>,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancer>, ProviderError> {
        // An earlier Service's leftover under the name is not counted: the ensure flow
        // removes it in its first phase (see `delete_flow`'s leftover steps).
        let mut found: Vec<LoadBalancer> = found
            .into_iter()
            .filter(|lb| {
                is_live(lb) && !matches!(self.ownership(lb, service), Ownership::Leftover(_))
            })
            .collect();
        if found.len() > 1 {
            return Err(ProviderError::environment(
                "octavia:ListLoadBalancers",
                EnvironmentCause::NameTaken,
                format!(
                    "{} load balancers are named {}; remove the extra ones",
                    found.len(),
                    found[0].name
                ),
            ));
        }
        let Some(lb) = found.pop() else {
            return Ok(None);
        };
        match self.ownership(&lb, service) {
            Ownership::Ours => Ok(Some(lb)),
            // Not this Service's: its ensure removes it (planned as leftover steps).
            Ownership::Leftover(_) => Ok(None),
            Ownership::Foreign(owner) => Err(ProviderError::owned_elsewhere(
                "octavia:ListLoadBalancers",
                format!("load balancer {} ({})", lb.name, lb.id),
                owner,
            )),
        }
    }

    /// The load balancer a Service uses: the one `load-balancer-id` names (ours when it
    /// carries our name and description, else adopted: only our listeners on it are
    /// touched), or ours by name. `legacy`: whether to look up the legacy name too (not when a
    /// fresh project listing already showed it absent: kube-lb never creates legacy names, so
    /// none can appear). An earlier Service's load balancer under the name is left alone.
    async fn locate(
        &self,
        service: &ServiceKey,
        desired: &Desired,
        legacy: bool,
    ) -> Result<Located, ProviderError> {
        let Some(id) = &desired.existing_id else {
            return Ok(match self.find(service, legacy).await? {
                Some(lb) => Located::Ours(lb),
                None => Located::Absent,
            });
        };
        let lb = self
            .client
            .load_balancer(id)
            .await?
            .filter(|lb| lb.provisioning_status != "DELETED")
            .ok_or_else(|| {
                ProviderError::environment(
                    "octavia:GetLoadBalancer",
                    EnvironmentCause::MissingDependency,
                    format!(
                        "annotation {} names load balancer {id}, which does not exist",
                        kube_lb_annotations::keys::openstack::LOAD_BALANCER_ID
                    ),
                )
            })?;
        let ours = desired.names(&lb) && self.ownership(&lb, service) == Ownership::Ours;
        Ok(if ours {
            Located::Ours(lb)
        } else {
            Located::Adopted(lb)
        })
    }

    /// Polls until the load balancer is `ACTIVE` and returns it as last read; `ERROR` (Octavia
    /// could not build it) and vanishing stop the wait.
    async fn wait_active(&self, lb_id: &str) -> Result<LoadBalancer, ProviderError> {
        let what = format!("load balancer {lb_id}");
        wait::until(&self.wait, "octavia:GetLoadBalancer", &what, || async {
            let Some(lb) = self.client.load_balancer(lb_id).await? else {
                return Err(ProviderError::Internal {
                    message: format!("load balancer {lb_id} disappeared while waiting for ACTIVE"),
                    source: None,
                });
            };
            Ok(match lb.provisioning_status.as_str() {
                "ACTIVE" => Look::Done(lb),
                "ERROR" => Look::Failed(ProviderError::pending(
                    "octavia:GetLoadBalancer",
                    format!(
                        "load balancer {} ({lb_id}) went to provisioning_status ERROR (Octavia could not build it)",
                        lb.name
                    ),
                )),
                status => Look::Pending(status.to_string()),
            })
        })
        .await
    }

    /// Polls until the load balancer is gone.
    async fn wait_deleted(&self, lb_id: &str) -> Result<(), ProviderError> {
        let what = format!("load balancer {lb_id}");
        wait::until(&self.wait, "octavia:DeleteLoadBalancer", &what, || async {
            Ok(match self.client.load_balancer(lb_id).await? {
                None => Look::Done(()),
                Some(lb) => Look::Pending(lb.provisioning_status),
            })
        })
        .await
    }

    /// Makes a change under `lb_id`: a 409 "immutable" is waited out and the change retried;
    /// after success, waits for `ACTIVE` again (Octavia refuses the next change until then).
    async fn change<T, F, Fut>(&self, lb_id: &str, call: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, OpenStackError>>,
    {
        self.inventory.touch(lb_id);
        let value = wait::retry_busy(
            "Octavia change under a load balancer",
            BUSY_RETRIES,
            OpenStackError::is_immutable,
            call,
            |_| self.wait_active(lb_id),
        )
        .await?;
        self.wait_active(lb_id).await?;
        Ok(value)
    }

    /// Reads what exists under a load balancer.
    async fn observe(&self, lb: &LoadBalancer) -> Result<Observed, ProviderError> {
        let listeners = self.client.listeners(&lb.id).await?;
        // Pools hang off listeners (kube-lb creates none without one): no listener, no pool read.
        let pools = if listeners.is_empty() {
            Vec::new()
        } else {
            self.client.pools(&lb.id).await?
        };
        let mut observed = Observed {
            listeners,
            pools,
            ..Observed::default()
        };
        for pool in &observed.pools {
            if let Some(id) = &pool.healthmonitor_id
                && let Some(monitor) = self.client.health_monitor(id).await?
            {
                observed.monitors.insert(id.clone(), monitor);
            }
        }
        self.fill_members(&mut observed).await?;
        Ok(observed)
    }

    /// Members of every observed pool: from the cache while the pool's member ids are
    /// unchanged (an Octavia member's address and port cannot change), else read.
    async fn fill_members(&self, observed: &mut Observed) -> Result<(), ProviderError> {
        for pool in &observed.pools {
            let members = match self.inventory.cached_members(pool) {
                Some(members) => members,
                None => {
                    let members = self.client.members(&pool.id).await?;
                    self.inventory.remember_members(&pool.id, &members);
                    members
                }
            };
            observed.members.insert(pool.id.clone(), members);
        }
        Ok(())
    }

    /// Creates the load balancer with its whole graph in one call and waits for `ACTIVE`. One
    /// that lands in `ERROR` is deleted, so the next attempt starts clean.
    async fn create(&self, body: &serde_json::Value) -> Result<LoadBalancer, ProviderError> {
        let created = self.client.create_load_balancer(body).await?;
        tracing::info!(lb = %created.id, name = %created.name, "created load balancer");
        match self.wait_active(&created.id).await {
            Ok(lb) => Ok(lb),
            Err(error) => {
                let errored = self
                    .client
                    .load_balancer(&created.id)
                    .await?
                    .is_some_and(|lb| lb.provisioning_status == "ERROR");
                if errored {
                    tracing::warn!(lb = %created.id, "new load balancer went to ERROR; deleting it to start over");
                    self.client.delete_load_balancer(&created.id).await?;
                }
                Err(error)
            }
        }
    }

    /// The floating subnets to try in order: the configured one, those matching the name
    /// pattern and tags, or `[None]` (Neutron chooses).
    async fn floating_subnets(
        &self,
        network: &str,
        desired: &Desired,
    ) -> Result<Vec<Option<String>>, ProviderError> {
        let floating = &desired.floating;
        if let Some(subnet) = &floating.subnet_id {
            return Ok(vec![Some(subnet.clone())]);
        }
        if floating.subnet_name.is_none() && floating.subnet_tags.is_empty() {
            return Ok(vec![None]);
        }
        let tags = floating.subnet_tags.join(",");
        let mut filters = vec![("network_id", network)];
        if !tags.is_empty() {
            filters.push(("tags", tags.as_str()));
        }
        let matching: Vec<Option<String>> = self
            .client
            .subnets(&filters)
            .await?
            .into_iter()
            .filter(|s| {
                floating
                    .subnet_name
                    .as_deref()
                    .is_none_or(|pattern| plan::name_matches(pattern, &s.name))
                    && floating.subnet_tags.iter().all(|t| s.tags.contains(t))
            })
            .map(|s| Some(s.id))
            .collect();
        if matching.is_empty() {
            return Err(ProviderError::environment(
                "neutron:ListSubnets",
                EnvironmentCause::MissingDependency,
                format!(
                    "no subnet of floating network {network} matches floating-subnet {:?} and floating-subnet-tags {:?}",
                    floating.subnet_name.as_deref().unwrap_or("*"),
                    floating.subnet_tags
                ),
            ));
        }
        Ok(matching)
    }

    /// Allocates a floating IP from the first of `subnets` that has room (upstream tries
    /// subnet by subnet); the last refusal is reported when none does.
    async fn create_floating_ip_in(
        &self,
        body: &serde_json::Value,
        subnets: &[Option<String>],
    ) -> Result<FloatingIp, ProviderError> {
        let mut last = None;
        for subnet in subnets {
            let mut body = body.clone();
            if let Some(subnet) = subnet {
                body["subnet_id"] = serde_json::json!(subnet);
            }
            match self.client.create_floating_ip(&body).await {
                Ok(fip) => return Ok(fip),
                Err(error) if subnets.len() > 1 && error.status().is_some_and(|s| s < 500) => {
                    tracing::info!(?subnet, %error, "floating subnet refused; trying the next");
                    last = Some(error);
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(last
            .map(ProviderError::from)
            .unwrap_or_else(|| ProviderError::Internal {
                message: "no floating subnet to try".into(),
                source: None,
            }))
    }

    /// When no configuration names the member subnet, finds it as upstream does, from the
    /// Neutron ports carrying the backend nodes' addresses ([`member_subnet`] says which
    /// subnet wins when nodes disagree), and puts the members on it. With
    /// `manage-security-groups` a subnet is needed (its CIDR goes into the rules), so finding
    /// none is an error naming the addresses looked for; without, the members go without a
    /// subnet, as before (Octavia then reaches them from the VIP's).
    async fn discover_member_subnet(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
        desired: &mut Desired,
    ) -> Result<(), ProviderError> {
        if desired.member_subnet_id.is_some() {
            return Ok(());
        }
        let nodes: Vec<NodeAddress> = backends
            .iter()
            .filter(|node| self.accepts_node(spec, node))
            .filter_map(NodeAddress::of)
            .collect();
        if nodes.is_empty() {
            return Ok(());
        }
        let mut addresses: Vec<&str> = nodes.iter().map(|n| n.address.as_str()).collect();
        addresses.sort_unstable();
        addresses.dedup();
        let ports = match self.inventory.cached_node_ports(&addresses) {
            Some(ports) => ports,
            None => {
                let mut ports = Vec::new();
                // One call per batch: Neutron ORs repeated `fixed_ips` filters; batches keep
                // the URL short whatever the cluster's size.
                for batch in addresses.chunks(ADDRESSES_PER_PORT_QUERY) {
                    let filters: Vec<String> =
                        batch.iter().map(|a| format!("ip_address={a}")).collect();
                    let query: Vec<(&str, &str)> =
                        filters.iter().map(|f| ("fixed_ips", f.as_str())).collect();
                    ports.extend(self.client.ports(&query).await?);
                }
                self.inventory.remember_node_ports(&addresses, &ports);
                ports
            }
        };
        match member_subnet::discover(&nodes, &ports) {
            Some(found) => {
                if !found.elsewhere.is_empty() {
                    tracing::warn!(service = %spec.service, subnet = %found.subnet_id, nodes_on_it = ?found.on_it, nodes_elsewhere = ?found.elsewhere, "backend nodes are on different subnets; the members go on the subnet of most nodes");
                }
                tracing::debug!(service = %spec.service, subnet = %found.subnet_id, nodes_without_port = ?found.without_port, "member subnet found from the nodes' ports");
                desired.use_member_subnet(&found.subnet_id);
                Ok(())
            }
            None if self.config.load_balancer.manage_security_groups => {
                Err(ProviderError::environment(
                    "neutron:ListPorts",
                    EnvironmentCause::MissingDependency,
                    format!(
                        "manage-security-groups needs the member subnet, and no configuration names it; none of the backend nodes' addresses ({}) is the fixed IP of a Neutron port of this project, so it cannot be found from them: set [LoadBalancer] member-subnet-id (or subnet-id) in cloud.conf, or the loadbalancer.openstack.org/member-subnet-id annotation",
                        addresses.join(", ")
                    ),
                ))
            }
            None => {
                tracing::debug!(service = %spec.service, addresses = ?addresses, "no Neutron port carries a backend node's address; members go without a subnet");
                Ok(())
            }
        }
    }

    /// The Service's security group as `manage-security-groups` wants it, and what exists:
    /// ours under its name (the oldest kept, any further one a duplicate), and the ports of
    /// the member network (where members sit), plus those carrying a duplicate.
    async fn observe_security_group(
        &self,
        spec: &LoadBalancerSpec,
        desired: &Desired,
    ) -> Result<ObservedSecurityGroup, ProviderError> {
        // Configured, or found from the nodes' ports (`discover_member_subnet`, which refuses
        // when it finds none); absent only when the Service has no backend node to look from.
        let subnet_id = desired.member_subnet_id.as_deref().ok_or_else(|| {
            ProviderError::environment(
                "config",
                EnvironmentCause::MissingDependency,
                "manage-security-groups needs the member subnet, and with no backend node there is no node port to find it from: set [LoadBalancer] member-subnet-id (or subnet-id) in cloud.conf, or the loadbalancer.openstack.org/member-subnet-id annotation",
            )
        })?;
        let subnet = self.client.subnet(subnet_id).await?.ok_or_else(|| {
            ProviderError::environment(
                "neutron:GetSubnet",
                EnvironmentCause::MissingDependency,
                format!("member subnet {subnet_id} does not exist"),
            )
        })?;
        let want = security_group::desired_security_group(spec, desired, &self.cluster, &subnet);
        let (mut groups, foreign) = self.security_groups_named(&spec.service).await?;
        // Someone else's group under the Service's name (only theirs): refused rather than a
        // second group of the same name made beside it.
        if groups.is_empty()
            && let Some((group, owner)) = foreign.into_iter().next()
        {
            return Err(ProviderError::owned_elsewhere(
                "neutron:ListSecurityGroups",
                format!("security group {} ({})", group.name, group.id),
                owner,
            ));
        }
        let mut ports = self
            .client
            .ports(&[("network_id", subnet.network_id.as_str())])
            .await?;
        let group = if groups.is_empty() {
            None
        } else {
            Some(groups.remove(0))
        };
        for duplicate in &groups {
            ports.extend(self.ports_carrying(&duplicate.id).await?);
        }
        Ok(ObservedSecurityGroup {
            want,
            group,
            duplicates: groups,
            ports,
        })
    }

    /// The security groups of ours under the Service's group name, oldest first.
    async fn our_security_groups(
        &self,
        service: &ServiceKey,
    ) -> Result<Vec<SecurityGroup>, ProviderError> {
        Ok(self.security_groups_named(service).await?.0)
    }

    /// The security groups under the Service's group name: ours (made by kube-lb, by upstream,
    /// or by an earlier kube-lb whose records on the Service are lost: adopted by their name
    /// and marks), oldest first; and the others, each with who owns it in words.
    async fn security_groups_named(
        &self,
        service: &ServiceKey,
    ) -> Result<(Vec<SecurityGroup>, Vec<(SecurityGroup, String)>), ProviderError> {
        let name = security_group::security_group_name(service);
        let mut ours = Vec::new();
        let mut foreign = Vec::new();
        for group in self
            .client
            .security_groups(&[("name", name.as_str())])
            .await?
            .into_iter()
            // Filtered here too, in case a Neutron ignores the filter.
            .filter(|g| g.name == name)
        {
            match security_group::ownership(&group, &self.cluster, service) {
                Ownership::Ours => ours.push(group),
                Ownership::Foreign(owner) => foreign.push((group, owner)),
                // A group's name holds its Service's UID: never another Service's leftover.
                Ownership::Leftover(previous) => {
                    foreign.push((group, format!("Service {previous}")))
                }
            }
        }
        ours.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        if !ours.is_empty() && !foreign.is_empty() {
            let others: Vec<&str> = foreign.iter().map(|(g, _)| g.id.as_str()).collect();
            tracing::warn!(%service, group = %ours[0].id, others = ?others, "other owners' security groups carry the Service's group name; only kube-lb's is used");
        }
        Ok((ours, foreign))
    }

    /// The ports that carry `group_id` (filtered here too, in case a Neutron ignores the
    /// filter).
    async fn ports_carrying(&self, group_id: &str) -> Result<Vec<Port>, ProviderError> {
        Ok(self
            .client
            .ports(&[("security_groups", group_id)])
            .await?
            .into_iter()
            .filter(|p| p.security_groups.iter().any(|g| g == group_id))
            .collect())
    }

    /// The Service's security groups and the ports carrying them.
    async fn security_groups_to_remove(
        &self,
        service: &ServiceKey,
    ) -> Result<(Vec<SecurityGroup>, Vec<Port>), ProviderError> {
        let groups = self.our_security_groups(service).await?;
        let mut ports = Vec::new();
        for group in &groups {
            ports.extend(self.ports_carrying(&group.id).await?);
        }
        Ok((groups, ports))
    }

    /// Applies `steps` in order; rules are created in `group_id` with `rule_description`.
    async fn apply_security_group_steps(
        &self,
        group_id: &str,
        rule_description: &str,
        steps: &[SecurityGroupStep],
    ) -> Result<(), ProviderError> {
        for step in steps {
            tracing::info!(step = ?step.planned(), "applying");
            match step {
                SecurityGroupStep::CreateRule(rule) => {
                    self.client
                        .create_security_group_rule(&rule.body(group_id, rule_description))
                        .await?
                }
                SecurityGroupStep::DeleteRule { id, .. } => {
                    self.client.delete_security_group_rule(id).await?
                }
                SecurityGroupStep::SetPortGroups {
                    port_id,
                    before,
                    after,
                    ..
                } => self.set_port_groups(port_id, before, after).await?,
                SecurityGroupStep::DeleteGroup { id, .. } => {
                    self.client.delete_security_group(id).await?
                }
            }
        }
        Ok(())
    }

    /// Applies the change `before` → `after` (groups added, groups removed) to the port's list
    /// as it is now, read again under [`OpenStackProvider::port_groups`], so a group another
    /// Service added since this one observed the port is kept. Writes nothing when the list
    /// already is as wanted.
    async fn set_port_groups(
        &self,
        port_id: &str,
        before: &[String],
        after: &[String],
    ) -> Result<(), ProviderError> {
        let _held = self.port_groups.lock().await;
        let current = self
            .client
            .ports(&[("id", port_id)])
            .await?
            .into_iter()
            .next()
            .map(|port| port.security_groups)
            .unwrap_or_else(|| before.to_vec());
        let wanted = security_group::rebase_port_groups(&current, before, after);
        if wanted != current {
            self.client
                .set_port_security_groups(port_id, &wanted)
                .await?;
        }
        Ok(())
    }

    /// Cascade-deletes a load balancer (a busy one is waited out) and waits until it is gone.
    async fn delete_load_balancer(&self, lb_id: &str) -> Result<(), ProviderError> {
        self.inventory.touch(lb_id);
        wait::retry_busy(
            "Octavia load balancer delete",
            BUSY_RETRIES,
            OpenStackError::is_immutable,
            || self.request_delete(lb_id),
            |_| self.wait_active(lb_id),
        )
        .await?;
        self.wait_deleted(lb_id).await
    }

    /// One DELETE of the load balancer. Already gone is done. Refused as busy because it is
    /// already being deleted (our own earlier DELETE whose answer was lost and was repeated,
    /// or another actor's) is done too: repeating it cannot help, and it never becomes
    /// `ACTIVE` again, so waiting for that would fail. Busy with anything else is returned, to
    /// be retried once it is `ACTIVE`.
    async fn request_delete(&self, lb_id: &str) -> Result<(), OpenStackError> {
        match self.client.delete_load_balancer(lb_id).await {
            Ok(()) => Ok(()),
            Err(error) if error.is_not_found() => Ok(()),
            Err(error) if error.is_immutable() => match self.client.load_balancer(lb_id).await? {
                None => Ok(()),
                Some(lb)
                    if matches!(
                        lb.provisioning_status.as_str(),
                        "PENDING_DELETE" | "DELETED"
                    ) =>
                {
                    tracing::info!(lb = %lb_id, "load balancer already being deleted; waiting for it to go");
                    Ok(())
                }
                Some(_) => Err(error),
            },
            Err(error) => Err(error),
        }
    }
}

/// The Service's security group: wanted and found.
#[derive(Debug)]
struct ObservedSecurityGroup {
    want: DesiredSecurityGroup,
    /// Ours (the oldest, when several).
    group: Option<SecurityGroup>,
    /// Further groups of ours under the same name.
    duplicates: Vec<SecurityGroup>,
    /// The ports of the member network, and those carrying a duplicate.
    ports: Vec<Port>,
}

/// True unless `lb` is being deleted or gone.
fn is_live(lb: &LoadBalancer) -> bool {
    !matches!(
        lb.provisioning_status.as_str(),
        "DELETED" | "PENDING_DELETE"
    )
}

/// Where a Service's load balancer is.
#[derive(Debug)]
enum Located {
    /// None exists yet.
    Absent,
    /// Ours (created by kube-lb or upstream for this Service).
    Ours(LoadBalancer),
    /// Someone else's, named by `load-balancer-id`: never deleted, its floating IP never
    /// touched, only this Service's listeners changed.
    Adopted(LoadBalancer),
}

/// On an adopted load balancer, this Service sees only its own listeners (upstream names:
/// `listener_<i>_<our lb name>`); a foreign listener on one of its ports is a user error.
/// The load balancer's tags are left alone.
fn scope_to_service(
    lb: &LoadBalancer,
    observed: Observed,
    desired: &Desired,
) -> Result<(Observed, Desired), ProviderError> {
    let ours = |name: &str| {
        name.strip_prefix("listener_")
            .and_then(|rest| rest.split_once('_'))
            .is_some_and(|(index, lb_name)| {
                index.parse::<usize>().is_ok() && lb_name == desired.name
            })
    };
    if let Some(clash) = observed.listeners.iter().find(|l| {
        !ours(&l.name)
            && desired
                .listeners
                .iter()
                .any(|d| d.protocol == l.protocol && d.port == l.protocol_port)
    }) {
        return Err(ProviderError::user(format!(
            "port {} ({}) is already used by listener {:?} of load balancer {} ({}), which this Service does not own",
            clash.protocol_port, clash.protocol, clash.name, lb.name, lb.id
        )));
    }
    let listeners: Vec<_> = observed
        .listeners
        .into_iter()
        .filter(|l| ours(&l.name))
        .collect();
    let pools = observed
        .pools
        .into_iter()
        .filter(|p| {
            listeners
                .iter()
                .any(|l| l.default_pool_id.as_deref() == Some(p.id.as_str()))
        })
        .collect();
    let mut desired = desired.clone();
    desired.tags = lb.tags.clone();
    Ok((
        Observed {
            listeners,
            pools,
            ..observed
        },
        desired,
    ))
}

/// The descriptions of floating IPs of a Service that a delete looks for when they are
/// detached (left behind): upstream's phrase, the kept one, the legacy in-tree one.
fn leftover_descriptions(marks: &plan::FloatingIpMarks) -> Vec<&str> {
    [
        Some(&marks.release),
        Some(&marks.keep),
        marks.legacy.as_ref(),
    ]
    .into_iter()
    .flatten()
    .map(String::as_str)
    .collect()
}

/// True for a floating IP associated with no port.
fn is_detached(fip: &FloatingIp) -> bool {
    fip.port_id.as_deref().is_none_or(str::is_empty)
}

/// A delete of something already gone succeeds.
async fn ignore_missing(
    call: impl std::future::Future<Output = Result<(), OpenStackError>>,
) -> Result<(), OpenStackError> {
    match call.await {
        Err(error) if error.is_not_found() => Ok(()),
        other => other,
    }
}

#[async_trait]
impl LoadBalancerProvider for OpenStackProvider {
    fn name(&self) -> &'static str {
        "openstack"
    }

    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError> {
        let mut desired = self.desired(spec, backends)?;
        self.discover_member_subnet(spec, backends, &mut desired)
            .await?;
        self.run_ensure(spec, desired).await
    }

    fn accepts_node(&self, spec: &LoadBalancerSpec, node: &BackendNode) -> bool {
        match &spec.provider {
            kube_lb_annotations::ProviderSpec::Openstack(os) => {
                plan::node_selected(os.node_selector.as_deref(), node)
            }
            _ => true,
        }
    }

    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError> {
        self.run_delete(service).await
    }

    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError> {
        let Some(lb) = self.find(service, true).await? else {
            return Ok(None);
        };
        let address = self.public_address(&lb).await?;
        Ok(Some(LoadBalancerStatus {
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
        }))
    }

    async fn plan_ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        let mut desired = self.desired(spec, backends)?;
        self.discover_member_subnet(spec, backends, &mut desired)
            .await?;
        self.render_ensure(spec, desired).await
    }

    async fn plan_delete(&self, service: &ServiceKey) -> Result<Vec<PlannedChange>, ProviderError> {
        self.render_delete(service).await
    }

    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        let mut owned = Vec::new();
        for lb in self.client.load_balancers().await? {
            if plan::another_clusters(&lb.tags, self.cluster_tag.as_deref()) {
                // Another cluster's with the same --cluster-name: never reported as this
                // cluster's leak, so never deleted by `audit --delete`.
                continue;
            }
            if let Some(mut service) = plan::recorded_owner(
                &lb.description,
                plan::LOAD_BALANCER_PHRASE,
                &self.cluster,
                Some(&lb.name),
            ) {
                if let Some(uid) = lb
                    .tags
                    .iter()
                    .find_map(|t| t.strip_prefix(plan::UID_TAG_PREFIX))
                {
                    service.uid = uid.to_string();
                }
                owned.push(OwnedResource {
                    kind: "LoadBalancer".into(),
                    name: lb.name,
                    service,
                    created: lb.created_at,
                    shared: false,
                });
            }
        }
        for group in self.client.security_groups(&[]).await? {
            if let Some(mut service) =
                security_group::recorded_owner(&group.description, &self.cluster)
            {
                service.uid = group
                    .tags
                    .iter()
                    .find_map(|t| t.strip_prefix(plan::UID_TAG_PREFIX))
                    .map(str::to_string)
                    .or_else(|| {
                        // Upstream's groups carry no tag; the UID is in the name.
                        group
                            .name
                            .strip_prefix("lb-sg-")
                            .and_then(|rest| {
                                rest.strip_suffix(&format!(
                                    "-{}-{}",
                                    service.namespace, service.name
                                ))
                            })
                            .map(str::to_string)
                    })
                    .unwrap_or_default();
                owned.push(OwnedResource {
                    kind: "SecurityGroup".into(),
                    name: group.name,
                    service,
                    created: group.created_at,
                    shared: false,
                });
            }
        }
        // Kept floating IPs handed over on Service deletion carry no phrase any more: the
        // user's now, not counted.
        for fip in self.client.floating_ips(&[]).await? {
            if let Some(service) = plan::recorded_owner(
                &fip.description,
                plan::FLOATING_IP_PHRASE,
                &self.cluster,
                None,
            ) {
                owned.push(OwnedResource {
                    kind: "FloatingIp".into(),
                    name: fip.floating_ip_address,
                    service,
                    created: fip.created_at,
                    shared: false,
                });
            }
        }
        Ok(owned)
    }
}

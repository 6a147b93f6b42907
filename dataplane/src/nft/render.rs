//! Pure renderer: a [`Snapshot`] becomes the set of nftables objects one family needs
//! ([`Ruleset`]), and two rulesets become the `nft -f` text that turns one into the other.
//!
//! Layout (chosen by measurement, see the crate README in `dataplane/README.md`):
//! - Services own no chains. A frontend resolves to an endpoint *group* through data maps
//!   (`service-groups`: addr . proto . port → group mark; `nodeport-groups`: proto . port → group
//!   mark), and the `group-chains` verdict map sends the group mark to a chain shared by every
//!   group of the same size and scheduler (`pick_random_10`). An endpoint change is therefore only
//!   element updates, and the `nft` CLI — which lists every chain of the table before each run —
//!   has a handful of chains to list instead of one per Service.
//! - A shared pick chain DNATs through `buckets` ((group mark . bucket) → addr . port), chosen
//!   with `numgen random` or `jhash` of the source. The big maps are referenced by a few rules
//!   only: the kernel's per-binding validation is quadratic when every Service chain references
//!   one shared map (measured).
//! - ClientIP affinity: groups with affinity pick a *slot* (`slots`: (group mark . bucket) → slot
//!   mark) whose endpoint lives in `endpoints` (slot mark → addr . port), and remember the slot
//!   mark per client in the one dynamic `affinity` map. A slot keeps its endpoint while that
//!   endpoint exists, so clients keep their endpoint across unrelated endpoint changes; a client
//!   whose remembered slot was emptied falls through `dnat-remembered` into `group-repick`.
//! - Round robin (`numgen inc`) keeps a counter per rule, so it cannot be shared: each group gets
//!   its own `rr_<id>` chain that writes the slot mark and jumps to the DNAT chain.
//! - Maglev: a group of two or more endpoints owns M `buckets` elements, its Maglev lookup table
//!   ([`crate::maglev`]), and the one shared chain `pick_maglev_<M>` indexes it with `jhash` of the
//!   client address and port. The chain does not depend on the endpoint count, so an endpoint
//!   change only rewrites the table entries that changed owner.
//! - masquerading is decided in postrouting from the connection's original destination (sets
//!   `cluster-ips`, `masq-frontends`, `masq-nodeports`, and `hairpin` for pods reaching
//!   themselves), so no per-Service masquerade chains exist.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::maglev::{self, TableSize};
use crate::model::{EndpointAddr, Protocol, ServicePortModel, Snapshot, TrafficPolicy};

/// Bits of the mark that select the bucket inside a group: at most 4096 endpoints per group.
pub const BUCKET_BITS: u32 = 12;
/// Largest endpoint count one group programs; more are ignored (logged by the backend).
pub const MAX_GROUP_ENDPOINTS: usize = 1 << BUCKET_BITS;
/// Largest group id (the mark's top bit stays clear).
pub const MAX_GROUP_ID: u32 = (1 << (31 - BUCKET_BITS)) - 1;

/// IP family of one table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `table ip`.
    V4,
    /// `table ip6`.
    V6,
}

impl Family {
    /// nft family keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            Family::V4 => "ip",
            Family::V6 => "ip6",
        }
    }

    fn addr_type(self) -> &'static str {
        match self {
            Family::V4 => "ipv4_addr",
            Family::V6 => "ipv6_addr",
        }
    }

    /// True if `ip` belongs to this family.
    pub fn contains(self, ip: &IpAddr) -> bool {
        matches!(
            (self, ip),
            (Family::V4, IpAddr::V4(_)) | (Family::V6, IpAddr::V6(_))
        )
    }

    fn net_contains(self, net: &IpNet) -> bool {
        matches!(
            (self, net),
            (Family::V4, IpNet::V4(_)) | (Family::V6, IpNet::V6(_))
        )
    }
}

/// How a group chain chooses the bucket (the IPVS schedulers nftables can express).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NftScheduler {
    /// `numgen random`.
    #[default]
    Random,
    /// `numgen inc`: round robin.
    RoundRobin,
    /// `jhash` of the source address: source hashing.
    SourceHash,
    /// Maglev consistent hashing of the client address and port over a table of this size.
    Maglev(TableSize),
}

/// Settings of the nftables backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NftConfig {
    /// Table name (the same in both families).
    pub table: String,
    /// Endpoint choice.
    pub scheduler: NftScheduler,
    /// Pod CIDRs of the cluster: ClusterIP traffic from elsewhere is masqueraded, and pods
    /// reaching an externalTrafficPolicy Local frontend use all endpoints. Empty: masquerade all
    /// ClusterIP traffic.
    pub cluster_cidrs: Vec<IpNet>,
}

impl Default for NftConfig {
    fn default() -> Self {
        NftConfig {
            table: "kube-lb".into(),
            scheduler: NftScheduler::Random,
            cluster_cidrs: Vec::new(),
        }
    }
}

/// Sets and maps whose elements the renderer manages.
pub const ELEMENT_CONTAINERS: [&str; 20] = [
    "group-chains",
    "group-repick",
    "service-groups",
    "nodeport-groups",
    "local-frontends",
    "local-nodeports",
    "local-service-groups",
    "local-nodeport-groups",
    "buckets",
    "slots",
    "endpoints",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "firewall-frontends",
    "firewall-allow",
    "nodeport-ips",
    "cluster-ips",
    "masq-frontends",
    "masq-nodeports",
    "hairpin",
];

/// Smallest `size` an element container is declared with.
pub const MIN_CAPACITY: usize = 1024;

/// The `size` a full sync declares for an element container holding `elements`: twice that,
/// rounded up to a power of two, at least [`MIN_CAPACITY`].
///
/// Why a size at all: without one the kernel starts a resizable hash table at a handful of
/// buckets and grows it while a full sync inserts, and at 250,000 elements that insertion took
/// a third of the transaction (measured: 3.3 s → 2.0 s for the `buckets` map alone). The size is
/// also the kernel's cap on the container, so an incremental sync that would outgrow one is
/// sent as a full sync instead, which declares room for twice the new count
/// ([`Ruleset::fits`]): a growing cluster pays one full sync per doubling.
pub fn capacity(elements: usize) -> usize {
    elements
        .saturating_mul(2)
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX)
        .max(MIN_CAPACITY)
}

/// Element containers declared with `flags interval`: the kernel's interval set types take no
/// size hint worth giving, so they are left without a cap.
const INTERVAL_CONTAINERS: [&str; 1] = ["firewall-allow"];

/// Declared `size` per element container (see [`capacity`]).
pub type Capacities = BTreeMap<&'static str, usize>;

/// Everything one family's table holds beyond its fixed skeleton.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ruleset {
    /// Regular chains (shared pick chains and per-group round-robin chains) and their rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Container name → element key → value (`None` for sets).
    pub elements: BTreeMap<&'static str, BTreeMap<String, Option<String>>>,
}

impl Ruleset {
    pub(crate) fn insert(&mut self, container: &'static str, key: String, value: Option<String>) {
        self.elements
            .entry(container)
            .or_default()
            .insert(key, value);
    }

    pub(crate) fn remove(&mut self, container: &'static str, key: &str) {
        if let Some(elements) = self.elements.get_mut(container) {
            elements.remove(key);
            if elements.is_empty() {
                self.elements.remove(container);
            }
        }
    }

    /// Elements `container` holds.
    pub fn len_of(&self, container: &str) -> usize {
        self.elements.get(container).map_or(0, BTreeMap::len)
    }

    /// The `size` a full sync of this ruleset declares for each element container that takes
    /// one.
    pub fn capacities(&self) -> Capacities {
        ELEMENT_CONTAINERS
            .into_iter()
            .filter(|container| !INTERVAL_CONTAINERS.contains(container))
            .map(|container| (container, capacity(self.len_of(container))))
            .collect()
    }

    /// True when every container fits the sizes `declared` (what the last full sync gave the
    /// kernel): otherwise only a full sync can hold this ruleset.
    pub fn fits(&self, declared: &Capacities) -> bool {
        declared
            .iter()
            .all(|(container, size)| self.len_of(container) <= *size)
    }

    /// Elements of one container, for tests and diagnostics.
    pub fn container(&self, name: &str) -> impl Iterator<Item = (&String, &Option<String>)> {
        self.elements.get(name).into_iter().flatten()
    }
}

/// State that keeps the rendering of unchanged Services stable across syncs: group mark ids,
/// and for groups with affinity which slot each endpoint occupies.
#[derive(Debug, Default, Clone)]
pub struct GroupIds {
    ids: HashMap<String, u32>,
    free: Vec<u32>,
    next: u32,
    slots: HashMap<String, Vec<Option<EndpointAddr>>>,
}

impl GroupIds {
    /// The id of `group`; with `allocate`, a new one if it has none (`None`: none free).
    fn get(&mut self, group: &str, allocate: bool) -> Option<u32> {
        if let Some(id) = self.ids.get(group) {
            return Some(*id);
        }
        if !allocate {
            return None;
        }
        // A reused id is harmless: affinity entries keyed by it can only name slots of the group
        // that now owns the id, and empty slots fall back to a fresh choice.
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                if self.next >= MAX_GROUP_ID {
                    return None;
                }
                self.next += 1;
                self.next
            }
        };
        self.ids.insert(group.to_owned(), id);
        Some(id)
    }

    /// Slots of an affinity group after its endpoints became `endpoints`: survivors keep their
    /// slot, newcomers fill the lowest empty ones.
    fn assign_slots(
        &mut self,
        group: &str,
        endpoints: &[EndpointAddr],
        allocate: bool,
    ) -> Vec<Option<EndpointAddr>> {
        if !allocate {
            // Re-rendering what was committed: the slots as they were assigned then.
            return self.slots.get(group).cloned().unwrap_or_default();
        }
        let previous = self.slots.remove(group).unwrap_or_default();
        let wanted: BTreeSet<EndpointAddr> = endpoints.iter().copied().collect();
        let mut slots: Vec<Option<EndpointAddr>> = previous
            .into_iter()
            .map(|slot| slot.filter(|endpoint| wanted.contains(endpoint)))
            .collect();
        let placed: BTreeSet<EndpointAddr> = slots.iter().flatten().copied().collect();
        for endpoint in endpoints
            .iter()
            .filter(|endpoint| !placed.contains(endpoint))
        {
            match slots.iter_mut().find(|slot| slot.is_none()) {
                Some(slot) => *slot = Some(*endpoint),
                None => slots.push(Some(*endpoint)),
            }
        }
        while slots.last().is_some_and(Option::is_none) {
            slots.pop();
        }
        self.slots.insert(group.to_owned(), slots.clone());
        slots
    }

    /// Frees the id (and slots) of one group that is no longer rendered.
    pub(crate) fn forget(&mut self, group: &str) {
        if let Some(id) = self.ids.remove(group) {
            self.free.push(id);
        }
        self.slots.remove(group);
    }

    /// Groups holding an id.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no group holds an id.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Frees the ids (and slots) of groups that are no longer rendered.
    pub(crate) fn retain(&mut self, groups: &HashSet<String>) {
        let free = &mut self.free;
        self.ids.retain(|group, id| {
            let keep = groups.contains(group);
            if !keep {
                free.push(*id);
            }
            keep
        });
        self.slots.retain(|group, _| groups.contains(group));
    }
}

fn group_base(port: &ServicePortModel) -> String {
    let key = &port.key;
    format!(
        "{}/{}/{}/{}",
        key.service.namespace, key.service.name, key.protocol, key.port
    )
}

fn addr_port(ip: IpAddr, port: u16) -> String {
    format!("{ip} . {port}")
}

/// Keeps the mark's group id and clears the slot bits.
const GROUP_MASK: u32 = !((1 << BUCKET_BITS) - 1) & 0x7fff_ffff;

/// Renders one family's objects for a snapshot. Also returns Service ports skipped for lack of
/// mark ids or over-large groups (as warnings).
pub fn render(
    snapshot: &Snapshot,
    family: Family,
    config: &NftConfig,
    ids: &mut GroupIds,
) -> (Ruleset, Vec<String>) {
    let mut renderer = Renderer {
        family,
        config,
        ids,
        allocate: true,
        ruleset: render_global(&snapshot.nodeport_addresses, family, config),
        warnings: Vec::new(),
        groups: HashMap::new(),
    };
    for port in snapshot.ports.values() {
        renderer.port(port);
    }
    let Renderer {
        ids,
        mut ruleset,
        warnings,
        groups,
        ..
    } = renderer;
    ids.retain(&groups.keys().cloned().collect());
    if !config
        .cluster_cidrs
        .iter()
        .any(|net| family.net_contains(net))
    {
        // Without pod CIDRs all ClusterIP traffic is masqueraded: no hairpin case exists.
        ruleset.elements.remove("hairpin");
    }
    (ruleset, warnings)
}

/// What one Service port contributes to one family's table (see [`render_port`]).
#[derive(Debug, Default)]
pub(crate) struct PortFragment {
    /// The port's elements and the chains it uses.
    pub ruleset: Ruleset,
    /// Why parts of the port could not be programmed.
    pub warnings: Vec<String>,
    /// Names of the endpoint groups the port rendered (holding an id or not).
    pub groups: Vec<String>,
}

/// Renders one Service port alone: what [`render`] adds for it. With `allocate` false nothing
/// in `ids` changes: groups without an id stay unprogrammed and affinity slots are the ones
/// assigned before, so rendering a port's last committed model again yields exactly what it
/// committed then (ids and slots only change when the port itself is rendered with
/// `allocate`).
pub(crate) fn render_port(
    port: &ServicePortModel,
    family: Family,
    config: &NftConfig,
    ids: &mut GroupIds,
    allocate: bool,
) -> PortFragment {
    let mut renderer = Renderer {
        family,
        config,
        ids,
        allocate,
        ruleset: Ruleset::default(),
        warnings: Vec::new(),
        groups: HashMap::new(),
    };
    renderer.port(port);
    PortFragment {
        ruleset: renderer.ruleset,
        warnings: renderer.warnings,
        groups: renderer.groups.into_keys().collect(),
    }
}

/// The objects every table holds whatever its Services: the NodePort addresses and the
/// preset pick chains (see [`PRESET_GROUP_SIZES`]).
pub(crate) fn render_global(
    snapshot_addresses: &[IpAddr],
    family: Family,
    config: &NftConfig,
) -> Ruleset {
    let mut ruleset = Ruleset::default();
    for ip in snapshot_addresses.iter().filter(|ip| family.contains(ip)) {
        ruleset.insert("nodeport-ips", ip.to_string(), None);
    }
    for count in 1..=PRESET_GROUP_SIZES {
        if let Some(select) = shared_select(config.scheduler, family, count) {
            pick_chain(
                &mut ruleset,
                family,
                scheduler_name(config.scheduler),
                bucket_count(config.scheduler, count),
                &select,
            );
        }
    }
    ruleset
}

struct Renderer<'a> {
    family: Family,
    config: &'a NftConfig,
    ids: &'a mut GroupIds,
    /// False: render what was committed, without assigning ids or slots.
    allocate: bool,
    ruleset: Ruleset,
    warnings: Vec<String>,
    /// Group name → its mark (None: could not be programmed), so shared groups render once.
    groups: HashMap<String, Option<u32>>,
}

impl Renderer<'_> {
    fn of_family(&self, endpoints: &[EndpointAddr]) -> Vec<EndpointAddr> {
        endpoints
            .iter()
            .copied()
            .filter(|ep| self.family.contains(&ep.ip))
            .collect()
    }

    /// The group mark for `endpoints` of `port` (`kind`: "cl" all endpoints, "lo" local ones).
    fn group(
        &mut self,
        kind: &str,
        endpoints: &[EndpointAddr],
        port: &ServicePortModel,
    ) -> Option<u32> {
        if endpoints.is_empty() {
            return None;
        }
        let name = format!("{kind}/{}", group_base(port));
        if let Some(mark) = self.groups.get(&name) {
            return *mark;
        }
        let mark = match self.program_group(&name, endpoints, port) {
            Ok(mark) => Some(mark),
            Err(warning) => {
                self.warnings.push(format!("{}: {warning}", port.key));
                None
            }
        };
        self.groups.insert(name, mark);
        mark
    }

    fn program_group(
        &mut self,
        name: &str,
        endpoints: &[EndpointAddr],
        port: &ServicePortModel,
    ) -> Result<u32, String> {
        let Some(id) = self.ids.get(name, self.allocate) else {
            return Err("no free mark id for the endpoint group".into());
        };
        let endpoints = if endpoints.len() > MAX_GROUP_ENDPOINTS {
            self.warnings.push(format!(
                "{}: only the first {MAX_GROUP_ENDPOINTS} of {} endpoints are programmed",
                port.key,
                endpoints.len()
            ));
            &endpoints[..MAX_GROUP_ENDPOINTS]
        } else {
            endpoints
        };
        let mark = id << BUCKET_BITS;
        let fam = self.family.keyword();
        let count = endpoints.len();
        let affinity = port
            .affinity_timeout
            .map(|timeout| timeout.as_secs().max(1));
        let remember = |secs: u64| {
            format!(
                "update @affinity {{ meta mark & {GROUP_MASK:#x} . {fam} saddr timeout {secs}s : meta mark }}"
            )
        };
        let recall = |secs: u64| {
            format!(
                "meta mark set meta mark . {fam} saddr map @affinity {} goto dnat-remembered",
                remember(secs)
            )
        };
        let scheduler = scheduler_name(self.config.scheduler);
        let buckets = bucket_count(self.config.scheduler, count);
        // Bucket → endpoint: the Maglev table, or one bucket per endpoint.
        let table = match self.config.scheduler {
            NftScheduler::Maglev(size) if count > 1 => {
                maglev::Table::new(endpoints, size).iter().collect()
            }
            _ => endpoints.to_vec(),
        };
        match (
            shared_select(self.config.scheduler, self.family, count),
            affinity,
        ) {
            (Some(select), None) => {
                for (bucket, endpoint) in table.iter().enumerate() {
                    self.ruleset.insert(
                        "buckets",
                        format!("{mark} . {bucket}"),
                        Some(addr_port(endpoint.ip, endpoint.port)),
                    );
                }
                let chain = pick_chain(&mut self.ruleset, self.family, scheduler, buckets, &select);
                self.ruleset.insert(
                    "group-chains",
                    mark.to_string(),
                    Some(format!("goto {chain}")),
                );
            }
            (Some(select), Some(secs)) => {
                let slots = self.ids.assign_slots(name, endpoints, self.allocate);
                let mut slot_marks = HashMap::new();
                for (slot, endpoint) in slots
                    .iter()
                    .enumerate()
                    .filter_map(|(slot, endpoint)| endpoint.map(|endpoint| (slot, endpoint)))
                {
                    let slot_mark = mark | u32::try_from(slot).unwrap_or(0);
                    slot_marks.insert(endpoint, slot_mark);
                    self.ruleset.insert(
                        "endpoints",
                        slot_mark.to_string(),
                        Some(addr_port(endpoint.ip, endpoint.port)),
                    );
                }
                // Bucket order: occupied slots in slot order, or the Maglev table.
                let owners: Vec<EndpointAddr> = match self.config.scheduler {
                    NftScheduler::Maglev(_) => table,
                    _ => slots.iter().flatten().copied().collect(),
                };
                for (bucket, endpoint) in owners.iter().enumerate() {
                    if let Some(slot_mark) = slot_marks.get(endpoint) {
                        self.ruleset.insert(
                            "slots",
                            format!("{mark} . {bucket}"),
                            Some(slot_mark.to_string()),
                        );
                    }
                }
                let pick = format!("affpick_{scheduler}_{buckets}_{secs}");
                let entry = format!("aff_{scheduler}_{buckets}_{secs}");
                self.ruleset.chains.insert(
                    pick.clone(),
                    vec![format!(
                        "meta mark set meta mark . {select} map @slots {} goto dnat-chosen",
                        remember(secs)
                    )],
                );
                self.ruleset
                    .chains
                    .insert(entry.clone(), vec![recall(secs), format!("goto {pick}")]);
                self.ruleset.insert(
                    "group-chains",
                    mark.to_string(),
                    Some(format!("goto {entry}")),
                );
                self.ruleset.insert(
                    "group-repick",
                    mark.to_string(),
                    Some(format!("goto {pick}")),
                );
            }
            (None, affinity) => {
                // Round robin: buckets are the slots, in order.
                for (bucket, endpoint) in endpoints.iter().enumerate() {
                    let slot_mark = mark | u32::try_from(bucket).unwrap_or(0);
                    self.ruleset.insert(
                        "endpoints",
                        slot_mark.to_string(),
                        Some(addr_port(endpoint.ip, endpoint.port)),
                    );
                }
                let choose = format!("meta mark set numgen inc mod {count} offset {mark}");
                let entry = format!("rr_{id}");
                match affinity {
                    None => {
                        self.ruleset
                            .chains
                            .insert(entry.clone(), vec![format!("{choose} goto dnat-chosen")]);
                    }
                    Some(secs) => {
                        let pick = format!("rrpick_{id}");
                        self.ruleset.chains.insert(
                            pick.clone(),
                            vec![format!("{choose} {} goto dnat-chosen", remember(secs))],
                        );
                        self.ruleset
                            .chains
                            .insert(entry.clone(), vec![recall(secs), format!("goto {pick}")]);
                        self.ruleset.insert(
                            "group-repick",
                            mark.to_string(),
                            Some(format!("goto {pick}")),
                        );
                    }
                }
                self.ruleset.insert(
                    "group-chains",
                    mark.to_string(),
                    Some(format!("goto {entry}")),
                );
            }
        }
        Ok(mark)
    }

    fn port(&mut self, port: &ServicePortModel) {
        let family = self.family;
        let cluster_ips: Vec<IpAddr> = port
            .cluster_ips
            .iter()
            .copied()
            .filter(|ip| family.contains(ip))
            .collect();
        if cluster_ips.is_empty() {
            return;
        }
        let proto = port.key.protocol;
        let number = port.key.port;
        let cluster = self.of_family(&port.cluster_endpoints);
        let local = self.of_family(&port.local_endpoints);
        let has_endpoints = port.has_endpoints;
        if self
            .config
            .cluster_cidrs
            .iter()
            .any(|net| family.net_contains(net))
        {
            for endpoint in &cluster {
                self.ruleset
                    .insert("hairpin", format!("{0} . {0}", endpoint.ip), None);
            }
        }

        // ClusterIP traffic.
        let internal = match port.internal_policy {
            TrafficPolicy::Cluster => self.group("cl", &cluster, port),
            TrafficPolicy::Local => self.group("lo", &local, port),
        };
        for ip in &cluster_ips {
            let key = format!("{ip} . {proto} . {number}");
            self.ruleset.insert("cluster-ips", ip.to_string(), None);
            match (internal, has_endpoints) {
                (Some(mark), _) => {
                    self.ruleset
                        .insert("service-groups", key, Some(mark.to_string()));
                }
                (None, false) => self.ruleset.insert(
                    "no-endpoint-services",
                    key,
                    Some("goto reject-chain".into()),
                ),
                // Endpoints exist, but none this node may use (internalTrafficPolicy Local or
                // topology): the seed says traffic fails as if there were none.
                (None, true) => self.ruleset.insert(
                    "no-endpoint-services",
                    key,
                    Some(
                        if port.internal_policy == TrafficPolicy::Local {
                            "drop"
                        } else {
                            "goto reject-chain"
                        }
                        .into(),
                    ),
                ),
            }
        }

        if !port.is_external() {
            return;
        }
        let of_family_ips = |ips: &[IpAddr]| -> Vec<IpAddr> {
            ips.iter()
                .copied()
                .filter(|ip| family.contains(ip))
                .collect()
        };
        let lb_ips = of_family_ips(&port.load_balancer_ips);
        let external_ips = of_family_ips(&port.external_ips);
        let cluster_mark = self.group("cl", &cluster, port);
        let policy_local = port.external_policy == TrafficPolicy::Local;
        let local_mark = if policy_local {
            self.group("lo", &local, port)
        } else {
            None
        };
        // What external clients get when nothing can serve them: Cluster rejects like a Service
        // without endpoints; Local drops silently so a load balancer's retry goes to another node.
        let missing = if policy_local {
            (local_mark.is_none()).then_some("drop")
        } else {
            (cluster_mark.is_none()).then_some("goto reject-chain")
        };

        if !port.source_ranges.is_empty() && !lb_ips.is_empty() {
            let ranges: Vec<IpNet> = IpNet::aggregate(
                &port
                    .source_ranges
                    .iter()
                    .copied()
                    .filter(|net| family.net_contains(net))
                    .collect::<Vec<_>>(),
            );
            for ip in &lb_ips {
                let key = format!("{ip} . {proto} . {number}");
                for range in &ranges {
                    self.ruleset
                        .insert("firewall-allow", format!("{key} . {range}"), None);
                }
                // A frontend listed with no allowed range of this family drops every client.
                self.ruleset.insert("firewall-frontends", key, None);
            }
        }

        let frontends = lb_ips
            .iter()
            .chain(&external_ips)
            .map(|ip| format!("{ip} . {proto} . {number}"));
        let node_port = port
            .node_port
            .map(|node_port| format!("{proto} . {node_port}"));
        let targets = frontends
            .map(|key| (key, Containers::FRONTEND))
            .chain(node_port.map(|key| (key, Containers::NODE_PORT)));
        for (key, containers) in targets {
            if !has_endpoints {
                self.ruleset.insert(
                    containers.no_endpoint,
                    key,
                    Some("goto reject-chain".into()),
                );
                continue;
            }
            if let Some(mark) = cluster_mark {
                // Under Local this entry serves pods and the node itself only.
                self.ruleset
                    .insert(containers.groups, key.clone(), Some(mark.to_string()));
                if !policy_local {
                    self.ruleset
                        .insert(containers.masquerade, key.clone(), None);
                }
            }
            if policy_local {
                self.ruleset.insert(containers.local, key.clone(), None);
                if let Some(mark) = local_mark {
                    self.ruleset.insert(
                        containers.local_groups,
                        key.clone(),
                        Some(mark.to_string()),
                    );
                }
            }
            if let Some(verdict) = missing {
                self.ruleset
                    .insert(containers.no_endpoint, key, Some(verdict.into()));
            }
        }
    }
}

/// The containers one kind of external frontend uses.
struct Containers {
    groups: &'static str,
    local: &'static str,
    local_groups: &'static str,
    masquerade: &'static str,
    no_endpoint: &'static str,
}

impl Containers {
    const FRONTEND: Containers = Containers {
        groups: "service-groups",
        local: "local-frontends",
        local_groups: "local-service-groups",
        masquerade: "masq-frontends",
        no_endpoint: "no-endpoint-services",
    };
    const NODE_PORT: Containers = Containers {
        groups: "nodeport-groups",
        local: "local-nodeports",
        local_groups: "local-nodeport-groups",
        masquerade: "masq-nodeports",
        no_endpoint: "no-endpoint-nodeports",
    };
}

/// Group sizes whose shared pick chains always exist. A new chain binds the `buckets` map, and
/// the kernel checks every element of a map on each new binding: creating the chain for a size
/// first seen while the map is large costs tens of milliseconds, so common sizes are created by
/// the full sync, while the map is still empty.
pub const PRESET_GROUP_SIZES: usize = 16;

/// Name prefix of the shared chains that DNAT through `buckets` (`pick_random_10`).
pub const PICK_CHAIN_PREFIX: &str = "pick_";

/// Adds (or keeps) the shared chain that DNATs groups with `buckets` buckets; returns its name.
fn pick_chain(
    ruleset: &mut Ruleset,
    family: Family,
    scheduler: &str,
    buckets: usize,
    select: &str,
) -> String {
    let fam = family.keyword();
    let chain = format!("{PICK_CHAIN_PREFIX}{scheduler}_{buckets}");
    ruleset.chains.entry(chain.clone()).or_insert_with(|| {
        vec![format!(
            "meta l4proto {{ tcp, udp, sctp }} dnat {fam} to meta mark . {select} map @buckets"
        )]
    });
    chain
}

/// The `numgen`/`jhash` expression choosing among `count` buckets; `None` for round robin,
/// whose counter cannot be shared.
fn shared_select(scheduler: NftScheduler, family: Family, count: usize) -> Option<String> {
    let fam = family.keyword();
    match scheduler {
        NftScheduler::Random => Some(format!("numgen random mod {count}")),
        NftScheduler::SourceHash => {
            Some(format!("jhash {fam} saddr mod {count} seed {HASH_SEED:#x}"))
        }
        // `maglev::flow_bucket` computes the same bucket in userspace.
        NftScheduler::Maglev(size) if count > 1 => Some(format!(
            "jhash {fam} saddr . th sport mod {size} seed {:#x}",
            maglev::FLOW_SEED
        )),
        // One endpoint: every flow goes to it, no table needed.
        NftScheduler::Maglev(_) => Some("numgen random mod 1".to_owned()),
        NftScheduler::RoundRobin => None,
    }
}

/// Buckets of a group of `count` endpoints: the Maglev table size, or one per endpoint.
fn bucket_count(scheduler: NftScheduler, count: usize) -> usize {
    match scheduler {
        NftScheduler::Maglev(size) if count > 1 => size.get() as usize,
        _ => count,
    }
}

fn scheduler_name(scheduler: NftScheduler) -> &'static str {
    match scheduler {
        NftScheduler::Random => "random",
        NftScheduler::SourceHash => "sh",
        NftScheduler::RoundRobin => "rr",
        NftScheduler::Maglev(_) => "maglev",
    }
}

/// Seed of the source-hash scheduler's `jhash` (any constant; fixed so hashing is stable).
const HASH_SEED: u32 = 0x6b6c_6221;

/// Most clients the `affinity` map remembers at once (all groups together).
const AFFINITY_CAPACITY: u32 = 1 << 20;

/// The fixed objects of a table: base chains, containers (element containers declared with
/// the sizes in `capacities`), DNAT and reject chains.
pub fn skeleton(family: Family, config: &NftConfig, capacities: &Capacities) -> String {
    let fam = family.keyword();
    let table = &config.table;
    let addr = family.addr_type();
    let daddr = format!("{fam} daddr");
    let frontend = format!("{addr} . inet_proto . inet_service");
    let node_port = "inet_proto . inet_service";
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("add table {fam} {table}"));
    let declarations = [
        ("map", "group-chains", "type mark : verdict;".to_owned()),
        ("map", "group-repick", "type mark : verdict;".to_owned()),
        ("map", "service-groups", format!("type {frontend} : mark;")),
        (
            "map",
            "nodeport-groups",
            format!("type {node_port} : mark;"),
        ),
        ("set", "local-frontends", format!("type {frontend};")),
        ("set", "local-nodeports", format!("type {node_port};")),
        (
            "map",
            "local-service-groups",
            format!("type {frontend} : mark;"),
        ),
        (
            "map",
            "local-nodeport-groups",
            format!("type {node_port} : mark;"),
        ),
        (
            "map",
            "buckets",
            format!("typeof meta mark . numgen random mod 2 : {fam} daddr . th dport;"),
        ),
        (
            "map",
            "slots",
            "typeof meta mark . numgen random mod 2 : meta mark;".to_owned(),
        ),
        (
            "map",
            "endpoints",
            format!("typeof meta mark : {fam} daddr . th dport;"),
        ),
        (
            "map",
            "affinity",
            format!("type mark . {addr} : mark; flags dynamic,timeout; size {AFFINITY_CAPACITY};"),
        ),
        (
            "map",
            "no-endpoint-services",
            format!("type {frontend} : verdict;"),
        ),
        (
            "map",
            "no-endpoint-nodeports",
            format!("type {node_port} : verdict;"),
        ),
        ("set", "firewall-frontends", format!("type {frontend};")),
        (
            "set",
            "firewall-allow",
            format!("type {frontend} . {addr}; flags interval;"),
        ),
        ("set", "nodeport-ips", format!("type {addr};")),
        ("set", "cluster-ips", format!("type {addr};")),
        ("set", "masq-frontends", format!("type {frontend};")),
        ("set", "masq-nodeports", format!("type {node_port};")),
        ("set", "hairpin", format!("type {addr} . {addr};")),
        (
            "set",
            "cluster-cidrs",
            format!("type {addr}; flags interval;"),
        ),
    ];
    for (kind, name, body) in declarations {
        match capacities.get(name) {
            Some(size) => line(format!(
                "add {kind} {fam} {table} {name} {{ {body} size {size}; }}"
            )),
            None => line(format!("add {kind} {fam} {table} {name} {{ {body} }}")),
        }
    }
    let cidrs: Vec<String> = config
        .cluster_cidrs
        .iter()
        .filter(|net| family.net_contains(net))
        .map(|net| net.to_string())
        .collect();
    if !cidrs.is_empty() {
        line(format!(
            "add element {fam} {table} cluster-cidrs {{ {} }}",
            cidrs.join(", ")
        ));
    }

    // DNAT to the slot in the mark. A remembered slot may have been emptied since: such a
    // client forgets it (`update` would only refresh the stale entry's timeout, never its
    // value) and chooses again; the repick chains end in `dnat-chosen`, so there is no loop.
    for chain in ["dnat-chosen", "dnat-remembered"] {
        line(format!("add chain {fam} {table} {chain}"));
        line(format!(
            "add rule {fam} {table} {chain} meta l4proto {{ tcp, udp, sctp }} dnat {fam} to meta mark map @endpoints"
        ));
    }
    line(format!(
        "add rule {fam} {table} dnat-remembered meta mark set meta mark & {GROUP_MASK:#x} delete @affinity {{ meta mark . {fam} saddr : meta mark }} meta mark vmap @group-repick"
    ));
    line(format!("add chain {fam} {table} reject-chain"));
    line(format!("add rule {fam} {table} reject-chain reject"));

    let base = |name: &str, kind: &str, hook: &str, priority: &str| {
        format!(
            "add chain {fam} {table} {name} {{ type {kind} hook {hook} priority {priority}; policy accept; }}"
        )
    };
    // Clients outside the cluster: neither a pod nor the node itself. Only they are held to
    // externalTrafficPolicy Local.
    let outside = format!("{fam} saddr != @cluster-cidrs fib saddr type != local");
    let to_frontend = format!("{daddr} . meta l4proto . th dport");
    let to_node_port = format!("{daddr} @nodeport-ips meta l4proto . th dport");
    let dispatch = [
        format!(
            "{outside} {to_frontend} @local-frontends meta mark set {to_frontend} map @local-service-groups meta mark vmap @group-chains"
        ),
        // Local frontend without a local endpoint: leave it to the filter chains' drop.
        format!("{outside} {to_frontend} @local-frontends return"),
        format!("meta mark set {to_frontend} map @service-groups meta mark vmap @group-chains"),
        format!(
            "{to_node_port} @local-nodeports {outside} meta mark set meta l4proto . th dport map @local-nodeport-groups meta mark vmap @group-chains"
        ),
        format!("{to_node_port} @local-nodeports {outside} return"),
        format!(
            "{daddr} @nodeport-ips meta mark set meta l4proto . th dport map @nodeport-groups meta mark vmap @group-chains"
        ),
    ];
    for hook in ["prerouting", "output"] {
        let name = format!("nat-{hook}");
        line(base(&name, "nat", hook, "-100"));
        for rule in &dispatch {
            line(format!("add rule {fam} {table} {name} {rule}"));
        }
        // Source ranges must see the original destination, before DNAT.
        let name = format!("firewall-{hook}");
        line(base(&name, "filter", hook, "-110"));
        line(format!(
            "add rule {fam} {table} {name} ct state new {to_frontend} @firewall-frontends {to_frontend} . {fam} saddr != @firewall-allow drop"
        ));
    }
    // After DNAT: what is still addressed to a frontend has no usable endpoint here.
    for hook in ["input", "forward", "output"] {
        let name = format!("filter-{hook}");
        line(base(&name, "filter", hook, "0"));
        line(format!(
            "add rule {fam} {table} {name} ct state new {to_frontend} vmap @no-endpoint-services"
        ));
        if hook != "forward" {
            line(format!(
                "add rule {fam} {table} {name} ct state new {to_node_port} vmap @no-endpoint-nodeports"
            ));
        }
        if hook == "input" && family == Family::V4 {
            // With route_localnet on (loopback NodePorts), packets from the network to
            // 127.0.0.0/8 are no longer martians: only DNATed ones may pass (CVE-2020-8558).
            line(format!(
                "add rule {fam} {table} {name} iifname != \"lo\" ip daddr 127.0.0.0/8 ct status & dnat == 0 drop"
            ));
        }
    }
    line(base("nat-postrouting", "nat", "postrouting", "100"));
    let post = |rule: String| {
        format!(
            "add rule {fam} {table} nat-postrouting meta l4proto {{ tcp, udp, sctp }} ct status dnat {rule} masquerade fully-random"
        )
    };
    if cidrs.is_empty() {
        line(post(format!("ct original {daddr} @cluster-ips")));
    } else {
        line(post(format!(
            "{fam} saddr != @cluster-cidrs ct original {daddr} @cluster-ips"
        )));
        // A pod that reached itself through a Service: without masquerade the reply would
        // bypass the reverse NAT.
        line(post(format!("{fam} saddr . {daddr} @hairpin")));
    }
    line(post(format!(
        "ct original {daddr} . meta l4proto . ct original proto-dst @masq-frontends"
    )));
    line(post(format!(
        "ct original {daddr} @nodeport-ips meta l4proto . ct original proto-dst @masq-nodeports"
    )));
    out
}

/// Elements per `add element` line: keeps lines short without many commands.
const ELEMENTS_PER_LINE: usize = 1000;

/// Writes `items` (key, value) as `verb element` lines of at most [`ELEMENTS_PER_LINE`]
/// elements, straight into `out`: a full sync writes hundreds of thousands of elements, and
/// collecting their text first would double the peak memory of the sync.
fn element_lines<'a>(
    out: &mut String,
    verb: &str,
    prefix: &str,
    container: &str,
    items: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) {
    let mut in_line = 0;
    for (key, value) in items {
        if in_line == 0 {
            let _ = write!(out, "{verb} element {prefix} {container} {{ ");
        } else {
            out.push_str(", ");
        }
        out.push_str(key);
        if let Some(value) = value {
            out.push_str(" : ");
            out.push_str(value);
        }
        in_line += 1;
        if in_line == ELEMENTS_PER_LINE {
            out.push_str(" }\n");
            in_line = 0;
        }
    }
    if in_line > 0 {
        out.push_str(" }\n");
    }
}

/// Chains that other rendered chains jump to; deleted after their referrers.
fn is_jump_target(chain: &str) -> bool {
    chain.starts_with("affpick_") || chain.starts_with("rrpick_")
}

/// The `nft -f` text that turns `old` (what was committed) into `new`. `None` = full sync:
/// the table is recreated from scratch in the same transaction, its containers sized for `new`
/// ([`Ruleset::capacities`]).
pub fn diff(old: Option<&Ruleset>, new: &Ruleset, family: Family, config: &NftConfig) -> String {
    let fam = family.keyword();
    let table = &config.table;
    let prefix = format!("{fam} {table}");
    let empty = Ruleset::default();
    let mut out = String::new();
    let old = match old {
        Some(old) => old,
        None => {
            let _ = writeln!(out, "add table {prefix}");
            let _ = writeln!(out, "delete table {prefix}");
            out.push_str(&skeleton(family, config, &new.capacities()));
            &empty
        }
    };

    // 1. Elements that go or change value.
    for container in ELEMENT_CONTAINERS {
        let before = old.elements.get(container);
        let after = new.elements.get(container);
        let gone = before
            .into_iter()
            .flatten()
            .filter(|(key, value)| after.and_then(|after| after.get(*key)) != Some(*value))
            .map(|(key, _)| (key.as_str(), None));
        element_lines(&mut out, "delete", &prefix, container, gone);
    }
    // 2. New and changed chains (flush + refill is atomic within the transaction). All chains
    // exist before any rule or element jumps to one.
    let mut refill = Vec::new();
    for (chain, rules) in &new.chains {
        match old.chains.get(chain) {
            Some(old_rules) if old_rules == rules => continue,
            Some(_) => {
                let _ = writeln!(out, "flush chain {prefix} {chain}");
            }
            None => {
                let _ = writeln!(out, "add chain {prefix} {chain}");
            }
        }
        refill.push((chain, rules));
    }
    for (chain, rules) in refill {
        for rule in rules {
            let _ = writeln!(out, "add rule {prefix} {chain} {rule}");
        }
    }
    // 3. Elements that are new or changed.
    for container in ELEMENT_CONTAINERS {
        let before = old.elements.get(container);
        let added = new
            .elements
            .get(container)
            .into_iter()
            .flatten()
            .filter(|(key, value)| before.and_then(|before| before.get(*key)) != Some(*value))
            .map(|(key, value)| (key.as_str(), value.as_deref()));
        element_lines(&mut out, "add", &prefix, container, added);
    }
    // 4. Chains nobody references any more: referrers first, then what they jumped to.
    let mut gone: Vec<&String> = old
        .chains
        .keys()
        .filter(|chain| !new.chains.contains_key(*chain))
        .collect();
    gone.sort_by_key(|chain| (is_jump_target(chain), chain.to_string()));
    for chain in gone {
        let _ = writeln!(out, "delete chain {prefix} {chain}");
    }
    out
}

/// Endpoint addresses a UDP Service port used before and no longer uses, and UDP frontends that
/// went from no endpoints to some: both need their conntrack entries cleared.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UdpCleanup {
    /// Endpoints that disappeared from every UDP group.
    pub gone_endpoints: BTreeSet<EndpointAddr>,
    /// (frontend IP or None for NodePorts, port) whose Service got its first endpoints.
    pub revived_frontends: BTreeSet<(Option<IpAddr>, u16)>,
}

/// Computes the conntrack work after a sync from the old and new snapshots.
pub fn udp_cleanup(old: &Snapshot, new: &Snapshot) -> UdpCleanup {
    let udp_endpoints = |snapshot: &Snapshot| -> BTreeSet<EndpointAddr> {
        snapshot
            .ports
            .values()
            .filter(|port| port.key.protocol == Protocol::Udp)
            .flat_map(|port| {
                port.cluster_endpoints
                    .iter()
                    .chain(&port.local_endpoints)
                    .copied()
            })
            .collect()
    };
    let before = udp_endpoints(old);
    let after = udp_endpoints(new);
    let mut cleanup = UdpCleanup {
        gone_endpoints: before.difference(&after).copied().collect(),
        ..UdpCleanup::default()
    };
    for (key, port) in &new.ports {
        if key.protocol != Protocol::Udp || !port.has_endpoints {
            continue;
        }
        if old.ports.get(key).is_some_and(|old| old.has_endpoints) {
            continue;
        }
        for ip in port
            .cluster_ips
            .iter()
            .chain(&port.external_ips)
            .chain(&port.load_balancer_ips)
        {
            cleanup.revived_frontends.insert((Some(*ip), key.port));
        }
        if let Some(node_port) = port.node_port {
            cleanup.revived_frontends.insert((None, node_port));
        }
    }
    cleanup
}

#[cfg(test)]
mod tests;

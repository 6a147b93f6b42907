//! Pure renderer: a [`Snapshot`] becomes the set of nftables objects one family needs
//! ([`Ruleset`]), and two rulesets become the `nft -f` text that turns one into the other.
//!
//! Layout (chosen by measurement, see the crate README in `dataplane/README.md`):
//! - dispatch is O(1): `service-ips` (addr . proto . port) and `service-nodeports` (proto . port)
//!   verdict maps jump to one chain per endpoint group;
//! - an endpoint group chain (`cl_…` Cluster endpoints, `lo_…` local ones) writes a packet mark
//!   `id << 12 | bucket` with `numgen`/`jhash … offset` and jumps to the shared `dispatch` chain,
//!   whose single rule per protocol DNATs through the one `endpoints` map keyed by that mark.
//!   One big map referenced by three rules keeps the kernel's per-binding validation cheap; a map
//!   per Service, or one map referenced by every Service chain, is quadratic (measured);
//! - masquerading is decided in postrouting from the connection's original destination (sets
//!   `cluster-ips`, `masq-frontends`, `masq-nodeports`), so no per-Service masquerade chains exist.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;

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
pub const ELEMENT_CONTAINERS: [&str; 10] = [
    "service-ips",
    "service-nodeports",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "firewall-ips",
    "endpoints",
    "nodeport-ips",
    "cluster-ips",
    "masq-frontends",
    "masq-nodeports",
];

/// A dynamic affinity map of one group chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityMap {
    /// Entry timeout in seconds.
    pub timeout_secs: u64,
    /// The group's endpoints; when they change, remembered buckets are void and the map is flushed.
    pub endpoints: Vec<EndpointAddr>,
}

/// Everything one family's table holds beyond its fixed skeleton.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ruleset {
    /// Regular chains and their rules.
    pub chains: BTreeMap<String, Vec<String>>,
    /// Container name → element key → value (`None` for sets).
    pub elements: BTreeMap<&'static str, BTreeMap<String, Option<String>>>,
    /// Affinity map name → settings.
    pub affinity_maps: BTreeMap<String, AffinityMap>,
}

impl Ruleset {
    fn insert(&mut self, container: &'static str, key: String, value: Option<String>) {
        self.elements
            .entry(container)
            .or_default()
            .insert(key, value);
    }

    /// The group endpoints programmed under a mark, for tests and conntrack cleanup.
    pub fn endpoint_elements(&self) -> impl Iterator<Item = (&String, &Option<String>)> {
        self.elements.get("endpoints").into_iter().flatten()
    }
}

/// Stable mark ids for group chains, so an unchanged Service keeps its chain text across syncs.
#[derive(Debug, Default, Clone)]
pub struct GroupIds {
    ids: HashMap<String, u32>,
    free: Vec<u32>,
    next: u32,
}

impl GroupIds {
    fn get(&mut self, chain: &str) -> Option<u32> {
        if let Some(id) = self.ids.get(chain) {
            return Some(*id);
        }
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
        self.ids.insert(chain.to_owned(), id);
        Some(id)
    }

    /// Frees the ids of chains that are no longer rendered.
    pub fn retain(&mut self, chains: &BTreeMap<String, Vec<String>>) {
        let free = &mut self.free;
        self.ids.retain(|chain, id| {
            let keep = chains.contains_key(chain);
            if !keep {
                free.push(*id);
            }
            keep
        });
    }
}

fn chain_base(port: &ServicePortModel) -> String {
    let key = &port.key;
    format!(
        "{}_{}_{}_{}",
        key.service.namespace, key.service.name, key.protocol, key.port
    )
}

fn addr_port(ip: IpAddr, port: u16) -> String {
    format!("{ip} . {port}")
}

/// Renders one family's objects for a snapshot. Also returns Service ports skipped for lack of
/// mark ids or over-large groups (as warnings).
pub fn render(
    snapshot: &Snapshot,
    family: Family,
    config: &NftConfig,
    ids: &mut GroupIds,
) -> (Ruleset, Vec<String>) {
    let mut ruleset = Ruleset::default();
    let mut warnings = Vec::new();
    for ip in snapshot
        .nodeport_addresses
        .iter()
        .filter(|ip| family.contains(ip))
    {
        ruleset.insert("nodeport-ips", ip.to_string(), None);
    }
    for port in snapshot.ports.values() {
        render_port(port, family, config, ids, &mut ruleset, &mut warnings);
    }
    ids.retain(&ruleset.chains);
    (ruleset, warnings)
}

fn render_port(
    port: &ServicePortModel,
    family: Family,
    config: &NftConfig,
    ids: &mut GroupIds,
    ruleset: &mut Ruleset,
    warnings: &mut Vec<String>,
) {
    let cluster_ips: Vec<IpAddr> = port
        .cluster_ips
        .iter()
        .copied()
        .filter(|ip| family.contains(ip))
        .collect();
    if cluster_ips.is_empty() {
        return;
    }
    let fam = family.keyword();
    let proto = port.key.protocol;
    let number = port.key.port;
    let base = chain_base(port);
    let of_family = |eps: &[EndpointAddr]| -> Vec<EndpointAddr> {
        eps.iter()
            .copied()
            .filter(|ep| family.contains(&ep.ip))
            .collect()
    };
    let cluster = of_family(&port.cluster_endpoints);
    let local = of_family(&port.local_endpoints);
    let has_endpoints = port.has_endpoints;
    let mut group =
        |prefix: &str, endpoints: &[EndpointAddr], ruleset: &mut Ruleset| -> Option<String> {
            if endpoints.is_empty() {
                return None;
            }
            let chain = format!("{prefix}_{base}");
            if !ruleset.chains.contains_key(&chain) {
                match group_chain(&chain, endpoints, port, family, config, ids, ruleset) {
                    Ok(()) => {}
                    Err(warning) => {
                        warnings.push(format!("{}: {warning}", port.key));
                        return None;
                    }
                }
            }
            Some(chain)
        };

    // ClusterIP traffic.
    let internal = match port.internal_policy {
        TrafficPolicy::Cluster => group("cl", &cluster, ruleset),
        TrafficPolicy::Local => group("lo", &local, ruleset),
    };
    for ip in &cluster_ips {
        let key = format!("{ip} . {proto} . {number}");
        ruleset.insert("cluster-ips", ip.to_string(), None);
        match (&internal, has_endpoints) {
            (Some(chain), _) => ruleset.insert("service-ips", key, Some(format!("goto {chain}"))),
            (None, false) => ruleset.insert(
                "no-endpoint-services",
                key,
                Some("goto reject-chain".into()),
            ),
            // Endpoints exist, but none this node may use (internalTrafficPolicy Local or
            // topology): the seed says traffic fails as if there were none.
            (None, true) => ruleset.insert(
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
    let lb_ips: Vec<IpAddr> = port
        .load_balancer_ips
        .iter()
        .copied()
        .filter(|ip| family.contains(ip))
        .collect();
    let external_ips: Vec<IpAddr> = port
        .external_ips
        .iter()
        .copied()
        .filter(|ip| family.contains(ip))
        .collect();
    let (external, masquerade, missing_verdict) = match port.external_policy {
        TrafficPolicy::Cluster => (group("cl", &cluster, ruleset), true, "goto reject-chain"),
        TrafficPolicy::Local => {
            let cluster_chain = group("cl", &cluster, ruleset);
            let local_chain = group("lo", &local, ruleset);
            let chain = format!("ext_{base}");
            let mut rules = Vec::new();
            if let Some(cluster_chain) = &cluster_chain {
                if config
                    .cluster_cidrs
                    .iter()
                    .any(|net| family.net_contains(net))
                {
                    rules.push(format!("{fam} saddr @cluster-cidrs goto {cluster_chain}"));
                }
                rules.push(format!("fib saddr type local goto {cluster_chain}"));
            }
            if let Some(local_chain) = &local_chain {
                rules.push(format!("goto {local_chain}"));
            }
            let entry = (!rules.is_empty()).then(|| {
                ruleset.chains.insert(chain.clone(), rules);
                chain
            });
            // Without a local endpoint, what the entry chain does not short-circuit is dropped
            // (a silent drop, so a load balancer's retry goes to another node).
            (entry, false, "drop")
        }
    };
    let local_missing = port.external_policy == TrafficPolicy::Local && local.is_empty();
    let firewall = if port.source_ranges.is_empty() || lb_ips.is_empty() {
        None
    } else {
        let chain = format!("fw_{base}");
        let ranges: Vec<String> = port
            .source_ranges
            .iter()
            .filter(|net| family.net_contains(net))
            .map(|net| net.to_string())
            .collect();
        let rule = if ranges.is_empty() {
            "drop".to_owned()
        } else {
            format!("{fam} saddr != {{ {} }} drop", ranges.join(", "))
        };
        ruleset.chains.insert(chain.clone(), vec![rule]);
        Some(chain)
    };

    let mut frontends: Vec<(IpAddr, bool)> = lb_ips.iter().map(|ip| (*ip, true)).collect();
    frontends.extend(external_ips.iter().map(|ip| (*ip, false)));
    for (ip, is_lb) in frontends {
        let key = format!("{ip} . {proto} . {number}");
        if is_lb && let Some(firewall) = &firewall {
            ruleset.insert(
                "firewall-ips",
                key.clone(),
                Some(format!("goto {firewall}")),
            );
        }
        if !has_endpoints {
            ruleset.insert(
                "no-endpoint-services",
                key,
                Some("goto reject-chain".into()),
            );
            continue;
        }
        if let Some(chain) = &external {
            ruleset.insert("service-ips", key.clone(), Some(format!("goto {chain}")));
            if masquerade {
                ruleset.insert("masq-frontends", key.clone(), None);
            }
        }
        if external.is_none() || local_missing {
            ruleset.insert("no-endpoint-services", key, Some(missing_verdict.into()));
        }
    }
    if let Some(node_port) = port.node_port {
        let key = format!("{proto} . {node_port}");
        if !has_endpoints {
            ruleset.insert(
                "no-endpoint-nodeports",
                key,
                Some("goto reject-chain".into()),
            );
            return;
        }
        if let Some(chain) = &external {
            ruleset.insert(
                "service-nodeports",
                key.clone(),
                Some(format!("goto {chain}")),
            );
            if masquerade {
                ruleset.insert("masq-nodeports", key.clone(), None);
            }
        }
        if external.is_none() || local_missing {
            ruleset.insert("no-endpoint-nodeports", key, Some(missing_verdict.into()));
        }
    }
}

/// One endpoint group: a chain that picks a bucket into the shared `endpoints` map.
fn group_chain(
    chain: &str,
    endpoints: &[EndpointAddr],
    port: &ServicePortModel,
    family: Family,
    config: &NftConfig,
    ids: &mut GroupIds,
    ruleset: &mut Ruleset,
) -> Result<(), String> {
    let Some(id) = ids.get(chain) else {
        return Err("no free mark id for the endpoint group".into());
    };
    let endpoints = if endpoints.len() > MAX_GROUP_ENDPOINTS {
        &endpoints[..MAX_GROUP_ENDPOINTS]
    } else {
        endpoints
    };
    let base = id << BUCKET_BITS;
    for (bucket, endpoint) in endpoints.iter().enumerate() {
        let mark = base | u32::try_from(bucket).unwrap_or(0);
        ruleset.insert(
            "endpoints",
            mark.to_string(),
            Some(addr_port(endpoint.ip, endpoint.port)),
        );
    }
    let fam = family.keyword();
    let count = endpoints.len();
    let select = match config.scheduler {
        NftScheduler::Random => format!("numgen random mod {count} offset {base}"),
        NftScheduler::RoundRobin => format!("numgen inc mod {count} offset {base}"),
        NftScheduler::SourceHash => {
            format!("jhash {fam} saddr mod {count} seed 0x6b6c6221 offset {base}")
        }
    };
    let rules = match port.affinity_timeout {
        None => vec![format!("meta mark set {select} goto dispatch")],
        Some(timeout) => {
            let secs = timeout.as_secs().max(1);
            let map = format!("aff_{chain}_{secs}");
            ruleset.affinity_maps.insert(
                map.clone(),
                AffinityMap {
                    timeout_secs: secs,
                    endpoints: endpoints.to_vec(),
                },
            );
            let remember = format!("update @{map} {{ {fam} saddr : meta mark }} goto dispatch");
            vec![
                format!("meta mark set {fam} saddr map @{map} {remember}"),
                format!("meta mark set {select} {remember}"),
            ]
        }
    };
    ruleset.chains.insert(chain.to_owned(), rules);
    Ok(())
}

/// The fixed objects of a table: base chains, containers, dispatch and reject chains.
pub fn skeleton(family: Family, config: &NftConfig) -> String {
    let fam = family.keyword();
    let table = &config.table;
    let addr = family.addr_type();
    let daddr = format!("{fam} daddr");
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(&text);
        out.push('\n');
    };
    line(format!("add table {fam} {table}"));
    let verdict_maps = [
        ("service-ips", format!("{addr} . inet_proto . inet_service")),
        (
            "no-endpoint-services",
            format!("{addr} . inet_proto . inet_service"),
        ),
        (
            "firewall-ips",
            format!("{addr} . inet_proto . inet_service"),
        ),
        ("service-nodeports", "inet_proto . inet_service".to_owned()),
        (
            "no-endpoint-nodeports",
            "inet_proto . inet_service".to_owned(),
        ),
    ];
    for (name, key) in verdict_maps {
        line(format!(
            "add map {fam} {table} {name} {{ type {key} : verdict; }}"
        ));
    }
    line(format!(
        "add map {fam} {table} endpoints {{ typeof meta mark : {fam} daddr . tcp dport; }}"
    ));
    line(format!(
        "add set {fam} {table} nodeport-ips {{ type {addr}; }}"
    ));
    line(format!(
        "add set {fam} {table} cluster-ips {{ type {addr}; }}"
    ));
    line(format!(
        "add set {fam} {table} masq-frontends {{ type {addr} . inet_proto . inet_service; }}"
    ));
    line(format!(
        "add set {fam} {table} masq-nodeports {{ type inet_proto . inet_service; }}"
    ));
    line(format!(
        "add set {fam} {table} cluster-cidrs {{ type {addr}; flags interval; }}"
    ));
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

    line(format!("add chain {fam} {table} dispatch"));
    for proto in [Protocol::Tcp, Protocol::Udp, Protocol::Sctp] {
        line(format!(
            "add rule {fam} {table} dispatch meta l4proto {proto} dnat {fam} to meta mark map @endpoints"
        ));
    }
    line(format!("add chain {fam} {table} reject-chain"));
    line(format!("add rule {fam} {table} reject-chain reject"));

    let base = |name: &str, kind: &str, hook: &str, priority: &str| {
        format!(
            "add chain {fam} {table} {name} {{ type {kind} hook {hook} priority {priority}; policy accept; }}"
        )
    };
    let dispatch = [
        format!("{daddr} . meta l4proto . th dport vmap @service-ips"),
        format!("{daddr} @nodeport-ips meta l4proto . th dport vmap @service-nodeports"),
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
            "add rule {fam} {table} {name} ct state new {daddr} . meta l4proto . th dport vmap @firewall-ips"
        ));
    }
    // After DNAT: what is still addressed to a frontend has no usable endpoint here.
    for hook in ["input", "forward", "output"] {
        let name = format!("filter-{hook}");
        line(base(&name, "filter", hook, "0"));
        line(format!(
            "add rule {fam} {table} {name} ct state new {daddr} . meta l4proto . th dport vmap @no-endpoint-services"
        ));
        if hook != "forward" {
            line(format!(
                "add rule {fam} {table} {name} ct state new {daddr} @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports"
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

fn element_text(key: &str, value: &Option<String>) -> String {
    match value {
        Some(value) => format!("{key} : {value}"),
        None => key.to_owned(),
    }
}

fn element_lines(out: &mut String, verb: &str, prefix: &str, container: &str, items: &[String]) {
    for chunk in items.chunks(ELEMENTS_PER_LINE) {
        let _ = writeln!(
            out,
            "{verb} element {prefix} {container} {{ {} }}",
            chunk.join(", ")
        );
    }
}

/// The `nft -f` text that turns `old` (what was committed) into `new`. `None` = full sync:
/// the table is recreated from scratch in the same transaction.
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
            out.push_str(&skeleton(family, config));
            &empty
        }
    };

    // 1. Elements that go or change value.
    for container in ELEMENT_CONTAINERS {
        let before = old.elements.get(container);
        let after = new.elements.get(container);
        let gone: Vec<String> = before
            .into_iter()
            .flatten()
            .filter(|(key, value)| after.and_then(|after| after.get(*key)) != Some(*value))
            .map(|(key, _)| key.clone())
            .collect();
        element_lines(&mut out, "delete", &prefix, container, &gone);
    }
    // 2. New affinity maps.
    for (name, map) in &new.affinity_maps {
        if !old.affinity_maps.contains_key(name) {
            let addr = family.addr_type();
            let _ = writeln!(
                out,
                "add map {prefix} {name} {{ type {addr} : mark; flags dynamic,timeout; timeout {}s; }}",
                map.timeout_secs
            );
        } else if old.affinity_maps.get(name) != Some(map) {
            let _ = writeln!(out, "flush map {prefix} {name}");
        }
    }
    // 3. New and changed chains (flush + refill is atomic within the transaction).
    // All chains exist before any rule jumps to one.
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
    // 4. Elements that are new or changed (their chains exist by now).
    for container in ELEMENT_CONTAINERS {
        let before = old.elements.get(container);
        let added: Vec<String> = new
            .elements
            .get(container)
            .into_iter()
            .flatten()
            .filter(|(key, value)| before.and_then(|before| before.get(*key)) != Some(*value))
            .map(|(key, value)| element_text(key, value))
            .collect();
        element_lines(&mut out, "add", &prefix, container, &added);
    }
    // 5. Chains nobody references any more: entry chains first, then the groups they jumped to.
    let mut gone: Vec<&String> = old
        .chains
        .keys()
        .filter(|chain| !new.chains.contains_key(*chain))
        .collect();
    gone.sort_by_key(|chain| {
        (
            chain.starts_with("cl_") || chain.starts_with("lo_"),
            chain.to_string(),
        )
    });
    for chain in gone {
        let _ = writeln!(out, "delete chain {prefix} {chain}");
    }
    // 6. Affinity maps of deleted or rewritten groups.
    for name in old.affinity_maps.keys() {
        if !new.affinity_maps.contains_key(name) {
            let _ = writeln!(out, "delete map {prefix} {name}");
        }
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

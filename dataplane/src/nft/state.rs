//! What one family's table holds, kept per Service port so that a sync renders and diffs only
//! the ports whose model changed (issue 14: one endpoint change must not cost a render and a
//! diff of every Service).
//!
//! A port's contribution is not stored: when its model changes, its last committed model is
//! rendered again without allocating ([`render::render_port`] with `allocate` false), which
//! yields exactly the elements and chains it committed, and the new model is rendered beside
//! it. Only those objects are diffed, so the transaction is the one a full render and diff
//! would produce (the tests compare both on random change sequences).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use super::render::{
    self, Capacities, Family, GroupIds, NftConfig, PortFragment, Ruleset, UdpCleanup,
};
use crate::model::{EndpointAddr, PortKey, Protocol, ServicePortModel};

/// Containers keyed by a group mark: one group, hence one port, owns each of their keys.
const SINGLE_OWNER: [&str; 5] = [
    "group-chains",
    "group-repick",
    "buckets",
    "slots",
    "endpoints",
];

/// The ports writing one element key of a container several ports may write.
#[derive(Debug)]
enum Owners {
    /// One port (nearly every key); its value is the table's.
    One(Arc<PortKey>),
    /// Several ports, each with its value; the last in port order wins.
    Many(Vec<(Arc<PortKey>, Option<String>)>),
}

/// One port whose model differs from the committed one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Change<'a> {
    /// The port.
    pub key: &'a PortKey,
    /// What was committed (`None`: the port is new).
    pub old: Option<&'a ServicePortModel>,
    /// What is wanted (`None`: the port is gone).
    pub new: Option<&'a ServicePortModel>,
}

/// The committed table of one family.
#[derive(Debug, Default)]
pub(crate) struct FamilyTable {
    /// What the kernel holds beyond the skeleton.
    ruleset: Ruleset,
    /// Each port's value for keys of containers several ports may write (a cluster IP shared by
    /// a Service's ports, an address that is one Service's cluster IP and another's external
    /// IP). The full renderer lets the last port in key order win; so does this.
    owners: HashMap<(&'static str, String), Owners>,
    /// How many users each chain has (ports, and the table itself for the preset chains).
    chain_refs: HashMap<String, usize>,
    /// Warnings per port. Such ports are rendered again on every sync, as a full render would
    /// (a group that found no free mark id gets one once another group freed it).
    warnings: BTreeMap<PortKey, Vec<String>>,
    /// Interned port keys, shared by the `owners` entries.
    keys: HashSet<Arc<PortKey>>,
    /// The container sizes the kernel's table was declared with by the last full sync.
    capacities: Capacities,
}

impl FamilyTable {
    /// Renders `ports` into an empty table: a full sync. Frees the ids of groups that are no
    /// longer rendered.
    pub(crate) fn full<'a>(
        family: Family,
        config: &NftConfig,
        ids: &mut GroupIds,
        ports: impl Iterator<Item = &'a ServicePortModel>,
        nodeport_addresses: &[IpAddr],
    ) -> Self {
        let mut table = FamilyTable::default();
        let global = render::render_global(nodeport_addresses, family, config);
        for (chain, rules) in global.chains {
            table.chain_refs.insert(chain.clone(), 1);
            table.ruleset.chains.insert(chain, rules);
        }
        table.ruleset.elements = global.elements;
        let mut groups = HashSet::new();
        for port in ports {
            let PortFragment {
                ruleset,
                warnings,
                groups: port_groups,
            } = render::render_port(port, family, config, ids, true);
            groups.extend(port_groups);
            table.add_owned(&port.key, ruleset);
            if !warnings.is_empty() {
                table.warnings.insert(port.key.clone(), warnings);
            }
        }
        ids.retain(&groups);
        table.capacities = table.ruleset.capacities();
        table
    }

    /// The container sizes the kernel's table was declared with.
    pub(crate) fn capacities(&self) -> &Capacities {
        &self.capacities
    }

    /// True when what the table holds fits the kernel's containers; otherwise the next
    /// transaction must be a full sync, after [`FamilyTable::redeclare`].
    pub(crate) fn fits(&self) -> bool {
        self.ruleset.fits(&self.capacities)
    }

    /// Takes the sizes a full sync of the current contents declares.
    pub(crate) fn redeclare(&mut self) {
        self.capacities = self.ruleset.capacities();
    }

    /// What the table holds, as the full renderer would return it.
    pub(crate) fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// Ports with warnings (rendered again on every sync).
    pub(crate) fn warned_ports(&self) -> impl Iterator<Item = &PortKey> {
        self.warnings.keys()
    }

    /// Every current warning, in port order.
    pub(crate) fn warnings(&self) -> impl Iterator<Item = &String> {
        self.warnings.values().flatten()
    }

    /// Applies `changes` (sorted by port key) and the NodePort addresses; returns the affected
    /// objects before and after, whose [`render::diff`] is the transaction.
    pub(crate) fn update(
        &mut self,
        family: Family,
        config: &NftConfig,
        ids: &mut GroupIds,
        changes: &[Change<'_>],
        nodeport_addresses: &[IpAddr],
    ) -> (Ruleset, Ruleset) {
        // Old renders first, each before its port's new render changes its slots.
        let rendered: Vec<(&PortKey, Option<PortFragment>, Option<PortFragment>)> = changes
            .iter()
            .map(|change| {
                let old = change
                    .old
                    .map(|model| render::render_port(model, family, config, ids, false));
                let new = change
                    .new
                    .map(|model| render::render_port(model, family, config, ids, true));
                (change.key, old, new)
            })
            .collect();
        let global = render::render_global(nodeport_addresses, family, config);

        let mut elements: BTreeMap<&'static str, BTreeSet<&str>> = BTreeMap::new();
        let mut chains: BTreeSet<&str> = BTreeSet::new();
        let fragments = rendered
            .iter()
            .flat_map(|(_, old, new)| old.iter().chain(new))
            .map(|fragment| &fragment.ruleset);
        for ruleset in fragments.chain([&global]) {
            for (container, entries) in &ruleset.elements {
                elements
                    .entry(container)
                    .or_default()
                    .extend(entries.keys().map(String::as_str));
            }
            chains.extend(ruleset.chains.keys().map(String::as_str));
        }
        let current_nodeport_ips: Vec<String> = self
            .ruleset
            .container("nodeport-ips")
            .map(|(key, _)| key.clone())
            .collect();
        elements
            .entry("nodeport-ips")
            .or_default()
            .extend(current_nodeport_ips.iter().map(String::as_str));

        let before = self.select(&elements, &chains);
        for (key, old, _) in &rendered {
            if let Some(old) = old {
                self.remove(key, old);
            }
        }
        for (key, _, new) in &rendered {
            if let Some(new) = new {
                self.add(key, new);
            }
        }
        self.ruleset.elements.remove("nodeport-ips");
        if let Some(ips) = global.elements.get("nodeport-ips") {
            self.ruleset.elements.insert("nodeport-ips", ips.clone());
        }
        let after = self.select(&elements, &chains);

        for (key, old, new) in rendered {
            let kept: HashSet<&String> = new.iter().flat_map(|new| &new.groups).collect();
            for group in old.iter().flat_map(|old| &old.groups) {
                if !kept.contains(group) {
                    ids.forget(group);
                }
            }
            match new {
                Some(new) if !new.warnings.is_empty() => {
                    self.warnings.insert(key.clone(), new.warnings);
                }
                Some(_) => {
                    self.warnings.remove(key);
                }
                None => {
                    self.warnings.remove(key);
                    self.keys.remove(key);
                }
            }
        }
        (before, after)
    }

    /// The current values of the listed objects.
    fn select(
        &self,
        elements: &BTreeMap<&'static str, BTreeSet<&str>>,
        chains: &BTreeSet<&str>,
    ) -> Ruleset {
        let mut selected = Ruleset::default();
        for (container, keys) in elements {
            let Some(current) = self.ruleset.elements.get(container) else {
                continue;
            };
            for key in keys {
                if let Some(value) = current.get(*key) {
                    selected.insert(container, (*key).to_owned(), value.clone());
                }
            }
        }
        for chain in chains {
            if let Some(rules) = self.ruleset.chains.get(*chain) {
                selected.chains.insert((*chain).to_owned(), rules.clone());
            }
        }
        selected
    }

    fn intern(&mut self, key: &PortKey) -> Arc<PortKey> {
        if let Some(key) = self.keys.get(key) {
            return Arc::clone(key);
        }
        let key = Arc::new(key.clone());
        self.keys.insert(Arc::clone(&key));
        key
    }

    /// Adds what `fragment` renders for port `key`.
    fn add(&mut self, key: &PortKey, fragment: &PortFragment) {
        let owner = self.intern(key);
        for (container, entries) in &fragment.ruleset.elements {
            for (element, value) in entries {
                if SINGLE_OWNER.contains(container) {
                    self.ruleset
                        .insert(container, element.clone(), value.clone());
                    continue;
                }
                self.add_owner(container, element, &owner, value);
            }
        }
        for (chain, rules) in &fragment.ruleset.chains {
            *self.chain_refs.entry(chain.clone()).or_default() += 1;
            self.ruleset.chains.insert(chain.clone(), rules.clone());
        }
    }

    /// [`FamilyTable::add`] of a fragment the caller no longer needs: its strings move into
    /// the table instead of being copied (a full sync adds one per element).
    fn add_owned(&mut self, key: &PortKey, fragment: Ruleset) {
        let owner = self.intern(key);
        for (container, entries) in fragment.elements {
            if entries.is_empty() {
                continue;
            }
            if SINGLE_OWNER.contains(&container) {
                let into = self.ruleset.elements.entry(container).or_default();
                if into.is_empty() {
                    *into = entries;
                } else {
                    into.extend(entries);
                }
                continue;
            }
            for (element, value) in &entries {
                self.add_owner(container, element, &owner, value);
            }
        }
        for (chain, rules) in fragment.chains {
            *self.chain_refs.entry(chain.clone()).or_default() += 1;
            self.ruleset.chains.insert(chain, rules);
        }
    }

    /// Removes what `fragment` rendered for port `key`.
    fn remove(&mut self, key: &PortKey, fragment: &PortFragment) {
        for (container, entries) in &fragment.ruleset.elements {
            for element in entries.keys() {
                if SINGLE_OWNER.contains(container) {
                    self.ruleset.remove(container, element);
                    continue;
                }
                self.remove_owner(container, element, key);
            }
        }
        for chain in fragment.ruleset.chains.keys() {
            if let Some(refs) = self.chain_refs.get_mut(chain) {
                *refs = refs.saturating_sub(1);
                if *refs == 0 {
                    self.chain_refs.remove(chain);
                    self.ruleset.chains.remove(chain);
                }
            }
        }
    }

    fn add_owner(
        &mut self,
        container: &'static str,
        element: &str,
        owner: &Arc<PortKey>,
        value: &Option<String>,
    ) {
        let id = (container, element.to_owned());
        let owners = match self.owners.remove(&id) {
            None => Owners::One(Arc::clone(owner)),
            Some(Owners::One(port)) if port == *owner => Owners::One(port),
            Some(Owners::One(port)) => {
                let current = self
                    .ruleset
                    .elements
                    .get(container)
                    .and_then(|elements| elements.get(element))
                    .cloned()
                    .unwrap_or_default();
                Owners::Many(vec![(port, current), (Arc::clone(owner), value.clone())])
            }
            Some(Owners::Many(mut ports)) => {
                ports.retain(|(port, _)| port != owner);
                ports.push((Arc::clone(owner), value.clone()));
                Owners::Many(ports)
            }
        };
        let value = match &owners {
            Owners::One(_) => value.clone(),
            Owners::Many(ports) => last_value(ports),
        };
        self.owners.insert(id, owners);
        self.ruleset.insert(container, element.to_owned(), value);
    }

    fn remove_owner(&mut self, container: &'static str, element: &str, key: &PortKey) {
        let id = (container, element.to_owned());
        match self.owners.remove(&id) {
            Some(Owners::One(port)) if *port != *key => {
                // Not this port's key (cannot happen: it rendered the key): leave it.
                self.owners.insert(id, Owners::One(port));
            }
            Some(Owners::One(_)) | None => self.ruleset.remove(container, element),
            Some(Owners::Many(mut ports)) => {
                ports.retain(|(port, _)| **port != *key);
                let value = last_value(&ports);
                let owners = match ports.pop() {
                    Some((port, _)) if ports.is_empty() => Owners::One(port),
                    Some(last) => {
                        ports.push(last);
                        Owners::Many(ports)
                    }
                    None => {
                        self.ruleset.remove(container, element);
                        return;
                    }
                };
                self.owners.insert(id, owners);
                self.ruleset.insert(container, element.to_owned(), value);
            }
        }
    }
}

/// The value of the last owner in port order (what a full render, writing ports in key order,
/// leaves).
fn last_value(ports: &[(Arc<PortKey>, Option<String>)]) -> Option<String> {
    ports
        .iter()
        .max_by(|a, b| a.0.cmp(&b.0))
        .and_then(|(_, value)| value.clone())
}

/// How many UDP ports use each endpoint, so the conntrack work of a sync follows from the
/// changed ports alone (see [`render::udp_cleanup`], which computes the same from two whole
/// snapshots).
#[derive(Debug, Default, Clone)]
pub(crate) struct UdpEndpoints {
    users: HashMap<EndpointAddr, usize>,
}

/// The endpoints [`render::udp_cleanup`] counts for one port.
fn udp_endpoints(port: &ServicePortModel) -> BTreeSet<EndpointAddr> {
    if port.key.protocol != Protocol::Udp {
        return BTreeSet::new();
    }
    port.cluster_endpoints
        .iter()
        .chain(&port.local_endpoints)
        .copied()
        .collect()
}

impl UdpEndpoints {
    /// Applies `changes`; returns the conntrack entries to clear.
    pub(crate) fn apply(&mut self, changes: &[Change<'_>]) -> UdpCleanup {
        let mut cleanup = UdpCleanup::default();
        let mut dropped = BTreeSet::new();
        for change in changes {
            for endpoint in change.old.map(udp_endpoints).unwrap_or_default() {
                if let Some(users) = self.users.get_mut(&endpoint) {
                    *users = users.saturating_sub(1);
                    if *users == 0 {
                        self.users.remove(&endpoint);
                    }
                }
                dropped.insert(endpoint);
            }
        }
        for change in changes {
            for endpoint in change.new.map(udp_endpoints).unwrap_or_default() {
                *self.users.entry(endpoint).or_default() += 1;
            }
        }
        cleanup.gone_endpoints = dropped
            .into_iter()
            .filter(|endpoint| !self.users.contains_key(endpoint))
            .collect();
        for change in changes {
            let Some(port) = change.new else { continue };
            if port.key.protocol != Protocol::Udp
                || !port.has_endpoints
                || change.old.is_some_and(|old| old.has_endpoints)
            {
                continue;
            }
            for ip in port
                .cluster_ips
                .iter()
                .chain(&port.external_ips)
                .chain(&port.load_balancer_ips)
            {
                cleanup.revived_frontends.insert((Some(*ip), port.key.port));
            }
            if let Some(node_port) = port.node_port {
                cleanup.revived_frontends.insert((None, node_port));
            }
        }
        cleanup
    }
}

#[cfg(test)]
mod tests;

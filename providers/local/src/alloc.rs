//! The allocator of the `local` provider: which addresses each Service holds, from which pool,
//! and what a Service's request resolves to. Pure and deterministic (the lowest free address
//! of the first pool that can serve), so every decision is a table-driven test.
//!
//! Rules, in the order they apply:
//! - An address a Service holds is kept as long as its request still allows it: across
//!   restarts (re-adopted from the Service's status), pool edits and deletions (an address that
//!   left its pool is *stranded*: kept, and shown in the pool's status, until the Service goes),
//!   and other Services' changes. Only the Service's own change (another requested address,
//!   another pool, another family policy, a sharing clash of its own making) moves it.
//! - Candidate pools: the one named by the pool annotation; else those containing every
//!   requested address; else the automatic pools (`autoAssign`), lowest priority value first,
//!   pools without a priority last, then by name. Each must serve the Service's namespace and
//!   labels (`serviceAllocation`).
//! - One address per family, in the Service's `ipFamilies` order: `SingleStack` one,
//!   `PreferDualStack` as many as the pool has (at least the first), `RequireDualStack` both.
//!   All of a Service's addresses come from one pool.
//! - Sharing: a Service with `allow-shared-ip: K` may take an address held only by Services
//!   with key K whose (port, protocol) pairs are disjoint from its own and whose
//!   `externalTrafficPolicy` agrees — both `Cluster`, or both `Local` with the same selector
//!   (MetalLB's rule: one node announces the address, so with `Local` it must hold the
//!   endpoints of every Service on it); it prefers such an address to a free one. Anything
//!   else holding the address is a clash naming the holder and why.
//! - Shown addresses: an address that a live Service shows in its status is taken by that
//!   Service, whether or not this process allocated it ([`Allocator::observe`], fed from the
//!   controller's Service watch): adoption is continuous, so a status written by another
//!   process (a controller that stopped, a hand edit) is never handed out again. A Service
//!   that shows addresses and holds none keeps them at its next ensure.
//! - Conflicts: when two Services that may not share both claim an address anyway, the one
//!   that claimed it first keeps it — by when it showed it (its Ready condition's
//!   lastTransitionTime) or this process allocated it, then by creationTimestamp, then by
//!   namespace/name — and the other is moved at its next ensure ([`Allocator::conflicts`]
//!   names both, for the Warning and to make the other reconcile).
//! - While no `IPPool` exists, the `--local-pool` flag's ranges form the only pool.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::net::IpAddr;
use std::time::SystemTime;

use kube_lb_annotations::{
    IpFamily, IpFamilyPolicy, LoadBalancerSpec, Protocol, ServiceKey, TrafficPolicy,
};

use crate::ippool::{PoolDef, PoolProblem};
use crate::pool::IpRange;

/// Name of the pool made of the `--local-pool` flag's ranges.
pub const FALLBACK_POOL_NAME: &str = "local-pool";

/// A (port, protocol) pair a Service listens on.
pub type PortKey = (u16, Protocol);

/// What a Service asks of the allocator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The Service.
    pub service: ServiceKey,
    /// Requested addresses, at most one per family.
    pub requested: Vec<IpAddr>,
    /// The pool named by the annotation.
    pub pool: Option<String>,
    /// The sharing key.
    pub sharing_key: Option<String>,
    /// `spec.ipFamilyPolicy` (SingleStack when unset).
    pub policy: IpFamilyPolicy,
    /// `spec.ipFamilies`; empty when unset.
    pub families: Vec<IpFamily>,
    /// The Service's labels.
    pub labels: BTreeMap<String, String>,
    /// The Service's (port, protocol) pairs.
    pub ports: BTreeSet<PortKey>,
    /// The pool the Service's annotation says its address came from.
    pub written_pool: Option<String>,
    /// `spec.externalTrafficPolicy` is `Local` (sharing requires the same policy).
    pub traffic_local: bool,
    /// `spec.selector` (Services sharing an address with policy `Local` need the same one).
    pub selector: BTreeMap<String, String>,
}

impl Request {
    /// The request of a parsed Service. `spec.loadBalancerIP` counts when the `local`
    /// extension requests nothing (specs built by hand rather than parsed).
    pub fn from_spec(spec: &LoadBalancerSpec) -> Self {
        let local = spec.provider.as_local().cloned().unwrap_or_default();
        let mut requested: Vec<IpAddr> = if local.requested_ips.is_empty() {
            spec.requested_ip.into_iter().collect()
        } else {
            local.requested_ips
        };
        // An address of a family the Service does not have is not requested (the annotation
        // parser warns about it, naming where it came from).
        if !local.ip_families.is_empty() {
            requested.retain(|ip| local.ip_families.contains(&IpFamily::of(*ip)));
        }
        Self {
            service: spec.service.clone(),
            requested,
            pool: local.address_pool,
            sharing_key: local.sharing_key,
            policy: local.ip_family_policy.unwrap_or_default(),
            families: local.ip_families,
            labels: local.labels,
            ports: spec.ports.iter().map(|p| (p.port, p.protocol)).collect(),
            written_pool: local.allocated_from_pool,
            traffic_local: matches!(spec.traffic_policy, TrafficPolicy::Local { .. }),
            selector: local.selector,
        }
    }

    /// What decides whether this Service may share an address.
    pub fn terms(&self) -> SharingTerms {
        SharingTerms {
            key: self.sharing_key.clone(),
            ports: self.ports.clone(),
            traffic_local: self.traffic_local,
            selector: self.selector.clone(),
        }
    }

    /// A request for one automatic IPv4 address (tests, benchmarks).
    pub fn simple(service: ServiceKey) -> Self {
        Self {
            service,
            requested: Vec::new(),
            pool: None,
            sharing_key: None,
            policy: IpFamilyPolicy::SingleStack,
            families: Vec::new(),
            labels: BTreeMap::new(),
            ports: BTreeSet::new(),
            written_pool: None,
            traffic_local: false,
            selector: BTreeMap::new(),
        }
    }
}

/// What decides whether two Services may share an address: the same sharing key, disjoint
/// (port, protocol) pairs, and the same `externalTrafficPolicy` — with `Local`, the same
/// selector too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharingTerms {
    /// The `kube-lb.io/allow-shared-ip` key.
    pub key: Option<String>,
    /// The (port, protocol) pairs.
    pub ports: BTreeSet<PortKey>,
    /// `externalTrafficPolicy: Local`.
    pub traffic_local: bool,
    /// `spec.selector`.
    pub selector: BTreeMap<String, String>,
}

/// Whether a Service with `mine` may use `ip` alongside `other`, which claims it with
/// `theirs` (`None` when not known yet: adopted from a status, never ensured here).
fn may_share(
    ip: IpAddr,
    mine: &SharingTerms,
    other: &ServiceKey,
    theirs: Option<&SharingTerms>,
) -> Result<(), AllocError> {
    let in_use = |why: String| AllocError::InUse {
        ip,
        owner: other.to_string(),
        why,
    };
    let Some(mine_key) = &mine.key else {
        return Err(in_use(
            "; give this Service another address, or both the same kube-lb.io/allow-shared-ip \
             key"
            .to_string(),
        ));
    };
    let Some(theirs) = theirs else {
        return Err(in_use(
            " (its ports are not known until it is reconciled; retried then)".to_string(),
        ));
    };
    match &theirs.key {
        None => return Err(in_use(" without kube-lb.io/allow-shared-ip".to_string())),
        Some(key) if key != mine_key => {
            return Err(in_use(format!(
                " with sharing key {key:?}, not {mine_key:?}"
            )));
        }
        Some(_) => {}
    }
    if let Some((port, protocol)) = theirs.ports.intersection(&mine.ports).next() {
        return Err(AllocError::SharingClash {
            ip,
            owner: other.to_string(),
            port: *port,
            protocol: protocol_name(*protocol),
        });
    }
    let policy = |local: bool| if local { "Local" } else { "Cluster" };
    if mine.traffic_local != theirs.traffic_local {
        return Err(AllocError::PolicyClash {
            ip,
            owner: other.to_string(),
            why: format!(
                "it has externalTrafficPolicy {}, this Service {}",
                policy(theirs.traffic_local),
                policy(mine.traffic_local)
            ),
        });
    }
    if mine.traffic_local && mine.selector != theirs.selector {
        return Err(AllocError::PolicyClash {
            ip,
            owner: other.to_string(),
            why: "both have externalTrafficPolicy Local but their selectors differ".to_string(),
        });
    }
    Ok(())
}

/// Why two Services may not share an address, from the error naming one of them.
fn why_not_shared(error: &AllocError) -> String {
    match error {
        AllocError::SharingClash { port, protocol, .. } => {
            format!("both use port {port}/{protocol}")
        }
        AllocError::PolicyClash { why, .. } => why.clone(),
        AllocError::InUse { why, .. } if why.starts_with(' ') => why.trim_start().to_string(),
        _ => "neither has the other's kube-lb.io/allow-shared-ip key".to_string(),
    }
}

/// What a live Service shows in its status, as the controller's Service watch sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Shown {
    /// `status.loadBalancer.ingress[].ip`.
    pub ips: Vec<IpAddr>,
    /// Since when it has shown them, as far as known: the lastTransitionTime of its Ready
    /// condition while that is True.
    pub since: Option<SystemTime>,
    /// `metadata.creationTimestamp`.
    pub created: Option<SystemTime>,
    /// Its sharing terms, when its annotations parse.
    pub terms: Option<SharingTerms>,
}

/// Two Services claim one address and may not share it: `winner` keeps it, `loser` moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The address.
    pub ip: IpAddr,
    /// The Service that claimed it first.
    pub winner: ServiceKey,
    /// The Service that must give it up.
    pub loser: ServiceKey,
    /// Why they may not share it.
    pub why: String,
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "address {} is also claimed by Service {}, which claimed it first, and they may not \
             share it ({}); this Service gets another address",
            self.ip, self.winner, self.why
        )
    }
}

/// What the allocator decided for a Service: its addresses in family order, and their pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// One address per family.
    pub ips: Vec<IpAddr>,
    /// The pool they came from (`None` for an adopted address no pool contains).
    pub pool: Option<String>,
}

/// Why a Service gets no address: each says which cause, for the Service's condition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// No pool serves the Service automatically.
    #[error(
        "no address pool serves Service {service}: no IPPool with autoAssign serves namespace \
         {namespace} and the Service's labels (create one, or name a pool with \
         kube-lb.io/address-pool)"
    )]
    NoPool {
        /// The Service.
        service: String,
        /// Its namespace.
        namespace: String,
    },
    /// The named pool does not exist.
    #[error("address pool {pool:?} (kube-lb.io/address-pool) does not exist")]
    UnknownPool {
        /// The name.
        pool: String,
    },
    /// The pool exists but its serviceAllocation excludes the Service.
    #[error(
        "address pool {pool:?} does not serve Service {service} (its serviceAllocation \
         namespaces and selectors exclude it)"
    )]
    OutOfScope {
        /// The pool.
        pool: String,
        /// The Service.
        service: String,
    },
    /// A requested address is in no pool (or not in the named one).
    #[error("requested address {ip} is outside {where_}")]
    Outside {
        /// The address.
        ip: IpAddr,
        /// `every address pool` or `address pool "x"`.
        where_: String,
    },
    /// No address of a required family is free.
    #[error("address pool {pool:?} is exhausted: {detail}")]
    Exhausted {
        /// The pool.
        pool: String,
        /// Which family, and whether the pool has that family at all.
        detail: String,
    },
    /// The address is held by a Service that does not share it.
    #[error("address {ip} is in use by Service {owner}{why}")]
    InUse {
        /// The address.
        ip: IpAddr,
        /// `namespace/name` of the holder.
        owner: String,
        /// Why it cannot be shared.
        why: String,
    },
    /// The address is shared under the same key, but the traffic policies or selectors differ.
    #[error(
        "address {ip} is in use by Service {owner}, which may not share it with this Service: \
         {why}; Services sharing an address need externalTrafficPolicy Cluster on both, or Local \
         on both with the same selector"
    )]
    PolicyClash {
        /// The address.
        ip: IpAddr,
        /// `namespace/name` of the other Service.
        owner: String,
        /// What differs.
        why: String,
    },
    /// The address is shared under the same key, but a port is taken.
    #[error(
        "address {ip} is in use by Service {owner} on port {port}/{protocol} as well; Services \
         sharing an address (kube-lb.io/allow-shared-ip) need disjoint ports"
    )]
    SharingClash {
        /// The address.
        ip: IpAddr,
        /// `namespace/name` of the other Service.
        owner: String,
        /// The port both use.
        port: u16,
        /// Its protocol.
        protocol: &'static str,
    },
}

impl AllocError {
    /// How specific the error is, to report the most telling one when every pool failed.
    fn rank(&self) -> u8 {
        match self {
            AllocError::SharingClash { .. } | AllocError::PolicyClash { .. } => 4,
            AllocError::InUse { .. } => 3,
            AllocError::Exhausted { .. } => 2,
            _ => 1,
        }
    }
}

fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Tcp => "TCP",
        Protocol::Udp => "UDP",
        Protocol::Sctp => "SCTP",
    }
}

/// What a Service holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    ips: Vec<IpAddr>,
    pool: Option<String>,
    /// `None` for an address adopted at start-up whose Service was not ensured yet.
    terms: Option<SharingTerms>,
    allocated_at: Option<SystemTime>,
}

/// One address held by a Service, as [`Allocator::allocations`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The Service holding the address.
    pub service: ServiceKey,
    /// The address.
    pub ip: IpAddr,
    /// Its pool, when known.
    pub pool: Option<String>,
    /// When this process allocated it; `None` when it was adopted from a Service status.
    pub allocated_at: Option<SystemTime>,
}

/// One family of a request.
#[derive(Debug, Clone, Copy)]
struct Want {
    family: IpFamily,
    requested: Option<IpAddr>,
    required: bool,
}

fn other(family: IpFamily) -> IpFamily {
    match family {
        IpFamily::V4 => IpFamily::V6,
        IpFamily::V6 => IpFamily::V4,
    }
}

fn wants(req: &Request) -> Vec<Want> {
    let mut base: Vec<IpFamily> = if !req.families.is_empty() {
        req.families.clone()
    } else {
        let mut from_requested: Vec<IpFamily> = Vec::new();
        for family in req.requested.iter().map(|ip| IpFamily::of(*ip)) {
            if !from_requested.contains(&family) {
                from_requested.push(family);
            }
        }
        from_requested
    };
    if base.is_empty() {
        base.push(IpFamily::V4);
    }
    let families: Vec<IpFamily> = match req.policy {
        IpFamilyPolicy::SingleStack if req.families.is_empty() => base,
        IpFamilyPolicy::SingleStack => base.into_iter().take(1).collect(),
        IpFamilyPolicy::PreferDualStack => base,
        IpFamilyPolicy::RequireDualStack => {
            if base.len() < 2 {
                let second = other(base[0]);
                base.push(second);
            }
            base
        }
    };
    families
        .iter()
        .enumerate()
        .map(|(i, family)| {
            let requested = req
                .requested
                .iter()
                .copied()
                .find(|ip| IpFamily::of(*ip) == *family);
            let required = requested.is_some()
                || match req.policy {
                    IpFamilyPolicy::PreferDualStack => i == 0 && req.requested.is_empty(),
                    _ => true,
                };
            Want {
                family: *family,
                requested,
                required,
            }
        })
        .collect()
}

/// Addresses per family of a pool, for its status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FamilyCount {
    /// Addresses held by Services.
    pub assigned: u128,
    /// Addresses that could still be handed out.
    pub available: u128,
}

/// The status of one `IPPool`, before it is rendered as JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// IPv4 counts.
    pub ipv4: FamilyCount,
    /// IPv6 counts.
    pub ipv6: FamilyCount,
    /// What is wrong with the pool's spec.
    pub problems: Vec<String>,
    /// `.0`/`.255` addresses left out because of `avoidBuggyIPs`.
    pub buggy_skipped: u128,
    /// Overlaps with other pools, one line each.
    pub overlaps: Vec<String>,
    /// Addresses held by Services although the pool no longer contains them.
    pub stranded: Vec<String>,
}

/// One condition of a pool's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolCondition {
    /// `Valid`, `Overlapping` or `AddressesStranded`.
    pub type_: &'static str,
    /// The condition's truth.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// What is meant, for a person.
    pub message: String,
}

impl PoolStatus {
    /// The conditions the pool shows: `Valid` (False with `InvalidEntries`; True with
    /// `BuggyAddressesSkipped` when `avoidBuggyIPs` leaves addresses out), `Overlapping` and
    /// `AddressesStranded`.
    pub fn conditions(&self) -> Vec<PoolCondition> {
        let valid = if !self.problems.is_empty() {
            PoolCondition {
                type_: "Valid",
                status: false,
                reason: "InvalidEntries",
                message: self.problems.join("; "),
            }
        } else if self.buggy_skipped > 0 {
            PoolCondition {
                type_: "Valid",
                status: true,
                reason: "BuggyAddressesSkipped",
                message: format!(
                    "avoidBuggyIPs: {} addresses ending in .0 or .255 (network or broadcast \
                     addresses of a /24) are never handed out",
                    self.buggy_skipped
                ),
            }
        } else {
            PoolCondition {
                type_: "Valid",
                status: true,
                reason: "Valid",
                message: "every entry is valid".to_string(),
            }
        };
        let overlapping = if self.overlaps.is_empty() {
            PoolCondition {
                type_: "Overlapping",
                status: false,
                reason: "NoOverlap",
                message: "no address is in another pool".to_string(),
            }
        } else {
            PoolCondition {
                type_: "Overlapping",
                status: true,
                reason: "OverlapsPool",
                message: format!(
                    "{}; an address is handed out once whichever pool it is taken from",
                    self.overlaps.join("; ")
                ),
            }
        };
        let stranded = if self.stranded.is_empty() {
            PoolCondition {
                type_: "AddressesStranded",
                status: false,
                reason: "NoneStranded",
                message: "every assigned address is in the pool".to_string(),
            }
        } else {
            PoolCondition {
                type_: "AddressesStranded",
                status: true,
                reason: "OutsidePool",
                message: format!(
                    "kept until their Service goes, although the pool no longer contains them: \
                     {}",
                    self.stranded.join(", ")
                ),
            }
        };
        vec![valid, overlapping, stranded]
    }
}

/// Every pool and every Service's addresses.
#[derive(Debug, Clone)]
pub struct Allocator {
    fallback: PoolDef,
    pools: Vec<PoolDef>,
    namespace_labels: HashMap<String, BTreeMap<String, String>>,
    owners: BTreeMap<IpAddr, BTreeSet<ServiceKey>>,
    held: HashMap<ServiceKey, Held>,
    /// What live Services show, by Service, and by address.
    shown: HashMap<ServiceKey, Shown>,
    shown_by: BTreeMap<IpAddr, BTreeSet<ServiceKey>>,
}

impl Allocator {
    /// An allocator whose only pool, while no `IPPool` exists, is `fallback` (the
    /// `--local-pool` ranges).
    pub fn new(fallback: &[IpRange]) -> Self {
        Self {
            fallback: PoolDef::fallback(FALLBACK_POOL_NAME, fallback),
            pools: Vec::new(),
            namespace_labels: HashMap::new(),
            owners: BTreeMap::new(),
            held: HashMap::new(),
            shown: HashMap::new(),
            shown_by: BTreeMap::new(),
        }
    }

    /// Replaces the `IPPool`s; true when anything changed. Held addresses stay.
    pub fn set_pools(&mut self, mut pools: Vec<PoolDef>) -> bool {
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        if pools == self.pools {
            return false;
        }
        self.pools = pools;
        // Addresses adopted before the pools were known are attributed now.
        let active: Vec<PoolDef> = self.active().into_iter().cloned().collect();
        for held in self.held.values_mut().filter(|h| h.pool.is_none()) {
            held.pool = active
                .iter()
                .find(|p| held.ips.iter().all(|ip| p.contains(*ip)))
                .map(|p| p.name.clone());
        }
        true
    }

    /// The `IPPool`s.
    pub fn pools(&self) -> &[PoolDef] {
        &self.pools
    }

    /// Replaces the namespaces' labels (namespace selectors match on them); true when changed.
    pub fn set_namespace_labels(
        &mut self,
        labels: HashMap<String, BTreeMap<String, String>>,
    ) -> bool {
        if labels == self.namespace_labels {
            return false;
        }
        self.namespace_labels = labels;
        true
    }

    fn active(&self) -> Vec<&PoolDef> {
        if self.pools.is_empty() {
            vec![&self.fallback]
        } else {
            self.pools.iter().collect()
        }
    }

    fn pool_named(&self, name: &str) -> Option<&PoolDef> {
        self.active().into_iter().find(|p| p.name == name)
    }

    /// The addresses and pool `service` holds.
    pub fn held(&self, service: &ServiceKey) -> Option<Choice> {
        self.held.get(service).map(|h| Choice {
            ips: h.ips.clone(),
            pool: h.pool.clone(),
        })
    }

    /// What `service` holds, else what it shows (adopted at its next ensure): the addresses
    /// it keeps if its request still allows them.
    fn held_or_shown(&self, service: &ServiceKey) -> Option<Held> {
        if let Some(held) = self.held.get(service) {
            return Some(held.clone());
        }
        let shown = self.shown.get(service)?;
        Some(Held {
            ips: shown.ips.clone(),
            pool: self.containing_pool(&shown.ips),
            terms: shown.terms.clone(),
            allocated_at: None,
        })
    }

    /// What `service` holds, else shows: the addresses a fresh process adopts from it.
    pub fn claimed(&self, service: &ServiceKey) -> Option<Choice> {
        self.held_or_shown(service).map(|h| Choice {
            ips: h.ips,
            pool: h.pool,
        })
    }

    fn containing_pool(&self, ips: &[IpAddr]) -> Option<String> {
        self.active()
            .into_iter()
            .find(|p| ips.iter().all(|ip| p.contains(*ip)))
            .map(|p| p.name.clone())
    }

    /// True when `service` holds exactly `choice` with the ports and key of `req` recorded:
    /// committing it would change nothing.
    pub fn is_recorded(&self, req: &Request, choice: &Choice) -> bool {
        self.held.get(&req.service).is_some_and(|h| {
            h.ips == choice.ips && h.pool == choice.pool && h.terms.as_ref() == Some(&req.terms())
        })
    }

    /// Number of distinct addresses held.
    pub fn allocated(&self) -> usize {
        self.owners.len()
    }

    /// Every (Service, address), by address.
    pub fn allocations(&self) -> Vec<Allocation> {
        self.owners
            .iter()
            .flat_map(|(ip, services)| {
                services.iter().map(move |service| {
                    let held = self.held.get(service);
                    Allocation {
                        service: service.clone(),
                        ip: *ip,
                        pool: held.and_then(|h| h.pool.clone()),
                        allocated_at: held.and_then(|h| h.allocated_at),
                    }
                })
            })
            .collect()
    }

    fn serves(&self, pool: &PoolDef, req: &Request) -> bool {
        let empty = BTreeMap::new();
        let namespace_labels = self
            .namespace_labels
            .get(&req.service.namespace)
            .unwrap_or(&empty);
        pool.serves(&req.service.namespace, namespace_labels, &req.labels)
    }

    /// Every Service other than `service` that claims `ip`: holds it, or shows it.
    fn claimants<'a>(
        &'a self,
        ip: IpAddr,
        service: &'a ServiceKey,
    ) -> impl Iterator<Item = &'a ServiceKey> + 'a {
        let held = self.owners.get(&ip).into_iter().flatten();
        let shown = self
            .shown_by
            .get(&ip)
            .into_iter()
            .flatten()
            .filter(move |s| !self.owners.get(&ip).is_some_and(|o| o.contains(*s)));
        held.chain(shown).filter(move |s| *s != service)
    }

    /// The sharing terms `service` claims its addresses with, when known.
    fn terms_of(&self, service: &ServiceKey) -> Option<&SharingTerms> {
        self.held
            .get(service)
            .and_then(|h| h.terms.as_ref())
            .or_else(|| self.shown.get(service).and_then(|s| s.terms.as_ref()))
    }

    /// How early `service` claimed `ip`; lower keeps it. Since when it claims the address
    /// (shown with a Ready condition, or allocated by this process), unknown last; then its
    /// creationTimestamp, unknown last; then its name.
    fn rank(
        &self,
        ip: IpAddr,
        service: &ServiceKey,
    ) -> (
        bool,
        Option<SystemTime>,
        bool,
        Option<SystemTime>,
        ServiceKey,
    ) {
        let shown = self.shown.get(service);
        let shown_since = shown.filter(|s| s.ips.contains(&ip)).and_then(|s| s.since);
        let allocated = self
            .held
            .get(service)
            .filter(|h| h.ips.contains(&ip))
            .and_then(|h| h.allocated_at);
        let since = match (shown_since, allocated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let created = shown.and_then(|s| s.created);
        (
            since.is_none(),
            since,
            created.is_none(),
            created,
            service.clone(),
        )
    }

    /// Whether `req`'s Service may use `ip` alongside every other Service claiming it.
    fn share_check(&self, ip: IpAddr, req: &Request) -> Result<(), AllocError> {
        let mine = req.terms();
        for other in self.claimants(ip, &req.service) {
            may_share(ip, &mine, other, self.terms_of(other))?;
        }
        Ok(())
    }

    /// Whether `req`'s Service, claiming `ip` already, must give it up: another Service
    /// that may not share it claimed it first.
    fn loses(&self, ip: IpAddr, req: &Request) -> bool {
        let mine = req.terms();
        let rank = self.rank(ip, &req.service);
        self.claimants(ip, &req.service).any(|other| {
            may_share(ip, &mine, other, self.terms_of(other)).is_err()
                && self.rank(ip, other) < rank
        })
    }

    /// Every address claimed by two Services that may not share it, with who keeps it.
    pub fn conflicts(&self) -> Vec<Conflict> {
        let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
        ips.extend(
            self.owners
                .iter()
                .filter(|(_, o)| o.len() > 1)
                .map(|(ip, _)| *ip),
        );
        for (ip, shown) in &self.shown_by {
            let all: BTreeSet<&ServiceKey> = shown
                .iter()
                .chain(self.owners.get(ip).into_iter().flatten())
                .collect();
            if all.len() > 1 {
                ips.insert(*ip);
            }
        }
        let mut conflicts = Vec::new();
        for ip in ips {
            let mut all: Vec<&ServiceKey> = self
                .owners
                .get(&ip)
                .into_iter()
                .flatten()
                .chain(self.shown_by.get(&ip).into_iter().flatten())
                .collect();
            all.sort();
            all.dedup();
            all.sort_by_key(|s| self.rank(ip, s));
            // Each Service against every one claiming before it: the first it may not share
            // with is the one it yields to.
            for (i, loser) in all.iter().enumerate() {
                // Unknown terms share with nobody.
                let terms = self.terms_of(loser).cloned().unwrap_or_default();
                let clash = all[..i].iter().find_map(|winner| {
                    may_share(ip, &terms, winner, self.terms_of(winner))
                        .err()
                        .map(|e| (winner, e))
                });
                if let Some((winner, error)) = clash {
                    conflicts.push(Conflict {
                        ip,
                        winner: (*winner).clone(),
                        loser: (*loser).clone(),
                        why: why_not_shared(&error),
                    });
                }
            }
        }
        conflicts
    }

    /// The lowest address of `family` in `pool` that nobody but `service` claims.
    fn first_free(&self, pool: &PoolDef, service: &ServiceKey, family: IpFamily) -> Option<IpAddr> {
        for range in pool
            .ranges
            .iter()
            .filter(|r| r.is_ipv4() == (family == IpFamily::V4))
        {
            let mut ip = range.start();
            loop {
                let free = self.claimants(ip, service).next().is_none();
                if free && pool.usable(ip) {
                    return Some(ip);
                }
                match range.next_after(ip) {
                    Some(next) => ip = next,
                    None => break,
                }
            }
        }
        None
    }

    /// An address of `family` from `pool` for `req`: one it may share, else the lowest free.
    fn pick(&self, pool: &PoolDef, req: &Request, family: IpFamily) -> Option<IpAddr> {
        if req.sharing_key.is_some() {
            for range in pool
                .ranges
                .iter()
                .filter(|r| r.is_ipv4() == (family == IpFamily::V4))
            {
                let span = range.start()..=range.end();
                let claimed: BTreeSet<IpAddr> = self
                    .owners
                    .range(span.clone())
                    .map(|(ip, _)| *ip)
                    .chain(self.shown_by.range(span).map(|(ip, _)| *ip))
                    .collect();
                let shareable = claimed.into_iter().find(|ip| {
                    pool.usable(*ip)
                        && self.claimants(*ip, &req.service).next().is_some()
                        && self.share_check(*ip, req).is_ok()
                });
                if shareable.is_some() {
                    return shareable;
                }
            }
        }
        self.first_free(pool, &req.service, family)
    }

    fn exhausted(pool: &PoolDef, family: IpFamily) -> AllocError {
        let has_family = pool
            .ranges
            .iter()
            .any(|r| r.is_ipv4() == (family == IpFamily::V4));
        AllocError::Exhausted {
            pool: pool.name.clone(),
            detail: if has_family {
                format!("no {family} address is free")
            } else {
                format!("it has no {family} range")
            },
        }
    }

    fn try_pool(
        &self,
        pool: &PoolDef,
        req: &Request,
        wants: &[Want],
    ) -> Result<Vec<IpAddr>, AllocError> {
        let mut ips = Vec::new();
        for want in wants {
            if let Some(ip) = want.requested {
                self.share_check(ip, req)?;
                ips.push(ip);
            } else if let Some(ip) = self.pick(pool, req, want.family) {
                ips.push(ip);
            } else if want.required {
                return Err(Self::exhausted(pool, want.family));
            }
        }
        match wants.first() {
            Some(first) if ips.is_empty() => Err(Self::exhausted(pool, first.family)),
            _ => Ok(ips),
        }
    }

    /// The pools `req` may take a fresh address from, best first.
    fn candidates(&self, req: &Request) -> Result<Vec<&PoolDef>, AllocError> {
        let service = req.service.to_string();
        if let Some(name) = &req.pool {
            let pool = self
                .pool_named(name)
                .ok_or_else(|| AllocError::UnknownPool { pool: name.clone() })?;
            if !self.serves(pool, req) {
                return Err(AllocError::OutOfScope {
                    pool: name.clone(),
                    service,
                });
            }
            if let Some(ip) = req.requested.iter().find(|ip| !pool.contains(**ip)) {
                return Err(AllocError::Outside {
                    ip: *ip,
                    where_: format!("address pool {name:?}"),
                });
            }
            return Ok(vec![pool]);
        }
        let mut pools: Vec<&PoolDef> = if req.requested.is_empty() {
            let pools: Vec<&PoolDef> = self
                .active()
                .into_iter()
                .filter(|p| p.auto_assign && self.serves(p, req))
                .collect();
            if pools.is_empty() {
                return Err(AllocError::NoPool {
                    service,
                    namespace: req.service.namespace.clone(),
                });
            }
            pools
        } else {
            let containing: Vec<&PoolDef> = self
                .active()
                .into_iter()
                .filter(|p| req.requested.iter().all(|ip| p.contains(*ip)))
                .collect();
            let Some(first) = containing.first() else {
                let active = self.active();
                let ip = req
                    .requested
                    .iter()
                    .copied()
                    .find(|ip| !active.iter().any(|p| p.contains(*ip)))
                    .unwrap_or(req.requested[0]);
                return Err(AllocError::Outside {
                    ip,
                    where_: "every address pool".to_string(),
                });
            };
            let first = first.name.clone();
            let serving: Vec<&PoolDef> = containing
                .into_iter()
                .filter(|p| self.serves(p, req))
                .collect();
            if serving.is_empty() {
                return Err(AllocError::OutOfScope {
                    pool: first,
                    service,
                });
            }
            serving
        };
        pools.sort_by(|a, b| (a.priority(), &a.name).cmp(&(b.priority(), &b.name)));
        Ok(pools)
    }

    /// The held addresses, when the request still allows them (filling in a missing family
    /// from the same pool when it can).
    fn keep_held(&self, req: &Request, held: &Held, wants: &[Want]) -> Option<Choice> {
        if req.requested.iter().any(|ip| !held.ips.contains(ip)) {
            return None;
        }
        // The annotation written back before a restart knows the pool better than adoption,
        // which can only guess the first pool containing the address (pools may overlap).
        let pool_name = match &req.written_pool {
            Some(written)
                if self
                    .pool_named(written)
                    .is_some_and(|p| held.ips.iter().all(|ip| p.contains(*ip))) =>
            {
                Some(written.clone())
            }
            _ => held.pool.clone().or_else(|| req.written_pool.clone()),
        };
        if let (Some(wanted), Some(have)) = (&req.pool, &pool_name)
            && wanted != have
        {
            return None;
        }
        if held.ips.iter().any(|ip| self.loses(*ip, req)) {
            return None;
        }
        let pool = pool_name
            .as_deref()
            .and_then(|name| self.pool_named(name))
            .filter(|p| self.serves(p, req));
        let mut ips = Vec::new();
        for want in wants {
            let have = held
                .ips
                .iter()
                .copied()
                .find(|ip| IpFamily::of(*ip) == want.family);
            match have.or_else(|| pool.and_then(|p| self.pick(p, req, want.family))) {
                Some(ip) => ips.push(ip),
                None if want.required => return None,
                None => {}
            }
        }
        (!ips.is_empty()).then_some(Choice {
            ips,
            pool: pool_name,
        })
    }

    /// What `req` resolves to now, without changing anything: what the Service holds when
    /// its request still allows it, else fresh addresses from the best pool that can serve.
    pub fn plan(&self, req: &Request) -> Result<Choice, AllocError> {
        let wants = wants(req);
        if let Some(held) = self.held_or_shown(&req.service)
            && let Some(choice) = self.keep_held(req, &held, &wants)
        {
            return Ok(choice);
        }
        let mut best: Option<AllocError> = None;
        for pool in self.candidates(req)? {
            match self.try_pool(pool, req, &wants) {
                Ok(ips) => {
                    return Ok(Choice {
                        ips,
                        pool: Some(pool.name.clone()),
                    });
                }
                Err(error) => {
                    if best.as_ref().is_none_or(|b| error.rank() > b.rank()) {
                        best = Some(error);
                    }
                }
            }
        }
        Err(best.unwrap_or(AllocError::NoPool {
            service: req.service.to_string(),
            namespace: req.service.namespace.clone(),
        }))
    }

    /// Records `choice` for `req`'s Service. True when something was freed or the Service's
    /// ports or sharing key changed: Services waiting for an address may now get one.
    pub fn commit(&mut self, req: &Request, choice: &Choice) -> bool {
        let old = self.held.remove(&req.service);
        let mut unblocked = false;
        if let Some(old) = &old {
            for ip in old.ips.iter().filter(|ip| !choice.ips.contains(ip)) {
                self.drop_owner(*ip, &req.service);
                unblocked = true;
            }
            // New terms can only let a waiting Service share if either side has a sharing key
            // (an adopted Service's unknown terms becoming known without one frees nothing).
            let terms = req.terms();
            let sharing =
                old.terms.as_ref().is_some_and(|t| t.key.is_some()) || terms.key.is_some();
            unblocked |= sharing && old.terms.as_ref() != Some(&terms);
        }
        for ip in &choice.ips {
            self.owners
                .entry(*ip)
                .or_default()
                .insert(req.service.clone());
        }
        let allocated_at = match &old {
            Some(old) if old.ips == choice.ips => old.allocated_at,
            _ => Some(SystemTime::now()),
        };
        self.held.insert(
            req.service.clone(),
            Held {
                ips: choice.ips.clone(),
                pool: choice.pool.clone(),
                terms: Some(req.terms()),
                allocated_at,
            },
        );
        unblocked
    }

    /// [`Allocator::plan`] then [`Allocator::commit`].
    pub fn allocate(&mut self, req: &Request) -> Result<Choice, AllocError> {
        let choice = self.plan(req)?;
        self.commit(req, &choice);
        Ok(choice)
    }

    fn drop_owner(&mut self, ip: IpAddr, service: &ServiceKey) {
        if let Some(holders) = self.owners.get_mut(&ip) {
            holders.remove(service);
            if holders.is_empty() {
                self.owners.remove(&ip);
            }
        }
    }

    /// Records that `service` holds `ips` (read back from its status after a restart), even
    /// when no pool contains them any more (kept until the Service goes) or another Service
    /// holds them too (sharing is judged when the Service is next ensured). The pool is the
    /// first containing every address.
    pub fn adopt(&mut self, service: &ServiceKey, ips: &[IpAddr]) {
        if ips.is_empty() || self.held.get(service).is_some_and(|h| h.ips == ips) {
            return;
        }
        if let Some(old) = self.held.remove(service) {
            for ip in old.ips {
                self.drop_owner(ip, service);
            }
        }
        let pool = self.containing_pool(ips);
        for ip in ips {
            self.owners.entry(*ip).or_default().insert(service.clone());
        }
        self.held.insert(
            service.clone(),
            Held {
                ips: ips.to_vec(),
                pool,
                terms: None,
                allocated_at: None,
            },
        );
    }

    /// Records what `service` shows in its status now (`None`: nothing, or the Service is
    /// gone). True when an address nobody claims any more was freed by it.
    pub fn observe(&mut self, service: &ServiceKey, shown: Option<Shown>) -> bool {
        let shown = shown.filter(|s| !s.ips.is_empty());
        if self.shown.get(service) == shown.as_ref() {
            return false;
        }
        let mut freed = false;
        if let Some(old) = self.shown.remove(service) {
            for ip in &old.ips {
                if let Some(by) = self.shown_by.get_mut(ip) {
                    by.remove(service);
                    if by.is_empty() {
                        self.shown_by.remove(ip);
                    }
                }
                freed |= !self.shown_by.contains_key(ip) && !self.owners.contains_key(ip);
            }
        }
        if let Some(shown) = shown {
            for ip in &shown.ips {
                self.shown_by
                    .entry(*ip)
                    .or_default()
                    .insert(service.clone());
            }
            self.shown.insert(service.clone(), shown);
        }
        freed
    }

    /// Replaces what every live Service shows (after the Service watch listed them all).
    /// True when an address nobody claims any more was freed.
    pub fn observe_all(&mut self, all: HashMap<ServiceKey, Shown>) -> bool {
        let gone: Vec<ServiceKey> = self
            .shown
            .keys()
            .filter(|s| !all.contains_key(*s))
            .cloned()
            .collect();
        let mut freed = false;
        for service in gone {
            freed |= self.observe(&service, None);
        }
        for (service, shown) in all {
            freed |= self.observe(&service, Some(shown));
        }
        freed
    }

    /// Drops the addresses `service` holds but has lost to a Service that claimed them first
    /// (its ensure failed to find others): it must neither serve nor show them. True when
    /// something was dropped.
    pub fn drop_lost(&mut self, req: &Request) -> bool {
        let Some(held) = self.held.get(&req.service).cloned() else {
            return false;
        };
        let lost: Vec<IpAddr> = held
            .ips
            .iter()
            .copied()
            .filter(|ip| self.loses(*ip, req))
            .collect();
        if lost.is_empty() {
            return false;
        }
        for ip in &lost {
            self.drop_owner(*ip, &req.service);
        }
        let remaining: Vec<IpAddr> = held
            .ips
            .iter()
            .copied()
            .filter(|ip| !lost.contains(ip))
            .collect();
        if remaining.is_empty() {
            self.held.remove(&req.service);
        } else if let Some(held) = self.held.get_mut(&req.service) {
            held.ips = remaining;
        }
        true
    }

    /// Frees the addresses of `service`, returning them.
    pub fn release(&mut self, service: &ServiceKey) -> Option<Vec<IpAddr>> {
        let held = self.held.remove(service)?;
        for ip in &held.ips {
            self.drop_owner(*ip, service);
        }
        Some(held.ips)
    }

    /// The status of every `IPPool`, by name.
    pub fn statuses(&self) -> BTreeMap<String, PoolStatus> {
        self.statuses_of(self.pools.iter().collect())
    }

    /// The status of every pool addresses are handed out from now: the `IPPool`s, or the
    /// `--local-pool` fallback (named [`FALLBACK_POOL_NAME`]) while there is none. What the
    /// pool metrics show, so a cluster without IPPools still sees its pool fill up.
    pub fn usage(&self) -> BTreeMap<String, PoolStatus> {
        self.statuses_of(self.active())
    }

    fn statuses_of(&self, pools: Vec<&PoolDef>) -> BTreeMap<String, PoolStatus> {
        let mut all = BTreeMap::new();
        for pool in pools {
            let mut status = PoolStatus {
                problems: pool.problems.iter().map(ToString::to_string).collect(),
                ..PoolStatus::default()
            };
            for range in &pool.ranges {
                let skipped = if pool.avoid_buggy_ips {
                    range.buggy_count()
                } else {
                    0
                };
                status.buggy_skipped += skipped;
                let count = if range.is_ipv4() {
                    &mut status.ipv4
                } else {
                    &mut status.ipv6
                };
                count.available = count.available.saturating_add(range.len() - skipped);
            }
            for ip in self.owners.keys().filter(|ip| pool.usable(**ip)) {
                let count = if ip.is_ipv4() {
                    &mut status.ipv4
                } else {
                    &mut status.ipv6
                };
                count.assigned += 1;
                count.available = count.available.saturating_sub(1);
            }
            for other in self.pools.iter().filter(|o| o.name != pool.name) {
                for mine in &pool.ranges {
                    for theirs in other.ranges.iter().filter(|t| mine.overlaps(t)) {
                        status
                            .overlaps
                            .push(format!("{mine} overlaps pool {} ({theirs})", other.name));
                    }
                }
            }
            let mut stranded: Vec<String> = self
                .held
                .iter()
                .filter(|(_, h)| h.pool.as_deref() == Some(pool.name.as_str()))
                .flat_map(|(service, h)| {
                    h.ips
                        .iter()
                        .filter(|ip| !pool.contains(**ip))
                        .map(move |ip| format!("{ip} ({service})"))
                })
                .collect();
            stranded.sort();
            status.stranded = stranded;
            all.insert(pool.name.clone(), status);
        }
        all
    }

    /// The problems of every `IPPool`, by name (for events).
    pub fn problems(&self) -> BTreeMap<String, Vec<PoolProblem>> {
        self.pools
            .iter()
            .filter(|p| !p.problems.is_empty())
            .map(|p| (p.name.clone(), p.problems.clone()))
            .collect()
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ips: Vec<String> = self.ips.iter().map(ToString::to_string).collect();
        write!(f, "{}", ips.join(","))?;
        if let Some(pool) = &self.pool {
            write!(f, " from {pool}")?;
        }
        Ok(())
    }
}

//! Pure: what one node's speaker should have the routing daemon do. From the validated
//! configuration, the address pools, the Services' claims on their addresses (the same
//! [`election::claims`](crate::l2::election::claims) Layer 2 reads) and this node's own facts,
//! [`desired`] computes the BGP sessions this node opens and, per announced prefix, the peers
//! it goes to and the attributes it carries.
//!
//! # Which nodes advertise an address
//!
//! - A node that may not take load-balancer traffic advertises nothing but keeps its sessions:
//!   the shared node rule (`kube_lb_provider_core::eligibility`: being deleted, the
//!   `node.kubernetes.io/exclude-from-external-load-balancers` label, Ready not True), a
//!   cordoned node (`spec.unschedulable`, the first step of a drain), and a proxy shutting
//!   down. Withdrawing keeps established connections: the routes go, the dataplane stays, so
//!   the routers move new flows elsewhere while the old ones finish.
//! - `externalTrafficPolicy: Cluster`: every other node (each forwards to any endpoint).
//! - `externalTrafficPolicy: Local`: only nodes with a ready endpoint of the Service. When
//!   Services share an address, a node advertises it only if it suits every one of them: a
//!   router sends all of the address's traffic to each advertising node, so a node without a
//!   Local Service's endpoint would drop that Service's share.
//!
//! # What is advertised where
//!
//! An address is advertised by each advertisement that selects its pool (by name or label,
//! none: every pool) and whose node selectors match this node, to the advertisement's peers
//! (none named: every peer this node has a session with), as the address's prefix at the
//! advertisement's aggregation length. When several advertisements send one prefix to one
//! peer their communities add up and the highest local preference wins.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use kube_lb_provider_local::ippool::{LabelSelector, PoolDef};

use super::model::{
    Advertisement, BfdProfile, BgpConfig, Community, LargeCommunity, Peer, SecretKeyRef,
};
use crate::l2::election::{Claim, announceable};
use crate::model::ServiceKey;

/// One address pool as the advertisements see it: its validated ranges and its labels (for
/// `ipAddressPoolSelectors`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolView {
    /// The validated pool.
    pub def: PoolDef,
    /// `metadata.labels` of the `IPPool`.
    pub labels: BTreeMap<String, String>,
}

/// What the speaker knows of its own node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeView {
    /// The Node's name (as in EndpointSlices' `nodeName`).
    pub name: String,
    /// The Node's labels (peer and advertisement node selectors match them).
    pub labels: BTreeMap<String, String>,
    /// Why the node must not attract load-balancer traffic now, if it must not (ineligible,
    /// cordoned, shutting down); `None` when it may.
    pub withdrawn: Option<String>,
}

/// One BGP session this node opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The peer.
    pub peer: Peer,
    /// Its BFD profile, resolved (`None`: no BFD, or a profile that does not exist).
    pub bfd: Option<BfdProfile>,
}

impl Session {
    /// The Secret key holding the session's password, if it has one.
    pub fn password(&self) -> Option<&SecretKeyRef> {
        self.peer.password.as_ref()
    }
}

/// What goes with one prefix to one peer.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attributes {
    /// Communities.
    pub communities: BTreeSet<Community>,
    /// Large communities.
    pub large_communities: BTreeSet<LargeCommunity>,
    /// LOCAL_PREF.
    pub local_pref: Option<u32>,
}

impl Attributes {
    fn merge(&mut self, advertisement: &Advertisement) {
        self.communities
            .extend(advertisement.communities.iter().copied());
        self.large_communities
            .extend(advertisement.large_communities.iter().copied());
        self.local_pref = self.local_pref.max(advertisement.local_pref);
    }
}

/// One announced prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// Peer name → what goes with the prefix to that peer.
    pub peers: BTreeMap<String, Attributes>,
    /// The Services whose addresses the prefix covers.
    pub services: BTreeSet<ServiceKey>,
}

/// Everything this node's daemon should be doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DesiredSpeaker {
    /// The BGP router ID (this node's IPv4 address, or one derived for IPv6-only nodes).
    pub router_id: Option<Ipv4Addr>,
    /// Sessions, in configuration order.
    pub sessions: Vec<Session>,
    /// Announced prefixes.
    pub routes: BTreeMap<IpNet, Route>,
    /// Addresses of Services this node does not advertise, with the reason (for logs and
    /// the Service's event).
    pub not_advertised: BTreeMap<IpAddr, String>,
}

fn selected(selectors: &[LabelSelector], labels: &BTreeMap<String, String>) -> bool {
    selectors.is_empty() || selectors.iter().any(|selector| selector.matches(labels))
}

/// The sessions `node` opens: every peer whose node selectors match it, with its BFD profile.
pub fn sessions(config: &BgpConfig, node: &NodeView) -> Vec<Session> {
    config
        .peers
        .iter()
        .filter(|peer| selected(&peer.node_selectors, &node.labels))
        .map(|peer| Session {
            peer: peer.clone(),
            bfd: peer.bfd_profile.as_ref().and_then(|name| {
                config
                    .bfd_profiles
                    .iter()
                    .find(|profile| &profile.name == name)
                    .cloned()
            }),
        })
        .collect()
}

/// Why `node` may not advertise an address claimed by `claims`, or `None` when it may.
pub fn refusal(node: &NodeView, claims: &[Claim]) -> Option<String> {
    if let Some(reason) = &node.withdrawn {
        return Some(reason.clone());
    }
    claims
        .iter()
        .find(|claim| claim.local_only && !claim.local_nodes.contains(&node.name))
        .map(|claim| {
            format!(
                "externalTrafficPolicy Local: no ready endpoint of {} on this node",
                claim.service
            )
        })
}

/// The pool holding `ip`: the first (by name) whose ranges contain it.
fn pool_of(pools: &[PoolView], ip: IpAddr) -> Option<&PoolView> {
    pools
        .iter()
        .filter(|pool| pool.def.contains(ip))
        .min_by(|a, b| a.def.name.cmp(&b.def.name))
}

fn advertises_pool(advertisement: &Advertisement, pool: &PoolView) -> bool {
    let by_name = advertisement.pools.contains(&pool.def.name);
    let by_label = advertisement
        .pool_selectors
        .iter()
        .any(|selector| selector.matches(&pool.labels));
    let every_pool = advertisement.pools.is_empty() && advertisement.pool_selectors.is_empty();
    every_pool || by_name || by_label
}

/// `ip` as the prefix of `advertisement`'s aggregation length for its family.
fn prefix(advertisement: &Advertisement, ip: IpAddr) -> Option<IpNet> {
    let length = match ip {
        IpAddr::V4(_) => advertisement.aggregation_length_v4,
        IpAddr::V6(_) => advertisement.aggregation_length_v6,
    };
    IpNet::new(ip, length).ok().map(|net| net.trunc())
}

/// What `node` should announce, and to whom, given the configuration, the pools and the
/// Services' claims on their addresses.
pub fn desired(
    config: &BgpConfig,
    pools: &[PoolView],
    claims: &BTreeMap<IpAddr, Vec<Claim>>,
    node: &NodeView,
    router_id: Option<Ipv4Addr>,
) -> DesiredSpeaker {
    let sessions = sessions(config, node);
    let session_peers: BTreeSet<&str> = sessions.iter().map(|s| s.peer.name.as_str()).collect();
    let mut routes: BTreeMap<IpNet, Route> = BTreeMap::new();
    let mut not_advertised = BTreeMap::new();
    for (ip, claims) in claims {
        if !announceable(*ip) {
            continue;
        }
        if let Some(reason) = refusal(node, claims) {
            not_advertised.insert(*ip, reason);
            continue;
        }
        let Some(pool) = pool_of(pools, *ip) else {
            not_advertised.insert(*ip, "the address is in no IPPool".to_owned());
            continue;
        };
        let mut advertised = false;
        for advertisement in config
            .advertisements
            .iter()
            .filter(|a| advertises_pool(a, pool) && selected(&a.node_selectors, &node.labels))
        {
            let Some(prefix) = prefix(advertisement, *ip) else {
                continue;
            };
            let targets: Vec<&str> = session_peers
                .iter()
                .copied()
                .filter(|peer| {
                    advertisement.peers.is_empty()
                        || advertisement.peers.iter().any(|name| name == peer)
                })
                .collect();
            if targets.is_empty() {
                continue;
            }
            let route = routes.entry(prefix).or_default();
            route
                .services
                .extend(claims.iter().map(|c| c.service.clone()));
            for peer in targets {
                route
                    .peers
                    .entry(peer.to_owned())
                    .or_default()
                    .merge(advertisement);
            }
            advertised = true;
        }
        if !advertised {
            not_advertised.insert(
                *ip,
                format!(
                    "no BGPAdvertisement for pool {} reaches a peer of this node",
                    pool.def.name
                ),
            );
        }
    }
    DesiredSpeaker {
        router_id,
        sessions,
        routes,
        not_advertised,
    }
}

#[cfg(test)]
pub(crate) mod tests;

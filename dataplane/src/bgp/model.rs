//! The validated BGP configuration one node's speaker works from: peers, advertisements and
//! BFD profiles, as [`super::crd`] reads them from `kube-lb.io/v1alpha1` objects (or their
//! `metallb.io` aliases). Everything here is plain data: no I/O, no Kubernetes types beyond
//! label selectors.

use std::net::IpAddr;
use std::time::Duration;

use kube_lb_provider_local::ippool::LabelSelector;

/// Where an object came from: kube-lb's own kinds, or MetalLB's, imported read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// `kube-lb.io/v1alpha1`.
    KubeLb,
    /// `metallb.io` (`BGPPeer` v1beta2, `BGPAdvertisement` v1beta1, `BFDProfile` v1beta1).
    MetalLb,
}

/// A reference to one key of a Secret holding a BGP session's TCP-MD5 password.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Key in its `data` (`password` unless the object names another).
    pub key: String,
}

/// One BGP peer (a router this node may open a session to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Object name (unique per origin; MetalLB names are prefixed `metallb:` by the reader).
    pub name: String,
    /// Where it came from.
    pub origin: Origin,
    /// The router's address (IPv4 or IPv6).
    pub address: IpAddr,
    /// The router's AS number.
    pub peer_asn: u32,
    /// This node's AS number for the session.
    pub local_asn: u32,
    /// The router's BGP port (179 by default).
    pub port: u16,
    /// BGP hold time (90 s by default; 0 disables keepalives as BGP allows, else at least 3 s).
    pub hold_time: Duration,
    /// BGP keepalive interval (a third of the hold time by default).
    pub keepalive_time: Duration,
    /// The session's TCP-MD5 password, from a Secret.
    pub password: Option<SecretKeyRef>,
    /// The router is more than one hop away (eBGP multihop).
    pub ebgp_multihop: bool,
    /// Which nodes open this session (none: every node).
    pub node_selectors: Vec<LabelSelector>,
    /// Name of the BFD profile to run on this session, if any.
    pub bfd_profile: Option<String>,
}

/// A BGP community (`65000:100`), as two 16-bit halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Community(pub u16, pub u16);

/// A large BGP community (RFC 8092, `65000:1:2`), as three 32-bit parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LargeCommunity(pub u32, pub u32, pub u32);

/// Which load-balancer addresses are advertised, to whom, from which nodes, with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Advertisement {
    /// Object name.
    pub name: String,
    /// Where it came from.
    pub origin: Origin,
    /// `IPPool` names whose addresses this advertises (none, and no pool selector: every pool).
    pub pools: Vec<String>,
    /// Pools selected by label (ORed with `pools`).
    pub pool_selectors: Vec<LabelSelector>,
    /// Prefix length announced for an IPv4 address (32: the address itself; shorter
    /// aggregates the pool's range).
    pub aggregation_length_v4: u8,
    /// Prefix length announced for an IPv6 address (128 by default).
    pub aggregation_length_v6: u8,
    /// Communities attached to the routes.
    pub communities: Vec<Community>,
    /// Large communities attached to the routes.
    pub large_communities: Vec<LargeCommunity>,
    /// LOCAL_PREF attached (iBGP sessions only; eBGP strips it).
    pub local_pref: Option<u32>,
    /// Peer names this advertises to (none: every peer).
    pub peers: Vec<String>,
    /// Nodes that advertise (none: every node the traffic policy allows).
    pub node_selectors: Vec<LabelSelector>,
}

/// BFD timers for the sessions that name this profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BfdProfile {
    /// Object name.
    pub name: String,
    /// Where it came from.
    pub origin: Origin,
    /// Minimum interval this node wants between received control packets (300 ms default).
    pub receive_interval: Duration,
    /// Minimum interval between control packets this node sends (300 ms default).
    pub transmit_interval: Duration,
    /// Packets missed before the session is declared down (3 default).
    pub detect_multiplier: u8,
    /// Echo mode (packets looped back by the peer's forwarding plane).
    pub echo_mode: bool,
    /// Interval of echo packets, when echo mode is on (50 ms default).
    pub echo_interval: Duration,
    /// Wait for the peer to start the session instead of starting it.
    pub passive_mode: bool,
    /// Minimum TTL of received packets for multihop sessions (254 default).
    pub minimum_ttl: u8,
}

/// Something wrong with one object: reported in its status and an event; the object (or the
/// wrong part of it) is left out, and every other object keeps working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Kind of the object (`BGPPeer`, `BGPAdvertisement`, `BFDProfile`).
    pub kind: &'static str,
    /// Where it came from.
    pub origin: Origin,
    /// Object name.
    pub name: String,
    /// The field at fault, as a path (`spec.peerASN`).
    pub field: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

/// Everything the speakers read, validated: what each node's desired state is computed from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BgpConfig {
    /// Valid peers, sorted by (origin, name).
    pub peers: Vec<Peer>,
    /// Valid advertisements, sorted by (origin, name).
    pub advertisements: Vec<Advertisement>,
    /// Valid BFD profiles, sorted by (origin, name).
    pub bfd_profiles: Vec<BfdProfile>,
    /// What was left out, and why.
    pub problems: Vec<Problem>,
}

//! The BGP custom resources as stored, and their reading into [`super::model`].
//!
//! Three cluster-scoped kinds in `kube-lb.io/v1alpha1` (CRDs in `deploy/components/bgp/`):
//! `BGPPeer`, `BGPAdvertisement` and `BFDProfile`. Their specs have the shape of MetalLB's
//! (`BGPPeer` v1beta2, `BGPAdvertisement` v1beta1, `BFDProfile` v1beta1), so MetalLB's own
//! `metallb.io` objects are read by the same code, imported read-only: named `metallb:<name>`
//! in the model ([`model_name`]), each with a warning for the caller to log and post
//! ([`metallb_warning`]).
//!
//! Reading never fails as a whole, as IPPools are read: each object is validated on its own,
//! and what is wrong with it is a [`Problem`] naming its field. An object with a problem that
//! would make it do something else than written (a bad ASN, address, timer, community or
//! selector) is left out entirely, never used in part: a peer without its node selector would
//! open sessions from every node, an advertisement without its community could leak routes.
//! A dangling reference (a BFD profile or peer that does not exist) is a problem that keeps
//! the object. Nothing about one object ever removes another. What cannot be decided without
//! a node (two peers with one address selected for the same node) is [`conflicts`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use kube_lb_provider_local::ippool::LabelSelector;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::model::{
    Advertisement, BfdProfile, BgpConfig, Community, LargeCommunity, Origin, Peer, Problem,
    SecretKeyRef,
};

#[cfg(test)]
mod tests;

/// API group of kube-lb's own kinds.
pub const GROUP: &str = "kube-lb.io";
/// Version of kube-lb's kinds.
pub const VERSION: &str = "v1alpha1";
/// API group of MetalLB's kinds, read as aliases.
pub const METALLB_GROUP: &str = "metallb.io";
/// What MetalLB objects' names are prefixed with in the model, so that a MetalLB object and
/// a kube-lb one of the same name (a cluster halfway through moving over) stay two objects.
pub const METALLB_PREFIX: &str = "metallb:";

/// The names of one kind in both API groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// `kind` (the same in both groups).
    pub kind: &'static str,
    /// Resource (plural) name (the same in both groups).
    pub plural: &'static str,
    /// The `metallb.io` version whose shape the spec follows.
    pub metallb_version: &'static str,
}

/// `BGPPeer`.
pub const BGP_PEER: Kind = Kind {
    kind: "BGPPeer",
    plural: "bgppeers",
    metallb_version: "v1beta2",
};
/// `BGPAdvertisement`.
pub const BGP_ADVERTISEMENT: Kind = Kind {
    kind: "BGPAdvertisement",
    plural: "bgpadvertisements",
    metallb_version: "v1beta1",
};
/// `BFDProfile`.
pub const BFD_PROFILE: Kind = Kind {
    kind: "BFDProfile",
    plural: "bfdprofiles",
    metallb_version: "v1beta1",
};

/// The CustomResourceDefinitions of the three kinds, as shipped in `deploy/components/bgp/`
/// (for the embedded API server and tests).
pub const CRDS: [&str; 3] = [
    include_str!("../../../../deploy/components/bgp/bgppeer-crd.yaml"),
    include_str!("../../../../deploy/components/bgp/bgpadvertisement-crd.yaml"),
    include_str!("../../../../deploy/components/bgp/bfdprofile-crd.yaml"),
];

/// The one Secret the proxy's ServiceAccount may read (`deploy/components/bgp/rbac.yaml`):
/// a kube-lb `passwordSecret` that names no Secret means this one.
pub const PASSWORD_SECRET: &str = "kube-lb-bgp-passwords";
/// Its namespace, and that of a kube-lb `passwordSecret` that names none.
pub const PASSWORD_SECRET_NAMESPACE: &str = "kube-lb-system";
/// The key of a `passwordSecret` that names none (MetalLB always uses it).
pub const PASSWORD_KEY: &str = "password";

/// BGP port when `peerPort` is unset.
pub const DEFAULT_PORT: u16 = 179;
/// BGP hold time when `holdTime` is unset (RFC 4271's suggestion, MetalLB's and FRR's).
pub const DEFAULT_HOLD_TIME: Duration = Duration::from_secs(90);
/// IPv4 prefix length advertised when `aggregationLength` is unset: the address itself.
pub const DEFAULT_AGGREGATION_V4: u8 = 32;
/// IPv6 prefix length advertised when `aggregationLengthV6` is unset.
pub const DEFAULT_AGGREGATION_V6: u8 = 128;
/// BFD receive and transmit intervals when unset.
pub const DEFAULT_BFD_INTERVAL: Duration = Duration::from_millis(300);
/// BFD detect multiplier when unset.
pub const DEFAULT_DETECT_MULTIPLIER: u8 = 3;
/// BFD echo interval when unset.
pub const DEFAULT_ECHO_INTERVAL: Duration = Duration::from_millis(50);
/// BFD minimum TTL when unset.
pub const DEFAULT_MINIMUM_TTL: u8 = 254;
/// The BFD intervals allowed, in milliseconds (bfdd's and MetalLB's range).
pub const BFD_INTERVAL_MS: std::ops::RangeInclusive<i64> = 10..=60_000;

// ------------------------------------------------------------------------- stored shapes

/// `spec` of a `BGPPeer`, as stored (MetalLB `BGPPeer` v1beta2's fields that kube-lb has).
/// Every field is optional here so that a spec decodes field by field and each bad field is
/// reported on its own; numbers are wide so that an out-of-range value is reported with its
/// value instead of as a decoding error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BgpPeerSpec {
    /// This node's AS number for the session (required).
    #[serde(rename = "myASN", skip_serializing_if = "Option::is_none")]
    pub my_asn: Option<i64>,
    /// The router's AS number (required).
    #[serde(rename = "peerASN", skip_serializing_if = "Option::is_none")]
    pub peer_asn: Option<i64>,
    /// The router's address, IPv4 or IPv6 (required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<String>,
    /// The router's port (179 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_port: Option<i64>,
    /// BGP hold time, a Go duration (`90s`, `1m30s`); 90 s when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold_time: Option<String>,
    /// BGP keepalive interval, a Go duration; a third of the hold time when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_time: Option<String>,
    /// The Secret key holding the session's TCP-MD5 password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<PasswordSecret>,
    /// The router is more than one hop away.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ebgp_multi_hop: Option<bool>,
    /// Which nodes open the session (ORed; none: every node).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
    /// Name of the `BFDProfile` to run on the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bfd_profile: Option<String>,
}

/// `spec.passwordSecret` of a `BGPPeer`: MetalLB's `SecretReference` plus the key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PasswordSecret {
    /// Name of the Secret ([`PASSWORD_SECRET`] when unset, for kube-lb objects).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its namespace ([`PASSWORD_SECRET_NAMESPACE`] when unset; a MetalLB object's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The key in its `data` ([`PASSWORD_KEY`] when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `spec` of a `BGPAdvertisement`, as stored (MetalLB `BGPAdvertisement` v1beta1, plus
/// `largeCommunities`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BgpAdvertisementSpec {
    /// `IPPool` names advertised.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pools: Vec<String>,
    /// `IPPool`s advertised, by label (ORed with the names; neither: every pool).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_address_pool_selectors: Vec<LabelSelector>,
    /// IPv4 prefix length advertised (1 to 32; 32 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aggregation_length: Option<i64>,
    /// IPv6 prefix length advertised (1 to 128; 128 when unset).
    #[serde(
        rename = "aggregationLengthV6",
        skip_serializing_if = "Option::is_none"
    )]
    pub aggregation_length_v6: Option<i64>,
    /// Communities: `65000:100`, `large:1:2:3` (as MetalLB writes large ones) or a well-known
    /// name (`no-export`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub communities: Vec<String>,
    /// Large communities: `1:2:3` (a `large:` prefix is accepted too).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub large_communities: Vec<String>,
    /// LOCAL_PREF (iBGP only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_pref: Option<i64>,
    /// `BGPPeer` names advertised to (none: every peer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<String>,
    /// Nodes that advertise (ORed; none: every node the traffic policy allows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_selectors: Vec<LabelSelector>,
}

/// `spec` of a `BFDProfile`, as stored (MetalLB `BFDProfile` v1beta1). Intervals are
/// milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BfdProfileSpec {
    /// Minimum interval between received control packets (10 to 60000 ms; 300 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receive_interval: Option<i64>,
    /// Minimum interval between sent control packets (10 to 60000 ms; 300 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transmit_interval: Option<i64>,
    /// Packets missed before the session is down (2 to 255; 3 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detect_multiplier: Option<i64>,
    /// Echo mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo_mode: Option<bool>,
    /// Interval of echo packets (10 to 60000 ms; 50 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub echo_interval: Option<i64>,
    /// Wait for the peer to start the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passive_mode: Option<bool>,
    /// Minimum TTL of received packets, multihop sessions (1 to 254; 254 when unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum_ttl: Option<i64>,
}

// ------------------------------------------------------------------------- names, warnings

/// The model's name of an object named `name` from `origin`: MetalLB's get [`METALLB_PREFIX`].
pub fn model_name(origin: Origin, name: &str) -> String {
    match origin {
        Origin::KubeLb => name.to_string(),
        Origin::MetalLb => format!("{METALLB_PREFIX}{name}"),
    }
}

/// The object's own name behind a model name (the inverse of [`model_name`]), for its status
/// and events.
pub fn object_name(origin: Origin, model_name: &str) -> &str {
    match origin {
        Origin::KubeLb => model_name,
        Origin::MetalLb => model_name
            .strip_prefix(METALLB_PREFIX)
            .unwrap_or(model_name),
    }
}

/// The warning for a MetalLB object read as an alias (`kind` is `BGPPeer`, ...; `object` the
/// whole object), for the caller to log and post as an event: kube-lb never writes to it.
pub fn metallb_warning(kind: &str, object: &Value) -> String {
    let name = object_meta(object, "name").unwrap_or("<unnamed>");
    let who = match object_meta(object, "namespace") {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_string(),
    };
    format!(
        "{METALLB_GROUP} {kind} {who} imported read-only (as {}); move it to {GROUP}/{VERSION}",
        model_name(Origin::MetalLb, name)
    )
}

/// The objects of one origin, whole (`metadata` and `spec`), as the API lists them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Objects<'a> {
    /// `BGPPeer`s.
    pub peers: &'a [Value],
    /// `BGPAdvertisement`s.
    pub advertisements: &'a [Value],
    /// `BFDProfile`s.
    pub bfd_profiles: &'a [Value],
}

/// One [`metallb_warning`] for each of MetalLB's `objects`.
pub fn metallb_warnings(objects: Objects<'_>) -> Vec<String> {
    let kinds = [
        (BGP_PEER.kind, objects.peers),
        (BGP_ADVERTISEMENT.kind, objects.advertisements),
        (BFD_PROFILE.kind, objects.bfd_profiles),
    ];
    kinds
        .iter()
        .flat_map(|(kind, list)| list.iter().map(|o| metallb_warning(kind, o)))
        .collect()
}

fn object_meta<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

// ------------------------------------------------------------------------- status

/// The condition kube-lb writes in a kube-lb object's `status.conditions` (never in MetalLB's).
pub const VALID_CONDITION: &str = "Valid";

/// The problems `problems` has for one object (`kind`, `origin`, model `name`).
pub fn problems_of<'a>(
    problems: &'a [Problem],
    kind: &str,
    origin: Origin,
    name: &str,
) -> Vec<&'a Problem> {
    problems
        .iter()
        .filter(|p| p.kind == kind && p.origin == origin && p.name == name)
        .collect()
}

/// The [`VALID_CONDITION`] of an object with `problems` (its own, from [`problems_of`]), for a
/// status patch: `True` without any, else `False` naming each field and what is wrong with it.
/// The caller adds `lastTransitionTime` and `observedGeneration`, which it knows.
pub fn valid_condition(problems: &[&Problem]) -> Value {
    if problems.is_empty() {
        return serde_json::json!({
            "type": VALID_CONDITION, "status": "True", "reason": "Valid", "message": "",
        });
    }
    let message = problems
        .iter()
        .map(|p| format!("{}: {}", p.field, p.message))
        .collect::<Vec<_>>()
        .join("\n");
    serde_json::json!({
        "type": VALID_CONDITION, "status": "False", "reason": "Invalid", "message": message,
    })
}

// ------------------------------------------------------------------------- reading

/// Reads the objects of one origin into a validated configuration: each object checked on
/// its own, references (a peer's BFD profile, an advertisement's peers) checked among these
/// objects, everything sorted by (origin, name). Use [`read_all`] when both origins exist, so
/// that references across them resolve.
pub fn read(
    peers: &[Value],
    advertisements: &[Value],
    bfd_profiles: &[Value],
    origin: Origin,
) -> BgpConfig {
    let objects = Objects {
        peers,
        advertisements,
        bfd_profiles,
    };
    resolve(validate(objects, origin))
}

/// Reads kube-lb's and MetalLB's objects into one configuration, references resolved across
/// both (a kube-lb advertisement may name `metallb:<peer>`).
pub fn read_all(kube_lb: Objects<'_>, metallb: Objects<'_>) -> BgpConfig {
    let mut config = validate(kube_lb, Origin::KubeLb);
    let other = validate(metallb, Origin::MetalLb);
    config.peers.extend(other.peers);
    config.advertisements.extend(other.advertisements);
    config.bfd_profiles.extend(other.bfd_profiles);
    config.problems.extend(other.problems);
    resolve(config)
}

fn validate(objects: Objects<'_>, origin: Origin) -> BgpConfig {
    let mut config = BgpConfig::default();
    for object in objects.peers {
        let (peer, problems) = read_peer(object, origin);
        config.peers.extend(peer);
        config.problems.extend(problems);
    }
    for object in objects.advertisements {
        let (advertisement, problems) = read_advertisement(object, origin);
        config.advertisements.extend(advertisement);
        config.problems.extend(problems);
    }
    for object in objects.bfd_profiles {
        let (profile, problems) = read_bfd_profile(object, origin);
        config.bfd_profiles.extend(profile);
        config.problems.extend(problems);
    }
    config
}

/// Sorts by (origin, name), drops duplicate names (only MetalLB's namespaced objects can have
/// them) and checks references: a peer's BFD profile that does not exist is dropped (the
/// session runs without BFD rather than not at all); an advertisement's peer that does not
/// exist stays named (so it matches nothing: dropping it could leave the list empty, which
/// means every peer).
fn resolve(mut config: BgpConfig) -> BgpConfig {
    let mut problems = std::mem::take(&mut config.problems);
    config
        .peers
        .sort_by(|a, b| (a.origin, &a.name).cmp(&(b.origin, &b.name)));
    config
        .advertisements
        .sort_by(|a, b| (a.origin, &a.name).cmp(&(b.origin, &b.name)));
    config
        .bfd_profiles
        .sort_by(|a, b| (a.origin, &a.name).cmp(&(b.origin, &b.name)));
    dedup(&mut config.peers, BGP_PEER.kind, &mut problems, |p| {
        (p.origin, &p.name)
    });
    dedup(
        &mut config.advertisements,
        BGP_ADVERTISEMENT.kind,
        &mut problems,
        |a| (a.origin, &a.name),
    );
    dedup(
        &mut config.bfd_profiles,
        BFD_PROFILE.kind,
        &mut problems,
        |b| (b.origin, &b.name),
    );

    let profiles: BTreeSet<&str> = config
        .bfd_profiles
        .iter()
        .map(|b| b.name.as_str())
        .collect();
    for peer in &mut config.peers {
        if let Some(profile) = &peer.bfd_profile
            && !profiles.contains(profile.as_str())
        {
            problems.push(Problem {
                kind: BGP_PEER.kind,
                origin: peer.origin,
                name: peer.name.clone(),
                field: "spec.bfdProfile".to_string(),
                message: format!(
                    "bfdProfile {:?}: no valid BFDProfile has that name; the session runs \
                     without BFD until it exists",
                    object_name(peer.origin, profile)
                ),
            });
            peer.bfd_profile = None;
        }
    }
    let peers: BTreeSet<&str> = config.peers.iter().map(|p| p.name.as_str()).collect();
    for advertisement in &config.advertisements {
        for (i, peer) in advertisement.peers.iter().enumerate() {
            if !peers.contains(peer.as_str()) {
                problems.push(Problem {
                    kind: BGP_ADVERTISEMENT.kind,
                    origin: advertisement.origin,
                    name: advertisement.name.clone(),
                    field: format!("spec.peers[{i}]"),
                    message: format!(
                        "peers[{i}] {:?}: no valid BGPPeer has that name; nothing is \
                         advertised to it until it exists",
                        object_name(advertisement.origin, peer)
                    ),
                });
            }
        }
    }
    config.problems = problems;
    config
}

fn dedup<T>(
    items: &mut Vec<T>,
    kind: &'static str,
    problems: &mut Vec<Problem>,
    key: impl Fn(&T) -> (Origin, &String),
) {
    let mut seen = BTreeSet::new();
    let mut dropped = Vec::new();
    items.retain(|item| {
        let (origin, name) = key(item);
        let fresh = seen.insert((origin, name.clone()));
        if !fresh {
            dropped.push((origin, name.clone()));
        }
        fresh
    });
    for (origin, name) in dropped {
        problems.push(Problem {
            kind,
            origin,
            name: name.clone(),
            field: "metadata.name".to_string(),
            message: format!(
                "another {kind} is also named {:?} (in another namespace); only the first one \
                 listed is used",
                object_name(origin, &name)
            ),
        });
    }
}

/// The peers of `config` that cannot all run on the node labelled `node_labels`: BGP has one
/// session per neighbour address, so of the peers selected for the node that share an
/// address, the first by (origin, name) is kept and each later one gets a problem. The peers
/// the returned problems name are to be left out on that node only.
pub fn conflicts(config: &BgpConfig, node_labels: &BTreeMap<String, String>) -> Vec<Problem> {
    let mut first: BTreeMap<IpAddr, &Peer> = BTreeMap::new();
    let mut problems = Vec::new();
    let mut peers: Vec<&Peer> = config.peers.iter().collect();
    // `config.peers` is sorted already when it comes from `read`; sorted again so the rule
    // holds for a configuration built by hand.
    peers.sort_by(|a, b| (a.origin, &a.name).cmp(&(b.origin, &b.name)));
    for peer in peers {
        let selected = peer.node_selectors.is_empty()
            || peer.node_selectors.iter().any(|s| s.matches(node_labels));
        if !selected {
            continue;
        }
        match first.get(&peer.address) {
            None => {
                first.insert(peer.address, peer);
            }
            Some(kept) => problems.push(Problem {
                kind: BGP_PEER.kind,
                origin: peer.origin,
                name: peer.name.clone(),
                field: "spec.peerAddress".to_string(),
                message: format!(
                    "peerAddress {} is also that of BGPPeer {:?}, and both select this node: \
                     one session per address, so this peer is left out on the node (make the \
                     nodeSelectors disjoint)",
                    peer.address, kept.name
                ),
            }),
        }
    }
    problems
}

/// The problems of one object, and whether any of them leaves it out.
struct Check<'a> {
    kind: &'static str,
    origin: Origin,
    name: &'a str,
    problems: Vec<Problem>,
    fatal: bool,
}

impl<'a> Check<'a> {
    fn new(kind: &'static str, origin: Origin, name: &'a str) -> Self {
        Self {
            kind,
            origin,
            name,
            problems: Vec::new(),
            fatal: false,
        }
    }

    /// A problem that leaves the object out.
    fn bad(&mut self, field: impl Into<String>, message: impl std::fmt::Display) {
        self.fatal = true;
        let message = format!(
            "{message}; the {} is not used until this is fixed",
            self.kind
        );
        self.push(field.into(), message);
    }

    /// A problem the object is used despite (what is ignored is said in `message`).
    fn note(&mut self, field: impl Into<String>, message: impl std::fmt::Display) {
        self.push(field.into(), message.to_string());
    }

    fn push(&mut self, field: String, message: String) {
        self.problems.push(Problem {
            kind: self.kind,
            origin: self.origin,
            name: model_name(self.origin, self.name),
            field,
            message,
        });
    }

    /// The object's spec as `T`, every undecodable field reported (`None` then).
    fn decode<T: DeserializeOwned + Default>(&mut self, object: &Value) -> Option<T> {
        let spec = match object.get("spec") {
            None | Some(Value::Null) => return Some(T::default()),
            Some(spec) => spec,
        };
        let whole = match serde_json::from_value::<T>(spec.clone()) {
            Ok(spec) => return Some(spec),
            Err(error) => error,
        };
        // Every field of T is optional, so each field alone decodes unless it is the one at
        // fault: that names the field, which serde_json's message does not.
        let Some(map) = spec.as_object() else {
            self.bad("spec", format!("spec is not an object: {whole}"));
            return None;
        };
        let before = self.problems.len();
        for (key, value) in map {
            let alone = Value::Object([(key.clone(), value.clone())].into_iter().collect());
            if let Err(error) = serde_json::from_value::<T>(alone) {
                self.bad(format!("spec.{key}"), format!("{key}: {error}"));
            }
        }
        if self.problems.len() == before {
            self.bad("spec", format!("spec does not decode: {whole}"));
        }
        None
    }

    /// `value` as a whole number in `range`, else a problem.
    fn int<T: TryFrom<i64>>(
        &mut self,
        field: &str,
        value: i64,
        range: std::ops::RangeInclusive<i64>,
        what: &str,
    ) -> Option<T> {
        let converted = range
            .contains(&value)
            .then(|| T::try_from(value).ok())
            .flatten();
        if converted.is_none() {
            self.bad(
                format!("spec.{field}"),
                format!(
                    "{field} {value} is not {what} ({} to {})",
                    range.start(),
                    range.end()
                ),
            );
        }
        converted
    }

    fn selectors(&mut self, field: &str, selectors: &[LabelSelector]) {
        for (i, selector) in selectors.iter().enumerate() {
            if let Some(detail) = selector.problem() {
                // Never used in part: a selector dropped would select more than written.
                self.bad(
                    format!("spec.{field}[{i}]"),
                    format!("{field}[{i}]: {detail}"),
                );
            }
        }
    }
}

/// The object's name, or a problem (an object without one cannot be reported on by name; it
/// is `""` in the problem).
fn name_of<'a>(kind: &'static str, origin: Origin, object: &'a Value) -> Result<&'a str, Problem> {
    object_meta(object, "name").ok_or_else(|| Problem {
        kind,
        origin,
        name: String::new(),
        field: "metadata.name".to_string(),
        message: format!("the {kind} has no metadata.name; it is not used"),
    })
}

/// MetalLB `BGPPeer` fields kube-lb does not implement: (field, whether the session would be
/// another than written without it, what to do).
const UNSUPPORTED_PEER_FIELDS: &[(&str, bool, &str)] = &[
    (
        "password",
        true,
        "inline passwords are not supported: put it in a Secret and name it in passwordSecret",
    ),
    (
        "dynamicASN",
        true,
        "dynamic peer ASNs are not supported: set peerASN",
    ),
    (
        "interface",
        true,
        "unnumbered sessions over an interface are not supported: set peerAddress",
    ),
    (
        "sourceAddress",
        true,
        "a source address is not supported: the node's address towards the peer is used",
    ),
    ("vrf", true, "VRFs are not supported"),
    (
        "routerID",
        false,
        "a router ID per peer is not supported; ignored (the node's is used)",
    ),
    (
        "connectTime",
        false,
        "connectTime is not supported; ignored (the daemon's retry interval is used)",
    ),
    (
        "enableGracefulRestart",
        false,
        "graceful restart is not supported; ignored",
    ),
    (
        "disableMP",
        false,
        "disableMP is not supported; ignored (kube-lb decides the families per session)",
    ),
];

/// True when a field is set to something other than its zero value (Go's `omitempty` writes
/// none, but hand-written objects may carry `""`, `false` or `0`).
fn is_set(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Validates one `BGPPeer` object (`origin` says which group it came from): the peer, or
/// `None` when it is left out, and its problems. References to BFD profiles are checked by
/// [`read`], which knows the profiles.
pub fn read_peer(object: &Value, origin: Origin) -> (Option<Peer>, Vec<Problem>) {
    let name = match name_of(BGP_PEER.kind, origin, object) {
        Ok(name) => name,
        Err(problem) => return (None, vec![problem]),
    };
    let mut check = Check::new(BGP_PEER.kind, origin, name);
    // Fields of MetalLB's that kube-lb's schema does not have (its API server prunes them from
    // kube-lb objects); read from the raw spec, as the typed one has no place for them.
    if let Some(raw) = object.get("spec").and_then(Value::as_object) {
        for (field, fatal, why) in UNSUPPORTED_PEER_FIELDS {
            if raw.get(*field).is_some_and(is_set) {
                if *fatal {
                    check.bad(format!("spec.{field}"), format!("{field}: {why}"));
                } else {
                    check.note(format!("spec.{field}"), format!("{field}: {why}"));
                }
            }
        }
    }
    let Some(spec) = check.decode::<BgpPeerSpec>(object) else {
        return (None, check.problems);
    };
    let peer = peer_from_spec(&mut check, object, &spec);
    let peer = if check.fatal { None } else { peer };
    (peer, check.problems)
}

fn asn(check: &mut Check<'_>, field: &str, value: Option<i64>) -> Option<u32> {
    match value {
        None => {
            check.bad(
                format!("spec.{field}"),
                format!("{field} is required (an AS number, 1 to 4294967295)"),
            );
            None
        }
        Some(value) => check.int(field, value, 1..=i64::from(u32::MAX), "an AS number"),
    }
}

fn peer_from_spec(check: &mut Check<'_>, object: &Value, spec: &BgpPeerSpec) -> Option<Peer> {
    let local_asn = asn(check, "myASN", spec.my_asn);
    let peer_asn = asn(check, "peerASN", spec.peer_asn);
    let address = match spec.peer_address.as_deref().map(str::trim) {
        None | Some("") => {
            check.bad(
                "spec.peerAddress",
                "peerAddress is required (the router's IPv4 or IPv6 address)",
            );
            None
        }
        Some(text) => {
            match text.parse::<IpAddr>() {
                Ok(ip) if ip.is_unspecified() || ip.is_multicast() => {
                    check.bad(
                    "spec.peerAddress",
                    format!("peerAddress {text:?} is not a router's address (unspecified or multicast)"),
                );
                    None
                }
                Ok(ip) => Some(ip),
                Err(_) => {
                    check.bad(
                    "spec.peerAddress",
                    format!(
                        "peerAddress {text:?} is not an IP address (IPv4 like 192.0.2.1 or IPv6 \
                         like 2001:db8::1, no prefix length, port or zone)"
                    ),
                );
                    None
                }
            }
        }
    };
    let port = match spec.peer_port {
        None => Some(DEFAULT_PORT),
        // MetalLB's peerPort is `omitempty`: 0 there means unset.
        Some(0) if check.origin == Origin::MetalLb => Some(DEFAULT_PORT),
        Some(port) => check.int("peerPort", port, 1..=65535, "a port"),
    };
    let hold_time = match &spec.hold_time {
        None => Some(DEFAULT_HOLD_TIME),
        Some(text) => bgp_timer(check, "holdTime", text).and_then(|hold| {
            if hold > Duration::ZERO && hold < Duration::from_secs(3) {
                check.bad(
                    "spec.holdTime",
                    format!(
                        "holdTime {text:?} is not allowed: BGP takes 0 (no keepalives) or at \
                         least 3s"
                    ),
                );
                None
            } else {
                Some(hold)
            }
        }),
    };
    let keepalive_time = match (&spec.keepalive_time, hold_time) {
        (None, Some(hold)) => Some(Duration::from_secs(hold.as_secs() / 3)),
        (None, None) => None,
        (Some(text), hold) => {
            bgp_timer(check, "keepaliveTime", text).and_then(|keepalive| match hold {
                Some(hold) if keepalive > hold => {
                    check.bad(
                        "spec.keepaliveTime",
                        format!(
                            "keepaliveTime {text:?} is longer than the hold time ({}s); it \
                             must be at most that (a third of it is usual)",
                            hold.as_secs()
                        ),
                    );
                    None
                }
                _ => Some(keepalive),
            })
        }
    };
    let password = spec
        .password_secret
        .as_ref()
        .and_then(|secret| password_ref(check, object, secret));
    if let Some(secret) = &password
        && (secret.namespace != PASSWORD_SECRET_NAMESPACE || secret.name != PASSWORD_SECRET)
    {
        // Not fatal: the reference is what was written, and a deployment may grant more; but
        // with the shipped RBAC the session cannot authenticate, which is better said here
        // than found in a router's log.
        check.note(
            "spec.passwordSecret",
            format!(
                "passwordSecret names Secret {}/{}, which the proxy may not read as shipped (it \
                 may read {PASSWORD_SECRET_NAMESPACE}/{PASSWORD_SECRET} only): the session stays \
                 down until the password is a key of that Secret and passwordSecret names the key",
                secret.namespace, secret.name
            ),
        );
    }
    let bfd_profile = spec
        .bfd_profile
        .as_deref()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| model_name(check.origin, p));
    check.selectors("nodeSelectors", &spec.node_selectors);
    Some(Peer {
        name: model_name(check.origin, check.name),
        origin: check.origin,
        address: address?,
        peer_asn: peer_asn?,
        local_asn: local_asn?,
        port: port?,
        hold_time: hold_time?,
        keepalive_time: keepalive_time?,
        password,
        ebgp_multihop: spec.ebgp_multi_hop.unwrap_or(false),
        node_selectors: spec.node_selectors.clone(),
        bfd_profile,
    })
}

/// A BGP timer: a Go duration of whole seconds, 0 to 65535 (the wire's two octets).
fn bgp_timer(check: &mut Check<'_>, field: &str, text: &str) -> Option<Duration> {
    let allowed = "a Go duration of whole seconds from 0 to 65535 (90s, 1m30s)";
    match parse_go_duration(text) {
        Err(error) => {
            check.bad(
                format!("spec.{field}"),
                format!("{field} {text:?} is not {allowed}: {error}"),
            );
            None
        }
        Ok(d) if d.subsec_nanos() != 0 || d.as_secs() > 65535 => {
            check.bad(
                format!("spec.{field}"),
                format!("{field} {text:?} is not {allowed}"),
            );
            None
        }
        Ok(d) => Some(d),
    }
}

fn password_ref(
    check: &mut Check<'_>,
    object: &Value,
    secret: &PasswordSecret,
) -> Option<SecretKeyRef> {
    let given = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let (name, namespace, key) = (
        given(&secret.name),
        given(&secret.namespace),
        given(&secret.key),
    );
    match check.origin {
        Origin::KubeLb => Some(SecretKeyRef {
            namespace: namespace.unwrap_or_else(|| PASSWORD_SECRET_NAMESPACE.to_string()),
            name: name.unwrap_or_else(|| PASSWORD_SECRET.to_string()),
            key: key.unwrap_or_else(|| PASSWORD_KEY.to_string()),
        }),
        // MetalLB writes `passwordSecret: {}` when there is none (Go's omitempty keeps empty
        // structs), and its Secret lives beside the peer.
        Origin::MetalLb => {
            let name = name?;
            let namespace = namespace
                .or_else(|| object_meta(object, "namespace").map(str::to_string))
                .unwrap_or_else(|| PASSWORD_SECRET_NAMESPACE.to_string());
            Some(SecretKeyRef {
                namespace,
                name,
                key: key.unwrap_or_else(|| PASSWORD_KEY.to_string()),
            })
        }
    }
}

/// Validates one `BGPAdvertisement` object: the advertisement, or `None` when it is left out,
/// and its problems. Peer names are checked by [`read`], which knows the peers.
pub fn read_advertisement(object: &Value, origin: Origin) -> (Option<Advertisement>, Vec<Problem>) {
    let name = match name_of(BGP_ADVERTISEMENT.kind, origin, object) {
        Ok(name) => name,
        Err(problem) => return (None, vec![problem]),
    };
    let mut check = Check::new(BGP_ADVERTISEMENT.kind, origin, name);
    let Some(spec) = check.decode::<BgpAdvertisementSpec>(object) else {
        return (None, check.problems);
    };
    // 0 would announce a default route (0.0.0.0/0, ::/0) for the pool: never what is meant.
    let aggregation_length_v4 = match spec.aggregation_length {
        None => Some(DEFAULT_AGGREGATION_V4),
        Some(len) => check.int("aggregationLength", len, 1..=32, "an IPv4 prefix length"),
    };
    let aggregation_length_v6 = match spec.aggregation_length_v6 {
        None => Some(DEFAULT_AGGREGATION_V6),
        Some(len) => check.int("aggregationLengthV6", len, 1..=128, "an IPv6 prefix length"),
    };
    let mut communities = Vec::new();
    let mut large_communities = Vec::new();
    for (i, text) in spec.communities.iter().enumerate() {
        match parse_community(text) {
            Ok(CommunityValue::Standard(c)) => communities.push(c),
            Ok(CommunityValue::Large(c)) => large_communities.push(c),
            Err(error) => check.bad(format!("spec.communities[{i}]"), error),
        }
    }
    for (i, text) in spec.large_communities.iter().enumerate() {
        match parse_large_community(text) {
            Ok(c) => large_communities.push(c),
            Err(error) => check.bad(format!("spec.largeCommunities[{i}]"), error),
        }
    }
    let local_pref = match spec.local_pref {
        None => None,
        // MetalLB's localPref is `omitempty`: 0 there means unset.
        Some(0) if origin == Origin::MetalLb => None,
        Some(pref) => check.int("localPref", pref, 0..=i64::from(u32::MAX), "a LOCAL_PREF"),
    };
    check.selectors("ipAddressPoolSelectors", &spec.ip_address_pool_selectors);
    check.selectors("nodeSelectors", &spec.node_selectors);
    if check.fatal {
        return (None, check.problems);
    }
    let (Some(aggregation_length_v4), Some(aggregation_length_v6)) =
        (aggregation_length_v4, aggregation_length_v6)
    else {
        return (None, check.problems);
    };
    let advertisement = Advertisement {
        name: model_name(origin, name),
        origin,
        pools: spec.ip_address_pools.clone(),
        pool_selectors: spec.ip_address_pool_selectors.clone(),
        aggregation_length_v4,
        aggregation_length_v6,
        communities,
        large_communities,
        local_pref,
        peers: spec
            .peers
            .iter()
            .map(|p| model_name(origin, p.trim()))
            .collect(),
        node_selectors: spec.node_selectors.clone(),
    };
    (Some(advertisement), check.problems)
}

/// Validates one `BFDProfile` object: the profile, or `None` when it is left out, and its
/// problems.
pub fn read_bfd_profile(object: &Value, origin: Origin) -> (Option<BfdProfile>, Vec<Problem>) {
    let name = match name_of(BFD_PROFILE.kind, origin, object) {
        Ok(name) => name,
        Err(problem) => return (None, vec![problem]),
    };
    let mut check = Check::new(BFD_PROFILE.kind, origin, name);
    let Some(spec) = check.decode::<BfdProfileSpec>(object) else {
        return (None, check.problems);
    };
    let interval = |check: &mut Check<'_>, field: &str, value: Option<i64>, default| match value {
        None => Some(default),
        Some(ms) => check
            .int::<u64>(field, ms, BFD_INTERVAL_MS, "an interval in milliseconds")
            .map(Duration::from_millis),
    };
    let receive_interval = interval(
        &mut check,
        "receiveInterval",
        spec.receive_interval,
        DEFAULT_BFD_INTERVAL,
    );
    let transmit_interval = interval(
        &mut check,
        "transmitInterval",
        spec.transmit_interval,
        DEFAULT_BFD_INTERVAL,
    );
    let echo_interval = interval(
        &mut check,
        "echoInterval",
        spec.echo_interval,
        DEFAULT_ECHO_INTERVAL,
    );
    let detect_multiplier = match spec.detect_multiplier {
        None => Some(DEFAULT_DETECT_MULTIPLIER),
        Some(m) => check.int("detectMultiplier", m, 2..=255, "a detect multiplier"),
    };
    let minimum_ttl = match spec.minimum_ttl {
        None => Some(DEFAULT_MINIMUM_TTL),
        Some(ttl) => check.int("minimumTtl", ttl, 1..=254, "a TTL"),
    };
    let profile = (|| {
        Some(BfdProfile {
            name: model_name(origin, name),
            origin,
            receive_interval: receive_interval?,
            transmit_interval: transmit_interval?,
            detect_multiplier: detect_multiplier?,
            echo_mode: spec.echo_mode.unwrap_or(false),
            echo_interval: echo_interval?,
            passive_mode: spec.passive_mode.unwrap_or(false),
            minimum_ttl: minimum_ttl?,
        })
    })();
    let profile = if check.fatal { None } else { profile };
    (profile, check.problems)
}

// ------------------------------------------------------------------------- value syntax

/// A community as written in `spec.communities`: standard or large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommunityValue {
    /// `65000:100` or a well-known name.
    Standard(Community),
    /// `large:1:2:3`.
    Large(LargeCommunity),
}

/// Well-known communities by the names FRR and RFC 1997 / 3765 / 7999 / 8326 give them.
const WELL_KNOWN_COMMUNITIES: &[(&str, Community)] = &[
    ("graceful-shutdown", Community(0xFFFF, 0)),
    ("blackhole", Community(0xFFFF, 666)),
    ("no-export", Community(0xFFFF, 0xFF01)),
    ("no-advertise", Community(0xFFFF, 0xFF02)),
    ("no-export-subconfed", Community(0xFFFF, 0xFF03)),
    ("local-as", Community(0xFFFF, 0xFF03)),
    ("no-peer", Community(0xFFFF, 0xFF04)),
];

fn number<T: std::str::FromStr>(part: &str) -> Option<T> {
    // Digits only: `str::parse` would take a sign, which no community syntax has.
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// Parses one `spec.communities` entry: `AA:NN` (two numbers 0-65535), `large:AA:BB:CC`
/// (three numbers 0-4294967295, MetalLB's form; `AA:BB:CC` alone too) or a well-known name.
pub fn parse_community(text: &str) -> Result<CommunityValue, String> {
    let trimmed = text.trim();
    if let Some((_, community)) = WELL_KNOWN_COMMUNITIES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(trimmed))
    {
        return Ok(CommunityValue::Standard(*community));
    }
    if trimmed.starts_with("large:") || trimmed.split(':').count() == 3 {
        return parse_large_community(trimmed).map(CommunityValue::Large);
    }
    let parts: Vec<&str> = trimmed.split(':').collect();
    match parts.as_slice() {
        [a, b] => match (number::<u16>(a), number::<u16>(b)) {
            (Some(a), Some(b)) => Ok(CommunityValue::Standard(Community(a, b))),
            _ => Err(format!(
                "community {text:?}: both halves of AA:NN must be numbers from 0 to 65535"
            )),
        },
        _ => Err(format!(
            "community {text:?} is not AA:NN (numbers 0-65535), large:AA:BB:CC (numbers \
             0-4294967295) or a well-known name (no-export, no-advertise, no-peer, \
             no-export-subconfed, blackhole, graceful-shutdown); names of metallb.io Community \
             aliases are not supported, write the value"
        )),
    }
}

/// Parses one large community: `AA:BB:CC` (three numbers 0-4294967295), `large:` prefix
/// optional.
pub fn parse_large_community(text: &str) -> Result<LargeCommunity, String> {
    let trimmed = text.trim();
    let body = trimmed.strip_prefix("large:").unwrap_or(trimmed);
    let parts: Vec<Option<u32>> = body.split(':').map(number::<u32>).collect();
    match parts.as_slice() {
        [Some(a), Some(b), Some(c)] => Ok(LargeCommunity(*a, *b, *c)),
        _ => Err(format!(
            "large community {text:?} is not AA:BB:CC (three numbers from 0 to 4294967295, \
             optionally prefixed large:)"
        )),
    }
}

/// Why a text is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Nothing at all.
    #[error("empty")]
    Empty,
    /// A number or unit where it cannot be.
    #[error("expected a number followed by a unit (h, m, s, ms, us, ns) at {0:?}")]
    Syntax(String),
    /// A unit Go does not know.
    #[error("unknown unit {0:?} (h, m, s, ms, us, ns)")]
    Unit(String),
    /// Below zero.
    #[error("negative")]
    Negative,
    /// Beyond Go's limit (about 292 years).
    #[error("too long")]
    Overflow,
}

/// Parses a duration as Go's `time.ParseDuration` does (what `metav1.Duration` fields such as
/// MetalLB's `holdTime` hold): `90s`, `1m30s`, `1.5h`, `300ms`, `0`; units `h`, `m`, `s`,
/// `ms`, `us` (`µs`, `μs`), `ns`; a leading `+`. Negative durations are refused, as no timer
/// here may be negative.
pub fn parse_go_duration(text: &str) -> Result<Duration, DurationError> {
    const UNITS: &[(&str, u128)] = &[
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    // Go's limit: an int64 of nanoseconds.
    const MAX_NANOS: u128 = i64::MAX as u128;
    let mut rest = text;
    if let Some(r) = rest.strip_prefix('-') {
        // `-0` is zero in Go; anything else below zero is refused.
        return if r == "0" {
            Ok(Duration::ZERO)
        } else if r.is_empty() {
            Err(DurationError::Syntax(text.to_string()))
        } else {
            parse_go_duration(r).and_then(|d| {
                if d.is_zero() {
                    Ok(d)
                } else {
                    Err(DurationError::Negative)
                }
            })
        };
    }
    rest = rest.strip_prefix('+').unwrap_or(rest);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(DurationError::Empty);
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(digits_end);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let end = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(end)
            }
            None => ("", after),
        };
        if whole.is_empty() && fraction.is_empty() {
            return Err(DurationError::Syntax(rest.to_string()));
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        if unit.is_empty() {
            return Err(DurationError::Syntax(rest.to_string()));
        }
        let Some((_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
            return Err(DurationError::Unit(unit.to_string()));
        };
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            // More digits than an int64 of nanoseconds can hold is an overflow either way.
            if whole.len() > 20 {
                return Err(DurationError::Overflow);
            }
            whole.parse().map_err(|_| DurationError::Overflow)?
        };
        let mut nanos = whole.checked_mul(*scale).ok_or(DurationError::Overflow)?;
        // Fraction digits beyond nanosecond precision change nothing (Go drops them too).
        let mut place = *scale;
        for digit in fraction.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            nanos += u128::from(digit - b'0') * place;
        }
        total = total.checked_add(nanos).ok_or(DurationError::Overflow)?;
        if total > MAX_NANOS {
            return Err(DurationError::Overflow);
        }
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| DurationError::Overflow)?;
    Ok(Duration::new(secs, nanos))
}

//! Pure: the FRR configuration (`frr.conf`) for a [`DesiredSpeaker`]. The whole file is
//! rendered every time and FRR's own `frr-reload.py` applies the difference to the running
//! daemons (as MetalLB's FRR mode does), so a change of prefixes or attributes never resets a
//! session; only a change of a session's own settings (timers, AS numbers, password) does, as
//! BGP requires.
//!
//! # Shape
//!
//! - One `router bgp` instance with the first session's local AS; a session with another
//!   local AS gets `local-as <asn> no-prepend replace-as`.
//! - Each IPv4 peer is activated in `ipv4 unicast`, each IPv6 peer in `ipv6 unicast`
//!   (MP-BGP over the IPv6 session); an IPv6 prefix goes to IPv6 peers only, as a next hop of
//!   the other family would not be reachable.
//! - Every announced prefix is a `network` statement (with `no bgp network import-check`: the
//!   address is not a route in the node's table). Which peer gets which prefix with which
//!   attributes is each peer's outbound route map: one `permit` entry per set of attributes,
//!   matching a prefix list, and a final `deny`. Nothing is learned from peers (inbound
//!   `deny`): a node needs no routes from its routers to answer for its addresses.
//! - `bgp graceful-restart-disable`: routers drop a failed node's routes when its session
//!   ends (hold timer, BFD) instead of keeping them stale for two minutes.
//! - BFD timers are written only where they differ from FRR's defaults (300 ms, ×3), as FRR
//!   prints its running configuration, so a reload with nothing changed changes nothing.
//! - `bgp route-map delay-timer 0`: route-map changes (a Local Service's last endpoint going
//!   away on this node while others keep the prefix) take effect at once instead of after
//!   FRR's default 5 s.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use ipnet::IpNet;

use super::desired::{Attributes, DesiredSpeaker, Session};
use super::model::{BfdProfile, SecretKeyRef};

/// FRR's BFD defaults, left out of the rendered profile.
const BFD_DEFAULT_INTERVAL: Duration = Duration::from_millis(300);
const BFD_DEFAULT_MULTIPLIER: u8 = 3;
const BFD_DEFAULT_ECHO: Duration = Duration::from_millis(50);
const BFD_DEFAULT_MIN_TTL: u8 = 254;

/// What the renderer needs besides the desired state.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    /// `hostname` in the configuration (the node name).
    pub hostname: String,
    /// Session passwords, read from their Secrets; a session whose password is missing is
    /// rendered `shutdown` (it must not come up unauthenticated).
    pub passwords: BTreeMap<SecretKeyRef, String>,
}

/// A name FRR accepts as part of a route-map or prefix-list name: letters, digits, `-`, `_`
/// and `.` kept, anything else (MetalLB aliases' `:`) turned into `_`. Kubernetes names never
/// contain `_`, so two peers never end with the same name.
pub fn frr_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn millis(duration: Duration) -> u128 {
    duration.as_millis()
}

fn render_bfd_profile(out: &mut String, profile: &BfdProfile) {
    let _ = writeln!(out, " profile {}", frr_name(&profile.name));
    if profile.receive_interval != BFD_DEFAULT_INTERVAL {
        let _ = writeln!(
            out,
            "  receive-interval {}",
            millis(profile.receive_interval)
        );
    }
    if profile.transmit_interval != BFD_DEFAULT_INTERVAL {
        let _ = writeln!(
            out,
            "  transmit-interval {}",
            millis(profile.transmit_interval)
        );
    }
    if profile.detect_multiplier != BFD_DEFAULT_MULTIPLIER {
        let _ = writeln!(out, "  detect-multiplier {}", profile.detect_multiplier);
    }
    if profile.echo_mode {
        let _ = writeln!(out, "  echo-mode");
        if profile.echo_interval != BFD_DEFAULT_ECHO {
            let _ = writeln!(
                out,
                "  echo transmit-interval {}",
                millis(profile.echo_interval)
            );
            let _ = writeln!(
                out,
                "  echo receive-interval {}",
                millis(profile.echo_interval)
            );
        }
    }
    if profile.passive_mode {
        let _ = writeln!(out, "  passive-mode");
    }
    if profile.minimum_ttl != BFD_DEFAULT_MIN_TTL {
        let _ = writeln!(out, "  minimum-ttl {}", profile.minimum_ttl);
    }
    let _ = writeln!(out, " exit\n !");
}

fn render_neighbor(out: &mut String, session: &Session, router_asn: u32, context: &RenderContext) {
    let peer = &session.peer;
    let address = peer.address;
    let _ = writeln!(out, " neighbor {address} remote-as {}", peer.peer_asn);
    let _ = writeln!(
        out,
        " neighbor {address} description {}",
        frr_name(&peer.name)
    );
    if peer.local_asn != router_asn {
        let _ = writeln!(
            out,
            " neighbor {address} local-as {} no-prepend replace-as",
            peer.local_asn
        );
    }
    if peer.port != 179 {
        let _ = writeln!(out, " neighbor {address} port {}", peer.port);
    }
    if peer.ebgp_multihop {
        let _ = writeln!(out, " neighbor {address} ebgp-multihop");
    }
    if let Some(profile) = &session.bfd {
        let _ = writeln!(out, " neighbor {address} bfd");
        let _ = writeln!(
            out,
            " neighbor {address} bfd profile {}",
            frr_name(&profile.name)
        );
    }
    let _ = writeln!(
        out,
        " neighbor {address} timers {} {}",
        peer.keepalive_time.as_secs(),
        peer.hold_time.as_secs()
    );
    match session.password() {
        None => {}
        Some(secret) => match context.passwords.get(secret) {
            Some(password) => {
                let _ = writeln!(out, " neighbor {address} password {password}");
            }
            None => {
                let _ = writeln!(out, " neighbor {address} shutdown");
            }
        },
    }
}

/// The prefixes a peer gets, grouped by the attributes they carry.
fn groups(desired: &DesiredSpeaker, peer: &str) -> BTreeMap<Attributes, BTreeSet<IpNet>> {
    let mut groups: BTreeMap<Attributes, BTreeSet<IpNet>> = BTreeMap::new();
    for (prefix, route) in &desired.routes {
        if let Some(attributes) = route.peers.get(peer) {
            groups
                .entry(attributes.clone())
                .or_default()
                .insert(*prefix);
        }
    }
    groups
}

fn family_of(address: IpAddr) -> &'static str {
    if address.is_ipv4() { "ipv4" } else { "ipv6" }
}

fn render_policy(out: &mut String, desired: &DesiredSpeaker, session: &Session) {
    let peer = frr_name(&session.peer.name);
    let v4 = session.peer.address.is_ipv4();
    let mut entries = Vec::new();
    for (index, (attributes, prefixes)) in groups(desired, &session.peer.name).iter().enumerate() {
        let prefixes: Vec<&IpNet> = prefixes
            .iter()
            .filter(|prefix| matches!(prefix, IpNet::V4(_)) == v4)
            .collect();
        if prefixes.is_empty() {
            continue;
        }
        let sequence = index + 1;
        let (list_kind, suffix) = if v4 { ("ip", "V4") } else { ("ipv6", "V6") };
        let list = format!("KLB-{peer}-{sequence}-{suffix}");
        for (seq, prefix) in prefixes.iter().enumerate() {
            let _ = writeln!(
                out,
                "{list_kind} prefix-list {list} seq {} permit {prefix}",
                seq + 1
            );
        }
        entries.push((sequence, list_kind, list, attributes.clone()));
    }
    if !entries.is_empty() {
        out.push_str("!\n");
    }
    let _ = writeln!(out, "route-map KLB-{peer}-IN deny 1\nexit\n!");
    for (sequence, list_kind, list, attributes) in entries {
        let _ = writeln!(out, "route-map KLB-{peer}-OUT permit {sequence}");
        let _ = writeln!(out, " match {list_kind} address prefix-list {list}");
        if !attributes.communities.is_empty() {
            let communities: Vec<String> = attributes
                .communities
                .iter()
                .map(|c| format!("{}:{}", c.0, c.1))
                .collect();
            let _ = writeln!(out, " set community {} additive", communities.join(" "));
        }
        if !attributes.large_communities.is_empty() {
            let communities: Vec<String> = attributes
                .large_communities
                .iter()
                .map(|c| format!("{}:{}:{}", c.0, c.1, c.2))
                .collect();
            let _ = writeln!(
                out,
                " set large-community {} additive",
                communities.join(" ")
            );
        }
        if let Some(local_pref) = attributes.local_pref {
            let _ = writeln!(out, " set local-preference {local_pref}");
        }
        let _ = writeln!(out, "exit\n!");
    }
    let _ = writeln!(out, "route-map KLB-{peer}-OUT deny 65535\nexit\n!");
}

/// The complete `frr.conf` for `desired`.
pub fn render(desired: &DesiredSpeaker, context: &RenderContext) -> String {
    let mut out = String::new();
    out.push_str("frr defaults datacenter\n");
    if !context.hostname.is_empty() {
        let _ = writeln!(out, "hostname {}", frr_name(&context.hostname));
    }
    out.push_str("log stdout informational\nbgp route-map delay-timer 0\n!\n");

    let mut profiles: Vec<&BfdProfile> = desired
        .sessions
        .iter()
        .filter_map(|session| session.bfd.as_ref())
        .collect();
    profiles.sort_by(|a, b| a.name.cmp(&b.name));
    profiles.dedup_by(|a, b| a.name == b.name);
    if !profiles.is_empty() {
        out.push_str("bfd\n");
        for profile in profiles {
            render_bfd_profile(&mut out, profile);
        }
        out.push_str("exit\n!\n");
    }

    let Some(first) = desired.sessions.first() else {
        return out;
    };
    let router_asn = first.peer.local_asn;
    debug_assert_eq!(instance_asn(desired), Some(router_asn));
    let _ = writeln!(out, "router bgp {router_asn}");
    if let Some(router_id) = desired.router_id {
        let _ = writeln!(out, " bgp router-id {router_id}");
    }
    out.push_str(" no bgp default ipv4-unicast\n no bgp network import-check\n");
    // No graceful restart: a router that sees this node's session fail must drop its routes at
    // once, not keep them as stale for the restart time (120 s) while the node is gone. A
    // restarting proxy needs none: FRR keeps the sessions, and the dead man's switch withdraws.
    out.push_str(" bgp graceful-restart-disable\n");
    for session in &desired.sessions {
        render_neighbor(&mut out, session, router_asn, context);
    }
    out.push_str(" !\n");
    for family in ["ipv4", "ipv6"] {
        let sessions: Vec<&Session> = desired
            .sessions
            .iter()
            .filter(|s| family_of(s.peer.address) == family)
            .collect();
        let prefixes: Vec<&IpNet> = desired
            .routes
            .keys()
            .filter(|prefix| (family == "ipv4") == matches!(prefix, IpNet::V4(_)))
            .collect();
        if sessions.is_empty() {
            continue;
        }
        let _ = writeln!(out, " address-family {family} unicast");
        for prefix in prefixes {
            let _ = writeln!(out, "  network {prefix}");
        }
        for session in sessions {
            let address = session.peer.address;
            let peer = frr_name(&session.peer.name);
            let _ = writeln!(out, "  neighbor {address} activate");
            let _ = writeln!(out, "  neighbor {address} route-map KLB-{peer}-IN in");
            let _ = writeln!(out, "  neighbor {address} route-map KLB-{peer}-OUT out");
        }
        out.push_str(" exit-address-family\n");
    }
    out.push_str("exit\n!\n");
    for session in &desired.sessions {
        render_policy(&mut out, desired, session);
    }
    out
}

/// The commands that withdraw `prefixes` from the BGP instance of AS `asn` at once, for the
/// dead man's switch (`frr-reloader.sh` runs them with `vtysh -f` when the proxy's heartbeat
/// stops): `no network` per prefix, which sends the withdrawals on every session and keeps the
/// sessions (and BFD) up, so a restarted proxy is back in one reload. A prefix the daemon does
/// not have makes vtysh complain about that line and go on with the next.
pub fn withdrawal_commands(asn: Option<u32>, prefixes: &BTreeSet<IpNet>) -> String {
    let Some(asn) = asn else {
        return String::new();
    };
    let mut out = format!("router bgp {asn}\n");
    for family in ["ipv4", "ipv6"] {
        let lines: Vec<String> = prefixes
            .iter()
            .filter(|prefix| (family == "ipv4") == matches!(prefix, IpNet::V4(_)))
            .map(|prefix| format!("  no network {prefix}\n"))
            .collect();
        if lines.is_empty() {
            continue;
        }
        let _ = writeln!(out, " address-family {family} unicast");
        out.extend(lines);
        out.push_str(" exit-address-family\n");
    }
    out.push_str("exit\n");
    out
}

/// The AS of the BGP instance [`render`] writes for `desired` (the first session's local AS).
pub fn instance_asn(desired: &DesiredSpeaker) -> Option<u32> {
    desired
        .sessions
        .first()
        .map(|session| session.peer.local_asn)
}

#[cfg(test)]
mod tests;

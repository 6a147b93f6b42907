//! Our own small, comparable view of the GCE resources this provider manages. Both the desired
//! state and the observed state use these types, so the planner is a plain comparison; the
//! client converts to and from the SDK models. References are canonical partial URLs
//! (`projects/<p>/regions/<r>/targetPools/<name>`), which the API accepts on input.

use std::collections::BTreeSet;
use std::net::IpAddr;

/// The canonical form of a resource link: everything from `projects/` on.
pub fn canon(link: &str) -> String {
    link.find("projects/")
        .map_or(link, |idx| &link[idx..])
        .trim_end_matches('/')
        .to_string()
}

/// The last path segment of a link (the resource name).
pub fn link_name(link: &str) -> &str {
    link.rsplit('/').next().unwrap_or(link)
}

/// Builds canonical references for one project and region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refs {
    /// The project owning the load-balancer resources.
    pub project: String,
    /// The project owning the network (shared VPC host, or the same project).
    pub network_project: String,
    /// The region.
    pub region: String,
    /// The network name.
    pub network: String,
}

impl Refs {
    /// `projects/<p>/regions/<r>/<collection>/<name>`.
    pub fn regional(&self, collection: &str, name: &str) -> String {
        format!(
            "projects/{}/regions/{}/{collection}/{name}",
            self.project, self.region
        )
    }

    /// `projects/<p>/global/<collection>/<name>`.
    pub fn global(&self, collection: &str, name: &str) -> String {
        format!("projects/{}/global/{collection}/{name}", self.project)
    }

    /// `projects/<p>/zones/<z>/<collection>/<name>`.
    pub fn zonal(&self, zone: &str, collection: &str, name: &str) -> String {
        format!("projects/{}/zones/{zone}/{collection}/{name}", self.project)
    }

    /// The network.
    pub fn network(&self) -> String {
        format!(
            "projects/{}/global/networks/{}",
            self.network_project, self.network
        )
    }

    /// A subnetwork of the region in the network project.
    pub fn subnetwork(&self, name: &str) -> String {
        format!(
            "projects/{}/regions/{}/subnetworks/{name}",
            self.network_project, self.region
        )
    }
}

/// A regional address reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// Name.
    pub name: String,
    /// Description (JSON naming the Service).
    pub description: String,
    /// The IP; `None` on a desired address lets GCE choose.
    pub ip: Option<IpAddr>,
    /// `addressType: INTERNAL`.
    pub internal: bool,
    /// `networkTier` (external only).
    pub tier: Option<String>,
    /// Subnetwork (internal only).
    pub subnetwork: Option<String>,
}

/// Which ports a forwarding rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulePorts {
    /// `portRange: "low-high"` (target-pool rules).
    Range(u16, u16),
    /// `ports: [...]` (internal rules, at most 5).
    List(BTreeSet<u16>),
    /// `allPorts: true`.
    All,
}

/// A regional forwarding rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardingRule {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// `IPAddress`.
    pub ip: Option<IpAddr>,
    /// `IPProtocol` (`TCP` / `UDP`).
    pub protocol: String,
    /// The ports.
    pub ports: RulePorts,
    /// `target` (a target pool), for external rules.
    pub target: Option<String>,
    /// `backendService`, for internal rules.
    pub backend_service: Option<String>,
    /// `loadBalancingScheme: INTERNAL`.
    pub internal: bool,
    /// `network` (internal).
    pub network: Option<String>,
    /// `subnetwork` (internal).
    pub subnetwork: Option<String>,
    /// `networkTier` (external).
    pub tier: Option<String>,
    /// `allowGlobalAccess` (internal).
    pub global_access: bool,
    /// The fingerprint read back (needed to patch).
    pub fingerprint: Option<Vec<u8>>,
}

impl ForwardingRule {
    /// True when `self` (observed) serves what `wanted` asks for without re-creation.
    /// `allowGlobalAccess` is patchable and the description is informational, so neither
    /// counts; an unset wanted tier accepts any tier.
    pub fn serves(&self, wanted: &ForwardingRule) -> bool {
        self.internal == wanted.internal
            && self.protocol == wanted.protocol
            && self.ports == wanted.ports
            && self.target.as_deref().map(canon) == wanted.target.as_deref().map(canon)
            && self.backend_service.as_deref().map(canon)
                == wanted.backend_service.as_deref().map(canon)
            && (wanted.ip.is_none() || self.ip == wanted.ip)
            && (wanted.tier.is_none() || self.tier == wanted.tier)
            && (!wanted.internal
                || self.subnetwork.as_deref().map(canon) == wanted.subnetwork.as_deref().map(canon))
    }
}

/// A firewall rule with one `allowed` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Firewall {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Network.
    pub network: String,
    /// Allowed protocol (`tcp` / `udp`) and port ranges, merged and sorted.
    pub allowed: Vec<(String, Vec<(u16, u16)>)>,
    /// `sourceRanges`.
    pub source_ranges: BTreeSet<String>,
    /// `destinationRanges`.
    pub destination_ranges: BTreeSet<String>,
    /// `targetTags`.
    pub target_tags: BTreeSet<String>,
}

impl Firewall {
    /// True when the rule lets the same traffic through (description included, because it
    /// records the Service IP; compared as JSON where both are, so upstream's spelling of the
    /// same marks is not rewritten).
    pub fn same_as(&self, other: &Firewall) -> bool {
        let norm = |f: &Firewall| {
            let mut allowed: Vec<(String, Vec<(u16, u16)>)> = f
                .allowed
                .iter()
                .map(|(p, r)| (p.to_ascii_lowercase(), merge_ranges(r.clone())))
                .collect();
            allowed.sort();
            allowed
        };
        same_description(&self.description, &other.description)
            && canon(&self.network) == canon(&other.network)
            && norm(self) == norm(other)
            && self.source_ranges == other.source_ranges
            && self.destination_ranges == other.destination_ranges
            && self.target_tags == other.target_tags
    }
}

/// Two descriptions say the same: equal text, or equal JSON values (key order and spacing
/// aside: upstream writes `{"kubernetes.io/service-name":"ns/n", "kubernetes.io/service-ip":…}`,
/// kube-lb its keys sorted).
pub fn same_description(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    match (
        serde_json::from_str::<serde_json::Value>(a),
        serde_json::from_str::<serde_json::Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Merges overlapping or adjacent port ranges and sorts them.
pub fn merge_ranges(mut ranges: Vec<(u16, u16)>) -> Vec<(u16, u16)> {
    ranges.sort_unstable();
    let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
    for (low, high) in ranges {
        match merged.last_mut() {
            Some(last) if u32::from(low) <= u32::from(last.1) + 1 => last.1 = last.1.max(high),
            _ => merged.push((low, high)),
        }
    }
    merged
}

/// `"80"` / `"80-90"` to a range.
pub fn parse_range(text: &str) -> Option<(u16, u16)> {
    let (low, high) = text.split_once('-').unwrap_or((text, text));
    Some((low.trim().parse().ok()?, high.trim().parse().ok()?))
}

/// A range as the API writes it.
pub fn range_text((low, high): (u16, u16)) -> String {
    if low == high {
        low.to_string()
    } else {
        format!("{low}-{high}")
    }
}

/// Which health-check collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HealthCheckKind {
    /// `global/httpHealthChecks` (target pools).
    LegacyHttp,
    /// `global/healthChecks`, `type: HTTP` (backend services).
    Http,
}

impl HealthCheckKind {
    /// The collection segment.
    pub fn collection(self) -> &'static str {
        match self {
            HealthCheckKind::LegacyHttp => "httpHealthChecks",
            HealthCheckKind::Http => "healthChecks",
        }
    }
}

/// Probe timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `checkIntervalSec`.
    pub interval: i32,
    /// `timeoutSec`.
    pub timeout: i32,
    /// `healthyThreshold`.
    pub healthy: i32,
    /// `unhealthyThreshold`.
    pub unhealthy: i32,
}

/// The upstream defaults: 8 s interval, 1 s timeout, 1 healthy, 3 unhealthy.
pub const DEFAULT_TIMING: Timing = Timing {
    interval: 8,
    timeout: 1,
    healthy: 1,
    unhealthy: 3,
};

impl Timing {
    /// The upstream drift rule: values may only be raised, so an operator who lengthened an
    /// interval keeps it.
    pub fn raised_to(self, existing: Timing) -> Timing {
        Timing {
            interval: self.interval.max(existing.interval),
            timeout: self.timeout.max(existing.timeout),
            healthy: self.healthy.max(existing.healthy),
            unhealthy: self.unhealthy.max(existing.unhealthy),
        }
    }
}

/// An HTTP health check (legacy or new-style).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// Which collection.
    pub kind: HealthCheckKind,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Port probed on the nodes.
    pub port: u16,
    /// Request path.
    pub path: String,
    /// Timing.
    pub timing: Timing,
}

/// A target pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPool {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Instances (canonical links).
    pub instances: BTreeSet<String>,
    /// Legacy health checks (canonical links; at most one).
    pub health_checks: BTreeSet<String>,
    /// `NONE` or `CLIENT_IP`.
    pub session_affinity: String,
}

/// A regional backend service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendService {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// `TCP` / `UDP`.
    pub protocol: String,
    /// Health checks (canonical links).
    pub health_checks: BTreeSet<String>,
    /// Backend instance groups (canonical links).
    pub groups: BTreeSet<String>,
    /// `NONE` or `CLIENT_IP`.
    pub session_affinity: String,
    /// Fingerprint read back (required for updates).
    pub fingerprint: Option<Vec<u8>>,
}

impl BackendService {
    /// Same configuration (fingerprint and description ignored).
    pub fn same_as(&self, other: &BackendService) -> bool {
        self.protocol == other.protocol
            && self.session_affinity == other.session_affinity
            && self.health_checks == other.health_checks
            && self.groups == other.groups
    }
}

/// An unmanaged zonal instance group and its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceGroup {
    /// Zone.
    pub zone: String,
    /// Name.
    pub name: String,
    /// Member instances (canonical links).
    pub members: BTreeSet<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_links() {
        let cases = [
            (
                "https://compute.googleapis.com/compute/v1/projects/p/regions/r/targetPools/a",
                "projects/p/regions/r/targetPools/a",
            ),
            (
                "http://127.0.0.1:1/compute/v1/projects/p/global/firewalls/f/",
                "projects/p/global/firewalls/f",
            ),
            (
                "projects/p/zones/z/instances/i",
                "projects/p/zones/z/instances/i",
            ),
        ];
        for (link, want) in cases {
            assert_eq!(canon(link), want);
        }
        assert_eq!(link_name("projects/p/zones/z/instances/i"), "i");
    }

    #[test]
    fn ranges_merge() {
        let cases = [
            (vec![(80, 80), (443, 443)], vec![(80, 80), (443, 443)]),
            (vec![(81, 81), (80, 80), (82, 90)], vec![(80, 90)]),
            (vec![(1000, 2000), (1500, 1600)], vec![(1000, 2000)]),
            (vec![(65535, 65535), (65534, 65534)], vec![(65534, 65535)]),
            (vec![], vec![]),
        ];
        for (input, want) in cases {
            assert_eq!(merge_ranges(input.clone()), want, "{input:?}");
        }
        assert_eq!(parse_range("80-90"), Some((80, 90)));
        assert_eq!(parse_range("80"), Some((80, 80)));
        assert_eq!(parse_range("x"), None);
        assert_eq!(range_text((80, 80)), "80");
        assert_eq!(range_text((80, 81)), "80-81");
    }

    #[test]
    fn descriptions_compare_as_json() {
        let cases = [
            (r#"{"a":"1","b":"2"}"#, r#"{"b":"2","a":"1"}"#, true),
            (r#"{"a":"1", "b":"2"}"#, r#"{"a":"1","b":"2"}"#, true),
            (r#"{"a":"1","b":"2"}"#, r#"{"a":"1","b":"3"}"#, false),
            ("plain text", "plain text", true),
            ("plain text", "plain  text", false),
            ("", r#"{"a":"1"}"#, false),
        ];
        for (a, b, same) in cases {
            assert_eq!(same_description(a, b), same, "{a} vs {b}");
        }
    }

    #[test]
    fn timing_only_rises() {
        let existing = Timing {
            interval: 30,
            timeout: 1,
            healthy: 1,
            unhealthy: 1,
        };
        let merged = DEFAULT_TIMING.raised_to(existing);
        assert_eq!(
            merged,
            Timing {
                interval: 30,
                timeout: 1,
                healthy: 1,
                unhealthy: 3
            }
        );
    }
}

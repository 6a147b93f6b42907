//! `local` provider extension of the spec: what a Service asks of the address pools.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

/// An address family, as `spec.ipFamilies` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum IpFamily {
    /// `IPv4`.
    #[serde(rename = "IPv4")]
    V4,
    /// `IPv6`.
    #[serde(rename = "IPv6")]
    V6,
}

impl IpFamily {
    /// The family of `ip`.
    pub fn of(ip: IpAddr) -> Self {
        if ip.is_ipv4() {
            IpFamily::V4
        } else {
            IpFamily::V6
        }
    }

    /// The API spelling (`IPv4`, `IPv6`).
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::V4 => "IPv4",
            IpFamily::V6 => "IPv6",
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.ipFamilyPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Default)]
pub enum IpFamilyPolicy {
    /// One address, of the first family of `ipFamilies` (the API default).
    #[default]
    SingleStack,
    /// One address per family of `ipFamilies` that a pool can give; at least one.
    PreferDualStack,
    /// One address of each of two families, or none.
    RequireDualStack,
}

/// What a Service asks of the `local` provider's address pools.
///
/// `labels` and `allocated_from_pool` are inputs the allocator reads but not settings of the
/// load balancer: they are left out of the serialized spec (and so of `kube-lb lint` output
/// and the controller's change detection).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalSpec {
    /// Requested addresses, at most one per family, from `kube-lb.io/load-balancer-ips` (or
    /// its MetalLB alias) or `spec.loadBalancerIP`; empty lets the pool choose.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested_ips: Vec<IpAddr>,
    /// The pool named by `kube-lb.io/address-pool` (or its alias).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address_pool: Option<String>,
    /// The sharing key of `kube-lb.io/allow-shared-ip` (or its alias).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sharing_key: Option<String>,
    /// `spec.ipFamilyPolicy`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
    /// `spec.ipFamilies`, in order; empty when unset.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<IpFamily>,
    /// `metadata.labels` (pool `serviceSelectors` match on them).
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// The pool the controller wrote back in `kube-lb.io/ip-allocated-from-pool` (or
    /// MetalLB's key), which keeps the address attributed to its pool across restarts.
    #[serde(skip)]
    pub allocated_from_pool: Option<String>,
    /// `spec.selector`: Services sharing an address with `externalTrafficPolicy: Local` need
    /// the same one (their endpoints must be on the node announcing the address).
    #[serde(skip)]
    pub selector: BTreeMap<String, String>,
}

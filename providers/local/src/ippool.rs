//! The `kube-lb.io/v1alpha1` `IPPool` custom resource (cluster-scoped): its spec as stored,
//! and [`PoolDef`], the validated pool the allocator works with.
//!
//! Validation never fails a whole pool set: each pool keeps its valid entries, and what is
//! wrong (an entry that is not a CIDR or range, a selector with an unknown operator, a spec that
//! does not decode) is listed in [`PoolDef::problems`] for its status and an event. A pool whose
//! selectors are invalid serves no Service automatically (matching everyone would be the worse
//! mistake), but keeps the addresses it already gave.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::pool::IpRange;

/// API group of the custom resources.
pub const GROUP: &str = "kube-lb.io";
/// Version of `IPPool`.
pub const VERSION: &str = "v1alpha1";
/// Kind.
pub const KIND: &str = "IPPool";
/// Resource (plural) name.
pub const PLURAL: &str = "ippools";

fn yes() -> bool {
    true
}

/// `spec` of an `IPPool`, as stored (MetalLB's `IPAddressPool` shape).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IpPoolSpec {
    /// CIDRs (`192.168.10.0/24`, every address) or ranges (`192.168.9.1-192.168.9.5`), both
    /// families allowed in one pool.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Whether Services that name no pool and request no address may get one from here.
    #[serde(default = "yes")]
    pub auto_assign: bool,
    /// Never hand out IPv4 addresses ending in `.0` or `.255`.
    #[serde(default, rename = "avoidBuggyIPs")]
    pub avoid_buggy_ips: bool,
    /// Which Services the pool serves, and its priority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_allocation: Option<ServiceAllocation>,
}

impl Default for IpPoolSpec {
    fn default() -> Self {
        Self {
            addresses: Vec::new(),
            auto_assign: true,
            avoid_buggy_ips: false,
            service_allocation: None,
        }
    }
}

/// `spec.serviceAllocation`: pins a pool to namespaces and Services.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAllocation {
    /// Lower is tried first; pools without a priority come after all that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Namespaces served by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces served by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespace_selectors: Vec<LabelSelector>,
    /// Services served by label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_selectors: Vec<LabelSelector>,
}

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`, ANDed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Exact labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct LabelRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Why the selector cannot be evaluated, if it cannot.
    pub fn problem(&self) -> Option<String> {
        self.match_expressions.iter().find_map(|r| {
            match (r.operator.as_str(), r.values.is_empty()) {
                ("In" | "NotIn", false) | ("Exists" | "DoesNotExist", true) => None,
                ("In" | "NotIn", true) => Some(format!(
                    "matchExpressions key {:?}: operator {} needs values",
                    r.key, r.operator
                )),
                ("Exists" | "DoesNotExist", false) => Some(format!(
                    "matchExpressions key {:?}: operator {} takes no values",
                    r.key, r.operator
                )),
                (other, _) => Some(format!(
                    "matchExpressions key {:?}: unknown operator {other:?} (In, NotIn, Exists, \
                     DoesNotExist)",
                    r.key
                )),
            }
        })
    }

    /// True when `labels` satisfy every requirement (an empty selector matches everything).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// Something wrong with a pool, for its status and an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolProblem {
    /// An `addresses` entry that is neither a CIDR nor a range; it is ignored.
    InvalidEntry {
        /// The entry.
        entry: String,
    },
    /// A selector that cannot be evaluated; the pool serves no Service automatically.
    InvalidSelector {
        /// What is wrong.
        detail: String,
    },
    /// The spec does not decode at all; the pool has no addresses.
    InvalidSpec {
        /// The decoder's words.
        detail: String,
    },
    /// No valid address at all.
    NoAddresses,
}

impl std::fmt::Display for PoolProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolProblem::InvalidEntry { entry } => write!(
                f,
                "addresses entry {entry:?} is not a CIDR (10.0.0.0/24) or a range \
                 (10.0.0.10-10.0.0.20) of one family; ignored"
            ),
            PoolProblem::InvalidSelector { detail } => write!(
                f,
                "serviceAllocation: {detail}; the pool serves no Service until it is fixed"
            ),
            PoolProblem::InvalidSpec { detail } => write!(f, "spec does not decode: {detail}"),
            PoolProblem::NoAddresses => f.write_str("the pool has no valid address"),
        }
    }
}

/// One `addresses` entry: a CIDR (every address) or `FIRST-LAST`.
pub fn parse_entry(entry: &str) -> Option<IpRange> {
    let entry = entry.trim();
    if let Ok(net) = entry.parse::<IpNet>() {
        return Some(IpRange::whole_cidr(net));
    }
    let (first, last) = entry.split_once('-')?;
    let first: IpAddr = first.trim().parse().ok()?;
    let last: IpAddr = last.trim().parse().ok()?;
    IpRange::new(first, last)
}

/// A validated pool, as the allocator uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDef {
    /// `metadata.name`.
    pub name: String,
    /// The valid address ranges, in spec order.
    pub ranges: Vec<IpRange>,
    /// `spec.autoAssign`.
    pub auto_assign: bool,
    /// `spec.avoidBuggyIPs`.
    pub avoid_buggy_ips: bool,
    /// `spec.serviceAllocation`, when set.
    pub allocation: Option<ServiceAllocation>,
    /// What is wrong with it.
    pub problems: Vec<PoolProblem>,
    /// True for an `IPPool`, false for the `--local-pool` flag's pool.
    pub custom: bool,
}

impl PoolDef {
    /// Validates the spec of the `IPPool` named `name`.
    pub fn from_spec(name: &str, spec: &IpPoolSpec) -> Self {
        let mut problems = Vec::new();
        let mut ranges = Vec::new();
        for entry in &spec.addresses {
            match parse_entry(entry) {
                Some(range) => ranges.push(range),
                None => problems.push(PoolProblem::InvalidEntry {
                    entry: entry.clone(),
                }),
            }
        }
        if ranges.is_empty() {
            problems.push(PoolProblem::NoAddresses);
        }
        if let Some(allocation) = &spec.service_allocation {
            for selector in allocation
                .namespace_selectors
                .iter()
                .chain(&allocation.service_selectors)
            {
                if let Some(detail) = selector.problem() {
                    problems.push(PoolProblem::InvalidSelector { detail });
                }
            }
        }
        Self {
            name: name.to_string(),
            ranges,
            auto_assign: spec.auto_assign,
            avoid_buggy_ips: spec.avoid_buggy_ips,
            allocation: spec.service_allocation.clone(),
            problems,
            custom: true,
        }
    }

    /// Validates an `IPPool`'s `spec` as JSON: a spec that does not decode gives a pool with no
    /// address and the decoder's message, never an error for the whole set.
    pub fn from_json(name: &str, spec: &serde_json::Value) -> Self {
        match serde_json::from_value::<IpPoolSpec>(spec.clone()) {
            Ok(spec) => Self::from_spec(name, &spec),
            Err(error) => Self {
                name: name.to_string(),
                ranges: Vec::new(),
                auto_assign: false,
                avoid_buggy_ips: false,
                allocation: None,
                problems: vec![PoolProblem::InvalidSpec {
                    detail: error.to_string(),
                }],
                custom: true,
            },
        }
    }

    /// The `--local-pool` flag's pool, named `name`: automatic, for every Service.
    pub fn fallback(name: &str, ranges: &[IpRange]) -> Self {
        Self {
            name: name.to_string(),
            ranges: ranges.to_vec(),
            auto_assign: true,
            avoid_buggy_ips: false,
            allocation: None,
            problems: Vec::new(),
            custom: false,
        }
    }

    /// True when an address of the pool may be handed out: inside a range, and not a `.0`
    /// or `.255` when `avoidBuggyIPs` is set.
    pub fn usable(&self, ip: IpAddr) -> bool {
        self.contains(ip) && !(self.avoid_buggy_ips && crate::pool::is_buggy(ip))
    }

    /// True when `ip` is inside one of the ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(ip))
    }

    /// The priority used to order automatic pools: set ones by value, then unset ones.
    pub fn priority(&self) -> (bool, i32) {
        match self.allocation.as_ref().and_then(|a| a.priority) {
            Some(p) => (false, p),
            None => (true, 0),
        }
    }

    fn selectors_valid(&self) -> bool {
        !self
            .problems
            .iter()
            .any(|p| matches!(p, PoolProblem::InvalidSelector { .. }))
    }

    /// True when the pool serves a Service in `namespace` (with `namespace_labels`) labelled
    /// `service_labels`. Named namespaces and namespace selectors are alternatives; Service
    /// selectors must match as well.
    pub fn serves(
        &self,
        namespace: &str,
        namespace_labels: &BTreeMap<String, String>,
        service_labels: &BTreeMap<String, String>,
    ) -> bool {
        if !self.selectors_valid() {
            return false;
        }
        let Some(allocation) = &self.allocation else {
            return true;
        };
        let namespace_ok = (allocation.namespaces.is_empty()
            && allocation.namespace_selectors.is_empty())
            || allocation.namespaces.iter().any(|n| n == namespace)
            || allocation
                .namespace_selectors
                .iter()
                .any(|s| s.matches(namespace_labels));
        let service_ok = allocation.service_selectors.is_empty()
            || allocation
                .service_selectors
                .iter()
                .any(|s| s.matches(service_labels));
        namespace_ok && service_ok
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn entries_and_problems() {
        // (spec, ranges, problems)
        let cases = [
            (
                json!({"addresses": ["10.0.0.0/30", "10.0.1.1-10.0.1.2", "fd00::/127"]}),
                vec!["10.0.0.0-10.0.0.3", "10.0.1.1-10.0.1.2", "fd00::-fd00::1"],
                vec![],
            ),
            (
                json!({"addresses": ["10.0.0.0/30", "banana", "10.0.0.9-10.0.0.1"]}),
                vec!["10.0.0.0-10.0.0.3"],
                vec!["\"banana\"", "\"10.0.0.9-10.0.0.1\""],
            ),
            (
                json!({"addresses": ["10.0.0.1-fd00::1"]}),
                vec![],
                vec!["\"10.0.0.1-fd00::1\"", "no valid address"],
            ),
            (
                json!({"addresses": "10.0.0.0/24"}),
                vec![],
                vec!["does not decode"],
            ),
            (
                json!({"addresses": ["10.0.0.0/30"], "serviceAllocation": {
                    "serviceSelectors": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}}),
                vec!["10.0.0.0-10.0.0.3"],
                vec!["unknown operator \"Near\""],
            ),
        ];
        for (spec, ranges, problems) in cases {
            let pool = PoolDef::from_json("p", &spec);
            let got: Vec<String> = pool.ranges.iter().map(|r| r.to_string()).collect();
            assert_eq!(got, ranges, "{spec}");
            assert_eq!(
                pool.problems.len(),
                problems.len(),
                "{spec}: {:?}",
                pool.problems
            );
            for (problem, want) in pool.problems.iter().zip(problems) {
                assert!(problem.to_string().contains(want), "{problem} lacks {want}");
            }
        }
        let defaults = PoolDef::from_json("p", &json!({"addresses": ["10.0.0.1-10.0.0.2"]}));
        assert!(defaults.auto_assign && !defaults.avoid_buggy_ips);
    }

    #[test]
    fn scoping_by_namespace_and_service() {
        let pool = |allocation: serde_json::Value| {
            PoolDef::from_json(
                "p",
                &json!({"addresses": ["10.0.0.0/30"], "serviceAllocation": allocation}),
            )
        };
        let prod = labels(&[("env", "prod")]);
        let none = labels(&[]);
        let web = labels(&[("app", "web")]);
        // (allocation, namespace, namespace labels, service labels, serves)
        let cases = [
            (json!({}), "a", &none, &none, true),
            (json!({"namespaces": ["a"]}), "a", &none, &none, true),
            (json!({"namespaces": ["a"]}), "b", &none, &none, false),
            (
                json!({"namespaceSelectors": [{"matchLabels": {"env": "prod"}}]}),
                "b",
                &prod,
                &none,
                true,
            ),
            (
                json!({"namespaces": ["a"], "namespaceSelectors": [{"matchLabels": {"env": "prod"}}]}),
                "b",
                &none,
                &none,
                false,
            ),
            (
                json!({"serviceSelectors": [{"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}]}),
                "a",
                &none,
                &web,
                true,
            ),
            (
                json!({"namespaces": ["a"], "serviceSelectors": [{"matchLabels": {"app": "web"}}]}),
                "a",
                &none,
                &none,
                false,
            ),
            (
                json!({"serviceSelectors": [{"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}]}),
                "a",
                &none,
                &web,
                false,
            ),
            (
                json!({"serviceSelectors": [{"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}]}),
                "a",
                &none,
                &web,
                true,
            ),
            // An invalid selector serves nobody.
            (
                json!({"serviceSelectors": [{"matchExpressions": [{"key": "app", "operator": "In"}]}]}),
                "a",
                &none,
                &web,
                false,
            ),
        ];
        for (allocation, namespace, ns_labels, svc_labels, want) in cases {
            assert_eq!(
                pool(allocation.clone()).serves(namespace, ns_labels, svc_labels),
                want,
                "{allocation} {namespace}"
            );
        }
    }
}

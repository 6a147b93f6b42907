//! Service Topology (seed 002): ordered node-label keys that choose which endpoints a node uses.
//!
//! The keys arrive in one place, the annotation [`TOPOLOGY_KEYS_ANNOTATION`]: current typed
//! clients cannot see the removed `spec.topologyKeys` field, so whatever reads raw JSON lifts the
//! field into the annotation with [`kube_lb_annotations::lift_topology_keys`] — the proxy's watch
//! (for an API server of 1.17–1.21, which stores the field only), `lint` and `reconcile -f` — and
//! the embedded API server stores both, kept in step. They are read by
//! [`kube_lb_annotations::check_topology_keys`], the same function `lint` and the controller
//! use, so the proxy cannot accept a list lint refuses or the other way round.

use std::collections::BTreeMap;

pub use kube_lb_annotations::TopologyKeysError;
use kube_lb_annotations::check_topology_keys;

/// Annotation carrying the `topologyKeys` list, comma separated. Same key as the annotations
/// crate.
pub const TOPOLOGY_KEYS_ANNOTATION: &str = kube_lb_annotations::keys::common::TOPOLOGY_KEYS;

/// The catch-all key: any endpoint.
pub const ANY: &str = "*";

/// At most this many keys (seed 002).
pub const MAX_KEYS: usize = kube_lb_annotations::MAX_TOPOLOGY_KEYS;

/// Parses and validates the annotation's comma list; the first broken rule is the error (the
/// Service is then skipped: a list lint refuses must not route traffic).
pub fn parse_keys(raw: &str, external_local: bool) -> Result<Vec<String>, TopologyKeysError> {
    let (keys, problems) = check_topology_keys(raw, external_local);
    match problems.into_iter().next() {
        Some(problem) => Err(problem),
        None => Ok(keys.into_iter().map(String::from).collect()),
    }
}

/// Chooses endpoints by the first key that yields any (seed 002). `node_labels` are this node's
/// labels, `endpoint_labels` gives the labels of the node an endpoint runs on (None: unknown node).
/// An empty key list means no constraint. No match and no `"*"` yields nothing.
pub fn filter<'a, T>(
    keys: &[String],
    node_labels: &BTreeMap<String, String>,
    candidates: &'a [T],
    endpoint_labels: impl Fn(&T) -> Option<&'a BTreeMap<String, String>>,
) -> Vec<&'a T> {
    if keys.is_empty() {
        return candidates.iter().collect();
    }
    for key in keys {
        if key == ANY {
            return candidates.iter().collect();
        }
        let Some(wanted) = node_labels.get(key) else {
            continue;
        };
        let chosen: Vec<&T> = candidates
            .iter()
            .filter(|candidate| {
                endpoint_labels(candidate).and_then(|labels| labels.get(key)) == Some(wanted)
            })
            .collect();
        if !chosen.is_empty() {
            return chosen;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "kubernetes.io/hostname";
    const ZONE: &str = "topology.kubernetes.io/zone";
    const REGION: &str = "topology.kubernetes.io/region";

    fn keys(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The rules of seed 002 and of `kube-lb lint`, through the one shared reading.
    #[test]
    fn parsing_follows_the_seed_and_lint() {
        let many: Vec<String> = (0..17).map(|i| format!("example.com/k{i}")).collect();
        let cases: Vec<(String, bool, Result<Vec<String>, TopologyKeysError>)> = vec![
            (
                format!("{HOST},{ZONE},{REGION},*"),
                false,
                Ok(keys(&[HOST, ZONE, REGION, "*"])),
            ),
            (
                " kubernetes.io/hostname , * ".into(),
                false,
                Ok(keys(&[HOST, "*"])),
            ),
            ("*".into(), false, Ok(keys(&["*"]))),
            ("".into(), true, Ok(vec![])),
            (
                format!("*,{HOST}"),
                false,
                Err(TopologyKeysError::WildcardNotLast),
            ),
            (
                format!("{HOST},{HOST}"),
                false,
                Err(TopologyKeysError::Duplicate(HOST.into())),
            ),
            (HOST.into(), true, Err(TopologyKeysError::WithLocalPolicy)),
            (many.join(","), false, Err(TopologyKeysError::TooMany(17))),
            (many[..16].join(","), false, Ok(many[..16].to_vec())),
            (
                format!("{HOST},,*"),
                false,
                Err(TopologyKeysError::Empty(2)),
            ),
        ];
        for (raw, local, expected) in cases {
            assert_eq!(parse_keys(&raw, local), expected, "{raw:?} local={local}");
        }
        assert!(matches!(
            parse_keys("bad key", false),
            Err(TopologyKeysError::Invalid(_))
        ));
    }

    fn labels(host: &str, zone: &str, region: &str) -> BTreeMap<String, String> {
        [(HOST, host), (ZONE, zone), (REGION, region)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn first_matching_key_wins() {
        let nodes: BTreeMap<&str, BTreeMap<String, String>> = [
            ("a", labels("a", "z1", "r1")),
            ("b", labels("b", "z1", "r1")),
            ("c", labels("c", "z2", "r1")),
            ("d", labels("d", "z3", "r2")),
        ]
        .into_iter()
        .collect();
        // Endpoints named after the node they run on.
        let all = ["a", "b", "c", "d"];
        let pick = |node: &str, list: &[&str], endpoints: &[&'static str]| -> Vec<&'static str> {
            filter(&keys(list), &nodes[node], endpoints, |ep| nodes.get(*ep))
                .into_iter()
                .copied()
                .collect()
        };
        let chain = [HOST, ZONE, REGION, "*"];
        type Case<'a> = (&'a str, &'a [&'a str], &'a [&'static str], Vec<&'a str>);
        let table: Vec<Case> = vec![
            ("a", &chain, &all, vec!["a"]),
            ("a", &chain, &["b", "c", "d"], vec!["b"]),
            ("a", &chain, &["c", "d"], vec!["c"]),
            ("a", &chain, &["d"], vec!["d"]),
            ("a", &[HOST, ZONE, REGION], &["d"], vec![]),
            ("a", &[HOST], &["b"], vec![]),
            ("a", &[ZONE, "*"], &["c", "d"], vec!["c", "d"]),
            ("a", &[], &["c", "d"], vec!["c", "d"]),
            ("a", &["example.com/rack"], &all, vec![]),
            (
                "a",
                &["example.com/rack", "*"],
                &all,
                vec!["a", "b", "c", "d"],
            ),
        ];
        for (node, list, endpoints, expected) in table {
            assert_eq!(
                pick(node, list, endpoints),
                expected,
                "node {node} keys {list:?} eps {endpoints:?}"
            );
        }
    }
}

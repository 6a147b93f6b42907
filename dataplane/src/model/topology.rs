//! Service Topology (seed 002): ordered node-label keys that choose which endpoints a node uses.

use std::collections::BTreeMap;

/// Annotation carrying the `topologyKeys` list, comma separated, since current API servers drop
/// the alpha field. Same key as the annotations crate.
pub const TOPOLOGY_KEYS_ANNOTATION: &str = "service.kubernetes.io/topology-keys";

/// The catch-all key: any endpoint.
pub const ANY: &str = "*";

/// At most this many keys (seed 002).
pub const MAX_KEYS: usize = 16;

/// Why a `topologyKeys` list is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyKeysError {
    /// More than [`MAX_KEYS`] entries.
    #[error("at most {MAX_KEYS} topology keys are allowed, got {0}")]
    TooMany(usize),
    /// `"*"` somewhere other than last.
    #[error("\"*\" is only allowed as the last topology key")]
    WildcardNotLast,
    /// The same key twice.
    #[error("topology key {0:?} is listed twice")]
    Duplicate(String),
    /// An empty entry or one that is not a label key.
    #[error("topology key {0:?} is not a valid label key")]
    Invalid(String),
    /// Combined with `externalTrafficPolicy: Local`.
    #[error("topology keys cannot be combined with externalTrafficPolicy Local")]
    WithLocalPolicy,
}

/// Parses and validates the comma list of the annotation (or the field's entries joined).
pub fn parse_keys(raw: &str, external_local: bool) -> Result<Vec<String>, TopologyKeysError> {
    let keys: Vec<String> = raw
        .split(',')
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
        .collect();
    validate_keys(&keys, external_local)?;
    Ok(keys)
}

/// Applies the seed's constraints to an ordered key list.
pub fn validate_keys(keys: &[String], external_local: bool) -> Result<(), TopologyKeysError> {
    if keys.is_empty() {
        return Ok(());
    }
    if external_local {
        return Err(TopologyKeysError::WithLocalPolicy);
    }
    if keys.len() > MAX_KEYS {
        return Err(TopologyKeysError::TooMany(keys.len()));
    }
    for (index, key) in keys.iter().enumerate() {
        if key == ANY {
            if index + 1 != keys.len() {
                return Err(TopologyKeysError::WildcardNotLast);
            }
            continue;
        }
        if !is_label_key(key) {
            return Err(TopologyKeysError::Invalid(key.clone()));
        }
        if keys[..index].contains(key) {
            return Err(TopologyKeysError::Duplicate(key.clone()));
        }
    }
    Ok(())
}

/// `[prefix/]name`: prefix a DNS subdomain, name ≤ 63 of alphanumerics, `-`, `_`, `.`.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    let prefix_ok = prefix.is_none_or(|prefix| {
        !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            })
    });
    name_ok && prefix_ok
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

    #[test]
    fn validation_follows_the_seed() {
        let many: Vec<String> = (0..17).map(|i| format!("example.com/k{i}")).collect();
        let cases: Vec<(Vec<String>, bool, Result<(), TopologyKeysError>)> = vec![
            (keys(&[HOST, ZONE, REGION, "*"]), false, Ok(())),
            (keys(&["*"]), false, Ok(())),
            (keys(&[]), true, Ok(())),
            (
                keys(&["*", HOST]),
                false,
                Err(TopologyKeysError::WildcardNotLast),
            ),
            (
                keys(&[HOST, HOST]),
                false,
                Err(TopologyKeysError::Duplicate(HOST.into())),
            ),
            (keys(&[HOST]), true, Err(TopologyKeysError::WithLocalPolicy)),
            (many.clone(), false, Err(TopologyKeysError::TooMany(17))),
            (many[..16].to_vec(), false, Ok(())),
            (
                keys(&["bad key"]),
                false,
                Err(TopologyKeysError::Invalid("bad key".into())),
            ),
        ];
        for (list, local, expected) in cases {
            assert_eq!(
                validate_keys(&list, local),
                expected,
                "{list:?} local={local}"
            );
        }
    }

    #[test]
    fn annotation_is_a_trimmed_comma_list() {
        assert_eq!(
            parse_keys(" kubernetes.io/hostname , * ", false).unwrap(),
            keys(&[HOST, "*"])
        );
        assert!(parse_keys("*,kubernetes.io/hostname", false).is_err());
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

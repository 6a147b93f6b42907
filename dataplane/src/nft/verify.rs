//! Checking that the kernel still holds the table the backend last wrote (issue 37): someone ran
//! `nft delete table`, flushed a chain or deleted an element, and every ClusterIP of the node
//! was dead while `/healthz` said 200.
//!
//! One check is one `nft -j list table` per family, compared with what the backend committed:
//! - structure, against the committed model: every chain with as many rules as were written,
//!   no chain more, and every element container with as many elements. This is what catches a
//!   deleted table, a flushed chain, a deleted element or one added by hand, without rendering
//!   anything: the counts come from the committed [`Ruleset`] (map lengths), and the skeleton's
//!   few dozen lines are counted from its text;
//! - contents, against a fingerprint: a hash of every rule and element as the kernel lists them,
//!   taken at the first check that found the structure intact after a write. A later check
//!   with no write in between must see the same hash; this catches an element or rule replaced
//!   by one of another value (same counts).
//!
//! Cost: the listing is the kernel's whole table, O(elements), and `nft` is slow at it:
//! measured with nft 1.0.6 on this project's 2-core machine, a table of 200,000 map elements
//! (about 40,000 Services) took 6 s of CPU and 400 MB of RSS in `nft` (10 MB of JSON), whatever
//! the command (`-t`, `list set` and `list chain` fetch every element too). The proxy parses the
//! listing as a stream (each element hashed and dropped), so its own memory does not grow with
//! it. Hence two depths:
//! - the full check above runs after every change notification from someone else
//!   ([`super::monitor`], which sees deletions as they happen, whatever the table's size), and
//!   periodically every `--sync-period` × (elements / 20,000), at least once per sync period
//!   and at most once per ten (a table of 20,000 elements costs ~0.5 s: under 2 % of a core at
//!   the default 30 s);
//! - every other `--sync-period`, the chain check: `nft -j list chains <family>`, which lists no rule
//!   and no element (~10 ms at any size), so a deleted table or chain is found within one sync
//!   period even where the monitor cannot run.
//!
//! Neither runs after the backend's own writes.
//!
//! Not compared by count: `firewall-allow` and `cluster-cidrs` (interval sets: the kernel may
//! merge or split ranges) and `affinity` (the kernel adds and expires its elements as clients
//! come). They are in the fingerprint, except `affinity`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Deserialize;
use serde::de::{SeqAccess, Visitor};

use super::render::{ELEMENT_CONTAINERS, Family, Ruleset};

/// Containers whose element count is not compared (see the module docs).
const UNCOUNTED: [&str; 3] = ["firewall-allow", "cluster-cidrs", "affinity"];

/// Containers left out of the fingerprint: the kernel changes them itself.
const UNHASHED: [&str; 1] = ["affinity"];

/// Why a family's table was found to differ, most serious first. The label is the `reason` of
/// `kube_lb_dataplane_repairs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RepairReason {
    /// The table is gone.
    TableMissing,
    /// A chain the backend wrote is gone.
    ChainMissing,
    /// A chain holds fewer rules than were written (flushed, or rules deleted).
    RulesMissing,
    /// A set or map holds fewer elements than were written.
    ElementsMissing,
    /// Something was added, or replaced with something else.
    Changed,
}

impl RepairReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RepairReason::TableMissing => "table_missing",
            RepairReason::ChainMissing => "chain_missing",
            RepairReason::RulesMissing => "rules_missing",
            RepairReason::ElementsMissing => "elements_missing",
            RepairReason::Changed => "changed",
        }
    }
}

impl fmt::Display for RepairReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// What one table's check found different from what the backend last wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The table, e.g. `ip kube-lb` or `inet kube-lb-userspace`.
    pub table: String,
    /// The family whose table differs (the nftables backend restores per family; the
    /// userspace capture table, family `inet`, says V4).
    pub family: Family,
    /// The most serious difference.
    pub reason: RepairReason,
    /// Each difference in words, e.g. `chain nat-prerouting: 0 of 6 rules`.
    pub details: Vec<String>,
}

/// The counts a table must show: chain → rules, container → elements.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Expected {
    chains: BTreeMap<String, usize>,
    containers: BTreeMap<String, usize>,
}

impl Expected {
    /// What the kernel holds after writing `skeleton` (the text of [`super::render::skeleton`])
    /// and `ruleset`. `prefix` is `<family> <table>`.
    pub(crate) fn new(skeleton: &str, prefix: &str, ruleset: &Ruleset) -> Self {
        let mut expected = Expected::default();
        for line in skeleton.lines() {
            let mut words = line.split_whitespace();
            let (Some("add"), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let rest = words.collect::<Vec<_>>().join(" ");
            let Some(name) = rest
                .strip_prefix(prefix)
                .and_then(|rest| rest.split_whitespace().next())
            else {
                continue;
            };
            match kind {
                "chain" => {
                    expected.chains.entry(name.to_owned()).or_default();
                }
                "rule" => *expected.chains.entry(name.to_owned()).or_default() += 1,
                "set" | "map" => {
                    expected.containers.entry(name.to_owned()).or_default();
                }
                _ => {}
            }
        }
        for (chain, rules) in &ruleset.chains {
            expected.chains.insert(chain.clone(), rules.len());
        }
        // The skeleton declares every element container; a container holding elements that it
        // did not declare would be a renderer bug, and shows as missing.
        for (container, count) in &mut expected.containers {
            *count = ruleset.len_of(container);
        }
        for container in ELEMENT_CONTAINERS {
            if ruleset.len_of(container) > 0 {
                expected
                    .containers
                    .insert(container.to_owned(), ruleset.len_of(container));
            }
        }
        expected
    }

    /// `count` elements in `container` (a table whose elements are not a [`Ruleset`]).
    pub(crate) fn set_elements(&mut self, container: &str, count: usize) {
        self.containers.insert(container.to_owned(), count);
    }
}

/// One family's table as `nft -j list table` shows it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    chains: BTreeMap<String, usize>,
    containers: BTreeMap<String, usize>,
    /// Hash of every rule and element (see the module docs).
    pub(crate) fingerprint: u64,
}

/// `nft -j` output: `{"nftables": [{"metainfo": …}, {"table": …}, {"chain": …}, …]}`.
#[derive(Deserialize)]
struct Json {
    nftables: Vec<Item>,
}

/// One object of the listing; the kinds not named here (metainfo, table) are skipped.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Item {
    chain: Option<ChainJson>,
    rule: Option<RuleJson>,
    set: Option<SetJson>,
    map: Option<SetJson>,
}

#[derive(Deserialize)]
struct ChainJson {
    name: String,
    /// The table (in `list chains`, which lists every table's).
    #[serde(default)]
    table: String,
}

#[derive(Deserialize)]
struct RuleJson {
    chain: String,
    /// Hashed through its text; a rule is small.
    #[serde(default)]
    expr: serde_json::Value,
}

#[derive(Deserialize)]
struct SetJson {
    name: String,
    #[serde(default)]
    elem: Elements,
}

/// Count and order-independent hash of a container's elements, computed while parsing: at
/// 200,000 elements a parsed `Value` per element would cost hundreds of MB for one check.
#[derive(Default)]
struct Elements {
    count: usize,
    hash: u64,
}

impl<'de> Deserialize<'de> for Elements {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Counting;
        impl<'de> Visitor<'de> for Counting {
            type Value = Elements;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of set elements")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Elements, A::Error> {
                let mut elements = Elements::default();
                while let Some(element) = seq.next_element::<serde_json::Value>()? {
                    elements.count += 1;
                    // The kernel lists a hash set in its bucket order, which changes as it
                    // resizes: a sum does not depend on the order.
                    elements.hash = elements.hash.wrapping_add(hash_of(&element.to_string()));
                }
                Ok(elements)
            }
        }
        deserializer.deserialize_seq(Counting)
    }
}

fn hash_of(value: &impl Hash) -> u64 {
    // DefaultHasher::new() has fixed keys: the same text hashes the same for the life of
    // the process, which is all the fingerprint needs.
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Parses `nft -j list table` output.
pub(crate) fn parse(json: &str) -> Result<Listing, serde_json::Error> {
    let parsed: Json = serde_json::from_str(json)?;
    let mut listing = Listing::default();
    let mut fingerprint = DefaultHasher::new();
    for item in parsed.nftables {
        if let Some(chain) = item.chain {
            listing.chains.entry(chain.name).or_default();
        }
        if let Some(rule) = item.rule {
            (&rule.chain, rule.expr.to_string()).hash(&mut fingerprint);
            *listing.chains.entry(rule.chain).or_default() += 1;
        }
        for set in [item.set, item.map].into_iter().flatten() {
            if !UNHASHED.contains(&set.name.as_str()) {
                (&set.name, set.elem.count, set.elem.hash).hash(&mut fingerprint);
            }
            listing.containers.insert(set.name, set.elem.count);
        }
    }
    listing.fingerprint = fingerprint.finish();
    Ok(listing)
}

/// The chains of table `table` in a `nft -j list chains <family>` listing.
pub(crate) fn chains(json: &str, table: &str) -> Result<BTreeSet<String>, serde_json::Error> {
    let parsed: Json = serde_json::from_str(json)?;
    Ok(parsed
        .nftables
        .into_iter()
        .filter_map(|item| item.chain)
        .filter(|chain| chain.table == table)
        .map(|chain| chain.name)
        .collect())
}

/// [`compare`] of the chains only: `listed` holds the chain names the kernel lists for the
/// table (none: the table is gone, as the backend never writes a table without chains).
pub(crate) fn compare_chains(
    family: Family,
    table: &str,
    expected: &Expected,
    listed: &BTreeSet<String>,
) -> Option<Finding> {
    let finding = |reason, details| {
        Some(Finding {
            table: table.to_owned(),
            family,
            reason,
            details,
        })
    };
    if listed.is_empty() {
        return finding(RepairReason::TableMissing, vec![format!("table {table}")]);
    }
    let missing: Vec<String> = expected
        .chains
        .keys()
        .filter(|chain| !listed.contains(*chain))
        .map(|chain| format!("chain {chain}"))
        .collect();
    if !missing.is_empty() {
        return finding(RepairReason::ChainMissing, missing);
    }
    let extra: Vec<String> = listed
        .iter()
        .filter(|chain| !expected.chains.contains_key(*chain))
        .map(|chain| format!("chain {chain} not written"))
        .collect();
    if extra.is_empty() {
        None
    } else {
        finding(RepairReason::Changed, extra)
    }
}

/// What differs between what was written (`expected`, and the fingerprint `known` of an earlier
/// intact listing when there was no write since) and `listing` (`None`: the table is gone).
/// `table`: `<family> <name>`.
pub(crate) fn compare(
    family: Family,
    table: &str,
    expected: &Expected,
    listing: Option<&Listing>,
    known: Option<u64>,
) -> Option<Finding> {
    let Some(listing) = listing else {
        return Some(Finding {
            table: table.to_owned(),
            family,
            reason: RepairReason::TableMissing,
            details: vec![format!("table {table}")],
        });
    };
    let mut found: Vec<(RepairReason, String)> = Vec::new();
    for (chain, rules) in &expected.chains {
        match listing.chains.get(chain) {
            None => found.push((RepairReason::ChainMissing, format!("chain {chain}"))),
            Some(have) if have < rules => found.push((
                RepairReason::RulesMissing,
                format!("chain {chain}: {have} of {rules} rules"),
            )),
            Some(have) if have > rules => found.push((
                RepairReason::Changed,
                format!("chain {chain}: {have} rules, {rules} written"),
            )),
            Some(_) => {}
        }
    }
    for chain in listing.chains.keys() {
        if !expected.chains.contains_key(chain) {
            found.push((RepairReason::Changed, format!("chain {chain} not written")));
        }
    }
    for (container, elements) in &expected.containers {
        let counted = !UNCOUNTED.contains(&container.as_str());
        match listing.containers.get(container) {
            None => found.push((RepairReason::ChainMissing, format!("set {container}"))),
            Some(have) if counted && have < elements => found.push((
                RepairReason::ElementsMissing,
                format!("set {container}: {have} of {elements} elements"),
            )),
            Some(have) if counted && have > elements => found.push((
                RepairReason::Changed,
                format!("set {container}: {have} elements, {elements} written"),
            )),
            Some(_) => {}
        }
    }
    for container in listing.containers.keys() {
        if !expected.containers.contains_key(container) {
            found.push((
                RepairReason::Changed,
                format!("set {container} not written"),
            ));
        }
    }
    if found.is_empty() && known.is_some_and(|known| known != listing.fingerprint) {
        found.push((
            RepairReason::Changed,
            "rules or elements replaced since the last check".to_owned(),
        ));
    }
    let reason = found.iter().map(|(reason, _)| *reason).min()?;
    Some(Finding {
        table: table.to_owned(),
        family,
        reason,
        details: found.into_iter().map(|(_, detail)| detail).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKELETON: &str = "add table ip t\n\
        add map ip t service-groups { type ipv4_addr : mark; size 1024; }\n\
        add set ip t cluster-cidrs { type ipv4_addr; flags interval; }\n\
        add chain ip t nat-prerouting { type nat hook prerouting priority -100; policy accept; }\n\
        add rule ip t nat-prerouting meta mark set ip daddr map @service-groups\n\
        add rule ip t nat-prerouting return\n";

    fn ruleset() -> Ruleset {
        let mut ruleset = Ruleset::default();
        ruleset.insert("service-groups", "10.96.0.1".into(), Some("0x1000".into()));
        ruleset.insert("service-groups", "10.96.0.2".into(), Some("0x2000".into()));
        ruleset
            .chains
            .insert("rr_1".into(), vec!["numgen inc mod 2 vmap { }".into()]);
        ruleset
    }

    fn listing(elements: &[&str], prerouting_rules: usize, rr: bool) -> Listing {
        let mut items = vec![
            serde_json::json!({"metainfo": {"version": "1.0.6"}}),
            serde_json::json!({"table": {"family": "ip", "name": "t"}}),
            serde_json::json!({"map": {"name": "service-groups", "elem": elements}}),
            serde_json::json!({"set": {"name": "cluster-cidrs", "elem": [{"prefix": {"addr": "10.244.0.0", "len": 16}}]}}),
            serde_json::json!({"chain": {"name": "nat-prerouting"}}),
        ];
        for i in 0..prerouting_rules {
            items.push(serde_json::json!({"rule": {"chain": "nat-prerouting", "handle": i, "expr": [{"rule": i}]}}));
        }
        if rr {
            items.push(serde_json::json!({"chain": {"name": "rr_1"}}));
            items.push(serde_json::json!({"rule": {"chain": "rr_1", "expr": []}}));
        }
        let text = serde_json::json!({"nftables": items}).to_string();
        parse(&text).expect("listing parses")
    }

    fn check(listing: Option<&Listing>, known: Option<u64>) -> Option<Finding> {
        let expected = Expected::new(SKELETON, "ip t", &ruleset());
        compare(Family::V4, "ip t", &expected, listing, known)
    }

    #[test]
    fn an_intact_table_matches_and_keeps_its_fingerprint() {
        let intact = listing(&["10.96.0.1", "10.96.0.2"], 2, true);
        assert_eq!(check(Some(&intact), None), None);
        assert_eq!(check(Some(&intact), Some(intact.fingerprint)), None);
        // The kernel lists hash sets in any order: same fingerprint.
        let reordered = listing(&["10.96.0.2", "10.96.0.1"], 2, true);
        assert_eq!(reordered.fingerprint, intact.fingerprint);
    }

    #[test]
    fn each_kind_of_damage_is_named() {
        let cases = [
            (None, RepairReason::TableMissing, "table ip t"),
            (
                Some(listing(&["10.96.0.1", "10.96.0.2"], 0, true)),
                RepairReason::RulesMissing,
                "chain nat-prerouting: 0 of 2 rules",
            ),
            (
                Some(listing(&["10.96.0.1"], 2, true)),
                RepairReason::ElementsMissing,
                "set service-groups: 1 of 2 elements",
            ),
            (
                Some(listing(&["10.96.0.1", "10.96.0.2"], 2, false)),
                RepairReason::ChainMissing,
                "chain rr_1",
            ),
            (
                Some(listing(&["10.96.0.1", "10.96.0.2", "10.96.0.3"], 2, true)),
                RepairReason::Changed,
                "set service-groups: 3 elements, 2 written",
            ),
        ];
        for (listing, reason, detail) in cases {
            let finding = check(listing.as_ref(), None).expect("a difference");
            assert_eq!(finding.reason, reason, "{finding:?}");
            assert!(
                finding.details.iter().any(|d| d == detail),
                "{finding:?} should say {detail:?}"
            );
        }
    }

    #[test]
    fn the_chain_check_finds_deleted_tables_and_chains() {
        let expected = Expected::new(SKELETON, "ip t", &ruleset());
        let chains_of = |json: &str| super::chains(json, "t").expect("parses");
        let listing = |chains: &[(&str, &str)]| {
            let items: Vec<_> = chains
                .iter()
                .map(|(table, name)| serde_json::json!({"chain": {"family": "ip", "table": table, "name": name}}))
                .collect();
            chains_of(&serde_json::json!({"nftables": items}).to_string())
        };
        let check = |listed| compare_chains(Family::V4, "ip t", &expected, &listed);
        assert_eq!(
            check(listing(&[
                ("t", "nat-prerouting"),
                ("t", "rr_1"),
                ("u", "x")
            ])),
            None
        );
        let reason = |listed| check(listed).map(|finding| finding.reason);
        assert_eq!(
            reason(listing(&[("u", "nat-prerouting")])),
            Some(RepairReason::TableMissing)
        );
        assert_eq!(
            reason(listing(&[("t", "nat-prerouting")])),
            Some(RepairReason::ChainMissing)
        );
        assert_eq!(
            reason(listing(&[
                ("t", "nat-prerouting"),
                ("t", "rr_1"),
                ("t", "x")
            ])),
            Some(RepairReason::Changed)
        );
    }

    #[test]
    fn a_replaced_element_changes_the_fingerprint() {
        let intact = listing(&["10.96.0.1", "10.96.0.2"], 2, true);
        let replaced = listing(&["10.96.0.1", "10.96.0.9"], 2, true);
        assert_eq!(check(Some(&replaced), None), None, "counts alone agree");
        let finding = check(Some(&replaced), Some(intact.fingerprint)).expect("a difference");
        assert_eq!(finding.reason, RepairReason::Changed);
    }
}

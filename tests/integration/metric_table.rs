//! The metric reference in `docs/operations.md` against what the binaries export, both ways:
//! every family a running controller, proxy, Layer-2 announcer or BGP speaker exports is in the
//! table with its type and every label its samples carry, and every family of the table is
//! exported by the endpoint the table names. The check itself runs in
//! `monitoring::every_metric_the_alerts_and_dashboard_use_is_exported`, after its scenario;
//! this module parses the table and the expositions and compares them (pure, tested below).

use std::collections::{BTreeMap, BTreeSet};

/// The page holding the table, and the heading above it.
pub(crate) const PAGE: &str = "docs/operations.md";
const HEADING: &str = "## Metric reference";

/// One family as the table or an exposition describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MetricFamily {
    /// The sample name of a counter (with `_total`), the family name otherwise.
    pub(crate) name: String,
    /// `counter`, `gauge` or `histogram`.
    pub(crate) kind: String,
    /// Label names (`le` of a histogram's buckets left out).
    pub(crate) labels: BTreeSet<String>,
}

/// The table's rows: `| `name` | type | `label`, … or — | endpoint | meaning |`, keyed by
/// endpoint (`controller`, `proxy`, `announcer`, `speaker`).
pub(crate) fn documented(markdown: &str) -> Result<BTreeMap<String, Vec<MetricFamily>>, String> {
    let section = markdown
        .split_once(HEADING)
        .ok_or_else(|| format!("no '{HEADING}' heading"))?
        .1;
    // The section ends at the next heading of its level or above.
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rows: BTreeMap<String, Vec<MetricFamily>> = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [name, kind, labels, endpoint, _meaning] = cells[..] else {
            return Err(format!("a row needs 5 cells: {line}"));
        };
        let labels = if labels == "—" {
            BTreeSet::new()
        } else {
            labels
                .split(',')
                .map(|l| l.trim().trim_matches('`').to_string())
                .collect()
        };
        // One row may name several endpoints ("controller, proxy").
        for endpoint in endpoint.split(',').map(str::trim) {
            rows.entry(endpoint.to_string())
                .or_default()
                .push(MetricFamily {
                    name: name.trim_matches('`').to_string(),
                    kind: kind.to_string(),
                    labels: labels.clone(),
                });
        }
    }
    if rows.is_empty() {
        return Err(format!("no rows under '{HEADING}'"));
    }
    Ok(rows)
}

/// The families of a text exposition, by the name the table uses, with the labels their
/// samples carry.
pub(crate) fn exported(text: &str) -> BTreeMap<String, MetricFamily> {
    let mut families: BTreeMap<String, MetricFamily> = BTreeMap::new();
    // Sample names → the family's table name.
    let mut sample_names: BTreeMap<String, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let mut parts = declaration.split_whitespace();
            let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let name = if kind == "counter" && !family.ends_with("_total") {
                format!("{family}_total")
            } else {
                family.to_string()
            };
            let samples: Vec<String> = match kind {
                "counter" => vec![name.clone(), format!("{}_created", family)],
                "histogram" => ["_bucket", "_sum", "_count", "_created"]
                    .iter()
                    .map(|s| format!("{family}{s}"))
                    .collect(),
                _ => vec![family.to_string()],
            };
            for sample in samples {
                sample_names.insert(sample, name.clone());
            }
            families.insert(
                name.clone(),
                MetricFamily {
                    name,
                    kind: kind.to_string(),
                    labels: BTreeSet::new(),
                },
            );
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            let Some(family) = sample_names.get(&line[..end]) else {
                continue;
            };
            let labels = label_names(&line[end..]);
            if let Some(entry) = families.get_mut(family) {
                entry
                    .labels
                    .extend(labels.into_iter().filter(|l| l != "le"));
            }
        }
    }
    families
}

/// The label names of a sample line's `{…}` part (values may hold commas, `=`, escaped quotes).
fn label_names(rest: &str) -> Vec<String> {
    let Some(body) = rest.strip_prefix('{') else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut chars = body.chars().peekable();
    loop {
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let name = name.trim_start_matches(',').trim();
        if name.is_empty() || name.starts_with('}') {
            break;
        }
        names.push(name.to_string());
        // The quoted value.
        if chars.next() != Some('"') {
            break;
        }
        let mut escaped = false;
        for c in chars.by_ref() {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => break,
                _ => escaped = false,
            }
        }
        if chars.peek() == Some(&'}') {
            break;
        }
    }
    names
}

/// What differs between the table and the expositions, one line per difference.
pub(crate) fn compare(
    documented: &BTreeMap<String, Vec<MetricFamily>>,
    exported: &BTreeMap<String, BTreeMap<String, MetricFamily>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (endpoint, families) in exported {
        let rows: BTreeMap<&str, &MetricFamily> = documented
            .get(endpoint)
            .into_iter()
            .flatten()
            .map(|row| (row.name.as_str(), row))
            .collect();
        for (name, family) in families {
            let Some(row) = rows.get(name.as_str()) else {
                problems.push(format!(
                    "the {endpoint} exports {name} ({}, labels {:?}), not in the table",
                    family.kind, family.labels
                ));
                continue;
            };
            if row.kind != family.kind {
                problems.push(format!(
                    "{name}: the table says {}, the {endpoint} exports a {}",
                    row.kind, family.kind
                ));
            }
            let undocumented: Vec<_> = family.labels.difference(&row.labels).collect();
            if !undocumented.is_empty() {
                problems.push(format!(
                    "{name}: the {endpoint}'s samples carry labels {undocumented:?} the table does not list"
                ));
            }
        }
    }
    for (endpoint, rows) in documented {
        let Some(families) = exported.get(endpoint) else {
            problems.push(format!(
                "the table names an endpoint '{endpoint}' that was not scraped"
            ));
            continue;
        };
        for row in rows {
            if !families.contains_key(&row.name) {
                problems.push(format!(
                    "the table lists {} on the {endpoint}, which does not export it",
                    row.name
                ));
            }
        }
    }
    problems
}

#[test]
fn the_table_and_an_exposition_are_read_and_compared() {
    let page = "intro\n## Metric reference\n\n| name | type | labels | endpoint | meaning |\n|---|---|---|---|---|\n\
                | `a_calls_total` | counter | `op`, `kind` | controller | calls |\n\
                | `b_seconds` | histogram | — | controller | time |\n\
                | `c` | gauge | `x` | proxy | c |\n\
                | `gone` | gauge | — | proxy | never exported |\n\n## Next\n| `not_a_row` | gauge | — | proxy | x |\n";
    let table = documented(page).unwrap();
    assert_eq!(table["controller"].len(), 2);
    assert_eq!(
        table["proxy"].len(),
        2,
        "rows after the next heading are not read"
    );
    assert_eq!(
        table["controller"][0].labels,
        BTreeSet::from(["op".to_string(), "kind".to_string()])
    );

    let controller = exported(
        "# HELP a_calls Calls.\n# TYPE a_calls counter\na_calls_total{op=\"x,y=\\\"z\\\"\",kind=\"read\"} 1\n\
         # TYPE b_seconds histogram\nb_seconds_bucket{le=\"1\",extra=\"v\"} 0\nb_seconds_sum 0\n\
         # TYPE d gauge\nd 1\n",
    );
    assert_eq!(
        controller["a_calls_total"].labels,
        BTreeSet::from(["op".to_string(), "kind".to_string()]),
        "a value with a comma, '=' and escaped quotes is one label"
    );
    let proxy = exported("# TYPE c counter\nc_total{x=\"1\"} 2\n");
    let scraped = BTreeMap::from([
        ("controller".to_string(), controller),
        ("proxy".to_string(), proxy),
    ]);
    let problems = compare(&table, &scraped);
    let want = [
        "b_seconds: the controller's samples carry labels [\"extra\"] the table does not list",
        "the controller exports d (gauge, labels {}), not in the table",
        "the proxy exports c_total (counter, labels {\"x\"}), not in the table",
        "the table lists c on the proxy, which does not export it",
        "the table lists gone on the proxy, which does not export it",
    ];
    assert_eq!(problems.len(), want.len(), "{problems:#?}");
    for line in want {
        assert!(
            problems.iter().any(|p| p == line),
            "missing {line:?} in {problems:#?}"
        );
    }
}

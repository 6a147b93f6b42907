//! `deploy/components/monitoring/` against the binaries: every metric the alert rules and the
//! three Grafana dashboards query is exported on `/metrics` of a running `kube-lb controller`
//! (`kube_lb_*` names), `kube-lb proxy` (`kube_lb_proxy_*`, `kube_lb_dataplane_*`), the
//! proxy's Layer-2 announcer (`kube_lb_l2_*`) or its BGP speaker (`kube_lb_bgp_*`); the
//! PrometheusRule's `spec` passes
//! `promtool check rules` and its unit tests (`promtool test rules`), which test every alert;
//! each dashboard is valid JSON whose every panel queries something; `deploy/overlays/monitoring`
//! and a cloud overlay with the component render the PrometheusRule and one ConfigMap per
//! dashboard, labelled for Grafana's sidecar, unchanged.
//!
//! The names are read out of the PromQL expressions by one small tokenizer (strings, label
//! matchers, ranges, `by (...)`-style label lists, functions, keywords and numbers are dropped),
//! tested on its own below; the same function reads the rules and the dashboards.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::controller_support::{server, svc_lb};

/// The kustomize Component, the one home of the alert rules and the dashboards.
const COMPONENT: &str = "deploy/components/monitoring";
/// The shipped overlay that renders the component alone.
const OVERLAY: &str = "deploy/overlays/monitoring";
/// The PrometheusRule holding every alert; its `spec` is a plain Prometheus rule file.
const RULES: &str = "deploy/components/monitoring/prometheus-rule.yaml";
const RULE_TESTS: &str = "deploy/components/monitoring/prometheus-rule.test.yaml";
/// The name `RULE_TESTS` loads the rules under (its `rule_files:`).
const RULES_AS_FILE: &str = "prometheus-rule.rules.yaml";
/// Each dashboard: its file, its uid, and the ConfigMap the component renders it into.
const DASHBOARDS: &[Dashboard] = &[
    Dashboard {
        file: "deploy/components/monitoring/dashboards/controller.json",
        uid: "kube-lb-controller",
        config_map: "kube-lb-grafana-dashboard-controller",
    },
    Dashboard {
        file: "deploy/components/monitoring/dashboards/dataplane.json",
        uid: "kube-lb-dataplane",
        config_map: "kube-lb-grafana-dashboard-dataplane",
    },
    Dashboard {
        file: "deploy/components/monitoring/dashboards/bare-metal.json",
        uid: "kube-lb-bare-metal",
        config_map: "kube-lb-grafana-dashboard-bare-metal",
    },
];

/// One shipped Grafana dashboard.
struct Dashboard {
    file: &'static str,
    uid: &'static str,
    config_map: &'static str,
}

impl Dashboard {
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&read(self.file)).unwrap_or_else(|e| panic!("{}: {e}", self.file))
    }
}

/// How long the binaries may take to start, sync their informers and reconcile.
const CEILING: Duration = Duration::from_secs(60);

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

// ------------------------------------------------------------------ PromQL names

/// Clauses followed by a parenthesised list of label names, not of expressions.
const LABEL_LIST_CLAUSES: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// Words that are operators or literals, never metric names.
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Open,
    Close,
}

/// Replaces string literals, `{...}` label matchers and `[...]` ranges by spaces: none of them
/// can hold a metric name (a `{__name__="x"}` matcher is not used by the shipped files).
fn blank_literals_and_matchers(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut depth = 0usize;
    for c in expr.chars() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            out.push(' ');
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ if depth == 0 => {
                out.push(c);
                continue;
            }
            _ => {}
        }
        out.push(' ');
    }
    out
}

/// Identifiers and parentheses; numbers, durations, `$variables` and operators are dropped.
fn tokens(cleaned: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let chars: Vec<char> = cleaned.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '(' {
            out.push(Token::Open);
            i += 1;
        } else if c == ')' {
            out.push(Token::Close);
            i += 1;
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A variable, or a number / duration such as 1e-9, 0.99, 5m.
            i += 1;
            while i < chars.len() && (word(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if word(c) {
            let start = i;
            while i < chars.len() && word(chars[i]) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else {
            i += 1;
        }
    }
    out
}

/// The metric names an expression selects.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let all = tokens(&blank_literals_and_matchers(expr));
    // Drop `by (a, b)`-style clauses first, so `sum by (le) (x)` reads as the call `sum (x)`.
    let mut kept = Vec::new();
    let mut i = 0;
    while i < all.len() {
        if let Token::Ident(word) = &all[i]
            && LABEL_LIST_CLAUSES.contains(&word.as_str())
        {
            i += 1;
            if all.get(i) == Some(&Token::Open) {
                while i < all.len() && all[i] != Token::Close {
                    i += 1;
                }
                i += 1;
            }
            continue;
        }
        kept.push(all[i].clone());
        i += 1;
    }
    kept.iter()
        .enumerate()
        .filter_map(|(i, token)| match token {
            // A word followed by `(` is a function or an aggregation.
            Token::Ident(word)
                if kept.get(i + 1) != Some(&Token::Open)
                    && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) =>
            {
                Some(word.clone())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn metric_names_are_read_out_of_promql() {
    let cases: &[(&str, &[&str])] = &[
        ("up", &["up"]),
        ("kube_lb_leader == 0", &["kube_lb_leader"]),
        (
            "(sum(kube_lb_leader) or vector(0)) < 1",
            &["kube_lb_leader"],
        ),
        (
            r#"sum by (class, kind) (rate(kube_lb_reconcile_errors_total{class!="user",kind=~"a|b"}[10m]))
              / on() group_left() clamp_min(sum(rate(kube_lb_reconciles_total[10m])), 1e-9) > 0.1"#,
            &["kube_lb_reconcile_errors_total", "kube_lb_reconciles_total"],
        ),
        (
            "histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[$__rate_interval])))",
            &["x_seconds_bucket"],
        ),
        (
            "sum(rate(a_total[5m])) without (pod) unless b",
            &["a_total", "b"],
        ),
        ("time() - (ts_seconds > 0)", &["ts_seconds"]),
        (r#"count(m{l="sum(other)"} offset 5m == bool 0)"#, &["m"]),
        ("rate(x[5m:1m])", &["x"]),
        ("vector(1)", &[]),
    ];
    for (expr, want) in cases {
        let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
        assert_eq!(metric_names(expr), want, "{expr}");
    }
}

// ------------------------------------------------------------------ exposition names

/// Every sample name an exposition can hold: the samples present, and for every declared
/// family the names its samples take (`_total` of a counter, `_bucket`/`_sum`/`_count` of a
/// histogram), so a family with no sample yet (no throttled call so far) still counts as
/// exported.
fn exported_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declaration) = line.strip_prefix("# TYPE ") {
            let mut parts = declaration.split_whitespace();
            let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            names.insert(family.to_string());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count", "_created"],
                "summary" => &["_sum", "_count"],
                _ => &[],
            };
            for suffix in suffixes {
                if !family.ends_with(suffix) {
                    names.insert(format!("{family}{suffix}"));
                }
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

#[test]
fn exported_names_include_declared_families() {
    let text = "# HELP a_calls Calls.\n# TYPE a_calls counter\n\
                # TYPE a_seconds histogram\na_seconds_bucket{le=\"1\"} 0\n\
                # TYPE b_total counter\nb_total 3\n# TYPE c gauge\nc{x=\"y z\"} 1\n# EOF\n";
    let names = exported_names(text);
    for want in [
        "a_calls_total",
        "a_seconds_bucket",
        "a_seconds_sum",
        "a_seconds_count",
        "b_total",
        "c",
    ] {
        assert!(names.contains(want), "{want} missing from {names:?}");
    }
    assert!(!names.contains("b_total_total"), "{names:?}");
}

// ------------------------------------------------------------------ the shipped files

/// The `spec` of the PrometheusRule: `{groups: [...]}`, what Prometheus reads from a rule file.
fn rule_spec() -> serde_json::Value {
    let rule: serde_json::Value =
        serde_yaml_ng::from_str(&read(RULES)).unwrap_or_else(|e| panic!("{RULES}: {e}"));
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1", "{RULES}");
    assert_eq!(rule["kind"], "PrometheusRule", "{RULES}");
    let spec = rule["spec"].clone();
    assert!(spec["groups"].is_array(), "{RULES}: no spec.groups");
    spec
}

/// `(alert or record name, expression)` of every rule.
fn rule_expressions() -> Vec<(String, String)> {
    let rules = rule_spec();
    let groups = rules["groups"].as_array().expect("groups");
    let mut out = Vec::new();
    for group in groups {
        for rule in group["rules"].as_array().expect("rules of a group") {
            let name = rule["alert"]
                .as_str()
                .or(rule["record"].as_str())
                .expect("alert or record")
                .to_string();
            let expr = rule["expr"].as_str().expect("expr").to_string();
            out.push((name, expr));
        }
    }
    out
}

/// `(panel title, expression)` of every query of every panel, rows' nested panels included.
fn dashboard_expressions(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(panels: &[serde_json::Value], out: &mut Vec<(String, String)>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or("(untitled)").to_string();
            if panel["type"] != "row" {
                let targets = panel["targets"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                assert!(!targets.is_empty(), "panel {title:?} has no query");
                for target in targets {
                    let expr = target["expr"]
                        .as_str()
                        .unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
                    out.push((title.clone(), expr.to_string()));
                }
            }
            if let Some(nested) = panel["panels"].as_array() {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dashboard["panels"].as_array().expect("panels"), &mut out);
    out
}

#[test]
fn every_alert_carries_severity_summary_and_description() {
    let rules = rule_spec();
    let mut alerts = BTreeSet::new();
    let mut groups = BTreeSet::new();
    for group in rules["groups"].as_array().unwrap() {
        let group_name = group["name"].as_str().expect("group name");
        assert!(groups.insert(group_name), "group {group_name} twice");
        for rule in group["rules"].as_array().unwrap() {
            let Some(alert) = rule["alert"].as_str() else {
                continue;
            };
            // One copy of each alert: two rules of one name would page twice or disagree.
            assert!(alerts.insert(alert.to_string()), "{alert} defined twice");
            assert!(alert.starts_with("KubeLb"), "{alert}: not named KubeLb*");
            let severity = rule["labels"]["severity"].as_str();
            assert!(
                matches!(severity, Some("warning" | "critical")),
                "{alert}: severity {severity:?}"
            );
            for annotation in ["summary", "description"] {
                let text = rule["annotations"][annotation].as_str().unwrap_or_default();
                assert!(text.len() > 20, "{alert}: {annotation} {text:?}");
            }
        }
    }
    // The alerts issue 19 asks for, one per failure an operator must hear about.
    for want in [
        "KubeLbReconcileErrorsRising",
        "KubeLbServiceLoadBalancerNotReady",
        "KubeLbCloudThrottled",
        "KubeLbLeakedCloudResources",
        "KubeLbProxySyncFailing",
        "KubeLbProxyRulesStale",
        "KubeLbNoLeader",
        // And those issue 39 adds: proxies that never synced, the Layer-2 announcer, the audit,
        // the local provider's pools, cloud calls that keep failing.
        "KubeLbProxyNeverSynced",
        "KubeLbL2LeaseRenewalFailing",
        "KubeLbL2AnnouncerDown",
        "KubeLbAuditStale",
        "KubeLbIpPoolUsageHigh",
        "KubeLbIpPoolUsageCritical",
        "KubeLbIpPoolExhausted",
        "KubeLbCloudCallsFailing",
        // And those of BGP announcement (issue 38): sessions, BFD, prefixes not sent, FRR
        // refusing the configuration, invalid BGP objects.
        "KubeLbBgpSessionDown",
        "KubeLbBgpBfdDown",
        "KubeLbBgpPrefixesNotAdvertised",
        "KubeLbBgpConfigReloadFailing",
        "KubeLbBgpConfigProblems",
    ] {
        assert!(alerts.contains(want), "{want} missing from {alerts:?}");
    }
}

/// The alerts of the rule file.
fn alert_names() -> BTreeSet<String> {
    let rules = rule_spec();
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|group| group["rules"].as_array().expect("rules").iter())
        .filter_map(|rule| rule["alert"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn every_alert_has_a_unit_test_that_fires_it() {
    let tests: serde_json::Value =
        serde_yaml_ng::from_str(&read(RULE_TESTS)).unwrap_or_else(|e| panic!("{RULE_TESTS}: {e}"));
    let mut fired = BTreeSet::new();
    let mut tested = BTreeSet::new();
    for test in tests["tests"].as_array().expect("tests") {
        for case in test["alert_rule_test"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
        {
            let name = case["alertname"].as_str().expect("alertname").to_string();
            let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            if fires {
                fired.insert(name.clone());
            }
            tested.insert(name);
        }
    }
    let alerts = alert_names();
    // A test of a name no rule has would pass on nothing (promtool expects no alert of it).
    let unknown: Vec<_> = tested.difference(&alerts).collect();
    assert!(
        unknown.is_empty(),
        "{RULE_TESTS} tests no such alert: {unknown:?}"
    );
    let untested: Vec<_> = alerts.difference(&fired).collect();
    assert!(
        untested.is_empty(),
        "no case of {RULE_TESTS} expects these alerts to fire: {untested:?}"
    );
}

#[test]
fn dashboards_are_valid_json_with_a_datasource_variable() {
    let mut uids = BTreeSet::new();
    for shipped in DASHBOARDS {
        let file = shipped.file;
        let dashboard = shipped.json();
        assert_eq!(dashboard["uid"], shipped.uid, "{file}");
        assert!(
            uids.insert(shipped.uid),
            "{file}: uid {} twice",
            shipped.uid
        );
        assert!(dashboard["title"].is_string(), "{file}");
        let variables = dashboard["templating"]["list"]
            .as_array()
            .expect("templating");
        assert!(
            variables
                .iter()
                .any(|v| v["type"] == "datasource" && v["name"] == "datasource"),
            "{file}: {variables:?}"
        );
        // Every panel reads the chosen data source, not one of the author's Grafana.
        let panels = dashboard["panels"].as_array().expect("panels");
        for panel in panels.iter().filter(|p| p["type"] != "row") {
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{file}: panel {}",
                panel["title"]
            );
        }
        let queries = dashboard_expressions(&dashboard);
        assert!(queries.len() >= 8, "{file}: {queries:?}");
        for (title, expr) in &queries {
            assert!(
                !metric_names(expr).is_empty(),
                "{file}: panel {title:?}: no metric in {expr:?}"
            );
        }
    }
}

/// `promtool` from Debian's `prometheus` package (.ci/run installs it). Missing: a failure
/// under CI, a loud skip elsewhere.
fn promtool() -> Option<&'static str> {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but promtool is missing (apt-get install prometheus)"
        );
        eprintln!("SKIPPED: promtool not found (apt-get install prometheus)");
    }
    found.then_some("promtool")
}

#[test]
fn rule_file_passes_promtool_check_and_unit_tests() {
    let Some(promtool) = promtool() else {
        return;
    };
    // promtool reads plain rule files: the PrometheusRule's spec, written where the unit
    // tests' `rule_files:` expects it, beside a copy of the tests.
    let dir = tempfile::tempdir().unwrap();
    let spec = serde_yaml_ng::to_string(&rule_spec()).unwrap();
    std::fs::write(dir.path().join(RULES_AS_FILE), spec).unwrap();
    let tests = Path::new(RULE_TESTS).file_name().unwrap();
    std::fs::write(dir.path().join(tests), read(RULE_TESTS)).unwrap();
    let tests = tests.to_str().unwrap();
    for args in [["check", "rules", RULES_AS_FILE], ["test", "rules", tests]] {
        let output = Command::new(promtool)
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// `kubectl` (its built-in kustomize renders the overlays). Missing: a failure under CI, a
/// loud skip elsewhere.
pub(crate) fn kubectl() -> Option<&'static str> {
    let found = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !found {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but kubectl is missing"
        );
        eprintln!("SKIPPED: kubectl not found");
    }
    found.then_some("kubectl")
}

/// `to` as a path relative to the directory `from`: kustomize refuses absolute paths in
/// `resources:` and `components:`.
pub(crate) fn relative(from: &Path, to: &Path) -> PathBuf {
    let from = from.canonicalize().unwrap();
    let to = to.canonicalize().unwrap();
    let common = from
        .components()
        .zip(to.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for part in to.components().skip(common) {
        out.push(part);
    }
    out
}

/// The objects `kubectl kustomize dir` renders.
pub(crate) fn kustomize(kubectl: &str, dir: &Path) -> Vec<serde_json::Value> {
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered = String::from_utf8(output.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&rendered)
        .map(|doc| <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap())
        .collect()
}

/// What the component must add to a rendering: the PrometheusRule exactly as promtool checked
/// it, and each dashboard in its own ConfigMap labelled for the Grafana chart's sidecar.
fn assert_renders_the_component(what: &str, objects: &[serde_json::Value]) {
    let find = |kind: &str, name: &str| {
        let found: Vec<_> = objects
            .iter()
            .filter(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{what}: {kind} {name} rendered {} times",
            found.len()
        );
        found[0]
    };

    let rule = find("PrometheusRule", "kube-lb-alerts");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1", "{what}");
    assert_eq!(rule["metadata"]["namespace"], "kube-lb-system", "{what}");
    assert_eq!(
        rule["spec"],
        rule_spec(),
        "{what}: rendered spec differs from {RULES}"
    );

    for shipped in DASHBOARDS {
        let config_map = find("ConfigMap", shipped.config_map);
        assert_eq!(
            config_map["metadata"]["namespace"], "kube-lb-system",
            "{what}"
        );
        // The label the Grafana chart's dashboard sidecar selects ConfigMaps by.
        assert_eq!(
            config_map["metadata"]["labels"]["grafana_dashboard"], "1",
            "{what}: {config_map}"
        );
        let data = config_map["data"].as_object().expect("ConfigMap data");
        assert_eq!(data.len(), 1, "{what}: {data:?}");
        let (key, json) = data.iter().next().unwrap();
        assert!(key.ends_with(".json"), "{what}: {key}");
        let rendered: serde_json::Value = serde_json::from_str(json.as_str().unwrap()).unwrap();
        assert_eq!(
            rendered,
            shipped.json(),
            "{what}: {} differs from {}",
            shipped.config_map,
            shipped.file
        );
    }
}

#[test]
fn the_monitoring_overlay_renders_the_rules_and_the_dashboards() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    let objects = kustomize(kubectl, &repo_file(OVERLAY));
    assert_renders_the_component(OVERLAY, &objects);
    // Nothing else: applied beside whichever overlay installed kube-lb, it must not change it.
    assert_eq!(objects.len(), 1 + DASHBOARDS.len(), "{objects:?}");
}

#[test]
fn a_cloud_overlay_with_the_component_renders_the_rules_and_the_dashboards() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    // A user's overlay: a shipped overlay plus the component, as docs/operations.md says.
    let dir = tempfile::tempdir().unwrap();
    let overlay = relative(dir.path(), &repo_file("deploy/overlays/bare-metal"));
    let component = relative(dir.path(), &repo_file(COMPONENT));
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources:\n  - {}\ncomponents:\n  - {}\n",
            overlay.display(),
            component.display()
        ),
    )
    .unwrap();
    let objects = kustomize(kubectl, dir.path());
    assert_renders_the_component("bare-metal + component", &objects);
    assert!(
        objects
            .iter()
            .any(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "kube-lb-controller"),
        "the overlay's own objects are gone: {objects:?}"
    );
}

// ------------------------------------------------------------------ the running binaries

/// A child process, killed when dropped so a failed assertion leaves nothing running.
struct Process {
    child: Child,
    log: PathBuf,
    metrics: String,
}

impl Process {
    fn start(mut command: Command, log: PathBuf, metrics: String) -> Process {
        command
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Process {
            child: command.spawn().unwrap(),
            log,
            metrics,
        }
    }

    /// Scrapes `/metrics` until `ready` holds for the text, failing with the log after
    /// [`CEILING`] or when the process exits.
    async fn scrape_until(&mut self, what: &str, ready: impl Fn(&str) -> bool) -> String {
        let url = self.metrics.clone();
        self.scrape_at_until(&url, what, ready).await
    }

    /// [`Process::scrape_until`] on another of the process's endpoints.
    async fn scrape_at_until(
        &mut self,
        url: &str,
        what: &str,
        ready: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = tokio::time::Instant::now() + CEILING;
        let mut last = String::new();
        loop {
            if let Ok(response) = reqwest::get(url).await
                && let Ok(text) = response.text().await
            {
                if ready(&text) {
                    return text;
                }
                last = text;
            }
            if let Some(exit) = self.child.try_wait().unwrap() {
                panic!("exited with {exit} before {what}:\n{}", self.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {what} after {CEILING:?}; last /metrics:\n{last}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    // The kernel picks a free port; nothing else on this loopback binds by number meanwhile.
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of the first sample line starting with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// Stand-ins for `nft` and `conntrack` on `PATH`: `nft` refuses every transaction, so the proxy
/// runs unprivileged, touches no ruleset of the machine, and reports refused syncs.
fn refusing_nft(dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, script) in [
        (
            "nft",
            "#!/bin/sh\ncat >/dev/null\necho 'Error: refused by the test stand-in' >&2\nexit 1\n",
        ),
        ("conntrack", "#!/bin/sh\nexit 0\n"),
    ] {
        let path = bin.join(name);
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = std::env::var("PATH").unwrap_or_default();
    format!("{}:{path}", bin.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_alerts_and_dashboard_use_is_exported() {
    let server = server().await;
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    // One Service the local pool serves, one it cannot (an address outside every pool).
    svc_lb("default", "web").create(&client).await;
    svc_lb("default", "outside")
        .lb_ip("192.0.2.10")
        .create(&client)
        .await;

    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
    command
        .env_remove("KUBE_LB_CLOUD")
        .env_remove("KUBE_LB_CLOUD_CONFIG")
        .args(["--log", "info", "controller", "--cloud", "local"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--leader-elect", "--leader-elect-namespace", "default"])
        .args(["--backoff-base", "200ms"])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    let mut controller = Process::start(
        command,
        dir.path().join("controller.log"),
        format!("http://127.0.0.1:{port}/metrics"),
    );

    let port = free_port();
    let l2_port = free_port();
    let bgp_port = free_port();
    let frr_dir = dir.path().join("frr");
    std::fs::create_dir_all(&frr_dir).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kube-lb"));
    command
        .env("PATH", refusing_nft(dir.path()))
        .args(["--log", "info", "proxy", "--node-name", "n1"])
        .args([
            "--mode",
            "nftables",
            "--nft-table",
            "kube-lb-monitoring-test",
        ])
        // No local address is in TEST-NET-1: no NodePort is bound, no sysctl is touched.
        .args(["--nodeport-addresses", "192.0.2.0/24"])
        .args(["--healthz-addr", &format!("127.0.0.1:{port}")])
        // The announcer serves its /metrics first, then finds no interface to answer on and
        // stops (logged; the proxy keeps running): its exporter is what is checked, and no
        // ARP/NDP reply leaves this machine.
        .args([
            "--l2-announce",
            "--l2-interface",
            "^kube-lb-test-no-such-link$",
        ])
        .args(["--l2-metrics-addr", &format!("127.0.0.1:{l2_port}")])
        .args(["--l2-lease-namespace", "default"])
        // The BGP speaker serves its /metrics at once; with no FRR beside it (nothing answers
        // in the directory, no VTY socket) its hand-overs time out and count as failed
        // reloads, and no session leaves this machine.
        .args(["--bgp", "--bgp-router-id", "192.0.2.1"])
        .args(["--bgp-metrics-addr", &format!("127.0.0.1:{bgp_port}")])
        .arg("--bgp-frr-conf-dir")
        .arg(&frr_dir)
        .arg("--bgp-frr-vty-dir")
        .arg(&frr_dir)
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    let mut proxy = Process::start(
        command,
        dir.path().join("proxy.log"),
        format!("http://127.0.0.1:{port}/metrics"),
    );

    // The pool gauges follow the local provider's allocator: "web" holds one IPv4 address.
    let pool_assigned_ipv4 = |text: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("kube_lb_ip_pool_addresses_assigned{"))
            .filter(|l| l.contains(r#"family="ipv4""#))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // What the alerts read, as the alerts expect it: this replica leads; one Service is ready
    // and the other is not; the pools report the address in use; the proxy counts its refused syncs and fails its health.
    let ready = |name: &str| {
        format!(
            r#"kube_lb_service_load_balancer_ready{{service_namespace="default",service_name="{name}"}}"#
        )
    };
    let controller_text = controller
        .scrape_until("leadership and both Services' readiness", |text| {
            sample(text, "kube_lb_leader") == Some(1.0)
                && sample(text, &ready("web")) == Some(1.0)
                && sample(text, &ready("outside")) == Some(0.0)
                && pool_assigned_ipv4(text) >= 1.0
        })
        .await;
    // Upstream's names for the same facts: the service controller configured "web"'s load
    // balancer, and MetalLB-style pool gauges show its address in use.
    assert!(
        sample(
            &controller_text,
            "service_controller_loadbalancer_sync_total"
        )
        .is_some_and(|n| n >= 1.0),
        "{controller_text}"
    );
    let in_use_ipv4: f64 = controller_text
        .lines()
        .filter(|l| {
            l.starts_with("kubelb_pool_addresses_in_use{") && l.contains(r#"family="ipv4""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(in_use_ipv4 >= 1.0, "{controller_text}");
    let proxy_text = proxy
        .scrape_until("a refused sync", |text| {
            sample(text, "kube_lb_proxy_sync_errors_total").is_some_and(|n| n >= 1.0)
                && sample(text, "kube_lb_proxy_healthy") == Some(0.0)
        })
        .await;

    let l2_text = proxy
        .scrape_at_until(
            &format!("http://127.0.0.1:{l2_port}/metrics"),
            "the Layer-2 announcer's metrics",
            |text| text.contains("# TYPE kube_lb_l2_live_nodes gauge"),
        )
        .await;

    let bgp_text = proxy
        .scrape_at_until(
            &format!("http://127.0.0.1:{bgp_port}/metrics"),
            "the BGP speaker's metrics",
            |text| text.contains("# TYPE kube_lb_bgp_session_up gauge"),
        )
        .await;

    let controller_names = exported_names(&controller_text);
    let proxy_names = exported_names(&proxy_text);
    let l2_names = exported_names(&l2_text);
    let bgp_names = exported_names(&bgp_text);
    // Every query of the rules and of every dashboard, read by the one tokenizer.
    let mut uses: Vec<(String, String)> = rule_expressions()
        .into_iter()
        .map(|(alert, expr)| (format!("{RULES}: {alert}"), expr))
        .collect();
    for shipped in DASHBOARDS {
        uses.extend(
            dashboard_expressions(&shipped.json())
                .into_iter()
                .map(|(panel, expr)| (format!("{}: {panel}", shipped.file), expr)),
        );
    }
    let mut missing = Vec::new();
    let mut checked = BTreeSet::new();
    for (place, expr) in uses {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{place}: no metric in {expr:?}");
        for name in names {
            let on_the_proxy = name.starts_with("kube_lb_proxy_")
                || name.starts_with("kube_lb_dataplane_")
                || name.starts_with("kubeproxy_");
            let (binary, exported) = if on_the_proxy {
                ("proxy", &proxy_names)
            } else if name.starts_with("kube_lb_l2_") {
                ("Layer-2 announcer", &l2_names)
            } else if name.starts_with("kube_lb_bgp_") {
                ("BGP speaker", &bgp_names)
            } else {
                ("controller", &controller_names)
            };
            if !exported.contains(&name) {
                missing.push(format!("{place}: {name} is not exported by the {binary}"));
            }
            checked.insert(name);
        }
    }
    assert!(
        missing.is_empty(),
        "{}\n\ncontroller /metrics:\n{controller_text}\nproxy /metrics:\n{proxy_text}\n\
         announcer /metrics:\n{l2_text}\nBGP speaker /metrics:\n{bgp_text}",
        missing.join("\n")
    );
    // Each alert's input is in the files: a tokenizer that found nothing would pass vacuously.
    for name in [
        "kube_lb_leader",
        "kube_lb_service_load_balancer_ready",
        "kube_lb_reconcile_errors_total",
        "kube_lb_cloud_throttled_total",
        "kube_lb_audit_leaked_resources",
        "kube_lb_proxy_sync_errors_total",
        "kube_lb_proxy_sync_pending_seconds",
        "kube_lb_proxy_last_sync_success_timestamp_seconds",
        "kube_lb_audit_last_success_timestamp_seconds",
        "kube_lb_l2_lease_renewal_failures_total",
        "kube_lb_l2_live_nodes",
        "kube_lb_l2_announcing",
        "kube_lb_ip_pool_addresses_assigned",
        "kube_lb_ip_pool_addresses_available",
        "kube_lb_dataplane_repairs_total",
        "kube_lb_bgp_session_up",
        "kube_lb_bgp_bfd_session_up",
        "kube_lb_bgp_desired_prefixes",
        "kube_lb_bgp_announced_prefixes_total",
        "kube_lb_bgp_config_reloads_total",
        "kube_lb_bgp_config_problems",
    ] {
        assert!(checked.contains(name), "{name} not used: {checked:?}");
    }

    // The metric reference, both ways, against what the four endpoints export.
    let table = crate::metric_table::documented(&read(crate::metric_table::PAGE))
        .unwrap_or_else(|e| panic!("{}: {e}", crate::metric_table::PAGE));
    let scraped = std::collections::BTreeMap::from([
        (
            "controller".to_string(),
            crate::metric_table::exported(&controller_text),
        ),
        (
            "proxy".to_string(),
            crate::metric_table::exported(&proxy_text),
        ),
        (
            "announcer".to_string(),
            crate::metric_table::exported(&l2_text),
        ),
        (
            "speaker".to_string(),
            crate::metric_table::exported(&bgp_text),
        ),
    ]);
    let problems = crate::metric_table::compare(&table, &scraped);
    assert!(
        problems.is_empty(),
        "{} differs from the binaries:\n{}",
        crate::metric_table::PAGE,
        problems.join("\n")
    );
}

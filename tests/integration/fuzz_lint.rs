//! Seeded, replayable fuzz suite for the manifest reader behind `kube-lb lint -f` (and
//! `reconcile -f`): [`kube_lb::cli::lint::lint_text`] in process for volume, and the real
//! binary as a subprocess for memory (peak RSS read from `/proc/<pid>/status` `VmHWM`), time
//! and output size on adversarial files.
//!
//! # How to run
//!
//! - CI: `kt -p kube-lb -E 'test(fuzz)'` (a few seconds per generated target).
//! - Longer: `KUBE_LB_FUZZ_SECS=600 kt -p kube-lb -E 'test(fuzz)'`.
//! - Replay: every run prints `KUBE_LB_FUZZ_SEED=<n>`; a failure prints the seed and the index
//!   of the failing case, and `KUBE_LB_FUZZ_SEED=<n> KUBE_LB_FUZZ_CASES=<index + 1>` replays it.
//!   Every case draws from its own generator (seed, index), so cases are independent.
//!
//! # Why a structure-aware generator rather than `cargo fuzz`
//!
//! `cargo fuzz` needs nightly, which cannot be installed here. For a YAML reader the deep
//! states are structural (a `kind: List` whose third item has one wrong-typed field among good
//! Services; an anchor referenced thousands of times; nesting one level past a limit), which
//! byte mutation reaches only after rediscovering YAML and the Service schema. This generator
//! starts from a committed corpus of real manifests (`tests/fuzz/corpus/manifests/`, plus
//! `examples/` and the fixtures), mixes documents, mutates values by type, and only then
//! damages text (truncation, deep nesting, alias bombs, tags, tabs, NUL). A failure is shrunk
//! (documents dropped, text halved) before it is printed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube_lb::cli::lint::{Report, Status, lint_text};
use kube_lb_annotations::Cloud;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Harness: seed, budget, per-case generators.

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|text| {
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number"))
    })
}

/// `KUBE_LB_FUZZ_SEED`; else seed 1 under `CI=true` (CI must be reproducible); else the clock.
fn master_seed() -> u64 {
    if std::env::var_os("CI").is_some_and(|v| v == "true") && env_u64("KUBE_LB_FUZZ_SEED").is_none()
    {
        return 1;
    }
    env_u64("KUBE_LB_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
    })
}

/// `KUBE_LB_FUZZ_SECS` (default 3).
fn budget() -> Duration {
    std::env::var("KUBE_LB_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(3), |s| {
            Duration::from_secs_f64(s.max(0.0))
        })
}

fn case_rng(seed: u64, index: u64) -> StdRng {
    StdRng::seed_from_u64(seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Runs `case(rng, index)` for the budget (or `KUBE_LB_FUZZ_CASES` cases); a case returns the
/// failure, already shrunk and described.
fn run_budget(name: &str, mut case: impl FnMut(&mut StdRng) -> Result<(), String>) {
    let seed = master_seed();
    let budget = budget();
    let limit = env_u64("KUBE_LB_FUZZ_CASES");
    eprintln!(
        "{name}: KUBE_LB_FUZZ_SEED={seed} KUBE_LB_FUZZ_SECS={}",
        budget.as_secs_f64()
    );
    let started = Instant::now();
    let mut index = 0u64;
    while match limit {
        Some(limit) => index < limit,
        None => index == 0 || started.elapsed() < budget,
    } {
        if let Err(why) = case(&mut case_rng(seed, index)) {
            panic!(
                "{name}: case {index} failed\nreplay: KUBE_LB_FUZZ_SEED={seed} KUBE_LB_FUZZ_CASES={}\n{why}",
                index + 1
            );
        }
        index += 1;
    }
    eprintln!(
        "{name}: {index} cases in {:?}, no failure",
        started.elapsed()
    );
}

fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

// ---------------------------------------------------------------------------------------------
// Corpus.

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml") {
            out.push(path);
        }
    }
}

/// Every document of the committed corpus, the examples and the cloud fixtures.
fn corpus() -> Vec<Value> {
    let mut files = Vec::new();
    for dir in [
        "tests/fuzz/corpus/manifests",
        "examples",
        "tests/fixtures/clouds",
    ] {
        yaml_files(&root().join(dir), &mut files);
    }
    files.sort();
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            if let Ok(value) = <Value as serde::Deserialize>::deserialize(doc)
                && value.is_object()
            {
                docs.push(value);
            }
        }
    }
    assert!(docs.len() >= 10, "corpus too small: {}", docs.len());
    docs
}

fn services(corpus: &[Value]) -> Vec<Value> {
    corpus
        .iter()
        .filter(|d| d["kind"] == "Service")
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Generation.

fn random_string(rng: &mut StdRng) -> String {
    const ODD: &[&str] = &[
        "",
        " ",
        "\u{0}",
        "\u{202e}x",
        "🚀",
        "e\u{301}",
        "\r\n",
        "\t",
        "\\",
        "\"",
        "'",
        "{",
        "[",
        "*a",
        "&a",
        "!!binary",
        "null",
        "~",
        "true",
        "0x1F",
        "1e400",
        "9999999999999999999999",
        "- x",
        "? x",
        ": x",
        "#x",
        "%YAML 1.1",
        "---",
        "...",
    ];
    match rng.random_range(0..4) {
        0 => ODD.choose(rng).copied().unwrap_or_default().to_owned(),
        1 => "a".repeat(rng.random_range(1..50_000)),
        2 => (0..rng.random_range(0..30))
            .map(|_| char::from_u32(rng.random_range(0..0x2_0000)).unwrap_or('x'))
            .collect(),
        _ => format!("x{}", rng.random::<u32>()),
    }
}

fn random_value(rng: &mut StdRng, depth: usize) -> Value {
    match rng.random_range(0..if depth > 3 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.random_bool(0.5)),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random::<f64>() * 1e12),
        4 => json!(u64::MAX),
        5 => Value::String(random_string(rng)),
        6 => Value::Array(
            (0..rng.random_range(0..5))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.random_range(0..5))
                .map(|i| (format!("k{i}"), random_value(rng, depth + 1)))
                .collect(),
        ),
    }
}

fn pointers(value: &Value, pointer: &str, out: &mut Vec<String>) {
    out.push(pointer.to_owned());
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                pointers(child, &format!("{pointer}/{escaped}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                pointers(child, &format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// One to four structural mutations anywhere in a document.
fn mutate(rng: &mut StdRng, doc: &mut Value) {
    for _ in 0..rng.random_range(1..=4) {
        let mut all = Vec::new();
        pointers(doc, "", &mut all);
        let Some(pointer) = all.choose(rng).cloned() else {
            return;
        };
        let replacement = random_value(rng, 0);
        let key: String = random_string(rng).chars().take(40).collect();
        let copies = rng.random_range(1..3000);
        let choice = rng.random_range(0..5);
        let Some(node) = doc.pointer_mut(&pointer) else {
            continue;
        };
        match choice {
            0 => *node = replacement,
            1 => {
                if let Value::Object(map) = node {
                    map.insert(key, replacement);
                }
            }
            2 => {
                if let Value::Array(items) = node
                    && let Some(first) = items.first().cloned()
                {
                    items.extend(std::iter::repeat_n(first, copies));
                }
            }
            3 => {
                if let Value::Object(map) = node
                    && let Some(first) = map.keys().next().cloned()
                {
                    map.remove(&first);
                }
            }
            _ => *node = Value::Null,
        }
    }
}

/// A generated input file.
#[derive(Debug, Clone)]
struct Input {
    /// Source name; `.json` selects the JSON reader.
    name: String,
    /// Documents, rendered by `render` (kept for shrinking).
    docs: Vec<Value>,
    /// Wrapped in one `kind: List`.
    as_list: bool,
    /// Text damage applied after rendering.
    damage: Option<Damage>,
}

#[derive(Debug, Clone)]
enum Damage {
    Truncate(usize),
    Insert(usize, String),
    DeepFlow(usize),
    DeepCompact(usize),
    DeepBlock(usize),
    AliasBomb(usize, usize),
    Laughs,
    Tags,
    Tabs,
}

fn render(input: &Input) -> String {
    let docs: Vec<Value> = if input.as_list {
        vec![json!({"apiVersion": "v1", "kind": "List", "items": input.docs})]
    } else {
        input.docs.clone()
    };
    let mut text = if input.name.ends_with(".json") {
        docs.first()
            .map(|d| serde_json::to_string_pretty(d).unwrap())
            .unwrap_or_default()
    } else {
        docs.iter()
            .map(|d| serde_yaml_ng::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n")
    };
    match &input.damage {
        None => {}
        Some(Damage::Truncate(at)) => {
            let mut at = (*at).min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.truncate(at);
        }
        Some(Damage::Insert(at, what)) => {
            let mut at = (*at).min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            text.insert_str(at, what);
        }
        Some(Damage::DeepFlow(n)) => {
            text.push_str(&format!("---\n{}1{}\n", "{a: ".repeat(*n), "}".repeat(*n)));
        }
        Some(Damage::DeepCompact(n)) => {
            text.push_str(&format!("---\n{}x\n", "- ".repeat(*n)));
        }
        Some(Damage::DeepBlock(n)) => {
            text.push_str("---\n");
            for i in 0..*n {
                text.push_str(&" ".repeat(i));
                text.push_str("a:\n");
            }
        }
        Some(Damage::AliasBomb(items, refs)) => {
            text.push_str(&format!(
                "---\nkind: Service\nmetadata: {{name: bomb}}\nspec:\n  a: &a [{}]\n  b: [{}]\n",
                vec!["x"; *items].join(","),
                vec!["*a"; *refs].join(",")
            ));
        }
        Some(Damage::Laughs) => text.push_str(&laughs()),
        Some(Damage::Tags) => {
            text.push_str(
                "---\nkind: Service\nmetadata: {name: !!binary aGVsbG8=}\nspec: !custom {a: 1}\n",
            );
        }
        Some(Damage::Tabs) => text = text.replace("  ", "\t"),
    }
    text
}

/// Nine levels of ten aliases ("billion laughs").
fn laughs() -> String {
    let mut text = String::from(
        "---\nkind: Service\nmetadata:\n  name: laughs\n  annotations:\n    l0: &l0 \"lol\"\n",
    );
    for level in 1..10 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        text.push_str(&format!("    l{level}: &l{level} [{refs}]\n"));
    }
    text
}

fn generate(rng: &mut StdRng, corpus: &[Value]) -> Input {
    let count = rng.random_range(1..=6);
    let mut docs: Vec<Value> = (0..count)
        .map(|_| corpus.choose(rng).cloned().unwrap())
        .collect();
    for doc in &mut docs {
        if rng.random_bool(0.5) {
            mutate(rng, doc);
        }
    }
    if rng.random_bool(0.1) {
        docs.push(Value::Null);
    }
    let json = rng.random_bool(0.15);
    let as_list = json && count > 1 || rng.random_bool(0.2);
    let damage = match rng.random_range(0..20) {
        0 => Some(Damage::Truncate(rng.random_range(0..4000))),
        1 => Some(Damage::Insert(
            rng.random_range(0..4000),
            random_string(rng),
        )),
        2 => Some(Damage::DeepFlow(rng.random_range(50..150_000))),
        3 => Some(Damage::DeepCompact(rng.random_range(50..150_000))),
        4 => Some(Damage::DeepBlock(rng.random_range(50..2500))),
        5 => Some(Damage::AliasBomb(
            rng.random_range(10..3000),
            rng.random_range(10..30_000),
        )),
        6 => Some(Damage::Laughs),
        7 => Some(Damage::Tags),
        8 => Some(Damage::Tabs),
        _ => None,
    };
    Input {
        name: format!("fuzz.{}", if json { "json" } else { "yaml" }),
        docs,
        as_list,
        damage,
    }
}

/// Smaller variants of a failing input: fewer documents, no damage, then halved text is left
/// to the reader of the message.
fn smaller(input: &Input) -> Vec<Input> {
    let mut out = Vec::new();
    for i in 0..input.docs.len() {
        let mut fewer = input.clone();
        fewer.docs.remove(i);
        out.push(fewer);
    }
    if input.as_list {
        out.push(Input {
            as_list: false,
            ..input.clone()
        });
    }
    if input.damage.is_some() {
        out.push(Input {
            damage: None,
            ..input.clone()
        });
    }
    out
}

fn shrink(mut input: Input, fails: impl Fn(&Input) -> bool) -> Input {
    for _ in 0..200 {
        match smaller(&input)
            .into_iter()
            .find(|candidate| fails(candidate))
        {
            Some(candidate) => input = candidate,
            None => break,
        }
    }
    input
}

// ---------------------------------------------------------------------------------------------
// Properties of one in-process lint.

/// Ceiling of one `lint_text` call (debug build on a shared two-core machine): a fixed part
/// and a part linear in the input. Reading is linear: a generated value near the 64 MiB input
/// limit takes 6.5–8 s in the debug build just to be parsed (measured, every cloud alike), while
/// anything worse than linear would take far longer than this allows.
fn lint_ceiling(input_bytes: usize) -> Duration {
    let mib = u32::try_from(input_bytes >> 20).unwrap_or(u32::MAX);
    Duration::from_secs(5) + Duration::from_millis(200).saturating_mul(mib)
}

fn lint_once(name: &str, text: &str, cloud: Cloud) -> Result<Vec<Report>, String> {
    let started = Instant::now();
    let result = catch_unwind(AssertUnwindSafe(|| lint_text(name, text, cloud)));
    let took = started.elapsed();
    let result = result.map_err(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        format!("panicked: {what}")
    })?;
    let ceiling = lint_ceiling(text.len());
    if took > ceiling {
        return Err(format!(
            "took {took:?} for {} bytes (ceiling {ceiling:?})",
            text.len()
        ));
    }
    let reports = match result {
        Ok(reports) => reports,
        Err(error) => {
            if error.message.trim().is_empty() || error.source != name {
                return Err(format!("input error without source or message: {error}"));
            }
            return Ok(Vec::new());
        }
    };
    let mut rendered = 0usize;
    for report in &reports {
        if !report.source.starts_with(name) {
            return Err(format!(
                "report source {:?} does not name the file",
                report.source
            ));
        }
        match report.status {
            Status::Invalid if report.errors.is_empty() => {
                return Err(format!("invalid without an error: {}", report.object));
            }
            Status::Skipped if report.reason.is_none() => {
                return Err(format!("skipped without a reason: {}", report.object));
            }
            _ => {}
        }
        if let Some(empty) = report.errors.iter().find(|e| e.trim().is_empty()) {
            return Err(format!("empty error {empty:?} for {}", report.object));
        }
        rendered += report.object.len()
            + report.reason.as_ref().map_or(0, String::len)
            + report.errors.iter().map(String::len).sum::<usize>()
            + report.warnings.iter().map(String::len).sum::<usize>();
    }
    let bound = 16 * text.len() + (1 << 20);
    if rendered > bound {
        return Err(format!(
            "{} reports render {rendered} bytes of diagnostics for {} bytes of input (bound {bound})",
            reports.len(),
            text.len()
        ));
    }
    Ok(reports)
}

#[test]
fn fuzz_lint_reader_never_panics_and_stays_bounded() {
    let corpus = corpus();
    run_budget("fuzz_lint_reader_never_panics_and_stays_bounded", |rng| {
        let input = generate(rng, &corpus);
        let cloud = *Cloud::ALL.choose(rng).unwrap();
        let check = |input: &Input| lint_once(&input.name, &render(input), cloud).err();
        let Some(why) = check(&input) else {
            return Ok(());
        };
        let minimal = shrink(input, |candidate| check(candidate).is_some());
        Err(format!(
            "cloud {cloud}: {why}\nshrunk input ({}):\n{}",
            minimal.name,
            clip(&render(&minimal), 3000)
        ))
    });
}

// ---------------------------------------------------------------------------------------------
// One wrong-typed field among good objects.

/// Leaves of a Service worth retyping: `(pointer, path as serde_path_to_error prints it, path
/// with map keys in brackets, value)`.
fn typed_leaves(doc: &Value) -> Vec<(String, String, String, Value)> {
    fn walk(
        value: &Value,
        pointer: &str,
        dotted: &str,
        bracketed: &str,
        in_map: bool,
        out: &mut Vec<(String, String, String, Value)>,
    ) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    let join = |base: &str| {
                        if base.is_empty() {
                            key.clone()
                        } else {
                            format!("{base}.{key}")
                        }
                    };
                    let bracket = if in_map {
                        format!("{bracketed}[{key}]")
                    } else {
                        join(bracketed)
                    };
                    let child_in_map =
                        matches!(key.as_str(), "annotations" | "labels" | "selector");
                    walk(
                        child,
                        &format!("{pointer}/{escaped}"),
                        &join(dotted),
                        &bracket,
                        child_in_map,
                        out,
                    );
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(
                        child,
                        &format!("{pointer}/{i}"),
                        &format!("{dotted}[{i}]"),
                        &format!("{bracketed}[{i}]"),
                        false,
                        out,
                    );
                }
            }
            Value::Null => {}
            leaf => out.push((
                pointer.to_owned(),
                dotted.to_owned(),
                bracketed.to_owned(),
                leaf.clone(),
            )),
        }
    }
    let mut out = Vec::new();
    walk(doc, "", "", "", false, &mut out);
    // `kind`/`apiVersion` decide whether it is a Service at all; `targetPort` takes both.
    out.retain(|(pointer, ..)| {
        !matches!(pointer.as_str(), "/kind" | "/apiVersion") && !pointer.ends_with("/targetPort")
    });
    out
}

fn retyped(rng: &mut StdRng, old: &Value) -> Value {
    let choices: Vec<Value> = match old {
        Value::String(s) => vec![json!(7), json!(true), json!({"a": s}), json!([s])],
        Value::Number(_) => vec![
            json!("30000"),
            json!(true),
            json!(1.5),
            json!({"n": 1}),
            json!(4_294_967_296u64),
        ],
        Value::Bool(_) => vec![json!("true"), json!(1), json!([true])],
        _ => vec![json!("x")],
    };
    choices.choose(rng).cloned().unwrap()
}

fn status_of(reports: &[Report], doc: usize) -> Vec<(Status, String)> {
    let prefix = format!("#{doc}");
    reports
        .iter()
        .filter(|r| {
            r.source.split_once('#').is_some_and(|(_, rest)| {
                format!("#{rest}") == prefix || rest.starts_with(&format!("{doc}/"))
            })
        })
        .map(|r| (r.status, r.object.clone()))
        .collect()
}

#[test]
fn fuzz_lint_wrong_typed_field_is_named_and_isolated() {
    let services = services(&corpus());
    run_budget("fuzz_lint_wrong_typed_field_is_named_and_isolated", |rng| {
        let cloud = *Cloud::ALL.choose(rng).unwrap();
        let good: Vec<Value> = (0..rng.random_range(1..4))
            .map(|i| {
                let mut doc = services.choose(rng).cloned().unwrap();
                doc["metadata"]["name"] = json!(format!("good-{i}"));
                doc
            })
            .collect();
        let mut bad = services.choose(rng).cloned().unwrap();
        bad["metadata"]["name"] = json!("bad");
        let leaves = typed_leaves(&bad);
        let (pointer, dotted, bracketed, old) = leaves.choose(rng).cloned().unwrap();
        let new = retyped(rng, &old);
        *bad.pointer_mut(&pointer).unwrap() = new.clone();
        let at = rng.random_range(0..=good.len());
        let mut docs = good.clone();
        docs.insert(at, bad);
        let text = docs
            .iter()
            .map(|d| serde_yaml_ng::to_string(d).unwrap())
            .collect::<Vec<_>>()
            .join("---\n");
        let reports = lint_once("mixed.yaml", &text, cloud)?;
        let describe = || {
            format!(
                "cloud {cloud}, {dotted} = {new} in document {}:\n{}",
                at + 1,
                clip(&text, 3000)
            )
        };
        let bad_report = reports
            .iter()
            .find(|r| r.source == format!("mixed.yaml#{}", at + 1))
            .ok_or_else(|| format!("no report for the bad object; {}", describe()))?;
        if bad_report.status != Status::Invalid {
            return Err(format!(
                "the bad object is {:?}; {}",
                bad_report.status,
                describe()
            ));
        }
        // The element's list is named enough (`spec.topologyKeys` for `spec.topologyKeys[2]`).
        let list = dotted
            .strip_suffix(']')
            .and_then(|rest| rest.rsplit_once('['))
            .map_or(dotted.as_str(), |(list, _)| list);
        let named = bad_report
            .errors
            .iter()
            .any(|e| e.contains(&dotted) || e.contains(&bracketed) || e.contains(list));
        if !named {
            return Err(format!(
                "no error names {dotted}: {:?}; {}",
                bad_report.errors,
                describe()
            ));
        }
        // The good objects are judged exactly as they are alone.
        for (i, doc) in good.iter().enumerate() {
            let alone = lint_once("alone.yaml", &serde_yaml_ng::to_string(doc).unwrap(), cloud)?;
            let index = if i < at { i + 1 } else { i + 2 };
            let mixed = status_of(&reports, index);
            let single = status_of(&alone, 1);
            if mixed != single {
                return Err(format!(
                    "good object {index} is {mixed:?} beside the bad one but {single:?} alone; {}",
                    describe()
                ));
            }
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------------
// The binary on adversarial files: exit status, peak RSS, time, output size.

/// What one `kube-lb lint` run on a generated file must stay within.
#[derive(Debug)]
struct Limits {
    /// Peak resident set (`VmHWM`).
    rss: u64,
    /// Wall-clock time; the process is killed past it.
    time: Duration,
    /// stdout + stderr bytes.
    output: u64,
    /// Expected exit status.
    exit: i32,
    /// Text stderr or stdout must contain (the refusal names its cause).
    mentions: &'static [&'static str],
}

const MIB: u64 = 1 << 20;

/// Reads `VmHWM` (peak RSS) of a live process, in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs `kube-lb lint -f <file> --cloud aws -o json`, sampling its peak RSS until it exits.
fn lint_binary(file: &Path, limits: &Limits) {
    let dir = file.parent().unwrap();
    let stdout = std::fs::File::create(dir.join("stdout")).unwrap();
    let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
    let started = Instant::now();
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("kube-lb"))
        .args(["lint", "--cloud", "aws", "-o", "json", "-f"])
        .arg(file)
        .env_remove("KUBE_LB_CLOUD")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut peak = 0u64;
    let status = loop {
        // Sample before reaping: once reaped the numbers are gone.
        if let Some(rss) = peak_rss(pid) {
            peak = peak.max(rss);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limits.time {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!(
                "{}: still running after {:?} (peak RSS so far {} MiB)",
                file.display(),
                limits.time,
                peak / MIB
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = started.elapsed();
    let out_len = std::fs::metadata(dir.join("stdout")).unwrap().len();
    let err_len = std::fs::metadata(dir.join("stderr")).unwrap().len();
    let read = |name: &str| {
        // Bounded by the output assertion below only after reading, so cap the read too.
        let text = std::fs::read(dir.join(name)).unwrap_or_default();
        String::from_utf8_lossy(&text[..text.len().min(64 * MIB as usize)]).into_owned()
    };
    let stderr_full = read("stderr");
    let stdout_full = read("stdout");
    let stderr_text = clip(&stderr_full, 2000);
    let stdout_text = clip(&stdout_full, 2000);
    eprintln!(
        "{}: exit {:?}, peak RSS {} MiB, {took:?}, output {} bytes",
        file.display(),
        status.code(),
        peak / MIB,
        out_len + err_len
    );
    assert!(
        !stderr_full.contains("panicked"),
        "{}: panicked: {stderr_text}",
        file.display()
    );
    assert_eq!(
        status.code(),
        Some(limits.exit),
        "{}: exit status (stderr: {stderr_text})",
        file.display()
    );
    assert!(
        peak <= limits.rss,
        "{}: peak RSS {} MiB over the ceiling of {} MiB",
        file.display(),
        peak / MIB,
        limits.rss / MIB
    );
    assert!(
        out_len + err_len <= limits.output,
        "{}: {} bytes of output over the bound of {}",
        file.display(),
        out_len + err_len,
        limits.output
    );
    for needle in limits.mentions {
        assert!(
            stderr_full.contains(needle) || stdout_full.contains(needle),
            "{}: output does not mention {needle:?}:\nstderr: {stderr_text}\nstdout: {stdout_text}",
            file.display()
        );
    }
}

/// Writes `text` to a fresh temporary file and lints it within `limits`.
fn lint_generated(name: &str, text: &[u8], limits: &Limits) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    lint_binary(&file, limits);
}

/// The ceilings of the adversarial files below. The binary is the debug build and idles at a
/// few MiB; 64 MiB leaves room for the parser while catching the failure modes seen (1.9 GB for
/// one hostile value). Times are generous for a shared two-core machine: the failures seen took
/// 16–20 s or never finished.
fn small_limits(exit: i32, mentions: &'static [&'static str]) -> Limits {
    Limits {
        rss: 64 * MIB,
        time: Duration::from_secs(15),
        output: 4 * MIB,
        exit,
        mentions,
    }
}

fn lb_service(name: &str, annotations: Value, ports: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "fuzz", "annotations": annotations},
        "spec": {"type": "LoadBalancer", "ports": ports},
    })
}

#[test]
fn fuzz_lint_binary_deep_flow_mapping_is_refused_early() {
    let n = 100_000;
    let text = format!("{}1{}\n", "{a: ".repeat(n), "}".repeat(n));
    lint_generated(
        "deep-flow-map.yaml",
        text.as_bytes(),
        &small_limits(2, &["deep-flow-map.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_deep_flow_sequence_is_refused_early() {
    let n = 100_000;
    let text = format!("{}{}\n", "[".repeat(n), "]".repeat(n));
    lint_generated(
        "deep-flow-seq.yaml",
        text.as_bytes(),
        &small_limits(2, &["deep-flow-seq.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_deep_compact_sequence_is_refused_early() {
    let text = format!("{}x\n", "- ".repeat(100_000));
    lint_generated(
        "deep-compact.yaml",
        text.as_bytes(),
        &small_limits(2, &["deep-compact.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_deep_block_mapping_is_refused_early() {
    // 3,000 levels of one-space indentation: 4.5 MB, the deepest block nesting a few MB allow.
    let mut text = String::new();
    for i in 0..3000 {
        text.push_str(&" ".repeat(i));
        text.push_str("a:\n");
    }
    lint_generated(
        "deep-block.yaml",
        text.as_bytes(),
        &small_limits(2, &["deep-block.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_billion_laughs_is_refused() {
    lint_generated(
        "laughs.yaml",
        laughs().as_bytes(),
        &small_limits(2, &["laughs.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_quadratic_alias_expansion_is_refused() {
    // Within serde_yaml_ng's own repetition limit (100 jumps per event), 60 million nodes.
    let text = format!(
        "kind: Service\nmetadata: {{name: bomb}}\nspec:\n  a: &a [{}]\n  b: [{}]\n",
        vec!["x"; 2000].join(","),
        vec!["*a"; 30_000].join(",")
    );
    lint_generated(
        "aliases.yaml",
        text.as_bytes(),
        &small_limits(2, &["aliases.yaml"]),
    );
}

#[test]
fn fuzz_lint_binary_100_mb_document_is_refused_early() {
    // One Service whose annotation is 100 MB: refused by size before it is parsed. Reading up
    // to the 64 MiB input limit is allowed, so the ceiling is higher than for small files.
    let mut text = String::from(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: huge\n  annotations:\n    a: \"",
    );
    text.push_str(&"x".repeat(100 * 1024 * 1024));
    text.push_str("\"\nspec:\n  type: LoadBalancer\n  ports: [{port: 80}]\n");
    let limits = Limits {
        rss: 200 * MIB,
        ..small_limits(2, &["huge.yaml"])
    };
    lint_generated("huge.yaml", text.as_bytes(), &limits);
}

#[test]
fn fuzz_lint_binary_huge_ssl_ports_value_is_summarised() {
    // The case: 100 KB of `ssl-ports` (9,310 entries) printed 955 MB at 1.9 GB RSS.
    let ports: Vec<String> = (0..9310)
        .map(|i| {
            if i % 2 == 0 {
                format!("{}", 10_000 + i)
            } else {
                format!("port-{i}")
            }
        })
        .collect();
    let value = ports.join(",");
    let service = lb_service(
        "ssl",
        json!({
            "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": value,
            "service.beta.kubernetes.io/aws-load-balancer-ssl-cert": "arn:aws:acm:us-east-1:1:certificate/x",
        }),
        json!([{"name": "https", "port": 443}]),
    );
    let text = serde_yaml_ng::to_string(&service).unwrap();
    let limits = Limits {
        output: MIB,
        ..small_limits(0, &["ssl-ports"])
    };
    lint_generated("ssl-ports.yaml", text.as_bytes(), &limits);
}

#[test]
fn fuzz_lint_binary_list_of_10k_services_with_one_bad_field() {
    // A cluster dump: every Service is reported, the one wrong-typed nodePort by its path.
    let mut items: Vec<Value> = (0..10_000)
        .map(|i| {
            lb_service(
                &format!("s{i}"),
                json!({}),
                json!([{"name": "http", "port": 80}]),
            )
        })
        .collect();
    items[5000]["spec"]["ports"][0]["nodePort"] = json!("30000");
    let text =
        serde_yaml_ng::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
            .unwrap();
    let limits = Limits {
        rss: 256 * MIB,
        time: Duration::from_secs(30),
        output: 32 * MIB,
        exit: 1,
        mentions: &["spec.ports[0].nodePort", "s5000"],
    };
    lint_generated("dump.yaml", text.as_bytes(), &limits);
}

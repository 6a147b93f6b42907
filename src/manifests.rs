//! Reading manifest files for `kube-lb lint`, `kube-lb up` and `kube-lb reconcile`, with one set
//! of limits and one way of turning an object into a typed Service, so `lint` and the controller
//! behind `reconcile` judge the same thing.
//!
//! Limits (adversarial input must fail fast with a clear error, in bounded memory):
//! - [`MAX_INPUT_BYTES`] (64 MiB) per file or stdin: read stops there. kube-apiserver refuses a
//!   single request body over 3 MiB, but one file may hold a whole cluster's Services
//!   (`kubectl get svc -A -o yaml` is one `List` document), so the file limit is larger and the
//!   per-object cost is bounded by the value budget below instead.
//! - [`MAX_DEPTH`] (100) levels of nesting, checked by a linear scan of the text *before* the
//!   YAML parser runs: the parser's own work grows with depth per token, so a 100k-deep
//!   document took 20 s there. kube-apiserver's JSON decoding allows 10,000 levels
//!   (`k8s.io/apimachinery/pkg/util/json`, as Go's `encoding/json`), but a Service needs fewer
//!   than 10 and `serde_yaml_ng` stops at 128 anyway; 100 leaves room for other kinds in the
//!   same file and gives our own error, with a line number, well before the library's.
//! - Values built from a file are counted: at most one value per [`BYTES_PER_VALUE`] input
//!   bytes plus [`VALUE_SLACK`], and at most as many scalar bytes as the input plus
//!   [`VALUE_SLACK`]. Kubernetes manifests have about one value per 15–20 bytes, so real input
//!   never comes close; with aliases ("billion laughs") a document is refused as soon as it
//!   passes either bound, long before the expansion is built, and memory stays proportional to
//!   the input (a value costs a few dozen bytes).

use std::cell::Cell;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{lift_topology_keys, truncate};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Largest file (or stdin) read, in bytes.
pub const MAX_INPUT_BYTES: u64 = 64 * 1024 * 1024;
/// Deepest nesting of mappings and sequences accepted.
pub const MAX_DEPTH: usize = 100;
/// Values (and scalar bytes) allowed beyond the per-byte budget, for small inputs.
pub const VALUE_SLACK: usize = 64 * 1024;
/// Values (estimated by the scan before parsing) allowed in one YAML document. The YAML parser
/// holds every event of a document in memory, about 140 bytes each: a 30 MB one-line list took
/// 2.2 GB before this bound. Two million is about 300 MB, and more than 100 MB of ordinary
/// manifest text (one value per 15–20 bytes).
pub const MAX_DOCUMENT_VALUES: usize = 2_000_000;
/// Input bytes per value allowed: a dense flow list (`[1,1,…]`) has 2, a manifest 15–20.
pub const BYTES_PER_VALUE: usize = 4;
/// Longest decode message kept: serde repeats the offending value in full.
const MAX_MESSAGE_BYTES: usize = 300;

/// One manifest file's text.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where it came from (`-` for stdin).
    pub source: PathBuf,
    /// Its YAML or JSON text (possibly several documents).
    pub text: String,
}

/// Reads every file named in `paths`; directories are searched recursively for `*.yaml`,
/// `*.yml` and `*.json` (sorted, so the order is stable); `-` reads standard input. Each input
/// is refused above [`MAX_INPUT_BYTES`].
pub fn read(paths: &[String]) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for path in paths {
        if path == "-" {
            let text =
                read_limited(std::io::stdin().lock()).context("reading manifests from stdin")?;
            out.push(Manifest {
                source: PathBuf::from("-"),
                text,
            });
            continue;
        }
        let mut files = Vec::new();
        collect(Path::new(path), &mut files)?;
        for file in files {
            let text = read_file(&file).with_context(|| format!("reading {}", file.display()))?;
            out.push(Manifest { source: file, text });
        }
    }
    Ok(out)
}

/// Reads one file, refusing it above [`MAX_INPUT_BYTES`] without reading further.
pub fn read_file(path: &Path) -> std::io::Result<String> {
    read_limited(std::fs::File::open(path)?)
}

/// Reads UTF-8 text, refusing it above [`MAX_INPUT_BYTES`] without reading further.
pub fn read_limited(reader: impl Read) -> std::io::Result<String> {
    let mut text = String::new();
    reader.take(MAX_INPUT_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_INPUT_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "larger than {} MiB: refused (kube-lb reads at most {} MiB per file; split it)",
                MAX_INPUT_BYTES >> 20,
                MAX_INPUT_BYTES >> 20
            ),
        ));
    }
    Ok(text)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_dir() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("listing {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            collect(&entry, out)?;
        } else if entry
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(entry);
        }
    }
    Ok(())
}

/// Why a text could not be split into documents.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxError {
    /// Nested deeper than [`MAX_DEPTH`]; found by the scan before parsing.
    #[error(
        "nesting deeper than {MAX_DEPTH} levels at line {line}: refused before parsing (a Service \
         needs fewer than 10)"
    )]
    TooDeep {
        /// 1-based line where the limit was passed.
        line: usize,
    },
    /// More than [`MAX_DOCUMENT_VALUES`] values in one document; found by the scan.
    #[error(
        "more than {MAX_DOCUMENT_VALUES} values in one document by line {line}: refused before \
         parsing (split the document)"
    )]
    TooManyValues {
        /// 1-based line where the limit was passed.
        line: usize,
    },
    /// Not valid YAML or JSON, or over the value budget (the message says which).
    #[error("invalid {format}: {message}")]
    Invalid {
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message, with its location.
        message: String,
    },
}

/// Splits a text into documents (JSON when `source` ends in `.json`, else a YAML stream) as
/// JSON values, within the limits of this module. `null` documents (empty ones between `---`)
/// are kept, so document numbers match the file.
pub fn documents(source: &str, text: &str) -> Result<Vec<Value>, SyntaxError> {
    check_depth(text)?;
    let budget = Budget::for_input(text.len());
    if source.ends_with(".json") {
        let mut de = serde_json::Deserializer::from_str(text);
        let value = Bounded::new(&budget)
            .deserialize(&mut de)
            .and_then(|v| de.end().map(|()| v))
            .map_err(|e| SyntaxError::Invalid {
                format: "JSON",
                message: e.to_string(),
            })?;
        return Ok(vec![value]);
    }
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value =
            Bounded::new(&budget)
                .deserialize(document)
                .map_err(|e| SyntaxError::Invalid {
                    format: "YAML",
                    message: e.to_string(),
                })?;
        values.push(value);
    }
    Ok(values)
}

/// Fails at the first line where the nesting could exceed [`MAX_DEPTH`]. Linear in the text and
/// conservative: it counts open flow brackets, block indentation levels and `- `/`? ` entries
/// that start on one line, so it may over-count odd layouts slightly but never under-counts a
/// real nesting chain.
pub fn check_depth(text: &str) -> Result<(), SyntaxError> {
    let mut scan = DepthScan::default();
    for (i, line) in text.lines().enumerate() {
        if scan.line(line) > MAX_DEPTH {
            return Err(SyntaxError::TooDeep { line: i + 1 });
        }
        if scan.values > MAX_DOCUMENT_VALUES {
            return Err(SyntaxError::TooManyValues { line: i + 1 });
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct DepthScan {
    /// Indentation of the open block collections.
    indents: Vec<usize>,
    /// Open `[` and `{`.
    flow: usize,
    /// Inside a quoted scalar that continues on the next line.
    quote: Option<char>,
    /// Lines more indented than this belong to a block scalar (`|`, `>`).
    block_scalar: Option<usize>,
    /// Upper estimate of the values in the current document: one per line and per separator.
    values: usize,
}

impl DepthScan {
    /// Scans one line; returns the deepest nesting seen on it.
    fn line(&mut self, line: &str) -> usize {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let content = &line[indent..];
        if let Some(parent) = self.block_scalar {
            if content.trim().is_empty() || indent > parent {
                return self.indents.len() + self.flow;
            }
            self.block_scalar = None;
        }
        if self.quote.is_none() && self.flow == 0 {
            if content.is_empty() || content.starts_with('#') {
                return self.indents.len();
            }
            if content.starts_with("---") || content.starts_with("...") {
                self.indents.clear();
                self.values = 0;
                return 0;
            }
            while self.indents.last().is_some_and(|top| *top >= indent) {
                self.indents.pop();
            }
            self.indents.push(indent);
        }
        self.values += 1;
        let mut deepest = self.indents.len() + self.flow;
        let mut previous = None::<char>;
        let mut at_value_start = self.quote.is_none();
        let mut chars = content.chars().peekable();
        while let Some(c) = chars.next() {
            if let Some(q) = self.quote {
                if q == '"' && c == '\\' {
                    chars.next();
                } else if c == q {
                    self.quote = None;
                }
                previous = Some(c);
                continue;
            }
            let next_is_space = chars.peek().is_none_or(|n| *n == ' ');
            let mut starts_value = false;
            match c {
                '#' if previous.is_none_or(char::is_whitespace) => break,
                '"' | '\'' if at_value_start => self.quote = Some(c),
                '[' | '{' if at_value_start => {
                    self.flow += 1;
                    deepest = deepest.max(self.indents.len() + self.flow);
                    starts_value = true;
                }
                ']' | '}' if self.flow > 0 => self.flow -= 1,
                '-' | '?' if at_value_start && next_is_space => {
                    // A compact entry: `- - - x` nests one level per dash.
                    deepest += 1;
                    starts_value = true;
                }
                ',' if self.flow > 0 => {
                    self.values += 1;
                    starts_value = true;
                }
                ':' if next_is_space || self.flow > 0 => starts_value = true,
                _ => {}
            }
            if !c.is_whitespace() {
                at_value_start = starts_value;
            }
            previous = Some(c);
        }
        let trimmed = content.trim_end();
        if self.quote.is_none()
            && self.flow == 0
            && trimmed
                .rsplit(' ')
                .next()
                .is_some_and(|last| last.starts_with(['|', '>']) && last.len() <= 3)
        {
            self.block_scalar = Some(indent);
        }
        deepest
    }
}

/// Counts the values and scalar bytes built from one input.
#[derive(Debug)]
struct Budget {
    values: Cell<usize>,
    bytes: Cell<usize>,
    value_limit: usize,
    byte_limit: usize,
}

impl Budget {
    fn for_input(len: usize) -> Budget {
        Budget {
            values: Cell::new(0),
            bytes: Cell::new(0),
            value_limit: (len / BYTES_PER_VALUE).saturating_add(VALUE_SLACK),
            byte_limit: len.saturating_add(VALUE_SLACK),
        }
    }

    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        self.values.set(self.values.get() + 1);
        self.bytes.set(self.bytes.get().saturating_add(bytes));
        if self.values.get() > self.value_limit || self.bytes.get() > self.byte_limit {
            return Err(E::custom(format!(
                "the document expands to more than {} values or {} bytes of text, more than a \
                 manifest of its size holds (YAML aliases repeating an anchor, \"billion \
                 laughs\"): refused",
                self.value_limit, self.byte_limit
            )));
        }
        Ok(())
    }
}

/// Builds a JSON value, charging the budget per value and refusing nesting over [`MAX_DEPTH`].
#[derive(Debug, Clone, Copy)]
struct Bounded<'a> {
    budget: &'a Budget,
    depth: usize,
}

impl<'a> Bounded<'a> {
    fn new(budget: &'a Budget) -> Bounded<'a> {
        Bounded { budget, depth: 0 }
    }

    fn nested<E: de::Error>(self) -> Result<Bounded<'a>, E> {
        if self.depth >= MAX_DEPTH {
            return Err(E::custom(format!(
                "nesting deeper than {MAX_DEPTH} levels: refused"
            )));
        }
        Ok(Bounded {
            budget: self.budget,
            depth: self.depth + 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML or JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.budget.charge(v.len())?;
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.budget.charge(0)?;
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let inner = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(inner)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.budget.charge(0)?;
        let inner = self.nested()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key_seed(inner)? {
            let key = match key {
                Value::String(s) => s,
                // YAML allows non-string keys; Kubernetes objects never use them, and the
                // decode into a typed object reports them with a path.
                other => other.to_string(),
            };
            let value = map.next_value_seed(inner)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// An object that cannot be used, named so the user finds it: `Service web/api:
/// spec.ports[0].nodePort: invalid type: …`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {message}")]
pub struct ObjectError {
    /// `Kind namespace/name`.
    pub object: String,
    /// The field path (when known) and what is wrong with it.
    pub message: String,
}

/// `(kind, "Kind namespace/name")` of a raw object, with placeholders for missing parts.
pub fn describe(value: &Value) -> (String, String) {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("<no kind>");
    let kind = truncate(kind, 63).into_owned();
    let meta = value.get("metadata");
    let text = |field: &str, default: &'static str| {
        meta.and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .map_or(default.into(), |s| truncate(s, 253).into_owned())
    };
    let name = text("name", "<no name>");
    let namespace = text("namespace", "default");
    let object = format!("{kind} {namespace}/{name}");
    (kind, object)
}

/// Turns a raw Service object into the typed Service the controller will see: the removed
/// `spec.topologyKeys` field moved into its annotation (seed 002), then a decode that names the
/// field path of a wrong-typed value. `lint` judges this Service; `reconcile` applies exactly
/// the returned value to the API server, so the controller parses the same thing.
pub fn service_object(mut value: Value) -> Result<(Service, Value), ObjectError> {
    let (_, object) = describe(&value);
    lift_topology_keys(&mut value).map_err(|error| ObjectError {
        object: object.clone(),
        message: format!("spec.topologyKeys: {error}"),
    })?;
    let service = decode::<Service>(&value).map_err(|message| ObjectError {
        object,
        message: format!("not a valid Service object: {message}"),
    })?;
    Ok((service, value))
}

/// Decodes `value` as `T`; the error names the field path (`spec.ports[0].nodePort: invalid
/// type: string "30000", expected i32`) and is cut to a few hundred bytes.
pub fn decode<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, String> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        let message = if path == "." || path.is_empty() {
            inner
        } else {
            format!("{path}: {inner}")
        };
        truncate(&message, MAX_MESSAGE_BYTES).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_searched_recursively_in_order() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("b.yaml"), "b").unwrap();
        std::fs::write(dir.path().join("a.json"), "a").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        std::fs::write(dir.path().join("sub/c.yml"), "c").unwrap();
        let read = read(&[dir.path().display().to_string()]).unwrap();
        let texts: Vec<&str> = read.iter().map(|m| m.text.as_str()).collect();
        assert_eq!(texts, ["a", "b", "c"]);
        assert!(super::read(&["/nonexistent/file.yaml".into()]).is_err());
    }

    fn deep_block(depth: usize) -> String {
        let mut text = String::new();
        for i in 0..depth {
            text.push_str(&" ".repeat(i));
            text.push_str("a:\n");
        }
        text
    }

    #[test]
    fn nesting_is_limited_in_every_syntax() {
        let n = MAX_DEPTH + 5;
        let cases: Vec<(&str, String, bool)> = vec![
            (
                "flow sequence",
                format!("{}{}", "[".repeat(n), "]".repeat(n)),
                false,
            ),
            (
                "flow mapping",
                format!("{}1{}", "{a: ".repeat(n), "}".repeat(n)),
                false,
            ),
            ("json", format!("{}{}", "[".repeat(n), "]".repeat(n)), false),
            ("block mapping", deep_block(n), false),
            ("compact sequences", format!("{}x\n", "- ".repeat(n)), false),
            (
                "at the limit",
                format!("{}{}", "[".repeat(MAX_DEPTH - 1), "]".repeat(MAX_DEPTH - 1)),
                true,
            ),
            ("block mapping at 50", deep_block(50), true),
            // Brackets inside plain and quoted scalars and comments are not nesting.
            (
                "brackets in scalars",
                format!(
                    "a: x{}\nb: '{}'\n# {}\n",
                    "[".repeat(n),
                    "{".repeat(n),
                    "[".repeat(n)
                ),
                true,
            ),
            // A block scalar's indentation is text.
            (
                "block scalar",
                format!(
                    "a: |\n{}",
                    (0..n)
                        .map(|i| format!("{}x\n", " ".repeat(i + 2)))
                        .collect::<String>()
                ),
                true,
            ),
        ];
        for (name, text, ok) in cases {
            let source = if name == "json" { "x.json" } else { "x.yaml" };
            let got = documents(source, &text);
            assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
            if !ok {
                let message = got.unwrap_err().to_string();
                assert!(
                    message.contains("nesting deeper than 100"),
                    "{name}: {message}"
                );
            }
        }
    }

    #[test]
    fn a_hundred_thousand_levels_fail_fast() {
        for text in [
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
            format!("{}x\n", "- ".repeat(100_000)),
        ] {
            let started = std::time::Instant::now();
            let error = documents("deep.yaml", &text).unwrap_err();
            assert_eq!(error, SyntaxError::TooDeep { line: 1 });
            // Linear scan: milliseconds, where the YAML parser took 16–20 s.
            assert!(started.elapsed() < std::time::Duration::from_secs(2));
        }
    }

    #[test]
    fn a_document_with_millions_of_values_is_refused_before_parsing() {
        let dense = format!("[{}1]\n", "1,".repeat(MAX_DOCUMENT_VALUES + 1));
        let started = std::time::Instant::now();
        assert_eq!(
            documents("dense.yaml", &dense),
            Err(SyntaxError::TooManyValues { line: 1 })
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // The count is per document: many small documents are fine.
        let many = "---\na: [1, 2, 3]\n".repeat(1_000);
        assert_eq!(documents("many.yaml", &many).map(|d| d.len()), Ok(1_000));
    }

    #[test]
    fn alias_expansion_is_bounded() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        let started = std::time::Instant::now();
        let error = documents("laughs.yaml", &text).unwrap_err().to_string();
        assert!(error.contains("billion laughs"), "{error}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // A few aliases of a small anchor, as real manifests use them, are fine.
        let fine = "labels: &l {app: web}\nselector: *l\nother: *l\n";
        assert!(documents("ok.yaml", fine).is_ok());
    }

    #[test]
    fn inputs_over_the_size_limit_are_refused_without_reading_them_all() {
        let endless = std::io::repeat(b'a');
        let error = read_limited(endless).unwrap_err();
        assert!(error.to_string().contains("larger than 64 MiB"), "{error}");
    }

    #[test]
    fn decode_errors_name_the_field_path() {
        let cases = [
            (
                serde_json::json!({"kind": "Service", "metadata": {"name": "a"}, "spec": {"ports": [{"port": 80, "nodePort": "30000"}]}}),
                "spec.ports[0].nodePort: invalid type: string \"30000\", expected i32",
            ),
            (
                serde_json::json!({"kind": "Service", "metadata": {"name": "a", "annotations": {"k": 1}}}),
                "metadata.annotations.k: invalid type: integer `1`, expected a string",
            ),
            (
                serde_json::json!({"kind": "Service", "metadata": {"name": "a"}, "spec": {"topologyKeys": "x"}}),
                "spec.topologyKeys",
            ),
        ];
        for (value, want) in cases {
            let error = service_object(value).unwrap_err();
            assert_eq!(error.object, "Service default/a");
            assert!(error.message.contains(want), "{} vs {want}", error.message);
        }
        let huge = "9".repeat(100_000);
        let value = serde_json::json!({"kind": "Service", "metadata": {"name": "a"}, "spec": {"ports": [{"port": huge}]}});
        let error = service_object(value).unwrap_err();
        assert!(
            error.to_string().len() < 400,
            "{} bytes",
            error.to_string().len()
        );
    }
}

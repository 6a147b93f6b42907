//! One reader for the configuration files the upstream cloud providers accept: gcfg-style INI
//! (`cloud.conf`, `gce.conf`, AWS `cloud-config`) and JSON (`azure.json`).
//!
//! Parsing is pure ([`parse_ini`], [`parse_json`]); [`read`] is the only function doing I/O.
//! Every error is a [`ConfigFileError`] naming the file, the line and, where there is one, the
//! key, so an operator can go straight to the offending line.
//!
//! # INI rules (decided once, following gcfg, which the upstream Go providers use)
//! - A leading UTF-8 BOM is skipped and `\r\n` line ends are accepted (files edited on Windows).
//! - `;` and `#` start a comment, on their own line or after a value outside quotes.
//! - Sections are `[name]` or `[name "subsection"]`. Section and key names are case-insensitive
//!   (stored lower-cased); subsection names are case-sensitive, as in gcfg and git-config.
//! - Names start with a letter and hold letters, digits, `-` and `_` (gcfg allows `-`; `_` is
//!   accepted because some existing cloud configs use it).
//! - `key = value`: surrounding whitespace is trimmed; double quotes may enclose any part of the
//!   value and keep its whitespace and comment characters; inside quotes `\"`, `\\`, `\n`, `\t`
//!   and `\b` are escapes (gcfg's set), any other escape is an error.
//! - A bare key (no `=`) is gcfg's "blank" value: `true` for a bool, an error for anything else.
//!   `key =` is the empty string, which reads as `false` for a bool (git-config semantics).
//! - A key repeated in one section: the last value wins for single-valued getters, and
//!   [`Section::list`] returns every value in order (gcfg's multi-valued variables). A section
//!   repeated in the file is merged, as gcfg does.
//! - A key before any section header is an error. Unknown sections and keys are kept; each
//!   cloud decides whether to reject them ([`Section::reject_unknown`]).

use std::path::Path;
use std::time::Duration;

/// What went wrong reading a configuration file; always names the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// Path of the file.
        file: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not valid INI syntax.
    #[error("{file}:{line}: {message}")]
    Syntax {
        /// Path of the file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// A key has a value of the wrong shape.
    #[error("{file}:{line}: [{section}] {key} = {}: expected {expected}", show_value(.value))]
    Value {
        /// Path of the file.
        file: String,
        /// 1-based line number of the (last) occurrence.
        line: usize,
        /// Section as written in the header, e.g. `global` or `lb "a"`.
        section: String,
        /// Key name (lower-cased).
        key: String,
        /// The value as read (after unquoting); `None` for a bare key.
        value: Option<String>,
        /// What the key accepts.
        expected: &'static str,
    },
    /// A required key is absent.
    #[error("{file}: [{section}] {key} is required")]
    Missing {
        /// Path of the file.
        file: String,
        /// Section the key belongs in.
        section: String,
        /// Key name.
        key: String,
    },
    /// A key or section the cloud does not know.
    #[error("{file}:{line}: [{section}] unknown key {key:?}")]
    Unknown {
        /// Path of the file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// Section name.
        section: String,
        /// The unknown key.
        key: String,
    },
    /// The JSON document is malformed or does not match the expected shape.
    #[error("{file}:{line}:{column}: {source}")]
    Json {
        /// Path of the file.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The serde_json error.
        #[source]
        source: serde_json::Error,
    },
}

/// Shows a value in an error: quoted, or marked as a bare key.
fn show_value(value: &Option<String>) -> String {
    value
        .as_deref()
        .map_or_else(|| "(bare key)".to_string(), |v| format!("{v:?}"))
}

/// Reads a file into a string; the only I/O in this module.
pub fn read(path: &Path) -> Result<String, ConfigFileError> {
    std::fs::read_to_string(path).map_err(|source| ConfigFileError::Io {
        file: path.display().to_string(),
        source,
    })
}

/// Parses a JSON document into `T`, reporting file, line and column on failure.
pub fn parse_json<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<T, ConfigFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    serde_json::from_str(text).map_err(|source| ConfigFileError::Json {
        file: file.to_string(),
        line: source.line(),
        column: source.column(),
        source,
    })
}

/// One `key = value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Lower-cased key.
    pub key: String,
    /// Unquoted value; `None` for a bare key.
    pub value: Option<String>,
    /// 1-based line number.
    pub line: usize,
}

/// One section header and the entries under it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    name: String,
    /// 1-based line of the header.
    line: usize,
    subsection: Option<String>,
    entries: Vec<Entry>,
}

/// A parsed INI file: its sections in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    file: String,
    blocks: Vec<Block>,
}

/// Parses gcfg-style INI text; `file` is used only in error messages.
pub fn parse_ini(file: &str, text: &str) -> Result<Document, ConfigFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut blocks: Vec<Block> = Vec::new();
    for (index, raw) in text.split('\n').enumerate() {
        let line = index + 1;
        let err = |message: String| ConfigFileError::Syntax {
            file: file.to_string(),
            line,
            message,
        };
        let trimmed = raw.strip_suffix('\r').unwrap_or(raw).trim();
        if trimmed.is_empty() || trimmed.starts_with(';') || trimmed.starts_with('#') {
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('[') {
            let (name, subsection) = parse_header(rest).map_err(err)?;
            blocks.push(Block {
                name,
                line,
                subsection,
                entries: Vec::new(),
            });
            continue;
        }
        let (key, value) = match trimmed.find('=') {
            Some(at) => (
                trimmed[..at].trim(),
                Some(parse_value(&trimmed[at + 1..]).map_err(err)?),
            ),
            None => (strip_comment(trimmed).trim(), None),
        };
        check_name(key).map_err(|m| err(format!("key {key:?}: {m}")))?;
        let Some(block) = blocks.last_mut() else {
            return Err(err(format!("key {key:?} before any [section]")));
        };
        block.entries.push(Entry {
            key: key.to_ascii_lowercase(),
            value,
            line,
        });
    }
    Ok(Document {
        file: file.to_string(),
        blocks,
    })
}

/// Drops an unquoted trailing comment from a bare-key line.
fn strip_comment(s: &str) -> &str {
    s.find([';', '#']).map_or(s, |at| &s[..at])
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_alphabetic() => {}
        Some(_) => return Err("must start with a letter".into()),
        None => return Err("empty name".into()),
    }
    if chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        Ok(())
    } else {
        Err("may hold only letters, digits, '-' and '_'".into())
    }
}

/// Parses what follows `[` of a header: `name]` or `name "sub"]`, then an optional comment.
fn parse_header(rest: &str) -> Result<(String, Option<String>), String> {
    let close = rest.rfind(']').ok_or("section header without ']'")?;
    let after = rest[close + 1..].trim();
    if !(after.is_empty() || after.starts_with(';') || after.starts_with('#')) {
        return Err(format!("unexpected {after:?} after section header"));
    }
    let inner = rest[..close].trim();
    let (name, subsection) = match inner.find(char::is_whitespace) {
        None => (inner, None),
        Some(at) => {
            let sub = inner[at..].trim();
            let quoted = sub
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .ok_or("subsection name must be double-quoted")?;
            (&inner[..at], Some(unescape(quoted)?))
        }
    };
    check_name(name).map_err(|m| format!("section {name:?}: {m}"))?;
    Ok((name.to_ascii_lowercase(), subsection))
}

/// Unescapes a quoted subsection name (gcfg allows only `\"` and `\\` there).
fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('"' | '\\')) => out.push(e),
                other => return Err(format!("invalid escape \\{}", other.unwrap_or(' '))),
            },
            '"' => return Err("unescaped '\"' in subsection name".into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Parses a value after `=`: quotes, escapes, trailing comment, trimming outside quotes.
fn parse_value(raw: &str) -> Result<String, String> {
    let mut out = String::new();
    // Length of `out` that must survive trimming: everything up to the last quoted character.
    let mut keep = 0;
    let mut quoted = false;
    let mut chars = raw.trim_start().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                keep = out.len();
            }
            ';' | '#' if !quoted => break,
            '\\' => {
                let e = match chars.next() {
                    Some('"') => '"',
                    Some('\\') => '\\',
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some('b') => '\u{8}',
                    Some(other) => return Err(format!("invalid escape \\{other}")),
                    None => return Err("line continuation ('\\' at end) is not supported".into()),
                };
                out.push(e);
                keep = out.len();
            }
            c => {
                out.push(c);
                if quoted {
                    keep = out.len();
                }
            }
        }
    }
    if quoted {
        return Err("unterminated '\"'".into());
    }
    let trimmed_len = out.trim_end().len().max(keep);
    out.truncate(trimmed_len);
    Ok(out)
}

impl Document {
    /// The file name used in errors.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// The section `[name]` (or `[name "sub"]`), merged over every header naming it; empty if
    /// absent. `name` is matched case-insensitively, `subsection` exactly.
    pub fn section(&self, name: &str, subsection: Option<&str>) -> Section<'_> {
        let name = name.to_ascii_lowercase();
        Section {
            file: &self.file,
            label: label(&name, subsection),
            entries: self
                .blocks
                .iter()
                .filter(|b| b.name == name && b.subsection.as_deref() == subsection)
                .flat_map(|b| b.entries.iter())
                .collect(),
        }
    }

    /// The 1-based line of the first header naming `[name]` (or `[name "sub"]`), for errors
    /// about a section as a whole; `None` if absent. Matching as in [`Document::section`].
    pub fn header_line(&self, name: &str, subsection: Option<&str>) -> Option<usize> {
        let name = name.to_ascii_lowercase();
        self.blocks
            .iter()
            .find(|b| b.name == name && b.subsection.as_deref() == subsection)
            .map(|b| b.line)
    }

    /// The distinct subsection names of `[name "…"]` headers, in file order.
    pub fn subsections(&self, name: &str) -> Vec<&str> {
        let name = name.to_ascii_lowercase();
        let mut out: Vec<&str> = Vec::new();
        for b in self.blocks.iter().filter(|b| b.name == name) {
            if let Some(sub) = b.subsection.as_deref()
                && !out.contains(&sub)
            {
                out.push(sub);
            }
        }
        out
    }

    /// Section names (lower-cased) in file order, with duplicates removed.
    pub fn section_names(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for b in &self.blocks {
            if !out.contains(&b.name.as_str()) {
                out.push(&b.name);
            }
        }
        out
    }
}

fn label(name: &str, subsection: Option<&str>) -> String {
    match subsection {
        Some(sub) => format!("{name} {sub:?}"),
        None => name.to_string(),
    }
}

/// A view of one section with typed getters. Getters return `Ok(None)` for an absent key.
#[derive(Debug, Clone)]
pub struct Section<'a> {
    file: &'a str,
    label: String,
    entries: Vec<&'a Entry>,
}

impl<'a> Section<'a> {
    /// Every entry in file order.
    pub fn entries(&self) -> &[&'a Entry] {
        &self.entries
    }

    fn last(&self, key: &str) -> Option<&'a Entry> {
        let key = key.to_ascii_lowercase();
        self.entries.iter().rev().find(|e| e.key == key).copied()
    }

    fn bad(&self, e: &Entry, expected: &'static str) -> ConfigFileError {
        ConfigFileError::Value {
            file: self.file.to_string(),
            line: e.line,
            section: self.label.clone(),
            key: e.key.clone(),
            value: e.value.clone(),
            expected,
        }
    }

    /// Error for a required key that is absent.
    pub fn missing(&self, key: &str) -> ConfigFileError {
        ConfigFileError::Missing {
            file: self.file.to_string(),
            section: self.label.clone(),
            key: key.to_string(),
        }
    }

    /// Fails on the first key not in `known` (compared case-insensitively).
    pub fn reject_unknown(&self, known: &[&str]) -> Result<(), ConfigFileError> {
        match self
            .entries
            .iter()
            .find(|e| !known.iter().any(|k| k.eq_ignore_ascii_case(&e.key)))
        {
            Some(e) => Err(ConfigFileError::Unknown {
                file: self.file.to_string(),
                line: e.line,
                section: self.label.clone(),
                key: e.key.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The last value of `key`; a bare key is an error.
    pub fn string(&self, key: &str) -> Result<Option<&'a str>, ConfigFileError> {
        match self.last(key) {
            None => Ok(None),
            Some(Entry { value: Some(v), .. }) => Ok(Some(v)),
            Some(e) => Err(self.bad(e, "a value (key = value)")),
        }
    }

    /// Like [`Section::string`], but absence is a [`ConfigFileError::Missing`].
    pub fn required(&self, key: &str) -> Result<&'a str, ConfigFileError> {
        self.string(key)?.ok_or_else(|| self.missing(key))
    }

    /// A boolean: bare key → true; `true/yes/on/1` and `false/no/off/0/""` (any case).
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ConfigFileError> {
        let Some(e) = self.last(key) else {
            return Ok(None);
        };
        let Some(v) = e.value.as_deref() else {
            return Ok(Some(true));
        };
        match v.to_ascii_lowercase().as_str() {
            "true" | "yes" | "on" | "1" => Ok(Some(true)),
            "false" | "no" | "off" | "0" | "" => Ok(Some(false)),
            _ => Err(self.bad(e, "a boolean (true/false, yes/no, on/off, 1/0)")),
        }
    }

    fn number<T: std::str::FromStr>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<T>, ConfigFileError> {
        let Some(e) = self.last(key) else {
            return Ok(None);
        };
        e.value
            .as_deref()
            .and_then(|v| v.trim().parse().ok())
            .map(Some)
            .ok_or_else(|| self.bad(e, expected))
    }

    /// An unsigned 16-bit integer.
    pub fn u16(&self, key: &str) -> Result<Option<u16>, ConfigFileError> {
        self.number(key, "an integer 0..=65535")
    }

    /// An unsigned 32-bit integer.
    pub fn u32(&self, key: &str) -> Result<Option<u32>, ConfigFileError> {
        self.number(key, "an integer 0..=4294967295")
    }

    /// An unsigned 64-bit integer.
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ConfigFileError> {
        self.number(key, "an unsigned integer")
    }

    /// A Go-style duration (`500ms`, `30s`, `5m`, `1h30m`), as upstream configs write them.
    pub fn duration(&self, key: &str) -> Result<Option<Duration>, ConfigFileError> {
        let Some(e) = self.last(key) else {
            return Ok(None);
        };
        e.value
            .as_deref()
            .and_then(parse_duration)
            .map(Some)
            .ok_or_else(|| self.bad(e, "a duration such as 500ms, 30s, 5m or 1h30m"))
    }

    /// Every value of a repeated key, in file order (gcfg multi-valued variable).
    pub fn list(&self, key: &str) -> Result<Vec<&'a str>, ConfigFileError> {
        let key = key.to_ascii_lowercase();
        self.entries
            .iter()
            .filter(|e| e.key == key)
            .map(|e| e.value.as_deref().ok_or_else(|| self.bad(e, "a value")))
            .collect()
    }

    /// The last value split on commas, items trimmed, empty items dropped.
    pub fn comma_list(&self, key: &str) -> Result<Vec<&'a str>, ConfigFileError> {
        Ok(self
            .string(key)?
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default())
    }
}

/// Parses a Go `time.ParseDuration` string without sign or fractions (not seen in cloud configs).
fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => Duration::from_nanos(n),
            "us" | "µs" => Duration::from_micros(n),
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            _ => return None,
        };
        total = total.checked_add(unit)?;
        rest = &rest[unit_len..];
    }
    Some(total)
}

#[cfg(test)]
mod tests;

//! Reading annotation values with the upstream conventions (reference aws.md §1.1): Go
//! `strconv.ParseBool` booleans, integers, comma lists, `k=v` maps. Every reader records its own
//! errors and warnings so the caller keeps going and collects them all.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use crate::diagnostics::{Diagnostics, ErrorKind, Location};

/// Annotations of one Service plus the diagnostics collected so far.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    annotations: &'a BTreeMap<String, String>,
    pub(crate) diag: Diagnostics,
    read: BTreeSet<&'a str>,
}

/// The strings Go's `strconv.ParseBool` accepts as true.
const GO_TRUE: &[&str] = &["1", "t", "T", "TRUE", "true", "True"];
/// The strings Go's `strconv.ParseBool` accepts as false.
const GO_FALSE: &[&str] = &["0", "f", "F", "FALSE", "false", "False"];

/// Go `strconv.ParseBool`.
pub(crate) fn go_parse_bool(value: &str) -> Option<bool> {
    if GO_TRUE.contains(&value) {
        Some(true)
    } else if GO_FALSE.contains(&value) {
        Some(false)
    } else {
        None
    }
}

impl<'a> Reader<'a> {
    pub(crate) fn new(annotations: &'a BTreeMap<String, String>) -> Reader<'a> {
        Reader {
            annotations,
            diag: Diagnostics::default(),
            read: BTreeSet::new(),
        }
    }

    /// Every annotation of the Service.
    pub(crate) fn all(&self) -> &'a BTreeMap<String, String> {
        self.annotations
    }

    /// True when `key` was looked at by some parser.
    pub(crate) fn was_read(&self, key: &str) -> bool {
        self.read.contains(key)
    }

    /// The raw value, marking the key as known.
    pub(crate) fn get(&mut self, key: &'static str) -> Option<&'a str> {
        self.read.insert(key);
        self.annotations.get(key).map(String::as_str)
    }

    /// Like [`Reader::get`] for keys built at run time (per-port keys).
    pub(crate) fn get_dynamic(&mut self, key: &str) -> Option<&'a str> {
        let (stored_key, value) = self.annotations.get_key_value(key)?;
        self.read.insert(stored_key.as_str());
        Some(value.as_str())
    }

    /// The value with surrounding whitespace removed; empty counts as absent.
    pub(crate) fn non_empty(&mut self, key: &'static str) -> Option<&'a str> {
        self.get(key).map(str::trim).filter(|v| !v.is_empty())
    }

    /// A Go `ParseBool` boolean; absent or empty gives `default`, anything else is an error.
    pub(crate) fn go_bool(&mut self, key: &'static str, default: bool) -> bool {
        let Some(raw) = self.get(key) else {
            return default;
        };
        if raw.is_empty() {
            return default;
        }
        match go_parse_bool(raw) {
            Some(value) => value,
            None => {
                self.diag.error(
                    Location::annotation(key),
                    Some(raw),
                    ErrorKind::Invalid,
                    "must be a boolean: true/false (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)",
                );
                default
            }
        }
    }

    /// A flag that is on only for `"true"` (compared case-insensitively when `fold_case`);
    /// other non-false values warn, because upstream silently reads them as false.
    pub(crate) fn true_flag(&mut self, key: &'static str, fold_case: bool) -> bool {
        let Some(raw) = self.get(key) else {
            return false;
        };
        let is_true = if fold_case {
            raw.eq_ignore_ascii_case("true")
        } else {
            raw == "true"
        };
        if is_true {
            return true;
        }
        let is_false = if fold_case {
            raw.eq_ignore_ascii_case("false")
        } else {
            raw == "false"
        };
        if !raw.is_empty() && !is_false {
            let expected = if fold_case {
                "\"true\" (any case)"
            } else {
                "exactly \"true\""
            };
            self.diag.warn(
                Location::annotation(key),
                Some(raw),
                format!("treated as false: upstream enables this only for {expected}"),
            );
        }
        false
    }

    /// An integer in `range`; empty is treated as unset (with a warning), a non-integer or an
    /// out-of-range value is an error. `unit` completes the message ("seconds").
    pub(crate) fn int_in(
        &mut self,
        key: &'static str,
        range: RangeInclusive<i64>,
        unit: &str,
    ) -> Option<u32> {
        let raw = self.get(key)?;
        if raw.is_empty() {
            self.diag.warn(
                Location::annotation(key),
                Some(raw),
                "empty value: treated as unset, the default applies",
            );
            return None;
        }
        let allowed = if *range.end() >= i64::from(u32::MAX) {
            format!("an integer of at least {} ({unit})", range.start())
        } else {
            format!(
                "an integer from {} to {} ({unit})",
                range.start(),
                range.end()
            )
        };
        match raw.parse::<i64>() {
            Ok(n) if range.contains(&n) => u32::try_from(n).ok(),
            Ok(_) => {
                self.diag.error(
                    Location::annotation(key),
                    Some(raw),
                    ErrorKind::OutOfRange,
                    format!("must be {allowed}"),
                );
                None
            }
            Err(_) => {
                self.diag.error(
                    Location::annotation(key),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("must be {allowed}"),
                );
                None
            }
        }
    }

    /// A comma list, items trimmed and empty items dropped (upstream
    /// `splitCommaSeparatedString`). When `warn_untrimmed`, whitespace around an item is
    /// reported, because upstream does not trim this particular key.
    pub(crate) fn list(&mut self, key: &'static str, warn_untrimmed: bool) -> Option<Vec<&'a str>> {
        let raw = self.get(key)?;
        if warn_untrimmed && raw.split(',').any(|item| item.trim() != item) {
            self.diag.warn(
                Location::annotation(key),
                Some(raw),
                "whitespace around items: upstream does not trim this list and would not match \
                 them; kube-lb trims them (write the list without spaces)",
            );
        }
        Some(
            raw.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .collect(),
        )
    }

    /// A `k=v,k2=,k3` map with upstream's rules: items trimmed, `k=` and bare `k` give an empty
    /// value, extra `=` segments are dropped (warned), empty keys are ignored (warned).
    pub(crate) fn key_values(&mut self, key: &'static str) -> Option<BTreeMap<String, String>> {
        let raw = self.get(key)?;
        let mut map = BTreeMap::new();
        for item in raw
            .trim()
            .split(',')
            .map(str::trim)
            .filter(|i| !i.is_empty())
        {
            let mut parts = item.split('=');
            let k = parts.next().unwrap_or_default().trim();
            let v = parts.next().unwrap_or_default().trim();
            if parts.next().is_some() {
                self.diag.warn(
                    Location::annotation(key),
                    Some(raw),
                    format!("item {item:?} has more than one '=': upstream keeps only {k:?}={v:?}"),
                );
            }
            if k.is_empty() {
                self.diag.warn(
                    Location::annotation(key),
                    Some(raw),
                    format!("item {item:?} has an empty key and is ignored"),
                );
                continue;
            }
            if map.insert(k.to_owned(), v.to_owned()).is_some() {
                self.diag.warn(
                    Location::annotation(key),
                    Some(raw),
                    format!("key {k:?} is given twice; the last value wins"),
                );
            }
        }
        Some(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn go_parse_bool_accepts_exactly_the_go_spellings() {
        for t in GO_TRUE {
            assert_eq!(go_parse_bool(t), Some(true), "{t}");
        }
        for f in GO_FALSE {
            assert_eq!(go_parse_bool(f), Some(false), "{f}");
        }
        for bad in ["yes", "no", "on", "tRUE", " true", ""] {
            assert_eq!(go_parse_bool(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn key_values_follow_upstream_map_rules() {
        let ann = reader(&[("k", " a=b , c= ,d, =x, e=f=g ")]);
        let mut r = Reader::new(&ann);
        let map = r.key_values("k").unwrap();
        let expected: BTreeMap<String, String> = [("a", "b"), ("c", ""), ("d", ""), ("e", "f")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(map, expected);
        assert_eq!(r.diag.warnings.len(), 2, "{:?}", r.diag.warnings);
        assert!(r.diag.errors.is_empty());
    }

    #[test]
    fn list_trims_and_warns_only_when_asked() {
        let ann = reader(&[("k", "a, b,,c ")]);
        let mut r = Reader::new(&ann);
        assert_eq!(r.list("k", false).unwrap(), vec!["a", "b", "c"]);
        assert!(r.diag.warnings.is_empty());
        assert_eq!(r.list("k", true).unwrap(), vec!["a", "b", "c"]);
        assert_eq!(r.diag.warnings.len(), 1);
    }

    #[test]
    fn int_in_classifies_errors() {
        let ann = reader(&[("a", "7"), ("b", "x"), ("c", "700"), ("d", "")]);
        let mut r = Reader::new(&ann);
        assert_eq!(r.int_in("a", 1..=10, "s"), Some(7));
        assert_eq!(r.int_in("b", 1..=10, "s"), None);
        assert_eq!(r.int_in("c", 1..=10, "s"), None);
        assert_eq!(r.int_in("d", 1..=10, "s"), None);
        assert_eq!(r.int_in("missing", 1..=10, "s"), None);
        let kinds: Vec<ErrorKind> = r.diag.errors.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, vec![ErrorKind::Invalid, ErrorKind::OutOfRange]);
        assert_eq!(r.diag.warnings.len(), 1);
    }
}

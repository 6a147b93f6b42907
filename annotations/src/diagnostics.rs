//! What `parse` reports: errors (the Service cannot be realised as written) and warnings (it can,
//! but upstream would have done something surprising). Both name where the value came from, the
//! value, and what is allowed, in one line suitable for `kube-lb lint` and a Kubernetes Event.

use std::fmt;

use serde::Serialize;

/// Where a reported value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "camelCase")]
pub enum Location {
    /// A `metadata.annotations` key.
    Annotation(String),
    /// A field path in the object, e.g. `spec.ports[1].name`.
    Field(String),
}

impl Location {
    /// An annotation key.
    pub fn annotation(key: &str) -> Location {
        Location::Annotation(key.to_owned())
    }

    /// A field path.
    pub fn field(path: impl Into<String>) -> Location {
        Location::Field(path.into())
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Annotation(key) => write!(f, "annotation {key}"),
            Location::Field(path) => f.write_str(path),
        }
    }
}

/// Why a value was rejected; a stable, low-cardinality class for metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ErrorKind {
    /// The Service is not `type: LoadBalancer`; nothing to build (see [`crate::parse`]).
    NotLoadBalancer,
    /// The value does not have the required syntax (not a number, not a CIDR, unknown word).
    Invalid,
    /// The value is well-formed but outside the range the cloud accepts.
    OutOfRange,
    /// The value contradicts another setting of the same Service.
    Conflict,
    /// The cloud or load-balancer kind cannot do what the value asks.
    Unsupported,
    /// A value that must be present is missing.
    Missing,
}

impl ErrorKind {
    /// A static label, for metrics.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotLoadBalancer => "not_load_balancer",
            ErrorKind::Invalid => "invalid",
            ErrorKind::OutOfRange => "out_of_range",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Missing => "missing",
        }
    }
}

/// One rejected value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
pub struct ParseError {
    /// Annotation key or field path.
    pub location: Location,
    /// The value given (`None` when the problem is that nothing was given).
    pub value: Option<String>,
    /// The class of problem.
    pub kind: ErrorKind,
    /// What is allowed (or why it cannot work), as a sentence fragment.
    pub detail: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{} = {value:?}: {}", self.location, self.detail),
            None => write!(f, "{}: {}", self.location, self.detail),
        }
    }
}

/// Every error found in one Service (never empty), plus the warnings found on the way, so a
/// user fixing the errors sees everything at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
pub struct ParseErrors {
    errors: Vec<ParseError>,
    warnings: Vec<Warning>,
}

impl ParseErrors {
    /// Wraps a non-empty list; `None` for an empty one.
    pub fn from_vec(errors: Vec<ParseError>) -> Option<ParseErrors> {
        (!errors.is_empty()).then_some(ParseErrors {
            errors,
            warnings: Vec::new(),
        })
    }

    /// A list of exactly one error.
    pub fn single(error: ParseError) -> ParseErrors {
        ParseErrors {
            errors: vec![error],
            warnings: Vec::new(),
        }
    }

    /// Attaches the warnings collected alongside the errors.
    pub fn with_warnings(mut self, warnings: Vec<Warning>) -> ParseErrors {
        self.warnings = warnings;
        self
    }

    /// The individual errors, in the order they were found.
    pub fn errors(&self) -> &[ParseError] {
        &self.errors
    }

    /// Warnings found while parsing the same Service.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// True when the Service was skipped because it is not `type: LoadBalancer`; callers treat
    /// this as "not ours", not as a user error.
    pub fn is_not_load_balancer(&self) -> bool {
        self.errors
            .iter()
            .any(|e| e.kind == ErrorKind::NotLoadBalancer)
    }

    /// Number of errors.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Always false (kept for the `len` convention).
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ParseErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl IntoIterator for ParseErrors {
    type Item = ParseError;
    type IntoIter = std::vec::IntoIter<ParseError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.into_iter()
    }
}

/// A value that is accepted (as upstream accepts it) but probably does not do what was meant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// Annotation key or field path.
    pub location: Location,
    /// The value given.
    pub value: Option<String>,
    /// What happens and what to write instead.
    pub detail: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{} = {value:?}: {}", self.location, self.detail),
            None => write!(f, "{}: {}", self.location, self.detail),
        }
    }
}

/// Longest value (in bytes) a diagnostic repeats; longer values are cut at a character boundary
/// and marked with their full length. A fuzz run found a 100 KB annotation repeated in each of
/// 9,310 diagnostics (955 MB of lint output); the value is what the user wrote, so a prefix is
/// enough to recognise it.
pub const MAX_VALUE_BYTES: usize = 200;
/// Longest explanation (in bytes) a diagnostic keeps; explanations quote list items, which can
/// be as long as the value itself.
pub const MAX_DETAIL_BYTES: usize = 1024;
/// Diagnostics listed per location and severity; further ones are counted and summarised in one
/// line ("… and 9,300 more"), so output stays proportional to the number of keys and fields,
/// not to the length of a list inside one value.
pub const MAX_PER_LOCATION: usize = 5;

/// `text` cut to at most `max` bytes at a character boundary, with a note of the full length
/// when something was cut; unchanged (borrowed) otherwise.
pub fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}… ({} bytes in all)",
        &text[..end],
        group_thousands(text.len())
    ))
}

/// A detail as one line: control characters (a newline inside a user's value quoted into the
/// text) are written as escapes, so one diagnostic is always one line of a log or an event.
fn one_line(detail: String) -> String {
    if !detail.chars().any(char::is_control) {
        return detail;
    }
    detail
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `9300` as `9,300`.
pub(crate) fn group_thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The location with list indices replaced by `[*]`, so `spec.ports[0].name` and
/// `spec.ports[9000].name` share one cap.
fn cap_key(location: &Location) -> Location {
    match location {
        Location::Annotation(_) => location.clone(),
        Location::Field(path) => {
            let mut out = String::with_capacity(path.len());
            let mut in_index = false;
            for c in path.chars() {
                match c {
                    '[' => {
                        in_index = true;
                        out.push_str("[*");
                    }
                    ']' => {
                        in_index = false;
                        out.push(']');
                    }
                    _ if in_index => {}
                    _ => out.push(c),
                }
            }
            Location::Field(out)
        }
    }
}

/// Collects errors and warnings while the parsers walk a Service.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    pub(crate) errors: Vec<ParseError>,
    pub(crate) warnings: Vec<Warning>,
    /// Per capped location: errors seen, and where and of what kind the first one left out was.
    error_counts: std::collections::BTreeMap<Location, (usize, Option<(Location, ErrorKind)>)>,
    /// Per capped location: warnings seen, and where the first one left out was.
    warning_counts: std::collections::BTreeMap<Location, (usize, Option<Location>)>,
}

impl Diagnostics {
    /// Records an error (the first [`MAX_PER_LOCATION`] per location; the rest are counted).
    pub(crate) fn error(
        &mut self,
        location: Location,
        value: Option<&str>,
        kind: ErrorKind,
        detail: impl Into<String>,
    ) {
        let seen = self.error_counts.entry(cap_key(&location)).or_default();
        seen.0 += 1;
        if seen.0 > MAX_PER_LOCATION {
            seen.1.get_or_insert((location, kind));
            return;
        }
        self.errors.push(ParseError {
            location,
            value: value.map(|v| truncate(v, MAX_VALUE_BYTES).into_owned()),
            kind,
            detail: truncate(&one_line(detail.into()), MAX_DETAIL_BYTES).into_owned(),
        });
    }

    /// Records a warning (the first [`MAX_PER_LOCATION`] per location; the rest are counted).
    pub(crate) fn warn(
        &mut self,
        location: Location,
        value: Option<&str>,
        detail: impl Into<String>,
    ) {
        let seen = self.warning_counts.entry(cap_key(&location)).or_default();
        seen.0 += 1;
        if seen.0 > MAX_PER_LOCATION {
            seen.1.get_or_insert(location);
            return;
        }
        self.warnings.push(Warning {
            location,
            value: value.map(|v| truncate(v, MAX_VALUE_BYTES).into_owned()),
            detail: truncate(&one_line(detail.into()), MAX_DETAIL_BYTES).into_owned(),
        });
    }

    /// The collected errors and warnings, each capped location followed by one summary line
    /// (located at the first entry left out, so it names a real key or field).
    pub(crate) fn finish(mut self) -> (Vec<ParseError>, Vec<Warning>) {
        for (key, (seen, first)) in &self.error_counts {
            if let (Some((location, kind)), Some(more)) =
                (first, seen.checked_sub(MAX_PER_LOCATION))
            {
                let at = insert_position(&self.errors, key, |e| &e.location);
                self.errors.insert(
                    at,
                    ParseError {
                        location: location.clone(),
                        value: None,
                        kind: *kind,
                        detail: summary_line(more, "errors", key),
                    },
                );
            }
        }
        for (key, (seen, first)) in &self.warning_counts {
            if let (Some(location), Some(more)) = (first, seen.checked_sub(MAX_PER_LOCATION)) {
                let at = insert_position(&self.warnings, key, |w| &w.location);
                self.warnings.insert(
                    at,
                    Warning {
                        location: location.clone(),
                        value: None,
                        detail: summary_line(more, "warnings", key),
                    },
                );
            }
        }
        (self.errors, self.warnings)
    }
}

/// `… and 9,300 more warnings for annotation k (only the first 5 are listed)`.
fn summary_line(more: usize, what: &str, key: &Location) -> String {
    format!(
        "… and {} more {what} for {key} (only the first {MAX_PER_LOCATION} are listed)",
        group_thousands(more)
    )
}

/// Just after the last listed entry of the same capped location, so the summary reads as the
/// end of its group.
fn insert_position<T>(items: &[T], key: &Location, location: impl Fn(&T) -> &Location) -> usize {
    items
        .iter()
        .rposition(|item| cap_key(location(item)) == *key)
        .map_or(items.len(), |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_cuts_at_a_character_boundary() {
        let cases: &[(&str, usize, &str)] = &[
            ("short", 10, "short"),
            ("exactly10!", 10, "exactly10!"),
            ("abcdefghijk", 3, "abc… (11 bytes in all)"),
            // 'é' is two bytes: a cut inside it moves back to the boundary.
            ("aéb", 2, "a… (4 bytes in all)"),
            ("€€", 4, "€… (6 bytes in all)"),
        ];
        for (text, max, want) in cases {
            assert_eq!(truncate(text, *max), *want, "{text:?} at {max}");
        }
    }

    #[test]
    fn details_are_one_line() {
        let mut diag = Diagnostics::default();
        diag.error(
            Location::annotation("k"),
            Some("a\nb"),
            ErrorKind::Invalid,
            "a\nb: value \"\" is bad\r",
        );
        diag.warn(Location::annotation("k"), None, "tab\there");
        let (errors, warnings) = diag.finish();
        assert_eq!(errors[0].detail, "a\\nb: value \"\" is bad\\r");
        assert_eq!(warnings[0].detail, "tab\\there");
        assert!(!errors[0].to_string().contains('\n'));
    }

    #[test]
    fn thousands_are_grouped() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1000, "1,000"),
            (9300, "9,300"),
            (1234567, "1,234,567"),
        ] {
            assert_eq!(group_thousands(n), want);
        }
    }

    #[test]
    fn cap_key_ignores_list_indices() {
        assert_eq!(
            cap_key(&Location::field("spec.ports[12].name")),
            Location::field("spec.ports[*].name")
        );
        assert_eq!(
            cap_key(&Location::annotation("a[1]")),
            Location::annotation("a[1]")
        );
    }

    #[test]
    fn repeated_diagnostics_are_capped_and_summarised() {
        let mut diag = Diagnostics::default();
        let huge = "x".repeat(100_000);
        for i in 0..9_310 {
            diag.warn(Location::annotation("k"), Some(&huge), format!("item {i}"));
            diag.error(
                Location::field(format!("spec.ports[{i}].name")),
                Some(&huge),
                ErrorKind::Invalid,
                "bad",
            );
        }
        diag.warn(Location::annotation("other"), None, "one");
        let (errors, warnings) = diag.finish();
        assert_eq!(errors.len(), MAX_PER_LOCATION + 1);
        assert_eq!(warnings.len(), MAX_PER_LOCATION + 2);
        assert_eq!(
            errors[MAX_PER_LOCATION].to_string(),
            "spec.ports[5].name: … and 9,305 more errors for spec.ports[*].name (only the first \
             5 are listed)"
        );
        assert_eq!(
            warnings[MAX_PER_LOCATION].to_string(),
            "annotation k: … and 9,305 more warnings for annotation k (only the first 5 are \
             listed)"
        );
        assert_eq!(warnings[MAX_PER_LOCATION + 1].detail, "one");
        let longest = errors
            .iter()
            .map(|e| e.to_string().len())
            .max()
            .unwrap_or(0);
        assert!(longest < 400, "a diagnostic of {longest} bytes");
    }
}

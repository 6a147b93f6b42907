//! What `parse` reports: errors (the Service cannot be realised as written) and warnings (it can,
//! but upstream would have done something surprising). Both name where the value came from, the
//! value, and what is allowed, in one line suitable for `kube-lb lint` and a Kubernetes Event.

use std::fmt;

use serde::Serialize;

/// Where a reported value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
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

/// Collects errors and warnings while the parsers walk a Service.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    pub(crate) errors: Vec<ParseError>,
    pub(crate) warnings: Vec<Warning>,
}

impl Diagnostics {
    /// Records an error.
    pub(crate) fn error(
        &mut self,
        location: Location,
        value: Option<&str>,
        kind: ErrorKind,
        detail: impl Into<String>,
    ) {
        self.errors.push(ParseError {
            location,
            value: value.map(str::to_owned),
            kind,
            detail: detail.into(),
        });
    }

    /// Records a warning.
    pub(crate) fn warn(
        &mut self,
        location: Location,
        value: Option<&str>,
        detail: impl Into<String>,
    ) {
        self.warnings.push(Warning {
            location,
            value: value.map(str::to_owned),
            detail: detail.into(),
        });
    }
}

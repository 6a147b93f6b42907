//! Seed 002 `topologyKeys`.
//!
//! The field was removed from the Kubernetes API (and from k8s-openapi 0.29), so a typed
//! `Service` cannot carry it. kube-lb keeps the seed's semantics through the annotation
//! `service.kubernetes.io/topology-keys` (comma-separated, same rules), and
//! [`lift_topology_keys`] moves a raw manifest's `spec.topologyKeys` into that annotation before
//! the manifest is deserialized, so `lint` and the embedded API server honour the field as
//! written in the seed examples.

use std::collections::HashSet;
use std::str::FromStr;

use serde_json::Value;

use super::Reader;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::common::TOPOLOGY_KEYS;
use crate::spec::TopologyKey;

/// At most this many keys (seed 002).
pub const MAX_TOPOLOGY_KEYS: usize = 16;

/// A string that is neither `*` nor a valid label key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a label key (optional DNS prefix and '/', then 1-63 alphanumerics, '-', '_' or '.') or \"*\""
)]
pub struct InvalidTopologyKey(pub String);

impl FromStr for TopologyKey {
    type Err = InvalidTopologyKey;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "*" => Ok(TopologyKey::Any),
            "kubernetes.io/hostname" => Ok(TopologyKey::Hostname),
            "topology.kubernetes.io/zone" => Ok(TopologyKey::Zone),
            "topology.kubernetes.io/region" => Ok(TopologyKey::Region),
            other if is_label_key(other) => Ok(TopologyKey::Label(other.to_owned())),
            other => Err(InvalidTopologyKey(other.to_owned())),
        }
    }
}

/// A Kubernetes label key: `[prefix/]name`.
fn is_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let name_ok = {
        let b = name.as_bytes();
        !b.is_empty()
            && b.len() <= 63
            && b.first().is_some_and(u8::is_ascii_alphanumeric)
            && b.last().is_some_and(u8::is_ascii_alphanumeric)
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                let b = label.as_bytes();
                let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
                !b.is_empty()
                    && b.len() <= 63
                    && b.first().is_some_and(alnum)
                    && b.last().is_some_and(alnum)
                    && b.iter().all(|c| alnum(c) || *c == b'-')
            })
    });
    name_ok && prefix_ok
}

/// One way a `topologyKeys` list breaks seed 002's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyKeysError {
    /// Combined with `externalTrafficPolicy: Local`.
    #[error("topology keys cannot be combined with externalTrafficPolicy: Local (seed 002)")]
    WithLocalPolicy,
    /// More than [`MAX_TOPOLOGY_KEYS`] entries.
    #[error("at most {MAX_TOPOLOGY_KEYS} keys are allowed, {0} given")]
    TooMany(usize),
    /// An empty entry (1-based position) between commas.
    #[error("entry {0} is empty; write keys separated by single commas")]
    Empty(usize),
    /// The same key twice.
    #[error("key {0:?} is listed twice")]
    Duplicate(String),
    /// `"*"` somewhere other than last.
    #[error("the catch-all \"*\" may only be the last key")]
    WildcardNotLast,
    /// Neither `*` nor a label key.
    #[error(transparent)]
    Invalid(#[from] InvalidTopologyKey),
}

impl TopologyKeysError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::WithLocalPolicy | Self::Duplicate(_) => ErrorKind::Conflict,
            Self::TooMany(_) => ErrorKind::OutOfRange,
            Self::Empty(_) | Self::WildcardNotLast | Self::Invalid(_) => ErrorKind::Invalid,
        }
    }
}

/// The one reading of a `topologyKeys` list, shared by `lint`, the controller (through
/// [`crate::parse`]) and the node proxy, so they cannot disagree: `raw` is the annotation's
/// comma-separated form (the API server and the manifest reader put the field there). Returns
/// the usable keys in order and every rule broken; a list with any problem must not be used.
/// An unset or blank list is no constraint.
pub fn check_topology_keys(
    raw: &str,
    external_local: bool,
) -> (Vec<TopologyKey>, Vec<TopologyKeysError>) {
    let entries: Vec<&str> = raw.split(',').map(str::trim).collect();
    let mut problems = Vec::new();
    if entries.iter().all(|e| e.is_empty()) {
        return (Vec::new(), problems);
    }
    if external_local {
        problems.push(TopologyKeysError::WithLocalPolicy);
    }
    if entries.len() > MAX_TOPOLOGY_KEYS {
        problems.push(TopologyKeysError::TooMany(entries.len()));
    }
    let mut keys = Vec::with_capacity(entries.len());
    let mut seen = HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        if entry.is_empty() {
            problems.push(TopologyKeysError::Empty(i + 1));
            continue;
        }
        match entry.parse::<TopologyKey>() {
            Ok(key) => {
                if !seen.insert(key.clone()) {
                    problems.push(TopologyKeysError::Duplicate((*entry).to_owned()));
                }
                if key == TopologyKey::Any && i + 1 != entries.len() {
                    problems.push(TopologyKeysError::WildcardNotLast);
                }
                keys.push(key);
            }
            Err(error) => problems.push(error.into()),
        }
    }
    (keys, problems)
}

pub(crate) fn parse(reader: &mut Reader<'_>, local_policy: bool) -> Vec<TopologyKey> {
    let Some(raw) = reader.get(TOPOLOGY_KEYS) else {
        return Vec::new();
    };
    let location = || Location::annotation(TOPOLOGY_KEYS);
    let (keys, problems) = check_topology_keys(raw, local_policy);
    for problem in problems {
        reader
            .diag
            .error(location(), Some(raw), problem.kind(), problem.to_string());
    }
    for key in &keys {
        if let TopologyKey::Label(label) = key {
            reader.diag.warn(
                location(),
                Some(raw),
                format!(
                    "{label:?} is not one of kubernetes.io/hostname, topology.kubernetes.io/zone, \
                     topology.kubernetes.io/region (the only keys seed 002 allows today); kube-lb \
                     matches it as a node label"
                ),
            );
        }
    }
    keys
}

/// Why a manifest's `spec.topologyKeys` could not be moved into the annotation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyLiftError {
    /// `spec.topologyKeys` is not a list of strings.
    #[error("spec.topologyKeys must be a list of strings")]
    NotAList,
    /// An entry contains a comma, which the annotation form cannot carry.
    #[error("spec.topologyKeys entry {0:?} contains a comma")]
    Comma(String),
    /// An entry with white space around it. The API server checks every entry as written
    /// (`ValidateService`: `"*"` or a qualified name), so it refuses this one; the annotation
    /// form, which is split at commas, is read trimmed.
    #[error(
        "spec.topologyKeys entry {0:?} has white space around it; the API server refuses it (each key is \"*\" or a label key, written without spaces)"
    )]
    Spaces(String),
    /// The annotation is already set to something else.
    #[error(
        "spec.topologyKeys ({field}) disagrees with annotation {TOPOLOGY_KEYS} ({annotation}); keep one"
    )]
    Conflict {
        /// The field, joined.
        field: String,
        /// The annotation already present.
        annotation: String,
    },
    /// `metadata` or `metadata.annotations` is not an object.
    #[error("metadata.annotations must be a map of strings")]
    BadMetadata,
}

/// Moves `spec.topologyKeys` of a raw Service manifest into the
/// `service.kubernetes.io/topology-keys` annotation (comma-joined) and removes the field.
///
/// Returns `Ok(true)` when something was moved, `Ok(false)` when the field is absent or empty.
/// Non-Service values are left alone. Call it before deserializing into a typed `Service`,
/// which would otherwise drop the field silently.
pub fn lift_topology_keys(manifest: &mut Value) -> Result<bool, TopologyLiftError> {
    let Some(object) = manifest.as_object_mut() else {
        return Ok(false);
    };
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(false);
    };
    let Some(field) = spec.get("topologyKeys") else {
        return Ok(false);
    };
    let entries = match field {
        Value::Null => Vec::new(),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or(TopologyLiftError::NotAList)
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err(TopologyLiftError::NotAList),
    };
    if let Some(bad) = entries.iter().find(|e| e.contains(',')) {
        return Err(TopologyLiftError::Comma(bad.clone()));
    }
    if let Some(spaced) = entries.iter().find(|e| e.trim() != e.as_str()) {
        return Err(TopologyLiftError::Spaces(spaced.clone()));
    }
    spec.remove("topologyKeys");
    if entries.is_empty() {
        return Ok(false);
    }
    let joined = entries.join(",");
    let metadata = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()
        .ok_or(TopologyLiftError::BadMetadata)?;
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if annotations.is_null() {
        *annotations = Value::Object(Default::default());
    }
    let annotations = annotations
        .as_object_mut()
        .ok_or(TopologyLiftError::BadMetadata)?;
    match annotations.get(TOPOLOGY_KEYS) {
        Some(Value::String(existing))
            if existing
                .split(',')
                .map(str::trim)
                .ne(entries.iter().map(|e| e.trim())) =>
        {
            Err(TopologyLiftError::Conflict {
                field: joined,
                annotation: existing.clone(),
            })
        }
        Some(Value::String(_)) => Ok(true),
        Some(_) => Err(TopologyLiftError::BadMetadata),
        None => {
            annotations.insert(TOPOLOGY_KEYS.to_owned(), Value::String(joined));
            Ok(true)
        }
    }
}

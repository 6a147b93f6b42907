//! Query parameters of list, watch and write requests.

use std::time::Duration;

use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{ObjectKey, ReadAt, WatchFrom};

/// Parsed query parameters.
#[derive(Debug, Default)]
pub struct Params {
    /// `watch=true`.
    pub watch: bool,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`.
    pub fields: FieldSelector,
    /// `limit` (0 = no limit).
    pub limit: usize,
    /// Decoded `continue` token.
    pub continue_from: Option<ContinueToken>,
    /// `resourceVersion`, as sent.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `propagationPolicy`.
    pub propagation_policy: Option<String>,
    /// `force` (server-side apply).
    pub force: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `includeObject` (Table rows).
    pub include_object: super::table::IncludeObject,
}

/// Where a paginated list continues: the version it is pinned to and the last key returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The list's resourceVersion.
    pub resource_version: u64,
    /// The last key already returned.
    pub after: ObjectKey,
}

impl ContinueToken {
    /// Opaque, URL-safe form.
    pub fn encode(&self) -> String {
        let raw = format!(
            "{}\u{0}{}\u{0}{}",
            self.resource_version, self.after.0, self.after.1
        );
        raw.bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses [`ContinueToken::encode`] output.
    pub fn decode(token: &str) -> Option<Self> {
        if !token.len().is_multiple_of(2) {
            return None;
        }
        let bytes: Option<Vec<u8>> = (0..token.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
            .collect();
        let raw = String::from_utf8(bytes?).ok()?;
        let mut parts = raw.split('\u{0}');
        let resource_version = parts.next()?.parse().ok()?;
        let namespace = parts.next()?.to_string();
        let name = parts.next()?.to_string();
        Some(Self {
            resource_version,
            after: (namespace, name),
        })
    }
}

fn truthy(value: &str) -> bool {
    matches!(value, "true" | "1" | "True")
}

fn parse_rv(value: &str) -> Result<u64, ApiError> {
    value.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resourceVersion {value:?}: must be a number"
        ))
    })
}

impl Params {
    /// Parses decoded query pairs.
    pub fn parse(pairs: &[(String, String)]) -> Result<Self, ApiError> {
        let mut params = Self::default();
        for (key, value) in pairs {
            match key.as_str() {
                "watch" => params.watch = truthy(value),
                "labelSelector" => {
                    params.labels = LabelSelector::parse(value).map_err(|e| {
                        ApiError::bad_request(format!("unable to parse requirement: {e}"))
                    })?;
                }
                "fieldSelector" => {
                    params.fields = FieldSelector::parse(value)
                        .map_err(|e| ApiError::bad_request(e.to_string()))?;
                }
                "limit" => {
                    params.limit = value
                        .parse()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit {value:?}")))?;
                }
                "continue" if !value.is_empty() => {
                    params.continue_from = Some(ContinueToken::decode(value).ok_or_else(|| {
                        ApiError::bad_request(
                            "continue key is not valid: incorrect encoded start resourceVersion",
                        )
                    })?);
                }
                "resourceVersion" if !value.is_empty() => {
                    params.resource_version = Some(value.clone());
                }
                "resourceVersionMatch" if !value.is_empty() => {
                    params.resource_version_match = Some(value.clone());
                }
                "allowWatchBookmarks" => params.bookmarks = truthy(value),
                "sendInitialEvents" => params.send_initial_events = truthy(value),
                "timeoutSeconds" => {
                    let secs: u64 = value.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid timeoutSeconds {value:?}"))
                    })?;
                    params.timeout = Some(Duration::from_secs(secs));
                }
                "dryRun" => params.dry_run = value == "All",
                "propagationPolicy" => params.propagation_policy = Some(value.clone()),
                "force" => params.force = truthy(value),
                "fieldManager" => params.field_manager = Some(value.clone()),
                "includeObject" => {
                    params.include_object = super::table::IncludeObject::parse(value)?;
                }
                _ => {}
            }
        }
        if let Some(policy) = &params.propagation_policy
            && !matches!(policy.as_str(), "Orphan" | "Background" | "Foreground")
        {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy {policy:?} is not supported: use Orphan, Background or Foreground"
            )));
        }
        Ok(params)
    }

    /// Which state a (non-continued) list reads.
    pub fn read_at(&self) -> Result<ReadAt, ApiError> {
        let Some(rv) = self.resource_version.as_deref() else {
            return Ok(ReadAt::Latest);
        };
        let rv = parse_rv(rv)?;
        match self.resource_version_match.as_deref() {
            Some("Exact") if rv == 0 => Err(ApiError::bad_request(
                "resourceVersionMatch=Exact requires a non-zero resourceVersion",
            )),
            Some("Exact") => Ok(ReadAt::Exact(rv)),
            Some("NotOlderThan") | None if rv == 0 => Ok(ReadAt::Latest),
            Some("NotOlderThan") => Ok(ReadAt::NotOlderThan(rv)),
            // Paging with a resourceVersion pins the list to that version (legacy semantics).
            None if self.limit > 0 => Ok(ReadAt::Exact(rv)),
            None => Ok(ReadAt::NotOlderThan(rv)),
            Some(other) => Err(ApiError::bad_request(format!(
                "resourceVersionMatch {other:?} is not supported"
            ))),
        }
    }

    /// Where a watch starts.
    pub fn watch_from(&self) -> Result<WatchFrom, ApiError> {
        if self.send_initial_events {
            return Ok(WatchFrom::Snapshot);
        }
        match self.resource_version.as_deref() {
            None | Some("0") => Ok(WatchFrom::Snapshot),
            Some(rv) => Ok(WatchFrom::Version(parse_rv(rv)?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Result<Params, ApiError> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Params::parse(&owned)
    }

    #[test]
    fn continue_token_round_trip() {
        let token = ContinueToken {
            resource_version: 42,
            after: ("ns".into(), "web-1".into()),
        };
        assert_eq!(ContinueToken::decode(&token.encode()), Some(token));
        assert_eq!(ContinueToken::decode("zz"), None);
        assert_eq!(ContinueToken::decode("abc"), None);
    }

    #[test]
    fn read_at_table() {
        type Case = (Vec<(&'static str, &'static str)>, Option<ReadAt>);
        let cases: Vec<Case> = vec![
            (vec![], Some(ReadAt::Latest)),
            (vec![("resourceVersion", "0")], Some(ReadAt::Latest)),
            (
                vec![("resourceVersion", "5")],
                Some(ReadAt::NotOlderThan(5)),
            ),
            (
                vec![("resourceVersion", "5"), ("limit", "10")],
                Some(ReadAt::Exact(5)),
            ),
            (
                vec![("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
                Some(ReadAt::Exact(5)),
            ),
            (
                vec![("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                None,
            ),
            (vec![("resourceVersion", "x")], None),
            (
                vec![("resourceVersion", "5"), ("resourceVersionMatch", "Odd")],
                None,
            ),
        ];
        for (pairs, want) in cases {
            let got = params(&pairs).and_then(|p| p.read_at()).ok();
            assert_eq!(got, want, "{pairs:?}");
        }
    }

    #[test]
    fn watch_from_table() {
        assert_eq!(
            params(&[]).unwrap().watch_from().unwrap(),
            WatchFrom::Snapshot
        );
        assert_eq!(
            params(&[("resourceVersion", "7")])
                .unwrap()
                .watch_from()
                .unwrap(),
            WatchFrom::Version(7)
        );
        assert_eq!(
            params(&[("resourceVersion", "7"), ("sendInitialEvents", "true")])
                .unwrap()
                .watch_from()
                .unwrap(),
            WatchFrom::Snapshot
        );
        assert!(params(&[("propagationPolicy", "Sideways")]).is_err());
        assert!(params(&[("labelSelector", "a in (b")]).is_err());
    }
}

//! Query parameters of list, watch and write requests.

use std::time::Duration;

use super::field_validation::Directive;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, Cause};
use crate::store::{ObjectKey, ReadAt, WatchFrom};

/// Parsed query parameters.
#[derive(Debug, Default, Clone)]
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
    /// `sendInitialEvents`, when sent (`false` differs from unset on watches).
    pub send_initial_events: Option<bool>,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Every `dryRun` value sent (kube-apiserver refuses any but `All`).
    pub dry_run_values: Vec<String>,
    /// `propagationPolicy`.
    pub propagation_policy: Option<String>,
    /// `force` (server-side apply).
    pub force: bool,
    /// Whether `force` was sent at all (it is refused on patches other than apply).
    pub force_given: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
    /// `includeObject` (Table rows).
    pub include_object: super::table::IncludeObject,
    /// `fieldValidation`, as sent (checked by the write options' validation).
    pub field_validation: Option<String>,
}

/// Where a paginated list continues: the version it is pinned to and the last key returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContinueToken {
    /// The list's resourceVersion; `None` continues from the newest state, as the token a
    /// 410 for an expired continue carries (kube-apiserver encodes it as resourceVersion -1).
    pub resource_version: Option<u64>,
    /// The last key already returned.
    pub after: ObjectKey,
}

impl ContinueToken {
    /// Opaque, URL-safe form.
    pub fn encode(&self) -> String {
        let version = self
            .resource_version
            .map_or_else(|| "-1".to_string(), |rv| rv.to_string());
        let raw = format!("{version}\u{0}{}\u{0}{}", self.after.0, self.after.1);
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
        let resource_version = match parts.next()? {
            "-1" => None,
            rv => Some(rv.parse().ok()?),
        };
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
                    let limit: i64 = value
                        .parse()
                        .map_err(|_| ApiError::bad_request(format!("invalid limit {value:?}")))?;
                    // `limit` is an int64; storage pages only when it is positive, so zero
                    // and negative values list everything.
                    params.limit = usize::try_from(limit).unwrap_or(0);
                }
                "continue" if !value.is_empty() => {
                    params.continue_from = Some(ContinueToken::decode(value).ok_or_else(|| {
                        ApiError::bad_request(
                            "invalid continue token: continue key is not valid: incorrect encoded start resourceVersion",
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
                "sendInitialEvents" => params.send_initial_events = Some(truthy(value)),
                "timeoutSeconds" => {
                    let secs: u64 = value.parse().map_err(|_| {
                        ApiError::bad_request(format!("invalid timeoutSeconds {value:?}"))
                    })?;
                    params.timeout = Some(Duration::from_secs(secs));
                }
                "dryRun" => {
                    params.dry_run |= value == "All";
                    params.dry_run_values.push(value.clone());
                }
                "propagationPolicy" => params.propagation_policy = Some(value.clone()),
                "force" => {
                    params.force = truthy(value);
                    params.force_given = true;
                }
                "fieldManager" => params.field_manager = Some(value.clone()),
                "fieldValidation" => params.field_validation = Some(value.clone()),
                "includeObject" => {
                    params.include_object = super::table::IncludeObject::parse(value)?;
                }
                _ => {}
            }
        }
        Ok(params)
    }

    /// Checks the list/watch options the way kube-apiserver's `ValidateListOptions` does
    /// (k8s.io/apimachinery/pkg/apis/meta/internalversion/validation/validation.go, with the
    /// WatchList feature on): a failure is a 422 `ListOptions.meta.k8s.io "" is invalid`.
    pub fn validate_list_options(&self, watch: bool) -> Result<(), ApiError> {
        const FIELD: &str = "resourceVersionMatch";
        let rv_match = self.resource_version_match.as_deref();
        let mut causes = Vec::new();
        if watch {
            if self.send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
                causes.push(Cause::forbidden(
                    FIELD,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(rv_match) = rv_match {
                if self.send_initial_events.is_none() {
                    causes.push(Cause::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if rv_match != "NotOlderThan" {
                    causes.push(Cause::not_supported(FIELD, rv_match, &["NotOlderThan"]));
                }
                if self.continue_from.is_some() {
                    causes.push(Cause::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(rv_match) = rv_match {
                if self.resource_version.is_none() {
                    causes.push(Cause::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if self.continue_from.is_some() {
                    causes.push(Cause::forbidden(
                        FIELD,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                if !matches!(rv_match, "Exact" | "NotOlderThan") {
                    causes.push(Cause::not_supported(
                        FIELD,
                        rv_match,
                        &["Exact", "NotOlderThan", ""],
                    ));
                }
                if rv_match == "Exact" && self.resource_version.as_deref() == Some("0") {
                    causes.push(Cause::forbidden(
                        FIELD,
                        "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                    ));
                }
            }
            if self.send_initial_events.is_some() {
                causes.push(Cause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_options("ListOptions", causes))
        }
    }

    /// Which state a (non-continued) list reads. Call after
    /// [`Params::validate_list_options`].
    pub fn read_at(&self) -> Result<ReadAt, ApiError> {
        let Some(rv) = self.resource_version.as_deref() else {
            return Ok(ReadAt::Latest);
        };
        let rv = parse_rv(rv)?;
        match self.resource_version_match.as_deref() {
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

    /// Whether a watch starts with the current objects as ADDED events. An explicit
    /// `sendInitialEvents` decides; unset, a watch from resourceVersion "" or "0" is
    /// defaulted to `sendInitialEvents=true` (apimachinery's `SetListOptionsDefaults` with
    /// the WatchList feature on), so it also ends its initial events with the
    /// `k8s.io/initial-events-end` bookmark when bookmarks were allowed.
    pub fn sends_initial_events(&self) -> bool {
        self.send_initial_events.unwrap_or_else(|| {
            self.resource_version_match.is_none()
                && matches!(self.resource_version.as_deref(), None | Some("0"))
        })
    }

    /// Where a watch starts. Call after [`Params::validate_list_options`].
    pub fn watch_from(&self) -> Result<WatchStart, ApiError> {
        let rv = match self.resource_version.as_deref() {
            None => 0,
            Some(rv) => parse_rv(rv)?,
        };
        Ok(if self.sends_initial_events() {
            // The initial state must be at least as new as the resourceVersion asked for.
            WatchStart::Snapshot { not_older_than: rv }
        } else if rv == 0 {
            // `sendInitialEvents=false` from "" or "0": changes from now on only
            // (watch_cache.go getAllEventsSinceLocked).
            WatchStart::Now
        } else {
            WatchStart::From(WatchFrom::Version(rv))
        })
    }
}

/// The causes kube-apiserver's `ValidateDryRun` finds: only `All` is a dry-run mode
/// (k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go).
pub fn dry_run_causes<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Cause> {
    let refused: Vec<&str> = values.into_iter().filter(|v| *v != "All").collect();
    if refused.is_empty() {
        return Vec::new();
    }
    let shown = refused
        .iter()
        .map(|v| format!("{v:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    vec![Cause {
        reason: "FieldValueNotSupported",
        message: format!("Unsupported value: []string{{{shown}}}: supported values: \"All\""),
        field: "dryRun".to_string(),
    }]
}

/// The causes of an unsupported `propagationPolicy` (`ValidateDeleteOptions`).
pub fn propagation_policy_causes(policy: Option<&str>) -> Vec<Cause> {
    match policy {
        None | Some("Foreground" | "Background" | "Orphan") => Vec::new(),
        Some(other) => vec![Cause::not_supported(
            "propagationPolicy",
            other,
            &["Foreground", "Background", "Orphan", "nil"],
        )],
    }
}

impl Params {
    /// Checks `CreateOptions` / `UpdateOptions` (`kind`): a bad `dryRun` or `fieldValidation`
    /// is a 422 before anything is written (handlers/create.go, handlers/update.go).
    pub fn validate_write_options(&self, kind: &str) -> Result<(), ApiError> {
        let mut causes = dry_run_causes(self.dry_run_values.iter().map(String::as_str));
        causes.extend(self.field_validation_causes());
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_options(kind, causes))
        }
    }

    /// What to do with fields the kind does not have (`fieldValidation`; Warn by default).
    pub fn field_directive(&self) -> Directive {
        self.field_validation
            .as_deref()
            .and_then(Directive::parse)
            .unwrap_or_default()
    }

    fn field_validation_causes(&self) -> Vec<Cause> {
        match self.field_validation.as_deref() {
            Some(value) if Directive::parse(value).is_none() => {
                vec![super::field_validation::unsupported(value)]
            }
            _ => Vec::new(),
        }
    }

    /// Checks `PatchOptions` as `ValidatePatchOptions` does: `force` only with apply, a
    /// `fieldManager` required for apply, `dryRun` only `All`.
    pub fn validate_patch_options(&self, apply: bool) -> Result<(), ApiError> {
        let mut causes = Vec::new();
        if !apply && self.force_given {
            causes.push(Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        if apply && self.field_manager.as_deref().is_none_or(str::is_empty) {
            causes.push(Cause {
                reason: "FieldValueRequired",
                message: "Required value: is required for apply patch".to_string(),
                field: "fieldManager".to_string(),
            });
        }
        causes.extend(dry_run_causes(
            self.dry_run_values.iter().map(String::as_str),
        ));
        causes.extend(self.field_validation_causes());
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_options("PatchOptions", causes))
        }
    }
}

/// Where a watch begins, as the request asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// The current objects first, from a state at least this new (0: any).
    Snapshot {
        /// The resourceVersion the initial state may not be older than.
        not_older_than: u64,
    },
    /// No initial objects; changes after the current resourceVersion.
    Now,
    /// As the store defines it.
    From(WatchFrom),
}

impl Params {
    /// Whether the request carried a resourceVersion other than "" and "0" (kube-apiserver
    /// refuses one together with a continue token).
    pub fn has_specific_resource_version(&self) -> bool {
        self.resource_version.as_deref().is_some_and(|rv| rv != "0")
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
    fn limit_pages_only_when_positive() {
        assert_eq!(params(&[("limit", "2")]).unwrap().limit, 2);
        assert_eq!(params(&[("limit", "-5")]).unwrap().limit, 0);
        assert!(params(&[("limit", "many")]).is_err());
    }

    #[test]
    fn continue_token_round_trip() {
        let token = ContinueToken {
            resource_version: Some(42),
            after: ("ns".into(), "web-1".into()),
        };
        assert_eq!(ContinueToken::decode(&token.encode()), Some(token));
        let newest = ContinueToken {
            resource_version: None,
            after: ("ns".into(), "web-1".into()),
        };
        assert_eq!(ContinueToken::decode(&newest.encode()), Some(newest));
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
            let got = params(&pairs)
                .and_then(|p| p.validate_list_options(false).and_then(|()| p.read_at()))
                .ok();
            assert_eq!(got, want, "{pairs:?}");
        }
    }

    #[test]
    fn watch_from_table() {
        type Case = (Vec<(&'static str, &'static str)>, WatchStart, bool);
        let snapshot = |rv| WatchStart::Snapshot { not_older_than: rv };
        // (query, where the watch starts, whether the initial-events-end bookmark may follow)
        let cases: Vec<Case> = vec![
            (vec![], snapshot(0), true),
            (vec![("resourceVersion", "0")], snapshot(0), true),
            (
                vec![("resourceVersion", "7")],
                WatchStart::From(WatchFrom::Version(7)),
                false,
            ),
            (
                vec![
                    ("resourceVersion", "7"),
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                snapshot(7),
                true,
            ),
            (
                vec![
                    ("sendInitialEvents", "false"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                WatchStart::Now,
                false,
            ),
            (
                vec![
                    ("resourceVersion", "7"),
                    ("sendInitialEvents", "false"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                WatchStart::From(WatchFrom::Version(7)),
                false,
            ),
        ];
        for (pairs, want, initial) in cases {
            let p = params(&pairs).unwrap();
            p.validate_list_options(true).unwrap();
            assert_eq!(p.watch_from().unwrap(), want, "{pairs:?}");
            assert_eq!(p.sends_initial_events(), initial, "{pairs:?}");
        }
        assert!(
            params(&[("propagationPolicy", "Sideways")])
                .is_ok_and(
                    |p| !propagation_policy_causes(p.propagation_policy.as_deref()).is_empty()
                )
        );
        assert!(params(&[("labelSelector", "a in (b")]).is_err());
    }

    /// kube-apiserver's `ValidateListOptions` cases: (query, watch, the failing causes' fields
    /// and reasons; empty when valid).
    #[test]
    fn list_options_validation_table() {
        type Case = (Vec<(&'static str, &'static str)>, bool, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                vec![("resourceVersion", "5"), ("resourceVersionMatch", "Exact")],
                false,
                vec![],
            ),
            (
                vec![("resourceVersionMatch", "NotOlderThan")],
                false,
                vec!["FieldValueForbidden"],
            ),
            (
                vec![("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                false,
                vec!["FieldValueForbidden"],
            ),
            (
                vec![("resourceVersion", "5"), ("resourceVersionMatch", "Odd")],
                false,
                vec!["FieldValueNotSupported"],
            ),
            (
                vec![("sendInitialEvents", "true")],
                false,
                vec!["FieldValueForbidden"],
            ),
            (
                vec![("sendInitialEvents", "true")],
                true,
                vec!["FieldValueForbidden"],
            ),
            (
                vec![
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                true,
                vec![],
            ),
            (
                vec![
                    ("resourceVersion", "3"),
                    ("resourceVersionMatch", "NotOlderThan"),
                ],
                true,
                vec!["FieldValueForbidden"],
            ),
            (
                vec![
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "Exact"),
                ],
                true,
                vec!["FieldValueForbidden", "FieldValueNotSupported"],
            ),
            (vec![("resourceVersion", "3")], true, vec![]),
        ];
        for (pairs, watch, want) in cases {
            let got = params(&pairs).unwrap().validate_list_options(watch);
            match got {
                Ok(()) => assert!(want.is_empty(), "{pairs:?} watch={watch}: accepted"),
                Err(error) => {
                    assert_eq!(error.code, 422, "{pairs:?}");
                    assert!(
                        error
                            .message
                            .starts_with("ListOptions.meta.k8s.io \"\" is invalid: ")
                    );
                    let reasons: Vec<&str> =
                        error.details.causes.iter().map(|c| c.reason).collect();
                    assert_eq!(reasons, want, "{pairs:?} watch={watch}");
                    assert!(error.details.causes.iter().all(|c| !c.field.is_empty()));
                }
            }
        }
    }
}

//! Errors of this crate, and the classification of Compute API failures into the controller's
//! classes (retryable, user error, internal).

use std::time::Duration;

use kube_lb_provider_core::{EnvironmentCause, ProviderError};

/// Why the provider could not be constructed.
#[derive(Debug, thiserror::Error)]
pub enum GcpError {
    /// The cloud-config file could not be read.
    #[error("reading cloud config {path}")]
    ReadConfig {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The cloud-config is incomplete or malformed.
    #[error("cloud config: {0}")]
    Config(String),
    /// A Compute API client could not be built.
    #[error("building the {service} client")]
    Client {
        /// The service client (e.g. `ForwardingRules`).
        service: &'static str,
        /// The builder error.
        #[source]
        source: google_cloud_gax::client_builder::Error,
    },
    /// A call made while starting (listing zones) failed.
    #[error("starting the GCP provider")]
    Startup(#[source] ProviderError),
}

/// One failed Compute call, reduced to what decisions need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status (or the operation's `httpErrorStatusCode`), when known.
    pub status: Option<u16>,
    /// `errors[0].reason` for synchronous errors, `errors[0].code` for operation errors.
    pub reason: String,
    /// The message.
    pub message: String,
    /// `Retry-After`, when the server sent one.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// From a client error (HTTP status, headers and the GCE error body).
    ///
    /// The client parses GCE's JSON error body itself when it can (`{error: {code, message,
    /// errors: [{reason, …}]}}` becomes a status whose details carry each `reason`), and keeps
    /// the raw body only when it cannot; a retry wrapper hides the answer one level down. All
    /// three are read here, so a decision by `reason` (throttling answered with 403, quota,
    /// "already a member") does not depend on which shape the client chose.
    pub fn from_client(error: &google_cloud_compute_v1::Error) -> Failure {
        let answer = answered(error);
        let status = answer.http_status_code();
        let retry_after = answer
            .http_headers()
            .and_then(|h| h.get("retry-after"))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        if let Some(parsed) = answer.status() {
            let reason = parsed
                .details
                .iter()
                .find_map(|detail| match detail {
                    google_cloud_gax::error::rpc::StatusDetails::ErrorInfo(info)
                        if !info.reason.is_empty() =>
                    {
                        Some(info.reason.clone())
                    }
                    _ => None,
                })
                .unwrap_or_default();
            let message = if parsed.message.is_empty() {
                error.to_string()
            } else {
                parsed.message.clone()
            };
            return Failure {
                status,
                reason,
                message,
                retry_after,
            };
        }
        let body: Option<serde_json::Value> = answer
            .http_payload()
            .and_then(|p| serde_json::from_slice(p).ok());
        let detail = body.as_ref().and_then(|b| b.pointer("/error/errors/0"));
        let reason = detail
            .and_then(|d| d.get("reason"))
            .and_then(|r| r.as_str())
            .unwrap_or_default()
            .to_string();
        let message = body
            .as_ref()
            .and_then(|b| b.pointer("/error/message"))
            .and_then(|m| m.as_str())
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        Failure {
            status,
            reason,
            message,
            retry_after,
        }
    }

    /// 404.
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404) || self.reason == "RESOURCE_NOT_FOUND"
    }

    /// 409 (name taken).
    pub fn is_conflict(&self) -> bool {
        self.status == Some(409)
    }

    /// The request rate was refused: a rate-limit reason (GCE answers those with 403) or 429.
    /// Counted apart from other transient failures (`kube_lb_cloud_throttled_total`).
    pub fn is_throttled(&self) -> bool {
        RATE_LIMIT_REASONS.contains(&self.reason.as_str()) || self.status == Some(429)
    }

    /// 400 "in use" (the upstream provider string-matches "being used by" too).
    pub fn is_in_use(&self) -> bool {
        self.reason == "resourceInUseByAnotherResource"
            || self.reason == "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE"
            || self.message.contains("being used by")
    }

    /// Throttling, server errors, stale fingerprints and transport failures.
    pub fn is_retryable(&self) -> bool {
        match self.status {
            None => true,
            Some(429 | 412) => true,
            Some(403) => matches!(
                self.reason.as_str(),
                "rateLimitExceeded" | "userRateLimitExceeded" | "RATE_LIMIT_EXCEEDED"
            ),
            Some(s) => s >= 500,
        }
    }

    /// Worth repeating the same request at once (after `Retry-After`): throttling, server
    /// errors, transport failures. A stale fingerprint (412) is not: it needs a fresh read.
    pub fn retry_in_place(&self) -> bool {
        self.is_retryable() && self.status != Some(412)
    }

    /// Classifies for the controller: see [`classify`].
    pub fn into_provider_error(self, operation: &'static str) -> ProviderError {
        let text = match self.status {
            Some(status) => format!("HTTP {status} {}: {}", self.reason, self.message),
            None => self.message.clone(),
        };
        match classify(&self) {
            Class::Retryable if self.is_throttled() => ProviderError::throttled(operation, text),
            Class::Retryable => ProviderError::Retryable {
                operation,
                message: text,
                source: None,
            },
            Class::Environment(cause) => ProviderError::environment(operation, cause, text),
            Class::User => ProviderError::User {
                message: format!("{operation}: {text}"),
            },
            Class::Unknown => ProviderError::Internal {
                message: format!("{operation}: {text}"),
                source: None,
            },
        }
    }
}

/// The error of an attempt that got no answer within `after` (the client's attempt timeout,
/// or the fence around the whole attempt, credentials included): the same kind the SDK gives
/// for its own deadline, so [`Failure::from_client`] reads both alike, as a transport failure
/// ([`Class::Retryable`]).
pub fn timed_out(after: Duration) -> google_cloud_compute_v1::Error {
    google_cloud_gax::error::Error::timeout(format!("no answer within {after:?}"))
}

/// What the controller should do about one Compute failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Throttling, 5xx, transport failures, stale fingerprints, resources not ready: retry.
    Retryable,
    /// Something outside the Service blocks it.
    Environment(EnvironmentCause),
    /// Only the Service's author can fix it (a value from the Service GCE refuses).
    User,
    /// Anything else: retried with backoff, reported as is.
    Unknown,
}

/// The error that carries GCE's answer: `error` itself, or the one a retry wrapper holds.
fn answered(error: &google_cloud_compute_v1::Error) -> &google_cloud_compute_v1::Error {
    let mut current = error;
    while current.status().is_none() && current.http_status_code().is_none() {
        match std::error::Error::source(current)
            .and_then(|inner| inner.downcast_ref::<google_cloud_compute_v1::Error>())
        {
            Some(inner) => current = inner,
            None => break,
        }
    }
    current
}

/// `reason` values (synchronous errors) and operation error `code`s meaning a quota is used up.
const QUOTA_REASONS: &[&str] = &["quotaExceeded", "QUOTA_EXCEEDED", "limitExceeded"];

/// Reasons and codes of conditions that pass: a resource still being created or deleted, one
/// still referenced by another that is going away.
const NOT_READY_REASONS: &[&str] = &[
    "resourceNotReady",
    "RESOURCE_NOT_READY",
    "resourceInUseByAnotherResource",
    "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE",
    "conditionNotMet",
    "CONDITION_NOT_MET",
    "backendError",
    "internalError",
    "INTERNAL_ERROR",
    "ZONE_RESOURCE_POOL_EXHAUSTED",
];

/// Reasons meaning the controller's service account may not make the call (or the Compute API
/// is not enabled for the project).
const PERMISSION_REASONS: &[&str] = &[
    "forbidden",
    "insufficientPermissions",
    "accessNotConfigured",
    "IAM_PERMISSION_DENIED",
    "PERMISSION_DENIED",
    "authError",
];

/// Reasons meaning a name is held by a resource that is not ours (ours are adopted before a
/// failure gets here).
const NAME_TAKEN_REASONS: &[&str] = &["alreadyExists", "ALREADY_EXISTS", "RESOURCE_ALREADY_EXISTS"];

/// Reasons meaning a static address is held by another resource.
const ADDRESS_IN_USE_REASONS: &[&str] = &[
    "IP_IN_USE_BY_ANOTHER_RESOURCE",
    "ipInUseByAnotherResource",
    "ADDRESS_IN_USE",
];

/// Reasons meaning the project's request rate was exceeded.
const RATE_LIMIT_REASONS: &[&str] = &[
    "rateLimitExceeded",
    "userRateLimitExceeded",
    "RATE_LIMIT_EXCEEDED",
];

/// Reasons meaning something the load balancer refers to (network, subnetwork, address,
/// instance group) does not exist.
const MISSING_REASONS: &[&str] = &["notFound", "RESOURCE_NOT_FOUND"];

/// Classifies one failure by `reason` first (GCE reuses statuses: 403 is both a quota, a
/// throttle and a permission error), then by HTTP status. Pure, so the table is tested
/// without GCE.
pub fn classify(failure: &Failure) -> Class {
    let reason = failure.reason.as_str();
    if RATE_LIMIT_REASONS.contains(&reason)
        || NOT_READY_REASONS.contains(&reason)
        || failure.is_in_use()
    {
        return Class::Retryable;
    }
    if QUOTA_REASONS.contains(&reason) {
        return Class::Environment(EnvironmentCause::Quota);
    }
    if ADDRESS_IN_USE_REASONS.contains(&reason) {
        return Class::Environment(EnvironmentCause::AddressInUse);
    }
    if NAME_TAKEN_REASONS.contains(&reason) {
        return Class::Environment(EnvironmentCause::NameTaken);
    }
    if PERMISSION_REASONS.contains(&reason) {
        return Class::Environment(EnvironmentCause::PermissionDenied);
    }
    if MISSING_REASONS.contains(&reason) {
        return Class::Environment(EnvironmentCause::MissingDependency);
    }
    match failure.status {
        // No answer at all: a transport failure or a timeout.
        None if reason.is_empty() => Class::Retryable,
        Some(408 | 412 | 429) => Class::Retryable,
        Some(s) if s >= 500 => Class::Retryable,
        Some(401 | 403) => Class::Environment(EnvironmentCause::PermissionDenied),
        // Callers that expect "not found" (reads, deletes) handle it before converting; a 404
        // left over means a create referred to something missing.
        Some(404) => Class::Environment(EnvironmentCause::MissingDependency),
        Some(409) => Class::Environment(EnvironmentCause::NameTaken),
        Some(400) => Class::User,
        _ => Class::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: Option<u16>, reason: &str, message: &str) -> Failure {
        Failure {
            status,
            reason: reason.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    /// Each Compute error (HTTP status, `reason` or operation error code) and its class.
    #[test]
    fn error_codes_map_to_classes() {
        use EnvironmentCause::*;
        let env = |c: EnvironmentCause| Some(c.as_str());
        let cases = [
            // throttling, server errors, transport, stale fingerprints: retried
            (
                failure(Some(429), "rateLimitExceeded", ""),
                "retryable",
                None,
            ),
            (
                failure(Some(403), "rateLimitExceeded", ""),
                "retryable",
                None,
            ),
            (
                failure(Some(403), "userRateLimitExceeded", ""),
                "retryable",
                None,
            ),
            (failure(None, "RATE_LIMIT_EXCEEDED", ""), "retryable", None),
            (failure(Some(500), "backendError", ""), "retryable", None),
            (failure(Some(503), "backendError", ""), "retryable", None),
            (failure(Some(502), "", ""), "retryable", None),
            (failure(Some(412), "conditionNotMet", ""), "retryable", None),
            (failure(Some(408), "", "timeout"), "retryable", None),
            (failure(None, "", "connection reset"), "retryable", None),
            // conflicts that pass
            (
                failure(Some(400), "resourceNotReady", ""),
                "retryable",
                None,
            ),
            (failure(None, "RESOURCE_NOT_READY", ""), "retryable", None),
            (
                failure(Some(400), "resourceInUseByAnotherResource", ""),
                "retryable",
                None,
            ),
            (
                failure(Some(400), "invalid", "is already being used by 'x'"),
                "retryable",
                None,
            ),
            // quotas
            (
                failure(Some(403), "quotaExceeded", "Quota 'FORWARDING_RULES'"),
                "environment",
                env(Quota),
            ),
            (
                failure(None, "QUOTA_EXCEEDED", "Quota 'IN_USE_ADDRESSES'"),
                "environment",
                env(Quota),
            ),
            (
                failure(Some(403), "limitExceeded", ""),
                "environment",
                env(Quota),
            ),
            // permission
            (
                failure(Some(403), "forbidden", ""),
                "environment",
                env(PermissionDenied),
            ),
            (
                failure(Some(403), "insufficientPermissions", ""),
                "environment",
                env(PermissionDenied),
            ),
            (
                failure(Some(403), "accessNotConfigured", ""),
                "environment",
                env(PermissionDenied),
            ),
            (
                failure(Some(401), "", ""),
                "environment",
                env(PermissionDenied),
            ),
            (
                failure(Some(403), "", ""),
                "environment",
                env(PermissionDenied),
            ),
            // a name or address held by someone else
            (
                failure(Some(409), "alreadyExists", ""),
                "environment",
                env(NameTaken),
            ),
            (
                failure(None, "ALREADY_EXISTS", ""),
                "environment",
                env(NameTaken),
            ),
            (failure(Some(409), "", ""), "environment", env(NameTaken)),
            (
                failure(None, "IP_IN_USE_BY_ANOTHER_RESOURCE", ""),
                "environment",
                env(AddressInUse),
            ),
            // missing dependencies (network, subnetwork, instance group)
            (
                failure(Some(404), "notFound", "network 'x' was not found"),
                "environment",
                env(MissingDependency),
            ),
            (
                failure(None, "RESOURCE_NOT_FOUND", ""),
                "environment",
                env(MissingDependency),
            ),
            // what only the Service's author can fix
            (failure(Some(400), "invalid", "bad IP"), "user", None),
            (failure(Some(400), "badRequest", ""), "user", None),
            // unknown
            (failure(Some(418), "teapot", ""), "internal", None),
            (failure(None, "SOMETHING_NEW", ""), "internal", None),
        ];
        for (failure, class, cause) in cases {
            let label = format!("{failure:?}");
            let error = failure.into_provider_error("op");
            assert_eq!(error.class(), class, "{label}");
            let got = match &error {
                ProviderError::Environment { cause, .. } => Some(cause.as_str()),
                _ => None,
            };
            assert_eq!(got, cause, "{label}");
        }
    }

    /// A call that got no answer in time (the SDK's attempt timeout, the fence around the
    /// whole attempt, a connection the peer dropped) is transient: retried in place and by
    /// the controller's backoff, never a user error.
    #[test]
    fn unanswered_calls_are_transient() {
        use google_cloud_gax::error::Error;
        let cases: [(&str, Error); 4] = [
            ("fence", timed_out(Duration::from_secs(30))),
            ("sdk deadline", Error::timeout("deadline exceeded")),
            ("io", Error::io("connection reset by peer")),
            ("connect", Error::connect("connection refused")),
        ];
        for (what, error) in cases {
            let failure = Failure::from_client(&error);
            assert_eq!(failure.status, None, "{what}");
            assert!(failure.retry_in_place(), "{what}: {failure:?}");
            assert!(!failure.is_throttled(), "{what}");
            let converted = failure.into_provider_error("forwardingRules.get");
            assert_eq!(converted.class(), "retryable", "{what}: {converted}");
            assert!(converted.is_transient(), "{what}: {converted}");
        }
        assert!(timed_out(Duration::from_secs(1)).is_timeout());
    }

    #[test]
    fn recognises_in_use_and_not_found() {
        assert!(failure(Some(400), "resourceInUseByAnotherResource", "").is_in_use());
        assert!(failure(Some(400), "invalid", "is already being used by 'x'").is_in_use());
        assert!(!failure(Some(400), "invalid", "bad").is_in_use());
        for (status, reason, throttled) in [
            (Some(403), "rateLimitExceeded", true),
            (Some(403), "userRateLimitExceeded", true),
            (None, "RATE_LIMIT_EXCEEDED", true),
            (Some(429), "", true),
            (Some(403), "forbidden", false),
            (Some(503), "backendError", false),
        ] {
            assert_eq!(
                failure(status, reason, "").is_throttled(),
                throttled,
                "{status:?} {reason}"
            );
        }
        assert!(failure(Some(404), "notFound", "").is_not_found());
        assert!(failure(None, "RESOURCE_NOT_FOUND", "").is_not_found());
    }
}

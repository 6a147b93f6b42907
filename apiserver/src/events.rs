//! Events are one stored object served through two APIs, as in kube-apiserver: `core/v1`
//! (what `kubectl get events` and `kubectl describe` read) and `events.k8s.io/v1` (what kube-rs'
//! recorder and client-go's `events` package write). The store keeps the core/v1 form; an
//! `events.k8s.io/v1` request is converted into it on write and out of it on read and watch, so
//! both APIs see the same name, uid, creationTimestamp and resourceVersion.
//!
//! The conversion is upstream's (pkg/apis/events/v1/conversion.go): fields are renamed, none
//! is made up. Validation is upstream's too (pkg/apis/core/validation/events.go): every Event
//! passes the legacy checks, and writes through `events.k8s.io/v1` get the strict ones. As
//! upstream validates the internal (core-shaped) object, field paths use the core/v1 names.

use serde_json::{Map, Value, json};

use crate::meta;
use crate::status::Cause;

/// Which API a write came through (decides how strictly it is validated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventApi {
    /// `core/v1` (`/api/v1/.../events`): legacy validation only.
    Core,
    /// `events.k8s.io/v1`: legacy plus strict validation.
    EventsV1,
}

/// `(events.k8s.io/v1 name, core/v1 name)` of every field the two forms share, as upstream's
/// conversion pairs them (`metadata` included, as it is).
const FIELDS: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingInstance", "reportingInstance"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("action", "action"),
    ("related", "related"),
    ("type", "type"),
    ("reason", "reason"),
];

/// upstream's `ReasonLengthLimit`, `ActionLengthLimit` and `ReportingInstanceLengthLimit`.
const SHORT_FIELD_LIMIT: usize = 128;
/// upstream's `NoteLengthLimit` (checked on `message`, the core name of `note`).
const NOTE_LIMIT: usize = 1024;

/// Which way [`convert`] renames.
#[derive(Debug, Clone, Copy)]
enum Direction {
    ToCore,
    ToEventsV1,
}

/// `event` in the other form: the shared fields renamed; fields the target form does not
/// have are dropped, as decoding into the typed object drops them upstream.
fn convert(event: &Value, direction: Direction) -> Value {
    let api_version = match direction {
        Direction::ToCore => "v1",
        Direction::ToEventsV1 => "events.k8s.io/v1",
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    for (events_name, core_name) in FIELDS {
        let (from, to) = match direction {
            Direction::ToCore => (events_name, core_name),
            Direction::ToEventsV1 => (core_name, events_name),
        };
        if let Some(value) = event.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), value.clone());
        }
    }
    Value::Object(out)
}

/// An `events.k8s.io/v1` Event in its `core/v1` (stored) form.
pub fn to_core_v1(event: &Value) -> Value {
    convert(event, Direction::ToCore)
}

/// A `core/v1` (stored) Event in its `events.k8s.io/v1` form.
pub fn to_events_v1(event: &Value) -> Value {
    convert(event, Direction::ToEventsV1)
}

/// Whether a Go field would hold its zero value: absent, null, `""`, `0`, `false`, `{}`, `[]`.
fn is_zero(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::Bool(b)) => !b,
        Some(Value::Object(m)) => m.values().all(|v| is_zero(Some(v))),
        Some(Value::Array(a)) => a.is_empty(),
    }
}

/// `value` with zero-valued members removed, so that two JSON spellings of one typed value
/// (`{}` and absent, `""` and absent) compare equal, as `apiequality.Semantic.DeepEqual` sees
/// them.
fn semantic(value: Option<&Value>) -> Value {
    match value {
        _ if is_zero(value) => Value::Null,
        Some(Value::Object(m)) => Value::Object(
            m.iter()
                .filter(|(_, v)| !is_zero(Some(v)))
                .map(|(k, v)| (k.clone(), semantic(Some(v))))
                .collect(),
        ),
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

fn str_field<'a>(event: &'a Value, path: &str) -> &'a str {
    event.pointer(path).and_then(Value::as_str).unwrap_or("")
}

/// `legacyValidateEvent`: what every Event must satisfy, through either API. `event` is in
/// core/v1 form.
fn legacy_causes(event: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let namespace = meta::namespace(event).unwrap_or("");
    let regarding_namespace = str_field(event, "/involvedObject/namespace");
    let namespace_mismatch = || {
        Cause::invalid(
            "involvedObject.namespace",
            regarding_namespace,
            "does not match event.namespace",
        )
    };
    if is_zero(event.get("eventTime")) {
        // An old-style Event: its namespace follows the object's (or is "default" for a
        // cluster-scoped object, for old clients).
        let agrees = if regarding_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            namespace == regarding_namespace
        };
        if !agrees {
            causes.push(namespace_mismatch());
        }
    } else {
        if regarding_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
            causes.push(namespace_mismatch());
        }
        let controller = str_field(event, "/reportingComponent");
        if controller.is_empty() {
            causes.push(Cause::required("reportingController"));
            causes.push(Cause::invalid(
                "reportingController",
                "",
                "name part must be non-empty",
            ));
        }
        if !meta::is_qualified_name(controller) {
            causes.push(Cause::invalid(
                "reportingController",
                controller,
                meta::QUALIFIED_NAME_DETAIL,
            ));
        }
        for (field, limit) in [
            ("reportingInstance", SHORT_FIELD_LIMIT),
            ("action", SHORT_FIELD_LIMIT),
            ("reason", SHORT_FIELD_LIMIT),
        ] {
            let value = str_field(event, &format!("/{field}"));
            if value.is_empty() {
                causes.push(Cause::required(field));
            }
            if value.len() > limit {
                causes.push(too_long(field, limit));
            }
        }
        if str_field(event, "/message").len() > NOTE_LIMIT {
            causes.push(too_long("message", NOTE_LIMIT));
        }
    }
    if !meta::is_dns1123_subdomain(namespace) {
        causes.push(Cause::invalid(
            "namespace",
            namespace,
            meta::DNS1123_SUBDOMAIN_DETAIL,
        ));
    }
    causes
}

fn too_long(field: &str, limit: usize) -> Cause {
    Cause::invalid(field, "", &format!("can have at most {limit} characters"))
}

/// `validateV1EventSeries`.
fn series_causes(event: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(series) = event.get("series").filter(|s| !s.is_null()) else {
        return causes;
    };
    if series.get("count").and_then(Value::as_i64).unwrap_or(0) < 2 {
        causes.push(Cause::invalid("series.count", "", "should be at least 2"));
    }
    if is_zero(series.get("lastObservedTime")) {
        causes.push(Cause::required("series.lastObservedTime"));
    }
    causes
}

/// `ValidateEventCreate`: `event` is the new Event in core/v1 form, written through `api`.
pub fn validate_create(event: &Value, api: EventApi) -> Vec<Cause> {
    let mut causes = legacy_causes(event);
    if api == EventApi::Core {
        // No further validation, for backwards compatibility.
        return causes;
    }
    causes.extend(series_causes(event));
    if is_zero(event.get("eventTime")) {
        causes.push(Cause::required("eventTime"));
    }
    let event_type = str_field(event, "/type");
    if event_type != "Normal" && event_type != "Warning" {
        causes.push(Cause::invalid(
            "type",
            "",
            &format!("has invalid value: {event_type}"),
        ));
    }
    for field in ["firstTimestamp", "lastTimestamp", "count"] {
        if !is_zero(event.get(field)) {
            causes.push(Cause::invalid(field, "", "needs to be unset"));
        }
    }
    let source = event.get("source");
    if !is_zero(source.and_then(|s| s.get("component")))
        || !is_zero(source.and_then(|s| s.get("host")))
    {
        causes.push(Cause::invalid("source", "", "needs to be unset"));
    }
    causes
}

/// `ValidateEventUpdate`: `new` and `old` in core/v1 form, `new` written through `api`.
/// Through `events.k8s.io/v1` only the series may change.
pub fn validate_update(new: &Value, old: &Value, api: EventApi) -> Vec<Cause> {
    let mut causes = legacy_causes(new);
    if api == EventApi::Core {
        return causes;
    }
    if semantic(new.get("series")) != semantic(old.get("series")) {
        causes.extend(series_causes(new));
    }
    // (core/v1 field, field path) in upstream's order; upstream checks `reason` twice and so
    // reports a changed reason twice.
    const IMMUTABLE: [(&str, &str); 14] = [
        ("involvedObject", "involvedObject"),
        ("reason", "reason"),
        ("message", "message"),
        ("source", "source"),
        ("firstTimestamp", "firstTimestamp"),
        ("lastTimestamp", "lastTimestamp"),
        ("count", "count"),
        ("reason", "reason"),
        ("type", "type"),
        ("eventTime", "eventTime"),
        ("action", "action"),
        ("related", "related"),
        ("reportingComponent", "reportingController"),
        ("reportingInstance", "reportingInstance"),
    ];
    for (field, path) in IMMUTABLE {
        let now = semantic(new.get(field));
        if now != semantic(old.get(field)) {
            causes.push(match &now {
                Value::String(s) => Cause::invalid(path, s, "field is immutable"),
                other => Cause::invalid_literal(path, &other.to_string(), "field is immutable"),
            });
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default", "uid": "u", "resourceVersion": "5"},
            "regarding": {"kind": "Service", "name": "web", "namespace": "default", "uid": "s"},
            "note": "load balancer ready", "reason": "EnsuredLoadBalancer", "type": "Normal",
            "action": "Ensure", "reportingController": "kube-lb", "reportingInstance": "kube-lb-0",
            "eventTime": "2025-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2025-01-01T00:05:00.000000Z"}
        })
    }

    #[test]
    fn recorder_event_becomes_core_event_by_renaming_only() {
        let core = to_core_v1(&recorder_event());
        assert_eq!(
            core,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "web.1", "namespace": "default", "uid": "u", "resourceVersion": "5"},
                "involvedObject": {"kind": "Service", "name": "web", "namespace": "default", "uid": "s"},
                "message": "load balancer ready", "reason": "EnsuredLoadBalancer", "type": "Normal",
                "action": "Ensure", "reportingComponent": "kube-lb", "reportingInstance": "kube-lb-0",
                "eventTime": "2025-01-01T00:00:00.000000Z",
                "series": {"count": 3, "lastObservedTime": "2025-01-01T00:05:00.000000Z"}
            })
        );
    }

    #[test]
    fn conversions_round_trip() {
        let event = recorder_event();
        assert_eq!(to_events_v1(&to_core_v1(&event)), event);
        let core = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "pulled",
            "source": {"component": "kubelet", "host": "n1"}, "count": 4,
            "firstTimestamp": "2025-01-01T00:00:00Z", "lastTimestamp": "2025-01-01T00:01:00Z",
            "reason": "Pulled", "type": "Normal"
        });
        let v1 = to_events_v1(&core);
        assert_eq!(v1["deprecatedSource"]["host"], "n1");
        assert_eq!(v1["deprecatedCount"], 4);
        assert_eq!(v1["deprecatedFirstTimestamp"], "2025-01-01T00:00:00Z");
        assert_eq!(v1["note"], "pulled");
        assert_eq!(to_core_v1(&v1), core);
    }

    #[test]
    fn fields_neither_api_knows_are_dropped() {
        let v1 = to_events_v1(&json!({"metadata": {"name": "e"}, "note": "x", "message": "m"}));
        assert_eq!(v1.get("message"), None);
        assert_eq!(v1["note"], "m");
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{} {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn create_validation_per_api() {
        let good = to_core_v1(&recorder_event());
        let with = |patch: Value| {
            let mut event = good.clone();
            for (k, v) in patch.as_object().unwrap() {
                event[k] = v.clone();
            }
            event
        };
        let long = "x".repeat(129);
        let cases: Vec<(&str, Value, EventApi, Vec<&str>)> = vec![
            ("recorder event", good.clone(), EventApi::EventsV1, vec![]),
            (
                "old-style core event",
                json!({"metadata": {"name": "e", "namespace": "default"},
                       "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "R"}),
                EventApi::Core,
                vec![],
            ),
            (
                "old-style core event in another namespace than its object",
                json!({"metadata": {"name": "e", "namespace": "a"},
                       "involvedObject": {"kind": "Pod", "name": "p", "namespace": "b"}}),
                EventApi::Core,
                vec![
                    "involvedObject.namespace Invalid value: \"b\": does not match event.namespace",
                ],
            ),
            (
                "old-style event through events.k8s.io",
                json!({"metadata": {"name": "e", "namespace": "default"},
                       "involvedObject": {"kind": "Node", "name": "n1"}, "reason": "R",
                       "type": "Normal", "count": 1, "source": {"component": "c"}}),
                EventApi::EventsV1,
                vec![
                    "eventTime Required value",
                    "count Invalid value: \"\": needs to be unset",
                    "source Invalid value: \"\": needs to be unset",
                ],
            ),
            (
                "new-style core event without its reporting fields",
                json!({"metadata": {"name": "e", "namespace": "default"},
                       "involvedObject": {"kind": "Service", "name": "s", "namespace": "default"},
                       "eventTime": "2025-01-01T00:00:00.000000Z", "reportingComponent": "Bad Name"}),
                EventApi::Core,
                vec![
                    "reportingController Invalid value: \"Bad Name\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                    "reportingInstance Required value",
                    "action Required value",
                    "reason Required value",
                ],
            ),
            (
                "over-long reason, action, instance and note",
                with(
                    json!({"reason": long, "action": long, "reportingInstance": long, "message": "n".repeat(1025)}),
                ),
                EventApi::EventsV1,
                vec![
                    "reportingInstance Invalid value: \"\": can have at most 128 characters",
                    "action Invalid value: \"\": can have at most 128 characters",
                    "reason Invalid value: \"\": can have at most 128 characters",
                    "message Invalid value: \"\": can have at most 1024 characters",
                ],
            ),
            (
                "bad type and series",
                with(json!({"type": "Info", "series": {"count": 1}})),
                EventApi::EventsV1,
                vec![
                    "series.count Invalid value: \"\": should be at least 2",
                    "series.lastObservedTime Required value",
                    "type Invalid value: \"\": has invalid value: Info",
                ],
            ),
            (
                "cluster-scoped object from a namespace other than default",
                with(json!({"metadata": {"name": "e", "namespace": "ns"},
                            "involvedObject": {"kind": "Node", "name": "n1"}})),
                EventApi::EventsV1,
                vec![
                    "involvedObject.namespace Invalid value: \"\": does not match event.namespace",
                ],
            ),
            (
                "the core API only checks the legacy rules",
                with(json!({"type": "Info", "count": 3})),
                EventApi::Core,
                vec![],
            ),
        ];
        for (what, event, api, expected) in cases {
            assert_eq!(fields(&validate_create(&event, api)), expected, "{what}");
        }
    }

    #[test]
    fn events_v1_updates_may_only_move_the_series() {
        let old = to_core_v1(&recorder_event());
        let mut bumped = old.clone();
        bumped["series"] = json!({"count": 4, "lastObservedTime": "2025-01-01T00:06:00.000000Z"});
        assert!(validate_update(&bumped, &old, EventApi::EventsV1).is_empty());
        let mut renoted = old.clone();
        renoted["message"] = json!("other");
        renoted["reason"] = json!("Other");
        assert_eq!(
            fields(&validate_update(&renoted, &old, EventApi::EventsV1)),
            vec![
                "reason Invalid value: \"Other\": field is immutable",
                "message Invalid value: \"other\": field is immutable",
                "reason Invalid value: \"Other\": field is immutable",
            ]
        );
        assert!(validate_update(&renoted, &old, EventApi::Core).is_empty());
        // `{}` and an absent source are the same typed value.
        let mut sourced = old.clone();
        sourced["source"] = json!({});
        assert!(validate_update(&sourced, &old, EventApi::EventsV1).is_empty());
    }
}

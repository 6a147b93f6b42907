//! The two Event APIs share one storage in kube-apiserver: an `events.k8s.io/v1` Event written
//! by a controller (kube-rs' recorder uses that API) is also a `core/v1` Event, which is what
//! `kubectl describe` lists. The store mirrors the first into the second with this conversion.

use serde_json::{Map, Value, json};

/// Converts an `events.k8s.io/v1` Event into its `core/v1` form.
pub fn to_core_v1(event: &Value) -> Value {
    let get = |field: &str| event.get(field).filter(|v| !v.is_null()).cloned();
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    if let Some(meta) = get("metadata") {
        let mut meta = meta;
        if let Some(m) = meta.as_object_mut() {
            m.remove("resourceVersion");
            m.remove("managedFields");
        }
        out.insert("metadata".into(), meta);
    }
    let renames = [
        ("regarding", "involvedObject"),
        ("note", "message"),
        ("reason", "reason"),
        ("type", "type"),
        ("action", "action"),
        ("related", "related"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("eventTime", "eventTime"),
        ("deprecatedFirstTimestamp", "firstTimestamp"),
        ("deprecatedLastTimestamp", "lastTimestamp"),
        ("deprecatedCount", "count"),
        ("deprecatedSource", "source"),
    ];
    for (from, to) in renames {
        if let Some(value) = get(from) {
            out.insert(to.into(), value);
        }
    }
    if !out.contains_key("source") {
        let mut source = Map::new();
        if let Some(c) = get("reportingController") {
            source.insert("component".into(), c);
        }
        if let Some(h) = get("reportingInstance") {
            source.insert("host".into(), h);
        }
        out.insert("source".into(), Value::Object(source));
    }
    if let Some(series) = get("series") {
        if let Some(count) = series.get("count") {
            out.insert("count".into(), count.clone());
        }
        if let Some(last) = series.get("lastObservedTime") {
            out.insert("lastTimestamp".into(), last.clone());
        }
        out.insert("series".into(), series);
    }
    out.entry("count").or_insert(json!(1));
    if !out.contains_key("firstTimestamp")
        && let Some(time) =
            get("eventTime").or_else(|| event.pointer("/metadata/creationTimestamp").cloned())
    {
        out.insert("firstTimestamp".into(), time);
    }
    if !out.contains_key("lastTimestamp")
        && let Some(first) = out.get("firstTimestamp").cloned()
    {
        out.insert("lastTimestamp".into(), first);
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorder_event_becomes_core_event() {
        let event = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default", "uid": "u", "resourceVersion": "5"},
            "regarding": {"kind": "Service", "name": "web", "namespace": "default", "uid": "s"},
            "note": "load balancer ready", "reason": "EnsuredLoadBalancer", "type": "Normal",
            "action": "Ensure", "reportingController": "kube-lb", "reportingInstance": "kube-lb-0",
            "eventTime": "2025-01-01T00:00:00.000000Z",
            "series": {"count": 3, "lastObservedTime": "2025-01-01T00:05:00.000000Z"}
        });
        let core = to_core_v1(&event);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "web");
        assert_eq!(core["message"], "load balancer ready");
        assert_eq!(core["source"]["component"], "kube-lb");
        assert_eq!(core["count"], 3);
        assert_eq!(core["lastTimestamp"], "2025-01-01T00:05:00.000000Z");
        assert_eq!(core["firstTimestamp"], "2025-01-01T00:00:00.000000Z");
        assert!(core["metadata"].get("resourceVersion").is_none());
        assert_eq!(core["metadata"]["uid"], "u");
    }

    #[test]
    fn single_event_counts_once() {
        let core = to_core_v1(
            &json!({"metadata": {"name": "e", "creationTimestamp": "2025-01-01T00:00:00Z"}, "note": "x"}),
        );
        assert_eq!(core["count"], 1);
        assert_eq!(core["firstTimestamp"], "2025-01-01T00:00:00Z");
        assert_eq!(core["lastTimestamp"], "2025-01-01T00:00:00Z");
    }
}

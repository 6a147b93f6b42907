//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! Columns and cell formats follow kube-apiserver's printers
//! (`pkg/printers/internalversion/printers.go`): every column is sent, kubectl hides those
//! with a priority above 0 unless `-o wide`. Custom resources get their CRD's
//! `additionalPrinterColumns`.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::crd::{PrinterColumn, jsonpath};
use crate::resources::Entry;
use crate::status::ApiError;
use crate::store::ObjectKey;

/// What each row carries besides its cells (`includeObject`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (kubectl's default; enough for the NAMESPACE column).
    #[default]
    Metadata,
    /// The whole object (kubectl asks for it with `--sort-by`).
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter.
    pub fn parse(value: &str) -> Result<Self, ApiError> {
        match value {
            "None" => Ok(Self::None),
            "" | "Metadata" => Ok(Self::Metadata),
            "Object" => Ok(Self::Object),
            other => Err(ApiError::bad_request(format!(
                "includeObject must be one of None, Metadata or Object, not {other:?}"
            ))),
        }
    }
}

fn column(name: &str, kind: &str, format: &str, priority: i64) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": "", "priority": priority})
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// apimachinery's `duration.HumanDuration`: the approximate, shortening-with-size form
/// kubectl prints (`45s`, `3m20s`, `15m`, `5h10m`, `20h`, `3d4h`, `40d`, `2y10d`, `9y`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// Seconds from an RFC 3339 timestamp until now (negative for the future).
fn seconds_since(timestamp: &str) -> Option<i64> {
    let then = humantime::parse_rfc3339_weak(timestamp).ok()?;
    let now = SystemTime::now();
    Some(match now.duration_since(then) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    })
}

/// `translateTimestampSince`: the age of a timestamp, `<unknown>` when unset.
pub fn age(timestamp: &str) -> String {
    if timestamp.is_empty() {
        return "<unknown>".to_string();
    }
    match seconds_since(timestamp) {
        Some(secs) => human_duration(secs),
        None => "<unknown>".to_string(),
    }
}

fn service_ports(object: &Value) -> String {
    let ports = object
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() {
        return "<none>".to_string();
    }
    ports
        .iter()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or_default();
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p.get("nodePort").and_then(Value::as_i64) {
                Some(np) => format!("{port}:{np}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn external_ip(object: &Value) -> String {
    let ty = str_at(object, "/spec/type");
    let mut ips: Vec<String> = object
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    match ty {
        "ExternalName" => return str_at(object, "/spec/externalName").to_string(),
        "LoadBalancer" => {
            if let Some(ingress) = object
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
            {
                for entry in ingress {
                    let addr = entry
                        .get("ip")
                        .or_else(|| entry.get("hostname"))
                        .and_then(Value::as_str);
                    if let Some(addr) = addr {
                        ips.push(addr.to_string());
                    }
                }
            }
            if ips.is_empty() {
                return "<pending>".to_string();
            }
        }
        _ => {}
    }
    if ips.is_empty() {
        "<none>".to_string()
    } else {
        ips.join(",")
    }
}

fn selector(object: &Value) -> String {
    match object.pointer("/spec/selector").and_then(Value::as_object) {
        Some(map) if !map.is_empty() => map
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(","),
        _ => "<none>".to_string(),
    }
}

fn name_column() -> Value {
    column("Name", "string", "name", 0)
}

fn age_column() -> Value {
    column("Age", "string", "", 0)
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s.to_string()
    }
}

fn or_unknown(s: &str) -> String {
    if s.is_empty() {
        "<unknown>".to_string()
    } else {
        s.to_string()
    }
}

/// `listWithMoreString`: at most three entries, then `+ N more...`; `<unset>` when empty.
fn list_with_more(items: &[String]) -> String {
    const MAX: usize = 3;
    if items.len() > MAX {
        return format!("{} + {} more...", items[..MAX].join(","), items.len() - MAX);
    }
    if items.is_empty() {
        "<unset>".to_string()
    } else {
        items.join(",")
    }
}

fn service_row(o: &Value) -> Vec<Value> {
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(str_at(o, "/spec/type")),
        json!(match str_at(o, "/spec/clusterIP") {
            "" => "<none>",
            ip => ip,
        }),
        json!(external_ip(o)),
        json!(service_ports(o)),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
        json!(selector(o)),
    ]
}

fn node_address(o: &Value, kind: &str) -> String {
    o.pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|a| a["type"] == kind))
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_string()
}

/// `printNode`: readiness (and `SchedulingDisabled`), roles from the role labels, kubelet
/// version; wide: addresses and node info.
fn node_row(o: &Value) -> Vec<Value> {
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
    {
        status.push(if ready["status"] == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = o.pointer("/metadata/labels").and_then(Value::as_object) {
        for (key, value) in labels {
            let role = if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
                role
            } else if key == "kubernetes.io/role" {
                value.as_str().unwrap_or_default()
            } else {
                ""
            };
            if !role.is_empty() && !roles.iter().any(|r| r == role) {
                roles.push(role.to_string());
            }
        }
    }
    roles.sort();
    let info = |field: &str| or_unknown(str_at(o, &format!("/status/nodeInfo/{field}")));
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(status.join(",")),
        json!(if roles.is_empty() {
            "<none>".to_string()
        } else {
            roles.join(",")
        }),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
        json!(str_at(o, "/status/nodeInfo/kubeletVersion")),
        json!(node_address(o, "InternalIP")),
        json!(node_address(o, "ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

fn pod_row(o: &Value) -> Vec<Value> {
    let containers = o
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ready = statuses.iter().filter(|c| c["ready"] == true).count();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|c| c["restartCount"].as_i64())
        .sum();
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(format!("{ready}/{containers}")),
        json!(str_at(o, "/status/phase")),
        json!(restarts.to_string()),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
        json!(or_none(str_at(o, "/status/podIP"))),
        json!(or_none(str_at(o, "/spec/nodeName"))),
    ]
}

/// `formatEndpoints` without a port filter: `ip:port` pairs, at most three.
fn endpoints_row(o: &Value) -> Vec<Value> {
    let mut pairs: Vec<String> = Vec::new();
    for subset in o
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ips: Vec<&str> = subset["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["ip"].as_str())
            .collect();
        let ports: Vec<i64> = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["port"].as_i64())
            .collect();
        if ports.is_empty() {
            pairs.extend(ips.iter().map(|ip| (*ip).to_string()));
        }
        for port in &ports {
            for ip in &ips {
                pairs.push(if ip.contains(':') {
                    format!("[{ip}]:{port}")
                } else {
                    format!("{ip}:{port}")
                });
            }
        }
    }
    let cell = if pairs.len() > 3 {
        format!("{} + {} more...", pairs[..3].join(","), pairs.len() - 3)
    } else {
        pairs.join(",")
    };
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(if cell.is_empty() {
            "<none>".to_string()
        } else {
            cell
        }),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
    ]
}

fn endpoint_slice_row(o: &Value) -> Vec<Value> {
    let ports: Vec<String> = o
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
            (Some(port), _) => port.to_string(),
            (None, Some(name)) => name.to_string(),
            (None, None) => "*".to_string(),
        })
        .collect();
    let addresses: Vec<String> = o
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(str_at(o, "/addressType")),
        json!(list_with_more(&ports)),
        json!(list_with_more(&addresses)),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
    ]
}

fn lease_row(o: &Value) -> Vec<Value> {
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(str_at(o, "/spec/holderIdentity")),
        json!(age(str_at(o, "/metadata/creationTimestamp"))),
    ]
}

fn first_non_empty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.is_empty() { b } else { a }
}

/// `printEvent` (core/v1 fields; events.k8s.io/v1 Events are converted first, as
/// kube-apiserver prints both from one internal type).
fn event_row(o: &Value) -> Vec<Value> {
    let first = match str_at(o, "/firstTimestamp") {
        "" => age(str_at(o, "/eventTime")),
        ts => age(ts),
    };
    let mut last = match str_at(o, "/lastTimestamp") {
        "" => first.clone(),
        ts => age(ts),
    };
    let mut count = o.get("count").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = o.get("series").filter(|s| s.is_object()) {
        last = age(str_at(series, "/lastObservedTime"));
        count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        // Singleton events of the new API carry no count.
        count = 1;
    }
    let kind = str_at(o, "/involvedObject/kind").to_lowercase();
    let target = match str_at(o, "/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = first_non_empty(
        str_at(o, "/source/component"),
        str_at(o, "/reportingComponent"),
    );
    let instance = first_non_empty(str_at(o, "/source/host"), str_at(o, "/reportingInstance"));
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(str_at(o, "/type")),
        json!(str_at(o, "/reason")),
        json!(target),
        json!(str_at(o, "/involvedObject/fieldPath")),
        json!(source),
        json!(str_at(o, "/message").trim()),
        json!(first),
        json!(count),
        json!(str_at(o, "/metadata/name")),
    ]
}

fn event_columns() -> Vec<Value> {
    vec![
        column("Last Seen", "string", "", 0),
        column("Type", "string", "", 0),
        column("Reason", "string", "", 0),
        column("Object", "string", "", 0),
        column("Subobject", "string", "", 1),
        column("Source", "string", "", 1),
        column("Message", "string", "", 0),
        column("First Seen", "string", "", 1),
        column("Count", "string", "", 1),
        column("Name", "string", "name", 1),
    ]
}

/// The default table convertor (kinds without a printer): name and creation time as RFC 3339.
fn created_at_row(o: &Value) -> Vec<Value> {
    vec![
        json!(str_at(o, "/metadata/name")),
        json!(str_at(o, "/metadata/creationTimestamp")),
    ]
}

/// One CRD printer column cell, as the apiextensions table convertor computes it.
fn custom_cell(column: &PrinterColumn, object: &Value) -> Value {
    let Ok(path) = jsonpath::parse(&column.json_path) else {
        return Value::Null;
    };
    let Some(found) = jsonpath::evaluate(&path, object).into_iter().next() else {
        return Value::Null;
    };
    match (column.type_.as_str(), found) {
        ("string", Value::String(s)) => json!(s),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) if n.is_i64() => json!(n.as_i64()),
        ("number", Value::Number(n)) => json!(n),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => json!(match seconds_since(s) {
            Some(secs) => human_duration(secs),
            None => "<invalid>".to_string(),
        }),
        _ => Value::Null,
    }
}

/// Column definitions and the cells of one object, for a served resource.
fn columns(entry: &Entry) -> Vec<Value> {
    if let Some(custom) = &entry.custom {
        let mut out = vec![name_column()];
        if custom.printer_columns.is_empty() {
            out.push(column("Age", "date", "", 0));
        }
        out.extend(custom.printer_columns.iter().map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format,
                   "description": c.description, "priority": c.priority})
        }));
        return out;
    }
    match (entry.def.group, entry.def.kind) {
        ("", "Service") => vec![
            name_column(),
            column("Type", "string", "", 0),
            column("Cluster-IP", "string", "", 0),
            column("External-IP", "string", "", 0),
            column("Port(s)", "string", "", 0),
            age_column(),
            column("Selector", "string", "", 1),
        ],
        ("", "Namespace") => vec![
            name_column(),
            column("Status", "string", "", 0),
            age_column(),
        ],
        ("", "Node") => vec![
            name_column(),
            column("Status", "string", "", 0),
            column("Roles", "string", "", 0),
            age_column(),
            column("Version", "string", "", 0),
            column("Internal-IP", "string", "", 1),
            column("External-IP", "string", "", 1),
            column("OS-Image", "string", "", 1),
            column("Kernel-Version", "string", "", 1),
            column("Container-Runtime", "string", "", 1),
        ],
        ("", "Pod") => vec![
            name_column(),
            column("Ready", "string", "", 0),
            column("Status", "string", "", 0),
            column("Restarts", "string", "", 0),
            age_column(),
            column("IP", "string", "", 1),
            column("Node", "string", "", 1),
        ],
        ("", "Endpoints") => vec![
            name_column(),
            column("Endpoints", "string", "", 0),
            age_column(),
        ],
        ("", "ConfigMap") => vec![
            name_column(),
            column("Data", "integer", "", 0),
            age_column(),
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name_column(),
            column("AddressType", "string", "", 0),
            column("Ports", "string", "", 0),
            column("Endpoints", "string", "", 0),
            age_column(),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name_column(),
            column("Holder", "string", "", 0),
            age_column(),
        ],
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => vec![
            name_column(),
            column("Webhooks", "integer", "", 0),
            age_column(),
        ],
        ("" | "events.k8s.io", "Event") => event_columns(),
        _ => vec![name_column(), column("Created At", "date", "", 0)],
    }
}

fn cells(entry: &Entry, o: &Value) -> Vec<Value> {
    if let Some(custom) = &entry.custom {
        let mut out = vec![json!(str_at(o, "/metadata/name"))];
        if custom.printer_columns.is_empty() {
            out.push(json!(age(str_at(o, "/metadata/creationTimestamp"))));
        }
        out.extend(custom.printer_columns.iter().map(|c| custom_cell(c, o)));
        return out;
    }
    match (entry.def.group, entry.def.kind) {
        ("", "Service") => service_row(o),
        ("", "Namespace") => vec![
            json!(str_at(o, "/metadata/name")),
            json!(str_at(o, "/status/phase")),
            json!(age(str_at(o, "/metadata/creationTimestamp"))),
        ],
        ("", "Node") => node_row(o),
        ("", "Pod") => pod_row(o),
        ("", "Endpoints") => endpoints_row(o),
        ("", "ConfigMap") => {
            let count = |f: &str| o.get(f).and_then(Value::as_object).map_or(0, |m| m.len());
            vec![
                json!(str_at(o, "/metadata/name")),
                json!(count("data") + count("binaryData")),
                json!(age(str_at(o, "/metadata/creationTimestamp"))),
            ]
        }
        ("discovery.k8s.io", "EndpointSlice") => endpoint_slice_row(o),
        ("coordination.k8s.io", "Lease") => lease_row(o),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => vec![
            json!(str_at(o, "/metadata/name")),
            json!(
                o.get("webhooks")
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            ),
            json!(age(str_at(o, "/metadata/creationTimestamp"))),
        ],
        ("", "Event") => event_row(o),
        ("events.k8s.io", "Event") => event_row(&crate::events::to_core_v1(o)),
        _ => created_at_row(o),
    }
}

/// Renders objects of one served resource as a Table; each row carries what `include`
/// asks for.
pub fn render(
    entry: &Entry,
    items: &[(ObjectKey, Arc<Value>)],
    resource_version: u64,
    continue_token: Option<String>,
    include: IncludeObject,
) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|(_, object)| {
            let mut row = json!({"cells": cells(entry, object)});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": object.get("metadata").cloned().unwrap_or(Value::Null),
                    });
                }
                IncludeObject::Object => row["object"] = (**object).clone(),
            }
            row
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version.to_string()});
    if let Some(token) = continue_token {
        metadata["continue"] = json!(token);
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns(entry),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    fn entry(group: &str, plural: &str) -> Entry {
        let registry = Registry::builtin();
        let id = registry.find(group, "v1", plural).unwrap();
        registry.entry(id).unwrap().clone()
    }

    fn one_row(group: &str, plural: &str, object: Value) -> (Vec<String>, Vec<Value>) {
        let table = render(
            &entry(group, plural),
            &[(("d".into(), "x".into()), Arc::new(object))],
            1,
            None,
            IncludeObject::Metadata,
        );
        let names = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        (names, table["rows"][0]["cells"].as_array().unwrap().clone())
    }

    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 600, "3h10m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400, "2d"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (8 * 86400, "8d"),
            (729 * 86400, "729d"),
            (730 * 86400 + 10 * 86400, "2y10d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
        assert_eq!(age(""), "<unknown>");
        assert_eq!(age("not a time"), "<unknown>");
    }

    #[test]
    fn service_row_and_include_object() {
        let svc = json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
        });
        let (columns, cells) = one_row("", "services", svc.clone());
        assert_eq!(columns.len(), 7);
        assert_eq!(cells[0], "web");
        assert_eq!(cells[1], "LoadBalancer");
        assert_eq!(cells[2], "10.96.0.10");
        assert_eq!(cells[3], "192.0.2.1");
        assert_eq!(cells[4], "80:30080/TCP,53/UDP");
        assert!(cells[5].as_str().unwrap().contains('y'));
        assert_eq!(cells[6], "app=web");
        let items = [(("default".into(), "web".into()), Arc::new(svc.clone()))];
        let svc_entry = entry("", "services");
        let meta = render(&svc_entry, &items, 1, None, IncludeObject::Metadata);
        assert_eq!(meta["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(
            meta["rows"][0]["object"]["metadata"]["namespace"],
            "default"
        );
        let full = render(&svc_entry, &items, 1, None, IncludeObject::Object);
        assert_eq!(full["rows"][0]["object"], svc);
        let none = render(&svc_entry, &items, 1, None, IncludeObject::None);
        assert!(none["rows"][0].get("object").is_none());
        assert!(IncludeObject::parse("Everything").is_err());
    }

    #[test]
    fn event_rows_follow_print_event() {
        let (columns, _) = one_row("", "events", json!({}));
        assert_eq!(
            columns,
            vec![
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        // (event, last seen suffix, object, source, count)
        let cases = vec![
            (
                json!({"metadata": {"name": "web.1"}, "type": "Normal", "reason": "EnsuredLoadBalancer",
                       "message": " Ensured \n", "involvedObject": {"kind": "Service", "name": "web", "fieldPath": "spec"},
                       "source": {"component": "kube-lb", "host": "n1"}, "count": 4,
                       "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-02T00:00:00Z"}),
                "Service",
                "service/web",
                "kube-lb, n1",
                4,
            ),
            (
                // New-API singleton: no count, no timestamps but eventTime; reporting fields.
                json!({"metadata": {"name": "e2"}, "type": "Warning", "reason": "R",
                       "involvedObject": {"kind": "Node"}, "reportingComponent": "ctl",
                       "eventTime": "2020-01-01T00:00:00.000000Z"}),
                "Node",
                "node",
                "ctl",
                1,
            ),
            (
                json!({"metadata": {"name": "e3"}, "involvedObject": {"kind": "Pod", "name": "p"},
                       "series": {"count": 7, "lastObservedTime": "2020-01-01T00:00:00.000000Z"},
                       "count": 2, "source": {}, "reportingInstance": "i"}),
                "Pod",
                "pod/p",
                ", i",
                7,
            ),
        ];
        for (event, what, object, source, count) in cases {
            let (_, cells) = one_row("", "events", event.clone());
            assert!(
                cells[0].as_str().unwrap().contains('y'),
                "{what}: {cells:?}"
            );
            assert_eq!(cells[3], object, "{what}");
            assert_eq!(cells[5], source, "{what}");
            assert_eq!(cells[8], count, "{what}");
            assert_eq!(cells[9], event["metadata"]["name"], "{what}");
        }
        let (_, cells) = one_row(
            "",
            "events",
            json!({"metadata": {"name": "web.1"}, "message": " Ensured \n", "type": "Normal"}),
        );
        assert_eq!(cells[6], "Ensured");
        assert_eq!(cells[1], "Normal");
        // events.k8s.io/v1 Events print the same columns from their own field names.
        let (columns, cells) = one_row(
            "events.k8s.io",
            "events",
            json!({"metadata": {"name": "n"}, "type": "Normal", "reason": "R", "note": "hello",
                   "regarding": {"kind": "Service", "name": "web"}, "reportingController": "c",
                   "eventTime": "2020-01-01T00:00:00.000000Z"}),
        );
        assert_eq!(columns[0], "Last Seen");
        assert_eq!(cells[3], "service/web");
        assert_eq!(cells[6], "hello");
    }

    #[test]
    fn node_lease_and_slice_rows() {
        let (columns, cells) = one_row(
            "",
            "nodes",
            json!({"metadata": {"name": "n1", "creationTimestamp": "2020-01-01T00:00:00Z",
                                "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "edge"}},
                   "spec": {"unschedulable": true},
                   "status": {"conditions": [{"type": "Ready", "status": "False"}],
                              "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                              "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian"}}}),
        );
        assert_eq!(
            columns,
            vec![
                "Name",
                "Status",
                "Roles",
                "Age",
                "Version",
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        assert_eq!(cells[1], "NotReady,SchedulingDisabled");
        assert_eq!(cells[2], "control-plane,edge");
        assert_eq!(cells[4], "v1.33.0");
        assert_eq!(cells[5], "10.0.0.1");
        assert_eq!(cells[6], "<none>");
        assert_eq!(cells[7], "Debian");
        assert_eq!(cells[8], "<unknown>");
        let (_, cells) = one_row("", "nodes", json!({"metadata": {"name": "n2"}}));
        assert_eq!(cells[1], "Unknown");
        assert_eq!(cells[2], "<none>");
        assert_eq!(cells[3], "<unknown>");

        let (columns, cells) = one_row(
            "coordination.k8s.io",
            "leases",
            json!({"metadata": {"name": "lock"}, "spec": {"holderIdentity": "kube-lb-0"}}),
        );
        assert_eq!(columns, vec!["Name", "Holder", "Age"]);
        assert_eq!(cells[1], "kube-lb-0");
        let (_, cells) = one_row(
            "coordination.k8s.io",
            "leases",
            json!({"metadata": {"name": "l"}}),
        );
        assert_eq!(cells[1], "");

        let (columns, cells) = one_row(
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            json!({"metadata": {"name": "kube-lb"}, "webhooks": [{"name": "a.b.c"}, {"name": "d.e.f"}]}),
        );
        assert_eq!(columns, vec!["Name", "Webhooks", "Age"]);
        assert_eq!(cells[1], 2);
        let (columns, cells) = one_row(
            "discovery.k8s.io",
            "endpointslices",
            json!({"metadata": {"name": "s"}, "addressType": "IPv4",
                   "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}],
                   "ports": [{"port": 80}, {"name": "dns"}, {}]}),
        );
        assert_eq!(
            columns,
            vec!["Name", "AddressType", "Ports", "Endpoints", "Age"]
        );
        assert_eq!(cells[2], "80,dns,*");
        assert_eq!(cells[3], "10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...");
        let (_, cells) = one_row(
            "discovery.k8s.io",
            "endpointslices",
            json!({"addressType": "IPv6"}),
        );
        assert_eq!(cells[2], "<unset>");
        assert_eq!(cells[3], "<unset>");
    }

    #[test]
    fn pod_and_endpoints_rows() {
        let (_, cells) = one_row(
            "",
            "pods",
            json!({"metadata": {"name": "p"},
                "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running", "podIP": "10.0.0.5",
                           "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}}),
        );
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[5], "10.0.0.5");
        assert_eq!(cells[6], "n1");
        let (_, cells) = one_row(
            "",
            "endpoints",
            json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                   "ports": [{"port": 80}]}]}),
        );
        assert_eq!(cells[1], "10.0.0.1:80,[fd00::1]:80");
    }

    #[test]
    fn pending_load_balancer() {
        let svc = json!({"spec": {"type": "LoadBalancer"}});
        assert_eq!(external_ip(&svc), "<pending>");
        assert_eq!(
            external_ip(&json!({"spec": {"type": "ClusterIP"}})),
            "<none>"
        );
    }

    #[test]
    fn custom_resources_print_their_columns() {
        let registry = crate::crd::tests::registry_with_ippools();
        let id = registry.find("kube-lb.io", "v1alpha1", "ippools").unwrap();
        let pools = registry.entry(id).unwrap();
        let pool = json!({"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
                          "spec": {"cidrs": ["10.0.0.0/24"]}, "status": {"free": 254}});
        let table = render(
            pools,
            &[(("".into(), "p".into()), Arc::new(pool))],
            1,
            None,
            IncludeObject::Metadata,
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["Name", "CIDRs", "Free", "Age"]);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "p");
        assert_eq!(cells[1], "[\"10.0.0.0/24\"]");
        assert_eq!(cells[2], 254);
        assert!(cells[3].as_str().unwrap().contains('y'));
        // A missing value is an empty cell (kubectl prints <none>).
        let bare = render(
            pools,
            &[(
                ("".into(), "q".into()),
                Arc::new(json!({"metadata": {"name": "q"}})),
            )],
            1,
            None,
            IncludeObject::None,
        );
        assert_eq!(bare["rows"][0]["cells"][2], Value::Null);
        // The CRD list itself: the default convertor's NAME and CREATED AT.
        let crds = registry
            .entry(crate::resources::custom_resource_definitions())
            .unwrap();
        assert_eq!(columns(crds)[1]["name"], "Created At");
    }
}

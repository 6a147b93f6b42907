//! Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::resources::{self, ResourceId};
use crate::store::ObjectKey;

fn column(name: &str, kind: &str, format: &str, priority: u8) -> Value {
    json!({"name": name, "type": kind, "format": format, "description": "", "priority": priority})
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `kubectl`-style age (`5s`, `3m`, `2h`, `4d`) of an RFC 3339 timestamp.
pub fn age(timestamp: &str) -> String {
    let Ok(then) = humantime::parse_rfc3339(timestamp) else {
        return "<unknown>".to_string();
    };
    let secs = SystemTime::now()
        .duration_since(then)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 2 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
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

/// Columns and cells for one resource kind.
/// Renders the cells of one row.
type CellRenderer = fn(&Value) -> Vec<Value>;

fn columns_and_cells(resource: ResourceId) -> (Vec<Value>, CellRenderer) {
    let def = resources::get(resource);
    let name_col = column("Name", "string", "name", 0);
    let age_col = column("Age", "string", "", 0);
    match (def.group, def.kind) {
        ("", "Service") => (
            vec![
                name_col,
                column("Type", "string", "", 0),
                column("Cluster-IP", "string", "", 0),
                column("External-IP", "string", "", 0),
                column("Port(s)", "string", "", 0),
                age_col,
                column("Selector", "string", "", 1),
            ],
            |o| {
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
            },
        ),
        ("", "Namespace") => (
            vec![name_col, column("Status", "string", "", 0), age_col],
            |o| {
                vec![
                    json!(str_at(o, "/metadata/name")),
                    json!(str_at(o, "/status/phase")),
                    json!(age(str_at(o, "/metadata/creationTimestamp"))),
                ]
            },
        ),
        ("", "Node") => (
            vec![name_col, column("Status", "string", "", 0), age_col],
            |o| {
                let ready = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .map(|c| {
                        if c["status"] == "True" {
                            "Ready"
                        } else {
                            "NotReady"
                        }
                    })
                    .unwrap_or("Unknown");
                vec![
                    json!(str_at(o, "/metadata/name")),
                    json!(ready),
                    json!(age(str_at(o, "/metadata/creationTimestamp"))),
                ]
            },
        ),
        ("", "Pod") => (
            vec![
                name_col,
                column("Ready", "string", "", 0),
                column("Status", "string", "", 0),
                column("Restarts", "string", "", 0),
                age_col,
                column("IP", "string", "", 1),
                column("Node", "string", "", 1),
            ],
            |o| {
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
                let or_none = |s: &str| {
                    if s.is_empty() {
                        "<none>".to_string()
                    } else {
                        s.to_string()
                    }
                };
                vec![
                    json!(str_at(o, "/metadata/name")),
                    json!(format!("{ready}/{containers}")),
                    json!(str_at(o, "/status/phase")),
                    json!(restarts.to_string()),
                    json!(age(str_at(o, "/metadata/creationTimestamp"))),
                    json!(or_none(str_at(o, "/status/podIP"))),
                    json!(or_none(str_at(o, "/spec/nodeName"))),
                ]
            },
        ),
        ("discovery.k8s.io", "EndpointSlice") => (
            vec![
                name_col,
                column("AddressType", "string", "", 0),
                column("Ports", "string", "", 0),
                column("Endpoints", "string", "", 0),
                age_col,
            ],
            |o| {
                let ports = o
                    .get("ports")
                    .and_then(Value::as_array)
                    .map(|ports| {
                        ports
                            .iter()
                            .filter_map(|p| p["port"].as_i64())
                            .map(|p| p.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "<unset>".to_string());
                let addresses: Vec<String> = o
                    .get("endpoints")
                    .and_then(Value::as_array)
                    .map(|eps| {
                        eps.iter()
                            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
                            .filter_map(|a| a.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let endpoints = if addresses.is_empty() {
                    "<unset>".to_string()
                } else if addresses.len() > 3 {
                    format!(
                        "{} + {} more...",
                        addresses[..3].join(","),
                        addresses.len() - 3
                    )
                } else {
                    addresses.join(",")
                };
                vec![
                    json!(str_at(o, "/metadata/name")),
                    json!(str_at(o, "/addressType")),
                    json!(ports),
                    json!(endpoints),
                    json!(age(str_at(o, "/metadata/creationTimestamp"))),
                ]
            },
        ),
        _ => (vec![name_col, age_col], |o| {
            vec![
                json!(str_at(o, "/metadata/name")),
                json!(age(str_at(o, "/metadata/creationTimestamp"))),
            ]
        }),
    }
}

/// Renders objects as a Table; each row carries the object's metadata (what kubectl's
/// `includeObject=Metadata` default wants, e.g. for the NAMESPACE column of `-A`).
pub fn render(
    resource: ResourceId,
    items: &[(ObjectKey, Arc<Value>)],
    resource_version: u64,
    continue_token: Option<String>,
) -> Value {
    let (columns, cells) = columns_and_cells(resource);
    let rows: Vec<Value> = items
        .iter()
        .map(|(_, object)| {
            json!({
                "cells": cells(object),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": object.get("metadata").cloned().unwrap_or(Value::Null),
                },
            })
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
        "columnDefinitions": columns,
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_row() {
        let svc = json!({
            "metadata": {"name": "web", "namespace": "default", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10", "selector": {"app": "web"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
        });
        let table = render(
            resources::services(),
            &[(("default".into(), "web".into()), Arc::new(svc))],
            7,
            None,
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[0], "web");
        assert_eq!(cells[1], "LoadBalancer");
        assert_eq!(cells[2], "10.96.0.10");
        assert_eq!(cells[3], "192.0.2.1");
        assert_eq!(cells[4], "80:30080/TCP,53/UDP");
        assert!(cells[5].as_str().unwrap().ends_with('d'));
        assert_eq!(cells[6], "app=web");
        assert_eq!(
            table["rows"][0]["object"]["metadata"]["namespace"],
            "default"
        );
        assert_eq!(table["columnDefinitions"].as_array().unwrap().len(), 7);
    }

    #[test]
    fn pod_and_slice_rows() {
        let pod = json!({"metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5",
                       "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}});
        let pods = crate::resources::find("", "v1", "pods").unwrap();
        let table = render(pods, &[(("d".into(), "p".into()), Arc::new(pod))], 1, None);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "Running");
        assert_eq!(cells[3], "3");
        assert_eq!(cells[5], "10.0.0.5");
        assert_eq!(cells[6], "n1");

        let slice = json!({"metadata": {"name": "s"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2"]}], "ports": [{"port": 80}, {"port": 443}]});
        let slices = crate::resources::find("discovery.k8s.io", "v1", "endpointslices").unwrap();
        let table = render(
            slices,
            &[(("d".into(), "s".into()), Arc::new(slice))],
            1,
            None,
        );
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[1], "IPv4");
        assert_eq!(cells[2], "80,443");
        assert_eq!(cells[3], "10.0.0.1,10.0.0.2");
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
}

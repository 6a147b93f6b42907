//! `kube-lb up --demo`: three small echo backends on loopback and example Services and
//! EndpointSlices pointing at them, so a newcomer can watch an address appear and `curl` it.
//!
//! `up` runs no endpoints controller (there are no Pods to select), so the EndpointSlices are
//! written by hand: [`ENDPOINT_SLICE_TEMPLATE`] is the one the demo applies and prints, as the
//! example to copy for one's own Services.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Addresses of the demo backends (loopback, away from 127.0.0.1).
pub const BACKEND_IPS: [Ipv4Addr; 3] = [
    Ipv4Addr::new(127, 0, 0, 11),
    Ipv4Addr::new(127, 0, 0, 12),
    Ipv4Addr::new(127, 0, 0, 13),
];

/// The name of the node the demo endpoints run on.
pub const NODE_NAME: &str = "kube-lb-local";

/// Binds the three backends on one common port (EndpointSlice ports are shared by all
/// endpoints of a slice), trying a few ports until all three are free.
pub async fn bind_backends() -> std::io::Result<(u16, Vec<TcpListener>)> {
    let mut last_error = None;
    for port in (18080u16..18180).chain(std::iter::once(0)) {
        let first = match TcpListener::bind(SocketAddr::new(IpAddr::V4(BACKEND_IPS[0]), port)).await
        {
            Ok(listener) => listener,
            Err(error) => {
                last_error = Some(error);
                continue;
            }
        };
        let port = first.local_addr()?.port();
        let mut listeners = vec![first];
        for ip in &BACKEND_IPS[1..] {
            match TcpListener::bind(SocketAddr::new(IpAddr::V4(*ip), port)).await {
                Ok(listener) => listeners.push(listener),
                Err(error) => {
                    last_error = Some(error);
                    break;
                }
            }
        }
        if listeners.len() == BACKEND_IPS.len() {
            return Ok((port, listeners));
        }
    }
    Err(last_error.unwrap_or_else(|| std::io::Error::other("no free port for the demo backends")))
}

/// Serves each listener until `shutdown`: an HTTP request gets a one-line greeting naming the
/// backend; anything else is echoed back.
pub fn serve_backends(listeners: Vec<TcpListener>, shutdown: CancellationToken) {
    for (index, listener) in listeners.into_iter().enumerate() {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    accepted = listener.accept() => if let Ok((stream, _)) = accepted {
                        tokio::spawn(echo(stream, index + 1));
                    },
                }
            }
        });
    }
}

async fn echo(mut stream: TcpStream, backend: usize) {
    let mut buf = vec![0u8; 4096];
    let Ok(n) = stream.read(&mut buf).await else {
        return;
    };
    let head = String::from_utf8_lossy(&buf[..n]);
    let local = stream
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    if let Some(request_line) = head.lines().next().filter(|l| l.contains(" HTTP/1.")) {
        let body = format!("hello from echo backend {backend} ({local}): {request_line}\n");
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        return;
    }
    if stream.write_all(&buf[..n]).await.is_err() {
        return;
    }
    let (mut reader, mut writer) = stream.split();
    let _ = tokio::io::copy(&mut reader, &mut writer).await;
}

/// The demo Node standing for this machine.
pub fn node() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": {"kubernetes.io/hostname": NODE_NAME}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    })
}

/// The hand-written EndpointSlice of a demo Service, as `up --demo` prints it: `${SERVICE}` and
/// `${PORT}` are replaced with the Service's name and the backends' port. The addresses are
/// [`BACKEND_IPS`] and the node is [`NODE_NAME`] (a test keeps them in step).
pub const ENDPOINT_SLICE_TEMPLATE: &str = r#"apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ${SERVICE}-demo
  namespace: demo
  labels:
    # Ties the slice to its Service; nothing else does.
    kubernetes.io/service-name: ${SERVICE}
addressType: IPv4
ports:
  # Name and protocol match the Service port; the port is where the backends listen.
  - name: http
    port: ${PORT}
    protocol: TCP
endpoints:
  # Only ready endpoints receive traffic.
  - addresses: ["127.0.0.11"]
    conditions: {ready: true}
    nodeName: kube-lb-local
  - addresses: ["127.0.0.12"]
    conditions: {ready: true}
    nodeName: kube-lb-local
  - addresses: ["127.0.0.13"]
    conditions: {ready: true}
    nodeName: kube-lb-local
"#;

/// [`ENDPOINT_SLICE_TEMPLATE`] filled in for `service` with backends on `backend_port`.
pub fn endpoint_slice_yaml(service: &str, backend_port: u16) -> String {
    ENDPOINT_SLICE_TEMPLATE
        .replace("${SERVICE}", service)
        .replace("${PORT}", &backend_port.to_string())
}

/// Example Services and their EndpointSlices: `demo/echo` on port 8080 with an address from
/// the pool, and `demo/echo-pinned` asking for a fixed `loadBalancerIP`. The slices are
/// [`endpoint_slice_yaml`], parsed.
pub fn objects(backend_port: u16, pinned_ip: IpAddr) -> Result<Vec<Value>, serde_yaml_ng::Error> {
    let mut out =
        vec![json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}})];
    for (name, port, ip) in [("echo", 8080, None), ("echo-pinned", 9090, Some(pinned_ip))] {
        let mut spec = json!({
            "type": "LoadBalancer",
            "selector": {"app": "echo"},
            "ports": [{"name": "http", "port": port, "targetPort": backend_port, "protocol": "TCP"}]
        });
        if let Some(ip) = ip {
            spec["loadBalancerIP"] = json!(ip.to_string());
        }
        out.push(json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name, "namespace": "demo"},
            "spec": spec
        }));
        out.push(serde_yaml_ng::from_str(&endpoint_slice_yaml(
            name,
            backend_port,
        ))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn backends_answer_http_and_echo() {
        let (port, listeners) = bind_backends().await.unwrap();
        let shutdown = CancellationToken::new();
        serve_backends(listeners, shutdown.clone());
        let mut http = TcpStream::connect((BACKEND_IPS[1], port)).await.unwrap();
        http.write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        let mut reply = String::new();
        http.read_to_string(&mut reply).await.unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.contains("echo backend 2"), "{reply}");
        let mut raw = TcpStream::connect((BACKEND_IPS[0], port)).await.unwrap();
        raw.write_all(b"ping").await.unwrap();
        let mut four = [0u8; 4];
        raw.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"ping");
        shutdown.cancel();
    }

    #[test]
    fn objects_pin_the_second_service() {
        let objs = objects(18080, "127.240.0.100".parse().unwrap()).unwrap();
        let pinned = objs
            .iter()
            .find(|o| o["metadata"]["name"] == "echo-pinned")
            .unwrap();
        assert_eq!(pinned["spec"]["loadBalancerIP"], "127.240.0.100");
        let slices = objs.iter().filter(|o| o["kind"] == "EndpointSlice").count();
        assert_eq!(slices, 2);
    }

    #[test]
    fn the_hand_written_slice_points_at_the_backends() {
        let objs = objects(18123, "127.240.0.100".parse().unwrap()).unwrap();
        for service in ["echo", "echo-pinned"] {
            let slice = objs
                .iter()
                .find(|o| {
                    o["kind"] == "EndpointSlice"
                        && o["metadata"]["name"] == format!("{service}-demo")
                })
                .unwrap();
            // What the dataplane reads from it, as typed Kubernetes objects.
            let typed: k8s_openapi::api::discovery::v1::EndpointSlice =
                serde_json::from_value(slice.clone()).unwrap();
            assert_eq!(
                typed.metadata.labels.unwrap()["kubernetes.io/service-name"],
                service
            );
            assert_eq!(typed.metadata.namespace.as_deref(), Some("demo"));
            let ports = typed.ports.unwrap();
            assert_eq!(ports.len(), 1);
            assert_eq!(ports[0].port, Some(18123));
            assert_eq!(ports[0].name.as_deref(), Some("http"));
            let endpoints: Vec<(String, Option<bool>, Option<String>)> = typed
                .endpoints
                .into_iter()
                .map(|e| {
                    (
                        e.addresses.join(","),
                        e.conditions.and_then(|c| c.ready),
                        e.node_name,
                    )
                })
                .collect();
            let want: Vec<(String, Option<bool>, Option<String>)> = BACKEND_IPS
                .iter()
                .map(|ip| (ip.to_string(), Some(true), Some(NODE_NAME.to_string())))
                .collect();
            assert_eq!(endpoints, want, "{service}");
        }
        let printed = endpoint_slice_yaml("echo", 18123);
        assert!(
            !printed.contains("${"),
            "every placeholder is filled: {printed}"
        );
    }
}

//! `kube-lb up --demo`: it prints the hand-written EndpointSlice it applies (no endpoints
//! controller runs), an address appears, traffic to it reaches exactly the endpoints of that
//! slice round robin, and Ctrl-C (SIGINT) shuts everything down cleanly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::kubectl_legacy::spawn_reading_stdout;

const CEILING: Duration = Duration::from_secs(30);

fn get(addr: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: demo\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

#[test]
fn demo_serves_traffic_round_robin_and_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (mut child, rx) = spawn_reading_stdout(
        &["up", "--demo", "--metrics-addr", "127.0.0.1:0"],
        &kubeconfig,
    );

    // Wait for the printed curl hint of demo/echo, keeping what was printed before it.
    let deadline = Instant::now() + CEILING;
    let mut printed = Vec::new();
    let addr = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("kube-lb up printed no address in time");
        if line.starts_with("demo/echo ")
            && let Some(url) = line.split("curl http://").nth(1)
        {
            break url.trim_end_matches('/').to_string();
        }
        printed.push(line);
    };
    assert!(kubeconfig.exists(), "kubeconfig written");
    let endpoints = printed_slice_endpoints(&printed);

    // The dataplane may need a moment to bind after the address is published.
    let deadline = Instant::now() + CEILING;
    let mut backends = BTreeSet::new();
    let mut reached = BTreeSet::new();
    while backends.len() < 3 && Instant::now() < deadline {
        if let Some(reply) = get(&addr) {
            assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
            let backend = reply
                .split("echo backend ")
                .nth(1)
                .and_then(|s| s.split(' ').next());
            backends.insert(backend.unwrap().to_string());
            // "(127.0.0.12:18080)": the address the backend was reached on.
            let local = reply
                .split(" (")
                .nth(1)
                .and_then(|s| s.split(')').next())
                .unwrap();
            reached.insert(local.to_string());
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(
        backends.len(),
        3,
        "round robin reached every backend: {backends:?}"
    );
    assert_eq!(
        reached, endpoints,
        "traffic goes to exactly the endpoints of the printed slice"
    );

    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + CEILING;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "kube-lb up did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(
        TcpStream::connect(&addr).is_err(),
        "listener closed after shutdown"
    );
}

/// The `address:port` endpoints of the hand-written EndpointSlice `up --demo` prints between
/// `---` lines, after checking it is demo/echo's.
fn printed_slice_endpoints(printed: &[String]) -> BTreeSet<String> {
    let start = printed
        .iter()
        .position(|l| l.contains("hand-written EndpointSlice"))
        .unwrap_or_else(|| panic!("no EndpointSlice announced in {printed:#?}"));
    let body: Vec<&str> = printed[start + 1..]
        .iter()
        .map(String::as_str)
        .skip_while(|l| *l == "---")
        .take_while(|l| *l != "---")
        .collect();
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice =
        serde_yaml_ng::from_str(&body.join("\n")).unwrap();
    let labels = slice.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kubernetes.io/service-name").map(String::as_str),
        Some("echo"),
        "{slice:?}"
    );
    assert_eq!(slice.metadata.namespace.as_deref(), Some("demo"));
    let port = slice.ports.as_ref().unwrap()[0].port.unwrap();
    let endpoints: BTreeSet<String> = slice
        .endpoints
        .iter()
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .flat_map(|e| e.addresses.iter().map(|a| format!("{a}:{port}")))
        .collect();
    assert_eq!(endpoints.len(), 3, "{endpoints:?}");
    endpoints
}

//! The userspace backend and the health servers against real TCP/UDP servers on loopback.

#![allow(clippy::unwrap_used)] // helpers outside #[test] functions unwrap like the tests do

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_dataplane::health::{ProxyHealth, ServiceHealthServers};
use kube_lb_dataplane::model::{Index, IndexConfig, PROXY_PROTOCOL_ANNOTATION, Snapshot};
use kube_lb_dataplane::testing::{node, service, slice};
use kube_lb_dataplane::userspace::{Scheduler, Serve, UserspaceConfig, UserspaceProxy};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A backend "pod": answers every line / datagram with `NAME PEER`.
struct Backend {
    name: String,
    addr: SocketAddr,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn backend(name: &str) -> Backend {
    let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let udp = UdpSocket::bind(addr).await.unwrap();
    let tcp_name = name.to_owned();
    let tcp_task = tokio::spawn(async move {
        while let Ok((stream, peer)) = tcp.accept().await {
            let name = tcp_name.clone();
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(_)) = lines.next_line().await {
                    if write
                        .write_all(format!("{name} {peer}\n").as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            });
        }
    });
    let udp_name = name.to_owned();
    let udp_task = tokio::spawn(async move {
        let mut buffer = [0u8; 1500];
        while let Ok((_, peer)) = udp.recv_from(&mut buffer).await {
            let _ = udp
                .send_to(format!("{udp_name} {peer}").as_bytes(), peer)
                .await;
        }
    });
    Backend {
        name: name.into(),
        addr,
        tasks: vec![tcp_task, udp_task],
    }
}

/// A port nobody listens on right now.
async fn free_port(ip: &str) -> u16 {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    listener.local_addr().unwrap().port()
}

fn slices(service: &str, protocol: &str, backends: &[&Backend]) -> Vec<EndpointSlice> {
    backends
        .iter()
        .map(|b| {
            slice("default", service, &b.name)
                .port("", protocol, i32::from(b.addr.port()))
                .endpoint("127.0.0.1", "n1")
                .build()
        })
        .collect()
}

fn snapshot(services: &[Service], slices: &[EndpointSlice]) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: true,
    });
    index.apply_node(&node("n1", "za", "r1", &["127.0.0.1"]));
    for svc in services {
        index.apply_service(svc);
    }
    for eps in slices {
        index.apply_endpoint_slice(eps);
    }
    index.snapshot()
}

async fn request(addr: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.write_all(b"hello\n").await?;
    let mut line = String::new();
    BufReader::new(&mut stream).read_line(&mut line).await?;
    Ok(line.trim().to_owned())
}

fn name_of(reply: &str) -> String {
    reply
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn tcp_round_robin_covers_all_endpoints_and_refuses_without_endpoints() {
    let (a, b, c) = (backend("a").await, backend("b").await, backend("c").await);
    let port = free_port("127.77.1.1").await;
    let svc = service("default", "web", "127.77.1.1")
        .port("", "TCP", i32::from(port))
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
    let report = proxy
        .apply(&snapshot(
            std::slice::from_ref(&svc),
            &slices("web", "TCP", &[&a, &b, &c]),
        ))
        .await;
    assert_eq!(report.opened.len(), 1, "{report:?}");
    let frontend = format!("127.77.1.1:{port}");
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(name_of(&request(&frontend).await.unwrap()));
    }
    // Round robin in endpoint order (sorted by address): each cycle visits all three.
    assert_eq!(
        seen[..3].iter().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from(["a".into(), "b".into(), "c".into()])
    );
    assert_eq!(seen[..3], seen[3..]);

    // No endpoints: the listener is closed, so the kernel refuses.
    let report = proxy
        .apply(&snapshot(std::slice::from_ref(&svc), &[]))
        .await;
    assert_eq!(report.closed.len(), 1);
    let error = request(&frontend).await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
    // Back with endpoints, then the Service goes: closed again.
    proxy
        .apply(&snapshot(
            std::slice::from_ref(&svc),
            &slices("web", "TCP", &[&a]),
        ))
        .await;
    assert_eq!(name_of(&request(&frontend).await.unwrap()), "a");
    proxy.apply(&snapshot(&[], &[])).await;
    assert!(proxy.listening().is_empty());
    assert_eq!(
        request(&frontend).await.unwrap_err().kind(),
        std::io::ErrorKind::ConnectionRefused
    );
}

#[tokio::test]
async fn failed_connects_are_retried_on_another_endpoint() {
    let a = backend("a").await;
    let mut dead = backend("dead").await;
    // Stop the dead backend's listener: connecting to it is refused.
    for task in dead.tasks.drain(..) {
        task.abort();
        let _ = task.await;
    }
    let port = free_port("127.77.2.1").await;
    let svc = service("default", "web", "127.77.2.1")
        .port("", "TCP", i32::from(port))
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
    proxy
        .apply(&snapshot(&[svc], &slices("web", "TCP", &[&a, &dead])))
        .await;
    for _ in 0..6 {
        assert_eq!(
            name_of(&request(&format!("127.77.2.1:{port}")).await.unwrap()),
            "a"
        );
    }
}

#[tokio::test]
async fn removed_endpoint_keeps_its_established_connection() {
    let (a, b) = (backend("a").await, backend("b").await);
    let port = free_port("127.77.3.1").await;
    let svc = service("default", "web", "127.77.3.1")
        .port("", "TCP", i32::from(port))
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
    proxy
        .apply(&snapshot(
            std::slice::from_ref(&svc),
            &slices("web", "TCP", &[&a, &b]),
        ))
        .await;
    let frontend = format!("127.77.3.1:{port}");
    let held = TcpStream::connect(&frontend).await.unwrap();
    let (read, mut write) = held.into_split();
    let mut lines = BufReader::new(read).lines();
    write.write_all(b"1\n").await.unwrap();
    let held_on = name_of(&lines.next_line().await.unwrap().unwrap());
    let (gone, kept) = if held_on == "a" { (&a, &b) } else { (&b, &a) };
    proxy
        .apply(&snapshot(
            std::slice::from_ref(&svc),
            &slices("web", "TCP", &[kept]),
        ))
        .await;
    for _ in 0..3 {
        assert_eq!(name_of(&request(&frontend).await.unwrap()), kept.name);
    }
    write.write_all(b"2\n").await.unwrap();
    let reply = name_of(&lines.next_line().await.unwrap().unwrap());
    assert_eq!(reply, gone.name, "established connection survives");
}

#[tokio::test]
async fn client_ip_affinity_sticks_and_expires() {
    let (a, b) = (backend("a").await, backend("b").await);
    let port = free_port("127.77.4.1").await;
    let svc = service("default", "web", "127.77.4.1")
        .port("", "TCP", i32::from(port))
        .affinity(1)
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
    proxy
        .apply(&snapshot(&[svc], &slices("web", "TCP", &[&a, &b])))
        .await;
    let frontend = format!("127.77.4.1:{port}");
    let first = name_of(&request(&frontend).await.unwrap());
    for _ in 0..10 {
        assert_eq!(name_of(&request(&frontend).await.unwrap()), first);
    }
    // After the 1 s timeout without traffic the round robin moves on.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_ne!(name_of(&request(&frontend).await.unwrap()), first);
}

#[tokio::test]
async fn every_scheduler_serves_traffic() {
    let (a, b) = (backend("a").await, backend("b").await);
    for (i, scheduler) in Scheduler::ALL.into_iter().enumerate() {
        let ip = format!("127.77.5.{}", i + 1);
        let port = free_port(&ip).await;
        let svc = service("default", "web", &ip)
            .port("", "TCP", i32::from(port))
            .build();
        let mut proxy = UserspaceProxy::new(UserspaceConfig {
            scheduler,
            ..UserspaceConfig::default()
        });
        proxy
            .apply(&snapshot(&[svc], &slices("web", "TCP", &[&a, &b])))
            .await;
        let mut names = BTreeSet::new();
        for _ in 0..20 {
            names.insert(name_of(&request(&format!("{ip}:{port}")).await.unwrap()));
        }
        let expected_spread = !matches!(
            scheduler,
            Scheduler::DestinationHash | Scheduler::SourceHash
        );
        assert_eq!(names.len() == 2, expected_spread, "{scheduler}: {names:?}");
    }
}

#[tokio::test]
async fn udp_sessions_reply_and_end_when_idle() {
    let (a, b) = (backend("a").await, backend("b").await);
    let port = free_port("127.77.6.1").await;
    let svc = service("default", "dns", "127.77.6.1")
        .port("", "UDP", i32::from(port))
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig {
        udp_idle_timeout: Duration::from_millis(300),
        ..UserspaceConfig::default()
    });
    proxy
        .apply(&snapshot(&[svc], &slices("dns", "UDP", &[&a, &b])))
        .await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    client.connect(("127.77.6.1", port)).await.unwrap();
    let mut buffer = [0u8; 1500];
    let mut ask = async || {
        client.send(b"q").await.unwrap();
        let len = tokio::time::timeout(Duration::from_secs(2), client.recv(&mut buffer))
            .await
            .unwrap()
            .unwrap();
        name_of(&String::from_utf8_lossy(&buffer[..len]))
    };
    let first = ask().await;
    assert_eq!(ask().await, first, "one client, one session, one endpoint");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_ne!(
        ask().await,
        first,
        "after the idle timeout a new session picks the next endpoint"
    );
}

#[tokio::test]
async fn proxy_protocol_headers_reach_the_endpoint() {
    for (version, expect_v2) in [("v1", false), ("v2", true)] {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream_port = upstream.local_addr().unwrap().port();
        let ip = if expect_v2 {
            "127.77.7.2"
        } else {
            "127.77.7.1"
        };
        let port = free_port(ip).await;
        let svc = service("default", "web", ip)
            .port("", "TCP", i32::from(port))
            .annotate(PROXY_PROTOCOL_ANNOTATION, version)
            .build();
        let eps = slice("default", "web", "p")
            .port("", "TCP", i32::from(upstream_port))
            .endpoint("127.0.0.1", "n1")
            .build();
        let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
        proxy.apply(&snapshot(&[svc], &[eps])).await;
        let mut client = TcpStream::connect((ip, port)).await.unwrap();
        let client_addr = client.local_addr().unwrap();
        client.write_all(b"payload").await.unwrap();
        let (mut accepted, _) = upstream.accept().await.unwrap();
        let mut received = Vec::new();
        while !received.ends_with(b"payload") {
            let mut chunk = [0u8; 256];
            let n = accepted.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed early");
            received.extend_from_slice(&chunk[..n]);
        }
        if expect_v2 {
            assert_eq!(
                &received[..12],
                &kube_lb_dataplane::userspace::proxy_protocol::V2_SIGNATURE
            );
            assert_eq!(&received[16..20], &[127, 0, 0, 1]);
            assert_eq!(
                u16::from_be_bytes([received[24], received[25]]),
                client_addr.port()
            );
            assert_eq!(u16::from_be_bytes([received[26], received[27]]), port);
        } else {
            let expected = format!(
                "PROXY TCP4 127.0.0.1 {ip} {} {port}\r\npayload",
                client_addr.port()
            );
            assert_eq!(String::from_utf8_lossy(&received), expected);
        }
    }
}

#[tokio::test]
async fn sctp_ports_open_no_socket() {
    let svc = service("default", "sctp", "127.77.8.1")
        .port("", "SCTP", 9999)
        .build();
    let eps = slice("default", "sctp", "s")
        .port("", "SCTP", 9999)
        .endpoint("127.0.0.1", "n1")
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig::default());
    let report = proxy.apply(&snapshot(&[svc], &[eps])).await;
    assert!(report.opened.is_empty() && report.failed.is_empty());
    assert_eq!(report.skipped_sctp.len(), 1);
}

async fn http_get(addr: &str) -> (u16, Vec<(String, String)>, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

#[tokio::test]
async fn health_check_node_port_reports_local_endpoints() {
    let port = free_port("127.0.0.1").await;
    let svc = service("default", "web", "10.96.0.10")
        .port("", "TCP", 80)
        .node_port(30080)
        .load_balancer(&["192.0.2.1"])
        .local(i32::from(port))
        .build();
    let local = slice("default", "web", "a")
        .port("", "TCP", 8080)
        .endpoint("10.244.1.1", "n1")
        .endpoint("10.244.2.1", "n2")
        .build();
    let health = ProxyHealth::new(Duration::from_secs(60));
    let mut servers = ServiceHealthServers::new(health.clone(), vec!["127.0.0.1".parse().unwrap()]);
    assert!(
        servers
            .apply(&snapshot(std::slice::from_ref(&svc), &[local]).health_checks)
            .await
            .is_empty()
    );
    let addr = format!("127.0.0.1:{port}");
    let (status, headers, body) = http_get(&addr).await;
    assert_eq!(status, 200);
    assert!(headers.contains(&("content-type".into(), "application/json".into())));
    assert!(headers.contains(&("x-content-type-options".into(), "nosniff".into())));
    assert!(headers.contains(&("x-load-balancing-endpoint-weight".into(), "1".into())));
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["localEndpoints"], 1);
    assert_eq!(body["service"]["name"], "web");

    // This node loses its endpoint (another node still has one): 503.
    let remote = slice("default", "web", "a")
        .port("", "TCP", 8080)
        .endpoint("10.244.2.1", "n2")
        .build();
    servers
        .apply(&snapshot(std::slice::from_ref(&svc), &[remote]).health_checks)
        .await;
    let (status, _, body) = http_get(&addr).await;
    assert_eq!(status, 503);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["localEndpoints"],
        0
    );

    // Service gone: the port closes.
    servers.apply(&snapshot(&[], &[]).health_checks).await;
    assert!(TcpStream::connect(&addr).await.is_err());
}

#[tokio::test]
async fn load_balancer_ips_only_leaves_cluster_ips_alone() {
    let a = backend("a").await;
    let (cluster_ip, lb_ip) = ("127.77.9.1", "127.77.9.2");
    let port = free_port(lb_ip).await;
    let svc = service("default", "web", cluster_ip)
        .port("", "TCP", i32::from(port))
        .load_balancer(&[lb_ip])
        .build();
    let mut proxy = UserspaceProxy::new(UserspaceConfig {
        serve: Serve::LoadBalancerIps,
        ..UserspaceConfig::default()
    });
    proxy
        .apply(&snapshot(&[svc], &slices("web", "TCP", &[&a])))
        .await;
    let listening: Vec<SocketAddr> = proxy.listening().iter().map(|f| f.addr).collect();
    assert_eq!(
        listening,
        vec![SocketAddr::new(lb_ip.parse().unwrap(), port)]
    );
    assert_eq!(
        name_of(&request(&format!("{lb_ip}:{port}")).await.unwrap()),
        "a"
    );
}

//! Bounded per-client state in the userspace backend: 100,000 distinct client addresses (TCP and
//! UDP, both with ClientIP affinity) pass through one Service, and once the affinity timeout and
//! the UDP idle timeout have passed the proxy holds no client state and its memory is back to
//! its baseline (±10 %).
//!
//! The proxy runs in a child process (this test binary, re-run with `PROXY_CHILD` set), so its
//! resident set size is the proxy's alone: the clients and backends live in the parent. Distinct
//! client addresses come from 127.0.0.0/8, which is local on loopback in full.

// Helpers panic on setup failures, as the tests calling them do.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube_lb_dataplane::model::{Index, IndexConfig, Snapshot};
use kube_lb_dataplane::testing::{service, slice};
use kube_lb_dataplane::userspace::{UserspaceConfig, UserspaceProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, UdpSocket};

const CHILD_ENV: &str = "PROXY_CHILD";
/// Service address (TCP 80 and UDP 53).
const FRONTEND: Ipv4Addr = Ipv4Addr::new(127, 77, 20, 1);
const AFFINITY_SECONDS: i32 = 2;
const UDP_IDLE: Duration = Duration::from_secs(2);
const UDP_CAP: usize = 1000;

fn clients() -> usize {
    std::env::var("STATE_CLIENTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(100_000)
}

/// Client address number `i`: 127.1.0.1 upwards, skipping .0 and .255 octets.
fn client_ip(i: usize) -> IpAddr {
    let (a, rest) = (i / (254 * 254), i % (254 * 254));
    IpAddr::from([
        127,
        1 + a as u8,
        1 + (rest / 254) as u8,
        1 + (rest % 254) as u8,
    ])
}

fn snapshot(tcp_backends: &[SocketAddr], udp_backends: &[SocketAddr]) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: true,
    });
    index.apply_service(
        &service("default", "web", &FRONTEND.to_string())
            .port("http", "TCP", 80)
            .port("dns", "UDP", 53)
            .affinity(AFFINITY_SECONDS)
            .build(),
    );
    for (i, (tcp, udp)) in tcp_backends.iter().zip(udp_backends).enumerate() {
        assert_eq!(tcp.ip(), udp.ip());
        index.apply_endpoint_slice(
            &slice("default", "web", &format!("web-{i}"))
                .port("http", "TCP", i32::from(tcp.port()))
                .port("dns", "UDP", i32::from(udp.port()))
                .endpoint(&tcp.ip().to_string(), "n1")
                .build(),
        );
    }
    index.snapshot()
}

/// The proxy process: reads the endpoints from its environment, prints `ready`, then answers
/// each stdin line with its state counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
#[ignore = "run by bounded_state_returns_to_its_baseline in a child process"]
async fn proxy_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parse = |list: &str| -> Vec<SocketAddr> {
        list.split(',').map(|addr| addr.parse().unwrap()).collect()
    };
    let (tcp, udp) = spec.split_once(';').unwrap();
    let config = UserspaceConfig {
        udp_idle_timeout: UDP_IDLE,
        udp_sessions_per_service: UDP_CAP,
        workers: 2.try_into().unwrap(),
        ..UserspaceConfig::default()
    };
    let refused = config.refused_udp_sessions.clone();
    let mut proxy = UserspaceProxy::new(config);
    let report = proxy.apply(&snapshot(&parse(tcp), &parse(udp))).await;
    assert!(report.failed.is_empty(), "{report:?}");
    println!("ready");
    let mut lines = BufReader::new(std::io::stdin()).lines();
    while let Some(Ok(_)) = tokio::task::block_in_place(|| lines.next()) {
        let state = proxy.state();
        println!(
            "{} {} {} {} {}",
            state.affinity_entries,
            state.affinity_capacity,
            state.udp_sessions,
            refused.load(Ordering::Relaxed),
            kube_lb_dataplane::userspace::state::heap_trims()
        );
    }
}

struct Child {
    process: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: BufReader<std::process::ChildStdout>,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    affinity: usize,
    capacity: usize,
    udp: usize,
    refused: u64,
    rss_kib: u64,
    /// The anonymous part of it (heap, stacks): what per-client state costs. The rest is the
    /// program's own pages, mapped in as code paths run for the first time.
    anon_kib: u64,
    /// Heap trims the proxy had done when sampled.
    trims: u64,
}

impl Child {
    fn sample(&mut self) -> Sample {
        writeln!(self.stdin, "state").unwrap();
        self.stdin.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let numbers: Vec<u64> = line
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.process.id())).unwrap();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap()
        };
        let (rss_kib, anon_kib) = (field("VmRSS:"), field("RssAnon:"));
        Sample {
            affinity: numbers[0] as usize,
            capacity: numbers[1] as usize,
            udp: numbers[2] as usize,
            refused: numbers[3],
            rss_kib,
            anon_kib,
            trims: numbers[4],
        }
    }

    /// Samples until no client state is left and the proxy has since trimmed its heap once (so
    /// the resident size counts only what it still uses), or 30 s pass.
    fn settle(&mut self) -> Sample {
        let start = Instant::now();
        let mut empty_at_trims: Option<u64> = None;
        loop {
            let sample = self.sample();
            let empty = sample.affinity == 0 && sample.udp == 0;
            if !empty {
                empty_at_trims = None;
            } else if empty_at_trims.is_none() {
                empty_at_trims = Some(sample.trims);
            }
            let trimmed_since = empty_at_trims.is_some_and(|trims| sample.trims > trims);
            if trimmed_since || start.elapsed() > Duration::from_secs(30) {
                return sample;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// TCP backends that write one byte to every connection and close it (so the TIME_WAIT state
/// stays on their side), and UDP backends echoing every datagram. They run on a thread and
/// runtime of their own with a full-size accept queue: the 32 client tasks must not starve
/// them on a loaded machine, or a connection would fail for a reason that is not the proxy's.
fn backends(count: usize) -> (Vec<SocketAddr>, Vec<SocketAddr>) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let mut tcp = Vec::new();
            let mut udp = Vec::new();
            for _ in 0..count {
                let socket = TcpSocket::new_v4().unwrap();
                socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
                let listener = socket.listen(4096).unwrap();
                tcp.push(listener.local_addr().unwrap());
                tokio::spawn(async move {
                    while let Ok((mut stream, _)) = listener.accept().await {
                        tokio::spawn(async move {
                            let _ = stream.write_all(b"x").await;
                        });
                    }
                });
                let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                udp.push(socket.local_addr().unwrap());
                tokio::spawn(async move {
                    let mut buffer = [0u8; 512];
                    while let Ok((len, peer)) = socket.recv_from(&mut buffer).await {
                        let _ = socket.send_to(&buffer[..len], peer).await;
                    }
                });
            }
            ready_tx.send((tcp, udp)).unwrap();
            std::future::pending::<()>().await;
        });
    });
    ready_rx.recv().unwrap()
}

/// The traffic went through. Not every one of 100,000 connections: on a loaded 2-core CI machine
/// (the proxy, 32 clients and the backends share it with other tests) a few exceed the
/// clients' 5 s timeouts or the proxy's connect budget (250 ms … 2 s) — 80 to 226 of 100,000 in
/// CI runs, none on an idle machine. What this test is about is the state each client leaves.
fn assert_mostly_served(served: usize, total: usize) {
    assert!(
        served * 100 >= total * 99,
        "only {served} of {total} TCP clients were served"
    );
}

/// One TCP connection and one UDP datagram from each of `range`'s client addresses; returns how
/// many TCP connections got their byte.
async fn drive(range: std::ops::Range<usize>) -> usize {
    let next = Arc::new(AtomicUsize::new(range.start));
    let served = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let (next, served, end) = (next.clone(), served.clone(), range.end);
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= end {
                    break;
                }
                let ip = client_ip(i);
                let socket = TcpSocket::new_v4().unwrap();
                socket.bind(SocketAddr::new(ip, 0)).unwrap();
                if let Ok(Ok(mut stream)) = tokio::time::timeout(
                    Duration::from_secs(5),
                    socket.connect(SocketAddr::from((FRONTEND, 80))),
                )
                .await
                {
                    let mut byte = [0u8; 1];
                    if let Ok(Ok(1)) =
                        tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte)).await
                    {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let udp = UdpSocket::bind(SocketAddr::new(ip, 0)).await.unwrap();
                let _ = udp.send_to(b"q", SocketAddr::from((FRONTEND, 53))).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    served.load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_state_returns_to_its_baseline() {
    let total = clients();
    let (tcp, udp) = backends(3);
    let list = |addrs: &[SocketAddr]| {
        addrs
            .iter()
            .map(SocketAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut process = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "userspace_state::proxy_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{};{}", list(&tcp), list(&udp)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = process.stdin.take().unwrap();
    let mut stdout = BufReader::new(process.stdout.take().unwrap());
    // The test harness prints its own lines first, and "test proxy_child ... " without a
    // line break right before the child's own output.
    let mut line = String::new();
    while !line.trim_end().ends_with("ready") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "the proxy child exited"
        );
    }
    let mut child = Child {
        process,
        stdin,
        stdout,
    };

    // Warm-up: one burst of the same size, so allocator arenas, worker runtimes and socket
    // tables reach their working size; then every client is forgotten and the baseline is
    // taken. (Measured: the first burst of 100,000 grows the proxy's anonymous memory once, by
    // ~0.8 MiB, from 1.3 to 2.2 MiB; each later burst comes back to within 2 % of that: no
    // per-client trace is left.)
    let warm = total;
    assert_mostly_served(drive(0..warm).await, warm);
    let settled = tokio::task::block_in_place(|| child.settle());
    assert_eq!((settled.affinity, settled.udp), (0, 0), "{settled:?}");
    let baseline = settled;

    // The peak is sampled while the clients come: entries of the first clients expire before
    // the last ones arrive.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = child.sample();
            while !done.load(Ordering::Relaxed) {
                let sample = child.sample();
                peak = Sample {
                    affinity: peak.affinity.max(sample.affinity),
                    capacity: peak.capacity.max(sample.capacity),
                    udp: peak.udp.max(sample.udp),
                    refused: sample.refused,
                    rss_kib: peak.rss_kib.max(sample.rss_kib),
                    anon_kib: peak.anon_kib.max(sample.anon_kib),
                    trims: sample.trims,
                };
                std::thread::sleep(Duration::from_millis(100));
            }
            let last = child.sample();
            (
                child,
                Sample {
                    refused: last.refused,
                    ..peak
                },
            )
        })
    };
    let started = Instant::now();
    let served = drive(warm..warm + total).await;
    let driven = started.elapsed();
    done.store(true, Ordering::Relaxed);
    let (mut child, peak) = tokio::task::block_in_place(|| sampler.join().unwrap());
    assert_mostly_served(served, total);
    assert!(
        peak.affinity >= (total / 10).min(5000),
        "clients are remembered until their timeout: {peak:?}"
    );
    assert!(peak.udp <= UDP_CAP, "{peak:?}");
    assert!(
        peak.refused > baseline.refused,
        "the UDP cap refused clients: {peak:?}"
    );

    let after = tokio::task::block_in_place(|| child.settle());
    eprintln!(
        "{total} clients in {driven:?}; baseline {baseline:?}\npeak {peak:?}\nafter {after:?}"
    );
    assert_eq!((after.affinity, after.udp), (0, 0), "{after:?}");
    assert!(
        after.capacity <= 2 * baseline.capacity.max(128),
        "{after:?}"
    );
    for (what, after, baseline, peak) in [
        ("RSS", after.rss_kib, baseline.rss_kib, peak.rss_kib),
        (
            "anonymous RSS",
            after.anon_kib,
            baseline.anon_kib,
            peak.anon_kib,
        ),
    ] {
        // ±10 %, and at least ±512 KiB: the anonymous part is only ~2.4 MiB, where one more
        // allocator arena page or thread stack page is already 10 % (seen once in CI: +264 KiB).
        let slack = (baseline / 10).max(512);
        assert!(
            after.abs_diff(baseline) <= slack,
            "{what} {after} KiB after vs {baseline} KiB baseline (peak {peak} KiB)"
        );
    }
}

//! Dataplane benchmarks, printing side-by-side ratios measured in one run.
//!
//! ```text
//! sudo cargo bench -p kube-lb-dataplane --bench dataplane            # 1k and 10k Services
//! sudo cargo bench -p kube-lb-dataplane --bench dataplane -- --quick # 1k only, short runs
//! (`--kernel-only` / `--userspace-only` run one half)
//! ```
//!
//! Needs root, `ip netns`, `nft`, `iptables-restore` and `haproxy`. Everything kernel-side happens
//! in network namespaces created (and deleted) by the benchmark; userspace numbers use loopback.
//!
//! 1. nftables full sync of N Services × 10 endpoints, and a one-endpoint change among N, beside
//!    an equivalent kube-proxy-style iptables ruleset loaded with `iptables-restore` in the same
//!    namespace (full load, and a partial restore that rewrites KUBE-SERVICES like kube-proxy).
//! 2. Connection setup time to Service #1 vs Service #N for both.
//! 3. The userspace backend's request rate and throughput beside HAProxy and a direct connection.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark binary: failing loudly is the point

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kube_lb_dataplane::maglev::TableSize;
use kube_lb_dataplane::model::{EndpointAddr, Index, IndexConfig, Snapshot};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler};
use kube_lb_dataplane::testing::{service, slice};
use kube_lb_dataplane::userspace::{UserspaceConfig, UserspaceEngine, UserspaceProxy};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const PROBE: &str = env!("CARGO_BIN_EXE_kube-lb-probe");
const ENDPOINTS: usize = 10;
/// One-endpoint changes measured per size (CPU time is averaged over them: 10 ms ticks).
const CHANGE_ROUNDS: u8 = 20;
const POD_IP: &str = "192.168.77.2";

fn sh(args: &[&str]) -> String {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Moves the calling thread into network namespace `name` (children it starts inherit it) and
/// returns a handle on the namespace it was in.
fn enter_netns(name: &str) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let host = std::fs::File::open("/proc/thread-self/ns/net").unwrap();
    let target = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
    set_netns(target.as_raw_fd());
    host
}

/// Returns the calling thread to the namespace [`enter_netns`] left.
fn leave_netns(host: &std::fs::File) {
    use std::os::fd::AsRawFd;
    set_netns(host.as_raw_fd());
}

#[allow(unsafe_code)] // setns(2) has no safe wrapper in the dependencies; a benchmark harness only
fn set_netns(fd: std::os::fd::RawFd) {
    // SAFETY: `fd` is an open namespace file descriptor owned by the caller for the duration of
    // the call; setns only changes the calling thread's network namespace.
    let result = unsafe { libc::setns(fd, libc::CLONE_NEWNET) };
    assert_eq!(result, 0, "setns: {}", std::io::Error::last_os_error());
}

/// CPU time (user + system) of all reaped child processes so far, from `/proc/self/stat`:
/// unlike wall time it hardly depends on what else the machine is doing.
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; cutime and cstime are fields 16 and 17.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[13].parse::<u64>().unwrap() + fields[14].parse::<u64>().unwrap();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// CPU time (user + system) of this process so far, all threads: the nftables backend runs
/// its incremental transactions in a libnftables context inside this process, not in an `nft`
/// child.
fn own_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // utime and stime are fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn sh_stdin(args: &[&str], input: &str) -> Duration {
    let started = Instant::now();
    let mut child = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    started.elapsed()
}

fn ip_at(base: Ipv4Addr, offset: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + u32::try_from(offset).unwrap())
}

fn cluster_ip(i: usize) -> Ipv4Addr {
    ip_at(Ipv4Addr::new(10, 96, 0, 1), i)
}

/// Endpoints of Service `i`; the first and last Service point at the real pod.
fn endpoints(i: usize, count: usize) -> Vec<(String, u16)> {
    if i == 0 || i == count - 1 {
        return vec![(POD_IP.to_owned(), 8080)];
    }
    (0..ENDPOINTS)
        .map(|j| {
            (
                ip_at(Ipv4Addr::new(10, 128, 0, 0), i * ENDPOINTS + j).to_string(),
                8080,
            )
        })
        .collect()
}

fn snapshot(count: usize) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: "bench".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: true,
    });
    for i in 0..count {
        let name = format!("svc-{i}");
        index.apply_service(
            &service("bench", &name, &cluster_ip(i).to_string())
                .port("", "TCP", 80)
                .build(),
        );
        let mut eps = slice("bench", &name, &name).port("", "TCP", 8080);
        for (ip, _) in endpoints(i, count) {
            eps = eps.endpoint(&ip, "bench");
        }
        index.apply_endpoint_slice(&eps.build());
    }
    index.snapshot()
}

fn hash(text: &str) -> String {
    // Short stable chain suffix, like kube-proxy's base32 of a hash.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016X}")
}

/// kube-proxy's iptables layout for the same Services: KUBE-SERVICES → KUBE-SVC-* (statistic
/// random) → KUBE-SEP-* (hairpin mark + DNAT). `only` limits the per-Service chains written
/// (partial restore); KUBE-SERVICES is always written in full, as kube-proxy does.
fn iptables_text(count: usize, only: Option<usize>, swap_endpoint: bool) -> String {
    let mut chains = String::new();
    let mut rules = String::new();
    chains.push_str(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n",
    );
    if only.is_none() {
        rules.push_str("-A OUTPUT -j KUBE-SERVICES\n-A PREROUTING -j KUBE-SERVICES\n-A POSTROUTING -j KUBE-POSTROUTING\n");
        rules.push_str("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n");
        rules.push_str("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n-A KUBE-POSTROUTING -j MASQUERADE\n");
    }
    for i in 0..count {
        let svc = format!("KUBE-SVC-{}", hash(&format!("svc-{i}")));
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {}/32 -p tcp -m tcp --dport 80 -j {svc}",
            cluster_ip(i)
        );
        if only.is_some_and(|only| only != i) {
            continue;
        }
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let mut eps = endpoints(i, count);
        if swap_endpoint && let Some(last) = eps.last_mut() {
            last.0 = "10.255.0.1".into();
        }
        let n = eps.len();
        for (j, (ip, port)) in eps.iter().enumerate() {
            let sep = format!("KUBE-SEP-{}", hash(&format!("svc-{i}-{ip}")));
            let _ = writeln!(chains, ":{sep} - [0:0]");
            if j + 1 < n {
                let probability = 1.0 / (n - j) as f64;
                let _ = writeln!(
                    rules,
                    "-A {svc} -m statistic --mode random --probability {probability:.10} -j {sep}"
                );
            } else {
                let _ = writeln!(rules, "-A {svc} -j {sep}");
            }
            let _ = writeln!(rules, "-A {sep} -s {ip}/32 -j KUBE-MARK-MASQ");
            let _ = writeln!(
                rules,
                "-A {sep} -p tcp -m tcp -j DNAT --to-destination {ip}:{port}"
            );
        }
    }
    format!("{chains}{rules}COMMIT\n")
}

struct Netns {
    node: String,
    pod: String,
    server: std::process::Child,
}

impl Netns {
    fn new() -> Netns {
        let node = format!("klbbench{}n", std::process::id());
        let pod = format!("klbbench{}p", std::process::id());
        for ns in [&node, &pod] {
            sh(&["ip", "netns", "add", ns]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        sh(&[
            "ip", "-n", &node, "link", "add", "veth0", "type", "veth", "peer", "name", "eth0",
            "netns", &pod,
        ]);
        sh(&[
            "ip",
            "-n",
            &node,
            "addr",
            "add",
            "192.168.77.1/24",
            "dev",
            "veth0",
        ]);
        sh(&["ip", "-n", &node, "link", "set", "veth0", "up"]);
        // Service addresses need a route before the nat output hook rewrites them.
        sh(&["ip", "-n", &node, "route", "add", "default", "dev", "veth0"]);
        sh(&[
            "ip",
            "-n",
            &pod,
            "addr",
            "add",
            &format!("{POD_IP}/24"),
            "dev",
            "eth0",
        ]);
        sh(&["ip", "-n", &pod, "link", "set", "eth0", "up"]);
        sh(&[
            "ip",
            "-n",
            &pod,
            "route",
            "add",
            "default",
            "via",
            "192.168.77.1",
        ]);
        let mut server = Command::new("ip")
            .args(["netns", "exec", &pod, PROBE, "serve", "pod", "8080"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(server.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        Netns { node, pod, server }
    }

    /// Median and p90 connect time (µs) from the node namespace.
    fn connect_time(&self, addr: &str, count: usize) -> (u64, u64) {
        let out = sh(&[
            "ip",
            "netns",
            "exec",
            &self.node,
            PROBE,
            "time",
            addr,
            &count.to_string(),
        ]);
        let mut parts = out.split_whitespace().map(|p| p.parse::<u64>().unwrap());
        (parts.next().unwrap(), parts.next().unwrap())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        for ns in [&self.node, &self.pod] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// Services in the Maglev comparison: each owns a 4,093-slot table, so a full sync loads
/// 409,300 map elements (the one-change cost does not depend on it).
const MAGLEV_SERVICES: usize = 100;

/// One endpoint replaced with `--scheduler maglev` beside the default random scheduler: two
/// backends in one namespace each (own table names would clash, so one after the other),
/// changes alternated round by round so machine noise hits both alike.
async fn maglev_change(ns: &Netns) {
    let snap = snapshot(MAGLEV_SERVICES);
    let middle = snap.ports.keys().nth(MAGLEV_SERVICES / 2).cloned().unwrap();
    let changed = |round: u8| {
        let mut changed = snap.clone();
        if round.is_multiple_of(2)
            && let Some(port) = changed.ports.get_mut(&middle)
            && let Some(last) = port.cluster_endpoints.last_mut()
        {
            *last = EndpointAddr {
                ip: Ipv4Addr::new(10, 255, 0, 1).into(),
                port: 8080,
            };
        }
        changed
    };
    let mut results = Vec::new();
    for (name, scheduler) in [
        ("random", NftScheduler::default()),
        ("maglev", NftScheduler::Maglev(TableSize::default())),
    ] {
        let host_netns = enter_netns(&ns.node);
        let mut backend = NftBackend::new(
            NftConfig {
                scheduler,
                ..NftConfig::default()
            },
            Commands {
                nft: vec!["nft".into()],
                conntrack: None,
                sysctl: Vec::new(),
            },
        );
        let started = Instant::now();
        backend.sync(&snap).await.expect("full sync");
        let full = started.elapsed();
        let mut times = Vec::new();
        let mut lines = 0;
        for round in 0..CHANGE_ROUNDS {
            let report = backend.sync(&changed(round)).await.expect("one change");
            assert!(!report.full);
            times.push(report.nft_time);
            lines = lines.max(report.commands);
        }
        leave_netns(&host_netns);
        for family in ["ip", "ip6"] {
            sh(&[
                "ip", "netns", "exec", &ns.node, "nft", "delete", "table", family, "kube-lb",
            ]);
        }
        results.push((name, full, median(times), lines));
    }
    println!(
        "\n== one endpoint replaced among {MAGLEV_SERVICES} Services x {ENDPOINTS}, median of {CHANGE_ROUNDS}: --scheduler maglev (table {}) vs random",
        TableSize::default()
    );
    for (name, full, change, lines) in &results {
        println!(
            "{name:>8} | full sync {:>12} | one change {:>10} ({lines} transaction lines)",
            ms(*full),
            ms(*change)
        );
    }
    println!(
        "   ratio | one change maglev / random {:.2}x (target <= 1.5x)",
        results[1].2.as_secs_f64() / results[0].2.as_secs_f64()
    );
}

async fn kernel_benchmarks(sizes: &[usize], connects: usize) {
    let ns = Netns::new();
    println!(
        "== nftables (kube-lb) vs iptables-restore (kube-proxy layout), {ENDPOINTS} endpoints per Service"
    );
    println!(
        "{:>8} | {:>14} {:>14} {:>7} | {:>14} {:>14} {:>7} | {:>14}",
        "services",
        "nft full",
        "ipt full",
        "ratio",
        "nft 1 change",
        "ipt 1 change",
        "ratio",
        "nft 1 removal"
    );
    let mut connect_rows = Vec::new();
    let mut cpu_rows = Vec::new();
    for &count in sizes {
        let snap = snapshot(count);
        // nftables: full sync into an empty namespace, then one-endpoint changes.
        // The backend runs plain `nft` from inside the node's namespace, as on a node: no
        // `ip netns exec` wrapper in the measured time.
        let host_netns = enter_netns(&ns.node);
        let mut backend = NftBackend::new(
            NftConfig::default(),
            Commands {
                nft: vec!["nft".into()],
                conntrack: None,
                sysctl: Vec::new(),
            },
        );
        let started = Instant::now();
        let cpu_before = children_cpu();
        let report = backend.sync(&snap).await.expect("nft full sync");
        let nft_full = started.elapsed();
        let nft_full_cpu = children_cpu() - cpu_before;
        assert!(report.full);
        let mut changes = Vec::new();
        let middle = snap.ports.keys().nth(count / 2).cloned().unwrap();
        let cpu_before = children_cpu() + own_cpu();
        for round in 0..CHANGE_ROUNDS {
            let mut changed = snap.clone();
            if let Some(port) = changed.ports.get_mut(&middle)
                && let Some(last) = port.cluster_endpoints.last_mut()
            {
                *last = EndpointAddr {
                    ip: Ipv4Addr::new(10, 255, 0, round).into(),
                    port: 8080,
                };
            }
            let report = backend.sync(&changed).await.expect("nft change");
            changes.push(report.nft_time);
        }
        let nft_change = median(changes);
        // The whole sync (render, diff, nft) in this process plus any `nft` child.
        let nft_change_cpu = (children_cpu() + own_cpu() - cpu_before) / u32::from(CHANGE_ROUNDS);
        // A removal changes the group's size too (10 → 9 endpoints), then it comes back.
        let mut removals = Vec::new();
        for _ in 0..5 {
            let mut smaller = snap.clone();
            if let Some(port) = smaller.ports.get_mut(&middle) {
                port.cluster_endpoints.pop();
            }
            let report = backend.sync(&smaller).await.expect("nft removal");
            removals.push(report.nft_time);
            backend.sync(&snap).await.expect("nft restore");
        }
        let nft_removal = median(removals);
        leave_netns(&host_netns);
        let nft_connect = (
            ns.connect_time(&format!("{}:80", cluster_ip(0)), connects),
            ns.connect_time(&format!("{}:80", cluster_ip(count - 1)), connects),
        );
        sh(&[
            "ip", "netns", "exec", &ns.node, "nft", "delete", "table", "ip", "kube-lb",
        ]);
        sh(&[
            "ip", "netns", "exec", &ns.node, "nft", "delete", "table", "ip6", "kube-lb",
        ]);

        // iptables-restore with the kube-proxy layout.
        let cpu_before = children_cpu();
        let ipt_full = sh_stdin(
            &["ip", "netns", "exec", &ns.node, "iptables-restore"],
            &iptables_text(count, None, false),
        );
        let ipt_full_cpu = children_cpu() - cpu_before;
        let ipt_change = median(
            (0..3)
                .map(|round| {
                    let text = iptables_text(count, Some(count / 2), round % 2 == 0);
                    sh_stdin(
                        &[
                            "ip",
                            "netns",
                            "exec",
                            &ns.node,
                            "iptables-restore",
                            "--noflush",
                        ],
                        &text,
                    )
                })
                .collect(),
        );
        let ipt_connect = (
            ns.connect_time(&format!("{}:80", cluster_ip(0)), connects),
            ns.connect_time(&format!("{}:80", cluster_ip(count - 1)), connects),
        );
        sh(&[
            "ip", "netns", "exec", &ns.node, "iptables", "-t", "nat", "-F",
        ]);
        sh(&[
            "ip", "netns", "exec", &ns.node, "iptables", "-t", "nat", "-X",
        ]);
        println!(
            "{count:>8} | {:>14} {:>14} {:>6.1}x | {:>14} {:>14} {:>6.1}x | {:>14}",
            ms(nft_full),
            ms(ipt_full),
            ipt_full.as_secs_f64() / nft_full.as_secs_f64(),
            ms(nft_change),
            ms(ipt_change),
            ipt_change.as_secs_f64() / nft_change.as_secs_f64(),
            ms(nft_removal)
        );
        connect_rows.push((count, nft_connect, ipt_connect));
        cpu_rows.push((count, nft_full_cpu, ipt_full_cpu, nft_change_cpu));
    }
    // The floor every `nft` run that replaces or removes an element pays: closing its netlink
    // socket at exit flushes the transaction's deferred destruction, an RCU grace period (with
    // /sys/kernel/rcu_expedited = 1 it shrinks to a few ms). The backend's incremental syncs
    // run in a libnftables context that stays open and do not pay it. Measured on a
    // one-element set, nothing else in the table.
    let floor_table = "add table ip klbfloor\nadd set ip klbfloor s { type ipv4_addr; }\n";
    sh_stdin(
        &["ip", "netns", "exec", &ns.node, "nft", "-f", "-"],
        floor_table,
    );
    let host_netns = enter_netns(&ns.node);
    let timed = |text: &str| sh_stdin(&["nft", "-f", "-"], text);
    let mut adds = Vec::new();
    let mut deletes = Vec::new();
    for _ in 0..CHANGE_ROUNDS {
        adds.push(timed("add element ip klbfloor s { 192.0.2.1 }\n"));
        deletes.push(timed("delete element ip klbfloor s { 192.0.2.1 }\n"));
    }
    leave_netns(&host_netns);
    sh(&[
        "ip", "netns", "exec", &ns.node, "nft", "delete", "table", "ip", "klbfloor",
    ]);
    println!(
        "\n`nft` program floor (one-element set, rcu_expedited={}): adding an element {}, deleting one {} (its exit closes the netlink socket, which waits for the deletion's RCU grace period; the backend's kept libnftables context never closes it)",
        std::fs::read_to_string("/sys/kernel/rcu_expedited")
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|_| "?".into()),
        ms(median(adds)),
        ms(median(deletes))
    );
    maglev_change(&ns).await;
    println!(
        "\n== CPU time (user + system) of the nft / iptables-restore processes, load-independent"
    );
    println!(
        "{:>8} | {:>14} {:>14} {:>7} | {:>20}",
        "services", "nft full", "ipt full", "ratio", "1 change, whole sync"
    );
    for (count, nft_full, ipt_full, nft_change) in cpu_rows {
        println!(
            "{count:>8} | {:>14} {:>14} {:>6.1}x | {:>20}",
            ms(nft_full),
            ms(ipt_full),
            ipt_full.as_secs_f64() / nft_full.as_secs_f64().max(0.001),
            ms(nft_change)
        );
    }
    println!(
        "\n== connection setup time from the node, median / p90 in µs ({connects} connects each)"
    );
    println!(
        "{:>8} | {:>16} {:>16} {:>7} | {:>16} {:>16} {:>7}",
        "services", "nft svc #1", "nft svc #N", "N/1", "ipt svc #1", "ipt svc #N", "N/1"
    );
    for (count, nft, ipt) in connect_rows {
        println!(
            "{count:>8} | {:>16} {:>16} {:>6.2}x | {:>16} {:>16} {:>6.2}x",
            format!("{} / {}", nft.0.0, nft.0.1),
            format!("{} / {}", nft.1.0, nft.1.1),
            nft.1.0 as f64 / nft.0.0.max(1) as f64,
            format!("{} / {}", ipt.0.0, ipt.0.1),
            format!("{} / {}", ipt.1.0, ipt.1.1),
            ipt.1.0 as f64 / ipt.0.0.max(1) as f64,
        );
    }
}

/// Endpoints of the benchmarked Service: one listener of the backend server per endpoint, each
/// on its own loopback address. A closed connection leaves a TIME_WAIT entry for its address
/// pair; with one endpoint, every connection a proxy dials shares one source address, one
/// destination and about 28k ephemeral ports, and at this benchmark's rates each `connect()`
/// has to hunt for an entry old enough to reuse (`tcp_tw_reuse`, one second), so every target,
/// the direct one too, ran into the same ceiling and the ratios said little about the proxies.
const PROXIED_ENDPOINTS: u8 = 8;

/// The backend server's listeners for one target: [`PROXIED_ENDPOINTS`] loopback addresses
/// `127.0.<group>.1…` on one port.
async fn backends(group: u8) -> Vec<SocketAddr> {
    'port: for _ in 0..20 {
        let first = TcpListener::bind(SocketAddr::from((Ipv4Addr::new(127, 0, group, 1), 0)))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let mut listeners = vec![first];
        for host in 2..=PROXIED_ENDPOINTS {
            match TcpListener::bind(SocketAddr::from((Ipv4Addr::new(127, 0, group, host), port)))
                .await
            {
                Ok(listener) => listeners.push(listener),
                // Taken on that address by someone else: try another port.
                Err(_) => continue 'port,
            }
        }
        return listeners.into_iter().map(serve).collect();
    }
    panic!("no port free on all of 127.0.{group}.1-{PROXIED_ENDPOINTS}");
}

/// Serves line requests on `listener`: `bulk N` streams N bytes, anything else gets `ok`.
fn serve(listener: TcpListener) -> SocketAddr {
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = stream.set_nodelay(true);
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(size) = line
                        .strip_prefix("bulk ")
                        .and_then(|s| s.parse::<usize>().ok())
                    {
                        let chunk = vec![0u8; 64 * 1024];
                        let mut left = size;
                        while left > 0 {
                            let n = left.min(chunk.len());
                            if write.write_all(&chunk[..n]).await.is_err() {
                                return;
                            }
                            left -= n;
                        }
                    } else if write.write_all(b"ok\n").await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// Connects to `target` from `source` (a loopback address of the load generator's own), so
/// each request loop has its own TIME_WAIT space, as clients on many machines would.
#[allow(unsafe_code)] // IP_BIND_ADDRESS_NO_PORT has no safe wrapper in the dependencies
async fn connect_from(source: Ipv4Addr, target: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::AsRawFd;
    let socket = tokio::net::TcpSocket::new_v4()?;
    // The port is picked at connect() for the whole address pair, not reserved at bind().
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and a c_int option value of the size passed.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&raw const on).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    socket.bind(SocketAddr::from((source, 0)))?;
    socket.connect(target).await
}

async fn one_request(stream: &mut BufReader<TcpStream>) -> std::io::Result<()> {
    stream.get_mut().write_all(b"req\n").await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    Ok(())
}

/// Requests/s with `concurrency` loops for `duration`; `reconnect` opens a connection per request.
/// Loop `i` connects from `127.1.0.<i+1>` to `targets[i % len]`. Also returns every completed
/// request's latency in µs (connect included when `reconnect`).
async fn request_rate(
    targets: &[SocketAddr],
    concurrency: usize,
    duration: Duration,
    reconnect: bool,
) -> (f64, Vec<u32>) {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in 0..concurrency {
        let (done, stop) = (done.clone(), stop.clone());
        let target = targets[client % targets.len()];
        let source = Ipv4Addr::new(127, 1, 0, u8::try_from(client + 1).unwrap());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut connection: Option<BufReader<TcpStream>> = None;
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                if connection.is_none() || reconnect {
                    let Ok(stream) = connect_from(source, target).await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    connection = Some(BufReader::new(stream));
                }
                if let Some(stream) = connection.as_mut() {
                    if one_request(stream).await.is_ok() {
                        done.fetch_add(1, Ordering::Relaxed);
                        let micros = started.elapsed().as_micros();
                        latencies.push(u32::try_from(micros).unwrap_or(u32::MAX));
                    } else {
                        connection = None;
                    }
                }
            }
            latencies
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        if let Ok(mut task_latencies) = task.await {
            latencies.append(&mut task_latencies);
        }
    }
    (
        done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64(),
        latencies,
    )
}

/// MB/s pulling `bytes` over `streams` connections.
async fn throughput(target: SocketAddr, streams: usize, bytes: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(target).await.unwrap();
            stream
                .write_all(format!("bulk {bytes}\n").as_bytes())
                .await
                .unwrap();
            let mut buffer = vec![0u8; 256 * 1024];
            let mut left = bytes;
            while left > 0 {
                let n = stream.read(&mut buffer).await.unwrap();
                assert!(n > 0, "stream ended early");
                left = left.saturating_sub(n);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    (streams * bytes) as f64 / started.elapsed().as_secs_f64() / 1e6
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `/proc` directories of the threads of process `pid` whose name starts with `prefix` (every
/// thread when `None`).
fn threads_of(pid: u32, prefix: Option<&str>) -> Vec<std::path::PathBuf> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .map(|task| task.path())
        .filter(|task| {
            prefix.is_none_or(|prefix| {
                std::fs::read_to_string(task.join("comm"))
                    .is_ok_and(|comm| comm.starts_with(prefix))
            })
        })
        .collect()
}

/// CPU time in ns spent so far by those threads, from their `schedstat`.
fn cpu_ns(pid: u32, prefix: Option<&str>) -> u64 {
    threads_of(pid, prefix)
        .iter()
        .filter_map(|task| std::fs::read_to_string(task.join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// Proxy threads whose CPU time is charged to a target.
#[derive(Clone)]
enum Cpu {
    /// No proxy: the client talks to the backend.
    None,
    /// Threads of a process, by name prefix.
    Threads(u32, Option<&'static str>),
    /// Threads of this process, by id (those a proxy started), plus any whose name starts with
    /// the prefix (io_uring's `iou-wrk` workers, started when the kernel punts a request).
    Tids(Arc<[u32]>, Option<&'static str>),
}

impl Cpu {
    fn now(&self) -> u64 {
        match self {
            Cpu::None => 0,
            Cpu::Threads(pid, prefix) => cpu_ns(*pid, *prefix),
            Cpu::Tids(tids, prefix) => {
                let pid = std::process::id();
                let listed: u64 = tids
                    .iter()
                    .filter_map(|tid| {
                        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()
                    })
                    .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
                    .sum();
                listed + prefix.map_or(0, |prefix| cpu_ns(pid, Some(prefix)))
            }
        }
    }
}

/// Ids of this process's threads.
fn thread_ids() -> std::collections::BTreeSet<u32> {
    threads_of(std::process::id(), None)
        .iter()
        .filter_map(|task| task.file_name()?.to_str()?.parse().ok())
        .collect()
}

/// What one target accumulated over the slices of one figure.
#[derive(Clone, Default)]
struct Totals {
    /// Requests completed, or bytes received for throughput.
    work: f64,
    seconds: f64,
    cpu_ns: u64,
    /// CPU ns of the load generator and backend threads (the same programs for every target).
    load_ns: u64,
    /// Request latencies in µs (request figures only).
    latencies: Vec<u32>,
}

impl Totals {
    fn add(&mut self, slice: Slice) {
        let Slice {
            work,
            seconds,
            cpu_ns,
            load_ns,
            latencies,
        } = slice;
        self.work += work;
        self.seconds += seconds;
        self.cpu_ns += cpu_ns;
        self.load_ns += load_ns;
        self.latencies.extend(latencies);
    }

    /// The `q` quantile of the request latencies, µs.
    fn latency(&mut self, q: f64) -> u32 {
        self.latencies.sort_unstable();
        let index = (self.latencies.len() as f64 * q) as usize;
        self.latencies
            .get(index.min(self.latencies.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }

    fn rate(&self) -> f64 {
        self.work / self.seconds
    }

    /// Proxy CPU µs per unit of work.
    fn cpu_per(&self) -> f64 {
        self.cpu_ns as f64 / 1e3 / self.work
    }

    /// Client and backend CPU µs per unit of work.
    fn load_per(&self) -> f64 {
        self.load_ns as f64 / 1e3 / self.work
    }
}

/// The figures compared.
#[derive(Clone, Copy, PartialEq)]
enum Figure {
    /// Requests/s, one new connection per request.
    NewConnection,
    /// Requests/s over kept-alive connections.
    KeepAlive,
    /// MB/s of one bulk stream.
    Throughput,
}

/// What one measurement slice of one figure against one target came to.
struct Slice {
    /// Requests completed, or MB received.
    work: f64,
    seconds: f64,
    /// CPU ns of the proxy's threads.
    cpu_ns: u64,
    /// CPU ns of the load generator's and the backend's threads.
    load_ns: u64,
    /// Request latencies in µs.
    latencies: Vec<u32>,
}

/// CPU ns so far of this process's load generator and backend threads.
fn load_cpu_ns() -> u64 {
    let pid = std::process::id();
    cpu_ns(pid, Some("bench-client")) + cpu_ns(pid, Some("bench-backend"))
}

/// One measurement slice of `figure` against `target`.
async fn slice_of(figure: Figure, target: &[SocketAddr], cpu: &Cpu, slice: Duration) -> Slice {
    let before = cpu.now();
    let load_before = load_cpu_ns();
    let started = Instant::now();
    let (work, latencies) = match figure {
        Figure::NewConnection | Figure::KeepAlive => {
            let (rate, latencies) =
                request_rate(target, CLIENTS, slice, figure == Figure::NewConnection).await;
            (rate * slice.as_secs_f64(), latencies)
        }
        Figure::Throughput => {
            let bytes = 128 << 20;
            throughput(target[0], 1, bytes).await;
            (bytes as f64 / 1e6, Vec::new())
        }
    };
    let seconds = match figure {
        Figure::Throughput => started.elapsed().as_secs_f64(),
        _ => slice.as_secs_f64(),
    };
    Slice {
        work,
        seconds,
        cpu_ns: cpu.now() - before,
        load_ns: load_cpu_ns() - load_before,
        latencies,
    }
}

/// Concurrent request loops of the load generator.
const CLIENTS: usize = 32;
/// Threads of each proxy under test: HAProxy's `nbthread` and the userspace backend's workers.
const PROXY_THREADS: usize = 2;

/// The userspace backend beside HAProxy and a direct connection: requests/s with a new connection
/// per request and with keep-alive, single-stream throughput, and each proxy's CPU time per
/// request.
///
/// The machine is shared, so the load changes while the benchmark runs. Each figure is therefore
/// measured in short slices, rotating the order of the targets from one slice to the next, and a
/// target's figure is its total over all its slices: a load change hits every target alike.
/// `--rounds N` sets the slices per figure (default 10 of 0.5 s; 2 with `--quick`);
/// `--only-new-connections` measures the new-connection figure alone, `--only-stream` the one-stream one.
/// nftables tables on this machine: any NAT table makes the kernel track every connection, and
/// at these rates the conntrack table fills and new connections are dropped (the run stalls).
fn warn_about_nft_tables() {
    let tables = sh(&["nft", "list", "tables"]);
    if !tables.trim().is_empty() {
        println!(
            "\nWARNING: nftables tables exist here ({}); a NAT table among them makes the kernel track every connection, and this benchmark's rates fill the conntrack table (new connections dropped, the run stalls). Remove leftovers first.",
            tables.lines().map(str::trim).collect::<Vec<_>>().join(", ")
        );
    }
}

fn userspace_benchmarks(quick: bool) {
    warn_about_nft_tables();
    let rounds: usize = std::env::args()
        .skip_while(|arg| arg != "--rounds")
        .nth(1)
        .map_or(if quick { 2 } else { 10 }, |n| {
            n.parse().expect("--rounds N")
        });
    // Load generator and backend get their own runtimes; the proxy runs on its own worker
    // threads, this runtime only applies its configuration.
    let control_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap();
    let backend_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-backend")
        .enable_all()
        .build()
        .unwrap();
    // One server program and runtime, its own group of endpoint addresses per target: each
    // target's connections to the backend then have their own TIME_WAIT space, so one target's
    // closed connections do not slow down another's connect().
    let [
        direct_backends,
        userspace_backends,
        haproxy_backends,
        epoll_backends,
    ] = backend_runtime.block_on(async {
        [
            backends(11).await,
            backends(12).await,
            backends(13).await,
            backends(14).await,
        ]
    });

    // kube-lb userspace: a ClusterIP-like frontend on 127.0.0.2 with the default engine
    // (io_uring where the kernel allows it), and the same on 127.0.0.4 forced to the epoll
    // engine, so one run shows what the engine changes.
    let start_proxy = |engine: UserspaceEngine, ip: &str, backends: &[SocketAddr]| {
        let port = free_port();
        let proxy_config = UserspaceConfig {
            workers: PROXY_THREADS.try_into().unwrap(),
            engine,
            ..UserspaceConfig::default()
        };
        let mut index = Index::new(IndexConfig {
            node_name: "bench".into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: true,
        });
        index.apply_service(
            &service("bench", "web", ip)
                .port("", "TCP", i32::from(port))
                .build(),
        );
        let mut endpoints =
            slice("bench", "web", "web").port("", "TCP", i32::from(backends[0].port()));
        for backend in backends {
            endpoints = endpoints.endpoint(&backend.ip().to_string(), "bench");
        }
        index.apply_endpoint_slice(&endpoints.build());
        let mut proxy = UserspaceProxy::new(proxy_config);
        let choice = proxy.engine().expect("userspace engine");
        // The threads the proxy starts are its own: their CPU time is charged to it.
        let before = thread_ids();
        let report = control_runtime.block_on(proxy.apply(&index.snapshot()));
        assert_eq!(report.opened.len(), 1, "{report:?}");
        let tids: Arc<[u32]> = thread_ids().difference(&before).copied().collect();
        let addr: SocketAddr = format!("{ip}:{port}").parse().unwrap();
        (proxy, choice, tids, addr)
    };
    let (proxy, choice, userspace_tids, userspace_addr) =
        start_proxy(UserspaceEngine::Auto, "127.0.0.2", &userspace_backends);
    let (epoll_proxy, _, epoll_tids, epoll_addr) =
        start_proxy(UserspaceEngine::Epoll, "127.0.0.4", &epoll_backends);
    let defaults = UserspaceConfig::default();
    let described = format!(
        "kube-lb userspace: {PROXY_THREADS} worker threads, scheduler {}, first connect timeout {:?}; engine {} ({}), beside the epoll engine",
        defaults.scheduler, defaults.connect_timeouts[0], choice.engine, choice.reason
    );

    // HAProxy in TCP mode with the same backend, as many threads, no logging, no health checks,
    // round robin over the same number of endpoints as kube-lb's default scheduler.
    let haproxy_port = free_port();
    let servers: String = haproxy_backends
        .iter()
        .enumerate()
        .map(|(n, backend)| format!("  server s{n} {backend}\n"))
        .collect();
    let config = format!(
        "global\n  maxconn 4000\n  nbthread {PROXY_THREADS}\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
         listen bench\n  bind 127.0.0.3:{haproxy_port}\n  balance roundrobin\n{servers}"
    );
    let config_path =
        std::env::temp_dir().join(format!("kube-lb-bench-haproxy-{}.cfg", std::process::id()));
    std::fs::write(&config_path, &config).unwrap();
    let haproxy_version = sh(&["haproxy", "-v"])
        .lines()
        .next()
        .unwrap_or("")
        .to_owned();
    let mut haproxy = Command::new("haproxy");
    haproxy
        .arg("-f")
        .arg(&config_path)
        .arg("-db")
        .stdout(Stdio::null());
    let haproxy = ChildGuard(
        dies_with_this_process(&mut haproxy)
            .spawn()
            .expect("haproxy"),
    );
    let haproxy_addr: SocketAddr = format!("127.0.0.3:{haproxy_port}").parse().unwrap();
    client_runtime.block_on(async {
        for _ in 0..100 {
            if TcpStream::connect(haproxy_addr).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("haproxy did not start");
    });
    // Read at start: the file is not left behind, however the run ends.
    let _ = std::fs::remove_file(&config_path);

    let targets = [
        ("direct", direct_backends.clone(), Cpu::None),
        (
            "kube-lb userspace",
            vec![userspace_addr],
            Cpu::Tids(userspace_tids.clone(), Some("iou-")),
        ),
        (
            "haproxy",
            vec![haproxy_addr],
            Cpu::Threads(haproxy.0.id(), None),
        ),
        (
            "kube-lb epoll",
            vec![epoll_addr],
            Cpu::Tids(epoll_tids.clone(), None),
        ),
    ];
    let slice = Duration::from_millis(500);
    println!(
        "\n== userspace proxy on loopback: {rounds} slices of {} ms per figure and target, order rotating, {CLIENTS} concurrent clients",
        slice.as_millis()
    );
    let uring_threads = threads_of(std::process::id(), Some("klb-uring")).len();
    println!(
        "   {described}; threads (from /proc): {} started by the default-engine proxy ({uring_threads} io_uring workers, the rest idle tokio workers kept for UDP and affinity sweeping), {} by the epoll one, {} haproxy",
        userspace_tids.len(),
        epoll_tids.len(),
        threads_of(haproxy.0.id(), None).len()
    );
    println!(
        "   {haproxy_version}: {}",
        config.lines().map(str::trim).collect::<Vec<_>>().join("; ")
    );
    println!(
        "   same backend server (2 tokio threads; {PROXIED_ENDPOINTS} endpoints per target, e.g. {} for haproxy) and client (2 tokio threads, each request loop from its own 127.1.0.x), all on loopback; load {}",
        haproxy_backends
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        load_average()
    );
    // `--only-new-connections` measures the new-connection figure alone (the other columns stay
    // empty): quicker repeats when only the connection path changed.
    let only_new = std::env::args().any(|arg| arg == "--only-new-connections");
    // `--only-stream` likewise measures the one-stream figure alone.
    let only_stream = std::env::args().any(|arg| arg == "--only-stream");
    let figures = [Figure::NewConnection, Figure::KeepAlive, Figure::Throughput];
    let mut totals: [[Totals; 4]; 3] = Default::default();
    // Per-slice userspace/haproxy ratios.
    let mut spreads: [Vec<f64>; 3] = Default::default();
    for (f, figure) in figures.into_iter().enumerate() {
        // Bulk transfers take long enough per slice that fewer of them do.
        let slices = if (only_new && figure != Figure::NewConnection)
            || (only_stream && figure != Figure::Throughput)
        {
            0
        } else if figure == Figure::Throughput {
            rounds.div_ceil(2)
        } else {
            rounds
        };
        for round in 0..slices {
            let mut order = [0, 1, 2, 3];
            order.rotate_left(round % 4);
            if round % 8 >= 4 {
                order.reverse();
            }
            let mut this = [0.0; 4];
            for index in order {
                let (_, addr, cpu) = &targets[index];
                let measured = client_runtime.block_on(slice_of(figure, addr, cpu, slice));
                this[index] = measured.work / measured.seconds;
                totals[f][index].add(measured);
            }
            spreads[f].push(this[1] / this[2]);
        }
    }
    println!(
        "\n{:>18} | {:>16} {:>17} {:>15} | {:>28}",
        "target",
        "req/s (new conn)",
        "req/s (keepalive)",
        "MB/s (1 stream)",
        "proxy CPU µs/req n / k / µs/MB"
    );
    for (index, (name, _, cpu)) in targets.iter().enumerate() {
        let cpu_text = match cpu {
            Cpu::None => String::new(),
            Cpu::Threads(..) | Cpu::Tids(..) => format!(
                "{:.1} / {:.1} / {:.0}",
                totals[0][index].cpu_per(),
                totals[1][index].cpu_per(),
                totals[2][index].cpu_per()
            ),
        };
        println!(
            "{name:>18} | {:>16.0} {:>17.0} {:>15.0} | {cpu_text:>28}",
            totals[0][index].rate(),
            totals[1][index].rate(),
            totals[2][index].rate()
        );
    }
    let ratio = |f: usize, of: usize, to: usize| totals[f][of].rate() / totals[f][to].rate();
    for (name, of, to) in [
        ("userspace/haproxy", 1, 2),
        ("epoll/haproxy", 3, 2),
        ("userspace/epoll", 1, 3),
        ("userspace/direct", 1, 0),
        ("haproxy/direct", 2, 0),
    ] {
        let cpu = if to == 0 {
            String::new()
        } else {
            format!(
                "{:.2}x / {:.2}x / {:.2}x",
                totals[0][of].cpu_per() / totals[0][to].cpu_per(),
                totals[1][of].cpu_per() / totals[1][to].cpu_per(),
                totals[2][of].cpu_per() / totals[2][to].cpu_per()
            )
        };
        println!(
            "{name:>18} | {:>15.2}x {:>16.2}x {:>14.2}x | {cpu:>28}",
            ratio(0, of, to),
            ratio(1, of, to),
            ratio(2, of, to),
        );
    }
    // Per-slice userspace/haproxy ratios: the median shrugs off a slice a load burst hit, the
    // range shows how much the load moved things around.
    for spread in &mut spreads {
        spread.sort_by(f64::total_cmp);
    }
    let median = |values: &[f64]| {
        values
            .get(values.len() / 2)
            .map_or_else(|| "-".to_owned(), |median| format!("{median:.2}x"))
    };
    let range = |values: &[f64]| match (values.first(), values.last()) {
        (Some(low), Some(high)) => format!("{low:.2}–{high:.2}x"),
        _ => "-".to_owned(),
    };
    println!(
        "{:>18} | {:>16} {:>17} {:>15} |",
        "per-slice median",
        median(&spreads[0]),
        median(&spreads[1]),
        median(&spreads[2]),
    );
    println!(
        "{:>18} | {:>16} {:>17} {:>15} | load {}",
        "per-slice range",
        range(&spreads[0]),
        range(&spreads[1]),
        range(&spreads[2]),
        load_average()
    );
    // Where the CPU goes per new-connection request. On a machine the load generator and
    // backend share with the proxy, req/s follows the total: with equal client and backend
    // costs, userspace/haproxy ≈ (haproxy + its load) / (userspace + its load), and even a
    // proxy that cost nothing could not pass (haproxy + its load) / load.
    println!(
        "\n{:>18} | {:>12} {:>16} {:>12}   (CPU µs per new-connection request)",
        "target", "proxy", "client + backend", "together"
    );
    for (index, (name, _, cpu)) in targets.iter().enumerate() {
        let totals = &totals[0][index];
        let proxy = match cpu {
            Cpu::None => 0.0,
            Cpu::Threads(..) | Cpu::Tids(..) => totals.cpu_per(),
        };
        println!(
            "{name:>18} | {proxy:>12.1} {:>16.1} {:>12.1}",
            totals.load_per(),
            proxy + totals.load_per()
        );
    }
    let together = |index: usize| totals[0][index].cpu_per() + totals[0][index].load_per();
    println!(
        "{:>18} | userspace/haproxy from CPU {:.2}x; with a proxy costing nothing {:.2}x",
        "CPU-bound ratio",
        together(2) / together(1),
        together(2) / totals[0][1].load_per()
    );
    // The same for one bulk stream, with the cores all that CPU kept busy: under 2 the stream
    // was not CPU-bound, so a cheaper proxy cannot show in MB/s.
    println!(
        "\n{:>18} | {:>12} {:>16} {:>12} {:>10}   (CPU µs per MB of one stream)",
        "target", "proxy", "client + backend", "together", "cores busy"
    );
    for (index, (name, _, cpu)) in targets.iter().enumerate() {
        let totals = &totals[2][index];
        let proxy = match cpu {
            Cpu::None => 0.0,
            Cpu::Threads(..) | Cpu::Tids(..) => totals.cpu_per(),
        };
        let together = proxy + totals.load_per();
        println!(
            "{name:>18} | {proxy:>12.0} {:>16.0} {together:>12.0} {:>10.2}",
            totals.load_per(),
            together * totals.rate() / 1e6
        );
    }
    println!(
        "\n{:>18} | {:>22} {:>22}",
        "request latency µs", "p50 / p99 (new conn)", "p50 / p99 (keepalive)"
    );
    for (index, (name, _, _)) in targets.iter().enumerate() {
        let [new_connection, keep_alive, _] = &mut totals;
        let new_connection = &mut new_connection[index];
        let keep_alive = &mut keep_alive[index];
        println!(
            "{name:>18} | {:>22} {:>22}",
            format!(
                "{} / {}",
                new_connection.latency(0.5),
                new_connection.latency(0.99)
            ),
            format!("{} / {}", keep_alive.latency(0.5), keep_alive.latency(0.99)),
        );
    }
    drop(haproxy);
    drop(proxy);
    drop(epoll_proxy);
}

/// A child process killed (and reaped) when the benchmark lets go of it, a panic included.
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `command`, set up so its process is killed when this one dies without unwinding (a signal,
/// a closed pipe under `| head`): no HAProxy is left listening after an interrupted run.
#[allow(unsafe_code)] // prctl(PR_SET_PDEATHSIG) in the child between fork and exec
fn dies_with_this_process(command: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    }
}

/// What `--help` prints.
const USAGE: &str = "dataplane benchmark (needs root, ip netns, nft, iptables-restore, haproxy)

  --quick                   1k Services only, short runs
  --kernel-only             nftables vs iptables-restore, Maglev, connection setup time
  --userspace-only          the userspace proxy vs HAProxy and a direct connection
  --only-new-connections    (userspace) the new-connection figure alone
  --only-stream             (userspace) the one-stream figure alone
  --rounds N                (userspace) slices per figure (default 10, 2 with --quick)";

fn main() -> ExitCode {
    if std::env::args().any(|arg| arg == "--help" || arg == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let quick = std::env::args().any(|arg| arg == "--quick");
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root {
        eprintln!(
            "SKIPPED: the dataplane benchmark needs root (network namespaces, nft, iptables)"
        );
        return ExitCode::SUCCESS;
    }
    let sizes: &[usize] = if quick { &[1_000] } else { &[1_000, 10_000] };
    if !std::env::args().any(|arg| arg == "--userspace-only") {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(kernel_benchmarks(sizes, if quick { 100 } else { 500 }));
    }
    if !std::env::args().any(|arg| arg == "--kernel-only") {
        userspace_benchmarks(quick);
    }
    ExitCode::SUCCESS
}

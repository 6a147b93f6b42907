//! The node dataplane at scale, with ratios measured in one run:
//!
//! - nftables full sync and one endpoint change (kube-lb's `NftBackend`), beside the same
//!   Services in kube-proxy's iptables layout loaded with `iptables-restore` (full load, and the
//!   partial restore kube-proxy does for one change: KUBE-SERVICES in full plus one Service's
//!   chains);
//! - a real `kube-lb proxy --mode nftables` process fed by the embedded API server: time to its
//!   first full sync, one EndpointSlice change from the API write to the synced rules, and its
//!   peak RSS (`VmHWM`) while it holds the size.
//!
//! ```text
//! sudo cargo bench --bench dataplane_scale
//! sudo KUBE_LB_BENCH_SIZES=5000x50,40000x2 cargo bench --bench dataplane_scale
//! ```
//!
//! `KUBE_LB_BENCH_PARTS` picks what runs (default `nft,iptables,proxy`; the nft part always runs).
//! Sizes are `SERVICESxENDPOINTS`, comma separated (default `1000x10,5000x50,10000x10,40000x2`:
//! the `dataplane` bench's sizes, 250,000 endpoints, and 40,000 Services). Results go to
//! `KUBE_LB_BENCH_OUT` (default `bench/results/`): `dataplane_scale.csv` and `dataplane_scale.svg`
//! (sync and one-change time against Service count, kube-lb vs iptables-restore, log scales).
//!
//! Needs root, `ip netns`, `nft` and `iptables-restore`. The benchmark re-runs itself inside a
//! network namespace it creates and deletes, so every rule lands there and nothing it measures
//! pays for an `ip netns exec`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark binary: failing loudly is the point

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::PostParams;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::model::{EndpointAddr, Index, IndexConfig, Snapshot};
use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig};
use kube_lb_dataplane::testing::{node, service, slice};

const KUBE_LB: &str = env!("CARGO_BIN_EXE_kube-lb");
/// Set in the re-run inside the namespace.
const INSIDE: &str = "KUBE_LB_BENCH_NETNS";
/// One-endpoint changes measured per size.
const CHANGE_ROUNDS: u8 = 10;
const NODE: &str = "bench";
const NAMESPACE: &str = "bench";

/// `services` Services with `endpoints` endpoints each.
#[derive(Debug, Clone, Copy)]
struct Size {
    services: usize,
    endpoints: usize,
}

impl Size {
    fn parse_list(text: &str) -> Vec<Size> {
        text.split(',')
            .filter(|part| !part.trim().is_empty())
            .map(|part| {
                let (services, endpoints) = part
                    .trim()
                    .split_once('x')
                    .expect("sizes are SERVICESxENDPOINTS");
                Size {
                    services: services.parse().expect("Service count"),
                    endpoints: endpoints.parse().expect("endpoint count"),
                }
            })
            .collect()
    }

    fn total(self) -> usize {
        self.services * self.endpoints
    }
}

fn ip_at(base: Ipv4Addr, offset: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + u32::try_from(offset).unwrap())
}

fn cluster_ip(i: usize) -> Ipv4Addr {
    ip_at(Ipv4Addr::new(10, 96, 0, 1), i)
}

fn endpoint_ips(size: Size, i: usize) -> Vec<Ipv4Addr> {
    (0..size.endpoints)
        .map(|j| ip_at(Ipv4Addr::new(10, 128, 0, 0), i * size.endpoints + j))
        .collect()
}

fn name(i: usize) -> String {
    format!("svc-{i}")
}

fn slice_of(size: Size, i: usize, replaced: Option<Ipv4Addr>) -> EndpointSlice {
    let mut ips = endpoint_ips(size, i);
    if let (Some(ip), Some(last)) = (replaced, ips.last_mut()) {
        *last = ip;
    }
    let mut builder = slice(NAMESPACE, &name(i), &name(i)).port("", "TCP", 8080);
    for ip in ips {
        builder = builder.endpoint(&ip.to_string(), NODE);
    }
    builder.build()
}

fn snapshot(size: Size) -> Snapshot {
    let mut index = Index::new(IndexConfig {
        node_name: NODE.into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    for i in 0..size.services {
        index.apply_service(
            &service(NAMESPACE, &name(i), &cluster_ip(i).to_string())
                .port("", "TCP", 80)
                .build(),
        );
        index.apply_endpoint_slice(&slice_of(size, i, None));
    }
    index.snapshot()
}

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

/// Runs `args` with `input` on stdin; wall time.
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

/// CPU time (user + system) of every reaped child process so far, from `/proc/self/stat`.
fn children_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // cutime and cstime, fields 16 and 17 of stat(5); USER_HZ is 100.
    let ticks: u64 = fields[13].parse::<u64>().unwrap() + fields[14].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016X}")
}

/// kube-proxy's iptables layout: KUBE-SERVICES → KUBE-SVC-* (statistic random) → KUBE-SEP-*
/// (hairpin mark + DNAT). `only` writes one Service's chains (a partial restore; KUBE-SERVICES is
/// always written in full, as kube-proxy does), with its last endpoint replaced when `swap`.
fn iptables_text(size: Size, only: Option<usize>, swap: bool) -> String {
    let mut chains = String::from(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n",
    );
    let mut rules = String::new();
    if only.is_none() {
        rules.push_str("-A OUTPUT -j KUBE-SERVICES\n-A PREROUTING -j KUBE-SERVICES\n-A POSTROUTING -j KUBE-POSTROUTING\n");
        rules.push_str("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n");
        rules.push_str("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n-A KUBE-POSTROUTING -j MASQUERADE\n");
    }
    for i in 0..size.services {
        let svc = format!("KUBE-SVC-{}", hash(&name(i)));
        let _ = writeln!(
            rules,
            "-A KUBE-SERVICES -d {}/32 -p tcp -m tcp --dport 80 -j {svc}",
            cluster_ip(i)
        );
        if only.is_some_and(|only| only != i) {
            continue;
        }
        let _ = writeln!(chains, ":{svc} - [0:0]");
        let mut ips = endpoint_ips(size, i);
        if swap && let Some(last) = ips.last_mut() {
            *last = Ipv4Addr::new(10, 255, 0, 1);
        }
        let n = ips.len();
        for (j, ip) in ips.iter().enumerate() {
            let sep = format!("KUBE-SEP-{}", hash(&format!("{}-{ip}", name(i))));
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
                "-A {sep} -p tcp -m tcp -j DNAT --to-destination {ip}:8080"
            );
        }
    }
    format!("{chains}{rules}COMMIT\n")
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// One size's figures.
#[derive(Debug, Default, Clone)]
struct Row {
    services: usize,
    endpoints: usize,
    /// Building the snapshot from Service and EndpointSlice objects, in this process.
    index_ms: f64,
    nft_full_ms: f64,
    /// The transaction alone of that full sync (the rest is rendering in this process).
    nft_full_run_ms: f64,
    nft_full_cpu_ms: f64,
    /// Whole `NftBackend::sync` call (diff, render, nft run) for one endpoint change; median.
    nft_change_ms: f64,
    /// The `nft -f` run alone of that change; median.
    nft_change_run_ms: f64,
    ipt_full_ms: f64,
    ipt_full_cpu_ms: f64,
    ipt_change_ms: f64,
    /// `kube-lb proxy`: start to the first full sync written.
    proxy_first_sync_ms: f64,
    /// `kube-lb proxy`: EndpointSlice write through the API to its change synced.
    proxy_change_ms: f64,
    /// `kube-lb proxy`: `nft` time of that change, from its log.
    proxy_change_nft_ms: f64,
    /// `kube-lb proxy` peak RSS (`VmHWM`), MiB.
    proxy_peak_rss_mib: f64,
}

const CSV_HEADER: &str = "services,endpoints_per_service,endpoints,index_ms,kube_lb_full_sync_ms,kube_lb_full_sync_cpu_ms,kube_lb_one_change_ms,kube_lb_one_change_nft_ms,iptables_full_restore_ms,iptables_full_restore_cpu_ms,iptables_one_change_ms,full_ratio,change_ratio,proxy_first_sync_ms,proxy_one_change_ms,proxy_one_change_nft_ms,proxy_peak_rss_mib,kube_lb_full_sync_nft_ms";

impl Row {
    fn csv(&self) -> String {
        format!(
            "{},{},{},{:.1},{:.1},{:.1},{:.2},{:.2},{:.1},{:.1},{:.2},{:.2},{:.2},{:.1},{:.2},{:.2},{:.1},{:.1}",
            self.services,
            self.endpoints,
            self.services * self.endpoints,
            self.index_ms,
            self.nft_full_ms,
            self.nft_full_cpu_ms,
            self.nft_change_ms,
            self.nft_change_run_ms,
            self.ipt_full_ms,
            self.ipt_full_cpu_ms,
            self.ipt_change_ms,
            self.ipt_full_ms / self.nft_full_ms,
            self.ipt_change_ms / self.nft_change_ms,
            self.proxy_first_sync_ms,
            self.proxy_change_ms,
            self.proxy_change_nft_ms,
            self.proxy_peak_rss_mib,
            self.nft_full_run_ms,
        )
    }
}

/// nftables through `NftBackend`, then iptables-restore (unless `iptables` is false), in this
/// (the bench's) namespace.
async fn kernel(size: Size, row: &mut Row, iptables: bool) {
    let started = Instant::now();
    let snap = snapshot(size);
    row.index_ms = ms(started.elapsed());

    let mut backend = NftBackend::new(
        NftConfig::default(),
        Commands {
            nft: vec!["nft".into()],
            conntrack: None,
            sysctl: Vec::new(),
        },
    );
    let cpu = children_cpu();
    let started = Instant::now();
    let report = backend.sync(&snap).await.expect("nft full sync");
    row.nft_full_ms = ms(started.elapsed());
    row.nft_full_run_ms = ms(report.nft_time);
    row.nft_full_cpu_ms = ms(children_cpu() - cpu);
    assert!(report.full);
    let middle = snap.ports.keys().nth(size.services / 2).cloned().unwrap();
    let (mut whole, mut runs) = (Vec::new(), Vec::new());
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
        // The proxy knows which Service an update touched and passes it on; so does the bench.
        let touched = std::collections::BTreeSet::from([middle.clone()]);
        let started = Instant::now();
        let report = backend
            .sync_changed(&changed, Some(&touched))
            .await
            .expect("nft change");
        whole.push(started.elapsed());
        runs.push(report.nft_time);
        assert!(!report.full, "one change is not a full sync");
    }
    row.nft_change_ms = ms(median(whole));
    row.nft_change_run_ms = ms(median(runs));
    drop(backend);
    for family in ["ip", "ip6"] {
        sh(&["nft", "delete", "table", family, "kube-lb"]);
    }
    if !iptables {
        return;
    }

    let text = iptables_text(size, None, false);
    let cpu = children_cpu();
    row.ipt_full_ms = ms(sh_stdin(&["iptables-restore"], &text));
    row.ipt_full_cpu_ms = ms(children_cpu() - cpu);
    drop(text);
    let changes = (0..3)
        .map(|round| {
            let text = iptables_text(size, Some(size.services / 2), round % 2 == 0);
            sh_stdin(&["iptables-restore", "--noflush"], &text)
        })
        .collect();
    row.ipt_change_ms = ms(median(changes));
    sh(&["iptables", "-t", "nat", "-F"]);
    sh(&["iptables", "-t", "nat", "-X"]);
}

/// What the proxy logged about one sync.
struct Synced {
    at: Instant,
    full: bool,
    nft_ms: f64,
}

/// `VmHWM` of process `pid` in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib / 1024.0
}

/// A real `kube-lb proxy` holding `size`, fed by the embedded API server in this process.
async fn proxy(size: Size, row: &mut Row) {
    let server = ApiServer::builder().start().await.expect("api server");
    server
        .seed(node(NODE, "za", "r1", &["10.0.0.1"]))
        .expect("seed node");
    for i in 0..size.services {
        server
            .seed(
                service(NAMESPACE, &name(i), &cluster_ip(i).to_string())
                    .port("", "TCP", 80)
                    .build(),
            )
            .expect("seed service");
        server.seed(slice_of(size, i, None)).expect("seed slice");
    }
    let kubeconfig =
        std::env::temp_dir().join(format!("kube-lb-scale-{}.kubeconfig", std::process::id()));
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");

    let started = Instant::now();
    let mut child = Command::new(KUBE_LB)
        .args(["--log", "info", "--log-format", "json", "proxy"])
        .args(["--node-name", NODE, "--mode", "nftables", "--nft-table"])
        .args(["klb-scale", "--healthz-addr", "127.0.0.1:0"])
        .args(["--min-sync-period", "100ms", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kube-lb proxy");
    let pid = child.id();
    let stderr = child.stderr.take().unwrap();
    let (tx, synced) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let fields = &event["fields"];
            if fields["message"] == "synced nftables" {
                let _ = tx.send(Synced {
                    at: Instant::now(),
                    full: fields["full"].as_bool().unwrap_or(false),
                    nft_ms: fields["nft_ms"].as_f64().unwrap_or(f64::NAN),
                });
            } else if event["level"] == "ERROR" || event["level"] == "WARN" {
                eprintln!("kube-lb proxy: {line}");
            }
        }
    });
    let wait = |what: &str| {
        synced
            .recv_timeout(Duration::from_secs(600))
            .unwrap_or_else(|_| panic!("kube-lb proxy: no {what} within 10 min"))
    };
    let first = wait("first sync");
    assert!(first.full);
    row.proxy_first_sync_ms = ms(first.at - started);

    let slices: Api<EndpointSlice> = Api::namespaced(server.client().unwrap(), NAMESPACE);
    let mut changes = Vec::new();
    let mut runs = Vec::new();
    for round in 0..3u8 {
        // Past --min-sync-period since the last sync: the change is not held back by pacing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let middle = size.services / 2;
        let mut changed = slice_of(size, middle, Some(Ipv4Addr::new(10, 255, 1, round)));
        changed.metadata.resource_version = None;
        let written = Instant::now();
        slices
            .replace(&name(middle), &PostParams::default(), &changed)
            .await
            .expect("replace slice");
        let sync = wait("sync after a change");
        assert!(!sync.full, "one change is not a full sync");
        changes.push(sync.at - written);
        runs.push(Duration::from_secs_f64(sync.nft_ms / 1000.0));
    }
    row.proxy_change_ms = ms(median(changes));
    row.proxy_change_nft_ms = ms(median(runs));
    row.proxy_peak_rss_mib = peak_rss_mib(pid);
    let _ = child.kill();
    let _ = child.wait();
    server.shutdown().await;
    let _ = std::fs::remove_file(kubeconfig);
    for family in ["ip", "ip6"] {
        let _ = Command::new("nft")
            .args(["delete", "table", family, "klb-scale"])
            .status();
    }
}

fn print_rows(rows: &[Row]) {
    println!(
        "\n{:>17} | {:>10} {:>10} {:>10} {:>6} | {:>9} {:>9} {:>10} {:>6} | {:>11} {:>10} {:>9}",
        "services × eps",
        "nft full",
        "(nft run)",
        "ipt full",
        "ratio",
        "nft 1 chg",
        "(nft run)",
        "ipt 1 chg",
        "ratio",
        "proxy start",
        "proxy chg",
        "proxy RSS"
    );
    for row in rows {
        println!(
            "{:>17} | {:>7.0} ms {:>7.0} ms {:>7.0} ms {:>5.1}x | {:>6.1} ms {:>6.1} ms {:>7.1} ms {:>5.1}x | {:>8.0} ms {:>7.1} ms {:>5.0} MiB",
            format!("{} × {}", row.services, row.endpoints),
            row.nft_full_ms,
            row.nft_full_run_ms,
            row.ipt_full_ms,
            row.ipt_full_ms / row.nft_full_ms,
            row.nft_change_ms,
            row.nft_change_run_ms,
            row.ipt_change_ms,
            row.ipt_change_ms / row.nft_change_ms,
            row.proxy_first_sync_ms,
            row.proxy_change_ms,
            row.proxy_peak_rss_mib,
        );
    }
}

/// One line of the chart: label, colour, solid (full sync) or dashed (one change), value.
type Series = (
    &'static str,
    plotters::style::RGBColor,
    bool,
    fn(&Row) -> f64,
);

/// One SVG: full sync and one-change time against Service count, kube-lb vs iptables-restore,
/// both axes logarithmic.
fn chart(rows: &[Row], path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let mut rows: Vec<&Row> = rows.iter().collect();
    rows.sort_by_key(|row| row.services);
    let x_max = rows.iter().map(|r| r.services).max().unwrap_or(1) as f64 * 1.5;
    let x_min = rows.iter().map(|r| r.services).min().unwrap_or(1) as f64 / 1.5;
    let values = rows.iter().flat_map(|r| {
        [
            r.nft_full_ms,
            r.ipt_full_ms,
            r.nft_change_ms,
            r.ipt_change_ms,
        ]
    });
    let y_max = values.clone().fold(1.0_f64, f64::max) * 2.0;
    let y_min = values.fold(f64::INFINITY, f64::min).max(0.1) / 2.0;

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Full sync and one endpoint change vs Service count (log scales)",
            ("sans-serif", 20),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((x_min..x_max).log_scale(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("Services (endpoints per Service in the CSV)")
        .y_desc("milliseconds")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            if *y >= 1.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.1}")
            }
        })
        .draw()?;
    let series: [Series; 4] = [
        ("kube-lb nftables: full sync", BLUE, true, |r| r.nft_full_ms),
        ("iptables-restore: full load", RED, true, |r| r.ipt_full_ms),
        ("kube-lb nftables: one endpoint change", BLUE, false, |r| {
            r.nft_change_ms
        }),
        ("iptables-restore: one change (partial)", RED, false, |r| {
            r.ipt_change_ms
        }),
    ];
    for (label, color, solid, value) in series {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .map(|row| (row.services as f64, value(row)))
            .collect();
        let style = if solid {
            color.stroke_width(2)
        } else {
            color.mix(0.6).stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(points.clone(), style))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        if solid {
            chart.draw_series(points.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
        } else {
            chart.draw_series(
                points
                    .iter()
                    .map(|p| TriangleMarker::new(*p, 5, color.mix(0.6).filled())),
            )?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Creates the namespace, re-runs this binary inside it, deletes the namespace.
fn run_in_netns() -> ExitCode {
    let ns = format!("klbscale{}", std::process::id());
    sh(&["ip", "netns", "add", &ns]);
    sh(&["ip", "-n", &ns, "link", "set", "lo", "up"]);
    let status = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(std::env::current_exe().unwrap())
        .args(std::env::args_os().skip(1))
        .env(INSIDE, &ns)
        .status();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    match status {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

fn main() -> ExitCode {
    // `cargo test --benches` runs every bench once in test mode: nothing to do then.
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return ExitCode::SUCCESS;
    }
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().nth(1))
            == Some("0")
    });
    if !root {
        eprintln!("SKIPPED: the dataplane scale benchmark needs root (network namespaces, nft)");
        return ExitCode::SUCCESS;
    }
    if std::env::var_os(INSIDE).is_none() {
        return run_in_netns();
    }
    let sizes = Size::parse_list(
        &std::env::var("KUBE_LB_BENCH_SIZES")
            .unwrap_or_else(|_| "1000x10,5000x50,10000x10,40000x2".into()),
    );
    let out = std::env::var_os("KUBE_LB_BENCH_OUT").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench/results"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&out).unwrap();
    let parts =
        std::env::var("KUBE_LB_BENCH_PARTS").unwrap_or_else(|_| "nft,iptables,proxy".into());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "== dataplane at scale: kube-lb nftables vs iptables-restore (kube-proxy layout), and a `kube-lb proxy` process fed by the embedded API server; {} CPUs, load {}",
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut rows = Vec::new();
    for size in sizes {
        let mut row = Row {
            services: size.services,
            endpoints: size.endpoints,
            ..Row::default()
        };
        eprintln!(
            "-- {} Services × {} endpoints ({} endpoints)",
            size.services,
            size.endpoints,
            size.total()
        );
        runtime.block_on(kernel(size, &mut row, parts.contains("iptables")));
        if parts.contains("proxy") {
            runtime.block_on(proxy(size, &mut row));
        }
        rows.push(row);
        print_rows(&rows[rows.len() - 1..]);
    }
    print_rows(&rows);
    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for row in &rows {
        csv.push_str(&row.csv());
        csv.push('\n');
    }
    let csv_path = out.join("dataplane_scale.csv");
    std::fs::write(&csv_path, csv).unwrap();
    let svg_path = out.join("dataplane_scale.svg");
    chart(&rows, &svg_path).expect("chart");
    println!("\nwrote {} and {}", csv_path.display(), svg_path.display());
    ExitCode::SUCCESS
}

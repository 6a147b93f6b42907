//! `kube-lb up` picks its dataplane: the nftables backend as root with a working `nft`, the
//! userspace backend when `nft` is not on the PATH or `--dataplane userspace` asks for it. It says
//! which on stdout, traffic to the load-balancer address reaches the demo's real TCP backends
//! either way, and the nftables table is gone once `up` stops. A Service's status shows its
//! address only once the dataplane forwards it: a client that connects the moment it appears is
//! never refused.
//!
//! Each run also times requests (one new connection each) through the load-balancer address and
//! straight to a backend and prints both; `KUBE_LB_UP_REQUESTS=N` sets how many (default 200),
//! `KUBE_LB_UP_BIN` runs another build of the binary (the README's figures use the release one).
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CEILING: Duration = Duration::from_secs(30);

/// True when this test can program nftables here. Under `CI=true` a missing prerequisite fails
/// the test instead of skipping it.
fn nft_usable() -> bool {
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|uids| uids.split_whitespace().nth(1))
            == Some("0")
    });
    let nft = root
        && Command::new("nft")
            .args(["list", "tables"])
            .output()
            .is_ok_and(|output| output.status.success());
    if nft {
        return true;
    }
    let why = if root {
        "nft is missing or cannot list tables"
    } else {
        "not root"
    };
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and this test cannot run: {why}"
    );
    eprintln!("SKIPPED: kube-lb up with nftables needs root and nft ({why})");
    false
}

/// A running `kube-lb up --demo` with its stdout lines.
struct Up {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// Lines read so far.
    seen: Vec<String>,
    /// Its nftables table, removed by [`Drop`] if a failed test left it.
    table: String,
}

impl Up {
    /// Starts `up --demo` on an address pool of its own (tests run in parallel, each with its own
    /// `up`); `path` replaces the PATH it sees.
    fn start(pool: &str, table: &str, extra: &[&str], path: Option<&str>) -> Up {
        let binary = std::env::var("KUBE_LB_UP_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kube-lb").to_string());
        let kubeconfig = std::env::temp_dir().join(format!(
            "kube-lb-up-dataplane-{table}-{}.kubeconfig",
            std::process::id()
        ));
        let mut command = Command::new(binary);
        command
            .args(["--log", "warn", "up", "--demo", "--metrics-addr"])
            .args(["127.0.0.1:0", "--local-pool", pool, "--nft-table", table])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(path) = path {
            command.env("PATH", path);
        }
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Up {
            child,
            lines,
            seen: Vec::new(),
            table: table.to_string(),
        }
    }

    /// The first line (already seen or still to come) that starts with `prefix`.
    fn line(&mut self, prefix: &str) -> String {
        if let Some(line) = self.seen.iter().find(|line| line.starts_with(prefix)) {
            return line.clone();
        }
        let deadline = Instant::now() + CEILING;
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| panic!("no line {prefix:?} in time; saw {:?}", self.seen));
            self.seen.push(line.clone());
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// The load-balancer address of demo/echo and one of the demo's backends.
    fn addresses(&mut self) -> (SocketAddr, SocketAddr) {
        let demo = self.line("demo:");
        // "demo:        echo backends on 127.0.0.11, 127.0.0.12, 127.0.0.13 port 41234; ..."
        let ip = demo.split("backends on ").nth(1).unwrap().split(',').next();
        let port = demo.split(" port ").nth(1).unwrap().split(';').next();
        let backend = format!("{}:{}", ip.unwrap(), port.unwrap());
        let echo = self.line("demo/echo ");
        let lb = echo.split("curl http://").nth(1).unwrap();
        (
            lb.trim_end_matches('/').parse().unwrap(),
            backend.parse().unwrap(),
        )
    }

    /// Sends SIGINT and waits for a clean exit.
    fn stop(mut self) {
        let status = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + CEILING;
        loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                assert!(exit.success(), "{exit:?}");
                return;
            }
            assert!(Instant::now() < deadline, "kube-lb up did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Up {
    /// A test that failed still leaves the machine clean: `up` killed outright keeps its NAT
    /// table, and any NAT table makes the kernel track every connection of the machine, which a
    /// later load test (the userspace bench) fills until new connections are dropped.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for family in ["ip", "ip6"] {
            let _ = Command::new("nft")
                .args(["delete", "table", family, &self.table])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// One HTTP request on a new connection; the echo backend's name from the reply.
fn request(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: demo\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply
        .split("echo backend ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .map(str::to_owned)
}

/// Waits until `addr` answers through the dataplane.
fn served(addr: SocketAddr) -> String {
    let deadline = Instant::now() + CEILING;
    loop {
        if let Some(backend) = request(addr) {
            return backend;
        }
        assert!(Instant::now() < deadline, "{addr} never answered");
        // The address is printed when allocated; the dataplane programs it within a sync period.
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `up`'s API server over plain HTTP, for the tests that write Services while it runs.
struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    fn of(up: &mut Up) -> Api {
        let line = up.line("API server:");
        Api {
            http: reqwest::Client::new(),
            base: line.trim_start_matches("API server:").trim().to_string(),
        }
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        let response = self.http.get(format!("{}{path}", self.base)).send().await;
        response.unwrap().json().await.unwrap()
    }

    /// A LoadBalancer Service `demo/<name>` on `port` with a slice to `backend`.
    async fn service_to(&self, name: &str, port: u16, backend: SocketAddr) {
        self.service_only(name, port, backend).await;
        self.slice_only(name, backend).await;
    }

    /// The Service of [`Api::service_to`] without its EndpointSlice.
    async fn service_only(&self, name: &str, port: u16, backend: SocketAddr) {
        let service = serde_json::json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "port": port, "targetPort": backend.port()}]},
        });
        self.post("/api/v1/namespaces/demo/services", service).await;
    }

    /// The EndpointSlice of [`Api::service_to`]: one ready endpoint, `backend`.
    async fn slice_only(&self, name: &str, backend: SocketAddr) {
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": backend.port(), "protocol": "TCP"}],
            "endpoints": [{"addresses": [backend.ip().to_string()], "conditions": {"ready": true}}],
        });
        self.post(
            "/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices",
            slice,
        )
        .await;
    }

    async fn post(&self, path: &str, body: serde_json::Value) {
        let url = format!("{}{path}", self.base);
        let response = self.http.post(url).json(&body).send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
    }

    /// The address `demo/<name>`'s status shows, if any.
    async fn address(&self, name: &str) -> Option<std::net::IpAddr> {
        let service = self
            .get(&format!("/api/v1/namespaces/demo/services/{name}"))
            .await;
        service
            .pointer("/status/loadBalancer/ingress/0/ip")
            .and_then(|ip| ip.as_str()?.parse().ok())
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Creates LoadBalancer Services one after another, polls each one's status as fast as a client
/// can and connects the moment it shows an address: the status must never show an address the
/// dataplane does not forward yet.
fn status_shows_only_forwarded_addresses(up: &mut Up, backend: SocketAddr, rounds: u16) {
    let api = Api::of(up);
    block_on(async {
        for round in 0..rounds {
            let (name, port) = (format!("race-{round}"), 9100 + round);
            api.service_to(&name, port, backend).await;
            let deadline = Instant::now() + CEILING;
            let ip = loop {
                if let Some(ip) = api.address(&name).await {
                    break ip;
                }
                assert!(Instant::now() < deadline, "{name} got no address");
            };
            let address = SocketAddr::new(ip, port);
            if let Err(error) = tokio::net::TcpStream::connect(address).await {
                panic!("round {round}: {address} shown in the status but not forwarded: {error}");
            }
        }
    });
}

/// In userspace mode a Service port that another program holds on every address cannot be
/// listened on: the Service gets no address (it would reach that program, not the Service) until
/// the port is free, then it does, and is forwarded.
fn a_taken_port_gets_no_address_until_it_is_free(up: &mut Up, backend: SocketAddr) {
    let blocker = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = blocker.local_addr().unwrap().port();
    let api = Api::of(up);
    block_on(async {
        api.service_to("taken", port, backend).await;
        // The event says why; the status stays empty while the port is held.
        let deadline = Instant::now() + CEILING;
        loop {
            let events = api
                .get("/api/v1/namespaces/demo/events?fieldSelector=involvedObject.name=taken")
                .await;
            if events.to_string().contains("does not forward") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no event about the taken port: {events}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            api.address("taken").await,
            None,
            "an address shown while its port is taken"
        );
        drop(blocker);
        let deadline = Instant::now() + CEILING;
        let ip = loop {
            if let Some(ip) = api.address("taken").await {
                break ip;
            }
            assert!(
                Instant::now() < deadline,
                "no address once the port was free"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        tokio::net::TcpStream::connect(SocketAddr::new(ip, port))
            .await
            .unwrap();
    });
}

/// Median and p99 in µs of `count` requests, each on a new connection.
fn latency(addr: SocketAddr, count: usize) -> (f64, f64) {
    let mut samples: Vec<Duration> = (0..count)
        .map(|_| {
            let started = Instant::now();
            assert!(request(addr).is_some(), "request to {addr} failed");
            started.elapsed()
        })
        .collect();
    samples.sort();
    let at = |q: f64| {
        let index = ((samples.len() as f64 * q) as usize).min(samples.len() - 1);
        samples[index].as_secs_f64() * 1e6
    };
    (at(0.5), at(0.99))
}

/// Prints the load-balancer address's latency beside a direct connection to a backend.
fn measure(mode: &str, lb: SocketAddr, backend: SocketAddr) {
    let count = std::env::var("KUBE_LB_UP_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    // Interleaved halves, so a load change on the machine hits both alike.
    let (lb1, direct1) = (latency(lb, count / 2), latency(backend, count / 2));
    let (direct2, lb2) = (latency(backend, count / 2), latency(lb, count / 2));
    let mean = |a: (f64, f64), b: (f64, f64)| ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0);
    let (via, direct) = (mean(lb1, lb2), mean(direct1, direct2));
    println!(
        "up {mode}: {count} requests, one new connection each: LB address p50 {:.0} µs p99 {:.0} µs; \
         direct p50 {:.0} µs p99 {:.0} µs; p50 ratio {:.2}x",
        via.0,
        via.1,
        direct.0,
        direct.1,
        via.0 / direct.0
    );
}

fn nft_table_exists(table: &str) -> bool {
    Command::new("nft")
        .args(["list", "table", "ip", table])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Pool of one test: a /24 of 127.0.0.0/8 no other test uses.
fn pool(second: u8) -> String {
    format!("127.{second}.{}.0/24", std::process::id() % 250)
}

#[test]
fn as_root_with_nft_up_forwards_through_nftables_and_removes_its_table() {
    if !nft_usable() {
        return;
    }
    let table = format!("klb-up-test-{}", std::process::id());
    let mut up = Up::start(&pool(241), &table, &[], None);
    let dataplane = up.line("dataplane:");
    assert!(
        dataplane.starts_with("dataplane:   nftables"),
        "{dataplane}"
    );
    let (lb, backend) = up.addresses();
    assert!(!served(lb).is_empty());
    status_shows_only_forwarded_addresses(&mut up, backend, 20);
    let rules = Command::new("nft")
        .args(["list", "table", "ip", &table])
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(
        rules.contains(&lb.ip().to_string()),
        "the LB address is in the table: {rules}"
    );
    assert!(
        std::net::TcpListener::bind(lb).is_ok(),
        "no process listens on {lb}: the kernel forwards it"
    );
    measure("nftables", lb, backend);
    up.stop();
    assert!(!nft_table_exists(&table), "table {table} removed on exit");
    assert!(request(lb).is_none(), "nothing answers {lb} after exit");
}

#[test]
fn without_nft_up_falls_back_to_userspace() {
    let table = format!("klb-up-test-nonft-{}", std::process::id());
    // A PATH with no nft on it: `up` needs no other program.
    let mut up = Up::start(&pool(242), &table, &[], Some("/nonexistent"));
    let dataplane = up.line("dataplane:");
    assert_eq!(
        dataplane,
        "dataplane:   userspace (nft not found on the PATH)"
    );
    let (lb, backend) = up.addresses();
    assert!(!served(lb).is_empty());
    status_shows_only_forwarded_addresses(&mut up, backend, 20);
    measure("userspace", lb, backend);
    up.stop();
}

#[test]
fn dataplane_flag_userspace_wins_over_a_usable_nft() {
    let table = format!("klb-up-test-flag-{}", std::process::id());
    let mut up = Up::start(&pool(243), &table, &["--dataplane", "userspace"], None);
    let dataplane = up.line("dataplane:");
    assert_eq!(dataplane, "dataplane:   userspace (--dataplane userspace)");
    let (lb, backend) = up.addresses();
    assert!(!served(lb).is_empty());
    a_taken_port_gets_no_address_until_it_is_free(&mut up, backend);
    up.stop();
    assert!(!nft_table_exists(&table), "userspace mode made no table");
}

/// Busy threads on every core until dropped: the contention under which the status once
/// showed an address before its endpoints were programmed.
struct CpuHogs {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHogs {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x: u64 = 1;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for CpuHogs {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The stress form: the same rounds with a busy thread on every core. Each Service is created
/// just before its EndpointSlice, so under load the dataplane may program the address before it
/// has seen the slice; the status must still show the address only once connections reach the
/// endpoint.
#[test]
fn as_root_with_nft_the_status_promise_holds_with_cpu_hogs_on_every_core() {
    if !nft_usable() {
        return;
    }
    let table = format!("klb-up-test-hogs-{}", std::process::id());
    let mut up = Up::start(&pool(244), &table, &[], None);
    let (_, backend) = up.addresses();
    let hogs = CpuHogs::start();
    status_shows_only_forwarded_addresses(&mut up, backend, 20);
    drop(hogs);
    up.stop();
    assert!(!nft_table_exists(&table), "table {table} removed on exit");
}

/// A Service whose EndpointSlice comes a second after it (its pods starting): the status shows
/// the address only once the endpoint is programmed, so a client that connects the moment it
/// sees the address is forwarded, never refused. Before, the address was reported as soon as
/// the frontend was programmed, without endpoints, and the first connection was refused.
#[test]
fn as_root_with_nft_the_status_waits_for_a_late_endpoint_slice() {
    if !nft_usable() {
        return;
    }
    let table = format!("klb-up-test-late-{}", std::process::id());
    let mut up = Up::start(&pool(245), &table, &[], None);
    let (_, backend) = up.addresses();
    let api = Api::of(&mut up);
    block_on(async {
        api.service_only("late", 9300, backend).await;
        // The slice's delay is the scenario, well inside the provider's grace for endpoints.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(
            api.address("late").await.is_none(),
            "an address shown before its Service had any endpoint"
        );
        api.slice_only("late", backend).await;
        let deadline = Instant::now() + CEILING;
        let ip = loop {
            if let Some(ip) = api.address("late").await {
                break ip;
            }
            assert!(Instant::now() < deadline, "late got no address");
        };
        let address = SocketAddr::new(ip, 9300);
        tokio::net::TcpStream::connect(address)
            .await
            .unwrap_or_else(|e| panic!("{address} shown in the status but not forwarded: {e}"));
    });
    up.stop();
    assert!(!nft_table_exists(&table), "table {table} removed on exit");
}

//! A small lab of network namespaces: a switch, clients, nodes, and backend "pods" running
//! `kube-lb-probe serve`. Everything is created per test under a unique prefix and removed on drop;
//! the root namespace is never touched.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use kube_lb_dataplane::l2::lab::{self, Namespaces};

/// The probe binary built with this crate.
pub const PROBE: &str = env!("CARGO_BIN_EXE_kube-lb-probe");

/// Runs a command ([`lab::run`]), panicking with its output on failure.
pub fn run(args: &[&str]) -> String {
    lab::run(args).unwrap_or_else(|e| panic!("{e}"))
}

/// True when this process may create network namespaces and run nft (root + `ip netns`).
pub fn have_netns() -> bool {
    lab::available()
}

/// Skips the calling test loudly when root + netns are missing; fails it under `CI=true` (CI
/// must provide them, and nextest hides a skip that passes).
#[macro_export]
macro_rules! require_netns {
    () => {
        if !$crate::support::have_netns() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but this test cannot run: it needs root, ip netns and nft"
            );
            eprintln!("SKIPPED: needs root + netns (ip netns, nft)");
            return;
        }
    };
}

/// Extra backend server (`kube-lb-probe serve NAME PORT`) in a pod namespace, stopped when
/// dropped.
pub struct Server(std::process::Child);

impl Server {
    /// Starts it and waits for its `ready` line (printed once both its sockets are bound).
    pub fn start(ns: &str, name: &str, port: u16) -> Server {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns, PROBE, "serve", name])
            .arg(port.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start server");
        let mut ready = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut ready)
            .expect("ready line");
        assert_eq!(ready.trim(), "ready", "server {name} in {ns} did not start");
        Server(child)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One backend pod.
#[derive(Debug, Clone)]
pub struct Pod {
    /// Identity it answers with.
    pub name: String,
    /// Its address.
    pub ip: String,
    /// Its IPv6 address, in a dual-stack lab.
    pub ip6: Option<String>,
    /// Node it runs on.
    pub node: String,
}

/// The namespaces of one test.
pub struct Lab {
    /// The clients' held connections ([`Lab::hold`]).
    children: Vec<Child>,
    /// The pods' servers.
    servers: Vec<Server>,
    /// Pods by name.
    pub pods: BTreeMap<String, Pod>,
    /// Whether nodes, clients and pods have IPv6 addresses too ([`Lab::dual_stack`]).
    ipv6: bool,
    // Last: dropped after `Drop::drop` and `servers` have stopped the processes running in
    // them.
    namespaces: Namespaces,
}

/// Node `i` (1-based) has LAN address 10.0.0.1i and pod subnet 10.244.i.0/24.
pub fn node_ip(i: usize) -> String {
    format!("10.0.0.{}", 10 + i)
}

/// In a dual-stack lab node `i` also has LAN address fd00:10::1i and pod subnet fd00:244:i::/64.
pub fn node_ip6(i: usize) -> String {
    format!("fd00:10::{}", 10 + i)
}

/// IPv6 Service ranges a dual-stack lab's clients route via node 1: cluster IPs, load-balancer
/// IPs, external IPs.
pub const SERVICE_RANGES_V6: [&str; 3] = ["fd00:96::/64", "2001:db8:10::/64", "2001:db8:20::/64"];

/// The outcome of a lab set-up step in namespace `ns`; a failed step fails the test.
fn must(ns: &str, step: std::io::Result<()>) {
    step.unwrap_or_else(|e| panic!("setting up {ns}: {e}"));
}

impl Lab {
    /// Creates the switch, `nodes` nodes and two clients (10.0.0.100 and 10.0.0.101) whose routes
    /// to Service ranges (10.96/16, 192.0.2/24, 203.0.113/24) go via node 1.
    pub fn new(nodes: usize) -> Lab {
        let mut lab = Lab {
            children: Vec::new(),
            servers: Vec::new(),
            pods: BTreeMap::new(),
            ipv6: false,
            namespaces: Namespaces::new("klb"),
        };
        let switch = lab.add_ns("sw");
        must(&switch, lab.namespaces.bridge(&switch, "br0", &[]));
        for i in 1..=nodes {
            let ns = lab.add_ns(&format!("n{i}"));
            lab.attach(
                &switch,
                &ns,
                &format!("n{i}"),
                &format!("{}/24", node_ip(i)),
            );
            // Forwarding node; no ICMP redirects (they would use up the per-host ICMP budget
            // the rejects of Services without endpoints need).
            let forwarding = [
                "net.ipv4.ip_forward=1",
                "net.ipv4.conf.all.send_redirects=0",
                "net.ipv4.icmp_ratelimit=0",
            ];
            must(&ns, lab.namespaces.sysctl(&ns, &forwarding));
            // Like a real node: Service addresses without rules follow the default route.
            run(&["ip", "-n", &ns, "route", "add", "default", "dev", "eth0"]);
            let pod_gateway = format!("10.244.{i}.1/24");
            must(&ns, lab.namespaces.bridge(&ns, "cbr0", &[&pod_gateway]));
            for j in (1..=nodes).filter(|&j| j != i) {
                let pods_of_j = format!("10.244.{j}.0/24");
                must(&ns, lab.namespaces.route(&ns, &pods_of_j, &node_ip(j)));
            }
        }
        for (name, address) in [("c", "10.0.0.100"), ("c2", "10.0.0.101")] {
            let ns = lab.add_ns(name);
            lab.attach(&switch, &ns, name, &format!("{address}/24"));
            for range in ["10.96.0.0/16", "192.0.2.0/24", "203.0.113.0/24"] {
                must(&ns, lab.namespaces.route(&ns, range, &node_ip(1)));
            }
        }
        lab
    }

    /// As [`Lab::new`], and every node, client and pod also has an IPv6 address: node `i`
    /// fd00:10::1i on the LAN and fd00:244:i::1 on its pod bridge, clients fd00:10::100 and
    /// fd00:10::101 routing [`SERVICE_RANGES_V6`] via node 1, pods fd00:244:i::(10+index).
    pub fn dual_stack(nodes: usize) -> Lab {
        let mut lab = Lab::new(nodes);
        lab.ipv6 = true;
        let plumbing = &lab.namespaces;
        for i in 1..=nodes {
            let ns = lab.ns(&format!("n{i}"));
            must(
                &ns,
                plumbing.sysctl(&ns, &["net.ipv6.conf.all.forwarding=1"]),
            );
            let lan = format!("{}/64", node_ip6(i));
            must(&ns, plumbing.address(&ns, "eth0", &[&lan]));
            let pod_gateway = format!("fd00:244:{i}::1/64");
            must(&ns, plumbing.address(&ns, "cbr0", &[&pod_gateway]));
            // Like a real node: Service addresses without rules follow the default route.
            run(&[
                "ip", "-n", &ns, "-6", "route", "add", "default", "dev", "eth0",
            ]);
            for j in (1..=nodes).filter(|&j| j != i) {
                let pods_of_j = format!("fd00:244:{j}::/64");
                must(&ns, plumbing.route(&ns, &pods_of_j, &node_ip6(j)));
            }
        }
        for (name, address) in [("c", "fd00:10::100"), ("c2", "fd00:10::101")] {
            let ns = lab.ns(name);
            must(
                &ns,
                plumbing.address(&ns, "eth0", &[&format!("{address}/64")]),
            );
            for range in SERVICE_RANGES_V6 {
                must(&ns, plumbing.route(&ns, range, &node_ip6(1)));
            }
        }
        lab
    }

    /// Full name of a namespace of this lab.
    pub fn ns(&self, short: &str) -> String {
        self.namespaces.name(short)
    }

    /// Makes namespace `short` (interfaces made in it have usable IPv6 addresses at once:
    /// dual-stack labs need their link-local ones for neighbour discovery).
    fn add_ns(&mut self, short: &str) -> String {
        self.namespaces
            .add(short)
            .unwrap_or_else(|e| panic!("namespace {short}: {e}"))
    }

    /// A veth from the switch bridge into `ns` as `eth0` with `cidr`.
    fn attach(&self, switch: &str, ns: &str, port: &str, cidr: &str) {
        self.namespaces
            .veth(switch, port, "br0", ns)
            .and_then(|()| self.namespaces.address_eth0(ns, &[cidr]))
            .unwrap_or_else(|e| panic!("attach {ns} as {port}: {e}"));
    }

    /// Starts pod `name` on node `node` (1-based) as 10.244.node.(10+index) (and, in a dual-stack
    /// lab, fd00:244:node::(10+index)), serving TCP+UDP 8080.
    pub fn pod(&mut self, name: &str, node: usize) -> Pod {
        let index = self
            .pods
            .values()
            .filter(|p| p.node == format!("n{node}"))
            .count();
        let ip = format!("10.244.{node}.{}", 10 + index);
        let node_ns = self.ns(&format!("n{node}"));
        let ns = self.add_ns(&format!("p{name}"));
        let veth = format!("v{name}");
        self.namespaces
            .veth(&node_ns, &veth, "cbr0", &ns)
            .unwrap_or_else(|e| panic!("pod {name}: {e}"));
        // As the CNI bridge plugin's hairpinMode does: a pod reaching itself through a Service
        // leaves and re-enters by the same bridge port.
        run(&[
            "ip",
            "-n",
            &node_ns,
            "link",
            "set",
            &veth,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ]);
        let plumbing = &self.namespaces;
        must(&ns, plumbing.address_eth0(&ns, &[&format!("{ip}/24")]));
        must(
            &ns,
            plumbing.route(&ns, "default", &format!("10.244.{node}.1")),
        );
        let ip6 = self
            .ipv6
            .then(|| format!("fd00:244:{node}::{}", 10 + index));
        if let Some(ip6) = &ip6 {
            must(&ns, plumbing.address(&ns, "eth0", &[&format!("{ip6}/64")]));
            must(
                &ns,
                plumbing.route(&ns, "default", &format!("fd00:244:{node}::1")),
            );
        }
        self.servers.push(Server::start(&ns, name, 8080));
        let pod = Pod {
            name: name.into(),
            ip,
            ip6,
            node: format!("n{node}"),
        };
        self.pods.insert(name.into(), pod.clone());
        pod
    }

    /// Adds an address to node `node`'s LAN interface (and an on-link route on the clients).
    pub fn add_node_address(&self, node: usize, cidr: &str) {
        run(&[
            "ip",
            "-n",
            &self.ns(&format!("n{node}")),
            "addr",
            "add",
            cidr,
            "dev",
            "eth0",
        ]);
        let net: ipnet::IpNet = cidr.parse().expect("cidr");
        for client in ["c", "c2"] {
            run(&[
                "ip",
                "-n",
                &self.ns(client),
                "route",
                "add",
                &net.trunc().to_string(),
                "dev",
                "eth0",
            ]);
        }
    }

    /// Sends the client's traffic for `range` via node `node`.
    pub fn route_via(&self, client: &str, range: &str, node: usize) {
        run(&[
            "ip",
            "-n",
            &self.ns(client),
            "route",
            "replace",
            range,
            "via",
            &node_ip(node),
        ]);
    }

    /// `count` TCP requests from `client` to `addr`, each on a new connection.
    pub fn tcp(&self, client: &str, addr: &str, count: usize, timeout_ms: u64) -> Vec<Outcome> {
        let out = run(&[
            "ip",
            "netns",
            "exec",
            &self.ns(client),
            PROBE,
            "tcp",
            addr,
            &count.to_string(),
            &timeout_ms.to_string(),
        ]);
        out.lines().map(Outcome::parse).collect()
    }

    /// `count` UDP datagrams from one socket of `client` (optionally a fixed source port).
    pub fn udp(
        &self,
        client: &str,
        addr: &str,
        count: usize,
        timeout_ms: u64,
        source_port: Option<u16>,
    ) -> Vec<Outcome> {
        let ns = self.ns(client);
        let count = count.to_string();
        let timeout = timeout_ms.to_string();
        let port = source_port.map(|p| p.to_string());
        let mut args = vec![
            "ip", "netns", "exec", &ns, PROBE, "udp", addr, &count, &timeout,
        ];
        if let Some(port) = &port {
            args.push(port);
        }
        run(&args).lines().map(Outcome::parse).collect()
    }

    /// Opens one long-lived TCP connection from `client`.
    pub fn hold(&mut self, client: &str, addr: &str) -> Held {
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns(client),
                PROBE,
                "hold",
                addr,
                "2000",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start hold");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        self.children.push(child);
        Held { stdin, stdout }
    }

    /// Runs a command inside one of the lab's namespaces.
    pub fn exec(&self, short: &str, args: &[&str]) -> String {
        let ns = self.ns(short);
        let mut full = vec!["ip", "netns", "exec", ns.as_str()];
        full.extend_from_slice(args);
        run(&full)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // The pods' servers stop, then the namespaces go, when the fields are dropped after
        // this.
    }
}

/// A long-lived client connection.
pub struct Held {
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Held {
    /// One request on the held connection.
    pub fn request(&mut self) -> Outcome {
        writeln!(self.stdin, "go").expect("write");
        self.stdin.flush().expect("flush");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read");
        Outcome::parse(&line)
    }
}

/// Result of one probe request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The endpoint `name` answered and saw the client as `source` (ip:port).
    Ok {
        /// Pod name.
        name: String,
        /// Source address the pod saw.
        source: String,
    },
    /// Failed: `refused`, `timeout`, `reset`, …
    Err(String),
}

impl Outcome {
    fn parse(line: &str) -> Outcome {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("ok"), Some(name), Some(source)) => Outcome::Ok {
                name: name.into(),
                source: source.into(),
            },
            (_, Some(kind), _) => Outcome::Err(kind.into()),
            _ => Outcome::Err(format!("unparsable {line:?}")),
        }
    }

    /// Pod name if it succeeded.
    pub fn name(&self) -> Option<&str> {
        match self {
            Outcome::Ok { name, .. } => Some(name),
            Outcome::Err(_) => None,
        }
    }

    /// Source IP the pod saw, if it succeeded (an IPv6 one without its brackets).
    pub fn source_ip(&self) -> Option<&str> {
        match self {
            Outcome::Ok { source, .. } => source
                .rsplit_once(':')
                .map(|(ip, _)| ip.trim_start_matches('[').trim_end_matches(']')),
            Outcome::Err(_) => None,
        }
    }
}

/// The set of pod names `items`.
pub fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Lab {
    /// Whether `samples` TCP connections from `client` to `addr` are all answered, and by
    /// exactly the pods `expected` names.
    pub fn reaches(
        &self,
        client: &str,
        addr: &str,
        expected: &BTreeSet<String>,
        samples: usize,
    ) -> bool {
        let outcomes = self.tcp(client, addr, samples, 2000);
        outcomes.iter().all(|o| o.name().is_some()) && &names(&outcomes) == expected
    }

    /// Waits up to `ceiling` for [`Lab::reaches`]; fails showing what a last try got.
    pub fn assert_reaches(
        &self,
        client: &str,
        addr: &str,
        expected: &BTreeSet<String>,
        samples: usize,
        ceiling: Duration,
    ) {
        assert!(
            eventually(ceiling, || self.reaches(client, addr, expected, samples)),
            "{client} → {addr}: expected answers from {expected:?}, a last try got {:?}",
            self.tcp(client, addr, 4, 2000)
        );
    }

    /// Waits up to `ceiling` until three UDP datagrams from `client` to `addr` are all answered.
    pub fn assert_udp_reaches(&self, client: &str, addr: &str, ceiling: Duration) {
        let answered = || {
            self.udp(client, addr, 3, 2000, None)
                .iter()
                .all(|o| o.name().is_some())
        };
        assert!(
            eventually(ceiling, answered),
            "{client} → {addr} (udp): a last try got {:?}",
            self.udp(client, addr, 3, 2000, None)
        );
    }

    /// Fails unless a TCP connection from `client` to `addr` is refused.
    pub fn assert_refused(&self, client: &str, addr: &str) {
        assert_eq!(
            self.tcp(client, addr, 1, 2000),
            vec![Outcome::Err("refused".into())],
            "{client} → {addr}"
        );
    }
}

/// Names of the pods that answered.
pub fn names(outcomes: &[Outcome]) -> std::collections::BTreeSet<String> {
    outcomes
        .iter()
        .filter_map(|o| o.name().map(str::to_owned))
        .collect()
}

/// Polls `check` until it returns true or `ceiling` passes.
pub fn eventually(ceiling: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if check() {
            return true;
        }
        if start.elapsed() > ceiling {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The proxy of node `n1` (the lab's first node) over `dataplane`, syncing at most every
/// `min_sync_period` and at least every `sync_period`, and the health it reports to.
#[cfg(feature = "watch")]
pub fn node_proxy(
    dataplane: kube_lb_dataplane::watch::Dataplane,
    min_sync_period: Duration,
    sync_period: Duration,
) -> (
    kube_lb_dataplane::watch::Proxy,
    std::sync::Arc<kube_lb_dataplane::health::ProxyHealth>,
) {
    use kube_lb_dataplane::health::{ProxyHealth, ServiceHealthServers};
    let health = ProxyHealth::new(Duration::from_secs(60));
    let proxy = kube_lb_dataplane::watch::Proxy {
        index: kube_lb_dataplane::model::IndexConfig {
            node_name: "n1".into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: false,
        },
        dataplane,
        health: health.clone(),
        service_health: ServiceHealthServers::new(health.clone(), Vec::new()),
        timing: kube_lb_dataplane::watch::Timing {
            min_sync_period,
            sync_period,
        },
        handoff: None,
    };
    (proxy, health)
}

/// The nftables backend programming the network namespace `ns`.
#[cfg(feature = "watch")]
pub fn nft_dataplane(ns: &str) -> kube_lb_dataplane::watch::Dataplane {
    use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig};
    kube_lb_dataplane::watch::Dataplane::Nft(Box::new(NftBackend::new(
        NftConfig::default(),
        Commands::in_netns(ns),
    )))
}

//! A routed rig in network namespaces for the BGP tests and `bench/bgp_failover.rs`: a switch
//! (a bridge holding the API server's address 10.0.0.1 / fd00::1), `n` nodes on it (10.0.0.1i,
//! fd00::1i, each with a pod bridge 10.244.i.0/24 + fd01:i::/64, FRR's zebra, bgpd and bfdd
//! under their own pathspace, and `frr-reloader.sh`), a router on the switch (10.0.0.254,
//! fd00::fe) running BIRD 2 with ECMP, and a client behind the router (10.2.0.1, fd02::1).
//! The IPv4 sessions are eBGP (router AS 64500), the IPv6 ones iBGP (AS 64512 on both
//! sides). Load-balancer addresses come from 10.3.0.0/24 and fd03::/64, which no interface holds: the
//! client reaches them only through routes the router learned over BGP.
//!
//! BIRD as the router and FRR on the nodes: two independent BGP and BFD implementations.
//! Needs root, `ip`, `nft`, FRR (`/usr/lib/frr`) and BIRD 2 (`bird`, `birdc`); everything is
//! stopped and removed on drop.

use std::fmt::Write as _;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::l2::lab::{Namespaces, in_netns, run};

/// The router's AS number on its IPv4 sessions (eBGP with the nodes).
pub const ROUTER_ASN: u32 = 64500;
/// The router's AS number on its IPv6 sessions: the nodes' own (iBGP), so that attributes only
/// iBGP carries (LOCAL_PREF) are exercised too.
pub const ROUTER_V6_ASN: u32 = NODE_ASN;
/// The nodes' AS number.
pub const NODE_ASN: u32 = 64512;
/// The router's IPv4 address on the switch.
pub const ROUTER_V4: &str = "10.0.0.254";
/// The router's IPv6 address on the switch.
pub const ROUTER_V6: &str = "fd00::fe";
/// The client's IPv4 address.
pub const CLIENT_V4: &str = "10.2.0.1";
/// The client's IPv6 address.
pub const CLIENT_V6: &str = "fd02::1";
/// The load-balancer pool.
pub const POOL: [&str; 2] = ["10.3.0.0/24", "fd03::/64"];

/// A node's IPv4 address (1-based).
pub fn node_v4(i: usize) -> String {
    format!("10.0.0.{}", 10 + i)
}

/// A node's IPv6 address (1-based).
pub fn node_v6(i: usize) -> String {
    format!("fd00::{}", 10 + i)
}

/// The FRR install the rig needs, or why it cannot run.
pub fn available() -> Result<(), String> {
    if !crate::l2::lab::available() {
        return Err("needs root, `ip netns` and `nft`".into());
    }
    for program in [
        "/usr/lib/frr/bgpd",
        "/usr/lib/frr/bfdd",
        "/usr/lib/frr/zebra",
    ] {
        if !std::path::Path::new(program).exists() {
            return Err(format!("{program} missing: apt-get install frr"));
        }
    }
    for program in ["bird", "birdc", "vtysh"] {
        if Command::new(program).arg("--version").output().is_err() {
            return Err(format!("{program} missing: apt-get install bird2 frr"));
        }
    }
    Ok(())
}

/// How the router peers with each node.
#[derive(Debug, Clone, Default)]
pub struct RouterConfig {
    /// The TCP-MD5 password the router expects from each node (`None`: none).
    pub password: Option<String>,
    /// BFD on every session (300 ms × 3).
    pub bfd: bool,
    /// BGP hold time, seconds (BIRD's minimum is 3).
    pub hold_time: u32,
}

/// FRR on one node: its daemons, its pathspace and the reloader.
#[derive(Debug)]
pub struct FrrNode {
    /// FRR's `-N` pathspace (the node namespace's name).
    pub pathspace: String,
    /// `/etc/frr/<pathspace>`: where the proxy writes its configuration.
    pub conf_dir: PathBuf,
    /// `/var/run/frr/<pathspace>`: the VTY sockets.
    pub vty_dir: PathBuf,
    reloader: Option<Child>,
    ns: String,
}

impl FrrNode {
    fn start(ns: &str, reloader_script: &std::path::Path) -> io::Result<FrrNode> {
        let conf_dir = PathBuf::from(format!("/etc/frr/{ns}"));
        let vty_dir = PathBuf::from(format!("/var/run/frr/{ns}"));
        for dir in [&conf_dir, &vty_dir] {
            std::fs::create_dir_all(dir)?;
        }
        let initial = format!("frr defaults datacenter\nhostname {ns}\n!\n");
        std::fs::write(conf_dir.join("frr.conf"), initial)?;
        std::fs::write(conf_dir.join("vtysh.conf"), "")?;
        let path = |p: &PathBuf| p.display().to_string();
        run(&["chown", "-R", "frr:frr", &path(&conf_dir), &path(&vty_dir)])?;
        let mut node = FrrNode {
            pathspace: ns.to_owned(),
            conf_dir: conf_dir.clone(),
            vty_dir,
            reloader: None,
            ns: ns.to_owned(),
        };
        for daemon in ["zebra", "bgpd", "bfdd"] {
            let program = format!("/usr/lib/frr/{daemon}");
            run(&[
                "ip",
                "netns",
                "exec",
                ns,
                &program,
                "-N",
                ns,
                "-d",
                "-f",
                &path(&conf_dir.join("frr.conf")),
                "--log",
                &format!("file:{}", path(&conf_dir.join(format!("{daemon}.log")))),
            ])?;
        }
        let reloader = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(reloader_script)
            .env("FRR_CONF_DIR", &conf_dir)
            .env("FRR_PATHSPACE", ns)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        node.reloader = Some(reloader);
        Ok(node)
    }

    /// Runs a vtysh command on this node's daemons.
    pub fn vtysh(&self, command: &str) -> io::Result<String> {
        run(&[
            "ip",
            "netns",
            "exec",
            &self.ns,
            "vtysh",
            "-N",
            &self.pathspace,
            "-c",
            command,
        ])
    }

    fn stop(&mut self) {
        if let Some(mut reloader) = self.reloader.take() {
            let _ = reloader.kill();
            let _ = reloader.wait();
        }
        for daemon in ["bfdd", "bgpd", "zebra"] {
            let pid_file = self.vty_dir.join(format!("{daemon}.pid"));
            if let Ok(pid) = std::fs::read_to_string(&pid_file) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.conf_dir);
        let _ = std::fs::remove_dir_all(&self.vty_dir);
    }
}

impl Drop for FrrNode {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The rig.
#[derive(Debug)]
pub struct BgpLab {
    nodes: Vec<FrrNode>,
    router: Option<Child>,
    bird_dir: PathBuf,
    pods: crate::l2::lab::PodServers,
    namespaces: Namespaces,
}

impl BgpLab {
    /// Builds the switch, the router (BIRD started with `router`), the client and `nodes`
    /// nodes, each with FRR and the reloader at `reloader_script`.
    pub fn new(
        nodes: usize,
        router: &RouterConfig,
        reloader_script: &std::path::Path,
    ) -> io::Result<BgpLab> {
        let mut namespaces = Namespaces::new("klbbgp");
        let switch = namespaces.add("sw")?;
        namespaces.bridge(&switch, "br0", &["10.0.0.1/24", "fd00::1/64"])?;
        let router_ns = namespaces.add("r")?;
        namespaces.veth(&switch, "r", "br0", &router_ns)?;
        namespaces.address_eth0(
            &router_ns,
            &[&format!("{ROUTER_V4}/24"), &format!("{ROUTER_V6}/64")],
        )?;
        namespaces.sysctl(
            &router_ns,
            &[
                "net.ipv4.ip_forward=1",
                "net.ipv6.conf.all.forwarding=1",
                // ECMP by the 5-tuple read from the headers (policy 3 with source and
                // destination address, protocol and ports), so one client's connections spread
                // over every path and one flow stays on one. Policy 1 would take the hash a
                // packet carries, which over veth is the sending socket's random one.
                "net.ipv4.fib_multipath_hash_policy=3",
                "net.ipv4.fib_multipath_hash_fields=0x0037",
                "net.ipv6.fib_multipath_hash_policy=3",
                "net.ipv6.fib_multipath_hash_fields=0x0037",
            ],
        )?;
        let client = namespaces.add("c")?;
        run(&[
            "ip", "-n", &router_ns, "link", "add", "client", "type", "veth", "peer", "name",
            "eth0", "netns", &client,
        ])?;
        namespaces.address(&router_ns, "client", &["10.2.0.254/24", "fd02::fe/64"])?;
        run(&["ip", "-n", &router_ns, "link", "set", "client", "up"])?;
        namespaces.address_eth0(
            &client,
            &[&format!("{CLIENT_V4}/24"), &format!("{CLIENT_V6}/64")],
        )?;
        namespaces.route(&client, "default", "10.2.0.254")?;
        namespaces.route(&client, "default", "fd02::fe")?;
        let mut lab = BgpLab {
            nodes: Vec::new(),
            router: None,
            bird_dir: PathBuf::new(),
            pods: crate::l2::lab::PodServers::default(),
            namespaces,
        };
        for i in 1..=nodes {
            let ns = lab.namespaces.add(&format!("n{i}"))?;
            lab.namespaces.veth(&switch, &format!("n{i}"), "br0", &ns)?;
            lab.namespaces.address_eth0(
                &ns,
                &[&format!("{}/24", node_v4(i)), &format!("{}/64", node_v6(i))],
            )?;
            lab.namespaces.sysctl(
                &ns,
                &[
                    "net.ipv4.ip_forward=1",
                    "net.ipv6.conf.all.forwarding=1",
                    "net.ipv4.conf.all.send_redirects=0",
                ],
            )?;
            lab.namespaces.bridge(
                &ns,
                "cbr0",
                &[&format!("10.244.{i}.1/24"), &format!("fd01:{i}::1/64")],
            )?;
            for j in (1..=nodes).filter(|j| *j != i) {
                lab.namespaces
                    .route(&ns, &format!("10.244.{j}.0/24"), &node_v4(j))?;
                lab.namespaces
                    .route(&ns, &format!("fd01:{j}::/64"), &node_v6(j))?;
            }
            // Answers to clients behind the router go back through it.
            lab.namespaces.route(&ns, "10.2.0.0/24", ROUTER_V4)?;
            lab.namespaces.route(&ns, "fd02::/64", ROUTER_V6)?;
            lab.nodes.push(FrrNode::start(&ns, reloader_script)?);
        }
        lab.start_router(nodes, router)?;
        Ok(lab)
    }

    fn start_router(&mut self, nodes: usize, config: &RouterConfig) -> io::Result<()> {
        let ns = self.ns("r");
        self.bird_dir = std::env::temp_dir().join(format!("{ns}-bird"));
        std::fs::create_dir_all(&self.bird_dir)?;
        let conf = self.bird_dir.join("bird.conf");
        std::fs::write(&conf, bird_config(nodes, config))?;
        let socket = self.bird_dir.join("bird.ctl");
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "bird", "-f", "-c"])
            .arg(&conf)
            .arg("-s")
            .arg(&socket)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.router = Some(child);
        Ok(())
    }

    /// Full name of one of the rig's namespaces (`sw`, `r`, `c`, `n1`…).
    pub fn ns(&self, short: &str) -> String {
        self.namespaces.name(short)
    }

    /// FRR on node `i` (1-based).
    pub fn frr(&self, i: usize) -> &FrrNode {
        &self.nodes[i - 1]
    }

    /// Runs `birdc` on the router.
    pub fn birdc(&self, command: &str) -> io::Result<String> {
        let socket = self.bird_dir.join("bird.ctl").display().to_string();
        let mut args = vec!["ip", "netns", "exec", "", "birdc", "-s", &socket];
        let ns = self.ns("r");
        args[3] = &ns;
        args.extend(command.split_whitespace());
        run(&args)
    }

    /// The nodes the router has a route to `prefix` from (by BGP protocol name `n<i>` or
    /// `n<i>v6`), from BIRD's own table.
    pub fn learned_from(&self, prefix: &str) -> io::Result<Vec<usize>> {
        match self.birdc(&format!("show route {prefix}")) {
            Ok(table) => Ok(route_sources(&table)),
            // birdc exits non-zero when the table has no route for the prefix.
            Err(error) if error.to_string().contains("Network not found") => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// How many next hops the router's kernel route to `prefix` has (0: no route).
    pub fn kernel_next_hops(&self, prefix: &str) -> usize {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let Ok(out) = run(&["ip", family, "-n", &self.ns("r"), "route", "show", prefix]) else {
            return 0;
        };
        match out.matches("nexthop").count() {
            0 if out.contains(" via ") => 1,
            n => n,
        }
    }

    /// The full `show route <prefix> all` text of the router (attributes included).
    pub fn route_details(&self, prefix: &str) -> io::Result<String> {
        self.birdc(&format!("show route {prefix} all"))
    }

    /// Starts pod `name` on node `node` as 10.244.node.(10+k) / fd01:node::(10+k), answering
    /// its name on port 8080.
    pub fn pod(&mut self, name: &str, node: usize, k: usize) -> io::Result<crate::l2::lab::Pod> {
        let node_ns = self.ns(&format!("n{node}"));
        self.pods
            .start(&mut self.namespaces, &node_ns, name, node, k)
    }

    /// One TCP connection from the client to `addr`: the name of the pod that answered.
    pub fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<String, String> {
        let attempt = in_netns(&self.ns("c"), || -> io::Result<String> {
            let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer.trim().to_owned())
        })
        .map_err(|error| error.to_string())?;
        match attempt {
            Ok(name) if !name.is_empty() => Ok(name),
            Ok(_) => Err("empty answer".into()),
            Err(error) => Err(error.kind().to_string()),
        }
    }

    /// One TCP connection from the client's fixed source `port` to `addr` (address reuse on,
    /// the connection reset rather than left in TIME_WAIT), so that every attempt is the same
    /// flow and the router's ECMP hash sends it down the same path: the name of the pod that
    /// answered.
    pub fn connect_from(
        &self,
        port: u16,
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<String, String> {
        let attempt = in_netns(&self.ns("c"), || -> io::Result<String> {
            let domain = socket2::Domain::for_address(addr);
            let socket = socket2::Socket::new(domain, socket2::Type::STREAM, None)?;
            socket.set_reuse_address(true)?;
            socket.set_linger(Some(Duration::ZERO))?;
            let client: std::net::IpAddr = if addr.is_ipv4() {
                CLIENT_V4.parse().map_err(io::Error::other)?
            } else {
                CLIENT_V6.parse().map_err(io::Error::other)?
            };
            socket.bind(&SocketAddr::new(client, port).into())?;
            socket.connect_timeout(&addr.into(), timeout)?;
            let mut stream: TcpStream = socket.into();
            stream.set_read_timeout(Some(timeout))?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer.trim().to_owned())
        })
        .map_err(|error| error.to_string())?;
        match attempt {
            Ok(name) if !name.is_empty() => Ok(name),
            Ok(_) => Err("empty answer".into()),
            Err(error) => Err(error.kind().to_string()),
        }
    }

    /// Freezes every process in node `i`'s namespace (SIGSTOP): its proxy, FRR and BFD stop
    /// as a hung machine's would, while its interfaces stay up.
    pub fn freeze(&self, i: usize) -> io::Result<()> {
        self.signal_node(i, "-STOP")
    }

    /// Lets node `i`'s processes run again (SIGCONT).
    pub fn thaw(&self, i: usize) -> io::Result<()> {
        self.signal_node(i, "-CONT")
    }

    fn signal_node(&self, i: usize, signal: &str) -> io::Result<()> {
        let pids = run(&["ip", "netns", "pids", &self.ns(&format!("n{i}"))])?;
        for pid in pids.split_whitespace() {
            // A process may have exited since it was listed (a short vtysh, say).
            let _ = Command::new("kill")
                .args([signal, pid])
                .stderr(Stdio::null())
                .status();
        }
        Ok(())
    }

    /// Cuts node `i`'s link to the switch.
    pub fn cut_link(&self, i: usize) -> io::Result<()> {
        run(&[
            "ip",
            "-n",
            &self.ns("sw"),
            "link",
            "set",
            &format!("n{i}"),
            "down",
        ])
        .map(drop)
    }

    /// Restores node `i`'s link.
    pub fn restore_link(&self, i: usize) -> io::Result<()> {
        run(&[
            "ip",
            "-n",
            &self.ns("sw"),
            "link",
            "set",
            &format!("n{i}"),
            "up",
        ])
        .map(drop)
    }

    /// Command running `program args` inside node `i`'s namespace.
    pub fn node_command(&self, i: usize, program: &std::path::Path, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.ns(&format!("n{i}"))])
            .arg(program)
            .args(args);
        command
    }

    /// Waits until `check` holds, up to `timeout`; how long it took.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut check: impl FnMut(&BgpLab) -> bool,
    ) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if check(self) {
                return Some(start.elapsed());
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BgpLab {
    fn drop(&mut self) {
        if let Some(mut router) = self.router.take() {
            let _ = router.kill();
            let _ = router.wait();
        }
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.bird_dir);
    }
}

/// The protocols (`n<i>`, `n<i>v6`) BIRD names as sources in a `show route` answer, as node
/// numbers, sorted.
pub fn route_sources(table: &str) -> Vec<usize> {
    let mut nodes: Vec<usize> = table
        .split('[')
        .skip(1)
        .filter_map(|rest| {
            let name = rest.split_whitespace().next()?;
            let digits = name.strip_prefix('n')?.trim_end_matches("v6");
            digits.parse().ok()
        })
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
}

/// BIRD's configuration for the router: one IPv4 (eBGP, AS 64500 ↔ 64512) and one IPv6
/// (iBGP, AS 64512) BGP session per node, every learned route exported to the kernel with ECMP
/// (`merge paths`), BFD on request.
pub fn bird_config(nodes: usize, config: &RouterConfig) -> String {
    let hold = config.hold_time.max(3);
    let mut out = String::new();
    let _ = writeln!(out, "router id {ROUTER_V4};");
    out.push_str("protocol device { scan time 1; }\n");
    out.push_str("protocol direct { ipv4; ipv6; }\n");
    out.push_str("protocol kernel { ipv4 { export all; }; merge paths on; }\n");
    out.push_str("protocol kernel { ipv6 { export all; }; merge paths on; }\n");
    if config.bfd {
        out.push_str(
            "protocol bfd { interface \"*\" { min rx interval 300 ms; min tx interval 300 ms; \
             multiplier 3; }; }\n",
        );
    }
    for i in 1..=nodes {
        for (suffix, local, asn, neighbor, family) in [
            ("", ROUTER_V4, ROUTER_ASN, node_v4(i), "ipv4"),
            ("v6", ROUTER_V6, ROUTER_V6_ASN, node_v6(i), "ipv6"),
        ] {
            let _ = writeln!(out, "protocol bgp n{i}{suffix} {{");
            let _ = writeln!(out, "  local {local} as {asn};");
            if asn == NODE_ASN {
                // iBGP with a neighbour on the link: its next hop needs no recursive lookup.
                out.push_str("  direct;\n");
            }
            let _ = writeln!(out, "  neighbor {neighbor} as {NODE_ASN};");
            let _ = writeln!(
                out,
                "  hold time {hold}; connect retry time 1; error wait time 1, 3;"
            );
            if config.bfd {
                out.push_str("  bfd on;\n");
            }
            if let Some(password) = &config.password {
                let _ = writeln!(out, "  password \"{password}\";");
            }
            let _ = writeln!(out, "  {family} {{ import all; export none; }};");
            out.push_str("}\n");
        }
    }
    out
}

/// Name of the rig agents' userspace capture table.
pub const CAPTURE_TABLE: &str = "kube-lb-bgplab";

/// The node agent of the rig (feature `watch`): what `kube-lb proxy --mode userspace --bgp`
/// runs, against the API server at `api_url`, with FRR at `conf_dir` / `vty_dir`, until
/// SIGTERM. On SIGTERM the speaker withdraws every route and waits `withdraw_grace` before the
/// dataplane stops, as the proxy does.
#[cfg(feature = "watch")]
pub async fn run_agent(
    api_url: &str,
    node_name: &str,
    conf_dir: PathBuf,
    vty_dir: PathBuf,
    withdraw_grace: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    use std::sync::Arc;

    use crate::health::{ProxyHealth, ServiceHealthServers};
    use crate::model::IndexConfig;
    use crate::userspace::capture::CaptureConfig;
    use crate::userspace::{UserspaceConfig, UserspaceProxy};
    use crate::watch::{self, Dataplane, Proxy, Timing};

    let config = kube::Config::new(api_url.parse()?);
    let client = kube::Client::try_from(config)?;
    let health = ProxyHealth::new(Duration::from_secs(10));
    let proxy = Proxy {
        index: IndexConfig {
            node_name: node_name.into(),
            nodeport_cidrs: Vec::new(),
            allow_loopback_endpoints: false,
        },
        dataplane: Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
            capture: Some(CaptureConfig {
                table: CAPTURE_TABLE.into(),
                nft: vec!["nft".into()],
            }),
            workers: std::num::NonZeroUsize::MIN,
            ..UserspaceConfig::default()
        })),
        health: health.clone(),
        service_health: ServiceHealthServers::new(health.clone(), Vec::new()),
        timing: Timing {
            min_sync_period: Duration::from_millis(50),
            sync_period: Duration::from_secs(5),
        },
        handoff: None,
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (stop_bgp, bgp_stopped) = tokio::sync::watch::channel(false);
    let (stop_dataplane, dataplane_stopped) = tokio::sync::watch::channel(false);
    let wait = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let dataplane = tokio::spawn(watch::run(client.clone(), proxy, wait(dataplane_stopped)));
    let metrics = Arc::new(super::speaker::BgpMetrics::default());
    let metrics_listener = tokio::net::TcpListener::bind("0.0.0.0:10260").await?;
    tokio::spawn(super::speaker::serve_metrics(
        metrics_listener,
        metrics.clone(),
    ));
    let speaker = tokio::spawn(super::speaker::run(
        client,
        super::speaker::SpeakerConfig {
            node_name: node_name.into(),
            frr: super::daemon::Frr {
                conf_dir,
                vty_dir,
                reload_timeout: Duration::from_secs(10),
            },
            router_id: None,
            metallb_namespace: None,
            state_interval: Duration::from_millis(500),
            withdraw_grace,
            health: Some(health),
            metrics,
        },
        wait(bgp_stopped),
    ));
    term.recv().await;
    let _ = stop_bgp.send(true);
    speaker.await??;
    let _ = stop_dataplane.send(true);
    dataplane.await??;
    Ok(())
}

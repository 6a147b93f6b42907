//! A Layer-2 rig in network namespaces, shared by `dataplane/tests/it/l2_*.rs` and
//! `bench/l2_failover.rs`: one switch (a bridge, which also holds the API server's address
//! 10.0.0.1 / fd00::1), `n` nodes on it (10.0.0.1i, fd00::1i, each with a pod bridge
//! 10.244.i.0/24 + fd01:i::/64) and a client (10.0.0.100, fd00::100). Load-balancer addresses
//! in 10.0.0.0/24 and fd00::/64 are on-link for the client, so it resolves them by ARP and NDP
//! like a host on a real LAN. Needs root and `ip`; everything is removed on drop.
#![allow(unsafe_code)] // setns(2) for one thread at a time; no dependency wraps it

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::packet::{self, Mac};
use super::socket::PacketSocket;

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// The API server's address on the switch.
pub const API_ADDRESS: &str = "10.0.0.1";
/// The client's IPv4 address.
pub const CLIENT_V4: &str = "10.0.0.100";
/// The client's IPv6 address.
pub const CLIENT_V6: &str = "fd00::100";

/// Runs `f` on the calling thread inside network namespace `ns` (a name under /run/netns), then
/// returns the thread to the namespace it was in. Sockets created by `f` stay in `ns`.
pub fn in_netns<T>(ns: &str, f: impl FnOnce() -> T) -> io::Result<T> {
    let original = std::fs::File::open("/proc/thread-self/ns/net")?;
    let target = std::fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: setns on descriptors this function holds open; it changes only this thread.
    if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let result = f();
    // SAFETY: as above.
    if unsafe { libc::setns(original.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result)
}

/// Runs a command; its stdout on success, else an error naming the command and showing what
/// it wrote.
pub fn run(args: &[&str]) -> io::Result<String> {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{args:?}: {e}")))?;
    if !output.status.success() {
        return Err(io::Error::other(format!(
            "{args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// True when this process can build the rig: root, `ip netns` and `nft`.
pub fn available() -> bool {
    let probe = format!(
        "klb-l2probe-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let ok = run(&["ip", "netns", "add", &probe]).is_ok();
    if ok {
        let _ = run(&["ip", "netns", "del", &probe]);
    }
    ok && run(&["nft", "--version"]).is_ok()
}

/// Network namespaces made under one prefix unique to this process and rig, deleted (last
/// made first) on drop, and the veth plumbing between them: what every namespace rig needs,
/// shared by [`L2Lab`] and the dataplane tests' lab (`dataplane/tests/it/support`).
#[derive(Debug)]
pub struct Namespaces {
    prefix: String,
    made: Vec<String>,
}

impl Namespaces {
    /// An empty set whose namespaces are named `<tag><pid>x<n><short>`.
    pub fn new(tag: &str) -> Namespaces {
        Namespaces {
            prefix: format!(
                "{tag}{}x{}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::SeqCst)
            ),
            made: Vec::new(),
        }
    }

    /// Full name of namespace `short` of this set.
    pub fn name(&self, short: &str) -> String {
        format!("{}{short}", self.prefix)
    }

    /// Makes namespace `short` with its loopback up; deleted on drop even if a later step
    /// fails. Interfaces made in it from then on skip IPv6 duplicate address detection: their
    /// addresses (link-local ones too, which neighbour discovery needs) are usable at once
    /// instead of tentative for a second or two.
    pub fn add(&mut self, short: &str) -> io::Result<String> {
        let name = self.name(short);
        run(&["ip", "netns", "add", &name])?;
        self.made.push(name.clone());
        run(&["ip", "-n", &name, "link", "set", "lo", "up"])?;
        self.sysctl(&name, &["net.ipv6.conf.default.accept_dad=0"])?;
        Ok(name)
    }

    /// Sets each of `settings` (`key=value`) with sysctl inside `ns`.
    pub fn sysctl(&self, ns: &str, settings: &[&str]) -> io::Result<()> {
        for setting in settings {
            run(&["ip", "netns", "exec", ns, "sysctl", "-qw", setting])?;
        }
        Ok(())
    }

    /// Makes bridge `bridge` in `ns` with each of `cidrs` (see [`Namespaces::address`]) and
    /// brings it up.
    pub fn bridge(&self, ns: &str, bridge: &str, cidrs: &[&str]) -> io::Result<()> {
        run(&["ip", "-n", ns, "link", "add", bridge, "type", "bridge"])?;
        self.address(ns, bridge, cidrs)?;
        run(&["ip", "-n", ns, "link", "set", bridge, "up"]).map(drop)
    }

    /// A veth pair: `port` in `outer`, enslaved to bridge `bridge` there and up, and `eth0` in
    /// `inner` (left down until it has its addresses, see [`Namespaces::address_eth0`]).
    pub fn veth(&self, outer: &str, port: &str, bridge: &str, inner: &str) -> io::Result<()> {
        run(&[
            "ip", "-n", outer, "link", "add", port, "type", "veth", "peer", "name", "eth0",
            "netns", inner,
        ])?;
        run(&[
            "ip", "-n", outer, "link", "set", port, "master", bridge, "up",
        ])?;
        Ok(())
    }

    /// Gives `device` of `ns` each of `cidrs` (IPv6 without duplicate address detection, so it
    /// is usable at once).
    pub fn address(&self, ns: &str, device: &str, cidrs: &[&str]) -> io::Result<()> {
        for cidr in cidrs {
            let mut args = vec!["ip", "-n", ns, "addr", "add", cidr, "dev", device];
            if cidr.contains(':') {
                args.push("nodad");
            }
            run(&args)?;
        }
        Ok(())
    }

    /// Gives `eth0` of `ns` each of `cidrs` (see [`Namespaces::address`]), then brings it up.
    pub fn address_eth0(&self, ns: &str, cidrs: &[&str]) -> io::Result<()> {
        self.address(ns, "eth0", cidrs)?;
        run(&["ip", "-n", ns, "link", "set", "eth0", "up"]).map(drop)
    }

    /// Routes `to` (a prefix, or `default`) in `ns` via gateway `via`, in `via`'s address
    /// family.
    pub fn route(&self, ns: &str, to: &str, via: &str) -> io::Result<()> {
        let family = if via.contains(':') { "-6" } else { "-4" };
        run(&["ip", "-n", ns, family, "route", "add", to, "via", via]).map(drop)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in self.made.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// A backend pod: a TCP server on port 8080 of both families answering its name.
#[derive(Debug, Clone)]
pub struct Pod {
    /// The name it answers with.
    pub name: String,
    /// Its IPv4 address.
    pub v4: String,
    /// Its IPv6 address.
    pub v6: String,
    /// Its node (`n1`…).
    pub node: String,
}

/// The namespaces of one rig.
#[derive(Debug)]
pub struct L2Lab {
    // Dropped in this order: the pods' servers stop before their namespaces go.
    pods: PodServers,
    namespaces: Namespaces,
    nodes: usize,
}

/// The TCP servers of a rig's pods, stopped on drop.
#[derive(Debug, Default)]
pub struct PodServers {
    stop: Arc<AtomicBool>,
}

impl PodServers {
    /// Starts pod `name` in a new namespace on node namespace `node_ns` (node number `node`,
    /// whose pod bridge is `cbr0`) as 10.244.node.(10+k) / fd01:node::(10+k): a TCP server on
    /// port 8080 of both families answering its name.
    pub fn start(
        &self,
        namespaces: &mut Namespaces,
        node_ns: &str,
        name: &str,
        node: usize,
        k: usize,
    ) -> io::Result<Pod> {
        let ns = namespaces.add(&format!("p{name}"))?;
        namespaces.veth(node_ns, &format!("v{name}"), "cbr0", &ns)?;
        let pod = Pod {
            name: name.into(),
            v4: format!("10.244.{node}.{}", 10 + k),
            v6: format!("fd01:{node}::{}", 10 + k),
            node: format!("n{node}"),
        };
        namespaces.address_eth0(&ns, &[&format!("{}/24", pod.v4), &format!("{}/64", pod.v6)])?;
        namespaces.route(&ns, "default", &format!("10.244.{node}.1"))?;
        namespaces.route(&ns, "default", &format!("fd01:{node}::1"))?;
        let listener = in_netns(&ns, || TcpListener::bind("[::]:8080"))??;
        listener.set_nonblocking(true)?;
        let (stop, answer) = (self.stop.clone(), name.to_owned());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.write_all(format!("{answer}\n").as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Ok(pod)
    }
}

impl Drop for PodServers {
    fn drop(&mut self) {
        // The accept loops stop; their namespaces go with the rig's.
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A node's IPv4 address (1-based).
pub fn node_v4(i: usize) -> String {
    format!("10.0.0.{}", 10 + i)
}

/// A node's IPv6 address (1-based).
pub fn node_v6(i: usize) -> String {
    format!("fd00::{}", 10 + i)
}

impl L2Lab {
    /// Builds the switch, `nodes` nodes and the client.
    pub fn new(nodes: usize) -> io::Result<L2Lab> {
        let mut lab = L2Lab {
            namespaces: Namespaces::new("klbl2"),
            nodes,
            pods: PodServers::default(),
        };
        let switch = lab.namespaces.add("sw")?;
        lab.namespaces
            .bridge(&switch, "br0", &["10.0.0.1/24", "fd00::1/64"])?;
        for i in 1..=nodes {
            let ns = lab.namespaces.add(&format!("n{i}"))?;
            lab.attach(&format!("n{i}"), &ns, &node_v4(i), &node_v6(i))?;
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
        }
        let client = lab.namespaces.add("c")?;
        lab.attach("c", &client, CLIENT_V4, CLIENT_V6)?;
        Ok(lab)
    }

    /// Full name of one of the rig's namespaces (`sw`, `c`, `n1`…, `p<pod>`).
    pub fn ns(&self, short: &str) -> String {
        self.namespaces.name(short)
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// A veth from switch port `port` into `ns` as `eth0`.
    fn attach(&self, port: &str, ns: &str, v4: &str, v6: &str) -> io::Result<()> {
        self.namespaces.veth(&self.ns("sw"), port, "br0", ns)?;
        self.namespaces
            .address_eth0(ns, &[&format!("{v4}/24"), &format!("{v6}/64")])
    }

    /// Starts pod `name` on node `node` (1-based) as 10.244.node.(10+k) / fd01:node::(10+k).
    pub fn pod(&mut self, name: &str, node: usize, k: usize) -> io::Result<Pod> {
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

    /// The MAC the client's neighbour table holds for `ip`, if any.
    pub fn client_neighbour(&self, ip: IpAddr) -> Option<Mac> {
        let out = run(&["ip", "-n", &self.ns("c"), "neigh", "show", &ip.to_string()]).ok()?;
        let mut words = out.split_whitespace();
        words.find(|word| *word == "lladdr")?;
        packet::parse_mac(words.next()?)
    }

    /// The MAC of node `i`'s LAN interface.
    pub fn node_mac(&self, i: usize) -> io::Result<Mac> {
        link(&self.ns(&format!("n{i}")), "eth0").map(|(_, mac)| mac)
    }

    /// The node (1-based) whose MAC this is.
    pub fn node_of(&self, mac: Mac) -> Option<usize> {
        (1..=self.nodes).find(|i| self.node_mac(*i).ok() == Some(mac))
    }

    /// Pulls node `i`'s cable: its switch port goes down (the node loses the API server too).
    pub fn cut_link(&self, i: usize) -> io::Result<()> {
        self.set_switch_port(i, "down")
    }

    /// Plugs node `i`'s cable back in.
    pub fn restore_link(&self, i: usize) -> io::Result<()> {
        self.set_switch_port(i, "up")
    }

    /// Sets node `i`'s switch port `up` or `down`.
    fn set_switch_port(&self, i: usize, state: &str) -> io::Result<()> {
        let (switch, port) = (self.ns("sw"), format!("n{i}"));
        run(&["ip", "-n", &switch, "link", "set", &port, state]).map(drop)
    }

    /// Asks the segment who has `ip` from the client (an ARP request for IPv4, a neighbour
    /// solicitation for IPv6) and collects the distinct MACs that answer within `wait`. The
    /// client's own kernel is bypassed, so its cache does not hide a second answer.
    pub fn who_has(&self, ip: IpAddr, wait: Duration) -> io::Result<BTreeSet<Mac>> {
        let ns = self.ns("c");
        let (ifindex, mac) = link(&ns, "eth0")?;
        in_netns(&ns, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(who_has(ifindex, mac, ip, wait))
        })?
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
}

/// Index and MAC of `interface` in namespace `ns` (sysfs would show the namespace it was
/// mounted in, not the one a thread entered).
fn link(ns: &str, interface: &str) -> io::Result<(u32, Mac)> {
    let out = run(&["ip", "-n", ns, "-o", "link", "show", interface])?;
    let ifindex = out
        .split(':')
        .next()
        .and_then(|index| index.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no index in {out:?}")))?;
    let mac = out
        .split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .and_then(packet::parse_mac)
        .ok_or_else(|| io::Error::other(format!("no MAC in {out:?}")))?;
    Ok((ifindex, mac))
}

async fn who_has(
    ifindex: u32,
    our_mac: Mac,
    ip: IpAddr,
    wait: Duration,
) -> io::Result<BTreeSet<Mac>> {
    let (ethertype, question) = match ip {
        IpAddr::V4(v4) => {
            let client: std::net::Ipv4Addr = CLIENT_V4.parse().map_err(io::Error::other)?;
            let mut frame = packet::gratuitous_arp(our_mac, client);
            // A plain request: from the client's address, for `ip`.
            frame[38..42].copy_from_slice(&v4.octets());
            (packet::ETHERTYPE_ARP, frame)
        }
        IpAddr::V6(v6) => {
            let client: std::net::Ipv6Addr = CLIENT_V6.parse().map_err(io::Error::other)?;
            (packet::ETHERTYPE_IPV6, solicitation(our_mac, client, v6))
        }
    };
    let socket = PacketSocket::open(ifindex, ethertype, None, true)?;
    socket.send(&question)?;
    let mut answers = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + wait;
    let mut buffer = vec![0u8; 2048];
    while let Ok(received) = tokio::time::timeout_at(deadline, socket.recv(&mut buffer)).await {
        let length = received?;
        let frame = buffer.get(..length).unwrap_or_default();
        if let Some(sender) = answer_for(frame, ip) {
            answers.insert(sender);
        }
    }
    Ok(answers)
}

/// The MAC an ARP reply or neighbour advertisement in `frame` gives for `ip`.
fn answer_for(frame: &[u8], ip: IpAddr) -> Option<Mac> {
    match ip {
        IpAddr::V4(v4) => {
            let is_reply = frame.get(12..14)? == [0x08, 0x06] && frame.get(20..22)? == [0, 2];
            (is_reply && frame.get(28..32)? == v4.octets())
                .then(|| frame[22..28].try_into().ok())?
        }
        IpAddr::V6(v6) => {
            let icmp = frame.get(54..)?;
            let is_advert = frame.get(12..14)? == [0x86, 0xdd]
                && frame.get(20)? == &58
                && icmp.first()? == &136;
            (is_advert && icmp.get(8..24)? == v6.octets())
                .then(|| icmp.get(26..32)?.try_into().ok())?
        }
    }
}

/// A neighbour solicitation for `target` from `source` to its solicited-node group.
fn solicitation(our_mac: Mac, source: std::net::Ipv6Addr, target: std::net::Ipv6Addr) -> Vec<u8> {
    let mut group = "ff02::1:ff00:0"
        .parse::<std::net::Ipv6Addr>()
        .map(|g| g.octets())
        .unwrap_or_default();
    group[13..].copy_from_slice(&target.octets()[13..]);
    let group = std::net::Ipv6Addr::from(group);
    let mut icmp = vec![135, 0, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(&target.octets());
    icmp.extend_from_slice(&[1, 1]);
    icmp.extend_from_slice(&our_mac);
    let checksum = packet::icmpv6_checksum(source, group, &icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    let mut frame = Vec::new();
    frame.extend_from_slice(&packet::multicast_mac(group));
    frame.extend_from_slice(&our_mac);
    frame.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
    frame.extend_from_slice(&u16::try_from(icmp.len()).unwrap_or(0).to_be_bytes());
    frame.extend_from_slice(&[58, 255]);
    frame.extend_from_slice(&source.octets());
    frame.extend_from_slice(&group.octets());
    frame.extend_from_slice(&icmp);
    frame
}

/// Polls `addr` from the client every `every` until a connection succeeds or `ceiling` passes;
/// the time from `since` to the first success.
pub fn first_success(
    lab: &L2Lab,
    addr: SocketAddr,
    since: Instant,
    every: Duration,
    ceiling: Duration,
) -> Option<Duration> {
    loop {
        if lab.connect(addr, every).is_ok() {
            return Some(since.elapsed());
        }
        if since.elapsed() > ceiling {
            return None;
        }
        std::thread::sleep(
            every
                .saturating_sub(Duration::from_millis(1))
                .min(Duration::from_millis(20)),
        );
    }
}

/// Name of the rig agents' userspace capture table.
pub const CAPTURE_TABLE: &str = "kube-lb-l2lab";

/// The node agent of the rig (feature `watch`): what `kube-lb proxy --mode userspace
/// --l2-announce --l2-interface eth0` runs, against the API server at `api_url`, until SIGTERM.
/// Userspace mode, so that killing the agent stops the node forwarding, as a node failure
/// would. Lease timing as the CLI defaults (0.5 s renewals, 1.5 s expiry).
#[cfg(feature = "watch")]
pub async fn run_agent(api_url: &str, node_name: &str) -> Result<(), Box<dyn std::error::Error>> {
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
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let wait = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let dataplane = tokio::spawn(watch::run(client.clone(), proxy, wait(stopped.clone())));
    let announcer = tokio::spawn(super::announcer::run(
        client,
        super::announcer::L2Config {
            node_name: node_name.into(),
            interfaces: regex::Regex::new("eth0")?,
            lease_namespace: "kube-lb-system".into(),
            renew_interval: Duration::from_millis(500),
            lease_duration: Duration::from_millis(1500),
            health: Some(health),
            metrics: Arc::default(),
        },
        wait(stopped),
    ));
    term.recv().await;
    let _ = stop.send(true);
    announcer.await??;
    dataplane.await??;
    Ok(())
}

//! BGP announcement on a routed (virtual) network, in network namespaces these tests create
//! ([`kube_lb_dataplane::bgp::lab`]): three nodes, each running the agent (`kube-lb proxy
//! --mode userspace --bgp`, started as this test binary again inside the node's namespace)
//! beside its own FRR (zebra, bgpd, bfdd and `deploy/components/bgp-frr/frr-reloader.sh`); a
//! router running BIRD 2 with ECMP; a client behind the router; the embedded API server on
//! the switch. What the router learned is read from BIRD itself (`birdc`), and the client's
//! connections show which nodes the traffic went through.
//!
//! Root, `ip netns`, `nft`, FRR and BIRD 2 are needed; without them the tests skip loudly,
//! and fail under `CI=true`.

#![cfg(feature = "watch")]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::bgp::crd::CRDS;
use kube_lb_dataplane::bgp::lab::{self, BgpLab, RouterConfig};
use kube_lb_dataplane::l2::lab::{Pod, in_netns};
use kube_lb_dataplane::testing::{node, service, slice};

const API_PORT: u16 = 6443;
const API_ADDRESS: &str = "10.0.0.1";

/// The agent of one node, run when this binary is started inside a node namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the other tests inside a node namespace"]
async fn bgp_node_agent() {
    let (Ok(api), Ok(node), Ok(conf), Ok(vty)) = (
        std::env::var("KLB_BGP_AGENT_API"),
        std::env::var("KLB_BGP_AGENT_NODE"),
        std::env::var("KLB_BGP_AGENT_CONF"),
        std::env::var("KLB_BGP_AGENT_VTY"),
    ) else {
        return;
    };
    lab::run_agent(
        &api,
        &node,
        conf.into(),
        vty.into(),
        Duration::from_millis(500),
    )
    .await
    .expect("agent");
}

/// Skips (or, under `CI=true`, fails) when the rig cannot be built here.
macro_rules! require_bgp_lab {
    () => {
        if let Err(why) = lab::available() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "the BGP rig cannot run here: {why}"
            );
            eprintln!("skipped: {why}");
            return;
        }
    };
}

fn reloader() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/components/bgp-frr/frr-reloader.sh")
}

/// One node's agent process; SIGKILLed when dropped.
struct Agent(Child);

impl Agent {
    fn start(lab: &BgpLab, i: usize) -> Agent {
        let exe = std::env::current_exe().expect("test binary");
        let frr = lab.frr(i);
        let child = lab
            .node_command(
                i,
                &exe,
                &[
                    "--exact",
                    "bgp_netns::bgp_node_agent",
                    "--ignored",
                    "--nocapture",
                ],
            )
            .env(
                "KLB_BGP_AGENT_API",
                format!("http://{API_ADDRESS}:{API_PORT}"),
            )
            .env("KLB_BGP_AGENT_NODE", format!("n{i}"))
            .env("KLB_BGP_AGENT_CONF", &frr.conf_dir)
            .env("KLB_BGP_AGENT_VTY", &frr.vty_dir)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start agent");
        Agent(child)
    }

    /// SIGTERM, then wait: the agent withdraws its routes before its dataplane stops.
    fn stop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The rig with the API server and three agents.
struct Rig {
    agents: Vec<Agent>,
    server: Option<kube_lb_apiserver::server::RunningApiServer>,
    runtime: tokio::runtime::Runtime,
    lab: BgpLab,
}

impl Rig {
    fn new(router: &RouterConfig, pods: &[(&str, usize)]) -> (Rig, Vec<Pod>) {
        let mut lab = BgpLab::new(3, router, &reloader()).expect("lab");
        let pods = pods
            .iter()
            .enumerate()
            .map(|(k, (name, node))| lab.pod(name, *node, k).expect("pod"))
            .collect();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listen: SocketAddr = format!("{API_ADDRESS}:{API_PORT}")
            .parse()
            .expect("address");
        let server = in_netns(&lab.ns("sw"), || {
            runtime.block_on(
                ApiServer::builder()
                    .listen(listen)
                    .secondary_service_cidr("fd00:96::/112".parse().expect("cidr"))
                    .start(),
            )
        })
        .expect("setns")
        .expect("api server");
        for crd in CRDS
            .iter()
            .chain([&include_str!("../../../deploy/base/ippool-crd.yaml")])
        {
            server.apply_manifests(crd).expect("CRD");
        }
        server
            .seed(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "kube-lb-system"}}))
            .expect("seed namespace");
        for i in 1..=3 {
            server
                .seed(node(
                    &format!("n{i}"),
                    "za",
                    "r1",
                    &[&lab::node_v4(i), &lab::node_v6(i)],
                ))
                .expect("seed node");
        }
        (
            Rig {
                agents: Vec::new(),
                server: Some(server),
                runtime,
                lab,
            },
            pods,
        )
    }

    fn server(&self) -> &kube_lb_apiserver::server::RunningApiServer {
        self.server.as_ref().expect("server runs")
    }

    fn seed(&self, object: impl serde::Serialize) {
        self.server().seed(object).expect("seed");
    }

    /// Creates or replaces `object`.
    fn replace(&self, object: impl serde::Serialize) {
        let text = serde_json::to_string(&object).expect("JSON");
        self.server().apply_manifests(&text).expect("replace");
    }

    fn apply(&self, manifests: &str) {
        self.server().apply_manifests(manifests).expect("manifests");
    }

    fn start_agents(&mut self) {
        self.agents = (1..=3).map(|i| Agent::start(&self.lab, i)).collect();
    }

    /// Waits until the router has `prefix` from exactly `nodes`; how long it took.
    fn learned(&self, prefix: &str, nodes: &[usize], ceiling: Duration) -> Duration {
        let mut last = Vec::new();
        self.lab
            .wait_for(ceiling, |lab| {
                last = lab.learned_from(prefix).unwrap_or_default();
                last == nodes
            })
            .unwrap_or_else(|| {
                panic!(
                    "{prefix}: the router has it from nodes {last:?}, not {nodes:?}\n{}",
                    self.lab.route_details(prefix).unwrap_or_default()
                )
            })
    }

    /// Node `i`'s BGP metrics (the agent serves them on port 10260 in its namespace).
    fn metrics(&self, i: usize) -> String {
        in_netns(
            &self.lab.ns(&format!("n{i}")),
            || -> std::io::Result<String> {
                let mut stream = std::net::TcpStream::connect("127.0.0.1:10260")?;
                stream.set_read_timeout(Some(Duration::from_secs(2)))?;
                std::io::Write::write_all(
                    &mut stream,
                    b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                )?;
                let mut text = String::new();
                std::io::Read::read_to_string(&mut stream, &mut text)?;
                Ok(text)
            },
        )
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default()
    }

    /// The pods answering `count` connections from the client to `addr`.
    fn answers(&self, addr: SocketAddr, count: usize) -> BTreeSet<String> {
        (0..count)
            .filter_map(|_| self.lab.connect(addr, Duration::from_millis(500)).ok())
            .collect()
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.agents.clear();
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
    }
}

fn lb_service(name: &str, cluster_ips: &[&str], ips: &[&str], local: Option<i32>) -> Service {
    let mut svc = service("default", name, cluster_ips[0])
        .port("http", "TCP", 80)
        .load_balancer(ips)
        .build();
    if let Some(spec) = svc.spec.as_mut() {
        spec.cluster_ips = Some(cluster_ips.iter().map(|ip| (*ip).to_owned()).collect());
        if cluster_ips.len() > 1 {
            spec.ip_families = Some(vec!["IPv4".into(), "IPv6".into()]);
            spec.ip_family_policy = Some("RequireDualStack".into());
        }
        if let Some(port) = local {
            spec.external_traffic_policy = Some("Local".into());
            spec.health_check_node_port = Some(port);
        }
    }
    svc
}

fn pods_slice(name: &str, pods: &[&Pod], v6: bool) -> EndpointSlice {
    let suffix = if v6 { "v6" } else { "v4" };
    let mut builder = slice("default", name, &format!("{name}-{suffix}")).port("http", "TCP", 8080);
    for pod in pods {
        builder = builder.endpoint(if v6 { &pod.v6 } else { &pod.v4 }, &pod.node);
    }
    let mut slice = builder.build();
    if v6 {
        slice.address_type = "IPv6".into();
    }
    slice
}

/// The BGP configuration of the rig: one IPv4 peer (the router, eBGP) and one IPv6 peer (the
/// router, iBGP), a BFD profile, the pool, and one advertisement with communities and a local
/// preference.
const CONFIG: &str = r#"
apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata: {name: routed}
spec:
  addresses: ["10.3.0.0/24", "fd03::/64"]
---
apiVersion: kube-lb.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}
---
apiVersion: kube-lb.io/v1alpha1
kind: BGPPeer
metadata: {name: router}
spec:
  myASN: 64512
  peerASN: 64500
  peerAddress: 10.0.0.254
  holdTime: 9s
  keepaliveTime: 3s
  bfdProfile: fast
---
apiVersion: kube-lb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-v6}
spec:
  myASN: 64512
  peerASN: 64512
  peerAddress: fd00::fe
  holdTime: 9s
  keepaliveTime: 3s
  bfdProfile: fast
---
apiVersion: kube-lb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: routed}
spec:
  ipAddressPools: [routed]
  communities: ["65000:100", "large:64512:7:8"]
  localPref: 250
"#;

/// The router learns each Service's prefix from exactly the nodes that may take its traffic
/// (every node for `Cluster`, the nodes with a ready endpoint for `Local`), IPv4 and IPv6
/// (MP-BGP over the IPv6 session), with the communities configured; the client reaches the
/// Service through ECMP to every advertising node; a Local Service's prefix is withdrawn
/// within a second of its last endpoint on a node going away; a cordoned node withdraws.
#[test]
fn bgp_routes_come_from_the_right_nodes_and_traffic_spreads_over_them() {
    require_bgp_lab!();
    let router = RouterConfig {
        bfd: true,
        hold_time: 9,
        ..RouterConfig::default()
    };
    let (mut rig, pods) = Rig::new(&router, &[("x", 1), ("y", 2), ("z", 3)]);
    rig.apply(CONFIG);
    // `spread`: Local with an endpoint on every node, so the pod answering names the node the
    // router sent the connection to. `only-y`: Local with its endpoint on n2 alone.
    rig.seed(lb_service(
        "spread",
        &["10.96.0.10", "fd00:96::10"],
        &["10.3.0.10", "fd03::10"],
        Some(31010),
    ));
    let all: Vec<&Pod> = pods.iter().collect();
    rig.seed(pods_slice("spread", &all, false));
    rig.seed(pods_slice("spread", &all, true));
    rig.seed(lb_service(
        "only-y",
        &["10.96.0.11"],
        &["10.3.0.11"],
        Some(31011),
    ));
    rig.seed(pods_slice("only-y", &[&pods[1]], false));
    rig.start_agents();

    rig.learned("10.3.0.10/32", &[1, 2, 3], Duration::from_secs(60));
    rig.learned("fd03::10/128", &[1, 2, 3], Duration::from_secs(30));
    rig.learned("10.3.0.11/32", &[2], Duration::from_secs(30));
    let details = rig.lab.route_details("10.3.0.10/32").expect("birdc");
    assert!(details.contains("BGP.community: (65000,100)"), "{details}");
    assert!(
        details.contains("BGP.large_community: (64512, 7, 8)"),
        "{details}"
    );
    // The metrics say what bgpd and bfdd report: both sessions up with BFD, and what was sent.
    let wanted = [
        "kube_lb_bgp_session_up{peer=\"router\",address=\"10.0.0.254\"} 1",
        "kube_lb_bgp_bfd_session_up{peer=\"router\",address=\"10.0.0.254\"} 1",
        "kube_lb_bgp_bfd_session_up{peer=\"router-v6\",address=\"fd00::fe\"} 1",
        "kube_lb_bgp_announced_prefixes_total{peer=\"router\",address=\"10.0.0.254\"} 1",
        "kube_lb_bgp_announced_prefixes_total{peer=\"router-v6\",address=\"fd00::fe\"} 1",
    ];
    let mut text = String::new();
    let reported = rig.lab.wait_for(Duration::from_secs(10), |_| {
        text = rig.metrics(1);
        wanted.iter().all(|line| text.lines().any(|l| l == *line))
    });
    assert!(
        reported.is_some(),
        "node 1's metrics lack one of {wanted:?}:\n{text}"
    );
    // LOCAL_PREF travels on iBGP (the IPv6 sessions) only; eBGP drops it.
    let details6 = rig.lab.route_details("fd03::10/128").expect("birdc");
    assert!(details6.contains("BGP.local_pref: 250"), "{details6}");
    assert!(
        details6.contains("BGP.community: (65000,100)"),
        "{details6}"
    );
    assert!(details.contains("BGP.local_pref: 100"), "{details}");
    // Addresses no Service has are never advertised.
    assert!(
        rig.lab
            .learned_from("10.3.0.12/32")
            .expect("birdc")
            .is_empty()
    );

    let spread = SocketAddr::new("10.3.0.10".parse().expect("ip"), 80);
    let answered = rig.answers(spread, 60);
    assert_eq!(
        answered,
        ["x", "y", "z"].map(String::from).into(),
        "ECMP should spread connections over every advertising node"
    );
    let spread6 = SocketAddr::new("fd03::10".parse::<IpAddr>().expect("ip"), 80);
    assert_eq!(rig.answers(spread6, 60).len(), 3, "IPv6 through ECMP too");
    assert_eq!(
        rig.answers(SocketAddr::new("10.3.0.11".parse().expect("ip"), 80), 10),
        ["y".to_owned()].into()
    );

    // The endpoint of `spread` on n3 goes away: n3 withdraws within a second.
    let changed = Instant::now();
    rig.replace(pods_slice("spread", &[&pods[0], &pods[1]], false));
    let took = changed.elapsed() + rig.learned("10.3.0.10/32", &[1, 2], Duration::from_secs(5));
    eprintln!("withdrawn after the last local endpoint went: {took:?}");
    // The figure is the benchmark's to judge (bench/bgp_failover.rs); here only that it is
    // prompt, on a machine that may be busy with other tests.
    assert!(took <= Duration::from_secs(3), "withdrawal took {took:?}");
    assert!(!rig.answers(spread, 30).contains("z"));

    // n1 is cordoned (a drain's first step): it withdraws everything.
    let mut cordoned = node("n1", "za", "r1", &[&lab::node_v4(1), &lab::node_v6(1)]);
    cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    rig.replace(cordoned);
    rig.learned("10.3.0.10/32", &[2], Duration::from_secs(5));
    rig.learned("fd03::10/128", &[2, 3], Duration::from_secs(5));
    assert_eq!(rig.answers(spread, 20), ["y".to_owned()].into());

    // A graceful stop of n2's agent withdraws its routes before its dataplane stops.
    rig.agents[1].stop();
    assert!(
        rig.lab
            .learned_from("10.3.0.10/32")
            .expect("birdc")
            .is_empty()
    );
    assert!(
        rig.lab
            .learned_from("10.3.0.11/32")
            .expect("birdc")
            .is_empty()
    );
}

/// A proxy that dies (SIGKILL: nothing withdrawn by the proxy, its userspace dataplane gone)
/// loses its node's routes through FRR's dead man's switch within about a second, while the
/// other nodes keep theirs; the proxy started again advertises again.
#[test]
fn bgp_a_killed_proxy_is_withdrawn_by_the_dead_mans_switch() {
    require_bgp_lab!();
    let router = RouterConfig {
        bfd: true,
        hold_time: 9,
        ..RouterConfig::default()
    };
    let (mut rig, pods) = Rig::new(&router, &[("x", 1), ("y", 2), ("z", 3)]);
    rig.apply(CONFIG);
    rig.seed(lb_service(
        "spread",
        &["10.96.0.10"],
        &["10.3.0.10"],
        Some(31010),
    ));
    rig.seed(pods_slice(
        "spread",
        &pods.iter().collect::<Vec<_>>(),
        false,
    ));
    rig.start_agents();
    rig.learned("10.3.0.10/32", &[1, 2, 3], Duration::from_secs(60));

    let _ = rig.agents[0].0.kill();
    let killed = Instant::now();
    let took = killed.elapsed() + rig.learned("10.3.0.10/32", &[2, 3], Duration::from_secs(5));
    eprintln!("withdrawn after the proxy was killed: {took:?}");
    // bench/bgp_failover.rs measures it; here only that the switch fires, promptly.
    assert!(took <= Duration::from_secs(3), "took {took:?}");
    // Sessions stay up: only the prefixes went.
    let summary = rig.lab.birdc("show protocols n1").expect("birdc");
    assert!(summary.contains("Established"), "{summary}");

    rig.agents[0] = Agent::start(&rig.lab, 1);
    rig.learned("10.3.0.10/32", &[1, 2, 3], Duration::from_secs(30));
}

/// A rolling restart of every node's proxy (SIGTERM, then started again; the next one once
/// the router has all three paths back) fails no connection: each stopping proxy withdraws
/// its routes and waits before its dataplane stops, and a starting one advertises only after
/// its first sync.
#[test]
fn bgp_a_rolling_restart_of_every_proxy_fails_no_connection() {
    require_bgp_lab!();
    let router = RouterConfig {
        bfd: true,
        hold_time: 9,
        ..RouterConfig::default()
    };
    let (mut rig, pods) = Rig::new(&router, &[("x", 1), ("y", 2), ("z", 3)]);
    rig.apply(CONFIG);
    rig.seed(lb_service(
        "spread",
        &["10.96.0.10"],
        &["10.3.0.10"],
        Some(31010),
    ));
    rig.seed(pods_slice(
        "spread",
        &pods.iter().collect::<Vec<_>>(),
        false,
    ));
    rig.start_agents();
    rig.learned("10.3.0.10/32", &[1, 2, 3], Duration::from_secs(60));

    let addr = SocketAddr::new("10.3.0.10".parse().expect("ip"), 80);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client_ns = rig.lab.ns("c");
    let origin = Instant::now();
    // Each attempt: when it started and ended, and how it failed if it did.
    let probe = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0usize, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = origin.elapsed();
                let attempt = in_netns(&client_ns, || {
                    let mut stream =
                        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
                    stream.set_read_timeout(Some(Duration::from_secs(1)))?;
                    let mut answer = String::new();
                    std::io::Read::read_to_string(&mut stream, &mut answer)?;
                    Ok::<_, std::io::Error>(answer)
                });
                match attempt {
                    Ok(Ok(answer)) if !answer.trim().is_empty() => ok += 1,
                    other => failed.push((started, origin.elapsed(), format!("{other:?}"))),
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            (ok, failed)
        })
    };
    // When the router's multipath route changed (its next hops, read every 2 ms). A plain
    // Linux router rehashes flows over the new set of next hops (it has no resilient
    // hashing), so a connection in flight at that instant may move to a node that never saw
    // it; that is the router's doing, and counted apart.
    let watcher = {
        let stop = stop.clone();
        let router_ns = rig.lab.ns("r");
        std::thread::spawn(move || {
            // Each change as the interval it happened in: from the start of the look that
            // still saw the old paths to the end of the one that saw the new.
            let read = || {
                std::process::Command::new("ip")
                    .args(["-4", "-n", &router_ns, "route", "show", "10.3.0.10"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default()
            };
            let mut changes = Vec::new();
            let mut last = read();
            let mut previous_look = origin.elapsed();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let look = origin.elapsed();
                let hops = read();
                if hops != last {
                    changes.push((previous_look, origin.elapsed()));
                    last = hops;
                }
                previous_look = look;
                std::thread::sleep(Duration::from_millis(2));
            }
            changes
        })
    };
    let mut phases = Vec::new();
    for i in 1..=3 {
        phases.push(format!("n{i} stopping at {:?}", origin.elapsed()));
        rig.agents[i - 1].stop();
        phases.push(format!("n{i} stopped at {:?}", origin.elapsed()));
        rig.agents[i - 1] = Agent::start(&rig.lab, i);
        rig.learned("10.3.0.10/32", &[1, 2, 3], Duration::from_secs(60));
        phases.push(format!("n{i} back at {:?}", origin.elapsed()));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = probe.join().expect("probe");
    let changes = watcher.join().expect("route watcher");
    let (rehashed, failed): (Vec<_>, Vec<_>) = failed.into_iter().partition(|(from, to, _)| {
        changes
            .iter()
            .any(|(after, before)| after <= to && before >= from)
    });
    eprintln!(
        "rolling restart: {ok} connections; {} failed, {} more in flight while the router          changed its paths; {} path changes",
        failed.len(),
        rehashed.len(),
        changes.len()
    );
    assert!(ok > 50, "only {ok} connections");
    assert!(
        changes.len() >= 6,
        "each restart withdraws and re-adds a path: {changes:?}"
    );
    assert!(
        failed.is_empty(),
        "{} failed: {:?}\nphases: {phases:?}\nroute changes: {changes:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(rehashed.len() <= 2, "{rehashed:?}");
}

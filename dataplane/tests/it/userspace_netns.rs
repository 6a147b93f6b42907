//! The userspace backend on a real node, in network namespaces the tests create: node 1 runs the
//! whole proxy loop (in-memory API server, watch loop, `UserspaceProxy` with capture rules,
//! interface-address follower — what `kube-lb proxy --mode userspace` runs) as a child process
//! inside its namespace; clients are a pod on node 1, node 2, a LAN client and node 1 itself.
//!
//! The child is this test binary again (`node_agent`, ignored in normal runs): it reads commands
//! on stdin (`apply JSON`, `delete-service NAME`, `delete-endpoints NAME`) and answers `AGENT ok`;
//! SIGTERM stops it the way the CLI stops.

#![cfg(feature = "watch")]

use crate::support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::Api;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::node_addresses::{self, AddressSource};
use kube_lb_dataplane::testing::{node, service, slice};
use kube_lb_dataplane::userspace::capture::CaptureConfig;
use kube_lb_dataplane::userspace::{UserspaceConfig, UserspaceProxy};
use kube_lb_dataplane::watch::{self, Dataplane};
use support::{Lab, Outcome, SERVICE_RANGES_V6, eventually, names, node_ip, node_ip6, set};

const TABLE: &str = "kube-lb-userspace";

/// The node proxy running in a node namespace.
struct Agent {
    /// Address of the agent's API server (a socket of the node namespace that is not the
    /// proxy's).
    api: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Agent {
    /// Starts the proxy of node 1 in `ns`; `cidrs` is `--nodeport-addresses`.
    fn start(ns: &str, cidrs: &str) -> Agent {
        let exe = std::env::current_exe().expect("test binary");
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args([
                "--exact",
                "userspace_netns::node_agent",
                "--ignored",
                "--nocapture",
            ])
            .env("KLB_AGENT", "1")
            .env("KLB_AGENT_CIDRS", cidrs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start agent");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut agent = Agent {
            api: String::new(),
            child,
            stdin,
            stdout,
        };
        let ready = agent.expect("AGENT ready");
        agent.api = ready
            .split_whitespace()
            .last()
            .unwrap_or_default()
            .to_owned();
        agent
    }

    /// Reads the agent's output up to the line containing `marker`.
    fn expect(&mut self, marker: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let read = self.stdout.read_line(&mut line).expect("agent output");
            assert!(read > 0, "agent ended before {marker:?}");
            if line.contains(marker) {
                return line.trim().to_owned();
            }
        }
    }

    /// Sockets the proxy listens on (TCP) or has bound (UDP) in the node namespace.
    fn sockets(&self, lab: &Lab) -> String {
        lab.exec("n1", &["ss", "-Hlntu"])
            .lines()
            .filter(|line| !line.contains(&self.api))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn command(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to agent");
        self.stdin.flush().expect("flush");
        self.expect("AGENT ok");
    }

    fn apply(&mut self, object: &impl serde::Serialize) {
        let json = serde_json::to_string(object).expect("json");
        self.command(&format!("apply {json}"));
    }

    /// Sends `signal` and waits for the process to end.
    fn kill(mut self, signal: &str) {
        let pid = self.child.id().to_string();
        support::run(&["kill", signal, &pid]);
        let ended = eventually(Duration::from_secs(20), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        assert!(ended, "agent did not stop on {signal}");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The proxy loop of node 1, run when this binary is started as the agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the other tests inside a node namespace"]
async fn node_agent() {
    if std::env::var_os("KLB_AGENT").is_none() {
        return;
    }
    let cidrs: Vec<IpNet> = std::env::var("KLB_AGENT_CIDRS")
        .unwrap_or_default()
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| c.parse().expect("cidr"))
        .collect();
    // Registered before "ready": a SIGTERM from then on is a clean stop.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    // Dual-stack: IPv6 Services (fd00:96::/112, inside the labs' IPv6 Service range) are valid.
    let server = ApiServer::builder()
        .secondary_service_cidr("fd00:96::/112".parse().expect("cidr"))
        .start()
        .await
        .expect("api server");
    for i in 1..=2 {
        server
            .seed(node(&format!("n{i}"), "za", "r1", &[&node_ip(i)]))
            .expect("seed node");
    }
    let client = server.client().expect("client");
    let addresses = node_addresses::follow(AddressSource::Local, cidrs, Duration::from_millis(200))
        .await
        .expect("interface addresses");
    let (proxy, _health) = support::node_proxy(
        Dataplane::Userspace(UserspaceProxy::new(UserspaceConfig {
            capture: Some(CaptureConfig {
                table: TABLE.into(),
                nft: vec!["nft".into()],
            }),
            workers: std::num::NonZeroUsize::new(2).expect("non-zero"),
            ..UserspaceConfig::default()
        })),
        Duration::from_millis(50),
        Duration::from_secs(1),
    );
    let mut running = tokio::spawn(watch::run_with_addresses(
        client.clone(),
        proxy,
        Some(addresses.subscribe()),
        async move {
            term.recv().await;
        },
    ));
    println!("AGENT ready {}", server.addr());
    // tokio's stdin needs a feature this crate does not enable: a thread forwards the lines.
    let (line_sender, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if line_sender.send(line).is_err() {
                break;
            }
        }
    });
    loop {
        tokio::select! {
            result = &mut running => {
                result.expect("join").expect("proxy loop");
                println!("AGENT stopped");
                return;
            }
            line = lines.recv() => {
                let Some(line) = line else { return };
                let (verb, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
                match verb {
                    "apply" => {
                        server.apply_manifests(rest).expect("apply");
                    }
                    "delete-service" => {
                        Api::<Service>::namespaced(client.clone(), "default")
                            .delete(rest, &Default::default())
                            .await
                            .expect("delete service");
                    }
                    "delete-endpoints" => {
                        Api::<Endpoints>::namespaced(client.clone(), "default")
                            .delete(rest, &Default::default())
                            .await
                            .expect("delete endpoints");
                    }
                    other => panic!("unknown agent command {other:?}"),
                }
                println!("AGENT ok");
            }
        }
    }
}

fn web() -> Service {
    service("default", "web", "10.96.0.10")
        .port("http", "TCP", 80)
        .node_port(30080)
        .port("dns", "UDP", 53)
        .node_port(30053)
        .load_balancer(&["192.0.2.10"])
        .external_ips(&["203.0.113.10"])
        .build()
}

fn web_slice(pods: &[&support::Pod]) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let mut builder = slice("default", "web", "web-1")
        .port("http", "TCP", 8080)
        .port("dns", "UDP", 8080);
    for pod in pods {
        builder = builder.endpoint(&pod.ip, &pod.node);
    }
    builder.build()
}

/// `nft list table` output of the capture table in `ns`, or `None` when it does not exist.
fn capture_table(lab: &Lab, short: &str) -> Option<String> {
    let output = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.ns(short),
            "nft",
            "list",
            "table",
            "inet",
            TABLE,
        ])
        .output()
        .expect("nft");
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Sockets listening (TCP) or bound (UDP) in a namespace.
fn bound_sockets(lab: &Lab, short: &str) -> String {
    lab.exec(short, &["ss", "-Hlntu"])
}

#[test]
fn userspace_captures_every_frontend_kind_for_pods_nodes_and_the_host() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    // Node 2 reaches Service addresses through node 1, like the LAN clients.
    for range in ["10.96.0.0/16", "192.0.2.0/24", "203.0.113.0/24"] {
        lab.route_via("n2", range, 1);
    }
    let mut agent = Agent::start(&lab.ns("n1"), "");
    agent.apply(&web());
    agent.apply(&web_slice(&[&a, &b]));

    let both = set(&["a", "b"]);
    // "pa": a pod on node 1; "n2": another node; "c": a LAN client; "n1": the node itself.
    let clients = ["pa", "n2", "c", "n1"];
    let tcp = ["10.96.0.10:80", "192.0.2.10:80", "203.0.113.10:80"];
    let udp = ["10.96.0.10:53", "192.0.2.10:53", "203.0.113.10:53"];
    for client in clients {
        for addr in tcp.iter().chain(&["10.0.0.11:30080"]) {
            lab.assert_reaches(client, addr, &both, 6, Duration::from_secs(15));
        }
        for addr in udp.iter().chain(&["10.0.0.11:30053"]) {
            lab.assert_udp_reaches(client, addr, Duration::from_secs(10));
        }
    }
    // As the seeds say, the userspace proxy hides the client's address: endpoints see node 1.
    for outcome in lab.tcp("n2", "10.96.0.10:80", 4, 2000) {
        let source = outcome.source_ip().map(str::to_owned);
        assert!(
            matches!(source.as_deref(), Some("10.0.0.11" | "10.244.1.1")),
            "{outcome:?}"
        );
    }

    let table = capture_table(&lab, "n1").expect("capture table exists");
    for element in [
        "10.96.0.10 . tcp . 80 :",
        "192.0.2.10 . udp . 53 :",
        "203.0.113.10 . tcp . 80 :",
    ] {
        assert!(table.contains(element), "{element} missing:\n{table}");
    }

    // The proxy port itself is only reachable through the capture.
    let proxy_port: String = table
        .split("10.96.0.10 . tcp . 80 : ")
        .nth(1)
        .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect())
        .unwrap_or_default();
    assert!(!proxy_port.is_empty(), "{table}");
    assert_eq!(
        lab.tcp("c", &format!("10.0.0.11:{proxy_port}"), 1, 500),
        vec![Outcome::Err("timeout".into())]
    );

    // No endpoints: refused, as in nftables mode (not sent on by the default route).
    agent.apply(&web_slice(&[]));
    assert!(
        eventually(Duration::from_secs(10), || {
            lab.tcp("c", "10.96.0.10:80", 1, 2000) == vec![Outcome::Err("refused".into())]
        }),
        "{:?}",
        lab.tcp("c", "10.96.0.10:80", 1, 2000)
    );
    agent.apply(&web_slice(&[&a, &b]));
    lab.assert_reaches("c", "10.96.0.10:80", &both, 6, Duration::from_secs(10));

    // The Service goes: its capture elements, rejects and sockets go with it.
    agent.command("delete-service web");
    assert!(
        eventually(Duration::from_secs(10), || {
            let table = capture_table(&lab, "n1").unwrap_or_default();
            !table.contains("10.96.0.10") && !table.contains("192.0.2.10")
        }),
        "{:?}",
        capture_table(&lab, "n1")
    );
    assert!(
        eventually(Duration::from_secs(5), || agent.sockets(&lab).is_empty()),
        "sockets left: {}",
        agent.sockets(&lab)
    );

    // SIGTERM: the table goes too.
    agent.apply(&web());
    lab.assert_reaches("pa", "10.96.0.10:80", &both, 6, Duration::from_secs(10));
    agent.kill("-TERM");
    assert_eq!(capture_table(&lab, "n1"), None, "table left after SIGTERM");
    assert_eq!(bound_sockets(&lab, "n1").trim(), "");

    // A crash leaves the table behind; the next start replaces it.
    let mut agent = Agent::start(&lab.ns("n1"), "");
    agent.apply(&web());
    agent.apply(&web_slice(&[&a, &b]));
    lab.assert_reaches("c", "192.0.2.10:80", &both, 6, Duration::from_secs(10));
    agent.kill("-KILL");
    let stale = capture_table(&lab, "n1").expect("a killed proxy leaves its table");
    assert!(stale.contains("10.96.0.10 . tcp . 80"), "{stale}");
    let mut agent = Agent::start(&lab.ns("n1"), "");
    agent.apply(
        &service("default", "other", "10.96.0.30")
            .port("http", "TCP", 80)
            .build(),
    );
    assert!(
        eventually(Duration::from_secs(10), || {
            capture_table(&lab, "n1").is_some_and(|table| {
                !table.contains("10.96.0.10") && table.contains("10.96.0.30 . tcp . 80")
            })
        }),
        "{:?}",
        capture_table(&lab, "n1")
    );
    agent.kill("-TERM");
    assert_eq!(capture_table(&lab, "n1"), None);
}

/// The same on IPv6: an IPv6 Service's ClusterIP, load-balancer IP, external IP and NodePort
/// (on node 1's own IPv6 address) are captured into the proxy for TCP and UDP, from a pod on
/// the node, another node, a LAN client and the node itself; the capture elements go with the
/// Service.
#[test]
fn userspace_captures_ipv6_frontends() {
    require_netns!();
    let mut lab = Lab::dual_stack(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    for range in SERVICE_RANGES_V6 {
        lab.exec(
            "n2",
            &["ip", "-6", "route", "add", range, "via", &node_ip6(1)],
        );
    }
    let mut agent = Agent::start(&lab.ns("n1"), "");
    agent.apply(
        &service("default", "web6", "fd00:96::10")
            .port("http", "TCP", 80)
            .node_port(30081)
            .port("dns", "UDP", 53)
            .node_port(30053)
            .load_balancer(&["2001:db8:10::10"])
            .external_ips(&["2001:db8:20::10"])
            .build(),
    );
    let mut eps = slice("default", "web6", "web6-1")
        .port("http", "TCP", 8080)
        .port("dns", "UDP", 8080);
    for pod in [&a, &b] {
        eps = eps.endpoint(pod.ip6.as_deref().expect("dual-stack pod"), &pod.node);
    }
    let mut eps = eps.build();
    eps.address_type = "IPv6".into();
    agent.apply(&eps);

    let both = set(&["a", "b"]);
    let node_port = format!("[{}]:30081", node_ip6(1));
    let node_port_udp = format!("[{}]:30053", node_ip6(1));
    for client in ["pa", "n2", "c", "n1"] {
        for addr in [
            "[fd00:96::10]:80",
            "[2001:db8:10::10]:80",
            "[2001:db8:20::10]:80",
            node_port.as_str(),
        ] {
            lab.assert_reaches(client, addr, &both, 6, Duration::from_secs(15));
        }
        for addr in [
            "[fd00:96::10]:53",
            "[2001:db8:10::10]:53",
            node_port_udp.as_str(),
        ] {
            lab.assert_udp_reaches(client, addr, Duration::from_secs(10));
        }
    }
    let table = capture_table(&lab, "n1").expect("capture table exists");
    assert!(table.contains("fd00:96::10 . tcp . 80 :"), "{table}");

    agent.command("delete-service web6");
    assert!(
        eventually(Duration::from_secs(10), || {
            let table = capture_table(&lab, "n1").unwrap_or_default();
            !table.contains("fd00:96::10") && !table.contains("2001:db8:10::10")
        }),
        "{:?}",
        capture_table(&lab, "n1")
    );
    agent.kill("-TERM");
    assert_eq!(capture_table(&lab, "n1"), None, "table left after SIGTERM");
}

fn two_subsets(a_ip: &str, b_ip: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": { "namespace": "default", "name": "legacy" },
        "subsets": [
            { "addresses": [{ "ip": a_ip, "nodeName": "n1" }], "ports": [{ "name": "http", "port": 9376, "protocol": "TCP" }] },
            { "addresses": [{ "ip": b_ip, "nodeName": "n2" }], "ports": [{ "name": "http", "port": 9377, "protocol": "TCP" }] }
        ]
    })
}

fn legacy() -> Service {
    service("default", "legacy", "10.96.0.20")
        .port("http", "TCP", 80)
        .no_selector()
        .build()
}

#[test]
fn userspace_endpoints_subsets_keep_their_own_ports() {
    require_netns!();
    let mut lab = Lab::new(2);
    let a = lab.pod("a", 1);
    let b = lab.pod("b", 2);
    let a9376 = support::Server::start(&lab.ns("pa"), "a9376", 9376);
    let _b9377 = support::Server::start(&lab.ns("pb"), "b9377", 9377);
    let mut agent = Agent::start(&lab.ns("n1"), "");
    agent.apply(&legacy());
    agent.apply(&two_subsets(&a.ip, &b.ip));

    let both = set(&["a9376", "b9377"]);
    lab.assert_reaches("c", "10.96.0.20:80", &both, 6, Duration::from_secs(15));
    // a's server stops but stays listed: every connection still succeeds, on b's own port.
    drop(a9376);
    let outcomes = lab.tcp("c", "10.96.0.20:80", 10, 3000);
    let only_b = set(&["b9377"]);
    assert!(
        outcomes.iter().all(|o| o.name().is_some()) && names(&outcomes) == only_b,
        "{outcomes:?}"
    );
    agent.kill("-TERM");
}

#[test]
fn userspace_nodeports_follow_the_node_interface_addresses() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let only_a = set(&["a"]);
    let mut agent = Agent::start(&lab.ns("n1"), "10.0.0.0/24");
    agent.apply(&web());
    agent.apply(&web_slice(&[&a]));
    lab.assert_reaches("c", "10.0.0.11:30080", &only_a, 6, Duration::from_secs(15));
    // Outside --nodeport-addresses: the pod-network address serves no NodePort.
    lab.assert_refused("pa", "10.244.1.1:30080");

    // An address added after start inside the range gains the NodePorts; removed, loses them.
    lab.add_node_address(1, "10.0.0.50/32");
    lab.assert_reaches("c", "10.0.0.50:30080", &only_a, 6, Duration::from_secs(10));
    lab.assert_udp_reaches("c", "10.0.0.50:30053", Duration::from_secs(10));
    lab.exec("n1", &["ip", "addr", "del", "10.0.0.50/32", "dev", "eth0"]);
    assert!(
        eventually(Duration::from_secs(10), || !agent
            .sockets(&lab)
            .contains("10.0.0.50:")),
        "{}",
        agent.sockets(&lab)
    );
    agent.kill("-TERM");

    // The seed's example: 127.0.0.0/8 serves NodePorts on loopback only.
    let mut agent = Agent::start(&lab.ns("n1"), "127.0.0.0/8");
    agent.apply(&web());
    agent.apply(&web_slice(&[&a]));
    lab.assert_reaches("n1", "127.0.0.1:30080", &only_a, 6, Duration::from_secs(15));
    lab.assert_refused("c", "10.0.0.11:30080");
    let sockets = agent.sockets(&lab);
    let nodeport_sockets: Vec<&str> = sockets.lines().filter(|l| l.contains(":300")).collect();
    assert!(
        nodeport_sockets.iter().all(|l| l.contains("127.0.0.1:")),
        "{sockets}"
    );
    agent.kill("-TERM");
}

//! Layer-2 announcement on a real (virtual) LAN, in network namespaces these tests create: a
//! client and three nodes on one bridge, the embedded API server on the bridge's own address,
//! and on every node the agent `kube-lb proxy --mode userspace --l2-announce` runs
//! ([`lab::run_agent`], started as this test binary again inside the node's namespace). The
//! client resolves the load-balancer address by ARP / NDP and connects to a TCP server in a pod
//! through whichever node answers.
//!
//! Root, `ip netns` and `nft` are needed; without them the tests skip loudly, and fail under
//! `CI=true`.

#![cfg(feature = "watch")]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::l2::election;
use kube_lb_dataplane::l2::lab::{self, L2Lab, Pod};
use kube_lb_dataplane::testing::{node, service, slice};

const API_PORT: u16 = 6443;

/// The agent of one node, run when this binary is started inside a node namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "started by the other tests inside a node namespace"]
async fn l2_node_agent() {
    let (Ok(api), Ok(node)) = (
        std::env::var("KLB_L2_AGENT_API"),
        std::env::var("KLB_L2_AGENT_NODE"),
    ) else {
        return;
    };
    lab::run_agent(&api, &node).await.expect("agent");
}

/// One node's agent process; killed when dropped.
struct Agent(Child);

impl Agent {
    fn start(lab: &L2Lab, i: usize) -> Agent {
        let exe = std::env::current_exe().expect("test binary");
        let child = lab
            .node_command(
                i,
                &exe,
                &[
                    "--exact",
                    "l2_netns::l2_node_agent",
                    "--ignored",
                    "--nocapture",
                ],
            )
            .env(
                "KLB_L2_AGENT_API",
                format!("http://{}:{API_PORT}", lab::API_ADDRESS),
            )
            .env("KLB_L2_AGENT_NODE", format!("n{i}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start agent");
        Agent(child)
    }

    /// SIGKILL: no lease release, no clean-up; the node stops forwarding.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The rig: namespaces, the API server on the switch, one agent per node.
struct Rig {
    lab: L2Lab,
    server: Option<kube_lb_apiserver::server::RunningApiServer>,
    runtime: tokio::runtime::Runtime,
    agents: Vec<Agent>,
}

impl Rig {
    fn new(pods: &[(&str, usize)]) -> (Rig, Vec<Pod>) {
        let mut lab = L2Lab::new(3).expect("lab");
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
        let listen: SocketAddr = format!("{}:{API_PORT}", lab::API_ADDRESS)
            .parse()
            .expect("address");
        // The listener is created inside the switch namespace: the nodes reach it over the LAN,
        // so cutting a node's link also cuts it off from the API server.
        let server = lab::in_netns(&lab.ns("sw"), || {
            runtime.block_on(
                ApiServer::builder()
                    .listen(listen)
                    .secondary_service_cidr("fd00:96::/112".parse().expect("cidr"))
                    .start(),
            )
        })
        .expect("setns")
        .expect("api server");
        // The agents' leases live here, as in deploy/base.
        server
            .seed(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": "kube-lb-system"}}))
            .expect("seed namespace");
        for i in 1..=3 {
            server
                .seed(node(&format!("n{i}"), "za", "r1", &[&lab::node_v4(i)]))
                .expect("seed node");
        }
        (
            Rig {
                lab,
                server: Some(server),
                runtime,
                agents: Vec::new(),
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

    fn start_agents(&mut self) {
        self.agents = (1..=3).map(|i| Agent::start(&self.lab, i)).collect();
    }

    /// Every event message on the server.
    fn event_messages(&self) -> Vec<String> {
        let dump = self.server().store().dump();
        dump.objects
            .iter()
            .filter(|(kind, _)| kind.ends_with("/events"))
            .flat_map(|(_, objects)| objects.iter())
            .filter_map(|event| {
                event
                    .get("note")
                    .or_else(|| event.get("message"))
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            })
            .collect()
    }

    /// Waits until node `want` (1-based) alone answers for `ip` (at start-up the first agents
    /// up hold every address until the others' leases appear); returns the node that answered.
    fn announcer(&self, ip: IpAddr, want: usize, ceiling: Duration) -> usize {
        let start = Instant::now();
        loop {
            let answers = self
                .lab
                .who_has(ip, Duration::from_millis(300))
                .expect("probe");
            let nodes: Vec<Option<usize>> =
                answers.iter().map(|mac| self.lab.node_of(*mac)).collect();
            if nodes == [Some(want)] || start.elapsed() > ceiling {
                assert!(
                    nodes.len() <= 1,
                    "{ip}: answered by several nodes {nodes:?}"
                );
                return nodes.first().copied().flatten().unwrap_or(0);
            }
        }
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

fn nodes(names: &[usize]) -> BTreeSet<String> {
    names.iter().map(|i| format!("n{i}")).collect()
}

fn expected(ip: IpAddr, live: &[usize]) -> usize {
    let winner = election::winner(&nodes(live), ip).expect("a candidate");
    winner.trim_start_matches('n').parse().expect("node number")
}

fn lb_service(name: &str, cluster_ip: &str, ip: &str) -> Service {
    service("default", name, cluster_ip)
        .port("http", "TCP", 80)
        .load_balancer(&[ip])
        .build()
}

fn pods_slice(name: &str, pods: &[&Pod], v6: bool) -> EndpointSlice {
    let mut builder = slice("default", name, &format!("{name}-1")).port("http", "TCP", 8080);
    for pod in pods {
        builder = builder.endpoint(if v6 { &pod.v6 } else { &pod.v4 }, &pod.node);
    }
    let mut slice = builder.build();
    if v6 {
        slice.address_type = "IPv6".into();
    }
    slice
}

fn reaches(rig: &Rig, addr: SocketAddr, ceiling: Duration) -> Result<String, String> {
    let start = Instant::now();
    loop {
        match rig.lab.connect(addr, Duration::from_millis(500)) {
            Ok(name) => return Ok(name),
            Err(error) if start.elapsed() > ceiling => return Err(error),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Whether connections to `addr` come to be answered by pod `name` within `ceiling`.
fn served_by(rig: &Rig, addr: SocketAddr, name: &str, ceiling: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < ceiling {
        if rig.lab.connect(addr, Duration::from_millis(500)).as_deref() == Ok(name) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

#[test]
fn l2_ipv4_one_node_answers_arp_and_another_takes_over_when_its_agent_is_killed() {
    require_netns!();
    let (mut rig, pods) = Rig::new(&[("x", 1), ("y", 2), ("z", 3)]);
    let web_ip: IpAddr = "10.0.0.50".parse().expect("ip");
    let local_ip: IpAddr = "10.0.0.60".parse().expect("ip");
    rig.seed(lb_service("web", "10.96.0.10", "10.0.0.50"));
    rig.seed(pods_slice("web", &pods.iter().collect::<Vec<_>>(), false));
    // externalTrafficPolicy: Local with its only ready endpoint on n2: only n2 may announce.
    let mut local = lb_service("local", "10.96.0.11", "10.0.0.60");
    if let Some(spec) = local.spec.as_mut() {
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(31060);
    }
    rig.seed(local);
    rig.seed(pods_slice("local", &[&pods[1]], false));
    rig.start_agents();

    let web = SocketAddr::new(web_ip, 80);
    let holder = expected(web_ip, &[1, 2, 3]);
    assert_eq!(
        rig.announcer(web_ip, holder, Duration::from_secs(30)),
        holder
    );
    let first = reaches(&rig, web, Duration::from_secs(10)).expect("web reachable via ARP");
    assert!(["x", "y", "z"].contains(&first.as_str()), "{first}");
    assert_eq!(
        rig.lab.client_neighbour(web_ip),
        Some(rig.lab.node_mac(holder).expect("mac")),
        "the client resolved the address to the announcing node"
    );
    assert_eq!(rig.announcer(local_ip, 2, Duration::from_secs(10)), 2);
    assert_eq!(
        reaches(&rig, SocketAddr::new(local_ip, 80), Duration::from_secs(10)),
        Ok("y".into())
    );
    // Nobody answers for an address no Service has, nor for one outside every Service.
    for unassigned in ["10.0.0.77", "10.0.0.51"] {
        let answers = rig
            .lab
            .who_has(unassigned.parse().expect("ip"), Duration::from_millis(500))
            .expect("probe");
        assert!(answers.is_empty(), "{unassigned} answered by {answers:?}");
    }
    let announced = format!("10.0.0.50 is announced by node n{holder}");
    assert!(
        rig.event_messages()
            .iter()
            .any(|m| m.starts_with(&announced)),
        "no event {announced:?}: {:?}",
        rig.event_messages()
    );

    // The announcing node's proxy dies (SIGKILL: no lease release, forwarding stops).
    rig.agents[holder - 1].kill();
    let killed = Instant::now();
    let survivors: Vec<usize> = (1..=3).filter(|i| *i != holder).collect();
    let next = expected(web_ip, &survivors);
    let took = lab::first_success(
        &rig.lab,
        web,
        killed,
        Duration::from_millis(200),
        Duration::from_secs(10),
    )
    .expect("a connection succeeds after failover");
    eprintln!("failover after the agent was killed: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(rig.announcer(web_ip, next, Duration::from_secs(5)), next);
    assert_eq!(
        rig.lab.client_neighbour(web_ip),
        Some(rig.lab.node_mac(next).expect("mac")),
        "gratuitous ARP moved the client's cache to n{next}"
    );
    let moved = format!("10.0.0.50 is announced by node n{next}");
    assert!(
        rig.event_messages().iter().any(|m| m.starts_with(&moved)),
        "{:?}",
        rig.event_messages()
    );
}

#[test]
fn l2_ipv4_another_node_takes_over_when_the_announcing_node_link_is_cut() {
    require_netns!();
    let (mut rig, pods) = Rig::new(&[("x", 1), ("y", 2), ("z", 3)]);
    let ip: IpAddr = "10.0.0.70".parse().expect("ip");
    // Local traffic policy with a pod on every node: whichever node announces serves it alone.
    let mut web = lb_service("web", "10.96.0.12", "10.0.0.70");
    if let Some(spec) = web.spec.as_mut() {
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(31070);
    }
    rig.seed(web);
    rig.seed(pods_slice("web", &pods.iter().collect::<Vec<_>>(), false));
    rig.start_agents();
    let addr = SocketAddr::new(ip, 80);
    let holder = expected(ip, &[1, 2, 3]);
    assert_eq!(rig.announcer(ip, holder, Duration::from_secs(30)), holder);
    let first = reaches(&rig, addr, Duration::from_secs(10)).expect("reachable");
    assert_eq!(
        first,
        pods[holder - 1].name,
        "served by the announcing node's pod"
    );

    rig.lab.cut_link(holder).expect("cut");
    let cut = Instant::now();
    let survivors: Vec<usize> = (1..=3).filter(|i| *i != holder).collect();
    let next = expected(ip, &survivors);
    let took = lab::first_success(
        &rig.lab,
        addr,
        cut,
        Duration::from_millis(200),
        Duration::from_secs(10),
    )
    .expect("a connection succeeds after the link was cut");
    eprintln!("failover after the link was cut: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(rig.announcer(ip, next, Duration::from_secs(5)), next);
    assert!(
        served_by(&rig, addr, &pods[next - 1].name, Duration::from_secs(5)),
        "not served by n{next}'s pod"
    );
    assert_eq!(
        rig.lab.client_neighbour(ip),
        Some(rig.lab.node_mac(next).expect("mac"))
    );

    // The cut-off node stopped answering too (it lost the API server, so its own lease
    // lapsed): when the link returns it takes its address back cleanly, one answer at a time.
    rig.lab.restore_link(holder).expect("restore");
    assert_eq!(rig.announcer(ip, holder, Duration::from_secs(10)), holder);
    assert!(
        served_by(&rig, addr, &pods[holder - 1].name, Duration::from_secs(10)),
        "not served by n{holder}'s pod after its link returned"
    );
}

#[test]
fn l2_ipv6_one_node_answers_ndp_and_another_takes_over_when_its_agent_is_killed() {
    require_netns!();
    let (mut rig, pods) = Rig::new(&[("x", 1), ("y", 2), ("z", 3)]);
    let ip: IpAddr = "fd00::50".parse().expect("ip");
    let mut web = lb_service("web", "fd00:96::10", "fd00::50");
    if let Some(spec) = web.spec.as_mut() {
        spec.ip_families = Some(vec!["IPv6".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
    }
    rig.seed(web);
    rig.seed(pods_slice("web", &pods.iter().collect::<Vec<_>>(), true));
    rig.start_agents();
    let addr = SocketAddr::new(ip, 80);
    let holder = expected(ip, &[1, 2, 3]);
    assert_eq!(rig.announcer(ip, holder, Duration::from_secs(30)), holder);
    reaches(&rig, addr, Duration::from_secs(10)).expect("reachable over IPv6");
    assert_eq!(
        rig.lab.client_neighbour(ip),
        Some(rig.lab.node_mac(holder).expect("mac"))
    );
    let answers = rig
        .lab
        .who_has("fd00::77".parse().expect("ip"), Duration::from_millis(500))
        .expect("probe");
    assert!(answers.is_empty(), "fd00::77 answered by {answers:?}");

    rig.agents[holder - 1].kill();
    let killed = Instant::now();
    let survivors: Vec<usize> = (1..=3).filter(|i| *i != holder).collect();
    let next = expected(ip, &survivors);
    let took = lab::first_success(
        &rig.lab,
        addr,
        killed,
        Duration::from_millis(200),
        Duration::from_secs(10),
    )
    .expect("a connection succeeds after failover");
    eprintln!("IPv6 failover after the agent was killed: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(rig.announcer(ip, next, Duration::from_secs(5)), next);
    assert_eq!(
        rig.lab.client_neighbour(ip),
        Some(rig.lab.node_mac(next).expect("mac")),
        "the unsolicited advertisement moved the client's cache to n{next}"
    );
}

//! BGP failover time: from a fault on the node a client's flow goes through to (a) the router
//! dropping that node's path to the Service's prefix and (b) the client's next successful
//! connection on the same flow (same source port, so the router's ECMP hash keeps sending it
//! to the failed node until the path is gone).
//!
//! Rig (`kube_lb_dataplane::bgp::lab`): three nodes each running the real binary
//! (`kube-lb proxy --mode userspace --bgp`) beside FRR (zebra, bgpd, bfdd and
//! `deploy/components/bgp-frr/frr-reloader.sh`), a BIRD 2 router with ECMP, a client behind
//! it, the embedded API server on the switch. The Service is `externalTrafficPolicy: Local`
//! with one pod per node, so the pod that answers names the node the flow went through.
//!
//! Faults, each `TRIALS` times (20; 3 under `CI=true`), with BFD at 300 ms × 3:
//! - `kill`: the node's proxy SIGKILLed (FRR's dead man's switch withdraws its prefixes);
//! - `link`: the node's link to the switch cut (BFD notices);
//! - `freeze`: every process in the node's namespace SIGSTOPped (BFD notices).
//!
//! And once without BFD (`link, no BFD`, 3 trials): the BGP hold timer (3 s) decides.
//!
//! `cargo bench --bench bgp_failover` (root, FRR and BIRD 2). Targets with BFD: median ≤ 1 s,
//! max ≤ 1.5 s for both times; without BFD: the hold time. Without root / FRR / BIRD it
//! skips (and fails under `CI=true`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::bgp::crd::CRDS;
use kube_lb_dataplane::bgp::lab::{self, BgpLab, RouterConfig};
use kube_lb_dataplane::l2::lab::in_netns;
use kube_lb_dataplane::testing::{node, service, slice};

const ADDRESS: &str = "10.3.0.10";
const PREFIX: &str = "10.3.0.10/32";

const CONFIG: &str = r#"
apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata: {name: routed}
spec:
  addresses: ["10.3.0.0/24"]
---
apiVersion: kube-lb.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 300, transmitInterval: 300, detectMultiplier: 3}
---
apiVersion: kube-lb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: routed}
spec:
  ipAddressPools: [routed]
"#;

fn peer(hold: u32, bfd: bool) -> String {
    format!(
        "apiVersion: kube-lb.io/v1alpha1\nkind: BGPPeer\nmetadata: {{name: router}}\nspec:\n  \
         myASN: 64512\n  peerASN: 64500\n  peerAddress: 10.0.0.254\n  holdTime: {hold}s\n  \
         keepaliveTime: 1s\n{}",
        if bfd { "  bfdProfile: fast\n" } else { "" }
    )
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent(rig: &BgpLab, i: usize, kubeconfig: &Path) -> Agent {
    let exe = Path::new(env!("CARGO_BIN_EXE_kube-lb"));
    let frr = rig.frr(i);
    let node_name = format!("n{i}");
    let (conf, vty) = (
        frr.conf_dir.display().to_string(),
        frr.vty_dir.display().to_string(),
    );
    // The agents' logs, for a trial that goes wrong: KUBE_LB_BGP_BENCH_LOGS=<dir>.
    let log = std::env::var_os("KUBE_LB_BGP_BENCH_LOGS")
        .and_then(|dir| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(Path::new(&dir).join(format!("{node_name}.log")))
                .ok()
        })
        .map_or_else(Stdio::null, Stdio::from);
    let child = rig
        .node_command(
            i,
            exe,
            &[
                "proxy",
                "--node-name",
                &node_name,
                "--kubeconfig",
                &kubeconfig.display().to_string(),
                "--mode",
                "userspace",
                "--capture-table",
                lab::CAPTURE_TABLE,
                "--min-sync-period",
                "50ms",
                "--healthz-addr",
                "127.0.0.1:10256",
                "--bgp",
                "--bgp-frr-conf-dir",
                &conf,
                "--bgp-frr-vty-dir",
                &vty,
                "--bgp-metrics-addr",
                "127.0.0.1:10260",
            ],
        )
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start kube-lb proxy");
    Agent(child)
}

/// The rig with its API server, configuration and agents.
struct Bench {
    agents: Vec<Agent>,
    server: Option<kube_lb_apiserver::server::RunningApiServer>,
    runtime: tokio::runtime::Runtime,
    kubeconfig: PathBuf,
    rig: BgpLab,
}

impl Bench {
    fn new(bfd: bool, hold: u32) -> Bench {
        let reloader =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/components/bgp-frr/frr-reloader.sh");
        let router = RouterConfig {
            bfd,
            hold_time: hold,
            ..RouterConfig::default()
        };
        let mut rig = BgpLab::new(3, &router, &reloader).expect("lab");
        let pods: Vec<_> = (1..=3)
            .map(|i| rig.pod(&format!("p{i}"), i, 0).expect("pod"))
            .collect();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let listen: SocketAddr = "10.0.0.1:6443".parse().expect("address");
        let server = in_netns(&rig.ns("sw"), || {
            runtime.block_on(ApiServer::builder().listen(listen).start())
        })
        .expect("setns")
        .expect("api server");
        let kubeconfig =
            std::env::temp_dir().join(format!("kube-lb-bgp-{}.yaml", std::process::id()));
        server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        for crd in CRDS
            .iter()
            .chain([&include_str!("../deploy/base/ippool-crd.yaml")])
        {
            server.apply_manifests(crd).expect("CRD");
        }
        server.apply_manifests(CONFIG).expect("config");
        server.apply_manifests(&peer(hold, bfd)).expect("peer");
        for i in 1..=3 {
            server
                .seed(node(&format!("n{i}"), "za", "r1", &[&lab::node_v4(i)]))
                .expect("node");
        }
        let mut svc = service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .load_balancer(&[ADDRESS])
            .build();
        if let Some(spec) = svc.spec.as_mut() {
            spec.external_traffic_policy = Some("Local".into());
            spec.health_check_node_port = Some(31010);
        }
        server.seed(svc).expect("service");
        let mut endpoints = slice("default", "web", "web-1").port("http", "TCP", 8080);
        for pod in &pods {
            endpoints = endpoints.endpoint(&pod.v4, &pod.node);
        }
        server.seed(endpoints.build()).expect("slice");
        let agents = (1..=3).map(|i| start_agent(&rig, i, &kubeconfig)).collect();
        Bench {
            agents,
            server: Some(server),
            runtime,
            kubeconfig,
            rig,
        }
    }

    /// Waits until the router has the prefix from every node and the flow from `port`
    /// succeeds; the node that flow goes through.
    fn settle(&self, port: u16) -> Option<usize> {
        let all = self
            .rig
            .wait_for(Duration::from_secs(60), |rig| {
                rig.learned_from(PREFIX).unwrap_or_default() == [1, 2, 3]
            })
            .is_some();
        if !all {
            return None;
        }
        // BIRD's table may be ahead of the kernel's: wait for the multipath route to hold all
        // three next hops, since adding one moves flows between paths.
        let three_paths = self
            .rig
            .wait_for(Duration::from_secs(10), |rig| {
                rig.kernel_next_hops(PREFIX) == 3
            })
            .is_some();
        if !three_paths {
            return None;
        }
        let addr = SocketAddr::new(ADDRESS.parse().ok()?, 80);
        let start = Instant::now();
        let mut previous = None;
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(pod) = self
                .rig
                .connect_from(port, addr, Duration::from_millis(300))
            {
                // The same answer twice: the flow's path is settled.
                if previous.as_ref() == Some(&pod) {
                    return pod.trim_start_matches('p').parse().ok();
                }
                previous = Some(pod);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.agents.clear();
        if let Some(server) = self.server.take() {
            self.runtime.block_on(server.shutdown());
        }
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Link,
    Freeze,
}

/// One trial: the times to the router dropping the path and to the next successful
/// connection on the flow, or why it failed.
fn trial(
    bench: &mut Bench,
    fault: Fault,
    port: u16,
    ceiling: Duration,
) -> Result<(usize, Duration, Duration), String> {
    let victim = bench
        .settle(port)
        .ok_or("the rig did not settle (all three paths and the flow)")?;
    let addr = SocketAddr::new(ADDRESS.parse().map_err(|e| format!("{e}"))?, 80);
    match fault {
        Fault::Kill => {
            let _ = bench.agents[victim - 1].0.kill();
        }
        Fault::Link => bench.rig.cut_link(victim).map_err(|e| e.to_string())?,
        Fault::Freeze => bench.rig.freeze(victim).map_err(|e| e.to_string())?,
    }
    let start = Instant::now();
    let (mut withdrawn, mut served) = (None, None);
    while (withdrawn.is_none() || served.is_none()) && start.elapsed() < ceiling {
        if withdrawn.is_none()
            && !bench
                .rig
                .learned_from(PREFIX)
                .unwrap_or_default()
                .contains(&victim)
        {
            withdrawn = Some(start.elapsed());
        }
        if served.is_none()
            && let Ok(pod) = bench
                .rig
                .connect_from(port, addr, Duration::from_millis(100))
            && pod != format!("p{victim}")
        {
            served = Some(start.elapsed());
        }
    }
    // Repair for the next trial.
    match fault {
        Fault::Kill => {
            let _ = bench.agents[victim - 1].0.wait();
            bench.agents[victim - 1] = start_agent(&bench.rig, victim, &bench.kubeconfig);
        }
        Fault::Link => bench.rig.restore_link(victim).map_err(|e| e.to_string())?,
        Fault::Freeze => bench.rig.thaw(victim).map_err(|e| e.to_string())?,
    }
    match (withdrawn, served) {
        (Some(w), Some(s)) => Ok((victim, w, s)),
        (w, s) => Err(format!(
            "n{victim}: within {ceiling:?} withdrawn {w:?}, next connection {s:?}"
        )),
    }
}

/// Median and max.
fn summary(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() - 1])
}

fn main() -> ExitCode {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if let Err(why) = lab::available() {
        eprintln!("bgp_failover: {why}");
        return if ci {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        };
    }
    let trials = if ci { 3 } else { 20 };
    let mut ok = true;
    let mut rows = Vec::new();
    let mut bench = Bench::new(true, 9);
    let mut port = 40000u16;
    for (name, fault) in [
        ("kill", Fault::Kill),
        ("link", Fault::Link),
        ("freeze", Fault::Freeze),
    ] {
        let (mut withdrawals, mut connections) = (Vec::new(), Vec::new());
        for n in 1..=trials {
            port += 1;
            match trial(&mut bench, fault, port, Duration::from_secs(15)) {
                Ok((victim, withdrawn, served)) => {
                    println!(
                        "{name:6} trial {n:2}: n{victim}: path withdrawn after {withdrawn:.2?}, \
                         next connection after {served:.2?}"
                    );
                    withdrawals.push(withdrawn);
                    connections.push(served);
                }
                Err(why) => {
                    println!("{name:6} trial {n:2}: FAILED: {why}");
                    ok = false;
                }
            }
        }
        if withdrawals.is_empty() {
            continue;
        }
        let (wm, wx) = summary(&mut withdrawals);
        let (cm, cx) = summary(&mut connections);
        let met = wm <= Duration::from_secs(1)
            && wx <= Duration::from_millis(1500)
            && cm <= Duration::from_secs(1)
            && cx <= Duration::from_millis(1500);
        ok &= met && withdrawals.len() == trials;
        rows.push(format!(
            "{name:14} {:2} trials: withdrawn median {wm:.2?} max {wx:.2?}; next connection \
             median {cm:.2?} max {cx:.2?}; target median ≤ 1 s, max ≤ 1.5 s: {}",
            withdrawals.len(),
            if met { "met" } else { "MISSED" }
        ));
    }
    drop(bench);

    // Without BFD the hold timer (3 s, BIRD's least) decides.
    let mut bench = Bench::new(false, 3);
    let mut withdrawals = Vec::new();
    for n in 1..=3 {
        port += 1;
        match trial(&mut bench, Fault::Link, port, Duration::from_secs(15)) {
            Ok((victim, withdrawn, served)) => {
                println!(
                    "link, no BFD trial {n}: n{victim}: path withdrawn after {withdrawn:.2?}, \
                     next connection after {served:.2?}"
                );
                withdrawals.push(withdrawn);
            }
            Err(why) => {
                println!("link, no BFD trial {n}: FAILED: {why}");
                ok = false;
            }
        }
    }
    drop(bench);
    if !withdrawals.is_empty() {
        let (wm, wx) = summary(&mut withdrawals);
        let bounded = wx <= Duration::from_secs(4);
        ok &= bounded;
        rows.push(format!(
            "link, no BFD    {} trials: withdrawn median {wm:.2?} max {wx:.2?} (hold time 3 s): {}",
            withdrawals.len(),
            if bounded {
                "as configured"
            } else {
                "LONGER than the hold time"
            }
        ));
    }
    println!(
        "\nbgp_failover (BFD 300 ms × 3, hold 9 s; fault → path withdrawn / next connection):"
    );
    for row in rows {
        println!("  {row}");
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

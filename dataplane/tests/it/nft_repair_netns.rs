//! The proxy repairs its own kernel state (issue 37): with the whole proxy loop programming node
//! 1 of a namespace lab, someone deletes the table, flushes a chain or deletes one map element by
//! hand. The rules must be back within 2 s, traffic through the ClusterIP to a real TCP backend
//! must flow again, `/healthz` must answer 503 in between (seen by polling it every 100 ms) and
//! the repair must be counted in `/metrics`.

#![cfg(feature = "watch")]

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use kube_lb_apiserver::ApiServer;
use kube_lb_dataplane::health::{self, ProxyHealth};
use kube_lb_dataplane::testing::{node, service, slice};
use kube_lb_dataplane::watch;
use support::{Lab, eventually, node_ip, set};

/// The sync period of the proxy under test: the period of its checks, and how long `/healthz`
/// keeps failing after a confirmed repair.
const SYNC_PERIOD: Duration = Duration::from_secs(2);

/// The proxy loop of node 1 with the nftables backend, and its node health server.
struct NodeProxy {
    client: kube::Client,
    health: Arc<ProxyHealth>,
    healthz: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    running: tokio::task::JoinHandle<Result<(), watch::WatchError>>,
    _server: kube_lb_apiserver::RunningApiServer,
}

impl NodeProxy {
    async fn start(lab: &Lab) -> NodeProxy {
        let server = ApiServer::builder().start().await.expect("api server");
        server
            .seed(node("n1", "za", "r1", &[&node_ip(1)]))
            .expect("seed node");
        let client = server.client().expect("client");
        let (proxy, health) = support::node_proxy(
            support::nft_dataplane(&lab.ns("n1")),
            Duration::from_millis(50),
            SYNC_PERIOD,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind health");
        let healthz = listener.local_addr().expect("health address");
        tokio::spawn(health::serve_node_health(listener, health.clone()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(watch::run(client.clone(), proxy, async {
            let _ = stopped.await;
        }));
        NodeProxy {
            client,
            health,
            healthz,
            stop,
            running,
            _server: server,
        }
    }

    async fn create<K>(&self, object: &K)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::<K>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), object)
            .await
            .expect("create");
    }

    /// `kube_lb_dataplane_repairs_total{reason="<reason>"}`, 0 when absent.
    fn repairs(&self, reason: &str) -> u64 {
        let label = format!("kube_lb_dataplane_repairs_total{{reason=\"{reason}\"}} ");
        self.health
            .metrics_text()
            .lines()
            .find_map(|line| line.strip_prefix(&label)?.parse().ok())
            .unwrap_or(0)
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.running.await.expect("join").expect("proxy loop");
    }
}

/// One `GET /healthz`: status code and body.
fn get_healthz(addr: SocketAddr) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// Polls `/healthz` every 100 ms on a thread of its own (as a load balancer's prober does)
/// until dropped; keeps every answer.
struct Prober {
    answers: Arc<Mutex<Vec<(u16, String)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Prober {
    fn start(addr: SocketAddr) -> Prober {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let (answers, stop) = (answers.clone(), stop.clone());
            move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(answer) = get_healthz(addr) {
                        answers.lock().expect("answers").push(answer);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Prober {
            answers,
            stop,
            thread: Some(thread),
        }
    }

    fn answers(&self) -> Vec<(u16, String)> {
        self.answers.lock().expect("answers").clone()
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The kernel state a damage takes away, and how to see it is back.
struct Damage {
    what: &'static str,
    command: &'static [&'static str],
    reason: &'static str,
    /// `nft` arguments listing the damaged object, and what the listing shows once restored.
    list: &'static [&'static str],
    restored: fn(&str) -> bool,
}

const DAMAGES: [Damage; 3] = [
    Damage {
        what: "deleted table",
        command: &["nft", "delete", "table", "ip", "kube-lb"],
        reason: "table_missing",
        list: &["nft", "list", "map", "ip", "kube-lb", "service-groups"],
        restored: |listing| listing.contains("10.96.0.10 . tcp . 80"),
    },
    Damage {
        what: "flushed chain",
        command: &["nft", "flush", "chain", "ip", "kube-lb", "nat-prerouting"],
        reason: "rules_missing",
        list: &["nft", "list", "chain", "ip", "kube-lb", "nat-prerouting"],
        restored: |listing| listing.contains("@service-groups"),
    },
    Damage {
        what: "deleted map element",
        command: &[
            "nft",
            "delete",
            "element",
            "ip",
            "kube-lb",
            "service-groups",
            "{ 10.96.0.10 . tcp . 80 }",
        ],
        reason: "elements_missing",
        list: &["nft", "list", "map", "ip", "kube-lb", "service-groups"],
        restored: |listing| listing.contains("10.96.0.10 . tcp . 80"),
    },
];

/// `nft` output in node 1, or the error text when it fails (a deleted table).
fn try_exec(lab: &Lab, args: &[&str]) -> String {
    let ns = lab.ns("n1");
    let mut full = vec!["ip", "netns", "exec", ns.as_str()];
    full.extend_from_slice(args);
    match std::process::Command::new(full[0])
        .args(&full[1..])
        .output()
    {
        Ok(output) => String::from_utf8_lossy(&output.stdout).into_owned(),
        Err(error) => error.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nft_deleted_flushed_and_missing_rules_are_restored() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let proxy = NodeProxy::start(&lab).await;
    proxy
        .create(
            &service("default", "web", "10.96.0.10")
                .port("http", "TCP", 80)
                .build(),
        )
        .await;
    proxy
        .create(
            &slice("default", "web", "web-1")
                .port("http", "TCP", 8080)
                .endpoint(&a.ip, "n1")
                .build(),
        )
        .await;
    let only_a = set(&["a"]);
    lab.assert_reaches("c", "10.96.0.10:80", &only_a, 6, Duration::from_secs(15));
    let healthz = proxy.healthz;
    assert!(
        eventually(Duration::from_secs(10), || get_healthz(healthz)
            .is_some_and(|(status, _)| status == 200)),
        "/healthz before any damage: {:?}",
        get_healthz(healthz)
    );
    // kube-proxy's families followed what happened: a Service and a slice arrived and were
    // synced, the slice's change reached the rules, /healthz answered 200.
    for (family, at_least) in [
        ("kubeproxy_sync_proxy_rules_service_changes_total", 1),
        ("kubeproxy_sync_proxy_rules_endpoint_changes_total", 1),
        (
            r#"kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"}"#,
            1,
        ),
        (
            r#"kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"}"#,
            1,
        ),
        (r#"kubeproxy_proxy_healthz_total{code="200"}"#, 1),
    ] {
        assert!(
            sample(&proxy.health, family) >= at_least,
            "{family} below {at_least}:\n{}",
            proxy.health.metrics_text()
        );
    }
    assert_eq!(
        sample(
            &proxy.health,
            "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
        ),
        0
    );

    for damage in &DAMAGES {
        let before = proxy.repairs(damage.reason);
        let prober = Prober::start(healthz);
        let damaged_at = Instant::now();
        lab.exec("n1", damage.command);
        // Back within 2 s (polled every 100 ms by `eventually`).
        let restored = eventually(Duration::from_secs(2), || {
            (damage.restored)(&try_exec(&lab, damage.list))
        });
        let took = damaged_at.elapsed();
        assert!(
            restored,
            "{}: not restored within 2 s; the listing shows {}",
            damage.what,
            try_exec(&lab, damage.list)
        );
        eprintln!("{}: restored after {took:?}", damage.what);
        lab.assert_reaches("c", "10.96.0.10:80", &only_a, 6, Duration::from_secs(5));
        assert!(
            eventually(Duration::from_secs(5), || proxy.repairs(damage.reason)
                == before + 1),
            "{}: repairs_total{{reason={}}} stayed {}:\n{}",
            damage.what,
            damage.reason,
            proxy.repairs(damage.reason),
            proxy.health.metrics_text()
        );
        // Failing from the damage until one sync period after the confirmed restore, then 200.
        assert!(
            eventually(SYNC_PERIOD * 4, || prober
                .answers()
                .last()
                .is_some_and(|(status, _)| *status == 200)
                && prober.answers().iter().any(|(status, _)| *status == 503)),
            "{}: /healthz answers {:?}",
            damage.what,
            prober.answers()
        );
        let answers = prober.answers();
        let failing: Vec<&(u16, String)> = answers
            .iter()
            .filter(|(status, _)| *status == 503)
            .collect();
        assert!(
            failing
                .iter()
                .all(|(_, body)| body.contains("nftables rules differ")),
            "{}: a 503 says why: {failing:?}",
            damage.what
        );
        // At 100 ms a poll, one sync period (2 s) of failure is well over ten answers.
        assert!(
            failing.len() >= 10,
            "{}: /healthz failed for only {} polls: {answers:?}",
            damage.what,
            failing.len()
        );
        drop(prober);
    }
    // An intact table is never "repaired": over two more checks the count stays at the three
    // damages.
    let total = |proxy: &NodeProxy| {
        DAMAGES.iter().map(|d| proxy.repairs(d.reason)).sum::<u64>()
            + proxy.repairs("chain_missing")
            + proxy.repairs("changed")
    };
    assert_eq!(total(&proxy), 3, "{}", proxy.health.metrics_text());
    std::thread::sleep(SYNC_PERIOD * 2);
    assert_eq!(total(&proxy), 3, "{}", proxy.health.metrics_text());
    assert_eq!(get_healthz(healthz).map(|(status, _)| status), Some(200));
    proxy.stop().await;
}

/// Services of every shape the renderer has: ClusterIP, NodePort, load balancer with source
/// ranges and externalTrafficPolicy Local, externalIPs, session affinity, UDP, dual-stack
/// endpoints missing (no IPv6 here), a Service without endpoints.
fn every_shape() -> (
    Vec<k8s_openapi::api::core::v1::Service>,
    Vec<k8s_openapi::api::discovery::v1::EndpointSlice>,
) {
    let services = vec![
        service("default", "web", "10.96.0.10")
            .port("http", "TCP", 80)
            .port("dns", "UDP", 53)
            .node_port(30080)
            .build(),
        service("default", "lb", "10.96.0.11")
            .port("http", "TCP", 80)
            .node_port(30081)
            .load_balancer(&["192.0.2.10"])
            .source_ranges(&["10.0.0.0/24", "198.51.100.0/24"])
            .local(32000)
            .build(),
        service("default", "sticky", "10.96.0.12")
            .port("http", "TCP", 80)
            .affinity(60)
            .external_ips(&["203.0.113.5"])
            .build(),
        service("default", "empty", "10.96.0.13")
            .port("http", "TCP", 80)
            .build(),
    ];
    let endpoints = |name: &str, ips: &[(&str, &str)], udp: bool| {
        let mut builder = slice("default", name, &format!("{name}-1")).port("http", "TCP", 8080);
        if udp {
            builder = builder.port("dns", "UDP", 8080);
        }
        for (ip, node) in ips {
            builder = builder.endpoint(ip, node);
        }
        builder.build()
    };
    let slices = vec![
        endpoints(
            "web",
            &[
                ("10.244.1.10", "n1"),
                ("10.244.2.10", "n2"),
                ("10.244.2.11", "n2"),
            ],
            true,
        ),
        endpoints("lb", &[("10.244.1.11", "n1"), ("10.244.2.12", "n2")], false),
        endpoints(
            "sticky",
            &[("10.244.1.12", "n1"), ("10.244.2.13", "n2")],
            false,
        ),
    ];
    (services, slices)
}

/// A freshly written table is found intact, check after check, whatever the scheduler: a
/// difference found in an intact table would restore it every period for nothing. An element
/// replaced by one of another value (same counts) is found by the fingerprint, and restored.
#[tokio::test]
async fn nft_written_tables_verify_clean_and_replaced_values_are_found() {
    use kube_lb_dataplane::maglev::TableSize;
    use kube_lb_dataplane::model::{Index, IndexConfig};
    use kube_lb_dataplane::nft::{Commands, NftBackend, NftConfig, NftScheduler, RepairReason};
    require_netns!();
    let lab = Lab::new(1);
    let (services, slices) = every_shape();
    let mut index = Index::new(IndexConfig {
        node_name: "n1".into(),
        nodeport_cidrs: Vec::new(),
        allow_loopback_endpoints: false,
    });
    for i in 1..=2 {
        index.apply_node(&node(&format!("n{i}"), "za", "r1", &[&node_ip(i)]));
    }
    for object in &services {
        index.apply_service(object);
    }
    for object in &slices {
        index.apply_endpoint_slice(object);
    }
    let snapshot = index.snapshot();
    let schedulers = [
        NftScheduler::Random,
        NftScheduler::RoundRobin,
        NftScheduler::SourceHash,
        NftScheduler::Maglev(TableSize::default()),
    ];
    for scheduler in schedulers {
        let config = NftConfig {
            scheduler,
            cluster_cidrs: vec!["10.244.0.0/16".parse().expect("cidr")],
            ..NftConfig::default()
        };
        let mut backend = NftBackend::new(config, Commands::in_netns(&lab.ns("n1")));
        backend.sync(&snapshot).await.expect("sync");
        for check in ["first", "second"] {
            let findings = backend.verify().await.expect("verify");
            assert!(
                findings.is_empty(),
                "{scheduler:?}, {check} check: {findings:?}"
            );
        }
        let chains = backend.verify_chains().await.expect("chain check");
        assert!(chains.is_empty(), "{scheduler:?}: {chains:?}");
    }

    // Same count, another value: the mark of web's frontend points at lb's group.
    let listing = lab.exec(
        "n1",
        &["nft", "list", "map", "ip", "kube-lb", "service-groups"],
    );
    let mark = |frontend: &str| {
        listing
            .split(frontend)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().nth(1))
            .map(|mark| mark.trim_end_matches(',').to_owned())
            .unwrap_or_else(|| panic!("{frontend} in {listing}"))
    };
    let other = mark("10.96.0.11 . tcp . 80");
    let mut backend = NftBackend::new(NftConfig::default(), Commands::in_netns(&lab.ns("n1")));
    backend.sync(&snapshot).await.expect("sync");
    assert!(backend.verify().await.expect("verify").is_empty());
    let replace = format!(
        "delete element ip kube-lb service-groups {{ 10.96.0.10 . tcp . 80 }}\n\
         add element ip kube-lb service-groups {{ 10.96.0.10 . tcp . 80 : {other} }}\n"
    );
    let ns = lab.ns("n1");
    let mut nft = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("nft");
    nft.stdin
        .take()
        .expect("stdin")
        .write_all(replace.as_bytes())
        .expect("write");
    assert!(nft.wait().expect("nft").success());
    assert!(
        backend
            .verify_chains()
            .await
            .expect("chain check")
            .is_empty(),
        "the chain check does not see elements"
    );
    let findings = backend.verify().await.expect("verify");
    assert_eq!(
        findings.iter().map(|f| f.reason).collect::<Vec<_>>(),
        [RepairReason::Changed],
        "{findings:?}"
    );
    backend
        .restore(&[kube_lb_dataplane::nft::Family::V4])
        .await
        .expect("restore");
    assert!(backend.verify().await.expect("verify").is_empty());
    // The cheap periodic check sees a deleted table.
    lab.exec("n1", &["nft", "delete", "table", "ip", "kube-lb"]);
    let chains = backend.verify_chains().await.expect("chain check");
    assert_eq!(
        chains.iter().map(|f| f.reason).collect::<Vec<_>>(),
        [RepairReason::TableMissing],
        "{chains:?}"
    );
    backend
        .restore(&[kube_lb_dataplane::nft::Family::V4])
        .await
        .expect("restore");
    assert!(
        lab.exec(
            "n1",
            &["nft", "list", "map", "ip", "kube-lb", "service-groups"]
        )
        .contains(&format!(
            "10.96.0.10 . tcp . 80 : {}",
            mark("10.96.0.10 . tcp . 80")
        )),
    );
}

/// The unlabelled sample `name` of the proxy's metrics, 0 when absent.
fn sample(health: &ProxyHealth, name: &str) -> u64 {
    let prefix = format!("{name} ");
    health
        .metrics_text()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

fn repair_failures(health: &ProxyHealth) -> u64 {
    sample(health, "kube_lb_dataplane_repair_failures_total")
}

/// A kernel that refuses the restored rules keeps `/healthz` failing, saying so: here another
/// process replaced the table by one it owns (`flags owner`), which nobody else may change.
/// Once that process is gone (its table with it), the proxy recreates its rules from the
/// Services and health returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nft_a_refused_restore_keeps_healthz_failing() {
    require_netns!();
    let mut lab = Lab::new(1);
    let a = lab.pod("a", 1);
    let proxy = NodeProxy::start(&lab).await;
    proxy
        .create(
            &service("default", "web", "10.96.0.10")
                .port("http", "TCP", 80)
                .build(),
        )
        .await;
    proxy
        .create(
            &slice("default", "web", "web-1")
                .port("http", "TCP", 8080)
                .endpoint(&a.ip, "n1")
                .build(),
        )
        .await;
    let only_a = set(&["a"]);
    lab.assert_reaches("c", "10.96.0.10:80", &only_a, 6, Duration::from_secs(15));
    let healthz = proxy.healthz;
    assert!(eventually(Duration::from_secs(10), || get_healthz(healthz)
        .is_some_and(|(status, _)| status == 200)));

    let ns = lab.ns("n1");
    let mut owner = std::process::Command::new("ip")
        .args(["netns", "exec", &ns, "nft", "-i"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("nft -i");
    let mut stdin = owner.stdin.take().expect("stdin");
    stdin
        .write_all(b"delete table ip kube-lb\nadd table ip kube-lb { flags owner; }\n")
        .expect("write");
    stdin.flush().expect("flush");
    let refused = |answer: &Option<(u16, String)>| {
        answer
            .as_ref()
            .is_some_and(|(status, body)| *status == 503 && body.contains("refused the restore"))
    };
    assert!(
        eventually(Duration::from_secs(2), || refused(&get_healthz(healthz))),
        "/healthz: {:?}",
        get_healthz(healthz)
    );
    assert!(repair_failures(&proxy.health) >= 1);
    // It stays so while the proxy retries, once per sync period, recreating its rules from
    // the Services (refused too: a sync error).
    let prober = Prober::start(healthz);
    assert!(
        eventually(SYNC_PERIOD * 3, || sample(
            &proxy.health,
            "kube_lb_proxy_sync_errors_total"
        ) >= 1),
        "{}",
        proxy.health.metrics_text()
    );
    let answers = prober.answers();
    drop(prober);
    assert!(
        !answers.is_empty() && answers.iter().all(|(status, _)| *status == 503),
        "{answers:?}"
    );

    drop(stdin);
    let _ = owner.kill();
    let _ = owner.wait();
    lab.assert_reaches("c", "10.96.0.10:80", &only_a, 6, SYNC_PERIOD * 3);
    assert!(
        eventually(SYNC_PERIOD * 4, || get_healthz(healthz)
            .is_some_and(|(status, _)| status == 200)),
        "/healthz: {:?}",
        get_healthz(healthz)
    );
    proxy.stop().await;
}

/// The userspace mode's capture table is checked and restored the same way: a deleted element
/// or a deleted table is found and written back as it was.
#[tokio::test]
async fn userspace_capture_table_is_checked_and_restored() {
    use kube_lb_dataplane::model::Protocol;
    use kube_lb_dataplane::nft::RepairReason;
    use kube_lb_dataplane::userspace::Frontend;
    use kube_lb_dataplane::userspace::capture::{Capture, CaptureConfig, CaptureState};
    require_netns!();
    let lab = Lab::new(1);
    let ns = lab.ns("n1");
    let mut capture = Capture::new(CaptureConfig {
        table: "kube-lb-userspace".into(),
        nft: ["ip", "netns", "exec", &ns, "nft"]
            .map(String::from)
            .to_vec(),
    });
    let frontend = |addr: &str, protocol| Frontend {
        protocol,
        addr: addr.parse().expect("address"),
    };
    let mut state = CaptureState::default();
    state
        .redirects
        .insert(frontend("10.96.0.10:80", Protocol::Tcp), 40001);
    state
        .redirects
        .insert(frontend("[fd00:96::10]:53", Protocol::Udp), 40002);
    state
        .rejects
        .insert(frontend("10.96.0.11:80", Protocol::Tcp));
    capture.sync(&state).await.expect("capture sync");
    for check in ["first", "second"] {
        assert_eq!(
            capture.verify().await.expect("verify"),
            None,
            "{check} check"
        );
    }
    let damages: [(&[&str], RepairReason); 3] = [
        (
            &[
                "nft",
                "delete",
                "element",
                "inet",
                "kube-lb-userspace",
                "redirects-v4",
                "{ 10.96.0.10 . tcp . 80 }",
            ],
            RepairReason::ElementsMissing,
        ),
        (
            &[
                "nft",
                "flush",
                "chain",
                "inet",
                "kube-lb-userspace",
                "prerouting",
            ],
            RepairReason::RulesMissing,
        ),
        (
            &["nft", "delete", "table", "inet", "kube-lb-userspace"],
            RepairReason::TableMissing,
        ),
    ];
    for (command, reason) in damages {
        lab.exec("n1", command);
        let finding = capture
            .verify()
            .await
            .expect("verify")
            .expect("a difference");
        assert_eq!(finding.reason, reason, "{command:?}: {finding:?}");
        capture.restore().await.expect("restore");
        assert_eq!(capture.verify().await.expect("verify"), None, "{command:?}");
        let table = lab.exec("n1", &["nft", "list", "table", "inet", "kube-lb-userspace"]);
        assert!(table.contains("10.96.0.10 . tcp . 80 : 40001"), "{table}");
    }
}

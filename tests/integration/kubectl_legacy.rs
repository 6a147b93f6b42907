//! Debian's kubectl 1.20 (which needs `/openapi/v2` in protobuf form to `apply`) and the
//! installed kubectl 1.32 against the two commands that ship the embedded API server,
//! `kube-lb apiserver` and `kube-lb up`: apply, get, describe, a second apply that removes a
//! port, an unchanged re-apply, delete. kubectl 1.20 comes from scripts/setup-tools.sh.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const CEILING: Duration = Duration::from_secs(30);

/// kubectl 1.20: `$KUBE_LB_KUBECTL_1_20`, else where scripts/setup-tools.sh unpacks it.
fn kubectl_1_20() -> PathBuf {
    std::env::var_os("KUBE_LB_KUBECTL_1_20").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".tools/kubectl-1.20/usr/bin/kubectl"),
        PathBuf::from,
    )
}

/// kubectl 1.20 as [`require`] finds it.
fn kubectl_1_20_or_skip() -> Option<PathBuf> {
    require(kubectl_1_20(), "run scripts/setup-tools.sh")
}

/// The installed kubectl (1.32) as [`require`] finds it.
fn installed_kubectl_or_skip() -> Option<PathBuf> {
    require(PathBuf::from("/usr/bin/kubectl"), "install kubectl")
}

/// Runs `then` with kubectl `binary` pointed at what `serve` starts; nothing when the binary
/// is missing ([`require`] has said so, or failed the test under CI).
fn with_kubectl(
    binary: Option<PathBuf>,
    serve: impl FnOnce() -> Running,
    then: impl FnOnce(&Kubectl<'_>),
) {
    let Some(binary) = binary else {
        return;
    };
    let running = serve();
    then(&Kubectl {
        binary: &binary,
        running: &running,
    });
}

/// The binary, or `None` (a loud skip) outside CI; in CI a missing tool fails the test.
pub(crate) fn require(path: PathBuf, how: &str) -> Option<PathBuf> {
    if path.is_file() {
        return Some(path);
    }
    let message = format!("{} not found; {how}", path.display());
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("SKIPPED: {message}");
    None
}

/// A running `kube-lb` subcommand, killed when dropped.
pub(crate) struct Running {
    child: Child,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `kube-lb --log warn <args> --kubeconfig-out <kubeconfig>`, its stdout read line by
/// line (on a thread of its own) into the returned channel.
pub(crate) fn spawn_reading_stdout(
    args: &[&str],
    kubeconfig: &Path,
) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["--log", "warn"])
        .args(args)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Starts `kube-lb <args> --kubeconfig-out …` and waits until it printed the kubeconfig line
/// (written before it is printed).
pub(crate) fn start(args: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (child, rx) = spawn_reading_stdout(args, &kubeconfig);
    let running = Running {
        child,
        kubeconfig,
        dir,
    };
    let deadline = Instant::now() + CEILING;
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("kube-lb {args:?} printed no kubeconfig line in time"));
        if line.starts_with("kubeconfig:") {
            return running;
        }
    }
}

/// kubectl `binary` pointed at `running` (its kubeconfig, a private discovery cache).
pub(crate) struct Kubectl<'a> {
    pub(crate) binary: &'a Path,
    pub(crate) running: &'a Running,
}

impl Kubectl<'_> {
    pub(crate) fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write as _;
        let mut child = Command::new(self.binary)
            .env("KUBECONFIG", &self.running.kubeconfig)
            // A private discovery cache per server and version.
            .env("HOME", self.running.dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--request-timeout=20s")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    }

    pub(crate) fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{} {args:?} failed ({}):\nstdout: {stdout}\nstderr: {}",
            self.binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn service(&self) -> Value {
        serde_json::from_str(&self.ok(&["get", "svc", "web", "-o", "json"], None)).unwrap()
    }
}

const WEB_V1: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
  annotations:
    example.com/owner: team-a
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: https
    port: 443
    targetPort: 8443
"#;

/// Drops the https port and the annotation, changes a target port, adds a label.
const WEB_V2: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
    tier: front
spec:
  type: LoadBalancer
  selector:
    app: web
  ports:
  - name: http
    port: 80
    targetPort: 9090
"#;

/// The cycle a user runs; the second apply is a strategic merge patch that removes a port,
/// which kubectl computes right only when it knows `ports` merges by `port`.
fn cycle(kubectl: &Kubectl<'_>) {
    let out = kubectl.ok(&["apply", "-f", "-"], Some(WEB_V1));
    assert!(out.contains("service/web created"), "{out}");
    let svc = kubectl.service();
    assert_eq!(svc["spec"]["ports"].as_array().unwrap().len(), 2, "{svc}");
    let node_port = svc["spec"]["ports"][0]["nodePort"].clone();
    assert!(node_port.is_u64(), "{svc}");

    let table = kubectl.ok(&["get", "svc", "web"], None);
    assert!(
        table.contains("LoadBalancer") && table.contains("80:"),
        "{table}"
    );
    let described = kubectl.ok(&["describe", "svc", "web"], None);
    for want in ["Name:", "web", "LoadBalancer", "443/TCP", "8443/TCP"] {
        assert!(
            described.contains(want),
            "describe lacks {want:?}:\n{described}"
        );
    }

    let out = kubectl.ok(&["apply", "-f", "-"], Some(WEB_V2));
    assert!(out.contains("service/web configured"), "{out}");
    let svc = kubectl.service();
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 9090, "nodePort": node_port}]),
        "the https port is gone, the allocated nodePort kept"
    );
    assert_eq!(
        svc["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );
    assert!(
        svc["metadata"]["annotations"]
            .get("example.com/owner")
            .is_none(),
        "{svc}"
    );
    let out = kubectl.ok(&["apply", "-f", "-"], Some(WEB_V2));
    assert!(out.contains("service/web unchanged"), "{out}");

    let out = kubectl.ok(&["delete", "-f", "-"], Some(WEB_V2));
    assert!(out.contains("service \"web\" deleted"), "{out}");
    let gone = kubectl.run(&["get", "svc", "web"], None);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
}

fn apiserver() -> Running {
    start(&["apiserver", "--listen", "127.0.0.1:0"])
}

/// `kube-lb up` with the userspace dataplane handing out `pool` (each test a pool of its own,
/// so it binds no address another test uses), plus `extra` arguments.
fn up_on(pool: &str, extra: &[&str]) -> Running {
    let mut args = vec![
        "up",
        "--listen",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--dataplane",
        "userspace",
        "--local-pool",
        pool,
    ];
    args.extend_from_slice(extra);
    start(&args)
}

fn up() -> Running {
    up_on("127.20.77.1-127.20.77.6", &[])
}

#[test]
fn kubectl_1_20_against_kube_lb_apiserver() {
    with_kubectl(kubectl_1_20_or_skip(), apiserver, |kubectl| {
        let version = kubectl.ok(&["version", "--client", "--short"], None);
        assert!(version.contains("v1.20."), "{version}");
        cycle(kubectl);
    });
}

#[test]
fn kubectl_1_20_against_kube_lb_up() {
    with_kubectl(kubectl_1_20_or_skip(), up, cycle);
}

#[test]
fn kubectl_1_32_against_kube_lb_apiserver() {
    with_kubectl(installed_kubectl_or_skip(), apiserver, cycle);
}

#[test]
fn kubectl_1_32_against_kube_lb_up() {
    with_kubectl(installed_kubectl_or_skip(), up, cycle);
}

/// Seed 002's Service as the seed writes it (`spec.topologyKeys`, the 1.17–1.21 field), loaded
/// with `-f` by both commands that ship the API server: stored with the field and mirrored into
/// the annotation the controller, lint and the proxy read (one input, one code path); under `up`
/// the controller then gives it an address.
#[test]
fn seed_002_topology_keys_field_through_apiserver_and_up() {
    let Some(binary) = installed_kubectl_or_skip() else {
        return;
    };
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/local/topology.yaml");
    let manifest = manifest.to_str().unwrap();
    let keys = ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "*"];
    let apiserver = start(&["apiserver", "--listen", "127.0.0.1:0", "-f", manifest]);
    let up = up_on("127.20.78.1-127.20.78.6", &["-f", manifest]);
    for (command, running) in [("apiserver", &apiserver), ("up", &up)] {
        let kubectl = Kubectl {
            binary: &binary,
            running,
        };
        let get = || -> Value {
            serde_json::from_str(
                &kubectl.ok(&["get", "svc", "cache", "-n", "demo", "-o", "json"], None),
            )
            .unwrap()
        };
        let service = get();
        assert_eq!(
            service["spec"]["topologyKeys"],
            json!(keys),
            "{command}: {service}"
        );
        assert_eq!(
            service["metadata"]["annotations"]["service.kubernetes.io/topology-keys"],
            json!(keys.join(",")),
            "{command}: {service}"
        );
        if command == "up" {
            let deadline = Instant::now() + CEILING;
            loop {
                let service = get();
                if let Some(ip) = service.pointer("/status/loadBalancer/ingress/0/ip") {
                    assert!(ip.as_str().unwrap().starts_with("127.20.78."), "{service}");
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "up gave the Service no address: {service}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    // The field's rules are kube-apiserver 1.21's: `*` only last.
    let kubectl = Kubectl {
        binary: &binary,
        running: &apiserver,
    };
    let refused = kubectl.run(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": "bad", "namespace": "demo"},
                    "spec": {"ports": [{"port": 80}], "topologyKeys": ["*", "kubernetes.io/hostname"]}})
            .to_string(),
        ),
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("spec.topologyKeys"), "{stderr}");
}

/// `kube-lb apiserver --secondary-service-cidr`: a dual-stack Service gets one cluster IP per
/// family, in its `ipFamilies` order; a single-stack one only the primary family's.
#[test]
fn dual_stack_services_through_kube_lb_apiserver() {
    let dual_stack = || {
        start(&[
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--service-cidr",
            "10.96.0.0/16",
            "--secondary-service-cidr",
            "fd00:10:96::/108",
        ])
    };
    with_kubectl(installed_kubectl_or_skip(), dual_stack, |kubectl| {
        let apply = |name: &str, policy: &str| {
            kubectl.ok(
                &["apply", "-f", "-"],
                Some(
                    &json!({"apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": name, "namespace": "default"},
                            "spec": {"ipFamilyPolicy": policy, "ports": [{"port": 80}]}})
                    .to_string(),
                ),
            );
            let service: Value =
                serde_json::from_str(&kubectl.ok(&["get", "svc", name, "-o", "json"], None))
                    .unwrap();
            service
        };
        let dual = apply("dual", "PreferDualStack");
        assert_eq!(
            dual["spec"]["ipFamilies"],
            json!(["IPv4", "IPv6"]),
            "{dual}"
        );
        let ips = dual["spec"]["clusterIPs"].as_array().unwrap();
        assert_eq!(ips.len(), 2, "{dual}");
        assert!(ips[0].as_str().unwrap().starts_with("10.96."), "{dual}");
        assert!(
            ips[1].as_str().unwrap().starts_with("fd00:10:96::"),
            "{dual}"
        );
        let single = apply("single", "SingleStack");
        assert_eq!(
            single["spec"]["clusterIPs"].as_array().unwrap().len(),
            1,
            "{single}"
        );
    });
}

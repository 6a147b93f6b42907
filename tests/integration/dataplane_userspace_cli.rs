//! `kube-lb proxy --mode userspace` as a process on a node (a network namespace this test
//! creates, with the pod network on one end of a veth pair): its capture rules make a ClusterIP that
//! no interface holds reachable from the node itself, and go when the Service goes and when the
//! proxy gets SIGTERM. The control plane is `kube-lb apiserver` in the same namespace; the
//! "pod" behind the Service is a second `kube-lb apiserver`, used as a plain HTTP server.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KUBE_LB: &str = env!("CARGO_BIN_EXE_kube-lb");
const TABLE: &str = "kube-lb-userspace";

fn can_run() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let tools = ["ip", "nft", "bash"].iter().all(|tool| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let ok = root && tools;
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but this test cannot run: it needs root, ip netns, nft and bash"
        );
        eprintln!("SKIPPED: needs root, ip netns, nft and bash");
    }
    ok
}

fn run(args: &[&str]) -> String {
    let output = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A network namespace, deleted on drop.
struct Netns(String);

impl Netns {
    fn exec(&self, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.0]).args(args);
        command
    }

    /// Runs a bash snippet in the namespace with a time limit; its stdout, or `None` on failure.
    fn bash(&self, script: &str) -> Option<String> {
        stdout_if_success(self.exec(&["timeout", "3", "bash", "-c", script]))
    }

    fn capture_table(&self) -> Option<String> {
        stdout_if_success(self.exec(&["nft", "list", "table", "inet", TABLE]))
    }
}

/// Runs `command`: its stdout if it ran and succeeded, else `None`.
fn stdout_if_success(mut command: Command) -> Option<String> {
    let output = command.output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A child process, killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn eventually(ceiling: Duration, mut check: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < ceiling {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

fn apiserver(ns: &Netns, listen: &str, kubeconfig: &Path, manifest: Option<&Path>) -> Proc {
    let mut command = ns.exec(&[KUBE_LB, "apiserver", "--listen", listen]);
    command.arg("--kubeconfig-out").arg(kubeconfig);
    if let Some(manifest) = manifest {
        command.arg("-f").arg(manifest);
    }
    let child = command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start kube-lb apiserver");
    let server = Proc(child);
    assert!(
        eventually(Duration::from_secs(20), || kubeconfig.exists()),
        "apiserver on {listen} did not start"
    );
    server
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: n1
status:
  addresses:
  - type: InternalIP
    address: 10.244.0.1
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  clusterIP: 10.96.0.10
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: v1
kind: Endpoints
metadata:
  name: web
  namespace: default
subsets:
- addresses:
  - ip: 10.244.0.10
    nodeName: n1
  ports:
  - name: http
    port: 8080
"#;

/// A 200 status line (the server answers in the request's HTTP version, 1.0 here).
fn is_ok(status: &str) -> bool {
    status.starts_with("HTTP/1.") && status.split(' ').nth(1) == Some("200")
}

/// One HTTP/1.0 request over bash's /dev/tcp; the status line.
fn http(ns: &Netns, host: &str, port: u16, method: &str, path: &str) -> Option<String> {
    let script = format!(
        "exec 3<>/dev/tcp/{host}/{port} && printf '{method} {path} HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3"
    );
    ns.bash(&script).map(|line| line.trim().to_owned())
}

#[test]
fn userspace_mode_captures_a_cluster_ip_and_removes_its_rules() {
    if !can_run() {
        return;
    }
    let ns = Netns(format!("klbus{}", std::process::id()));
    run(&["ip", "netns", "add", &ns.0]);
    for args in [
        vec!["link", "set", "lo", "up"],
        // A veth pair, not a dummy interface: some kernels (this project's CI VMs) have no
        // dummy driver.
        vec![
            "link",
            "add",
            "pods",
            "type",
            "veth",
            "peer",
            "name",
            "pods-peer",
        ],
        vec!["link", "set", "pods-peer", "up"],
        vec!["addr", "add", "10.244.0.1/24", "dev", "pods"],
        vec!["addr", "add", "10.244.0.10/24", "dev", "pods"],
        vec!["link", "set", "pods", "up"],
        // Service addresses are not on any interface; like a node's default route, this one
        // only gives them a way out.
        vec!["route", "add", "10.96.0.0/12", "dev", "pods"],
    ] {
        let mut full = vec!["ip", "-n", ns.0.as_str()];
        full.extend(args);
        run(&full);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("objects.yaml");
    std::fs::write(&manifest, OBJECTS).expect("write manifest");
    let control = dir.path().join("control.kubeconfig");
    let _control = apiserver(&ns, "127.0.0.1:16443", &control, Some(&manifest));
    let _pod = apiserver(
        &ns,
        "10.244.0.10:8080",
        &dir.path().join("pod.kubeconfig"),
        None,
    );

    let mut proxy = ns.exec(&[
        KUBE_LB,
        "proxy",
        "--node-name",
        "n1",
        "--mode",
        "userspace",
        "--healthz-addr",
        "127.0.0.1:10256",
        "--min-sync-period",
        "100ms",
    ]);
    proxy.arg("--kubeconfig").arg(&control);
    let proxy = Proc(
        proxy
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kube-lb proxy"),
    );

    // The ClusterIP answers with the pod's HTTP server, through the capture rules.
    assert!(
        eventually(Duration::from_secs(30), || {
            http(&ns, "10.96.0.10", 80, "GET", "/version").is_some_and(|status| is_ok(&status))
        }),
        "ClusterIP not served: {:?}; table: {:?}",
        http(&ns, "10.96.0.10", 80, "GET", "/version"),
        ns.capture_table()
    );
    let table = ns.capture_table().expect("capture table");
    assert!(table.contains("10.96.0.10 . tcp . 80 :"), "{table}");

    // The Service goes: so does its capture element.
    let deleted = http(
        &ns,
        "127.0.0.1",
        16443,
        "DELETE",
        "/api/v1/namespaces/default/services/web",
    );
    assert!(deleted.as_deref().is_some_and(is_ok), "{deleted:?}");
    assert!(
        eventually(Duration::from_secs(10), || ns
            .capture_table()
            .is_some_and(|table| !table.contains("10.96.0.10"))),
        "{:?}",
        ns.capture_table()
    );

    // SIGTERM: the proxy removes its table and exits cleanly.
    let mut proxy = proxy;
    run(&["kill", "-TERM", &proxy.0.id().to_string()]);
    let mut status = None;
    assert!(
        eventually(Duration::from_secs(20), || {
            status = proxy.0.try_wait().ok().flatten();
            status.is_some()
        }),
        "proxy did not stop"
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert_eq!(ns.capture_table(), None, "table left after SIGTERM");
}

//! `kubectl kube-lb …`: the binary symlinked as `kubectl-kube_lb` on `PATH` and run by the
//! installed kubectl (1.32) against `kube-lb up --demo`: `status`, `inspect`, `pools`, `lint`
//! and `plan` show the cluster's load balancers, and an unreachable cluster fails within
//! `--request-timeout` naming the context.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::kubectl_legacy::{require, spawn_reading_stdout};

const CEILING: Duration = Duration::from_secs(30);

/// kubectl from `PATH`; missing, a loud skip outside CI and a failure under `CI=true`.
fn kubectl_or_skip() -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("kubectl"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|candidate| candidate.is_file());
    require(
        found.unwrap_or_else(|| PathBuf::from("kubectl")),
        "install kubectl 1.32",
    )
}

/// A directory holding the `kubectl-kube_lb` symlink to the binary under test.
fn plugin_dir(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kube-lb"), bin.join("kubectl-kube_lb")).unwrap();
    bin
}

/// kubectl with the plugin directory first on `PATH`, the given kubeconfig and a private
/// cache.
struct Kubectl {
    binary: PathBuf,
    path: std::ffi::OsString,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    fn new(binary: PathBuf, plugins: &Path, kubeconfig: &Path, dir: &Path) -> Self {
        let mut paths = vec![plugins.to_path_buf()];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        Self {
            binary,
            path: std::env::join_paths(paths).unwrap(),
            kubeconfig: kubeconfig.to_path_buf(),
            cache: dir.join("cache"),
        }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut child = Command::new(&self.binary)
            .args(args)
            .env("PATH", &self.path)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECACHEDIR", &self.cache)
            .env_remove("KUBE_LB_CLOUD")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let Some(text) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().unwrap()
    }

    /// stdout of a command that must succeed.
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {:?}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `args` until `done` holds for its stdout (the controller works asynchronously).
    fn until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + CEILING;
        loop {
            let out = self.ok(args, None);
            if done(&out) {
                return out;
            }
            assert!(
                Instant::now() < deadline,
                "kubectl {args:?} never got there:\n{out}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// `kube-lb up`, killed when dropped.
struct Up(Child);

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The whitespace-separated cells of the table line starting with `first`.
fn row<'a>(table: &'a str, first: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(first))
        .unwrap_or_else(|| panic!("no row {first} in\n{table}"))
        .split_whitespace()
        .collect()
}

const POOL: &str = "apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata: {name: lab}
spec: {addresses: [\"127.240.0.0/16\"]}
";

const OVERLAPPING: &str = "apiVersion: kube-lb.io/v1alpha1
kind: IPPool
metadata: {name: spare}
spec: {addresses: [\"127.240.9.0/30\"]}
";

#[test]
fn kubectl_plugin_shows_status_inspect_pools_lint_and_plan_of_kube_lb_up() {
    let Some(binary) = kubectl_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (child, rx) = spawn_reading_stdout(
        &["up", "--demo", "--metrics-addr", "127.0.0.1:0"],
        &kubeconfig,
    );
    let _up = Up(child);
    let deadline = Instant::now() + CEILING;
    let address = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("kube-lb up printed no address in time");
        if line.starts_with("demo/echo ")
            && let Some(url) = line.split("curl http://").nth(1)
        {
            break url.split(':').next().unwrap().to_string();
        }
    };
    let kubectl = Kubectl::new(binary, &plugin_dir(dir.path()), &kubeconfig, dir.path());

    let status = kubectl.until(&["kube-lb", "status"], |out| {
        !out.contains("<pending>") && out.contains("demo/echo-pinned")
    });
    let echo = row(&status, "demo/echo");
    assert_eq!(
        echo[1..],
        [address.as_str(), "local", "True", "Provisioned", "-"],
        "{status}"
    );
    assert_eq!(
        row(&status, "SERVICE")[..3],
        ["SERVICE", "ADDRESS", "PROVIDER"]
    );
    // On bare metal the node's Layer-2 announcer records its takeover as an event (as
    // dataplane/src/l2/announcer.rs writes it): the status names that node.
    kubectl.ok(
        &["apply", "-f", "-"],
        Some(&format!(
            r#"apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: echo.l2-takeover
  namespace: demo
eventTime: "2026-12-04T01:00:00.000000Z"
reportingController: kube-lb-proxy
reportingInstance: node-a
action: Announce
reason: L2Announcing
type: Normal
note: "{address} is announced by node node-a on eth0 (ARP)"
regarding:
  apiVersion: v1
  kind: Service
  namespace: demo
  name: echo
"#
        )),
    );
    let status = kubectl.ok(&["kube-lb", "status"], None);
    assert_eq!(row(&status, "demo/echo")[5], "node-a", "{status}");
    assert_eq!(row(&status, "demo/echo-pinned")[5], "-", "{status}");

    let inspect = kubectl.ok(&["kube-lb", "inspect", "demo/echo"], None);
    assert!(
        inspect.contains(&format!("address: {address}")),
        "{inspect}"
    );
    assert!(
        inspect.contains("  ports:\n  - name: http"),
        "typed spec: {inspect}"
    );
    assert!(
        inspect.contains("condition: kube-lb.io/LoadBalancerReady=True reason=Provisioned"),
        "{inspect}"
    );
    assert!(
        inspect.contains("Normal EnsuredLoadBalancer"),
        "events: {inspect}"
    );
    // The cloud side, through the provider the controller runs (local here): what the
    // Service owns, and a plan with nothing to do.
    assert!(
        inspect.contains(&format!("cloud resources (local):\n  Address {address}\n")),
        "owned resources: {inspect}"
    );
    assert!(
        inspect.contains("plan:\n  demo/echo (ensure): in sync"),
        "plan: {inspect}"
    );
    let missing = kubectl.run(&["kube-lb", "inspect", "demo/nope"], None);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("Service demo/nope not found"));

    assert!(
        kubectl
            .ok(&["kube-lb", "pools"], None)
            .contains("no IPPools")
    );
    kubectl.ok(&["apply", "-f", "-"], Some(POOL));
    // The pool holds the two demo addresses; the controller writes its status shortly after.
    let written = |out: &str, pool: &str| {
        out.lines()
            .any(|l| l.split_whitespace().next() == Some(pool) && !l.contains(" - "))
    };
    let pools = kubectl.until(&["kube-lb", "pools"], |out| written(out, "lab"));
    assert_eq!(
        row(&pools, "lab"),
        ["lab", "65536", "2", "65534", "0", "0", "0", "-"],
        "{pools}"
    );
    // A second pool over part of the first: both report the overlap as a conflict.
    kubectl.ok(&["apply", "-f", "-"], Some(OVERLAPPING));
    let pools = kubectl.until(&["kube-lb", "pools"], |out| {
        out.lines().filter(|l| l.contains("OverlapsPool")).count() == 2
    });
    assert_eq!(row(&pools, "spare")[1], "4", "{pools}");

    let lint = kubectl.ok(&["kube-lb", "lint", "-o", "yaml"], None);
    assert!(
        lint.contains("object: Service demo/echo\nstatus: ok"),
        "{lint}"
    );
    assert!(
        lint.contains("object: Service demo/echo-pinned\nstatus: ok"),
        "{lint}"
    );

    let plan = kubectl.ok(&["kube-lb", "plan"], None);
    assert!(plan.contains("demo/echo (ensure): in sync"), "{plan}");
    assert!(
        plan.contains("No changes: 2 load balancer(s) in sync."),
        "{plan}"
    );
    // The context named explicitly reaches the same cluster.
    let context = kubectl.ok(&["config", "current-context"], None);
    let plan = kubectl.ok(&["kube-lb", "plan", "--context", context.trim()], None);
    assert!(plan.contains("No changes"), "{plan}");
}

#[test]
fn kubectl_plugin_against_an_unreachable_cluster_fails_in_time_naming_the_context() {
    let Some(binary) = kubectl_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Accepts connections (the kernel does) and never answers: only the timeout can end it.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: far-away\n\
             clusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:{port}\", insecure-skip-tls-verify: true}}\n\
             contexts:\n- name: far-away\n  context: {{cluster: c, user: u}}\n\
             users:\n- name: u\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    let kubectl = Kubectl::new(binary, &plugin_dir(dir.path()), &kubeconfig, dir.path());
    for command in [
        ["kube-lb", "status"],
        ["kube-lb", "pools"],
        ["kube-lb", "plan"],
    ] {
        let args = [&command[..], &["--request-timeout", "1s"]].concat();
        let started = Instant::now();
        let out = kubectl.run(&args, None);
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(
            took < Duration::from_secs(8),
            "{args:?} took {took:?}: {stderr}"
        );
        assert!(stderr.contains("context `far-away`"), "{args:?}: {stderr}");
        if command[1] == "plan" {
            // plan's contract: 1 is an error, 2 would claim changes are pending.
            assert_eq!(out.status.code(), Some(1), "{stderr}");
        }
    }
}

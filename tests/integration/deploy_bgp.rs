//! `deploy/components/bgp-frr/` as `overlays/bare-metal` renders it, against the binary: the
//! proxy DaemonSet (in the host's network, so FRR's sessions come from the node's address)
//! runs `kube-lb proxy --bgp` and an `frr` sidecar; the two share `/etc/frr` and
//! `/var/run/frr` as emptyDirs, at the paths the proxy's `--bgp-frr-conf-dir` and
//! `--bgp-frr-vty-dir` default to; the sidecar runs a pinned FRR image, unprivileged, with
//! exactly the capabilities FRR's daemons ask for and resource bounds; its scripts and FRR's
//! own files are the repository's, from one ConfigMap; the proxy declares the BGP metrics
//! port its `--bgp-metrics-addr` defaults to. No other overlay gets any of it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::monitoring::{kubectl, kustomize};

const COMPONENT: &str = "deploy/components/bgp-frr";
/// What the sidecar may add to `drop: [ALL]` (see the component's comments for why each).
const FRR_CAPABILITIES: &[&str] = &["NET_ADMIN", "NET_RAW", "NET_BIND_SERVICE", "SYS_ADMIN"];
/// The files the ConfigMap carries, each the repository's copy.
const FRR_FILES: &[&str] = &["frr-start.sh", "frr-reloader.sh", "daemons", "vtysh.conf"];

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn overlay(name: &str) -> Option<Vec<Value>> {
    let kubectl = kubectl()?;
    Some(kustomize(
        kubectl,
        &repo_file(&format!("deploy/overlays/{name}")),
    ))
}

fn proxy_daemonset(objects: &[Value]) -> &Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "DaemonSet" && o["metadata"]["name"] == "kube-lb-proxy")
        .collect();
    assert_eq!(found.len(), 1, "one DaemonSet kube-lb-proxy");
    found[0]
}

fn containers(daemonset: &Value) -> &Vec<Value> {
    daemonset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
}

fn container<'a>(daemonset: &'a Value, name: &str) -> &'a Value {
    containers(daemonset)
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// `mountPath → volume name` of a container.
fn mounts(container: &Value) -> std::collections::BTreeMap<String, String> {
    container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap().to_string(),
                m["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The default of a `kube-lb proxy` flag, as `--help` prints it (`[default: …]`).
fn proxy_default(help: &str, flag: &str) -> String {
    let start = help
        .lines()
        .position(|l| {
            l.trim_start()
                .split([' ', '='])
                .next()
                .is_some_and(|f| f == flag)
        })
        .unwrap_or_else(|| panic!("kube-lb proxy --help has no {flag}:\n{help}"));
    let text: String = help
        .lines()
        .skip(start)
        .take_while({
            let mut first = true;
            move |l| std::mem::take(&mut first) || !l.trim_start().starts_with("--")
        })
        .collect::<Vec<_>>()
        .join(" ");
    let default = text
        .split("[default: ")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .unwrap_or_else(|| panic!("{flag} has no default in: {text}"));
    default.to_string()
}

#[test]
fn the_bare_metal_overlay_runs_frr_beside_the_proxy_with_minimal_capabilities() {
    let Some(objects) = overlay("bare-metal") else {
        return;
    };
    let daemonset = proxy_daemonset(&objects);
    let pod = &daemonset["spec"]["template"]["spec"];
    // The node's network: bgpd's sessions and the routes' next hop are the node's address.
    assert_eq!(pod["hostNetwork"], true, "{pod}");
    let names: Vec<&str> = containers(daemonset)
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The proxy stays first: the other components' patches address containers/0.
    assert_eq!(names, ["proxy", "frr"]);

    let help = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args(["proxy", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8(help.stdout).unwrap();

    let proxy = container(daemonset, "proxy");
    let args = strings(&proxy["args"]);
    assert_eq!(
        args.iter().filter(|a| **a == "--bgp").count(),
        1,
        "{args:?}"
    );
    // The directories the proxy uses are where the sidecar's are mounted, by default.
    for flag in [
        "--bgp-frr-conf-dir",
        "--bgp-frr-vty-dir",
        "--bgp-metrics-addr",
    ] {
        assert!(
            !args.iter().any(|a| a.starts_with(flag)),
            "{flag} is left at its default: {args:?}"
        );
    }
    let conf_dir = proxy_default(&help, "--bgp-frr-conf-dir");
    let vty_dir = proxy_default(&help, "--bgp-frr-vty-dir");
    let metrics_addr = proxy_default(&help, "--bgp-metrics-addr");
    assert_eq!(
        (conf_dir.as_str(), vty_dir.as_str()),
        ("/etc/frr", "/var/run/frr")
    );

    // The shared directories: the same emptyDir in both containers.
    let frr = container(daemonset, "frr");
    let volumes = pod["volumes"].as_array().expect("volumes");
    let volume = |name: &str| -> &Value {
        volumes
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    for dir in [&conf_dir, &vty_dir] {
        let in_proxy = mounts(proxy).get(dir.as_str()).cloned();
        let in_frr = mounts(frr).get(dir.as_str()).cloned();
        assert!(in_proxy.is_some(), "the proxy does not mount {dir}");
        assert_eq!(
            in_proxy, in_frr,
            "{dir} is not one volume in both containers"
        );
        assert!(
            volume(&in_proxy.unwrap())["emptyDir"].is_object(),
            "{dir} is not an emptyDir"
        );
    }

    // The BGP metrics port, as the flag's default binds it (the pod is in the host's network).
    let port: u64 = metrics_addr.rsplit(':').next().unwrap().parse().unwrap();
    let declared = proxy["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["containerPort"] == port)
        .unwrap_or_else(|| panic!("the proxy declares no port {port}"));
    assert_eq!(declared["hostPort"], port, "{declared}");
    assert_eq!(declared["protocol"], "TCP", "{declared}");

    // The sidecar: a pinned FRR release, unprivileged, exactly FRR's capabilities, bounded.
    let image = frr["image"].as_str().unwrap();
    let tag = image
        .strip_prefix("quay.io/frrouting/frr:")
        .unwrap_or_else(|| panic!("{image} is not FRR's official image"));
    assert!(
        tag.split('.').count() == 3 && tag.split('.').all(|n| n.parse::<u32>().is_ok()),
        "{image}: not pinned to a release"
    );
    let security = &frr["securityContext"];
    assert_ne!(security["privileged"], true, "{security}");
    assert_eq!(security["allowPrivilegeEscalation"], false, "{security}");
    assert_eq!(security["readOnlyRootFilesystem"], true, "{security}");
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    let added: BTreeSet<&str> = strings(&security["capabilities"]["add"])
        .into_iter()
        .collect();
    assert_eq!(added, FRR_CAPABILITIES.iter().copied().collect());
    for bound in ["requests", "limits"] {
        assert!(
            frr["resources"][bound]["memory"].is_string(),
            "frr has no memory {bound}: {}",
            frr["resources"]
        );
    }
    assert!(frr["resources"]["requests"]["cpu"].is_string());
    // The proxy's own privileges are not widened by the component.
    let proxy_added: BTreeSet<&str> = strings(&proxy["securityContext"]["capabilities"]["add"])
        .into_iter()
        .collect();
    assert_eq!(proxy_added, BTreeSet::from(["NET_ADMIN", "NET_RAW"]));

    // The scripts: the repository's files, from one generated ConfigMap, run from its mount.
    let (script_dir, script_volume) = mounts(frr)
        .into_iter()
        .find(|(_, name)| volume(name)["configMap"].is_object())
        .expect("frr mounts a ConfigMap");
    let config_map_name = volume(&script_volume)["configMap"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let config_map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == config_map_name.as_str())
        .unwrap_or_else(|| panic!("no ConfigMap {config_map_name} rendered"));
    assert_eq!(config_map["metadata"]["namespace"], "kube-lb-system");
    let data = config_map["data"].as_object().unwrap();
    let keys: BTreeSet<&str> = data.keys().map(String::as_str).collect();
    assert_eq!(keys, FRR_FILES.iter().copied().collect());
    for file in FRR_FILES {
        let shipped = std::fs::read_to_string(repo_file(&format!("{COMPONENT}/{file}"))).unwrap();
        assert_eq!(data[*file], shipped, "{file} differs from the repository's");
    }
    let command: Vec<&str> = strings(&frr["command"])
        .into_iter()
        .chain(strings(&frr["args"]))
        .collect();
    assert!(
        command.contains(&format!("{script_dir}/frr-start.sh").as_str()),
        "frr does not run the start script: {command:?}"
    );
    assert!(
        data["frr-start.sh"]
            .as_str()
            .unwrap()
            .contains("frr-reloader.sh"),
        "the start script does not hand over to the reloader"
    );
    let daemons = data["daemons"].as_str().unwrap();
    for line in ["bgpd=yes", "bfdd=yes"] {
        assert!(daemons.lines().any(|l| l == line), "daemons lacks {line}");
    }
}

#[test]
fn no_other_overlay_runs_frr_or_the_bgp_speaker() {
    let Some(kubectl) = kubectl() else {
        return;
    };
    let mut checked = 0;
    for entry in std::fs::read_dir(repo_file("deploy/overlays")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name == "bare-metal" {
            continue;
        }
        let objects = kustomize(kubectl, &repo_file(&format!("deploy/overlays/{name}")));
        for object in &objects {
            if object["kind"] == "ConfigMap" {
                let config_map = object["metadata"]["name"].as_str().unwrap();
                assert!(
                    !config_map.starts_with("kube-lb-frr"),
                    "overlays/{name} renders {config_map}"
                );
            }
            if object["kind"] == "DaemonSet" {
                let names: Vec<&str> = containers(object)
                    .iter()
                    .map(|c| c["name"].as_str().unwrap())
                    .collect();
                assert_eq!(names, ["proxy"], "overlays/{name}");
                let args = strings(&object["spec"]["template"]["spec"]["containers"][0]["args"]);
                assert!(
                    !args.iter().any(|a| a.starts_with("--bgp")),
                    "overlays/{name}: {args:?}"
                );
                assert!(
                    object["spec"]["template"]["spec"]["volumes"].is_null(),
                    "overlays/{name} adds volumes to the proxy"
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 7, "only {checked} overlays render the proxy");
}

/// Kills what the sidecar rig started (by the pid files the daemons and watchfrr write, and the
/// reloader the child became) when dropped, so a failed assertion leaves nothing running.
struct Sidecar {
    child: std::process::Child,
    run_dir: PathBuf,
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        // The child's process group: the start script and whatever it left in the foreground
        // (a watchfrr still waiting for its daemons); the daemons detach, by their pid files.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
        for daemon in ["watchfrr", "zebra", "bgpd", "bfdd", "staticd"] {
            let pid = std::fs::read_to_string(self.run_dir.join(format!("{daemon}.pid")));
            if let Some(pid) = pid.ok().and_then(|p| p.trim().parse::<i32>().ok()) {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
}

/// `a,b` → `-all,+a,+b`: setpriv's spelling of a bounding set holding exactly those.
fn bounding_set(capabilities: &[&str]) -> String {
    let mut set = "-all".to_string();
    for capability in capabilities {
        set.push_str(&format!(",+{}", capability.to_ascii_lowercase()));
    }
    set
}

/// The rendered `frr` container, run as the kubelet would on this machine's FRR (the release
/// the image pins): its ConfigMap's files as the mount, two world-writable directories as the
/// emptyDirs bound over `/etc/frr` and `/var/run/frr` in a private mount namespace, a network
/// namespace of its own, root with exactly the container's capabilities and no new privileges.
/// zebra, bgpd and bfdd come up, a configuration handed over the way the proxy does is
/// applied, the daemons' state reads back, and a process with only the proxy container's
/// capabilities can use their VTY sockets; with any one capability fewer, FRR does not start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_frr_sidecar_runs_with_exactly_its_capabilities() {
    if let Err(why) = kube_lb_dataplane::bgp::lab::available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but this test cannot run: {why}"
        );
        eprintln!("SKIPPED: {why}");
        return;
    }
    let Some(objects) = overlay("bare-metal") else {
        return;
    };
    let daemonset = proxy_daemonset(&objects);
    let frr = container(daemonset, "frr");
    let proxy = container(daemonset, "proxy");
    let caps: Vec<&str> = strings(&frr["securityContext"]["capabilities"]["add"]);
    let proxy_caps: Vec<&str> = strings(&proxy["securityContext"]["capabilities"]["add"]);
    let args: Vec<String> = strings(&frr["args"])
        .iter()
        .map(|s| s.to_string())
        .collect();
    let pod = &daemonset["spec"]["template"]["spec"];
    let (script_dir, volume) = mounts(frr)
        .into_iter()
        .find(|(_, name)| {
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == name.as_str() && v["configMap"].is_object())
        })
        .unwrap();
    let config_map_name = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == volume.as_str())
        .unwrap()["configMap"]["name"]
        .clone();
    let data = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == config_map_name)
        .unwrap()["data"]
        .as_object()
        .unwrap()
        .clone();

    let start = |dir: &Path, caps: &[&str]| -> Sidecar {
        use std::os::unix::fs::PermissionsExt;
        let (etc, run, cm) = (dir.join("etc"), dir.join("run"), dir.join("cm"));
        for d in [&etc, &run, &cm] {
            std::fs::create_dir_all(d).unwrap();
        }
        for d in [&etc, &run] {
            // An emptyDir's mode.
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        for (file, text) in &data {
            std::fs::write(cm.join(file), text.as_str().unwrap()).unwrap();
        }
        // The container's args, with the ConfigMap's mount path pointing at the copy.
        let command: Vec<String> = args
            .iter()
            .map(|a| a.replace(&script_dir, &cm.display().to_string()))
            .collect();
        let script = format!(
            "mount --make-rprivate / && mount --bind {etc} /etc/frr && \
             mount --bind {run} /var/run/frr && exec setpriv --bounding-set {set} \
             --inh-caps -all --no-new-privs {command}",
            etc = etc.display(),
            run = run.display(),
            set = bounding_set(caps),
            command = command.join(" "),
        );
        use std::os::unix::process::CommandExt;
        let child = Command::new("unshare")
            .args(["-m", "-n", "sh", "-c", &script])
            .process_group(0)
            .env("FRR_KUBE_LB_DIR", &cm)
            .env("FRR_CONF_DIR", "/etc/frr")
            .env("NODE_NAME", "node-a")
            // A daemon that cannot start fails the start script this fast.
            .env("FRR_START_TIMEOUT", "8")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(dir.join("frr.log")).unwrap())
            .stderr(std::fs::File::create(dir.join("frr.err")).unwrap())
            .spawn()
            .unwrap();
        Sidecar {
            child,
            run_dir: run,
        }
    };
    let log = |dir: &Path| {
        std::fs::read_to_string(dir.join("frr.log")).unwrap_or_default()
            + &std::fs::read_to_string(dir.join("frr.err")).unwrap_or_default()
    };

    // With every capability of the container: up, configured, readable.
    let dir = tempfile::tempdir().unwrap();
    let mut sidecar = start(dir.path(), &caps);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while !log(dir.path()).contains("zebra, bgpd and bfdd are up") {
        if let Some(status) = sidecar.child.try_wait().unwrap() {
            panic!("the frr container exited ({status}):\n{}", log(dir.path()));
        }
        assert!(
            std::time::Instant::now() < deadline,
            "FRR did not come up:\n{}",
            log(dir.path())
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let frr_api = kube_lb_dataplane::bgp::daemon::Frr {
        conf_dir: dir.path().join("etc"),
        vty_dir: dir.path().join("run"),
        reload_timeout: std::time::Duration::from_secs(30),
    };
    let config = [
        "frr defaults datacenter",
        "hostname node-a",
        "log stdout informational",
        "!",
        "router bgp 64512",
        " bgp router-id 192.0.2.10",
        " no bgp default ipv4-unicast",
        " no bgp network import-check",
        " neighbor 192.0.2.1 remote-as 64513",
        " neighbor 192.0.2.1 bfd",
        " address-family ipv4 unicast",
        "  network 203.0.113.10/32",
        "  neighbor 192.0.2.1 activate",
        " exit-address-family",
        "exit",
        "!",
        "",
    ]
    .join("\n");
    frr_api
        .apply(&config, 1)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", log(dir.path())));
    let neighbors = frr_api.neighbors().await.unwrap();
    assert!(
        neighbors.contains_key(&"192.0.2.1".parse().unwrap()),
        "{neighbors:?}"
    );
    // The proxy's view: uid 0 with only its own container's capabilities, on every daemon's
    // socket. bfdd is asked after `enable`: FRR 8.4.4's bfdd has `show bfd peers` in its enable
    // node only (a VTY starts in the view node), so `Frr::bfd_peers` as written gets "Unknown
    // command" from it.
    let probe = r#"
import socket, sys
def ask(daemon, *commands):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1] + "/" + daemon + ".vty")
    for command in commands:
        s.sendall(command.encode() + b"\0")
        answer = b""
        while not (len(answer) >= 4 and answer[-4:-1] == b"\0\0\0"):
            answer += s.recv(65536)
        assert answer[-1] == 0, (daemon, command, answer)
    return answer.decode()
assert "FRRouting" in ask("zebra", "show version")
assert "192.0.2.1" in ask("bgpd", "show bgp neighbors json")
assert "192.0.2.1" in ask("bfdd", "enable", "show bfd peers json")
"#;
    let out = Command::new("setpriv")
        .args(["--bounding-set", &bounding_set(&proxy_caps)])
        .args([
            "--inh-caps",
            "-all",
            "--no-new-privs",
            "python3",
            "-c",
            probe,
        ])
        .arg(dir.path().join("run"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the proxy cannot use the VTY sockets: {out:?}"
    );
    drop(sidecar);

    // One capability fewer: FRR does not come up.
    for missing in &caps {
        let fewer: Vec<&str> = caps.iter().filter(|c| *c != missing).copied().collect();
        let dir = tempfile::tempdir().unwrap();
        let mut sidecar = start(dir.path(), &fewer);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
        let status = loop {
            if let Some(status) = sidecar.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                !log(dir.path()).contains("zebra, bgpd and bfdd are up"),
                "FRR came up without {missing}:\n{}",
                log(dir.path())
            );
            assert!(
                std::time::Instant::now() < deadline,
                "without {missing}, frr-start.sh neither failed nor came up:\n{}",
                log(dir.path())
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert!(!status.success(), "without {missing}: {status}");
        drop(sidecar);
    }
}

//! `kube-lb up --demo`: an address appears, traffic to it reaches the echo backends round
//! robin, and Ctrl-C (SIGINT) shuts everything down cleanly.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CEILING: Duration = Duration::from_secs(30);

fn get(addr: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nhost: demo\r\n\r\n")
        .ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

#[test]
fn demo_serves_traffic_round_robin_and_stops_on_sigint() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
        .args([
            "--log",
            "warn",
            "up",
            "--demo",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
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

    // Wait for the printed curl hint of demo/echo.
    let deadline = Instant::now() + CEILING;
    let addr = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("kube-lb up printed no address in time");
        if line.starts_with("demo/echo ")
            && let Some(url) = line.split("curl http://").nth(1)
        {
            break url.trim_end_matches('/').to_string();
        }
    };
    assert!(kubeconfig.exists(), "kubeconfig written");

    // The dataplane may need a moment to bind after the address is published.
    let deadline = Instant::now() + CEILING;
    let mut backends = BTreeSet::new();
    while backends.len() < 3 && Instant::now() < deadline {
        if let Some(reply) = get(&addr) {
            assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
            let backend = reply
                .split("echo backend ")
                .nth(1)
                .and_then(|s| s.split(' ').next());
            backends.insert(backend.unwrap().to_string());
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(
        backends.len(),
        3,
        "round robin reached every backend: {backends:?}"
    );

    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + CEILING;
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "kube-lb up did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
    assert!(
        TcpStream::connect(&addr).is_err(),
        "listener closed after shutdown"
    );
}

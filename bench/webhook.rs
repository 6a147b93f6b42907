//! Admission latency of `kube-lb webhook` as kube-apiserver sees it: the real binary
//! (`kube-lb webhook --self-signed-for 127.0.0.1 --ca-bundle-out <tmp> --listen
//! 127.0.0.1:<free port> --cloud aws`) is sent AdmissionReviews at a constant, open-loop rate
//! over HTTPS keep-alive connections that trust only the CA bundle it wrote, as the API
//! server's webhook client does. The reviews rotate through three Services: a clean one, one
//! with an annotation error (`aws-load-balancer-healthcheck-interval: "2"`) and one with 30
//! annotations; every answer is checked (its uid, allowed, the expected warning).
//!
//! Open loop: request `i` is due at `start + i / rate` and is sent at that moment on its own
//! task, whether or not earlier ones have been answered, and its latency is counted from when
//! it was due, not from when it left. A stall therefore shows in every request it delays
//! (no coordinated omission), and late sending by the bench itself is counted against it.
//!
//! Prints p50, p90, p99 and max latency, the achieved rate of correct answers, errors (failed
//! requests, non-200 answers, wrong answers, anything over the configuration's 5 s timeout),
//! the webhook process's CPU per request, and `p99 <= 50 ms: PASS|FAIL` (the target
//! at 100 req/s; PASS also needs no errors and ≥ 95 % of the rate). Beside it, the same
//! figures for `kube_lb::webhook::review::review` called in this process on the same schedule
//! and bodies (parse, judge, serialise the answer): the difference is what HTTP, TLS, loopback
//! and the second process cost. Both columns include the bench's own wake-up at each due time
//! and the hand-off to a task; the call alone, timed around `review`, is printed below them.
//!
//! Run: `cargo bench --bench webhook` (exits non-zero on FAIL). Cargo builds the `kube-lb`
//! binary with the bench (same profile: `target/release/kube-lb`) and hands its path to the
//! bench as `CARGO_BIN_EXE_kube-lb`, so nothing needs building first; `KUBE_LB_BENCH_BIN`
//! runs another binary instead. Environment: `KUBE_LB_BENCH_RATE` (requests/s, default 100),
//! `KUBE_LB_BENCH_SECONDS` (20), `KUBE_LB_BENCH_CONNECTIONS` (keep-alive clients, 4).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube_lb::controller::ControllerConfig;
use kube_lb::webhook::review::{Mode, review};
use kube_lb_annotations::Cloud;
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error>;

/// The target: p99 at 100 requests/s.
const TARGET_P99: Duration = Duration::from_millis(50);
/// The component's `timeoutSeconds`: a slower answer is one kube-apiserver gave up on.
const TIMEOUT: Duration = Duration::from_secs(5);
const INTERVAL: &str = "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One of the Services sent, with what its answer must say.
struct Case {
    body: Arc<Vec<u8>>,
    uid: String,
    /// Some warning must name this annotation; `None`: no warning at all.
    warns_about: Option<&'static str>,
}

fn review_body(uid: &str, annotations: Value) -> Vec<u8> {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Service"},
            "resource": {"group": "", "version": "v1", "resource": "services"},
            "requestKind": {"group": "", "version": "v1", "kind": "Service"},
            "requestResource": {"group": "", "version": "v1", "resource": "services"},
            "operation": "CREATE",
            "namespace": "bench",
            "name": "web",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web", "namespace": "bench", "annotations": annotations},
                "spec": {
                    "type": "LoadBalancer",
                    "selector": {"app": "web"},
                    "ports": [
                        {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                        {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"}
                    ]
                }
            },
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
    .to_string()
    .into_bytes()
}

/// The clean Service, the one with an annotation error, and the one with 30 annotations (ten
/// of AWS's, valid, and twenty of other tools').
fn cases() -> Vec<Case> {
    let aws = |key: &str| format!("service.beta.kubernetes.io/aws-load-balancer-{key}");
    let mut many = serde_json::Map::new();
    for (key, value) in [
        ("healthcheck-interval", "10"),
        ("healthcheck-timeout", "5"),
        ("healthcheck-healthy-threshold", "3"),
        ("healthcheck-unhealthy-threshold", "3"),
        ("connection-idle-timeout", "60"),
        ("connection-draining-enabled", "true"),
        ("connection-draining-timeout", "30"),
        ("cross-zone-load-balancing-enabled", "true"),
        ("additional-resource-tags", "team=web,env=bench"),
        ("backend-protocol", "tcp"),
    ] {
        many.insert(aws(key), json!(value));
    }
    for i in 0..20 {
        many.insert(
            format!("tools.example.com/setting-{i:02}"),
            json!(format!("value {i} of a tool that is not kube-lb")),
        );
    }
    assert_eq!(many.len(), 30);
    [
        ("clean", json!({}), None),
        ("bad", json!({INTERVAL: "2"}), Some(INTERVAL)),
        ("many", Value::Object(many), None),
    ]
    .into_iter()
    .map(|(name, annotations, warns_about)| {
        let uid = format!("0b3c5d7e-{name:0>4}-4a4a-8b8b-000000000000");
        Case {
            body: Arc::new(review_body(&uid, annotations)),
            uid,
            warns_about,
        }
    })
    .collect()
}

/// Whether `answer` is the right one for `case`.
fn correct(case: &Case, answer: &Value) -> bool {
    let response = &answer["response"];
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    response["uid"] == case.uid.as_str()
        && response["allowed"] == true
        && match case.warns_about {
            Some(key) => warnings
                .iter()
                .any(|w| w.starts_with(&format!("metadata.annotations[{key}]"))),
            None => warnings.is_empty(),
        }
}

/// What one run of the schedule measured.
#[derive(Default)]
struct Outcome {
    /// Latency of each correct answer, from when its request was due.
    latencies: Vec<Duration>,
    errors: u64,
    /// From the first due time to the last answer.
    wall: Duration,
}

impl Outcome {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        // Nearest rank.
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Runs `send` for request `i` at `start + i / rate`, each on its own task; `send` returns
/// whether the answer was correct. Latency is taken when `send` finishes, from the due time.
/// The due times are kept by a thread of its own sleeping in `nanosleep` (tens of µs late at
/// most), not by the runtime's timer, which rounds every wake-up up to its next millisecond.
async fn open_loop<F, Fut>(rate: u64, total: u64, send: F) -> Outcome
where
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now() + Duration::from_millis(20);
    let runtime = tokio::runtime::Handle::current();
    let scheduled = tokio::task::spawn_blocking(move || {
        let mut tasks = Vec::with_capacity(total as usize);
        for i in 0..total {
            let due = start + period.mul_f64(i as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let request = send(i);
            tasks.push(runtime.spawn(async move {
                let ok = request.await;
                let done = Instant::now();
                (ok && done - due <= TIMEOUT, done - due, done)
            }));
        }
        tasks
    })
    .await;
    let mut outcome = Outcome::default();
    let mut last = start;
    let Ok(tasks) = scheduled else {
        outcome.errors = total;
        return outcome;
    };
    for task in tasks {
        match task.await {
            Ok((true, latency, done)) => {
                outcome.latencies.push(latency);
                last = last.max(done);
            }
            Ok((false, _, done)) => {
                outcome.errors += 1;
                last = last.max(done);
            }
            Err(_) => outcome.errors += 1,
        }
    }
    outcome.wall = last - start;
    outcome
}

/// The webhook process, killed and reaped when dropped.
struct Webhook(Child);

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Webhook {
    /// User + system CPU time of the process so far (`/proc/<pid>/stat`, in clock ticks of
    /// 1/100 s, the kernel's USER_HZ on Linux).
    fn cpu(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.0.id())).ok()?;
        // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
    }
}

fn binary() -> PathBuf {
    std::env::var_os("KUBE_LB_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_kube-lb")))
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts the webhook and returns it with its base URL and the CA bundle it wrote, once it
/// answers `/healthz` to a client trusting that bundle.
async fn start(dir: &Path) -> Result<(Webhook, String, Vec<u8>), Error> {
    let port = free_port()?;
    let ca = dir.join("ca.pem");
    let log = dir.join("webhook.log");
    let exe = binary();
    let webhook = Webhook(
        Command::new(&exe)
            .args(["--log", "warn", "webhook", "--self-signed-for", "127.0.0.1"])
            .arg("--ca-bundle-out")
            .arg(&ca)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(["--cloud", "aws"])
            .env_remove("KUBE_LB_CLOUD")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", exe.display()))?,
    );
    let base = format!("https://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(pem) = std::fs::read(&ca)
            && !pem.is_empty()
            && client(&pem)?
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        {
            return Ok((webhook, base, pem));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!(
        "the webhook did not answer /healthz within 30 s: {}",
        std::fs::read_to_string(&log).unwrap_or_default()
    )
    .into())
}

/// A keep-alive HTTPS client trusting only `ca_pem`.
fn client(ca_pem: &[u8]) -> Result<reqwest::Client, Error> {
    Ok(reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem)?)
        .pool_max_idle_per_host(1)
        .pool_idle_timeout(Duration::from_secs(90))
        .timeout(TIMEOUT)
        .build()?)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn run() -> Result<bool, Error> {
    let rate = env_or("KUBE_LB_BENCH_RATE", 100).max(1);
    let seconds = env_or("KUBE_LB_BENCH_SECONDS", 20).max(1);
    let connections = env_or("KUBE_LB_BENCH_CONNECTIONS", 4).max(1) as usize;
    let total = rate * seconds;
    let cases = Arc::new(cases());

    // What review() says of each case, as a check of the bodies before anything is timed.
    let mut config = ControllerConfig::new(Cloud::Aws);
    config.default_class = true;
    let config = Arc::new(config);
    for case in cases.iter() {
        let answer = review(&case.body, &config, Mode::Warn).map_err(|e| e.to_string())?;
        if !correct(case, &answer) {
            return Err(format!("review() answers {} unexpectedly: {answer}", case.uid).into());
        }
    }

    let dir = tempfile::tempdir()?;
    let (webhook, base, ca) = start(dir.path()).await?;
    let url = format!("{base}/validate-service");
    let clients: Vec<reqwest::Client> = (0..connections)
        .map(|_| client(&ca))
        .collect::<Result<_, _>>()?;
    // Open every connection (and its TLS session) first: kube-apiserver keeps them alive.
    for client in &clients {
        client.get(format!("{base}/healthz")).send().await?;
    }
    println!(
        "kube-lb webhook ({}), {rate} req/s for {seconds} s over {connections} keep-alive \
         HTTPS connections, reviews rotating clean / annotation error / 30 annotations:",
        binary().display()
    );

    let cpu_before = webhook.cpu();
    let clients = Arc::new(clients);
    let https_cases = cases.clone();
    let https = open_loop(rate, total, move |i| {
        let client = clients[i as usize % clients.len()].clone();
        let cases = https_cases.clone();
        let url = url.clone();
        async move {
            let case = &cases[i as usize % cases.len()];
            let sent = client
                .post(&url)
                .header("content-type", "application/json")
                .body(case.body.as_ref().clone())
                .send()
                .await;
            match sent {
                Ok(response) if response.status() == 200 => response
                    .json::<Value>()
                    .await
                    .is_ok_and(|answer| correct(case, &answer)),
                _ => false,
            }
        }
    })
    .await;
    let cpu = match (cpu_before, webhook.cpu()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    drop(webhook);

    // The call alone, without the wake-up and the task hand-off both paths pay.
    let calls = Arc::new(std::sync::Mutex::new(Vec::with_capacity(total as usize)));
    let timed = calls.clone();
    let in_process = open_loop(rate, total, move |i| {
        let cases = cases.clone();
        let config = config.clone();
        let timed = timed.clone();
        async move {
            let case = &cases[i as usize % cases.len()];
            let began = Instant::now();
            let ok = review(&case.body, &config, Mode::Warn)
                .map(|answer| {
                    let text = answer.to_string();
                    !text.is_empty() && correct(case, &answer)
                })
                .unwrap_or(false);
            let took = began.elapsed();
            timed.lock().unwrap_or_else(|e| e.into_inner()).push(took);
            ok
        }
    })
    .await;
    let calls = Outcome {
        latencies: std::mem::take(&mut *calls.lock().unwrap_or_else(|e| e.into_inner())),
        ..Outcome::default()
    };

    println!();
    println!(
        "| path | p50 | p90 | p99 | max | achieved | errors |\n| --- | --- | --- | --- | --- | --- | --- |"
    );
    for (name, outcome) in [
        ("HTTPS webhook", &https),
        ("review() in process", &in_process),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} | {:.1} req/s | {} |",
            ms(outcome.percentile(0.50)),
            ms(outcome.percentile(0.90)),
            ms(outcome.percentile(0.99)),
            ms(outcome.percentile(1.0)),
            outcome.rate(),
            outcome.errors
        );
    }
    let ratio = |p: f64| {
        https.percentile(p).as_secs_f64() / in_process.percentile(p).as_secs_f64().max(1e-9)
    };
    println!(
        "\nHTTPS / in process: p50 {:.1}×, p99 {:.1}× (extra p50 {}, p99 {}: HTTP, TLS, \
         loopback, the second process)",
        ratio(0.50),
        ratio(0.99),
        ms(https
            .percentile(0.50)
            .saturating_sub(in_process.percentile(0.50))),
        ms(https
            .percentile(0.99)
            .saturating_sub(in_process.percentile(0.99))),
    );
    println!(
        "review() call alone (parse, judge, serialise; no wake-up): p50 {}, p99 {}, max {}",
        ms(calls.percentile(0.50)),
        ms(calls.percentile(0.99)),
        ms(calls.percentile(1.0)),
    );
    if let Some(cpu) = cpu {
        println!(
            "webhook process CPU: {:.2} s for {} requests, {:.0} µs per request",
            cpu.as_secs_f64(),
            total,
            cpu.as_secs_f64() * 1e6 / total as f64
        );
    }
    let p99 = https.percentile(0.99);
    let enough = https.rate() >= 0.95 * rate as f64;
    let pass = p99 <= TARGET_P99 && https.errors == 0 && enough && !https.latencies.is_empty();
    if pass {
        println!("p99 <= 50 ms: PASS");
    } else {
        println!(
            "p99 <= 50 ms: FAIL (p99 {}, {} errors, {:.1} of {rate} req/s)",
            ms(p99),
            https.errors,
            https.rate()
        );
    }
    Ok(pass)
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("webhook bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("webhook bench: {e}");
            ExitCode::FAILURE
        }
    }
}

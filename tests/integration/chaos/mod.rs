//! The chaos suite: the controller binary (two leader-elected replicas) against a cloud through a
//! fault-injecting proxy, while Services are created, changed, retyped and deleted at random and
//! the replicas are killed with SIGKILL at random points; then every Service is deleted.
//!
//! It asserts what a cloud controller's users rely on:
//! - never two load balancers for one Service (sampled all through the run);
//! - no Service object disappears while a load balancer of its still exists (the finalizer goes
//!   last);
//! - convergence within [`ChaosConfig::convergence_bound`] after the last fault and kill: every
//!   LoadBalancer Service has an address (and, on a cloud, its load balancer exists), every other
//!   Service has no load balancer and no finalizer — or carries a Warning event naming a cause;
//! - after every Service is deleted, nothing kube-lb created is left in the cloud.
//!
//! Seeded and replayable: the seed drives the operations, the fault draws and the kill schedule
//! (the interleaving with the controller's own timing is not replayable, so a replay reproduces
//! the same workload, not the same instant). `KUBE_LB_CHAOS_SEED` picks the seed (default 1),
//! `KUBE_LB_CHAOS_SECS` the length of the chaos phase (default 20 s: the short form CI runs);
//! run it longer by hand with e.g. `KUBE_LB_CHAOS_SECS=600 KUBE_LB_CHAOS_SEED=$RANDOM cargo nextest
//! run --all-features -E 'test(/^chaos::/)' --no-capture`.
#![allow(clippy::unwrap_used)]

#[cfg(feature = "baidu")]
pub(crate) mod baidu;
pub(crate) mod clouds;
#[cfg(feature = "openstack")]
pub(crate) mod openstack;
mod proxy;
#[cfg(feature = "tencent")]
pub(crate) mod tencent;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kube_lb::controller::FINALIZER;
use kube_lb_apiserver::{ApiServer, RunningApiServer};
use kube_lb_provider_core::naming::load_balancer_name;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

pub use proxy::{Dialect, Fault, FaultProxy, FaultRates};

/// The cloud resources kube-lb created, as an outsider reads them from the cloud.
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    /// Load balancers (or, where one LB is shared, per-Service frontends): `(name, kind)`. The
    /// name is the Service's deterministic load-balancer name (`a` + UID).
    pub load_balancers: Vec<(String, String)>,
    /// Every other owned resource (`kind/name`): target groups, security groups, addresses, …
    pub others: Vec<String>,
}

impl Inventory {
    /// Everything, for the leak report.
    pub fn all(&self) -> Vec<String> {
        self.load_balancers
            .iter()
            .map(|(name, kind)| format!("{kind}/{name}"))
            .chain(self.others.iter().cloned())
            .collect()
    }
}

/// A cloud under test.
#[async_trait]
pub trait ChaosCloud: Send + Sync {
    /// `aws`, `gcp`, `azure`, `openstack`, `tencent`, `baidu`, `local`.
    fn name(&self) -> &'static str;
    /// Extra `kube-lb controller` arguments and environment (cloud config pointing at `proxy`).
    fn controller(
        &self,
        dir: &Path,
        proxy: Option<&FaultProxy>,
    ) -> (Vec<String>, Vec<(String, String)>);
    /// Where the proxy forwards to, and how the cloud words throttling; `None` for `local`.
    fn upstream(&self) -> Option<(String, Dialect)>;
    /// The Node objects of the cluster (provider IDs matching the cloud's instances).
    fn nodes(&self) -> Vec<Value>;
    /// What exists in the cloud now, read directly (never through the proxy).
    async fn inventory(&self) -> Result<Inventory, String>;
    /// An annotation that changes the load balancer's kind (CLB ↔ NLB, internal ↔ external),
    /// with the value that switches it on.
    fn kind_switch(&self) -> Option<(&'static str, &'static str)>;
    /// Whether that kind is fixed when the load balancer is created (Tencent, as TKE: a later
    /// switch is refused until the Service's author undoes it), so the suite picks it at
    /// creation only.
    fn kind_fixed_at_creation(&self) -> bool {
        false
    }
    /// A harmless annotation change (e.g. an idle timeout) with values to pick from.
    fn tweak(&self) -> Option<(&'static str, &'static [&'static str])>;
}

/// A Ready Node object named `name` with InternalIP `ip`, its hostname label, and where given
/// the cloud's provider ID and a zone label: the form every cloud's `nodes` answers in.
pub fn ready_node(name: &str, ip: &str, provider_id: Option<&str>, zone: Option<&str>) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": name});
    if let Some(zone) = zone {
        labels["topology.kubernetes.io/zone"] = json!(zone);
    }
    let mut node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    });
    if let Some(id) = provider_id {
        node["spec"] = json!({"providerID": id});
    }
    node
}

/// The `--cloud-config <path>` arguments that point the controller at a config file.
pub fn cloud_config_args(path: &Path) -> Vec<String> {
    vec!["--cloud-config".into(), path.display().to_string()]
}

/// Writes `contents` to `file_name` in the run's directory `dir` and returns the arguments
/// that point the controller at it.
pub fn write_cloud_config(dir: &Path, file_name: &str, contents: &str) -> Vec<String> {
    let path = dir.join(file_name);
    std::fs::write(&path, contents).unwrap();
    cloud_config_args(&path)
}

/// How a cloud's API spells the tags of a resource: the list's field and each entry's key and
/// value fields (`tags`/`tagKey`/`tagValue` on Baidu, `Tags`/`TagKey`/`TagValue` on Tencent).
pub struct TagFields {
    /// The field holding the list of tags.
    pub list: &'static str,
    /// The field of an entry naming the tag.
    pub key: &'static str,
    /// The field of an entry holding its value.
    pub value: &'static str,
}

impl TagFields {
    /// The value of tag `key` on `resource`, as the mock lists it.
    pub fn value_of<'a>(&self, resource: &'a Value, key: &str) -> Option<&'a str> {
        resource[self.list]
            .as_array()?
            .iter()
            .find(|tag| tag[self.key] == key)
            .and_then(|tag| tag[self.value].as_str())
    }
}

/// Length, rates and bounds of one run.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Drives every random choice.
    pub seed: u64,
    /// How long Services are churned and replicas killed.
    pub chaos: Duration,
    /// Service names used (`svc-0` …).
    pub services: usize,
    /// Delay between two operations (uniform in this range).
    pub op_every: (Duration, Duration),
    /// Delay between two kills (uniform in this range).
    pub kill_every: (Duration, Duration),
    /// Fault rates of the proxy.
    pub rates: FaultRates,
    /// How long after the last fault and kill every Service must have converged.
    pub convergence_bound: Duration,
    /// How long the final deletion may take.
    pub deletion_bound: Duration,
}

impl ChaosConfig {
    /// The short form (CI) unless `KUBE_LB_CHAOS_SECS` / `KUBE_LB_CHAOS_SEED` say otherwise.
    pub fn from_env() -> Self {
        let secs = std::env::var("KUBE_LB_CHAOS_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20);
        let seed = std::env::var("KUBE_LB_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        Self {
            seed,
            chaos: Duration::from_secs(secs),
            services: 5,
            op_every: (Duration::from_millis(150), Duration::from_millis(600)),
            kill_every: (Duration::from_secs(3), Duration::from_secs(8)),
            // The rates of the run that found the bugs this suite guards against.
            rates: FaultRates {
                mutating: 0.3,
                reads: 0.05,
            },
            // Lease 2 s + renew 1.5 s + backoff capped at 2 s + a few cloud round trips
            // through moto's Python server on a loaded 2-core machine.
            convergence_bound: Duration::from_secs(90),
            deletion_bound: Duration::from_secs(90),
        }
    }
}

/// What one run saw.
#[derive(Debug, Default)]
pub struct Report {
    /// Seed used.
    pub seed: u64,
    /// Operations on Services, by kind (and how many the API server refused).
    pub operations: BTreeMap<&'static str, u64>,
    /// SIGKILLs sent, and how many hit both replicas at once.
    pub kills: u64,
    /// Of those, kills of both replicas at once.
    pub double_kills: u64,
    /// Faults the proxy injected, by kind.
    pub faults: BTreeMap<Fault, u64>,
    /// Requests the proxy forwarded.
    pub forwarded: u64,
    /// Services that had two load balancers at once (`service: lbs`).
    pub duplicates: BTreeSet<String>,
    /// Load balancers that existed after their Service object was gone.
    pub outlived: BTreeSet<String>,
    /// Services not converged at the bound, with why.
    pub unconverged: Vec<String>,
    /// Time from the last fault to convergence.
    pub convergence: Option<Duration>,
    /// Resources left after every Service was deleted.
    pub leaks: Vec<String>,
    /// Services still present after the deletion bound.
    pub undeleted: Vec<String>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed        {}", self.seed)?;
        writeln!(f, "operations  {:?}", self.operations)?;
        writeln!(
            f,
            "kills       {} ({} of both replicas at once)",
            self.kills, self.double_kills
        )?;
        writeln!(
            f,
            "faults      {:?} ({} requests forwarded)",
            self.faults, self.forwarded
        )?;
        writeln!(f, "duplicates  {:?}", self.duplicates)?;
        writeln!(f, "outlived    {:?}", self.outlived)?;
        writeln!(
            f,
            "convergence {:?} (unconverged: {:?})",
            self.convergence, self.unconverged
        )?;
        writeln!(f, "leaks       {:?}", self.leaks)?;
        write!(f, "undeleted   {:?}", self.undeleted)
    }
}

/// One `kube-lb controller` replica, restarted after each kill.
struct Replica {
    index: usize,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_kube-lb"))
            .args(["--log", "info,kube_lb=debug", "controller"])
            .args(&self.args)
            .envs(self.env.iter().cloned())
            .env("POD_NAME", format!("replica-{}", self.index))
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL, and reap.
    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

/// The Service names' current state, read from the API server.
#[derive(Debug, Clone)]
struct Observed {
    uid: String,
    load_balancer: bool,
    finalized: bool,
    ingress: Vec<String>,
}

async fn observe(client: &Client) -> BTreeMap<String, Observed> {
    let list = Api::<Service>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|s| s.name_any().starts_with("svc-"))
        .map(|s| {
            let observed = Observed {
                uid: s.uid().unwrap_or_default(),
                load_balancer: s.spec.as_ref().and_then(|sp| sp.type_.as_deref())
                    == Some("LoadBalancer"),
                finalized: s.finalizers().iter().any(|f| f == FINALIZER),
                ingress: s
                    .status
                    .as_ref()
                    .and_then(|st| st.load_balancer.as_ref())
                    .and_then(|lb| lb.ingress.as_ref())
                    .map(|ing| {
                        ing.iter()
                            .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            (s.name_any(), observed)
        })
        .collect()
}

fn service_body(name: &str, port: u16, annotations: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {
            "type": "LoadBalancer",
            "selector": {"app": name},
            "ports": [{"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}]
        }
    })
}

const PORTS: [u16; 4] = [80, 443, 8080, 8443];

/// Performs one random operation on Service `name`; returns its label.
async fn operate(
    client: &Client,
    cloud: &dyn ChaosCloud,
    rng: &mut StdRng,
    name: &str,
    current: Option<&Observed>,
) -> (&'static str, bool) {
    let api = Api::<Service>::namespaced(client.clone(), "default");
    let merge = |body: Value| {
        let api = api.clone();
        let name = name.to_string();
        async move {
            api.patch(&name, &PatchParams::default(), &Patch::Merge(body))
                .await
                .is_ok()
        }
    };
    let port = PORTS[rng.random_range(0..PORTS.len())];
    let Some(current) = current else {
        let mut annotations = BTreeMap::new();
        if let Some((key, value)) = cloud.kind_switch()
            && rng.random_bool(0.3)
        {
            annotations.insert(key.to_string(), value.to_string());
        }
        let body: Service = serde_json::from_value(service_body(name, port, &annotations)).unwrap();
        let ok = api.create(&PostParams::default(), &body).await.is_ok();
        return ("create", ok);
    };
    match rng.random_range(0..10) {
        0..=1 => {
            let ok = merge(json!({"spec": {"ports": [
                {"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}
            ]}}))
            .await;
            ("port", ok)
        }
        2..=3 => match cloud.tweak() {
            Some((key, values)) => {
                let value = values[rng.random_range(0..values.len())];
                (
                    "annotate",
                    merge(json!({"metadata": {"annotations": {key: value}}})).await,
                )
            }
            None => ("annotate", true),
        },
        4..=5 => match cloud
            .kind_switch()
            .filter(|_| !cloud.kind_fixed_at_creation())
        {
            Some((key, value)) => {
                let on = rng.random_bool(0.5);
                let value = if on { json!(value) } else { Value::Null };
                (
                    "kind",
                    merge(json!({"metadata": {"annotations": {key: value}}})).await,
                )
            }
            None => ("kind", true),
        },
        6..=7 => {
            let to = if current.load_balancer {
                "ClusterIP"
            } else {
                "LoadBalancer"
            };
            // The ports go along without node ports, as kubectl would send them.
            let ok = merge(json!({"spec": {"type": to, "ports": [
                {"name": "http", "port": port, "targetPort": 8080, "protocol": "TCP"}
            ]}}))
            .await;
            ("retype", ok)
        }
        _ => {
            let ok = api.delete(name, &DeleteParams::default()).await.is_ok();
            ("delete", ok)
        }
    }
}

/// Load balancers by Service UID, where the name is the UID's deterministic name.
fn load_balancers_of<'a>(inventory: &'a Inventory, uid: &str) -> Vec<&'a (String, String)> {
    let name = load_balancer_name(uid);
    inventory
        .load_balancers
        .iter()
        .filter(|(lb, _)| *lb == name)
        .collect()
}

async fn warnings_of(client: &Client, name: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.type_.as_deref() == Some("Warning")
        })
        .filter_map(|e| e.note)
        .collect()
}

/// Why `name` has not converged, or `None` when it has.
fn unconverged(
    cloud: &dyn ChaosCloud,
    inventory: &Inventory,
    name: &str,
    observed: &Observed,
) -> Option<String> {
    let lbs = load_balancers_of(inventory, &observed.uid);
    let has_cloud = cloud.upstream().is_some();
    if observed.load_balancer {
        if observed.ingress.is_empty() {
            return Some(format!("{name}: no address"));
        }
        if has_cloud && lbs.len() != 1 {
            return Some(format!("{name}: {} load balancers in the cloud", lbs.len()));
        }
    } else {
        if !lbs.is_empty() {
            return Some(format!("{name}: not a LoadBalancer but {lbs:?} exist"));
        }
        if observed.finalized || !observed.ingress.is_empty() {
            return Some(format!(
                "{name}: not a LoadBalancer but finalizer/status remain"
            ));
        }
    }
    None
}

/// Runs the suite against `cloud` and returns what it saw; the caller asserts.
pub async fn run(cloud: &dyn ChaosCloud, config: ChaosConfig) -> Report {
    let mut report = Report {
        seed: config.seed,
        ..Report::default()
    };
    let mut rng = StdRng::seed_from_u64(config.seed);
    let server: RunningApiServer = ApiServer::builder().start().await.unwrap();
    for node in cloud.nodes() {
        server.seed(node).unwrap();
    }
    let client = server.client().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let proxy = match cloud.upstream() {
        Some((upstream, dialect)) => {
            Some(FaultProxy::start(&upstream, dialect, config.rates, rng.random()).await)
        }
        None => None,
    };
    let (cloud_args, env) = cloud.controller(dir.path(), proxy.as_ref());
    let mut args: Vec<String> = [
        "--cloud",
        cloud.name(),
        "--cluster-name",
        "chaos",
        "--leader-elect",
        "--leader-elect-namespace",
        "default",
        "--leader-elect-lease-duration",
        "2s",
        "--leader-elect-renew-deadline",
        "1500ms",
        "--leader-elect-retry-period",
        "250ms",
        "--metrics-addr",
        "127.0.0.1:0",
        "--backoff-base",
        "200ms",
        "--backoff-max",
        "2s",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    args.push("--kubeconfig".into());
    args.push(kubeconfig.display().to_string());
    args.extend(cloud_args);
    let logs = std::env::temp_dir().join(format!(
        "kube-lb-chaos-{}-{}-{}",
        cloud.name(),
        config.seed,
        std::process::id()
    ));
    std::fs::create_dir_all(&logs).unwrap();
    let mut replicas: Vec<Replica> = (0..2)
        .map(|index| Replica {
            index,
            args: args.clone(),
            env: env.clone(),
            log: logs.join(format!("replica-{index}.log")),
            child: None,
        })
        .collect();
    for replica in &mut replicas {
        replica.start();
    }
    if let Some(proxy) = &proxy {
        proxy.set_enabled(true);
    }

    // Chaos phase.
    let names: Vec<String> = (0..config.services).map(|i| format!("svc-{i}")).collect();
    let mut known_uids: BTreeSet<String> = BTreeSet::new();
    let started = Instant::now();
    let mut next_kill = started + uniform(&mut rng, config.kill_every);
    while started.elapsed() < config.chaos {
        let before = observe(&client).await;
        let gone = gone_uids(&known_uids, &before);
        known_uids.extend(before.values().map(|o| o.uid.clone()));
        if cloud.upstream().is_some() {
            match cloud.inventory().await {
                Ok(inventory) => check_invariants(&inventory, &known_uids, &gone, &mut report),
                Err(error) => eprintln!("chaos: inventory failed: {error}"),
            }
        } else {
            check_addresses(&before, &mut report);
        }
        let name = &names[rng.random_range(0..names.len())];
        let (op, ok) = operate(&client, cloud, &mut rng, name, before.get(name)).await;
        *report.operations.entry(op).or_default() += 1;
        if !ok {
            *report.operations.entry("refused").or_default() += 1;
        }
        if Instant::now() >= next_kill {
            let both = rng.random_bool(0.25);
            let first = rng.random_range(0..replicas.len());
            report.kills += 1;
            if both {
                report.double_kills += 1;
                for replica in &mut replicas {
                    replica.kill().await;
                }
            } else {
                replicas[first].kill().await;
            }
            tokio::time::sleep(uniform(
                &mut rng,
                (Duration::ZERO, Duration::from_millis(500)),
            ))
            .await;
            for replica in &mut replicas {
                if replica.child.is_none() {
                    replica.start();
                }
            }
            next_kill = Instant::now() + uniform(&mut rng, config.kill_every);
        }
        tokio::time::sleep(uniform(&mut rng, config.op_every)).await;
    }

    // Quiet: no more faults, kills or operations. Measure convergence.
    if let Some(proxy) = &proxy {
        proxy.set_enabled(false);
    }
    let quiet = Instant::now();
    let mut last_problems = Vec::new();
    while quiet.elapsed() < config.convergence_bound {
        let observed = observe(&client).await;
        known_uids.extend(observed.values().map(|o| o.uid.clone()));
        let inventory = if cloud.upstream().is_some() {
            match cloud.inventory().await {
                Ok(inventory) => inventory,
                Err(error) => {
                    last_problems = vec![format!("inventory: {error}")];
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    continue;
                }
            }
        } else {
            Inventory::default()
        };
        let gone = gone_uids(&known_uids, &observed);
        check_invariants(&inventory, &known_uids, &gone, &mut report);
        let mut problems = Vec::new();
        for (name, o) in &observed {
            if let Some(problem) = unconverged(cloud, &inventory, name, o) {
                problems.push(problem);
            }
        }
        // Load balancers of Services that no longer exist are not converged either.
        for (lb, kind) in &inventory.load_balancers {
            if !observed.values().any(|o| load_balancer_name(&o.uid) == *lb) {
                problems.push(format!("{kind}/{lb} belongs to no Service"));
            }
        }
        if problems.is_empty() {
            report.convergence = Some(quiet.elapsed());
            break;
        }
        last_problems = problems;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if report.convergence.is_none() {
        // Not converged: each such Service must at least say why in a Warning.
        for problem in last_problems {
            let name = problem.split(':').next().unwrap_or_default().to_string();
            let warnings = warnings_of(&client, &name).await;
            report.unconverged.push(format!(
                "{problem} (warnings: {})",
                warnings.last().cloned().unwrap_or_else(|| "none".into())
            ));
        }
    }

    // Delete everything; wait until every finalizer is released and the cloud is empty.
    let api = Api::<Service>::namespaced(client.clone(), "default");
    for name in &names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    let deleting = Instant::now();
    loop {
        let left = observe(&client).await;
        let inventory = if cloud.upstream().is_some() {
            cloud.inventory().await.unwrap_or_default()
        } else {
            Inventory::default()
        };
        let gone = gone_uids(&known_uids, &left);
        check_invariants(&inventory, &known_uids, &gone, &mut report);
        if left.is_empty() && inventory.all().is_empty() {
            break;
        }
        if deleting.elapsed() > config.deletion_bound {
            report.undeleted = left.keys().cloned().collect();
            report.leaks = inventory.all();
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if let Some(proxy) = &proxy {
        report.faults = proxy.injected();
        report.forwarded = proxy.forwarded();
    }
    for replica in &mut replicas {
        replica.kill().await;
    }
    eprintln!(
        "chaos {}:\n{report}\nlogs: {}",
        cloud.name(),
        logs.display()
    );
    report
}

/// The UIDs seen earlier in the run whose Service is missing from `observed`: deleted since.
fn gone_uids(
    known_uids: &BTreeSet<String>,
    observed: &BTreeMap<String, Observed>,
) -> BTreeSet<String> {
    known_uids
        .iter()
        .filter(|uid| !observed.values().any(|o| &o.uid == *uid))
        .cloned()
        .collect()
}

fn uniform(rng: &mut StdRng, (low, high): (Duration, Duration)) -> Duration {
    if high <= low {
        return low;
    }
    let span = u64::try_from((high - low).as_millis()).unwrap_or(u64::MAX);
    low + Duration::from_millis(rng.random_range(0..=span))
}

fn check_invariants(
    inventory: &Inventory,
    known_uids: &BTreeSet<String>,
    gone: &BTreeSet<String>,
    report: &mut Report,
) {
    let mut by_name: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (name, kind) in &inventory.load_balancers {
        by_name.entry(name).or_default().push(kind);
    }
    for (name, kinds) in by_name {
        if kinds.len() > 1 {
            report.duplicates.insert(format!("{name}: {kinds:?}"));
        }
        // A Service seen before and missing from the list taken before this inventory was gone
        // while its load balancer still existed.
        if let Some(uid) = known_uids
            .iter()
            .find(|uid| load_balancer_name(uid) == name)
            && gone.contains(uid)
        {
            report
                .outlived
                .insert(format!("{name} ({kinds:?}) of Service uid {uid}"));
        }
    }
    // The finalizer goes after every resource of the Service, not only its load balancer:
    // security groups, firewalls, addresses, … whose names carry the load-balancer name.
    for uid in gone {
        let name = load_balancer_name(uid);
        for other in inventory.others.iter().filter(|o| o.contains(&name)) {
            report
                .outlived
                .insert(format!("{other} of Service uid {uid}"));
        }
    }
}

/// For `local`, where nothing is in a cloud: two Services never share an address.
fn check_addresses(observed: &BTreeMap<String, Observed>, report: &mut Report) {
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, o) in observed {
        for address in &o.ingress {
            if let Some(other) = seen.insert(address, name) {
                report
                    .duplicates
                    .insert(format!("{address} held by {other} and {name}"));
            }
        }
    }
}

/// Asserts every invariant of a report.
pub fn assert_clean(report: &Report) {
    assert!(
        report.duplicates.is_empty(),
        "two load balancers for one Service:\n{report}"
    );
    assert!(
        report.outlived.is_empty(),
        "a load balancer outlived its Service:\n{report}"
    );
    assert!(
        report.convergence.is_some(),
        "not converged within the bound after the last fault:\n{report}"
    );
    assert!(
        report.leaks.is_empty(),
        "resources left after every Service was deleted:\n{report}"
    );
    assert!(
        report.undeleted.is_empty(),
        "Services never released:\n{report}"
    );
    assert!(report.kills > 0, "the run killed no replica:\n{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local() {
    let report = run(&clouds::Local, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "aws")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws() {
    let cloud = clouds::Aws::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "gcp")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcp() {
    let cloud = clouds::Gcp::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "azure")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure() {
    let cloud = clouds::Azure::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "openstack")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack() {
    let cloud = openstack::OpenStack::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

/// OpenStack with the member subnet found from the nodes' ports (`cloud.conf` names only the
/// VIP network), so faults and kills also land in that look-up.
#[cfg(feature = "openstack")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstack_discovering_the_member_subnet() {
    let cloud = openstack::OpenStack::start_discovering_the_member_subnet().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "baidu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baidu() {
    let cloud = baidu::Baidu::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

#[cfg(feature = "tencent")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tencent() {
    let cloud = tencent::Tencent::start().await;
    let report = run(&cloud, ChaosConfig::from_env()).await;
    assert_clean(&report);
}

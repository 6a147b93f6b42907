//! What a controller restart costs per provider: `N` LoadBalancer Services in sync, then a
//! fresh provider (nothing cached, as after a restart or a leader change) and the controller's
//! first full pass over them (`ensure` for every Service, the controller's default concurrency
//! of 4, each provider's default rate limits) with a fixed latency added to every cloud call.
//!
//! Prints, per provider: calls made (reads, mutations, reads per load balancer), the pass's
//! wall time, and beside it the two lower bounds the same calls imply — the rate limits
//! (per API family: calls beyond the burst / the family's rate, the slowest family) and the
//! latency (latency × calls / concurrency) — plus the aws-load-balancer-controller reference
//! (10–20 min after a leader change at 1,000 load balancers, LBC#3326).
//!
//! Clouds: `local` in process (no latency: it has no API), AWS on moto behind the fault proxy
//! (its added latency), GCP and Azure on their mocks (their added latency). The Services are
//! created first with unlimited rate limits and no added latency; only the pass is measured.
//!
//! Run: `cargo bench --features aws,gcp,azure --bench resync`. Environment:
//! `KUBE_LB_BENCH_LBS` (default 1000), `KUBE_LB_BENCH_LATENCY_MS` (50), `KUBE_LB_BENCH_PROVIDERS`
//! (`local,aws,gcp,azure`), `CONCURRENCY` (4). AWS needs moto's server (`.venv/bin/moto_server`
//! or `KUBE_LB_MOTO_SERVER`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_provider_core::types::NodeAddressKind;
use kube_lb_provider_core::{
    BackendNode, CallKind, CallRecord, CallSnapshot, LoadBalancerProvider, LoadBalancerStatus,
    NodeAddress, RateLimits, RetryPolicy,
};
use serde_json::json;

type Error = Box<dyn std::error::Error>;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The settings of one run.
struct Run {
    lbs: usize,
    latency: Duration,
    concurrency: usize,
}

/// One provider's measured pass.
struct Row {
    provider: &'static str,
    lbs: usize,
    pass: CallSnapshot,
    /// Start-up calls before the pass (the local pool re-adopting addresses).
    startup: u64,
    wall: Duration,
    /// The latency added to each call (zero for `local`).
    latency: Duration,
    /// Rate-limit lower bound of the pass's calls.
    rate_bound: Duration,
}

/// A Service as the API server stores it, parsed for `cloud`.
fn spec(cloud: Cloud, i: usize, annotations: serde_json::Value) -> Result<LoadBalancerSpec, Error> {
    let service: Service = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": format!("svc-{i}"),
            "namespace": "bench",
            // The providers' names keep the leading hex digits: vary those.
            "uid": format!("{i:08x}-5e5e-4c4c-8a8a-000000000000"),
            "annotations": annotations,
        },
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": "Cluster",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "nodePort": 30080, "protocol": "TCP"}],
        },
    }))?;
    Ok(kube_lb_annotations::parse(cloud, &service)
        .map_err(|e| format!("svc-{i}: {e:?}"))?
        .spec)
}

/// Runs `ensure` for every spec, `concurrency` at a time; fails on the first error.
async fn pass(
    provider: &dyn LoadBalancerProvider,
    specs: &[LoadBalancerSpec],
    nodes: &[BackendNode],
    concurrency: usize,
) -> Result<Vec<LoadBalancerStatus>, Error> {
    let results: Vec<_> = futures::stream::iter(specs)
        .map(|spec| provider.ensure(spec, nodes))
        .buffered(concurrency.max(1))
        .collect()
        .await;
    let mut out = Vec::with_capacity(results.len());
    for result in results {
        out.push(result.map_err(|e| format!("{}: {e}", provider.name()))?);
    }
    Ok(out)
}

/// The slowest API family under its limit: calls beyond the burst divided by the rate.
fn rate_bound(
    pass: &CallSnapshot,
    limits: &RateLimits,
    family: impl Fn(&CallRecord) -> String,
) -> Duration {
    let mut per_family: BTreeMap<String, u64> = BTreeMap::new();
    for (record, count) in pass.iter() {
        *per_family.entry(family(record)).or_default() += count;
    }
    per_family
        .iter()
        .map(|(name, count)| {
            let limit = limits.limit_for(name);
            let beyond = count.saturating_sub(u64::from(limit.burst));
            // Counts are far below 2^52: exact as f64.
            #[allow(clippy::cast_precision_loss)]
            let seconds = beyond as f64 / limit.effective_per_second();
            Duration::from_secs_f64(seconds)
        })
        .max()
        .unwrap_or_default()
}

fn node(
    name: &str,
    provider_id: Option<String>,
    ip: &str,
    zone: &str,
) -> Result<BackendNode, Error> {
    Ok(BackendNode {
        name: name.to_string(),
        provider_id,
        addresses: vec![NodeAddress {
            kind: NodeAddressKind::InternalIp,
            ip: ip.parse::<IpAddr>()?,
        }],
        labels: BTreeMap::from([("topology.kubernetes.io/zone".to_string(), zone.to_string())]),
    })
}

async fn local(run: &Run) -> Result<Row, Error> {
    use kube_lb_provider_local::{IpRange, LocalProvider, Pool};
    let net: ipnet::IpNet = "10.96.0.0/16".parse()?;
    let pool = || Pool::new(vec![IpRange::from_cidr(net)]);
    let specs: Vec<_> = (0..run.lbs)
        .map(|i| spec(Cloud::Local, i, json!({})))
        .collect::<Result<_, _>>()?;
    let nodes = vec![node("n1", None, "192.0.2.1", "a")?];
    let first = LocalProvider::new(pool()?, Default::default());
    let statuses = pass(&first, &specs, &nodes, 16).await?;

    // A restart: the pool lives in memory, so the controller hands it the addresses from the
    // Services' status before the first pass.
    let restarted = LocalProvider::new(pool()?, Default::default());
    for (spec, status) in specs.iter().zip(&statuses) {
        restarted.adopt(&spec.service, status).await?;
    }
    let startup = restarted.counter().snapshot();
    let start = Instant::now();
    pass(&restarted, &specs, &nodes, run.concurrency).await?;
    let wall = start.elapsed();
    let pass_calls = restarted.counter().snapshot().since(&startup);
    Ok(Row {
        provider: "local",
        lbs: run.lbs,
        rate_bound: Duration::ZERO,
        pass: pass_calls,
        startup: startup.total(),
        wall,
        latency: Duration::ZERO,
    })
}

/// Above this many load balancers the AWS run uses one shared ELB security group.
const AWS_SHARED_GROUP_ABOVE: usize = 500;

async fn aws(run: &Run) -> Result<Row, Error> {
    use aws_config::{BehaviorVersion, Region};
    use aws_credential_types::Credentials;
    use kube_lb_mock_aws::{FaultPlan, FaultProxy, MotoServer};
    use kube_lb_provider_aws::{AwsProvider, CloudConfig};

    const CLUSTER: &str = "bench";
    let sdk = |endpoint: String| async move {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "bench"))
            .http_client(kube_lb_provider_aws::clients::http_client())
            .load()
            .await
    };
    let moto = MotoServer::start().await?;
    let network = moto.cluster_network(CLUSTER, 3).await?;
    let nodes: Vec<BackendNode> = network
        .instances
        .iter()
        .enumerate()
        .map(|(i, id)| {
            node(
                &format!("node-{i}"),
                Some(format!("aws:///us-east-1a/{id}")),
                &format!("10.0.1.{}", 10 + i),
                "us-east-1a",
            )
        })
        .collect::<Result<_, _>>()?;
    let specs: Vec<_> = (0..run.lbs)
        .map(|i| spec(Cloud::Aws, i, json!({})))
        .collect::<Result<_, _>>()?;
    // Each Classic ELB with its own group adds one rule to the node group, and AWS caps rules
    // per group (60 by default, 1,000 at most; moto refuses near 1,000): beyond a few hundred
    // load balancers a cluster needs upstream's `ElbSecurityGroup` (one group for every ELB,
    // one node rule), so the bench uses it there.
    let shared_group = if run.lbs > AWS_SHARED_GROUP_ABOVE {
        let created = moto
            .ec2(
                "CreateSecurityGroup",
                &[
                    ("GroupName", "bench-elbs"),
                    (
                        "GroupDescription",
                        "shared group of every ELB (ElbSecurityGroup)",
                    ),
                    ("VpcId", &network.vpc),
                ],
            )
            .await?;
        let group = kube_lb_mock_aws::xml_value(&created, "groupId")
            .ok_or("CreateSecurityGroup answered without a groupId")?;
        println!(
            "  aws: {} load balancers > {AWS_SHARED_GROUP_ABOVE}: ElbSecurityGroup={group} (AWS caps rules per security group)",
            run.lbs
        );
        Some(group)
    } else {
        None
    };
    let setup = AwsProvider::new(
        &sdk(moto.endpoint()).await,
        CloudConfig {
            rate_limits: RateLimits::unlimited(),
            elb_security_group: shared_group.clone(),
            ..CloudConfig::default()
        },
        CLUSTER,
    );
    pass(&setup, &specs, &nodes, 8).await?;

    let proxy = FaultProxy::start(moto.addr(), FaultPlan::None).await?;
    proxy.set_latency(run.latency);
    let config = CloudConfig {
        elb_security_group: shared_group,
        ..CloudConfig::default()
    };
    let limits = config.rate_limits.clone();
    let restarted = AwsProvider::new(&sdk(proxy.endpoint()).await, config, CLUSTER);
    let start = Instant::now();
    pass(&restarted, &specs, &nodes, run.concurrency).await?;
    let wall = start.elapsed();
    let pass_calls = restarted.call_counter().snapshot();
    // `elb:DescribeTags` → family `elb-read` (one bucket per service and access).
    let rate_bound = rate_bound(&pass_calls, &limits, |record| {
        let service = record.operation.split(':').next().unwrap_or_default();
        let access = match record.kind {
            CallKind::Read => "read",
            CallKind::Mutate => "mutate",
        };
        format!("{service}-{access}")
    });
    Ok(Row {
        provider: "aws",
        lbs: run.lbs,
        pass: pass_calls,
        startup: 0,
        wall,
        latency: run.latency,
        rate_bound,
    })
}

async fn gcp(run: &Run) -> Result<Row, Error> {
    use kube_lb_mock_gce::MockGce;
    use kube_lb_provider_gcp::{CloudConfig, GcpProvider, Options, PollSettings};

    let gce = MockGce::builder()
        .external_pool("198.18.0.0/15")
        .instance("us-central1-a", "gke-c1-node-1", &["gke-c1-node"])
        .instance("us-central1-b", "gke-c1-node-2", &["gke-c1-node"])
        .instance("us-central1-a", "gke-c1-node-3", &["gke-c1-node"])
        .start()
        .await?;
    let config = || {
        CloudConfig::parse(&format!(
            "[global]\nproject-id = {}\nlocal-zone = us-central1-a\nmultizone = true\n\
             network-name = default\nsubnetwork-name = default\ncluster-id = c1\n\
             token-url = nil\napi-endpoint = {}/compute/v1/\n",
            gce.project(),
            gce.url()
        ))
    };
    let nodes: Vec<BackendNode> = [
        ("us-central1-a", "gke-c1-node-1"),
        ("us-central1-b", "gke-c1-node-2"),
        ("us-central1-a", "gke-c1-node-3"),
    ]
    .iter()
    .enumerate()
    .map(|(i, (zone, name))| {
        node(
            name,
            Some(format!("gce://{}/{zone}/{name}", gce.project())),
            &format!("10.128.0.{}", 10 + i),
            zone,
        )
    })
    .collect::<Result<_, _>>()?;
    let specs: Vec<_> = (0..run.lbs)
        .map(|i| spec(Cloud::Gcp, i, json!({})))
        .collect::<Result<_, _>>()?;
    let setup = GcpProvider::from_config(
        config()?,
        "c1",
        Options {
            limits: RateLimits::unlimited(),
            poll: PollSettings {
                initial: Duration::from_millis(1),
                max: Duration::from_millis(5),
                timeout: Duration::from_secs(30),
            },
            ..Options::default()
        },
    )
    .await?;
    pass(&setup, &specs, &nodes, 8).await?;

    gce.set_latency(run.latency);
    let options = Options::default();
    let limits = options.limits.clone();
    let restarted = GcpProvider::from_config(config()?, "c1", options).await?;
    let startup = restarted.calls().snapshot();
    let start = Instant::now();
    pass(&restarted, &specs, &nodes, run.concurrency).await?;
    let wall = start.elapsed();
    let pass_calls = restarted.calls().snapshot().since(&startup);
    // `regionOperations.get` → `operations`, `forwardingRules.get` → `forwardingRules`.
    let rate_bound = rate_bound(&pass_calls, &limits, |record| {
        if record.operation.ends_with("Operations.get") {
            "operations".to_string()
        } else {
            record
                .operation
                .split('.')
                .next()
                .unwrap_or_default()
                .to_string()
        }
    });
    Ok(Row {
        provider: "gcp",
        lbs: run.lbs,
        pass: pass_calls,
        startup: startup.total(),
        wall,
        latency: run.latency,
        rate_bound,
    })
}

async fn azure(run: &Run) -> Result<Row, Error> {
    use kube_lb_mock_azure::{CLIENT_ID, CLIENT_SECRET, LOCATION, MockArm, SUBSCRIPTION, TENANT};
    use kube_lb_provider_azure::{AzureConfig, AzureProvider, PollSettings, ProviderOptions};

    let arm = MockArm::builder()
        .subnet(
            "cluster-rg",
            "cluster-vnet",
            "10.224.0.0/12",
            "nodes",
            "10.224.0.0/16",
        )
        .security_group("cluster-rg", "cluster-nsg")
        .public_ip_pool("20.50.0.0/16".parse()?)
        .start()
        .await?;
    let config: AzureConfig = serde_json::from_value(json!({
        "cloud": "AzurePublicCloud",
        "tenantId": TENANT,
        "subscriptionId": SUBSCRIPTION,
        "aadClientId": CLIENT_ID,
        "aadClientSecret": CLIENT_SECRET,
        "resourceGroup": "cluster-rg",
        "location": LOCATION,
        "vnetName": "cluster-vnet",
        "subnetName": "nodes",
        "securityGroupName": "cluster-nsg",
        "loadBalancerSku": "standard",
        "vmType": "vmss",
        "resourceManagerEndpoint": arm.url(),
        "activeDirectoryEndpoint": arm.url(),
    }))?;
    let nodes: Vec<BackendNode> = (1..=3)
        .map(|i| {
            node(
                &format!("node-{i}"),
                None,
                &format!("10.224.0.{}", 10 + i),
                "1",
            )
        })
        .collect::<Result<_, _>>()?;
    // Half internal: a Standard Load Balancer takes at most 600 frontends, and the cluster
    // has one public and one internal load balancer.
    let specs: Vec<_> = (0..run.lbs)
        .map(|i| {
            let annotations = if i % 2 == 1 {
                json!({"service.beta.kubernetes.io/azure-load-balancer-internal": "true"})
            } else {
                json!({})
            };
            spec(Cloud::Azure, i, annotations)
        })
        .collect::<Result<_, _>>()?;
    let setup = AzureProvider::new(
        &config,
        "kubernetes",
        ProviderOptions {
            limits: RateLimits::unlimited(),
            poll: PollSettings {
                default_interval: Duration::from_millis(1),
                max_interval: Duration::from_millis(20),
                max_polls: 200,
            },
            retry: RetryPolicy {
                base: Duration::from_millis(5),
                max: Duration::from_millis(50),
                max_attempts: 5,
            },
            ..ProviderOptions::default()
        },
    )?;
    pass(&setup, &specs, &nodes, 8).await?;

    arm.set_latency(run.latency);
    let options = ProviderOptions::default();
    let limits = options.limits.clone();
    let restarted = AzureProvider::new(&config, "kubernetes", options)?;
    let start = Instant::now();
    pass(&restarted, &specs, &nodes, run.concurrency).await?;
    let wall = start.elapsed();
    let pass_calls = restarted.calls().snapshot();
    let rate_bound = rate_bound(&pass_calls, &limits, |record| match record.kind {
        CallKind::Read => "arm-read".to_string(),
        CallKind::Mutate => "arm-write".to_string(),
    });
    Ok(Row {
        provider: "azure",
        lbs: run.lbs,
        pass: pass_calls,
        startup: 0,
        wall,
        latency: run.latency,
        rate_bound,
    })
}

fn secs(d: Duration) -> String {
    format!("{:.2}s", d.as_secs_f64())
}

fn print(rows: &[Row], run: &Run) {
    println!(
        "\nrestart resync: first full pass after a restart, concurrency {}, +{} ms per cloud call, default rate limits",
        run.concurrency,
        run.latency.as_millis()
    );
    println!(
        "{:<6} {:>6} {:>7} {:>7} {:>8} {:>9} {:>10} {:>11} {:>10} {:>10}",
        "cloud",
        "LBs",
        "reads",
        "mutate",
        "reads/LB",
        "wall",
        "rate bound",
        "lat. bound",
        "wall/bound",
        "LBC/wall"
    );
    let lbc_low = Duration::from_secs(600);
    for row in rows {
        let calls = row.pass.total();
        let concurrency = u32::try_from(run.concurrency.max(1)).unwrap_or(u32::MAX);
        let latency_bound = row.latency * u32::try_from(calls).unwrap_or(u32::MAX) / concurrency;
        let bound = row.rate_bound.max(latency_bound);
        // Counts and durations here are far below 2^52: exact enough as f64.
        #[allow(clippy::cast_precision_loss)]
        let per_lb = row.pass.reads() as f64 / row.lbs.max(1) as f64;
        let over_bound = if bound.is_zero() {
            "-".to_string()
        } else {
            format!("{:.2}", row.wall.as_secs_f64() / bound.as_secs_f64())
        };
        let lbc = if row.wall.is_zero() {
            "-".to_string()
        } else {
            format!("{:.0}x", lbc_low.as_secs_f64() / row.wall.as_secs_f64())
        };
        println!(
            "{:<6} {:>6} {:>7} {:>7} {:>8.2} {:>9} {:>10} {:>11} {:>10} {:>10}",
            row.provider,
            row.lbs,
            row.pass.reads(),
            row.pass.mutations(),
            per_lb,
            secs(row.wall),
            secs(row.rate_bound),
            secs(latency_bound),
            over_bound,
            lbc,
        );
    }
    for row in rows {
        println!(
            "  {}: reads by operation {:?}{}",
            row.provider,
            row.pass.operations(CallKind::Read),
            if row.startup > 0 {
                format!(" (plus {} start-up calls before the pass)", row.startup)
            } else {
                String::new()
            }
        );
    }
    println!(
        "  reference: aws-load-balancer-controller needs 10–20 min after a leader change at \
         1,000 load balancers (LBC#3326); LBC/wall compares its 10 min with this pass"
    );
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let run = Run {
        lbs: env_or("KUBE_LB_BENCH_LBS", 1000),
        latency: Duration::from_millis(
            u64::try_from(env_or("KUBE_LB_BENCH_LATENCY_MS", 50)).unwrap_or(50),
        ),
        concurrency: env_or("CONCURRENCY", 4),
    };
    let providers = std::env::var("KUBE_LB_BENCH_PROVIDERS")
        .unwrap_or_else(|_| "local,aws,gcp,azure".to_string());
    let mut rows = Vec::new();
    for provider in providers.split(',').map(str::trim) {
        let started = Instant::now();
        let row = match provider {
            "local" => local(&run).await?,
            "aws" => aws(&run).await?,
            "gcp" => gcp(&run).await?,
            "azure" => azure(&run).await?,
            other => return Err(format!("unknown provider {other}").into()),
        };
        eprintln!(
            "{provider}: done in {} (setup included)",
            secs(started.elapsed())
        );
        if row.pass.mutations() > 0 {
            eprintln!(
                "{provider}: the pass mutated: {:?}",
                row.pass.operations(CallKind::Mutate)
            );
        }
        rows.push(row);
    }
    print(&rows, &run);
    Ok(())
}

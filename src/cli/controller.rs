//! `kube-lb controller`: the Service load-balancer controller for a real cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kube_lb_provider_core::CallCounter;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cloud::{self, CloudArgs};
use crate::controller::{ControllerConfig, LoadBalancerController};
use crate::leader::{LeaderConfig, LeaderElector, default_identity};
use crate::metrics::Metrics;

/// How long in-flight reconciles may take to finish after a shutdown signal before the lease
/// is released regardless.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(10);

/// Arguments of `kube-lb controller`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Why is a Service <pending>? Every Service this controller manages \
carries the condition kube-lb.io/LoadBalancerReady: status True (reason Provisioned), Unknown \
(Pending, CloudThrottled, CloudError: retried) or False (AnnotationInvalid, CloudRejected, \
NameTaken when the owner is known to be someone else: fix the Service or the resource named; \
QuotaExceeded, PermissionDenied, PoolExhausted, AddressInUse, SharingConflict, \
MissingDependency, Deleting: retried with backoff), with a message naming what to \
change and the annotations that were ignored. It is mirrored into an Event whenever its text \
changes, and again every 30 min while the Service is reconciled (LoadBalancerReady when True, \
LoadBalancerNotReady otherwise), which `kubectl describe svc` shows.\n\nExample:\n  \
kubectl wait --for=condition=kube-lb.io/LoadBalancerReady svc/web --timeout=60s\n  \
kubectl get svc web -o jsonpath='{.status.conditions[?(@.type==\"kube-lb.io/LoadBalancerReady\")].message}'\n  \
Load balancer ready at 127.20.79.1.\n\nLeaked cloud resources: --audit-interval 10m runs \
`kube-lb audit` on the leader and exports kube_lb_audit_leaked_resources{provider,kind}."
)]
pub struct Args {
    #[command(flatten)]
    pub cloud: CloudArgs,

    /// Kubeconfig file; without it `$KUBECONFIG`, `~/.kube/config` and then the in-cluster
    /// service account are tried, in that order.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The `spec.loadBalancerClass` this controller handles.
    #[arg(long, env = "KUBE_LB_LOAD_BALANCER_CLASS")]
    pub load_balancer_class: Option<String>,

    /// Whether Services without `spec.loadBalancerClass` are handled too. Defaults to true when
    /// no `--load-balancer-class` is given, false otherwise (as upstream, a classed controller
    /// leaves unclassed Services to the default implementation).
    #[arg(long, env = "KUBE_LB_DEFAULT_CLASS")]
    pub default_class: Option<bool>,

    /// Services reconciled in parallel.
    #[arg(long, env = "KUBE_LB_CONCURRENCY", default_value_t = 4)]
    pub concurrency: u16,

    /// Elect a leader on a Lease so only one replica acts.
    #[arg(long, env = "KUBE_LB_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease (in a Pod: its own, from `POD_NAMESPACE`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "kube-system")]
    pub leader_elect_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "KUBE_LB_LEADER_ELECT_NAME",
        default_value = "kube-lb-controller"
    )]
    pub leader_elect_name: String,

    /// Lease validity after the last renewal: another replica takes over this long after it
    /// last saw the lease change.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15s")]
    pub leader_elect_lease_duration: Duration,

    /// How long a leader keeps acting after the start of its last successful renewal; must be
    /// shorter than the lease duration (the difference is the fencing margin).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub leader_elect_renew_deadline: Duration,

    /// Interval between lease attempts; must be shorter than the renew deadline.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    pub leader_elect_retry_period: Duration,

    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "KUBE_LB_METRICS_ADDR", default_value = "0.0.0.0:10258")]
    pub metrics_addr: SocketAddr,

    /// First retry delay after a retryable failure (doubles per failure).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub backoff_base: Duration,

    /// Longest retry delay.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "300s")]
    pub backoff_max: Duration,

    /// How long a node that was Ready may report NotReady or Unknown and stay a load-balancer
    /// backend (flaps shorter than this re-program nothing); 0s removes it at once.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub node_ready_grace: Duration,

    /// Longest one ensure or delete of one Service may take before it is abandoned and retried
    /// with backoff (a backstop: each provider also bounds every cloud request it makes).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "15m")]
    pub provider_timeout: Duration,

    /// Audit for leaked cloud resources this often (what `kube-lb audit` lists; reads only, on
    /// the leader) and export `kube_lb_audit_leaked_resources{provider,kind}`; 0s turns it off.
    #[arg(
        long,
        env = "KUBE_LB_AUDIT_INTERVAL",
        value_parser = humantime::parse_duration,
        default_value = "0s"
    )]
    pub audit_interval: Duration,

    /// With --audit-interval: remove the resources of Services that are gone (deleted, or
    /// deleting without kube-lb's finalizer) once two audits in a row found them leaked, through
    /// the provider's delete, and count them in kube_lb_audit_deleted_resources_total. Leaks of
    /// Services that still exist are left to their reconcile, shared ones to `kube-lb audit
    /// --delete`.
    #[arg(long, env = "KUBE_LB_AUDIT_DELETE")]
    pub audit_delete: bool,
}

/// A client from `--kubeconfig`, or the inferred configuration.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    client_for(kubeconfig, None, None).await
}

/// A client from `kubeconfig` (or `$KUBECONFIG`, `~/.kube/config`, in-cluster) using
/// `context` instead of the current context when given, and giving up connecting after
/// `connect_timeout` (the `kubectl kube-lb` plugin's `--context` and `--request-timeout`).
pub async fn client_for(
    kubeconfig: Option<&std::path::Path>,
    context: Option<&str>,
    connect_timeout: Option<Duration>,
) -> anyhow::Result<kube::Client> {
    let options = kube::config::KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let mut config = match (kubeconfig, context) {
        (Some(path), _) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options).await?
        }
        (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
        (None, None) => kube::Config::infer().await?,
    };
    if connect_timeout.is_some() {
        config.connect_timeout = connect_timeout;
    }
    Ok(kube::Client::try_from(config)?)
}

/// Runs `kube-lb controller`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let identity = default_identity();
    // Checked before anything connects: bad timings are a usage error, not a runtime one.
    let leader = args
        .leader_elect
        .then(|| {
            let mut leader = LeaderConfig::new(
                &args.leader_elect_namespace,
                &args.leader_elect_name,
                identity.clone(),
            );
            leader.lease_duration = args.leader_elect_lease_duration;
            leader.renew_deadline = args.leader_elect_renew_deadline;
            leader.retry_period = args.leader_elect_retry_period;
            leader.validate().map(|()| leader)
        })
        .transpose()
        .context(
            "invalid --leader-elect-lease-duration, --leader-elect-renew-deadline or --leader-elect-retry-period",
        )?;
    anyhow::ensure!(
        !args.provider_timeout.is_zero(),
        "invalid --provider-timeout 0s: it must be longer than the slowest ensure (default 15m)"
    );
    anyhow::ensure!(
        !args.audit_delete || !args.audit_interval.is_zero(),
        "--audit-delete removes what the periodic audit finds: give --audit-interval too (e.g. 10m)"
    );
    let client = client(args.kubeconfig.as_deref()).await?;
    let counter = CallCounter::new();
    let metrics = Arc::new(Metrics::new());
    metrics.observe_calls(&counter);
    let provider = cloud::build(&args.cloud.with_cluster_identity(&client).await, counter).await?;

    let mut config = ControllerConfig::new(args.cloud.cloud.annotations_cloud());
    config.default_class = args
        .default_class
        .unwrap_or(args.load_balancer_class.is_none());
    config.load_balancer_class = args.load_balancer_class;
    config.concurrency = args.concurrency;
    config.backoff_base = args.backoff_base;
    config.backoff_max = args.backoff_max;
    config.node_ready_grace = args.node_ready_grace;
    config.provider_timeout = args.provider_timeout;
    config.identity = identity;

    let shutdown = CancellationToken::new();
    // The lease is given up only after the controller stopped, its in-flight reconciles
    // finished (at most SHUTDOWN_DRAIN after the signal): no write of this replica lands after
    // the next leader started. Ending the campaign with `shutdown` would drop those reconciles
    // mid-request and release the lease while their requests may still be applied.
    let campaign = CancellationToken::new();
    let (leading, elector) = if let Some(leader) = leader {
        let (rx, task) = LeaderElector::new(client.clone(), leader)?.spawn(campaign.clone());
        (rx, Some(task))
    } else {
        (watch::channel(true).1, None)
    };
    // Ready as soon as we serve: followers are ready too (they stand by).
    let (_ready_tx, ready_rx) = watch::channel(true);
    let (_, server) = crate::health::serve(
        args.metrics_addr,
        metrics.clone(),
        ready_rx,
        shutdown.clone(),
    )
    .await
    .with_context(|| format!("binding --metrics-addr {}", args.metrics_addr))?;

    let audit = (!args.audit_interval.is_zero()).then(|| {
        tokio::spawn(crate::audit::run_periodic(
            client.clone(),
            provider.provider.clone(),
            config.clone(),
            metrics.clone(),
            crate::audit::PeriodicAudit {
                interval: args.audit_interval,
                delete: args.audit_delete,
            },
            leading.clone(),
            shutdown.clone(),
        ))
    });
    // The local provider's address pools: IPPools when the CRD is installed.
    let pools = provider.local.clone().map(|local| {
        tokio::spawn(crate::controller::pools::run(
            client.clone(),
            local,
            leading.clone(),
            config.identity.clone(),
            shutdown.clone(),
        ))
    });
    if let Some(local) = &provider.local {
        // kube_lb_ip_pool_addresses_* read the allocator at every scrape.
        metrics.track_pools(local.clone());
    }
    let mut controller = LoadBalancerController::new(client, provider.provider, config, metrics);
    if let Some(local) = &provider.local {
        controller = controller.retry_pending_on(local.changes());
    }
    let signal = shutdown.clone();
    let drained = campaign.clone();
    tokio::spawn(async move {
        crate::cli::wait_for_signal().await;
        tracing::info!("shutting down");
        signal.cancel();
        // A reconcile hung on an unreachable API server must not keep the lease for ever.
        tokio::time::sleep(SHUTDOWN_DRAIN).await;
        drained.cancel();
    });
    let result = controller.run(leading, shutdown.clone()).await;
    shutdown.cancel();
    campaign.cancel();
    if let Some(elector) = elector {
        let _ = elector.await;
    }
    let _ = server.await;
    if let Some(audit) = audit {
        let _ = audit.await;
    }
    if let Some(pools) = pools {
        let _ = pools.await;
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

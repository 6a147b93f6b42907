//! `kube-lb plan`: what the controller would change in the cloud, without changing anything.
//!
//! For every Service the controller would act on, the provider computes, from the cloud's
//! current state and with reads only, the calls its `ensure` (or, for a Service being deleted
//! or no longer ours, its `delete`) would make. The Services are judged exactly as the
//! controller judges them: the same disposition, the same annotation parser, the same node
//! and EndpointSlice filters. A provider that keeps its state in memory (`local`) first
//! re-adopts the addresses recorded in the Service statuses, as the controller does when it
//! starts.
//!
//! Any read that fails makes the whole answer incomplete: it is reported, naming the Service
//! and the call, and the exit status is 1 — never "no changes".

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube_lb_provider_core::{
    BackendNode, CallCounter, ChangeAction, LoadBalancerProvider, PlannedChange, ProviderError,
    ServiceKey,
};
use serde::Serialize;

use crate::audit;
use crate::cloud::{self, CloudArgs, CloudName};
use crate::controller::{self, ControllerConfig, Disposition, ServiceName, nodes, tolerant};

/// Where the Services come from, and which of them this controller handles; shared by
/// `plan` and `audit`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    /// Kubeconfig of the cluster to read; without it (and without `-f`) `$KUBECONFIG`,
    /// `~/.kube/config` and then the in-cluster service account are tried, in that order.
    #[arg(long, conflicts_with = "files")]
    pub kubeconfig: Option<PathBuf>,

    /// Read Services, Nodes and EndpointSlices from manifests instead of a cluster (file or
    /// directory, repeatable, `-` reads stdin), loaded into an embedded API server.
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,

    /// The state file a `kube-lb reconcile --state-file` run wrote: its Services, with the
    /// UIDs their load balancers were named and tagged after, are what is planned or audited
    /// (the `-f` manifests, if any, are applied over them). Read, never written. Without it,
    /// manifests' Services keep the `metadata.uid` they carry, or get a new one, which matches
    /// no load balancer built before.
    #[arg(long, value_name = "FILE", conflicts_with = "kubeconfig")]
    pub state_file: Option<PathBuf>,

    /// The `spec.loadBalancerClass` the controller handles (as `controller
    /// --load-balancer-class`).
    #[arg(long, env = "KUBE_LB_LOAD_BALANCER_CLASS")]
    pub load_balancer_class: Option<String>,

    /// Whether Services without `spec.loadBalancerClass` are handled too; defaults as for
    /// `controller`: true without `--load-balancer-class`, false with it.
    #[arg(long, env = "KUBE_LB_DEFAULT_CLASS")]
    pub default_class: Option<bool>,
}

impl ClusterArgs {
    /// The controller settings these flags describe, for `cloud`.
    pub fn controller_config(&self, cloud: CloudName) -> ControllerConfig {
        let mut config = ControllerConfig::new(cloud.annotations_cloud());
        config.default_class = self
            .default_class
            .unwrap_or(self.load_balancer_class.is_none());
        config.load_balancer_class = self.load_balancer_class.clone();
        config
    }
}

/// A cluster to read: a real one through a kubeconfig, or the embedded API server holding the
/// `-f` manifests.
pub(crate) struct Cluster {
    /// The client.
    pub client: Client,
    /// Services of the manifests that the embedded API server could not take, with why.
    pub refused: Vec<(ServiceName, String)>,
    /// The embedded API server holds a state file's objects: its kube-system namespace, and
    /// so the cluster's identity, is the one the run that wrote the file had. True for a live
    /// cluster too.
    pub lasting: bool,
    #[cfg(feature = "apiserver")]
    server: Option<kube_lb_apiserver::RunningApiServer>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects as `args` say.
    pub async fn connect(args: &ClusterArgs) -> anyhow::Result<Self> {
        if args.files.is_empty() && args.state_file.is_none() {
            let client = crate::cli::controller::client(args.kubeconfig.as_deref()).await?;
            return Ok(Self {
                client,
                refused: Vec::new(),
                lasting: true,
                #[cfg(feature = "apiserver")]
                server: None,
            });
        }
        Self::embedded(&args.files, args.state_file.as_deref()).await
    }

    #[cfg(feature = "apiserver")]
    async fn embedded(files: &[String], state_file: Option<&Path>) -> anyhow::Result<Self> {
        let texts = crate::manifests::read(files)?;
        let mut builder = kube_lb_apiserver::ApiServer::builder();
        if let Some(path) = state_file {
            builder = builder.state_file_read_only(path);
        }
        let server = builder
            .start()
            .await
            .context("starting the embedded API server")?;
        let mut refused = Vec::new();
        for manifest in &texts {
            for row in crate::cli::reconcile::load_manifest(&server, manifest)? {
                refused.push((
                    ServiceName {
                        namespace: row.namespace,
                        name: row.name,
                    },
                    row.event,
                ));
            }
        }
        let client = server.client().context("building a client")?;
        Ok(Self {
            client,
            refused,
            lasting: state_file.is_some(),
            server: Some(server),
        })
    }

    #[cfg(not(feature = "apiserver"))]
    async fn embedded(_files: &[String], _state_file: Option<&Path>) -> anyhow::Result<Self> {
        anyhow::bail!(
            "-f and --state-file need the embedded API server, and this binary was built \
             without the `apiserver` feature; use --kubeconfig"
        )
    }

    /// `cloud` with the cluster's identity filled in (`--cluster-id`, else the kube-system UID
    /// of a live cluster or of a state file; manifests alone have none that lasts).
    pub async fn cloud_args(&self, cloud: &CloudArgs) -> CloudArgs {
        if self.lasting {
            cloud.with_cluster_identity(&self.client).await
        } else {
            cloud.clone()
        }
    }

    /// Stops the embedded API server, if one runs.
    pub async fn close(self) {
        #[cfg(feature = "apiserver")]
        if let Some(server) = self.server {
            server.shutdown().await;
        }
    }
}

/// Arguments of `kube-lb plan`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Exit status: 0 nothing would change; 1 an error (a refused cloud read, an invalid Service, an \
unreachable cluster) — the plan is then incomplete and never reported as empty; 2 changes are \
pending, only with --detailed-exitcode (without it, pending changes also exit 0). A usage error \
exits 2 as well (clap's convention).

Only reads are made: the cloud's describe/get/list calls and, for the `local` provider, the \
re-adoption of the addresses recorded in Service statuses (kept in this process's memory). The \
`local` pool remembers no ports outside the process that serves them, so from a separate \
process its plan shows new load balancers and address changes, not port changes.

JSON (-o json): {\"provider\", \"services\": [{\"namespace\", \"name\", \"operation\": \
\"ensure\"|\"delete\", \"status\": \"changes\"|\"inSync\"|\"implementedElsewhere\"|\"error\", \
\"changes\": [{\"action\": \"create\"|\"modify\"|\"delete\", \"kind\", \"name\", \"call\", \
\"fields\": [{\"field\", \"old\", \"new\"}], \"phase\"?, \"dependsOn\"?}], \"error\"?}], \"summary\": {\"create\", \"modify\", \
\"delete\", \"servicesWithChanges\", \"servicesInSync\", \"errors\"}}; services sorted by \
namespace/name, changes in the order the provider would make them, old/new null where absent. \
A change with \"phase\" (2, 3, …) needs the result of the phases before it (an id the cloud \
assigns, a load balancer ready again): it is planned from their expected result and planned \
again once they have run; \"dependsOn\" says what it waits for. Without \"phase\", a change \
is exactly what the next reconcile runs first.

Examples:
  kube-lb plan --cloud aws --cloud-config aws.conf --detailed-exitcode
  kube-lb plan --cloud local -f services.yaml -o json

  $ kube-lb plan -f services.yaml --detailed-exitcode; echo $?
  default/shop (ensure):
    + create Address 127.240.0.4 (allocate)
        address: (none) → 127.240.0.4
        ports: (none) → http:80/TCP
  default/web (ensure): in sync
  shop/api (ensure):
    ~ modify Address 127.240.0.2 (allocate)
        address: 127.240.0.2 → 127.240.0.50

  Plan: 1 to create, 1 to modify, 0 to delete, for 2 Service(s); 1 in sync.
  2")]
pub struct Args {
    #[command(flatten)]
    pub cloud: CloudArgs,

    #[command(flatten)]
    pub cluster: ClusterArgs,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Exit 2 when changes are pending (0 only when nothing would change).
    #[arg(long)]
    pub detailed_exitcode: bool,

    /// As `controller --node-ready-grace`: how long a NotReady node stays a backend.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "60s")]
    pub node_ready_grace: std::time::Duration,
}

/// Output formats of `plan` and `audit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// Readable text.
    Table,
    /// One JSON document (documented in `--help`).
    Json,
}

/// Which provider method a Service's plan comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Operation {
    /// `ensure`: the Service is a load balancer of ours.
    Ensure,
    /// `delete`: the Service is being deleted, or carries our finalizer and is no longer ours.
    Delete,
}

/// How a Service's plan came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanStatus {
    /// Calls are pending.
    Changes,
    /// Nothing would change.
    InSync,
    /// Another controller implements this load balancer; nothing is done.
    ImplementedElsewhere,
    /// The plan could not be computed (see `error`).
    Error,
}

/// The plan of one Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePlan {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Which provider method was planned.
    pub operation: Operation,
    /// The outcome.
    pub status: PlanStatus,
    /// The calls, in order.
    pub changes: Vec<PlannedChange>,
    /// Why the plan failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ServicePlan {
    fn from_result(
        name: ServiceName,
        operation: Operation,
        result: Result<Vec<PlannedChange>, ProviderError>,
        provider: &str,
    ) -> Self {
        let (status, changes, error) = match result {
            Ok(changes) if changes.is_empty() => (PlanStatus::InSync, changes, None),
            Ok(changes) => (PlanStatus::Changes, changes, None),
            Err(ProviderError::ImplementedElsewhere) => {
                (PlanStatus::ImplementedElsewhere, Vec::new(), None)
            }
            Err(error) => {
                let method = match operation {
                    Operation::Ensure => "plan_ensure",
                    Operation::Delete => "plan_delete",
                };
                (
                    PlanStatus::Error,
                    Vec::new(),
                    Some(format!("{provider} {method}: {error}")),
                )
            }
        };
        Self {
            namespace: name.namespace,
            name: name.name,
            operation,
            status,
            changes,
            error,
        }
    }

    fn failed(name: ServiceName, operation: Operation, error: String) -> Self {
        Self {
            namespace: name.namespace,
            name: name.name,
            operation,
            status: PlanStatus::Error,
            changes: Vec::new(),
            error: Some(error),
        }
    }
}

/// Totals of a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Planned creates.
    pub create: usize,
    /// Planned modifications.
    pub modify: usize,
    /// Planned deletes.
    pub delete: usize,
    /// Services with at least one planned call.
    pub services_with_changes: usize,
    /// Services whose load balancer is in sync.
    pub services_in_sync: usize,
    /// Services whose plan failed.
    pub errors: usize,
}

/// Everything `kube-lb plan` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanReport {
    /// The provider's name.
    pub provider: &'static str,
    /// Per Service, sorted by namespace/name.
    pub services: Vec<ServicePlan>,
    /// Totals.
    pub summary: Summary,
    /// What a reader must know before trusting the plan (load balancers that belong to a
    /// Service of the same namespace/name with another UID).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl PlanReport {
    /// A report over `services` (sorted here).
    pub fn new(provider: &'static str, mut services: Vec<ServicePlan>) -> Self {
        services.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let mut summary = Summary::default();
        for service in &services {
            match service.status {
                PlanStatus::Changes => summary.services_with_changes += 1,
                PlanStatus::InSync => summary.services_in_sync += 1,
                PlanStatus::Error => summary.errors += 1,
                PlanStatus::ImplementedElsewhere => {}
            }
            for change in &service.changes {
                match change.action {
                    ChangeAction::Create => summary.create += 1,
                    ChangeAction::Modify => summary.modify += 1,
                    ChangeAction::Delete => summary.delete += 1,
                }
            }
        }
        Self {
            provider,
            services,
            summary,
            warnings: Vec::new(),
        }
    }

    /// 1 on any error (the plan is incomplete), 2 with pending changes when `detailed`, else 0.
    pub fn exit_code(&self, detailed: bool) -> u8 {
        if self.summary.errors > 0 {
            1
        } else if detailed && self.summary.services_with_changes > 0 {
            2
        } else {
            0
        }
    }
}

fn value(v: Option<&str>) -> &str {
    v.unwrap_or("(none)")
}

/// The readable form: one block per Service with its calls and their fields `old → new`, then
/// a summary line that says "No changes" only when every plan was computed.
pub fn table(report: &PlanReport) -> String {
    let mut out = String::new();
    for service in &report.services {
        let operation = match service.operation {
            Operation::Ensure => "ensure",
            Operation::Delete => "delete",
        };
        let head = format!("{}/{} ({operation})", service.namespace, service.name);
        match service.status {
            PlanStatus::InSync => out.push_str(&format!("{head}: in sync\n")),
            PlanStatus::ImplementedElsewhere => out.push_str(&format!(
                "{head}: implemented by another controller; nothing to do\n"
            )),
            PlanStatus::Error => out.push_str(&format!(
                "{head}: ERROR: {}\n",
                service.error.as_deref().unwrap_or("unknown error")
            )),
            PlanStatus::Changes => {
                out.push_str(&format!("{head}:\n"));
                let mut shown_phase = 1;
                for change in &service.changes {
                    if change.phase > shown_phase {
                        shown_phase = change.phase;
                        out.push_str(&format!(
                            "  then (phase {}, planned again once {} is known):\n",
                            change.phase,
                            change.depends_on.as_deref().unwrap_or("the phase before")
                        ));
                    }
                    let sign = match change.action {
                        ChangeAction::Create => '+',
                        ChangeAction::Modify => '~',
                        ChangeAction::Delete => '-',
                    };
                    out.push_str(&format!(
                        "  {sign} {} {} {} ({})\n",
                        change.action, change.kind, change.name, change.call
                    ));
                    for field in &change.fields {
                        out.push_str(&format!(
                            "      {}: {} → {}\n",
                            field.field,
                            value(field.old.as_deref()),
                            value(field.new.as_deref())
                        ));
                    }
                }
            }
        }
    }
    if !report.services.is_empty() {
        out.push('\n');
    }
    let s = &report.summary;
    if s.errors > 0 {
        out.push_str(&format!(
            "Plan incomplete: {} error(s); the calls above are not the whole plan.\n",
            s.errors
        ));
    } else if s.services_with_changes == 0 {
        out.push_str(&format!(
            "No changes: {} load balancer(s) in sync.\n",
            s.services_in_sync
        ));
    } else {
        out.push_str(&format!(
            "Plan: {} to create, {} to modify, {} to delete, for {} Service(s); {} in sync.\n",
            s.create, s.modify, s.delete, s.services_with_changes, s.services_in_sync
        ));
    }
    out
}

/// Lists every `K`, skipping (with a warning) the objects that do not decode, as the
/// controller's watches skip them.
async fn list_tolerant<K>(client: Client, what: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let (objects, undecodable) = tolerant::list_all::<K>(client)
        .await
        .with_context(|| format!("listing {what}"))?;
    for error in undecodable {
        tracing::warn!(%error, "skipped, as the controller skips it");
    }
    Ok(objects)
}

/// Computes the plan of every Service of `client` the controller would act on. Errors of one
/// Service are recorded in its entry; only a failure to read the cluster itself is an `Err`.
pub async fn plan(
    client: Client,
    provider: &dyn LoadBalancerProvider,
    config: &ControllerConfig,
    node_ready_grace: std::time::Duration,
) -> anyhow::Result<PlanReport> {
    let (services, undecodable) = audit::list_services(client.clone())
        .await
        .context("listing Services")?;
    let nodes: Vec<Node> = list_tolerant(client.clone(), "Nodes").await?;
    let slices: Vec<EndpointSlice> = list_tolerant(client, "EndpointSlices").await?;
    controller::adopt_statuses(provider, &services).await;

    let readiness = nodes::Readiness::now(node_ready_grace);
    let eligible = nodes::eligible_nodes(nodes.iter(), &readiness);
    let mut plans = Vec::new();
    for broken in undecodable.into_iter().filter(|u| u.maybe_ours) {
        plans.push(ServicePlan::failed(
            ServiceName {
                namespace: broken.view.namespace,
                name: broken.view.name,
            },
            Operation::Ensure,
            broken.error.to_string(),
        ));
    }
    for service in &services {
        plans.extend(plan_one(service, provider, config, &eligible, &slices).await);
    }
    Ok(PlanReport::new(provider.name(), plans))
}

/// The plan of one Service, as the controller's next reconcile of it would run (`None` when
/// the controller leaves it alone). `eligible`: the nodes that may be backends; `slices`: the
/// cluster's EndpointSlices (for `externalTrafficPolicy: Local`). The provider must have
/// adopted the Services' statuses first ([`controller::adopt_statuses`]).
pub async fn plan_one(
    service: &Service,
    provider: &dyn LoadBalancerProvider,
    config: &ControllerConfig,
    eligible: &[BackendNode],
    slices: &[EndpointSlice],
) -> Option<ServicePlan> {
    let name = ServiceName::of(service);
    let deleting = service.metadata.deletion_timestamp.is_some();
    let plan = match Disposition::of(service, config) {
        Disposition::Ignore => return None,
        Disposition::Manage if !deleting => match kube_lb_annotations::parse(config.cloud, service)
        {
            Err(errors) => ServicePlan::failed(
                name,
                Operation::Ensure,
                format!("invalid Service: {errors}"),
            ),
            Ok(parsed) => {
                let spec = parsed.spec;
                let backends = nodes::provider_backends(&spec, eligible, slices.iter(), |n| {
                    provider.accepts_node(&spec, n)
                });
                let result = provider.plan_ensure(&spec, &backends).await;
                ServicePlan::from_result(name, Operation::Ensure, result, provider.name())
            }
        },
        Disposition::Manage | Disposition::Release => match controller::service_key(service) {
            Err(error) => ServicePlan::failed(name, Operation::Delete, error.to_string()),
            Ok(key) => {
                let result = provider.plan_delete(&key).await;
                ServicePlan::from_result(name, Operation::Delete, result, provider.name())
            }
        },
    };
    Some(plan)
}

/// Runs `kube-lb plan`. Every failure exits 1 (not the binary's generic 2, which here means
/// "changes pending").
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match execute(&args).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(error) => {
            eprintln!("error: {error:#}");
            Ok(ExitCode::from(1))
        }
    }
}

/// Warnings for the cloud resources that may belong to these Services under other UIDs: a
/// Service of the same namespace/name with another UID, or, while some Service owns nothing,
/// a resource that records only a UID. On manifests without a state file that is every
/// load balancer built before (each run gives new UIDs to objects that carry none), and the
/// plan then builds them a second time.
async fn other_uid_warnings(
    client: Client,
    provider: &dyn LoadBalancerProvider,
    config: &ControllerConfig,
) -> Vec<String> {
    let found = match audit::find_leaks(client, provider, config).await {
        Ok(found) => found,
        Err(error) => {
            tracing::debug!(%error, "listing owned resources for the identity check failed");
            return Vec::new();
        }
    };
    let uid_unknown = !found.unowned_services.is_empty();
    let mut by_service: std::collections::BTreeMap<&ServiceKey, Vec<String>> =
        std::collections::BTreeMap::new();
    for leak in &found.leaks {
        if crate::cli::audit::unconfirmed(leak, uid_unknown).is_some() {
            let resource = &leak.resource;
            by_service
                .entry(&resource.service)
                .or_default()
                .push(format!("{} {}", resource.kind, resource.name));
        }
    }
    by_service
        .into_iter()
        .map(|(service, resources)| {
            let built_for = if service.name.is_empty() {
                format!("a Service with UID {}", service.uid)
            } else {
                format!("{service} with UID {}", service.uid)
            };
            format!(
                "{} cloud resource(s) ({}) were built for {built_for}, which none of these \
                 Services is by UID: the plan may build a load balancer beside them. Manifests' \
                 Services get new UIDs unless they carry metadata.uid; run with --state-file \
                 (the file `reconcile --state-file` wrote) or --kubeconfig",
                resources.len(),
                resources.join(", "),
            )
        })
        .collect()
}

async fn execute(args: &Args) -> anyhow::Result<u8> {
    let cluster = Cluster::connect(&args.cluster).await?;
    let config = args.cluster.controller_config(args.cloud.cloud);
    let result = async {
        let provider =
            cloud::build(&cluster.cloud_args(&args.cloud).await, CallCounter::new()).await?;
        let mut report = plan(
            cluster.client.clone(),
            provider.provider.as_ref(),
            &config,
            args.node_ready_grace,
        )
        .await?;
        if !cluster.lasting {
            report.warnings =
                other_uid_warnings(cluster.client.clone(), provider.provider.as_ref(), &config)
                    .await;
        }
        anyhow::Ok(report)
    }
    .await;
    let refused = cluster.refused.clone();
    cluster.close().await;
    let mut report = result?;
    if !refused.is_empty() {
        let mut services = report.services;
        services.extend(
            refused
                .into_iter()
                .map(|(name, why)| ServicePlan::failed(name, Operation::Ensure, why)),
        );
        let warnings = report.warnings;
        report = PlanReport::new(report.provider, services);
        report.warnings = warnings;
    }
    for warning in &report.warnings {
        eprintln!("warning: {warning}");
    }
    match args.output {
        Output::Table => print!("{}", table(&report)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
    }
    Ok(report.exit_code(args.detailed_exitcode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, status: PlanStatus, changes: Vec<PlannedChange>) -> ServicePlan {
        ServicePlan {
            namespace: "default".into(),
            name: name.into(),
            operation: Operation::Ensure,
            status,
            changes,
            error: (status == PlanStatus::Error).then(|| "local plan_ensure: boom".to_string()),
        }
    }

    fn create() -> PlannedChange {
        PlannedChange::new(ChangeAction::Create, "Address", "127.240.0.1", "allocate").field(
            "address",
            None,
            Some("127.240.0.1".into()),
        )
    }

    #[test]
    fn exit_codes() {
        let in_sync = entry("a", PlanStatus::InSync, vec![]);
        let changes = entry("b", PlanStatus::Changes, vec![create()]);
        let error = entry("c", PlanStatus::Error, vec![]);
        let elsewhere = entry("d", PlanStatus::ImplementedElsewhere, vec![]);
        // (case, services, exit without / with --detailed-exitcode)
        let cases = [
            ("nothing at all", vec![], (0, 0)),
            ("in sync", vec![in_sync.clone()], (0, 0)),
            ("another controller's", vec![elsewhere], (0, 0)),
            ("changes", vec![in_sync.clone(), changes.clone()], (0, 2)),
            (
                "an error wins over changes",
                vec![changes, error.clone()],
                (1, 1),
            ),
            ("an error alone", vec![in_sync, error], (1, 1)),
        ];
        for (case, services, (plain, detailed)) in cases {
            let report = PlanReport::new("local", services);
            assert_eq!(report.exit_code(false), plain, "{case}");
            assert_eq!(report.exit_code(true), detailed, "{case}");
        }
    }

    #[test]
    fn table_shows_calls_fields_and_never_no_changes_on_errors() {
        let modify = PlannedChange::new(ChangeAction::Modify, "Address", "127.240.0.2", "allocate")
            .field(
                "ports",
                Some("http:80/TCP".into()),
                Some("http:8080/TCP".into()),
            );
        let report = PlanReport::new(
            "local",
            vec![
                entry("web", PlanStatus::Changes, vec![modify]),
                entry("new", PlanStatus::Changes, vec![create()]),
                entry("ok", PlanStatus::InSync, vec![]),
            ],
        );
        let text = table(&report);
        let want = "\
default/new (ensure):
  + create Address 127.240.0.1 (allocate)
      address: (none) → 127.240.0.1
default/ok (ensure): in sync
default/web (ensure):
  ~ modify Address 127.240.0.2 (allocate)
      ports: http:80/TCP → http:8080/TCP

Plan: 1 to create, 1 to modify, 0 to delete, for 2 Service(s); 1 in sync.
";
        assert_eq!(text, want);

        let quiet = PlanReport::new("local", vec![entry("ok", PlanStatus::InSync, vec![])]);
        assert!(table(&quiet).ends_with("No changes: 1 load balancer(s) in sync.\n"));
        let failed = PlanReport::new(
            "local",
            vec![
                entry("ok", PlanStatus::InSync, vec![]),
                entry("bad", PlanStatus::Error, vec![]),
            ],
        );
        let text = table(&failed);
        assert!(!text.contains("No changes"), "{text}");
        assert!(
            text.contains("default/bad (ensure): ERROR: local plan_ensure: boom"),
            "{text}"
        );
        assert!(text.contains("Plan incomplete: 1 error(s)"), "{text}");
    }

    #[test]
    fn json_is_stable() {
        let report = PlanReport::new(
            "local",
            vec![entry("new", PlanStatus::Changes, vec![create()])],
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "provider": "local",
                "services": [{
                    "namespace": "default",
                    "name": "new",
                    "operation": "ensure",
                    "status": "changes",
                    "changes": [{
                        "action": "create",
                        "kind": "Address",
                        "name": "127.240.0.1",
                        "call": "allocate",
                        "fields": [{"field": "address", "old": null, "new": "127.240.0.1"}]
                    }]
                }],
                "summary": {
                    "create": 1, "modify": 0, "delete": 0,
                    "servicesWithChanges": 1, "servicesInSync": 0, "errors": 0
                }
            })
        );
    }
}

//! `kube-lb reconcile`: one shot. Loads manifests into an embedded API server, runs the
//! controller until every LoadBalancer Service has an address or a user error, prints the
//! Services and exits 0 (all have addresses), 1 (any user error) or 2 (timeout, other failure).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DeleteParams, ListParams};
use kube_lb_apiserver::ApiServer;
use kube_lb_provider_core::CallCounter;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::cloud::{self, CloudArgs};
use crate::controller::status::{current_ingress, external_ip_column};
use crate::controller::{ControllerConfig, LoadBalancerController, Outcome, Outcomes, ServiceName};
use crate::manifests;
use crate::metrics::Metrics;

/// Arguments of `kube-lb reconcile`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 every LoadBalancer Service has an address (or is left to another \
controller: STATUS External), 1 at least one has a user error (shown with its Warning event text), 2 timeout or any other failure.\n\nThe \
embedded API server holds only what the manifests contain: include the Nodes a cloud provider \
should use as backends (and EndpointSlices for externalTrafficPolicy: Local).\n\nExamples:\n  \
kube-lb reconcile -f examples/local/\n  kube-lb reconcile -f svc.yaml -f nodes.yaml --cloud aws \
--state-file state.json\n  kube-lb reconcile -f svc.yaml --state-file state.json --delete"
)]
pub struct Args {
    /// Manifest file or directory; repeatable (`-` reads stdin).
    #[arg(
        short = 'f',
        long = "filename",
        required = true,
        value_name = "FILE|DIR|-"
    )]
    pub files: Vec<String>,

    #[command(flatten)]
    pub cloud: CloudArgs,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    pub output: Output,

    /// Give up (exit 2) after this long.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2m")]
    pub timeout: Duration,

    /// Keep the API server's objects in this file between runs (same UIDs, so the same load
    /// balancers; for `local` also the same addresses).
    #[arg(long)]
    pub state_file: Option<PathBuf>,

    /// After converging, delete the Services and wait until every load balancer is gone.
    #[arg(long)]
    pub delete: bool,

    /// The `spec.loadBalancerClass` to handle (unclassed Services are always handled here).
    #[arg(long)]
    pub load_balancer_class: Option<String>,

    /// Services reconciled in parallel.
    #[arg(long, default_value_t = 4)]
    pub concurrency: u16,

    /// First retry delay after a retryable failure (doubles per failure, up to 30 s).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub backoff_base: Duration,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// kubectl-like columns.
    Table,
    /// A JSON array.
    Json,
    /// A YAML list.
    Yaml,
}

/// One printed Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `spec.type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Addresses, `<pending>` or `<none>`.
    pub external_ip: String,
    /// `port[:nodePort]/PROTOCOL`, comma separated.
    pub ports: String,
    /// `Ready`, `Error`, `Pending`, `External` (left to another controller), `Deleted` or `-`
    /// (not a load balancer of ours).
    pub status: String,
    /// The Warning event text for errors; empty otherwise.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub event: String,
}

/// The exit code for a set of outcomes: 1 when any Service has a user error.
pub fn exit_code(rows: &[Row]) -> u8 {
    u8::from(rows.iter().any(|r| r.status == "Error"))
}

fn ports_column(service: &Service) -> String {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_deref())
        .unwrap_or_default();
    if ports.is_empty() {
        return "<none>".to_string();
    }
    ports
        .iter()
        .map(|p| {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            match p.node_port {
                Some(node_port) => format!("{}:{node_port}/{protocol}", p.port),
                None => format!("{}/{protocol}", p.port),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Builds the printed rows from the Services and the controller's outcomes.
pub fn rows(
    services: &[Service],
    outcomes: &Outcomes,
    managed: impl Fn(&Service) -> bool,
) -> Vec<Row> {
    let mut rows: Vec<Row> = services
        .iter()
        .map(|service| {
            let name = ServiceName::of(service);
            let type_ = service
                .spec
                .as_ref()
                .and_then(|s| s.type_.clone())
                .unwrap_or_else(|| "ClusterIP".to_string());
            let ingress = current_ingress(service);
            let (status, event) = if !managed(service) {
                ("-".to_string(), String::new())
            } else {
                match outcomes.get(&name) {
                    Some(Outcome::Ready(_)) => ("Ready".to_string(), String::new()),
                    Some(Outcome::UserError(text)) => ("Error".to_string(), text.clone()),
                    Some(Outcome::Retrying(text)) => ("Pending".to_string(), text.clone()),
                    Some(Outcome::ImplementedElsewhere) => (
                        "External".to_string(),
                        "load balancer implemented by another controller".to_string(),
                    ),
                    None => ("Pending".to_string(), String::new()),
                }
            };
            let external_ip = if type_ == "LoadBalancer" {
                external_ip_column(&ingress)
            } else {
                "<none>".to_string()
            };
            Row {
                namespace: name.namespace,
                name: name.name,
                type_,
                external_ip,
                ports: ports_column(service),
                status,
                event,
            }
        })
        .collect();
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    rows
}

/// kubectl-style columns.
pub fn table(rows: &[Row]) -> String {
    let header = [
        "NAMESPACE",
        "NAME",
        "TYPE",
        "EXTERNAL-IP",
        "PORTS",
        "STATUS/EVENT",
    ];
    let cells: Vec<[String; 6]> = rows
        .iter()
        .map(|r| {
            let status = if r.event.is_empty() {
                r.status.clone()
            } else {
                format!("{}: {}", r.status, r.event)
            };
            [
                r.namespace.clone(),
                r.name.clone(),
                r.type_.clone(),
                r.external_ip.clone(),
                r.ports.clone(),
                status,
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &cells {
        for (i, cell) in row.iter().enumerate().take(5) {
            widths[i] = widths[i].max(cell.len());
        }
    }
    let line = |cols: [&str; 6]| {
        let mut out = String::new();
        for (i, col) in cols.iter().enumerate() {
            if i == 5 {
                out.push_str(col);
            } else {
                out.push_str(&format!("{col:<width$}   ", width = widths[i]));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header);
    for row in &cells {
        out.push_str(&line([
            &row[0], &row[1], &row[2], &row[3], &row[4], &row[5],
        ]));
    }
    out
}

fn managed_names(services: &[Service], config: &ControllerConfig) -> Vec<ServiceName> {
    services
        .iter()
        .filter(|s| config.manages(s) && s.metadata.deletion_timestamp.is_none())
        .map(ServiceName::of)
        .collect()
}

/// The managed Services already being deleted (a state file that recorded a delete in
/// progress): settled when they are gone, not when they have an address.
fn deleting(services: &[Service], config: &ControllerConfig) -> Vec<Service> {
    services
        .iter()
        .filter(|s| config.manages(s) && s.metadata.deletion_timestamp.is_some())
        .cloned()
        .collect()
}

/// Waits until every one of `services` is gone (its cleanup done, the finalizer off), by
/// watching each.
async fn wait_gone(client: &kube::Client, services: &[Service]) -> bool {
    for service in services {
        let api: Api<Service> = Api::namespaced(
            client.clone(),
            service.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let uid = service.metadata.uid.clone().unwrap_or_default();
        let name = service.metadata.name.clone().unwrap_or_default();
        if kube::runtime::wait::await_condition(
            api,
            &name,
            kube::runtime::wait::conditions::is_deleted(&uid),
        )
        .await
        .is_err()
        {
            return false;
        }
    }
    true
}

/// True when every managed Service is settled: an address, a user error, or left to another
/// controller.
fn settled(names: &[ServiceName], outcomes: &Outcomes) -> bool {
    names.iter().all(|n| {
        matches!(
            outcomes.get(n),
            Some(Outcome::Ready(_) | Outcome::UserError(_) | Outcome::ImplementedElsewhere)
        )
    })
}

/// Runs `kube-lb reconcile`.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let texts = manifests::read(&args.files)?;
    let mut builder = ApiServer::builder();
    if let Some(path) = &args.state_file {
        builder = builder.state_file(path);
    }
    let server = builder
        .start()
        .await
        .context("starting the embedded API server")?;
    // IPPools may come with the manifests; the local provider uses them when present.
    server
        .apply_manifests(crate::controller::pools::IPPOOL_CRD)
        .context("installing the IPPool CRD")?;
    let mut refused = Vec::new();
    for manifest in &texts {
        refused.extend(load_manifest(&server, manifest)?);
    }
    let client = server.client().context("building a client")?;
    let counter = CallCounter::new();
    let metrics = Arc::new(Metrics::new());
    metrics.observe_calls(&counter);
    // With a state file the embedded kube-system namespace lasts from run to run, and with it
    // the cluster's identity, as on a real cluster; `plan` and `audit --state-file` read the
    // same one. Without it there is none that lasts.
    let cloud_args = match &args.state_file {
        Some(_) => args.cloud.with_cluster_identity(&client).await,
        None => args.cloud.clone(),
    };
    let provider = cloud::build(&cloud_args, counter).await?;
    if let Some(local) = &provider.local {
        let pools: Api<kube::api::DynamicObject> =
            Api::all_with(client.clone(), &crate::controller::pools::ippool_resource());
        let listed: Vec<Arc<kube::api::DynamicObject>> = pools
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        local.set_pools(crate::controller::pools::pool_defs(&listed));
    }

    let mut config = ControllerConfig::new(args.cloud.cloud.annotations_cloud());
    config.load_balancer_class = args.load_balancer_class.clone();
    config.default_class = true;
    config.concurrency = args.concurrency;
    config.backoff_base = args.backoff_base;
    config.backoff_max = Duration::from_secs(30);
    config.identity = "kube-lb-reconcile".to_string();

    let services_api: Api<Service> = Api::all(client.clone());
    let services = services_api.list(&ListParams::default()).await?.items;
    let names = managed_names(&services, &config);
    let deleting = deleting(&services, &config);

    let controller = LoadBalancerController::new(
        client.clone(),
        provider.provider.clone(),
        config.clone(),
        metrics,
    );
    let mut outcomes = controller.outcomes();
    let shutdown = CancellationToken::new();
    let (_leading_tx, leading) = watch::channel(true);
    let task = tokio::spawn(controller.run(leading, shutdown.clone()));

    let deadline = tokio::time::Instant::now() + args.timeout;
    let converged = tokio::time::timeout_at(deadline, async {
        outcomes.wait_for(|o| settled(&names, o)).await.is_ok()
            && wait_gone(&client, &deleting).await
    })
    .await
    .unwrap_or(false);
    let final_outcomes = outcomes.borrow().clone();
    let services = services_api.list(&ListParams::default()).await?.items;
    let mut rows = rows(&services, &final_outcomes, |s| config.manages(s));
    rows.extend(refused);
    rows.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let mut failure: Option<String> = (!converged).then(|| {
        format!(
            "timed out after {} waiting for load balancers",
            humantime::format_duration(args.timeout)
        )
    });

    if converged && args.delete {
        match delete_all(
            &services_api,
            &services,
            &config,
            provider.provider.as_ref(),
            deadline,
        )
        .await
        {
            Ok(()) => {
                for row in rows.iter_mut().filter(|r| r.status != "-") {
                    row.status = "Deleted".to_string();
                    row.external_ip = "<none>".to_string();
                }
            }
            Err(error) => failure = Some(format!("{error:#}")),
        }
    }
    shutdown.cancel();
    // The answer is known; a controller slow to wind down must not hold the exit code back.
    if tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .is_err()
    {
        tracing::warn!("the controller did not stop within 10 s; exiting anyway");
    }
    server.shutdown().await;

    print(&rows, args.output)?;
    if let Some(failure) = failure {
        eprintln!("error: {failure}");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::from(exit_code(&rows)))
}

/// Applies one manifest file object by object, so one bad object cannot keep the others from
/// converging. A Service goes through [`manifests::service_object`] — the same step `kube-lb
/// lint` judges — and exactly the value it returns is applied, so the controller parses what
/// lint parsed. Objects that cannot be used (a wrong-typed field, or refused by the API server's
/// validation) come back as `Error` rows naming the object and the field; only a file that is
/// not YAML/JSON at all fails the run.
pub(crate) fn load_manifest(
    server: &kube_lb_apiserver::RunningApiServer,
    manifest: &manifests::Manifest,
) -> anyhow::Result<Vec<Row>> {
    let source = manifest.source.display().to_string();
    let documents = manifests::documents(&source, &manifest.text)
        .with_context(|| format!("reading {source}"))?;
    let mut objects = Vec::new();
    for document in documents {
        match document {
            Value::Null => {}
            Value::Object(mut map)
                if map
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List"))
                    && map.get("items").is_some_and(Value::is_array) =>
            {
                if let Some(Value::Array(items)) = map.remove("items") {
                    objects.extend(items);
                }
            }
            other => objects.push(other),
        }
    }
    let mut refused = Vec::new();
    for object in objects {
        let (kind, described) = manifests::describe(&object);
        let object = if kind == "Service" {
            match manifests::service_object(object.clone()) {
                Ok((_, value)) => value,
                Err(error) => {
                    tracing::warn!(object = %described, error = %error.message, "manifest object refused");
                    refused.push(refused_row(&object, error.message));
                    continue;
                }
            }
        } else {
            object
        };
        if let Err(error) = server.apply_manifests(&object.to_string()) {
            let message = format!("refused by the API server: {error}");
            tracing::warn!(object = %described, error = %message, "manifest object refused");
            if kind == "Service" {
                refused.push(refused_row(&object, message));
            } else {
                // Not a Service: no row to carry it and no load balancer depends on it directly
                // (a refused Node or EndpointSlice shows up as a Service that does not converge).
                eprintln!("warning: {source}: {described} skipped: {message}");
            }
        }
    }
    Ok(refused)
}

/// The `Error` row of a Service that never reached the API server.
fn refused_row(object: &Value, message: String) -> Row {
    let meta = object.get("metadata");
    let text = |field: &str, default: &str| {
        meta.and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .map_or_else(
                || default.to_owned(),
                |s| kube_lb_annotations::truncate(s, 253).into_owned(),
            )
    };
    let type_ = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .map_or_else(
            || "ClusterIP".to_owned(),
            |s| kube_lb_annotations::truncate(s, 63).into_owned(),
        );
    Row {
        namespace: text("namespace", "default"),
        name: text("name", "<no name>"),
        type_,
        external_ip: "<none>".to_owned(),
        ports: "-".to_owned(),
        status: "Error".to_owned(),
        event: message,
    }
}

/// Deletes every managed Service and waits until the API server no longer has them (the
/// finalizer is removed only after the provider deleted the load balancer) and the provider
/// reports nothing left.
async fn delete_all(
    api: &Api<Service>,
    services: &[Service],
    config: &ControllerConfig,
    provider: &dyn kube_lb_provider_core::LoadBalancerProvider,
    deadline: tokio::time::Instant,
) -> anyhow::Result<()> {
    let doomed: Vec<&Service> = services.iter().filter(|s| config.manages(s)).collect();
    for service in &doomed {
        let name = ServiceName::of(service);
        Api::<Service>::namespaced(api.clone().into_client(), &name.namespace)
            .delete(&name.name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting {name}"))?;
    }
    let mut keys = BTreeMap::new();
    for service in &doomed {
        keys.insert(
            ServiceName::of(service),
            crate::controller::service_key(service)?,
        );
    }
    loop {
        let left = api.list(&ListParams::default()).await?.items;
        let mut remaining = left
            .iter()
            .filter(|s| keys.contains_key(&ServiceName::of(s)))
            .count();
        if remaining == 0 {
            for key in keys.values() {
                if provider.status(key).await?.is_some() {
                    remaining += 1;
                }
            }
            if remaining == 0 {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out waiting for {remaining} load balancer(s) to be deleted");
        }
        // Polling the in-process API server is cheap; a watch would add little here.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn print(rows: &[Row], output: Output) -> anyhow::Result<()> {
    match output {
        Output::Table => print!("{}", table(rows)),
        Output::Json => println!("{}", serde_json::to_string_pretty(rows)?),
        Output::Yaml => print!("{}", serde_yaml_ng::to_string(rows)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, status: &str, event: &str) -> Row {
        Row {
            namespace: "default".into(),
            name: name.into(),
            type_: "LoadBalancer".into(),
            external_ip: "127.240.0.1".into(),
            ports: "80:30080/TCP".into(),
            status: status.into(),
            event: event.into(),
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(exit_code(&[row("a", "Ready", "")]), 0);
        assert_eq!(
            exit_code(&[row("a", "Ready", ""), row("b", "Error", "bad")]),
            1
        );
        assert_eq!(exit_code(&[]), 0);
        assert_eq!(
            exit_code(&[row("a", "Ready", ""), row("nlb-ip", "External", "other")]),
            0,
            "a load balancer left to another controller is not a failure"
        );
    }

    #[test]
    fn table_has_kubectl_like_columns() {
        let out = table(&[
            row("web", "Ready", ""),
            row("bad", "Error", "annotation x = \"y\": nope"),
        ]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].starts_with("NAMESPACE   NAME   TYPE"),
            "{}",
            lines[0]
        );
        assert!(lines[0].ends_with("STATUS/EVENT"));
        assert!(lines[1].ends_with("Ready"));
        assert!(lines[2].ends_with("Error: annotation x = \"y\": nope"));
    }
}

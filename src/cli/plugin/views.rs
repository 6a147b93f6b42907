//! What `kubectl kube-lb status`, `inspect` and `pools` read from the cluster and print.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::cloud::CloudName;
use crate::controller::conditions::CONDITION_TYPE;
use crate::controller::pools::ippool_resource;

/// Shown where a value is unknown or not recorded.
const NONE: &str = "-";

fn is_load_balancer(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
}

fn provider_name(cloud: CloudName) -> String {
    clap::ValueEnum::to_possible_value(&cloud)
        .map(|v| v.get_name().to_owned())
        .unwrap_or_else(|| format!("{cloud:?}"))
}

/// The addresses a Service shows, or `<pending>`.
fn addresses(service: &Service) -> String {
    let shown: Vec<String> = service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
        .collect();
    if shown.is_empty() {
        "<pending>".to_owned()
    } else {
        shown.join(",")
    }
}

fn ready_condition(
    service: &Service,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    service
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|all| all.iter().find(|c| c.type_ == CONDITION_TYPE))
}

/// Left-aligned columns separated by three spaces, as `kubectl get` prints them.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `status`: one line per LoadBalancer Service in every namespace.
pub(super) async fn status(client: &Client, cloud: CloudName) -> anyhow::Result<ExitCode> {
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Services")?;
    let mut rows = vec![
        [
            "SERVICE",
            "ADDRESS",
            "PROVIDER",
            "READY",
            "REASON",
            "ANNOUNCED-BY",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    let provider = provider_name(cloud);
    for service in services.items.iter().filter(|s| is_load_balancer(s)) {
        let condition = ready_condition(service);
        rows.push(vec![
            format!(
                "{}/{}",
                service.namespace().unwrap_or_default(),
                service.name_any()
            ),
            addresses(service),
            provider.clone(),
            condition.map_or(NONE.to_owned(), |c| c.status.clone()),
            condition.map_or(NONE.to_owned(), |c| c.reason.clone()),
            // The Layer-2 announcer of an address is elected among the nodes' dataplanes from
            // their leases and is not written anywhere in the cluster, so it cannot be shown.
            NONE.to_owned(),
        ]);
    }
    if rows.len() == 1 {
        println!("no LoadBalancer Services");
    } else {
        print!("{}", table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// `inspect NAMESPACE/NAME`.
pub(super) async fn inspect(
    client: &Client,
    cloud: CloudName,
    target: &str,
    last_events: usize,
) -> anyhow::Result<ExitCode> {
    let (namespace, name) = target.split_once('/').unwrap_or(("default", target));
    anyhow::ensure!(
        !namespace.is_empty() && !name.is_empty(),
        "expected NAMESPACE/NAME, got `{target}`"
    );
    let service = Api::<Service>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading Service {namespace}/{name}"))?
        .with_context(|| format!("Service {namespace}/{name} not found"))?;
    let mut out = String::new();
    let _ = writeln!(out, "service: {namespace}/{name}");
    let _ = writeln!(out, "address: {}", addresses(&service));
    let _ = writeln!(out, "provider: {}", provider_name(cloud));
    match kube_lb_annotations::parse(cloud.annotations_cloud(), &service) {
        Ok(parsed) => {
            let yaml = serde_yaml_ng::to_string(&parsed.spec)?;
            let _ = writeln!(out, "spec:\n{}", indent(&yaml));
            for warning in &parsed.warnings {
                let _ = writeln!(out, "warning: {warning}");
            }
        }
        Err(errors) => {
            let _ = writeln!(
                out,
                "spec: <invalid>\nerrors:\n{}",
                indent(&errors.to_string())
            );
        }
    }
    match ready_condition(&service) {
        Some(c) => {
            let _ = writeln!(
                out,
                "condition: {CONDITION_TYPE}={} reason={} since={}\n  message: {}",
                c.status, c.reason, c.last_transition_time.0, c.message
            );
        }
        None => {
            let _ = writeln!(out, "condition: {CONDITION_TYPE} not set yet");
        }
    }
    let mut events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=Service,involvedObject.name={name}"
        )))
        .await
        .context("listing the Service's events")?
        .items;
    // A filter the API server ignored must not show other objects' events.
    events.retain(|e| e.involved_object.name.as_deref() == Some(name));
    events.sort_by_key(event_time);
    let skip = events.len().saturating_sub(last_events);
    let _ = writeln!(out, "events:");
    if events.is_empty() {
        let _ = writeln!(out, "  <none>");
    }
    for event in &events[skip..] {
        let _ = writeln!(
            out,
            "  {} {} {} (x{}): {}",
            event_time(event).map_or(NONE.to_owned(), |t| t.to_string()),
            event.type_.as_deref().unwrap_or(NONE),
            event.reason.as_deref().unwrap_or(NONE),
            event.count.unwrap_or(1),
            event.message.as_deref().unwrap_or_default()
        );
    }
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

fn event_time(event: &Event) -> Option<k8s_openapi::jiff::Timestamp> {
    event
        .last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `pools`: every IPPool's size, use and conflicts from the status the controller writes.
pub(super) async fn pools(client: &Client) -> anyhow::Result<ExitCode> {
    let api = Api::<DynamicObject>::all_with(client.clone(), &ippool_resource());
    let pools = match api.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            println!(
                "no IPPools: the IPPool CRD is not installed (addresses come from the \
                 controller's --local-pool)"
            );
            return Ok(ExitCode::SUCCESS);
        }
        Err(error) => return Err(error).context("listing IPPools"),
    };
    if pools.is_empty() {
        println!("no IPPools");
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = vec![
        [
            "POOL",
            "V4-SIZE",
            "V4-USED",
            "V4-FREE",
            "V6-SIZE",
            "V6-USED",
            "V6-FREE",
            "CONFLICTS",
        ]
        .map(str::to_owned)
        .to_vec(),
    ];
    for pool in &pools {
        let status = pool.data.get("status");
        let mut row = vec![pool.name_any()];
        for family in ["ipv4", "ipv6"] {
            let count = |field: &str| {
                status
                    .and_then(|s| s.get(family))
                    .and_then(|f| f.get(field))
                    .and_then(Value::as_i64)
            };
            match (count("assigned"), count("available")) {
                (Some(used), Some(free)) => {
                    row.push(used.saturating_add(free).to_string());
                    row.push(used.to_string());
                    row.push(free.to_string());
                }
                _ => row.extend([NONE, NONE, NONE].map(str::to_owned)),
            }
        }
        row.push(conflicts(status));
        rows.push(row);
    }
    print!("{}", table(&rows));
    Ok(ExitCode::SUCCESS)
}

/// The pool's conditions that report a problem, as `Reason: message`, or `-`.
fn conflicts(status: Option<&Value>) -> String {
    let problems: Vec<String> = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| {
            // `Valid` is good when True; `Overlapping` and `AddressesStranded` when False.
            let truth = c["status"] == "True";
            if c["type"] == "Valid" { !truth } else { truth }
        })
        .map(|c| {
            format!(
                "{}: {}",
                c["reason"].as_str().unwrap_or(NONE),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if problems.is_empty() {
        NONE.to_owned()
    } else {
        problems.join("; ")
    }
}

/// The cluster's LoadBalancer Services as one YAML stream, for `lint`.
pub(super) async fn load_balancer_services_yaml(client: &Client) -> anyhow::Result<String> {
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Services")?;
    let mut text = String::new();
    for mut service in services.items.into_iter().filter(is_load_balancer) {
        service.metadata.managed_fields = None;
        text.push_str("---\n");
        text.push_str(&serde_yaml_ng::to_string(&service)?);
    }
    Ok(text)
}

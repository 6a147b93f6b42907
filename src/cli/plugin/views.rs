//! What `kubectl kube-lb status`, `inspect` and `pools` read from the cluster and print.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::cli::plan;
use crate::cloud::{CloudArgs, CloudName};
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
    // Who announces each address on Layer 2, from the announcers' own events: a node that
    // takes an address over says so (L2Announcing), an address no node may announce is
    // reported (L2NotAnnounced). Without the L2 component there are none.
    let mut layer2_events = Vec::new();
    for reason in [L2_ANNOUNCING, L2_NOT_ANNOUNCED] {
        let listed = Api::<Event>::all(client.clone())
            .list(&ListParams::default().fields(&format!("reason={reason}")))
            .await
            .with_context(|| format!("listing the {reason} events"))?;
        layer2_events.extend(listed.items);
    }
    let announcers = announcers(&layer2_events);
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
            announcers
                .get(&(service.namespace().unwrap_or_default(), service.name_any()))
                .cloned()
                .unwrap_or_else(|| NONE.to_owned()),
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
) -> anyhow::Result<Service> {
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
    Ok(service)
}

/// The cloud side of `inspect`: the cloud resources the Service owns (as `audit` lists them)
/// and the live plan (what the controller's next reconcile of it would call), through the
/// provider `cloud` builds. A provider that cannot be built or read is said, not fatal: the
/// cluster side was already shown.
pub(super) async fn inspect_cloud(client: &Client, cloud: &CloudArgs, service: &Service) {
    match cloud_view(client, cloud, service).await {
        Ok(text) => print!("{text}"),
        Err(error) => println!("cloud resources: not read: {error:#}"),
    }
}

async fn cloud_view(
    client: &Client,
    cloud: &CloudArgs,
    service: &Service,
) -> anyhow::Result<String> {
    let args = cloud.with_cluster_identity(client).await;
    let built = crate::cloud::build(&args, kube_lb_provider_core::CallCounter::new()).await?;
    let provider = built.provider.as_ref();
    let services = Api::<Service>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Services")?
        .items;
    // As the controller at its start: the provider learns what the statuses show it built.
    crate::controller::adopt_statuses(provider, &services).await;
    let mut out = String::new();
    let uid = service.metadata.uid.as_deref().unwrap_or_default();
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let owned = provider
        .owned_resources()
        .await
        .context("listing the cloud resources of this cluster")?;
    let mine: Vec<_> = owned
        .iter()
        .filter(|r| {
            (!uid.is_empty() && crate::audit::uid_matches(uid, &r.service.uid))
                || (r.service.namespace == namespace && r.service.name == name)
        })
        .collect();
    let _ = writeln!(out, "cloud resources ({}):", provider.name());
    if mine.is_empty() {
        let _ = writeln!(out, "  <none>");
    }
    for resource in mine {
        let shared = if resource.shared { " (shared)" } else { "" };
        let _ = writeln!(out, "  {} {}{shared}", resource.kind, resource.name);
    }
    let nodes: Vec<k8s_openapi::api::core::v1::Node> = Api::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Nodes")?
        .items;
    let slices: Vec<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing EndpointSlices")?
        .items;
    let readiness = crate::controller::nodes::Readiness::now(std::time::Duration::from_secs(60));
    let eligible = crate::controller::nodes::eligible_nodes(nodes.iter(), &readiness);
    let config = crate::controller::ControllerConfig::new(cloud.cloud.annotations_cloud());
    match plan::plan_one(service, provider, &config, &eligible, &slices).await {
        None => {
            let _ = writeln!(out, "plan: not handled by this controller");
        }
        Some(planned) => {
            let report = plan::PlanReport::new(provider.name(), vec![planned]);
            let _ = writeln!(out, "plan:\n{}", indent(&plan::table(&report)));
        }
    }
    Ok(out)
}

/// The reason of the event a node's Layer-2 announcer records on a Service when it takes one
/// of its addresses over; its `reportingInstance` is the node and its note starts with the
/// address.
const L2_ANNOUNCING: &str = "L2Announcing";
/// The reason of the warning recorded when no live node may announce an address.
const L2_NOT_ANNOUNCED: &str = "L2NotAnnounced";

/// Per Service (namespace, name): the nodes announcing its addresses, from the newest
/// Layer-2 event of each address (`none` for an address no node announces), comma separated.
pub(super) fn announcers(events: &[Event]) -> std::collections::BTreeMap<(String, String), String> {
    use std::collections::BTreeMap;
    type Newest<'a> =
        BTreeMap<(String, String, String), (Option<k8s_openapi::jiff::Timestamp>, &'a Event)>;
    let mut newest: Newest = BTreeMap::new();
    for event in events {
        let object = &event.involved_object;
        let reason = event.reason.as_deref().unwrap_or_default();
        if object.kind.as_deref() != Some("Service")
            || ![L2_ANNOUNCING, L2_NOT_ANNOUNCED].contains(&reason)
        {
            continue;
        }
        let address = event
            .message
            .as_deref()
            .and_then(|m| m.split_whitespace().next())
            .unwrap_or_default()
            .to_owned();
        let key = (
            object.namespace.clone().unwrap_or_default(),
            object.name.clone().unwrap_or_default(),
            address,
        );
        let at = event_time(event);
        if newest.get(&key).is_none_or(|(seen, _)| at >= *seen) {
            newest.insert(key, (at, event));
        }
    }
    let mut nodes: BTreeMap<(String, String), std::collections::BTreeSet<String>> = BTreeMap::new();
    for ((namespace, name, _), (_, event)) in newest {
        let node = match event.reason.as_deref() {
            Some(L2_ANNOUNCING) => event
                .reporting_instance
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "unknown".into()),
            _ => "none".into(),
        };
        nodes.entry((namespace, name)).or_default().insert(node);
    }
    nodes
        .into_iter()
        .map(|(service, nodes)| (service, nodes.into_iter().collect::<Vec<_>>().join(",")))
        .collect()
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
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("  {l}")
            }
        })
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn event(service: &str, reason: &str, note: &str, node: &str, second: i64) -> Event {
        Event {
            involved_object: ObjectReference {
                kind: Some("Service".into()),
                namespace: Some("default".into()),
                name: Some(service.into()),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(note.into()),
            reporting_instance: Some(node.into()),
            last_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + second).unwrap(),
            )),
            ..Event::default()
        }
    }

    #[test]
    fn the_newest_layer2_event_of_each_address_names_its_announcer() {
        let on = |node: &str| format!("192.0.2.10 is announced by node {node} on eth0 (ARP)");
        let cases: Vec<(&str, Vec<Event>, Option<&str>)> = vec![
            (
                "one takeover",
                vec![event("web", L2_ANNOUNCING, &on("n1"), "n1", 0)],
                Some("n1"),
            ),
            (
                "a later takeover moves it",
                vec![
                    event("web", L2_ANNOUNCING, &on("n2"), "n2", 5),
                    event("web", L2_ANNOUNCING, &on("n1"), "n1", 0),
                ],
                Some("n2"),
            ),
            (
                "no node may announce it any more",
                vec![
                    event("web", L2_ANNOUNCING, &on("n1"), "n1", 0),
                    event(
                        "web",
                        L2_NOT_ANNOUNCED,
                        "192.0.2.10 has no live node to announce it",
                        "n2",
                        9,
                    ),
                ],
                Some("none"),
            ),
            (
                "two addresses on two nodes",
                vec![
                    event("web", L2_ANNOUNCING, &on("n1"), "n1", 0),
                    event(
                        "web",
                        L2_ANNOUNCING,
                        "2001:db8::10 is announced by node n3 on eth0 (NDP)",
                        "n3",
                        1,
                    ),
                ],
                Some("n1,n3"),
            ),
            (
                "another Service's event",
                vec![event("db", L2_ANNOUNCING, &on("n1"), "n1", 0)],
                None,
            ),
            (
                "another reason",
                vec![event(
                    "web",
                    "EnsuredLoadBalancer",
                    "Ensured load balancer",
                    "n1",
                    0,
                )],
                None,
            ),
        ];
        for (name, events, expected) in cases {
            let found = announcers(&events);
            assert_eq!(
                found
                    .get(&("default".to_owned(), "web".to_owned()))
                    .map(String::as_str),
                expected,
                "{name}: {found:?}"
            );
        }
    }
}

//! The change each GCP step makes, rendered when the plan is made: the planner's [`Action`]s,
//! one Compute call each, as provider-neutral [`PlannedChange`]s with the fields each call
//! changes (observed → wanted). Pure: the flow observes, plans, and hands both here; the
//! steps it gets back are what `ensure` runs and `kube-lb plan` shows.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use kube_lb_provider_core::{ChangeAction, FieldChange, PlannedChange};

use crate::flow::GcpStep;
use crate::model::{
    Address, BackendService, Firewall, ForwardingRule, HealthCheck, HealthCheckKind, RulePorts,
    TargetPool, link_name, merge_ranges, range_text,
};
use crate::plan::{Action, Observed, split};

/// Shown where GCE will choose the IP when the call is made.
pub const IP_CHOSEN_BY_GCE: &str = "(allocated by GCE)";

/// Which halves of an [`Action::DeleteHealthCheck`] take effect, as the provider's reads
/// decide before planning the steps: the health check is only removed when nothing else uses
/// it, and its firewall only then (or when the check is gone already).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthCheckDelete {
    /// The health check exists and nothing else uses it.
    pub check: bool,
    /// Its firewall exists and would go.
    pub firewall: bool,
}

/// The resource kind of a health check collection, in GCE's type names.
pub fn health_check_kind(kind: HealthCheckKind) -> &'static str {
    match kind {
        HealthCheckKind::LegacyHttp => "HttpHealthCheck",
        HealthCheckKind::Http => "HealthCheck",
    }
}

/// One field rendered for people; `None` where the resource does not set it.
type Fields = Vec<(&'static str, Option<String>)>;

fn joined<'a>(
    values: impl IntoIterator<Item = &'a String>,
    show: impl Fn(&str) -> String,
) -> String {
    let mut shown: Vec<String> = values.into_iter().map(|v| show(v)).collect();
    shown.sort();
    shown.join(", ")
}

fn set(values: &BTreeSet<String>, show: impl Fn(&str) -> String) -> Option<String> {
    (!values.is_empty()).then(|| joined(values, show))
}

fn plain(value: &str) -> String {
    value.to_string()
}

fn name_of(link: &str) -> String {
    link_name(link).to_string()
}

/// `zone/name` of a zonal link (instance groups).
fn zonal(link: &str) -> String {
    let parts: Vec<&str> = link.split('/').collect();
    match parts.as_slice() {
        [.., zone, _, name] => format!("{zone}/{name}"),
        _ => link.to_string(),
    }
}

/// Renders values for people; knows the placeholder IP planned with while GCE has yet to
/// choose one.
struct Render {
    unknown_ip: Option<String>,
}

impl Render {
    fn ip(&self, ip: Option<IpAddr>) -> Option<String> {
        ip.map(|ip| self.text(&ip.to_string()))
    }

    /// A value that is the placeholder IP, or a description naming it.
    fn text(&self, value: &str) -> String {
        match &self.unknown_ip {
            Some(unknown) if value == unknown => IP_CHOSEN_BY_GCE.to_string(),
            Some(unknown) => value.replace(
                &format!("\"{unknown}\""),
                &format!("\"{IP_CHOSEN_BY_GCE}\""),
            ),
            None => value.to_string(),
        }
    }

    fn description(&self, description: &str) -> Option<String> {
        (!description.is_empty()).then(|| self.text(description))
    }

    fn address(&self, a: &Address) -> Fields {
        vec![
            (
                "address",
                Some(
                    self.ip(a.ip)
                        .unwrap_or_else(|| IP_CHOSEN_BY_GCE.to_string()),
                ),
            ),
            (
                "addressType",
                Some(if a.internal { "INTERNAL" } else { "EXTERNAL" }.to_string()),
            ),
            ("networkTier", tier(a.internal, a.tier.as_deref())),
            ("subnetwork", a.subnetwork.as_deref().map(name_of)),
            ("description", self.description(&a.description)),
        ]
    }

    fn rule(&self, r: &ForwardingRule) -> Fields {
        let (range, list, all) = match &r.ports {
            RulePorts::Range(low, high) => (Some(range_text((*low, *high))), None, None),
            RulePorts::List(ports) => (
                None,
                Some(
                    ports
                        .iter()
                        .map(u16::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                None,
            ),
            RulePorts::All => (None, None, Some("true".to_string())),
        };
        vec![
            ("IPAddress", self.ip(r.ip)),
            ("IPProtocol", Some(r.protocol.clone())),
            ("portRange", range),
            ("ports", list),
            ("allPorts", all),
            (
                "loadBalancingScheme",
                Some(if r.internal { "INTERNAL" } else { "EXTERNAL" }.to_string()),
            ),
            ("target", r.target.as_deref().map(name_of)),
            ("backendService", r.backend_service.as_deref().map(name_of)),
            ("subnetwork", r.subnetwork.as_deref().map(name_of)),
            ("networkTier", tier(r.internal, r.tier.as_deref())),
            (
                "allowGlobalAccess",
                r.internal.then(|| r.global_access.to_string()),
            ),
            ("description", self.description(&r.description)),
        ]
    }

    fn firewall(&self, f: &Firewall) -> Fields {
        let mut allowed: Vec<String> = f
            .allowed
            .iter()
            .map(|(protocol, ranges)| {
                let ports: Vec<String> = merge_ranges(ranges.clone())
                    .into_iter()
                    .map(range_text)
                    .collect();
                format!("{}:{}", protocol.to_ascii_lowercase(), ports.join(","))
            })
            .collect();
        allowed.sort();
        vec![
            ("allowed", (!allowed.is_empty()).then(|| allowed.join("; "))),
            ("sourceRanges", set(&f.source_ranges, plain)),
            (
                "destinationRanges",
                set(&f.destination_ranges, |r| self.text(r)),
            ),
            ("targetTags", set(&f.target_tags, plain)),
            (
                "network",
                (!f.network.is_empty()).then(|| name_of(&f.network)),
            ),
            ("description", self.description(&f.description)),
        ]
    }

    fn health_check(&self, h: &HealthCheck) -> Fields {
        vec![
            ("port", Some(h.port.to_string())),
            ("requestPath", Some(h.path.clone())),
            ("checkIntervalSec", Some(h.timing.interval.to_string())),
            ("timeoutSec", Some(h.timing.timeout.to_string())),
            ("healthyThreshold", Some(h.timing.healthy.to_string())),
            ("unhealthyThreshold", Some(h.timing.unhealthy.to_string())),
            ("description", self.description(&h.description)),
        ]
    }

    fn pool(&self, p: &TargetPool) -> Fields {
        vec![
            ("instances", set(&p.instances, name_of)),
            ("healthChecks", set(&p.health_checks, name_of)),
            ("sessionAffinity", Some(p.session_affinity.clone())),
            ("description", self.description(&p.description)),
        ]
    }

    fn backend_service(&self, b: &BackendService) -> Fields {
        vec![
            ("protocol", Some(b.protocol.clone())),
            ("sessionAffinity", Some(b.session_affinity.clone())),
            ("healthChecks", set(&b.health_checks, name_of)),
            ("backends", set(&b.groups, zonal)),
            ("description", self.description(&b.description)),
        ]
    }
}

/// The tier GCE applies: the wanted one, else PREMIUM (external only).
fn tier(internal: bool, tier: Option<&str>) -> Option<String> {
    (!internal).then(|| tier.unwrap_or("PREMIUM").to_string())
}

/// The fields that differ, `old → new`; with nothing observed, every field the call sets.
fn diff(old: Option<Fields>, new: Fields) -> Vec<FieldChange> {
    match old {
        None => new
            .into_iter()
            .filter(|(_, value)| value.is_some())
            .map(|(field, value)| FieldChange::new(field, None, value))
            .collect(),
        Some(old) => {
            let old: BTreeMap<&str, Option<String>> = old.into_iter().collect();
            new.into_iter()
                .filter_map(|(field, value)| {
                    let was = old.get(field).cloned().flatten();
                    (was != value).then(|| FieldChange::new(field, was, value))
                })
                .collect()
        }
    }
}

fn change(
    action: ChangeAction,
    kind: &str,
    name: &str,
    call: &str,
    fields: Vec<FieldChange>,
) -> PlannedChange {
    PlannedChange {
        fields,
        ..PlannedChange::new(action, kind, name, call)
    }
}

fn members_change(
    kind: &str,
    name: &str,
    call: &str,
    members: &mut BTreeSet<String>,
    add: &BTreeSet<String>,
    remove: &BTreeSet<String>,
) -> PlannedChange {
    let before = set(members, name_of);
    members.extend(add.iter().cloned());
    members.retain(|m| !remove.contains(m));
    let after = set(members, name_of);
    change(
        ChangeAction::Modify,
        kind,
        name,
        call,
        vec![FieldChange::new("instances", before, after)],
    )
}

/// The plan's steps: each action of `actions` (one Compute call each, see
/// [`crate::plan::split`]) with the change it makes, rendered now against what `observed`
/// holds and the calls before it leave. This is what `kube-lb plan` shows and `ensure` runs:
/// the same list. An action that makes no call (nothing to swap) is no step.
pub fn steps(
    actions: Vec<Action>,
    observed: &Observed,
    unknown_ip: Option<IpAddr>,
) -> Vec<GcpStep> {
    let actions = split(actions);
    let rendered = per_action(&actions, observed, unknown_ip);
    actions
        .into_iter()
        .zip(rendered)
        .flat_map(|(action, changes)| {
            changes
                .into_iter()
                .map(move |change| GcpStep::new(action.clone(), change))
        })
        .collect()
}

/// The change of each split action, in order, against what `observed` holds and the calls
/// before it leave. `unknown_ip` is the stand-in the plan was computed with while GCE has yet
/// to choose the IP.
fn per_action(
    actions: &[Action],
    observed: &Observed,
    unknown_ip: Option<IpAddr>,
) -> Vec<Vec<PlannedChange>> {
    use ChangeAction::{Create, Delete, Modify};
    let render = Render {
        unknown_ip: unknown_ip.map(|ip| ip.to_string()),
    };
    let empty = BTreeSet::new();
    // Memberships as the calls before each one leave them.
    let mut pool_instances = observed
        .target_pool
        .as_ref()
        .map(|p| p.instances.clone())
        .unwrap_or_default();
    let mut pool_checks = observed
        .target_pool
        .as_ref()
        .map(|p| p.health_checks.clone())
        .unwrap_or_default();
    let mut group_members: BTreeMap<String, BTreeSet<String>> = observed
        .groups
        .iter()
        .filter_map(|(zone, group)| Some((zone.clone(), group.as_ref()?.members.clone())))
        .collect();
    let observed_firewall = |name: &str| {
        [&observed.firewall, &observed.health_check_firewall]
            .into_iter()
            .flatten()
            .find(|f| f.name == name)
    };

    let mut per = Vec::with_capacity(actions.len());
    let mut out = Vec::new();
    for action in actions {
        tracing::debug!(provider = "gcp", action = %action.label(), "planned");
        per.push(std::mem::take(&mut out));
        match action {
            Action::ReserveAddress(a) => {
                let old = observed.address.as_ref().filter(|o| o.name == a.name);
                out.push(change(
                    Create,
                    "Address",
                    &a.name,
                    "addresses.insert",
                    diff(old.map(|o| render.address(o)), render.address(a)),
                ));
            }
            Action::DeleteAddress(name) => {
                out.push(change(Delete, "Address", name, "addresses.delete", vec![]));
            }
            Action::DeleteForwardingRule(name) => out.push(change(
                Delete,
                "ForwardingRule",
                name,
                "forwardingRules.delete",
                vec![],
            )),
            Action::InsertForwardingRule(rule) => {
                let old = observed.rule.as_ref().filter(|o| o.name == rule.name);
                out.push(change(
                    Create,
                    "ForwardingRule",
                    &rule.name,
                    "forwardingRules.insert",
                    diff(old.map(|o| render.rule(o)), render.rule(rule)),
                ));
            }
            Action::PatchGlobalAccess { name, allow, .. } => {
                let was = observed.rule.as_ref().map(|r| r.global_access.to_string());
                out.push(change(
                    Modify,
                    "ForwardingRule",
                    name,
                    "forwardingRules.patch",
                    vec![FieldChange::new(
                        "allowGlobalAccess",
                        was,
                        Some(allow.to_string()),
                    )],
                ));
            }
            Action::InsertFirewall(f) => out.push(change(
                Create,
                "Firewall",
                &f.name,
                "firewalls.insert",
                diff(None, render.firewall(f)),
            )),
            Action::UpdateFirewall(f) => out.push(change(
                Modify,
                "Firewall",
                &f.name,
                "firewalls.update",
                diff(
                    observed_firewall(&f.name).map(|o| render.firewall(o)),
                    render.firewall(f),
                ),
            )),
            Action::DeleteFirewall(name) => {
                out.push(change(Delete, "Firewall", name, "firewalls.delete", vec![]));
            }
            Action::InsertHealthCheck(h) => out.push(change(
                Create,
                health_check_kind(h.kind),
                &h.name,
                &format!("{}.insert", h.kind.collection()),
                diff(None, render.health_check(h)),
            )),
            Action::UpdateHealthCheck(h) => {
                let old = observed
                    .health_check
                    .as_ref()
                    .filter(|o| o.name == h.name && o.kind == h.kind);
                out.push(change(
                    Modify,
                    health_check_kind(h.kind),
                    &h.name,
                    &format!("{}.update", h.kind.collection()),
                    diff(old.map(|o| render.health_check(o)), render.health_check(h)),
                ));
            }
            // The check alone: its firewall is a step of its own (see `effective`).
            Action::DeleteHealthCheck { kind, name, .. } => out.push(change(
                Delete,
                health_check_kind(*kind),
                name,
                &format!("{}.delete", kind.collection()),
                vec![],
            )),
            Action::InsertTargetPool(pool) => {
                let old = observed
                    .target_pool
                    .as_ref()
                    .filter(|o| o.name == pool.name);
                out.push(change(
                    Create,
                    "TargetPool",
                    &pool.name,
                    "targetPools.insert",
                    diff(old.map(|o| render.pool(o)), render.pool(pool)),
                ));
                pool_instances = pool.instances.clone();
                pool_checks = pool.health_checks.clone();
            }
            Action::DeleteTargetPool(name) => {
                out.push(change(
                    Delete,
                    "TargetPool",
                    name,
                    "targetPools.delete",
                    vec![],
                ));
                pool_instances.clear();
                pool_checks.clear();
            }
            Action::AddPoolInstances(pool, instances) => out.push(members_change(
                "TargetPool",
                pool,
                "targetPools.addInstance",
                &mut pool_instances,
                instances,
                &empty,
            )),
            Action::RemovePoolInstances(pool, instances) => out.push(members_change(
                "TargetPool",
                pool,
                "targetPools.removeInstance",
                &mut pool_instances,
                &empty,
                instances,
            )),
            Action::SwapPoolHealthCheck { pool, add, remove } => {
                // Two calls: a pool holds one legacy health check, so the old one goes first.
                for (call, add, remove) in [
                    ("targetPools.removeHealthCheck", &empty, remove),
                    ("targetPools.addHealthCheck", add, &empty),
                ] {
                    if add.is_empty() && remove.is_empty() {
                        continue;
                    }
                    let before = set(&pool_checks, name_of);
                    pool_checks.extend(add.iter().cloned());
                    pool_checks.retain(|c| !remove.contains(c));
                    out.push(change(
                        Modify,
                        "TargetPool",
                        pool,
                        call,
                        vec![FieldChange::new(
                            "healthChecks",
                            before,
                            set(&pool_checks, name_of),
                        )],
                    ));
                }
            }
            Action::InsertInstanceGroup { zone, name } => {
                out.push(change(
                    Create,
                    "InstanceGroup",
                    &format!("{zone}/{name}"),
                    "instanceGroups.insert",
                    vec![],
                ));
                group_members.insert(zone.clone(), BTreeSet::new());
            }
            Action::AddGroupInstances {
                zone,
                name,
                instances,
            } => out.push(members_change(
                "InstanceGroup",
                &format!("{zone}/{name}"),
                "instanceGroups.addInstances",
                group_members.entry(zone.clone()).or_default(),
                instances,
                &empty,
            )),
            Action::RemoveGroupInstances {
                zone,
                name,
                instances,
            } => out.push(members_change(
                "InstanceGroup",
                &format!("{zone}/{name}"),
                "instanceGroups.removeInstances",
                group_members.entry(zone.clone()).or_default(),
                &empty,
                instances,
            )),
            Action::DeleteInstanceGroup { zone, name } => out.push(change(
                Delete,
                "InstanceGroup",
                &format!("{zone}/{name}"),
                "instanceGroups.delete",
                vec![],
            )),
            Action::InsertBackendService(b) => out.push(change(
                Create,
                "BackendService",
                &b.name,
                "regionBackendServices.insert",
                diff(None, render.backend_service(b)),
            )),
            Action::UpdateBackendService(b) => {
                let old = observed
                    .backend_service
                    .as_ref()
                    .filter(|o| o.name == b.name);
                out.push(change(
                    Modify,
                    "BackendService",
                    &b.name,
                    "regionBackendServices.update",
                    diff(
                        old.map(|o| render.backend_service(o)),
                        render.backend_service(b),
                    ),
                ));
            }
            Action::DeleteBackendService(name) => out.push(change(
                Delete,
                "BackendService",
                name,
                "regionBackendServices.delete",
                vec![],
            )),
        }
    }
    per.push(out);
    // The first entry is what came before the first action (nothing).
    per.remove(0);
    per
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DEFAULT_TIMING;
    use kube_lb_provider_core::converge;

    fn link(zone: &str, name: &str) -> String {
        format!("projects/p/zones/{zone}/instances/{name}")
    }

    fn pool(instances: &[&str], checks: &[&str]) -> TargetPool {
        TargetPool {
            name: "a1".into(),
            description: String::new(),
            instances: instances.iter().map(|i| link("z", i)).collect(),
            health_checks: checks
                .iter()
                .map(|c| format!("projects/p/global/httpHealthChecks/{c}"))
                .collect(),
            session_affinity: "NONE".into(),
        }
    }

    fn firewall(destination: &str, sources: &[&str]) -> Firewall {
        Firewall {
            name: "k8s-fw-a1".into(),
            description: format!(r#"{{"kubernetes.io/service-ip":"{destination}"}}"#),
            network: "projects/p/global/networks/default".into(),
            allowed: vec![("TCP".into(), vec![(443, 443), (80, 80)])],
            source_ranges: sources.iter().map(|s| s.to_string()).collect(),
            destination_ranges: BTreeSet::from([destination.to_string()]),
            target_tags: BTreeSet::from(["node".to_string()]),
        }
    }

    fn shown(changes: &[PlannedChange]) -> Vec<(String, String, Vec<String>)> {
        changes
            .iter()
            .map(|c| {
                (
                    format!("{} {} {}", c.action, c.kind, c.name),
                    c.call.clone(),
                    c.fields
                        .iter()
                        .map(|f| {
                            format!(
                                "{}: {} -> {}",
                                f.field,
                                f.old.as_deref().unwrap_or("-"),
                                f.new.as_deref().unwrap_or("-")
                            )
                        })
                        .collect(),
                )
            })
            .collect()
    }

    fn row(change: &str, call: &str, fields: &[&str]) -> (String, String, Vec<String>) {
        (
            change.to_string(),
            call.to_string(),
            fields.iter().map(|f| f.to_string()).collect(),
        )
    }

    /// (what, observed, actions, placeholder IP, health-check delete effects, expected rows)
    #[test]
    fn actions_become_calls_with_old_and_new_values() {
        let unknown: IpAddr = "0.0.0.0".parse().unwrap();
        let with_pool = Observed {
            target_pool: Some(pool(&["n1", "n2"], &["k8s-c1-node"])),
            firewall: Some(firewall("203.0.113.5", &["0.0.0.0/0"])),
            ..Observed::default()
        };
        let swap = Action::SwapPoolHealthCheck {
            pool: "a1".into(),
            add: BTreeSet::from(["projects/p/global/httpHealthChecks/a1".to_string()]),
            remove: BTreeSet::from(["projects/p/global/httpHealthChecks/k8s-c1-node".to_string()]),
        };
        let delete_check = |name: &str| Action::DeleteHealthCheck {
            kind: HealthCheckKind::LegacyHttp,
            name: name.into(),
            firewall: format!("{name}-http-hc"),
        };
        type Case<'a> = (
            &'a str,
            Observed,
            Vec<Action>,
            Option<IpAddr>,
            Vec<(String, String, Vec<String>)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "members move one call at a time",
                with_pool.clone(),
                vec![
                    Action::AddPoolInstances("a1".into(), BTreeSet::from([link("z", "n3")])),
                    Action::RemovePoolInstances("a1".into(), BTreeSet::from([link("z", "n1")])),
                ],
                None,
                vec![
                    row(
                        "modify TargetPool a1",
                        "targetPools.addInstance",
                        &["instances: n1, n2 -> n1, n2, n3"],
                    ),
                    row(
                        "modify TargetPool a1",
                        "targetPools.removeInstance",
                        &["instances: n1, n2, n3 -> n2, n3"],
                    ),
                ],
            ),
            (
                "a health-check swap is two calls",
                with_pool.clone(),
                vec![swap],
                None,
                vec![
                    row(
                        "modify TargetPool a1",
                        "targetPools.removeHealthCheck",
                        &["healthChecks: k8s-c1-node -> -"],
                    ),
                    row(
                        "modify TargetPool a1",
                        "targetPools.addHealthCheck",
                        &["healthChecks: - -> a1"],
                    ),
                ],
            ),
            (
                "an update names only what changes",
                with_pool.clone(),
                vec![Action::UpdateFirewall(firewall(
                    "203.0.113.5",
                    &["192.0.2.0/24"],
                ))],
                None,
                vec![row(
                    "modify Firewall k8s-fw-a1",
                    "firewalls.update",
                    &["sourceRanges: 0.0.0.0/0 -> 192.0.2.0/24"],
                )],
            ),
            (
                "a create sets every field; an IP GCE will choose is said so",
                Observed::default(),
                vec![Action::InsertFirewall(firewall("0.0.0.0", &["0.0.0.0/0"]))],
                Some(unknown),
                vec![row(
                    "create Firewall k8s-fw-a1",
                    "firewalls.insert",
                    &[
                        "allowed: - -> tcp:80,443",
                        "sourceRanges: - -> 0.0.0.0/0",
                        "destinationRanges: - -> (allocated by GCE)",
                        "targetTags: - -> node",
                        "network: - -> default",
                        r#"description: - -> {"kubernetes.io/service-ip":"(allocated by GCE)"}"#,
                    ],
                )],
            ),
            (
                "a health-check delete is the check alone; its firewall is a step of its own",
                Observed::default(),
                vec![delete_check("a1")],
                None,
                vec![row(
                    "delete HttpHealthCheck a1",
                    "httpHealthChecks.delete",
                    &[],
                )],
            ),
            (
                "a re-created health check shows its old values",
                Observed {
                    health_check: Some(HealthCheck {
                        kind: HealthCheckKind::Http,
                        name: "a1".into(),
                        description: String::new(),
                        port: 31000,
                        path: "/healthz".into(),
                        timing: DEFAULT_TIMING,
                    }),
                    ..Observed::default()
                },
                vec![Action::UpdateHealthCheck(HealthCheck {
                    kind: HealthCheckKind::Http,
                    name: "a1".into(),
                    description: String::new(),
                    port: 31001,
                    path: "/healthz".into(),
                    timing: DEFAULT_TIMING,
                })],
                None,
                vec![row(
                    "modify HealthCheck a1",
                    "healthChecks.update",
                    &["port: 31000 -> 31001"],
                )],
            ),
        ];
        for (what, observed, actions, unknown_ip, want) in cases {
            let got: Vec<PlannedChange> = steps(actions, &observed, unknown_ip)
                .iter()
                .map(converge::Step::describe)
                .collect();
            assert_eq!(shown(&got), want, "{what}");
        }
    }
}

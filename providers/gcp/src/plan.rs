//! The pure planner: what exists (observed) and what should (desired) in, an ordered list of
//! API actions out. Two phases: the address first (its IP is needed by the firewall and the
//! forwarding rule), then everything else. A converged load balancer plans nothing.

use std::collections::BTreeSet;
use std::net::IpAddr;

use kube_lb_provider_core::ProviderError;

use crate::adopt::{Adoption, adoption_any, health_check_marks};
use crate::desired::{Desired, IpRequest, firewall_description, health_check_firewall_name};
use crate::model::{
    Address, BackendService, Firewall, ForwardingRule, HealthCheck, HealthCheckKind, InstanceGroup,
    TargetPool, canon, link_name,
};

/// What exists in the project for one Service (plus the shared pieces it uses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Forwarding rule `<lb>`.
    pub rule: Option<ForwardingRule>,
    /// Address `<lb>` (ours).
    pub address: Option<Address>,
    /// The address holding the requested IP, when one exists under another name (user-owned).
    pub user_address: Option<Address>,
    /// Firewall `k8s-fw-<lb>`.
    pub firewall: Option<Firewall>,
    /// The desired health check, by name, in its collection.
    pub health_check: Option<HealthCheck>,
    /// The desired health-check firewall.
    pub health_check_firewall: Option<Firewall>,
    /// Target pool `<lb>`.
    pub target_pool: Option<TargetPool>,
    /// Backend service `<lb>`.
    pub backend_service: Option<BackendService>,
    /// Per-Service health checks `<lb>` that exist but are not the desired one.
    pub other_own_health_checks: Vec<HealthCheckKind>,
    /// Instance groups by zone (internal only), `None` where missing.
    pub groups: Vec<(String, Option<InstanceGroup>)>,
}

/// One API call the applier makes, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Reserve address `<lb>` (with the given IP, or let GCE choose).
    ReserveAddress(Address),
    /// Release address `<lb>` (the forwarding rule keeps its IP if it uses it).
    DeleteAddress(String),
    /// Delete forwarding rule `<lb>`.
    DeleteForwardingRule(String),
    /// Create the forwarding rule.
    InsertForwardingRule(ForwardingRule),
    /// Change `allowGlobalAccess` in place (fingerprint-checked).
    PatchGlobalAccess {
        /// The rule.
        name: String,
        /// The new value.
        allow: bool,
        /// The fingerprint read back.
        fingerprint: Option<Vec<u8>>,
    },
    /// Create a firewall.
    InsertFirewall(Firewall),
    /// Replace a firewall.
    UpdateFirewall(Firewall),
    /// Create a health check.
    InsertHealthCheck(HealthCheck),
    /// Replace a health check.
    UpdateHealthCheck(HealthCheck),
    /// Delete a health check that is no longer used; if it is deleted (not in use elsewhere),
    /// delete its firewall too.
    DeleteHealthCheck {
        /// Which collection.
        kind: HealthCheckKind,
        /// The health check.
        name: String,
        /// Its firewall.
        firewall: String,
    },
    /// Create the target pool.
    InsertTargetPool(TargetPool),
    /// Delete target pool `<lb>`.
    DeleteTargetPool(String),
    /// `addInstance`.
    AddPoolInstances(String, BTreeSet<String>),
    /// `removeInstance`.
    RemovePoolInstances(String, BTreeSet<String>),
    /// `addHealthCheck` / `removeHealthCheck` (swap the legacy health check in place).
    SwapPoolHealthCheck {
        /// The pool.
        pool: String,
        /// Health checks to add.
        add: BTreeSet<String>,
        /// Health checks to remove.
        remove: BTreeSet<String>,
    },
    /// Create an (empty) instance group.
    InsertInstanceGroup {
        /// Zone.
        zone: String,
        /// Name.
        name: String,
    },
    /// `addInstances`.
    AddGroupInstances {
        /// Zone.
        zone: String,
        /// Group.
        name: String,
        /// Instance links.
        instances: BTreeSet<String>,
    },
    /// `removeInstances`.
    RemoveGroupInstances {
        /// Zone.
        zone: String,
        /// Group.
        name: String,
        /// Instance links.
        instances: BTreeSet<String>,
    },
    /// Create the backend service.
    InsertBackendService(BackendService),
    /// Replace the backend service (carries the fingerprint read back).
    UpdateBackendService(BackendService),
    /// Delete backend service `<lb>`.
    DeleteBackendService(String),
    /// Delete a firewall.
    DeleteFirewall(String),
    /// Delete an instance group (tolerating "in use" by other Services).
    DeleteInstanceGroup {
        /// Zone.
        zone: String,
        /// Name.
        name: String,
    },
}

impl Action {
    /// A short label for logs.
    pub fn label(&self) -> String {
        match self {
            Action::ReserveAddress(a) => format!("reserve address {}", a.name),
            Action::DeleteAddress(n) => format!("delete address {n}"),
            Action::DeleteForwardingRule(n) => format!("delete forwarding rule {n}"),
            Action::InsertForwardingRule(r) => format!("insert forwarding rule {}", r.name),
            Action::PatchGlobalAccess { name, allow, .. } => {
                format!("patch forwarding rule {name} allowGlobalAccess={allow}")
            }
            Action::InsertFirewall(f) => format!("insert firewall {}", f.name),
            Action::UpdateFirewall(f) => format!("update firewall {}", f.name),
            Action::InsertHealthCheck(h) => format!("insert {} {}", h.kind.collection(), h.name),
            Action::UpdateHealthCheck(h) => format!("update {} {}", h.kind.collection(), h.name),
            Action::DeleteHealthCheck { kind, name, .. } => {
                format!("delete {} {name}", kind.collection())
            }
            Action::InsertTargetPool(p) => format!("insert target pool {}", p.name),
            Action::DeleteTargetPool(n) => format!("delete target pool {n}"),
            Action::AddPoolInstances(p, i) => format!("add {} instances to pool {p}", i.len()),
            Action::RemovePoolInstances(p, i) => {
                format!("remove {} instances from pool {p}", i.len())
            }
            Action::SwapPoolHealthCheck { pool, .. } => format!("swap health check of pool {pool}"),
            Action::InsertInstanceGroup { zone, name } => {
                format!("insert instance group {zone}/{name}")
            }
            Action::AddGroupInstances {
                zone,
                name,
                instances,
            } => {
                format!("add {} instances to group {zone}/{name}", instances.len())
            }
            Action::RemoveGroupInstances {
                zone,
                name,
                instances,
            } => {
                format!(
                    "remove {} instances from group {zone}/{name}",
                    instances.len()
                )
            }
            Action::InsertBackendService(b) => format!("insert backend service {}", b.name),
            Action::UpdateBackendService(b) => format!("update backend service {}", b.name),
            Action::DeleteBackendService(n) => format!("delete backend service {n}"),
            Action::DeleteFirewall(n) => format!("delete firewall {n}"),
            Action::DeleteInstanceGroup { zone, name } => {
                format!("delete instance group {zone}/{name}")
            }
        }
    }
}

/// Where the IP comes from once the address phase is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IpSource {
    /// A user-reserved static address (never created or released by us).
    User(IpAddr),
    /// Our reservation `<lb>`; `Some` when its IP is already known.
    Owned(Option<IpAddr>),
}

/// Phase 1: the address. Keeps a compatible reservation (no call), promotes the current
/// forwarding-rule IP when the reservation is missing, and re-reserves when the wanted
/// type, subnet, tier or IP changed. With a user-owned static address nothing is reserved.
pub fn plan_address(
    desired: &Desired,
    observed: &Observed,
) -> Result<(Vec<Action>, IpSource), ProviderError> {
    if let (IpRequest::Requested(ip), Some(user)) = (&desired.ip, &observed.user_address)
        && user.name != desired.lb
    {
        if user.internal != desired.internal {
            return Err(ProviderError::user(format!(
                "loadBalancerIP {ip} is a static {} address, but the Service asks for an {} load \
                 balancer",
                if user.internal {
                    "internal"
                } else {
                    "external"
                },
                if desired.internal {
                    "internal"
                } else {
                    "external"
                },
            )));
        }
        if let (Some(wanted), Some(have)) = (&desired.address.tier, &user.tier)
            && wanted != have
        {
            return Err(ProviderError::user(format!(
                "loadBalancerIP {ip} is a {have} tier address, but the Service asks for {wanted}"
            )));
        }
        return Ok((Vec::new(), IpSource::User(*ip)));
    }
    let requested = match desired.ip {
        IpRequest::Requested(ip) => Some(ip),
        IpRequest::Any => None,
    };
    let compatible = |a: &Address| {
        a.internal == desired.address.internal
            && a.subnetwork.as_deref().map(canon)
                == desired.address.subnetwork.as_deref().map(canon)
            && (desired.address.tier.is_none() || a.tier == desired.address.tier)
            && requested.is_none_or(|ip| a.ip == Some(ip))
    };
    if let Some(address) = &observed.address
        && compatible(address)
    {
        return Ok((Vec::new(), IpSource::Owned(address.ip)));
    }
    let mut actions = Vec::new();
    if let Some(address) = &observed.address {
        actions.push(Action::DeleteAddress(address.name.clone()));
    }
    // Promote the forwarding rule's current IP when it can serve the wanted rule's kind, so
    // the IP survives a re-creation of the rule.
    let rule_ip = observed.rule.as_ref().and_then(|rule| {
        let same_kind = rule.internal == desired.internal
            && (!desired.internal
                || rule.subnetwork.as_deref().map(canon)
                    == desired.address.subnetwork.as_deref().map(canon))
            && (desired.address.tier.is_none() || rule.tier == desired.address.tier);
        same_kind.then_some(rule.ip).flatten()
    });
    let ip = requested.or(rule_ip);
    if requested.is_some()
        && observed.rule.as_ref().and_then(|r| r.ip) != requested
        && !desired.internal
    {
        // An external IP that is neither reserved by the user nor on the rule already.
        return Err(ProviderError::user(format!(
            "requested ip \"{}\" is neither static nor assigned to the LB: reserve it as a \
             regional static address in the cluster's region first",
            requested.map(|i| i.to_string()).unwrap_or_default()
        )));
    }
    actions.push(Action::ReserveAddress(Address {
        ip,
        ..desired.address.clone()
    }));
    Ok((actions, IpSource::Owned(ip)))
}

/// Phase 2: everything but the address, with the IP known.
///
/// A change of scheme (external ↔ internal) is break-before-make: the forwarding rule that
/// does not serve the wanted scheme is deleted, and the other scheme's target pool or backend
/// service and health checks go, before the new rule is inserted. The rule's name is derived
/// from the Service and GCE names are unique per project and region, so the two rules could
/// not coexist under that name anyway; and after a kill at any step the next pass sees at most
/// one rule, with the leftovers of the other scheme found by name and removed first. The cost
/// is a gap in service while the new rule is created (upstream has the same gap).
pub fn plan(
    desired: &Desired,
    observed: &Observed,
    ip: IpAddr,
    ip_source: &IpSource,
) -> Vec<Action> {
    let mut before_rule = Vec::new();
    // What the other scheme left (its target pool or backend service, and health checks of
    // its kind) goes before any rule insert: then a rule of the desired scheme proves there
    // is nothing of the other scheme left, and a resync need not look for it.
    let mut other_scheme = Vec::new();
    let mut rule_actions = Vec::new();
    let mut after_rule = Vec::new();

    let mut wanted_rule = desired.rule.clone();
    wanted_rule.ip = Some(ip);
    let mut recreate_rule = observed
        .rule
        .as_ref()
        .is_some_and(|rule| !rule.serves(&wanted_rule));

    // Firewalls first (upstream order): traffic, then health checkers.
    let mut firewall = desired.firewall.clone();
    firewall.description = firewall_description(&desired.service, ip);
    firewall.destination_ranges = BTreeSet::from([ip.to_string()]);
    before_rule.extend(ensure_firewall(&firewall, observed.firewall.as_ref()));
    before_rule.extend(ensure_firewall(
        &desired.health_check_firewall,
        observed.health_check_firewall.as_ref(),
    ));

    // Health check: create, or raise drifted values.
    match &observed.health_check {
        None => before_rule.push(Action::InsertHealthCheck(desired.health_check.clone())),
        Some(have) => {
            let mut wanted = desired.health_check.clone();
            wanted.timing = wanted.timing.raised_to(have.timing);
            // Any owner mark the cluster accepts on it stays (upstream marks a health check
            // with its own name): rewriting it would change nothing but the text.
            let marks = health_check_marks(desired, &wanted.description);
            let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
            if adoption_any(&marks, &have.description) == Adoption::Adopt {
                wanted.description = have.description.clone();
            }
            if wanted != *have {
                before_rule.push(Action::UpdateHealthCheck(wanted));
            }
        }
    }
    let mut stale_health_checks: BTreeSet<(HealthCheckKind, String)> = observed
        .other_own_health_checks
        .iter()
        .map(|kind| (*kind, desired.lb.clone()))
        .collect();

    // External: target pool.
    if let Some(pool) = &desired.target_pool {
        match &observed.target_pool {
            Some(have) if have.session_affinity == pool.session_affinity => {
                let add: BTreeSet<String> = pool
                    .instances
                    .difference(&have.instances)
                    .cloned()
                    .collect();
                let remove: BTreeSet<String> = have
                    .instances
                    .difference(&pool.instances)
                    .cloned()
                    .collect();
                if !add.is_empty() {
                    before_rule.push(Action::AddPoolInstances(pool.name.clone(), add));
                }
                if !remove.is_empty() {
                    before_rule.push(Action::RemovePoolInstances(pool.name.clone(), remove));
                }
                let have_hcs: BTreeSet<String> =
                    have.health_checks.iter().map(|h| canon(h)).collect();
                let want_hcs: BTreeSet<String> =
                    pool.health_checks.iter().map(|h| canon(h)).collect();
                if have_hcs != want_hcs {
                    for old in have_hcs.difference(&want_hcs) {
                        stale_health_checks
                            .insert((HealthCheckKind::LegacyHttp, link_name(old).to_string()));
                    }
                    before_rule.push(Action::SwapPoolHealthCheck {
                        pool: pool.name.clone(),
                        add: want_hcs.difference(&have_hcs).cloned().collect(),
                        remove: have_hcs.difference(&want_hcs).cloned().collect(),
                    });
                }
            }
            Some(have) => {
                // Session affinity cannot change in place: re-create pool (and rule).
                recreate_rule |= observed.rule.is_some();
                for old in &have.health_checks {
                    if canon(old) != canon(pool.health_checks.first().map_or("", String::as_str)) {
                        stale_health_checks
                            .insert((HealthCheckKind::LegacyHttp, link_name(old).to_string()));
                    }
                }
                before_rule.push(Action::DeleteTargetPool(have.name.clone()));
                before_rule.extend(insert_target_pool(pool));
            }
            None => before_rule.extend(insert_target_pool(pool)),
        }
    } else if let Some(have) = &observed.target_pool {
        // Switched to internal: the pool goes once the old rule no longer points at it.
        other_scheme.push(Action::DeleteTargetPool(have.name.clone()));
        for old in &have.health_checks {
            stale_health_checks.insert((HealthCheckKind::LegacyHttp, link_name(old).to_string()));
        }
    }

    // Internal: instance groups, then the backend service.
    if let Some(service) = &desired.backend_service {
        for wanted in &desired.groups {
            let have = observed
                .groups
                .iter()
                .find(|(zone, _)| *zone == wanted.zone)
                .and_then(|(_, g)| g.as_ref());
            let have_members = have.map(|g| g.members.clone()).unwrap_or_default();
            if have.is_none() && !wanted.members.is_empty() {
                before_rule.push(Action::InsertInstanceGroup {
                    zone: wanted.zone.clone(),
                    name: wanted.name.clone(),
                });
            }
            let add: BTreeSet<String> = wanted.members.difference(&have_members).cloned().collect();
            let remove: BTreeSet<String> =
                have_members.difference(&wanted.members).cloned().collect();
            if !add.is_empty() {
                before_rule.push(Action::AddGroupInstances {
                    zone: wanted.zone.clone(),
                    name: wanted.name.clone(),
                    instances: add,
                });
            }
            if !remove.is_empty() {
                before_rule.push(Action::RemoveGroupInstances {
                    zone: wanted.zone.clone(),
                    name: wanted.name.clone(),
                    instances: remove,
                });
            }
        }
        match &observed.backend_service {
            None => before_rule.push(Action::InsertBackendService(service.clone())),
            Some(have) if !have.same_as(service) => {
                if have.protocol != service.protocol {
                    // A referenced backend service cannot change protocol.
                    recreate_rule |= observed.rule.is_some();
                }
                for old in have.health_checks.difference(&service.health_checks) {
                    stale_health_checks.insert((HealthCheckKind::Http, link_name(old).to_string()));
                }
                before_rule.push(Action::UpdateBackendService(BackendService {
                    fingerprint: have.fingerprint.clone(),
                    ..service.clone()
                }));
            }
            Some(_) => {}
        }
    } else if let Some(have) = &observed.backend_service {
        other_scheme.push(Action::DeleteBackendService(have.name.clone()));
        for old in &have.health_checks {
            stale_health_checks.insert((HealthCheckKind::Http, link_name(old).to_string()));
        }
    }

    // The forwarding rule last: "rule exists" means "load balancer complete".
    match &observed.rule {
        Some(rule) if recreate_rule => {
            rule_actions.push(Action::InsertForwardingRule(wanted_rule.clone()));
            before_rule.insert(0, Action::DeleteForwardingRule(rule.name.clone()));
        }
        Some(rule) => {
            if rule.global_access != wanted_rule.global_access {
                rule_actions.push(Action::PatchGlobalAccess {
                    name: rule.name.clone(),
                    allow: wanted_rule.global_access,
                    fingerprint: rule.fingerprint.clone(),
                });
            }
        }
        None => rule_actions.push(Action::InsertForwardingRule(wanted_rule.clone())),
    }

    // Cleanup of what the Service no longer uses.
    for (kind, name) in stale_health_checks {
        if kind == desired.health_check.kind && name == desired.health_check.name {
            continue;
        }
        let delete = Action::DeleteHealthCheck {
            kind,
            firewall: health_check_firewall_name(kind, &name, &desired.lb),
            name,
        };
        if kind == desired.health_check.kind {
            after_rule.push(delete);
        } else {
            other_scheme.push(delete);
        }
    }
    if let (IpSource::User(_), Some(address)) = (ip_source, &observed.address) {
        after_rule.push(Action::DeleteAddress(address.name.clone()));
    }

    before_rule
        .into_iter()
        .chain(other_scheme)
        .chain(rule_actions)
        .chain(after_rule)
        .collect()
}

/// Instances listed in a target-pool insert; the rest follow with `addInstance` (upstream
/// does the same to keep the insert body small).
pub const POOL_INSERT_INSTANCES: usize = 200;

fn insert_target_pool(pool: &TargetPool) -> Vec<Action> {
    let first: BTreeSet<String> = pool
        .instances
        .iter()
        .take(POOL_INSERT_INSTANCES)
        .cloned()
        .collect();
    let rest: BTreeSet<String> = pool
        .instances
        .iter()
        .skip(POOL_INSERT_INSTANCES)
        .cloned()
        .collect();
    let mut actions = vec![Action::InsertTargetPool(TargetPool {
        instances: first,
        ..pool.clone()
    })];
    if !rest.is_empty() {
        actions.push(Action::AddPoolInstances(pool.name.clone(), rest));
    }
    actions
}

fn ensure_firewall(wanted: &Firewall, have: Option<&Firewall>) -> Option<Action> {
    match have {
        None => Some(Action::InsertFirewall(wanted.clone())),
        Some(have) if !have.same_as(wanted) => Some(Action::UpdateFirewall(wanted.clone())),
        Some(_) => None,
    }
}

/// The deletions for a Service, in dependency order. Each step tolerates "not found"; shared
/// pieces (node health checks, instance groups) also tolerate "in use" by other Services.
pub fn plan_delete(lb: &str, cluster_id: &str, zones: &[String]) -> Vec<Action> {
    use crate::desired::{firewall_name, instance_group_name, shared_health_check_name};
    let shared = shared_health_check_name(cluster_id);
    let mut actions = vec![
        Action::DeleteForwardingRule(lb.to_string()),
        Action::DeleteAddress(lb.to_string()),
        Action::DeleteTargetPool(lb.to_string()),
        Action::DeleteBackendService(lb.to_string()),
        Action::DeleteFirewall(firewall_name(lb)),
    ];
    for kind in [HealthCheckKind::LegacyHttp, HealthCheckKind::Http] {
        for name in [lb.to_string(), shared.clone()] {
            actions.push(Action::DeleteHealthCheck {
                kind,
                firewall: health_check_firewall_name(kind, &name, lb),
                name,
            });
        }
    }
    for zone in zones {
        actions.push(Action::DeleteInstanceGroup {
            zone: zone.clone(),
            name: instance_group_name(cluster_id),
        });
    }
    actions
}

/// `actions` as one Compute call each: a health-check swap is a `removeHealthCheck` then an
/// `addHealthCheck` (a pool holds at most one legacy check, so the old one goes first), and a
/// swap with nothing to change is no call at all.
pub fn split(actions: Vec<Action>) -> Vec<Action> {
    let mut out = Vec::with_capacity(actions.len());
    for action in actions {
        match action {
            Action::SwapPoolHealthCheck { pool, add, remove } => {
                if !remove.is_empty() {
                    out.push(Action::SwapPoolHealthCheck {
                        pool: pool.clone(),
                        add: BTreeSet::new(),
                        remove,
                    });
                }
                if !add.is_empty() {
                    out.push(Action::SwapPoolHealthCheck {
                        pool,
                        add,
                        remove: BTreeSet::new(),
                    });
                }
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::tests::{node, settings, spec, tags};
    use crate::desired::{desired, firewall_description};
    use serde_json::json;

    const IP: &str = "203.0.113.10";

    fn want(annotations: serde_json::Value, extra: serde_json::Value) -> Desired {
        let nodes = [node("r1-a", "n1"), node("r1-b", "n2")];
        desired(&spec(annotations, extra), &nodes, &settings(), &tags()).unwrap()
    }

    fn external() -> Desired {
        want(json!({}), json!({}))
    }

    fn internal() -> Desired {
        want(
            json!({"networking.gke.io/load-balancer-type": "Internal"}),
            json!({}),
        )
    }

    /// What the provider leaves behind after converging `desired` on `ip`.
    fn converged(desired: &Desired, ip: &str) -> Observed {
        let ip: IpAddr = ip.parse().unwrap();
        let mut firewall = desired.firewall.clone();
        firewall.description = firewall_description(&desired.service, ip);
        firewall.destination_ranges = BTreeSet::from([ip.to_string()]);
        let mut rule = desired.rule.clone();
        rule.ip = Some(ip);
        rule.fingerprint = Some(vec![1, 2, 3]);
        rule.tier = rule
            .tier
            .or_else(|| (!rule.internal).then(|| "PREMIUM".to_string()));
        let mut address = desired.address.clone();
        address.ip = Some(ip);
        address.tier = address
            .tier
            .or_else(|| (!address.internal).then(|| "PREMIUM".to_string()));
        Observed {
            rule: Some(rule),
            address: Some(address),
            user_address: None,
            firewall: Some(firewall),
            health_check: Some(desired.health_check.clone()),
            health_check_firewall: Some(desired.health_check_firewall.clone()),
            target_pool: desired.target_pool.clone(),
            backend_service: desired.backend_service.clone().map(|b| BackendService {
                fingerprint: Some(vec![9]),
                ..b
            }),
            other_own_health_checks: Vec::new(),
            groups: desired
                .groups
                .iter()
                .map(|g| (g.zone.clone(), Some(g.clone())))
                .collect(),
        }
    }

    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| a.label().split(' ').take(2).collect::<Vec<_>>().join(" "))
            .collect()
    }

    fn both_phases(desired: &Desired, observed: &Observed) -> (Vec<Action>, Vec<Action>) {
        let (first, source) = plan_address(desired, observed).unwrap();
        let ip = match source {
            IpSource::User(ip) | IpSource::Owned(Some(ip)) => ip,
            IpSource::Owned(None) => IP.parse().unwrap(),
        };
        let second = plan(desired, observed, ip, &source);
        (first, second)
    }

    #[test]
    fn converged_load_balancers_plan_nothing() {
        let cases = [
            ("external cluster", external()),
            (
                "external local",
                want(
                    json!({}),
                    json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 31000}),
                ),
            ),
            (
                "external client-ip",
                want(json!({}), json!({"sessionAffinity": "ClientIP"})),
            ),
            ("internal", internal()),
            (
                "internal global access",
                want(
                    json!({"networking.gke.io/load-balancer-type": "Internal",
                    "networking.gke.io/internal-load-balancer-allow-global-access": "true"}),
                    json!({}),
                ),
            ),
        ];
        for (name, desired) in cases {
            let ip = if desired.internal { "10.0.0.9" } else { IP };
            let (first, second) = both_phases(&desired, &converged(&desired, ip));
            assert_eq!((first, second), (vec![], vec![]), "{name}");
        }
    }

    #[test]
    fn fresh_external_builds_in_dependency_order() {
        let desired = external();
        let (first, second) = both_phases(&desired, &Observed::default());
        assert_eq!(kinds(&first), ["reserve address"]);
        assert_eq!(
            kinds(&second),
            [
                "insert firewall",
                "insert firewall",
                "insert httpHealthChecks",
                "insert target",
                "insert forwarding"
            ]
        );
    }

    #[test]
    fn fresh_internal_builds_groups_before_the_backend_service() {
        let desired = internal();
        let (first, second) = both_phases(&desired, &Observed::default());
        assert_eq!(kinds(&first), ["reserve address"]);
        assert_eq!(
            kinds(&second),
            [
                "insert firewall",
                "insert firewall",
                "insert healthChecks",
                "insert instance",
                "add 1",
                "insert instance",
                "add 1",
                "insert backend",
                "insert forwarding",
            ]
        );
    }

    #[test]
    fn an_adopted_rule_has_its_ip_promoted_once() {
        let desired = external();
        let mut observed = converged(&desired, IP);
        observed.address = None;
        let (first, second) = both_phases(&desired, &observed);
        assert_eq!(
            first,
            vec![Action::ReserveAddress(Address {
                ip: Some(IP.parse().unwrap()),
                ..desired.address.clone()
            })]
        );
        assert_eq!(second, vec![]);
    }

    #[test]
    fn changes_that_need_a_new_rule_delete_it_first_and_create_it_last() {
        let cases = [
            (
                "ports",
                want(
                    json!({}),
                    json!({"ports": [{"name": "a", "port": 8080, "nodePort": 30080, "protocol": "TCP"}]}),
                ),
            ),
            (
                "affinity",
                want(json!({}), json!({"sessionAffinity": "ClientIP"})),
            ),
        ];
        for (name, changed) in cases {
            let observed = converged(&external(), IP);
            let (first, second) = both_phases(&changed, &observed);
            assert!(first.is_empty(), "{name}: the address is kept");
            assert_eq!(
                second.first().map(Action::label),
                Some(format!("delete forwarding rule {}", changed.lb)),
                "{name}"
            );
            assert_eq!(
                second.last().map(Action::label),
                Some(format!("insert forwarding rule {}", changed.lb)),
                "{name}"
            );
        }
    }

    #[test]
    fn raised_health_check_values_are_kept_but_a_new_port_is_written() {
        let desired = external();
        let mut observed = converged(&desired, IP);
        if let Some(hc) = observed.health_check.as_mut() {
            hc.timing.interval = 60;
        }
        assert_eq!(both_phases(&desired, &observed), (vec![], vec![]));
        if let Some(hc) = observed.health_check.as_mut() {
            hc.port = 1;
        }
        let (_, second) = both_phases(&desired, &observed);
        match second.as_slice() {
            [Action::UpdateHealthCheck(hc)] => {
                assert_eq!((hc.port, hc.timing.interval), (10256, 60))
            }
            other => panic!("unexpected plan {other:?}"),
        }
    }

    #[test]
    fn accepted_owner_marks_on_a_health_check_are_kept_and_foreign_ones_rewritten() {
        let desired = external();
        // (description found on the shared node health check, whether it is rewritten)
        let cases = [
            (json!({"kubernetes.io/cluster-id": "c1"}).to_string(), false),
            (
                json!({"kubernetes.io/service-name": "k8s-c1-node"}).to_string(),
                false,
            ),
            (String::new(), true),
            ("made by hand".to_string(), true),
        ];
        for (description, rewritten) in cases {
            let mut observed = converged(&desired, IP);
            if let Some(hc) = observed.health_check.as_mut() {
                hc.description = description.clone();
            }
            let (_, second) = both_phases(&desired, &observed);
            assert_eq!(
                matches!(second.as_slice(), [Action::UpdateHealthCheck(_)]),
                rewritten,
                "{description:?}: {second:?}"
            );
        }
    }

    #[test]
    fn backend_service_updates_carry_the_fingerprint_and_protocol_changes_recreate_the_rule() {
        let desired = internal();
        let mut observed = converged(&desired, "10.0.0.9");
        if let Some(bs) = observed.backend_service.as_mut() {
            bs.session_affinity = "CLIENT_IP".into();
        }
        let (_, second) = both_phases(&desired, &observed);
        match second.as_slice() {
            [Action::UpdateBackendService(bs)] => assert_eq!(bs.fingerprint, Some(vec![9])),
            other => panic!("unexpected plan {other:?}"),
        }
        if let Some(bs) = observed.backend_service.as_mut() {
            bs.protocol = "UDP".into();
        }
        let (_, second) = both_phases(&desired, &observed);
        assert_eq!(
            kinds(&second),
            ["delete forwarding", "update backend", "insert forwarding"]
        );
    }

    #[test]
    fn global_access_is_patched_in_place() {
        let observed = converged(&internal(), "10.0.0.9");
        let changed = want(
            json!({"networking.gke.io/load-balancer-type": "Internal",
            "networking.gke.io/internal-load-balancer-allow-global-access": "true"}),
            json!({}),
        );
        let (_, second) = both_phases(&changed, &observed);
        assert_eq!(
            second,
            vec![Action::PatchGlobalAccess {
                name: changed.lb.clone(),
                allow: true,
                fingerprint: Some(vec![1, 2, 3])
            }]
        );
    }

    #[test]
    fn switching_to_local_swaps_the_pool_health_check_and_drops_the_shared_one() {
        let observed = converged(&external(), IP);
        let local = want(
            json!({}),
            json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 31000}),
        );
        let mut observed = observed;
        observed.health_check = None;
        observed.health_check_firewall = None;
        let (_, second) = both_phases(&local, &observed);
        assert_eq!(
            kinds(&second),
            [
                "insert firewall",
                "insert httpHealthChecks",
                "swap health",
                "delete httpHealthChecks"
            ]
        );
        assert!(
            matches!(second.last(), Some(Action::DeleteHealthCheck { name, .. }) if name == "k8s-c1-node")
        );
    }

    #[test]
    fn a_user_owned_address_is_used_and_our_reservation_released() {
        let desired = want(json!({}), json!({"loadBalancerIP": "198.51.100.5"}));
        let mut observed = converged(&external(), IP);
        observed.user_address = Some(Address {
            name: "mine".into(),
            description: String::new(),
            ip: Some("198.51.100.5".parse().unwrap()),
            internal: false,
            tier: Some("PREMIUM".into()),
            subnetwork: None,
        });
        let (first, second) = both_phases(&desired, &observed);
        assert!(first.is_empty());
        assert_eq!(
            second.first().map(Action::label),
            Some(format!("delete forwarding rule {}", desired.lb))
        );
        assert_eq!(
            second.last(),
            Some(&Action::DeleteAddress(desired.lb.clone()))
        );
    }

    #[test]
    fn large_pools_are_created_in_two_steps() {
        let mut desired = external();
        if let Some(pool) = desired.target_pool.as_mut() {
            pool.instances = (0..250)
                .map(|i| format!("projects/p/zones/r1-a/instances/n{i:03}"))
                .collect();
        }
        let (_, second) = both_phases(&desired, &Observed::default());
        let sizes: Vec<usize> = second
            .iter()
            .filter_map(|a| match a {
                Action::InsertTargetPool(pool) => Some(pool.instances.len()),
                Action::AddPoolInstances(_, instances) => Some(instances.len()),
                _ => None,
            })
            .collect();
        assert_eq!(sizes, [200, 50]);
    }

    #[test]
    fn delete_goes_from_the_rule_down_to_shared_pieces() {
        let labels: Vec<String> = plan_delete("a1", "c1", &["z1".to_string()])
            .iter()
            .map(Action::label)
            .collect();
        assert_eq!(
            labels,
            [
                "delete forwarding rule a1",
                "delete address a1",
                "delete target pool a1",
                "delete backend service a1",
                "delete firewall k8s-fw-a1",
                "delete httpHealthChecks a1",
                "delete httpHealthChecks k8s-c1-node",
                "delete healthChecks a1",
                "delete healthChecks k8s-c1-node",
                "delete instance group z1/k8s-ig--c1",
            ]
        );
    }

    #[test]
    fn split_makes_a_health_check_swap_two_calls_and_an_empty_one_none() {
        let links = |n: &str| BTreeSet::from([format!("projects/p/global/httpHealthChecks/{n}")]);
        let swap = |add: BTreeSet<String>, remove: BTreeSet<String>| Action::SwapPoolHealthCheck {
            pool: "a1".into(),
            add,
            remove,
        };
        let split = split(vec![
            swap(links("a1"), links("k8s-c1-node")),
            swap(BTreeSet::new(), BTreeSet::new()),
            Action::DeleteTargetPool("a1".into()),
        ]);
        assert_eq!(
            split,
            vec![
                swap(BTreeSet::new(), links("k8s-c1-node")),
                swap(links("a1"), BTreeSet::new()),
                Action::DeleteTargetPool("a1".into()),
            ],
            "the old check goes first; nothing to swap is no call"
        );
    }
}

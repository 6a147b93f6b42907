//! `plan(observed, desired) -> actions`: the pure diff between what exists in Azure and what
//! the Service wants (or, with no desired state, what deleting it needs). Comparisons look
//! only at the fields kube-lb sets, so server-filled fields (IDs, etags, back-references,
//! allocated addresses, defaults) never cause a write: a resync of an unchanged Service plans
//! nothing.
//!
//! Every Service of a cluster shares the same load balancer (a frontend, rules and probes each),
//! security rules and public IP list, so these grow with the number of Services. A plan only
//! scans them: it decides whether anything changes by reading, and copies only the object it
//! must write, so a no-op resync of one Service costs a scan, not a copy, of what it shares.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube_lb_provider_core::{ProviderError, ServiceKey};
use md5::{Digest, Md5};

use crate::arm::{
    BackendAddressPool, FrontendIpConfiguration, FrontendProperties, LoadBalancer,
    LoadBalancingRule, Probe, PublicIp, SecurityGroup, SecurityRule, SecurityRuleProperties, Sku,
    SubResource, resource_group_of,
};
use crate::desired::{
    AllowEntry, CLUSTER_TAG, DNS_LABEL_TAG, Desired, FrontendKind, LEGACY_CLUSTER_TAG,
    LEGACY_SERVICE_TAG, MANAGED_PRIORITY_MAX, MANAGED_PRIORITY_MIN, MANAGED_RULE_PREFIX, PipChoice,
    SERVICE_TAG, Settings,
};
use crate::error::AzureError;

/// What exists in Azure that matters to one Service. The objects are shared with the provider's
/// cache (and with every other Service's observation): reading them is free, changing one means
/// `Arc::make_mut` or a copy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The cluster's shared load balancers that exist (external and/or internal).
    pub load_balancers: Vec<Arc<LoadBalancer>>,
    /// Public IPs in the resource groups the Service may use.
    pub public_ips: Vec<Arc<PublicIp>>,
    /// The cluster security group, when configured and present.
    pub security_group: Option<Arc<SecurityGroup>>,
}

/// One write.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Create or update a public IP.
    PutPublicIp {
        /// Resource group.
        rg: String,
        /// The object (with the etag it was computed from, if it exists).
        pip: PublicIp,
    },
    /// Create or update a shared load balancer.
    PutLoadBalancer(LoadBalancer),
    /// Delete a shared load balancer that no longer has frontends.
    DeleteLoadBalancer {
        /// Name.
        name: String,
        /// Etag it was observed with.
        etag: Option<String>,
    },
    /// Update the cluster security group.
    PutSecurityGroup {
        /// Resource group.
        rg: String,
        /// The object.
        nsg: SecurityGroup,
    },
    /// Delete a public IP the Service owned.
    DeletePublicIp {
        /// Resource group.
        rg: String,
        /// Name.
        name: String,
        /// Etag it was observed with.
        etag: Option<String>,
    },
}

impl Action {
    /// A short label for logs.
    pub fn describe(&self) -> String {
        match self {
            Action::PutPublicIp { pip, .. } => format!("put public IP {}", pip.name),
            Action::PutLoadBalancer(lb) => format!("put load balancer {}", lb.name),
            Action::DeleteLoadBalancer { name, .. } => format!("delete load balancer {name}"),
            Action::PutSecurityGroup { nsg, .. } => format!("put security group {}", nsg.name),
            Action::DeletePublicIp { name, .. } => format!("delete public IP {name}"),
        }
    }
}

/// True when a child named `name` belongs to the Service whose names start with `prefix`
/// (`prefix` itself or `prefix-…`, ignoring ASCII case).
pub fn owned_child(prefix: &str, name: &str) -> bool {
    // Called for every child of the shared load balancers on every Service's sync: compares
    // bytes in place rather than building `prefix-`.
    let (name, prefix) = (name.as_bytes(), prefix.as_bytes());
    name.eq_ignore_ascii_case(prefix)
        || name.get(..prefix.len() + 1).is_some_and(|head| {
            head[prefix.len()] == b'-' && head[..prefix.len()].eq_ignore_ascii_case(prefix)
        })
}

/// The error for a public IP that has the Service's deterministic name but is tagged for
/// another owner (or not tagged at all): never adopted or rewritten, so it is a user error
/// naming whoever holds the name, and the Service waits for a change.
fn name_taken(pip: &PublicIp, rg: &str, service: &ServiceKey) -> ProviderError {
    let tag = |new: &str, legacy: &str| pip.tags.get(new).or_else(|| pip.tags.get(legacy));
    let owner = match (
        tag(SERVICE_TAG, LEGACY_SERVICE_TAG),
        tag(CLUSTER_TAG, LEGACY_CLUSTER_TAG),
    ) {
        (Some(services), Some(cluster)) => {
            format!("Service(s) {services} of cluster {cluster}")
        }
        (Some(services), None) => format!("Service(s) {services}"),
        (None, Some(cluster)) => format!("cluster {cluster} (no {SERVICE_TAG} tag)"),
        (None, None) => format!("an unknown owner (no {SERVICE_TAG} tag)"),
    };
    ProviderError::owned_elsewhere(
        "PutPublicIPAddress",
        format!(
            "public IP {} in resource group {rg} (the name kube-lb uses for {service}; to hand it \
             over, tag it {SERVICE_TAG}={service})",
            pip.name
        ),
        owner,
    )
}

/// True when `pip`'s tags say `service` of `cluster` owns it.
pub fn owns_public_ip(pip: &PublicIp, cluster: &str, service: &ServiceKey) -> bool {
    owned_by(pip, cluster, &service.to_string())
}

/// [`owns_public_ip`] with the Service's `namespace/name` formatted once: it is asked of every
/// listed public IP on every sync.
fn owned_by(pip: &PublicIp, cluster: &str, service_name: &str) -> bool {
    let tag = |new: &str, legacy: &str| pip.tags.get(new).or_else(|| pip.tags.get(legacy));
    let listed = tag(SERVICE_TAG, LEGACY_SERVICE_TAG)
        .is_some_and(|v| v.split(',').any(|s| s.trim() == service_name));
    let cluster_ok = tag(CLUSTER_TAG, LEGACY_CLUSTER_TAG).is_none_or(|c| c == cluster);
    listed && cluster_ok
}

fn same_id(a: Option<&SubResource>, b: Option<&SubResource>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.same(&b.id),
        (None, None) => true,
        _ => false,
    }
}

fn set_if<T: PartialEq>(want: &Option<T>, have: &Option<T>) -> bool {
    want.is_none() || want == have
}

fn frontend_matches(have: &FrontendIpConfiguration, want: &FrontendIpConfiguration) -> bool {
    let (h, w) = (&have.properties, &want.properties);
    if w.public_ip_address.is_some() {
        return same_id(h.public_ip_address.as_ref(), w.public_ip_address.as_ref())
            && h.subnet.is_none();
    }
    let address_ok = match &w.private_ip_address {
        Some(ip) => {
            h.private_ip_address.as_ref() == Some(ip)
                && h.private_ip_allocation_method.as_deref() == Some("Static")
        }
        None => true,
    };
    same_id(h.subnet.as_ref(), w.subnet.as_ref()) && h.public_ip_address.is_none() && address_ok
}

fn rule_matches(have: &LoadBalancingRule, want: &LoadBalancingRule) -> bool {
    let (h, w) = (&have.properties, &want.properties);
    same_id(
        h.frontend_ip_configuration.as_ref(),
        w.frontend_ip_configuration.as_ref(),
    ) && same_id(
        h.backend_address_pool.as_ref(),
        w.backend_address_pool.as_ref(),
    ) && same_id(h.probe.as_ref(), w.probe.as_ref())
        && h.protocol == w.protocol
        && h.frontend_port == w.frontend_port
        && set_if(&w.backend_port, &h.backend_port)
        && set_if(&w.idle_timeout_in_minutes, &h.idle_timeout_in_minutes)
        && set_if(&w.enable_floating_ip, &h.enable_floating_ip)
        && set_if(&w.enable_tcp_reset, &h.enable_tcp_reset)
        && set_if(&w.load_distribution, &h.load_distribution)
}

fn probe_matches(have: &Probe, want: &Probe) -> bool {
    let (h, w) = (&have.properties, &want.properties);
    h.protocol == w.protocol
        && h.port == w.port
        && set_if(&w.request_path, &h.request_path)
        && set_if(&w.interval_in_seconds, &h.interval_in_seconds)
        && set_if(&w.probe_threshold, &h.probe_threshold)
}

trait Named {
    fn name(&self) -> &str;
}

impl Named for FrontendIpConfiguration {
    fn name(&self) -> &str {
        &self.name
    }
}
impl Named for LoadBalancingRule {
    fn name(&self) -> &str {
        &self.name
    }
}
impl Named for Probe {
    fn name(&self) -> &str {
        &self.name
    }
}

/// Makes the Service's children in `list` equal to `wanted`, keeping matching ones untouched
/// (with their server-filled fields) and every other Service's children as they are. Returns
/// whether anything changed.
fn reconcile_children<T: Named + Clone>(
    list: &mut Vec<T>,
    prefix: &str,
    wanted: &[T],
    matches: fn(&T, &T) -> bool,
) -> bool {
    let mut changed = false;
    let mut out = Vec::with_capacity(list.len() + wanted.len());
    let mut placed = BTreeSet::new();
    for item in list.drain(..) {
        if !owned_child(prefix, item.name()) {
            out.push(item);
            continue;
        }
        match wanted
            .iter()
            .find(|w| w.name().eq_ignore_ascii_case(item.name()))
        {
            Some(want) if matches(&item, want) => {
                placed.insert(want.name().to_ascii_lowercase());
                out.push(item);
            }
            Some(want) => {
                placed.insert(want.name().to_ascii_lowercase());
                out.push(want.clone());
                changed = true;
            }
            None => changed = true,
        }
    }
    for want in wanted {
        if !placed.contains(&want.name().to_ascii_lowercase()) {
            out.push(want.clone());
            changed = true;
        }
    }
    *list = out;
    changed
}

/// Whether [`reconcile_children`] would change `list`, found by reading it: the shared lists
/// hold every Service's children, and most syncs change none of them.
fn children_changed<T: Named>(
    list: &[T],
    prefix: &str,
    wanted: &[T],
    matches: fn(&T, &T) -> bool,
) -> bool {
    let mut placed = BTreeSet::new();
    for item in list.iter().filter(|i| owned_child(prefix, i.name())) {
        match wanted
            .iter()
            .find(|w| w.name().eq_ignore_ascii_case(item.name()))
        {
            Some(want) if matches(item, want) => {
                placed.insert(want.name().to_ascii_lowercase());
            }
            // Replaced, or no longer wanted.
            _ => return true,
        }
    }
    wanted
        .iter()
        .any(|w| !placed.contains(&w.name().to_ascii_lowercase()))
}

/// True when the load balancer holds a frontend, rule or probe of the Service.
fn holds_service(lb: &LoadBalancer, prefix: &str) -> bool {
    let props = &lb.properties;
    props
        .frontend_ip_configurations
        .iter()
        .any(|c| owned_child(prefix, &c.name))
        || props
            .load_balancing_rules
            .iter()
            .any(|c| owned_child(prefix, &c.name))
        || props.probes.iter().any(|c| owned_child(prefix, &c.name))
}

/// Removes every child of the Service.
fn remove_service(lb: &mut LoadBalancer, prefix: &str) {
    let props = &mut lb.properties;
    props
        .frontend_ip_configurations
        .retain(|c| !owned_child(prefix, &c.name));
    props
        .load_balancing_rules
        .retain(|c| !owned_child(prefix, &c.name));
    props.probes.retain(|c| !owned_child(prefix, &c.name));
}

fn reconcile_pool(lb: &mut LoadBalancer, settings: &Settings, desired: &Desired) -> bool {
    let pools = &mut lb.properties.backend_address_pools;
    let (index, created) = match pools
        .iter()
        .position(|p| p.name.eq_ignore_ascii_case(settings.pool_name()))
    {
        Some(i) => (i, false),
        None => {
            pools.push(BackendAddressPool {
                name: settings.pool_name().to_string(),
                ..Default::default()
            });
            (pools.len() - 1, true)
        }
    };
    let members = &mut pools[index].properties.load_balancer_backend_addresses;
    let key = |m: &crate::arm::BackendAddress| (m.name.clone(), m.properties.ip_address.clone());
    let have: BTreeSet<_> = members.iter().map(key).collect();
    let want: BTreeSet<_> = desired.members.iter().map(key).collect();
    let changed = if desired.exact_members {
        if have != want {
            *members = desired.members.clone();
            true
        } else {
            false
        }
    } else {
        let mut changed = false;
        for member in &desired.members {
            if !have.contains(&key(member)) {
                members.retain(|m| m.name != member.name);
                members.push(member.clone());
                changed = true;
            }
        }
        members.sort_by(|a, b| a.name.cmp(&b.name));
        changed
    };
    changed || created
}

/// Whether [`reconcile_pool`] would report a change, found by reading.
fn pool_changed(lb: &LoadBalancer, settings: &Settings, desired: &Desired) -> bool {
    let Some(pool) = lb
        .properties
        .backend_address_pools
        .iter()
        .find(|p| p.name.eq_ignore_ascii_case(settings.pool_name()))
    else {
        return true;
    };
    let members = &pool.properties.load_balancer_backend_addresses;
    let key = |m: &crate::arm::BackendAddress| (m.name.clone(), m.properties.ip_address.clone());
    let have: BTreeSet<_> = members.iter().map(key).collect();
    if desired.exact_members {
        let want: BTreeSet<_> = desired.members.iter().map(key).collect();
        have != want
    } else {
        desired.members.iter().any(|m| !have.contains(&key(m)))
    }
}

/// The Service's public IP: where it is, its ID and (when it exists) its address.
#[derive(Debug, Clone, PartialEq)]
struct ChosenIp {
    id: String,
    address: Option<String>,
}

fn find_pip<'a>(observed: &'a Observed, rg: &str, name: &str) -> Option<&'a PublicIp> {
    observed
        .public_ips
        .iter()
        .find(|p| {
            p.name.eq_ignore_ascii_case(name)
                && p.id
                    .as_deref()
                    .and_then(resource_group_of)
                    .is_some_and(|r| r.eq_ignore_ascii_case(rg))
        })
        .map(Arc::as_ref)
}

fn pip_address(observed: &Observed, id: &str) -> Option<String> {
    observed
        .public_ips
        .iter()
        .find(|p| p.id.as_deref().is_some_and(|i| i.eq_ignore_ascii_case(id)))
        .and_then(|p| p.properties.ip_address.clone())
}

fn plan_public_ip(
    settings: &Settings,
    desired: &Desired,
    choice: &PipChoice,
    observed: &Observed,
    actions: &mut Vec<Action>,
) -> Result<ChosenIp, ProviderError> {
    match choice {
        PipChoice::Managed { rg, pip } => {
            let id = settings.ids.public_ip(rg, &pip.name);
            let Some(existing) = find_pip(observed, rg, &pip.name) else {
                actions.push(Action::PutPublicIp {
                    rg: rg.clone(),
                    pip: pip.as_ref().clone(),
                });
                return Ok(ChosenIp { id, address: None });
            };
            // The name is deterministic, so after a create whose answer was lost the retry
            // finds the address here, tagged as this Service's: it is adopted. The same name
            // tagged for someone else is never taken over.
            if !owns_public_ip(existing, &settings.cluster, &desired.service) {
                return Err(name_taken(existing, rg, &desired.service));
            }
            let mut merged = existing.clone();
            for (k, v) in &pip.tags {
                // The service tag may list several Services sharing the address; keep them.
                if k == SERVICE_TAG
                    && merged
                        .tags
                        .get(k)
                        .is_some_and(|have| have.split(',').any(|s| s.trim() == v))
                {
                    continue;
                }
                merged.tags.insert(k.clone(), v.clone());
            }
            let want_label = pip
                .properties
                .dns_settings
                .as_ref()
                .and_then(|d| d.domain_name_label.clone());
            let have_label = merged
                .properties
                .dns_settings
                .as_ref()
                .and_then(|d| d.domain_name_label.clone());
            let service = desired.service.to_string();
            if want_label.is_some() && want_label != have_label {
                merged.properties.dns_settings = pip.properties.dns_settings.clone();
            } else if want_label.is_none()
                && have_label.is_some()
                && merged.tags.get(DNS_LABEL_TAG) == Some(&service)
            {
                merged.properties.dns_settings = None;
                merged.tags.remove(DNS_LABEL_TAG);
            }
            if merged != *existing {
                actions.push(Action::PutPublicIp {
                    rg: rg.clone(),
                    pip: merged,
                });
            }
            Ok(ChosenIp {
                id,
                address: existing.properties.ip_address.clone(),
            })
        }
        PipChoice::Named { rg, name } => match find_pip(observed, rg, name) {
            Some(pip) => Ok(ChosenIp {
                id: pip
                    .id
                    .clone()
                    .unwrap_or_else(|| settings.ids.public_ip(rg, name)),
                address: pip.properties.ip_address.clone(),
            }),
            None => Err(AzureError::User(format!(
                "PublicIP from annotation azure-pip-name={name} doesn't exist in resource group {rg}"
            ))
            .into()),
        },
        PipChoice::ByAddress { rg, ip } => {
            let text = ip.to_string();
            let found = observed.public_ips.iter().find(|p| {
                p.properties.ip_address.as_deref() == Some(text.as_str())
                    && p.id
                        .as_deref()
                        .and_then(resource_group_of)
                        .is_some_and(|r| r.eq_ignore_ascii_case(rg))
            });
            match found {
                Some(pip) => Ok(ChosenIp {
                    id: pip
                        .id
                        .clone()
                        .unwrap_or_else(|| settings.ids.public_ip(rg, &pip.name)),
                    address: Some(text),
                }),
                None => Err(AzureError::User(format!(
                    "user supplied IP address {ip} was not found in resource group {rg}: create a Standard static public IP with that address first"
                ))
                .into()),
            }
        }
    }
}

fn wanted_frontend(desired: &Desired, pip_id: Option<&str>) -> FrontendIpConfiguration {
    let properties = match &desired.frontend {
        FrontendKind::Public(_) => FrontendProperties {
            public_ip_address: pip_id.map(SubResource::new),
            ..Default::default()
        },
        FrontendKind::Internal {
            subnet_id,
            private_ip,
            ..
        } => FrontendProperties {
            subnet: Some(SubResource::new(subnet_id.clone())),
            private_ip_address: private_ip.map(|ip| ip.to_string()),
            private_ip_allocation_method: Some(
                if private_ip.is_some() {
                    "Static"
                } else {
                    "Dynamic"
                }
                .into(),
            ),
            ..Default::default()
        },
    };
    FrontendIpConfiguration {
        name: desired.frontend_name.clone(),
        properties,
        ..Default::default()
    }
}

fn frontend_address(observed: &Observed, frontend: &FrontendIpConfiguration) -> Option<String> {
    match &frontend.properties.public_ip_address {
        Some(pip) => pip_address(observed, &pip.id),
        None => frontend.properties.private_ip_address.clone(),
    }
}

/// Plans the writes that take `observed` to `desired` (`None`: the Service is being deleted).
pub fn plan(
    settings: &Settings,
    service: &ServiceKey,
    desired: Option<&Desired>,
    observed: &Observed,
) -> Result<Vec<Action>, ProviderError> {
    let prefix = kube_lb_provider_core::naming::load_balancer_name(&service.uid);
    let mut actions = Vec::new();
    // 1. Public IP.
    let chosen = match desired.map(|d| (d, &d.frontend)) {
        Some((d, FrontendKind::Public(choice))) => {
            Some(plan_public_ip(settings, d, choice, observed, &mut actions)?)
        }
        _ => None,
    };
    // 2. The load balancer that should hold the Service. Its write goes after step 3's: a move
    // between the external and the internal load balancer (an internal ↔ external switch) is
    // break-before-make, so the Service never has a frontend on both at once, whatever step a
    // kill interrupts (the next ensure observes both load balancers and finishes the move).
    let put_at = actions.len();
    // The load balancers as they will be once the actions are applied (`None`: deleted),
    // sharing the observed ones that do not change.
    let mut lb_after: BTreeMap<String, Option<Arc<LoadBalancer>>> = observed
        .load_balancers
        .iter()
        .map(|lb| (lb.name.to_ascii_lowercase(), Some(Arc::clone(lb))))
        .collect();
    if let Some(desired) = desired {
        let key = desired.lb_name.to_ascii_lowercase();
        let existing = lb_after.get(&key).cloned().flatten();
        let frontend = wanted_frontend(desired, chosen.as_ref().map(|c| c.id.as_str()));
        // Decided by reading first: the shared load balancer is copied only to be written.
        let differs = existing.as_deref().is_none_or(|lb| {
            let props = &lb.properties;
            children_changed(
                &props.frontend_ip_configurations,
                &prefix,
                std::slice::from_ref(&frontend),
                frontend_matches,
            ) || children_changed(&props.probes, &prefix, &desired.probes, probe_matches)
                || children_changed(
                    &props.load_balancing_rules,
                    &prefix,
                    &desired.rules,
                    rule_matches,
                )
                || pool_changed(lb, settings, desired)
        });
        if differs {
            let mut lb = existing
                .as_deref()
                .cloned()
                .unwrap_or_else(|| LoadBalancer {
                    name: desired.lb_name.clone(),
                    location: settings.location.clone(),
                    sku: Some(Sku {
                        name: settings.sku.as_str().into(),
                        tier: Some("Regional".into()),
                    }),
                    ..Default::default()
                });
            let props = &mut lb.properties;
            let mut changed = existing.is_none();
            changed |= reconcile_children(
                &mut props.frontend_ip_configurations,
                &prefix,
                &[frontend],
                frontend_matches,
            );
            changed |=
                reconcile_children(&mut props.probes, &prefix, &desired.probes, probe_matches);
            changed |= reconcile_children(
                &mut props.load_balancing_rules,
                &prefix,
                &desired.rules,
                rule_matches,
            );
            changed |= reconcile_pool(&mut lb, settings, desired);
            if changed {
                actions.push(Action::PutLoadBalancer(lb.clone()));
            }
            lb_after.insert(key, Some(Arc::new(lb)));
        }
    }
    // 3. Every other cluster load balancer must not hold the Service.
    let keep = desired.map(|d| d.lb_name.to_ascii_lowercase());
    let mut removals = Vec::new();
    for observed_lb in &observed.load_balancers {
        let key = observed_lb.name.to_ascii_lowercase();
        if Some(&key) == keep.as_ref() {
            continue;
        }
        let props = &observed_lb.properties;
        if props
            .frontend_ip_configurations
            .iter()
            .all(|f| owned_child(&prefix, &f.name))
        {
            // Nothing but the Service's frontends (or none at all): it goes.
            removals.push(Action::DeleteLoadBalancer {
                name: observed_lb.name.clone(),
                etag: observed_lb.etag.clone(),
            });
            lb_after.insert(key, None);
        } else if holds_service(observed_lb, &prefix) {
            let mut lb = LoadBalancer::clone(observed_lb);
            remove_service(&mut lb, &prefix);
            removals.push(Action::PutLoadBalancer(lb.clone()));
            lb_after.insert(key, Some(Arc::new(lb)));
        }
    }
    actions.splice(put_at..put_at, removals);
    // 4. Security group.
    let service_name = service.to_string();
    if let (Some((rg, _)), Some(nsg)) = (&settings.security_group, &observed.security_group) {
        let managed_here = desired.is_none_or(|d| d.security.is_some());
        if managed_here {
            let mut remove: BTreeSet<String> = BTreeSet::new();
            for lb in &observed.load_balancers {
                for fe in lb
                    .properties
                    .frontend_ip_configurations
                    .iter()
                    .filter(|f| owned_child(&prefix, &f.name))
                {
                    remove.extend(frontend_address(observed, fe));
                }
            }
            for pip in observed
                .public_ips
                .iter()
                .filter(|p| owned_by(p, &settings.cluster, &service_name))
            {
                remove.extend(pip.properties.ip_address.clone());
            }
            let add = desired.and_then(|d| {
                let intent = d.security.as_ref()?;
                let mut destinations: Vec<String> = match &intent.node_destinations {
                    Some(nodes) => nodes.iter().map(ToString::to_string).collect(),
                    None => {
                        let address = match &d.frontend {
                            FrontendKind::Public(_) => {
                                chosen.as_ref().and_then(|c| c.address.clone())
                            }
                            FrontendKind::Internal {
                                private_ip: Some(ip),
                                ..
                            } => Some(ip.to_string()),
                            FrontendKind::Internal { .. } => lb_after
                                .get(&d.lb_name.to_ascii_lowercase())
                                .and_then(Option::as_deref)
                                .and_then(|lb| {
                                    lb.properties
                                        .frontend_ip_configurations
                                        .iter()
                                        .find(|f| f.name.eq_ignore_ascii_case(&d.frontend_name))
                                        .and_then(|f| f.properties.private_ip_address.clone())
                                }),
                        };
                        // Not known yet (address being allocated): the next round adds it.
                        vec![address?]
                    }
                };
                destinations.extend(intent.extra_destinations.iter().map(ToString::to_string));
                Some((intent.allow.clone(), destinations, intent.deny_all))
            });
            // With floating IP disabled, rules target node IPs on the Service's node ports.
            let exclusive_ports: BTreeSet<String> = observed
                .load_balancers
                .iter()
                .flat_map(|lb| lb.properties.load_balancing_rules.iter())
                .filter(|r| {
                    owned_child(&prefix, &r.name) && r.properties.enable_floating_ip == Some(false)
                })
                .filter_map(|r| r.properties.backend_port.map(|p| p.to_string()))
                .collect();
            let current = &nsg.properties.security_rules;
            // The consolidated rules list every Service's address: rebuilt (copied) only when
            // reading them shows something to change.
            let rules =
                if security_rules_unchanged(current, &remove, &exclusive_ports, add.as_ref()) {
                    None
                } else {
                    Some(reconcile_security_rules(
                        current,
                        &remove,
                        &exclusive_ports,
                        add.as_ref(),
                    ))
                };
            if let Some(rules) = rules.filter(|rules| rules != current) {
                let mut updated = SecurityGroup::clone(nsg);
                updated.properties.security_rules = rules;
                actions.push(Action::PutSecurityGroup {
                    rg: rg.clone(),
                    nsg: updated,
                });
            }
        }
    }
    // Deleting: clear the security group first, while the load-balancer rules that tell which
    // node ports were the Service's can still be read, so a failure later leaks nothing there.
    if desired.is_none()
        && let Some(index) = actions
            .iter()
            .position(|a| matches!(a, Action::PutSecurityGroup { .. }))
    {
        let nsg = actions.remove(index);
        actions.insert(0, nsg);
    }
    // 5. Public IPs the Service owns but no longer uses, once nothing references them.
    // (Searched per candidate, which are few, rather than indexing every frontend.)
    let referenced = |id: &str| {
        lb_after
            .values()
            .flatten()
            .flat_map(|lb| lb.properties.frontend_ip_configurations.iter())
            .filter_map(|f| f.properties.public_ip_address.as_ref())
            .any(|p| p.same(id))
    };
    let writes_pending = actions.iter().any(|a| {
        matches!(
            a,
            Action::PutLoadBalancer(_) | Action::DeleteLoadBalancer { .. }
        )
    });
    for pip in observed
        .public_ips
        .iter()
        .filter(|p| owned_by(p, &settings.cluster, &service_name))
    {
        let id = pip.id.clone().unwrap_or_default();
        if chosen
            .as_ref()
            .is_some_and(|c| c.id.eq_ignore_ascii_case(&id))
        {
            continue;
        }
        // Still attached (in ARM, or by a frontend we keep): wait for the LB write to land.
        if referenced(&id) || (pip.properties.ip_configuration.is_some() && writes_pending) {
            continue;
        }
        if pip.properties.ip_configuration.is_some() {
            // Attached to something that is not ours: leave it; deleting would fail anyway.
            continue;
        }
        let rg = resource_group_of(&id)
            .unwrap_or(&settings.resource_group)
            .to_string();
        let owners: Vec<String> = pip
            .tags
            .get(SERVICE_TAG)
            .or_else(|| pip.tags.get(LEGACY_SERVICE_TAG))
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty() && *s != service_name)
                    .collect()
            })
            .unwrap_or_default();
        if owners.is_empty() {
            actions.push(Action::DeletePublicIp {
                rg,
                name: pip.name.clone(),
                etag: pip.etag.clone(),
            });
        } else {
            let mut shared = PublicIp::clone(pip);
            shared.tags.insert(SERVICE_TAG.into(), owners.join(","));
            actions.push(Action::PutPublicIp { rg, pip: shared });
        }
    }
    Ok(actions)
}

/// The name of the consolidated allow rule for one (protocol, sources, ports) combination,
/// exactly as upstream cloud-provider-azure names it: MD5 over `protocol_sources_ports` with
/// sources and ports each sorted *as strings* (so ports 80 and 443 hash as `443,80`), which is
/// what lets kube-lb adopt the rules upstream left behind instead of churning them.
pub fn allow_rule_name(entry: &AllowEntry) -> String {
    let mut sources = entry.sources.clone();
    sources.sort();
    let mut ports = entry.ports.clone();
    ports.sort();
    let key = format!(
        "{}_{}_{}",
        entry.protocol,
        sources.join(","),
        ports.join(",")
    );
    let digest = Md5::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{MANAGED_RULE_PREFIX}allow_IPv4_{hex}")
}

/// The deny-all rule's name.
pub const DENY_ALL_RULE: &str = "k8s-azure-lb_deny-all_IPv4";

/// True for the security rules kube-lb (and upstream) manage: named `k8s-azure-lb_…` with a
/// priority in the managed range.
pub(crate) fn is_managed(rule: &SecurityRule) -> bool {
    rule.name.starts_with(MANAGED_RULE_PREFIX)
        && (MANAGED_PRIORITY_MIN..=MANAGED_PRIORITY_MAX).contains(&rule.properties.priority)
}

fn set_destinations(rule: &mut SecurityRuleProperties, mut destinations: Vec<String>) {
    destinations.sort();
    destinations.dedup();
    if destinations.len() == 1 {
        rule.destination_address_prefix = destinations.pop();
        rule.destination_address_prefixes.clear();
    } else {
        rule.destination_address_prefix = None;
        rule.destination_address_prefixes = destinations;
    }
}

/// Every field of a rule kube-lb writes, except its destinations (shared by the Services the
/// consolidated rule serves) and its priority (any free managed one will do).
#[derive(Debug, Clone, PartialEq, Eq)]
struct RuleShape {
    protocol: String,
    access: &'static str,
    sources: BTreeSet<String>,
    ports: BTreeSet<String>,
    /// Allow rules take priorities from the bottom of the managed range, deny rules from the
    /// top, as upstream does.
    upward: bool,
}

impl RuleShape {
    fn allow(entry: &AllowEntry) -> RuleShape {
        RuleShape {
            protocol: entry.protocol.clone(),
            access: "Allow",
            sources: entry.sources.iter().cloned().collect(),
            ports: entry.ports.iter().cloned().collect(),
            upward: true,
        }
    }

    fn deny_all() -> RuleShape {
        RuleShape {
            protocol: "*".into(),
            access: "Deny",
            sources: BTreeSet::from(["*".to_string()]),
            ports: BTreeSet::from(["*".to_string()]),
            upward: false,
        }
    }

    /// Compares as sets, whichever of the single/plural fields holds a value, so rules laid
    /// out by upstream or by an older kube-lb are not rewritten for layout alone.
    fn matches(&self, rule: &SecurityRuleProperties) -> bool {
        let sources: BTreeSet<String> = rule
            .source_address_prefix
            .iter()
            .chain(&rule.source_address_prefixes)
            .cloned()
            .collect();
        let ports: BTreeSet<String> = rule
            .destination_port_range
            .iter()
            .chain(&rule.destination_port_ranges)
            .cloned()
            .collect();
        rule.protocol.eq_ignore_ascii_case(&self.protocol)
            && rule.access.eq_ignore_ascii_case(self.access)
            && rule.direction.eq_ignore_ascii_case("Inbound")
            && rule.source_port_range.as_deref() == Some("*")
            && rule
                .extra
                .get("sourcePortRanges")
                .is_none_or(|v| v.as_array().is_some_and(Vec::is_empty))
            && sources == self.sources
            && ports == self.ports
    }

    /// Writes every shaped field the way upstream lays them out (one source as
    /// `sourceAddressPrefix`, ports as `destinationPortRanges` sorted as strings, `*` as the
    /// single `destinationPortRange`); destinations, priority and unknown fields are kept.
    fn apply(&self, rule: &mut SecurityRuleProperties) {
        rule.protocol = self.protocol.clone();
        rule.access = self.access.to_string();
        rule.direction = "Inbound".into();
        rule.source_port_range = Some("*".into());
        rule.extra.remove("sourcePortRanges");
        let sources: Vec<String> = self.sources.iter().cloned().collect();
        if let [one] = sources.as_slice() {
            rule.source_address_prefix = Some(one.clone());
            rule.source_address_prefixes.clear();
        } else {
            rule.source_address_prefix = None;
            rule.source_address_prefixes = sources;
        }
        if self.ports.contains("*") {
            rule.destination_port_range = Some("*".into());
            rule.destination_port_ranges.clear();
        } else {
            rule.destination_port_range = None;
            // BTreeSet order is string order, upstream's.
            rule.destination_port_ranges = self.ports.iter().cloned().collect();
        }
    }
}

/// The lowest (or highest) managed priority no other inbound rule holds.
fn free_priority(rules: &[SecurityRule], skip: Option<usize>, upward: bool) -> Option<u32> {
    let taken: BTreeSet<u32> = rules
        .iter()
        .enumerate()
        .filter(|(i, r)| Some(*i) != skip && r.properties.direction.eq_ignore_ascii_case("Inbound"))
        .map(|(_, r)| r.properties.priority)
        .collect();
    let mut free = MANAGED_PRIORITY_MIN..MANAGED_PRIORITY_MAX;
    if upward {
        free.find(|p| !taken.contains(p))
    } else {
        free.rev().find(|p| !taken.contains(p))
    }
}

/// Repairs every field of the rule at `index` that differs from `shape` (someone edited it by
/// hand, e.g. opened it to `0.0.0.0/0`), and moves it to a free managed priority when its own
/// is outside the managed range or collides with another inbound rule.
fn repair_rule(rules: &mut [SecurityRule], index: usize, shape: &RuleShape) {
    if !shape.matches(&rules[index].properties) {
        shape.apply(&mut rules[index].properties);
    }
    let priority = rules[index].properties.priority;
    let in_range = (MANAGED_PRIORITY_MIN..=MANAGED_PRIORITY_MAX).contains(&priority);
    let collides = rules.iter().enumerate().any(|(i, r)| {
        i != index
            && r.properties.priority == priority
            && r.properties.direction.eq_ignore_ascii_case("Inbound")
    });
    if (!in_range || collides)
        && let Some(free) = free_priority(rules, Some(index), shape.upward)
    {
        rules[index].properties.priority = free;
    }
}

fn new_rule(name: String, priority: u32, shape: &RuleShape) -> SecurityRule {
    let mut properties = SecurityRuleProperties {
        priority,
        ..Default::default()
    };
    shape.apply(&mut properties);
    SecurityRule {
        name,
        properties,
        ..Default::default()
    }
}

/// True only when [`reconcile_security_rules`] would return `rules` unchanged, found by reading
/// them: the consolidated rules list every Service's address, and rebuilding them costs
/// allocations per address. `false` means "maybe changed": the caller then reconciles in full,
/// so this only has to be right when it says `true` (the tests check that against the full
/// reconcile on every case).
fn security_rules_unchanged(
    rules: &[SecurityRule],
    remove: &BTreeSet<String>,
    exclusive_ports: &BTreeSet<String>,
    add: Option<&(Vec<AllowEntry>, Vec<String>, bool)>,
) -> bool {
    let mut shapes: BTreeMap<String, RuleShape> = BTreeMap::new();
    let mut add_destinations: &[String] = &[];
    if let Some((entries, destinations, deny_all)) = add {
        for entry in entries {
            shapes.insert(allow_rule_name(entry), RuleShape::allow(entry));
        }
        if *deny_all {
            shapes.insert(DENY_ALL_RULE.to_string(), RuleShape::deny_all());
        }
        add_destinations = destinations;
    }
    let considered = |r: &SecurityRule| is_managed(r) || shapes.contains_key(&r.name);
    // Two considered rules of one name share one wanted set in the full reconcile: leave that
    // (impossible in ARM) case to it.
    let mut names = BTreeSet::new();
    if !rules
        .iter()
        .filter(|r| considered(r))
        .all(|r| names.insert(r.name.as_str()))
    {
        return false;
    }
    // Every rule the Service needs exists (else one would be created).
    if !shapes.keys().all(|name| names.contains(name.as_str())) {
        return false;
    }
    for rule in rules.iter().filter(|r| considered(r)) {
        let props = &rule.properties;
        let have = || {
            props
                .destination_address_prefix
                .iter()
                .chain(&props.destination_address_prefixes)
        };
        let exclusive = {
            let mut ports = props
                .destination_port_range
                .iter()
                .chain(&props.destination_port_ranges)
                .peekable();
            ports.peek().is_some() && ports.all(|p| exclusive_ports.contains(p))
        };
        let needed = shapes.get(&rule.name);
        // The full reconcile wants the destinations it keeps plus, on a rule the Service needs,
        // the Service's own; the rule is unchanged when that is the set it has, and not empty
        // (an empty one is dropped).
        let kept = |d: &String| {
            !exclusive
                && !remove.contains(d)
                && (needed.is_none() || d.parse::<std::net::IpAddr>().is_ok())
        };
        let added = |d: &String| needed.is_some() && add_destinations.contains(d);
        if have().next().is_none() || !have().all(|d| kept(d) || added(d)) {
            return false;
        }
        let Some(shape) = needed else {
            continue;
        };
        if !add_destinations.iter().all(|a| have().any(|d| d == a)) {
            return false;
        }
        // And `repair_rule` leaves it alone.
        let priority = props.priority;
        let collides = rules.iter().any(|r| {
            !std::ptr::eq(r, rule)
                && r.properties.priority == priority
                && r.properties.direction.eq_ignore_ascii_case("Inbound")
        });
        if !shape.matches(props)
            || !(MANAGED_PRIORITY_MIN..=MANAGED_PRIORITY_MAX).contains(&priority)
            || collides
        {
            return false;
        }
    }
    true
}

/// Removes `remove` from every managed rule's destinations (dropping rules left empty), then
/// adds `add`'s destinations to the consolidated rules they belong to, creating rules at the
/// lowest free priority from 500 (allow) or the highest from 4095 (deny). The rules the
/// Service needs are also reconciled field by field (sources, ports, protocol, access,
/// direction, priority), so a hand-edited rule is repaired. Unmanaged rules are never touched.
pub fn reconcile_security_rules(
    rules: &[SecurityRule],
    remove: &BTreeSet<String>,
    exclusive_ports: &BTreeSet<String>,
    add: Option<&(Vec<AllowEntry>, Vec<String>, bool)>,
) -> Vec<SecurityRule> {
    let mut out: Vec<SecurityRule> = rules.to_vec();
    // The rules this Service needs, by name, with the shape each must have.
    let mut shapes: BTreeMap<String, RuleShape> = BTreeMap::new();
    if let Some((entries, _, deny_all)) = add {
        for entry in entries {
            shapes.insert(allow_rule_name(entry), RuleShape::allow(entry));
        }
        if *deny_all {
            shapes.insert(DENY_ALL_RULE.to_string(), RuleShape::deny_all());
        }
    }
    let exclusive = |r: &SecurityRule| {
        let ports: BTreeSet<String> = r
            .properties
            .destination_port_range
            .iter()
            .chain(r.properties.destination_port_ranges.iter())
            .cloned()
            .collect();
        // Node ports belong to one Service: a rule only for them is that Service's alone.
        !ports.is_empty() && ports.is_subset(exclusive_ports)
    };
    // Wanted destinations of every managed rule, by name; rules are rewritten only when their
    // set changes, so an unchanged rule keeps its server-filled fields. A rule this Service
    // needs is found by name even if its priority was moved out of the managed range.
    let mut wanted: BTreeMap<String, BTreeSet<String>> = out
        .iter()
        .filter(|r| is_managed(r) || shapes.contains_key(&r.name))
        .map(|r| {
            let needed = shapes.contains_key(&r.name);
            let kept = if exclusive(r) {
                BTreeSet::new()
            } else {
                r.properties
                    .destinations()
                    .into_iter()
                    .filter(|d| !remove.contains(d))
                    // Every destination kube-lb or upstream writes is one address (a frontend,
                    // an additional public IP, a node); a range or `*` on a rule this Service
                    // needs was widened by hand and is dropped. Single addresses stay: they
                    // may be another Service's on the consolidated rule.
                    .filter(|d| !needed || d.parse::<std::net::IpAddr>().is_ok())
                    .collect()
            };
            (r.name.clone(), kept)
        })
        .collect();
    if let Some((_, destinations, _)) = add {
        for (name, shape) in &shapes {
            if let Some(set) = wanted.get_mut(name) {
                set.extend(destinations.iter().cloned());
                continue;
            }
            if let Some(priority) = free_priority(&out, None, shape.upward) {
                out.push(new_rule(name.clone(), priority, shape));
                wanted.insert(name.clone(), destinations.iter().cloned().collect());
            }
        }
    }
    out.retain_mut(|rule| {
        let Some(want) = wanted.get(&rule.name) else {
            return true;
        };
        if want.is_empty() {
            return false;
        }
        let have: BTreeSet<String> = rule.properties.destinations().into_iter().collect();
        if &have != want {
            set_destinations(&mut rule.properties, want.iter().cloned().collect());
        }
        true
    });
    for (name, shape) in &shapes {
        if let Some(index) = out.iter().position(|r| &r.name == name) {
            repair_rule(&mut out, index, shape);
        }
    }
    out
}

/// The Service's ingress address from `observed`, if its frontend exists.
pub fn status_address(service: &ServiceKey, observed: &Observed) -> Option<String> {
    let prefix = kube_lb_provider_core::naming::load_balancer_name(&service.uid);
    observed
        .load_balancers
        .iter()
        .flat_map(|lb| lb.properties.frontend_ip_configurations.iter())
        .find(|f| owned_child(&prefix, &f.name))
        .and_then(|f| frontend_address(observed, f))
}

#[cfg(test)]
mod tests {
    use kube_lb_provider_core::annotations::LoadBalancerSpec;
    use serde_json::json;

    use super::*;
    use crate::desired::desired;
    use crate::test_support::{nodes, settings};

    fn spec(
        uid: &str,
        annotations: serde_json::Value,
        spec: serde_json::Value,
    ) -> LoadBalancerSpec {
        crate::test_support::spec("ns", "web", uid, annotations, spec)
    }

    /// What ARM would store after `actions`: IDs, etags, allocated addresses.
    fn simulate(settings: &Settings, observed: &mut Observed, actions: &[Action]) {
        let etag = |n: usize| Some(format!("W/\"{n}\""));
        for (n, action) in actions.iter().enumerate() {
            match action {
                Action::PutPublicIp { rg, pip } => {
                    let mut stored = pip.clone();
                    stored.id = Some(settings.ids.public_ip(rg, &pip.name));
                    stored.etag = etag(n);
                    stored
                        .properties
                        .ip_address
                        .get_or_insert_with(|| format!("20.0.0.{}", observed.public_ips.len() + 1));
                    observed.public_ips.retain(|p| p.name != pip.name);
                    observed.public_ips.push(Arc::new(stored));
                }
                Action::PutLoadBalancer(lb) => {
                    let mut stored = lb.clone();
                    let id = settings
                        .ids
                        .load_balancer(&settings.lb_resource_group, &lb.name);
                    stored.etag = etag(n);
                    for (i, fe) in stored
                        .properties
                        .frontend_ip_configurations
                        .iter_mut()
                        .enumerate()
                    {
                        fe.id = Some(format!("{id}/frontendIPConfigurations/{}", fe.name));
                        if fe.properties.subnet.is_some()
                            && fe.properties.private_ip_address.is_none()
                        {
                            fe.properties.private_ip_address = Some(format!("10.0.9.{}", i + 4));
                        }
                    }
                    stored.id = Some(id);
                    observed.load_balancers.retain(|l| l.name != lb.name);
                    observed.load_balancers.push(Arc::new(stored));
                }
                Action::DeleteLoadBalancer { name, .. } => {
                    observed.load_balancers.retain(|l| &l.name != name)
                }
                Action::PutSecurityGroup { nsg, .. } => {
                    let mut stored = nsg.clone();
                    stored.etag = etag(n);
                    observed.security_group = Some(Arc::new(stored));
                }
                Action::DeletePublicIp { name, .. } => {
                    observed.public_ips.retain(|p| &p.name != name)
                }
            }
        }
    }

    fn empty_cluster() -> Observed {
        Observed {
            security_group: Some(Arc::new(SecurityGroup {
                name: "nsg".into(),
                location: "eastus".into(),
                etag: Some("W/\"0\"".into()),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    /// Plans and simulates until nothing is left to do; returns the rounds it took.
    fn converge(
        settings: &Settings,
        service: &ServiceKey,
        desired: Option<&Desired>,
        observed: &mut Observed,
    ) -> usize {
        for round in 1..=5 {
            let actions = plan(settings, service, desired, observed).unwrap();
            if actions.is_empty() {
                return round;
            }
            simulate(settings, observed, &actions);
        }
        panic!("no convergence: {observed:#?}");
    }

    #[test]
    fn every_shape_converges_and_then_plans_nothing() {
        let uid = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
        let cases = [
            ("external", spec(uid, json!({}), json!({}))),
            (
                "external local",
                spec(
                    uid,
                    json!({}),
                    json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32000}),
                ),
            ),
            (
                "internal dynamic",
                spec(
                    uid,
                    json!({"azure-load-balancer-internal": "true"}),
                    json!({}),
                ),
            ),
            (
                "internal static on subnet",
                spec(
                    uid,
                    json!({"azure-load-balancer-internal": "true", "azure-load-balancer-internal-subnet": "apps"}),
                    json!({"loadBalancerIP": "10.1.0.9"}),
                ),
            ),
            (
                "ranges, deny-all, idle, no floating ip",
                spec(
                    uid,
                    json!({"azure-deny-all-except-load-balancer-source-ranges": "true", "azure-load-balancer-tcp-idle-timeout": "30",
                        "azure-disable-load-balancer-floating-ip": "true"}),
                    json!({"loadBalancerSourceRanges": ["203.0.113.0/24"]}),
                ),
            ),
            (
                "ranges and deny-all",
                spec(
                    uid,
                    json!({"azure-deny-all-except-load-balancer-source-ranges": "true"}),
                    json!({"loadBalancerSourceRanges": ["203.0.113.0/24", "198.51.100.0/24"]}),
                ),
            ),
            (
                "dns label and tags",
                spec(
                    uid,
                    json!({"azure-dns-label-name": "web", "azure-pip-tags": "team=a"}),
                    json!({}),
                ),
            ),
        ];
        let settings = settings();
        for (name, spec) in cases {
            let desired = desired(&settings, &spec, &nodes(2)).unwrap();
            let mut observed = empty_cluster();
            let rounds = converge(&settings, &spec.service, Some(&desired), &mut observed);
            assert!(rounds <= 3, "{name}: {rounds} rounds");
            assert!(
                plan(&settings, &spec.service, Some(&desired), &observed)
                    .unwrap()
                    .is_empty(),
                "{name}"
            );
            assert!(
                status_address(&spec.service, &observed).is_some(),
                "{name}: no address"
            );
            // Deleting converges to a cluster with nothing of the Service left.
            converge(&settings, &spec.service, None, &mut observed);
            assert!(observed.load_balancers.is_empty(), "{name}");
            assert!(observed.public_ips.is_empty(), "{name}");
            assert!(
                observed
                    .security_group
                    .as_ref()
                    .unwrap()
                    .properties
                    .security_rules
                    .is_empty(),
                "{name}"
            );
        }
    }

    #[test]
    fn an_unchanged_service_plans_nothing_even_with_server_fields() {
        let settings = settings();
        let spec = spec("u-1", json!({}), json!({}));
        let desired = desired(&settings, &spec, &nodes(3)).unwrap();
        let mut observed = empty_cluster();
        converge(&settings, &spec.service, Some(&desired), &mut observed);
        // ARM adds back-references, defaults and provisioning states to what it stores.
        for lb in observed.load_balancers.iter_mut().map(Arc::make_mut) {
            for rule in &mut lb.properties.load_balancing_rules {
                rule.properties
                    .extra
                    .insert("provisioningState".into(), json!("Succeeded"));
                rule.properties
                    .extra
                    .insert("disableOutboundSnat".into(), json!(false));
            }
            for probe in &mut lb.properties.probes {
                probe
                    .properties
                    .extra
                    .insert("loadBalancingRules".into(), json!([{"id": "x"}]));
                probe
                    .properties
                    .extra
                    .insert("numberOfProbes".into(), json!(2));
            }
        }
        assert_eq!(
            plan(&settings, &spec.service, Some(&desired), &observed).unwrap(),
            vec![]
        );
        // A node leaving is one LB write and nothing else.
        let fewer = super::super::desired::desired(&settings, &spec, &nodes(2)).unwrap();
        let actions = plan(&settings, &spec.service, Some(&fewer), &observed).unwrap();
        assert!(
            matches!(actions.as_slice(), [Action::PutLoadBalancer(_)]),
            "{actions:?}"
        );
    }

    #[test]
    fn services_share_consolidated_security_rules() {
        let entry = AllowEntry {
            protocol: "Tcp".into(),
            sources: vec!["Internet".into()],
            ports: vec!["80".into()],
        };
        let add = |ip: &str| (vec![entry.clone()], vec![ip.to_string()], false);
        let user_rule = new_rule(
            "ssh".into(),
            500,
            &RuleShape {
                protocol: "Tcp".into(),
                access: "Allow",
                sources: BTreeSet::from(["*".to_string()]),
                ports: BTreeSet::from(["22".to_string()]),
                upward: true,
            },
        );
        let one = reconcile_security_rules(
            std::slice::from_ref(&user_rule),
            &BTreeSet::new(),
            &BTreeSet::new(),
            Some(&add("20.0.0.1")),
        );
        assert_eq!(one.len(), 2);
        assert_eq!(
            one[1].properties.priority, 501,
            "500 is taken by the user's rule"
        );
        let two = reconcile_security_rules(
            &one,
            &BTreeSet::new(),
            &BTreeSet::new(),
            Some(&add("20.0.0.2")),
        );
        assert_eq!(two.len(), 2, "same protocol, sources and ports: one rule");
        assert_eq!(
            two[1].properties.destinations(),
            vec!["20.0.0.1", "20.0.0.2"]
        );
        let again = reconcile_security_rules(
            &two,
            &BTreeSet::from(["20.0.0.2".to_string()]),
            &BTreeSet::new(),
            Some(&add("20.0.0.2")),
        );
        assert_eq!(again, two, "re-adding what is there changes nothing");
        let removed = reconcile_security_rules(
            &two,
            &BTreeSet::from(["20.0.0.1".to_string()]),
            &BTreeSet::new(),
            None,
        );
        assert_eq!(removed[1].properties.destinations(), vec!["20.0.0.2"]);
        let gone = reconcile_security_rules(
            &removed,
            &BTreeSet::from(["20.0.0.2".to_string()]),
            &BTreeSet::new(),
            None,
        );
        assert_eq!(gone, vec![user_rule], "the user's rule is never touched");
        let deny = reconcile_security_rules(
            &[],
            &BTreeSet::new(),
            &BTreeSet::new(),
            Some(&(vec![entry.clone()], vec!["20.0.0.3".into()], true)),
        );
        let deny_rule = deny.iter().find(|r| r.name == DENY_ALL_RULE).unwrap();
        assert_eq!(
            (
                deny_rule.properties.priority,
                deny_rule.properties.access.as_str()
            ),
            (4095, "Deny")
        );
    }

    #[test]
    fn ownership() {
        let cases = [
            ("a1b2", "a1b2", true),
            ("a1b2", "a1b2-TCP-80", true),
            ("a1b2", "a1b2c-TCP-80", false),
            ("a1b2", "other", false),
        ];
        for (prefix, name, want) in cases {
            assert_eq!(owned_child(prefix, name), want, "{prefix} {name}");
        }
        let service = ServiceKey {
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u".into(),
        };
        let pip = |tags: &[(&str, &str)]| PublicIp {
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        assert!(owns_public_ip(
            &pip(&[("k8s-azure-service", "ns/a,ns/web")]),
            "c",
            &service
        ));
        assert!(owns_public_ip(
            &pip(&[("service", "ns/web"), ("kubernetes-cluster-name", "c")]),
            "c",
            &service
        ));
        assert!(!owns_public_ip(
            &pip(&[
                ("k8s-azure-service", "ns/web"),
                ("k8s-azure-cluster-name", "other")
            ]),
            "c",
            &service
        ));
        assert!(
            !owns_public_ip(&pip(&[]), "c", &service),
            "untagged public IPs are the user's"
        );
    }

    #[test]
    fn allow_rule_names_match_upstream() {
        // Names computed by upstream cloud-provider-azure (GenerateAllowSecurityRuleName):
        // MD5 of "Tcp_Internet_443,80": ports sorted as strings, not numbers.
        let cases = [
            (
                "Tcp",
                vec!["Internet"],
                vec!["80", "443"],
                "k8s-azure-lb_allow_IPv4_556f7044ec033071ec0dfcf7cd85bc93",
            ),
            (
                "Tcp",
                vec!["Internet"],
                vec!["443", "80"],
                "k8s-azure-lb_allow_IPv4_556f7044ec033071ec0dfcf7cd85bc93",
            ),
        ];
        for (protocol, sources, ports, want) in cases {
            let entry = AllowEntry {
                protocol: protocol.into(),
                sources: sources.into_iter().map(String::from).collect(),
                ports: ports.into_iter().map(String::from).collect(),
            };
            assert_eq!(allow_rule_name(&entry), want, "{entry:?}");
        }
    }

    #[test]
    fn a_hand_edited_rule_is_repaired_field_by_field() {
        let entry = AllowEntry {
            protocol: "Tcp".into(),
            sources: vec!["10.1.0.0/16".into()],
            ports: vec!["80".into(), "443".into()],
        };
        let add = (vec![entry.clone()], vec!["20.0.0.1".to_string()], false);
        let clean = reconcile_security_rules(&[], &BTreeSet::new(), &BTreeSet::new(), Some(&add));
        assert_eq!(clean.len(), 1);
        assert_eq!(
            clean[0].properties.destination_port_ranges,
            vec!["443", "80"],
            "upstream's layout: destinationPortRanges sorted as strings"
        );
        let again =
            reconcile_security_rules(&clean, &BTreeSet::new(), &BTreeSet::new(), Some(&add));
        assert_eq!(again, clean, "a clean rule is left alone");
        type Tamper = fn(&mut SecurityRuleProperties);
        let tampers: [(&str, Tamper); 11] = [
            ("source opened to the world", |p| {
                p.source_address_prefix = Some("0.0.0.0/0".into())
            }),
            ("extra source", |p| {
                p.source_address_prefix = None;
                p.source_address_prefixes = vec!["10.1.0.0/16".into(), "0.0.0.0/0".into()];
            }),
            ("protocol", |p| p.protocol = "*".into()),
            ("access", |p| p.access = "Deny".into()),
            ("direction", |p| p.direction = "Outbound".into()),
            ("ports", |p| {
                p.destination_port_ranges = vec!["1-65535".into()]
            }),
            ("source ports", |p| {
                p.source_port_range = Some("1000".into())
            }),
            ("priority out of range", |p| p.priority = 200),
            ("destination removed", |p| {
                p.destination_address_prefix = None
            }),
            ("destination widened", |p| {
                p.destination_address_prefix = None;
                p.destination_address_prefixes = vec!["20.0.0.1".into(), "0.0.0.0/0".into()];
            }),
            ("destination any", |p| {
                p.destination_address_prefix = Some("*".into())
            }),
        ];
        for (what, tamper) in tampers {
            let mut tampered = clean.clone();
            tamper(&mut tampered[0].properties);
            let repaired =
                reconcile_security_rules(&tampered, &BTreeSet::new(), &BTreeSet::new(), Some(&add));
            assert_eq!(repaired, clean, "{what}");
        }
        // Upstream's layout and an older kube-lb's (single port field) are both accepted.
        let mut single = clean.clone();
        single[0].properties.destination_port_ranges = vec!["80".into(), "443".into()];
        let kept =
            reconcile_security_rules(&single, &BTreeSet::new(), &BTreeSet::new(), Some(&add));
        assert_eq!(kept, single, "port order alone is not a change");
    }

    /// `security_rules_unchanged` may only say "unchanged" when the full reconcile agrees, and
    /// must say it for a no-op resync (the case it exists for).
    #[test]
    fn the_read_only_security_check_agrees_with_the_full_reconcile() {
        let entry = |ports: &[&str]| AllowEntry {
            protocol: "Tcp".into(),
            sources: vec!["Internet".into()],
            ports: ports.iter().map(|p| p.to_string()).collect(),
        };
        let add = |ip: &str, deny_all: bool| (vec![entry(&["80"])], vec![ip.to_string()], deny_all);
        let set =
            |items: &[&str]| -> BTreeSet<String> { items.iter().map(|s| s.to_string()).collect() };
        let none = BTreeSet::new();
        let two = reconcile_security_rules(
            &[],
            &none,
            &none,
            Some(&(
                vec![entry(&["80"])],
                vec!["20.0.0.1".into(), "20.0.0.2".into()],
                false,
            )),
        );
        let with_deny = reconcile_security_rules(&two, &none, &none, Some(&add("20.0.0.2", true)));
        let mut widened = two.clone();
        widened[0]
            .properties
            .destination_address_prefixes
            .push("0.0.0.0/0".into());
        let mut moved = two.clone();
        moved[0].properties.priority = 200;
        let mut reshaped = two.clone();
        reshaped[0].properties.source_port_range = None;
        let mut emptied = two.clone();
        emptied[0].properties.destination_address_prefixes.clear();
        let node_ports = reconcile_security_rules(
            &[],
            &none,
            &none,
            Some(&(vec![entry(&["30080"])], vec!["10.0.0.1".into()], false)),
        );
        // (case, rules, remove, exclusive ports, add, read-only check says unchanged)
        type Case<'a> = (
            &'a str,
            &'a [SecurityRule],
            BTreeSet<String>,
            BTreeSet<String>,
            Option<(Vec<AllowEntry>, Vec<String>, bool)>,
            bool,
        );
        let cases: [Case<'_>; 14] = [
            (
                "no-op resync",
                &two,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", false)),
                true,
            ),
            (
                "no-op, deny-all",
                &with_deny,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", true)),
                true,
            ),
            (
                "deny-all wanted, missing",
                &two,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", true)),
                false,
            ),
            (
                "deny-all no longer wanted",
                &with_deny,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", false)),
                false,
            ),
            (
                "new address",
                &two,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.3", false)),
                false,
            ),
            (
                "address added",
                &two,
                none.clone(),
                none.clone(),
                Some(add("20.0.0.3", false)),
                false,
            ),
            (
                "delete",
                &two,
                set(&["20.0.0.2"]),
                none.clone(),
                None,
                false,
            ),
            (
                "delete of nothing there",
                &two,
                set(&["20.0.0.9"]),
                none.clone(),
                None,
                true,
            ),
            (
                "no rules, nothing wanted",
                &[],
                none.clone(),
                none.clone(),
                None,
                true,
            ),
            (
                "new rule",
                &[],
                none.clone(),
                none.clone(),
                Some(add("20.0.0.2", false)),
                false,
            ),
            (
                "widened by hand",
                &widened,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", false)),
                false,
            ),
            (
                "moved out of range",
                &moved,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", false)),
                false,
            ),
            (
                "reshaped by hand",
                &reshaped,
                set(&["20.0.0.2"]),
                none.clone(),
                Some(add("20.0.0.2", false)),
                false,
            ),
            (
                "node ports only",
                &node_ports,
                none.clone(),
                set(&["30080"]),
                Some((vec![entry(&["30080"])], vec!["10.0.0.1".into()], false)),
                true,
            ),
        ];
        for (name, rules, remove, exclusive, add, want) in cases {
            let fast = security_rules_unchanged(rules, &remove, &exclusive, add.as_ref());
            let full = reconcile_security_rules(rules, &remove, &exclusive, add.as_ref());
            assert_eq!(fast, want, "{name}");
            if fast {
                assert_eq!(
                    full, rules,
                    "{name}: said unchanged, but the reconcile changes it"
                );
            }
        }
        // A managed rule with no destinations left is dropped by the reconcile.
        let stray = set(&["20.0.0.9"]);
        assert!(!security_rules_unchanged(&emptied, &stray, &none, None));
        assert_ne!(
            reconcile_security_rules(&emptied, &stray, &none, None),
            emptied
        );
    }

    #[test]
    fn services_sharing_a_load_balancer_each_plan_nothing_once_in_sync() {
        let settings = settings();
        let specs: Vec<_> = (0..6)
            .map(|i| {
                let annotations = if i % 2 == 1 {
                    json!({"azure-load-balancer-internal": "true"})
                } else {
                    json!({})
                };
                crate::test_support::spec(
                    "ns",
                    &format!("web-{i}"),
                    &format!("{i:08x}-5e5e-4c4c-8a8a-000000000000"),
                    annotations,
                    json!({}),
                )
            })
            .collect();
        let mut observed = empty_cluster();
        for spec in &specs {
            let desired = desired(&settings, spec, &nodes(2)).unwrap();
            converge(&settings, &spec.service, Some(&desired), &mut observed);
        }
        assert_eq!(
            observed.load_balancers.len(),
            2,
            "one external, one internal"
        );
        for spec in &specs {
            let desired = desired(&settings, spec, &nodes(2)).unwrap();
            assert_eq!(
                plan(&settings, &spec.service, Some(&desired), &observed).unwrap(),
                vec![],
                "{}",
                spec.service
            );
        }
        // Deleting one touches only its own load balancer and keeps the others' children.
        let gone = &specs[1].service;
        let actions = plan(&settings, gone, None, &observed).unwrap();
        let puts: Vec<&LoadBalancer> = actions
            .iter()
            .filter_map(|a| match a {
                Action::PutLoadBalancer(lb) => Some(lb),
                _ => None,
            })
            .collect();
        assert_eq!(puts.len(), 1, "{actions:?}");
        assert_eq!(puts[0].properties.frontend_ip_configurations.len(), 2);
    }
}

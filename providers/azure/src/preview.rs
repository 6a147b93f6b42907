//! Azure's plan as steps for the core driver ([`kube_lb_provider_core::converge`]): one
//! [`AzureStep`] per ARM write, each carrying the fields it changes old → new. Pure.
//!
//! Phases, not placeholders: the provider converges in rounds because ARM decides some values
//! only when it stores a write (a new public IP's address, which the security rule needs; a
//! frontend's back-reference on the public IP, which a delete waits for). [`phases`] plans the
//! first round from the observation exactly, then applies each write to an in-memory copy the
//! way ARM would store it (addresses ARM allocates shown as [`ALLOCATED_BY_AZURE`], public IP
//! back-references kept in step with the frontends) and plans the next round from that copy,
//! until nothing is left. `kube-lb plan` shows round 1 as it will run and the later rounds as
//! depending on ARM's answer; `ensure` runs round 1 and plans again from what ARM then holds.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube_lb_provider_core::converge::{self, Plan};
use kube_lb_provider_core::{ChangeAction, PlannedChange, ProviderError, ServiceKey};
use serde_json::Value;

use crate::arm::{
    BackendAddressPool, Extra, FrontendIpConfiguration, LoadBalancer, LoadBalancingRule, Probe,
    PublicIp, SecurityGroup, SecurityRule, SecurityRuleProperties, SubResource, name_of,
    resource_group_of,
};
use crate::desired::{Desired, Settings};
use crate::inventory::{KIND_LOAD_BALANCER, KIND_PUBLIC_IP};
use crate::plan::{Action, Observed, plan};

/// Kind of the cluster security group in a [`PlannedChange`].
pub const KIND_SECURITY_GROUP: &str = "NetworkSecurityGroup";
/// Stands in for an address ARM allocates when the object is created (a new public IP, a
/// dynamic private frontend IP).
pub const ALLOCATED_BY_AZURE: &str = "(allocated by Azure)";
/// Plan/apply rounds simulated, as many as the driver runs.
const MAX_ROUNDS: usize = converge::MAX_PHASES;

/// What a later round waits for.
const LATER_ROUND: &str =
    "ARM's answer to the writes before (allocated addresses, attached public IPs)";

/// One ARM write of the plan, with how `kube-lb plan` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AzureStep {
    /// The write.
    pub action: Action,
    /// The write as shown: the object's fields before → after this write.
    pub change: PlannedChange,
}

impl converge::Step for AzureStep {
    fn describe(&self) -> PlannedChange {
        self.change.clone()
    }
}

/// Keys ARM computes (states, back-references): never a change kube-lb makes.
const SERVER_FIELDS: &[&str] = &[
    "provisioningState",
    "loadBalancingRules",
    "inboundNatRules",
    "inboundNatPools",
    "outboundRules",
    "backendIPConfigurations",
    "ipConfiguration",
    "resourceGuid",
    "etag",
    "type",
];

/// An object the plan writes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    LoadBalancer(String),
    PublicIp { rg: String, name: String },
    SecurityGroup,
}

fn target_of(action: &Action) -> Target {
    match action {
        Action::PutLoadBalancer(lb) => Target::LoadBalancer(lb.name.to_ascii_lowercase()),
        Action::DeleteLoadBalancer { name, .. } => Target::LoadBalancer(name.to_ascii_lowercase()),
        Action::PutPublicIp { rg, pip } => Target::PublicIp {
            rg: rg.to_ascii_lowercase(),
            name: pip.name.to_ascii_lowercase(),
        },
        Action::DeletePublicIp { rg, name, .. } => Target::PublicIp {
            rg: rg.to_ascii_lowercase(),
            name: name.to_ascii_lowercase(),
        },
        Action::PutSecurityGroup { .. } => Target::SecurityGroup,
    }
}

/// The rounds of writes that take `observed` to what `desired` wants (`None`: what deleting
/// `service` needs): round 1 exactly, later rounds planned from round 1's expected result.
/// Empty when in sync. Errors are the planner's (a name taken by another owner, a missing
/// public IP).
pub fn phases(
    settings: &Settings,
    service: &ServiceKey,
    desired: Option<&Desired>,
    observed: &Observed,
) -> Result<Plan<AzureStep>, ProviderError> {
    let mut state = observed.clone();
    let mut result = Plan::default();
    for round in 0..MAX_ROUNDS {
        let actions = plan(settings, service, desired, &state)?;
        if actions.is_empty() {
            break;
        }
        let mut steps = Vec::with_capacity(actions.len());
        for action in actions {
            let before = state.clone();
            apply(settings, &mut state, &action);
            let target = target_of(&action);
            // Every write is one step, also one that only ARM-computed fields tell apart.
            let change = change_of(&target, &before, &state)
                .unwrap_or_else(|| unchanged_write(&target, &action));
            steps.push(AzureStep { action, change });
        }
        if round == 0 {
            result.steps = steps;
        } else {
            result = result.then(LATER_ROUND, steps);
        }
    }
    Ok(result)
}

/// The rounds of [`phases`] as `kube-lb plan` lists them.
pub fn preview(
    settings: &Settings,
    service: &ServiceKey,
    desired: Option<&Desired>,
    observed: &Observed,
) -> Result<Vec<PlannedChange>, ProviderError> {
    Ok(converge::describe(&phases(
        settings, service, desired, observed,
    )?))
}

/// A write whose object shows no field change (ARM-computed fields only).
fn unchanged_write(target: &Target, action: &Action) -> PlannedChange {
    let (kind, name, call) = match (target, action) {
        (Target::LoadBalancer(name), Action::DeleteLoadBalancer { .. }) => {
            (KIND_LOAD_BALANCER, name.clone(), "DeleteLoadBalancer")
        }
        (Target::LoadBalancer(name), _) => (KIND_LOAD_BALANCER, name.clone(), "PutLoadBalancer"),
        (Target::PublicIp { name, .. }, Action::DeletePublicIp { .. }) => {
            (KIND_PUBLIC_IP, name.clone(), "DeletePublicIPAddress")
        }
        (Target::PublicIp { name, .. }, _) => (KIND_PUBLIC_IP, name.clone(), "PutPublicIPAddress"),
        (Target::SecurityGroup, Action::PutSecurityGroup { nsg, .. }) => (
            KIND_SECURITY_GROUP,
            nsg.name.clone(),
            "PutNetworkSecurityGroup",
        ),
        (Target::SecurityGroup, _) => (
            KIND_SECURITY_GROUP,
            String::new(),
            "PutNetworkSecurityGroup",
        ),
    };
    let action = match action {
        Action::DeleteLoadBalancer { .. } | Action::DeletePublicIp { .. } => ChangeAction::Delete,
        _ => ChangeAction::Modify,
    };
    PlannedChange::new(action, kind, name, call)
}

/// Applies one write to the in-memory state as ARM would store it.
fn apply(settings: &Settings, state: &mut Observed, action: &Action) {
    match action {
        Action::PutPublicIp { rg, pip } => {
            let mut stored = pip.clone();
            stored
                .id
                .get_or_insert_with(|| settings.ids.public_ip(rg, &pip.name));
            stored
                .properties
                .ip_address
                .get_or_insert_with(|| ALLOCATED_BY_AZURE.to_string());
            let index = find_public_ip(&state.public_ips, rg, &pip.name);
            match index {
                Some(i) => state.public_ips[i] = Arc::new(stored),
                None => state.public_ips.push(Arc::new(stored)),
            }
        }
        Action::DeletePublicIp { rg, name, .. } => {
            if let Some(i) = find_public_ip(&state.public_ips, rg, name) {
                state.public_ips.remove(i);
            }
        }
        Action::PutLoadBalancer(lb) => {
            let mut stored = lb.clone();
            let id = settings
                .ids
                .load_balancer(&settings.lb_resource_group, &lb.name);
            for fe in &mut stored.properties.frontend_ip_configurations {
                fe.id
                    .get_or_insert_with(|| format!("{id}/frontendIPConfigurations/{}", fe.name));
                if fe.properties.subnet.is_some() && fe.properties.private_ip_address.is_none() {
                    fe.properties.private_ip_address = Some(ALLOCATED_BY_AZURE.to_string());
                }
            }
            stored.id.get_or_insert(id);
            match state
                .load_balancers
                .iter()
                .position(|l| l.name.eq_ignore_ascii_case(&lb.name))
            {
                Some(i) => state.load_balancers[i] = Arc::new(stored),
                None => state.load_balancers.push(Arc::new(stored)),
            }
            link_public_ips(state);
        }
        Action::DeleteLoadBalancer { name, .. } => {
            state
                .load_balancers
                .retain(|l| !l.name.eq_ignore_ascii_case(name));
            link_public_ips(state);
        }
        Action::PutSecurityGroup { nsg, .. } => {
            state.security_group = Some(Arc::new(nsg.clone()));
        }
    }
}

fn find_public_ip(pips: &[Arc<PublicIp>], rg: &str, name: &str) -> Option<usize> {
    pips.iter().position(|p| {
        p.name.eq_ignore_ascii_case(name)
            && p.id
                .as_deref()
                .and_then(resource_group_of)
                .is_none_or(|r| r.eq_ignore_ascii_case(rg))
    })
}

/// Sets each public IP's `ipConfiguration` to the frontend using it, or clears it, as ARM
/// does when a load balancer write attaches or detaches it (the delete plan waits for that).
fn link_public_ips(state: &mut Observed) {
    let users: BTreeMap<String, String> = state
        .load_balancers
        .iter()
        .flat_map(|lb| lb.properties.frontend_ip_configurations.iter())
        .filter_map(|fe| {
            let pip = fe.properties.public_ip_address.as_ref()?;
            Some((
                pip.id.to_ascii_lowercase(),
                fe.id.clone().unwrap_or_default(),
            ))
        })
        .collect();
    for pip in &mut state.public_ips {
        let Some(id) = pip.id.as_deref().map(str::to_ascii_lowercase) else {
            continue;
        };
        let user = users.get(&id).map(|fe| SubResource::new(fe.clone()));
        // Only an attach or detach changes it; a frontend kept keeps ARM's reference.
        if user.is_some() != pip.properties.ip_configuration.is_some() {
            Arc::make_mut(pip).properties.ip_configuration = user;
        }
    }
}

fn change_of(target: &Target, before: &Observed, after: &Observed) -> Option<PlannedChange> {
    match target {
        Target::LoadBalancer(name) => {
            let find = |o: &Observed| {
                o.load_balancers
                    .iter()
                    .find(|l| l.name.eq_ignore_ascii_case(name))
                    .cloned()
            };
            lb_change(find(before).as_deref(), find(after).as_deref())
        }
        Target::PublicIp { rg, name } => {
            let find = |o: &Observed| {
                find_public_ip(&o.public_ips, rg, name).map(|i| Arc::clone(&o.public_ips[i]))
            };
            pip_change(find(before).as_deref(), find(after).as_deref())
        }
        Target::SecurityGroup => nsg_change(
            before.security_group.as_deref(),
            after.security_group.as_deref(),
        ),
    }
}

/// Create, modify or delete, from whether the object exists before and after.
fn action_of<T>(before: Option<&T>, after: Option<&T>) -> Option<ChangeAction> {
    match (before, after) {
        (None, Some(_)) => Some(ChangeAction::Create),
        (Some(_), Some(_)) => Some(ChangeAction::Modify),
        (Some(_), None) => Some(ChangeAction::Delete),
        (None, None) => None,
    }
}

/// `(field, rendered value)` pairs of an object, in a fixed order.
type Fields = Vec<(String, Option<String>)>;

fn text(value: impl ToString) -> Option<String> {
    Some(value.to_string())
}

fn reference(value: Option<&SubResource>) -> Option<String> {
    value.map(|r| name_of(&r.id).to_string())
}

/// The unmodelled fields a write sends, minus those ARM computes.
fn extra_fields(prefix: &str, extra: &Extra) -> Fields {
    extra
        .iter()
        .filter(|(k, _)| !SERVER_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (format!("{prefix}{k}"), Some(render_json(v))))
        .collect()
}

fn render_json(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn frontend_fields(fe: &FrontendIpConfiguration) -> Fields {
    let p = &fe.properties;
    let mut fields = vec![
        (
            "publicIPAddress".into(),
            reference(p.public_ip_address.as_ref()),
        ),
        ("subnet".into(), reference(p.subnet.as_ref())),
        ("privateIPAddress".into(), p.private_ip_address.clone()),
        (
            "privateIPAllocationMethod".into(),
            p.private_ip_allocation_method.clone(),
        ),
    ];
    fields.extend(extra_fields("", &p.extra));
    fields
}

fn rule_fields(rule: &LoadBalancingRule) -> Fields {
    let p = &rule.properties;
    let mut fields = vec![
        ("protocol".into(), text(&p.protocol)),
        ("frontendPort".into(), text(p.frontend_port)),
        ("backendPort".into(), p.backend_port.and_then(text)),
        (
            "frontendIPConfiguration".into(),
            reference(p.frontend_ip_configuration.as_ref()),
        ),
        (
            "backendAddressPool".into(),
            reference(p.backend_address_pool.as_ref()),
        ),
        ("probe".into(), reference(p.probe.as_ref())),
        (
            "idleTimeoutInMinutes".into(),
            p.idle_timeout_in_minutes.and_then(text),
        ),
        (
            "enableFloatingIP".into(),
            p.enable_floating_ip.and_then(text),
        ),
        ("enableTcpReset".into(), p.enable_tcp_reset.and_then(text)),
        ("loadDistribution".into(), p.load_distribution.clone()),
    ];
    fields.extend(extra_fields("", &p.extra));
    fields
}

fn probe_fields(probe: &Probe) -> Fields {
    let p = &probe.properties;
    let mut fields = vec![
        ("protocol".into(), text(&p.protocol)),
        ("port".into(), text(p.port)),
        ("requestPath".into(), p.request_path.clone()),
        (
            "intervalInSeconds".into(),
            p.interval_in_seconds.and_then(text),
        ),
        ("probeThreshold".into(), p.probe_threshold.and_then(text)),
    ];
    fields.extend(extra_fields("", &p.extra));
    fields
}

fn pool_fields(pool: &BackendAddressPool) -> Fields {
    let mut members: Vec<String> = pool
        .properties
        .load_balancer_backend_addresses
        .iter()
        .map(|m| {
            format!(
                "{}={}",
                m.name,
                m.properties.ip_address.as_deref().unwrap_or("?")
            )
        })
        .collect();
    members.sort();
    vec![(
        "loadBalancerBackendAddresses".into(),
        (!members.is_empty()).then(|| members.join(", ")),
    )]
}

/// One line for a whole child (`protocol=Tcp, frontendPort=80, …`), for adds and removals.
fn summary(fields: &Fields) -> String {
    fields
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Field changes between two lists of named children (`collection[name].field`): a child
/// added or removed is one change with its summary; a changed one, a change per field.
fn children_diff<T: PartialEq>(
    change: &mut PlannedChange,
    collection: &str,
    before: &[T],
    after: &[T],
    name: fn(&T) -> &str,
    fields: fn(&T) -> Fields,
) {
    let lower = |items: &[T]| -> BTreeMap<String, usize> {
        items
            .iter()
            .enumerate()
            .map(|(i, item)| (name(item).to_ascii_lowercase(), i))
            .collect()
    };
    let (old, new) = (lower(before), lower(after));
    // Order: the objects as they were, then the new ones, as ARM lists them.
    let mut order: Vec<(&str, Option<&T>, Option<&T>)> = before
        .iter()
        .map(|b| {
            let key = name(b).to_ascii_lowercase();
            (name(b), Some(b), new.get(&key).map(|&i| &after[i]))
        })
        .collect();
    order.extend(
        after
            .iter()
            .filter(|a| !old.contains_key(&name(a).to_ascii_lowercase()))
            .map(|a| (name(a), None, Some(a))),
    );
    for (child, old, new) in order {
        let path = format!("{collection}[{child}]");
        match (old, new) {
            (Some(o), Some(n)) if o == n => {}
            (Some(o), Some(n)) => {
                let (of, nf) = (fields(o), fields(n));
                let before_len = change.fields.len();
                field_diff(change, &format!("{path}."), &of, &nf);
                if change.fields.len() == before_len {
                    // Differs only in what is not rendered (layout, ids): say so, not nothing.
                    change.fields.push(kube_lb_provider_core::FieldChange::new(
                        path,
                        text(summary(&of)),
                        text(summary(&nf)),
                    ));
                }
            }
            (Some(o), None) => change.fields.push(kube_lb_provider_core::FieldChange::new(
                path,
                text(summary(&fields(o))),
                None,
            )),
            (None, Some(n)) => change.fields.push(kube_lb_provider_core::FieldChange::new(
                path,
                None,
                text(summary(&fields(n))),
            )),
            (None, None) => {}
        }
    }
}

/// A field change per key whose value differs between `old` and `new`.
fn field_diff(change: &mut PlannedChange, prefix: &str, old: &Fields, new: &Fields) {
    let old_map: BTreeMap<&str, &Option<String>> =
        old.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let new_map: BTreeMap<&str, &Option<String>> =
        new.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut keys: Vec<&str> = old.iter().map(|(k, _)| k.as_str()).collect();
    keys.extend(
        new.iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !old_map.contains_key(k)),
    );
    for key in keys {
        let o = old_map.get(key).copied().cloned().flatten();
        let n = new_map.get(key).copied().cloned().flatten();
        if o != n {
            change.fields.push(kube_lb_provider_core::FieldChange::new(
                format!("{prefix}{key}"),
                o,
                n,
            ));
        }
    }
}

fn lb_change(before: Option<&LoadBalancer>, after: Option<&LoadBalancer>) -> Option<PlannedChange> {
    let action = action_of(before, after)?;
    let name = after.or(before).map(|l| l.name.clone()).unwrap_or_default();
    let call = if action == ChangeAction::Delete {
        "DeleteLoadBalancer"
    } else {
        "PutLoadBalancer"
    };
    let mut change = PlannedChange::new(action, KIND_LOAD_BALANCER, name, call);
    if let Some(after) = after {
        let empty = LoadBalancer::default();
        let old = &before.unwrap_or(&empty).properties;
        let new = &after.properties;
        children_diff(
            &mut change,
            "frontendIPConfigurations",
            &old.frontend_ip_configurations,
            &new.frontend_ip_configurations,
            |c| &c.name,
            frontend_fields,
        );
        children_diff(
            &mut change,
            "loadBalancingRules",
            &old.load_balancing_rules,
            &new.load_balancing_rules,
            |c| &c.name,
            rule_fields,
        );
        children_diff(
            &mut change,
            "probes",
            &old.probes,
            &new.probes,
            |c| &c.name,
            probe_fields,
        );
        children_diff(
            &mut change,
            "backendAddressPools",
            &old.backend_address_pools,
            &new.backend_address_pools,
            |c| &c.name,
            pool_fields,
        );
        if action == ChangeAction::Modify && change.fields.is_empty() {
            if before == Some(after) {
                return None;
            }
            change.fields.push(kube_lb_provider_core::FieldChange::new(
                "properties",
                Some("(as observed)".into()),
                Some("(rewritten)".into()),
            ));
        }
    }
    Some(change)
}

fn pip_fields(pip: &PublicIp) -> Fields {
    let mut fields: Fields = pip
        .tags
        .iter()
        .map(|(k, v)| (format!("tags.{k}"), Some(v.clone())))
        .collect();
    let p = &pip.properties;
    fields.push((
        "dnsSettings.domainNameLabel".into(),
        p.dns_settings
            .as_ref()
            .and_then(|d| d.domain_name_label.clone()),
    ));
    fields.push((
        "publicIPAllocationMethod".into(),
        p.allocation_method.clone(),
    ));
    fields.push(("publicIPAddressVersion".into(), p.version.clone()));
    fields.push(("sku".into(), pip.sku.as_ref().map(|s| s.name.clone())));
    fields.push((
        "publicIPPrefix".into(),
        reference(p.public_ip_prefix.as_ref()),
    ));
    fields
}

fn pip_change(before: Option<&PublicIp>, after: Option<&PublicIp>) -> Option<PlannedChange> {
    let action = action_of(before, after)?;
    let name = after.or(before).map(|p| p.name.clone()).unwrap_or_default();
    let call = if action == ChangeAction::Delete {
        "DeletePublicIPAddress"
    } else {
        "PutPublicIPAddress"
    };
    let mut change = PlannedChange::new(action, KIND_PUBLIC_IP, name, call);
    if let Some(after) = after {
        let old = before.map(pip_fields).unwrap_or_default();
        field_diff(&mut change, "", &old, &pip_fields(after));
        if action == ChangeAction::Modify && change.fields.is_empty() {
            return (before != Some(after)).then(|| {
                change.field(
                    "properties",
                    Some("(as observed)".into()),
                    Some("(rewritten)".into()),
                )
            });
        }
    }
    Some(change)
}

/// A set of rule values (single and plural fields together), sorted as strings: upstream's
/// order, and the order the provider writes.
fn joined<'a>(one: Option<&'a String>, many: &'a [String]) -> Option<String> {
    let mut all: Vec<&str> = one
        .iter()
        .map(|s| s.as_str())
        .chain(many.iter().map(String::as_str))
        .collect();
    all.sort_unstable();
    all.dedup();
    (!all.is_empty()).then(|| all.join(","))
}

fn security_rule_fields(rule: &SecurityRule) -> Fields {
    let p: &SecurityRuleProperties = &rule.properties;
    let mut fields = vec![
        ("access".into(), text(&p.access)),
        ("direction".into(), text(&p.direction)),
        ("priority".into(), text(p.priority)),
        ("protocol".into(), text(&p.protocol)),
        (
            "sources".into(),
            joined(p.source_address_prefix.as_ref(), &p.source_address_prefixes),
        ),
        ("sourcePortRange".into(), p.source_port_range.clone()),
        (
            "destinationPorts".into(),
            joined(
                p.destination_port_range.as_ref(),
                &p.destination_port_ranges,
            ),
        ),
        (
            "destinations".into(),
            joined(
                p.destination_address_prefix.as_ref(),
                &p.destination_address_prefixes,
            ),
        ),
    ];
    fields.extend(extra_fields("", &p.extra));
    fields
}

fn nsg_change(
    before: Option<&SecurityGroup>,
    after: Option<&SecurityGroup>,
) -> Option<PlannedChange> {
    let (before, after) = (before?, after?);
    if before == after {
        return None;
    }
    let mut change = PlannedChange::new(
        ChangeAction::Modify,
        KIND_SECURITY_GROUP,
        after.name.clone(),
        "PutNetworkSecurityGroup",
    );
    children_diff(
        &mut change,
        "securityRules",
        &before.properties.security_rules,
        &after.properties.security_rules,
        |r| &r.name,
        security_rule_fields,
    );
    Some(change)
}

#[cfg(test)]
mod tests {
    use kube_lb_provider_core::FieldChange;
    use serde_json::json;

    use super::*;
    use crate::desired::desired;
    use crate::test_support::{nodes, settings};

    const UID: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
    const PREFIX: &str = "a8ae4a1c26b2e11e9a9231681be663d3";

    fn empty_cluster() -> Observed {
        Observed {
            security_group: Some(Arc::new(SecurityGroup {
                name: "nsg".into(),
                location: "eastus".into(),
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn spec(
        annotations: serde_json::Value,
        extra: serde_json::Value,
    ) -> kube_lb_provider_core::LoadBalancerSpec {
        crate::test_support::spec("ns", "web", UID, annotations, extra)
    }

    /// Runs the preview's own simulation to the end, with real-looking addresses.
    fn converged(settings: &Settings, desired: &Desired) -> Observed {
        let mut state = empty_cluster();
        for _ in 0..MAX_ROUNDS {
            let actions = plan(settings, &desired.service, Some(desired), &state).unwrap();
            if actions.is_empty() {
                break;
            }
            for action in &actions {
                apply(settings, &mut state, action);
            }
            for pip in &mut state.public_ips {
                if pip.properties.ip_address.as_deref() == Some(ALLOCATED_BY_AZURE) {
                    Arc::make_mut(pip).properties.ip_address = Some("20.0.0.7".into());
                }
            }
        }
        assert!(
            plan(settings, &desired.service, Some(desired), &state)
                .unwrap()
                .is_empty()
        );
        state
    }

    fn headline(changes: &[PlannedChange]) -> Vec<(ChangeAction, &str, &str, &str)> {
        changes
            .iter()
            .map(|c| (c.action, c.kind.as_str(), c.name.as_str(), c.call.as_str()))
            .collect()
    }

    #[test]
    fn a_new_service_previews_every_write_of_every_round() {
        let s = settings();
        let desired = desired(&s, &spec(json!({}), json!({})), &nodes(2)).unwrap();
        let changes = preview(&s, &desired.service, Some(&desired), &empty_cluster()).unwrap();
        let pip = format!("kubernetes-{PREFIX}");
        assert_eq!(
            headline(&changes),
            vec![
                (
                    ChangeAction::Create,
                    KIND_PUBLIC_IP,
                    pip.as_str(),
                    "PutPublicIPAddress"
                ),
                (
                    ChangeAction::Create,
                    KIND_LOAD_BALANCER,
                    "kubernetes",
                    "PutLoadBalancer"
                ),
                (
                    ChangeAction::Modify,
                    KIND_SECURITY_GROUP,
                    "nsg",
                    "PutNetworkSecurityGroup"
                ),
            ]
        );
        let lb = &changes[1];
        let rule = lb
            .fields
            .iter()
            .find(|f| f.field == format!("loadBalancingRules[{PREFIX}-TCP-80]"))
            .unwrap();
        assert_eq!(rule.old, None);
        let new = rule.new.as_deref().unwrap();
        assert!(
            new.contains("frontendPort=80") && new.contains("probe="),
            "{new}"
        );
        // The security rules (TCP 80 and UDP 53) need the address ARM will allocate: the
        // simulated round after the public IP's says so.
        let nsg = &changes[2];
        let added: Vec<&str> = nsg.fields.iter().filter_map(|f| f.new.as_deref()).collect();
        assert_eq!(added.len(), 2, "{nsg:?}");
        assert!(nsg.fields.iter().all(|f| f.old.is_none()), "{nsg:?}");
        for (rule, protocol, port) in [(added[0], "Tcp", "80"), (added[1], "Udp", "53")] {
            for part in [
                format!("protocol={protocol}"),
                format!("destinationPorts={port}"),
                "sources=Internet".to_string(),
                format!("destinations={ALLOCATED_BY_AZURE}"),
            ] {
                assert!(rule.contains(&part), "{part} not in {rule}");
            }
        }
    }

    #[test]
    fn in_sync_previews_nothing_and_changes_show_old_and_new() {
        let s = settings();
        let base = desired(&s, &spec(json!({}), json!({})), &nodes(2)).unwrap();
        let state = converged(&s, &base);
        assert_eq!(
            preview(&s, &base.service, Some(&base), &state).unwrap(),
            vec![]
        );

        let rule = format!("loadBalancingRules[{PREFIX}-TCP-80]");
        let probe = format!("probes[{PREFIX}-TCP-80]");
        let nsg_rule = "securityRules[k8s-azure-lb_allow_IPv4_";
        // (case, annotations, spec, nodes, expected (field prefix, old, new) among the changes)
        type Case<'a> = (
            &'a str,
            serde_json::Value,
            serde_json::Value,
            u8,
            Vec<(String, Option<&'a str>, Option<&'a str>)>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                "idle timeout",
                json!({"azure-load-balancer-tcp-idle-timeout": "10"}),
                json!({}),
                2,
                vec![(
                    format!("{rule}.idleTimeoutInMinutes"),
                    Some("4"),
                    Some("10"),
                )],
            ),
            (
                "probe interval",
                json!({"azure-load-balancer-health-probe-interval": "10"}),
                json!({}),
                2,
                vec![(format!("{probe}.intervalInSeconds"), Some("5"), Some("10"))],
            ),
            (
                "node added",
                json!({}),
                json!({}),
                3,
                vec![(
                    "backendAddressPools[kubernetes].loadBalancerBackendAddresses".into(),
                    Some("n1=10.0.0.1, n2=10.0.0.2"),
                    Some("n1=10.0.0.1, n2=10.0.0.2, n3=10.0.0.3"),
                )],
            ),
        ];
        for (name, annotations, extra, n, want) in cases {
            let d = desired(&s, &spec(annotations, extra), &nodes(n)).unwrap();
            let changes = preview(&s, &d.service, Some(&d), &state).unwrap();
            let fields: Vec<&FieldChange> = changes.iter().flat_map(|c| c.fields.iter()).collect();
            for (field, old, new) in want {
                assert!(
                    fields.iter().any(|f| f.field == field
                        && f.old.as_deref() == old
                        && f.new.as_deref() == new),
                    "{name}: {field} {old:?} -> {new:?} not in {fields:#?}"
                );
            }
        }
        // Source ranges: the old consolidated rule loses the address, a new one gets it.
        let d = desired(
            &s,
            &spec(
                json!({}),
                json!({"loadBalancerSourceRanges": ["10.1.0.0/16"]}),
            ),
            &nodes(2),
        )
        .unwrap();
        let changes = preview(&s, &d.service, Some(&d), &state).unwrap();
        assert_eq!(
            headline(&changes),
            vec![(
                ChangeAction::Modify,
                KIND_SECURITY_GROUP,
                "nsg",
                "PutNetworkSecurityGroup"
            )]
        );
        let fields = &changes[0].fields;
        // Per protocol: the Internet rule goes (the Service was its only destination), a rule
        // from the range takes the address.
        assert_eq!(fields.len(), 4, "{fields:#?}");
        for protocol in ["Tcp", "Udp"] {
            let protocol = format!("protocol={protocol}");
            let removed = fields.iter().filter(|f| {
                f.field.starts_with(nsg_rule)
                    && f.new.is_none()
                    && f.old
                        .as_deref()
                        .is_some_and(|o| o.contains("sources=Internet") && o.contains(&protocol))
            });
            assert_eq!(removed.count(), 1, "{protocol}: {fields:#?}");
            let added = fields.iter().filter(|f| {
                f.field.starts_with(nsg_rule)
                    && f.old.is_none()
                    && f.new.as_deref().is_some_and(|n| {
                        n.contains("sources=10.1.0.0/16")
                            && n.contains("destinations=20.0.0.7")
                            && n.contains(&protocol)
                    })
            });
            assert_eq!(added.count(), 1, "{protocol}: {fields:#?}");
        }
    }

    #[test]
    fn a_frontend_moving_to_another_public_ip_previews_every_round() {
        let s = settings();
        let base = desired(&s, &spec(json!({}), json!({})), &nodes(2)).unwrap();
        let mut state = converged(&s, &base);
        state.public_ips.push(Arc::new(PublicIp {
            id: Some(s.ids.public_ip("rg", "user-ip")),
            name: "user-ip".into(),
            properties: crate::arm::PublicIpProperties {
                ip_address: Some("20.0.0.99".into()),
                ..Default::default()
            },
            ..Default::default()
        }));
        let moved = desired(
            &s,
            &spec(json!({"azure-pip-name": "user-ip"}), json!({})),
            &nodes(2),
        )
        .unwrap();
        let changes = preview(&s, &moved.service, Some(&moved), &state).unwrap();
        let managed = format!("kubernetes-{PREFIX}");
        assert_eq!(
            headline(&changes),
            vec![
                (
                    ChangeAction::Modify,
                    KIND_LOAD_BALANCER,
                    "kubernetes",
                    "PutLoadBalancer"
                ),
                (
                    ChangeAction::Modify,
                    KIND_SECURITY_GROUP,
                    "nsg",
                    "PutNetworkSecurityGroup"
                ),
                // Only once the frontend let go of it (ARM clears its ipConfiguration).
                (
                    ChangeAction::Delete,
                    KIND_PUBLIC_IP,
                    managed.as_str(),
                    "DeletePublicIPAddress"
                ),
            ]
        );
        assert_eq!(
            changes[0].fields,
            vec![FieldChange::new(
                format!("frontendIPConfigurations[{PREFIX}].publicIPAddress"),
                Some(managed.clone()),
                Some("user-ip".into()),
            )]
        );
        let destinations: Vec<(Option<&str>, Option<&str>)> = changes[1]
            .fields
            .iter()
            .map(|f| {
                assert!(f.field.ends_with("].destinations"), "{f:?}");
                (f.old.as_deref(), f.new.as_deref())
            })
            .collect();
        assert_eq!(
            destinations,
            vec![(Some("20.0.0.7"), Some("20.0.0.99")); 2],
            "both rules (TCP 80, UDP 53)"
        );
    }

    #[test]
    fn a_delete_previews_the_security_group_load_balancer_and_public_ip() {
        let s = settings();
        let d = desired(&s, &spec(json!({}), json!({})), &nodes(2)).unwrap();
        let state = converged(&s, &d);
        let changes = preview(&s, &d.service, None, &state).unwrap();
        let pip = format!("kubernetes-{PREFIX}");
        assert_eq!(
            headline(&changes),
            vec![
                (
                    ChangeAction::Modify,
                    KIND_SECURITY_GROUP,
                    "nsg",
                    "PutNetworkSecurityGroup"
                ),
                (
                    ChangeAction::Delete,
                    KIND_LOAD_BALANCER,
                    "kubernetes",
                    "DeleteLoadBalancer"
                ),
                (
                    ChangeAction::Delete,
                    KIND_PUBLIC_IP,
                    pip.as_str(),
                    "DeletePublicIPAddress"
                ),
            ]
        );
        assert!(changes[1].fields.is_empty() && changes[2].fields.is_empty());
        // Nothing of the Service left: nothing to do.
        assert_eq!(
            preview(&s, &d.service, None, &empty_cluster()).unwrap(),
            vec![]
        );
    }

    #[test]
    fn field_diffs_name_each_changed_key() {
        let mut change = PlannedChange::new(ChangeAction::Modify, "X", "x", "PutX");
        let fields = |pairs: &[(&str, Option<&str>)]| -> Fields {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                .collect()
        };
        field_diff(
            &mut change,
            "p.",
            &fields(&[("a", Some("1")), ("b", Some("2")), ("gone", Some("x"))]),
            &fields(&[("a", Some("1")), ("b", Some("3")), ("new", Some("y"))]),
        );
        assert_eq!(
            change.fields,
            vec![
                FieldChange::new("p.b", text("2"), text("3")),
                FieldChange::new("p.gone", text("x"), None),
                FieldChange::new("p.new", None, text("y")),
            ]
        );
        assert_eq!(
            joined(Some(&"80".to_string()), &["443".into(), "80".into()]).as_deref(),
            Some("443,80")
        );
        assert_eq!(joined(None, &[]), None);
    }
}

//! Classic ELB: desired and observed state, and the pure diff between them.

use std::collections::{BTreeMap, BTreeSet};

use crate::naming::{PROXY_PROTOCOL_POLICY, is_managed_policy, ssl_negotiation_policy_name};
use crate::tags::{TagChanges, diff_tags};

/// One listener.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Listener {
    /// Load-balancer port.
    pub lb_port: i32,
    /// `HTTP`, `HTTPS`, `SSL` or `TCP`.
    pub protocol: String,
    /// Node port.
    pub instance_port: i32,
    /// Instance-side protocol.
    pub instance_protocol: String,
    /// Certificate for SSL/HTTPS.
    pub certificate: Option<String>,
}

impl Listener {
    /// True for listeners that terminate TLS (and so take an SSL negotiation policy).
    pub fn is_tls(&self) -> bool {
        self.protocol.eq_ignore_ascii_case("SSL") || self.protocol.eq_ignore_ascii_case("HTTPS")
    }

    fn same_as(&self, other: &Listener) -> bool {
        self.lb_port == other.lb_port
            && self.instance_port == other.instance_port
            && self.protocol.eq_ignore_ascii_case(&other.protocol)
            && self
                .instance_protocol
                .eq_ignore_ascii_case(&other.instance_protocol)
            && match (&self.certificate, &other.certificate) {
                (None, None) => true,
                (Some(a), Some(b)) => a.eq_ignore_ascii_case(b),
                _ => false,
            }
    }
}

/// The health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    /// `PROTOCOL:port[/path]`.
    pub target: String,
    /// Seconds between probes.
    pub interval: i32,
    /// Seconds to wait.
    pub timeout: i32,
    /// Successes before healthy.
    pub healthy: i32,
    /// Failures before unhealthy.
    pub unhealthy: i32,
}

fn normalized_target(target: &str) -> String {
    match target.split_once(':') {
        Some((protocol, rest)) => format!("{}:{rest}", protocol.to_ascii_uppercase()),
        None => target.to_ascii_uppercase(),
    }
}

impl HealthCheck {
    fn matches(&self, other: &HealthCheck) -> bool {
        normalized_target(&self.target) == normalized_target(&other.target)
            && self.interval == other.interval
            && self.timeout == other.timeout
            && self.healthy == other.healthy
            && self.unhealthy == other.unhealthy
    }
}

/// Access-log attributes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AccessLog {
    /// Enabled.
    pub enabled: bool,
    /// S3 bucket.
    pub bucket: Option<String>,
    /// S3 prefix.
    pub prefix: Option<String>,
    /// Minutes (5 or 60); `None` leaves AWS's value.
    pub emit_interval: Option<i32>,
}

/// The load-balancer attributes kube-lb manages. Only these fields are compared, so AWS's
/// extra attributes never cause a modify (upstream's whole-struct comparison does, §3.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Cross-zone load balancing.
    pub cross_zone: bool,
    /// Access logs.
    pub access_log: AccessLog,
    /// Connection draining.
    pub draining_enabled: bool,
    /// Draining timeout; `None` leaves AWS's value.
    pub draining_timeout: Option<i32>,
    /// Idle timeout.
    pub idle_timeout: i32,
}

impl Attributes {
    /// What a freshly created Classic ELB has.
    pub fn aws_defaults() -> Self {
        Attributes {
            cross_zone: false,
            access_log: AccessLog::default(),
            draining_enabled: false,
            draining_timeout: None,
            idle_timeout: 60,
        }
    }

    /// True when `observed` already has every value this desired state asks for.
    pub fn satisfied_by(&self, observed: &Attributes) -> bool {
        let log = &self.access_log;
        let seen = &observed.access_log;
        let log_ok = log.enabled == seen.enabled
            && (!log.enabled
                || (log.bucket == seen.bucket
                    && log.prefix.as_deref().unwrap_or("")
                        == seen.prefix.as_deref().unwrap_or("")
                    && (log.emit_interval.is_none() || log.emit_interval == seen.emit_interval)));
        self.cross_zone == observed.cross_zone
            && log_ok
            && self.draining_enabled == observed.draining_enabled
            && (self.draining_timeout.is_none()
                || self.draining_timeout == observed.draining_timeout)
            && self.idle_timeout == observed.idle_timeout
    }
}

/// What the Service asks for, in AWS terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClbDesired {
    /// `a` + UID.
    pub name: String,
    /// Internal scheme.
    pub internal: bool,
    /// Listeners, sorted by port.
    pub listeners: Vec<Listener>,
    /// Health check.
    pub health_check: HealthCheck,
    /// Attributes.
    pub attributes: Attributes,
    /// PROXY protocol on every backend port.
    pub proxy_protocol: bool,
    /// Predefined SSL policy for TLS listeners.
    pub ssl_negotiation_policy: Option<String>,
    /// Tags (ownership + additional + tracker).
    pub tags: BTreeMap<String, String>,
    /// Subnets.
    pub subnets: BTreeSet<String>,
    /// Security groups, resolved to IDs, in attach order.
    pub security_groups: Vec<String>,
    /// Registered instances.
    pub instances: BTreeSet<String>,
}

/// One observed listener with its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedListener {
    /// The listener.
    pub listener: Listener,
    /// Policies on it.
    pub policies: Vec<String>,
}

/// What AWS has. `attributes` and `tags` are `None` when not read (fast resync): the planner
/// then leaves them alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClbObserved {
    /// DNS name.
    pub dns_name: Option<String>,
    /// Internal scheme.
    pub internal: bool,
    /// Listeners.
    pub listeners: Vec<ObservedListener>,
    /// Policies per backend (instance) port.
    pub backend_policies: BTreeMap<i32, Vec<String>>,
    /// Policies that exist on the LB.
    pub policies: BTreeSet<String>,
    /// Health check.
    pub health_check: Option<HealthCheck>,
    /// Subnets.
    pub subnets: BTreeSet<String>,
    /// Security groups.
    pub security_groups: Vec<String>,
    /// Registered instances.
    pub instances: BTreeSet<String>,
    /// VPC.
    pub vpc_id: Option<String>,
    /// Attributes, when read.
    pub attributes: Option<Attributes>,
    /// Tags, when read.
    pub tags: Option<BTreeMap<String, String>>,
}

impl ClbObserved {
    /// The state right after `CreateLoadBalancer` with `desired`'s listeners, subnets, groups,
    /// scheme and tags: nothing else set yet, AWS defaults everywhere.
    pub fn after_create(desired: &ClbDesired) -> Self {
        ClbObserved {
            dns_name: None,
            internal: desired.internal,
            listeners: desired
                .listeners
                .iter()
                .map(|l| ObservedListener {
                    listener: l.clone(),
                    policies: Vec::new(),
                })
                .collect(),
            backend_policies: BTreeMap::new(),
            policies: BTreeSet::new(),
            health_check: None,
            subnets: desired.subnets.clone(),
            security_groups: desired.security_groups.clone(),
            instances: BTreeSet::new(),
            vpc_id: None,
            attributes: Some(Attributes::aws_defaults()),
            tags: Some(desired.tags.clone()),
        }
    }
}

/// A policy to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    /// Name.
    pub name: String,
    /// Policy type.
    pub type_name: &'static str,
    /// The one attribute.
    pub attribute: (&'static str, String),
}

/// One step towards the desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClbAction {
    /// Create the load balancer (listeners, subnets, groups, scheme, tags).
    Create,
    /// Delete the load balancer first (the scheme cannot change in place), then create it.
    Recreate,
    /// Delete listeners on these ports.
    DeleteListeners(Vec<i32>),
    /// Create listeners.
    CreateListeners(Vec<Listener>),
    /// Attach subnets.
    AttachSubnets(Vec<String>),
    /// Detach subnets.
    DetachSubnets(Vec<String>),
    /// Replace the security groups.
    ApplySecurityGroups(Vec<String>),
    /// Configure the health check.
    ConfigureHealthCheck(HealthCheck),
    /// Modify attributes.
    ModifyAttributes(Attributes),
    /// Create a policy.
    CreatePolicy(PolicySpec),
    /// Replace a listener's policies.
    SetListenerPolicies {
        /// Listener port.
        lb_port: i32,
        /// Policies.
        policies: Vec<String>,
    },
    /// Replace a backend port's policies.
    SetBackendPolicies {
        /// Instance port.
        instance_port: i32,
        /// Policies.
        policies: Vec<String>,
    },
    /// Delete a policy no listener or backend uses any more.
    DeletePolicy(String),
    /// Add or overwrite tags.
    AddTags(BTreeMap<String, String>),
    /// Remove tags.
    RemoveTags(Vec<String>),
    /// Deregister instances.
    Deregister(Vec<String>),
    /// Register instances.
    Register(Vec<String>),
}

/// Replaces the managed part of a policy list, keeping policies someone else attached.
fn merge_policies(observed: &[String], managed: &[String]) -> Vec<String> {
    let mut merged: Vec<String> = observed
        .iter()
        .filter(|p| !is_managed_policy(p))
        .cloned()
        .collect();
    merged.extend(managed.iter().cloned());
    merged
}

fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().collect::<BTreeSet<_>>() == b.iter().collect::<BTreeSet<_>>()
}

/// Plans the calls that turn `observed` (or nothing) into `desired`.
pub fn plan(observed: Option<&ClbObserved>, desired: &ClbDesired) -> Vec<ClbAction> {
    let mut actions = Vec::new();
    let created;
    let observed = match observed {
        None => {
            actions.push(ClbAction::Create);
            created = ClbObserved::after_create(desired);
            &created
        }
        Some(seen) if seen.internal != desired.internal => {
            actions.push(ClbAction::Recreate);
            created = ClbObserved::after_create(desired);
            &created
        }
        Some(seen) => seen,
    };

    // Listeners: a listener whose protocol, ports or certificate differ is replaced.
    let keep: Vec<&ObservedListener> = observed
        .listeners
        .iter()
        .filter(|o| desired.listeners.iter().any(|d| d.same_as(&o.listener)))
        .collect();
    let mut delete: Vec<i32> = observed
        .listeners
        .iter()
        .filter(|o| {
            !keep
                .iter()
                .any(|k| k.listener.lb_port == o.listener.lb_port)
        })
        .map(|o| o.listener.lb_port)
        .collect();
    delete.sort_unstable();
    delete.dedup();
    let create: Vec<Listener> = desired
        .listeners
        .iter()
        .filter(|d| !keep.iter().any(|k| d.same_as(&k.listener)))
        .cloned()
        .collect();
    if !delete.is_empty() {
        actions.push(ClbAction::DeleteListeners(delete));
    }
    if !create.is_empty() {
        actions.push(ClbAction::CreateListeners(create));
    }

    let attach: Vec<String> = desired
        .subnets
        .difference(&observed.subnets)
        .cloned()
        .collect();
    let detach: Vec<String> = observed
        .subnets
        .difference(&desired.subnets)
        .cloned()
        .collect();
    if !attach.is_empty() {
        actions.push(ClbAction::AttachSubnets(attach));
    }
    if !detach.is_empty() {
        actions.push(ClbAction::DetachSubnets(detach));
    }
    if !same_set(&observed.security_groups, &desired.security_groups) {
        actions.push(ClbAction::ApplySecurityGroups(
            desired.security_groups.clone(),
        ));
    }

    if !observed
        .health_check
        .as_ref()
        .is_some_and(|hc| hc.matches(&desired.health_check))
    {
        actions.push(ClbAction::ConfigureHealthCheck(
            desired.health_check.clone(),
        ));
    }
    if let Some(attributes) = &observed.attributes
        && !desired.attributes.satisfied_by(attributes)
    {
        actions.push(ClbAction::ModifyAttributes(desired.attributes.clone()));
    }

    plan_policies(observed, desired, &keep, &mut actions);

    if let Some(tags) = &observed.tags {
        let TagChanges { add, remove } = diff_tags(tags, &desired.tags);
        if !add.is_empty() {
            actions.push(ClbAction::AddTags(add));
        }
        if !remove.is_empty() {
            actions.push(ClbAction::RemoveTags(remove));
        }
    }

    let deregister: Vec<String> = observed
        .instances
        .difference(&desired.instances)
        .cloned()
        .collect();
    let register: Vec<String> = desired
        .instances
        .difference(&observed.instances)
        .cloned()
        .collect();
    if !deregister.is_empty() {
        actions.push(ClbAction::Deregister(deregister));
    }
    if !register.is_empty() {
        actions.push(ClbAction::Register(register));
    }
    actions
}

fn plan_policies(
    observed: &ClbObserved,
    desired: &ClbDesired,
    kept: &[&ObservedListener],
    actions: &mut Vec<ClbAction>,
) {
    let ssl_policy = desired
        .ssl_negotiation_policy
        .as_ref()
        .map(|reference| (ssl_negotiation_policy_name(reference), reference));
    let mut needed: Vec<PolicySpec> = Vec::new();
    if desired.proxy_protocol {
        needed.push(PolicySpec {
            name: PROXY_PROTOCOL_POLICY.to_string(),
            type_name: "ProxyProtocolPolicyType",
            attribute: ("ProxyProtocol", "true".to_string()),
        });
    }
    if let Some((name, reference)) = &ssl_policy
        && desired.listeners.iter().any(Listener::is_tls)
    {
        needed.push(PolicySpec {
            name: name.clone(),
            type_name: "SSLNegotiationPolicyType",
            attribute: ("Reference-Security-Policy", (*reference).clone()),
        });
    }
    for policy in &needed {
        if !observed.policies.contains(&policy.name) {
            actions.push(ClbAction::CreatePolicy(policy.clone()));
        }
    }

    for listener in &desired.listeners {
        let current: Vec<String> = kept
            .iter()
            .find(|k| k.listener.lb_port == listener.lb_port)
            .map(|k| k.policies.clone())
            .unwrap_or_default();
        let managed: Vec<String> = match &ssl_policy {
            Some((name, _)) if listener.is_tls() => vec![name.clone()],
            _ => Vec::new(),
        };
        let wanted = merge_policies(&current, &managed);
        if !same_set(&wanted, &current) {
            actions.push(ClbAction::SetListenerPolicies {
                lb_port: listener.lb_port,
                policies: wanted,
            });
        }
    }

    let desired_ports: BTreeSet<i32> = desired.listeners.iter().map(|l| l.instance_port).collect();
    let proxy: Vec<String> = if desired.proxy_protocol {
        vec![PROXY_PROTOCOL_POLICY.to_string()]
    } else {
        Vec::new()
    };
    let observed_ports: BTreeSet<i32> = observed.backend_policies.keys().copied().collect();
    for port in desired_ports.union(&observed_ports) {
        let current = observed
            .backend_policies
            .get(port)
            .cloned()
            .unwrap_or_default();
        let managed = if desired_ports.contains(port) {
            proxy.clone()
        } else {
            Vec::new()
        };
        let wanted = merge_policies(&current, &managed);
        if !same_set(&wanted, &current) {
            actions.push(ClbAction::SetBackendPolicies {
                instance_port: *port,
                policies: wanted,
            });
        }
    }

    for name in &observed.policies {
        if is_managed_policy(name) && !needed.iter().any(|p| &p.name == name) {
            actions.push(ClbAction::DeletePolicy(name.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(
        port: i32,
        protocol: &str,
        node_port: i32,
        instance: &str,
        cert: Option<&str>,
    ) -> Listener {
        Listener {
            lb_port: port,
            protocol: protocol.into(),
            instance_port: node_port,
            instance_protocol: instance.into(),
            certificate: cert.map(str::to_string),
        }
    }

    fn desired() -> ClbDesired {
        ClbDesired {
            name: "a1".into(),
            internal: false,
            listeners: vec![listener(80, "TCP", 30080, "TCP", None)],
            health_check: HealthCheck {
                target: "TCP:30080".into(),
                interval: 10,
                timeout: 5,
                healthy: 2,
                unhealthy: 6,
            },
            attributes: Attributes::aws_defaults(),
            proxy_protocol: false,
            ssl_negotiation_policy: None,
            tags: BTreeMap::from([("kubernetes.io/cluster/c".into(), "owned".into())]),
            subnets: ["subnet-a".to_string()].into(),
            security_groups: vec!["sg-lb".into()],
            instances: ["i-1".to_string(), "i-2".to_string()].into(),
        }
    }

    /// The observed state after everything in `desired` was applied.
    fn converged(d: &ClbDesired) -> ClbObserved {
        let mut seen = ClbObserved::after_create(d);
        seen.health_check = Some(d.health_check.clone());
        seen.instances = d.instances.clone();
        let ssl = d
            .ssl_negotiation_policy
            .as_ref()
            .map(|r| ssl_negotiation_policy_name(r));
        for l in &mut seen.listeners {
            if l.listener.is_tls()
                && let Some(name) = &ssl
            {
                l.policies = vec![name.clone()];
            }
        }
        if d.proxy_protocol {
            seen.policies.insert(PROXY_PROTOCOL_POLICY.into());
            for l in &d.listeners {
                seen.backend_policies
                    .insert(l.instance_port, vec![PROXY_PROTOCOL_POLICY.into()]);
            }
        }
        if let Some(name) = ssl {
            seen.policies.insert(name);
        }
        seen.attributes = Some(d.attributes.clone());
        seen
    }

    #[test]
    fn create_plans_only_what_differs_from_aws_defaults() {
        let d = desired();
        assert_eq!(
            plan(None, &d),
            vec![
                ClbAction::Create,
                ClbAction::ConfigureHealthCheck(d.health_check.clone()),
                ClbAction::Register(vec!["i-1".into(), "i-2".into()]),
            ]
        );
    }

    #[test]
    fn converged_states_plan_nothing() {
        let mut with_everything = desired();
        with_everything.proxy_protocol = true;
        with_everything.ssl_negotiation_policy = Some("ELBSecurityPolicy-TLS-1-2-2017-01".into());
        with_everything
            .listeners
            .push(listener(443, "SSL", 30443, "SSL", Some("arn:cert")));
        with_everything.attributes.cross_zone = true;
        with_everything.attributes.access_log = AccessLog {
            enabled: true,
            bucket: Some("b".into()),
            prefix: Some("p".into()),
            emit_interval: Some(5),
        };
        for d in [desired(), with_everything] {
            let seen = converged(&d);
            assert_eq!(plan(Some(&seen), &d), vec![], "{d:?}");
            let mut fast = seen.clone();
            fast.attributes = None;
            fast.tags = None;
            assert_eq!(plan(Some(&fast), &d), vec![]);
        }
    }

    #[test]
    fn aws_extra_attribute_values_do_not_cause_a_modify() {
        let d = desired();
        let mut seen = converged(&d);
        seen.attributes = Some(Attributes {
            draining_timeout: Some(300),
            access_log: AccessLog {
                enabled: false,
                bucket: Some("old".into()),
                prefix: None,
                emit_interval: Some(60),
            },
            ..Attributes::aws_defaults()
        });
        assert_eq!(plan(Some(&seen), &d), vec![]);
    }

    #[test]
    fn changes_plan_minimal_actions() {
        let base = desired();
        let seen = converged(&base);
        let mut cases: Vec<(&str, ClbDesired, Vec<ClbAction>)> = Vec::new();

        let mut d = base.clone();
        d.instances.insert("i-3".into());
        d.instances.remove("i-1");
        cases.push((
            "node add and remove",
            d,
            vec![
                ClbAction::Deregister(vec!["i-1".into()]),
                ClbAction::Register(vec!["i-3".into()]),
            ],
        ));

        let mut d = base.clone();
        d.attributes.idle_timeout = 120;
        cases.push((
            "idle timeout",
            d.clone(),
            vec![ClbAction::ModifyAttributes(d.attributes.clone())],
        ));

        let mut d = base.clone();
        d.health_check.target = "HTTP:31000/healthz".into();
        cases.push((
            "local",
            d.clone(),
            vec![ClbAction::ConfigureHealthCheck(d.health_check.clone())],
        ));

        let mut d = base.clone();
        d.listeners = vec![listener(80, "SSL", 30080, "TCP", Some("arn:c"))];
        cases.push((
            "tcp to ssl replaces the listener",
            d,
            vec![
                ClbAction::DeleteListeners(vec![80]),
                ClbAction::CreateListeners(vec![listener(80, "SSL", 30080, "TCP", Some("arn:c"))]),
            ],
        ));

        let mut d = base.clone();
        d.proxy_protocol = true;
        cases.push((
            "proxy protocol on",
            d,
            vec![
                ClbAction::CreatePolicy(PolicySpec {
                    name: PROXY_PROTOCOL_POLICY.into(),
                    type_name: "ProxyProtocolPolicyType",
                    attribute: ("ProxyProtocol", "true".into()),
                }),
                ClbAction::SetBackendPolicies {
                    instance_port: 30080,
                    policies: vec![PROXY_PROTOCOL_POLICY.into()],
                },
            ],
        ));

        let mut d = base.clone();
        d.internal = true;
        let mut want = vec![
            ClbAction::Recreate,
            ClbAction::ConfigureHealthCheck(d.health_check.clone()),
        ];
        want.push(ClbAction::Register(vec!["i-1".into(), "i-2".into()]));
        cases.push(("scheme change recreates", d, want));

        let mut d = base.clone();
        d.tags.insert("env".into(), "prod".into());
        cases.push((
            "tag added",
            d,
            vec![ClbAction::AddTags(BTreeMap::from([(
                "env".into(),
                "prod".into(),
            )]))],
        ));

        let mut d = base.clone();
        d.subnets = ["subnet-b".to_string()].into();
        d.security_groups = vec!["sg-lb".into(), "sg-extra".into()];
        cases.push((
            "subnets and groups",
            d,
            vec![
                ClbAction::AttachSubnets(vec!["subnet-b".into()]),
                ClbAction::DetachSubnets(vec!["subnet-a".into()]),
                ClbAction::ApplySecurityGroups(vec!["sg-lb".into(), "sg-extra".into()]),
            ],
        ));

        for (name, d, want) in cases {
            assert_eq!(plan(Some(&seen), &d), want, "{name}");
        }
    }

    #[test]
    fn disabling_proxy_protocol_clears_backends_and_deletes_the_policy() {
        let mut on = desired();
        on.proxy_protocol = true;
        let seen = converged(&on);
        let off = desired();
        assert_eq!(
            plan(Some(&seen), &off),
            vec![
                ClbAction::SetBackendPolicies {
                    instance_port: 30080,
                    policies: vec![]
                },
                ClbAction::DeletePolicy(PROXY_PROTOCOL_POLICY.into()),
            ]
        );
    }

    #[test]
    fn ssl_policy_is_set_on_tls_listeners_only_and_foreign_policies_stay() {
        let mut d = desired();
        d.listeners
            .push(listener(443, "HTTPS", 30443, "HTTP", Some("arn:c")));
        d.ssl_negotiation_policy = Some("P".into());
        let mut seen = converged(&desired());
        seen.listeners.push(ObservedListener {
            listener: listener(443, "HTTPS", 30443, "HTTP", Some("arn:c")),
            policies: vec!["my-stickiness".into()],
        });
        let name = ssl_negotiation_policy_name("P");
        assert_eq!(
            plan(Some(&seen), &d),
            vec![
                ClbAction::CreatePolicy(PolicySpec {
                    name: name.clone(),
                    type_name: "SSLNegotiationPolicyType",
                    attribute: ("Reference-Security-Policy", "P".into()),
                }),
                ClbAction::SetListenerPolicies {
                    lb_port: 443,
                    policies: vec!["my-stickiness".into(), name],
                },
            ]
        );
    }
}

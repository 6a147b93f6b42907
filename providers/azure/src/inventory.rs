//! What `kube-lb audit` lists for Azure: every object in the cluster's shared load balancers,
//! public IPs and security group that carries a Service's name or tags, with the Service it
//! was made for. Pure: the provider reads, this module only classifies.
//!
//! Azure keeps a Service in shared objects, so ownership is read from names and tags:
//!
//! * frontends, load-balancing rules and probes are named `a<uid>` or `a<uid>-…` (`<uid>` being
//!   the first 31 hex digits of the Service UID, as upstream names them). Only that exact shape
//!   counts, so a user's own `app-frontend` in the cluster load balancer is never listed (and
//!   never deleted by `audit --delete`);
//! * public IPs carry `k8s-azure-service: ns/name[,ns/name…]` and the cluster name tag;
//! * security rules are consolidated: one managed rule serves every Service with the same
//!   protocol, sources and ports, its destinations being the Services' addresses, so a rule is
//!   listed once per Service whose address (or node ports) it holds, `shared`;
//! * the load balancer itself is listed once per Service that has children in it, `shared`
//!   (the last Service's delete removes it); an owned load balancer without frontends is
//!   listed with an empty Service key (any delete removes it).
//!
//! The Service key of a frontend's children gets its namespace and name from the public IP the
//! frontend uses when that IP's tag names exactly one Service; internal frontends record only
//! the UID prefix, so their key has an empty namespace and name. Either way the provider's
//! `delete` of that key removes the object (it finds children by UID prefix and public IPs by
//! tag).
//!
//! Not listed: destinations in a managed security rule that belong to no frontend or tagged
//! public IP any more (a delete interrupted after the public IP went, which kube-lb's delete
//! order avoids): no Service's delete would remove them. Public IPs in resource groups no
//! frontend points at other than the cluster's (an `azure-load-balancer-resource-group`
//! Service whose frontend is gone) are not read.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_provider_core::{OwnedResource, ServiceKey};

use crate::arm::{LoadBalancer, PublicIp, SecurityRule};
use crate::desired::{CLUSTER_TAG, LEGACY_CLUSTER_TAG, LEGACY_SERVICE_TAG, SERVICE_TAG, Settings};
use crate::plan::{Observed, is_managed};

/// Kind of a load balancer, as [`OwnedResource::kind`] and [`kube_lb_provider_core::PlannedChange::kind`] spell it.
pub const KIND_LOAD_BALANCER: &str = "LoadBalancer";
/// Kind of a frontend IP configuration.
pub const KIND_FRONTEND: &str = "FrontendIPConfiguration";
/// Kind of a load-balancing rule.
pub const KIND_RULE: &str = "LoadBalancingRule";
/// Kind of a health probe.
pub const KIND_PROBE: &str = "Probe";
/// Kind of a public IP address.
pub const KIND_PUBLIC_IP: &str = "PublicIPAddress";
/// Kind of a security rule of the cluster security group.
pub const KIND_SECURITY_RULE: &str = "SecurityRule";

/// Length of the `a<uid>` prefix of a Service's objects: `a` and 31 hex digits.
const PREFIX_LEN: usize = 32;

/// The UID part (31 lowercase hex digits) of a child named `a<uid>` or `a<uid>-…`, when the
/// name has exactly that shape.
pub fn uid_of_child(name: &str) -> Option<String> {
    let head = name.split('-').next().unwrap_or(name);
    let digits = head.strip_prefix(['a', 'A'])?;
    (head.len() == PREFIX_LEN && digits.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| digits.to_ascii_lowercase())
}

/// The UID part of a public IP named the way kube-lb and upstream name managed ones:
/// `<cluster>-a<uid>`.
fn uid_of_public_ip(cluster: &str, name: &str) -> Option<String> {
    let rest = name
        .get(..cluster.len())
        .filter(|head| head.eq_ignore_ascii_case(cluster))
        .and_then(|_| name.get(cluster.len()..))?
        .strip_prefix('-')?;
    uid_of_child(rest)
}

/// The Services a public IP's tag lists (`ns/name`, comma separated), malformed entries skipped.
fn tagged_services(pip: &PublicIp) -> Vec<(String, String)> {
    pip.tags
        .get(SERVICE_TAG)
        .or_else(|| pip.tags.get(LEGACY_SERVICE_TAG))
        .map(|value| {
            value
                .split(',')
                .filter_map(|entry| entry.trim().split_once('/'))
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .map(|(ns, name)| (ns.to_string(), name.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The key of no Service (an owned object no Service's children are in): any Service's
/// delete removes such an object.
fn nobody() -> ServiceKey {
    ServiceKey {
        namespace: String::new(),
        name: String::new(),
        uid: String::new(),
    }
}

/// One frontend of a Service in a shared load balancer.
struct Frontend<'a> {
    uid: String,
    public_ip_id: Option<&'a str>,
    private_ip: Option<&'a str>,
}

/// Everything in `observed` that carries this cluster's ownership, with its Service.
/// `observed` must hold the cluster's load balancers, the public IPs of the cluster resource
/// group and of every group a frontend points into, and the security group.
pub fn owned_resources(settings: &Settings, observed: &Observed) -> Vec<OwnedResource> {
    let cluster = settings.cluster.as_str();
    let mut frontends: Vec<Frontend<'_>> = Vec::new();
    for lb in &observed.load_balancers {
        for fe in &lb.properties.frontend_ip_configurations {
            if let Some(uid) = uid_of_child(&fe.name) {
                frontends.push(Frontend {
                    uid,
                    public_ip_id: fe
                        .properties
                        .public_ip_address
                        .as_ref()
                        .map(|p| p.id.as_str()),
                    private_ip: fe.properties.private_ip_address.as_deref(),
                });
            }
        }
    }
    let frontend_of_pip = |pip: &PublicIp| {
        let id = pip.id.as_deref()?;
        frontends
            .iter()
            .find(|f| f.public_ip_id.is_some_and(|p| p.eq_ignore_ascii_case(id)))
    };

    // Public IPs first: their tags name the Services the UID-named children belong to.
    let mut names: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut owned_pips: Vec<(&PublicIp, Vec<ServiceKey>)> = Vec::new();
    for pip in &observed.public_ips {
        let listed = tagged_services(pip);
        if listed.is_empty() {
            // Untagged public IPs are the user's, as upstream treats them.
            continue;
        }
        let frontend_uid = frontend_of_pip(pip).map(|f| f.uid.clone());
        let name_uid = uid_of_public_ip(cluster, &pip.name);
        let cluster_tag = pip
            .tags
            .get(CLUSTER_TAG)
            .or_else(|| pip.tags.get(LEGACY_CLUSTER_TAG));
        let ours = match cluster_tag {
            Some(tagged) => tagged == cluster,
            // Older upstream versions set no cluster tag: then only the cluster's own name
            // shape or a frontend of ours vouches for it (another cluster may share the group).
            None => frontend_uid.is_some() || name_uid.is_some(),
        };
        if !ours {
            continue;
        }
        let uid = frontend_uid.or(name_uid);
        if let (Some(uid), [only]) = (&uid, listed.as_slice()) {
            names.entry(uid.clone()).or_insert_with(|| only.clone());
        }
        let keys = listed
            .into_iter()
            .map(|(namespace, name)| ServiceKey {
                namespace,
                name,
                uid: String::new(),
            })
            .collect();
        owned_pips.push((pip, keys));
    }
    let key_for_uid = |uid: &str| {
        let (namespace, name) = names.get(uid).cloned().unwrap_or_default();
        ServiceKey {
            namespace,
            name,
            uid: uid.to_string(),
        }
    };
    // A tagged public IP not used by a frontend takes its UID from its name, or from the
    // frontend whose Service its tag names.
    let uid_for_name = |namespace: &str, name: &str| {
        names
            .iter()
            .find(|(_, (ns, n))| ns == namespace && n == name)
            .map(|(uid, _)| uid.clone())
    };

    let mut out: Vec<OwnedResource> = Vec::new();
    let resource = |kind: &str, name: String, service: ServiceKey, shared: bool| OwnedResource {
        kind: kind.to_string(),
        name,
        service,
        // Microsoft.Network objects do not report a creation time.
        created: None,
        shared,
    };
    for (pip, keys) in &owned_pips {
        let own_uid = frontend_of_pip(pip)
            .map(|f| f.uid.clone())
            .or_else(|| uid_of_public_ip(cluster, &pip.name));
        let shared = keys.len() > 1;
        for key in keys {
            // A shared address's own UID (its frontend's, or its name's) is one of the listed
            // Services', but which is unknown: giving it to another would make that one's
            // delete remove the first one's frontend. Only a UID known for that name is used.
            let uid = match (&own_uid, shared) {
                (Some(uid), false) => uid.clone(),
                _ => uid_for_name(&key.namespace, &key.name).unwrap_or_default(),
            };
            let service = ServiceKey { uid, ..key.clone() };
            out.push(resource(KIND_PUBLIC_IP, pip.name.clone(), service, shared));
        }
    }

    for lb in &observed.load_balancers {
        let props = &lb.properties;
        let children = props
            .frontend_ip_configurations
            .iter()
            .map(|c| (KIND_FRONTEND, c.name.as_str()))
            .chain(
                props
                    .load_balancing_rules
                    .iter()
                    .map(|c| (KIND_RULE, c.name.as_str())),
            )
            .chain(props.probes.iter().map(|c| (KIND_PROBE, c.name.as_str())));
        let mut uids = BTreeSet::new();
        for (kind, child) in children {
            let Some(uid) = uid_of_child(child) else {
                continue;
            };
            out.push(resource(
                kind,
                format!("{}/{child}", lb.name),
                key_for_uid(&uid),
                false,
            ));
            uids.insert(uid);
        }
        for uid in &uids {
            out.push(resource(
                KIND_LOAD_BALANCER,
                lb.name.clone(),
                key_for_uid(uid),
                true,
            ));
        }
        if props.frontend_ip_configurations.is_empty() {
            out.push(resource(
                KIND_LOAD_BALANCER,
                lb.name.clone(),
                nobody(),
                true,
            ));
        }
    }

    if let Some(nsg) = &observed.security_group {
        // Which Services each address belongs to: frontend addresses, then tagged public IPs.
        let mut by_address: BTreeMap<String, BTreeSet<ServiceKey>> = BTreeMap::new();
        for fe in &frontends {
            let address = match fe.public_ip_id {
                Some(id) => observed
                    .public_ips
                    .iter()
                    .find(|p| p.id.as_deref().is_some_and(|i| i.eq_ignore_ascii_case(id)))
                    .and_then(|p| p.properties.ip_address.as_deref()),
                None => fe.private_ip,
            };
            if let Some(address) = address {
                by_address
                    .entry(address.to_string())
                    .or_default()
                    .insert(key_for_uid(&fe.uid));
            }
        }
        for (pip, _) in &owned_pips {
            if let Some(address) = &pip.properties.ip_address {
                let entry = by_address.entry(address.clone()).or_default();
                entry.extend(
                    out.iter()
                        .filter(|r| r.kind == KIND_PUBLIC_IP && r.name == pip.name)
                        .map(|r| r.service.clone()),
                );
            }
        }
        // With floating IP off, a Service's rules target node IPs on its node ports.
        let node_ports = node_ports_by_service(&observed.load_balancers);
        for rule in nsg
            .properties
            .security_rules
            .iter()
            .filter(|r| is_managed(r))
        {
            for service in rule_services(rule, &by_address, &node_ports, &key_for_uid) {
                out.push(resource(
                    KIND_SECURITY_RULE,
                    format!("{}/{}", nsg.name, rule.name),
                    service,
                    true,
                ));
            }
        }
    }
    out.sort_by(|a, b| {
        (
            &a.kind,
            &a.name,
            &a.service.uid,
            &a.service.namespace,
            &a.service.name,
        )
            .cmp(&(
                &b.kind,
                &b.name,
                &b.service.uid,
                &b.service.namespace,
                &b.service.name,
            ))
    });
    out.dedup();
    out
}

/// For each Service UID, the backend (node) ports of its rules with floating IP disabled.
fn node_ports_by_service(
    lbs: &[std::sync::Arc<LoadBalancer>],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut ports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in lbs
        .iter()
        .flat_map(|lb| lb.properties.load_balancing_rules.iter())
    {
        if rule.properties.enable_floating_ip != Some(false) {
            continue;
        }
        if let (Some(uid), Some(port)) = (uid_of_child(&rule.name), rule.properties.backend_port) {
            ports.entry(uid).or_default().insert(port.to_string());
        }
    }
    ports
}

/// The Services a managed rule serves: those whose addresses are among its destinations, and
/// those whose node ports are all of its ports (the node-IP rules of floating-IP-off Services,
/// which the provider's delete removes by port).
fn rule_services(
    rule: &SecurityRule,
    by_address: &BTreeMap<String, BTreeSet<ServiceKey>>,
    node_ports: &BTreeMap<String, BTreeSet<String>>,
    key_for_uid: &dyn Fn(&str) -> ServiceKey,
) -> BTreeSet<ServiceKey> {
    let props = &rule.properties;
    let mut services: BTreeSet<ServiceKey> = props
        .destinations()
        .iter()
        .filter_map(|d| by_address.get(d))
        .flatten()
        .cloned()
        .collect();
    let ports: BTreeSet<String> = props
        .destination_port_range
        .iter()
        .chain(&props.destination_port_ranges)
        .cloned()
        .collect();
    if !ports.is_empty() {
        services.extend(
            node_ports
                .iter()
                .filter(|(_, mine)| ports.is_subset(mine))
                .map(|(uid, _)| key_for_uid(uid)),
        );
    }
    services
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::arm::SecurityGroup;
    use crate::test_support::settings;

    const A: &str = "a8ae4a1c26b2e11e9a9231681be663d3";
    const B: &str = "a1111111122223333444455555555555";
    const C: &str = "acccccccccccccccccccccccccccccc0";

    #[test]
    fn child_names_map_back_to_the_uid_prefix() {
        let cases = [
            (A.to_string(), Some(&A[1..])),
            (format!("{A}-TCP-80"), Some(&A[1..])),
            (format!("{A}-apps-UDP-53"), Some(&A[1..])),
            (A.to_uppercase(), Some(&A[1..])),
            (format!("{B}-TCP-443"), Some(&B[1..])),
            ("app-frontend".to_string(), None),
            ("a1b2-TCP-80".to_string(), None),
            (format!("{A}0-TCP-80"), None),
            ("cluster-service-shared-health-probe".to_string(), None),
            (format!("b{}", &A[1..]), None),
            (format!("a{}", "g".repeat(31)), None),
        ];
        for (name, want) in cases {
            assert_eq!(uid_of_child(&name).as_deref(), want, "{name}");
        }
        // The provider's naming maps the recovered UID back to the same prefix.
        let uid = uid_of_child(A).unwrap();
        assert_eq!(kube_lb_provider_core::naming::load_balancer_name(&uid), A);
        assert_eq!(
            uid_of_public_ip("kubernetes", &format!("kubernetes-{A}")).as_deref(),
            Some(&A[1..])
        );
        assert_eq!(uid_of_public_ip("kubernetes", &format!("other-{A}")), None);
        assert_eq!(uid_of_public_ip("kubernetes", "kubernetes"), None);
    }

    fn pip(name: &str, ip: &str, tags: &[(&str, &str)]) -> Arc<PublicIp> {
        Arc::new(PublicIp {
            id: Some(settings().ids.public_ip("rg", name)),
            name: name.into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            properties: crate::arm::PublicIpProperties {
                ip_address: Some(ip.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn lb(value: serde_json::Value) -> Arc<LoadBalancer> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn rule(name: &str, priority: u32, destinations: &[&str], ports: &[&str]) -> SecurityRule {
        serde_json::from_value(json!({"name": name, "properties": {
            "protocol": "Tcp", "access": "Allow", "direction": "Inbound", "priority": priority,
            "sourcePortRange": "*", "sourceAddressPrefix": "Internet",
            "destinationPortRanges": ports, "destinationAddressPrefixes": destinations}}))
        .unwrap()
    }

    fn listed(resources: &[OwnedResource]) -> Vec<(String, String, String, String, bool)> {
        resources
            .iter()
            .map(|r| {
                (
                    r.kind.clone(),
                    r.name.clone(),
                    r.service.to_string(),
                    r.service.uid.clone(),
                    r.shared,
                )
            })
            .collect()
    }

    #[test]
    fn names_and_tags_say_which_service_owns_what() {
        let s = settings();
        let a_uid = &A[1..];
        let pip_a = format!("kubernetes-{A}");
        let pip_id = s.ids.public_ip("rg", &pip_a);
        let fe_id = s.lb_child("kubernetes", "frontendIPConfigurations", A);
        let internal_prefix = "affffffffffffffffffffffffffffff0";
        let internal_uid = &internal_prefix[1..];
        let observed = Observed {
            load_balancers: vec![
                lb(
                    json!({"name": "kubernetes", "location": "eastus", "properties": {
                    "frontendIPConfigurations": [
                        {"name": A, "properties": {"publicIPAddress": {"id": pip_id}}},
                        {"name": "user-frontend", "properties": {"publicIPAddress": {"id": "x"}}},
                        {"name": C, "properties": {"publicIPAddress": {"id": s.ids.public_ip("rg", "shared-ip")}}}],
                    "loadBalancingRules": [
                        {"name": format!("{A}-TCP-80"), "properties": {"protocol": "Tcp", "frontendPort": 80,
                            "frontendIPConfiguration": {"id": fe_id}}},
                        {"name": "user-rule", "properties": {"protocol": "Tcp", "frontendPort": 22}}],
                    "probes": [{"name": format!("{A}-TCP-80"), "properties": {"protocol": "Tcp", "port": 30080}},
                        {"name": "cluster-service-shared-health-probe", "properties": {"protocol": "Http", "port": 10256}}],
                    "backendAddressPools": [{"name": "kubernetes"}]}}),
                ),
                lb(
                    json!({"name": "kubernetes-internal", "location": "eastus", "properties": {
                    "frontendIPConfigurations": [
                        {"name": internal_prefix, "properties": {"privateIPAddress": "10.0.0.9",
                            "subnet": {"id": "sub"}}}],
                    "loadBalancingRules": [
                        {"name": format!("{internal_prefix}-TCP-5432"), "properties": {"protocol": "Tcp",
                            "frontendPort": 5432, "backendPort": 30432, "enableFloatingIP": false}}]}}),
                ),
            ],
            public_ips: vec![
                pip(
                    &pip_a,
                    "20.0.0.1",
                    &[
                        ("k8s-azure-service", "ns/web"),
                        ("k8s-azure-cluster-name", "kubernetes"),
                    ],
                ),
                // Shared by two Services through loadBalancerIP: listed for each.
                pip(
                    "shared-ip",
                    "20.0.0.2",
                    &[
                        ("k8s-azure-service", "ns/a,ns/b"),
                        ("k8s-azure-cluster-name", "kubernetes"),
                    ],
                ),
                // Another cluster's, and the user's own: not listed.
                pip(
                    "other-cluster-ip",
                    "20.0.0.3",
                    &[
                        ("k8s-azure-service", "ns/web"),
                        ("k8s-azure-cluster-name", "other"),
                    ],
                ),
                pip("user-ip", "20.0.0.4", &[]),
                // Legacy tags without a cluster name: ours by its name shape.
                pip(
                    &format!("kubernetes-{B}"),
                    "20.0.0.5",
                    &[("service", "ns/old")],
                ),
                pip(
                    "foreign-untagged-cluster",
                    "20.0.0.6",
                    &[("service", "ns/x")],
                ),
            ],
            security_group: Some(Arc::new(SecurityGroup {
                name: "nsg".into(),
                properties: crate::arm::SecurityGroupProperties {
                    security_rules: vec![
                        rule(
                            "k8s-azure-lb_allow_IPv4_1",
                            500,
                            &["20.0.0.1", "20.0.0.2"],
                            &["80"],
                        ),
                        rule(
                            "k8s-azure-lb_allow_IPv4_2",
                            501,
                            &["10.0.0.21", "10.0.0.22"],
                            &["30432"],
                        ),
                        rule("k8s-azure-lb_allow_IPv4_3", 502, &["20.9.9.9"], &["80"]),
                        // The user's rules, even with a managed-looking name out of range.
                        rule("k8s-azure-lb_allow_IPv4_4", 200, &["20.0.0.1"], &["80"]),
                        rule("allow-ssh", 600, &["20.0.0.1"], &["22"]),
                    ],
                    ..Default::default()
                },
                ..Default::default()
            })),
        };
        let b_uid = &B[1..];
        let web = ("ns/web".to_string(), a_uid.to_string());
        let internal = ("/".to_string(), internal_uid.to_string());
        let shared_user = ("/".to_string(), C[1..].to_string());
        let row = |kind: &str, name: &str, who: &(String, String), shared: bool| {
            (
                kind.to_string(),
                name.to_string(),
                who.0.clone(),
                who.1.clone(),
                shared,
            )
        };
        let want = vec![
            row(KIND_FRONTEND, &format!("kubernetes/{A}"), &web, false),
            row(
                KIND_FRONTEND,
                &format!("kubernetes-internal/{internal_prefix}"),
                &internal,
                false,
            ),
            row(KIND_RULE, &format!("kubernetes/{A}-TCP-80"), &web, false),
            row(
                KIND_RULE,
                &format!("kubernetes-internal/{internal_prefix}-TCP-5432"),
                &internal,
                false,
            ),
            row(KIND_LOAD_BALANCER, "kubernetes", &web, true),
            // The shared address's frontend: which listed Service it serves is unknown.
            row(
                KIND_FRONTEND,
                &format!("kubernetes/{C}"),
                &shared_user,
                false,
            ),
            row(KIND_LOAD_BALANCER, "kubernetes", &shared_user, true),
            row(
                KIND_SECURITY_RULE,
                "nsg/k8s-azure-lb_allow_IPv4_1",
                &shared_user,
                true,
            ),
            row(KIND_LOAD_BALANCER, "kubernetes-internal", &internal, true),
            row(KIND_PROBE, &format!("kubernetes/{A}-TCP-80"), &web, false),
            row(KIND_PUBLIC_IP, &pip_a, &web, false),
            row(
                KIND_PUBLIC_IP,
                &format!("kubernetes-{B}"),
                &("ns/old".into(), b_uid.into()),
                false,
            ),
            row(
                KIND_PUBLIC_IP,
                "shared-ip",
                &("ns/a".into(), String::new()),
                true,
            ),
            row(
                KIND_PUBLIC_IP,
                "shared-ip",
                &("ns/b".into(), String::new()),
                true,
            ),
            row(
                KIND_SECURITY_RULE,
                "nsg/k8s-azure-lb_allow_IPv4_1",
                &("ns/a".into(), String::new()),
                true,
            ),
            row(
                KIND_SECURITY_RULE,
                "nsg/k8s-azure-lb_allow_IPv4_1",
                &("ns/b".into(), String::new()),
                true,
            ),
            row(
                KIND_SECURITY_RULE,
                "nsg/k8s-azure-lb_allow_IPv4_1",
                &web,
                true,
            ),
            row(
                KIND_SECURITY_RULE,
                "nsg/k8s-azure-lb_allow_IPv4_2",
                &internal,
                true,
            ),
        ];
        let mut got = listed(&owned_resources(&s, &observed));
        let mut want = want;
        got.sort();
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn an_owned_load_balancer_without_frontends_is_listed_for_nobody() {
        let s = settings();
        let observed = Observed {
            load_balancers: vec![lb(json!({"name": "kubernetes", "location": "eastus"}))],
            ..Default::default()
        };
        assert_eq!(
            listed(&owned_resources(&s, &observed)),
            vec![(
                KIND_LOAD_BALANCER.to_string(),
                "kubernetes".to_string(),
                "/".to_string(),
                String::new(),
                true
            )]
        );
        assert!(owned_resources(&s, &Observed::default()).is_empty());
    }
}

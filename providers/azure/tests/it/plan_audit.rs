//! `kube-lb plan` and `kube-lb audit` for Azure against the mock ARM server: the plan makes no
//! write and says what `ensure`/`delete` will change, the inventory names each Service's
//! objects so that deleting an orphan removes exactly its own, a refused read is an error,
//! and load balancers built the way upstream cloud-provider-azure builds them are adopted.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::collections::BTreeSet;

use kube_lb_mock_azure::{ArmError, Fault, MockArm, SUBSCRIPTION};
use kube_lb_provider_core::{
    ChangeAction, LoadBalancerProvider, OwnedResource, PlannedChange, ProviderError, ServiceKey,
};
use md5::{Digest, Md5};
use serde_json::json;
use support::*;

const UID_WEB: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_API: &str = "0c2f5d1e-7a3b-4c9d-8e1f-2a3b4c5d6e7f";
const UID_DB: &str = "11111111-2222-3333-4444-555555555555";

fn headline(changes: &[PlannedChange]) -> Vec<(ChangeAction, String, String)> {
    changes
        .iter()
        .map(|c| (c.action, c.kind.clone(), c.name.clone()))
        .collect()
}

/// The field changes of a plan as `(kind/name field, old, new)`.
fn fields(changes: &[PlannedChange]) -> Vec<(String, Option<String>, Option<String>)> {
    changes
        .iter()
        .flat_map(|c| {
            c.fields.iter().map(move |f| {
                (
                    format!("{}/{} {}", c.kind, c.name, f.field),
                    f.old.clone(),
                    f.new.clone(),
                )
            })
        })
        .collect()
}

/// Runs `plan` and asserts it wrote nothing: neither the provider's counter nor the mock's
/// journal sees a mutating call, and the mock's objects are unchanged.
async fn read_only(
    h: &Harness,
    plan: impl std::future::Future<Output = Result<Vec<PlannedChange>, ProviderError>>,
) -> Vec<PlannedChange> {
    let objects = || {
        (
            h.arm.load_balancers(),
            h.arm.public_ips(),
            h.arm.security_group(RG, NSG),
        )
    };
    let state = objects();
    let before = h.provider.calls().snapshot();
    h.arm.clear_journal();
    let changes = plan.await.unwrap();
    assert_eq!(h.provider.calls().snapshot().since(&before).mutations(), 0);
    assert!(h.arm.mutations().is_empty(), "{:?}", h.arm.mutations());
    assert_eq!(objects(), state);
    changes
}

/// [`read_only`] for `plan_ensure` of `spec` over `n` nodes.
async fn plan_ensure_read_only(
    h: &Harness,
    spec: &kube_lb_annotations::LoadBalancerSpec,
    n: usize,
) -> Vec<PlannedChange> {
    read_only(h, h.provider.plan_ensure(spec, &nodes(n))).await
}

/// [`read_only`] for `plan_delete` of `service`.
async fn plan_delete_read_only(h: &Harness, service: &ServiceKey) -> Vec<PlannedChange> {
    read_only(h, h.provider.plan_delete(service)).await
}

#[tokio::test]
async fn the_plan_lists_every_write_ensure_and_delete_make_and_makes_none() {
    let h = harness().await;
    let web =
        svc("web", UID_WEB).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    let p = prefix(UID_WEB);
    let pip = format!("{CLUSTER}-{p}");

    let before = h.provider.calls().snapshot();
    let create = plan_ensure_read_only(&h, &web.spec(), 2).await;
    // Both load balancers, the public IP list, the security group; a pass over more Services
    // plans from the same reads (the provider's cache), as ensure does.
    assert_eq!(h.provider.calls().snapshot().since(&before).reads(), 4);
    let before = h.provider.calls().snapshot();
    assert_eq!(plan_ensure_read_only(&h, &web.spec(), 2).await, create);
    let api = svc("api", UID_API);
    assert_eq!(plan_ensure_read_only(&h, &api.spec(), 2).await.len(), 3);
    assert_eq!(h.provider.calls().snapshot().since(&before).reads(), 0);
    assert_eq!(
        headline(&create),
        vec![
            (ChangeAction::Create, "PublicIPAddress".into(), pip.clone()),
            (ChangeAction::Create, "LoadBalancer".into(), CLUSTER.into()),
            (
                ChangeAction::Modify,
                "NetworkSecurityGroup".into(),
                NSG.into()
            ),
        ]
    );
    let created: BTreeSet<String> = fields(&create)
        .into_iter()
        .filter(|(_, old, _)| old.is_none())
        .map(|(f, _, _)| f)
        .collect();
    for child in [
        format!("LoadBalancer/{CLUSTER} frontendIPConfigurations[{p}]"),
        format!("LoadBalancer/{CLUSTER} loadBalancingRules[{p}-TCP-80]"),
        format!("LoadBalancer/{CLUSTER} loadBalancingRules[{p}-TCP-443]"),
        format!("LoadBalancer/{CLUSTER} probes[{p}-TCP-443]"),
        format!("LoadBalancer/{CLUSTER} backendAddressPools[{CLUSTER}]"),
        format!("PublicIPAddress/{pip} tags.k8s-azure-service"),
        // Upstream's name for Tcp from Internet to 80 and 443.
        format!(
            "NetworkSecurityGroup/{NSG} securityRules[k8s-azure-lb_allow_IPv4_556f7044ec033071ec0dfcf7cd85bc93]"
        ),
    ] {
        assert!(created.contains(&child), "{child} not in {created:#?}");
    }

    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(
        plan_ensure_read_only(&h, &web.spec(), 2).await,
        vec![],
        "in sync: nothing to do"
    );

    // A changed Service: each changed field, old → new, on the one object written.
    let changed = web
        .clone()
        .annotate("azure-load-balancer-tcp-idle-timeout", "15")
        .annotate("azure-load-balancer-health-probe-interval", "10");
    let modify = plan_ensure_read_only(&h, &changed.spec(), 3).await;
    assert_eq!(
        headline(&modify),
        vec![(ChangeAction::Modify, "LoadBalancer".into(), CLUSTER.into())]
    );
    let got = fields(&modify);
    let lb = format!("LoadBalancer/{CLUSTER}");
    for want in [
        (
            format!("{lb} loadBalancingRules[{p}-TCP-80].idleTimeoutInMinutes"),
            "4",
            "15",
        ),
        (
            format!("{lb} loadBalancingRules[{p}-TCP-443].idleTimeoutInMinutes"),
            "4",
            "15",
        ),
        (
            format!("{lb} probes[{p}-TCP-80].intervalInSeconds"),
            "5",
            "10",
        ),
        (
            format!("{lb} backendAddressPools[{CLUSTER}].loadBalancerBackendAddresses"),
            "node-1=10.224.0.11, node-2=10.224.0.12",
            "node-1=10.224.0.11, node-2=10.224.0.12, node-3=10.224.0.13",
        ),
    ] {
        let want = (want.0, Some(want.1.to_string()), Some(want.2.to_string()));
        assert!(got.contains(&want), "{want:?} not in {got:#?}");
    }
    assert_eq!(got.len(), 5, "nothing else changes: {got:#?}");

    // Delete: the security rule first, then the load balancer (its last frontend), then the
    // public IP.
    let service = web.spec().service;
    let delete = plan_delete_read_only(&h, &service).await;
    assert_eq!(
        headline(&delete),
        vec![
            (
                ChangeAction::Modify,
                "NetworkSecurityGroup".into(),
                NSG.into()
            ),
            (ChangeAction::Delete, "LoadBalancer".into(), CLUSTER.into()),
            (ChangeAction::Delete, "PublicIPAddress".into(), pip.clone()),
        ]
    );
    let address = status.ingress[0].ip.unwrap().to_string();
    let nsg_fields = &delete[0].fields;
    assert_eq!(nsg_fields.len(), 1, "{nsg_fields:?}");
    assert!(
        nsg_fields[0]
            .old
            .as_deref()
            .unwrap()
            .contains(&format!("destinations={address}"))
    );
    assert_eq!(
        nsg_fields[0].new, None,
        "the Service was the rule's only destination"
    );
    h.provider.delete(&service).await.unwrap();
    assert_eq!(plan_delete_read_only(&h, &service).await, vec![]);
}

/// The objects listed for one Service, as (kind, name).
fn objects_of(owned: &[OwnedResource], uid_prefix: &str) -> BTreeSet<(String, String)> {
    owned
        .iter()
        .filter(|r| prefix(&r.service.uid) == uid_prefix)
        .map(|r| (r.kind.clone(), r.name.clone()))
        .collect()
}

#[tokio::test]
async fn an_orphans_objects_are_listed_for_it_and_its_delete_removes_exactly_them() {
    let h = harness().await;
    // Two public Services sharing the load balancer and the consolidated rule (Tcp from the
    // Internet to 80), and an internal one with its own rule.
    let web = svc("web", UID_WEB);
    let api = svc("api", UID_API);
    let db = svc("db", UID_DB)
        .internal()
        .ports(&[("pg", 5432, "TCP", 30432)])
        .source_ranges(&["10.1.0.0/16"]);
    for s in [&web, &api, &db] {
        h.provider.ensure(&s.spec(), &nodes(2)).await.unwrap();
    }
    // One read of each shared object, however many Services there are: both load
    // balancers, the public IP list of the cluster resource group, the security group.
    let before = h.provider.calls().snapshot();
    h.arm.clear_journal();
    let owned = h.provider.owned_resources().await.unwrap();
    let calls = h.provider.calls().snapshot().since(&before);
    assert_eq!((calls.reads(), calls.mutations()), (4, 0), "{calls:?}");
    assert!(h.arm.mutations().is_empty());
    let (pw, pa, pd) = (prefix(UID_WEB), prefix(UID_API), prefix(UID_DB));
    let allow_80 = format!(
        "{NSG}/k8s-azure-lb_allow_IPv4_{:x}",
        Md5::digest(b"Tcp_Internet_80")
    );
    let allow_db = format!(
        "{NSG}/k8s-azure-lb_allow_IPv4_{:x}",
        Md5::digest(b"Tcp_10.1.0.0/16_5432")
    );
    let public = |p: &str| -> BTreeSet<(String, String)> {
        [
            ("PublicIPAddress", format!("{CLUSTER}-{p}")),
            ("FrontendIPConfiguration", format!("{CLUSTER}/{p}")),
            ("LoadBalancingRule", format!("{CLUSTER}/{p}-TCP-80")),
            ("Probe", format!("{CLUSTER}/{p}-TCP-80")),
            ("LoadBalancer", CLUSTER.to_string()),
            ("SecurityRule", allow_80.clone()),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect()
    };
    let internal_lb = format!("{CLUSTER}-internal");
    let internal: BTreeSet<(String, String)> = [
        ("FrontendIPConfiguration", format!("{internal_lb}/{pd}")),
        ("LoadBalancingRule", format!("{internal_lb}/{pd}-TCP-5432")),
        ("Probe", format!("{internal_lb}/{pd}-TCP-5432")),
        ("LoadBalancer", internal_lb.clone()),
        ("SecurityRule", allow_db.clone()),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(objects_of(&owned, &pw), public(&pw));
    assert_eq!(objects_of(&owned, &pa), public(&pa));
    assert_eq!(objects_of(&owned, &pd), internal);
    assert_eq!(owned.len(), 6 + 6 + 5, "nothing else is listed: {owned:#?}");
    for r in &owned {
        let shared = matches!(r.kind.as_str(), "LoadBalancer" | "SecurityRule");
        assert_eq!(r.shared, shared, "{r:?}");
        // Public Services are named by their public IP's tag; internal ones record only the UID.
        let who = match prefix(&r.service.uid) {
            p if p == pw => "default/web",
            p if p == pa => "default/api",
            _ => "/",
        };
        assert_eq!(r.service.to_string(), who, "{r:?}");
    }

    // The orphan: `web` went while the controller was stopped. Its delete, from the key the
    // inventory recorded (not from the Service, which no longer exists), removes exactly its
    // objects: the shared load balancer and rule stay for `api`.
    let orphan = owned
        .iter()
        .find(|r| r.kind == "PublicIPAddress" && prefix(&r.service.uid) == pw)
        .unwrap();
    let internal_before = h.arm.load_balancer(RG, &internal_lb).unwrap();
    h.provider.delete(&orphan.service).await.unwrap();
    let after = h.provider.owned_resources().await.unwrap();
    let rest: Vec<&OwnedResource> = owned
        .iter()
        .filter(|r| prefix(&r.service.uid) != pw)
        .collect();
    assert_eq!(after.iter().collect::<Vec<_>>(), rest);
    assert!(h.arm.public_ip(RG, &format!("{CLUSTER}-{pw}")).is_none());
    let lb = h.arm.load_balancer(RG, CLUSTER).unwrap();
    assert_eq!(
        names(&lb["properties"]["frontendIPConfigurations"]),
        vec![pa.clone()]
    );
    assert_eq!(
        h.arm.load_balancer(RG, &internal_lb).unwrap(),
        internal_before,
        "untouched"
    );
    let api_address = h
        .provider
        .status(&api.spec().service)
        .await
        .unwrap()
        .unwrap()
        .ingress[0]
        .ip
        .unwrap()
        .to_string();
    let rules = managed_rules(&h.arm);
    let shared_rule = &rules[allow_80.trim_start_matches(&format!("{NSG}/"))];
    assert_eq!(destinations(shared_rule), vec![api_address]);
    // The others are in sync still.
    for s in [&api, &db] {
        assert_eq!(
            h.provider.plan_ensure(&s.spec(), &nodes(2)).await.unwrap(),
            vec![]
        );
    }
    // The last public Service's delete takes the shared load balancer with it.
    let api_key = after
        .iter()
        .find(|r| prefix(&r.service.uid) == pa)
        .unwrap()
        .service
        .clone();
    h.provider.delete(&api_key).await.unwrap();
    assert!(h.arm.load_balancer(RG, CLUSTER).is_none());
    assert_eq!(
        h.provider
            .owned_resources()
            .await
            .unwrap()
            .iter()
            .map(|r| prefix(&r.service.uid))
            .collect::<BTreeSet<_>>(),
        BTreeSet::from([pd])
    );
}

#[tokio::test]
async fn a_refused_read_is_an_error_never_a_shorter_list_or_an_empty_plan() {
    let h = harness().await;
    let web = svc("web", UID_WEB);
    let db = svc("db", UID_DB).internal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    h.provider.ensure(&db.spec(), &nodes(2)).await.unwrap();
    let forbidden = || {
        ArmError::new(
            axum::http::StatusCode::FORBIDDEN,
            "AuthorizationFailed",
            "The client does not have authorization to perform action",
        )
    };
    // (what is refused, how, the call the error must name, its status): every read the
    // inventory makes. The external load balancer is read before the internal one, so a
    // one-shot fault on the shared path prefix hits the external one.
    let cases: Vec<(&str, Fault, &str, &str)> = vec![
        (
            "external load balancer",
            Fault::error("GET", &format!("/loadBalancers/{CLUSTER}"), forbidden(), 1),
            "GetLoadBalancer",
            "HTTP 403",
        ),
        (
            "internal load balancer",
            Fault::error("GET", "/loadBalancers/kubernetes-internal", forbidden(), 1),
            "GetLoadBalancer",
            "HTTP 403",
        ),
        (
            "public IP list",
            Fault::error("GET", "/publicIPAddresses", forbidden(), 1),
            "ListPublicIPAddresses",
            "HTTP 403",
        ),
        (
            "security group",
            Fault::error("GET", "/networkSecurityGroups/", forbidden(), 1),
            "GetNetworkSecurityGroup",
            "HTTP 403",
        ),
        // Throttled beyond the retry budget (four attempts).
        (
            "throttled listing",
            Fault::throttle("GET", "/publicIPAddresses", 0, 20),
            "ListPublicIPAddresses",
            "HTTP 429",
        ),
    ];
    // (The status in the error also proves the injected answer, nothing else, refused it.)
    for (what, fault, operation, status) in cases {
        h.arm.clear_faults();
        h.arm.inject(fault);
        let error = h.provider.owned_resources().await.unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(operation) && text.contains(status),
            "{what}: {text}"
        );
    }
    // The plans read the same objects: a refusal is an error, not "no changes".
    h.arm.clear_faults();
    for (what, path) in [
        ("load balancer", "/loadBalancers/"),
        ("public IPs", "/publicIPAddresses"),
        ("security group", "/networkSecurityGroups/"),
    ] {
        // A fresh provider: nothing cached that would spare the read.
        let config = h.config.clone();
        let provider =
            kube_lb_provider_azure::AzureProvider::new(&config, CLUSTER, fast_options()).unwrap();
        h.arm.clear_faults();
        h.arm.inject(Fault::error("GET", path, forbidden(), 1));
        assert!(
            provider.plan_ensure(&web.spec(), &nodes(2)).await.is_err(),
            "plan_ensure, {what}"
        );
        h.arm.clear_faults();
        let provider =
            kube_lb_provider_azure::AzureProvider::new(&config, CLUSTER, fast_options()).unwrap();
        h.arm.inject(Fault::error("GET", path, forbidden(), 1));
        assert!(
            provider.plan_delete(&web.spec().service).await.is_err(),
            "plan_delete, {what}"
        );
    }
    h.arm.clear_faults();
    assert_eq!(
        h.provider.owned_resources().await.unwrap().len(),
        6 + 5 - 1,
        "everything again once reads succeed"
    );
}

// ---------------------------------------------------------------------------------------------
// Migration: objects built by hand the way upstream cloud-provider-azure names and tags them.

fn id(collection: &str, name: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/{collection}/{name}"
    )
}

/// How the upstream-built objects differ between scenarios.
#[derive(Clone, Copy)]
struct Upstream {
    /// Pool members as IP addresses (upstream's `nodeIP` mode) rather than NIC references
    /// (its default `nodeIPConfiguration` mode, which leaves `loadBalancerBackendAddresses`
    /// empty).
    ip_members: bool,
    /// Public IP tagged with the legacy keys (`service`, `kubernetes-cluster-name`) of older
    /// upstream releases.
    legacy_tags: bool,
    /// The NSG rule as releases before the consolidated rules named it: one per Service, port
    /// and source (`a<uid>-TCP-80-Internet`).
    per_service_rule: bool,
}

/// Builds, for Service `default/web` (`UID_WEB`, TCP 80 and 443 on node ports 30080/30443,
/// Cluster policy, two nodes), what upstream's `EnsureLoadBalancer` leaves in ARM.
async fn build_upstream(arm: &MockArm, how: Upstream) {
    let rest = OtherClient::new(arm).await;
    let p = prefix(UID_WEB);
    let pip_name = format!("{CLUSTER}-{p}");
    let tags = if how.legacy_tags {
        json!({"service": "default/web", "kubernetes-cluster-name": CLUSTER})
    } else {
        json!({"k8s-azure-service": "default/web", "k8s-azure-cluster-name": CLUSTER})
    };
    let pip = rest
        .put(
            &id("publicIPAddresses", &pip_name),
            json!({"location": kube_lb_mock_azure::LOCATION, "tags": tags,
                "sku": {"name": "Standard", "tier": "Regional"},
                "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"}}),
        )
        .await;
    let address = pip["properties"]["ipAddress"].as_str().unwrap().to_string();
    let lb_id = id("loadBalancers", CLUSTER);
    let child =
        |collection: &str, name: &str| json!({"id": format!("{lb_id}/{collection}/{name}")});
    let vnet_id = id("virtualNetworks", VNET);
    let members = if how.ip_members {
        json!([
            {"name": "node-1", "properties": {"ipAddress": "10.224.0.11", "virtualNetwork": {"id": vnet_id}}},
            {"name": "node-2", "properties": {"ipAddress": "10.224.0.12", "virtualNetwork": {"id": vnet_id}}}])
    } else {
        json!([])
    };
    let rule = |port: u16, node_port: u16| {
        let name = format!("{p}-TCP-{port}");
        (
            json!({"name": name, "properties": {
                "frontendIPConfiguration": child("frontendIPConfigurations", &p),
                "backendAddressPool": child("backendAddressPools", CLUSTER),
                "probe": child("probes", &name),
                "protocol": "Tcp", "frontendPort": port, "backendPort": port,
                "idleTimeoutInMinutes": 4, "enableFloatingIP": true, "enableTcpReset": true,
                "disableOutboundSnat": false, "loadDistribution": "Default"}}),
            json!({"name": name, "properties": {"protocol": "Tcp", "port": node_port,
                "intervalInSeconds": 5, "numberOfProbes": 2, "probeThreshold": 2}}),
        )
    };
    let (rule_80, probe_80) = rule(80, 30080);
    let (rule_443, probe_443) = rule(443, 30443);
    rest.put(
        &lb_id,
        json!({"location": kube_lb_mock_azure::LOCATION, "sku": {"name": "Standard", "tier": "Regional"},
            "properties": {
                "frontendIPConfigurations": [{"name": p, "properties": {"publicIPAddress": {"id": pip["id"]}}}],
                "backendAddressPools": [{"name": CLUSTER, "properties": {"loadBalancerBackendAddresses": members}}],
                "loadBalancingRules": [rule_80, rule_443],
                "probes": [probe_80, probe_443]}}),
    )
    .await;
    let nsg_id = id("networkSecurityGroups", NSG);
    let mut nsg = rest.get(&nsg_id).await;
    let rules = if how.per_service_rule {
        // Pre-consolidation upstream: `<svc>-<PROTO>-<port>-<source>`, one port each.
        [80, 443]
            .iter()
            .enumerate()
            .map(|(i, port)| {
                json!({"name": format!("{p}-TCP-{port}-Internet"), "properties": {
                    "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRange": port.to_string(),
                    "sourceAddressPrefix": "Internet", "destinationAddressPrefix": address,
                    "access": "Allow", "priority": 500 + i, "direction": "Inbound"}})
            })
            .collect::<Vec<_>>()
    } else {
        // Consolidated: MD5 of `Tcp_Internet_443,80` (ports sorted as strings).
        let name = format!(
            "k8s-azure-lb_allow_IPv4_{:x}",
            Md5::digest(b"Tcp_Internet_443,80")
        );
        vec![json!({"name": name, "properties": {
            "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRanges": ["443", "80"],
            "sourceAddressPrefix": "Internet", "destinationAddressPrefixes": [address],
            "access": "Allow", "priority": 500, "direction": "Inbound"}})]
    };
    nsg["properties"]["securityRules"] = json!(rules);
    rest.put(&nsg_id, nsg).await;
}

#[tokio::test]
async fn a_load_balancer_built_by_upstream_is_adopted_and_the_plan_says_what_changes() {
    let web =
        svc("web", UID_WEB).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    let p = prefix(UID_WEB);
    let pip = format!("{CLUSTER}-{p}");
    let lb = format!("LoadBalancer/{CLUSTER}");
    let exact = Upstream {
        ip_members: true,
        legacy_tags: false,
        per_service_rule: false,
    };
    // (scenario, how upstream built it, the changes the plan must show)
    type Want = Vec<(String, Option<&'static str>, Option<&'static str>)>;
    let cases: Vec<(&str, Upstream, Want)> = vec![
        (
            "nodeIP pool mode, current tags: adopted as is",
            exact,
            vec![],
        ),
        (
            "default nodeIPConfiguration pool mode",
            Upstream {
                ip_members: false,
                ..exact
            },
            vec![(
                format!("{lb} backendAddressPools[{CLUSTER}].loadBalancerBackendAddresses"),
                None,
                Some("node-1=10.224.0.11, node-2=10.224.0.12"),
            )],
        ),
        (
            "legacy public IP tags",
            Upstream {
                legacy_tags: true,
                ..exact
            },
            vec![
                (
                    format!("PublicIPAddress/{pip} tags.k8s-azure-cluster-name"),
                    None,
                    Some(CLUSTER),
                ),
                (
                    format!("PublicIPAddress/{pip} tags.k8s-azure-service"),
                    None,
                    Some("default/web"),
                ),
            ],
        ),
    ];
    for (scenario, how, want) in cases {
        let h = harness().await;
        build_upstream(&h.arm, how).await;
        let changes = plan_ensure_read_only(&h, &web.spec(), 2).await;
        let got = fields(&changes);
        let want: Vec<(String, Option<String>, Option<String>)> = want
            .into_iter()
            .map(|(f, o, n)| (f, o.map(str::to_string), n.map(str::to_string)))
            .collect();
        assert_eq!(got, want, "{scenario}: {changes:#?}");
        // Whatever the plan said is what ensure does, and then nothing is left.
        h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
        assert_eq!(
            plan_ensure_read_only(&h, &web.spec(), 2).await,
            vec![],
            "{scenario}"
        );
        assert_eq!(
            h.arm.load_balancers().len(),
            1,
            "{scenario}: adopted, not duplicated"
        );
        assert_eq!(
            h.arm.public_ips().len(),
            1,
            "{scenario}: adopted, not duplicated"
        );
    }

    // Pre-consolidation per-Service NSG rules are not kube-lb's (nor current upstream's)
    // managed rules: the plan adds the consolidated rule and leaves the old ones in place.
    let h = harness().await;
    build_upstream(
        &h.arm,
        Upstream {
            per_service_rule: true,
            ..exact
        },
    )
    .await;
    let changes = plan_ensure_read_only(&h, &web.spec(), 2).await;
    assert_eq!(
        headline(&changes),
        vec![(
            ChangeAction::Modify,
            "NetworkSecurityGroup".into(),
            NSG.into()
        )]
    );
    let consolidated = format!(
        "k8s-azure-lb_allow_IPv4_{:x}",
        Md5::digest(b"Tcp_Internet_443,80")
    );
    let got = fields(&changes);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(
        got[0].0,
        format!("NetworkSecurityGroup/{NSG} securityRules[{consolidated}]")
    );
    assert_eq!(got[0].1, None);
    let new = got[0].2.as_deref().unwrap();
    assert!(
        new.contains("priority=502") && new.contains("destinationPorts=443,80"),
        "{new}"
    );
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let nsg = h.arm.security_group(RG, NSG).unwrap();
    assert_eq!(
        names(&nsg["properties"]["securityRules"]),
        vec![
            format!("{p}-TCP-443-Internet"),
            format!("{p}-TCP-80-Internet"),
            consolidated
        ],
        "the old per-Service rules stay (the operator removes them)"
    );
}

/// An internal Service as upstream builds it: a frontend `a<uid>` in the default subnet with a
/// dynamic address on `<cluster>-internal`, no security rule (no source ranges), IP members.
#[tokio::test]
async fn an_internal_load_balancer_built_by_upstream_is_adopted_exactly() {
    let h = harness().await;
    let rest = OtherClient::new(&h.arm).await;
    let p = prefix(UID_DB);
    let lb_name = format!("{CLUSTER}-internal");
    let lb_id = id("loadBalancers", &lb_name);
    let child =
        |collection: &str, name: &str| json!({"id": format!("{lb_id}/{collection}/{name}")});
    let vnet_id = id("virtualNetworks", VNET);
    let rule = format!("{p}-TCP-5432");
    let stored = rest
        .put(
            &lb_id,
            json!({"location": kube_lb_mock_azure::LOCATION, "sku": {"name": "Standard", "tier": "Regional"},
                "properties": {
                    "frontendIPConfigurations": [{"name": p, "properties": {
                        "subnet": {"id": format!("{vnet_id}/subnets/nodes")},
                        "privateIPAllocationMethod": "Dynamic"}}],
                    "backendAddressPools": [{"name": CLUSTER, "properties": {"loadBalancerBackendAddresses": [
                        {"name": "node-1", "properties": {"ipAddress": "10.224.0.11", "virtualNetwork": {"id": vnet_id}}},
                        {"name": "node-2", "properties": {"ipAddress": "10.224.0.12", "virtualNetwork": {"id": vnet_id}}}]}}],
                    "loadBalancingRules": [{"name": rule, "properties": {
                        "frontendIPConfiguration": child("frontendIPConfigurations", &p),
                        "backendAddressPool": child("backendAddressPools", CLUSTER),
                        "probe": child("probes", &rule),
                        "protocol": "Tcp", "frontendPort": 5432, "backendPort": 5432,
                        "idleTimeoutInMinutes": 4, "enableFloatingIP": true, "enableTcpReset": true,
                        "loadDistribution": "Default"}}],
                    "probes": [{"name": rule, "properties": {"protocol": "Tcp", "port": 30432,
                        "intervalInSeconds": 5, "numberOfProbes": 2, "probeThreshold": 2}}]}}),
        )
        .await;
    let address =
        stored["properties"]["frontendIPConfigurations"][0]["properties"]["privateIPAddress"]
            .as_str()
            .unwrap()
            .to_string();
    let db = svc("db", UID_DB)
        .internal()
        .ports(&[("pg", 5432, "TCP", 30432)]);
    assert_eq!(plan_ensure_read_only(&h, &db.spec(), 2).await, vec![]);
    // And ensure agrees: nothing written, the address kept.
    h.arm.clear_journal();
    let status = h.provider.ensure(&db.spec(), &nodes(2)).await.unwrap();
    assert!(h.arm.mutations().is_empty(), "{:?}", h.arm.mutations());
    assert_eq!(status.ingress[0].ip.unwrap().to_string(), address);
}

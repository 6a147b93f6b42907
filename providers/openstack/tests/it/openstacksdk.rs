//! An outsider's view of the mock: after the provider built a load balancer, the official
//! Python `openstacksdk` (in the project's venv, `scripts/setup-venv.sh`) authenticates,
//! discovers the endpoints and lists and shows every resource kind — load balancers,
//! listeners, pools, members, health monitors, floating IPs, ports, networks, subnets,
//! security groups and their rules — plus the Octavia and Neutron quotas. Each list must show
//! exactly what the mock holds, each show must return the listed item, and the values the SDK
//! parsed must be the ones kube-lb set.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;

use kube_lb_mock_openstack::{
    MockOpenStack, PASSWORD, PRIVATE_NETWORK_ID, PROJECT_NAME, PUBLIC_NETWORK_ID, Quotas, USERNAME,
};
use kube_lb_provider_core::LoadBalancerProvider;
use serde_json::{Value, json};
use support::*;

/// The venv's Python (`KUBE_LB_PYTHON` overrides it).
fn python() -> PathBuf {
    match std::env::var_os("KUBE_LB_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python3"),
    }
}

/// Runs `openstacksdk_view.py` against the mock and parses its JSON.
async fn sdk_view(cloud: &MockOpenStack) -> Value {
    sdk_view_with_ports_of(cloud, &[]).await
}

/// The same, plus the ports the SDK finds by a `fixed_ips` filter per address in
/// `addresses` (`ports_by_fixed_ip`), when any.
async fn sdk_view_with_ports_of(cloud: &MockOpenStack, addresses: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/openstacksdk_view.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(script)
        .args([cloud.auth_url().as_str(), USERNAME, PASSWORD, PROJECT_NAME]);
    if !addresses.is_empty() {
        command.arg(addresses.join(","));
    }
    let output = command.output().await.unwrap_or_else(|e| {
        panic!(
            "running {}: {e} (run scripts/setup-venv.sh, or set KUBE_LB_PYTHON)",
            python().display()
        )
    });
    assert!(
        output.status.success(),
        "openstacksdk failed (run scripts/setup-venv.sh for openstacksdk): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn ids(items: &[Value]) -> BTreeSet<String> {
    items
        .iter()
        .map(|item| item["id"].as_str().unwrap().to_string())
        .collect()
}

/// The shown documents of `kind`, after checking that the SDK listed exactly `expected` (the
/// mock's own ids) and showed each listed item.
fn shown<'a>(view: &'a Value, kind: &str, expected: &BTreeSet<String>) -> &'a [Value] {
    let listed: BTreeSet<String> = view[kind]["listed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    assert_eq!(&listed, expected, "{kind}: the SDK listed other ids");
    let shown = view[kind]["shown"].as_array().unwrap();
    assert_eq!(
        &ids(shown),
        expected,
        "{kind}: show did not return the listed items"
    );
    shown
}

fn by_name<'a>(items: &'a [Value], name: &str) -> &'a Value {
    items
        .iter()
        .find(|item| item["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {items:#?}"))
}

#[tokio::test]
async fn official_openstacksdk_lists_and_shows_everything_the_provider_created() {
    let mock = MockOpenStack::builder()
        .quotas(Quotas {
            load_balancers: Some(5),
            floating_ips: Some(7),
        })
        .quota("listener", 20)
        .quota("security_group_rule", 40)
        .start()
        .await
        .unwrap();
    let h = harness_with(mock, "").await;
    let web = svc("web", "8ae4a1c2-6b2e-11e9-a923-1681be663d3e")
        .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)])
        .local(32000);
    let status = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    // A security group with a node-port rule, as cloud-provider-openstack's
    // manage-security-groups makes them, so the SDK's view covers those kinds too.
    let token = token(&h.cloud).await;
    let (code, group) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-groups",
        Some(json!({"security_group": {"name": "lb-sg-8ae4a1c2-default-web",
            "description": "Security Group for default/web Service LoadBalancer in cluster kubernetes"}})),
    )
    .await;
    assert_eq!(code, 201, "{group}");
    let (code, rule) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-group-rules",
        Some(
            json!({"security_group_rule": {"security_group_id": group["security_group"]["id"],
            "direction": "ingress", "ethertype": "IPv4", "protocol": "tcp",
            "port_range_min": 30080, "port_range_max": 30080, "remote_ip_prefix": "10.0.0.0/24"}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{rule}");

    let view = sdk_view(&h.cloud).await;
    let cloud = &h.cloud;
    let name = "kube_service_kubernetes_default_web";

    let lbs = shown(&view, "loadbalancers", &ids(&cloud.load_balancers()));
    let lb = by_name(lbs, name);
    assert_eq!(lb["provisioning_status"], "ACTIVE");
    assert_eq!(lb["operating_status"], "ONLINE");
    assert_eq!(
        lb["description"],
        "Kubernetes external service default/web from cluster kubernetes"
    );
    assert_eq!(lb["vip_network_id"], PRIVATE_NETWORK_ID);

    let listeners = shown(&view, "listeners", &ids(&cloud.listeners()));
    let mut ports: Vec<(String, u64)> = listeners
        .iter()
        .map(|l| {
            assert_eq!(l["load_balancers"][0]["id"], lb["id"], "{l}");
            (
                l["name"].as_str().unwrap().to_string(),
                l["protocol_port"].as_u64().unwrap(),
            )
        })
        .collect();
    ports.sort();
    assert_eq!(
        ports,
        vec![
            (format!("listener_0_{name}"), 80),
            (format!("listener_1_{name}"), 443)
        ]
    );

    let pools = shown(&view, "pools", &ids(&cloud.pools()));
    let monitors = shown(&view, "healthmonitors", &ids(&cloud.health_monitors()));
    for pool in pools {
        let monitor = monitors
            .iter()
            .find(|m| m["id"] == pool["health_monitor_id"])
            .unwrap_or_else(|| panic!("pool without its monitor: {pool}"));
        // externalTrafficPolicy Local: an HTTP check of the health-check node port.
        assert_eq!(monitor["type"], "HTTP");
        assert_eq!(monitor["url_path"], "/healthz");
    }

    let mock_members: Vec<Value> = cloud
        .pools()
        .iter()
        .flat_map(|p| cloud.members(p["id"].as_str().unwrap()))
        .collect();
    let members = shown(&view, "members", &ids(&mock_members));
    let mut member_view: Vec<(String, String, u64, u64)> = members
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["address"].as_str().unwrap().to_string(),
                m["protocol_port"].as_u64().unwrap(),
                m["monitor_port"].as_u64().unwrap(),
            )
        })
        .collect();
    member_view.sort();
    assert_eq!(
        member_view,
        vec![
            ("node-1".into(), "10.0.0.101".into(), 30080, 32000),
            ("node-1".into(), "10.0.0.101".into(), 30443, 32000),
            ("node-2".into(), "10.0.0.102".into(), 30080, 32000),
            ("node-2".into(), "10.0.0.102".into(), 30443, 32000),
        ]
    );

    let fips = shown(&view, "floatingips", &ids(&cloud.floating_ips()));
    assert_eq!(fips.len(), 1);
    assert_eq!(fips[0]["port_id"], lb["vip_port_id"]);
    assert_eq!(fips[0]["fixed_ip_address"], lb["vip_address"]);
    assert_eq!(fips[0]["floating_network_id"], PUBLIC_NETWORK_ID);
    assert_eq!(
        fips[0]["floating_ip_address"],
        status.ingress[0].ip.unwrap().to_string()
    );

    let ports = shown(&view, "ports", &ids(&cloud.ports()));
    let vip_port = ports.iter().find(|p| p["id"] == lb["vip_port_id"]).unwrap();
    assert_eq!(vip_port["fixed_ips"][0]["ip_address"], lb["vip_address"]);
    assert_eq!(vip_port["network_id"], PRIVATE_NETWORK_ID);

    let networks = shown(&view, "networks", &ids(&cloud.networks()));
    let external: Vec<&Value> = networks
        .iter()
        .filter(|n| n["is_router_external"] == true)
        .map(|n| &n["id"])
        .collect();
    assert_eq!(external, vec![&json!(PUBLIC_NETWORK_ID)]);
    let subnets = shown(&view, "subnets", &ids(&cloud.subnets()));
    assert!(
        subnets
            .iter()
            .any(|s| s["network_id"] == PRIVATE_NETWORK_ID && s["cidr"] == "10.0.0.0/24")
    );

    let groups = shown(&view, "security_groups", &ids(&cloud.security_groups()));
    assert_eq!(groups[0]["name"], "lb-sg-8ae4a1c2-default-web");
    let rules = shown(
        &view,
        "security_group_rules",
        &ids(&cloud.security_group_rules()),
    );
    // The rule made above plus the two default egress rules of a new group.
    assert_eq!(rules.len(), 3, "{rules:#?}");
    let ingress = rules.iter().find(|r| r["direction"] == "ingress").unwrap();
    assert_eq!(
        (
            &ingress["ether_type"],
            &ingress["port_range_min"],
            &ingress["remote_ip_prefix"]
        ),
        (&json!("IPv4"), &json!(30080), &json!("10.0.0.0/24"))
    );

    assert_eq!(view["octavia_quota"]["load_balancers"], 5);
    assert_eq!(view["octavia_quota"]["listeners"], 20);
    assert_eq!(view["octavia_quota"]["pools"], -1);
    assert_eq!(view["neutron_quota"]["floating_ips"], 7);
    assert_eq!(view["neutron_quota"]["security_group_rules"], 40);
}

#[tokio::test]
async fn official_openstacksdk_sees_the_managed_security_group_its_rules_and_ports() {
    let h = harness_with(
        mock_with_node_ports(2).await,
        "manage-security-groups = true\n",
    )
    .await;
    let web = svc("web", "8ae4a1c2-6b2e-11e9-a923-1681be663d3e")
        .ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)]);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();

    let view = sdk_view(&h.cloud).await;
    let groups = shown(&view, "security_groups", &ids(&h.cloud.security_groups()));
    let group = by_name(
        groups,
        "lb-sg-8ae4a1c2-6b2e-11e9-a923-1681be663d3e-default-web",
    );
    assert_eq!(
        group["description"],
        "Security Group for default/web Service LoadBalancer in cluster kubernetes"
    );
    let rules = shown(
        &view,
        "security_group_rules",
        &ids(&h.cloud.security_group_rules()),
    );
    let mut ingress: Vec<(String, u64, String, String)> = rules
        .iter()
        .filter(|r| r["security_group_id"] == group["id"] && r["direction"] == "ingress")
        .map(|r| {
            (
                r["protocol"].as_str().unwrap().to_string(),
                r["port_range_min"].as_u64().unwrap(),
                r["ether_type"].as_str().unwrap().to_string(),
                r["remote_ip_prefix"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    ingress.sort();
    assert_eq!(
        ingress,
        vec![
            ("tcp".into(), 30080, "IPv4".into(), "10.0.0.0/24".into()),
            ("udp".into(), 30053, "IPv4".into(), "10.0.0.0/24".into()),
        ]
    );
    let ports = shown(&view, "ports", &ids(&h.cloud.ports()));
    let mut carrying: Vec<&str> = ports
        .iter()
        .filter(|p| {
            p["security_group_ids"]
                .as_array()
                .is_some_and(|groups| groups.contains(&group["id"]))
        })
        .map(|p| p["fixed_ips"][0]["ip_address"].as_str().unwrap())
        .collect();
    carrying.sort();
    assert_eq!(carrying, vec!["10.0.0.101", "10.0.0.102"]);
}

#[tokio::test]
async fn official_openstacksdk_sees_the_members_and_group_on_the_subnet_found_from_the_nodes() {
    use crate::member_subnet::{NODES_SUBNET, network_only_conf, split_cloud, split_nodes};
    let cloud = split_cloud().await;
    let config = kube_lb_provider_openstack::CloudConfig::parse(&network_only_conf(
        &cloud,
        "manage-security-groups = true\n",
    ))
    .unwrap();
    let h = provider_for(cloud, config);
    let web = svc("web", "8ae4a1c2-6b2e-11e9-a923-1681be663d3e");
    h.provider
        .ensure(&web.spec(), &split_nodes())
        .await
        .unwrap();

    let view = sdk_view_with_ports_of(&h.cloud, &["10.1.0.11", "10.0.0.13"]).await;
    let members: Vec<Value> = h
        .cloud
        .pools()
        .iter()
        .flat_map(|pool| h.cloud.members(pool["id"].as_str().unwrap()))
        .collect();
    let members = shown(&view, "members", &ids(&members));
    let mut on: Vec<(&str, &str)> = members
        .iter()
        .map(|m| {
            (
                m["address"].as_str().unwrap(),
                m["subnet_id"].as_str().unwrap(),
            )
        })
        .collect();
    on.sort();
    assert_eq!(
        on,
        vec![
            ("10.0.0.13", NODES_SUBNET),
            ("10.1.0.11", NODES_SUBNET),
            ("10.1.0.12", NODES_SUBNET)
        ]
    );
    let groups = shown(&view, "security_groups", &ids(&h.cloud.security_groups()));
    let group = by_name(
        groups,
        "lb-sg-8ae4a1c2-6b2e-11e9-a923-1681be663d3e-default-web",
    );
    let rules = shown(
        &view,
        "security_group_rules",
        &ids(&h.cloud.security_group_rules()),
    );
    let prefixes: BTreeSet<&str> = rules
        .iter()
        .filter(|r| r["security_group_id"] == group["id"] && r["direction"] == "ingress")
        .map(|r| r["remote_ip_prefix"].as_str().unwrap())
        .collect();
    assert_eq!(prefixes, BTreeSet::from(["10.1.0.0/24"]));
    let ports = shown(&view, "ports", &ids(&h.cloud.ports()));
    let mut carrying: Vec<&str> = ports
        .iter()
        .filter(|p| {
            p["security_group_ids"]
                .as_array()
                .is_some_and(|groups| groups.contains(&group["id"]))
        })
        .map(|p| p["fixed_ips"][0]["ip_address"].as_str().unwrap())
        .collect();
    carrying.sort();
    assert_eq!(carrying, vec!["10.1.0.11", "10.1.0.12"]);

    // The SDK's own `fixed_ips` filters find the ports of exactly the addresses asked for.
    let by_address: BTreeSet<String> = view["ports_by_fixed_ip"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_string())
        .collect();
    let expected: BTreeSet<String> = h
        .cloud
        .ports()
        .iter()
        .filter(|p| {
            ["10.1.0.11", "10.0.0.13"].contains(&p["fixed_ips"][0]["ip_address"].as_str().unwrap())
        })
        .map(|p| p["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(by_address.len(), 2);
    assert_eq!(by_address, expected);
}

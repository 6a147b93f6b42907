//! `manage-security-groups = true` against the mock: the Service's security group opens its
//! node ports to the member subnet on the nodes' member ports, follows node changes, costs no
//! mutating call on a no-op resync, is removed with the Service (every port keeping its other
//! groups), and a lost or interrupted create never leaves a second group.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod support;

use kube_lb_mock_openstack::{Fault, MockOpenStack};
use kube_lb_provider_core::{ChangeAction, LoadBalancerProvider};
use serde_json::{Value, json};
use support::*;

const UID: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const GROUP: &str = "lb-sg-8ae4a1c2-6b2e-11e9-a923-1681be663d3e-default-web";
const MANAGED: &str = "manage-security-groups = true\n";

/// A mock whose three node VMs have their port on the private network, and a harness with
/// `extra` in `[LoadBalancer]`. The first node's port already carries a group of the user's.
async fn cloud_with_nodes(extra: &str) -> (Harness, String) {
    let h = harness_with(mock_with_node_ports(3).await, extra).await;
    let token = token(&h.cloud).await;
    let (code, group) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-groups",
        Some(json!({"security_group": {"name": "users-own"}})),
    )
    .await;
    assert_eq!(code, 201, "{group}");
    let users = group["security_group"]["id"].as_str().unwrap().to_string();
    let port = port_of(&h.cloud, "10.0.0.101");
    let (code, answer) = call(
        &h.cloud,
        &token,
        reqwest::Method::PUT,
        &format!("/networking/v2.0/ports/{}", port["id"].as_str().unwrap()),
        Some(json!({"port": {"security_groups": [users]}})),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    (h, users)
}

fn web() -> Svc {
    svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
}

fn port_of(cloud: &MockOpenStack, ip: &str) -> Value {
    cloud
        .ports()
        .into_iter()
        .find(|p| p["fixed_ips"][0]["ip_address"] == ip)
        .unwrap_or_else(|| panic!("no port with {ip}"))
}

/// The groups on the port of `ip`.
fn groups_on(cloud: &MockOpenStack, ip: &str) -> Vec<String> {
    port_of(cloud, ip)["security_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect()
}

/// The Service's groups in the mock.
fn managed_groups(cloud: &MockOpenStack) -> Vec<Value> {
    cloud
        .security_groups()
        .into_iter()
        .filter(|g| g["name"] == GROUP)
        .collect()
}

/// The ingress rules of `group`: (protocol, port, ethertype, remote prefix or "").
fn ingress(group: &Value) -> Vec<(String, u64, String, String)> {
    let mut rules: Vec<_> = group["security_group_rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["direction"] == "ingress")
        .map(|r| {
            (
                r["protocol"].as_str().unwrap().to_string(),
                r["port_range_min"].as_u64().unwrap(),
                r["ethertype"].as_str().unwrap().to_string(),
                r["remote_ip_prefix"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect();
    rules.sort();
    rules
}

fn rule(protocol: &str, port: u64) -> (String, u64, String, String) {
    (protocol.into(), port, "IPv4".into(), "10.0.0.0/24".into())
}

#[tokio::test]
async fn the_group_follows_ports_and_nodes_and_goes_with_the_service() {
    let (h, users) = cloud_with_nodes(MANAGED).await;
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();

    let groups = managed_groups(&h.cloud);
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let group = &groups[0];
    let id = group["id"].as_str().unwrap().to_string();
    assert_eq!(
        group["description"],
        "Security Group for default/web Service LoadBalancer in cluster kubernetes"
    );
    assert_eq!(ingress(group), vec![rule("tcp", 30080), rule("udp", 30053)]);
    assert_eq!(
        groups_on(&h.cloud, "10.0.0.101"),
        vec![users.clone(), id.clone()],
        "the user's group is kept"
    );
    assert_eq!(groups_on(&h.cloud, "10.0.0.102"), vec![id.clone()]);
    assert!(
        groups_on(&h.cloud, "10.0.0.103").is_empty(),
        "not a backend"
    );

    // A no-op resync changes nothing.
    h.cloud.clear_journal();
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());

    // A node leaves, a port changes and Local adds the health-check node port; a rule
    // someone else added to the group stays.
    let token = token(&h.cloud).await;
    let (code, answer) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-group-rules",
        Some(
            json!({"security_group_rule": {"security_group_id": id, "direction": "ingress",
            "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 22, "port_range_max": 22}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let changed = svc("web", UID)
        .ports(&[("http", 80, "TCP", 30081)])
        .local(32000);
    h.provider.ensure(&changed.spec(), &nodes(1)).await.unwrap();
    let group = &managed_groups(&h.cloud)[0];
    let mut expected = vec![rule("tcp", 30081), rule("tcp", 32000)];
    expected.push(("tcp".into(), 22, "IPv4".into(), String::new()));
    expected.sort();
    assert_eq!(ingress(group), expected);
    assert_eq!(
        groups_on(&h.cloud, "10.0.0.101"),
        vec![users.clone(), id.clone()]
    );
    assert!(groups_on(&h.cloud, "10.0.0.102").is_empty(), "node-2 left");

    // The Service goes: the group is taken off every port and deleted.
    h.provider.delete(&web().spec().service).await.unwrap();
    assert!(managed_groups(&h.cloud).is_empty());
    assert_eq!(groups_on(&h.cloud, "10.0.0.101"), vec![users]);
    assert!(groups_on(&h.cloud, "10.0.0.102").is_empty());
    assert!(
        h.cloud
            .security_group_rules()
            .iter()
            .all(|r| r["security_group_id"] != json!(id)),
        "its rules went with it"
    );
}

#[tokio::test]
async fn plans_show_the_group_its_rules_and_attachments() {
    let (h, _) = cloud_with_nodes(MANAGED).await;
    let service = web().spec().service;
    h.provider.ensure(&web().spec(), &nodes(1)).await.unwrap();
    let planned = h
        .provider
        .plan_ensure(&web().spec(), &nodes(2))
        .await
        .unwrap();
    let ports: Vec<&str> = planned
        .iter()
        .filter(|c| c.kind == "Port" && c.action == ChangeAction::Modify)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(
        ports.len(),
        1,
        "node-2's port gains the group: {planned:#?}"
    );
    assert!(ports[0].ends_with("(10.0.0.102)"), "{ports:?}");

    let deleting = h.provider.plan_delete(&service).await.unwrap();
    let kinds: Vec<(ChangeAction, &str)> = deleting
        .iter()
        .map(|c| (c.action, c.kind.as_str()))
        .filter(|(_, kind)| *kind != "LoadBalancer" && *kind != "FloatingIp")
        .collect();
    assert_eq!(
        kinds,
        vec![
            (ChangeAction::Modify, "Port"),
            (ChangeAction::Delete, "SecurityGroup")
        ]
    );

    let owned = h.provider.owned_resources().await.unwrap();
    let group = owned
        .iter()
        .find(|r| r.kind == "SecurityGroup")
        .expect("the group is listed as owned");
    assert_eq!(group.name, GROUP);
    assert_eq!(group.service.uid, UID);
    assert_eq!(
        (
            group.service.namespace.as_str(),
            group.service.name.as_str()
        ),
        ("default", "web")
    );
}

#[tokio::test]
async fn a_lost_create_answer_or_a_crash_midway_leaves_one_group() {
    let (h, _) = cloud_with_nodes(MANAGED).await;
    // The group's create takes effect but its answer is lost; so is a rule's.
    h.cloud
        .inject(Fault::lose_response("POST", "/security-groups", 503, 1));
    h.cloud.inject(Fault::lose_response(
        "POST",
        "/security-group-rules",
        503,
        1,
    ));
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    let groups = managed_groups(&h.cloud);
    assert_eq!(groups.len(), 1, "{groups:#?}");
    assert_eq!(
        ingress(&groups[0]),
        vec![rule("tcp", 30080), rule("udp", 30053)]
    );

    // A crash after the group and its rules, before the ports: the restart finishes the job.
    h.provider.delete(&web().spec().service).await.unwrap();
    assert!(managed_groups(&h.cloud).is_empty());
    h.cloud.inject(Fault::respond(
        "PUT",
        "/ports/",
        500,
        "Request Failed: internal server error while processing your request.",
        10,
    ));
    assert!(h.provider.ensure(&web().spec(), &nodes(2)).await.is_err());
    h.cloud.clear_faults();
    assert_eq!(managed_groups(&h.cloud).len(), 1);
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    let groups = managed_groups(&h.cloud);
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let id = groups[0]["id"].as_str().unwrap().to_string();
    assert!(groups_on(&h.cloud, "10.0.0.102").contains(&id));
    h.cloud.clear_journal();
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
}

#[tokio::test]
async fn off_by_default_no_group_and_no_security_group_calls() {
    let (h, users) = cloud_with_nodes("").await;
    h.cloud.clear_journal();
    h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    assert!(managed_groups(&h.cloud).is_empty());
    assert_eq!(groups_on(&h.cloud, "10.0.0.101"), vec![users]);
    assert!(
        h.cloud
            .journal()
            .iter()
            .all(|e| !e.path.contains("security-group") && !e.path.contains("/ports")),
        "ensure reads no security group or port with the option off"
    );
}

#[tokio::test]
async fn a_group_made_with_the_option_on_goes_with_the_service_when_it_is_off() {
    // The group of a Service made with the option on is removed with the Service, whatever
    // the option says then (as upstream does).
    let (on, users) = cloud_with_nodes(MANAGED).await;
    on.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    assert_eq!(managed_groups(&on.cloud).len(), 1);
    let config =
        kube_lb_provider_openstack::CloudConfig::parse(&cloud_conf(&on.cloud, "")).unwrap();
    let off = provider_for(on.cloud, config);
    off.provider.delete(&web().spec().service).await.unwrap();
    assert!(managed_groups(&off.cloud).is_empty());
    assert_eq!(groups_on(&off.cloud, "10.0.0.101"), vec![users]);
    assert!(groups_on(&off.cloud, "10.0.0.102").is_empty());
}

#[tokio::test]
async fn turned_off_the_recorded_group_is_removed_and_then_nothing_is_looked_up() {
    let created_with = kube_lb_annotations::keys::openstack::CREATED_WITH;
    let (on, users) = cloud_with_nodes(MANAGED).await;
    let status = on.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    let recorded = status.annotations[created_with].clone();
    assert!(recorded.contains(GROUP), "{recorded}");
    assert_eq!(managed_groups(&on.cloud).len(), 1);

    // The same cloud, the option now off; the Service carries what the last ensure recorded.
    let config =
        kube_lb_provider_openstack::CloudConfig::parse(&cloud_conf(&on.cloud, "")).unwrap();
    let off = provider_for(on.cloud, config);
    let annotated = web().annotate(created_with, &recorded);
    let planned = off
        .provider
        .plan_ensure(&annotated.spec(), &nodes(2))
        .await
        .unwrap();
    assert!(
        planned
            .iter()
            .any(|c| c.kind == "SecurityGroup" && c.action == ChangeAction::Delete),
        "{planned:#?}"
    );
    let status = off
        .provider
        .ensure(&annotated.spec(), &nodes(2))
        .await
        .unwrap();
    assert!(managed_groups(&off.cloud).is_empty());
    assert_eq!(groups_on(&off.cloud, "10.0.0.101"), vec![users]);
    assert!(groups_on(&off.cloud, "10.0.0.102").is_empty());
    let recorded = status.annotations[created_with].clone();
    assert!(!recorded.contains("security_group"), "{recorded}");

    off.cloud.clear_journal();
    off.provider
        .ensure(&web().annotate(created_with, &recorded).spec(), &nodes(2))
        .await
        .unwrap();
    assert!(
        off.cloud
            .journal()
            .iter()
            .all(|e| !e.path.contains("security-group")),
        "no lookup once nothing is recorded"
    );
}

/// After a failure at `step` (every matching call refused until the faults are cleared), the
/// next attempt converges: one group with its rules on both members' ports, and after the
/// Service is deleted (failing at `step` first, when it is a teardown call) nothing of it is
/// left and every port keeps only the user's groups.
#[tokio::test]
async fn a_failure_at_any_step_then_a_retry_converges_without_duplicates_or_orphans() {
    let failing = |method: &str, path: &str| {
        Fault::respond(
            method,
            path,
            500,
            "Request Failed: internal server error while processing your request.",
            100,
        )
    };
    // (what fails, during ensure or during delete)
    let cases = [
        ("POST", "/security-groups", true),
        ("POST", "/security-group-rules", true),
        ("PUT", "/ports/", true),
        ("GET", "/ports", true),
        ("PUT", "/ports/", false),
        ("DELETE", "/security-groups/", false),
        ("GET", "/security-groups", false),
    ];
    for (method, path, during_ensure) in cases {
        let case = format!(
            "{method} {path} failing during {}",
            if during_ensure { "ensure" } else { "delete" }
        );
        let (h, users) = cloud_with_nodes(MANAGED).await;
        let service = web().spec().service;
        if during_ensure {
            h.cloud.inject(failing(method, path));
            assert!(
                h.provider.ensure(&web().spec(), &nodes(2)).await.is_err(),
                "{case}"
            );
            h.cloud.clear_faults();
        }
        h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
        let groups = managed_groups(&h.cloud);
        assert_eq!(groups.len(), 1, "{case}: {groups:#?}");
        assert_eq!(
            ingress(&groups[0]),
            vec![rule("tcp", 30080), rule("udp", 30053)],
            "{case}"
        );
        let id = groups[0]["id"].as_str().unwrap().to_string();
        assert_eq!(
            groups_on(&h.cloud, "10.0.0.101"),
            vec![users.clone(), id.clone()],
            "{case}"
        );
        assert_eq!(groups_on(&h.cloud, "10.0.0.102"), vec![id], "{case}");

        if !during_ensure {
            h.cloud.inject(failing(method, path));
            assert!(h.provider.delete(&service).await.is_err(), "{case}");
            h.cloud.clear_faults();
        }
        h.provider.delete(&service).await.unwrap();
        assert!(managed_groups(&h.cloud).is_empty(), "{case}");
        assert_eq!(groups_on(&h.cloud, "10.0.0.101"), vec![users], "{case}");
        assert!(groups_on(&h.cloud, "10.0.0.102").is_empty(), "{case}");
        assert!(groups_on(&h.cloud, "10.0.0.103").is_empty(), "{case}");
    }
}

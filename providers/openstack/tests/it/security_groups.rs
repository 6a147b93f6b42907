//! `manage-security-groups = true` against the mock: the Service's security group opens its
//! node ports to the member subnet on the nodes' member ports, follows node changes, costs no
//! mutating call on a no-op resync, is removed with the Service (every port keeping its other
//! groups), and a lost or interrupted create never leaves a second group.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use kube_lb_mock_openstack::{Fault, MockOpenStack};
use kube_lb_provider_core::{ChangeAction, LoadBalancerProvider, ProviderError};
use serde_json::{Value, json};
use support::*;

pub(crate) const UID: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
pub(crate) const GROUP: &str = "lb-sg-8ae4a1c2-6b2e-11e9-a923-1681be663d3e-default-web";
pub(crate) const MANAGED: &str = "manage-security-groups = true\n";

/// A mock whose three node VMs have their port on the private network, and a harness with
/// `extra` in `[LoadBalancer]`. The first node's port already carries a group of the user's.
pub(crate) async fn cloud_with_nodes(extra: &str) -> (Harness, String) {
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

pub(crate) fn web() -> Svc {
    svc("web", UID).ports(&[("http", 80, "TCP", 30080), ("dns", 53, "UDP", 30053)])
}

pub(crate) fn port_of(cloud: &MockOpenStack, ip: &str) -> Value {
    cloud
        .ports()
        .into_iter()
        .find(|p| p["fixed_ips"][0]["ip_address"] == ip)
        .unwrap_or_else(|| panic!("no port with {ip}"))
}

/// The groups on the port of `ip`.
pub(crate) fn groups_on(cloud: &MockOpenStack, ip: &str) -> Vec<String> {
    port_of(cloud, ip)["security_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_string())
        .collect()
}

/// The Service's groups in the mock.
pub(crate) fn managed_groups(cloud: &MockOpenStack) -> Vec<Value> {
    cloud
        .security_groups()
        .into_iter()
        .filter(|g| g["name"] == GROUP)
        .collect()
}

/// The ingress rules of `group`: (protocol, port, ethertype, remote prefix or "").
pub(crate) fn ingress(group: &Value) -> Vec<(String, u64, String, String)> {
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

pub(crate) fn rule(protocol: &str, port: u64) -> (String, u64, String, String) {
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

/// Makes a security group behind the provider's back (upstream, an operator, another
/// cluster) under `name` with `description` and `tags`, with an upstream-style rule (no
/// description) opening tcp/30080 to the private subnet, on the port of 10.0.0.101 next to
/// its other groups. Returns its id.
async fn group_out_of_band(h: &Harness, name: &str, description: &str, tags: Value) -> String {
    let token = token(&h.cloud).await;
    let (code, group) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-groups",
        Some(json!({"security_group": {"name": name, "description": description, "tags": tags}})),
    )
    .await;
    assert_eq!(code, 201, "{group}");
    let id = group["security_group"]["id"].as_str().unwrap().to_string();
    let (code, answer) = call(
        &h.cloud,
        &token,
        reqwest::Method::POST,
        "/networking/v2.0/security-group-rules",
        Some(
            json!({"security_group_rule": {"security_group_id": id, "direction": "ingress",
            "ethertype": "IPv4", "protocol": "tcp", "port_range_min": 30080,
            "port_range_max": 30080, "remote_ip_prefix": "10.0.0.0/24"}}),
        ),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let port = port_of(&h.cloud, "10.0.0.101");
    let mut groups = groups_on(&h.cloud, "10.0.0.101");
    groups.push(id.clone());
    let (code, answer) = call(
        &h.cloud,
        &token,
        reqwest::Method::PUT,
        &format!("/networking/v2.0/ports/{}", port["id"].as_str().unwrap()),
        Some(json!({"port": {"security_groups": groups}})),
    )
    .await;
    assert_eq!(code, 200, "{answer}");
    id
}

/// The load balancer as upstream (OCCM) built it for [`web`] on node-1 and node-2.
async fn occm_load_balancer(h: &Harness) {
    let mut occm = OccmService::new(
        "web",
        vec![
            ("node-1".into(), "10.0.0.101".into()),
            ("node-2".into(), "10.0.0.102".into()),
        ],
    );
    occm.ports = vec![("TCP".into(), 80, 30080), ("UDP".into(), 53, 30053)];
    build_occm_state(&h.cloud, CLUSTER, &occm).await;
}

#[tokio::test]
async fn a_group_made_out_of_band_with_our_name_and_marks_is_adopted_not_duplicated() {
    let upstream = "Security Group for default/web Service LoadBalancer in cluster kubernetes";
    // (case, tags): upstream tags none; kube-lb's UID tag is as good.
    let cases = [
        ("as upstream made it", json!([])),
        (
            "with this Service's UID tag",
            json!([format!("kube_lb_uid_{UID}")]),
        ),
    ];
    for (case, tags) in cases {
        let (h, users) = cloud_with_nodes(MANAGED).await;
        occm_load_balancer(&h).await;
        let id = group_out_of_band(&h, GROUP, upstream, tags).await;

        // A kube-lb with no record of it on the Service (none passed in) takes it over.
        let status = h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
        let groups = managed_groups(&h.cloud);
        assert_eq!(
            groups.len(),
            1,
            "{case}: adopted, not duplicated: {groups:#?}"
        );
        assert_eq!(groups[0]["id"], json!(id), "{case}");
        assert_eq!(
            ingress(&groups[0]),
            vec![rule("tcp", 30080), rule("udp", 30053)],
            "{case}: upstream's rule kept (as good as ours), the missing one added"
        );
        assert_eq!(
            groups_on(&h.cloud, "10.0.0.101"),
            vec![users.clone(), id.clone()],
            "{case}"
        );
        assert_eq!(
            groups_on(&h.cloud, "10.0.0.102"),
            vec![id.clone()],
            "{case}"
        );
        let recorded = &status.annotations[kube_lb_annotations::keys::openstack::CREATED_WITH];
        assert!(recorded.contains(GROUP), "{case}: recorded: {recorded}");

        h.cloud.clear_journal();
        h.provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
        assert_eq!(mutations(&h.cloud), Vec::<String>::new(), "{case}");

        // Adopted means ours: it goes with the Service.
        h.provider.delete(&web().spec().service).await.unwrap();
        assert!(managed_groups(&h.cloud).is_empty(), "{case}");
        assert_eq!(groups_on(&h.cloud, "10.0.0.101"), vec![users], "{case}");
    }
}

#[tokio::test]
async fn a_group_under_our_name_with_foreign_marks_is_refused_never_duplicated() {
    // (case, description, tags, what the refusal names as owner)
    let cases = [
        (
            "made by hand",
            "opened by the network team",
            json!([]),
            "network team",
        ),
        (
            "another cluster's (same Service UID and name)",
            "Security Group for default/web Service LoadBalancer in cluster other",
            json!([]),
            "cluster other",
        ),
        (
            "another Service UID's tag",
            "Security Group for default/web Service LoadBalancer in cluster kubernetes",
            json!(["kube_lb_uid_00000000-1111-2222-3333-444444444444"]),
            "00000000-1111-2222-3333-444444444444",
        ),
    ];
    for (case, description, tags, owner_named) in cases {
        let (h, users) = cloud_with_nodes(MANAGED).await;
        let id = group_out_of_band(&h, GROUP, description, tags).await;
        let before = managed_groups(&h.cloud);

        let error = h
            .provider
            .ensure(&web().spec(), &nodes(2))
            .await
            .unwrap_err();
        match &error {
            ProviderError::OwnedElsewhere {
                resource, owner, ..
            } => {
                assert!(
                    resource.contains(GROUP) && resource.contains(&id),
                    "{case}: {error}"
                );
                assert!(
                    owner.contains(owner_named),
                    "{case}: names the owner: {error}"
                );
            }
            other => panic!("{case}: want OwnedElsewhere, got {other:?}"),
        }
        assert_eq!(error.class(), "user", "{case}");
        assert_eq!(
            managed_groups(&h.cloud),
            before,
            "{case}: no second group, theirs untouched"
        );
        assert!(
            groups_on(&h.cloud, "10.0.0.102").is_empty(),
            "{case}: no port gets it"
        );
        let planned = h.provider.plan_ensure(&web().spec(), &nodes(2)).await;
        assert!(
            matches!(planned, Err(ProviderError::OwnedElsewhere { .. })),
            "{case}: the plan refuses too: {planned:?}"
        );

        // Deleting the Service leaves their group where it is.
        h.provider.delete(&web().spec().service).await.unwrap();
        assert_eq!(managed_groups(&h.cloud), before, "{case}");
        assert_eq!(groups_on(&h.cloud, "10.0.0.101"), vec![users, id], "{case}");
    }
}

#[tokio::test]
async fn a_load_balancer_adopted_by_id_records_the_group_so_turning_the_option_off_removes_it() {
    let created_with = kube_lb_annotations::keys::openstack::CREATED_WITH;
    let (on, users) = cloud_with_nodes(MANAGED).await;
    let shared = on
        .provider
        .client()
        .create_load_balancer(&json!({"name": "shared",
            "vip_subnet_id": kube_lb_mock_openstack::PRIVATE_SUBNET_ID}))
        .await
        .unwrap();
    let adopting = || web().annotate("loadbalancer.openstack.org/load-balancer-id", &shared.id);
    let status = on
        .provider
        .ensure(&adopting().spec(), &nodes(2))
        .await
        .unwrap();
    assert_eq!(
        status.annotations.get(created_with).map(String::as_str),
        Some(format!(r#"{{"security_group":"{GROUP}"}}"#).as_str()),
        "only the group: the load balancer's create-only fields are its owner's"
    );
    assert_eq!(managed_groups(&on.cloud).len(), 1);

    let config =
        kube_lb_provider_openstack::CloudConfig::parse(&cloud_conf(&on.cloud, "")).unwrap();
    let off = provider_for(on.cloud, config);
    let recorded = adopting().annotate(created_with, &status.annotations[created_with]);
    let status = off
        .provider
        .ensure(&recorded.spec(), &nodes(2))
        .await
        .unwrap();
    assert!(managed_groups(&off.cloud).is_empty());
    assert_eq!(groups_on(&off.cloud, "10.0.0.101"), vec![users]);
    assert_eq!(
        status.annotations.get(created_with).map(String::as_str),
        Some("{}"),
        "the record goes with the group"
    );
    assert_eq!(off.cloud.load_balancers().len(), 1, "theirs stays");
}

/// A Service deleted without its load balancer, then made again under the same name, with the
/// removal of the leftover cut short (its security group's delete refused once): the first
/// ensure fails with the leftover's load balancer still there (it goes last, being what finds
/// the leftover again), so the next one finds it and finishes the removal. Nothing of the
/// first Service stays: neither its load balancer, nor its floating IP, nor its group.
#[tokio::test]
async fn a_leftover_removal_cut_short_is_finished_by_the_next_ensure() {
    let (h, _users) = cloud_with_nodes(MANAGED).await;
    let Harness {
        cloud, provider, ..
    } = h;
    let provider = provider.with_cluster_id(Some(&"k1".parse().unwrap()));
    provider.ensure(&web().spec(), &nodes(2)).await.unwrap();
    let first_lb = lb_named(&cloud, "kube_service_kubernetes_default_web")["id"].clone();
    assert_eq!(managed_groups(&cloud).len(), 1);

    let again =
        svc("web", "22222222-3333-4444-5555-666666666666").ports(&[("http", 80, "TCP", 30081)]);
    cloud.inject(Fault::respond(
        "DELETE",
        "/security-groups/",
        403,
        "Policy does not allow this request to be performed.",
        1,
    ));
    let error = provider.ensure(&again.spec(), &nodes(2)).await.unwrap_err();
    assert!(
        !matches!(error, ProviderError::OwnedElsewhere { .. }),
        "{error}"
    );
    assert_eq!(
        lb_named(&cloud, "kube_service_kubernetes_default_web")["id"],
        first_lb,
        "the leftover's load balancer is still there to be found"
    );

    provider.ensure(&again.spec(), &nodes(2)).await.unwrap();
    let live: Vec<_> = cloud
        .load_balancers()
        .into_iter()
        .filter(|lb| lb["provisioning_status"] != "DELETED")
        .collect();
    assert_eq!(live.len(), 1, "{live:#?}");
    assert_ne!(live[0]["id"], first_lb);
    assert_eq!(cloud.floating_ips().len(), 1, "{:#?}", cloud.floating_ips());
    assert_eq!(cloud.floating_ips()[0]["port_id"], live[0]["vip_port_id"]);
    let groups: Vec<_> = cloud
        .security_groups()
        .into_iter()
        .filter(|g| g["name"].as_str().is_some_and(|n| n.starts_with("lb-sg-")))
        .collect();
    assert_eq!(groups.len(), 1, "only the new Service's group: {groups:#?}");
    assert!(
        groups[0]["name"]
            .as_str()
            .unwrap()
            .starts_with("lb-sg-22222222-"),
        "{groups:#?}"
    );
}

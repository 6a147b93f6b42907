//! The member subnet found from the nodes' Neutron ports when `cloud.conf` names only the VIP
//! network (no `subnet-id` or `member-subnet-id`), as upstream finds it: members go on it and
//! `manage-security-groups` opens the node ports to its CIDR on the nodes' ports there; when
//! nodes disagree the subnet of most nodes wins; when no node address is a port's, a clear
//! error with the option on, and members without a subnet (as before) with it off.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::security_groups::{GROUP, MANAGED, UID, groups_on, ingress, managed_groups, web};
use crate::support;

use kube_lb_mock_openstack::{MockOpenStack, PRIVATE_NETWORK_ID, PRIVATE_SUBNET_ID};
use kube_lb_provider_core::{BackendNode, EnvironmentCause, LoadBalancerProvider};
use kube_lb_provider_openstack::CloudConfig;
use serde_json::Value;
use support::*;

/// A second tenant network, where most nodes have their port.
pub(crate) const NODES_NETWORK: &str = "0e100000-0000-4000-8000-0000000000c1";
/// Its subnet.
pub(crate) const NODES_SUBNET: &str = "0e100000-0000-4000-8000-0000000000c2";
const NODES_CIDR: &str = "10.1.0.0/24";

/// `cloud.conf` naming the VIP network only, with `extra` in `[LoadBalancer]`.
pub(crate) fn network_only_conf(cloud: &MockOpenStack, extra: &str) -> String {
    let conf = cloud_conf(cloud, extra);
    let subnet_line = format!("subnet-id = {PRIVATE_SUBNET_ID}\n");
    assert!(conf.contains(&subnet_line), "{conf}");
    conf.replace(
        &subnet_line,
        &format!("network-id = {PRIVATE_NETWORK_ID}\n"),
    )
}

/// node-1 and node-2 on the nodes' network (node-1's providerID names its server), node-3 on
/// the VIP network: the nodes disagree, two to one.
pub(crate) fn split_nodes() -> Vec<BackendNode> {
    let mut nodes = vec![
        node("node-1", "10.1.0.11"),
        node("node-2", "10.1.0.12"),
        node("node-3", "10.0.0.13"),
    ];
    nodes[0].provider_id = Some("openstack:///server-1".into());
    nodes
}

/// A mock with the nodes' network and the ports of [`split_nodes`].
pub(crate) async fn split_cloud() -> MockOpenStack {
    MockOpenStack::builder()
        .network(NODES_NETWORK, "nodes", false, NODES_SUBNET, NODES_CIDR)
        .server_port(NODES_NETWORK, "server-1", "10.1.0.11")
        .server_port(NODES_NETWORK, "server-2", "10.1.0.12")
        .server_port(PRIVATE_NETWORK_ID, "server-3", "10.0.0.13")
        .start()
        .await
        .unwrap()
}

/// (member address, subnet_id) of every member of every pool, sorted.
fn member_subnets(cloud: &MockOpenStack) -> Vec<(String, Value)> {
    let mut members: Vec<(String, Value)> = cloud
        .pools()
        .iter()
        .flat_map(|pool| cloud.members(pool["id"].as_str().unwrap()))
        .map(|m| {
            (
                m["address"].as_str().unwrap().to_string(),
                m["subnet_id"].clone(),
            )
        })
        .collect();
    members.sort_by(|a, b| a.0.cmp(&b.0));
    members.dedup();
    members
}

#[tokio::test]
async fn the_subnet_of_most_nodes_carries_the_members_and_the_group() {
    let cloud = split_cloud().await;
    let config = CloudConfig::parse(&network_only_conf(&cloud, MANAGED)).unwrap();
    let h = provider_for(cloud, config);
    h.provider
        .ensure(&web().spec(), &split_nodes())
        .await
        .unwrap();

    let nodes_subnet = Value::from(NODES_SUBNET);
    assert_eq!(
        member_subnets(&h.cloud),
        vec![
            ("10.0.0.13".to_string(), nodes_subnet.clone()),
            ("10.1.0.11".to_string(), nodes_subnet.clone()),
            ("10.1.0.12".to_string(), nodes_subnet),
        ],
        "every member on the subnet of most nodes"
    );
    let groups = managed_groups(&h.cloud);
    assert_eq!(groups.len(), 1, "{groups:#?}");
    let id = groups[0]["id"].as_str().unwrap().to_string();
    let from_nodes = |protocol: &str, port| {
        (
            protocol.to_string(),
            port,
            "IPv4".to_string(),
            NODES_CIDR.to_string(),
        )
    };
    assert_eq!(
        ingress(&groups[0]),
        vec![from_nodes("tcp", 30080), from_nodes("udp", 30053)],
        "the node ports open to the found subnet's CIDR"
    );
    assert_eq!(groups_on(&h.cloud, "10.1.0.11"), vec![id.clone()]);
    assert_eq!(groups_on(&h.cloud, "10.1.0.12"), vec![id]);
    assert!(
        groups_on(&h.cloud, "10.0.0.13").is_empty(),
        "the minority node's port is on another subnet"
    );

    // The same nodes in another order find the same subnet: a resync changes nothing.
    h.cloud.clear_journal();
    let mut reordered = split_nodes();
    reordered.reverse();
    h.provider.ensure(&web().spec(), &reordered).await.unwrap();
    assert_eq!(mutations(&h.cloud), Vec::<String>::new());
    let planned = h
        .provider
        .plan_ensure(&web().spec(), &reordered)
        .await
        .unwrap();
    assert!(planned.is_empty(), "{planned:#?}");

    h.provider.delete(&web().spec().service).await.unwrap();
    assert!(managed_groups(&h.cloud).is_empty());
    assert!(groups_on(&h.cloud, "10.1.0.11").is_empty());
}

#[tokio::test]
async fn without_the_option_members_still_go_on_the_found_subnet_at_no_group_cost() {
    let cloud = split_cloud().await;
    let config = CloudConfig::parse(&network_only_conf(&cloud, "")).unwrap();
    let h = provider_for(cloud, config);
    h.provider
        .ensure(&web().spec(), &split_nodes())
        .await
        .unwrap();
    assert!(
        member_subnets(&h.cloud)
            .iter()
            .all(|(_, subnet)| subnet == NODES_SUBNET),
        "{:?}",
        member_subnets(&h.cloud)
    );
    assert!(h.cloud.security_groups().iter().all(|g| g["name"] != GROUP));
    assert!(
        h.cloud
            .journal()
            .iter()
            .all(|e| !e.path.contains("security-group")),
        "no security-group call with the option off"
    );
}

#[tokio::test]
async fn no_node_address_on_a_port_is_a_clear_environment_error_with_the_option_on() {
    // The nodes' addresses are no port's (the mock seeds none for them).
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let config = CloudConfig::parse(&network_only_conf(&cloud, MANAGED)).unwrap();
    let h = provider_for(cloud, config);
    let error = h
        .provider
        .ensure(&web().spec(), &nodes(2))
        .await
        .unwrap_err();
    assert_eq!(
        error.environment_cause(),
        Some(EnvironmentCause::MissingDependency),
        "{error:?}"
    );
    let text = error.to_string();
    for needed in ["10.0.0.101", "10.0.0.102", "member-subnet-id"] {
        assert!(text.contains(needed), "names {needed}: {text}");
    }
    assert_eq!(
        mutations(&h.cloud),
        Vec::<String>::new(),
        "refused before anything is created"
    );
    let planned = h.provider.plan_ensure(&web().spec(), &nodes(2)).await;
    assert!(planned.is_err(), "the plan says the same: {planned:?}");

    // With the option off the same Service is served, its members without a subnet.
    let config = CloudConfig::parse(&network_only_conf(&h.cloud, "")).unwrap();
    let off = provider_for(h.cloud, config);
    off.provider
        .ensure(&svc("web", UID).spec(), &nodes(2))
        .await
        .unwrap();
    let members = member_subnets(&off.cloud);
    assert_eq!(members.len(), 2, "{members:?}");
    assert!(
        members.iter().all(|(_, subnet)| subnet.is_null()),
        "{members:?}"
    );
}

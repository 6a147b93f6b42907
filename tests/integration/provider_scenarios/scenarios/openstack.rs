//! OpenStack: the in-process Keystone + Octavia + Neutron mock with its public and private
//! networks, an external Service (floating IP) by default. Set up through the provider's own
//! test support module, compiled here from its one place, so the provider tests and this table
//! cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};
use kube_lb_provider_openstack::ProviderOptions;

use super::Harness;

/// `providers/openstack/tests/it/support`: the mock, the provider pointed at it, node and
/// Service builders, and the hand-built state of cloud-provider-openstack.
#[path = "../../../../providers/openstack/tests/it/support/mod.rs"]
pub mod support;

/// The load balancer of the scenario Service `default/web` in cluster `kubernetes`.
const LB_NAME: &str = "kube_service_kubernetes_default_web";

/// The mock plus an OpenStack provider pointed at it.
pub struct OpenStack {
    h: support::Harness,
    node_count: usize,
}

impl OpenStack {
    /// The id of the scenario Service's load balancer, while it exists.
    fn lb_id(&self) -> Option<String> {
        self.h
            .cloud
            .load_balancers()
            .into_iter()
            .find(|lb| lb["name"] == LB_NAME)
            .and_then(|lb| lb["id"].as_str().map(str::to_string))
    }
}

fn node(index: usize) -> BackendNode {
    support::node(&format!("node-{index}"), &format!("10.0.0.{}", 100 + index))
}

impl Harness for OpenStack {
    const CLOUD: Cloud = Cloud::Openstack;

    harness_through_provider_support!();

    fn nodes(&self) -> Vec<BackendNode> {
        (1..=2).map(node).collect()
    }

    async fn add_node(&mut self) -> BackendNode {
        // Members are addresses on the member subnet: a node exists for Octavia as soon as it
        // has one, so there is nothing to create in the mock.
        self.node_count += 1;
        node(self.node_count)
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        // One batch member update per pool, nothing else.
        &["octavia:BatchUpdateMembers"]
    }

    async fn owned(&self) -> Vec<String> {
        let cloud = &self.h.cloud;
        let named = |kind: &str, items: Vec<serde_json::Value>, key: &str| -> Vec<String> {
            items
                .iter()
                .map(|item| format!("{kind} {}", item[key].as_str().unwrap_or_default()))
                .collect()
        };
        let mut owned = named("loadbalancer", cloud.load_balancers(), "name");
        owned.extend(named("listener", cloud.listeners(), "name"));
        owned.extend(named("pool", cloud.pools(), "name"));
        owned.extend(named("healthmonitor", cloud.health_monitors(), "name"));
        owned.extend(named(
            "floatingip",
            cloud.floating_ips(),
            "floating_ip_address",
        ));
        owned.extend(named("security_group", cloud.security_groups(), "name"));
        // The mock starts with no ports: every port is a VIP port or one a client made.
        owned.extend(named("port", cloud.ports(), "name"));
        owned
    }

    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String> {
        self.h
            .cloud
            .journal()
            .iter()
            .skip(mark)
            .filter(|e| e.is_mutation())
            .map(|e| format!("{} {} {}", e.method, e.path, e.status))
            .collect()
    }

    async fn remove_load_balancer_out_of_band(&self) {
        support::remove_out_of_band(&self.h.cloud, LB_NAME).await;
    }

    async fn ports_open(&self) -> BTreeSet<u16> {
        let cloud = &self.h.cloud;
        let Some(lb_id) = self.lb_id() else {
            return BTreeSet::new();
        };
        support::listeners_of(cloud, &lb_id)
            .iter()
            .map(|l| u16::try_from(l["protocol_port"].as_u64().unwrap()).unwrap())
            .collect()
    }

    async fn close_port_out_of_band(&self, port: u16) {
        let cloud = &self.h.cloud;
        let lb_id = self.lb_id().unwrap();
        let listener = support::listeners_of(cloud, &lb_id)
            .into_iter()
            .find(|l| l["protocol_port"] == port)
            .unwrap();
        let token = support::token(cloud).await;
        let (status, body) = support::call(
            cloud,
            &token,
            reqwest::Method::DELETE,
            &format!(
                "/load-balancer/v2/lbaas/listeners/{}",
                listener["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
        assert_eq!(status, 204, "out-of-band listener delete: {body}");
        support::settle(cloud, &token, &lb_id).await;
    }

    async fn backends(&self) -> BTreeSet<String> {
        let cloud = &self.h.cloud;
        let Some(lb_id) = self.lb_id() else {
            return BTreeSet::new();
        };
        cloud
            .pools()
            .iter()
            .filter(|pool| pool["loadbalancers"][0]["id"] == lb_id.as_str())
            .flat_map(|pool| {
                let pool_id = pool["id"].as_str().unwrap().to_string();
                // By address: a member registered again gets a new id.
                cloud
                    .members(&pool_id)
                    .into_iter()
                    .map(move |member| format!("{pool_id}/{}", member["address"].as_str().unwrap()))
            })
            .collect()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        let cloud = &self.h.cloud;
        let (pool_id, address) = backend.split_once('/').unwrap();
        let member = cloud
            .members(pool_id)
            .into_iter()
            .find(|m| m["address"] == address)
            .unwrap();
        let member_id = member["id"].as_str().unwrap();
        let lb_id = self.lb_id().unwrap();
        let token = support::token(cloud).await;
        let (status, body) = support::call(
            cloud,
            &token,
            reqwest::Method::DELETE,
            &format!("/load-balancer/v2/lbaas/pools/{pool_id}/members/{member_id}"),
            None,
        )
        .await;
        assert_eq!(status, 204, "out-of-band member delete: {body}");
        support::settle(cloud, &token, &lb_id).await;
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        // The scenario's Service is the only one: every Octavia load balancer is its.
        self.h.cloud.load_balancers().len()
    }
}

//! Tencent Cloud: the CLB mock (TC3 signatures checked, every write an async task), a public
//! CLB by default. Set up through the provider's own test support module, compiled here from
//! its one place, so the provider tests and this table cannot drift apart.

use std::collections::BTreeSet;
use std::time::Duration;

use kube_lb_annotations::Cloud;
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};
use kube_lb_provider_tencent::ProviderOptions;

use super::{Harness, UID};

/// `providers/tencent/tests/it/support`: the mock, the provider pointed at it, node and Service
/// builders, and the hand-built state of TKE's own service controller.
#[path = "../../../../providers/tencent/tests/it/support/mod.rs"]
pub mod support;

/// The mock plus a Tencent provider pointed at it.
pub struct Tencent {
    h: support::Harness,
    node_count: usize,
}

impl Tencent {
    /// The id of the CLB tagged for the scenario Service, if one exists.
    fn load_balancer_id(&self) -> Option<String> {
        support::clbs_for(&self.h.cloud, UID)
            .first()
            .and_then(|lb| lb["LoadBalancerId"].as_str().map(str::to_string))
    }
}

impl Harness for Tencent {
    const CLOUD: Cloud = Cloud::Tencent;

    harness_through_provider_support!();

    fn nodes(&self) -> Vec<BackendNode> {
        support::nodes(2)
    }

    async fn add_node(&mut self) -> BackendNode {
        // Targets are bound by address (EniIp): a node exists for the CLB as soon as it has an
        // InternalIP, so there is nothing to create in the mock.
        self.node_count += 1;
        support::nodes(self.node_count)
            .pop()
            .unwrap_or_else(|| unreachable!("nodes(n) has n nodes"))
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        // One batch bind across the CLB's listeners, nothing else.
        &["BatchRegisterTargets"]
    }

    async fn owned(&self) -> Vec<String> {
        let cloud = &self.h.cloud;
        let mut owned = Vec::new();
        for lb in support::clbs_for(cloud, UID) {
            let id = lb["LoadBalancerId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            for listener in cloud.listeners(&id) {
                owned.push(format!(
                    "listener {id}/{}:{}",
                    listener["Protocol"].as_str().unwrap_or_default(),
                    listener["Port"]
                ));
            }
            owned.push(format!("clb {id}"));
        }
        // The security groups of loadBalancerSourceRanges go with the CLB.
        owned.extend(cloud.security_groups().iter().map(|g| {
            format!(
                "security group {}",
                g["SecurityGroupId"].as_str().unwrap_or_default()
            )
        }));
        owned
    }

    fn mutations_seen_by_cloud_since(&self, mark: usize) -> Vec<String> {
        self.h
            .cloud
            .journal()
            .iter()
            .skip(mark)
            .filter(|e| e.is_mutation())
            .map(|e| format!("{} {:?}", e.action, e.error))
            .collect()
    }

    async fn remove_load_balancer_out_of_band(&self) {
        let id = self
            .load_balancer_id()
            .unwrap_or_else(|| panic!("no CLB for the scenario Service"));
        support::remove_out_of_band(&self.h.cloud, &id).await;
    }

    async fn ports_open(&self) -> BTreeSet<u16> {
        let Some(id) = self.load_balancer_id() else {
            return BTreeSet::new();
        };
        self.h
            .cloud
            .listeners(&id)
            .iter()
            .map(|l| u16::try_from(l["Port"].as_u64().unwrap()).unwrap())
            .collect()
    }

    async fn close_port_out_of_band(&self, port: u16) {
        let id = self
            .load_balancer_id()
            .unwrap_or_else(|| panic!("no CLB for the scenario Service"));
        support::delete_listener_out_of_band(&self.h.cloud, &id, port).await;
    }

    async fn backends(&self) -> BTreeSet<String> {
        self.load_balancer_id()
            .map(|id| {
                support::targets_of(&self.h.cloud, &id)
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        let id = self
            .load_balancer_id()
            .unwrap_or_else(|| panic!("no CLB for the scenario Service"));
        support::unbind_target_out_of_band(&self.h.cloud, &id, backend).await;
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        // Every CLB in the mock, not only those tagged for the Service: a create whose answer
        // never came could leave one the tags do not name.
        self.h.cloud.load_balancers().len()
    }
}

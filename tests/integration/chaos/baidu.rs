//! Baidu Cloud on the BLB + EIP mock: the controller reaches both APIs (one endpoint in the
//! mock) through the fault proxy, which keeps the `Host` the client signed (`bce-auth-v1` signs
//! it, and the mock verifies every signature as BCE does). BLBs are `creating`, `updating` and
//! EIPs `creating` for a moment, as on the real cloud, so the busy paths are exercised too.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_mock_baidu::{ACCESS_KEY_ID, MockBaidu, SECRET_ACCESS_KEY, SUBNET_ID, VPC_ID};
use kube_lb_provider_core::naming::load_balancer_name;
use serde_json::{Value, json};

use super::{
    ChaosCloud, Dialect, FaultProxy, Inventory, TagFields, ready_node, write_cloud_config,
};

/// The marks kube-lb writes: the Service UID in a BLB's description, and on an EIP's tags.
const UID_MARK: &str = "kube-lb:";
const UID_TAG: &str = "kube-lb/service-uid";

/// How the EIP API spells an EIP's tags.
const EIP_TAGS: TagFields = TagFields {
    list: "tags",
    key: "tagKey",
    value: "tagValue",
};

/// Baidu: the signing BLB + EIP mock; nodes are two BCC instances.
pub struct Baidu {
    mock: MockBaidu,
}

impl Baidu {
    /// Starts the mock with short asynchronous states (a BLB `creating` then `updating` after
    /// each change, an EIP `creating`), so a change can meet a busy BLB as it would on BCE.
    pub async fn start() -> Self {
        let mock = MockBaidu::builder()
            .create_delay(Duration::from_millis(800))
            .update_delay(Duration::from_millis(150))
            .eip_delay(Duration::from_millis(300))
            .start()
            .await
            .unwrap();
        Self { mock }
    }
}

/// The Service UID a BLB description records.
fn uid_of_desc(desc: &str) -> Option<&str> {
    desc.split_whitespace()
        .find_map(|word| word.strip_prefix(UID_MARK))
}

#[async_trait]
impl ChaosCloud for Baidu {
    fn name(&self) -> &'static str {
        "baidu"
    }

    fn controller(
        &self,
        dir: &Path,
        proxy: Option<&FaultProxy>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let endpoint = proxy
            .map(FaultProxy::url)
            .unwrap_or_else(|| self.mock.endpoint());
        // The JSON cloud-config of cloud-provider-baiducloud, both APIs through the proxy; no
        // ClusterID, so BLBs are named after --cluster-name.
        let config = json!({
            "AccessKeyID": ACCESS_KEY_ID,
            "SecretAccessKey": SECRET_ACCESS_KEY,
            "Region": "bj",
            "VpcID": VPC_ID,
            "SubnetID": SUBNET_ID,
            "Endpoint": endpoint,
            "EIPEndpoint": endpoint,
        });
        (
            write_cloud_config(dir, "baidu-cloud-config.json", &config.to_string()),
            Vec::new(),
        )
    }

    fn upstream(&self) -> Option<(String, Dialect)> {
        Some((self.mock.endpoint(), Dialect::Baidu))
    }

    fn nodes(&self) -> Vec<Value> {
        (1..=2)
            .map(|i| {
                ready_node(
                    &format!("node-{i}"),
                    &format!("192.168.0.{}", 100 + i),
                    Some(&format!("cce://i-node{i:04}")),
                    None,
                )
            })
            .collect()
    }

    async fn inventory(&self) -> Result<Inventory, String> {
        let mut inventory = Inventory::default();
        for blb in self.mock.blbs() {
            let id = blb["blbId"].as_str().unwrap_or_default().to_string();
            let desc = blb["desc"].as_str().unwrap_or_default();
            // Everything under a BLB is named after the Service its description records, so
            // the finalizer check sees listeners and backends as well as the BLB.
            let owner = match uid_of_desc(desc) {
                Some(uid) => {
                    let lb = load_balancer_name(uid);
                    inventory
                        .load_balancers
                        .push((lb.clone(), format!("blb/{id}")));
                    lb
                }
                None => {
                    inventory.others.push(format!(
                        "blb/{id} ({})",
                        blb["name"].as_str().unwrap_or_default()
                    ));
                    id.clone()
                }
            };
            for listener in self.mock.listeners(&id) {
                inventory.others.push(format!(
                    "listener/{owner}/{id}:{}",
                    listener["listenerPort"]
                ));
            }
            for backend in self.mock.backends(&id) {
                inventory
                    .others
                    .push(format!("backend/{owner}/{id}/{backend}"));
            }
        }
        // Every EIP of the account is one kube-lb made (the test seeds none).
        for eip in self.mock.eips() {
            let owner = EIP_TAGS
                .value_of(&eip, UID_TAG)
                .map_or_else(|| "untagged".to_string(), load_balancer_name);
            inventory.others.push(format!(
                "eip/{owner}/{}",
                eip["eip"].as_str().unwrap_or_default()
            ));
        }
        Ok(inventory)
    }

    fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
        Some((
            "service.beta.kubernetes.io/cce-load-balancer-internal-vpc",
            "true",
        ))
    }

    fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
        // Applies to the next EIP created for the Service (BCE resizes only on request).
        Some((
            "service.beta.kubernetes.io/cce-elastic-ip-bandwidth-in-mbps",
            &["10", "50", "100"],
        ))
    }
}

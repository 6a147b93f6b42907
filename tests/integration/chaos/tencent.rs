//! Tencent Cloud for the chaos suite: the CLB mock (TC3 signatures checked, every write an
//! async task that keeps the CLB busy for a while), the controller pointed at the fault proxy
//! through its JSON cloud-config. The inventory reads the mock's state directly.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use kube_lb_mock_tencent::{MockTencent, REGION, SECRET_ID, SECRET_KEY, SUBNET_ID, VPC_ID};
use kube_lb_provider_core::naming::load_balancer_name;
use serde_json::{Value, json};

use super::{
    ChaosCloud, Dialect, FaultProxy, Inventory, TagFields, ready_node, write_cloud_config,
};

/// The cluster name the suite passes (`--cluster-name chaos`): the `tke-clusterId` tag.
const CLUSTER: &str = "chaos";

/// How long each CLB task runs in the mock. Real tasks take seconds; a few hundred
/// milliseconds keep a CLB busy long enough that a write repeated after a lost answer meets
/// `FailedOperation.ResourceInOperating`, without stretching the suite's bounds.
const TASK_DELAY: Duration = Duration::from_millis(300);

/// The cluster's nodes: `(name, InternalIP, CVM instance)`. TKE nodes carry
/// `qcloud:///<zone>/<instance>` provider IDs, so targets are bound by instance.
const NODES: [(&str, &str, &str); 2] = [
    ("node-0", "10.0.1.20", "ins-chaos000"),
    ("node-1", "10.0.1.21", "ins-chaos001"),
];

/// Tencent: the CLB mock.
pub struct Tencent {
    cloud: MockTencent,
}

impl Tencent {
    /// Starts the mock.
    pub async fn start() -> Self {
        let cloud = MockTencent::builder()
            .task_delay(TASK_DELAY)
            .start()
            .await
            .unwrap();
        Self { cloud }
    }
}

/// How the CLB API spells a load balancer's tags.
const CLB_TAGS: TagFields = TagFields {
    list: "Tags",
    key: "TagKey",
    value: "TagValue",
};

#[async_trait]
impl ChaosCloud for Tencent {
    fn name(&self) -> &'static str {
        "tencent"
    }

    fn controller(
        &self,
        dir: &Path,
        proxy: Option<&FaultProxy>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let endpoint = proxy
            .map(FaultProxy::url)
            .unwrap_or_else(|| self.cloud.url());
        let config = json!({
            "secretId": SECRET_ID, "secretKey": SECRET_KEY, "region": REGION,
            "vpcId": VPC_ID, "endpoint": endpoint,
        });
        let args = write_cloud_config(dir, "tencent.json", &config.to_string());
        // Credentials in the environment win over the file: name the mock's, so a developer's
        // own TENCENTCLOUD_* variables never reach it.
        let env = [
            ("TENCENTCLOUD_SECRET_ID", SECRET_ID),
            ("TENCENTCLOUD_SECRET_KEY", SECRET_KEY),
            ("TENCENTCLOUD_SESSION_TOKEN", ""),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        (args, env)
    }

    fn upstream(&self) -> Option<(String, Dialect)> {
        Some((self.cloud.url(), Dialect::Tencent))
    }

    fn nodes(&self) -> Vec<Value> {
        NODES
            .iter()
            .map(|(name, ip, instance)| {
                ready_node(
                    name,
                    ip,
                    Some(&format!("qcloud:///800002/{instance}")),
                    None,
                )
            })
            .collect()
    }

    async fn inventory(&self) -> Result<Inventory, String> {
        let mut inventory = Inventory::default();
        for lb in self.cloud.load_balancers() {
            let id = lb["LoadBalancerId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let kind = lb["LoadBalancerType"].as_str().unwrap_or_default();
            // Every CLB in this mock is one kube-lb made; one without the ownership tags of a
            // Service is reported as a leak of its own.
            let tag = |key| CLB_TAGS.value_of(&lb, key);
            let uid = (tag("tke-createdBy-flag") == Some("yes")
                && tag("tke-clusterId") == Some(CLUSTER))
            .then(|| tag("tke-lb-serviceuuid"))
            .flatten();
            let Some(uid) = uid else {
                inventory.others.push(format!("clb/{id}"));
                continue;
            };
            let name = load_balancer_name(uid);
            for listener in self.cloud.listeners(&id) {
                inventory.others.push(format!(
                    "listener/{name}/{id}/{}:{}",
                    listener["Protocol"].as_str().unwrap_or_default(),
                    listener["Port"]
                ));
            }
            inventory
                .load_balancers
                .push((name, format!("{kind}/{id}")));
        }
        Ok(inventory)
    }

    fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
        // Create-time only on Tencent (as TKE): it picks INTERNAL over OPEN for a new CLB.
        Some((
            "service.kubernetes.io/qcloud-loadbalancer-internal-subnetid",
            SUBNET_ID,
        ))
    }

    fn kind_fixed_at_creation(&self) -> bool {
        true
    }

    fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
        // Every value selects at least one node, so the CLB always has a target; switching
        // between them binds and unbinds targets under faults.
        Some((
            "service.kubernetes.io/qcloud-loadbalancer-backends-label",
            &[
                "kubernetes.io/hostname",
                "kubernetes.io/hostname=node-0",
                "kubernetes.io/hostname in (node-0, node-1)",
                "kubernetes.io/hostname notin (node-0)",
            ],
        ))
    }
}

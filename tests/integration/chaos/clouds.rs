//! The clouds the chaos suite runs against: `local`, AWS on moto, GCP on the GCE mock, Azure on
//! the ARM mock. Each says how the controller reaches it (through the fault proxy) and reads
//! back, directly, what kube-lb created.

use std::path::Path;

use async_trait::async_trait;
use serde_json::Value;

#[cfg(any(feature = "gcp", feature = "azure"))]
use super::cloud_config_args;
use super::{ChaosCloud, Dialect, FaultProxy, Inventory, ready_node};

/// The embedded default: nothing in a cloud, addresses from the pool.
pub struct Local;

#[async_trait]
impl ChaosCloud for Local {
    fn name(&self) -> &'static str {
        "local"
    }
    fn controller(
        &self,
        _dir: &Path,
        _proxy: Option<&FaultProxy>,
    ) -> (Vec<String>, Vec<(String, String)>) {
        (Vec::new(), Vec::new())
    }
    fn upstream(&self) -> Option<(String, Dialect)> {
        None
    }
    fn nodes(&self) -> Vec<Value> {
        vec![ready_node("n1", "10.0.0.1", None, None)]
    }
    async fn inventory(&self) -> Result<Inventory, String> {
        Ok(Inventory::default())
    }
    fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
        None
    }
    fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
        None
    }
}

#[cfg(any(feature = "gcp", feature = "azure"))]
/// Whether `name` is a deterministic load-balancer name (`a` + 31 hex characters of a UID).
fn lb_prefix(name: &str) -> Option<String> {
    let head: String = name.chars().take(32).collect();
    (head.len() == 32
        && head.starts_with('a')
        && head[1..]
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c.is_ascii_lowercase()))
    .then_some(head)
}

#[cfg(feature = "aws")]
pub use aws::Aws;

#[cfg(feature = "aws")]
mod aws {
    use super::*;
    use kube_lb_mock_aws::{ClusterNetwork, MotoServer, xml_values};

    /// AWS: moto's server, a two-instance cluster network.
    pub struct Aws {
        moto: MotoServer,
        network: ClusterNetwork,
    }

    impl Aws {
        /// Starts moto and lays out the cluster's VPC for cluster `chaos`.
        pub async fn start() -> Self {
            let moto = crate::cloud_fixtures::moto().await;
            let network = moto.cluster_network("chaos", 2).await.unwrap();
            Self { moto, network }
        }

        async fn query(&self, scope: &str, body: &str) -> Result<String, String> {
            let text = reqwest::Client::new()
                .post(self.moto.endpoint())
                .header("content-type", "application/x-www-form-urlencoded")
                .header(
                    "authorization",
                    format!(
                        "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{scope}/\
                         aws4_request, SignedHeaders=host, Signature=0"
                    ),
                )
                .body(body.to_string())
                .send()
                .await
                .map_err(|e| e.to_string())?
                .text()
                .await
                .map_err(|e| e.to_string())?;
            if text.contains("<Error>") {
                return Err(text);
            }
            Ok(text)
        }
    }

    /// The ingress rules of a DescribeSecurityGroups answer for one group, as inventory entries:
    /// `noderule/<description>` and `noderule/from/<source group>`.
    fn node_rules(answer: &str) -> Vec<String> {
        let Some(start) = answer.find("<ipPermissions>") else {
            return Vec::new();
        };
        let section = &answer[start..];
        let section = &section[..section.find("</ipPermissions>").unwrap_or(section.len())];
        xml_values(section, "description")
            .into_iter()
            .map(|description| format!("noderule/{description}"))
            .chain(
                xml_values(section, "groupId")
                    .into_iter()
                    .map(|group| format!("noderule/from/{group}")),
            )
            .collect()
    }

    #[async_trait]
    impl ChaosCloud for Aws {
        fn name(&self) -> &'static str {
            "aws"
        }
        fn controller(
            &self,
            _dir: &Path,
            proxy: Option<&FaultProxy>,
        ) -> (Vec<String>, Vec<(String, String)>) {
            let endpoint = proxy
                .map(FaultProxy::url)
                .unwrap_or_else(|| self.moto.endpoint());
            let env = crate::cloud_fixtures::aws_env(&endpoint);
            (Vec::new(), env)
        }
        fn upstream(&self) -> Option<(String, Dialect)> {
            Some((self.moto.endpoint(), Dialect::Aws))
        }
        fn nodes(&self) -> Vec<Value> {
            self.network
                .instances
                .iter()
                .enumerate()
                .map(|(i, instance)| {
                    ready_node(
                        &format!("node-{i}"),
                        &format!("10.0.1.{}", 10 + i),
                        Some(&format!("aws:///us-east-1a/{instance}")),
                        None,
                    )
                })
                .collect()
        }
        async fn inventory(&self) -> Result<Inventory, String> {
            let mut inventory = Inventory::default();
            let clbs = self
                .query(
                    "elasticloadbalancing",
                    "Action=DescribeLoadBalancers&Version=2012-06-01",
                )
                .await?;
            for name in xml_values(&clbs, "LoadBalancerName") {
                inventory.load_balancers.push((name, "clb".into()));
            }
            let nlbs = self
                .query(
                    "elasticloadbalancing",
                    "Action=DescribeLoadBalancers&Version=2015-12-01",
                )
                .await?;
            for name in xml_values(&nlbs, "LoadBalancerName") {
                inventory.load_balancers.push((name, "nlb".into()));
            }
            let groups = self
                .query(
                    "elasticloadbalancing",
                    "Action=DescribeTargetGroups&Version=2015-12-01",
                )
                .await?;
            for name in xml_values(&groups, "TargetGroupName") {
                inventory.others.push(format!("targetgroup/{name}"));
            }
            let sgs = self
                .moto
                .ec2(
                    "DescribeSecurityGroups",
                    &[
                        ("Filter.1.Name", "group-name"),
                        ("Filter.1.Value.1", "k8s-*"),
                    ],
                )
                .await
                .map_err(|e| e.to_string())?;
            for id in xml_values(&sgs, "groupId") {
                if id != self.network.node_security_group {
                    inventory.others.push(format!("securitygroup/{id}"));
                }
            }
            // The node group starts with no ingress rule: every rule in it is one kube-lb
            // added (NLB rules carry the load balancer's name in their description, Classic
            // ELB rules admit the ELB's own group).
            let node_group = self
                .moto
                .ec2(
                    "DescribeSecurityGroups",
                    &[("GroupId.1", &self.network.node_security_group)],
                )
                .await
                .map_err(|e| e.to_string())?;
            inventory.others.extend(node_rules(&node_group));
            Ok(inventory)
        }
        fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
            Some(("service.beta.kubernetes.io/aws-load-balancer-type", "nlb"))
        }
        fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
            Some((
                "service.beta.kubernetes.io/aws-load-balancer-healthcheck-interval",
                &["10", "20", "30"],
            ))
        }
    }
}

#[cfg(feature = "gcp")]
pub use gcp::Gcp;

#[cfg(feature = "gcp")]
mod gcp {
    use super::*;
    // Everything the GCP provider may create.
    use crate::provider_scenarios::scenarios::gcp::support::OWNED_COLLECTIONS;
    use kube_lb_mock_gce::MockGce;

    /// GCP: the GCE mock with two instances in two zones.
    pub struct Gcp {
        mock: MockGce,
    }

    impl Gcp {
        /// Starts the mock.
        pub async fn start() -> Self {
            let mock = crate::cloud_fixtures::gce().await;
            Self { mock }
        }
    }

    #[async_trait]
    impl ChaosCloud for Gcp {
        fn name(&self) -> &'static str {
            "gcp"
        }
        fn controller(
            &self,
            dir: &Path,
            proxy: Option<&FaultProxy>,
        ) -> (Vec<String>, Vec<(String, String)>) {
            let endpoint = proxy
                .map(FaultProxy::url)
                .unwrap_or_else(|| self.mock.url().to_string());
            let path = crate::cloud_fixtures::write_gce_conf(dir, self.mock.project(), &endpoint);
            (cloud_config_args(&path), Vec::new())
        }
        fn upstream(&self) -> Option<(String, Dialect)> {
            Some((self.mock.url().to_string(), Dialect::Gcp))
        }
        fn nodes(&self) -> Vec<Value> {
            [
                ("gke-c1-node-1", "us-central1-a", "10.128.0.2"),
                ("gke-c1-node-2", "us-central1-b", "10.128.0.3"),
            ]
            .into_iter()
            .map(|(name, zone, ip)| {
                ready_node(
                    name,
                    ip,
                    Some(&format!("gce://{}/{zone}/{name}", self.mock.project())),
                    Some(zone),
                )
            })
            .collect()
        }
        async fn inventory(&self) -> Result<Inventory, String> {
            let mut inventory = Inventory::default();
            for collection in OWNED_COLLECTIONS {
                for name in self.mock.names(collection) {
                    if collection == "forwardingRules"
                        && let Some(lb) = lb_prefix(&name)
                    {
                        inventory.load_balancers.push((lb, "forwardingRule".into()));
                    } else {
                        inventory.others.push(format!("{collection}/{name}"));
                    }
                }
            }
            Ok(inventory)
        }
        fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
            Some(("networking.gke.io/load-balancer-type", "Internal"))
        }
        fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
            None
        }
    }
}

#[cfg(feature = "azure")]
pub use azure::Azure;

#[cfg(feature = "azure")]
mod azure {
    use super::*;
    use kube_lb_mock_azure::{MockArm, SUBSCRIPTION};

    /// Azure: the ARM mock with the cluster's VNet, subnet and NSG.
    pub struct Azure {
        arm: MockArm,
    }

    impl Azure {
        /// Starts the mock.
        pub async fn start() -> Self {
            let arm = crate::cloud_fixtures::arm().await;
            Self { arm }
        }
    }

    #[async_trait]
    impl ChaosCloud for Azure {
        fn name(&self) -> &'static str {
            "azure"
        }
        fn controller(
            &self,
            dir: &Path,
            proxy: Option<&FaultProxy>,
        ) -> (Vec<String>, Vec<(String, String)>) {
            let endpoint = proxy.map(FaultProxy::url).unwrap_or_else(|| self.arm.url());
            let path = crate::cloud_fixtures::write_azure_json(dir, &endpoint, &self.arm.url());
            (cloud_config_args(&path), Vec::new())
        }
        fn upstream(&self) -> Option<(String, Dialect)> {
            Some((self.arm.url(), Dialect::Azure))
        }
        fn nodes(&self) -> Vec<Value> {
            (0..2)
                .map(|i| {
                    ready_node(
                        &format!("aks-nodes-{i}"),
                        &format!("10.224.0.{}", 4 + i),
                        Some(&format!(
                            "azure:///subscriptions/{SUBSCRIPTION}/resourceGroups/cluster-rg/\
                             providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodes/\
                             virtualMachines/{i}"
                        )),
                        None,
                    )
                })
                .collect()
        }
        async fn inventory(&self) -> Result<Inventory, String> {
            let mut inventory = Inventory::default();
            for lb in self.arm.load_balancers() {
                let lb_name = lb["name"].as_str().unwrap_or_default().to_string();
                inventory.others.push(format!("loadBalancer/{lb_name}"));
                let frontends = lb["properties"]["frontendIPConfigurations"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for frontend in frontends {
                    let name = frontend["name"].as_str().unwrap_or_default();
                    if let Some(prefix) = lb_prefix(name) {
                        inventory
                            .load_balancers
                            .push((prefix, format!("frontend@{lb_name}")));
                    }
                }
            }
            for pip in self.arm.public_ips() {
                inventory.others.push(format!(
                    "publicIP/{}",
                    pip["name"].as_str().unwrap_or_default()
                ));
            }
            if let Some(nsg) = self.arm.security_group("cluster-rg", "cluster-nsg") {
                for rule in nsg["properties"]["securityRules"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                {
                    let name = rule["name"].as_str().unwrap_or_default();
                    if name.starts_with('a') || name.starts_with("k8s-azure") {
                        inventory.others.push(format!("securityRule/{name}"));
                    }
                }
            }
            Ok(inventory)
        }
        fn kind_switch(&self) -> Option<(&'static str, &'static str)> {
            Some((
                "service.beta.kubernetes.io/azure-load-balancer-internal",
                "true",
            ))
        }
        fn tweak(&self) -> Option<(&'static str, &'static [&'static str])> {
            Some((
                "service.beta.kubernetes.io/azure-load-balancer-tcp-idle-timeout",
                &["4", "10", "30"],
            ))
        }
    }
}

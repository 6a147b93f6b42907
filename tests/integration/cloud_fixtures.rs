//! The cloud mocks as the root integration tests set them up, in one place: moto with a
//! two-instance cluster network and the environment the AWS SDK reads, the GCE mock with two
//! zonal instances and its `gce.conf`, the ARM mock with the cluster's VNet and NSG and its
//! `azure.json`. Each config writer takes the endpoint the controller should call, so a test can
//! put a fault proxy in between.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A LoadBalancer Service `default/web` on port 80 (node port 30080), as YAML.
pub const WEB_SERVICE_YAML: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\n\
     spec:\n  type: LoadBalancer\n  selector: {app: web}\n  \
     ports: [{name: http, port: 80, targetPort: 8080, nodePort: 30080}]\n";

#[cfg(feature = "aws")]
pub use aws::*;

#[cfg(feature = "aws")]
mod aws {
    use kube_lb_mock_aws::{MotoServer, xml_values};

    /// moto's server, or a panic that says how to install it (AWS tests never pass without it).
    pub async fn moto() -> MotoServer {
        MotoServer::start().await.unwrap_or_else(|e| {
            panic!(
                "this test needs moto's server (bash scripts/setup-venv.sh, or point \
                 KUBE_LB_MOTO_SERVER at moto_server): {e}"
            )
        })
    }

    /// The IDs of the security groups in moto named as a Classic ELB's own (`k8s-elb-…`).
    pub async fn elb_security_groups(moto: &MotoServer) -> Vec<String> {
        let answer = moto
            .ec2(
                "DescribeSecurityGroups",
                &[
                    ("Filter.1.Name", "group-name"),
                    ("Filter.1.Value.1", "k8s-elb-*"),
                ],
            )
            .await
            .unwrap();
        xml_values(&answer, "groupId")
    }

    /// The environment the AWS SDK reads, pointed at `endpoint`, with nothing from the host.
    pub fn aws_env(endpoint: &str) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", endpoint),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "testing"),
            ("AWS_SESSION_TOKEN", "testing"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("AWS_CONFIG_FILE", "/dev/null"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// One Ready Node document (YAML) per moto instance, with its provider ID.
    pub fn aws_node_docs(instances: &[String]) -> Vec<String> {
        instances
            .iter()
            .enumerate()
            .map(|(i, instance)| {
                format!(
                    "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{i}}}\n\
                     spec: {{providerID: 'aws:///us-east-1a/{instance}'}}\n\
                     status:\n  conditions: [{{type: Ready, status: 'True'}}]\n  \
                     addresses: [{{type: InternalIP, address: 10.0.1.{}}}]\n",
                    10 + i
                )
            })
            .collect()
    }
}

#[cfg(feature = "gcp")]
pub use gcp::*;

#[cfg(feature = "gcp")]
mod gcp {
    use super::*;
    use crate::provider_scenarios::scenarios::gcp::support::{self, TAG};
    use kube_lb_mock_gce::MockGce;

    /// The GCE mock with `gke-c1-node-1` (us-central1-a) and `gke-c1-node-2` (us-central1-b),
    /// both tagged `gke-c1-node` (the Nodes of `tests/fixtures/clouds/gcp.yaml`).
    pub async fn gce() -> MockGce {
        support::two_node_mock().await
    }

    /// Writes `dir/gce.conf` for `project`, calling the Compute API at `endpoint`.
    pub fn write_gce_conf(dir: &Path, project: &str, endpoint: &str) -> PathBuf {
        let path = dir.join("gce.conf");
        let conf = support::gce_conf(project, endpoint, &format!("node-tags = {TAG}\n"));
        std::fs::write(&path, conf).unwrap();
        path
    }
}

#[cfg(feature = "azure")]
pub use azure::*;

#[cfg(feature = "azure")]
mod azure {
    use super::*;
    use crate::provider_scenarios::scenarios::azure::support;
    use kube_lb_mock_azure::MockArm;

    /// The ARM mock with `cluster-rg/cluster-vnet/nodes` (10.224.0.0/16, beside `apps`) and
    /// `cluster-nsg`.
    pub async fn arm() -> MockArm {
        support::mock().await
    }

    /// Writes `dir/azure.json` for that network, calling ARM at `resource_manager` and Azure AD
    /// at `active_directory`.
    pub fn write_azure_json(dir: &Path, resource_manager: &str, active_directory: &str) -> PathBuf {
        let path = dir.join("azure.json");
        let config = support::config_json_for(resource_manager, active_directory);
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        path
    }
}

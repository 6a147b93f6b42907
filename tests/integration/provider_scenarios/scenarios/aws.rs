//! AWS: moto's server (one per test) with a cluster network, the Classic ELB default.

use std::collections::BTreeSet;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::Credentials;
use kube_lb_annotations::Cloud;
use kube_lb_mock_aws::{ClusterNetwork, FaultPlan, FaultProxy, MotoServer, xml_values};
use kube_lb_provider_aws::{AwsProvider, CloudConfig};
use kube_lb_provider_core::{BackendNode, CallCounter, LoadBalancerProvider, RetryPolicy};

use super::{Harness, UID, eventually, stall_latency};

const CLUSTER: &str = "scenario";

/// moto plus an AWS provider pointed at it (through a proxy that can stop answering, for the
/// stalled-cloud scenario).
pub struct Aws {
    moto: MotoServer,
    network: ClusterNetwork,
    provider: AwsProvider,
    extra: Vec<String>,
    proxy: Option<FaultProxy>,
}

fn node(instance: &str) -> BackendNode {
    BackendNode {
        name: format!("node-{instance}"),
        provider_id: Some(format!("aws:///us-east-1a/{instance}")),
        addresses: Vec::new(),
        labels: Default::default(),
    }
}

impl Aws {
    /// The SDK configuration for moto (or a proxy in front of it) at `endpoint`.
    async fn sdk(endpoint: &str) -> aws_config::SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
            .http_client(kube_lb_provider_aws::clients::http_client())
            .load()
            .await
    }

    /// The CLB name the provider gives the scenario Service (`a` + UID, 32 characters).
    fn lb_name() -> String {
        kube_lb_provider_core::naming::load_balancer_name(UID)
    }

    /// The scenario Service's CLB as the cloud describes it (none once it is gone).
    async fn own_load_balancer(
        &self,
    ) -> Vec<aws_sdk_elasticloadbalancing::types::LoadBalancerDescription> {
        let described = self
            .provider
            .clients()
            .elb
            .describe_load_balancers()
            .load_balancer_names(Aws::lb_name())
            .send()
            .await
            .unwrap();
        described.load_balancer_descriptions().to_vec()
    }

    async fn load_balancer_names(&self) -> Vec<String> {
        let described = self
            .provider
            .clients()
            .elb
            .describe_load_balancers()
            .send()
            .await
            .unwrap();
        described
            .load_balancer_descriptions()
            .iter()
            .filter_map(|lb| lb.load_balancer_name().map(str::to_string))
            .collect()
    }
}

impl Harness for Aws {
    const CLOUD: Cloud = Cloud::Aws;

    async fn start() -> Aws {
        let moto = crate::cloud_fixtures::moto().await;
        let network = moto.cluster_network(CLUSTER, 2).await.unwrap();
        let provider = AwsProvider::new(
            &Aws::sdk(&moto.endpoint()).await,
            CloudConfig::default(),
            CLUSTER,
        );
        Aws {
            moto,
            network,
            provider,
            extra: Vec::new(),
            proxy: None,
        }
    }

    fn provider(&self) -> &dyn LoadBalancerProvider {
        &self.provider
    }

    fn counter(&self) -> CallCounter {
        self.provider.call_counter()
    }

    fn nodes(&self) -> Vec<BackendNode> {
        self.network.instances.iter().map(|i| node(i)).collect()
    }

    async fn add_node(&mut self) -> BackendNode {
        let launched = self
            .moto
            .ec2(
                "RunInstances",
                &[
                    ("ImageId", "ami-12c6146b"),
                    ("MinCount", "1"),
                    ("MaxCount", "1"),
                    ("SubnetId", &self.network.subnets[0]),
                    ("SecurityGroupId.1", &self.network.node_security_group),
                ],
            )
            .await
            .unwrap();
        let id = xml_values(&launched, "instanceId").remove(0);
        self.extra.push(id.clone());
        node(&id)
    }

    fn registration_operations(&self) -> &'static [&'static str] {
        &["elb:RegisterInstancesWithLoadBalancer"]
    }

    async fn owned(&self) -> Vec<String> {
        let mut owned = Vec::new();
        let name = Aws::lb_name();
        if self.load_balancer_names().await.contains(&name) {
            owned.push(format!("load balancer {name}"));
        }
        // The CLB's own security group, found by its deterministic name.
        let groups = self
            .moto
            .ec2(
                "DescribeSecurityGroups",
                &[
                    ("Filter.1.Name", "group-name"),
                    ("Filter.1.Value.1", &format!("k8s-elb-{name}")),
                ],
            )
            .await
            .unwrap();
        owned.extend(
            xml_values(&groups, "groupId")
                .into_iter()
                .map(|g| format!("security group {g}")),
        );
        // Rules the CLB added to the node security group (ingress from another group).
        let node_group = self
            .moto
            .ec2(
                "DescribeSecurityGroups",
                &[("GroupId.1", &self.network.node_security_group)],
            )
            .await
            .unwrap();
        owned.extend(
            xml_values(&node_group, "groupId")
                .into_iter()
                .filter(|g| *g != self.network.node_security_group)
                .map(|g| format!("node security group rule from {g}")),
        );
        owned
    }

    fn mutations_seen_by_cloud_since(&self, _mark: usize) -> Vec<String> {
        // moto keeps no request journal; the provider's counter is the only witness.
        Vec::new()
    }

    fn mark(&self) -> usize {
        0
    }

    async fn remove_load_balancer_out_of_band(&self) {
        self.provider
            .clients()
            .elb
            .delete_load_balancer()
            .load_balancer_name(Aws::lb_name())
            .send()
            .await
            .unwrap();
        eventually("the CLB is gone", Duration::from_secs(30), || async {
            !self.load_balancer_names().await.contains(&Aws::lb_name())
        })
        .await;
    }

    async fn ports_open(&self) -> BTreeSet<u16> {
        self.own_load_balancer()
            .await
            .iter()
            .flat_map(|lb| lb.listener_descriptions())
            .filter_map(|d| d.listener().map(|l| l.load_balancer_port()))
            .map(|port| u16::try_from(port).unwrap())
            .collect()
    }

    async fn close_port_out_of_band(&self, port: u16) {
        self.provider
            .clients()
            .elb
            .delete_load_balancer_listeners()
            .load_balancer_name(Aws::lb_name())
            .load_balancer_ports(i32::from(port))
            .send()
            .await
            .unwrap();
        eventually("the listener is gone", Duration::from_secs(30), || async {
            !self.ports_open().await.contains(&port)
        })
        .await;
    }

    async fn backends(&self) -> BTreeSet<String> {
        self.own_load_balancer()
            .await
            .iter()
            .flat_map(|lb| lb.instances())
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect()
    }

    async fn remove_backend_out_of_band(&self, backend: &str) {
        let instance = aws_sdk_elasticloadbalancing::types::Instance::builder()
            .instance_id(backend)
            .build();
        self.provider
            .clients()
            .elb
            .deregister_instances_from_load_balancer()
            .load_balancer_name(Aws::lb_name())
            .instances(instance)
            .send()
            .await
            .unwrap();
        eventually(
            "the instance is deregistered",
            Duration::from_secs(30),
            || async { !self.backends().await.contains(backend) },
        )
        .await;
    }

    async fn start_with_request_timeout(timeout: Duration) -> Aws {
        let moto = crate::cloud_fixtures::moto().await;
        let network = moto.cluster_network(CLUSTER, 2).await.unwrap();
        // moto cannot be told to stop answering; the proxy (no faults of its own) can, through
        // its latency knob.
        let proxy = FaultProxy::start(moto.addr(), FaultPlan::None)
            .await
            .unwrap();
        // Through the cloud-config key, as an operator sets it.
        let config = CloudConfig::parse(&format!(
            "[KubeLB]\nRequestTimeoutMillis = {}\n",
            timeout.as_millis()
        ))
        .unwrap();
        assert_eq!(config.request_timeout, timeout);
        let provider = AwsProvider::new(&Aws::sdk(&proxy.endpoint()).await, config, CLUSTER);
        Aws {
            moto,
            network,
            provider,
            extra: Vec::new(),
            proxy: Some(proxy),
        }
    }

    fn retry_policy(&self) -> RetryPolicy {
        CloudConfig::default().retry
    }

    fn stall(&self, stalled: bool) {
        let proxy = self
            .proxy
            .as_ref()
            .unwrap_or_else(|| panic!("stall needs start_with_request_timeout"));
        proxy.set_latency(stall_latency(stalled));
    }

    async fn load_balancers_of_the_service(&self) -> usize {
        // The scenario's Service is the only one: every CLB in the account is its.
        self.load_balancer_names().await.len()
    }
}

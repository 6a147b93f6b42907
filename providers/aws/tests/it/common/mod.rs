//! Shared fixture for the moto-backed tests: one moto server per test, a VPC with public
//! subnets in two zones, a cluster-tagged node security group and instances; builders for
//! Services (parsed by the real annotation parser) and backend nodes.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use k8s_openapi::api::core::v1::Service;
use kube_lb_annotations::{Cloud, LoadBalancerSpec};
use kube_lb_mock_aws::MotoServer;
use kube_lb_provider_aws::{AwsProvider, CloudConfig, sg};
use kube_lb_provider_core::{BackendNode, CallCounter, CallSnapshot};
use kube_lb_test_support::ServiceBuilder;

pub const CLUSTER: &str = "test-cluster";
pub const CLUSTER_TAG: &str = "kubernetes.io/cluster/test-cluster";
pub const AMI: &str = "ami-12c6146b";

/// An AWS account in moto with a cluster's network already set up.
pub struct Env {
    pub moto: MotoServer,
    pub sdk: SdkConfig,
    pub ec2: aws_sdk_ec2::Client,
    pub elb: aws_sdk_elasticloadbalancing::Client,
    pub elbv2: aws_sdk_elasticloadbalancingv2::Client,
    pub vpc: String,
    pub subnets: Vec<String>,
    pub node_sg: String,
    pub instances: Vec<String>,
    pub cert: String,
}

pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .http_client(kube_lb_provider_aws::clients::http_client())
        .load()
        .await
}

fn tag_spec(resource: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(
            tags.iter()
                .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
                .collect(),
        ))
        .build()
}

impl Env {
    pub async fn start() -> Env {
        let moto = MotoServer::start()
            .await
            .unwrap_or_else(|e| panic!("AWS tests need moto's server: {e}"));
        let sdk = sdk_config(&moto.endpoint()).await;
        let ec2 = aws_sdk_ec2::Client::new(&sdk);
        let elb = aws_sdk_elasticloadbalancing::Client::new(&sdk);
        let elbv2 = aws_sdk_elasticloadbalancingv2::Client::new(&sdk);
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.0.0.0/16")
            .send()
            .await
            .unwrap()
            .vpc()
            .unwrap()
            .vpc_id()
            .unwrap()
            .to_string();
        let igw = ec2
            .create_internet_gateway()
            .send()
            .await
            .unwrap()
            .internet_gateway()
            .unwrap()
            .internet_gateway_id()
            .unwrap()
            .to_string();
        ec2.attach_internet_gateway()
            .internet_gateway_id(&igw)
            .vpc_id(&vpc)
            .send()
            .await
            .unwrap();
        let tables = ec2
            .describe_route_tables()
            .filters(Filter::builder().name("vpc-id").values(&vpc).build())
            .send()
            .await
            .unwrap();
        let main = tables.route_tables()[0]
            .route_table_id()
            .unwrap()
            .to_string();
        ec2.create_route()
            .route_table_id(&main)
            .destination_cidr_block("0.0.0.0/0")
            .gateway_id(&igw)
            .send()
            .await
            .unwrap();
        let mut subnets = Vec::new();
        for (zone, cidr, label) in [
            ("us-east-1a", "10.0.1.0/24", "cluster-a"),
            ("us-east-1b", "10.0.2.0/24", "cluster-b"),
        ] {
            let subnet = ec2
                .create_subnet()
                .vpc_id(&vpc)
                .cidr_block(cidr)
                .availability_zone(zone)
                .tag_specifications(tag_spec(
                    ResourceType::Subnet,
                    &[
                        (CLUSTER_TAG, "shared"),
                        ("kubernetes.io/role/elb", "1"),
                        ("Name", label),
                    ],
                ))
                .send()
                .await
                .unwrap();
            subnets.push(subnet.subnet().unwrap().subnet_id().unwrap().to_string());
        }
        let node_sg = ec2
            .create_security_group()
            .group_name("nodes")
            .description("cluster nodes")
            .vpc_id(&vpc)
            .tag_specifications(tag_spec(
                ResourceType::SecurityGroup,
                &[(CLUSTER_TAG, "owned")],
            ))
            .send()
            .await
            .unwrap()
            .group_id()
            .unwrap()
            .to_string();
        let cert = moto.request_certificate("example.com").await.unwrap();
        let mut env = Env {
            moto,
            sdk,
            ec2,
            elb,
            elbv2,
            vpc,
            subnets,
            node_sg,
            instances: Vec::new(),
            cert,
        };
        for _ in 0..3 {
            let id = env.add_instance().await;
            env.instances.push(id);
        }
        env
    }

    /// Launches one more node instance (not added to `instances`).
    pub async fn add_instance(&self) -> String {
        let response = self
            .ec2
            .run_instances()
            .image_id(AMI)
            .min_count(1)
            .max_count(1)
            .subnet_id(&self.subnets[0])
            .security_group_ids(&self.node_sg)
            .send()
            .await
            .unwrap();
        response.instances()[0].instance_id().unwrap().to_string()
    }

    pub fn config(&self) -> CloudConfig {
        CloudConfig::default()
    }

    pub fn provider(&self, config: CloudConfig) -> AwsProvider {
        AwsProvider::new(&self.sdk, config, CLUSTER)
    }

    pub fn nodes(&self, ids: &[String]) -> Vec<BackendNode> {
        ids.iter().map(|id| node(id)).collect()
    }

    /// The Classic ELB `name` as AWS describes it (it must exist).
    pub async fn clb(
        &self,
        name: &str,
    ) -> aws_sdk_elasticloadbalancing::types::LoadBalancerDescription {
        self.elb
            .describe_load_balancers()
            .load_balancer_names(name)
            .send()
            .await
            .unwrap()
            .load_balancer_descriptions()[0]
            .clone()
    }

    /// The ELBv2 load balancer `name` as AWS describes it (it must exist).
    pub async fn nlb(&self, name: &str) -> aws_sdk_elasticloadbalancingv2::types::LoadBalancer {
        self.elbv2
            .describe_load_balancers()
            .names(name)
            .send()
            .await
            .unwrap()
            .load_balancers()[0]
            .clone()
    }

    /// The rules of a security group.
    pub async fn rules(&self, group: &str) -> Vec<sg::IngressRule> {
        let response = self
            .ec2
            .describe_security_groups()
            .group_ids(group)
            .send()
            .await
            .unwrap();
        sg::flatten(response.security_groups()[0].ip_permissions())
    }

    /// Security groups with this name.
    pub async fn groups_named(&self, name: &str) -> Vec<String> {
        let response = self
            .ec2
            .describe_security_groups()
            .filters(Filter::builder().name("group-name").values(name).build())
            .send()
            .await
            .unwrap();
        response
            .security_groups()
            .iter()
            .map(|g| g.group_id().unwrap().to_string())
            .collect()
    }

    /// Every target group in the account.
    pub async fn target_group_names(&self) -> BTreeSet<String> {
        let response = self.elbv2.describe_target_groups().send().await.unwrap();
        response
            .target_groups()
            .iter()
            .map(|t| t.target_group_name().unwrap().to_string())
            .collect()
    }

    /// Allocates an Elastic IP.
    pub async fn eip(&self) -> String {
        self.ec2
            .allocate_address()
            .domain(aws_sdk_ec2::types::DomainType::Vpc)
            .send()
            .await
            .unwrap()
            .allocation_id()
            .unwrap()
            .to_string()
    }
}

pub fn node(instance: &str) -> BackendNode {
    BackendNode {
        name: format!("node-{instance}"),
        provider_id: Some(format!("aws:///us-east-1a/{instance}")),
        addresses: vec![],
        labels: BTreeMap::from([("pool".to_string(), "general".to_string())]),
    }
}

/// A LoadBalancer Service, built as the API server would store it and parsed for AWS: the
/// shared builder, starting without ports, with AWS's annotations named by their suffix.
#[derive(Debug, Clone)]
pub struct Svc(ServiceBuilder);

/// What [`Svc::aws`] and [`Svc::without`] prepend to a suffix.
const AWS_ANNOTATION_PREFIX: &str = "service.beta.kubernetes.io/aws-load-balancer-";

pub fn svc(name: &str, uid: &str) -> Svc {
    Svc(ServiceBuilder::new(Cloud::Aws, name, uid)
        .annotation_prefix(AWS_ANNOTATION_PREFIX)
        .selector(&[("app", name)])
        .without_ports())
}

impl Svc {
    /// `service.beta.kubernetes.io/aws-load-balancer-<suffix>: <value>`.
    pub fn aws(self, suffix: &str, value: &str) -> Self {
        Svc(self.0.annotate(suffix, value))
    }

    pub fn without(self, suffix: &str) -> Self {
        Svc(self.0.remove_annotation(suffix))
    }

    pub fn port(self, name: &str, port: u16, node_port: u16, protocol: &str) -> Self {
        Svc(self.0.add_port(name, port, protocol, node_port))
    }

    pub fn local(self, health_check_node_port: u16) -> Self {
        Svc(self.0.local(health_check_node_port))
    }

    pub fn cluster(self) -> Self {
        Svc(self.0.cluster())
    }

    pub fn source_range(self, cidr: &str) -> Self {
        Svc(self.0.add_source_range(cidr))
    }

    pub fn service(&self) -> Service {
        self.0.service()
    }

    pub fn spec(&self) -> LoadBalancerSpec {
        self.0.spec()
    }
}

/// The subnets an ELBv2 load balancer has a node in.
pub fn zone_subnets(lb: &aws_sdk_elasticloadbalancingv2::types::LoadBalancer) -> BTreeSet<String> {
    lb.availability_zones()
        .iter()
        .map(|z| z.subnet_id().unwrap().to_string())
        .collect()
}

/// Read operations other than the shared instance lookup, summed.
pub fn lb_reads(calls: &CallSnapshot) -> u64 {
    calls.reads() - calls.operation("ec2:DescribeInstances")
}

/// Hands out the calls a provider made since the previous [`Meter::take`], from the core call
/// counter every AWS call goes through.
#[derive(Debug)]
pub struct Meter {
    counter: CallCounter,
    last: std::sync::Mutex<CallSnapshot>,
}

impl Meter {
    /// Starts counting from now.
    pub fn new(provider: &AwsProvider) -> Meter {
        let counter = provider.call_counter();
        let last = std::sync::Mutex::new(counter.snapshot());
        Meter { counter, last }
    }

    /// The calls since the last take (per operation label, e.g. `elb:CreateLoadBalancer`).
    pub fn take(&self) -> CallSnapshot {
        let now = self.counter.snapshot();
        let mut last = self.last.lock().unwrap();
        let delta = now.since(&last);
        *last = now;
        delta
    }
}

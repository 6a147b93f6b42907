//! Fixture builders for Services, EndpointSlices and Nodes, shared by unit tests, the
//! network-namespace tests and the benchmarks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeStatus,
    Service, ServicePort, ServiceSpec, ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::SERVICE_NAME_LABEL;

/// Builds a [`Service`]; starts as a ClusterIP Service selecting `app=<name>`.
#[derive(Debug, Clone)]
pub struct ServiceBuilder(Service);

/// A ClusterIP Service `namespace/name` with the given cluster IP.
pub fn service(namespace: &str, name: &str, cluster_ip: &str) -> ServiceBuilder {
    ServiceBuilder(Service {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            selector: Some([("app".to_owned(), name.to_owned())].into()),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

impl ServiceBuilder {
    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.get_or_insert_with(ServiceSpec::default)
    }

    /// Adds a port (`protocol` as in the API: TCP, UDP, SCTP).
    pub fn port(mut self, name: &str, protocol: &str, port: i32) -> Self {
        self.spec()
            .ports
            .get_or_insert_with(Vec::new)
            .push(ServicePort {
                name: (!name.is_empty()).then(|| name.to_owned()),
                protocol: Some(protocol.into()),
                port,
                ..ServicePort::default()
            });
        self
    }

    /// Makes it a NodePort Service (if not LoadBalancer) and sets the last port's node port.
    pub fn node_port(mut self, node_port: i32) -> Self {
        let spec = self.spec();
        if spec.type_.as_deref() != Some("LoadBalancer") {
            spec.type_ = Some("NodePort".into());
        }
        if let Some(port) = spec.ports.get_or_insert_with(Vec::new).last_mut() {
            port.node_port = Some(node_port);
        }
        self
    }

    /// Makes it a LoadBalancer Service whose status carries these ingress IPs.
    pub fn load_balancer(mut self, ips: &[&str]) -> Self {
        self.spec().type_ = Some("LoadBalancer".into());
        self.0.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    ips.iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some((*ip).into()),
                            ..LoadBalancerIngress::default()
                        })
                        .collect(),
                ),
            }),
            ..ServiceStatus::default()
        });
        self
    }

    /// Sets `spec.externalIPs`.
    pub fn external_ips(mut self, ips: &[&str]) -> Self {
        self.spec().external_ips = Some(ips.iter().map(|ip| (*ip).to_owned()).collect());
        self
    }

    /// `externalTrafficPolicy: Local` with a health-check node port.
    pub fn local(mut self, health_check_node_port: i32) -> Self {
        let spec = self.spec();
        spec.external_traffic_policy = Some("Local".into());
        spec.health_check_node_port = Some(health_check_node_port);
        self
    }

    /// `internalTrafficPolicy: Local`.
    pub fn internal_local(mut self) -> Self {
        self.spec().internal_traffic_policy = Some("Local".into());
        self
    }

    /// `sessionAffinity: ClientIP` with a timeout.
    pub fn affinity(mut self, timeout_seconds: i32) -> Self {
        let spec = self.spec();
        spec.session_affinity = Some("ClientIP".into());
        spec.session_affinity_config = Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(timeout_seconds),
            }),
        });
        self
    }

    /// `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(mut self, ranges: &[&str]) -> Self {
        self.spec().load_balancer_source_ranges =
            Some(ranges.iter().map(|r| (*r).to_owned()).collect());
        self
    }

    /// Sets `spec.type`.
    pub fn type_(mut self, type_: &str) -> Self {
        self.spec().type_ = Some(type_.into());
        self
    }

    /// Removes the selector (Endpoints are then maintained by hand).
    pub fn no_selector(mut self) -> Self {
        self.spec().selector = None;
        self
    }

    /// Adds an annotation.
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// Adds a label.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
        self
    }

    /// The Service.
    pub fn build(self) -> Service {
        self.0
    }
}

/// Builds an [`EndpointSlice`].
#[derive(Debug, Clone)]
pub struct SliceBuilder(EndpointSlice);

/// An IPv4 EndpointSlice `name` of Service `namespace/service`.
pub fn slice(namespace: &str, service: &str, name: &str) -> SliceBuilder {
    SliceBuilder(EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            labels: Some([(SERVICE_NAME_LABEL.to_owned(), service.to_owned())].into()),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: Vec::new(),
        ports: None,
    })
}

impl SliceBuilder {
    /// Adds a port (name as in the Service port; empty for unnamed).
    pub fn port(mut self, name: &str, protocol: &str, port: i32) -> Self {
        self.0
            .ports
            .get_or_insert_with(Vec::new)
            .push(EndpointPort {
                name: (!name.is_empty()).then(|| name.to_owned()),
                protocol: Some(protocol.into()),
                port: Some(port),
                app_protocol: None,
            });
        self
    }

    /// Adds a ready endpoint on `node`.
    pub fn endpoint(self, ip: &str, node: &str) -> Self {
        self.endpoint_with(ip, node, true, true, false)
    }

    /// Adds an endpoint with explicit conditions.
    pub fn endpoint_with(
        mut self,
        ip: &str,
        node: &str,
        ready: bool,
        serving: bool,
        terminating: bool,
    ) -> Self {
        self.0.endpoints.push(Endpoint {
            addresses: vec![ip.into()],
            conditions: Some(EndpointConditions {
                ready: Some(ready),
                serving: Some(serving),
                terminating: Some(terminating),
            }),
            node_name: Some(node.into()),
            ..Endpoint::default()
        });
        self
    }

    /// The slice.
    pub fn build(self) -> EndpointSlice {
        self.0
    }
}

/// A Node with hostname/zone/region labels and one InternalIP per address given.
pub fn node(name: &str, zone: &str, region: &str, addresses: &[&str]) -> Node {
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name),
        ("topology.kubernetes.io/zone", zone),
        ("topology.kubernetes.io/region", region),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|ip| NodeAddress {
                        type_: "InternalIP".into(),
                        address: (*ip).into(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
    }
}

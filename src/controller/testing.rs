//! Fixture builders shared by the controller's unit tests.

use std::collections::BTreeMap;

use kube_lb_annotations::{
    Cloud, LoadBalancerSpec, PortSpec, Protocol, ProviderSpec, Scheme, ServiceKey, SessionAffinity,
    SourceRangeOrigin, SourceRanges, TargetPort, TrafficPolicy,
};

/// A one-port spec for `default/<name>`, with `externalTrafficPolicy: Local` when `local`.
pub fn spec_for(name: &str, local: bool) -> LoadBalancerSpec {
    LoadBalancerSpec {
        service: ServiceKey {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        cloud: Cloud::Local,
        ports: vec![PortSpec {
            name: None,
            protocol: Protocol::Tcp,
            port: 80,
            node_port: Some(30080),
            target_port: TargetPort::Number(8080),
        }],
        scheme: Scheme::External,
        requested_ip: None,
        source_ranges: SourceRanges {
            cidrs: vec![],
            origin: SourceRangeOrigin::Default,
        },
        traffic_policy: if local {
            TrafficPolicy::Local {
                health_check_node_port: Some(32000),
            }
        } else {
            TrafficPolicy::Cluster
        },
        session_affinity: SessionAffinity::None,
        load_balancer_class: None,
        allocate_node_ports: true,
        external_ips: vec![],
        topology_keys: vec![],
        extra_tags: BTreeMap::new(),
        provider: ProviderSpec::Local(Default::default()),
    }
}

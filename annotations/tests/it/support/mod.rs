//! Fixture builder: `svc_lb("ns", "web").annotate(k, v).port(..).local()`.

// Each test binary includes this module and uses a different subset of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, Service, ServicePort, ServiceSpec, SessionAffinityConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube_lb_annotations::{Cloud, ErrorKind, ParseErrors, Parsed, parse};

/// A Service under construction.
#[derive(Debug, Clone)]
pub struct SvcBuilder(pub Service);

/// A `type: LoadBalancer` Service with one TCP port 80 → nodePort 30080.
pub fn svc_lb(namespace: &str, name: &str) -> SvcBuilder {
    SvcBuilder(Service {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            uid: Some("uid-1".to_owned()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".to_owned()),
            ports: Some(vec![port("", "TCP", 80, 30080)]),
            ..Default::default()
        }),
        status: None,
    })
}

/// A Service port.
pub fn port(name: &str, protocol: &str, number: i32, node_port: i32) -> ServicePort {
    ServicePort {
        name: (!name.is_empty()).then(|| name.to_owned()),
        protocol: Some(protocol.to_owned()),
        port: number,
        node_port: (node_port != 0).then_some(node_port),
        ..Default::default()
    }
}

impl SvcBuilder {
    fn spec(&mut self) -> &mut ServiceSpec {
        self.0.spec.get_or_insert_with(Default::default)
    }

    /// Adds an annotation.
    pub fn annotate(mut self, key: &str, value: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value.to_owned());
        self
    }

    /// Replaces the ports.
    pub fn ports(mut self, ports: Vec<ServicePort>) -> Self {
        self.spec().ports = Some(ports);
        self
    }

    /// `externalTrafficPolicy: Local` with a health-check node port (0 = not allocated).
    pub fn local(mut self, health_check_node_port: i32) -> Self {
        self.spec().external_traffic_policy = Some("Local".to_owned());
        self.spec().health_check_node_port =
            (health_check_node_port != 0).then_some(health_check_node_port);
        self
    }

    /// Sets `spec.type`.
    pub fn type_(mut self, t: &str) -> Self {
        self.spec().type_ = Some(t.to_owned());
        self
    }

    /// Sets `spec.loadBalancerIP`.
    pub fn lb_ip(mut self, ip: &str) -> Self {
        self.spec().load_balancer_ip = Some(ip.to_owned());
        self
    }

    /// Sets `spec.loadBalancerSourceRanges`.
    pub fn source_ranges(mut self, ranges: &[&str]) -> Self {
        self.spec().load_balancer_source_ranges =
            Some(ranges.iter().map(|r| r.to_string()).collect());
        self
    }

    /// `sessionAffinity: ClientIP` with an optional timeout.
    pub fn client_ip(mut self, timeout: Option<i32>) -> Self {
        self.spec().session_affinity = Some("ClientIP".to_owned());
        self.spec().session_affinity_config = timeout.map(|t| SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(t),
            }),
        });
        self
    }

    /// Edits the spec directly.
    pub fn with_spec(mut self, f: impl FnOnce(&mut ServiceSpec)) -> Self {
        f(self.spec());
        self
    }

    /// Parses for `cloud`.
    pub fn parse(&self, cloud: Cloud) -> Result<Parsed, ParseErrors> {
        parse(cloud, &self.0)
    }

    /// Parses and fails the test on errors.
    pub fn ok(&self, cloud: Cloud) -> Parsed {
        match self.parse(cloud) {
            Ok(parsed) => parsed,
            Err(errors) => panic!("expected success, got: {errors}"),
        }
    }

    /// Parses and fails the test on success.
    pub fn err(&self, cloud: Cloud) -> ParseErrors {
        match self.parse(cloud) {
            Ok(parsed) => panic!("expected errors, got spec {:?}", parsed.spec),
            Err(errors) => errors,
        }
    }
}

/// Asserts that `errors` holds one error at `key` of `kind` whose message contains `needle`.
pub fn assert_error(errors: &ParseErrors, key: &str, kind: ErrorKind, needle: &str) {
    let found = errors.errors().iter().any(|e| {
        e.location.to_string().contains(key) && e.kind == kind && e.to_string().contains(needle)
    });
    assert!(
        found,
        "no {kind:?} error at {key} containing {needle:?}; got: {errors}"
    );
}

/// Asserts a warning at `key` containing `needle`.
pub fn assert_warning(parsed: &Parsed, key: &str, needle: &str) {
    let found = parsed
        .warnings
        .iter()
        .any(|w| w.location.to_string().contains(key) && w.to_string().contains(needle));
    assert!(
        found,
        "no warning at {key} containing {needle:?}; got: {:#?}",
        parsed.warnings
    );
}

//! The one entry point: [`parse`] a Service for a cloud into a [`LoadBalancerSpec`].

mod aws;
mod azure;
mod baidu;
mod gcp;
mod local;
mod openstack;
mod reader;
mod service;
mod tencent;
mod topology;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Service;
use serde::Serialize;

use crate::diagnostics::{ErrorKind, Location, ParseError, ParseErrors, Warning};
use crate::keys;
use crate::spec::{Cloud, LoadBalancerSpec, ProviderSpec, Scheme};

pub use tencent::parse_label_selector;
pub use topology::{
    InvalidTopologyKey, MAX_TOPOLOGY_KEYS, TopologyKeysError, TopologyLiftError,
    check_topology_keys, lift_topology_keys,
};

pub(crate) use reader::Reader;

/// A successfully parsed Service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parsed {
    /// The resolved load-balancer spec.
    pub spec: LoadBalancerSpec,
    /// Values accepted as upstream accepts them, but probably not meant that way.
    pub warnings: Vec<Warning>,
}

/// Parses `service` for `cloud` into a typed, validated [`LoadBalancerSpec`].
///
/// Pure: no I/O, no clock. Every problem is collected; the error carries all of them, each
/// naming the annotation key or field path, the value and what is allowed.
///
/// A Service whose `spec.type` is not `LoadBalancer` returns `Err` with exactly one error of
/// kind [`ErrorKind::NotLoadBalancer`]; [`ParseErrors::is_not_load_balancer`] tells callers to
/// skip it rather than report a user error. `spec.loadBalancerClass` is parsed and returned,
/// not judged: whether this controller owns the class is the controller's decision.
pub fn parse(cloud: Cloud, service: &Service) -> Result<Parsed, ParseErrors> {
    let service_type = service
        .spec
        .as_ref()
        .and_then(|spec| spec.type_.as_deref())
        .unwrap_or("ClusterIP");
    if service_type != "LoadBalancer" {
        let error = ParseError {
            location: Location::field("spec.type"),
            value: Some(service_type.to_owned()),
            kind: ErrorKind::NotLoadBalancer,
            detail: "not a LoadBalancer Service; kube-lb builds nothing for it".to_owned(),
        };
        return Err(ParseErrors::single(error));
    }

    let empty = BTreeMap::new();
    let annotations = service.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut reader = Reader::new(annotations);
    let mut core = service::parse_core(&mut reader, service);

    let (provider, scheme) = match cloud {
        Cloud::Local => (
            ProviderSpec::Local(local::parse(&mut reader, &core, service)),
            Scheme::External,
        ),
        Cloud::Aws => {
            let (aws, scheme) = aws::parse(&mut reader, &mut core, service);
            (ProviderSpec::Aws(aws), scheme)
        }
        Cloud::Gcp => {
            let (gcp, scheme) = gcp::parse(&mut reader, &core);
            (ProviderSpec::Gcp(gcp), scheme)
        }
        Cloud::Azure => {
            let (azure, scheme) = azure::parse(&mut reader, &mut core);
            (ProviderSpec::Azure(azure), scheme)
        }
        Cloud::Openstack => {
            let (os, scheme) = openstack::parse(&mut reader, &core);
            (ProviderSpec::Openstack(os), scheme)
        }
        Cloud::Tencent => {
            let (tencent, scheme) = tencent::parse_tencent(&mut reader, &core);
            (ProviderSpec::Tencent(tencent), scheme)
        }
        Cloud::Baidu => {
            let (baidu, scheme) = baidu::parse(&mut reader, &core);
            (ProviderSpec::Baidu(baidu), scheme)
        }
    };
    let existing_lb = match &provider {
        ProviderSpec::Tencent(tencent) => tencent.existed_lb_id.as_deref(),
        ProviderSpec::Baidu(baidu) => baidu.exist_id.as_deref(),
        _ => None,
    };
    let ranges_on_existing = existing_lb.and_then(|id| {
        crate::limits::source_ranges_on_existing_error(cloud, &core.source_ranges, id)
    });
    for limit in crate::limits::port_limits(cloud, &core.ports, core.allocate_node_ports)
        .into_iter()
        .chain(ranges_on_existing)
    {
        reader.diag.error(
            limit.location,
            limit.value.as_deref(),
            limit.kind,
            limit.detail,
        );
    }
    warn_foreign_annotations(&mut reader, cloud);

    let Reader { diag, .. } = reader;
    let (errors, warnings) = diag.finish();
    if let Some(errors) = ParseErrors::from_vec(errors) {
        return Err(errors.with_warnings(warnings));
    }
    let spec = LoadBalancerSpec {
        service: core.service,
        cloud,
        ports: core.ports,
        scheme,
        requested_ip: core.requested_ip,
        source_ranges: core.source_ranges,
        traffic_policy: core.traffic_policy,
        session_affinity: core.session_affinity,
        load_balancer_class: core.load_balancer_class,
        allocate_node_ports: core.allocate_node_ports,
        external_ips: core.external_ips,
        topology_keys: core.topology_keys,
        extra_tags: core.extra_tags,
        provider,
    };
    Ok(Parsed { spec, warnings })
}

/// Annotations of another cloud have no effect here; say so once per cloud, since a wrong
/// `--cloud` or a manifest copied between clusters is the usual cause.
fn warn_foreign_annotations(reader: &mut Reader<'_>, cloud: Cloud) {
    let mut foreign: BTreeMap<Cloud, Vec<String>> = BTreeMap::new();
    for key in reader.all().keys() {
        if let Some(owner) = keys::cloud_of_key(key)
            && owner != cloud
            && !reader.was_read(key)
        {
            foreign.entry(owner).or_default().push(key.clone());
        }
    }
    for (owner, keys) in foreign {
        reader.diag.warn(
            Location::field("metadata.annotations"),
            None,
            format!(
                "{} annotation(s) for cloud {owner} have no effect on cloud {cloud}: {}",
                keys.len(),
                keys.join(", ")
            ),
        );
    }
}

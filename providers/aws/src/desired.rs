//! The one place that maps the typed annotation spec (`AwsSpec`) onto AWS-level desired state.
//! Everything AWS-specific downstream (planners, appliers) only sees the types built here.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;
use kube_lb_annotations::{
    AwsHealthCheck, AwsSpec, HealthCheckPort, HealthCheckProtocol, LoadBalancerSpec, Protocol,
    Scheme, SessionAffinity, TrafficPolicy,
};

use crate::clb::plan::{AccessLog, Attributes, ClbDesired, HealthCheck, Listener};
use crate::error::AwsError;
use crate::naming::{TargetGroupNameInput, target_group_name};
use crate::nlb::plan::{ListenerDesired, NlbDesired, SubnetMapping, TgDesired, TgHealth};
use crate::sg::IngressRule;
use crate::tags::resource_tags;

/// Tag naming the load balancer a target group belongs to, so orphaned target groups of one
/// Service UID are never confused with those of a re-created Service of the same name.
pub const LB_NAME_TAG: &str = "kube-lb.io/load-balancer-name";

/// Cluster-level inputs.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// Cluster ID for tags.
    pub cluster_id: &'a str,
    /// Legacy `KubernetesCluster` tag mode.
    pub legacy_tag: bool,
    /// Load-balancer name (`a` + UID).
    pub lb_name: &'a str,
}

/// A Service's spec with its AWS extension, unpacked once where a call enters the provider
/// (`ensure`, `plan`) and passed down whole, so nothing below extracts the extension again
/// (or has to handle a spec parsed for another cloud).
#[derive(Debug, Clone, Copy)]
pub struct ServiceSpec<'a> {
    /// The cloud-neutral spec.
    pub spec: &'a LoadBalancerSpec,
    /// Its AWS part (`service.beta.kubernetes.io/aws-load-balancer-*`).
    pub aws: &'a AwsSpec,
}

impl<'a> ServiceSpec<'a> {
    /// `spec` with its AWS extension, or an error when it was parsed for another cloud.
    pub fn new(spec: &'a LoadBalancerSpec) -> Result<Self, AwsError> {
        let aws = spec.provider.as_aws().ok_or_else(|| {
            AwsError::Invalid("the Service was not parsed with the AWS annotations".to_string())
        })?;
        Ok(ServiceSpec { spec, aws })
    }
}

/// Checks what upstream rejects for every AWS load balancer.
pub fn validate_common(spec: &LoadBalancerSpec) -> Result<(), AwsError> {
    if spec.requested_ip.is_some() {
        return Err(AwsError::Invalid(
            "LoadBalancerIP cannot be specified for AWS ELB".to_string(),
        ));
    }
    if !matches!(spec.session_affinity, SessionAffinity::None) {
        return Err(AwsError::Invalid(
            "unsupported load balancer affinity: AWS load balancers support only sessionAffinity: None"
                .to_string(),
        ));
    }
    Ok(())
}

/// Client CIDRs as strings; `0.0.0.0/0` when unrestricted. IPv6 ranges are an error: the
/// provider builds IPv4 load balancers only (as upstream).
pub fn client_cidrs(spec: &LoadBalancerSpec) -> Result<Vec<String>, AwsError> {
    if spec.source_ranges.allows_all() {
        return Ok(vec!["0.0.0.0/0".to_string()]);
    }
    let mut cidrs = Vec::new();
    for net in &spec.source_ranges.cidrs {
        match net {
            IpNet::V4(v4) => cidrs.push(v4.trunc().to_string()),
            IpNet::V6(_) => {
                return Err(AwsError::Invalid(format!(
                    "loadBalancerSourceRanges: {net} is IPv6; AWS load balancers here are IPv4-only"
                )));
            }
        }
    }
    cidrs.sort();
    cidrs.dedup();
    Ok(cidrs)
}

fn tags(ctx: &Context<'_>, spec: &LoadBalancerSpec, aws: &AwsSpec) -> BTreeMap<String, String> {
    let mut additional = spec.extra_tags.clone();
    additional.extend(aws.additional_tags.clone());
    resource_tags(ctx.cluster_id, ctx.legacy_tag, &spec.service, &additional)
}

/// The `healthCheckNodePort` of a `Local` Service.
fn health_check_node_port(spec: &LoadBalancerSpec) -> Result<u16, AwsError> {
    match spec.traffic_policy {
        TrafficPolicy::Local {
            health_check_node_port: Some(port),
        } => Ok(port),
        _ => Err(AwsError::Invalid(
            "the health check uses healthCheckNodePort, but the Service has none allocated yet"
                .to_string(),
        )),
    }
}

/// The explicit health-check port, `None` for the traffic port.
fn explicit_health_port(
    spec: &LoadBalancerSpec,
    port: HealthCheckPort,
) -> Result<Option<u16>, AwsError> {
    match port {
        HealthCheckPort::TrafficPort => Ok(None),
        HealthCheckPort::Number(n) => Ok(Some(n)),
        HealthCheckPort::HealthCheckNodePort => health_check_node_port(spec).map(Some),
    }
}

fn clb_health_check(
    spec: &LoadBalancerSpec,
    check: &AwsHealthCheck,
    first_node_port: i32,
) -> Result<HealthCheck, AwsError> {
    let port = explicit_health_port(spec, check.port)?.map_or(first_node_port, i32::from);
    let protocol = check.protocol.as_str();
    let target = match check.protocol {
        HealthCheckProtocol::Http | HealthCheckProtocol::Https => {
            format!("{protocol}:{port}{}", check.path.as_deref().unwrap_or("/"))
        }
        HealthCheckProtocol::Tcp | HealthCheckProtocol::Ssl => format!("{protocol}:{port}"),
    };
    Ok(HealthCheck {
        target,
        interval: i32::try_from(check.interval_seconds).unwrap_or(i32::MAX),
        timeout: i32::try_from(check.timeout_seconds).unwrap_or(i32::MAX),
        healthy: i32::try_from(check.healthy_threshold).unwrap_or(i32::MAX),
        unhealthy: i32::try_from(check.unhealthy_threshold).unwrap_or(i32::MAX),
    })
}

/// Load-balancer-side inputs resolved by discovery.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Subnet IDs.
    pub subnets: Vec<String>,
    /// Security-group IDs, in attach order.
    pub security_groups: Vec<String>,
    /// Instance IDs to register.
    pub instances: BTreeSet<String>,
}

/// The Classic ELB the Service asks for.
pub fn clb(
    ctx: &Context<'_>,
    svc: ServiceSpec<'_>,
    placement: &Placement,
) -> Result<ClbDesired, AwsError> {
    let ServiceSpec { spec, aws } = svc;
    validate_common(spec)?;
    if spec.ports.iter().any(|p| p.protocol != Protocol::Tcp) {
        return Err(AwsError::Invalid(
            "Classic ELB supports only TCP ports; use aws-load-balancer-type: nlb for UDP"
                .to_string(),
        ));
    }
    let mut listeners: Vec<Listener> = aws
        .clb_listeners
        .iter()
        .filter_map(|l| {
            Some(Listener {
                lb_port: i32::from(l.lb_port),
                protocol: l.lb_protocol.as_str().to_string(),
                instance_port: i32::from(l.instance_port?),
                instance_protocol: l.instance_protocol.as_str().to_string(),
                certificate: l.ssl_certificate_id.clone(),
            })
        })
        .collect();
    if listeners.is_empty() {
        return Err(AwsError::Invalid(
            "no port has a node port; a Classic ELB needs at least one".to_string(),
        ));
    }
    let first_node_port = listeners[0].instance_port;
    listeners.sort();
    let access = &aws.access_log;
    Ok(ClbDesired {
        name: ctx.lb_name.to_string(),
        internal: spec.scheme == Scheme::Internal,
        listeners,
        health_check: clb_health_check(spec, &aws.health_check, first_node_port)?,
        attributes: Attributes {
            cross_zone: aws.cross_zone,
            access_log: AccessLog {
                enabled: access.enabled,
                bucket: access.s3_bucket_name.clone(),
                prefix: access.s3_bucket_prefix.clone(),
                emit_interval: access
                    .emit_interval_minutes
                    .and_then(|m| i32::try_from(m).ok()),
            },
            draining_enabled: aws.connection_draining.enabled,
            draining_timeout: aws
                .connection_draining
                .timeout_seconds
                .and_then(|t| i32::try_from(t).ok()),
            idle_timeout: i32::try_from(aws.idle_timeout_seconds).unwrap_or(60),
        },
        proxy_protocol: aws.proxy_protocol,
        ssl_negotiation_policy: aws.ssl_negotiation_policy.clone(),
        tags: tags(ctx, spec, aws),
        subnets: placement.subnets.iter().cloned().collect(),
        security_groups: placement.security_groups.clone(),
        instances: placement.instances.clone(),
    })
}

/// The groups a Classic ELB is given instead of a group of its own: the Service's
/// `security-groups` annotation (`annotated`), else the cloud config's `ElbSecurityGroup`
/// (`shared`); `None` when it gets its own `k8s-elb-` group.
pub fn clb_given_groups(annotated: &[String], shared: Option<&str>) -> Option<Vec<String>> {
    if !annotated.is_empty() {
        return Some(annotated.to_vec());
    }
    shared.map(|group| vec![group.to_string()])
}

/// A Classic ELB's groups: `primary` (the first of which its node rules admit), then each of
/// the `extra-security-groups` annotation's groups not among them.
pub fn with_extra_groups(mut primary: Vec<String>, extra: &[String]) -> Vec<String> {
    for group in extra {
        if !primary.contains(group) {
            primary.push(group.clone());
        }
    }
    primary
}

/// Ingress rules of the per-LB Classic ELB group: each listener port from each client CIDR,
/// plus ICMP path-MTU discovery (aws.md §4.6).
pub fn clb_security_group_rules(spec: &LoadBalancerSpec) -> Result<Vec<IngressRule>, AwsError> {
    let cidrs = client_cidrs(spec)?;
    let mut rules = Vec::new();
    for port in &spec.ports {
        if port.node_port.is_none() {
            continue;
        }
        for cidr in &cidrs {
            rules.push(IngressRule::port("tcp", port.port, cidr, None));
        }
    }
    for cidr in &cidrs {
        rules.push(IngressRule::mtu(cidr, None));
    }
    rules.sort();
    rules.dedup();
    Ok(rules)
}

fn nlb_health(spec: &LoadBalancerSpec, check: &AwsHealthCheck) -> Result<TgHealth, AwsError> {
    let protocol = match check.protocol {
        HealthCheckProtocol::Tcp | HealthCheckProtocol::Http | HealthCheckProtocol::Https => {
            check.protocol.as_str().to_string()
        }
        HealthCheckProtocol::Ssl => {
            return Err(AwsError::Invalid(
                "aws-load-balancer-healthcheck-protocol: SSL is not supported by NLB (TCP, HTTP or HTTPS)"
                    .to_string(),
            ));
        }
    };
    let http = matches!(
        check.protocol,
        HealthCheckProtocol::Http | HealthCheckProtocol::Https
    );
    Ok(TgHealth {
        protocol,
        port: explicit_health_port(spec, check.port)?
            .map_or_else(|| "traffic-port".to_string(), |n| n.to_string()),
        path: http.then(|| check.path.clone().unwrap_or_else(|| "/".to_string())),
        interval: i32::try_from(check.interval_seconds).unwrap_or(30),
        timeout: i32::try_from(check.timeout_seconds).unwrap_or(10),
        healthy: i32::try_from(check.healthy_threshold).unwrap_or(3),
        unhealthy: i32::try_from(check.unhealthy_threshold).unwrap_or(3),
    })
}

/// The NLB the Service asks for. `subnets` are in zone order; EIPs and private addresses are
/// paired with them by position, as upstream.
pub fn nlb(
    ctx: &Context<'_>,
    svc: ServiceSpec<'_>,
    subnets: &[String],
    security_groups: Vec<String>,
    instances: BTreeSet<String>,
) -> Result<NlbDesired, AwsError> {
    let ServiceSpec { spec, aws } = svc;
    validate_common(spec)?;
    for (what, count) in [
        (
            "aws-load-balancer-eip-allocations",
            aws.eip_allocations.len(),
        ),
        (
            "aws-load-balancer-private-ipv4-addresses",
            aws.private_ipv4_addresses.len(),
        ),
    ] {
        if count != 0 && count != subnets.len() {
            return Err(AwsError::Invalid(format!(
                "{what}: must have the same number of entries ({count}) as subnets ({})",
                subnets.len()
            )));
        }
    }
    let subnet_mappings = subnets
        .iter()
        .enumerate()
        .map(|(i, subnet)| SubnetMapping {
            subnet_id: subnet.clone(),
            allocation_id: aws.eip_allocations.get(i).cloned(),
            private_ipv4: aws.private_ipv4_addresses.get(i).map(|ip| ip.to_string()),
        })
        .collect();
    let lb_tags = tags(ctx, spec, aws);
    let mut tg_tags = lb_tags.clone();
    tg_tags.insert(LB_NAME_TAG.to_string(), ctx.lb_name.to_string());
    let health = nlb_health(spec, &aws.health_check)?;
    let mut tg_attributes = BTreeMap::from([(
        "proxy_protocol_v2.enabled".to_string(),
        aws.target_group_attributes
            .proxy_protocol_v2
            .unwrap_or(false)
            .to_string(),
    )]);
    if let Some(preserve) = aws.target_group_attributes.preserve_client_ip {
        tg_attributes.insert(
            "preserve_client_ip.enabled".to_string(),
            preserve.to_string(),
        );
    }
    let mut listeners: Vec<ListenerDesired> = Vec::new();
    for l in &aws.nlb_listeners {
        let Some(node_port) = l.node_port else {
            continue;
        };
        let target_protocol = l.target_protocol.as_str();
        listeners.push(ListenerDesired {
            port: i32::from(l.port),
            protocol: l.protocol.as_str().to_string(),
            certificate: l.certificate_arn.clone(),
            ssl_policy: l.ssl_policy.clone(),
            target_group: TgDesired {
                name: target_group_name(
                    &spec.service,
                    TargetGroupNameInput {
                        cluster_id: ctx.cluster_id,
                        service_port: l.port,
                        node_port,
                        target_protocol,
                        health_check_protocol: &health.protocol,
                        health_check_interval: aws.health_check.interval_seconds,
                    },
                ),
                protocol: target_protocol.to_string(),
                port: i32::from(node_port),
                health: health.clone(),
                attributes: tg_attributes.clone(),
                tags: tg_tags.clone(),
            },
        });
    }
    if listeners.is_empty() {
        return Err(AwsError::Invalid(
            "no port has a node port; an NLB in instance mode needs at least one".to_string(),
        ));
    }
    listeners.sort_by_key(|l| l.port);
    let access = &aws.access_log;
    let mut attributes = BTreeMap::from([
        (
            "load_balancing.cross_zone.enabled".to_string(),
            aws.cross_zone.to_string(),
        ),
        (
            "access_logs.s3.enabled".to_string(),
            access.enabled.to_string(),
        ),
    ]);
    if access.enabled {
        // The ELBv2 API rejects an empty bucket, so bucket and prefix go with enabled=true only.
        attributes.insert(
            "access_logs.s3.bucket".to_string(),
            access.s3_bucket_name.clone().unwrap_or_default(),
        );
        attributes.insert(
            "access_logs.s3.prefix".to_string(),
            access.s3_bucket_prefix.clone().unwrap_or_default(),
        );
    }
    Ok(NlbDesired {
        name: ctx.lb_name.to_string(),
        internal: spec.scheme == Scheme::Internal,
        subnet_mappings,
        security_groups,
        attributes,
        tags: lb_tags,
        listeners,
        instances,
    })
}

/// Inputs of the NLB node security-group rules, derived from the desired NLB and the spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NlbNodeRuleInputs {
    /// `tcp` or `udp`.
    pub client_protocol: String,
    /// Node ports.
    pub client_ports: BTreeSet<u16>,
    /// Health-check ports.
    pub health_ports: BTreeSet<u16>,
    /// Client CIDRs.
    pub client_cidrs: Vec<String>,
}

/// Node-rule inputs for an NLB (seed 001 table).
pub fn nlb_node_rule_inputs(svc: ServiceSpec<'_>) -> Result<NlbNodeRuleInputs, AwsError> {
    let ServiceSpec { spec, aws } = svc;
    let client_ports: BTreeSet<u16> = aws
        .nlb_listeners
        .iter()
        .filter_map(|l| l.node_port)
        .collect();
    let udp = spec.ports.iter().any(|p| p.protocol == Protocol::Udp);
    let health_ports = match explicit_health_port(spec, aws.health_check.port)? {
        None => client_ports.clone(),
        Some(n) => BTreeSet::from([n]),
    };
    Ok(NlbNodeRuleInputs {
        client_protocol: if udp { "udp" } else { "tcp" }.to_string(),
        client_ports,
        health_ports,
        client_cidrs: client_cidrs(spec)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn a_classic_elb_gets_the_annotated_then_the_shared_then_its_own_group_and_the_extras() {
        // (annotated, shared, extra, groups given (None: its own), final with its own "own")
        type Case<'a> = (
            &'a [&'a str],
            Option<&'a str>,
            &'a [&'a str],
            Option<&'a [&'a str]>,
            &'a [&'a str],
        );
        let cases: [Case; 4] = [
            (&[], None, &[], None, &["own"]),
            (
                &[],
                Some("sg-shared"),
                &["sg-x"],
                Some(&["sg-shared"]),
                &["sg-shared", "sg-x"],
            ),
            (
                &["sg-a", "sg-b"],
                Some("sg-shared"),
                &[],
                Some(&["sg-a", "sg-b"]),
                &["sg-a", "sg-b"],
            ),
            (
                &["sg-a"],
                None,
                &["sg-a", "sg-x"],
                Some(&["sg-a"]),
                &["sg-a", "sg-x"],
            ),
        ];
        for (annotated, shared, extra, given, want) in cases {
            let got = clb_given_groups(&ids(annotated), shared);
            assert_eq!(got, given.map(ids), "{annotated:?} {shared:?}");
            let primary = got.unwrap_or_else(|| ids(&["own"]));
            assert_eq!(with_extra_groups(primary, &ids(extra)), ids(want));
        }
    }
}

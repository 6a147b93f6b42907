//! The one place a [`LoadBalancerSpec`] (with its [`AzureSpec`] extension) becomes Azure
//! objects: which shared load balancer, the Service's frontend, its rules and probes, pool
//! members, the public IP it needs, and what the security group must allow. Pure.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_lb_provider_core::BackendNode;
use kube_lb_provider_core::annotations::{
    AzureProbeProtocol, AzureSpec, LoadBalancerSpec, Protocol, Scheme, ServiceKey, SessionAffinity,
    TrafficPolicy,
};
use kube_lb_provider_core::naming::load_balancer_name;

use crate::arm::{
    BackendAddress, BackendAddressProperties, DnsSettings, Ids, LoadBalancingRule, Probe,
    ProbeProperties, PublicIp, PublicIpProperties, RuleProperties, Sku, SubResource,
};
use crate::config::{AzureConfig, LbSku};
use crate::error::AzureError;

/// Tag naming the Services that own a public IP (comma list of `ns/name`).
pub const SERVICE_TAG: &str = "k8s-azure-service";
/// Legacy spelling of [`SERVICE_TAG`], still honoured when reading.
pub const LEGACY_SERVICE_TAG: &str = "service";
/// Tag naming the cluster that owns a public IP.
pub const CLUSTER_TAG: &str = "k8s-azure-cluster-name";
/// Legacy spelling of [`CLUSTER_TAG`].
pub const LEGACY_CLUSTER_TAG: &str = "kubernetes-cluster-name";
/// Tag naming the Service that holds a public IP's DNS label.
pub const DNS_LABEL_TAG: &str = "k8s-azure-dns-label-service";
/// Security rules kube-lb manages start with this and have a priority in
/// [`MANAGED_PRIORITY_MIN`, `MANAGED_PRIORITY_MAX`].
pub const MANAGED_RULE_PREFIX: &str = "k8s-azure-lb_";
/// Lowest priority of managed rules (allow rules are numbered upwards from here).
pub const MANAGED_PRIORITY_MIN: u32 = 500;
/// Highest priority of managed rules (deny rules are numbered downwards from 4095).
pub const MANAGED_PRIORITY_MAX: u32 = 4096;

/// Cluster-wide settings derived from the cloud config.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Cluster name (`--cluster-name`).
    pub cluster: String,
    /// Base name of the shared load balancers.
    pub lb_base_name: String,
    /// Resource group of the load balancers.
    pub lb_resource_group: String,
    /// Cluster resource group (public IPs by default).
    pub resource_group: String,
    /// Region.
    pub location: String,
    /// SKU.
    pub sku: LbSku,
    /// Virtual network and its resource group.
    pub vnet: String,
    /// Resource group of the virtual network.
    pub vnet_resource_group: String,
    /// Default subnet for internal load balancers.
    pub default_subnet: String,
    /// The cluster security group (resource group, name), if configured.
    pub security_group: Option<(String, String)>,
    /// ID builder.
    pub ids: Ids,
}

impl Settings {
    /// Settings for `cluster` from `config`.
    pub fn new(config: &AzureConfig, cluster: &str) -> Result<Settings, AzureError> {
        let lb_base_name = if config.load_balancer_name.trim().is_empty() {
            cluster.to_string()
        } else {
            config.load_balancer_name.trim().to_string()
        };
        Ok(Settings {
            cluster: cluster.to_string(),
            lb_base_name,
            lb_resource_group: config.lb_resource_group().to_string(),
            resource_group: config.resource_group.clone(),
            location: config.location.clone(),
            sku: config.sku()?,
            vnet: config.vnet_name.clone(),
            vnet_resource_group: config.vnet_resource_group().to_string(),
            default_subnet: config.subnet_name.clone(),
            security_group: (!config.security_group_name.trim().is_empty()).then(|| {
                (
                    config.security_group_resource_group().to_string(),
                    config.security_group_name.trim().to_string(),
                )
            }),
            ids: crate::arm::Ids {
                subscription: config.subscription_id.clone(),
            },
        })
    }

    /// The shared load balancer for `scheme`.
    pub fn lb_name(&self, scheme: Scheme) -> String {
        match scheme {
            Scheme::External => self.lb_base_name.clone(),
            Scheme::Internal => format!("{}-internal", self.lb_base_name),
        }
    }

    /// The shared backend pool's name (in either load balancer).
    pub fn pool_name(&self) -> &str {
        &self.cluster
    }

    /// ID of a child of load balancer `lb`.
    pub fn lb_child(&self, lb: &str, collection: &str, name: &str) -> String {
        self.ids
            .lb_child(&self.lb_resource_group, lb, collection, name)
    }
}

/// Which public IP a public frontend uses.
#[derive(Debug, Clone, PartialEq)]
pub enum PipChoice {
    /// Created and owned by kube-lb: `<cluster>-a<uid>`, with this body.
    Managed {
        /// Resource group.
        rg: String,
        /// The wanted object (no etag).
        pip: Box<PublicIp>,
    },
    /// `azure-pip-name`: an existing public IP, used as is.
    Named {
        /// Resource group.
        rg: String,
        /// Name.
        name: String,
    },
    /// `loadBalancerIP` / `azure-load-balancer-ipv4`: the existing public IP with this address.
    ByAddress {
        /// Resource group searched.
        rg: String,
        /// The address.
        ip: IpAddr,
    },
}

/// The Service's frontend.
#[derive(Debug, Clone, PartialEq)]
pub enum FrontendKind {
    /// Internet-facing, on a public IP.
    Public(PipChoice),
    /// Internal, in a subnet.
    Internal {
        /// Subnet ID.
        subnet_id: String,
        /// Subnet name (for the existence check).
        subnet: String,
        /// Requested static address.
        private_ip: Option<IpAddr>,
    },
}

/// One NSG allow entry: traffic of `protocol` from `sources` to `ports`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AllowEntry {
    /// `Tcp`, `Udp` or `*`.
    pub protocol: String,
    /// Sorted sources (CIDRs or service tags).
    pub sources: Vec<String>,
    /// Sorted destination ports.
    pub ports: Vec<String>,
}

/// What the security group must allow for the Service.
#[derive(Debug, Clone, PartialEq)]
pub struct SecurityIntent {
    /// Allow entries (empty: internal LB without ranges, the VNet defaults apply).
    pub allow: Vec<AllowEntry>,
    /// Add a deny-all rule for the Service's addresses.
    pub deny_all: bool,
    /// Extra destinations (`azure-additional-public-ips`).
    pub extra_destinations: Vec<IpAddr>,
    /// With floating IP disabled, the destinations are these node addresses instead of the
    /// frontend address.
    pub node_destinations: Option<Vec<IpAddr>>,
}

/// Everything the Service wants in Azure.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The Service.
    pub service: ServiceKey,
    /// `a<uid>`: prefix of every child the Service owns.
    pub prefix: String,
    /// The shared load balancer holding it.
    pub lb_name: String,
    /// The other shared load balancer (it must not hold the Service).
    pub other_lb_name: String,
    /// Frontend name.
    pub frontend_name: String,
    /// Frontend kind.
    pub frontend: FrontendKind,
    /// Rules (references filled in).
    pub rules: Vec<LoadBalancingRule>,
    /// Probes.
    pub probes: Vec<Probe>,
    /// Pool members.
    pub members: Vec<BackendAddress>,
    /// True: the pool must hold exactly `members` (Cluster policy, every eligible node);
    /// false: only add them (Local policy passes only nodes with endpoints; the probe on the
    /// healthCheckNodePort steers traffic, as upstream's shared pool does).
    pub exact_members: bool,
    /// NSG intent (`None`: NSG not managed for this Service).
    pub security: Option<SecurityIntent>,
}

fn frontend_name(prefix: &str, subnet: Option<&str>) -> String {
    let Some(subnet) = subnet else {
        return prefix.to_string();
    };
    let mut name: String = format!("{prefix}-{subnet}").chars().take(75).collect();
    if name.ends_with(|c: char| !c.is_ascii_alphanumeric()) {
        name.pop();
        name.push('_');
    }
    name
}

fn proto_label(protocol: Protocol) -> Result<(&'static str, &'static str), AzureError> {
    match protocol {
        Protocol::Tcp => Ok(("TCP", "Tcp")),
        Protocol::Udp => Ok(("UDP", "Udp")),
        Protocol::Sctp => Err(AzureError::User(
            "Azure Load Balancer does not support SCTP ports".into(),
        )),
    }
}

fn azure_spec(spec: &LoadBalancerSpec) -> Result<&AzureSpec, AzureError> {
    spec.provider.as_azure().ok_or_else(|| {
        AzureError::User(format!(
            "Service {} was not parsed with the Azure annotations (cloud {:?})",
            spec.service, spec.cloud
        ))
    })
}

/// Builds the desired state for `spec` forwarding to `backends`.
pub fn desired(
    settings: &Settings,
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
) -> Result<Desired, AzureError> {
    let azure = azure_spec(spec)?;
    let prefix = load_balancer_name(&spec.service.uid);
    let scheme = spec.scheme;
    let lb_name = settings.lb_name(scheme);
    let other_lb_name = settings.lb_name(match scheme {
        Scheme::External => Scheme::Internal,
        Scheme::Internal => Scheme::External,
    });
    let requested = azure.ipv4.map(IpAddr::V4).or(spec.requested_ip);
    let (frontend_name, frontend) = match scheme {
        Scheme::External => {
            let rg = azure
                .resource_group
                .clone()
                .unwrap_or_else(|| settings.resource_group.clone());
            let choice = if let Some(name) = &azure.pip_name {
                PipChoice::Named {
                    rg,
                    name: name.clone(),
                }
            } else if let Some(ip) = requested {
                PipChoice::ByAddress { rg, ip }
            } else {
                PipChoice::Managed {
                    pip: Box::new(managed_public_ip(settings, spec, azure, &prefix)),
                    rg,
                }
            };
            (frontend_name(&prefix, None), FrontendKind::Public(choice))
        }
        Scheme::Internal => {
            let subnet = azure
                .internal_subnet
                .clone()
                .unwrap_or_else(|| settings.default_subnet.clone());
            if subnet.is_empty() || settings.vnet.is_empty() {
                return Err(AzureError::User(
                    "internal load balancer needs a subnet: set azure-load-balancer-internal-subnet or subnetName and vnetName in the cloud config".into(),
                ));
            }
            let subnet_id =
                settings
                    .ids
                    .subnet(&settings.vnet_resource_group, &settings.vnet, &subnet);
            (
                frontend_name(&prefix, azure.internal_subnet.as_deref()),
                FrontendKind::Internal {
                    subnet_id,
                    subnet,
                    private_ip: requested,
                },
            )
        }
    };
    let (rules, probes) = rules_and_probes(settings, spec, azure, &lb_name, &frontend_name)?;
    let vnet_id = (!settings.vnet.is_empty()).then(|| {
        SubResource::new(
            settings
                .ids
                .virtual_network(&settings.vnet_resource_group, &settings.vnet),
        )
    });
    let mut members: Vec<BackendAddress> = backends
        .iter()
        .filter_map(|node| {
            Some(BackendAddress {
                name: node.name.clone(),
                properties: BackendAddressProperties {
                    ip_address: Some(node.internal_ip()?.to_string()),
                    virtual_network: vnet_id.clone(),
                    extra: Default::default(),
                },
            })
        })
        .collect();
    members.sort_by(|a, b| a.name.cmp(&b.name));
    let exact_members = matches!(spec.traffic_policy, TrafficPolicy::Cluster);
    let security = security_intent(settings, spec, azure, backends)?;
    Ok(Desired {
        service: spec.service.clone(),
        prefix,
        lb_name,
        other_lb_name,
        frontend_name,
        frontend,
        rules,
        probes,
        members,
        exact_members,
        security,
    })
}

fn managed_public_ip(
    settings: &Settings,
    spec: &LoadBalancerSpec,
    azure: &AzureSpec,
    prefix: &str,
) -> PublicIp {
    let mut tags: BTreeMap<String, String> = azure.pip_tags.clone();
    tags.insert(SERVICE_TAG.into(), spec.service.to_string());
    tags.insert(CLUSTER_TAG.into(), settings.cluster.clone());
    let label = azure.dns_label_name.clone().filter(|l| !l.is_empty());
    if label.is_some() {
        tags.insert(DNS_LABEL_TAG.into(), spec.service.to_string());
    }
    let mut name: String = format!("{}-{prefix}", settings.cluster);
    name.truncate(75);
    PublicIp {
        name,
        location: settings.location.clone(),
        sku: Some(Sku {
            name: settings.sku.as_str().into(),
            tier: Some("Regional".into()),
        }),
        tags,
        properties: PublicIpProperties {
            allocation_method: Some("Static".into()),
            version: Some("IPv4".into()),
            dns_settings: label.map(|l| DnsSettings {
                domain_name_label: Some(l),
                extra: Default::default(),
            }),
            public_ip_prefix: azure.pip_prefix_id.clone().map(SubResource::new),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn rules_and_probes(
    settings: &Settings,
    spec: &LoadBalancerSpec,
    azure: &AzureSpec,
    lb: &str,
    frontend: &str,
) -> Result<(Vec<LoadBalancingRule>, Vec<Probe>), AzureError> {
    let standard = settings.sku == LbSku::Standard;
    let floating = !azure.disable_floating_ip;
    let frontend_id = SubResource::new(settings.lb_child(lb, "frontendIPConfigurations", frontend));
    let pool_id =
        SubResource::new(settings.lb_child(lb, "backendAddressPools", settings.pool_name()));
    let probe_ref = |name: &str| SubResource::new(settings.lb_child(lb, "probes", name));
    let distribution = match spec.session_affinity {
        SessionAffinity::ClientIP { .. } => "SourceIP",
        SessionAffinity::None => "Default",
    };
    let probe_protocol = |p: AzureProbeProtocol| match p {
        AzureProbeProtocol::Tcp => "Tcp",
        AzureProbeProtocol::Http => "Http",
        AzureProbeProtocol::Https => "Https",
    };
    let make_probe = |name: String,
                      protocol: &str,
                      port: u16,
                      path: Option<String>,
                      interval: u32,
                      threshold: u32| Probe {
        name,
        properties: ProbeProperties {
            protocol: protocol.to_string(),
            port,
            request_path: if protocol == "Tcp" { None } else { path },
            interval_in_seconds: Some(interval),
            probe_threshold: Some(threshold),
            extra: Default::default(),
        },
        ..Default::default()
    };
    let mut rules = Vec::new();
    let mut probes: Vec<Probe> = Vec::new();
    // Local: one HTTP probe on the healthCheckNodePort, shared by every rule of the Service.
    let local_probe = match spec.traffic_policy {
        TrafficPolicy::Local {
            health_check_node_port,
        } => {
            let Some(port) = health_check_node_port else {
                return Err(AzureError::User(
                    "externalTrafficPolicy Local needs spec.healthCheckNodePort".into(),
                ));
            };
            let probe = make_probe(
                format!("{frontend}-TCP-{port}"),
                "Http",
                port,
                Some("/healthz".into()),
                azure.health_probe.interval_seconds,
                azure.health_probe.num_of_probe,
            );
            let reference = probe_ref(&probe.name);
            probes.push(probe);
            Some(reference)
        }
        TrafficPolicy::Cluster => None,
    };
    let ha_ports = azure.high_availability_ports && spec.scheme == Scheme::Internal && standard;
    for port in &spec.ports {
        let (label, protocol) = proto_label(port.protocol)?;
        let overrides = azure
            .port_overrides
            .get(&port.port.to_string())
            .or_else(|| port.name.as_ref().and_then(|n| azure.port_overrides.get(n)));
        if overrides.is_some_and(|o| o.no_lb_rule) {
            continue;
        }
        let name = format!("{frontend}-{label}-{}", port.port);
        let probe = match &local_probe {
            Some(reference) => Some(reference.clone()),
            None if port.protocol == Protocol::Tcp
                && !overrides.is_some_and(|o| o.no_probe_rule) =>
            {
                let probe_port = overrides.and_then(|o| o.port).or(port.node_port);
                match probe_port {
                    Some(probe_port) => {
                        let global = &azure.health_probe;
                        let protocol = probe_protocol(
                            overrides
                                .and_then(|o| o.protocol)
                                .unwrap_or(global.protocol),
                        );
                        let path = overrides
                            .and_then(|o| o.request_path.clone())
                            .unwrap_or_else(|| global.request_path.clone());
                        let probe = make_probe(
                            name.clone(),
                            protocol,
                            probe_port,
                            Some(if path.is_empty() { "/".into() } else { path }),
                            overrides
                                .and_then(|o| o.interval_seconds)
                                .unwrap_or(global.interval_seconds),
                            overrides
                                .and_then(|o| o.num_of_probe)
                                .unwrap_or(global.num_of_probe),
                        );
                        let reference = probe_ref(&probe.name);
                        probes.push(probe);
                        Some(reference)
                    }
                    None => None,
                }
            }
            None => None,
        };
        let backend_port = if floating {
            port.port
        } else {
            port.node_port.ok_or_else(|| {
                AzureError::User(format!(
                    "port {} has no nodePort, which azure-disable-load-balancer-floating-ip needs",
                    port.port
                ))
            })?
        };
        let tcp = port.protocol == Protocol::Tcp;
        rules.push(LoadBalancingRule {
            name,
            properties: RuleProperties {
                frontend_ip_configuration: Some(frontend_id.clone()),
                backend_address_pool: Some(pool_id.clone()),
                probe,
                protocol: if ha_ports {
                    "All".into()
                } else {
                    protocol.into()
                },
                frontend_port: if ha_ports { 0 } else { port.port },
                backend_port: Some(if ha_ports { 0 } else { backend_port }),
                idle_timeout_in_minutes: (tcp || ha_ports)
                    .then_some(azure.tcp_idle_timeout_minutes),
                enable_floating_ip: Some(floating),
                enable_tcp_reset: ((tcp || ha_ports) && standard)
                    .then_some(!azure.disable_tcp_reset),
                load_distribution: Some(distribution.into()),
                extra: Default::default(),
            },
            ..Default::default()
        });
        if ha_ports {
            // One `All`/0 rule carries every port; it is named after the first port.
            break;
        }
    }
    Ok((rules, probes))
}

fn security_intent(
    settings: &Settings,
    spec: &LoadBalancerSpec,
    azure: &AzureSpec,
    backends: &[BackendNode],
) -> Result<Option<SecurityIntent>, AzureError> {
    if azure.disable_nsg_rule || settings.security_group.is_none() {
        return Ok(None);
    }
    let mut sources: Vec<String> = spec
        .source_ranges
        .cidrs
        .iter()
        .map(ToString::to_string)
        .collect();
    sources.extend(azure.allowed_ip_ranges.iter().map(ToString::to_string));
    sources.extend(azure.allowed_service_tags.iter().cloned());
    if sources.is_empty() && spec.scheme == Scheme::External {
        sources.push("Internet".into());
    }
    sources.sort();
    sources.dedup();
    let floating = !azure.disable_floating_ip;
    let mut by_protocol: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let ha_ports = azure.high_availability_ports
        && spec.scheme == Scheme::Internal
        && settings.sku == LbSku::Standard;
    for port in &spec.ports {
        let (_, protocol) = proto_label(port.protocol)?;
        let skipped = azure
            .port_overrides
            .get(&port.port.to_string())
            .or_else(|| port.name.as_ref().and_then(|n| azure.port_overrides.get(n)))
            .is_some_and(|o| o.no_lb_rule);
        if skipped {
            continue;
        }
        let number = if floating {
            Some(port.port)
        } else {
            port.node_port
        };
        let protocol = if ha_ports { "*" } else { protocol };
        if let Some(number) = number {
            by_protocol
                .entry(protocol.to_string())
                .or_default()
                .push(number.to_string());
        }
    }
    let allow = if sources.is_empty() {
        Vec::new()
    } else {
        by_protocol
            .into_iter()
            .map(|(protocol, mut ports)| {
                ports.sort_by_key(|p| p.parse::<u32>().unwrap_or(u32::MAX));
                ports.dedup();
                AllowEntry {
                    protocol,
                    sources: sources.clone(),
                    ports,
                }
            })
            .collect()
    };
    let node_destinations = (!floating).then(|| {
        backends
            .iter()
            .filter_map(BackendNode::internal_ip)
            .collect()
    });
    Ok(Some(SecurityIntent {
        allow,
        // A deny-all on node addresses would cut every Service off the nodes, so with floating
        // IP disabled (traffic addressed to nodes) the deny rule is not written.
        deny_all: azure.deny_all_except_source_ranges && floating,
        extra_destinations: azure.additional_public_ips.clone(),
        node_destinations,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings() -> Settings {
        crate::test_support::settings_of("k8s")
    }

    fn spec(annotations: serde_json::Value, extra: serde_json::Value) -> LoadBalancerSpec {
        crate::test_support::spec("n", "s", "u-1", annotations, extra)
    }

    /// (rule name, protocol, frontend port, backend port, probe name)
    type RuleRow = (String, String, u16, Option<u16>, Option<String>);

    fn rows(d: &Desired) -> Vec<RuleRow> {
        d.rules
            .iter()
            .map(|r| {
                let p = &r.properties;
                let probe = p
                    .probe
                    .as_ref()
                    .map(|s| crate::arm::name_of(&s.id).to_string());
                (
                    r.name.clone(),
                    p.protocol.clone(),
                    p.frontend_port,
                    p.backend_port,
                    probe,
                )
            })
            .collect()
    }

    fn row(name: &str, protocol: &str, port: u16, backend: u16, probe: Option<&str>) -> RuleRow {
        (
            name.into(),
            protocol.into(),
            port,
            Some(backend),
            probe.map(str::to_string),
        )
    }

    #[test]
    fn rules_and_probes_per_shape() {
        let cases = [
            (
                "cluster: TCP probed on its nodePort, UDP unprobed",
                spec(json!({}), json!({})),
                "k8s",
                vec![
                    row("au1-TCP-80", "Tcp", 80, 80, Some("au1-TCP-80")),
                    row("au1-UDP-53", "Udp", 53, 53, None),
                ],
                vec![("au1-TCP-80", "Tcp", 30080)],
            ),
            (
                "local: one HTTP probe on the healthCheckNodePort for every rule",
                spec(
                    json!({}),
                    json!({"externalTrafficPolicy": "Local", "healthCheckNodePort": 32100}),
                ),
                "k8s",
                vec![
                    row("au1-TCP-80", "Tcp", 80, 80, Some("au1-TCP-32100")),
                    row("au1-UDP-53", "Udp", 53, 53, Some("au1-TCP-32100")),
                ],
                vec![("au1-TCP-32100", "Http", 32100)],
            ),
            (
                "internal on an annotated subnet, floating IP off",
                spec(
                    json!({"azure-load-balancer-internal": "true", "azure-load-balancer-internal-subnet": "apps",
                        "azure-disable-load-balancer-floating-ip": "true"}),
                    json!({}),
                ),
                "k8s-internal",
                vec![
                    row("au1-apps-TCP-80", "Tcp", 80, 30080, Some("au1-apps-TCP-80")),
                    row("au1-apps-UDP-53", "Udp", 53, 30053, None),
                ],
                vec![("au1-apps-TCP-80", "Tcp", 30080)],
            ),
            (
                "HA ports: one All rule named after the first port",
                spec(
                    json!({"azure-load-balancer-internal": "true", "azure-load-balancer-enable-high-availability-ports": "true"}),
                    json!({}),
                ),
                "k8s-internal",
                vec![row("au1-TCP-80", "All", 0, 0, Some("au1-TCP-80"))],
                vec![("au1-TCP-80", "Tcp", 30080)],
            ),
            (
                "per-port probe override and no rule for dns",
                spec(
                    json!({"port_80_health-probe_protocol": "Https", "port_80_health-probe_port": "31443",
                        "port_53_no_lb_rule": "true"}),
                    json!({}),
                ),
                "k8s",
                vec![row("au1-TCP-80", "Tcp", 80, 80, Some("au1-TCP-80"))],
                vec![("au1-TCP-80", "Https", 31443)],
            ),
        ];
        let settings = settings();
        for (what, spec, lb, want_rules, want_probes) in cases {
            let d = desired(&settings, &spec, &[]).unwrap();
            assert_eq!(d.lb_name, lb, "{what}");
            assert_eq!(rows(&d), want_rules, "{what}");
            let probes: Vec<(&str, &str, u16)> = d
                .probes
                .iter()
                .map(|p| {
                    (
                        p.name.as_str(),
                        p.properties.protocol.as_str(),
                        p.properties.port,
                    )
                })
                .collect();
            assert_eq!(probes, want_probes, "{what}");
        }
    }

    #[test]
    fn security_sources() {
        let settings = settings();
        let sources = |spec: LoadBalancerSpec| -> Vec<Vec<String>> {
            let d = desired(&settings, &spec, &[]).unwrap();
            d.security
                .map(|s| s.allow.into_iter().map(|e| e.sources).collect())
                .unwrap_or_default()
        };
        assert_eq!(
            sources(spec(json!({}), json!({}))),
            vec![vec!["Internet".to_string()]; 2]
        );
        assert!(
            sources(spec(
                json!({"azure-load-balancer-internal": "true"}),
                json!({})
            ))
            .is_empty()
        );
        assert_eq!(
            sources(spec(
                json!({"azure-allowed-service-tags": "AzureCloud"}),
                json!({"loadBalancerSourceRanges": ["10.1.0.0/16"]})
            ))[0],
            vec!["10.1.0.0/16".to_string(), "AzureCloud".to_string()]
        );
        assert!(
            desired(
                &settings,
                &spec(
                    json!({"azure-disable-load-balancer-nsg-rule": "true"}),
                    json!({})
                ),
                &[]
            )
            .unwrap()
            .security
            .is_none()
        );
    }

    #[test]
    fn frontend_names() {
        let prefix = "a8ae4a1c26b2e11e9a9231681be663d3";
        assert_eq!(frontend_name(prefix, None), prefix);
        assert_eq!(
            frontend_name(prefix, Some("apps")),
            format!("{prefix}-apps")
        );
        let long = "s".repeat(60);
        let name = frontend_name(prefix, Some(&format!("{long}-x")));
        assert!(name.len() <= 75);
        let cut = frontend_name(prefix, Some(&format!("{}-yy", "s".repeat(41))));
        assert_eq!(cut.len(), 75);
        assert!(cut.ends_with('_'), "{cut}");
    }
}

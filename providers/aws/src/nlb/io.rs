//! NLB reads (observe) and writes (apply).

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_elasticloadbalancingv2::types as v2;

use crate::calls::ops;
use crate::clients::Clients;
use crate::error::AwsError;
use crate::nlb::plan::{
    NlbAction, NlbDesired, NlbObserved, ObservedListener, ObservedTg, SubnetMapping, TgHealth,
    TgRef,
};

/// The load balancer's ARN, DNS name, scheme and subnet mappings; `None` when absent.
pub async fn describe(clients: &Clients, name: &str) -> Result<Option<NlbObserved>, AwsError> {
    let response = clients
        .calls
        .run(ops::V2_DESCRIBE_LOAD_BALANCERS, || {
            clients.elbv2.describe_load_balancers().names(name).send()
        })
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) if e.has_code(&["LoadBalancerNotFound"]) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(response.load_balancers().first().and_then(observed_from_lb))
}

/// What a listing already read of one NLB: its target groups (by ARN) and the tags of it and
/// of them (by ARN). [`observe_details`] reads only what is missing.
#[derive(Debug, Clone, Default)]
pub struct Prefetched {
    /// Target groups by ARN.
    pub target_groups: BTreeMap<String, ObservedTg>,
    /// Tags by ARN.
    pub tags: BTreeMap<String, BTreeMap<String, String>>,
}

/// Every load balancer (ELBv2) of the account and region whose name `keep` accepts, with the
/// target groups forwarding to them and the tags of both, read together (paged listings, tags
/// in batches of 20): the first pass after a restart reads them in a few calls instead of
/// several per load balancer.
pub async fn list(
    clients: &Clients,
    keep: impl Fn(&str) -> bool,
) -> Result<BTreeMap<String, (NlbObserved, Prefetched)>, AwsError> {
    let mut found: BTreeMap<String, (NlbObserved, Prefetched)> = BTreeMap::new();
    for lb in describe_all_lbs(clients).await? {
        if let (Some(name), Some(observed)) = (lb.load_balancer_name(), observed_from_lb(&lb))
            && keep(name)
        {
            found.insert(name.to_string(), (observed, Prefetched::default()));
        }
    }
    if found.is_empty() {
        return Ok(found);
    }
    let by_arn: BTreeMap<String, String> = found
        .iter()
        .map(|(name, (observed, _))| (observed.arn.clone(), name.clone()))
        .collect();
    for tg in describe_all_target_groups(clients).await? {
        let Some(observed_tg) = tg_from_sdk(&tg) else {
            continue;
        };
        for lb_arn in tg.load_balancer_arns() {
            if let Some((_, prefetched)) = by_arn.get(lb_arn).and_then(|n| found.get_mut(n)) {
                prefetched
                    .target_groups
                    .insert(observed_tg.arn.clone(), observed_tg.clone());
            }
        }
    }
    let arns: Vec<String> = found
        .values()
        .flat_map(|(observed, prefetched)| {
            std::iter::once(observed.arn.clone()).chain(prefetched.target_groups.keys().cloned())
        })
        .collect();
    let tags = read_tags(clients, &arns).await?;
    for (observed, prefetched) in found.values_mut() {
        for arn in std::iter::once(&observed.arn).chain(prefetched.target_groups.keys()) {
            if let Some(tags) = tags.get(arn) {
                prefetched.tags.insert(arn.clone(), tags.clone());
            }
        }
    }
    Ok(found)
}

/// Every ELBv2 load balancer of the account and region, as AWS returns them (paged, 400 per
/// call).
pub async fn describe_all_lbs(clients: &Clients) -> Result<Vec<v2::LoadBalancer>, AwsError> {
    clients
        .calls
        .run_paged(
            ops::V2_DESCRIBE_LOAD_BALANCERS,
            |marker| {
                clients
                    .elbv2
                    .describe_load_balancers()
                    .page_size(400)
                    .set_marker(marker)
                    .send()
            },
            |page| {
                let next = page.next_marker().map(str::to_string);
                (page.load_balancers().to_vec(), next)
            },
        )
        .await
}

/// Every target group of the account and region, as AWS returns them (paged, 400 per call),
/// attached or not.
pub async fn describe_all_target_groups(
    clients: &Clients,
) -> Result<Vec<v2::TargetGroup>, AwsError> {
    clients
        .calls
        .run_paged(
            ops::V2_DESCRIBE_TARGET_GROUPS,
            |marker| {
                clients
                    .elbv2
                    .describe_target_groups()
                    .page_size(400)
                    .set_marker(marker)
                    .send()
            },
            |page| {
                let next = page.next_marker().map(str::to_string);
                (page.target_groups().to_vec(), next)
            },
        )
        .await
}

/// Everything of one description except listeners, target groups, attributes and tags.
fn observed_from_lb(lb: &v2::LoadBalancer) -> Option<NlbObserved> {
    let arn = lb.load_balancer_arn()?;
    let addresses_reported = lb
        .availability_zones()
        .iter()
        .any(|az| !az.load_balancer_addresses().is_empty());
    let subnet_mappings = lb
        .availability_zones()
        .iter()
        .filter_map(|az| {
            let address = az.load_balancer_addresses().first();
            Some(SubnetMapping {
                subnet_id: az.subnet_id()?.to_string(),
                allocation_id: address.and_then(|a| a.allocation_id()).map(str::to_string),
                private_ipv4: address
                    .and_then(|a| a.private_ipv4_address())
                    .map(str::to_string),
            })
        })
        .collect();
    Some(NlbObserved {
        arn: arn.to_string(),
        dns_name: lb.dns_name().map(str::to_string),
        internal: lb.scheme().map(|s| s.as_str()) == Some("internal"),
        subnet_mappings,
        addresses_reported,
        listeners: Vec::new(),
        target_groups: Vec::new(),
        attributes: None,
        tags: None,
    })
}

/// Fills listeners, target groups (with targets, attributes and tags), LB attributes and tags.
pub async fn observe_details(
    clients: &Clients,
    observed: &mut NlbObserved,
    prefetched: Option<&Prefetched>,
) -> Result<(), AwsError> {
    let arn = observed.arn.clone();
    let listeners = clients
        .calls
        .run(ops::V2_DESCRIBE_LISTENERS, || {
            clients
                .elbv2
                .describe_listeners()
                .load_balancer_arn(&arn)
                .send()
        })
        .await?;
    observed.listeners = listeners
        .listeners()
        .iter()
        .filter_map(|l| {
            Some(ObservedListener {
                arn: l.listener_arn()?.to_string(),
                port: l.port()?,
                protocol: l.protocol()?.as_str().to_string(),
                certificate: l
                    .certificates()
                    .first()
                    .and_then(|c| c.certificate_arn())
                    .map(str::to_string),
                ssl_policy: l.ssl_policy().map(str::to_string),
                target_group_arn: l
                    .default_actions()
                    .iter()
                    .find_map(|a| a.target_group_arn())
                    .map(str::to_string),
            })
        })
        .collect();
    // The listeners' forward targets are the target groups that matter; describing them by
    // ARN also works where the LB-ARN filter lags behind a ModifyListener (moto does).
    let forwarded: Vec<String> = observed
        .listeners
        .iter()
        .filter_map(|l| l.target_group_arn.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut target_groups: Vec<ObservedTg> = forwarded
        .iter()
        .filter_map(|arn| prefetched.and_then(|p| p.target_groups.get(arn)).cloned())
        .collect();
    let missing: Vec<String> = forwarded
        .iter()
        .filter(|arn| !target_groups.iter().any(|tg| &tg.arn == *arn))
        .cloned()
        .collect();
    if !missing.is_empty() {
        match clients
            .calls
            .run(ops::V2_DESCRIBE_TARGET_GROUPS, || {
                clients
                    .elbv2
                    .describe_target_groups()
                    .set_target_group_arns(Some(missing.clone()))
                    .send()
            })
            .await
        {
            Ok(groups) => {
                target_groups.extend(groups.target_groups().iter().filter_map(tg_from_sdk));
            }
            // One of them was deleted behind our back: the plan replaces it.
            Err(e) if e.has_code(&["TargetGroupNotFound"]) => {}
            Err(e) => return Err(e),
        }
    }
    for tg in &mut target_groups {
        tg.targets = Some(read_targets(clients, &tg.arn).await?);
        let response = clients
            .calls
            .run(ops::V2_DESCRIBE_TG_ATTRIBUTES, || {
                clients
                    .elbv2
                    .describe_target_group_attributes()
                    .target_group_arn(&tg.arn)
                    .send()
            })
            .await?;
        tg.attributes = Some(
            response
                .attributes()
                .iter()
                .filter_map(|a| Some((a.key()?.to_string(), a.value().unwrap_or("").to_string())))
                .collect(),
        );
    }
    let attributes = clients
        .calls
        .run(ops::V2_DESCRIBE_LB_ATTRIBUTES, || {
            clients
                .elbv2
                .describe_load_balancer_attributes()
                .load_balancer_arn(&arn)
                .send()
        })
        .await?;
    observed.attributes = Some(
        attributes
            .attributes()
            .iter()
            .filter_map(|a| Some((a.key()?.to_string(), a.value().unwrap_or("").to_string())))
            .collect(),
    );
    let mut arns: Vec<String> = vec![arn.clone()];
    arns.extend(target_groups.iter().map(|t| t.arn.clone()));
    let known = prefetched.map(|p| &p.tags);
    let unknown: Vec<String> = arns
        .iter()
        .filter(|arn| !known.is_some_and(|tags| tags.contains_key(*arn)))
        .cloned()
        .collect();
    let mut tags = if unknown.is_empty() {
        BTreeMap::new()
    } else {
        read_tags(clients, &unknown).await?
    };
    if let Some(known) = known {
        for arn in &arns {
            if let Some(listed) = known.get(arn) {
                tags.entry(arn.clone()).or_insert_with(|| listed.clone());
            }
        }
    }
    observed.tags = Some(tags.get(&arn).cloned().unwrap_or_default());
    for tg in &mut target_groups {
        tg.tags = Some(tags.get(&tg.arn).cloned().unwrap_or_default());
    }
    observed.target_groups = target_groups;
    Ok(())
}

/// Tags of up to 20 resources per call.
pub async fn read_tags(
    clients: &Clients,
    arns: &[String],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, AwsError> {
    let mut all = BTreeMap::new();
    for chunk in arns.chunks(20) {
        let response = clients
            .calls
            .run(ops::V2_DESCRIBE_TAGS, || {
                clients
                    .elbv2
                    .describe_tags()
                    .set_resource_arns(Some(chunk.to_vec()))
                    .send()
            })
            .await?;
        for description in response.tag_descriptions() {
            if let Some(arn) = description.resource_arn() {
                all.insert(
                    arn.to_string(),
                    description
                        .tags()
                        .iter()
                        .filter_map(|t| {
                            Some((t.key()?.to_string(), t.value().unwrap_or("").to_string()))
                        })
                        .collect(),
                );
            }
        }
    }
    Ok(all)
}

/// Converts the SDK target group.
pub fn tg_from_sdk(tg: &v2::TargetGroup) -> Option<ObservedTg> {
    Some(ObservedTg {
        arn: tg.target_group_arn()?.to_string(),
        name: tg.target_group_name().unwrap_or_default().to_string(),
        protocol: tg
            .protocol()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default(),
        port: tg.port().unwrap_or_default(),
        health: TgHealth {
            protocol: tg
                .health_check_protocol()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default(),
            port: tg.health_check_port().unwrap_or("traffic-port").to_string(),
            path: tg.health_check_path().map(str::to_string),
            interval: tg.health_check_interval_seconds().unwrap_or_default(),
            timeout: tg.health_check_timeout_seconds().unwrap_or_default(),
            healthy: tg.healthy_threshold_count().unwrap_or_default(),
            unhealthy: tg.unhealthy_threshold_count().unwrap_or_default(),
        },
        targets: None,
        attributes: None,
        tags: None,
    })
}

/// Registered targets, ignoring those already draining.
pub async fn read_targets(
    clients: &Clients,
    arn: &str,
) -> Result<BTreeSet<(String, i32)>, AwsError> {
    let response = clients
        .calls
        .run(ops::V2_DESCRIBE_TARGET_HEALTH, || {
            clients
                .elbv2
                .describe_target_health()
                .target_group_arn(arn)
                .send()
        })
        .await?;
    Ok(response
        .target_health_descriptions()
        .iter()
        .filter(|d| {
            d.target_health().and_then(|h| h.state()) != Some(&v2::TargetHealthStateEnum::Draining)
        })
        .filter_map(|d| {
            let target = d.target()?;
            Some((target.id()?.to_string(), target.port()?))
        })
        .collect())
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Result<Vec<v2::Tag>, AwsError> {
    Ok(tags
        .iter()
        .map(|(k, v)| v2::Tag::builder().key(k).value(v).build())
        .collect())
}

fn sdk_targets(targets: &[(String, i32)]) -> Result<Vec<v2::TargetDescription>, AwsError> {
    Ok(targets
        .iter()
        .map(|(id, port)| v2::TargetDescription::builder().id(id).port(*port).build())
        .collect())
}

fn forward(tg: &str) -> Result<v2::Action, AwsError> {
    Ok(v2::Action::builder()
        .r#type(v2::ActionTypeEnum::Forward)
        .target_group_arn(tg)
        .build())
}

/// Resources created while applying: the LB and new target groups.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// LB ARN.
    pub arn: Option<String>,
    /// DNS name when (re)created.
    pub dns_name: Option<String>,
    /// New target groups per desired listener index.
    pub new_tgs: BTreeMap<usize, String>,
    /// When the create found this Service's NLB from an earlier attempt (its response was
    /// lost): that NLB as observed before the rest of the plan was made again against it.
    pub adopted: Option<NlbObserved>,
}

/// A load balancer that `CreateLoadBalancer` made or found.
struct Created {
    arn: String,
    dns: Option<String>,
    adopted: Option<NlbObserved>,
}

/// The name is not held by an NLB but a `Duplicate…Name` says it is in use: a Classic ELB holds
/// it (names are shared). This Service's own one is being replaced by a kind change and goes
/// first, so the create is retried; anyone else's is a [`AwsError::NameTaken`]. Called with an
/// ELB-side `error` by the Classic ELB create for the mirror case.
pub(crate) async fn name_held_by_nlb(
    clients: &Clients,
    operation: crate::calls::Op,
    name: &str,
    desired_tags: &BTreeMap<String, String>,
    error: AwsError,
) -> Result<Option<String>, AwsError> {
    let Some(nlb) = describe(clients, name).await? else {
        return Err(error);
    };
    let tags = read_tags(clients, std::slice::from_ref(&nlb.arn)).await?;
    let tags = tags.get(&nlb.arn).cloned().unwrap_or_default();
    crate::owner::check_resource(&tags, desired_tags).map_err(|owner| AwsError::NameTaken {
        operation: operation.name,
        resource: "NLB",
        name: name.to_string(),
        owner,
    })?;
    Err(AwsError::Unexpected(format!(
        "this Service's NLB {name} still holds the name; it is removed before a Classic ELB is created"
    )))
}

/// The mirror of [`name_held_by_nlb`] for an NLB create whose name a Classic ELB holds.
async fn name_held_by_clb(
    clients: &Clients,
    name: &str,
    desired_tags: &BTreeMap<String, String>,
    error: AwsError,
) -> Result<Created, AwsError> {
    if crate::clb::io::describe(clients, name).await?.is_none() {
        return Err(error);
    }
    let tags = crate::clb::io::read_tags(clients, name).await?;
    crate::owner::check_resource(&tags, desired_tags).map_err(|owner| AwsError::NameTaken {
        operation: ops::V2_CREATE_LOAD_BALANCER.name,
        resource: "Classic ELB",
        name: name.to_string(),
        owner,
    })?;
    Err(AwsError::Unexpected(format!(
        "this Service's Classic ELB {name} still holds the name; it is removed before an NLB is created"
    )))
}

async fn create_lb(clients: &Clients, desired: &NlbDesired) -> Result<Created, AwsError> {
    let mappings: Vec<v2::SubnetMapping> = desired
        .subnet_mappings
        .iter()
        .map(|m| {
            v2::SubnetMapping::builder()
                .subnet_id(&m.subnet_id)
                .set_allocation_id(m.allocation_id.clone())
                .set_private_ipv4_address(m.private_ipv4.clone())
                .build()
        })
        .collect();
    let tags = sdk_tags(&desired.tags)?;
    let groups = (!desired.security_groups.is_empty()).then(|| desired.security_groups.clone());
    let response = clients
        .calls
        .run(ops::V2_CREATE_LOAD_BALANCER, || {
            clients
                .elbv2
                .create_load_balancer()
                .name(&desired.name)
                .r#type(v2::LoadBalancerTypeEnum::Network)
                .scheme(if desired.internal {
                    v2::LoadBalancerSchemeEnum::Internal
                } else {
                    v2::LoadBalancerSchemeEnum::InternetFacing
                })
                .set_subnet_mappings(Some(mappings.clone()))
                .set_security_groups(groups.clone())
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await;
    let response = match response {
        Ok(response) => response,
        Err(e) if e.has_code(crate::clb::io::DUPLICATE_NAME) => {
            // Usually our own NLB whose create response was lost: adopt it when its tags say
            // it is this Service's, and observe it fully so the rest is planned against it.
            let Some(mut seen) = describe(clients, &desired.name).await? else {
                return name_held_by_clb(clients, &desired.name, &desired.tags, e).await;
            };
            observe_details(clients, &mut seen, None).await?;
            let tags = seen.tags.clone().unwrap_or_default();
            crate::owner::check_resource(&tags, &desired.tags).map_err(|owner| {
                AwsError::NameTaken {
                    operation: ops::V2_CREATE_LOAD_BALANCER.name,
                    resource: "NLB",
                    name: desired.name.clone(),
                    owner,
                }
            })?;
            tracing::info!(lb = %desired.name, "adopting this Service's NLB left by an earlier create");
            return Ok(Created {
                arn: seen.arn.clone(),
                dns: seen.dns_name.clone(),
                adopted: Some(seen),
            });
        }
        Err(e) => return Err(e),
    };
    let lb = response.load_balancers().first().ok_or_else(|| {
        AwsError::Unexpected("CreateLoadBalancer returned no load balancer".into())
    })?;
    let arn = lb
        .load_balancer_arn()
        .ok_or_else(|| AwsError::Unexpected("CreateLoadBalancer returned no ARN".into()))?;
    Ok(Created {
        arn: arn.to_string(),
        dns: lb.dns_name().map(str::to_string),
        adopted: None,
    })
}

async fn create_tg(
    clients: &Clients,
    vpc: &str,
    desired: &NlbDesired,
    index: usize,
) -> Result<String, AwsError> {
    let tg = &desired.listeners[index].target_group;
    let tags = sdk_tags(&tg.tags)?;
    let http = tg.health.protocol.eq_ignore_ascii_case("HTTP")
        || tg.health.protocol.eq_ignore_ascii_case("HTTPS");
    let result = clients
        .calls
        .run(ops::V2_CREATE_TARGET_GROUP, || {
            clients
                .elbv2
                .create_target_group()
                .name(&tg.name)
                .protocol(v2::ProtocolEnum::from(tg.protocol.as_str()))
                .port(tg.port)
                .vpc_id(vpc)
                .target_type(v2::TargetTypeEnum::Instance)
                .health_check_protocol(v2::ProtocolEnum::from(tg.health.protocol.as_str()))
                .health_check_port(&tg.health.port)
                .set_health_check_path(if http { tg.health.path.clone() } else { None })
                .health_check_interval_seconds(tg.health.interval)
                .health_check_timeout_seconds(tg.health.timeout)
                .healthy_threshold_count(tg.health.healthy)
                .unhealthy_threshold_count(tg.health.unhealthy)
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await;
    match result {
        Ok(response) => response
            .target_groups()
            .first()
            .and_then(|t| t.target_group_arn())
            .map(str::to_string)
            .ok_or_else(|| AwsError::Unexpected("CreateTargetGroup returned no ARN".into())),
        // Left over from an interrupted earlier attempt (or a lost response): same
        // deterministic name; adopted when its tags say it is this Service's.
        Err(e) if e.has_code(&["DuplicateTargetGroupName"]) => {
            let response = clients
                .calls
                .run(ops::V2_DESCRIBE_TARGET_GROUPS, || {
                    clients
                        .elbv2
                        .describe_target_groups()
                        .names(&tg.name)
                        .send()
                })
                .await?;
            let Some(arn) = response
                .target_groups()
                .first()
                .and_then(|t| t.target_group_arn())
                .map(str::to_string)
            else {
                return Err(e);
            };
            let tags = read_tags(clients, std::slice::from_ref(&arn)).await?;
            let tags = tags.get(&arn).cloned().unwrap_or_default();
            crate::owner::check_resource(&tags, &tg.tags).map_err(|owner| AwsError::NameTaken {
                operation: ops::V2_CREATE_TARGET_GROUP.name,
                resource: "target group",
                name: tg.name.clone(),
                owner,
            })?;
            tracing::info!(target_group = %tg.name, "adopting this Service's target group left by an earlier create");
            Ok(arn)
        }
        Err(e) => Err(e),
    }
}

async fn create_listener(
    clients: &Clients,
    lb_arn: &str,
    desired: &NlbDesired,
    index: usize,
    tg: &str,
) -> Result<(), AwsError> {
    let l = &desired.listeners[index];
    let action = forward(tg)?;
    let certificates = l
        .certificate
        .as_ref()
        .map(|c| vec![v2::Certificate::builder().certificate_arn(c).build()]);
    let tags = sdk_tags(&desired.tags)?;
    let created = clients
        .calls
        .run(ops::V2_CREATE_LISTENER, || {
            clients
                .elbv2
                .create_listener()
                .load_balancer_arn(lb_arn)
                .port(l.port)
                .protocol(v2::ProtocolEnum::from(l.protocol.as_str()))
                .set_certificates(certificates.clone())
                .set_ssl_policy(l.ssl_policy.clone())
                .default_actions(action.clone())
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await;
    match created {
        Ok(_) => Ok(()),
        // A listener on this port of our own load balancer: the one an earlier attempt created
        // before its response was lost. Bring it to the desired state in place.
        Err(e) if e.has_code(&["DuplicateListener"]) => {
            let listeners = clients
                .calls
                .run(ops::V2_DESCRIBE_LISTENERS, || {
                    clients
                        .elbv2
                        .describe_listeners()
                        .load_balancer_arn(lb_arn)
                        .send()
                })
                .await?;
            let Some(arn) = listeners
                .listeners()
                .iter()
                .find(|seen| seen.port() == Some(l.port))
                .and_then(|seen| seen.listener_arn())
                .map(str::to_string)
            else {
                return Err(e);
            };
            tracing::info!(lb = %desired.name, port = l.port, "adopting the listener an earlier create left");
            modify_listener(clients, &arn, l, tg).await
        }
        Err(e) => Err(e),
    }
}

/// `ModifyListener` to the desired protocol, certificate, policy and target group. On failure
/// the listener keeps its old configuration: the port is never left without a listener.
async fn modify_listener(
    clients: &Clients,
    arn: &str,
    l: &crate::nlb::plan::ListenerDesired,
    tg: &str,
) -> Result<(), AwsError> {
    let action = forward(tg)?;
    let certificates = l
        .certificate
        .as_ref()
        .map(|c| vec![v2::Certificate::builder().certificate_arn(c).build()]);
    clients
        .calls
        .run(ops::V2_MODIFY_LISTENER, || {
            clients
                .elbv2
                .modify_listener()
                .listener_arn(arn)
                .port(l.port)
                .protocol(v2::ProtocolEnum::from(l.protocol.as_str()))
                .set_certificates(certificates.clone())
                .set_ssl_policy(l.ssl_policy.clone())
                .default_actions(action.clone())
                .send()
        })
        .await?;
    Ok(())
}

fn resolve(tg: &TgRef, applied: &Applied) -> Result<String, AwsError> {
    match tg {
        TgRef::Existing(arn) => Ok(arn.clone()),
        TgRef::New(index) => {
            applied.new_tgs.get(index).cloned().ok_or_else(|| {
                AwsError::Unexpected(format!("target group {index} was not created"))
            })
        }
    }
}

/// Deletes a load balancer by ARN.
pub async fn delete_lb(clients: &Clients, arn: &str) -> Result<(), AwsError> {
    match clients
        .calls
        .run(ops::V2_DELETE_LOAD_BALANCER, || {
            clients
                .elbv2
                .delete_load_balancer()
                .load_balancer_arn(arn)
                .send()
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.has_code(&["LoadBalancerNotFound"]) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes a listener (absent is fine: an earlier attempt's response was lost).
pub async fn delete_listener(clients: &Clients, arn: &str) -> Result<(), AwsError> {
    match clients
        .calls
        .run(ops::V2_DELETE_LISTENER, || {
            clients.elbv2.delete_listener().listener_arn(arn).send()
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.has_code(&["ListenerNotFound"]) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes a target group (absent is fine).
pub async fn delete_tg(clients: &Clients, arn: &str) -> Result<(), AwsError> {
    match clients
        .calls
        .run(ops::V2_DELETE_TARGET_GROUP, || {
            clients
                .elbv2
                .delete_target_group()
                .target_group_arn(arn)
                .send()
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.has_code(&["TargetGroupNotFound"]) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Performs one NLB action of `desired`'s load balancer (a step of the flow); `applied`
/// carries what earlier steps of the same phase made (the ARN, new target groups). Returns
/// true when a create found this Service's NLB from an earlier attempt and adopted it: the rest
/// of the phase was planned for a fresh load balancer and must be planned again.
pub(crate) async fn apply_one(
    clients: &Clients,
    vpc: &str,
    desired: &NlbDesired,
    applied: &mut Applied,
    action: &NlbAction,
) -> Result<bool, AwsError> {
    tracing::info!(lb = %desired.name, action = ?action, "applying NLB change");
    let lb_arn = |applied: &Applied| {
        applied
            .arn
            .clone()
            .ok_or_else(|| AwsError::Unexpected("no load balancer ARN".into()))
    };
    match action {
        NlbAction::Create | NlbAction::Recreate => {
            if matches!(action, NlbAction::Recreate)
                && let Some(arn) = &applied.arn
            {
                delete_lb(clients, arn).await?;
            }
            let created = create_lb(clients, desired).await?;
            applied.arn = Some(created.arn);
            applied.dns_name = created.dns;
            if let Some(seen) = created.adopted {
                applied.new_tgs.clear();
                applied.adopted = Some(seen);
                return Ok(true);
            }
        }
        NlbAction::SetSubnets(subnets) => {
            let arn = lb_arn(applied)?;
            clients
                .calls
                .run(ops::V2_SET_SUBNETS, || {
                    clients
                        .elbv2
                        .set_subnets()
                        .load_balancer_arn(&arn)
                        .set_subnets(Some(subnets.clone()))
                        .send()
                })
                .await?;
        }
        NlbAction::CreateTargetGroup { listener } => {
            let arn = create_tg(clients, vpc, desired, *listener).await?;
            applied.new_tgs.insert(*listener, arn);
        }
        NlbAction::ModifyTargetGroup { arn, health } => {
            let http = health.protocol.eq_ignore_ascii_case("HTTP")
                || health.protocol.eq_ignore_ascii_case("HTTPS");
            clients
                .calls
                .run(ops::V2_MODIFY_TARGET_GROUP, || {
                    clients
                        .elbv2
                        .modify_target_group()
                        .target_group_arn(arn)
                        .health_check_port(&health.port)
                        .set_health_check_path(if http { health.path.clone() } else { None })
                        .health_check_interval_seconds(health.interval)
                        .health_check_timeout_seconds(health.timeout)
                        .healthy_threshold_count(health.healthy)
                        .unhealthy_threshold_count(health.unhealthy)
                        .send()
                })
                .await?;
        }
        NlbAction::ModifyTargetGroupAttributes {
            target_group,
            attributes,
        } => {
            let arn = resolve(target_group, applied)?;
            let attributes: Vec<v2::TargetGroupAttribute> = attributes
                .iter()
                .map(|(k, v)| v2::TargetGroupAttribute::builder().key(k).value(v).build())
                .collect();
            clients
                .calls
                .run(ops::V2_MODIFY_TG_ATTRIBUTES, || {
                    clients
                        .elbv2
                        .modify_target_group_attributes()
                        .target_group_arn(&arn)
                        .set_attributes(Some(attributes.clone()))
                        .send()
                })
                .await?;
        }
        NlbAction::DeregisterTargets { arn, targets } => {
            for chunk in targets.chunks(100) {
                let targets = sdk_targets(chunk)?;
                clients
                    .calls
                    .run(ops::V2_DEREGISTER_TARGETS, || {
                        clients
                            .elbv2
                            .deregister_targets()
                            .target_group_arn(arn)
                            .set_targets(Some(targets.clone()))
                            .send()
                    })
                    .await?;
            }
        }
        NlbAction::RegisterTargets {
            target_group,
            targets,
        } => {
            let arn = resolve(target_group, applied)?;
            for chunk in targets.chunks(100) {
                let targets = sdk_targets(chunk)?;
                clients
                    .calls
                    .run(ops::V2_REGISTER_TARGETS, || {
                        clients
                            .elbv2
                            .register_targets()
                            .target_group_arn(&arn)
                            .set_targets(Some(targets.clone()))
                            .send()
                    })
                    .await?;
            }
        }
        NlbAction::CreateListener {
            listener,
            target_group,
        } => {
            let tg = resolve(target_group, applied)?;
            create_listener(clients, &lb_arn(applied)?, desired, *listener, &tg).await?;
        }
        NlbAction::ModifyListener {
            arn,
            listener,
            target_group,
        } => {
            // Always in place: AWS modifies port, protocol, certificates and the default
            // action of a live listener. Deleting and re-creating it instead would leave
            // the port without a listener if the create failed. A refusal is returned as
            // is, with the old listener still serving.
            let l = &desired.listeners[*listener];
            let tg = resolve(target_group, applied)?;
            if let Err(e) = modify_listener(clients, arn, l, &tg).await {
                tracing::warn!(lb = %desired.name, port = l.port, error = %e, "ModifyListener refused; the listener keeps its current configuration");
                return Err(e);
            }
        }
        NlbAction::DeleteListener { arn } => delete_listener(clients, arn).await?,
        NlbAction::DeleteTargetGroup { arn } => delete_tg(clients, arn).await?,
        NlbAction::ModifyLoadBalancerAttributes(attributes) => {
            let arn = lb_arn(applied)?;
            let attributes: Vec<v2::LoadBalancerAttribute> = attributes
                .iter()
                .map(|(k, v)| v2::LoadBalancerAttribute::builder().key(k).value(v).build())
                .collect();
            clients
                .calls
                .run(ops::V2_MODIFY_LB_ATTRIBUTES, || {
                    clients
                        .elbv2
                        .modify_load_balancer_attributes()
                        .load_balancer_arn(&arn)
                        .set_attributes(Some(attributes.clone()))
                        .send()
                })
                .await?;
        }
        NlbAction::AddTags { target_group, tags } => {
            let arn = match target_group {
                Some(tg) => resolve(tg, applied)?,
                None => lb_arn(applied)?,
            };
            let tags = sdk_tags(tags)?;
            clients
                .calls
                .run(ops::V2_ADD_TAGS, || {
                    clients
                        .elbv2
                        .add_tags()
                        .resource_arns(&arn)
                        .set_tags(Some(tags.clone()))
                        .send()
                })
                .await?;
        }
        NlbAction::RemoveTags { target_group, keys } => {
            let arn = match target_group {
                Some(tg) => tg.clone(),
                None => lb_arn(applied)?,
            };
            clients
                .calls
                .run(ops::V2_REMOVE_TAGS, || {
                    clients
                        .elbv2
                        .remove_tags()
                        .resource_arns(&arn)
                        .set_tag_keys(Some(keys.clone()))
                        .send()
                })
                .await?;
        }
    }
    Ok(false)
}

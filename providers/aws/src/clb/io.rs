//! Classic ELB reads (observe) and writes (apply). No decisions here: those are in `plan`.

use std::collections::BTreeMap;

use aws_sdk_elasticloadbalancing::types as elb;

use crate::calls::ops;
use crate::clb::plan::{
    AccessLog, Attributes, ClbAction, ClbDesired, ClbObserved, HealthCheck, Listener,
    ObservedListener,
};
use crate::clients::Clients;
use crate::error::AwsError;

fn built<T, E: std::fmt::Display>(result: Result<T, E>) -> Result<T, AwsError> {
    result.map_err(|e| AwsError::Unexpected(format!("building a request: {e}")))
}

/// `DescribeLoadBalancers` by name; `None` when it does not exist. Fills everything except
/// attributes and tags.
pub async fn describe(clients: &Clients, name: &str) -> Result<Option<ClbObserved>, AwsError> {
    let response = clients
        .calls
        .run(ops::ELB_DESCRIBE_LOAD_BALANCERS, || {
            clients
                .elb
                .describe_load_balancers()
                .load_balancer_names(name)
                .send()
        })
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) if e.has_code(&["LoadBalancerNotFound", "AccessPointNotFound"]) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(response
        .load_balancer_descriptions()
        .first()
        .map(observed_from_description))
}

/// Every Classic ELB of the account and region (paged, 400 per call), keyed by name, filled as
/// [`describe`] fills one: the first pass after a restart reads them together instead of one
/// call each.
pub async fn list(clients: &Clients) -> Result<BTreeMap<String, ClbObserved>, AwsError> {
    Ok(describe_all(clients)
        .await?
        .iter()
        .filter_map(|lb| {
            Some((
                lb.load_balancer_name()?.to_string(),
                observed_from_description(lb),
            ))
        })
        .collect())
}

/// Every Classic ELB description of the account and region, as AWS returns them (paged, 400
/// per call): [`list`] and the audit (which also wants `CreatedTime`) read through it.
pub async fn describe_all(
    clients: &Clients,
) -> Result<Vec<elb::LoadBalancerDescription>, AwsError> {
    clients
        .calls
        .run_paged(
            ops::ELB_DESCRIBE_LOAD_BALANCERS,
            |marker| {
                clients
                    .elb
                    .describe_load_balancers()
                    .page_size(400)
                    .set_marker(marker)
                    .send()
            },
            |page| {
                let next = page.next_marker().map(str::to_string);
                (page.load_balancer_descriptions().to_vec(), next)
            },
        )
        .await
}

/// The tags of up to 20 Classic ELBs per call (the API's limit), keyed by name; names without
/// tags map to an empty set.
pub async fn read_tags_of(
    clients: &Clients,
    names: &[String],
) -> Result<BTreeMap<String, BTreeMap<String, String>>, AwsError> {
    let mut tags: BTreeMap<String, BTreeMap<String, String>> = names
        .iter()
        .map(|name| (name.clone(), BTreeMap::new()))
        .collect();
    for chunk in names.chunks(20) {
        let response = clients
            .calls
            .run(ops::ELB_DESCRIBE_TAGS, || {
                clients
                    .elb
                    .describe_tags()
                    .set_load_balancer_names(Some(chunk.to_vec()))
                    .send()
            })
            .await;
        let response = match response {
            Ok(r) => r,
            // One of them was deleted since the listing: read the rest one by one.
            Err(e) if e.has_code(&["LoadBalancerNotFound", "AccessPointNotFound"]) => {
                for name in chunk {
                    match read_tags(clients, name).await {
                        Ok(one) => {
                            tags.insert(name.clone(), one);
                        }
                        Err(e) if e.has_code(&["LoadBalancerNotFound", "AccessPointNotFound"]) => {
                            tags.remove(name);
                        }
                        Err(e) => return Err(e),
                    }
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        for description in response.tag_descriptions() {
            let Some(name) = description.load_balancer_name() else {
                continue;
            };
            tags.insert(
                name.to_string(),
                description
                    .tags()
                    .iter()
                    .map(|t| (t.key().to_string(), t.value().unwrap_or("").to_string()))
                    .collect(),
            );
        }
    }
    Ok(tags)
}

/// Everything of one description except attributes and tags (separate calls).
fn observed_from_description(lb: &elb::LoadBalancerDescription) -> ClbObserved {
    let listeners = lb
        .listener_descriptions()
        .iter()
        .filter_map(|d| {
            let l = d.listener()?;
            Some(ObservedListener {
                listener: Listener {
                    lb_port: l.load_balancer_port(),
                    protocol: l.protocol().to_ascii_uppercase(),
                    instance_port: l.instance_port(),
                    instance_protocol: l
                        .instance_protocol()
                        .unwrap_or(l.protocol())
                        .to_ascii_uppercase(),
                    certificate: l.ssl_certificate_id().map(str::to_string),
                },
                policies: d.policy_names().to_vec(),
            })
        })
        .collect();
    let backend_policies = lb
        .backend_server_descriptions()
        .iter()
        .filter_map(|b| Some((b.instance_port()?, b.policy_names().to_vec())))
        .collect();
    let policies = lb
        .policies()
        .map(|p| p.other_policies().iter().cloned().collect())
        .unwrap_or_default();
    let health_check = lb.health_check().map(|hc| HealthCheck {
        target: hc.target().to_string(),
        interval: hc.interval(),
        timeout: hc.timeout(),
        healthy: hc.healthy_threshold(),
        unhealthy: hc.unhealthy_threshold(),
    });
    ClbObserved {
        dns_name: lb.dns_name().map(str::to_string),
        internal: lb.scheme() == Some("internal"),
        listeners,
        backend_policies,
        policies,
        health_check,
        subnets: lb.subnets().iter().cloned().collect(),
        security_groups: lb.security_groups().to_vec(),
        instances: lb
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(str::to_string))
            .collect(),
        vpc_id: lb.vpc_id().map(str::to_string),
        attributes: None,
        tags: None,
    }
}

/// Reads the managed attributes.
pub async fn read_attributes(clients: &Clients, name: &str) -> Result<Attributes, AwsError> {
    let response = clients
        .calls
        .run(ops::ELB_DESCRIBE_ATTRIBUTES, || {
            clients
                .elb
                .describe_load_balancer_attributes()
                .load_balancer_name(name)
                .send()
        })
        .await?;
    let mut attributes = Attributes::aws_defaults();
    if let Some(a) = response.load_balancer_attributes() {
        if let Some(cz) = a.cross_zone_load_balancing() {
            attributes.cross_zone = cz.enabled();
        }
        if let Some(log) = a.access_log() {
            attributes.access_log = AccessLog {
                enabled: log.enabled(),
                bucket: log.s3_bucket_name().map(str::to_string),
                prefix: log.s3_bucket_prefix().map(str::to_string),
                emit_interval: log.emit_interval(),
            };
        }
        if let Some(d) = a.connection_draining() {
            attributes.draining_enabled = d.enabled();
            attributes.draining_timeout = d.timeout();
        }
        if let Some(c) = a.connection_settings() {
            attributes.idle_timeout = c.idle_timeout();
        }
    }
    Ok(attributes)
}

/// Reads the tags.
pub async fn read_tags(
    clients: &Clients,
    name: &str,
) -> Result<BTreeMap<String, String>, AwsError> {
    let response = clients
        .calls
        .run(ops::ELB_DESCRIBE_TAGS, || {
            clients.elb.describe_tags().load_balancer_names(name).send()
        })
        .await?;
    Ok(response
        .tag_descriptions()
        .iter()
        .flat_map(|d| d.tags())
        .map(|t| (t.key().to_string(), t.value().unwrap_or("").to_string()))
        .collect())
}

fn sdk_listener(l: &Listener) -> Result<elb::Listener, AwsError> {
    built(
        elb::Listener::builder()
            .protocol(&l.protocol)
            .load_balancer_port(l.lb_port)
            .instance_protocol(&l.instance_protocol)
            .instance_port(l.instance_port)
            .set_ssl_certificate_id(l.certificate.clone())
            .build(),
    )
}

fn sdk_tags(tags: &BTreeMap<String, String>) -> Result<Vec<elb::Tag>, AwsError> {
    tags.iter()
        .map(|(k, v)| built(elb::Tag::builder().key(k).value(v).build()))
        .collect()
}

fn sdk_instances(ids: &[String]) -> Vec<elb::Instance> {
    ids.iter()
        .map(|id| elb::Instance::builder().instance_id(id).build())
        .collect()
}

fn sdk_attributes(a: &Attributes) -> Result<elb::LoadBalancerAttributes, AwsError> {
    let log = &a.access_log;
    Ok(elb::LoadBalancerAttributes::builder()
        .cross_zone_load_balancing(
            elb::CrossZoneLoadBalancing::builder()
                .enabled(a.cross_zone)
                .build(),
        )
        .access_log(
            elb::AccessLog::builder()
                .enabled(log.enabled)
                .set_s3_bucket_name(log.enabled.then(|| log.bucket.clone()).flatten())
                .set_s3_bucket_prefix(log.enabled.then(|| log.prefix.clone()).flatten())
                .set_emit_interval(log.emit_interval.filter(|_| log.enabled))
                .build(),
        )
        .connection_draining(
            elb::ConnectionDraining::builder()
                .enabled(a.draining_enabled)
                .set_timeout(a.draining_timeout)
                .build(),
        )
        .connection_settings(built(
            elb::ConnectionSettings::builder()
                .idle_timeout(a.idle_timeout)
                .build(),
        )?)
        .build())
}

/// What one step left: the DNS name of a load balancer `CreateLoadBalancer` made, and
/// whether the create found ours from an earlier attempt instead (its response was lost): the
/// rest of the phase was planned for a fresh load balancer and must be planned again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Created {
    /// The DNS name of the load balancer created or adopted.
    pub dns: Option<String>,
    /// The create adopted this Service's existing load balancer.
    pub adopted: bool,
}

async fn create(clients: &Clients, desired: &ClbDesired) -> Result<Created, AwsError> {
    let listeners: Vec<elb::Listener> = desired
        .listeners
        .iter()
        .map(sdk_listener)
        .collect::<Result<_, _>>()?;
    let tags = sdk_tags(&desired.tags)?;
    let subnets: Vec<String> = desired.subnets.iter().cloned().collect();
    let response = clients
        .calls
        .run(ops::ELB_CREATE_LOAD_BALANCER, || {
            clients
                .elb
                .create_load_balancer()
                .load_balancer_name(&desired.name)
                .set_listeners(Some(listeners.clone()))
                .set_subnets(Some(subnets.clone()))
                .set_security_groups(Some(desired.security_groups.clone()))
                .set_scheme(desired.internal.then(|| "internal".to_string()))
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await;
    match response {
        Ok(response) => Ok(Created {
            dns: response.dns_name().map(str::to_string),
            adopted: false,
        }),
        Err(e) if e.has_code(DUPLICATE_NAME) => {
            let dns =
                adopt_after_duplicate(clients, ops::ELB_CREATE_LOAD_BALANCER, desired, e).await?;
            Ok(Created { dns, adopted: true })
        }
        Err(e) => Err(e),
    }
}

/// Codes of a create that found the load-balancer name in use.
pub(crate) const DUPLICATE_NAME: &[&str] =
    &["DuplicateLoadBalancerName", "DuplicateAccessPointName"];

/// After `DuplicateLoadBalancerName` on a Classic ELB create: usually our own load balancer
/// whose create response was lost (the retry finds it), adopted when its tags say it is this
/// Service's. Someone else's is a [`AwsError::NameTaken`]. An NLB of this Service holding the
/// name is being replaced (kind change): retried once it is gone.
async fn adopt_after_duplicate(
    clients: &Clients,
    operation: crate::calls::Op,
    desired: &ClbDesired,
    error: AwsError,
) -> Result<Option<String>, AwsError> {
    let name = desired.name.as_str();
    if let Some(seen) = describe(clients, name).await? {
        let tags = read_tags(clients, name).await?;
        crate::owner::check_resource(&tags, &desired.tags).map_err(|owner| {
            AwsError::NameTaken {
                operation: operation.name,
                resource: "Classic ELB",
                name: name.to_string(),
                owner,
            }
        })?;
        tracing::info!(
            lb = name,
            "adopting this Service's Classic ELB left by an earlier create"
        );
        return Ok(seen.dns_name);
    }
    crate::nlb::io::name_held_by_nlb(clients, operation, name, &desired.tags, error).await
}

async fn delete_lb(clients: &Clients, name: &str) -> Result<(), AwsError> {
    match clients
        .calls
        .run(ops::ELB_DELETE_LOAD_BALANCER, || {
            clients
                .elb
                .delete_load_balancer()
                .load_balancer_name(name)
                .send()
        })
        .await
    {
        Ok(_) => Ok(()),
        // Already gone (an earlier attempt's response was lost): what delete wants.
        Err(e) if e.has_code(&["LoadBalancerNotFound", "AccessPointNotFound"]) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the Classic ELB by name (absent is fine).
pub async fn delete(clients: &Clients, name: &str) -> Result<(), AwsError> {
    delete_lb(clients, name).await
}

/// Performs one Classic ELB action of `desired`'s load balancer (a step of the flow).
pub(crate) async fn apply_one(
    clients: &Clients,
    desired: &ClbDesired,
    action: &ClbAction,
) -> Result<Created, AwsError> {
    let name = desired.name.as_str();
    tracing::info!(lb = name, action = ?action, "applying Classic ELB change");
    match action {
        ClbAction::Create | ClbAction::Recreate => {
            if *action == ClbAction::Recreate {
                delete_lb(clients, name).await?;
            }
            return create(clients, desired).await;
        }
        ClbAction::DeleteListeners(ports) => {
            clients
                .calls
                .run(ops::ELB_DELETE_LISTENERS, || {
                    clients
                        .elb
                        .delete_load_balancer_listeners()
                        .load_balancer_name(name)
                        .set_load_balancer_ports(Some(ports.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::CreateListeners(listeners) => {
            let listeners: Vec<elb::Listener> = listeners
                .iter()
                .map(sdk_listener)
                .collect::<Result<_, _>>()?;
            match clients
                .calls
                .run(ops::ELB_CREATE_LISTENERS, || {
                    clients
                        .elb
                        .create_load_balancer_listeners()
                        .load_balancer_name(name)
                        .set_listeners(Some(listeners.clone()))
                        .send()
                })
                .await
            {
                Ok(_) => {}
                // The plan deletes a changed listener before creating its replacement, so
                // a duplicate is the one an earlier attempt created before its response
                // was lost; a stale one would be replaced by the next full reconcile.
                Err(e) if e.has_code(&["DuplicateListener"]) => {
                    tracing::info!(lb = name, "listeners already created by an earlier attempt");
                }
                Err(e) => return Err(e),
            }
        }
        ClbAction::AttachSubnets(subnets) => {
            clients
                .calls
                .run(ops::ELB_ATTACH_SUBNETS, || {
                    clients
                        .elb
                        .attach_load_balancer_to_subnets()
                        .load_balancer_name(name)
                        .set_subnets(Some(subnets.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::DetachSubnets(subnets) => {
            clients
                .calls
                .run(ops::ELB_DETACH_SUBNETS, || {
                    clients
                        .elb
                        .detach_load_balancer_from_subnets()
                        .load_balancer_name(name)
                        .set_subnets(Some(subnets.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::ApplySecurityGroups(groups) => {
            clients
                .calls
                .run(ops::ELB_APPLY_SECURITY_GROUPS, || {
                    clients
                        .elb
                        .apply_security_groups_to_load_balancer()
                        .load_balancer_name(name)
                        .set_security_groups(Some(groups.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::ConfigureHealthCheck(hc) => {
            let check = built(
                elb::HealthCheck::builder()
                    .target(&hc.target)
                    .interval(hc.interval)
                    .timeout(hc.timeout)
                    .healthy_threshold(hc.healthy)
                    .unhealthy_threshold(hc.unhealthy)
                    .build(),
            )?;
            clients
                .calls
                .run(ops::ELB_CONFIGURE_HEALTH_CHECK, || {
                    clients
                        .elb
                        .configure_health_check()
                        .load_balancer_name(name)
                        .health_check(check.clone())
                        .send()
                })
                .await?;
        }
        ClbAction::ModifyAttributes(attributes) => {
            let attributes = sdk_attributes(attributes)?;
            clients
                .calls
                .run(ops::ELB_MODIFY_ATTRIBUTES, || {
                    clients
                        .elb
                        .modify_load_balancer_attributes()
                        .load_balancer_name(name)
                        .load_balancer_attributes(attributes.clone())
                        .send()
                })
                .await?;
        }
        ClbAction::CreatePolicy(policy) => {
            let attribute = elb::PolicyAttribute::builder()
                .attribute_name(policy.attribute.0)
                .attribute_value(&policy.attribute.1)
                .build();
            match clients
                .calls
                .run(ops::ELB_CREATE_POLICY, || {
                    clients
                        .elb
                        .create_load_balancer_policy()
                        .load_balancer_name(name)
                        .policy_name(&policy.name)
                        .policy_type_name(policy.type_name)
                        .policy_attributes(attribute.clone())
                        .send()
                })
                .await
            {
                Ok(_) => {}
                Err(e) if e.has_code(&["DuplicatePolicyName"]) => {}
                Err(e) => return Err(e),
            }
        }
        ClbAction::SetListenerPolicies { lb_port, policies } => {
            clients
                .calls
                .run(ops::ELB_SET_LISTENER_POLICIES, || {
                    clients
                        .elb
                        .set_load_balancer_policies_of_listener()
                        .load_balancer_name(name)
                        .load_balancer_port(*lb_port)
                        .set_policy_names(Some(policies.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::SetBackendPolicies {
            instance_port,
            policies,
        } => {
            clients
                .calls
                .run(ops::ELB_SET_BACKEND_POLICIES, || {
                    clients
                        .elb
                        .set_load_balancer_policies_for_backend_server()
                        .load_balancer_name(name)
                        .instance_port(*instance_port)
                        .set_policy_names(Some(policies.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::DeletePolicy(policy) => {
            clients
                .calls
                .run(ops::ELB_DELETE_POLICY, || {
                    clients
                        .elb
                        .delete_load_balancer_policy()
                        .load_balancer_name(name)
                        .policy_name(policy)
                        .send()
                })
                .await?;
        }
        ClbAction::AddTags(tags) => {
            let tags = sdk_tags(tags)?;
            clients
                .calls
                .run(ops::ELB_ADD_TAGS, || {
                    clients
                        .elb
                        .add_tags()
                        .load_balancer_names(name)
                        .set_tags(Some(tags.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::RemoveTags(keys) => {
            let keys: Vec<elb::TagKeyOnly> = keys
                .iter()
                .map(|k| elb::TagKeyOnly::builder().key(k).build())
                .collect();
            clients
                .calls
                .run(ops::ELB_REMOVE_TAGS, || {
                    clients
                        .elb
                        .remove_tags()
                        .load_balancer_names(name)
                        .set_tags(Some(keys.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::Deregister(ids) => {
            let instances = sdk_instances(ids);
            clients
                .calls
                .run(ops::ELB_DEREGISTER, || {
                    clients
                        .elb
                        .deregister_instances_from_load_balancer()
                        .load_balancer_name(name)
                        .set_instances(Some(instances.clone()))
                        .send()
                })
                .await?;
        }
        ClbAction::Register(ids) => {
            let instances = sdk_instances(ids);
            clients
                .calls
                .run(ops::ELB_REGISTER, || {
                    clients
                        .elb
                        .register_instances_with_load_balancer()
                        .load_balancer_name(name)
                        .set_instances(Some(instances.clone()))
                        .send()
                })
                .await?;
        }
    }
    Ok(Created {
        dns: None,
        adopted: false,
    })
}

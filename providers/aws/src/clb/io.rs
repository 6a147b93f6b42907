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
    let Some(lb) = response.load_balancer_descriptions().first() else {
        return Ok(None);
    };
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
    Ok(Some(ClbObserved {
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
    }))
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

async fn create(clients: &Clients, desired: &ClbDesired) -> Result<Option<String>, AwsError> {
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
        .await
        .map_err(|e| type_clash(e, &desired.name))?;
    Ok(response.dns_name().map(str::to_string))
}

/// AWS load-balancer names are shared by Classic ELBs and NLBs: a clash on create means the
/// Service's `aws-load-balancer-type` changed after creation, which upstream rejects too.
pub(crate) fn type_clash(error: AwsError, name: &str) -> AwsError {
    if error.has_code(&["DuplicateLoadBalancerName", "DuplicateAccessPointName"]) {
        AwsError::Invalid(format!(
            "a load balancer named {name} already exists with another type:              aws-load-balancer-type cannot change after creation (delete and re-create the Service)"
        ))
    } else {
        error
    }
}

async fn delete_lb(clients: &Clients, name: &str) -> Result<(), AwsError> {
    clients
        .calls
        .run(ops::ELB_DELETE_LOAD_BALANCER, || {
            clients
                .elb
                .delete_load_balancer()
                .load_balancer_name(name)
                .send()
        })
        .await?;
    Ok(())
}

/// Deletes the Classic ELB by name (absent is fine).
pub async fn delete(clients: &Clients, name: &str) -> Result<(), AwsError> {
    delete_lb(clients, name).await
}

/// Performs `actions` in order. Returns the DNS name when the load balancer was (re)created.
pub async fn apply(
    clients: &Clients,
    desired: &ClbDesired,
    actions: &[ClbAction],
) -> Result<Option<String>, AwsError> {
    let name = desired.name.as_str();
    let mut dns = None;
    for action in actions {
        tracing::info!(lb = name, action = ?action, "applying Classic ELB change");
        match action {
            ClbAction::Create => dns = create(clients, desired).await?,
            ClbAction::Recreate => {
                delete_lb(clients, name).await?;
                dns = create(clients, desired).await?;
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
                clients
                    .calls
                    .run(ops::ELB_CREATE_LISTENERS, || {
                        clients
                            .elb
                            .create_load_balancer_listeners()
                            .load_balancer_name(name)
                            .set_listeners(Some(listeners.clone()))
                            .send()
                    })
                    .await?;
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
    }
    Ok(dns)
}

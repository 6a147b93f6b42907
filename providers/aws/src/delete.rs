//! Resumable, leak-free delete. Nothing is remembered between attempts: every attempt finds
//! what is left by name and ownership tags and removes it, so a delete interrupted after the
//! load balancer is gone still cleans up target groups, node rules and security groups (the
//! upstream provider returns early and leaks them, aws.md §3.6).
//!
//! Order: note the LB's groups and target groups → delete the LB → delete target groups
//! (attached ones and tagged orphans) → revoke node rules → delete the owned LB group.

use std::collections::BTreeSet;

use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::naming::{SERVICE_NAME_TAG, load_balancer_name};

use crate::calls::ops;
use crate::clb;
use crate::desired::LB_NAME_TAG;
use crate::discovery::ec2_filter;
use crate::error::AwsError;
use crate::naming::{clb_security_group_name, target_group_prefix};
use crate::nlb;
use crate::nodes::{self, Ownership};
use crate::provider::AwsProvider;

/// Deletes everything owned for `service`; `Ok` only when nothing owned remains.
pub async fn delete(provider: &AwsProvider, service: &ServiceKey) -> Result<(), AwsError> {
    let clients = provider.clients_ref();
    let name = load_balancer_name(&service.uid);
    provider.forget(&name);

    // Classic ELB.
    let mut lb_groups: BTreeSet<String> = BTreeSet::new();
    if let Some(clb) = clb::io::describe(clients, &name).await? {
        lb_groups.extend(clb.security_groups.iter().cloned());
        clb::io::delete(clients, &name).await?;
    }

    // NLB and its target groups.
    let mut target_groups: BTreeSet<String> = BTreeSet::new();
    if let Some(nlb) = nlb::io::describe(clients, &name).await? {
        let listeners = clients
            .calls
            .run(ops::V2_DESCRIBE_LISTENERS, || {
                clients
                    .elbv2
                    .describe_listeners()
                    .load_balancer_arn(&nlb.arn)
                    .send()
            })
            .await?;
        target_groups.extend(listeners.listeners().iter().flat_map(|l| {
            l.default_actions()
                .iter()
                .filter_map(|a| a.target_group_arn().map(str::to_string))
        }));
        nlb::io::delete_lb(clients, &nlb.arn).await?;
    }
    target_groups.extend(orphan_target_groups(provider, service, &name).await?);
    for arn in &target_groups {
        nlb::io::delete_tg(clients, arn).await?;
    }

    // The owned LB group, found by name (any VPC) and ownership tag.
    let own_group_name = clb_security_group_name(&name);
    let owned_groups: Vec<String> = nodes::describe_groups(
        clients,
        Some(vec![ec2_filter("group-name", [own_group_name.as_str()])]),
        None,
    )
    .await?
    .into_iter()
    .filter(|g| g.tags.contains_key(&provider.cluster_tag_key()))
    .filter(|g| provider.config_ref().elb_security_group.as_deref() != Some(g.id.as_str()))
    .map(|g| g.id)
    .collect();
    lb_groups.extend(owned_groups.iter().cloned());

    if !provider.config_ref().disable_security_group_ingress {
        // NLB rules by description on cluster-tagged and known node groups.
        let known = provider.discovery_ref().known_instance_groups();
        let groups =
            nodes::observe_groups(clients, &provider.cluster_tag_key(), None, &known).await?;
        let plan = nodes::plan_node_groups(&groups, &BTreeSet::new(), &[], Ownership::Nlb(&name));
        for (group, changes) in &plan {
            nodes::apply_rule_changes(clients, group, changes).await?;
        }
    }
    // CLB references to the group about to be deleted, on any group (tagged or not), or
    // the group can never be deleted (kubernetes#104383).
    for group in &owned_groups {
        let referencing = nodes::describe_groups(
            clients,
            Some(vec![ec2_filter("ip-permission.group-id", [group.as_str()])]),
            None,
        )
        .await?;
        let sources = vec![group.clone()];
        let plan = nodes::plan_node_groups(
            &referencing,
            &BTreeSet::new(),
            &[],
            Ownership::ClbSource(&sources),
        );
        for (id, changes) in &plan {
            nodes::apply_rule_changes(clients, id, changes).await?;
        }
    }
    if !provider.config_ref().disable_security_group_ingress && owned_groups.is_empty() {
        // BYO / shared groups: only revoke from cluster-tagged groups, never delete them.
        let sources: Vec<String> = lb_groups.iter().cloned().collect();
        if !sources.is_empty() {
            let groups =
                nodes::observe_groups(clients, &provider.cluster_tag_key(), None, &BTreeSet::new())
                    .await?;
            let still_used = sources
                .iter()
                .any(|s| provider.config_ref().elb_security_group.as_deref() == Some(s.as_str()));
            if !still_used {
                let plan = nodes::plan_node_groups(
                    &groups,
                    &BTreeSet::new(),
                    &[],
                    Ownership::ClbSource(&sources),
                );
                for (id, changes) in &plan {
                    nodes::apply_rule_changes(clients, id, changes).await?;
                }
            }
        }
    }
    for group in &owned_groups {
        match clients
            .calls
            .run(ops::DELETE_SECURITY_GROUP, || {
                clients.ec2.delete_security_group().group_id(group).send()
            })
            .await
        {
            Ok(_) => {}
            Err(e) if e.has_code(&["InvalidGroup.NotFound"]) => {}
            // The LB's network interfaces take a while to go away; the controller retries.
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Target groups of this Service left without a load balancer: name prefix
/// `k8s-<ns8>-<name8>-`, then confirmed by tags (the service-name tag, and our LB-name tag
/// when present, so a re-created Service with the same name keeps its own).
async fn orphan_target_groups(
    provider: &AwsProvider,
    service: &ServiceKey,
    lb_name: &str,
) -> Result<Vec<String>, AwsError> {
    let clients = provider.clients_ref();
    let prefix = target_group_prefix(service);
    let mut candidates = Vec::new();
    let mut marker: Option<String> = None;
    loop {
        let response = clients
            .calls
            .run(ops::V2_DESCRIBE_TARGET_GROUPS, || {
                clients
                    .elbv2
                    .describe_target_groups()
                    .set_marker(marker.clone())
                    .page_size(400)
                    .send()
            })
            .await?;
        for tg in response.target_groups() {
            if tg
                .target_group_name()
                .is_some_and(|n| n.starts_with(&prefix))
                && let Some(arn) = tg.target_group_arn()
            {
                candidates.push((arn.to_string(), tg.load_balancer_arns().is_empty()));
            }
        }
        marker = response.next_marker().map(str::to_string);
        if marker.is_none() {
            break;
        }
    }
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let arns: Vec<String> = candidates.iter().map(|(arn, _)| arn.clone()).collect();
    let tags = nlb::io::read_tags(clients, &arns).await?;
    let cluster_tag = provider.cluster_tag_key();
    let service_name = service.to_string();
    // Ours carry the LB-name tag; upstream's (no such tag) are taken only once detached.
    Ok(candidates
        .into_iter()
        .filter(|(arn, detached)| {
            tags.get(arn).is_some_and(|t| {
                t.contains_key(&cluster_tag)
                    && t.get(SERVICE_NAME_TAG) == Some(&service_name)
                    && match t.get(LB_NAME_TAG) {
                        Some(owner) => owner == lb_name,
                        None => *detached,
                    }
            })
        })
        .map(|(arn, _)| arn)
        .collect())
}

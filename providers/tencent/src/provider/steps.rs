//! The one step type of Tencent's flows ([`TencentStep`]) and how each runs.
//!
//! Every CLB write here is an asynchronous task, and each step's `run` includes waiting for
//! its task (`DescribeTaskStatus` until done): the step is complete when its task is, so the
//! next step never meets a CLB still busy with it. Per step:
//!
//! | step | call | waits in `run` |
//! |---|---|---|
//! | [`TencentStep::CreateLoadBalancer`] | `CreateLoadBalancer` | its task, then the CLB at `Status 1` |
//! | [`TencentStep::DeleteLoadBalancer`] | `DeleteLoadBalancer` | its task |
//! | [`TencentStep::RemoveListeners`], `Listener(DeleteListeners)` | `DeleteLoadBalancerListeners` | its task |
//! | `Listener(CreateListeners)` | `CreateListener` | its task (the ids fill the phase's listener slots) |
//! | `Listener(ModifyHealthCheck)` | `ModifyListener` | its task |
//! | `Listener(Register / Deregister)` | `BatchRegisterTargets` / `BatchDeregisterTargets` | nothing: the answer reports what failed |
//! | [`TencentStep::Group`] | `CreateSecurityGroup`, `ModifySecurityGroupPolicies`, `DeleteSecurityGroup`, `SetLoadBalancerSecurityGroups` | nothing: synchronous VPC / CLB calls |

use std::collections::BTreeMap;

use kube_lb_provider_core::converge::{self, Slot};
use kube_lb_provider_core::{ChangeAction, PlannedChange, ProviderError};
use serde_json::{Map, Value, json};

use super::{TencentProvider, unless_gone};
use crate::client::LoadBalancer;
use crate::plan::{self, Desired, ListenerKey, ListenerRef, Step as ListenerStep};
use crate::source_ranges::{self, GroupRef};

/// One mutating call of an `ensure` or `delete` of one Service.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TencentStep {
    /// `CreateLoadBalancer` with this body (a `ClientToken` of its own is added when it runs).
    CreateLoadBalancer {
        /// The CLB's name, for people.
        name: String,
        /// The request.
        body: Map<String, Value>,
    },
    /// `DeleteLoadBalancer` of a CLB kube-lb created for the Service.
    DeleteLoadBalancer {
        /// `lb-…`.
        id: String,
    },
    /// `DeleteLoadBalancerListeners` of the Service's listeners on a CLB it no longer uses
    /// (a user's CLB it left, or the one it is deleted from); the CLB stays.
    RemoveListeners {
        /// The CLB.
        lb: String,
        /// The listener ids.
        ids: Vec<String>,
        /// `TCP:80`, for people.
        described: Vec<String>,
    },
    /// A change of the Service's security group on its CLB `lb`.
    Group {
        /// The CLB (`(new)` in a phase planned before it exists).
        lb: String,
        /// The group's name.
        name: String,
        /// The change.
        step: source_ranges::Step,
    },
    /// A change of the Service's listeners or targets on its CLB `lb`.
    Listener {
        /// The CLB.
        lb: String,
        /// The change.
        step: ListenerStep,
    },
}

impl converge::Step for TencentStep {
    fn describe(&self) -> PlannedChange {
        match self {
            TencentStep::CreateLoadBalancer { name, body } => {
                let text = |key: &str| body.get(key).and_then(Value::as_str).map(str::to_string);
                let mut change = PlannedChange::new(
                    ChangeAction::Create,
                    "LoadBalancer",
                    name,
                    "CreateLoadBalancer",
                )
                .field("LoadBalancerType", None, text("LoadBalancerType"));
                if let Some(subnet) = text("SubnetId") {
                    change = change.field("SubnetId", None, Some(subnet));
                }
                change
            }
            TencentStep::DeleteLoadBalancer { id } => PlannedChange::new(
                ChangeAction::Delete,
                "LoadBalancer",
                id,
                "DeleteLoadBalancer",
            ),
            TencentStep::RemoveListeners { lb, described, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "Listener",
                format!("{lb}/{}", described.join(",")),
                "DeleteLoadBalancerListeners",
            ),
            TencentStep::Group { lb, name, step } => step.planned(lb, name),
            TencentStep::Listener { lb, step } => step.planned(lb),
        }
    }
}

/// What the steps of one phase hand each other: the ids the cloud assigns on create.
#[derive(Debug)]
pub(crate) struct Produced {
    /// The security group a `CreateSecurityGroup` of this phase made (or adopted).
    pub group: Slot<String>,
    /// The listeners a `CreateListener` of this phase made, by protocol and port.
    pub listeners: BTreeMap<ListenerKey, String>,
    /// The Service's CLB, once this pass created it (kept across phases).
    pub created_load_balancer: Option<LoadBalancer>,
}

impl Default for Produced {
    fn default() -> Self {
        Produced {
            group: Slot::new("the security group created for the Service"),
            listeners: BTreeMap::new(),
            created_load_balancer: None,
        }
    }
}

impl TencentProvider {
    /// Runs one step; `desired` is the Service's (`None` in `delete`, which has no listener
    /// or group writes but deletes).
    pub(super) async fn run_step(
        &self,
        step: &TencentStep,
        desired: Option<&Desired>,
        produced: &mut Produced,
    ) -> Result<(), ProviderError> {
        match step {
            TencentStep::CreateLoadBalancer { body, .. } => {
                let service = &desired.ok_or_else(|| missing("the Service"))?.service;
                produced.created_load_balancer = Some(self.create(service, body).await?);
                Ok(())
            }
            TencentStep::DeleteLoadBalancer { id } => self.delete_load_balancer(id).await,
            TencentStep::RemoveListeners { lb, ids, .. } => {
                self.delete_listeners(lb, ids).await?;
                tracing::info!(lb = %lb, listeners = ?ids, "removed the Service's listeners from a CLB it no longer uses");
                Ok(())
            }
            TencentStep::Group { lb, name, step } => {
                self.run_group_step(lb, name, step, desired, produced).await
            }
            TencentStep::Listener { lb, step } => {
                let desired = desired.ok_or_else(|| missing("the Service"))?;
                self.run_listener_step(lb, step, desired, produced).await
            }
        }
    }

    async fn run_group_step(
        &self,
        lb_id: &str,
        name: &str,
        step: &source_ranges::Step,
        desired: Option<&Desired>,
        produced: &mut Produced,
    ) -> Result<(), ProviderError> {
        let resolve = |group: &GroupRef, produced: &Produced| match group {
            GroupRef::Id(id) => Ok(id.clone()),
            GroupRef::New => produced.group.require().cloned(),
        };
        match step {
            source_ranges::Step::Create => {
                let service = &desired.ok_or_else(|| missing("the Service"))?.service;
                let id = self.create_group(service).await?;
                produced.group.fill(id);
            }
            source_ranges::Step::SetPolicies { group, policies } => {
                let id = resolve(group, produced)?;
                let ingress: Vec<Value> = policies.iter().map(|p| p.to_json(name)).collect();
                self.write("ModifySecurityGroupPolicies", || {
                    self.client
                        .replace_security_group_policies(&id, &ingress, &[])
                })
                .await?;
            }
            source_ranges::Step::Bind { groups, .. } => {
                let ids = groups
                    .iter()
                    .map(|g| resolve(g, produced))
                    .collect::<Result<Vec<_>, _>>()?;
                self.write("SetLoadBalancerSecurityGroups", || {
                    self.client.set_load_balancer_security_groups(lb_id, &ids)
                })
                .await?;
            }
            source_ranges::Step::Delete(id) => {
                self.write("DeleteSecurityGroup", || async {
                    unless_gone(self.client.delete_security_group(id).await)
                })
                .await?;
                tracing::info!(group = %id, "deleted the Service's security group");
            }
        }
        Ok(())
    }

    async fn run_listener_step(
        &self,
        lb_id: &str,
        step: &ListenerStep,
        desired: &Desired,
        produced: &mut Produced,
    ) -> Result<(), ProviderError> {
        match step {
            ListenerStep::DeleteListeners { ids, .. } => self.delete_listeners(lb_id, ids).await,
            ListenerStep::ModifyHealthCheck {
                id, health_check, ..
            } => {
                let mut body = Map::new();
                body.insert("LoadBalancerId".into(), json!(lb_id));
                body.insert("ListenerId".into(), json!(id));
                body.insert("HealthCheck".into(), Value::Object(health_check.clone()));
                self.write_and_wait(
                    "ModifyListener",
                    || self.client.modify_listener(&body),
                    String::clone,
                )
                .await?;
                Ok(())
            }
            ListenerStep::CreateListeners {
                protocol,
                ports,
                health_check,
            } => {
                let mut body = Map::new();
                body.insert("LoadBalancerId".into(), json!(lb_id));
                body.insert("Protocol".into(), json!(protocol));
                body.insert("Ports".into(), json!(ports));
                if let Some(check) = health_check {
                    body.insert("HealthCheck".into(), Value::Object(check.clone()));
                }
                body.insert(
                    "ListenerNames".into(),
                    json!(vec![desired.listener_name.clone(); ports.len()]),
                );
                // listenerParameters merge over the typed request; the parser refused the
                // identity keys (LoadBalancerId, Ports, Protocol, ListenerNames).
                plan::deep_merge(&mut body, &desired.listener_parameters);
                let ids = self
                    .create_listeners(lb_id, &body, protocol, ports, &desired.listener_name)
                    .await?;
                for (port, id) in ports.iter().zip(ids) {
                    let key = ListenerKey {
                        protocol: protocol.clone(),
                        port: *port,
                    };
                    produced.listeners.insert(key, id);
                }
                Ok(())
            }
            ListenerStep::Register(targets) | ListenerStep::Deregister(targets) => {
                let register = matches!(step, ListenerStep::Register(_));
                let mut bodies = Vec::new();
                let mut requested = Vec::new();
                for (listener, backend) in targets {
                    let id = match listener {
                        ListenerRef::Id(id) => id.clone(),
                        ListenerRef::New(key) => {
                            produced.listeners.get(key).cloned().ok_or_else(|| {
                                ProviderError::Internal {
                                    message: format!(
                                        "listener {}:{} was not created in this phase; the next pass plans again",
                                        key.protocol, key.port
                                    ),
                                    source: None,
                                }
                            })?
                        }
                    };
                    let mut target = json!({"ListenerId": id, "Port": backend.port});
                    if backend.by_instance {
                        target["InstanceId"] = json!(backend.address);
                    } else {
                        target["EniIp"] = json!(backend.address);
                    }
                    bodies.push(target);
                    requested.push((id, backend.clone()));
                }
                let action = if register {
                    "BatchRegisterTargets"
                } else {
                    "BatchDeregisterTargets"
                };
                let failed = self
                    .write(action, || {
                        self.client.batch_targets(lb_id, &bodies, register)
                    })
                    .await?;
                // A repeat after a lost answer is refused for the listeners the first call
                // already changed: read them, and accept what is as asked.
                let of_failed: Vec<(String, plan::Backend)> = requested
                    .into_iter()
                    .filter(|(listener, _)| failed.contains(listener))
                    .collect();
                if !failed.is_empty()
                    && !plan::targets_settled(
                        self.client.targets(lb_id, &failed).await?,
                        &of_failed,
                        register,
                    )
                {
                    return Err(ProviderError::Internal {
                        message: format!(
                            "{action}: the CLB refused targets for listeners {failed:?}"
                        ),
                        source: None,
                    });
                }
                Ok(())
            }
        }
    }
}

fn missing(what: &str) -> ProviderError {
    ProviderError::Internal {
        message: format!("a Tencent step ran without {what}"),
        source: None,
    }
}

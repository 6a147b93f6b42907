//! `delete` of one Service as a [`Flow`]: one phase, every id observed before the plan. The
//! Service's CLBs go first (each `DeleteLoadBalancer` waits for its task, so its security
//! groups are unbound by then), then its security groups, then its listeners on user CLBs
//! (`tke-existed-lbid`: only ours, the CLB stays).

use async_trait::async_trait;
use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::ProviderError;
use kube_lb_provider_core::converge::{Flow, Plan};

use super::TencentProvider;
use super::steps::{Produced, TencentStep};
use crate::plan;
use crate::source_ranges;

/// `delete` of one Service.
pub(crate) struct DeleteFlow<'a> {
    provider: &'a TencentProvider,
    service: &'a ServiceKey,
    produced: Produced,
}

impl<'a> DeleteFlow<'a> {
    /// The flow for `service`.
    pub(crate) fn new(provider: &'a TencentProvider, service: &'a ServiceKey) -> Self {
        DeleteFlow {
            provider,
            service,
            produced: Produced::default(),
        }
    }
}

#[async_trait]
impl Flow for DeleteFlow<'_> {
    type Step = TencentStep;
    type Done = ();

    fn provider(&self) -> &'static str {
        "tencent"
    }

    async fn plan(&mut self) -> Result<Plan<TencentStep>, ProviderError> {
        let provider = self.provider;
        let service = self.service;
        let owned = provider.owned(service).await?;
        let mut steps: Vec<TencentStep> = owned
            .iter()
            .map(|lb| TencentStep::DeleteLoadBalancer {
                id: lb.load_balancer_id.clone(),
            })
            .collect();
        let name = source_ranges::group_name(service);
        steps.extend(
            provider
                .service_groups(service)
                .await?
                .into_iter()
                .map(|group| TencentStep::Group {
                    lb: String::new(),
                    name: name.clone(),
                    step: source_ranges::Step::Delete(group.security_group_id),
                }),
        );
        // Where this process knows every CLB the listeners may be on, only those are read.
        let listener_name = plan::listener_name(&provider.config.listener_name, service);
        let candidates: Vec<String> = match provider.known_placements(service) {
            Some(ids) => ids
                .into_iter()
                .filter(|id| !owned.iter().any(|lb| &lb.load_balancer_id == id))
                .collect(),
            None => provider
                .user_load_balancers()
                .await?
                .into_iter()
                .map(|lb| lb.load_balancer_id)
                .collect(),
        };
        for lb in candidates {
            let ours = provider.listeners_named(&lb, &listener_name).await?;
            if !ours.is_empty() {
                steps.push(TencentStep::RemoveListeners {
                    ids: ours.iter().map(|l| l.listener_id.clone()).collect(),
                    described: ours
                        .iter()
                        .map(|l| format!("{}:{}", l.protocol, l.port))
                        .collect(),
                    lb,
                });
            }
        }
        Ok(Plan::now(steps))
    }

    async fn run(&mut self, step: &TencentStep) -> Result<(), ProviderError> {
        self.provider.run_step(step, None, &mut self.produced).await
    }

    async fn finish(&mut self) -> Result<(), ProviderError> {
        self.provider.forget_placements(self.service);
        Ok(())
    }
}

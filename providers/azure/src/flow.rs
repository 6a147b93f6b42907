//! Azure's `ensure` and `delete`, written once as a [`converge::Flow`]: observe (through the
//! shared-object cache), plan the rounds ([`crate::preview::phases`]), write round 1; the
//! driver plans again from what ARM then holds while later rounds remain. `kube-lb plan`
//! renders the same rounds.

use async_trait::async_trait;
use kube_lb_provider_core::converge::{self, Flow, Plan};
use kube_lb_provider_core::{ProviderError, ServiceKey};
use tracing::info;

use crate::desired::Desired;
use crate::error::AzureError;
use crate::plan::Observed;
use crate::preview::{AzureStep, phases};
use crate::provider::AzureProvider;

/// One Service's convergence: towards `desired`, or (with `None`) its deletion.
pub(crate) struct Converge<'a> {
    provider: &'a AzureProvider,
    service: &'a ServiceKey,
    desired: Option<&'a Desired>,
    /// What the last plan was made from.
    pub(crate) observed: Option<Observed>,
    /// A write was refused because its object changed since it was read (HTTP 412).
    stale: bool,
    /// A step wrote since the last observation.
    wrote: bool,
}

impl<'a> Converge<'a> {
    pub(crate) fn new(
        provider: &'a AzureProvider,
        service: &'a ServiceKey,
        desired: Option<&'a Desired>,
    ) -> Self {
        Converge {
            provider,
            service,
            desired,
            observed: None,
            stale: false,
            wrote: false,
        }
    }
}

#[async_trait]
impl Flow for Converge<'_> {
    type Step = AzureStep;
    type Done = Observed;

    fn provider(&self) -> &'static str {
        "azure"
    }

    async fn plan(&mut self) -> Result<Plan<AzureStep>, ProviderError> {
        let observed = self
            .provider
            .observe(self.service, self.desired, true)
            .await?;
        let plan = phases(
            &self.provider.settings,
            self.service,
            self.desired,
            &observed,
        )?;
        self.observed = Some(observed);
        self.wrote = false;
        Ok(plan)
    }

    async fn run(&mut self, step: &AzureStep) -> Result<(), ProviderError> {
        match self.provider.apply(&step.action).await {
            Ok(()) => {
                self.wrote = true;
                Ok(())
            }
            Err(AzureError::PreconditionFailed { operation }) => {
                // Someone changed the object since we read it (possibly since we cached it):
                // nothing was written; read again and re-plan.
                info!(service = %self.service, provider = "azure", operation, "etag changed; re-reading");
                self.provider.cache.clear();
                self.stale = true;
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    async fn finish(&mut self) -> Result<Observed, ProviderError> {
        if self.wrote {
            // The status is read from what ARM stored (a new frontend's address is allocated
            // by the write); the cache holds the objects just written, so this costs no more
            // than the reads the writes invalidated.
            return Ok(self
                .provider
                .observe(self.service, self.desired, true)
                .await?);
        }
        self.observed.take().ok_or_else(|| ProviderError::Internal {
            message: "azure: converged without an observation".into(),
            source: None,
        })
    }

    fn observation_stale(&mut self) -> bool {
        std::mem::take(&mut self.stale)
    }
}

/// Runs the flow; on failure nothing cached is trusted any more.
pub(crate) async fn converge(
    provider: &AzureProvider,
    service: &ServiceKey,
    desired: Option<&Desired>,
) -> Result<Observed, ProviderError> {
    let result = converge::execute(&mut Converge::new(provider, service, desired)).await;
    if result.is_err() {
        // A refused or failed write, or a missing object: nothing cached is trusted now.
        provider.cache.clear();
    }
    result
}

/// What [`converge`] would write now, with reads only.
pub(crate) async fn render(
    provider: &AzureProvider,
    service: &ServiceKey,
    desired: Option<&Desired>,
) -> Result<Vec<kube_lb_provider_core::PlannedChange>, ProviderError> {
    converge::render(&mut Converge::new(provider, service, desired)).await
}

//! The `LoadBalancerProvider` trait and what every provider shares: backend nodes, status,
//! error classes, deterministic naming, ownership tags, rate limiting, retry and call counting.
//!
//! This crate knows no cloud SDK; each cloud crate depends on it, and the binary wires them.

pub mod api;
pub mod calls;
mod classified;
pub mod cluster;
pub mod config_file;
pub mod converge;
pub mod eligibility;
pub mod error;
pub mod naming;
pub mod options;
pub mod paging;
pub mod plan;
pub mod ratelimit;
pub mod retry;
pub mod types;
pub mod wait;

use async_trait::async_trait;

pub use api::CloudApi;
pub use calls::{CallCounter, CallKind, CallRecord, CallSnapshot};
pub use cluster::{ClusterError, ClusterIdentity, ClusterName};
pub use eligibility::{Ineligible, NodeFacts, NodeReadiness, ServiceFacts};
pub use error::{EnvironmentCause, ProviderError};
pub use kube_lb_annotations as annotations;
pub use kube_lb_annotations::{LoadBalancerSpec, ServiceKey};
pub use options::{ClientOptions, WaitSettings, Waiting};
pub use paging::{PageTokens, RepeatedPageToken};
pub use plan::{ChangeAction, FieldChange, OwnedResource, PlannedChange};
pub use ratelimit::{RateLimit, RateLimits};
pub use retry::{Again, RetryPolicy};
pub use types::{BackendNode, IpMode, LoadBalancerIngress, LoadBalancerStatus, NodeAddress};

/// A cloud (or the embedded `local` pool) that can build load balancers for Services.
///
/// Implementations converge: observe what exists, diff it against the spec (a pure function),
/// and apply the smallest set of calls. Every method is idempotent and safe to repeat after a
/// crash at any point; resources are found again by deterministic name and ownership tags.
#[async_trait]
pub trait LoadBalancerProvider: Send + Sync + std::fmt::Debug {
    /// Short provider name used in logs and metric labels (`local`, `aws`, `gcp`, `azure`).
    fn name(&self) -> &'static str;

    /// Creates or updates the load balancer so it matches `spec`, forwarding to `backends`
    /// (already filtered by the controller: ready, not excluded, and for
    /// `externalTrafficPolicy: Local` only nodes with ready local endpoints). Returns the
    /// addresses to write into `.status.loadBalancer`.
    async fn ensure(
        &self,
        spec: &LoadBalancerSpec,
        backends: &[BackendNode],
    ) -> Result<LoadBalancerStatus, ProviderError>;

    /// Deletes everything this provider owns for `service`. Returns `Ok` only when nothing owned
    /// remains, so the controller may remove the finalizer. Deleting what is already gone is `Ok`.
    async fn delete(&self, service: &ServiceKey) -> Result<(), ProviderError>;

    /// The current status of the Service's load balancer, or `None` if none exists.
    async fn status(
        &self,
        service: &ServiceKey,
    ) -> Result<Option<LoadBalancerStatus>, ProviderError>;

    /// Provider-specific node filter applied on top of the controller's generic one
    /// (e.g. AWS `target-node-labels`). Defaults to accepting every node.
    fn accepts_node(&self, _spec: &LoadBalancerSpec, _node: &BackendNode) -> bool {
        true
    }

    /// Tells the provider, at controller start-up and before any `ensure`, that `service`
    /// already has `status` (from `.status.loadBalancer`), so a provider that keeps its state in
    /// memory (the `local` pool) can re-adopt it instead of handing the address out again.
    /// Providers whose state lives in the cloud ignore it.
    async fn adopt(
        &self,
        _service: &ServiceKey,
        _status: &LoadBalancerStatus,
    ) -> Result<(), ProviderError> {
        Ok(())
    }

    /// The mutating calls [`LoadBalancerProvider::ensure`] would make for `spec` and `backends`
    /// now, computed from the cloud's current state with reads only (`kube-lb plan`). Empty when
    /// the load balancer is in sync. Must never make a mutating call; a refused read is an
    /// error, never an empty plan.
    async fn plan_ensure(
        &self,
        _spec: &LoadBalancerSpec,
        _backends: &[BackendNode],
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        Err(ProviderError::Internal {
            message: format!("provider {} cannot plan yet", self.name()),
            source: None,
        })
    }

    /// The mutating calls [`LoadBalancerProvider::delete`] would make for `service` now, with
    /// reads only. Empty when nothing owned remains.
    async fn plan_delete(
        &self,
        _service: &ServiceKey,
    ) -> Result<Vec<PlannedChange>, ProviderError> {
        Err(ProviderError::Internal {
            message: format!("provider {} cannot plan yet", self.name()),
            source: None,
        })
    }

    /// Every cloud resource that carries this cluster's ownership, with the Service each was
    /// made for (`kube-lb audit`). Reads only; a refused or failed read is an error, never a
    /// shorter list.
    async fn owned_resources(&self) -> Result<Vec<OwnedResource>, ProviderError> {
        Err(ProviderError::Internal {
            message: format!("provider {} cannot list its resources yet", self.name()),
            source: None,
        })
    }
}

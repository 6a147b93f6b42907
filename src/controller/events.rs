//! Kubernetes Events with the upstream service controller's reasons, so existing tooling and
//! runbooks keep working.

use k8s_openapi::api::core::v1::Service;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The upstream event source name.
pub const REPORTER: &str = "service-controller";

/// Event reasons used by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// About to create or update a load balancer.
    EnsuringLoadBalancer,
    /// The load balancer matches the Service.
    EnsuredLoadBalancer,
    /// Only the backend set changed and the load balancer was updated.
    UpdatedLoadBalancer,
    /// The provider failed (text in the note).
    SyncLoadBalancerFailed,
    /// About to delete a load balancer.
    DeletingLoadBalancer,
    /// The load balancer is gone.
    DeletedLoadBalancer,
    /// An annotation or field is accepted but probably does not do what was meant.
    AnnotationWarning,
}

impl Reason {
    /// The `reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::EnsuringLoadBalancer => "EnsuringLoadBalancer",
            Reason::EnsuredLoadBalancer => "EnsuredLoadBalancer",
            Reason::UpdatedLoadBalancer => "UpdatedLoadBalancer",
            Reason::SyncLoadBalancerFailed => "SyncLoadBalancerFailed",
            Reason::DeletingLoadBalancer => "DeletingLoadBalancer",
            Reason::DeletedLoadBalancer => "DeletedLoadBalancer",
            Reason::AnnotationWarning => "AnnotationWarning",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Reason::SyncLoadBalancerFailed | Reason::AnnotationWarning => EventType::Warning,
            _ => EventType::Normal,
        }
    }

    fn action(self) -> &'static str {
        match self {
            Reason::DeletingLoadBalancer | Reason::DeletedLoadBalancer => "Delete",
            _ => "Ensure",
        }
    }
}

/// Publishes events about Services. Failing to publish never fails a reconcile: events are
/// informative, the status and finalizer carry the state.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

impl Events {
    /// Events reported as `service-controller` from `instance`.
    pub fn new(client: kube::Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_string(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes one event about `service`.
    pub async fn publish(&self, service: &Service, reason: Reason, note: impl Into<String>) {
        let event = Event {
            type_: reason.event_type(),
            reason: reason.as_str().to_string(),
            note: Some(note.into()),
            action: reason.action().to_string(),
            secondary: None,
        };
        let reference = service.object_ref(&());
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(
                service = %format!("{}/{}", reference.namespace.unwrap_or_default(), reference.name.unwrap_or_default()),
                reason = reason.as_str(),
                %error,
                "could not publish event"
            );
        }
    }
}

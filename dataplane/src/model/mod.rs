//! Pure model: Kubernetes objects in, per-node Service port programming out.

mod index;
pub mod topology;
mod types;

#[cfg(test)]
mod tests;

pub use index::{
    DEFAULT_AFFINITY_TIMEOUT, HEADLESS_LABEL, Index, IndexConfig, PROXY_PROTOCOL_ANNOTATION,
    SERVICE_NAME_LABEL, SERVICE_PROXY_NAME_LABEL, SnapshotChanges, forbidden_endpoint,
};
pub use types::{
    EndpointAddr, HealthCheckModel, PortKey, Protocol, ProxyProtocol, ServiceKey, ServicePortModel,
    Snapshot, TrafficPolicy,
};

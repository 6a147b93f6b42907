//! The Azure provider: Services become frontends of the cluster's shared Standard Load
//! Balancers (`<cluster>` public, `<cluster>-internal` internal), as upstream
//! cloud-provider-azure builds them, so existing clusters' load balancers are adopted.
//!
//! Per Service: a frontend `a<uid>` (on a public IP `<cluster>-a<uid>` owned through tags, an
//! existing public IP, or a subnet), a rule and a probe per port (`a<uid>-TCP-80`), the
//! shared backend pool `<cluster>` with IP-based members, and consolidated allow rules in the
//! cluster security group.
//!
//! ARM is spoken through the `azure_mgmt_network` 0.21 SDK (the design's choice), behind the
//! small [`NetworkClient`] trait because that crate is frozen upstream: the planner works on
//! kube-lb's own ARM model ([`arm`]) and only the client sees the SDK. The client adds what
//! the SDK lacks: `If-Match`/`If-None-Match` preconditions on every write (a pipeline policy),
//! its own operation polling (the SDK sleeps 30 s per poll without `Retry-After` and cannot
//! wait for a DELETE), a single retry layer shared with the other clouds, and tokens kept out
//! of azure_core's request logs. See [`client`] for the details.

pub mod arm;
mod auth;
pub mod client;
pub mod config;
mod convert;
pub mod desired;
mod error;
mod lro;
mod pipeline;
pub mod plan;
mod provider;

pub use client::{ARM_OPERATIONS, ArmClient, NetworkClient, PollSettings};
pub use config::AzureConfig;
pub use error::AzureError;
pub use provider::{AzureProvider, DEFAULT_CLOUD_CONFIG, ProviderOptions};

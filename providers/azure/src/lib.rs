//! The Azure provider: Services become frontends of the cluster's shared Standard Load
//! Balancers (`<cluster>` public, `<cluster>-internal` internal), as upstream
//! cloud-provider-azure builds them, so existing clusters' load balancers are adopted.
//!
//! Per Service: a frontend `a<uid>` (on a public IP `<cluster>-a<uid>` owned through tags, an
//! existing public IP, or a subnet), a rule and a probe per port (`a<uid>-TCP-80`), the
//! shared backend pool `<cluster>` with IP-based members, and consolidated allow rules in the
//! cluster security group.
//!
//! ARM is spoken over `reqwest` behind the small [`NetworkClient`] trait rather than through
//! the frozen `azure_mgmt_network` 0.21 crate. Measured on the 2-core build machine, that crate
//! alone took 149 s to compile (one 124k-line generated unit; 6 min 22 s wall for the first
//! build of this crate with it, while other builds shared the cores), and it offers no
//! `If-Match` setter, no DELETE poller and a 30 s poll sleep when `Retry-After` is absent, all
//! of which kube-lb needs. Swapping the transport back means implementing [`NetworkClient`].

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

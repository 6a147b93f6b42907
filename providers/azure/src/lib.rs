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
//! wait for a DELETE), a single retry layer shared with the other clouds, tokens kept out
//! of azure_core's request logs, and raw-JSON bodies for the objects it rewrites (the SDK's
//! typed models would drop fields they do not know on every read-modify-write). See
//! [`client`] for the details.
//!
//! Build cost: `azure_mgmt_network` is one 124k-line generated unit compiled on one core. On
//! the 2-core build machine (load average about 5 from other builds) it took 138 s of a 139 s
//! `cargo build -p kube-lb-provider-azure --timings` after cleaning both crates; this crate
//! itself 17 s. It adds no second reqwest or hyper (azure_core 0.21 uses reqwest 0.12, as the
//! workspace does), but brings http-types 2 and its older helpers (rand 0.7, base64 0.13).

pub mod arm;
mod auth;
pub mod cache;
pub mod client;
pub mod config;
mod convert;
pub mod desired;
mod error;
mod flow;
pub mod inventory;
mod lro;
mod pipeline;
pub mod plan;
pub mod preview;
mod provider;
#[cfg(test)]
mod test_support;

pub use client::{ARM_OPERATIONS, ArmClient, NetworkClient, PollSettings};
pub use config::AzureConfig;
pub use error::AzureError;
pub use provider::{AzureProvider, DEFAULT_CLOUD_CONFIG, ProviderOptions};

//! The Tencent Cloud provider: one CLB per Service (or a user's CLB named by
//! `tke-existed-lbid`), one listener per Service port, nodes' `InternalIP:NodePort` as targets.
//! Ownership follows TKE: CLBs kube-lb creates carry `tke-createdBy-flag=yes`,
//! `tke-clusterId=<cluster>` and `tke-lb-serviceuuid=<Service UID>`.
//!
//! `loadBalancerSourceRanges` is enforced by a security group of the Service's own bound to its
//! CLB ([`source_ranges`]).
//!
//! Talks to CLB API 3.0 (`2018-03-17`) through a thin typed `reqwest` client with its own
//! TC3-HMAC-SHA256 signer ([`sign`]); no Rust SDK covers CLB.

pub mod client;
pub mod config;
pub mod error;
pub mod plan;
pub mod provider;
pub mod sign;
pub mod source_ranges;

pub use client::{Action, ClbClient};
pub use config::{ConfigError, TencentConfig};
pub use error::TencentError;
pub use provider::{ProviderOptions, TencentProvider, WaitSettings};

/// The CAM actions the provider may call (`clb:<Action>`, `vpc:<Action>` for the security
/// groups of `loadBalancerSourceRanges`), for `deploy/iam/tencent-cam-policy.json`.
pub fn cam_actions() -> Vec<String> {
    Action::ALL
        .iter()
        .map(|a| format!("{}:{}", a.service(), a.as_str()))
        .collect()
}

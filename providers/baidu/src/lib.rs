//! The Baidu Cloud provider: one BLB (Baidu Load Balancer) per Service, with a TCP or UDP
//! listener per port, the nodes as backend servers on the NodePort, and an EIP bound to it
//! unless the Service asks for a VPC-only load balancer
//! (`service.beta.kubernetes.io/cce-load-balancer-internal-vpc: "true"`). Names, descriptions
//! and annotations are those of the retired `cloud-provider-baiducloud` (CCE), so BLBs it
//! created are found again rather than duplicated.
//!
//! No Rust SDK covers BCE, so this is a thin typed client over `reqwest` ([`client`]) with its
//! own `bce-auth-v1` signer ([`sign`]).

pub mod client;
pub mod config;
pub mod error;
pub mod plan;
pub mod provider;
pub mod sign;

pub use client::BaiduClient;
pub use config::{CloudConfig, ConfigError, Resolved};
pub use error::BceError;
pub use provider::{BaiduProvider, ProviderOptions, WaitSettings};

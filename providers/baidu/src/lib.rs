//! The Baidu Cloud provider: one BLB (Baidu Load Balancer) per Service, with a TCP or UDP
//! listener per port, the nodes as backend servers on the NodePort, and an EIP bound to it
//! unless the Service asks for a VPC-only load balancer
//! (`service.beta.kubernetes.io/cce-load-balancer-internal-vpc: "true"`). Names, descriptions
//! and annotations are those of the retired `cloud-provider-baiducloud` (CCE), so BLBs it
//! created are found again rather than duplicated.
//!
//! After each successful ensure the ids are written back on the Service under upstream's keys
//! (through `LoadBalancerStatus::annotations`): the BLB id under
//! `service.beta.kubernetes.io/cce-load-balancer-id` and `…-cce-add-id` (for a BLB the
//! Service owns, as upstream wrote them when it created one) and the EIP under `…-cce-add-eip`.
//! Upstream also *read* them back first, to find the BLB by id before its name. kube-lb does
//! not: it finds the BLB by its name and this cluster's mark in the description (and a renamed
//! one by the Service UID recorded there), which the cloud keeps, while an annotation is
//! user-editable and travels with a copied manifest — reading it would let a Service copied
//! into another namespace adopt, and later delete, another Service's BLB. The one thing lost is
//! finding BLBs of upstream's oldest releases, named `a<uid>`, which only that annotation led to.
//!
//! `spec.loadBalancerIP` names a user's EIP: it must exist in the account and be free (else a
//! user error naming it, before any BLB is created); it is bound, never created, and on delete
//! only unbound.
//!
//! `loadBalancerSourceRanges` is enforced by a security group of the Service's own bound to its
//! BLB ([`source_ranges`]).
//!
//! No Rust SDK covers BCE, so this is a thin typed client over `reqwest` ([`client`]) with its
//! own `bce-auth-v1` signer ([`sign`]).

pub mod client;
pub mod config;
mod eips;
pub mod error;
pub mod flow;
pub mod plan;
pub mod provider;
pub mod sign;
pub mod source_ranges;

pub use client::BaiduClient;
pub use config::{CloudConfig, ConfigError, Resolved};
pub use error::BceError;
pub use provider::{BaiduProvider, ProviderOptions, WaitSettings};

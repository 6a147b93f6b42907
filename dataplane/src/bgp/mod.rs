//! BGP announcement of Service load-balancer addresses (`kube-lb proxy --bgp`): on bare metal,
//! each node tells the routers it peers with which load-balancer addresses it can take traffic
//! for, through an existing routing daemon (FRR: bgpd for BGP, bfdd for BFD), so the routers
//! spread traffic over the advertising nodes (ECMP) and stop sending to a node as soon as its
//! route is withdrawn or its BFD session fails.
//!
//! # Modules
//!
//! [`model`]: the validated configuration (peers, advertisements, BFD profiles).

pub mod crd;
pub mod daemon;
pub mod desired;
pub mod frr;
pub mod lab;
pub mod model;
#[cfg(feature = "watch")]
pub mod speaker;

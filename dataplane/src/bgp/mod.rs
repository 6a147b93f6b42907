//! BGP announcement of Service load-balancer addresses (`kube-lb proxy --bgp`): on bare metal,
//! each node tells the routers it peers with which load-balancer addresses it can take traffic
//! for, through an existing routing daemon (FRR: bgpd for BGP, bfdd for BFD), so the routers
//! spread traffic over the advertising nodes (ECMP) and stop sending to a node as soon as its
//! route is withdrawn or its BFD session fails.
//!
//! # Modules
//!
//! [`model`]: the validated configuration (peers, advertisements, BFD profiles).
//!
//! [`crd`]: the `BGPPeer`, `BGPAdvertisement` and `BFDProfile` custom resources as stored
//! (`kube-lb.io/v1alpha1`, and MetalLB's as read-only aliases), validated into the model.

pub mod crd;
pub mod model;

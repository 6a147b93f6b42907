//! BGP announcement of Service load-balancer addresses (`kube-lb proxy --bgp`): on bare metal,
//! each node tells the routers it peers with which load-balancer addresses it can take traffic
//! for, through an existing routing daemon (FRR: bgpd for BGP, bfdd for BFD), so the routers
//! spread traffic over the advertising nodes (ECMP) and stop sending to a node as soon as its
//! route is withdrawn or its BFD session fails.
//!
//! # Why FRR
//!
//! kube-lb speaks no BGP itself: routers are where BGP bugs hurt, and a daemon that runs in
//! thousands of networks beats a new implementation. FRR rather than BIRD 2 on the nodes:
//!
//! - BFD is built in (bfdd) and tied to bgpd per session with named profiles (BIRD has BFD
//!   too, but FRR's profiles map one to one onto `BFDProfile` objects);
//! - IPv6 over MP-BGP, communities, large communities and local preference are plain
//!   configuration lines;
//! - `frr-reload.py` applies a whole rendered file as the difference from the running
//!   configuration, so a prefix or policy change never resets a session (BIRD's
//!   `configure` restarts a protocol whose options changed);
//! - it is what MetalLB's FRR mode (its default since 0.16, as FRR-K8s) runs, the same way:
//!   a rendered `frr.conf`, applied by `frr-reload.py` in the FRR container.
//!
//! The tests use BIRD 2 as the router ([`lab`]), so two independent implementations
//! interoperate on every run.
//!
//! # Modules
//!
//! - [`model`]: the validated configuration (peers, advertisements, BFD profiles).
//! - [`crd`]: the `BGPPeer`, `BGPAdvertisement` and `BFDProfile` custom resources as stored
//!   (`kube-lb.io/v1alpha1`, and MetalLB's as read-only aliases), validated into the model.
//! - [`desired`] (pure): which prefixes this node announces to which peer, with what.
//! - [`frr`] (pure): the `frr.conf` for that.
//! - [`daemon`]: handing the file to FRR and reading its state back.
//! - `speaker` (feature `watch`): the loop inside `kube-lb proxy`.
//! - [`status`] (pure): what the speakers write into the objects' status.
//! - [`lab`]: the network-namespace rig of the tests and the failover benchmark.

pub mod crd;
pub mod daemon;
pub mod desired;
pub mod frr;
pub mod lab;
pub mod model;
#[cfg(feature = "watch")]
pub mod speaker;
pub mod status;

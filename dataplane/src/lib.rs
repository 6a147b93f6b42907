//! Node dataplane of kube-lb: a pure model of what one node must program for every Service
//! port ([`model`]), an nftables backend ([`nft`]), a tokio userspace proxy ([`userspace`]) and
//! the kube-proxy compatible health servers ([`health`]).

pub mod bgp;
pub mod health;
pub mod l2;
pub mod maglev;
pub mod metrics;
pub mod model;
pub mod nft;
pub mod node_addresses;
pub mod testing;
pub mod userspace;
#[cfg(feature = "watch")]
pub mod watch;

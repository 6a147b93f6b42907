//! The OpenStack provider: one Octavia load balancer per Service, with a listener, pool and
//! optional health monitor per port, nodes as members, and a Neutron floating IP unless the
//! Service is internal; with `manage-security-groups`, a Neutron security group opening the
//! Service's node ports to the member subnet on the nodes' ports ([`security_group`]). Names, descriptions and floating-IP ownership phrases are those of
//! cloud-provider-openstack (OCCM), so load balancers it created are adopted, not duplicated;
//! a Service-UID tag additionally keeps two clusters with the same `--cluster-name` apart.
//!
//! Talks to Keystone v3, Octavia v2 and Neutron v2.0 through a thin typed `reqwest` client
//! ([`client`]); configured from the `cloud.conf` OCCM users already have ([`config`]).

pub mod client;
pub mod config;
pub mod error;
mod inventory;
pub mod member_subnet;
pub mod model;
pub mod plan;
pub mod provider;
pub mod security_group;

pub use client::OpenStackClient;
pub use config::{CloudConfig, ConfigError, Credentials, GlobalConfig, LoadBalancerConfig};
pub use error::OpenStackError;
pub use provider::{OpenStackProvider, ProviderOptions, WaitSettings};

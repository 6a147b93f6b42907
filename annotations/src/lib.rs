//! Turns a Kubernetes `Service` into a typed, validated [`LoadBalancerSpec`].
//!
//! One pure entry point, [`parse`], is shared by the controller, `kube-lb lint` and any admission
//! check. It collects every error (annotation key, value given, what is allowed) instead of
//! stopping at the first, and returns warnings where upstream providers silently do something
//! surprising.
//!
//! Value policy (design/ANNOTATIONS.md): *compatible* — accept what the upstream provider
//! accepts; *early* — reject at parse time what the cloud would reject at sync time; *loud* —
//! warn where upstream silently does something surprising. Each parser documents its choices.

mod diagnostics;
pub mod keys;
mod parse;
pub mod spec;
mod value;

pub use diagnostics::{ErrorKind, Location, ParseError, ParseErrors, Warning};
pub use parse::{
    InvalidTopologyKey, MAX_TOPOLOGY_KEYS, Parsed, TopologyLiftError, lift_topology_keys, parse,
    parse_label_selector,
};
pub use spec::*;
pub use value::UnknownVariant;

//! Turns a Kubernetes `Service` into a typed, validated [`LoadBalancerSpec`].
//!
//! One pure entry point, [`parse`], is shared by the controller, `kube-lb lint` and any admission
//! check. It collects every error (annotation key, value given, what is allowed) instead of
//! stopping at the first, and returns warnings where upstream providers silently do something
//! surprising.

pub mod spec;
mod value;

pub use value::UnknownVariant;

pub use spec::*;

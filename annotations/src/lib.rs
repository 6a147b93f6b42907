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
//!
//! Decisions that cut across clouds:
//! - A Service that is not `type: LoadBalancer` is not an error but a skip: `parse` returns one
//!   error of kind [`ErrorKind::NotLoadBalancer`] and [`ParseErrors::is_not_load_balancer`] is
//!   true. `spec.loadBalancerClass` is returned, not judged (the controller decides ownership).
//! - `spec.loadBalancerIP` is honoured by `local`, GCP, Azure (the per-family annotations win)
//!   and OpenStack; an error on AWS (upstream refuses it); ignored with a warning on Tencent
//!   and Baidu, whose providers do not read it (the seed: an unsupported value is ignored).
//! - Service port names are DNS-1123 labels (lowercase alphanumerics and '-', alphanumeric at
//!   both ends, at most 63), which is what the API server checks for Service ports; the seeds
//!   give the character rules without a length.
//! - Seed 002 `topologyKeys` travels in the annotation [`keys::common::TOPOLOGY_KEYS`]
//!   (comma-separated, same rules): the one input every consumer reads. The field reaches it
//!   at the edge where raw JSON is still seen — [`lift_topology_keys`] for manifest files, the
//!   embedded API server's admission for API writes (it keeps the field, as the 1.17–1.21 API
//!   stored it, and mirrors it) — and [`check_topology_keys`] is the one reading of it, used by
//!   [`parse`] (lint, controller) and the node proxy.
//! - Annotations of another cloud than the one parsed for produce one warning per cloud: they
//!   have no effect, and a wrong `--cloud` or a copied manifest is the usual cause.
//! - An empty value of a numeric annotation means "unset" (default applies) with a warning;
//!   seed 001 itself shows `healthcheck-healthy-threshold: ""`.
//! - Output is bounded by the number of keys and fields, not by the size of a value: quoted
//!   values are cut to [`MAX_VALUE_BYTES`] (UTF-8 safe), and each location lists at most
//!   [`MAX_PER_LOCATION`] errors and as many warnings, then one "… and N more" line.
//! - Per-cloud protocol limits are errors here, before any cloud call: SCTP on AWS, GCP and
//!   Azure; mixed protocols (TCP and UDP in one Service) on AWS and GCP. Baidu and Tencent
//!   build listeners on node ports: their limits (SCTP, a port without a node port once
//!   `allocateLoadBalancerNodePorts` is false, and on Baidu TCP and UDP on one port) are in
//!   [`port_limits`], which their providers call too.
//! - A headless Service (`clusterIP: None`) cannot be `type: LoadBalancer`: an error in the API
//!   server's words, since the API server refuses it before any controller sees it.

mod diagnostics;
pub mod keys;
mod limits;
mod parse;
pub mod spec;
mod value;

pub use diagnostics::{
    ErrorKind, Location, MAX_DETAIL_BYTES, MAX_PER_LOCATION, MAX_VALUE_BYTES, ParseError,
    ParseErrors, Warning, truncate,
};
pub use limits::{port_limits, source_ranges_on_existing, source_ranges_restrict};
pub use parse::{
    InvalidTopologyKey, MAX_TOPOLOGY_KEYS, Parsed, TopologyKeysError, TopologyLiftError,
    check_topology_keys, lift_topology_keys, parse, parse_label_selector,
};
pub use spec::*;
pub use value::UnknownVariant;

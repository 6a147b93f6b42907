//! GCP annotations (reference gcp-azure.md §1.3).

use super::Reader;
use super::service::{Core, refuse_protocols};
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::gcp as key;
use crate::spec::{GcpLoadBalancerType, GcpSpec, NetworkTier, Scheme};

/// Type: `networking.gke.io/load-balancer-type` is read first, then the deprecated
/// `cloud.google.com/load-balancer-type` (compatible). `Internal` (or deprecated `internal`)
/// means internal; upstream treats every other value as external — kube-lb warns (loud) unless
/// the value is `External`. `spec.loadBalancerClass` of the legacy GKE classes wins over the
/// annotation (upstream), with a warning when they disagree.
///
/// Internal-only options (subnet, global access, backend share) on an external LB and the
/// external-only network tier on an internal LB are ignored upstream; kube-lb warns.
///
/// Protocols (gcp-azure.md §1.1, §1.4, §1.5): a forwarding rule carries one `IPProtocol`, TCP or
/// UDP, so SCTP is an error and so are TCP and UDP in one Service (upstream rejects a mixed
/// Service on create, `processMixedProtocolCheck`; kube-lb's GCP provider refuses it always).
/// `allocateLoadBalancerNodePorts: false` is accepted: passthrough load balancers deliver to the
/// Service port on the node, never to a node port (the seeds: GCE does not need them).
pub(crate) fn parse(reader: &mut Reader<'_>, core: &Core) -> (GcpSpec, Scheme) {
    refuse_protocols(
        reader,
        &core.ports,
        "GCP L4 load balancers accept TCP and UDP, not SCTP (a forwarding rule's IPProtocol)",
        Some(
            "GCP L4 load balancers cannot mix TCP and UDP in one Service (one forwarding rule, one \
             protocol): use one Service per protocol",
        ),
    );
    let new = reader
        .get(key::LOAD_BALANCER_TYPE)
        .map(|v| (key::LOAD_BALANCER_TYPE, v));
    let old = reader
        .get(key::LEGACY_LOAD_BALANCER_TYPE)
        .map(|v| (key::LEGACY_LOAD_BALANCER_TYPE, v));
    if let (Some((_, n)), Some((_, o))) = (new, old)
        && n != o
    {
        reader.diag.warn(
            Location::annotation(key::LEGACY_LOAD_BALANCER_TYPE),
            Some(o),
            format!("ignored: {} = {n:?} is read first", key::LOAD_BALANCER_TYPE),
        );
    }
    let chosen = new.or(old);
    let mut lb_type = GcpLoadBalancerType::External;
    if let Some((k, raw)) = chosen {
        match raw.parse::<GcpLoadBalancerType>() {
            Ok(t) => {
                if raw == "internal" {
                    reader.diag.warn(
                        Location::annotation(k),
                        Some(raw),
                        "lowercase \"internal\" is deprecated; write \"Internal\"",
                    );
                }
                lb_type = t;
            }
            Err(_) if raw.is_empty() => {}
            Err(_) => reader.diag.warn(
                Location::annotation(k),
                Some(raw),
                "not \"Internal\": upstream builds an EXTERNAL load balancer",
            ),
        }
    }
    match core.load_balancer_class.as_deref() {
        Some(key::CLASS_INTERNAL) => lb_type = GcpLoadBalancerType::Internal,
        Some(key::CLASS_EXTERNAL) => {
            if lb_type == GcpLoadBalancerType::Internal
                && let Some((k, raw)) = chosen
            {
                reader.diag.warn(
                    Location::annotation(k),
                    Some(raw),
                    format!(
                        "conflicts with loadBalancerClass {}; an external load balancer is built",
                        key::CLASS_EXTERNAL
                    ),
                );
            }
            lb_type = GcpLoadBalancerType::External;
        }
        _ => {}
    }
    let internal = lb_type == GcpLoadBalancerType::Internal;

    let internal_subnet = reader.non_empty(key::INTERNAL_SUBNET).map(str::to_owned);
    let global_access = reader.true_flag(key::ALLOW_GLOBAL_ACCESS, false);
    let backend_share = reader.true_flag(key::BACKEND_SHARE, false)
        || reader.true_flag(key::LEGACY_BACKEND_SHARE, false);
    if !internal {
        for (k, set) in [
            (key::INTERNAL_SUBNET, internal_subnet.is_some()),
            (key::ALLOW_GLOBAL_ACCESS, global_access),
            (key::BACKEND_SHARE, backend_share),
        ] {
            if set {
                reader.diag.warn(
                    Location::annotation(k),
                    reader.all().get(k).map(String::as_str),
                    "applies to internal load balancers only; ignored",
                );
            }
        }
    }
    if backend_share && core.is_local() {
        reader.diag.warn(
            Location::annotation(key::BACKEND_SHARE),
            reader.all().get(key::BACKEND_SHARE).map(String::as_str),
            "ignored with externalTrafficPolicy: Local",
        );
    }

    let network_tier = match reader.non_empty(key::NETWORK_TIER) {
        None => None,
        Some(raw) => match raw.parse::<NetworkTier>() {
            Ok(tier) => {
                if internal {
                    reader.diag.warn(
                        Location::annotation(key::NETWORK_TIER),
                        Some(raw),
                        "applies to external load balancers only; ignored",
                    );
                }
                Some(tier)
            }
            Err(error) => {
                reader.diag.error(
                    Location::annotation(key::NETWORK_TIER),
                    Some(raw),
                    ErrorKind::Invalid,
                    format!("must be {}", error.allowed_text()),
                );
                None
            }
        },
    };
    let regional_backend_service = match reader.get(key::L4_RBS) {
        Some("enabled") => {
            reader.diag.warn(
                Location::annotation(key::L4_RBS),
                Some("enabled"),
                "hands the Service to ingress-gce upstream; kube-lb still builds it",
            );
            true
        }
        Some(other) if !other.is_empty() => {
            reader.diag.warn(
                Location::annotation(key::L4_RBS),
                Some(other),
                "only \"enabled\" has an effect; ignored",
            );
            false
        }
        _ => false,
    };

    let spec = GcpSpec {
        load_balancer_type: lb_type,
        type_annotation: chosen.map(|(k, _)| k.to_owned()),
        internal_subnet,
        global_access,
        backend_share,
        network_tier,
        regional_backend_service,
    };
    let scheme = if internal {
        Scheme::Internal
    } else {
        Scheme::External
    };
    (spec, scheme)
}

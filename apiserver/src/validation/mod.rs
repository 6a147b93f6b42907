//! Validation of the endpoint resources, as kube-apiserver 1.33 does it: `ValidateEndpoints`
//! (pkg/apis/core/validation/validation.go) and `ValidateEndpointSlice`
//! (pkg/apis/discovery/validation/validation.go), and `metav1.Condition` lists
//! ([`validate_conditions`]), the metadata rules every kind meets ([`validate_object_meta`]),
//! and ConfigMaps, Nodes and Leases ([`validate_config_map`], [`validate_node`],
//! [`validate_lease`]), and ValidatingWebhookConfigurations
//! ([`default_webhook_configuration`], [`validate_webhook_configuration`]). Service validation
//! lives with Service allocation in [`crate::services`].

mod conditions;
mod core_kinds;
mod endpoints;
mod object_meta;
mod webhooks;

use std::net::IpAddr;

pub use conditions::validate_conditions;
pub use core_kinds::{
    CONFIG_MAP_MAX_BYTES, sync_pod_cidrs, validate_config_map, validate_lease,
    validate_namespace_finalizers, validate_node,
};
pub use endpoints::{validate_endpoint_slice, validate_endpoints};
pub use object_meta::{ANNOTATIONS_MAX_BYTES, validate_labels, validate_object_meta};
pub use webhooks::{default_webhook_configuration, validate_webhook_configuration};

use crate::status::Cause;

/// `ValidateNonSpecialIP`: addresses that make no sense as a destination. Unspecified and
/// loopback addresses would point back at whichever node handles the traffic; link-local
/// addresses (169.254.0.0/16, fe80::/10) are node-centric (the metadata service); link-local
/// multicast (224.0.0.0/24, ff02::/16) is not a backend. Go's `net.IP` methods treat an
/// IPv4-mapped IPv6 address as its IPv4 address, and so does this.
pub fn non_special_ip(field: &str, text: &str, ip: IpAddr) -> Vec<Cause> {
    match special_ip(ip) {
        Some(UNSPECIFIED) => vec![Cause::invalid(
            field,
            text,
            &format!("may not be unspecified ({text})"),
        )],
        Some(detail) => vec![Cause::invalid(field, text, detail)],
        None => Vec::new(),
    }
}

const UNSPECIFIED: &str = "may not be unspecified";

/// Which special range `ip` is in, as the message kube-apiserver gives, or `None`.
fn special_ip(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let (unspecified, loopback, link_local, link_local_multicast) = match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            (
                v4.is_unspecified(),
                v4.is_loopback(),
                a == 169 && b == 254,
                a == 224 && b == 0 && c == 0,
            )
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            (
                v6.is_unspecified(),
                v6.is_loopback(),
                first & 0xffc0 == 0xfe80,
                // Go's IsLinkLocalMulticast: ff02::/16.
                first & 0xff0f == 0xff02,
            )
        }
    };
    if unspecified {
        Some(UNSPECIFIED)
    } else if loopback {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)")
    } else if link_local {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
    } else if link_local_multicast {
        Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)")
    } else {
        None
    }
}

/// Whether `ip` is a loopback address (the one special range `kube-lb up` may allow).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
        IpAddr::V4(v4) => v4.is_loopback(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every range `ValidateNonSpecialIP` refuses (validation.go), IPv4 and IPv6, and
    /// neighbours it accepts.
    #[test]
    fn special_ranges() {
        let cases: &[(&str, Option<&str>)] = &[
            ("0.0.0.0", Some("unspecified")),
            ("::", Some("unspecified")),
            ("127.0.0.1", Some("loopback")),
            ("127.255.0.9", Some("loopback")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("169.254.1.1", Some("link-local range")),
            ("fe80::1", Some("link-local range")),
            ("febf::1", Some("link-local range")),
            ("224.0.0.5", Some("link-local multicast")),
            ("ff02::1", Some("link-local multicast")),
            ("ff12::1", Some("link-local multicast")),
            ("10.0.0.1", None),
            ("169.253.1.1", None),
            ("224.0.1.1", None),
            ("fec0::1", None),
            ("ff05::1", None),
            ("2001:db8::1", None),
        ];
        for (text, want) in cases {
            let ip: IpAddr = text.parse().unwrap();
            let got = special_ip(ip);
            match want {
                Some(part) => assert!(got.is_some_and(|g| g.contains(part)), "{text}: {got:?}"),
                None => assert_eq!(got, None, "{text}"),
            }
        }
    }
}

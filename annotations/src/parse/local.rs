//! `local` provider annotations (issue 18): requested addresses, the pool, the sharing key
//! and the pool written back by the controller, each under kube-lb's key and MetalLB's two
//! spellings (`metallb.io/`, the deprecated `metallb.universe.tf/`).
//!
//! Value policy: a MetalLB key is honoured with a warning naming kube-lb's key, so a cluster
//! moves over without editing Services; kube-lb's key wins over an alias that says something
//! else (an error, since one of them is a mistake). An entry of the address list that is not an
//! IP, or two entries of one family, are errors naming the annotation. An address of a family
//! the Service does not have (`spec.ipFamilies`) is a warning naming the annotation, and that
//! address is not requested. `spec.loadBalancerIP` is honoured when no list is given; both
//! together must agree.

use std::net::IpAddr;

use k8s_openapi::api::core::v1::Service;

use super::Reader;
use super::service::Core;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::local as keys;
use crate::spec::{IpFamily, IpFamilyPolicy, LocalSpec};

/// One setting and the keys it may be spelled with: kube-lb's first.
struct Aliased {
    key: &'static str,
    aliases: [&'static str; 2],
}

const REQUESTED: Aliased = Aliased {
    key: keys::LOAD_BALANCER_IPS,
    aliases: [
        keys::METALLB_LOAD_BALANCER_IPS,
        keys::METALLB_LEGACY_LOAD_BALANCER_IPS,
    ],
};
const POOL: Aliased = Aliased {
    key: keys::ADDRESS_POOL,
    aliases: [
        keys::METALLB_ADDRESS_POOL,
        keys::METALLB_LEGACY_ADDRESS_POOL,
    ],
};
const SHARING: Aliased = Aliased {
    key: keys::ALLOW_SHARED_IP,
    aliases: [
        keys::METALLB_ALLOW_SHARED_IP,
        keys::METALLB_LEGACY_ALLOW_SHARED_IP,
    ],
};
const ALLOCATED: Aliased = Aliased {
    key: keys::ALLOCATED_FROM_POOL,
    aliases: [
        keys::METALLB_ALLOCATED_FROM_POOL,
        keys::METALLB_LEGACY_ALLOCATED_FROM_POOL,
    ],
};

/// The value of `setting` and the key it was read from: kube-lb's key, else the first alias
/// set (with a warning), reporting an alias that contradicts the value used.
fn read_aliased<'a>(
    reader: &mut Reader<'a>,
    setting: &Aliased,
    warn_alias: bool,
) -> Option<(&'static str, &'a str)> {
    let own = reader.non_empty(setting.key).map(|v| (setting.key, v));
    let mut chosen = own;
    for alias in setting.aliases {
        let Some(value) = reader.non_empty(alias) else {
            continue;
        };
        match chosen {
            None => {
                if warn_alias {
                    reader.diag.warn(
                        Location::annotation(alias),
                        Some(value),
                        format!(
                            "MetalLB's key is accepted as an alias of {}; rename it",
                            setting.key
                        ),
                    );
                }
                chosen = Some((alias, value));
            }
            Some((used, kept)) if kept != value => reader.diag.error(
                Location::annotation(alias),
                Some(value),
                ErrorKind::Conflict,
                format!("says something else than {used} ({kept:?}); keep one"),
            ),
            Some(_) => {}
        }
    }
    chosen
}

/// A pool name: an object name (DNS-1123 subdomain).
fn valid_pool_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= 253
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

fn families(reader: &mut Reader<'_>, service: &Service) -> (Option<IpFamilyPolicy>, Vec<IpFamily>) {
    let spec = service.spec.as_ref();
    let policy = spec
        .and_then(|s| s.ip_family_policy.as_deref())
        .and_then(|raw| match raw {
            "SingleStack" => Some(IpFamilyPolicy::SingleStack),
            "PreferDualStack" => Some(IpFamilyPolicy::PreferDualStack),
            "RequireDualStack" => Some(IpFamilyPolicy::RequireDualStack),
            other => {
                reader.diag.error(
                    Location::field("spec.ipFamilyPolicy"),
                    Some(other),
                    ErrorKind::Invalid,
                    "must be SingleStack, PreferDualStack or RequireDualStack",
                );
                None
            }
        });
    let mut families = Vec::new();
    for (i, raw) in spec
        .and_then(|s| s.ip_families.as_deref())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let family = match raw.as_str() {
            "IPv4" => IpFamily::V4,
            "IPv6" => IpFamily::V6,
            other => {
                reader.diag.error(
                    Location::field(format!("spec.ipFamilies[{i}]")),
                    Some(other),
                    ErrorKind::Invalid,
                    "must be IPv4 or IPv6",
                );
                continue;
            }
        };
        if !families.contains(&family) {
            families.push(family);
        }
    }
    (policy, families)
}

/// The requested addresses of the annotation's list (at most one per family; it must agree
/// with `spec.loadBalancerIP`, which alone stays in the core spec); addresses of a family the
/// Service does not have are dropped with a warning.
fn requested(reader: &mut Reader<'_>, core: &Core, families: &[IpFamily]) -> Vec<IpAddr> {
    let mut requested: Vec<IpAddr> = Vec::new();
    let mut source = "spec.loadBalancerIP";
    let mut location = Location::field("spec.loadBalancerIP");
    if let Some((key, raw)) = read_aliased(reader, &REQUESTED, true) {
        source = key;
        location = Location::annotation(key);
        for item in raw.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.parse::<IpAddr>() {
                Ok(ip)
                    if requested
                        .iter()
                        .any(|r| IpFamily::of(*r) == IpFamily::of(ip)) =>
                {
                    reader.diag.error(
                        location.clone(),
                        Some(raw),
                        ErrorKind::Invalid,
                        format!(
                            "asks for two {} addresses; at most one address per family",
                            IpFamily::of(ip)
                        ),
                    );
                }
                Ok(ip) => requested.push(ip),
                Err(_) => reader.diag.error(
                    location.clone(),
                    Some(item),
                    ErrorKind::Invalid,
                    "not an IP address; expected a comma list of IPv4/IPv6 addresses",
                ),
            }
        }
        if let Some(ip) = core.requested_ip
            && !requested.contains(&ip)
        {
            reader.diag.error(
                Location::field("spec.loadBalancerIP"),
                Some(&ip.to_string()),
                ErrorKind::Conflict,
                format!("is not among the addresses of {key}; keep one"),
            );
        }
    }
    if families.is_empty() {
        return requested;
    }
    let shown = families
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    // `spec.loadBalancerIP` alone stays in the core spec; the provider drops an address of a
    // family the Service does not have, and this says so.
    if source == "spec.loadBalancerIP"
        && let Some(ip) = core.requested_ip
        && !families.contains(&IpFamily::of(ip))
    {
        reader.diag.warn(
            location.clone(),
            Some(&ip.to_string()),
            format!(
                "asks for an {} address but the Service's spec.ipFamilies is [{shown}]; not \
                 requested",
                IpFamily::of(ip)
            ),
        );
    }
    requested.retain(|ip| {
        let family = IpFamily::of(*ip);
        let known = families.contains(&family);
        if !known {
            reader.diag.warn(
                location.clone(),
                Some(&ip.to_string()),
                format!(
                    "asks for an {family} address but the Service's spec.ipFamilies is [{shown}]; \
                     not requested (from {source})"
                ),
            );
        }
        known
    });
    requested
}

/// Parses the `local` provider's annotations.
pub(crate) fn parse(reader: &mut Reader<'_>, core: &Core, service: &Service) -> LocalSpec {
    let (ip_family_policy, ip_families) = families(reader, service);
    let requested_ips = requested(reader, core, &ip_families);
    if ip_family_policy == Some(IpFamilyPolicy::RequireDualStack) && requested_ips.len() == 1 {
        reader.diag.warn(
            Location::field("spec.ipFamilyPolicy"),
            Some("RequireDualStack"),
            "one address is requested; the other family's address comes from the same pool",
        );
    }
    let address_pool = read_aliased(reader, &POOL, true).and_then(|(key, name)| {
        if valid_pool_name(name) {
            Some(name.to_owned())
        } else {
            reader.diag.error(
                Location::annotation(key),
                Some(name),
                ErrorKind::Invalid,
                "must be the name of an IPPool (lowercase letters, digits, '-' and '.')",
            );
            None
        }
    });
    let sharing_key = read_aliased(reader, &SHARING, true).map(|(_, key)| key.to_owned());
    // Written by a controller, not by the user: no alias warning.
    let allocated_from_pool = read_aliased(reader, &ALLOCATED, false).map(|(_, p)| p.to_owned());
    LocalSpec {
        requested_ips,
        address_pool,
        sharing_key,
        ip_family_policy,
        ip_families,
        labels: service.metadata.labels.clone().unwrap_or_default(),
        allocated_from_pool,
        selector: service
            .spec
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use crate::{Cloud, ParseErrors, ProviderSpec, parse};

    use super::*;

    fn service(
        annotations: &[(&str, &str)],
        lb_ip: Option<&str>,
        policy: Option<&str>,
        families: &[&str],
    ) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_ip: lb_ip.map(String::from),
                ip_family_policy: policy.map(String::from),
                ip_families: (!families.is_empty())
                    .then(|| families.iter().map(|f| f.to_string()).collect()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn local(result: &Result<crate::Parsed, ParseErrors>) -> &LocalSpec {
        match &result.as_ref().unwrap().spec.provider {
            ProviderSpec::Local(local) => local,
            other => panic!("{other:?}"),
        }
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn requested_addresses_pool_and_sharing_key() {
        // (annotations, loadBalancerIP, ipFamilies, requested, pool, key, warnings)
        type Case<'a> = (
            Vec<(&'a str, &'a str)>,
            Option<&'a str>,
            Vec<&'a str>,
            Vec<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            usize,
        );
        let cases: Vec<Case<'_>> = vec![
            (vec![], None, vec![], vec![], None, None, 0),
            // spec.loadBalancerIP stays in the core spec (the provider reads it there).
            (vec![], Some("10.0.0.5"), vec![], vec![], None, None, 0),
            (
                vec![(keys::LOAD_BALANCER_IPS, "10.0.0.5, fd00::5")],
                None,
                vec!["IPv4", "IPv6"],
                vec!["10.0.0.5", "fd00::5"],
                None,
                None,
                0,
            ),
            (
                vec![(keys::METALLB_LOAD_BALANCER_IPS, "10.0.0.5")],
                None,
                vec![],
                vec!["10.0.0.5"],
                None,
                None,
                1,
            ),
            (
                vec![(keys::ADDRESS_POOL, "lan"), (keys::ALLOW_SHARED_IP, "dns")],
                None,
                vec![],
                vec![],
                Some("lan"),
                Some("dns"),
                0,
            ),
            (
                vec![
                    (keys::METALLB_LEGACY_ADDRESS_POOL, "lan"),
                    (keys::METALLB_ALLOW_SHARED_IP, "dns"),
                ],
                None,
                vec![],
                vec![],
                Some("lan"),
                Some("dns"),
                2,
            ),
            // A family the Service does not have: dropped with a warning.
            (
                vec![(keys::LOAD_BALANCER_IPS, "10.0.0.5,fd00::5")],
                None,
                vec!["IPv4"],
                vec!["10.0.0.5"],
                None,
                None,
                1,
            ),
            // spec.loadBalancerIP alone of a family the Service does not have: a warning
            // (the provider does not request it).
            (vec![], Some("fd00::5"), vec!["IPv4"], vec![], None, None, 1),
            (
                vec![],
                Some("10.0.0.5"),
                vec!["IPv4"],
                vec![],
                None,
                None,
                0,
            ),
            // Same value under both spellings: no conflict, one alias warning.
            (
                vec![
                    (keys::ADDRESS_POOL, "lan"),
                    (keys::METALLB_ADDRESS_POOL, "lan"),
                ],
                None,
                vec![],
                vec![],
                Some("lan"),
                None,
                0,
            ),
        ];
        for (annotations, lb_ip, families, want_ips, pool, key, warnings) in cases {
            let svc = service(&annotations, lb_ip, None, &families);
            let parsed = parse(Cloud::Local, &svc);
            let spec = local(&parsed);
            assert_eq!(spec.requested_ips, ips(&want_ips), "{annotations:?}");
            assert_eq!(spec.address_pool.as_deref(), pool, "{annotations:?}");
            assert_eq!(spec.sharing_key.as_deref(), key, "{annotations:?}");
            assert_eq!(spec.labels.get("app").map(String::as_str), Some("web"));
            let got = parsed.as_ref().unwrap().warnings.len();
            assert_eq!(
                got,
                warnings,
                "{annotations:?}: {:?}",
                parsed.unwrap().warnings
            );
        }
    }

    #[test]
    fn bad_values_are_errors_naming_the_annotation() {
        // (annotations, loadBalancerIP, what the error names)
        type Case<'a> = (Vec<(&'a str, &'a str)>, Option<&'a str>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                vec![(keys::LOAD_BALANCER_IPS, "10.0.0.5,banana")],
                None,
                keys::LOAD_BALANCER_IPS,
            ),
            (
                vec![(keys::LOAD_BALANCER_IPS, "10.0.0.5,10.0.0.6")],
                None,
                keys::LOAD_BALANCER_IPS,
            ),
            (
                vec![(keys::METALLB_LOAD_BALANCER_IPS, "nope")],
                None,
                keys::METALLB_LOAD_BALANCER_IPS,
            ),
            (
                vec![(keys::ADDRESS_POOL, "Not_A_Pool")],
                None,
                keys::ADDRESS_POOL,
            ),
            (
                vec![(keys::ADDRESS_POOL, "a"), (keys::METALLB_ADDRESS_POOL, "b")],
                None,
                keys::METALLB_ADDRESS_POOL,
            ),
            (
                vec![(keys::LOAD_BALANCER_IPS, "10.0.0.5")],
                Some("10.0.0.6"),
                "spec.loadBalancerIP",
            ),
        ];
        for (annotations, lb_ip, named) in cases {
            let errors = parse(Cloud::Local, &service(&annotations, lb_ip, None, &[]))
                .expect_err("an error");
            assert!(errors.to_string().contains(named), "{named}: {errors}");
        }
    }

    #[test]
    fn families_and_written_back_pool() {
        let svc = service(
            &[(keys::METALLB_ALLOCATED_FROM_POOL, "lan")],
            None,
            Some("PreferDualStack"),
            &["IPv6", "IPv4"],
        );
        let parsed = parse(Cloud::Local, &svc);
        let spec = local(&parsed);
        assert_eq!(spec.ip_family_policy, Some(IpFamilyPolicy::PreferDualStack));
        assert_eq!(spec.ip_families, vec![IpFamily::V6, IpFamily::V4]);
        assert_eq!(spec.allocated_from_pool.as_deref(), Some("lan"));
        assert!(
            parsed.as_ref().unwrap().warnings.is_empty(),
            "the controller's own key is not warned about"
        );
        // Not the local cloud: the keys are another cloud's, with no effect.
        let aws = parse(
            Cloud::Gcp,
            &service(&[(keys::ADDRESS_POOL, "lan")], None, None, &[]),
        )
        .unwrap();
        assert!(
            aws.warnings
                .iter()
                .any(|w| w.to_string().contains("cloud local")),
            "{:?}",
            aws.warnings
        );
    }
}

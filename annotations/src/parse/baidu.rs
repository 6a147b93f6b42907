//! Baidu CCE (`cloud-provider-baiducloud`, retired): `service.beta.kubernetes.io/cce-load-balancer-*`
//! and `cce-elastic-ip-*` (reference other-clouds.md §3.8).
//!
//! Upstream read its booleans as exactly `"true"` (anything else silently false: kube-lb warns)
//! and dropped unparsable integers with a log line; kube-lb refuses them, naming the key, the
//! value and what is allowed, so no cloud call is made with a value the user did not mean. The
//! EIP rules are upstream's `getEipArgsFromAnnotation`: postpaid by traffic 1–1000 Mbps
//! (default 1000), postpaid by bandwidth 1–200 (default 200), prepaid 1–200 (default 200) with
//! a reservation length of 1–9, 12, 24 or 36 months and no billing method.

use super::Reader;
use super::service::Core;
use crate::diagnostics::{ErrorKind, Location};
use crate::keys::baidu;
use crate::spec::{BaiduBillingMethod, BaiduEipSpec, BaiduPaymentTiming, BaiduSpec, Scheme};

/// Prepaid reservation lengths BCE sells, in months.
pub const RESERVATION_MONTHS: &[u32] = &[1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 24, 36];

/// BLB and EIP names: BCE accepts 1–65 characters starting with a letter, of letters, digits
/// and `-_/.`.
fn valid_name(name: &str) -> bool {
    name.chars().count() <= 65
        && name.chars().next().is_some_and(char::is_alphabetic)
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || "-_/.".contains(c))
}

fn name(reader: &mut Reader<'_>, key: &'static str) -> Option<String> {
    let value = reader.non_empty(key)?;
    if valid_name(value) {
        Some(value.to_owned())
    } else {
        reader.diag.error(
            Location::annotation(key),
            Some(value),
            ErrorKind::Invalid,
            "must be 1-65 characters, start with a letter, and contain only letters, digits and - _ / .",
        );
        None
    }
}

fn id(reader: &mut Reader<'_>, key: &'static str, prefix: &str, what: &str) -> Option<String> {
    let value = reader.non_empty(key)?;
    let ok = value.len() > prefix.len()
        && value.starts_with(prefix)
        && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if ok {
        Some(value.to_owned())
    } else {
        reader.diag.error(
            Location::annotation(key),
            Some(value),
            ErrorKind::Invalid,
            format!("must be a {what} id ({prefix}…, letters, digits and -)"),
        );
        None
    }
}

fn parse_eip(reader: &mut Reader<'_>) -> BaiduEipSpec {
    let name = name(reader, baidu::EIP_NAME);
    let payment_raw = reader.non_empty(baidu::EIP_PAYMENT_TIMING);
    let payment_timing = match payment_raw {
        None | Some("Postpaid") => BaiduPaymentTiming::Postpaid,
        Some("Prepaid") => BaiduPaymentTiming::Prepaid,
        Some(other) => {
            reader.diag.error(
                Location::annotation(baidu::EIP_PAYMENT_TIMING),
                Some(other),
                ErrorKind::Invalid,
                "must be Postpaid or Prepaid",
            );
            BaiduPaymentTiming::Postpaid
        }
    };
    let billing_raw = reader.non_empty(baidu::EIP_BILLING_METHOD);
    let billing_method = match (payment_timing, billing_raw) {
        (BaiduPaymentTiming::Prepaid, None) => None,
        (BaiduPaymentTiming::Prepaid, Some(value)) => {
            reader.diag.error(
                Location::annotation(baidu::EIP_BILLING_METHOD),
                Some(value),
                ErrorKind::Conflict,
                "must be unset for a Prepaid EIP (prepaid EIPs are billed by bandwidth)",
            );
            None
        }
        (_, None | Some("ByTraffic")) => Some(BaiduBillingMethod::ByTraffic),
        (_, Some("ByBandwidth")) => Some(BaiduBillingMethod::ByBandwidth),
        (_, Some(other)) => {
            reader.diag.error(
                Location::annotation(baidu::EIP_BILLING_METHOD),
                Some(other),
                ErrorKind::Invalid,
                "must be ByTraffic or ByBandwidth",
            );
            Some(BaiduBillingMethod::ByTraffic)
        }
    };
    let (max, default) = match billing_method {
        Some(BaiduBillingMethod::ByTraffic) => (1000, 1000),
        _ => (200, 200),
    };
    let bandwidth_mbps = reader
        .int_in(
            baidu::EIP_BANDWIDTH_IN_MBPS,
            1..=max,
            "Mbps for this payment and billing",
        )
        .unwrap_or(default);
    let reservation_raw = reader.non_empty(baidu::EIP_RESERVATION_LENGTH);
    let reservation_months = match (payment_timing, reservation_raw) {
        (BaiduPaymentTiming::Postpaid, None) => None,
        (BaiduPaymentTiming::Postpaid, Some(value)) => {
            reader.diag.warn(
                Location::annotation(baidu::EIP_RESERVATION_LENGTH),
                Some(value),
                "ignored: a reservation length applies to Prepaid EIPs only",
            );
            None
        }
        (BaiduPaymentTiming::Prepaid, raw) => {
            let months = raw.and_then(|v| v.parse::<u32>().ok());
            match months {
                Some(m) if RESERVATION_MONTHS.contains(&m) => Some(m),
                _ => {
                    reader.diag.error(
                        Location::annotation(baidu::EIP_RESERVATION_LENGTH),
                        raw,
                        ErrorKind::Invalid,
                        "a Prepaid EIP needs a reservation length of 1-9, 12, 24 or 36 (months)",
                    );
                    None
                }
            }
        }
    };
    BaiduEipSpec {
        name,
        payment_timing,
        billing_method,
        bandwidth_mbps,
        reservation_months,
    }
}

/// Parses the Baidu keys. `spec.loadBalancerIP` names a user's EIP that the provider binds
/// (upstream's `ensureEIPWithSpecificIP`); it stays in the core spec, where the provider reads
/// it. An IPv6 address cannot be a BCE EIP and is refused here, with no cloud call.
pub(crate) fn parse(reader: &mut Reader<'_>, core: &Core) -> (BaiduSpec, Scheme) {
    let internal_vpc = reader.true_flag(baidu::INTERNAL_VPC, false);
    if let Some(ip) = core.requested_ip {
        if internal_vpc {
            reader.diag.warn(
                Location::field("spec.loadBalancerIP"),
                Some(&ip.to_string()),
                "ignored: an internal-vpc BLB is reached at its VPC address and gets no EIP",
            );
        } else if ip.is_ipv6() {
            reader.diag.error(
                Location::field("spec.loadBalancerIP"),
                Some(&ip.to_string()),
                ErrorKind::Unsupported,
                "must be the IPv4 address of an EIP of this Baidu account (BCE EIPs are IPv4)",
            );
        }
    }
    let allocate_vip = reader.true_flag(baidu::ALLOCATE_VIP, false);
    let reserve_lb = reader.true_flag(baidu::RESERVE_LB, false);
    let lb_name = name(reader, baidu::LB_NAME);
    let subnet_id = id(reader, baidu::SUBNET_ID, "sbn-", "subnet");
    let exist_id = id(reader, baidu::EXIST_ID, "lb-", "BLB");
    let known_id = id(reader, baidu::LOAD_BALANCER_ID, "lb-", "BLB")
        .or_else(|| id(reader, baidu::CCE_ADD_ID, "lb-", "BLB"));
    // Written back (by upstream, and by kube-lb after each ensure); read so it is not reported
    // as unknown. The provider never looks a BLB up by these ids: see providers/baidu/src/lib.rs.
    let _ = reader.get(baidu::CCE_ADD_EIP);
    if let Some(raw) = reader.get(baidu::RS_MAX_NUM) {
        reader.diag.warn(
            Location::annotation(baidu::RS_MAX_NUM),
            Some(raw),
            "ignored: kube-lb registers every eligible node (BCE's per-BLB backend quota applies)",
        );
    }
    let eip = parse_eip(reader);
    if internal_vpc
        && reader
            .all()
            .keys()
            .any(|k| k.starts_with("service.beta.kubernetes.io/cce-elastic-ip-"))
    {
        reader.diag.warn(
            Location::annotation(baidu::INTERNAL_VPC),
            Some("true"),
            "the cce-elastic-ip-* annotations are ignored: an internal-vpc BLB gets no EIP",
        );
    }
    let spec = BaiduSpec {
        internal_vpc,
        lb_name,
        subnet_id,
        allocate_vip,
        reserve_lb: reserve_lb || exist_id.is_some(),
        exist_id,
        known_id,
        eip,
    };
    let scheme = if internal_vpc {
        Scheme::Internal
    } else {
        Scheme::External
    };
    (spec, scheme)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::Cloud;

    fn parse_with(annotations: &[(&str, &str)]) -> Result<BaiduSpec, String> {
        let mut svc: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
        }))
        .map_err(|e| e.to_string())?;
        svc.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        );
        match crate::parse(Cloud::Baidu, &svc) {
            Ok(parsed) => match parsed.spec.provider {
                crate::ProviderSpec::Baidu(spec) => Ok(spec),
                other => Err(format!("not a Baidu spec: {other:?}")),
            },
            Err(errors) => Err(errors.to_string()),
        }
    }

    #[test]
    fn eip_options_default_and_validate_as_upstream() {
        let ok = [
            (
                vec![],
                BaiduPaymentTiming::Postpaid,
                Some(BaiduBillingMethod::ByTraffic),
                1000,
                None,
            ),
            (
                vec![(baidu::EIP_BILLING_METHOD, "ByBandwidth")],
                BaiduPaymentTiming::Postpaid,
                Some(BaiduBillingMethod::ByBandwidth),
                200,
                None,
            ),
            (
                vec![
                    (baidu::EIP_PAYMENT_TIMING, "Prepaid"),
                    (baidu::EIP_RESERVATION_LENGTH, "12"),
                    (baidu::EIP_BANDWIDTH_IN_MBPS, "10"),
                ],
                BaiduPaymentTiming::Prepaid,
                None,
                10,
                Some(12),
            ),
        ];
        for (annotations, payment, billing, bandwidth, months) in ok {
            let spec = parse_with(&annotations).unwrap_or_else(|e| panic!("{annotations:?}: {e}"));
            assert_eq!(spec.eip.payment_timing, payment, "{annotations:?}");
            assert_eq!(spec.eip.billing_method, billing, "{annotations:?}");
            assert_eq!(spec.eip.bandwidth_mbps, bandwidth, "{annotations:?}");
            assert_eq!(spec.eip.reservation_months, months, "{annotations:?}");
        }
    }

    #[test]
    fn bad_values_name_key_value_and_what_is_allowed() {
        let cases = [
            (baidu::EIP_PAYMENT_TIMING, "Monthly", "Postpaid or Prepaid"),
            (
                baidu::EIP_BILLING_METHOD,
                "ByPacket",
                "ByTraffic or ByBandwidth",
            ),
            (baidu::EIP_BANDWIDTH_IN_MBPS, "1001", "from 1 to 1000"),
            (baidu::EIP_BANDWIDTH_IN_MBPS, "fast", "from 1 to 1000"),
            (baidu::LB_NAME, "1-starts-with-digit", "start with a letter"),
            (baidu::SUBNET_ID, "subnet-1", "sbn-"),
            (baidu::EXIST_ID, "blb/1", "lb-"),
        ];
        for (key, value, allowed) in cases {
            let error = parse_with(&[(key, value)]).expect_err(key);
            assert!(error.contains(key), "{key}: {error}");
            assert!(error.contains(value), "{key}: {error}");
            assert!(error.contains(allowed), "{key}: {error}");
        }
        let prepaid_without_length =
            parse_with(&[(baidu::EIP_PAYMENT_TIMING, "Prepaid")]).expect_err("length");
        assert!(
            prepaid_without_length.contains("reservation length"),
            "{prepaid_without_length}"
        );
        let prepaid_with_billing = parse_with(&[
            (baidu::EIP_PAYMENT_TIMING, "Prepaid"),
            (baidu::EIP_RESERVATION_LENGTH, "1"),
            (baidu::EIP_BILLING_METHOD, "ByTraffic"),
        ])
        .expect_err("billing");
        assert!(
            prepaid_with_billing.contains("Prepaid"),
            "{prepaid_with_billing}"
        );
    }

    #[test]
    fn load_balancer_ip_is_kept_for_the_provider_refused_when_ipv6_warned_when_internal() {
        let parse_ip = |ip: &str, annotations: &[(&str, &str)]| {
            let svc: k8s_openapi::api::core::v1::Service =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                                 "annotations": annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>()},
                    "spec": {"type": "LoadBalancer", "loadBalancerIP": ip,
                             "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]},
                }))
                .unwrap();
            crate::parse(Cloud::Baidu, &svc)
        };
        let public = parse_ip("106.12.0.9", &[]).unwrap();
        assert_eq!(
            public.spec.requested_ip.map(|ip| ip.to_string()).as_deref(),
            Some("106.12.0.9")
        );
        assert!(
            public.warnings.is_empty(),
            "bound, not ignored: {:?}",
            public.warnings
        );
        let internal = parse_ip("106.12.0.9", &[(baidu::INTERNAL_VPC, "true")]).unwrap();
        assert!(
            internal
                .warnings
                .iter()
                .any(|w| w.to_string().contains("spec.loadBalancerIP")),
            "{:?}",
            internal.warnings
        );
        let error = parse_ip("2001:db8::1", &[]).unwrap_err().to_string();
        assert!(
            error.contains("spec.loadBalancerIP")
                && error.contains("2001:db8::1")
                && error.contains("IPv4"),
            "{error}"
        );
    }

    #[test]
    fn blb_keys_are_read() {
        let spec = parse_with(&[
            (baidu::INTERNAL_VPC, "true"),
            (baidu::LB_NAME, "my-blb"),
            (baidu::SUBNET_ID, "sbn-abc123"),
            (baidu::ALLOCATE_VIP, "true"),
            (baidu::EXIST_ID, "lb-0a1b2c"),
            (baidu::CCE_ADD_ID, "lb-99"),
        ])
        .unwrap();
        assert!(spec.internal_vpc && spec.allocate_vip);
        assert_eq!(spec.lb_name.as_deref(), Some("my-blb"));
        assert_eq!(spec.subnet_id.as_deref(), Some("sbn-abc123"));
        assert_eq!(spec.exist_id.as_deref(), Some("lb-0a1b2c"));
        assert_eq!(spec.known_id.as_deref(), Some("lb-99"));
        // An existing BLB is never deleted, as upstream (which set reserve-lb for it).
        assert!(spec.reserve_lb);
    }
}

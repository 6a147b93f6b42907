//! Property: whatever strings a user writes into the known annotation keys, `parse` neither
//! panics nor reports a problem without naming where it came from.

use crate::support;

use kube_lb_annotations::keys::{aws, azure, baidu, common, gcp, openstack, tencent};
use kube_lb_annotations::{Cloud, Location};
use proptest::prelude::*;
use support::svc_lb;

const KEYS: &[&str] = &[
    common::SOURCE_RANGES,
    common::TOPOLOGY_KEYS,
    aws::TYPE,
    aws::INTERNAL,
    aws::PROXY_PROTOCOL,
    aws::ACCESS_LOG_EMIT_INTERVAL,
    aws::ACCESS_LOG_ENABLED,
    aws::ACCESS_LOG_BUCKET_NAME,
    aws::CONNECTION_DRAINING_TIMEOUT,
    aws::CONNECTION_IDLE_TIMEOUT,
    aws::EXTRA_SECURITY_GROUPS,
    aws::SSL_CERT,
    aws::SSL_PORTS,
    aws::SSL_NEGOTIATION_POLICY,
    aws::BACKEND_PROTOCOL,
    aws::ADDITIONAL_RESOURCE_TAGS,
    aws::HEALTHCHECK_PROTOCOL,
    aws::HEALTHCHECK_PORT,
    aws::HEALTHCHECK_PATH,
    aws::HEALTHCHECK_INTERVAL,
    aws::HEALTHCHECK_TIMEOUT,
    aws::TARGET_GROUP_ATTRIBUTES,
    aws::EIP_ALLOCATIONS,
    aws::PRIVATE_IPV4_ADDRESSES,
    aws::SUBNETS,
    gcp::LOAD_BALANCER_TYPE,
    gcp::NETWORK_TIER,
    azure::INTERNAL,
    azure::IPV4,
    azure::ALLOWED_IP_RANGES,
    azure::PROBE_INTERVAL,
    azure::PROBE_NUM,
    "service.beta.kubernetes.io/port_80_health-probe_interval",
    openstack::LB_METHOD,
    openstack::CONNECTION_LIMIT,
    tencent::BACKENDS_LABEL,
    tencent::EXTENSIVE_PARAMETERS,
    tencent::INTERNET_MAX_BANDWIDTH_OUT,
    baidu::INTERNAL_VPC,
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~\n\t]{0,24}",
        "[0-9]{1,6}",
        Just("nlb".to_owned()),
        Just("a=b,c".to_owned()),
        Just("10.0.0.0/8, ::/0".to_owned()),
        Just("key in (a, b".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn parse_never_panics_and_always_locates_problems(
        pairs in prop::collection::vec((0..KEYS.len(), value()), 0..6),
        cloud in 0..Cloud::ALL.len(),
    ) {
        let mut builder = svc_lb("ns", "web");
        for (key, value) in &pairs {
            builder = builder.annotate(KEYS[*key], value);
        }
        let cloud = Cloud::ALL[cloud];
        let (errors, warnings) = match builder.parse(cloud) {
            Ok(parsed) => (Vec::new(), parsed.warnings),
            Err(errors) => (errors.errors().to_vec(), errors.warnings().to_vec()),
        };
        for error in &errors {
            let located = match &error.location {
                Location::Annotation(key) => KEYS.contains(&key.as_str()),
                Location::Field(path) => path.starts_with("spec.") || path.starts_with("metadata."),
            };
            prop_assert!(located, "{error}");
            prop_assert!(!error.detail.is_empty());
            prop_assert!(!error.to_string().contains('\n'));
        }
        for warning in &warnings {
            prop_assert!(!warning.to_string().contains('\n'));
        }
    }
}

//! Every enumerated annotation value: `FromStr` ∘ `Display` is the identity over every variant,
//! aliases parse to their variant, serde writes the displayed form, and unknown strings list
//! what is allowed.

use std::fmt::{Debug, Display};
use std::str::FromStr;

use kube_lb_annotations::{
    AwsLoadBalancerKind, AzureProbeProtocol, BackendProtocol, ClbProtocol, Cloud,
    GcpLoadBalancerType, HealthCheckProtocol, InternetChargeType, LbMethod, NetworkTier,
    NlbProtocol, OpenstackProxyProtocol, SelectorOperator, TencentLoadBalanceType, TopologyKey,
    UnknownVariant,
};

fn round_trip<T>(all: &[T], accepted: &[&str])
where
    T: Copy + Debug + Display + PartialEq + FromStr<Err = UnknownVariant> + serde::Serialize,
{
    assert!(!all.is_empty());
    for variant in all {
        let text = variant.to_string();
        assert_eq!(text.parse::<T>(), Ok(*variant), "{text}");
        assert_eq!(
            serde_json::to_value(variant).expect("serialize"),
            serde_json::Value::String(text.clone())
        );
    }
    // Every accepted spelling (aliases included) parses to some variant that displays
    // canonically and re-parses to itself.
    for spelling in accepted {
        let variant = spelling
            .parse::<T>()
            .unwrap_or_else(|e| panic!("{spelling}: {e}"));
        assert_eq!(variant.to_string().parse::<T>(), Ok(variant));
    }
    let error = "no-such-value".parse::<T>().expect_err("unknown value");
    assert_eq!(error.value, "no-such-value");
    assert_eq!(error.allowed, accepted);
    for spelling in accepted {
        assert!(error.to_string().contains(spelling), "{error}");
    }
}

#[test]
fn every_enum_round_trips() {
    round_trip(AwsLoadBalancerKind::ALL, AwsLoadBalancerKind::ACCEPTED);
    round_trip(ClbProtocol::ALL, ClbProtocol::ACCEPTED);
    round_trip(BackendProtocol::ALL, BackendProtocol::ACCEPTED);
    round_trip(NlbProtocol::ALL, NlbProtocol::ACCEPTED);
    round_trip(HealthCheckProtocol::ALL, HealthCheckProtocol::ACCEPTED);
    round_trip(GcpLoadBalancerType::ALL, GcpLoadBalancerType::ACCEPTED);
    round_trip(NetworkTier::ALL, NetworkTier::ACCEPTED);
    round_trip(AzureProbeProtocol::ALL, AzureProbeProtocol::ACCEPTED);
    round_trip(LbMethod::ALL, LbMethod::ACCEPTED);
    round_trip(
        OpenstackProxyProtocol::ALL,
        OpenstackProxyProtocol::ACCEPTED,
    );
    round_trip(
        TencentLoadBalanceType::ALL,
        TencentLoadBalanceType::ACCEPTED,
    );
    round_trip(InternetChargeType::ALL, InternetChargeType::ACCEPTED);
    round_trip(SelectorOperator::ALL, SelectorOperator::ACCEPTED);
}

#[test]
fn aliases_map_to_the_documented_variant() {
    assert_eq!(
        "nlb-ip".parse(),
        Ok(AwsLoadBalancerKind::ImplementedElsewhere)
    );
    assert_eq!(
        "external".parse(),
        Ok(AwsLoadBalancerKind::ImplementedElsewhere)
    );
    assert_eq!("internal".parse(), Ok(GcpLoadBalancerType::Internal));
    assert_eq!("yunapi_clb".parse(), Ok(TencentLoadBalanceType::Classic));
    assert_eq!(
        "yunapiv3_forward_clb".parse(),
        Ok(TencentLoadBalanceType::Application)
    );
    assert_eq!("true".parse(), Ok(OpenstackProxyProtocol::V1));
}

#[test]
fn cloud_round_trips() {
    for cloud in Cloud::ALL {
        assert_eq!(cloud.to_string().parse::<Cloud>(), Ok(*cloud));
        assert_eq!(
            serde_json::to_value(cloud).expect("json"),
            serde_json::Value::String(cloud.to_string())
        );
    }
    assert!("AWS".parse::<Cloud>().is_err());
}

#[test]
fn topology_key_round_trips() {
    let keys = [
        TopologyKey::Hostname,
        TopologyKey::Zone,
        TopologyKey::Region,
        TopologyKey::Any,
        TopologyKey::Label("example.com/rack".into()),
        TopologyKey::Label("rack".into()),
    ];
    for key in keys {
        assert_eq!(key.to_string().parse::<TopologyKey>(), Ok(key.clone()));
    }
    for bad in ["", "/x", "a b", "-x", "Example.com/rack"] {
        assert!(bad.parse::<TopologyKey>().is_err(), "{bad:?}");
    }
}

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

fn object(name: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": spec})
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// A valid peer spec with `extra` merged over it.
fn peer_spec(extra: Value) -> Value {
    let mut spec = json!({"myASN": 64500, "peerASN": 64501, "peerAddress": "192.0.2.1"});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    spec
}

/// Asserts `problems` is exactly one problem on `field` whose message holds `want`.
fn assert_one(problems: &[Problem], kind: &str, name: &str, field: &str, want: &str, case: &str) {
    assert_eq!(problems.len(), 1, "{case}: {problems:#?}");
    let p = &problems[0];
    assert_eq!(
        (p.kind, p.name.as_str(), p.field.as_str()),
        (kind, name, field),
        "{case}: {p:?}"
    );
    assert!(
        p.message.contains(want),
        "{case}: {:?} lacks {want:?}",
        p.message
    );
}

#[test]
fn go_durations() {
    let ok = [
        ("90s", secs(90)),
        ("1m30s", secs(90)),
        ("1h", secs(3600)),
        ("1h2m3s", secs(3723)),
        ("1.5s", ms(1500)),
        (".5s", ms(500)),
        ("1.s", secs(1)),
        ("1.5m", secs(90)),
        ("300ms", ms(300)),
        ("2us", Duration::from_micros(2)),
        ("2µs", Duration::from_micros(2)),
        ("2μs", Duration::from_micros(2)),
        ("7ns", Duration::from_nanos(7)),
        ("1.5ns", Duration::from_nanos(1)),
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("+5s", secs(5)),
        ("-0", Duration::ZERO),
        ("-0s", Duration::ZERO),
        ("1m0.000000001s", Duration::new(60, 1)),
    ];
    for (text, want) in ok {
        assert_eq!(parse_go_duration(text), Ok(want), "{text}");
    }
    let bad = [
        ("", DurationError::Empty),
        ("90", DurationError::Syntax("90".into())),
        ("s", DurationError::Syntax("s".into())),
        ("1m30", DurationError::Syntax("30".into())),
        (".s", DurationError::Syntax(".s".into())),
        ("1x", DurationError::Unit("x".into())),
        ("1 s", DurationError::Unit(" s".into())),
        ("1min", DurationError::Unit("min".into())),
        ("1e3s", DurationError::Unit("e".into())),
        ("-1s", DurationError::Negative),
        ("-", DurationError::Syntax("-".into())),
        ("3000000h", DurationError::Overflow),
        ("99999999999999999999999s", DurationError::Overflow),
    ];
    for (text, want) in bad {
        assert_eq!(parse_go_duration(text), Err(want), "{text:?}");
    }
}

#[test]
fn communities() {
    let ok = [
        ("65000:100", CommunityValue::Standard(Community(65000, 100))),
        ("0:0", CommunityValue::Standard(Community(0, 0))),
        (
            "65535:65535",
            CommunityValue::Standard(Community(65535, 65535)),
        ),
        (" 1:2 ", CommunityValue::Standard(Community(1, 2))),
        (
            "no-export",
            CommunityValue::Standard(Community(65535, 65281)),
        ),
        (
            "NO-ADVERTISE",
            CommunityValue::Standard(Community(65535, 65282)),
        ),
        ("blackhole", CommunityValue::Standard(Community(65535, 666))),
        (
            "large:1:2:3",
            CommunityValue::Large(LargeCommunity(1, 2, 3)),
        ),
        (
            "large:4294967295:0:7",
            CommunityValue::Large(LargeCommunity(u32::MAX, 0, 7)),
        ),
        ("1:2:3", CommunityValue::Large(LargeCommunity(1, 2, 3))),
    ];
    for (text, want) in ok {
        assert_eq!(parse_community(text), Ok(want), "{text}");
    }
    for text in [
        "65536:1",
        "1:-1",
        "+1:2",
        "1",
        "a:b",
        "1:2:3:4",
        "large:1:2",
        "large:4294967296:1:1",
        "my-alias",
        "",
    ] {
        let error = parse_community(text).expect_err(text);
        assert!(error.contains(&format!("{text:?}")), "{text}: {error}");
    }
    assert_eq!(parse_large_community("4:5:6"), Ok(LargeCommunity(4, 5, 6)));
    assert_eq!(
        parse_large_community("large:4:5:6"),
        Ok(LargeCommunity(4, 5, 6))
    );
    assert!(parse_large_community("4:5").is_err());
}

#[test]
fn a_peer_with_defaults_and_one_with_everything() {
    let (peer, problems) = read_peer(&object("r1", peer_spec(json!({}))), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let want = Peer {
        name: "r1".into(),
        origin: Origin::KubeLb,
        address: "192.0.2.1".parse().unwrap(),
        peer_asn: 64501,
        local_asn: 64500,
        port: 179,
        hold_time: secs(90),
        keepalive_time: secs(30),
        password: None,
        ebgp_multihop: false,
        node_selectors: vec![],
        bfd_profile: None,
    };
    assert_eq!(peer, Some(want.clone()));

    let selector = json!({"matchLabels": {"rack": "a"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]});
    let spec = json!({
        "myASN": 4_294_967_295_u64, "peerASN": 1, "peerAddress": " 2001:db8::1 ", "peerPort": 1179,
        "holdTime": "1m30s", "keepaliveTime": "10s", "ebgpMultiHop": true,
        "passwordSecret": {"key": "r1"}, "nodeSelectors": [selector.clone()],
        "bfdProfile": "fast",
    });
    let (peer, problems) = read_peer(&object("r1", spec), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let want = Peer {
        address: "2001:db8::1".parse().unwrap(),
        peer_asn: 1,
        local_asn: u32::MAX,
        port: 1179,
        keepalive_time: secs(10),
        password: Some(SecretKeyRef {
            namespace: PASSWORD_SECRET_NAMESPACE.into(),
            name: PASSWORD_SECRET.into(),
            key: "r1".into(),
        }),
        ebgp_multihop: true,
        node_selectors: vec![serde_json::from_value(selector).unwrap()],
        bfd_profile: Some("fast".into()),
        ..want
    };
    assert_eq!(peer, Some(want));

    // Another Secret than the one the proxy may read: kept as written, and said.
    let spec = peer_spec(json!({"passwordSecret": {"name": "mine", "namespace": "default"}}));
    let (peer, problems) = read_peer(&object("r1", spec), Origin::KubeLb);
    assert_eq!(
        peer.unwrap().password,
        Some(SecretKeyRef {
            namespace: "default".into(),
            name: "mine".into(),
            key: "password".into(),
        })
    );
    assert_one(
        &problems,
        "BGPPeer",
        "r1",
        "spec.passwordSecret",
        "default/mine, which the proxy may not read as shipped",
        "another Secret",
    );
}

#[test]
fn peer_timers() {
    // (holdTime, keepaliveTime, hold, keepalive)
    let cases = [
        (None, None, 90, 30),
        (Some("0s"), None, 0, 0),
        (Some("0"), Some("0s"), 0, 0),
        (Some("3s"), None, 3, 1),
        (Some("10s"), None, 10, 3),
        (Some("9s"), Some("9s"), 9, 9),
        (Some("1h"), None, 3600, 1200),
        (None, Some("1m"), 90, 60),
        (Some("65535s"), None, 65535, 21845),
    ];
    for (hold, keepalive, want_hold, want_keepalive) in cases {
        let spec = peer_spec(json!({"holdTime": hold, "keepaliveTime": keepalive}));
        let (peer, problems) = read_peer(&object("r", spec), Origin::KubeLb);
        assert!(problems.is_empty(), "{hold:?} {keepalive:?}: {problems:?}");
        let peer = peer.unwrap();
        assert_eq!(
            (peer.hold_time, peer.keepalive_time),
            (secs(want_hold), secs(want_keepalive)),
            "{hold:?} {keepalive:?}"
        );
    }
}

#[test]
fn each_bad_peer_field_is_a_problem_and_leaves_the_peer_out() {
    // (spec changes, field, words of the message)
    let cases = [
        (
            json!({"myASN": 0}),
            "spec.myASN",
            "myASN 0 is not an AS number (1 to 4294967295)",
        ),
        (
            json!({"myASN": 4_294_967_296_u64}),
            "spec.myASN",
            "myASN 4294967296 is not",
        ),
        (
            json!({"peerASN": -5}),
            "spec.peerASN",
            "peerASN -5 is not an AS number",
        ),
        (
            json!({"peerASN": null}),
            "spec.peerASN",
            "peerASN is required",
        ),
        (
            json!({"myASN": "64500"}),
            "spec.myASN",
            "invalid type: string \"64500\"",
        ),
        (json!({"myASN": 1.5}), "spec.myASN", "myASN: invalid type"),
        (
            json!({"peerAddress": "10.0.0"}),
            "spec.peerAddress",
            "peerAddress \"10.0.0\" is not an IP address",
        ),
        (
            json!({"peerAddress": "10.0.0.1/32"}),
            "spec.peerAddress",
            "\"10.0.0.1/32\" is not an IP address",
        ),
        (
            json!({"peerAddress": "fe80::1%eth0"}),
            "spec.peerAddress",
            "no prefix length, port or zone",
        ),
        (
            json!({"peerAddress": "router.example"}),
            "spec.peerAddress",
            "is not an IP address",
        ),
        (
            json!({"peerAddress": "0.0.0.0"}),
            "spec.peerAddress",
            "unspecified or multicast",
        ),
        (
            json!({"peerAddress": ""}),
            "spec.peerAddress",
            "peerAddress is required",
        ),
        (
            json!({"peerPort": 0}),
            "spec.peerPort",
            "peerPort 0 is not a port (1 to 65535)",
        ),
        (
            json!({"peerPort": 70000}),
            "spec.peerPort",
            "peerPort 70000 is not a port",
        ),
        (
            json!({"holdTime": "2s"}),
            "spec.holdTime",
            "BGP takes 0 (no keepalives) or at least 3s",
        ),
        (
            json!({"holdTime": "1s"}),
            "spec.holdTime",
            "holdTime \"1s\" is not allowed",
        ),
        (
            json!({"holdTime": "3500ms"}),
            "spec.holdTime",
            "whole seconds",
        ),
        (
            json!({"holdTime": "90"}),
            "spec.holdTime",
            "holdTime \"90\" is not a Go duration",
        ),
        (
            json!({"holdTime": "1min"}),
            "spec.holdTime",
            "unknown unit \"min\"",
        ),
        (json!({"holdTime": "-90s"}), "spec.holdTime", "negative"),
        (
            json!({"holdTime": "20h"}),
            "spec.holdTime",
            "from 0 to 65535",
        ),
        (
            json!({"keepaliveTime": "100s"}),
            "spec.keepaliveTime",
            "keepaliveTime \"100s\" is longer than the hold time (90s)",
        ),
        (
            json!({"holdTime": "30s", "keepaliveTime": "31s"}),
            "spec.keepaliveTime",
            "longer than the hold time (30s)",
        ),
        (
            json!({"holdTime": "0s", "keepaliveTime": "1s"}),
            "spec.keepaliveTime",
            "longer than the hold time (0s)",
        ),
        (
            json!({"keepaliveTime": "ten"}),
            "spec.keepaliveTime",
            "is not a Go duration",
        ),
        (
            json!({"nodeSelectors": [{}, {"matchExpressions": [{"key": "zone", "operator": "Near"}]}]}),
            "spec.nodeSelectors[1]",
            "unknown operator \"Near\"",
        ),
        (
            json!({"nodeSelectors": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]}),
            "spec.nodeSelectors[0]",
            "needs values",
        ),
        (
            json!({"nodeSelectors": {"zone": "a"}}),
            "spec.nodeSelectors",
            "nodeSelectors: invalid type",
        ),
        (
            json!({"ebgpMultiHop": "yes"}),
            "spec.ebgpMultiHop",
            "invalid type",
        ),
        (
            json!({"password": "secret"}),
            "spec.password",
            "put it in a Secret and name it in passwordSecret",
        ),
        (json!({"vrf": "red"}), "spec.vrf", "VRFs are not supported"),
    ];
    for (change, field, want) in cases {
        let case = change.to_string();
        let (peer, problems) = read_peer(&object("r", peer_spec(change)), Origin::KubeLb);
        assert_eq!(peer, None, "{case}");
        assert_one(&problems, "BGPPeer", "r", field, want, &case);
        assert!(
            problems[0].message.contains("not used until this is fixed"),
            "{case}: {:?}",
            problems[0]
        );
    }
    // Several bad fields: each one reported.
    let spec = json!({"myASN": 0, "peerAddress": "x", "holdTime": "1s"});
    let (peer, problems) = read_peer(&object("r", spec), Origin::KubeLb);
    assert_eq!(peer, None);
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.myASN",
            "spec.peerASN",
            "spec.peerAddress",
            "spec.holdTime"
        ]
    );
    // Not an object, and no name.
    let (peer, problems) = read_peer(
        &json!({"metadata": {"name": "r"}, "spec": "x"}),
        Origin::KubeLb,
    );
    assert_eq!(peer, None);
    assert_one(
        &problems,
        "BGPPeer",
        "r",
        "spec",
        "spec is not an object",
        "spec: x",
    );
    let (peer, problems) = read_peer(&json!({"spec": peer_spec(json!({}))}), Origin::KubeLb);
    assert_eq!(peer, None);
    assert_one(
        &problems,
        "BGPPeer",
        "",
        "metadata.name",
        "no metadata.name",
        "no name",
    );
}

#[test]
fn ignored_metallb_fields_are_reported_and_the_peer_kept() {
    let spec = peer_spec(
        json!({"routerID": "10.0.0.1", "enableGracefulRestart": true,
        "connectTime": "5s", "disableMP": false, "sourceAddress": ""}),
    );
    let (peer, problems) = read_peer(&object("r", spec), Origin::MetalLb);
    assert!(peer.is_some());
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    // disableMP false and an empty sourceAddress are what Go writes for unset.
    assert_eq!(
        fields,
        [
            "spec.routerID",
            "spec.connectTime",
            "spec.enableGracefulRestart"
        ]
    );
    assert!(
        problems.iter().all(|p| p.message.contains("ignored")),
        "{problems:?}"
    );
}

#[test]
fn an_advertisement_with_defaults_and_one_with_everything() {
    let (advertisement, problems) = read_advertisement(&object("a", json!({})), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let want = Advertisement {
        name: "a".into(),
        origin: Origin::KubeLb,
        pools: vec![],
        pool_selectors: vec![],
        aggregation_length_v4: 32,
        aggregation_length_v6: 128,
        communities: vec![],
        large_communities: vec![],
        local_pref: None,
        peers: vec![],
        node_selectors: vec![],
    };
    assert_eq!(advertisement, Some(want.clone()));
    // No spec at all is the same.
    let (advertisement, _) =
        read_advertisement(&json!({"metadata": {"name": "a"}}), Origin::KubeLb);
    assert_eq!(advertisement, Some(want.clone()));

    let selector = json!({"matchLabels": {"tier": "public"}});
    let spec = json!({
        "ipAddressPools": ["public"], "ipAddressPoolSelectors": [selector.clone()],
        "aggregationLength": 24, "aggregationLengthV6": 64,
        "communities": ["65000:100", "large:1:2:3", "no-export"],
        "largeCommunities": ["4:5:6"], "localPref": 0, "peers": ["r1"],
        "nodeSelectors": [selector.clone()],
    });
    let (advertisement, problems) = read_advertisement(&object("a", spec), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let selector: kube_lb_provider_local::ippool::LabelSelector =
        serde_json::from_value(selector).unwrap();
    let want = Advertisement {
        pools: vec!["public".into()],
        pool_selectors: vec![selector.clone()],
        aggregation_length_v4: 24,
        aggregation_length_v6: 64,
        communities: vec![Community(65000, 100), Community(65535, 65281)],
        large_communities: vec![LargeCommunity(1, 2, 3), LargeCommunity(4, 5, 6)],
        // kube-lb's localPref 0 is a value; MetalLB's is unset (below).
        local_pref: Some(0),
        peers: vec!["r1".into()],
        node_selectors: vec![selector],
        ..want
    };
    assert_eq!(advertisement, Some(want));
}

#[test]
fn each_bad_advertisement_field_is_a_problem_and_leaves_it_out() {
    let cases = [
        (
            json!({"aggregationLength": 0}),
            "spec.aggregationLength",
            "aggregationLength 0 is not an IPv4 prefix length (1 to 32)",
        ),
        (
            json!({"aggregationLength": 33}),
            "spec.aggregationLength",
            "33 is not an IPv4 prefix length",
        ),
        (
            json!({"aggregationLengthV6": 129}),
            "spec.aggregationLengthV6",
            "129 is not an IPv6 prefix length (1 to 128)",
        ),
        (
            json!({"aggregationLengthV6": 0}),
            "spec.aggregationLengthV6",
            "0 is not an IPv6 prefix length",
        ),
        (
            json!({"communities": ["65000:100", "65536:1"]}),
            "spec.communities[1]",
            "community \"65536:1\"",
        ),
        (
            json!({"communities": ["my-alias"]}),
            "spec.communities[0]",
            "Community aliases are not supported",
        ),
        (
            json!({"communities": ["large:1:2"]}),
            "spec.communities[0]",
            "large community \"large:1:2\"",
        ),
        (
            json!({"largeCommunities": ["1:2"]}),
            "spec.largeCommunities[0]",
            "large community \"1:2\" is not AA:BB:CC",
        ),
        (
            json!({"largeCommunities": ["4294967296:1:1"]}),
            "spec.largeCommunities[0]",
            "4294967296",
        ),
        (
            json!({"localPref": -1}),
            "spec.localPref",
            "localPref -1 is not a LOCAL_PREF (0 to 4294967295)",
        ),
        (
            json!({"localPref": 4_294_967_296_u64}),
            "spec.localPref",
            "localPref 4294967296",
        ),
        (
            json!({"ipAddressPoolSelectors": [{"matchExpressions": [{"key": "a", "operator": "exists"}]}]}),
            "spec.ipAddressPoolSelectors[0]",
            "unknown operator \"exists\"",
        ),
        (
            json!({"nodeSelectors": [{"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}]}),
            "spec.nodeSelectors[0]",
            "takes no values",
        ),
        (json!({"peers": "r1"}), "spec.peers", "peers: invalid type"),
    ];
    for (spec, field, want) in cases {
        let case = spec.to_string();
        let (advertisement, problems) = read_advertisement(&object("a", spec), Origin::KubeLb);
        assert_eq!(advertisement, None, "{case}");
        assert_one(&problems, "BGPAdvertisement", "a", field, want, &case);
    }
}

#[test]
fn a_bfd_profile_with_defaults_and_each_bad_field() {
    let (profile, problems) = read_bfd_profile(&object("p", json!({})), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let want = BfdProfile {
        name: "p".into(),
        origin: Origin::KubeLb,
        receive_interval: ms(300),
        transmit_interval: ms(300),
        detect_multiplier: 3,
        echo_mode: false,
        echo_interval: ms(50),
        passive_mode: false,
        minimum_ttl: 254,
    };
    assert_eq!(profile, Some(want.clone()));
    let spec = json!({"receiveInterval": 10, "transmitInterval": 60000, "detectMultiplier": 255,
        "echoMode": true, "echoInterval": 20, "passiveMode": true, "minimumTtl": 1});
    let (profile, problems) = read_bfd_profile(&object("p", spec), Origin::KubeLb);
    assert!(problems.is_empty(), "{problems:?}");
    let want = BfdProfile {
        receive_interval: ms(10),
        transmit_interval: ms(60000),
        detect_multiplier: 255,
        echo_mode: true,
        echo_interval: ms(20),
        passive_mode: true,
        minimum_ttl: 1,
        ..want
    };
    assert_eq!(profile, Some(want));

    let cases = [
        (
            json!({"receiveInterval": 9}),
            "spec.receiveInterval",
            "receiveInterval 9 is not an interval in milliseconds (10 to 60000)",
        ),
        (
            json!({"receiveInterval": 60001}),
            "spec.receiveInterval",
            "60001",
        ),
        (
            json!({"transmitInterval": 0}),
            "spec.transmitInterval",
            "transmitInterval 0 is not",
        ),
        (
            json!({"echoInterval": -1}),
            "spec.echoInterval",
            "echoInterval -1 is not",
        ),
        (
            json!({"detectMultiplier": 1}),
            "spec.detectMultiplier",
            "detectMultiplier 1 is not a detect multiplier (2 to 255)",
        ),
        (
            json!({"detectMultiplier": 256}),
            "spec.detectMultiplier",
            "256",
        ),
        (
            json!({"minimumTtl": 0}),
            "spec.minimumTtl",
            "minimumTtl 0 is not a TTL (1 to 254)",
        ),
        (json!({"minimumTtl": 255}), "spec.minimumTtl", "255"),
        (json!({"echoMode": "on"}), "spec.echoMode", "invalid type"),
        (
            json!({"receiveInterval": "300ms"}),
            "spec.receiveInterval",
            "invalid type",
        ),
    ];
    for (spec, field, want) in cases {
        let case = spec.to_string();
        let (profile, problems) = read_bfd_profile(&object("p", spec), Origin::KubeLb);
        assert_eq!(profile, None, "{case}");
        assert_one(&problems, "BFDProfile", "p", field, want, &case);
    }
}

#[test]
fn dangling_references_are_problems_that_keep_the_object() {
    let peers = [
        object("r1", peer_spec(json!({"bfdProfile": "fast"}))),
        object(
            "r2",
            peer_spec(json!({"bfdProfile": "missing", "peerAddress": "192.0.2.2"})),
        ),
    ];
    let advertisements = [object("a", json!({"peers": ["r1", "gone", "bad"]}))];
    let profiles = [object("fast", json!({}))];
    let config = read(&peers, &advertisements, &profiles, Origin::KubeLb);
    assert_eq!(config.peers.len(), 2);
    assert_eq!(config.peers[0].bfd_profile.as_deref(), Some("fast"));
    // The session runs without BFD rather than not at all.
    assert_eq!(config.peers[1].bfd_profile, None);
    // The names stay: dropped, the list could end empty, which means every peer.
    assert_eq!(config.advertisements[0].peers, ["r1", "gone", "bad"]);
    let got: Vec<(&str, &str, &str)> = config
        .problems
        .iter()
        .map(|p| (p.kind, p.name.as_str(), p.field.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("BGPPeer", "r2", "spec.bfdProfile"),
            ("BGPAdvertisement", "a", "spec.peers[1]"),
            ("BGPAdvertisement", "a", "spec.peers[2]"),
        ]
    );
    assert!(config.problems[0].message.contains("\"missing\""));
    assert!(config.problems[0].message.contains("runs without BFD"));
    assert!(config.problems[1].message.contains("\"gone\""));
}

#[test]
fn one_invalid_object_never_removes_another() {
    let peers = [
        object("c", peer_spec(json!({"peerAddress": "192.0.2.3"}))),
        object("bad", peer_spec(json!({"myASN": 0}))),
        object("a", peer_spec(json!({}))),
        json!({"metadata": {}}),
    ];
    let advertisements = [
        object("x", json!({"communities": ["nope"]})),
        object("y", json!({"peers": ["bad"]})),
    ];
    let profiles = [
        object("slow", json!({"detectMultiplier": 1})),
        object("ok", json!({})),
    ];
    let config = read(&peers, &advertisements, &profiles, Origin::KubeLb);
    assert_eq!(
        config
            .peers
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["a", "c"]
    );
    assert_eq!(
        config
            .advertisements
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["y"]
    );
    assert_eq!(
        config
            .bfd_profiles
            .iter()
            .map(|b| b.name.as_str())
            .collect::<Vec<_>>(),
        ["ok"]
    );
    let got: Vec<(&str, &str)> = config
        .problems
        .iter()
        .map(|p| (p.name.as_str(), p.field.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("bad", "spec.myASN"),
            ("", "metadata.name"),
            ("x", "spec.communities[0]"),
            ("slow", "spec.detectMultiplier"),
            // The advertisement stays; the invalid peer it names is not there to advertise to.
            ("y", "spec.peers[0]"),
        ]
    );
}

#[test]
fn peers_sharing_an_address_conflict_only_on_nodes_both_select() {
    let zone = |z: &str| json!([{"matchLabels": {"zone": z}}]);
    let peers = [
        object("everywhere", peer_spec(json!({}))),
        object("zone-a", peer_spec(json!({"nodeSelectors": zone("a")}))),
        object(
            "zone-b",
            peer_spec(json!({"nodeSelectors": zone("b"), "peerPort": 1179})),
        ),
        object("other", peer_spec(json!({"peerAddress": "192.0.2.9"}))),
        object(
            "only-c",
            peer_spec(json!({"nodeSelectors": zone("c"), "peerAddress": "192.0.2.7"})),
        ),
        object(
            "also-c",
            peer_spec(json!({"nodeSelectors": zone("c"), "peerAddress": "192.0.2.7"})),
        ),
    ];
    let config = read(&peers, &[], &[], Origin::KubeLb);
    assert!(config.problems.is_empty(), "{:?}", config.problems);
    // (node labels, peers left out there)
    let cases = [
        (labels(&[("zone", "a")]), vec!["zone-a"]),
        (labels(&[("zone", "b")]), vec!["zone-b"]),
        (labels(&[]), vec![]),
        // "also-c" sorts before "only-c", so it is kept; "zone-*" don't select zone c.
        (labels(&[("zone", "c")]), vec!["only-c"]),
    ];
    for (node, want) in cases {
        let problems = conflicts(&config, &node);
        let got: Vec<&str> = problems.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(got, want, "{node:?}");
        for problem in &problems {
            assert_eq!(problem.field, "spec.peerAddress");
            assert!(problem.message.contains("192.0.2."), "{}", problem.message);
        }
    }
    let problems = conflicts(&config, &labels(&[("zone", "a")]));
    assert!(
        problems[0].message.contains("\"everywhere\""),
        "{}",
        problems[0].message
    );

    // Moving over: a kube-lb copy of a MetalLB peer wins on every node.
    let config = read_all(
        Objects {
            peers: &[object("zz", peer_spec(json!({})))],
            ..Objects::default()
        },
        Objects {
            peers: &[object("aa", peer_spec(json!({})))],
            ..Objects::default()
        },
    );
    let problems = conflicts(&config, &labels(&[]));
    assert_eq!(problems.len(), 1);
    assert_eq!(
        (problems[0].origin, problems[0].name.as_str()),
        (Origin::MetalLb, "metallb:aa")
    );
}

/// MetalLB's objects as its documentation writes them (configuration/_advanced_bgp_configuration
/// and the API reference), in metallb-system.
const METALLB_DOCS: &str = r#"
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: sample
  namespace: metallb-system
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.1
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: peer-with-bfd
  namespace: metallb-system
spec:
  myASN: 64512
  peerASN: 64513
  peerAddress: 172.30.0.3
  holdTime: "9s"
  keepaliveTime: "3s"
  ebgpMultiHop: true
  bfdProfile: full-example
  passwordSecret:
    name: secretname
  nodeSelectors:
  - matchLabels:
      rack: frontend
    matchExpressions:
    - key: network-speed
      operator: NotIn
      values: [slow, super-slow]
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata:
  name: plain-password
  namespace: metallb-system
spec:
  myASN: 64500
  peerASN: 64501
  peerAddress: 10.0.0.2
  password: hunter2
---
apiVersion: metallb.io/v1beta1
kind: BFDProfile
metadata:
  name: full-example
  namespace: metallb-system
spec:
  receiveInterval: 380
  transmitInterval: 270
  detectMultiplier: 37
  echoMode: true
  passiveMode: true
  minimumTtl: 10
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: local
  namespace: metallb-system
spec:
  ipAddressPools:
  - bgp-pool
  aggregationLength: 32
  localPref: 100
  communities:
  - 65535:65282
  - large:123:456:789
  peers:
  - peer-with-bfd
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata:
  name: external
  namespace: metallb-system
spec:
  ipAddressPools:
  - bgp-pool
  aggregationLength: 24
  aggregationLengthV6: 64
  localPref: 0
"#;

fn metallb_docs(kind: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(METALLB_DOCS)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|o| o["kind"] == kind)
        .collect()
}

#[test]
fn metallb_objects_as_its_docs_write_them() {
    let peers = metallb_docs("BGPPeer");
    let advertisements = metallb_docs("BGPAdvertisement");
    let profiles = metallb_docs("BFDProfile");
    let config = read(&peers, &advertisements, &profiles, Origin::MetalLb);

    let names: Vec<&str> = config.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["metallb:peer-with-bfd", "metallb:sample"]);
    let peer = &config.peers[0];
    assert_eq!(peer.origin, Origin::MetalLb);
    assert_eq!(
        (peer.local_asn, peer.peer_asn, peer.port),
        (64512, 64513, 179)
    );
    assert_eq!((peer.hold_time, peer.keepalive_time), (secs(9), secs(3)));
    assert!(peer.ebgp_multihop);
    assert_eq!(peer.bfd_profile.as_deref(), Some("metallb:full-example"));
    // MetalLB's Secret lives beside the peer and always has the key `password`.
    assert_eq!(
        peer.password,
        Some(SecretKeyRef {
            namespace: "metallb-system".into(),
            name: "secretname".into(),
            key: "password".into(),
        })
    );
    let node = labels(&[("rack", "frontend"), ("network-speed", "fast")]);
    assert!(peer.node_selectors.iter().any(|s| s.matches(&node)));
    let slow = labels(&[("rack", "frontend"), ("network-speed", "slow")]);
    assert!(!peer.node_selectors.iter().any(|s| s.matches(&slow)));
    assert_eq!(
        config.peers[1].address,
        "10.0.0.1".parse::<IpAddr>().unwrap()
    );

    let profile = &config.bfd_profiles[0];
    assert_eq!(profile.name, "metallb:full-example");
    assert_eq!(
        (profile.receive_interval, profile.transmit_interval),
        (ms(380), ms(270))
    );
    assert_eq!((profile.detect_multiplier, profile.minimum_ttl), (37, 10));
    assert!(profile.echo_mode && profile.passive_mode);
    assert_eq!(profile.echo_interval, DEFAULT_ECHO_INTERVAL);

    let names: Vec<&str> = config
        .advertisements
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["metallb:external", "metallb:local"]);
    let external = &config.advertisements[0];
    assert_eq!(
        (
            external.aggregation_length_v4,
            external.aggregation_length_v6
        ),
        (24, 64)
    );
    // MetalLB's localPref 0 is Go's unset.
    assert_eq!(external.local_pref, None);
    let local = &config.advertisements[1];
    assert_eq!(local.pools, ["bgp-pool"]);
    assert_eq!(local.communities, [Community(65535, 65282)]);
    assert_eq!(local.large_communities, [LargeCommunity(123, 456, 789)]);
    assert_eq!(local.local_pref, Some(100));
    assert_eq!(local.peers, ["metallb:peer-with-bfd"]);

    // A Secret the shipped RBAC does not let the proxy read is said (the peer is kept), and an
    // inline password is refused.
    let (unreadable, refused) = (&config.problems[..1], &config.problems[1..]);
    assert_one(
        unreadable,
        "BGPPeer",
        "metallb:peer-with-bfd",
        "spec.passwordSecret",
        "Secret metallb-system/secretname, which the proxy may not read",
        "peer-with-bfd",
    );
    assert_one(
        refused,
        "BGPPeer",
        "metallb:plain-password",
        "spec.password",
        "passwordSecret",
        "plain-password",
    );
    assert_eq!(refused[0].origin, Origin::MetalLb);
    assert_eq!(
        object_name(Origin::MetalLb, &refused[0].name),
        "plain-password"
    );

    let warnings = metallb_warnings(Objects {
        peers: &peers,
        advertisements: &advertisements,
        bfd_profiles: &profiles,
    });
    assert_eq!(warnings.len(), 6);
    assert_eq!(
        warnings[0],
        "metallb.io BGPPeer metallb-system/sample imported read-only (as metallb:sample); move \
         it to kube-lb.io/v1alpha1"
    );
}

#[test]
fn both_origins_resolve_references_across() {
    let kube_lb_adverts = [object("a", json!({"peers": ["metallb:sample", "sample"]}))];
    let kube_lb_peers = [object(
        "r",
        peer_spec(json!({"bfdProfile": "metallb:full-example"})),
    )];
    let metallb_peers = metallb_docs("BGPPeer");
    let metallb_profiles = metallb_docs("BFDProfile");
    let config = read_all(
        Objects {
            peers: &kube_lb_peers,
            advertisements: &kube_lb_adverts,
            ..Objects::default()
        },
        Objects {
            peers: &metallb_peers,
            bfd_profiles: &metallb_profiles,
            ..Objects::default()
        },
    );
    let names: Vec<(Origin, &str)> = config
        .peers
        .iter()
        .map(|p| (p.origin, p.name.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            (Origin::KubeLb, "r"),
            (Origin::MetalLb, "metallb:peer-with-bfd"),
            (Origin::MetalLb, "metallb:sample"),
        ]
    );
    assert_eq!(
        config.peers[0].bfd_profile.as_deref(),
        Some("metallb:full-example")
    );
    // Only the kube-lb name `sample` dangles (beside the MetalLB docs' own problems).
    let got: Vec<(&str, &str)> = config
        .problems
        .iter()
        .map(|p| (p.name.as_str(), p.field.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("metallb:peer-with-bfd", "spec.passwordSecret"),
            ("metallb:plain-password", "spec.password"),
            ("a", "spec.peers[1]")
        ]
    );

    // Two MetalLB objects of one name in two namespaces: the first listed is used.
    let twins = [
        json!({"metadata": {"name": "p", "namespace": "one"}, "spec": {"detectMultiplier": 4}}),
        json!({"metadata": {"name": "p", "namespace": "two"}, "spec": {"detectMultiplier": 5}}),
    ];
    let config = read(&[], &[], &twins, Origin::MetalLb);
    assert_eq!(config.bfd_profiles.len(), 1);
    assert_eq!(config.bfd_profiles[0].detect_multiplier, 4);
    assert_one(
        &config.problems,
        "BFDProfile",
        "metallb:p",
        "metadata.name",
        "also named \"p\"",
        "twins",
    );
}

#[test]
fn names_and_kinds() {
    assert_eq!(model_name(Origin::KubeLb, "r"), "r");
    assert_eq!(model_name(Origin::MetalLb, "r"), "metallb:r");
    assert_eq!(object_name(Origin::MetalLb, "metallb:r"), "r");
    assert_eq!(object_name(Origin::KubeLb, "r"), "r");
    let warning = metallb_warning("BFDProfile", &json!({"metadata": {"name": "x"}}));
    assert_eq!(
        warning,
        "metallb.io BFDProfile x imported read-only (as metallb:x); move it to kube-lb.io/v1alpha1"
    );
}

#[test]
fn the_valid_condition_names_each_field() {
    let peers = [
        object("r", peer_spec(json!({"myASN": 0, "holdTime": "1s"}))),
        object("ok", peer_spec(json!({"peerAddress": "192.0.2.2"}))),
    ];
    let config = read(&peers, &[], &[], Origin::KubeLb);
    let mine = problems_of(&config.problems, "BGPPeer", Origin::KubeLb, "r");
    assert_eq!(mine.len(), 2);
    assert!(problems_of(&config.problems, "BGPPeer", Origin::MetalLb, "r").is_empty());
    let condition = valid_condition(&mine);
    assert_eq!(
        (
            &condition["type"],
            &condition["status"],
            &condition["reason"]
        ),
        (&json!("Valid"), &json!("False"), &json!("Invalid"))
    );
    let message = condition["message"].as_str().unwrap();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines.len(), 2, "{message}");
    assert!(
        lines[0].starts_with("spec.myASN: myASN 0 is not"),
        "{message}"
    );
    assert!(
        lines[1].starts_with("spec.holdTime: holdTime \"1s\""),
        "{message}"
    );
    let ok = problems_of(&config.problems, "BGPPeer", Origin::KubeLb, "ok");
    assert_eq!(valid_condition(&ok)["status"], "True");
}

// ------------------------------------------------------------------------- the CRDs

fn crd(kind: &str) -> Value {
    CRDS.iter()
        .map(|text| serde_yaml_ng::from_str::<Value>(text).unwrap())
        .find(|crd| crd["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

/// The CRDs' spec properties are exactly the stored types' fields (so nothing the reader
/// reads is pruned by the API server, and nothing the schema accepts is ignored), and name
/// the kinds as [`Kind`] does.
#[test]
fn the_crds_have_the_stored_types_fields() {
    let selector = json!([{"matchLabels": {"a": "b"}}]);
    let peer = BgpPeerSpec {
        my_asn: Some(1),
        peer_asn: Some(1),
        peer_address: Some(String::new()),
        peer_port: Some(1),
        hold_time: Some(String::new()),
        keepalive_time: Some(String::new()),
        password_secret: Some(PasswordSecret {
            name: Some(String::new()),
            namespace: Some(String::new()),
            key: Some(String::new()),
        }),
        ebgp_multi_hop: Some(true),
        node_selectors: serde_json::from_value(selector.clone()).unwrap(),
        bfd_profile: Some(String::new()),
    };
    let advertisement = BgpAdvertisementSpec {
        ip_address_pools: vec![String::new()],
        ip_address_pool_selectors: serde_json::from_value(selector.clone()).unwrap(),
        aggregation_length: Some(1),
        aggregation_length_v6: Some(1),
        communities: vec![String::new()],
        large_communities: vec![String::new()],
        local_pref: Some(1),
        peers: vec![String::new()],
        node_selectors: serde_json::from_value(selector).unwrap(),
    };
    let profile = BfdProfileSpec {
        receive_interval: Some(1),
        transmit_interval: Some(1),
        detect_multiplier: Some(1),
        echo_mode: Some(true),
        echo_interval: Some(1),
        passive_mode: Some(true),
        minimum_ttl: Some(1),
    };
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    for (kind, spec) in [
        (BGP_PEER, serde_json::to_value(&peer).unwrap()),
        (
            BGP_ADVERTISEMENT,
            serde_json::to_value(&advertisement).unwrap(),
        ),
        (BFD_PROFILE, serde_json::to_value(&profile).unwrap()),
    ] {
        let crd = crd(kind.kind);
        assert_eq!(crd["spec"]["group"], GROUP);
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["plural"], kind.plural);
        assert_eq!(crd["metadata"]["name"], format!("{}.{GROUP}", kind.plural));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], VERSION);
        assert_eq!(version["subresources"]["status"], json!({}));
        let schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert_eq!(keys(schema), keys(&spec), "{}", kind.kind);
        if kind.kind == "BGPPeer" {
            assert_eq!(
                keys(&schema["passwordSecret"]["properties"]),
                keys(&spec["passwordSecret"])
            );
        }
    }
}

/// The embedded API server takes the CRDs, stores valid objects of the three kinds (which
/// read back without a problem) and refuses, by the schema, what it can tell is wrong.
#[tokio::test]
async fn the_api_server_serves_the_crds() {
    let server = kube_lb_apiserver::ApiServer::builder()
        .start()
        .await
        .unwrap();
    for text in CRDS {
        server.apply_manifests(text).unwrap();
    }
    let valid = r#"
apiVersion: kube-lb.io/v1alpha1
kind: BGPPeer
metadata: {name: tor-a}
spec:
  myASN: 4200000000
  peerASN: 64512
  peerAddress: 2001:db8::1
  holdTime: 1m30s
  keepaliveTime: 30s
  passwordSecret: {key: tor-a}
  bfdProfile: fast
  nodeSelectors:
  - matchExpressions: [{key: rack, operator: In, values: [a]}]
---
apiVersion: kube-lb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec:
  ipAddressPools: [public]
  aggregationLengthV6: 64
  communities: ["65000:100", "large:65000:1:2"]
  largeCommunities: ["65000:3:4"]
  localPref: 200
  peers: [tor-a]
---
apiVersion: kube-lb.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 100, transmitInterval: 100, detectMultiplier: 3}
"#;
    let stored = server.apply_manifests(valid).unwrap();
    let of = |kind: &str| -> Vec<Value> {
        stored
            .iter()
            .filter(|o| o["kind"] == kind)
            .cloned()
            .collect()
    };
    let config = read(
        &of("BGPPeer"),
        &of("BGPAdvertisement"),
        &of("BFDProfile"),
        Origin::KubeLb,
    );
    assert!(config.problems.is_empty(), "{:?}", config.problems);
    assert_eq!(
        (
            config.peers.len(),
            config.advertisements.len(),
            config.bfd_profiles.len()
        ),
        (1, 1, 1)
    );
    assert_eq!(config.peers[0].local_asn, 4_200_000_000);

    let refused = [
        (
            "BGPPeer",
            json!({"myASN": 0, "peerASN": 1, "peerAddress": "192.0.2.1"}),
        ),
        (
            "BGPPeer",
            json!({"myASN": 4_294_967_296_u64, "peerASN": 1, "peerAddress": "192.0.2.1"}),
        ),
        ("BGPPeer", json!({"myASN": 1, "peerASN": 1})),
        (
            "BGPPeer",
            json!({"myASN": 1, "peerASN": 1, "peerAddress": "192.0.2.1", "peerPort": 0}),
        ),
        (
            "BGPPeer",
            json!({"myASN": 1, "peerASN": 1, "peerAddress": "192.0.2.1", "holdTime": "90"}),
        ),
        (
            "BGPPeer",
            json!({"myASN": 1, "peerASN": 1, "peerAddress": "192.0.2.1",
                   "nodeSelectors": [{"matchExpressions": [{"key": "a", "operator": "Near"}]}]}),
        ),
        ("BGPAdvertisement", json!({"aggregationLength": 33})),
        ("BGPAdvertisement", json!({"aggregationLengthV6": 0})),
        ("BGPAdvertisement", json!({"localPref": -1})),
        ("BFDProfile", json!({"receiveInterval": 9})),
        ("BFDProfile", json!({"detectMultiplier": 256})),
        ("BFDProfile", json!({"minimumTtl": 255})),
    ];
    for (i, (kind, spec)) in refused.into_iter().enumerate() {
        // A name of its own each, so that a refusal is the schema's, never a name taken.
        let object = json!({"apiVersion": "kube-lb.io/v1alpha1", "kind": kind,
            "metadata": {"name": format!("bad-{i}")}, "spec": spec});
        let error = server
            .seed(&object)
            .expect_err(&format!("{kind} {spec} was accepted"))
            .to_string();
        assert!(
            error.contains("spec."),
            "{kind} {spec}: refused for another reason: {error}"
        );
    }
    // Go durations the schema's pattern takes are the ones the reader takes.
    for (i, text) in ["90s", "1m30s", "0", "1.5h", "300ms", "2µs"]
        .iter()
        .enumerate()
    {
        let object = json!({"apiVersion": "kube-lb.io/v1alpha1", "kind": "BGPPeer",
            "metadata": {"name": format!("duration-{i}")},
            "spec": {"myASN": 1, "peerASN": 1, "peerAddress": "192.0.2.1", "holdTime": text}});
        assert!(server.seed(&object).is_ok(), "{text} refused");
        assert!(parse_go_duration(text).is_ok(), "{text}");
    }
    server.shutdown().await;
}

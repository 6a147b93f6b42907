use std::time::Duration;

use kube_lb_provider_local::ippool::IpPoolSpec;

use super::*;
use crate::bgp::model::Origin;

pub(crate) fn peer(name: &str, address: &str) -> Peer {
    Peer {
        name: name.to_owned(),
        origin: Origin::KubeLb,
        address: address.parse().expect("test address"),
        peer_asn: 64500,
        local_asn: 64512,
        port: 179,
        hold_time: Duration::from_secs(90),
        keepalive_time: Duration::from_secs(30),
        password: None,
        ebgp_multihop: false,
        node_selectors: Vec::new(),
        bfd_profile: None,
    }
}

pub(crate) fn advertisement(name: &str) -> Advertisement {
    Advertisement {
        name: name.to_owned(),
        origin: Origin::KubeLb,
        pools: Vec::new(),
        pool_selectors: Vec::new(),
        aggregation_length_v4: 32,
        aggregation_length_v6: 128,
        communities: Vec::new(),
        large_communities: Vec::new(),
        local_pref: None,
        peers: Vec::new(),
        node_selectors: Vec::new(),
    }
}

fn pool(name: &str, addresses: &[&str], labels: &[(&str, &str)]) -> PoolView {
    let spec = IpPoolSpec {
        addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
        ..IpPoolSpec::default()
    };
    PoolView {
        def: PoolDef::from_spec(name, &spec),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: labels(pairs),
        ..LabelSelector::default()
    }
}

fn node(name: &str) -> NodeView {
    NodeView {
        name: name.to_owned(),
        labels: labels(&[("zone", "a")]),
        withdrawn: None,
    }
}

fn claim(service: &str, local_nodes: Option<&[&str]>) -> Claim {
    Claim {
        service: ServiceKey::new("default", service),
        local_only: local_nodes.is_some(),
        local_nodes: local_nodes
            .unwrap_or_default()
            .iter()
            .map(|n| (*n).to_owned())
            .collect(),
    }
}

fn claims(entries: &[(&str, Vec<Claim>)]) -> BTreeMap<IpAddr, Vec<Claim>> {
    entries
        .iter()
        .map(|(ip, claims)| (ip.parse().expect("test address"), claims.clone()))
        .collect()
}

fn net(text: &str) -> IpNet {
    text.parse().expect("test prefix")
}

fn config(peers: Vec<Peer>, advertisements: Vec<Advertisement>) -> BgpConfig {
    BgpConfig {
        peers,
        advertisements,
        ..BgpConfig::default()
    }
}

fn pools() -> Vec<PoolView> {
    vec![
        pool(
            "public",
            &["203.0.113.0/24", "2001:db8:1::/64"],
            &[("tier", "web")],
        ),
        pool("private", &["10.3.0.0/24"], &[]),
    ]
}

/// The prefixes announced, each with its peers.
fn announced(d: &DesiredSpeaker) -> Vec<(String, Vec<String>)> {
    d.routes
        .iter()
        .map(|(prefix, route)| (prefix.to_string(), route.peers.keys().cloned().collect()))
        .collect()
}

#[test]
fn which_prefixes_go_to_which_peers() {
    struct Case {
        what: &'static str,
        peers: Vec<Peer>,
        advertisements: Vec<Advertisement>,
        claims: Vec<(&'static str, Vec<Claim>)>,
        node: NodeView,
        want: Vec<(&'static str, Vec<&'static str>)>,
    }
    let mut only_public = advertisement("only-public");
    only_public.pools = vec!["public".into()];
    let mut by_label = advertisement("by-label");
    by_label.pool_selectors = vec![selector(&[("tier", "web")])];
    let mut aggregated = advertisement("aggregated");
    aggregated.aggregation_length_v4 = 24;
    aggregated.aggregation_length_v6 = 64;
    let mut to_r1 = advertisement("to-r1");
    to_r1.peers = vec!["r1".into()];
    let mut zone_b = advertisement("zone-b");
    zone_b.node_selectors = vec![selector(&[("zone", "b")])];
    let mut r2_zone_b = peer("r2", "10.9.0.253");
    r2_zone_b.node_selectors = vec![selector(&[("zone", "b")])];
    let mut cordoned = node("n1");
    cordoned.withdrawn = Some("cordoned".into());
    let two_peers = || vec![peer("r1", "10.9.0.254"), peer("r2", "10.9.0.253")];
    let cases = vec![
        Case {
            what: "Cluster: every pool's address to every peer",
            peers: two_peers(),
            advertisements: vec![advertisement("all")],
            claims: vec![
                ("203.0.113.7", vec![claim("web", None)]),
                ("10.3.0.5", vec![claim("db", None)]),
            ],
            node: node("n1"),
            want: vec![
                ("10.3.0.5/32", vec!["r1", "r2"]),
                ("203.0.113.7/32", vec!["r1", "r2"]),
            ],
        },
        Case {
            what: "a pool named: the other pool's address is not advertised",
            peers: two_peers(),
            advertisements: vec![only_public],
            claims: vec![
                ("203.0.113.7", vec![claim("web", None)]),
                ("10.3.0.5", vec![claim("db", None)]),
            ],
            node: node("n1"),
            want: vec![("203.0.113.7/32", vec!["r1", "r2"])],
        },
        Case {
            what: "a pool selected by label, IPv6 too",
            peers: two_peers(),
            advertisements: vec![by_label],
            claims: vec![
                ("2001:db8:1::7", vec![claim("web", None)]),
                ("10.3.0.5", vec![claim("db", None)]),
            ],
            node: node("n1"),
            want: vec![("2001:db8:1::7/128", vec!["r1", "r2"])],
        },
        Case {
            what: "aggregation: two addresses, one prefix per family",
            peers: two_peers(),
            advertisements: vec![aggregated],
            claims: vec![
                ("203.0.113.7", vec![claim("a", None)]),
                ("203.0.113.9", vec![claim("b", None)]),
                ("2001:db8:1::7", vec![claim("c", None)]),
            ],
            node: node("n1"),
            want: vec![
                ("203.0.113.0/24", vec!["r1", "r2"]),
                ("2001:db8:1::/64", vec!["r1", "r2"]),
            ],
        },
        Case {
            what: "an advertisement naming one peer",
            peers: two_peers(),
            advertisements: vec![to_r1],
            claims: vec![("203.0.113.7", vec![claim("web", None)])],
            node: node("n1"),
            want: vec![("203.0.113.7/32", vec!["r1"])],
        },
        Case {
            what: "an advertisement for other nodes",
            peers: two_peers(),
            advertisements: vec![zone_b],
            claims: vec![("203.0.113.7", vec![claim("web", None)])],
            node: node("n1"),
            want: vec![],
        },
        Case {
            what: "a peer for other nodes gets nothing from this one",
            peers: vec![peer("r1", "10.9.0.254"), r2_zone_b],
            advertisements: vec![advertisement("all")],
            claims: vec![("203.0.113.7", vec![claim("web", None)])],
            node: node("n1"),
            want: vec![("203.0.113.7/32", vec!["r1"])],
        },
        Case {
            what: "Local: advertised only where an endpoint is ready",
            peers: two_peers(),
            advertisements: vec![advertisement("all")],
            claims: vec![
                ("203.0.113.7", vec![claim("here", Some(&["n1"]))]),
                ("203.0.113.8", vec![claim("elsewhere", Some(&["n2"]))]),
            ],
            node: node("n1"),
            want: vec![("203.0.113.7/32", vec!["r1", "r2"])],
        },
        Case {
            what: "a shared address: a node must suit every Local Service on it",
            peers: two_peers(),
            advertisements: vec![advertisement("all")],
            claims: vec![(
                "203.0.113.7",
                vec![claim("cluster", None), claim("local", Some(&["n2"]))],
            )],
            node: node("n1"),
            want: vec![],
        },
        Case {
            what: "a withdrawn node advertises nothing, keeps its sessions",
            peers: two_peers(),
            advertisements: vec![advertisement("all")],
            claims: vec![("203.0.113.7", vec![claim("web", None)])],
            node: cordoned,
            want: vec![],
        },
        Case {
            what: "no advertisement: nothing",
            peers: two_peers(),
            advertisements: vec![],
            claims: vec![("203.0.113.7", vec![claim("web", None)])],
            node: node("n1"),
            want: vec![],
        },
        Case {
            what: "loopback and addresses in no pool are never advertised",
            peers: two_peers(),
            advertisements: vec![advertisement("all")],
            claims: vec![
                ("127.0.0.5", vec![claim("single-machine", None)]),
                ("198.51.100.1", vec![claim("stray", None)]),
            ],
            node: node("n1"),
            want: vec![],
        },
    ];
    for case in cases {
        let d = desired(
            &config(case.peers, case.advertisements),
            &pools(),
            &claims(&case.claims),
            &case.node,
            None,
        );
        let want: Vec<(String, Vec<String>)> = case
            .want
            .iter()
            .map(|(p, peers)| {
                (
                    (*p).to_owned(),
                    peers.iter().map(|s| (*s).to_owned()).collect(),
                )
            })
            .collect();
        assert_eq!(announced(&d), want, "{}", case.what);
    }
}

#[test]
fn unadvertised_addresses_say_why() {
    let mut cordoned = node("n1");
    cordoned.withdrawn = Some("node is cordoned".into());
    let config = config(vec![peer("r1", "10.9.0.254")], vec![advertisement("all")]);
    let claims = claims(&[
        ("203.0.113.8", vec![claim("elsewhere", Some(&["n2"]))]),
        ("198.51.100.1", vec![claim("stray", None)]),
    ]);
    let d = desired(&config, &pools(), &claims, &node("n1"), None);
    assert_eq!(
        d.not_advertised
            .get(&"203.0.113.8".parse().unwrap())
            .map(String::as_str),
        Some("externalTrafficPolicy Local: no ready endpoint of default/elsewhere on this node")
    );
    assert_eq!(
        d.not_advertised
            .get(&"198.51.100.1".parse().unwrap())
            .map(String::as_str),
        Some("the address is in no IPPool")
    );
    let d = desired(&config, &pools(), &claims, &cordoned, None);
    assert!(
        d.not_advertised
            .values()
            .all(|why| why == "node is cordoned")
    );
    assert_eq!(d.sessions.len(), 1, "a withdrawn node keeps its sessions");
}

#[test]
fn attributes_of_several_advertisements_add_up() {
    let mut gold = advertisement("gold");
    gold.communities = vec![Community(65000, 100)];
    gold.local_pref = Some(200);
    let mut tagged = advertisement("tagged");
    tagged.communities = vec![Community(65000, 200)];
    tagged.large_communities = vec![LargeCommunity(64512, 1, 2)];
    tagged.local_pref = Some(100);
    let config = config(vec![peer("r1", "10.9.0.254")], vec![gold, tagged]);
    let d = desired(
        &config,
        &pools(),
        &claims(&[("203.0.113.7", vec![claim("web", None)])]),
        &node("n1"),
        None,
    );
    let attributes = &d.routes[&net("203.0.113.7/32")].peers["r1"];
    assert_eq!(
        attributes.communities,
        [Community(65000, 100), Community(65000, 200)].into()
    );
    assert_eq!(
        attributes.large_communities,
        [LargeCommunity(64512, 1, 2)].into()
    );
    assert_eq!(attributes.local_pref, Some(200));
    assert_eq!(
        d.routes[&net("203.0.113.7/32")].services,
        [ServiceKey::new("default", "web")].into()
    );
}

#[test]
fn sessions_resolve_their_bfd_profile() {
    let mut with_bfd = peer("r1", "10.9.0.254");
    with_bfd.bfd_profile = Some("fast".into());
    let mut missing = peer("r2", "10.9.0.253");
    missing.bfd_profile = Some("gone".into());
    let fast = BfdProfile {
        name: "fast".into(),
        origin: Origin::KubeLb,
        receive_interval: Duration::from_millis(300),
        transmit_interval: Duration::from_millis(300),
        detect_multiplier: 3,
        echo_mode: false,
        echo_interval: Duration::from_millis(50),
        passive_mode: false,
        minimum_ttl: 254,
    };
    let config = BgpConfig {
        peers: vec![with_bfd, missing],
        bfd_profiles: vec![fast.clone()],
        ..BgpConfig::default()
    };
    let sessions = sessions(&config, &node("n1"));
    assert_eq!(sessions[0].bfd, Some(fast));
    assert_eq!(sessions[1].bfd, None);
}

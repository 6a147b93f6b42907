use k8s_openapi::api::core::v1::{NodeAddress, NodeSpec, NodeStatus};

use super::*;
use crate::bgp::daemon::{BfdState, NeighborState};
use crate::bgp::desired::tests::peer;
use crate::bgp::desired::{Attributes, Route, Session};
use crate::testing::node;

fn ready_node() -> Node {
    let mut n = node("n1", "a", "r", &[]);
    n.status = None;
    n
}

#[test]
fn when_a_node_advertises_nothing() {
    let mut cordoned = ready_node();
    cordoned.spec = Some(NodeSpec {
        unschedulable: Some(true),
        ..NodeSpec::default()
    });
    let mut excluded = ready_node();
    excluded.metadata.labels.get_or_insert_default().insert(
        "node.kubernetes.io/exclude-from-external-load-balancers".into(),
        String::new(),
    );
    let ready = ready_node();
    /// What, the Node, the dataplane's readiness, stopping, the reason wanted.
    type Case<'a> = (
        &'a str,
        Option<&'a Node>,
        Result<(), String>,
        bool,
        Option<&'a str>,
    );
    let cases: Vec<Case> = vec![
        ("a ready node advertises", Some(&ready), Ok(()), false, None),
        (
            "no Node object yet: judged by the dataplane",
            None,
            Ok(()),
            false,
            None,
        ),
        (
            "stopping comes first",
            Some(&ready),
            Ok(()),
            true,
            Some("the proxy is stopping"),
        ),
        (
            "stale rules",
            Some(&ready),
            Err("the dataplane's rules are stale".into()),
            false,
            Some("the dataplane's rules are stale"),
        ),
        (
            "cordoned (a drain's first step)",
            Some(&cordoned),
            Ok(()),
            false,
            Some("the node is cordoned"),
        ),
    ];
    for (what, node, ready, stopping, want) in cases {
        assert_eq!(withdrawal(node, ready, stopping).as_deref(), want, "{what}");
    }
    let reason = withdrawal(Some(&excluded), Ok(()), false).expect("excluded");
    assert!(reason.contains("excluded by label"), "{reason}");
}

#[test]
fn the_router_id_is_the_first_ipv4_internal_address() {
    let mut n = ready_node();
    n.status = Some(NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: "fd00::11".into(),
            },
            NodeAddress {
                type_: "ExternalIP".into(),
                address: "198.51.100.9".into(),
            },
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.11".into(),
            },
        ]),
        ..NodeStatus::default()
    });
    assert_eq!(node_router_id(&n), Some("10.0.0.11".parse().unwrap()));
    n.status
        .as_mut()
        .unwrap()
        .addresses
        .as_mut()
        .unwrap()
        .remove(2);
    assert_eq!(node_router_id(&n), Some("198.51.100.9".parse().unwrap()));
    assert_eq!(node_router_id(&ready_node()), None);
}

fn desired_two_peers() -> DesiredSpeaker {
    let mut r1 = peer("r1", "10.9.0.254");
    r1.bfd_profile = Some("fast".into());
    let r2 = peer("r2", "10.9.0.253");
    let mut routes = BTreeMap::new();
    let mut route = Route {
        peers: [
            ("r1".to_owned(), Attributes::default()),
            ("r2".to_owned(), Attributes::default()),
        ]
        .into(),
        services: BTreeSet::new(),
    };
    route.services.insert(ServiceKey::new("default", "web"));
    routes.insert("203.0.113.7/32".parse().unwrap(), route);
    DesiredSpeaker {
        router_id: None,
        sessions: vec![
            Session {
                peer: r1,
                bfd: Some(crate::bgp::model::BfdProfile {
                    name: "fast".into(),
                    origin: crate::bgp::model::Origin::KubeLb,
                    receive_interval: Duration::from_millis(300),
                    transmit_interval: Duration::from_millis(300),
                    detect_multiplier: 3,
                    echo_mode: false,
                    echo_interval: Duration::from_millis(50),
                    passive_mode: false,
                    minimum_ttl: 254,
                }),
            },
            Session {
                peer: r2,
                bfd: None,
            },
        ],
        routes,
        not_advertised: BTreeMap::new(),
    }
}

/// What the metrics and events say comes from the daemons' state: a peer whose session is
/// down has been sent nothing, whatever kube-lb asked.
#[test]
fn state_is_what_the_daemons_report() {
    let desired = desired_two_peers();
    let neighbors: BTreeMap<IpAddr, NeighborState> = [
        (
            "10.9.0.254".parse().unwrap(),
            NeighborState {
                state: "Established".into(),
                established: true,
                advertised: vec!["203.0.113.7/32".into()],
                ..NeighborState::default()
            },
        ),
        (
            "10.9.0.253".parse().unwrap(),
            NeighborState {
                state: "Active".into(),
                ..NeighborState::default()
            },
        ),
    ]
    .into();
    let bfd: BTreeMap<IpAddr, BfdState> = [(
        "10.9.0.254".parse().unwrap(),
        BfdState {
            status: "up".into(),
        },
    )]
    .into();
    let snapshot = PeerSnapshot::of(&desired, &neighbors, &bfd);
    assert!(snapshot.session_up["r1"]);
    assert!(!snapshot.session_up["r2"]);
    assert_eq!(snapshot.state["r2"], "Active");
    assert_eq!(snapshot.bfd_up.get("r1"), Some(&true));
    assert_eq!(snapshot.bfd_up.get("r2"), None, "r2 runs no BFD");
    assert_eq!(snapshot.advertised["r2"].len(), 0);
    assert_eq!(snapshot.desired["r2"].len(), 1);
    assert_eq!(
        snapshot.peers_by_service(&desired)[&ServiceKey::new("default", "web")],
        ["r1".to_owned()].into()
    );

    let metrics = BgpMetrics::default();
    *metrics.peers() = snapshot;
    let text = metrics.text();
    for line in [
        "kube_lb_bgp_session_up{peer=\"r1\",address=\"10.9.0.254\"} 1",
        "kube_lb_bgp_session_up{peer=\"r2\",address=\"10.9.0.253\"} 0",
        "kube_lb_bgp_bfd_session_up{peer=\"r1\",address=\"10.9.0.254\"} 1",
        "kube_lb_bgp_announced_prefixes_total{peer=\"r1\",address=\"10.9.0.254\"} 1",
        "kube_lb_bgp_announced_prefixes_total{peer=\"r2\",address=\"10.9.0.253\"} 0",
        "kube_lb_bgp_desired_prefixes{peer=\"r2\",address=\"10.9.0.253\"} 1",
        "kube_lb_bgp_config_reloads_total{result=\"failure\"} 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
}

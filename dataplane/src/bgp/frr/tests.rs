use std::time::Duration;

use super::*;
use crate::bgp::desired::tests::{advertisement, peer};
use crate::bgp::desired::{Route, Session};
use crate::bgp::model::{BfdProfile, Community, LargeCommunity, Origin};

fn fast() -> BfdProfile {
    BfdProfile {
        name: "fast".into(),
        origin: Origin::KubeLb,
        receive_interval: Duration::from_millis(300),
        transmit_interval: Duration::from_millis(100),
        detect_multiplier: 3,
        echo_mode: false,
        echo_interval: Duration::from_millis(50),
        passive_mode: false,
        minimum_ttl: 254,
    }
}

fn route(peers: &[(&str, Attributes)]) -> Route {
    Route {
        peers: peers
            .iter()
            .map(|(name, attributes)| ((*name).to_owned(), attributes.clone()))
            .collect(),
        services: BTreeSet::new(),
    }
}

fn secret() -> SecretKeyRef {
    SecretKeyRef {
        namespace: "kube-lb".into(),
        name: "kube-lb-bgp-passwords".into(),
        key: "r1".into(),
    }
}

/// Two IPv4 routers (one with BFD and a password, one with another local AS) and one IPv6
/// router; three prefixes, one with communities and local preference.
fn sample() -> DesiredSpeaker {
    let mut r1 = peer("r1", "10.9.0.254");
    r1.bfd_profile = Some("fast".into());
    r1.password = Some(secret());
    r1.hold_time = Duration::from_secs(9);
    r1.keepalive_time = Duration::from_secs(3);
    let mut r2 = peer("metallb:r2", "10.9.0.253");
    r2.local_asn = 64513;
    r2.port = 1179;
    r2.ebgp_multihop = true;
    let r6 = peer("r6", "fd09::fe");
    let gold = Attributes {
        communities: [Community(65000, 100)].into(),
        large_communities: [LargeCommunity(64512, 1, 2)].into(),
        local_pref: Some(200),
    };
    let mut routes = BTreeMap::new();
    routes.insert(
        "203.0.113.7/32".parse().unwrap(),
        route(&[("r1", gold.clone()), ("metallb:r2", Attributes::default())]),
    );
    routes.insert(
        "203.0.113.8/32".parse().unwrap(),
        route(&[("r1", Attributes::default())]),
    );
    routes.insert(
        "2001:db8:1::7/128".parse().unwrap(),
        route(&[("r6", Attributes::default())]),
    );
    let _ = advertisement("unused");
    DesiredSpeaker {
        router_id: Some("10.9.0.1".parse().unwrap()),
        sessions: vec![
            Session {
                peer: r1,
                bfd: Some(fast()),
            },
            Session {
                peer: r2,
                bfd: None,
            },
            Session {
                peer: r6,
                bfd: None,
            },
        ],
        routes,
        not_advertised: BTreeMap::new(),
    }
}

fn context() -> RenderContext {
    RenderContext {
        hostname: "node-1".into(),
        passwords: [(secret(), "s3cret".to_owned())].into(),
    }
}

#[test]
fn a_full_configuration_renders_as_frr_prints_it() {
    let want = "\
frr defaults datacenter
hostname node-1
log stdout informational
bgp route-map delay-timer 0
!
bfd
 profile fast
  transmit-interval 100
 exit
 !
exit
!
router bgp 64512
 bgp router-id 10.9.0.1
 no bgp default ipv4-unicast
 no bgp network import-check
 bgp graceful-restart-disable
 neighbor 10.9.0.254 remote-as 64500
 neighbor 10.9.0.254 description r1
 neighbor 10.9.0.254 bfd
 neighbor 10.9.0.254 bfd profile fast
 neighbor 10.9.0.254 timers 3 9
 neighbor 10.9.0.254 password s3cret
 neighbor 10.9.0.253 remote-as 64500
 neighbor 10.9.0.253 description metallb_r2
 neighbor 10.9.0.253 local-as 64513 no-prepend replace-as
 neighbor 10.9.0.253 port 1179
 neighbor 10.9.0.253 ebgp-multihop
 neighbor 10.9.0.253 timers 30 90
 neighbor fd09::fe remote-as 64500
 neighbor fd09::fe description r6
 neighbor fd09::fe timers 30 90
 !
 address-family ipv4 unicast
  network 203.0.113.7/32
  network 203.0.113.8/32
  neighbor 10.9.0.254 activate
  neighbor 10.9.0.254 route-map KLB-r1-IN in
  neighbor 10.9.0.254 route-map KLB-r1-OUT out
  neighbor 10.9.0.253 activate
  neighbor 10.9.0.253 route-map KLB-metallb_r2-IN in
  neighbor 10.9.0.253 route-map KLB-metallb_r2-OUT out
 exit-address-family
 address-family ipv6 unicast
  network 2001:db8:1::7/128
  neighbor fd09::fe activate
  neighbor fd09::fe route-map KLB-r6-IN in
  neighbor fd09::fe route-map KLB-r6-OUT out
 exit-address-family
exit
!
ip prefix-list KLB-r1-1-V4 seq 1 permit 203.0.113.8/32
ip prefix-list KLB-r1-2-V4 seq 1 permit 203.0.113.7/32
!
route-map KLB-r1-IN deny 1
exit
!
route-map KLB-r1-OUT permit 1
 match ip address prefix-list KLB-r1-1-V4
exit
!
route-map KLB-r1-OUT permit 2
 match ip address prefix-list KLB-r1-2-V4
 set community 65000:100 additive
 set large-community 64512:1:2 additive
 set local-preference 200
exit
!
route-map KLB-r1-OUT deny 65535
exit
!
ip prefix-list KLB-metallb_r2-1-V4 seq 1 permit 203.0.113.7/32
!
route-map KLB-metallb_r2-IN deny 1
exit
!
route-map KLB-metallb_r2-OUT permit 1
 match ip address prefix-list KLB-metallb_r2-1-V4
exit
!
route-map KLB-metallb_r2-OUT deny 65535
exit
!
ipv6 prefix-list KLB-r6-1-V6 seq 1 permit 2001:db8:1::7/128
!
route-map KLB-r6-IN deny 1
exit
!
route-map KLB-r6-OUT permit 1
 match ipv6 address prefix-list KLB-r6-1-V6
exit
!
route-map KLB-r6-OUT deny 65535
exit
!
";
    let got = render(&sample(), &context());
    assert_eq!(got, want, "rendered:\n{got}");
}

#[test]
fn a_session_whose_password_is_not_readable_stays_shut() {
    let mut context = context();
    context.passwords.clear();
    let got = render(&sample(), &context);
    assert!(got.contains(" neighbor 10.9.0.254 shutdown\n"), "{got}");
    assert!(!got.contains("password"), "{got}");
}

#[test]
fn a_peer_with_no_prefix_gets_only_the_final_deny() {
    let mut desired = sample();
    desired.routes.clear();
    let got = render(&desired, &context());
    assert!(!got.contains("prefix-list"), "{got}");
    assert!(!got.contains("  network "), "{got}");
    assert!(got.contains("route-map KLB-r1-OUT deny 65535\n"), "{got}");
}

#[test]
fn no_session_no_bgp_instance() {
    let got = render(&DesiredSpeaker::default(), &context());
    assert!(!got.contains("router bgp"), "{got}");
}

#[test]
fn names_frr_accepts() {
    for (name, want) in [
        ("r1", "r1"),
        ("metallb:tor-a", "metallb_tor-a"),
        ("tor.rack-1", "tor.rack-1"),
        ("a b", "a_b"),
    ] {
        assert_eq!(frr_name(name), want);
    }
}

/// FRR's own parser accepts what is rendered: `vtysh --dryrun` reads the file with every
/// daemon's commands (bgpd's and bfdd's) and exits non-zero naming the first line it refuses.
/// Needs FRR (Debian's `frr`); fails under `CI=true` without it.
#[test]
fn frr_parses_the_rendered_configuration() {
    if std::process::Command::new("vtysh")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "FRR is not installed (no vtysh): apt-get install frr"
        );
        eprintln!("skipped: FRR is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("klb-frr-dryrun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut aggregated = sample();
    aggregated.routes.clear();
    for desired in [sample(), aggregated, DesiredSpeaker::default()] {
        for context in [context(), RenderContext::default()] {
            let path = dir.join("frr.conf");
            let text = render(&desired, &context);
            std::fs::write(&path, &text).unwrap();
            let output = std::process::Command::new("vtysh")
                .args(["--dryrun", "-f"])
                .arg(&path)
                .output()
                .unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                output.status.success() && !said.contains("Unknown command"),
                "vtysh --dryrun refused it: {said}\n{text}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_dead_mans_commands_withdraw_every_prefix_and_keep_the_sessions() {
    let desired = sample();
    let prefixes: BTreeSet<IpNet> = desired.routes.keys().copied().collect();
    let got = withdrawal_commands(instance_asn(&desired), &prefixes);
    assert_eq!(
        got,
        "router bgp 64512
 address-family ipv4 unicast
  no network 203.0.113.7/32
  no network 203.0.113.8/32
 exit-address-family
 address-family ipv6 unicast
  no network 2001:db8:1::7/128
 exit-address-family
exit
"
    );
    assert!(!got.contains("neighbor"), "sessions stay up: {got}");
    assert_eq!(withdrawal_commands(None, &prefixes), "");
}

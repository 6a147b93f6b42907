//! The allocator of the `local` provider, table by table: pools (CIDRs and ranges, both
//! families, autoAssign, scoping with priorities, avoidBuggyIPs), requests (requested
//! addresses, a named pool), family policies, sharing, stability, and why a Service waits.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use kube_lb_annotations::{IpFamily, IpFamilyPolicy, Protocol, ServiceKey};
use kube_lb_provider_local::alloc::PortKey;
use kube_lb_provider_local::{
    AllocError, Allocator, Choice, Conflict, PoolDef, Request, SharingTerms, Shown,
};
use serde_json::json;

fn key(namespace: &str, name: &str) -> ServiceKey {
    ServiceKey {
        namespace: namespace.into(),
        name: name.into(),
        uid: format!("uid-{namespace}-{name}"),
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|s| ip(s)).collect()
}

fn pool(name: &str, spec: serde_json::Value) -> PoolDef {
    PoolDef::from_json(name, &spec)
}

fn allocator(pools: Vec<PoolDef>) -> Allocator {
    let mut a = Allocator::new(&["127.240.0.1-127.240.0.9".parse().unwrap()]);
    a.set_pools(pools);
    a
}

/// A request built field by field.
#[derive(Clone)]
struct Ask(Request);

impl Ask {
    fn new(namespace: &str, name: &str) -> Self {
        let mut req = Request::simple(key(namespace, name));
        req.ports = BTreeSet::from([(80, Protocol::Tcp)]);
        Ask(req)
    }
    fn ips(mut self, list: &[&str]) -> Self {
        self.0.requested = ips(list);
        self
    }
    fn pool(mut self, name: &str) -> Self {
        self.0.pool = Some(name.into());
        self
    }
    fn label(mut self, k: &str, v: &str) -> Self {
        self.0.labels.insert(k.into(), v.into());
        self
    }
    fn families(mut self, policy: IpFamilyPolicy, families: &[IpFamily]) -> Self {
        self.0.policy = policy;
        self.0.families = families.to_vec();
        self
    }
    fn share(mut self, sharing_key: &str, ports: &[PortKey]) -> Self {
        self.0.sharing_key = Some(sharing_key.into());
        self.0.ports = ports.iter().copied().collect();
        self
    }
    /// `externalTrafficPolicy: Local` with selector `app=<app>`.
    fn local_traffic(mut self, app: &str) -> Self {
        self.0.traffic_local = true;
        self.0.selector = BTreeMap::from([("app".into(), app.into())]);
        self
    }
}

/// `Ok("ip,ip from pool")` or `Err(words the error must contain)`.
fn outcome(result: &Result<Choice, AllocError>) -> Result<String, String> {
    result
        .as_ref()
        .map(ToString::to_string)
        .map_err(ToString::to_string)
}

fn check(a: &mut Allocator, steps: Vec<(Ask, Result<&str, &str>)>) {
    for (i, (ask, want)) in steps.into_iter().enumerate() {
        let got = outcome(&a.allocate(&ask.0));
        let who = ask.0.service.to_string();
        match (want, &got) {
            (Ok(want), Ok(got)) => assert_eq!(got, want, "step {i} ({who})"),
            (Err(want), Err(got)) => assert!(got.contains(want), "step {i} ({who}): {got}"),
            _ => panic!("step {i} ({who}): wanted {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn cidrs_ranges_families_and_auto_assign() {
    let mut a = allocator(vec![
        pool(
            "lan",
            json!({"addresses": ["10.0.0.0/31", "10.0.1.5-10.0.1.5", "fd00::/127"]}),
        ),
        pool(
            "manual",
            json!({"addresses": ["10.9.0.1-10.9.0.9"], "autoAssign": false}),
        ),
    ]);
    let v6 = [IpFamily::V6];
    check(
        &mut a,
        vec![
            // A CIDR hands out every address, network included, then the next range.
            (Ask::new("d", "a"), Ok("10.0.0.0 from lan")),
            (Ask::new("d", "b"), Ok("10.0.0.1 from lan")),
            (Ask::new("d", "c"), Ok("10.0.1.5 from lan")),
            (
                Ask::new("d", "e"),
                Err("address pool \"lan\" is exhausted: no IPv4 address"),
            ),
            (
                Ask::new("d", "six").families(IpFamilyPolicy::SingleStack, &v6),
                Ok("fd00:: from lan"),
            ),
            // autoAssign: false is only used by request.
            (
                Ask::new("d", "m").pool("manual"),
                Ok("10.9.0.1 from manual"),
            ),
            (
                Ask::new("d", "n").ips(&["10.9.0.5"]),
                Ok("10.9.0.5 from manual"),
            ),
            // Asking again changes nothing.
            (Ask::new("d", "a"), Ok("10.0.0.0 from lan")),
        ],
    );
    assert!(a.release(&key("d", "b")).is_some());
    check(&mut a, vec![(Ask::new("d", "e"), Ok("10.0.0.1 from lan"))]);
}

#[test]
fn avoid_buggy_ips_skips_dot_zero_and_dot_255() {
    let mut a = allocator(vec![pool(
        "lan",
        json!({"addresses": ["10.0.0.254-10.0.1.1"], "avoidBuggyIPs": true}),
    )]);
    check(
        &mut a,
        vec![
            (Ask::new("d", "a"), Ok("10.0.0.254 from lan")),
            (Ask::new("d", "b"), Ok("10.0.1.1 from lan")),
            (Ask::new("d", "c"), Err("exhausted")),
        ],
    );
    let status = &a.statuses()["lan"];
    assert_eq!((status.ipv4.assigned, status.ipv4.available), (2, 0));
    assert_eq!(status.buggy_skipped, 2);
    assert_eq!(status.conditions()[0].reason, "BuggyAddressesSkipped");
}

#[test]
fn scoping_by_namespace_labels_and_priority() {
    let mut a = allocator(vec![
        pool("shared", json!({"addresses": ["10.0.0.1-10.0.0.9"]})),
        pool(
            "team-a",
            json!({"addresses": ["10.1.0.1-10.1.0.1"],
                   "serviceAllocation": {"priority": 10, "namespaces": ["a"]}}),
        ),
        pool(
            "prod",
            json!({"addresses": ["10.2.0.1-10.2.0.9"],
                   "serviceAllocation": {"priority": 5,
                       "namespaceSelectors": [{"matchLabels": {"env": "prod"}}]}}),
        ),
        pool(
            "web",
            json!({"addresses": ["10.3.0.1-10.3.0.9"],
                   "serviceAllocation": {"priority": 1,
                       "serviceSelectors": [{"matchLabels": {"app": "web"}}]}}),
        ),
    ]);
    a.set_namespace_labels(HashMap::from([(
        "shop".to_string(),
        BTreeMap::from([("env".to_string(), "prod".to_string())]),
    )]));
    check(
        &mut a,
        vec![
            // Pinned pools come first (by priority), unprioritised ones last.
            (Ask::new("a", "x"), Ok("10.1.0.1 from team-a")),
            (Ask::new("a", "y"), Ok("10.0.0.1 from shared")),
            (Ask::new("shop", "x"), Ok("10.2.0.1 from prod")),
            (
                Ask::new("shop", "w").label("app", "web"),
                Ok("10.3.0.1 from web"),
            ),
            (Ask::new("other", "x"), Ok("10.0.0.2 from shared")),
            // A pool named or holding the requested address must serve the Service.
            (
                Ask::new("other", "y").pool("team-a"),
                Err("does not serve Service other/y"),
            ),
            (
                Ask::new("other", "z").ips(&["10.2.0.5"]),
                Err("does not serve Service other/z"),
            ),
            (
                Ask::new("other", "q").pool("nope"),
                Err("\"nope\" (kube-lb.io/address-pool) does not exist"),
            ),
        ],
    );
}

#[test]
fn no_pool_matches_is_said() {
    let mut a = allocator(vec![pool(
        "only-a",
        json!({"addresses": ["10.0.0.1-10.0.0.9"], "serviceAllocation": {"namespaces": ["a"]}}),
    )]);
    check(
        &mut a,
        vec![(
            Ask::new("b", "x"),
            Err("no address pool serves Service b/x"),
        )],
    );
}

#[test]
fn requested_addresses_and_why_they_are_refused() {
    let mut a = allocator(vec![
        pool("lan", json!({"addresses": ["10.0.0.0/28", "fd00::/120"]})),
        pool("dmz", json!({"addresses": ["10.5.0.0/28"]})),
    ]);
    check(
        &mut a,
        vec![
            (
                Ask::new("d", "a").ips(&["10.0.0.7"]),
                Ok("10.0.0.7 from lan"),
            ),
            (
                Ask::new("d", "b").ips(&["10.0.0.7"]),
                Err("address 10.0.0.7 is in use by Service d/a"),
            ),
            (
                Ask::new("d", "c").ips(&["192.0.2.1"]),
                Err("requested address 192.0.2.1 is outside every address pool"),
            ),
            (
                Ask::new("d", "c").ips(&["10.5.0.3"]).pool("lan"),
                Err("requested address 10.5.0.3 is outside address pool \"lan\""),
            ),
            // The comma list is the only way to get two families.
            (
                Ask::new("d", "dual").ips(&["10.0.0.9", "fd00::9"]),
                Ok("10.0.0.9,fd00::9 from lan"),
            ),
            // Two addresses from two pools cannot be one Service's.
            (
                Ask::new("d", "split").ips(&["10.0.0.10", "10.5.0.1"]),
                Err("outside every address pool"),
            ),
            // A new request moves the Service, freeing the old address.
            (
                Ask::new("d", "a").ips(&["10.0.0.8"]),
                Ok("10.0.0.8 from lan"),
            ),
            (
                Ask::new("d", "b").ips(&["10.0.0.7"]),
                Ok("10.0.0.7 from lan"),
            ),
        ],
    );
}

#[test]
fn family_policies_follow_ip_families_order() {
    use IpFamily::{V4, V6};
    use IpFamilyPolicy::{PreferDualStack, RequireDualStack, SingleStack};
    let dual = || {
        pool(
            "dual",
            json!({"addresses": ["10.0.0.1-10.0.0.2", "fd00::1-fd00::2"]}),
        )
    };
    let v4only = || pool("v4", json!({"addresses": ["10.1.0.1-10.1.0.9"]}));
    // (pools, policy, families, expected)
    type Case = (
        Vec<PoolDef>,
        IpFamilyPolicy,
        Vec<IpFamily>,
        Result<&'static str, &'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            vec![dual()],
            SingleStack,
            vec![V4],
            Ok("10.0.0.1 from dual"),
        ),
        (vec![dual()], SingleStack, vec![V6], Ok("fd00::1 from dual")),
        (
            vec![dual()],
            PreferDualStack,
            vec![V4, V6],
            Ok("10.0.0.1,fd00::1 from dual"),
        ),
        (
            vec![dual()],
            PreferDualStack,
            vec![V6, V4],
            Ok("fd00::1,10.0.0.1 from dual"),
        ),
        (
            vec![dual()],
            RequireDualStack,
            vec![V6, V4],
            Ok("fd00::1,10.0.0.1 from dual"),
        ),
        // Prefer takes what the pool has; Require refuses.
        (
            vec![v4only()],
            PreferDualStack,
            vec![V4, V6],
            Ok("10.1.0.1 from v4"),
        ),
        (
            vec![v4only()],
            RequireDualStack,
            vec![V4, V6],
            Err("it has no IPv6 range"),
        ),
        (
            vec![v4only()],
            SingleStack,
            vec![V6],
            Err("it has no IPv6 range"),
        ),
        // Require looks further than the first pool that cannot give both.
        (
            vec![v4only(), dual()],
            RequireDualStack,
            vec![V4, V6],
            Ok("10.0.0.1,fd00::1 from dual"),
        ),
    ];
    for (pools, policy, families, want) in cases {
        let mut a = allocator(pools);
        check(
            &mut a,
            vec![(Ask::new("d", "s").families(policy, &families), want)],
        );
    }
}

#[test]
fn sharing_needs_the_same_key_and_disjoint_ports() {
    let tcp = |p: u16| (p, Protocol::Tcp);
    let udp = |p: u16| (p, Protocol::Udp);
    let mut a = allocator(vec![pool(
        "lan",
        json!({"addresses": ["10.0.0.1-10.0.0.3"]}),
    )]);
    check(
        &mut a,
        vec![
            (
                Ask::new("d", "dns-tcp").share("dns", &[tcp(53)]),
                Ok("10.0.0.1 from lan"),
            ),
            // Same key, other ports: the shared address is preferred to a free one.
            (
                Ask::new("d", "dns-udp").share("dns", &[udp(53)]),
                Ok("10.0.0.1 from lan"),
            ),
            // Same key and port: a free address instead; asked for by address, a clash.
            (
                Ask::new("d", "dns-2").share("dns", &[udp(53)]),
                Ok("10.0.0.2 from lan"),
            ),
            (
                Ask::new("d", "dns-3")
                    .share("dns", &[udp(53)])
                    .ips(&["10.0.0.1"]),
                Err("in use by Service d/dns-udp on port 53/UDP as well"),
            ),
            // Another key, or none: in use.
            (
                Ask::new("d", "web")
                    .share("web", &[tcp(80)])
                    .ips(&["10.0.0.1"]),
                Err("with sharing key \"dns\", not \"web\""),
            ),
            (
                Ask::new("d", "plain").ips(&["10.0.0.2"]),
                Err("in use by Service d/dns-2"),
            ),
        ],
    );
    assert_eq!(a.allocated(), 2, "a shared address counts once");
    let status = &a.statuses()["lan"];
    assert_eq!((status.ipv4.assigned, status.ipv4.available), (2, 1));
}

#[test]
fn held_addresses_survive_restarts_pool_edits_and_deletions() {
    let lan = |addresses: serde_json::Value| pool("lan", json!({ "addresses": addresses }));
    let mut a = allocator(vec![lan(json!(["10.0.0.1-10.0.0.9"]))]);
    let web = Ask::new("d", "web");
    let db = Ask::new("d", "db");
    check(
        &mut a,
        vec![
            (web.clone(), Ok("10.0.0.1 from lan")),
            (db.clone(), Ok("10.0.0.2 from lan")),
        ],
    );

    // A restart: a fresh allocator adopts from the statuses; a new Service gets a new address.
    let mut restarted = allocator(vec![lan(json!(["10.0.0.1-10.0.0.9"]))]);
    restarted.adopt(&key("d", "web"), &ips(&["10.0.0.1"]));
    check(
        &mut restarted,
        vec![
            (Ask::new("d", "new"), Ok("10.0.0.2 from lan")),
            (web.clone(), Ok("10.0.0.1 from lan")),
        ],
    );

    // The pool shrinks past web's address: web keeps it, the pool says so.
    a.set_pools(vec![lan(json!(["10.0.0.2-10.0.0.9"]))]);
    check(&mut a, vec![(web.clone(), Ok("10.0.0.1 from lan"))]);
    let conditions = a.statuses()["lan"].conditions();
    assert_eq!(conditions[2].reason, "OutsidePool");
    assert!(
        conditions[2].message.contains("10.0.0.1 (d/web)"),
        "{conditions:?}"
    );
    // The pool disappears: everyone keeps their address, the fallback pool comes back.
    a.set_pools(vec![]);
    check(
        &mut a,
        vec![
            (web.clone(), Ok("10.0.0.1 from lan")),
            (db, Ok("10.0.0.2 from lan")),
            (Ask::new("d", "later"), Ok("127.240.0.1 from local-pool")),
        ],
    );
    // Only when it goes is the address free.
    assert_eq!(a.release(&key("d", "web")), Some(ips(&["10.0.0.1"])));
    assert!(a.statuses().is_empty());
}

#[test]
fn the_written_back_pool_names_an_adopted_address() {
    let mut a = allocator(vec![
        pool("a", json!({"addresses": ["10.0.0.0/24"]})),
        pool("b", json!({"addresses": ["10.0.0.0/24"]})),
    ]);
    // Overlapping pools: adoption alone would guess pool a; the annotation written back
    // before the restart says b, so a Service that names pool b keeps its address.
    a.adopt(&key("d", "web"), &ips(&["10.0.0.5"]));
    let mut web = Ask::new("d", "web").pool("b");
    web.0.written_pool = Some("b".into());
    check(&mut a, vec![(web, Ok("10.0.0.5 from b"))]);
    let statuses = a.statuses();
    assert_eq!(statuses["a"].conditions()[1].reason, "OverlapsPool");
    assert!(statuses["b"].overlaps[0].contains("overlaps pool a"));
}

#[test]
fn an_invalid_pool_never_takes_down_the_others() {
    let mut a = allocator(vec![
        pool("broken", json!({"addresses": ["not-an-ip"]})),
        pool("half", json!({"addresses": ["nope", "10.0.0.1-10.0.0.1"]})),
        pool("good", json!({"addresses": ["10.1.0.1-10.1.0.9"]})),
        pool("undecodable", json!({"addresses": 7})),
    ]);
    check(
        &mut a,
        vec![
            // Pools are tried by name: "broken" has no address, "good" serves.
            (Ask::new("d", "a"), Ok("10.1.0.1 from good")),
            (Ask::new("d", "b").pool("half"), Ok("10.0.0.1 from half")),
            (Ask::new("d", "c").pool("broken"), Err("exhausted")),
        ],
    );
    let statuses = a.statuses();
    for name in ["broken", "half", "undecodable"] {
        let valid = &statuses[name].conditions()[0];
        assert_eq!(
            (valid.status, valid.reason),
            (false, "InvalidEntries"),
            "{name}"
        );
    }
    assert!(statuses["good"].conditions()[0].status);
    assert_eq!(a.problems().len(), 3);
}

#[test]
fn large_ipv6_pools_are_counted_without_overflow() {
    let mut a = allocator(vec![pool("big", json!({"addresses": ["fd00::/64"]}))]);
    check(
        &mut a,
        vec![(
            Ask::new("d", "a").families(IpFamilyPolicy::SingleStack, &[IpFamily::V6]),
            Ok("fd00:: from big"),
        )],
    );
    let status = &a.statuses()["big"];
    assert_eq!(status.ipv6.assigned, 1);
    assert_eq!(status.ipv6.available, (1u128 << 64) - 1);
}

#[test]
fn sharing_needs_the_same_traffic_policy_and_with_local_the_same_selector() {
    let tcp = |p: u16| (p, Protocol::Tcp);
    // (case, first Service, second Service asking for the first one's address, outcome)
    let cases: Vec<(&str, Ask, Ask, Result<&str, &str>)> = vec![
        (
            "both Cluster",
            Ask::new("d", "a").share("k", &[tcp(80)]),
            Ask::new("d", "b").share("k", &[tcp(81)]),
            Ok("10.0.0.1 from lan"),
        ),
        (
            "both Local, same selector",
            Ask::new("d", "a")
                .share("k", &[tcp(80)])
                .local_traffic("web"),
            Ask::new("d", "b")
                .share("k", &[tcp(81)])
                .local_traffic("web"),
            Ok("10.0.0.1 from lan"),
        ),
        (
            "Local and Cluster",
            Ask::new("d", "a")
                .share("k", &[tcp(80)])
                .local_traffic("web"),
            Ask::new("d", "b").share("k", &[tcp(81)]),
            Err(
                "address 10.0.0.1 is in use by Service d/a, which may not share it with this \
                 Service: it has externalTrafficPolicy Local, this Service Cluster",
            ),
        ),
        (
            "both Local, other selectors",
            Ask::new("d", "a")
                .share("k", &[tcp(80)])
                .local_traffic("web"),
            Ask::new("d", "b")
                .share("k", &[tcp(81)])
                .local_traffic("api"),
            Err(
                "in use by Service d/a, which may not share it with this Service: both have \
                 externalTrafficPolicy Local but their selectors differ",
            ),
        ),
    ];
    for (case, first, second, want) in cases {
        let lan = || {
            allocator(vec![pool(
                "lan",
                json!({"addresses": ["10.0.0.1-10.0.0.3"]}),
            )])
        };
        let mut a = lan();
        check(&mut a, vec![(first.clone(), Ok("10.0.0.1 from lan"))]);
        let got = outcome(&a.allocate(&second.clone().ips(&["10.0.0.1"]).0));
        match (want, &got) {
            (Ok(want), Ok(got)) => assert_eq!(got, want, "{case}"),
            (Err(want), Err(got)) => assert!(got.contains(want), "{case}: {got}"),
            _ => panic!("{case}: wanted {want:?}, got {got:?}"),
        }
        // Not asked for by address: the shared address when allowed, else a free one.
        let mut fresh = lan();
        fresh.allocate(&first.0).unwrap();
        let given = fresh.allocate(&second.0).unwrap();
        let want_ip = if want.is_ok() { "10.0.0.1" } else { "10.0.0.2" };
        assert_eq!(given.ips, ips(&[want_ip]), "{case}");
    }
}

fn shown(list: &[&str], since_secs: Option<u64>) -> Shown {
    Shown {
        ips: ips(list),
        since: since_secs.map(|s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s)),
        created: Some(std::time::UNIX_EPOCH),
        terms: Some(SharingTerms {
            ports: BTreeSet::from([(80, Protocol::Tcp)]),
            ..SharingTerms::default()
        }),
    }
}

#[test]
fn an_address_a_live_service_shows_is_taken_by_it() {
    let mut a = allocator(vec![pool(
        "lan",
        json!({"addresses": ["10.0.0.1-10.0.0.3"]}),
    )]);
    // Another process wrote 10.0.0.1 on old (a controller that stopped): nobody else gets it,
    // and old keeps it at its ensure, without this process ever having allocated it.
    assert!(!a.observe(&key("d", "old"), Some(shown(&["10.0.0.1"], Some(100)))));
    check(
        &mut a,
        vec![
            (Ask::new("d", "new"), Ok("10.0.0.2 from lan")),
            (
                Ask::new("d", "asks").ips(&["10.0.0.1"]),
                Err("in use by Service d/old"),
            ),
            (Ask::new("d", "old"), Ok("10.0.0.1 from lan")),
        ],
    );
    // Its status moves on and it is released: free again, and observe says so (a waiting
    // Service is retried).
    a.release(&key("d", "old"));
    assert!(a.observe(&key("d", "old"), None));
    check(
        &mut a,
        vec![(
            Ask::new("d", "asks").ips(&["10.0.0.1"]),
            Ok("10.0.0.1 from lan"),
        )],
    );
    // A relist replaces everything: what a deleted Service showed is forgotten.
    assert!(!a.observe_all(HashMap::from([(key("d", "x"), shown(&["10.0.0.3"], None))])));
    check(&mut a, vec![(Ask::new("d", "y"), Err("is exhausted"))]);
    assert!(a.observe_all(HashMap::new()));
    check(&mut a, vec![(Ask::new("d", "y"), Ok("10.0.0.3 from lan"))]);
}

#[test]
fn when_two_services_claim_one_address_the_first_keeps_it() {
    let lan = || {
        allocator(vec![pool(
            "lan",
            json!({"addresses": ["10.0.0.1-10.0.0.2"]}),
        )])
    };
    // (case, what a shows, what b shows, who keeps 10.0.0.1)
    let cases = [
        ("a was Ready first", Some(100), Some(200), "a"),
        ("b was Ready first", Some(300), Some(200), "b"),
        ("only b has a Ready condition", None, Some(200), "b"),
        ("neither: by name", None, None, "a"),
    ];
    for (case, a_since, b_since, winner) in cases {
        let loser = if winner == "a" { "b" } else { "a" };
        let mut alloc = lan();
        alloc.observe(&key("d", "a"), Some(shown(&["10.0.0.1"], a_since)));
        alloc.observe(&key("d", "b"), Some(shown(&["10.0.0.1"], b_since)));
        assert_eq!(
            alloc.conflicts(),
            vec![Conflict {
                ip: ip("10.0.0.1"),
                winner: key("d", winner),
                loser: key("d", loser),
                why: "neither has the other's kube-lb.io/allow-shared-ip key".into(),
            }],
            "{case}"
        );
        // Whichever is ensured first, the winner keeps the address and the loser moves.
        check(
            &mut alloc,
            vec![
                (Ask::new("d", loser), Ok("10.0.0.2 from lan")),
                (Ask::new("d", winner), Ok("10.0.0.1 from lan")),
            ],
        );
        let mut alloc = lan();
        alloc.observe(&key("d", "a"), Some(shown(&["10.0.0.1"], a_since)));
        alloc.observe(&key("d", "b"), Some(shown(&["10.0.0.1"], b_since)));
        check(
            &mut alloc,
            vec![
                (Ask::new("d", winner), Ok("10.0.0.1 from lan")),
                (Ask::new("d", loser), Ok("10.0.0.2 from lan")),
            ],
        );
    }

    // An address this process allocated, then shown by another Service from an older write
    // (the race of a controller restart): the older claim wins, the allocation moves, and a
    // loser that finds nothing else drops the address instead of serving it.
    let mut alloc = allocator(vec![pool(
        "lan",
        json!({"addresses": ["10.0.0.1-10.0.0.1"]}),
    )]);
    check(
        &mut alloc,
        vec![(Ask::new("d", "fresh"), Ok("10.0.0.1 from lan"))],
    );
    alloc.observe(&key("d", "old"), Some(shown(&["10.0.0.1"], Some(100))));
    let conflicts = alloc.conflicts();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(
        (&conflicts[0].winner, &conflicts[0].loser),
        (&key("d", "old"), &key("d", "fresh"))
    );
    assert!(
        conflicts[0]
            .to_string()
            .contains("also claimed by Service d/old, which claimed it first"),
        "{}",
        conflicts[0]
    );
    let fresh = Ask::new("d", "fresh");
    check(&mut alloc, vec![(fresh.clone(), Err("is exhausted"))]);
    assert!(alloc.drop_lost(&fresh.0));
    assert_eq!(alloc.held(&key("d", "fresh")), None);
    assert!(alloc.conflicts().is_empty());
    check(
        &mut alloc,
        vec![(Ask::new("d", "old"), Ok("10.0.0.1 from lan"))],
    );
}

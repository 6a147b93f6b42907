//! The Azure provider under faults and foreign writers, against the mock ARM server: hand-edited
//! security rules are repaired, upstream's rules are adopted, fields the SDK model does not
//! know survive read-modify-write, and creates whose answers were lost are recognised.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use crate::support;

use kube_lb_mock_azure::{ArmError, Fault, MockArm};
use kube_lb_provider_azure::ProviderOptions;
use kube_lb_provider_core::{LoadBalancerProvider, ProviderError};
use serde_json::{Value, json};
use support::*;

const UID_A: &str = "8ae4a1c2-6b2e-11e9-a923-1681be663d3e";
const UID_B: &str = "11111111-2222-3333-4444-555555555555";

/// Asserts that one more sync of `web` over two nodes makes no write.
async fn assert_next_sync_writes_nothing(h: &Harness, web: &Svc, what: &str) {
    h.arm.clear_journal();
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    assert_eq!(
        h.arm.mutations().len(),
        0,
        "{what}: {:?}",
        h.arm.mutations()
    );
}

/// Merges `patch`'s keys into `target` (one level deep per object), like a partial edit.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

#[tokio::test]
async fn a_hand_edited_security_rule_is_repaired_on_the_next_sync() {
    // Each edit is what someone might do by hand to the managed rule of a Service restricted
    // to 203.0.113.0/24; the next sync must restore it and the one after must do nothing.
    // "Next" is the next one that reads the security group again, after the shared-object
    // cache expired: here at once (TTL zero).
    let tampers: Vec<(&str, Value)> = vec![
        (
            "opened to the world",
            json!({"sourceAddressPrefix": "0.0.0.0/0"}),
        ),
        (
            "source list widened",
            json!({"sourceAddressPrefix": null,
                "sourceAddressPrefixes": ["203.0.113.0/24", "198.51.100.0/24"]}),
        ),
        ("any protocol", json!({"protocol": "*"})),
        ("turned into a deny", json!({"access": "Deny"})),
        (
            "all ports",
            json!({"destinationPortRanges": null, "destinationPortRange": "*"}),
        ),
        ("outbound", json!({"direction": "Outbound"})),
        (
            "priority outside the managed range",
            json!({"priority": 300}),
        ),
        ("source ports narrowed", json!({"sourcePortRange": "1024"})),
        (
            "destination opened to any address",
            json!({"destinationAddressPrefix": "*"}),
        ),
    ];
    for (what, patch) in tampers {
        let h = harness_with(ProviderOptions {
            cache_ttl: std::time::Duration::ZERO,
            ..fast_options()
        })
        .await;
        let web = svc("web", UID_A)
            .ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)])
            .source_ranges(&["203.0.113.0/24"]);
        h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
        let clean = managed_rules(&h.arm);
        assert_eq!(clean.len(), 1, "{what}: {clean:?}");
        let (name, rule) = clean.iter().next().unwrap();

        let mut edited = rule.clone();
        merge(&mut edited, &patch);
        for key in ["provisioningState", "etag"] {
            edited.as_object_mut().unwrap().remove(key);
        }
        if let Some(obj) = edited.as_object_mut() {
            obj.retain(|_, v| !v.is_null());
        }
        let other = OtherClient::new(&h.arm).await;
        assert_eq!(other.put_rule(name, edited).await, 200, "{what}");
        assert_ne!(managed_rules(&h.arm), clean, "{what}: the edit landed");

        h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
        let repaired = managed_rules(&h.arm);
        assert_eq!(repaired.len(), 1, "{what}: {repaired:?}");
        let fixed = &repaired[name];
        assert_eq!(sources(fixed), vec!["203.0.113.0/24"], "{what}");
        assert_eq!(fixed["protocol"], "Tcp", "{what}");
        assert_eq!(fixed["access"], "Allow", "{what}");
        assert_eq!(fixed["direction"], "Inbound", "{what}");
        assert_eq!(fixed["sourcePortRange"], "*", "{what}");
        assert_eq!(
            fixed["destinationPortRanges"],
            json!(["443", "80"]),
            "{what}"
        );
        assert_eq!(fixed["priority"], 500, "{what}");
        assert_eq!(destinations(fixed), destinations(rule), "{what}");

        assert_next_sync_writes_nothing(&h, &web, what).await;
    }
}

#[tokio::test]
async fn the_rule_upstream_left_for_ports_80_and_443_is_adopted() {
    let h = harness().await;
    // What upstream cloud-provider-azure wrote for another Service (address 20.50.0.200) on
    // ports 80 and 443 open to the Internet: its name hashes "Tcp_Internet_443,80".
    let upstream = "k8s-azure-lb_allow_IPv4_556f7044ec033071ec0dfcf7cd85bc93";
    let other = OtherClient::new(&h.arm).await;
    let status = other
        .put_rule(
            upstream,
            json!({"protocol": "Tcp", "access": "Allow", "direction": "Inbound", "priority": 500,
                "sourceAddressPrefix": "Internet", "sourcePortRange": "*",
                "destinationAddressPrefix": "20.50.0.200",
                "destinationPortRanges": ["443", "80"]}),
        )
        .await;
    assert_eq!(status, 201);

    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);
    let lb = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    let ip = lb.ingress[0].ip.unwrap().to_string();
    let rules = managed_rules(&h.arm);
    assert_eq!(
        rules.keys().collect::<Vec<_>>(),
        vec![upstream],
        "upstream's rule is reused, not duplicated"
    );
    let mut want = vec!["20.50.0.200".to_string(), ip];
    want.sort();
    assert_eq!(destinations(&rules[upstream]), want);
    assert_eq!(rules[upstream]["priority"], 500);

    // Rollback to upstream finds its rule where it left it; deleting ours keeps theirs.
    h.provider.delete(&web.spec().service).await.unwrap();
    let rules = managed_rules(&h.arm);
    assert_eq!(destinations(&rules[upstream]), vec!["20.50.0.200"]);
}

/// Puts a property no SDK model knows at `pointer` (an object) of the stored resource `id`.
fn plant(arm: &MockArm, id: &str, pointer: &str) {
    assert!(arm.edit(id, |body| {
        let target = body.pointer_mut(pointer).unwrap().as_object_mut().unwrap();
        target.insert("kubeLbFutureField".into(), json!({"mode": "keep-me"}));
    }));
}

fn planted(body: &Value, pointer: &str) -> bool {
    body.pointer(pointer)
        .and_then(|v| v.get("kubeLbFutureField"))
        .is_some_and(|v| v == &json!({"mode": "keep-me"}))
}

#[tokio::test]
async fn unknown_properties_survive_read_modify_write() {
    let h = harness().await;
    let web = svc("web", UID_A);
    let other = svc("other", UID_B);
    h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    h.provider.ensure(&other.spec(), &nodes(2)).await.unwrap();
    let lb_id = h.arm.load_balancer(RG, CLUSTER).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let nsg_id = h.arm.security_group(RG, NSG).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let pip_name = format!("{CLUSTER}-{}", prefix(UID_A));
    let pip_id = h.arm.public_ip(RG, &pip_name).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // On the load balancer, on another Service's frontend in it, on the security group and on
    // one of its rules, and on the public IP.
    let places: Vec<(&str, &str)> = vec![
        (&lb_id, ""),
        (&lb_id, "/properties"),
        (&lb_id, "/properties/frontendIPConfigurations/1/properties"),
        (&nsg_id, "/properties"),
        (&nsg_id, "/properties/securityRules/0"),
        (&pip_id, "/properties"),
    ];
    for (id, pointer) in &places {
        plant(&h.arm, id, pointer);
    }

    // A sync that rewrites all three: new port (LB rules, NSG rule), a DNS label (the PIP).
    let changed = web
        .clone()
        .ports(&[("http", 80, "TCP", 30080), ("alt", 8080, "TCP", 30081)])
        .annotate("azure-dns-label-name", "web-label");
    h.provider.ensure(&changed.spec(), &nodes(2)).await.unwrap();
    let puts: Vec<String> = h
        .arm
        .mutations()
        .iter()
        .filter(|m| m.method == "PUT")
        .map(|m| m.path.clone())
        .collect();
    for collection in [
        "loadBalancers",
        "networkSecurityGroups",
        "publicIPAddresses",
    ] {
        assert!(
            puts.iter().any(|p| p.contains(collection)),
            "the sync must have rewritten {collection}: {puts:?}"
        );
    }
    for (id, pointer) in &places {
        let body = h.arm.get(id).unwrap();
        assert!(planted(&body, pointer), "lost at {id}{pointer}: {body:#}");
    }
}

/// What a converged Service looks like in the mock, for comparing runs.
fn footprint(arm: &MockArm, uid: &str) -> (Vec<String>, Vec<String>, Vec<String>, usize, usize) {
    let lb = arm.load_balancer(RG, CLUSTER).unwrap();
    let p = prefix(uid);
    let mine = |collection: &str| -> Vec<String> {
        names(&lb["properties"][collection])
            .into_iter()
            .filter(|n| n.starts_with(&p))
            .collect()
    };
    (
        mine("frontendIPConfigurations"),
        mine("loadBalancingRules"),
        mine("probes"),
        owned_pips(arm, "default/web").len(),
        managed_rules(arm).len(),
    )
}

/// The footprint of `web` created without faults, alone or beside another Service.
async fn reference(
    web: &Svc,
    shared: bool,
) -> (Vec<String>, Vec<String>, Vec<String>, usize, usize) {
    let clean = harness().await;
    if shared {
        clean
            .provider
            .ensure(&svc("other", UID_B).spec(), &nodes(2))
            .await
            .unwrap();
    }
    clean.provider.ensure(&web.spec(), &nodes(2)).await.unwrap();
    footprint(&clean.arm, UID_A)
}

#[tokio::test]
async fn a_create_whose_answer_was_lost_is_recognised_on_the_retry() {
    let internal_error = || {
        Some(ArmError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "answer lost",
        ))
    };
    // (what, path substring, lost as 500 or as a dropped connection, a Service already on
    // the load balancer so the write is an update of an existing object)
    let cases: Vec<(&str, &str, Option<ArmError>, bool)> = vec![
        (
            "public IP, 500",
            "/publicIPAddresses/",
            internal_error(),
            false,
        ),
        ("public IP, dropped", "/publicIPAddresses/", None, false),
        (
            "load balancer with frontend, rules, probes, 500",
            "/loadBalancers/",
            internal_error(),
            false,
        ),
        (
            "load balancer with frontend, rules, probes, dropped",
            "/loadBalancers/",
            None,
            false,
        ),
        (
            "frontend, rules and probes added to a shared LB, dropped",
            "/loadBalancers/",
            None,
            true,
        ),
        (
            "security rules, 500",
            "/networkSecurityGroups/",
            internal_error(),
            false,
        ),
        (
            "security rules, dropped",
            "/networkSecurityGroups/",
            None,
            true,
        ),
    ];
    let web = svc("web", UID_A).ports(&[("http", 80, "TCP", 30080), ("https", 443, "TCP", 30443)]);

    for (what, path, error, shared) in cases {
        let want = reference(&web, shared).await;
        let h = harness().await;
        h.provider
            .ensure(&svc("other", UID_B).spec(), &nodes(2))
            .await
            .unwrap();
        if !shared {
            // The other Service is only there to keep the LB; for a create, start clean.
            h.provider
                .delete(&svc("other", UID_B).spec().service)
                .await
                .unwrap();
            assert!(h.arm.load_balancer(RG, CLUSTER).is_none(), "{what}");
        }
        h.arm.inject(Fault::lose_response("PUT", path, error, 1));
        let first = h.provider.ensure(&web.spec(), &nodes(2)).await;
        assert_eq!(h.arm.pending_faults(), 0, "{what}: the fault fired");
        let status = match first {
            Ok(status) => status,
            // The controller retries whatever the first attempt reports; the retry must
            // recognise what the lost write did.
            Err(error) => {
                assert!(error.is_retryable(), "{what}: {error}");
                h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap()
            }
        };
        assert!(status.ingress[0].ip.is_some(), "{what}");
        let got = footprint(&h.arm, UID_A);
        assert_eq!(got, want, "{what}: no duplicates, nothing missing");
        assert_eq!(owned_pips(&h.arm, "default/web").len(), 1, "{what}");

        assert_next_sync_writes_nothing(&h, &web, what).await;
    }
}

#[tokio::test]
async fn a_public_ip_with_our_name_but_another_owner_is_not_taken_over() {
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "another Service",
            json!({"k8s-azure-service": "shop/cart", "k8s-azure-cluster-name": CLUSTER}),
            "shop/cart",
        ),
        (
            "another cluster",
            json!({"k8s-azure-service": "default/web", "k8s-azure-cluster-name": "staging"}),
            "staging",
        ),
        (
            "nobody we know",
            json!({"team": "network"}),
            "unknown owner",
        ),
    ];
    for (what, tags, owner) in cases {
        let h = harness().await;
        let web = svc("web", UID_A);
        let name = format!("{CLUSTER}-{}", prefix(UID_A));
        h.arm.seed_public_ip(RG, &name, tags.clone()).unwrap();
        let error = h.provider.ensure(&web.spec(), &nodes(2)).await.unwrap_err();
        match &error {
            ProviderError::OwnedElsewhere {
                resource,
                owner: named,
                ..
            } => {
                assert!(named.contains(owner), "{what}: {error}");
                assert!(resource.contains(&name), "{what}: {error}");
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(error.class(), "user", "{what}: a user error");
        assert!(
            !error.is_retryable(),
            "{what}: waits for the Service (or the resource's owner) to change"
        );
        assert_eq!(h.arm.public_ip(RG, &name).unwrap()["tags"], tags, "{what}");
        assert!(h.arm.load_balancer(RG, CLUSTER).is_none(), "{what}");
        assert!(
            h.arm.mutations().is_empty(),
            "{what}: {:?}",
            h.arm.mutations()
        );
    }
}

/// What the cloud holds for the cluster's Services: load balancers with the names of their
/// frontends, rules and probes, public IPs, managed security rules.
fn cloud_state(arm: &MockArm) -> Vec<String> {
    let mut out = Vec::new();
    for lb in arm.load_balancers() {
        let name = lb["name"].as_str().unwrap_or("?").to_string();
        for collection in ["frontendIPConfigurations", "loadBalancingRules", "probes"] {
            for child in names(&lb["properties"][collection]) {
                out.push(format!("{name}/{collection}/{child}"));
            }
        }
        out.push(format!("loadBalancer/{name}"));
    }
    for pip in arm.public_ips() {
        out.push(format!("publicIP/{}", pip["name"].as_str().unwrap_or("?")));
    }
    out.extend(managed_rules(arm).into_keys().map(|r| format!("rule/{r}")));
    out.sort();
    out
}

/// A move between the public and the internal load balancer is break-before-make; stopped
/// before any one of its changes — as a SIGKILL there would stop it — a restarted provider
/// finishes it: the Service on the new load balancer only, a free resync, a clean delete.
#[tokio::test]
async fn a_scheme_switch_stopped_before_any_of_its_changes_converges_after_a_restart() {
    let internal = svc("db", UID_A).internal();
    let public = svc("db", UID_A);
    for (from, to, what) in [
        (&public, &internal, "public → internal"),
        (&internal, &public, "internal → public"),
    ] {
        let reference = harness().await;
        reference
            .provider
            .ensure(&from.spec(), &nodes(2))
            .await
            .unwrap();
        let mark = reference.arm.mutations().len();
        reference
            .provider
            .ensure(&to.spec(), &nodes(2))
            .await
            .unwrap();
        let steps: Vec<_> = reference.arm.mutations().split_off(mark);
        let end = cloud_state(&reference.arm);
        assert!(steps.len() >= 2, "{what}: {steps:?}");

        for (k, step) in steps.iter().enumerate() {
            let case = format!(
                "{what}, stopped before change {k} ({} {})",
                step.method, step.path
            );
            let h = harness().await;
            h.provider.ensure(&from.spec(), &nodes(2)).await.unwrap();
            let mark = h.arm.mutations().len();
            // The mock matches a path substring, case-insensitively: count the earlier
            // changes it would match the same way.
            let earlier = steps[..k]
                .iter()
                .filter(|s| {
                    s.method == step.method
                        && s.path.to_lowercase().contains(&step.path.to_lowercase())
                })
                .count();
            h.arm.inject(Fault {
                method: Some(step.method.clone()),
                path_contains: step.path.clone(),
                skip: u32::try_from(earlier).unwrap(),
                times: 1000,
                action: kube_lb_mock_azure::FaultAction::Respond {
                    error: ArmError::bad_request("InjectedStop", "injected: stopped here"),
                    retry_after: None,
                },
            });
            let stopped = h.provider.ensure(&to.spec(), &nodes(2)).await;
            assert!(stopped.is_err(), "{case}: {stopped:?}");
            let made: Vec<(String, String)> = h.arm.mutations()[mark..]
                .iter()
                .take(k)
                .map(|e| (e.method.clone(), e.path.clone()))
                .collect();
            let expected: Vec<(String, String)> = steps[..k]
                .iter()
                .map(|e| (e.method.clone(), e.path.clone()))
                .collect();
            assert_eq!(made, expected, "{case}: the same changes led up to it");
            h.arm.clear_faults();
            let restarted =
                kube_lb_provider_azure::AzureProvider::new(&h.config, CLUSTER, fast_options())
                    .unwrap();
            restarted
                .ensure(&to.spec(), &nodes(2))
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(cloud_state(&h.arm), end, "{case}");
            let mark = h.arm.mutations().len();
            restarted.ensure(&to.spec(), &nodes(2)).await.unwrap();
            assert_eq!(
                h.arm.mutations().len(),
                mark,
                "{case}: the resync after convergence changed something"
            );
            restarted.delete(&to.spec().service).await.unwrap();
            assert!(
                cloud_state(&h.arm).iter().all(|e| !e.contains("publicIP")
                    && !e.contains("/frontendIPConfigurations/")
                    && !e.starts_with("rule/")),
                "{case}: delete left {:?}",
                cloud_state(&h.arm)
            );
        }
    }
}

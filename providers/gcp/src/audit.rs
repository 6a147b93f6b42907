//! Which listed GCE resources are this cluster's (`kube-lb audit`), as a pure function of the
//! listings.
//!
//! Per-Service resources carry no cluster mark (upstream writes none either): they are known
//! by their name, derived from the Service UID (`a<uid>`, `k8s-fw-a<uid>`,
//! `k8s-a<uid>-http-hc`, `a<uid>-hc`), together with the `kubernetes.io/service-name` mark in
//! their description, which both upstream and kube-lb write. A Service whose target pool or
//! backend service uses another cluster's node health check or instance groups belongs to that
//! cluster and is left out. The shared pieces (`k8s-<cid>-node` health checks and their
//! firewalls, `k8s-ig--<cid>` instance groups) carry the cluster ID in their name.
//!
//! Limit: in a project shared by several clusters, another cluster's `Local` external load
//! balancer (its own health check, no shared piece) carries nothing that names its cluster, so
//! it is listed too; the audit then finds no Service with its UID. Shared pieces are recorded
//! with an empty Service (no UID): the provider's `delete` of that key removes only shared
//! pieces, and each only when nothing uses it.

use std::collections::BTreeSet;

use kube_lb_provider_core::{OwnedResource, ServiceKey};

use crate::adopt::{Adoption, CLUSTER_KEY, SERVICE_KEY, adoption_any};
use crate::client::{Collection, Listed};
use crate::desired::{instance_group_name, service_description, shared_health_check_name};
use crate::model::link_name;

/// The resource kind reported for a collection (GCE's own type names).
pub fn kind_of(collection: &Collection) -> &'static str {
    match collection {
        Collection::ForwardingRules => "ForwardingRule",
        Collection::Addresses => "Address",
        Collection::TargetPools => "TargetPool",
        Collection::BackendServices => "BackendService",
        Collection::HttpHealthChecks => "HttpHealthCheck",
        Collection::HealthChecks => "HealthCheck",
        Collection::Firewalls => "Firewall",
        Collection::InstanceGroups(_) => "InstanceGroup",
    }
}

/// True for a name of the form `a<uid>` (the UID without dashes, cut to 31 characters).
fn is_lb_name(name: &str) -> bool {
    name.strip_prefix('a').is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= 31
            && rest
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    })
}

/// The `a<uid>` a per-Service resource's name derives from, if it has such a name.
fn per_service_lb<'a>(collection: &Collection, name: &'a str) -> Option<&'a str> {
    let lb = match collection {
        Collection::ForwardingRules
        | Collection::Addresses
        | Collection::TargetPools
        | Collection::BackendServices
        | Collection::HttpHealthChecks
        | Collection::HealthChecks => name,
        // Traffic (`k8s-fw-<lb>`), legacy health-check (`k8s-<lb>-http-hc`) and health-check
        // (`<lb>-hc`) firewalls.
        Collection::Firewalls => name
            .strip_prefix("k8s-fw-")
            .or_else(|| {
                name.strip_prefix("k8s-")
                    .and_then(|n| n.strip_suffix("-http-hc"))
            })
            .or_else(|| name.strip_suffix("-hc"))?,
        Collection::InstanceGroups(_) => return None,
    };
    is_lb_name(lb).then_some(lb)
}

/// The Service a description's `kubernetes.io/service-name` mark names: `Some("")` when the
/// mark holds no `namespace/name` (upstream marks a per-Service health check with its own
/// name), `None` when there is no such mark.
fn service_mark(description: &str) -> Option<(String, String)> {
    let value: serde_json::Value = serde_json::from_str(description).ok()?;
    let service = value.get(SERVICE_KEY)?.as_str()?;
    Some(match service.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
            (namespace.to_string(), name.to_string())
        }
        _ => (String::new(), String::new()),
    })
}

/// The cluster a pool's or backend service's references prove it belongs to, when they name
/// a shared node health check (`k8s-<cid>-node`) or instance group (`k8s-ig--<cid>`).
fn clusters_referenced(references: &[String]) -> BTreeSet<String> {
    references
        .iter()
        .filter_map(|link| {
            let name = link_name(link);
            name.strip_prefix("k8s-ig--")
                .or_else(|| {
                    name.strip_prefix("k8s-")
                        .and_then(|n| n.strip_suffix("-node"))
                })
                .map(str::to_string)
        })
        .collect()
}

/// The resources of `listings` that are this cluster's, sorted by kind and name.
pub fn owned(listings: &[(Collection, Vec<Listed>)], cluster_id: &str) -> Vec<OwnedResource> {
    // Load balancers whose backends use another cluster's shared pieces are that cluster's.
    let foreign: BTreeSet<&str> = listings
        .iter()
        .filter(|(c, _)| matches!(c, Collection::TargetPools | Collection::BackendServices))
        .flat_map(|(_, items)| items)
        .filter(|item| {
            let clusters = clusters_referenced(&item.references);
            !clusters.is_empty() && !clusters.contains(cluster_id)
        })
        .map(|item| item.name.as_str())
        .collect();
    let shared_check = shared_health_check_name(cluster_id);
    let shared_names = [
        shared_check.clone(),
        format!("{shared_check}-http-hc"),
        format!("{shared_check}-hc"),
    ];
    let shared_marks = [
        serde_json::json!({ CLUSTER_KEY: cluster_id }).to_string(),
        service_description(&shared_check),
    ];
    let shared_marks: Vec<&str> = shared_marks.iter().map(String::as_str).collect();
    let group = instance_group_name(cluster_id);

    let mut out = Vec::new();
    for (collection, items) in listings {
        let kind = kind_of(collection);
        for item in items {
            let shared = |name: String| OwnedResource {
                kind: kind.to_string(),
                name,
                service: ServiceKey {
                    namespace: String::new(),
                    name: String::new(),
                    uid: String::new(),
                },
                created: item.created.clone(),
                shared: true,
            };
            match collection {
                Collection::InstanceGroups(zone) => {
                    // Unmarked (upstream and ingress-gce share them): the name is the mark.
                    if item.name == group {
                        out.push(shared(format!("{zone}/{}", item.name)));
                    }
                    continue;
                }
                Collection::HttpHealthChecks | Collection::HealthChecks | Collection::Firewalls
                    if shared_names.contains(&item.name) =>
                {
                    if adoption_any(&shared_marks, &item.description) == Adoption::Adopt {
                        out.push(shared(item.name.clone()));
                    }
                    continue;
                }
                _ => {}
            }
            let Some(lb) = per_service_lb(collection, &item.name) else {
                continue;
            };
            let Some((namespace, name)) = service_mark(&item.description) else {
                continue;
            };
            if foreign.contains(lb) {
                continue;
            }
            out.push(OwnedResource {
                kind: kind.to_string(),
                name: item.name.clone(),
                service: ServiceKey {
                    namespace,
                    name,
                    // `load_balancer_name` maps this back to `lb`, so `delete` finds it.
                    uid: lb[1..].to_string(),
                },
                created: item.created.clone(),
                shared: false,
            });
        }
    }
    out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_lb_provider_core::naming::load_balancer_name;

    const LB: &str = "a4b2a6798feb511e6bdea42010af0000";

    fn item(name: &str, description: &str) -> Listed {
        Listed {
            name: name.to_string(),
            description: description.to_string(),
            created: Some("2026-01-02T03:04:05.000-07:00".to_string()),
            references: Vec::new(),
        }
    }

    fn mark(service: &str) -> String {
        service_description(service)
    }

    /// (collection, listed resource, expected (reported name, `namespace/name` recorded,
    /// shared) or `None` when it is not the cluster's).
    #[test]
    fn resources_are_recognised_by_name_and_mark() {
        let web = mark("default/web");
        let fw_mark = serde_json::json!({"kubernetes.io/service-name": "default/web",
            "kubernetes.io/service-ip": "203.0.113.5"})
        .to_string();
        let cluster = serde_json::json!({"kubernetes.io/cluster-id": "c1"}).to_string();
        let other_cluster = serde_json::json!({"kubernetes.io/cluster-id": "c2"}).to_string();
        let fw = format!("k8s-fw-{LB}");
        let legacy_hc_fw = format!("k8s-{LB}-http-hc");
        let hc_fw = format!("{LB}-hc");
        type Want<'a> = Option<(&'a str, &'a str, bool)>;
        let cases: Vec<(Collection, Listed, Want<'_>)> = vec![
            (
                Collection::ForwardingRules,
                item(LB, &web),
                Some((LB, "default/web", false)),
            ),
            (
                Collection::Addresses,
                item(LB, &web),
                Some((LB, "default/web", false)),
            ),
            (
                Collection::TargetPools,
                item(LB, &web),
                Some((LB, "default/web", false)),
            ),
            (
                Collection::BackendServices,
                item(LB, &web),
                Some((LB, "default/web", false)),
            ),
            (
                Collection::Firewalls,
                item(&fw, &fw_mark),
                Some((&fw, "default/web", false)),
            ),
            (
                Collection::Firewalls,
                item(&legacy_hc_fw, &web),
                Some((&legacy_hc_fw, "default/web", false)),
            ),
            (
                Collection::Firewalls,
                item(&hc_fw, &web),
                Some((&hc_fw, "default/web", false)),
            ),
            // Upstream marks a per-Service health check with its own name: only the UID is known.
            (
                Collection::HttpHealthChecks,
                item(LB, &mark(LB)),
                Some((LB, "", false)),
            ),
            (
                Collection::HealthChecks,
                item(LB, &web),
                Some((LB, "default/web", false)),
            ),
            // Shared pieces: kube-lb's cluster mark and upstream's own-name mark.
            (
                Collection::HttpHealthChecks,
                item("k8s-c1-node", &cluster),
                Some(("k8s-c1-node", "", true)),
            ),
            (
                Collection::HealthChecks,
                item("k8s-c1-node", &mark("k8s-c1-node")),
                Some(("k8s-c1-node", "", true)),
            ),
            (
                Collection::Firewalls,
                item("k8s-c1-node-http-hc", &cluster),
                Some(("k8s-c1-node-http-hc", "", true)),
            ),
            (
                Collection::Firewalls,
                item("k8s-c1-node-hc", &cluster),
                Some(("k8s-c1-node-hc", "", true)),
            ),
            (
                Collection::InstanceGroups("z1".into()),
                item("k8s-ig--c1", ""),
                Some(("z1/k8s-ig--c1", "", true)),
            ),
            // Not the cluster's.
            (
                Collection::HttpHealthChecks,
                item("k8s-c1-node", &other_cluster),
                None,
            ),
            (Collection::HttpHealthChecks, item("k8s-c1-node", ""), None),
            (
                Collection::HttpHealthChecks,
                item("k8s-c2-node", &mark("k8s-c2-node")),
                None,
            ),
            (
                Collection::Firewalls,
                item("k8s-c2-node-http-hc", &other_cluster),
                None,
            ),
            (
                Collection::InstanceGroups("z1".into()),
                item("k8s-ig--c2", ""),
                None,
            ),
            (Collection::Firewalls, item("allow-ssh", &web), None),
            (
                Collection::Firewalls,
                item("admin-hc", "made by hand"),
                None,
            ),
            (Collection::ForwardingRules, item(LB, ""), None),
            (
                Collection::ForwardingRules,
                item(LB, "{\"owner\":\"me\"}"),
                None,
            ),
            (Collection::ForwardingRules, item("a-rule", &web), None),
            (
                Collection::ForwardingRules,
                item("web-frontend", &web),
                None,
            ),
        ];
        for (collection, listed, want) in cases {
            let what = format!("{collection:?} {} {:?}", listed.name, listed.description);
            let got = owned(&[(collection, vec![listed])], "c1");
            let Some((name, service, shared)) = want else {
                assert_eq!(got, vec![], "{what}");
                continue;
            };
            assert_eq!(got.len(), 1, "{what}");
            let r = &got[0];
            assert_eq!(r.name, name, "{what}");
            let recorded = if r.service.namespace.is_empty() {
                String::new()
            } else {
                format!("{}/{}", r.service.namespace, r.service.name)
            };
            assert_eq!(recorded, service, "{what}");
            assert_eq!(r.shared, shared, "{what}");
            assert!(r.created.is_some(), "{what}");
            // The contract: the provider's delete of the recorded Service finds the resource.
            let uid_maps_back = shared || load_balancer_name(&r.service.uid) == LB;
            assert!(uid_maps_back, "{what}");
        }
    }

    #[test]
    fn a_load_balancer_using_another_clusters_node_pieces_is_not_ours() {
        let web = mark("default/web");
        let other = "a0123456789abcdef0123456789abcde";
        let mut ours_pool = item(LB, &web);
        ours_pool.references = vec!["projects/p/global/httpHealthChecks/k8s-c1-node".into()];
        let mut their_pool = item(other, &web);
        their_pool.references = vec!["projects/p/global/httpHealthChecks/k8s-c2-node".into()];
        let mut their_service = item("a1111", &web);
        their_service.references = vec!["projects/p/zones/z/instanceGroups/k8s-ig--c2".into()];
        let listings = vec![
            (Collection::TargetPools, vec![ours_pool, their_pool]),
            (Collection::BackendServices, vec![their_service]),
            (
                Collection::ForwardingRules,
                vec![item(LB, &web), item(other, &web), item("a1111", &web)],
            ),
            (
                Collection::Firewalls,
                vec![item(&format!("k8s-fw-{other}"), &web)],
            ),
        ];
        let names: Vec<(String, String)> = owned(&listings, "c1")
            .into_iter()
            .map(|r| (r.kind, r.name))
            .collect();
        assert_eq!(
            names,
            [
                ("ForwardingRule".to_string(), LB.to_string()),
                ("TargetPool".to_string(), LB.to_string())
            ]
        );
    }
}

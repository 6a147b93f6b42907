//! Recognising kube-lb's own resources when a create answers `alreadyExists` (409).
//!
//! Every name the provider creates is deterministic (`a<uid>`, `k8s-fw-a<uid>`, the shared
//! `k8s-<cid>-node`, …), so when an insert took effect but its answer was lost (a 503 or a
//! dropped connection after GCE performed it), the retry meets 409. The resource found under
//! that name is adopted when its description carries the owner mark upstream writes and
//! kube-lb wants (`kubernetes.io/service-name` for per-Service resources,
//! `kubernetes.io/cluster-id` for the cluster's shared ones); anything else belongs to
//! someone else and is a user error naming that owner (`ProviderError::OwnedElsewhere`), never
//! taken over.

use crate::desired::{Desired, service_description};
use crate::plan::Observed;

/// The description key upstream marks per-Service resources with.
pub const SERVICE_KEY: &str = "kubernetes.io/service-name";
/// The description key upstream marks the cluster's shared resources with.
pub const CLUSTER_KEY: &str = "kubernetes.io/cluster-id";

/// What to do with a resource found under the name a create wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Adoption {
    /// It is ours (most likely our own create whose answer was lost): use it and carry on;
    /// any field that differs is reconciled by the next plan like any drift.
    Adopt,
    /// It belongs to `owner` (in words, for the Warning).
    Taken {
        /// Who holds the name.
        owner: String,
    },
}

/// The owner marks in a description: (service, cluster). Descriptions that are not a JSON
/// object carry no mark.
fn marks(description: &str) -> (Option<String>, Option<String>) {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_str(description) else {
        return (None, None);
    };
    let get = |key: &str| map.get(key).and_then(|v| v.as_str()).map(str::to_string);
    (get(SERVICE_KEY), get(CLUSTER_KEY))
}

/// Who a description says owns a resource, in words.
fn owner_of(description: &str) -> String {
    match marks(description) {
        (Some(service), _) => format!("Service {service}"),
        (None, Some(cluster)) => format!("cluster {cluster}"),
        (None, None) if description.trim().is_empty() => {
            "an unknown owner (no description)".to_string()
        }
        (None, None) => {
            let mut shown: String = description.chars().take(120).collect();
            if shown.len() < description.len() {
                shown.push('…');
            }
            format!("an unknown owner (description {shown:?})")
        }
    }
}

/// Decides whether the resource described by `found` may be adopted by a create that wanted
/// to write `wanted`. Only the owner marks are compared: the traffic firewall's
/// `kubernetes.io/service-ip` changes with the address and is reconciled as drift.
pub fn adoption(wanted: &str, found: &str) -> Adoption {
    let (want_service, want_cluster) = marks(wanted);
    let (found_service, found_cluster) = marks(found);
    let ours = match (want_service, want_cluster) {
        (Some(service), _) => found_service.as_deref() == Some(service.as_str()),
        (None, Some(cluster)) => {
            found_service.is_none() && found_cluster.as_deref() == Some(cluster.as_str())
        }
        // Nothing marks ownership of what kube-lb writes unmarked (the shared instance
        // groups, which upstream and ingress-gce also use): the cluster-scoped name is all
        // there is.
        (None, None) => true,
    };
    if ours {
        Adoption::Adopt
    } else {
        Adoption::Taken {
            owner: owner_of(found),
        }
    }
}

/// (kind, the found resource's name and description, the description kube-lb wants).
type Candidate<'a> = (&'static str, Option<(&'a str, &'a str)>, &'a str);

/// A resource found under one of the Service's names that belongs to someone else:
/// (kind, name, owner in words). Checked on every observation, so a foreign resource is
/// reported instead of being updated into the Service's shape.
pub fn foreign(desired: &Desired, observed: &Observed) -> Option<(&'static str, String, String)> {
    let service = service_description(&desired.service);
    let found: [Candidate<'_>; 7] = [
        (
            "forwarding rule",
            observed
                .rule
                .as_ref()
                .map(|r| (r.name.as_str(), r.description.as_str())),
            &service,
        ),
        (
            "address",
            observed
                .address
                .as_ref()
                .map(|a| (a.name.as_str(), a.description.as_str())),
            &service,
        ),
        (
            "firewall",
            observed
                .firewall
                .as_ref()
                .map(|f| (f.name.as_str(), f.description.as_str())),
            &service,
        ),
        (
            "target pool",
            observed
                .target_pool
                .as_ref()
                .map(|p| (p.name.as_str(), p.description.as_str())),
            &service,
        ),
        (
            "backend service",
            observed
                .backend_service
                .as_ref()
                .map(|b| (b.name.as_str(), b.description.as_str())),
            &service,
        ),
        (
            "health check",
            observed
                .health_check
                .as_ref()
                .map(|h| (h.name.as_str(), h.description.as_str())),
            &desired.health_check.description,
        ),
        (
            "health-check firewall",
            observed
                .health_check_firewall
                .as_ref()
                .map(|f| (f.name.as_str(), f.description.as_str())),
            &desired.health_check_firewall.description,
        ),
    ];
    found.into_iter().find_map(|(kind, found, wanted)| {
        let (name, description) = found?;
        let decision = if kind.contains("health") {
            let marks = health_check_marks(desired, wanted);
            let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
            adoption_any(&marks, description)
        } else {
            adoption(wanted, description)
        };
        match decision {
            Adoption::Adopt => None,
            Adoption::Taken { owner } => Some((kind, name.to_string(), owner)),
        }
    })
}

/// [`adoption`] against several acceptable descriptions: ours first (its owner is the one
/// reported), then the ones upstream writes on the same resource.
pub fn adoption_any(wanted: &[&str], found: &str) -> Adoption {
    let mut first = None;
    for want in wanted {
        match adoption(want, found) {
            Adoption::Adopt => return Adoption::Adopt,
            taken => {
                first.get_or_insert(taken);
            }
        }
    }
    first.unwrap_or(Adoption::Adopt)
}

/// The descriptions a health check (or its firewall) may carry and still be the cluster's:
/// kube-lb's own, and upstream's, which marks legacy health checks with their own name
/// (`{"kubernetes.io/service-name":"k8s-<cid>-node"}` or `…"a<uid>"}`) so that clusters
/// migrating from upstream keep them.
pub fn health_check_marks(desired: &Desired, own: &str) -> Vec<String> {
    vec![
        own.to_string(),
        service_description(&desired.health_check.name),
        service_description(&desired.lb),
        service_description(&desired.service),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adoption_decisions() {
        let svc = |s: &str| serde_json::json!({ SERVICE_KEY: s }).to_string();
        let fw = |s: &str, ip: &str| {
            serde_json::json!({ SERVICE_KEY: s, "kubernetes.io/service-ip": ip }).to_string()
        };
        let cluster = |c: &str| serde_json::json!({ CLUSTER_KEY: c }).to_string();
        let taken = |owner: &str| Adoption::Taken {
            owner: owner.to_string(),
        };
        let cases: Vec<(&str, String, String, Adoption)> = vec![
            (
                "our own lost create",
                svc("ns/web"),
                svc("ns/web"),
                Adoption::Adopt,
            ),
            (
                "firewall left with an older IP",
                fw("ns/web", "34.1.1.1"),
                fw("ns/web", "34.9.9.9"),
                Adoption::Adopt,
            ),
            (
                "upstream's key order and spacing",
                svc("ns/web"),
                r#"{ "kubernetes.io/service-name" : "ns/web" }"#.to_string(),
                Adoption::Adopt,
            ),
            (
                "another Service",
                svc("ns/web"),
                svc("shop/cart"),
                taken("Service shop/cart"),
            ),
            (
                "shared resource of this cluster",
                cluster("c1"),
                cluster("c1"),
                Adoption::Adopt,
            ),
            (
                "shared name of another cluster",
                cluster("c1"),
                cluster("c2"),
                taken("cluster c2"),
            ),
            (
                "a Service's resource where a shared one was wanted",
                cluster("c1"),
                svc("ns/web"),
                taken("Service ns/web"),
            ),
            (
                "made by hand, no description",
                svc("ns/web"),
                String::new(),
                taken("an unknown owner (no description)"),
            ),
            (
                "made by hand, free text",
                svc("ns/web"),
                "do not touch".to_string(),
                taken("an unknown owner (description \"do not touch\")"),
            ),
            (
                "unmarked shared instance group",
                String::new(),
                "anything".to_string(),
                Adoption::Adopt,
            ),
        ];
        for (what, wanted, found, want) in cases {
            assert_eq!(adoption(&wanted, &found), want, "{what}");
        }
    }

    #[test]
    fn health_checks_also_accept_upstreams_marks() {
        let svc = |s: &str| serde_json::json!({ SERVICE_KEY: s }).to_string();
        let own = serde_json::json!({ CLUSTER_KEY: "c1" }).to_string();
        let upstream = [own.as_str(), &svc("k8s-c1-node")];
        let cases = [
            (own.clone(), Adoption::Adopt),
            (svc("k8s-c1-node"), Adoption::Adopt),
            (
                serde_json::json!({ CLUSTER_KEY: "c2" }).to_string(),
                Adoption::Taken {
                    owner: "cluster c2".into(),
                },
            ),
            (
                svc("shop/cart"),
                Adoption::Taken {
                    owner: "Service shop/cart".into(),
                },
            ),
        ];
        for (found, want) in cases {
            assert_eq!(adoption_any(&upstream, &found), want, "{found}");
        }
    }

    #[test]
    fn long_foreign_descriptions_are_cut() {
        let found = "x".repeat(10_000);
        let Adoption::Taken { owner } = adoption(
            &serde_json::json!({ SERVICE_KEY: "a/b" }).to_string(),
            &found,
        ) else {
            panic!("must not adopt");
        };
        assert!(owner.len() < 200, "{owner}");
    }
}

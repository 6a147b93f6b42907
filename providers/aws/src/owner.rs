//! Who owns a resource found by its deterministic name. A create whose response was lost leaves
//! a resource the retry trips over (`DuplicateLoadBalancerName`, `InvalidGroup.Duplicate`, …);
//! its tags tell whether it is this Service's own (adopt it and carry on) or someone else's
//! (an error naming the owner, never adopted, never deleted).

use std::collections::BTreeMap;

use kube_lb_provider_core::naming::SERVICE_NAME_TAG;

const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// Words naming the owner a resource's tags declare, for error messages.
pub fn describe_owner(tags: &BTreeMap<String, String>) -> String {
    let clusters: Vec<&str> = tags
        .keys()
        .filter_map(|k| k.strip_prefix(CLUSTER_TAG_PREFIX))
        .chain(
            tags.get(crate::tags::LEGACY_CLUSTER_TAG)
                .map(String::as_str),
        )
        .collect();
    let service = tags.get(SERVICE_NAME_TAG);
    match (clusters.is_empty(), service) {
        (true, None) => "an owner without Kubernetes ownership tags".to_string(),
        (true, Some(service)) => format!("Service {service} (no cluster tag)"),
        (false, None) => format!("cluster {}", clusters.join(", ")),
        (false, Some(service)) => format!("Service {service} of cluster {}", clusters.join(", ")),
    }
}

/// A load balancer or target group found under this Service's name is someone else's only
/// when its tags name another owner: a cluster tag (`kubernetes.io/cluster/<id>`, or the
/// legacy `KubernetesCluster=<id>`) but none for this cluster, or a service-name tag of another
/// Service. Without any ownership tag it is adopted (and tagged by the plan): the name is
/// derived from the Service's UID, and the upstream provider's early load balancers carry no
/// tags. `desired` is the tag set kube-lb writes; `Err` carries the owner's description.
pub fn check_resource(
    observed: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
) -> Result<(), String> {
    let ours: Vec<&str> = desired
        .keys()
        .filter_map(|k| k.strip_prefix(CLUSTER_TAG_PREFIX))
        .collect();
    let theirs: Vec<&str> = observed
        .keys()
        .filter_map(|k| k.strip_prefix(CLUSTER_TAG_PREFIX))
        .chain(
            observed
                .get(crate::tags::LEGACY_CLUSTER_TAG)
                .map(String::as_str),
        )
        .collect();
    let other_cluster = !theirs.is_empty() && !theirs.iter().any(|id| ours.contains(id));
    let other_service = observed
        .get(SERVICE_NAME_TAG)
        .is_some_and(|service| desired.get(SERVICE_NAME_TAG) != Some(service));
    if other_cluster || other_service {
        Err(describe_owner(observed))
    } else {
        Ok(())
    }
}

/// A provider-created security group carries only the cluster tag. One without any cluster tag
/// is adopted (and tagged), as upstream does; one tagged for other clusters only is theirs.
pub fn check_group(observed: &BTreeMap<String, String>, cluster_tag: &str) -> Result<(), String> {
    let tagged_for_others = observed
        .keys()
        .any(|k| k.starts_with(CLUSTER_TAG_PREFIX) && k != cluster_tag);
    if observed.contains_key(cluster_tag) || !tagged_for_others {
        Ok(())
    } else {
        Err(describe_owner(observed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Observed tags and the expected verdict (`Err` = the owner's description).
    type Case = (
        &'static [(&'static str, &'static str)],
        Result<(), &'static str>,
    );

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn resources_are_ours_only_with_our_cluster_and_service_tags() {
        let desired = map(&[
            ("kubernetes.io/cluster/c", "owned"),
            ("kubernetes.io/service-name", "ns/web"),
            ("env", "prod"),
        ]);
        let cases: [Case; 8] = [
            (
                &[
                    ("kubernetes.io/cluster/c", "owned"),
                    ("kubernetes.io/service-name", "ns/web"),
                ],
                Ok(()),
            ),
            // Upstream writes the same keys; "shared" is still this cluster's.
            (
                &[
                    ("kubernetes.io/cluster/c", "shared"),
                    ("kubernetes.io/service-name", "ns/web"),
                    ("other", "x"),
                ],
                Ok(()),
            ),
            (
                &[
                    ("KubernetesCluster", "c"),
                    ("kubernetes.io/service-name", "ns/web"),
                ],
                Ok(()),
            ),
            // No ownership tag at all: the UID-derived name makes it this Service's.
            (&[("env", "prod")], Ok(())),
            (
                &[
                    ("kubernetes.io/cluster/other", "owned"),
                    ("kubernetes.io/service-name", "ns/web"),
                ],
                Err("Service ns/web of cluster other"),
            ),
            (
                &[
                    ("kubernetes.io/cluster/c", "owned"),
                    ("kubernetes.io/service-name", "ns/api"),
                ],
                Err("Service ns/api of cluster c"),
            ),
            (
                &[("kubernetes.io/service-name", "ns/api")],
                Err("Service ns/api (no cluster tag)"),
            ),
            (&[("KubernetesCluster", "other")], Err("cluster other")),
        ];
        for (observed, want) in cases {
            assert_eq!(
                check_resource(&map(observed), &desired),
                want.map_err(str::to_string),
                "{observed:?}"
            );
        }
    }

    #[test]
    fn groups_untagged_or_ours_are_adopted() {
        let ours = "kubernetes.io/cluster/c";
        let cases: [Case; 4] = [
            (&[("kubernetes.io/cluster/c", "owned")], Ok(())),
            (&[], Ok(())),
            (
                &[
                    ("kubernetes.io/cluster/c", "owned"),
                    ("kubernetes.io/cluster/d", "owned"),
                ],
                Ok(()),
            ),
            (&[("kubernetes.io/cluster/d", "owned")], Err("cluster d")),
        ];
        for (observed, want) in cases {
            assert_eq!(
                check_group(&map(observed), ours),
                want.map_err(str::to_string),
                "{observed:?}"
            );
        }
    }
}

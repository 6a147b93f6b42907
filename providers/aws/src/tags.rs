//! Tags: ownership tags plus `additional-resource-tags`, and a diff that removes only tags
//! kube-lb itself added. Upstream never removes a tag (CLB) or never updates them at all (NLB,
//! aws.md §8.5); kube-lb records the user tag keys it applied in one extra tag so a key removed
//! from the annotation is removed from AWS, while tags added by other tools stay untouched.

use std::collections::{BTreeMap, BTreeSet};

use kube_lb_annotations::ServiceKey;
use kube_lb_provider_core::naming::ownership_tags;

/// Tag that lists (comma-separated) the `additional-resource-tags` keys kube-lb applied.
pub const TRACKER_TAG: &str = "kube-lb.io/additional-tag-keys";

/// Legacy cluster tag key, written when the cluster ID came from `KubernetesClusterTag`.
pub const LEGACY_CLUSTER_TAG: &str = "KubernetesCluster";

/// Desired tags of a load balancer (and its listeners and target groups): user tags first,
/// then the provider's tags, which win on conflicts.
pub fn resource_tags(
    cluster_id: &str,
    legacy: bool,
    service: &ServiceKey,
    additional: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags = additional.clone();
    let own = ownership_tags(cluster_id, service);
    let user_keys: Vec<&str> = additional
        .keys()
        .filter(|k| !own.contains_key(*k) && k.as_str() != TRACKER_TAG)
        .map(String::as_str)
        .collect();
    if !user_keys.is_empty() {
        tags.insert(TRACKER_TAG.to_string(), user_keys.join(","));
    } else {
        tags.remove(TRACKER_TAG);
    }
    tags.extend(own);
    if legacy {
        tags.insert(LEGACY_CLUSTER_TAG.to_string(), cluster_id.to_string());
    }
    tags
}

/// Tags of provider-created security groups: cluster ownership plus user tags, no service
/// name (as upstream).
pub fn security_group_tags(
    cluster_id: &str,
    additional: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut tags = additional.clone();
    tags.insert(
        kube_lb_provider_core::naming::cluster_tag_key(cluster_id),
        kube_lb_provider_core::naming::CLUSTER_TAG_OWNED.to_string(),
    );
    tags
}

/// Tag changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TagChanges {
    /// Tags to add or overwrite.
    pub add: BTreeMap<String, String>,
    /// Keys to remove.
    pub remove: Vec<String>,
}

/// Adds what differs; removes keys the tracker says kube-lb applied that are no longer wanted.
pub fn diff_tags(
    observed: &BTreeMap<String, String>,
    desired: &BTreeMap<String, String>,
) -> TagChanges {
    let add: BTreeMap<String, String> = desired
        .iter()
        .filter(|(k, v)| observed.get(*k) != Some(*v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut ours: BTreeSet<&str> = observed
        .get(TRACKER_TAG)
        .map(|keys| keys.split(',').filter(|k| !k.is_empty()).collect())
        .unwrap_or_default();
    ours.insert(TRACKER_TAG);
    let remove = ours
        .into_iter()
        .filter(|k| observed.contains_key(*k) && !desired.contains_key(*k))
        .map(str::to_string)
        .collect();
    TagChanges { add, remove }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc() -> ServiceKey {
        ServiceKey {
            namespace: "ns".into(),
            name: "web".into(),
            uid: "u".into(),
        }
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn provider_tags_win_and_user_keys_are_tracked() {
        let tags = resource_tags(
            "c",
            false,
            &svc(),
            &map(&[("env", "prod"), ("kubernetes.io/service-name", "spoof")]),
        );
        assert_eq!(
            tags,
            map(&[
                ("env", "prod"),
                ("kube-lb.io/additional-tag-keys", "env"),
                ("kubernetes.io/cluster/c", "owned"),
                ("kubernetes.io/service-name", "ns/web"),
            ])
        );
        let legacy = resource_tags("c", true, &svc(), &BTreeMap::new());
        assert_eq!(
            legacy.get("KubernetesCluster").map(String::as_str),
            Some("c")
        );
        assert!(!legacy.contains_key(TRACKER_TAG));
    }

    #[test]
    fn diff_removes_only_tracked_keys() {
        let before = resource_tags("c", false, &svc(), &map(&[("env", "prod"), ("team", "a")]));
        let mut observed = before.clone();
        observed.insert("cost-center".into(), "42".into()); // added by another tool
        let after = resource_tags("c", false, &svc(), &map(&[("env", "dev")]));
        let changes = diff_tags(&observed, &after);
        assert_eq!(
            changes.add,
            map(&[("env", "dev"), ("kube-lb.io/additional-tag-keys", "env")])
        );
        assert_eq!(changes.remove, vec!["team".to_string()]);
        assert_eq!(diff_tags(&before, &before), TagChanges::default());
        let none = resource_tags("c", false, &svc(), &BTreeMap::new());
        let changes = diff_tags(&before, &none);
        assert_eq!(
            changes.remove,
            vec![
                "env".to_string(),
                "kube-lb.io/additional-tag-keys".into(),
                "team".into()
            ]
        );
    }
}

//! Deterministic names and ownership tags, compatible with the upstream cloud providers so that
//! load balancers they created are adopted rather than duplicated.

use std::collections::BTreeMap;

use kube_lb_annotations::ServiceKey;

/// Tag key prefix marking cluster ownership: `kubernetes.io/cluster/<cluster>`.
pub const CLUSTER_TAG_PREFIX: &str = "kubernetes.io/cluster/";
/// Value of the cluster tag for resources this cluster created.
pub const CLUSTER_TAG_OWNED: &str = "owned";
/// Tag naming the Service (`<namespace>/<name>`).
pub const SERVICE_NAME_TAG: &str = "kubernetes.io/service-name";

/// The load-balancer name upstream uses: `a` followed by the Service UID without dashes,
/// truncated to 32 characters.
pub fn load_balancer_name(uid: &str) -> String {
    let mut name = String::with_capacity(32);
    name.push('a');
    name.extend(uid.chars().filter(|c| *c != '-').take(31));
    name
}

/// The cluster ownership tag key for `cluster`.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("{CLUSTER_TAG_PREFIX}{cluster}")
}

/// The tags every owned resource carries: cluster ownership and the Service name. These win
/// over user tags of the same key.
pub fn ownership_tags(cluster: &str, service: &ServiceKey) -> BTreeMap<String, String> {
    BTreeMap::from([
        (cluster_tag_key(cluster), CLUSTER_TAG_OWNED.to_string()),
        (SERVICE_NAME_TAG.to_string(), service.to_string()),
    ])
}

/// True when `marks` (a resource's tags, or the words of its description) name some
/// cluster's identity (they start with `prefix`) but never this cluster's `ours` (pure): the
/// resource is another cluster's, whatever else its marks share with ours (such as a
/// `--cluster-name`). Unknown (`ours` is `None`) or unmarked is not known to be another's.
pub fn marks_another_cluster<'a>(
    marks: impl IntoIterator<Item = &'a str>,
    prefix: &str,
    ours: Option<&str>,
) -> bool {
    let Some(ours) = ours else {
        return false;
    };
    let mut identities = marks
        .into_iter()
        .filter(|mark| mark.starts_with(prefix))
        .peekable();
    identities.peek().is_some() && identities.all(|mark| mark != ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_matches_upstream_shape() {
        let cases = [
            (
                "8ae4a1c2-6b2e-11e9-a923-1681be663d3e",
                "a8ae4a1c26b2e11e9a9231681be663d3",
            ),
            ("short", "ashort"),
            ("", "a"),
        ];
        for (uid, want) in cases {
            assert_eq!(load_balancer_name(uid), want, "uid {uid}");
            assert!(load_balancer_name(uid).len() <= 32);
        }
    }

    #[test]
    fn ownership_tags_name_cluster_and_service() {
        let svc = ServiceKey {
            namespace: "prod".into(),
            name: "web".into(),
            uid: "u".into(),
        };
        let tags = ownership_tags("c1", &svc);
        assert_eq!(
            tags.get("kubernetes.io/cluster/c1").map(String::as_str),
            Some("owned")
        );
        assert_eq!(
            tags.get(SERVICE_NAME_TAG).map(String::as_str),
            Some("prod/web")
        );
    }
}

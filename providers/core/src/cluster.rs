//! The two ways a load balancer says which cluster it belongs to, as two types.
//!
//! They are easy to confuse because both were once spelled `cluster_id`:
//!
//! - [`ClusterName`] is what the operator calls the cluster (`--cluster-name`, default
//!   `kubernetes`). It goes into ownership tags (`kubernetes.io/cluster/<name>`) and some
//!   resource names. Two clusters may well share it (every kubeadm cluster is `kubernetes`).
//! - [`ClusterIdentity`] is what the cluster is: the UID of its kube-system namespace (or
//!   `--cluster-id`). Providers that name load balancers after a Service's namespace/name mark
//!   it on them, so that a leftover of this cluster can be told from another cluster's with the
//!   same name. It may be unknown (no permission to read the namespace), hence `Option` at the
//!   call sites.
//!
//! Both are checked once, where they are read, so a provider never sees a value that a cloud
//! would reject in a tag.

use std::fmt;
use std::ops::Deref;
use std::str::FromStr;

/// The prefix of the ownership tag key the name goes into.
const OWNERSHIP_TAG_PREFIX: &str = "kubernetes.io/cluster/";

/// The longest tag key the clouds accept (AWS: 128 characters).
const MAX_TAG_KEY: usize = 128;

/// The longest identity: it goes into tag values and descriptions that the clouds cap.
const MAX_IDENTITY: usize = 63;

/// A value refused as a [`ClusterName`] or [`ClusterIdentity`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The name cannot stand in `kubernetes.io/cluster/<name>`.
    #[error(
        "{0:?} is not a cluster name: 1 to {max} characters without '/', ',', spaces or control characters",
        max = MAX_TAG_KEY - OWNERSHIP_TAG_PREFIX.len()
    )]
    Name(String),
    /// The identity holds characters cloud tags reject, or is empty or too long.
    #[error(
        "{0:?} is not a cluster identity: 1 to {MAX_IDENTITY} letters, digits, '-', '_' or '.'"
    )]
    Identity(String),
}

/// The cluster's name (`--cluster-name`): the `<name>` of the ownership tag
/// `kubernetes.io/cluster/<name>` and of resource names derived from it. Not unique across
/// clusters; see [`ClusterIdentity`] for what is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterName(String);

impl ClusterName {
    /// `value` when it can stand in an ownership tag key.
    pub fn new(value: impl Into<String>) -> Result<Self, ClusterError> {
        let value = value.into();
        let valid = !value.is_empty()
            && OWNERSHIP_TAG_PREFIX.len() + value.len() <= MAX_TAG_KEY
            && !value
                .chars()
                .any(|c| c == '/' || c == ',' || c.is_whitespace() || c.is_control());
        if valid {
            Ok(Self(value))
        } else {
            Err(ClusterError::Name(value))
        }
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ownership tag key, `kubernetes.io/cluster/<name>`.
    pub fn ownership_tag_key(&self) -> String {
        format!("{OWNERSHIP_TAG_PREFIX}{}", self.0)
    }
}

/// The name a provider tags and names its resources with: the cluster id of the cloud's own
/// configuration file when it sets one (upstream's `KubernetesClusterID` on AWS,
/// `cluster-id` on GCE, `ClusterId` on Baidu: a cluster moving over from the upstream
/// controller keeps owning what it built), else `--cluster-name`. The one rule for every cloud
/// that reads such a key.
pub fn tagging_name(config_file_cluster_id: Option<&str>, cluster_name: &str) -> String {
    config_file_cluster_id
        .filter(|id| !id.trim().is_empty())
        .unwrap_or(cluster_name)
        .to_owned()
}

/// The cluster's identity: the UID of its kube-system namespace, or `--cluster-id`. Marked on
/// load balancers named after a Service's namespace/name, so a leftover of a deleted Service
/// of this cluster is removed and one of another cluster with the same [`ClusterName`] is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterIdentity(String);

impl ClusterIdentity {
    /// `value` when it is 1 to 63 letters, digits, `-`, `_` or `.` (cloud tags reject `,`
    /// and `/`; a namespace UID passes unchanged).
    pub fn new(value: impl Into<String>) -> Result<Self, ClusterError> {
        let value = value.into();
        let valid = (1..=MAX_IDENTITY).contains(&value.len())
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if valid {
            Ok(Self(value))
        } else {
            Err(ClusterError::Identity(value))
        }
    }

    /// The identity as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! string_newtype {
    ($ty:ident) => {
        impl FromStr for $ty {
            type Err = ClusterError;
            fn from_str(value: &str) -> Result<Self, Self::Err> {
                Self::new(value)
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        // Lets a provider that still stores a `&str` take the typed value unchanged.
        impl Deref for $ty {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $ty {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_newtype!(ClusterName);
string_newtype!(ClusterIdentity);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_files_cluster_id_wins_over_the_cluster_name() {
        for (configured, expected) in [
            (Some("prod-eu"), "prod-eu"),
            (None, "kubernetes"),
            (Some(""), "kubernetes"),
            (Some("  "), "kubernetes"),
        ] {
            assert_eq!(
                tagging_name(configured, "kubernetes"),
                expected,
                "{configured:?}"
            );
        }
    }

    #[test]
    fn identities_go_into_cloud_tags_unchanged_or_are_refused() {
        let uid = "3f2c9d8e-1b7a-4c5e-9f00-123456789abc";
        let long = "x".repeat(64);
        for (value, ok) in [
            (uid, true),
            ("prod.eu-1_a", true),
            ("", false),
            ("a/b", false),
            ("a,b", false),
            ("with space", false),
            (long.as_str(), false),
        ] {
            let parsed: Result<ClusterIdentity, _> = value.parse();
            assert_eq!(parsed.is_ok(), ok, "{value:?}: {parsed:?}");
            match parsed {
                Ok(id) => assert_eq!(id.to_string(), value),
                Err(error) => assert!(error.to_string().contains("cluster identity"), "{error}"),
            }
        }
    }

    #[test]
    fn names_must_fit_an_ownership_tag_key() {
        let longest = "n".repeat(MAX_TAG_KEY - OWNERSHIP_TAG_PREFIX.len());
        let too_long = format!("{longest}n");
        for (value, ok) in [
            ("kubernetes", true),
            ("prod_EU.1-a", true),
            (longest.as_str(), true),
            (too_long.as_str(), false),
            ("", false),
            ("a/b", false),
            ("a,b", false),
            ("a b", false),
            ("a\tb", false),
        ] {
            let parsed: Result<ClusterName, _> = value.parse();
            assert_eq!(parsed.is_ok(), ok, "{value:?}: {parsed:?}");
            if let Ok(name) = parsed {
                assert_eq!(name.as_str(), value);
                assert_eq!(
                    name.ownership_tag_key(),
                    format!("kubernetes.io/cluster/{value}")
                );
                assert!(name.ownership_tag_key().len() <= MAX_TAG_KEY);
            }
        }
    }
}

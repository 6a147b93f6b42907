//! Whether a node may receive load-balancer traffic, as one pure rule.
//!
//! The controller (which nodes a cloud load balancer forwards to), the dataplane (which nodes
//! may announce an address on the LAN, which report themselves unhealthy) and the providers'
//! own filters all ask this question. Each reads the Kubernetes objects its own way into
//! [`NodeFacts`] and [`ServiceFacts`]; the answer comes from [`ineligibility`] alone, so the
//! rule cannot drift between them. This crate knows no Kubernetes types, hence the input
//! structs.

use std::fmt;

/// Nodes carrying this label (with any value but `false`) receive no load-balancer traffic.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The cluster autoscaler taints nodes it is about to remove with this key.
pub const TO_BE_DELETED_TAINT: &str = "ToBeDeletedByClusterAutoscaler";

/// Where a node's Ready condition stands, as the caller judged it (the readiness grace is the
/// controller's: it knows the clock and the configured period).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeReadiness {
    /// Ready is `True`.
    Ready,
    /// Ready left `True` less than the grace period ago: still a backend.
    WithinGrace,
    /// Ready left `True` longer than the grace period ago.
    GraceExpired,
    /// Not Ready, and when it stopped being Ready is not known.
    NotReady,
}

/// What the rule reads from a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFacts<'a> {
    /// The Node has a deletion timestamp.
    pub being_deleted: bool,
    /// The value of [`EXCLUDE_LABEL`], when the Node carries it.
    pub exclude_label: Option<&'a str>,
    /// The Node carries the [`TO_BE_DELETED_TAINT`].
    pub autoscaler_removing: bool,
    /// Its Ready condition.
    pub readiness: NodeReadiness,
}

impl NodeFacts<'_> {
    /// The node is going away (deleted, or about to be by the autoscaler): the part of the rule
    /// that a node's own health endpoint reports (KEP-3836), whatever its labels and readiness.
    pub fn being_removed(&self) -> Option<Ineligible> {
        if self.being_deleted {
            Some(Ineligible::BeingDeleted)
        } else if self.autoscaler_removing {
            Some(Ineligible::AutoscalerRemoving)
        } else {
            None
        }
    }
}

/// What the rule reads about one Service on that node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceFacts {
    /// The Service sends traffic only to nodes with a ready local endpoint
    /// (`externalTrafficPolicy: Local` where the cloud binds only such nodes).
    pub needs_local_endpoint: bool,
    /// The node has a ready endpoint of the Service.
    pub has_local_endpoint: bool,
    /// The provider's own filter (`LoadBalancerProvider::accepts_node`) accepts the node.
    pub provider_accepts: bool,
}

impl ServiceFacts {
    /// The Service's part of the rule, for a node that passes the node's part.
    pub fn ineligibility(&self) -> Option<Ineligible> {
        if self.needs_local_endpoint && !self.has_local_endpoint {
            Some(Ineligible::NoLocalEndpoint)
        } else if !self.provider_accepts {
            Some(Ineligible::ProviderFilter)
        } else {
            None
        }
    }
}

/// Why a node receives no load-balancer traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ineligible {
    /// The Node is being deleted.
    BeingDeleted,
    /// The Node carries [`EXCLUDE_LABEL`].
    ExcludedByLabel,
    /// The cluster autoscaler is about to remove it.
    AutoscalerRemoving,
    /// Not Ready for longer than the grace period.
    GraceExpired,
    /// Not Ready, since an unknown time.
    NotReady,
    /// The Service needs a ready local endpoint and the node has none.
    NoLocalEndpoint,
    /// The provider's own node filter refuses it.
    ProviderFilter,
}

impl Ineligible {
    /// The reason in words, for logs and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Ineligible::BeingDeleted => "being deleted",
            Ineligible::ExcludedByLabel => "excluded by label",
            Ineligible::AutoscalerRemoving => "to be deleted by the cluster autoscaler",
            Ineligible::GraceExpired => "not Ready for longer than the grace period",
            Ineligible::NotReady => "not Ready",
            Ineligible::NoLocalEndpoint => "no ready local endpoint",
            Ineligible::ProviderFilter => "refused by the provider's node filter",
        }
    }
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the node `node` describes may not receive traffic (for `service`, when given); `None`
/// when it may.
///
/// Deletion, the exclusion label (any value but `false`) and the autoscaler's taint act at
/// once, as upstream's service controller; readiness as the caller judged it (a node within
/// its grace period stays); then, for a Service, a ready local endpoint when the Service needs
/// one, and the provider's own filter. Without `service` only the node's part is judged (the
/// node sets the controller fingerprints, the dataplane's announcers).
pub fn ineligibility(node: &NodeFacts<'_>, service: Option<&ServiceFacts>) -> Option<Ineligible> {
    if node.being_deleted {
        return Some(Ineligible::BeingDeleted);
    }
    if node.exclude_label.is_some_and(|value| value != "false") {
        return Some(Ineligible::ExcludedByLabel);
    }
    if let Some(removing) = node.being_removed() {
        return Some(removing);
    }
    match node.readiness {
        NodeReadiness::Ready | NodeReadiness::WithinGrace => {}
        NodeReadiness::GraceExpired => return Some(Ineligible::GraceExpired),
        NodeReadiness::NotReady => return Some(Ineligible::NotReady),
    }
    service.and_then(ServiceFacts::ineligibility)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIT: NodeFacts<'static> = NodeFacts {
        being_deleted: false,
        exclude_label: None,
        autoscaler_removing: false,
        readiness: NodeReadiness::Ready,
    };

    const SERVES: ServiceFacts = ServiceFacts {
        needs_local_endpoint: false,
        has_local_endpoint: false,
        provider_accepts: true,
    };

    #[test]
    fn every_condition_can_keep_a_node_out() {
        use Ineligible::*;
        let cases: [(
            &str,
            NodeFacts<'_>,
            Option<ServiceFacts>,
            Option<Ineligible>,
        ); 14] = [
            ("ready", FIT, None, None),
            ("ready, for a Service", FIT, Some(SERVES), None),
            (
                "deleted",
                NodeFacts {
                    being_deleted: true,
                    ..FIT
                },
                None,
                Some(BeingDeleted),
            ),
            (
                "label, empty",
                NodeFacts {
                    exclude_label: Some(""),
                    ..FIT
                },
                None,
                Some(ExcludedByLabel),
            ),
            (
                "label true",
                NodeFacts {
                    exclude_label: Some("true"),
                    ..FIT
                },
                None,
                Some(ExcludedByLabel),
            ),
            (
                "label false",
                NodeFacts {
                    exclude_label: Some("false"),
                    ..FIT
                },
                None,
                None,
            ),
            (
                "autoscaler",
                NodeFacts {
                    autoscaler_removing: true,
                    ..FIT
                },
                None,
                Some(AutoscalerRemoving),
            ),
            (
                "in grace",
                NodeFacts {
                    readiness: NodeReadiness::WithinGrace,
                    ..FIT
                },
                None,
                None,
            ),
            (
                "grace over",
                NodeFacts {
                    readiness: NodeReadiness::GraceExpired,
                    ..FIT
                },
                None,
                Some(GraceExpired),
            ),
            (
                "not ready",
                NodeFacts {
                    readiness: NodeReadiness::NotReady,
                    ..FIT
                },
                None,
                Some(NotReady),
            ),
            (
                "local, no endpoint",
                FIT,
                Some(ServiceFacts {
                    needs_local_endpoint: true,
                    ..SERVES
                }),
                Some(NoLocalEndpoint),
            ),
            (
                "local, endpoint",
                FIT,
                Some(ServiceFacts {
                    needs_local_endpoint: true,
                    has_local_endpoint: true,
                    ..SERVES
                }),
                None,
            ),
            (
                "provider refuses",
                FIT,
                Some(ServiceFacts {
                    provider_accepts: false,
                    ..SERVES
                }),
                Some(ProviderFilter),
            ),
            (
                "node reasons come first",
                NodeFacts {
                    readiness: NodeReadiness::NotReady,
                    ..FIT
                },
                Some(ServiceFacts {
                    provider_accepts: false,
                    ..SERVES
                }),
                Some(NotReady),
            ),
        ];
        for (case, node, service, want) in cases {
            assert_eq!(ineligibility(&node, service.as_ref()), want, "{case}");
        }
    }

    #[test]
    fn only_removal_counts_for_the_health_endpoint() {
        let excluded_not_ready = NodeFacts {
            exclude_label: Some("true"),
            readiness: NodeReadiness::NotReady,
            ..FIT
        };
        assert_eq!(excluded_not_ready.being_removed(), None);
        assert_eq!(
            NodeFacts {
                being_deleted: true,
                ..FIT
            }
            .being_removed(),
            Some(Ineligible::BeingDeleted)
        );
        assert_eq!(
            NodeFacts {
                autoscaler_removing: true,
                ..FIT
            }
            .being_removed(),
            Some(Ineligible::AutoscalerRemoving)
        );
    }

    #[test]
    fn reasons_read_as_words() {
        assert_eq!(Ineligible::ExcludedByLabel.to_string(), "excluded by label");
        assert_eq!(
            Ineligible::GraceExpired.as_str(),
            "not Ready for longer than the grace period"
        );
    }
}

//! GCP extension of the spec (`cloud.google.com/…`, `networking.gke.io/…`).

use serde::Serialize;

use crate::value::string_enum;

string_enum! {
    /// Value of `networking.gke.io/load-balancer-type` (or the deprecated
    /// `cloud.google.com/load-balancer-type`).
    pub enum GcpLoadBalancerType {
        /// Internal passthrough L4 load balancer; lowercase `internal` is the deprecated alias.
        Internal => "Internal" | "internal",
        /// Anything else upstream treats as external; kube-lb names it for display.
        External => "External",
    }
}

string_enum! {
    /// `cloud.google.com/network-tier`.
    pub enum NetworkTier {
        /// Premium tier (the default).
        Premium => "Premium",
        /// Standard tier.
        Standard => "Standard",
    }
}

/// Everything the GCP annotations decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcpSpec {
    /// Internal or external L4 load balancer (also reflected in the core `scheme`).
    pub load_balancer_type: GcpLoadBalancerType,
    /// Which key decided the type (the new key wins when both are set); `None` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub type_annotation: Option<String>,
    /// `networking.gke.io/internal-load-balancer-subnet`: subnet name for the internal VIP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_subnet: Option<String>,
    /// `networking.gke.io/internal-load-balancer-allow-global-access`.
    pub global_access: bool,
    /// `alpha.cloud.google.com/load-balancer-backend-share` (or the deprecated
    /// `cloud.google.com/load-balancer-backend-share`): internal only.
    pub backend_share: bool,
    /// `cloud.google.com/network-tier` (external only); `None` leaves the project default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_tier: Option<NetworkTier>,
    /// `cloud.google.com/l4-rbs: enabled`: the Service belongs to ingress-gce.
    pub regional_backend_service: bool,
}

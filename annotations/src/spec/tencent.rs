//! Tencent TKE (CLB) extension of the spec, converged by `providers/tencent`.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::value::string_enum;

string_enum! {
    /// `service.kubernetes.io/loadbalance-type` (documented upstream as "to be deprecated").
    pub enum TencentLoadBalanceType {
        /// Classic CLB (`yunapi_clb` is the API spelling); new ones can no longer be created.
        Classic => "classic" | "yunapi_clb",
        /// Application CLB (`yunapiv3_forward_clb`), the default.
        Application => "application" | "yunapiv3_forward_clb",
    }
}

string_enum! {
    /// `service.kubernetes.io/qcloud-loadbalancer-internet-charge-type`.
    pub enum InternetChargeType {
        /// Billed by traffic.
        TrafficPostpaidByHour => "TRAFFIC_POSTPAID_BY_HOUR",
        /// Billed by bandwidth.
        BandwidthPostpaidByHour => "BANDWIDTH_POSTPAID_BY_HOUR",
    }
}

string_enum! {
    /// Operator of one label-selector requirement.
    pub enum SelectorOperator {
        /// `key=value` / `key==value`.
        Equals => "=",
        /// `key!=value`.
        NotEquals => "!=",
        /// `key in (a, b)`.
        In => "in",
        /// `key notin (a, b)`.
        NotIn => "notin",
        /// `key`.
        Exists => "exists",
        /// `!key`.
        DoesNotExist => "!",
    }
}

/// One requirement of a label selector (`kubectl -l` grammar).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelRequirement {
    /// Label key.
    pub key: String,
    /// How the key is matched.
    pub operator: SelectorOperator,
    /// Values for `=`, `!=`, `in`, `notin`; empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// Everything the TKE annotations decide.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TencentSpec {
    /// `service.kubernetes.io/qcloud-loadbalancer-internal-subnetid`: internal CLB in that subnet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_subnet_id: Option<String>,
    /// `service.kubernetes.io/qcloud-loadbalancer-backends-label`: only matching nodes are
    /// backends (all requirements must hold).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub backends_label: Vec<LabelRequirement>,
    /// `service.kubernetes.io/tke-existed-lbid`: reuse this CLB (`lb-…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existed_lb_id: Option<String>,
    /// `service.kubernetes.io/service.extensiveParameters`: merged into CreateLoadBalancer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extensive_parameters: Option<Map<String, Value>>,
    /// `service.kubernetes.io/service.listenerParameters`: merged into CreateListener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener_parameters: Option<Map<String, Value>>,
    /// `service.kubernetes.io/loadbalance-type`; `None` = the application default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_balance_type: Option<TencentLoadBalanceType>,
    /// `service.kubernetes.io/qcloud-loadbalancer-internet-charge-type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internet_charge_type: Option<InternetChargeType>,
    /// `service.kubernetes.io/qcloud-loadbalancer-internet-max-bandwidth-out`, Mbps 1–2000 (the
    /// seed's range).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internet_max_bandwidth_out: Option<u32>,
    /// `service.kubernetes.io/local-svc-only-bind-node-with-pod`.
    pub local_svc_only_bind_node_with_pod: bool,
    /// `service.kubernetes.io/loadbalance-id` as last written back: the CLB that held the
    /// Service's listeners, so that they can be removed from it after a switch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_load_balancer_id: Option<String>,
    /// The extensiveParameters the Service's CLB was created with, as kube-lb recorded them
    /// (`{}` when none); `None` when nothing is recorded yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_with_extensive_parameters: Option<Map<String, Value>>,
    /// The listenerParameters the Service's listeners were created with, as kube-lb recorded
    /// them (`{}` when none); `None` when nothing is recorded yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_with_listener_parameters: Option<Map<String, Value>>,
}

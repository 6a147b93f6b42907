//! Baidu Cloud CCE extension of the spec (no provider in this repository).

use serde::Serialize;

/// Everything the Baidu CCE annotation decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BaiduSpec {
    /// `service.beta.kubernetes.io/cce-load-balancer-internal-vpc: "true"`: no EIP, the BLB's
    /// VPC address is the ingress.
    pub internal_vpc: bool,
}

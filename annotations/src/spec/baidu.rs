//! Baidu Cloud CCE extension of the spec: what the `cce-load-balancer-*` and `cce-elastic-ip-*`
//! annotations of the retired `cloud-provider-baiducloud` decide (reference other-clouds.md
//! §3.8). Built by `providers/baidu`.

use serde::Serialize;

/// How an EIP is paid for (`cce-elastic-ip-payment-timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum BaiduPaymentTiming {
    /// Pay as you go (upstream's default). Released on delete.
    #[default]
    Postpaid,
    /// Bought for a number of months. BCE refuses to release it before it expires, so kube-lb
    /// only unbinds it on delete.
    Prepaid,
}

/// How a postpaid EIP is billed (`cce-elastic-ip-billing-method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum BaiduBillingMethod {
    /// By traffic (upstream's default; bandwidth 1–1000 Mbps, default 1000).
    #[default]
    ByTraffic,
    /// By bandwidth (1–200 Mbps, default 200).
    ByBandwidth,
}

/// The EIP kube-lb creates for a public BLB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BaiduEipSpec {
    /// `cce-elastic-ip-name`; unset: the BLB's name (upstream's default).
    pub name: Option<String>,
    /// `cce-elastic-ip-payment-timing`.
    pub payment_timing: BaiduPaymentTiming,
    /// `cce-elastic-ip-billing-method` (postpaid only; `None` for prepaid).
    pub billing_method: Option<BaiduBillingMethod>,
    /// `cce-elastic-ip-bandwidth-in-mbps`, defaulted as upstream does (1000 by traffic, 200
    /// otherwise).
    pub bandwidth_mbps: u32,
    /// `cce-elastic-ip-reservation-length` in months (prepaid only).
    pub reservation_months: Option<u32>,
}

impl Default for BaiduEipSpec {
    fn default() -> Self {
        BaiduEipSpec {
            name: None,
            payment_timing: BaiduPaymentTiming::Postpaid,
            billing_method: Some(BaiduBillingMethod::ByTraffic),
            bandwidth_mbps: 1000,
            reservation_months: None,
        }
    }
}

/// Everything the Baidu CCE annotations decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct BaiduSpec {
    /// `cce-load-balancer-internal-vpc: "true"`: no EIP, the BLB's VPC address is the ingress.
    pub internal_vpc: bool,
    /// `cce-load-balancer-lb-name`: the BLB's name instead of `CCE/SVC/<cluster>/<ns>/<name>`.
    pub lb_name: Option<String>,
    /// `cce-load-balancer-subnet-id`: the subnet a new BLB is created in (create-only).
    pub subnet_id: Option<String>,
    /// `cce-load-balancer-allocate-vip: "true"`: ask for a VIP at create (upstream marks it
    /// "Baidu internal use"; passed through as `allocateVip`).
    pub allocate_vip: bool,
    /// `cce-load-balancer-reserve-lb: "true"`: keep the BLB when the Service is deleted (only
    /// kube-lb's listeners and backends are removed).
    pub reserve_lb: bool,
    /// `cce-load-balancer-exist-id`: use this existing BLB instead of creating one; never
    /// deleted (upstream sets reserve-lb for it).
    pub exist_id: Option<String>,
    /// `cce-load-balancer-id` (or the `cce-add-id` upstream writes back): the BLB this Service
    /// had, looked up first.
    pub known_id: Option<String>,
    /// The EIP options.
    pub eip: BaiduEipSpec,
}

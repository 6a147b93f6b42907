//! The AWS operation table (`ops::*`, [`OPERATIONS`], [`IAM_ACTIONS`]) and [`Calls`], the
//! adapter through which every AWS SDK call goes onto `providers/core`'s [`CloudApi`]: one rate
//! limiter (a bucket per [`Family`]: ec2/elb/elbv2 × read/mutate), one retry semantics and one
//! call counter for every provider. The SDK's own retries are switched off (see
//! [`crate::clients`]) so that each attempt that reaches AWS is limited and counted exactly once.
//!
//! Call sites keep [`AwsError`] (they match on AWS codes such as `LoadBalancerNotFound`); the
//! in-place retry decision ([`is_transient`]) is core's rule
//! ([`Classification::retries_in_place`](kube_lb_provider_core::error::Classification)) applied
//! to the same classification ([`AwsError::classification`]) that the conversion to
//! `ProviderError` uses, so the two cannot disagree.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use kube_lb_provider_core::{CallCounter, CallKind, CloudApi, PageTokens};
pub use kube_lb_provider_core::{RateLimit, RateLimits, RetryPolicy};

use crate::error::AwsError;

/// The provider label on every counted call (`kube_lb_cloud_calls_total{provider="aws"}`).
pub const PROVIDER: &str = "aws";

/// The AWS service an operation belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Service {
    /// EC2 (instances, subnets, security groups).
    Ec2,
    /// Elastic Load Balancing (Classic ELB).
    Elb,
    /// Elastic Load Balancing v2 (NLB).
    Elbv2,
}

impl Service {
    /// The IAM action prefix (`ec2` or `elasticloadbalancing`).
    pub const fn iam_prefix(self) -> &'static str {
        match self {
            Service::Ec2 => "ec2",
            Service::Elb | Service::Elbv2 => "elasticloadbalancing",
        }
    }
}

/// Whether an operation only reads state or changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// Describe*: no side effects.
    Read,
    /// Everything else.
    Mutate,
}

/// A rate-limit family: one token bucket per (service, access) pair, mirroring how AWS
/// itself buckets requests (EC2 "non-mutating" vs "mutating" actions, ELB per API group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Family {
    /// The service.
    pub service: Service,
    /// Read or mutate.
    pub access: Access,
}

impl Family {
    /// Every family, in a fixed order.
    pub const ALL: [Family; 6] = [
        Family::new(Service::Ec2, Access::Read),
        Family::new(Service::Ec2, Access::Mutate),
        Family::new(Service::Elb, Access::Read),
        Family::new(Service::Elb, Access::Mutate),
        Family::new(Service::Elbv2, Access::Read),
        Family::new(Service::Elbv2, Access::Mutate),
    ];

    const fn new(service: Service, access: Access) -> Self {
        Family { service, access }
    }

    /// The configuration name, e.g. `ec2-read`, `elbv2-mutate`.
    pub const fn name(self) -> &'static str {
        match (self.service, self.access) {
            (Service::Ec2, Access::Read) => "ec2-read",
            (Service::Ec2, Access::Mutate) => "ec2-mutate",
            (Service::Elb, Access::Read) => "elb-read",
            (Service::Elb, Access::Mutate) => "elb-mutate",
            (Service::Elbv2, Access::Read) => "elbv2-read",
            (Service::Elbv2, Access::Mutate) => "elbv2-mutate",
        }
    }

    /// Parses a configuration name.
    pub fn from_name(name: &str) -> Option<Self> {
        Family::ALL.into_iter().find(|f| f.name() == name)
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One AWS API operation the provider may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Op {
    /// The service.
    pub service: Service,
    /// The API action name, e.g. `DescribeLoadBalancers`.
    pub name: &'static str,
    /// Read or mutate.
    pub access: Access,
    /// `elb:DescribeLoadBalancers`, … (CLB and NLB share action names).
    pub label: &'static str,
}

impl Op {
    const fn read(service: Service, name: &'static str, label: &'static str) -> Self {
        Op {
            service,
            name,
            access: Access::Read,
            label,
        }
    }

    const fn mutate(service: Service, name: &'static str, label: &'static str) -> Self {
        Op {
            service,
            name,
            access: Access::Mutate,
            label,
        }
    }

    /// Read or mutate, as the call counter labels it.
    pub const fn kind(self) -> CallKind {
        match self.access {
            Access::Read => CallKind::Read,
            Access::Mutate => CallKind::Mutate,
        }
    }

    /// The rate-limit family.
    pub const fn family(self) -> Family {
        Family::new(self.service, self.access)
    }

    /// The counter key: `elb:DescribeLoadBalancers`, `elbv2:DescribeLoadBalancers`, `ec2:…`
    /// (CLB and NLB share action names, so the service is part of the key).
    pub fn key(self) -> String {
        self.label.to_string()
    }

    /// The IAM action, e.g. `elasticloadbalancing:CreateLoadBalancer`.
    pub fn iam_action(self) -> String {
        format!("{}:{}", self.service.iam_prefix(), self.name)
    }
}

/// The operations, one constant each, so call sites and the IAM list cannot drift apart.
#[allow(missing_docs)]
pub mod ops {
    use super::{Op, Service};

    pub const DESCRIBE_INSTANCES: Op =
        Op::read(Service::Ec2, "DescribeInstances", "ec2:DescribeInstances");
    pub const DESCRIBE_SUBNETS: Op =
        Op::read(Service::Ec2, "DescribeSubnets", "ec2:DescribeSubnets");
    pub const DESCRIBE_ROUTE_TABLES: Op = Op::read(
        Service::Ec2,
        "DescribeRouteTables",
        "ec2:DescribeRouteTables",
    );
    pub const DESCRIBE_VPCS: Op = Op::read(Service::Ec2, "DescribeVpcs", "ec2:DescribeVpcs");
    pub const DESCRIBE_SECURITY_GROUPS: Op = Op::read(
        Service::Ec2,
        "DescribeSecurityGroups",
        "ec2:DescribeSecurityGroups",
    );
    pub const CREATE_SECURITY_GROUP: Op = Op::mutate(
        Service::Ec2,
        "CreateSecurityGroup",
        "ec2:CreateSecurityGroup",
    );
    pub const DELETE_SECURITY_GROUP: Op = Op::mutate(
        Service::Ec2,
        "DeleteSecurityGroup",
        "ec2:DeleteSecurityGroup",
    );
    pub const AUTHORIZE_INGRESS: Op = Op::mutate(
        Service::Ec2,
        "AuthorizeSecurityGroupIngress",
        "ec2:AuthorizeSecurityGroupIngress",
    );
    pub const REVOKE_INGRESS: Op = Op::mutate(
        Service::Ec2,
        "RevokeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
    );
    pub const CREATE_TAGS: Op = Op::mutate(Service::Ec2, "CreateTags", "ec2:CreateTags");

    pub const ELB_DESCRIBE_LOAD_BALANCERS: Op = Op::read(
        Service::Elb,
        "DescribeLoadBalancers",
        "elb:DescribeLoadBalancers",
    );
    pub const ELB_DESCRIBE_ATTRIBUTES: Op = Op::read(
        Service::Elb,
        "DescribeLoadBalancerAttributes",
        "elb:DescribeLoadBalancerAttributes",
    );
    pub const ELB_DESCRIBE_TAGS: Op = Op::read(Service::Elb, "DescribeTags", "elb:DescribeTags");
    pub const ELB_CREATE_LOAD_BALANCER: Op =
        Op::mutate(Service::Elb, "CreateLoadBalancer", "elb:CreateLoadBalancer");
    pub const ELB_DELETE_LOAD_BALANCER: Op =
        Op::mutate(Service::Elb, "DeleteLoadBalancer", "elb:DeleteLoadBalancer");
    pub const ELB_CREATE_LISTENERS: Op = Op::mutate(
        Service::Elb,
        "CreateLoadBalancerListeners",
        "elb:CreateLoadBalancerListeners",
    );
    pub const ELB_DELETE_LISTENERS: Op = Op::mutate(
        Service::Elb,
        "DeleteLoadBalancerListeners",
        "elb:DeleteLoadBalancerListeners",
    );
    pub const ELB_CONFIGURE_HEALTH_CHECK: Op = Op::mutate(
        Service::Elb,
        "ConfigureHealthCheck",
        "elb:ConfigureHealthCheck",
    );
    pub const ELB_MODIFY_ATTRIBUTES: Op = Op::mutate(
        Service::Elb,
        "ModifyLoadBalancerAttributes",
        "elb:ModifyLoadBalancerAttributes",
    );
    pub const ELB_CREATE_POLICY: Op = Op::mutate(
        Service::Elb,
        "CreateLoadBalancerPolicy",
        "elb:CreateLoadBalancerPolicy",
    );
    pub const ELB_DELETE_POLICY: Op = Op::mutate(
        Service::Elb,
        "DeleteLoadBalancerPolicy",
        "elb:DeleteLoadBalancerPolicy",
    );
    pub const ELB_SET_LISTENER_POLICIES: Op = Op::mutate(
        Service::Elb,
        "SetLoadBalancerPoliciesOfListener",
        "elb:SetLoadBalancerPoliciesOfListener",
    );
    pub const ELB_SET_BACKEND_POLICIES: Op = Op::mutate(
        Service::Elb,
        "SetLoadBalancerPoliciesForBackendServer",
        "elb:SetLoadBalancerPoliciesForBackendServer",
    );
    pub const ELB_APPLY_SECURITY_GROUPS: Op = Op::mutate(
        Service::Elb,
        "ApplySecurityGroupsToLoadBalancer",
        "elb:ApplySecurityGroupsToLoadBalancer",
    );
    pub const ELB_ATTACH_SUBNETS: Op = Op::mutate(
        Service::Elb,
        "AttachLoadBalancerToSubnets",
        "elb:AttachLoadBalancerToSubnets",
    );
    pub const ELB_DETACH_SUBNETS: Op = Op::mutate(
        Service::Elb,
        "DetachLoadBalancerFromSubnets",
        "elb:DetachLoadBalancerFromSubnets",
    );
    pub const ELB_ADD_TAGS: Op = Op::mutate(Service::Elb, "AddTags", "elb:AddTags");
    pub const ELB_REMOVE_TAGS: Op = Op::mutate(Service::Elb, "RemoveTags", "elb:RemoveTags");
    pub const ELB_REGISTER: Op = Op::mutate(
        Service::Elb,
        "RegisterInstancesWithLoadBalancer",
        "elb:RegisterInstancesWithLoadBalancer",
    );
    pub const ELB_DEREGISTER: Op = Op::mutate(
        Service::Elb,
        "DeregisterInstancesFromLoadBalancer",
        "elb:DeregisterInstancesFromLoadBalancer",
    );

    pub const V2_DESCRIBE_LOAD_BALANCERS: Op = Op::read(
        Service::Elbv2,
        "DescribeLoadBalancers",
        "elbv2:DescribeLoadBalancers",
    );
    pub const V2_DESCRIBE_LISTENERS: Op = Op::read(
        Service::Elbv2,
        "DescribeListeners",
        "elbv2:DescribeListeners",
    );
    pub const V2_DESCRIBE_TARGET_GROUPS: Op = Op::read(
        Service::Elbv2,
        "DescribeTargetGroups",
        "elbv2:DescribeTargetGroups",
    );
    pub const V2_DESCRIBE_TARGET_HEALTH: Op = Op::read(
        Service::Elbv2,
        "DescribeTargetHealth",
        "elbv2:DescribeTargetHealth",
    );
    pub const V2_DESCRIBE_LB_ATTRIBUTES: Op = Op::read(
        Service::Elbv2,
        "DescribeLoadBalancerAttributes",
        "elbv2:DescribeLoadBalancerAttributes",
    );
    pub const V2_DESCRIBE_TG_ATTRIBUTES: Op = Op::read(
        Service::Elbv2,
        "DescribeTargetGroupAttributes",
        "elbv2:DescribeTargetGroupAttributes",
    );
    pub const V2_DESCRIBE_TAGS: Op = Op::read(Service::Elbv2, "DescribeTags", "elbv2:DescribeTags");
    pub const V2_CREATE_LOAD_BALANCER: Op = Op::mutate(
        Service::Elbv2,
        "CreateLoadBalancer",
        "elbv2:CreateLoadBalancer",
    );
    pub const V2_DELETE_LOAD_BALANCER: Op = Op::mutate(
        Service::Elbv2,
        "DeleteLoadBalancer",
        "elbv2:DeleteLoadBalancer",
    );
    pub const V2_CREATE_TARGET_GROUP: Op = Op::mutate(
        Service::Elbv2,
        "CreateTargetGroup",
        "elbv2:CreateTargetGroup",
    );
    pub const V2_MODIFY_TARGET_GROUP: Op = Op::mutate(
        Service::Elbv2,
        "ModifyTargetGroup",
        "elbv2:ModifyTargetGroup",
    );
    pub const V2_DELETE_TARGET_GROUP: Op = Op::mutate(
        Service::Elbv2,
        "DeleteTargetGroup",
        "elbv2:DeleteTargetGroup",
    );
    pub const V2_CREATE_LISTENER: Op =
        Op::mutate(Service::Elbv2, "CreateListener", "elbv2:CreateListener");
    pub const V2_MODIFY_LISTENER: Op =
        Op::mutate(Service::Elbv2, "ModifyListener", "elbv2:ModifyListener");
    pub const V2_DELETE_LISTENER: Op =
        Op::mutate(Service::Elbv2, "DeleteListener", "elbv2:DeleteListener");
    pub const V2_REGISTER_TARGETS: Op =
        Op::mutate(Service::Elbv2, "RegisterTargets", "elbv2:RegisterTargets");
    pub const V2_DEREGISTER_TARGETS: Op = Op::mutate(
        Service::Elbv2,
        "DeregisterTargets",
        "elbv2:DeregisterTargets",
    );
    pub const V2_MODIFY_LB_ATTRIBUTES: Op = Op::mutate(
        Service::Elbv2,
        "ModifyLoadBalancerAttributes",
        "elbv2:ModifyLoadBalancerAttributes",
    );
    pub const V2_MODIFY_TG_ATTRIBUTES: Op = Op::mutate(
        Service::Elbv2,
        "ModifyTargetGroupAttributes",
        "elbv2:ModifyTargetGroupAttributes",
    );
    pub const V2_SET_SUBNETS: Op = Op::mutate(Service::Elbv2, "SetSubnets", "elbv2:SetSubnets");
    pub const V2_ADD_TAGS: Op = Op::mutate(Service::Elbv2, "AddTags", "elbv2:AddTags");
    pub const V2_REMOVE_TAGS: Op = Op::mutate(Service::Elbv2, "RemoveTags", "elbv2:RemoveTags");
}

/// Every operation the provider may call; the IAM policy in `deploy/` is generated from and
/// checked against this list (see [`IAM_ACTIONS`]).
pub const OPERATIONS: &[Op] = &[
    ops::DESCRIBE_INSTANCES,
    ops::DESCRIBE_SUBNETS,
    ops::DESCRIBE_ROUTE_TABLES,
    ops::DESCRIBE_VPCS,
    ops::DESCRIBE_SECURITY_GROUPS,
    ops::CREATE_SECURITY_GROUP,
    ops::DELETE_SECURITY_GROUP,
    ops::AUTHORIZE_INGRESS,
    ops::REVOKE_INGRESS,
    ops::CREATE_TAGS,
    ops::ELB_DESCRIBE_LOAD_BALANCERS,
    ops::ELB_DESCRIBE_ATTRIBUTES,
    ops::ELB_DESCRIBE_TAGS,
    ops::ELB_CREATE_LOAD_BALANCER,
    ops::ELB_DELETE_LOAD_BALANCER,
    ops::ELB_CREATE_LISTENERS,
    ops::ELB_DELETE_LISTENERS,
    ops::ELB_CONFIGURE_HEALTH_CHECK,
    ops::ELB_MODIFY_ATTRIBUTES,
    ops::ELB_CREATE_POLICY,
    ops::ELB_DELETE_POLICY,
    ops::ELB_SET_LISTENER_POLICIES,
    ops::ELB_SET_BACKEND_POLICIES,
    ops::ELB_APPLY_SECURITY_GROUPS,
    ops::ELB_ATTACH_SUBNETS,
    ops::ELB_DETACH_SUBNETS,
    ops::ELB_ADD_TAGS,
    ops::ELB_REMOVE_TAGS,
    ops::ELB_REGISTER,
    ops::ELB_DEREGISTER,
    ops::V2_DESCRIBE_LOAD_BALANCERS,
    ops::V2_DESCRIBE_LISTENERS,
    ops::V2_DESCRIBE_TARGET_GROUPS,
    ops::V2_DESCRIBE_TARGET_HEALTH,
    ops::V2_DESCRIBE_LB_ATTRIBUTES,
    ops::V2_DESCRIBE_TG_ATTRIBUTES,
    ops::V2_DESCRIBE_TAGS,
    ops::V2_CREATE_LOAD_BALANCER,
    ops::V2_DELETE_LOAD_BALANCER,
    ops::V2_CREATE_TARGET_GROUP,
    ops::V2_MODIFY_TARGET_GROUP,
    ops::V2_DELETE_TARGET_GROUP,
    ops::V2_CREATE_LISTENER,
    ops::V2_MODIFY_LISTENER,
    ops::V2_DELETE_LISTENER,
    ops::V2_REGISTER_TARGETS,
    ops::V2_DEREGISTER_TARGETS,
    ops::V2_MODIFY_LB_ATTRIBUTES,
    ops::V2_MODIFY_TG_ATTRIBUTES,
    ops::V2_SET_SUBNETS,
    ops::V2_ADD_TAGS,
    ops::V2_REMOVE_TAGS,
];

/// The IAM actions the provider needs, deduplicated and sorted (CLB and NLB share the
/// `elasticloadbalancing:` namespace). Kept literal so it can be read without running code; a
/// unit test checks it equals what [`OPERATIONS`] implies.
pub const IAM_ACTIONS: &[&str] = &[
    "ec2:AuthorizeSecurityGroupIngress",
    "ec2:CreateSecurityGroup",
    "ec2:CreateTags",
    "ec2:DeleteSecurityGroup",
    "ec2:DescribeInstances",
    "ec2:DescribeRouteTables",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
    "ec2:RevokeSecurityGroupIngress",
    "elasticloadbalancing:AddTags",
    "elasticloadbalancing:ApplySecurityGroupsToLoadBalancer",
    "elasticloadbalancing:AttachLoadBalancerToSubnets",
    "elasticloadbalancing:ConfigureHealthCheck",
    "elasticloadbalancing:CreateListener",
    "elasticloadbalancing:CreateLoadBalancer",
    "elasticloadbalancing:CreateLoadBalancerListeners",
    "elasticloadbalancing:CreateLoadBalancerPolicy",
    "elasticloadbalancing:CreateTargetGroup",
    "elasticloadbalancing:DeleteListener",
    "elasticloadbalancing:DeleteLoadBalancer",
    "elasticloadbalancing:DeleteLoadBalancerListeners",
    "elasticloadbalancing:DeleteLoadBalancerPolicy",
    "elasticloadbalancing:DeleteTargetGroup",
    "elasticloadbalancing:DeregisterInstancesFromLoadBalancer",
    "elasticloadbalancing:DeregisterTargets",
    "elasticloadbalancing:DescribeListeners",
    "elasticloadbalancing:DescribeLoadBalancerAttributes",
    "elasticloadbalancing:DescribeLoadBalancers",
    "elasticloadbalancing:DescribeTags",
    "elasticloadbalancing:DescribeTargetGroupAttributes",
    "elasticloadbalancing:DescribeTargetGroups",
    "elasticloadbalancing:DescribeTargetHealth",
    "elasticloadbalancing:DetachLoadBalancerFromSubnets",
    "elasticloadbalancing:ModifyListener",
    "elasticloadbalancing:ModifyLoadBalancerAttributes",
    "elasticloadbalancing:ModifyTargetGroup",
    "elasticloadbalancing:ModifyTargetGroupAttributes",
    "elasticloadbalancing:RegisterInstancesWithLoadBalancer",
    "elasticloadbalancing:RegisterTargets",
    "elasticloadbalancing:RemoveTags",
    "elasticloadbalancing:SetLoadBalancerPoliciesForBackendServer",
    "elasticloadbalancing:SetLoadBalancerPoliciesOfListener",
    "elasticloadbalancing:SetSubnets",
];

/// The default limits: below AWS's own account-wide buckets (EC2 and ELB throttle reads and
/// mutations separately), so several controllers in one account do not starve each other.
/// Every family is listed; the catch-all default only matters for a family added later.
pub fn default_rate_limits() -> RateLimits {
    Family::ALL
        .into_iter()
        .fold(RateLimits::new(RateLimit::new(10, 10)), |limits, family| {
            let limit = match (family.service, family.access) {
                (Service::Ec2, Access::Read) => RateLimit::new(20, 40),
                (Service::Ec2, Access::Mutate) => RateLimit::new(5, 20),
                (_, Access::Read) => RateLimit::new(10, 40),
                (_, Access::Mutate) => RateLimit::new(4, 20),
            };
            limits.with_family(family.name(), limit)
        })
}

/// Whether the in-place retry should repeat `error`: a throttling, server or transport failure
/// (the same request is likely to succeed in a moment). This is core's rule on the error's
/// classification, the one its `ProviderError` conversion uses, read without consuming the
/// error. Conflicts and vanished resources (`DependencyViolation`, `LoadBalancerNotFound`) are
/// left to the controller's next pass: repeating them in place would not help (a dependency is
/// not torn down in 200 ms) and would turn every "describe → not found" answer, which call
/// sites expect, into `max_attempts` calls.
pub fn is_transient(error: &AwsError) -> bool {
    error.classification().retries_in_place()
}

/// The AWS side of the shared call path: maps an [`Op`] to its rate-limit family, counter
/// label and kind, and SDK errors to [`AwsError`]; [`CloudApi`] does the rest.
#[derive(Clone)]
pub struct Calls {
    api: CloudApi,
}

impl fmt::Debug for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calls").field("api", &self.api).finish()
    }
}

impl Calls {
    /// Every call waits on `limits` (families named by [`Family::name`]), is retried per
    /// `retry` when transient, and is counted on `counter` as provider `aws` with the
    /// operation label (`elb:CreateLoadBalancer`, …).
    pub fn new(limits: RateLimits, retry: RetryPolicy, counter: CallCounter) -> Arc<Self> {
        Arc::new(Calls {
            api: CloudApi::new(PROVIDER, counter, limits, retry),
        })
    }

    /// The shared call counter.
    pub fn counter(&self) -> &CallCounter {
        self.api.counter()
    }

    /// The shared call path.
    pub fn api(&self) -> &CloudApi {
        &self.api
    }

    /// Runs one AWS operation through [`CloudApi::call_with`]: a token of the operation's
    /// family before every attempt, every attempt counted, transient failures retried.
    pub async fn run<T, E, F, Fut>(&self, op: Op, mut attempt_fn: F) -> Result<T, AwsError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let api = &self.api;
        api.call_with(
            op.family().name(),
            op.label,
            op.kind(),
            is_transient,
            || {
                // The SDK's futures are large; boxing keeps each layer of the shared call
                // path a pointer wide instead of copying them into every enclosing future
                // (debug builds overflowed the test thread's stack without this).
                let attempt = Box::pin(attempt_fn());
                async move {
                    attempt.await.map_err(|error| {
                        let error = AwsError::from_sdk(op, error);
                        if error.is_throttling() {
                            api.record_throttled(op.label);
                        }
                        error
                    })
                }
            },
        )
        .await
    }

    /// Runs a paged listing of `op` to its last page: `page(marker)` asks for one page (`None`
    /// for the first), `split` takes a page's items and the marker of the next. Each page is one
    /// [`Calls::run`]; a marker handed back a second time ends the listing with an error
    /// instead of going round the same pages for ever.
    pub async fn run_paged<T, R, E, F, Fut, S>(
        &self,
        op: Op,
        mut page: F,
        mut split: S,
    ) -> Result<Vec<T>, AwsError>
    where
        F: FnMut(Option<String>) -> Fut,
        Fut: Future<Output = Result<R, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        S: FnMut(R) -> (Vec<T>, Option<String>),
    {
        let mut found = Vec::new();
        let mut marker: Option<String> = None;
        let mut followed = PageTokens::default();
        loop {
            let response = self.run(op, || page(marker.clone())).await?;
            let (items, next) = split(response);
            found.extend(items);
            marker = followed.next(op.name, next.as_deref())?;
            if marker.is_none() {
                return Ok(found);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_lb_provider_core::ProviderError;
    use std::collections::BTreeSet;

    #[test]
    fn iam_actions_match_operations() {
        let from_ops: BTreeSet<String> = OPERATIONS.iter().map(|op| op.iam_action()).collect();
        let listed: BTreeSet<String> = IAM_ACTIONS.iter().map(|s| s.to_string()).collect();
        assert_eq!(from_ops, listed);
        let mut sorted = IAM_ACTIONS.to_vec();
        sorted.sort_unstable();
        assert_eq!(sorted, IAM_ACTIONS, "IAM_ACTIONS must stay sorted");
    }

    #[test]
    fn operation_keys_are_unique_and_name_service_and_action() {
        let keys: BTreeSet<String> = OPERATIONS.iter().map(|op| op.key()).collect();
        assert_eq!(keys.len(), OPERATIONS.len());
        for op in OPERATIONS {
            let (service, action) = op.label.split_once(':').unwrap();
            assert_eq!(action, op.name);
            let want = match op.service {
                Service::Ec2 => "ec2",
                Service::Elb => "elb",
                Service::Elbv2 => "elbv2",
            };
            assert_eq!(service, want);
        }
    }

    #[test]
    fn describes_are_reads_and_the_rest_mutate() {
        for op in OPERATIONS {
            let is_describe = op.name.starts_with("Describe");
            assert_eq!(op.access == Access::Read, is_describe, "{}", op.key());
        }
    }

    #[test]
    fn family_names_round_trip() {
        for family in Family::ALL {
            assert_eq!(Family::from_name(family.name()), Some(family));
        }
        assert_eq!(Family::from_name("s3-read"), None);
    }

    #[test]
    fn every_family_has_its_default_limit() {
        let limits = default_rate_limits();
        let cases = [
            ("ec2-read", 20.0, 40),
            ("ec2-mutate", 5.0, 20),
            ("elb-read", 10.0, 40),
            ("elb-mutate", 4.0, 20),
            ("elbv2-read", 10.0, 40),
            ("elbv2-mutate", 4.0, 20),
        ];
        assert_eq!(cases.len(), Family::ALL.len());
        for (family, per_second, burst) in cases {
            assert!(Family::from_name(family).is_some(), "{family}");
            let limit = limits.limit_for(family);
            assert_eq!(limit.per_second, per_second, "{family}");
            assert_eq!(limit.burst, burst, "{family}");
        }
    }

    fn api_error(code: &str, status: Option<u16>) -> AwsError {
        AwsError::Api {
            operation: "CreateLoadBalancer",
            code: code.to_string(),
            message: "m".to_string(),
            status,
            source: "m".into(),
        }
    }

    #[test]
    fn only_throttling_server_and_transport_errors_are_retried_in_place() {
        // (code, status, retried in place)
        let cases = [
            ("Throttling", Some(400), true),
            ("RequestLimitExceeded", Some(503), true),
            ("InternalFailure", Some(500), true),
            ("Timeout", None, true),
            ("Dispatch", None, true),
            // Not retried in place: quotas, user errors, permissions.
            ("TooManyLoadBalancers", Some(400), false),
            ("InvalidParameterValue", Some(400), false),
            ("UnauthorizedOperation", Some(403), false),
        ];
        for (code, status, want) in cases {
            let error = api_error(code, status);
            assert_eq!(is_transient(&error), want, "{code}");
            if want {
                // Whatever is retried in place is transient in the shared taxonomy too.
                assert!(ProviderError::from(api_error(code, status)).is_transient());
            }
        }
        assert!(!is_transient(&AwsError::Invalid("bad".into())));
        assert!(!is_transient(&AwsError::Unexpected("odd".into())));
        // Conflicts and vanished resources are the controller's to retry; the converted
        // error says the same.
        for code in [
            "DependencyViolation",
            "LoadBalancerNotFound",
            "ResourceInUse",
        ] {
            let error = api_error(code, Some(400));
            assert!(!is_transient(&error), "{code}");
            assert!(!ProviderError::from(api_error(code, Some(400))).is_transient());
            assert!(ProviderError::from(api_error(code, Some(400))).is_retryable());
        }
    }

    #[test]
    fn operations_carry_their_kind() {
        assert_eq!(ops::ELB_DESCRIBE_LOAD_BALANCERS.kind(), CallKind::Read);
        assert_eq!(ops::V2_CREATE_LISTENER.kind(), CallKind::Mutate);
        assert_eq!(ops::V2_CREATE_LISTENER.family().name(), "elbv2-mutate");
    }
}

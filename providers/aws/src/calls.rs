//! Every AWS call goes through [`Calls::run`]: a per-family rate limit (governor), a count per
//! operation (read vs mutate), and retries with jittered exponential backoff on throttling and
//! server errors. The SDK's own retries are switched off so that each attempt that reaches AWS is
//! limited and counted exactly once.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use kube_lb_provider_core::{CallCounter, CallKind};
use rand::Rng;

use crate::error::AwsError;

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

/// Requests per second and burst for one family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Sustained requests per second (> 0).
    pub per_second: f64,
    /// Requests allowed at once after an idle period (≥ 1).
    pub burst: u32,
}

/// Rate limits for every family, with defaults below AWS's own account-wide buckets so several
/// controllers in one account do not starve each other.
#[derive(Debug, Clone, PartialEq)]
pub struct RateLimits {
    limits: BTreeMap<Family, RateLimit>,
}

impl Default for RateLimits {
    fn default() -> Self {
        let mut limits = BTreeMap::new();
        for family in Family::ALL {
            let limit = match (family.service, family.access) {
                (Service::Ec2, Access::Read) => RateLimit {
                    per_second: 20.0,
                    burst: 40,
                },
                (Service::Ec2, Access::Mutate) => RateLimit {
                    per_second: 5.0,
                    burst: 20,
                },
                (_, Access::Read) => RateLimit {
                    per_second: 10.0,
                    burst: 40,
                },
                (_, Access::Mutate) => RateLimit {
                    per_second: 4.0,
                    burst: 20,
                },
            };
            limits.insert(family, limit);
        }
        RateLimits { limits }
    }
}

impl RateLimits {
    /// Overrides one family.
    pub fn set(&mut self, family: Family, limit: RateLimit) {
        self.limits.insert(family, limit);
    }

    /// The limit of one family.
    pub fn get(&self, family: Family) -> RateLimit {
        self.limits.get(&family).copied().unwrap_or(RateLimit {
            per_second: 10.0,
            burst: 10,
        })
    }
}

/// Backoff between attempts of one call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, including the first (≥ 1).
    pub max_attempts: u32,
    /// Upper bound of the first backoff; doubles per attempt.
    pub base_delay: Duration,
    /// Upper bound of any single backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 8,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// "Full jitter" backoff before attempt `attempt + 1` (attempt counts from 1): a uniform
    /// draw in `[0, min(max, base·2^(attempt-1))]`, so many clients hitting one throttle spread
    /// out instead of retrying in lockstep.
    pub fn backoff(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let exp = attempt.saturating_sub(1).min(20);
        let ceiling = self
            .base_delay
            .saturating_mul(1u32 << exp)
            .min(self.max_delay);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rng.random_range(0..=millis))
    }
}

/// Counts of calls (attempts that reached the network) per operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Per operation key (`elb:DescribeLoadBalancers`, …).
    pub by_op: BTreeMap<String, u64>,
    /// Attempts that only read.
    pub reads: u64,
    /// Attempts that change state.
    pub mutations: u64,
    /// Attempts that failed with a throttling or server error and were retried.
    pub retried: u64,
}

impl CallStats {
    /// The count for one operation.
    pub fn count(&self, op: Op) -> u64 {
        self.by_op.get(&op.key()).copied().unwrap_or(0)
    }

    /// Only the mutating operations with their counts, for readable test failures.
    pub fn mutating(&self) -> BTreeMap<String, u64> {
        self.by_op
            .iter()
            .filter(|(key, _)| {
                OPERATIONS
                    .iter()
                    .any(|op| op.key() == **key && op.access == Access::Mutate)
            })
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// Rate limiters, retry policy and counters shared by every client of one provider.
pub struct Calls {
    limiters: BTreeMap<Family, DefaultDirectRateLimiter>,
    retry: RetryPolicy,
    stats: Mutex<CallStats>,
    counter: CallCounter,
}

impl fmt::Debug for Calls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Calls")
            .field("retry", &self.retry)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn quota(limit: RateLimit) -> Quota {
    let burst = NonZeroU32::new(limit.burst.max(1)).unwrap_or(NonZeroU32::MIN);
    let per_second = if limit.per_second.is_finite() && limit.per_second > 0.0 {
        limit.per_second
    } else {
        1.0
    };
    let period = Duration::from_secs_f64(1.0 / per_second).max(Duration::from_nanos(1));
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

impl Calls {
    /// Builds the limiters for `limits`.
    pub fn new(limits: &RateLimits, retry: RetryPolicy) -> Arc<Self> {
        Calls::with_counter(limits, retry, CallCounter::new())
    }

    /// Like [`Calls::new`], also recording every attempt on the shared core `counter` (which
    /// feeds the binary's `cloud_calls` metrics) under provider `aws` and the operation label.
    pub fn with_counter(
        limits: &RateLimits,
        retry: RetryPolicy,
        counter: CallCounter,
    ) -> Arc<Self> {
        let limiters = Family::ALL
            .into_iter()
            .map(|family| (family, RateLimiter::direct(quota(limits.get(family)))))
            .collect();
        Arc::new(Calls {
            limiters,
            retry,
            stats: Mutex::new(CallStats::default()),
            counter,
        })
    }

    /// A copy of the counters.
    pub fn stats(&self) -> CallStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Returns the counters and resets them to zero.
    pub fn take(&self) -> CallStats {
        self.stats
            .lock()
            .map(|mut s| std::mem::take(&mut *s))
            .unwrap_or_default()
    }

    /// The shared core counter.
    pub fn counter(&self) -> &CallCounter {
        &self.counter
    }

    fn record(&self, op: Op, retried: bool) {
        let kind = match op.access {
            Access::Read => CallKind::Read,
            Access::Mutate => CallKind::Mutate,
        };
        self.counter.record("aws", op.label, kind);
        if let Ok(mut stats) = self.stats.lock() {
            *stats.by_op.entry(op.key()).or_default() += 1;
            match op.access {
                Access::Read => stats.reads += 1,
                Access::Mutate => stats.mutations += 1,
            }
            if retried {
                stats.retried += 1;
            }
        }
    }

    /// Runs one AWS operation: waits for a rate-limit token before every attempt, counts the
    /// attempt, and retries throttling, 5xx and transport errors with jittered backoff.
    pub async fn run<T, E, F, Fut>(&self, op: Op, mut attempt_fn: F) -> Result<T, AwsError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let mut attempt = 1;
        loop {
            if let Some(limiter) = self.limiters.get(&op.family()) {
                limiter.until_ready().await;
            }
            let result = attempt_fn().await;
            let error = match result {
                Ok(value) => {
                    self.record(op, false);
                    return Ok(value);
                }
                Err(error) => AwsError::from_sdk(op, error),
            };
            let retry = error.is_transient() && attempt < self.retry.max_attempts;
            self.record(op, error.is_transient());
            if !retry {
                return Err(error);
            }
            let delay = self.retry.backoff(attempt, &mut rand::rng());
            tracing::debug!(
                operation = op.name,
                attempt,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "retrying AWS call"
            );
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn backoff_stays_within_the_exponential_ceiling() {
        let policy = RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(700),
        };
        let mut rng = rand::rng();
        for (attempt, ceiling_ms) in [(1, 100), (2, 200), (3, 400), (4, 700), (9, 700)] {
            for _ in 0..200 {
                let delay = policy.backoff(attempt, &mut rng);
                assert!(
                    delay <= Duration::from_millis(ceiling_ms),
                    "attempt {attempt}"
                );
            }
        }
    }

    #[test]
    fn counters_split_reads_and_mutations() {
        let calls = Calls::new(&RateLimits::default(), RetryPolicy::default());
        calls.record(ops::ELB_DESCRIBE_LOAD_BALANCERS, false);
        calls.record(ops::ELB_REGISTER, false);
        calls.record(ops::ELB_REGISTER, true);
        assert_eq!(calls.counter().snapshot().mutations(), 2);
        let stats = calls.take();
        assert_eq!(stats.reads, 1);
        assert_eq!(stats.mutations, 2);
        assert_eq!(stats.retried, 1);
        assert_eq!(stats.count(ops::ELB_REGISTER), 2);
        assert_eq!(stats.mutating().len(), 1);
        assert_eq!(calls.stats(), CallStats::default());
    }
}
